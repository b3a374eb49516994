/* dqn_fused_plan.h — the layout and the sizes of the DQN's fused update (dqn_fused.h), in plain C
 * so that the trial memory estimate can compute the very numbers the kernels are created with
 * (internal).
 *
 * The Q-network as a fused network (vx_pf_net, ppo_fused_plan.h): the trunk's layers, then the
 * heads' hidden layers side by side as one more layer (the branches' advantage layers in branch
 * order, the value's last: (branches + 1) · head_hidden columns, one product over the trunk's
 * top), then one 16-column output product — branch d's advantages in the columns the Q row puts
 * them (out_offset[d]), each read from its own head's hidden columns only, the value in column
 * out_dim — whose weights are zero between a head's columns and another head's hidden ones. */
#ifndef VIXEN_DQN_FUSED_PLAN_H
#define VIXEN_DQN_FUSED_PLAN_H

#include <stddef.h>
#include "vixen/nn.h"
#include "../ppo/ppo_fused_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The Q rows a block keeps beside the network's buffers: Q(s′) of the target, Q(s′) and Q(s) of
 * the online network, then dq — each row VX_DF_QLD floats. */
#define VX_DF_QLD 16

/* The packed layout of L into t; with src, each packed float's index in the flat parameters, −1
 * for padding. Returns the packed copy's floats. Assumes vx_df_rows(L, …) > 0. */
size_t vx_df_layout(const vx_qnet_layout *L, vx_pf_net *t, int *src);
/* Bytes of shared memory a block of `rows` rows uses. */
size_t vx_df_smem(const vx_pf_net *t, int rows);
/* The update's rows a block at this batch (16; 32 or 64 where that keeps the gradient slices to
 * 128 and fits shared memory), or 0 when the fused update does not take this network, loss and
 * batch on a device of smem_optin bytes of shared memory a block — and why. */
int vx_df_rows(const vx_qnet_layout *L, int loss, int batch, size_t smem_optin, char *why,
               size_t why_n);
/* Device bytes of the fused update's own buffers (both networks' copies, the maps, the slices). */
size_t vx_df_bytes(const vx_qnet_layout *L, int batch, int tf32);

#ifdef __cplusplus
}
#endif

#endif

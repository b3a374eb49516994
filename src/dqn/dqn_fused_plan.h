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

/* The layer-by-layer update (dqn_layers.h): one cooperative launch whose grid runs one layer's
 * product at a time, each block a tile of it, the tiles' operands staged into shared memory.
 * Its tiles (every count of rows a multiple of 16, of columns of 16): */
typedef struct {
    int rt;      /* the forward passes: rows a tile, over the three passes' rows */
    int rtb;     /* the input gradients: rows a tile */
    int ct;      /* the products: columns a tile (64 in TF32, 32 in 3×TF32: its weights twice) */
    int ch;      /* the weight gradients: rows a chunk, and a gradient slice a chunk */
    size_t smem; /* shared memory a block, bytes: the most any phase takes */
} vx_dl_plan;

/* The largest tiles whose phases each fit smem_optin bytes for the network t (vx_df_layout's)
 * in `passes` (1: TF32, 3: 3×TF32): 1, or 0 when even the smallest do not. */
int vx_dl_plan_make(const vx_pf_net *t, int passes, size_t smem_optin, vx_dl_plan *p);
/* Floats of a phase's shared memory (what vx_dl_plan_make sized); the kernel carves the same. */
size_t vx_dl_fwd_floats(const vx_pf_net *t, const vx_dl_plan *p, int E, int l);
size_t vx_dl_dgrad_floats(const vx_pf_net *t, const vx_dl_plan *p, int E, int l);
size_t vx_dl_loss_floats(const vx_pf_net *t);
size_t vx_dl_wgrad_floats(const vx_pf_net *t, const vx_dl_plan *p, int l);
/* Floats of its activations and gradients in global memory for `batch` rows: every hidden
 * layer's output over the three passes, the gradient with respect to each over s, the heads'. */
size_t vx_dl_act_floats(const vx_pf_net *t, int batch);
/* The gradient slices at this batch: a chunk of rows each. */
int vx_dl_chunks(const vx_dl_plan *p, int batch);
/* Device bytes of the layer-by-layer update's own buffers (as vx_df_bytes), or 0 when it does
 * not take L (vx_df_rows's conditions, and its tiles fitting VX_PF_SMEM_HOPPER). */
size_t vx_dl_bytes(const vx_qnet_layout *L, int loss, int batch, int tf32);

#ifdef __cplusplus
}
#endif

#endif

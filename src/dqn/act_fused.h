/* act_fused.h — the DQN's acting steps, a whole rollout's, in one launch on a CUDA device
 * (internal to the dqn layer): each step the Q-network's forward pass on tensor cores with every
 * activation in shared memory, then each environment's ε-greedy actions, its step and its n-step
 * emit (act_step.cuh, the per-layer path's own code) — where the per-layer path takes a cuBLASLt
 * GEMM a layer and head, a dueling kernel a branch, an acting kernel and an emit kernel, fifteen
 * launches a step. Layout and sizes: act_fused_plan.h.
 *
 * Precision (dqn.acting): TF32 (10-bit mantissas, the products' error about 4e-3 of a Q-value's
 * scale), 3×TF32 (about float32's accuracy, but not its bits: a near-tie between two actions may
 * break the other way than the per-layer float32 path breaks it) or BF16 (weights and activations
 * rounded to 8-bit mantissas, products accumulated in float32: half TF32's bytes of weights and
 * half its tensor-core instructions). float32 acting, the default, stays the per-layer path,
 * whose actions the CPU's match. */
#ifndef VIXEN_ACT_FUSED_H
#define VIXEN_ACT_FUSED_H

#include <cuda_runtime.h>
#include "vixen/dqn.h"
#include "vixen/env.h"
#include "rollout_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dqn_act_fused dqn_act_fused;

/* The operands of `steps` steps (device pointers). With actions NULL the kernel runs the
 * forward pass only (the tests' use), writing q; with actions, each step it also acts, steps the
 * environments and emits (emit: the rollout's), and at the end — its last block to finish, once
 * every block has read them — moves the rollout's step and the acting counter on by `steps`. */
typedef struct {
    int N;
    float *obs; /* N × VX_OBS_DIM: the current observations (the emit writes the next ones) */
    float *q;   /* N × out_dim, or NULL: the Q-values (the network's output rows) */
    vx_loss_shape shape;
    const double *eps;
    uint64_t seed;
    unsigned long long *step; /* the acting counter */
    int32_t *actions;         /* N × VX_ACTION_BRANCHES */
    vx_env_params envp;
    vx_env_state *states;
    float *next, *rew, *final_obs;
    uint8_t *te, *tr;
    int steps;
    int *tcount; /* the rollout's step counter ([0]) */
    dqn_emit_args emit;
    unsigned *done; /* the blocks finished: 0 before the launch, and left 0 after it */
} dqn_act_fused_args;

/* The kernel for network L in precision `acting` (VX_ACTING_TF32, _TF32X3 or _BF16);
 * VX_ERR_UNSUPPORTED (the message says why) when it does not take L on this device. */
vx_status dqn_act_fused_create(const vx_qnet_layout *L, int acting, vx_device *dev,
                               dqn_act_fused **out, vx_err *e);
void dqn_act_fused_free(dqn_act_fused *f);
/* The kernel's copies of the weights, remade from params (n_params floats), queued on s. */
vx_status dqn_act_fused_pack(dqn_act_fused *f, const float *params, cudaStream_t s, vx_err *e);
/* a->steps steps (or the forward pass), queued on s, with the weights of the last pack. */
vx_status dqn_act_fused_step(dqn_act_fused *f, const dqn_act_fused_args *a, cudaStream_t s,
                             vx_err *e);
size_t dqn_act_fused_reserved(const dqn_act_fused *f);

#ifdef __cplusplus
}
#endif

#endif

/* rollout_cuda.h — experience collection on the GPU (CUDA builds only): T steps of N environments,
 * each step the online network's forward pass on the current observations, per-branch ε-greedy
 * actions (the Philox draws of vx_dqn_act), the environment step, and the n-step transitions of
 * vx_nstep_push written into a staging buffer in the CPU trainer's order — all of it captured as
 * one CUDA graph. ε and the acting step counter live in device memory, so one graph serves every
 * epoch. The staging buffer is then inserted into the replay buffer by the trainer (at the hand-off
 * between collection and training).
 *
 * Acting reads a parameter vector the caller owns (the trainer copies the online weights there
 * before each rollout: the snapshot that lets collection overlap with training). */
#ifndef VIXEN_ROLLOUT_CUDA_H
#define VIXEN_ROLLOUT_CUDA_H

#include <cuda_runtime.h>
#include "vixen/dqn.h"
#include "vixen/env.h"
#include "vixen/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vx_rollout_cuda vx_rollout_cuda;

typedef struct {
    int steps;        /* T */
    int n_step;       /* n */
    double gamma;
    uint64_t seed;    /* the acting draws' key */
    const vx_qnet_layout *layout;
    const vx_loss_shape *shape;
    const float *act_params; /* device, n_params floats: the weights acting reads */
    int tf32;                /* TF32 GEMMs for the acting forward pass */
} vx_rollout_cfg;

/* env: the N environments, on a CUDA device (the rollout steps them on s; they stay the
 * caller's). */
vx_status vx_rollout_cuda_create(const vx_rollout_cfg *cfg, vx_env *env, cudaStream_t s,
                                 vx_rollout_cuda **out, vx_err *e);
void vx_rollout_cuda_free(vx_rollout_cuda *r);

/* Sets ε for the next rollout (queued on s, no wait). */
vx_status vx_rollout_cuda_set_eps(vx_rollout_cuda *r, double eps, vx_err *e);
/* One rollout of T steps, queued on the stream: a graph launch (captured on first use), or
 * (eager) the same kernels launched one by one — the reference path for the graph. */
vx_status vx_rollout_cuda_run(vx_rollout_cuda *r, int eager, vx_err *e);
/* The staged transitions of the last rollout (device pointers) and their count: N·T with n = 1;
 * with n > 1 read from pinned memory, valid once the caller has waited for the rollout. The buffer
 * is rewritten by the next rollout: insert it before starting one. */
void vx_rollout_cuda_staged(vx_rollout_cuda *r, vx_transitions *out, size_t *n);
/* Device pointer to the last rollout's episode statistics: the sum of the returns of the episodes
 * that ended, and their number (2 doubles, rewritten at the end of each rollout). */
const double *vx_rollout_cuda_episode_stats(const vx_rollout_cuda *r);

/* The state a checkpoint holds (synchronous; host arrays): the current observations (N × D), the
 * running episode returns (N), the n-step accumulator (its count/head, N × n × D observations,
 * N × n × VX_ACTION_BRANCHES actions, N × n rewards) and the acting step counter. */
typedef struct {
    float *obs;
    double *episode_return;
    vx_nstep *nstep;
    uint64_t *act_step;
} vx_rollout_state;
vx_status vx_rollout_cuda_get_state(vx_rollout_cuda *r, vx_rollout_state *st, vx_err *e);
vx_status vx_rollout_cuda_set_state(vx_rollout_cuda *r, const vx_rollout_state *st, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

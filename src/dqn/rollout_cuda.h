/* rollout_cuda.h — the DQN's experience collection on a CUDA device (internal to the dqn layer):
 * T steps of N environments, each step the acting network's forward pass on the current
 * observations, per-branch ε-greedy actions and the n-step transitions (dqn_act.h, the CPU's
 * arithmetic), the environment step — captured as a CUDA graph that loops over one step's
 * body, and a second for the rollout's tail. ε, the acting step counter and the step within the
 * rollout live in device memory, so the graphs serve every epoch. The transitions land in a
 * staging buffer in the CPU collection's order, for the caller to insert into the replay buffer.
 *
 * Acting reads a parameter vector the caller owns (its snapshot of the online weights: the one
 * that lets collection overlap with training). */
#ifndef VIXEN_ROLLOUT_CUDA_H
#define VIXEN_ROLLOUT_CUDA_H

#include <cuda_runtime.h>
#include "vixen/dqn.h"
#include "vixen/env.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dqn_rollout dqn_rollout;

typedef struct {
    int steps;  /* T */
    int n_step; /* n */
    double gamma;
    uint64_t seed; /* the acting draws' key */
    const vx_qnet_layout *layout;
    const vx_loss_shape *shape;
    const float *act_params; /* device, n_params floats: the weights acting reads */
    int tf32;                /* TF32 GEMMs for the acting forward pass */
    int acting; /* VX_ACTING_FLOAT32: a GEMM a layer (float32, or TF32 with tf32); VX_ACTING_TF32,
                 * _TF32X3 or _BF16: the fused kernel in that precision (act_fused.h) */
} dqn_rollout_cfg;

/* env: the N environments, on the same device (the rollout steps them; they stay the caller's). */
vx_status dqn_rollout_create(const dqn_rollout_cfg *cfg, vx_env *env, cudaStream_t s,
                             dqn_rollout **out, vx_err *e);
void dqn_rollout_free(dqn_rollout *r);
/* Sets ε for the next rollout (queued on the rollout's stream). */
vx_status dqn_rollout_set_eps(dqn_rollout *r, double eps, vx_err *e);
/* One rollout of T steps, queued: the graphs' launches (captured at the first), or (eager) the
 * same kernels one by one. */
vx_status dqn_rollout_run(dqn_rollout *r, int eager, vx_err *e);
/* The graphs captured and instantiated now instead of at the first run: at creation, before the
 * trials sharing the GPU start working (an instantiation while others run took 100 times as
 * long). Nothing runs. */
vx_status dqn_rollout_prepare(dqn_rollout *r, vx_err *e);
/* The staged transitions of the last rollout (device pointers) and their count: N·T with n = 1;
 * with n > 1 read from pinned memory, valid once the rollout is done. The buffer is rewritten by
 * the next rollout: insert it before starting one. */
void dqn_rollout_staged(dqn_rollout *r, vx_transitions *out, size_t *n);
/* The last rollout's episode statistics (device, 2 doubles: the sum of the returns of the
 * episodes that ended, and their number). */
const double *dqn_rollout_episode_stats(const dqn_rollout *r);
size_t dqn_rollout_reserved(const dqn_rollout *r);
/* Whether the steps run the fused acting kernel (cfg.acting, where it takes the network). */
int dqn_rollout_fused(const dqn_rollout *r);

/* The n-step emit's operands (device pointers): the environments' n-step rings (vx_nstep's, as
 * count, head and N × n slots), the staging buffer's fixed slots (step t, environment i, j) at
 * ((t·N + i)·n + j), which of them hold a transition (n > 1), and the running episode sums. The
 * rollout's emit kernel uses them, and so does the fused acting kernel, which emits its own
 * environments' transitions (act_step.cuh, emit_one). */
typedef struct {
    int *count, *head;
    float *obs;
    int32_t *act;
    float *rew;
} dqn_dev_nstep;

typedef struct {
    float *obs, *next_obs, *rewards;
    int32_t *actions;
    uint8_t *term, *trunc, *steps;
} dqn_dev_trans;

typedef struct {
    int n;
    double gamma;
    dqn_dev_nstep ns;
    dqn_dev_trans out;
    uint32_t *flags; /* n > 1; else NULL */
    double *ep_ret, *ret_sum, *ep_count;
} dqn_emit_args;

/* The collection state a checkpoint holds (host arrays, pinned for the copies to be
 * asynchronous): the current observations (N × D), the running episode returns (N), the n-step
 * ring (count and head as int64 [2 × N], N × n × D observations, N × n × A actions, N × n
 * rewards), the acting step counter. copy_state queues the copies on stream s; load_state is
 * synchronous. */
typedef struct {
    float *obs;
    double *ep_ret;
    int64_t *count_head;
    float *ring_obs;
    int32_t *ring_act;
    float *ring_rew;
    uint64_t *act_step;
} dqn_rollout_state;

vx_status dqn_rollout_copy_state(dqn_rollout *r, const dqn_rollout_state *st, cudaStream_t s,
                                 vx_err *e);
vx_status dqn_rollout_load_state(dqn_rollout *r, const dqn_rollout_state *st, vx_err *e);

/* ε-greedy actions for N rows of Q on the device (the rollout's own kernel, for tests): eps and
 * step in device memory, actions N × VX_ACTION_BRANCHES. */
vx_status dqn_act_cuda(const vx_loss_shape *shape, const float *q, int out_dim, int N,
                       const double *eps, uint64_t seed, const unsigned long long *step,
                       int32_t *actions, cudaStream_t s, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

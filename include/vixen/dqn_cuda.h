/* dqn_cuda.h — the learner's device pieces (CUDA builds only): ε-greedy acting on Q rows the
 * GPU network produced, with the same Philox draws as vx_dqn_act, and a device step counter. */
#ifndef VIXEN_DQN_CUDA_H
#define VIXEN_DQN_CUDA_H

#include <cuda_runtime.h>
#include "vixen/dqn.h"
#include "vixen/nn_cuda.h"
#include "vixen/replay.h"

#ifdef __cplusplus
extern "C" {
#endif

/* q: N rows of the network's output (device); eps and step live in device memory so a captured
 * rollout reads their current values; actions: N × 3 (device). Each branch of environment i
 * explores with probability eps from Philox stream (seed, 2^40 + i) at counter *step — exactly
 * vx_dqn_act's draws. */
vx_status vx_dqn_cuda_act(const vx_loss_shape *shape, const float *q, int out_dim, int N,
                          const double *eps, uint64_t seed, const unsigned long long *step,
                          int32_t *actions, cudaStream_t s, vx_err *e);
/* The per-sample loss on the device (dqn_loss.h, as vx_dqn_update computes it): q_s, q_next_online,
 * q_next_target are B output rows; b the sampled batch (device); writes dq (B × out_dim, scaled by
 * 1/B), each sample's weighted loss and new priority input. */
vx_status vx_dqn_cuda_loss(const vx_loss_shape *shape, int kind, double kappa, double gamma,
                           const float *q_s, const float *q_next_online, const float *q_next_target,
                           int out_dim, const vx_replay_batch *b, int B, float *dq, float *loss,
                           float *priority, cudaStream_t s, vx_err *e);

/* The learner on the device: one update — sample from a device replay buffer, three forwards,
 * loss, backward, clip, Adam, new priorities (and Polyak averaging when τ > 0) — captured once as
 * a CUDA graph and replayed per update with no host synchronisation. Hard target copies (τ = 0)
 * are issued by the host every target_every updates, outside the graph. */
typedef struct vx_dqn_cuda vx_dqn_cuda;

/* params: the starting online weights (host; the target starts equal). replay: a buffer created
 * on a CUDA device (the learner samples from it and updates it on s; not owned). */
vx_status vx_dqn_cuda_create(const vx_dqn_cfg *cfg, const vx_qnet_cfg *qcfg, const float *params,
                             vx_replay *replay, cudaStream_t s, vx_dqn_cuda **out, vx_err *e);
void vx_dqn_cuda_free(vx_dqn_cuda *d);
/* One update: a graph launch (plus a target copy every target_every updates when τ = 0). */
vx_status vx_dqn_cuda_update(vx_dqn_cuda *d, vx_err *e);
/* The same update issued kernel by kernel, not from the graph (the test's reference path). */
vx_status vx_dqn_cuda_update_eager(vx_dqn_cuda *d, vx_err *e);
/* Synchronous copy of the online weights to the host. */
vx_status vx_dqn_cuda_weights(vx_dqn_cuda *d, float *host, vx_err *e);

/* Sums over the updates since the last fetch: the mean of each update's mean loss, mean Q(s, a)
 * and pre-clip gradient norm is the sum / n; q_max is the largest Q(s, a). */
typedef struct {
    double loss, q_mean, grad_norm;
    float q_max;
    int pad_;
    long long n;
} vx_dqn_cuda_acc;

/* Queues a copy of the accumulator into pinned host memory and its reset, behind an event, on the
 * learner's stream; no wait. */
vx_status vx_dqn_cuda_stats_fetch(vx_dqn_cuda *d, vx_err *e);
/* Waits for the last fetch's event (normally long past) and returns what it copied. */
vx_status vx_dqn_cuda_stats_read(vx_dqn_cuda *d, vx_dqn_cuda_acc *out, vx_err *e);

/* The device online parameters, the learner's stream, the updates made. */
float *vx_dqn_cuda_online(vx_dqn_cuda *d);
cudaStream_t vx_dqn_cuda_stream(vx_dqn_cuda *d);
long long vx_dqn_cuda_updates(const vx_dqn_cuda *d);
/* Synchronous copies of everything a checkpoint holds (n_params floats each). */
vx_status vx_dqn_cuda_get_state(vx_dqn_cuda *d, float *online, float *target, float *m, float *v,
                                long long *adam_t, vx_err *e);
vx_status vx_dqn_cuda_set_state(vx_dqn_cuda *d, const float *online, const float *target,
                                const float *m, const float *v, long long adam_t,
                                long long updates, vx_err *e);

/* *counter += by, on the device (after the act that read it). */
vx_status vx_cuda_counter_add(unsigned long long *counter, unsigned long long by, cudaStream_t s,
                              vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

/* learner_cuda.h — the DQN learner on a CUDA device (internal to the dqn layer): one update —
 * sample from the device replay buffer, online([s; s′]) and target(s′) forwards, the loss,
 * backward, clipped Adam, new priorities (and Polyak averaging when τ > 0) — captured once as the
 * body of a CUDA graph's loop, n updates a launch, with no host synchronisation. Hard target
 * copies (τ = 0) every target_every updates happen inside the loop (by the host, kernel by
 * kernel). Statistics (loss, Q, norm)
 * accumulate on the device and are fetched behind an event. */
#ifndef VIXEN_LEARNER_CUDA_H
#define VIXEN_LEARNER_CUDA_H

#include <cuda_runtime.h>
#include "vixen/dqn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dqn_learner dqn_learner;

/* Sums over the updates since the last fetch: the mean of each update's mean loss, mean Q(s, a)
 * and pre-clip gradient norm is the sum / n; q_max is the largest Q(s, a). */
typedef struct {
    double loss, q_mean, grad_norm;
    float q_max;
    int pad_;
    long long n;
} dqn_learner_acc;

/* params: the starting online weights (host; the target starts equal). s: the learner's stream.
 * replay may be NULL for a learner driven only by dqn_learner_update_batch. */
vx_status dqn_learner_create(const vx_dqn_cfg *cfg, const vx_qnet_layout *L,
                             const vx_loss_shape *shape, const float *params, vx_replay *replay,
                             vx_device *dev, cudaStream_t s, dqn_learner **out, vx_err *e);
/* A group of K learners run as one (fused trials): one network layout, loss, support, batch and
 * TF32 setting (an error names the first key that differs); each member its own γ, κ, τ,
 * target_every, clip and Adam settings (cfgs[k]), its own replay buffer (replays[k]; replays
 * NULL for update_batch only), weights, moments and statistics. Every launch covers all members
 * (vx_qnet_create_group, vx_optim_create_group; the loss one kernel over K × batch samples).
 * params: K × dqn_learner_stride floats, member k's at k × stride. dqn_learner_create is the
 * group of one (stride n_params). Where this header speaks of "the" weights, batch, priorities,
 * statistics or state, a group has K of each, member by member at its stride. */
vx_status dqn_learner_create_group(const vx_dqn_cfg *cfgs, int K, const vx_qnet_layout *L,
                                   const vx_loss_shape *shape, const float *params,
                                   vx_replay *const *replays, vx_device *dev, cudaStream_t s,
                                   dqn_learner **out, vx_err *e);
int dqn_learner_members(const dqn_learner *d);
/* 1 when the learner updates through the fused kernels (dqn.fused; dqn_fused.h). */
int dqn_learner_fused(const dqn_learner *d);
/* A group's members whose runs have stopped (stopped[k] 1, host memory, K flags): from the next
 * update on their optimizer steps are skipped, so their weights stay as they are (they are still
 * sampled and computed: the graph is the group's). Queued on the learner's stream; call it at
 * most once between two reads of the statistics (it stages the flags in pinned memory). */
vx_status dqn_learner_set_stopped(dqn_learner *d, const int *stopped, vx_err *e);
/* Floats from one member's weights (and target, moments) to the next's; n_params for one.
 * stride_for: the same before creation, for a group of K at that batch. */
size_t dqn_learner_stride(const dqn_learner *d);
size_t dqn_learner_stride_for(const vx_qnet_layout *L, int batch, int K);
void dqn_learner_free(dqn_learner *d);
/* One update: a graph launch (captured at the first), or (eager) its kernels one by one. */
vx_status dqn_learner_update(dqn_learner *d, int eager, vx_err *e);
/* n updates (n ≥ 1) as one launch of the captured loop; dqn_learner_update(d, 0) is n = 1. */
vx_status dqn_learner_update_n(dqn_learner *d, int n, vx_err *e);
/* The loop graph captured and instantiated now instead of at the first update (as
 * dqn_rollout_prepare: before the trials sharing the GPU start working); the replay buffer may
 * still be empty (a rank buffer's first sort must come first: not for one). Nothing runs. */
vx_status dqn_learner_prepare(dqn_learner *d, vx_err *e);
/* The loop graph dropped (the replay buffer's settings changed under it: a load); the next update
 * builds it again. */
void dqn_learner_forget_graph(dqn_learner *d);
/* For tests: one update (eager), as dqn_learner_update's, on the batch b (device memory, cfg.batch
 * rows; index and gen unused; steps NULL means 1; a group: K batches, b[k] member k's) instead of
 * a sample, leaving the replay buffer alone. priority (device memory, K × cfg.batch floats; may be
 * NULL) gets each row's new priority input, the |δ| part that would have gone to
 * vx_replay_update. */
vx_status dqn_learner_update_batch(dqn_learner *d, const vx_replay_batch *b, float *priority,
                                   vx_err *e);
/* Queues the accumulators' copy into pinned memory and their reset; stats_read waits for it and
 * fills out[0 .. K−1]. */
vx_status dqn_learner_stats_fetch(dqn_learner *d, vx_err *e);
vx_status dqn_learner_stats_read(dqn_learner *d, dqn_learner_acc *out, vx_err *e);
float *dqn_learner_online(dqn_learner *d);
long long dqn_learner_updates(const dqn_learner *d);
size_t dqn_learner_reserved(const dqn_learner *d);
/* Queues copies of the online and target weights, Adam's moments and step count into host memory
 * (pinned) on the learner's stream: K × stride floats each, K step counts. */
vx_status dqn_learner_copy_state(dqn_learner *d, float *online, float *target, float *m, float *v,
                                 int64_t *adam_t, vx_err *e);
/* Replaces them (synchronous); `updates` is the update count to continue from. */
vx_status dqn_learner_load_state(dqn_learner *d, const float *online, const float *target,
                                 const float *m, const float *v, const int64_t *adam_t,
                                 long long updates, vx_err *e);

/* The per-sample loss (dqn_loss.h, as vx_dqn_update computes it), for tests: q rows of B samples
 * of batch b (device); writes dq (B × out_dim, scaled by 1/B), each sample's weighted loss and
 * new priority input. */
vx_status dqn_loss_cuda(const vx_loss_shape *shape, int kind, double kappa, double gamma,
                        const float *q_s, const float *q_next_online, const float *q_next_target,
                        int out_dim, const vx_replay_batch *b, int B, float *dq, float *loss,
                        float *priority, cudaStream_t s, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

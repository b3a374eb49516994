/* replay_group_cuda.h — K replay buffers on one GPU sampled, and their priorities updated, by one
 * launch each instead of K (fused trials: a learner group's members, src/dqn/learner_cuda.cu).
 *
 * Each member's draws, weights, batch and new priorities are exactly what its buffer's own
 * vx_replay_sample and vx_replay_update give (the same device code, run for every member side by
 * side: member blockIdx.y of the launch); only the launches are shared. One after another, K
 * members' cooperative priority updates each took the whole device in turn — the work of 64
 * trials' replays had made their fused updates barely faster than 64 learners of their own.
 * CUDA builds only; the buffers' host bookkeeping (the stream each last used) is kept as their
 * own calls keep it. */
#ifndef VIXEN_REPLAY_GROUP_CUDA_H
#define VIXEN_REPLAY_GROUP_CUDA_H

#include <cuda_runtime.h>
#include "vixen/replay.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vx_replay_group vx_replay_group;

/* A group of the K buffers r[k], bound to member k's batch out[k] (device arrays of B rows, as
 * vx_replay_sample fills them; the group keeps its own device copy of the K records) and its
 * new priorities' inputs at td + k × td_stride (B floats each, device memory). *g is NULL (and
 * VX_OK) where the buffers do not qualify — K < 2, a buffer on the CPU or rank-based, buffers of
 * different kinds, capacities or state widths, B past one update launch, or more blocks than can
 * be resident at once — and the caller then works buffer by buffer; `why` (may be NULL, n bytes)
 * then says which. The members' settings (seed, α, ε) and arrays are read at creation: a buffer
 * in a group is never loaded from a file (a group's trials never resume). */
vx_status vx_replay_group_create(vx_replay *const *r, int K, const vx_replay_batch *out,
                                 const float *td, size_t td_stride, size_t B, vx_device *dev,
                                 vx_replay_group **g, char *why, size_t n, vx_err *e);
/* Every member's sample of B into its batch, on stream s (capturable). A member whose buffer
 * has left the device (a launch failed) makes it an error: the group's launches would read
 * freed arrays. */
vx_status vx_replay_group_sample(vx_replay_group *g, cudaStream_t s, vx_err *e);
/* Every member's priority update from its batch's index and stamps and its td, on stream s
 * (nothing for uniform buffers). */
vx_status vx_replay_group_update(vx_replay_group *g, cudaStream_t s, vx_err *e);
/* Device bytes the group's records hold. */
size_t vx_replay_group_reserved(const vx_replay_group *g);
/* Its own records only: the buffers stay their owners'. Call when nothing queued uses it. */
void vx_replay_group_free(vx_replay_group *g);

#ifdef __cplusplus
}
#endif

#endif

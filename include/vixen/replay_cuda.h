/* replay_cuda.h — the replay buffer on the GPU, end to end (CUDA builds only).
 *
 * The same contract as replay.h (samplers, IS weights, stamps, clamping, no drift), with every
 * array in device memory and every call asynchronous on the caller's stream: insert takes a batch
 * already on the device, sample writes a device batch, update reads device TD errors. β, the
 * running maximum priority, the RNG counter and the clamp/stale counters live in device memory,
 * so sample → … → update can be captured in a CUDA graph and replayed. The only reads back to the
 * host are vx_replay_cuda_stats and vx_replay_cuda_prob (explicit, synchronous).
 *
 * Fallback: if the device allocation fails at creation (out of memory), or a launch fails later,
 * the buffer moves to the CPU implementation for the rest of its life and logs one warning
 * saying why; calls keep their device-pointer signatures (the data is staged through the host),
 * so training continues. Rank-based sampling re-sorts on the device every `rank_refresh` sample
 * calls; the host decides when (a captured graph holds the draws, not the sort). */
#ifndef VIXEN_REPLAY_CUDA_H
#define VIXEN_REPLAY_CUDA_H

#include <cuda_runtime.h>
#include "vixen/replay.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vx_replay_cuda vx_replay_cuda;

vx_status vx_replay_cuda_create(const vx_replay_cfg *cfg, vx_replay_cuda **out, vx_err *e);
void vx_replay_cuda_free(vx_replay_cuda *r);
/* 1 while on the device, 0 after falling back to the CPU. */
int vx_replay_cuda_on_device(const vx_replay_cuda *r);

/* Transitions stored (kept on the host as inserts are queued: no device read). */
size_t vx_replay_cuda_size(const vx_replay_cuda *r);
/* t: device pointers, n transitions. */
vx_status vx_replay_cuda_insert(vx_replay_cuda *r, const vx_transitions *t, size_t n,
                                cudaStream_t s, vx_err *e);
/* Sets β in device memory (an async copy from the host value). */
vx_status vx_replay_cuda_set_beta(vx_replay_cuda *r, double beta, cudaStream_t s, vx_err *e);
/* out: device pointers, B samples, with β as last set. */
vx_status vx_replay_cuda_sample(vx_replay_cuda *r, size_t B, vx_replay_batch *out,
                                cudaStream_t s, vx_err *e);
/* Rank-based buffers: re-sort now (sample does it by itself every rank_refresh calls). */
vx_status vx_replay_cuda_rank_refresh(vx_replay_cuda *r, cudaStream_t s, vx_err *e);
/* index, gen, td: device pointers, n entries. Duplicate slots in one batch: the last entry wins,
 * as on the CPU. A non-finite δ is clamped to the running maximum after the batch's finite ones. */
vx_status vx_replay_cuda_update(vx_replay_cuda *r, const uint32_t *index, const uint32_t *gen,
                                const float *td, size_t n, cudaStream_t s, vx_err *e);
/* Synchronous reads, for reports and tests. total_recomputed: a fresh host sum of the leaves. */
vx_status vx_replay_cuda_stats(vx_replay_cuda *r, vx_replay_stats *st, double *total_recomputed,
                               vx_err *e);
/* P(i) under the current priorities (synchronous). */
vx_status vx_replay_cuda_prob(vx_replay_cuda *r, size_t i, double *p, vx_err *e);

/* The CPU buffer's file format (vx_replay_save), so a run saved on either path resumes on either:
 * save reads the device buffer back (synchronous); load requires the same kind, capacity and
 * observation width. */
vx_status vx_replay_cuda_save(vx_replay_cuda *r, const char *path, vx_err *e);
vx_status vx_replay_cuda_load(vx_replay_cuda *r, const char *path, vx_err *e);

/* Test hooks: make the next device allocation (at creation) or the next kernel launch fail. */
typedef enum { VX_FAULT_NONE, VX_FAULT_ALLOC, VX_FAULT_LAUNCH } vx_fault;
void vx_replay_cuda_inject_fault(vx_fault f);

#ifdef __cplusplus
}
#endif

#endif

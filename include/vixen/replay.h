/* replay.h — the experience replay buffer: one type, three samplers, on the CPU (the reference)
 * or resident on a CUDA device.
 *
 *   uniform        every stored transition equally likely, weights 1;
 *   proportional   P(i) = p_i^α / Σ_k p_k^α, stratified (one draw per equal slice of the total),
 *                  over a sum tree with float64 nodes recomputed from their children (no drift);
 *   rank           P(i) ∝ rank(i)^−α, rank 1 the largest priority; ranks from a sort refreshed
 *                  every `rank_refresh` sample calls; exact inverse-CDF draws inside B equal-mass
 *                  strata.
 * Schaul et al. 2016. Importance weights w_i = (N·P(i))^−β / max_j w_j, the max over the whole
 * buffer (the weight of the least likely item). Priorities p = |δ| + ε; new items get the largest
 * priority seen so far; a non-finite δ is clamped to that largest priority and counted. The draw,
 * weight and tree-sizing arithmetic is shared by both backends (replay_math.h).
 *
 * Every sample carries the slot's generation stamp; an update whose stamp no longer matches (the
 * slot was overwritten since it was sampled) is ignored and counted.
 *
 * Arrays passed in and out live in the memory of the buffer's device (host memory for the CPU);
 * work is queued on the stream given (NULL on the CPU, where a call is done when it returns). On a
 * GPU nothing is read back during training: β, the running maximum priority, the draw counter and
 * the clamp/stale counters live in device memory, so sample → … → update can be captured in a CUDA
 * graph. Reads (stats, prob, save) are synchronous: they wait for the stream of the last call.
 * The calls on one buffer must be ordered (queued on one stream, or streams joined by events): on
 * a GPU two at once would share the draw counter and the update's claims. An update's captured
 * kernel is a cooperative launch, which CUDA refuses inside a conditional graph node under MPS.
 *
 * GPU fallback: if the device allocation fails at creation (out of memory or over the context's
 * budget), or a launch fails later, the buffer moves to the CPU implementation for the rest of
 * its life and logs one warning saying why; calls keep their device-pointer arguments (the data
 * is staged through the host), so training continues.
 *
 * Shapes: n inserted, B sampled, D = obs_dim. */
#ifndef VIXEN_REPLAY_H
#define VIXEN_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/device.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { VX_REPLAY_UNIFORM, VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK } vx_replay_kind;

typedef struct {
    vx_replay_kind kind;
    size_t capacity;
    int obs_dim;      /* VX_OBS_DIM */
    double alpha;     /* 0.6 (proportional), 0.7 (rank) */
    double eps;       /* 1e-6, added to |δ| */
    int rank_refresh; /* 100 sample calls between sorts */
    uint64_t seed;
} vx_replay_cfg;

void vx_replay_cfg_default(vx_replay_cfg *c, vx_replay_kind kind, size_t capacity);
/* The settings' own checks (a known kind, capacity 1..2^31, obs_dim ≥ 1, α ≥ 0, ε > 0,
 * refresh ≥ 1); the error names the field. vx_replay_create makes them first. */
vx_status vx_replay_cfg_check(const vx_replay_cfg *c, vx_err *e);
/* Bytes of memory per stored transition (storage + priority structures), for sizing. */
size_t vx_replay_bytes_per_transition(const vx_replay_cfg *cfg);

/* n transitions to insert. steps: the n-step count of each (NULL means 1). */
typedef struct {
    const float *obs, *next_obs; /* n × D */
    const int32_t *actions;      /* n × VX_ACTION_BRANCHES, each inside its branch */
    const float *rewards;        /* n */
    const uint8_t *terminated, *truncated, *steps;
} vx_transitions;

/* B samples, written by vx_replay_sample (steps may be NULL: not wanted). */
typedef struct {
    float *obs, *next_obs;
    int32_t *actions;
    float *rewards;
    uint8_t *terminated, *truncated, *steps;
    float *weights; /* importance weights in (0, 1] */
    uint32_t *index, *gen;
} vx_replay_batch;

typedef struct {
    size_t size, capacity;
    uint64_t inserted;      /* transitions ever inserted */
    double total;           /* Σ p^α as stored (proportional) */
    double max_priority;    /* the largest p seen */
    uint64_t clamped;       /* non-finite priorities clamped */
    uint64_t stale_updates; /* updates ignored because the slot was overwritten */
    uint64_t refreshes;     /* rank sorts (counted on the CPU only) */
} vx_replay_stats;

typedef struct vx_replay vx_replay;

/* dev NULL: the CPU. */
vx_status vx_replay_create(const vx_replay_cfg *cfg, vx_device *dev, vx_replay **out, vx_err *e);
void vx_replay_free(vx_replay *r);
vx_device *vx_replay_device(const vx_replay *r);
/* 1 while the data is where the buffer was created (always on the CPU); 0 after a GPU buffer
 * fell back to the CPU. */
int vx_replay_on_device(const vx_replay *r);
/* Transitions stored (host bookkeeping: no read back). */
size_t vx_replay_size(const vx_replay *r);
/* Device memory the buffer reserved (its snapshot included, once one was taken). */
size_t vx_replay_reserved(const vx_replay *r);

/* Copies n transitions in, overwriting the oldest once full. An action outside its branch
 * (exposure 0..8, order type 0..2, urgency 0..2) is an error on the CPU (nothing inserted). */
vx_status vx_replay_insert(vx_replay *r, const vx_transitions *t, size_t n, vx_stream s, vx_err *e);
/* β for the weights of the samples that follow (0.4 until set), in [0, 1]. */
vx_status vx_replay_set_beta(vx_replay *r, double beta, vx_stream s, vx_err *e);
/* Draws B transitions. An empty buffer is an error. */
vx_status vx_replay_sample(vx_replay *r, size_t B, vx_replay_batch *out, vx_stream s, vx_err *e);
/* The buffer's work queued so far is ordered behind stream s (an owner that queued it on streams
 * of its own joined them into s): its synchronous reads and saves wait for s instead of the stream
 * its last call named. Its free waits, as every free does (device.h), for the context's own
 * streams only: work queued on a stream made outside the context must be finished first. Nothing
 * on the CPU. */
void vx_replay_follow(vx_replay *r, vx_stream s);
/* Rank-based buffers: sort now (sample also does it by itself every rank_refresh calls); other
 * kinds: nothing. */
vx_status vx_replay_rank_refresh(vx_replay *r, vx_stream s, vx_err *e);
/* New priorities |δ| + ε for sampled slots (index and gen as the sample returned). Duplicate slots
 * in one batch: the last entry wins. A non-finite δ takes the largest priority seen before its
 * chunk of VX_REPLAY_UPDATE_CHUNK entries or in it (replay_math.h). */
vx_status vx_replay_update(vx_replay *r, const uint32_t *index, const uint32_t *gen,
                           const float *td, size_t n, vx_stream s, vx_err *e);

/* Synchronous reads. total_recomputed (may be NULL): a fresh Σ p^α over the leaves, in another
 * order than the tree's, for checking the stored total. (Named _get: vx_replay_stats is the
 * type.) */
vx_status vx_replay_stats_get(vx_replay *r, vx_replay_stats *out, double *total_recomputed,
                              vx_err *e);
/* The sampling probability of slot i under the current priorities (for tests and reports). */
vx_status vx_replay_prob(vx_replay *r, size_t i, double *p, vx_err *e);

/* Everything needed to resume — contents, priorities, cursor, generations, counters, the draw
 * counter — in one file format for every backend, written atomically (temporary file, fsync,
 * rename) with an XXH3-64 checksum of the whole file in its header. A GPU buffer is written through
 * a small pinned staging buffer, never a full host copy. Load requires a buffer created with the
 * same kind, capacity and obs_dim, and trusts nothing in the file: every header field and every
 * value is range-checked before use (counters that agree with each other, finite observations and
 * rewards, actions inside their branches, flags 0 or 1, priorities finite, > 0 and at most the
 * largest, rank entries inside the buffer), then the checksum; an error names the file, the byte
 * offset, the field and the slot. Files of older formats are refused (VX_ERR_UNSUPPORTED). A
 * load refused before any data was read leaves the buffer as it was; one refused later leaves it
 * empty. */
vx_status vx_replay_save(vx_replay *r, const char *path, vx_err *e);
vx_status vx_replay_load(vx_replay *r, const char *path, vx_err *e);

/* Checkpoints that do not stop training (GPU buffers): snap queues on s a copy of the whole buffer
 * into a second device buffer (allocated at the first snap, charged to the buffer's account);
 * snap_save then writes that copy in the save format, from any thread, while the buffer goes on
 * being used on other streams. One snapshot per buffer: a snap while a snap_save runs is the
 * caller's error. A CPU buffer has no snapshot (VX_ERR_UNSUPPORTED): save it synchronously. */
vx_status vx_replay_snap(vx_replay *r, vx_stream s, vx_err *e);
/* Allocates the snapshot now (a run learns at its start whether the device has room for it, not
 * at its first checkpoint); snap would otherwise do it the first time. */
vx_status vx_replay_snap_reserve(vx_replay *r, vx_err *e);
vx_status vx_replay_snap_save(vx_replay *r, const char *path, vx_err *e);

/* Test hooks: make a GPU buffer's next device allocation (at creation) or next kernel launch
 * fail. */
typedef enum { VX_FAULT_NONE, VX_FAULT_ALLOC, VX_FAULT_LAUNCH } vx_fault;
void vx_replay_inject_fault(vx_fault f);

#ifdef __cplusplus
}
#endif

#endif

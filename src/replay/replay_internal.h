/* replay_internal.h — what the CPU and CUDA replay buffers share, not part of the public API. */
#ifndef VIXEN_REPLAY_INTERNAL_H
#define VIXEN_REPLAY_INTERNAL_H

#include <stdint.h>
#include "vixen/replay.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VX_REPLAY_FAN 16 /* children per priority-tree node: 16 doubles, two cache lines */
#define VX_REPLAY_MAX_LEVELS 10
/* The Philox stream of the sampling draws. Draw j of a sample call uses counter (draws so far + j)
 * on the CPU and on the GPU alike, so two buffers with the same seed and contents draw the same
 * uniform samples (and the same strata of the prioritised ones). */
#define VX_REPLAY_STREAM 0x52455047ull /* "REPG" */

/* The small fields of one slot, kept together (one cache line fetch per draw). */
typedef struct {
    float reward;
    uint32_t gen; /* overwrites of this slot */
    uint8_t action[3], term, trunc, steps, pad[2];
} vx_slot_meta;

/* Replaces a CPU buffer's contents with raw slots (a GPU buffer falling back hands its contents
 * over). obs, next_obs and prio hold slots [0, size); meta holds all capacity slots (the
 * generation stamps of unused slots too); priorities are the raw p = |δ| + ε. */
vx_status vx_replay_import(vx_replay *r, const float *obs, const float *next_obs,
                           const vx_slot_meta *meta, const double *prio, size_t size,
                           size_t cursor, double max_p, uint64_t inserted, vx_err *e);

/* A read-only view of a CPU buffer's raw slots and counters (a GPU buffer loading a saved file
 * takes them from here), and the counters import does not set. */
typedef struct {
    const float *obs, *next_obs;
    const vx_slot_meta *meta; /* capacity slots */
    const double *prio;
    size_t size, cursor;
    uint64_t inserted, draws, clamped, stale, seed;
    double max_p;
} vx_replay_raw;

void vx_replay_raw_view(const vx_replay *r, vx_replay_raw *out);
void vx_replay_set_counters(vx_replay *r, uint64_t draws, uint64_t clamped, uint64_t stale);

#ifdef __cplusplus
}
#endif

#endif

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

#ifdef __cplusplus
}
#endif

#endif

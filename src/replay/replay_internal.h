/* replay_internal.h — the replay buffer's insides, shared by the generic part (replay.c), the CPU
 * backend (replay_cpu.c) and the CUDA backend (replay_cuda*.cu). Not part of the public API.
 *
 * One public type, several implementations (ggml's backend pattern): a vx_replay is a table of
 * operations, the implementation's own state behind `impl`, the device it was created on and its
 * settings. replay.c checks the settings, picks the table from the device (vx_device_backend, the
 * CPU's when the device has none) and dispatches every public call through it. */
#ifndef VIXEN_REPLAY_INTERNAL_H
#define VIXEN_REPLAY_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include "vixen/env_dynamics.h" /* VX_ACTION_BRANCHES */
#include "vixen/replay.h"
#include "vixen/replay_math.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vx_replay_ops {
    const char *name;
    /* fills r->impl; r->cfg (checked) and r->dev are set */
    vx_status (*create)(vx_replay *r, vx_err *e);
    void (*free)(vx_replay *r); /* the impl, not the struct */
    int (*on_device)(const vx_replay *r);
    size_t (*size)(const vx_replay *r);
    size_t (*reserved)(const vx_replay *r);
    vx_status (*insert)(vx_replay *r, const vx_transitions *t, size_t n, vx_stream s, vx_err *e);
    vx_status (*set_beta)(vx_replay *r, double beta, vx_stream s, vx_err *e);
    vx_status (*sample)(vx_replay *r, size_t B, vx_replay_batch *out, vx_stream s, vx_err *e);
    vx_status (*rank_refresh)(vx_replay *r, vx_stream s, vx_err *e);
    vx_status (*update)(vx_replay *r, const uint32_t *index, const uint32_t *gen, const float *td,
                        size_t n, vx_stream s, vx_err *e);
    vx_status (*stats)(vx_replay *r, vx_replay_stats *out, double *total_recomputed, vx_err *e);
    vx_status (*prob)(vx_replay *r, size_t i, double *p, vx_err *e);
    vx_status (*save)(vx_replay *r, const char *path, vx_err *e);
    vx_status (*load)(vx_replay *r, const char *path, vx_err *e);
    vx_status (*snap)(vx_replay *r, vx_stream s, vx_err *e);
    vx_status (*snap_save)(vx_replay *r, const char *path, vx_err *e);
    vx_status (*snap_reserve)(vx_replay *r, vx_err *e);
} vx_replay_ops;

struct vx_replay {
    const vx_replay_ops *ops;
    void *impl;
    vx_device *dev; /* never NULL: vx_device_cpu() stands for NULL */
    vx_replay_cfg cfg;
};

extern const vx_replay_ops vx_replay_cpu_ops; /* replay_cpu.c */

/* The small fields of one slot, kept together (one cache line fetch per draw). 16 bytes, the pad
 * always zero: the save file holds these records as they are. */
typedef struct {
    float reward;
    uint32_t gen; /* overwrites of this slot */
    uint8_t action[VX_ACTION_BRANCHES], term, trunc, steps, pad[2];
} vx_slot_meta;

/* ---- the save file, one format for every backend ------------------------------------------------
 * header | obs [size × D] f32 | next_obs [size × D] f32 | meta [capacity] | prio [size] f64 |
 * rank order [order_n] u32. Native byte order; the header has no padding. */
#define VX_REPLAY_MAGIC "VXREPLAY"
#define VX_REPLAY_FORMAT 3

typedef struct {
    char magic[8];
    uint32_t format, kind;
    uint64_t capacity;
    uint32_t obs_dim, dirty;
    uint64_t size, cursor, inserted, clamped, stale, refreshes, order_n;
    int64_t calls_since_refresh;
    double max_p, alpha, eps;
    uint64_t draws, seed; /* the draws continue the saved buffer's sequence */
} vx_replay_file_header;

/* A header with magic, format and the settings' fields filled, every counter 0. */
void vx_replay_header_init(vx_replay_file_header *h, const vx_replay_cfg *cfg);
/* Reads the header from f and checks it belongs to a buffer of cfg's kind, capacity and obs_dim
 * (the errors name the file and the field). */
vx_status vx_replay_header_read(FILE *f, const char *path, const vx_replay_cfg *cfg,
                                vx_replay_file_header *h, vx_err *e);

/* ---- the test hook ------------------------------------------------------------------------------
 * The fault vx_replay_inject_fault set, kept in the core library (tests call it without CUDA): 1
 * and cleared when the pending fault is f, else 0. */
int vx_replay_fault_take(vx_fault f);

/* ---- raw access to a CPU buffer (the CUDA backend's fall-back moves its contents into one) ------
 * Writable views of the arrays of a buffer made with the CPU backend, and its counters. */
typedef struct {
    float *obs, *next_obs; /* capacity × D */
    vx_slot_meta *meta;    /* capacity */
    double *prio;          /* capacity: the raw p = |δ| + ε */
    size_t size, cursor;
    uint64_t inserted, draws, clamped, stale;
    double max_p;
} vx_replay_raw;

/* VX_ERR_ARG when r is not a CPU buffer. */
vx_status vx_replay_raw_view(vx_replay *r, vx_replay_raw *out, vx_err *e);
/* After obs, next_obs and prio rows [0, raw->size) and all of meta were written through a view:
 * takes the counters from raw and rebuilds the priority structures from prio (the rank order is
 * re-sorted at the next sample). */
vx_status vx_replay_raw_commit(vx_replay *r, const vx_replay_raw *raw, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

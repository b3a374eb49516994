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
    void (*follow)(vx_replay *r, vx_stream s); /* NULL: nothing to do (the CPU) */
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

/* ---- the save file, one format for every backend (replay_file.c) --------------------------------
 * header | obs [size × D] f32 | next_obs [size × D] f32 | meta [capacity] | prio [size] f64 |
 * rank order [order_n] u32. Native byte order; the header has no padding. Format 4 added the
 * checksum: the XXH3-64 of the header (with its checksum field 0) and every byte after it. */
#define VX_REPLAY_MAGIC "VXREPLAY"
#define VX_REPLAY_FORMAT 4

typedef struct {
    char magic[8];
    uint32_t format, kind;
    uint64_t capacity;
    uint32_t obs_dim, dirty;
    uint64_t size, cursor, inserted, clamped, stale, refreshes, order_n;
    int64_t calls_since_refresh;
    double max_p, alpha, eps;
    uint64_t draws, seed; /* the draws continue the saved buffer's sequence */
    uint64_t checksum;
} vx_replay_file_header;

/* A header with magic, format and the settings' fields filled, every counter 0. */
void vx_replay_header_init(vx_replay_file_header *h, const vx_replay_cfg *cfg);

/* The largest action of each branch a slot may hold (the environment's: exposure 0..8, order
 * type 0..2, urgency 0..2): what insert accepts and load checks. */
int vx_replay_action_max(int branch);

/* Writing a save file: the header (its checksum still 0), then the sections in order through
 * put, which hashes what it writes; end computes the checksum and writes the header again over
 * the first. The file is the caller's (an atomic file, committed after end). */
typedef struct {
    FILE *f;
    void *hash; /* XXH3 state */
    vx_replay_file_header h;
    int bad; /* a write failed */
} vx_replay_writer;

vx_status vx_replay_writer_begin(vx_replay_writer *w, FILE *f, const vx_replay_file_header *h,
                                 vx_err *e);
void vx_replay_writer_put(vx_replay_writer *w, const void *p, size_t bytes);
/* Frees the state whatever happens; VX_ERR_IO (naming path) when a write failed. */
vx_status vx_replay_writer_end(vx_replay_writer *w, const char *path, vx_err *e);

/* Reading a save file, every number checked before a backend uses it, by one set of checks
 * shared by every backend. open reads the header and range-checks each field against the buffer
 * (its kind, capacity and obs_dim must be cfg's; size, cursor and inserted must agree; order_n,
 * dirty, the refresh count and max_p inside their ranges; the file exactly as long as the header
 * says). read takes the sections in file order, in pieces of whole values that do not straddle
 * two sections, and checks every value as it passes: observations and rewards finite, actions
 * inside their branches, flags 0 or 1, n-step counts >= 1, slots beyond size empty, priorities
 * finite, > 0 and at most max_p, rank order entries inside the buffer. finish compares the
 * checksum. Errors name the file, the byte offset, the field and the slot. */
typedef struct {
    FILE *f;
    const char *path;
    vx_replay_cfg cfg;
    vx_replay_file_header h;
    void *hash;         /* XXH3 state */
    int part;           /* the section being read: obs, next_obs, meta, prio, order */
    uint64_t done;      /* bytes of it read */
    uint64_t offset;    /* bytes of the file read */
    uint64_t part_n[5]; /* bytes of each section */
} vx_replay_reader;

vx_status vx_replay_reader_open(vx_replay_reader *rd, const char *path, const vx_replay_cfg *cfg,
                                vx_err *e);
vx_status vx_replay_reader_read(vx_replay_reader *rd, void *dst, size_t bytes, vx_err *e);
vx_status vx_replay_reader_finish(vx_replay_reader *rd, vx_err *e);
void vx_replay_reader_close(vx_replay_reader *rd);

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

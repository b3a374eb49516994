/* replay_cuda_internal.h — the CUDA backend's state and what its three files share:
 * replay_cuda.cu (kernels, the device path of insert / sample / update, tree rebuilds),
 * replay_cuda_host.cu (creation, the fall-back to the CPU, synchronous reads, the operations
 * table) and replay_cuda_file.cu (chunked save and load, snapshots). Not part of the public API.
 *
 * Streams: every call queues its work on the stream it is given and remembers it (`last`); the
 * buffer's own private stream `ps` (non-blocking, from the device context) carries setup and the
 * synchronous reads, which first wait for `last`. Nothing uses the legacy default stream on its
 * own, and nothing synchronises the whole device. Memory: every device block and the pinned
 * staging come from the buffer's account `mem` (charged to the context's budget); the snapshot
 * has an account of its own, so it outlives a fall-back that a snap_save on another thread may
 * still be reading. */
#ifndef VIXEN_REPLAY_CUDA_INTERNAL_H
#define VIXEN_REPLAY_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include "../util/device_cuda.h"
#include "replay_internal.h"

#define FAN VX_REPLAY_FAN
#define FAN_SHIFT VX_REPLAY_FAN_SHIFT
#define LEVELS VX_REPLAY_MAX_LEVELS
#define UPDATE_MAX VX_REPLAY_UPDATE_CHUNK /* entries per update launch (the `win` flags) */
#define UPDATE_THREADS 256 /* a block of the update (block 0 recomputes the top levels alone) */
#define UPDATE_ENTRIES 64  /* entries a block of the update: few each, spread over many SMs */
#define TOP_NODES 256      /* tree levels this small are recomputed whole by one block */
#define SAMPLE_DRAWS 8     /* draws a block of the sample: 8 threads pick, the block gathers */
#define GROUP_DRAWS 32     /* the same for a group's samples (replay_cuda.cu) */
#define BLOCK 256
#define IO_CHUNK ((size_t)8 << 20) /* bytes per pinned staging half for save and load */

typedef struct {
    double max_p;
    double beta;
    unsigned long long clamped, stale;
    unsigned long long rng_block; /* draws made so far: the Philox counter base */
    unsigned long long max_bits;  /* update: the batch's largest finite priority, as bits */
    /* the stored count and the rank order's length, as of the last insert / sort: a captured
     * sample or update reads them here, so a graph stays right while the buffer grows */
    unsigned long long size, order_n;
    /* blocks of the running sample launch that are done: the last one advances the RNG counter
     * and sets it back to 0 */
    unsigned int sample_blocks, pad_;
} dev_state;

typedef struct {
    int depth;
    double *sum[LEVELS], *min[LEVELS];
} dev_tree;

/* Two pinned halves of `n` bytes each and their events, used in turn on stream `s`: a file is
 * written (read) through one half while the other is being copied. */
typedef struct {
    unsigned char *buf[2]; /* NULL until vx_rc_stager_ready */
    size_t n;
    cudaEvent_t ev[2];
    cudaStream_t s;
    vx_device *dev; /* whose events these are */
    vx_mem *mem;    /* whose account the halves are on */
} rc_stager;

/* The rows and counters a save file is made from: the live buffer's or a snapshot's. */
typedef struct {
    const float *obs, *next_obs; /* device, size × D */
    const vx_slot_meta *meta;    /* device, capacity */
    const double *prio;          /* device, size */
    const dev_state *ds;         /* device */
    size_t size, cursor;
    uint64_t inserted;
} rc_image;

typedef struct {
    vx_mem mem; /* its own account: freed only with the buffer */
    float *obs, *next_obs;
    vx_slot_meta *meta;
    double *prio;
    dev_state *ds;
    rc_stager io;     /* snap_save's staging and stream */
    cudaEvent_t done; /* recorded after the copies */
    int taken;
    int busy; /* a snap_save is writing (atomic) */
    /* the host side at snap time */
    size_t size, cursor;
    uint64_t inserted;
    vx_replay_cfg cfg; /* its seed: a load may change the buffer's meanwhile */
} rc_snapshot;

typedef struct {
    int on_device;
    vx_replay *cpu; /* after a fall-back: the CPU buffer that holds everything */
    vx_mem mem;
    cudaStream_t ps, last;
    int have_last;
    float *obs, *next_obs;
    vx_slot_meta *meta;
    double *prio;
    int *owner;
    unsigned char *win; /* update scratch: entry k of the batch writes its slot */
    dev_tree tree;
    vx_replay_tree_shape shape;
    /* rank-based: slots by descending priority, cumulative rank masses, and the sort's buffers */
    uint32_t *order, *iota;
    double *cdf, *rank_w, *keys_out;
    void *cub_tmp;
    size_t cub_tmp_n, order_n, cdf_n;
    int calls_since_refresh;
    dev_state *ds;
    /* the update's launch, worked out once at creation (vx_rc_update_plan): the nodes with
     * children per level, the first level of at most TOP_NODES of them (recomputed whole), the
     * most blocks that can be resident at once */
    size_t up_nodes[LEVELS];
    int up_top;
    unsigned up_blocks;
    size_t size, cursor;
    uint64_t inserted;
    double host_beta;
    rc_stager io; /* save and load, on ps */
    /* host staging of device-pointer calls once on the CPU */
    void *stage;
    size_t stage_n;
    rc_snapshot snap;
} rc_buf;

static inline rc_buf *rcb(const vx_replay *r) { return (rc_buf *)r->impl; }

/* replay_cuda.cu */
/* A launch grid of n threads; empty (a launch failure) when a launch fault is injected. */
dim3 vx_rc_grid(size_t n, int block);
/* Queues on s the initial contents of freshly allocated device arrays (zeros, empty trees, the
 * iota of the rank sort, dev_state with max_p 1 and β). */
cudaError_t vx_rc_init_device(vx_replay *r, cudaStream_t s);
/* Queues on s: leaves [0, size) from the raw priorities, the others emptied, every ancestor
 * recomputed level by level (after a load). */
cudaError_t vx_rc_rebuild_tree(vx_replay *r, size_t size, cudaStream_t s);
/* Queues on s: dev_state := *v (a launch argument: v need not outlive the call). */
cudaError_t vx_rc_set_state(vx_replay *r, const dev_state *v, cudaStream_t s);
/* Fills the update's launch plan (up_nodes, up_top, up_blocks) from the tree's shape and the
 * device (no work queued). */
void vx_rc_update_plan(vx_replay *r);
/* The bytes of scratch the rank sort and the mass scan need at capacity C (no work queued). */
cudaError_t vx_rc_sort_scratch(size_t C, size_t *bytes);
cudaError_t vx_rc_rank_refresh(vx_replay *r, cudaStream_t s);
vx_status vx_rc_insert(vx_replay *r, const vx_transitions *t, size_t n, vx_stream s, vx_err *e);
vx_status vx_rc_set_beta(vx_replay *r, double beta, vx_stream s, vx_err *e);
vx_status vx_rc_sample(vx_replay *r, size_t B, vx_replay_batch *out, vx_stream s, vx_err *e);
vx_status vx_rc_rank_refresh_entry(vx_replay *r, vx_stream s, vx_err *e);
vx_status vx_rc_update(vx_replay *r, const uint32_t *index, const uint32_t *gen, const float *td,
                       size_t n, vx_stream s, vx_err *e);

/* replay_cuda_host.cu */
/* Waits for the last call's stream and the private stream (the synchronous reads' entry). */
cudaError_t vx_rc_quiesce(rc_buf *b);
vx_status vx_rc_fall_back(vx_replay *r, const char *why, vx_err *e);
vx_status vx_rc_insert_cpu(vx_replay *r, const vx_transitions *t, size_t n, cudaStream_t s,
                           vx_err *e);
vx_status vx_rc_sample_cpu(vx_replay *r, size_t B, vx_replay_batch *out, cudaStream_t s, vx_err *e);
vx_status vx_rc_update_cpu(vx_replay *r, const uint32_t *index, const uint32_t *gen,
                           const float *td, size_t n, cudaStream_t s, vx_err *e);

/* replay_cuda_file.cu */
/* The stager's size, stream and account, nothing allocated yet (a buffer that is never saved,
 * loaded or read through it, as a search's trials' are, never pins its 16 MB: measured on an H100
 * host, twenty members' pinned halves cost a fused group 0.17 s of its start, the driver
 * page-locking a new 64 MB slab every fourth member). */
void vx_rc_stager_plan(rc_stager *io, vx_mem *mem, size_t n, cudaStream_t s);
/* Its halves and events, unless it has them. */
vx_status vx_rc_stager_ready(rc_stager *io, vx_err *e);
/* Both: plan, then ready. */
vx_status vx_rc_stager_create(rc_stager *io, vx_mem *mem, size_t n, cudaStream_t s, vx_err *e);
void vx_rc_stager_destroy(rc_stager *io);
vx_status vx_rc_save(vx_replay *r, const char *path, vx_err *e);
vx_status vx_rc_load(vx_replay *r, const char *path, vx_err *e);
vx_status vx_rc_snap(vx_replay *r, vx_stream s, vx_err *e);
vx_status vx_rc_snap_save(vx_replay *r, const char *path, vx_err *e);
vx_status vx_rc_snap_reserve(vx_replay *r, vx_err *e);
/* The snapshot's memory, stream and events (at free). */
void vx_rc_snap_free(rc_buf *b);

#endif

/* replay_cuda_internal.h — what replay_cuda.cu (kernels, device entries) and replay_cuda_host.cu
 * (the CPU fallback, host staging, synchronous reads) share. Not part of the public API. */
#ifndef VIXEN_REPLAY_CUDA_INTERNAL_H
#define VIXEN_REPLAY_CUDA_INTERNAL_H

#include "vixen/replay_cuda.h"
#include "replay_internal.h"

#define FAN VX_REPLAY_FAN
#define FAN_SHIFT 4 /* log2(FAN) */
#define LEVELS VX_REPLAY_MAX_LEVELS
#define GPU_STREAM VX_REPLAY_STREAM
#define UPDATE_MAX 16384         /* entries per update launch (shared-memory flags) */
#define BLOCK 256

typedef struct {
    double max_p;
    double beta;
    unsigned long long clamped, stale;
    unsigned long long rng_block; /* draws made so far: the Philox counter base */
    unsigned long long max_bits;  /* update: the batch's largest finite priority, as bits */
    /* the stored count and the rank order's length, as of the last insert / sort: a captured
     * sample or update reads them here, so a graph stays right while the buffer grows */
    unsigned long long size, order_n;
} dev_state;

typedef struct {
    int depth;
    double *sum[LEVELS], *min[LEVELS];
} dev_tree;

struct vx_replay_cuda {
    vx_replay_cfg cfg;
    int on_device;
    vx_replay *cpu;
    float *obs, *next_obs;
    vx_slot_meta *meta;
    double *prio;
    int *owner;
    unsigned char *win; /* update scratch: entry k of the batch writes its slot */
    dev_tree tree;
    /* rank-based: slots by descending priority, cumulative rank masses, and the sort's buffers */
    uint32_t *order, *iota;
    double *cdf, *rank_w, *keys_out;
    void *cub_tmp;
    size_t cub_tmp_n, order_n, cdf_n;
    int calls_since_refresh;
    dev_state *ds;
    size_t size, cursor;
    uint64_t inserted;
    double host_beta;
    /* host staging for the CPU path */
    void *stage;
    size_t stage_n;
};

/* replay_cuda_host.cu */
void vx_rc_free_device(vx_replay_cuda *r);
vx_status vx_rc_fall_back(vx_replay_cuda *r, const char *why, vx_err *e);
vx_status vx_rc_stage(vx_replay_cuda *r, size_t bytes, vx_err *e);
vx_status vx_rc_insert_cpu(vx_replay_cuda *r, const vx_transitions *t, size_t n, vx_err *e);
vx_status vx_rc_sample_cpu(vx_replay_cuda *r, size_t B, vx_replay_batch *out, vx_err *e);
vx_status vx_rc_update_cpu(vx_replay_cuda *r, const uint32_t *index, const uint32_t *gen,
                           const float *td, size_t n, vx_err *e);
/* replay_cuda.cu */
/* Replaces the device contents with a CPU buffer's raw slots and counters (synchronous). */
vx_status vx_rc_upload(vx_replay_cuda *r, const vx_replay_raw *raw, vx_err *e);
cudaError_t vx_rc_rank_refresh(vx_replay_cuda *r, cudaStream_t s);

#endif

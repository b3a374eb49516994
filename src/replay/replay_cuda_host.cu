/* replay_cuda_host.cu — the host side of the GPU replay buffer: creation (every block through the
 * buffer's memory account, so the context's budget can refuse it), the move to a CPU buffer when
 * the device fails (fall_back), staging device-pointer calls through the host once there, the
 * synchronous reads (stats, probabilities), and the operations table device_open.c registers.
 * The kernels and the device path are in replay_cuda.cu, save/load and snapshots in
 * replay_cuda_file.cu.
 *
 * The settings are checked by replay.c before creation (vx_replay_cfg_check): no CPU buffer is
 * built just to validate them. An allocation that fails — out of memory, or refused by the budget
 * — leaves the buffer on a CPU buffer from the start, with one warning, as does a launch failure
 * later; the calls keep their device-pointer arguments and stage through the host on the caller's
 * stream. */
#include "replay_cuda_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

cudaError_t vx_rc_quiesce(rc_buf *b)
{
    cudaError_t rc = cudaSuccess;
    if (b->have_last) rc = cudaStreamSynchronize(b->last);
    if (!rc && b->ps) rc = cudaStreamSynchronize(b->ps);
    return rc;
}

static vx_status cuda_err(vx_err *e, const char *what, cudaError_t rc)
{
    return vx_err_set(e, VX_ERR_CUDA, "replay: %s: %s", what, cudaGetErrorString(rc));
}

/* Forgets every device array (their memory is the account's). */
static void drop_device_arrays(rc_buf *b)
{
    b->obs = b->next_obs = NULL;
    b->meta = NULL;
    b->prio = NULL;
    b->owner = NULL;
    b->win = NULL;
    b->ds = NULL;
    b->order = b->iota = NULL;
    b->cdf = b->rank_w = b->keys_out = NULL;
    b->cub_tmp = NULL;
    memset(&b->tree, 0, sizeof b->tree);
    b->io.buf[0] = b->io.buf[1] = NULL;
}

static void rc_free(vx_replay *r)
{
    rc_buf *b = rcb(r);
    if (!b) return;
    vx_cuda_enter(r->dev, NULL);
    vx_rc_snap_free(b);
    vx_rc_stager_destroy(&b->io);
    vx_mem_release(&b->mem);
    vx_cuda_stream_destroy(r->dev, b->ps);
    vx_replay_free(b->cpu);
    free(b->stage);
    free(b);
    r->impl = NULL;
    cudaGetLastError();
}

/* Copies the device buffer's contents and counters straight into the arrays of the (fresh) CPU
 * buffer, on the private stream after the last call's work. */
static vx_status download(vx_replay *r, vx_err *e)
{
    rc_buf *b = rcb(r);
    size_t C = r->cfg.capacity, D = (size_t)r->cfg.obs_dim, n = b->size;
    vx_replay_raw raw;
    vx_status st = vx_replay_raw_view(b->cpu, &raw, e);
    if (st) return st;
    dev_state ds;
    cudaStream_t s = b->ps;
    /* device to pageable host memory: each copy returns once done */
    cudaError_t rc = vx_rc_quiesce(b);
    const cudaMemcpyKind d2h = cudaMemcpyDeviceToHost;
    if (!rc) rc = cudaMemcpyAsync(raw.obs, b->obs, n * D * 4, d2h, s);
    if (!rc) rc = cudaMemcpyAsync(raw.next_obs, b->next_obs, n * D * 4, d2h, s);
    if (!rc) rc = cudaMemcpyAsync(raw.meta, b->meta, C * sizeof(vx_slot_meta), d2h, s);
    if (!rc) rc = cudaMemcpyAsync(raw.prio, b->prio, n * 8, d2h, s);
    if (!rc) rc = cudaMemcpyAsync(&ds, b->ds, sizeof ds, d2h, s);
    if (!rc) rc = cudaStreamSynchronize(s);
    if (rc) {
        memset(raw.meta, 0, C * sizeof(vx_slot_meta)); /* stamps half copied: back to empty */
        return vx_err_set(e, VX_ERR_CUDA, "replay: reading the device buffer: %s",
                          cudaGetErrorString(rc));
    }
    raw.size = n, raw.cursor = b->cursor, raw.inserted = b->inserted;
    raw.draws = ds.rng_block, raw.clamped = ds.clamped, raw.stale = ds.stale, raw.max_p = ds.max_p;
    return vx_replay_raw_commit(b->cpu, &raw, e);
}

/* Moves to a CPU buffer: its contents come along when the device can still be read. */
vx_status vx_rc_fall_back(vx_replay *r, const char *why, vx_err *e)
{
    rc_buf *b = rcb(r);
    cudaGetLastError(); /* the failure that brought us here is reported below, not left pending */
    vx_status st = vx_replay_create(&r->cfg, NULL, &b->cpu, e);
    if (st) return st;
    vx_replay_set_beta(b->cpu, b->host_beta, NULL, NULL);
    int moved = b->obs && b->size > 0 && download(r, NULL) == VX_OK;
    vx_log(VX_LOG_WARN, "replay: %s; continuing on the CPU buffer (%s)", why,
           b->size == 0 ? "it was empty"
           : moved      ? "contents moved"
                        : "contents could not be read back");
    vx_mem_release(&b->mem);
    drop_device_arrays(b);
    b->on_device = 0;
    cudaGetLastError();
    return VX_OK;
}

static vx_status rc_create(vx_replay *r, vx_err *e)
{
    const vx_replay_cfg *cfg = &r->cfg;
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    rc_buf *b = (rc_buf *)calloc(1, sizeof *b);
    if (!b) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory");
    r->impl = b;
    b->host_beta = 0.4;
    vx_mem_init(&b->mem, r->dev, "replay");
    vx_mem_init(&b->snap.mem, r->dev, "replay snapshot");
    st = vx_cuda_stream_create(r->dev, &b->ps, e);
    if (st) {
        rc_free(r);
        return st;
    }
    size_t C = cfg->capacity, D = (size_t)cfg->obs_dim, bytes = 0;
    int fault = vx_replay_fault_take(VX_FAULT_ALLOC);
    vx_err ae;
    vx_status ast = VX_OK;
#define DEV_ALLOC(ptr, n)                                                                          \
    do {                                                                                           \
        size_t nb_ = (n);                                                                          \
        bytes += nb_;                                                                              \
        if (!ast)                                                                                  \
            ast = fault ? vx_err_set(&ae, VX_ERR_NOMEM, "out of memory (injected)")                \
                        : vx_mem_alloc(&b->mem, nb_, &(ptr), &ae);                                 \
    } while (0)
    DEV_ALLOC(b->obs, C * D * sizeof(float));
    DEV_ALLOC(b->next_obs, C * D * sizeof(float));
    DEV_ALLOC(b->meta, C * sizeof(vx_slot_meta));
    DEV_ALLOC(b->prio, C * sizeof(double));
    DEV_ALLOC(b->owner, C * sizeof(int));
    DEV_ALLOC(b->win, UPDATE_MAX);
    DEV_ALLOC(b->ds, sizeof(dev_state));
    if (cfg->kind == VX_REPLAY_PROPORTIONAL) {
        b->shape = vx_replay_tree_shape_of(C);
        b->tree.depth = b->shape.depth;
        for (int l = b->shape.depth; l >= 0; l--) {
            DEV_ALLOC(b->tree.sum[l], b->shape.width[l] * sizeof(double));
            DEV_ALLOC(b->tree.min[l], b->shape.width[l] * sizeof(double));
        }
    }
    cudaError_t rc = cudaSuccess;
    if (cfg->kind == VX_REPLAY_RANK) {
        DEV_ALLOC(b->order, C * sizeof(uint32_t));
        DEV_ALLOC(b->iota, C * sizeof(uint32_t));
        DEV_ALLOC(b->cdf, C * sizeof(double));
        DEV_ALLOC(b->rank_w, C * sizeof(double));
        DEV_ALLOC(b->keys_out, C * sizeof(double));
        rc = vx_rc_sort_scratch(C, &b->cub_tmp_n); /* sized once for the whole capacity */
        DEV_ALLOC(b->cub_tmp, b->cub_tmp_n);
    }
#undef DEV_ALLOC
    /* the pinned halves save and load stream through: the largest array, at most IO_CHUNK each */
    size_t io_n = C * D * sizeof(float) > C * sizeof(vx_slot_meta) ? C * D * sizeof(float)
                                                                   : C * sizeof(vx_slot_meta);
    io_n = io_n < IO_CHUNK ? (io_n + 15) / 16 * 16 : IO_CHUNK;
    vx_rc_update_plan(r);
    vx_rc_stager_plan(&b->io, &b->mem, io_n, b->ps); /* its halves at the first use */
    if (!ast && !rc) rc = vx_rc_init_device(r, b->ps);
    if (!ast && !rc) rc = cudaStreamSynchronize(b->ps);
    if (ast || rc) {
        char why[sizeof ae.msg + 64];
        snprintf(why, sizeof why, "device allocation of %.1f MB failed (%s)", bytes / 1e6,
                 ast ? ae.msg : cudaGetErrorString(rc));
        st = vx_rc_fall_back(r, why, e);
        if (st) {
            rc_free(r);
            return st;
        }
        return VX_OK;
    }
    b->on_device = 1;
    return VX_OK;
}

static int rc_on_device(const vx_replay *r) { return rcb(r)->on_device; }

static size_t rc_size(const vx_replay *r)
{
    const rc_buf *b = rcb(r);
    return b->on_device ? b->size : vx_replay_size(b->cpu);
}

static size_t rc_reserved(const vx_replay *r)
{
    const rc_buf *b = rcb(r);
    return b->mem.bytes + b->snap.mem.bytes;
}

/* ---- device-pointer calls on the CPU buffer: through host staging, synchronous on the caller's
 * stream (the staging is reused by the next call) -------------------------------------------- */

static vx_status stage(rc_buf *b, size_t bytes, vx_err *e)
{
    if (bytes <= b->stage_n) return VX_OK;
    free(b->stage);
    b->stage = malloc(bytes);
    b->stage_n = b->stage ? bytes : 0;
    return b->stage ? VX_OK : vx_err_set(e, VX_ERR_NOMEM, "replay: out of host memory staging");
}

#define D2H cudaMemcpyDeviceToHost
#define H2D cudaMemcpyHostToDevice

vx_status vx_rc_insert_cpu(vx_replay *r, const vx_transitions *t, size_t n, cudaStream_t s,
                           vx_err *e)
{
    rc_buf *b = rcb(r);
    size_t D = (size_t)r->cfg.obs_dim;
    size_t A = VX_ACTION_BRANCHES;
    vx_status st = stage(b, n * (2 * D * 4 + A * 4 + 4 + 3), e);
    if (st) return st;
    float *o = (float *)b->stage, *no = o + n * D, *rw = no + n * D;
    int32_t *a = (int32_t *)(rw + n);
    uint8_t *te = (uint8_t *)(a + n * A), *tr = te + n, *sp = tr + n;
    cudaError_t rc = cudaMemcpyAsync(o, t->obs, n * D * 4, D2H, s);
    if (!rc) rc = cudaMemcpyAsync(no, t->next_obs, n * D * 4, D2H, s);
    if (!rc) rc = cudaMemcpyAsync(rw, t->rewards, n * 4, D2H, s);
    if (!rc) rc = cudaMemcpyAsync(a, t->actions, n * A * 4, D2H, s);
    if (!rc) rc = cudaMemcpyAsync(te, t->terminated, n, D2H, s);
    if (!rc) rc = cudaMemcpyAsync(tr, t->truncated, n, D2H, s);
    if (!rc && t->steps) rc = cudaMemcpyAsync(sp, t->steps, n, D2H, s);
    if (!rc) rc = cudaStreamSynchronize(s);
    if (rc) return cuda_err(e, "staging an insert", rc);
    vx_transitions h = {o, no, a, rw, te, tr, t->steps ? sp : NULL};
    return vx_replay_insert(b->cpu, &h, n, NULL, e);
}

vx_status vx_rc_sample_cpu(vx_replay *r, size_t B, vx_replay_batch *out, cudaStream_t s, vx_err *e)
{
    rc_buf *b = rcb(r);
    size_t D = (size_t)r->cfg.obs_dim;
    size_t A = VX_ACTION_BRANCHES;
    vx_status st = stage(b, B * (2 * D * 4 + A * 4 + 4 + 4 + 4 + 4 + 3), e);
    if (st) return st;
    float *o = (float *)b->stage, *no = o + B * D, *rw = no + B * D, *w = rw + B;
    int32_t *a = (int32_t *)(w + B);
    uint32_t *ix = (uint32_t *)(a + B * A), *g = ix + B;
    uint8_t *te = (uint8_t *)(g + B), *tr = te + B, *sp = tr + B;
    vx_replay_batch h = {o, no, a, rw, te, tr, sp, w, ix, g};
    st = vx_replay_sample(b->cpu, B, &h, NULL, e);
    if (st) return st;
    cudaError_t rc = cudaMemcpyAsync(out->obs, o, B * D * 4, H2D, s);
    if (!rc) rc = cudaMemcpyAsync(out->next_obs, no, B * D * 4, H2D, s);
    if (!rc) rc = cudaMemcpyAsync(out->rewards, rw, B * 4, H2D, s);
    if (!rc) rc = cudaMemcpyAsync(out->weights, w, B * 4, H2D, s);
    if (!rc) rc = cudaMemcpyAsync(out->actions, a, B * A * 4, H2D, s);
    if (!rc) rc = cudaMemcpyAsync(out->index, ix, B * 4, H2D, s);
    if (!rc) rc = cudaMemcpyAsync(out->gen, g, B * 4, H2D, s);
    if (!rc) rc = cudaMemcpyAsync(out->terminated, te, B, H2D, s);
    if (!rc) rc = cudaMemcpyAsync(out->truncated, tr, B, H2D, s);
    if (!rc && out->steps) rc = cudaMemcpyAsync(out->steps, sp, B, H2D, s);
    if (!rc) rc = cudaStreamSynchronize(s); /* before the staging is written again */
    if (rc) return cuda_err(e, "staging a sample", rc);
    return VX_OK;
}

vx_status vx_rc_update_cpu(vx_replay *r, const uint32_t *index, const uint32_t *gen,
                           const float *td, size_t n, cudaStream_t s, vx_err *e)
{
    rc_buf *b = rcb(r);
    vx_status st = stage(b, n * 12, e); /* index, generation and TD error: 4 bytes each */
    if (st) return st;
    uint32_t *ix = (uint32_t *)b->stage, *g = ix + n;
    float *t = (float *)(g + n);
    cudaError_t rc = cudaMemcpyAsync(ix, index, n * 4, D2H, s);
    if (!rc) rc = cudaMemcpyAsync(g, gen, n * 4, D2H, s);
    if (!rc) rc = cudaMemcpyAsync(t, td, n * 4, D2H, s);
    if (!rc) rc = cudaStreamSynchronize(s);
    if (rc) return cuda_err(e, "staging an update", rc);
    return vx_replay_update(b->cpu, ix, g, t, n, NULL, e);
}

/* ---- synchronous reads: after the last call's stream, on the private stream ------------------ */

static vx_status rc_stats(vx_replay *r, vx_replay_stats *out, double *total_recomputed, vx_err *e)
{
    rc_buf *b = rcb(r);
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device) return vx_replay_stats_get(b->cpu, out, total_recomputed, e);
    dev_state ds;
    double total = 0;
    cudaError_t rc = vx_rc_quiesce(b);
    if (!rc) rc = cudaMemcpyAsync(&ds, b->ds, sizeof ds, D2H, b->ps);
    if (!rc && b->tree.sum[0]) rc = cudaMemcpyAsync(&total, b->tree.sum[0], 8, D2H, b->ps);
    if (!rc) rc = cudaStreamSynchronize(b->ps);
    if (rc) return cuda_err(e, "reading the counters", rc);
    memset(out, 0, sizeof *out);
    out->size = b->size;
    out->capacity = r->cfg.capacity;
    out->inserted = b->inserted;
    out->total = total;
    out->max_priority = ds.max_p;
    out->clamped = ds.clamped;
    out->stale_updates = ds.stale;
    if (!total_recomputed) return VX_OK;
    st = vx_rc_stager_ready(&b->io, e);
    if (st) return st;
    /* a plain left-to-right sum of the leaves' p^α, read through the staging in chunks */
    double z = 0;
    size_t per = b->io.n / 8;
    for (size_t i0 = 0; r->cfg.kind == VX_REPLAY_PROPORTIONAL && i0 < b->size; i0 += per) {
        size_t m = b->size - i0 < per ? b->size - i0 : per;
        const double *p = (const double *)b->io.buf[0];
        rc = cudaMemcpyAsync(b->io.buf[0], b->prio + i0, m * 8, D2H, b->ps);
        if (!rc) rc = cudaStreamSynchronize(b->ps);
        if (rc) return cuda_err(e, "reading the priorities", rc);
        for (size_t i = 0; i < m; i++) z += pow(p[i], r->cfg.alpha);
    }
    *total_recomputed = z;
    return VX_OK;
}

static vx_status rc_prob(vx_replay *r, size_t i, double *out, vx_err *e)
{
    rc_buf *b = rcb(r);
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device) return vx_replay_prob(b->cpu, i, out, e);
    *out = 0;
    if (i >= b->size) return VX_OK;
    if (r->cfg.kind == VX_REPLAY_UNIFORM) {
        *out = 1.0 / (double)b->size;
        return VX_OK;
    }
    cudaError_t rc = vx_rc_quiesce(b);
    if (r->cfg.kind == VX_REPLAY_PROPORTIONAL) {
        double leaf = 0, total = 1;
        if (!rc) rc = cudaMemcpyAsync(&leaf, b->tree.sum[b->tree.depth] + i, 8, D2H, b->ps);
        if (!rc) rc = cudaMemcpyAsync(&total, b->tree.sum[0], 8, D2H, b->ps);
        if (!rc) rc = cudaStreamSynchronize(b->ps);
        if (rc) return cuda_err(e, "reading a priority", rc);
        *out = leaf / total;
        return VX_OK;
    }
    /* rank: sort first if there is no order yet; find i's rank in the order, chunk by chunk */
    st = vx_rc_stager_ready(&b->io, e);
    if (st) return st;
    if (!rc && b->order_n == 0) rc = vx_rc_rank_refresh(r, b->ps);
    double total = 0;
    size_t N = b->order_n, per = b->io.n / 4;
    if (!rc) rc = cudaMemcpyAsync(&total, b->cdf + N - 1, 8, D2H, b->ps);
    for (size_t k0 = 0; !rc && k0 < N; k0 += per) {
        size_t m = N - k0 < per ? N - k0 : per;
        const uint32_t *order = (const uint32_t *)b->io.buf[0];
        rc = cudaMemcpyAsync(b->io.buf[0], b->order + k0, m * 4, D2H, b->ps);
        if (!rc) rc = cudaStreamSynchronize(b->ps);
        for (size_t k = 0; !rc && k < m; k++)
            if (order[k] == i) *out = vx_replay_rank_mass(k0 + k, r->cfg.alpha) / total;
    }
    if (!rc) rc = cudaStreamSynchronize(b->ps);
    if (rc) return cuda_err(e, "reading the rank order", rc);
    return VX_OK;
}

static void rc_follow(vx_replay *r, vx_stream s)
{
    rc_buf *b = rcb(r);
    b->last = (cudaStream_t)s;
    b->have_last = 1;
}

/* Registered by device_open.c for CUDA contexts. */
extern "C" const vx_replay_ops vx_replay_cuda_ops = {
    "cuda",          rc_create,
    rc_free,         rc_on_device,
    rc_size,         rc_reserved,
    vx_rc_insert,    vx_rc_set_beta,
    vx_rc_sample,    vx_rc_rank_refresh_entry,
    vx_rc_update,    rc_stats,
    rc_prob,         vx_rc_save,
    vx_rc_load,      vx_rc_snap,
    vx_rc_snap_save, vx_rc_snap_reserve,
    rc_follow,
};

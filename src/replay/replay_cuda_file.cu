/* replay_cuda_file.cu — the GPU replay buffer's files: save and load in the CPU buffer's format
 * (replay_internal.h), so either backend resumes the other's, and snapshots that let a checkpoint
 * be written while training goes on.
 *
 * Nothing is ever copied to the host whole: the arrays stream through two pinned halves of at
 * most 8 MiB (rc_stager) — while the host writes one half to the file the device copies the next
 * chunk into the other — so host memory does not grow with the capacity. A save writes exactly
 * the bytes the CPU would write for a buffer with these contents just moved to it (no rank order,
 * so a rank buffer sorts again at its next sample; refreshes and the refresh cadence start from
 * zero), checksummed on its way through the halves, to a temporary file that is fsynced and
 * renamed. A load streams the other way through the same checks as the CPU's (replay_file.c: each
 * chunk is checked in its pinned half before it is copied to the device), then rebuilds the tree
 * on the device; a load refused part-way leaves the buffer empty.
 *
 * Snapshots: vx_replay_snap queues device-to-device copies of the live rows, the stamps and
 * dev_state on the caller's stream into buffers of its own (allocated at the first snap, on an
 * account of their own), takes the host counters, and records an event; vx_replay_snap_save,
 * from any thread, makes its stream wait for that event and streams the copy through staging of
 * its own. */
#include "replay_cuda_internal.h"

#include <stdlib.h>
#include <string.h>

void vx_rc_stager_plan(rc_stager *io, vx_mem *mem, size_t n, cudaStream_t s)
{
    io->n = n;
    io->s = s;
    io->dev = mem->dev;
    io->mem = mem;
}

vx_status vx_rc_stager_ready(rc_stager *io, vx_err *e)
{
    if (io->buf[1] && io->ev[1]) return VX_OK;
    vx_status st = VX_OK;
    for (int k = 0; k < 2 && !st; k++)
        if (!io->buf[k]) st = vx_mem_alloc_host(io->mem, io->n, &io->buf[k], e);
    for (int k = 0; k < 2 && !st; k++)
        if (!io->ev[k]) st = vx_cuda_event_create(io->dev, &io->ev[k], 0, e);
    return st;
}

vx_status vx_rc_stager_create(rc_stager *io, vx_mem *mem, size_t n, cudaStream_t s, vx_err *e)
{
    vx_rc_stager_plan(io, mem, n, s);
    return vx_rc_stager_ready(io, e);
}

void vx_rc_stager_destroy(rc_stager *io)
{
    for (int k = 0; k < 2; k++) {
        vx_cuda_event_destroy(io->dev, io->ev[k], 0);
        io->ev[k] = NULL;
    }
}

/* Chunk k of `bytes` at src (device) into half k % 2, then its event. */
static cudaError_t queue_out(const rc_stager *io, const unsigned char *src, size_t bytes, size_t k)
{
    size_t off = k * io->n, len = bytes - off < io->n ? bytes - off : io->n;
    cudaError_t rc = cudaMemcpyAsync(io->buf[k & 1], src + off, len, cudaMemcpyDeviceToHost, io->s);
    if (!rc) rc = cudaEventRecord(io->ev[k & 1], io->s);
    return rc;
}

/* `bytes` of device memory into the file through the halves (hashed on the way by the writer):
 * chunk k + 2 goes into a half only after the host wrote chunk k from it. Stops when a write
 * failed (w->bad). Returns with nothing in flight. */
static cudaError_t chunks_out(const rc_stager *io, const void *src, size_t bytes,
                              vx_replay_writer *w)
{
    const unsigned char *p = (const unsigned char *)src;
    size_t chunks = (bytes + io->n - 1) / io->n;
    cudaError_t rc = cudaSuccess;
    for (size_t k = 0; k < chunks && k < 2 && !rc; k++) rc = queue_out(io, p, bytes, k);
    for (size_t k = 0; k < chunks && !rc && !w->bad; k++) {
        rc = cudaEventSynchronize(io->ev[k & 1]);
        if (rc) break;
        size_t len = bytes - k * io->n < io->n ? bytes - k * io->n : io->n;
        vx_replay_writer_put(w, io->buf[k & 1], len);
        if (!w->bad && k + 2 < chunks) rc = queue_out(io, p, bytes, k + 2);
    }
    cudaError_t rs = cudaStreamSynchronize(io->s);
    return rc ? rc : rs;
}

/* `bytes` from the file to device memory at dst (NULL: read, checked and dropped) through the
 * reader, which checks every value in the pinned half before it is copied: half k % 2 is refilled
 * only after its previous chunk's copy to the device finished. *st: the reader refused (the
 * copies stop). Every section starts a chunk and IO_CHUNK is a multiple of every value's size,
 * so no value straddles two chunks. Returns with nothing in flight. */
static cudaError_t chunks_in(const rc_stager *io, void *dst, size_t bytes, vx_replay_reader *rd,
                             vx_status *st, vx_err *e)
{
    unsigned char *p = (unsigned char *)dst;
    size_t chunks = (bytes + io->n - 1) / io->n;
    cudaError_t rc = cudaSuccess;
    for (size_t k = 0; k < chunks && !rc; k++) {
        int h = (int)(k & 1);
        if (k >= 2) rc = cudaEventSynchronize(io->ev[h]);
        if (rc) break;
        size_t off = k * io->n, len = bytes - off < io->n ? bytes - off : io->n;
        *st = vx_replay_reader_read(rd, io->buf[h], len, e);
        if (*st) break;
        if (!p) continue;
        rc = cudaMemcpyAsync(p + off, io->buf[h], len, cudaMemcpyHostToDevice, io->s);
        if (!rc) rc = cudaEventRecord(io->ev[h], io->s);
    }
    cudaError_t rs = cudaStreamSynchronize(io->s);
    return rc ? rc : rs;
}

/* One save file from an image (the live buffer after its last call, or a snapshot once its
 * copies are done: the caller orders io->s after them). The header is what the CPU buffer writes
 * after a fall-back moved these contents into it. */
static vx_status write_image(const vx_replay_cfg *cfg, const rc_stager *io, const rc_image *im,
                             const char *path, vx_err *e)
{
    dev_state ds;
    cudaError_t rc = cudaMemcpyAsync(&ds, im->ds, sizeof ds, cudaMemcpyDeviceToHost, io->s);
    if (!rc) rc = cudaStreamSynchronize(io->s);
    if (rc)
        return vx_err_set(e, VX_ERR_CUDA, "replay: reading the counters: %s",
                          cudaGetErrorString(rc));
    vx_replay_file_header h;
    vx_replay_header_init(&h, cfg);
    h.size = im->size, h.cursor = im->cursor, h.inserted = im->inserted;
    h.clamped = ds.clamped, h.stale = ds.stale, h.max_p = ds.max_p, h.draws = ds.rng_block;
    size_t n = im->size, D = (size_t)cfg->obs_dim;
    vx_atomic_file af;
    vx_status st = vx_atomic_open(&af, path, e);
    if (st) return st;
    vx_replay_writer w;
    st = vx_replay_writer_begin(&w, af.f, &h, e);
    if (!st) rc = chunks_out(io, im->obs, n * D * sizeof(float), &w);
    if (!st && !rc) rc = chunks_out(io, im->next_obs, n * D * sizeof(float), &w);
    if (!st && !rc) rc = chunks_out(io, im->meta, cfg->capacity * sizeof(vx_slot_meta), &w);
    if (!st && !rc) rc = chunks_out(io, im->prio, n * sizeof(double), &w);
    if (!st) st = vx_replay_writer_end(&w, path, e); /* frees the checksum's state */
    if (rc || st) {
        vx_atomic_abort(&af);
        if (rc)
            return vx_err_line(e, VX_ERR_CUDA, path, -1, "", "reading the device buffer: %s",
                               cudaGetErrorString(rc));
        return st;
    }
    return vx_atomic_commit(&af, e);
}

vx_status vx_rc_save(vx_replay *r, const char *path, vx_err *e)
{
    rc_buf *b = rcb(r);
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device) return vx_replay_save(b->cpu, path, e);
    st = vx_rc_stager_ready(&b->io, e);
    if (st) return st;
    cudaError_t rc = vx_rc_quiesce(b);
    if (rc) return vx_err_set(e, VX_ERR_CUDA, "replay: save: %s", cudaGetErrorString(rc));
    rc_image im = {b->obs, b->next_obs, b->meta, b->prio, b->ds, b->size, b->cursor, b->inserted};
    return write_image(&r->cfg, &b->io, &im, path, e);
}

/* After a load refused part-way (the device arrays hold some of a file that was refused): an
 * empty buffer, as at creation, so nothing refused is ever drawn. */
static cudaError_t make_empty(vx_replay *r)
{
    rc_buf *b = rcb(r);
    size_t C = r->cfg.capacity;
    dev_state v;
    memset(&v, 0, sizeof v);
    v.max_p = 1.0;
    v.beta = b->host_beta;
    cudaError_t rc = cudaMemsetAsync(b->meta, 0, C * sizeof(vx_slot_meta), b->ps);
    if (!rc) rc = cudaMemsetAsync(b->prio, 0, C * sizeof(double), b->ps);
    if (!rc) rc = vx_rc_rebuild_tree(r, 0, b->ps);
    if (!rc) rc = vx_rc_set_state(r, &v, b->ps);
    if (!rc) rc = cudaStreamSynchronize(b->ps);
    b->size = 0, b->cursor = 0, b->inserted = 0;
    b->order_n = 0;
    return rc;
}

vx_status vx_rc_load(vx_replay *r, const char *path, vx_err *e)
{
    rc_buf *b = rcb(r);
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device) return vx_replay_load(b->cpu, path, e);
    st = vx_rc_stager_ready(&b->io, e);
    if (st) return st; /* nothing read yet: the buffer is as it was */
    cudaError_t rc = vx_rc_quiesce(b);
    if (rc) return vx_err_set(e, VX_ERR_CUDA, "replay: load: %s", cudaGetErrorString(rc));
    vx_replay_reader rd;
    st = vx_replay_reader_open(&rd, path, &r->cfg, e);
    if (st) return st; /* nothing read yet: the buffer is as it was */
    const vx_replay_file_header h = rd.h;
    size_t n = (size_t)h.size, D = (size_t)r->cfg.obs_dim;
    rc = chunks_in(&b->io, b->obs, n * D * sizeof(float), &rd, &st, e);
    if (!st && !rc) rc = chunks_in(&b->io, b->next_obs, n * D * sizeof(float), &rd, &st, e);
    if (!st && !rc)
        rc = chunks_in(&b->io, b->meta, r->cfg.capacity * sizeof(vx_slot_meta), &rd, &st, e);
    if (!st && !rc) rc = chunks_in(&b->io, b->prio, n * sizeof(double), &rd, &st, e);
    /* a rank order in the file (a CPU buffer's) is checked and dropped: this one sorts at its
     * next sample */
    if (!st && !rc) rc = chunks_in(&b->io, NULL, (size_t)h.order_n * 4, &rd, &st, e);
    if (!st && !rc) st = vx_replay_reader_finish(&rd, e);
    vx_replay_reader_close(&rd);
    if (rc) st = vx_err_line(e, VX_ERR_CUDA, path, -1, "", "load: %s", cudaGetErrorString(rc));
    if (st) {
        cudaError_t re = make_empty(r);
        if (re && !rc)
            st = vx_err_line(e, VX_ERR_CUDA, path, -1, "", "emptying after a refused load: %s",
                             cudaGetErrorString(re));
        return st;
    }
    dev_state v;
    memset(&v, 0, sizeof v);
    v.max_p = h.max_p;
    v.beta = b->host_beta;
    v.clamped = h.clamped, v.stale = h.stale, v.rng_block = h.draws;
    v.size = n; /* order_n 0: the next sample sorts */
    rc = vx_rc_rebuild_tree(r, n, b->ps);
    if (!rc) rc = vx_rc_set_state(r, &v, b->ps);
    if (!rc) rc = cudaStreamSynchronize(b->ps);
    if (rc) return vx_err_line(e, VX_ERR_CUDA, path, -1, "", "load: %s", cudaGetErrorString(rc));
    b->size = n, b->cursor = (size_t)h.cursor, b->inserted = h.inserted;
    r->cfg.seed = h.seed;
    b->order_n = 0;
    return VX_OK;
}

/* ---- snapshots ------------------------------------------------------------------------------- */

void vx_rc_snap_free(rc_buf *b)
{
    rc_snapshot *sn = &b->snap;
    vx_rc_stager_destroy(&sn->io);
    vx_cuda_event_destroy(sn->mem.dev, sn->done, 0);
    vx_cuda_stream_destroy(sn->mem.dev, sn->io.s);
    vx_mem_release(&sn->mem);
    sn->done = NULL;
    sn->io.s = NULL;
    sn->taken = 0;
}

/* The snapshot's buffers, stream, staging and event, at the first snap; all or nothing. */
static vx_status snap_alloc(vx_replay *r, vx_err *e)
{
    rc_buf *b = rcb(r);
    rc_snapshot *sn = &b->snap;
    size_t C = r->cfg.capacity, D = (size_t)r->cfg.obs_dim;
    vx_status st = vx_mem_alloc(&sn->mem, C * D * sizeof(float), &sn->obs, e);
    if (!st) st = vx_mem_alloc(&sn->mem, C * D * sizeof(float), &sn->next_obs, e);
    if (!st) st = vx_mem_alloc(&sn->mem, C * sizeof(vx_slot_meta), &sn->meta, e);
    if (!st) st = vx_mem_alloc(&sn->mem, C * sizeof(double), &sn->prio, e);
    if (!st) st = vx_mem_alloc(&sn->mem, sizeof(dev_state), &sn->ds, e);
    if (!st) st = vx_cuda_stream_create(r->dev, &sn->io.s, e);
    if (!st) st = vx_rc_stager_create(&sn->io, &sn->mem, b->io.n, sn->io.s, e);
    if (!st) st = vx_cuda_event_create(r->dev, &sn->done, 0, e);
    if (st) vx_rc_snap_free(b);
    return st;
}

vx_status vx_rc_snap_reserve(vx_replay *r, vx_err *e)
{
    rc_buf *b = rcb(r);
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device)
        return vx_err_set(e, VX_ERR_UNSUPPORTED,
                          "replay: the buffer moved to the CPU, which has no snapshot");
    return b->snap.done ? VX_OK : snap_alloc(r, e);
}

vx_status vx_rc_snap(vx_replay *r, vx_stream vs, vx_err *e)
{
    rc_buf *b = rcb(r);
    rc_snapshot *sn = &b->snap;
    cudaStream_t s = (cudaStream_t)vs;
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device)
        return vx_err_set(e, VX_ERR_UNSUPPORTED,
                          "replay: the buffer moved to the CPU, which has no snapshot (save it "
                          "with vx_replay_save)");
    if (__atomic_load_n(&sn->busy, __ATOMIC_ACQUIRE))
        return vx_err_set(e, VX_ERR_ARG,
                          "replay: snap while vx_replay_snap_save is writing the "
                          "last snapshot");
    if (!sn->done) {
        st = snap_alloc(r, e);
        if (st) return st;
    }
    b->last = s, b->have_last = 1;
    size_t n = b->size, D = (size_t)r->cfg.obs_dim, C = r->cfg.capacity;
    const cudaMemcpyKind dd = cudaMemcpyDeviceToDevice;
    cudaError_t rc = cudaMemcpyAsync(sn->obs, b->obs, n * D * sizeof(float), dd, s);
    if (!rc) rc = cudaMemcpyAsync(sn->next_obs, b->next_obs, n * D * sizeof(float), dd, s);
    if (!rc) rc = cudaMemcpyAsync(sn->meta, b->meta, C * sizeof(vx_slot_meta), dd, s);
    if (!rc) rc = cudaMemcpyAsync(sn->prio, b->prio, n * sizeof(double), dd, s);
    if (!rc) rc = cudaMemcpyAsync(sn->ds, b->ds, sizeof(dev_state), dd, s);
    if (!rc) rc = cudaEventRecord(sn->done, s);
    if (rc) {
        sn->taken = 0;
        return vx_err_set(e, VX_ERR_CUDA, "replay: snap: %s", cudaGetErrorString(rc));
    }
    sn->size = n, sn->cursor = b->cursor, sn->inserted = b->inserted;
    sn->cfg = r->cfg;
    sn->taken = 1;
    return VX_OK;
}

vx_status vx_rc_snap_save(vx_replay *r, const char *path, vx_err *e)
{
    rc_snapshot *sn = &rcb(r)->snap;
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!sn->taken)
        return vx_err_set(e, VX_ERR_ARG,
                          "replay: snap_save without a snapshot (vx_replay_snap "
                          "first)");
    __atomic_store_n(&sn->busy, 1, __ATOMIC_RELEASE);
    cudaError_t rc = cudaStreamWaitEvent(sn->io.s, sn->done, 0);
    if (rc) {
        st = vx_err_set(e, VX_ERR_CUDA, "replay: snap_save: %s", cudaGetErrorString(rc));
    } else {
        rc_image im = {sn->obs, sn->next_obs, sn->meta,   sn->prio,
                       sn->ds,  sn->size,     sn->cursor, sn->inserted};
        st = write_image(&sn->cfg, &sn->io, &im, path, e);
    }
    __atomic_store_n(&sn->busy, 0, __ATOMIC_RELEASE);
    return st;
}

/* replay_cuda_host.cu — the host side of the GPU replay buffer: moving to the CPU buffer when the
 * device fails (fall_back), staging device-pointer calls through the host once there, and the
 * explicit synchronous reads (stats, probabilities). The kernels and the device path are in
 * replay_cuda.cu. */
#include "vixen/replay_cuda.h"
#include "../util/cuda_check.h"
#include "replay_cuda_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void vx_rc_free_device(vx_replay_cuda *r)
{
    cudaFree(r->obs), cudaFree(r->next_obs), cudaFree(r->meta), cudaFree(r->prio);
    cudaFree(r->owner), cudaFree(r->win), cudaFree(r->ds);
    cudaFree(r->order), cudaFree(r->iota), cudaFree(r->cdf), cudaFree(r->rank_w);
    cudaFree(r->keys_out), cudaFree(r->cub_tmp);
    r->order = r->iota = NULL;
    r->cdf = r->rank_w = r->keys_out = NULL;
    r->cub_tmp = NULL;
    for (int l = 0; l < LEVELS; l++) cudaFree(r->tree.sum[l]), cudaFree(r->tree.min[l]);
    r->obs = r->next_obs = NULL;
    r->meta = NULL;
    r->prio = NULL;
    r->owner = NULL;
    r->win = NULL;
    r->ds = NULL;
    memset(&r->tree, 0, sizeof r->tree);
    cudaGetLastError();
}

/* Copies the device buffer's contents and counters into a CPU buffer of the same configuration
 * (synchronous). */
static vx_status download(vx_replay_cuda *r, vx_replay *cpu, vx_err *e)
{
    size_t C = r->cfg.capacity, D = (size_t)r->cfg.obs_dim, n = r->size;
    float *o = (float *)malloc((n ? n : 1) * D * sizeof(float));
    float *no = (float *)malloc((n ? n : 1) * D * sizeof(float));
    vx_slot_meta *m = (vx_slot_meta *)malloc(C * sizeof *m);
    double *p = (double *)malloc((n ? n : 1) * sizeof *p);
    dev_state ds;
    vx_status st = VX_OK;
    cudaError_t rc = cudaSuccess;
    if (!o || !no || !m || !p) st = vx_err_set(e, VX_ERR_NOMEM, "replay: out of host memory reading the device buffer");
    if (!st) rc = cudaDeviceSynchronize();
    if (!st && !rc) rc = cudaMemcpy(o, r->obs, n * D * 4, cudaMemcpyDeviceToHost);
    if (!st && !rc) rc = cudaMemcpy(no, r->next_obs, n * D * 4, cudaMemcpyDeviceToHost);
    if (!st && !rc) rc = cudaMemcpy(m, r->meta, C * sizeof *m, cudaMemcpyDeviceToHost);
    if (!st && !rc) rc = cudaMemcpy(p, r->prio, n * 8, cudaMemcpyDeviceToHost);
    if (!st && !rc) rc = cudaMemcpy(&ds, r->ds, sizeof ds, cudaMemcpyDeviceToHost);
    if (!st && rc) st = vx_err_set(e, VX_ERR_CUDA, "replay: reading the device buffer: %s", cudaGetErrorString(rc));
    if (!st) st = vx_replay_import(cpu, o, no, m, p, n, r->cursor, ds.max_p, r->inserted, e);
    if (!st) vx_replay_set_counters(cpu, ds.rng_block, ds.clamped, ds.stale);
    free(o), free(no), free(m), free(p);
    return st;
}

/* Moves to the CPU buffer: its contents come along when the device can still be read. */
vx_status vx_rc_fall_back(vx_replay_cuda *r, const char *why, vx_err *e)
{
    vx_status st = vx_replay_create(&r->cfg, &r->cpu, e);
    if (st) return st;
    int moved = r->obs && r->size > 0 && download(r, r->cpu, NULL) == VX_OK;
    vx_log(VX_LOG_WARN, "replay: %s; continuing on the CPU buffer (%s)", why,
           r->size == 0 ? "it was empty" : moved ? "contents moved" : "contents could not be read back");
    vx_rc_free_device(r);
    r->on_device = 0;
    return VX_OK;
}

extern "C" vx_status vx_replay_cuda_save(vx_replay_cuda *r, const char *path, vx_err *e)
{
    if (!r->on_device) return vx_replay_save(r->cpu, path, e);
    vx_replay *tmp;
    vx_status st = vx_replay_create(&r->cfg, &tmp, e);
    if (st) return st;
    st = download(r, tmp, e);
    if (!st) st = vx_replay_save(tmp, path, e);
    vx_replay_free(tmp);
    return st;
}

extern "C" vx_status vx_replay_cuda_load(vx_replay_cuda *r, const char *path, vx_err *e)
{
    if (!r->on_device) return vx_replay_load(r->cpu, path, e);
    vx_replay *tmp;
    vx_status st = vx_replay_create(&r->cfg, &tmp, e);
    if (st) return st;
    st = vx_replay_load(tmp, path, e);
    if (!st) {
        vx_replay_raw raw;
        vx_replay_raw_view(tmp, &raw);
        st = vx_rc_upload(r, &raw, e);
    }
    vx_replay_free(tmp);
    return st;
}

vx_status vx_rc_stage(vx_replay_cuda *r, size_t bytes, vx_err *e)
{
    if (bytes <= r->stage_n) return VX_OK;
    free(r->stage);
    r->stage = malloc(bytes);
    r->stage_n = r->stage ? bytes : 0;
    return r->stage ? VX_OK : vx_err_set(e, VX_ERR_NOMEM, "replay: out of host memory staging");
}

vx_status vx_rc_insert_cpu(vx_replay_cuda *r, const vx_transitions *t, size_t n, vx_err *e)
{
    size_t D = (size_t)r->cfg.obs_dim;
    size_t bytes = n * (2 * D * 4 + 12 + 4 + 3);
    vx_status st = vx_rc_stage(r, bytes, e);
    if (st) return st;
    float *o = (float *)r->stage, *no = o + n * D, *rw = no + n * D;
    int32_t *a = (int32_t *)(rw + n);
    uint8_t *te = (uint8_t *)(a + n * 3), *tr = te + n, *sp = tr + n;
    cudaError_t rc = cudaMemcpy(o, t->obs, n * D * 4, cudaMemcpyDeviceToHost);
    if (!rc) rc = cudaMemcpy(no, t->next_obs, n * D * 4, cudaMemcpyDeviceToHost);
    if (!rc) rc = cudaMemcpy(rw, t->rewards, n * 4, cudaMemcpyDeviceToHost);
    if (!rc) rc = cudaMemcpy(a, t->actions, n * 12, cudaMemcpyDeviceToHost);
    if (!rc) rc = cudaMemcpy(te, t->terminated, n, cudaMemcpyDeviceToHost);
    if (!rc) rc = cudaMemcpy(tr, t->truncated, n, cudaMemcpyDeviceToHost);
    if (!rc && t->steps) rc = cudaMemcpy(sp, t->steps, n, cudaMemcpyDeviceToHost);
    if (rc) return vx_err_set(e, VX_ERR_CUDA, "replay: staging an insert: %s", cudaGetErrorString(rc));
    vx_transitions h = {o, no, a, rw, te, tr, t->steps ? sp : NULL};
    return vx_replay_insert(r->cpu, &h, n, e);
}

vx_status vx_rc_sample_cpu(vx_replay_cuda *r, size_t B, vx_replay_batch *out, vx_err *e)
{
    size_t D = (size_t)r->cfg.obs_dim;
    vx_status st = vx_rc_stage(r, B * (2 * D * 4 + 12 + 4 + 4 + 4 + 4 + 3), e);
    if (st) return st;
    float *o = (float *)r->stage, *no = o + B * D, *rw = no + B * D, *w = rw + B;
    int32_t *a = (int32_t *)(w + B);
    uint32_t *ix = (uint32_t *)(a + B * 3), *g = ix + B;
    uint8_t *te = (uint8_t *)(g + B), *tr = te + B, *sp = tr + B;
    vx_replay_batch h = {o, no, a, rw, te, tr, sp, w, ix, g};
    st = vx_replay_sample(r->cpu, B, r->host_beta, &h, e);
    if (st) return st;
    cudaError_t rc = cudaMemcpy(out->obs, o, B * D * 4, cudaMemcpyHostToDevice);
    if (!rc) rc = cudaMemcpy(out->next_obs, no, B * D * 4, cudaMemcpyHostToDevice);
    if (!rc) rc = cudaMemcpy(out->rewards, rw, B * 4, cudaMemcpyHostToDevice);
    if (!rc) rc = cudaMemcpy(out->weights, w, B * 4, cudaMemcpyHostToDevice);
    if (!rc) rc = cudaMemcpy(out->actions, a, B * 12, cudaMemcpyHostToDevice);
    if (!rc) rc = cudaMemcpy(out->index, ix, B * 4, cudaMemcpyHostToDevice);
    if (!rc) rc = cudaMemcpy(out->gen, g, B * 4, cudaMemcpyHostToDevice);
    if (!rc) rc = cudaMemcpy(out->terminated, te, B, cudaMemcpyHostToDevice);
    if (!rc) rc = cudaMemcpy(out->truncated, tr, B, cudaMemcpyHostToDevice);
    if (!rc && out->steps) rc = cudaMemcpy(out->steps, sp, B, cudaMemcpyHostToDevice);
    if (rc) return vx_err_set(e, VX_ERR_CUDA, "replay: staging a sample: %s", cudaGetErrorString(rc));
    return VX_OK;
}

vx_status vx_rc_update_cpu(vx_replay_cuda *r, const uint32_t *index, const uint32_t *gen,
                            const float *td, size_t n, vx_err *e)
{
    vx_status st = vx_rc_stage(r, n * 12, e);
    if (st) return st;
    uint32_t *ix = (uint32_t *)r->stage, *g = ix + n;
    float *t = (float *)(g + n);
    cudaError_t rc = cudaMemcpy(ix, index, n * 4, cudaMemcpyDeviceToHost);
    if (!rc) rc = cudaMemcpy(g, gen, n * 4, cudaMemcpyDeviceToHost);
    if (!rc) rc = cudaMemcpy(t, td, n * 4, cudaMemcpyDeviceToHost);
    if (rc) return vx_err_set(e, VX_ERR_CUDA, "replay: staging an update: %s", cudaGetErrorString(rc));
    vx_replay_update(r->cpu, ix, g, t, n);
    return VX_OK;
}

extern "C" vx_status vx_replay_cuda_stats(vx_replay_cuda *r, vx_replay_stats *out,
                                          double *total_recomputed, vx_err *e)
{
    if (!r->on_device) {
        vx_replay_stats_get(r->cpu, out);
        if (total_recomputed) *total_recomputed = vx_replay_total_recomputed(r->cpu);
        return VX_OK;
    }
    vx_status st = VX_OK;
    dev_state ds;
    double total = 0, *p = NULL;
    VX_CUDA_CHECK(cudaDeviceSynchronize());
    VX_CUDA_CHECK(cudaMemcpy(&ds, r->ds, sizeof ds, cudaMemcpyDeviceToHost));
    if (r->tree.sum[0]) VX_CUDA_CHECK(cudaMemcpy(&total, r->tree.sum[0], 8, cudaMemcpyDeviceToHost));
    memset(out, 0, sizeof *out);
    out->size = r->size;
    out->capacity = r->cfg.capacity;
    out->inserted = r->inserted;
    out->total = total;
    out->max_priority = ds.max_p;
    out->clamped = ds.clamped;
    out->stale_updates = ds.stale;
    if (total_recomputed) {
        *total_recomputed = 0;
        if (r->cfg.kind == VX_REPLAY_PROPORTIONAL && r->size) {
            p = (double *)malloc(r->size * 8);
            if (!p) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory");
            VX_CUDA_CHECK(cudaMemcpy(p, r->prio, r->size * 8, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < r->size; i++) *total_recomputed += pow(p[i], r->cfg.alpha);
        }
    }
fail:
    free(p);
    return st;
}

extern "C" vx_status vx_replay_cuda_prob(vx_replay_cuda *r, size_t i, double *out, vx_err *e)
{
    if (!r->on_device) {
        *out = vx_replay_prob(r->cpu, i);
        return VX_OK;
    }
    vx_status st = VX_OK;
    *out = 0;
    if (i >= r->size) return VX_OK;
    if (r->cfg.kind == VX_REPLAY_UNIFORM) {
        *out = 1.0 / (double)r->size;
        return VX_OK;
    }
    if (r->cfg.kind == VX_REPLAY_RANK) {
        if (r->order_n == 0) VX_CUDA_CHECK(vx_rc_rank_refresh(r, 0));
        size_t N = r->order_n;
        uint32_t *order = (uint32_t *)malloc(N * sizeof *order);
        if (!order) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory");
        double total = 0;
        cudaError_t rc = cudaDeviceSynchronize();
        if (!rc) rc = cudaMemcpy(order, r->order, N * 4, cudaMemcpyDeviceToHost);
        if (!rc) rc = cudaMemcpy(&total, r->cdf + N - 1, 8, cudaMemcpyDeviceToHost);
        for (size_t k = 0; !rc && k < N; k++)
            if (order[k] == i) *out = pow((double)(k + 1), -r->cfg.alpha) / total;
        free(order);
        if (rc) return vx_err_set(e, VX_ERR_CUDA, "replay: %s", cudaGetErrorString(rc));
        return VX_OK;
    }
    double leaf, total;
    VX_CUDA_CHECK(cudaDeviceSynchronize());
    VX_CUDA_CHECK(cudaMemcpy(&leaf, r->tree.sum[r->tree.depth] + i, 8, cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(&total, r->tree.sum[0], 8, cudaMemcpyDeviceToHost));
    *out = leaf / total;
fail:
    return st;
}

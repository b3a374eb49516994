/* bench_replay_cuda.c — the GPU replay buffer: sample(B) + IS weights + priority update(B) as a
 * captured CUDA graph, timed per replay with events (median of 200 after 20 warm-ups), over
 * capacities {2^17, 2^20, 10 M, 2^24} × batches {256, 1,024, 4,096, 16,384}, uniform and
 * proportional; and the GPU time of inserting 2,048 transitions. Built with CUDA only. */
#include "bench.h"
#include "bench_cuda.h"
#include "vixen/philox.h"
#include "vixen/device.h"
#include "vixen/replay.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#define REPS 200
#define WARM 20
#define FILL 65536

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void add(vx_bench_result *r, int *n, int max, const char *name, double us, double target)
{
    if (*n >= max) return;
    vx_bench_result *x = &r[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->unit, sizeof x->unit, "us");
    x->items = 1, x->seconds = us * 1e-6, x->value = us, x->target = target;
    x->lower_is_better = 1;
}

/* Device arrays for FILL transitions of random content and a batch of up to 16,384. */
typedef struct {
    float *obs, *next, *rew, *td, *w, *bo, *bn, *br;
    int32_t *act, *ba;
    uint8_t *flags, *bt, *bu, *bs;
    uint32_t *bi, *bg;
} dev_bufs;

static int bufs_make(dev_bufs *d, int D, size_t Bmax)
{
    memset(d, 0, sizeof *d);
    size_t n = FILL;
    int bad = cudaMalloc((void **)&d->obs, n * D * 4) | cudaMalloc((void **)&d->next, n * D * 4) |
              cudaMalloc((void **)&d->rew, n * 4) | cudaMalloc((void **)&d->act, n * 12) |
              cudaMalloc((void **)&d->flags, n) | cudaMalloc((void **)&d->td, n * 4) |
              cudaMalloc((void **)&d->w, Bmax * 4) | cudaMalloc((void **)&d->bo, Bmax * D * 4) |
              cudaMalloc((void **)&d->bn, Bmax * D * 4) | cudaMalloc((void **)&d->br, Bmax * 4) |
              cudaMalloc((void **)&d->ba, Bmax * 12) | cudaMalloc((void **)&d->bt, Bmax) |
              cudaMalloc((void **)&d->bu, Bmax) | cudaMalloc((void **)&d->bs, Bmax) |
              cudaMalloc((void **)&d->bi, Bmax * 4) | cudaMalloc((void **)&d->bg, Bmax * 4);
    if (bad) return -1;
    float *h = malloc(n * D * 4);
    int32_t *a = malloc(n * 12);
    if (!h || !a) return -1;
    vx_rng g = vx_rng_make(9, 0, 0);
    for (size_t i = 0; i < n * D; i++) h[i] = vx_rng_uniform(&g);
    for (size_t i = 0; i < n * 3; i++) a[i] = (int32_t)vx_rng_below(&g, 3);
    bad |= cudaMemcpy(d->obs, h, n * D * 4, cudaMemcpyHostToDevice);
    bad |= cudaMemcpy(d->next, h, n * D * 4, cudaMemcpyHostToDevice);
    bad |= cudaMemcpy(d->rew, h, n * 4, cudaMemcpyHostToDevice);
    bad |= cudaMemcpy(d->act, a, n * 12, cudaMemcpyHostToDevice);
    for (size_t i = 0; i < n; i++) h[i] = (float)(0.01 + 3 * vx_rng_uniform_double(&g));
    bad |= cudaMemcpy(d->td, h, n * 4, cudaMemcpyHostToDevice);
    bad |= cudaMemset(d->flags, 0, n);
    free(h), free(a);
    /* the copies' DMA landed (from pageable memory cudaMemcpy may return first) */
    return !bad && cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

static void bufs_free(dev_bufs *d)
{
    cudaFree(d->obs), cudaFree(d->next), cudaFree(d->rew), cudaFree(d->act), cudaFree(d->flags);
    cudaFree(d->td), cudaFree(d->w), cudaFree(d->bo), cudaFree(d->bn), cudaFree(d->br);
    cudaFree(d->ba), cudaFree(d->bt), cudaFree(d->bu), cudaFree(d->bs), cudaFree(d->bi);
    cudaFree(d->bg);
}

/* The CPU buffer over the same grid, one core, for the same table: fill, spread priorities,
 * then the median of 41 sample(B) + update(B). */
static int cpu_grid(vx_bench_result *out, int max, FILE *log, const size_t *caps,
                    const size_t *batches)
{
    int n = 0;
    const size_t D = 51, CH = 4096;
    const vx_replay_kind kinds[3] = {VX_REPLAY_UNIFORM, VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK};
    const char *kname[3] = {"uniform", "proportional", "rank"};
    float *o = calloc(CH * D, 4), *rw = calloc(CH, 4), *td = malloc(16384 * 4);
    int32_t *a = calloc(CH * 3, 4);
    uint8_t *f = calloc(CH, 1);
    float *bo = malloc(16384 * D * 4), *bn = malloc(16384 * D * 4), *br = malloc(16384 * 4);
    float *bw = malloc(16384 * 4);
    int32_t *ba = malloc(16384 * 12);
    uint8_t *bt = malloc(16384), *bu = malloc(16384), *bs = malloc(16384);
    uint32_t *bi = malloc(16384 * 4), *bg = malloc(16384 * 4);
    vx_rng g = vx_rng_make(4, 0, 0);
    for (size_t i = 0; i < CH * D; i++) o[i] = vx_rng_uniform(&g);
    vx_replay_batch b = {bo, bn, ba, br, bt, bu, bs, bw, bi, bg};
    for (int k = 0; k < 3; k++)
        for (int c = 0; c < 4; c++) {
            vx_replay_cfg cfg;
            vx_replay_cfg_default(&cfg, kinds[k], caps[c]);
            vx_replay *r;
            vx_err e;
            if (vx_replay_create(&cfg, NULL, &r, &e)) continue;
            if (log) fprintf(log, "bench: CPU %s replay, capacity %zu\n", kname[k], caps[c]);
            vx_transitions t = {o, o, a, rw, f, f, NULL};
            for (size_t done = 0; done < caps[c]; done += CH) {
                size_t m = caps[c] - done < CH ? caps[c] - done : CH;
                vx_replay_insert(r, &t, m, NULL, &e);
            }
            vx_replay_set_beta(r, 0.5, NULL, &e);
            for (int u = 0; u < 8; u++) {
                for (size_t j = 0; j < 16384; j++)
                    td[j] = (float)(0.01 + 3 * vx_rng_uniform_double(&g));
                vx_replay_sample(r, 16384, &b, NULL, &e);
                vx_replay_update(r, bi, bg, td, 16384, NULL, &e);
            }
            for (int bb = 0; bb < 4; bb++) {
                size_t B = batches[bb];
                double times[41];
                for (int rep = 0; rep < 41; rep++) {
                    uint64_t t0 = vx_now_ns();
                    vx_replay_sample(r, B, &b, NULL, &e);
                    vx_replay_update(r, bi, bg, td, B, NULL, &e);
                    times[rep] = vx_seconds_since(t0);
                }
                for (int i = 1; i < 41; i++) /* insertion sort, the median */
                    for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
                        double x = times[j];
                        times[j] = times[j - 1], times[j - 1] = x;
                    }
                char name[48];
                snprintf(name, sizeof name, "cpu_%s_c%zu_b%zu", kname[k], caps[c], B);
                add(out, &n, max, name, times[20] * 1e6, 0);
            }
            vx_replay_free(r);
        }
    free(o), free(rw), free(td), free(a), free(f), free(bo), free(bn), free(br), free(bw);
    free(ba), free(bt), free(bu), free(bs), free(bi), free(bg);
    return n;
}

int vx_bench_replay_cuda(vx_bench_result *out, int max, FILE *log)
{
    const int D = 51;
    const size_t caps[4] = {1u << 17, 1u << 20, 10000000, 1u << 24};
    const size_t batches[4] = {256, 1024, 4096, 16384};
    const vx_replay_kind kinds[3] = {VX_REPLAY_UNIFORM, VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK};
    const char *kname[3] = {"uniform", "proportional", "rank"};
    vx_device *dev = vx_bench_cuda_open(log);
    if (!dev) return 0;
    vx_err err;
    dev_bufs d;
    if (bufs_make(&d, D, 16384)) {
        vx_device_close(dev);
        if (log) fprintf(log, "bench: cannot allocate the GPU benchmark buffers\n");
        return 0;
    }
    cudaStream_t s;
    cudaEvent_t e0, e1;
    cudaStreamCreate(&s);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int n = 0;
    float times[REPS];
    for (int k = 0; k < 3; k++)
        for (int c = 0; c < 4; c++) {
            vx_replay_cfg cfg;
            vx_replay_cfg_default(&cfg, kinds[k], caps[c]);
            cfg.rank_refresh = 1 << 30; /* the sort is timed on its own, never inside a graph */
            vx_replay *r;
            if (vx_replay_create(&cfg, dev, &r, &err) || !vx_replay_on_device(r)) {
                if (log) fprintf(log, "bench: %s at %zu: not on the device\n", kname[k], caps[c]);
                vx_replay_free(r);
                continue;
            }
            if (log) fprintf(log, "bench: GPU %s replay, capacity %zu\n", kname[k], caps[c]);
            vx_transitions t = {d.obs, d.next, d.act, d.rew, d.flags, d.flags, NULL};
            /* fill, timing one 2,048 insert on the way (GPU time, events) */
            for (size_t f = 0; f < caps[c]; f += FILL) {
                size_t m = caps[c] - f < FILL ? caps[c] - f : FILL;
                vx_replay_insert(r, &t, m, s, &err);
            }
            if (c == 1) {
                for (int i = 0; i < REPS; i++) {
                    cudaEventRecord(e0, s);
                    vx_replay_insert(r, &t, 2048, s, &err);
                    cudaEventRecord(e1, s);
                    cudaEventSynchronize(e1);
                    cudaEventElapsedTime(&times[i], e0, e1);
                }
                qsort(times, REPS, sizeof *times, cmp_f);
                char name[48];
                snprintf(name, sizeof name, "gpu_%s_insert2048_c%zu", kname[k], caps[c]);
                add(out, &n, max, name, times[REPS / 2] * 1e3, 10);
                /* the same inserts queued back to back (no launch gap), for comparison */
                cudaEventRecord(e0, s);
                for (int i = 0; i < REPS; i++) vx_replay_insert(r, &t, 2048, s, &err);
                cudaEventRecord(e1, s);
                cudaEventSynchronize(e1);
                float ms = 0;
                cudaEventElapsedTime(&ms, e0, e1);
                snprintf(name, sizeof name, "gpu_%s_insert2048_queued_c%zu", kname[k], caps[c]);
                add(out, &n, max, name, ms * 1e3 / REPS, 0);
            }
            /* a spread of priorities: eight sample-driven updates of 16,384 */
            for (int u = 0; k >= 1 && u < 8; u++) {
                vx_replay_batch b = {d.bo, d.bn, d.ba, d.br, d.bt, d.bu, d.bs, d.w, d.bi, d.bg};
                vx_replay_sample(r, 16384, &b, s, &err);
                vx_replay_update(r, d.bi, d.bg, d.td, 16384, s, &err);
            }
            vx_replay_set_beta(r, 0.5, s, &err);
            if (k == 2) { /* the rank sort (and the rank masses, first time) */
                for (int i = 0; i < 20; i++) {
                    cudaEventRecord(e0, s);
                    vx_replay_rank_refresh(r, s, &err);
                    cudaEventRecord(e1, s);
                    cudaEventSynchronize(e1);
                    cudaEventElapsedTime(&times[i], e0, e1);
                }
                qsort(times, 20, sizeof *times, cmp_f);
                char name[48];
                snprintf(name, sizeof name, "gpu_rank_refresh_c%zu", caps[c]);
                add(out, &n, max, name, times[10] * 1e3, 0);
            }
            for (int bi = 0; bi < 4; bi++) {
                size_t B = batches[bi];
                vx_replay_batch b = {d.bo, d.bn, d.ba, d.br, d.bt, d.bu, d.bs, d.w, d.bi, d.bg};
                cudaGraph_t graph;
                cudaGraphExec_t exec;
                cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
                vx_replay_sample(r, B, &b, s, &err);
                vx_replay_update(r, d.bi, d.bg, d.td, B, s, &err);
                if (cudaStreamEndCapture(s, &graph) != cudaSuccess ||
                    cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
                    cudaGetLastError();
                    continue;
                }
                double us = vx_bench_graph_median_us(exec, s, WARM, REPS);
                char name[48];
                snprintf(name, sizeof name, "gpu_%s_c%zu_b%zu", kname[k], caps[c], B);
                int target = k == 1 && caps[c] == 10000000 && B == 1024;
                if (us >= 0) add(out, &n, max, name, us, target ? 20 : 0);
                if (target) { /* the same, queued back to back (no launch gap), for comparison */
                    us = vx_bench_graph_queued_us(exec, s, WARM, REPS);
                    snprintf(name, sizeof name, "gpu_%s_queued_c%zu_b%zu", kname[k], caps[c], B);
                    if (us >= 0) add(out, &n, max, name, us, 0);
                }
                cudaGraphExecDestroy(exec);
                cudaGraphDestroy(graph);
                if (target) { /* where the time goes: each half alone */
                    for (int half = 0; half < 2; half++) {
                        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
                        if (half == 0) vx_replay_sample(r, B, &b, s, &err);
                        else vx_replay_update(r, d.bi, d.bg, d.td, B, s, &err);
                        if (cudaStreamEndCapture(s, &graph) != cudaSuccess ||
                            cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
                            cudaGetLastError();
                            continue;
                        }
                        us = vx_bench_graph_median_us(exec, s, WARM, REPS);
                        snprintf(name, sizeof name, "gpu_proportional_%s_only_c%zu_b%zu",
                                 half ? "update" : "sample", caps[c], B);
                        if (us >= 0) add(out, &n, max, name, us, 0);
                        cudaGraphExecDestroy(exec);
                        cudaGraphDestroy(graph);
                    }
                }
            }
            cudaStreamSynchronize(s); /* a stream of our own: idle before the free (device.h) */
            vx_replay_free(r);
        }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(s);
    bufs_free(&d);
    vx_device_close(dev);
    n += cpu_grid(out + n, max - n, log, caps, batches);
    return n;
}

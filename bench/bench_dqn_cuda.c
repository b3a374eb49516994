/* bench_dqn_cuda.c — one captured DQN update on the GPU (sample → three forwards → loss →
 * backward → clip → Adam → priority update) with the default network at batch 1,024 and 4,096,
 * in float32 and with TF32 GEMMs, from a
 * proportional device buffer of 100 K random transitions; median of 200 graph replays timed with
 * events, after 20 warm-ups. Each replay is one launch of one update, and the events around it
 * count the launch; at batch 1,024 a second row runs LOOP updates as one launch of the captured
 * loop, as a training's epoch does (the median of 5 such launches, divided by LOOP). The rows are
 * a user's path (dqn.fused's default), then the same batches through the fused update
 * ("_fused", dqn.fused = 2, dqn_fused.h) and the layer-by-layer one ("_layers", dqn.fused = 3,
 * dqn_layers.h) beside them. Built with CUDA only. */
#include "bench.h"
#include "bench_cuda.h"
#include "vixen/device.h"
#include "vixen/dqn.h"
#include "dqn/learner_cuda.h"
#include "vixen/philox.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

/* The median of n timings (sorted in place). */
static float median(float *t, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            float x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    return t[n / 2];
}

int vx_bench_dqn_cuda(vx_bench_result *out, int max, FILE *log)
{
    if (max < 1) return 0;
    vx_device *dev = vx_bench_cuda_open(log);
    if (!dev) return 0;
    vx_err e;
    const size_t N = 100000, D = 51;
    /* float32, then TF32, as a user's run takes them; then the same through the fused update
     * (dqn.fused = 2) and the layer-by-layer one (3), for the comparison */
    const int batches[12] = {1024, 4096, 1024, 4096, 1024, 4096,
                             1024, 4096, 1024, 4096, 1024, 4096};
    enum { LOOP = 341 }; /* the reference epoch's updates */
    float *o = malloc(N * D * 4), *r = malloc(N * 4);
    int32_t *a = malloc(N * 12);
    uint8_t *f = calloc(N, 1);
    vx_rng g = vx_rng_make(1, 0, 0);
    for (size_t i = 0; i < N * D; i++) o[i] = (float)vx_rng_normal(&g);
    for (size_t i = 0; i < N; i++) {
        r[i] = (float)vx_rng_normal(&g);
        a[i * 3] = (int32_t)vx_rng_below(&g, 9), a[i * 3 + 1] = (int32_t)vx_rng_below(&g, 3);
        a[i * 3 + 2] = (int32_t)vx_rng_below(&g, 3);
    }
    float *d_o, *d_r;
    int32_t *d_a;
    uint8_t *d_f;
    d_o = d_r = NULL, d_a = NULL, d_f = NULL;
    int bad = cudaMalloc((void **)&d_o, N * D * 4) | cudaMalloc((void **)&d_r, N * 4) |
              cudaMalloc((void **)&d_a, N * 12) | cudaMalloc((void **)&d_f, N);
    if (!bad) bad |= cudaMemcpy(d_o, o, N * D * 4, cudaMemcpyHostToDevice);
    if (!bad) bad |= cudaMemcpy(d_r, r, N * 4, cudaMemcpyHostToDevice);
    if (!bad) bad |= cudaMemcpy(d_a, a, N * 12, cudaMemcpyHostToDevice);
    if (!bad) bad |= cudaMemcpy(d_f, f, N, cudaMemcpyHostToDevice);
    /* the DMA landed: from pageable memory cudaMemcpy may return first, and the updates run on
     * streams of their own */
    if (!bad) bad |= cudaDeviceSynchronize();
    free(o), free(r), free(a), free(f);
    if (bad) fprintf(log, "bench: the transitions did not reach the device\n");
    int n = 0;
    for (int k = 0; k < 12 && n < max && !bad; k++) {
        vx_dqn_cfg dc;
        vx_dqn_cfg_default(&dc);
        dc.batch = batches[k];
        dc.tf32 = k % 4 >= 2;
        if (k >= 4) dc.fused = k >= 8 ? 3 : 2;
        const char *path = k >= 8 ? "_layers" : k >= 4 ? "_fused" : "";
        vx_qnet_cfg qc;
        vx_qnet_cfg_default(&qc);
        vx_dqn cpu;
        if (vx_dqn_create(&dc, &qc, 1, &cpu, &e)) break;
        vx_replay_cfg rc;
        vx_replay_cfg_default(&rc, VX_REPLAY_PROPORTIONAL, N);
        vx_replay *rep = NULL;
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        vx_transitions t = {d_o, d_o, d_a, d_r, d_f, d_f, NULL};
        dqn_learner *d = NULL;
        if (!vx_replay_create(&rc, dev, &rep, &e) && !vx_replay_insert(rep, &t, N, s, &e) &&
            !dqn_learner_create(&dc, &cpu.L, &cpu.shape, cpu.online, rep, dev, s, &d, &e)) {
            if (log)
                fprintf(log, "bench: GPU DQN update at batch %d%s%s\n", batches[k],
                        dc.tf32 ? ", TF32" : "", dqn_learner_fused(d) ? ", fused" : "");
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            float ms[200];
            int ok = 1;
            for (int i = 0; i < 20 && ok; i++) ok = dqn_learner_update(d, 0, &e) == VX_OK;
            for (int i = 0; i < 200 && ok; i++) {
                cudaEventRecord(e0, s);
                ok = dqn_learner_update(d, 0, &e) == VX_OK;
                cudaEventRecord(e1, s);
                cudaEventSynchronize(e1);
                cudaEventElapsedTime(&ms[i], e0, e1);
            }
            if (ok) {
                float mid = median(ms, 200);
                vx_bench_result *x = &out[n++];
                memset(x, 0, sizeof *x);
                snprintf(x->name, sizeof x->name, "gpu_dqn_update_b%d%s%s", batches[k],
                         dc.tf32 ? "_tf32" : "", path);
                snprintf(x->unit, sizeof x->unit, "us");
                x->items = batches[k], x->seconds = mid * 1e-3, x->value = mid * 1e3;
                x->target = batches[k] == 1024 && k < 4 ? 50 : 0;
                x->lower_is_better = 1;
            } else if (log) {
                fprintf(log, "bench: %s\n", e.msg);
            }
            if (ok && batches[k] == 1024 && n < max) {
                float lm[5];
                for (int i = 0; i < 5 && ok; i++) {
                    cudaEventRecord(e0, s);
                    ok = dqn_learner_update_n(d, LOOP, &e) == VX_OK;
                    cudaEventRecord(e1, s);
                    cudaEventSynchronize(e1);
                    cudaEventElapsedTime(&lm[i], e0, e1);
                }
                if (ok) {
                    float mid = median(lm, 5);
                    vx_bench_result *x = &out[n++];
                    memset(x, 0, sizeof *x);
                    snprintf(x->name, sizeof x->name, "gpu_dqn_update_b%d%s%s_in_loop", batches[k],
                             dc.tf32 ? "_tf32" : "", path);
                    snprintf(x->unit, sizeof x->unit, "us");
                    x->items = (double)batches[k] * LOOP, x->seconds = mid * 1e-3;
                    x->value = mid * 1e3 / LOOP;
                    x->lower_is_better = 1;
                } else if (log) {
                    fprintf(log, "bench: %s\n", e.msg);
                }
            }
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
        } else if (log) {
            fprintf(log, "bench: %s\n", e.msg);
        }
        cudaStreamSynchronize(s); /* a stream of our own: idle before the frees (device.h) */
        dqn_learner_free(d);
        vx_replay_free(rep);
        cudaStreamDestroy(s);
        vx_dqn_free(&cpu);
    }
    cudaFree(d_o), cudaFree(d_r), cudaFree(d_a), cudaFree(d_f);
    vx_device_close(dev);
    return n;
}

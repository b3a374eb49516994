/* bench_env_cuda.c — GPU environment stepping: N environments × 100 steps of random actions
 * (drawn before timing), as one CUDA graph of 100 step launches, timed with events (median of 20
 * replays after 3 warm-ups). The environments live on a CUDA device context opened here. Built
 * with CUDA only. */
#include "bench.h"
#include "bench_cuda.h"
#include "vixen/env.h"
#include "vixen/philox.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

int vx_bench_env_cuda(vx_bench_result *out, int max, FILE *log)
{
    vx_synth_cfg sc;
    vx_synth_default(&sc);
    sc.days = 60;
    vx_series s = {0};
    vx_market m;
    vx_err e;
    if (vx_synth_generate(&sc, &s, NULL, &e) || vx_market_from_series(&s, &m, &e)) {
        vx_series_free(&s);
        return 0;
    }
    vx_series_free(&s);
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CUDA;
    vx_device *dev;
    if (vx_device_open(&dc, &dev, &e)) {
        vx_market_close(&m);
        return 0;
    }
    const size_t sizes[2] = {2048, 65536};
    const int T = 100;
    int n = 0;
    for (int k = 0; k < 2 && n < max; k++) {
        size_t N = sizes[k];
        vx_env_cfg c;
        vx_env_cfg_default(&c);
        vx_env *env;
        if (vx_env_create(&c, &m, VX_SPLIT_TRAIN, N, dev, &env, &e)) continue;
        if (log) fprintf(log, "bench: GPU env, %zu environments\n", N);
        size_t act_bytes = N * VX_ACTION_BRANCHES * sizeof(int32_t) * T;
        int32_t *h = malloc(act_bytes), *act;
        float *obs, *rew, *fin;
        uint8_t *te, *tr;
        vx_rng g = vx_rng_make(3, 0, 0);
        for (size_t i = 0; i < N * T; i++) {
            int32_t *a = h + i * VX_ACTION_BRANCHES;
            a[0] = (int32_t)vx_rng_below(&g, VX_EXPOSURE_LEVELS);
            a[1] = (int32_t)vx_rng_below(&g, VX_ORDER_TYPES);
            a[2] = (int32_t)vx_rng_below(&g, VX_URGENCY_LEVELS);
        }
        cudaMalloc((void **)&act, act_bytes);
        cudaMalloc((void **)&obs, N * VX_OBS_DIM * 4);
        cudaMalloc((void **)&fin, N * VX_OBS_DIM * 4);
        cudaMalloc((void **)&rew, N * 4);
        cudaMalloc((void **)&te, N);
        cudaMalloc((void **)&tr, N);
        cudaStream_t st;
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        cudaMemcpyAsync(act, h, act_bytes, cudaMemcpyHostToDevice, st);
        cudaStreamSynchronize(st);
        free(h);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
        for (int t = 0; t < T; t++)
            vx_env_step(env, act + (size_t)t * N * VX_ACTION_BRANCHES, obs, rew, te, tr, fin, st,
                        &e);
        cudaStreamEndCapture(st, &graph);
        double us = -1;
        if (cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
            us = vx_bench_graph_median_us(exec, st, 3, 20);
            cudaGraphExecDestroy(exec);
        }
        if (us >= 0) {
            vx_bench_result *x = &out[n++];
            memset(x, 0, sizeof *x);
            snprintf(x->name, sizeof x->name, "gpu_env_%zux100_steps", N);
            snprintf(x->unit, sizeof x->unit, "us");
            x->items = (double)N * T;
            x->seconds = us * 1e-6;
            x->value = us;
            x->target = N == 2048 ? 1000 : 0; /* the collection budget: 2,048 × 100 in ≤ 1 ms */
            x->lower_is_better = 1;
        }
        cudaGraphDestroy(graph);
        cudaStreamDestroy(st);
        cudaFree(act), cudaFree(obs), cudaFree(fin), cudaFree(rew), cudaFree(te), cudaFree(tr);
        vx_env_free(env);
    }
    vx_device_close(dev);
    vx_market_close(&m);
    return n;
}

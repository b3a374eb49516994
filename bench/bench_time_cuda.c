/* bench_time_cuda.c — see bench_cuda.h. */
#include "bench_cuda.h"

#include <stdlib.h>
#include <string.h>

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

double vx_bench_graph_median_us(cudaGraphExec_t exec, cudaStream_t s, int warm, int reps)
{
    float ms[256];
    if (reps < 1 || reps > 256) return -1;
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess) return -1;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return -1;
    }
    int bad = 0;
    for (int i = 0; i < warm && !bad; i++) bad = cudaGraphLaunch(exec, s) != cudaSuccess;
    for (int i = 0; i < reps && !bad; i++) {
        bad = cudaEventRecord(e0, s) != cudaSuccess || cudaGraphLaunch(exec, s) != cudaSuccess ||
              cudaEventRecord(e1, s) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
              cudaEventElapsedTime(&ms[i], e0, e1) != cudaSuccess;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (bad) return -1;
    qsort(ms, (size_t)reps, sizeof *ms, cmp_f);
    return ms[reps / 2] * 1e3;
}

double vx_bench_graph_queued_us(cudaGraphExec_t exec, cudaStream_t s, int warm, int reps)
{
    cudaEvent_t e0, e1;
    if (reps < 1 || cudaEventCreate(&e0) != cudaSuccess) return -1;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return -1;
    }
    int bad = 0;
    for (int i = 0; i < warm && !bad; i++) bad = cudaGraphLaunch(exec, s) != cudaSuccess;
    bad = bad || cudaEventRecord(e0, s) != cudaSuccess;
    for (int i = 0; i < reps && !bad; i++) bad = cudaGraphLaunch(exec, s) != cudaSuccess;
    float ms = 0;
    bad = bad || cudaEventRecord(e1, s) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
          cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return bad ? -1 : ms * 1e3 / reps;
}

vx_device *vx_bench_cuda_open(FILE *log)
{
    vx_device_cfg c;
    vx_device_cfg_default(&c);
    c.kind = VX_DEVICE_CUDA;
    vx_device *dev = NULL;
    vx_err e;
    if (vx_device_open(&c, &dev, &e) != VX_OK) {
        if (log) fprintf(log, "bench: %s\n", e.msg);
        return NULL;
    }
    return dev;
}

void vx_bench_put(vx_bench_result *r, const char *name, const char *unit, double items, double us)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->unit, sizeof r->unit, "%s", unit);
    r->items = items, r->seconds = us * 1e-6, r->value = us > 0 ? items / (us * 1e-6) : 0;
}

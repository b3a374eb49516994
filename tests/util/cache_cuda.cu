/* cache_cuda.cu — CUDA helpers for the tests of the context's stream, event and pinned-memory
 * cache and of its launcher thread (cache_cuda.h). */
#include "cache_cuda.h"
#include "util/device_cuda.h"

#include <pthread.h>
#include <stdlib.h>

extern "C" void *cache_stream_take(vx_device *d)
{
    cudaStream_t s = NULL;
    vx_err e;
    return vx_cuda_stream_create(d, &s, &e) == VX_OK ? (void *)s : NULL;
}

extern "C" void cache_stream_give(vx_device *d, void *s)
{
    vx_cuda_stream_destroy(d, (cudaStream_t)s);
}

extern "C" int cache_stream_idle(void *s)
{
    return cudaStreamQuery((cudaStream_t)s) == cudaSuccess;
}

extern "C" void *cache_event_take(vx_device *d, int timing)
{
    cudaEvent_t ev = NULL;
    vx_err e;
    return vx_cuda_event_create(d, &ev, timing, &e) == VX_OK ? (void *)ev : NULL;
}

extern "C" void cache_event_give(vx_device *d, void *ev, int timing)
{
    vx_cuda_event_destroy(d, (cudaEvent_t)ev, timing);
}

extern "C" int cache_event_complete(void *ev)
{
    return cudaEventQuery((cudaEvent_t)ev) == cudaSuccess;
}

extern "C" int cache_event_record_behind(void *ev, spin *p)
{
    return cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)spin_stream(p)) != cudaSuccess;
}

extern "C" int cache_event_record_in_capture(vx_device *d, void *ev)
{
    cudaStream_t s = NULL;
    cudaGraph_t g = NULL;
    vx_err e;
    if (vx_cuda_stream_create(d, &s, &e) != VX_OK) return 1;
    int bad = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess;
    if (!bad) bad = cudaEventRecord((cudaEvent_t)ev, s) != cudaSuccess;
    bad |= cudaStreamEndCapture(s, &g) != cudaSuccess;
    if (g) cudaGraphDestroy(g);
    vx_cuda_stream_destroy(d, s);
    return bad;
}

extern "C" int cache_copy_behind(spin *p, void *pinned, size_t n, unsigned char value)
{
    void *src = NULL;
    cudaStream_t s = (cudaStream_t)spin_stream(p);
    /* raw memory of the test's, never freed while the copy may run: it goes with the process.
     * Both behind the kernel: a synchronising call here would wait for the kernel's deadline. */
    if (cudaMalloc(&src, n) != cudaSuccess || cudaMemsetAsync(src, value, n, s) != cudaSuccess)
        return 1;
    return cudaMemcpyAsync(pinned, src, n, cudaMemcpyDeviceToHost, s) != cudaSuccess;
}

#define PRIME 1000003ull

__global__ static void twice_plus_one(unsigned long long *x) { *x = (2 * *x + 1) % PRIME; }
__global__ static void thrice(unsigned long long *x) { *x = (3 * *x) % PRIME; }

typedef struct {
    vx_device *d;
    int launches, bad, failed;
} launch_job;

static void *launch_thread(void *arg)
{
    launch_job *j = (launch_job *)arg;
    vx_err e;
    cudaStream_t s = NULL;
    cudaGraph_t g[2] = {NULL, NULL};
    cudaGraphExec_t x[2] = {NULL, NULL};
    unsigned long long *dx = NULL, got = 0, want = 1;
    int ok = vx_cuda_enter(j->d, &e) == VX_OK && vx_cuda_stream_create(j->d, &s, &e) == VX_OK &&
             cudaMalloc(&dx, sizeof *dx) == cudaSuccess &&
             cudaMemcpyAsync(dx, &want, sizeof want, cudaMemcpyHostToDevice, s) == cudaSuccess &&
             cudaStreamSynchronize(s) == cudaSuccess;
    for (int k = 0; k < 2 && ok; k++) {
        ok = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
        if (ok) {
            if (k == 0) twice_plus_one<<<1, 1, 0, s>>>(dx);
            else thrice<<<1, 1, 0, s>>>(dx);
        }
        ok = cudaStreamEndCapture(s, &g[k]) == cudaSuccess && ok &&
             cudaGraphInstantiate(&x[k], g[k], 0) == cudaSuccess;
    }
    for (int i = 0; i < j->launches && ok; i++) {
        ok = vx_cuda_graph_launch(j->d, x[i & 1], s, &e) == VX_OK;
        want = i & 1 ? (3 * want) % PRIME : (2 * want + 1) % PRIME;
    }
    ok = ok && cudaMemcpyAsync(&got, dx, sizeof got, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
         cudaStreamSynchronize(s) == cudaSuccess;
    j->failed = !ok;
    j->bad = ok && got != want;
    for (int k = 0; k < 2; k++) {
        if (x[k]) cudaGraphExecDestroy(x[k]);
        if (g[k]) cudaGraphDestroy(g[k]);
    }
    vx_cuda_stream_destroy(j->d, s);
    if (dx) cudaFree(dx);
    return NULL;
}

extern "C" int cache_launch_order(vx_device *d, int threads, int launches)
{
    launch_job *j = (launch_job *)calloc((size_t)threads, sizeof *j);
    pthread_t *t = (pthread_t *)calloc((size_t)threads, sizeof *t);
    if (!j || !t) return -1;
    int started = 0, bad = 0, failed = 0;
    for (int i = 0; i < threads; i++, started++) {
        j[i].d = d, j[i].launches = launches;
        if (pthread_create(&t[i], NULL, launch_thread, &j[i]) != 0) break;
    }
    failed = started < threads; /* a thread not run must not pass for one in order */
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        bad += j[i].bad, failed += j[i].failed;
    }
    free(j), free(t);
    return failed ? -1 : bad;
}

extern "C" long long cache_launcher_launches(const vx_device *d)
{
    return vx_cuda_launcher_launches(d);
}

extern "C" void cache_ahead_stats(const vx_device *share, size_t *size, size_t *carved, int *used)
{
    vx_cuda_ahead_stats(share, size, carved, used);
}

extern "C" int cache_fill_check(void *p, size_t n, unsigned char value)
{
    unsigned char *h = (unsigned char *)malloc(n);
    if (!h) return -1;
    int bad = cudaMemset(p, value, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess ||
              cudaMemcpy(h, p, n, cudaMemcpyDeviceToHost) != cudaSuccess;
    for (size_t i = 0; i < n && !bad; i++) bad = h[i] != value;
    free(h);
    return bad;
}

extern "C" int cache_check(const void *p, size_t n, unsigned char value)
{
    unsigned char *h = (unsigned char *)malloc(n);
    if (!h) return -1;
    int bad = cudaMemcpy(h, p, n, cudaMemcpyDeviceToHost) != cudaSuccess;
    for (size_t i = 0; i < n && !bad; i++) bad = h[i] != value;
    free(h);
    return bad;
}

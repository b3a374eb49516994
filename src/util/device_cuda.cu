/* device_cuda.cu — the CUDA kind of device context (device_cuda.h): the device made current per
 * thread, streams, the shared cuBLASLt handle, and device and pinned memory charged to the
 * context's budget (device.c does the accounting; this file only allocates).
 *
 * Device memory is stream-ordered (cudaMallocAsync, cudaFreeAsync on a stream of the context's
 * own) where the device has memory pools: cudaFree waits for the whole device to go idle, so
 * with many trials on one GPU every trial's start and end stalled all the others (measured on
 * the H200, 20 trials at once: 143 frees blocked for 7.5 s in all, up to 0.6 s each). A free
 * waits instead for the streams of the context that owned the memory (device_internal.h), then
 * hands the block back; the pool keeps nothing (release threshold 0), so the driver's count of
 * free memory, which the search's watchdog reads, stays what it was with cudaFree. */
#include "device_cuda.h"
#include "cuda_check.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    cublasLtHandle_t lt;
    int sm_count;
    int pools;          /* the device has stream-ordered memory pools */
    cudaStream_t alloc; /* where allocations and frees are ordered (with pools) */
} cuda_impl;

/* Only a thread on another device switches: cudaGetDevice is safe anywhere, also inside a stream
 * capture, and most calls find the device already current. */
extern "C" vx_status vx_cuda_enter(const vx_device *d, vx_err *e)
{
    vx_status st = VX_OK;
    int cur = -1;
    if (!d || d->kind != VX_DEVICE_CUDA)
        return vx_err_set(e, VX_ERR_ARG, "a CUDA object needs a CUDA device context");
    VX_CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != d->index) VX_CUDA_CHECK(cudaSetDevice(d->index));
fail:
    return st;
}

/* The context's streams, which a free of its memory waits for (device_internal.h). */
static int streams_add(vx_device *d, cudaStream_t s)
{
    pthread_mutex_lock(&d->streams_lock);
    int ok = 1;
    if (d->n_streams == d->cap_streams) {
        int cap = d->cap_streams ? 2 * d->cap_streams : 16;
        void **grown = (void **)realloc(d->streams, (size_t)cap * sizeof *grown);
        if (grown) d->streams = grown, d->cap_streams = cap;
        else ok = 0;
    }
    if (ok) d->streams[d->n_streams++] = (void *)s;
    pthread_mutex_unlock(&d->streams_lock);
    return ok;
}

static void streams_remove(vx_device *d, cudaStream_t s)
{
    pthread_mutex_lock(&d->streams_lock);
    for (int i = 0; i < d->n_streams; i++)
        if (d->streams[i] == (void *)s) {
            d->streams[i] = d->streams[--d->n_streams];
            break;
        }
    pthread_mutex_unlock(&d->streams_lock);
}

/* Every stream of the context idle: nothing queued there can still touch its memory. A stream
 * that another thread is capturing into a graph is passed over: waiting for it would end that
 * capture in error, and what it is capturing does not run. (Its objects are that thread's, busy
 * capturing, not the ones whose memory is being freed.) */
static void streams_wait(vx_device *d)
{
    pthread_mutex_lock(&d->streams_lock);
    for (int i = 0; i < d->n_streams; i++) {
        cudaStream_t s = (cudaStream_t)d->streams[i];
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(s, &cs) != cudaSuccess) cudaGetLastError();
        if (cs == cudaStreamCaptureStatusNone) cudaStreamSynchronize(s);
    }
    pthread_mutex_unlock(&d->streams_lock);
}

extern "C" vx_status vx_cuda_stream_create(vx_device *d, cudaStream_t *s, vx_err *e)
{
    *s = NULL;
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    VX_CUDA_CHECK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
    if (!streams_add(d, *s)) {
        cudaStreamDestroy(*s);
        *s = NULL;
        return vx_err_set(e, VX_ERR_NOMEM, "device: out of memory");
    }
fail:
    return st;
}

/* The stream's work finishes first: once it is gone, a free would no longer wait for it. */
extern "C" void vx_cuda_stream_destroy(vx_device *d, cudaStream_t s)
{
    if (!s) return;
    if (vx_cuda_enter(d, NULL) == VX_OK) cudaStreamSynchronize(s);
    streams_remove(d, s);
    cudaStreamDestroy(s);
}

extern "C" vx_status vx_cuda_loop_begin(cudaStream_t s, cudaGraph_t *graph,
                                        cudaGraphConditionalHandle *loop, vx_err *e)
{
    vx_status st = VX_OK;
    cudaGraphNode_t node;
    cudaGraphNodeParams p = {}; /* zeroed: the fields not set here must be */
    *graph = NULL;
    VX_CUDA_CHECK(cudaGraphCreate(graph, 0));
    VX_CUDA_CHECK(cudaGraphConditionalHandleCreate(loop, *graph, 1, cudaGraphCondAssignDefault));
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = *loop;
    p.conditional.type = cudaGraphCondTypeWhile;
    p.conditional.size = 1;
    VX_CUDA_CHECK(cudaGraphAddNode(&node, *graph, NULL, NULL, 0, &p));
    VX_CUDA_CHECK(cudaStreamBeginCaptureToGraph(s, p.conditional.phGraph_out[0], NULL, NULL, 0,
                                                cudaStreamCaptureModeThreadLocal));
    return VX_OK;
fail:
    if (*graph) cudaGraphDestroy(*graph);
    *graph = NULL;
    return st;
}

extern "C" cublasLtHandle_t vx_cuda_lt(const vx_device *d) { return ((cuda_impl *)d->impl)->lt; }
extern "C" int vx_cuda_sm_count(const vx_device *d) { return ((cuda_impl *)d->impl)->sm_count; }

static vx_status cuda_alloc(vx_device *d, size_t bytes, void **out, vx_err *e)
{
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    const cuda_impl *c = (const cuda_impl *)d->impl;
    cudaError_t rc;
    *out = NULL;
    if (c->pools) {
        /* ready for any stream once the allocating stream has passed it */
        rc = cudaMallocAsync(out, bytes ? bytes : 1, c->alloc);
        if (rc == cudaSuccess) rc = cudaStreamSynchronize(c->alloc);
    } else {
        rc = cudaMalloc(out, bytes ? bytes : 1);
    }
    if (rc != cudaSuccess) {
        cudaGetLastError(); /* an out-of-memory error is not sticky: clear it */
        if (*out && c->pools) cudaFreeAsync(*out, c->alloc);
        *out = NULL;
        return vx_err_set(e, rc == cudaErrorMemoryAllocation ? VX_ERR_NOMEM : VX_ERR_CUDA,
                          "cudaMalloc of %.1f MB on %s failed: %s", bytes / 1e6, d->name,
                          cudaGetErrorString(rc));
    }
    return VX_OK;
}

static void cuda_free(vx_device *d, void *p)
{
    if (vx_cuda_enter(d, NULL) != VX_OK) return;
    const cuda_impl *c = (const cuda_impl *)d->impl;
    if (!c->pools) {
        cudaFree(p);
        return;
    }
    streams_wait(d);
    cudaFreeAsync(p, c->alloc);
    cudaStreamSynchronize(c->alloc); /* the pool gives the block back to the device here */
}

static vx_status cuda_alloc_host(vx_device *d, size_t bytes, void **out, vx_err *e)
{
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    cudaError_t rc = cudaMallocHost(out, bytes ? bytes : 1);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        *out = NULL;
        return vx_err_set(e, VX_ERR_NOMEM, "cudaMallocHost of %.1f MB failed: %s", bytes / 1e6,
                          cudaGetErrorString(rc));
    }
    return VX_OK;
}

static void cuda_free_host(vx_device *d, void *p)
{
    if (vx_cuda_enter(d, NULL) == VX_OK) cudaFreeHost(p);
}

static void cuda_close(vx_device *d)
{
    cuda_impl *c = (cuda_impl *)d->impl;
    if (!c) return;
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->alloc) {
        cudaStreamSynchronize(c->alloc);
        cudaStreamDestroy(c->alloc);
    }
    free(c);
    d->impl = NULL;
}

/* A private stream per call: the copy orders only against itself (work already queued
 * elsewhere is the caller's to have waited for), and nothing else on the device waits for it. */
static vx_status cuda_copy(vx_device *d, void *dst, const void *src, size_t n, int to_device,
                           vx_err *e)
{
    cudaStream_t s = NULL;
    vx_status st = vx_cuda_stream_create(d, &s, e);
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n,
                                  to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaStreamSynchronize(s));
fail:
    vx_cuda_stream_destroy(d, s);
    return st;
}

static vx_status cuda_stream_create(vx_device *d, vx_stream *out, vx_err *e)
{
    cudaStream_t s = NULL;
    vx_status st = vx_cuda_stream_create(d, &s, e);
    *out = s;
    return st;
}

static vx_status cuda_stream_sync(vx_device *d, vx_stream vs, vx_err *e)
{
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    if (!vs) return vx_err_set(e, VX_ERR_ARG, "device: no stream to wait for on %s", d->name);
    VX_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)vs));
fail:
    return st;
}

static void cuda_stream_destroy(vx_device *d, vx_stream s)
{
    vx_cuda_stream_destroy(d, (cudaStream_t)s);
}

static vx_status cuda_mem_info(vx_device *d, size_t *free_b, size_t *total_b, vx_err *e)
{
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    VX_CUDA_CHECK(cudaMemGetInfo(free_b, total_b));
fail:
    return st;
}

static int cuda_units(const vx_device *d) { return vx_cuda_sm_count(d); }

static const vx_device_ops cuda_ops = {cuda_alloc,         cuda_free,        cuda_alloc_host,
                                       cuda_free_host,     cuda_close,       cuda_copy,
                                       cuda_stream_create, cuda_stream_sync, cuda_stream_destroy,
                                       cuda_mem_info,      cuda_units};

extern "C" vx_status vx_device_open_cuda(const vx_device_cfg *cfg, vx_device **out, vx_err *e)
{
    *out = NULL;
    vx_status st = VX_OK;
    int n = 0;
    size_t free_b = 0, total_b = 0;
    cudaDeviceProp p;
    cublasStatus_t bs;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    if (cfg->index < 0 || cfg->index >= n)
        return vx_err_set(e, VX_ERR_ARG, "device: cuda:%d asked for, but %d CUDA device(s) visible",
                          cfg->index, n);
    vx_device *d = vx_device_alloc(VX_DEVICE_CUDA, cfg->index);
    cuda_impl *c = (cuda_impl *)calloc(1, sizeof *c);
    if (!d || !c) {
        free(d), free(c);
        return vx_err_set(e, VX_ERR_NOMEM, "device: out of memory");
    }
    d->impl = c;
    d->ops = &cuda_ops;
    VX_CUDA_CHECK(cudaSetDevice(cfg->index));
    {
        /* how a host thread waits for the device: VIXEN_CUDA_SYNC=block makes it sleep instead of
         * spinning on a core (many trials' threads, more than cores), =yield yields; the default
         * is the runtime's (spin while there are cores to spare) */
        const char *sync = getenv("VIXEN_CUDA_SYNC");
        unsigned flags = !sync                        ? 0
                         : strcmp(sync, "block") == 0 ? cudaDeviceScheduleBlockingSync
                         : strcmp(sync, "yield") == 0 ? cudaDeviceScheduleYield
                         : strcmp(sync, "spin") == 0  ? cudaDeviceScheduleSpin
                                                      : 0;
        if (flags) {
            cudaError_t rc = cudaSetDeviceFlags(flags);
            if (rc != cudaSuccess) {
                cudaGetLastError();
                vx_log(VX_LOG_WARN, "VIXEN_CUDA_SYNC=%s not applied: %s", sync,
                       cudaGetErrorString(rc));
            }
        }
    }
    VX_CUDA_CHECK(cudaGetDeviceProperties(&p, cfg->index));
    VX_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    c->sm_count = p.multiProcessorCount;
    VX_CUDA_CHECK(cudaDeviceGetAttribute(&c->pools, cudaDevAttrMemoryPoolsSupported, cfg->index));
    if (c->pools) {
        cudaMemPool_t pool;
        unsigned long long keep = 0; /* nothing held back from the device (the top comment) */
        VX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, cfg->index));
        VX_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
        VX_CUDA_CHECK(cudaStreamCreateWithFlags(&c->alloc, cudaStreamNonBlocking));
    }
    bs = cublasLtCreate(&c->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        st = vx_err_set(e, VX_ERR_CUDA, "device: cublasLtCreate failed: status %d", (int)bs);
        goto fail;
    }
    d->total = total_b;
    d->budget = cfg->budget ? cfg->budget : free_b / 20 * 19;
    snprintf(d->name, sizeof d->name, "cuda:%d %.80s, sm_%d%d, %d SMs, %.1f GiB", cfg->index,
             p.name, p.major, p.minor, p.multiProcessorCount, total_b / 1073741824.0);
    *out = d;
    return VX_OK;
fail:
    cuda_close(d);
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->streams_lock);
    free(d);
    return st;
}

/* device_cuda.h — the CUDA side of the device context, for the library's .cu files (internal).
 *
 * Every CUDA entry point of an object enters its device first (vx_cuda_enter: cudaSetDevice for
 * the calling thread), so objects of one context can be driven from any thread. Streams come
 * from the context (non-blocking: they never wait for the legacy default stream, nor it for
 * them). The cuBLASLt handle is shared: cuBLASLt takes the stream and the workspace with every
 * call, so one handle serves every stream and thread, and each caller passes a workspace of its
 * own (a workspace shared by two concurrent GEMMs would be a race). */
#ifndef VIXEN_DEVICE_CUDA_H
#define VIXEN_DEVICE_CUDA_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include "device_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Makes d current for the calling thread; an error when d is not a CUDA context. */
vx_status vx_cuda_enter(const vx_device *d, vx_err *e);
/* A non-blocking stream of d's, which frees of d's memory wait for until it is destroyed;
 * destroying it waits for its work. */
vx_status vx_cuda_stream_create(vx_device *d, cudaStream_t *s, vx_err *e);
void vx_cuda_stream_destroy(vx_device *d, cudaStream_t s);
/* An event of d's (timing: it can time, cudaEventElapsedTime; else cudaEventDisableTiming),
 * complete until first recorded, as a new one; destroy with the same `timing`. Streams and
 * events come from the context's cache and go back to it (device_cuda.cu). */
vx_status vx_cuda_event_create(vx_device *d, cudaEvent_t *ev, int timing, vx_err *e);
void vx_cuda_event_destroy(vx_device *d, cudaEvent_t ev, int timing);
/* cudaGraphLaunch(g, s), issued by the context's launcher thread when it has one
 * (vx_device_set_launcher), else here; returns once the launch is queued on s either way. */
vx_status vx_cuda_graph_launch(vx_device *d, cudaGraphExec_t g, cudaStream_t s, vx_err *e);
/* The launches the launcher thread has issued since the context opened (tests). */
long long vx_cuda_launcher_launches(const vx_device *d);
/* A share's memory reserved ahead (vx_device_reserve_ahead): its size, the bytes carved into
 * blocks so far, and how many of them are in use (tests); zeros without it. */
void vx_cuda_ahead_stats(const vx_device *share, size_t *size, size_t *carved, int *blocks_used);
/* A graph of one conditional while node, whose body stream s now captures into: the caller
 * queues the body's work on s (a kernel in it calls cudaGraphSetConditional(*loop, more) for the
 * next pass), then ends the capture. The body runs at least once a launch. On failure nothing
 * is left: *graph is NULL and s is not capturing. */
vx_status vx_cuda_loop_begin(cudaStream_t s, cudaGraph_t *graph, cudaGraphConditionalHandle *loop,
                             vx_err *e);
cublasLtHandle_t vx_cuda_lt(const vx_device *d);
int vx_cuda_sm_count(const vx_device *d);

#ifdef __cplusplus
}
#endif

#endif

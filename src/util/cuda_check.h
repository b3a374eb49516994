/* cuda_check.h — the one checking macro for CUDA runtime calls and kernel launches.
 *
 * VX_CUDA_CHECK(call) evaluates a cudaError_t expression; on failure it fills `e` with the call,
 * the CUDA error string, file and line, and jumps to the enclosing function's `fail:` label, where
 * the function frees what it holds and returns the status. VX_CUDA_LAUNCH_CHECK(stream) follows
 * every launch; with VX_DEBUG_SYNC it also waits for that stream (unless the stream is being
 * captured into a graph), to localise a fault to its kernel — never for the whole device, which
 * other trials may share. */
#ifndef VIXEN_CUDA_CHECK_H
#define VIXEN_CUDA_CHECK_H

#include <cuda_runtime.h>
#include "vixen/util.h"

#define VX_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        cudaError_t vx_rc_ = (call);                                                               \
        if (vx_rc_ != cudaSuccess) {                                                               \
            st = vx_err_set(e, VX_ERR_CUDA, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call,     \
                            cudaGetErrorString(vx_rc_));                                           \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#ifdef VX_DEBUG_SYNC
#define VX_CUDA_LAUNCH_CHECK(stream)                                                               \
    do {                                                                                           \
        cudaStreamCaptureStatus vx_cs_ = cudaStreamCaptureStatusNone;                              \
        VX_CUDA_CHECK(cudaGetLastError());                                                         \
        VX_CUDA_CHECK(cudaStreamIsCapturing((stream), &vx_cs_));                                   \
        if (vx_cs_ == cudaStreamCaptureStatusNone) VX_CUDA_CHECK(cudaStreamSynchronize(stream));   \
    } while (0)
#else
#define VX_CUDA_LAUNCH_CHECK(stream) VX_CUDA_CHECK(cudaGetLastError())
#endif

#endif

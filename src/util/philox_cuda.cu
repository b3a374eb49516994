/* philox_cuda.cu — the device twin of philox.h, and device discovery.
 *
 * The kernel runs the very same `VX_HD` vx_rng functions the host runs; the test
 * (tests/util/test_philox_cuda.c) compares every draw with the host's. This file is the CUDA seam
 * that exists from day one: its build proves the shared headers compile under nvcc. */
#include "vixen/cuda_util.h"
#include "vixen/philox.h"
#include "cuda_check.h"

#include <stdio.h>

static __global__ void philox_fill_kernel(uint64_t seed, size_t n_streams, size_t per,
                                          uint32_t below_n, uint32_t *words, float *uniforms,
                                          double *normals, uint32_t *below)
{
    size_t s = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n_streams) return;
    /* four independent sub-streams per stream id, one per kind, as the host test does */
    vx_rng rw = vx_rng_make(seed, s * 4 + 0, 0);
    vx_rng ru = vx_rng_make(seed, s * 4 + 1, 0);
    vx_rng rn = vx_rng_make(seed, s * 4 + 2, 0);
    vx_rng rb = vx_rng_make(seed, s * 4 + 3, 0);
    for (size_t k = 0; k < per; k++) {
        size_t i = s * per + k;
        if (words) words[i] = vx_rng_u32(&rw);
        if (uniforms) uniforms[i] = vx_rng_uniform(&ru);
        if (normals) normals[i] = vx_rng_normal(&rn);
        if (below) below[i] = vx_rng_below(&rb, below_n);
    }
}

static cudaError_t launch_philox_fill(cudaStream_t stream, uint64_t seed, size_t n_streams,
                                      size_t per, uint32_t below_n, uint32_t *w, float *u,
                                      double *nrm, uint32_t *b)
{
    unsigned threads = 128, blocks = (unsigned)((n_streams + threads - 1) / threads);
    philox_fill_kernel<<<blocks, threads, 0, stream>>>(seed, n_streams, per, below_n, w, u, nrm, b);
    return cudaGetLastError();
}

extern "C" int vx_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

extern "C" vx_status vx_cuda_device_describe(int device, char *buf, size_t n, vx_err *e)
{
    vx_status st = VX_OK;
    cudaDeviceProp p;
    VX_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    snprintf(buf, n, "%s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor,
             p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return VX_OK;
fail:
    return st;
}

extern "C" vx_status vx_philox_fill_cuda(uint64_t seed, size_t n_streams, size_t per,
                                         uint32_t below_n, uint32_t *words, float *uniforms,
                                         double *normals, uint32_t *below, vx_err *e)
{
    vx_status st = VX_OK;
    uint32_t *dw = NULL, *db = NULL;
    float *du = NULL;
    double *dn = NULL;
    cudaStream_t s = NULL;
    size_t total = n_streams * per;
    if (below_n == 0) return vx_err_set(e, VX_ERR_ARG, "philox_fill_cuda: below_n must be >= 1");
    VX_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (words) VX_CUDA_CHECK(cudaMalloc(&dw, total * sizeof *dw));
    if (uniforms) VX_CUDA_CHECK(cudaMalloc(&du, total * sizeof *du));
    if (normals) VX_CUDA_CHECK(cudaMalloc(&dn, total * sizeof *dn));
    if (below) VX_CUDA_CHECK(cudaMalloc(&db, total * sizeof *db));
    VX_CUDA_CHECK(launch_philox_fill(s, seed, n_streams, per, below_n, dw, du, dn, db));
    VX_CUDA_LAUNCH_CHECK(s);
    if (words)
        VX_CUDA_CHECK(cudaMemcpyAsync(words, dw, total * sizeof *dw, cudaMemcpyDeviceToHost, s));
    if (uniforms)
        VX_CUDA_CHECK(cudaMemcpyAsync(uniforms, du, total * sizeof *du, cudaMemcpyDeviceToHost, s));
    if (normals)
        VX_CUDA_CHECK(cudaMemcpyAsync(normals, dn, total * sizeof *dn, cudaMemcpyDeviceToHost, s));
    if (below)
        VX_CUDA_CHECK(cudaMemcpyAsync(below, db, total * sizeof *db, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaStreamSynchronize(s));
fail:
    if (s) cudaStreamDestroy(s);
    cudaFree(dw);
    cudaFree(du);
    cudaFree(dn);
    cudaFree(db);
    return st;
}

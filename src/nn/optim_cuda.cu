/* optim_cuda.cu — global-norm clipping and Adam on a CUDA device (nn.h's vx_optim), two launches
 * per step (for one member or a group of them) with every scalar in device memory, so a step can
 * be captured in a CUDA graph:
 *
 *   sumsq   Σ g² in double over fixed blocks, the last block to finish adding the partials in a
 *           fixed tree and writing the norm (one launch, the same bits every run); the step's
 *           constants are taken there once a member: the bias corrections (from the step
 *           count) by block 0 beside its sum, the clip's factor by the last block;
 *   adam    each element's clip (g · max_norm/norm when the norm exceeds it; the clipped gradient
 *           written back, as the CPU's in-place clip leaves it) and its Adam step (optim_math.h,
 *           the CPU's arithmetic operation for operation), a few elements a thread; its first
 *           thread advances the step counter.
 * Why the constants are not taken in the adam launch: every block took them there (two double
 * pow()s by one thread while the others waited at a barrier, then an arrival counter to advance
 * the step), which for a group of 64 members of 146 K weights was 36,480 blocks and 319 µs a
 * step (H100), four times the time its memory traffic needs; now 89 µs. */
#include "vixen/optim_math.h"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "../util/pdl.cuh"
#include "nn_internal.h"

#include <stdlib.h>
#include <string.h>

#define NORM_BLOCKS 256 /* at most: a member's partials */

/* A group of K members (vx_optim_create_group): member k's parameters, gradients and moments at
 * k·stride, its settings, norm, step count and scratch its own; every launch covers all members,
 * the member in blockIdx.y, each member's arithmetic and its blocks' order those of an optimizer
 * alone. */
enum { /* a member's settings, in device memory (vx_optim_view's order) */
       H_LR = VX_OPTIM_H_LR,
       H_B1 = VX_OPTIM_H_B1,
       H_B2 = VX_OPTIM_H_B2,
       H_EPS = VX_OPTIM_H_EPS,
       H_WD = VX_OPTIM_H_WD,
       H_CLIP = VX_OPTIM_H_CLIP,
       N_HYPER = VX_OPTIM_H_N
};
#define SCRATCH (NORM_BLOCKS + 1) /* a member's partial sums, then its arrival counter */
#define ADAM_PER_THREAD 4         /* elements a thread of the adam launch */

typedef struct {
    vx_device *dev;
    int K;
    size_t n, stride;
    vx_mem mem;
    float *m, *v;
    double *hyper;      /* K × N_HYPER */
    double *norm;       /* K: the last step's norm before clipping */
    long long *t;       /* K: steps taken */
    double *scratch;    /* K × SCRATCH (zeroed once) */
    vx_step_consts *sk; /* K: the step's constants, from sumsq */
    const double *lr;   /* vx_optim_set_controls: K rates in device memory, or NULL */
    const int *skip;    /* K flags, or NULL */
} optim_cuda;

/* The sum of squares' blocks for one member of n elements: about 2,048 elements a block (8 a
 * thread), at most NORM_BLOCKS. A function of n alone, so that a member of a group adds its
 * partials exactly as an optimizer alone does; 256 blocks a member had left each thread 2 elements
 * and made a group of 64 spend 40 µs in block overhead (H200). */
static unsigned norm_blocks(size_t n)
{
    size_t b = (n + 2047) / 2048;
    return (unsigned)(b < 1 ? 1 : b > NORM_BLOCKS ? NORM_BLOCKS : b);
}

static __global__ void sumsq_kernel(const float *g, size_t n, size_t stride, double *scratch,
                                    double *norm, const long long *tp, const double *hyper,
                                    const double *lr_dev, vx_step_consts *sk, const int *skip)
{
    __shared__ double sh[256];
    __shared__ int last;
    vx_pdl_wait();
    unsigned k = blockIdx.y;
    if (skip && skip[k]) return; /* every block returns: the arrival counter stays 0 */
    g += k * stride;
    double *part = scratch + (size_t)k * SCRATCH;
    unsigned *arrived = (unsigned *)(part + NORM_BLOCKS);
    if (blockIdx.x == 0 && threadIdx.x == 0) { /* the bias corrections, beside the sum */
        const double *h = hyper + (size_t)k * N_HYPER;
        sk[k].k = vx_adam_constants(lr_dev ? lr_dev[k] : h[H_LR], h[H_B1], h[H_B2], h[H_EPS],
                                    h[H_WD], tp[k] + 1);
    }
    /* a thread's elements, gridDim.x × 256 apart, added in order; eight loaded at once before
     * their additions (a loop of load and add had kept only a few loads in flight: 40 µs for a
     * group of 64 members of 146 K, H100) */
    double acc = 0;
    size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i0 < n; i0 += 8 * step) {
        float x[8];
#pragma unroll
        for (int u = 0; u < 8; u++) x[u] = i0 + u * step < n ? g[i0 + u * step] : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (i0 + u * step < n) acc += (double)x[u] * x[u];
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[blockIdx.x] = sh[0];
        __threadfence();
        last = atomicAdd(arrived, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    sh[threadIdx.x] = threadIdx.x < gridDim.x ? ((volatile double *)part)[threadIdx.x] : 0.0;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        double nv = sqrt(sh[0]), max_norm = hyper[(size_t)k * N_HYPER + H_CLIP];
        norm[k] = nv;
        sk[k].clip = vx_clip_scale(max_norm, nv, &sk[k].scale);
        *arrived = 0; /* ready for the next launch */
    }
}

/* The blocks of a member's adam launch: a block ADAM_PER_THREAD × 256 consecutive elements (the
 * same arithmetic whatever the grid: each element is its own). */
static unsigned adam_blocks(size_t n)
{
    size_t b = (n + 256 * ADAM_PER_THREAD - 1) / (256 * ADAM_PER_THREAD);
    return (unsigned)(b < 1 ? 1 : b);
}

/* A thread's ADAM_PER_THREAD elements, 256 apart: every load first, then the arithmetic and the
 * stores, so that a thread has all its loads in flight at once (a loop of load, compute, store
 * had one element's at a time: the next loads may not pass the stores before them). */
static __global__ void __launch_bounds__(256)
    adam_kernel(float *__restrict__ p, float *__restrict__ g, float *__restrict__ m,
                float *__restrict__ v, size_t n, size_t stride, long long *tp,
                const vx_step_consts *sk, const int *skip)
{
    vx_pdl_wait();
    unsigned k = blockIdx.y;
    if (skip && skip[k]) return;
    if (blockIdx.x == 0 && threadIdx.x == 0) tp[k] += 1; /* sumsq took this step's from it */
    size_t at = k * stride, i0 = (size_t)blockIdx.x * 256 * ADAM_PER_THREAD + threadIdx.x;
    p += at, g += at, m += at, v += at;
    float gv[ADAM_PER_THREAD], pv[ADAM_PER_THREAD], mv[ADAM_PER_THREAD], vv[ADAM_PER_THREAD];
#pragma unroll
    for (int u = 0; u < ADAM_PER_THREAD; u++) {
        size_t i = i0 + (size_t)u * 256;
        if (i < n) gv[u] = g[i], pv[u] = p[i], mv[u] = m[i], vv[u] = v[i];
    }
    const vx_step_consts c = sk[k];
#pragma unroll
    for (int u = 0; u < ADAM_PER_THREAD; u++) {
        size_t i = i0 + (size_t)u * 256;
        if (i >= n) break;
        float gi = gv[u];
        if (c.clip) {
            gi *= c.scale;
            g[i] = gi;
        }
        vx_adam_elem(&c.k, &pv[u], &mv[u], &vv[u], gi);
        p[i] = pv[u], m[i] = mv[u], v[i] = vv[u];
    }
}

static void oc_free(void *impl)
{
    optim_cuda *o = (optim_cuda *)impl;
    if (!o) return;
    vx_mem_release(&o->mem);
    free(o);
}

static vx_status oc_create(const vx_adam_cfg *cfg, const double *max_norm, size_t n, size_t stride,
                           int K, vx_device *dev, void **impl, vx_err *e)
{
    vx_status st = vx_cuda_enter(dev, e);
    if (st) return st;
    optim_cuda *o = (optim_cuda *)calloc(1, sizeof *o);
    double *hyper = (double *)malloc((size_t)K * N_HYPER * sizeof(double));
    if (!o || !hyper) {
        free(o), free(hyper);
        return vx_err_set(e, VX_ERR_NOMEM, "optim: out of memory");
    }
    for (int k = 0; k < K; k++) {
        double *h = hyper + (size_t)k * N_HYPER;
        h[H_LR] = cfg[k].lr, h[H_B1] = cfg[k].beta1, h[H_B2] = cfg[k].beta2;
        h[H_EPS] = cfg[k].eps, h[H_WD] = cfg[k].weight_decay, h[H_CLIP] = max_norm[k];
    }
    o->dev = dev, o->K = K, o->n = n, o->stride = stride;
    vx_mem_init(&o->mem, dev, "optimizer");
    cudaStream_t s = NULL;
    size_t kk = (size_t)K, all = kk * stride;
    st = vx_mem_alloc(&o->mem, all * sizeof(float), &o->m, e);
    if (!st) st = vx_mem_alloc(&o->mem, all * sizeof(float), &o->v, e);
    if (!st) st = vx_mem_alloc(&o->mem, kk * N_HYPER * sizeof(double), &o->hyper, e);
    if (!st) st = vx_mem_alloc(&o->mem, kk * sizeof(double), &o->norm, e);
    if (!st) st = vx_mem_alloc(&o->mem, kk * sizeof(long long), &o->t, e);
    if (!st) st = vx_mem_alloc(&o->mem, kk * SCRATCH * sizeof(double), &o->scratch, e);
    if (!st) st = vx_mem_alloc(&o->mem, kk * sizeof(vx_step_consts), &o->sk, e);
    if (!st) st = vx_cuda_stream_create(dev, &s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemsetAsync(o->m, 0, all * sizeof(float), s));
    VX_CUDA_CHECK(cudaMemsetAsync(o->v, 0, all * sizeof(float), s));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(o->hyper, hyper, kk * N_HYPER * sizeof(double), cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemsetAsync(o->norm, 0, kk * sizeof(double), s));
    VX_CUDA_CHECK(cudaMemsetAsync(o->t, 0, kk * sizeof(long long), s));
    VX_CUDA_CHECK(cudaMemsetAsync(o->scratch, 0, kk * SCRATCH * sizeof(double), s));
    VX_CUDA_CHECK(cudaStreamSynchronize(s)); /* hyper is read from the host before it is freed */
    vx_cuda_stream_destroy(dev, s);
    free(hyper);
    *impl = o;
    return VX_OK;
fail:
    if (s) cudaStreamSynchronize(s);
    vx_cuda_stream_destroy(dev, s);
    free(hyper);
    oc_free(o);
    return st;
}

static vx_status oc_step(void *impl, float *params, float *grads, vx_stream vs, vx_err *e)
{
    optim_cuda *o = (optim_cuda *)impl;
    cudaStream_t s = (cudaStream_t)vs;
    vx_status st = VX_OK;
    VX_CUDA_CHECK(vx_pdl_launch(sumsq_kernel, dim3(norm_blocks(o->n), (unsigned)o->K), dim3(256), 0,
                                s, (const float *)grads, o->n, o->stride, o->scratch, o->norm,
                                (const long long *)o->t, (const double *)o->hyper,
                                (const double *)o->lr, o->sk, (const int *)o->skip));
    VX_CUDA_LAUNCH_CHECK(s);
    VX_CUDA_CHECK(vx_pdl_launch(adam_kernel, dim3(adam_blocks(o->n), (unsigned)o->K), dim3(256), 0,
                                s, params, grads, o->m, o->v, o->n, o->stride, o->t,
                                (const vx_step_consts *)o->sk, (const int *)o->skip));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

static const double *oc_norm(const void *impl) { return ((const optim_cuda *)impl)->norm; }

static void oc_set_controls(void *impl, const double *lr, const int *skip)
{
    optim_cuda *o = (optim_cuda *)impl;
    o->lr = lr, o->skip = skip;
}

static vx_status oc_copy_state(void *impl, float *m, float *v, int64_t *t, vx_stream vs, vx_err *e)
{
    optim_cuda *o = (optim_cuda *)impl;
    cudaStream_t s = (cudaStream_t)vs;
    vx_status st = vx_cuda_enter(o->dev, e);
    if (st) return st;
    size_t all = (size_t)o->K * o->stride;
    VX_CUDA_CHECK(cudaMemcpyAsync(m, o->m, all * sizeof(float), cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(v, o->v, all * sizeof(float), cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(t, o->t, (size_t)o->K * sizeof(long long), cudaMemcpyDeviceToHost, s));
fail:
    return st;
}

static vx_status oc_load_state(void *impl, const float *m, const float *v, const int64_t *t,
                               vx_stream vs, vx_err *e)
{
    optim_cuda *o = (optim_cuda *)impl;
    cudaStream_t s = (cudaStream_t)vs;
    vx_status st = vx_cuda_enter(o->dev, e);
    if (st) return st;
    size_t all = (size_t)o->K * o->stride;
    VX_CUDA_CHECK(cudaMemcpyAsync(o->m, m, all * sizeof(float), cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(o->v, v, all * sizeof(float), cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(o->t, t, (size_t)o->K * sizeof(long long), cudaMemcpyHostToDevice, s));
fail:
    return st;
}

static size_t oc_reserved(const void *impl) { return ((const optim_cuda *)impl)->mem.bytes; }

static void oc_view(void *impl, vx_optim_view *out)
{
    optim_cuda *o = (optim_cuda *)impl;
    out->m = o->m, out->v = o->v, out->t = o->t, out->norm = o->norm, out->hyper = o->hyper;
    out->lr = o->lr, out->skip = o->skip;
}

extern "C" const vx_optim_ops vx_optim_cuda_ops = {oc_create,     oc_free,         oc_step,
                                                   oc_norm,       oc_set_controls, oc_copy_state,
                                                   oc_load_state, oc_reserved,     oc_view};

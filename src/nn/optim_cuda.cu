/* optim_cuda.cu — global-norm clipping and Adam on a CUDA device (nn.h's vx_optim), two launches
 * per step with every scalar in device memory, so a step can be captured in a CUDA graph:
 *
 *   sumsq   Σ g² in double over fixed blocks, the last block to finish adding the partials in a
 *           fixed tree and writing the norm (one launch, the same bits every run);
 *   adam    each element's clip (g · max_norm/norm when the norm exceeds it; the clipped gradient
 *           written back, as the CPU's in-place clip leaves it) and its Adam step (optim_math.h,
 *           the CPU's arithmetic operation for operation); the last block advances the step
 *           counter — every block has read it by then. */
#include "vixen/optim_math.h"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "nn_internal.h"

#include <stdlib.h>
#include <string.h>

#define NORM_BLOCKS 256

typedef struct {
    vx_device *dev;
    vx_adam_cfg cfg;
    double max_norm;
    size_t n;
    vx_mem mem;
    float *m, *v;
    double *norm;     /* the last step's norm before clipping */
    long long *t;     /* steps taken */
    double *scratch;  /* NORM_BLOCKS partial sums, then two arrival counters (zeroed once) */
    const double *lr; /* vx_optim_set_controls: device memory, or NULL */
    const int *skip;
} optim_cuda;

static unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }

static __global__ void sumsq_kernel(const float *g, size_t n, double *part, unsigned *arrived,
                                    double *norm, const int *skip)
{
    __shared__ double sh[256];
    __shared__ int last;
    if (skip && *skip) return; /* every block returns: the arrival counter stays 0 */
    double acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        acc += (double)g[i] * g[i];
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
        *norm = sqrt(sh[0]);
        *arrived = 0; /* ready for the next launch */
    }
}

static __global__ void adam_kernel(float *p, float *g, float *m, float *v, size_t n, long long *tp,
                                   unsigned *arrived, const double *norm, double max_norm,
                                   double lr, const double *lr_dev, const int *skip, double b1,
                                   double b2, double eps, double wd)
{
    if (skip && *skip) return;
    if (lr_dev) lr = *lr_dev;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    long long t = *tp + 1; /* this step's count */
    if (i < n) {
        float gi = g[i];
        if (norm && max_norm > 0 && *norm > max_norm) {
            gi *= (float)(max_norm / *norm);
            g[i] = gi;
        }
        vx_adam_step_k k = vx_adam_constants(lr, b1, b2, eps, wd, t);
        vx_adam_elem(&k, &p[i], &m[i], &v[i], gi);
    }
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(arrived, 1u) == gridDim.x - 1;
        if (last) {
            *tp = t;
            *arrived = 0;
        }
    }
}

static void oc_free(void *impl)
{
    optim_cuda *o = (optim_cuda *)impl;
    if (!o) return;
    vx_mem_release(&o->mem);
    free(o);
}

static vx_status oc_create(const vx_adam_cfg *cfg, double max_norm, size_t n, vx_device *dev,
                           void **impl, vx_err *e)
{
    vx_status st = vx_cuda_enter(dev, e);
    if (st) return st;
    optim_cuda *o = (optim_cuda *)calloc(1, sizeof *o);
    if (!o) return vx_err_set(e, VX_ERR_NOMEM, "optim: out of memory");
    o->dev = dev, o->cfg = *cfg, o->max_norm = max_norm, o->n = n;
    vx_mem_init(&o->mem, dev, "optimizer");
    cudaStream_t s = NULL;
    st = vx_mem_alloc(&o->mem, n * sizeof(float), &o->m, e);
    if (!st) st = vx_mem_alloc(&o->mem, n * sizeof(float), &o->v, e);
    if (!st) st = vx_mem_alloc(&o->mem, sizeof(double), &o->norm, e);
    if (!st) st = vx_mem_alloc(&o->mem, sizeof(long long), &o->t, e);
    if (!st) st = vx_mem_alloc(&o->mem, (NORM_BLOCKS + 2) * sizeof(double), &o->scratch, e);
    if (!st) st = vx_cuda_stream_create(dev, &s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemsetAsync(o->m, 0, n * sizeof(float), s));
    VX_CUDA_CHECK(cudaMemsetAsync(o->v, 0, n * sizeof(float), s));
    VX_CUDA_CHECK(cudaMemsetAsync(o->norm, 0, sizeof(double), s));
    VX_CUDA_CHECK(cudaMemsetAsync(o->t, 0, sizeof(long long), s));
    VX_CUDA_CHECK(cudaMemsetAsync(o->scratch, 0, (NORM_BLOCKS + 2) * sizeof(double), s));
    VX_CUDA_CHECK(cudaStreamSynchronize(s));
    vx_cuda_stream_destroy(dev, s);
    *impl = o;
    return VX_OK;
fail:
    vx_cuda_stream_destroy(dev, s);
    oc_free(o);
    return st;
}

static vx_status oc_step(void *impl, float *params, float *grads, vx_stream vs, vx_err *e)
{
    optim_cuda *o = (optim_cuda *)impl;
    cudaStream_t s = (cudaStream_t)vs;
    vx_status st = VX_OK;
    unsigned *arrived = (unsigned *)(o->scratch + NORM_BLOCKS);
    sumsq_kernel<<<NORM_BLOCKS, 256, 0, s>>>(grads, o->n, o->scratch, arrived, o->norm, o->skip);
    VX_CUDA_LAUNCH_CHECK(s);
    adam_kernel<<<blocks_for(o->n), 256, 0, s>>>(
        params, grads, o->m, o->v, o->n, o->t, (unsigned *)(o->scratch + NORM_BLOCKS + 1),
        o->max_norm > 0 ? o->norm : NULL, o->max_norm, o->cfg.lr, o->lr, o->skip, o->cfg.beta1,
        o->cfg.beta2, o->cfg.eps, o->cfg.weight_decay);
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
    VX_CUDA_CHECK(cudaMemcpyAsync(m, o->m, o->n * sizeof(float), cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(v, o->v, o->n * sizeof(float), cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(t, o->t, sizeof(long long), cudaMemcpyDeviceToHost, s));
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
    VX_CUDA_CHECK(cudaMemcpyAsync(o->m, m, o->n * sizeof(float), cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(o->v, v, o->n * sizeof(float), cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(o->t, t, sizeof(long long), cudaMemcpyHostToDevice, s));
fail:
    return st;
}

static size_t oc_reserved(const void *impl) { return ((const optim_cuda *)impl)->mem.bytes; }

extern "C" const vx_optim_ops vx_optim_cuda_ops = {oc_create,     oc_free,         oc_step,
                                                   oc_norm,       oc_set_controls, oc_copy_state,
                                                   oc_load_state, oc_reserved};

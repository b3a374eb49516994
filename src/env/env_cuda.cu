/* env_cuda.cu — the CUDA backend of the environment (env_internal.h): one thread per environment
 * calling vx_env_step_one from env_dynamics.h, the same function the CPU reference loops over.
 *
 * This file is compiled with --fmad=false (CMakeLists.txt): nvcc would otherwise fuse a·b + c
 * into one rounding where the C compiler rounds twice, and the CPU and GPU would drift apart by
 * an ulp at a time. Double division and square root are correctly rounded on both sides, and the
 * Philox draws are integer arithmetic, so the same inputs give the same bits (tested).
 *
 * The market rows (features and open/high/low/close) and the first states, which env.c computed
 * on the host, are uploaded once at creation on a private stream that is then synchronised; every
 * block is allocated through the environments' memory account, so the device context's budget
 * counts it. After creation nothing here waits unless asked to: observe and step are kernels on
 * the caller's stream (graph-capturable), copies are cudaMemcpyAsync on it, and only sync and the
 * bad-action count wait — for that one stream, never the whole device. The legacy default stream
 * is never used: a NULL stream is refused (it would serialise with every blocking stream). */
#include "env_internal.h"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK 128

typedef struct {
    vx_device *dev;
    vx_mem mem;                   /* every block below */
    size_t n;                     /* N */
    vx_env_params p;              /* pointers into device memory */
    vx_env_state *states;         /* device, N */
    unsigned long long *bad;      /* device: actions refused so far */
    unsigned long long *bad_host; /* pinned: the count read back */
    cudaStream_t setup;           /* private: creation's uploads, and the synchronous calls
                                     before any call names a stream */
} env_cuda;

/* ---- kernels -------------------------------------------------------------------------------- */

static __global__ void observe_kernel(vx_env_params p, const vx_env_state *s, size_t n, float *obs)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) vx_env_observe_one(&p, &s[i], obs + i * VX_OBS_DIM);
}

/* An action out of range leaves its environment unstepped (reward 0, flags 0) and is counted:
 * a thread cannot stop the others, as the CPU's up-front check does. */
static __global__ void step_kernel(vx_env_params p, vx_env_state *s, size_t n,
                                   const int32_t *actions, float *obs, float *rewards,
                                   uint8_t *terminated, uint8_t *truncated, float *final_obs,
                                   unsigned long long *bad)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int32_t *a = actions + i * VX_ACTION_BRANCHES;
    int32_t e = a[0], o = a[1], u = a[2];
    if (e < 0 || e >= VX_EXPOSURE_LEVELS || o < 0 || o >= VX_ORDER_TYPES || u < 0 ||
        u >= VX_URGENCY_LEVELS) {
        rewards[i] = 0;
        terminated[i] = truncated[i] = 0;
        atomicAdd(bad, 1ull);
        return;
    }
    vx_env_state st = s[i]; /* in registers for the step */
    vx_env_step_one(&p, &st, i, e, o, u, obs + i * VX_OBS_DIM, &rewards[i], &terminated[i],
                    &truncated[i], final_obs ? final_obs + i * VX_OBS_DIM : NULL);
    s[i] = st;
}

/* ---- launchers: one per kernel, on the stream given ------------------------------------------ */

static unsigned blocks_for(size_t n) { return (unsigned)((n + BLOCK - 1) / BLOCK); }

static vx_status launch_observe(const env_cuda *c, float *obs, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    observe_kernel<<<blocks_for(c->n), BLOCK, 0, s>>>(c->p, c->states, c->n, obs);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

static vx_status launch_step(const env_cuda *c, const int32_t *actions, float *obs, float *rewards,
                             uint8_t *terminated, uint8_t *truncated, float *final_obs,
                             cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    step_kernel<<<blocks_for(c->n), BLOCK, 0, s>>>(c->p, c->states, c->n, actions, obs, rewards,
                                                   terminated, truncated, final_obs, c->bad);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

/* ---- entries: enter the device, check, queue ------------------------------------------------- */

/* The device made current, and a stream that is not the legacy default one. */
static vx_status enter(const env_cuda *c, vx_stream s, const char *what, vx_err *e)
{
    vx_status st = vx_cuda_enter(c->dev, e);
    if (st) return st;
    if (!s)
        return vx_err_set(e, VX_ERR_ARG,
                          "env.%s: CUDA environments need a stream of %s (NULL "
                          "would be the legacy default stream)",
                          what, vx_device_name(c->dev));
    return VX_OK;
}

static void cuda_free(void *impl)
{
    env_cuda *c = (env_cuda *)impl;
    if (!c) return;
    vx_err *e = NULL; /* nothing to report to: a failed wait still frees */
    vx_status st = vx_cuda_enter(c->dev, e);
    /* the private stream may still be copying (a synchronous call before any other) */
    if (!st && c->setup) VX_CUDA_CHECK(cudaStreamSynchronize(c->setup));
fail:
    vx_mem_release(&c->mem);
    vx_cuda_stream_destroy(c->dev, c->setup);
    free(c);
}

static vx_status cuda_create(const vx_env_params *p, const vx_market *m, const vx_env_state *init,
                             size_t n, vx_device *dev, void **impl, vx_stream *setup, vx_err *e)
{
    *impl = NULL;
    *setup = NULL;
    size_t rows = m->rows; /* all of them: rows index the feature matrix, whatever the split */
    float *features = NULL;
    double *ohlc = NULL; /* open, high, low, close: 4 × rows */
    const double *src[4] = {p->open, p->high, p->low, p->close};
    env_cuda *c = NULL;
    vx_status st = vx_cuda_enter(dev, e);
    if (st) return st;
    c = (env_cuda *)calloc(1, sizeof *c);
    if (!c) return vx_err_set(e, VX_ERR_NOMEM, "env: out of memory");
    c->dev = dev;
    c->n = n;
    c->p = *p;
    vx_mem_init(&c->mem, dev, "environments");
    st = vx_mem_alloc(&c->mem, n * sizeof(vx_env_state), &c->states, e);
    if (!st) st = vx_mem_alloc(&c->mem, rows * VX_MARKET_FEATURES * sizeof(float), &features, e);
    if (!st) st = vx_mem_alloc(&c->mem, 4 * rows * sizeof(double), &ohlc, e);
    double *units = NULL;
    if (!st && p->reward_unit) st = vx_mem_alloc(&c->mem, rows * sizeof(double), &units, e);
    if (!st) st = vx_mem_alloc(&c->mem, sizeof(unsigned long long), &c->bad, e);
    if (!st) st = vx_mem_alloc_host(&c->mem, sizeof(unsigned long long), &c->bad_host, e);
    if (!st) st = vx_cuda_stream_create(dev, &c->setup, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpyAsync(c->states, init, n * sizeof(vx_env_state), cudaMemcpyHostToDevice,
                                  c->setup));
    VX_CUDA_CHECK(cudaMemcpyAsync(features, p->features, rows * VX_MARKET_FEATURES * sizeof(float),
                                  cudaMemcpyHostToDevice, c->setup));
    for (int k = 0; k < 4; k++)
        VX_CUDA_CHECK(cudaMemcpyAsync(ohlc + (size_t)k * rows, src[k], rows * sizeof(double),
                                      cudaMemcpyHostToDevice, c->setup));
    if (units)
        VX_CUDA_CHECK(cudaMemcpyAsync(units, p->reward_unit, rows * sizeof(double),
                                      cudaMemcpyHostToDevice, c->setup));
    VX_CUDA_CHECK(cudaMemsetAsync(c->bad, 0, sizeof(unsigned long long), c->setup));
    /* init and the market are the caller's (pageable) memory: read before returning */
    VX_CUDA_CHECK(cudaStreamSynchronize(c->setup));
    c->p.features = features;
    c->p.open = ohlc;
    c->p.high = ohlc + rows;
    c->p.low = ohlc + 2 * rows;
    c->p.close = ohlc + 3 * rows;
    c->p.reward_unit = units;
    *impl = c;
    *setup = (vx_stream)c->setup;
    return VX_OK;
fail:
    cuda_free(c); /* waits for the private stream: no copy still reads init after we return */
    return st;
}

static vx_status cuda_observe(void *impl, float *obs, vx_stream s, vx_err *e)
{
    env_cuda *c = (env_cuda *)impl;
    vx_status st = enter(c, s, "observe", e);
    return st ? st : launch_observe(c, obs, (cudaStream_t)s, e);
}

static vx_status cuda_step(void *impl, const int32_t *actions, float *obs, float *rewards,
                           uint8_t *terminated, uint8_t *truncated, float *final_obs, vx_stream s,
                           vx_err *e)
{
    env_cuda *c = (env_cuda *)impl;
    vx_status st = enter(c, s, "step", e);
    if (st) return st;
    return launch_step(c, actions, obs, rewards, terminated, truncated, final_obs, (cudaStream_t)s,
                       e);
}

static vx_status cuda_copy_states(void *impl, vx_env_state *host, vx_stream s, vx_err *e)
{
    env_cuda *c = (env_cuda *)impl;
    vx_status st = enter(c, s, "copy_states", e);
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(host, c->states, c->n * sizeof(vx_env_state),
                                  cudaMemcpyDeviceToHost, (cudaStream_t)s));
fail:
    return st;
}

static vx_status cuda_load_states(void *impl, const vx_env_state *host, vx_stream s, vx_err *e)
{
    env_cuda *c = (env_cuda *)impl;
    vx_status st = enter(c, s, "load_states", e);
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(c->states, host, c->n * sizeof(vx_env_state),
                                  cudaMemcpyHostToDevice, (cudaStream_t)s));
fail:
    return st;
}

static vx_status cuda_sync(void *impl, vx_stream s, vx_err *e)
{
    env_cuda *c = (env_cuda *)impl;
    vx_status st = enter(c, s, "sync", e);
    if (st) return st;
    VX_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)s));
fail:
    return st;
}

static vx_status cuda_bad_actions(void *impl, uint64_t *count, vx_stream s, vx_err *e)
{
    env_cuda *c = (env_cuda *)impl;
    vx_status st = enter(c, s, "bad_actions", e);
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(c->bad_host, c->bad, sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, (cudaStream_t)s));
    VX_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)s));
    *count = (uint64_t)*c->bad_host;
fail:
    return st;
}

static size_t cuda_reserved(const void *impl) { return ((const env_cuda *)impl)->mem.bytes; }

static void cuda_device_view(void *impl, vx_env_params *p, vx_env_state **states)
{
    env_cuda *c = (env_cuda *)impl;
    *p = c->p, *states = c->states;
}

const vx_env_backend vx_env_cuda_ops = {
    "cuda",           cuda_create,      cuda_free,        cuda_observe,
    cuda_step,        cuda_copy_states, cuda_load_states, cuda_sync,
    cuda_bad_actions, cuda_reserved,    cuda_device_view,
};

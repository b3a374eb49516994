/* env_cuda.cu — the CUDA twin of env_cpu.c: one thread per environment calling
 * vx_env_step_one from env_dynamics.h.
 *
 * This file is compiled with --fmad=false (CMakeLists.txt): nvcc would otherwise fuse a·b + c
 * into one rounding where the C compiler rounds twice, and the CPU and GPU would drift apart by
 * an ulp at a time. Double division and square root are correctly rounded on both sides, and the
 * Philox draws are integer arithmetic, so the same inputs give the same bits (tested). */
#include "vixen/env_cuda.h"
#include "../util/cuda_check.h"

#include <stdlib.h>
#include <string.h>

struct vx_env_cuda {
    size_t n;
    vx_env_params p; /* pointers into device memory */
    vx_env_state *states;
    float *features;
    double *ohlc; /* open, high, low, close: 4 × rows */
    unsigned long long *bad;
};

static __global__ void observe_kernel(vx_env_params p, const vx_env_state *s, size_t n, float *obs)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) vx_env_observe(&p, &s[i], obs + i * VX_ENV_OBS_DIM);
}

static __global__ void step_kernel(vx_env_params p, vx_env_state *s, size_t n,
                                   const int32_t *actions, float *obs, float *rewards,
                                   uint8_t *terminated, uint8_t *truncated, float *final_obs,
                                   unsigned long long *bad)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int32_t e = actions[i * 3], o = actions[i * 3 + 1], u = actions[i * 3 + 2];
    if (e < 0 || e >= VX_EXPOSURE_LEVELS || o < 0 || o >= VX_ORDER_TYPES || u < 0 ||
        u >= VX_URGENCY_LEVELS) {
        rewards[i] = 0;
        terminated[i] = truncated[i] = 0;
        atomicAdd(bad, 1ull);
        return;
    }
    vx_env_state st = s[i]; /* in registers for the step */
    vx_env_step_one(&p, &st, i, e, o, u, obs + i * VX_ENV_OBS_DIM, &rewards[i], &terminated[i],
                    &truncated[i], final_obs ? final_obs + i * VX_ENV_OBS_DIM : NULL);
    s[i] = st;
}

extern "C" void vx_env_cuda_free(vx_env_cuda *env)
{
    if (!env) return;
    cudaFree(env->states), cudaFree(env->features), cudaFree(env->ohlc), cudaFree(env->bad);
    free(env);
}

extern "C" vx_status vx_env_cuda_create(const vx_env_cfg *cfg, const vx_market *m, vx_split split,
                                        size_t n, vx_env_cuda **out, vx_err *e)
{
    *out = NULL;
    vx_env *cpu;
    vx_status st = vx_env_create(cfg, m, split, n, &cpu, e); /* parameters, checks, first starts */
    if (st) return st;
    vx_env_cuda *env = (vx_env_cuda *)calloc(1, sizeof *env);
    if (!env) {
        vx_env_free(cpu);
        return vx_err_set(e, VX_ERR_NOMEM, "env: out of memory");
    }
    env->n = n;
    env->p = *vx_env_params_get(cpu);
    size_t rows = m->rows;
    const double *src[4] = {env->p.open, env->p.high, env->p.low, env->p.close};
    VX_CUDA_CHECK(cudaMalloc((void **)&env->states, n * sizeof(vx_env_state)));
    VX_CUDA_CHECK(cudaMalloc((void **)&env->features, rows * VX_ENV_MARKET_FEATURES * sizeof(float)));
    VX_CUDA_CHECK(cudaMalloc((void **)&env->ohlc, 4 * rows * sizeof(double)));
    VX_CUDA_CHECK(cudaMalloc((void **)&env->bad, sizeof(unsigned long long)));
    VX_CUDA_CHECK(cudaMemcpy(env->states, vx_env_states(cpu), n * sizeof(vx_env_state),
                             cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(env->features, m->features, rows * VX_ENV_MARKET_FEATURES * sizeof(float),
                             cudaMemcpyHostToDevice));
    for (int k = 0; k < 4; k++)
        VX_CUDA_CHECK(cudaMemcpy(env->ohlc + k * rows, src[k], rows * sizeof(double),
                                 cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemset(env->bad, 0, sizeof(unsigned long long)));
    env->p.features = env->features;
    env->p.open = env->ohlc;
    env->p.high = env->ohlc + rows;
    env->p.low = env->ohlc + 2 * rows;
    env->p.close = env->ohlc + 3 * rows;
    vx_env_free(cpu);
    *out = env;
    return VX_OK;
fail:
    vx_env_free(cpu);
    vx_env_cuda_free(env);
    return st;
}

extern "C" size_t vx_env_cuda_count(const vx_env_cuda *env) { return env->n; }

extern "C" vx_status vx_env_cuda_observe(vx_env_cuda *env, float *obs, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    unsigned blocks = (unsigned)((env->n + 127) / 128);
    observe_kernel<<<blocks, 128, 0, s>>>(env->p, env->states, env->n, obs);
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
}

extern "C" vx_status vx_env_cuda_step(vx_env_cuda *env, const int32_t *actions, float *obs,
                                      float *rewards, uint8_t *terminated, uint8_t *truncated,
                                      float *final_obs, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    unsigned blocks = (unsigned)((env->n + 127) / 128);
    step_kernel<<<blocks, 128, 0, s>>>(env->p, env->states, env->n, actions, obs, rewards,
                                       terminated, truncated, final_obs, env->bad);
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
}

extern "C" vx_status vx_env_cuda_states(vx_env_cuda *env, vx_env_state *out, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaDeviceSynchronize());
    VX_CUDA_CHECK(cudaMemcpy(out, env->states, env->n * sizeof(vx_env_state), cudaMemcpyDeviceToHost));
fail:
    return st;
}

extern "C" vx_status vx_env_cuda_set_states(vx_env_cuda *env, const vx_env_state *in, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaDeviceSynchronize());
    VX_CUDA_CHECK(cudaMemcpy(env->states, in, env->n * sizeof(vx_env_state), cudaMemcpyHostToDevice));
fail:
    return st;
}

extern "C" vx_status vx_env_cuda_bad_actions(vx_env_cuda *env, unsigned long long *count, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaDeviceSynchronize());
    VX_CUDA_CHECK(cudaMemcpy(count, env->bad, sizeof *count, cudaMemcpyDeviceToHost));
fail:
    return st;
}

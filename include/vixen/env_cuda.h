/* env_cuda.h — the trading environments on the GPU: one thread per environment running the same
 * `VX_HD` step as the CPU (env_dynamics.h), compiled without fused multiply-adds so the two give
 * the same bits. CUDA builds only.
 *
 * The market rows (45 features, open/high/low/close) are uploaded once at creation; parameters
 * and the initial states come from the CPU environment of the same configuration, so a CPU and a
 * GPU environment created alike start alike and step alike. All stepping arrays are device
 * pointers; calls are asynchronous on the caller's stream. */
#ifndef VIXEN_ENV_CUDA_H
#define VIXEN_ENV_CUDA_H

#include <cuda_runtime.h>
#include "vixen/env.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vx_env_cuda vx_env_cuda;

vx_status vx_env_cuda_create(const vx_env_cfg *cfg, const vx_market *m, vx_split split, size_t n,
                             vx_env_cuda **out, vx_err *e);
void vx_env_cuda_free(vx_env_cuda *env);
size_t vx_env_cuda_count(const vx_env_cuda *env);

/* Writes every environment's observation (N × 51, device). */
vx_status vx_env_cuda_observe(vx_env_cuda *env, float *obs, cudaStream_t s, vx_err *e);
/* Steps all environments: actions N × 3 (device, int32), outputs as vx_env_step (device;
 * final_obs may be NULL). An action out of range leaves that environment unstepped (its reward 0,
 * flags 0) and counts it in vx_env_cuda_bad_actions — the device cannot stop the others. */
vx_status vx_env_cuda_step(vx_env_cuda *env, const int32_t *actions, float *obs, float *rewards,
                           uint8_t *terminated, uint8_t *truncated, float *final_obs,
                           cudaStream_t s, vx_err *e);
/* Synchronous reads, for tests, checkpoints and reports. */
vx_status vx_env_cuda_states(vx_env_cuda *env, vx_env_state *out, vx_err *e);
vx_status vx_env_cuda_set_states(vx_env_cuda *env, const vx_env_state *in, vx_err *e);
vx_status vx_env_cuda_bad_actions(vx_env_cuda *env, unsigned long long *count, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

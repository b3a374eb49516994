/* dqn_cuda.cu — ε-greedy acting on the device (the twin of vx_dqn_act): one thread per
 * environment, the argmax and expected values from dqn_loss.h, the draws from philox.h. */
#include "vixen/dqn_cuda.h"
#include "vixen/philox.h"
#include "../util/cuda_check.h"

#define ACT_STREAM (1ull << 40)

static __global__ void act_kernel(vx_loss_shape shape, const float *q, int out_dim, int N,
                                  const double *eps, uint64_t seed,
                                  const unsigned long long *step, int32_t *actions)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float *row = q + (size_t)i * out_dim;
    vx_rng g = vx_rng_make(seed, ACT_STREAM + (uint64_t)i, *step);
    double e = *eps;
    for (int k = 0; k < shape.n_branches; k++) {
        int greedy = vx_loss_argmax(&shape, row, k);
        float u = vx_rng_uniform(&g);
        uint32_t ra = vx_rng_below(&g, (uint32_t)shape.branch[k]);
        actions[(size_t)i * 3 + k] = u < e ? (int32_t)ra : greedy;
    }
}

static __global__ void counter_kernel(unsigned long long *c, unsigned long long by) { *c += by; }

extern "C" vx_status vx_dqn_cuda_act(const vx_loss_shape *shape, const float *q, int out_dim,
                                     int N, const double *eps, uint64_t seed,
                                     const unsigned long long *step, int32_t *actions,
                                     cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    act_kernel<<<(N + 127) / 128, 128, 0, s>>>(*shape, q, out_dim, N, eps, seed, step, actions);
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
}

extern "C" vx_status vx_cuda_counter_add(unsigned long long *counter, unsigned long long by,
                                         cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    counter_kernel<<<1, 1, 0, s>>>(counter, by);
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
}

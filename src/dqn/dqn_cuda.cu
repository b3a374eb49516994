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

static __global__ void loss_kernel(vx_loss_shape shape, int kind, float kappa, double gamma,
                                   const float *qs, const float *qn, const float *qt, int O,
                                   vx_replay_batch b, int B, float *dq, float *loss, float *prio)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B) return;
    int m = b.steps ? b.steps[i] : 1;
    float gm = (float)pow(gamma, (double)m);
    float scale = 1.0f / (float)B;
    size_t r = (size_t)i * O;
    if (kind == VX_LOSS_C51)
        loss[i] = vx_loss_c51(&shape, gm, qs + r, qn + r, qt + r, b.actions + (size_t)i * 3,
                              b.rewards[i], b.terminated[i], b.weights[i], scale, dq + r, O, &prio[i]);
    else
        loss[i] = vx_loss_dqn(&shape, kind, kappa, gm, qs + r, qn + r, qt + r,
                              b.actions + (size_t)i * 3, b.rewards[i], b.terminated[i],
                              b.weights[i], scale, dq + r, O, &prio[i]);
}

extern "C" vx_status vx_dqn_cuda_loss(const vx_loss_shape *shape, int kind, double kappa,
                                      double gamma, const float *q_s, const float *q_next_online,
                                      const float *q_next_target, int out_dim,
                                      const vx_replay_batch *b, int B, float *dq, float *loss,
                                      float *priority, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    loss_kernel<<<(B + 127) / 128, 128, 0, s>>>(*shape, kind, (float)kappa, gamma, q_s,
                                                q_next_online, q_next_target, out_dim, *b, B, dq,
                                                loss, priority);
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
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

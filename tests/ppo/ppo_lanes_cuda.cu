/* ppo_lanes_cuda.cu — the lanes' PPO arithmetic against the one-thread functions on the device
 * (ppo_lanes_cuda.h). Compiled with --fmad=false, as the fused kernels are (CMakeLists.txt):
 * with contraction the compiler could fuse a product and a sum in one version and not in the
 * other. */
#include "ppo_lanes_cuda.h"
#include "ppo/ppo_lanes.cuh"

#include <cuda_runtime.h>

/* A row: its 16 lanes, and lane 0 also runs the one-thread functions. */
static __global__ void lanes_kernel(vx_ppo_loss_cfg c, int rows, const float *head,
                                    const int32_t *act, const double *prev, uint64_t seed,
                                    uint64_t step, double *g0, double *g1, double *st0, double *st1,
                                    int32_t *a0, int32_t *a1, double *lp0, double *lp1)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x, r = t / PPO_LANES, k = t % PPO_LANES;
    int live = r < rows;
    int rr = live ? r : 0; /* a lane past the rows computes row 0's again, and writes nothing */
    const float *h = head + (size_t)rr * PPO_LANES;
    const int32_t *ac = act + (size_t)rr * VX_ACTION_BRANCHES;
    const double *pv = prev + (size_t)rr * 4;
    double scale = 1.0 / 64;
    vx_ppo_loss_out lo;
    double gl = lanes_loss(&c, h[k], ac, pv[0], pv[1], pv[2], pv[3], scale, &lo);
    int32_t sa[VX_ACTION_BRANCHES];
    double sl = lanes_sample(h[k], seed, (uint64_t)rr, step, sa);
    if (!live) return;
    g1[(size_t)r * PPO_LANES + k] = gl;
    if (k != 0) return;
    double s1[LANES_STATS] = {lo.pg, lo.v, lo.entropy, lo.approx_kl, (double)lo.clipped};
    for (int p = 0; p < LANES_STATS; p++) st1[(size_t)r * LANES_STATS + p] = s1[p];
    for (int b = 0; b < VX_ACTION_BRANCHES; b++) a1[(size_t)r * VX_ACTION_BRANCHES + b] = sa[b];
    lp1[r] = sl;
    /* the one-thread functions, as the kernels called them before */
    double z[VX_PPO_LOGITS], dz[VX_PPO_LOGITS], dv;
    for (int j = 0; j < VX_PPO_LOGITS; j++) z[j] = h[j];
    vx_ppo_loss(&c, z, h[VX_PPO_LOGITS], ac, pv[0], pv[1], pv[2], pv[3], scale, dz, &dv, &lo);
    for (int j = 0; j < VX_PPO_LOGITS; j++) g0[(size_t)r * PPO_LANES + j] = dz[j];
    g0[(size_t)r * PPO_LANES + VX_PPO_LOGITS] = dv;
    double s0[LANES_STATS] = {lo.pg, lo.v, lo.entropy, lo.approx_kl, (double)lo.clipped};
    for (int p = 0; p < LANES_STATS; p++) st0[(size_t)r * LANES_STATS + p] = s0[p];
    lp0[r] = vx_ppo_sample(z, seed, (uint64_t)r, step, a0 + (size_t)r * VX_ACTION_BRANCHES);
}

extern "C" int ppo_lanes_run(const vx_ppo_loss_cfg *c, int rows, const float *head,
                             const int32_t *act, const double *prev, uint64_t seed, uint64_t step,
                             double *g[2], double *st[2], int32_t *sampled[2], double *logp[2])
{
    size_t nh = (size_t)rows * PPO_LANES, na = (size_t)rows * VX_ACTION_BRANCHES;
    size_t ns = (size_t)rows * LANES_STATS;
    float *d_head = NULL;
    int32_t *d_act = NULL, *d_a[2] = {NULL, NULL};
    double *d_prev = NULL, *d_g[2] = {NULL, NULL}, *d_st[2] = {NULL, NULL}, *d_lp[2] = {NULL, NULL};
    cudaError_t e = cudaMalloc((void **)&d_head, nh * sizeof(float));
    if (!e) e = cudaMalloc((void **)&d_act, na * sizeof(int32_t));
    if (!e) e = cudaMalloc((void **)&d_prev, (size_t)rows * 4 * sizeof(double));
    for (int i = 0; i < 2 && !e; i++) {
        e = cudaMalloc((void **)&d_g[i], nh * sizeof(double));
        if (!e) e = cudaMalloc((void **)&d_st[i], ns * sizeof(double));
        if (!e) e = cudaMalloc((void **)&d_a[i], na * sizeof(int32_t));
        if (!e) e = cudaMalloc((void **)&d_lp[i], (size_t)rows * sizeof(double));
    }
    if (!e) e = cudaMemcpy(d_head, head, nh * sizeof(float), cudaMemcpyHostToDevice);
    if (!e) e = cudaMemcpy(d_act, act, na * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (!e) e = cudaMemcpy(d_prev, prev, (size_t)rows * 4 * sizeof(double), cudaMemcpyHostToDevice);
    if (!e) {
        int threads = 128, blocks = (int)((nh + threads - 1) / threads);
        lanes_kernel<<<blocks, threads>>>(*c, rows, d_head, d_act, d_prev, seed, step, d_g[0],
                                          d_g[1], d_st[0], d_st[1], d_a[0], d_a[1], d_lp[0],
                                          d_lp[1]);
        e = cudaGetLastError();
    }
    for (int i = 0; i < 2 && !e; i++) {
        e = cudaMemcpy(g[i], d_g[i], nh * sizeof(double), cudaMemcpyDeviceToHost);
        if (!e) e = cudaMemcpy(st[i], d_st[i], ns * sizeof(double), cudaMemcpyDeviceToHost);
        if (!e) e = cudaMemcpy(sampled[i], d_a[i], na * sizeof(int32_t), cudaMemcpyDeviceToHost);
        if (!e)
            e = cudaMemcpy(logp[i], d_lp[i], (size_t)rows * sizeof(double), cudaMemcpyDeviceToHost);
    }
    cudaFree(d_head), cudaFree(d_act), cudaFree(d_prev);
    for (int i = 0; i < 2; i++)
        cudaFree(d_g[i]), cudaFree(d_st[i]), cudaFree(d_a[i]), cudaFree(d_lp[i]);
    return (int)e;
}

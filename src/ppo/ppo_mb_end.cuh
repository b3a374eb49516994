/* ppo_mb_end.cuh — the end of a PPO minibatch on a CUDA device, shared by the per-layer path's
 * own kernel (ppo_backend_cuda.cu) and the fused kernels' optimizer step (ppo_fused.cu, its
 * block 0), with the statistics' and controls' layouts both read (internal; device code only). */
#ifndef VIXEN_PPO_MB_END_CUH
#define VIXEN_PPO_MB_END_CUH

/* The iteration's statistics, summed on the device (doubles). */
enum { S_PG, S_V, S_ENT, S_KL, S_CLIP, S_NORM, S_UPDATES, S_KL_EPOCH, S_EV, S_RET, S_EPS, S_N };
/* Control words (ints): the minibatch cursor and the target-KL stop. */
enum { C_CURSOR, C_STOP, C_N };
/* A minibatch's statistics, summed per block of the loss (or update) kernel: P_N doubles a
 * block. */
enum { P_PG, P_V, P_ENT, P_KL, P_CLIP, P_N };

/* Once the step's norm is known (the per-layer path: after the step; the fused one: block 0
 * past its barrier, beside the other blocks' step), by every thread of one block of at least
 * 32·P_N threads: the minibatch's means (the blocks' sums, warp p adding statistic p's in a
 * fixed order: each lane a strided share, then a shuffle tree) into the iteration's sums
 * (unless stopped), the target-KL check at the end of an update epoch, the cursor advanced.
 * Nothing of the step may read the stop flag after this writes it. */
static __device__ void ppo_mb_end(int M, int blocks, const double *parts, const double *norm,
                                  int minibatches, double target_kl, double *stats, int *ctl)
{
    __shared__ double sum[P_N];
    int p = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (p < P_N) {
        double v = 0;
        for (int b = lane; b < blocks; b += 32) v += parts[(size_t)b * P_N + p];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) sum[p] = v;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    int cursor = ctl[C_CURSOR];
    if (!ctl[C_STOP]) {
        stats[S_PG] += sum[P_PG] / M, stats[S_V] += sum[P_V] / M;
        stats[S_ENT] += sum[P_ENT] / M, stats[S_KL] += sum[P_KL] / M;
        stats[S_CLIP] += sum[P_CLIP] / M;
        stats[S_NORM] += *norm, stats[S_UPDATES] += 1;
        stats[S_KL_EPOCH] += sum[P_KL] / M;
        if ((cursor + 1) % minibatches == 0) {
            if (target_kl > 0 && stats[S_KL_EPOCH] / minibatches > target_kl) ctl[C_STOP] = 1;
            stats[S_KL_EPOCH] = 0;
        }
    }
    ctl[C_CURSOR] = cursor + 1;
}

#endif

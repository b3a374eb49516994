/* block_sum.cuh — the sum of one double per thread of a block, in a fixed tree (internal; device
 * code only): the same inputs give the same bits every run, whatever the scheduling — the
 * reductions of the statistics the CPU reference is compared with, and that graphs and the
 * kernel-by-kernel path must agree on bit for bit. */
#ifndef VIXEN_BLOCK_SUM_CUH
#define VIXEN_BLOCK_SUM_CUH

/* Every one of the block's THREADS threads calls it with its value and the same sh (THREADS
 * doubles of shared memory); each gets the sum back. */
template <int THREADS> static __device__ double vx_block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int o = THREADS / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

#endif

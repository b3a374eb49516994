/* bench_cuda.h — timing helpers shared by the GPU benchmarks (CUDA builds only). */
#ifndef VIXEN_BENCH_CUDA_H
#define VIXEN_BENCH_CUDA_H

#include <cuda_runtime.h>

/* The median, in µs, of `reps` replays of a captured graph on stream s, each timed between two
 * events, after `warm` untimed replays (reps <= 256). Returns -1 if a call fails. */
double vx_bench_graph_median_us(cudaGraphExec_t exec, cudaStream_t s, int warm, int reps);

#endif

/* bench_cuda.h — timing helpers shared by the GPU benchmarks (CUDA builds only). */
#ifndef VIXEN_BENCH_CUDA_H
#define VIXEN_BENCH_CUDA_H

#include <stdio.h>
#include <cuda_runtime.h>
#include "bench.h"
#include "vixen/device.h"

/* The median, in µs, of `reps` replays of a captured graph on stream s, each timed between two
 * events, after `warm` untimed replays (reps <= 256). Returns -1 if a call fails. */
double vx_bench_graph_median_us(cudaGraphExec_t exec, cudaStream_t s, int warm, int reps);
/* The mean, in µs, of `reps` replays queued back to back between two events (after `warm`): the
 * time a replay takes on the GPU with work queued behind it, as inside a training run's graphs.
 * The median above times each replay on an idle stream, so it also holds the gap between the
 * first event and the host's launch reaching the GPU. Returns -1 if a call fails. */
double vx_bench_graph_queued_us(cudaGraphExec_t exec, cudaStream_t s, int warm, int reps);

/* A context on the first CUDA device, or NULL with the reason written to log (when not NULL). */
vx_device *vx_bench_cuda_open(FILE *log);
/* A result of `items` in `us` microseconds a repetition: value = items a second. */
void vx_bench_put(vx_bench_result *r, const char *name, const char *unit, double items, double us);

#endif

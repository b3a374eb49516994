/* replay_math.h — the replay buffer's arithmetic, written once for the CPU and the GPU.
 *
 * Both backends (replay_cpu.c and replay_cuda.cu) call these `VX_HD static inline` functions, so
 * the shape of the priority tree, the position of each stratified draw, the importance weight and
 * the rank masses cannot drift apart between them: two buffers with the same seed and contents
 * draw the same uniform samples and the same strata (docs/algorithms.md, "Draws"). What stays in
 * each backend is how the work is laid out — the CPU descends a whole batch level by level, the
 * GPU one draw per thread with the 16 children in registers — and the per-node child choice is
 * deliberately not shared: on the device it must index its registers with constants only.
 *
 * Shapes: C = capacity, B = draws in one sample call, FAN = 16 children per tree node. */
#ifndef VIXEN_REPLAY_MATH_H
#define VIXEN_REPLAY_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "vixen/hd.h"
#include "vixen/philox.h"

#define VX_REPLAY_FAN 16        /* children per priority-tree node: 16 doubles, two cache lines */
#define VX_REPLAY_FAN_SHIFT 4   /* log2(VX_REPLAY_FAN) */
#define VX_REPLAY_MAX_LEVELS 10 /* 16^9 > 2^31, the largest capacity */
/* An update is applied in chunks of this many entries, one after another (the device's scratch
 * for one launch); a non-finite priority takes the largest of what was seen before its chunk and
 * its chunk's own finite priorities, on the CPU and the GPU alike. */
#define VX_REPLAY_UPDATE_CHUNK 16384
/* The Philox stream of the sampling draws. Draw j of a sample call uses counter (draws so far + j)
 * on the CPU and on the GPU alike. */
#define VX_REPLAY_STREAM 0x52455047ull /* "REPG" */

/* The tree over C leaves: level 0 the root, level `depth` the leaves, FAN^depth >= C. Each level
 * holds only the nodes the capacity needs, rounded up to whole groups of FAN children (100 K
 * slots: 100,000 leaves, not 16^5); level 0 is one node. width[l] = 0 below the leaves. */
typedef struct {
    int depth;
    size_t width[VX_REPLAY_MAX_LEVELS];
} vx_replay_tree_shape;

VX_HD static inline vx_replay_tree_shape vx_replay_tree_shape_of(size_t capacity)
{
    vx_replay_tree_shape s;
    size_t leaves = 1;
    s.depth = 0;
    while (leaves < capacity) leaves *= VX_REPLAY_FAN, s.depth++;
    for (int l = 0; l < VX_REPLAY_MAX_LEVELS; l++) s.width[l] = 0;
    size_t width = (capacity + VX_REPLAY_FAN - 1) / VX_REPLAY_FAN * VX_REPLAY_FAN;
    for (int l = s.depth; l >= 0; l--) {
        if (l == 0) width = 1;
        s.width[l] = width;
        width = ((width + VX_REPLAY_FAN - 1) / VX_REPLAY_FAN + VX_REPLAY_FAN - 1) / VX_REPLAY_FAN *
                VX_REPLAY_FAN;
    }
    return s;
}

/* Uniform replay: the slot of draw j, in [0, size). */
VX_HD static inline uint32_t vx_replay_draw_slot(uint64_t seed, uint64_t draws, size_t j,
                                                 uint32_t size)
{
    vx_rng g = vx_rng_make(seed, VX_REPLAY_STREAM, draws + j);
    return vx_rng_below(&g, size);
}

/* Prioritised replay: draw j of B lands at u = (j + U) · total / B inside its stratum, U uniform
 * in [0, 1) from Philox counter draws + j; rounding that carries u to `total` is pulled back just
 * below it, so the last stratum never points past the last positive mass. */
VX_HD static inline double vx_replay_draw_u(uint64_t seed, uint64_t draws, size_t j, size_t B,
                                            double total)
{
    vx_rng g = vx_rng_make(seed, VX_REPLAY_STREAM, draws + j);
    double u = ((double)j + vx_rng_uniform_double(&g)) * (total / (double)B);
    if (u >= total) u = nextafter(total, 0.0);
    return u;
}

/* w = (N·P)^−β / (N·P_min)^−β = (P / P_min)^−β: one powf, in the float of the output, at most 1
 * (P_min is the least likely item's probability). */
VX_HD static inline float vx_replay_weight(double P, double p_min, double beta)
{
    float w = powf((float)(P / p_min), (float)-beta);
    return w < 1.0f ? w : 1.0f;
}

/* The unnormalised probability mass of rank k + 1 (k counts from 0): (k + 1)^−α. */
VX_HD static inline double vx_replay_rank_mass(size_t k, double alpha)
{
    return pow((double)(k + 1), -alpha);
}

/* The first rank k with cdf[k] > u (cdf: n cumulative rank masses, n >= 1). */
VX_HD static inline size_t vx_replay_cdf_find(const double *cdf, size_t n, double u)
{
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

#endif

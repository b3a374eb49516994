/* philox.h — Philox4x32-10 counter-based random numbers, host and device.
 *
 * Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3" (SC 2011); the
 * constants and round structure are those of Random123's philox4x32 with 10 rounds. A draw is a
 * pure function of (key, counter), so any thread on any device can produce the n-th number of
 * any stream without shared state — the property that lets the CPU and the GPU draw the same
 * numbers.
 *
 * vixen keys a stream by (seed, stream id): the 64-bit seed is the key, the 64-bit stream id
 * fills the two high counter words, and a 64-bit block counter fills the two low ones. Each
 * block yields four 32-bit words; `vx_rng` hands them out one at a time.
 *
 * Conversions: uniform floats use the top 24 bits, doubles 53 bits; both lie in [0, 1).
 * Normals use Box–Muller in double precision (two words each for u1 and u2). Integers in a range
 * use Lemire's multiply-shift with rejection, so they are unbiased. On the device the double
 * log/sqrt/sincos may differ from glibc in the last bit, so only integer and uniform draws are
 * promised bit-identical across CPU and GPU. */
#ifndef VIXEN_PHILOX_H
#define VIXEN_PHILOX_H

#include <stdint.h>
#include <math.h>
#include "vixen/hd.h"

typedef struct {
    uint32_t v[4];
} vx_u32x4;

#define VX_PHILOX_M0 0xD2511F53u
#define VX_PHILOX_M1 0xCD9E8D57u
#define VX_PHILOX_W0 0x9E3779B9u
#define VX_PHILOX_W1 0xBB67AE85u

VX_HD static inline void vx_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

/* The raw bijection: 10 rounds of Philox4x32 on counter `c` under key (k0, k1). */
VX_HD static inline vx_u32x4 vx_philox4x32_10(vx_u32x4 c, uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += VX_PHILOX_W0;
            k1 += VX_PHILOX_W1;
        }
        uint32_t hi0, lo0, hi1, lo1;
        vx_philox_mulhilo(VX_PHILOX_M0, c.v[0], &hi0, &lo0);
        vx_philox_mulhilo(VX_PHILOX_M1, c.v[2], &hi1, &lo1);
        vx_u32x4 o;
        o.v[0] = hi1 ^ c.v[1] ^ k0;
        o.v[1] = lo1;
        o.v[2] = hi0 ^ c.v[3] ^ k1;
        o.v[3] = lo0;
        c = o;
    }
    return c;
}

/* Block `block` of stream (seed, stream): four independent 32-bit words. */
VX_HD static inline vx_u32x4 vx_philox_block(uint64_t seed, uint64_t stream, uint64_t block)
{
    vx_u32x4 c;
    c.v[0] = (uint32_t)block;
    c.v[1] = (uint32_t)(block >> 32);
    c.v[2] = (uint32_t)stream;
    c.v[3] = (uint32_t)(stream >> 32);
    return vx_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* A sequential reader over one stream. Plain data: copy it, store it, put it in device memory. */
typedef struct {
    uint64_t seed;
    uint64_t stream;
    uint64_t block; /* next block to generate */
    vx_u32x4 buf;
    uint32_t used; /* words of buf already handed out (4 = empty) */
} vx_rng;

VX_HD static inline vx_rng vx_rng_make(uint64_t seed, uint64_t stream, uint64_t first_block)
{
    vx_rng r;
    r.seed = seed;
    r.stream = stream;
    r.block = first_block;
    r.buf.v[0] = r.buf.v[1] = r.buf.v[2] = r.buf.v[3] = 0;
    r.used = 4;
    return r;
}

/* The reader of part `part` (0 ≤ part < parts) of draw `index` of a stream (an acting step's
 * branch, say): the parts of every draw own disjoint counter ranges of VX_RNG_PART_BLOCKS blocks
 * each, so one part's words are never another's, nor the next draw's — whatever a part reads,
 * rejections of a bounded integer included. (A draw that reads more than one block from counter
 * `index` would read the next index's first words.) Distinct while index · parts + part < 2^48. */
#define VX_RNG_PART_BLOCKS 65536u
VX_HD static inline uint64_t vx_rng_part_first(uint64_t index, int parts, int part)
{
    return (index * (uint64_t)parts + (uint64_t)part) * VX_RNG_PART_BLOCKS;
}

VX_HD static inline vx_rng vx_rng_part(uint64_t seed, uint64_t stream, uint64_t index, int parts,
                                       int part)
{
    return vx_rng_make(seed, stream, vx_rng_part_first(index, parts, part));
}

/* The same reader with its first block already made (vx_philox_block at its first counter, by
 * a thread that had time for it earlier): the same words follow. */
VX_HD static inline vx_rng vx_rng_with_first(uint64_t seed, uint64_t stream, uint64_t first_block,
                                             vx_u32x4 first)
{
    vx_rng r = vx_rng_make(seed, stream, first_block + 1);
    r.buf = first;
    r.used = 0;
    return r;
}

VX_HD static inline uint32_t vx_rng_u32(vx_rng *r)
{
    if (r->used == 4) {
        r->buf = vx_philox_block(r->seed, r->stream, r->block++);
        r->used = 0;
    }
    return r->buf.v[r->used++];
}

VX_HD static inline uint64_t vx_rng_u64(vx_rng *r)
{
    uint64_t hi = vx_rng_u32(r);
    return (hi << 32) | vx_rng_u32(r);
}

/* Uniform float in [0, 1): top 24 bits, exactly representable. */
VX_HD static inline float vx_u32_to_float(uint32_t x)
{
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

VX_HD static inline float vx_rng_uniform(vx_rng *r) { return vx_u32_to_float(vx_rng_u32(r)); }

/* Uniform double in [0, 1): 53 bits from two words. */
VX_HD static inline double vx_rng_uniform_double(vx_rng *r)
{
    return (double)(vx_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal by Box–Muller; u1 in (0, 1] so the log is finite. The second value of the pair
 * is discarded so that one call always consumes exactly four words. */
VX_HD static inline double vx_rng_normal(vx_rng *r)
{
    double u1 = 1.0 - vx_rng_uniform_double(r);
    double u2 = vx_rng_uniform_double(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Unbiased integer in [0, n), n >= 1 (Lemire 2019, "Fast Random Integer Generation in an
 * Interval"). Rejection happens with probability < n / 2^32. */
VX_HD static inline uint32_t vx_rng_below(vx_rng *r, uint32_t n)
{
    uint64_t m = (uint64_t)vx_rng_u32(r) * (uint64_t)n;
    uint32_t lo = (uint32_t)m;
    if (lo < n) {
        uint32_t threshold = (uint32_t)(-n) % n;
        while (lo < threshold) {
            m = (uint64_t)vx_rng_u32(r) * (uint64_t)n;
            lo = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* Integer in [lo, hi], inclusive; requires lo <= hi and hi - lo < 2^32 - 1. */
VX_HD static inline int64_t vx_rng_range(vx_rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)vx_rng_below(r, (uint32_t)(hi - lo + 1));
}

#endif

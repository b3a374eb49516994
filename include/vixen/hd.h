/* hd.h — the host+device marker shared by the C compiler and nvcc.
 *
 * Dynamics, random numbers and loss arithmetic are written once as `VX_HD static inline`
 * functions in headers. The C compiler sees plain static inline functions; nvcc compiles the
 * same text for both the host and the device, so the CPU reference and the CUDA kernels step
 * the same arithmetic. */
#ifndef VIXEN_HD_H
#define VIXEN_HD_H

#ifdef __CUDACC__
#define VX_HD __host__ __device__
#else
#define VX_HD
#endif

/* Correctly rounded arithmetic, one operation at a time, on both sides: where the CPU rounds a·b
 * and then a·b + c, a GPU compiler would fuse them into one multiply-add with one rounding. Code
 * that must give the CPU's bits on the device (Adam, Polyak averaging, n-step returns) spells its
 * operations with these. The C compiler here does not fuse (ISO C mode: -ffp-contract=off). */
#ifdef __CUDA_ARCH__
#define VX_FMUL(a, b) __fmul_rn((a), (b))
#define VX_FADD(a, b) __fadd_rn((a), (b))
#define VX_FSUB(a, b) __fsub_rn((a), (b))
#define VX_FDIV(a, b) __fdiv_rn((a), (b))
#define VX_FSQRT(a) __fsqrt_rn(a)
#define VX_DMUL(a, b) __dmul_rn((a), (b))
#define VX_DADD(a, b) __dadd_rn((a), (b))
#else
#define VX_FMUL(a, b) ((float)(a) * (float)(b))
#define VX_FADD(a, b) ((float)(a) + (float)(b))
#define VX_FSUB(a, b) ((float)(a) - (float)(b))
#define VX_FDIV(a, b) ((float)(a) / (float)(b))
#define VX_FSQRT(a) sqrtf(a)
#define VX_DMUL(a, b) ((double)(a) * (double)(b))
#define VX_DADD(a, b) ((double)(a) + (double)(b))
#endif

#endif

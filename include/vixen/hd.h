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

#endif

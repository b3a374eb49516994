/* cuda_util.h — the CUDA seam of the util layer: device discovery and the device Philox twin.
 *
 * Built only when CUDA is on (VX_HAVE_CUDA). Every CUDA call in vixen goes through VX_CUDA_CHECK
 * (src/util/cuda_check.h), which turns a failure into a vx_status naming the file and line. */
#ifndef VIXEN_CUDA_UTIL_H
#define VIXEN_CUDA_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no device or no driver (never an error). */
int vx_cuda_device_count(void);
/* "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB" into buf. */
vx_status vx_cuda_device_describe(int device, char *buf, size_t n, vx_err *e);

/* Device draws for streams [0, n_streams) of `seed`, `per_stream` of each kind per stream,
 * written stream-major into host arrays (each n_streams × per_stream): raw words, uniform
 * floats, normals (double) and integers below `below_n`. Any output may be NULL. One device
 * thread per stream runs the same vx_rng code as the host. */
vx_status vx_philox_fill_cuda(uint64_t seed, size_t n_streams, size_t per_stream, uint32_t below_n,
                              uint32_t *words, float *uniforms, double *normals, uint32_t *below,
                              vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

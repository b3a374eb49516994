/* spin_cuda.h — a stream held busy by a kernel until the host lets it go (spin_cuda.cu). */
#ifndef VIXEN_TEST_SPIN_CUDA_H
#define VIXEN_TEST_SPIN_CUDA_H

#include "vixen/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spin spin;

/* A stream of dev's with a kernel on it that polls a host flag, then writes 1 to *write_to (a
 * device address, or NULL); it gives up after max_seconds. NULL on failure. */
spin *spin_start(vx_device *dev, int *write_to, double max_seconds);
int spin_busy(const spin *p);          /* the kernel has not finished */
void *spin_stream(const spin *p);      /* its stream (a cudaStream_t) */
int spin_device_has_pools(int device); /* stream-ordered allocation (else frees use cudaFree) */
void spin_release(spin *p);            /* lets the kernel finish */
void spin_destroy_stream(spin *p);
void spin_end(spin *p); /* releases, waits, frees */

#ifdef __cplusplus
}
#endif

#endif

/* cache_cuda.h — the CUDA side of the tests of the context's cache and launcher thread
 * (cache_cuda.cu, test_util_cuda.c): handles as opaque pointers, so the tests stay C. */
#ifndef VIXEN_TEST_CACHE_CUDA_H
#define VIXEN_TEST_CACHE_CUDA_H

#include <stddef.h>
#include "spin_cuda.h"
#include "vixen/device.h"

#ifdef __cplusplus
extern "C" {
#endif

void *cache_stream_take(vx_device *d); /* vx_cuda_stream_create; NULL on failure */
void cache_stream_give(vx_device *d, void *s);
int cache_stream_idle(void *s); /* nothing queued on it is unfinished */
void *cache_event_take(vx_device *d, int timing);
void cache_event_give(vx_device *d, void *ev, int timing);
int cache_event_complete(void *ev);               /* cudaEventQuery says done */
int cache_event_record_behind(void *ev, spin *p); /* recorded on the spin's stream: 0 on success */
/* Recorded while a stream of d's is captured into a graph (the graph then dropped): 0 on success.
 */
int cache_event_record_in_capture(vx_device *d, void *ev);
/* Behind the spin's kernel, n bytes of `value` copied from the device into `pinned`; 0 on
 * success. */
int cache_copy_behind(spin *p, void *pinned, size_t n, unsigned char value);
/* `threads` threads, each with a stream of d's and a counter on the device, launch two graphs
 * alternately `launches` times through vx_cuda_graph_launch (x = 2x + 1, then x = 3x, modulo a
 * prime: the order matters); returns how many threads' final counters differ from the host's
 * sequence, or -1 on a CUDA failure. */
int cache_launch_order(vx_device *d, int threads, int launches);
long long cache_launcher_launches(const vx_device *d);
/* The share's memory reserved ahead: size, bytes carved, blocks in use (vx_cuda_ahead_stats). */
void cache_ahead_stats(const vx_device *share, size_t *size, size_t *carved, int *used);
/* n bytes of `value` written to device memory p and read back: 0 if they all came back. */
int cache_fill_check(void *p, size_t n, unsigned char value);
/* 0 if the n bytes at device memory p are all `value` (still: nothing else wrote there). */
int cache_check(const void *p, size_t n, unsigned char value);

#ifdef __cplusplus
}
#endif

#endif

/* spin_cuda.cu — a kernel that holds a stream busy until the host lets it go, for the tests of
 * what a free waits for (test_util_cuda.c). The flag is mapped host memory the kernel polls; a
 * deadline (in the GPU's global nanosecond timer) ends it anyway, so a wrong program fails its
 * test instead of hanging. */
#include "spin_cuda.h"
#include "util/device_cuda.h"

#include <stdlib.h>

struct spin {
    vx_device *dev;
    cudaStream_t s;
    volatile int *flag; /* mapped host memory: the kernel sees the host's write */
};

__device__ static unsigned long long global_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ static void spin_kernel(volatile int *flag, int *out, unsigned long long max_ns)
{
    unsigned long long t0 = global_ns();
    while (!*flag && global_ns() - t0 < max_ns) {}
    if (out) *out = 1; /* the last touch of the memory the test frees */
}

extern "C" spin *spin_start(vx_device *dev, int *write_to, double max_seconds)
{
    spin *p = (spin *)calloc(1, sizeof *p);
    if (!p) return NULL;
    p->dev = dev;
    vx_err e;
    int *flag = NULL;
    if (vx_cuda_stream_create(dev, &p->s, &e) != VX_OK ||
        cudaHostAlloc((void **)&flag, sizeof *flag, cudaHostAllocMapped) != cudaSuccess) {
        spin_end(p);
        return NULL;
    }
    *flag = 0;
    p->flag = flag;
    int *dflag = NULL;
    if (cudaHostGetDevicePointer((void **)&dflag, flag, 0) != cudaSuccess) {
        spin_end(p);
        return NULL;
    }
    spin_kernel<<<1, 1, 0, p->s>>>(dflag, write_to, (unsigned long long)(max_seconds * 1e9));
    if (cudaGetLastError() != cudaSuccess) {
        spin_end(p);
        return NULL;
    }
    return p;
}

extern "C" int spin_device_has_pools(int device)
{
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess)
        return 0;
    return pools;
}

extern "C" int spin_busy(const spin *p) { return cudaStreamQuery(p->s) == cudaErrorNotReady; }

extern "C" void *spin_stream(const spin *p) { return (void *)p->s; }

extern "C" void spin_release(spin *p) { *p->flag = 1; }

extern "C" void spin_destroy_stream(spin *p)
{
    vx_cuda_stream_destroy(p->dev, p->s);
    p->s = NULL;
}

extern "C" void spin_end(spin *p)
{
    if (!p) return;
    if (p->flag) *p->flag = 1;
    if (p->s) vx_cuda_stream_destroy(p->dev, p->s);
    if (p->flag) cudaFreeHost((void *)p->flag);
    free(p);
}

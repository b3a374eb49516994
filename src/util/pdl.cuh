/* pdl.cuh — programmatic dependent launch (internal; CUDA code only).
 *
 * A training step is a chain of small kernels, each waiting for the one before it in its stream;
 * between two of them the GPU retires the first and only then starts the second. A kernel
 * launched with vx_pdl_launch is started as the kernel before it in its stream ends (on Hopper
 * and later; elsewhere the attribute changes nothing) and waits in vx_pdl_wait until that kernel
 * has finished and its writes are visible: part of the gap is paid while the first one drains.
 *
 * The rule: a kernel launched with vx_pdl_launch calls vx_pdl_wait() before anything else — it
 * must not read or write memory before it (scripts/pdl-check, run by `make test`, fails a kernel
 * that does not). Kernels launched the usual way may call it too: it then returns at once. The
 * arithmetic does not change, only when blocks are placed: the same inputs give the same bits.
 *
 * No kernel signals its dependents early (griddepcontrol.launch_dependents at its start, which
 * would place the next kernel's blocks beside its own): measured on an H100, that made PPO's TF32
 * iteration 30 % slower, and the instruction alone, with the attribute off, 21 % slower; waiting
 * only took 2–3 % off a DQN update (docs/benchmarks.md). */
#ifndef VIXEN_PDL_CUH
#define VIXEN_PDL_CUH

#include <cuda_runtime.h>
#include <utility>

#ifndef VX_PDL /* 0: every launch the usual way (for comparisons) */
#define VX_PDL 1
#endif

/* Wait for the previous kernel in the stream: all of it, its writes visible. */
static __device__ __forceinline__ void vx_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* kernel<<<grid, block, smem, s>>>(args...), started as the previous kernel in s ends (the kernel
 * calls vx_pdl_wait first); with `cooperative`, also a cooperative launch: every block resident
 * at once, so the grid may wait for itself (cooperative_groups' grid sync) — the grid must not
 * exceed what the device holds at once (occupancy × SMs), or the launch is refused. Returns the
 * launch's error, which it also clears from the runtime's last error, as VX_CUDA_LAUNCH_CHECK's
 * cudaGetLastError would: a later check must not see it. */
template <typename... P, typename... A>
static inline cudaError_t vx_pdl_launch_cooperative(void (*kernel)(P...), dim3 grid, dim3 block,
                                                    size_t smem, cudaStream_t s, int cooperative,
                                                    A &&...args)
{
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = VX_PDL;
    at[1].id = cudaLaunchAttributeCooperative;
    at[1].val.cooperative = 1;
    cudaLaunchConfig_t c = {};
    c.gridDim = grid, c.blockDim = block, c.dynamicSmemBytes = smem, c.stream = s;
    c.attrs = at, c.numAttrs = cooperative ? 2 : 1;
    cudaError_t rc = cudaLaunchKernelEx(&c, kernel, std::forward<A>(args)...);
    if (rc != cudaSuccess) (void)cudaGetLastError();
    return rc;
}

/* The usual launch, started early as above. */
template <typename... P, typename... A>
static inline cudaError_t vx_pdl_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                        cudaStream_t s, A &&...args)
{
    return vx_pdl_launch_cooperative(kernel, grid, block, smem, s, 0, std::forward<A>(args)...);
}

#endif

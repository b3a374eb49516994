/* dense_lt.h — dense layers through cuBLASLt with fused epilogues (CUDA builds only; internal to
 * the nn layer).
 *
 * Forward: y = x·W + b, with ReLU, in one kernel (epilogue RELU_BIAS or BIAS) instead of a GEMM
 * and a bias kernel. Backward: dW = xᵀ·dy with db = Σ_rows dy in the same kernel (epilogue
 * BGRADA) instead of a GEMM and a GEMV. Plans (descriptors, layouts and the heuristic's algorithm)
 * are made once per (layer, batch, kind) and kept: the same algorithm every call, so the same bits
 * every run. When cuBLASLt offers no fused kernel for a shape, *fused is 0 and the caller does the
 * unfused version. */
#ifndef VIXEN_DENSE_LT_H
#define VIXEN_DENSE_LT_H

#include <cuda_runtime.h>
#include "vixen/nn.h"

typedef struct vx_dense_lt vx_dense_lt;

vx_status vx_dense_lt_create(vx_dense_lt **out, vx_err *e);
/* TF32 tensor-core math for the plans made from now on (off: plain float32). */
void vx_dense_lt_set_tf32(vx_dense_lt *lt, int on);
void vx_dense_lt_free(vx_dense_lt *lt);

/* x: B × in, y: B × out (row-major, device); ws: a workspace of ws_n bytes used on stream s. */
vx_status vx_dense_lt_forward(vx_dense_lt *lt, void *ws, size_t ws_n, const float *P,
                              const vx_dense *d, const float *x, int B, float *y, int relu,
                              cudaStream_t s, int *fused, vx_err *e);
/* dW into g + d->w and db into g + d->b, from x (B × in) and dy (B × out). */
vx_status vx_dense_lt_wgrad(vx_dense_lt *lt, void *ws, size_t ws_n, const vx_dense *d,
                            const float *x, int B, const float *dy, float *g, cudaStream_t s,
                            int *fused, vx_err *e);

#endif

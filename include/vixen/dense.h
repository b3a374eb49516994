/* dense.h — the dense layer every network here is built from: y = x·W + b (ReLU or not) and its
 * gradients, on the CPU (OpenBLAS) or a CUDA device (cuBLASLt, with bias + ReLU fused into the
 * forward GEMM and the bias gradient into the weight-gradient GEMM where cuBLASLt has such
 * kernels; a GEMM and a small kernel where it has not).
 *
 * Layout: W [in × out] row-major at P + d->w, b [out] at P + d->b (every tensor 16-byte aligned in
 * its flat vector), x B × in and y B × out row-major; all in the memory of the context's device.
 *
 * A vx_dense_ctx holds what one stream of GEMMs needs: on a GPU the cuBLASLt plans (descriptors
 * and the heuristic's algorithm, made once per layer and batch and reused: the same algorithm
 * every call, so the same bits every run) and a workspace of its own — two streams running GEMMs
 * at once need two contexts. On the CPU it holds nothing. */
#ifndef VIXEN_DENSE_H
#define VIXEN_DENSE_H

#include <stddef.h>
#include "vixen/device.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t w, b; /* offsets of the weight [in × out] and bias [out] in the flat parameters */
    int in, out;
} vx_dense;

/* Places an in × out layer in a flat parameter vector after *off (advanced past it), each tensor
 * on a 16-byte boundary (4 floats: the GPU's fused GEMM kernels load them in 16-byte vectors; the
 * few padding floats stay zero); *weights counts the real numbers. */
vx_dense vx_dense_place(size_t *off, size_t *weights, int in, int out);
/* n rounded up to the 16-byte boundary (a flat vector's length). */
size_t vx_dense_align(size_t n);

typedef struct vx_dense_ctx vx_dense_ctx;

/* workspace: bytes of cuBLASLt workspace on a GPU (0: a default), charged to the device. */
vx_status vx_dense_ctx_create(vx_device *dev, size_t workspace, vx_dense_ctx **out, vx_err *e);
void vx_dense_ctx_free(vx_dense_ctx *c);
/* TF32 tensor-core arithmetic for the GEMMs from now on (GPU; the CPU ignores it). */
void vx_dense_set_tf32(vx_dense_ctx *c, int on);
size_t vx_dense_reserved(const vx_dense_ctx *c);

vx_status vx_dense_forward(vx_dense_ctx *c, const vx_dense *d, const float *P, const float *x,
                           int B, float *y, int relu, vx_stream s, vx_err *e);
/* vx_dense_backward's flags. */
enum {
    VX_DENSE_ACCUMULATE = 1, /* dx += dy·Wᵀ, not dx = dy·Wᵀ */
    /* x is the output of a ReLU: dx (after any accumulation) is zeroed where x ≤ 0 — the gradient
     * before that ReLU, in the same launch as the product where the layer is small (on a GPU) */
    VX_DENSE_RELU_IN = 2,
    /* dx only: g is left alone. With a call for dW and db alone (dx NULL) on another stream, the
     * two halves of a backward pass run side by side, each giving the bits the one call gives;
     * on a GPU the dx half then uses no cuBLASLt workspace, so the halves may share a context. */
    VX_DENSE_DX_ONLY = 4
};

/* From dy (B × out, the ReLU already applied to it by the caller): dW into g + d->w and db into
 * g + d->b (overwritten; with VX_DENSE_DX_ONLY not at all, and g may be NULL), and, when dx is not
 * NULL, dx = dy·Wᵀ (B × in), as `flags` (above) say. */
vx_status vx_dense_backward(vx_dense_ctx *c, const vx_dense *d, const float *P, const float *x,
                            int B, const float *dy, float *g, float *dx, int flags, vx_stream s,
                            vx_err *e);

/* A group of K layers of the same shape, each on its own data: member k's parameters at
 * P + k·p (and its gradients at g + k·p), its input at x + k·x, its output at y + k·y, and in the
 * backward pass its dy at dy + k·dy and its dx at dx + k·dx (strides in floats; dy and dx 0: the
 * same as y and x). The calls below are the ones above for every member — on a GPU
 * each GEMM one strided-batched GEMM over the group, its epilogue (bias, ReLU, bias gradient)
 * included where cuBLASLt has it, so K same-shape trials take one launch where they took K. The
 * group's members are what fused trials are made of. The strides must keep each member's
 * tensors 16-byte aligned (multiples of 4) for the fused kernels; others take the plain path. */
typedef struct {
    int K;                  /* members, at least 1 */
    size_t p, x, y, dx, dy; /* strides, in floats */
} vx_dense_group;

vx_status vx_dense_forward_group(vx_dense_ctx *c, const vx_dense *d, const vx_dense_group *G,
                                 const float *P, const float *x, int B, float *y, int relu,
                                 vx_stream s, vx_err *e);
vx_status vx_dense_backward_group(vx_dense_ctx *c, const vx_dense *d, const vx_dense_group *G,
                                  const float *P, const float *x, int B, const float *dy, float *g,
                                  float *dx, int flags, vx_stream s, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

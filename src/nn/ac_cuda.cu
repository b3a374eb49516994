/* ac_cuda.cu — the actor-critic's forward and backward passes on a CUDA device (ac_cuda.h): the
 * CPU reference's sequence (ac_impl.h) layer for layer, each GEMM a dense-layer call (cuBLASLt,
 * bias and ReLU fused into the forward GEMM, the bias gradient into the weight gradient's), and
 * one small kernel for the ReLU's mask in the backward pass. */
#include "vixen/dense.h"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "ac_cuda.h"

#include <stdlib.h>
#include <string.h>

struct ac_cuda {
    vx_ac_layout L;
    vx_device *dev;
    vx_dense_ctx *dense;
    vx_mem mem;
    int max_rows;
    float *pi[VX_AC_MAX_TRUNK], *v[VX_AC_MAX_TRUNK]; /* rows × H_l after ReLU */
    float *logits, *value;
    float *dh, *dh2, *dg; /* backward scratch: rows × max(H, D) each */
};

/* dy *= (y > 0): the ReLU's derivative, from its output. */
static __global__ void relu_mask_kernel(float *dy, const float *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && y[i] <= 0.0f) dy[i] = 0.0f;
}

extern "C" void ac_cuda_free(ac_cuda *a)
{
    if (!a) return;
    vx_dense_ctx_free(a->dense);
    vx_mem_release(&a->mem);
    free(a);
}

extern "C" vx_status ac_cuda_create(const vx_ac_layout *L, int max_rows, size_t workspace,
                                    vx_device *dev, ac_cuda **out, vx_err *e)
{
    *out = NULL;
    vx_status st = vx_cuda_enter(dev, e);
    if (st) return st;
    ac_cuda *a = (ac_cuda *)calloc(1, sizeof *a);
    if (!a) return vx_err_set(e, VX_ERR_NOMEM, "actor-critic: out of memory");
    a->L = *L, a->dev = dev, a->max_rows = max_rows;
    vx_mem_init(&a->mem, dev, "actor-critic");
    const vx_ac_cfg *c = &L->cfg;
    size_t R = (size_t)max_rows, W = (size_t)c->in_dim;
    for (int l = 0; l < c->n_trunk; l++) W = (size_t)c->trunk[l] > W ? (size_t)c->trunk[l] : W;
    st = vx_dense_ctx_create(dev, workspace, &a->dense, e);
    for (int l = 0; l < c->n_trunk && !st; l++) {
        st = vx_mem_alloc(&a->mem, R * c->trunk[l] * 4, &a->pi[l], e);
        if (!st && !c->shared) st = vx_mem_alloc(&a->mem, R * c->trunk[l] * 4, &a->v[l], e);
    }
    if (!st) st = vx_mem_alloc(&a->mem, R * c->n_logits * 4, &a->logits, e);
    if (!st) st = vx_mem_alloc(&a->mem, R * 4, &a->value, e);
    if (!st) st = vx_mem_alloc(&a->mem, R * W * 4, &a->dh, e);
    if (!st) st = vx_mem_alloc(&a->mem, R * W * 4, &a->dh2, e);
    if (!st) st = vx_mem_alloc(&a->mem, R * W * 4, &a->dg, e);
    if (st) {
        ac_cuda_free(a);
        return st;
    }
    *out = a;
    return VX_OK;
}

extern "C" void ac_cuda_set_tf32(ac_cuda *a, int on) { vx_dense_set_tf32(a->dense, on); }

/* n layers from x over B rows into out[l]; returns the top activation. */
static vx_status trunk_fwd(ac_cuda *a, const vx_dense *layers, int n, const float *p,
                           const float *x, int B, float **out, const float **top, cudaStream_t s,
                           vx_err *e)
{
    const float *h = x;
    for (int l = 0; l < n; l++) {
        vx_status st = vx_dense_forward(a->dense, &layers[l], p, h, B, out[l], 1, s, e);
        if (st) return st;
        h = out[l];
    }
    *top = h;
    return VX_OK;
}

extern "C" vx_status ac_cuda_forward(ac_cuda *a, const float *p, const float *x, int B_pi, int B_v,
                                     cudaStream_t s, vx_err *e)
{
    const vx_ac_cfg *c = &a->L.cfg;
    if (B_pi < 0 || B_v < B_pi || B_v > a->max_rows)
        return vx_err_set(e, VX_ERR_ARG, "actor-critic: rows %d and %d (at most %d)", B_pi, B_v,
                          a->max_rows);
    const float *h = x, *g = x;
    vx_status st = VX_OK;
    if (c->shared) {
        st = trunk_fwd(a, a->L.pi, c->n_trunk, p, x, B_v, a->pi, &h, s, e);
        g = h;
    } else {
        if (B_pi > 0) st = trunk_fwd(a, a->L.pi, c->n_trunk, p, x, B_pi, a->pi, &h, s, e);
        if (!st) st = trunk_fwd(a, a->L.v, c->n_trunk, p, x, B_v, a->v, &g, s, e);
    }
    if (!st && B_pi > 0)
        st = vx_dense_forward(a->dense, &a->L.pi_head, p, h, B_pi, a->logits, 0, s, e);
    if (!st) st = vx_dense_forward(a->dense, &a->L.v_head, p, g, B_v, a->value, 0, s, e);
    return st;
}

extern "C" const float *ac_cuda_logits(const ac_cuda *a) { return a->logits; }
extern "C" const float *ac_cuda_values(const ac_cuda *a) { return a->value; }

/* Backward through a trunk from dh (B × H_top at its output; dh and dh2 alternate as scratch). */
static vx_status trunk_bwd(ac_cuda *a, const vx_dense *layers, int n, float *const *acts,
                           const float *p, const float *x, int B, float *dh, float *dh2, float *g,
                           cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    for (int l = n - 1; l >= 0; l--) {
        size_t cnt = (size_t)B * layers[l].out;
        relu_mask_kernel<<<(unsigned)((cnt + 255) / 256), 256, 0, s>>>(dh, acts[l], cnt);
        VX_CUDA_LAUNCH_CHECK(s);
        st = vx_dense_backward(a->dense, &layers[l], p, l ? acts[l - 1] : x, B, dh, g,
                               l ? dh2 : NULL, 0, s, e);
        if (st) return st;
        float *t = dh;
        dh = dh2;
        dh2 = t;
    }
fail:
    return st;
}

extern "C" vx_status ac_cuda_backward(ac_cuda *a, const float *p, const float *x, int B,
                                      const float *dlogits, const float *dvalue, float *g,
                                      cudaStream_t s, vx_err *e)
{
    const vx_ac_cfg *c = &a->L.cfg;
    int n = c->n_trunk;
    const float *top_pi = n ? a->pi[n - 1] : x;
    vx_status st = vx_dense_backward(a->dense, &a->L.pi_head, p, top_pi, B, dlogits, g,
                                     n ? a->dh : NULL, 0, s, e);
    if (st) return st;
    if (c->shared) {
        st = vx_dense_backward(a->dense, &a->L.v_head, p, top_pi, B, dvalue, g, n ? a->dh : NULL, 1,
                               s, e);
        if (!st && n) st = trunk_bwd(a, a->L.pi, n, a->pi, p, x, B, a->dh, a->dh2, g, s, e);
        return st;
    }
    const float *top_v = n ? a->v[n - 1] : x;
    st = vx_dense_backward(a->dense, &a->L.v_head, p, top_v, B, dvalue, g, n ? a->dg : NULL, 0, s,
                           e);
    if (!st && n) st = trunk_bwd(a, a->L.pi, n, a->pi, p, x, B, a->dh, a->dh2, g, s, e);
    if (!st && n) st = trunk_bwd(a, a->L.v, n, a->v, p, x, B, a->dg, a->dh, g, s, e);
    return st;
}

extern "C" size_t ac_cuda_reserved(const ac_cuda *a)
{
    return a->mem.bytes + vx_dense_reserved(a->dense);
}

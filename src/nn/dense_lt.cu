/* dense_lt.cu — cuBLASLt GEMMs with fused bias/ReLU and bias-gradient epilogues (dense_lt.h).
 *
 * Layouts, in cuBLAS's column-major terms (a row-major B × n matrix is a column-major n × B one):
 *   forward  Y (out × B) = W (out × in, as stored) · X (in × B),   bias over the rows of Y;
 *   backward dW (out × in) = dY (out × B) · Xᵀ (B × in),          db = Σ_k dY (BGRADA: the bias
 *            gradient of A, reduced over the GEMM's k = the batch). */
#include "dense_lt.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLANS 96

typedef struct {
    size_t key_w;  /* the layer, by its weight offset */
    int B, kind;   /* kind: 0 forward, 1 forward + ReLU, 2 weight gradient */
    unsigned align; /* the A, B and C pointers' alignments, 4 bits each (bytes, up to 16) */
    int ok;        /* 0: no fused algorithm for this shape */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} plan;

struct vx_dense_lt {
    cublasLtHandle_t h;
    int tf32;
    plan plans[MAX_PLANS];
    int n;
};

static void plan_free(plan *p)
{
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
}

void vx_dense_lt_free(vx_dense_lt *lt)
{
    if (!lt) return;
    for (int i = 0; i < lt->n; i++) plan_free(&lt->plans[i]);
    if (lt->h) cublasLtDestroy(lt->h);
    free(lt);
}

vx_status vx_dense_lt_create(vx_dense_lt **out, vx_err *e)
{
    *out = NULL;
    vx_dense_lt *lt = (vx_dense_lt *)calloc(1, sizeof *lt);
    if (!lt) return vx_err_set(e, VX_ERR_NOMEM, "dense: out of memory");
    cublasStatus_t bs = cublasLtCreate(&lt->h);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        free(lt);
        return vx_err_set(e, VX_ERR_CUDA, "dense: cublasLtCreate failed: status %d", (int)bs);
    }
    *out = lt;
    return VX_OK;
}

/* The alignment of an address, in bytes, up to 16: an algorithm chosen for aligned operands may
 * use 16-byte loads, so the plan records what it was chosen for. */
static unsigned align_of(const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    return a % 16 == 0 ? 16 : a % 8 == 0 ? 8 : a % 4 == 0 ? 4 : 1;
}

void vx_dense_lt_set_tf32(vx_dense_lt *lt, int on)
{
    if (lt->tf32 == !!on) return;
    for (int i = 0; i < lt->n; i++) plan_free(&lt->plans[i]);
    lt->n = 0;
    lt->tf32 = !!on;
}

/* Finds or makes the plan; a shape cuBLASLt cannot fuse gets a plan with ok = 0. */
static plan *get_plan(vx_dense_lt *lt, const vx_dense *d, int B, int kind, size_t ws_n,
                      const void *A, const void *Bp, const void *C)
{
    uint32_t aa = align_of(A), ab = align_of(Bp), ac = align_of(C);
    unsigned align = aa | ab << 8 | ac << 16;
    for (int i = 0; i < lt->n; i++) {
        plan *p = &lt->plans[i];
        if (p->key_w == d->w && p->B == B && p->kind == kind && p->align == align) return p;
    }
    if (lt->n == MAX_PLANS) return NULL; /* unfused from here on: correct, a little slower */
    plan *p = &lt->plans[lt->n++];
    memset(p, 0, sizeof *p);
    p->key_w = d->w, p->B = B, p->kind = kind, p->align = align;
    cublasOperation_t ta = CUBLAS_OP_N, tb = kind == 2 ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = kind == 0 ? CUBLASLT_EPILOGUE_BIAS
                           : kind == 1 ? CUBLASLT_EPILOGUE_RELU_BIAS
                                       : CUBLASLT_EPILOGUE_BGRADA;
    cublasComputeType_t ct = lt->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    int ok = cublasLtMatmulDescCreate(&p->op, ct, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == 0;
    ok = ok && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == 0;
    ok = ok && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == 0;
    if (kind < 2) { /* W: out × in (ld out); X: in × B; Y: out × B */
        ok = ok && cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, d->out, d->in, d->out) == 0;
        ok = ok && cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, d->in, B, d->in) == 0;
        ok = ok && cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, d->out, B, d->out) == 0;
    } else {        /* dY: out × B; X stored in × B, used transposed; dW: out × in */
        ok = ok && cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, d->out, B, d->out) == 0;
        ok = ok && cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, d->in, B, d->in) == 0;
        ok = ok && cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, d->out, d->in, d->out) == 0;
    }
    cublasLtMatmulPreference_t pref = NULL;
    ok = ok && cublasLtMatmulPreferenceCreate(&pref) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws_n, sizeof ws_n) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                    &aa, sizeof aa) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                    &ab, sizeof ab) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                    &ac, sizeof ac) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                    &ac, sizeof ac) == 0;
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    if (ok) {
        /* the heuristic needs a bias pointer's alignment to judge; any aligned address will do */
        const void *dummy = (const void *)(uintptr_t)256;
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dummy, sizeof dummy);
        ok = cublasLtMatmulAlgoGetHeuristic(lt->h, p->op, p->a, p->b, p->c, p->c, pref, 1, &r,
                                            &found) == 0 && found > 0;
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ok) p->algo = r.algo;
    else
        vx_log(VX_LOG_INFO, "dense: no fused cuBLASLt kernel for a %d x %d layer at batch %d (%s); "
                            "GEMM and a separate kernel instead",
               d->in, d->out, B, kind == 2 ? "bias gradient" : "bias epilogue");
    p->ok = ok;
    return p;
}

static vx_status run(vx_dense_lt *lt, plan *p, void *bias, const float *A, const float *Bm,
                     float *C, void *ws, size_t ws_n, cudaStream_t s, vx_err *e)
{
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t bs =
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasLtMatmul(lt->h, p->op, &one, A, p->a, Bm, p->b, &zero, C, p->c, C, p->c,
                            &p->algo, ws, ws_n, s);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return vx_err_set(e, VX_ERR_CUDA, "dense: cublasLtMatmul failed: status %d", (int)bs);
    return VX_OK;
}

vx_status vx_dense_lt_forward(vx_dense_lt *lt, void *ws, size_t ws_n, const float *P,
                              const vx_dense *d, const float *x, int B, float *y, int relu,
                              cudaStream_t s, int *fused, vx_err *e)
{
    /* the bias is read in 16-byte vectors too: the layout (nn.h) aligns every tensor */
    plan *p = align_of(P + d->b) == 16 ? get_plan(lt, d, B, relu ? 1 : 0, ws_n, P + d->w, x, y) : NULL;
    *fused = p && p->ok;
    if (!*fused) return VX_OK;
    return run(lt, p, (void *)(P + d->b), P + d->w, x, y, ws, ws_n, s, e);
}

vx_status vx_dense_lt_wgrad(vx_dense_lt *lt, void *ws, size_t ws_n, const vx_dense *d,
                            const float *x, int B, const float *dy, float *g, cudaStream_t s,
                            int *fused, vx_err *e)
{
    plan *p = align_of(g + d->b) == 16 ? get_plan(lt, d, B, 2, ws_n, dy, x, g + d->w) : NULL;
    *fused = p && p->ok;
    if (!*fused) return VX_OK;
    return run(lt, p, (void *)(g + d->b), dy, x, g + d->w, ws, ws_n, s, e);
}

/* dense_cuda.cu — the dense layer on a CUDA device (dense.h): every GEMM through cuBLASLt, with
 * its epilogues fused where it has them.
 *
 * Layouts, in cuBLAS's column-major terms (a row-major B × n matrix is a column-major n × B one):
 *   forward  Y (out × B) = W (out × in, as stored) · X (in × B),  epilogue RELU_BIAS or BIAS;
 *   wgrad    dW (out × in) = dY (out × B) · Xᵀ (B × in),          epilogue BGRADA: db = Σ_k dY;
 *   dgrad    dX (in × B) = Wᵀ (in × out) · dY (out × B),           beta 1 to accumulate;
 *            through the ReLU that made X (VX_DENSE_RELU_IN), relu_in_kernel after it.
 * Where cuBLASLt has no fused kernel for a shape, the plain GEMM and a small kernel (bias+ReLU,
 * or a column sum for db) do the same. The input gradient's GEMM uses no workspace (plan_ws), so
 * a caller may run it and the weight gradient on two streams (VX_DENSE_DX_ONLY).
 * A layer of at most SMALL_OUT outputs and SMALL_IN inputs
 * (the Q-network's and the policy's output layers) takes kernels of its own for all three, each
 * output in a fixed order: cuBLASLt ran them as float32 GEMMs of 18–27 µs for a group of 64 at
 * batch 256 (H100), for almost no arithmetic.
 *
 * Why cuBLASLt for every GEMM: it takes the stream and the workspace with each call, so the
 * device context's one handle serves every stream and thread, each context passing a workspace
 * of its own; the algorithm is chosen once per (layer, batch, kind, alignment) and kept, so the
 * same call gives the same bits every time — also with other trainings running beside it
 * (cuBLAS may otherwise pick other kernels when streams run concurrently). The heuristic's
 * answers are kept for the whole process (`answers` below), so every context with a layer of
 * the same shape runs the same kernel. */
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "../util/pdl.cuh"
#include "nn_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLANS 96
#define DEFAULT_WS ((size_t)1 << 20)
#define SMALL_OUT 16 /* outputs at most: the layer's own kernels (the top comment) */

enum { K_FWD, K_FWD_RELU, K_WGRAD, K_DGRAD, K_FWD_PLAIN, K_WGRAD_PLAIN };

typedef struct {
    size_t key_w; /* the layer, by its weight offset and shape */
    int in, out;
    int B, kind;
    vx_dense_group G; /* the group it is for (K = 1: a layer alone) */
    unsigned align;   /* the A, B and C pointers' alignments, 8 bits each (bytes, up to 16) */
    int ok;           /* 0: cuBLASLt has no algorithm for this shape and kind */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} plan;

typedef struct {
    vx_device *dev;
    cublasLtHandle_t lt;
    int tf32;
    plan plans[MAX_PLANS];
    int n;
    void *ws;
    size_t ws_n;
    vx_mem mem;
} dense_cuda;

/* The heuristic's answers, shared by every dense context of the process: with twenty trials
 * setting up at once, cublasLtMatmulAlgoGetHeuristic calls queued behind one another (measured
 * on the H200: 76 calls over 0.3 ms, 3.0 s in all, up to 270 ms each) while the trials asked it
 * the same questions. An answer is keyed by all the question holds (device, shape, kind,
 * alignments, TF32, workspace) but not the layer. The lock is held while cuBLASLt answers: the
 * others asking then wait for that answer instead of each asking it too (with the lock taken
 * only around the table, twenty trials starting together all missed it, 77 calls as before);
 * and every context with a layer of a shape runs the kernel the first asker was given. */
typedef struct {
    int device, in, out, B, kind, tf32;
    vx_dense_group G;
    unsigned align;
    size_t ws_n;
    int found; /* 0: cuBLASLt has no algorithm for it */
    cublasLtMatmulAlgo_t algo;
} answer;

#define MAX_ANSWERS 512
static pthread_mutex_t answers_lock = PTHREAD_MUTEX_INITIALIZER;
static answer answers[MAX_ANSWERS];
static int n_answers;

static int same_group(const vx_dense_group *a, const vx_dense_group *b)
{
    return a->K == b->K && a->p == b->p && a->x == b->x && a->y == b->y && a->dx == b->dx &&
           a->dy == b->dy;
}

static int same_question(const answer *a, const answer *q)
{
    return a->device == q->device && a->in == q->in && a->out == q->out && a->B == q->B &&
           a->kind == q->kind && a->tf32 == q->tf32 && same_group(&a->G, &q->G) &&
           a->align == q->align && a->ws_n == q->ws_n;
}

/* q's answer, from the table or else from cuBLASLt (then kept, while the table has room); 0 when
 * cuBLASLt's call failed (out of memory, say), which is no answer. */
static int answer_get(dense_cuda *c, plan *p, cublasLtMatmulPreference_t pref, answer *q)
{
    int answered = 1;
    pthread_mutex_lock(&answers_lock);
    int i = 0;
    while (i < n_answers && !same_question(&answers[i], q)) i++;
    if (i < n_answers) {
        *q = answers[i];
    } else {
        if (q->kind == K_FWD || q->kind == K_FWD_RELU || q->kind == K_WGRAD) {
            /* the heuristic needs a bias pointer's alignment to judge; any aligned address does */
            const void *dummy = (const void *)(uintptr_t)256;
            cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dummy,
                                           sizeof dummy);
        }
        cublasLtMatmulHeuristicResult_t r;
        int found = 0;
        cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->a, p->b, p->c, p->c,
                                                           pref, 1, &r, &found);
        q->found = hs == CUBLAS_STATUS_SUCCESS && found > 0;
        if (q->found) q->algo = r.algo;
        /* kept only when it is an answer: a call that failed (out of memory, say) is asked again */
        answered = hs == CUBLAS_STATUS_SUCCESS || hs == CUBLAS_STATUS_NOT_SUPPORTED;
        if (answered && n_answers < MAX_ANSWERS) answers[n_answers++] = *q;
    }
    pthread_mutex_unlock(&answers_lock);
    return answered;
}

static void plan_free(plan *p)
{
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
}

static void dg_free(void *impl)
{
    dense_cuda *c = (dense_cuda *)impl;
    if (!c) return;
    for (int i = 0; i < c->n; i++) plan_free(&c->plans[i]);
    vx_mem_release(&c->mem);
    free(c);
}

static vx_status dg_create(vx_device *dev, size_t workspace, void **impl, vx_err *e)
{
    dense_cuda *c = (dense_cuda *)calloc(1, sizeof *c);
    if (!c) return vx_err_set(e, VX_ERR_NOMEM, "dense: out of memory");
    c->dev = dev;
    c->lt = vx_cuda_lt(dev);
    c->ws_n = workspace ? workspace : DEFAULT_WS;
    vx_mem_init(&c->mem, dev, "dense layer workspace");
    vx_status st = vx_mem_alloc(&c->mem, c->ws_n, &c->ws, e);
    if (st) {
        dg_free(c);
        return st;
    }
    *impl = c;
    return VX_OK;
}

static void dg_set_tf32(void *impl, int on)
{
    dense_cuda *c = (dense_cuda *)impl;
    if (c->tf32 == !!on) return;
    for (int i = 0; i < c->n; i++) plan_free(&c->plans[i]);
    c->n = 0;
    c->tf32 = !!on;
}

static size_t dg_reserved(const void *impl) { return ((const dense_cuda *)impl)->mem.bytes; }

/* The alignment of an address, in bytes, up to 16: an algorithm chosen for aligned operands may
 * use 16-byte loads, so the plan records what it was chosen for. */
static unsigned align_of(const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    return a % 16 == 0 ? 16 : a % 8 == 0 ? 8 : a % 4 == 0 ? 4 : 1;
}

/* The alignment every member's copy of a tensor has: its first's and its stride's (in floats). */
static unsigned align_in_group(const void *ptr, size_t stride, int K)
{
    unsigned a = align_of(ptr), s = align_of((const void *)(uintptr_t)(stride * sizeof(float)));
    return K > 1 && s < a ? s : a;
}

/* The batch of K matrices `stride` floats apart on a layout (nothing for K = 1). */
static int set_batch(cublasLtMatrixLayout_t l, const vx_dense_group *G, size_t stride)
{
    if (G->K == 1) return 1;
    int32_t k = G->K;
    int64_t off = (int64_t)stride;
    return cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &k, sizeof k) ==
               0 &&
           cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &off,
                                            sizeof off) == 0;
}

/* The workspace a kind's GEMM may use: none for the input gradient (its product sums over the
 * layer's outputs, too short a sum for split-K: cuBLASLt's first pick did not split it at any of
 * the Q-network's shapes, H100), so that a layer's input gradient and weight gradient may run
 * side by side on two streams through one context (VX_DENSE_DX_ONLY). */
static size_t plan_ws(const dense_cuda *c, int kind) { return kind == K_DGRAD ? 0 : c->ws_n; }

/* Finds or makes the plan; a shape cuBLASLt cannot do gets a plan with ok = 0. NULL when the
 * table is full or the heuristic's call failed (the caller then takes the unfused path, or fails
 * for plain kinds). A, Bp and C
 * are the first member's operands, sa, sb and sc their strides. */
static plan *get_plan(dense_cuda *c, const vx_dense *d, const vx_dense_group *G, int B, int kind,
                      const void *A, size_t sa, const void *Bp, size_t sb, const void *C, size_t sc)
{
    uint32_t aa = align_in_group(A, sa, G->K), ab = align_in_group(Bp, sb, G->K),
             ac = align_in_group(C, sc, G->K);
    unsigned align = aa | ab << 8 | ac << 16;
    for (int i = 0; i < c->n; i++) {
        plan *p = &c->plans[i];
        if (p->key_w == d->w && p->in == d->in && p->out == d->out && p->B == B &&
            p->kind == kind && same_group(&p->G, G) && p->align == align)
            return p;
    }
    if (c->n == MAX_PLANS) return NULL;
    plan *p = &c->plans[c->n++];
    memset(p, 0, sizeof *p);
    p->key_w = d->w, p->in = d->in, p->out = d->out, p->B = B, p->kind = kind, p->align = align;
    p->G = *G;
    cublasOperation_t ta = kind == K_DGRAD ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = kind == K_WGRAD || kind == K_WGRAD_PLAIN ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = kind == K_FWD        ? CUBLASLT_EPILOGUE_BIAS
                             : kind == K_FWD_RELU ? CUBLASLT_EPILOGUE_RELU_BIAS
                             : kind == K_WGRAD    ? CUBLASLT_EPILOGUE_BGRADA
                                                  : CUBLASLT_EPILOGUE_DEFAULT;
    cublasComputeType_t ct = c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    int ok = cublasLtMatmulDescCreate(&p->op, ct, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    ok = ok &&
         cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == 0;
    ok = ok &&
         cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == 0;
    ok = ok && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                              sizeof epi) == 0;
    if (kind == K_FWD || kind == K_FWD_RELU || kind == K_FWD_PLAIN) {
        /* W: out × in (ld out); X: in × B; Y: out × B */
        ok = ok && cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, d->out, d->in, d->out) == 0;
        ok = ok && cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, d->in, B, d->in) == 0;
        ok = ok && cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, d->out, B, d->out) == 0;
    } else if (kind == K_DGRAD) {
        /* W: out × in (ld out), used transposed; dY: out × B; dX: in × B */
        ok = ok && cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, d->out, d->in, d->out) == 0;
        ok = ok && cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, d->out, B, d->out) == 0;
        ok = ok && cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, d->in, B, d->in) == 0;
    } else {
        /* dY: out × B; X stored in × B, used transposed; dW: out × in */
        ok = ok && cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, d->out, B, d->out) == 0;
        ok = ok && cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, d->in, B, d->in) == 0;
        ok = ok && cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, d->out, d->in, d->out) == 0;
    }
    ok = ok && set_batch(p->a, G, sa) && set_batch(p->b, G, sb) && set_batch(p->c, G, sc);
    if (ok && G->K > 1 && (kind == K_FWD || kind == K_FWD_RELU || kind == K_WGRAD)) {
        int64_t bias_stride = (int64_t)G->p; /* each member's bias (or its gradient) */
        ok = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                            &bias_stride, sizeof bias_stride) == 0;
    }
    cublasLtMatmulPreference_t pref = NULL;
    ok = ok && cublasLtMatmulPreferenceCreate(&pref) == 0;
    size_t ws_n = plan_ws(c, kind);
    ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws_n, sizeof ws_n) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac) == 0;
    answer q;
    memset(&q, 0, sizeof q);
    q.device = vx_device_index(c->dev), q.in = d->in, q.out = d->out, q.B = B, q.kind = kind;
    q.tf32 = c->tf32, q.align = align, q.ws_n = ws_n, q.G = *G;
    if (ok && !answer_get(c, p, pref, &q)) { /* no plan kept: the next call asks again */
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        plan_free(p);
        c->n--;
        return NULL;
    }
    ok = ok && q.found;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ok) p->algo = q.algo;
    else if (kind == K_FWD || kind == K_FWD_RELU || kind == K_WGRAD)
        vx_log(VX_LOG_INFO,
               "dense: no fused cuBLASLt kernel for a %d x %d layer at batch %d (%s); "
               "GEMM and a separate kernel instead",
               d->in, d->out, B, kind == K_WGRAD ? "bias gradient" : "bias epilogue");
    p->ok = ok;
    return p;
}

static vx_status run(dense_cuda *c, plan *p, const void *bias, const float *A, const float *Bm,
                     float *C, float beta, cudaStream_t s, vx_err *e)
{
    const float one = 1.0f;
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    if (bias)
        bs = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof bias);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasLtMatmul(c->lt, p->op, &one, A, p->a, Bm, p->b, &beta, C, p->c, C, p->c,
                            &p->algo, plan_ws(c, p->kind) ? c->ws : NULL, plan_ws(c, p->kind), s);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return vx_err_set(e, VX_ERR_CUDA, "dense: cublasLtMatmul failed: status %d", (int)bs);
    return VX_OK;
}

static vx_status plain_missing(const dense_cuda *c, const vx_dense *d, int B, vx_err *e)
{
    if (c->n == MAX_PLANS)
        return vx_err_set(e, VX_ERR_ARG, "dense: more than %d GEMM shapes through one context",
                          MAX_PLANS);
    return vx_err_set(e, VX_ERR_CUDA,
                      "dense: cuBLASLt gave no float32 GEMM for a %d x %d layer at batch %d (none "
                      "for the shape, or its heuristic failed)",
                      d->in, d->out, B);
}

/* member blockIdx.y of the group: its output y_stride floats on, its bias p_stride */
static __global__ void bias_relu_kernel(float *y, size_t y_stride, const float *bias,
                                        size_t p_stride, size_t rows, int cols, int relu)
{
    vx_pdl_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * (size_t)cols) return;
    y += blockIdx.y * y_stride, bias += blockIdx.y * p_stride;
    float v = y[i] + bias[i % (size_t)cols];
    y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
}

/* dx = 0 where x ≤ 0 (x the output of a ReLU: dx the gradient before it), n floats a member */
static __global__ void relu_in_kernel(float *dx, size_t sdx, const float *x, size_t sx, size_t n)
{
    vx_pdl_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[blockIdx.y * sx + i] <= 0.0f) dx[blockIdx.y * sdx + i] = 0.0f;
}

/* db[j] = Σ_r dy[r][j], rows in order: one thread per column, the same bits every run */
static __global__ void bias_grad_kernel(const float *dy, size_t y_stride, int B, int cols,
                                        float *db, size_t p_stride)
{
    vx_pdl_wait();
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    dy += blockIdx.y * y_stride, db += blockIdx.y * p_stride;
    float s = 0;
    for (int r = 0; r < B; r++) s += dy[(size_t)r * cols + j];
    db[j] = s;
}

/* The small layers' kernels, SMALL_THREADS threads a block. The forward pass and the input
 * gradient take a tile of rows of one member (blockIdx.y) and first copy what their threads read
 * more than once into shared memory (small_stage): the weights and the tile's inputs or output
 * gradients. The forward pass keeps a row of inputs at an odd stride (SMALL_XS), the input
 * gradient a weight column at an odd stride (SMALL_WS): threads reading down their own rows or
 * columns hit different banks. The weight gradient stages its output gradients in slabs of rows
 * and reads its inputs from global memory. A layer past SMALL_IN inputs goes to cuBLASLt
 * (dg_forward). Measured on the H100 (docs/benchmarks.md, 2026-12-06): the staging copy must keep
 * many loads in flight (one load at a time made a group's forward launch cost 21.6 µs), and of four
 * designs this one was fastest for a learner alone at batch 4,096 and close to the fastest at
 * 1,024. */
#define SMALL_IN 256
#define SMALL_THREADS 256
#define SMALL_XS(in) ((in) | 1)
#define SMALL_WS(out) ((out) | 1)
#define SMALL_TILE(in) ((in) <= 64 ? 64 : (in) <= 128 ? 32 : 16) /* rows: tile × in ≤ 4,096 */

/* dst[(k / n_row) * ld + k % n_row] = src[k] for k < n: eight loads a thread issued before any
 * of their stores, so that their latencies overlap. */
static __device__ void small_stage(float *dst, int ld, const float *src, int n, int n_row)
{
    for (int base = threadIdx.x; base < n; base += 8 * SMALL_THREADS) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int k = base + j * SMALL_THREADS;
            v[j] = k < n ? src[k] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int k = base + j * SMALL_THREADS;
            if (k < n) dst[(k / n_row) * ld + k % n_row] = v[j];
        }
    }
}

/* Forward: y = b + Σ_i W[o][i] x[i] in input order, then the ReLU when asked (bias_relu_kernel's
 * rule). Q = SMALL_THREADS / tile threads share a row: thread q takes outputs q, q + Q, … and
 * keeps their sums in registers (each input read once for up to SMALL_OUT / Q outputs); the
 * threads of a warp read the same weight at once (a broadcast). */
#define SMALL_FWD_ACC 4 /* SMALL_OUT / Q for the widest tile (64 rows, Q = 4) */
static __global__ void __launch_bounds__(SMALL_THREADS)
    small_forward_kernel(const float *P, size_t w, size_t b, size_t sp, const float *x, size_t sx,
                         float *y, size_t sy, int in, int out, int B, int relu)
{
    extern __shared__ float sm[];
    vx_pdl_wait();
    int R = SMALL_TILE(in), Q = SMALL_THREADS / R, ld = SMALL_XS(in);
    float *Ws = sm, *xs = sm + (size_t)in * out;
    P += blockIdx.y * sp, x += blockIdx.y * sx, y += blockIdx.y * sy;
    int r0 = blockIdx.x * R, rows = min(R, B - r0);
    small_stage(Ws, out, P + w, in * out, out);
    small_stage(xs, ld, x + (size_t)r0 * in, rows * in, in);
    __syncthreads();
    int r = threadIdx.x % R, q = threadIdx.x / R;
    if (r >= rows || q >= out) return;
    const float *xr = xs + r * ld;
    float acc[SMALL_FWD_ACC];
#pragma unroll
    for (int j = 0; j < SMALL_FWD_ACC; j++) acc[j] = 0;
    for (int i = 0; i < in; i++) {
        float xv = xr[i];
        const float *Wi = Ws + i * out + q;
#pragma unroll
        for (int j = 0; j < SMALL_FWD_ACC; j++)
            if (q + j * Q < out) acc[j] += Wi[j * Q] * xv;
    }
    y += (size_t)(r0 + r) * out;
#pragma unroll
    for (int j = 0; j < SMALL_FWD_ACC; j++) {
        int o = q + j * Q;
        if (o < out) {
            float v = acc[j] + P[b + o];
            y[o] = relu ? (v > 0.0f ? v : 0.0f) : v;
        }
    }
}

/* Input gradient: dx = Σ_o W[o][i] dy[o] in output order, added to dx (as cuBLASLt's beta of 1
 * adds it) when accumulating, and with xm (the layer's input, a ReLU's output) zeroed where
 * xm ≤ 0 (relu_in_kernel's rule, in the same pass: the Q-network's heads had run it as a kernel
 * of its own on the update's path); a thread per (row, input) of the tile, at most SMALL_DX of
 * them a thread (tile × in ≤ 4,096), whose old dx and xm are all loaded before the first sum. */
#define SMALL_DX (4096 / SMALL_THREADS)
static __device__ void small_dgrad_block(int tile, float *sm, const float *P, size_t w, size_t sp,
                                         const float *dy, size_t sdy, float *dx, size_t sdx,
                                         const float *xm, size_t sx, int in, int out, int B,
                                         int accumulate)
{
    int ws = SMALL_WS(out), R = SMALL_TILE(in);
    float *Ws = sm, *gs = sm + (size_t)in * ws;
    P += blockIdx.y * sp, dy += blockIdx.y * sdy, dx += blockIdx.y * sdx;
    int r0 = tile * R, rows = min(R, B - r0), n = rows * in;
    small_stage(Ws, ws, P + w, in * out, out);
    small_stage(gs, out, dy + (size_t)r0 * out, rows * out, out);
    dx += (size_t)r0 * in;
    if (xm) xm += blockIdx.y * sx + (size_t)r0 * in;
    float old[SMALL_DX];
    bool keep[SMALL_DX];
#pragma unroll
    for (int j = 0; j < SMALL_DX; j++) {
        int t = threadIdx.x + j * SMALL_THREADS;
        old[j] = accumulate && t < n ? dx[t] : 0.0f;
        keep[j] = !xm || (t < n && xm[t] > 0.0f);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < SMALL_DX; j++) {
        int t = threadIdx.x + j * SMALL_THREADS;
        if (t >= n) break;
        int r = t / in, i = t % in;
        const float *Wi = Ws + i * ws, *g = gs + r * out;
        float acc = 0;
        for (int o = 0; o < out; o++) acc += Wi[o] * g[o];
        acc = accumulate ? acc + old[j] : acc;
        dx[t] = keep[j] ? acc : 0.0f;
    }
}

/* Weight and bias gradients: block (chunk, member) takes SMALL_COLS of the columns 0..in (column
 * `in` the bias, its input 1) and every output, its threads SMALL_COLS columns × SMALL_LANES
 * lanes. Lane l sums rows l, l + SMALL_LANES, … in order, one sum an output, so that x is read
 * once (not once an output); the rows come in slabs of SMALL_THREADS whose dy is staged in
 * shared memory, a lane's eight inputs of a slab loaded before they are added. Then one thread a
 * (column, output) adds the lanes' sums in lane order: the same bits every run. */
#define SMALL_COLS 8
#define SMALL_LANES (SMALL_THREADS / SMALL_COLS)
#define SMALL_SLAB SMALL_THREADS
/* Rows up to which a small layer's weight and input gradients run as one launch: measured on an
 * H100 (docs/benchmarks.md, 2026-12-06), one launch took a DQN update at batch 1,024 from 149.2–
 * 149.8 to 141.4–142.0 µs (TF32), at batch 4,096 from 262.5–262.6 to 279.1–285.2: there each
 * weight-gradient block walks 4,096 rows beside the input gradient's 64 tiles and four heads' such
 * launches, where alone it had SMs to itself. */
#define SMALL_MERGE_ROWS 2048
/* its shared memory: part[SMALL_OUT][SMALL_LANES][SMALL_COLS], then a slab of dy */
#define SMALL_WGRAD_FLOATS (SMALL_OUT * SMALL_LANES * SMALL_COLS + SMALL_SLAB * SMALL_OUT)
static __device__ void small_wgrad_block(int chunk, float *sm, const float *x, size_t sx,
                                         const float *dy, size_t sdy, float *g, size_t w, size_t b,
                                         size_t sp, int in, int out, int B)
{
    float(*part)[SMALL_LANES][SMALL_COLS] = (float(*)[SMALL_LANES][SMALL_COLS])sm;
    float *gs = sm + SMALL_OUT * SMALL_LANES * SMALL_COLS;
    int col = threadIdx.x % SMALL_COLS, lane = threadIdx.x / SMALL_COLS;
    int c = chunk * SMALL_COLS + col;
    x += blockIdx.y * sx, dy += blockIdx.y * sdy, g += blockIdx.y * sp;
    float acc[SMALL_OUT];
#pragma unroll
    for (int o = 0; o < SMALL_OUT; o++) acc[o] = 0;
    for (int r0 = 0; r0 < B; r0 += SMALL_SLAB) {
        int rows = min(SMALL_SLAB, B - r0);
        __syncthreads(); /* the last slab's dy read by every lane */
        small_stage(gs, out, dy + (size_t)r0 * out, rows * out, out);
        float xv[SMALL_SLAB / SMALL_LANES];
#pragma unroll
        for (int j = 0; j < SMALL_SLAB / SMALL_LANES; j++) {
            int r = lane + j * SMALL_LANES;
            xv[j] = r < rows && c < in ? x[(size_t)(r0 + r) * in + c] : 1.0f;
        }
        __syncthreads();
        if (c > in) continue;
#pragma unroll
        for (int j = 0; j < SMALL_SLAB / SMALL_LANES; j++) {
            int r = lane + j * SMALL_LANES;
            if (r >= rows) break;
            const float *gr = gs + r * out;
#pragma unroll
            for (int o = 0; o < SMALL_OUT; o++)
                if (o < out) acc[o] += gr[o] * xv[j];
        }
    }
#pragma unroll
    for (int o = 0; o < SMALL_OUT; o++)
        if (o < out) part[o][lane][col] = acc[o];
    __syncthreads();
    for (int t = threadIdx.x; t < out * SMALL_COLS; t += SMALL_THREADS) {
        int o = t / SMALL_COLS, k = t % SMALL_COLS, cc = chunk * SMALL_COLS + k;
        if (cc > in) continue;
        float sum = part[o][0][k];
        for (int l = 1; l < SMALL_LANES; l++) sum += part[o][l][k];
        if (cc < in) g[w + o + (size_t)cc * out] = sum;
        else g[b + o] = sum;
    }
}

/* The backward pass of a small layer: blocks 0..tiles−1 the input gradient's row tiles (first:
 * the update's path goes on from them), the rest the weight gradient's column chunks. The two
 * read the same dy and write apart, so they need not wait for each other: as two launches on one
 * stream the input gradient had waited for the weight gradient. A weight-gradient block walks
 * every row, so past SMALL_MERGE_ROWS rows they are two launches again (small_backward). */
static __global__ void __launch_bounds__(SMALL_THREADS)
    small_backward_kernel(const float *P, size_t w, size_t b, size_t sp, const float *x, size_t sx,
                          const float *dy, size_t sdy, float *g, float *dx, size_t sdx, int relu_in,
                          int in, int out, int B, int tiles, int accumulate)
{
    extern __shared__ float sm[];
    vx_pdl_wait();
    if ((int)blockIdx.x < tiles)
        small_dgrad_block(blockIdx.x, sm, P, w, sp, dy, sdy, dx, sdx, relu_in ? x : NULL, sx, in,
                          out, B, accumulate);
    else small_wgrad_block(blockIdx.x - tiles, sm, x, sx, dy, sdy, g, w, b, sp, in, out, B);
}

static int small_layer(const vx_dense *d) { return d->out <= SMALL_OUT && d->in <= SMALL_IN; }

/* Rows past which a small layer's backward pass goes to cuBLASLt: each weight-gradient block
 * walks every row (in + 1 columns / SMALL_COLS blocks a member: 21 for 160 inputs), which PPO's
 * per-layer update at 8,192-row minibatches pays on its critical path (its iteration 60.5 ms
 * with the small kernels at every batch, 49.8 with this limit: docs/benchmarks.md). DQN's
 * backward passes, at its batch (≤ 4,096 in the benchmarks), stay on the small kernels. */
#define SMALL_BACKWARD_ROWS 4096

/* dW and db (not with VX_DENSE_DX_ONLY), and dx when dx is not NULL (flags: vx_dense_backward's) */
static vx_status small_backward(const vx_dense *d, const vx_dense_group *G, const float *P,
                                const float *x, int B, const float *dy, float *g, float *dx,
                                int flags, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    int R = SMALL_TILE(d->in);
    int chunks = (d->in + SMALL_COLS) / SMALL_COLS; /* columns 0..in */
    int tiles = dx ? (B + R - 1) / R : 0, relu_in = (flags & VX_DENSE_RELU_IN) != 0;
    int acc = flags & VX_DENSE_ACCUMULATE;
    size_t dgrad = (size_t)d->in * SMALL_WS(d->out) + (size_t)R * d->out;
    size_t shm = (dgrad > SMALL_WGRAD_FLOATS ? dgrad : SMALL_WGRAD_FLOATS) * sizeof(float);
    if (flags & VX_DENSE_DX_ONLY) { /* the input gradient's tiles alone */
        chunks = 0, shm = dgrad * sizeof(float);
        if (tiles == 0) return VX_OK; /* no rows */
    }
    dim3 grid((unsigned)(tiles + chunks), (unsigned)G->K);
    if (B > SMALL_MERGE_ROWS && tiles && chunks) { /* the weight gradient, then the input's */
        VX_CUDA_CHECK(vx_pdl_launch(small_backward_kernel, dim3((unsigned)chunks, (unsigned)G->K),
                                    dim3(SMALL_THREADS), SMALL_WGRAD_FLOATS * sizeof(float), s, P,
                                    d->w, d->b, G->p, x, G->x, dy, G->dy, g, dx, G->dx, relu_in,
                                    d->in, d->out, B, 0, acc));
        VX_CUDA_LAUNCH_CHECK(s);
        grid.x = (unsigned)tiles, shm = dgrad * sizeof(float);
    }
    VX_CUDA_CHECK(vx_pdl_launch(small_backward_kernel, grid, dim3(SMALL_THREADS), shm, s, P, d->w,
                                d->b, G->p, x, G->x, dy, G->dy, g, dx, G->dx, relu_in, d->in,
                                d->out, B, tiles, acc));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

static vx_status small_forward(const vx_dense *d, const vx_dense_group *G, const float *P,
                               const float *x, int B, float *y, int relu, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    int R = SMALL_TILE(d->in);
    size_t shm = ((size_t)d->in * d->out + (size_t)R * SMALL_XS(d->in)) * sizeof(float);
    VX_CUDA_CHECK(vx_pdl_launch(small_forward_kernel,
                                dim3((unsigned)((B + R - 1) / R), (unsigned)G->K),
                                dim3(SMALL_THREADS), shm, s, P, d->w, d->b, G->p, x, G->x, y, G->y,
                                d->in, d->out, B, relu));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

static vx_status dg_forward(void *impl, const vx_dense *d, const vx_dense_group *G, const float *P,
                            const float *x, int B, float *y, int relu, vx_stream vs, vx_err *e)
{
    dense_cuda *c = (dense_cuda *)impl;
    cudaStream_t s = (cudaStream_t)vs;
    vx_status st = VX_OK;
    size_t n = (size_t)B * d->out;
    if (n == 0) return VX_OK;
    if (small_layer(d)) return small_forward(d, G, P, x, B, y, relu, s, e);
    /* the bias is read in 16-byte vectors too: the layout (nn.h) aligns every tensor */
    plan *p =
        align_in_group(P + d->b, G->p, G->K) == 16
            ? get_plan(c, d, G, B, relu ? K_FWD_RELU : K_FWD, P + d->w, G->p, x, G->x, y, G->y)
            : NULL;
    if (p && p->ok) return run(c, p, P + d->b, P + d->w, x, y, 0.0f, s, e);
    p = get_plan(c, d, G, B, K_FWD_PLAIN, P + d->w, G->p, x, G->x, y, G->y);
    if (!p || !p->ok) return plain_missing(c, d, B, e);
    st = run(c, p, NULL, P + d->w, x, y, 0.0f, s, e);
    if (st) return st;
    VX_CUDA_CHECK(vx_pdl_launch(bias_relu_kernel, dim3((unsigned)((n + 255) / 256), (unsigned)G->K),
                                dim3(256), 0, s, y, G->y, P + d->b, G->p, (size_t)B, d->out, relu));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

/* dW and db: one GEMM with the bias gradient as its epilogue where cuBLASLt has it, else the
 * plain GEMM and bias_grad_kernel */
static vx_status weight_gradient(dense_cuda *c, const vx_dense *d, const vx_dense_group *G,
                                 const float *x, int B, const float *dy, float *g, cudaStream_t s,
                                 vx_err *e)
{
    vx_status st = VX_OK;
    plan *p = align_in_group(g + d->b, G->p, G->K) == 16
                  ? get_plan(c, d, G, B, K_WGRAD, dy, G->dy, x, G->x, g + d->w, G->p)
                  : NULL;
    if (p && p->ok) return run(c, p, g + d->b, dy, x, g + d->w, 0.0f, s, e);
    p = get_plan(c, d, G, B, K_WGRAD_PLAIN, dy, G->dy, x, G->x, g + d->w, G->p);
    if (!p || !p->ok) return plain_missing(c, d, B, e);
    st = run(c, p, NULL, dy, x, g + d->w, 0.0f, s, e);
    if (st) return st;
    VX_CUDA_CHECK(vx_pdl_launch(bias_grad_kernel,
                                dim3((unsigned)((d->out + 127) / 128), (unsigned)G->K), dim3(128),
                                0, s, dy, G->dy, B, d->out, g + d->b, G->p));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

static vx_status dg_backward(void *impl, const vx_dense *d, const vx_dense_group *G, const float *P,
                             const float *x, int B, const float *dy, float *g, float *dx, int flags,
                             vx_stream vs, vx_err *e)
{
    dense_cuda *c = (dense_cuda *)impl;
    cudaStream_t s = (cudaStream_t)vs;
    vx_status st = VX_OK;
    if (small_layer(d) && B <= SMALL_BACKWARD_ROWS)
        return small_backward(d, G, P, x, B, dy, g, dx, flags, s, e);
    if (!(flags & VX_DENSE_DX_ONLY)) {
        st = weight_gradient(c, d, G, x, B, dy, g, s, e);
        if (st || !dx) return st;
    }
    plan *p = get_plan(c, d, G, B, K_DGRAD, P + d->w, G->p, dy, G->dy, dx, G->dx);
    if (!p || !p->ok) return plain_missing(c, d, B, e);
    st = run(c, p, NULL, P + d->w, dy, dx, flags & VX_DENSE_ACCUMULATE ? 1.0f : 0.0f, s, e);
    if (st || !(flags & VX_DENSE_RELU_IN) || B == 0) return st;
    {
        size_t n = (size_t)B * d->in;
        VX_CUDA_CHECK(vx_pdl_launch(relu_in_kernel,
                                    dim3((unsigned)((n + 255) / 256), (unsigned)G->K), dim3(256), 0,
                                    s, dx, G->dx, x, G->x, n));
        VX_CUDA_LAUNCH_CHECK(s);
    }
fail:
    return st;
}

extern "C" const vx_dense_ops vx_dense_cuda_ops = {dg_create,   dg_free,    dg_set_tf32,
                                                   dg_reserved, dg_forward, dg_backward};

/* qnet_cuda.cu — the CUDA twin of the forward pass in qnet_impl.h.
 *
 * Per dense layer: one cuBLAS SGEMM (row-major Y = X·W computed as the column-major
 * Yᵀ = Wᵀ·Xᵀ, no transposes needed) and one bias(+ReLU) kernel; then one kernel for the dueling
 * aggregation Q_d[a, z] = V[z] + A_d[a, z] − mean_a' A_d[a', z]. Math mode CUBLAS_DEFAULT_MATH:
 * no TF32, so results match the CPU to float32 rounding of a different summation order.
 *
 * The value head and the branches are independent after the trunk: each runs on a stream of its
 * own (forked from and joined back to the caller's stream by events, so a captured graph holds
 * them as parallel branches), with its own cuBLAS handle and workspace. In the backward pass each
 * head writes its own dV and trunk-gradient parts, summed afterwards in a fixed order. */
#include "vixen/nn_cuda.h"
#include "../util/cuda_check.h"
#include "dense_lt.h"

#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

#define HEADS (VX_QNET_MAX_BRANCHES + 1)
#define HEAD_WS (8u << 20)

struct vx_qnet_cuda {
    vx_qnet_layout L;
    int max_batch;
    cublasHandle_t blas;
    float *params;
    float *trunk[VX_QNET_MAX_TRUNK], *v1, *v, *a1[VX_QNET_MAX_BRANCHES], *a[VX_QNET_MAX_BRANCHES];
    float *q;
    float *dv, *dh, *dh2;             /* backward: dV summed over branches; trunk gradients */
    float *dv_b[HEADS], *da_b[HEADS], *dhid_h[HEADS], *dh_h[HEADS]; /* per head */
    float *ones;                      /* max_batch ones: bias gradients as one GEMV each */
    float *mem;
    void *blas_ws; /* cuBLAS workspace, set once: a stream capture must not make it allocate */
    /* head h (0: value, 1 + d: branch d): its stream, cuBLAS handle and workspace */
    cudaStream_t hs[HEADS];
    cublasHandle_t hb[HEADS];
    void *hws[HEADS];
    cudaEvent_t fork, done[HEADS], dv_done[HEADS];
    vx_dense_lt *lt; /* fused GEMM epilogues (dense_lt.h) */
};

#define MAIN_WS (32u << 20)

#define BLAS_CHECK(call)                                                                           \
    do {                                                                                           \
        cublasStatus_t bs_ = (call);                                                               \
        if (bs_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            st = vx_err_set(e, VX_ERR_CUDA, "%s:%d: %s failed: cuBLAS status %d", __FILE__,        \
                            __LINE__, #call, (int)bs_);                                            \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static __global__ void bias_relu_kernel(float *y, const float *bias, size_t rows, int cols, int relu)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * (size_t)cols) return;
    float v = y[i] + bias[i % (size_t)cols];
    y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
}

static __global__ void fill_kernel(float *x, size_t n, float v)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

/* One thread per (row, atom) of a branch: the mean over actions, then Q. */
static __global__ void dueling_kernel(const float *v, const float *a, float *q, int B, int n,
                                      int Z, int out_dim, int offset)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)B * Z) return;
    size_t r = t / (size_t)Z;
    int z = (int)(t % (size_t)Z);
    const float *ar = a + r * (size_t)n * Z;
    float mean = 0;
    for (int k = 0; k < n; k++) mean += ar[k * Z + z]; /* the CPU's order: action 0, 1, … */
    mean /= (float)n;
    float vz = v[r * Z + z];
    float *qr = q + r * (size_t)out_dim + offset;
    for (int k = 0; k < n; k++) qr[k * Z + z] = vz + ar[k * Z + z] - mean;
}

extern "C" void vx_qnet_cuda_free(vx_qnet_cuda *q)
{
    if (!q) return;
    if (q->blas) cublasDestroy(q->blas);
    for (int h = 0; h < HEADS; h++) {
        if (q->hb[h]) cublasDestroy(q->hb[h]);
        if (q->hs[h]) cudaStreamDestroy(q->hs[h]);
        if (q->done[h]) cudaEventDestroy(q->done[h]);
        if (q->dv_done[h]) cudaEventDestroy(q->dv_done[h]);
        cudaFree(q->hws[h]);
    }
    if (q->fork) cudaEventDestroy(q->fork);
    vx_dense_lt_free(q->lt);
    cudaFree(q->params);
    cudaFree(q->mem);
    cudaFree(q->blas_ws);
    cudaFree(q->ones);
    free(q);
}

extern "C" vx_status vx_qnet_cuda_create(const vx_qnet_layout *L, int max_batch,
                                         vx_qnet_cuda **out, vx_err *e)
{
    vx_status st = VX_OK;
    *out = NULL;
    vx_qnet_cuda *q = (vx_qnet_cuda *)calloc(1, sizeof *q);
    if (!q) return vx_err_set(e, VX_ERR_NOMEM, "qnet: out of memory");
    q->L = *L;
    q->max_batch = max_batch;
    const vx_qnet_cfg *c = &L->cfg;
    size_t B = (size_t)max_batch, total = 0;
    for (int l = 0; l < c->n_trunk; l++) total += B * (size_t)c->trunk[l];
    total += B * ((size_t)c->head_hidden + (size_t)c->atoms);
    for (int d = 0; d < c->n_branches; d++)
        total += B * ((size_t)c->head_hidden + (size_t)c->branch[d] * (size_t)c->atoms);
    total += B * (size_t)L->out_dim;
    size_t Hmax = (size_t)c->in_dim, Amax = 0;
    for (int l = 0; l < c->n_trunk; l++) Hmax = (size_t)c->trunk[l] > Hmax ? (size_t)c->trunk[l] : Hmax;
    for (int d = 0; d < c->n_branches; d++) {
        size_t a = (size_t)c->branch[d] * (size_t)c->atoms;
        Amax = a > Amax ? a : Amax;
    }
    size_t Htop = c->n_trunk ? (size_t)c->trunk[c->n_trunk - 1] : (size_t)c->in_dim;
    int nh = c->n_branches + 1;
    total += B * ((size_t)c->atoms + 2 * Hmax);
    total += (size_t)nh * B * ((size_t)c->atoms + Amax + (size_t)c->head_hidden + Htop);
    float *p;
    BLAS_CHECK(cublasCreate(&q->blas));
    BLAS_CHECK(cublasSetMathMode(q->blas, CUBLAS_DEFAULT_MATH));
    VX_CUDA_CHECK(cudaMalloc(&q->blas_ws, MAIN_WS));
    BLAS_CHECK(cublasSetWorkspace(q->blas, q->blas_ws, MAIN_WS));
    st = vx_dense_lt_create(&q->lt, e);
    if (st) goto fail;
    for (int h = 0; h < nh; h++) {
        VX_CUDA_CHECK(cudaStreamCreateWithFlags(&q->hs[h], cudaStreamNonBlocking));
        VX_CUDA_CHECK(cudaEventCreateWithFlags(&q->done[h], cudaEventDisableTiming));
        VX_CUDA_CHECK(cudaEventCreateWithFlags(&q->dv_done[h], cudaEventDisableTiming));
        VX_CUDA_CHECK(cudaMalloc(&q->hws[h], HEAD_WS));
        BLAS_CHECK(cublasCreate(&q->hb[h]));
        BLAS_CHECK(cublasSetMathMode(q->hb[h], CUBLAS_DEFAULT_MATH));
        BLAS_CHECK(cublasSetWorkspace(q->hb[h], q->hws[h], HEAD_WS));
        BLAS_CHECK(cublasSetStream(q->hb[h], q->hs[h]));
    }
    VX_CUDA_CHECK(cudaEventCreateWithFlags(&q->fork, cudaEventDisableTiming));
    VX_CUDA_CHECK(cudaMalloc((void **)&q->params, L->n_params * sizeof(float)));
    VX_CUDA_CHECK(cudaMalloc((void **)&q->mem, total * sizeof(float)));
    VX_CUDA_CHECK(cudaMalloc((void **)&q->ones, B * sizeof(float)));
    fill_kernel<<<(unsigned)((B + 255) / 256), 256>>>(q->ones, B, 1.0f);
    VX_CUDA_LAUNCH_CHECK();
    VX_CUDA_CHECK(cudaDeviceSynchronize());
    p = q->mem;
    for (int l = 0; l < c->n_trunk; l++) q->trunk[l] = p, p += B * (size_t)c->trunk[l];
    q->v1 = p, p += B * (size_t)c->head_hidden;
    q->v = p, p += B * (size_t)c->atoms;
    for (int d = 0; d < c->n_branches; d++) {
        q->a1[d] = p, p += B * (size_t)c->head_hidden;
        q->a[d] = p, p += B * (size_t)c->branch[d] * (size_t)c->atoms;
    }
    q->q = p, p += B * (size_t)L->out_dim;
    q->dv = p, p += B * (size_t)c->atoms;
    q->dh = p, p += B * Hmax;
    q->dh2 = p, p += B * Hmax;
    for (int h = 0; h < nh; h++) {
        q->dv_b[h] = p, p += B * (size_t)c->atoms;
        q->da_b[h] = p, p += B * Amax;
        q->dhid_h[h] = p, p += B * (size_t)c->head_hidden;
        q->dh_h[h] = p, p += B * Htop;
    }
    *out = q;
    return VX_OK;
fail:
    vx_qnet_cuda_free(q);
    return st;
}

extern "C" vx_status vx_qnet_cuda_set_tf32(vx_qnet_cuda *q, int on, vx_err *e)
{
    vx_status st = VX_OK;
    cublasMath_t mode = on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    BLAS_CHECK(cublasSetMathMode(q->blas, mode));
    for (int h = 0; h < HEADS; h++)
        if (q->hb[h]) BLAS_CHECK(cublasSetMathMode(q->hb[h], mode));
    vx_dense_lt_set_tf32(q->lt, on);
fail:
    return st;
}

extern "C" float *vx_qnet_cuda_params(vx_qnet_cuda *q) { return q->params; }
extern "C" const float *vx_qnet_cuda_output(const vx_qnet_cuda *q) { return q->q; }

extern "C" vx_status vx_qnet_cuda_upload(vx_qnet_cuda *q, const float *host, cudaStream_t s,
                                         vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaMemcpyAsync(q->params, host, q->L.n_params * sizeof(float),
                                  cudaMemcpyHostToDevice, s));
fail:
    return st;
}

/* y = x W + b, then ReLU if relu; x: B × in, y: B × out (row-major) */
/* the cuBLAS handle and workspace of head h (−1: the caller's stream) */
static cublasHandle_t handle_of(vx_qnet_cuda *q, int h) { return h < 0 ? q->blas : q->hb[h]; }
static void *ws_of(vx_qnet_cuda *q, int h) { return h < 0 ? q->blas_ws : q->hws[h]; }
static size_t ws_size_of(int h) { return h < 0 ? MAIN_WS : HEAD_WS; }

/* y = x W + b, ReLU when relu: one fused cuBLASLt kernel, or a GEMM and a bias kernel where
 * cuBLASLt has no fused one */
static vx_status dense(vx_qnet_cuda *q, int head, const float *P, const vx_dense *d, const float *x,
                       int B, float *y, int relu, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    const float one = 1.0f, zero = 0.0f;
    size_t n = (size_t)B * d->out;
    int fused = 0;
    cublasHandle_t hnd = handle_of(q, head);
    st = vx_dense_lt_forward(q->lt, ws_of(q, head), ws_size_of(head), P, d, x, B, y, relu, s, &fused, e);
    if (st || fused) return st;
    BLAS_CHECK(cublasSgemm(hnd, CUBLAS_OP_N, CUBLAS_OP_N, d->out, B, d->in, &one, P + d->w,
                           d->out, x, d->in, &zero, y, d->out));
    bias_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(y, P + d->b, (size_t)B, d->out, relu);
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
}

extern "C" vx_status vx_qnet_cuda_forward(vx_qnet_cuda *q, const float *params, const float *x,
                                          int B, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    if (B < 1 || B > q->max_batch)
        return vx_err_set(e, VX_ERR_ARG, "qnet: batch %d outside 1..%d", B, q->max_batch);
    const float *P = params ? params : q->params;
    const vx_qnet_layout *L = &q->L;
    const vx_qnet_cfg *c = &L->cfg;
    const float *h = x;
    int Z = c->atoms;
    BLAS_CHECK(cublasSetStream(q->blas, s));
    for (int l = 0; l < c->n_trunk && !st; l++) {
        st = dense(q, -1, P, &L->trunk[l], h, B, q->trunk[l], 1, s, e);
        h = q->trunk[l];
    }
    if (st) goto fail;
    /* the heads, forked: value on stream 0; branch d on stream 1 + d, its dueling step behind V */
    VX_CUDA_CHECK(cudaEventRecord(q->fork, s));
    for (int k = 0; k <= c->n_branches; k++) VX_CUDA_CHECK(cudaStreamWaitEvent(q->hs[k], q->fork, 0));
    st = dense(q, 0, P, &L->value1, h, B, q->v1, 1, q->hs[0], e);
    if (!st) st = dense(q, 0, P, &L->value2, q->v1, B, q->v, 0, q->hs[0], e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(q->done[0], q->hs[0]));
    for (int d = 0; d < c->n_branches; d++) {
        cudaStream_t hs = q->hs[1 + d];
        size_t n = (size_t)B * Z;
        st = dense(q, 1 + d, P, &L->adv1[d], h, B, q->a1[d], 1, hs, e);
        if (!st) st = dense(q, 1 + d, P, &L->adv2[d], q->a1[d], B, q->a[d], 0, hs, e);
        if (st) goto fail;
        VX_CUDA_CHECK(cudaStreamWaitEvent(hs, q->done[0], 0));
        dueling_kernel<<<(unsigned)((n + 255) / 256), 256, 0, hs>>>(q->v, q->a[d], q->q, B,
                                                                   c->branch[d], Z, L->out_dim,
                                                                   L->out_offset[d]);
        VX_CUDA_LAUNCH_CHECK();
        VX_CUDA_CHECK(cudaEventRecord(q->done[1 + d], hs));
    }
    for (int k = 0; k <= c->n_branches; k++) VX_CUDA_CHECK(cudaStreamWaitEvent(s, q->done[k], 0));
fail:
    return st;
}

/* ---- backward -------------------------------------------------------------------------------- */

/* dueling backward for branch d, one thread per (row, atom): dA = dQ − mean_a dQ; this branch's
 * part of dV is Σ_a dQ (the parts are added in branch order afterwards, like the CPU's sum) */
static __global__ void dueling_bwd_kernel(const float *dq, float *dv, float *da, int B, int n,
                                          int Z, int out_dim, int offset)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)B * Z) return;
    size_t r = t / (size_t)Z;
    int z = (int)(t % (size_t)Z);
    const float *g = dq + r * (size_t)out_dim + offset;
    float sum = 0;
    for (int k = 0; k < n; k++) sum += g[k * Z + z];
    dv[r * Z + z] = sum;
    float *ga = da + r * (size_t)n * Z;
    for (int k = 0; k < n; k++) ga[k * Z + z] = g[k * Z + z] - sum / (float)n;
}

/* out = (parts[0] + parts[1] + … + parts[n−1]) · k, added in that order */
typedef struct {
    const float *p[HEADS];
} parts_t;

static __global__ void sum_parts_kernel(parts_t parts, int n, size_t len, float k, float *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    float s = parts.p[0][i];
    for (int j = 1; j < n; j++) s += parts.p[j][i];
    out[i] = k == 1.0f ? s : s * k;
}

static __global__ void relu_mask_kernel(float *dy, const float *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && y[i] <= 0.0f) dy[i] = 0.0f;
}

static unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }

/* dW = xᵀ dy, db = Σ_rows dy (a GEMV with a ones vector: cuBLAS's fixed reduction order, the same
 * bits every run; a one-thread-per-column loop over the rows took ~10 µs per layer at B = 1,024),
 * and dx (+)= dy Wᵀ when dx is not NULL */
static vx_status dense_bwd(vx_qnet_cuda *q, int head, const float *P, const vx_dense *d,
                           const float *x, int B, const float *dy, float *g, float *dx,
                           cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t hnd = handle_of(q, head);
    int fused = 0;
    st = vx_dense_lt_wgrad(q->lt, ws_of(q, head), ws_size_of(head), d, x, B, dy, g, s, &fused, e);
    if (st) goto fail;
    if (!fused) {
        BLAS_CHECK(cublasSgemm(hnd, CUBLAS_OP_N, CUBLAS_OP_T, d->out, d->in, B, &one, dy, d->out,
                               x, d->in, &zero, g + d->w, d->out));
        BLAS_CHECK(cublasSgemv(hnd, CUBLAS_OP_N, d->out, B, &one, dy, d->out, q->ones, 1, &zero,
                               g + d->b, 1));
    }
    if (dx)
        BLAS_CHECK(cublasSgemm(hnd, CUBLAS_OP_T, CUBLAS_OP_N, d->in, B, d->out, &one, P + d->w,
                               d->out, dy, d->out, &zero, dx, d->in));
fail:
    return st;
}

extern "C" vx_status vx_qnet_cuda_backward(vx_qnet_cuda *q, const float *params, const float *x,
                                           int B, const float *dq, float *g, cudaStream_t s,
                                           vx_err *e)
{
    vx_status st = VX_OK;
    const float *P = params ? params : q->params;
    const vx_qnet_layout *L = &q->L;
    const vx_qnet_cfg *c = &L->cfg;
    int Z = c->atoms, Hh = c->head_hidden;
    const float *top = c->n_trunk ? q->trunk[c->n_trunk - 1] : x;
    int H = c->n_trunk ? c->trunk[c->n_trunk - 1] : c->in_dim;
    float *dh = q->dh, *dh2 = q->dh2;
    int K = c->n_branches;
    BLAS_CHECK(cublasSetStream(q->blas, s));
    VX_CUDA_CHECK(cudaEventRecord(q->fork, s));
    /* branch d on stream 1 + d: its dV part first (the value head waits for those), then its
     * two layers, ending in its own part of the trunk gradient */
    for (int d = 0; d < K; d++) {
        cudaStream_t hs = q->hs[1 + d];
        size_t n = (size_t)B * Z;
        VX_CUDA_CHECK(cudaStreamWaitEvent(hs, q->fork, 0));
        dueling_bwd_kernel<<<blocks_for(n), 256, 0, hs>>>(dq, q->dv_b[d], q->da_b[d], B,
                                                         c->branch[d], Z, L->out_dim,
                                                         L->out_offset[d]);
        VX_CUDA_LAUNCH_CHECK();
        VX_CUDA_CHECK(cudaEventRecord(q->dv_done[d], hs));
        st = dense_bwd(q, 1 + d, P, &L->adv2[d], q->a1[d], B, q->da_b[d], g, q->dhid_h[1 + d], hs, e);
        if (st) goto fail;
        relu_mask_kernel<<<blocks_for((size_t)B * Hh), 256, 0, hs>>>(q->dhid_h[1 + d], q->a1[d],
                                                                    (size_t)B * Hh);
        VX_CUDA_LAUNCH_CHECK();
        st = dense_bwd(q, 1 + d, P, &L->adv1[d], top, B, q->dhid_h[1 + d], g, q->dh_h[1 + d], hs, e);
        if (st) goto fail;
        VX_CUDA_CHECK(cudaEventRecord(q->done[1 + d], hs));
    }
    /* the value head on stream 0: dV = Σ_d dV_d in branch order, then its two layers */
    {
        cudaStream_t hs = q->hs[0];
        parts_t pv;
        memset(&pv, 0, sizeof pv);
        VX_CUDA_CHECK(cudaStreamWaitEvent(hs, q->fork, 0));
        for (int d = 0; d < K; d++) {
            VX_CUDA_CHECK(cudaStreamWaitEvent(hs, q->dv_done[d], 0));
            pv.p[d] = q->dv_b[d];
        }
        if (K > 0) {
            sum_parts_kernel<<<blocks_for((size_t)B * Z), 256, 0, hs>>>(pv, K, (size_t)B * Z, 1.0f, q->dv);
            VX_CUDA_LAUNCH_CHECK();
        } else {
            VX_CUDA_CHECK(cudaMemsetAsync(q->dv, 0, (size_t)B * Z * 4, hs));
        }
        st = dense_bwd(q, 0, P, &L->value2, q->v1, B, q->dv, g, q->dhid_h[0], hs, e);
        if (st) goto fail;
        relu_mask_kernel<<<blocks_for((size_t)B * Hh), 256, 0, hs>>>(q->dhid_h[0], q->v1, (size_t)B * Hh);
        VX_CUDA_LAUNCH_CHECK();
        st = dense_bwd(q, 0, P, &L->value1, top, B, q->dhid_h[0], g, q->dh_h[0], hs, e);
        if (st) goto fail;
        VX_CUDA_CHECK(cudaEventRecord(q->done[0], hs));
    }
    /* join; the trunk gradient = (branch 0 + … + branch K−1 + value) / (K + 1), as on the CPU */
    {
        parts_t ph;
        memset(&ph, 0, sizeof ph);
        for (int k = 0; k <= K; k++) VX_CUDA_CHECK(cudaStreamWaitEvent(s, q->done[k], 0));
        for (int d = 0; d < K; d++) ph.p[d] = q->dh_h[1 + d];
        ph.p[K] = q->dh_h[0];
        sum_parts_kernel<<<blocks_for((size_t)B * H), 256, 0, s>>>(ph, K + 1, (size_t)B * H,
                                                                   1.0f / (float)(K + 1), dh);
        VX_CUDA_LAUNCH_CHECK();
    }
    for (int l = c->n_trunk - 1; l >= 0 && !st; l--) {
        size_t n = (size_t)B * c->trunk[l];
        relu_mask_kernel<<<blocks_for(n), 256, 0, s>>>(dh, q->trunk[l], n);
        VX_CUDA_LAUNCH_CHECK();
        const float *in = l ? q->trunk[l - 1] : x;
        st = dense_bwd(q, -1, P, &L->trunk[l], in, B, dh, g, l ? dh2 : NULL, s, e);
        float *t = dh;
        dh = dh2;
        dh2 = t;
    }
fail:
    return st;
}

/* ---- clipping and Adam ----------------------------------------------------------------------- */

/* Σ g² in double: NORM_BLOCKS block partial sums (fixed blocks, fixed order); the last block to
 * finish adds the partials in a fixed tree and writes the norm — one launch, the same bits every
 * run. (The "last block" is the one whose arrival count is NORM_BLOCKS − 1: every other block
 * has written its partial by then.) */
#define NORM_BLOCKS 256

static __global__ void sumsq_kernel(const float *g, size_t n, double *part, unsigned *arrived,
                                    double *norm)
{
    __shared__ double sh[256];
    __shared__ int last;
    double acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        acc += (double)g[i] * g[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[blockIdx.x] = sh[0];
        __threadfence();
        last = atomicAdd(arrived, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    sh[threadIdx.x] = threadIdx.x < gridDim.x ? ((volatile double *)part)[threadIdx.x] : 0.0;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *norm = sqrt(sh[0]);
        *arrived = 0; /* ready for the next launch */
    }
}

extern "C" vx_status vx_grad_clip_cuda(float *g, size_t n, double max_norm, vx_optim_dev *o,
                                       cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    sumsq_kernel<<<NORM_BLOCKS, 256, 0, s>>>(g, n, o->scratch, (unsigned *)(o->scratch + NORM_BLOCKS),
                                             o->norm);
    VX_CUDA_LAUNCH_CHECK();
    o->max_norm = max_norm;
fail:
    return st;
}

/* Adam, with the gradient clipping of vx_grad_clip_cuda applied on the way in (the clipped
 * gradient is written back, as the CPU's in-place clip leaves it). The step counter is advanced
 * by the last block to finish: every block has read it by then. */
static __global__ void adam_kernel(float *p, float *g, float *m, float *v, size_t n,
                                   long long *tp, unsigned *arrived, const double *norm,
                                   double max_norm, double lr_d, double b1d, double b2d,
                                   double epsd, double wdd)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    long long t = *tp + 1; /* this step's count */
    if (i < n) {
    double nn = norm ? *norm : 0;
    float gi = g[i];
    if (max_norm > 0 && nn > max_norm) {
        gi *= (float)(max_norm / nn);
        g[i] = gi;
    }
    /* the CPU's float arithmetic, operation for operation */
    const float c1 = (float)(1.0 / (1.0 - pow(b1d, (double)t)));
    const float c2 = (float)(1.0 / (1.0 - pow(b2d, (double)t)));
    const float lr = (float)lr_d, eps = (float)epsd, wd = (float)wdd, b1 = (float)b1d, b2 = (float)b2d;
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(1 - b1, gi));
    float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(1 - b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float upd = __fadd_rn(__fdiv_rn(__fmul_rn(mi, c1), __fadd_rn(__fsqrt_rn(__fmul_rn(vi, c2)), eps)),
                          __fmul_rn(wd, p[i]));
    p[i] = __fsub_rn(p[i], __fmul_rn(lr, upd));
    }
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(arrived, 1u) == gridDim.x - 1;
        if (last) {
            *tp = t;
            *arrived = 0;
        }
    }
}

extern "C" vx_status vx_adam_step_cuda(const vx_adam_cfg *cfg, float *p, float *g, float *m,
                                       float *v, size_t n, vx_optim_dev *o, cudaStream_t s,
                                       vx_err *e)
{
    vx_status st = VX_OK;
    adam_kernel<<<blocks_for(n), 256, 0, s>>>(p, g, m, v, n, o->t,
                                              (unsigned *)(o->scratch + NORM_BLOCKS + 1),
                                              o->max_norm > 0 ? o->norm : NULL, o->max_norm,
                                              cfg->lr, cfg->beta1, cfg->beta2, cfg->eps,
                                              cfg->weight_decay);
    VX_CUDA_LAUNCH_CHECK();
    o->max_norm = 0; /* a clip applies to the next Adam step only */
fail:
    return st;
}

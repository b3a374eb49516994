/* qnet_cuda.cu — the CUDA twin of the forward pass in qnet_impl.h.
 *
 * Per dense layer: one cuBLAS SGEMM (row-major Y = X·W computed as the column-major
 * Yᵀ = Wᵀ·Xᵀ, no transposes needed) and one bias(+ReLU) kernel; then one kernel for the dueling
 * aggregation Q_d[a, z] = V[z] + A_d[a, z] − mean_a' A_d[a', z]. Math mode CUBLAS_DEFAULT_MATH:
 * no TF32, so results match the CPU to float32 rounding of a different summation order. */
#include "vixen/nn_cuda.h"
#include "../util/cuda_check.h"

#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

struct vx_qnet_cuda {
    vx_qnet_layout L;
    int max_batch;
    cublasHandle_t blas;
    float *params;
    float *trunk[VX_QNET_MAX_TRUNK], *v1, *v, *a1[VX_QNET_MAX_BRANCHES], *a[VX_QNET_MAX_BRANCHES];
    float *q;
    float *mem;
};

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
    cudaFree(q->params);
    cudaFree(q->mem);
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
    float *p;
    BLAS_CHECK(cublasCreate(&q->blas));
    BLAS_CHECK(cublasSetMathMode(q->blas, CUBLAS_DEFAULT_MATH));
    VX_CUDA_CHECK(cudaMalloc((void **)&q->params, L->n_params * sizeof(float)));
    VX_CUDA_CHECK(cudaMalloc((void **)&q->mem, total * sizeof(float)));
    p = q->mem;
    for (int l = 0; l < c->n_trunk; l++) q->trunk[l] = p, p += B * (size_t)c->trunk[l];
    q->v1 = p, p += B * (size_t)c->head_hidden;
    q->v = p, p += B * (size_t)c->atoms;
    for (int d = 0; d < c->n_branches; d++) {
        q->a1[d] = p, p += B * (size_t)c->head_hidden;
        q->a[d] = p, p += B * (size_t)c->branch[d] * (size_t)c->atoms;
    }
    q->q = p;
    *out = q;
    return VX_OK;
fail:
    vx_qnet_cuda_free(q);
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
static vx_status dense(vx_qnet_cuda *q, const float *P, const vx_dense *d, const float *x, int B,
                       float *y, int relu, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    const float one = 1.0f, zero = 0.0f;
    size_t n = (size_t)B * d->out;
    BLAS_CHECK(cublasSgemm(q->blas, CUBLAS_OP_N, CUBLAS_OP_N, d->out, B, d->in, &one, P + d->w,
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
        st = dense(q, P, &L->trunk[l], h, B, q->trunk[l], 1, s, e);
        h = q->trunk[l];
    }
    if (!st) st = dense(q, P, &L->value1, h, B, q->v1, 1, s, e);
    if (!st) st = dense(q, P, &L->value2, q->v1, B, q->v, 0, s, e);
    for (int d = 0; d < c->n_branches && !st; d++) {
        st = dense(q, P, &L->adv1[d], h, B, q->a1[d], 1, s, e);
        if (!st) st = dense(q, P, &L->adv2[d], q->a1[d], B, q->a[d], 0, s, e);
        if (st) break;
        size_t n = (size_t)B * Z;
        dueling_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(q->v, q->a[d], q->q, B,
                                                                  c->branch[d], Z, L->out_dim,
                                                                  L->out_offset[d]);
        VX_CUDA_LAUNCH_CHECK();
    }
fail:
    return st;
}

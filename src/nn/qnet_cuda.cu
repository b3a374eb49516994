/* qnet_cuda.cu — the Q-network on a CUDA device (nn.h), the twin of qnet_impl.h: the same
 * topology over the dense layer (dense_cuda.cu), with the dueling aggregation and the backward
 * pass's glue in small kernels.
 *
 * The value head and the branches are independent after the trunk: each runs on a stream of its
 * own (forked from and joined back to the caller's stream by events, so a captured graph holds
 * them as parallel branches), with its own dense context (its own cuBLASLt workspace). In the
 * backward pass each head writes its own dV and trunk-gradient parts, summed afterwards in a
 * fixed order — the same bits every run, whichever head finishes first.
 *
 * Memory: the forward activations for max_batch rows; the backward pass's buffers only for
 * backward_batch rows, and none for a forward-only network (a target or acting network). */
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "nn_internal.h"

#include <stdlib.h>
#include <string.h>

#define HEADS (VX_QNET_MAX_BRANCHES + 1)
/* cuBLASLt workspace per dense context: the trunk's weight gradients may split their long
 * reduction over the batch (split-K), which needs room that grows with the batch; the heads' and
 * forward GEMMs need little. Measured (2026-12-01, H200, gpu_dqn_update, µs at batch 1024 / 4096,
 * two runs each): trunk 1 MB 222 / 429–438, 4 MB 213 / 417–422, 8 MB 212 / 438–440, 32 MB 208–210 /
 * 396–416 (TF32 at 4096: 331, 329, 331, 300); the heads' 1 MB → 8 MB changed nothing. So 8 KB per
 * row of the backward batch, between 4 and 32 MB. */
#define WS_TRAIN_MAIN_PER_ROW ((size_t)8 << 10)
#define WS_TRAIN_MAIN_MIN ((size_t)4 << 20)
#define WS_TRAIN_MAIN_MAX ((size_t)32 << 20)
#define WS_TRAIN_HEAD ((size_t)1 << 20)
#define WS_FORWARD ((size_t)1 << 20)
#define WS_FORWARD_HEAD ((size_t)256 << 10)

typedef struct {
    vx_device *dev;
    vx_qnet_layout L;
    int max_batch, bwd_batch, heads; /* heads: 1 + branches */
    vx_mem mem;
    float *trunk[VX_QNET_MAX_TRUNK], *v1, *v, *a1[VX_QNET_MAX_BRANCHES], *a[VX_QNET_MAX_BRANCHES];
    float *q;
    float *dv, *dh, *dh2;                                           /* backward, trunk level */
    float *dv_b[HEADS], *da_b[HEADS], *dhid_h[HEADS], *dh_h[HEADS]; /* backward, per head */
    vx_dense_ctx *main;      /* the trunk's GEMMs, on the caller's stream */
    vx_dense_ctx *hd[HEADS]; /* head h (0: value, 1 + d: branch d) */
    cudaStream_t hs[HEADS];
    cudaEvent_t fork, done[HEADS], dv_done[HEADS];
} qnet_cuda;

static void qc_free(void *impl)
{
    qnet_cuda *q = (qnet_cuda *)impl;
    if (!q) return;
    for (int h = 0; h < HEADS; h++) {
        vx_dense_ctx_free(q->hd[h]);
        vx_cuda_stream_destroy(q->dev, q->hs[h]);
        vx_cuda_event_destroy(q->dev, q->done[h], 0);
        vx_cuda_event_destroy(q->dev, q->dv_done[h], 0);
    }
    vx_cuda_event_destroy(q->dev, q->fork, 0);
    vx_dense_ctx_free(q->main);
    vx_mem_release(&q->mem);
    free(q);
}

static vx_status qc_create(const vx_qnet_layout *L, int max_batch, int bwd_batch, vx_device *dev,
                           void **impl, vx_err *e)
{
    vx_status st = vx_cuda_enter(dev, e);
    if (st) return st;
    qnet_cuda *q = (qnet_cuda *)calloc(1, sizeof *q);
    if (!q) return vx_err_set(e, VX_ERR_NOMEM, "qnet: out of memory");
    q->dev = dev;
    q->L = *L;
    q->max_batch = max_batch;
    q->bwd_batch = bwd_batch;
    vx_mem_init(&q->mem, dev, "network activations");
    const vx_qnet_cfg *c = &L->cfg;
    q->heads = c->n_branches + 1;
    size_t B = (size_t)max_batch, Bb = (size_t)bwd_batch, fwd = 0, bwd = 0, Hmax, Amax;
    vx_qnet_widths(L, &Hmax, &Amax);
    size_t Htop = c->n_trunk ? (size_t)c->trunk[c->n_trunk - 1] : (size_t)c->in_dim;
    for (int l = 0; l < c->n_trunk; l++) fwd += (size_t)c->trunk[l];
    fwd += (size_t)c->head_hidden + (size_t)c->atoms;
    for (int d = 0; d < c->n_branches; d++)
        fwd += (size_t)c->head_hidden + (size_t)c->branch[d] * (size_t)c->atoms;
    fwd += (size_t)L->out_dim;
    if (Bb)
        bwd = (size_t)c->atoms + 2 * Hmax +
              (size_t)q->heads * ((size_t)c->atoms + Amax + (size_t)c->head_hidden + Htop);
    float *p = NULL;
    int train = bwd_batch > 0;
    st = vx_mem_alloc(&q->mem, (B * fwd + Bb * bwd) * sizeof(float), &p, e);
    size_t ws_main = Bb * WS_TRAIN_MAIN_PER_ROW;
    if (ws_main < WS_TRAIN_MAIN_MIN) ws_main = WS_TRAIN_MAIN_MIN;
    if (ws_main > WS_TRAIN_MAIN_MAX) ws_main = WS_TRAIN_MAIN_MAX;
    if (!st) st = vx_dense_ctx_create(dev, train ? ws_main : WS_FORWARD, &q->main, e);
    for (int h = 0; h < q->heads && !st; h++) {
        st = vx_dense_ctx_create(dev, train ? WS_TRAIN_HEAD : WS_FORWARD_HEAD, &q->hd[h], e);
        if (!st) st = vx_cuda_stream_create(dev, &q->hs[h], e);
        if (!st) st = vx_cuda_event_create(dev, &q->done[h], 0, e);
        if (!st) st = vx_cuda_event_create(dev, &q->dv_done[h], 0, e);
    }
    if (!st) st = vx_cuda_event_create(dev, &q->fork, 0, e);
    if (st) goto fail;
    for (int l = 0; l < c->n_trunk; l++) q->trunk[l] = p, p += B * (size_t)c->trunk[l];
    q->v1 = p, p += B * (size_t)c->head_hidden;
    q->v = p, p += B * (size_t)c->atoms;
    for (int d = 0; d < c->n_branches; d++) {
        q->a1[d] = p, p += B * (size_t)c->head_hidden;
        q->a[d] = p, p += B * (size_t)c->branch[d] * (size_t)c->atoms;
    }
    q->q = p, p += B * (size_t)L->out_dim;
    if (train) {
        q->dv = p, p += Bb * (size_t)c->atoms;
        q->dh = p, p += Bb * Hmax;
        q->dh2 = p, p += Bb * Hmax;
        for (int h = 0; h < q->heads; h++) {
            q->dv_b[h] = p, p += Bb * (size_t)c->atoms;
            q->da_b[h] = p, p += Bb * Amax;
            q->dhid_h[h] = p, p += Bb * (size_t)c->head_hidden;
            q->dh_h[h] = p, p += Bb * Htop;
        }
    }
    *impl = q;
    return VX_OK;
fail:
    qc_free(q);
    return st;
}

static vx_status qc_set_tf32(void *impl, int on, vx_err *e)
{
    (void)e;
    qnet_cuda *q = (qnet_cuda *)impl;
    vx_dense_set_tf32(q->main, on);
    for (int h = 0; h < q->heads; h++) vx_dense_set_tf32(q->hd[h], on);
    return VX_OK;
}

static const float *qc_output(const void *impl) { return ((const qnet_cuda *)impl)->q; }

static size_t qc_reserved(const void *impl)
{
    const qnet_cuda *q = (const qnet_cuda *)impl;
    size_t n = q->mem.bytes + vx_dense_reserved(q->main);
    for (int h = 0; h < q->heads; h++) n += vx_dense_reserved(q->hd[h]);
    return n;
}

static unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }

/* One thread per (row, atom) of a branch: the mean over actions, then Q. */
static __global__ void dueling_kernel(const float *v, const float *a, float *q, int B, int n, int Z,
                                      int out_dim, int offset)
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

static vx_status qc_forward(void *impl, const float *P, const float *x, int B, vx_stream vs,
                            vx_err *e)
{
    qnet_cuda *q = (qnet_cuda *)impl;
    cudaStream_t s = (cudaStream_t)vs;
    vx_status st = vx_cuda_enter(q->dev, e);
    if (st) return st;
    const vx_qnet_layout *L = &q->L;
    const vx_qnet_cfg *c = &L->cfg;
    const float *h = x;
    int Z = c->atoms;
    for (int l = 0; l < c->n_trunk && !st; l++) {
        st = vx_dense_forward(q->main, &L->trunk[l], P, h, B, q->trunk[l], 1, s, e);
        h = q->trunk[l];
    }
    if (st) return st;
    /* the heads, forked: value on stream 0; branch d on stream 1 + d, its dueling step behind V */
    VX_CUDA_CHECK(cudaEventRecord(q->fork, s));
    for (int k = 0; k < q->heads; k++) VX_CUDA_CHECK(cudaStreamWaitEvent(q->hs[k], q->fork, 0));
    st = vx_dense_forward(q->hd[0], &L->value1, P, h, B, q->v1, 1, q->hs[0], e);
    if (!st) st = vx_dense_forward(q->hd[0], &L->value2, P, q->v1, B, q->v, 0, q->hs[0], e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(q->done[0], q->hs[0]));
    for (int d = 0; d < c->n_branches; d++) {
        cudaStream_t hs = q->hs[1 + d];
        size_t n = (size_t)B * Z;
        st = vx_dense_forward(q->hd[1 + d], &L->adv1[d], P, h, B, q->a1[d], 1, hs, e);
        if (!st)
            st = vx_dense_forward(q->hd[1 + d], &L->adv2[d], P, q->a1[d], B, q->a[d], 0, hs, e);
        if (st) goto fail;
        VX_CUDA_CHECK(cudaStreamWaitEvent(hs, q->done[0], 0));
        dueling_kernel<<<blocks_for(n), 256, 0, hs>>>(q->v, q->a[d], q->q, B, c->branch[d], Z,
                                                      L->out_dim, L->out_offset[d]);
        VX_CUDA_LAUNCH_CHECK(hs);
        VX_CUDA_CHECK(cudaEventRecord(q->done[1 + d], hs));
    }
    for (int k = 0; k < q->heads; k++) VX_CUDA_CHECK(cudaStreamWaitEvent(s, q->done[k], 0));
fail:
    return st;
}

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

static vx_status qc_backward(void *impl, const float *P, const float *x, int B, const float *dq,
                             float *g, vx_stream vs, vx_err *e)
{
    qnet_cuda *q = (qnet_cuda *)impl;
    cudaStream_t s = (cudaStream_t)vs;
    vx_status st = vx_cuda_enter(q->dev, e);
    if (st) return st;
    const vx_qnet_layout *L = &q->L;
    const vx_qnet_cfg *c = &L->cfg;
    int Z = c->atoms, Hh = c->head_hidden, K = c->n_branches;
    const float *top = c->n_trunk ? q->trunk[c->n_trunk - 1] : x;
    int H = c->n_trunk ? c->trunk[c->n_trunk - 1] : c->in_dim;
    float *dh = q->dh, *dh2 = q->dh2;
    VX_CUDA_CHECK(cudaEventRecord(q->fork, s));
    /* branch d on stream 1 + d: its dV part first (the value head waits for those), then its two
     * layers, ending in its own part of the trunk gradient */
    for (int d = 0; d < K; d++) {
        cudaStream_t hs = q->hs[1 + d];
        size_t n = (size_t)B * Z;
        VX_CUDA_CHECK(cudaStreamWaitEvent(hs, q->fork, 0));
        dueling_bwd_kernel<<<blocks_for(n), 256, 0, hs>>>(
            dq, q->dv_b[d], q->da_b[d], B, c->branch[d], Z, L->out_dim, L->out_offset[d]);
        VX_CUDA_LAUNCH_CHECK(hs);
        VX_CUDA_CHECK(cudaEventRecord(q->dv_done[d], hs));
        st = vx_dense_backward(q->hd[1 + d], &L->adv2[d], P, q->a1[d], B, q->da_b[d], g,
                               q->dhid_h[1 + d], 0, hs, e);
        if (st) goto fail;
        relu_mask_kernel<<<blocks_for((size_t)B * Hh), 256, 0, hs>>>(q->dhid_h[1 + d], q->a1[d],
                                                                     (size_t)B * Hh);
        VX_CUDA_LAUNCH_CHECK(hs);
        st = vx_dense_backward(q->hd[1 + d], &L->adv1[d], P, top, B, q->dhid_h[1 + d], g,
                               q->dh_h[1 + d], 0, hs, e);
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
        sum_parts_kernel<<<blocks_for((size_t)B * Z), 256, 0, hs>>>(pv, K, (size_t)B * Z, 1.0f,
                                                                    q->dv);
        VX_CUDA_LAUNCH_CHECK(hs);
        st = vx_dense_backward(q->hd[0], &L->value2, P, q->v1, B, q->dv, g, q->dhid_h[0], 0, hs, e);
        if (st) goto fail;
        relu_mask_kernel<<<blocks_for((size_t)B * Hh), 256, 0, hs>>>(q->dhid_h[0], q->v1,
                                                                     (size_t)B * Hh);
        VX_CUDA_LAUNCH_CHECK(hs);
        st = vx_dense_backward(q->hd[0], &L->value1, P, top, B, q->dhid_h[0], g, q->dh_h[0], 0, hs,
                               e);
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
        VX_CUDA_LAUNCH_CHECK(s);
    }
    for (int l = c->n_trunk - 1; l >= 0 && !st; l--) {
        size_t n = (size_t)B * c->trunk[l];
        relu_mask_kernel<<<blocks_for(n), 256, 0, s>>>(dh, q->trunk[l], n);
        VX_CUDA_LAUNCH_CHECK(s);
        const float *in = l ? q->trunk[l - 1] : x;
        st = vx_dense_backward(q->main, &L->trunk[l], P, in, B, dh, g, l ? dh2 : NULL, 0, s, e);
        float *t = dh;
        dh = dh2;
        dh2 = t;
    }
fail:
    return st;
}

extern "C" const vx_qnet_ops vx_qnet_cuda_ops = {qc_create, qc_free,     qc_set_tf32, qc_forward,
                                                 qc_output, qc_backward, qc_reserved};

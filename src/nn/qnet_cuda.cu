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
 * A hidden layer's backward pass is two calls (VX_DENSE_DX_ONLY): its input gradient on the
 * head's (or the trunk's) stream, where the pass goes on to the layer below, and its weight
 * gradient on a side stream of its own, which only the optimizer waits for (joined back at the
 * end of the pass). On one stream the input gradient had waited for the weight gradient, the
 * longer of the two (its sum runs over the batch). An input gradient uses no cuBLASLt workspace,
 * so a head's side may share the head's context (after the fork its stream runs input gradients
 * alone); the trunk's may not — the bottom layer's weight gradient, on the trunk's stream, runs
 * beside the layer above's on the side — so the trunk's side has a context (a workspace) of its
 * own.
 *
 * Memory: the forward activations for max_batch rows; the backward pass's buffers only for
 * backward_batch rows, and none for a forward-only network (a target or acting network).
 *
 * A group of K members (vx_qnet_create_group) holds K copies of every buffer, member k's at k
 * times the buffer's member stride (its rows × width, rounded up to 4 floats); every dense call
 * is then a group call over the members and every small kernel takes the member from
 * blockIdx.y. A group of one is the network alone, call for call. */
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "../util/pdl.cuh"
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
    int K, max_batch, bwd_batch, heads; /* heads: 1 + branches */
    vx_qnet_strides S;                  /* the members' parameters, inputs and outputs */
    /* the member strides of the buffers below: forward (max_batch rows), backward (bwd_batch) */
    size_t s_trunk[VX_QNET_MAX_TRUNK], s_v1, s_v, s_a[VX_QNET_MAX_BRANCHES];
    size_t s_dv, s_dh, s_da, s_dhid, s_dhh;
    vx_mem mem;
    float *trunk[VX_QNET_MAX_TRUNK], *v1, *v, *a1[VX_QNET_MAX_BRANCHES], *a[VX_QNET_MAX_BRANCHES];
    float *q;
    float *dv, *dh, *dh2;                                           /* backward, trunk level */
    float *dv_b[HEADS], *da_b[HEADS], *dhid_h[HEADS], *dh_h[HEADS]; /* backward, per head */
    vx_dense_ctx *main;      /* the trunk's GEMMs, on the caller's stream */
    vx_dense_ctx *main_side; /* the trunk's weight gradients on its side stream (training only) */
    vx_dense_ctx *hd[HEADS]; /* head h (0: value, 1 + d: branch d) */
    cudaStream_t hs[HEADS];
    cudaEvent_t fork, done[HEADS], dv_done[HEADS];
    /* a training network's side streams for weight gradients: one a head, then the trunk's */
    cudaStream_t side[HEADS + 1];
    cudaEvent_t side_fork[HEADS + 1], side_done[HEADS + 1];
} qnet_cuda;

#define TRUNK_SIDE HEADS

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
    for (int k = 0; k <= HEADS; k++) {
        vx_cuda_stream_destroy(q->dev, q->side[k]);
        vx_cuda_event_destroy(q->dev, q->side_fork[k], 0);
        vx_cuda_event_destroy(q->dev, q->side_done[k], 0);
    }
    vx_cuda_event_destroy(q->dev, q->fork, 0);
    vx_dense_ctx_free(q->main);
    vx_dense_ctx_free(q->main_side);
    vx_mem_release(&q->mem);
    free(q);
}

/* A member's share of a buffer of n floats: n alone, rounded up to 4 floats in a group. */
static size_t member(const qnet_cuda *q, size_t n) { return q->K == 1 ? n : vx_dense_align(n); }

static vx_status qc_create(const vx_qnet_layout *L, int K, int max_batch, int bwd_batch,
                           vx_device *dev, void **impl, vx_err *e)
{
    vx_status st = vx_cuda_enter(dev, e);
    if (st) return st;
    qnet_cuda *q = (qnet_cuda *)calloc(1, sizeof *q);
    if (!q) return vx_err_set(e, VX_ERR_NOMEM, "qnet: out of memory");
    q->dev = dev;
    q->L = *L;
    q->K = K;
    q->max_batch = max_batch;
    q->bwd_batch = bwd_batch;
    q->S = vx_qnet_member_strides(L, max_batch);
    vx_mem_init(&q->mem, dev, "network activations");
    const vx_qnet_cfg *c = &L->cfg;
    q->heads = c->n_branches + 1;
    size_t B = (size_t)max_batch, Bb = (size_t)bwd_batch, fwd = 0, bwd = 0, Hmax, Amax;
    vx_qnet_widths(L, &Hmax, &Amax);
    size_t Htop = c->n_trunk ? (size_t)c->trunk[c->n_trunk - 1] : (size_t)c->in_dim;
    for (int l = 0; l < c->n_trunk; l++) fwd += q->s_trunk[l] = member(q, B * c->trunk[l]);
    fwd += (q->s_v1 = member(q, B * c->head_hidden)) + (q->s_v = member(q, B * c->atoms));
    for (int d = 0; d < c->n_branches; d++)
        fwd += q->s_v1 + (q->s_a[d] = member(q, B * c->branch[d] * c->atoms));
    fwd += q->S.q;
    if (Bb) {
        q->s_dv = member(q, Bb * c->atoms), q->s_dh = member(q, Bb * Hmax);
        q->s_da = member(q, Bb * Amax), q->s_dhid = member(q, Bb * c->head_hidden);
        q->s_dhh = member(q, Bb * Htop);
        bwd = q->s_dv + 2 * q->s_dh + (size_t)q->heads * (q->s_dv + q->s_da + q->s_dhid + q->s_dhh);
    }
    if (K == 1) fwd += B * (size_t)L->out_dim - q->S.q; /* alone: the output's rows, no more */
    float *p = NULL;
    int train = bwd_batch > 0;
    st = vx_mem_alloc(&q->mem, (size_t)K * (fwd + bwd) * sizeof(float), &p, e);
    size_t ws_main = Bb * WS_TRAIN_MAIN_PER_ROW;
    if (ws_main < WS_TRAIN_MAIN_MIN) ws_main = WS_TRAIN_MAIN_MIN;
    if (ws_main > WS_TRAIN_MAIN_MAX) ws_main = WS_TRAIN_MAIN_MAX;
    if (!st) st = vx_dense_ctx_create(dev, train ? ws_main : WS_FORWARD, &q->main, e);
    if (!st && train && c->n_trunk >= 2) /* a trunk layer with an input gradient */
        st = vx_dense_ctx_create(dev, ws_main, &q->main_side, e);
    for (int h = 0; h < q->heads && !st; h++) {
        st = vx_dense_ctx_create(dev, train ? WS_TRAIN_HEAD : WS_FORWARD_HEAD, &q->hd[h], e);
        if (!st) st = vx_cuda_stream_create(dev, &q->hs[h], e);
        if (!st) st = vx_cuda_event_create(dev, &q->done[h], 0, e);
        if (!st) st = vx_cuda_event_create(dev, &q->dv_done[h], 0, e);
    }
    if (!st) st = vx_cuda_event_create(dev, &q->fork, 0, e);
    for (int k = 0; k <= HEADS && train && !st; k++) { /* the heads' sides, the trunk's if used */
        if (k == TRUNK_SIDE ? c->n_trunk < 2 : k >= q->heads) continue;
        st = vx_cuda_stream_create(dev, &q->side[k], e);
        if (!st) st = vx_cuda_event_create(dev, &q->side_fork[k], 0, e);
        if (!st) st = vx_cuda_event_create(dev, &q->side_done[k], 0, e);
    }
    if (st) goto fail;
    {
        size_t k = (size_t)K; /* each buffer holds its K members one after another */
        for (int l = 0; l < c->n_trunk; l++) q->trunk[l] = p, p += k * q->s_trunk[l];
        q->v1 = p, p += k * q->s_v1;
        q->v = p, p += k * q->s_v;
        for (int d = 0; d < c->n_branches; d++) {
            q->a1[d] = p, p += k * q->s_v1;
            q->a[d] = p, p += k * q->s_a[d];
        }
        q->q = p, p += K == 1 ? B * (size_t)L->out_dim : k * q->S.q;
        if (train) {
            q->dv = p, p += k * q->s_dv;
            q->dh = p, p += k * q->s_dh;
            q->dh2 = p, p += k * q->s_dh;
            for (int h = 0; h < q->heads; h++) {
                q->dv_b[h] = p, p += k * q->s_dv;
                q->da_b[h] = p, p += k * q->s_da;
                q->dhid_h[h] = p, p += k * q->s_dhid;
                q->dh_h[h] = p, p += k * q->s_dhh;
            }
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
    if (q->main_side) vx_dense_set_tf32(q->main_side, on);
    for (int h = 0; h < q->heads; h++) vx_dense_set_tf32(q->hd[h], on);
    return VX_OK;
}

static const float *qc_output(const void *impl) { return ((const qnet_cuda *)impl)->q; }

static size_t qc_reserved(const void *impl)
{
    const qnet_cuda *q = (const qnet_cuda *)impl;
    size_t n = q->mem.bytes + vx_dense_reserved(q->main);
    if (q->main_side) n += vx_dense_reserved(q->main_side);
    for (int h = 0; h < q->heads; h++) n += vx_dense_reserved(q->hd[h]);
    return n;
}

static unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }

/* A grid over n elements of each of the K members (blockIdx.y: the member). */
static dim3 grid_for(const qnet_cuda *q, size_t n) { return dim3(blocks_for(n), (unsigned)q->K); }

/* The dense calls for every member: the plain call for a network alone, else one group call. sx,
 * sy, sdx, sdy: the members' strides of x, y, dx, dy. */
static vx_status fwd(const qnet_cuda *q, vx_dense_ctx *c, const vx_dense *d, const float *P,
                     const float *x, size_t sx, int B, float *y, size_t sy, int relu,
                     cudaStream_t s, vx_err *e)
{
    if (q->K == 1) return vx_dense_forward(c, d, P, x, B, y, relu, s, e);
    vx_dense_group G = {q->K, q->S.params, sx, sy, 0, 0};
    return vx_dense_forward_group(c, d, &G, P, x, B, y, relu, s, e);
}

/* flags: VX_DENSE_RELU_IN where x is a ReLU's output (dx then the gradient before it) */
static vx_status bwd(const qnet_cuda *q, vx_dense_ctx *c, const vx_dense *d, const float *P,
                     const float *x, size_t sx, int B, const float *dy, size_t sdy, float *g,
                     float *dx, size_t sdx, int flags, cudaStream_t s, vx_err *e)
{
    if (q->K == 1) return vx_dense_backward(c, d, P, x, B, dy, g, dx, flags, s, e);
    vx_dense_group G = {q->K, q->S.params, sx, sdy, dx ? sdx : sx, sdy};
    return vx_dense_backward_group(c, d, &G, P, x, B, dy, g, dx, flags, s, e);
}

/* A layer's backward pass with its input gradient, in two halves (the top comment): dW and db on
 * side stream k through context side_c once dy is ready on s, dx on s through c. The side is
 * marked used, for join_sides. */
static vx_status bwd_split(qnet_cuda *q, int k, unsigned *used, vx_dense_ctx *side_c,
                           vx_dense_ctx *c, const vx_dense *d, const float *P, const float *x,
                           size_t sx, int B, const float *dy, size_t sdy, float *g, float *dx,
                           size_t sdx, int flags, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaEventRecord(q->side_fork[k], s));
    VX_CUDA_CHECK(cudaStreamWaitEvent(q->side[k], q->side_fork[k], 0));
    *used |= 1u << k;
    st = bwd(q, side_c, d, P, x, sx, B, dy, sdy, g, NULL, 0, 0, q->side[k], e);
    if (!st) st = bwd(q, c, d, P, x, sx, B, dy, sdy, g, dx, sdx, flags | VX_DENSE_DX_ONLY, s, e);
fail:
    return st;
}

/* s waits for the weight gradients on the used side streams. */
static vx_status join_sides(qnet_cuda *q, unsigned used, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    for (int k = 0; k <= HEADS; k++) {
        if (!(used & 1u << k)) continue;
        VX_CUDA_CHECK(cudaEventRecord(q->side_done[k], q->side[k]));
        VX_CUDA_CHECK(cudaStreamWaitEvent(s, q->side_done[k], 0));
    }
fail:
    return st;
}

/* One thread per (row, action, atom) of a branch: the mean over the row's actions (each thread
 * takes it, in the CPU's order: action 0, 1, …), then its Q. A thread per (row, atom) writing all
 * of the row's actions had too few threads for a batch of 256 rows (a group's 22 µs, H100). */
static __global__ void dueling_kernel(const float *v, size_t sv, const float *a, size_t sa,
                                      float *q, size_t sq, int B, int n, int Z, int out_dim,
                                      int offset)
{
    vx_pdl_wait();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nz = (size_t)n * Z;
    if (t >= (size_t)B * nz) return;
    v += blockIdx.y * sv, a += blockIdx.y * sa, q += blockIdx.y * sq;
    size_t r = t / nz;
    int k = (int)(t % nz) / Z, z = (int)(t % nz) % Z;
    const float *ar = a + r * nz;
    float mean = 0;
    for (int j = 0; j < n; j++) mean += ar[j * Z + z];
    mean /= (float)n;
    q[r * (size_t)out_dim + offset + k * Z + z] = v[r * Z + z] + ar[k * Z + z] - mean;
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
    size_t sh = q->S.x;
    int Z = c->atoms;
    for (int l = 0; l < c->n_trunk && !st; l++) {
        st = fwd(q, q->main, &L->trunk[l], P, h, sh, B, q->trunk[l], q->s_trunk[l], 1, s, e);
        h = q->trunk[l], sh = q->s_trunk[l];
    }
    if (st) return st;
    /* the heads, forked: value on stream 0; branch d on stream 1 + d, its dueling step behind V */
    VX_CUDA_CHECK(cudaEventRecord(q->fork, s));
    for (int k = 0; k < q->heads; k++) VX_CUDA_CHECK(cudaStreamWaitEvent(q->hs[k], q->fork, 0));
    st = fwd(q, q->hd[0], &L->value1, P, h, sh, B, q->v1, q->s_v1, 1, q->hs[0], e);
    if (!st) st = fwd(q, q->hd[0], &L->value2, P, q->v1, q->s_v1, B, q->v, q->s_v, 0, q->hs[0], e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(q->done[0], q->hs[0]));
    for (int d = 0; d < c->n_branches; d++) {
        cudaStream_t hs = q->hs[1 + d];
        size_t n = (size_t)B * Z;
        st = fwd(q, q->hd[1 + d], &L->adv1[d], P, h, sh, B, q->a1[d], q->s_v1, 1, hs, e);
        if (!st)
            st = fwd(q, q->hd[1 + d], &L->adv2[d], P, q->a1[d], q->s_v1, B, q->a[d], q->s_a[d], 0,
                     hs, e);
        if (st) goto fail;
        VX_CUDA_CHECK(cudaStreamWaitEvent(hs, q->done[0], 0));
        VX_CUDA_CHECK(vx_pdl_launch(dueling_kernel, grid_for(q, n * c->branch[d]), dim3(256), 0, hs,
                                    (const float *)q->v, q->s_v, (const float *)q->a[d], q->s_a[d],
                                    q->q, q->S.q, B, c->branch[d], Z, L->out_dim,
                                    L->out_offset[d]));
        VX_CUDA_LAUNCH_CHECK(hs);
        VX_CUDA_CHECK(cudaEventRecord(q->done[1 + d], hs));
    }
    for (int k = 0; k < q->heads; k++) VX_CUDA_CHECK(cudaStreamWaitEvent(s, q->done[k], 0));
fail:
    return st;
}

/* dueling backward for branch d, one thread per (row, action, atom): dA = dQ − mean_a dQ; this
 * branch's part of dV is Σ_a dQ (action 0's thread writes it; the parts are added in branch order
 * afterwards, like the CPU's sum). Every thread of a row takes the sum in the same order. */
static __global__ void dueling_bwd_kernel(const float *dq, size_t sq, float *dv, size_t sv,
                                          float *da, size_t sa, int B, int n, int Z, int out_dim,
                                          int offset)
{
    vx_pdl_wait();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nz = (size_t)n * Z;
    if (t >= (size_t)B * nz) return;
    dq += blockIdx.y * sq, dv += blockIdx.y * sv, da += blockIdx.y * sa;
    size_t r = t / nz;
    int k = (int)(t % nz) / Z, z = (int)(t % nz) % Z;
    const float *g = dq + r * (size_t)out_dim + offset;
    float sum = 0;
    for (int j = 0; j < n; j++) sum += g[j * Z + z];
    if (k == 0) dv[r * Z + z] = sum;
    da[r * nz + k * Z + z] = g[k * Z + z] - sum / (float)n;
}

/* out = (parts[0] + parts[1] + … + parts[n−1]) · k, added in that order; the parts of a member
 * at s_in times it, its out at s_out times it. With y (a ReLU layer's output, the member's at sy
 * times it): 0 where y ≤ 0 (the gradient before that ReLU), in the same pass. */
typedef struct {
    const float *p[HEADS];
} parts_t;

static __global__ void sum_parts_kernel(parts_t parts, int n, size_t len, float k, float *out,
                                        size_t s_in, size_t s_out, const float *y, size_t sy)
{
    vx_pdl_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    size_t at = blockIdx.y * s_in + i;
    float s = parts.p[0][at];
    /* constant indices: the pointers stay in the launch's constants, not in a local copy */
#pragma unroll
    for (int j = 1; j < HEADS; j++)
        if (j < n) s += parts.p[j][at];
    if (y && y[blockIdx.y * sy + i] <= 0.0f) s = 0.0f;
    out[blockIdx.y * s_out + i] = k == 1.0f ? s : s * k;
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
    int Z = c->atoms, nb = c->n_branches, T = c->n_trunk;
    const float *top = T ? q->trunk[T - 1] : x;
    size_t s_top = T ? q->s_trunk[T - 1] : q->S.x;
    int H = T ? c->trunk[T - 1] : c->in_dim;
    float *dh = q->dh, *dh2 = q->dh2;
    unsigned used = 0; /* the side streams given weight gradients */
    VX_CUDA_CHECK(cudaEventRecord(q->fork, s));
    /* branch d on stream 1 + d: its dV part first (the value head waits for those), then its two
     * layers, ending in its own part of the trunk gradient */
    for (int d = 0; d < nb; d++) {
        cudaStream_t hs = q->hs[1 + d];
        size_t n = (size_t)B * Z;
        VX_CUDA_CHECK(cudaStreamWaitEvent(hs, q->fork, 0));
        VX_CUDA_CHECK(vx_pdl_launch(dueling_bwd_kernel, grid_for(q, n * c->branch[d]), dim3(256), 0,
                                    hs, dq, q->S.q, q->dv_b[d], q->s_dv, q->da_b[d], q->s_da, B,
                                    c->branch[d], Z, L->out_dim, L->out_offset[d]));
        VX_CUDA_LAUNCH_CHECK(hs);
        VX_CUDA_CHECK(cudaEventRecord(q->dv_done[d], hs));
        st = bwd(q, q->hd[1 + d], &L->adv2[d], P, q->a1[d], q->s_v1, B, q->da_b[d], q->s_da, g,
                 q->dhid_h[1 + d], q->s_dhid, VX_DENSE_RELU_IN, hs, e);
        if (st) goto fail;
        st = bwd_split(q, 1 + d, &used, q->hd[1 + d], q->hd[1 + d], &L->adv1[d], P, top, s_top, B,
                       q->dhid_h[1 + d], q->s_dhid, g, q->dh_h[1 + d], q->s_dhh, 0, hs, e);
        if (st) goto fail;
        VX_CUDA_CHECK(cudaEventRecord(q->done[1 + d], hs));
    }
    /* the value head on stream 0: dV = Σ_d dV_d in branch order, then its two layers */
    {
        cudaStream_t hs = q->hs[0];
        parts_t pv;
        memset(&pv, 0, sizeof pv);
        VX_CUDA_CHECK(cudaStreamWaitEvent(hs, q->fork, 0));
        for (int d = 0; d < nb; d++) {
            VX_CUDA_CHECK(cudaStreamWaitEvent(hs, q->dv_done[d], 0));
            pv.p[d] = q->dv_b[d];
        }
        VX_CUDA_CHECK(vx_pdl_launch(sum_parts_kernel, grid_for(q, (size_t)B * Z), dim3(256), 0, hs,
                                    pv, nb, (size_t)B * Z, 1.0f, q->dv, q->s_dv, q->s_dv,
                                    (const float *)NULL, (size_t)0));
        VX_CUDA_LAUNCH_CHECK(hs);
        st = bwd(q, q->hd[0], &L->value2, P, q->v1, q->s_v1, B, q->dv, q->s_dv, g, q->dhid_h[0],
                 q->s_dhid, VX_DENSE_RELU_IN, hs, e);
        if (st) goto fail;
        st = bwd_split(q, 0, &used, q->hd[0], q->hd[0], &L->value1, P, top, s_top, B, q->dhid_h[0],
                       q->s_dhid, g, q->dh_h[0], q->s_dhh, 0, hs, e);
        if (st) goto fail;
        VX_CUDA_CHECK(cudaEventRecord(q->done[0], hs));
    }
    /* join; the trunk gradient = (branch 0 + … + branch nb−1 + value) / (nb + 1), as on the CPU,
     * and the top trunk layer's ReLU mask in the same pass (a pass over B × H floats fewer) */
    {
        parts_t ph;
        memset(&ph, 0, sizeof ph);
        for (int k = 0; k <= nb; k++) VX_CUDA_CHECK(cudaStreamWaitEvent(s, q->done[k], 0));
        for (int d = 0; d < nb; d++) ph.p[d] = q->dh_h[1 + d];
        ph.p[nb] = q->dh_h[0];
        VX_CUDA_CHECK(vx_pdl_launch(sum_parts_kernel, grid_for(q, (size_t)B * H), dim3(256), 0, s,
                                    ph, nb + 1, (size_t)B * H, 1.0f / (float)(nb + 1), dh, q->s_dhh,
                                    q->s_dh, (const float *)(T ? q->trunk[T - 1] : NULL),
                                    (size_t)(T ? q->s_trunk[T - 1] : 0)));
        VX_CUDA_LAUNCH_CHECK(s);
    }
    /* the top layer's mask came with the sum; each lower one's with the input gradient of the
     * layer above it (its input: the lower layer's ReLU output). Layer l's input gradient goes
     * into the buffer the weight gradient of layer l + 1 reads: below the second layer from the
     * top it waits for that one (a trunk of three or more layers overlaps less). */
    for (int l = T - 1; l >= 0 && !st; l--) {
        const float *in = l ? q->trunk[l - 1] : x;
        size_t s_in = l ? q->s_trunk[l - 1] : q->S.x;
        if (l == 0) {
            st = bwd(q, q->main, &L->trunk[l], P, in, s_in, B, dh, q->s_dh, g, NULL, 0, 0, s, e);
        } else {
            if (l < T - 1) st = join_sides(q, used & 1u << TRUNK_SIDE, s, e);
            if (!st)
                st = bwd_split(q, TRUNK_SIDE, &used, q->main_side, q->main, &L->trunk[l], P, in,
                               s_in, B, dh, q->s_dh, g, dh2, q->s_dh, VX_DENSE_RELU_IN, s, e);
        }
        float *t = dh;
        dh = dh2;
        dh2 = t;
    }
    if (!st) st = join_sides(q, used, s, e);
fail:
    if (st) { /* the sides joined all the same: a graph being captured must end joined */
        vx_err ignored;
        join_sides(q, used, s, &ignored);
    }
    return st;
}

extern "C" const vx_qnet_ops vx_qnet_cuda_ops = {qc_create, qc_free,     qc_set_tf32, qc_forward,
                                                 qc_output, qc_backward, qc_reserved};

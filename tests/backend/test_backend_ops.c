/* test_backend_ops.c — every component on every backend present, against the CPU reference (in
 * the manner of ggml's test-backend-ops): a table of (component, settings) cases; each case draws
 * fresh seeded inputs, runs on the CPU and on every other device this machine has, and compares
 * the outputs at the case's stated tolerance, ‖out − ref‖ / ‖ref‖ (or exactly, where the shared
 * arithmetic makes both backends give the same bits).
 *
 * Without a GPU each case still runs twice on the CPU (the harness checking itself: same inputs,
 * same bits) and the CUDA column says skipped. Tolerances: float32 GEMMs summed in another order
 * land near 1e-7..1e-6 relative; 1e-5 leaves room for depth and C51's exponentials, and is far
 * below what a wrong index, a missing term or a flipped sign does (order 1e-1..1). */
#include "helpers.h"
#include "vixen/device.h"
#include "vixen/env.h"
#include "vixen/nn.h"
#include "vixen/philox.h"
#include "vixen/replay.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Outputs of one run of a case, in host memory: up to 5 float arrays and 2 raw byte arrays. */
#define N_F 5
typedef struct {
    float *f[N_F];
    size_t nf[N_F];
    uint8_t *raw[2];
    size_t nraw[2];
} result;

static void result_free(result *r)
{
    for (int i = 0; i < N_F; i++) free(r->f[i]);
    for (int i = 0; i < 2; i++) free(r->raw[i]);
    memset(r, 0, sizeof *r);
}

typedef struct {
    const char *name;
    double tol;  /* relative L2 of the float outputs; raw outputs must be equal */
    int a, b, c; /* the case's settings, meaning set by its runner */
    void (*run)(vx_device *dev, uint64_t seed, int a, int b, int c, result *out);
} test_case;

/* ---- device memory helpers ------------------------------------------------------------------- */

static void *dev_copy(vx_mem *m, const void *host, size_t n)
{
    void *p = NULL;
    vx_err e;
    if (vx_mem_alloc(m, n ? n : 1, &p, &e)) fail_msg("%s", e.msg);
    if (host && vx_device_upload(m->dev, p, host, n, &e)) fail_msg("%s", e.msg);
    return p;
}

/* The stream a run queues its work on (NULL on the CPU). */
static vx_stream g_s;

/* Waits for the run's stream, then copies n bytes back. */
static void fetch(vx_device *dev, void *h, const void *d, size_t n)
{
    vx_err e;
    if (vx_stream_sync(dev, g_s, &e) || vx_device_download(dev, h, d, n, &e)) fail_msg("%s", e.msg);
}

static float *host_copy(vx_device *dev, const void *d, size_t n_floats)
{
    float *h = malloc(n_floats * sizeof(float) + 1);
    fetch(dev, h, d, n_floats * sizeof(float));
    return h;
}

static float *randn(size_t n, uint64_t seed, uint64_t stream, double sd)
{
    float *x = malloc(n * sizeof(float) + 1);
    vx_rng g = vx_rng_make(seed, stream, 0);
    for (size_t i = 0; i < n; i++) x[i] = (float)(sd * vx_rng_normal(&g));
    return x;
}

/* A vx_dense over a flat vector with the layout's alignment: W at 0, b at a 4-float boundary. */
static vx_dense dense_of(int in, int out, size_t *np)
{
    vx_dense d = {0, (((size_t)in * out) + 3) & ~(size_t)3, in, out};
    *np = d.b + (((size_t)out + 3) & ~(size_t)3);
    return d;
}

/* ---- dense: a = in, b = out, c = batch; forward with and without ReLU ------------------------ */

/* dx through the ReLU that made x (VX_DENSE_RELU_IN) against the same call without it: where
 * x > 0 the same bits, elsewhere 0 — on every backend, before the backends are compared. */
static void check_relu_in(const char *what, const float *x, const float *dx, const float *masked,
                          size_t n)
{
    size_t wrong = 0, zeroed = 0;
    for (size_t i = 0; i < n; i++) {
        float want = x[i] > 0.0f ? dx[i] : 0.0f;
        wrong += memcmp(&want, &masked[i], 4) != 0;
        zeroed += x[i] <= 0.0f;
    }
    if (wrong || zeroed == 0 || zeroed == n)
        fail_msg("%s: dx through the input's ReLU: %zu of %zu values wrong (%zu inputs ≤ 0)", what,
                 wrong, n, zeroed);
}

#define SPLIT_SENTINEL 4243.0f

/* The backward pass as two calls, dW and db alone (dx NULL) and dx alone (VX_DENSE_DX_ONLY), on
 * one stream of the backend, for each set of flags the Q-network passes and accumulation: the
 * same bits as the one call, and the dx half leaves g alone (a sentinel in every float). */
static void check_split(vx_device *dev, vx_dense_ctx *c, const vx_dense *d, const float *dP,
                        const float *dxx, int B, const float *ddy, size_t np, const float *dx0)
{
    static const int flag_sets[] = {0, VX_DENSE_RELU_IN, VX_DENSE_ACCUMULATE | VX_DENSE_RELU_IN};
    size_t nx = (size_t)B * d->in;
    float *sent = malloc(np * sizeof(float));
    for (size_t i = 0; i < np; i++) sent[i] = SPLIT_SENTINEL;
    for (size_t f = 0; f < sizeof flag_sets / sizeof *flag_sets; f++) {
        int flags = flag_sets[f];
        vx_mem m;
        vx_mem_init(&m, dev, "test");
        float *dg_w = dev_copy(&m, sent, np * 4), *dg_x = dev_copy(&m, sent, np * 4);
        float *dg1 = dev_copy(&m, sent, np * 4);
        float *ddx = dev_copy(&m, dx0, nx * 4), *ddx1 = dev_copy(&m, dx0, nx * 4);
        vx_err e;
        if (vx_dense_backward(c, d, dP, dxx, B, ddy, dg_w, NULL, 0, g_s, &e) ||
            vx_dense_backward(c, d, dP, dxx, B, ddy, dg_x, ddx, flags | VX_DENSE_DX_ONLY, g_s,
                              &e) ||
            vx_dense_backward(c, d, dP, dxx, B, ddy, dg1, ddx1, flags, g_s, &e))
            fail_msg("%s", e.msg);
        float *gw = host_copy(dev, dg_w, np), *gx = host_copy(dev, dg_x, np),
              *g1 = host_copy(dev, dg1, np);
        float *dx = host_copy(dev, ddx, nx), *dx1 = host_copy(dev, ddx1, nx);
        size_t g_diff = 0, g_touched = 0, dx_diff = 0;
        for (size_t i = 0; i < np; i++) {
            g_diff += memcmp(&gw[i], &g1[i], 4) != 0;
            g_touched += gx[i] != SPLIT_SENTINEL;
        }
        for (size_t i = 0; i < nx; i++) dx_diff += memcmp(&dx[i], &dx1[i], 4) != 0;
        if (g_diff || g_touched || dx_diff)
            fail_msg("dense %dx%d B=%d in two halves (flags %d): %zu of %zu gradient floats differ "
                     "from the one call's, the dx half wrote %zu of them, %zu of %zu dx floats "
                     "differ",
                     d->in, d->out, B, flags, g_diff, np, g_touched, dx_diff, nx);
        vx_mem_release(&m);
        free(gw), free(gx), free(g1), free(dx), free(dx1);
    }
    free(sent);
}

static void run_dense(vx_device *dev, uint64_t seed, int in, int out, int B, result *r)
{
    size_t np;
    vx_dense d = dense_of(in, out, &np);
    float *P = randn(np, seed, 1, 0.3), *x = randn((size_t)B * in, seed, 2, 1.0);
    float *dy = randn((size_t)B * out, seed, 3, 1.0), *dx0 = randn((size_t)B * in, seed, 4, 1.0);
    vx_mem m;
    vx_mem_init(&m, dev, "test");
    float *dP = dev_copy(&m, P, np * 4), *dxx = dev_copy(&m, x, (size_t)B * in * 4);
    float *dyr = dev_copy(&m, NULL, (size_t)B * out * 4),
          *dyl = dev_copy(&m, NULL, (size_t)B * out * 4);
    float *ddy = dev_copy(&m, dy, (size_t)B * out * 4), *dg = dev_copy(&m, NULL, np * 4);
    float *ddx = dev_copy(&m, dx0, (size_t)B * in * 4),
          *ddxm = dev_copy(&m, dx0, (size_t)B * in * 4);
    vx_dense_ctx *c;
    vx_err e;
    vx_stream s = g_s;
    const int through_relu = VX_DENSE_ACCUMULATE | VX_DENSE_RELU_IN;
    if (vx_dense_ctx_create(dev, 0, &c, &e)) fail_msg("%s", e.msg);
    if (vx_dense_forward(c, &d, dP, dxx, B, dyr, 1, s, &e) ||
        vx_dense_forward(c, &d, dP, dxx, B, dyl, 0, s, &e) ||
        vx_dense_backward(c, &d, dP, dxx, B, ddy, dg, ddxm, through_relu, s, &e) ||
        vx_dense_backward(c, &d, dP, dxx, B, ddy, dg, ddx, VX_DENSE_ACCUMULATE, s, &e))
        fail_msg("%s", e.msg);
    r->f[0] = host_copy(dev, dyr, r->nf[0] = (size_t)B * out);
    r->f[1] = host_copy(dev, dyl, r->nf[1] = (size_t)B * out);
    float *g = host_copy(dev, dg, np);
    r->f[2] = malloc(((size_t)in * out + out) * 4), r->nf[2] = (size_t)in * out + out;
    memcpy(r->f[2], g, (size_t)in * out * 4); /* dW and db, not the padding between them */
    memcpy(r->f[2] + (size_t)in * out, g + d.b, (size_t)out * 4);
    free(g);
    r->f[3] = host_copy(dev, ddx, r->nf[3] = (size_t)B * in);  /* dx0 + dy·Wᵀ */
    r->f[4] = host_copy(dev, ddxm, r->nf[4] = (size_t)B * in); /* the same through x's ReLU */
    check_relu_in("dense", x, r->f[3], r->f[4], (size_t)B * in);
    check_split(dev, c, &d, dP, dxx, B, ddy, np, dx0);
    vx_dense_ctx_free(c);
    vx_mem_release(&m);
    free(P), free(x), free(dy), free(dx0);
}

static void run_dense_case(vx_device *dev, uint64_t seed, int a, int b, int c, result *r)
{
    run_dense(dev, seed, a, b, c, r);
}

/* ---- a group of dense layers: a = in, b = out, c = batch; 5 members at padded strides (dx and dy
 * at strides of their own). The floats between members hold a sentinel that must survive; the
 * context first runs member 0 alone, so a plan kept for the layer alone and taken for the group
 * computes one member only. With `pad` 2 the members' parameters are 8 bytes apart from 16-byte
 * alignment, which takes cuBLASLt's plain GEMM and the bias kernels of dense_cuda.cu (a layer of
 * more than 16 outputs; smaller ones take dense_cuda.cu's own kernels at any alignment). */

#define GROUP_SENTINEL 4242.0f

static float *with_sentinels(const float *src, size_t stride, size_t used, int K)
{
    float *h = malloc(stride * K * 4);
    for (size_t i = 0; i < stride * K; i++) h[i] = GROUP_SENTINEL;
    for (int k = 0; src && k < K; k++) memcpy(h + k * stride, src + k * stride, used * 4);
    return h;
}

/* How many floats of a member's padding (past `used`, or inside [gap_lo, gap_hi)) changed. */
static size_t padding_changed(const float *h, size_t stride, size_t used, size_t gap_lo,
                              size_t gap_hi, int K)
{
    size_t n = 0;
    for (int k = 0; k < K; k++)
        for (size_t i = 0; i < stride; i++)
            if ((i >= used || (i >= gap_lo && i < gap_hi)) && h[k * stride + i] != GROUP_SENTINEL)
                n++;
    return n;
}

static void dense_group(vx_device *dev, uint64_t seed, int in, int out, int B, size_t pad,
                        result *r)
{
    enum { K = 5 };
    size_t np;
    vx_dense d = dense_of(in, out, &np);
    vx_dense_group G = {K,
                        np + pad,
                        (size_t)B * in + 4,
                        (size_t)B * out + 4,
                        (size_t)B * in + 8,
                        (size_t)B * out + 12};
    size_t ny = (size_t)B * out, nx = (size_t)B * in, nw = (size_t)in * out;
    float *P = randn(G.p * K, seed, 1, 0.3), *x = randn(G.x * K, seed, 2, 1.0);
    float *dy = randn(G.dy * K, seed, 3, 1.0), *dx0r = randn(G.dx * K, seed, 4, 1.0);
    float *dx0 = with_sentinels(dx0r, G.dx, nx, K), *ys = with_sentinels(NULL, G.y, 0, K);
    float *gs = with_sentinels(NULL, G.p, 0, K);
    vx_mem m;
    vx_mem_init(&m, dev, "test");
    float *dP = dev_copy(&m, P, G.p * K * 4), *dxx = dev_copy(&m, x, G.x * K * 4);
    float *dyr = dev_copy(&m, ys, G.y * K * 4), *dyl = dev_copy(&m, ys, G.y * K * 4);
    float *ddy = dev_copy(&m, dy, G.dy * K * 4), *dg = dev_copy(&m, gs, G.p * K * 4);
    float *ddx = dev_copy(&m, dx0, G.dx * K * 4), *alone = dev_copy(&m, NULL, ny * 4);
    float *ddxm = dev_copy(&m, dx0, G.dx * K * 4);
    vx_dense_ctx *c;
    vx_err e;
    if (vx_dense_ctx_create(dev, 0, &c, &e)) fail_msg("%s", e.msg);
    if (vx_dense_forward(c, &d, dP, dxx, B, alone, 1, g_s, &e) ||
        vx_dense_forward_group(c, &d, &G, dP, dxx, B, dyr, 1, g_s, &e) ||
        vx_dense_forward_group(c, &d, &G, dP, dxx, B, dyl, 0, g_s, &e) ||
        vx_dense_backward_group(c, &d, &G, dP, dxx, B, ddy, dg, ddx, VX_DENSE_ACCUMULATE, g_s,
                                &e) ||
        vx_dense_backward_group(c, &d, &G, dP, dxx, B, ddy, dg, ddxm,
                                VX_DENSE_ACCUMULATE | VX_DENSE_RELU_IN, g_s, &e))
        fail_msg("%s", e.msg);
    float *yr = host_copy(dev, dyr, G.y * K), *yl = host_copy(dev, dyl, G.y * K);
    float *g = host_copy(dev, dg, G.p * K), *gx = host_copy(dev, ddx, G.dx * K);
    float *gxm = host_copy(dev, ddxm, G.dx * K);
    size_t changed = padding_changed(yr, G.y, ny, 0, 0, K) + padding_changed(yl, G.y, ny, 0, 0, K) +
                     padding_changed(g, G.p, d.b + (size_t)out, nw, d.b, K) +
                     padding_changed(gx, G.dx, nx, 0, 0, K) +
                     padding_changed(gxm, G.dx, nx, 0, 0, K);
    if (changed) fail_msg("dense group: %zu floats between members were written", changed);
    for (int i = 0; i < 4; i++) r->nf[i] = K * (i == 2 ? nw + out : i == 3 ? nx : ny);
    for (int i = 0; i < 4; i++) r->f[i] = malloc(r->nf[i] * 4);
    for (int k = 0; k < K; k++) {
        memcpy(r->f[0] + k * ny, yr + k * G.y, ny * 4);
        memcpy(r->f[1] + k * ny, yl + k * G.y, ny * 4);
        memcpy(r->f[2] + k * (nw + out), g + k * G.p, nw * 4);
        memcpy(r->f[2] + k * (nw + out) + nw, g + k * G.p + d.b, (size_t)out * 4);
        memcpy(r->f[3] + k * nx, gx + k * G.dx, nx * 4); /* dx0 + dy·Wᵀ */
    }
    r->f[4] = malloc(K * nx * 4), r->nf[4] = K * nx; /* the same through x's ReLU */
    for (int k = 0; k < K; k++) {
        memcpy(r->f[4] + k * nx, gxm + k * G.dx, nx * 4);
        check_relu_in("dense group", x + k * G.x, r->f[3] + k * nx, r->f[4] + k * nx, nx);
    }
    free(yr), free(yl), free(g), free(gx), free(gxm);
    vx_dense_ctx_free(c);
    vx_mem_release(&m);
    free(P), free(x), free(dy), free(dx0r), free(dx0), free(ys), free(gs);
}

static void run_dense_group(vx_device *dev, uint64_t seed, int in, int out, int B, result *r)
{
    dense_group(dev, seed, in, out, B, 4, r);
}

static void run_dense_group_unaligned(vx_device *dev, uint64_t seed, int in, int out, int B,
                                      result *r)
{
    dense_group(dev, seed, in, out, B, 2, r);
}

/* ---- the Q-network: a = atoms, b = batch, c = members (0: a network alone) --------------------
 * A group's members each get their own weights, inputs and dq; its forward and backward batches
 * are sized 3 rows past the batch run, so a member stride taken from the batch instead reads a
 * neighbour. */

static void qnet_case(vx_device *dev, uint64_t seed, int atoms, int B, int members, int n_trunk,
                      result *r)
{
    int K = members > 0 ? members : 1, maxB = members > 0 ? B + 3 : B;
    vx_qnet_cfg qc;
    vx_qnet_cfg_default(&qc);
    qc.atoms = atoms;
    qc.n_trunk = n_trunk;
    const int widths[] = {64, 48, 40, 56};
    for (int l = 0; l < n_trunk; l++) qc.trunk[l] = widths[l % 4];
    qc.head_hidden = 32;
    vx_qnet_layout L;
    vx_err e;
    if (vx_qnet_layout_make(&qc, &L, &e)) fail_msg("%s", e.msg);
    vx_qnet_strides S = vx_qnet_member_strides(&L, maxB);
    size_t np = L.n_params, nx = (size_t)B * qc.in_dim, nq = (size_t)B * L.out_dim;
    float *P = calloc((size_t)K * S.params, 4), *x = calloc((size_t)K * S.x, 4);
    float *dq = calloc((size_t)K * S.q, 4), *zero = calloc((size_t)K * S.params, 4);
    for (int k = 0; k < K; k++) {
        float *xk = randn(nx, seed + (uint64_t)k, 5, 1.0),
              *dqk = randn(nq, seed + (uint64_t)k, 6, 0.1);
        vx_qnet_init(&L, seed + (uint64_t)k, P + k * S.params);
        memcpy(x + k * S.x, xk, nx * 4), memcpy(dq + k * S.q, dqk, nq * 4);
        free(xk), free(dqk);
    }
    vx_mem m;
    vx_mem_init(&m, dev, "test");
    float *dP = dev_copy(&m, P, (size_t)K * S.params * 4),
          *dx = dev_copy(&m, x, (size_t)K * S.x * 4);
    float *ddq = dev_copy(&m, dq, (size_t)K * S.q * 4);
    float *dg = dev_copy(&m, zero, (size_t)K * S.params * 4); /* the padding stays zero */
    vx_qnet *q;
    /* a group's backward buffers sized past the batch too (their own strides) */
    if (vx_qnet_create_group(&L, K, maxB, members > 0 ? maxB : B, dev, &q, &e) ||
        vx_qnet_forward(q, dP, dx, B, g_s, &e))
        fail_msg("%s", e.msg);
    float *out = host_copy(dev, vx_qnet_output(q), (size_t)(K - 1) * S.q + nq);
    if (vx_qnet_backward(q, dP, dx, B, ddq, dg, g_s, &e)) fail_msg("%s", e.msg);
    float *g = host_copy(dev, dg, (size_t)K * S.params);
    r->f[0] = malloc((size_t)K * nq * 4), r->nf[0] = (size_t)K * nq;
    r->f[1] = malloc((size_t)K * np * 4), r->nf[1] = (size_t)K * np;
    for (int k = 0; k < K; k++) {
        memcpy(r->f[0] + k * nq, out + k * S.q, nq * 4);
        memcpy(r->f[1] + k * np, g + k * S.params, np * 4);
    }
    free(out), free(g);
    vx_qnet_free(q);
    vx_mem_release(&m);
    free(P), free(x), free(dq), free(zero);
}

static void run_qnet(vx_device *dev, uint64_t seed, int atoms, int B, int members, result *r)
{
    qnet_case(dev, seed, atoms, B, members, 2, r);
}

/* c = trunk layers, a network alone: the GPU's backward pass runs each hidden layer's weight
 * gradient on a side stream, and past two trunk layers an input gradient waits for the weight
 * gradient above it (qnet_cuda.cu) */
static void run_qnet_depth(vx_device *dev, uint64_t seed, int atoms, int B, int n_trunk, result *r)
{
    qnet_case(dev, seed, atoms, B, 0, n_trunk, r);
}

/* ---- the optimizer: a = clip on (norm above max_norm), b = weight decay on; 3 steps ---------- */

static void run_optim(vx_device *dev, uint64_t seed, int clip, int wd, int c, result *r)
{
    (void)c;
    const size_t n = 1000;
    vx_adam_cfg ac;
    vx_adam_cfg_default(&ac);
    ac.lr = 1e-2;
    ac.weight_decay = wd ? 0.01 : 0;
    float *p = randn(n, seed, 7, 1.0);
    vx_mem m;
    vx_mem_init(&m, dev, "test");
    float *dp = dev_copy(&m, p, n * 4), *dg = dev_copy(&m, NULL, n * 4);
    vx_optim *o;
    vx_err e;
    if (vx_optim_create(&ac, clip ? 1.0 : 0.0, n, dev, &o, &e)) fail_msg("%s", e.msg);
    for (int step = 0; step < 3; step++) {
        float *g = randn(n, seed, 8 + (uint64_t)step, 0.5); /* norm ≈ 16: the clip of 1 bites */
        if (vx_stream_sync(dev, g_s, &e) || vx_device_upload(dev, dg, g, n * 4, &e) ||
            vx_optim_step(o, dp, dg, g_s, &e))
            fail_msg("%s", e.msg);
        free(g);
    }
    r->f[0] = host_copy(dev, dp, r->nf[0] = n);
    r->f[1] = host_copy(dev, dg, r->nf[1] = n); /* the last step's clipped gradients */
    double norm;
    fetch(dev, &norm, vx_optim_norm(o), sizeof norm);
    r->f[2] = malloc(4), r->f[2][0] = (float)norm, r->nf[2] = 1;
    vx_optim_free(o);
    vx_mem_release(&m);
    free(p);
}

/* ---- the environments: a = N, b = steps (random actions), c = reward kind; bit for bit ------- */

static void run_env(vx_device *dev, uint64_t seed, int N, int T, int c, result *r)
{
    static vx_market mk;
    static int have;
    vx_err e;
    if (!have) {
        vx_series s = {0};
        th_synth(&s, 20, 3, 0.1);
        if (vx_market_from_series(&s, &mk, &e)) fail_msg("%s", e.msg);
        have = 1;
    }
    vx_env_cfg ec;
    vx_env_cfg_default(&ec);
    ec.seed = seed;
    ec.episode_len = 120;
    ec.reward = c;
    vx_env *env;
    if (vx_env_create(&ec, &mk, VX_SPLIT_TRAIN, (size_t)N, dev, &env, &e)) fail_msg("%s", e.msg);
    size_t D = VX_OBS_DIM, A = VX_ACTION_BRANCHES;
    vx_mem m;
    vx_mem_init(&m, dev, "test");
    float *obs = dev_copy(&m, NULL, N * D * 4), *fin = dev_copy(&m, NULL, N * D * 4);
    float *rew = dev_copy(&m, NULL, (size_t)N * 4);
    uint8_t *te = dev_copy(&m, NULL, (size_t)N), *tr = dev_copy(&m, NULL, (size_t)N);
    int32_t *act = dev_copy(&m, NULL, N * A * 4), *ha = malloc(N * A * 4);
    r->raw[0] = malloc((size_t)T * N * 2), r->nraw[0] = (size_t)T * N * 2;
    r->f[0] = malloc((size_t)T * N * 4), r->nf[0] = (size_t)T * N;
    vx_rng g = vx_rng_make(seed, 99, 0);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < N; i++) {
            ha[i * A] = (int32_t)vx_rng_below(&g, VX_EXPOSURE_LEVELS);
            ha[i * A + 1] = (int32_t)vx_rng_below(&g, VX_ORDER_TYPES);
            ha[i * A + 2] = (int32_t)vx_rng_below(&g, VX_URGENCY_LEVELS);
        }
        if (vx_device_upload(dev, act, ha, N * A * 4, &e) ||
            vx_env_step(env, act, obs, rew, te, tr, fin, g_s, &e))
            fail_msg("%s", e.msg);
        fetch(dev, r->f[0] + (size_t)t * N, rew, (size_t)N * 4);
        fetch(dev, r->raw[0] + (size_t)t * N * 2, te, (size_t)N);
        fetch(dev, r->raw[0] + (size_t)t * N * 2 + N, tr, (size_t)N);
    }
    r->raw[1] = malloc(N * sizeof(vx_env_state)), r->nraw[1] = N * sizeof(vx_env_state);
    if (vx_env_get_states(env, (vx_env_state *)r->raw[1], &e)) fail_msg("%s", e.msg);
    r->f[1] = host_copy(dev, obs, r->nf[1] = N * D);
    vx_env_free(env);
    vx_mem_release(&m);
    free(ha);
}

/* ---- the replay buffer: a = kind, b = batch; insert, sample, update, sample ------------------ */

static void run_replay(vx_device *dev, uint64_t seed, int kind, int B, int c, result *r)
{
    (void)c;
    const size_t n = 3000, D = VX_OBS_DIM, A = VX_ACTION_BRANCHES;
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, (vx_replay_kind)kind, 4096);
    rc.seed = seed;
    vx_replay *rp;
    vx_err e;
    if (vx_replay_create(&rc, dev, &rp, &e)) fail_msg("%s", e.msg);
    float *o = randn(n * D, seed, 10, 1.0), *rw = randn(n, seed, 11, 1.0);
    int32_t *a = malloc(n * A * 4);
    uint8_t *fl = calloc(n, 1);
    for (size_t i = 0; i < n * A; i++) a[i] = (int32_t)(i % 3);
    vx_mem m;
    vx_mem_init(&m, dev, "test");
    vx_transitions t = {dev_copy(&m, o, n * D * 4),
                        dev_copy(&m, o, n * D * 4),
                        dev_copy(&m, a, n * A * 4),
                        dev_copy(&m, rw, n * 4),
                        dev_copy(&m, fl, n),
                        dev_copy(&m, fl, n),
                        NULL};
    vx_replay_batch b = {
        dev_copy(&m, NULL, (size_t)B * D * 4), dev_copy(&m, NULL, (size_t)B * D * 4),
        dev_copy(&m, NULL, (size_t)B * A * 4), dev_copy(&m, NULL, (size_t)B * 4),
        dev_copy(&m, NULL, (size_t)B),         dev_copy(&m, NULL, (size_t)B),
        dev_copy(&m, NULL, (size_t)B),         dev_copy(&m, NULL, (size_t)B * 4),
        dev_copy(&m, NULL, (size_t)B * 4),     dev_copy(&m, NULL, (size_t)B * 4)};
    float *td = randn((size_t)B, seed, 12, 2.0);
    float *dtd = dev_copy(&m, td, (size_t)B * 4);
    r->raw[0] = malloc((size_t)B * 8), r->nraw[0] = (size_t)B * 8;
    if (vx_replay_insert(rp, &t, n, g_s, &e) || vx_replay_set_beta(rp, 0.5, g_s, &e) ||
        vx_replay_sample(rp, (size_t)B, &b, g_s, &e) ||
        vx_replay_update(rp, b.index, b.gen, dtd, (size_t)B, g_s, &e))
        fail_msg("%s", e.msg);
    fetch(dev, r->raw[0], b.index, (size_t)B * 4);
    if (vx_replay_sample(rp, (size_t)B, &b, g_s, &e)) fail_msg("%s", e.msg);
    fetch(dev, r->raw[0] + (size_t)B * 4, b.index, (size_t)B * 4);
    r->f[0] = host_copy(dev, b.weights, r->nf[0] = (size_t)B);
    r->f[1] = host_copy(dev, b.obs, r->nf[1] = (size_t)B * D);
    r->f[2] = host_copy(dev, b.rewards, r->nf[2] = (size_t)B);
    vx_replay_free(rp);
    vx_mem_release(&m);
    free(o), free(rw), free(a), free(fl), free(td);
}

/* A group of 4 optimizers: each member its own rate, clip (one without) and weight decay, a
 * stride past its size, member 2 told to skip the second step, the third step's rates from the
 * controls; the moments and step counts come back as well (a member stepping with another's
 * settings or count changes them). */
static void run_optim_group(vx_device *dev, uint64_t seed, int a, int b, int c, result *r)
{
    (void)a, (void)b, (void)c;
    enum { K = 4 };
    const size_t n = 1000, stride = 1004;
    vx_adam_cfg ac[K];
    double clip[K] = {1.0, 0.0, 2.0, 0.5};
    for (int k = 0; k < K; k++) {
        vx_adam_cfg_default(&ac[k]);
        ac[k].lr = 1e-2 * (k + 1);
        ac[k].weight_decay = k % 2 ? 0.01 : 0;
    }
    float *p = randn(K * stride, seed, 7, 1.0);
    vx_mem m;
    vx_mem_init(&m, dev, "test");
    float *dp = dev_copy(&m, p, K * stride * 4), *dg = dev_copy(&m, NULL, K * stride * 4);
    int *dskip = dev_copy(&m, NULL, K * sizeof(int));
    double lr[K] = {2e-2, 5e-3, 3e-2, 1e-2}; /* the controls' rates, not the settings' */
    double *dlr = dev_copy(&m, lr, sizeof lr);
    vx_optim *o;
    vx_err e;
    if (vx_optim_create_group(ac, clip, n, stride, K, dev, &o, &e)) fail_msg("%s", e.msg);
    vx_optim_set_controls(o, NULL, dskip);
    for (int step = 0; step < 3; step++) {
        float *g = randn(K * stride, seed, 8 + (uint64_t)step, 0.5);
        int skip[K] = {0, 0, step == 1, 0};
        if (step == 2) vx_optim_set_controls(o, dlr, dskip);
        if (vx_stream_sync(dev, g_s, &e) || vx_device_upload(dev, dg, g, K * stride * 4, &e) ||
            vx_device_upload(dev, dskip, skip, sizeof skip, &e) ||
            vx_optim_step(o, dp, dg, g_s, &e))
            fail_msg("%s", e.msg);
        free(g);
    }
    float *hp = host_copy(dev, dp, K * stride), *hg = host_copy(dev, dg, K * stride);
    double norm[K];
    fetch(dev, norm, vx_optim_norm(o), sizeof norm);
    float *mm = NULL, *vv = NULL;
    int64_t t[K];
    vx_mem hm;
    vx_mem_init(&hm, dev, "test state");
    if (vx_mem_alloc_host(&hm, K * stride * 4, &mm, &e) ||
        vx_mem_alloc_host(&hm, K * stride * 4, &vv, &e) ||
        vx_optim_copy_state(o, mm, vv, t, g_s, &e) || vx_stream_sync(dev, g_s, &e))
        fail_msg("%s", e.msg);
    r->nf[0] = r->nf[1] = r->nf[2] = K * n, r->nf[3] = 2 * K;
    for (int i = 0; i < 4; i++) r->f[i] = malloc(r->nf[i] * 4);
    for (int k = 0; k < K; k++) {
        memcpy(r->f[0] + k * n, hp + k * stride, n * 4);
        memcpy(r->f[1] + k * n, hg + k * stride, n * 4); /* the last step's clipped gradients */
        memcpy(r->f[2] + k * n, vv + k * stride, n * 4);
        r->f[3][2 * k] = (float)norm[k], r->f[3][2 * k + 1] = (float)t[k];
    }
    free(hp), free(hg);
    vx_mem_release(&hm);
    vx_optim_free(o);
    vx_mem_release(&m);
    free(p);
}

static const test_case cases[] = {
    {"dense 51x256 B=1024", 1e-5, 51, 256, 1024, run_dense_case},
    {"dense 256x15 B=37", 1e-5, 256, 15, 37, run_dense_case},
    {"dense 64x765 B=1", 1e-5, 64, 765, 1, run_dense_case},
    /* outputs ≤ 16 and inputs ≤ 256: dense_cuda.cu's own kernels, every tile (64 rows up to 64
     * inputs, 32 up to 128, 16 past it; a partial tile; one row at the most shared memory); one
     * output, a head's, 16 at the limit; 300 inputs: cuBLASLt again */
    {"dense 160x3 B=300", 1e-5, 160, 3, 300, run_dense_case},
    {"dense 100x16 B=33", 1e-5, 100, 16, 33, run_dense_case},
    {"dense 128x5 B=65", 1e-5, 128, 5, 65, run_dense_case},
    {"dense 256x16 B=1", 1e-5, 256, 16, 1, run_dense_case},
    {"dense 300x9 B=20", 1e-5, 300, 9, 20, run_dense_case},
    {"dense 64x1 B=300", 1e-5, 64, 1, 300, run_dense_case},
    {"dense 64x9 B=1024", 1e-5, 64, 9, 1024, run_dense_case},
    {"dense 37x16 B=5", 1e-5, 37, 16, 5, run_dense_case},
    {"dense 64x9 B=2500", 1e-5, 64, 9, 2500, run_dense_case}, /* two launches (SMALL_MERGE_ROWS) */
    /* past SMALL_BACKWARD_ROWS: the small forward kernel, the backward pass on cuBLASLt */
    {"dense 160x16 B=4200", 1e-5, 160, 16, 4200, run_dense_case},
    {"dense group 5 x 64x9 B=37", 1e-5, 64, 9, 37, run_dense_group},
    {"dense group 5 x 100x3 B=2049", 1e-5, 100, 3, 2049, run_dense_group},
    {"dense group 64x3 unaligned", 1e-5, 64, 3, 33, run_dense_group_unaligned},
    {"dense group 5 x 45x160 B=64", 1e-5, 45, 160, 64, run_dense_group},
    {"dense group 5 x 160x27 B=37", 1e-5, 160, 27, 37, run_dense_group},
    {"dense group 45x160 unaligned", 1e-5, 45, 160, 64, run_dense_group_unaligned},
    {"qnet Z=1 B=256", 1e-5, 1, 256, 0, run_qnet},
    {"qnet Z=11 B=33", 1e-5, 11, 33, 0, run_qnet},
    {"qnet group of 4, Z=1 B=64", 1e-5, 1, 64, 4, run_qnet},
    {"qnet group of 3, Z=11 B=33", 1e-5, 11, 33, 3, run_qnet},
    {"qnet no trunk, Z=1 B=64", 1e-5, 1, 64, 0, run_qnet_depth},
    {"qnet trunk of 1, Z=1 B=64", 1e-5, 1, 64, 1, run_qnet_depth},
    {"qnet trunk of 3, Z=1 B=300", 1e-5, 1, 300, 3, run_qnet_depth},
    {"qnet trunk of 4, Z=11 B=33", 1e-5, 11, 33, 4, run_qnet_depth},
    {"optim clip, no decay", 1e-6, 1, 0, 0, run_optim},
    {"optim no clip, decay", 1e-6, 0, 1, 0, run_optim},
    {"optim group of 4", 1e-6, 0, 0, 0, run_optim_group},
    {"env 512 x 300 steps", 0, 512, 300, VX_REWARD_PNL, run_env},
    {"env vol reward 256 x 300", 0, 256, 300, VX_REWARD_VOL, run_env},
    {"replay uniform B=256", 0, VX_REPLAY_UNIFORM, 256, 0, run_replay},
    {"replay proportional B=512", 1e-6, VX_REPLAY_PROPORTIONAL, 512, 0, run_replay},
    {"replay rank B=128", 1e-6, VX_REPLAY_RANK, 128, 0, run_replay},
};
#define N_CASES (int)(sizeof cases / sizeof *cases)

static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Runs every case on the CPU and on `dev`; a table line per case. */
static void compare_on(vx_device *dev, const char *label)
{
    for (int k = 0; k < N_CASES; k++) {
        const test_case *c = &cases[k];
        uint64_t seed = 1000 + (uint64_t)k; /* fresh inputs per case */
        result ref = {0}, got = {0};
        vx_err e;
        g_s = NULL;
        c->run(NULL, seed, c->a, c->b, c->c, &ref);
        if (vx_stream_create(dev, &g_s, &e)) fail_msg("%s", e.msg);
        c->run(dev, seed, c->a, c->b, c->c, &got);
        vx_stream_destroy(dev, g_s);
        double worst = 0;
        for (int i = 0; i < N_F && ref.f[i]; i++) {
            assert_int_equal(ref.nf[i], got.nf[i]);
            double d = rel_l2(got.f[i], ref.f[i], ref.nf[i]);
            worst = d > worst ? d : worst;
        }
        int raw_equal = 1;
        for (int i = 0; i < 2 && ref.raw[i]; i++)
            raw_equal &=
                ref.nraw[i] == got.nraw[i] && memcmp(ref.raw[i], got.raw[i], ref.nraw[i]) == 0;
        int ok = worst <= c->tol && raw_equal;
        printf("%-8s %-28s max rel L2 %.2e (tolerance %.0e)%s  %s\n", label, c->name, worst, c->tol,
               raw_equal ? "" : ", exact outputs differ", ok ? "ok" : "FAIL");
        if (!ok)
            fail_msg("%s on %s: %.3e > %.0e or exact outputs differ", c->name, label, worst,
                     c->tol);
        result_free(&ref);
        result_free(&got);
    }
}

static void test_cpu_against_itself(void **state)
{
    (void)state;
    compare_on(vx_device_cpu(), "cpu");
}

static void test_cuda_against_cpu(void **state)
{
    (void)state;
    if (vx_device_cuda_count() == 0) {
        printf("cuda     skipped: no CUDA device\n");
        skip();
    }
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CUDA;
    vx_device *dev;
    vx_err e;
    if (vx_device_open(&dc, &dev, &e)) fail_msg("%s", e.msg);
    compare_on(dev, "cuda");
    vx_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_against_itself),
        cmocka_unit_test(test_cuda_against_cpu),
    };
    return cmocka_run_group_tests_name("backend_ops", tests, NULL, NULL);
}

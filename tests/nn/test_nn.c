/* test_nn.c — the Q-network: parameter count, initialisation, forward semantics (dueling
 * aggregation), gradients of every tensor against central finite differences in float64, the
 * float32 build against the float64 one, clipping, and Adam against hand-computed steps. */
#include "helpers.h"
#include "qnet_f64.h"
#include "vixen/nn.h"
#include "vixen/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void small_cfg(vx_qnet_cfg *c, int atoms)
{
    vx_qnet_cfg_default(c);
    c->in_dim = 5;
    c->n_trunk = 2;
    c->trunk[0] = 7;
    c->trunk[1] = 6;
    c->head_hidden = 4;
    c->n_branches = 3;
    c->branch[0] = 3;
    c->branch[1] = 2;
    c->branch[2] = 4;
    c->atoms = atoms;
}

static void test_default_size(void **state)
{
    (void)state;
    vx_qnet_cfg c;
    vx_qnet_cfg_default(&c);
    vx_qnet_layout L;
    vx_err e;
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_OK);
    size_t want = (51 * 256 + 256) + (256 * 256 + 256) + (256 * 64 + 64) + (64 + 1) +
                  3 * (256 * 64 + 64) + (64 * 9 + 9) + 2 * (64 * 3 + 3);
    assert_int_equal(L.n_weights, want);
    assert_int_equal(L.n_weights, 145936);
    assert_true(L.n_params >= L.n_weights && L.n_params < L.n_weights + 4 * 2 * L.n_tensors);
    assert_int_equal(L.out_dim, 15);
    assert_int_equal(L.n_tensors, 20); /* 10 dense layers: 2 trunk, 2 value, 2 per branch */
    c.atoms = 51;
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_OK);
    assert_int_equal(L.out_dim, 15 * 51);
    /* tensors in order, each on a 16-byte boundary, with less than 4 floats of padding before it */
    size_t next = 0, sum = 0;
    for (size_t i = 0; i < L.n_tensors; i++) {
        char name[64];
        size_t off;
        int r, k;
        vx_qnet_tensor(&L, i, name, sizeof name, &off, &r, &k);
        assert_int_equal(off % 4, 0);
        assert_true(off >= next && off < next + 4);
        next = off + (size_t)r * k;
        sum += (size_t)r * k;
    }
    assert_int_equal(sum, L.n_weights);
    assert_true(next <= L.n_params && L.n_params < next + 4);
    char name[64];
    size_t off;
    int r, k;
    vx_qnet_tensor(&L, 5, name, sizeof name, &off, &r, &k);
    assert_string_equal(name, "value.0.bias");
    c.n_branches = 0;
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_ERR_ARG);
}

static void test_init_statistics(void **state)
{
    (void)state;
    vx_qnet_cfg c;
    vx_qnet_cfg_default(&c);
    vx_qnet_layout L;
    vx_err e;
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_OK);
    float *p = malloc(L.n_params * 4), *p2 = malloc(L.n_params * 4);
    vx_qnet_init(&L, 7, p);
    vx_qnet_init(&L, 7, p2);
    assert_memory_equal(p, p2, L.n_params * 4);
    vx_qnet_init(&L, 8, p2);
    assert_true(memcmp(p, p2, L.n_params * 4) != 0);
    /* He: the 256×256 trunk layer has sd sqrt(2/256) */
    double s = 0, s2 = 0;
    size_t n = 256 * 256;
    for (size_t i = 0; i < n; i++)
        s += p[L.trunk[1].w + i], s2 += (double)p[L.trunk[1].w + i] * p[L.trunk[1].w + i];
    double sd = sqrt(s2 / n - (s / n) * (s / n));
    assert_true(fabs(sd / sqrt(2.0 / 256) - 1) < 0.02);
    /* Xavier uniform on the first branch's output layer: within ±sqrt(6/(64+9)) */
    double lim = sqrt(6.0 / 73), mx = 0;
    for (size_t i = 0; i < 64 * 9; i++) mx = fmax(mx, fabs(p[L.adv2[0].w + i]));
    assert_true(mx <= lim && mx > 0.9 * lim);
    for (int j = 0; j < 256; j++) assert_near(p[L.trunk[0].b + j], 0, 0);
    /* each layer draws from a Philox stream of its own: the value head's and the three branches'
     * first layers have one shape (256 × 64), and drawn from one stream they would start equal,
     * the branches' heads then symmetric. Independent draws: a sample correlation of 16384 pairs
     * has sd 1/128, and |r| < 0.04 (5 sd) holds for a fair draw but for about 3e-6 of seeds (six
     * pairs); the seed is fixed, so the check is deterministic. One shared stream gives r = 1. */
    const vx_dense *same[4] = {&L.value1, &L.adv1[0], &L.adv1[1], &L.adv1[2]};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) {
            const float *x = p + same[i]->w, *y = p + same[j]->w;
            size_t nw = (size_t)same[i]->in * same[i]->out;
            assert_int_equal(nw, 256 * 64);
            double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
            for (size_t k = 0; k < nw; k++)
                sx += x[k], sy += y[k], sxx += (double)x[k] * x[k], syy += (double)y[k] * y[k],
                    sxy += (double)x[k] * y[k];
            double cxy = sxy / nw - sx / nw * sy / nw, cxx = sxx / nw - sx / nw * sx / nw,
                   cyy = syy / nw - sy / nw * sy / nw;
            assert_true(fabs(cxy / sqrt(cxx * cyy)) < 0.04);
        }
    free(p), free(p2);
}

static void fill_random(double *x, size_t n, uint64_t seed, double scale)
{
    vx_rng r = vx_rng_make(seed, 0, 0);
    for (size_t i = 0; i < n; i++) x[i] = vx_rng_normal(&r) * scale;
}

static double loss64(const vx_qnet_layout *L, const double *p, const double *x, int B,
                     const double *c, double *q)
{
    qnet64_run_forward(L, p, x, B, q);
    double s = 0;
    for (size_t i = 0; i < (size_t)B * L->out_dim; i++) s += c[i] * q[i];
    return s;
}

static void check_gradients(int atoms)
{
    vx_qnet_cfg cfg;
    small_cfg(&cfg, atoms);
    vx_qnet_layout L;
    vx_err e;
    assert_int_equal(vx_qnet_layout_make(&cfg, &L, &e), VX_OK);
    const int B = 4;
    size_t np = L.n_params, nq = (size_t)B * L.out_dim;
    double *p = malloc(np * 8), *g = calloc(np, 8),
           *x = malloc((size_t)B * cfg.in_dim * 8); /* padding: 0 */
    double *c = malloc(nq * 8), *q = malloc(nq * 8);
    fill_random(p, np, 1 + atoms, 0.5);
    for (size_t i = 0; i < np; i++) p[i] += 0.05; /* biases away from ReLU kinks */
    fill_random(x, (size_t)B * cfg.in_dim, 2, 1.0);
    fill_random(c, nq, 3, 1.0); /* loss = Σ c·Q, so dL/dQ = c */
    qnet64_run_backward(&L, p, x, B, c, g);
    /* the analytic gradient carries the BDQ trunk scale 1/(K+1); undo it for the trunk tensors,
     * whose finite difference is the true derivative */
    size_t trunk_end = L.trunk[cfg.n_trunk - 1].b + (size_t)cfg.trunk[cfg.n_trunk - 1];
    double worst = 0;
    const double h = 1e-6;
    for (size_t i = 0; i < np; i++) {
        double keep = p[i];
        p[i] = keep + h;
        double up = loss64(&L, p, x, B, c, q);
        p[i] = keep - h;
        double dn = loss64(&L, p, x, B, c, q);
        p[i] = keep;
        double fd = (up - dn) / (2 * h);
        double an = i < trunk_end ? g[i] * (cfg.n_branches + 1) : g[i];
        double err = fabs(fd - an) / fmax(1e-6, fabs(fd) + fabs(an));
        if (err > worst) worst = err;
        if (err > 1e-5)
            fail_msg("atoms %d, parameter %zu: analytic %.10g, finite difference %.10g", atoms, i,
                     an, fd);
    }
    printf("gradient check, atoms %d: %zu parameters, worst relative error %.2e\n", atoms, np,
           worst);
    free(p), free(g), free(x), free(c), free(q);
}

static void test_gradients_dqn(void **state)
{
    (void)state;
    check_gradients(1);
}

static void test_gradients_c51(void **state)
{
    (void)state;
    check_gradients(3);
}

static void test_dueling_and_float_matches_double(void **state)
{
    (void)state;
    vx_qnet_cfg cfg;
    small_cfg(&cfg, 2);
    vx_qnet_layout L;
    vx_err e;
    assert_int_equal(vx_qnet_layout_make(&cfg, &L, &e), VX_OK);
    const int B = 6;
    size_t np = L.n_params, nq = (size_t)B * L.out_dim, nx = (size_t)B * cfg.in_dim;
    double *p = malloc(np * 8), *x = malloc(nx * 8), *q = malloc(nq * 8), *c = malloc(nq * 8),
           *g = calloc(np, 8); /* the padding between tensors gets no gradient: it stays 0 */
    float *pf = malloc(np * 4), *xf = malloc(nx * 4), *cf = malloc(nq * 4), *gf = calloc(np, 4);
    fill_random(p, np, 11, 0.4);
    fill_random(x, nx, 12, 1.0);
    fill_random(c, nq, 13, 1.0);
    for (size_t i = 0; i < np; i++) pf[i] = (float)p[i], p[i] = pf[i];
    for (size_t i = 0; i < nx; i++) xf[i] = (float)x[i], x[i] = xf[i];
    for (size_t i = 0; i < nq; i++) cf[i] = (float)c[i], c[i] = cf[i];
    vx_qnet_ws ws;
    assert_int_equal(vx_qnet_ws_create(&L, B, &ws, &e), VX_OK);
    vx_qnet_forward_ref(&L, pf, xf, B, &ws);
    qnet64_run_forward(&L, p, x, B, q);
    double num = 0, den = 0;
    for (size_t i = 0; i < nq; i++) num += (ws.q[i] - q[i]) * (ws.q[i] - q[i]), den += q[i] * q[i];
    assert_true(sqrt(num / den) < 1e-6);
    /* dueling: for each branch and atom, the mean over actions of Q equals V */
    for (int r = 0; r < B; r++)
        for (int d = 0; d < cfg.n_branches; d++)
            for (int z = 0; z < cfg.atoms; z++) {
                double m = 0;
                for (int a = 0; a < cfg.branch[d]; a++)
                    m += ws.q[(size_t)r * L.out_dim + L.out_offset[d] + a * cfg.atoms + z];
                m /= cfg.branch[d];
                assert_true(fabs(m - ws.v[(size_t)r * cfg.atoms + z]) < 1e-5);
            }
    vx_qnet_backward_ref(&L, pf, xf, B, cf, &ws, gf);
    qnet64_run_backward(&L, p, x, B, c, g);
    num = den = 0;
    for (size_t i = 0; i < np; i++) num += (gf[i] - g[i]) * (gf[i] - g[i]), den += g[i] * g[i];
    assert_true(sqrt(num / den) < 1e-5);
    vx_qnet_ws_free(&ws);
    free(p), free(x), free(q), free(c), free(g), free(pf), free(xf), free(cf), free(gf);
}

static void test_grad_clip(void **state)
{
    (void)state;
    float g[3] = {3, 4, 0};
    assert_true(fabs(vx_grad_clip(g, 3, 10) - 5) < 1e-12);
    assert_near(g[0], 3, 0);
    assert_true(fabs(vx_grad_clip(g, 3, 1) - 5) < 1e-12);
    assert_near(g[0], 0.6, 1e-6);
    assert_near(g[1], 0.8, 1e-6);
    float h[2] = {1, 1};
    vx_grad_clip(h, 2, 0); /* 0: no clipping */
    assert_near(h[0], 1, 0);
    /* an exploding gradient, the case the clip is for: components of 3e19 and 4e19 have squares
     * past FLT_MAX (3.4e38), so the sum of squares must be kept in double. Summed in float it is
     * inf, the scale max/norm 0, and the clip would zero the gradient (and report an inf norm)
     * instead of scaling it to the unit vector (0.6, 0.8). */
    float big[3] = {3e19f, 4e19f, 0};
    double want = sqrt((double)big[0] * big[0] + (double)big[1] * big[1]); /* 5e19 */
    double norm = vx_grad_clip(big, 3, 1);
    assert_true(fabs(norm / want - 1) < 1e-12);
    assert_near(big[0], 0.6, 1e-6);
    assert_near(big[1], 0.8, 1e-6);
    assert_near(big[2], 0, 0);
}

static void test_adam_three_steps(void **state)
{
    (void)state;
    vx_adam_cfg c = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0};
    vx_adam a;
    vx_err e;
    assert_int_equal(vx_adam_create(&c, 2, &a, &e), VX_OK);
    float p[2] = {1.0f, -2.0f};
    const float grads[3][2] = {{0.5f, -1.0f}, {-0.25f, 2.0f}, {1.0f, 0.0f}};
    /* by hand: m_t = 0.9 m + 0.1 g, v_t = 0.999 v + 0.001 g², p -= 0.1 · (m/(1−0.9^t)) /
     * (sqrt(v/(1−0.999^t)) + 1e-8) */
    double want[3][2] = {
        {1.0 - 0.1, -2.0 + 0.1}, /* step 1: m̂ = g, v̂ = g², so the step is lr · sign(g) */
        {0, 0},
        {0, 0}};
    double m[2] = {0, 0}, v[2] = {0, 0}, q[2] = {1.0, -2.0};
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < 2; i++) {
            m[i] = 0.9 * m[i] + 0.1 * grads[t - 1][i];
            v[i] = 0.999 * v[i] + 0.001 * grads[t - 1][i] * grads[t - 1][i];
            q[i] -= 0.1 * (m[i] / (1 - pow(0.9, t))) / (sqrt(v[i] / (1 - pow(0.999, t))) + 1e-8);
        }
        if (t > 1) want[t - 1][0] = q[0], want[t - 1][1] = q[1];
        vx_adam_step(&a, p, grads[t - 1]);
        assert_near(p[0], want[t - 1][0], 2e-6);
        assert_near(p[1], want[t - 1][1], 2e-6);
    }
    /* step 2 by hand for parameter 0: m = 0.9·0.05 − 0.025 = 0.02, v = 0.999·0.00025 +
     * 0.001·0.0625 = 0.00031225; m̂ = 0.02/0.19, v̂ = 0.00031225/0.001999 */
    double p0_2 = 0.9 - 0.1 * (0.02 / 0.19) / (sqrt(0.00031225 / 0.001999) + 1e-8);
    assert_true(fabs(want[1][0] - p0_2) < 1e-8); /* step 1 left 0.9 − 2e-9 (the eps) */
    assert_int_equal(a.t, 3);
    vx_adam_free(&a);
    c.lr = 0;
    assert_int_equal(vx_adam_create(&c, 2, &a, &e), VX_ERR_ARG);
}

/* Decoupled weight decay (Loshchilov & Hutter): p ← p − lr · (m̂/(√v̂ + ε) + wd·p), the decay
 * pulling p toward 0. A flipped sign or a decay applied to the gradient (L2) instead of the
 * weight gives other numbers; parameter 2 has zero gradients, so only the decay moves it:
 * exactly p·(1 − lr·wd) a step. */
static void test_adam_weight_decay(void **state)
{
    (void)state;
    const double lr = 0.1, wd = 0.05;
    vx_adam_cfg c = {.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = wd};
    vx_adam a;
    vx_err e;
    assert_int_equal(vx_adam_create(&c, 3, &a, &e), VX_OK);
    float p[3] = {1.0f, -2.0f, 4.0f};
    const float grads[3][3] = {{0.5f, -1.0f, 0}, {-0.25f, 2.0f, 0}, {1.0f, 0.0f, 0}};
    double m[3] = {0}, v[3] = {0}, q[3] = {1.0, -2.0, 4.0};
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < 3; i++) {
            double g = grads[t - 1][i];
            m[i] = 0.9 * m[i] + 0.1 * g;
            v[i] = 0.999 * v[i] + 0.001 * g * g;
            double mh = m[i] / (1 - pow(0.9, t)), vh = v[i] / (1 - pow(0.999, t));
            q[i] -= lr * (mh / (sqrt(vh) + 1e-8) + wd * q[i]);
        }
        vx_adam_step(&a, p, grads[t - 1]);
        for (int i = 0; i < 3; i++) assert_near(p[i], q[i], 2e-6);
    }
    assert_near(p[2], 4.0 * pow(1 - lr * wd, 3), 1e-6); /* 4 · 0.995³ = 3.940299 */
    vx_adam_free(&a);
}

/* ---- a group of dense layers (fused trials) ---------------------------------------------------
 * Each member of a group is the layer alone on its own data: the same bits as the plain calls on
 * copies, and nothing written outside a member (the floats between members keep a sentinel). A
 * stride that counted one member's size wrong, or a gradient placed by the input's stride, fails
 * here; so does a wrong layer, against a float64 forward of the last member. */
#define SENTINEL 12345.0f
static float *filled(size_t n, uint64_t seed, uint64_t stream)
{
    float *v = malloc(n * sizeof *v);
    vx_rng g = vx_rng_make(seed, stream, 0);
    for (size_t i = 0; i < n; i++) v[i] = (float)vx_rng_normal(&g);
    return v;
}

static void test_dense_group(void **state)
{
    (void)state;
    enum { K = 3, IN = 7, OUT = 5, B = 4 };
    size_t off = 0, nw = 0;
    vx_dense d = vx_dense_place(&off, &nw, IN, OUT);
    /* dx and dy at strides of their own, unlike x and y's */
    vx_dense_group G = {K,
                        off + 4,
                        (size_t)B * IN + 4,
                        (size_t)B * OUT + 8,
                        (size_t)B * IN + 12,
                        (size_t)B * OUT + 16};
    size_t np = G.p * K, nx = G.x * K, ny = G.y * K, ndx = G.dx * K, ndy = G.dy * K;
    float *P = filled(np, 7, 1), *x = filled(nx, 7, 2), *dy = filled(ndy, 7, 3);
    float *dx = filled(ndx, 7, 4), *y = malloc(ny * 4), *g = malloc(np * 4);
    float *dx_solo = malloc(ndx * 4);
    memcpy(dx_solo, dx, ndx * 4);
    for (size_t i = 0; i < ny; i++) y[i] = SENTINEL;
    for (size_t i = 0; i < np; i++) g[i] = SENTINEL;
    for (int k = 0; k < K; k++) /* the padding of dx: the backward must not touch it */
        for (size_t i = (size_t)B * IN; i < G.dx; i++)
            dx[k * G.dx + i] = dx_solo[k * G.dx + i] = SENTINEL;
    vx_dense_ctx *c;
    vx_err e;
    assert_int_equal(vx_dense_ctx_create(NULL, 0, &c, &e), VX_OK);
    assert_int_equal(vx_dense_forward_group(c, &d, &G, P, x, B, y, 1, NULL, &e), VX_OK);
    assert_int_equal(vx_dense_backward_group(c, &d, &G, P, x, B, dy, g, dx, 1, NULL, &e), VX_OK);
    int differ = 0, touched = 0;
    float ys[B * OUT], gs[64], dxs[B * IN];
    assert_true(off <= 64);
    for (int k = 0; k < K; k++) {
        const float *Pk = P + k * G.p, *xk = x + k * G.x, *dyk = dy + k * G.dy;
        memcpy(dxs, dx_solo + k * G.dx, sizeof dxs);
        assert_int_equal(vx_dense_forward(c, &d, Pk, xk, B, ys, 1, NULL, &e), VX_OK);
        assert_int_equal(vx_dense_backward(c, &d, Pk, xk, B, dyk, gs, dxs, 1, NULL, &e), VX_OK);
        differ += memcmp(ys, y + k * G.y, sizeof ys) != 0;
        differ += memcmp(gs + d.w, g + k * G.p + d.w, (size_t)IN * OUT * 4) != 0;
        differ += memcmp(gs + d.b, g + k * G.p + d.b, (size_t)OUT * 4) != 0;
        differ += memcmp(dxs, dx + k * G.dx, sizeof dxs) != 0;
        for (size_t i = (size_t)B * OUT; i < G.y; i++) touched += y[k * G.y + i] != SENTINEL;
        for (size_t i = off; i < G.p; i++) touched += g[k * G.p + i] != SENTINEL;
        for (size_t i = (size_t)B * IN; i < G.dx; i++) touched += dx[k * G.dx + i] != SENTINEL;
    }
    /* the last member's forward in float64: relu(x·W + b), W [in × out] row-major */
    double worst = 0;
    const float *Pk = P + (K - 1) * G.p, *xk = x + (K - 1) * G.x, *yk = y + (K - 1) * G.y;
    for (int r = 0; r < B; r++)
        for (int j = 0; j < OUT; j++) {
            double v = Pk[d.b + j];
            for (int i = 0; i < IN; i++)
                v += (double)xk[r * IN + i] * Pk[d.w + (size_t)i * OUT + j];
            v = v > 0 ? v : 0;
            double err = fabs(yk[r * OUT + j] - v);
            worst = err > worst ? err : worst;
        }
    printf("dense group of %d: members differing from the layer alone %d, floats written between "
           "members %d, last member's forward against float64 %.2e\n",
           K, differ, touched, worst);
    assert_int_equal(differ, 0);
    assert_int_equal(touched, 0);
    assert_true(worst < 1e-5);
    /* strides that would overlap members are refused */
    vx_dense_group bad = G;
    bad.p = off - 1;
    assert_int_equal(vx_dense_forward_group(c, &d, &bad, P, x, B, y, 1, NULL, &e), VX_ERR_ARG);
    bad = G, bad.K = 65536; /* past a CUDA grid's second dimension */
    assert_int_equal(vx_dense_forward_group(c, &d, &bad, P, x, B, y, 1, NULL, &e), VX_ERR_ARG);
    bad = G, bad.dy = (size_t)B * OUT - 1;
    assert_int_equal(vx_dense_backward_group(c, &d, &bad, P, x, B, dy, g, dx, 0, NULL, &e),
                     VX_ERR_ARG);
    vx_dense_ctx_free(c);
    free(P), free(x), free(dy), free(dx), free(y), free(g), free(dx_solo);
}

/* A group of Q-networks: each member the network alone on its own weights and inputs (the same
 * bits as a network of its own), at the strides vx_qnet_member_strides gives for the forward
 * batch, which is past the batch run (so a stride taken from the batch reads a neighbour), and
 * nothing written between the members' gradients. */
static void test_qnet_group(void **state)
{
    (void)state;
    enum { K = 3, B = 5, MAXB = 7 };
    vx_qnet_cfg qc;
    small_cfg(&qc, 3);
    vx_qnet_layout L;
    vx_err e;
    assert_int_equal(vx_qnet_layout_make(&qc, &L, &e), VX_OK);
    vx_qnet_strides S = vx_qnet_member_strides(&L, MAXB);
    assert_true(S.params >= L.n_params && S.params % 4 == 0);
    assert_true(S.x >= (size_t)MAXB * qc.in_dim && S.q >= (size_t)MAXB * L.out_dim);
    float *P = calloc(K * S.params, 4), *x = filled(K * S.x, 9, 1), *dq = filled(K * S.q, 9, 2);
    float *g = malloc(K * S.params * 4), *gs = malloc(S.params * 4);
    for (size_t i = 0; i < K * S.params; i++) g[i] = SENTINEL;
    for (int k = 0; k < K; k++) vx_qnet_init(&L, 100 + (uint64_t)k, P + k * S.params);
    vx_qnet *grp, *one;
    assert_int_equal(vx_qnet_create_group(&L, K, MAXB, MAXB, NULL, &grp, &e), VX_OK);
    assert_int_equal(vx_qnet_members(grp), K);
    assert_int_equal(vx_qnet_strides_of(grp).x, S.x);
    assert_int_equal(vx_qnet_create(&L, MAXB, B, NULL, &one, &e), VX_OK);
    assert_int_equal(vx_qnet_forward(grp, P, x, B, NULL, &e), VX_OK);
    assert_int_equal(vx_qnet_backward(grp, P, x, B, dq, g, NULL, &e), VX_OK);
    const float *out = vx_qnet_output(grp);
    int differ = 0, touched = 0;
    for (int k = 0; k < K; k++) {
        const float *Pk = P + k * S.params, *xk = x + k * S.x;
        assert_int_equal(vx_qnet_forward(one, Pk, xk, B, NULL, &e), VX_OK);
        differ += memcmp(vx_qnet_output(one), out + k * S.q, (size_t)B * L.out_dim * 4) != 0;
        assert_int_equal(vx_qnet_backward(one, Pk, xk, B, dq + k * S.q, gs, NULL, &e), VX_OK);
        for (size_t i = 0; i < L.n_tensors; i++) { /* the tensors, not the padding between */
            char name[64];
            size_t off;
            int rows, cols;
            vx_qnet_tensor(&L, i, name, sizeof name, &off, &rows, &cols);
            differ += memcmp(gs + off, g + k * S.params + off, (size_t)rows * cols * 4) != 0;
        }
        for (size_t i = L.n_params; i < S.params; i++) touched += g[k * S.params + i] != SENTINEL;
    }
    printf("qnet group of %d: members differing from a network of their own %d, floats written "
           "past a member's gradients %d\n",
           K, differ, touched);
    assert_int_equal(differ, 0);
    assert_int_equal(touched, 0);
    vx_qnet *none;
    assert_int_equal(vx_qnet_create_group(&L, 0, MAXB, B, NULL, &none, &e), VX_ERR_ARG);
    assert_null(none);
    vx_qnet_free(grp);
    vx_qnet_free(one);
    free(P), free(x), free(dq), free(g), free(gs);
}

/* A group of optimizers: each member steps as an optimizer of its own with its settings would,
 * bit for bit — its rate (also from the controls), clip, decay, skip flag and step count — and
 * nothing is written between the members. */
static void test_optim_group(void **state)
{
    (void)state;
    enum { K = 3, N = 50, STRIDE = 56, STEPS = 3 };
    vx_adam_cfg ac[K];
    double clip[K] = {0.5, 0.0, 3.0}, lr[K] = {3e-3, 2e-2, 5e-2};
    int skip[K] = {0, 0, 0};
    for (int k = 0; k < K; k++) {
        vx_adam_cfg_default(&ac[k]);
        ac[k].lr = 1e-3 * (k + 1);
        ac[k].weight_decay = k == 1 ? 0.02 : 0;
    }
    float *p = filled(K * STRIDE, 11, 1), *q = malloc(K * STRIDE * 4);
    for (int k = 0; k < K; k++)
        for (int i = N; i < STRIDE; i++) p[k * STRIDE + i] = SENTINEL;
    memcpy(q, p, K * STRIDE * 4);
    vx_optim *grp, *one[K];
    vx_err e;
    assert_int_equal(vx_optim_create_group(ac, clip, N, STRIDE, K, NULL, &grp, &e), VX_OK);
    for (int k = 0; k < K; k++)
        assert_int_equal(vx_optim_create(&ac[k], clip[k], N, NULL, &one[k], &e), VX_OK);
    vx_optim_set_controls(grp, NULL, skip);
    int differ = 0;
    for (int step = 0; step < STEPS; step++) {
        if (step == 2) { /* rates from the controls, one member skipping */
            vx_optim_set_controls(grp, lr, skip);
            for (int k = 0; k < K; k++) vx_optim_set_controls(one[k], &lr[k], &skip[k]);
            skip[1] = 1;
        }
        float *g = filled(K * STRIDE, 12, 10 + (uint64_t)step), *h = malloc(K * STRIDE * 4);
        for (int i = 0; i < K * STRIDE; i++) g[i] *= 2.0f; /* norms about 14: the clips bite */
        memcpy(h, g, K * STRIDE * 4);
        assert_int_equal(vx_optim_step(grp, p, g, NULL, &e), VX_OK);
        for (int k = 0; k < K; k++)
            assert_int_equal(vx_optim_step(one[k], q + k * STRIDE, h + k * STRIDE, NULL, &e),
                             VX_OK);
        for (int k = 0; k < K; k++) {
            differ += memcmp(g + k * STRIDE, h + k * STRIDE, N * 4) != 0; /* clipped in place */
            differ += vx_optim_norm(grp)[k] != *vx_optim_norm(one[k]);
        }
        free(g), free(h);
    }
    differ += memcmp(p, q, K * STRIDE * 4) != 0; /* the padding included: still the sentinel */
    float m[K * STRIDE], v[K * STRIDE], m1[N], v1[N];
    int64_t t[K], t1;
    assert_int_equal(vx_optim_copy_state(grp, m, v, t, NULL, &e), VX_OK);
    for (int k = 0; k < K; k++) {
        assert_int_equal(vx_optim_copy_state(one[k], m1, v1, &t1, NULL, &e), VX_OK);
        differ +=
            memcmp(m + k * STRIDE, m1, sizeof m1) != 0 || memcmp(v + k * STRIDE, v1, sizeof v1);
        differ += t[k] != t1;
    }
    printf("optim group of %d: %d differences from optimizers of their own; step counts %lld, "
           "%lld, %lld (member 1 skipped one)\n",
           K, differ, (long long)t[0], (long long)t[1], (long long)t[2]);
    assert_int_equal(differ, 0);
    assert_int_equal(t[1], STEPS - 1);
    assert_int_equal(t[0], STEPS);
    for (int k = 0; k < K; k++) vx_optim_free(one[k]);
    vx_optim_free(grp);
    free(p), free(q);
}

/* An optimizer's state copied out (vx_optim_copy_state) and loaded into a fresh one
 * (vx_optim_load_state) continues bit for bit as the original: the moments and the step count t
 * both travel. A load that dropped t would take the fifth step with the first step's bias
 * corrections, 1/(1 − β^t) = 10 and 1000 instead of 2.44 and 200.4, moving each parameter by a
 * different amount; one that dropped the moments would step as Adam's first step does
 * (lr · sign(g)). The parameters after that step must equal the original's bit for bit. */
static void test_optim_state_round_trip(void **state)
{
    (void)state;
    enum { N = 20, BEFORE = 4 };
    vx_adam_cfg ac;
    vx_adam_cfg_default(&ac);
    ac.lr = 1e-2;
    vx_optim *a, *b;
    vx_err e;
    assert_int_equal(vx_optim_create(&ac, 0.0, N, NULL, &a, &e), VX_OK);
    assert_int_equal(vx_optim_create(&ac, 0.0, N, NULL, &b, &e), VX_OK);
    float *p = filled(N, 21, 1), q[N];
    for (int step = 0; step < BEFORE; step++) {
        float *g = filled(N, 22, 10 + (uint64_t)step);
        assert_int_equal(vx_optim_step(a, p, g, NULL, &e), VX_OK);
        free(g);
    }
    float m[N], v[N];
    int64_t t = 0;
    assert_int_equal(vx_optim_copy_state(a, m, v, &t, NULL, &e), VX_OK);
    assert_int_equal(t, BEFORE);
    assert_int_equal(vx_optim_load_state(b, m, v, &t, NULL, &e), VX_OK);
    memcpy(q, p, sizeof q);
    float *g = filled(N, 22, 99), h[N];
    memcpy(h, g, sizeof h);
    assert_int_equal(vx_optim_step(a, p, g, NULL, &e), VX_OK);
    assert_int_equal(vx_optim_step(b, q, h, NULL, &e), VX_OK);
    assert_memory_equal(p, q, sizeof q);
    float m2[N], v2[N];
    int64_t t2 = 0;
    assert_int_equal(vx_optim_copy_state(b, m2, v2, &t2, NULL, &e), VX_OK);
    assert_int_equal(t2, BEFORE + 1);
    vx_optim_free(a), vx_optim_free(b);
    free(p), free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_size),
        cmocka_unit_test(test_init_statistics),
        cmocka_unit_test(test_gradients_dqn),
        cmocka_unit_test(test_gradients_c51),
        cmocka_unit_test(test_dueling_and_float_matches_double),
        cmocka_unit_test(test_grad_clip),
        cmocka_unit_test(test_adam_three_steps),
        cmocka_unit_test(test_adam_weight_decay),
        cmocka_unit_test(test_dense_group),
        cmocka_unit_test(test_qnet_group),
        cmocka_unit_test(test_optim_group),
        cmocka_unit_test(test_optim_state_round_trip),
    };
    return cmocka_run_group_tests_name("nn", tests, NULL, NULL);
}

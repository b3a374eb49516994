/* test_ppo.c — PPO's arithmetic: the clipped surrogate and value losses and their gradients by
 * hand, sampling against the softmax (chi-square), GAE by hand across an episode end and a
 * truncation, and a float64 finite-difference check of the whole loss through the actor-critic
 * (separate and shared trunks); log π and the entropy by hand, each environment's own sampling
 * stream, the greedy tie-break, and the initial weights' scales. */
#include "ac_f64.h"
#include "helpers.h"
#include "vixen/actor_critic.h"
#include "vixen/ppo_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Uniform logits: π_b = 1/n_b, so log π(a) = −log 9 − 2 log 3 whatever the action. */
static const double LOG_U = -2.1972245773362196 - 2 * 1.0986122886681098;

/* The surrogate's four regimes (A ≷ 0, r inside or outside 1 ± ε) computed by hand: a flipped
 * advantage sign, a dropped clip or a clip applied the wrong way round each changes a value. */
static void test_surrogate_by_hand(void **state)
{
    (void)state;
    double z[VX_PPO_LOGITS] = {0}, dz[VX_PPO_LOGITS], dv;
    int32_t a[3] = {2, 1, 0};
    vx_ppo_loss_cfg c = {0.2, 0, 0.5, 0.0};
    vx_ppo_loss_out o;
    struct {
        double adv, r, pg, g; /* g: dL/dlogπ */
        int clipped;
    } cases[] = {
        {2.0, 1.5, -2.4, 0.0, 1},  /* max(−3, −2.4): the clipped term, no gradient */
        {-2.0, 1.5, 3.0, 3.0, 1},  /* max(3, 2.4): unclipped, −A·r */
        {2.0, 0.5, -1.0, -1.0, 1}, /* max(−1, −1.6): unclipped */
        {-2.0, 0.5, 1.6, 0.0, 1},  /* max(1, 1.6): clipped */
        {1.0, 1.1, -1.1, -1.1, 0}, /* inside the band: both terms agree */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        double old = LOG_U - log(cases[k].r);
        double L = vx_ppo_loss(&c, z, 0.0, a, old, 0.0, cases[k].adv, 0.0, 0.25, dz, &dv, &o);
        assert_near(o.pg, cases[k].pg, 1e-12);
        assert_near(L, cases[k].pg, 1e-12); /* V = R = 0, no entropy coefficient */
        assert_int_equal(o.clipped, cases[k].clipped);
        assert_near(o.approx_kl, (cases[k].r - 1) - log(cases[k].r), 1e-12);
        /* dL/dz_k = scale · g · (1[k = a_b] − 1/n_b) */
        for (int b = 0; b < 3; b++) {
            int n = vx_ppo_branch_n(b), off = vx_ppo_branch_off(b);
            for (int j = 0; j < n; j++) {
                double want = 0.25 * cases[k].g * ((j == a[b]) - 1.0 / n);
                assert_near(dz[off + j], want, 1e-12);
            }
        }
    }
    /* the entropy of the uniform policy, and its bonus in the loss */
    c.ent_coef = 0.1;
    double L = vx_ppo_loss(&c, z, 0.0, a, LOG_U, 0.0, 0.0, 0.0, 1.0, dz, &dv, &o);
    assert_near(o.entropy, -LOG_U, 1e-12);
    assert_near(L, -0.1 * -LOG_U, 1e-12);
}

/* The value loss, plain and clipped (ε 0.2), by hand. */
static void test_value_loss_by_hand(void **state)
{
    (void)state;
    double z[VX_PPO_LOGITS] = {0}, dz[VX_PPO_LOGITS], dv;
    int32_t a[3] = {0, 0, 0};
    vx_ppo_loss_cfg c = {0.2, 1, 0.5, 0.0};
    vx_ppo_loss_out o;
    struct {
        double v, old, ret, loss, g;
    } cases[] = {
        {1.0, 0.0, 0.5, 0.125, 0.5},    /* unclipped ½·0.25 beats clipped ½·0.09 */
        {0.0, 1.0, 0.9, 0.405, -0.9},   /* unclipped ½·0.81 beats clipped ½·0.01 */
        {0.5, 0.0, 0.45, 0.03125, 0.0}, /* clipped ½·0.0625 beats ½·0.0025: no gradient */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        vx_ppo_loss(&c, z, cases[k].v, a, LOG_U, cases[k].old, 0.0, cases[k].ret, 1.0, dz, &dv, &o);
        assert_near(o.v, cases[k].loss, 1e-12);
        assert_near(dv, 0.5 * cases[k].g, 1e-12); /* c_v · dL_v/dV */
    }
    c.clip_value = 0; /* the third case unclipped: ½ (0.05)² and slope 0.05 */
    vx_ppo_loss(&c, z, 0.5, a, LOG_U, 0.0, 0.0, 0.45, 1.0, dz, &dv, &o);
    assert_near(o.v, 0.00125, 1e-12);
    assert_near(dv, 0.5 * 0.05, 1e-12);
}

/* Sampling follows the softmax: 60,000 independent draws (one Philox counter each) of a fixed
 * policy, each branch's counts against n·π by chi-square at significance 1e-4 (8, 2 and 2
 * degrees of freedom: limits 33.7, 18.4, 18.4); a sampler that draws from softmax(2z) or
 * ignores the logits gives statistics in the hundreds. The returned log π matches the action. */
static void test_sampling_follows_the_softmax(void **state)
{
    (void)state;
    double z[VX_PPO_LOGITS] = {0.5, -1, 2, 0, 0.3, -0.7, 1.2, 0.1, -2, 1, 0, -1, -0.5, 0.5, 0};
    double lp[VX_PPO_LOGITS];
    for (int b = 0; b < 3; b++)
        vx_ppo_log_softmax(z + vx_ppo_branch_off(b), vx_ppo_branch_n(b), lp + vx_ppo_branch_off(b),
                           NULL);
    const int N = 60000;
    double count[VX_PPO_LOGITS] = {0};
    for (int t = 0; t < N; t++) {
        int32_t a[3];
        double logp = vx_ppo_sample(z, 7, 3, (uint64_t)t, a);
        double want = 0;
        for (int b = 0; b < 3; b++) {
            count[vx_ppo_branch_off(b) + a[b]]++;
            want += lp[vx_ppo_branch_off(b) + a[b]];
        }
        assert_near(logp, want, 1e-12);
    }
    const double limit[3] = {33.7, 18.4, 18.4};
    for (int b = 0; b < 3; b++) {
        double x2 = 0;
        for (int k = 0; k < vx_ppo_branch_n(b); k++) {
            double e = N * exp(lp[vx_ppo_branch_off(b) + k]);
            double d = count[vx_ppo_branch_off(b) + k] - e;
            x2 += d * d / e;
        }
        printf("branch %d: X² %.1f (limit %.1f)\n", b, x2, limit[b]);
        assert_true(x2 < limit[b]);
    }
    /* the greedy action is each branch's mode */
    int32_t g[3];
    vx_ppo_greedy(z, g);
    assert_int_equal(g[0], 2);
    assert_int_equal(g[1], 0);
    assert_int_equal(g[2], 1);
}

/* GAE over 6 steps of one environment: a termination at t = 1 (no bootstrap, no carry), a
 * truncation at t = 3 (bootstrap from the final observation's value, no carry), written out. */
static void test_gae_by_hand(void **state)
{
    (void)state;
    const double g = 0.9, l = 0.8;
    float r[6] = {1, 2, -1, 0.5, 3, -2}, v[6] = {0.5, 1, -0.5, 2, 1.5, 0};
    float boot[6] = {0, 0, 0, 4, 0, 0};
    uint8_t te[6] = {0, 1, 0, 0, 0, 0}, tr[6] = {0, 0, 0, 1, 0, 0};
    float last = 0.25, adv[6];
    vx_ppo_gae(6, 1, r, te, tr, v, boot, last, g, l, adv);
    double d5 = -2 + g * 0.25 - 0, a5 = d5;
    double d4 = 3 + g * 0 - 1.5, a4 = d4 + g * l * a5;
    double d3 = 0.5 + g * 4 - 2, a3 = d3; /* truncated: V(final obs) = 4, nothing carried */
    double d2 = -1 + g * 2 - (-0.5), a2 = d2 + g * l * a3;
    double d1 = 2 + 0 - 1, a1 = d1; /* terminated */
    double d0 = 1 + g * 1 - 0.5, a0 = d0 + g * l * a1;
    double want[6] = {a0, a1, a2, a3, a4, a5};
    for (int t = 0; t < 6; t++) assert_near(adv[t], want[t], 1e-6);
}

/* The whole loss through the network: L(θ) = (1/B) Σ_i loss_i(logits_i(θ), V_i(θ)) in float64,
 * its gradient from vx_ppo_loss's dlogits/dvalue backpropagated by ac_impl.h, against central
 * differences on every parameter. The samples are drawn so the ratios straddle the clip (some
 * inside, some outside), values straddle the value clip, and no ReLU input lies within 1e-3 of 0
 * — the loss is smooth where it is probed. */
static double whole_loss(const vx_ac_layout *L, const double *p, const double *x, int B,
                         const int32_t *a, const double *old_lp, const double *old_v,
                         const double *adv, const double *ret, const vx_ppo_loss_cfg *c,
                         double *dlogits, double *dvalue, int *clipped)
{
    int K = L->cfg.n_logits;
    double *z = malloc((size_t)B * K * sizeof *z), *v = malloc((size_t)B * sizeof *v), loss = 0;
    ac64_forward(L, p, x, B, z, v);
    double dz[VX_PPO_LOGITS], dv;
    vx_ppo_loss_out o;
    for (int i = 0; i < B; i++) {
        loss += vx_ppo_loss(c, z + (size_t)i * K, v[i], a + 3 * i, old_lp[i], old_v[i], adv[i],
                            ret[i], 1.0 / B, dz, &dv, &o) /
                B;
        if (dlogits) memcpy(dlogits + (size_t)i * K, dz, sizeof dz), dvalue[i] = dv;
        if (clipped) clipped[i] = o.clipped;
    }
    free(z), free(v);
    return loss;
}

static void gradient_check(int shared)
{
    vx_ac_cfg cfg;
    vx_ac_cfg_default(&cfg);
    cfg.in_dim = 7, cfg.n_trunk = 2, cfg.trunk[0] = 10, cfg.trunk[1] = 8, cfg.shared = shared;
    vx_ac_layout L;
    vx_err e;
    assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
    enum { B = 8 };
    float *pf = malloc(L.n_params * sizeof *pf);
    vx_ac_init(&L, 5, pf);
    double *p = malloc(L.n_params * sizeof *p), *g = calloc(L.n_params, sizeof *g); /* padding: 0 */
    double x[B * 7], old_lp[B], old_v[B], adv[B], ret[B], z[B * VX_PPO_LOGITS], v[B];
    int32_t a[B * 3];
    vx_rng r;
    for (uint64_t seed = 11;; seed++) { /* the first draw with every ReLU input ≥ 1e-3 from 0 */
        r = vx_rng_make(seed, 0, 0);
        for (size_t i = 0; i < L.n_params; i++) /* the head gains are tiny: widen them to probe */
            p[i] = pf[i] + 0.3 * vx_rng_normal(&r);
        for (int i = 0; i < B * 7; i++) x[i] = vx_rng_normal(&r);
        if (ac64_min_preact(&L, p, x, B) > 1e-3) break;
        assert_true(seed < 200);
    }
    ac64_forward(&L, p, x, B, z, v);
    for (int i = 0; i < B; i++) {
        for (int b = 0; b < 3; b++) a[3 * i + b] = (int32_t)vx_rng_below(&r, vx_ppo_branch_n(b));
        double lp = vx_ppo_logp_entropy(z + i * VX_PPO_LOGITS, a + 3 * i, NULL);
        /* ratios 0.6 … 1.45: half inside 1 ± 0.2, half outside */
        old_lp[i] = lp - log(0.6 + 0.85 * (i + 0.5) / B);
        old_v[i] = v[i] + (i % 2 ? 0.5 : -0.05);
        adv[i] = vx_rng_normal(&r);
        ret[i] = v[i] + vx_rng_normal(&r);
    }
    vx_ppo_loss_cfg c = {0.2, 1, 0.5, 0.01};
    double dl[B * VX_PPO_LOGITS], dv[B];
    int clipped[B], n_clip = 0;
    whole_loss(&L, p, x, B, a, old_lp, old_v, adv, ret, &c, dl, dv, clipped);
    for (int i = 0; i < B; i++) n_clip += clipped[i];
    assert_true(n_clip > 0 && n_clip < B);
    ac64_backward(&L, p, x, B, dl, dv, g);
    /* relative to the larger of the two derivatives, floored at 1e-6 of the largest gradient:
     * a derivative of 1e-12 is all rounding in a central difference */
    double gmax = 0;
    for (size_t i = 0; i < L.n_params; i++) gmax = fabs(g[i]) > gmax ? fabs(g[i]) : gmax;
    double worst = 0, h = 1e-5;
    for (size_t i = 0; i < L.n_params; i++) {
        double keep = p[i];
        p[i] = keep + h;
        double up = whole_loss(&L, p, x, B, a, old_lp, old_v, adv, ret, &c, NULL, NULL, NULL);
        p[i] = keep - h;
        double dn = whole_loss(&L, p, x, B, a, old_lp, old_v, adv, ret, &c, NULL, NULL, NULL);
        p[i] = keep;
        double fd = (up - dn) / (2 * h);
        double big = fabs(fd) > fabs(g[i]) ? fabs(fd) : fabs(g[i]);
        double err = fabs(fd - g[i]) / (big > 1e-6 * gmax ? big : 1e-6 * gmax);
        worst = err > worst ? err : worst;
    }
    printf("%s trunk: %zu parameters, %d of %d samples clipped: worst relative error %.2e\n",
           shared ? "shared" : "separate", L.n_params, n_clip, B, worst);
    assert_true(worst < 1e-5);
    free(pf), free(p), free(g);
}

static void test_whole_loss_gradient_float64(void **state)
{
    (void)state;
    gradient_check(0);
    gradient_check(1);
}

/* The default actor-critic is about 70 K parameters, and the float CPU pass matches float64. */
static void test_default_size_and_float_forward(void **state)
{
    (void)state;
    vx_ac_cfg cfg;
    vx_ac_cfg_default(&cfg);
    vx_ac_layout L;
    vx_err e;
    assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
    printf("default actor-critic: %zu weights\n", L.n_weights);
    assert_true(L.n_weights > 60000 && L.n_weights < 80000);
    float *p = malloc(L.n_params * sizeof *p), x[4 * VX_OBS_DIM];
    double *pd = malloc(L.n_params * sizeof *pd), xd[4 * VX_OBS_DIM];
    vx_ac_init(&L, 3, p);
    vx_rng r = vx_rng_make(2, 0, 0);
    for (int i = 0; i < 4 * VX_OBS_DIM; i++) xd[i] = x[i] = (float)vx_rng_normal(&r);
    for (size_t i = 0; i < L.n_params; i++) pd[i] = p[i];
    vx_ac_ws ws;
    assert_int_equal(vx_ac_ws_create(&L, 4, &ws, &e), VX_OK);
    vx_ac_forward_ref(&L, p, x, 4, &ws);
    double z[4 * VX_PPO_LOGITS], v[4];
    ac64_forward(&L, pd, xd, 4, z, v);
    for (int i = 0; i < 4 * VX_PPO_LOGITS; i++) assert_near(ws.logits[i], z[i], 1e-5);
    for (int i = 0; i < 4; i++) assert_near(ws.value[i], v[i], 1e-4 * (1 + fabs(v[i])));
    /* the policy head's gain 0.01: the first policy is close to uniform */
    for (int i = 0; i < 4 * VX_PPO_LOGITS; i++) assert_true(fabs(ws.logits[i]) < 0.2);
    vx_ac_ws_free(&ws);
    free(p), free(pd);
}

/* log π(a|s) and the entropy of the factorised policy by hand: per branch p_k = e^{z_k} / Σ e^z,
 * the entropy −Σ p log p summed over the branches, log π the sum of the chosen log p. */
static void test_logp_entropy_by_hand(void **state)
{
    (void)state;
    double z[VX_PPO_LOGITS] = {0.5, -1, 2, 0, 0.3, -0.7, 1.2, 0.1, -2, 1, 0, -1, -0.5, 0.5, 0};
    int32_t a[3] = {6, 2, 1};
    double want_lp = 0, want_h = 0;
    for (int b = 0; b < 3; b++) {
        const double *zb = z + vx_ppo_branch_off(b);
        int n = vx_ppo_branch_n(b);
        double s = 0;
        for (int k = 0; k < n; k++) s += exp(zb[k]);
        for (int k = 0; k < n; k++) want_h -= exp(zb[k]) / s * log(exp(zb[k]) / s);
        want_lp += log(exp(zb[a[b]]) / s);
    }
    double h, lp = vx_ppo_logp_entropy(z, a, &h);
    assert_near(lp, want_lp, 1e-12);
    assert_near(h, want_h, 1e-12);
}

/* Each environment samples from its own Philox stream, as ppo_math.h documents (a GPU twin must
 * draw the same): environment e at step t inverts branch b's CDF at the uniform of stream
 * (seed, VX_PPO_ACT_STREAM + e) at counter (3t + b) · 2^16 — checked exactly for a few (e, t).
 * And the environments' draws are independent: under uniform logits two environments pick the
 * same action triple with probability 1/81, so over 2,000 steps 24.7 coincidences are expected
 * (sd 4.9); a sampler sharing one stream among environments gives 2,000. The limit 60 is 7 sd
 * above the mean. */
static void test_sampling_streams_per_environment(void **state)
{
    (void)state;
    double z[VX_PPO_LOGITS] = {0.5, -1, 2, 0, 0.3, -0.7, 1.2, 0.1, -2, 1, 0, -1, -0.5, 0.5, 0};
    const uint64_t envs[3] = {0, 1, 5}, steps[2] = {0, 17};
    for (int ei = 0; ei < 3; ei++)
        for (int si = 0; si < 2; si++) {
            int32_t a[3];
            vx_ppo_sample(z, 7, envs[ei], steps[si], a);
            for (int b = 0; b < 3; b++) {
                /* branch b's uniform: counter (3t + b) · 2^16 of the environment's stream */
                vx_rng g = vx_rng_make(7, VX_PPO_ACT_STREAM + envs[ei], (steps[si] * 3 + b) << 16);
                const double *zb = z + vx_ppo_branch_off(b);
                int n = vx_ppo_branch_n(b), want = n - 1;
                double s = 0, c = 0, u = vx_rng_uniform_double(&g);
                for (int k = 0; k < n; k++) s += exp(zb[k]);
                for (int k = 0; k < n; k++) {
                    c += exp(zb[k]) / s;
                    if (u < c) {
                        want = k;
                        break;
                    }
                }
                assert_int_equal(a[b], want);
            }
        }
    double zero[VX_PPO_LOGITS] = {0};
    int same = 0;
    for (uint64_t t = 0; t < 2000; t++) {
        int32_t a0[3], a1[3];
        vx_ppo_sample(zero, 7, 0, t, a0);
        vx_ppo_sample(zero, 7, 1, t, a1);
        same += a0[0] == a1[0] && a0[1] == a1[1] && a0[2] == a1[2];
    }
    printf("environments 0 and 1: %d identical actions in 2000 steps (24.7 expected)\n", same);
    assert_true(same < 60);
    /* and consecutive steps: under uniform logits the urgency (3 levels) at t equals the exposure
     * (9) at t + 1 divided by 3 with probability 1/3 (666 ± 21 of 2,000); a step whose third
     * draw ran on into the next step's counter shared that uniform, and they agreed almost
     * always. The limit 900 is 11 sd above the mean. */
    int agree = 0;
    int32_t prev[3], cur[3];
    vx_ppo_sample(zero, 7, 0, 0, prev);
    for (uint64_t t = 1; t <= 2000; t++) {
        vx_ppo_sample(zero, 7, 0, t, cur);
        agree += prev[2] == cur[0] / 3;
        memcpy(prev, cur, sizeof prev);
    }
    printf("urgency at t = exposure at t + 1 over 3: %d of 2000 steps (666 expected)\n", agree);
    assert_true(agree < 900);
}

/* The greedy action breaks ties toward the lowest index, as ppo_math.h documents: all-zero
 * logits give (0, 0, 0), and a branch whose maximum appears twice takes the first. */
static void test_greedy_ties_to_lowest(void **state)
{
    (void)state;
    double z[VX_PPO_LOGITS] = {0};
    int32_t g[3];
    vx_ppo_greedy(z, g);
    assert_int_equal(g[0], 0);
    assert_int_equal(g[1], 0);
    assert_int_equal(g[2], 0);
    z[2] = z[6] = 1.5, z[10] = z[11] = 0.5, z[13] = z[14] = -0.5, z[12] = -1;
    vx_ppo_greedy(z, g);
    assert_int_equal(g[0], 2);
    assert_int_equal(g[1], 1);
    assert_int_equal(g[2], 1);
}

/* The initial weights of the default network are N(0, gain² / fan_in) — gain √2 for the ReLU
 * trunks, 0.01 for the policy head, 1 for the value head (CleanRL's orthogonal-init scales) —
 * and the biases 0. Each weight tensor's sample sd against gain / √fan_in within 6 of its
 * standard errors (1 / √(2n) relatively; n ≥ 160, so at most 34 %): a gain of another layer, or
 * fan_out in place of fan_in, is off by a factor of 12 or more somewhere. */
static void test_init_scales(void **state)
{
    (void)state;
    vx_ac_cfg cfg;
    vx_ac_cfg_default(&cfg);
    vx_ac_layout L;
    vx_err e;
    assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
    float *p = malloc(L.n_params * sizeof *p);
    vx_ac_init(&L, 3, p);
    int weights = 0;
    for (size_t i = 0; i < L.n_tensors; i++) {
        char name[64];
        size_t off;
        int r, c;
        vx_ac_tensor(&L, i, name, sizeof name, &off, &r, &c);
        size_t n = (size_t)r * c;
        if (strstr(name, ".bias")) {
            for (size_t k = 0; k < n; k++) assert_true(p[off + k] == 0.0f);
            continue;
        }
        double gain = strncmp(name, "pi_head", 7) == 0  ? 0.01
                      : strncmp(name, "v_head", 6) == 0 ? 1.0
                                                        : sqrt(2.0);
        double want = gain / sqrt((double)r), s2 = 0; /* r: the fan-in (W is in × out) */
        for (size_t k = 0; k < n; k++) s2 += (double)p[off + k] * p[off + k];
        double sd = sqrt(s2 / (double)n), tol = 6 / sqrt(2.0 * (double)n);
        printf("%s: %d × %d, sd %.4g (want %.4g)\n", name, r, c, sd, want);
        assert_true(fabs(sd / want - 1) < tol);
        weights++;
    }
    assert_int_equal(weights, 6); /* pi.0, pi.1, pi_head, v.0, v.1, v_head */
    free(p);
}

/* test_ppo_run.c */
void test_minibatch_normalises_advantages(void **state);
void test_ppo_run_and_exact_resume(void **state);
void test_iterations_match_replica(void **state);
void test_target_kl_stops_on_the_epoch_mean(void **state);
void test_lr_schedule_and_greedy_batches(void **state);
void test_obs_normaliser_by_hand(void **state);
void test_settings_keys_and_defaults(void **state);
void test_settings_rollout_sizes(void **state);
void test_epoch_metrics_policy_and_save(void **state);
void test_target_kl_reads_each_epoch_alone(void **state);
void test_iterations_match_replica_with_terminations(void **state);
void test_norm_obs_off_leaves_observations_raw(void **state);
void test_envs_exceed_minibatch_rows(void **state);
/* test_ppo_fused_plan.c */
void test_fused_fragment_copies(void **state);
void test_fused_smem_and_rows(void **state);

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_surrogate_by_hand),
        cmocka_unit_test(test_value_loss_by_hand),
        cmocka_unit_test(test_sampling_follows_the_softmax),
        cmocka_unit_test(test_gae_by_hand),
        cmocka_unit_test(test_whole_loss_gradient_float64),
        cmocka_unit_test(test_default_size_and_float_forward),
        cmocka_unit_test(test_logp_entropy_by_hand),
        cmocka_unit_test(test_sampling_streams_per_environment),
        cmocka_unit_test(test_greedy_ties_to_lowest),
        cmocka_unit_test(test_init_scales),
        cmocka_unit_test(test_minibatch_normalises_advantages),
        cmocka_unit_test(test_ppo_run_and_exact_resume),
        cmocka_unit_test(test_iterations_match_replica),
        cmocka_unit_test(test_target_kl_stops_on_the_epoch_mean),
        cmocka_unit_test(test_lr_schedule_and_greedy_batches),
        cmocka_unit_test(test_obs_normaliser_by_hand),
        cmocka_unit_test(test_settings_keys_and_defaults),
        cmocka_unit_test(test_settings_rollout_sizes),
        cmocka_unit_test(test_epoch_metrics_policy_and_save),
        cmocka_unit_test(test_target_kl_reads_each_epoch_alone),
        cmocka_unit_test(test_iterations_match_replica_with_terminations),
        cmocka_unit_test(test_norm_obs_off_leaves_observations_raw),
        cmocka_unit_test(test_envs_exceed_minibatch_rows),
        cmocka_unit_test(test_fused_fragment_copies),
        cmocka_unit_test(test_fused_smem_and_rows),
    };
    return cmocka_run_group_tests_name("ppo", tests, NULL, NULL);
}

/* test_dqn.c — the Double-DQN target and losses by hand, termination versus truncation, the C51
 * projection (mass kept, l = u handled), C51 gradients by finite differences and against the
 * online-argmax target, n-step returns across episode ends, an update's priorities against a
 * float64 γ^m target, two whole updates (loss, norm, clip, Adam, every weight, priorities, target
 * sync) against float64 ones worked out in dqn_ref64.c, ε-greedy acting, a learner that learns
 * a bandit, settings whose derived sizes overflow refused at creation, and a checkpoint whose
 * contents were damaged (yet still carry a matching checksum) refused on resume, naming the tensor
 * or counter. */
#include "helpers.h"
#include "dqn_ref64.h"
#include "vixen/dqn.h"
#include "vixen/dqn_act.h"
#include "vixen/io.h"
#include "vixen/philox.h"
#include "vixen/train.h"
#include "vixen/util.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static vx_loss_shape shape2(int atoms)
{
    vx_loss_shape s = {0};
    s.n_branches = 2;
    s.branch[0] = 3, s.branch[1] = 2;
    s.offset[0] = 0, s.offset[1] = 3 * atoms;
    s.atoms = atoms;
    s.v_min = -2, s.v_max = 2;
    return s;
}

static void test_expected_value_target_by_hand(void **state)
{
    (void)state;
    vx_loss_shape s = shape2(1);
    float qs[5] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f};
    float qn[5] = {0.1f, 0.9f, 0.3f, 2.0f, 1.0f};  /* online picks a* = (1, 0) */
    float qt[5] = {7.0f, 4.0f, 9.0f, 6.0f, -8.0f}; /* target evaluates 4 and 6 */
    int32_t a[3] = {2, 1, 0};
    float dq[5], pr;
    /* y = 0.5 + 0.9 · (4 + 6)/2 = 5; δ = (0.5 − 5, 3 − 5) = (−4.5, −2) */
    float l =
        vx_loss_dqn(&s, VX_LOSS_MSE, 1, 0.9f, qs, qn, qt, a, 0.5f, 0, 2.0f, 0.25f, dq, 5, &pr);
    assert_near(l, 2.0f * (0.5f * 20.25f + 0.5f * 4.0f) / 2, 1e-5);
    assert_near(pr, (4.5f + 2.0f) / 2, 1e-6);
    float want[5] = {0, 0, 2.0f * 0.5f * -4.5f * 0.25f, 0, 2.0f * 0.5f * -2.0f * 0.25f};
    for (int i = 0; i < 5; i++) assert_near(dq[i], want[i], 1e-6);
    /* terminated: no bootstrap, y = r */
    l = vx_loss_dqn(&s, VX_LOSS_MSE, 1, 0.9f, qs, qn, qt, a, 0.5f, 1, 1.0f, 1.0f, dq, 5, &pr);
    assert_near(pr, (0.0f + 2.5f) / 2, 1e-6); /* δ = (0.5 − 0.5, 3 − 0.5) */
    /* Huber beyond κ: the gradient is ±κ */
    l = vx_loss_dqn(&s, VX_LOSS_HUBER, 1, 0.9f, qs, qn, qt, a, 0.5f, 0, 1.0f, 1.0f, dq, 5, &pr);
    assert_near(dq[2], -0.5f, 1e-6); /* w · (1/K) · (−κ) */
    assert_near(dq[4], -0.5f, 1e-6);
    assert_near(l, ((4.5f - 0.5f) + (2.0f - 0.5f)) / 2, 1e-5);
    /* ties go to the lowest action */
    float tie[5] = {1, 1, 1, 2, 2};
    assert_int_equal(vx_loss_argmax(&s, tie, 0), 0);
    assert_int_equal(vx_loss_argmax(&s, tie, 1), 0);
}

static void test_c51_projection_keeps_mass(void **state)
{
    (void)state;
    vx_loss_shape s = shape2(5); /* support −2, −1, 0, 1, 2 */
    float p[5] = {0.1f, 0.2f, 0.3f, 0.25f, 0.15f};
    float m[5] = {0};
    /* r = 0, γ = 1: every atom lands exactly on itself (l = u): the distribution is unchanged */
    vx_loss_project(&s, p, 0.0f, 1.0f, 1.0f, m);
    for (int i = 0; i < 5; i++) assert_near(m[i], p[i], 1e-7);
    /* r = 0.5, γ = 1: each atom splits half and half to its neighbours; the top one clips */
    memset(m, 0, sizeof m);
    vx_loss_project(&s, p, 0.5f, 1.0f, 1.0f, m);
    float want[5] = {0.05f, 0.05f + 0.1f, 0.1f + 0.15f, 0.15f + 0.125f, 0.125f + 0.15f};
    for (int i = 0; i < 5; i++) assert_near(m[i], want[i], 1e-6);
    /* random shifts: the mass is always 1 */
    vx_rng g = vx_rng_make(4, 0, 0);
    for (int it = 0; it < 1000; it++) {
        memset(m, 0, sizeof m);
        float r = (float)(6 * vx_rng_uniform_double(&g) - 3), gm = vx_rng_uniform(&g);
        if (it % 10 == 0) r = (float)((int)r); /* integers hit atoms exactly */
        vx_loss_project(&s, p, r, gm, 1.0f, m);
        float sum = 0;
        for (int i = 0; i < 5; i++) sum += m[i], assert_true(m[i] >= 0);
        assert_near(sum, 1.0f, 1e-6);
    }
}

/* The projection at the support's edges, where its clamps work.
 * - A target on an atom (r = 1 = dz, γ = 1) moves each atom's whole probability one atom up, the
 *   top two onto the top atom: exact sums, no mass split.
 * - Targets far outside the support (r = ±1e10, ±inf) put the whole mass on the end atom. Without
 *   the clamp of r + γz to [v_min, v_max], b = (tz − v_min)/dz is 1e10 or inf and its conversion
 *   to int is undefined (x86 gives INT_MIN, clamped to atom 0: the mass at the wrong end).
 * - On a support whose dz is not exact in float (8 atoms on ±9.5: dz = 19/7), a target beyond
 *   the top clamps to v_max, yet (v_max − v_min)/dz rounds to 7.0000005, so ceil(b) is 8, one
 *   past the last atom: the clamp of u keeps the write inside (m[8] stays untouched) and the whole
 *   probability on atom 7 (l = u), where a missing clamp writes 5e-7 of it past the support. */
static void test_c51_projection_at_the_support_edges(void **state)
{
    (void)state;
    vx_loss_shape s = shape2(5); /* support −2, −1, 0, 1, 2 */
    float p[5] = {0.1f, 0.2f, 0.3f, 0.25f, 0.15f};
    float m[5] = {0};
    vx_loss_project(&s, p, 1.0f, 1.0f, 1.0f, m);
    float up[5] = {0, 0.1f, 0.2f, 0.3f, 0.25f + 0.15f};
    for (int i = 0; i < 5; i++) assert_true(m[i] == up[i]);
    const float far[4] = {1e10f, INFINITY, -1e10f, -INFINITY};
    for (int k = 0; k < 4; k++) {
        memset(m, 0, sizeof m);
        vx_loss_project(&s, p, far[k], 0.9f, 1.0f, m);
        int end = far[k] > 0 ? 4 : 0;
        float sum = 0;
        for (int j = 0; j < 5; j++) sum += p[j];
        for (int i = 0; i < 5; i++) assert_true(m[i] == (i == end ? sum : 0.0f));
    }
    vx_loss_shape s8 = s;
    s8.atoms = 8, s8.v_min = -9.5f, s8.v_max = 9.5f;
    float dz = (s8.v_max - s8.v_min) / 7.0f;
    assert_true((s8.v_max - s8.v_min) / dz > 7.0f); /* the rounding this case is for */
    float p8[8] = {0}, m8[9] = {0};                 /* m8[8]: one past the support */
    for (int j = 0; j < 8; j++) {
        memset(p8, 0, sizeof p8), memset(m8, 0, sizeof m8);
        p8[j] = 1.0f;
        vx_loss_project(&s8, p8, 100.0f, 1.0f, 1.0f, m8);
        for (int i = 0; i < 7; i++) assert_true(m8[i] == 0.0f);
        assert_true(m8[7] == 1.0f);
        assert_true(m8[8] == 0.0f);
    }
}

/* Logits far from 0 (a C51 head that has drifted, or a sharply peaked one). The softmax and the
 * expected value subtract the row's max before exp: logits 100 … 96 overflow expf (past 88.7) and
 * give inf/inf = NaN without it; the answer is p_i ∝ e^{−i} whatever the offset, written out here
 * in double. The cross-entropy floors log p at 1e-30: a probability that underflows to 0 at an
 * atom the target gives no mass must add nothing (0 · log 0 would be NaN), and one at an atom
 * that has target mass must give a large finite loss, not inf. */
static void test_c51_far_logits(void **state)
{
    (void)state;
    vx_loss_shape s = shape2(5);
    float x[25] = {0}, p[5];
    for (int i = 0; i < 5; i++) x[i] = 100.0f - (float)i; /* branch 0, action 0 */
    double den = 0, q = 0;
    for (int i = 0; i < 5; i++) den += exp(-i);
    for (int i = 0; i < 5; i++) q += exp(-i) / den * (i - 2);
    vx_loss_softmax(x, 5, p);
    for (int i = 0; i < 5; i++) assert_near(p[i], exp(-i) / den, 1e-6);
    assert_near(vx_loss_q(&s, x, 0, 0), q, 1e-5);
    /* terminated, r = 0: the target is the atom z = 0 (index 2) with mass 1 in both branches */
    float qs[25] = {0}, qn[25] = {0}, qt[25] = {0}, dq[25], pr;
    int32_t a[2] = {1, 0};
    int j0 = s.offset[0] + a[0] * 5, j1 = s.offset[1] + a[1] * 5;
    qs[j0] = -200.0f, qs[j1 + 4] = -200.0f; /* e^−200 underflows: p = 0 at atoms 0 and 4 */
    float l = vx_loss_c51(&s, 0.9f, qs, qn, qt, a, 0.0f, 1, 1.0f, 1.0f, dq, 25, &pr);
    assert_true(isfinite(l));
    assert_near(l, log(4.0), 1e-6); /* each branch: −log p(z = 0) = −log(1/4) */
    for (int i = 0; i < 25; i++) assert_true(isfinite(dq[i]));
    assert_near(dq[j0 + 2], 0.5 * (0.25 - 1), 1e-7); /* w/K · (p − m) */
    qs[j0 + 2] = -200.0f; /* now the target's atom has probability 0 in branch 0 */
    l = vx_loss_c51(&s, 0.9f, qs, qn, qt, a, 0.0f, 1, 1.0f, 1.0f, dq, 25, &pr);
    assert_true(isfinite(l) && l > 30);
}

static void test_c51_gradient_and_shared_target(void **state)
{
    (void)state;
    vx_loss_shape s = shape2(5);
    int O = 5 * 5;
    float qs[25], qn[25], qt[25], dq[25], dq2[25], pr;
    vx_rng g = vx_rng_make(8, 0, 0);
    for (int i = 0; i < O; i++)
        qs[i] = (float)vx_rng_normal(&g), qn[i] = (float)vx_rng_normal(&g),
        qt[i] = (float)vx_rng_normal(&g);
    int32_t a[3] = {1, 1, 0};
    float l = vx_loss_c51(&s, 0.9f, qs, qn, qt, a, 0.3f, 0, 0.7f, 1.0f, dq, O, &pr);
    assert_near(l, 0.7f * pr, 1e-6);
    /* finite differences on every logit */
    for (int i = 0; i < O; i++) {
        float keep = qs[i], h = 1e-2f;
        qs[i] = keep + h;
        float up = vx_loss_c51(&s, 0.9f, qs, qn, qt, a, 0.3f, 0, 0.7f, 1.0f, dq2, O, &pr);
        qs[i] = keep - h;
        float dn = vx_loss_c51(&s, 0.9f, qs, qn, qt, a, 0.3f, 0, 0.7f, 1.0f, dq2, O, &pr);
        qs[i] = keep;
        assert_near(dq[i], (up - dn) / (2 * h), 2e-3);
    }
    /* the shared target's mean is the expected-value BDQ target: r + γ mean_d E[Z⁻_d(s', a*_d)]
     * (when nothing clips) — checked through a loss whose gradient is zero at the target */
    float m[5] = {0}, p[5];
    float boot = 0;
    for (int d = 0; d < 2; d++) {
        int astar = vx_loss_argmax(&s, qn, d);
        vx_loss_softmax(qt + s.offset[d] + astar * 5, 5, p);
        vx_loss_project(&s, p, 0.1f, 0.5f, 0.5f, m);
        boot += 0.5f * vx_loss_q(&s, qt, d, astar);
    }
    float mean = 0;
    for (int i = 0; i < 5; i++) mean += m[i] * (float)(i - 2);
    assert_near(mean, 0.1f + 0.5f * boot, 1e-5);

    /* the gradient is w · (1/K) · (softmax(q_s) − m) with m projected from the target network's
     * distributions at the ONLINE network's argmax (Double DQN). The draws above make the online
     * and target argmaxes differ in some branch, so a target-network argmax gives another m. */
    int differs = 0;
    for (int d = 0; d < 2; d++) differs |= vx_loss_argmax(&s, qn, d) != vx_loss_argmax(&s, qt, d);
    assert_true(differs);
    float mo[5] = {0};
    for (int d = 0; d < 2; d++) {
        vx_loss_softmax(qt + s.offset[d] + vx_loss_argmax(&s, qn, d) * 5, 5, p);
        vx_loss_project(&s, p, 0.3f, 0.9f, 0.5f, mo);
    }
    vx_loss_c51(&s, 0.9f, qs, qn, qt, a, 0.3f, 0, 0.7f, 1.0f, dq, O, &pr);
    for (int d = 0; d < 2; d++) {
        int j = s.offset[d] + a[d] * 5;
        double mx = qs[j], den = 0;
        for (int i = 1; i < 5; i++) mx = qs[j + i] > mx ? qs[j + i] : mx;
        for (int i = 0; i < 5; i++) den += exp(qs[j + i] - mx);
        for (int i = 0; i < 5; i++)
            assert_near(dq[j + i], 0.7 * 0.5 * (exp(qs[j + i] - mx) / den - mo[i]), 1e-6);
    }
}

static void test_nstep_across_episode_end(void **state)
{
    (void)state;
    vx_nstep ns;
    vx_err e;
    assert_int_equal(vx_nstep_create(3, 1, 2, 0.5, &ns, &e), VX_OK);
    vx_transition_buf out = {0};
    assert_int_equal(vx_tbuf_reserve(&out, 16, 2, &e), VX_OK);
    /* one environment: obs k = (k, k); rewards 1..5; the 5th step truncates with final obs 99 */
    for (int k = 0; k < 5; k++) {
        float obs[2] = {(float)k, (float)k}, nx[2] = {(float)k + 1, (float)k + 1};
        int32_t act[3] = {k, 0, 0};
        float r = (float)(k + 1);
        uint8_t te = 0, tr = k == 4;
        if (tr) nx[0] = nx[1] = 99;
        vx_nstep_push(&ns, obs, act, &r, &te, &tr, nx, &out);
    }
    assert_int_equal(out.n, 5);
    /* from s0: 1 + .5·2 + .25·3 = 2.75 → s3; from s1: 2 + 1.5 + 1 = 4.5 → s4;
     * then the end: s2: 3 + 2 + 1.25 = 6.25 → 99 (3 steps), s3: 4 + 2.5 = 6.5 (2), s4: 5 (1) */
    float R[5] = {2.75f, 4.5f, 6.25f, 6.5f, 5.0f}, nx0[5] = {3, 4, 99, 99, 99};
    int steps[5] = {3, 3, 3, 2, 1}, tr[5] = {0, 0, 1, 1, 1};
    for (int i = 0; i < 5; i++) {
        assert_near(out.obs[i * 2], i, 0);
        assert_int_equal(out.actions[i * 3], i);
        assert_near(out.rewards[i], R[i], 1e-6);
        assert_near(out.next_obs[i * 2], nx0[i], 0);
        assert_int_equal(out.steps[i], steps[i]);
        assert_int_equal(out.truncated[i], tr[i]);
        assert_int_equal(out.terminated[i], 0);
    }
    /* after the end the accumulator is empty: a terminated one-step episode emits one */
    out.n = 0;
    float o[2] = {7, 7}, n2[2] = {8, 8}, r = -1;
    int32_t act[3] = {1, 1, 1};
    uint8_t te = 1, t0 = 0;
    vx_nstep_push(&ns, o, act, &r, &te, &t0, n2, &out);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.terminated[0], 1);
    assert_int_equal(out.truncated[0], 0); /* a termination is not also a truncation */
    assert_int_equal(out.steps[0], 1);
    assert_near(out.rewards[0], -1, 0);
    vx_tbuf_free(&out);
    vx_nstep_free(&ns);
}

/* Two environments side by side (n = 2, D = 1, γ = 0.9): each keeps its own ring, reward and
 * observations, and the transitions come out environment by environment. Environment i at step k
 * sees obs 100·i + k (next 100·i + k + 1), takes exposure action k, gets reward (k + 1)·10^i;
 * environment 1 terminates at step 3 while environment 0 goes on. Returns by hand:
 * step 1: env 0 1 + .9·2 = 2.8, env 1 10 + .9·20 = 28; step 2: 2 + .9·3 = 4.7, 20 + .9·30 = 47;
 * step 3: env 0 3 + .9·4 = 6.6 (2 steps), env 1 ends: 30 + .9·40 = 66 (2 steps) and 40 (1). */
static void test_nstep_two_environments(void **state)
{
    (void)state;
    vx_nstep ns;
    vx_err e;
    assert_int_equal(vx_nstep_create(2, 2, 1, 0.9, &ns, &e), VX_OK);
    vx_transition_buf out = {0};
    assert_int_equal(vx_tbuf_reserve(&out, 16, 1, &e), VX_OK);
    const int emitted[4] = {0, 2, 4, 7}; /* out.n after each step */
    for (int k = 0; k < 4; k++) {
        float obs[2] = {(float)k, 100.0f + k}, nx[2] = {k + 1.0f, 101.0f + k};
        int32_t act[6] = {k, 0, 0, k, 1, 0};
        float r[2] = {k + 1.0f, 10.0f * (k + 1)};
        uint8_t te[2] = {0, k == 3}, tr[2] = {0, 0};
        vx_nstep_push(&ns, obs, act, r, te, tr, nx, &out);
        assert_int_equal(out.n, emitted[k]);
    }
    /* env, start step, R, steps, terminated, next obs */
    const int env[7] = {0, 1, 0, 1, 0, 1, 1}, start[7] = {0, 0, 1, 1, 2, 2, 3};
    const float R[7] = {2.8f, 28, 4.7f, 47, 6.6f, 66, 40};
    const int steps[7] = {2, 2, 2, 2, 2, 2, 1}, te[7] = {0, 0, 0, 0, 0, 1, 1};
    const float nx[7] = {2, 102, 3, 103, 4, 104, 104};
    for (int j = 0; j < 7; j++) {
        assert_near(out.obs[j], 100 * env[j] + start[j], 0);
        assert_near(out.next_obs[j], nx[j], 0);
        assert_int_equal(out.actions[j * 3], start[j]);
        assert_int_equal(out.actions[j * 3 + 1], env[j]);
        assert_near(out.rewards[j], R[j], 1e-5);
        assert_int_equal(out.steps[j], steps[j]);
        assert_int_equal(out.terminated[j], te[j]);
        assert_int_equal(out.truncated[j], 0);
    }
    vx_tbuf_free(&out);
    vx_nstep_free(&ns);
}

static void small_qcfg(vx_qnet_cfg *q)
{
    vx_qnet_cfg_default(q);
    q->in_dim = 6;
    q->trunk[0] = q->trunk[1] = 32;
    q->head_hidden = 16;
}

typedef struct {
    float obs[64 * 6], next[64 * 6], rew[64], w[64];
    int32_t act[64 * 3];
    uint8_t te[64], tu[64], st[64];
    uint32_t idx[64], gen[64];
} bandit;

static vx_replay_batch bandit_batch(bandit *b, vx_rng *g)
{
    /* one-step episodes: reward 1 when every branch picks action 0, else 0 */
    for (int i = 0; i < 64; i++) {
        for (int k = 0; k < 6; k++) b->obs[i * 6 + k] = b->next[i * 6 + k] = 0.5f;
        b->act[i * 3] = (int32_t)vx_rng_below(g, 9);
        b->act[i * 3 + 1] = (int32_t)vx_rng_below(g, 3);
        b->act[i * 3 + 2] = (int32_t)vx_rng_below(g, 3);
        b->rew[i] = (b->act[i * 3] == 0) + (b->act[i * 3 + 1] == 0) + (b->act[i * 3 + 2] == 0);
        b->te[i] = 1, b->tu[i] = 0, b->st[i] = 1, b->w[i] = 1;
    }
    vx_replay_batch rb = {b->obs, b->next, b->act, b->rew, b->te,
                          b->tu,  b->st,   b->w,   b->idx, b->gen};
    return rb;
}

static void test_learner_learns_a_bandit_and_syncs(void **state)
{
    (void)state;
    int losses[2] = {VX_LOSS_HUBER, VX_LOSS_C51};
    for (int li = 0; li < 2; li++) {
        vx_dqn_cfg c;
        vx_dqn_cfg_default(&c);
        c.loss = losses[li];
        c.batch = 64;
        c.adam.lr = 3e-3;
        c.target_every = 50;
        c.v_min = -1, c.v_max = 4, c.atoms = 21;
        vx_qnet_cfg q;
        small_qcfg(&q);
        vx_dqn d;
        vx_err e;
        assert_int_equal(vx_dqn_create(&c, &q, 3, &d, &e), VX_OK);
        assert_memory_equal(d.online, d.target, d.L.n_params * 4);
        bandit b;
        vx_rng g = vx_rng_make(1, 0, 0);
        vx_dqn_update_stats st;
        for (int it = 0; it < 400; it++) {
            vx_replay_batch rb = bandit_batch(&b, &g);
            vx_dqn_update(&d, &rb, 64, &st);
            if (it == 48) assert_true(memcmp(d.online, d.target, d.L.n_params * 4) != 0);
            if (it == 49) assert_memory_equal(d.online, d.target, d.L.n_params * 4); /* 50th */
        }
        /* greedy: action 0 in every branch */
        vx_qnet_ws ws;
        assert_int_equal(vx_qnet_ws_create(&d.L, 4, &ws, &e), VX_OK);
        float obs[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
        int32_t a[3];
        double qm;
        vx_dqn_act(&d, NULL, &ws, obs, 1, 0.0, 1, 0, a, &qm);
        assert_int_equal(a[0], 0);
        assert_int_equal(a[1], 0);
        assert_int_equal(a[2], 0);
        /* each branch's Q(a_d = 0) estimates E[r | a_d = 0]: 1.67, 1.44, 1.44 (mean 1.52) */
        assert_true(qm > 1.2 && qm < 1.8);
        printf("loss %d: final loss %.4f, greedy Q %.3f\n", losses[li], st.loss, qm);
        vx_qnet_ws_free(&ws);
        vx_dqn_free(&d);
    }
}

/* One update's new priorities against a float64 target built here: y = r + γ^m · mean_k
 * Q⁻(s', argmax_a Q(s', a)_k) (no bootstrap when terminated), priority = mean_k |y − Q(s, a_k)|,
 * with m the sample's own n-step count. γ = 0.9 and m = 1, 3, 2 (terminated), 5: bootstrapping with
 * γ instead of γ^m moves the two live multi-step targets by 0.17 and 0.31 of the bootstrap; the
 * target network is perturbed away from the online one, so an argmax taken from it (or an
 * evaluation by the online one) changes them too. */
static void test_update_bootstraps_with_gamma_to_the_m(void **state)
{
    (void)state;
    vx_dqn_cfg c;
    vx_dqn_cfg_default(&c);
    c.loss = VX_LOSS_MSE;
    c.gamma = 0.9;
    c.batch = 4;
    vx_qnet_cfg q;
    small_qcfg(&q);
    vx_dqn d;
    vx_err e;
    assert_int_equal(vx_dqn_create(&c, &q, 7, &d, &e), VX_OK);
    vx_rng g = vx_rng_make(9, 0, 0);
    for (size_t i = 0; i < d.L.n_params; i++) d.target[i] += 0.05f * (float)vx_rng_normal(&g);
    enum { B = 4, D = 6, K = 3 };
    float obs[B * D], next[B * D], rew[B] = {0.5f, -0.25f, 1.0f, 0.125f}, w[B] = {1, 1, 1, 1};
    int32_t act[B * 3] = {0, 1, 2, 8, 0, 1, 4, 2, 0, 3, 1, 1};
    uint8_t te[B] = {0, 0, 1, 0}, tu[B] = {0}, steps[B] = {1, 3, 2, 5};
    uint32_t idx[B], gen[B];
    for (int i = 0; i < B * D; i++)
        obs[i] = (float)vx_rng_normal(&g), next[i] = (float)vx_rng_normal(&g);
    /* the three networks' outputs before the update changes anything */
    vx_qnet_ws ws;
    assert_int_equal(vx_qnet_ws_create(&d.L, B, &ws, &e), VX_OK);
    int O = d.L.out_dim;
    float *qs = malloc((size_t)3 * B * O * sizeof(float)), *qn = qs + B * O, *qt = qn + B * O;
    vx_qnet_forward_ref(&d.L, d.online, obs, B, &ws);
    memcpy(qs, ws.q, (size_t)B * O * sizeof(float));
    vx_qnet_forward_ref(&d.L, d.online, next, B, &ws);
    memcpy(qn, ws.q, (size_t)B * O * sizeof(float));
    vx_qnet_forward_ref(&d.L, d.target, next, B, &ws);
    memcpy(qt, ws.q, (size_t)B * O * sizeof(float));
    double want[B];
    for (int i = 0; i < B; i++) {
        double boot = 0, pr = 0;
        for (int k = 0; k < K; k++) {
            int astar = vx_loss_argmax(&d.shape, qn + i * O, k);
            boot += vx_loss_q(&d.shape, qt + i * O, k, astar) / K;
        }
        double y = rew[i] + (te[i] ? 0.0 : pow(0.9, steps[i]) * boot);
        for (int k = 0; k < K; k++)
            pr += fabs(y - vx_loss_q(&d.shape, qs + i * O, k, act[i * 3 + k]));
        want[i] = pr / K;
    }
    /* the update's statistics, from the same pre-update outputs: Q(s, a_k) over every sample and
     * branch (mean and max, straight from the row: atoms = 1) and the priorities' mean */
    double q_sum = 0, q_max = -INFINITY, pr_mean = 0;
    for (int i = 0; i < B; i++) {
        pr_mean += want[i] / B;
        for (int k = 0; k < K; k++) {
            double qa = qs[i * O + d.shape.offset[k] + act[i * 3 + k]];
            q_sum += qa;
            q_max = qa > q_max ? qa : q_max;
        }
    }
    vx_replay_batch rb = {obs, next, act, rew, te, tu, steps, w, idx, gen};
    vx_dqn_update_stats st;
    vx_dqn_update(&d, &rb, B, &st);
    for (int i = 0; i < B; i++) assert_near(d.priority[i], want[i], 1e-5 * (1 + want[i]));
    /* a mean over B alone (not B·K), a max kept the wrong way or a sum of priorities is off by a
     * factor of 3 or 4, or by the spread of the twelve Q-values */
    assert_near(st.q_mean, q_sum / (B * K), 1e-5 * (1 + fabs(q_sum)));
    assert_near(st.q_max, q_max, 1e-6 * (1 + fabs(q_max)));
    assert_near(st.priority_mean, pr_mean, 1e-5 * (1 + pr_mean));
    free(qs);
    vx_qnet_ws_free(&ws);
    vx_dqn_free(&d);
}

/* Two whole updates through vx_dqn_update on a tiny network (input 4, trunk [8, 8], heads 4,
 * branches 9, 3, 3) against the same two updates worked out in float64 (dqn_ref64.c: the network
 * through qnet_f64; the target, δ, Huber, dLoss/dQ, the norm, the clip and Adam written out
 * there). The batch (dqn_ref64.c) holds live, truncated and terminated rows with n-step counts 1
 * and 3, IS weights from 0.3 to 1, |δ| on both sides of κ = 0.5; the target network is drawn
 * apart from the online one; Adam's ε (1e-3) is near the clipped gradients' size, so the clip
 * shows in the step. With multi_step_clip the clip (0.15 against norms of 0.41 and 0.36) triggers
 * in both updates; without it every count is 1 and the clip is off, which catches what only
 * shows there (a clip applied although it is off).
 *
 * Tolerances: loss, norm, priorities and Adam's moments 1e-5 relative (float32 against float64
 * on this network differs by about 1e-7); each weight within 1e-7 + 1e-5·|w| of the float64 one
 * (its float32 rounding alone is 6e-8·|w|; the largest error seen is a tenth of this). The wrong
 * programs move what they touch by 3e-3 relative or more. ref64_check says at each assertion
 * which wrong programs it catches. */
static void learner_update_by_hand(int multi_step_clip)
{
    vx_dqn_cfg c;
    vx_qnet_cfg q;
    ref64_batch bb;
    ref64_case(multi_step_clip, &c, &q, &bb);
    vx_dqn d;
    vx_err e;
    assert_int_equal(vx_dqn_create(&c, &q, 11, &d, &e), VX_OK);
    ref64_target(&d.L, d.target);
    ref64 r;
    assert_int_equal(ref64_init(&r, &d.L, &c, d.online, d.target), 0);
    vx_replay_batch b = ref64_view(&bb);
    for (int u = 0; u < 2; u++) {
        ref64_out o;
        ref64_update(&r, &b, REF64_B, &o);
        vx_dqn_update_stats st;
        vx_dqn_update(&d, &b, REF64_B, &st);
        ref64_seen seen = {d.online,   d.target, d.adam.m,     d.adam.v,
                           d.priority, st.loss,  st.grad_norm, d.adam.t};
        ref64_check("cpu", &r, &o, &seen, REF64_B, 1e-5, 1e-7);
        /* the clipped gradient itself, left in d.grads by the in-place clip */
        double gn = 0, worst = 0;
        for (size_t i = 0; i < d.L.n_params; i++) {
            gn += r.grads[i] * r.grads[i];
            double err = fabs(d.grads[i] - r.grads[i]);
            worst = err > worst ? err : worst;
        }
        assert_true(worst <= 1e-5 * sqrt(gn));
    }
    ref64_free(&r);
    vx_dqn_free(&d);
}

static void test_update_by_hand_multi_step_clipped(void **state)
{
    (void)state;
    learner_update_by_hand(1);
}

static void test_update_by_hand_one_step_unclipped(void **state)
{
    (void)state;
    learner_update_by_hand(0);
}

/* Bellemare et al.'s projection of p (atoms M on [v_min, v_max]) shifted to r + g·z, in float64,
 * added with `mass` into m: written out here apart from vx_loss_project. */
static void project64(const vx_loss_shape *s, const double *p, double r, double g, double mass,
                      double *m)
{
    int M = s->atoms;
    double dz = ((double)s->v_max - s->v_min) / (M - 1);
    for (int j = 0; j < M; j++) {
        double tz = r + g * (s->v_min + j * dz);
        tz = tz < s->v_min ? s->v_min : tz > s->v_max ? s->v_max : tz;
        double b = (tz - s->v_min) / dz;
        int l = (int)floor(b), u = (int)ceil(b);
        if (l == u) m[l] += mass * p[j];
        else m[l] += mass * p[j] * (u - b), m[u] += mass * p[j] * (b - l);
    }
}

static void softmax64(const float *x, int M, double *p)
{
    double mx = x[0], den = 0;
    for (int i = 1; i < M; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < M; i++) den += p[i] = exp(x[i] - mx);
    for (int i = 0; i < M; i++) p[i] /= den;
}

/* A C51 update through vx_dqn_update against float64 built here: the shared target is the mixture
 * (1/K) Σ_k Φ(r + γ^m z, p⁻_k(s', a*_k)) (no bootstrap, γ = 0, only when terminated: truncation
 * bootstraps), priority_i = mean_k CE_k, loss = mean_i w_i · mean_k CE_k, and the row of dLoss/dQ
 * w_i/(K·B) · (softmax(q_s) − m) at each taken action. The batch holds a live m = 1, a truncated
 * m = 3, a terminated m = 2 and a live m = 2 sample with IS weights 1, 0.4, 0.7, 0.2; the target
 * network is drawn apart from the online one. The C51 path has its own call in the learner, so
 * each of these is checked on it: bootstrapping with γ instead of γ^m moves the m = 3 and m = 2
 * targets' supports by 0.19·z and 0.09·z, treating truncation as termination drops row 1's
 * bootstrap, and dropping the IS weights multiplies the loss by about 1.8 and three rows' dQ by
 * 1/w. */
static void test_c51_update_by_hand(void **state)
{
    (void)state;
    vx_dqn_cfg c;
    vx_dqn_cfg_default(&c);
    c.loss = VX_LOSS_C51;
    c.gamma = 0.9;
    c.atoms = 13, c.v_min = -3, c.v_max = 3; /* dz = 0.5 */
    c.batch = 4;
    vx_qnet_cfg q;
    small_qcfg(&q);
    vx_dqn d;
    vx_err e;
    assert_int_equal(vx_dqn_create(&c, &q, 17, &d, &e), VX_OK);
    vx_rng g = vx_rng_make(19, 0, 0);
    for (size_t i = 0; i < d.L.n_params; i++) d.target[i] += 0.05f * (float)vx_rng_normal(&g);
    enum { B = 4, D = 6, K = 3, M = 13 };
    float obs[B * D], next[B * D], rew[B] = {0.3f, -0.7f, 1.1f, 0.45f},
                                   w[B] = {1, 0.4f, 0.7f, 0.2f};
    int32_t act[B * 3] = {2, 0, 1, 7, 2, 0, 0, 1, 2, 5, 0, 1};
    uint8_t te[B] = {0, 0, 1, 0}, tu[B] = {0, 1, 0, 0}, steps[B] = {1, 3, 2, 2};
    uint32_t idx[B], gen[B];
    for (int i = 0; i < B * D; i++)
        obs[i] = (float)vx_rng_normal(&g), next[i] = (float)vx_rng_normal(&g);
    vx_qnet_ws ws;
    assert_int_equal(vx_qnet_ws_create(&d.L, B, &ws, &e), VX_OK);
    int O = d.L.out_dim;
    assert_int_equal(O, 15 * M);
    float *qs = malloc((size_t)3 * B * O * sizeof(float)), *qn = qs + B * O, *qt = qn + B * O;
    vx_qnet_forward_ref(&d.L, d.online, obs, B, &ws);
    memcpy(qs, ws.q, (size_t)B * O * sizeof(float));
    vx_qnet_forward_ref(&d.L, d.online, next, B, &ws);
    memcpy(qn, ws.q, (size_t)B * O * sizeof(float));
    vx_qnet_forward_ref(&d.L, d.target, next, B, &ws);
    memcpy(qt, ws.q, (size_t)B * O * sizeof(float));
    double want_pr[B], want_loss = 0, *want_dq = calloc((size_t)B * O, sizeof(double));
    for (int i = 0; i < B; i++) {
        double m[M] = {0}, p[M];
        double gm = te[i] ? 0 : pow(0.9, steps[i]);
        for (int k = 0; k < K; k++) {
            int astar = vx_loss_argmax(&d.shape, qn + i * O, k); /* the online network picks */
            softmax64(qt + i * O + d.shape.offset[k] + astar * M, M, p);
            project64(&d.shape, p, rew[i], gm, 1.0 / K, m);
        }
        double ce = 0;
        for (int k = 0; k < K; k++) {
            int j = d.shape.offset[k] + act[i * 3 + k] * M;
            softmax64(qs + i * O + j, M, p);
            for (int a = 0; a < M; a++) {
                ce -= m[a] * log(p[a]);
                want_dq[(size_t)i * O + j + a] = w[i] / K / B * (p[a] - m[a]);
            }
        }
        want_pr[i] = ce / K;
        want_loss += w[i] * ce / K / B;
    }
    vx_replay_batch rb = {obs, next, act, rew, te, tu, steps, w, idx, gen};
    vx_dqn_update_stats st;
    vx_dqn_update(&d, &rb, B, &st);
    for (int i = 0; i < B; i++) assert_near(d.priority[i], want_pr[i], 1e-5 * (1 + want_pr[i]));
    assert_near(st.loss, want_loss, 1e-5 * (1 + want_loss));
    for (int i = 0; i < B * O; i++) assert_near(d.dq[i], want_dq[i], 1e-7);
    free(want_dq);
    free(qs);
    vx_qnet_ws_free(&ws);
    vx_dqn_free(&d);
}

/* vx_dqn_act over more environments than its workspace holds (100 through a batch of 32), on
 * weights passed in (not the online ones): each environment acts as vx_act_egreedy does on its own
 * row of those weights' Q, with its own index as the Philox stream, and the greedy Q mean is the
 * mean over environments and branches of each branch's largest Q (written out here). A chunk that
 * read the first chunk's observations, an environment numbered within its chunk, acting on the
 * online weights, a greedy sum that took action 0 instead of the argmax, or draws skipped when a
 * branch acts greedily (so that its choice shifts the later branches' draws) all change these. */
static void test_act_chunks_weights_and_greedy_q(void **state)
{
    (void)state;
    vx_dqn_cfg c;
    vx_dqn_cfg_default(&c);
    c.batch = 8;
    vx_qnet_cfg q;
    small_qcfg(&q);
    vx_dqn d;
    vx_err e;
    assert_int_equal(vx_dqn_create(&c, &q, 23, &d, &e), VX_OK);
    enum { N = 100, D = 6, K = 3 };
    size_t np = d.L.n_params;
    float *params = malloc(np * sizeof(float)), obs[N * D];
    vx_rng g = vx_rng_make(29, 0, 0);
    for (size_t i = 0; i < np; i++) params[i] = d.online[i] + 0.3f * (float)vx_rng_normal(&g);
    for (int i = 0; i < N * D; i++) obs[i] = (float)vx_rng_normal(&g);
    vx_qnet_ws small, all;
    assert_int_equal(vx_qnet_ws_create(&d.L, 32, &small, &e), VX_OK);
    assert_int_equal(vx_qnet_ws_create(&d.L, N, &all, &e), VX_OK);
    int O = d.L.out_dim;
    /* the reference rows: all 100 at once, and the online network's, to see they differ */
    float *qp = malloc((size_t)2 * N * O * sizeof(float)), *qo = qp + (size_t)N * O;
    vx_qnet_forward_ref(&d.L, params, obs, N, &all);
    memcpy(qp, all.q, (size_t)N * O * sizeof(float));
    vx_qnet_forward_ref(&d.L, d.online, obs, N, &all);
    memcpy(qo, all.q, (size_t)N * O * sizeof(float));
    int32_t greedy[N * 3], a[N * 3];
    double qmax_sum = 0;
    int online_differs = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < K; k++) {
            const float *row = qp + (size_t)i * O + d.shape.offset[k];
            const float *orow = qo + (size_t)i * O + d.shape.offset[k];
            int best = 0, obest = 0;
            for (int x = 1; x < d.shape.branch[k]; x++) {
                best = row[x] > row[best] ? x : best;
                obest = orow[x] > orow[obest] ? x : obest;
            }
            greedy[i * 3 + k] = best;
            qmax_sum += row[best];
            online_differs += best != obest;
        }
    assert_true(online_differs > 20); /* the weights passed in act otherwise than the online ones */
    int nonzero = 0;
    for (int i = 0; i < N * 3; i++) nonzero += greedy[i] != 0;
    assert_true(nonzero > 50); /* so a greedy sum at action 0 is another number */
    /* ε = 0: the argmax of the weights passed in, every environment; the greedy Q mean */
    double qm;
    vx_dqn_act(&d, params, &small, obs, N, 0.0, 31, 6, a, &qm);
    assert_memory_equal(a, greedy, sizeof a);
    assert_near(qm, qmax_sum / (N * K), 1e-6 * (1 + fabs(qmax_sum / (N * K))));
    /* ε = 0.5: environment i's draws for branch k at step t are Philox stream
     * VX_ACT_STREAM + i's from counter (4t + k) · 2^16 on, whichever chunk it falls in: one
     * uniform and one bounded integer, drawn whether the branch explores or not (dqn_act.h),
     * written out here */
    vx_dqn_act(&d, params, &small, obs, N, 0.5, 31, 6, a, NULL);
    int explored = 0;
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < K; k++) {
            vx_rng r = vx_rng_make(31, VX_ACT_STREAM + (uint64_t)i, (6 * 4 + (uint64_t)k) << 16);
            float u = vx_rng_uniform(&r);
            int32_t ra = (int32_t)vx_rng_below(&r, (uint32_t)d.shape.branch[k]);
            assert_int_equal(a[i * 3 + k], u < 0.5 ? ra : greedy[i * 3 + k]);
            explored += a[i * 3 + k] != greedy[i * 3 + k];
        }
    }
    assert_true(explored > 20);
    free(params), free(qp);
    vx_qnet_ws_free(&small);
    vx_qnet_ws_free(&all);
    vx_dqn_free(&d);
}

/* Consecutive steps draw independently. With ε = 1 every branch takes its random action; when
 * a step's draws ran on into the next step's counter, the last branch's word at step t was the
 * first branch's at t + 1, and Lemire's map made the urgency (3 levels) the exposure (9) divided
 * by 3 at every step. Independent draws agree so with probability 1/3: 666 ± 21 of 2,000 steps;
 * the limit 900 is 11 sd above that, and the shared words give about 2,000. */
static void test_act_draws_independent_across_steps(void **state)
{
    (void)state;
    vx_loss_shape s = {0};
    s.n_branches = 3, s.atoms = 1;
    s.branch[0] = 9, s.branch[1] = 3, s.branch[2] = 3;
    s.offset[0] = 0, s.offset[1] = 9, s.offset[2] = 12;
    float q[15] = {0};
    int32_t prev[3], cur[3];
    int agree = 0;
    vx_act_egreedy(&s, q, 5, 0, 0, 1.0, prev, NULL);
    for (uint64_t t = 1; t <= 2000; t++) {
        vx_act_egreedy(&s, q, 5, 0, t, 1.0, cur, NULL);
        agree += prev[2] == cur[0] / 3;
        memcpy(prev, cur, sizeof prev);
    }
    printf("urgency at t = exposure at t + 1 over 3: %d of 2000 steps (666 expected)\n", agree);
    assert_true(agree < 900);
}

/* The GPU's acting thread reads each branch's draws through vx_act_rng_with_first, its first
 * block made by another thread: the words must be vx_act_rng's, the first block's and past it
 * (12 words: three blocks; a reader that made its first block again, or took another branch's
 * or step's counter for the blocks after, differs from the fifth word on). */
static void test_act_reader_with_first_block(void **state)
{
    (void)state;
    const uint64_t envs[2] = {0, 7}, steps[3] = {0, 5, 1u << 20};
    for (int e = 0; e < 2; e++)
        for (int s = 0; s < 3; s++)
            for (int k = 0; k < VX_LOSS_MAX_BRANCHES; k++) {
                vx_rng a = vx_act_rng(9, envs[e], steps[s], k);
                vx_u32x4 first =
                    vx_philox_block(9, VX_ACT_STREAM + envs[e], vx_act_first_block(steps[s], k));
                vx_rng b = vx_act_rng_with_first(9, envs[e], steps[s], k, first);
                for (int w = 0; w < 12; w++) assert_int_equal(vx_rng_u32(&a), vx_rng_u32(&b));
            }
}

static void test_polyak_and_act(void **state)
{
    (void)state;
    vx_dqn_cfg c;
    vx_dqn_cfg_default(&c);
    c.batch = 64;
    c.tau = 0.25;
    vx_qnet_cfg q;
    small_qcfg(&q);
    vx_dqn d;
    vx_err e;
    assert_int_equal(vx_dqn_create(&c, &q, 5, &d, &e), VX_OK);
    float *before = malloc(d.L.n_params * 4);
    memcpy(before, d.target, d.L.n_params * 4);
    bandit b;
    vx_rng g = vx_rng_make(2, 0, 0);
    vx_replay_batch rb = bandit_batch(&b, &g);
    vx_dqn_update(&d, &rb, 64, NULL);
    for (size_t i = 0; i < d.L.n_params; i += 97)
        assert_near(d.target[i], before[i] + 0.25f * (d.online[i] - before[i]), 1e-6);
    /* ε = 1: uniform actions, reproducible by (seed, step) */
    vx_qnet_ws ws;
    assert_int_equal(vx_qnet_ws_create(&d.L, 32, &ws, &e), VX_OK);
    float obs[100 * 6];
    for (int i = 0; i < 600; i++) obs[i] = 0.1f * (float)(i % 7);
    int32_t a1[300], a2[300];
    vx_dqn_act(&d, NULL, &ws, obs, 100, 1.0, 9, 4, a1, NULL);
    vx_dqn_act(&d, NULL, &ws, obs, 100, 1.0, 9, 4, a2, NULL);
    assert_memory_equal(a1, a2, sizeof a1);
    vx_dqn_act(&d, NULL, &ws, obs, 100, 1.0, 9, 5, a2, NULL);
    assert_true(memcmp(a1, a2, sizeof a1) != 0);
    int hist[9] = {0};
    for (int s = 0; s < 50; s++) {
        vx_dqn_act(&d, NULL, &ws, obs, 100, 1.0, 9, (uint64_t)s, a1, NULL);
        for (int i = 0; i < 100; i++) {
            assert_true(a1[i * 3] >= 0 && a1[i * 3] < 9);
            assert_true(a1[i * 3 + 1] >= 0 && a1[i * 3 + 1] < 3);
            hist[a1[i * 3]]++;
        }
    }
    for (int k = 0; k < 9; k++) assert_true(hist[k] > 400 && hist[k] < 720); /* 5000/9 = 556 */
    vx_qnet_ws_free(&ws);
    free(before);
    vx_dqn_free(&d);
    c.loss = 7;
    assert_int_equal(vx_dqn_create(&c, &q, 5, &d, &e), VX_ERR_ARG);
}

/* Settings whose updates per epoch overflow an int (batch 1 at a replay ratio of 1e6: 1.28e10 at
 * the default 128 envs × 100 steps, once −2^31 updates) are refused by the algorithm's creation
 * itself, naming the keys, not only by the run's settings check. */
static void test_create_refuses_overflowing_sizes(void **state)
{
    (void)state;
    vx_train_cfg c;
    vx_train_cfg_default(&c);
    vx_dqn_settings *d = vx_train_algo_settings(&c, "dqn");
    d->learner.batch = 1, d->replay_ratio = 1e6;
    vx_run_params run;
    vx_train_run_params(&c, &run);
    vx_algo_init in = {d, &run, NULL, NULL, 0};
    vx_algo *a = NULL;
    vx_err e;
    assert_int_equal(vx_algo_dqn.create(&in, &a, &e), VX_ERR_ARG);
    assert_null(a);
    assert_non_null(strstr(e.msg, "dqn.replay_ratio"));
    assert_non_null(strstr(e.msg, "dqn.batch"));
    assert_non_null(strstr(e.msg, "updates per epoch"));
    d->replay_ratio = 1; /* 12,800 updates: fine */
    assert_int_equal(vx_algo_dqn.create(&in, &a, &e), VX_OK);
    vx_algo_dqn.free(a);
}

static void tiny_run(vx_train_cfg *c, const char *dir)
{
    vx_train_cfg_default(c);
    vx_dqn_settings *d = vx_train_algo_settings(c, "dqn");
    c->synth_days = 12, c->env.episode_len = 60;
    c->envs = 16, c->steps_per_epoch = 40, c->epochs = 3;
    c->eval_every = 3, c->checkpoint_every = 1;
    d->learner.batch = 32, d->learner.n_step = 3;
    d->trunk[0] = d->trunk[1] = 16, d->head_hidden = 8;
    d->warmup = 200, d->replay_capacity = 2000;
    snprintf(c->run_dir, sizeof c->run_dir, "%s", dir);
}

static int stop_at(const vx_epoch_report *r, void *ctx) { return r->epoch == *(const int *)ctx; }

/* The CPU backend's collection stores, for a transition that ended its episode (terminated or
 * truncated), the final observation before the reset as next_obs — the state the target
 * bootstraps from on truncation — and otherwise the next step's observation. With n = 1 every
 * environment emits one transition a step, inserted step-major, so slot j's successor is slot
 * j + N: a live transition's next_obs is bit-for-bit the obs stored there, an ended one's is not
 * (that obs is the new episode's first). Two epochs of 40 steps with 60-step episodes end some
 * episodes; the replay file of the second is read back and sampled until every slot was seen.
 * Storing the post-reset observation (for every end, or only on truncation) fails here. */
static void test_collection_keeps_final_obs(void **state)
{
    (void)state;
    char dir[64], path[384];
    th_tmpdir(dir, sizeof dir);
    vx_train_cfg c;
    vx_err e;
    tiny_run(&c, dir);
    vx_dqn_settings *d = vx_train_algo_settings(&c, "dqn");
    d->learner.n_step = 1;
    d->replay_kind = VX_REPLAY_UNIFORM;
    d->warmup = 100000; /* no updates: only collection matters here */
    c.eval_every = 100;
    assert_int_equal(vx_train_run(&c, NULL, 0, stop_at, &(int){2}, NULL, &e), VX_ERR_STOPPED);
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    DIR *dd = opendir(path);
    assert_non_null(dd);
    char best[256] = "";
    for (struct dirent *f; (f = readdir(dd));)
        if (!strncmp(f->d_name, "replay-", 7) && strcmp(f->d_name, best) > 0)
            snprintf(best, sizeof best, "%s", f->d_name);
    closedir(dd);
    assert_true(best[0]);
    snprintf(path, sizeof path, "%s/checkpoint/%s", dir, best);
    enum { N = 16, T = 80, S = N * T, D = VX_OBS_DIM, BS = 256 };
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, VX_REPLAY_UNIFORM, (size_t)d->replay_capacity);
    vx_replay *r;
    assert_int_equal(vx_replay_create(&rc, NULL, &r, &e), VX_OK);
    assert_int_equal(vx_replay_load(r, path, &e), VX_OK);
    assert_int_equal(vx_replay_size(r), S);
    float *obs = malloc(sizeof(float) * S * D * 2), *nobs = obs + (size_t)S * D;
    uint8_t ended[S], seen[S] = {0};
    float bo[BS * D], bn[BS * D], brw[BS], bw[BS];
    int32_t ba[BS * VX_ACTION_BRANCHES];
    uint8_t bte[BS], btr[BS], bst[BS];
    uint32_t bi[BS], bg[BS];
    vx_replay_batch b = {bo, bn, ba, brw, bte, btr, bst, bw, bi, bg};
    int n_seen = 0;
    for (int it = 0; it < 200 && n_seen < S; it++) {
        assert_int_equal(vx_replay_sample(r, BS, &b, NULL, &e), VX_OK);
        for (int k = 0; k < BS; k++) {
            uint32_t j = bi[k];
            assert_true(j < S);
            n_seen += !seen[j];
            seen[j] = 1;
            memcpy(obs + (size_t)j * D, bo + k * D, D * sizeof(float));
            memcpy(nobs + (size_t)j * D, bn + k * D, D * sizeof(float));
            ended[j] = bte[k] | btr[k];
        }
    }
    assert_int_equal(n_seen, S);
    int n_ended = 0, n_live = 0;
    for (int j = 0; j + N < S; j++) {
        int same = !memcmp(nobs + (size_t)j * D, obs + (size_t)(j + N) * D, D * sizeof(float));
        if (ended[j]) n_ended++, assert_false(same);
        else n_live++, assert_true(same);
    }
    printf("collection: %d live transitions continue into their successor, %d ended ones keep "
           "their final observation\n",
           n_live, n_ended);
    assert_true(n_ended >= N / 2);
    free(obs);
    vx_replay_free(r);
    th_rmtree(dir);
}

/* The floats of checkpoint tensor `name` (float32). */
static const float *ck_floats(const vx_safetensors *st, const char *name)
{
    for (size_t i = 0; i < st->n; i++)
        if (!strcmp(st->tensors[i].name, name) && st->tensors[i].dtype == VX_DT_F32)
            return st->tensors[i].data;
    fail_msg("checkpoint has no float tensor %s", name);
    return NULL;
}

/* With overlap on (the default) the CPU backend acts, in epoch e + 1's rollout, with the weights as
 * they were before epoch e's updates (dqn_backend.h), so the checkpoint after epoch 2 holds as
 * "acting" the online weights of the checkpoint after epoch 1 — which its updates (640
 * transitions against a warm-up of 200) moved away from the initial ones. A snapshot never
 * refreshed (acting with the initial weights for the whole run) or refreshed after the updates
 * fails here, tensor by tensor. */
static void test_overlap_acts_with_previous_weights(void **state)
{
    (void)state;
    char dir[64], path[160];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/checkpoint/latest.safetensors", dir);
    vx_train_cfg c;
    vx_err e;
    tiny_run(&c, dir);
    vx_dqn_settings *d = vx_train_algo_settings(&c, "dqn");
    assert_int_equal(d->overlap, 1);
    c.eval_every = 100;
    assert_int_equal(vx_train_run(&c, NULL, 0, stop_at, &(int){1}, NULL, &e), VX_ERR_STOPPED);
    size_t n1;
    uint8_t *first = th_read(path, &n1);
    assert_int_equal(vx_train_run(&c, NULL, 1, stop_at, &(int){2}, NULL, &e), VX_ERR_STOPPED);
    vx_safetensors s2, s1;
    assert_int_equal(vx_safetensors_read(path, &s2, &e), VX_OK);
    th_write(path, first, n1);
    assert_int_equal(vx_safetensors_read(path, &s1, &e), VX_OK);
    vx_qnet_cfg q;
    vx_dqn_net_cfg(d, &q);
    vx_qnet_layout L;
    assert_int_equal(vx_qnet_layout_make(&q, &L, &e), VX_OK);
    const float *acting2 = ck_floats(&s2, "acting"), *acting1 = ck_floats(&s1, "acting");
    int moved = 0;
    for (size_t i = 0; i < L.n_tensors; i++) {
        char name[64], key[96];
        size_t off;
        int rows, cols;
        vx_qnet_tensor(&L, i, name, sizeof name, &off, &rows, &cols);
        snprintf(key, sizeof key, "online.%s", name);
        const float *online1 = ck_floats(&s1, key);
        size_t n = (size_t)rows * cols;
        assert_memory_equal(acting2 + off, online1, n * sizeof(float));
        moved += memcmp(acting1 + off, online1, n * sizeof(float)) != 0;
    }
    assert_true(moved > 0); /* epoch 1 did update the weights its rollout acted with */
    vx_safetensors_free(&s1);
    vx_safetensors_free(&s2);
    free(first);
    th_rmtree(dir);
}

/* The CPU backend writes back, for each sampled slot, the learner's new priority — mean_k |δ_k|
 * (+ the replay's ε) — and not something else of the batch (its IS weights, say). One epoch of
 * collection (640 one-step transitions) and updates with a learning rate of 1e-12, so the weights
 * the updates saw are the checkpoint's to ~1e-12; the replay file is read back into a
 * proportional buffer with α = 1, where each slot's priority is its probability × Σ p. Every slot
 * holds either the insertion priority (never sampled) or |δ| + ε worked out here from the
 * checkpoint's weights (vx_loss_dqn on each transition); dozens of slots must hold the latter. */
static void test_learn_writes_back_priorities(void **state)
{
    (void)state;
    char dir[64], path[384];
    th_tmpdir(dir, sizeof dir);
    vx_train_cfg c;
    vx_err e;
    tiny_run(&c, dir);
    vx_dqn_settings *d = vx_train_algo_settings(&c, "dqn");
    d->learner.n_step = 1;
    d->learner.adam.lr = 1e-12;
    d->replay_kind = VX_REPLAY_PROPORTIONAL;
    d->replay_alpha = 1;
    c.eval_every = 100;
    assert_int_equal(vx_train_run(&c, NULL, 0, stop_at, &(int){1}, NULL, &e), VX_ERR_STOPPED);
    /* the learner, with the checkpoint's online and target weights */
    vx_qnet_cfg q;
    vx_dqn_net_cfg(d, &q);
    vx_dqn dq;
    assert_int_equal(vx_dqn_create(&d->learner, &q, 1, &dq, &e), VX_OK);
    snprintf(path, sizeof path, "%s/checkpoint/latest.safetensors", dir);
    vx_safetensors ck;
    assert_int_equal(vx_safetensors_read(path, &ck, &e), VX_OK);
    for (size_t i = 0; i < dq.L.n_tensors; i++) {
        char name[64], key[96];
        size_t off;
        int rows, cols;
        vx_qnet_tensor(&dq.L, i, name, sizeof name, &off, &rows, &cols);
        snprintf(key, sizeof key, "online.%s", name);
        memcpy(dq.online + off, ck_floats(&ck, key), (size_t)rows * cols * sizeof(float));
        snprintf(key, sizeof key, "target.%s", name);
        memcpy(dq.target + off, ck_floats(&ck, key), (size_t)rows * cols * sizeof(float));
    }
    vx_safetensors_free(&ck);
    /* the replay file, every slot's transition */
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    DIR *dd = opendir(path);
    assert_non_null(dd);
    char best[256] = "";
    for (struct dirent *f; (f = readdir(dd));)
        if (!strncmp(f->d_name, "replay-", 7) && strcmp(f->d_name, best) > 0)
            snprintf(best, sizeof best, "%s", f->d_name);
    closedir(dd);
    snprintf(path, sizeof path, "%s/checkpoint/%s", dir, best);
    enum { S = 16 * 40, D = VX_OBS_DIM, BS = 256 };
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, VX_REPLAY_PROPORTIONAL, (size_t)d->replay_capacity);
    rc.alpha = 1, rc.eps = d->replay_eps;
    vx_replay *r;
    assert_int_equal(vx_replay_create(&rc, NULL, &r, &e), VX_OK);
    assert_int_equal(vx_replay_load(r, path, &e), VX_OK);
    assert_int_equal(vx_replay_size(r), S);
    float *obs = malloc(sizeof(float) * S * D * 2), *nobs = obs + (size_t)S * D, rew[S], w1[S];
    int32_t act[S * VX_ACTION_BRANCHES];
    uint8_t te[S], st1[S], seen[S] = {0};
    float bo[BS * D], bn[BS * D], brw[BS], bw[BS];
    int32_t ba[BS * VX_ACTION_BRANCHES];
    uint8_t bte[BS], btr[BS], bst[BS];
    uint32_t bi[BS], bg[BS];
    vx_replay_batch b = {bo, bn, ba, brw, bte, btr, bst, bw, bi, bg};
    int n_seen = 0;
    for (int it = 0; it < 400 && n_seen < S; it++) {
        assert_int_equal(vx_replay_sample(r, BS, &b, NULL, &e), VX_OK);
        for (int k = 0; k < BS; k++) {
            uint32_t j = bi[k];
            assert_true(j < S);
            n_seen += !seen[j];
            seen[j] = 1;
            memcpy(obs + (size_t)j * D, bo + k * D, D * sizeof(float));
            memcpy(nobs + (size_t)j * D, bn + k * D, D * sizeof(float));
            memcpy(act + j * VX_ACTION_BRANCHES, ba + k * VX_ACTION_BRANCHES,
                   VX_ACTION_BRANCHES * sizeof(int32_t));
            rew[j] = brw[k], te[j] = bte[k], st1[j] = bst[k], w1[j] = 1;
        }
    }
    assert_int_equal(n_seen, S);
    /* |δ| per slot from the checkpoint's networks */
    vx_qnet_ws ws;
    assert_int_equal(vx_qnet_ws_create(&dq.L, S, &ws, &e), VX_OK);
    int O = dq.L.out_dim;
    float *qs = malloc(sizeof(float) * (size_t)S * O * 4), *qn = qs + (size_t)S * O,
          *qt = qn + (size_t)S * O, *grad = qt + (size_t)S * O;
    vx_qnet_forward_ref(&dq.L, dq.online, obs, S, &ws);
    memcpy(qs, ws.q, sizeof(float) * (size_t)S * O);
    vx_qnet_forward_ref(&dq.L, dq.online, nobs, S, &ws);
    memcpy(qn, ws.q, sizeof(float) * (size_t)S * O);
    vx_qnet_forward_ref(&dq.L, dq.target, nobs, S, &ws);
    memcpy(qt, ws.q, sizeof(float) * (size_t)S * O);
    vx_replay_stats rs;
    assert_int_equal(vx_replay_stats_get(r, &rs, NULL, &e), VX_OK);
    double insert_p = -1;
    int updated = 0;
    for (int j = 0; j < S; j++) {
        float pr;
        double gm = pow(d->learner.gamma, st1[j]);
        vx_loss_dqn(&dq.shape, dq.cfg.loss, (float)dq.cfg.huber_kappa, (float)gm,
                    qs + (size_t)j * O, qn + (size_t)j * O, qt + (size_t)j * O,
                    act + j * VX_ACTION_BRANCHES, rew[j], te[j], w1[j], 1.0f, grad + (size_t)j * O,
                    O, &pr);
        double p;
        assert_int_equal(vx_replay_prob(r, (size_t)j, &p, &e), VX_OK);
        double prio = p * rs.total, want = pr + d->replay_eps;
        if (fabs(prio - want) <= 1e-4 * want) {
            updated++;
        } else { /* never sampled: the one insertion priority */
            if (insert_p < 0) insert_p = prio;
            assert_near(prio, insert_p, 1e-6 * insert_p);
        }
    }
    printf("priorities written back: %d of %d slots hold their |δ| + ε, the others %.4g\n", updated,
           S, insert_p);
    assert_true(updated >= 50);
    free(qs), free(obs);
    vx_qnet_ws_free(&ws);
    vx_replay_free(r);
    vx_dqn_free(&dq);
    th_rmtree(dir);
}

/* Writes the checkpoint at `path` again with damage `k` (0: none), through the safetensors
 * writer, so its data checksum matches: only the content checks can refuse it. */
static void damage_ckpt(const char *path, int k)
{
    vx_safetensors st;
    vx_err e;
    assert_int_equal(vx_safetensors_read(path, &st, &e), VX_OK);
    const char *tensor[] = {NULL,
                            "env.state",
                            NULL,
                            "nstep.actions",
                            "adam.v",
                            "env.obs",
                            "env.state",
                            "nstep.rewards",
                            "env.episode_return",
                            "nstep.count_head",
                            "nstep.count_head",
                            NULL};
    for (size_t i = 0; k && tensor[k] && i < st.n; i++) {
        if (strcmp(st.tensors[i].name, tensor[k]) != 0) continue;
        uint8_t *x = (uint8_t *)st.tensors[i].data; /* points into st.file, which is ours */
        if (k == 1) {                               /* environment 3's bar index */
            int64_t row = (int64_t)1e12;
            memcpy(x + 3 * sizeof(vx_env_state) + offsetof(vx_env_state, row), &row, 8);
        } else if (k == 3) { /* an order type of 3 in environment 2's ring */
            int32_t v = 3;
            memcpy(x + (2 * 3 * VX_ACTION_BRANCHES + 1) * 4, &v, 4);
        } else if (k == 4) {
            float v = -1;
            memcpy(x + 40 * 4, &v, 4);
        } else if (k == 5) {
            float v = NAN;
            memcpy(x + 7 * 4, &v, 4);
        } else if (k == 6) { /* a position past the exposure grid */
            int32_t v = 400;
            memcpy(x + 5 * sizeof(vx_env_state) + offsetof(vx_env_state, pos), &v, 4);
        } else if (k == 7) {
            float v = INFINITY;
            memcpy(x + 2 * 4, &v, 4);
        } else if (k == 8) { /* environment 1's running return */
            double v = NAN;
            memcpy(x + 1 * 8, &v, 8);
        } else if (k == 9) { /* environment 2's ring head at n = 3: one past the ring */
            int64_t v = 3;
            memcpy(x + (16 + 2) * 8, &v, 8);
        } else if (k == 10) { /* environment 4's pending count at n + 1 */
            int64_t v = 4;
            memcpy(x + 4 * 8, &v, 8);
        }
    }
    /* 11: a counter that ties the replay file to another checkpoint */
    const char *key = k == 2 ? "updates" : k == 11 ? "replay_inserted" : NULL;
    th_safetensors_rewrite(&st, key, k == 2 ? "12abc" : "320");
}

/* A checkpoint is data from a file: a resume checks every restored number before using it. Each
 * damaged field of a real checkpoint — an environment's bar index of 1e12 (once a SIGSEGV at the
 * first step), a position past the grid, a non-numeric counter, an n-step action outside its
 * branch, a negative Adam second moment, a NaN observation, an infinite pending reward, a NaN
 * running episode return, an n-step ring head of n (one past the ring: its next push would write
 * outside) or a pending count of n + 1 — is refused with the file and the tensor or counter
 * named; a replay counter that ties the replay file to another checkpoint is refused naming the
 * replay file; settings of another network are refused by the parameter count; the checkpoint
 * written back unchanged then resumes and finishes the run. */
static void test_resume_refuses_damaged_checkpoint(void **state)
{
    (void)state;
    char dir[64], path[160];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/checkpoint/latest.safetensors", dir);
    vx_train_cfg c;
    vx_err e;
    tiny_run(&c, dir);
    assert_int_equal(vx_train_run(&c, NULL, 0, stop_at, &(int){1}, NULL, &e), VX_ERR_STOPPED);
    size_t n;
    uint8_t *orig = th_read(path, &n);
    const char *want[][2] = {{NULL, NULL},
                             {"env.state", "row 3 (environment 3), row: bar 1000000000000"},
                             {"updates", "12abc"},
                             {"nstep.actions", "action 3 outside 0..2"},
                             {"adam.v", "element 40 is -1"},
                             {"env.obs", "element 7 is nan"},
                             {"env.state", "row 5 (environment 5), pos: 400 contracts"},
                             {"nstep.rewards", "element 2 is inf"},
                             {"env.episode_return", "row 1 is nan"},
                             {"nstep.count_head", "entry 18 is 3, outside 0..2"},
                             {"nstep.count_head", "entry 4 is 4, outside 0..3"},
                             {"inserted", "does not belong to the checkpoint (320)"}};
    for (int k = 1; k < 12; k++) {
        th_write(path, orig, n);
        damage_ckpt(path, k);
        vx_err_clear(&e);
        vx_status st = vx_train_run(&c, NULL, 1, NULL, NULL, NULL, &e);
        /* the replay counter's mismatch names the replay file it read */
        if (st != VX_ERR_FORMAT || !strstr(e.msg, k == 11 ? "replay-" : "latest.safetensors") ||
            !strstr(e.msg, want[k][0]) || !strstr(e.msg, want[k][1]))
            fail_msg("damage %d: status %d, '%s'", k, (int)st, e.msg);
    }
    /* settings that make another network (the second trunk layer 8 wide, not 16) are refused by
     * the checkpoint's parameter count, named, before any tensor is read */
    th_write(path, orig, n);
    vx_train_cfg other = c;
    ((vx_dqn_settings *)vx_train_algo_settings(&other, "dqn"))->trunk[1] = 8;
    vx_err_clear(&e);
    assert_int_equal(vx_train_run(&other, NULL, 1, NULL, NULL, NULL, &e), VX_ERR_FORMAT);
    if (!strstr(e.msg, "latest.safetensors") || !strstr(e.msg, "params") ||
        !strstr(e.msg, "(padding included), but these settings make one of"))
        fail_msg("other shapes: '%s'", e.msg);
    th_write(path, orig, n);
    damage_ckpt(path, 0);
    assert_int_equal(vx_train_run(&c, NULL, 1, NULL, NULL, NULL, &e), VX_OK);
    free(orig);
    th_rmtree(dir);
}

/* ---- the algorithm's glue (dqn_algo.c), driven directly ---------------------------------------
 * A small market (th_synth), 4 environments of 5-step episodes, 12 steps an epoch: episodes end
 * inside every epoch. */
enum { GL_N = 4, GL_T = 12, GL_D = VX_OBS_DIM, GL_ROWS = 300 };

static vx_env *gl_env(const vx_market *mk)
{
    vx_env_cfg ec;
    vx_env_cfg_default(&ec);
    ec.seed = 5;
    ec.episode_len = 5;
    vx_env *env;
    vx_err e;
    assert_int_equal(vx_env_create(&ec, mk, VX_SPLIT_TRAIN, GL_N, NULL, &env, &e), VX_OK);
    return env;
}

/* The greedy actions of `rows` observations under weights p, worked out here: the reference
 * forward (tested in test_nn), then each branch's first largest Q by a plain scan. */
static void gl_greedy(const vx_qnet_layout *L, const vx_loss_shape *sh, const float *p,
                      const float *obs, int rows, int32_t *out)
{
    vx_qnet_ws ws;
    vx_err e;
    assert_int_equal(vx_qnet_ws_create(L, rows, &ws, &e), VX_OK);
    vx_qnet_forward_ref(L, p, obs, rows, &ws);
    for (int r = 0; r < rows; r++)
        for (int d = 0; d < sh->n_branches; d++) {
            const float *q = ws.q + (size_t)r * L->out_dim + sh->offset[d];
            int best = 0;
            for (int a = 1; a < sh->branch[d]; a++)
                if (q[a] > q[best]) best = a;
            out[r * VX_ACTION_BRANCHES + d] = best;
        }
    vx_qnet_ws_free(&ws);
}

/* The weights a state holds under `prefix` ("online", "target"), gathered into one vector laid
 * out as L says (the padding 0). */
static void gl_state_weights(const vx_algo_state *o, const vx_qnet_layout *L, const char *prefix,
                             float *p)
{
    memset(p, 0, L->n_params * sizeof(float));
    for (size_t i = 0; i < L->n_tensors; i++) {
        char name[64], key[96];
        size_t off;
        int rows, cols;
        vx_qnet_tensor(L, i, name, sizeof name, &off, &rows, &cols);
        snprintf(key, sizeof key, "%s.%s", prefix, name);
        size_t k = 0;
        while (k < o->n_tensors && strcmp(o->tensors[k].name, key) != 0) k++;
        if (k == o->n_tensors) fail_msg("the state has no tensor %s", key);
        memcpy(p + off, o->tensors[k].data, (size_t)rows * cols * sizeof(float));
    }
}

static int gl_metric(const char *name)
{
    for (int i = 0; i < vx_algo_dqn.n_metrics; i++)
        if (!strcmp(vx_algo_dqn.metrics[i].name, name)) return i;
    fail_msg("no metric %s", name);
    return -1;
}

/* What an epoch hands the run, against a twin of the environments stepped here: with ε = 0 and
 * overlap on, epochs 0 and 1 both act greedily with the initial weights (epoch 1 with the
 * snapshot taken before epoch 0's updates), so the twin, acting with this file's argmax of the
 * initial network, walks the same episodes. Each epoch's env_steps (N·T), episode count and the
 * sum of the ended episodes' returns (not their mean: the run divides) must be the twin's; the
 * counters are cumulative (3, then 6 updates), ε and β those of the schedules, the loss, Q mean
 * and gradient norm the means of the epoch's updates and q_max their largest (a twin learner and
 * replay buffer fed the twin's transitions, below, makes the same updates), the speed at least
 * the 3 updates over the epoch call's wall time (which encloses the time learning took). The
 * metric names are the CSV's columns. Then the policy: it acts, over 300 rows (more than the
 * 256 its workspace holds at once), with the online weights the save holds — not the target
 * (still the initial weights: target_every 500) — and the best-checkpoint state
 * (policy_state), asked before any save, holds those same weights. */
static void test_algo_epoch_outputs_policy_and_state(void **state)
{
    (void)state;
    vx_series ser = {0};
    vx_market mk;
    vx_err e;
    th_synth(&ser, 20, 3, 0.1);
    assert_int_equal(vx_market_from_series(&ser, &mk, &e), VX_OK);
    vx_dqn_settings s;
    vx_dqn_settings_default(&s);
    s.trunk[0] = s.trunk[1] = 16, s.head_hidden = 8;
    s.learner.batch = 8, s.learner.n_step = 1, s.learner.adam.lr = 1e-2;
    s.warmup = 0, s.updates_per_epoch = 3, s.replay_capacity = 1000;
    s.eps_start = s.eps_end = 0;
    s.beta_updates = 100;
    vx_run_params run;
    memset(&run, 0, sizeof run);
    run.envs = GL_N, run.steps_per_epoch = GL_T, run.epochs = 4, run.checkpoint_every = 1;
    run.seed = 7;
    vx_qnet_cfg net;
    vx_dqn_net_cfg(&s, &net);
    vx_qnet_layout L;
    vx_loss_shape sh;
    assert_int_equal(vx_dqn_layout(&s.learner, &net, &L, &sh, &e), VX_OK);
    float *p0 = calloc(L.n_params, sizeof(float)), *pol_w = calloc(L.n_params, sizeof(float));
    float *online = calloc(L.n_params, sizeof(float)), *target = calloc(L.n_params, sizeof(float));
    vx_qnet_init(&L, run.seed, p0);

    const char *names[] = {"updates",   "loss",    "q_mean", "q_max",
                           "grad_norm", "epsilon", "beta",   "updates_per_s"};
    assert_int_equal(vx_algo_dqn.n_metrics, 8);
    for (int i = 0; i < 8; i++) assert_string_equal(vx_algo_dqn.metrics[i].name, names[i]);
    for (int i = 0; i < 8; i++) assert_int_equal(vx_algo_dqn.metrics[i].timing, i == 7);

    vx_env *env = gl_env(&mk), *twin = gl_env(&mk);
    vx_algo_init in = {&s, &run, NULL, env, 0};
    vx_algo *a;
    assert_int_equal(vx_algo_dqn.create(&in, &a, &e), VX_OK);
    static float obs[GL_N * GL_D], nobs[GL_N * GL_D], fin[GL_N * GL_D];
    float rew[GL_N];
    uint8_t te[GL_N], tr[GL_N];
    int32_t act[GL_N * VX_ACTION_BRANCHES];
    double ret[GL_N] = {0};
    assert_int_equal(vx_env_observe(twin, obs, NULL, &e), VX_OK);
    /* the twin's learner and replay buffer: the library's pieces (tested on their own) with the
     * backend's settings and seeds, fed the twin's transitions; what an epoch's statistics
     * should be is the mean of its updates' loss, Q mean and gradient norm, and the largest of
     * their Q maxima */
    vx_dqn tq;
    assert_int_equal(vx_dqn_create(&s.learner, &net, run.seed, &tq, &e), VX_OK);
    memcpy(tq.online, p0, L.n_params * sizeof(float));
    vx_dqn_sync_target(&tq);
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, s.replay_kind, (size_t)s.replay_capacity);
    rc.alpha = s.replay_alpha, rc.eps = s.replay_eps, rc.rank_refresh = s.rank_refresh;
    rc.seed = run.seed;
    vx_replay *rp;
    assert_int_equal(vx_replay_create(&rc, NULL, &rp, &e), VX_OK);
    vx_nstep ns;
    assert_int_equal(vx_nstep_create(1, GL_N, GL_D, s.learner.gamma, &ns, &e), VX_OK);
    vx_transition_buf tb;
    memset(&tb, 0, sizeof tb);
    assert_int_equal(vx_tbuf_reserve(&tb, GL_N * (GL_T + 1), GL_D, &e), VX_OK);
    enum { B = 8 };
    static float bo[B * GL_D], bn[B * GL_D], merged[GL_N * GL_D];
    float brw[B], bw[B];
    int32_t ba[B * VX_ACTION_BRANCHES];
    uint8_t bte[B], btr[B], bst[B];
    uint32_t bi[B], bg[B];
    vx_replay_batch rb = {bo, bn, ba, brw, bte, btr, bst, bw, bi, bg};
    for (int ep = 0; ep < 2; ep++) {
        double episodes = 0, sum = 0;
        tb.n = 0;
        for (int t = 0; t < GL_T; t++) {
            gl_greedy(&L, &sh, p0, obs, GL_N, act);
            assert_int_equal(vx_env_step(twin, act, nobs, rew, te, tr, fin, NULL, &e), VX_OK);
            for (int i = 0; i < GL_N; i++) {
                ret[i] += rew[i];
                if (te[i] | tr[i]) sum += ret[i], episodes += 1, ret[i] = 0;
                memcpy(merged + i * GL_D, (te[i] | tr[i] ? fin : nobs) + i * GL_D,
                       GL_D * sizeof(float));
            }
            vx_nstep_push(&ns, obs, act, rew, te, tr, merged, &tb);
            memcpy(obs, nobs, sizeof obs);
        }
        vx_transitions tv = vx_tbuf_view(&tb);
        assert_int_equal(vx_replay_insert(rp, &tv, tb.n, NULL, &e), VX_OK);
        assert_int_equal(vx_replay_set_beta(rp, vx_dqn_beta_at(&s, tq.updates), NULL, &e), VX_OK);
        double loss = 0, qm = 0, norm = 0, qx = -INFINITY;
        for (int k = 0; k < 3; k++) {
            vx_dqn_update_stats us;
            assert_int_equal(vx_replay_sample(rp, B, &rb, NULL, &e), VX_OK);
            vx_dqn_update(&tq, &rb, B, &us);
            assert_int_equal(vx_replay_update(rp, bi, bg, tq.priority, B, NULL, &e), VX_OK);
            loss += us.loss, qm += us.q_mean, norm += us.grad_norm;
            qx = us.q_max > qx ? us.q_max : qx;
        }
        vx_epoch_out out;
        memset(&out, 0, sizeof out);
        uint64_t t0 = vx_now_ns();
        assert_int_equal(vx_algo_dqn.epoch(a, &(vx_epoch_in){ep, 0}, &out, &e), VX_OK);
        double wall = vx_seconds_since(t0); /* encloses the learning time the speed divides by */
        assert_true(out.env_steps == GL_N * GL_T);
        assert_true(episodes >= 2 * GL_N && out.episodes == episodes);
        if (fabs(out.return_sum - sum) > 1e-9 * (1 + fabs(sum)))
            fail_msg("epoch %d: return_sum %.9g, the twin's %.9g over %g episodes", ep,
                     out.return_sum, sum, episodes);
        const double *m = out.metric;
        assert_true(m[gl_metric("updates")] == 3.0 * (ep + 1));
        assert_true(m[gl_metric("epsilon")] == 0);
        assert_near(m[gl_metric("beta")], vx_dqn_beta_at(&s, 3 * ep), 1e-15);
        const char *stat[4] = {"loss", "q_mean", "grad_norm", "q_max"};
        const double want[4] = {loss / 3, qm / 3, norm / 3, qx};
        for (int i = 0; i < 4; i++)
            if (fabs(m[gl_metric(stat[i])] - want[i]) > 1e-12 * (1 + fabs(want[i])))
                fail_msg("epoch %d: %s %.12g, the twin's %.12g", ep, stat[i], m[gl_metric(stat[i])],
                         want[i]);
        double ups = m[gl_metric("updates_per_s")];
        if (!(isfinite(ups) && ups >= 3 / wall))
            fail_msg("epoch %d: %.6g updates/s, but 3 updates took at most %.3g s", ep, ups, wall);
    }
    /* the policy and the best-checkpoint state, before any save */
    vx_policy pol;
    assert_int_equal(vx_algo_dqn.policy(a, &pol, &e), VX_OK);
    static vx_algo_state ps, o;
    assert_int_equal(vx_algo_dqn.policy_state(a, &ps, &e), VX_OK);
    gl_state_weights(&ps, &L, "online", pol_w);
    assert_int_equal(vx_algo_dqn.save(a, 0, &o, &e), VX_OK);
    gl_state_weights(&o, &L, "online", online);
    gl_state_weights(&o, &L, "target", target);
    assert_memory_equal(pol_w, online, L.n_params * sizeof(float));
    assert_memory_equal(target, p0, L.n_params * sizeof(float)); /* no sync yet */
    static float rows[GL_ROWS * GL_D];
    vx_rng g = vx_rng_make(11, 0, 0);
    for (int i = 0; i < GL_ROWS * GL_D; i++) rows[i] = (float)(3 * vx_rng_normal(&g));
    static int32_t got[GL_ROWS * VX_ACTION_BRANCHES], want[GL_ROWS * VX_ACTION_BRANCHES],
        old[GL_ROWS * VX_ACTION_BRANCHES];
    assert_int_equal(pol.act(pol.ctx, rows, GL_ROWS, got, &e), VX_OK);
    gl_greedy(&L, &sh, online, rows, GL_ROWS, want);
    gl_greedy(&L, &sh, target, rows, GL_ROWS, old);
    assert_memory_equal(got, want, sizeof got);
    int moved = 0;
    for (int i = 0; i < GL_ROWS * VX_ACTION_BRANCHES; i++) moved += want[i] != old[i];
    printf("policy: %d of %d greedy choices differ between the online and the target network\n",
           moved, GL_ROWS * VX_ACTION_BRANCHES);
    assert_true(moved > 0);
    /* and the twin's weights are the instance's: the statistics compared above were of the same
     * updates */
    assert_memory_equal(tq.online, online, L.n_params * sizeof(float));
    vx_algo_dqn.free(a);
    vx_env_free(env), vx_env_free(twin);
    vx_dqn_free(&tq), vx_replay_free(rp), vx_nstep_free(&ns), vx_tbuf_free(&tb);
    free(p0), free(pol_w), free(online), free(target);
    vx_market_close(&mk);
}

/* An instance that only acts (as `vixen eval` makes one) is greedy whatever the settings' ε: with
 * the default ε schedule (ending at 0.05) it acts, over 300 rows (two chunks of its 256-row
 * workspace), as this file's argmax of the initial network of the run's seed. An exploring
 * policy would miss ~2% of the 900 choices; one that drops the second chunk's offsets, all of
 * its 44 rows. */
static void test_acting_instance_is_greedy(void **state)
{
    (void)state;
    vx_dqn_settings s;
    vx_dqn_settings_default(&s);
    s.trunk[0] = s.trunk[1] = 16, s.head_hidden = 8;
    vx_run_params run;
    memset(&run, 0, sizeof run);
    run.envs = 1, run.steps_per_epoch = 1, run.epochs = 1, run.seed = 9;
    vx_err e;
    vx_qnet_cfg net;
    vx_dqn_net_cfg(&s, &net);
    vx_qnet_layout L;
    vx_loss_shape sh;
    assert_int_equal(vx_dqn_layout(&s.learner, &net, &L, &sh, &e), VX_OK);
    float *p0 = calloc(L.n_params, sizeof(float));
    vx_qnet_init(&L, run.seed, p0);
    vx_algo_init in = {&s, &run, NULL, NULL, 0};
    vx_algo *a;
    assert_int_equal(vx_algo_dqn.create(&in, &a, &e), VX_OK);
    vx_policy pol;
    assert_int_equal(vx_algo_dqn.policy(a, &pol, &e), VX_OK);
    static float rows[GL_ROWS * GL_D];
    vx_rng g = vx_rng_make(12, 0, 0);
    for (int i = 0; i < GL_ROWS * GL_D; i++) rows[i] = (float)(3 * vx_rng_normal(&g));
    static int32_t got[GL_ROWS * VX_ACTION_BRANCHES], want[GL_ROWS * VX_ACTION_BRANCHES];
    memset(got, 0xff, sizeof got);
    assert_int_equal(pol.act(pol.ctx, rows, GL_ROWS, got, &e), VX_OK);
    gl_greedy(&L, &sh, p0, rows, GL_ROWS, want);
    for (int i = 0; i < GL_ROWS * VX_ACTION_BRANCHES; i++)
        if (got[i] != want[i])
            fail_msg("row %d, branch %d: action %d, the greedy one %d", i / VX_ACTION_BRANCHES,
                     i % VX_ACTION_BRANCHES, got[i], want[i]);
    vx_algo_dqn.free(a);
    free(p0);
}

/* test_act_fused_plan.c */
void test_act_fused_copies(void **state);
void test_act_fused_smem(void **state);
/* test_dqn_fused_plan.c */
void test_dqn_fused_layout(void **state);
void test_dqn_fused_takes(void **state);
void test_dqn_layers_plan(void **state);

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expected_value_target_by_hand),
        cmocka_unit_test(test_c51_projection_keeps_mass),
        cmocka_unit_test(test_c51_projection_at_the_support_edges),
        cmocka_unit_test(test_c51_far_logits),
        cmocka_unit_test(test_c51_gradient_and_shared_target),
        cmocka_unit_test(test_nstep_across_episode_end),
        cmocka_unit_test(test_nstep_two_environments),
        cmocka_unit_test(test_learner_learns_a_bandit_and_syncs),
        cmocka_unit_test(test_update_bootstraps_with_gamma_to_the_m),
        cmocka_unit_test(test_update_by_hand_multi_step_clipped),
        cmocka_unit_test(test_update_by_hand_one_step_unclipped),
        cmocka_unit_test(test_c51_update_by_hand),
        cmocka_unit_test(test_act_chunks_weights_and_greedy_q),
        cmocka_unit_test(test_act_draws_independent_across_steps),
        cmocka_unit_test(test_act_reader_with_first_block),
        cmocka_unit_test(test_polyak_and_act),
        cmocka_unit_test(test_create_refuses_overflowing_sizes),
        cmocka_unit_test(test_resume_refuses_damaged_checkpoint),
        cmocka_unit_test(test_collection_keeps_final_obs),
        cmocka_unit_test(test_overlap_acts_with_previous_weights),
        cmocka_unit_test(test_learn_writes_back_priorities),
        cmocka_unit_test(test_algo_epoch_outputs_policy_and_state),
        cmocka_unit_test(test_acting_instance_is_greedy),
        cmocka_unit_test(test_act_fused_copies),
        cmocka_unit_test(test_act_fused_smem),
        cmocka_unit_test(test_dqn_fused_layout),
        cmocka_unit_test(test_dqn_fused_takes),
        cmocka_unit_test(test_dqn_layers_plan),
    };
    return cmocka_run_group_tests_name("dqn", tests, NULL, NULL);
}

/* test_env.c — the trading environment: order sizing, fills, accounting to the cent, episode
 * ends and resets, splits, determinism, argument errors, the parameters every backend starts
 * from, CPU device contexts, the states' round trip, and the checks of states from a file (the
 * dynamics keep them through every step, reset and stop-out; each damaged field is refused). */
#include "helpers.h"
#include "vixen/env.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A hand-made market of `rows` bars: open = 100 + t, high = open + 2, low = open − 2,
 * close = open + 1 (or falling, with `down`), and features that encode their own row. */
typedef struct {
    vx_market m;
    double *o, *h, *l, *c, *v;
    int64_t *ts;
    float *f;
} tiny;

static void tiny_make(tiny *t, size_t rows, int down)
{
    memset(t, 0, sizeof *t);
    t->o = malloc(rows * 8), t->h = malloc(rows * 8), t->l = malloc(rows * 8);
    t->c = malloc(rows * 8), t->v = malloc(rows * 8), t->ts = malloc(rows * 8);
    t->f = malloc(rows * VX_MARKET_FEATURES * sizeof(float));
    for (size_t i = 0; i < rows; i++) {
        double o = down ? 200.0 - 3.0 * (double)i : 100.0 + (double)i;
        t->o[i] = o, t->h[i] = o + 2, t->l[i] = o - 2, t->c[i] = down ? o - 2 : o + 1;
        t->v[i] = 10, t->ts[i] = (int64_t)i * 60000000000ll;
        for (int k = 0; k < VX_MARKET_FEATURES; k++)
            t->f[i * VX_MARKET_FEATURES + k] = (float)i + 0.001f * (float)k;
    }
    vx_market *m = &t->m;
    m->n_bars = rows, m->rows = rows, m->first_bar = 0;
    m->ts = t->ts, m->open = t->o, m->high = t->h, m->low = t->l, m->close = t->c;
    m->volume = t->v, m->features = t->f;
}

static void tiny_free(tiny *t)
{
    free(t->o), free(t->h), free(t->l), free(t->c), free(t->v), free(t->ts), free(t->f);
}

static void cfg_tiny(vx_env_cfg *c)
{
    vx_env_cfg_default(c);
    c->episode_len = 5;
    c->commission = 2;
    c->slippage_ticks = 1;
    c->tick = 0.25;
    c->multiplier = 50;
    c->reward_scale = 100;
    c->drawdown_limit = 1e9;
    c->val_fraction = 0; /* (almost) every row trains: these tests step one split */
    c->test_fraction = 0.01;
    c->gap = 0;
    c->seed = 3;
}

static void test_order_sizing_and_fills(void **state)
{
    (void)state;
    int want4[9] = {-4, -3, -2, -1, 0, 1, 2, 3, 4};
    for (int e = 0; e < 9; e++) assert_int_equal(vx_env_target(e, 4), want4[e]);
    assert_int_equal(vx_env_target(1, 10), -8); /* −7.5 rounds away from zero */
    assert_int_equal(vx_env_target(3, 10), -3); /* −2.5 */
    assert_int_equal(vx_env_target(5, 10), 3);
    assert_int_equal(vx_env_order_qty(0, 4, 0), 1); /* 4/3 -> 1 */
    assert_int_equal(vx_env_order_qty(0, 4, 1), 3); /* 8/3 -> 3 */
    assert_int_equal(vx_env_order_qty(0, 4, 2), 4);
    assert_int_equal(vx_env_order_qty(2, 3, 0), 1); /* at least one contract */
    assert_int_equal(vx_env_order_qty(0, -5, 1), -3);
    assert_int_equal(vx_env_order_qty(-2, -2, 2), 0);
    vx_env_params p = {0};
    p.tick = 0.25, p.slippage_ticks = 2;
    double px;
    assert_true(vx_env_fill(&p, 3, VX_ORDER_MARKET, 100, 102, 98, 101, &px) && px == 100.5);
    assert_true(vx_env_fill(&p, -3, VX_ORDER_MARKET, 100, 102, 98, 101, &px) && px == 99.5);
    assert_true(vx_env_fill(&p, 1, VX_ORDER_LIMIT, 100, 102, 99.5, 101, &px) && px == 99.75);
    assert_false(vx_env_fill(&p, 1, VX_ORDER_LIMIT, 100, 102, 99.75, 101, &px)); /* touched only */
    assert_true(vx_env_fill(&p, -1, VX_ORDER_LIMIT, 100, 100.5, 99, 100, &px) && px == 100.25);
    assert_false(vx_env_fill(&p, -1, VX_ORDER_LIMIT, 100, 100.25, 99, 100, &px));
    assert_true(vx_env_fill(&p, 2, VX_ORDER_VWAP, 100, 103, 97, 102, &px));
    assert_true(fabs(px - (302.0 / 3 + 0.25)) < 1e-12);
}

static void step1(vx_env *env, int e, int o, int u, float *obs, float *r, uint8_t *te, uint8_t *tr,
                  float *fin)
{
    int32_t a[VX_ACTION_BRANCHES] = {e, o, u};
    vx_err err;
    assert_int_equal(vx_env_step(env, a, obs, r, te, tr, fin, NULL, &err), VX_OK);
}

static void test_accounting_one_episode(void **state)
{
    (void)state;
    tiny t;
    tiny_make(&t, 12, 0);
    vx_env_cfg c;
    cfg_tiny(&c);
    vx_env *env;
    vx_err e;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_OK);
    const vx_env_state *s = vx_env_states(env);
    int64_t r0 = s->row;
    assert_true(r0 >= 0 && r0 <= 12 - 1 - 5);
    float obs[VX_OBS_DIM], fin[VX_OBS_DIM], rew;
    uint8_t te, tr;
    double unit = 100 * sqrt(5.0), eq, cash, sum_r = 0;
    /* 1: buy 4 at market: open + 1 tick, 4 × $2 commission */
    step1(env, 8, VX_ORDER_MARKET, 2, obs, &rew, &te, &tr, fin);
    double o1 = t.o[r0 + 1], c1 = t.c[r0 + 1];
    cash = -4 * (o1 + 0.25) * 50 - 8;
    eq = cash + 4 * c1 * 50;
    assert_true(fabs(rew - eq / 100) < 1e-6);
    sum_r += rew;
    assert_int_equal(s->row, r0 + 1);
    assert_int_equal(s->pos, 4);
    assert_true(fabs(s->cash - cash) < 1e-9 && fabs(s->equity - eq) < 1e-9);
    assert_memory_equal(obs, t.f + (r0 + 1) * VX_MARKET_FEATURES, VX_MARKET_FEATURES * 4);
    assert_near(obs[45], 1.0, 0);
    assert_near(obs[46], 4 * (c1 - (o1 + 0.25)) * 50 / unit, 1e-6);
    assert_near(obs[47], 1.0 / 5, 1e-7);
    assert_near(obs[48], -8 / unit, 1e-6);
    assert_near(obs[49], 0.0, 0);
    assert_near(obs[50], 0.5, 0);
    assert_false(te || tr);
    /* 2: flatten with a sell limit one tick above the open; the bar trades through it */
    step1(env, 4, VX_ORDER_LIMIT, 2, obs, &rew, &te, &tr, fin);
    double o2 = t.o[r0 + 2], prev = eq;
    cash += 4 * (o2 + 0.25) * 50 - 8;
    eq = cash;
    assert_true(fabs(rew - (eq - prev) / 100) < 1e-6);
    sum_r += rew;
    assert_int_equal(s->pos, 0);
    assert_true(fabs(s->realised - (4 * (o2 - o1) * 50 - 16)) < 1e-9);
    assert_near(obs[45], 0.0, 0);
    assert_near(obs[47], 0.0, 0);
    assert_near(obs[50], -0.5, 0);
    /* 3: toward −4 by VWAP at low urgency: one contract at the typical price − half a tick */
    step1(env, 0, VX_ORDER_VWAP, 0, obs, &rew, &te, &tr, fin);
    int64_t r3 = r0 + 3;
    double fill = (t.h[r3] + t.l[r3] + t.c[r3]) / 3 - 0.125;
    prev = eq;
    cash += fill * 50 - 2;
    eq = cash - 1 * t.c[r3] * 50;
    assert_int_equal(s->pos, -1);
    assert_true(fabs(s->avg_entry - fill) < 1e-12);
    assert_true(fabs(rew - (eq - prev) / 100) < 1e-6);
    sum_r += rew;
    /* 4, 5: hold −1 (exposure 3); the fifth step ends the episode by truncation */
    step1(env, 3, VX_ORDER_MARKET, 0, obs, &rew, &te, &tr, fin);
    sum_r += rew;
    assert_false(te || tr);
    uint64_t episode = s->episode;
    step1(env, 3, VX_ORDER_MARKET, 0, obs, &rew, &te, &tr, fin);
    sum_r += rew;
    assert_int_equal(tr, 1);
    assert_int_equal(te, 0);
    double final_eq = cash - 1 * t.c[r0 + 5] * 50;
    assert_true(fabs(sum_r * 100 - final_eq) < 1e-3); /* rewards telescope to the equity */
    /* final_obs is the last state: row r0+5, short one; obs is the new episode's first */
    assert_memory_equal(fin, t.f + (r0 + 5) * VX_MARKET_FEATURES, VX_MARKET_FEATURES * 4);
    assert_near(fin[45], -0.25, 0);
    assert_near(fin[47], 3.0 / 5, 1e-7);
    assert_int_equal(s->episode, episode + 1);
    assert_int_equal(s->pos, 0);
    assert_int_equal(s->steps, 0);
    assert_memory_equal(obs, t.f + s->row * VX_MARKET_FEATURES, VX_MARKET_FEATURES * 4);
    for (int k = 45; k < 51; k++) assert_near(obs[k], 0.0, 0);
    vx_env_free(env);
    tiny_free(&t);
}

static void test_limit_not_filled_and_stop_out(void **state)
{
    (void)state;
    tiny t;
    tiny_make(&t, 12, 1); /* falling: each bar opens 3 lower and closes 2 under its open */
    vx_env_cfg c;
    cfg_tiny(&c);
    c.drawdown_limit = 300;
    vx_env *env;
    vx_err e;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_OK);
    const vx_env_state *s = vx_env_states(env);
    float obs[VX_OBS_DIM], fin[VX_OBS_DIM], rew;
    uint8_t te, tr;
    /* a buy limit at open − 1 tick fills (low = open − 2) */
    step1(env, 5, VX_ORDER_LIMIT, 2, obs, &rew, &te, &tr, fin);
    assert_int_equal(s->pos, 1);
    /* long 4 more at market: the close is 2 under the open, −$100 per contract per bar */
    step1(env, 8, VX_ORDER_MARKET, 2, obs, &rew, &te, &tr, fin);
    assert_int_equal(te, 1);
    assert_int_equal(tr, 0);
    assert_near(fin[49], 1.0, 0); /* drawdown at (beyond) the limit */
    assert_near(fin[45], 1.0, 0);
    assert_int_equal(s->pos, 0);
    assert_int_equal(s->steps, 0);
    vx_env_free(env);
    /* a limit order the bar only touches does not fill */
    for (size_t i = 0; i < 12; i++) t.l[i] = t.o[i] - 0.25;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_OK);
    s = vx_env_states(env);
    step1(env, 8, VX_ORDER_LIMIT, 2, obs, &rew, &te, &tr, fin);
    assert_int_equal(s->pos, 0);
    assert_near(rew, 0.0, 0);
    assert_int_equal(s->last_change, 0);
    vx_env_free(env);
    tiny_free(&t);
}

/* Adding to a position, flipping it and closing it, on the rising tiny market from row 0
 * (open 100 + t, close open + 1), at market with full urgency, $2 commission, 1 tick slippage.
 * Worked by hand:
 *   1: buy 2 at 101.25                     pos  2, entry 101.25
 *   2: buy 2 at 102.25                     pos  4, entry (2·101.25 + 2·102.25)/4 = 101.75
 *   3: sell 6 at 102.75 (flip to −2)       closes 4: +4·1.00·50 = 200; pos −2, entry 102.75;
 *                                          time in position restarts (the side changed)
 *   4: buy 2 at 104.25 (flat)              closes 2: −2·1.50·50 = −150
 * Commissions 2·(2 + 2 + 6 + 2) = 24, so realised = 200 − 150 − 24 = 26 = the final cash. An entry
 * price that forgot the first lot, a flip that realised all 6 contracts, kept the old entry, or
 * kept counting time in position across the flip each fail here. */
static void test_add_flip_and_close(void **state)
{
    (void)state;
    tiny t;
    tiny_make(&t, 12, 0);
    vx_env_cfg c;
    cfg_tiny(&c);
    vx_env *env;
    vx_err e;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_OK);
    assert_int_equal(vx_env_reset_to(env, 0, 0, 5, &e), VX_OK);
    const vx_env_state *s = vx_env_states(env);
    float obs[VX_OBS_DIM], fin[VX_OBS_DIM], rew;
    uint8_t te, tr;
    const double unit = 100 * sqrt(5.0); /* the PnL observations' unit */
    double sum_r = 0;
    step1(env, 6, VX_ORDER_MARKET, 2, obs, &rew, &te, &tr, fin);
    sum_r += rew;
    assert_int_equal(s->pos, 2);
    assert_true(s->avg_entry == 101.25);
    step1(env, 8, VX_ORDER_MARKET, 2, obs, &rew, &te, &tr, fin);
    sum_r += rew;
    assert_int_equal(s->pos, 4);
    assert_true(s->avg_entry == 101.75);
    assert_true(fabs(s->realised - -8) < 1e-9); /* commissions only: nothing closed yet */
    assert_near(obs[46], 4 * (103 - 101.75) * 50 / unit, 1e-6); /* close 103 */
    assert_near(obs[47], 2.0 / 5, 1e-7); /* adding keeps the time in position */
    step1(env, 2, VX_ORDER_MARKET, 2, obs, &rew, &te, &tr, fin);
    sum_r += rew;
    assert_int_equal(s->pos, -2);
    assert_int_equal(s->last_change, -6);
    assert_true(s->avg_entry == 102.75);
    assert_true(fabs(s->realised - (200 - 20)) < 1e-9);
    assert_int_equal(s->time_in_pos, 1);
    assert_near(obs[46], -2 * (104 - 102.75) * 50 / unit, 1e-6); /* close 104 */
    assert_near(obs[47], 1.0 / 5, 1e-7);
    assert_near(obs[48], 180 / unit, 1e-6);
    step1(env, 4, VX_ORDER_MARKET, 2, obs, &rew, &te, &tr, fin);
    sum_r += rew;
    assert_int_equal(s->pos, 0);
    assert_true(fabs(s->realised - 26) < 1e-9);
    assert_true(fabs(s->cash - 26) < 1e-9 && fabs(s->equity - 26) < 1e-9);
    assert_near(obs[46], 0.0, 0);
    assert_near(obs[48], 26 / unit, 1e-6);
    assert_true(fabs(sum_r * 100 - 26) < 1e-3); /* the rewards telescope to the equity */
    assert_false(te || tr);
    vx_env_free(env);
    tiny_free(&t);
}

/* The PnL observations are clipped to ±5 on both sides. A reward scale of 1 makes their unit
 * sqrt(5) ≈ 2.24 $: on the falling market (open 200 − 3t, close open − 2) four contracts bought at
 * open + 0.25 are 4·(−2.25)·50 = −450 $ under water (−201 units → −5) with −8 $ realised (−3.58,
 * inside the clip); sold the next bar at its open − 0.25 they realise 4·(−3.5)·50 − 16 = −716 $
 * (→ −5). On the rising market the same purchase is 4·0.75·50 = +150 $ ahead (→ +5). */
static void test_pnl_observations_clipped(void **state)
{
    (void)state;
    for (int down = 1; down >= 0; down--) {
        tiny t;
        tiny_make(&t, 12, down);
        vx_env_cfg c;
        cfg_tiny(&c);
        c.reward_scale = 1;
        vx_env *env;
        vx_err e;
        assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_OK);
        assert_int_equal(vx_env_reset_to(env, 0, 0, 5, &e), VX_OK);
        float obs[VX_OBS_DIM], rew;
        uint8_t te, tr;
        const double unit = sqrt(5.0);
        step1(env, 8, VX_ORDER_MARKET, 2, obs, &rew, &te, &tr, NULL);
        assert_near(obs[46], down ? -5.0 : 5.0, 0);
        assert_near(obs[48], -8 / unit, 1e-6);
        if (down) {
            step1(env, 4, VX_ORDER_MARKET, 2, obs, &rew, &te, &tr, NULL);
            assert_true(fabs(vx_env_states(env)->realised - -716) < 1e-9);
            assert_near(obs[48], -5.0, 0);
            assert_near(obs[46], 0.0, 0);
        }
        vx_env_free(env);
        tiny_free(&t);
    }
}

/* The stop-out fires when the drawdown reaches the limit, and wins over the truncation of the same
 * step. On the falling market one contract bought at open + 0.25 and marked at the close (open −
 * 2) with $2 commission leaves equity −2.25·50 − 2 = −114.5 $ (exact in binary) below a peak of 0.
 * With a one-step episode and a limit of exactly 114.5 the step is terminated, not truncated; a
 * limit 1/64 $ higher lets the episode run out instead. */
static void test_stop_out_at_the_limit(void **state)
{
    (void)state;
    tiny t;
    tiny_make(&t, 12, 1);
    vx_env_cfg c;
    cfg_tiny(&c);
    for (int above = 0; above <= 1; above++) {
        c.drawdown_limit = 114.5 + (above ? 1.0 / 64 : 0);
        vx_env *env;
        vx_err e;
        assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_OK);
        assert_int_equal(vx_env_reset_to(env, 0, 0, 1, &e), VX_OK);
        float obs[VX_OBS_DIM], fin[VX_OBS_DIM], rew;
        uint8_t te, tr;
        step1(env, 5, VX_ORDER_MARKET, 2, obs, &rew, &te, &tr, fin);
        assert_near(rew, -114.5 / 100, 1e-7);
        assert_int_equal(te, !above);
        assert_int_equal(tr, above);
        assert_near(fin[49], above ? 114.5 / c.drawdown_limit : 1.0, 1e-7);
        vx_env_free(env);
    }
    tiny_free(&t);
}

/* Episode starts are uniform over the rows that leave a whole episode inside the split: with 12
 * rows and episodes of 5 steps, rows 0..6 (the last start ends on row 11, the split's last). 16
 * environments stepped 60 times start 16 · 13 = 208 episodes; under uniform draws a given row is
 * missed with probability (6/7)^208 ≈ 1e-14 and a row 7 (one past the range) would be drawn with
 * probability 1 − (7/8)^208 > 0.999999999999. So every row of 0..6 must appear and no other. */
static void test_episode_starts_cover_the_split(void **state)
{
    (void)state;
    tiny t;
    tiny_make(&t, 12, 0);
    vx_env_cfg c;
    cfg_tiny(&c);
    enum { N = 16, STEPS = 60 };
    vx_env *env;
    vx_err e;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, N, NULL, &env, &e), VX_OK);
    const vx_env_params *p = vx_env_params_get(env);
    assert_int_equal(p->row_lo, 0);
    assert_int_equal(p->row_hi, 12);
    int seen[12] = {0}, starts = 0;
    const vx_env_state *s = vx_env_states(env);
    for (int i = 0; i < N; i++) seen[s[i].row]++, starts++;
    int32_t a[N * VX_ACTION_BRANCHES];
    for (int i = 0; i < N * VX_ACTION_BRANCHES; i++) a[i] = i % 3 == 0 ? 4 : 0; /* stay flat */
    float *obs = malloc(N * VX_OBS_DIM * sizeof *obs), rew[N];
    uint8_t te[N], tr[N];
    for (int k = 0; k < STEPS; k++) {
        assert_int_equal(vx_env_step(env, a, obs, rew, te, tr, NULL, NULL, &e), VX_OK);
        for (int i = 0; i < N; i++)
            if (tr[i]) {
                assert_true(s[i].row >= 0 && s[i].row < 12);
                seen[s[i].row]++, starts++;
            }
    }
    assert_int_equal(starts, N * (1 + STEPS / 5));
    for (int r = 0; r < 12; r++)
        if ((r <= 6) != (seen[r] > 0)) fail_msg("row %d started %d episodes", r, seen[r]);
    free(obs);
    vx_env_free(env);
    tiny_free(&t);
}

/* The vol-scaled reward's units at every row, against the EWMA recomputed here: for a market whose
 * rows start after some bars (first_bar 2: row 0 is bar 2, the average already running) and one
 * whose rows start at bar 0 (row 0 has no change before it: the floor). The closes stay flat for
 * the first bars, where σ̂ = 0 and the quarter-tick floor (50 · 4 · 0.0625 = 12.5 $) holds. Out is
 * filled with NaN first, so a row left unwritten fails. A flat market's reward scale falls back to
 * 1 (not 0, which would divide every reward by zero). */
static void test_reward_units_every_row(void **state)
{
    (void)state;
    enum { NB = 12 };
    double close[NB] = {100, 100, 100, 100, 102, 101, 101.5, 99, 99, 103, 104, 100};
    vx_env_cfg c;
    vx_env_cfg_default(&c);
    for (size_t first = 0; first <= 2; first += 2) {
        vx_market m;
        memset(&m, 0, sizeof m);
        m.close = close, m.n_bars = NB, m.first_bar = first, m.rows = NB - first;
        double out[NB], want[NB], var = 0;
        for (int b = 0; b < NB; b++) out[b] = NAN;
        want[0] = 12.5;
        for (int b = 1; b < NB; b++) {
            double d = close[b] - close[b - 1];
            var = b == 1 ? d * d : 0.99 * var + 0.01 * d * d;
            want[b] = 50 * 4 * fmax(sqrt(var), 0.0625);
        }
        assert_true(want[3] == 12.5 && want[4] > 12.5); /* the floor holds, then lets go */
        vx_env_reward_units(&m, &c, out);
        for (size_t r = 0; r < m.rows; r++)
            if (!(fabs(out[r] - want[first + r]) <= 1e-12 * want[first + r]))
                fail_msg("first_bar %zu, row %zu: %.17g, want %.17g", first, r, out[r],
                         want[first + r]);
    }
    double flat[NB];
    for (int b = 0; b < NB; b++) flat[b] = 4000.25;
    vx_market fm;
    memset(&fm, 0, sizeof fm);
    fm.close = flat, fm.n_bars = NB, fm.rows = NB;
    assert_true(vx_env_reward_scale(&fm, 0, NB, 50, 4) == 1.0);
}

static void run_random(const vx_market *m, uint64_t seed, vx_split split, size_t n, size_t steps,
                       float *obs_out, float *rew_out)
{
    vx_env_cfg c;
    vx_env_cfg_default(&c);
    c.seed = seed;
    vx_env *env;
    vx_err e;
    assert_int_equal(vx_env_create(&c, m, split, n, NULL, &env, &e), VX_OK);
    int64_t lo, hi;
    vx_env_split_rows(m, &c, split, &lo, &hi);
    int32_t *a = malloc(n * VX_ACTION_BRANCHES * sizeof *a);
    float *fin = malloc(n * VX_OBS_DIM * sizeof *fin);
    uint8_t *te = malloc(n), *tr = malloc(n);
    vx_rng r = vx_rng_make(77, 0, 0);
    for (size_t t = 0; t < steps; t++) {
        for (size_t i = 0; i < n; i++) {
            a[i * VX_ACTION_BRANCHES] = (int32_t)vx_rng_below(&r, 9);
            a[i * VX_ACTION_BRANCHES + 1] = (int32_t)vx_rng_below(&r, 3);
            a[i * VX_ACTION_BRANCHES + 2] = (int32_t)vx_rng_below(&r, 3);
        }
        assert_int_equal(vx_env_step(env, a, obs_out + t * n * VX_OBS_DIM, rew_out + t * n, te, tr,
                                     fin, NULL, &e),
                         VX_OK);
        const vx_env_state *s = vx_env_states(env);
        for (size_t i = 0; i < n; i++) {
            assert_true(s[i].row >= lo && s[i].row < hi);
            assert_true(s[i].pos >= -4 && s[i].pos <= 4);
            assert_false(te[i] && tr[i]);
        }
    }
    free(a), free(fin), free(te), free(tr);
    vx_env_free(env);
}

static void test_determinism_and_splits(void **state)
{
    (void)state;
    vx_series s;
    th_synth(&s, 12, 2, 0.15);
    vx_market m;
    vx_err e;
    assert_int_equal(vx_market_from_series(&s, &m, &e), VX_OK);
    size_t n = 16, steps = 900;
    float *o1 = malloc(steps * n * VX_OBS_DIM * 4), *o2 = malloc(steps * n * VX_OBS_DIM * 4);
    float *r1 = malloc(steps * n * 4), *r2 = malloc(steps * n * 4);
    run_random(&m, 5, VX_SPLIT_TRAIN, n, steps, o1, r1);
    run_random(&m, 5, VX_SPLIT_TRAIN, n, steps, o2, r2);
    assert_memory_equal(o1, o2, steps * n * VX_OBS_DIM * 4);
    assert_memory_equal(r1, r2, steps * n * 4);
    run_random(&m, 6, VX_SPLIT_TRAIN, n, steps, o2, r2);
    assert_true(memcmp(o1, o2, n * VX_OBS_DIM * 4) != 0);
    run_random(&m, 5, VX_SPLIT_TEST, n, steps, o2, r2); /* rows checked inside */
    run_random(&m, 5, VX_SPLIT_VAL, n, steps, o2, r2);
    for (size_t i = 0; i < steps * n * VX_OBS_DIM; i++) assert_true(isfinite(o1[i]));
    int64_t lo, hi;
    vx_env_cfg dc;
    vx_env_cfg_default(&dc);
    /* the reward scale: multiplier · contracts · sd of close changes over the training rows */
    vx_env_split_rows(&m, &dc, VX_SPLIT_TRAIN, &lo, &hi);
    double sum = 0, sum2 = 0;
    for (int64_t r = lo + 1; r < hi; r++) {
        double d = m.close[m.first_bar + r] - m.close[m.first_bar + r - 1];
        sum += d, sum2 += d * d;
    }
    double k = (double)(hi - lo - 1), sd = sqrt(sum2 / k - (sum / k) * (sum / k));
    assert_true(fabs(vx_env_reward_scale(&m, lo, hi, 50, 4) - 200 * sd) < 1e-9 * 200 * sd);
    free(o1), free(o2), free(r1), free(r2);
    vx_market_close(&m);
}

/* The three splits by time, with gaps, and walk-forward folds: the rows computed here by hand
 * from the documented layout (train | gap | val | gap | test; the test region cut into K blocks,
 * fold k validating just before block k and training on everything before that). */
static void test_splits_by_time(void **state)
{
    (void)state;
    vx_series s;
    th_synth(&s, 30, 4, 0.15);
    vx_market m;
    vx_err e;
    assert_int_equal(vx_market_from_series(&s, &m, &e), VX_OK);
    int64_t R = (int64_t)m.rows, lo, hi;
    vx_env_cfg c;
    vx_env_cfg_default(&c); /* val 0.15, test 0.15, gap 240 (the feature window), one fold */
    assert_int_equal(c.gap, 240);
    int64_t T = (int64_t)floor(0.15 * R), V = (int64_t)floor(0.15 * R);
    vx_env_split_rows(&m, &c, VX_SPLIT_TEST, &lo, &hi);
    assert_int_equal(lo, R - T);
    assert_int_equal(hi, R);
    vx_env_split_rows(&m, &c, VX_SPLIT_VAL, &lo, &hi);
    assert_int_equal(hi, R - T - 240);
    assert_int_equal(lo, R - T - 240 - V);
    vx_env_split_rows(&m, &c, VX_SPLIT_TRAIN, &lo, &hi);
    assert_int_equal(lo, 0);
    assert_int_equal(hi, R - T - 240 - V - 240);
    assert_int_equal(vx_env_check_splits(&m, &c, 392, &e), VX_OK);
    /* no validation split: training runs up to one gap before the test split */
    c.val_fraction = 0;
    vx_env_split_rows(&m, &c, VX_SPLIT_TRAIN, &lo, &hi);
    assert_int_equal(hi, R - T - 240);
    /* three folds over a 30% test region: the blocks tile it, the window expands */
    vx_env_cfg_default(&c);
    c.test_fraction = 0.3;
    c.folds = 3;
    T = (int64_t)floor(0.3 * R);
    int64_t prev_test_hi = R - T, prev_train_hi = -1;
    for (int k = 1; k <= 3; k++) {
        c.fold = k;
        int64_t tlo, thi, vlo, vhi, rlo, rhi;
        vx_env_split_rows(&m, &c, VX_SPLIT_TEST, &tlo, &thi);
        vx_env_split_rows(&m, &c, VX_SPLIT_VAL, &vlo, &vhi);
        vx_env_split_rows(&m, &c, VX_SPLIT_TRAIN, &rlo, &rhi);
        assert_int_equal(tlo, prev_test_hi); /* consecutive blocks */
        assert_int_equal(thi, R - T + k * T / 3);
        assert_int_equal(vhi, tlo - 240);
        assert_int_equal(vhi - vlo, V);
        assert_int_equal(rhi, vlo - 240);
        assert_int_equal(rlo, 0);
        assert_true(rhi > prev_train_hi); /* later folds train on more */
        prev_test_hi = thi, prev_train_hi = rhi;
    }
    assert_int_equal(prev_test_hi, R); /* the last block ends the market */
    /* five folds: T = 3438 leaves 3 over 5, so block k must start at R − T + ⌊(k − 1) T/5⌋ (where
     * block k − 1 ended), not at R − T + (k − 1) ⌊T/5⌋, which falls behind from block 3 on
     * ((k − 1) · 3 ≥ 5) and would overlap the blocks */
    assert_int_equal(T % 5, 3);
    c.folds = 5;
    prev_test_hi = R - T;
    for (int k = 1; k <= 5; k++) {
        c.fold = k;
        vx_env_split_rows(&m, &c, VX_SPLIT_TEST, &lo, &hi);
        assert_int_equal(lo, prev_test_hi);
        assert_int_equal(hi, R - T + k * T / 5);
        prev_test_hi = hi;
    }
    assert_int_equal(prev_test_hi, R);
    c.folds = 3;
    c.fold = 0; /* 0: the last fold */
    vx_env_split_rows(&m, &c, VX_SPLIT_TEST, &lo, &hi);
    assert_int_equal(hi, R);
    assert_int_equal(lo, R - T + 2 * T / 3);
    /* a split too small is an error naming it */
    vx_env_cfg_default(&c);
    c.val_fraction = 0.001;
    assert_int_equal(vx_env_check_splits(&m, &c, 392, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "validation split"));
    c.val_fraction = 0.6, c.test_fraction = 0.5;
    assert_int_equal(vx_env_check_splits(&m, &c, 2, &e), VX_ERR_ARG);
    /* a fold past the last is refused, not read as another block */
    vx_env_cfg_default(&c);
    c.folds = 3, c.fold = 4;
    assert_int_equal(vx_env_check_splits(&m, &c, 2, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "fold"));
    /* a gap so wide that the validation split would start before row 0: it starts at row 0 (a
     * negative row would index before the market) and holds only the rows there are */
    vx_env_cfg_default(&c);
    T = (int64_t)floor(0.15 * R);       /* = V */
    c.gap = (int32_t)(R - 2 * T) + 100; /* val_hi = R − T − gap = T − 100 < V = T */
    vx_env_split_rows(&m, &c, VX_SPLIT_VAL, &lo, &hi);
    assert_int_equal(hi, T - 100);
    assert_int_equal(lo, 0);
    vx_market_close(&m);
}

/* reset_to with a step count: the episode ends, truncated, after exactly that many steps. */
static void test_reset_to_a_short_episode(void **state)
{
    (void)state;
    tiny t;
    tiny_make(&t, 12, 0);
    vx_env_cfg c;
    cfg_tiny(&c);
    vx_env *env;
    vx_err e;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_OK);
    int32_t a[3] = {4, VX_ORDER_MARKET, 2};
    float obs[VX_OBS_DIM], r;
    uint8_t te, tr;
    assert_int_equal(vx_env_reset_to(env, 0, 2, 3, &e), VX_OK);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(vx_env_states(env)[0].row, 2 + k);
        assert_int_equal(vx_env_step(env, a, obs, &r, &te, &tr, NULL, NULL, &e), VX_OK);
        assert_int_equal(tr, k == 2);
        assert_int_equal(te, 0);
    }
    assert_int_equal(vx_env_reset_to(env, 0, 2, c.episode_len + 1, &e), VX_ERR_ARG);
    assert_int_equal(vx_env_reset_to(env, 0, 2, 0, &e), VX_ERR_ARG);
    /* the episode's last bar must be inside the split: 12 rows, 3 steps from row 8 end on row
     * 11, the split's last; from row 9 they would read row 12, past it */
    const vx_env_params *p = vx_env_params_get(env);
    assert_int_equal(p->row_hi, 12);
    assert_int_equal(vx_env_reset_to(env, 0, p->row_hi - 1 - 3, 3, &e), VX_OK);
    assert_int_equal(vx_env_reset_to(env, 0, p->row_hi - 1 - 3 + 1, 3, &e), VX_ERR_ARG);
    vx_env_free(env);
    /* a split that does not start at row 0 (the test half of 20 rows: 10..19): its first row is
     * the earliest start, the row before it belongs to the training split */
    tiny_free(&t);
    tiny_make(&t, 20, 0);
    c.test_fraction = 0.5;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TEST, 1, NULL, &env, &e), VX_OK);
    assert_int_equal(vx_env_params_get(env)->row_lo, 10);
    assert_int_equal(vx_env_reset_to(env, 0, 10, 3, &e), VX_OK);
    assert_int_equal(vx_env_reset_to(env, 0, 9, 3, &e), VX_ERR_ARG);
    vx_env_free(env);
    tiny_free(&t);
}

/* The vol-scaled reward: each step's equity change over multiplier · contracts · σ̂ at the
 * decision bar, σ̂² the λ = 0.99 EWMA of squared close changes — recomputed here in float64
 * from the closes. Using the bar after the decision, or the fixed scale, fails it. */
static void test_vol_scaled_reward(void **state)
{
    (void)state;
    vx_series ser;
    th_synth(&ser, 8, 5, 0.15);
    vx_market m;
    vx_err e;
    assert_int_equal(vx_market_from_series(&ser, &m, &e), VX_OK);
    vx_env_cfg c;
    vx_env_cfg_default(&c);
    c.reward = VX_REWARD_VOL;
    c.episode_len = 50;
    c.val_fraction = 0, c.test_fraction = 0.01, c.gap = 0;
    size_t nb = m.first_bar + m.rows;
    double *unit = malloc(nb * sizeof *unit), var = 0;
    for (size_t b = 1; b < nb; b++) {
        double d = m.close[b] - m.close[b - 1];
        var = b == 1 ? d * d : 0.99 * var + 0.01 * d * d;
        unit[b] = 50 * 4 * fmax(sqrt(var), 0.0625);
    }
    vx_env *env;
    assert_int_equal(vx_env_create(&c, &m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_OK);
    vx_rng g = vx_rng_make(3, 0, 0);
    float obs[VX_OBS_DIM], r;
    uint8_t te, tr;
    int checked = 0;
    double worst = 0;
    for (int t = 0; t < 400; t++) {
        vx_env_state before = vx_env_states(env)[0];
        int32_t a[3] = {(int32_t)vx_rng_below(&g, 9), (int32_t)vx_rng_below(&g, 3),
                        (int32_t)vx_rng_below(&g, 3)};
        assert_int_equal(vx_env_step(env, a, obs, &r, &te, &tr, NULL, NULL, &e), VX_OK);
        if (te || tr) continue; /* the state was reset: its equity is the new episode's */
        double want =
            (vx_env_states(env)[0].equity - before.equity) / unit[m.first_bar + before.row];
        double err = fabs(r - want) / (fabs(want) + 1e-3);
        worst = err > worst ? err : worst;
        checked++;
    }
    assert_true(checked > 300);
    assert_true(worst < 1e-6); /* float32 rounding of the reward */
    vx_env_free(env);
    free(unit);
    vx_market_close(&m);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    tiny t;
    tiny_make(&t, 12, 0);
    vx_env_cfg c;
    cfg_tiny(&c);
    vx_env *env;
    vx_err e;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 4, NULL, &env, &e), VX_OK);
    int32_t a[12] = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 0};
    float obs[4 * VX_OBS_DIM], r[4];
    uint8_t te[4], tr[4];
    const vx_env_state before = vx_env_states(env)[0];
    assert_int_equal(vx_env_step(env, a, obs, r, te, tr, NULL, NULL, &e), VX_ERR_ARG);
    assert_string_equal(e.field, "order_type");
    assert_non_null(strstr(e.msg, "environment 3"));
    assert_memory_equal(&before, &vx_env_states(env)[0], sizeof before); /* nothing stepped */
    vx_env_free(env);
    c.episode_len = 20; /* longer than the market */
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "fewer than one episode"));
    cfg_tiny(&c);
    c.max_contracts = 0;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_ERR_ARG);
    /* the split must hold one episode + 2 rows: 12 rows take episodes of 10, not 11 */
    cfg_tiny(&c);
    c.episode_len = 10;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_OK);
    vx_env_free(env);
    c.episode_len = 11;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "fewer than one episode"));
    /* the reward scale needs two training rows (one price change), whatever split is stepped:
     * a test fraction of 0.92 leaves row 0 alone to train on, and 11 test rows */
    cfg_tiny(&c);
    c.test_fraction = 0.92;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TEST, 1, NULL, &env, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "train split has 1 rows"));
    /* costs may be zero (a frictionless market), not negative */
    cfg_tiny(&c);
    c.commission = 0, c.slippage_ticks = 0;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_OK);
    vx_env_free(env);
    c.commission = -1;
    assert_int_equal(vx_env_create(&c, &t.m, VX_SPLIT_TRAIN, 1, NULL, &env, &e), VX_ERR_ARG);
    tiny_free(&t);
}

/* Random actions for n environments, T steps, from one Philox stream. */
static int32_t *random_actions(size_t n, size_t steps, uint64_t seed)
{
    int32_t *a = malloc(steps * n * VX_ACTION_BRANCHES * sizeof *a);
    assert_non_null(a);
    vx_rng r = vx_rng_make(seed, 0, 0);
    for (size_t i = 0; i < steps * n; i++) {
        a[i * VX_ACTION_BRANCHES] = (int32_t)vx_rng_below(&r, VX_EXPOSURE_LEVELS);
        a[i * VX_ACTION_BRANCHES + 1] = (int32_t)vx_rng_below(&r, VX_ORDER_TYPES);
        a[i * VX_ACTION_BRANCHES + 2] = (int32_t)vx_rng_below(&r, VX_URGENCY_LEVELS);
    }
    return a;
}

/* vx_env_params_make is what an environment reports; NULL and the CPU context are one device,
 * whose account is charged with the states; a budget too small for them refuses creation. */
static void test_params_and_cpu_devices(void **state)
{
    (void)state;
    vx_series ser;
    th_synth(&ser, 12, 3, 0.1);
    vx_market m;
    vx_err e;
    assert_int_equal(vx_market_from_series(&ser, &m, &e), VX_OK);
    vx_env_cfg c;
    vx_env_cfg_default(&c);
    c.seed = 9;
    const size_t n = 24, T = 500, D = VX_OBS_DIM;
    vx_env_params pt, pe;
    assert_int_equal(vx_env_params_make(&c, &m, VX_SPLIT_TRAIN, &pt, &e), VX_OK);
    assert_int_equal(vx_env_params_make(&c, &m, VX_SPLIT_TEST, &pe, &e), VX_OK);
    int64_t lo, hi;
    vx_env_split_rows(&m, &c, VX_SPLIT_TEST, &lo, &hi);
    assert_int_equal(pe.row_lo, lo);
    assert_int_equal(pe.row_hi, hi);
    vx_env_split_rows(&m, &c, VX_SPLIT_TRAIN, &lo, &hi);
    assert_int_equal(pt.row_lo, lo);
    assert_int_equal(pt.row_hi, hi);
    double scale = vx_env_reward_scale(&m, lo, hi, c.multiplier, c.max_contracts);
    assert_true(pt.reward_scale == scale && pe.reward_scale == scale); /* training rows, both */
    assert_true(pt.drawdown_limit == 3.0 * scale * sqrt((double)c.episode_len));
    assert_ptr_equal(pt.close, m.close + m.first_bar);
    vx_device_mem m0, m1;
    vx_device_memory(NULL, &m0);
    vx_env *a, *b;
    assert_int_equal(vx_env_create(&c, &m, VX_SPLIT_TRAIN, n, NULL, &a, &e), VX_OK);
    assert_int_equal(vx_env_create(&c, &m, VX_SPLIT_TRAIN, n, vx_device_cpu(), &b, &e), VX_OK);
    assert_memory_equal(vx_env_params_get(a), &pt, sizeof pt);
    assert_memory_equal(vx_env_params_get(b), &pt, sizeof pt);
    assert_ptr_equal(vx_env_device(a), vx_device_cpu());
    assert_ptr_equal(vx_env_device(b), vx_device_cpu());
    assert_int_equal(vx_env_count(a), n);
    assert_int_equal(vx_env_count(b), n);
    assert_int_equal(vx_env_reserved(a), n * sizeof(vx_env_state));
    assert_int_equal(vx_env_reserved(b), n * sizeof(vx_env_state));
    vx_device_memory(NULL, &m1);
    assert_int_equal(m1.reserved - m0.reserved, 2 * n * sizeof(vx_env_state));
    /* the same starts, and the same steps */
    assert_memory_equal(vx_env_states(a), vx_env_states(b), n * sizeof(vx_env_state));
    float *oa = malloc(n * D * 4), *ob = malloc(n * D * 4), *ra = malloc(n * 4),
          *rb = malloc(n * 4);
    uint8_t *te = malloc(n), *tr = malloc(n);
    int32_t *act = random_actions(n, T, 12);
    assert_int_equal(vx_env_observe(a, oa, NULL, &e), VX_OK);
    assert_int_equal(vx_env_observe(b, ob, NULL, &e), VX_OK);
    assert_memory_equal(oa, ob, n * D * 4);
    for (size_t t = 0; t < T; t++) {
        const int32_t *at = act + t * n * VX_ACTION_BRANCHES;
        assert_int_equal(vx_env_step(a, at, oa, ra, te, tr, NULL, NULL, &e), VX_OK);
        assert_int_equal(vx_env_step(b, at, ob, rb, te, tr, NULL, NULL, &e), VX_OK);
        if (memcmp(oa, ob, n * D * 4) != 0 || memcmp(ra, rb, n * 4) != 0)
            fail_msg("step %zu: NULL and the CPU context differ", t);
    }
    assert_memory_equal(vx_env_states(a), vx_env_states(b), n * sizeof(vx_env_state));
    uint64_t bad = 1;
    assert_int_equal(vx_env_bad_actions(a, &bad, &e), VX_OK);
    assert_int_equal(bad, 0);
    vx_env_free(a);
    vx_env_free(b);
    vx_device_memory(NULL, &m1);
    assert_int_equal(m1.reserved, m0.reserved);
    /* a CPU context with a budget smaller than the states */
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    dc.budget = n * sizeof(vx_env_state) - 1;
    vx_device *small;
    assert_int_equal(vx_device_open(&dc, &small, &e), VX_OK);
    assert_int_equal(vx_env_create(&c, &m, VX_SPLIT_TRAIN, n, small, &a, &e), VX_ERR_NOMEM);
    assert_non_null(strstr(e.msg, "environments"));
    vx_device_memory(small, &m1);
    assert_int_equal(m1.reserved, 0);
    assert_int_equal(vx_env_create(&c, &m, VX_SPLIT_TRAIN, n - 1, small, &a, &e), VX_OK);
    assert_ptr_equal(vx_env_device(a), small);
    vx_device_memory(small, &m1);
    assert_int_equal(m1.reserved, (n - 1) * sizeof(vx_env_state));
    vx_env_free(a);
    vx_device_close(small);
    /* the checks are params_make's, for both */
    c.max_contracts = 0;
    assert_int_equal(vx_env_params_make(&c, &m, VX_SPLIT_TRAIN, &pt, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "max_contracts"));
    free(oa), free(ob), free(ra), free(rb), free(te), free(tr), free(act);
    vx_market_close(&m);
}

/* get_states/set_states: what comes out goes back in, and environments restored from it step
 * exactly as the originals did. */
static void test_states_round_trip(void **state)
{
    (void)state;
    vx_series ser;
    th_synth(&ser, 12, 4, 0.1);
    vx_market m;
    vx_err e;
    assert_int_equal(vx_market_from_series(&ser, &m, &e), VX_OK);
    vx_env_cfg c;
    vx_env_cfg_default(&c);
    c.seed = 17;
    const size_t n = 16, T = 600, D = VX_OBS_DIM;
    vx_env *a, *b;
    assert_int_equal(vx_env_create(&c, &m, VX_SPLIT_TRAIN, n, NULL, &a, &e), VX_OK);
    assert_int_equal(vx_env_create(&c, &m, VX_SPLIT_TRAIN, n, NULL, &b, &e), VX_OK);
    int32_t *act = random_actions(n, 2 * T, 5), *other = random_actions(n, T / 2, 6);
    float *oa = malloc(n * D * 4), *ob = malloc(n * D * 4), *ra = malloc(n * 4),
          *rb = malloc(n * 4);
    float *fa = malloc(n * D * 4), *fb = malloc(n * D * 4);
    uint8_t *tea = malloc(n), *tra = malloc(n), *teb = malloc(n), *trb = malloc(n);
    vx_env_state *s1 = malloc(n * sizeof *s1), *s2 = malloc(n * sizeof *s2);
    for (size_t t = 0; t < T; t++) /* through episode ends: the episode counters move */
        assert_int_equal(
            vx_env_step(a, act + t * n * VX_ACTION_BRANCHES, oa, ra, tea, tra, NULL, NULL, &e),
            VX_OK);
    /* b elsewhere: only the states loaded into it will make it a's twin */
    for (size_t t = 0; t < T / 2; t++)
        assert_int_equal(
            vx_env_step(b, other + t * n * VX_ACTION_BRANCHES, ob, rb, teb, trb, NULL, NULL, &e),
            VX_OK);
    assert_true(memcmp(vx_env_states(a), vx_env_states(b), n * sizeof(vx_env_state)) != 0);
    assert_int_equal(vx_env_get_states(a, s1, &e), VX_OK);
    assert_memory_equal(s1, vx_env_states(a), n * sizeof *s1);
    size_t ended = 0;
    for (size_t i = 0; i < n; i++) ended += s1[i].episode > 1;
    assert_true(ended > 0);
    assert_int_equal(vx_env_set_states(b, s1, &e), VX_OK);
    assert_int_equal(vx_env_get_states(b, s2, &e), VX_OK);
    assert_memory_equal(s1, s2, n * sizeof *s1);
    assert_int_equal(vx_env_observe(b, ob, NULL, &e), VX_OK);
    assert_memory_equal(oa, ob, n * D * 4);
    for (size_t t = T; t < 2 * T; t++) {
        const int32_t *at = act + t * n * VX_ACTION_BRANCHES;
        memset(fa, 0, n * D * 4), memset(fb, 0, n * D * 4);
        assert_int_equal(vx_env_step(a, at, oa, ra, tea, tra, fa, NULL, &e), VX_OK);
        assert_int_equal(vx_env_step(b, at, ob, rb, teb, trb, fb, NULL, &e), VX_OK);
        if (memcmp(oa, ob, n * D * 4) != 0 || memcmp(ra, rb, n * 4) != 0 ||
            memcmp(fa, fb, n * D * 4) != 0 || memcmp(tea, teb, n) != 0 || memcmp(tra, trb, n) != 0)
            fail_msg("step %zu: the restored environments differ", t);
    }
    assert_memory_equal(vx_env_states(a), vx_env_states(b), n * sizeof(vx_env_state));
    /* the queued forms (NULL stream on the CPU) are the same copies */
    assert_int_equal(vx_env_load_states(b, s1, NULL, &e), VX_OK);
    assert_int_equal(vx_env_copy_states(b, s2, NULL, &e), VX_OK);
    assert_memory_equal(s1, s2, n * sizeof *s1);
    assert_int_equal(vx_env_reset_to(a, n, 0, 1, &e), VX_ERR_ARG); /* no environment n */
    free(act), free(other), free(oa), free(ob), free(ra), free(rb), free(fa), free(fb);
    free(tea), free(tra), free(teb), free(trb), free(s1), free(s2);
    vx_env_free(a);
    vx_env_free(b);
    vx_market_close(&m);
}

/* States restored from a checkpoint are checked before use. The checks are the dynamics' own
 * invariants: every state of environments stepped at random through stop-outs, truncations and
 * short episodes from vx_env_reset_to passes them after every step. Each field damaged in turn is
 * refused, naming the tensor, the row and the field, and nothing is loaded — a bar index of 1e12
 * would otherwise read far past the market at the next step. */
static void test_states_checked(void **state)
{
    (void)state;
    vx_series ser;
    th_synth(&ser, 6, 9, 0.1);
    vx_market m;
    vx_err e;
    assert_int_equal(vx_market_from_series(&ser, &m, &e), VX_OK);
    vx_env_cfg c;
    vx_env_cfg_default(&c);
    c.episode_len = 40;
    c.drawdown_limit = 800; /* stop-outs happen */
    const size_t n = 8, T = 400, D = VX_OBS_DIM;
    vx_env *env;
    assert_int_equal(vx_env_create(&c, &m, VX_SPLIT_TRAIN, n, NULL, &env, &e), VX_OK);
    const vx_env_params *p = vx_env_params_get(env);
    int32_t *act = random_actions(n, T, 21);
    float *obs = malloc(n * D * 4), *rw = malloc(n * 4);
    uint8_t *te = malloc(n), *tr = malloc(n);
    size_t ends = 0;
    for (size_t t = 0; t < T; t++) {
        if (t % 97 == 5) /* a short episode ending on the split's last usable bar */
            assert_int_equal(vx_env_reset_to(env, t % n, p->row_hi - 1 - 7, 7, &e), VX_OK);
        assert_int_equal(
            vx_env_step(env, act + t * n * VX_ACTION_BRANCHES, obs, rw, te, tr, NULL, NULL, &e),
            VX_OK);
        for (size_t i = 0; i < n; i++) ends += te[i] + tr[i];
        if (vx_env_check_states(env, vx_env_states(env), n, "x", "env.state", &e) != VX_OK)
            fail_msg("step %zu: %s", t, e.msg);
    }
    assert_true(ends > n);
    vx_env_state *s = malloc(n * sizeof *s), *keep = malloc(n * sizeof *s);
    assert_int_equal(vx_env_get_states(env, keep, &e), VX_OK);
    const char *field[] = {
        "row",         "row",     "row",  "steps",     "steps",    "pos",    "pos",  "last_change",
        "time_in_pos", "episode", "cash", "avg_entry", "realised", "equity", "peak", "peak"};
    const size_t N_CASES = sizeof field / sizeof *field;
    for (size_t k = 0; k < N_CASES; k++) {
        memcpy(s, keep, n * sizeof *s);
        vx_env_state *x = &s[3];
        switch (k) {
        case 0: x->row = (int64_t)1e12; break;
        case 1: x->row = p->row_lo - 1; break;
        case 2: x->row = p->row_hi - 1 - (p->episode_len - x->steps) + 1; break; /* runs past */
        case 3: x->steps = p->episode_len; break;
        case 4: x->steps = -1; break;
        case 5: x->pos = p->max_contracts + 1; break;
        case 6: x->pos = INT32_MIN; break;
        case 7: x->last_change = 2 * p->max_contracts + 1; break;
        case 8: x->time_in_pos = x->steps + 1; break;
        case 9: x->episode = 0; break;
        case 10: x->cash = NAN; break;
        case 11: x->avg_entry = INFINITY; break;
        case 12: x->realised = -INFINITY; break;
        case 13: x->equity = NAN; break;
        case 14: x->peak = x->equity - 1; break;
        /* at or above the equity, but below 0: the peak starts each episode at 0 */
        case 15: x->equity = -2, x->peak = -1; break;
        }
        vx_err_clear(&e);
        assert_int_equal(vx_env_check_states(env, s, n, "ck.safetensors", "env.state", &e),
                         VX_ERR_FORMAT);
        char want[64];
        snprintf(want, sizeof want, "row 3 (environment 3), %s:", field[k]);
        if (!strstr(e.msg, want) || !strstr(e.msg, "ck.safetensors") ||
            strcmp(e.field, "env.state") != 0)
            fail_msg("case %zu: '%s' lacks '%s'", k, e.msg, want);
        /* loading them is refused too, and loads nothing */
        assert_int_equal(vx_env_set_states(env, s, &e), VX_ERR_FORMAT);
        assert_memory_equal(vx_env_states(env), keep, n * sizeof *s);
    }
    assert_int_equal(vx_env_set_states(env, keep, &e), VX_OK);
    free(act), free(obs), free(rw), free(te), free(tr), free(s), free(keep);
    vx_env_free(env);
    vx_market_close(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_sizing_and_fills),
        cmocka_unit_test(test_accounting_one_episode),
        cmocka_unit_test(test_limit_not_filled_and_stop_out),
        cmocka_unit_test(test_add_flip_and_close),
        cmocka_unit_test(test_pnl_observations_clipped),
        cmocka_unit_test(test_stop_out_at_the_limit),
        cmocka_unit_test(test_episode_starts_cover_the_split),
        cmocka_unit_test(test_reward_units_every_row),
        cmocka_unit_test(test_determinism_and_splits),
        cmocka_unit_test(test_splits_by_time),
        cmocka_unit_test(test_reset_to_a_short_episode),
        cmocka_unit_test(test_vol_scaled_reward),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_params_and_cpu_devices),
        cmocka_unit_test(test_states_round_trip),
        cmocka_unit_test(test_states_checked),
    };
    return cmocka_run_group_tests_name("env", tests, NULL, NULL);
}

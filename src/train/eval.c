/* eval.c — the walk over one split (eval.h): a policy, or a baseline rule, trades every bar of
 * the split in time order, and the figures come from that bar-by-bar record.
 *
 * The split's n = rows − 1 transitions (close of row r to close of row r + 1) are cut into
 * S = ⌈n / L⌉ consecutive episodes of L = episode_len steps, the last shorter; episode j is
 * environment j, started flat at its first row with vx_env_reset_to, and all S step together, so
 * a policy acts on S observations at a time. A stop-out ends an episode as in training; the walk
 * restarts that environment flat at the next bar for the rest of its span.
 *
 * An episode's end (its span's last bar, or a stop-out) leaves the book flat, as the environment
 * resets it: a position still open is closed at that bar's close, at the market order's slippage
 * and the commission, and those costs are booked with the episode's last transition (the
 * environment's reward, a training signal that bootstraps through a truncation, has none).
 *
 * The money is booked here, in double, from the same env_dynamics.h functions the environment
 * steps with: for a position p0 and a fill of q contracts at `price` during bar t + 1,
 *   gross = p0 · (c₁ − c₀) · mult + q · (c₁ − ref) · mult
 *   costs = commission · |q| + q · (price − ref) · mult      (slippage against the reference)
 *   net   = gross − costs
 * which is the environment's equity change (its reward · reward_scale) written in two parts; ref
 * is the bar's open for a market order, its typical price for VWAP, the limit price for a limit
 * order. A check compares the position booked here with the environment's after every step. */
#include "eval_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *const row_names[VX_EVAL_ROWS] = {
    "agent", "agent in-sample", "buy & hold", "flat", "momentum", "ridge", "oracle"};
static const char *const row_keys[VX_EVAL_ROWS] = {"agent",    "in_sample", "buy_hold", "flat",
                                                   "momentum", "ridge",     "oracle"};
const char *vx_eval_row_name(vx_eval_row r) { return r < VX_EVAL_ROWS ? row_names[r] : "?"; }
const char *vx_eval_row_key(vx_eval_row r) { return r < VX_EVAL_ROWS ? row_keys[r] : "?"; }

/* ---- periods: trading days, or bars ---------------------------------------------------------- */

#define DAY_NS 86400000000000ll
#define DAY_SHIFT_NS (2 * 3600000000000ll) /* an evening session start counts as the next day */

/* 1 when the market's bars are shorter than 20 hours (periods are trading days), with the
 * periods per year: 252 for days; for longer bars 252 over the trading days a bar spans. */
static int period_kind(const vx_market *m, double *periods_per_year)
{
    size_t n = m->n_bars, k = 0;
    if (n < 2) {
        *periods_per_year = 252;
        return 1;
    }
    /* the median interval, from up to 4,096 gaps spread over the market */
    size_t step = (n - 1) / 4096 + 1, cap = (n - 1) / step + 1;
    double *gap = malloc(cap * sizeof *gap);
    if (!gap) {
        *periods_per_year = 252;
        return 1;
    }
    for (size_t i = 1; i < n && k < cap; i += step) gap[k++] = (double)(m->ts[i] - m->ts[i - 1]);
    for (size_t i = 1; i < k; i++) /* insertion sort: k ≤ 4,096 */
        for (size_t j = i; j > 0 && gap[j - 1] > gap[j]; j--) {
            double t = gap[j];
            gap[j] = gap[j - 1], gap[j - 1] = t;
        }
    double med_days = gap[k / 2] / (double)DAY_NS;
    free(gap);
    if (med_days < 20.0 / 24) {
        *periods_per_year = 252;
        return 1;
    }
    double trading_days = med_days >= 6 ? med_days * 5.0 / 7.0 : 1.0; /* weekly bars: 5 days */
    *periods_per_year = 252.0 / trading_days;
    return 0;
}

/* period[i] for each transition i of rows [lo, hi): the index of the period of bar lo + i + 1 (the
 * bar whose close books the transition's PnL); returns the number of periods and fills end_ts. */
static size_t assign_periods(const vx_market *m, int64_t lo, int64_t hi, int by_day,
                             int32_t *period, int64_t *end_ts)
{
    size_t np = 0;
    int64_t last_key = INT64_MIN;
    for (int64_t r = lo; r + 1 < hi; r++) {
        int64_t ts = m->ts[m->first_bar + (size_t)r + 1];
        int64_t key = by_day ? (ts + DAY_SHIFT_NS) / DAY_NS : r;
        if (key != last_key) np++, last_key = key;
        period[r - lo] = (int32_t)(np - 1);
        if (end_ts) end_ts[np - 1] = ts;
    }
    return np;
}

/* ---- the rules: exposure level at the close of row r ----------------------------------------- */

typedef struct {
    vx_eval_row kind;
    const vx_market *m;
    const vx_baselines *b;
    const vx_env_params *p;
} rule;

static int32_t level_of_sign(double x)
{
    return x > 0 ? VX_EXPOSURE_LEVELS - 1 : x < 0 ? 0 : VX_EXPOSURE_LEVELS / 2;
}

/* The rule's exposure level at the close of row r, holding `pos` contracts. */
static int32_t rule_level(const rule *ru, int64_t r, int32_t pos)
{
    const vx_env_params *p = ru->p;
    switch (ru->kind) {
    case VX_EVAL_BUY_HOLD: return VX_EXPOSURE_LEVELS - 1;
    case VX_EVAL_MOMENTUM: return level_of_sign(p->close[r] - p->close[r - ru->b->momentum_k]);
    case VX_EVAL_RIDGE: {
        const float *f = p->features + (size_t)r * VX_MARKET_FEATURES;
        double pred = ru->b->ridge_w[0];
        for (int i = 0; i < VX_MARKET_FEATURES; i++) pred += ru->b->ridge_w[i + 1] * f[i];
        double x = pred / (2 * ru->b->ridge_pred_sd);
        x = x > 1 ? 1 : x < -1 ? -1 : x;
        return (int32_t)lround(4 * x) + VX_EXPOSURE_LEVELS / 2;
    }
    case VX_EVAL_ORACLE: { /* the signal in force at the next bar, the one this decision trades */
        double sig = ru->m->signal[ru->m->first_bar + (size_t)r + 1];
        if (fabs(sig) < ru->b->oracle_band) /* too weak to pay for a trade: hold */
            return (int32_t)lround(4.0 * pos / p->max_contracts) + VX_EXPOSURE_LEVELS / 2;
        return level_of_sign(sig);
    }
    default: return VX_EXPOSURE_LEVELS / 2; /* flat */
    }
}

/* ---- the walk -------------------------------------------------------------------------------- */

typedef struct {
    double gross, costs; /* of one transition */
    int32_t filled;      /* contracts that filled, signed */
} booking;

/* The transition of an environment at row r with position p0 under action a, booked in double
 * with the dynamics' own order and fill rules. */
static booking book(const vx_env_params *p, int64_t r, int32_t p0, const int32_t *a)
{
    booking b = {0, 0, 0};
    double c0 = p->close[r], o = p->open[r + 1], h = p->high[r + 1], l = p->low[r + 1];
    double c1 = p->close[r + 1];
    b.gross = p0 * (c1 - c0) * p->multiplier;
    int32_t q = vx_env_order_qty(p0, vx_env_target(a[0], p->max_contracts), a[2]);
    double price;
    if (q == 0 || !vx_env_fill(p, q, a[1], o, h, l, c1, &price)) return b;
    double ref = a[1] == VX_ORDER_VWAP ? (h + l + c1) / 3.0 : a[1] == VX_ORDER_LIMIT ? price : o;
    b.filled = q;
    b.gross += q * (c1 - ref) * p->multiplier;
    b.costs = p->commission * abs(q) + q * (price - ref) * p->multiplier;
    return b;
}

/* What closing a position of pos contracts at a bar's close costs against that close: the
 * commission and a market order's slippage on each contract. */
static double exit_cost(const vx_env_params *p, int32_t pos)
{
    int32_t a = pos < 0 ? -pos : pos;
    return a * (p->commission + p->slippage_ticks * p->tick * p->multiplier);
}

static vx_status walk(const vx_market *m, const vx_env_cfg *cfg, vx_split split,
                      const vx_policy *agent, const rule *ru, const int32_t *period, size_t np,
                      vx_eval_metrics *out, vx_err *e)
{
    vx_env *env = NULL;
    vx_env_params pp;
    vx_status st = vx_env_params_make(cfg, m, split, &pp, e);
    int64_t lo = pp.row_lo, hi = pp.row_hi, n = hi - lo - 1, L = pp.episode_len;
    size_t S = st ? 0 : (size_t)((n + L - 1) / L);
    if (!st) st = vx_env_create(cfg, m, split, S, NULL, &env, e);
    if (st) return st;
    const vx_env_params *p = vx_env_params_get(env);
    rule r_local;
    if (ru) r_local = *ru, r_local.p = p, ru = &r_local;
    float *obs = malloc(S * VX_OBS_DIM * sizeof(float)), *rew = malloc(S * sizeof(float));
    int32_t *act = malloc(S * VX_ACTION_BRANCHES * sizeof(int32_t)), *pos = calloc(S, 4);
    int64_t *len = malloc(S * sizeof(int64_t));
    uint8_t *te = malloc(S), *tr = malloc(S);
    booking *bk = malloc(S * sizeof *bk);
    double *net = malloc((size_t)n * sizeof(double));
    out->period_pnl = calloc(np ? np : 1, sizeof(double));
    out->n_periods = np;
    if (!obs || !rew || !act || !pos || !len || !te || !tr || !bk || !net || !out->period_pnl)
        st = vx_err_set(e, VX_ERR_NOMEM, "eval: out of memory for %zu episodes", S);
    for (size_t j = 0; j < S && !st; j++) {
        len[j] = n - (int64_t)j * L < L ? n - (int64_t)j * L : L;
        st = vx_env_reset_to(env, j, lo + (int64_t)j * L, (int32_t)len[j], e);
    }
    if (!st) st = vx_env_observe(env, obs, NULL, e);
    const vx_env_state *s = vx_env_states(env);
    double gross = 0, costs = 0, traded = 0, trades = 0, held = 0, wins = 0, stops = 0;
    for (int64_t t = 0; t < L && !st; t++) {
        if (agent) {
            st = agent->act(agent->ctx, obs, (int)S, act, e);
        } else {
            for (size_t j = 0; j < S; j++) {
                int32_t *a = act + j * VX_ACTION_BRANCHES;
                a[0] = rule_level(ru, s[j].row, s[j].pos);
                a[1] = VX_ORDER_MARKET;
                a[2] = VX_URGENCY_LEVELS - 1;
            }
        }
        /* book every active episode's transition before the step moves the states */
        for (size_t j = 0; j < S && !st; j++)
            if (t < len[j]) bk[j] = book(p, s[j].row, s[j].pos, act + j * VX_ACTION_BRANCHES);
        if (!st) st = vx_env_step(env, act, obs, rew, te, tr, NULL, NULL, e);
        int reobserve = 0;
        for (size_t j = 0; j < S && !st; j++) {
            if (t >= len[j]) continue;
            int64_t i = (int64_t)j * L + t, row = lo + i; /* this transition: row → row + 1 */
            const int32_t *a = act + j * VX_ACTION_BRANCHES;
            int32_t p1 = pos[j] + bk[j].filled;
            if (!te[j] && !tr[j] && (s[j].pos != p1 || s[j].row != row + 1)) {
                st = vx_err_set(e, VX_ERR_VALIDATION,
                                "eval: the booking disagrees with the environment at row %lld "
                                "(position %d here, %d there)",
                                (long long)row, p1, s[j].pos);
                break;
            }
            /* the episode's last transition: what is still open is closed at the close */
            double exit = te[j] || t + 1 == len[j] ? exit_cost(p, p1) : 0;
            double v = bk[j].gross - bk[j].costs - exit;
            net[i] = v;
            gross += bk[j].gross, costs += bk[j].costs + exit;
            traded += abs(bk[j].filled), trades += bk[j].filled != 0;
            if (exit > 0) traded += abs(p1), trades++;
            out->exposure_hist[a[0]]++, out->order_hist[a[1]]++, out->urgency_hist[a[2]]++;
            int lvl = (int)lround(((double)p1 / p->max_contracts + 1) * 4);
            out->position_hist[lvl < 0 ? 0 : lvl > 8 ? 8 : lvl]++;
            if (p1 != 0) held++, wins += v > 0;
            pos[j] = p1;
            if (te[j]) {
                stops++;
                pos[j] = 0;
                if (t + 1 < len[j]) { /* a stop-out: the rest of the span as a new episode */
                    st = vx_env_reset_to(env, j, row + 1, (int32_t)(len[j] - t - 1), e);
                    reobserve = 1;
                }
            }
        }
        if (!st && reobserve) st = vx_env_observe(env, obs, NULL, e);
    }
    if (!st) {
        double eq = 0, peak = 0, low = 0, mdd = 0;
        for (int64_t i = 0; i < n; i++) {
            eq += net[i];
            peak = eq > peak ? eq : peak;
            low = eq < low ? eq : low;
            mdd = peak - eq > mdd ? peak - eq : mdd;
            out->period_pnl[period[i]] += net[i];
        }
        out->eq_high = peak, out->eq_low = low;
        out->present = 1;
        out->gross = gross;
        out->costs = costs;
        out->net = gross - costs;
        out->bars = (double)n;
        out->pnl_per_bar = out->net / (double)n;
        out->max_drawdown = mdd;
        out->turnover = traded / (double)n;
        out->hit_rate = held > 0 ? wins / held : 0;
        out->held = held;
        out->trades = trades;
        out->stop_outs = stops;
    }
    free(obs), free(rew), free(act), free(pos), free(len), free(te), free(tr), free(bk), free(net);
    vx_env_free(env);
    return st;
}

/* Sharpe ratio and its standard error from the per-period PnL (sample sd; Lo 2002). */
static void sharpe_of(vx_eval_metrics *x, double periods_per_year)
{
    size_t n = x->n_periods;
    x->sharpe = 0, x->sharpe_se = NAN;
    if (n < 2) return;
    double mean = 0, var = 0;
    for (size_t i = 0; i < n; i++) mean += x->period_pnl[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) var += (x->period_pnl[i] - mean) * (x->period_pnl[i] - mean);
    var /= (double)(n - 1);
    double sd = sqrt(var);
    if (!(sd > 1e-12 * (fabs(mean) + 1))) return; /* no variation (flat): 0, no error bar */
    double sr = mean / sd;
    x->sharpe = sr * sqrt(periods_per_year);
    x->sharpe_se = sqrt((1 + sr * sr / 2) / (double)n) * sqrt(periods_per_year);
}

/* One row: a walk over `split` with its own periods. */
static vx_status eval_row(const vx_market *m, const vx_env_cfg *c, vx_split split,
                          const vx_policy *agent, const rule *ru, int by_day, double ppy,
                          vx_eval_metrics *out, vx_err *e)
{
    int64_t lo, hi;
    vx_env_split_rows(m, c, split, &lo, &hi);
    int32_t *period = malloc((size_t)(hi - lo > 1 ? hi - lo : 1) * sizeof(int32_t));
    if (!period) return vx_err_set(e, VX_ERR_NOMEM, "eval: out of memory");
    size_t np = assign_periods(m, lo, hi, by_day, period, NULL);
    vx_status st = walk(m, c, split, agent, ru, period, np, out, e);
    free(period);
    if (!st) sharpe_of(out, ppy);
    return st;
}

/* The baselines' part of a report: fitted on the training split (or given), then each rule's
 * walk over the split. */
typedef struct {
    const vx_market *m;
    const vx_env_cfg *cfg;
    vx_split split;
    const vx_eval_opts *opts;
    vx_eval_report *out;
    int by_day;
    double ppy;
    vx_status st;
    vx_err err;
} baseline_job;

static void *baselines_main(void *arg)
{
    baseline_job *b = arg;
    vx_eval_report *out = b->out;
    vx_status st = VX_OK;
    if (b->opts->fitted) out->baselines = *b->opts->fitted;
    else st = vx_baselines_fit(b->m, b->cfg, &out->baselines, &b->err);
    out->have_baselines = !st;
    for (int k = VX_EVAL_BUY_HOLD; k <= VX_EVAL_ORACLE && !st; k++) {
        if (k == VX_EVAL_ORACLE && !out->baselines.has_oracle) continue;
        rule ru = {(vx_eval_row)k, b->m, &out->baselines, NULL};
        st = eval_row(b->m, b->cfg, b->split, NULL, &ru, b->by_day, b->ppy, &out->row[k], &b->err);
    }
    b->st = st;
    return NULL;
}

vx_status vx_eval_run(const vx_market *m, const vx_env_cfg *env_cfg, vx_split split,
                      const vx_policy *pol, const vx_eval_opts *opts, vx_eval_report *out,
                      vx_err *e)
{
    memset(out, 0, sizeof *out);
    vx_eval_opts none = {0, NULL, 0};
    if (!opts) opts = &none;
    out->split = split;
    vx_env_params p;
    vx_status st = vx_env_params_make(env_cfg, m, split, &p, e);
    if (st) return st;
    out->first_row = p.row_lo;
    out->last_row = p.row_hi;
    out->reward_scale = p.reward_scale;
    out->episodes = (size_t)((p.row_hi - p.row_lo - 1 + p.episode_len - 1) / p.episode_len);
    out->period_is_day = period_kind(m, &out->periods_per_year);
    int64_t n = p.row_hi - p.row_lo - 1;
    int32_t *period = malloc((size_t)n * sizeof(int32_t));
    out->period_end_ts = malloc((size_t)n * sizeof(int64_t));
    if (!period || !out->period_end_ts) {
        free(period);
        return vx_err_set(e, VX_ERR_NOMEM, "eval: out of memory");
    }
    out->n_periods =
        assign_periods(m, p.row_lo, p.row_hi, out->period_is_day, period, out->period_end_ts);
    free(period);
    out->bars_per_year = (double)n / (double)out->n_periods * out->periods_per_year;
    baseline_job b;
    memset(&b, 0, sizeof b);
    b.m = m, b.cfg = env_cfg, b.split = split, b.opts = opts, b.out = out;
    b.by_day = out->period_is_day, b.ppy = out->periods_per_year;
    /* the baselines on a thread of their own beside the agent's walks: they read the market and
     * write their own rows only (measured: fitting and walking them took as long as the agent's
     * in-sample walk, 70–75 ms each on one core for the default market) */
    pthread_t th;
    int threaded = pol && opts->baselines && pthread_create(&th, NULL, baselines_main, &b) == 0;
    if (pol)
        st = eval_row(m, env_cfg, split, pol, NULL, b.by_day, b.ppy, &out->row[VX_EVAL_AGENT], e);
    if (!st && pol && opts->in_sample)
        st = eval_row(m, env_cfg, VX_SPLIT_TRAIN, pol, NULL, b.by_day, b.ppy,
                      &out->row[VX_EVAL_IN_SAMPLE], e);
    if (threaded) pthread_join(th, NULL);
    else if (opts->baselines && !st) baselines_main(&b);
    if (!st && b.st) { /* the agent's error first, else the baselines' */
        st = b.st;
        if (e) *e = b.err;
    }
    return st;
}

vx_status vx_eval_rule_sharpe(const vx_market *m, const vx_env_cfg *c, vx_split split,
                              vx_eval_row kind, const vx_baselines *b, double *sharpe, vx_err *e)
{
    double ppy;
    int by_day = period_kind(m, &ppy);
    vx_eval_metrics x;
    memset(&x, 0, sizeof x);
    rule ru = {kind, m, b, NULL};
    vx_status st = eval_row(m, c, split, NULL, &ru, by_day, ppy, &x, e);
    *sharpe = x.sharpe;
    free(x.period_pnl);
    return st;
}

void vx_eval_report_free(vx_eval_report *r)
{
    if (!r) return;
    for (int k = 0; k < VX_EVAL_ROWS; k++) {
        free(r->row[k].period_pnl);
        r->row[k].period_pnl = NULL;
    }
    free(r->period_end_ts);
    r->period_end_ts = NULL;
}

void vx_eval_warn(vx_eval_report *r, const char *fmt, ...)
{
    if (r->n_warnings >= 4) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->warnings[r->n_warnings++], sizeof r->warnings[0], fmt, ap);
    va_end(ap);
}

/* Walk-forward's whole test region from its folds' reports, in time order. A trading day that two
 * folds' test blocks split is one period, its PnL the sum of both parts (a fold boundary falls
 * mid-day). The maximum drawdown is the bar-by-bar one of the chained equity curves, from each
 * fold's drawdown, highest and lowest equity: a fall from a peak in an earlier fold to a low in
 * this one counts as well. The agent's in-sample row is left out: the folds' training windows
 * overlap, so their rows do not add up to any one walk. */
vx_status vx_eval_concat(const vx_eval_report *parts, int k, vx_eval_report *out, vx_err *e)
{
    memset(out, 0, sizeof *out);
    if (k < 1) return vx_err_set(e, VX_ERR_ARG, "eval: nothing to concatenate");
    out->split = parts[0].split;
    out->first_row = parts[0].first_row;
    out->last_row = parts[k - 1].last_row;
    out->reward_scale = parts[k - 1].reward_scale;
    out->periods_per_year = parts[0].periods_per_year;
    out->period_is_day = parts[0].period_is_day;
    out->baselines = parts[k - 1].baselines;
    out->have_baselines = parts[k - 1].have_baselines;
    size_t np = 0;
    double bars = 0;
    for (int i = 0; i < k; i++) np += parts[i].n_periods, out->episodes += parts[i].episodes;
    out->period_end_ts = malloc((np ? np : 1) * sizeof(int64_t));
    size_t *start = malloc((size_t)k * sizeof *start); /* part i's period 0 in the whole */
    if (!out->period_end_ts || !start) {
        free(start);
        return vx_err_set(e, VX_ERR_NOMEM, "eval: out of memory");
    }
    for (int i = 0; i < k; i++) {
        const vx_eval_report *p = &parts[i];
        size_t n = out->n_periods;
        int same_day = out->period_is_day && n > 0 && p->n_periods > 0 &&
                       (out->period_end_ts[n - 1] + DAY_SHIFT_NS) / DAY_NS ==
                           (p->period_end_ts[0] + DAY_SHIFT_NS) / DAY_NS;
        start[i] = n - (size_t)same_day;
        memcpy(out->period_end_ts + start[i], p->period_end_ts, p->n_periods * sizeof(int64_t));
        out->n_periods = start[i] + p->n_periods;
    }
    vx_status st = VX_OK;
    for (int row = 0; row < VX_EVAL_ROWS && !st; row++) {
        int all = row != VX_EVAL_IN_SAMPLE;
        for (int i = 0; i < k; i++) all &= parts[i].row[row].present;
        if (!all) continue;
        vx_eval_metrics *x = &out->row[row];
        x->n_periods = out->n_periods;
        x->period_pnl = calloc(x->n_periods ? x->n_periods : 1, sizeof(double));
        if (!x->period_pnl) {
            st = vx_err_set(e, VX_ERR_NOMEM, "eval: out of memory");
            break;
        }
        double wins = 0, traded = 0, eq = 0, peak = 0, low = 0;
        for (int i = 0; i < k && !st; i++) {
            const vx_eval_metrics *y = &parts[i].row[row];
            if (y->n_periods != parts[i].n_periods) {
                st = vx_err_set(e, VX_ERR_ARG, "eval: fold %d's %s row has %zu periods, not %zu",
                                i + 1, vx_eval_row_name((vx_eval_row)row), y->n_periods,
                                parts[i].n_periods);
                break;
            }
            for (size_t j = 0; j < y->n_periods; j++)
                x->period_pnl[start[i] + j] += y->period_pnl[j];
            /* the chained curve: this fold's own fall, or one from an earlier peak to its low */
            double fall = peak - (eq + y->eq_low);
            x->max_drawdown = fmax(x->max_drawdown, fmax(y->max_drawdown, fall));
            peak = fmax(peak, eq + y->eq_high);
            low = fmin(low, eq + y->eq_low);
            eq += y->net;
            x->net += y->net, x->gross += y->gross, x->costs += y->costs;
            x->bars += y->bars, x->trades += y->trades, x->stop_outs += y->stop_outs;
            traded += y->turnover * y->bars, wins += y->hit_rate * y->held;
            x->held += y->held;
            for (int j = 0; j < VX_EXPOSURE_LEVELS; j++)
                x->exposure_hist[j] += y->exposure_hist[j],
                    x->position_hist[j] += y->position_hist[j];
            for (int j = 0; j < VX_ORDER_TYPES; j++) x->order_hist[j] += y->order_hist[j];
            for (int j = 0; j < VX_URGENCY_LEVELS; j++) x->urgency_hist[j] += y->urgency_hist[j];
        }
        x->eq_high = peak, x->eq_low = low;
        x->present = 1;
        x->pnl_per_bar = x->bars > 0 ? x->net / x->bars : 0;
        x->turnover = x->bars > 0 ? traded / x->bars : 0;
        x->hit_rate = x->held > 0 ? wins / x->held : 0; /* all wins over all held bars */
        sharpe_of(x, out->periods_per_year);
        if (row == VX_EVAL_AGENT) bars = x->bars;
    }
    free(start);
    if (st) return st;
    out->bars_per_year = out->n_periods ? bars / (double)out->n_periods * out->periods_per_year : 0;
    return VX_OK;
}

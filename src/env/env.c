/* env.c — the environment's generic part: settings and their checks, the splits, the reward
 * scale, the resolved parameters, the first episode starts, and the public calls, which dispatch
 * to the backend of the environment's device (env_internal.h).
 *
 * Creation resolves everything on the host before a backend sees it: vx_env_params_make checks
 * the settings and fills the parameters, and each environment's first start is vx_env_reset from
 * env_dynamics.h — arithmetic on a state, the same for every device — so a backend receives
 * finished parameters and states and cannot start differently from another. This file steps
 * nothing itself and knows no device: the backend comes from the device context, and the CPU's
 * reference (env_cpu.c) serves a CPU context that registers none. */
#include "env_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void vx_env_cfg_default(vx_env_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->max_contracts = 4;
    c->episode_len = 390;
    c->commission = 2.25;
    c->slippage_ticks = 1;
    c->tick = 0.25;
    c->multiplier = 50;
    c->val_fraction = 0.15;
    c->test_fraction = 0.15;
    c->gap = VX_FEATURE_WARMUP;
    c->folds = 1;
    c->fold = 0;
    c->seed = 1;
}

const char *vx_split_name(vx_split s)
{
    return s == VX_SPLIT_TRAIN ? "train" : s == VX_SPLIT_VAL ? "validation" : "test";
}

double vx_env_reward_scale(const vx_market *m, int64_t row_lo, int64_t row_hi, double multiplier,
                           int32_t max_contracts)
{
    double sum = 0, sum2 = 0;
    size_t k = 0;
    for (int64_t r = row_lo + 1; r < row_hi; r++) {
        double d = m->close[m->first_bar + (size_t)r] - m->close[m->first_bar + (size_t)r - 1];
        sum += d;
        sum2 += d * d;
        k++;
    }
    double sd = k > 1 ? sqrt(fmax(sum2 / k - (sum / k) * (sum / k), 0)) : 0;
    double scale = multiplier * max_contracts * sd;
    return scale > 0 ? scale : 1.0;
}

void vx_env_split_rows(const vx_market *m, const vx_env_cfg *c, vx_split split, int64_t *lo,
                       int64_t *hi)
{
    int64_t R = (int64_t)m->rows, K = c->folds > 0 ? c->folds : 1;
    int64_t k = c->fold >= 1 && c->fold <= K ? c->fold : K;
    int64_t T = (int64_t)floor(c->test_fraction * (double)R);
    int64_t V = (int64_t)floor(c->val_fraction * (double)R);
    /* block k of the test region: integer cuts, so the K blocks tile it exactly */
    int64_t test_lo = R - T + (k - 1) * T / K, test_hi = R - T + k * T / K;
    int64_t val_hi = V > 0 ? test_lo - c->gap : test_lo, val_lo = val_hi - V;
    int64_t train_hi = (V > 0 ? val_lo : test_lo) - c->gap;
    if (split == VX_SPLIT_TRAIN) *lo = 0, *hi = train_hi;
    else if (split == VX_SPLIT_VAL) *lo = val_lo, *hi = val_hi;
    else *lo = test_lo, *hi = test_hi;
    if (*lo < 0) *lo = 0;
}

static vx_status check_split_settings(const vx_env_cfg *c, vx_err *e)
{
    if (!(c->val_fraction >= 0 && c->test_fraction > 0 && c->val_fraction + c->test_fraction < 1))
        return vx_err_set(e, VX_ERR_ARG,
                          "split: need val >= 0, test > 0 and val + test < 1 (got %g and %g)",
                          c->val_fraction, c->test_fraction);
    if (c->gap < 0) return vx_err_set(e, VX_ERR_ARG, "split: gap must be >= 0");
    if (c->folds < 1 || c->fold < 0 || c->fold > c->folds)
        return vx_err_set(e, VX_ERR_ARG, "split: need folds >= 1 and fold in 0..folds (got %d, %d)",
                          c->folds, c->fold);
    return VX_OK;
}

void vx_env_reward_units(const vx_market *m, const vx_env_cfg *c, double *out)
{
    const double lambda = 0.99;
    double var = 0;
    for (size_t b = 1; b < m->first_bar + m->rows; b++) {
        double d = m->close[b] - m->close[b - 1];
        var = b == 1 ? d * d : lambda * var + (1 - lambda) * d * d;
        if (b >= m->first_bar) {
            double sd = sqrt(var) > 0.25 * c->tick ? sqrt(var) : 0.25 * c->tick;
            out[b - m->first_bar] = c->multiplier * c->max_contracts * sd;
        }
    }
    if (m->first_bar == 0 && m->rows > 0) /* row 0 without a change before it */
        out[0] = c->multiplier * c->max_contracts * 0.25 * c->tick;
}

vx_status vx_env_check_splits(const vx_market *m, const vx_env_cfg *c, int64_t min_rows, vx_err *e)
{
    vx_status st = check_split_settings(c, e);
    if (st) return st;
    for (int s = VX_SPLIT_TRAIN; s <= VX_SPLIT_TEST; s++) {
        if (s == VX_SPLIT_VAL && c->val_fraction == 0) continue;
        int64_t lo, hi;
        vx_env_split_rows(m, c, (vx_split)s, &lo, &hi);
        if (hi - lo < min_rows)
            return vx_err_set(e, VX_ERR_ARG,
                              "split: the %s split%s has %lld rows of %zu, fewer than %lld "
                              "(make the market longer, or change split.val, split.test, "
                              "split.gap, split.folds)",
                              vx_split_name((vx_split)s), c->folds > 1 ? " of this fold" : "",
                              (long long)(hi > lo ? hi - lo : 0), m->rows, (long long)min_rows);
    }
    return VX_OK;
}

vx_status vx_env_params_make(const vx_env_cfg *cfg, const vx_market *m, vx_split split,
                             vx_env_params *out, vx_err *e)
{
    memset(out, 0, sizeof *out);
    if (cfg->max_contracts < 1 || cfg->max_contracts > 100000)
        return vx_err_set(e, VX_ERR_ARG, "env: max_contracts must be in 1..100000");
    if (cfg->episode_len < 1) return vx_err_set(e, VX_ERR_ARG, "env: episode_len must be >= 1");
    if (!(cfg->tick > 0) || !(cfg->multiplier > 0) || cfg->commission < 0 ||
        cfg->slippage_ticks < 0)
        return vx_err_set(e, VX_ERR_ARG, "env: tick and multiplier must be > 0, costs >= 0");
    vx_status st = check_split_settings(cfg, e);
    if (st) return st;
    int64_t lo, hi, tlo, thi;
    vx_env_split_rows(m, cfg, split, &lo, &hi);
    vx_env_split_rows(m, cfg, VX_SPLIT_TRAIN, &tlo, &thi);
    if (thi - tlo < 2) /* the reward scale comes from it, whatever the split */
        return vx_err_set(e, VX_ERR_ARG, "env: the train split has %lld rows",
                          (long long)(thi > tlo ? thi - tlo : 0));
    if (hi - lo < (int64_t)cfg->episode_len + 2)
        return vx_err_set(e, VX_ERR_ARG,
                          "env: the %s split has %lld rows, fewer than one episode (%d) + 2",
                          vx_split_name(split), (long long)(hi - lo), cfg->episode_len);
    vx_env_params *p = out;
    /* rows index the feature matrix; the price arrays are offset to the same rows */
    p->features = m->features;
    p->open = m->open + m->first_bar;
    p->high = m->high + m->first_bar;
    p->low = m->low + m->first_bar;
    p->close = m->close + m->first_bar;
    p->row_lo = lo;
    p->row_hi = hi;
    p->max_contracts = cfg->max_contracts;
    p->episode_len = cfg->episode_len;
    p->commission = cfg->commission;
    p->slippage_ticks = cfg->slippage_ticks;
    p->tick = cfg->tick;
    p->multiplier = cfg->multiplier;
    /* the scale always comes from the training rows, for both splits */
    p->reward_scale = cfg->reward_scale > 0
                          ? cfg->reward_scale
                          : vx_env_reward_scale(m, tlo, thi, cfg->multiplier, cfg->max_contracts);
    p->drawdown_limit = cfg->drawdown_limit > 0
                            ? cfg->drawdown_limit
                            : 3.0 * p->reward_scale * sqrt((double)cfg->episode_len);
    if (cfg->reward != VX_REWARD_PNL && cfg->reward != VX_REWARD_VOL)
        return vx_err_set(e, VX_ERR_ARG, "env: reward must be pnl or vol");
    p->reward_kind = cfg->reward;
    p->reward_unit = NULL; /* vx_env_create computes the rows of a vol-scaled reward */
    p->seed = cfg->seed;
    return VX_OK;
}

vx_status vx_env_create(const vx_env_cfg *cfg, const vx_market *m, vx_split split, size_t n,
                        vx_device *dev, vx_env **out, vx_err *e)
{
    *out = NULL;
    if (n == 0) return vx_err_set(e, VX_ERR_ARG, "env: need at least one environment");
    if (!dev) dev = vx_device_cpu();
    const vx_env_backend *ops = (const vx_env_backend *)vx_device_backend(dev, "env");
    if (!ops && vx_device_kind(dev) == VX_DEVICE_CPU) ops = &vx_env_cpu_ops;
    if (!ops)
        return vx_err_set(e, VX_ERR_ARG, "env: no environment backend for %s", vx_device_name(dev));
    vx_env_params p;
    vx_status st = vx_env_params_make(cfg, m, split, &p, e);
    if (st) return st;
    vx_env *env = calloc(1, sizeof *env);
    vx_env_state *init = calloc(n, sizeof *init);
    if (!env || !init) {
        free(env), free(init);
        return vx_err_set(e, VX_ERR_NOMEM, "env: out of memory for %zu environments", n);
    }
    if (p.reward_kind == VX_REWARD_VOL) { /* the backend copies what it needs from the host */
        env->units = malloc(m->rows * sizeof *env->units);
        if (!env->units) {
            free(env), free(init);
            return vx_err_set(e, VX_ERR_NOMEM, "env: out of memory for the reward units");
        }
        vx_env_reward_units(m, cfg, env->units);
        p.reward_unit = env->units;
    }
    /* episode 1 of environment i: a start row from its own Philox stream (state zeroed first) */
    for (size_t i = 0; i < n; i++) vx_env_reset(&p, &init[i], i);
    env->ops = ops;
    env->dev = dev;
    env->params = p;
    env->n = n;
    st = ops->create(&p, m, init, n, dev, &env->impl, &env->last, e);
    free(init);
    if (st) {
        free(env->units);
        free(env);
        return st;
    }
    *out = env;
    return VX_OK;
}

void vx_env_free(vx_env *env)
{
    if (!env) return;
    env->ops->free(env->impl);
    free(env->units);
    free(env);
}

size_t vx_env_count(const vx_env *env) { return env->n; }
vx_device *vx_env_device(const vx_env *env) { return env->dev; }
const vx_env_params *vx_env_params_get(const vx_env *env) { return &env->params; }
size_t vx_env_reserved(const vx_env *env) { return env->ops->reserved(env->impl); }

vx_status vx_env_observe(vx_env *env, float *obs, vx_stream s, vx_err *e)
{
    if (!obs) return vx_err_set(e, VX_ERR_ARG, "env.observe: obs is NULL");
    vx_status st = env->ops->observe(env->impl, obs, s, e);
    if (!st) env->last = s;
    return st;
}

vx_status vx_env_step(vx_env *env, const int32_t *actions, float *obs, float *rewards,
                      uint8_t *terminated, uint8_t *truncated, float *final_obs, vx_stream s,
                      vx_err *e)
{
    if (!actions || !obs || !rewards || !terminated || !truncated)
        return vx_err_set(e, VX_ERR_ARG,
                          "env.step: actions, obs, rewards, terminated and truncated are needed");
    vx_status st =
        env->ops->step(env->impl, actions, obs, rewards, terminated, truncated, final_obs, s, e);
    if (!st) env->last = s;
    return st;
}

vx_status vx_env_device_view(vx_env *env, vx_stream s, vx_env_params *p, vx_env_state **states,
                             vx_err *e)
{
    if (!env->ops->device_view)
        return vx_err_set(e, VX_ERR_ARG, "env: the %s environments keep no device state to step",
                          env->ops->name);
    env->ops->device_view(env->impl, p, states);
    env->last = s;
    return VX_OK;
}

vx_status vx_env_copy_states(vx_env *env, vx_env_state *host, vx_stream s, vx_err *e)
{
    if (!host) return vx_err_set(e, VX_ERR_ARG, "env.copy_states: host is NULL");
    vx_status st = env->ops->copy_states(env->impl, host, s, e);
    if (!st) env->last = s;
    return st;
}

/* ---- checking states ------------------------------------------------------------------------- */

static vx_status bad_state(const char *file, const char *tensor, size_t i, const char *field,
                           const char *what, vx_err *e)
{
    return vx_err_line(e, VX_ERR_FORMAT, file, -1, tensor, "row %zu (environment %zu), %s: %s", i,
                       i, field, what);
}

/* Where the episode stands: a bar the step may advance from, and the bars the rest of the
 * episode needs inside the split (vx_env_reset starts it at most episode_len bars before the
 * split's last, vx_env_reset_to no later). */
static vx_status check_place(const vx_env_params *p, const vx_env_state *x, size_t i,
                             const char *file, const char *tensor, vx_err *e)
{
    char m[200];
    if (x->steps < 0 || x->steps >= p->episode_len) {
        snprintf(m, sizeof m, "%d steps is outside 0..%d", x->steps, p->episode_len - 1);
        return bad_state(file, tensor, i, "steps", m, e);
    }
    if (x->row < p->row_lo || x->row > p->row_hi - 1 ||
        x->row + (p->episode_len - x->steps) > p->row_hi - 1) {
        snprintf(m, sizeof m,
                 "bar %lld with %d steps of %d left is outside the split's bars %lld..%lld",
                 (long long)x->row, p->episode_len - x->steps, p->episode_len, (long long)p->row_lo,
                 (long long)p->row_hi - 1);
        return bad_state(file, tensor, i, "row", m, e);
    }
    if (x->episode < 1)
        return bad_state(file, tensor, i, "episode", "0 (episodes count from 1)", e);
    return VX_OK;
}

/* The book: positions on the exposure grid, money finite. */
static vx_status check_book(const vx_env_params *p, const vx_env_state *x, size_t i,
                            const char *file, const char *tensor, vx_err *e)
{
    char m[200];
    int64_t M = p->max_contracts, pos = x->pos, chg = x->last_change;
    if (pos < -M || pos > M) {
        snprintf(m, sizeof m, "%lld contracts is outside -%lld..%lld", (long long)pos, (long long)M,
                 (long long)M);
        return bad_state(file, tensor, i, "pos", m, e);
    }
    if (chg < -2 * M || chg > 2 * M) {
        snprintf(m, sizeof m, "%lld contracts is outside -%lld..%lld", (long long)chg,
                 (long long)(2 * M), (long long)(2 * M));
        return bad_state(file, tensor, i, "last_change", m, e);
    }
    if (x->time_in_pos < 0 || x->time_in_pos > x->steps) {
        snprintf(m, sizeof m, "%d is outside 0..%d (the steps taken)", x->time_in_pos, x->steps);
        return bad_state(file, tensor, i, "time_in_pos", m, e);
    }
    const double v[5] = {x->cash, x->avg_entry, x->realised, x->equity, x->peak};
    static const char *const name[5] = {"cash", "avg_entry", "realised", "equity", "peak"};
    for (int k = 0; k < 5; k++)
        if (!isfinite(v[k])) {
            snprintf(m, sizeof m, "%g is not finite", v[k]);
            return bad_state(file, tensor, i, name[k], m, e);
        }
    if (!(x->peak >= x->equity && x->peak >= 0)) {
        snprintf(m, sizeof m, "%g is below the equity %g or 0", x->peak, x->equity);
        return bad_state(file, tensor, i, "peak", m, e);
    }
    return VX_OK;
}

vx_status vx_env_check_states(const vx_env *env, const vx_env_state *s, size_t n, const char *file,
                              const char *tensor, vx_err *e)
{
    for (size_t i = 0; i < n; i++) {
        vx_status st = check_place(&env->params, &s[i], i, file, tensor, e);
        if (!st) st = check_book(&env->params, &s[i], i, file, tensor, e);
        if (st) return st;
    }
    return VX_OK;
}

vx_status vx_env_load_states(vx_env *env, const vx_env_state *host, vx_stream s, vx_err *e)
{
    if (!host) return vx_err_set(e, VX_ERR_ARG, "env.load_states: host is NULL");
    vx_status st = vx_env_check_states(env, host, env->n, "env.load_states", "states", e);
    if (st) return st;
    st = env->ops->load_states(env->impl, host, s, e);
    if (!st) env->last = s;
    return st;
}

vx_status vx_env_get_states(vx_env *env, vx_env_state *out, vx_err *e)
{
    vx_status st = vx_env_copy_states(env, out, env->last, e);
    return st ? st : env->ops->sync(env->impl, env->last, e);
}

vx_status vx_env_set_states(vx_env *env, const vx_env_state *in, vx_err *e)
{
    /* the copy reads `in` until the stream reaches it: wait, so the caller may reuse it */
    vx_status st = vx_env_load_states(env, in, env->last, e);
    return st ? st : env->ops->sync(env->impl, env->last, e);
}

vx_status vx_env_bad_actions(vx_env *env, uint64_t *count, vx_err *e)
{
    *count = 0;
    return env->ops->bad_actions(env->impl, count, env->last, e);
}

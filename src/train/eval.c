/* eval.c — the held-out evaluation: a policy (any algorithm's, through a callback) next to
 * buy-and-hold and flat, on the same bars at the same costs.
 *
 * The held-out split is walked in order: E = ⌊(rows − 2) / L⌋ consecutive episodes of L steps
 * from the split's first row, one environment each, stepped together (each environment's episode
 * length is L + 1, so none ends, and resets, inside the walk). The stop-out is off (every
 * held-out bar is traded), and the reward scale is the training split's, so $ figures are
 * comparable across runs. Per-bar PnL = reward · scale; the series in time order gives the
 * Sharpe ratio (annualised with the bars per year the timestamps imply), the equity curve and its
 * maximum drawdown. */
#include "vixen/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { POLICY_AGENT, POLICY_BUY_HOLD, POLICY_FLAT } policy;

static vx_status run_policy(const vx_market *m, const vx_env_cfg *cfg, const vx_policy *agent,
                            policy pol, size_t E, vx_eval_metrics *out, double bars_per_year,
                            vx_err *e)
{
    vx_env *env;
    vx_status st = vx_env_create(cfg, m, VX_SPLIT_EVAL, E, NULL, &env, e);
    if (st) return st;
    const vx_env_params *p = vx_env_params_get(env);
    int L = p->episode_len - 1; /* one spare step: no episode ends inside the walk */
    for (size_t k = 0; k < E && !st; k++)
        st = vx_env_reset_to(env, k, p->row_lo + (int64_t)k * L, e);
    float *obs = malloc(E * VX_OBS_DIM * sizeof(float));
    float *rew = malloc(E * sizeof(float));
    int32_t *act = malloc(E * VX_ACTION_BRANCHES * sizeof(int32_t));
    uint8_t *te = malloc(E), *tr = malloc(E);
    (void)te, (void)tr;
    double *pnl = malloc(E * (size_t)L * sizeof(double)); /* [episode][step]: time order */
    if (!obs || !rew || !act || !te || !tr || !pnl)
        st = vx_err_set(e, VX_ERR_NOMEM, "eval: out of memory");
    double traded = 0, trades = 0, wins = 0, held = 0;
    if (!st) st = vx_env_observe(env, obs, NULL, e);
    for (int t = 0; t < L && !st; t++) {
        if (pol == POLICY_AGENT) {
            st = agent->act(agent->ctx, obs, (int)E, act, e);
        } else {
            for (size_t k = 0; k < E; k++) {
                int32_t *a = act + k * VX_ACTION_BRANCHES;
                a[0] = pol == POLICY_BUY_HOLD ? VX_EXPOSURE_LEVELS - 1 : VX_EXPOSURE_LEVELS / 2;
                a[1] = VX_ORDER_MARKET;
                a[2] = VX_URGENCY_LEVELS - 1;
            }
        }
        if (!st) st = vx_env_step(env, act, obs, rew, te, tr, NULL, NULL, e);
        const vx_env_state *s = vx_env_states(env);
        for (size_t k = 0; k < E && !st; k++) {
            double v = (double)rew[k] * p->reward_scale;
            pnl[k * (size_t)L + (size_t)t] = v;
            traded += abs(s[k].last_change);
            trades += s[k].last_change != 0;
            if (s[k].pos != 0) { /* a position held through the bar's close */
                held++;
                wins += v > 0;
            }
        }
    }
    if (!st) {
        size_t n = E * (size_t)L;
        double sum = 0, sum2 = 0, eq = 0, peak = 0, mdd = 0;
        for (size_t i = 0; i < n; i++) {
            sum += pnl[i];
            sum2 += pnl[i] * pnl[i];
            eq += pnl[i];
            peak = eq > peak ? eq : peak;
            mdd = peak - eq > mdd ? peak - eq : mdd;
        }
        double mean = sum / (double)n, var = sum2 / (double)n - mean * mean;
        double sd = var > 0 ? sqrt(var) : 0;
        out->total_pnl = sum;
        out->pnl_per_bar = mean;
        out->sharpe = sd > 1e-12 * (fabs(mean) + 1) ? mean / sd * sqrt(bars_per_year) : 0;
        out->max_drawdown = mdd;
        out->turnover = traded / (double)n;
        out->hit_rate = held > 0 ? wins / held : 0;
        out->trades = trades;
        out->bars = (double)n;
    }
    free(obs), free(rew), free(act), free(te), free(tr), free(pnl);
    vx_env_free(env);
    return st;
}

vx_status vx_eval_run(const vx_market *m, const vx_env_cfg *env_cfg, const vx_policy *pol,
                      vx_eval_report *out, vx_err *e)
{
    memset(out, 0, sizeof *out);
    vx_env_cfg c = *env_cfg;
    c.drawdown_limit = 1e300; /* no stop-out: walk every held-out bar */
    int64_t lo, hi, tlo, thi;
    vx_env_split_rows(m, c.eval_fraction, VX_SPLIT_EVAL, &lo, &hi);
    vx_env_split_rows(m, c.eval_fraction, VX_SPLIT_TRAIN, &tlo, &thi);
    if (c.reward_scale <= 0)
        c.reward_scale = vx_env_reward_scale(m, tlo, thi, c.multiplier, c.max_contracts);
    int L = c.episode_len;
    size_t E = (size_t)((hi - lo - 2) / L);
    if (E == 0)
        return vx_err_set(e, VX_ERR_ARG,
                          "eval: the held-out split has %lld bars, fewer than one episode (%d) + 2",
                          (long long)(hi - lo), L);
    c.episode_len = L + 1; /* see run_policy */
    /* bars per year from the timestamps of the whole market */
    double years = (double)(m->ts[m->n_bars - 1] - m->ts[0]) / (365.25 * 86400e9);
    out->bars_per_year = years > 0 ? (double)(m->n_bars - 1) / years : 252.0;
    out->episodes = E;
    out->reward_scale = c.reward_scale;
    out->first_row = lo;
    out->last_row = lo + (int64_t)E * L;
    vx_status st = VX_OK;
    if (pol) st = run_policy(m, &c, pol, POLICY_AGENT, E, &out->agent, out->bars_per_year, e);
    if (!st)
        st = run_policy(m, &c, NULL, POLICY_BUY_HOLD, E, &out->buy_hold, out->bars_per_year, e);
    if (!st) st = run_policy(m, &c, NULL, POLICY_FLAT, E, &out->flat, out->bars_per_year, e);
    return st;
}

static void row(FILE *f, const char *name, const vx_eval_metrics *x)
{
    fprintf(f, "  %-12s %12.0f %10.2f %8.2f %12.0f %9.3f %8.1f%% %8.0f\n", name, x->total_pnl,
            x->pnl_per_bar, x->sharpe, x->max_drawdown, x->turnover, 100 * x->hit_rate, x->trades);
}

void vx_eval_print(FILE *f, const vx_eval_report *r)
{
    fprintf(f, "held-out evaluation: %zu episodes, rows %lld..%lld, %.0f bars, after costs\n",
            r->episodes, (long long)r->first_row, (long long)r->last_row, r->buy_hold.bars);
    fprintf(f, "  %-12s %12s %10s %8s %12s %9s %9s %8s\n", "policy", "PnL $", "$/bar", "Sharpe",
            "max DD $", "turnover", "hit rate", "trades");
    if (r->agent.bars > 0) row(f, "agent", &r->agent);
    row(f, "buy & hold", &r->buy_hold);
    row(f, "flat", &r->flat);
}

static void jrow(FILE *f, const char *name, const vx_eval_metrics *x, int last)
{
    fprintf(f,
            "  \"%s\": {\"total_pnl\": %.6g, \"pnl_per_bar\": %.6g, \"sharpe\": %.6g, "
            "\"max_drawdown\": %.6g, \"turnover\": %.6g, \"hit_rate\": %.6g, \"trades\": %.0f, "
            "\"bars\": %.0f}%s\n",
            name, x->total_pnl, x->pnl_per_bar, x->sharpe, x->max_drawdown, x->turnover,
            x->hit_rate, x->trades, x->bars, last ? "" : ",");
}

void vx_eval_json(FILE *f, const vx_eval_report *r)
{
    fprintf(f,
            "{\n  \"episodes\": %zu, \"first_row\": %lld, \"last_row\": %lld, "
            "\"bars_per_year\": %.6g, \"reward_scale\": %.6g,\n",
            r->episodes, (long long)r->first_row, (long long)r->last_row, r->bars_per_year,
            r->reward_scale);
    if (r->agent.bars > 0) jrow(f, "agent", &r->agent, 0);
    jrow(f, "buy_hold", &r->buy_hold, 0);
    jrow(f, "flat", &r->flat, 1);
    fprintf(f, "}\n");
}

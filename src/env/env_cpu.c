/* env_cpu.c — the CPU reference of the vectorised trading environment.
 *
 * A plain loop over environments calling vx_env_step_one from env_dynamics.h; the CUDA twin will
 * launch one thread per environment on the same function. This file owns only the setup: the
 * split, the reward scale, parameter checks and the state array. */
#include "vixen/env.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct vx_env {
    vx_env_params p;
    size_t n;
    vx_env_state *s;
};

void vx_env_cfg_default(vx_env_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->max_contracts = 4;
    c->episode_len = 390;
    c->commission = 2.25;
    c->slippage_ticks = 1;
    c->tick = 0.25;
    c->multiplier = 50;
    c->eval_fraction = 0.2;
    c->seed = 1;
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

void vx_env_split_rows(const vx_market *m, double eval_fraction, vx_split split, int64_t *lo,
                       int64_t *hi)
{
    int64_t rows = (int64_t)m->rows;
    int64_t cut = rows - (int64_t)floor(eval_fraction * (double)rows);
    if (split == VX_SPLIT_TRAIN) *lo = 0, *hi = cut;
    else *lo = cut, *hi = rows;
}

vx_status vx_env_create(const vx_env_cfg *cfg, const vx_market *m, vx_split split, size_t n,
                        vx_env **out, vx_err *e)
{
    *out = NULL;
    if (n == 0) return vx_err_set(e, VX_ERR_ARG, "env: need at least one environment");
    if (cfg->max_contracts < 1 || cfg->max_contracts > 100000)
        return vx_err_set(e, VX_ERR_ARG, "env: max_contracts must be in 1..100000");
    if (cfg->episode_len < 1) return vx_err_set(e, VX_ERR_ARG, "env: episode_len must be >= 1");
    if (!(cfg->tick > 0) || !(cfg->multiplier > 0) || cfg->commission < 0 ||
        cfg->slippage_ticks < 0)
        return vx_err_set(e, VX_ERR_ARG, "env: tick and multiplier must be > 0, costs >= 0");
    if (!(cfg->eval_fraction >= 0 && cfg->eval_fraction < 1))
        return vx_err_set(e, VX_ERR_ARG, "env: eval_fraction must be in [0, 1)");
    int64_t lo, hi, tlo, thi;
    vx_env_split_rows(m, cfg->eval_fraction, split, &lo, &hi);
    vx_env_split_rows(m, cfg->eval_fraction, VX_SPLIT_TRAIN, &tlo, &thi);
    if (hi - lo < (int64_t)cfg->episode_len + 2)
        return vx_err_set(e, VX_ERR_ARG,
                          "env: the %s split has %lld bars, fewer than one episode (%d) + 2",
                          split == VX_SPLIT_TRAIN ? "training" : "evaluation",
                          (long long)(hi - lo), cfg->episode_len);
    vx_env *env = calloc(1, sizeof *env);
    if (!env) return vx_err_set(e, VX_ERR_NOMEM, "env: out of memory");
    env->s = calloc(n, sizeof *env->s);
    if (!env->s) {
        free(env);
        return vx_err_set(e, VX_ERR_NOMEM, "env: out of memory for %zu environments", n);
    }
    env->n = n;
    vx_env_params *p = &env->p;
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
    p->seed = cfg->seed;
    for (size_t i = 0; i < n; i++) vx_env_reset(p, &env->s[i], i);
    *out = env;
    return VX_OK;
}

void vx_env_free(vx_env *env)
{
    if (!env) return;
    free(env->s);
    free(env);
}

size_t vx_env_count(const vx_env *env) { return env->n; }
const vx_env_params *vx_env_params_get(const vx_env *env) { return &env->p; }
const vx_env_state *vx_env_states(const vx_env *env) { return env->s; }

vx_status vx_env_reset_to(vx_env *env, size_t i, int64_t row, vx_err *e)
{
    const vx_env_params *p = &env->p;
    if (i >= env->n || row < p->row_lo || row > p->row_hi - 1 - p->episode_len)
        return vx_err_set(e, VX_ERR_ARG, "env: cannot start environment %zu at row %lld", i,
                          (long long)row);
    vx_env_reset(p, &env->s[i], i);
    env->s[i].row = row;
    return VX_OK;
}

void vx_env_set_states(vx_env *env, const vx_env_state *states)
{
    memcpy(env->s, states, env->n * sizeof *env->s);
}

void vx_env_observe_all(const vx_env *env, float *obs)
{
    for (size_t i = 0; i < env->n; i++) vx_env_observe(&env->p, &env->s[i], obs + i * VX_OBS_DIM);
}

vx_status vx_env_step(vx_env *env, const int32_t *actions, float *obs, float *rewards,
                      uint8_t *terminated, uint8_t *truncated, float *final_obs, vx_err *e)
{
    static const int32_t limits[3] = {VX_EXPOSURE_LEVELS, VX_ORDER_TYPES, VX_URGENCY_LEVELS};
    static const char *branch[3] = {"exposure", "order_type", "urgency"};
    for (size_t i = 0; i < env->n; i++)
        for (int b = 0; b < 3; b++) {
            int32_t a = actions[i * 3 + (size_t)b];
            if (a < 0 || a >= limits[b])
                return vx_err_line(e, VX_ERR_ARG, "env.step", -1, branch[b],
                                   "environment %zu: action %d out of range 0..%d", i, a,
                                   limits[b] - 1);
        }
    for (size_t i = 0; i < env->n; i++) {
        const int32_t *a = actions + i * 3;
        vx_env_step_one(&env->p, &env->s[i], i, a[0], a[1], a[2], obs + i * VX_OBS_DIM,
                        &rewards[i], &terminated[i], &truncated[i],
                        final_obs ? final_obs + i * VX_OBS_DIM : NULL);
    }
    return VX_OK;
}

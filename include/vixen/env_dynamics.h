/* env_dynamics.h — one environment's trading step, written once for the CPU and the GPU.
 *
 * Every function is `VX_HD static inline` and uses only its arguments, so the CPU loop in
 * env_cpu.c and a CUDA kernel (one thread per environment) run the same arithmetic. Double
 * precision throughout for money; integers for positions and order sizes.
 *
 * Timing (no look-ahead): the agent decides at the close of row t, seeing row t's features; its
 * order executes during row t+1 against that bar's open/high/low/close; the reward is the change
 * of mark-to-market equity from close t to close t+1, net of commission and slippage, divided by
 * the reward scale. See docs/environment.md. */
#ifndef VIXEN_ENV_DYNAMICS_H
#define VIXEN_ENV_DYNAMICS_H

#include <stdint.h>
#include <math.h>
#include "vixen/data.h" /* VX_OBS_DIM, VX_MARKET_FEATURES: the one spelling of the widths */
#include "vixen/hd.h"
#include "vixen/philox.h"

#define VX_EXPOSURE_LEVELS 9
#define VX_ORDER_TYPES 3
#define VX_URGENCY_LEVELS 3
#define VX_ACTION_BRANCHES 3
#define VX_ENV_RESET_STREAM (1ull << 48) /* Philox stream ids of episode starts: this + env id */

enum { VX_ORDER_MARKET = 0, VX_ORDER_LIMIT = 1, VX_ORDER_VWAP = 2 };

/* Read-only inputs shared by all environments. Row r of the arrays is one bar. */
typedef struct {
    const float *features; /* rows × VX_MARKET_FEATURES */
    const double *open, *high, *low, *close;
    int64_t row_lo, row_hi; /* this split's rows: [row_lo, row_hi) */
    /* parameters */
    int32_t max_contracts;
    int32_t episode_len;
    double commission;         /* $ per contract per side */
    double slippage_ticks;     /* market orders pay this many ticks; VWAP half */
    double tick;               /* price increment */
    double multiplier;         /* $ per point */
    double reward_scale;       /* $ per reward unit (reward_kind 0), and the unit of the PnL
                                * observations */
    int32_t reward_kind;       /* 0: Δequity / reward_scale; 1: Δequity / reward_unit[row] */
    const double *reward_unit; /* kind 1: $ per reward unit at each row, the ex-ante volatility
                                * of a full position (vx_env_reward_units) */
    double drawdown_limit; /* $; the episode terminates when equity falls this far below its peak */
    uint64_t seed;
} vx_env_params;

/* One environment's state. Plain data, copyable to and from the device. */
typedef struct {
    int64_t row;         /* current bar: the agent has seen its close */
    int32_t pos;         /* contracts, signed */
    int32_t last_change; /* contracts traded at the last step, signed */
    int32_t steps;       /* steps into the episode */
    int32_t time_in_pos; /* steps since the position last became non-zero or changed sign */
    uint64_t episode;    /* episodes started by this environment (Philox counter) */
    double cash;         /* $ relative to the episode start */
    double avg_entry;    /* average entry price of the open position */
    double realised;     /* $ realised this episode, commissions included */
    double equity;       /* cash + pos · close · multiplier, at the current close */
    double peak;         /* highest equity this episode */
} vx_env_state;

/* round(x) half away from zero, identical on host and device */
VX_HD static inline int32_t vx_env_round(double x)
{
    return (int32_t)(x >= 0 ? floor(x + 0.5) : -floor(-x + 0.5));
}

/* Target position of exposure level e in 0..8: round((−1 + e/4) · max). */
VX_HD static inline int32_t vx_env_target(int32_t e, int32_t max_contracts)
{
    return vx_env_round((-1.0 + e / 4.0) * max_contracts);
}

/* Contracts to trade toward the target: ⅓, ⅔ or all of the gap (rounded half up), at least one
 * when the gap is non-zero. */
VX_HD static inline int32_t vx_env_order_qty(int32_t pos, int32_t target, int32_t urgency)
{
    int32_t gap = target - pos;
    if (gap == 0) return 0;
    int32_t mag = gap > 0 ? gap : -gap;
    int32_t q = (2 * mag * (urgency + 1) + 3) / 6;
    if (q < 1) q = 1;
    return gap > 0 ? q : -q;
}

/* Fill price of `qty` contracts of order type `type` during the bar (o, h, l, c); returns 0 when
 * a limit order does not fill. Market: the open plus slippage against you. Limit: one tick
 * better than the open, filled only if the bar trades through it. VWAP: the typical price
 * (h + l + c) / 3 plus half the market slippage. */
VX_HD static inline int vx_env_fill(const vx_env_params *p, int32_t qty, int32_t type, double o,
                                    double h, double l, double c, double *price)
{
    double side = qty > 0 ? 1.0 : -1.0;
    if (type == VX_ORDER_LIMIT) {
        double limit = o - side * p->tick;
        int filled = qty > 0 ? (l < limit) : (h > limit);
        *price = limit;
        return filled;
    }
    if (type == VX_ORDER_VWAP) {
        *price = (h + l + c) / 3.0 + side * 0.5 * p->slippage_ticks * p->tick;
        return 1;
    }
    *price = o + side * p->slippage_ticks * p->tick;
    return 1;
}

/* Books a fill: cash, average entry, realised PnL (commission included). */
VX_HD static inline void vx_env_book(const vx_env_params *p, vx_env_state *s, int32_t qty,
                                     double price)
{
    double cost = p->commission * (qty > 0 ? qty : -qty);
    s->cash -= qty * price * p->multiplier + cost;
    s->realised -= cost;
    int32_t pos = s->pos, npos = pos + qty;
    if (pos == 0 || (pos > 0) == (qty > 0)) { /* opening or adding */
        int32_t ap = pos > 0 ? pos : -pos, aq = qty > 0 ? qty : -qty;
        s->avg_entry = (s->avg_entry * ap + price * aq) / (ap + aq);
    } else { /* reducing, closing or flipping */
        int32_t ap = pos > 0 ? pos : -pos, aq = qty > 0 ? qty : -qty;
        int32_t closed = aq < ap ? aq : ap;
        s->realised += closed * (price - s->avg_entry) * (pos > 0 ? 1.0 : -1.0) * p->multiplier;
        if (npos == 0) s->avg_entry = 0.0;
        else if (aq > ap) s->avg_entry = price; /* flipped: the new side opened at this price */
    }
    if (npos == 0 || (pos > 0) != (npos > 0) || pos == 0) s->time_in_pos = 0;
    s->pos = npos;
}

/* Starts episode s->episode: a start row from this environment's Philox stream, flat book. */
VX_HD static inline void vx_env_reset(const vx_env_params *p, vx_env_state *s, uint64_t env_id)
{
    vx_rng r = vx_rng_make(p->seed, VX_ENV_RESET_STREAM + env_id, s->episode);
    int64_t span = p->row_hi - 1 - p->episode_len - p->row_lo; /* last start leaves L steps */
    s->row = p->row_lo + (int64_t)vx_rng_below(&r, (uint32_t)(span + 1));
    s->pos = 0;
    s->last_change = 0;
    s->steps = 0;
    s->time_in_pos = 0;
    s->cash = 0.0;
    s->avg_entry = 0.0;
    s->realised = 0.0;
    s->equity = 0.0;
    s->peak = 0.0;
    s->episode++;
}

VX_HD static inline float vx_env_clip(double x, double lim)
{
    return (float)(x > lim ? lim : (x < -lim ? -lim : x));
}

/* Writes the VX_OBS_DIM-float observation of the current state: the row's VX_MARKET_FEATURES
 * market features, then the VX_AGENT_FEATURES (six) agent features, each O(1): exposure,
 * unrealised and realised PnL (in units of reward_scale·sqrt(episode_len), about one session's
 * standard deviation at full size, clipped to ±5), time in position (fraction of the episode),
 * drawdown (fraction of the limit), and the last exposure change (in units of 2·max_contracts).
 * (The public vx_env_observe of env.h writes all N of an environment object.) */
VX_HD static inline void vx_env_observe_one(const vx_env_params *p, const vx_env_state *s,
                                            float *obs)
{
    /* every feature loaded before any is stored: obs might alias the features as far as the
     * compiler knows, and a load-store pair at a time made a GPU thread wait for each of its 45
     * loads in turn (most of the step kernel's 25.7 µs on an H200) */
    const float *f = p->features + s->row * VX_MARKET_FEATURES;
    float row[VX_MARKET_FEATURES];
    for (int i = 0; i < VX_MARKET_FEATURES; i++) row[i] = f[i];
    for (int i = 0; i < VX_MARKET_FEATURES; i++) obs[i] = row[i];
    double pnl_unit = p->reward_scale * sqrt((double)p->episode_len);
    double unreal = s->pos * (p->close[s->row] - s->avg_entry) * p->multiplier;
    float *a = obs + VX_MARKET_FEATURES;
    a[0] = (float)((double)s->pos / p->max_contracts);
    a[1] = vx_env_clip(unreal / pnl_unit, 5.0);
    a[2] = (float)((double)s->time_in_pos / p->episode_len);
    a[3] = vx_env_clip(s->realised / pnl_unit, 5.0);
    a[4] = vx_env_clip((s->peak - s->equity) / p->drawdown_limit, 1.0);
    a[5] = (float)((double)s->last_change / (2.0 * p->max_contracts));
}

/* One step of one environment for action (e, o, u). Writes the reward and the flags; on the end
 * of an episode writes the pre-reset observation into final_obs (when not NULL), resets, and
 * writes the new episode's first observation into obs. */
VX_HD static inline void vx_env_step_one(const vx_env_params *p, vx_env_state *s, uint64_t env_id,
                                         int32_t e, int32_t o, int32_t u, float *obs, float *reward,
                                         uint8_t *terminated, uint8_t *truncated, float *final_obs)
{
    int64_t t1 = s->row + 1;
    double unit = p->reward_kind ? p->reward_unit[s->row] : p->reward_scale; /* known at t */
    double bo = p->open[t1], bh = p->high[t1], bl = p->low[t1], bc = p->close[t1];
    int32_t qty = vx_env_order_qty(s->pos, vx_env_target(e, p->max_contracts), u);
    int32_t traded = 0;
    double price;
    if (qty != 0 && vx_env_fill(p, qty, o, bo, bh, bl, bc, &price)) {
        vx_env_book(p, s, qty, price);
        traded = qty;
    }
    s->last_change = traded;
    s->row = t1;
    s->steps++;
    if (s->pos != 0) s->time_in_pos++;
    double eq = s->cash + s->pos * bc * p->multiplier;
    *reward = (float)((eq - s->equity) / unit);
    s->equity = eq;
    if (eq > s->peak) s->peak = eq;
    uint8_t term = (s->peak - eq) >= p->drawdown_limit;
    uint8_t trunc = !term && s->steps >= p->episode_len;
    *terminated = term;
    *truncated = trunc;
    if (term || trunc) {
        if (final_obs) vx_env_observe_one(p, s, final_obs);
        vx_env_reset(p, s, env_id);
    }
    vx_env_observe_one(p, s, obs);
}

#endif

/* eval.h — evaluating a policy on one split of a market, next to baselines, with the figures a
 * researcher needs to judge it: PnL gross, costs and net, the Sharpe ratio with its standard
 * error, drawdown, turnover, hit rate, and the per-period PnL behind them.
 *
 * The walk (docs/algorithms.md, "Evaluation"): every bar of the split is traded, in time order,
 * as consecutive episodes of episode_len steps — each starting flat, as training episodes do —
 * walked in parallel; the last is shorter when the split does not divide evenly. The stop-out
 * works as in training: when equity falls drawdown_limit below its peak the episode ends, and the
 * next one starts flat at the next bar (training would start it at a random bar). So the
 * observation the agent sees, drawdown feature included, is built the same way in both.
 *
 * Baselines, each fitted on the training split only (never on the split evaluated): buy-and-hold,
 * flat, momentum (the sign of the k-bar return, k chosen among a few by training Sharpe), a ridge
 * predictor of the next bar's PnL from the 45 market features (λ chosen on the last fifth of the
 * training split, then refitted on all of it), and on a synthetic market the oracle that trades
 * the sign of the planted signal (holding while the signal is weaker than a band chosen by
 * training Sharpe). All trade at full urgency with market orders.
 *
 * Annualisation is in trading time: PnL is summed per trading day (the UTC date of the bar's
 * timestamp + 2 h, so that a futures session opening in the evening counts as the next day's;
 * for bars a day or longer, per bar), and the Sharpe ratio is mean / sd of that series ·
 * sqrt(periods per year: 252 for days). Its standard error is Lo's (2002) for i.i.d. returns,
 * sqrt((1 + SR²/2) / n) per period, annualised the same way. */
#ifndef VIXEN_EVAL_H
#define VIXEN_EVAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "vixen/algo.h"
#include "vixen/data.h"
#include "vixen/env.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One policy on one split. Money in $, after costs unless named gross. */
typedef struct {
    int present;            /* 0: this row was not evaluated */
    double net;             /* gross − costs */
    double gross;           /* marked at the reference price of each fill (the bar's open for
                             * market orders, its typical price for VWAP, the limit price) */
    double costs;           /* commission + slippage against those reference prices */
    double pnl_per_bar;     /* net / bars */
    double sharpe;          /* annualised, from the per-period net PnL */
    double sharpe_se;       /* its standard error (Lo 2002, i.i.d.) */
    double max_drawdown;    /* on the net equity curve, bar by bar */
    double eq_high, eq_low; /* that curve's highest and lowest, from 0 at the start (with
                             * max_drawdown, what chaining two curves' drawdowns needs) */
    double turnover;        /* contracts traded per bar */
    double hit_rate;        /* of the bars ending with a position, the share with net PnL > 0 */
    double held;            /* the bars ending with a position (what hit_rate is a share of) */
    double trades;          /* steps that traded */
    double bars;            /* bars evaluated (transitions from one close to the next) */
    double stop_outs;       /* episodes ended by the drawdown limit */
    double exposure_hist[VX_EXPOSURE_LEVELS]; /* the exposure level chosen, per bar */
    double order_hist[VX_ORDER_TYPES];        /* the order type chosen */
    double urgency_hist[VX_URGENCY_LEVELS];   /* the urgency chosen */
    double position_hist[VX_EXPOSURE_LEVELS]; /* the position held, as the nearest level */
    size_t n_periods;
    double *period_pnl; /* net $ per period, in time order (malloc'd; vx_eval_report_free) */
} vx_eval_metrics;

/* The rows of a report, in print order. */
typedef enum {
    VX_EVAL_AGENT,
    VX_EVAL_IN_SAMPLE, /* the agent on the training split */
    VX_EVAL_BUY_HOLD,
    VX_EVAL_FLAT,
    VX_EVAL_MOMENTUM,
    VX_EVAL_RIDGE,
    VX_EVAL_ORACLE,
    VX_EVAL_ROWS
} vx_eval_row;
const char *vx_eval_row_name(vx_eval_row r); /* "agent", "agent in-sample", "buy & hold", … */
const char *vx_eval_row_key(vx_eval_row r);  /* "agent", "in_sample", "buy_hold", … (JSON) */

/* The baselines' fitted parameters (from the training split). */
typedef struct {
    int momentum_k;                         /* bars of the momentum rule's lookback */
    double momentum_sharpe;                 /* its training Sharpe, which chose it */
    double ridge_lambda;                    /* chosen on the last fifth of the training split */
    double ridge_w[VX_MARKET_FEATURES + 1]; /* intercept, then one weight per market feature */
    double ridge_pred_sd; /* sd of the predictions on the training split: the position is
                           * pred / (2 sd), clipped to ±1, as the nearest exposure level */
    int has_oracle;       /* the market carries a planted signal */
    double oracle_band;   /* the oracle holds while |signal| is below it (chosen by training
                           * Sharpe among 0, 0.5, 1, 1.5 and 2: trading every sign change of a
                           * weak signal can cost more than it earns) */
} vx_baselines;

/* Fits the baselines on the training split of m under c. */
vx_status vx_baselines_fit(const vx_market *m, const vx_env_cfg *c, vx_baselines *out, vx_err *e);

/* Room for the devices that trained a run: "A; then B; …" (a device's name is under 192). */
#define VX_DEVICES_LEN 640

typedef struct {
    vx_split split;
    int64_t first_row, last_row; /* the split's rows [first_row, last_row) */
    size_t episodes;             /* the consecutive episodes walked in parallel */
    double reward_scale;         /* $ per reward unit (the training split's) */
    double bars_per_year;        /* bars per trading day · 252 (for reading $/bar) */
    double periods_per_year;     /* 252 for trading days */
    int period_is_day;           /* 1: periods are trading days; 0: bars */
    int64_t *period_end_ts;      /* the last bar's timestamp of each period (malloc'd) */
    size_t n_periods;
    vx_eval_metrics row[VX_EVAL_ROWS];
    vx_baselines baselines;
    int have_baselines;
    char checkpoint[1400]; /* which checkpoint the agent is ("" when not from one) */
    /* the devices that trained it, in order ("" when not recorded): another CPU's BLAS kernels
     * or another GPU train the same seed to other weights (design.md) */
    char trained_on[VX_DEVICES_LEN];
    char warnings[4][256];
    int n_warnings;
} vx_eval_report;

typedef struct {
    int baselines;              /* 1: also every baseline row (fitted here unless given) */
    const vx_baselines *fitted; /* fitted baselines to reuse (NULL: fit when needed) */
    int in_sample;              /* 1: also the agent on the training split */
} vx_eval_opts;

/* The policy (NULL: only the baselines) on one split of m. The report owns memory: free it with
 * vx_eval_report_free (also after an error). */
vx_status vx_eval_run(const vx_market *m, const vx_env_cfg *env_cfg, vx_split split,
                      const vx_policy *pol, const vx_eval_opts *opts, vx_eval_report *out,
                      vx_err *e);
void vx_eval_report_free(vx_eval_report *r);

/* One report of consecutive parts (the test blocks of walk-forward folds, in time order): each
 * row present in every part, except the agent's in-sample row (the folds' training windows
 * overlap), its money and counts summed, its per-period PnL concatenated — a trading day two
 * parts split is one period — and its Sharpe ratio and standard error computed over all of it;
 * the maximum drawdown the bar-by-bar one of the chained equity curves, the hit rate all the wins
 * over all the bars held. */
vx_status vx_eval_concat(const vx_eval_report *parts, int k, vx_eval_report *out, vx_err *e);

/* Adds warning text to a report (at most 4 are kept). */
void vx_eval_warn(vx_eval_report *r, const char *fmt, ...);

void vx_eval_print(FILE *f, const vx_eval_report *r);
/* JSON: the split, its rows, the periods, each present row with every figure, the baselines'
 * parameters, the checkpoint and the warnings. */
void vx_eval_json(FILE *f, const vx_eval_report *r);

#ifdef __cplusplus
}
#endif

#endif

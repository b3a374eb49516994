/* baselines.c — fitting the evaluation's baselines (eval.h) on the training split only.
 *
 * Momentum: position = full size in the direction of the last k bars' price change; k is the
 * candidate with the best training Sharpe among 5, 10, 20, 60, 120 and 240 bars (those the
 * feature warm-up leaves history for).
 *
 * Ridge: a linear prediction of the next bar's PnL of a full long position, in reward units,
 * from an intercept and the 45 market features of the decision row:
 *   w = argmin Σ (y − x·w)² / n + λ ‖w₁..₄₅‖²,   i.e. (XᵀX / n + λ I′) w = Xᵀy / n
 * (I′: the identity without the intercept). λ is chosen among 1e-4 … 1 by the squared error on
 * the last fifth of the training rows after fitting the first four fifths (a gap of split.gap
 * rows between them), then w is refitted on every training row. XᵀX is summed in chunks with
 * BLAS (dsyrk) and the system solved with LAPACK's Cholesky (dposv), both from OpenBLAS.
 *
 * Oracle (synthetic markets): full size in the direction of the planted signal in force at the
 * next bar, holding while |signal| is below a band chosen by training Sharpe among 0 … 2. */
#include "eval_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define P (VX_MARKET_FEATURES + 1) /* intercept + features */
#define CHUNK 1024

/* LAPACK (OpenBLAS exports it): solves A x = b for symmetric positive definite A, in place. */
extern void dposv_(const char *uplo, const int *n, const int *nrhs, double *a, const int *lda,
                   double *b, const int *ldb, int *info);

typedef struct {
    double xtx[P * P], xty[P];
    double n;
} normal_eq;

/* The regression row of decision row r: x = [1, features], y = the next bar's full-long PnL. */
static double xy_row(const vx_env_params *p, int64_t r, double *x)
{
    const float *f = p->features + (size_t)r * VX_MARKET_FEATURES;
    x[0] = 1;
    for (int i = 0; i < VX_MARKET_FEATURES; i++) x[i + 1] = f[i];
    return (p->close[r + 1] - p->close[r]) * p->multiplier * p->max_contracts / p->reward_scale;
}

/* XᵀX and Xᵀy over decision rows [lo, hi). */
static vx_status accumulate(const vx_env_params *p, int64_t lo, int64_t hi, normal_eq *q, vx_err *e)
{
    memset(q, 0, sizeof *q);
    double *x = malloc(CHUNK * P * sizeof(double)), *y = malloc(CHUNK * sizeof(double));
    if (!x || !y) {
        free(x), free(y);
        return vx_err_set(e, VX_ERR_NOMEM, "ridge: out of memory");
    }
    for (int64_t r0 = lo; r0 < hi; r0 += CHUNK) {
        int k = (int)(hi - r0 < CHUNK ? hi - r0 : CHUNK);
        for (int i = 0; i < k; i++) y[i] = xy_row(p, r0 + i, x + (size_t)i * P);
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, P, k, 1.0, x, P, 1.0, q->xtx, P);
        cblas_dgemv(CblasRowMajor, CblasTrans, k, P, 1.0, x, P, y, 1, 1.0, q->xty, 1);
    }
    q->n = (double)(hi - lo);
    for (int i = 0; i < P; i++) /* mirror the upper triangle */
        for (int j = 0; j < i; j++) q->xtx[i * P + j] = q->xtx[j * P + i];
    free(x), free(y);
    return VX_OK;
}

static vx_status solve(const normal_eq *q, double lambda, double *w, vx_err *e)
{
    double a[P * P];
    for (int i = 0; i < P * P; i++) a[i] = q->xtx[i] / q->n;
    for (int i = 1; i < P; i++) a[i * P + i] += lambda;
    for (int i = 0; i < P; i++) w[i] = q->xty[i] / q->n;
    int n = P, nrhs = 1, info = 0;
    dposv_("U", &n, &nrhs, a, &n, w, &n, &info);
    if (info != 0)
        return vx_err_set(e, VX_ERR_VALIDATION,
                          "ridge: the normal equations are singular (LAPACK dposv info %d)", info);
    return VX_OK;
}

static double mse(const vx_env_params *p, int64_t lo, int64_t hi, const double *w)
{
    double x[P], s = 0;
    for (int64_t r = lo; r < hi; r++) {
        double y = xy_row(p, r, x), d = y - cblas_ddot(P, x, 1, w, 1);
        s += d * d;
    }
    return hi > lo ? s / (double)(hi - lo) : INFINITY;
}

static vx_status fit_ridge(const vx_env_params *p, int64_t gap, vx_baselines *b, vx_err *e)
{
    int64_t lo = p->row_lo, hi = p->row_hi - 1; /* decision rows with a next bar */
    int64_t cut = lo + (hi - lo) * 4 / 5;
    static const double lambdas[] = {1e-4, 1e-3, 1e-2, 1e-1, 1};
    normal_eq q;
    vx_status st = accumulate(p, lo, cut, &q, e);
    double best = INFINITY, w[P];
    b->ridge_lambda = lambdas[0];
    for (size_t k = 0; k < sizeof lambdas / sizeof *lambdas && !st; k++) {
        st = solve(&q, lambdas[k], w, e);
        double err = st ? INFINITY : mse(p, cut + gap < hi ? cut + gap : cut, hi, w);
        if (err < best) best = err, b->ridge_lambda = lambdas[k];
    }
    if (!st) st = accumulate(p, lo, hi, &q, e);
    if (!st) st = solve(&q, b->ridge_lambda, b->ridge_w, e);
    if (st) return st;
    double sum = 0, sum2 = 0, x[P];
    for (int64_t r = lo; r < hi; r++) {
        xy_row(p, r, x);
        double pred = cblas_ddot(P, x, 1, b->ridge_w, 1);
        sum += pred, sum2 += pred * pred;
    }
    double n = (double)(hi - lo), var = sum2 / n - (sum / n) * (sum / n);
    b->ridge_pred_sd = var > 0 ? sqrt(var) : 1;
    return VX_OK;
}

vx_status vx_baselines_fit(const vx_market *m, const vx_env_cfg *c, vx_baselines *out, vx_err *e)
{
    memset(out, 0, sizeof *out);
    vx_env_params p;
    vx_status st = vx_env_params_make(c, m, VX_SPLIT_TRAIN, &p, e);
    if (st) return st;
    static const int ks[] = {5, 10, 20, 60, 120, 240};
    out->momentum_sharpe = -INFINITY;
    for (size_t i = 0; i < sizeof ks / sizeof *ks && !st; i++) {
        if ((size_t)ks[i] > m->first_bar) break; /* no price history that far before row 0 */
        vx_baselines trial = *out;
        trial.momentum_k = ks[i];
        double sr;
        st = vx_eval_rule_sharpe(m, c, VX_SPLIT_TRAIN, VX_EVAL_MOMENTUM, &trial, &sr, e);
        if (!st && sr > out->momentum_sharpe) /* strictly: a tie keeps the shorter k */
            out->momentum_sharpe = sr, out->momentum_k = ks[i];
    }
    if (!st && out->momentum_k == 0)
        return vx_err_set(e, VX_ERR_ARG,
                          "baselines: the market has no price history before its "
                          "first feature row for the momentum rule");
    if (!st) st = fit_ridge(&p, c->gap, out, e);
    out->has_oracle = m->signal != NULL;
    static const double bands[] = {0, 0.5, 1, 1.5, 2};
    double best = -INFINITY;
    for (size_t i = 0; i < sizeof bands / sizeof *bands && !st && out->has_oracle; i++) {
        vx_baselines trial = *out;
        trial.oracle_band = bands[i];
        double sr;
        st = vx_eval_rule_sharpe(m, c, VX_SPLIT_TRAIN, VX_EVAL_ORACLE, &trial, &sr, e);
        if (!st && sr > best) best = sr, out->oracle_band = bands[i]; /* a tie: the narrower */
    }
    return st;
}

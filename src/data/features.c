/* features.c — the 45 market features of each bar (docs/features.md has every formula).
 *
 * One forward pass over the bars with running state only (EMAs, Wilder averages, rolling sums,
 * monotonic deques for rolling highs and lows), so the features of bar t are a function of bars
 * 0..t alone: causality holds by construction and a test checks it bit for bit. Arithmetic is in
 * double; the output is float32, every value finite and clipped to [-5, 5]. The first
 * VX_FEATURE_WARMUP bars (the longest lookback) produce no row.
 *
 * Scale-free by design: returns are divided by a volatility, distances by the ATR, volumes by
 * their own averages, so the same agent can read ES at 4000 and a stock at 40. */
#include "vixen/data.h"
#include "data_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *names[VX_OBS_DIM] = {
    "ret_1", "ret_2", "ret_3", "ret_5", "ret_10", "ret_15", "ret_30", "ret_60", "ret_120",
    "ret_240", "rv_20", "parkinson_20", "garman_klass_20", "atr_14", "body", "upper_wick",
    "lower_wick", "range", "rsi_14", "macd", "macd_hist", "stoch_14", "cci_20", "adx_14",
    "di_diff_14", "bollinger_b", "bollinger_width", "dist_sma_20", "dist_sma_60", "dist_sma_240",
    "dist_vwap", "range_pos_60", "range_pos_240", "volume_z_20", "log_volume_z_240",
    "volume_vs_minute", "imbalance_20", "imbalance_60", "tod_sin", "tod_cos", "dow_sin", "dow_cos",
    "session", "session_left", "ema_slope_20",
    /* agent features, filled by the environment */
    "exposure", "unrealised_pnl", "time_in_position", "realised_pnl", "drawdown",
    "exposure_change"};

const char *vx_feature_name(int i) { return (i >= 0 && i < VX_OBS_DIM) ? names[i] : "?"; }

static const int horizons[10] = {1, 2, 3, 5, 10, 15, 30, 60, 120, 240};

/* Rolling sum over the last w values (ring buffer). */
typedef struct {
    double *buf;
    int w, i, n;
    double sum;
} roll;

static int roll_init(roll *r, int w)
{
    r->buf = calloc((size_t)w, sizeof *r->buf);
    r->w = w, r->i = 0, r->n = 0, r->sum = 0;
    return r->buf ? 0 : -1;
}
static void roll_push(roll *r, double x)
{
    if (r->n == r->w) r->sum -= r->buf[r->i];
    else r->n++;
    r->buf[r->i] = x;
    r->sum += x;
    r->i = (r->i + 1) % r->w;
}
static double roll_mean(const roll *r) { return r->n ? r->sum / r->n : 0.0; }

/* Rolling max (or min, with sign = -1) over the last w bars: a monotonic deque of indices. */
typedef struct {
    int64_t *idx;
    double *val;
    int cap, head, len, w;
    double sign;
} deque;

static int dq_init(deque *d, int w, double sign)
{
    d->cap = w + 1;
    d->idx = malloc((size_t)d->cap * sizeof *d->idx);
    d->val = malloc((size_t)d->cap * sizeof *d->val);
    d->head = d->len = 0, d->w = w, d->sign = sign;
    return d->idx && d->val ? 0 : -1;
}
static void dq_push(deque *d, int64_t t, double x)
{
    double sx = d->sign * x;
    while (d->len && d->val[(d->head + d->len - 1) % d->cap] <= sx) d->len--;
    int tail = (d->head + d->len) % d->cap;
    d->idx[tail] = t, d->val[tail] = sx, d->len++;
    while (d->idx[d->head] <= t - d->w) d->head = (d->head + 1) % d->cap, d->len--;
}
static double dq_top(const deque *d) { return d->sign * d->val[d->head]; }

static float clipf(double x)
{
    if (!isfinite(x)) return 0.0f;
    if (x > VX_FEATURE_CLIP) return VX_FEATURE_CLIP;
    if (x < -VX_FEATURE_CLIP) return -VX_FEATURE_CLIP;
    return (float)x;
}

static double safe_div(double a, double b) { return b > 0 ? a / b : 0.0; }

enum { NROLL = 13, NDQ = 6 };

vx_status vx_features_compute(const vx_series *s, vx_features *out, vx_err *e)
{
    memset(out, 0, sizeof *out);
    size_t n = s->n;
    if (n <= VX_FEATURE_WARMUP)
        return vx_err_set(e, VX_ERR_VALIDATION,
                          "%s: %zu bars, but the features need more than %d (their warm-up)",
                          s->source[0] ? s->source : s->instrument, n, VX_FEATURE_WARMUP);
    out->first_bar = VX_FEATURE_WARMUP;
    out->rows = n - VX_FEATURE_WARMUP;
    out->x = vx_alloc_big(out->rows * VX_MARKET_FEATURES * sizeof(float));
    roll r2_20, r2_240, pk20, gk20, tp20, c20, c2_20, c60, c240, v20, v2_20, lv240, lv2_240;
    roll sv20, av20, sv60, av60;
    roll *rolls[] = {&r2_20, &r2_240, &pk20,  &gk20,    &tp20, &c20,  &c2_20, &c60, &c240,
                     &v20,   &v2_20,  &lv240, &lv2_240, &sv20, &av20, &sv60,  &av60};
    int wins[] = {20, 240, 20, 20, 20, 20, 20, 60, 240, 20, 20, 240, 240, 20, 20, 60, 60};
    deque hh14, ll14, hh60, ll60, hh240, ll240;
    deque *dqs[] = {&hh14, &ll14, &hh60, &ll60, &hh240, &ll240};
    int dqw[] = {14, 14, 60, 60, 240, 240};
    double *ema20_hist = malloc(6 * sizeof(double));
    double *slot = malloc(1440 * sizeof(double));
    int ok = out->x && ema20_hist && slot;
    for (size_t i = 0; i < sizeof rolls / sizeof *rolls; i++)
        ok &= roll_init(rolls[i], wins[i]) == 0;
    for (int i = 0; i < NDQ; i++) ok &= dq_init(dqs[i], dqw[i], (i % 2) ? -1.0 : 1.0) == 0;
    vx_status st = VX_OK;
    if (!ok) {
        st = vx_err_set(e, VX_ERR_NOMEM, "features: out of memory for %zu bars", n);
        goto done;
    }
    for (int i = 0; i < 1440; i++) slot[i] = -1;

    const double ln2 = log(2.0);
    double ewma_r2 = 0, atr = 0, ema12 = 0, ema26 = 0, sig9 = 0, ema20 = 0;
    double rsi_gain = 0, rsi_loss = 0, dm_plus = 0, dm_minus = 0, tr_w = 0, adx = 0;
    double vwap_pv = 0, vwap_v = 0;
    int64_t session_day = INT64_MIN;
    double tp_hist[20];
    for (size_t t = 0; t < n; t++) {
        double o = s->open[t], h = s->high[t], l = s->low[t], c = s->close[t], v = s->volume[t];
        double cp = t ? s->close[t - 1] : o;
        double r = log(c / cp);
        /* state updates — all use bars <= t */
        if (t == 0) ewma_r2 = r * r + 1e-8;
        ewma_r2 = 0.97 * ewma_r2 + 0.03 * r * r;
        double tr = fmax(h - l, fmax(fabs(h - cp), fabs(l - cp)));
        atr = t == 0 ? (h - l) : atr + (tr - atr) / 14.0;
        double a = 2.0 / 13, b = 2.0 / 27;
        ema12 = t == 0 ? c : ema12 + a * (c - ema12);
        ema26 = t == 0 ? c : ema26 + b * (c - ema26);
        double macd = ema12 - ema26;
        sig9 = t == 0 ? macd : sig9 + 0.2 * (macd - sig9);
        ema20 = t == 0 ? c : ema20 + (2.0 / 21) * (c - ema20);
        ema20_hist[t % 6] = ema20;
        double up = c > cp ? c - cp : 0, dn = c < cp ? cp - c : 0;
        rsi_gain += (up - rsi_gain) / 14.0;
        rsi_loss += (dn - rsi_loss) / 14.0;
        double hp = t ? s->high[t - 1] : h, lp = t ? s->low[t - 1] : l;
        double upm = h - hp, dnm = lp - l;
        double pdm = (upm > dnm && upm > 0) ? upm : 0, mdm = (dnm > upm && dnm > 0) ? dnm : 0;
        dm_plus += (pdm - dm_plus) / 14.0;
        dm_minus += (mdm - dm_minus) / 14.0;
        tr_w += (tr - tr_w) / 14.0;
        double pdi = 100 * safe_div(dm_plus, tr_w), mdi = 100 * safe_div(dm_minus, tr_w);
        double dx = 100 * safe_div(fabs(pdi - mdi), pdi + mdi);
        adx += (dx - adx) / 14.0;
        double hl = log(h / l), co = log(c / o);
        roll_push(&r2_20, r * r);
        roll_push(&r2_240, r * r);
        roll_push(&pk20, hl * hl / (4 * ln2));
        roll_push(&gk20, 0.5 * hl * hl - (2 * ln2 - 1) * co * co);
        double tp = (h + l + c) / 3;
        tp_hist[t % 20] = tp;
        roll_push(&tp20, tp);
        roll_push(&c20, c);
        roll_push(&c2_20, c * c);
        roll_push(&c60, c);
        roll_push(&c240, c);
        roll_push(&v20, v);
        roll_push(&v2_20, v * v);
        double lv = log1p(v);
        roll_push(&lv240, lv);
        roll_push(&lv2_240, lv * lv);
        double sgn = c > o ? 1 : (c < o ? -1 : 0);
        roll_push(&sv20, sgn * v);
        roll_push(&av20, v);
        roll_push(&sv60, sgn * v);
        roll_push(&av60, v);
        dq_push(&hh14, (int64_t)t, h);
        dq_push(&ll14, (int64_t)t, l);
        dq_push(&hh60, (int64_t)t, h);
        dq_push(&ll60, (int64_t)t, l);
        dq_push(&hh240, (int64_t)t, h);
        dq_push(&ll240, (int64_t)t, l);
        /* New York clock: session VWAP, same-minute volume, time features */
        int64_t utc_s =
            s->ts[t] >= 0 ? s->ts[t] / 1000000000 : -((-s->ts[t] + 999999999) / 1000000000);
        int64_t loc = utc_s + vx_eastern_offset_s(utc_s);
        int64_t lday = loc >= 0 ? loc / 86400 : -((-loc + 86399) / 86400);
        int minute = (int)((loc - lday * 86400) / 60);
        int64_t trade_day = (loc + 6 * 3600) >= 0 ? (loc + 6 * 3600) / 86400
                                                  : -((-(loc + 6 * 3600) + 86399) / 86400);
        if (trade_day != session_day) session_day = trade_day, vwap_pv = vwap_v = 0;
        vwap_pv += tp * v;
        vwap_v += v;
        double slot_prev = slot[minute];
        slot[minute] = slot_prev < 0 ? v : 0.8 * slot_prev + 0.2 * v;

        if ((t & 0xFFFF) == 0 && t) vx_progress_report("features", "bars", t, n);
        if (t < VX_FEATURE_WARMUP) continue;
        float *f = out->x + (t - VX_FEATURE_WARMUP) * VX_MARKET_FEATURES;
        double sig = fmax(sqrt(ewma_r2), 1e-5);
        for (int k = 0; k < 10; k++) {
            int hz = horizons[k];
            f[k] = clipf(log(c / s->close[t - (size_t)hz]) / (sig * sqrt((double)hz)));
        }
        double atr_f = fmax(atr, 1e-9 * c);
        double sig_long = fmax(sqrt(roll_mean(&r2_240)), 1e-6);
        f[10] = clipf(log(fmax(sqrt(roll_mean(&r2_20)), 1e-7) / sig_long));
        f[11] = clipf(log(fmax(sqrt(roll_mean(&pk20)), 1e-7) / sig_long));
        f[12] = clipf(log(fmax(sqrt(fmax(roll_mean(&gk20), 0)), 1e-7) / sig_long));
        f[13] = clipf(log((atr_f / c) / sig_long));
        f[14] = clipf((c - o) / atr_f);
        f[15] = clipf((h - fmax(o, c)) / atr_f);
        f[16] = clipf((fmin(o, c) - l) / atr_f);
        f[17] = clipf((h - l) / atr_f - 1);
        double rs_den = rsi_gain + rsi_loss;
        f[18] = clipf(rs_den > 0 ? (100 * rsi_gain / rs_den - 50) / 50 : 0);
        f[19] = clipf(macd / atr_f);
        f[20] = clipf((macd - sig9) / atr_f);
        double hh = dq_top(&hh14), ll = dq_top(&ll14);
        f[21] = clipf(hh > ll ? 2 * (c - ll) / (hh - ll) - 1 : 0);
        double tpm = roll_mean(&tp20), md = 0;
        for (int k = 0; k < 20; k++) md += fabs(tp_hist[k] - tpm);
        md /= 20;
        f[22] = clipf(md > 0 ? (tp - tpm) / (0.015 * md) / 100 : 0);
        f[23] = clipf(adx / 50 - 1);
        f[24] = clipf((pdi - mdi) / 100);
        double sma20 = roll_mean(&c20);
        double sd20 = sqrt(fmax(roll_mean(&c2_20) - sma20 * sma20, 0));
        f[25] = clipf(sd20 > 1e-9 * c ? (c - sma20) / (2 * sd20) : 0);
        f[26] = clipf(log(fmax(sd20, 1e-9 * c) / atr_f));
        f[27] = clipf((c - sma20) / atr_f);
        f[28] = clipf((c - roll_mean(&c60)) / atr_f);
        f[29] = clipf((c - roll_mean(&c240)) / atr_f);
        f[30] = clipf(vwap_v > 0 ? (c - vwap_pv / vwap_v) / atr_f : 0);
        hh = dq_top(&hh60), ll = dq_top(&ll60);
        f[31] = clipf(hh > ll ? 2 * (c - ll) / (hh - ll) - 1 : 0);
        hh = dq_top(&hh240), ll = dq_top(&ll240);
        f[32] = clipf(hh > ll ? 2 * (c - ll) / (hh - ll) - 1 : 0);
        double vm = roll_mean(&v20), vsd = sqrt(fmax(roll_mean(&v2_20) - vm * vm, 0));
        f[33] = clipf(vsd > 1e-9 ? (v - vm) / vsd : 0);
        double lm = roll_mean(&lv240), lsd = sqrt(fmax(roll_mean(&lv2_240) - lm * lm, 0));
        f[34] = clipf(lsd > 1e-9 ? (lv - lm) / lsd : 0);
        f[35] = clipf(slot_prev < 0 ? 0 : log((1 + v) / (1 + slot_prev)));
        f[36] = clipf(safe_div(sv20.sum, av20.sum));
        f[37] = clipf(safe_div(sv60.sum, av60.sum));
        const double two_pi = 6.283185307179586;
        f[38] = clipf(sin(two_pi * minute / 1440.0));
        f[39] = clipf(cos(two_pi * minute / 1440.0));
        int wd = (int)(((lday % 7) + 7 + 4) % 7);
        f[40] = clipf(sin(two_pi * wd / 7.0));
        f[41] = clipf(cos(two_pi * wd / 7.0));
        int in_rth = minute >= VX_RTH_OPEN_MIN && minute < VX_RTH_CLOSE_MIN;
        f[42] = in_rth ? 1.0f : -1.0f;
        f[43] = clipf(in_rth ? (double)(VX_RTH_CLOSE_MIN - minute) / 390.0 : 0);
        f[44] = clipf((ema20 - ema20_hist[(t + 1) % 6]) / atr_f);
    }
    if (!st) vx_progress_report("features", "bars", n, n);
done:
    for (size_t i = 0; i < sizeof rolls / sizeof *rolls; i++) free(rolls[i]->buf);
    for (int i = 0; i < NDQ; i++) free(dqs[i]->idx), free(dqs[i]->val);
    free(ema20_hist);
    free(slot);
    if (st) vx_features_free(out);
    return st;
}

void vx_features_free(vx_features *f)
{
    free(f->x);
    memset(f, 0, sizeof *f);
}

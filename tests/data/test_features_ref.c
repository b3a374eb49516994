/* test_features_ref.c — all 45 market features against a plain float64 reference written here,
 * and a few values worked out by hand.
 *
 * The reference follows docs/features.md, not src/data/features.c. The library makes one forward
 * pass with running state (ring-buffer sums, monotonic deques, recursive EMAs). The reference
 * recomputes each bar from scratch: it loops over the window for every mean, deviation, high and
 * low, and writes every EMA or Wilder average as its explicit weighted sum over all earlier bars.
 * A wrong window, a flipped sign or an inverted oscillator therefore shows up as a mismatch on
 * some row. Because the reference could share a misunderstanding with the library, three short
 * series with a known shape (a geometric ramp, an arithmetic ramp with wicks, and closes that
 * alternate up and down) are also checked against numbers derived on paper in the comments. */
#define _XOPEN_SOURCE 700
#include "helpers.h"
#include "data_tests.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { F = VX_MARKET_FEATURES };

/* ---- window helpers: plain loops over bars t − w + 1 .. t ----------------------------------- */

static double win_mean(const double *x, size_t t, int w)
{
    double s = 0;
    for (size_t k = t + 1 - (size_t)w; k <= t; k++) s += x[k];
    return s / w;
}

/* Population standard deviation, two passes (mean first, then squared deviations). */
static double win_sd(const double *x, size_t t, int w)
{
    double m = win_mean(x, t, w), s = 0;
    for (size_t k = t + 1 - (size_t)w; k <= t; k++) s += (x[k] - m) * (x[k] - m);
    return sqrt(s / w);
}

static double win_max(const double *x, size_t t, int w)
{
    double m = x[t];
    for (size_t k = t + 1 - (size_t)w; k <= t; k++) m = fmax(m, x[k]);
    return m;
}

static double win_min(const double *x, size_t t, int w)
{
    double m = x[t];
    for (size_t k = t + 1 - (size_t)w; k <= t; k++) m = fmin(m, x[k]);
    return m;
}

/* An exponential average at bar t written out as its weighted sum rather than the recursion
 * y ← y + α (x − y):
 *   y_t = (1 − α)^(t+1) · prior + Σ_{k=0..t} α (1 − α)^(t−k) · x_k
 * where `prior` is the value before bar 0. prior = x_0 gives y_0 = x_0 (an average seeded with its
 * first value); prior = 0 is an average that starts empty. Wilder smoothing is α = 1/14. */
static double ema_at(const double *x, size_t t, double alpha, double prior)
{
    double sum = 0, decay = 1; /* decay = (1 − α)^(t − k) */
    for (size_t k = t + 1; k-- > 0;) {
        sum += alpha * decay * x[k];
        decay *= 1 - alpha;
    }
    return sum + decay * prior;
}

/* ---- New York time, from the C library's calendar ------------------------------------------- */

/* New York is UTC−4 from the second Sunday of March 02:00 EST (07:00 UTC) to the first Sunday of
 * November 02:00 EDT (06:00 UTC), else UTC−5. The weekday of March 1 and November 1 follows from
 * gmtime's weekday and day of the year. Gives the minute of the New York day, the New York weekday
 * (Sunday = 0) and the trading day, a number that changes at 18:00 New York time (the session
 * that starts at 18:00 belongs to the next date). */
static void ny_clock(int64_t ts_ns, int *minute, int *wday, int64_t *trade_day)
{
    time_t u =
        (time_t)(ts_ns / 1000000000); /* the test's timestamps are whole seconds after 1970 */
    struct tm g;
    gmtime_r(&u, &g);
    int y = g.tm_year + 1900;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    int mar1 = 59 + leap, nov1 = 304 + leap; /* day of the year, from 0 */
    int wd_mar1 = ((g.tm_wday - (g.tm_yday - mar1)) % 7 + 7) % 7;
    int wd_nov1 = ((g.tm_wday - (g.tm_yday - nov1)) % 7 + 7) % 7;
    long dst_on = (mar1 + (7 - wd_mar1) % 7 + 7) * 86400L + 7 * 3600;
    long dst_off = (nov1 + (7 - wd_nov1) % 7) * 86400L + 6 * 3600;
    long now = g.tm_yday * 86400L + g.tm_hour * 3600L + g.tm_min * 60L + g.tm_sec;
    time_t loc = u - (now >= dst_on && now < dst_off ? 4 : 5) * 3600;
    struct tm l, d;
    gmtime_r(&loc, &l);
    *minute = l.tm_hour * 60 + l.tm_min;
    *wday = l.tm_wday;
    time_t session = loc + 6 * 3600;
    gmtime_r(&session, &d);
    *trade_day = (d.tm_year + 1900) * 1000LL + d.tm_yday;
}

/* ---- the reference --------------------------------------------------------------------------- */

/* Per-bar inputs, and every exponential average evaluated at every bar by ema_at (O(n²) work,
 * nothing for 690 bars). */
typedef struct {
    const vx_series *s;
    size_t n;
    double *mem;
    double *cp;        /* previous close; the first bar's is its open */
    double *r, *r2;    /* r = ln(C / C₋₁) */
    double *tr;        /* true range max(H − L, |H − C₋₁|, |L − C₋₁|) */
    double *up, *dn;   /* the close's rise and fall, for RSI */
    double *pdm, *mdm; /* +DM, −DM: the larger of the high's rise and low's fall, if > 0 */
    double *tp;        /* typical price (H + L + C) / 3 */
    double *lv;        /* ln(1 + V) */
    double *sgnv;      /* sign(C − O) · V */
    double *sig2;      /* EWMA of r², decay 0.97 */
    double *atr;       /* Wilder average of the true range, seeded with the first */
    double *ema12, *ema26, *macd, *sig9, *ema20;
    double *gain, *loss; /* Wilder averages of up and dn, starting empty */
    double *pdi, *mdi, *dx, *adx;
    int *minute, *wday;
    int64_t *trade_day;
} ref;

enum { REF_ARRAYS = 24 };

static void ref_prepare(ref *R, const vx_series *s)
{
    size_t n = s->n;
    memset(R, 0, sizeof *R);
    R->s = s, R->n = n;
    R->mem = calloc(REF_ARRAYS * n, sizeof(double));
    assert_non_null(R->mem);
    double **arrays[REF_ARRAYS] = {&R->cp,   &R->r,     &R->r2,    &R->tr,   &R->up,   &R->dn,
                                   &R->pdm,  &R->mdm,   &R->tp,    &R->lv,   &R->sgnv, &R->sig2,
                                   &R->atr,  &R->ema12, &R->ema26, &R->macd, &R->sig9, &R->ema20,
                                   &R->gain, &R->loss,  &R->pdi,   &R->mdi,  &R->dx,   &R->adx};
    for (int i = 0; i < REF_ARRAYS; i++) *arrays[i] = R->mem + (size_t)i * n;
    R->minute = calloc(n, sizeof(int));
    R->wday = calloc(n, sizeof(int));
    R->trade_day = calloc(n, sizeof(int64_t));
    assert_true(R->minute && R->wday && R->trade_day);

    const double *o = s->open, *h = s->high, *l = s->low, *c = s->close, *v = s->volume;
    for (size_t t = 0; t < n; t++) {
        R->cp[t] = t ? c[t - 1] : o[t];
        R->r[t] = log(c[t] / R->cp[t]);
        R->r2[t] = R->r[t] * R->r[t];
        R->tr[t] = fmax(h[t] - l[t], fmax(fabs(h[t] - R->cp[t]), fabs(l[t] - R->cp[t])));
        R->up[t] = fmax(c[t] - R->cp[t], 0);
        R->dn[t] = fmax(R->cp[t] - c[t], 0);
        double rise = t ? h[t] - h[t - 1] : 0, fall = t ? l[t - 1] - l[t] : 0;
        R->pdm[t] = rise > fall && rise > 0 ? rise : 0;
        R->mdm[t] = fall > rise && fall > 0 ? fall : 0;
        R->tp[t] = (h[t] + l[t] + c[t]) / 3;
        R->lv[t] = log(1 + v[t]);
        R->sgnv[t] = (c[t] > o[t] ? 1 : c[t] < o[t] ? -1 : 0) * v[t];
        ny_clock(s->ts[t], &R->minute[t], &R->wday[t], &R->trade_day[t]);
    }
    for (size_t t = 0; t < n; t++) {
        /* σ²'s average is seeded, before bar 0, with r₀² + 1e-8 (the 1e-8 keeps σ > 0 on a flat
         * start); after 240 bars the seed weighs 0.97^241 ≈ 6.5e-4 */
        R->sig2[t] = ema_at(R->r2, t, 0.03, R->r2[0] + 1e-8);
        R->atr[t] = ema_at(R->tr, t, 1.0 / 14, R->tr[0]);
        R->ema12[t] = ema_at(c, t, 2.0 / 13, c[0]);
        R->ema26[t] = ema_at(c, t, 2.0 / 27, c[0]);
        R->macd[t] = R->ema12[t] - R->ema26[t];
        R->ema20[t] = ema_at(c, t, 2.0 / 21, c[0]);
        R->gain[t] = ema_at(R->up, t, 1.0 / 14, 0);
        R->loss[t] = ema_at(R->dn, t, 1.0 / 14, 0);
        /* Wilder's directional indicators: ±DI = 100 · avg(±DM) / avg(TR), every average Wilder's
         * and starting empty; DX = 100 |+DI − −DI| / (+DI + −DI); ADX = Wilder average of DX */
        double trw = ema_at(R->tr, t, 1.0 / 14, 0);
        R->pdi[t] = trw > 0 ? 100 * ema_at(R->pdm, t, 1.0 / 14, 0) / trw : 0;
        R->mdi[t] = trw > 0 ? 100 * ema_at(R->mdm, t, 1.0 / 14, 0) / trw : 0;
        double di_sum = R->pdi[t] + R->mdi[t];
        R->dx[t] = di_sum > 0 ? 100 * fabs(R->pdi[t] - R->mdi[t]) / di_sum : 0;
    }
    for (size_t t = 0; t < n; t++) {
        R->sig9[t] = ema_at(R->macd, t, 0.2, R->macd[0]); /* EMA₉: α = 2/(9 + 1) */
        R->adx[t] = ema_at(R->dx, t, 1.0 / 14, 0);
    }
}

static void ref_free(ref *R)
{
    free(R->mem);
    free(R->minute);
    free(R->wday);
    free(R->trade_day);
}

/* ATR floored at 1e-9 · C, the divisor of every price distance. */
static double ref_atr(const ref *R, size_t t) { return fmax(R->atr[t], 1e-9 * R->s->close[t]); }

/* 0–9 ret_h = ln(C / C₋ₕ) / (σ √h), σ = max(sqrt(EWMA r²), 1e-5). */
static void ref_returns(const ref *R, size_t t, double *f)
{
    static const int hz[10] = {1, 2, 3, 5, 10, 15, 30, 60, 120, 240};
    const double *c = R->s->close;
    double sig = fmax(sqrt(R->sig2[t]), 1e-5);
    for (int k = 0; k < 10; k++) f[k] = log(c[t] / c[t - (size_t)hz[k]]) / (sig * sqrt(hz[k]));
}

/* 10–13: 20-bar volatility estimates against the 240-bar one, σ_L = sqrt(mean r² over 240).
 * Parkinson uses the range, (ln H/L)² / (4 ln 2); Garman–Klass adds the body,
 * ½ (ln H/L)² − (2 ln 2 − 1)(ln C/O)². The floors (1e-6, 1e-7) only keep the logs finite. */
static void ref_volatility(const ref *R, size_t t, double *f)
{
    const vx_series *s = R->s;
    double sig_l = fmax(sqrt(win_mean(R->r2, t, 240)), 1e-6);
    double pk = 0, gk = 0;
    for (size_t k = t - 19; k <= t; k++) {
        double hl = log(s->high[k] / s->low[k]), co = log(s->close[k] / s->open[k]);
        pk += hl * hl / (4 * log(2.0));
        gk += 0.5 * hl * hl - (2 * log(2.0) - 1) * co * co;
    }
    pk /= 20, gk /= 20;
    f[10] = log(fmax(sqrt(win_mean(R->r2, t, 20)), 1e-7) / sig_l);
    f[11] = log(fmax(sqrt(pk), 1e-7) / sig_l);
    f[12] = log(fmax(sqrt(fmax(gk, 0)), 1e-7) / sig_l);
    f[13] = log(ref_atr(R, t) / s->close[t] / sig_l);
}

/* 14–17: the bar's shape in ATRs. */
static void ref_candle(const ref *R, size_t t, double *f)
{
    const vx_series *s = R->s;
    double o = s->open[t], h = s->high[t], l = s->low[t], c = s->close[t], atr = ref_atr(R, t);
    f[14] = (c - o) / atr;
    f[15] = (h - fmax(o, c)) / atr;
    f[16] = (fmin(o, c) - l) / atr;
    f[17] = (h - l) / atr - 1;
}

/* Position of x in [lo, hi] mapped to [−1, 1]; 0 for an empty range. */
static double range_pos(double x, double lo, double hi)
{
    return hi > lo ? 2 * (x - lo) / (hi - lo) - 1 : 0;
}

/* 18–24: oscillators. RSI = 100 · gain / (gain + loss) with Wilder averages, as (RSI − 50)/50;
 * MACD = EMA₁₂ − EMA₂₆ and its distance from its EMA₉, in ATRs; stochastic over 14 bars;
 * CCI = (TP − SMA₂₀ TP) / (0.015 · mean |TP − SMA₂₀ TP|), divided by 100; ADX/50 − 1; DI spread. */
static void ref_oscillators(const ref *R, size_t t, double *f)
{
    const vx_series *s = R->s;
    double atr = ref_atr(R, t), c = s->close[t];
    double gl = R->gain[t] + R->loss[t];
    f[18] = gl > 0 ? (100 * R->gain[t] / gl - 50) / 50 : 0;
    f[19] = R->macd[t] / atr;
    f[20] = (R->macd[t] - R->sig9[t]) / atr;
    f[21] = range_pos(c, win_min(s->low, t, 14), win_max(s->high, t, 14));
    double tpm = win_mean(R->tp, t, 20), md = 0;
    for (size_t k = t - 19; k <= t; k++) md += fabs(R->tp[k] - tpm);
    md /= 20;
    f[22] = md > 0 ? (R->tp[t] - tpm) / (0.015 * md) / 100 : 0;
    f[23] = R->adx[t] / 50 - 1;
    f[24] = (R->pdi[t] - R->mdi[t]) / 100;
}

/* 25–32 and 44: the close against averages, bands, the session VWAP and recent ranges, in ATRs
 * (Bollinger's %b in band half-widths); the EMA₂₀'s change over 5 bars. */
static void ref_trend(const ref *R, size_t t, double *f)
{
    const vx_series *s = R->s;
    double atr = ref_atr(R, t), c = s->close[t];
    double sma20 = win_mean(s->close, t, 20), sd20 = win_sd(s->close, t, 20);
    f[25] = sd20 > 1e-9 * c ? (c - sma20) / (2 * sd20) : 0;
    f[26] = log(fmax(sd20, 1e-9 * c) / atr);
    f[27] = (c - sma20) / atr;
    f[28] = (c - win_mean(s->close, t, 60)) / atr;
    f[29] = (c - win_mean(s->close, t, 240)) / atr;
    /* VWAP = Σ TP·V / Σ V over the bars of this trading day up to t */
    double pv = 0, vol = 0;
    for (size_t k = t + 1; k-- > 0 && R->trade_day[k] == R->trade_day[t];) {
        pv += R->tp[k] * s->volume[k];
        vol += s->volume[k];
    }
    f[30] = vol > 0 ? (c - pv / vol) / atr : 0;
    f[31] = range_pos(c, win_min(s->low, t, 60), win_max(s->high, t, 60));
    f[32] = range_pos(c, win_min(s->low, t, 240), win_max(s->high, t, 240));
    f[44] = (R->ema20[t] - R->ema20[t - 5]) / atr;
}

/* 33–37: volume z-scores (population sd), volume against this minute's volume on earlier days
 * (S ← V the first time, then S ← 0.8 S + 0.2 V), and signed volume over total volume. */
static void ref_volume(const ref *R, size_t t, double *f)
{
    const double *v = R->s->volume;
    double m = win_mean(v, t, 20), sd = win_sd(v, t, 20);
    f[33] = sd > 1e-9 ? (v[t] - m) / sd : 0;
    double lm = win_mean(R->lv, t, 240), lsd = win_sd(R->lv, t, 240);
    f[34] = lsd > 1e-9 ? (R->lv[t] - lm) / lsd : 0;
    double slot = -1;
    for (size_t k = 0; k < t; k++)
        if (R->minute[k] == R->minute[t]) slot = slot < 0 ? v[k] : 0.8 * slot + 0.2 * v[k];
    f[35] = slot < 0 ? 0 : log((1 + v[t]) / (1 + slot));
    double sv = 0, av = 0;
    for (size_t k = t - 19; k <= t; k++) sv += R->sgnv[k], av += v[k];
    f[36] = sv / av;
    sv = av = 0;
    for (size_t k = t - 59; k <= t; k++) sv += R->sgnv[k], av += v[k];
    f[37] = sv / av;
}

/* 38–43: the New York clock; regular hours are 09:30–16:00 (minutes 570–960). */
static void ref_clock(const ref *R, size_t t, double *f)
{
    const double two_pi = 2 * acos(-1.0);
    int m = R->minute[t];
    f[38] = sin(two_pi * m / 1440);
    f[39] = cos(two_pi * m / 1440);
    f[40] = sin(two_pi * R->wday[t] / 7);
    f[41] = cos(two_pi * R->wday[t] / 7);
    int rth = m >= 570 && m < 960;
    f[42] = rth ? 1 : -1;
    f[43] = rth ? (960 - m) / 390.0 : 0;
}

/* Every feature is clipped to [−5, 5]; a non-finite value becomes 0. */
static double clip5(double x) { return !isfinite(x) ? 0 : x > 5 ? 5 : x < -5 ? -5 : x; }

static void ref_row(const ref *R, size_t t, double f[F])
{
    ref_returns(R, t, f);
    ref_volatility(R, t, f);
    ref_candle(R, t, f);
    ref_oscillators(R, t, f);
    ref_trend(R, t, f);
    ref_volume(R, t, f);
    ref_clock(R, t, f);
    for (int k = 0; k < F; k++) f[k] = clip5(f[k]);
}

/* ---- a small realistic series ------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *x) /* splitmix64 */
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_normal(uint64_t *x) /* Box–Muller */
{
    double u1 = ((double)(rng_next(x) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = ((double)(rng_next(x) >> 11) + 0.5) / 9007199254740992.0;
    return sqrt(-2 * log(u1)) * cos(2 * acos(-1.0) * u2);
}

static double on_tick(double p) { return 0.25 * floor(p / 0.25 + 0.5); }

/* 690 one-minute bars in three blocks, New York time:
 *   Thu 2024-03-07 15:00–18:29 EST (210 bars: warm-up)
 *   Fri 2024-03-08 14:00–18:29 EST (270 bars; rows start at bar 240, 14:30)
 *   Mon 2024-03-11 15:30–18:59 EDT (210 bars; clocks went forward on Sunday 03-10)
 * Each block crosses the 16:00 close of regular hours and the 18:00 start of the next session
 * (VWAP reset); minutes 14:30–14:59 on Friday and 18:30–18:59 on Monday are seen for the first
 * time, the rest once or twice before. Log price: ln 4000 + a trend of 1e-5 a bar + a 97-bar sine
 * of amplitude 0.2 % + a seeded random walk (4e-4 a bar, 3e-3 gaps between blocks); prices on a
 * 0.25 tick, so ties (C = O, equal highs) occur as in real data. Volumes: a U over the block times
 * a log-normal factor, and a spike every 37 bars. */
static void make_series(vx_series *s)
{
    static const struct {
        int64_t start_utc_s;
        int bars;
    } blocks[3] = {
        {19789LL * 86400 + 20 * 3600, 210},        /* 2024-03-07 20:00 UTC */
        {19790LL * 86400 + 19 * 3600, 270},        /* 2024-03-08 19:00 UTC */
        {19793LL * 86400 + 19 * 3600 + 1800, 210}, /* 2024-03-11 19:30 UTC */
    };
    uint64_t seed = 20240307;
    vx_err e;
    memset(s, 0, sizeof *s);
    assert_int_equal(vx_series_reserve(s, 690, &e), VX_OK);
    double walk = 0, prev = 0;
    size_t t = 0;
    for (int b = 0; b < 3; b++) {
        if (b) walk += 3e-3 * rng_normal(&seed);
        for (int m = 0; m < blocks[b].bars; m++, t++) {
            double level = log(4000.0) + 1e-5 * (double)t + 2e-3 * sin(2 * acos(-1.0) * t / 97.0);
            double o = m == 0 ? on_tick(exp(level + walk)) : prev;
            walk += 4e-4 * rng_normal(&seed);
            double c = on_tick(exp(level + walk));
            double h = fmax(o, c) + 0.25 * floor(2.5 * fabs(rng_normal(&seed)));
            double l = fmin(o, c) - 0.25 * floor(2.5 * fabs(rng_normal(&seed)));
            double x = (m - blocks[b].bars / 2.0) / (blocks[b].bars / 2.0);
            double v = floor(1200 * (0.6 + x * x) * exp(0.4 * rng_normal(&seed))) + 1;
            if (t % 37 == 0) v *= 5;
            int64_t ts = (blocks[b].start_utc_s + 60LL * m) * 1000000000LL;
            assert_int_equal(vx_series_push(s, ts, o, h, l, c, v, &e), VX_OK);
            prev = c;
        }
    }
}

/* ---- the comparison ----------------------------------------------------------------------- */

/* Tolerance: |library − reference| ≤ 2e-6 + 2e-6 · |reference|.
 * The library's float32 output is within 2^-24 ≈ 6e-8 relative of its double value. Its double
 * arithmetic differs from the reference's in rounding only: sums kept by adding the newest value
 * and subtracting the oldest, variances as mean(x²) − mean(x)² (with C ≈ 4000 that cancels about
 * seven of C²'s digits, leaving ~1e-9 relative on SD₂₀), recursive EMAs against explicit sums.
 * Measured on this series, the worst difference of every feature is 6e-8 relative, the float32
 * rounding alone. 2e-6 leaves 30× room for another compiler or libm, and flags any change of
 * definition: every feature reaches |x| > 0.05 on some row (checked below), so a sign flip moves it
 * by > 0.1; a window one bar off or an average with another constant moves values by 1e-3 or
 * more; even dropping the 1e-8 from σ's seed (4e-5 relative on σ² at bar 240) would fail. */
#define REF_ATOL 2e-6
#define REF_RTOL 2e-6

static void test_features_match_reference(void **state)
{
    (void)state;
    vx_series s;
    make_series(&s);
    vx_features f;
    vx_err e;
    assert_int_equal(vx_features_compute(&s, &f, &e), VX_OK);
    assert_int_equal(f.rows, s.n - VX_FEATURE_WARMUP);
    ref R;
    ref_prepare(&R, &s);
    double peak[F] = {0};
    int bad = 0, bad_feature[F] = {0};
    for (size_t row = 0; row < f.rows; row++) {
        size_t t = VX_FEATURE_WARMUP + row;
        double want[F];
        ref_row(&R, t, want);
        const float *got = f.x + row * F;
        for (int k = 0; k < F; k++) {
            peak[k] = fmax(peak[k], fabs(want[k]));
            double d = fabs(got[k] - want[k]);
            if (!(d <= REF_ATOL + REF_RTOL * fabs(want[k]))) {
                if (!bad_feature[k]++)
                    print_message("feature %d (%s), row %zu (bar %zu): library %.7g, reference "
                                  "%.7g, |difference| %.3g\n",
                                  k, vx_feature_name(k), row, t, (double)got[k], want[k], d);
                bad++;
            }
        }
    }
    for (int k = 0; k < F; k++)
        if (!(peak[k] > 0.05))
            fail_msg("feature %d (%s) stays within ±%.3g on the test series: a sign flip of it "
                     "would pass unseen",
                     k, vx_feature_name(k), peak[k]);
    if (bad) fail_msg("%d values differ from the float64 reference beyond tolerance", bad);
    ref_free(&R);
    vx_features_free(&f);
    vx_series_free(&s);
}

/* The reference's clock against a few instants worked out by hand, so that both cannot share a
 * wrong time-zone rule. */
static void test_reference_clock(void **state)
{
    (void)state;
    int minute, wday;
    int64_t day, day2;
    /* 2024-03-08 23:00 UTC is Friday 18:00 EST: the session of Monday 03-11 begins (the trading
     * day is the date six hours later, Saturday) */
    ny_clock((19790LL * 86400 + 23 * 3600) * 1000000000LL, &minute, &wday, &day);
    assert_int_equal(minute, 18 * 60);
    assert_int_equal(wday, 5);
    ny_clock((19790LL * 86400 + 22 * 3600 + 59 * 60) * 1000000000LL, &minute, &wday, &day2);
    assert_int_equal(minute, 17 * 60 + 59);
    assert_true(day2 != day);
    /* 2024-03-10 06:59 UTC is 01:59 EST, 07:00 UTC is 03:00 EDT (Sunday) */
    ny_clock((19792LL * 86400 + 6 * 3600 + 59 * 60) * 1000000000LL, &minute, &wday, &day);
    assert_int_equal(minute, 60 + 59);
    assert_int_equal(wday, 0);
    ny_clock((19792LL * 86400 + 7 * 3600) * 1000000000LL, &minute, &wday, &day);
    assert_int_equal(minute, 3 * 60);
    /* 2024-11-03 05:59 UTC is 01:59 EDT, 06:00 UTC is 01:00 EST */
    ny_clock((20030LL * 86400 + 5 * 3600 + 59 * 60) * 1000000000LL, &minute, &wday, &day);
    assert_int_equal(minute, 60 + 59);
    ny_clock((20030LL * 86400 + 6 * 3600) * 1000000000LL, &minute, &wday, &day);
    assert_int_equal(minute, 60);
    assert_int_equal(wday, 0);
}

/* ---- values worked out by hand -------------------------------------------------------------- */

/* Hand values hold once the start-up transients have died out: the slowest is σ's EWMA, whose
 * seed weighs 0.97^300 ≈ 1e-4 of 1e-8 against r² ≈ 1e-6 (1e-6 relative); the others decay as
 * (13/14)^t or faster. 1e-5 covers that and float32 rounding. */
#define HAND_TOL 1e-5

static void expect(const vx_features *f, size_t bar, int k, double want, const char *why)
{
    double got = f->x[(bar - f->first_bar) * F + (size_t)k];
    if (!(fabs(got - want) <= HAND_TOL))
        fail_msg("bar %zu, feature %d (%s) = %.7g, want %.7g: %s", bar, k, vx_feature_name(k), got,
                 want, why);
}

/* Bars 1 minute apart from Monday 2024-03-11 11:00 EDT (15:00 UTC). */
static void push_bar(vx_series *s, size_t t, double o, double h, double l, double c, double v)
{
    vx_err e;
    int64_t ts = (19793LL * 86400 + 15 * 3600 + 60 * (int64_t)t) * 1000000000LL;
    assert_int_equal(vx_series_push(s, ts, o, h, l, c, v, &e), VX_OK);
}

/* C_t = 1000 g^t with g = 1.001, O = C₋₁, H = C, L = O (no wicks), constant volume.
 * Every r = ln g, so σ = σ_L = ln g and ret_h = h ln g / (ln g √h) = √h, clipped at 5 from
 * h = 30 (√30 ≈ 5.48). With ln(H/L) = ln(C/O) = ln g: Parkinson = ln(1 / (2 √ln 2)) ≈ −0.509891;
 * Garman–Klass = ½ ln(½ − (2 ln 2 − 1)) = ½ ln(1.5 − 2 ln 2) ≈ −1.087071. TR_t = C_t − C₋₁ =
 * C_t (1 − 1/g) grows geometrically, so its Wilder average is α TR_t / (1 − (1 − α)/g) and
 * ATR/C = (g − 1) / (1 + 14 (g − 1)) = 0.001/1.014: atr_14 = ln(0.001/1.014 / ln g) ≈ −0.013403,
 * body = (C − O)/ATR = 1.014/1.001 ≈ 1.012987, range = body − 1. Every bar rises: RSI = 100
 * (+1), the close is the high of every window (stochastic and range positions +1), all volume is
 * buying (imbalance +1); +DM = TR every bar, so +DI = 100, −DI = 0, DX = ADX = 100 (+1, +1). */
static void test_features_by_hand_geometric_ramp(void **state)
{
    (void)state;
    const double g = 1.001;
    vx_series s = {0};
    for (size_t t = 0; t < 300; t++) {
        double c = 1000 * pow(g, (double)t), o = 1000 * pow(g, (double)t - 1);
        push_bar(&s, t, o, c, o, c, 1000);
    }
    vx_features f;
    vx_err e;
    assert_int_equal(vx_features_compute(&s, &f, &e), VX_OK);
    size_t t = 299;
    static const int hz[10] = {1, 2, 3, 5, 10, 15, 30, 60, 120, 240};
    for (int k = 0; k < 10; k++) expect(&f, t, k, fmin(sqrt(hz[k]), 5), "ret_h = √h, clipped");
    expect(&f, t, 10, 0, "rv_20: constant r, short and long volatility equal");
    expect(&f, t, 11, -0.5098907, "parkinson_20 = ln(1 / (2 √ln 2))");
    expect(&f, t, 12, -1.0870711, "garman_klass_20 = ½ ln(1.5 − 2 ln 2)");
    expect(&f, t, 13, -0.0134031, "atr_14 = ln((g − 1) / (1 + 14 (g − 1)) / ln g)");
    expect(&f, t, 14, 1.0129870, "body = (1 + 14 (g − 1)) / g");
    expect(&f, t, 15, 0, "upper_wick: H = C");
    expect(&f, t, 16, 0, "lower_wick: L = O");
    expect(&f, t, 17, 0.0129870, "range = body − 1");
    expect(&f, t, 18, 1, "rsi_14: a pure up-trend has RSI 100");
    expect(&f, t, 21, 1, "stoch_14: close at the 14-bar high");
    expect(&f, t, 23, 1, "adx_14: ADX 100");
    expect(&f, t, 24, 1, "di_diff_14: +DI 100, −DI 0");
    expect(&f, t, 31, 1, "range_pos_60: close at the 60-bar high");
    expect(&f, t, 32, 1, "range_pos_240: close at the 240-bar high");
    expect(&f, t, 33, 0, "volume_z_20: constant volume");
    expect(&f, t, 34, 0, "log_volume_z_240: constant volume");
    expect(&f, t, 36, 1, "imbalance_20: every bar closes up");
    expect(&f, t, 37, 1, "imbalance_60: every bar closes up");
    vx_features_free(&f);
    vx_series_free(&s);
}

/* C_t = 10000 + t (step d = 1), O = C₋₁, H = C + 4.5, L = O − 4.5, constant volume: TR = H − L =
 * 10 every bar (the gaps to C₋₁ are 5.5 and 4.5), so ATR = 10.
 * Candle: body 1/10, wicks 4.5/10, range 10/10 − 1 = 0.
 * An EMA with α = 2/(N + 1) trails a ramp by d (1 − α)/α = d (N − 1)/2: 5.5 for EMA₁₂, 12.5 for
 * EMA₂₆, so MACD = 7 (0.7 in ATRs) and constant, and the histogram is 0; EMA₂₀ climbs 5 in 5 bars
 * (ema_slope 0.5). SMA_N trails by (N − 1)/2: dist_sma 9.5/10, 29.5/10, 119.5/10 → clipped to 5.
 * Over W bars LL = C − W − 4.5 and HH = C + 4.5: position 2 (W + 4.5)/(W + 9) − 1 = W/(W + 9),
 * 14/23, 60/69, 240/249. CCI: TP = C − 1/3 rises by 1, so TP − SMA₂₀ = 9.5 and the mean absolute
 * deviation of 20 steps about their middle is 5: 9.5 / (0.015 · 5) / 100 = 1.266667. Bollinger:
 * SD of 20 consecutive integers sqrt(399/12) ≈ 5.766281, %b = 9.5 / (2 SD) ≈ 0.823754, width =
 * ln(SD/10) ≈ −0.550558. +DM = 1, −DM = 0: +DI = 100 · 1/10, DX = ADX = 100.
 * The clock: bar 240 is Monday 15:00 EDT, minute 900 = 5/8 of the day (tod −√½, −√½), weekday 1,
 * in regular hours with 60 of 390 minutes left. Bar 420 is 18:00: a new session begins, so VWAP =
 * TP and dist_vwap = (C − TP)/10 = 1/30; tod_sin = sin(3π/2) = −1. By bar 439 the session holds
 * 20 bars of equal volume: VWAP = mean TP = C − 1/3 − 9.5, dist_vwap = 9.8333/10. */
static void test_features_by_hand_linear_ramp(void **state)
{
    (void)state;
    vx_series s = {0};
    for (size_t t = 0; t < 440; t++) {
        double c = 10000 + (double)t, o = c - 1;
        push_bar(&s, t, o, c + 4.5, o - 4.5, c, 1000);
    }
    vx_features f;
    vx_err e;
    assert_int_equal(vx_features_compute(&s, &f, &e), VX_OK);
    size_t t = 439;
    expect(&f, t, 14, 0.1, "body = 1/10");
    expect(&f, t, 15, 0.45, "upper_wick = 4.5/10");
    expect(&f, t, 16, 0.45, "lower_wick = 4.5/10");
    expect(&f, t, 17, 0, "range = 10/10 − 1");
    expect(&f, t, 18, 1, "rsi_14: a pure up-trend has RSI 100");
    expect(&f, t, 19, 0.7, "macd = (12.5 − 5.5)/10");
    expect(&f, t, 20, 0, "macd_hist: MACD constant");
    expect(&f, t, 21, 14.0 / 23, "stoch_14 = 14/23");
    expect(&f, t, 22, 9.5 / 0.075 / 100, "cci_20 = 9.5 / (0.015 · 5) / 100");
    expect(&f, t, 23, 1, "adx_14: ADX 100");
    expect(&f, t, 24, 0.1, "di_diff_14: +DI 10, −DI 0");
    expect(&f, t, 25, 0.8237545, "bollinger_b = 9.5 / (2 sqrt(399/12))");
    expect(&f, t, 26, -0.5505577, "bollinger_width = ln(sqrt(399/12) / 10)");
    expect(&f, t, 27, 0.95, "dist_sma_20 = 9.5/10");
    expect(&f, t, 28, 2.95, "dist_sma_60 = 29.5/10");
    expect(&f, t, 29, 5, "dist_sma_240 = 119.5/10, clipped");
    expect(&f, t, 30, (9.5 + 1.0 / 3) / 10, "dist_vwap 20 bars into the session");
    expect(&f, t, 31, 60.0 / 69, "range_pos_60 = 60/69");
    expect(&f, t, 32, 240.0 / 249, "range_pos_240 = 240/249");
    expect(&f, t, 35, 0, "volume_vs_minute: no minute seen before");
    expect(&f, t, 36, 1, "imbalance_20: every bar closes up");
    expect(&f, t, 44, 0.5, "ema_slope_20 = 5/10");
    t = 240;
    expect(&f, t, 38, -sqrt(0.5), "tod_sin at 15:00 EDT");
    expect(&f, t, 39, -sqrt(0.5), "tod_cos at 15:00 EDT");
    expect(&f, t, 40, 0.7818315, "dow_sin, Monday: sin(2π/7)");
    expect(&f, t, 41, 0.6234898, "dow_cos, Monday: cos(2π/7)");
    expect(&f, t, 42, 1, "session: 15:00 is in regular hours");
    expect(&f, t, 43, 60.0 / 390, "session_left: 60 of 390 minutes");
    t = 420;
    expect(&f, t, 30, 1.0 / 30, "dist_vwap at the session's first bar = (C − TP)/10");
    expect(&f, t, 38, -1, "tod_sin at 18:00");
    expect(&f, t, 39, 0, "tod_cos at 18:00");
    expect(&f, t, 42, -1, "session: 18:00 is outside regular hours");
    expect(&f, t, 43, 0, "session_left outside regular hours");
    vx_features_free(&f);
    vx_series_free(&s);
}

/* Closes alternate 1000 (even t, down) and 1001 (odd t, up); O = C₋₁, H = 1001, L = 1000,
 * constant volume. Each value is given after an up bar; after a down bar it changes sign.
 * r = ±ln 1.001, σ = |r|: ret_h = ±1/√h for odd h, 0 for even h (C₋ₕ = C). TR = 1 = ATR:
 * body ±1, no wicks, range 0. RSI: Wilder's average of gains d, 0, d, 0, … settles at d/(2 − α)
 * after an up bar and (1 − α) d/(2 − α) after a down bar, the losses the other way round, so
 * RSI = 100/(2 − α) = 1400/27 after an up bar: (RSI − 50)/50 = +1/27, not 0 as a plain 14-bar
 * average of 7 ups and 7 downs would give. The same algebra gives an EMA with factor α an offset
 * of ±½ α/(2 − α) about the mean: ±1/24 (EMA₁₂), ±1/52 (EMA₂₆), ±1/40 (EMA₂₀), so MACD =
 * ±7/312, the signal (α = 0.2) ±(7/312)/9, the histogram ±(8/9)(7/312), and the EMA₂₀ moves by
 * ±2/40 over 5 bars (odd). Stochastic and range positions ±1. TP = 1000.5 ± 1/6, mean absolute
 * deviation 1/6: CCI = (1/6)/(0.015/6)/100 = ±2/3. SD₂₀ = ½: %b = ±½, width = ln ½; dist_sma
 * ±0.5 for every even window. H and L never move: no directional movement, ADX 0 (−1), DI 0.
 * Equal up and down volume in even windows: imbalance 0. */
static void test_features_by_hand_alternating(void **state)
{
    (void)state;
    vx_series s = {0};
    for (size_t t = 0; t < 300; t++) {
        double c = 1000 + (double)(t & 1), o = 1001 - (double)(t & 1);
        push_bar(&s, t, o, 1001, 1000, c, 1000);
    }
    vx_features f;
    vx_err e;
    assert_int_equal(vx_features_compute(&s, &f, &e), VX_OK);
    for (size_t t = 298; t <= 299; t++) {
        double u = t & 1 ? 1 : -1; /* +1 after an up bar */
        static const int hz[10] = {1, 2, 3, 5, 10, 15, 30, 60, 120, 240};
        for (int k = 0; k < 10; k++)
            expect(&f, t, k, hz[k] % 2 ? u / sqrt(hz[k]) : 0, "ret_h = ±1/√h, 0 for even h");
        expect(&f, t, 10, 0, "rv_20: constant r²");
        expect(&f, t, 14, u, "body = ±1 ATR");
        expect(&f, t, 17, 0, "range = 1/1 − 1");
        expect(&f, t, 18, u / 27, "rsi_14: Wilder RSI of alternating moves is 50 ± 50/27");
        expect(&f, t, 19, u * 7 / 312, "macd = ±(1/24 − 1/52)");
        expect(&f, t, 20, u * 8 / 9 * 7 / 312, "macd_hist = ±(8/9) MACD");
        expect(&f, t, 21, u, "stoch_14 at the high or low");
        expect(&f, t, 22, u * 2 / 3, "cci_20 = ±(1/6) / (0.015/6) / 100");
        expect(&f, t, 23, -1, "adx_14: no directional movement");
        expect(&f, t, 24, 0, "di_diff_14: no directional movement");
        expect(&f, t, 25, u / 2, "bollinger_b = ±½ / (2 · ½)");
        expect(&f, t, 26, log(0.5), "bollinger_width = ln(½ / 1)");
        expect(&f, t, 27, u / 2, "dist_sma_20 = ±0.5");
        expect(&f, t, 28, u / 2, "dist_sma_60 = ±0.5");
        expect(&f, t, 29, u / 2, "dist_sma_240 = ±0.5");
        expect(&f, t, 31, u, "range_pos_60 at the high or low");
        expect(&f, t, 32, u, "range_pos_240 at the high or low");
        expect(&f, t, 36, 0, "imbalance_20: 10 up, 10 down");
        expect(&f, t, 37, 0, "imbalance_60: 30 up, 30 down");
        expect(&f, t, 44, u / 20, "ema_slope_20 = ±2/40");
    }
    vx_features_free(&f);
    vx_series_free(&s);
}

/* A flat market: O = H = L = C = 1000 and constant volume for 300 bars. Every feature goes
 * through its degenerate branch, each worked out here: all returns 0; no range, so TR = ATR = 0
 * and the ATR divisor is its floor 1e-9 · C; r² = 0, so the volatilities sit on their floors,
 * ln(1e-7 / 1e-6) = ln 0.1 for rv, Parkinson and Garman–Klass, and atr_14 = ln(1e-9 / 1e-6) →
 * −5; range = 0/ATR − 1 = −1; no gains or losses (RSI 0), MACD 0; the 14-, 60- and 240-bar
 * ranges are empty (positions 0), CCI's mean deviation is 0 (0), no directional movement (ADX 0:
 * −1, DI 0); SD₂₀ = 0: %b 0, and the width ln(max(SD, 1e-9 C) / ATR) = ln(1e-9 C / 1e-9 C) = 0
 * (with an ATR floor of 1e-9 instead of 1e-9 · C it would be ln 1000 → 5); every distance 0;
 * volume z-scores 0 (SD 0); no minute seen before (0); every bar has C = O: imbalance 0. */
static void test_features_by_hand_flat(void **state)
{
    (void)state;
    vx_series s = {0};
    for (size_t t = 0; t < 300; t++) push_bar(&s, t, 1000, 1000, 1000, 1000, 1000);
    vx_features f;
    vx_err e;
    assert_int_equal(vx_features_compute(&s, &f, &e), VX_OK);
    for (size_t t = 240; t < 300; t += 59) {
        for (int k = 0; k < 10; k++) expect(&f, t, k, 0, "ret_h: no change");
        expect(&f, t, 10, log(0.1), "rv_20 = ln(1e-7 / 1e-6), both floored");
        expect(&f, t, 11, log(0.1), "parkinson_20 = ln(1e-7 / 1e-6), both floored");
        expect(&f, t, 12, log(0.1), "garman_klass_20 = ln(1e-7 / 1e-6), both floored");
        expect(&f, t, 13, -5, "atr_14 = ln(1e-9 / 1e-6), clipped");
        for (int k = 14; k <= 16; k++) expect(&f, t, k, 0, "candle: no body, no wicks");
        expect(&f, t, 17, -1, "range = 0/ATR − 1");
        expect(&f, t, 18, 0, "rsi_14: no gains, no losses");
        expect(&f, t, 19, 0, "macd: every EMA equals C");
        expect(&f, t, 20, 0, "macd_hist: every EMA equals C");
        expect(&f, t, 21, 0, "stoch_14: an empty range is position 0");
        expect(&f, t, 22, 0, "cci_20: no mean deviation");
        expect(&f, t, 23, -1, "adx_14: no directional movement, ADX 0");
        expect(&f, t, 24, 0, "di_diff_14: no directional movement");
        expect(&f, t, 25, 0, "bollinger_b: no band");
        expect(&f, t, 26, 0, "bollinger_width = ln(1e-9 C / (1e-9 C))");
        for (int k = 27; k <= 30; k++) expect(&f, t, k, 0, "distances: C equals every average");
        expect(&f, t, 31, 0, "range_pos_60: an empty range is position 0");
        expect(&f, t, 32, 0, "range_pos_240: an empty range is position 0");
        expect(&f, t, 33, 0, "volume_z_20: constant volume");
        expect(&f, t, 34, 0, "log_volume_z_240: constant volume");
        expect(&f, t, 35, 0, "volume_vs_minute: no minute seen before");
        expect(&f, t, 36, 0, "imbalance_20: C = O, no side");
        expect(&f, t, 37, 0, "imbalance_60: C = O, no side");
        expect(&f, t, 44, 0, "ema_slope_20: EMA constant");
    }
    vx_features_free(&f);
    vx_series_free(&s);
}

/* Timestamps before 1970 are negative: the New York clock must floor them, not truncate toward
 * zero. Bars one minute apart from Wednesday 1969-12-31 04:59:59.5 EST (09:59:59.5 UTC, −50400.5
 * s): bar k is half a second before minute 300 + k of the day, so it lies in minute 299 + k. Bar
 * 270 is 09:29:59.5 — minute 569, before the open (session −1) — and bar 271 is 09:30:59.5,
 * minute 570 (session +1, the whole session left); truncating gives 09:30:00, already open. The
 * weekday is Wednesday (3): the local day number −1 must floor too, or the minute of the day comes
 * out negative. */
static void test_features_clock_before_1970(void **state)
{
    (void)state;
    vx_series s = {0};
    vx_err e;
    for (size_t t = 0; t < 300; t++) {
        int64_t ts = (-86400LL + 10 * 3600 + 60 * (int64_t)t) * 1000000000LL - 500000000LL;
        double c = 1000 + (double)(t % 7);
        assert_int_equal(vx_series_push(&s, ts, c, c + 1, c - 1, c, 1000, &e), VX_OK);
    }
    vx_features f;
    assert_int_equal(vx_features_compute(&s, &f, &e), VX_OK);
    const double two_pi = 2 * acos(-1.0);
    expect(&f, 270, 38, sin(two_pi * 569 / 1440), "tod_sin at 09:29:59.5 EST");
    expect(&f, 270, 39, cos(two_pi * 569 / 1440), "tod_cos at 09:29:59.5 EST");
    expect(&f, 270, 40, sin(two_pi * 3 / 7), "dow_sin, Wednesday");
    expect(&f, 270, 41, cos(two_pi * 3 / 7), "dow_cos, Wednesday");
    expect(&f, 270, 42, -1, "session: 09:29 is before the open");
    expect(&f, 270, 43, 0, "session_left outside regular hours");
    expect(&f, 271, 38, sin(two_pi * 570 / 1440), "tod_sin at 09:30:59.5 EST");
    expect(&f, 271, 42, 1, "session: 09:30 is the open");
    expect(&f, 271, 43, 1, "session_left: the whole session");
    vx_features_free(&f);
    vx_series_free(&s);
}

int run_feature_ref_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_clock),
        cmocka_unit_test(test_features_match_reference),
        cmocka_unit_test(test_features_by_hand_geometric_ramp),
        cmocka_unit_test(test_features_by_hand_linear_ramp),
        cmocka_unit_test(test_features_by_hand_alternating),
        cmocka_unit_test(test_features_by_hand_flat),
        cmocka_unit_test(test_features_clock_before_1970),
    };
    return cmocka_run_group_tests_name("data_features_ref", tests, NULL, NULL);
}

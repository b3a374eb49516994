/* synth.c — the synthetic market: deterministic 1-minute bars with realistic structure and a
 * planted, partly predictable component.
 *
 * Model (documented in docs/data.md):
 *   sessions: weekdays from 2024-01-02, 390 bars from 09:30 New York time;
 *   σ_t = bar_vol · sqrt(h_t) · u(m),   h_t = ω + α h_{t-1} z²_{t-1} + β h_{t-1},  ω = 1 − α − β
 *   u(m) = (1 + U x²) / (1 + U/3),  x = (m − 194.5) / 194.5  (U-shaped over the session)
 *   z_t  = Student-t(ν) scaled to unit variance;   s_t = φ s_{t-1} + sqrt(1 − φ²) η_t
 *   r_t  = μ + k · σ_t · s_{t-1} + σ_t · z_t       (k = signal_strength; k = 0: a random walk;
 *                                                   μ = drift / (252 · 390), a yearly drift)
 * The first bar of a session adds an overnight gap. Each bar's O/H/L/C come from an 8-step
 * Brownian bridge from the open to the close, every point rounded to the tick, so the bar is
 * consistent by construction (low ≤ open, close ≤ high). Volume follows the same U shape,
 * log-normal noise and |z|. Everything is drawn from one Philox stream of the seed. */
#include "vixen/data.h"
#include "vixen/philox.h"
#include "data_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SYNTH_STREAM 0x53594e54ull /* "SYNT" */
#define PATH_STEPS 8

void vx_synth_default(vx_synth_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->seed = 1;
    c->days = 20;
    c->start_price = 4000.0;
    c->tick = 0.25;
    c->bar_vol = 4e-4;
    c->garch_alpha = 0.05;
    c->garch_beta = 0.93;
    c->t_dof = 5;
    c->intraday_u = 1.5;
    c->overnight_vol = 8;
    c->signal_strength = 0.15;
    c->signal_phi = 0.97;
    c->base_volume = 1500;
}

static double student_t(vx_rng *r, int dof)
{
    double z = vx_rng_normal(r), chi2 = 0;
    for (int i = 0; i < dof; i++) {
        double g = vx_rng_normal(r);
        chi2 += g * g;
    }
    return z / sqrt(chi2 / dof) * sqrt((dof - 2.0) / dof);
}

static double on_tick(double x, double tick) { return floor(x / tick + 0.5) * tick; }

/* A parameter outside [lo, hi] (or not a number: NaN fails every comparison) is an error. */
static vx_status check_range(const char *field, double v, double lo, double hi, vx_err *e)
{
    if (v >= lo && v <= hi) return VX_OK;
    return vx_err_line(e, VX_ERR_ARG, "synth", -1, field, "%s = %g is not in [%g, %g]", field, v,
                       lo, hi);
}

/* Ranges refuse nonsense up front (NaN and infinities included); each bar is then held to
 * vx_bar_check like every reader's, so parameters that drive prices out of range over many days
 * (a drift of 10 a year over centuries) are refused rather than written. */
vx_status vx_synth_check(const vx_synth_cfg *c, vx_err *e)
{
    /* 50,000 weekdays from 2024 end in 2215: nanosecond timestamps end in 2262 */
    if (c->days <= 0 || c->days > 50000)
        return vx_err_line(e, VX_ERR_ARG, "synth", -1, "days", "days must be in 1..50000");
    struct {
        const char *field;
        double v, lo, hi;
    } r[] = {
        {"start_price", c->start_price, 1e-6, 1e9},
        {"tick", c->tick, 1e-9, c->start_price},
        {"bar_vol", c->bar_vol, 1e-9, 0.01},
        {"garch_alpha", c->garch_alpha, 0, 1},
        {"garch_beta", c->garch_beta, 0, 1},
        {"t_dof", c->t_dof, 3, 1000},
        {"intraday_u", c->intraday_u, 0, 100},
        {"overnight_vol", c->overnight_vol, 0, 100},
        {"signal_strength", c->signal_strength, 0, 10},
        {"signal_phi", c->signal_phi, -0.9999, 0.9999},
        {"drift", c->drift, -10, 10},
        {"base_volume", c->base_volume, 1, 1e12},
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        vx_status st = check_range(r[i].field, r[i].v, r[i].lo, r[i].hi, e);
        if (st) return st;
    }
    if (c->garch_alpha + c->garch_beta >= 1)
        return vx_err_line(e, VX_ERR_ARG, "synth", -1, "garch",
                           "need alpha, beta >= 0 and alpha + beta < 1");
    return VX_OK;
}

vx_status vx_synth_generate(const vx_synth_cfg *c, vx_series *out, double **signal_out, vx_err *e)
{
    vx_status cst = vx_synth_check(c, e);
    if (cst) return cst;
    int dof = (int)c->t_dof;
    size_t n = (size_t)c->days * 390;
    vx_status st = vx_series_reserve(out, n, e);
    if (st) return st;
    double *sig = NULL;
    if (signal_out) {
        sig = malloc(n * sizeof *sig);
        if (!sig) return vx_err_set(e, VX_ERR_NOMEM, "synth: out of memory");
    }
    vx_rng r = vx_rng_make(c->seed, SYNTH_STREAM, 0);
    double omega = 1 - c->garch_alpha - c->garch_beta;
    double h = 1.0, zprev = 0.0, s = 0.0, x = log(c->start_price);
    double unorm = 1 + c->intraday_u / 3;
    double snoise = sqrt(1 - c->signal_phi * c->signal_phi);
    int64_t day = vx_days_from_civil(2024, 1, 2);
    size_t t = 0;
    for (int d = 0; d < c->days; day++) {
        int wd = (int)(((day % 7) + 7 + 4) % 7); /* 0 = Sunday */
        if (wd == 0 || wd == 6) continue;
        int64_t off = vx_eastern_offset_s(day * 86400 + 15 * 3600);
        int64_t open_utc_s = day * 86400 + VX_RTH_OPEN_MIN * 60 - off;
        for (int m = 0; m < 390; m++, t++) {
            double xu = (m - 194.5) / 194.5;
            double u = (1 + c->intraday_u * xu * xu) / unorm;
            h = omega + c->garch_alpha * h * zprev * zprev + c->garch_beta * h;
            double sigma = c->bar_vol * sqrt(h) * u;
            double z = student_t(&r, dof);
            double drift = c->drift / (252.0 * 390.0) + c->signal_strength * sigma * s;
            if (sig) sig[t] = s;
            double ret = drift + sigma * z;
            if (m == 0 && t > 0) x += c->overnight_vol * c->bar_vol * vx_rng_normal(&r);
            /* Brownian bridge from x to x + ret */
            double path[PATH_STEPS + 1], w = 0, wk[PATH_STEPS + 1];
            wk[0] = 0;
            for (int k = 1; k <= PATH_STEPS; k++) {
                w += vx_rng_normal(&r) * sigma / sqrt((double)PATH_STEPS);
                wk[k] = w;
            }
            for (int k = 0; k <= PATH_STEPS; k++) {
                double f = (double)k / PATH_STEPS;
                path[k] = on_tick(exp(x + f * ret + (wk[k] - f * w)), c->tick);
            }
            double o = path[0], cl = path[PATH_STEPS], hi = o, lo = o;
            for (int k = 1; k <= PATH_STEPS; k++) {
                hi = path[k] > hi ? path[k] : hi;
                lo = path[k] < lo ? path[k] : lo;
            }
            if (lo < c->tick) lo = c->tick, o = o < lo ? lo : o, cl = cl < lo ? lo : cl;
            double vol =
                c->base_volume * u * exp(0.4 * vx_rng_normal(&r) - 0.08) * (0.6 + 0.4 * fabs(z));
            vol = floor(vol + 0.5);
            if (vol < 1) vol = 1;
            int64_t ts = (open_utc_s + m * 60) * 1000000000ll;
            char why[160];
            const char *bad = vx_bar_check(t ? out->ts[out->n - 1] : INT64_MIN, ts, o, hi, lo, cl,
                                           vol, why, sizeof why);
            if (bad) {
                free(sig);
                return vx_err_line(e, VX_ERR_ARG, "synth", -1, bad,
                                   "bar %zu: %s (the parameters drive prices out of range)", t + 1,
                                   why);
            }
            vx_series_push(out, ts, o, hi, lo, cl, vol, NULL);
            x += ret;
            zprev = z;
            s = c->signal_phi * s + snoise * vx_rng_normal(&r);
        }
        d++;
        if (d % 64 == 0 || d == c->days)
            vx_progress_report("synthesising", "days", (uint64_t)d, (uint64_t)c->days);
    }
    out->interval_ns = 60000000000ll;
    snprintf(out->instrument, sizeof out->instrument, "SYNTH");
    snprintf(out->source, sizeof out->source, "synth seed=%llu days=%d strength=%g",
             (unsigned long long)c->seed, c->days, c->signal_strength);
    if (signal_out) *signal_out = sig;
    return VX_OK;
}

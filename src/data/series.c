/* series.c — the in-memory OHLCV series, the per-bar validation rule, and summary statistics.
 *
 * The series is structure-of-arrays (one array per field) because features and the environment
 * read one field over many bars. Validation lives here as one function that every reader calls
 * with its own notion of position (line or record), so CSV, DBN and synthetic data are held to
 * exactly the same rules. */
#include "vixen/data.h"
#include "data_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

vx_status vx_series_reserve(vx_series *s, size_t cap, vx_err *e)
{
    if (cap <= s->cap) return VX_OK;
    if (cap > SIZE_MAX / sizeof(double))
        return vx_err_set(e, VX_ERR_NOMEM, "cannot allocate a series of %zu bars", cap);
    /* new arrays, copy, free: realloc cannot keep the huge-page alignment */
    int64_t *ts = vx_alloc_big(cap * sizeof *ts);
    double *cols[5] = {0};
    int ok = ts != NULL;
    for (int i = 0; i < 5 && ok; i++) ok = (cols[i] = vx_alloc_big(cap * sizeof(double))) != NULL;
    if (!ok) {
        free(ts);
        for (int i = 0; i < 5; i++) free(cols[i]);
        return vx_err_set(e, VX_ERR_NOMEM, "cannot allocate a series of %zu bars", cap);
    }
    double **old[5] = {&s->open, &s->high, &s->low, &s->close, &s->volume};
    if (s->n) memcpy(ts, s->ts, s->n * sizeof *ts);
    free(s->ts);
    s->ts = ts;
    for (int i = 0; i < 5; i++) {
        if (s->n) memcpy(cols[i], *old[i], s->n * sizeof(double));
        free(*old[i]);
        *old[i] = cols[i];
    }
    s->cap = cap;
    return VX_OK;
}

vx_status vx_series_push(vx_series *s, int64_t ts, double o, double h, double l, double c, double v,
                         vx_err *e)
{
    if (s->n == s->cap) {
        vx_status st = vx_series_reserve(s, s->cap ? s->cap * 2 : 1024, e);
        if (st) return st;
    }
    size_t i = s->n++;
    s->ts[i] = ts;
    s->open[i] = o;
    s->high[i] = h;
    s->low[i] = l;
    s->close[i] = c;
    s->volume[i] = v;
    return VX_OK;
}

void vx_series_free(vx_series *s)
{
    free(s->ts);
    free(s->open);
    free(s->high);
    free(s->low);
    free(s->close);
    free(s->volume);
    memset(s, 0, sizeof *s);
}

const char *vx_bar_check(int64_t prev_ts, int64_t ts, double o, double h, double l, double c,
                         double v, char *why, size_t why_len)
{
    const char *names[4] = {"open", "high", "low", "close"};
    double px[4] = {o, h, l, c};
    for (int i = 0; i < 4; i++) {
        if (!isfinite(px[i])) {
            snprintf(why, why_len, "price %g is not finite", px[i]);
            return names[i];
        }
        if (!(px[i] > 0)) {
            snprintf(why, why_len, "price %.10g is not positive", px[i]);
            return names[i];
        }
    }
    if (!isfinite(v) || v < 0) {
        snprintf(why, why_len, "volume %g is negative or not finite", v);
        return "volume";
    }
    if (h < l) {
        snprintf(why, why_len, "high %.10g is below low %.10g", h, l);
        return "high";
    }
    if (l > o || l > c) {
        snprintf(why, why_len, "low %.10g is above min(open, close) = %.10g", l, o < c ? o : c);
        return "low";
    }
    if (h < o || h < c) {
        snprintf(why, why_len, "high %.10g is below max(open, close) = %.10g", h, o > c ? o : c);
        return "high";
    }
    if (prev_ts != INT64_MIN && ts <= prev_ts) {
        char a[48], b[48];
        vx_format_ts(ts, a, sizeof a);
        vx_format_ts(prev_ts, b, sizeof b);
        snprintf(why, why_len, "%s %s is %s the previous bar's %s", "timestamp", a,
                 ts == prev_ts ? "a duplicate of" : "earlier than", b);
        return "timestamp";
    }
    return NULL;
}

/* ts[i+1] − ts[i] for strictly increasing timestamps, saturated: bars in 1677 and 2262 are
 * further apart than an int64 holds. */
static int64_t spacing(const int64_t *ts, size_t i)
{
    uint64_t d = (uint64_t)ts[i + 1] - (uint64_t)ts[i];
    return d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The most common spacing between consecutive bars, found from a sorted sample of spacings. */
static int64_t modal_spacing(const int64_t *ts, size_t n)
{
    if (n < 2) return 0;
    size_t m = n - 1 < 100000 ? n - 1 : 100000;
    int64_t *d = malloc(m * sizeof *d);
    if (!d) return spacing(ts, 0);
    for (size_t i = 0; i < m; i++) d[i] = spacing(ts, i);
    qsort(d, m, sizeof *d, cmp_i64);
    int64_t best = d[0];
    size_t best_run = 0;
    for (size_t i = 0; i < m;) {
        size_t j = i;
        while (j < m && d[j] == d[i]) j++;
        if (j - i > best_run) {
            best_run = j - i;
            best = d[i];
        }
        i = j;
    }
    free(d);
    return best;
}

void vx_series_stats_compute(const vx_series *s, vx_series_stats *st)
{
    memset(st, 0, sizeof *st);
    st->bars = s->n;
    if (s->n == 0) return;
    st->first_ts = s->ts[0];
    st->last_ts = s->ts[s->n - 1];
    st->interval_ns = s->interval_ns ? s->interval_ns : modal_spacing(s->ts, s->n);
    for (size_t i = 1; i < s->n; i++) {
        int64_t d = spacing(s->ts, i - 1);
        if (st->interval_ns > 0 && d > st->interval_ns) {
            st->gaps++;
            if (d > st->largest_gap_ns) {
                st->largest_gap_ns = d;
                st->largest_gap_at = s->ts[i];
            }
        }
    }
}

/* Used by the readers once the bars are in. */
void vx_series_set_interval(vx_series *s)
{
    if (s->interval_ns == 0) s->interval_ns = modal_spacing(s->ts, s->n);
}

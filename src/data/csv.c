/* csv.c — the OHLCV CSV reader and writer.
 *
 * The reader is a single pass over the file in memory: no allocation per row, numbers parsed by
 * an exact fast path (Clinger: an integer mantissa below 2^53 scaled by an exact power of ten)
 * with strtod as the fallback, so it reaches millions of bars a second and stays small enough to
 * fuzz. It deliberately does not handle quoted fields that contain the separator or newlines:
 * OHLCV exports never need them, and refusing them keeps every row one line.
 *
 * Header (required): names are matched case-insensitively after trimming spaces and quotes.
 *   time:   `timestamp`, `datetime`, `ts_event`, or `date` (+ `time` as a separate column), or
 *           `time` alone; prices: `open`, `high`, `low`, `close`; `volume` (or `vol`).
 *   Any other column (`adjclose`, `symbol`, …) is ignored; two of one role are an error, and
 *   every row has the header's number of fields.
 * Separator: ',', ';' or tab, whichever the header line holds most of.
 * Timestamps: decided once per file from the first data row. All digits means epoch time, its
 * unit by magnitude: below 1e11 seconds, below 1e14 milliseconds, below 1e17 microseconds, else
 * nanoseconds. Otherwise a calendar date/time (see datetime.c); without an offset it is UTC. */
#define _POSIX_C_SOURCE 200809L
#include "vixen/data.h"
#include "data_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { COL_TS, COL_DATE, COL_TIME, COL_OPEN, COL_HIGH, COL_LOW, COL_CLOSE, COL_VOLUME, NCOL };
static const char *col_field[NCOL] = {"timestamp", "date", "time",  "open",
                                      "high",      "low",  "close", "volume"};

typedef struct {
    const char *p;
    size_t n;
} span;

static span trim(span s)
{
    while (s.n && (s.p[0] == ' ' || s.p[0] == '"' || s.p[0] == '\'')) s.p++, s.n--;
    while (s.n && (s.p[s.n - 1] == ' ' || s.p[s.n - 1] == '"' || s.p[s.n - 1] == '\'' ||
                   s.p[s.n - 1] == '\r'))
        s.n--;
    return s;
}

static int span_ieq(span s, const char *word)
{
    size_t n = strlen(word);
    if (s.n != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)s.p[i]) != word[i]) return 0;
    return 1;
}

static const double pow10_exact[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Whether s is a decimal number ([sign] digits [. digits] [e [sign] digits], a digit somewhere
 * before the exponent) or one of the words nan, inf, infinity (any case, signed). */
static int decimal_syntax(span s)
{
    size_t i = 0, n = s.n, digits = 0;
    if (i < n && (s.p[i] == '+' || s.p[i] == '-')) i++;
    if (span_ieq((span){s.p + i, n - i}, "nan") || span_ieq((span){s.p + i, n - i}, "inf") ||
        span_ieq((span){s.p + i, n - i}, "infinity"))
        return 1;
    for (; i < n && s.p[i] >= '0' && s.p[i] <= '9'; i++) digits++;
    if (i < n && s.p[i] == '.')
        for (i++; i < n && s.p[i] >= '0' && s.p[i] <= '9'; i++) digits++;
    if (!digits) return 0;
    if (i < n && (s.p[i] == 'e' || s.p[i] == 'E')) {
        i++;
        if (i < n && (s.p[i] == '+' || s.p[i] == '-')) i++;
        size_t e0 = i;
        for (; i < n && s.p[i] >= '0' && s.p[i] <= '9'; i++) {}
        if (i == e0) return 0;
    }
    return i == n;
}

/* Parses the whole span as a number. Returns 0 on success, −2 for one beyond a double's range,
 * −1 for anything else. */
static int parse_number(span s, double *out)
{
    const char *p = s.p, *end = s.p + s.n;
    if (p == end) return -1;
    int neg = 0;
    if (*p == '-' || *p == '+') neg = *p++ == '-';
    uint64_t mant = 0;
    int ndig = 0, frac = 0, any = 0, dropped = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (ndig < 19) mant = mant * 10 + (uint64_t)(*p - '0'), ndig += mant > 0;
        else dropped = 1;
        p++, any = 1;
    }
    if (p < end && *p == '.') {
        p++;
        while (p < end && *p >= '0' && *p <= '9') {
            if (ndig < 19) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                ndig += mant > 0;
                frac++;
            } else if (*p != '0') {
                dropped = 1;
            }
            p++, any = 1;
        }
    }
    if (any && !dropped && p == end && frac <= 22 && mant < (1ull << 53)) {
        double v = (double)mant / pow10_exact[frac];
        *out = neg ? -v : v;
        return 0;
    }
    /* Slow path: exponents, long mantissas, and the words nan and inf (which validation refuses
     * with a clearer message than "not a number"); nothing else strtod reads (hexadecimal, "0x10"
     * is sixteen to it, and "nan(…)"): the numbers are decimal. */
    if (!decimal_syntax(s)) return -1;
    char buf[64];
    if (s.n >= sizeof buf) return -1;
    memcpy(buf, s.p, s.n);
    buf[s.n] = '\0';
    char *stop;
    errno = 0;
    double v = strtod(buf, &stop);
    if (stop == buf || *stop != '\0') return -1;
    if (errno == ERANGE && isinf(v)) return -2; /* beyond a double, not infinity */
    *out = v;
    return 0;
}

static int parse_int64(span s, int64_t *out)
{
    const char *p = s.p, *end = s.p + s.n;
    int neg = 0;
    if (p < end && (*p == '-' || *p == '+')) neg = *p++ == '-';
    if (p == end) return -1;
    int64_t v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') return -1;
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

static int is_epoch(span s)
{
    size_t i = (s.n && s.p[0] == '-') ? 1 : 0;
    if (i == s.n) return 0;
    for (; i < s.n; i++)
        if (s.p[i] < '0' || s.p[i] > '9') return 0;
    return 1;
}

/* Splits one line into fields; returns the field count (capped at max). */
static int split(const char *line, size_t len, char sep, span *f, int max)
{
    int k = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || line[i] == sep) {
            if (k < max) f[k] = trim((span){line + start, i - start});
            k++;
            start = i + 1;
        }
    }
    return k < max ? k : max;
}

#define MAX_FIELDS 64

vx_status vx_csv_parse(const char *name, const char *text, size_t len, const vx_load_opts *opts,
                       vx_series *out, vx_err *e)
{
    const char *p = text, *end = text + len;
    if (len >= 3 && (unsigned char)p[0] == 0xEF && (unsigned char)p[1] == 0xBB &&
        (unsigned char)p[2] == 0xBF)
        p += 3; /* UTF-8 byte order mark */
    /* header: the first non-empty line */
    int64_t line_no = 0;
    const char *hl = NULL;
    size_t hlen = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        line_no++;
        span t = trim((span){p, l});
        p = nl ? nl + 1 : end;
        if (t.n) {
            hl = t.p;
            hlen = t.n;
            break;
        }
    }
    if (!hl) return vx_err_line(e, VX_ERR_FORMAT, name, -1, "", "empty file: no header row");
    int64_t header_line = line_no;

    size_t nc = 0, ns = 0, nt = 0;
    for (size_t i = 0; i < hlen; i++) nc += hl[i] == ',', ns += hl[i] == ';', nt += hl[i] == '\t';
    char sep = nt > nc && nt > ns ? '\t' : (ns > nc ? ';' : ',');

    span hf[MAX_FIELDS];
    int nh = split(hl, hlen, sep, hf, MAX_FIELDS);
    int col[NCOL];
    for (int c = 0; c < NCOL; c++) col[c] = -1;
    for (int i = 0; i < nh; i++) {
        span h = hf[i];
        int c = -1;
        if (span_ieq(h, "timestamp") || span_ieq(h, "datetime") || span_ieq(h, "ts_event"))
            c = COL_TS;
        else if (span_ieq(h, "date")) c = COL_DATE;
        else if (span_ieq(h, "time")) c = COL_TIME;
        else if (span_ieq(h, "open")) c = COL_OPEN;
        else if (span_ieq(h, "high")) c = COL_HIGH;
        else if (span_ieq(h, "low")) c = COL_LOW;
        else if (span_ieq(h, "close")) c = COL_CLOSE;
        else if (span_ieq(h, "volume") || span_ieq(h, "vol")) c = COL_VOLUME;
        if (c >= 0 && col[c] >= 0) /* which would it be? */
            return vx_err_line(e, VX_ERR_FORMAT, name, header_line, col_field[c],
                               "two %s columns in the header: '%.*s' (column %d) and '%.*s' "
                               "(column %d)",
                               col_field[c], (int)hf[col[c]].n, hf[col[c]].p, col[c] + 1, (int)h.n,
                               h.p, i + 1);
        if (c >= 0) col[c] = i;
    }
    /* time columns: one full timestamp, or a date and a time, or a date alone, or time alone */
    int ts_col = -1, tm_col = -1;
    if (col[COL_TS] >= 0) ts_col = col[COL_TS];
    else if (col[COL_DATE] >= 0 && col[COL_TIME] >= 0)
        ts_col = col[COL_DATE], tm_col = col[COL_TIME];
    else if (col[COL_DATE] >= 0) ts_col = col[COL_DATE];
    else if (col[COL_TIME] >= 0) ts_col = col[COL_TIME];
    if (ts_col < 0)
        return vx_err_line(e, VX_ERR_FORMAT, name, header_line, "timestamp",
                           "missing column: the header needs one of date, time, datetime, "
                           "timestamp");
    for (int c = COL_OPEN; c <= COL_VOLUME; c++)
        if (col[c] < 0)
            return vx_err_line(e, VX_ERR_FORMAT, name, header_line, col_field[c],
                               "missing column '%s' in the header", col_field[c]);

    /* size the series from a guess of the row count: bytes / bytes-per-header-line */
    size_t guess = (size_t)(end - p) / (hlen > 16 ? hlen : 16) + 16;
    vx_status st = vx_series_reserve(out, out->n + guess, e);
    if (st) return st;

    enum { TS_UNDECIDED, TS_EPOCH, TS_CALENDAR } ts_kind = TS_UNDECIDED;
    int64_t epoch_mult = 1;
    int64_t prev_ts = INT64_MIN;
    span f[MAX_FIELDS];
    char why[160];
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        const char *line = p;
        p = nl ? nl + 1 : end;
        line_no++;
        if (l && line[l - 1] == '\r') l--;
        if (l == 0) continue;
        int k = split(line, l, sep, f, MAX_FIELDS);
        if (k != nh) { /* a row of another width than the header's: shifted columns, a stray
                        * separator — never read as it comes */
            if (k == 1 && trim(f[0]).n == 0) continue; /* a line of spaces */
            return vx_err_line(e, VX_ERR_FORMAT, name, line_no, "",
                               "expected %d fields (the header's), found %d", nh, k);
        }
        /* timestamp */
        span tsf = f[ts_col];
        int64_t ts;
        if (ts_kind == TS_UNDECIDED) {
            if (tm_col < 0 && is_epoch(tsf)) {
                int64_t v;
                if (parse_int64(tsf, &v))
                    return vx_err_line(e, VX_ERR_FORMAT, name, line_no, col_field[COL_TS],
                                       "epoch time '%.*s' out of range", (int)tsf.n, tsf.p);
                int64_t a = v < 0 ? -v : v;
                epoch_mult = a < 100000000000ll         ? 1000000000
                             : a < 100000000000000ll    ? 1000000
                             : a < 100000000000000000ll ? 1000
                                                        : 1;
                ts_kind = TS_EPOCH;
            } else {
                ts_kind = TS_CALENDAR;
            }
        }
        if (ts_kind == TS_EPOCH) {
            int64_t v;
            if (parse_int64(tsf, &v) ||
                (epoch_mult > 1 && (v > INT64_MAX / epoch_mult || v < INT64_MIN / epoch_mult)))
                return vx_err_line(e, VX_ERR_FORMAT, name, line_no, col_field[COL_TS],
                                   "'%.*s' is not epoch time like the first row's", (int)tsf.n,
                                   tsf.p);
            ts = v * epoch_mult;
        } else {
            char buf[80];
            size_t bl;
            if (tm_col >= 0) {
                span tf = f[tm_col];
                if (tsf.n + 1 + tf.n >= sizeof buf)
                    return vx_err_line(e, VX_ERR_FORMAT, name, line_no, "date", "field too long");
                memcpy(buf, tsf.p, tsf.n);
                buf[tsf.n] = ' ';
                memcpy(buf + tsf.n + 1, tf.p, tf.n);
                bl = tsf.n + 1 + tf.n;
            } else {
                bl = tsf.n < sizeof buf ? tsf.n : sizeof buf - 1;
                memcpy(buf, tsf.p, bl);
            }
            if (vx_parse_datetime(buf, bl, &ts))
                return vx_err_line(e, VX_ERR_FORMAT, name, line_no,
                                   tm_col >= 0 ? "date"
                                               : col_field[ts_col == col[COL_TS]     ? COL_TS
                                                           : ts_col == col[COL_DATE] ? COL_DATE
                                                                                     : COL_TIME],
                                   "cannot read '%.*s' as a date/time (expected YYYY-MM-DD, "
                                   "YYYY-MM-DD HH:MM[:SS[.fff]] with up to 9 fraction digits, "
                                   "ISO 8601 with Z or offset, or epoch seconds/ms/us/ns)",
                                   (int)bl, buf);
        }
        double v[5];
        for (int c = COL_OPEN; c <= COL_VOLUME; c++) {
            span x = f[col[c]];
            int bad_number = parse_number(x, &v[c - COL_OPEN]);
            if (bad_number)
                return vx_err_line(e, VX_ERR_FORMAT, name, line_no, col_field[c],
                                   bad_number == -2 ? "'%.*s' is beyond a double's range"
                                                    : "'%.*s' is not a decimal number",
                                   (int)(x.n < 40 ? x.n : 40), x.p);
        }
        const char *bad = vx_bar_check(prev_ts, ts, v[0], v[1], v[2], v[3], v[4], why, sizeof why);
        if (bad) return vx_err_line(e, VX_ERR_VALIDATION, name, line_no, bad, "%s", why);
        prev_ts = ts;
        st = vx_series_push(out, ts, v[0], v[1], v[2], v[3], v[4], e);
        if (st) return st;
        if ((line_no & 0x3FFFF) == 0)
            vx_progress_report("reading csv", "MB", (uint64_t)(p - text) >> 20,
                               (uint64_t)len >> 20);
    }
    vx_progress_report("reading csv", "MB", (uint64_t)len >> 20, (uint64_t)len >> 20);
    if (out->n == 0)
        return vx_err_line(e, VX_ERR_FORMAT, name, -1, "", "no data rows after the header");
    if (opts && opts->instrument && !out->instrument[0])
        snprintf(out->instrument, sizeof out->instrument, "%s", opts->instrument);
    snprintf(out->source, sizeof out->source, "csv %s", name);
    vx_series_set_interval(out);
    return VX_OK;
}

vx_status vx_csv_read(const char *path, const vx_load_opts *opts, vx_series *out, vx_err *e)
{
    uint8_t *data;
    size_t n;
    vx_status st = vx_file_read_all(path, &data, &n, e);
    if (st) return st;
    st = vx_csv_parse(path, (const char *)data, n, opts, out, e);
    free(data);
    if (st) return st;
    if (!out->instrument[0]) {
        /* the file's stem names the series: "data/ES_1m.csv" -> "ES_1m" */
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        size_t l = strcspn(b, ".");
        snprintf(out->instrument, sizeof out->instrument, "%.*s", (int)(l < 63 ? l : 63), b);
    }
    return VX_OK;
}

/* The shortest of %.15g/%.17g that reads back to the same double. */
static void format_shortest(double x, char *buf, size_t n)
{
    snprintf(buf, n, "%.15g", x);
    if (strtod(buf, NULL) != x) snprintf(buf, n, "%.17g", x);
}

vx_status vx_csv_write(const char *path, const vx_series *s, vx_err *e)
{
    vx_atomic_file af;
    vx_status st = vx_atomic_open(&af, path, e);
    if (st) return st;
    fprintf(af.f, "timestamp,open,high,low,close,volume\n");
    char tsb[48], num[5][40];
    for (size_t i = 0; i < s->n; i++) {
        vx_format_ts(s->ts[i], tsb, sizeof tsb);
        double v[5] = {s->open[i], s->high[i], s->low[i], s->close[i], s->volume[i]};
        for (int k = 0; k < 5; k++) format_shortest(v[k], num[k], sizeof num[k]);
        fprintf(af.f, "%s,%s,%s,%s,%s,%s\n", tsb, num[0], num[1], num[2], num[3], num[4]);
        if ((i & 0x3FFFF) == 0 && i) vx_progress_report("writing csv", "bars", i, s->n);
    }
    vx_progress_report("writing csv", "bars", s->n, s->n);
    if (ferror(af.f)) {
        vx_atomic_abort(&af);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
    }
    return vx_atomic_commit(&af, e);
}

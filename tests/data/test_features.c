/* test_features.c — the 45 market features (range, causality, scale invariance, known values)
 * and the feature cache (hit, miss on any change, damaged or hostile entries). */
#define _XOPEN_SOURCE 700
#include "helpers.h"
#include "data_tests.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

static void test_features_range_and_shape(void **state)
{
    (void)state;
    vx_series s;
    th_synth(&s, 8, 3, 0.15);
    vx_features f;
    vx_err e;
    assert_int_equal(vx_features_compute(&s, &f, &e), VX_OK);
    assert_int_equal(f.first_bar, VX_FEATURE_WARMUP);
    assert_int_equal(f.rows, s.n - VX_FEATURE_WARMUP);
    double sum_abs[VX_MARKET_FEATURES] = {0};
    for (size_t r = 0; r < f.rows; r++)
        for (int k = 0; k < VX_MARKET_FEATURES; k++) {
            float x = f.x[r * VX_MARKET_FEATURES + k];
            assert_true(isfinite(x));
            assert_true(x >= -VX_FEATURE_CLIP && x <= VX_FEATURE_CLIP);
            sum_abs[k] += fabs(x);
        }
    /* no feature is dead: each one moves on real-looking data */
    for (int k = 0; k < VX_MARKET_FEATURES; k++)
        if (!(sum_abs[k] > 0))
            fail_msg("feature %d (%s) is identically zero", k, vx_feature_name(k));
    assert_string_equal(vx_feature_name(0), "ret_1");
    assert_string_equal(vx_feature_name(45), "exposure");
    vx_features_free(&f);
    /* too short for the warm-up */
    vx_series shorter = s;
    shorter.n = VX_FEATURE_WARMUP;
    assert_int_equal(vx_features_compute(&shorter, &f, &e), VX_ERR_VALIDATION);
    vx_series_free(&s);
}

static uint64_t g_pdone, g_ptotal;
static int g_preports;
static void fsink(const char *job, const char *unit, uint64_t done, uint64_t total, void *ctx)
{
    (void)unit, (void)ctx;
    if (strcmp(job, "features") == 0) g_pdone = done, g_ptotal = total, g_preports++;
}

static void test_features_report_progress(void **state)
{
    (void)state;
    vx_series s;
    th_synth(&s, 200, 3, 0.15); /* 78,000 bars: one report on the way, one at the end */
    vx_features f;
    vx_err e;
    g_preports = 0;
    vx_progress_set_sink(fsink, NULL);
    assert_int_equal(vx_features_compute(&s, &f, &e), VX_OK);
    vx_progress_set_sink(NULL, NULL);
    assert_int_equal(g_preports, 2);
    assert_int_equal(g_pdone, s.n);
    assert_int_equal(g_ptotal, s.n);
    vx_features_free(&f);
    vx_series_free(&s);
}

static void test_features_are_causal(void **state)
{
    (void)state;
    vx_series s;
    th_synth(&s, 4, 9, 0.15);
    vx_features base;
    vx_err e;
    assert_int_equal(vx_features_compute(&s, &base, &e), VX_OK);
    size_t cuts[] = {VX_FEATURE_WARMUP, 500, 777, s.n - 2};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        size_t t = cuts[c];
        vx_series m = {0};
        assert_int_equal(vx_series_reserve(&m, s.n, &e), VX_OK);
        for (size_t i = 0; i < s.n; i++) {
            int after = i > t; /* every bar after t changes */
            double k = after ? 1.37 : 1.0, wide = after ? 0.01 : 0.0;
            vx_series_push(&m, s.ts[i], s.open[i] * k, s.high[i] * k * (1 + wide),
                           s.low[i] * k * (1 - wide), s.close[i] * k, s.volume[i] * (after ? 3 : 1),
                           NULL);
        }
        vx_features f;
        assert_int_equal(vx_features_compute(&m, &f, &e), VX_OK);
        size_t rows_upto = t - VX_FEATURE_WARMUP + 1;
        assert_memory_equal(f.x, base.x, rows_upto * VX_MARKET_FEATURES * sizeof(float));
        /* and the change is visible right after t */
        assert_true(memcmp(f.x + rows_upto * VX_MARKET_FEATURES,
                           base.x + rows_upto * VX_MARKET_FEATURES,
                           VX_MARKET_FEATURES * sizeof(float)) != 0);
        vx_features_free(&f);
        vx_series_free(&m);
    }
    vx_features_free(&base);
    vx_series_free(&s);
}

static void test_features_scale_free(void **state)
{
    (void)state;
    vx_series s, m = {0};
    th_synth(&s, 4, 21, 0.15);
    vx_err e;
    assert_int_equal(vx_series_reserve(&m, s.n, &e), VX_OK);
    for (size_t i = 0; i < s.n; i++)
        vx_series_push(&m, s.ts[i], s.open[i] / 64, s.high[i] / 64, s.low[i] / 64, s.close[i] / 64,
                       s.volume[i] * 8, NULL);
    vx_features a, b;
    assert_int_equal(vx_features_compute(&s, &a, &e), VX_OK);
    assert_int_equal(vx_features_compute(&m, &b, &e), VX_OK);
    /* Scaling by powers of two is exact in binary floating point, so every price comparison ties
     * the same way (tick-grid prices tie often: ADX's +DM/−DM choice would otherwise flip).
     * Volume features are invariant to scaling volume except the log-volume z-score (log1p) and
     * the same-minute ratio (1 + v): skip those two. */
    double worst = 0;
    for (size_t i = 0; i < a.rows * VX_MARKET_FEATURES; i++) {
        int k = (int)(i % VX_MARKET_FEATURES);
        if (k == 34 || k == 35) continue;
        double d = fabs(a.x[i] - b.x[i]);
        if (d > worst) worst = d;
    }
    assert_true(worst < 1e-5);
    vx_features_free(&a);
    vx_features_free(&b);
    vx_series_free(&s);
    vx_series_free(&m);
}

static void test_features_known_values(void **state)
{
    (void)state;
    vx_series s;
    th_synth(&s, 3, 5, 0.15);
    vx_features f;
    vx_err e;
    assert_int_equal(vx_features_compute(&s, &f, &e), VX_OK);
    /* bar 390 opens the second session at 09:30 New York time (Wednesday 2024-01-03) */
    const float *x = f.x + (390 - VX_FEATURE_WARMUP) * VX_MARKET_FEATURES;
    assert_near(x[38], sin(6.283185307179586 * 570 / 1440.0), 1e-6);
    assert_near(x[39], cos(6.283185307179586 * 570 / 1440.0), 1e-6);
    assert_near(x[40], sin(6.283185307179586 * 3 / 7.0), 1e-6);
    assert_near(x[42], 1.0, 0);
    assert_near(x[43], 1.0, 1e-6);                                  /* the whole session left */
    x = f.x + (390 + 389 - VX_FEATURE_WARMUP) * VX_MARKET_FEATURES; /* 15:59 */
    assert_near(x[43], 1.0 / 390, 1e-6);
    /* the session VWAP resets: at the first bar of a session the close sits near it */
    x = f.x + (390 - VX_FEATURE_WARMUP) * VX_MARKET_FEATURES;
    double tp = (s.high[390] + s.low[390] + s.close[390]) / 3;
    assert_true(fabs(x[30]) < 1.0 + fabs(s.close[390] - tp));
    /* a close at the 14-bar high gives stochastic +1 */
    int seen = 0;
    for (size_t t = VX_FEATURE_WARMUP + 14; t < s.n && !seen; t++) {
        double hh = 0;
        for (size_t k = t - 13; k <= t; k++) hh = fmax(hh, s.high[k]);
        if (s.close[t] == hh) {
            assert_near(f.x[(t - VX_FEATURE_WARMUP) * VX_MARKET_FEATURES + 21], 1.0, 1e-6);
            seen = 1;
        }
    }
    assert_true(seen);
    vx_features_free(&f);
    vx_series_free(&s);
}

/* ---- the cache ------------------------------------------------------------------------------ */

static void write_synth_csv(const char *path, int days, uint64_t seed)
{
    vx_series s;
    th_synth(&s, days, seed, 0.15);
    vx_err e;
    assert_int_equal(vx_csv_write(path, &s, &e), VX_OK);
    vx_series_free(&s);
}

static void test_cache_hit_and_misses(void **state)
{
    (void)state;
    char dir[64], csv[128], cache[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/es.csv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    write_synth_csv(csv, 3, 4);
    const char *paths[1] = {csv};
    vx_market a, b;
    vx_err e;
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &a, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "feature cache: miss (no entry for this key)"));
    assert_int_equal(a.from_cache, 0);
    assert_int_equal(th_count_files(cache), 1);
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &b, &e), VX_OK);
    char want[80];
    snprintf(want, sizeof want, "feature cache: hit %s", a.key);
    assert_non_null(strstr(th_log_text(), want));
    assert_int_equal(b.from_cache, 1);
    assert_string_equal(a.key, b.key);
    assert_int_equal(a.rows, b.rows);
    assert_int_equal(a.n_bars, b.n_bars);
    assert_memory_equal(a.features, b.features, a.rows * VX_MARKET_FEATURES * sizeof(float));
    assert_memory_equal(a.close, b.close, a.n_bars * sizeof(double));
    assert_memory_equal(a.ts, b.ts, a.n_bars * sizeof(int64_t));
    assert_int_equal(b.interval_ns, 60000000000ll);
    /* every array and field comes back as it went in, each from its own place in the entry */
    assert_memory_equal(a.open, b.open, a.n_bars * sizeof(double));
    assert_memory_equal(a.high, b.high, a.n_bars * sizeof(double));
    assert_memory_equal(a.low, b.low, a.n_bars * sizeof(double));
    assert_memory_equal(a.volume, b.volume, a.n_bars * sizeof(double));
    assert_true(a.first_bar > 0); /* the warm-up: a wrong first_bar would misalign the rows */
    assert_int_equal(b.first_bar, a.first_bar);
    assert_string_equal(b.instrument, "es");
    assert_string_equal(b.source, a.source);
    vx_market_close(&b);

    /* a cache that cannot be written (its folder's parent a file): training's open warns and
     * serves the features from memory; `data features` (cache_required) fails, naming why */
    char blocked[160];
    snprintf(blocked, sizeof blocked, "%s/es.csv/cache", dir);
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, blocked, &b, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "feature cache: not written ("));
    assert_int_equal(b.from_cache, 0);
    assert_memory_equal(a.features, b.features, a.rows * VX_MARKET_FEATURES * sizeof(float));
    vx_market_close(&b);
    vx_load_opts must = {.cache_required = 1};
    assert_int_not_equal(vx_market_open(paths, 1, &must, blocked, &b, &e), VX_OK);
    assert_non_null(strstr(e.msg, "es.csv/cache"));

    /* another instrument selection is another key */
    char k1[33], k2[33];
    vx_load_opts other = {.instrument = "ES"};
    assert_int_equal(vx_cache_key(paths, 1, NULL, k1, &e), VX_OK);
    assert_int_equal(vx_cache_key(paths, 1, &other, k2, &e), VX_OK);
    assert_string_equal(k1, a.key);
    assert_string_not_equal(k1, k2);

    /* touching the input (new mtime) misses */
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1700000000, 5}};
    assert_int_equal(utimensat(AT_FDCWD, csv, ts, 0), 0);
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &b, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "feature cache: miss"));
    assert_string_not_equal(b.key, a.key);
    char touched[33];
    snprintf(touched, sizeof touched, "%s", b.key);
    vx_market_close(&b);
    /* one nanosecond later is another mtime too */
    struct timespec later[2] = {{0, UTIME_OMIT}, {1700000000, 6}};
    assert_int_equal(utimensat(AT_FDCWD, csv, later, 0), 0);
    char k_later[33];
    assert_int_equal(vx_cache_key(paths, 1, NULL, k_later, &e), VX_OK);
    assert_string_not_equal(k_later, touched);

    /* same size, same mtime, one byte changed: the content hash misses */
    size_t n;
    uint8_t *d = th_read(csv, &n);
    char *p = strstr((char *)d + 100, ",");
    assert_non_null(p);
    p[1] = p[1] == '4' ? '5' : '4';
    th_write(csv, d, n);
    free(d);
    assert_int_equal(utimensat(AT_FDCWD, csv, ts, 0), 0);
    char k3[33];
    assert_int_equal(vx_cache_key(paths, 1, NULL, k3, &e), VX_OK);
    assert_string_not_equal(k3, touched);
    th_log_stop();
    vx_market_close(&a);
    th_rmtree(dir);
}

/* A DBN market's instrument id comes back from a cache hit as the miss computed it (the header
 * holds it; a hit that dropped it would give 0, a CSV's value). */
static void test_cache_keeps_the_instrument_id(void **state)
{
    (void)state;
    char dir[64], dbn[128], cache[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(dbn, sizeof dbn, "%s/m.dbn", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    vx_series s;
    th_synth(&s, 3, 11, 0.0);
    s.instrument_id = 4242;
    vx_err e;
    assert_int_equal(vx_dbn_write(dbn, &s, 0, &e), VX_OK);
    vx_series_free(&s);
    const char *paths[1] = {dbn};
    vx_market a, b;
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &a, &e), VX_OK);
    assert_int_equal(a.from_cache, 0);
    assert_int_equal(a.instrument_id, 4242);
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &b, &e), VX_OK);
    assert_int_equal(b.from_cache, 1);
    assert_int_equal(b.instrument_id, 4242);
    assert_string_equal(b.instrument, a.instrument);
    vx_market_close(&a);
    vx_market_close(&b);
}

static void test_cache_damaged_entry_is_a_miss(void **state)
{
    (void)state;
    char dir[64], csv[128], cache[128], entry[256];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/es.csv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    write_synth_csv(csv, 2, 6);
    const char *paths[1] = {csv};
    vx_market a;
    vx_err e;
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &a, &e), VX_OK);
    vx_cache_path(cache, a.key, entry, sizeof entry);
    vx_market_close(&a);
    size_t n;
    uint8_t *d = th_read(entry, &n);
    d[n - 3] ^= 0x40; /* one feature bit */
    th_write(entry, d, n);
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &a, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "miss (payload checksum mismatch)"));
    assert_int_equal(a.from_cache, 0);
    vx_market_close(&a);
    /* the miss rewrote the entry; now truncate it */
    free(d);
    d = th_read(entry, &n);
    th_write(entry, d, n - 100);
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &a, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "miss (truncated entry)"));
    vx_market_close(&a);
    th_log_stop();
    free(d);
    th_rmtree(dir);
}

static void test_bad_input_leaves_no_cache(void **state)
{
    (void)state;
    char dir[64], csv[128], cache[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/bad.csv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    th_write_str(csv, "timestamp,open,high,low,close,volume\n2024-01-01,1,2,1,nan,3\n");
    const char *paths[1] = {csv};
    vx_market m;
    vx_err e;
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &m, &e), VX_ERR_VALIDATION);
    assert_non_null(strstr(e.msg, "line 2, field 'close'"));
    assert_int_equal(th_count_files(cache), 0);
    th_rmtree(dir);
}

/* A file over 8 MiB changed in one byte between where a sampled hash would look (its size and
 * mtime kept) is a miss: the whole file is hashed. */
static void test_cache_sees_a_change_anywhere(void **state)
{
    (void)state;
    char dir[64], csv[128], cache[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/es.csv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    /* three days of bars, each line padded with an ignored column to pass 8 MiB */
    write_synth_csv(csv, 3, 9);
    size_t n;
    uint8_t *d = th_read(csv, &n);
    enum { PAD = 7600 };
    char *big = malloc(n + 1200 * (PAD + 1)), *w = big;
    assert_non_null(big);
    for (char *line = (char *)d; line < (char *)d + n;) {
        char *nl = memchr(line, '\n', (size_t)((char *)d + n - line)), *last = nl;
        while (*last != ',') last--;
        memcpy(w, line, (size_t)(last - line)), w += last - line;
        *w++ = ',';
        memset(w, line == (char *)d ? 'n' : 'x', PAD), w += PAD;
        memcpy(w, last, (size_t)(nl + 1 - last)), w += nl + 1 - last;
        line = nl + 1;
    }
    free(d);
    th_write(csv, big, (size_t)(w - big));
    free(big);
    const char *paths[1] = {csv};
    vx_market a, b;
    vx_err e;
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &a, &e), VX_OK);
    struct stat sb;
    assert_int_equal(stat(csv, &sb), 0);
    d = th_read(csv, &n);
    if (n <= (8u << 20)) fail_msg("%zu bytes: not over 8 MiB", n);
    /* the last digit of a volume between the 31st and 32nd of 62 evenly spaced 64 KiB samples */
    size_t step = n / 63, pos = step * 31 + 65536 + 1024;
    while (d[pos] != '\n') pos++;
    assert_true(pos < step * 32);
    size_t bar = 0;
    for (size_t i = 0; i < pos; i++) bar += d[i] == '\n';
    bar -= 1; /* the header line */
    uint8_t *digit = d + pos - 1;
    assert_true(*digit >= '0' && *digit <= '9');
    *digit = *digit == '9' ? '8' : (uint8_t)(*digit + 1);
    double want = a.volume[bar] + (*digit == '8' && a.volume[bar] != 8 ? -1 : 1);
    th_write(csv, d, n);
    free(d);
    struct timespec keep[2] = {sb.st_atim, sb.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, csv, keep, 0), 0);
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &b, &e), VX_OK);
    th_log_stop();
    assert_int_equal(b.from_cache, 0);
    assert_string_not_equal(a.key, b.key);
    assert_true(b.volume[bar] == want);
    vx_market_close(&a);
    vx_market_close(&b);
    th_rmtree(dir);
}

static void hung(int sig)
{
    (void)sig;
    static const char msg[] = "test_features: hung on a FIFO\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

/* A FIFO where the cache entry should be is a miss (opening it would block), and the entry is
 * written over it. */
static void test_cache_entry_fifo_is_a_miss(void **state)
{
    (void)state;
    char dir[64], csv[128], cache[128], entry[256], key[33];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/es.csv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    write_synth_csv(csv, 2, 6);
    const char *paths[1] = {csv};
    vx_err e;
    assert_int_equal(vx_cache_key(paths, 1, NULL, key, &e), VX_OK);
    assert_int_equal(vx_mkdirs(cache, &e), VX_OK);
    vx_cache_path(cache, key, entry, sizeof entry);
    assert_int_equal(mkfifo(entry, 0600), 0);
    signal(SIGALRM, hung);
    alarm(20);
    vx_market m;
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &m, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "miss (entry is not a regular file)"));
    vx_market_close(&m);
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &m, &e), VX_OK);
    assert_int_equal(m.from_cache, 1);
    alarm(0);
    th_log_stop();
    vx_market_close(&m);
    th_rmtree(dir);
}

static uint64_t rd_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* An entry whose bar count wraps the layout's arithmetic (n + 2^61 bars: times 8 bytes it is n
 * times 8 again), with its header hash made to match, is a miss: counts are bounded by the file's
 * size before sizes are computed from them. */
static void test_cache_entry_with_wrapping_count_is_a_miss(void **state)
{
    (void)state;
    char dir[64], csv[128], cache[128], entry[256];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/es.csv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    write_synth_csv(csv, 2, 6);
    const char *paths[1] = {csv};
    vx_market a;
    vx_err e;
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &a, &e), VX_OK);
    vx_cache_path(cache, a.key, entry, sizeof entry);
    size_t n;
    uint8_t *d = th_read(entry, &n);
    /* cache.c's header: n_bars at byte 56, cols at 80, the header's own hash at 776 */
    enum { N_BARS = 56, COLS = 80, HEADER_HASH = 776 };
    assert_true(rd_u64(d + N_BARS) == a.n_bars);
    assert_true(rd_u64(d + COLS) == VX_MARKET_FEATURES);
    assert_true(rd_u64(d + HEADER_HASH) == XXH3_64bits(d, HEADER_HASH));
    uint64_t wrapped = a.n_bars + (1ull << 61);
    memcpy(d + N_BARS, &wrapped, 8);
    uint64_t hh = XXH3_64bits(d, HEADER_HASH);
    memcpy(d + HEADER_HASH, &hh, 8);
    th_write(entry, d, n);
    free(d);
    vx_market_close(&a);
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &a, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "miss (inconsistent counts)"));
    th_log_stop();
    assert_int_equal(a.from_cache, 0);
    assert_int_equal(a.n_bars, 2 * 390);
    vx_market_close(&a);
    th_rmtree(dir);
}

/* Every check on an entry's header is a miss with its own reason, even where the header's own
 * hash was made to match the edit (as a tool or another build could write it): another cache
 * format, another feature version, another key, a first bar that misaligns the feature rows, a
 * bad signal flag, arrays not where the layout puts them; and a header edited without its hash
 * is "damaged". Header offsets as in cache.c's cache_header. */
static void test_cache_header_checks(void **state)
{
    (void)state;
    char dir[64], csv[128], cache[128], entry[256];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/es.csv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    write_synth_csv(csv, 2, 6);
    const char *paths[1] = {csv};
    vx_market a;
    vx_err e;
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &a, &e), VX_OK);
    vx_cache_path(cache, a.key, entry, sizeof entry);
    vx_market_close(&a);
    size_t n;
    uint8_t *good = th_read(entry, &n), *d = malloc(n);
    assert_non_null(d);
    enum {
        FORMAT = 8,
        FEATURE_VERSION = 12,
        KEY = 16,
        FIRST_BAR = 64,
        HAS_SIGNAL = 100,
        INSTRUMENT = 104,
        OFF = 696,
        HEADER_HASH = 776
    };
    assert_true(rd_u64(good + HEADER_HASH) == XXH3_64bits(good, HEADER_HASH));
    struct {
        size_t at, bytes;
        uint64_t value;
        int rehash;
        const char *why;
    } edits[] = {
        {FORMAT, 4, 1, 1, "written by another cache format"},
        {FEATURE_VERSION, 4, VX_FEATURE_VERSION + 1, 1, "written by another feature version"},
        {KEY, 1, good[KEY] == 'f' ? 'e' : 'f', 1, "key mismatch"},
        {FIRST_BAR, 8, rd_u64(good + FIRST_BAR) + 1, 1, "inconsistent counts"},
        {HAS_SIGNAL, 4, 2, 1, "inconsistent signal flag"},
        {OFF + 8, 8, rd_u64(good + OFF + 16), 1, "inconsistent layout"}, /* open at high's */
        {INSTRUMENT, 1, 'X', 0, "damaged header"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        memcpy(d, good, n);
        memcpy(d + edits[i].at, &edits[i].value, edits[i].bytes); /* little-endian */
        if (edits[i].rehash) {
            uint64_t hh = XXH3_64bits(d, HEADER_HASH);
            memcpy(d + HEADER_HASH, &hh, 8);
        }
        th_write(entry, d, n);
        th_log_start();
        assert_int_equal(vx_market_open(paths, 1, NULL, cache, &a, &e), VX_OK);
        char want[96];
        snprintf(want, sizeof want, "miss (%s)", edits[i].why);
        if (!strstr(th_log_text(), want)) fail_msg("edit %zu: %s", i, th_log_text());
        th_log_stop();
        assert_int_equal(a.from_cache, 0);
        assert_string_equal(a.instrument, "es");
        vx_market_close(&a);
    }
    /* an entry of the right key but without the planted signal is a miss for a synthetic market
     * (this market's entry, relabelled with the synthetic market's key) */
    vx_synth_cfg c;
    vx_synth_default(&c);
    c.days = VX_SYNTH_CACHE_MIN_DAYS, c.seed = 5;
    char skey[33], spath[256];
    vx_synth_cache_key(&c, skey);
    vx_cache_path(cache, skey, spath, sizeof spath);
    memcpy(d, good, n);
    memset(d + KEY, 0, 40);
    memcpy(d + KEY, skey, 32);
    uint64_t hh = XXH3_64bits(d, HEADER_HASH);
    memcpy(d + HEADER_HASH, &hh, 8);
    th_write(spath, d, n);
    th_log_start();
    assert_int_equal(vx_market_synth(&c, cache, &a, &e), VX_OK);
    if (!strstr(th_log_text(), "miss (entry without the planted signal)"))
        fail_msg("%s", th_log_text());
    th_log_stop();
    assert_int_equal(a.from_cache, 0);
    assert_non_null(a.signal);
    assert_int_equal(a.n_bars, (size_t)VX_SYNTH_CACHE_MIN_DAYS * 390);
    vx_market_close(&a);
    free(d);
    free(good);
    th_rmtree(dir);
}

/* A cache folder that cannot be made (a file is in its place) fails the open rather than
 * silently leaving every later run to recompute. */
static void test_cache_write_failure_is_an_error_when_required(void **state)
{
    (void)state;
    char dir[64], csv[128], cache[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/es.csv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    write_synth_csv(csv, 2, 6);
    th_write_str(cache, "a file, not a folder\n");
    const char *paths[1] = {csv};
    vx_market m;
    vx_err e;
    th_log_start();
    vx_load_opts must = {.cache_required = 1}; /* `vixen data features` */
    assert_int_equal(vx_market_open(paths, 1, &must, cache, &m, &e), VX_ERR_IO);
    th_log_stop();
    assert_non_null(strstr(e.msg, "not a folder"));
    th_rmtree(dir);
}

/* ---- synthetic markets in the cache --------------------------------------------------------- */

/* The generator's numbers for one small market, pinned beside VX_SYNTH_VERSION: a cached
 * synthetic market is keyed by the version, so a change to the numbers without a new version
 * would serve stale entries. When this fails on purpose, bump VX_SYNTH_VERSION and the pin. */
#define PIN_CLOSE 4639106.75
#define PIN_VOLUME 1571538.0
#define PIN_SIGNAL 124.98898562351408
static void test_synth_numbers_pinned_to_their_version(void **state)
{
    (void)state;
    vx_synth_cfg c;
    vx_synth_default(&c);
    c.days = 3, c.seed = 7;
    vx_series s = {0};
    double *signal = NULL;
    vx_err e;
    assert_int_equal(vx_synth_generate(&c, &s, &signal, &e), VX_OK);
    /* sums, not a checksum of the bytes: another libm may round a log or a cos the other way,
     * which moves a sum by far less than 1e-9 of itself (a close by a tick: 5e-8 of the
     * closes' sum), while any change to the generator moves it by far more */
    double close = 0, volume = 0, sig = 0;
    for (size_t i = 0; i < s.n; i++) close += s.close[i], volume += s.volume[i], sig += signal[i];
    printf("synth version %d, days 3, seed 7: %zu bars; sums: close %.17g volume %.17g signal "
           "%.17g\n",
           VX_SYNTH_VERSION, s.n, close, volume, sig);
    assert_int_equal(VX_SYNTH_VERSION, 1);
    assert_int_equal(s.n, 1170);
    assert_true(fabs(close / PIN_CLOSE - 1) < 1e-6);
    assert_true(fabs(volume / PIN_VOLUME - 1) < 1e-6);
    assert_true(fabs(sig / PIN_SIGNAL - 1) < 1e-6);
    vx_series_free(&s);
    free(signal);
}

/* A synthetic market from the cache is the market synthesised: bars, features, the planted signal
 * and its strength byte for byte; every setting is part of the key; a short market writes no
 * entry; a damaged entry is a miss that the market, made again, rewrites. */
static void test_synth_market_cached(void **state)
{
    (void)state;
    char dir[64], cache[128], entry[256];
    th_tmpdir(dir, sizeof dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    vx_synth_cfg c;
    vx_synth_default(&c);
    c.days = VX_SYNTH_CACHE_MIN_DAYS, c.seed = 11, c.signal_strength = 0.3;
    vx_market a, b;
    vx_err e;
    th_log_start();
    assert_int_equal(vx_market_synth(&c, cache, &a, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "feature cache: miss (no entry for this key)"));
    assert_int_equal(a.from_cache, 0);
    assert_int_equal(th_count_files(cache), 1);
    th_log_start();
    assert_int_equal(vx_market_synth(&c, cache, &b, &e), VX_OK);
    assert_int_equal(b.from_cache, 1);
    assert_string_equal(a.key, b.key);
    assert_int_equal(a.n_bars, (size_t)VX_SYNTH_CACHE_MIN_DAYS * 390);
    assert_int_equal(a.n_bars, b.n_bars);
    assert_int_equal(a.rows, b.rows);
    assert_memory_equal(a.ts, b.ts, a.n_bars * sizeof(int64_t));
    assert_memory_equal(a.open, b.open, a.n_bars * sizeof(double));
    assert_memory_equal(a.close, b.close, a.n_bars * sizeof(double));
    assert_memory_equal(a.volume, b.volume, a.n_bars * sizeof(double));
    assert_memory_equal(a.features, b.features, a.rows * VX_MARKET_FEATURES * sizeof(float));
    assert_non_null(b.signal);
    assert_memory_equal(a.signal, b.signal, a.n_bars * sizeof(double));
    assert_true(b.signal_strength == 0.3);
    assert_string_equal(a.source, b.source);
    vx_market_close(&b);

    /* every setting is in the key: each one changed alone gives another key */
    char k0[33], k[33];
    vx_synth_cache_key(&c, k0);
    assert_string_equal(k0, a.key);
    for (int i = 0; i < 14; i++) {
        vx_synth_cfg d = c;
        double *f[] = {&d.start_price, &d.tick,  &d.bar_vol,         &d.garch_alpha,
                       &d.garch_beta,  &d.t_dof, &d.intraday_u,      &d.overnight_vol,
                       &d.signal_phi,  &d.drift, &d.signal_strength, &d.base_volume};
        if (i < 12) *f[i] = *f[i] * 1.0000001 + 1e-12;
        else if (i == 12) d.seed++;
        else d.days++;
        vx_synth_cache_key(&d, k);
        assert_string_not_equal(k, k0);
    }

    /* shorter than VX_SYNTH_CACHE_MIN_DAYS: made, not written */
    vx_synth_cfg shortm = c;
    shortm.days = VX_SYNTH_CACHE_MIN_DAYS - 1;
    assert_int_equal(vx_market_synth(&shortm, cache, &b, &e), VX_OK);
    assert_int_equal(th_count_files(cache), 1);
    assert_non_null(b.signal);
    vx_market_close(&b);

    /* one bit of the signal flipped: a miss, and the entry is written again */
    vx_cache_path(cache, a.key, entry, sizeof entry);
    size_t n;
    uint8_t *d = th_read(entry, &n);
    d[n - 5] ^= 0x10; /* the signal is the entry's last array */
    th_write(entry, d, n);
    free(d);
    th_log_start();
    assert_int_equal(vx_market_synth(&c, cache, &b, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "miss (payload checksum mismatch)"));
    assert_int_equal(b.from_cache, 0);
    assert_memory_equal(a.signal, b.signal, a.n_bars * sizeof(double));
    vx_market_close(&b);
    assert_int_equal(vx_market_synth(&c, cache, &b, &e), VX_OK);
    assert_int_equal(b.from_cache, 1);
    vx_market_close(&b);

    /* a bad setting is an error naming it, before any cache work */
    vx_synth_cfg bad = c;
    bad.garch_beta = 2;
    assert_int_equal(vx_market_synth(&bad, cache, &b, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "garch_beta"));
    th_log_stop();
    vx_market_close(&a);
    th_rmtree(dir);
}

int run_feature_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_features_range_and_shape),
        cmocka_unit_test(test_features_report_progress),
        cmocka_unit_test(test_features_are_causal),
        cmocka_unit_test(test_features_scale_free),
        cmocka_unit_test(test_features_known_values),
        cmocka_unit_test(test_cache_hit_and_misses),
        cmocka_unit_test(test_cache_keeps_the_instrument_id),
        cmocka_unit_test(test_cache_damaged_entry_is_a_miss),
        cmocka_unit_test(test_bad_input_leaves_no_cache),
        cmocka_unit_test(test_cache_sees_a_change_anywhere),
        cmocka_unit_test(test_cache_entry_fifo_is_a_miss),
        cmocka_unit_test(test_cache_entry_with_wrapping_count_is_a_miss),
        cmocka_unit_test(test_cache_header_checks),
        cmocka_unit_test(test_cache_write_failure_is_an_error_when_required),
        cmocka_unit_test(test_synth_numbers_pinned_to_their_version),
        cmocka_unit_test(test_synth_market_cached),
    };
    return cmocka_run_group_tests_name("data_features", tests, NULL, NULL);
}

/* bench_data.c — parsing, feature and cache benchmarks on the synthetic market.
 *
 * Inputs are written to real files first (CSV, DBN, DBN+zstd) and read into memory, so the timed
 * part is parsing alone; the cache benchmark times vx_market_open on a hit, which includes the
 * cache key (hashing the input file), mapping, and the payload checksum over every byte.
 *
 * dbn_parse, the row with the target, parses into a fresh series each repetition, first-touch
 * page faults included: that is what `vixen train FILE.dbn` does. dbn_parse_warm reuses one
 * series already sized — the parser's own speed, with no target — so the two together say how
 * much of a load is the parser and how much is fresh memory. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

static double best_of(int reps, double (*fn)(void *), void *ctx)
{
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double s = fn(ctx);
        if (s < 0) return -1;
        if (s < best) best = s;
    }
    return best;
}

typedef struct {
    const char *name;
    const uint8_t *buf;
    size_t n;
    vx_series *warm; /* when set: parse into this already-sized series (no allocation timed) */
    const vx_series *series;
    const char *path;
    const char *cache;
    size_t bars;
} ctx_t;

static double run_csv(void *p)
{
    ctx_t *c = p;
    vx_series s = {0};
    vx_err e;
    uint64_t t0 = vx_now_ns();
    vx_status st = vx_csv_parse(c->name, (const char *)c->buf, c->n, NULL, &s, &e);
    double secs = vx_seconds_since(t0);
    c->bars = s.n;
    vx_series_free(&s);
    return st ? -1 : secs;
}

static double run_dbn(void *p)
{
    ctx_t *c = p;
    vx_series fresh = {0}, *s = c->warm ? c->warm : &fresh;
    s->n = 0;
    vx_err e;
    uint64_t t0 = vx_now_ns();
    vx_status st = vx_dbn_parse(c->name, c->buf, c->n, NULL, s, NULL, &e);
    double secs = vx_seconds_since(t0);
    c->bars = s->n;
    vx_series_free(&fresh);
    return st ? -1 : secs;
}

static double run_features(void *p)
{
    ctx_t *c = p;
    vx_features f;
    vx_err e;
    uint64_t t0 = vx_now_ns();
    vx_status st = vx_features_compute(c->series, &f, &e);
    double secs = vx_seconds_since(t0);
    vx_features_free(&f);
    return st ? -1 : secs;
}

static double run_cache(void *p)
{
    ctx_t *c = p;
    vx_market m;
    vx_err e;
    const char *paths[1] = {c->path};
    uint64_t t0 = vx_now_ns();
    vx_status st = vx_market_open(paths, 1, NULL, c->cache, &m, &e);
    double secs = vx_seconds_since(t0);
    int hit = m.from_cache;
    if (!st) vx_market_close(&m);
    return (st || !hit) ? -1 : secs;
}

static void add(vx_bench_result *r, int *n, int max, const char *name, const char *unit,
                double items, double secs, double target, int lower)
{
    if (*n >= max) return;
    vx_bench_result *x = &r[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->unit, sizeof x->unit, "%s", unit);
    x->items = items;
    x->seconds = secs;
    x->value = lower ? secs * 1e3 : items / secs;
    x->target = target;
    x->lower_is_better = lower;
}

int vx_bench_data(size_t bars, const char *tmp, vx_bench_result *out, int max, FILE *log)
{
    vx_synth_cfg cfg;
    vx_synth_default(&cfg);
    cfg.days = (int)((bars + 389) / 390);
    vx_series s = {0};
    vx_err e;
    int n = 0;
    char csv[1024], dbn[1024], zst[1024], cache[1024];
    snprintf(csv, sizeof csv, "%s/bench.csv", tmp);
    snprintf(dbn, sizeof dbn, "%s/bench.dbn", tmp);
    snprintf(zst, sizeof zst, "%s/bench.dbn.zst", tmp);
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    if (log) fprintf(log, "bench: generating %d days of synthetic bars\n", cfg.days);
    if (vx_mkdirs(tmp, &e) || vx_synth_generate(&cfg, &s, NULL, &e) || vx_csv_write(csv, &s, &e) ||
        vx_dbn_write(dbn, &s, 0, &e) || vx_dbn_write(zst, &s, 3, &e)) {
        if (log) fprintf(log, "bench: %s\n", e.msg);
        vx_series_free(&s);
        return -1;
    }
    /* dbn_parse: into fresh memory each time, as a real load; dbn_parse_warm: into a series
     * already sized (no allocation or page fault timed) */
    const char *files[4] = {csv, dbn, dbn, zst};
    const char *names[4] = {"csv_parse", "dbn_parse", "dbn_parse_warm", "dbn_zstd_parse"};
    double targets[4] = {1e6, 2e7, 0, 0};
    vx_series warm = {0};
    if (vx_series_reserve(&warm, s.n, &e)) {
        vx_series_free(&s);
        return -1;
    }
    for (int k = 0; k < 4; k++) {
        uint8_t *buf;
        size_t len;
        if (vx_file_read_all(files[k], &buf, &len, &e)) continue;
        ctx_t c = {.name = files[k], .buf = buf, .n = len, .warm = k == 2 ? &warm : NULL};
        if (log) fprintf(log, "bench: %s (%zu bytes)\n", names[k], len);
        double secs = best_of(k == 0 ? 3 : 9, k == 0 ? run_csv : run_dbn, &c);
        free(buf);
        if (secs > 0) add(out, &n, max, names[k], "bars/s", (double)c.bars, secs, targets[k], 0);
    }
    vx_series_free(&warm);
    ctx_t fc = {.series = &s};
    if (log) fprintf(log, "bench: features\n");
    double fs = best_of(2, run_features, &fc);
    if (fs > 0) add(out, &n, max, "features", "bars/s", (double)s.n, fs, (double)s.n / 2.0, 0);
    /* cache: one miss to write the entry, then timed hits */
    vx_market m;
    const char *paths[1] = {csv};
    if (log) fprintf(log, "bench: cache write and load\n");
    if (!vx_market_open(paths, 1, NULL, cache, &m, &e)) {
        vx_market_close(&m);
        ctx_t cc = {.path = csv, .cache = cache};
        double cs = best_of(5, run_cache, &cc);
        if (cs > 0) add(out, &n, max, "cache_load", "ms", (double)s.n, cs, 50.0, 1);
    }
    vx_series_free(&s);
    return n;
}

void vx_bench_print_json(FILE *f, const vx_bench_result *r, int n)
{
    fprintf(f, "{\"results\": [\n");
    for (int i = 0; i < n; i++) {
        int met = r[i].target <= 0       ? -1
                  : r[i].lower_is_better ? r[i].value <= r[i].target
                                         : r[i].value >= r[i].target;
        fprintf(f,
                "  {\"name\": \"%s\", \"items\": %.0f, \"seconds\": %.6f, \"value\": %.6g, "
                "\"unit\": \"%s\", \"target\": %.6g, \"met\": %s}%s\n",
                r[i].name, r[i].items, r[i].seconds, r[i].value, r[i].unit, r[i].target,
                met < 0 ? "null" : (met ? "true" : "false"), i + 1 < n ? "," : "");
    }
    fprintf(f, "]}\n");
}

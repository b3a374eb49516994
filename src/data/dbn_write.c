/* dbn_write.c — writes a series as a DBN version 3 OHLCV stream, optionally zstd-compressed.
 *
 * Used by `vixen data synth --out FILE.dbn[.zst]`, by the benchmarks (a large DBN input) and by
 * the tests (valid streams to damage on purpose). One instrument, raw-symbol input mapped to an
 * instrument id, metadata padded to a multiple of 8 bytes as v3 does. */
#include "vixen/data.h"
#include "data_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define SYM_LEN 71
#define DBN_OHLCV_LEN_WORDS 14

typedef struct {
    uint8_t *b;
    size_t n, cap;
} buf;

static int put(buf *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 4096;
        while (cap < w->n + n) cap *= 2;
        uint8_t *nb = realloc(w->b, cap);
        if (!nb) return -1;
        w->b = nb;
        w->cap = cap;
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
    return 0;
}
static int put8(buf *w, uint8_t v) { return put(w, &v, 1); }
static int put16(buf *w, uint16_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    return put(w, b, 2);
}
static int put32(buf *w, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return put(w, b, 4);
}
static int put64(buf *w, uint64_t v)
{
    return put32(w, (uint32_t)v) || put32(w, (uint32_t)(v >> 32));
}
static int put_sym(buf *w, const char *s)
{
    char f[SYM_LEN] = {0};
    size_t n = strlen(s);
    memcpy(f, s, n < SYM_LEN - 1 ? n : SYM_LEN - 1);
    return put(w, f, SYM_LEN);
}

static uint32_t ymd(int64_t ts)
{
    int y;
    unsigned m, d;
    int64_t days = ts >= 0 ? ts / 86400000000000ll : -((-ts + 86399999999999ll) / 86400000000000ll);
    vx_civil_from_days(days, &y, &m, &d);
    return (uint32_t)(y * 10000 + (int)m * 100 + (int)d);
}

vx_status vx_dbn_write(const char *path, const vx_series *s, int zstd_level, vx_err *e)
{
    uint8_t rtype;
    uint16_t schema;
    switch (s->interval_ns) {
    case 1000000000ll: rtype = 0x20, schema = 5; break;
    case 60000000000ll: rtype = 0x21, schema = 6; break;
    case 3600000000000ll: rtype = 0x22, schema = 7; break;
    case 86400000000000ll: rtype = 0x23, schema = 8; break;
    default:
        return vx_err_line(e, VX_ERR_ARG, path, -1, "interval",
                           "DBN has no OHLCV schema for a %lld ns bar interval",
                           (long long)s->interval_ns);
    }
    if (s->n == 0) return vx_err_line(e, VX_ERR_ARG, path, -1, "", "no bars to write");
    uint32_t id = s->instrument_id ? s->instrument_id : 1;
    const char *sym = s->instrument[0] ? s->instrument : "SYNTH";
    buf w = {0};
    int bad = put(&w, "DBN", 3) || put8(&w, 3) || put32(&w, 0); /* length patched below */
    char dataset[16] = "VIXEN.SYNTH";
    bad |= put(&w, dataset, 16) || put16(&w, schema) || put64(&w, (uint64_t)s->ts[0]) ||
           put64(&w, (uint64_t)(s->ts[s->n - 1] + s->interval_ns)) || put64(&w, 0) ||
           put8(&w, 1) /* stype_in raw_symbol */ || put8(&w, 0) /* stype_out instrument_id */ ||
           put8(&w, 0) /* ts_out */ || put16(&w, SYM_LEN);
    uint8_t reserved[53] = {0};
    bad |= put(&w, reserved, 53) || put32(&w, 0); /* schema_definition_length */
    char idtxt[16];
    snprintf(idtxt, sizeof idtxt, "%u", id);
    bad |= put32(&w, 1) || put_sym(&w, sym) || put32(&w, 0) || put32(&w, 0) || put32(&w, 1) ||
           put_sym(&w, sym) || put32(&w, 1) || put32(&w, ymd(s->ts[0])) ||
           put32(&w, ymd(s->ts[s->n - 1]) + 1) || put_sym(&w, idtxt);
    while (!bad && w.n % 8) bad |= put8(&w, 0);
    if (!bad) {
        uint32_t len = (uint32_t)(w.n - 8);
        memcpy(w.b + 4,
               (uint8_t[4]){(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                            (uint8_t)(len >> 24)},
               4);
    }
    for (size_t i = 0; i < s->n && !bad; i++) {
        bad |= put8(&w, DBN_OHLCV_LEN_WORDS) || put8(&w, rtype) || put16(&w, 1) || put32(&w, id) ||
               put64(&w, (uint64_t)s->ts[i]) || put64(&w, (uint64_t)llround(s->open[i] * 1e9)) ||
               put64(&w, (uint64_t)llround(s->high[i] * 1e9)) ||
               put64(&w, (uint64_t)llround(s->low[i] * 1e9)) ||
               put64(&w, (uint64_t)llround(s->close[i] * 1e9)) ||
               put64(&w, (uint64_t)llround(s->volume[i]));
    }
    if (bad) {
        free(w.b);
        return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory building the DBN stream", path);
    }
    const uint8_t *data = w.b;
    size_t n = w.n;
    uint8_t *z = NULL;
    if (zstd_level > 0) {
        size_t cap = ZSTD_compressBound(w.n);
        z = malloc(cap);
        size_t zn = z ? ZSTD_compress(z, cap, w.b, w.n, zstd_level) : 0;
        if (!z || ZSTD_isError(zn)) {
            free(z);
            free(w.b);
            return vx_err_set(e, VX_ERR_NOMEM, "%s: zstd compression failed", path);
        }
        data = z;
        n = zn;
    }
    vx_atomic_file af;
    vx_status st = vx_atomic_open(&af, path, e);
    if (!st) {
        if (fwrite(data, 1, n, af.f) != n) {
            vx_atomic_abort(&af);
            st = vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
        } else {
            st = vx_atomic_commit(&af, e);
        }
    }
    free(z);
    free(w.b);
    return st;
}

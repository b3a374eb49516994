/* test_dbn.c — the DBN reader against the upstream fixtures (exact integers), every kind of
 * corruption the issue lists, instrument selection, the writer's round trip, and the bounds on
 * hostile input: zstd bombs, frames that lie about their size, huge symbol tables. */
#include "helpers.h"
#include "data_tests.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zstd.h>
#include "vixen/philox.h"

#define TS1 1609160400000000000ll
#define TS2 1609160460000000000ll

static uint8_t *fixture(const char *name, size_t *n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", VX_FIXTURES, name);
    return th_read(path, n);
}

/* The plain v2 fixture: 353 bytes of prelude+metadata, then two 56-byte records. */
static uint8_t *plain_v2(size_t *n)
{
    uint8_t *b = fixture("test_data.ohlcv-1m.dbn", n);
    assert_int_equal(*n, 465);
    return b;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static vx_status parse(const uint8_t *b, size_t n, const char *instrument, vx_series *s,
                       vx_dbn_info *info, vx_err *e)
{
    memset(s, 0, sizeof *s);
    vx_load_opts o = {.instrument = instrument};
    return vx_dbn_parse("t.dbn", b, n, &o, s, info, e);
}

static void test_fixtures_exact(void **state)
{
    (void)state;
    const char *names[3] = {"test_data.ohlcv-1m.v1.dbn.zst", "test_data.ohlcv-1m.dbn",
                            "test_data.ohlcv-1m.v3.dbn.zst"};
    int versions[3] = {1, 2, 3}, compressed[3] = {1, 0, 1};
    for (int i = 0; i < 3; i++) {
        vx_series s = {0};
        vx_dbn_info info;
        vx_err e;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", VX_FIXTURES, names[i]);
        vx_status st = vx_dbn_read(path, NULL, &s, &info, &e);
        if (st) fail_msg("%s: %s", names[i], e.msg);
        assert_int_equal(info.version, versions[i]);
        assert_int_equal(info.compressed, compressed[i]);
        assert_string_equal(info.dataset, "GLBX.MDP3");
        assert_int_equal(info.schema, 6);
        assert_int_equal(info.stype_in, 1);
        assert_int_equal(info.stype_out, 0);
        assert_int_equal(info.ts_out, 0);
        assert_int_equal(info.start, 1609160400000000000ull);
        assert_int_equal(info.end, 1609200000000000000ull);
        assert_int_equal(info.records, 2);
        assert_int_equal(info.n_instruments, 1);
        assert_int_equal(info.instruments[0].id, 5482);
        assert_int_equal(info.instruments[0].bars, 2);
        assert_string_equal(info.instruments[0].symbol, "ESH1");
        assert_int_equal(info.n_mappings, 1);
        assert_string_equal(info.mappings[0].raw, "ESH1");
        assert_int_equal(s.n, 2);
        assert_int_equal(s.ts[0], TS1);
        assert_int_equal(s.ts[1], TS2);
        int64_t raw[2][4] = {
            {372025000000000ll, 372150000000000ll, 372025000000000ll, 372100000000000ll},
            {372100000000000ll, 372150000000000ll, 372100000000000ll, 372150000000000ll}};
        for (int k = 0; k < 2; k++) {
            double px[4] = {s.open[k], s.high[k], s.low[k], s.close[k]};
            for (int f = 0; f < 4; f++) {
                assert_true(px[f] == (double)raw[k][f] / 1e9);
                assert_int_equal(llround(px[f] * 1e9), raw[k][f]);
            }
        }
        assert_true(s.volume[0] == 353 && s.volume[1] == 152);
        assert_string_equal(s.instrument, "ESH1");
        assert_int_equal(s.instrument_id, 5482);
        assert_int_equal(s.interval_ns, 60000000000ll);
        vx_series_free(&s);
    }
    /* decompressed sizes from PROVENANCE.md */
    size_t n, pn;
    uint8_t *z = fixture("test_data.ohlcv-1m.v3.dbn.zst", &n), *p;
    vx_err e;
    assert_int_equal(n, 166);
    assert_int_equal(vx_zstd_decompress("v3", z, n, 0, &p, &pn, &e), VX_OK);
    assert_int_equal(pn, 472);
    assert_int_equal(p[4] | p[5] << 8, 352);
    free(z), free(p);
    z = fixture("test_data.ohlcv-1m.v1.dbn.zst", &n);
    assert_int_equal(vx_zstd_decompress("v1", z, n, 0, &p, &pn, &e), VX_OK);
    assert_int_equal(pn, 318);
    free(z), free(p);
}

typedef struct {
    const char *what;
    vx_status status;
    int64_t record, offset;
    const char *field, *words;
} expect;

static void check_err(const uint8_t *b, size_t n, expect x)
{
    vx_series s;
    vx_err e;
    vx_status st = parse(b, n, NULL, &s, NULL, &e);
    vx_series_free(&s);
    if (st != x.status) fail_msg("%s: status %d (%s)", x.what, st, e.msg);
    if (e.record != x.record || e.offset != x.offset)
        fail_msg("%s: record %lld byte %lld, message %s", x.what, (long long)e.record,
                 (long long)e.offset, e.msg);
    assert_string_equal(e.field, x.field);
    if (!strstr(e.msg, x.words)) fail_msg("%s: '%s' lacks '%s'", x.what, e.msg, x.words);
    assert_true(strncmp(e.msg, "t.dbn: ", 7) == 0);
}

static void test_corrupt_streams(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b = plain_v2(&n), *c = malloc(n);
    /* truncated inside the second record */
    check_err(b, 353 + 56 + 20,
              (expect){"truncated", VX_ERR_FORMAT, 2, 409, "length", "runs past the end"});
    check_err(b, 353 + 56 + 10,
              (expect){"short header", VX_ERR_FORMAT, 2, 409, "length", "truncated record header"});
    check_err(b, 300,
              (expect){"short metadata", VX_ERR_FORMAT, -1, 4, "length", "runs past the end"});
    memcpy(c, b, n), c[0] = 'X';
    check_err(c, n, (expect){"magic", VX_ERR_FORMAT, -1, 0, "magic", "bad magic"});
    memcpy(c, b, n), c[3] = 4;
    check_err(c, n, (expect){"v4", VX_ERR_UNSUPPORTED, -1, 3, "version", "version 4"});
    memcpy(c, b, n), c[3] = 0;
    check_err(c, n, (expect){"dbz", VX_ERR_UNSUPPORTED, -1, 3, "version", "DBZ"});
    memcpy(c, b, n), c[353 + 56] = 0;
    check_err(c, n, (expect){"length 0", VX_ERR_FORMAT, 2, 409, "length", "record length 0"});
    memcpy(c, b, n), c[353] = 100;
    check_err(c, n, (expect){"past end", VX_ERR_FORMAT, 1, 353, "length", "runs past the end"});
    memcpy(c, b, n), put64(c + 353 + 16, (uint64_t)INT64_MAX);
    check_err(c, n, (expect){"undef", VX_ERR_VALIDATION, 1, 353, "open", "undefined price"});
    memcpy(c, b, n), put64(c + 409 + 24, 372000000000000ull); /* high below low */
    check_err(c, n, (expect){"high<low", VX_ERR_VALIDATION, 2, 409, "high", "below"});
    memcpy(c, b, n), put64(c + 409 + 8, (uint64_t)TS1 - 60000000000ull);
    check_err(c, n, (expect){"unsorted", VX_ERR_VALIDATION, 2, 409, "ts_event", "earlier"});
    memcpy(c, b, n), put64(c + 409 + 8, (uint64_t)TS1);
    check_err(c, n, (expect){"duplicate", VX_ERR_VALIDATION, 2, 409, "ts_event", "duplicate"});
    memcpy(c, b, n), c[409 + 1] = 0x20;
    check_err(c, n, (expect){"mixed", VX_ERR_VALIDATION, 2, 409, "rtype", "mixed"});
    /* an OHLCV rtype in a record too short for the body (48 bytes of 56) */
    memcpy(c, b, n), c[353] = 12;
    check_err(c, n, (expect){"short bar", VX_ERR_FORMAT, 1, 353, "length", "48 bytes (56 needed)"});
    /* ts_event past INT64_MAX would wrap to a time before 1970 */
    memcpy(c, b, n), put64(c + 353 + 8, 1ull << 63);
    check_err(c, n, (expect){"ts", VX_ERR_VALIDATION, 1, 353, "ts_event", "out of range"});
    /* metadata: an embedded schema definition (unsupported), a length below the fixed 104
     * bytes, a symbol length of 0 (v2) */
    memcpy(c, b, n), c[108] = 1;
    check_err(
        c, n,
        (expect){"schema def", VX_ERR_FORMAT, -1, 108, "schema_definition_length", "must be 0"});
    memcpy(c, b, n), put32(c + 4, 100);
    check_err(c, n, (expect){"meta 100", VX_ERR_FORMAT, -1, 4, "length", "too short"});
    memcpy(c, b, n), c[53] = c[54] = 0;
    check_err(c, n, (expect){"sym len 0", VX_ERR_FORMAT, -1, 53, "symbol_cstr_len", "implausible"});
    free(c);
    free(b);

    /* zstd damage: a flipped block, a truncated frame, a skippable frame first (DBZ) */
    uint8_t *z = fixture("test_data.ohlcv-1m.v3.dbn.zst", &n);
    c = malloc(n + 16);
    memcpy(c, z, n);
    for (size_t i = 30; i < 60; i++) c[i] ^= 0x5A;
    vx_series s;
    vx_err e;
    assert_int_equal(parse(c, n, NULL, &s, NULL, &e), VX_ERR_FORMAT);
    assert_string_equal(e.field, "zstd");
    assert_non_null(strstr(e.msg, "zstd"));
    vx_series_free(&s);
    assert_int_equal(parse(z, n - 12, NULL, &s, NULL, &e), VX_ERR_FORMAT);
    assert_string_equal(e.field, "zstd");
    vx_series_free(&s);
    uint8_t skip[8] = {0x50, 0x2A, 0x4D, 0x18, 0, 0, 0, 0};
    memcpy(c, skip, 8), memcpy(c + 8, z, n);
    assert_int_equal(parse(c, n + 8, NULL, &s, NULL, &e), VX_ERR_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "DBZ"));
    vx_series_free(&s);
    free(c);
    free(z);
}

static void test_multi_frame_and_skipped_records(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b = plain_v2(&n);
    /* two zstd frames back to back decode as one stream */
    size_t cap = ZSTD_compressBound(n) * 2, half = 400;
    uint8_t *z = malloc(cap);
    size_t z1 = ZSTD_compress(z, cap, b, half, 1);
    size_t z2 = ZSTD_compress(z + z1, cap - z1, b + half, n - half, 1);
    assert_false(ZSTD_isError(z1) || ZSTD_isError(z2));
    vx_series s;
    vx_dbn_info info;
    vx_err e;
    assert_int_equal(parse(z, z1 + z2, NULL, &s, &info, &e), VX_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(info.compressed, 1);
    vx_series_free(&s);
    free(z);
    /* a 16-byte record of another type, and a first bar with ts_out's 8 extra bytes */
    uint8_t *c = calloc(1, n + 16 + 8);
    memcpy(c, b, 353);
    uint8_t other[16] = {4, 0x16, 1, 0, 0x6a, 0x15, 0, 0};
    memcpy(c + 353, other, 16);
    memcpy(c + 369, b + 353, 56);
    c[369] = 16; /* 64 bytes: the bar plus a send timestamp */
    memcpy(c + 369 + 64, b + 409, 56);
    assert_int_equal(parse(c, n + 24, NULL, &s, &info, &e), VX_OK);
    assert_int_equal(info.records, 3);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.ts[1], TS2);
    assert_true(s.volume[1] == 152);
    vx_series_free(&s);
    /* volume is a u64: a daily bar of 5e9 contracts is past 32 bits */
    put64(c + 369 + 64 + 48, 5000000000ull);
    assert_int_equal(parse(c, n + 24, NULL, &s, &info, &e), VX_OK);
    assert_true(s.volume[1] == 5e9);
    vx_series_free(&s);
    free(c);
    free(b);
}

static void test_instrument_selection(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b = plain_v2(&n);
    /* ESH1 (5482) bars interleaved with another instrument (9999) at the same times */
    uint8_t *c = malloc(353 + 4 * 56);
    memcpy(c, b, 353);
    memcpy(c + 353, b + 353, 56);
    memcpy(c + 409, b + 353, 56);
    put32(c + 409 + 4, 9999);
    put64(c + 409 + 40, 372050000000000ull); /* 9999's close differs */
    memcpy(c + 465, b + 409, 56);
    memcpy(c + 521, b + 409, 56);
    put32(c + 521 + 4, 9999);
    size_t cn = 353 + 4 * 56;
    vx_series s;
    vx_dbn_info info;
    vx_err e;
    assert_int_equal(parse(c, cn, NULL, &s, &info, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "2 instruments"));
    /* the way to choose, for the commands that have --instrument and for those that do not */
    assert_non_null(strstr(e.msg, "--instrument ID or SYMBOL (vixen data, env) or --set "
                                  "data.instrument=ID or SYMBOL (train, eval, hyperopt)"));
    assert_non_null(strstr(e.msg, "5482 (ESH1)"));
    assert_non_null(strstr(e.msg, "9999"));
    assert_int_equal(info.n_instruments, 2);
    vx_series_free(&s);
    assert_int_equal(parse(c, cn, "9999", &s, &info, &e), VX_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.instrument_id, 9999);
    assert_true(s.close[0] == 372050.0);
    vx_series_free(&s);
    assert_int_equal(parse(c, cn, "ESH1", &s, &info, &e), VX_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.instrument_id, 5482);
    assert_true(s.close[0] == 372100.0);
    assert_string_equal(s.instrument, "ESH1");
    vx_series_free(&s);
    assert_int_equal(parse(c, cn, "ESZ9", &s, &info, &e), VX_ERR_NOT_FOUND);
    assert_non_null(strstr(e.msg, "ESZ9"));
    vx_series_free(&s);
    assert_int_equal(parse(c, cn, "1234", &s, &info, &e), VX_ERR_NOT_FOUND);
    vx_series_free(&s);
    /* an id past 32 bits is refused, not taken modulo 2^32 (4294967296 + 9999 had read 9999) */
    assert_int_equal(parse(c, cn, "4294977295", &s, &info, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "4294977295 is past the largest instrument_id"));
    vx_series_free(&s);
    assert_int_equal(parse(c, cn, "99999999999999999999999", &s, &info, &e), VX_ERR_ARG);
    vx_series_free(&s);
    free(c);
    free(b);
}

static void test_writer_roundtrip(void **state)
{
    (void)state;
    char dir[64], p1[128], p2[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(p1, sizeof p1, "%s/a.dbn", dir);
    snprintf(p2, sizeof p2, "%s/a.dbn.zst", dir);
    vx_series s;
    th_synth(&s, 3, 11, 0.1);
    s.instrument_id = 42;
    vx_err e;
    assert_int_equal(vx_dbn_write(p1, &s, 0, &e), VX_OK);
    assert_int_equal(vx_dbn_write(p2, &s, 3, &e), VX_OK);
    const char *paths[2] = {p1, p2};
    for (int k = 0; k < 2; k++) {
        vx_series r = {0};
        vx_dbn_info info;
        assert_int_equal(vx_dbn_read(paths[k], NULL, &r, &info, &e), VX_OK);
        assert_int_equal(info.version, 3);
        assert_int_equal(info.compressed, k);
        assert_int_equal(info.schema, 6);
        assert_int_equal(r.n, s.n);
        assert_int_equal(r.instrument_id, 42);
        assert_string_equal(r.instrument, "SYNTH");
        assert_memory_equal(r.ts, s.ts, s.n * 8);
        assert_memory_equal(r.close, s.close, s.n * 8);
        assert_memory_equal(r.high, s.high, s.n * 8);
        assert_memory_equal(r.volume, s.volume, s.n * 8);
        vx_series_free(&r);
    }
    /* records start on an 8-byte boundary, as v3 pads its metadata */
    size_t n;
    uint8_t *b = th_read(p1, &n);
    uint32_t len = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16;
    assert_int_equal((8 + len) % 8, 0);
    assert_int_equal(n, 8 + len + s.n * 56);
    free(b);
    vx_series_free(&s);
    th_rmtree(dir);
}

static void test_all_ohlcv_schemas(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b = plain_v2(&n);
    struct {
        uint8_t rtype;
        int64_t interval;
    } k[5] = {{0x20, 1000000000ll},
              {0x21, 60000000000ll},
              {0x22, 3600000000000ll},
              {0x23, 86400000000000ll},
              {0x24, 86400000000000ll}};
    for (int i = 0; i < 5; i++) {
        b[353 + 1] = b[409 + 1] = k[i].rtype;
        vx_series s;
        vx_err e;
        assert_int_equal(parse(b, n, NULL, &s, NULL, &e), VX_OK);
        assert_int_equal(s.n, 2);
        assert_int_equal(s.interval_ns, k[i].interval);
        vx_series_free(&s);
    }
    /* the deprecated generic OHLCV rtype takes its interval from the metadata's schema (6) */
    b[353 + 1] = b[409 + 1] = 0x11;
    vx_series s;
    vx_err e;
    assert_int_equal(parse(b, n, NULL, &s, NULL, &e), VX_OK);
    assert_int_equal(s.interval_ns, 60000000000ll);
    vx_series_free(&s);
    /* the other schemas: 5 ohlcv-1s, 7 ohlcv-1h, 8 ohlcv-1d, 13 ohlcv-eod */
    struct {
        uint8_t schema;
        int64_t interval;
    } g[4] = {
        {5, 1000000000ll}, {7, 3600000000000ll}, {8, 86400000000000ll}, {13, 86400000000000ll}};
    for (int i = 0; i < 4; i++) {
        b[24] = g[i].schema;
        assert_int_equal(parse(b, n, NULL, &s, NULL, &e), VX_OK);
        assert_int_equal(s.interval_ns, g[i].interval);
        vx_series_free(&s);
    }
    free(b);
}

/* A continuous symbol that rolls: "ES" is instrument 5482 on 2020-12-28 and 6000 on 2020-12-29
 * (mapping intervals are [start, end) dates). Both instruments trade both days; selecting "ES"
 * takes 5482's bar on the 28th and 6000's on the 29th, not both, and not one id throughout. */
static void test_symbol_roll_by_date(void **state)
{
    (void)state;
    enum { SL = 16 };
    size_t meta = 104 + 16 + SL + 4 + 2 * (8 + SL); /* after the 8-byte prelude */
    size_t total = 8 + meta + 4 * 56;
    uint8_t *b = calloc(1, total), *p = b + 112;
    assert_non_null(b);
    memcpy(b, "DBN\x02", 4);
    put32(b + 4, (uint32_t)meta);
    memcpy(b + 8, "GLBX.MDP3", 9);
    b[24] = 6;
    b[50] = 1;
    b[53] = SL;
    p += 12; /* no symbols, partial or not_found */
    put32(p, 1), p += 4;
    memcpy(p, "ES", 2), p += SL;
    put32(p, 2), p += 4;
    put32(p, 20201228), put32(p + 4, 20201229), memcpy(p + 8, "5482", 4), p += 8 + SL;
    put32(p, 20201229), put32(p + 4, 20201230), memcpy(p + 8, "6000", 4), p += 8 + SL;
    const uint64_t day = 86400000000000ull;
    struct {
        uint32_t id;
        uint64_t ts;
        uint64_t close; /* 1e-9 units */
    } bars[4] = {{5482, (uint64_t)TS1, 3721000000000ull},
                 {6000, (uint64_t)TS1, 3722000000000ull},
                 {5482, (uint64_t)TS1 + day, 3723000000000ull},
                 {6000, (uint64_t)TS1 + day, 3724000000000ull}};
    for (int k = 0; k < 4; k++, p += 56) {
        p[0] = 14, p[1] = 0x21;
        put32(p + 4, bars[k].id);
        put64(p + 8, bars[k].ts);
        put64(p + 16, bars[k].close);
        put64(p + 24, bars[k].close);
        put64(p + 32, bars[k].close);
        put64(p + 40, bars[k].close);
        put64(p + 48, 1);
    }
    assert_true(p == b + total);
    vx_series s;
    vx_dbn_info info;
    vx_err e;
    vx_status st = parse(b, total, "ES", &s, &info, &e);
    if (st) fail_msg("%s", e.msg);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.ts[0], TS1);
    assert_int_equal(s.ts[1], TS1 + (int64_t)day);
    assert_true(s.close[0] == 3721.0); /* 5482 on the 28th */
    assert_true(s.close[1] == 3724.0); /* 6000 on the 29th */
    assert_string_equal(s.instrument, "ES");
    assert_int_equal(s.instrument_id, 5482); /* the first interval's */
    vx_series_free(&s);
    free(b);
}

/* A small fuzz: thousands of damaged copies of a valid stream (flipped bytes, truncations, the
 * metadata length rewritten). Every parse must return, either OK or an error with a message; the
 * sanitizer build turns any out-of-bounds read into a failure. */
static void test_damaged_streams_never_crash(void **state)
{
    (void)state;
    char dir[64], p[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/a.dbn", dir);
    vx_series base;
    th_synth(&base, 1, 3, 0.1);
    base.n = 40;
    vx_err e;
    assert_int_equal(vx_dbn_write(p, &base, 0, &e), VX_OK);
    size_t n;
    uint8_t *good = th_read(p, &n), *c = malloc(n);
    vx_rng r = vx_rng_make(2024, 1, 0);
    size_t ok = 0, failed = 0;
    for (int it = 0; it < 4000; it++) {
        memcpy(c, good, n);
        size_t len = n;
        int kind = (int)vx_rng_below(&r, 4);
        if (kind == 0) len = vx_rng_below(&r, (uint32_t)n);
        int flips = 1 + (int)vx_rng_below(&r, 8);
        for (int f = 0; f < flips && kind != 0; f++)
            c[vx_rng_below(&r, (uint32_t)n)] ^= (uint8_t)(1 + vx_rng_below(&r, 255));
        if (kind == 3) put32(c + 4, vx_rng_u32(&r) % (uint32_t)(n + 64));
        vx_series s;
        vx_err err;
        vx_err_clear(&err);
        vx_status st = parse(c, len, NULL, &s, NULL, &err);
        if (st == VX_OK) ok++;
        else {
            failed++;
            assert_true(strlen(err.msg) > 8);
            assert_null(strchr(err.msg, '\n'));
        }
        vx_series_free(&s);
    }
    assert_true(failed > 1000); /* the damage is real */
    (void)ok;
    free(c);
    free(good);
    vx_series_free(&base);
    th_rmtree(dir);
}

/* ---- bounded input ----------------------------------------------------------------------------
 */

static long peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

static void timed_out(int sig)
{
    (void)sig;
    static const char msg[] = "test_dbn: timed out (a parse that should take milliseconds)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

/* A zstd stream of `head` followed by `zeros` zero bytes, compressed a MiB at a time, so that the
 * zeros are never in memory at once. */
static uint8_t *zstd_of_zeros(const uint8_t *head, size_t head_n, size_t zeros, size_t *n)
{
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    assert_non_null(cc);
    assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 1)));
    size_t cap = 8 << 20, chunk = 1 << 20;
    uint8_t *out = malloc(cap), *z = calloc(1, chunk);
    assert_non_null(out);
    assert_non_null(z);
    ZSTD_outBuffer ob = {out, cap, 0};
    ZSTD_inBuffer hb = {head, head_n, 0};
    while (hb.pos < hb.size)
        assert_false(ZSTD_isError(ZSTD_compressStream2(cc, &ob, &hb, ZSTD_e_continue)));
    for (size_t done = 0; done < zeros; done += chunk) {
        ZSTD_inBuffer ib = {z, zeros - done < chunk ? zeros - done : chunk, 0};
        while (ib.pos < ib.size)
            assert_false(ZSTD_isError(ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_continue)));
    }
    ZSTD_inBuffer none = {NULL, 0, 0};
    size_t left;
    do {
        left = ZSTD_compressStream2(cc, &ob, &none, ZSTD_e_end);
        assert_false(ZSTD_isError(left));
    } while (left > 0);
    assert_true(ob.pos < cap);
    ZSTD_freeCCtx(cc);
    free(z);
    *n = ob.pos;
    return out;
}

/* A zstd frame written by hand whose header claims `claim` bytes of content: a raw block holding
 * `head`, then `rle` blocks of 128 KiB of zeros (4 bytes each), none marked last. */
static uint8_t *claiming_frame(uint64_t claim, const uint8_t *head, size_t head_n, size_t rle,
                               size_t *n)
{
    uint8_t *b = malloc(14 + 3 + head_n + rle * 4), *p = b;
    assert_non_null(b);
    put32(p, 0xFD2FB528u), p += 4;
    *p++ = 0xC0;   /* frame header descriptor: an 8-byte content size, a window descriptor */
    *p++ = 7 << 3; /* window 2^(10 + 7) = 128 KiB */
    put64(p, claim), p += 8;
    uint32_t bh = (uint32_t)head_n << 3; /* a raw block */
    p[0] = (uint8_t)bh, p[1] = (uint8_t)(bh >> 8), p[2] = (uint8_t)(bh >> 16), p += 3;
    memcpy(p, head, head_n), p += head_n;
    for (size_t i = 0; i < rle; i++) {
        bh = (128u << 10) << 3 | 1u << 1; /* an RLE block of 128 KiB */
        p[0] = (uint8_t)bh, p[1] = (uint8_t)(bh >> 8), p[2] = (uint8_t)(bh >> 16), p[3] = 0;
        p += 4;
    }
    *n = (size_t)(p - b);
    return b;
}

/* A valid DBN prelude and metadata followed by 1 GiB of zeros inflates 30,000-fold: refused once
 * the output passes 1000 times the input, long before the gigabyte is there. */
static void test_zstd_bomb_refused(void **state)
{
    (void)state;
    size_t n, zn;
    uint8_t *b = plain_v2(&n);
    uint8_t *z = zstd_of_zeros(b, 353, (size_t)1 << 30, &zn);
    assert_true(zn < ((size_t)1 << 30) / VX_INFLATE_MAX_RATIO); /* it is a bomb */
    long before = peak_rss_mib();
    vx_series s;
    vx_err e;
    assert_int_equal(parse(z, zn, NULL, &s, NULL, &e), VX_ERR_VALIDATION);
    vx_series_free(&s);
    assert_string_equal(e.field, "zstd");
    if (!strstr(e.msg, "inflates past") || !strstr(e.msg, "more than 1000 times"))
        fail_msg("%s", e.msg);
    assert_true(strncmp(e.msg, "t.dbn: ", 7) == 0);
    long grew = peak_rss_mib() - before;
    if (grew > 256) fail_msg("inflating used %ld MiB more at its peak", grew);
    free(z);

    /* the same frame read with the whole gigabyte allowed still stops at the 1000-fold cap */
    z = zstd_of_zeros(b, 353, (size_t)64 << 20, &zn);
    vx_load_opts o = {.max_inflate = (uint64_t)1 << 40};
    memset(&s, 0, sizeof s);
    assert_int_equal(vx_dbn_parse("t.dbn", z, zn, &o, &s, NULL, &e), VX_ERR_VALIDATION);
    assert_non_null(strstr(e.msg, "inflates past"));
    vx_series_free(&s);
    free(z);
    free(b);
}

/* A frame whose header claims 900 GB is never trusted for the output's size: its RLE blocks run
 * into the ratio cap (a bomb), and a 20-byte frame is simply truncated. */
static void test_zstd_claimed_size_not_trusted(void **state)
{
    (void)state;
    size_t n, zn;
    uint8_t *b = plain_v2(&n);
    uint8_t *z = claiming_frame(900000000000ull, b, 353, 2048, &zn); /* 8 KiB -> 256 MiB */
    assert_int_equal(ZSTD_getFrameContentSize(z, zn), 900000000000ull);
    long before = peak_rss_mib();
    vx_series s;
    vx_err e;
    assert_int_equal(parse(z, zn, NULL, &s, NULL, &e), VX_ERR_VALIDATION);
    vx_series_free(&s);
    if (!strstr(e.msg, "inflates past")) fail_msg("%s", e.msg);
    long grew = peak_rss_mib() - before;
    if (grew > 128) fail_msg("inflating used %ld MiB more at its peak", grew);
    free(z);
    uint8_t tiny_head[1] = {'D'};
    z = claiming_frame(900000000000ull, tiny_head, 1, 0, &zn);
    assert_int_equal(zn, 18);
    assert_int_equal(parse(z, zn, NULL, &s, NULL, &e), VX_ERR_FORMAT);
    vx_series_free(&s);
    if (!strstr(e.msg, "truncated zstd frame")) fail_msg("%s", e.msg);
    free(z);
    free(b);
}

/* The DBN prelude is checked from the first 8 inflated bytes: a bad magic at the front of a
 * gigabyte frame is refused before the gigabyte is inflated; so is zstd-compressed CSV and a
 * metadata length past what the input may inflate to. */
static void test_zstd_prelude_checked_first(void **state)
{
    (void)state;
    uint8_t head[16] = {'X', 'Y', 'Z', 2, 0xFF, 0xFF, 0, 0};
    size_t zn;
    uint8_t *z = zstd_of_zeros(head, sizeof head, (size_t)1 << 30, &zn);
    long before = peak_rss_mib();
    vx_series s;
    vx_err e;
    assert_int_equal(parse(z, zn, NULL, &s, NULL, &e), VX_ERR_FORMAT);
    vx_series_free(&s);
    assert_string_equal(e.field, "magic");
    assert_int_equal(e.offset, 0);
    if (!strstr(e.msg, "bad magic 58 59 5a")) fail_msg("%s", e.msg);
    long grew = peak_rss_mib() - before;
    if (grew > 64) fail_msg("inflating used %ld MiB more at its peak", grew);
    free(z);

    const char *csv = "timestamp,open,high,low,close,volume\n2024-01-02T14:30:00Z,1,2,1,2,3\n";
    size_t cap = ZSTD_compressBound(strlen(csv));
    z = malloc(cap);
    zn = ZSTD_compress(z, cap, csv, strlen(csv), 3);
    assert_false(ZSTD_isError(zn));
    assert_int_equal(parse(z, zn, NULL, &s, NULL, &e), VX_ERR_FORMAT);
    vx_series_free(&s);
    if (!strstr(e.msg, "bad magic 74 69 6d") || !strstr(e.msg, "decompress a CSV file first"))
        fail_msg("%s", e.msg);
    free(z);

    uint8_t big_meta[8] = {'D', 'B', 'N', 2, 0xF0, 0xFF, 0xFF, 0x7F};
    cap = ZSTD_compressBound(8);
    z = malloc(cap);
    zn = ZSTD_compress(z, cap, big_meta, 8, 3);
    assert_int_equal(parse(z, zn, NULL, &s, NULL, &e), VX_ERR_VALIDATION);
    vx_series_free(&s);
    assert_string_equal(e.field, "length");
    if (!strstr(e.msg, "runs past the 1048576 bytes")) fail_msg("%s", e.msg);
    free(z);
}

/* The absolute limit (vx_load_opts.max_inflate, `--max-inflate`): a stream of exactly the limit
 * reads, one byte more is refused with a message that says how to raise it. */
static void test_zstd_absolute_limit(void **state)
{
    (void)state;
    char dir[64], p[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/a.dbn.zst", dir);
    vx_series base;
    th_synth(&base, 2, 3, 0.1);
    vx_err e;
    assert_int_equal(vx_dbn_write(p, &base, 3, &e), VX_OK);
    size_t zn, pn;
    uint8_t *z = th_read(p, &zn), *plain;
    assert_int_equal(vx_zstd_decompress("a", z, zn, 0, &plain, &pn, &e), VX_OK);
    free(plain);
    assert_true(pn > 40000);
    vx_load_opts o = {.max_inflate = pn};
    vx_series s = {0};
    assert_int_equal(vx_dbn_read(p, &o, &s, NULL, &e), VX_OK);
    assert_int_equal(s.n, base.n);
    vx_series_free(&s);
    o.max_inflate = pn - 1;
    assert_int_equal(vx_dbn_read(p, &o, &s, NULL, &e), VX_ERR_VALIDATION);
    vx_series_free(&s);
    char want[64];
    snprintf(want, sizeof want, "past the limit of %zu bytes", pn - 1);
    if (!strstr(e.msg, want) || !strstr(e.msg, "--max-inflate") || !strstr(e.msg, p))
        fail_msg("%s", e.msg);
    assert_int_equal(vx_zstd_decompress("a", z, zn, pn - 1, &plain, &pn, &e), VX_ERR_VALIDATION);
    assert_null(plain);
    /* the settings' parser */
    uint64_t v;
    assert_int_equal(vx_parse_size("16G", &v), 0);
    assert_true(v == 16ull << 30);
    assert_int_equal(vx_parse_size("4096", &v), 0);
    assert_true(v == 4096);
    assert_int_equal(vx_parse_size("0", &v), -1);
    assert_int_equal(vx_parse_size("-1", &v), -1);
    assert_int_equal(vx_parse_size("1X", &v), -1);
    assert_int_equal(vx_parse_size("99999999999T", &v), -1);
    assert_true(vx_inflate_limit(10, 0) == VX_INFLATE_MIN);
    assert_true(vx_inflate_limit((size_t)1 << 30, 0) == VX_INFLATE_DEFAULT);
    assert_true(vx_inflate_limit(SIZE_MAX, 5) == 5);
    free(z);
    vx_series_free(&base);
    th_rmtree(dir);
}

/* A DBN v2 stream whose metadata maps `maps` symbols (the first, "ES", to instrument 1), then
 * three bars of instrument 1. */
static uint8_t *many_mappings(uint32_t maps, size_t *n)
{
    enum { SL = 16 };
    size_t meta = 104 + 16 + (size_t)maps * (SL + 4 + 8 + SL); /* after the 8-byte prelude */
    size_t total = 8 + meta + 3 * 56;
    uint8_t *b = calloc(1, total), *p = b + 112;
    assert_non_null(b);
    memcpy(b, "DBN\x02", 4);
    put32(b + 4, (uint32_t)meta);
    memcpy(b + 8, "GLBX.MDP3", 9);
    b[24] = 6; /* ohlcv-1m */
    b[50] = 1; /* stype_in raw_symbol */
    b[53] = SL;
    p += 12; /* no symbols, partial or not_found */
    put32(p, maps), p += 4;
    for (uint32_t i = 0; i < maps; i++) {
        snprintf((char *)p, SL, i ? "S%u" : "ES", i), p += SL;
        put32(p, 1), put32(p + 4, 20200101), put32(p + 8, 20300101), p += 12;
        snprintf((char *)p, SL, "%u", i + 1), p += SL;
    }
    for (int k = 0; k < 3; k++, p += 56) {
        p[0] = 14, p[1] = 0x21;
        put32(p + 4, 1);
        put64(p + 8, (uint64_t)TS1 + (uint64_t)k * 60000000000ull);
        for (int f = 0; f < 4; f++) put64(p + 16 + 8 * f, 4000000000000ull);
        put64(p + 48, 10);
    }
    assert_true(p == b + total);
    *n = total;
    return b;
}

/* Every realloc the library makes while the count is on (the binary links with
 * -Wl,--wrap=realloc: calls from the library's objects come here first). */
static int g_count_reallocs;
static long g_reallocs;
void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n)
{
    if (g_count_reallocs) g_reallocs++;
    return __real_realloc(p, n);
}

/* The symbol table grows geometrically: 200,000 mappings take a few dozen reallocations (grown one
 * element at a time they took 200,000, each copying the table: minutes in the sanitizer build,
 * though glibc growing large blocks in place hides it in a timing), and parse in well under a
 * second. */
static void test_many_symbol_mappings(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b = many_mappings(200000, &n);
    signal(SIGALRM, timed_out);
    alarm(60);
    uint64_t t0 = vx_now_ns();
    vx_series s;
    vx_dbn_info info;
    vx_err e;
    g_reallocs = 0, g_count_reallocs = 1;
    vx_status st = parse(b, n, "ES", &s, &info, &e);
    g_count_reallocs = 0;
    double sec = vx_seconds_since(t0);
    alarm(0);
    if (st) fail_msg("%s", e.msg);
    print_message("200,000 mappings: %ld reallocations, %.3f s\n", g_reallocs, sec);
    if (g_reallocs > 64) fail_msg("200,000 mappings took %ld reallocations", g_reallocs);
    assert_int_equal(s.n, 3);
    assert_string_equal(info.instruments[0].symbol, "ES");
    assert_int_equal(info.n_mappings, 64);
    if (sec > 5) fail_msg("200,000 mappings took %.1f s", sec);
    vx_series_free(&s);
    free(b);
}

int run_dbn_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_exact),
        cmocka_unit_test(test_corrupt_streams),
        cmocka_unit_test(test_multi_frame_and_skipped_records),
        cmocka_unit_test(test_instrument_selection),
        cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_all_ohlcv_schemas),
        cmocka_unit_test(test_symbol_roll_by_date),
        cmocka_unit_test(test_damaged_streams_never_crash),
        cmocka_unit_test(test_zstd_prelude_checked_first),
        cmocka_unit_test(test_zstd_claimed_size_not_trusted),
        cmocka_unit_test(test_zstd_bomb_refused),
        cmocka_unit_test(test_zstd_absolute_limit),
        cmocka_unit_test(test_many_symbol_mappings),
    };
    return cmocka_run_group_tests_name("data_dbn", tests, NULL, NULL);
}

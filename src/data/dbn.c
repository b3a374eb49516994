/* dbn.c — Databento Binary Encoding (DBN) v1–v3 OHLCV reader and a v3 writer.
 *
 * Layout as documented in docs/dbn-format.md (metadata, 16-byte record header, 56-byte OHLCV
 * bodies, fixed-point prices at 1e-9). The reader works on the whole stream in memory: zstd input
 * is first decompressed with the streaming API (frames without a content size, several frames in a
 * row) into a buffer that grows as output arrives — a frame header's claimed size is never
 * trusted — with the DBN prelude checked as soon as its 8 bytes are out and the output bounded
 * (vx_inflate_limit), so a small hostile file costs little; then records are walked by their
 * length byte — never by an assumed size — so records of other types, and live data's appended
 * timestamp, are skipped correctly.
 *
 * Two passes over the records: the first counts instruments (a file of several instruments needs
 * the user's choice; mixing them silently is the classic bug), the second converts the selected
 * instrument's bars. Every error names the file, the record number (1-based) and its byte offset
 * in the decompressed stream, and the field.
 *
 * Not read: legacy DBZ (version 0 or a leading skippable frame), versions above 3, and schemas
 * other than OHLCV (skipped, counted in `records`). */
#include "vixen/data.h"
#include "data_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define DBN_PRICE_UNDEF INT64_MAX
#define DBN_OHLCV_SIZE 56
#define ZSTD_MAGIC 0xFD2FB528u

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static int is_skippable(uint32_t magic) { return (magic & 0xFFFFFFF0u) == 0x184D2A50u; }

vx_format vx_format_sniff(const uint8_t *head, size_t n)
{
    if (n >= 4 && (rd32(head) == ZSTD_MAGIC || is_skippable(rd32(head)))) return VX_FORMAT_DBN_ZSTD;
    if (n >= 3 && memcmp(head, "DBN", 3) == 0) return VX_FORMAT_DBN;
    if (n == 0) return VX_FORMAT_UNKNOWN;
    /* Text never holds a NUL byte; a binary file with a damaged magic is still DBN's to refuse,
     * with a message about its magic rather than about CSV columns. */
    if (memchr(head, 0, n)) return VX_FORMAT_DBN;
    return VX_FORMAT_CSV;
}

uint64_t vx_inflate_limit(size_t compressed, uint64_t max_inflate)
{
    uint64_t abs = max_inflate ? max_inflate : VX_INFLATE_DEFAULT;
    uint64_t rel = (uint64_t)compressed > UINT64_MAX / VX_INFLATE_MAX_RATIO
                       ? UINT64_MAX
                       : (uint64_t)compressed * VX_INFLATE_MAX_RATIO;
    if (rel < VX_INFLATE_MIN) rel = VX_INFLATE_MIN;
    return abs < rel ? abs : rel;
}

int vx_parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9') return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    switch (*end) {
    case 'K': shift = 10, end++; break;
    case 'M': shift = 20, end++; break;
    case 'G': shift = 30, end++; break;
    case 'T': shift = 40, end++; break;
    }
    if (errno || *end || v == 0 || v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* Checks the first bytes of the inflated output before more is inflated; `limit` bounds it. */
typedef vx_status (*head_fn)(const char *name, const uint8_t *b, size_t n, uint64_t limit,
                             vx_err *e);

static void human_bytes(uint64_t x, char *buf, size_t n)
{
    if (x >= (1ull << 30)) snprintf(buf, n, "%.3g GiB", (double)x / (1ull << 30));
    else if (x >= (1ull << 20)) snprintf(buf, n, "%.3g MiB", (double)x / (1ull << 20));
    else snprintf(buf, n, "%llu bytes", (unsigned long long)x);
}

static vx_status too_big(const char *name, size_t n, uint64_t limit, uint64_t max_inflate,
                         vx_err *e)
{
    char lim[32], in[32];
    human_bytes(limit, lim, sizeof lim);
    human_bytes(n, in, sizeof in);
    if (limit == (max_inflate ? max_inflate : VX_INFLATE_DEFAULT))
        return vx_err_record(e, VX_ERR_VALIDATION, name, -1, (int64_t)limit, "zstd",
                             "zstd data inflates past the limit of %s (raise it with "
                             "--max-inflate SIZE, or data.max_inflate when training)",
                             lim);
    return vx_err_record(e, VX_ERR_VALIDATION, name, -1, (int64_t)limit, "zstd",
                         "zstd data inflates past %s from %s, more than %d times: not market "
                         "data (a decompression bomb?)",
                         lim, in, VX_INFLATE_MAX_RATIO);
}

/* Streams `in` through zstd into a buffer doubled as output arrives, at most limit + 1 bytes (one
 * past the limit tells "exactly the limit" from "more"). With `head`, the output is first inflated
 * only up to `head_n` bytes and checked, so a wrong stream is refused before the rest is. */
static vx_status inflate(const char *name, const uint8_t *in, size_t n, uint64_t max_inflate,
                         size_t head_n, head_fn head, uint8_t **out, size_t *out_n, vx_err *e)
{
    *out = NULL;
    *out_n = 0;
    uint64_t limit = vx_inflate_limit(n, max_inflate);
    size_t most = limit >= SIZE_MAX ? SIZE_MAX : (size_t)limit + 1;
    size_t guess = n > (SIZE_MAX - 65536) / 8 ? SIZE_MAX : n * 8 + 65536;
    size_t cap = guess < most ? guess : most, len = 0;
    ZSTD_DStream *ds = ZSTD_createDStream();
    uint8_t *buf = ds ? vx_alloc_big(cap) : NULL;
    if (!buf) {
        ZSTD_freeDStream(ds);
        return vx_err_set(e, VX_ERR_NOMEM, "%s: cannot start decompressing", name);
    }
    ZSTD_initDStream(ds);
    ZSTD_inBuffer ib = {in, n, 0};
    size_t last = 0;
    int checked = head == NULL;
    vx_status st = VX_OK;
    while (!st && (ib.pos < ib.size || last > 0)) {
        if (len == cap) {
            size_t nc = cap > most / 2 ? most : cap * 2;
            uint8_t *nb = nc > cap ? vx_alloc_big(nc) : NULL;
            if (!nb) {
                st = nc > cap ? vx_err_set(e, VX_ERR_NOMEM,
                                           "%s: cannot grow the zstd output to "
                                           "%zu bytes",
                                           name, nc)
                              : too_big(name, n, limit, max_inflate, e);
                break;
            }
            memcpy(nb, buf, len);
            free(buf);
            buf = nb;
            cap = nc;
        }
        size_t room = cap - len;
        if (!checked && room > head_n - len) room = head_n - len;
        ZSTD_outBuffer ob = {buf + len, room, 0};
        size_t before = ib.pos;
        last = ZSTD_decompressStream(ds, &ob, &ib);
        len += ob.pos;
        if (ZSTD_isError(last))
            st = vx_err_record(e, VX_ERR_FORMAT, name, -1, (int64_t)before, "zstd",
                               "damaged zstd data: %s", ZSTD_getErrorName(last));
        else if (len > limit) st = too_big(name, n, limit, max_inflate, e);
        else if (!checked && len >= head_n) st = head(name, buf, len, limit, e), checked = 1;
        else if (ib.pos == ib.size && last > 0 && ob.pos == 0 && ib.pos == before)
            st = vx_err_record(e, VX_ERR_FORMAT, name, -1, (int64_t)n, "zstd",
                               "truncated zstd frame: the input ends inside a frame");
    }
    ZSTD_freeDStream(ds);
    if (st) {
        free(buf);
        return st;
    }
    *out = buf;
    *out_n = len;
    return VX_OK;
}

vx_status vx_zstd_decompress(const char *name, const uint8_t *in, size_t n, uint64_t max_inflate,
                             uint8_t **out, size_t *out_n, vx_err *e)
{
    return inflate(name, in, n, max_inflate, 0, NULL, out, out_n, e);
}

/* A symbol mapping interval: raw symbol -> instrument id over [start, end) dates (YYYYMMDD). */
typedef struct {
    char raw[72];
    uint32_t id;
    uint32_t start, end;
} mapping;

typedef struct {
    const char *name;
    const uint8_t *b;
    size_t n;
    size_t rec_off; /* first record */
    size_t sym_len;
    mapping *maps;
    size_t n_maps, cap_maps;
} dbn_ctx;

static vx_status meta_err(vx_err *e, const dbn_ctx *c, size_t off, const char *field,
                          const char *what)
{
    return vx_err_record(e, VX_ERR_FORMAT, c->name, -1, (int64_t)off, field, "metadata: %s", what);
}

static void copy_sym(char *dst, size_t dn, const uint8_t *src, size_t sn)
{
    size_t l = 0;
    while (l < sn && src[l]) l++;
    if (l >= dn) l = dn - 1;
    memcpy(dst, src, l);
    dst[l] = '\0';
}

/* The 8-byte prelude: magic "DBN", version, metadata length (read by the caller). */
static vx_status check_prelude(const char *name, const uint8_t *b, size_t n, int compressed,
                               vx_err *e)
{
    if (n < 8)
        return vx_err_record(e, VX_ERR_FORMAT, name, -1, 0, "magic",
                             "metadata: stream shorter than the 8-byte prelude");
    if (memcmp(b, "DBN", 3) != 0)
        return vx_err_record(
            e, VX_ERR_FORMAT, name, -1, 0, "magic",
            "not a DBN stream: bad magic %02x %02x %02x (expected 'DBN')%s", b[0], b[1], b[2],
            compressed ? "; zstd input must hold DBN (decompress a CSV file first)" : "");
    if (b[3] == 0)
        return vx_err_record(e, VX_ERR_UNSUPPORTED, name, -1, 3, "version",
                             "legacy DBZ (version 0) is not supported; convert it with "
                             "Databento's dbn tool");
    if (b[3] > 3)
        return vx_err_record(e, VX_ERR_UNSUPPORTED, name, -1, 3, "version",
                             "DBN version %d is not supported (versions 1-3 are)", b[3]);
    return VX_OK;
}

/* The prelude of a zstd stream, checked once its first 8 bytes are inflated: the metadata must
 * fit in what may be inflated. */
static vx_status check_zstd_prelude(const char *name, const uint8_t *b, size_t n, uint64_t limit,
                                    vx_err *e)
{
    vx_status st = check_prelude(name, b, n, 1, e);
    if (st) return st;
    uint32_t length = rd32(b + 4);
    if (length < 104)
        return vx_err_record(e, VX_ERR_FORMAT, name, -1, 4, "length",
                             "metadata: metadata length is too short");
    if (8 + (uint64_t)length > limit)
        return vx_err_record(e, VX_ERR_VALIDATION, name, -1, 4, "length",
                             "metadata: metadata length %u runs past the %llu bytes this input "
                             "may inflate to (--max-inflate SIZE, or data.max_inflate when "
                             "training, raises the absolute limit)",
                             length, (unsigned long long)limit);
    return VX_OK;
}

/* Parses the prelude and metadata; fills info (fixed fields, mappings) and ctx (mappings). */
static vx_status parse_metadata(dbn_ctx *c, vx_dbn_info *info, vx_err *e)
{
    const uint8_t *b = c->b;
    vx_status pst = check_prelude(c->name, b, c->n, info->compressed, e);
    if (pst) return pst;
    int ver = b[3];
    info->version = ver;
    uint32_t length = rd32(b + 4);
    if ((uint64_t)length + 8 > c->n)
        return meta_err(e, c, 4, "length", "metadata length runs past the end of the stream");
    if (length < 104) return meta_err(e, c, 4, "length", "metadata length is too short");
    c->rec_off = 8 + (size_t)length;
    copy_sym(info->dataset, sizeof info->dataset, b + 8, 16);
    info->schema = rd16(b + 24);
    info->start = rd64(b + 26);
    info->end = rd64(b + 34);
    info->limit = rd64(b + 42);
    if (ver == 1) {
        info->stype_in = b[58];
        info->stype_out = b[59];
        info->ts_out = b[60];
        c->sym_len = 22;
    } else {
        info->stype_in = b[50];
        info->stype_out = b[51];
        info->ts_out = b[52];
        c->sym_len = rd16(b + 53);
        if (c->sym_len == 0 || c->sym_len > 1024)
            return meta_err(e, c, 53, "symbol_cstr_len", "implausible symbol length");
    }
    if (rd32(b + 108) != 0) return meta_err(e, c, 108, "schema_definition_length", "must be 0");
    /* variable part: symbols, partial, not_found, mappings */
    size_t off = 112, end = c->rec_off, sl = c->sym_len;
    const char *sections[3] = {"symbols", "partial", "not_found"};
    for (int s = 0; s < 3; s++) {
        if (off + 4 > end) return meta_err(e, c, off, sections[s], "count runs past metadata");
        uint32_t cnt = rd32(b + off);
        off += 4;
        if ((uint64_t)cnt * sl > end - off)
            return meta_err(e, c, off, sections[s], "strings run past metadata");
        off += (size_t)cnt * sl;
    }
    if (off + 4 > end) return meta_err(e, c, off, "mappings", "count runs past metadata");
    uint32_t nm = rd32(b + off);
    off += 4;
    for (uint32_t m = 0; m < nm; m++) {
        if (off + sl + 4 > end)
            return meta_err(e, c, off, "mappings", "mapping runs past metadata");
        const uint8_t *raw = b + off;
        off += sl;
        uint32_t ni = rd32(b + off);
        off += 4;
        if ((uint64_t)ni * (8 + sl) > end - off)
            return meta_err(e, c, off, "mappings", "intervals run past metadata");
        for (uint32_t k = 0; k < ni; k++) {
            mapping mp;
            copy_sym(mp.raw, sizeof mp.raw, raw, sl);
            mp.start = rd32(b + off);
            mp.end = rd32(b + off + 4);
            char idtxt[72];
            copy_sym(idtxt, sizeof idtxt, b + off + 8, sl);
            off += 8 + sl;
            char *stop;
            unsigned long v = strtoul(idtxt, &stop, 10);
            if (!idtxt[0] || *stop) continue; /* not an instrument-id mapping */
            mp.id = (uint32_t)v;
            if (c->n_maps == c->cap_maps) {
                /* doubling: one element at a time copies the table once per mapping */
                size_t nc = c->cap_maps ? c->cap_maps * 2 : 16;
                mapping *nmaps = realloc(c->maps, nc * sizeof *nmaps);
                if (!nmaps) return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", c->name);
                c->maps = nmaps;
                c->cap_maps = nc;
            }
            c->maps[c->n_maps++] = mp;
            if (info->n_mappings < 64) {
                snprintf(info->mappings[info->n_mappings].raw, 72, "%s", mp.raw);
                info->mappings[info->n_mappings].id = mp.id;
                info->n_mappings++;
            }
        }
    }
    return VX_OK;
}

static int is_ohlcv_rtype(uint8_t r) { return (r >= 0x20 && r <= 0x24) || r == 0x11; }

static int64_t rtype_interval(uint8_t r, uint16_t schema)
{
    switch (r) {
    case 0x20: return 1000000000ll;
    case 0x21: return 60000000000ll;
    case 0x22: return 3600000000000ll;
    case 0x23:
    case 0x24: return 86400000000000ll;
    }
    switch (schema) { /* deprecated generic OHLCV: the metadata's schema says */
    case 5: return 1000000000ll;
    case 6: return 60000000000ll;
    case 7: return 3600000000000ll;
    case 8:
    case 13: return 86400000000000ll;
    }
    return 0;
}

/* YYYYMMDD of a UTC nanosecond timestamp, for mapping intervals. */
static uint32_t ymd_of(uint64_t ts)
{
    int y;
    unsigned m, d;
    vx_civil_from_days((int64_t)(ts / 86400000000000ull), &y, &m, &d);
    return (uint32_t)(y * 10000 + (int)m * 100 + (int)d);
}

/* Walks the records once, checking framing; calls back for every OHLCV record. */
typedef vx_status (*rec_fn)(void *u, const uint8_t *r, size_t rec_no, size_t off, vx_err *e);

static vx_status walk(const dbn_ctx *c, rec_fn fn, void *u, size_t *n_records, vx_err *e)
{
    size_t off = c->rec_off, rec_no = 0;
    while (off < c->n) {
        rec_no++;
        if (c->n - off < 16)
            return vx_err_record(e, VX_ERR_FORMAT, c->name, (int64_t)rec_no, (int64_t)off, "length",
                                 "truncated record header: %zu bytes left, 16 needed", c->n - off);
        size_t len = (size_t)c->b[off] * 4;
        if (len == 0)
            return vx_err_record(e, VX_ERR_FORMAT, c->name, (int64_t)rec_no, (int64_t)off, "length",
                                 "record length 0 (corrupt stream)");
        if (len > c->n - off)
            return vx_err_record(e, VX_ERR_FORMAT, c->name, (int64_t)rec_no, (int64_t)off, "length",
                                 "record of %zu bytes runs past the end of the stream (%zu left)",
                                 len, c->n - off);
        uint8_t rt = c->b[off + 1];
        if (is_ohlcv_rtype(rt)) {
            if (len < DBN_OHLCV_SIZE)
                return vx_err_record(e, VX_ERR_FORMAT, c->name, (int64_t)rec_no, (int64_t)off,
                                     "length", "OHLCV record of %zu bytes (56 needed)", len);
            vx_status st = fn(u, c->b + off, rec_no, off, e);
            if (st) return st;
        }
        off += len;
    }
    *n_records = rec_no;
    return VX_OK;
}

typedef struct {
    vx_dbn_info *info;
    size_t overflow;
} scan_state;

static vx_status scan_rec(void *u, const uint8_t *r, size_t rec_no, size_t off, vx_err *e)
{
    (void)rec_no, (void)off, (void)e;
    scan_state *s = u;
    uint32_t id = rd32(r + 4);
    vx_dbn_info *in = s->info;
    for (size_t i = 0; i < in->n_instruments; i++)
        if (in->instruments[i].id == id) {
            in->instruments[i].bars++;
            return VX_OK;
        }
    if (in->n_instruments < VX_DBN_MAX_INSTRUMENTS) {
        vx_dbn_instrument *di = &in->instruments[in->n_instruments++];
        di->id = id;
        di->bars = 1;
        di->symbol[0] = '\0';
    } else {
        s->overflow++;
    }
    return VX_OK;
}

typedef struct {
    const dbn_ctx *c;
    vx_series *out;
    const mapping *sel; /* date-bounded intervals of the selected symbol, or NULL */
    size_t n_sel;
    uint32_t id;   /* the selected id when sel == NULL */
    uint8_t rtype; /* first OHLCV rtype seen for the selection */
    int64_t prev_ts;
    uint16_t schema;
} fill_state;

static vx_status fill_rec(void *u, const uint8_t *r, size_t rec_no, size_t off, vx_err *e)
{
    fill_state *s = u;
    uint32_t id = rd32(r + 4);
    uint64_t ts = rd64(r + 8);
    if (s->sel) {
        uint32_t ymd = ymd_of(ts);
        int hit = 0;
        for (size_t i = 0; i < s->n_sel && !hit; i++)
            hit = s->sel[i].id == id && ymd >= s->sel[i].start && ymd < s->sel[i].end;
        if (!hit) return VX_OK;
    } else if (id != s->id) {
        return VX_OK;
    }
    const char *name = s->c->name;
    if (s->rtype == 0) s->rtype = r[1];
    else if (r[1] != s->rtype)
        return vx_err_record(e, VX_ERR_VALIDATION, name, (int64_t)rec_no, (int64_t)off, "rtype",
                             "bar type 0x%02x differs from the first bar's 0x%02x (mixed "
                             "intervals)",
                             r[1], s->rtype);
    if (ts > (uint64_t)INT64_MAX)
        return vx_err_record(e, VX_ERR_VALIDATION, name, (int64_t)rec_no, (int64_t)off, "ts_event",
                             "timestamp %llu out of range", (unsigned long long)ts);
    static const char *pf[4] = {"open", "high", "low", "close"};
    double px[4];
    for (int k = 0; k < 4; k++) {
        int64_t raw = (int64_t)rd64(r + 16 + 8 * k);
        if (raw == DBN_PRICE_UNDEF)
            return vx_err_record(e, VX_ERR_VALIDATION, name, (int64_t)rec_no, (int64_t)off, pf[k],
                                 "undefined price (INT64_MAX)");
        px[k] = (double)raw / 1e9;
    }
    uint64_t vol = rd64(r + 48);
    char why[160];
    const char *bad = vx_bar_check(s->prev_ts, (int64_t)ts, px[0], px[1], px[2], px[3], (double)vol,
                                   why, sizeof why);
    if (bad) {
        if (strcmp(bad, "timestamp") == 0) bad = "ts_event";
        return vx_err_record(e, VX_ERR_VALIDATION, name, (int64_t)rec_no, (int64_t)off, bad, "%s",
                             why);
    }
    s->prev_ts = (int64_t)ts;
    return vx_series_push(s->out, (int64_t)ts, px[0], px[1], px[2], px[3], (double)vol, e);
}

static int all_digits(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

vx_status vx_dbn_parse(const char *name, const uint8_t *bytes, size_t len, const vx_load_opts *opts,
                       vx_series *out, vx_dbn_info *info_out, vx_err *e)
{
    vx_dbn_info info_local, *info = info_out ? info_out : &info_local;
    memset(info, 0, sizeof *info);
    uint8_t *plain = NULL;
    const uint8_t *b = bytes;
    size_t n = len;
    vx_format fmt = vx_format_sniff(bytes, len);
    if (fmt == VX_FORMAT_DBN_ZSTD) {
        if (is_skippable(rd32(bytes)))
            return vx_err_record(e, VX_ERR_UNSUPPORTED, name, -1, 0, "magic",
                                 "legacy DBZ (zstd skippable frame first) is not supported");
        vx_status st = inflate(name, bytes, len, opts ? opts->max_inflate : 0, 8,
                               check_zstd_prelude, &plain, &n, e);
        if (st) return st;
        b = plain;
        info->compressed = 1;
    }
    dbn_ctx c = {.name = name, .b = b, .n = n};
    vx_status st = parse_metadata(&c, info, e);
    scan_state ss = {.info = info};
    if (!st) st = walk(&c, scan_rec, &ss, &info->records, e);
    if (!st) { /* name the instruments from the mappings */
        for (size_t i = 0; i < info->n_instruments; i++)
            for (size_t m = 0; m < c.n_maps; m++)
                if (c.maps[m].id == info->instruments[i].id) {
                    snprintf(info->instruments[i].symbol, sizeof info->instruments[i].symbol, "%s",
                             c.maps[m].raw);
                    break;
                }
    }
    if (!st && out) {
        fill_state fs = {.c = &c, .out = out, .prev_ts = INT64_MIN, .schema = info->schema};
        mapping *sel = NULL;
        const char *want = opts ? opts->instrument : NULL;
        char label[72] = "";
        if (!want) {
            if (info->n_instruments == 0) {
                st = vx_err_line(e, VX_ERR_VALIDATION, name, -1, "",
                                 "no OHLCV bars in the file (%zu records of other types)",
                                 info->records);
            } else if (info->n_instruments > 1 || ss.overflow) {
                char list[400] = "";
                size_t k = 0;
                for (size_t i = 0; i < info->n_instruments && k < sizeof list - 40; i++)
                    k += (size_t)snprintf(
                        list + k, sizeof list - k, "%s%u%s%s%s", i ? ", " : "",
                        info->instruments[i].id, info->instruments[i].symbol[0] ? " (" : "",
                        info->instruments[i].symbol, info->instruments[i].symbol[0] ? ")" : "");
                st = vx_err_line(e, VX_ERR_ARG, name, -1, "instrument_id",
                                 "the file holds %zu%s instruments: %s; pick one with "
                                 "--instrument ID or SYMBOL (vixen data, env) or --set "
                                 "data.instrument=ID or SYMBOL (train, eval, hyperopt)",
                                 info->n_instruments, ss.overflow ? "+" : "", list);
            } else {
                fs.id = info->instruments[0].id;
                snprintf(label, sizeof label, "%s", info->instruments[0].symbol);
            }
        } else if (all_digits(want)) { /* an instrument_id is 32 bits: a larger one is no id */
            errno = 0;
            unsigned long long id = strtoull(want, NULL, 10);
            if (errno == ERANGE || id > UINT32_MAX)
                st = vx_err_line(e, VX_ERR_ARG, name, -1, "instrument",
                                 "%s is past the largest instrument_id (%u)", want, UINT32_MAX);
            fs.id = (uint32_t)id;
        } else {
            size_t k = 0;
            for (size_t m = 0; m < c.n_maps; m++)
                if (strcmp(c.maps[m].raw, want) == 0) k++;
            if (k == 0) {
                st = vx_err_line(e, VX_ERR_NOT_FOUND, name, -1, "instrument",
                                 "symbol '%s' is not in the file's symbol mappings", want);
            } else {
                sel = malloc(k * sizeof *sel);
                if (!sel) st = vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", name);
                k = 0;
                for (size_t m = 0; sel && m < c.n_maps; m++)
                    if (strcmp(c.maps[m].raw, want) == 0) sel[k++] = c.maps[m];
                fs.sel = sel;
                fs.n_sel = k;
                /* one id over the whole file: match by id alone, whatever the dates say */
                int one = 1;
                for (size_t i = 1; i < k; i++) one &= sel[i].id == sel[0].id;
                if (one && sel) {
                    fs.sel = NULL;
                    fs.id = sel[0].id;
                }
                snprintf(label, sizeof label, "%s", want);
            }
        }
        size_t before = out->n;
        /* the scan counted the bars: size the series once (no regrowth while filling) */
        size_t expect = 0;
        for (size_t i = 0; i < info->n_instruments; i++)
            if (fs.sel || info->instruments[i].id == fs.id) expect += info->instruments[i].bars;
        if (!st) st = vx_series_reserve(out, out->n + expect, e);
        if (!st) st = walk(&c, fill_rec, &fs, &info->records, e);
        if (!st && out->n == before)
            st = vx_err_line(e, VX_ERR_NOT_FOUND, name, -1, "instrument",
                             "no bars for instrument %s", want ? want : label);
        if (!st) {
            if (!out->instrument[0]) {
                if (label[0]) snprintf(out->instrument, sizeof out->instrument, "%s", label);
                else snprintf(out->instrument, sizeof out->instrument, "%u", fs.id);
            }
            out->instrument_id = fs.sel ? fs.sel[0].id : fs.id;
            out->interval_ns = rtype_interval(fs.rtype, info->schema);
            snprintf(out->source, sizeof out->source, "dbn v%d%s %s", info->version,
                     info->compressed ? " zstd" : "", name);
            vx_series_set_interval(out);
        }
        free(sel);
    }
    free(c.maps);
    free(plain);
    return st;
}

vx_status vx_dbn_read(const char *path, const vx_load_opts *opts, vx_series *out, vx_dbn_info *info,
                      vx_err *e)
{
    uint8_t *data;
    size_t n;
    vx_status st = vx_file_read_all(path, &data, &n, e);
    if (st) return st;
    if (n == 0) {
        free(data);
        return vx_err_line(e, VX_ERR_FORMAT, path, -1, "", "empty file");
    }
    st = vx_dbn_parse(path, data, n, opts, out, info, e);
    free(data);
    return st;
}

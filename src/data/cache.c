/* cache.c — the feature cache: one key function, atomic writes, memory-mapped reads.
 *
 * Precompute (`vixen data features`) and training both call vx_market_open, which calls
 * vx_cache_key: there is exactly one place that decides what a cache entry depends on, so the
 * two can never disagree about it.
 *
 * File layout (native little-endian; arrays page-aligned so the file maps straight into memory):
 *   [0, 4096)  header (struct cache_header), its own hash last
 *   ts[n] int64 | open, high, low, close, volume [n] double | features [rows × 45] float32
 *   | a synthetic market's planted signal [n] double (has_signal)
 * The payload's XXH3-64 is stored in the header and checked on every load, so a truncated or
 * damaged entry is a miss, never wrong numbers.
 *
 * The content hash of an input file is XXH3-64 of the whole file, streamed: a sample of blocks
 * would serve a file changed between the samples (with its size and mtime kept) from a stale
 * entry, and XXH3 runs faster than the page cache delivers, so reading the file is the whole cost
 * (docs/data.md). Together with size and mtime this is what "the same input" means here. */
#define _DEFAULT_SOURCE /* realpath, MAP_POPULATE */
#include "vixen/data.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define CACHE_MAGIC "VXFCACHE"
#define CACHE_FORMAT 2 /* 2: the synthetic market's signal */
#define HEADER_BYTES 4096

typedef struct {
    char magic[8];
    uint32_t format;
    uint32_t feature_version;
    char key[40];
    uint64_t n_bars, first_bar, rows, cols;
    int64_t interval_ns;
    uint32_t instrument_id, has_signal;
    char instrument[72];
    char source[512];
    double signal_strength;
    uint64_t off[8]; /* ts, open, high, low, close, volume, features, signal (0: none) */
    uint64_t file_bytes;
    uint64_t payload_hash;
    uint64_t header_hash; /* XXH3-64 of every byte above */
} cache_header;

static uint64_t file_content_hash(FILE *f, int *ok)
{
    enum { CHUNK = 1 << 20 };
    XXH3_state_t *h = XXH3_createState();
    uint8_t *buf = malloc(CHUNK);
    *ok = h && buf;
    if (*ok) XXH3_64bits_reset(h);
    size_t got;
    while (*ok && (got = fread(buf, 1, CHUNK, f)) > 0) XXH3_64bits_update(h, buf, got);
    if (*ok && ferror(f)) *ok = 0;
    uint64_t d = *ok ? XXH3_64bits_digest(h) : 0;
    free(buf);
    XXH3_freeState(h);
    return d;
}

vx_status vx_cache_key(const char *const *paths, size_t n_paths, const vx_load_opts *opts,
                       char key_out[33], vx_err *e)
{
    char **files;
    size_t nf;
    vx_status st = vx_paths_expand(paths, n_paths, &files, &nf, e);
    if (st) return st;
    XXH3_state_t *h = XXH3_createState();
    if (!h) {
        vx_paths_free(files, nf);
        return vx_err_set(e, VX_ERR_NOMEM, "out of memory");
    }
    XXH3_128bits_reset(h);
    char line[PATH_MAX + 256];
    /* the feature definition: version and every parameter that changes the numbers */
    int n = snprintf(line, sizeof line,
                     "vixen-features version=%d market=%d warmup=%d clip=%g interval=native "
                     "instrument=%s\n",
                     VX_FEATURE_VERSION, VX_MARKET_FEATURES, VX_FEATURE_WARMUP,
                     (double)VX_FEATURE_CLIP, opts && opts->instrument ? opts->instrument : "");
    XXH3_128bits_update(h, line, (size_t)n);
    for (size_t i = 0; i < nf && !st; i++) {
        char real[PATH_MAX];
        FILE *f;
        st = vx_file_open_read(files[i], &f, e);
        if (st) break;
        struct stat sb;
        if (fstat(fileno(f), &sb) != 0 || !realpath(files[i], real)) {
            st = vx_err_line(e, VX_ERR_IO, files[i], -1, "", "cannot open: %s", strerror(errno));
            fclose(f);
            break;
        }
        int ok;
        uint64_t ch = file_content_hash(f, &ok);
        fclose(f);
        if (!ok) {
            st = vx_err_line(e, VX_ERR_IO, files[i], -1, "", "cannot read for hashing");
            break;
        }
        n = snprintf(line, sizeof line, "file %s size=%lld mtime=%lld.%09ld hash=%016llx\n", real,
                     (long long)sb.st_size, (long long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec,
                     (unsigned long long)ch);
        XXH3_128bits_update(h, line, (size_t)n);
    }
    XXH128_hash_t d = XXH3_128bits_digest(h);
    XXH3_freeState(h);
    vx_paths_free(files, nf);
    if (st) return st;
    snprintf(key_out, 33, "%016llx%016llx", (unsigned long long)d.high64,
             (unsigned long long)d.low64);
    return VX_OK;
}

void vx_cache_default_dir(char *buf, size_t n)
{
    const char *d = getenv("VIXEN_CACHE_DIR");
    if (d && *d) {
        snprintf(buf, n, "%s", d);
        return;
    }
    d = getenv("XDG_CACHE_HOME");
    if (d && *d) {
        snprintf(buf, n, "%s/vixen", d);
        return;
    }
    d = getenv("HOME");
    snprintf(buf, n, "%s/.cache/vixen", d && *d ? d : ".");
}

void vx_cache_path(const char *cache_dir, const char *key, char *buf, size_t n)
{
    snprintf(buf, n, "%s/features-v%d-%s.vxf", cache_dir, VX_FEATURE_VERSION, key);
}

static uint64_t align_page(uint64_t x) { return (x + 4095) & ~(uint64_t)4095; }

static void layout(cache_header *h)
{
    uint64_t off = HEADER_BYTES;
    for (int i = 0; i < 6; i++) {
        h->off[i] = off;
        off = align_page(off + h->n_bars * 8);
    }
    h->off[6] = off;
    h->off[7] = 0;
    h->file_bytes = off + h->rows * h->cols * sizeof(float);
    if (h->has_signal) {
        h->off[7] = align_page(h->file_bytes);
        h->file_bytes = h->off[7] + h->n_bars * 8;
    }
}

static vx_status cache_write(const char *path, const vx_market *m, const char *key, vx_err *e)
{
    cache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, 8);
    h.format = CACHE_FORMAT;
    h.feature_version = VX_FEATURE_VERSION;
    snprintf(h.key, sizeof h.key, "%s", key);
    h.n_bars = m->n_bars;
    h.first_bar = m->first_bar;
    h.rows = m->rows;
    h.cols = VX_MARKET_FEATURES;
    h.interval_ns = m->interval_ns;
    h.instrument_id = m->series_.instrument_id;
    snprintf(h.instrument, sizeof h.instrument, "%s", m->instrument);
    snprintf(h.source, sizeof h.source, "%s", m->source);
    h.has_signal = m->signal != NULL;
    h.signal_strength = m->signal_strength;
    layout(&h);
    const void *arrays[8] = {m->ts,    m->open,   m->high,     m->low,
                             m->close, m->volume, m->features, m->signal};
    uint64_t sizes[8];
    for (int i = 0; i < 6; i++) sizes[i] = h.n_bars * 8;
    sizes[6] = h.rows * h.cols * sizeof(float);
    sizes[7] = h.has_signal ? h.n_bars * 8 : 0;
    int n_arrays = h.has_signal ? 8 : 7;
    XXH3_state_t *xs = XXH3_createState();
    if (!xs) return vx_err_set(e, VX_ERR_NOMEM, "out of memory");
    XXH3_64bits_reset(xs);
    for (int i = 0; i < n_arrays; i++) XXH3_64bits_update(xs, arrays[i], sizes[i]);
    h.payload_hash = XXH3_64bits_digest(xs);
    XXH3_freeState(xs);
    h.header_hash = XXH3_64bits(&h, offsetof(cache_header, header_hash));

    vx_atomic_file af;
    vx_status st = vx_atomic_open(&af, path, e);
    if (st) return st;
    static const uint8_t zeros[4096];
    uint8_t head[HEADER_BYTES] = {0};
    memcpy(head, &h, sizeof h);
    int bad = fwrite(head, 1, HEADER_BYTES, af.f) != HEADER_BYTES;
    uint64_t pos = HEADER_BYTES;
    for (int i = 0; i < n_arrays && !bad; i++) {
        while (pos < h.off[i] && !bad) {
            size_t pad = (size_t)(h.off[i] - pos < 4096 ? h.off[i] - pos : 4096);
            bad = fwrite(zeros, 1, pad, af.f) != pad;
            pos += pad;
        }
        bad = bad || fwrite(arrays[i], 1, sizes[i], af.f) != sizes[i];
        pos += sizes[i];
    }
    if (bad) {
        vx_atomic_abort(&af);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed: %s", strerror(errno));
    }
    return vx_atomic_commit(&af, e);
}

/* Maps a cache file; returns 0 and fills m on success, else writes the miss reason. */
static int cache_try_load(const char *path, const char *key, vx_market *m, char *why, size_t wn)
{
    FILE *f;
    vx_err oe;
    if (vx_file_open_read(path, &f, &oe) != VX_OK) {
        /* a FIFO or folder in the entry's place is a miss: the write renames over it */
        snprintf(why, wn, "%s",
                 access(path, F_OK) != 0 ? "no entry for this key" : "entry is not a regular file");
        return -1;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || (uint64_t)sb.st_size < HEADER_BYTES) {
        fclose(f);
        snprintf(why, wn, "entry shorter than its header");
        return -1;
    }
    /* MAP_POPULATE: one bulk fault-in instead of a fault per page (the checksum reads it all) */
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fileno(f), 0);
    fclose(f);
    if (map == MAP_FAILED) {
        snprintf(why, wn, "cannot map the entry: %s", strerror(errno));
        return -1;
    }
    cache_header h;
    memcpy(&h, map, sizeof h);
    const char *bad = NULL;
    if (memcmp(h.magic, CACHE_MAGIC, 8) != 0) bad = "not a vixen cache file";
    else if (h.header_hash != XXH3_64bits(&h, offsetof(cache_header, header_hash)))
        bad = "damaged header";
    else if (h.format != CACHE_FORMAT) bad = "written by another cache format";
    else if (h.feature_version != VX_FEATURE_VERSION) bad = "written by another feature version";
    else if (strcmp(h.key, key) != 0) bad = "key mismatch";
    else if (h.cols != VX_MARKET_FEATURES) bad = "wrong feature count";
    else if (h.has_signal > 1) bad = "inconsistent signal flag";
    else if (h.file_bytes != (uint64_t)sb.st_size) bad = "truncated entry";
    /* counts bound by the file's size before any size is computed from them (each bar takes 48
     * bytes), so that the layout's arithmetic cannot wrap */
    else if (h.n_bars > (uint64_t)sb.st_size / 48 || h.first_bar > h.n_bars ||
             h.rows != h.n_bars - h.first_bar)
        bad = "inconsistent counts";
    if (!bad) {
        cache_header chk = h;
        layout(&chk);
        if (memcmp(chk.off, h.off, sizeof h.off) != 0) bad = "inconsistent layout";
    }
    if (!bad) {
        XXH3_state_t *xs = XXH3_createState();
        if (!xs) bad = "out of memory";
        else {
            XXH3_64bits_reset(xs);
            for (int i = 0; i < 6; i++)
                XXH3_64bits_update(xs, (uint8_t *)map + h.off[i], h.n_bars * 8);
            XXH3_64bits_update(xs, (uint8_t *)map + h.off[6], h.rows * h.cols * sizeof(float));
            if (h.has_signal) XXH3_64bits_update(xs, (uint8_t *)map + h.off[7], h.n_bars * 8);
            if (XXH3_64bits_digest(xs) != h.payload_hash) bad = "payload checksum mismatch";
            XXH3_freeState(xs);
        }
    }
    if (bad) {
        munmap(map, (size_t)sb.st_size);
        snprintf(why, wn, "%s", bad);
        return -1;
    }
    uint8_t *b = map;
    m->n_bars = h.n_bars;
    m->ts = (const int64_t *)(b + h.off[0]);
    m->open = (const double *)(b + h.off[1]);
    m->high = (const double *)(b + h.off[2]);
    m->low = (const double *)(b + h.off[3]);
    m->close = (const double *)(b + h.off[4]);
    m->volume = (const double *)(b + h.off[5]);
    m->features = (const float *)(b + h.off[6]);
    if (h.has_signal) {
        m->signal = (const double *)(b + h.off[7]);
        m->signal_strength = h.signal_strength;
    }
    m->first_bar = h.first_bar;
    m->rows = h.rows;
    m->interval_ns = h.interval_ns;
    snprintf(m->instrument, sizeof m->instrument, "%s", h.instrument);
    m->instrument_id = h.instrument_id;
    snprintf(m->source, sizeof m->source, "%s", h.source);
    m->map_ = map;
    m->map_len_ = (size_t)sb.st_size;
    m->from_cache = 1;
    return 0;
}

static void market_point_at_owned(vx_market *m)
{
    m->n_bars = m->series_.n;
    m->ts = m->series_.ts;
    m->open = m->series_.open;
    m->high = m->series_.high;
    m->low = m->series_.low;
    m->close = m->series_.close;
    m->volume = m->series_.volume;
    m->first_bar = m->features_.first_bar;
    m->rows = m->features_.rows;
    m->features = m->features_.x;
    m->interval_ns = m->series_.interval_ns;
    snprintf(m->instrument, sizeof m->instrument, "%s", m->series_.instrument);
    m->instrument_id = m->series_.instrument_id;
    snprintf(m->source, sizeof m->source, "%s", m->series_.source);
}

vx_status vx_market_from_series(vx_series *s, vx_market *out, vx_err *e)
{
    memset(out, 0, sizeof *out);
    out->series_ = *s;
    memset(s, 0, sizeof *s);
    vx_status st = vx_features_compute(&out->series_, &out->features_, e);
    if (st) {
        vx_market_close(out);
        return st;
    }
    market_point_at_owned(out);
    return VX_OK;
}

/* The entry of `key` in cache_dir into `out` (its path into `path`): 1 on a hit, 0 on a miss,
 * either logged ("feature cache: hit KEY" or "… miss (why) KEY") with `what` after it. An entry
 * without a planted signal misses where one is needed. */
static int cache_lookup(const char *cache_dir, const char *key, int need_signal, const char *what,
                        char *path, size_t n, vx_market *out)
{
    vx_cache_path(cache_dir, key, path, n);
    char why[128];
    int hit = cache_try_load(path, key, out, why, sizeof why) == 0;
    if (hit && need_signal && !out->signal) { /* an entry of the key, but not this market */
        vx_market_close(out);
        snprintf(why, sizeof why, "entry without the planted signal");
        hit = 0;
    }
    if (hit) {
        snprintf(out->key, sizeof out->key, "%s", key);
        vx_log(VX_LOG_INFO, "feature cache: hit %s%s", key, what);
    } else {
        vx_log(VX_LOG_INFO, "feature cache: miss (%s) %s%s", why, key, what);
    }
    return hit;
}

/* The market made on a miss, written as key's entry at path. */
static vx_status cache_store(const char *cache_dir, const char *path, const char *key, vx_market *m,
                             vx_err *e)
{
    snprintf(m->key, sizeof m->key, "%s", key);
    vx_status st = vx_mkdirs(cache_dir, e);
    if (!st) st = cache_write(path, m, key, e);
    if (!st) vx_log(VX_LOG_INFO, "feature cache: wrote %s", path);
    return st;
}

/* ---- synthetic markets ----------------------------------------------------------------------
 * A synthetic market is a function of its settings, as a market read from files is of its files,
 * so it is cached the same way: synthesising the default one (260 days, 101,400 bars) and its
 * features took 0.11–0.14 s on one core and 0.22–0.28 s in a study's first seconds on a GPU
 * host, where mapping its entry reads 26 MB. */

/* every field of vx_synth_cfg is in the key: a field added there must be added here */
_Static_assert(sizeof(vx_synth_cfg) == 8 + 8 + 12 * 8, "vx_synth_cache_key: a new setting");

void vx_synth_cache_key(const vx_synth_cfg *c, char key_out[33])
{
    char line[1024];
    int n = snprintf(line, sizeof line,
                     "vixen-synth version=%d features=%d market=%d warmup=%d clip=%g seed=%llu "
                     "days=%d start_price=%.17g tick=%.17g bar_vol=%.17g garch_alpha=%.17g "
                     "garch_beta=%.17g t_dof=%.17g intraday_u=%.17g overnight_vol=%.17g "
                     "signal_strength=%.17g signal_phi=%.17g drift=%.17g base_volume=%.17g\n",
                     VX_SYNTH_VERSION, VX_FEATURE_VERSION, VX_MARKET_FEATURES, VX_FEATURE_WARMUP,
                     (double)VX_FEATURE_CLIP, (unsigned long long)c->seed, c->days, c->start_price,
                     c->tick, c->bar_vol, c->garch_alpha, c->garch_beta, c->t_dof, c->intraday_u,
                     c->overnight_vol, c->signal_strength, c->signal_phi, c->drift, c->base_volume);
    XXH128_hash_t d = XXH3_128bits(line, (size_t)n);
    snprintf(key_out, 33, "%016llx%016llx", (unsigned long long)d.high64,
             (unsigned long long)d.low64);
}

vx_status vx_market_synth(const vx_synth_cfg *cfg, const char *cache_dir, vx_market *out, vx_err *e)
{
    memset(out, 0, sizeof *out);
    vx_status st = vx_synth_check(cfg, e);
    if (st) return st;
    char key[33] = "", path[2048] = "";
    int cached = cache_dir && cfg->days >= VX_SYNTH_CACHE_MIN_DAYS;
    if (cached && strlen(cache_dir) + 64 > sizeof path)
        return vx_err_line(e, VX_ERR_ARG, cache_dir, -1, "", "cache folder path too long");
    if (cached) {
        vx_synth_cache_key(cfg, key);
        if (cache_lookup(cache_dir, key, 1, " (synthetic market)", path, sizeof path, out))
            return VX_OK;
    }
    vx_series s = {0};
    double *signal = NULL;
    st = vx_synth_generate(cfg, &s, &signal, e);
    if (!st) st = vx_market_from_series(&s, out, e);
    vx_series_free(&s);
    if (st) {
        free(signal);
        return st;
    }
    out->signal = out->signal_ = signal; /* the market owns it now */
    out->signal_strength = cfg->signal_strength;
    vx_err we;
    if (cached && cache_store(cache_dir, path, key, out, &we))
        vx_log(VX_LOG_WARN,
               "feature cache: the synthetic market was not written (%s); it is made again next "
               "time",
               we.msg);
    return VX_OK;
}

vx_status vx_market_open(const char *const *paths, size_t n_paths, const vx_load_opts *opts,
                         const char *cache_dir, vx_market *out, vx_err *e)
{
    memset(out, 0, sizeof *out);
    char key[33] = "", path[2048] = "";
    vx_status st;
    if (cache_dir && strlen(cache_dir) + 64 > sizeof path)
        return vx_err_line(e, VX_ERR_ARG, cache_dir, -1, "", "cache folder path too long");
    if (cache_dir) {
        st = vx_cache_key(paths, n_paths, opts, key, e);
        if (st) return st;
        if (cache_lookup(cache_dir, key, 0, "", path, sizeof path, out)) return VX_OK;
    }
    vx_series s = {0};
    st = vx_series_load(paths, n_paths, opts, &s, e);
    if (st) {
        vx_series_free(&s);
        return st;
    }
    st = vx_market_from_series(&s, out, e);
    if (st) return st;
    vx_err we;
    if (cache_dir && (st = cache_store(cache_dir, path, key, out, &we)) != VX_OK) {
        if (opts && opts->cache_required) {
            if (e) *e = we;
            vx_market_close(out);
            return st;
        }
        vx_log(VX_LOG_WARN,
               "feature cache: not written (%s); the features are computed again next time",
               we.msg);
    }
    return VX_OK;
}

void vx_market_close(vx_market *m)
{
    if (m->map_) munmap(m->map_, m->map_len_);
    vx_series_free(&m->series_);
    vx_features_free(&m->features_);
    free(m->signal_);
    memset(m, 0, sizeof *m);
}

/* data.h — market data: the OHLCV series, CSV and DBN readers and writers, validation, the
 * synthetic market, the 45 market features, and the on-disk feature cache.
 *
 * Shape letters: n = bars, F = 45 market features, r = feature rows (bars after warm-up). */
#ifndef VIXEN_DATA_H
#define VIXEN_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the series ---------------------------------------------------------------------------- */

/* One instrument's bars in strictly increasing time. Timestamps are the bar's start in
 * nanoseconds since the UNIX epoch (UTC). */
typedef struct {
    size_t n, cap;
    int64_t *ts;
    double *open, *high, *low, *close, *volume;
    char instrument[72];    /* raw symbol, instrument id as text, or the CSV file's stem */
    uint32_t instrument_id; /* DBN instrument id; 0 when the source has none */
    int64_t interval_ns;    /* from the DBN schema, else the most common spacing */
    char source[512];       /* where the bars came from, for messages and `inspect` */
} vx_series;

vx_status vx_series_reserve(vx_series *s, size_t cap, vx_err *e);
vx_status vx_series_push(vx_series *s, int64_t ts, double o, double h, double l, double c, double v,
                         vx_err *e);
void vx_series_free(vx_series *s);

/* The per-bar rule every reader applies, so that all sources refuse the same things. Returns NULL
 * when the bar is valid, else the name of the first bad field and a reason in `why`.
 * `prev_ts` is the previous bar's timestamp, or INT64_MIN for the first bar. */
const char *vx_bar_check(int64_t prev_ts, int64_t ts, double o, double h, double l, double c,
                         double v, char *why, size_t why_len);

/* Summary for `vixen data inspect`. A gap is a spacing larger than the bar interval. */
typedef struct {
    size_t bars;
    int64_t first_ts, last_ts;
    int64_t interval_ns;
    size_t gaps;
    int64_t largest_gap_ns;
    int64_t largest_gap_at; /* timestamp of the bar after the largest gap */
} vx_series_stats;

void vx_series_stats_compute(const vx_series *s, vx_series_stats *st);

/* ---- loading ------------------------------------------------------------------------------- */

typedef struct {
    /* NULL: the file must hold one instrument. Digits: an instrument id. Otherwise a raw
     * symbol, resolved through the DBN metadata's symbol mappings. CSV files ignore ids and
     * take a symbol as the series' name. */
    const char *instrument;
    /* The most bytes a zstd input may inflate to (0: VX_INFLATE_DEFAULT). */
    uint64_t max_inflate;
    /* vx_market_open: 1 when a cache entry that cannot be written is an error (`vixen data
     * features`, whose work it is); 0: a warning, the market computed serves from memory. */
    int cache_required;
} vx_load_opts;

/* Bounds on zstd output, so that a small file cannot claim the machine's memory. Besides the
 * absolute limit above, output may be at most VX_INFLATE_MAX_RATIO times the compressed size (at
 * least VX_INFLATE_MIN bytes): DBN bars compress about 6 times (a tick-by-tick random walk) and
 * at most about 14 (identical bars: the timestamps still differ), even at zstd's highest level,
 * while a bomb of repeated bytes reaches 32,000 times. Output is never sized from a frame
 * header's claim; it grows as it arrives. */
#define VX_INFLATE_MAX_RATIO 1000
#define VX_INFLATE_MIN (1ull << 20)
#define VX_INFLATE_DEFAULT (16ull << 30)
/* The output bound for `compressed` input bytes: min(absolute limit, ratio cap). */
uint64_t vx_inflate_limit(size_t compressed, uint64_t max_inflate);
/* Parses a byte count with an optional K, M, G or T suffix (powers of 1024): "16G". Returns 0 on
 * success, -1 when it is not a positive size. */
int vx_parse_size(const char *s, uint64_t *out);

typedef enum { VX_FORMAT_UNKNOWN, VX_FORMAT_CSV, VX_FORMAT_DBN, VX_FORMAT_DBN_ZSTD } vx_format;

/* Decides by the first bytes (up to VX_SNIFF_BYTES: DBN magic, zstd magic, or any NUL byte, which
 * marks a binary file as DBN so that a damaged magic is reported as such), never by the name. */
#define VX_SNIFF_BYTES 64
vx_format vx_format_sniff(const uint8_t *head, size_t n);

vx_status vx_csv_parse(const char *name, const char *text, size_t len, const vx_load_opts *opts,
                       vx_series *out, vx_err *e);
vx_status vx_csv_read(const char *path, const vx_load_opts *opts, vx_series *out, vx_err *e);
vx_status vx_csv_write(const char *path, const vx_series *s, vx_err *e); /* atomic */

/* Parses a CSV timestamp field (all formats but the epoch-integer ones, and the date/time pair
 * joined by one space). Exposed for tests. */
int vx_parse_datetime(const char *s, size_t len, int64_t *ns_out);
/* Formats ns since the epoch as "YYYY-MM-DDTHH:MM:SS[.fffffffff]Z". */
void vx_format_ts(int64_t ns, char *buf, size_t n);

/* DBN metadata and what a scan of the records found. */
typedef struct {
    uint32_t id;
    char symbol[72]; /* from the metadata mappings, "" when none names it */
    size_t bars;
} vx_dbn_instrument;

typedef struct {
    int version;
    int compressed;
    char dataset[17];
    uint16_t schema;
    uint64_t start, end, limit;
    uint8_t stype_in, stype_out, ts_out;
    size_t records;       /* all records, OHLCV or not */
    size_t n_instruments; /* distinct OHLCV instruments, at most VX_DBN_MAX_INSTRUMENTS */
    vx_dbn_instrument instruments[64];
    size_t n_mappings;
    struct {
        char raw[72];
        uint32_t id;
    } mappings[64];
} vx_dbn_info;
#define VX_DBN_MAX_INSTRUMENTS 64

/* Decompresses if needed (streaming zstd, several frames, the DBN prelude checked from the first
 * bytes before the rest is inflated, output bounded by vx_inflate_limit), parses the metadata,
 * and fills `out` with the selected instrument's OHLCV bars. `info` (optional) receives the
 * metadata and the instruments seen. With `out` NULL it only scans. */
vx_status vx_dbn_parse(const char *name, const uint8_t *bytes, size_t len, const vx_load_opts *opts,
                       vx_series *out, vx_dbn_info *info, vx_err *e);
vx_status vx_dbn_read(const char *path, const vx_load_opts *opts, vx_series *out, vx_dbn_info *info,
                      vx_err *e);
/* Writes a DBN v3 OHLCV stream (zstd-compressed if `zstd_level` > 0), atomically. The schema is
 * chosen from the series' interval (1s, 1m, 1h, 1d). */
vx_status vx_dbn_write(const char *path, const vx_series *s, int zstd_level, vx_err *e);
/* Decompresses a whole zstd input (any number of frames) with the streaming API into a buffer
 * that grows as output arrives; output past vx_inflate_limit(n, max_inflate) is an error. */
vx_status vx_zstd_decompress(const char *name, const uint8_t *in, size_t n, uint64_t max_inflate,
                             uint8_t **out, size_t *out_n, vx_err *e);

/* Reads files and folders (a folder contributes its regular files, sorted by name, skipping
 * dotfiles) into one series in time order. Files may interleave in time; a timestamp present in
 * two files is an error naming both. */
vx_status vx_series_load(const char *const *paths, size_t n_paths, const vx_load_opts *opts,
                         vx_series *out, vx_err *e);
/* Expands folders into their files (sorted); the caller frees with vx_paths_free. */
vx_status vx_paths_expand(const char *const *paths, size_t n, char ***out, size_t *out_n,
                          vx_err *e);
void vx_paths_free(char **paths, size_t n);

/* ---- synthetic market ---------------------------------------------------------------------- */

typedef struct {
    uint64_t seed;
    int days;               /* trading days (weekdays), 390 one-minute bars each, 1..50000 */
    double start_price;     /* 4000 */
    double tick;            /* 0.25 */
    double bar_vol;         /* unconditional per-bar log-return volatility, 4e-4 */
    double garch_alpha;     /* 0.05 */
    double garch_beta;      /* 0.93 */
    double t_dof;           /* Student-t degrees of freedom of the shocks, 5 */
    double intraday_u;      /* strength of the U-shaped intraday volatility profile, 1.5 */
    double overnight_vol;   /* overnight gap volatility in bar_vol units, 8 */
    double signal_strength; /* planted drift in units of the bar's volatility; 0 = random walk */
    double signal_phi;      /* AR(1) coefficient of the planted signal, 0.97 */
    double drift;       /* annual log drift, spread evenly over the bars (252 · 390 a year), 0 */
    double base_volume; /* mean volume per bar, 1500 */
} vx_synth_cfg;

void vx_synth_default(vx_synth_cfg *cfg);
/* Every parameter finite and in its range (the generator calls it too); the error names it. */
vx_status vx_synth_check(const vx_synth_cfg *cfg, vx_err *e);
/* `signal` (optional, n doubles, malloc'd) receives the planted signal in force at each bar:
 * bar t's expected log return is signal_strength · σ_t · signal[t] (signal[t] is the AR(1)
 * state drawn after bar t − 1, s_{t−1} in synth.c's notation). */
vx_status vx_synth_generate(const vx_synth_cfg *cfg, vx_series *out, double **signal, vx_err *e);
/* The generator's version: part of a cached synthetic market's key (vx_market_synth), so it must
 * change whenever vx_synth_generate's numbers do. test_data pins the numbers of one market to a
 * checksum beside this version, so that a change to the one without the other fails. */
#define VX_SYNTH_VERSION 1

/* ---- features ------------------------------------------------------------------------------ */

#define VX_MARKET_FEATURES 45
#define VX_AGENT_FEATURES 6
#define VX_OBS_DIM (VX_MARKET_FEATURES + VX_AGENT_FEATURES)
#define VX_FEATURE_VERSION 1
#define VX_FEATURE_WARMUP 240 /* bars dropped at the start: the longest lookback */
#define VX_FEATURE_CLIP 5.0f  /* every feature lies in [-5, 5] */

typedef struct {
    size_t rows;      /* n - first_bar */
    size_t first_bar; /* row r describes bar first_bar + r */
    float *x;         /* rows × F, row-major */
} vx_features;

const char *vx_feature_name(int i); /* 0..44 market, 45..50 agent */
vx_status vx_features_compute(const vx_series *s, vx_features *out, vx_err *e);
void vx_features_free(vx_features *f);

/* ---- the market a run trains on: bars + features, from the cache or computed --------------- */

typedef struct {
    size_t n_bars;
    const int64_t *ts;
    const double *open, *high, *low, *close, *volume;
    size_t first_bar, rows;
    const float *features; /* rows × F */
    char instrument[72];
    uint32_t instrument_id; /* the DBN instrument id, 0 when the source has none */
    int64_t interval_ns;
    char key[33]; /* the cache key (hex), "" when no cache was asked for */
    char source[512];
    int from_cache; /* 1 on a hit */
    /* a synthetic market's planted signal by bar (vx_synth_generate), for the oracle baseline;
     * NULL for real data */
    const double *signal;
    double signal_strength;
    /* ownership, private */
    double *signal_;
    void *map_;
    size_t map_len_;
    vx_series series_;
    vx_features features_;
} vx_market;

/* The one key function that precompute and training both call. It covers each input file's
 * identity (real path, size, mtime, a content hash), the instrument selection, the requested
 * bar interval (0 = as stored), the feature version and the feature parameters. */
vx_status vx_cache_key(const char *const *paths, size_t n_paths, const vx_load_opts *opts,
                       char key_out[33], vx_err *e);
/* The cache folder: $VIXEN_CACHE_DIR, else $XDG_CACHE_HOME/vixen, else $HOME/.cache/vixen. */
void vx_cache_default_dir(char *buf, size_t n);

/* Opens a market: with `cache_dir`, looks up the key and maps the cached file on a hit (logging
 * "feature cache: hit <key>"); on a miss (logging "feature cache: miss (<reason>)") loads the
 * files, computes the features and writes the cache atomically (a write that fails is a warning,
 * or with opts->cache_required an error). With `cache_dir` NULL it always computes and writes
 * nothing. */
vx_status vx_market_open(const char *const *paths, size_t n_paths, const vx_load_opts *opts,
                         const char *cache_dir, vx_market *out, vx_err *e);
/* A market over an in-memory series (synthetic data): computes features, no cache. Takes
 * ownership of the series. */
vx_status vx_market_from_series(vx_series *s, vx_market *out, vx_err *e);
/* The key of a synthetic market: every setting of `cfg`, the generator's and the features'
 * versions. */
void vx_synth_cache_key(const vx_synth_cfg *cfg, char key_out[33]);
/* A synthetic market with its planted signal: with `cache_dir`, from the cache on a hit, else
 * synthesised (vx_synth_generate, vx_market_from_series) and written to the cache when it is at
 * least VX_SYNTH_CACHE_MIN_DAYS long (a shorter one is made faster than read back). A failed
 * write is a warning: the market is made all the same. With `cache_dir` NULL: no cache. */
#define VX_SYNTH_CACHE_MIN_DAYS 50
vx_status vx_market_synth(const vx_synth_cfg *cfg, const char *cache_dir, vx_market *out,
                          vx_err *e);
void vx_market_close(vx_market *m);
/* The cache file a key maps to. */
void vx_cache_path(const char *cache_dir, const char *key, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif

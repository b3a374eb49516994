/* cmd_data.c — `vixen data inspect | synth | features`.
 *
 * inspect reads each argument (a file, or a folder as one series) and reports what is in it and
 * whether it passes validation — as text or as one JSON object per argument (--json). A failing
 * input prints its one-line error to stderr and makes the exit code 1. */
#include "args.h"
#include "cli.h"
#include "vixen/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static int out_of_memory(void)
{
    fprintf(stderr, "vixen: out of memory\n");
    return VX_EXIT_FAIL;
}

/* --max-inflate SIZE: the absolute bound on what zstd input may inflate to (data.h). */
#define MAX_INFLATE_OPT(var)                                                                       \
    {                                                                                              \
        "max-inflate", "SIZE",                                                                     \
            "the most a zstd file may inflate to, bytes or with K, M, G, T (default 16G)", &var,   \
            NULL, NULL, NULL, 0                                                                    \
    }

static int arg_size(const vx_cmd *c, const char *name, const char *s, uint64_t *out)
{
    if (vx_parse_size(s, out) == 0) return 0;
    fprintf(stderr, "%s: --%s must be a size such as 4096, 512M or 16G, got '%s'\n", c->cmd, name,
            s);
    return -1;
}

static const char *schema_name(uint16_t s)
{
    switch (s) {
    case 5: return "ohlcv-1s";
    case 6: return "ohlcv-1m";
    case 7: return "ohlcv-1h";
    case 8: return "ohlcv-1d";
    case 13: return "ohlcv-eod";
    case 0xFFFF: return "mixed";
    }
    return "other";
}

typedef struct {
    const char *path;
    int is_dbn, is_dir, scanned;
    vx_dbn_info info;
    vx_series s;
    vx_series_stats st;
    vx_err err;
    vx_status status;
} inspection;

static void inspect_load(inspection *in, const vx_load_opts *opts)
{
    struct stat sb;
    vx_err_clear(&in->err);
    if (stat(in->path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        FILE *f;
        in->status = vx_file_open_read(in->path, &f, &in->err);
        if (in->status) return;
        uint8_t head[VX_SNIFF_BYTES];
        size_t got = fread(head, 1, sizeof head, f);
        fclose(f);
        vx_format fmt = vx_format_sniff(head, got);
        if (fmt == VX_FORMAT_DBN || fmt == VX_FORMAT_DBN_ZSTD) {
            in->is_dbn = 1;
            uint8_t *data;
            size_t n;
            in->status = vx_file_read_all(in->path, &data, &n, &in->err);
            if (!in->status) {
                in->status = vx_dbn_parse(in->path, data, n, opts, NULL, &in->info, &in->err);
                in->scanned = in->status == VX_OK;
                if (!in->status)
                    in->status = vx_dbn_parse(in->path, data, n, opts, &in->s, &in->info, &in->err);
                free(data);
            }
            if (!in->status) vx_series_stats_compute(&in->s, &in->st);
            return;
        }
    }
    in->is_dir = stat(in->path, &sb) == 0 && S_ISDIR(sb.st_mode);
    const char *one[1] = {in->path};
    in->status = vx_series_load(one, 1, opts, &in->s, &in->err);
    if (!in->status) vx_series_stats_compute(&in->s, &in->st);
}

static void print_json(const inspection *in, long nbars)
{
    FILE *o = stdout;
    printf("{\"file\": ");
    json_str(o, in->path);
    printf(", \"valid\": %s", in->status ? "false" : "true");
    if (in->status) {
        printf(", \"error\": ");
        json_str(o, in->err.msg);
    }
    if (in->is_dbn && (in->scanned || in->info.version)) {
        const vx_dbn_info *d = &in->info;
        printf(", \"format\": \"dbn\", \"dbn_version\": %d, \"compressed\": %s, \"dataset\": ",
               d->version, d->compressed ? "true" : "false");
        json_str(o, d->dataset);
        printf(", \"schema\": \"%s\", \"records\": %zu, \"instruments\": [", schema_name(d->schema),
               d->records);
        for (size_t i = 0; i < d->n_instruments; i++) {
            printf("%s{\"instrument_id\": %u, \"symbol\": ", i ? ", " : "", d->instruments[i].id);
            json_str(o, d->instruments[i].symbol);
            printf(", \"bars\": %zu}", d->instruments[i].bars);
        }
        printf("]");
    } else if (!in->is_dbn) {
        printf(", \"format\": \"%s\"", in->is_dir ? "folder" : "csv");
    }
    if (!in->status) {
        const vx_series_stats *st = &in->st;
        char a[48], b[48];
        vx_format_ts(st->first_ts, a, sizeof a);
        vx_format_ts(st->last_ts, b, sizeof b);
        printf(", \"instrument\": ");
        json_str(o, in->s.instrument);
        printf(", \"bars\": %zu, \"first\": \"%s\", \"last\": \"%s\", \"interval_s\": %.9g, "
               "\"gaps\": %zu, \"largest_gap_s\": %.9g",
               st->bars, a, b, (double)st->interval_ns / 1e9, st->gaps,
               (double)st->largest_gap_ns / 1e9);
        size_t k = nbars < 0 || (size_t)nbars > in->s.n ? in->s.n : (size_t)nbars;
        printf(", \"bars_shown\": [");
        for (size_t i = 0; i < k; i++) {
            vx_format_ts(in->s.ts[i], a, sizeof a);
            printf("%s{\"ts_ns\": %lld, \"time\": \"%s\", \"open\": %.17g, \"high\": %.17g, "
                   "\"low\": %.17g, \"close\": %.17g, \"volume\": %.17g}",
                   i ? ", " : "", (long long)in->s.ts[i], a, in->s.open[i], in->s.high[i],
                   in->s.low[i], in->s.close[i], in->s.volume[i]);
        }
        printf("]");
    }
    printf("}\n");
}

static void print_text(const inspection *in)
{
    printf("%s\n", in->path);
    if (in->is_dbn && in->info.version) {
        const vx_dbn_info *d = &in->info;
        printf("  format       dbn v%d%s, dataset %s, schema %s, %zu records\n", d->version,
               d->compressed ? " (zstd)" : "", d->dataset, schema_name(d->schema), d->records);
        for (size_t i = 0; i < d->n_instruments; i++)
            printf("  instrument   %u%s%s: %zu bars\n", d->instruments[i].id,
                   d->instruments[i].symbol[0] ? " " : "", d->instruments[i].symbol,
                   d->instruments[i].bars);
    } else if (!in->is_dbn) {
        printf("  format       %s\n", in->is_dir ? "folder (one series from its files)" : "csv");
    }
    if (!in->status) {
        const vx_series_stats *st = &in->st;
        char a[48], b[48], g[48];
        vx_format_ts(st->first_ts, a, sizeof a);
        vx_format_ts(st->last_ts, b, sizeof b);
        printf("  series       %s: %zu bars, %s .. %s\n", in->s.instrument, st->bars, a, b);
        printf("  interval     %.9g s\n", (double)st->interval_ns / 1e9);
        if (st->gaps) {
            vx_format_ts(st->largest_gap_at, g, sizeof g);
            printf("  gaps         %zu (largest %.9g s, before %s)\n", st->gaps,
                   (double)st->largest_gap_ns / 1e9, g);
        } else {
            printf("  gaps         0\n");
        }
        printf("  verdict      valid\n");
    } else {
        printf("  verdict      INVALID: %s\n", in->err.msg);
    }
}

static int cmd_inspect(int argc, char **argv)
{
    const char *instrument = NULL, *bars = NULL, *inflate = NULL;
    int json = 0;
    vx_opt opts[] = {
        {"instrument", "ID|SYMBOL", "the instrument to read from multi-instrument DBN files",
         &instrument, NULL, NULL, NULL, 0},
        MAX_INFLATE_OPT(inflate),
        {"json", NULL, "one JSON object per argument", NULL, &json, NULL, NULL, 0},
        {"bars", "N", "bars to list in the JSON output (default 10, -1 for all)", &bars, NULL, NULL,
         NULL, 0},
    };
    vx_cmd c = {"vixen data inspect",
                "FILE...",
                "Reads each file (or folder, as one series) and reports its bars, time range, "
                "interval, gaps, instruments and whether it passes validation.",
                opts,
                sizeof opts / sizeof *opts,
                1,
                4096};
    const char **pos = malloc((size_t)argc * sizeof *pos + 1);
    if (!pos) return out_of_memory();
    size_t np;
    int rc = vx_args_parse(&c, argc, argv, pos, &np);
    long nbars = 10;
    vx_load_opts lo = {0};
    if (!rc && bars && vx_arg_long(&c, "bars", bars, -1, 1000000000, &nbars)) rc = 2;
    if (!rc && inflate && arg_size(&c, "max-inflate", inflate, &lo.max_inflate)) rc = 2;
    if (rc) {
        free(pos);
        return rc == 1 ? VX_EXIT_OK : VX_EXIT_USAGE;
    }
    lo.instrument = instrument;
    int failed = 0;
    for (size_t i = 0; i < np; i++) {
        inspection in;
        memset(&in, 0, sizeof in);
        in.path = pos[i];
        inspect_load(&in, &lo);
        if (json) print_json(&in, nbars);
        else print_text(&in);
        if (in.status) {
            fprintf(stderr, "vixen: %s\n", in.err.msg);
            failed = 1;
        }
        vx_series_free(&in.s);
    }
    free(pos);
    return failed ? VX_EXIT_FAIL : VX_EXIT_OK;
}

/* Whether s ends with suffix, in any case (".DBN" is a DBN file's name too). */
static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

static int cmd_synth(int argc, char **argv)
{
    const char *days = NULL, *seed = NULL, *strength = NULL, *phi = NULL, *drift = NULL;
    const char *out = NULL;
    vx_opt opts[] = {
        {"days", "N", "trading days of 390 one-minute bars, up to 50000 (default 20)", &days, NULL,
         NULL, NULL, 0},
        {"seed", "S", "random seed (default 1)", &seed, NULL, NULL, NULL, 0},
        {"strength", "K", "planted signal strength, 0 = random walk (default 0.15)", &strength,
         NULL, NULL, NULL, 0},
        {"phi", "P", "persistence (AR(1)) of the planted signal (default 0.97)", &phi, NULL, NULL,
         NULL, 0},
        {"drift", "MU", "annual log drift (default 0)", &drift, NULL, NULL, NULL, 0},
        {"out", "FILE", "output: .csv, .dbn or .dbn.zst (required)", &out, NULL, NULL, NULL, 0},
    };
    vx_cmd c = {"vixen data synth",
                NULL,
                "Writes the synthetic market: GARCH(1,1) volatility, Student-t shocks, a U-shaped "
                "session profile, 0.25 ticks and a planted AR(1) drift (docs/data.md).",
                opts,
                sizeof opts / sizeof *opts,
                0,
                0};
    const char *pos[1];
    size_t np;
    int rc = vx_args_parse(&c, argc, argv, pos, &np);
    if (rc) return rc == 1 ? VX_EXIT_OK : VX_EXIT_USAGE;
    if (!out) {
        fprintf(stderr, "%s: missing --out FILE (see --help)\n", c.cmd);
        return VX_EXIT_USAGE;
    }
    if (!ends_with(out, ".csv") && !ends_with(out, ".dbn") && !ends_with(out, ".dbn.zst")) {
        /* the format is the name's: a .dbn.gz or .zst written as CSV would read back wrong */
        fprintf(stderr, "%s: --out %s: the name must end in .csv, .dbn or .dbn.zst (the format)\n",
                c.cmd, out);
        return VX_EXIT_USAGE;
    }
    vx_synth_cfg cfg;
    vx_synth_default(&cfg);
    long v;
    if (days) {
        if (vx_arg_long(&c, "days", days, 1, 50000, &v)) return VX_EXIT_USAGE;
        cfg.days = (int)v;
    }
    if (seed) {
        if (vx_arg_long(&c, "seed", seed, 0, 2147483647L, &v)) return VX_EXIT_USAGE;
        cfg.seed = (uint64_t)v;
    }
    if (strength && vx_arg_double(&c, "strength", strength, &cfg.signal_strength))
        return VX_EXIT_USAGE;
    if (phi && vx_arg_double(&c, "phi", phi, &cfg.signal_phi)) return VX_EXIT_USAGE;
    if (drift && vx_arg_double(&c, "drift", drift, &cfg.drift)) return VX_EXIT_USAGE;
    vx_err err;
    if (vx_synth_check(&cfg, &err)) { /* nan, inf or out of range: a usage error */
        fprintf(stderr, "%s: %s\n", c.cmd, err.msg);
        return VX_EXIT_USAGE;
    }
    vx_series s = {0};
    vx_status st = vx_synth_generate(&cfg, &s, NULL, &err);
    if (!st) {
        if (ends_with(out, ".dbn.zst")) st = vx_dbn_write(out, &s, 3, &err);
        else if (ends_with(out, ".dbn")) st = vx_dbn_write(out, &s, 0, &err);
        else st = vx_csv_write(out, &s, &err);
    }
    if (!st) {
        char a[48], b[48];
        vx_format_ts(s.ts[0], a, sizeof a);
        vx_format_ts(s.ts[s.n - 1], b, sizeof b);
        printf("wrote %s: %zu bars (%d days, seed %llu, strength %g), %s .. %s\n", out, s.n,
               cfg.days, (unsigned long long)cfg.seed, cfg.signal_strength, a, b);
    }
    vx_series_free(&s);
    if (st) {
        fprintf(stderr, "vixen: %s\n", err.msg);
        return VX_EXIT_FAIL;
    }
    return VX_EXIT_OK;
}

static int cmd_features(int argc, char **argv)
{
    const char *instrument = NULL, *cache = NULL, *inflate = NULL;
    vx_opt opts[] = {
        {"instrument", "ID|SYMBOL", "the instrument to read from multi-instrument DBN files",
         &instrument, NULL, NULL, NULL, 0},
        MAX_INFLATE_OPT(inflate),
        {"cache", "DIR", "the cache folder (default $VIXEN_CACHE_DIR or ~/.cache/vixen)", &cache,
         NULL, NULL, NULL, 0},
    };
    vx_cmd c = {"vixen data features",
                "FILE...",
                "Loads the bars, computes the 45 market features (docs/features.md) and writes "
                "them to the feature cache, where training finds them under the same key.",
                opts,
                sizeof opts / sizeof *opts,
                1,
                4096};
    const char **pos = malloc((size_t)argc * sizeof *pos + 1);
    if (!pos) return out_of_memory();
    size_t np;
    int rc = vx_args_parse(&c, argc, argv, pos, &np);
    vx_load_opts lo = {0};
    if (!rc && inflate && arg_size(&c, "max-inflate", inflate, &lo.max_inflate)) rc = 2;
    char dir[1024];
    if (!rc && cache && snprintf(dir, sizeof dir, "%s", cache) >= (int)sizeof dir) {
        fprintf(stderr, "%s: --cache path longer than %zu characters\n", c.cmd, sizeof dir - 1);
        rc = 2;
    }
    if (rc) {
        free(pos);
        return rc == 1 ? VX_EXIT_OK : VX_EXIT_USAGE;
    }
    if (!cache) vx_cache_default_dir(dir, sizeof dir);
    lo.instrument = instrument;
    lo.cache_required = 1; /* writing the entry is this command's work */
    vx_market m;
    vx_err err;
    uint64_t t0 = vx_now_ns();
    vx_status st = vx_market_open(pos, np, &lo, dir, &m, &err);
    free(pos);
    if (st) {
        fprintf(stderr, "vixen: %s\n", err.msg);
        return VX_EXIT_FAIL;
    }
    char path[2048];
    vx_cache_path(dir, m.key, path, sizeof path);
    printf("features: %s, %zu bars -> %zu rows x %d features (first %zu bars are warm-up), "
           "%s in %.3f s\ncache: %s\n",
           m.instrument, m.n_bars, m.rows, VX_MARKET_FEATURES, m.first_bar,
           m.from_cache ? "loaded" : "computed", vx_seconds_since(t0), path);
    vx_market_close(&m);
    return VX_EXIT_OK;
}

int vx_cmd_data(int argc, char **argv)
{
    if (argc < 1 || strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0) {
        FILE *f = argc < 1 ? stderr : stdout;
        fprintf(f, "usage: vixen data inspect|synth|features [options] (each takes --help)\n");
        return argc < 1 ? VX_EXIT_USAGE : VX_EXIT_OK;
    }
    if (strcmp(argv[0], "inspect") == 0) return cmd_inspect(argc - 1, argv + 1);
    if (strcmp(argv[0], "synth") == 0) return cmd_synth(argc - 1, argv + 1);
    if (strcmp(argv[0], "features") == 0) return cmd_features(argc - 1, argv + 1);
    fprintf(stderr, "vixen data: unknown subcommand '%s' (inspect, synth, features)\n", argv[0]);
    return VX_EXIT_USAGE;
}

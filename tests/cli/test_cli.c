/* test_cli.c — the `vixen` command as a user runs it: inspect output on the fixtures, one-line
 * errors with exit codes for every corrupt input, usage errors, the feature cache shared by
 * the CLI's precompute and the training entry point (vx_market_open), and `vixen bench` driven by
 * its registry (linked here, so the test knows every group the binary should offer). */
#define _XOPEN_SOURCE 700
#include "bench.h"
#include "helpers.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>
#include <zstd.h>

static char out[1 << 16], err[1 << 14];

/* A run that trains in a second or two: short episodes, few environments, a small network. */
#define SMALL_RUN                                                                                  \
    "--set env.episode_len=60 --set train.envs=16 --set train.steps_per_epoch=40 --set "           \
    "dqn.batch=32 --set net.trunk=32,32 --set net.head_hidden=16 --set train.warmup=200"

static int vixen(const char *args)
{
    static char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s", VX_BINARY, args);
    return th_run(cmd, out, sizeof out, err, sizeof err);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void test_inspect_json_fixtures(void **state)
{
    (void)state;
    const char *names[3] = {"test_data.ohlcv-1m.dbn", "test_data.ohlcv-1m.v1.dbn.zst",
                            "test_data.ohlcv-1m.v3.dbn.zst"};
    const char *versions[3] = {"\"dbn_version\": 2", "\"dbn_version\": 1", "\"dbn_version\": 3"};
    for (int i = 0; i < 3; i++) {
        char args[512];
        snprintf(args, sizeof args, "data inspect --json %s/%s", VX_FIXTURES, names[i]);
        assert_int_equal(vixen(args), 0);
        assert_int_equal(count_lines(out), 1);
        assert_non_null(strstr(out, versions[i]));
        assert_non_null(strstr(out, "\"valid\": true"));
        assert_non_null(
            strstr(out, "{\"instrument_id\": 5482, \"symbol\": \"ESH1\", \"bars\": 2}"));
        assert_non_null(strstr(out, "{\"ts_ns\": 1609160400000000000, \"time\": "
                                    "\"2020-12-28T13:00:00Z\", \"open\": 372025, \"high\": 372150, "
                                    "\"low\": 372025, \"close\": 372100, \"volume\": 353}"));
        assert_non_null(strstr(out, "{\"ts_ns\": 1609160460000000000, \"time\": "
                                    "\"2020-12-28T13:01:00Z\", \"open\": 372100, \"high\": 372150, "
                                    "\"low\": 372100, \"close\": 372150, \"volume\": 152}"));
        assert_non_null(strstr(out, "\"interval_s\": 60"));
    }
}

typedef struct {
    const char *name;
    const uint8_t *bytes;
    size_t n;
    const char *where; /* "line 3" or "record 2" ... */
    const char *field;
} corrupt;

static void test_corrupt_inputs_one_line_error_no_cache(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    size_t vn, zn;
    uint8_t *v2 = th_read(TH_FIXTURE("test_data.ohlcv-1m.dbn"), &vn);
    uint8_t *z3 = th_read(TH_FIXTURE("test_data.ohlcv-1m.v3.dbn.zst"), &zn);
    uint8_t bad_magic[465], v4[465], len0[465], past[465], damaged[166];
    memcpy(bad_magic, v2, vn), bad_magic[1] = 'X';
    memcpy(v4, v2, vn), v4[3] = 4;
    memcpy(len0, v2, vn), len0[409] = 0;
    memcpy(past, v2, vn), past[409] = 60;
    memcpy(damaged, z3, zn);
    for (int i = 40; i < 80; i++) damaged[i] ^= 0xA5;
    const char *h = "timestamp,open,high,low,close,volume\n";
    char nan_csv[256], hl_csv[256], unsorted[256], dup[256];
    snprintf(nan_csv, sizeof nan_csv,
             "%s2024-01-02 10:00,1,2,1,2,5\n2024-01-02 10:01,1,2,1,NaN,5\n", h);
    snprintf(hl_csv, sizeof hl_csv, "%s2024-01-02 10:00,1,2,3,2,5\n", h);
    snprintf(unsorted, sizeof unsorted,
             "%s2024-01-02 10:01,1,2,1,2,5\n2024-01-02 10:00,1,2,1,2,5\n", h);
    snprintf(dup, sizeof dup, "%s2024-01-02 10:01,1,2,1,2,5\n2024-01-02 10:01,1,2,1,2,5\n", h);
    const char *missing = "timestamp,open,high,close,volume\n2024-01-02,1,2,1,5\n";
    corrupt cases[] = {
        {"truncated.dbn", v2, 430, "record 2 (byte 409)", "field 'length'"},
        {"magic.dbn", bad_magic, vn, "byte 0", "field 'magic'"},
        {"v4.dbn", v4, vn, "byte 3", "field 'version'"},
        {"len0.dbn", len0, vn, "record 2 (byte 409)", "field 'length'"},
        {"past.dbn", past, vn, "record 2 (byte 409)", "field 'length'"},
        {"damaged.dbn.zst", damaged, zn, "byte", "field 'zstd'"},
        {"nan.csv", (const uint8_t *)nan_csv, strlen(nan_csv), "line 3", "field 'close'"},
        {"highlow.csv", (const uint8_t *)hl_csv, strlen(hl_csv), "line 2", "field 'high'"},
        {"unsorted.csv", (const uint8_t *)unsorted, strlen(unsorted), "line 3",
         "field 'timestamp'"},
        {"dup.csv", (const uint8_t *)dup, strlen(dup), "line 3", "field 'timestamp'"},
        {"missing.csv", (const uint8_t *)missing, strlen(missing), "line 1", "field 'low'"},
        {"empty.csv", (const uint8_t *)"", 0, "", "empty file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[256], cache[256], args[1024];
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].name);
        snprintf(cache, sizeof cache, "%s/cache-%zu", dir, i);
        th_write(path, cases[i].bytes, cases[i].n);
        snprintf(args, sizeof args, "data features %s --cache %s", path, cache);
        int rc = vixen(args);
        if (rc != 1) fail_msg("%s: exit %d, stderr: %s", cases[i].name, rc, err);
        /* exactly one line of error (after any cache miss log line), naming file, place, field */
        const char *last = err;
        for (const char *p = err; *p; p++)
            if (*p == '\n' && p[1]) last = p + 1;
        if (!strstr(last, path) || !strstr(last, cases[i].where) || !strstr(last, cases[i].field))
            fail_msg("%s: unclear error: %s", cases[i].name, last);
        assert_int_equal(count_lines(last), 1);
        /* nothing written, not even a temporary file */
        assert_int_equal(th_count_files(cache), 0);
        /* inspect agrees and also exits non-zero */
        snprintf(args, sizeof args, "data inspect --json %s", path);
        assert_int_equal(vixen(args), 1);
        assert_non_null(strstr(out, "\"valid\": false"));
    }
    free(v2);
    free(z3);
    th_rmtree(dir);
}

static void test_usage_errors(void **state)
{
    (void)state;
    assert_int_equal(vixen("data inspect --frobnicate x.csv"), 2);
    assert_non_null(strstr(err, "unknown option '--frobnicate'"));
    assert_int_equal(count_lines(err), 1);
    assert_int_equal(vixen("data inspect"), 2);
    assert_non_null(strstr(err, "missing argument"));
    assert_int_equal(vixen("data synth --days 3"), 2);
    assert_non_null(strstr(err, "--out"));
    assert_int_equal(vixen("data synth --out"), 2);
    assert_non_null(strstr(err, "needs a value"));
    assert_int_equal(vixen("data synth --days many --out x.csv"), 2);
    /* the format is the name's: another ending is refused (it had been written as CSV) */
    assert_int_equal(vixen("data synth --days 1 --out x.dbn.gz"), 2);
    assert_non_null(strstr(err, "--out x.dbn.gz: the name must end in .csv, .dbn or .dbn.zst"));
    assert_int_not_equal(access("x.dbn.gz", F_OK), 0);
    assert_int_equal(vixen("env bench --envs 0"), 2);
    /* fewer days than hold a training episode, and --days beside a FILE (which it cannot size),
     * are usage errors (the first had failed later, the second been ignored) */
    assert_int_equal(vixen("env bench --days 3"), 2);
    assert_int_equal(vixen("env bench --days 50001"), 2); /* past what the market makes */
    assert_int_equal(vixen("env bench x.csv --days 5"), 2);
    assert_non_null(strstr(err, "--days sizes the synthetic market"));
    assert_int_equal(vixen("nonsense"), 2);
    assert_int_equal(vixen("data nonsense"), 2);
    assert_int_equal(vixen(""), 2);
    const char *helps[] = {
        "--help",           "data inspect --help", "data synth --help", "data features --help",
        "env bench --help", "bench --help",        "train --help",      "eval --help",
        "report --help"};
    for (size_t i = 0; i < sizeof helps / sizeof *helps; i++) {
        assert_int_equal(vixen(helps[i]), 0);
        assert_non_null(strstr(out, "usage: vixen"));
    }
}

/* Option values are read whole and in range, and option names whole: "--days 12abc" is not 12
 * days, a seed past its range is not taken, "--da" is not "--days", and a repeatable option given
 * more often than its list holds is refused, not written past the list. Each is a usage error
 * (2) before anything is written. */
static void test_option_values_checked(void **state)
{
    (void)state;
    char dir[64], args[1024], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/x.csv", dir);
    const char *opt[] = {"--days 12abc", "--days 50001",    "--seed 2147483648",
                         "--seed -1",    "--strength 0.1x", "--da 3"};
    const char *says[] = {"--days must be a whole number in 1..50000, got '12abc'",
                          "--days must be a whole number in 1..50000, got '50001'",
                          "--seed must be a whole number in 0..2147483647, got '2147483648'",
                          "--seed must be a whole number",
                          "--strength must be a number, got '0.1x'",
                          "unknown option '--da'"};
    for (int i = 0; i < 6; i++) {
        snprintf(args, sizeof args, "data synth %s --out %s", opt[i], path);
        int rc = vixen(args);
        if (rc != 2 || !strstr(err, says[i])) fail_msg("'%s': exit %d: %s", opt[i], rc, err);
        assert_int_equal(count_lines(err), 1);
        assert_int_equal(th_count_files(dir), 0);
    }
    /* 64 --set options are the most a command keeps */
    int k = snprintf(args, sizeof args, "train");
    for (int i = 0; i < 65; i++) k += snprintf(args + k, sizeof args - (size_t)k, " --set a=1");
    assert_int_equal(vixen(args), 2);
    assert_non_null(strstr(err, "option '--set' given more than 64 times"));
    th_rmtree(dir);
}

static void test_features_cli_then_training_entry_point_hits(void **state)
{
    (void)state;
    char dir[64], csv[128], cache[128], args[512];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/synth.csv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(args, sizeof args, "data synth --days 3 --seed 9 --out %s", csv);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "1170 bars"));
    snprintf(args, sizeof args, "data features %s --cache %s", csv, cache);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(err, "feature cache: miss"));
    assert_non_null(strstr(out, "930 rows x 45 features"));
    /* the training entry point, in this process, finds the CLI's entry */
    const char *paths[1] = {csv};
    vx_market m;
    vx_err e;
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &m, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "feature cache: hit"));
    assert_int_equal(m.from_cache, 1);
    assert_int_equal(m.rows, 930);
    vx_market_close(&m);
    /* touching the input misses */
    struct timespec ts[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    struct stat before, after;
    stat(csv, &before);
    ts[1].tv_sec = before.st_mtim.tv_sec + 10, ts[1].tv_nsec = 0;
    assert_int_equal(utimensat(AT_FDCWD, csv, ts, 0), 0);
    stat(csv, &after);
    assert_true(after.st_mtim.tv_sec != before.st_mtim.tv_sec);
    th_log_start();
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &m, &e), VX_OK);
    assert_non_null(strstr(th_log_text(), "feature cache: miss"));
    assert_int_equal(m.from_cache, 0);
    vx_market_close(&m);
    th_log_stop();
    /* and the CLI now hits the entry the training side wrote */
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(err, "feature cache: hit"));
    th_rmtree(dir);
}

static void test_synth_formats_and_env_bench(void **state)
{
    (void)state;
    char dir[64], p[128], args[512];
    th_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/s.dbn.zst", dir);
    snprintf(args, sizeof args, "data synth --days 2 --out %s", p);
    assert_int_equal(vixen(args), 0);
    size_t n;
    uint8_t *b = th_read(p, &n);
    assert_true(n > 4 && b[0] == 0x28 && b[1] == 0xB5); /* zstd frame */
    free(b);
    snprintf(args, sizeof args, "data inspect %s", p);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "dbn v3 (zstd)"));
    assert_non_null(strstr(out, "780 bars"));
    assert_non_null(strstr(out, "verdict      valid"));
    assert_int_equal(vixen("env bench --envs 64 --steps 300 --days 5 --json"), 0);
    assert_non_null(strstr(out, "\"envs\": 64"));
    double rate = 0;
    const char *r = strstr(out, "\"env_steps_per_s\": ");
    assert_non_null(r);
    rate = atof(r + strlen("\"env_steps_per_s\": "));
    assert_true(rate > 0);
    th_rmtree(dir);
}

/* A number inside parsed JSON at a path of object keys ("rows", "flat", "net"); NAN if absent. */
static double jnum(const cJSON *o, const char *a, const char *b, const char *c)
{
    const char *path[3] = {a, b, c};
    for (int i = 0; i < 3 && path[i] && o; i++) o = cJSON_GetObjectItemCaseSensitive(o, path[i]);
    return cJSON_IsNumber(o) ? o->valuedouble : NAN;
}

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : "";
}

static void test_train_and_eval_commands(void **state)
{
    (void)state;
    char dir[64], args[2048], yaml[128];
    th_tmpdir(dir, sizeof dir);
    const char *small = "--set data.synth_days=12 " SMALL_RUN;
    snprintf(args, sizeof args, "train %s --set train.eval_every=0 --epochs 2 --run %s/r", small,
             dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(err, "epoch 1/2"));
    assert_non_null(strstr(err, "epoch 2/2"));
    assert_non_null(strstr(out, "test split: rows"));
    assert_non_null(strstr(out, "checkpoint: last: epoch 2 (nothing was validated"));
    assert_non_null(strstr(out, "buy & hold"));
    assert_non_null(strstr(out, "momentum"));
    assert_non_null(strstr(out, "agent (train)"));
    assert_non_null(strstr(out, "/r/report.html (open it in a browser)"));
    /* resume to 3 epochs */
    snprintf(args, sizeof args, "train --resume %s/r --epochs 3", dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(err, "epoch 3/3"));
    assert_null(strstr(err, "epoch 2/3"));
    /* a resume changes nothing of what the run learns: other data, settings, folds or folders
     * are usage errors, and the run is left as it was */
    static const char *const changes[][2] = {
        {"--set dqn.lr=0.5", "--set dqn.lr would change the run"},
        {"--set split.gap=500", "--set split.gap would change the run"},
        {"somefile.csv", "a data file would change it"},
        {"--folds 3", "--folds would change it"},
        {"--algo ppo", "--algo would change it"},
        {"--run elsewhere", "--run would change it"},
    };
    for (size_t i = 0; i < sizeof changes / sizeof *changes; i++) {
        snprintf(args, sizeof args, "train --resume %s/r --epochs 4 %s", dir, changes[i][0]);
        assert_int_equal(vixen(args), 2);
        if (!strstr(err, changes[i][1])) fail_msg("%s: %s", changes[i][0], err);
    }
    snprintf(yaml, sizeof yaml, "%s/r/config.yaml", dir);
    FILE *cf = fopen(yaml, "r");
    assert_non_null(cf);
    char cfg_text[8192];
    size_t cn = fread(cfg_text, 1, sizeof cfg_text - 1, cf);
    fclose(cf);
    cfg_text[cn] = '\0';
    assert_non_null(strstr(cfg_text, "epochs: 3"));
    /* the run validated nothing (eval_every 0): --checkpoint best says so, naming the way */
    snprintf(args, sizeof args, "eval %s/r --checkpoint best", dir);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "has no best checkpoint: nothing was validated"));
    /* a finished run that kept no checkpoint (checkpoint_every 0): neither resumed nor started
     * over (a new start had trained over its results) */
    snprintf(args, sizeof args,
             "train %s --set train.eval_every=0 --set train.checkpoint_every=0 --epochs 1 "
             "--run %s/n",
             small, dir);
    assert_int_equal(vixen(args), 0);
    snprintf(args, sizeof args, "train --resume %s/n", dir);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "finished without a checkpoint to resume"));
    snprintf(args, sizeof args,
             "train %s --set train.eval_every=0 --set train.checkpoint_every=0 --epochs 1 "
             "--run %s/n",
             small, dir);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "already holds a finished run"));
    /* a run that does not test (train.final_test 0) says so: no table, no report claimed; a
     * walk-forward, which is its folds' tests, refuses it */
    snprintf(args, sizeof args, "train %s --set train.final_test=0 --epochs 1 --run %s/nt", small,
             dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "no test evaluation (train.final_test 0)"));
    assert_null(strstr(out, "split: rows"));
    assert_null(strstr(out, "report:"));
    snprintf(yaml, sizeof yaml, "%s/nt/report.html", dir);
    assert_int_not_equal(access(yaml, F_OK), 0);
    snprintf(args, sizeof args, "train %s --set train.final_test=0 --folds 2 --run %s/nw", small,
             dir);
    assert_int_equal(vixen(args), 2);
    assert_non_null(strstr(err, "train.final_test 0 would leave it nothing to report"));
    /* a direct option beside a --set of its own key, an option given twice, a --run that is a
     * file: usage errors (the first two had let one value win silently) */
    snprintf(args, sizeof args, "train %s --epochs 3 --set train.epochs=5 --run %s/x", small, dir);
    assert_int_equal(vixen(args), 2);
    assert_non_null(strstr(err, "--epochs 3 and --set train.epochs=5 both given"));
    snprintf(args, sizeof args, "train %s --epochs 3 --epochs 4 --run %s/x", small, dir);
    assert_int_equal(vixen(args), 2);
    assert_non_null(strstr(err, "option '--epochs' given twice ('3', then '4')"));
    snprintf(args, sizeof args, "train %s --epochs 1 --run %s/r/config.yaml", small, dir);
    assert_int_equal(vixen(args), 2);
    assert_non_null(strstr(err, "config.yaml: a file, not a folder"));
    /* train.run_dir given by --set names the folder (it had been taken only from --config) */
    snprintf(args, sizeof args,
             "train %s --set train.eval_every=0 --epochs 1 --set train.run_dir=%s/s", small, dir);
    assert_int_equal(vixen(args), 0);
    snprintf(yaml, sizeof yaml, "%s/s/config.yaml", dir);
    assert_int_equal(access(yaml, F_OK), 0);
    /* eval of the run, as JSON: the split, standard errors, the baselines */
    snprintf(args, sizeof args, "eval %s/r --json", dir);
    assert_int_equal(vixen(args), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(jstr(j, "split"), "test");
    assert_true(jnum(j, "rows", "agent", "sharpe_se") > 0);
    assert_true(jnum(j, "rows", "buy_hold", "sharpe_se") > 0);
    assert_true(jnum(j, "rows", "flat", "net") == 0);
    double g = jnum(j, "rows", "agent", "gross"), c = jnum(j, "rows", "agent", "costs");
    assert_true(fabs(g - c - jnum(j, "rows", "agent", "net")) < 0.005); /* to the cent */
    assert_false(isnan(jnum(j, "rows", "momentum", "sharpe")));
    assert_false(isnan(jnum(j, "rows", "ridge", "sharpe")));
    assert_false(isnan(jnum(j, "rows", "oracle", "sharpe")));
    assert_non_null(strstr(jstr(j, "checkpoint"), "latest.safetensors (latest, epoch 3)"));
    cJSON_Delete(j);
    /* a checkpoint copied away from its run folder still evaluates (its metadata holds the
     * config) and gives the same numbers */
    static char saved[sizeof out];
    memcpy(saved, out, sizeof out);
    snprintf(args, sizeof args,
             "mkdir -p %s/lone/ckpt && cp %s/r/checkpoint/latest.safetensors %s/lone/ckpt/", dir,
             dir, dir);
    assert_int_equal(system(args), 0);
    snprintf(args, sizeof args, "eval %s/lone/ckpt/latest.safetensors --json", dir);
    assert_int_equal(vixen(args), 0);
    char *a1 = strstr(saved, "\"rows\""), *a2 = strstr(out, "\"rows\"");
    assert_non_null(a1);
    assert_non_null(a2);
    assert_string_equal(a1, a2); /* all but the checkpoint's path */
    /* the validation split, and a run with validation: its best checkpoint */
    snprintf(args, sizeof args, "eval %s/r --split validation", dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "validation split: rows"));
    snprintf(args, sizeof args, "train %s --set train.eval_every=1 --epochs 3 --run %s/v", small,
             dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(err, "val Sharpe"));
    assert_non_null(strstr(out, "checkpoint: best: epoch"));
    snprintf(args, sizeof args, "eval %s/v", dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "best.safetensors (best, epoch"));
    snprintf(args, sizeof args, "eval %s/v --checkpoint latest --split train", dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "train split: rows 0.."));
    assert_non_null(strstr(out, "latest.safetensors (latest, epoch 3)"));
    assert_int_equal(vixen("eval . --split sideways"), 2);
    assert_non_null(strstr(err, "--split: train, validation or test"));
    /* walk-forward over two folds */
    snprintf(args, sizeof args,
             "train %s --set train.eval_every=1 --set split.test=0.3 --folds 2 --epochs 1 "
             "--run %s/w",
             small, dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "walk-forward, all 2 folds' test blocks"));
    /* the walk's own folder holds no checkpoint: eval says to take a fold */
    snprintf(args, sizeof args, "eval %s/w", dir);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "is a walk-forward's folder: evaluate one of its folds"));
    snprintf(yaml, sizeof yaml, "%s/w/walk_forward.json", dir);
    size_t len;
    char *wf = (char *)th_read(yaml, &len);
    j = cJSON_ParseWithLength(wf, len);
    assert_non_null(j);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "folds")), 2);
    const cJSON *all = cJSON_GetObjectItem(j, "all");
    double bars = jnum(all, "rows", "agent", "bars");
    double b1 =
        jnum(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "folds"), 0), "rows", "agent", "bars");
    double b2 =
        jnum(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "folds"), 1), "rows", "agent", "bars");
    assert_true(bars == b1 + b2 && b1 > 0);
    /* the whole walk's drawdown is no smaller than a fold's (it had been one from daily PnL,
     * below the folds' own bar by bar), and it has no in-sample row (the folds' overlap) */
    const cJSON *rows = cJSON_GetObjectItem(all, "rows"), *row;
    cJSON_ArrayForEach(row, rows)
    {
        for (int f = 0; f < 2; f++) {
            const cJSON *fold = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "folds"), f);
            double dd = jnum(fold, "rows", row->string, "max_drawdown");
            assert_true(jnum(all, "rows", row->string, "max_drawdown") >= dd);
        }
    }
    assert_null(cJSON_GetObjectItem(rows, "in_sample"));
    cJSON_Delete(j);
    free(wf);
    /* PPO through the same run: progress line, test evaluation, eval of its run */
    snprintf(args, sizeof args,
             "train --algo ppo --set data.synth_days=12 --set env.episode_len=60 --set "
             "train.envs=16 --set train.steps_per_epoch=40 --set ppo.minibatches=4 --set "
             "ppo.trunk=32,32 --set train.eval_every=1 --epochs 2 --device cpu --run %s/p",
             dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(err, "ppo on the CPU"));
    assert_non_null(strstr(err, "epoch 2/2"));
    assert_non_null(strstr(err, "entropy"));
    assert_non_null(strstr(out, "checkpoint: best: epoch"));
    snprintf(args, sizeof args, "eval %s/p --json", dir);
    assert_int_equal(vixen(args), 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_true(jnum(j, "rows", "agent", "sharpe_se") > 0);
    cJSON_Delete(j);
    assert_int_equal(vixen("train --algo sarsa"), 2);
    /* bad settings */
    assert_int_equal(vixen("train --set dqn.lrr=1"), 2);
    assert_non_null(strstr(err, "unknown key 'dqn.lrr'"));
    assert_int_equal(vixen("train --set dqn.gamma=2"), 2);
    /* another algorithm's key would change nothing: a usage error, taken with its --algo */
    assert_int_equal(vixen("train --set ppo.lr=1e-3"), 2);
    assert_non_null(strstr(err, "--set ppo.lr: a setting of ppo, but this trains dqn"));
    assert_int_equal(vixen("train --algo ppo --set replay.alpha=0.5"), 2);
    assert_non_null(strstr(err, "--set replay.alpha: a setting of dqn, but this trains ppo"));
    /* in a config file they are a warning with the file and line (one file may serve both) */
    snprintf(yaml, sizeof yaml, "%s/both.yaml", dir);
    th_write_str(yaml, "dqn:\n  lr: 0.001\nppo:\n  lr: 0.0003\n  clip: 0.3\n");
    snprintf(args, sizeof args, "train --config %s --algo ppo %s/none.csv", yaml, dir);
    assert_int_equal(vixen(args), 1); /* no such data file: it stops there, after the warning */
    assert_non_null(strstr(err, "both.yaml: line 2: dqn.lr is a setting of dqn, but this trains "
                                "ppo; it changes nothing"));
    assert_null(strstr(err, "ppo.lr is a setting"));
    assert_null(strstr(err, "ppo.clip is a setting"));
    snprintf(yaml, sizeof yaml, "%s/bad.yaml", dir);
    th_write_str(yaml, "train:\n  epochs: 3\n  envs: -4\n");
    snprintf(args, sizeof args, "train --config %s", yaml);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "bad.yaml: line 3: train.envs: -4 is outside"));
    snprintf(args, sizeof args, "eval %s/nothing", dir);
    assert_int_equal(vixen(args), 1);
    th_rmtree(dir);
}

static void test_bench_groups_come_from_the_registry(void **state)
{
    (void)state;
    size_t n;
    const vx_bench_entry *reg = vx_bench_registry(&n);
    assert_true(n >= 3);
    assert_int_equal(vixen("bench --help"), 0);
    for (size_t i = 0; i < n; i++) {
        char line[256]; /* each group on a line of its own, with its description */
        snprintf(line, sizeof line, "\n  %-12s %s", reg[i].group, reg[i].about);
        if (!strstr(out, line)) fail_msg("bench --help does not list group '%s'", reg[i].group);
        assert_ptr_equal(vx_bench_find(reg[i].group), &reg[i]);
    }
    assert_null(vx_bench_find("nosuchgroup"));
    assert_int_equal(vixen("bench --only nosuchgroup"), 2);
    assert_non_null(strstr(err, "unknown group 'nosuchgroup'"));
    assert_int_equal(count_lines(err), 1);
    assert_int_equal(vixen("bench --only data --skip nosuchgroup"), 2);
    assert_non_null(strstr(err, "--skip: unknown group 'nosuchgroup'"));
    /* a small data run: the cold parse is the headline row, the warm one beside it */
    assert_int_equal(vixen("bench --only data --bars 2000"), 0);
    assert_non_null(strstr(out, "{\"results\": ["));
    assert_non_null(strstr(out, "\"name\": \"dbn_parse\", "));
    assert_non_null(strstr(out, "\"name\": \"dbn_parse_warm\", "));
    assert_null(strstr(out, "dbn_parse_cold"));
    assert_null(strstr(out, "env_step_cpu")); /* --only ran data alone */
    /* --skip wins over --only: nothing runs, an empty result list */
    assert_int_equal(vixen("bench --only data --skip data --bars 2000"), 0);
    assert_string_equal(out, "{\"results\": [\n]}\n");
    /* a GPU group is a name --skip takes in any build (in one without CUDA there is nothing of it
     * to leave out; --no-train says the same), where --only of it asks for a CUDA build */
    assert_int_equal(vixen("bench --only data --skip data --skip gpu-train --bars 2000"), 0);
    if (!vx_bench_find("gpu-train")) {
        assert_int_equal(vixen("bench --only gpu-train"), 2);
        assert_non_null(strstr(err, "--only gpu-train: this build has no CUDA"));
    }
}

/* `vixen eval` of a run on bars other than it trained on warns, naming both identities: a data
 * file rewritten since (it had evaluated the new bars silently). The identity is the bars', so a
 * file touched, or the same bars under another name (--data), is no warning. */
static void test_eval_warns_of_other_bars(void **state)
{
    (void)state;
    char dir[64], args[2048];
    th_tmpdir(dir, sizeof dir);
    const char *small = SMALL_RUN;
    snprintf(args, sizeof args, "data synth --days 12 --seed 3 --out %s/m.csv", dir);
    assert_int_equal(vixen(args), 0);
    snprintf(args, sizeof args, "data synth --days 12 --seed 3 --out %s/same.csv", dir);
    assert_int_equal(vixen(args), 0);
    snprintf(args, sizeof args, "train %s/m.csv %s --epochs 1 --run %s/r", dir, small, dir);
    assert_int_equal(vixen(args), 0);
    const char *other = "evaluated on other bars than the run trained on";
    assert_null(strstr(out, other));
    snprintf(args, sizeof args, "eval %s/r --data %s/same.csv", dir, dir);
    assert_int_equal(vixen(args), 0);
    assert_null(strstr(out, other));
    snprintf(args, sizeof args, "data synth --days 12 --seed 4 --out %s/m.csv", dir);
    assert_int_equal(vixen(args), 0);
    snprintf(args, sizeof args, "eval %s/r", dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, other));
    th_rmtree(dir);
}

/* `vixen bench` stopped part-way (here by SIGTERM, once its folder has files) removes its
 * temporary folder and ends by that signal. Without the waiting parent the folder stays. */
static void test_bench_interrupted_leaves_no_folder(void **state)
{
    (void)state;
    char dir[64], cmd[1024];
    th_tmpdir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "TMPDIR=%s %s bench --only data --bars 3000000 >/dev/null 2>&1 & p=$!; i=0; "
             "while [ -z \"$(ls -A %s/*/ 2>/dev/null)\" ] && [ $i -lt 400 ]; do "
             "sleep 0.05; i=$((i+1)); done; kill -TERM $p; wait $p; echo rc=$? waited=$i",
             dir, VX_BINARY, dir);
    assert_int_equal(th_run(cmd, out, sizeof out, err, sizeof err), 0);
    assert_null(strstr(out, "waited=400")); /* its folder was under TMPDIR, and had files */
    assert_non_null(strstr(out, "rc=143")); /* 128 + SIGTERM: it ended by the signal */
    assert_int_equal(th_count_files(dir), 0);
}

/* A file's text, NUL-terminated (th_read gives the bytes alone). */
static char *read_text(const char *path)
{
    size_t n;
    uint8_t *b = th_read(path, &n);
    char *t = realloc(b, n + 1);
    assert_non_null(t);
    t[n] = '\0';
    return t;
}

/* A run names what trained it: eval.txt, eval.json, report.html and `vixen eval` say the devices
 * in order by what decides their arithmetic (vx_device_kernels: OpenBLAS's kernels change the
 * weights a seed trains to), a resume on other kernels adds them, and one on the same adds
 * nothing. The kernels are forced with OPENBLAS_CORETYPE to two families every x86-64 runs. */
static void test_run_names_what_trained_it(void **state)
{
    (void)state;
    char dir[64], cmd[2048];
    th_tmpdir(dir, sizeof dir);
    const char *small = "--set data.synth_days=12 " SMALL_RUN " --set train.eval_every=1 "
                        "--set train.checkpoint_every=1";
    snprintf(cmd, sizeof cmd, "OPENBLAS_CORETYPE=Prescott %s train %s --epochs 1 --run %s/r",
             VX_BINARY, small, dir);
    assert_int_equal(th_run(cmd, out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(out, "trained on: cpu, OpenBLAS "));
    assert_non_null(strstr(out, " Prescott\n"));
    snprintf(cmd, sizeof cmd, "OPENBLAS_CORETYPE=Nehalem %s train --resume %s/r --epochs 2",
             VX_BINARY, dir);
    assert_int_equal(th_run(cmd, out, sizeof out, err, sizeof err), 0);
    const char *both = " Prescott; then cpu, OpenBLAS ";
    assert_non_null(strstr(out, both));
    assert_non_null(strstr(out, " Nehalem\n"));
    snprintf(cmd, sizeof cmd, "OPENBLAS_CORETYPE=Nehalem %s train --resume %s/r --epochs 3",
             VX_BINARY, dir);
    assert_int_equal(th_run(cmd, out, sizeof out, err, sizeof err), 0);
    const char *once = strstr(out, "; then ");
    assert_non_null(once);
    assert_null(strstr(once + 1, "; then ")); /* the same kernels again: listed once */
    char path[128];
    snprintf(path, sizeof path, "%s/r/eval.json", dir);
    char *json = read_text(path);
    assert_non_null(strstr(json, "\"trained_on\":\t\"cpu, OpenBLAS "));
    assert_non_null(strstr(json, both));
    free(json);
    snprintf(path, sizeof path, "%s/r/report.html", dir);
    char *html = read_text(path);
    assert_non_null(strstr(html, "<strong>Trained on:</strong> cpu, OpenBLAS "));
    assert_non_null(strstr(html, both));
    free(html);
    snprintf(cmd, sizeof cmd, "eval %s/r --checkpoint latest", dir);
    assert_int_equal(vixen(cmd), 0);
    assert_non_null(strstr(out, both));
    th_rmtree(dir);
}

/* Writes the rows of `csv` (header first) in three consecutive parts to files[0..2]. */
static void split_csv(const char *csv, char files[3][512])
{
    char *t = read_text(csv);
    char *body = strchr(t, '\n') + 1;
    size_t rows = 0;
    for (char *p = body; *p; p++) rows += *p == '\n';
    char *p = body;
    for (int k = 0; k < 3; k++) {
        char *end = p;
        for (size_t r = 0; r < (k < 2 ? rows / 3 : rows) && *end; end++) r += *end == '\n';
        FILE *f = fopen(files[k], "w");
        assert_non_null(f);
        fwrite(t, 1, (size_t)(body - t), f);
        fwrite(p, 1, (size_t)(end - p), f);
        assert_int_equal(fclose(f), 0);
        p = end;
    }
    free(t);
}

/* A run folder whose name holds a newline and a byte that is not UTF-8, trained on three data
 * files with ~390-byte paths: its own config.yaml must read back for --resume. The metrics rows
 * an attempt wrote after its last checkpoint go on resume (epoch 3 here, written again), and each
 * start writes its own TensorBoard file. */
static void test_resume_run_with_nasty_paths(void **state)
{
    (void)state;
    char dir[64], args[4096], all[128], deep[512], files[3][512];
    th_tmpdir(dir, sizeof dir);
    snprintf(all, sizeof all, "%s/all.csv", dir);
    snprintf(args, sizeof args, "data synth --days 12 --out %s", all);
    assert_int_equal(vixen(args), 0);
    int k = snprintf(deep, sizeof deep, "%s/", dir);
    for (int i = 0; i < 200; i++) deep[k++] = 'd';
    deep[k++] = '/';
    for (int i = 0; i < 150; i++) deep[k++] = 'e';
    deep[k] = '\0';
    snprintf(args, sizeof args, "mkdir -p %s", deep);
    assert_int_equal(system(args), 0);
    for (int i = 0; i < 3; i++) {
        int m = snprintf(files[i], sizeof files[i], "%s/part %d, #%d: ", deep, i, i);
        while (m < 386) files[i][m++] = 'f';
        snprintf(files[i] + m, sizeof files[i] - (size_t)m, ".csv");
    }
    split_csv(all, files);
    char run[128];
    snprintf(run, sizeof run, "%s/run\nx\377", dir);
    setenv("VX_TEST_RUN", run, 1);
    setenv("VX_TEST_F0", files[0], 1);
    setenv("VX_TEST_F1", files[1], 1);
    setenv("VX_TEST_F2", files[2], 1);
    snprintf(args, sizeof args,
             "train \"$VX_TEST_F0\" \"$VX_TEST_F1\" \"$VX_TEST_F2\" --set data.cache=%s/cache "
             "--set env.episode_len=60 --set train.envs=16 --set train.steps_per_epoch=40 "
             "--set dqn.batch=32 --set dqn.trunk=32,32 --set dqn.head_hidden=16 "
             "--set dqn.warmup=200 --set train.eval_every=0 --epochs 2 --run \"$VX_TEST_RUN\"",
             dir);
    if (vixen(args) != 0) fail_msg("train: %s", err);
    char path[256];
    snprintf(path, sizeof path, "%s/config.yaml", run);
    char *cfg = read_text(path);
    assert_non_null(strstr(cfg, "run_dir: !!binary")); /* not UTF-8: kept as base64 */
    free(cfg);
    /* the attempt ran epoch 3 and died before its checkpoint: epoch 2's row again, as epoch 3 */
    snprintf(path, sizeof path, "%s/metrics.csv", run);
    char *rows = read_text(path);
    char *last = rows + strlen(rows) - 1;
    while (last > rows && last[-1] != '\n') last--;
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fprintf(f, "3%s", strchr(last, ','));
    assert_int_equal(fclose(f), 0);
    free(rows);
    if (vixen("train --resume \"$VX_TEST_RUN\" --epochs 3") != 0) fail_msg("resume: %s", err);
    assert_non_null(strstr(err, "epoch 3/3"));
    char *csv = read_text(path);
    int seen[4] = {0};
    for (char *p = strchr(csv, '\n') + 1; *p; p = strchr(p, '\n') + 1) {
        int ep = atoi(p);
        assert_true(ep >= 1 && ep <= 3);
        seen[ep]++;
    }
    if (seen[1] != 1 || seen[2] != 1 || seen[3] != 1) fail_msg("metrics.csv:\n%s", csv);
    free(csv);
    int events = 0;
    DIR *d = opendir(run);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d));)
        events += strncmp(de->d_name, "events.out.tfevents.", 20) == 0;
    closedir(d);
    assert_int_equal(events, 2);
    unsetenv("VX_TEST_RUN");
    th_rmtree(dir);
}

/* A --resume folder too long for a run folder is refused by its length, naming it, before its
 * config.yaml is read: the config's path would have been cut short into another file. */
static void test_resume_long_folder_refused_first(void **state)
{
    (void)state;
    char dir[64], args[2048];
    th_tmpdir(dir, sizeof dir);
    const int at = (int)strlen("train --resume "); /* where the folder starts */
    int k = snprintf(args, sizeof args, "train --resume %s/", dir);
    while (k < at + 1095) args[k++] = 'r'; /* a folder of 1,095 characters */
    args[k] = '\0';
    assert_int_equal(vixen(args), 2);
    assert_non_null(strstr(err, "--resume: a folder path of 1095 characters (at most"));
    th_rmtree(dir);
}

/* A --cache folder longer than the command's old 1,024-byte buffer is used as given (here: refused
 * by the cache as too long), never cut short into another folder that then gets created. */
static void test_env_bench_long_cache_not_truncated(void **state)
{
    (void)state;
    char dir[64], csv[128], cache[1400], args[2048];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/s.csv", dir);
    snprintf(args, sizeof args, "data synth --days 3 --out %s", csv);
    assert_int_equal(vixen(args), 0);
    int k = snprintf(cache, sizeof cache, "%s", dir);
    for (int part = 0; part < 6; part++) {
        cache[k++] = '/';
        for (int i = 0; i < 200; i++) cache[k++] = 'c';
    }
    cache[k] = '\0';
    snprintf(args, sizeof args, "env bench %s --envs 2 --steps 10 --cache %s", csv, cache);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "too long"));
    cache[1023] = '\0'; /* where the old buffer cut it */
    struct stat sb;
    assert_int_not_equal(stat(cache, &sb), 0);
    th_rmtree(dir);
}

/* The absolute inflate limit is settable where zstd bars are read: `--max-inflate` for the data
 * commands, data.max_inflate for training; past it the file is refused naming both. */
static void test_inflate_limit_settable(void **state)
{
    (void)state;
    char args[1024], dir[64];
    const char *zst = TH_FIXTURE("test_data.ohlcv-1m.v3.dbn.zst");
    snprintf(args, sizeof args, "data inspect --max-inflate 400 %s", zst);
    assert_int_equal(vixen(args), 1);
    if (!strstr(err, zst) || !strstr(err, "limit of 400 bytes")) fail_msg("%s", err);
    snprintf(args, sizeof args, "data inspect --max-inflate 100 %s", zst);
    assert_int_equal(vixen(args), 1); /* the metadata alone would not fit */
    if (!strstr(err, "metadata length 352") || !strstr(err, "--max-inflate")) fail_msg("%s", err);
    snprintf(args, sizeof args, "data inspect --max-inflate 1K %s", zst);
    assert_int_equal(vixen(args), 0);
    snprintf(args, sizeof args, "data inspect --max-inflate 0 %s", zst);
    assert_int_equal(vixen(args), 2); /* not a positive size */
    th_tmpdir(dir, sizeof dir);
    snprintf(args, sizeof args,
             "train %s --set data.max_inflate=400 --set data.cache=%s/c --run %s/r", zst, dir, dir);
    assert_int_equal(vixen(args), 1);
    if (!strstr(err, "limit of 400 bytes") || !strstr(err, "data.max_inflate")) fail_msg("%s", err);
    th_rmtree(dir);
}

/* What the top-level command answers itself: --version and -h are not usage errors, and go to
 * stdout. */
static void test_version_and_short_help(void **state)
{
    (void)state;
    assert_int_equal(vixen("--version"), 0);
    assert_string_equal(out, "vixen 0.1.0\n");
    assert_int_equal(vixen("version"), 0);
    assert_string_equal(out, "vixen 0.1.0\n");
    assert_int_equal(vixen("-h"), 0);
    assert_non_null(strstr(out, "usage: vixen COMMAND"));
    assert_int_equal(vixen("help"), 0);
    assert_non_null(strstr(out, "usage: vixen COMMAND"));
}

/* `data inspect` on a CSV with two gaps whose sizes are known by hand: bars at 10:00, 10:01,
 * 10:05, 10:06, 10:16, 10:17 at a 60 s interval have gaps of 240 s and 600 s, the largest before
 * 10:16. The file's name holds a backslash and a double quote, which the JSON must escape (the
 * parsed "file" is the path again). --bars limits the listed bars, -1 lists all. */
static void test_inspect_gaps_escaping_and_bars(void **state)
{
    (void)state;
    char dir[64], path[160], args[512];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/g\\a\"p.csv", dir);
    th_write_str(path, "timestamp,open,high,low,close,volume\n"
                       "2024-01-02 10:00,1,2,1,2,5\n2024-01-02 10:01,1,2,1,2,5\n"
                       "2024-01-02 10:05,1,2,1,2,5\n2024-01-02 10:06,1,2,1,2,5\n"
                       "2024-01-02 10:16,1,2,1,2,5\n2024-01-02 10:17,1,2,1,2,5\n");
    setenv("VX_TEST_GAPS", path, 1);
    const int want[3] = {10, 1, -1}; /* --bars and the bars listed: default 10 (all 6), 1, all */
    const int shown[3] = {6, 1, 6};
    for (int i = 0; i < 3; i++) {
        if (want[i] == 10) snprintf(args, sizeof args, "data inspect --json \"$VX_TEST_GAPS\"");
        else
            snprintf(args, sizeof args, "data inspect --json --bars %d \"$VX_TEST_GAPS\"", want[i]);
        assert_int_equal(vixen(args), 0);
        cJSON *j = cJSON_Parse(out);
        if (!j) fail_msg("not JSON: %s", out);
        assert_string_equal(jstr(j, "file"), path);
        assert_true(jnum(j, "bars", NULL, NULL) == 6);
        assert_true(jnum(j, "interval_s", NULL, NULL) == 60);
        assert_true(jnum(j, "gaps", NULL, NULL) == 2);
        assert_true(jnum(j, "largest_gap_s", NULL, NULL) == 600);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "bars_shown")), shown[i]);
        cJSON_Delete(j);
    }
    assert_int_equal(vixen("data inspect \"$VX_TEST_GAPS\""), 0);
    assert_non_null(strstr(out, "  gaps         2 (largest 600 s, before 2024-01-02T10:16:00Z)"));
    unsetenv("VX_TEST_GAPS");
    th_rmtree(dir);
}

/* `data synth`: .dbn is plain DBN (not zstd: that is .dbn.zst), --strength is the signal's
 * strength (the summary line says which was used), and a value the generator refuses is a usage
 * error naming the field, with nothing written. */
static void test_synth_options_and_plain_dbn(void **state)
{
    (void)state;
    char dir[64], p[128], args[512];
    th_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/s.dbn", dir);
    snprintf(args, sizeof args, "data synth --days 2 --strength 0.5 --out %s", p);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "780 bars (2 days, seed 1, strength 0.5)"));
    size_t n;
    uint8_t *b = th_read(p, &n);
    assert_true(n > 4 && memcmp(b, "DBN", 3) == 0); /* the DBN magic, no zstd frame */
    free(b);
    snprintf(args, sizeof args, "data inspect %s", p);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "format       dbn v3, dataset"));
    assert_int_equal(th_count_files(dir), 1);
    snprintf(args, sizeof args, "data synth --days 2 --phi 1.5 --out %s/x.csv", dir);
    assert_int_equal(vixen(args), 2);
    assert_non_null(strstr(err, "signal_phi"));
    assert_int_equal(th_count_files(dir), 1);
    th_rmtree(dir);
}

/* `data features` says whether the features were computed (a miss) or loaded (a hit). */
static void test_features_says_computed_then_loaded(void **state)
{
    (void)state;
    char dir[64], csv[128], args[512];
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/s.csv", dir);
    snprintf(args, sizeof args, "data synth --days 3 --out %s", csv);
    assert_int_equal(vixen(args), 0);
    snprintf(args, sizeof args, "data features %s --cache %s/cache", csv, dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, ", computed in "));
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, ", loaded in "));
    th_rmtree(dir);
}

/* `env bench`: the JSON and the text say the same counts for the same seed (the counts are
 * deterministic, only the timing differs); --days sets the synthetic market's length (5 days of
 * 390 bars); on a FILE market --seed alone changes the random policy's episodes, and the same
 * seed gives the same mean reward. */
static void test_env_bench_json_matches_text(void **state)
{
    (void)state;
    const char *a = "env bench --envs 64 --steps 2000 --days 5";
    char args[512], dir[64], csv[128];
    snprintf(args, sizeof args, "%s --json", a);
    assert_int_equal(vixen(args), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_true(jnum(j, "steps", NULL, NULL) == 2000);
    long ended = (long)jnum(j, "episodes_ended", NULL, NULL);
    long stopped = (long)jnum(j, "terminated", NULL, NULL);
    double reward = jnum(j, "mean_reward", NULL, NULL);
    double ret = jnum(j, "mean_episode_return", NULL, NULL);
    cJSON_Delete(j);
    assert_true(ended > 0);
    assert_int_equal(vixen(a), 0);
    assert_non_null(strstr(out, "market: SYNTH, 1950 bars,"));
    assert_non_null(strstr(out, "env bench: 64 envs x 2000 steps in"));
    char want[256];
    snprintf(want, sizeof want,
             "random policy: %ld episodes ended (%ld stopped out), mean reward %.4f per step, "
             "mean episode return %.3f\n",
             ended, stopped, reward, ret);
    if (!strstr(out, want)) fail_msg("want '%s' in:\n%s", want, out);
    /* no episode ends in 10 steps: no mean return, not 0 */
    assert_int_equal(vixen("env bench --envs 4 --steps 10 --days 5"), 0);
    assert_non_null(strstr(out, "random policy: 0 episodes ended (0 stopped out), mean reward "));
    assert_non_null(strstr(out, "per step, mean episode return -\n"));
    assert_int_equal(vixen("env bench --envs 4 --steps 10 --days 5 --json"), 0);
    assert_non_null(strstr(out, "\"episodes_ended\": 0,"));
    assert_non_null(strstr(out, "\"mean_episode_return\": null}"));
    th_tmpdir(dir, sizeof dir);
    snprintf(csv, sizeof csv, "%s/s.csv", dir);
    snprintf(args, sizeof args, "data synth --days 5 --out %s", csv);
    assert_int_equal(vixen(args), 0);
    double r[3];
    const int seeds[3] = {1, 2, 1};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args,
                 "env bench %s --cache %s/cache --envs 16 --steps 200 --seed %d --json", csv, dir,
                 seeds[i]);
        assert_int_equal(vixen(args), 0);
        j = cJSON_Parse(out);
        assert_non_null(j);
        r[i] = jnum(j, "mean_reward", NULL, NULL);
        cJSON_Delete(j);
    }
    assert_true(r[0] == r[2]);
    assert_true(r[0] != r[1]);
    th_rmtree(dir);
}

/* Usage errors of train and eval beyond option parsing are exit 2 with the reason; a run trained
 * on a FILE is evaluated on that FILE (its config's), not on the synthetic market; --split val is
 * validation; a run's first validation is its best so far, and the progress line says so; the
 * in-sample row is left out where the split is the training split itself. */
static void test_train_eval_usage_and_run_data(void **state)
{
    (void)state;
    char dir[64], csv[128], args[2048];
    th_tmpdir(dir, sizeof dir);
    assert_int_equal(vixen("train --set foo"), 2);
    assert_non_null(strstr(err, "--set needs KEY=VALUE, got 'foo'"));
    assert_int_equal(vixen("eval . --checkpoint worst"), 2);
    assert_non_null(strstr(err, "--checkpoint: best or latest, not 'worst'"));
    snprintf(csv, sizeof csv, "%s/m.csv", dir);
    snprintf(args, sizeof args, "data synth --days 12 --seed 5 --out %s", csv);
    assert_int_equal(vixen(args), 0);
    snprintf(args, sizeof args, "eval %s --checkpoint best", csv);
    assert_int_equal(vixen(args), 2);
    assert_non_null(strstr(err, "is a file"));
    snprintf(args, sizeof args,
             "train %s --set data.cache=%s/cache --set env.episode_len=60 --set train.envs=16 "
             "--set train.steps_per_epoch=40 --set dqn.batch=32 --set net.trunk=32,32 "
             "--set net.head_hidden=16 --set train.warmup=200 --set train.eval_every=1 "
             "--epochs 2 --run %s/r",
             csv, dir, dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(err, "epoch 1/2"));
    assert_non_null(strstr(err, "(best) | eta"));
    /* 40 steps of 16 environments end no 60-step episode in epoch 1: no return to show yet */
    assert_non_null(strstr(err, "| episode return - |"));
    double rows[2][2];
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "eval %s/r --json%s%s", dir, k ? " --data " : "", k ? csv : "");
        assert_int_equal(vixen(args), 0);
        cJSON *j = cJSON_Parse(out);
        assert_non_null(j);
        rows[k][0] = jnum(j, "first_row", NULL, NULL);
        rows[k][1] = jnum(j, "last_row", NULL, NULL);
        cJSON_Delete(j);
    }
    assert_true(rows[0][0] == rows[1][0] && rows[0][1] == rows[1][1]);
    snprintf(args, sizeof args, "eval %s/r --split val", dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "validation split: rows"));
    snprintf(args, sizeof args, "eval %s/r --split train", dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "train split: rows 0.."));
    assert_null(strstr(out, "agent (train)"));
    snprintf(args, sizeof args, "eval %s/r", dir);
    assert_int_equal(vixen(args), 0);
    assert_non_null(strstr(out, "agent (train)"));
    th_rmtree(dir);
}

/* `vixen report` on a walk-forward folder with no fold-1/ has no run to report: a failure. */
static void test_report_walk_forward_without_folds(void **state)
{
    (void)state;
    char dir[64], p[128], args[256];
    th_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/walk_forward.json", dir);
    th_write_str(p, "{}\n");
    snprintf(args, sizeof args, "report %s", dir);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "without fold-1/"));
    assert_string_equal(out, "");
    /* a fold whose report cannot be written fails the command, not only its own line */
    snprintf(p, sizeof p, "%s/fold-1", dir);
    assert_int_equal(mkdir(p, 0755), 0);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "fold-1/eval.json"));
    /* a file is no run folder, and is named as a file */
    snprintf(args, sizeof args, "report %s/walk_forward.json", dir);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "walk_forward.json: a file, not a run folder"));
    snprintf(args, sizeof args, "report %s/nothing-here", dir);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "nothing-here: no such run folder"));
    th_rmtree(dir);
}

/* A command word without its subcommand or argument is a usage error (2), and `hyperopt --plan`
 * needs no --study (it only prints the budget); its --algo chooses the trials' algorithm. */
static void test_subcommand_usage_errors(void **state)
{
    (void)state;
    const char *bare[] = {"data", "env", "hyperopt status", "hyperopt report"};
    for (size_t i = 0; i < sizeof bare / sizeof *bare; i++) {
        int rc = vixen(bare[i]);
        if (rc != 2) fail_msg("'vixen %s': exit %d: %s", bare[i], rc, err);
    }
    char dir[64], space[128], args[512];
    th_tmpdir(dir, sizeof dir);
    snprintf(space, sizeof space, "%s/space.yaml", dir);
    th_write_str(space, "dqn.lr: {type: logfloat, low: 1.0e-4, high: 3.0e-3}\n");
    snprintf(args, sizeof args, "hyperopt %s --plan --device cpu", space);
    if (vixen(args) != 0) fail_msg("--plan: %s", err);
    assert_non_null(strstr(out, "concurrency"));
    assert_int_equal(th_count_files(dir), 1); /* no study folder made */
    /* a PPO key in the space needs PPO trials: refused for the default DQN, taken with --algo */
    th_write_str(space, "ppo.lr: {type: logfloat, low: 1.0e-4, high: 3.0e-3}\n");
    assert_int_equal(vixen(args), 1);
    assert_non_null(
        strstr(err, "line 1, field 'ppo.lr': a setting of ppo, but the trials train dqn"));
    snprintf(args, sizeof args, "hyperopt %s --plan --device cpu --algo ppo", space);
    if (vixen(args) != 0) fail_msg("--algo ppo: %s", err);
    assert_non_null(
        strstr(out, "70736 parameters")); /* PPO's default network, as a run counts it */
    snprintf(args, sizeof args, "hyperopt %s --plan --device cpu --algo sarsa", space);
    assert_int_equal(vixen(args), 2);
    assert_non_null(strstr(err, "--algo: train.algo: 'sarsa'"));
    /* so is a base --set of the other algorithm's key, unless the space searches train.algo */
    snprintf(args, sizeof args, "hyperopt %s --plan --device cpu --algo ppo --set dqn.lr=1e-3",
             space);
    assert_int_equal(vixen(args), 2);
    assert_non_null(strstr(err, "--set dqn.lr: a setting of dqn, but this trains ppo"));
    th_write_str(space, "ppo.lr: {type: logfloat, low: 1.0e-4, high: 3.0e-3}\n"
                        "train.algo: {type: categorical, values: [dqn, ppo]}\n");
    snprintf(args, sizeof args, "hyperopt %s --plan --device cpu --set dqn.lr=1e-3", space);
    if (vixen(args) != 0) fail_msg("a space searching train.algo: %s", err);
    /* PPO's example space plans with --algo ppo */
    snprintf(args, sizeof args,
             "hyperopt %s/../../examples/ppo-space.yaml --plan --device cpu "
             "--algo ppo",
             VX_FIXTURES);
    if (vixen(args) != 0) fail_msg("examples/ppo-space.yaml: %s", err);
    assert_non_null(strstr(out, "(minibatch 1600 rows)")); /* its largest trial: 8 minibatches */
    /* the minibatch bound is a divisor of the rollout's rows (128 envs × 100 steps), not a power
     * of two (it had said 64, below the 1,600 rows the estimate was made at) */
    assert_non_null(strstr(out, "minibatch   at most 12800 rows alone"));
    assert_non_null(strstr(out, "(of the rollout's 12800)"));
    /* a study over data that cannot be read fails at once, naming the file, and makes no
     * folder (every trial of every generation had failed the same way, the study left behind) */
    th_write_str(space, "dqn.lr: {type: logfloat, low: 1.0e-4, high: 3.0e-3}\n");
    snprintf(args, sizeof args, "hyperopt %s %s/none.csv --study %s/st --device cpu", space, dir,
             dir);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "none.csv: cannot open"));
    assert_int_equal(th_count_files(dir), 1);
    th_rmtree(dir);
}

/* `vixen bench`: every --skip is checked, not only the first; the --no-learn alias skips learn;
 * --out FILE holds the same JSON as stdout, and a --out that cannot be written fails (1); a --bars
 * below its range is a usage error (2). */
static void test_bench_skip_alias_and_out(void **state)
{
    (void)state;
    char dir[64], p[128], args[512];
    assert_int_equal(vixen("bench --only data --skip data --skip nosuchgroup"), 2);
    assert_non_null(strstr(err, "--skip: unknown group 'nosuchgroup'"));
    assert_int_equal(vixen("bench --only learn --no-learn"), 0);
    assert_string_equal(out, "{\"results\": [\n]}\n");
    assert_int_equal(vixen("bench --bars 999"), 2);
    assert_non_null(strstr(err, "--bars"));
    th_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/b.json", dir);
    snprintf(args, sizeof args, "bench --only data --bars 2000 --out %s", p);
    assert_int_equal(vixen(args), 0);
    char *text = read_text(p);
    assert_non_null(strstr(text, "\"name\": \"dbn_parse\", "));
    assert_string_equal(text, out);
    free(text);
    snprintf(args, sizeof args, "bench --only data --skip data --out %s/none/b.json", dir);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(err, "none/b.json"));
    th_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inspect_json_fixtures),
        cmocka_unit_test(test_corrupt_inputs_one_line_error_no_cache),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_option_values_checked),
        cmocka_unit_test(test_features_cli_then_training_entry_point_hits),
        cmocka_unit_test(test_synth_formats_and_env_bench),
        cmocka_unit_test(test_train_and_eval_commands),
        cmocka_unit_test(test_resume_run_with_nasty_paths),
        cmocka_unit_test(test_env_bench_long_cache_not_truncated),
        cmocka_unit_test(test_resume_long_folder_refused_first),
        cmocka_unit_test(test_inflate_limit_settable),
        cmocka_unit_test(test_bench_groups_come_from_the_registry),
        cmocka_unit_test(test_bench_interrupted_leaves_no_folder),
        cmocka_unit_test(test_run_names_what_trained_it),
        cmocka_unit_test(test_eval_warns_of_other_bars),
        cmocka_unit_test(test_version_and_short_help),
        cmocka_unit_test(test_inspect_gaps_escaping_and_bars),
        cmocka_unit_test(test_synth_options_and_plain_dbn),
        cmocka_unit_test(test_features_says_computed_then_loaded),
        cmocka_unit_test(test_env_bench_json_matches_text),
        cmocka_unit_test(test_train_eval_usage_and_run_data),
        cmocka_unit_test(test_report_walk_forward_without_folds),
        cmocka_unit_test(test_bench_skip_alias_and_out),
        cmocka_unit_test(test_subcommand_usage_errors),
    };
    return cmocka_run_group_tests_name("cli", tests, NULL, NULL);
}

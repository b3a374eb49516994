/* test_io.c — safetensors round trip and damaged files, TensorBoard records read back with
 * their CRCs and files of their own, the metrics CSV resume rule, the flat YAML reader with its
 * line numbers and duplicate keys, and settings that read back byte for byte. */
#define _GNU_SOURCE /* memmem */
#include "helpers.h"
#include <stddef.h>
#include "vixen/io.h"
#include "vixen/svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void test_crc32c_known_answer(void **state)
{
    (void)state;
    assert_int_equal(vx_crc32c("123456789", 9), 0xE3069283u); /* the CRC-32C check value */
    assert_int_equal(vx_crc32c("", 0), 0);
}

static void test_safetensors_roundtrip(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    float w[6] = {1, -2, 3.5f, 4, 5, 6};
    double d[3] = {0.1, 0.2, 1e300};
    int64_t k[2] = {-5, 1ll << 50};
    uint8_t b[5] = {1, 2, 3, 4, 255};
    vx_tensor t[4] = {{"net.w", VX_DT_F32, 2, {2, 3}, w},
                      {"d", VX_DT_F64, 1, {3}, d},
                      {"counter", VX_DT_I64, 1, {2}, k},
                      {"state.bytes", VX_DT_U8, 1, {5}, b}};
    vx_meta m[2] = {{"step", "42"}, {"config", "dqn:\n  lr: \"3e-4\""}};
    vx_err e;
    assert_int_equal(vx_safetensors_write(path, t, 4, m, 2, &e), VX_OK);
    vx_safetensors s;
    assert_int_equal(vx_safetensors_read(path, &s, &e), VX_OK);
    assert_int_equal(s.n, 4);
    const vx_tensor *x = vx_safetensors_get(&s, "net.w", VX_DT_F32, 6, &e);
    assert_non_null(x);
    assert_int_equal(x->shape[0], 2);
    assert_int_equal(x->shape[1], 3);
    assert_memory_equal(x->data, w, sizeof w);
    assert_int_equal(((uintptr_t)x->data - (uintptr_t)s.file) % 8, 0); /* 8-aligned data */
    assert_memory_equal(vx_safetensors_get(&s, "d", VX_DT_F64, 3, &e)->data, d, sizeof d);
    assert_memory_equal(vx_safetensors_get(&s, "counter", VX_DT_I64, 2, &e)->data, k, sizeof k);
    assert_memory_equal(vx_safetensors_get(&s, "state.bytes", VX_DT_U8, 5, &e)->data, b, 5);
    assert_string_equal(vx_safetensors_meta(&s, "step"), "42");
    assert_string_equal(vx_safetensors_meta(&s, "config"), "dqn:\n  lr: \"3e-4\"");
    assert_null(vx_safetensors_get(&s, "net.w", VX_DT_F32, 7, &e));
    assert_non_null(strstr(e.msg, "expected F32 with 7"));
    assert_null(vx_safetensors_get(&s, "missing", VX_DT_F32, 1, &e));
    assert_int_equal(e.status, VX_ERR_NOT_FOUND);
    vx_safetensors_free(&s);
    /* damaged: truncated data, a header length beyond the file */
    size_t n;
    uint8_t *raw = th_read(path, &n);
    th_write(path, raw, n - 3);
    assert_int_equal(vx_safetensors_read(path, &s, &e), VX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "data_offsets"));
    raw[7] = 0x7f;
    th_write(path, raw, n);
    assert_int_equal(vx_safetensors_read(path, &s, &e), VX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "header length"));
    free(raw);
    th_rmtree(dir);
}

static uint64_t rd(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

static void test_tfevents_records(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    vx_tfevents w;
    vx_err e;
    assert_int_equal(vx_tfevents_open(&w, dir, &e), VX_OK);
    assert_int_equal(vx_tfevents_scalar(&w, "train/loss", 7, 0.25, &e), VX_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s", w.path);
    vx_tfevents_close(&w);
    size_t n;
    uint8_t *b = th_read(path, &n);
    size_t off = 0;
    int records = 0;
    while (off < n) {
        uint64_t len = rd(b + off, 8);
        assert_int_equal(rd(b + off + 8, 4), masked(vx_crc32c(b + off, 8)));
        const uint8_t *data = b + off + 12;
        assert_int_equal(rd(data + len, 4), masked(vx_crc32c(data, len)));
        if (records == 0) assert_non_null(memmem(data, len, "brain.Event:2", 13));
        if (records == 1) {
            assert_non_null(memmem(data, len, "train/loss", 10));
            float f = 0.25f;
            assert_non_null(memmem(data, len, &f, 4));
            const uint8_t step[2] = {0x10, 7};
            assert_non_null(memmem(data, len, step, 2));
        }
        off += 12 + len + 4;
        records++;
    }
    assert_int_equal(off, n);
    assert_int_equal(records, 2);
    free(b);
    th_rmtree(dir);
}

/* Two runs started in one second each get their own event file, created new: never appended
 * to, never written through a link planted at the name. */
static void test_tfevents_unique_exclusive(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    vx_tfevents w[3];
    vx_err e;
    /* three opens span at most one change of second, so two of them share a second */
    for (int i = 0; i < 3; i++) assert_int_equal(vx_tfevents_open(&w[i], dir, &e), VX_OK);
    for (int i = 0; i < 3; i++) {
        assert_non_null(strstr(w[i].path, "/events.out.tfevents."));
        for (int j = 0; j < i; j++)
            if (strcmp(w[i].path, w[j].path) == 0) fail_msg("two writers share %s", w[i].path);
    }
    for (int i = 0; i < 3; i++) vx_tfevents_close(&w[i]);
    for (int i = 0; i < 3; i++) { /* each holds exactly its own file_version record */
        size_t n;
        uint8_t *b = th_read(w[i].path, &n);
        assert_true(n > 12);
        assert_int_equal(12 + rd(b, 8) + 4, n);
        free(b);
    }
    /* the next name this process would take, planted as a link to a file of someone else's */
    char next[1100], target[128];
    snprintf(next, sizeof next, "%s", w[2].path);
    char *serial = strrchr(next, '.'); /* ".vixen" */
    *serial = '\0';
    serial = strrchr(next, '.') + 1;
    unsigned k = (unsigned)strtoul(serial, NULL, 10);
    snprintf(serial, sizeof next - (size_t)(serial - next), "%u.vixen", k + 1);
    snprintf(target, sizeof target, "%s/precious", dir);
    th_write_str(target, "keep me");
    assert_int_equal(symlink(target, next), 0);
    vx_tfevents x;
    assert_int_equal(vx_tfevents_open(&x, dir, &e), VX_OK);
    assert_string_not_equal(x.path, next);
    vx_tfevents_close(&x);
    size_t n;
    char *t = (char *)th_read(target, &n);
    assert_int_equal(n, 7);
    assert_memory_equal(t, "keep me", 7);
    free(t);
    th_rmtree(dir);
}

static void test_csv_log_append(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.csv", dir);
    const char *cols[3] = {"epoch", "loss", "sharpe"};
    vx_csv_log w;
    vx_err e;
    assert_int_equal(vx_csv_log_open(&w, path, cols, 3, 0, &e), VX_OK);
    double r1[3] = {1, 0.5, -0.25};
    assert_int_equal(vx_csv_log_row(&w, r1, &e), VX_OK);
    vx_csv_log_close(&w);
    assert_int_equal(vx_csv_log_open(&w, path, cols, 3, 1, &e), VX_OK); /* resume: append */
    double r2[3] = {2, 0.125, 1.5};
    vx_csv_log_row(&w, r2, &e);
    vx_csv_log_close(&w);
    size_t n;
    char *t = (char *)th_read(path, &n);
    assert_int_equal(n, strlen("epoch,loss,sharpe\n1,0.5,-0.25\n2,0.125,1.5\n"));
    assert_memory_equal(t, "epoch,loss,sharpe\n1,0.5,-0.25\n2,0.125,1.5\n", n);
    free(t);
    const char *other[2] = {"epoch", "loss"};
    assert_int_equal(vx_csv_log_open(&w, path, other, 2, 2, &e), VX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "m.csv: line 1"));
    t = (char *)th_read(path, &n); /* a refused resume leaves the file as it was */
    assert_memory_equal(t, "epoch,loss,sharpe\n1,0.5,-0.25\n2,0.125,1.5\n", n);
    free(t);
    /* a new run (nothing completed) starts the file afresh, whatever an attempt left */
    assert_int_equal(vx_csv_log_open(&w, path, other, 2, 0, &e), VX_OK);
    vx_csv_log_close(&w);
    t = (char *)th_read(path, &n);
    assert_int_equal(n, strlen("epoch,loss\n"));
    assert_memory_equal(t, "epoch,loss\n", n);
    free(t);
    th_rmtree(dir);
}

/* Resuming at epoch 3 after rows 1..5 were written (the attempt died after its epoch-3
 * checkpoint): rows 4 and 5 are written again, so the file must hold 1..5 once each. A row cut
 * short by a kill (no newline) is dropped too. */
static void test_csv_log_resume_drops_rows_after_checkpoint(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    const char *cols[2] = {"epoch", "loss"};
    vx_csv_log w;
    vx_err e;
    assert_int_equal(vx_csv_log_open(&w, path, cols, 2, 0, &e), VX_OK);
    for (int ep = 1; ep <= 5; ep++) {
        double row[2] = {ep, ep * 0.5};
        assert_int_equal(vx_csv_log_row(&w, row, &e), VX_OK);
    }
    fputs("6,3.", w.f); /* the kill came mid-row */
    vx_csv_log_close(&w);
    assert_int_equal(vx_csv_log_open(&w, path, cols, 2, 3, &e), VX_OK);
    for (int ep = 4; ep <= 5; ep++) {
        double row[2] = {ep, ep * 0.5};
        assert_int_equal(vx_csv_log_row(&w, row, &e), VX_OK);
    }
    vx_csv_log_close(&w);
    size_t n;
    char *t = (char *)th_read(path, &n);
    const char *want = "epoch,loss\n1,0.5\n2,1\n3,1.5\n4,2\n5,2.5\n";
    if (n != strlen(want) || memcmp(t, want, n) != 0) fail_msg("metrics.csv:\n%.*s", (int)n, t);
    free(t);
    /* resuming past every row keeps them all (a torn row still goes) */
    th_write_str(path, "epoch,loss\n1,0.5\n2,1\n3,1.");
    assert_int_equal(vx_csv_log_open(&w, path, cols, 2, 10, &e), VX_OK);
    vx_csv_log_close(&w);
    t = (char *)th_read(path, &n);
    assert_int_equal(n, strlen("epoch,loss\n1,0.5\n2,1\n"));
    assert_memory_equal(t, "epoch,loss\n1,0.5\n2,1\n", n);
    free(t);
    /* a row whose epoch is no number cannot be placed: an error naming the line and column */
    th_write_str(path, "epoch,loss\n1,0.5\nx,1\n");
    assert_int_equal(vx_csv_log_open(&w, path, cols, 2, 1, &e), VX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "metrics.csv: line 3, field 'epoch'"));
    th_rmtree(dir);
}

static void test_yaml_flat(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/c.yaml", dir);
    th_write_str(path, "# a run\n"
                       "dqn:\n"
                       "  lr: 3.0e-4\n"
                       "  loss: huber   # comment\n"
                       "net:\n"
                       "  trunk: [256, 128]\n"
                       "data:\n"
                       "  files:\n"
                       "    - a.csv\n"
                       "    - \"b c.csv\"\n");
    vx_kv *kv;
    size_t n;
    vx_err e;
    assert_int_equal(vx_yaml_read_flat(path, &kv, &n, &e), VX_OK);
    assert_int_equal(n, 4);
    assert_string_equal(kv[0].key, "dqn.lr");
    assert_string_equal(kv[0].value, "3.0e-4");
    assert_int_equal(kv[0].line, 3);
    assert_string_equal(kv[1].value, "huber");
    assert_string_equal(kv[2].key, "net.trunk");
    assert_null(kv[2].value);
    assert_int_equal(kv[2].n_items, 2);
    assert_string_equal(kv[2].items[0], "256");
    assert_string_equal(kv[2].items[1], "128");
    assert_string_equal(kv[3].key, "data.files");
    assert_int_equal(kv[3].n_items, 2);
    assert_string_equal(kv[3].items[1], "b c.csv");
    assert_int_equal(kv[3].line, 8);
    vx_kv_free(kv, n);
    const char *bad[] = {"dqn:\n  adam:\n    lr: 1\n", "dqn: 5\n", "- a\n- b\n",
                         "dqn:\n  lr: [1, [2]]\n", "dqn:\n  lr: 1\n   x: : :\n"};
    const int lines[] = {3, 1, 1, 2, 3};
    for (int i = 0; i < 5; i++) {
        th_write_str(path, bad[i]);
        assert_int_equal(vx_yaml_read_flat(path, &kv, &n, &e), VX_ERR_FORMAT);
        if (e.line != lines[i]) fail_msg("case %d: line %lld: %s", i, (long long)e.line, e.msg);
        assert_non_null(strstr(e.msg, "c.yaml: line"));
    }
    th_rmtree(dir);
}

/* A key or a section given twice is refused with the file, the line of the second and the key
 * (YAML requires unique keys; libyaml does not check, and the second value would win silently). */
static void test_yaml_duplicate_keys(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/c.yaml", dir);
    const char *bad[] = {"dqn:\n  lr: 1\n  gamma: 0.9\n  lr: 2\n",
                         "dqn:\n  lr: 1\ntrain:\n  epochs: 3\ndqn:\n  gamma: 0.9\n",
                         "dqn: {lr: 1, lr: 2}\n", "dqn:\n  trunk: [1]\n  trunk: 5\n"};
    const int lines[] = {4, 5, 1, 3};
    const char *keys[] = {"key 'dqn.lr'", "section 'dqn'", "key 'dqn.lr'", "key 'dqn.trunk'"};
    for (int i = 0; i < 4; i++) {
        th_write_str(path, bad[i]);
        vx_kv *kv;
        size_t n;
        vx_err e;
        assert_int_equal(vx_yaml_read_flat(path, &kv, &n, &e), VX_ERR_FORMAT);
        if (e.line != lines[i] || !strstr(e.msg, keys[i]) || !strstr(e.msg, "given twice") ||
            !strstr(e.msg, "c.yaml: line"))
            fail_msg("case %d: %s", i, e.msg);
    }
    th_rmtree(dir);
}

/* Errors and lines a user acts on: a key's line is the key's, also when its value is on the next
 * line; of two repeated keys the one repeated first is named, with the line of its first
 * occurrence; a second YAML document and an alias are refused where they are (libyaml would read
 * both, and an ignored alias leaves its key without a value). */
static void test_yaml_lines_and_refusals(void **state)
{
    (void)state;
    vx_kv *kv;
    size_t n;
    vx_err e;
    const char *next_line = "dqn:\n  lr:\n    3.0e-4\n  loss: huber\n";
    assert_int_equal(vx_yaml_read_flat_text(next_line, strlen(next_line), "c.yaml", &kv, &n, &e),
                     VX_OK);
    assert_int_equal(n, 2);
    assert_string_equal(kv[0].key, "dqn.lr");
    assert_string_equal(kv[0].value, "3.0e-4");
    assert_int_equal(kv[0].line, 2);
    assert_int_equal(kv[1].line, 4);
    vx_kv_free(kv, n);
    /* y repeated on line 4 (first on 3), x on line 5 (first on 2): y is named */
    const char *twice = "dqn:\n  x: 1\n  y: 1\n  y: 2\n  x: 2\n";
    assert_int_equal(vx_yaml_read_flat_text(twice, strlen(twice), "c.yaml", &kv, &n, &e),
                     VX_ERR_FORMAT);
    assert_int_equal(e.line, 4);
    assert_string_equal(e.field, "dqn.y");
    if (!strstr(e.msg, "c.yaml: line 4") ||
        !strstr(e.msg, "key 'dqn.y' given twice (first on line 3)"))
        fail_msg("%s", e.msg);
    const char *bad[] = {"dqn:\n  lr: 1\n---\nnet:\n  trunk: 2\n",
                         "dqn:\n  lr: &a 1\n  gamma: *a\n", "dqn:\n  gamma: *a\n  lr: 1\n"};
    const char *what[] = {"more than one YAML document", "aliases", "aliases"};
    const int lines[] = {3, 3, 2};
    for (int i = 0; i < 3; i++) {
        vx_status st = vx_yaml_read_flat_text(bad[i], strlen(bad[i]), "c.yaml", &kv, &n, &e);
        if (st != VX_ERR_FORMAT || e.line != lines[i] || !strstr(e.msg, what[i]))
            fail_msg("case %d: status %d, line %lld: %s", i, st, (long long)e.line,
                     st ? e.msg : "(read)");
    }
}

/* The settings machinery over a made-up section: every key type, range and type errors naming the
 * key and `where`, a flag set when a key is given, renamed keys, and write → load round trips. */
typedef struct {
    int n;
    int64_t big;
    uint64_t seed;
    double rate;
    char name[16];
    int mode;
    int widths[4], n_widths;
    char files[3][32];
    int n_files;
    int n_given;
} toy;

static const char *const toy_modes[] = {"off", "on", "auto", NULL};
#define TF(f) offsetof(toy, f), sizeof(((toy *)0)->f)
static const vx_key toy_keys[] = {
    {"n", VX_KEY_INT, TF(n), 1, 100, NULL, 0, 0, offsetof(toy, n_given), "a count"},
    {"big", VX_KEY_I64, TF(big), 0, 1e15, NULL, 0, 0, -1, "a large count"},
    {"seed", VX_KEY_U64, TF(seed), 0, 1e18, NULL, 0, 0, -1, "a seed"},
    {"rate", VX_KEY_DBL, TF(rate), 0, 1, NULL, 0, 0, -1, "a rate"},
    {"name", VX_KEY_STR, TF(name), 0, 0, NULL, 0, 0, -1, "a name"},
    {"mode", VX_KEY_ENUM, TF(mode), 0, 0, toy_modes, 0, 0, -1, "a mode"},
    {"widths", VX_KEY_INTLIST, offsetof(toy, widths), sizeof(int), 1, 4096, NULL,
     offsetof(toy, n_widths), 4, -1, "layer widths"},
    {"files", VX_KEY_STRLIST, offsetof(toy, files), 32, 0, 0, NULL, offsetof(toy, n_files), 3, -1,
     "files"},
};
static const vx_section toy_section = {"toy", toy_keys, sizeof toy_keys / sizeof *toy_keys};
static const char *const toy_renamed[] = {"old.count", "toy.n", NULL};

static void test_settings(void **state)
{
    (void)state;
    toy t = {0}, u = {0};
    vx_settings s = {0}, su = {0};
    vx_settings_bind(&s, &toy_section, &t);
    s.renamed = toy_renamed;
    vx_settings_bind(&su, &toy_section, &u);
    vx_err e;
    assert_int_equal(vx_settings_set(&s, "toy.big", "1e12", NULL, &e), VX_OK);
    assert_true(t.big == 1000000000000LL);
    assert_int_equal(t.n_given, 0);
    assert_int_equal(vx_settings_set(&s, "old.count", "7", NULL, &e), VX_OK); /* renamed */
    assert_int_equal(t.n, 7);
    assert_int_equal(t.n_given, 1);
    assert_int_equal(vx_settings_set(&s, "toy.seed", "18446744073709551615", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_settings_set(&s, "toy.seed", "12345678901234", NULL, &e), VX_OK);
    assert_int_equal(vx_settings_set(&s, "toy.rate", "0.25", NULL, &e), VX_OK);
    assert_int_equal(vx_settings_set(&s, "toy.name", "a \"b\"", NULL, &e), VX_OK);
    assert_int_equal(vx_settings_set(&s, "toy.mode", "auto", NULL, &e), VX_OK);
    assert_int_equal(t.mode, 2);
    assert_int_equal(vx_settings_set(&s, "toy.widths", "[64, 32,16]", NULL, &e), VX_OK);
    assert_int_equal(t.n_widths, 3);
    assert_int_equal(t.widths[2], 16);
    assert_int_equal(vx_settings_set(&s, "toy.files", "a.csv, b c.dbn", NULL, &e), VX_OK);
    assert_int_equal(t.n_files, 2);
    assert_string_equal(t.files[1], "b c.dbn");
    /* errors name the key, the value and where */
    assert_int_equal(vx_settings_set(&s, "toy.n", "101", "f.yaml: line 3", &e), VX_ERR_ARG);
    assert_string_equal(e.msg, "f.yaml: line 3: toy.n: 101 is outside 1 .. 100");
    assert_int_equal(vx_settings_set(&s, "toy.n", "2.5", NULL, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "not a whole number"));
    assert_int_equal(vx_settings_set(&s, "toy.rate", "fast", NULL, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "'fast' is not a number"));
    assert_int_equal(vx_settings_set(&s, "toy.mode", "maybe", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_settings_set(&s, "toy.name", "sixteen letters!", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_settings_set(&s, "toy.widths", "1,2,3,4,5", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_settings_set(&s, "toy.widths", "0", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_settings_set(&s, "toy.files", "a,b,c,d", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_settings_set(&s, "toy.nn", "1", NULL, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "unknown key 'toy.nn'"));
    assert_int_equal(vx_settings_set(&s, "nodot", "1", NULL, &e), VX_ERR_ARG);
    /* a section name is matched whole, not as a prefix of the key's */
    assert_int_equal(vx_settings_set(&s, "to.n", "1", NULL, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "unknown key 'to.n'"));
    /* whole numbers for every integer type, and no NaN or infinity for a double (NaN passes
     * every range comparison) */
    assert_int_equal(vx_settings_set(&s, "toy.big", "2.5", NULL, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "not a whole number"));
    assert_int_equal(vx_settings_set(&s, "toy.seed", "1.5", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_settings_set(&s, "toy.rate", "nan", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_settings_set(&s, "toy.rate", "inf", NULL, &e), VX_ERR_ARG);
    assert_true(t.big == 1000000000000LL && t.seed == 12345678901234ull && t.rate == 0.25);
    assert_int_equal(t.n, 7); /* failed sets left the value alone */
    /* write → load: the same values, and the same text again */
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/toy.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(vx_settings_write(&s, f), VX_OK);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(vx_settings_load(&su, path, &e), VX_OK);
    assert_int_equal(u.n, 7);
    assert_true(u.big == t.big && u.seed == t.seed && u.rate == t.rate);
    assert_string_equal(u.name, "a \"b\"");
    assert_int_equal(u.mode, 2);
    assert_int_equal(u.n_widths, 3);
    assert_memory_equal(u.widths, t.widths, 3 * sizeof(int));
    assert_int_equal(u.n_files, 2);
    assert_string_equal(u.files[0], "a.csv");
    char a[4096] = {0}, b[4096] = {0};
    FILE *fa = fmemopen(a, sizeof a - 1, "w"), *fb = fmemopen(b, sizeof b - 1, "w");
    assert_non_null(fa);
    assert_non_null(fb);
    assert_int_equal(vx_settings_write(&s, fa), VX_OK);
    assert_int_equal(vx_settings_write(&su, fb), VX_OK);
    assert_int_equal(fclose(fa), 0);
    assert_int_equal(fclose(fb), 0);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "toy:\n  n: 7\n"));
    th_write_str(path, "toy:\n  n: 3\n  mode: sideways\n");
    assert_int_equal(vx_settings_load(&su, path, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "toy.yaml: line 3: toy.mode: 'sideways'"));
    th_rmtree(dir);
}

/* Every item of a list is range- and type-checked like a scalar, a list needs one item, and a
 * refused value leaves both the field and its "given" flag as they were: a width of 5000 or 2.5,
 * an empty trunk or a count with trailing letters would otherwise reach the network. */
static void test_settings_refusals_leave_values(void **state)
{
    (void)state;
    toy t = {0};
    vx_settings s = {0};
    vx_settings_bind(&s, &toy_section, &t);
    vx_err e;
    assert_int_equal(vx_settings_set(&s, "toy.widths", "[4096, 1]", NULL, &e), VX_OK); /* ends */
    assert_int_equal(vx_settings_set(&s, "toy.widths", "[1, 2, 3, 4]", NULL, &e), VX_OK);
    assert_int_equal(t.n_widths, 4);
    const char *refused[] = {"[64, 4097]", "[64, 2.5]", "[]", "[64, 12abc]", "[64, -1]"};
    for (int i = 0; i < 5; i++) {
        if (vx_settings_set(&s, "toy.widths", refused[i], "f.yaml: line 7", &e) != VX_ERR_ARG)
            fail_msg("'%s' taken", refused[i]);
        assert_non_null(strstr(e.msg, "f.yaml: line 7: toy.widths: "));
        assert_int_equal(t.n_widths, 4);
        assert_int_equal(t.widths[3], 4);
    }
    assert_non_null(strstr(e.msg, "'-1' is not a whole number in 1 .. 4096"));
    /* from YAML, an empty list too */
    const char *empty = "toy:\n  widths: []\n";
    assert_int_equal(vx_settings_load_text(&s, empty, strlen(empty), "c.yaml", &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "c.yaml: line 2: toy.widths"));
    assert_int_equal(t.n_widths, 4);
    /* scalars: the range's ends are in it, the next whole numbers are not, trailing letters are
     * no number; a refused value does not mark its key given */
    assert_int_equal(vx_settings_set(&s, "toy.n", "100", NULL, &e), VX_OK);
    assert_int_equal(vx_settings_set(&s, "toy.n", "1", NULL, &e), VX_OK);
    t.n_given = 0;
    assert_int_equal(vx_settings_set(&s, "toy.n", "0", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_settings_set(&s, "toy.n", "12abc", NULL, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "'12abc' is not a number"));
    assert_int_equal(t.n, 1);
    assert_int_equal(t.n_given, 0);
    assert_int_equal(vx_settings_set(&s, "toy.rate", "1", NULL, &e), VX_OK);
    assert_int_equal(vx_settings_set(&s, "toy.rate", "1.0000001", NULL, &e), VX_ERR_ARG);
    assert_true(t.rate == 1.0);
}

/* An old and a new name of one key in one file: which wins would be an accident of order. */
static void test_settings_renamed_key_twice(void **state)
{
    (void)state;
    toy t = {0};
    vx_settings s = {0};
    vx_settings_bind(&s, &toy_section, &t);
    s.renamed = toy_renamed;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/toy.yaml", dir);
    th_write_str(path, "toy:\n  n: 3\nold:\n  count: 4\n");
    vx_err e;
    assert_int_equal(vx_settings_load(&s, path, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "toy.yaml: line 4: toy.n: given twice (first on line 2)"));
    th_rmtree(dir);
}

/* Strings a run's config must carry through write → load unchanged: run folders and data paths
 * hold whatever a user's file system allows. */
typedef struct {
    char name[2048];
    char files[3][1024];
    int n_files;
    int widths[8], n_widths;
} wide;

#define WF(f) offsetof(wide, f), sizeof(((wide *)0)->f)
static const vx_key wide_keys[] = {
    {"name", VX_KEY_STR, WF(name), 0, 0, NULL, 0, 0, -1, "a name"},
    {"files", VX_KEY_STRLIST, offsetof(wide, files), 1024, 0, 0, NULL, offsetof(wide, n_files), 3,
     -1, "files"},
    {"widths", VX_KEY_INTLIST, offsetof(wide, widths), sizeof(int), 1, 4096, NULL,
     offsetof(wide, n_widths), 8, -1, "widths"},
};
static const vx_section wide_section = {"wide", wide_keys, sizeof wide_keys / sizeof *wide_keys};

/* a 390-byte path whose parts are `nasty` */
static void long_path(char *out, const char *nasty, int i)
{
    int k = snprintf(out, 1024, "/data/%d/%s/", i, nasty);
    for (; k < 385; k++) out[k] = (char)('a' + k % 26);
    snprintf(out + k, 1024 - (size_t)k, ".csv");
}

static void test_settings_roundtrip_nasty_strings(void **state)
{
    (void)state;
    const char *nasty[] = {
        "line\nbreak",
        "tab\there",
        "quote\"d",
        "back\\slash",
        "colon: x",
        "# hash",
        " leading space",
        "trailing space ",
        "non-UTF-8 \xff\xfe",
        "lone \x80 byte",
        "cut \xe2\x82",
        "caf\xc3\xa9 ok",
        "nel \xc2\x85 c1",
        "ls \xe2\x80\xa8 ps",
        "bom \xef\xbb\xbf",
        "ctl \x01\x1f\x7f",
        "cr\r\n",
        "a,b",
        "yes",
        "~",
        "- dash",
        "[x]",
        "{a: b}",
        "&anchor *alias !tag",
        "'single'",
        "%percent @at `tick",
        "\"",
        "\\",
        "   ",
        "x\xf4\x90\x80\x80",
        "surrogate \xed\xa0\x80",
        "overlong \xc0\xaf",
        "c1 last \xc2\x9f", /* U+009F, the last C1 control: escaped like the others */
    };
    const size_t n_nasty = sizeof nasty / sizeof *nasty;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/wide.yaml", dir);
    for (size_t i = 0; i < n_nasty; i++) {
        wide *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
        vx_settings sa = {0}, sb = {0};
        vx_settings_bind(&sa, &wide_section, a);
        vx_settings_bind(&sb, &wide_section, b);
        snprintf(a->name, sizeof a->name, "%s", nasty[i]);
        a->n_files = 3; /* three ~390-byte paths: 1,170 bytes of list on one key */
        for (int j = 0; j < 3; j++) long_path(a->files[j], nasty[(i + (size_t)j) % n_nasty], j);
        a->n_widths = 2, a->widths[0] = 64, a->widths[1] = 32;
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        assert_int_equal(vx_settings_write(&sa, f), VX_OK);
        assert_int_equal(fclose(f), 0);
        vx_err e;
        if (vx_settings_load(&sb, path, &e)) fail_msg("case %zu: %s", i, e.msg);
        if (strcmp(a->name, b->name) != 0)
            fail_msg("case %zu: name '%s' read as '%s'", i, a->name, b->name);
        assert_int_equal(b->n_files, 3);
        for (int j = 0; j < 3; j++)
            if (strcmp(a->files[j], b->files[j]) != 0) fail_msg("case %zu: file %d differs", i, j);
        assert_int_equal(b->n_widths, 2);
        assert_int_equal(b->widths[1], 32);
        /* and the same text again */
        size_t na, nb;
        char *ta = (char *)th_read(path, &na);
        f = fopen(path, "w");
        assert_int_equal(vx_settings_write(&sb, f), VX_OK);
        assert_int_equal(fclose(f), 0);
        char *tb = (char *)th_read(path, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(ta, tb, na);
        free(ta), free(tb), free(a), free(b);
    }
    th_rmtree(dir);
}

/* Values are as long as they are: no line or buffer limit in the reader, and a value too long for
 * its field is an error naming the key, never cut short. */
static void test_settings_long_values(void **state)
{
    (void)state;
    wide *w = calloc(1, sizeof *w);
    vx_settings s = {0};
    vx_settings_bind(&s, &wide_section, w);
    vx_err e;
    /* a 1,500-byte list value (the widths padded with spaces) */
    char trunk[1600];
    int k = snprintf(trunk, sizeof trunk, "[256,");
    while (k < 1500) trunk[k++] = ' ';
    snprintf(trunk + k, sizeof trunk - (size_t)k, "128]");
    assert_int_equal(vx_settings_set(&s, "wide.widths", trunk, NULL, &e), VX_OK);
    assert_int_equal(w->n_widths, 2);
    assert_int_equal(w->widths[1], 128);
    /* a 2,047-byte name fits its 2,048-byte field, through YAML too; 2,048 bytes do not */
    char *name = malloc(2100);
    memset(name, 'n', 2047);
    name[2047] = '\0';
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/w.yaml", dir);
    char *text = malloc(2200);
    snprintf(text, 2200, "wide:\n  name: %s\n", name);
    th_write_str(path, text);
    assert_int_equal(vx_settings_load(&s, path, &e), VX_OK);
    assert_string_equal(w->name, name);
    snprintf(text, 2200, "wide:\n  name: %sN\n", name);
    th_write_str(path, text);
    assert_int_equal(vx_settings_load(&s, path, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "w.yaml: line 2: wide.name:"));
    assert_non_null(strstr(e.msg, "too long"));
    assert_string_equal(w->name, name); /* untouched */
    /* a list item needs room for its NUL: 1,023 bytes fit a 1,024-byte row, 1,024 do not */
    char *item = malloc(1100);
    memset(item, 'f', 1024);
    item[1023] = '\0';
    assert_int_equal(vx_settings_set(&s, "wide.files", item, NULL, &e), VX_OK);
    assert_int_equal(strlen(w->files[0]), 1023);
    item[1023] = 'f', item[1024] = '\0';
    assert_int_equal(vx_settings_set(&s, "wide.files", item, NULL, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "too long"));
    assert_int_equal(strlen(w->files[0]), 1023); /* untouched */
    free(item);
    /* a list item too long for its row, and a NUL byte, are refused too */
    snprintf(text, 2200, "wide:\n  files:\n    - ok.csv\n    - %.1100s\n", name);
    th_write_str(path, text);
    assert_int_equal(vx_settings_load(&s, path, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "wide.files"));
    th_write_str(path, "wide:\n  name: \"a\\0b\"\n");
    assert_int_equal(vx_settings_load(&s, path, &e), VX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "w.yaml: line 2"));
    th_write_str(path, "wide:\n  name: !!binary \"*not base64*\"\n");
    assert_int_equal(vx_settings_load(&s, path, &e), VX_ERR_FORMAT);
    /* the same text from memory */
    const char *mem = "wide:\n  files: [\"a,b.csv\", c.csv]\n";
    assert_int_equal(vx_settings_load_text(&s, mem, strlen(mem), "checkpoint", &e), VX_OK);
    assert_int_equal(w->n_files, 2);
    assert_string_equal(w->files[0], "a,b.csv");
    th_rmtree(dir);
    free(text), free(name), free(w);
}

/* Doubles are written with all 17 significant digits: a resumed run must read back the very
 * values it trained with (0.1 + 0.2 and 1/3 need all 17 to come back bit for bit). */
static void test_settings_doubles_read_back_exactly(void **state)
{
    (void)state;
    const double vals[] = {0.1 + 0.2, 1.0 / 3.0, 0.7 * 0.7, 1e-300 * 3.3};
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/toy.yaml", dir);
    for (int i = 0; i < 4; i++) {
        toy t = {0}, u = {0};
        t.n = 1, t.rate = vals[i], t.n_widths = 1, t.widths[0] = 8;
        vx_settings s = {0}, su = {0};
        vx_settings_bind(&s, &toy_section, &t);
        vx_settings_bind(&su, &toy_section, &u);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        assert_int_equal(vx_settings_write(&s, f), VX_OK);
        assert_int_equal(fclose(f), 0);
        vx_err e;
        assert_int_equal(vx_settings_load(&su, path, &e), VX_OK);
        if (memcmp(&u.rate, &vals[i], sizeof(double)) != 0)
            fail_msg("%.17g read back as %.17g", vals[i], u.rate);
    }
    th_rmtree(dir);
}

/* A stream that fails (full) is reported, not ignored. */
static void test_settings_write_reports_errors(void **state)
{
    (void)state;
    toy t = {0};
    vx_settings s = {0};
    vx_settings_bind(&s, &toy_section, &t);
    char small[16];
    FILE *f = fmemopen(small, sizeof small, "w");
    assert_non_null(f); /* buffered: the failure shows only when the buffer is written out */
    assert_int_equal(vx_settings_write(&s, f), VX_ERR_IO);
    fclose(f);
}

/* ---- TensorBoard records decoded field by field ----------------------------------------------
 * test_tfevents_records finds its values anywhere in a record; this decodes every byte as the
 * protobuf TensorBoard reads (field numbers, wire types, varint lengths), so a wrong field number,
 * a varint cut at the wrong bit or a length one level off cannot hide. The CRC is computed here
 * bit by bit (no table), independently of vx_crc32c. */

static uint32_t crc32c_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

/* A varint at *p (before end), base 128, least significant group first. */
static uint64_t pb_varint(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    fail_msg("varint runs past its message");
    return 0;
}

/* A length-delimited field's length, checked to end inside its message. */
static size_t pb_len(const uint8_t **p, const uint8_t *end)
{
    uint64_t n = pb_varint(p, end);
    if (n > (uint64_t)(end - *p)) fail_msg("length %llu past its message", (unsigned long long)n);
    return (size_t)n;
}

static double now_realtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_tfevents_event_fields(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    /* steps on each side of every varint byte boundary; a tag of 200 bytes (the longest taken)
     * makes the Value and Summary lengths two-byte varints */
    const int64_t steps[] = {0, 1, 127, 128, 300, 16383, 16384, (1ll << 40) + 5};
    const double values[] = {0.25, -3.5, 0.1, 1e30, 0, 7, -1e-3, 123456.789};
    enum { N = sizeof steps / sizeof *steps };
    char long_tag[202];
    memset(long_tag, 'x', 201);
    long_tag[201] = '\0';
    vx_tfevents w;
    vx_err e;
    double t0 = now_realtime();
    assert_int_equal(vx_tfevents_open(&w, dir, &e), VX_OK);
    for (int i = 0; i < N; i++) {
        const char *tag = i == 3 ? long_tag + 1 : i == 5 ? "a" : "train/loss";
        assert_int_equal(vx_tfevents_scalar(&w, tag, steps[i], values[i], &e), VX_OK);
    }
    /* 201 bytes are refused, not cut, and write nothing */
    assert_int_equal(vx_tfevents_scalar(&w, long_tag, 9, 1.0, &e), VX_ERR_ARG);
    double t1 = now_realtime();
    char path[1024];
    snprintf(path, sizeof path, "%s", w.path);
    vx_tfevents_close(&w);
    size_t n;
    uint8_t *b = th_read(path, &n);
    size_t off = 0;
    int rec = 0;
    while (off < n) {
        assert_true(n - off >= 16);
        uint64_t len = rd(b + off, 8);
        assert_true(len <= n - off - 16);
        assert_int_equal(rd(b + off + 8, 4), masked(crc32c_bitwise(b + off, 8)));
        const uint8_t *p = b + off + 12, *end = p + len;
        assert_int_equal(rd(end, 4), masked(crc32c_bitwise(p, len)));
        /* Event.wall_time (1, fixed64): a double of the time of writing */
        assert_int_equal(*p++, 0x09);
        assert_true(end - p >= 8);
        uint64_t bits = rd(p, 8);
        double wall;
        memcpy(&wall, &bits, 8);
        p += 8;
        if (!(wall >= t0 - 0.01 && wall <= t1 + 0.01))
            fail_msg("record %d: wall_time %.6f outside [%.6f, %.6f]", rec, wall, t0, t1);
        /* Event.step (2, varint) */
        assert_int_equal(*p++, 0x10);
        uint64_t step = pb_varint(&p, end);
        if (rec == 0) {
            /* Event.file_version (3, string), at step 0 */
            assert_int_equal(step, 0);
            assert_int_equal(*p++, 0x1a);
            size_t sl = pb_len(&p, end);
            assert_int_equal(sl, 13);
            assert_memory_equal(p, "brain.Event:2", 13);
            p += sl;
        } else {
            int i = rec - 1;
            assert_true(i < N);
            if (step != (uint64_t)steps[i])
                fail_msg("record %d: step %llu, not %lld", rec, (unsigned long long)step,
                         (long long)steps[i]);
            /* Event.summary (5, message) → Summary.value (1, message) → Value */
            assert_int_equal(*p++, 0x2a);
            size_t sl = pb_len(&p, end);
            assert_ptr_equal(p + sl, end);
            assert_int_equal(*p++, 0x0a);
            size_t vl = pb_len(&p, end);
            assert_ptr_equal(p + vl, end);
            /* Value.tag (1, string) */
            const char *tag = i == 3 ? long_tag + 1 : i == 5 ? "a" : "train/loss";
            assert_int_equal(*p++, 0x0a);
            size_t tl = pb_len(&p, end);
            assert_int_equal(tl, strlen(tag));
            assert_memory_equal(p, tag, tl);
            p += tl;
            /* Value.simple_value (2, fixed32): the value as a float */
            assert_int_equal(*p++, 0x15);
            assert_true(end - p >= 4);
            float want = (float)values[i];
            uint32_t fb;
            memcpy(&fb, &want, 4);
            assert_int_equal(rd(p, 4), fb);
            p += 4;
        }
        assert_ptr_equal(p, end); /* nothing else in the record */
        off += 12 + len + 4;
        rec++;
    }
    assert_int_equal(off, n);
    assert_int_equal(rec, 1 + N);
    free(b);
    th_rmtree(dir);
}

/* ---- safetensors: the checksum covers what each tensor entry says ------------------------------
 * A header damaged into another valid header of the same length (another shape of the same count,
 * another dtype of the same size, two tensors' offsets swapped, a character moved between two
 * metadata entries) reads the same data as different tensors: the checksum must refuse it. */

/* Replaces the first `from` in the file's header by `to` (same length). */
static void patch_header(const char *path, const char *from, const char *to)
{
    size_t n;
    uint8_t *raw = th_read(path, &n);
    size_t hl = (size_t)rd(raw, 8);
    assert_int_equal(strlen(from), strlen(to));
    uint8_t *at = memmem(raw + 8, hl, from, strlen(from));
    if (!at) fail_msg("'%s' not in the header %.*s", from, (int)hl, (const char *)raw + 8);
    memcpy(at, to, strlen(to));
    th_write(path, raw, n);
    free(raw);
}

static void test_safetensors_checksum_covers_entries(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    uint8_t pad[16] = {0}; /* puts the next offsets at two digits each: [16,32] and [32,48] */
    float a[4] = {1, 2, 3, 4}, bb[4] = {5, 6, 7, 8}, m23[6] = {1, 2, 3, 4, 5, 6};
    int64_t c[2] = {1, 2};
    vx_tensor t[5] = {{"pad", VX_DT_U8, 1, {16}, pad},
                      {"a", VX_DT_F32, 1, {4}, a},
                      {"b", VX_DT_F32, 1, {4}, bb},
                      {"m", VX_DT_F32, 2, {2, 3}, m23},
                      {"c", VX_DT_I64, 1, {2}, c}};
    vx_meta md[2] = {{"k", "ab"}, {"z", "v"}};
    const char *damage[][2] = {
        {"[2,3]", "[3,2]"},     /* a shape, same count */
        {"\"I64\"", "\"F64\""}, /* a dtype, same size */
        {"[16,32]", "[32,48]"}, /* with the next: offsets swapped */
        {"\"k\":\"ab\",\"z\":\"v\"", "\"k\":\"a\",\"bz\":\"v\""}, /* a character moved */
    };
    for (int i = 0; i < 4; i++) {
        vx_err e;
        assert_int_equal(vx_safetensors_write(path, t, 5, md, 2, &e), VX_OK);
        vx_safetensors s;
        assert_int_equal(vx_safetensors_read(path, &s, &e), VX_OK);
        vx_safetensors_free(&s);
        if (i == 2) patch_header(path, "[32,48]", "[16,32]"); /* b's first: then a's is */
        patch_header(path, damage[i][0], damage[i][1]);       /* the first match */
        vx_status st = vx_safetensors_read(path, &s, &e);
        if (st == VX_OK) {
            vx_safetensors_free(&s);
            fail_msg("damage %d ('%s' to '%s') accepted", i, damage[i][0], damage[i][1]);
        }
        if (!strstr(e.msg, "checksum mismatch")) fail_msg("damage %d: %s", i, e.msg);
    }
    th_rmtree(dir);
}

/* An entry's shape must account for its offsets exactly, with at most 4 dimensions; an empty
 * tensor (a 0 in its shape, no bytes) is a tensor like any other. */
static void test_safetensors_entry_shapes(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    struct {
        const char *json;
        size_t data;
        const char *want; /* in the message; NULL: accepted */
    } cases[] = {
        {"{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,2],\"data_offsets\":[0,2]}}", 2, NULL},
        {"{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,2]}}", 2,
         "bad tensor entry"},
        /* a shape of 1 float over 8 bytes: the other 4 would be nobody's, or another's too */
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "data_offsets do not fit"},
        {"{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t hl = strlen(cases[i].json);
        uint8_t *buf = calloc(8 + hl + cases[i].data + 1, 1);
        for (int k = 0; k < 8; k++) buf[k] = (uint8_t)((uint64_t)hl >> (8 * k));
        memcpy(buf + 8, cases[i].json, hl);
        th_write(path, buf, 8 + hl + cases[i].data);
        free(buf);
        vx_safetensors s;
        vx_err e;
        vx_status st = vx_safetensors_read(path, &s, &e);
        if (!st) vx_safetensors_free(&s);
        if (!cases[i].want && st) fail_msg("case %zu refused: %s", i, e.msg);
        if (cases[i].want && (!st || !strstr(e.msg, cases[i].want)))
            fail_msg("case %zu: want '%s', got %s", i, cases[i].want, st ? e.msg : "accepted");
    }
    /* the writer's empty tensor reads back, and the one after it is where it should be */
    float w[2] = {1.5f, -2};
    vx_tensor t[3] = {{"before", VX_DT_F32, 1, {2}, w},
                      {"empty", VX_DT_F32, 2, {3, 0}, NULL},
                      {"after", VX_DT_F32, 1, {2}, w}};
    vx_err e;
    assert_int_equal(vx_safetensors_write(path, t, 3, NULL, 0, &e), VX_OK);
    vx_safetensors s;
    if (vx_safetensors_read(path, &s, &e)) fail_msg("%s", e.msg);
    const vx_tensor *x = vx_safetensors_get(&s, "empty", VX_DT_F32, 0, &e);
    assert_non_null(x);
    assert_int_equal(x->ndim, 2);
    assert_int_equal(x->shape[0], 3);
    assert_int_equal(x->shape[1], 0);
    x = vx_safetensors_get(&s, "after", VX_DT_F32, 2, &e);
    assert_non_null(x);
    assert_memory_equal(x->data, w, sizeof w);
    /* a tensor of the right count but another dtype of the same size is not the one asked for */
    assert_null(vx_safetensors_get(&s, "after", VX_DT_U8, 2, &e));
    vx_safetensors_free(&s);
    int64_t k[3] = {1, 2, 3};
    vx_tensor ti = {"k", VX_DT_I64, 1, {3}, k};
    assert_int_equal(vx_safetensors_write(path, &ti, 1, NULL, 0, &e), VX_OK);
    if (vx_safetensors_read(path, &s, &e)) fail_msg("%s", e.msg);
    assert_null(vx_safetensors_get(&s, "k", VX_DT_F64, 3, &e));
    assert_non_null(strstr(e.msg, "is I64 with 3 elements; expected F64 with 3"));
    assert_non_null(vx_safetensors_get(&s, "k", VX_DT_I64, 3, &e));
    vx_safetensors_free(&s);
    th_rmtree(dir);
}

/* A metadata value or key that does not fit vx_meta with its NUL is refused, never cut short
 * (a cut config would resume a run with other settings); one that just fits reads back whole. */
static void test_safetensors_meta_sizes(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    const size_t vcap = sizeof(((vx_meta *)0)->value), kcap = sizeof(((vx_meta *)0)->key);
    char *json = malloc(vcap + kcap + 64);
    for (int i = 0; i < 4; i++) {
        int too_long = i & 1, on_key = i >> 1;
        size_t len = (on_key ? kcap : vcap) - 1 + (size_t)too_long;
        char *s = malloc(len + 1);
        memset(s, 'v', len);
        s[len] = '\0';
        snprintf(json, vcap + kcap + 64, "{\"__metadata__\":{\"%s\":\"%s\"}}", on_key ? s : "k",
                 on_key ? "v" : s);
        size_t hl = strlen(json);
        uint8_t *buf = malloc(8 + hl);
        for (int k = 0; k < 8; k++) buf[k] = (uint8_t)((uint64_t)hl >> (8 * k));
        memcpy(buf + 8, json, hl);
        th_write(path, buf, 8 + hl);
        free(buf);
        vx_safetensors st;
        vx_err e;
        vx_status r = vx_safetensors_read(path, &st, &e);
        if (too_long) {
            if (r == VX_OK) fail_msg("a %s of %zu bytes accepted", on_key ? "key" : "value", len);
            assert_non_null(strstr(e.msg, "too long"));
        } else {
            if (r) fail_msg("%s", e.msg);
            assert_string_equal(vx_safetensors_meta(&st, on_key ? s : "k"), on_key ? "v" : s);
            vx_safetensors_free(&st);
        }
        free(s);
    }
    free(json);
    th_rmtree(dir);
}

/* Whole numbers from the metadata: the bounds themselves are in range, anything past them or
 * with trailing characters is not. */
static void test_safetensors_meta_int(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    vx_meta m[4] = {{"lo", "1"}, {"hi", "100"}, {"tail", "12x"}, {"neg", "-7"}};
    vx_err e;
    assert_int_equal(vx_safetensors_write(path, NULL, 0, m, 4, &e), VX_OK);
    vx_safetensors s;
    if (vx_safetensors_read(path, &s, &e)) fail_msg("%s", e.msg);
    int64_t v = 0;
    assert_int_equal(vx_safetensors_meta_int(&s, "lo", 1, 100, &v, &e), VX_OK);
    assert_int_equal(v, 1);
    assert_int_equal(vx_safetensors_meta_int(&s, "hi", 1, 100, &v, &e), VX_OK);
    assert_int_equal(v, 100);
    assert_int_equal(vx_safetensors_meta_int(&s, "neg", -7, -7, &v, &e), VX_OK);
    assert_int_equal(v, -7);
    v = 55;
    assert_int_equal(vx_safetensors_meta_int(&s, "lo", 2, 100, &v, &e), VX_ERR_FORMAT);
    assert_int_equal(vx_safetensors_meta_int(&s, "hi", 1, 99, &v, &e), VX_ERR_FORMAT);
    assert_int_equal(vx_safetensors_meta_int(&s, "tail", 0, 100, &v, &e), VX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "'12x' is not a whole number in 0..100"));
    assert_int_equal(vx_safetensors_meta_int(&s, "none", 0, 100, &v, &e), VX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "missing"));
    assert_int_equal(v, 55); /* refusals leave it alone */
    vx_safetensors_free(&s);
    th_rmtree(dir);
}

/* ---- metrics CSV: precision, a header of the same length, a single column ----------------------
 */

static void test_csv_log_precision_header_single_column(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.csv", dir);
    vx_err e;
    vx_csv_log w;
    /* values keep at least 9 significant digits: a float32 metric reads back as itself */
    const char *cols[2] = {"epoch", "loss"};
    assert_int_equal(vx_csv_log_open(&w, path, cols, 2, 0, &e), VX_OK);
    const double vals[] = {0.123456789, 98765.4321, -1.00000012, 3.14159274e-20};
    for (int i = 0; i < 4; i++) {
        double row[2] = {i + 1, vals[i]};
        assert_int_equal(vx_csv_log_row(&w, row, &e), VX_OK);
    }
    vx_csv_log_close(&w);
    size_t n;
    char *t = (char *)th_read(path, &n);
    char *p = memchr(t, '\n', n) + 1;
    for (int i = 0; i < 4; i++) {
        char *end;
        assert_int_equal(strtol(p, &end, 10), i + 1);
        assert_int_equal(*end, ',');
        double got = strtod(end + 1, &end);
        assert_int_equal(*end, '\n');
        if (fabs(got - vals[i]) > 5e-9 * fabs(vals[i]))
            fail_msg("%.17g written as %.17g", vals[i], got);
        p = end + 1;
    }
    free(t);
    /* another header of the same length is other columns too */
    const char *other[2] = {"epoch", "lose"};
    assert_int_equal(vx_csv_log_open(&w, path, other, 2, 1, &e), VX_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "other columns"));
    /* a log of the epoch alone resumes like any other (a row's number ends at its newline) */
    const char *one[1] = {"epoch"};
    th_write_str(path, "epoch\n1\n2\n3\n");
    assert_int_equal(vx_csv_log_open(&w, path, one, 1, 2, &e), VX_OK);
    double r[1] = {3};
    assert_int_equal(vx_csv_log_row(&w, r, &e), VX_OK);
    vx_csv_log_close(&w);
    t = (char *)th_read(path, &n);
    assert_int_equal(n, strlen("epoch\n1\n2\n3\n"));
    assert_memory_equal(t, "epoch\n1\n2\n3\n", n);
    free(t);
    th_rmtree(dir);
}

/* ---- report charts: the number formats, axis steps and thinning of svg.h ------------------------
 * Each expected value is worked out by hand from the header's contract. */

/* What `write` printed, as a string in buf (fmemopen). */
#define CAPTURE(buf, write)                                                                        \
    do {                                                                                           \
        memset(buf, 0, sizeof buf);                                                                \
        FILE *f_ = fmemopen(buf, sizeof buf - 1, "w");                                             \
        assert_non_null(f_);                                                                       \
        write;                                                                                     \
        assert_int_equal(fclose(f_), 0);                                                           \
    } while (0)

static void test_svg_formats_and_axes(void **state)
{
    (void)state;
    char b[256];
    /* a value that rounds to zero has no sign: "0.00", never "−0.00" */
    assert_string_equal(vx_fmt_num(b, sizeof b, -0.001, 2), "0.00");
    assert_string_equal(vx_fmt_num(b, sizeof b, -1234.5, 1), "−1,234.5");
    /* the step that shows every multiple exactly */
    assert_int_equal(vx_step_decimals(1), 0);
    assert_int_equal(vx_step_decimals(2.5), 1);
    assert_int_equal(vx_step_decimals(0.25), 2);
    assert_int_equal(vx_step_decimals(0.0005), 4);
    assert_int_equal(vx_step_decimals(0.00001), 5);
    /* 1, 2, 2.5 or 5 · 10^k: a raw step of exactly 2.5 is 2.5, not 5 */
    assert_true(vx_nice_step(12.5, 5) == 2.5);
    assert_true(vx_nice_step(10, 5) == 2);
    assert_true(vx_nice_step(30, 10) == 5);
    /* an empty range (lo == hi) is widened around its value, not left to a step of NaN */
    double lo = 5, hi = 5;
    double s = vx_nice_range(&lo, &hi, 5);
    assert_true(isfinite(s) && s > 0);
    assert_true(lo < 5 && hi > 5 && lo >= 4 && hi <= 6);
    /* money axes: a top of exactly $1M is in millions */
    assert_string_equal(vx_fmt_axis_money(b, sizeof b, 1e6, 5e5, 1e6), "$1M");
    assert_string_equal(vx_fmt_axis_money(b, sizeof b, 2.5e4, 5e3, 1e4), "$25k");
    /* HTML text: all five of & < > " ' */
    CAPTURE(b, vx_html_esc(f_, "a&<b>\"c'"));
    assert_string_equal(b, "a&amp;&lt;b&gt;&quot;c&#39;");
    /* whole-number ticks over [0, 10] every 2: the last, 10, included */
    char svg[4096];
    vx_plot p = {.l = 40, .t = 10, .w = 200, .h = 100, .x0 = 0, .x1 = 10, .y0 = 0, .y1 = 1};
    CAPTURE(svg, (p.f = f_, vx_plot_x_axis_int(&p, "epoch")));
    for (int x = 0; x <= 10; x += 2) {
        char lab[32];
        snprintf(lab, sizeof lab, "\">%d</text>", x);
        if (!strstr(svg, lab)) fail_msg("no tick %d in %s", x, svg);
    }
    assert_null(strstr(svg, "\">12</text>"));
}

/* Thinning keeps the first point, the last, and strictly increasing indices (a flat series would
 * otherwise end early or repeat a point). */
static void test_svg_thin_keeps_ends(void **state)
{
    (void)state;
    enum { N = 10 * VX_PLOT_MAX_POINTS + 7 };
    double *y = calloc(N, sizeof *y); /* flat: every bucket's extremes are its first point */
    size_t *idx = calloc(VX_PLOT_MAX_POINTS + 2, sizeof *idx);
    for (int shape = 0; shape < 2; shape++) {
        for (size_t i = 0; i < N; i++) y[i] = shape ? (double)((i * 7919) % 1000) : 0;
        size_t k = vx_plot_thin(y, N, idx);
        assert_true(k >= 2 && k <= VX_PLOT_MAX_POINTS + 1);
        assert_int_equal(idx[0], 0);
        assert_int_equal(idx[k - 1], N - 1);
        for (size_t j = 1; j < k; j++)
            if (idx[j] <= idx[j - 1])
                fail_msg("shape %d: idx[%zu] = %zu after %zu", shape, j, idx[j], idx[j - 1]);
    }
    free(y);
    free(idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_known_answer),
        cmocka_unit_test(test_safetensors_roundtrip),
        cmocka_unit_test(test_tfevents_records),
        cmocka_unit_test(test_csv_log_append),
        cmocka_unit_test(test_yaml_flat),
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_tfevents_unique_exclusive),
        cmocka_unit_test(test_csv_log_resume_drops_rows_after_checkpoint),
        cmocka_unit_test(test_yaml_duplicate_keys),
        cmocka_unit_test(test_settings_renamed_key_twice),
        cmocka_unit_test(test_yaml_lines_and_refusals),
        cmocka_unit_test(test_settings_refusals_leave_values),
        cmocka_unit_test(test_settings_roundtrip_nasty_strings),
        cmocka_unit_test(test_settings_long_values),
        cmocka_unit_test(test_settings_write_reports_errors),
        cmocka_unit_test(test_settings_doubles_read_back_exactly),
        cmocka_unit_test(test_tfevents_event_fields),
        cmocka_unit_test(test_safetensors_checksum_covers_entries),
        cmocka_unit_test(test_safetensors_entry_shapes),
        cmocka_unit_test(test_safetensors_meta_sizes),
        cmocka_unit_test(test_safetensors_meta_int),
        cmocka_unit_test(test_csv_log_precision_header_single_column),
        cmocka_unit_test(test_svg_formats_and_axes),
        cmocka_unit_test(test_svg_thin_keeps_ends),
    };
    return cmocka_run_group_tests_name("io", tests, NULL, NULL);
}

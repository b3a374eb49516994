/* test_train.c — configuration (keys, ranges, YAML with line numbers, round trip), a small
 * training run's folder, exact resume, and the evaluation's baselines computed by hand. */
#include "helpers.h"
#include "vixen/dqn.h"
#include "vixen/io.h"
#include "vixen/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static vx_dqn_settings *dqn_of(vx_train_cfg *c) { return vx_train_algo_settings(c, "dqn"); }

static void tiny(vx_train_cfg *c, const char *dir)
{
    vx_train_cfg_default(c);
    vx_dqn_settings *d = dqn_of(c);
    c->synth_days = 12;
    c->env.episode_len = 60;
    c->envs = 16;
    c->steps_per_epoch = 40;
    d->learner.batch = 32;
    d->trunk[0] = d->trunk[1] = 32;
    d->head_hidden = 16;
    c->epochs = 4;
    d->warmup = 200;
    c->eval_every = 2;
    c->checkpoint_every = 2;
    d->replay_capacity = 5000;
    snprintf(c->run_dir, sizeof c->run_dir, "%s", dir);
}

static void test_config_keys(void **state)
{
    (void)state;
    vx_train_cfg c;
    vx_train_cfg_default(&c);
    vx_dqn_settings *d = dqn_of(&c);
    vx_run_params run;
    vx_train_run_params(&c, &run);
    vx_err e;
    assert_int_equal(vx_dqn_updates_per_epoch(d, &run), 341); /* 128 · 100 / 64 · 1.705 */
    assert_int_equal(vx_train_cfg_set(&c, "dqn.lr", "3e-4", NULL, &e), VX_OK);
    assert_true(d->learner.adam.lr == 3e-4);
    assert_int_equal(vx_train_cfg_set(&c, "dqn.trunk", "128, 64,32", NULL, &e), VX_OK);
    assert_int_equal(d->n_trunk, 3);
    assert_int_equal(d->trunk[2], 32);
    /* a key's name from before the algorithm seam is read as its new one */
    assert_int_equal(vx_train_cfg_set(&c, "net.trunk", "16", NULL, &e), VX_OK);
    assert_int_equal(d->n_trunk, 1);
    assert_int_equal(vx_train_cfg_set(&c, "train.warmup", "77", NULL, &e), VX_OK);
    assert_int_equal(d->warmup, 77);
    assert_int_equal(vx_train_cfg_set(&c, "dqn.loss", "c51", NULL, &e), VX_OK);
    assert_int_equal(d->learner.loss, VX_LOSS_C51);
    assert_int_equal(vx_train_cfg_set(&c, "replay.kind", "rank", NULL, &e), VX_OK);
    assert_int_equal(d->replay_kind, VX_REPLAY_RANK);
    assert_int_equal(vx_train_cfg_set(&c, "train.algo", "dqn", NULL, &e), VX_OK);
    assert_int_equal(vx_train_cfg_set(&c, "train.algo", "sarsa", NULL, &e), VX_ERR_ARG);
    assert_ptr_equal(vx_train_algo(&c), &vx_algo_dqn);
    assert_int_equal(vx_train_cfg_set(&c, "data.files", "a.csv,b.dbn", NULL, &e), VX_OK);
    assert_int_equal(c.n_files, 2);
    assert_string_equal(c.files[1], "b.dbn");
    assert_int_equal(vx_train_cfg_set(&c, "dqn.lrr", "1", NULL, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "unknown key 'dqn.lrr'"));
    assert_int_equal(vx_train_cfg_set(&c, "dqn.gamma", "1.5", NULL, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "dqn.gamma: 1.5 is outside 0 .. 1"));
    assert_int_equal(vx_train_cfg_set(&c, "train.envs", "2.5", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_train_cfg_set(&c, "train.envs", "ten", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_train_cfg_set(&c, "dqn.loss", "hinge", NULL, &e), VX_ERR_ARG);
    d->eps_end = 0.9, d->eps_start = 0.5;
    assert_int_equal(vx_train_cfg_check(&c, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "dqn.eps_end"));
    /* the replay ratio cannot make more updates per epoch than an int holds */
    d->eps_end = 0.05, d->eps_start = 1;
    d->learner.batch = 1, d->replay_ratio = 1e6;
    assert_int_equal(vx_train_cfg_check(&c, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "updates per epoch"));
}

static void test_config_yaml_roundtrip_and_errors(void **state)
{
    (void)state;
    char dir[64], p[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/c.yaml", dir);
    th_write_str(p, "dqn:\n  lr: 1.0e-3\n  loss: mse\ntrain:\n  epochs: 7\n  envs: 3O\n");
    vx_train_cfg c;
    vx_train_cfg_default(&c);
    vx_err e;
    assert_int_equal(vx_train_cfg_load(&c, p, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "c.yaml: line 6: train.envs: '3O' is not a number"));
    th_write_str(p, "dqn:\n  lr: 1.0e-3\nnet:\n  widths: [1]\n");
    assert_int_equal(vx_train_cfg_load(&c, p, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "line 4: unknown key 'net.widths'"));
    vx_train_cfg_default(&c); /* the failed loads above set keys before the bad one */
    /* write → read gives the same text again */
    vx_train_cfg_default(&c);
    vx_train_cfg_set(&c, "data.files", "x y.csv,z.csv", NULL, &e);
    vx_train_cfg_set(&c, "dqn.lr", "0.000123", NULL, &e);
    vx_train_cfg_set(&c, "dqn.trunk", "64,32", NULL, &e);
    vx_train_cfg_set(&c, "data.instrument", "ES\"H1", NULL, &e);
    FILE *f = fopen(p, "w");
    vx_train_cfg_write(&c, f);
    fclose(f);
    vx_train_cfg d;
    vx_train_cfg_default(&d);
    assert_int_equal(vx_train_cfg_load(&d, p, &e), VX_OK);
    char a[8192] = {0}, b[8192] = {0};
    FILE *fa = fmemopen(a, sizeof a - 1, "w"), *fb = fmemopen(b, sizeof b - 1, "w");
    vx_train_cfg_write(&c, fa);
    vx_train_cfg_write(&d, fb);
    fclose(fa), fclose(fb);
    assert_string_equal(a, b);
    assert_true(((vx_dqn_settings *)vx_train_algo_settings(&d, "dqn"))->learner.adam.lr ==
                0.000123);
    assert_string_equal(d.files[0], "x y.csv");
    assert_string_equal(d.instrument, "ES\"H1");
    th_rmtree(dir);
}

static void read_metrics(const char *dir, char *buf, size_t n)
{
    char p[256];
    snprintf(p, sizeof p, "%s/metrics.csv", dir);
    size_t len;
    char *d = (char *)th_read(p, &len);
    assert_true(len < n);
    memcpy(buf, d, len);
    buf[len] = 0;
    free(d);
}

/* the metrics without the last three (timing) columns */
static void strip_timing(char *csv)
{
    char out[16384];
    size_t k = 0;
    for (char *line = strtok(csv, "\n"); line; line = strtok(NULL, "\n")) {
        int commas = 0, stop = (int)strlen(line);
        for (int i = 0; line[i]; i++)
            if (line[i] == ',' && ++commas == 17) stop = i;
        k += (size_t)snprintf(out + k, sizeof out - k, "%.*s\n", stop, line);
    }
    strcpy(csv, out);
}

static int stop_at_2(const vx_epoch_report *r, void *ctx)
{
    (void)ctx;
    return r->epoch == 2;
}

static void test_run_folder_and_exact_resume(void **state)
{
    (void)state;
    char a[64], b[64];
    th_tmpdir(a, sizeof a);
    th_tmpdir(b, sizeof b);
    vx_train_cfg c;
    vx_err e;
    vx_eval_report ra, rb;
    tiny(&c, a);
    assert_int_equal(vx_train_run(&c, NULL, 0, NULL, NULL, &ra, &e), VX_OK);
    /* the checkpoint names its replay file, of its own epoch; no other is left beside it */
    const char *files[] = {"config.yaml",
                           "metrics.csv",
                           "eval.json",
                           "eval.txt",
                           "checkpoint/latest.safetensors",
                           "checkpoint/replay-00000004.bin"};
    for (int i = 0; i < 6; i++) {
        char p[256];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", a, files[i]);
        if (stat(p, &sb) != 0) fail_msg("missing %s", p);
    }
    assert_int_equal(th_count_files(a), 6); /* those, the checkpoint folder, the events file */
    char ck[128];
    snprintf(ck, sizeof ck, "%s/checkpoint", a);
    assert_int_equal(th_count_files(ck), 2);
    /* a second fresh run into the same folder is refused */
    assert_int_equal(vx_train_run(&c, NULL, 0, NULL, NULL, NULL, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "already holds a run"));
    /* B: interrupted after 2 of 4 epochs, then resumed */
    tiny(&c, b);
    assert_int_equal(vx_train_run(&c, NULL, 0, stop_at_2, NULL, NULL, &e), VX_OK);
    char pm[256];
    snprintf(pm, sizeof pm, "%s/checkpoint/latest.safetensors", b);
    vx_safetensors mid;
    assert_int_equal(vx_safetensors_read(pm, &mid, &e), VX_OK);
    assert_string_equal(vx_safetensors_meta(&mid, "epoch"), "2");
    vx_safetensors_free(&mid);
    assert_int_equal(vx_train_run(&c, NULL, 1, NULL, NULL, &rb, &e), VX_OK);
    /* the same weights, bit for bit, and the same metrics apart from timings */
    char pa[256], pb[256];
    snprintf(pa, sizeof pa, "%s/checkpoint/latest.safetensors", a);
    snprintf(pb, sizeof pb, "%s/checkpoint/latest.safetensors", b);
    vx_safetensors sa, sb;
    assert_int_equal(vx_safetensors_read(pa, &sa, &e), VX_OK);
    assert_int_equal(vx_safetensors_read(pb, &sb, &e), VX_OK);
    assert_int_equal(sa.n, sb.n);
    for (size_t i = 0; i < sa.n; i++) {
        const vx_tensor *x = &sa.tensors[i];
        size_t cnt = 1;
        for (int d = 0; d < x->ndim; d++) cnt *= (size_t)x->shape[d];
        const vx_tensor *y = vx_safetensors_get(&sb, x->name, x->dtype, cnt, &e);
        assert_non_null(y);
        size_t bytes = cnt * (x->dtype == VX_DT_U8 ? 1 : x->dtype == VX_DT_F32 ? 4 : 8);
        if (memcmp(x->data, y->data, bytes) != 0)
            fail_msg("tensor %s differs after resume", x->name);
    }
    assert_string_equal(vx_safetensors_meta(&sa, "updates"), vx_safetensors_meta(&sb, "updates"));
    const char *cfg_text = vx_safetensors_meta(&sa, "config");
    assert_non_null(cfg_text);
    assert_non_null(strstr(cfg_text, "  batch: 32\n"));
    vx_safetensors_free(&sa);
    vx_safetensors_free(&sb);
    static char ma[16384], mb[16384];
    read_metrics(a, ma, sizeof ma);
    read_metrics(b, mb, sizeof mb);
    strip_timing(ma);
    strip_timing(mb);
    assert_string_equal(ma, mb);
    assert_true(ra.agent.sharpe == rb.agent.sharpe);
    th_rmtree(a);
    th_rmtree(b);
}

static void test_eval_baselines_by_hand(void **state)
{
    (void)state;
    vx_train_cfg c;
    tiny(&c, "unused");
    vx_market m;
    vx_err e;
    assert_int_equal(vx_train_open_market(&c, &m, &e), VX_OK);
    vx_eval_report r;
    assert_int_equal(vx_eval_run(&m, &c.env, NULL, &r, &e), VX_OK);
    assert_true(r.flat.total_pnl == 0 && r.flat.sharpe == 0 && r.flat.trades == 0);
    assert_true(r.agent.bars == 0);
    /* buy and hold: each episode buys 4 at the next open + 1 tick, pays 4 × 2.25, and is marked
     * at the close of its last bar */
    int64_t lo, hi, tlo, thi;
    vx_env_split_rows(&m, c.env.eval_fraction, VX_SPLIT_EVAL, &lo, &hi);
    vx_env_split_rows(&m, c.env.eval_fraction, VX_SPLIT_TRAIN, &tlo, &thi);
    int L = c.env.episode_len;
    assert_int_equal(r.episodes, (size_t)((hi - lo - 2) / L));
    double want = 0;
    const double *o = m.open + m.first_bar, *cl = m.close + m.first_bar;
    for (size_t k = 0; k < r.episodes; k++) {
        int64_t s = lo + (int64_t)k * L;
        want += 4 * 50 * (cl[s + L] - (o[s + 1] + 0.25)) - 4 * 2.25;
    }
    /* rewards are float32 per bar: allow their rounding */
    assert_true(fabs(r.buy_hold.total_pnl - want) <
                1e-5 * vx_env_reward_scale(&m, tlo, thi, 50, 4) * r.buy_hold.bars);
    assert_true(r.buy_hold.trades == (double)r.episodes);
    assert_true(r.buy_hold.turnover * r.buy_hold.bars == 4.0 * (double)r.episodes);
    double years = (double)(m.ts[m.n_bars - 1] - m.ts[0]) / (365.25 * 86400e9);
    assert_true(fabs(r.bars_per_year - (double)(m.n_bars - 1) / years) < 1e-6);
    vx_market_close(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_keys),
        cmocka_unit_test(test_config_yaml_roundtrip_and_errors),
        cmocka_unit_test(test_run_folder_and_exact_resume),
        cmocka_unit_test(test_eval_baselines_by_hand),
    };
    return cmocka_run_group_tests_name("train", tests, NULL, NULL);
}

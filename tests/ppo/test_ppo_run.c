/* test_ppo_run.c — PPO's learner as the run drives it: a minibatch's loss with its advantages
 * normalised (against float64 written here), a short run that stops, resumes and ends with
 * exactly the weights of an uninterrupted one, and that run's checkpoint damaged (with a matching
 * checksum) refused on resume, naming the tensor or counter. */
#include "ac_f64.h"
#include "helpers.h"
#include "ppo/ppo_backend.h"
#include "vixen/io.h"
#include "vixen/ppo.h"
#include "vixen/ppo_math.h"
#include "vixen/train.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Advantages with mean 5 and spread 2: normalised over the minibatch by their mean and sample
 * standard deviation they become O(1); a learner that skips the normalisation (or uses the
 * population sd, or normalises by the whole rollout's) computes another loss. The expected loss
 * is the float64 network's outputs through the per-sample loss, with the normalisation written
 * out here. */
void test_minibatch_normalises_advantages(void **state)
{
    (void)state;
    vx_ac_cfg cfg;
    vx_ac_cfg_default(&cfg);
    cfg.in_dim = VX_OBS_DIM, cfg.trunk[0] = 16, cfg.trunk[1] = 8;
    vx_ac_layout L;
    vx_err e;
    assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
    enum { M = 6, D = VX_OBS_DIM };
    float *p = malloc(L.n_params * 4), *g = calloc(L.n_params, 4), obs[M * D];
    double *pd = malloc(L.n_params * 8), xd[M * D];
    vx_ac_init(&L, 9, p);
    vx_rng r = vx_rng_make(4, 0, 0);
    for (size_t i = 0; i < L.n_params; i++) p[i] += 0.2f * (float)vx_rng_normal(&r);
    for (size_t i = 0; i < L.n_params; i++) pd[i] = p[i];
    for (int i = 0; i < M * D; i++) xd[i] = obs[i] = (float)vx_rng_normal(&r);
    float logp[M], val[M], adv[M] = {3, 5, 7, 4, 6, 5}, ret[M];
    int32_t act[M * 3];
    double z[M * VX_PPO_LOGITS], v[M];
    ac64_forward(&L, pd, xd, M, z, v);
    for (int j = 0; j < M; j++) {
        for (int b = 0; b < 3; b++) act[3 * j + b] = (int32_t)vx_rng_below(&r, vx_ppo_branch_n(b));
        logp[j] = (float)(vx_ppo_logp_entropy(z + j * VX_PPO_LOGITS, act + 3 * j, NULL) - 0.1 * j);
        val[j] = (float)v[j] - 0.3f, ret[j] = (float)v[j] + 1;
    }
    vx_ppo_settings s;
    vx_ppo_settings_default(&s);
    vx_ac_ws ws;
    assert_int_equal(vx_ac_ws_create(&L, M, &ws, &e), VX_OK);
    float dz[M * VX_PPO_LOGITS], dv[M];
    ppo_minibatch mb = {M, obs, act, logp, val, adv, ret};
    ppo_minibatch_stats out;
    vx_ppo_minibatch(&L, p, &s, &mb, &ws, dz, dv, g, &out);
    /* by hand: mean 5, sample sd sqrt(10 / 5) */
    double sd = sqrt(10.0 / 5.0), want = 0;
    vx_ppo_loss_cfg lc = {s.clip, s.clip_value, s.vf_coef, s.ent_coef};
    for (int j = 0; j < M; j++) {
        double gz[VX_PPO_LOGITS], gv;
        want += vx_ppo_loss(&lc, z + j * VX_PPO_LOGITS, v[j], act + 3 * j, logp[j], val[j],
                            (adv[j] - 5.0) / (sd + 1e-8), ret[j], 1.0 / M, gz, &gv, NULL) /
                M;
    }
    printf("minibatch loss %.9f, float64 with normalised advantages %.9f\n", out.loss, want);
    assert_true(fabs(out.loss - want) < 1e-5 * (1 + fabs(want)));
    vx_ac_ws_free(&ws);
    free(p), free(g), free(pd);
}

static int stop_at(const vx_epoch_report *r, void *ctx) { return r->epoch == *(const int *)ctx; }

static void small(vx_train_cfg *c, const char *dir)
{
    vx_train_cfg_default(c);
    c->algo = 1; /* ppo */
    assert_ptr_equal(vx_train_algo(c), &vx_algo_ppo);
    vx_ppo_settings *s = vx_train_algo_settings(c, "ppo");
    c->synth_days = 12, c->env.episode_len = 60;
    c->envs = 16, c->steps_per_epoch = 40, c->epochs = 4, c->eval_every = 2;
    c->checkpoint_every = 2;
    s->minibatches = 4, s->update_epochs = 2;
    s->trunk[0] = s->trunk[1] = 32;
    snprintf(c->run_dir, sizeof c->run_dir, "%s", dir);
}

/* Writes the checkpoint at `path` again with damage `k` (0: none), through the safetensors
 * writer, so its data checksum matches: only the content checks can refuse it. */
static void damage_ckpt(const char *path, int k)
{
    vx_safetensors st;
    vx_err e;
    assert_int_equal(vx_safetensors_read(path, &st, &e), VX_OK);
    const char *tensor[] = {NULL, "env.state", "obs.var", NULL, "env.episode_return", "obs.count"};
    for (size_t i = 0; k && tensor[k] && i < st.n; i++) {
        if (strcmp(st.tensors[i].name, tensor[k]) != 0) continue;
        uint8_t *x = (uint8_t *)st.tensors[i].data; /* points into st.file, which is ours */
        if (k == 1) {                               /* environment 3's bar index */
            int64_t row = (int64_t)1e12;
            memcpy(x + 3 * sizeof(vx_env_state) + offsetof(vx_env_state, row), &row, 8);
        } else {
            double v = k == 2 ? -0.5 : k == 4 ? NAN : -1;
            memcpy(x + (k == 2 ? 4 * 8 : 0), &v, 8);
        }
    }
    th_safetensors_rewrite(&st, k == 3 ? "iterations" : NULL, "two");
}

/* The run of `c` stopped with a checkpoint at `path`: each damage refused on resume, naming the
 * file and the tensor or counter (a bar index of 1e12 would otherwise read far past the market),
 * and the checkpoint written back unchanged still resumes. */
static void resume_refuses_damage(const vx_train_cfg *c, const char *path)
{
    size_t n;
    uint8_t *orig = th_read(path, &n);
    const char *want[][2] = {{NULL, NULL},
                             {"env.state", "row 3 (environment 3), row: bar 1000000000000"},
                             {"obs.var", "element 4 is -0.5"},
                             {"iterations", "'two'"},
                             {"env.episode_return", "element 0 is nan"},
                             {"obs.count", "element 0 is -1"}};
    vx_err e;
    for (int k = 1; k < 6; k++) {
        th_write(path, orig, n);
        damage_ckpt(path, k);
        vx_err_clear(&e);
        vx_status st = vx_train_run(c, NULL, 1, NULL, NULL, NULL, &e);
        if (st != VX_ERR_FORMAT || !strstr(e.msg, "latest.safetensors") ||
            !strstr(e.msg, want[k][0]) || !strstr(e.msg, want[k][1]))
            fail_msg("damage %d: status %d, '%s'", k, (int)st, e.msg);
    }
    th_write(path, orig, n);
    damage_ckpt(path, 0);
    free(orig);
}

/* 4 epochs straight against 2, a stop, and a resume: the same weights, Adam moments,
 * observation statistics and counters, bit for bit — after that checkpoint, damaged in turn,
 * was refused by resumes that changed nothing. */
void test_ppo_run_and_exact_resume(void **state)
{
    (void)state;
    char a[64], b[64];
    th_tmpdir(a, sizeof a);
    th_tmpdir(b, sizeof b);
    vx_train_cfg c;
    vx_err e;
    vx_eval_report ra, rb;
    small(&c, a);
    assert_int_equal(vx_train_run(&c, NULL, 0, NULL, NULL, &ra, &e), VX_OK);
    small(&c, b);
    assert_int_equal(vx_train_run(&c, NULL, 0, stop_at, &(int){2}, NULL, &e), VX_ERR_STOPPED);
    char ck[128];
    snprintf(ck, sizeof ck, "%s/checkpoint/latest.safetensors", b);
    resume_refuses_damage(&c, ck); /* and leaves it as it was */
    assert_int_equal(vx_train_run(&c, NULL, 1, NULL, NULL, &rb, &e), VX_OK);
    char pa[128], pb[128];
    snprintf(pa, sizeof pa, "%s/checkpoint/latest.safetensors", a);
    snprintf(pb, sizeof pb, "%s/checkpoint/latest.safetensors", b);
    vx_safetensors sa, sb;
    assert_int_equal(vx_safetensors_read(pa, &sa, &e), VX_OK);
    assert_int_equal(vx_safetensors_read(pb, &sb, &e), VX_OK);
    assert_string_equal(vx_safetensors_meta(&sa, "algo"), "ppo");
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
    const char *keys[] = {"updates", "adam_t", "act_step", "iterations"};
    for (int k = 0; k < 4; k++)
        assert_string_equal(vx_safetensors_meta(&sa, keys[k]), vx_safetensors_meta(&sb, keys[k]));
    assert_string_equal(vx_safetensors_meta(&sa, "updates"), "32"); /* 4 × 2 epochs × 4 */
    assert_true(ra.row[VX_EVAL_AGENT].present && ra.row[VX_EVAL_MOMENTUM].present);
    assert_true(ra.row[VX_EVAL_AGENT].sharpe == rb.row[VX_EVAL_AGENT].sharpe);
    vx_safetensors_free(&sa);
    vx_safetensors_free(&sb);
    vx_eval_report_free(&ra);
    vx_eval_report_free(&rb);
    th_rmtree(a);
    th_rmtree(b);
}

/* test_ppo_run.c — PPO's learner as the run drives it: a minibatch's loss with its advantages
 * normalised (against float64 written here), a short run that stops, resumes and ends with
 * exactly the weights of an uninterrupted one, and that run's checkpoint damaged (with a matching
 * checksum) refused on resume, naming the tensor or counter; two iterations of the CPU backend
 * against a replica written here (and the target-KL stop), the learning-rate schedule, the greedy
 * policy past one internal batch, and the observation normaliser by hand; the `ppo.*` keys, their
 * ranges and defaults, the rollout sizes refused, and the algorithm's metric columns, greedy
 * policy and checkpoint state against the backend driven alone. */
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
 * out here; so are the minibatch's statistics (the means of pg, v, entropy, approximate KL and the
 * clipped fraction) and its gradient (the samples' dlogits and dvalue at scale 1/M, backpropagated
 * in float64): a sum reported as a mean, or a gradient of the summed loss, differs. */
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
    /* the statistics (means over the minibatch) and the gradient of the mean loss as well:
     * dlogits and dvalue of each sample at scale 1/M, backpropagated in float64 */
    double dl[M * VX_PPO_LOGITS], dvd[M], stat[5] = {0}, *g64 = calloc(L.n_params, 8);
    for (int j = 0; j < M; j++) {
        vx_ppo_loss_out o;
        want += vx_ppo_loss(&lc, z + j * VX_PPO_LOGITS, v[j], act + 3 * j, logp[j], val[j],
                            (adv[j] - 5.0) / (sd + 1e-8), ret[j], 1.0 / M, dl + j * VX_PPO_LOGITS,
                            dvd + j, &o) /
                M;
        stat[0] += o.pg / M, stat[1] += o.v / M, stat[2] += o.entropy / M;
        stat[3] += o.approx_kl / M, stat[4] += o.clipped / (double)M;
    }
    printf("minibatch loss %.9f, float64 with normalised advantages %.9f\n", out.loss, want);
    assert_true(fabs(out.loss - want) < 1e-5 * (1 + fabs(want)));
    const double got[5] = {out.pg, out.v, out.entropy, out.approx_kl, out.clipfrac};
    for (int k = 0; k < 5; k++) assert_true(fabs(got[k] - stat[k]) < 1e-5 * (1 + fabs(stat[k])));
    assert_true(stat[4] > 0 && stat[4] < 1); /* ratios e^{0.1 j}: some inside the clip, some out */
    ac64_backward(&L, pd, xd, M, dl, dvd, g64);
    double gmax = 0, worst = 0;
    for (size_t i = 0; i < L.n_params; i++) gmax = fabs(g64[i]) > gmax ? fabs(g64[i]) : gmax;
    for (size_t i = 0; i < L.n_params; i++)
        worst = fabs(g[i] - g64[i]) > worst ? fabs(g[i] - g64[i]) : worst;
    printf("minibatch gradient: largest %.3g, largest difference from float64 %.3g\n", gmax, worst);
    assert_true(worst <= 1e-4 * gmax);
    /* ppo.norm_adv = 0: the raw advantages (3…7, far from mean 0 and sd 1), whose float64 loss
     * another from a backend that normalised them anyway */
    s.norm_adv = 0;
    vx_ppo_minibatch(&L, p, &s, &mb, &ws, dz, dv, g, &out);
    double raw = 0;
    for (int j = 0; j < M; j++)
        raw += vx_ppo_loss(&lc, z + j * VX_PPO_LOGITS, v[j], act + 3 * j, logp[j], val[j], adv[j],
                           ret[j], 1.0 / M, dl, dvd, NULL) /
               M;
    assert_true(fabs(out.loss - raw) < 1e-5 * (1 + fabs(raw)));
    assert_true(fabs(raw - want) > 1e-3 * (1 + fabs(want)));
    free(g64);
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
    const char *tensor[] = {NULL,        "env.state",         "obs.var", NULL, "env.episode_return",
                            "obs.count", "adam.v.pi.0.weight"};
    for (size_t i = 0; k && tensor[k] && i < st.n; i++) {
        if (strcmp(st.tensors[i].name, tensor[k]) != 0) continue;
        uint8_t *x = (uint8_t *)st.tensors[i].data; /* points into st.file, which is ours */
        if (k == 1) {                               /* environment 3's bar index */
            int64_t row = (int64_t)1e12;
            memcpy(x + 3 * sizeof(vx_env_state) + offsetof(vx_env_state, row), &row, 8);
        } else if (k == 6) { /* a second moment of Adam's: it goes under a square root */
            float v = -1;
            memcpy(x, &v, 4);
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
                             {"obs.count", "element 0 is -1"},
                             {"adam.v.pi.0.weight", "element 0 is -1"}};
    vx_err e;
    for (int k = 1; k < 7; k++) {
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
    /* settings that make another network (the second trunk layer 16 wide, not 32) are refused by
     * the checkpoint's parameter count, named, before any tensor is read */
    vx_train_cfg other = c;
    ((vx_ppo_settings *)vx_train_algo_settings(&other, "ppo"))->trunk[1] = 16;
    vx_err_clear(&e);
    assert_int_equal(vx_train_run(&other, NULL, 1, NULL, NULL, NULL, &e), VX_ERR_FORMAT);
    if (!strstr(e.msg, "latest.safetensors") || !strstr(e.msg, "params") ||
        !strstr(e.msg, "(padding included), but these settings make one of"))
        fail_msg("other shapes: '%s'", e.msg);
    /* another number of environments: refused by the environments' state, and the message
     * names the file read (latest), not the best checkpoint beside it */
    other = c;
    other.envs = c.envs / 2;
    vx_err_clear(&e);
    assert_int_not_equal(vx_train_run(&other, NULL, 1, NULL, NULL, NULL, &e), VX_OK);
    if (!strstr(e.msg, "latest.safetensors") || strstr(e.msg, "best.safetensors") ||
        !strstr(e.msg, "env.state"))
        fail_msg("other envs: '%s'", e.msg);
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

/* ---- iterations of the CPU backend against a replica written here --------------------------- */

/* The pieces the replica composes are each tested on their own (the forward pass against float64,
 * sampling by chi-square and by its Philox stream, the minibatch loss and gradient against
 * float64, Adam and the norm clip in test_nn); what is written out here is how the iterations
 * string them together: the rollout's normalisation with the statistics frozen for the
 * iteration, its Philox counters (acting steps since the start, not the step of the rollout),
 * the truncation bootstrap, GAE (in double, by the formula), returns = advantages + values, the
 * shuffles (stream PERM + it·epochs + k, keys then index), the clip at max_grad_norm, each
 * plan's learning rate with Adam's moments carried over, the target-KL stop on an epoch's mean
 * KL, the metrics' averages, explained variance, the episode returns, and the observation
 * statistics: the pooled mean and variance of the prior (count 1e-4, mean 0, variance 1) and
 * every rollout's raw observations so far. Two iterations, so the second normalises with
 * statistics the first changed and continues the counters. */
enum { IT_N = 4, IT_T = 12, IT_D = VX_OBS_DIM, IT_MAX = 2 };

typedef struct {
    vx_market mk;
    vx_ppo_settings s;
    vx_run_params run;
    vx_ac_layout L;
    float *p0;
} it_setup;

static void it_make(it_setup *u)
{
    vx_series ser = {0};
    vx_err e;
    th_synth(&ser, 20, 3, 0.1);
    assert_int_equal(vx_market_from_series(&ser, &u->mk, &e), VX_OK);
    vx_ppo_settings_default(&u->s);
    u->s.trunk[0] = u->s.trunk[1] = 16;
    u->s.minibatches = 4, u->s.update_epochs = 3;
    memset(&u->run, 0, sizeof u->run);
    u->run.envs = IT_N, u->run.steps_per_epoch = IT_T, u->run.epochs = 4, u->run.seed = 7;
    vx_ac_cfg net;
    vx_ppo_net_cfg(&u->s, &net);
    assert_int_equal(vx_ac_layout_make(&net, &u->L, &e), VX_OK);
    u->p0 = malloc(u->L.n_params * 4);
    vx_ac_init(&u->L, u->run.seed, u->p0);
}

static void it_done(it_setup *u)
{
    free(u->p0);
    vx_market_close(&u->mk);
}

static double it_drawdown = 0; /* > 0: episodes also end by termination (the drawdown limit) */
static vx_env *it_env(it_setup *u)
{
    vx_env_cfg ec;
    vx_env_cfg_default(&ec);
    ec.seed = 5;
    ec.episode_len = 5; /* truncations inside a rollout of 12 steps */
    if (it_drawdown > 0) ec.drawdown_limit = it_drawdown;
    vx_env *env;
    vx_err e;
    assert_int_equal(vx_env_create(&ec, &u->mk, VX_SPLIT_TRAIN, IT_N, NULL, &env, &e), VX_OK);
    return env;
}

typedef struct {
    float *params;
    double mean[IT_D], var[IT_D];
    ppo_result r[IT_MAX];
    double kl_epoch[IT_MAX][8]; /* replica only: each epoch's mean approximate KL */
    int truncations, clipped;
} it_out;

/* The backend's first `iters` iterations under plans {k, lr[k]}. */
static void it_backend(it_setup *u, int iters, const double *lr, it_out *o)
{
    vx_env *env = it_env(u);
    ppo_init in = {&u->s, &u->run, &u->L, NULL, env, u->p0};
    ppo_backend *b;
    ppo_state *st;
    vx_err e;
    assert_int_equal(vx_ppo_backend_cpu.create(&in, &b, &st, &e), VX_OK);
    int64_t updates = 0;
    for (int k = 0; k < iters; k++) {
        ppo_plan plan = {k, lr[k]};
        assert_int_equal(vx_ppo_backend_cpu.iteration(b, &plan, &o->r[k], &e), VX_OK);
        updates += o->r[k].updates;
    }
    o->params = malloc(u->L.n_params * 4);
    memcpy(o->params, st->params, u->L.n_params * 4);
    memcpy(o->mean, st->obs_mean, sizeof o->mean), memcpy(o->var, st->obs_var, sizeof o->var);
    assert_true(st->obs_count == 1e-4 + iters * IT_N * IT_T);
    assert_int_equal(st->updates, updates);
    assert_int_equal(st->act_step, iters * IT_T);
    assert_int_equal(st->iterations, iters);
    vx_ppo_backend_cpu.free(b);
    vx_env_free(env);
}

static int cmp_key(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Values of n raw observations normalised with statistics (mean, var) at params p; the
 * normalised rows into xn. */
static void it_values(const it_setup *u, const double *mean, const double *var, const float *p,
                      const float *raw, int n, vx_ac_ws *ws, float *xn)
{
    double c = u->s.obs_clip;
    for (int k = 0; k < n * IT_D; k++) {
        double z = (raw[k] - mean[k % IT_D]) / sqrt(var[k % IT_D] + 1e-8);
        xn[k] = (float)(z > c ? c : z < -c ? -c : z);
    }
    vx_ac_forward_ref(&u->L, p, xn, n, ws);
}

static void it_replica(it_setup *u, int iters, const double *lr, it_out *o)
{
    enum { N = IT_N, T = IT_T, D = IT_D, TN = IT_N * IT_T, K = VX_PPO_LOGITS };
    const vx_ppo_settings *s = &u->s;
    vx_env *env = it_env(u);
    vx_err e;
    vx_ac_ws ws;
    int M = TN / s->minibatches;
    assert_int_equal(vx_ac_ws_create(&u->L, M > N ? M : N, &ws, &e), VX_OK);
    static float raw[IT_MAX * TN * D], xn[TN * D], obs[N * D], fin[N * D], rew[N], logp[TN];
    static float val[TN], rw[TN], boot[TN], adv[TN], ret[TN];
    static int32_t act[TN * 3];
    static uint8_t te[TN], tr[TN];
    double ep[N] = {0}, c0 = 1e-4;
    memset(o, 0, sizeof *o);
    for (int d = 0; d < D; d++) o->mean[d] = 0, o->var[d] = 1;
    o->params = malloc(u->L.n_params * 4);
    memcpy(o->params, u->p0, u->L.n_params * 4);
    float *g = calloc(u->L.n_params, 4), *mobs = malloc((size_t)M * D * 4);
    float *mlogp = malloc(M * 4), *mval = malloc(M * 4), *madv = malloc(M * 4);
    float *mret = malloc(M * 4), *dz = malloc((size_t)M * K * 4), *dv = malloc(M * 4);
    int32_t *mact = malloc((size_t)M * 12);
    uint64_t keys[TN];
    vx_adam adam;
    assert_int_equal(vx_adam_create(&s->adam, u->L.n_params, &adam, &e), VX_OK);
    assert_int_equal(vx_env_observe(env, obs, NULL, &e), VX_OK);
    for (int it = 0; it < iters; it++) {
        ppo_result *r = &o->r[it];
        float *rawi = raw + (size_t)it * TN * D;
        /* the rollout */
        for (int t = 0; t < T; t++) {
            memcpy(rawi + (size_t)t * N * D, obs, sizeof obs);
            it_values(u, o->mean, o->var, o->params, obs, N, &ws, xn + (size_t)t * N * D);
            for (int i = 0; i < N; i++) {
                double z[K];
                for (int k = 0; k < K; k++) z[k] = ws.logits[i * K + k];
                logp[t * N + i] = (float)vx_ppo_sample(
                    z, u->run.seed, (uint64_t)i, (uint64_t)(it * T + t), act + 3 * (t * N + i));
                val[t * N + i] = ws.value[i];
            }
            assert_int_equal(
                vx_env_step(env, act + 3 * t * N, obs, rew, te + t * N, tr + t * N, fin, NULL, &e),
                VX_OK);
            for (int i = 0; i < N; i++) {
                int q = t * N + i;
                rw[q] = rew[i], ep[i] += rew[i], boot[q] = 0;
                if (te[q] || tr[q]) r->return_sum += ep[i], r->episodes++, ep[i] = 0;
                if (!tr[q]) continue;
                float x1[D];
                it_values(u, o->mean, o->var, o->params, fin + i * D, 1, &ws, x1);
                boot[q] = ws.value[0], o->truncations++;
            }
        }
        /* GAE, per environment, from the values of the observations after the rollout */
        float xl[N * D], last[N];
        it_values(u, o->mean, o->var, o->params, obs, N, &ws, xl);
        for (int i = 0; i < N; i++) last[i] = ws.value[i];
        for (int i = 0; i < N; i++) {
            double a_next = 0, v_next = last[i];
            for (int t = T - 1; t >= 0; t--) {
                int q = t * N + i;
                double vn = te[q] ? 0 : tr[q] ? boot[q] : v_next;
                double a = rw[q] + s->gamma * vn - val[q];
                if (!te[q] && !tr[q]) a += s->gamma * s->gae_lambda * a_next;
                adv[q] = (float)a, ret[q] = adv[q] + val[q];
                a_next = a, v_next = val[q];
            }
        }
        /* explained variance, two-pass */
        double my = 0, md = 0, vy = 0, vd = 0;
        for (int q = 0; q < TN; q++) my += ret[q] / TN, md += (ret[q] - val[q]) / TN;
        for (int q = 0; q < TN; q++) {
            vy += (ret[q] - my) * (ret[q] - my) / TN;
            vd += (ret[q] - val[q] - md) * (ret[q] - val[q] - md) / TN;
        }
        r->explained_var = 1 - vd / vy;
        /* the updates */
        adam.cfg.lr = lr[it];
        for (int k = 0; k < s->update_epochs; k++) {
            vx_rng pr = vx_rng_make(u->run.seed,
                                    VX_PPO_PERM_STREAM + (uint64_t)(it * s->update_epochs + k), 0);
            for (int q = 0; q < TN; q++) keys[q] = (uint64_t)vx_rng_u32(&pr) << 32 | (uint64_t)q;
            qsort(keys, TN, sizeof *keys, cmp_key);
            double kl = 0;
            for (int mb = 0; mb < s->minibatches; mb++) {
                for (int j = 0; j < M; j++) {
                    int q = (int)(keys[mb * M + j] & 0xffffffffu);
                    memcpy(mobs + j * D, xn + (size_t)q * D, D * 4);
                    memcpy(mact + 3 * j, act + 3 * q, 12);
                    mlogp[j] = logp[q], mval[j] = val[q], madv[j] = adv[q], mret[j] = ret[q];
                }
                ppo_minibatch mbv = {(size_t)M, mobs, mact, mlogp, mval, madv, mret};
                ppo_minibatch_stats st;
                vx_ppo_minibatch(&u->L, o->params, s, &mbv, &ws, dz, dv, g, &st);
                r->grad_norm += vx_grad_clip(g, u->L.n_params, s->max_grad_norm);
                vx_adam_step(&adam, o->params, g);
                r->updates++;
                r->pg_loss += st.pg, r->v_loss += st.v, r->entropy += st.entropy;
                r->approx_kl += st.approx_kl, r->clipfrac += st.clipfrac, kl += st.approx_kl;
                o->clipped += st.clipfrac > 0;
            }
            o->kl_epoch[it][k] = kl / s->minibatches;
            if (s->target_kl > 0 && o->kl_epoch[it][k] > s->target_kl) break;
        }
        double n = r->updates;
        r->pg_loss /= n, r->v_loss /= n, r->entropy /= n, r->approx_kl /= n;
        r->clipfrac /= n, r->grad_norm /= n;
        /* the statistics: the prior (weight c0, mean 0, variance 1) pooled with every rollout's
         * raw observations so far, two-pass */
        int rows = (it + 1) * TN;
        double tot = c0 + rows;
        for (int d = 0; d < D; d++) {
            double m = 0, m2 = 0;
            for (int q = 0; q < rows; q++) m += raw[(size_t)q * D + d];
            m /= tot; /* the prior's mean is 0 */
            for (int q = 0; q < rows; q++)
                m2 += (raw[(size_t)q * D + d] - m) * (raw[(size_t)q * D + d] - m);
            o->mean[d] = m, o->var[d] = (c0 * (1 + m * m) + m2) / tot;
        }
    }
    vx_adam_free(&adam);
    free(g), free(mobs), free(mlogp), free(mval), free(madv), free(mret), free(dz), free(dv);
    free(mact);
    vx_ac_ws_free(&ws);
    vx_env_free(env);
}

#define near_rel(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol) * (1 + fabs((double)(b))))

static void it_compare(const it_setup *u, int iters, const it_out *b, const it_out *r)
{
    for (int k = 0; k < iters; k++) {
        const ppo_result *x = &b->r[k], *y = &r->r[k];
        printf("iteration %d: %d updates (replica %d), kl %.3g, clipfrac %.3g, grad norm %.3g, "
               "explained var %.4f (replica %.4f)\n",
               k, x->updates, y->updates, x->approx_kl, x->clipfrac, x->grad_norm, x->explained_var,
               y->explained_var);
        assert_int_equal(x->updates, y->updates);
        assert_int_equal(x->env_steps, IT_N * IT_T);
        assert_true(x->episodes == y->episodes && near_rel(x->return_sum, y->return_sum, 1e-9));
        assert_true(near_rel(x->explained_var, y->explained_var, 1e-6));
        assert_true(near_rel(x->pg_loss, y->pg_loss, 1e-9));
        assert_true(near_rel(x->v_loss, y->v_loss, 1e-9));
        assert_true(near_rel(x->entropy, y->entropy, 1e-9));
        assert_true(near_rel(x->approx_kl, y->approx_kl, 1e-9));
        assert_true(near_rel(x->clipfrac, y->clipfrac, 1e-9));
        assert_true(near_rel(x->grad_norm, y->grad_norm, 1e-9));
    }
    for (int d = 0; d < IT_D; d++)
        if (!near_rel(b->mean[d], r->mean[d], 1e-9) || !near_rel(b->var[d], r->var[d], 1e-9))
            fail_msg("observation %d: mean %.12g var %.12g, replica %.12g %.12g", d, b->mean[d],
                     b->var[d], r->mean[d], r->var[d]);
    double worst = 0;
    for (size_t i = 0; i < u->L.n_params; i++) {
        double d = fabs((double)b->params[i] - r->params[i]);
        worst = d > worst ? d : worst;
    }
    printf("largest parameter difference %.3g\n", worst);
    assert_true(worst <= 1e-6);
}

/* Rates 3e-3 then 2e-3, not the settings' 3e-4: each plan's rate is the one Adam uses. The
 * default clip of the gradient norm (0.5) is active, some episodes are truncated and some ratios
 * clipped (all asserted), so the bootstrap and both clips are exercised. */
void test_iterations_match_replica(void **state)
{
    (void)state;
    it_setup u;
    it_make(&u);
    it_out b, r;
    const double lr[2] = {3e-3, 2e-3};
    it_backend(&u, 2, lr, &b);
    it_replica(&u, 2, lr, &r);
    assert_true(r.truncations > 0 && r.clipped > 0);
    assert_true(r.r[0].grad_norm > u.s.max_grad_norm && r.r[1].grad_norm > u.s.max_grad_norm);
    it_compare(&u, 2, &b, &r);
    free(b.params), free(r.params);
    it_done(&u);
}

/* target_kl stops the updates after the first epoch whose MEAN approximate KL over its
 * minibatches passes it. The target is set at 1.5 × the first epoch's mean (found by a replica
 * without a target): a learner that compares the epoch's sum (4 × the mean) stops one epoch
 * early, one that ignores the target runs all three. */
void test_target_kl_stops_on_the_epoch_mean(void **state)
{
    (void)state;
    it_setup u;
    it_make(&u);
    it_out b, r;
    const double lr[1] = {1e-3};
    it_replica(&u, 1, lr, &r);
    free(r.params);
    assert_int_equal(r.r[0].updates, 3 * 4);
    u.s.target_kl = 1.5 * r.kl_epoch[0][0];
    it_backend(&u, 1, lr, &b);
    it_replica(&u, 1, lr, &r);
    assert_true(r.r[0].updates > 4 && r.r[0].updates < 12); /* a stop, after epoch 2 */
    it_compare(&u, 1, &b, &r);
    free(b.params), free(r.params);
    it_done(&u);
}

/* ---- the algorithm's schedule and its greedy policy ----------------------------------------- */

/* The learning rate of epoch k of 4, reported as the "lr" metric, is CleanRL's linear anneal
 * 3e-4 · (1 − k/4), and 3e-4 throughout with anneal_lr = 0. The greedy policy acts on 300
 * observations (more than one internal batch of 256) as it acts on each alone: a batch past the
 * first reading the first's rows would act on the wrong observations. */
void test_lr_schedule_and_greedy_batches(void **state)
{
    (void)state;
    it_setup u;
    it_make(&u);
    int lr_col = -1;
    for (int i = 0; i < vx_algo_ppo.n_metrics; i++)
        if (strcmp(vx_algo_ppo.metrics[i].name, "lr") == 0) lr_col = i;
    assert_true(lr_col >= 0);
    vx_err e;
    for (int anneal = 1; anneal >= 0; anneal--) {
        u.s.anneal_lr = anneal;
        vx_env *env = it_env(&u);
        vx_algo_init in = {&u.s, &u.run, NULL, env, 0};
        vx_algo *a;
        assert_int_equal(vx_algo_ppo.create(&in, &a, &e), VX_OK);
        for (int k = 0; k < 3; k++) {
            vx_epoch_out out;
            memset(&out, 0, sizeof out);
            assert_int_equal(vx_algo_ppo.epoch(a, &(vx_epoch_in){k, 0}, &out, &e), VX_OK);
            double want = anneal ? 3e-4 * (1.0 - k / 4.0) : 3e-4;
            assert_true(fabs(out.metric[lr_col] - want) <= 1e-15);
        }
        if (anneal) { /* the policy after three epochs */
            enum { R = 300 };
            vx_policy pol;
            assert_int_equal(vx_algo_ppo.policy(a, &pol, &e), VX_OK);
            static float obs[R * IT_D];
            static int32_t all[R * 3];
            vx_rng g = vx_rng_make(8, 0, 0);
            for (int i = 0; i < R * IT_D; i++) obs[i] = (float)(3 * vx_rng_normal(&g));
            assert_int_equal(pol.act(pol.ctx, obs, R, all, &e), VX_OK);
            int differ = 0;
            for (int i = 0; i < R; i++) {
                int32_t one[3];
                assert_int_equal(pol.act(pol.ctx, obs + (size_t)i * IT_D, 1, one, &e), VX_OK);
                for (int b = 0; b < 3; b++) assert_int_equal(one[b], all[3 * i + b]);
                if (i >= 256) differ += memcmp(all + 3 * i, all + 3 * (i - 256), 12) != 0;
            }
            printf("greedy actions: %d of %d rows past 256 differ from row i - 256\n", differ,
                   R - 256);
            assert_true(differ > 0); /* so the comparison can see a batch reading the wrong rows */
        }
        vx_algo_ppo.free(a);
        vx_env_free(env);
    }
    it_done(&u);
}

/* The observation normaliser by hand: (x − mean) / √(var + 1e-8), clipped to ±clip, and x
 * untouched when off. Variance 4 makes a divisor of var (not its root) or a missing shift
 * visible; ±100 meets the clip of 10. */
void test_obs_normaliser_by_hand(void **state)
{
    (void)state;
    assert_true(fabs(vx_ppo_norm_obs(7.0f, 1.0, 4.0, 10.0, 1) - 6.0 / sqrt(4.0 + 1e-8)) < 1e-6);
    assert_true(fabs(vx_ppo_norm_obs(-1.0f, 1.0, 4.0, 10.0, 1) - -2.0 / sqrt(4.0 + 1e-8)) < 1e-6);
    assert_true(vx_ppo_norm_obs(100.0f, 0.0, 1.0, 10.0, 1) == 10.0f);
    assert_true(vx_ppo_norm_obs(-100.0f, 0.0, 1.0, 10.0, 1) == -10.0f);
    assert_true(vx_ppo_norm_obs(7.0f, 1.0, 4.0, 10.0, 0) == 7.0f);
}

/* ---- the algorithm's settings, metrics, policy and checkpoint ------------------------------- */

/* The defaults a user gets (CleanRL's PPO, with Adam's epsilon of 1e-5), read through the run's
 * configuration as a run reads them; and each `ppo.*` key at both ends of its range writes its
 * own field and nothing else, while a value just past either end is refused naming the range.
 * A key bound to the wrong field, a changed default or a range end moved by one fails here. */
typedef struct {
    const char *key;
    size_t off;
    int is_int;
    const char *lo, *hi, *below, *above; /* the range's ends and a value just past each */
    double lo_v, hi_v;
} ppo_key_case;

#define KEY_INT(k, f, lo, hi)                                                                      \
    {                                                                                              \
        k, offsetof(vx_ppo_settings, f), 1, #lo, #hi, NULL, NULL, lo, hi                           \
    }
#define KEY_DBL(k, f, lo, hi, below, above)                                                        \
    {                                                                                              \
        k, offsetof(vx_ppo_settings, f), 0, #lo, #hi, below, above, lo, hi                         \
    }

/* A training config at its defaults with train.algo = ppo, and its PPO settings. */
static vx_ppo_settings *ppo_defaults(vx_train_cfg *c)
{
    vx_err e;
    vx_train_cfg_default(c);
    assert_int_equal(vx_train_cfg_set(c, "train.algo", "ppo", NULL, &e), VX_OK);
    vx_ppo_settings *s = vx_train_algo_settings(c, "ppo");
    assert_non_null(s);
    return s;
}

void test_settings_keys_and_defaults(void **state)
{
    (void)state;
    vx_train_cfg c;
    vx_err e;
    vx_ppo_settings *s = ppo_defaults(&c);
    assert_non_null(s);
    assert_true(s->adam.lr == 3e-4 && s->adam.eps == 1e-5 && s->anneal_lr == 1);
    assert_true(s->gamma == 0.99 && s->gae_lambda == 0.95);
    assert_true(s->update_epochs == 4 && s->minibatches == 32 && s->norm_adv == 1);
    assert_true(s->clip == 0.2 && s->clip_value == 1 && s->ent_coef == 0.01 && s->vf_coef == 0.5);
    assert_true(s->max_grad_norm == 0.5 && s->target_kl == 0);
    assert_true(s->norm_obs == 1 && s->obs_clip == 10 && s->tf32 == 0 && s->fused == 1);
    assert_true(s->shared == 0 && s->n_trunk == 2);
    const ppo_key_case cases[] = {
        KEY_INT("shared", shared, 0, 1),
        KEY_DBL("lr", adam.lr, 1e-12, 10, "9e-13", "10.000001"),
        KEY_DBL("adam_eps", adam.eps, 1e-30, 1, "9e-31", "1.000001"),
        KEY_INT("anneal_lr", anneal_lr, 0, 1),
        KEY_DBL("gamma", gamma, 0, 1, "-1e-9", "1.000001"),
        KEY_DBL("gae_lambda", gae_lambda, 0, 1, "-1e-9", "1.000001"),
        KEY_INT("update_epochs", update_epochs, 1, 1000),
        KEY_INT("minibatches", minibatches, 1, 1048576),
        KEY_INT("norm_adv", norm_adv, 0, 1),
        KEY_DBL("clip", clip, 0, 10, "-1e-9", "10.000001"),
        KEY_INT("clip_value", clip_value, 0, 1),
        KEY_DBL("ent_coef", ent_coef, 0, 100, "-1e-9", "100.00001"),
        KEY_DBL("vf_coef", vf_coef, 0, 100, "-1e-9", "100.00001"),
        KEY_DBL("max_grad_norm", max_grad_norm, 0, 1e12, "-1e-9", "1.000001e12"),
        KEY_DBL("target_kl", target_kl, 0, 100, "-1e-9", "100.00001"),
        KEY_INT("norm_obs", norm_obs, 0, 1),
        KEY_DBL("obs_clip", obs_clip, 1e-6, 1e6, "9e-7", "1000001"),
        KEY_INT("tf32", tf32, 0, 1),
        KEY_INT("fused", fused, 0, 1),
    };
    vx_ppo_settings want;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const ppo_key_case *k = &cases[i];
        char key[64], lo[32], hi[32], msg[192];
        snprintf(key, sizeof key, "ppo.%s", k->key);
        for (int end = 0; end < 2; end++) { /* each end accepted, into its own field only */
            memcpy(&want, s, sizeof want);
            double v = end ? k->hi_v : k->lo_v;
            if (k->is_int) *(int *)((char *)&want + k->off) = (int)v;
            else *(double *)((char *)&want + k->off) = v;
            if (vx_train_cfg_set(&c, key, end ? k->hi : k->lo, NULL, &e) != VX_OK)
                fail_msg("%s = %s refused: %s", key, end ? k->hi : k->lo, e.msg);
            if (memcmp(s, &want, sizeof want) != 0)
                fail_msg("%s = %s did not write just its own field", key, end ? k->hi : k->lo);
        }
        if (k->is_int) {
            snprintf(lo, sizeof lo, "%d", (int)k->lo_v - 1);
            snprintf(hi, sizeof hi, "%d", (int)k->hi_v + 1);
        } else {
            snprintf(lo, sizeof lo, "%s", k->below);
            snprintf(hi, sizeof hi, "%s", k->above);
        }
        for (int end = 0; end < 2; end++) { /* a step past either end refused, nothing written */
            memcpy(&want, s, sizeof want);
            const char *x = end ? hi : lo;
            assert_int_equal(vx_train_cfg_set(&c, key, x, NULL, &e), VX_ERR_ARG);
            snprintf(msg, sizeof msg, "%s: %s is outside %.15g .. %.15g", key, x, k->lo_v, k->hi_v);
            if (!strstr(e.msg, msg)) fail_msg("%s = %s: '%s', not '%s'", key, x, e.msg, msg);
            assert_memory_equal(s, &want, sizeof want);
        }
    }
    /* the trunk: a list of widths, each at least 1, at most VX_AC_MAX_TRUNK of them */
    assert_int_equal(vx_train_cfg_set(&c, "ppo.trunk", "64, 48,16", NULL, &e), VX_OK);
    assert_true(s->n_trunk == 3 && s->trunk[0] == 64 && s->trunk[1] == 48 && s->trunk[2] == 16);
    assert_int_equal(vx_train_cfg_set(&c, "ppo.trunk", "64,0", NULL, &e), VX_ERR_ARG);
    assert_int_equal(vx_train_cfg_set(&c, "ppo.lrr", "1", NULL, &e), VX_ERR_ARG);
}

/* The rollout's sizes a run refuses before it starts: envs × steps must split into
 * `minibatches` equal minibatches of at least 2 (a minibatch of 1 has no sample standard
 * deviation to normalise its advantages by). 2 × 4 = 8 steps: 4 minibatches of 2 are accepted,
 * 8 of 1 and 3 of 8/3 refused. */
void test_settings_rollout_sizes(void **state)
{
    (void)state;
    vx_train_cfg c;
    vx_err e;
    vx_ppo_settings *s = ppo_defaults(&c);
    c.envs = 2, c.steps_per_epoch = 4;
    s->minibatches = 4;
    assert_int_equal(vx_train_cfg_check(&c, &e), VX_OK);
    s->minibatches = 8;
    assert_int_equal(vx_train_cfg_check(&c, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "ppo.minibatches (8) must divide"));
    assert_non_null(strstr(e.msg, "minibatches of at least 2"));
    s->minibatches = 3;
    assert_int_equal(vx_train_cfg_check(&c, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "ppo.minibatches (3) must divide"));
    s->minibatches = 1, s->update_epochs = 1; /* one minibatch of the whole rollout */
    assert_int_equal(vx_train_cfg_check(&c, &e), VX_OK);
}

static int metric_col(const char *name)
{
    for (int i = 0; i < vx_algo_ppo.n_metrics; i++)
        if (strcmp(vx_algo_ppo.metrics[i].name, name) == 0) return i;
    fail_msg("no metric '%s'", name);
    return -1;
}

static const vx_tensor *state_tensor(const vx_algo_state *o, const char *name)
{
    for (size_t i = 0; i < o->n_tensors; i++)
        if (strcmp(o->tensors[i].name, name) == 0) return &o->tensors[i];
    fail_msg("no tensor '%s' in the state", name);
    return NULL;
}

/* The state's actor-critic ("policy.*" by the layout's tensors) and its observation statistics
 * are `params`, `mean` and `var`, exactly. */
static void state_is(const vx_algo_state *o, const vx_ac_layout *L, const float *params,
                     const double *mean, const double *var)
{
    for (size_t i = 0; i < L->n_tensors; i++) {
        char name[64], full[96];
        size_t off;
        int r, c;
        vx_ac_tensor(L, i, name, sizeof name, &off, &r, &c);
        snprintf(full, sizeof full, "policy.%s", name);
        const vx_tensor *x = state_tensor(o, full);
        assert_int_equal(x->dtype, VX_DT_F32);
        if (memcmp(x->data, params + off, (size_t)r * c * 4) != 0)
            fail_msg("tensor %s is not the trained weights", full);
    }
    const vx_tensor *m = state_tensor(o, "obs.mean"), *v = state_tensor(o, "obs.var");
    assert_true(m->dtype == VX_DT_F64 && m->shape[0] == IT_D && v->dtype == VX_DT_F64);
    assert_memory_equal(m->data, mean, IT_D * 8);
    assert_memory_equal(v->data, var, IT_D * 8);
}

/* Two epochs of the algorithm against the backend driven alone under the plans the algorithm
 * should make (epoch k at 3e-4 · (1 − k/4)): each metric column holds the backend's number under
 * its own name ("updates" counts since the start), and the episode counts and returns pass
 * through. A checkpoint saved then, with no policy asked for in between, holds the trained
 * weights and the observation statistics as they are now (not the host copies of the last
 * policy). The greedy policy acts on 64 observations as the trained network does on them
 * normalised with those statistics, argmax per branch; the same network on the raw
 * observations, and the initial network, act otherwise on some rows (asserted), so a policy
 * without the trained weights or without the normaliser fails. The best-checkpoint state holds
 * what the policy acts with. */
void test_epoch_metrics_policy_and_save(void **state)
{
    (void)state;
    it_setup u;
    it_make(&u);
    const double lr[2] = {3e-4, 3e-4 * (1 - 1 / 4.0)};
    it_out b;
    it_backend(&u, 2, lr, &b);
    vx_env *env = it_env(&u);
    vx_algo_init in = {&u.s, &u.run, NULL, env, 0};
    vx_algo *a;
    vx_err e;
    assert_int_equal(vx_algo_ppo.create(&in, &a, &e), VX_OK);
    const char *names[] = {"pg_loss",  "v_loss",        "entropy",  "approx_kl",
                           "clipfrac", "explained_var", "grad_norm"};
    int64_t updates = 0;
    for (int k = 0; k < 2; k++) {
        vx_epoch_out out;
        memset(&out, 0, sizeof out);
        assert_int_equal(vx_algo_ppo.epoch(a, &(vx_epoch_in){k, 0}, &out, &e), VX_OK);
        const ppo_result *r = &b.r[k];
        const double want[] = {r->pg_loss,  r->v_loss,        r->entropy,  r->approx_kl,
                               r->clipfrac, r->explained_var, r->grad_norm};
        updates += r->updates;
        assert_true(out.env_steps == r->env_steps && out.episodes == r->episodes);
        assert_true(r->episodes > 0 && near_rel(out.return_sum, r->return_sum, 1e-12));
        assert_true(out.metric[metric_col("updates")] == (double)updates);
        assert_true(out.metric[metric_col("lr")] == lr[k]);
        double ups = out.metric[metric_col("updates_per_s")];
        assert_true(isfinite(ups) && ups > 0);
        for (int m = 0; m < 7; m++)
            if (!near_rel(out.metric[metric_col(names[m])], want[m], 1e-12))
                fail_msg("epoch %d: metric %s is %.9g, the backend's %.9g", k, names[m],
                         out.metric[metric_col(names[m])], want[m]);
    }
    static vx_algo_state o;
    assert_int_equal(vx_algo_ppo.save(a, 0, &o, &e), VX_OK);
    state_is(&o, &u.L, b.params, b.mean, b.var);
    vx_policy pol;
    assert_int_equal(vx_algo_ppo.policy(a, &pol, &e), VX_OK);
    enum { R = 64 };
    static float obs[R * IT_D], xn[R * IT_D];
    int32_t got[R * 3], want[3], raw[3], init[3];
    vx_rng g = vx_rng_make(11, 0, 0);
    for (int i = 0; i < R * IT_D; i++) obs[i] = (float)(3 * vx_rng_normal(&g));
    assert_int_equal(pol.act(pol.ctx, obs, R, got, &e), VX_OK);
    vx_ac_ws ws, ws_raw, ws_init;
    assert_int_equal(vx_ac_ws_create(&u.L, R, &ws, &e), VX_OK);
    assert_int_equal(vx_ac_ws_create(&u.L, R, &ws_raw, &e), VX_OK);
    assert_int_equal(vx_ac_ws_create(&u.L, R, &ws_init, &e), VX_OK);
    it_values(&u, b.mean, b.var, b.params, obs, R, &ws, xn);
    vx_ac_forward_ref(&u.L, b.params, obs, R, &ws_raw);
    it_values(&u, b.mean, b.var, u.p0, obs, R, &ws_init, xn);
    int raw_differs = 0, init_differs = 0;
    for (int i = 0; i < R; i++) {
        double z[VX_PPO_LOGITS], zr[VX_PPO_LOGITS], zi[VX_PPO_LOGITS];
        for (int k = 0; k < VX_PPO_LOGITS; k++) {
            z[k] = ws.logits[i * VX_PPO_LOGITS + k];
            zr[k] = ws_raw.logits[i * VX_PPO_LOGITS + k];
            zi[k] = ws_init.logits[i * VX_PPO_LOGITS + k];
        }
        vx_ppo_greedy(z, want), vx_ppo_greedy(zr, raw), vx_ppo_greedy(zi, init);
        for (int k = 0; k < 3; k++) assert_int_equal(got[3 * i + k], want[k]);
        raw_differs += memcmp(raw, want, sizeof want) != 0;
        init_differs += memcmp(init, want, sizeof want) != 0;
    }
    printf("greedy policy: %d of %d rows act otherwise on raw observations, %d with the initial "
           "weights\n",
           raw_differs, R, init_differs);
    assert_true(raw_differs > 0 && init_differs > 0);
    assert_int_equal(vx_algo_ppo.policy_state(a, &o, &e), VX_OK);
    state_is(&o, &u.L, b.params, b.mean, b.var);
    vx_ac_ws_free(&ws), vx_ac_ws_free(&ws_raw), vx_ac_ws_free(&ws_init);
    vx_algo_ppo.free(a);
    vx_env_free(env);
    free(b.params);
    it_done(&u);
}

/* ---- the settings' off switches and the rollout's edges ------------------------------------- */

/* The target-KL check reads each epoch's own mean KL, not a sum carried over epochs: a target
 * above the first two epochs' means but below their sum lets all three epochs run (12 updates),
 * where a carried sum would stop after two (8). The epochs' means grow, so the existing target
 * test (1.5 × epoch 1's) cannot tell the two apart. */
void test_target_kl_reads_each_epoch_alone(void **state)
{
    (void)state;
    it_setup u;
    it_make(&u);
    it_out b, r;
    const double lr[1] = {1e-3};
    it_replica(&u, 1, lr, &r); /* no target: each epoch's mean */
    free(r.params);
    u.s.target_kl = r.kl_epoch[0][1] + 0.5 * r.kl_epoch[0][0];
    assert_true(r.kl_epoch[0][2] > u.s.target_kl);
    it_backend(&u, 1, lr, &b);
    assert_int_equal(b.r[0].updates, 12);
    it_replica(&u, 1, lr, &r);
    it_compare(&u, 1, &b, &r);
    free(r.params);
    free(b.params);
    it_done(&u);
}

/* The backend against the replica where episodes end by termination too (a drawdown limit of
 * $100: 26 episodes, 18 terminated and 8 truncated), which the other replica tests never see: a
 * termination that bootstrapped, or episodes counted only on truncation, part them. */
void test_iterations_match_replica_with_terminations(void **state)
{
    (void)state;
    it_setup u;
    it_make(&u);
    it_out b, r;
    const double lr[2] = {3e-3, 2e-3};
    it_drawdown = 100.0;
    it_backend(&u, 2, lr, &b);
    it_replica(&u, 2, lr, &r);
    it_drawdown = 0;
    assert_true(r.r[0].episodes + r.r[1].episodes > r.truncations && r.truncations > 0);
    it_compare(&u, 2, &b, &r);
    free(b.params), free(r.params);
    it_done(&u);
}

/* ppo.norm_obs = 0: an iteration leaves the statistics at their start (count 1e-4, means 0,
 * variances 1), and the greedy policy acts on the raw observations (observations of sd 40: a
 * policy that normalised and clipped them at ±obs_clip would act otherwise). */
void test_norm_obs_off_leaves_observations_raw(void **state)
{
    (void)state;
    it_setup u;
    it_make(&u);
    u.s.norm_obs = 0;
    vx_env *env = it_env(&u);
    ppo_init in = {&u.s, &u.run, &u.L, NULL, env, u.p0};
    ppo_backend *b;
    ppo_state *st;
    vx_err e;
    assert_int_equal(vx_ppo_backend_cpu.create(&in, &b, &st, &e), VX_OK);
    ppo_plan plan = {0, 3e-4};
    ppo_result res;
    assert_int_equal(vx_ppo_backend_cpu.iteration(b, &plan, &res, &e), VX_OK);
    assert_true(st->obs_count == 1e-4);
    for (int d = 0; d < IT_D; d++) assert_true(st->obs_mean[d] == 0 && st->obs_var[d] == 1);
    vx_ppo_backend_cpu.free(b);
    vx_env_free(env);
    /* the greedy policy acts on the raw observations */
    env = it_env(&u);
    vx_algo_init ai = {&u.s, &u.run, NULL, env, 0};
    vx_algo *a;
    assert_int_equal(vx_algo_ppo.create(&ai, &a, &e), VX_OK);
    vx_policy pol;
    assert_int_equal(vx_algo_ppo.policy(a, &pol, &e), VX_OK);
    enum { R = 64 };
    static float obs[R * IT_D];
    int32_t got[R * 3], want[3];
    vx_rng g = vx_rng_make(11, 0, 0);
    for (int i = 0; i < R * IT_D; i++) obs[i] = (float)(40 * vx_rng_normal(&g));
    assert_int_equal(pol.act(pol.ctx, obs, R, got, &e), VX_OK);
    vx_ac_ws ws;
    assert_int_equal(vx_ac_ws_create(&u.L, R, &ws, &e), VX_OK);
    vx_ac_forward_ref(&u.L, u.p0, obs, R, &ws);
    int bad = 0;
    for (int i = 0; i < R; i++) {
        double z[VX_PPO_LOGITS];
        for (int k = 0; k < VX_PPO_LOGITS; k++) z[k] = ws.logits[i * VX_PPO_LOGITS + k];
        vx_ppo_greedy(z, want);
        bad += memcmp(want, got + 3 * i, sizeof want) != 0;
    }
    assert_int_equal(bad, 0);
    vx_ac_ws_free(&ws);
    vx_algo_ppo.free(a);
    vx_env_free(env);
    it_done(&u);
}

/* More environments than a minibatch's rows (N = 4, M = 3): the last observations are valued in
 * chunks of M rows, every chunk (a backend that valued only the first, or past its workspace,
 * parts from the replica). */
void test_envs_exceed_minibatch_rows(void **state)
{
    (void)state;
    it_setup u;
    it_make(&u);
    u.s.minibatches = 16; /* M = 48 / 16 = 3 < N = 4 */
    u.s.update_epochs = 1;
    it_out b, r;
    const double lr[2] = {3e-3, 2e-3};
    it_backend(&u, 2, lr, &b);
    it_replica(&u, 2, lr, &r);
    /* the backend values the last observations in chunks of M rows, the replica all N at once: a
     * GEMM's rounding depends on the rows, so agreement to float rounding, not bit for bit */
    for (int k = 0; k < 2; k++) {
        assert_true(near_rel(b.r[k].pg_loss, r.r[k].pg_loss, 1e-5));
        assert_true(near_rel(b.r[k].v_loss, r.r[k].v_loss, 1e-5));
        assert_true(near_rel(b.r[k].explained_var, r.r[k].explained_var, 1e-5));
        assert_true(near_rel(b.r[k].grad_norm, r.r[k].grad_norm, 1e-5));
    }
    double worst = 0;
    for (size_t i = 0; i < u.L.n_params; i++) {
        double d = fabs((double)b.params[i] - r.params[i]);
        worst = d > worst ? d : worst;
    }
    assert_true(worst <= 1e-5);
    free(b.params), free(r.params);
    it_done(&u);
}

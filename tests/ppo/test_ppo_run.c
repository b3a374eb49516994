/* test_ppo_run.c — PPO's learner as the run drives it: a minibatch's loss with its advantages
 * normalised (against float64 written here), a short run that stops, resumes and ends with
 * exactly the weights of an uninterrupted one, and that run's checkpoint damaged (with a matching
 * checksum) refused on resume, naming the tensor or counter; two iterations of the CPU backend
 * against a replica written here (and the target-KL stop), the learning-rate schedule, the greedy
 * policy past one internal batch, and the observation normaliser by hand. */
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

static vx_env *it_env(it_setup *u)
{
    vx_env_cfg ec;
    vx_env_cfg_default(&ec);
    ec.seed = 5;
    ec.episode_len = 5; /* truncations inside a rollout of 12 steps */
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

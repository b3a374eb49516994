/* train.c — the DQN training loop, its run folder, checkpoints and resume; the CPU reference's
 * collection and updates (the GPU's are in train_cuda.cu, behind the same loop).
 *
 * One epoch: N environments × T steps with ε-greedy actions (each branch explores on its own) →
 * n-step transitions into the replay buffer → K updates (sample, update, new priorities) → an
 * evaluation every few epochs → a metrics row, TensorBoard scalars, a checkpoint every few epochs.
 *
 * Resume is exact: a checkpoint holds the networks, Adam's moments and step, every environment's
 * state and current observation, the n-step accumulators, the acting snapshot, the counters; the
 * replay buffer is saved beside it with its draw counter. All randomness is counter-based Philox
 * keyed by (seed, stream, counter), so a resumed run draws exactly what an uninterrupted one would
 * (a test checks the final weights bit for bit). */
#include "vixen/io.h"
#include "vixen/philox.h"
#include "vixen/train.h"
#include "train_internal.h"
#ifdef VX_HAVE_CUDA
#include "vixen/cuda_util.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CKPT_FORMAT "vixen-dqn-2"
#define CKPT_FORMAT_V1 "vixen-dqn-1" /* weights readable by eval; not resumable (no acting weights) */

static void trainer_free(vx_trainer *t)
{
    vx_env_free(t->env);
    vx_dqn_free(&t->dqn);
    vx_replay_free(t->replay);
    vx_nstep_free(&t->ns);
    vx_tbuf_free(&t->tbuf);
    vx_qnet_ws_free(&t->act_ws);
    free(t->obs), free(t->next_obs), free(t->final_obs), free(t->merged), free(t->rew);
    free(t->act), free(t->te), free(t->tr), free(t->ep_ret);
    free(t->b_obs), free(t->b_next), free(t->b_rew), free(t->b_w), free(t->b_act);
    free(t->b_te), free(t->b_tr), free(t->b_steps), free(t->b_idx), free(t->b_gen);
    free(t->act_params);
#ifdef VX_HAVE_CUDA
    vx_train_gpu_free(t->gpu);
#endif
    vx_market_close(&t->market);
}

vx_status vx_train_device(const vx_train_cfg *c, int *device, vx_err *e)
{
#ifdef VX_HAVE_CUDA
    int n = c->device == VX_DEVICE_CPU ? 0 : vx_cuda_device_count();
    const char *why = "no CUDA device is visible";
#else
    int n = 0;
    const char *why = "this build of vixen has no CUDA (rebuild with nvcc present)";
#endif
    if (c->device == VX_DEVICE_CPU || (c->device == VX_DEVICE_AUTO && n == 0)) {
        *device = VX_DEVICE_CPU;
        return VX_OK;
    }
    if (n == 0) return vx_err_set(e, VX_ERR_ARG, "train.device: cuda asked for, but %s", why);
    *device = VX_DEVICE_CUDA;
    return VX_OK;
}

vx_status vx_train_open_market(const vx_train_cfg *c, vx_market *m, vx_err *e)
{
    if (c->n_files > 0) {
        const char *paths[VX_TRAIN_MAX_FILES];
        for (int i = 0; i < c->n_files; i++) paths[i] = c->files[i];
        char dir[1024];
        if (c->cache_dir[0]) snprintf(dir, sizeof dir, "%s", c->cache_dir);
        else vx_cache_default_dir(dir, sizeof dir);
        vx_load_opts o = {.instrument = c->instrument[0] ? c->instrument : NULL};
        return vx_market_open(paths, (size_t)c->n_files, &o, dir, m, e);
    }
    vx_synth_cfg sc;
    vx_synth_default(&sc);
    sc.days = c->synth_days;
    sc.seed = c->synth_seed;
    sc.signal_strength = c->synth_strength;
    vx_series s = {0};
    vx_status st = vx_synth_generate(&sc, &s, NULL, e);
    if (!st) st = vx_market_from_series(&s, m, e);
    vx_series_free(&s);
    return st;
}

/* gpu: the replay buffer and the batch arrays live on the device (train_cuda.cu) */
static vx_status trainer_init(vx_trainer *t, const vx_train_cfg *c, int gpu, vx_err *e)
{
    memset(t, 0, sizeof *t);
    t->cfg = *c;
    vx_status st = vx_train_open_market(c, &t->market, e);
    if (st) return st;
    vx_env_cfg ec = c->env;
    ec.seed = c->seed;
    size_t N = (size_t)c->envs, D = VX_OBS_DIM, B = (size_t)c->dqn.batch;
    /* on the CPU; on the GPU path the host mirror of the device environments' states, which
     * checkpoints read and a resume fills (train_cuda.cu) */
    st = vx_env_create(&ec, &t->market, VX_SPLIT_TRAIN, N, NULL, &t->env, e);
    vx_qnet_cfg q = c->net;
    q.in_dim = VX_OBS_DIM;
    q.n_branches = VX_ACTION_BRANCHES;
    q.branch[0] = VX_EXPOSURE_LEVELS, q.branch[1] = VX_ORDER_TYPES, q.branch[2] = VX_URGENCY_LEVELS;
    if (!st) st = vx_dqn_create(&c->dqn, &q, c->seed, &t->dqn, e);
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, c->replay_kind, (size_t)c->replay_capacity);
    rc.alpha = c->replay_alpha, rc.eps = c->replay_eps, rc.rank_refresh = c->rank_refresh;
    rc.seed = c->seed;
    if (!st && !gpu) st = vx_replay_create(&rc, NULL, &t->replay, e);
    if (!st) st = vx_nstep_create(c->dqn.n_step, (int)N, (int)D, c->dqn.gamma, &t->ns, e);
    if (!st && !gpu)
        st = vx_tbuf_reserve(&t->tbuf, N * (size_t)(c->steps_per_epoch + c->dqn.n_step), (int)D, e);
    if (!st) st = vx_qnet_ws_create(&t->dqn.L, (int)(N < 1024 ? N : 1024), &t->act_ws, e);
    if (st) return st;
    if (gpu) B = 1; /* the batch lives on the device */
    t->act_params = malloc(t->dqn.L.n_params * sizeof(float));
    if (!t->act_params) return vx_err_set(e, VX_ERR_NOMEM, "train: out of memory");
    memcpy(t->act_params, t->dqn.online, t->dqn.L.n_params * sizeof(float));
    t->obs = malloc(N * D * 4), t->next_obs = malloc(N * D * 4), t->final_obs = malloc(N * D * 4);
    t->merged = malloc(N * D * 4), t->rew = malloc(N * 4);
    t->act = malloc(N * VX_ACTION_BRANCHES * sizeof(int32_t));
    t->te = malloc(N), t->tr = malloc(N), t->ep_ret = calloc(N, sizeof(double));
    t->b_obs = malloc(B * D * 4), t->b_next = malloc(B * D * 4), t->b_rew = malloc(B * 4);
    t->b_w = malloc(B * 4), t->b_act = malloc(B * 12), t->b_te = malloc(B), t->b_tr = malloc(B);
    t->b_steps = malloc(B), t->b_idx = malloc(B * 4), t->b_gen = malloc(B * 4);
    if (!t->obs || !t->next_obs || !t->final_obs || !t->merged || !t->rew || !t->act || !t->te ||
        !t->tr || !t->ep_ret || !t->b_obs || !t->b_next || !t->b_rew || !t->b_w || !t->b_act ||
        !t->b_te || !t->b_tr || !t->b_steps || !t->b_idx || !t->b_gen)
        return vx_err_set(e, VX_ERR_NOMEM, "train: out of memory");
    st = vx_env_observe(t->env, t->obs, NULL, e);
    if (st) return st;
    snprintf(t->ckpt_path, sizeof t->ckpt_path, "%s/checkpoint/latest.safetensors", c->run_dir);
    snprintf(t->replay_path, sizeof t->replay_path, "%s/checkpoint/replay.bin", c->run_dir);
    return VX_OK;
}

/* ---- checkpoints ------------------------------------------------------------------------- */

static vx_status save_checkpoint(vx_trainer *t, vx_err *e)
{
    uint64_t inserted = 0;
    vx_status st;
#ifdef VX_HAVE_CUDA
    if (t->gpu) st = vx_train_gpu_save_replay(t->gpu, t->replay_path, &inserted, e);
    else
#endif
    {
        vx_replay_stats rs;
        st = vx_replay_save(t->replay, t->replay_path, e);
        if (!st) st = vx_replay_stats_get(t->replay, &rs, NULL, e);
        if (!st) inserted = rs.inserted;
    }
    if (st) return st;
    const vx_qnet_layout *L = &t->dqn.L;
    size_t nt = L->n_tensors, N = (size_t)t->cfg.envs, n = (size_t)t->ns.n;
    vx_tensor *ts = calloc(2 * nt + 10, sizeof *ts);
    int64_t *cnt = malloc(2 * N * sizeof(int64_t));
    if (!ts || !cnt) {
        free(ts), free(cnt);
        return vx_err_set(e, VX_ERR_NOMEM, "checkpoint: out of memory");
    }
    size_t k = 0;
    for (int which = 0; which < 2; which++)
        for (size_t i = 0; i < nt; i++) {
            char name[64];
            size_t off;
            int r, c;
            vx_qnet_tensor(L, i, name, sizeof name, &off, &r, &c);
            vx_tensor *x = &ts[k++];
            snprintf(x->name, sizeof x->name, "%s.%s", which ? "target" : "online", name);
            x->dtype = VX_DT_F32;
            x->ndim = r == 1 ? 1 : 2;
            x->shape[0] = r == 1 ? c : r;
            x->shape[1] = c;
            x->data = (which ? t->dqn.target : t->dqn.online) + off;
        }
    for (size_t i = 0; i < N; i++) cnt[i] = t->ns.count[i], cnt[N + i] = t->ns.head[i];
    ts[k++] = (vx_tensor){"adam.m", VX_DT_F32, 1, {(int64_t)L->n_params}, t->dqn.adam.m};
    ts[k++] = (vx_tensor){"adam.v", VX_DT_F32, 1, {(int64_t)L->n_params}, t->dqn.adam.v};
    ts[k++] = (vx_tensor){"env.state", VX_DT_U8, 2, {(int64_t)N, (int64_t)sizeof(vx_env_state)},
                          vx_env_states(t->env)};
    ts[k++] = (vx_tensor){"env.obs", VX_DT_F32, 2, {(int64_t)N, VX_OBS_DIM}, t->obs};
    ts[k++] = (vx_tensor){"env.episode_return", VX_DT_F64, 1, {(int64_t)N}, t->ep_ret};
    ts[k++] = (vx_tensor){"nstep.count_head", VX_DT_I64, 2, {2, (int64_t)N}, cnt};
    ts[k++] = (vx_tensor){"nstep.obs", VX_DT_F32, 3, {(int64_t)N, (int64_t)n, VX_OBS_DIM}, t->ns.obs};
    ts[k++] = (vx_tensor){"nstep.actions", VX_DT_U8, 1, {(int64_t)(N * n * 3 * sizeof(int32_t))},
                          t->ns.act};
    ts[k++] = (vx_tensor){"nstep.rewards", VX_DT_F32, 2, {(int64_t)N, (int64_t)n}, t->ns.rew};
    ts[k++] = (vx_tensor){"acting", VX_DT_F32, 1, {(int64_t)L->n_params}, t->act_params};
    vx_meta *m = calloc(10, sizeof *m);
    if (!m) {
        free(ts), free(cnt);
        return vx_err_set(e, VX_ERR_NOMEM, "checkpoint: out of memory");
    }
    snprintf(m[0].key, 64, "format"), snprintf(m[0].value, 4096, CKPT_FORMAT);
    snprintf(m[1].key, 64, "epoch"), snprintf(m[1].value, 4096, "%d", t->epoch);
    snprintf(m[2].key, 64, "env_steps"), snprintf(m[2].value, 4096, "%lld", (long long)t->env_steps);
    snprintf(m[3].key, 64, "updates"), snprintf(m[3].value, 4096, "%lld", (long long)t->dqn.updates);
    snprintf(m[4].key, 64, "adam_t"), snprintf(m[4].value, 4096, "%lld", (long long)t->dqn.adam.t);
    snprintf(m[5].key, 64, "act_step"), snprintf(m[5].value, 4096, "%llu", (unsigned long long)t->act_step);
    snprintf(m[6].key, 64, "replay_inserted"), snprintf(m[6].value, 4096, "%llu", (unsigned long long)inserted);
    snprintf(m[7].key, 64, "params"), snprintf(m[7].value, 4096, "%zu", L->n_params);
    /* the resolved configuration travels with the weights */
    snprintf(m[8].key, 64, "config");
    FILE *cf = fmemopen(m[8].value, sizeof m[8].value - 1, "w");
    if (cf) {
        vx_train_cfg_write(&t->cfg, cf);
        fclose(cf);
    }
    snprintf(m[9].key, 64, "collected_ahead"), snprintf(m[9].value, 4096, "%d", t->collected_ahead);
    st = vx_safetensors_write(t->ckpt_path, ts, k, m, 10, e);
    free(ts), free(cnt), free(m);
    return st;
}

static long long meta_int(const vx_safetensors *s, const char *key, int *ok)
{
    const char *v = vx_safetensors_meta(s, key);
    if (!v) {
        *ok = 0;
        return 0;
    }
    return strtoll(v, NULL, 10);
}

static vx_status copy_tensor(const vx_safetensors *s, const char *name, vx_dtype dt, size_t count,
                             size_t elem, void *dst, vx_err *e)
{
    const vx_tensor *x = vx_safetensors_get(s, name, dt, count, e);
    if (!x) return e ? e->status : VX_ERR_FORMAT;
    memcpy(dst, x->data, count * elem);
    return VX_OK;
}

static vx_status load_weights(const vx_safetensors *s, vx_dqn *d, int target, vx_err *e)
{
    const vx_qnet_layout *L = &d->L;
    for (size_t i = 0; i < L->n_tensors; i++) {
        char name[64], full[96];
        size_t off;
        int r, c;
        vx_qnet_tensor(L, i, name, sizeof name, &off, &r, &c);
        snprintf(full, sizeof full, "%s.%s", target ? "target" : "online", name);
        vx_status st = copy_tensor(s, full, VX_DT_F32, (size_t)r * c, 4,
                                   (target ? d->target : d->online) + off, e);
        if (st) return st;
    }
    return VX_OK;
}

vx_status vx_train_load_policy(const char *path, vx_dqn *d, vx_err *e)
{
    vx_safetensors s;
    vx_status st = vx_safetensors_read(path, &s, e);
    if (st) return st;
    const char *fmt = vx_safetensors_meta(&s, "format");
    if (!fmt || (strcmp(fmt, CKPT_FORMAT) != 0 && strcmp(fmt, CKPT_FORMAT_V1) != 0))
        st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "format", "not a vixen DQN checkpoint");
    if (!st) st = load_weights(&s, d, 0, e);
    if (st && e && !strstr(e->msg, path)) {
        char m[sizeof e->msg];
        snprintf(m, sizeof m, "%s", e->msg);
        vx_err_line(e, st, path, -1, "", "%s", m);
    }
    vx_safetensors_free(&s);
    return st;
}

static vx_status load_checkpoint(vx_trainer *t, vx_err *e)
{
    vx_safetensors s;
    vx_status st = vx_safetensors_read(t->ckpt_path, &s, e);
    if (st) return st;
    size_t N = (size_t)t->cfg.envs, n = (size_t)t->ns.n, np = t->dqn.L.n_params;
    int ok = 1;
    const char *fmt = vx_safetensors_meta(&s, "format");
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0)
        st = vx_err_line(e, VX_ERR_FORMAT, t->ckpt_path, -1, "format",
                         "not a resumable vixen DQN checkpoint (%s; this version writes %s)",
                         fmt ? fmt : "no format", CKPT_FORMAT);
    long long epoch = meta_int(&s, "epoch", &ok), steps = meta_int(&s, "env_steps", &ok);
    long long updates = meta_int(&s, "updates", &ok), adam_t = meta_int(&s, "adam_t", &ok);
    long long act_step = meta_int(&s, "act_step", &ok), inserted = meta_int(&s, "replay_inserted", &ok);
    long long ahead = meta_int(&s, "collected_ahead", &ok);
    if (!st && !ok) st = vx_err_line(e, VX_ERR_FORMAT, t->ckpt_path, -1, "__metadata__", "counters missing");
    if (!st) st = load_weights(&s, &t->dqn, 0, e);
    if (!st) st = load_weights(&s, &t->dqn, 1, e);
    if (!st) st = copy_tensor(&s, "adam.m", VX_DT_F32, np, 4, t->dqn.adam.m, e);
    if (!st) st = copy_tensor(&s, "adam.v", VX_DT_F32, np, 4, t->dqn.adam.v, e);
    vx_env_state *es = malloc(N * sizeof *es);
    int64_t *cnt = malloc(2 * N * sizeof *cnt);
    if (!st && (!es || !cnt)) st = vx_err_set(e, VX_ERR_NOMEM, "resume: out of memory");
    if (!st) st = copy_tensor(&s, "env.state", VX_DT_U8, N * sizeof *es, 1, es, e);
    if (!st) st = copy_tensor(&s, "env.obs", VX_DT_F32, N * VX_OBS_DIM, 4, t->obs, e);
    if (!st) st = copy_tensor(&s, "env.episode_return", VX_DT_F64, N, 8, t->ep_ret, e);
    if (!st) st = copy_tensor(&s, "nstep.count_head", VX_DT_I64, 2 * N, 8, cnt, e);
    if (!st) st = copy_tensor(&s, "nstep.obs", VX_DT_F32, N * n * VX_OBS_DIM, 4, t->ns.obs, e);
    if (!st) st = copy_tensor(&s, "nstep.actions", VX_DT_U8, N * n * 12, 1, t->ns.act, e);
    if (!st) st = copy_tensor(&s, "nstep.rewards", VX_DT_F32, N * n, 4, t->ns.rew, e);
    if (!st) st = copy_tensor(&s, "acting", VX_DT_F32, np, 4, t->act_params, e);
    if (!st) st = vx_env_set_states(t->env, es, e);
    if (!st) {
        for (size_t i = 0; i < N; i++) t->ns.count[i] = (int)cnt[i], t->ns.head[i] = (int)cnt[N + i];
        t->epoch = (int)epoch;
        t->env_steps = steps;
        t->dqn.updates = updates;
        t->dqn.adam.t = adam_t;
        t->act_step = (uint64_t)act_step;
        t->collected_ahead = (int)ahead;
    }
    uint64_t have = 0;
#ifdef VX_HAVE_CUDA
    if (!st && t->gpu) st = vx_train_gpu_load_replay(t->gpu, t->replay_path, &have, e);
#endif
    if (!st && !t->gpu) {
        vx_replay_stats rs;
        st = vx_replay_load(t->replay, t->replay_path, e);
        if (!st) st = vx_replay_stats_get(t->replay, &rs, NULL, e);
        if (!st) have = rs.inserted;
    }
    if (!st) {
        if ((long long)have != inserted)
            st = vx_err_line(e, VX_ERR_FORMAT, t->replay_path, -1, "inserted",
                             "replay buffer (%llu inserted) does not belong to the checkpoint (%lld)",
                             (unsigned long long)have, inserted);
    }
    free(es), free(cnt);
    vx_safetensors_free(&s);
    if (st && e && !strstr(e->msg, t->ckpt_path) && !strstr(e->msg, t->replay_path)) {
        char m[sizeof e->msg];
        snprintf(m, sizeof m, "%s", e->msg);
        vx_err_line(e, st, t->ckpt_path, -1, "", "resume: %s", m);
    }
    return st;
}

/* ---- one epoch ----------------------------------------------------------------------------- */

double vx_train_epsilon_at(const vx_train_cfg *c, int epoch)
{
    double f = (double)epoch / c->eps_decay_epochs;
    return c->eps_start + (c->eps_end - c->eps_start) * (f < 1 ? f : 1);
}

double vx_train_beta_at(const vx_train_cfg *c, int epoch)
{
    double f = c->epochs > 1 ? (double)epoch / (c->epochs - 1) : 1;
    return c->beta0 + (1 - c->beta0) * (f < 1 ? f : 1);
}

static vx_status collect(vx_trainer *t, double eps, double *ret_sum, double *episodes, vx_err *e)
{
    size_t N = (size_t)t->cfg.envs, D = VX_OBS_DIM;
    t->tbuf.n = 0;
    /* acting reads the snapshot with overlap on (the learner's online pointer, swapped for the
     * rollout), the current weights without */
    float *online = t->dqn.online;
    if (t->cfg.overlap) t->dqn.online = t->act_params;
    for (int step = 0; step < t->cfg.steps_per_epoch; step++) {
        vx_dqn_act(&t->dqn, &t->act_ws, t->obs, (int)N, eps, t->cfg.seed, t->act_step++, t->act,
                   NULL);
        vx_status st = vx_env_step(t->env, t->act, t->next_obs, t->rew, t->te, t->tr,
                                   t->final_obs, NULL, e);
        if (st) {
            t->dqn.online = online;
            return st;
        }
        for (size_t i = 0; i < N; i++) {
            int ended = t->te[i] | t->tr[i];
            memcpy(t->merged + i * D, (ended ? t->final_obs : t->next_obs) + i * D, D * 4);
            t->ep_ret[i] += t->rew[i];
            if (ended) {
                *ret_sum += t->ep_ret[i];
                *episodes += 1;
                t->ep_ret[i] = 0;
            }
        }
        vx_nstep_push(&t->ns, t->obs, t->act, t->rew, t->te, t->tr, t->merged, &t->tbuf);
        float *swap = t->obs;
        t->obs = t->next_obs;
        t->next_obs = swap;
    }
    t->dqn.online = online;
    t->env_steps += (int64_t)N * t->cfg.steps_per_epoch;
    vx_transitions tv = vx_tbuf_view(&t->tbuf);
    return vx_replay_insert(t->replay, &tv, t->tbuf.n, NULL, e);
}

static vx_status learn(vx_trainer *t, int K, double beta, vx_dqn_update_stats *acc, int *done,
                       vx_err *e)
{
    memset(acc, 0, sizeof *acc);
    *done = 0;
    int64_t size = (int64_t)vx_replay_size(t->replay);
    if (size < t->cfg.warmup || size < t->cfg.dqn.batch) return VX_OK;
    int B = t->cfg.dqn.batch;
    vx_replay_batch b = {t->b_obs, t->b_next, t->b_act, t->b_rew, t->b_te, t->b_tr,
                         t->b_steps, t->b_w, t->b_idx, t->b_gen};
    vx_status st = vx_replay_set_beta(t->replay, beta, NULL, e);
    if (st) return st;
    for (int k = 0; k < K; k++) {
        st = vx_replay_sample(t->replay, (size_t)B, &b, NULL, e);
        if (st) return st;
        vx_dqn_update_stats s;
        vx_dqn_update(&t->dqn, &b, B, &s);
        st = vx_replay_update(t->replay, t->b_idx, t->b_gen, t->dqn.priority, (size_t)B, NULL, e);
        if (st) return st;
        acc->loss += s.loss, acc->q_mean += s.q_mean, acc->grad_norm += s.grad_norm;
        acc->q_max = k == 0 || s.q_max > acc->q_max ? s.q_max : acc->q_max;
    }
    acc->loss /= K, acc->q_mean /= K, acc->grad_norm /= K;
    *done = K;
    return VX_OK;
}

static const char *const metric_cols[] = {
    "epoch", "env_steps", "updates", "loss", "q_mean", "q_max", "grad_norm", "epsilon", "beta",
    "episode_return", "episode_pnl", "episodes", "eval_sharpe", "eval_pnl", "eval_max_drawdown",
    "eval_turnover", "eval_hit_rate", "env_steps_per_s", "updates_per_s", "seconds"};
#define N_METRICS (int)(sizeof metric_cols / sizeof *metric_cols)

static vx_status write_eval(const char *dir, const vx_eval_report *r, vx_err *e)
{
    char path[1100];
    const char *ext[2] = {"json", "txt"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/eval.%s", dir, ext[k]);
        vx_atomic_file af;
        vx_status st = vx_atomic_open(&af, path, e);
        if (st) return st;
        if (k == 0) vx_eval_json(af.f, r);
        else vx_eval_print(af.f, r);
        st = vx_atomic_commit(&af, e);
        if (st) return st;
    }
    return VX_OK;
}

vx_status vx_train_run(const vx_train_cfg *c, int resume, vx_epoch_fn on_epoch, void *ctx,
                       vx_eval_report *final_eval, vx_err *e)
{
    vx_status st = vx_train_cfg_check(c, e);
    if (st) return st;
    char path[1100];
    snprintf(path, sizeof path, "%s/checkpoint", c->run_dir);
    st = vx_mkdirs(path, e);
    if (st) return st;
    vx_trainer *t = calloc(1, sizeof *t);
    if (!t) return vx_err_set(e, VX_ERR_NOMEM, "train: out of memory");
    int device = VX_DEVICE_CPU;
    st = vx_train_device(c, &device, e);
    if (!st) st = trainer_init(t, c, device == VX_DEVICE_CUDA, e);
    struct stat sb;
    if (!st && !resume && stat(t->ckpt_path, &sb) == 0)
        st = vx_err_line(e, VX_ERR_ARG, c->run_dir, -1, "",
                         "already holds a run; resume it (--resume) or pick another folder");
#ifdef VX_HAVE_CUDA
    /* the GPU backend may choose the batch (and scale the learning rate): t->cfg is resolved */
    if (!st && device == VX_DEVICE_CUDA) st = vx_train_gpu_create(t, &t->gpu, e);
#endif
    if (!st && resume) st = load_checkpoint(t, e);
#ifdef VX_HAVE_CUDA
    if (!st && resume && t->gpu) st = vx_train_gpu_push(t->gpu, t, e);
#endif
    if (!st) vx_log(VX_LOG_INFO, "train: on the %s, batch %d, %d updates per epoch",
                    t->gpu ? "GPU" : "CPU", t->cfg.dqn.batch, vx_train_updates_per_epoch(&t->cfg));
    if (!st && !resume) { /* the resolved configuration, first */
        snprintf(path, sizeof path, "%s/config.yaml", c->run_dir);
        vx_atomic_file af;
        st = vx_atomic_open(&af, path, e);
        if (!st) {
            vx_train_cfg_write(&t->cfg, af.f);
            st = vx_atomic_commit(&af, e);
        }
    }
    vx_csv_log csv = {0};
    vx_tfevents tb = {0};
    if (!st) {
        snprintf(path, sizeof path, "%s/metrics.csv", c->run_dir);
        st = vx_csv_log_open(&csv, path, metric_cols, N_METRICS, e);
    }
    if (!st) st = vx_tfevents_open(&tb, c->run_dir, e);
    int K = vx_train_updates_per_epoch(&t->cfg);
    double scale = (!st && t->env) ? vx_env_params_get(t->env)->reward_scale : 1;
    uint64_t run_start = vx_now_ns();
    int first_epoch = t->epoch;
    vx_eval_report ev;
    memset(&ev, 0, sizeof ev);
    while (!st && t->epoch < c->epochs) {
        uint64_t t0 = vx_now_ns();
        int ep = t->epoch;
        double eps = vx_train_epsilon_at(c, ep), beta = vx_train_beta_at(c, ep);
        vx_epoch_work w;
        memset(&w, 0, sizeof w);
#ifdef VX_HAVE_CUDA
        if (t->gpu) st = vx_train_gpu_epoch(t->gpu, t, K, &w, e);
        else
#endif
        {
            if (!t->collected_ahead) st = collect(t, eps, &w.return_sum, &w.episodes, e);
            t->collected_ahead = 0;
            w.collect_s = vx_seconds_since(t0);
            uint64_t t1 = vx_now_ns();
            if (c->overlap) /* the next rollout acts with the weights as they are now */
                memcpy(t->act_params, t->dqn.online, t->dqn.L.n_params * sizeof(float));
            if (!st) st = learn(t, K, beta, &w.stats, &w.updates, e);
            w.learn_s = vx_seconds_since(t1);
        }
        int done = w.updates;
        vx_dqn_update_stats us = w.stats;
        double ret_sum = w.return_sum, episodes = w.episodes, collect_s = w.collect_s,
               learn_s = w.learn_s;
        t->epoch++;
        vx_epoch_report r;
        memset(&r, 0, sizeof r);
        int last = t->epoch == c->epochs;
        if (!st && ((c->eval_every > 0 && t->epoch % c->eval_every == 0) || last)) {
#ifdef VX_HAVE_CUDA
            if (t->gpu) st = vx_train_gpu_pull(t->gpu, t, 0, e);
#endif
            if (!st) st = vx_eval_run(&t->market, &c->env, &t->dqn, &ev, e);
            r.evaluated = 1;
            r.eval = ev.agent;
        }
        if (st) break;
        r.epoch = t->epoch, r.epochs = c->epochs;
        r.env_steps = t->env_steps, r.updates = t->dqn.updates;
        r.loss = done ? us.loss : NAN, r.q_mean = done ? us.q_mean : NAN;
        r.q_max = done ? us.q_max : NAN, r.grad_norm = done ? us.grad_norm : NAN;
        r.epsilon = eps, r.beta = beta;
        r.episode_return = episodes > 0 ? ret_sum / episodes : NAN;
        r.episodes = episodes;
        r.env_steps_per_s = collect_s > 0 ? (double)c->envs * c->steps_per_epoch / collect_s : 0;
        r.updates_per_s = done ? done / learn_s : 0;
        r.seconds = vx_seconds_since(t0);
        double per = vx_seconds_since(run_start) / (t->epoch - first_epoch);
        r.eta_seconds = per * (c->epochs - t->epoch);
        double row[N_METRICS] = {r.epoch, (double)r.env_steps, (double)r.updates, r.loss, r.q_mean,
                                 r.q_max, r.grad_norm, r.epsilon, r.beta, r.episode_return,
                                 r.episode_return * scale, r.episodes,
                                 r.evaluated ? r.eval.sharpe : NAN,
                                 r.evaluated ? r.eval.total_pnl : NAN,
                                 r.evaluated ? r.eval.max_drawdown : NAN,
                                 r.evaluated ? r.eval.turnover : NAN,
                                 r.evaluated ? r.eval.hit_rate : NAN, r.env_steps_per_s,
                                 r.updates_per_s, r.seconds};
        st = vx_csv_log_row(&csv, row, e);
        for (int i = 1; i < N_METRICS && !st; i++) {
            if (isnan(row[i])) continue;
            char tag[64];
            snprintf(tag, sizeof tag, "%s/%s", strncmp(metric_cols[i], "eval_", 5) ? "train" : "eval",
                     metric_cols[i]);
            st = vx_tfevents_scalar(&tb, tag, t->epoch, row[i], e);
        }
        int stop = !st && on_epoch ? on_epoch(&r, ctx) : 0;
        if (!st && (t->epoch % c->checkpoint_every == 0 || last || stop)) {
#ifdef VX_HAVE_CUDA
            if (t->gpu) st = vx_train_gpu_pull(t->gpu, t, 1, e);
#endif
            if (!st) st = save_checkpoint(t, e);
        }
        if (stop) break;
    }
    if (!st && ev.buy_hold.bars == 0) {
#ifdef VX_HAVE_CUDA
        if (t->gpu) st = vx_train_gpu_pull(t->gpu, t, 0, e);
#endif
        if (!st) st = vx_eval_run(&t->market, &c->env, &t->dqn, &ev, e);
    }
    if (!st) st = write_eval(c->run_dir, &ev, e);
    if (!st && final_eval) *final_eval = ev;
    vx_csv_log_close(&csv);
    vx_tfevents_close(&tb);
    trainer_free(t);
    free(t);
    return st;
}

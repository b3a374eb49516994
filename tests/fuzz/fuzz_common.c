/* fuzz_common.c — the in-memory file, the fixed replay buffer and DQN run, and the seed writers
 * of fuzz_common.h. The seed writers go through the library's own writers (vx_replay_save, the
 * algorithm's save, vx_safetensors_write), never through hand-made bytes, so the seeds follow the
 * formats as they change. */
#define _GNU_SOURCE /* memfd_create */
#include "fuzz_common.h"
#include "train/checkpoint.h" /* the format name and file name the run writes */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void vx_fuzz_file_open(vx_fuzz_file *f, const char *name)
{
    f->fd = memfd_create(name, MFD_CLOEXEC);
    if (f->fd < 0) {
        perror("memfd_create");
        exit(1);
    }
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

void vx_fuzz_file_set(vx_fuzz_file *f, const uint8_t *data, size_t n)
{
    size_t done = 0;
    /* the offset too: a stream opened on a dup of fd shares it */
    if (ftruncate(f->fd, 0) != 0 || lseek(f->fd, 0, SEEK_SET) != 0) abort();
    while (done < n) {
        ssize_t w = pwrite(f->fd, data + done, n - done, (off_t)done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
}

/* ---- the replay buffer ----------------------------------------------------------------------- */

void vx_fuzz_replay_cfg(vx_replay_kind kind, vx_replay_cfg *c)
{
    vx_replay_cfg_default(c, kind, VX_FUZZ_REPLAY_CAPACITY);
    c->obs_dim = VX_FUZZ_REPLAY_OBS_DIM;
    c->rank_refresh = 2; /* the target's few samples see a sort */
    c->seed = 1;
}

enum { SEED_N = 20, SEED_B = 4, D = VX_FUZZ_REPLAY_OBS_DIM };

/* 20 transitions: more than the capacity, so the cursor has wrapped and generations moved. */
static vx_status seed_insert(vx_replay *r, vx_err *e)
{
    float obs[SEED_N * D], next[SEED_N * D], rew[SEED_N];
    int32_t act[SEED_N * VX_ACTION_BRANCHES];
    uint8_t term[SEED_N], trunc[SEED_N], steps[SEED_N];
    for (int i = 0; i < SEED_N; i++) {
        for (int d = 0; d < D; d++) obs[i * D + d] = (float)(i + d), next[i * D + d] = i + d + 1.0f;
        for (int b = 0; b < VX_ACTION_BRANCHES; b++)
            act[i * VX_ACTION_BRANCHES + b] = (i + b) % 3; /* every branch has 3 */
        rew[i] = 0.25f * (float)(i % 7) - 0.5f;
        term[i] = i % 9 == 8, trunc[i] = i % 11 == 10, steps[i] = (uint8_t)(1 + i % 3);
    }
    vx_transitions t = {obs, next, act, rew, term, trunc, steps};
    return vx_replay_insert(r, &t, SEED_N, NULL, e);
}

/* Samples a batch and gives it new priorities, so the file holds more than one priority. */
static vx_status seed_update(vx_replay *r, vx_err *e)
{
    float obs[SEED_B * D], next[SEED_B * D], rew[SEED_B], w[SEED_B], td[SEED_B];
    int32_t act[SEED_B * VX_ACTION_BRANCHES];
    uint8_t term[SEED_B], trunc[SEED_B], steps[SEED_B];
    uint32_t idx[SEED_B], gen[SEED_B];
    vx_replay_batch b = {obs, next, act, rew, term, trunc, steps, w, idx, gen};
    vx_status st = vx_replay_sample(r, SEED_B, &b, NULL, e);
    for (int i = 0; i < SEED_B; i++) td[i] = 0.5f * (float)(i + 1);
    if (!st) st = vx_replay_update(r, idx, gen, td, SEED_B, NULL, e);
    return st;
}

vx_status vx_fuzz_replay_seed(vx_replay_kind kind, const char *path, vx_err *e)
{
    vx_replay_cfg c;
    vx_fuzz_replay_cfg(kind, &c);
    vx_replay *r = NULL;
    vx_status st = vx_replay_create(&c, NULL, &r, e);
    if (!st) st = seed_insert(r, e);
    if (!st) st = seed_update(r, e);
    if (!st) st = vx_replay_save(r, path, e);
    vx_replay_free(r);
    return st;
}

/* ---- the DQN run ----------------------------------------------------------------------------- */

static const char *const run_keys[][2] = {
    {"data.synth_days", "5"},
    {"data.synth_seed", "3"},
    {"env.episode_len", "50"},
    {"train.algo", "dqn"},
    {"train.envs", "2"},
    {"train.steps_per_epoch", "4"},
    {"train.seed", "1"},
    {"dqn.trunk", "8"},
    {"dqn.head_hidden", "4"},
    {"dqn.batch", "4"},
    {"dqn.n_step", "2"},
    {"dqn.warmup", "4"},
    {"dqn.updates_per_epoch", "2"},
    {"replay.capacity", "16"},
    {"replay.kind", "proportional"},
};

vx_status vx_fuzz_run_open(vx_fuzz_run *r, vx_err *e)
{
    memset(r, 0, sizeof *r);
    r->cfg = malloc(sizeof *r->cfg);
    if (!r->cfg) return vx_err_set(e, VX_ERR_NOMEM, "fuzz: out of memory");
    vx_train_cfg_default(r->cfg);
    vx_status st = VX_OK;
    for (size_t i = 0; i < sizeof run_keys / sizeof *run_keys && !st; i++)
        st = vx_train_cfg_set(r->cfg, run_keys[i][0], run_keys[i][1], "fuzz", e);
    if (!st) st = vx_train_cfg_check(r->cfg, e);
    if (!st) st = vx_train_open_market(r->cfg, &r->market, e);
    if (st) return st;
    r->ops = vx_train_algo(r->cfg);
    vx_train_run_params(r->cfg, &r->run);
    return VX_OK;
}

void vx_fuzz_run_close(vx_fuzz_run *r)
{
    vx_market_close(&r->market);
    free(r->cfg);
    r->cfg = NULL;
}

vx_status vx_fuzz_run_algo(vx_fuzz_run *r, vx_env **env, vx_algo **out, vx_err *e)
{
    *out = NULL;
    vx_status st = VX_OK;
    if (env) {
        vx_env_cfg ec = r->cfg->env;
        ec.seed = r->cfg->seed;
        st = vx_env_create(&ec, &r->market, VX_SPLIT_TRAIN, (size_t)r->cfg->envs, NULL, env, e);
    }
    if (st) return st;
    vx_algo_init in = {vx_train_algo_settings_c(r->cfg, r->ops->name), &r->run, NULL,
                       env ? *env : NULL, 0};
    return r->ops->create(&in, out, e);
}

/* The run's own checkpoint writer (src/train/checkpoint.c), so the seed is what a run writes. */
static vx_status ckpt_save(vx_fuzz_run *r, vx_algo *a, const char *dir, vx_err *e)
{
    ckpt_job *j = calloc(1, sizeof *j);
    if (!j) return vx_err_set(e, VX_ERR_NOMEM, "fuzz: out of memory");
    snprintf(j->dir, sizeof j->dir, "%s", dir);
    snprintf(j->algo, sizeof j->algo, "%s", r->ops->name);
    snprintf(j->run_id, sizeof j->run_id, "%s", VX_FUZZ_RUN_ID);
    j->epoch = 1;
    j->env_steps = (int64_t)r->cfg->envs * r->cfg->steps_per_epoch;
    vx_status st = r->ops->save(a, 1, &j->st, e);
    if (!st) st = vx_ckpt_write(j, e);
    free(j);
    return st;
}

vx_status vx_fuzz_run_checkpoint(vx_fuzz_run *r, const char *dir, vx_err *e)
{
    vx_env *env = NULL;
    vx_algo *a = NULL;
    vx_status st = vx_fuzz_run_algo(r, &env, &a, e);
    vx_epoch_in in = {0, 1};
    vx_epoch_out out;
    if (!st) st = r->ops->epoch(a, &in, &out, e);
    if (!st) st = ckpt_save(r, a, dir, e);
    if (a) r->ops->free(a);
    vx_env_free(env);
    return st;
}

/* ---- temporary folders ----------------------------------------------------------------------- */

static char g_tmp[8][512];
static int g_n_tmp;

static void remove_temps(void)
{
    for (int i = 0; i < g_n_tmp; i++) vx_remove_tree(g_tmp[i], NULL);
}

void vx_fuzz_tempdir(char *buf, size_t n)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, n, "%s/vixen-fuzz-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(buf) || g_n_tmp == 8) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(g_tmp[g_n_tmp], sizeof g_tmp[0], "%s", buf);
    if (g_n_tmp++ == 0) atexit(remove_temps);
}

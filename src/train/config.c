/* config.c — a run's settings: the general sections (data.*, env.*, train.*) owned here, each
 * registered algorithm's sections bound to its settings slot, all through the one key table
 * machinery of io.h. An unknown key or a value out of range is an error naming the key; keys
 * renamed since earlier versions are read under their new names, so old config files and old
 * run folders still load. */
#include "vixen/io.h"
#include "vixen/train.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const device_names[] = {"auto", "cpu", "cuda", NULL};
static const char *const reward_names[] = {"pnl", "vol", NULL};

#define F(field) offsetof(vx_train_cfg, field), sizeof(((vx_train_cfg *)0)->field)
#define NUM(name, type, field, lo, hi, help)                                                       \
    {                                                                                              \
        name, type, F(field), lo, hi, NULL, 0, 0, -1, help                                         \
    }
static const vx_key data_keys[] = {
    {"files", VX_KEY_STRLIST, offsetof(vx_train_cfg, files), sizeof(((vx_train_cfg *)0)->files[0]),
     0, 0, NULL, offsetof(vx_train_cfg, n_files), VX_TRAIN_MAX_FILES, -1,
     "bar files or folders (none: the synthetic market)"},
    {"instrument", VX_KEY_STR, F(instrument), 0, 0, NULL, 0, 0, -1,
     "instrument id or symbol for multi-instrument DBN"},
    {"cache", VX_KEY_STR, F(cache_dir), 0, 0, NULL, 0, 0, -1,
     "feature cache folder (empty: the default)"},
    NUM("max_inflate", VX_KEY_U64, max_inflate, 0, 1e18,
        "most bytes a zstd file may inflate to (0: 16 GiB; also at most 1000x its size)"),
    NUM("synth_days", VX_KEY_INT, synth_days, 2, 100000, "days of synthetic market"),
    NUM("synth_seed", VX_KEY_U64, synth_seed, 0, 1e18, "seed of the synthetic market"),
    NUM("synth_strength", VX_KEY_DBL, synth_strength, 0, 10, "planted signal strength"),
    NUM("synth_drift", VX_KEY_DBL, synth_drift, -10, 10,
        "annual log drift of the synthetic market"),
    NUM("synth_phi", VX_KEY_DBL, synth_phi, 0, 0.9999, "persistence (AR(1)) of the planted signal"),
};
#undef F
#define F(field) offsetof(vx_env_cfg, field), sizeof(((vx_env_cfg *)0)->field)
static const vx_key env_keys[] = {
    NUM("max_contracts", VX_KEY_INT, max_contracts, 1, 100000, "contracts at full exposure"),
    NUM("episode_len", VX_KEY_INT, episode_len, 2, 1000000, "steps per episode"),
    NUM("commission", VX_KEY_DBL, commission, 0, 1e6, "$ per contract per side"),
    NUM("slippage_ticks", VX_KEY_DBL, slippage_ticks, 0, 1e4, "market-order slippage, ticks"),
    NUM("tick", VX_KEY_DBL, tick, 1e-12, 1e9, "price increment"),
    NUM("multiplier", VX_KEY_DBL, multiplier, 1e-12, 1e9, "$ per point"),
    NUM("reward_scale", VX_KEY_DBL, reward_scale, 0, 1e12, "$ per reward unit (0: from data)"),
    NUM("drawdown_limit", VX_KEY_DBL, drawdown_limit, 0, 1e15, "$ stop-out (0: 3 session sds)"),
    {"reward", VX_KEY_ENUM, F(reward), 0, 0, reward_names, 0, 0, -1,
     "pnl (PnL / reward_scale) or vol (PnL / ex-ante volatility, Zhang et al. 2019)"},
};
static const vx_key split_keys[] = {
    NUM("val", VX_KEY_DBL, val_fraction, 0, 0.9, "validation share of rows (0: none)"),
    NUM("test", VX_KEY_DBL, test_fraction, 0.01, 0.9, "test share of rows (all folds' blocks)"),
    NUM("gap", VX_KEY_INT, gap, VX_FEATURE_WARMUP, 1e9,
        "rows left out between splits, at least the features' longest lookback (240), so no "
        "split's features look back into the split before it"),
    NUM("folds", VX_KEY_INT, folds, 1, 1000, "walk-forward folds (1: one split)"),
    NUM("fold", VX_KEY_INT, fold, 0, 1000, "the fold this run trains (0: the last)"),
};
#undef F
#define F(field) offsetof(vx_train_cfg, field), sizeof(((vx_train_cfg *)0)->field)
extern const char *const vx_algo_names[]; /* algos.c */
static const vx_key train_keys[] = {
    {"algo", VX_KEY_ENUM, F(algo), 0, 0, vx_algo_names, 0, 0, -1, "the learning algorithm"},
    NUM("epochs", VX_KEY_INT, epochs, 1, 1e9, "epochs"),
    NUM("envs", VX_KEY_INT, envs, 1, 1 << 24, "environments stepped at once"),
    NUM("steps_per_epoch", VX_KEY_INT, steps_per_epoch, 1, 1e7,
        "steps of each environment per epoch"),
    NUM("eval_every", VX_KEY_INT, eval_every, 0, 1e9,
        "epochs between validations (0: none; the test split is evaluated once, at the end)"),
    NUM("patience", VX_KEY_INT, patience, 0, 1e9,
        "stop after this many validations without a better one (0: never)"),
    NUM("max_revisits", VX_KEY_INT, max_revisits, 0, 1e9,
        "warn when training steps exceed this many per training bar (0: never)"),
    NUM("checkpoint_every", VX_KEY_INT, checkpoint_every, 0, 1e9,
        "epochs between checkpoints (0: none, the run cannot be resumed; the best is still kept)"),
    NUM("seed", VX_KEY_U64, seed, 0, 1e18, "seed of everything random"),
    {"device", VX_KEY_ENUM, F(device), 0, 0, device_names, 0, 0, -1,
     "auto (the GPU when present), cpu or cuda"},
    NUM("gpu_graphs", VX_KEY_INT, gpu_graphs, 0, 1,
        "1: CUDA graphs; 0: kernel by kernel, synchronised (the reference path)"),
    NUM("final_test", VX_KEY_INT, final_test, 0, 1,
        "1: the chosen checkpoint is evaluated on the test split at the end; 0: not (the trials "
        "of a search, whose study tests its best once)"),
    NUM("async_checkpoints", VX_KEY_INT, async_checkpoints, 0, 1,
        "1: GPU checkpoints written in the background while training goes on"),
    NUM("threads", VX_KEY_INT, threads, 0, 4096,
        "CPU: threads of the matrix products (0: OpenBLAS's choice; a CPU run's last bits can "
        "depend on it, so a search's trials, 1 thread each, record it in best.yaml)"),
    {"run_dir", VX_KEY_STR, F(run_dir), 0, 0, NULL, 0, 0, -1, "the run folder"},
};
static const vx_section data_section = {"data", data_keys, sizeof data_keys / sizeof *data_keys};
static const vx_section env_section = {"env", env_keys, sizeof env_keys / sizeof *env_keys};
static const vx_section split_section = {"split", split_keys,
                                         sizeof split_keys / sizeof *split_keys};
static const vx_section train_section = {"train", train_keys,
                                         sizeof train_keys / sizeof *train_keys};

/* Keys that moved when the run stopped knowing about the DQN: old name, new name. */
static const char *const renamed[] = {
    "net.trunk",
    "dqn.trunk",
    "net.head_hidden",
    "dqn.head_hidden",
    "train.updates_per_epoch",
    "dqn.updates_per_epoch",
    "train.replay_ratio",
    "dqn.replay_ratio",
    "train.warmup",
    "dqn.warmup",
    "train.eps_start",
    "dqn.eps_start",
    "train.eps_end",
    "dqn.eps_end",
    "train.eps_decay_epochs",
    "dqn.eps_decay_epochs",
    "train.overlap",
    "dqn.overlap",
    "env.eval_fraction", /* the held-out share, before validation and test were separate */
    "split.test",
    NULL,
};

/* Binds the run's sections and then those of algorithm `only` (every algorithm when −1). */
static void bind(vx_settings *s, vx_train_cfg *c, int only)
{
    memset(s, 0, sizeof *s);
    vx_settings_bind(s, &data_section, c);
    vx_settings_bind(s, &env_section, &c->env);
    vx_settings_bind(s, &split_section, &c->env);
    vx_settings_bind(s, &train_section, c);
    for (int i = 0; i < vx_algo_count(); i++) {
        if (only >= 0 && i != only) continue;
        for (const vx_section *const *sec = vx_algo_at(i)->sections; sec && *sec; sec++)
            vx_settings_bind(s, *sec, c->algo_settings[i]);
    }
    s->renamed = renamed;
}

void vx_train_cfg_default(vx_train_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->synth_days = 260; /* a year: a test split of 39 trading days (Sharpe se about 2.5) */
    c->synth_seed = 1;
    c->synth_strength = 0.15;
    c->synth_phi = 0.97;
    c->synth_drift = 0.05; /* an equity-like premium: buy-and-hold's expected Sharpe about 0.4 */
    vx_env_cfg_default(&c->env);
    c->algo = 0;
    c->epochs = 60;
    c->envs = 128;
    c->steps_per_epoch = 100;
    c->eval_every = 5;
    c->patience = 0;
    c->max_revisits = 25;
    c->checkpoint_every = 10;
    c->seed = 1;
    c->device = VX_DEVICE_AUTO;
    c->gpu_graphs = 1;
    c->async_checkpoints = 1;
    c->final_test = 1;
    snprintf(c->run_dir, sizeof c->run_dir, "runs/run");
    for (int i = 0; i < vx_algo_count(); i++) vx_algo_at(i)->settings_default(c->algo_settings[i]);
}

vx_status vx_train_cfg_set(vx_train_cfg *c, const char *key, const char *value, const char *where,
                           vx_err *e)
{
    vx_settings s;
    bind(&s, c, -1);
    return vx_settings_set(&s, key, value, where, e);
}

int vx_train_key_algo(const char *key)
{
    for (const char *const *r = renamed; r[0]; r += 2)
        if (strcmp(r[0], key) == 0) key = r[1];
    const char *dot = strchr(key, '.');
    if (!dot) return -1;
    size_t n = (size_t)(dot - key);
    for (int i = 0; i < vx_algo_count(); i++)
        for (const vx_section *const *sec = vx_algo_at(i)->sections; sec && *sec; sec++) {
            if (strlen((*sec)->name) != n || strncmp((*sec)->name, key, n) != 0) continue;
            for (size_t k = 0; k < (*sec)->n_keys; k++) /* a whole key, not a misspelt one */
                if (strcmp((*sec)->keys[k].name, dot + 1) == 0) return i;
        }
    return -1;
}

vx_status vx_train_cfg_load(vx_train_cfg *c, const char *path, vx_err *e)
{
    vx_settings s;
    bind(&s, c, -1);
    return vx_settings_load(&s, path, e);
}

vx_status vx_train_cfg_load_text(vx_train_cfg *c, const char *text, size_t len, const char *name,
                                 vx_err *e)
{
    vx_settings s;
    bind(&s, c, -1);
    return vx_settings_load_text(&s, text, len, name, e);
}

vx_status vx_train_cfg_write(const vx_train_cfg *c, FILE *f)
{
    vx_settings s;
    bind(&s, (vx_train_cfg *)c, c->algo);
    return vx_settings_write(&s, f);
}

char *vx_train_cfg_text(const vx_train_cfg *c)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    int bad = vx_train_cfg_write(c, f) != VX_OK;
    if (fclose(f) != 0 || bad) {
        free(buf);
        return NULL;
    }
    return buf;
}

void vx_train_cfg_print_keys(FILE *f)
{
    vx_train_cfg *c = malloc(sizeof *c);
    if (!c) return;
    vx_train_cfg_default(c);
    vx_settings s;
    bind(&s, c, -1);
    vx_settings_print_keys(&s, f);
    free(c);
}

/* The keys of the run itself that the members of a group may differ in: what it is seeded with,
 * where it writes, and when it validates, stops and warns — none of it in the group's work. */
static const char *const run_own_keys[] = {
    "train.seed",
    "train.run_dir",
    "train.patience",
    "train.max_revisits",
    "train.eval_every",
    "train.final_test",
    "train.async_checkpoints",
    "train.checkpoint_every",
    "train.threads",
    NULL,
};

void vx_train_group_key(const vx_train_cfg *a, const vx_train_cfg *b, char *key, size_t n)
{
    const vx_algo_ops *ops = vx_train_algo(a);
    if (a->algo != b->algo) {
        snprintf(key, n, "train.algo");
        return;
    }
    if (!ops->create_group || !ops->epoch_group) {
        snprintf(key, n, "train.algo"); /* an algorithm without groups: each alone */
        return;
    }
    vx_settings x, y;
    bind(&x, (vx_train_cfg *)a, a->algo);
    bind(&y, (vx_train_cfg *)b, b->algo);
    int d = vx_settings_difference(&x, &y, run_own_keys, ops->member_keys, key, n);
    if (d < 0) snprintf(key, n, "(out of memory)");
    else if (d == 0) key[0] = '\0';
}

const vx_algo_ops *vx_train_algo(const vx_train_cfg *c) { return vx_algo_at(c->algo); }

void *vx_train_algo_settings(vx_train_cfg *c, const char *name)
{
    for (int i = 0; i < vx_algo_count(); i++)
        if (strcmp(vx_algo_at(i)->name, name) == 0) return c->algo_settings[i];
    return NULL;
}

const void *vx_train_algo_settings_c(const vx_train_cfg *c, const char *name)
{
    return vx_train_algo_settings((vx_train_cfg *)c, name);
}

void vx_train_run_params(const vx_train_cfg *c, vx_run_params *out)
{
    memset(out, 0, sizeof *out);
    out->envs = c->envs;
    out->steps_per_epoch = c->steps_per_epoch;
    out->epochs = c->epochs;
    out->checkpoint_every = c->checkpoint_every;
    out->seed = c->seed;
    out->gpu_graphs = c->gpu_graphs;
    out->async_checkpoints = c->async_checkpoints;
}

vx_status vx_train_cfg_check(const vx_train_cfg *c, vx_err *e)
{
    if (!c->run_dir[0]) return vx_err_set(e, VX_ERR_ARG, "train.run_dir is empty");
    if (!c->final_test && c->env.folds > 1)
        return vx_err_set(e, VX_ERR_ARG,
                          "train.final_test 0 with split.folds %d: a walk-forward is its folds' "
                          "test blocks",
                          c->env.folds);
    const vx_algo_ops *a = vx_train_algo(c);
    if (!a) return vx_err_set(e, VX_ERR_ARG, "train.algo: no algorithm %d", c->algo);
    vx_run_params run;
    vx_train_run_params(c, &run);
    return a->settings_check(c->algo_settings[c->algo], &run, e);
}

/* train_cfg.c — every training setting as one table of dotted keys.
 *
 * The same table serves the YAML file, `--set key=value` overrides, the resolved config written
 * into the run folder, and `vixen train --help`: a key exists in one place, with its type and its
 * allowed range, so an unknown key or a value out of range is always an error, never ignored. */
#include "vixen/io.h"
#include "vixen/train.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { T_INT, T_I64, T_U64, T_DBL, T_STR, T_ENUM, T_INTLIST, T_STRLIST } key_type;

typedef struct {
    const char *key;
    key_type type;
    size_t off, size; /* field offset in vx_train_cfg; size of a string field */
    double min, max;
    const char *const *names; /* T_ENUM */
    const char *help;
} key_def;

static const char *const loss_names[] = {"mse", "huber", "c51", NULL};
static const char *const replay_names[] = {"uniform", "proportional", "rank", NULL};
static const char *const device_names[] = {"auto", "cpu", "cuda", NULL};

#define F(field) offsetof(vx_train_cfg, field), sizeof(((vx_train_cfg *)0)->field)
static const key_def keys[] = {
    {"data.files", T_STRLIST, F(files), 0, 0, NULL, "bar files or folders (none: the synthetic market)"},
    {"data.instrument", T_STR, F(instrument), 0, 0, NULL, "instrument id or symbol for multi-instrument DBN"},
    {"data.cache", T_STR, F(cache_dir), 0, 0, NULL, "feature cache folder (empty: the default)"},
    {"data.synth_days", T_INT, F(synth_days), 2, 100000, NULL, "days of synthetic market"},
    {"data.synth_seed", T_U64, F(synth_seed), 0, 1e18, NULL, "seed of the synthetic market"},
    {"data.synth_strength", T_DBL, F(synth_strength), 0, 10, NULL, "planted signal strength"},
    {"env.max_contracts", T_INT, F(env.max_contracts), 1, 100000, NULL, "contracts at full exposure"},
    {"env.episode_len", T_INT, F(env.episode_len), 2, 1000000, NULL, "steps per episode"},
    {"env.commission", T_DBL, F(env.commission), 0, 1e6, NULL, "$ per contract per side"},
    {"env.slippage_ticks", T_DBL, F(env.slippage_ticks), 0, 1e4, NULL, "market-order slippage, ticks"},
    {"env.tick", T_DBL, F(env.tick), 1e-12, 1e9, NULL, "price increment"},
    {"env.multiplier", T_DBL, F(env.multiplier), 1e-12, 1e9, NULL, "$ per point"},
    {"env.reward_scale", T_DBL, F(env.reward_scale), 0, 1e12, NULL, "$ per reward unit (0: from data)"},
    {"env.drawdown_limit", T_DBL, F(env.drawdown_limit), 0, 1e15, NULL, "$ stop-out (0: 3 session sds)"},
    {"env.eval_fraction", T_DBL, F(env.eval_fraction), 0.01, 0.9, NULL, "held-out share of bars"},
    {"net.trunk", T_INTLIST, F(net.trunk), 1, 65536, NULL, "trunk widths, e.g. [256, 256]"},
    {"net.head_hidden", T_INT, F(net.head_hidden), 1, 65536, NULL, "value/advantage hidden width"},
    {"dqn.loss", T_ENUM, F(dqn.loss), 0, 0, loss_names, "mse, huber or c51"},
    {"dqn.gamma", T_DBL, F(dqn.gamma), 0, 1, NULL, "discount"},
    {"dqn.huber_kappa", T_DBL, F(dqn.huber_kappa), 1e-9, 1e9, NULL, "Huber threshold"},
    {"dqn.atoms", T_INT, F(dqn.atoms), 2, VX_LOSS_MAX_ATOMS, NULL, "C51 atoms"},
    {"dqn.v_min", T_DBL, F(dqn.v_min), -1e9, 1e9, NULL, "C51 support low end"},
    {"dqn.v_max", T_DBL, F(dqn.v_max), -1e9, 1e9, NULL, "C51 support high end"},
    {"dqn.n_step", T_INT, F(dqn.n_step), 1, 64, NULL, "n-step return horizon"},
    {"dqn.target_every", T_INT, F(dqn.target_every), 1, 1e9, NULL, "hard target copy period (updates)"},
    {"dqn.tau", T_DBL, F(dqn.tau), 0, 1, NULL, "Polyak weight (0: hard copies)"},
    {"dqn.grad_clip", T_DBL, F(dqn.grad_clip), 0, 1e12, NULL, "global gradient-norm clip (0: off)"},
    {"dqn.batch", T_INT, F(dqn.batch), 1, 1 << 20, NULL, "batch size"},
    {"dqn.tf32", T_INT, F(dqn.tf32), 0, 1, NULL, "GPU: 1 for TF32 tensor-core GEMMs (0: float32, like the CPU)"},
    {"dqn.lr", T_DBL, F(dqn.adam.lr), 1e-12, 10, NULL, "Adam learning rate"},
    {"dqn.adam_beta1", T_DBL, F(dqn.adam.beta1), 0, 0.999999, NULL, "Adam beta1"},
    {"dqn.adam_beta2", T_DBL, F(dqn.adam.beta2), 0, 0.9999999, NULL, "Adam beta2"},
    {"dqn.adam_eps", T_DBL, F(dqn.adam.eps), 1e-30, 1, NULL, "Adam epsilon"},
    {"dqn.weight_decay", T_DBL, F(dqn.adam.weight_decay), 0, 1, NULL, "decoupled weight decay"},
    {"replay.kind", T_ENUM, F(replay_kind), 0, 0, replay_names, "uniform, proportional or rank"},
    {"replay.capacity", T_I64, F(replay_capacity), 1, 2147483648.0, NULL, "transitions kept"},
    {"replay.alpha", T_DBL, F(replay_alpha), 0, 10, NULL, "priority exponent"},
    {"replay.beta0", T_DBL, F(beta0), 0, 1, NULL, "initial IS exponent (annealed to 1)"},
    {"replay.eps", T_DBL, F(replay_eps), 1e-300, 1e6, NULL, "added to |TD error|"},
    {"replay.rank_refresh", T_INT, F(rank_refresh), 1, 1e9, NULL, "sample calls between rank sorts"},
    {"train.epochs", T_INT, F(epochs), 1, 1e9, NULL, "epochs"},
    {"train.envs", T_INT, F(envs), 1, 1 << 24, NULL, "environments stepped at once"},
    {"train.steps_per_epoch", T_INT, F(steps_per_epoch), 1, 1e7, NULL, "steps of each environment per epoch"},
    {"train.updates_per_epoch", T_INT, F(updates_per_epoch), 0, 1e9, NULL, "updates per epoch (0: from the replay ratio)"},
    {"train.replay_ratio", T_DBL, F(replay_ratio), 1e-6, 1e6, NULL, "updates · batch / transitions collected"},
    {"train.warmup", T_INT, F(warmup), 0, 1e9, NULL, "transitions stored before learning"},
    {"train.eps_start", T_DBL, F(eps_start), 0, 1, NULL, "exploration at the start"},
    {"train.eps_end", T_DBL, F(eps_end), 0, 1, NULL, "exploration after the decay"},
    {"train.eps_decay_epochs", T_INT, F(eps_decay_epochs), 1, 1e9, NULL, "epochs of linear decay"},
    {"train.eval_every", T_INT, F(eval_every), 0, 1e9, NULL, "epochs between evaluations (0: end only)"},
    {"train.checkpoint_every", T_INT, F(checkpoint_every), 1, 1e9, NULL, "epochs between checkpoints"},
    {"train.seed", T_U64, F(seed), 0, 1e18, NULL, "seed of everything random"},
    {"train.device", T_ENUM, F(device), 0, 0, device_names, "auto (the GPU when present), cpu or cuda"},
    {"train.gpu_graphs", T_INT, F(gpu_graphs), 0, 1, NULL, "1: CUDA graphs; 0: kernel by kernel, synchronised (the reference path)"},
    {"train.overlap", T_INT, F(overlap), 0, 1, NULL, "1: act with weights one epoch old, so the GPU collects while it trains"},
    {"train.run_dir", T_STR, F(run_dir), 0, 0, NULL, "the run folder"},
};
#define N_KEYS (sizeof keys / sizeof *keys)

void vx_train_cfg_default(vx_train_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->synth_days = 60;
    c->synth_seed = 1;
    c->synth_strength = 0.15;
    vx_env_cfg_default(&c->env);
    vx_qnet_cfg_default(&c->net);
    vx_dqn_cfg_default(&c->dqn);
    c->dqn.batch = 64;
    c->dqn.adam.lr = 2.5e-4;
    c->dqn.target_every = 500;
    c->replay_kind = VX_REPLAY_PROPORTIONAL;
    c->replay_capacity = 100000;
    c->replay_alpha = 0.6;
    c->replay_eps = 0.01; /* in reward units: keeps IS weights from collapsing (1e-6 gave ~0.05) */
    c->beta0 = 0.4;
    c->rank_refresh = 100;
    /* the reference shape (2,048 envs × 100 steps, 341 updates at batch 1,024), sized for a
     * laptop: 128 envs × 100 steps, 341 updates at batch 64 */
    c->epochs = 30;
    c->envs = 128;
    c->steps_per_epoch = 100;
    c->updates_per_epoch = 0;
    c->replay_ratio = 1.705;
    c->warmup = 2000;
    c->eps_start = 1.0;
    c->eps_end = 0.05;
    c->eps_decay_epochs = 20;
    c->eval_every = 10;
    c->checkpoint_every = 10;
    c->seed = 1;
    c->device = VX_DEVICE_AUTO;
    c->overlap = 1;
    c->gpu_graphs = 1;
    snprintf(c->run_dir, sizeof c->run_dir, "runs/run");
}

int vx_train_updates_per_epoch(const vx_train_cfg *c)
{
    if (c->updates_per_epoch > 0) return c->updates_per_epoch;
    double k = (double)c->envs * c->steps_per_epoch / c->dqn.batch * c->replay_ratio;
    return k < 1 ? 1 : (int)floor(k + 0.5);
}

static const key_def *find(const char *key)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].key, key) == 0) return &keys[i];
    return NULL;
}

static vx_status bad(vx_err *e, const char *where, const char *key, const char *fmt,
                     const char *value, double lo, double hi)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, value, lo, hi);
    if (where && *where) return vx_err_set(e, VX_ERR_ARG, "%s: %s: %s", where, key, msg);
    return vx_err_set(e, VX_ERR_ARG, "%s: %s", key, msg);
}

static int parse_num(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    while (*end == ' ') end++;
    return errno || end == s || *end || !isfinite(*v) ? -1 : 0;
}

vx_status vx_train_cfg_set(vx_train_cfg *c, const char *key, const char *value, const char *where,
                           vx_err *e)
{
    const key_def *k = find(key);
    if (!k) {
        if (where && *where) return vx_err_set(e, VX_ERR_ARG, "%s: unknown key '%s'", where, key);
        return vx_err_set(e, VX_ERR_ARG, "unknown key '%s' (vixen train --help lists them)", key);
    }
    char *base = (char *)c + k->off;
    double v;
    switch (k->type) {
    case T_INT:
    case T_I64:
    case T_U64:
    case T_DBL:
        if (parse_num(value, &v))
            return bad(e, where, key, "'%s' is not a number", value, 0, 0);
        if (v < k->min || v > k->max)
            return bad(e, where, key, "%s is outside %g .. %g", value, k->min, k->max);
        if (k->type != T_DBL && v != floor(v))
            return bad(e, where, key, "%s is not a whole number", value, 0, 0);
        if (strcmp(k->key, "dqn.batch") == 0) c->batch_set = 1;
        if (k->type == T_INT) *(int *)base = (int)v;
        else if (k->type == T_I64) *(int64_t *)base = (int64_t)v;
        else if (k->type == T_U64) *(uint64_t *)base = (uint64_t)v;
        else *(double *)base = v;
        return VX_OK;
    case T_STR:
        if (strlen(value) >= k->size) return bad(e, where, key, "'%s' is too long", value, 0, 0);
        snprintf(base, k->size, "%s", value);
        return VX_OK;
    case T_ENUM:
        for (int i = 0; k->names[i]; i++)
            if (strcmp(k->names[i], value) == 0) {
                *(int *)base = i;
                return VX_OK;
            }
        return bad(e, where, key, "'%s' is not one of the choices (see vixen train --help)", value,
                   0, 0);
    case T_INTLIST: {
        int vals[VX_QNET_MAX_TRUNK], n = 0;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", value);
        for (char *tok = strtok(buf, ", []"); tok; tok = strtok(NULL, ", []")) {
            if (n == VX_QNET_MAX_TRUNK)
                return bad(e, where, key, "'%s' has more than %g layers", value, VX_QNET_MAX_TRUNK, 0);
            if (parse_num(tok, &v) || v != floor(v) || v < k->min || v > k->max)
                return bad(e, where, key, "'%s' needs whole numbers in %g .. %g", value, k->min, k->max);
            vals[n++] = (int)v;
        }
        if (n == 0) return bad(e, where, key, "'%s' is empty", value, 0, 0);
        c->net.n_trunk = n;
        for (int i = 0; i < n; i++) c->net.trunk[i] = vals[i];
        return VX_OK;
    }
    case T_STRLIST: {
        int n = 0;
        const char *p = value;
        while (*p) {
            const char *q = strchr(p, ',');
            size_t len = q ? (size_t)(q - p) : strlen(p);
            while (len && *p == ' ') p++, len--;
            if (len) {
                if (n == VX_TRAIN_MAX_FILES || len >= sizeof c->files[0])
                    return bad(e, where, key, "'%s': too many or too long paths", value, 0, 0);
                memcpy(c->files[n], p, len);
                c->files[n][len] = '\0';
                n++;
            }
            if (!q) break;
            p = q + 1;
        }
        c->n_files = n;
        return VX_OK;
    }
    }
    return VX_ERR_ARG;
}

vx_status vx_train_cfg_load(vx_train_cfg *c, const char *path, vx_err *e)
{
    vx_kv *kv;
    size_t n;
    vx_status st = vx_yaml_read_flat(path, &kv, &n, e);
    if (st) return st;
    for (size_t i = 0; i < n && !st; i++) {
        char where[600];
        snprintf(where, sizeof where, "%s: line %d", path, kv[i].line);
        st = vx_train_cfg_set(c, kv[i].key, kv[i].value, where, e);
    }
    free(kv);
    return st;
}

vx_status vx_train_cfg_check(const vx_train_cfg *c, vx_err *e)
{
    if (c->eps_end > c->eps_start)
        return vx_err_set(e, VX_ERR_ARG, "train.eps_end (%g) is above train.eps_start (%g)",
                          c->eps_end, c->eps_start);
    if (c->dqn.loss == VX_LOSS_C51 && !(c->dqn.v_max > c->dqn.v_min))
        return vx_err_set(e, VX_ERR_ARG, "dqn.v_max must be above dqn.v_min");
    if ((int64_t)c->dqn.batch > c->replay_capacity)
        return vx_err_set(e, VX_ERR_ARG, "dqn.batch (%d) exceeds replay.capacity (%lld)",
                          c->dqn.batch, (long long)c->replay_capacity);
    if (!c->run_dir[0]) return vx_err_set(e, VX_ERR_ARG, "train.run_dir is empty");
    return VX_OK;
}

static void yaml_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

vx_status vx_train_cfg_write(const vx_train_cfg *c, FILE *f)
{
    char section[32] = "";
    for (size_t i = 0; i < N_KEYS; i++) {
        const key_def *k = &keys[i];
        const char *dot = strchr(k->key, '.');
        if (strncmp(section, k->key, (size_t)(dot - k->key)) != 0 ||
            section[dot - k->key] != '\0') {
            snprintf(section, sizeof section, "%.*s", (int)(dot - k->key), k->key);
            fprintf(f, "%s:\n", section);
        }
        fprintf(f, "  %s: ", dot + 1);
        const char *base = (const char *)c + k->off;
        switch (k->type) {
        case T_INT: fprintf(f, "%d", *(const int *)base); break;
        case T_I64: fprintf(f, "%lld", (long long)*(const int64_t *)base); break;
        case T_U64: fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)base); break;
        case T_DBL: fprintf(f, "%.17g", *(const double *)base); break;
        case T_STR: yaml_str(f, base); break;
        case T_ENUM: fprintf(f, "%s", k->names[*(const int *)base]); break;
        case T_INTLIST:
            fputc('[', f);
            for (int j = 0; j < c->net.n_trunk; j++) fprintf(f, "%s%d", j ? ", " : "", c->net.trunk[j]);
            fputc(']', f);
            break;
        case T_STRLIST:
            fputc('[', f);
            for (int j = 0; j < c->n_files; j++) {
                if (j) fputs(", ", f);
                yaml_str(f, c->files[j]);
            }
            fputc(']', f);
            break;
        }
        fputc('\n', f);
    }
    return ferror(f) ? VX_ERR_IO : VX_OK;
}

void vx_train_cfg_print_keys(FILE *f)
{
    for (size_t i = 0; i < N_KEYS; i++) fprintf(f, "  %-26s %s\n", keys[i].key, keys[i].help);
}

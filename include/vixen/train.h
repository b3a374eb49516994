/* train.h — the DQN training run and its evaluation (CPU reference).
 *
 * A run is one folder: config.yaml (every setting, resolved), metrics.csv, TensorBoard event
 * files, checkpoint/latest.safetensors with checkpoint/replay.bin (everything needed to resume to
 * the same result), and eval.json / eval.txt. */
#ifndef VIXEN_TRAIN_H
#define VIXEN_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "vixen/data.h"
#include "vixen/device.h" /* VX_DEVICE_AUTO, _CPU, _CUDA */
#include "vixen/dqn.h"
#include "vixen/env.h"
#include "vixen/replay.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VX_TRAIN_MAX_FILES 16

typedef struct {
    /* data: files (or, with none, the synthetic market) */
    char files[VX_TRAIN_MAX_FILES][512];
    int n_files;
    char instrument[72];
    char cache_dir[512];
    int synth_days;
    uint64_t synth_seed;
    double synth_strength;
    vx_env_cfg env;
    vx_qnet_cfg net;
    vx_dqn_cfg dqn;
    /* replay */
    vx_replay_kind replay_kind;
    int64_t replay_capacity;
    double replay_alpha, replay_eps, beta0;
    int rank_refresh;
    /* schedule */
    int epochs, envs, steps_per_epoch;
    int updates_per_epoch; /* 0: envs · steps / batch · replay_ratio */
    double replay_ratio;
    int warmup;            /* transitions stored before the first update */
    double eps_start, eps_end;
    int eps_decay_epochs;
    int eval_every, checkpoint_every;
    uint64_t seed;
    int device;    /* VX_DEVICE_AUTO (the GPU when one is present), _CPU, _CUDA */
    int overlap;   /* 1: the next epoch's rollout acts with the weights from before this epoch's
                    * updates, so the GPU collects it while this epoch trains (the CPU acts alike) */
    int gpu_graphs; /* 1: rollouts and updates replayed as CUDA graphs; 0: launched kernel by kernel
                     * with a synchronisation after each (the reference path the graphs are
                     * checked against) */
    int batch_set; /* dqn.batch was given: the GPU keeps it instead of choosing one */
    char run_dir[512];
} vx_train_cfg;

void vx_train_cfg_default(vx_train_cfg *c);
/* Sets one dotted key ("dqn.lr", "train.epochs", "net.trunk" = "256,256"); an unknown key or an
 * out-of-range value is an error naming the key (and `where`, e.g. "run.yaml: line 7"). */
vx_status vx_train_cfg_set(vx_train_cfg *c, const char *key, const char *value, const char *where,
                           vx_err *e);
vx_status vx_train_cfg_load(vx_train_cfg *c, const char *yaml_path, vx_err *e);
/* Checks the settings together (after all sets). */
vx_status vx_train_cfg_check(const vx_train_cfg *c, vx_err *e);
/* Writes every key as YAML; the file reads back to the same settings. */
vx_status vx_train_cfg_write(const vx_train_cfg *c, FILE *f);
/* The key list, for `vixen train --help`. */
void vx_train_cfg_print_keys(FILE *f);
int vx_train_updates_per_epoch(const vx_train_cfg *c);
/* The device a run with this config uses: CUDA when asked, or (auto) when this build has CUDA and
 * a device is present; an error when CUDA is asked for and there is none. */
vx_status vx_train_device(const vx_train_cfg *c, int *device, vx_err *e);

/* Opens the market a config names (the cache when files are given, else the synthetic one). */
vx_status vx_train_open_market(const vx_train_cfg *c, vx_market *m, vx_err *e);

/* ---- evaluation ---------------------------------------------------------------------------- */

typedef struct {
    double total_pnl;    /* $ after costs */
    double pnl_per_bar;  /* $ */
    double sharpe;       /* annualised: mean/sd of per-bar PnL · sqrt(bars per year) */
    double max_drawdown; /* $, on the equity curve through all held-out bars */
    double turnover;     /* contracts traded per bar */
    double hit_rate;     /* share of bars with a position that made money */
    double trades;       /* steps that traded */
    double bars;
} vx_eval_metrics;

typedef struct {
    vx_eval_metrics agent, buy_hold, flat;
    size_t episodes;
    int64_t first_row, last_row;
    double bars_per_year;
    double reward_scale; /* $ of one reward unit: a full position's typical one-bar PnL */
} vx_eval_report;

/* Greedy policy (or only the baselines when d is NULL) on the held-out bars, walked in order:
 * consecutive episodes from the split's start, without the stop-out, at the training reward
 * scale. */
vx_status vx_eval_run(const vx_market *m, const vx_env_cfg *env_cfg, vx_dqn *d,
                      vx_eval_report *out, vx_err *e);
void vx_eval_print(FILE *f, const vx_eval_report *r);
void vx_eval_json(FILE *f, const vx_eval_report *r);

/* ---- training ------------------------------------------------------------------------------ */

typedef struct {
    int epoch, epochs;
    int64_t env_steps, updates;
    double loss, q_mean, q_max, grad_norm, epsilon, beta;
    double episode_return; /* mean over episodes that ended this epoch (NaN: none) */
    double episodes;
    double env_steps_per_s, updates_per_s, seconds, eta_seconds;
    int evaluated;
    vx_eval_metrics eval;  /* valid when evaluated */
} vx_epoch_report;

/* Called after every epoch; a non-zero return stops the run there (after a checkpoint), as an
 * interruption would — `vixen train` returns it after Ctrl-C. */
typedef int (*vx_epoch_fn)(const vx_epoch_report *r, void *ctx);

/* Trains from scratch into c->run_dir, or (resume) continues the run there from its checkpoint
 * up to c->epochs. On return the run folder holds the last checkpoint and an evaluation of the
 * policy at that point; `final_eval` (optional) receives it. */
vx_status vx_train_run(const vx_train_cfg *c, int resume, vx_epoch_fn on_epoch, void *ctx,
                       vx_eval_report *final_eval, vx_err *e);

/* Loads a checkpoint's online weights into d (created from the same config). */
vx_status vx_train_load_policy(const char *ckpt_path, vx_dqn *d, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

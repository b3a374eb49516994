/* train.h — a training run, whatever the algorithm: its settings, its run folder, its epochs,
 * validation, checkpoints and resume, and the one evaluation on the test split.
 *
 * A run is one folder: config.yaml (every setting, resolved), metrics.csv, TensorBoard event
 * files, checkpoint/latest.safetensors (the algorithm's tensors and the run's counters) with the
 * side files it names (checkpoint/replay-<epoch>.bin), checkpoint/best.safetensors (the weights
 * that did best on the validation split), eval.json / eval.txt (the test split) and report.html.
 * The algorithm is found by name (train.algo) among those algo.h registers; the run never
 * depends on which. */
#ifndef VIXEN_TRAIN_H
#define VIXEN_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "vixen/algo.h"
#include "vixen/data.h"
#include "vixen/device.h"
#include "vixen/env.h"
#include "vixen/eval.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VX_TRAIN_MAX_FILES 16
#define VX_ALGO_SLOTS 4             /* algorithms the registry can hold */
#define VX_ALGO_SETTINGS_BYTES 2048 /* the largest settings struct of one */

typedef struct {
    /* data: files (or, with none, the synthetic market) */
    char files[VX_TRAIN_MAX_FILES][512];
    int n_files;
    char instrument[72];
    char cache_dir[512];
    uint64_t max_inflate; /* the most bytes a zstd input may inflate to (0: data.h's default) */
    int synth_days;
    uint64_t synth_seed;
    double synth_strength;
    double synth_drift; /* annual log drift of the synthetic market */
    double synth_phi;   /* AR(1) coefficient of its planted signal */
    vx_env_cfg env;
    /* the run */
    int algo; /* train.algo: the registry index of the algorithm */
    int epochs, envs, steps_per_epoch;
    int eval_every;   /* epochs between validations (0: none; the test split is only at the end) */
    int patience;     /* stop after this many validations without a better one (0: never) */
    int max_revisits; /* warn when training steps exceed this many times the training bars */
    int checkpoint_every;
    uint64_t seed;
    int device;            /* VX_DEVICE_AUTO (the GPU when one is present), _CPU, _CUDA: what
                            * `vixen train` opens; vx_train_run takes the device it is given */
    int gpu_graphs;        /* 1: CUDA graphs; 0: kernel by kernel, synchronised (the reference) */
    int final_test;        /* 1: the chosen checkpoint is tested at the end (eval.json, report);
                            * 0: not — a search's trial, whose study tests only its best */
    int async_checkpoints; /* 1: a GPU run's checkpoint is a device snapshot written by a
                            * background thread while training goes on */
    int threads;           /* CPU: the matrix products' threads (0: OpenBLAS's choice), which
                            * `vixen train` gives the device; their count can change a CPU run's
                            * last bits, so a search's trials (1 each) record theirs */
    char run_dir[512];
    /* every registered algorithm's settings, each in its slot (vx_train_algo_settings) */
    _Alignas(16) unsigned char algo_settings[VX_ALGO_SLOTS][VX_ALGO_SETTINGS_BYTES];
} vx_train_cfg;

void vx_train_cfg_default(vx_train_cfg *c);
/* Sets one dotted key ("dqn.lr", "train.epochs", "dqn.trunk" = "256,256"); an unknown key or an
 * out-of-range value is an error naming the key (and `where`, e.g. "run.yaml: line 7"). Keys
 * renamed since earlier versions ("net.trunk", "train.warmup", …) are read as their new names. */
vx_status vx_train_cfg_set(vx_train_cfg *c, const char *key, const char *value, const char *where,
                           vx_err *e);
/* The algorithm whose settings hold `key` (its index in the registry: "dqn.lr", "replay.alpha"
 * are the DQN's), or −1 for the run's own sections (data, env, split, train) and for keys no
 * algorithm has ("ppo.lrr": the key table's own error names those). */
int vx_train_key_algo(const char *key);
vx_status vx_train_cfg_load(vx_train_cfg *c, const char *yaml_path, vx_err *e);
/* The same over YAML text in memory (a checkpoint's "config"); `name` stands for it in errors. */
vx_status vx_train_cfg_load_text(vx_train_cfg *c, const char *text, size_t len, const char *name,
                                 vx_err *e);
/* Checks the settings together (after all sets), the algorithm's included. */
vx_status vx_train_cfg_check(const vx_train_cfg *c, vx_err *e);
/* Writes the run's keys and its algorithm's as YAML; the file reads back to the same settings. */
vx_status vx_train_cfg_write(const vx_train_cfg *c, FILE *f);
/* The same as text (malloc'd; NULL when out of memory): config.yaml, a checkpoint's "config", a
 * study's base config. */
char *vx_train_cfg_text(const vx_train_cfg *c);
/* The key list, for `vixen train --keys`. */
void vx_train_cfg_print_keys(FILE *f);

/* The algorithm registry (src/train/algos.c). */
int vx_algo_count(void);
const vx_algo_ops *vx_algo_at(int i);
const vx_algo_ops *vx_algo_find(const char *name); /* NULL: none of that name */
/* The algorithm a config trains, and a registered algorithm's settings in a config (NULL: no
 * such algorithm). */
const vx_algo_ops *vx_train_algo(const vx_train_cfg *c);
void *vx_train_algo_settings(vx_train_cfg *c, const char *name);
const void *vx_train_algo_settings_c(const vx_train_cfg *c, const char *name);
void vx_train_run_params(const vx_train_cfg *c, vx_run_params *out);

/* Opens the market a config names (the cache when files are given, else the synthetic one); a
 * market held with the same settings (below) is lent instead: a view of its read-only data that
 * owns nothing (vx_market_close on it frees nothing). _own always opens a market of its own. */
vx_status vx_train_open_market(const vx_train_cfg *c, vx_market *m, vx_err *e);
vx_status vx_train_open_market_own(const vx_train_cfg *c, vx_market *m, vx_err *e);
/* The market c names, opened once and held for the process (market_hold.c): every run whose
 * settings name the same market gets a view of it until the last holder releases it, which must
 * come after those runs closed their views. Holding the same market twice counts twice. */
typedef struct vx_market_hold vx_market_hold;
vx_status vx_train_market_hold(const vx_train_cfg *c, vx_market_hold **out, vx_err *e);
void vx_train_market_release(vx_market_hold *h);

/* ---- evaluation (eval.h) ------------------------------------------------------------------- */

/* The greedy policy of a checkpoint (its algorithm from its metadata, its settings from c) on
 * split `split` of m, on the CPU; opts as for vx_eval_run. out->checkpoint names the file and the
 * epoch it holds. Free out with vx_eval_report_free. */
vx_status vx_eval_checkpoint(const vx_train_cfg *c, const char *ckpt_path, const vx_market *m,
                             vx_split split, const vx_eval_opts *opts, vx_eval_report *out,
                             vx_err *e);

/* ---- training ------------------------------------------------------------------------------ */

typedef struct {
    int epoch, epochs;
    int64_t env_steps;
    double episode_return; /* mean over episodes that ended this epoch (NaN: none) */
    double episodes;
    double env_steps_per_s, seconds, eta_seconds;
    int validated;            /* the policy was evaluated on the validation split */
    vx_eval_metrics val;      /* its figures, when validated (period_pnl not kept) */
    int best;                 /* it is the best so far: checkpoint/best.safetensors holds it */
    int checkpointed;         /* a checkpoint of this epoch was written or is being written */
    const vx_metric *metrics; /* the algorithm's, with their values */
    int n_metrics;
    double metric[VX_ALGO_MAX_METRICS];
} vx_epoch_report;

/* The algorithm's metric of that name this epoch; NaN when it has none (or none this epoch). */
double vx_epoch_metric(const vx_epoch_report *r, const char *name);

/* Called after every epoch; a non-zero return stops the run there, as an interruption: the epoch
 * is checkpointed, the test split is not evaluated (that happens once, when the run has finished;
 * --resume gets there) and vx_train_run returns VX_ERR_STOPPED. `vixen train` returns it after
 * Ctrl-C. */
typedef int (*vx_epoch_fn)(const vx_epoch_report *r, void *ctx);

/* Trains from scratch into c->run_dir, or (resume) continues the run there from its checkpoint
 * up to c->epochs, on `dev` (NULL: the CPU). Every eval_every epochs the policy is evaluated on
 * the validation split; the best so far (by Sharpe ratio) is kept as checkpoint/best.safetensors,
 * and with patience > 0 the run stops after that many validations without a better one. At the
 * end, once, the chosen checkpoint (the best, or the last when nothing was validated) is
 * evaluated on the test split next to the baselines and the agent's in-sample row; the run
 * folder gets eval.json, eval.txt and report.html (vx_report_write), and `final_eval`
 * (optional; free it with vx_eval_report_free) receives that report. A run stopped by `on_epoch`
 * returns VX_ERR_STOPPED once its checkpoint is written, with nothing evaluated on the test split.
 * Several runs may share one device from several threads. */
vx_status vx_train_run(const vx_train_cfg *c, vx_device *dev, int resume, vx_epoch_fn on_epoch,
                       void *ctx, vx_eval_report *final_eval, vx_err *e);

/* Walk-forward: `folds` runs of c, fold k in <run_dir>/fold-<k> training on an expanding window
 * and tested once on the k-th block of the test region (split.folds, vx_env_split_rows); then
 * `all` (free it with vx_eval_report_free) holds the report over every fold's test block, and
 * <run_dir> gets config.yaml, walk_forward.txt and walk_forward.json (each fold's report and the
 * whole). With resume, finished folds are re-evaluated, a stopped one resumed. A fold stopped by
 * `on_epoch` ends the walk there (VX_ERR_STOPPED). */
vx_status vx_train_walk_forward(const vx_train_cfg *c, vx_device *dev, int folds, int resume,
                                vx_epoch_fn on_epoch, void *ctx, vx_eval_report *all, vx_err *e);

/* ---- fused trials (group.c) -----------------------------------------------------------------
 * K runs whose settings agree but for their own (seed, folder, patience, …) and the algorithm's
 * member_keys (algo.h) may train as one group: their algorithm instances made at once by the
 * algorithm's create_group, and their epochs run together by its epoch_group. Each run is still
 * its own — folder, environments, metrics, validation, best checkpoint, stop — and gives what it
 * gives alone (bit for bit, or within the tolerance the algorithm states where it fuses). The
 * members' epochs go in lockstep: the group's epoch runs once every member still in the group
 * has asked for it, on the thread of the last one to ask; a run that ends (pruned, out of
 * patience, failed) leaves, and the others go on. A member's run never checkpoints (a search's
 * trial: train.checkpoint_every 0), so a group is never resumed. */
typedef struct vx_train_group vx_train_group;

/* The key that keeps b out of a group with a (dotted, into key), or "" when they may be one:
 * the same algorithm, with a group op, and every key not theirs alone agreeing. */
void vx_train_group_key(const vx_train_cfg *a, const vx_train_cfg *b, char *key, size_t n);
/* A group of K runs whose algorithm instances live on a share of dev (vx_device_share, `label`;
 * dev NULL: the CPU's context), made when they are: of `budget` bytes, or (budget 0) of what the
 * members' own devices had left when they joined, together — so a member gets no room it would
 * not have had alone. With dev NULL, budget 0 and members on no device: on no share. */
vx_status vx_train_group_create(int K, vx_device *dev, size_t budget, const char *label,
                                vx_train_group **out, vx_err *e);
/* vx_train_run (not resumed, no final evaluation returned) of member k: its environments on dev,
 * its algorithm instance the group's. Each of the K members must be run (or vx_train_group_leave
 * called for it), each on a thread of its own, or the others wait for it. */
vx_status vx_train_run_member(const vx_train_cfg *c, vx_device *dev, vx_train_group *g, int k,
                              vx_epoch_fn on_epoch, void *ctx, vx_err *e);
/* Member k will not run (or has ended): the others stop waiting for it. */
void vx_train_group_leave(vx_train_group *g, int k);
/* Member k's run takes no more epochs (it is finishing: its instance stays until it leaves). */
void vx_train_group_retire(vx_train_group *g, int k);
/* Whether the group itself failed (its creation or a group epoch) and its failure reached member
 * k's run (k < 0: whether it failed at all), and why. */
int vx_train_group_failed(const vx_train_group *g, int k, vx_err *why);
/* The most bytes its share held, divided among its members (after every member has left). */
size_t vx_train_group_peak(const vx_train_group *g);
/* After every member has left. */
void vx_train_group_free(vx_train_group *g);

/* ---- the run report ------------------------------------------------------------------------ */

/* Writes <run_dir>/report.html, one self-contained page (inline CSS and SVG, nothing fetched)
 * made from the run folder's eval.json, metrics.csv and config.yaml: what was evaluated and the
 * warnings, the evaluation table, equity curves of the agent and the baselines, the agent's
 * drawdown, loss and validation Sharpe per epoch with the chosen checkpoint, the agent's action
 * histograms, the config. vx_train_run calls it at the end. A missing or malformed input is an
 * error naming the file (and line or field), and then no page is written (the old one stays). */
vx_status vx_report_write(const char *run_dir, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

/* algo.h — the algorithm interface: everything a training run (train.h) needs of a learning
 * algorithm, as one table of functions (like ggml's backend interface). The run owns the run
 * folder, the general settings, the market and the environments, the epoch loop, metrics,
 * checkpoints, resume, Ctrl-C and evaluation; an algorithm owns its settings, its learner, how it
 * collects experience from the environments, and its state. The run never knows which algorithm
 * it runs: it finds them in a registry (src/train/algos.c) by name (`train.algo`).
 *
 * To add an algorithm: write a vx_algo_ops (src/dqn/dqn_algo.c is the example), list it in
 * src/train/algos.c, and its keys appear in `vixen train --keys`, its metrics in metrics.csv and
 * TensorBoard, its tensors in checkpoints. Inside, an algorithm picks its CPU or CUDA backend from
 * the device it is given (vx_device_backend), so the run is the same on both.
 *
 * Lifetime: create (fresh weights, or then restore from a checkpoint) → epoch × E, with snapshot
 * and save at checkpoints and policy at evaluations → free. An instance is used by one thread at a
 * time; many instances may share one device (trials of a search). */
#ifndef VIXEN_ALGO_H
#define VIXEN_ALGO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "vixen/device.h"
#include "vixen/env.h"
#include "vixen/io.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VX_ALGO_MAX_METRICS 16
#define VX_ALGO_MAX_TENSORS 96
#define VX_ALGO_MAX_META 16
#define VX_ALGO_MAX_FILES 2

/* The general settings of the run an algorithm may read. */
typedef struct {
    int envs;              /* N environments stepped together */
    int steps_per_epoch;   /* T steps of each environment per epoch */
    int epochs;            /* epochs planned (schedules anneal over them) */
    int checkpoint_every;  /* epochs between checkpoints */
    uint64_t seed;         /* of everything random */
    int gpu_graphs;        /* 0: launch kernel by kernel and synchronise (the reference path) */
    int async_checkpoints; /* 1: checkpoints may be device snapshots written in the background */
} vx_run_params;

/* What an instance is created from. */
typedef struct {
    const void *settings; /* the algorithm's own settings struct (settings_size bytes) */
    const vx_run_params *run;
    vx_device *dev;   /* where it runs; NULL: the CPU */
    vx_env *env;      /* the training environments, on dev; NULL: an instance that only
                       * acts (evaluating a checkpoint) */
    size_t mem_share; /* device bytes it may plan for (0: what dev has available) */
} vx_algo_init;

/* One metric column: a CSV column, the TensorBoard tag "train/<name>", and (fmt) a piece of the
 * progress line. */
typedef struct {
    const char *name;
    const char *fmt; /* printf format of one double, e.g. "loss %.4g"; NULL: not printed */
    int timing;      /* a speed, not a result: runs that should agree may differ in it */
} vx_metric;

typedef struct {
    int epoch;    /* 0-based: the epoch about to run */
    int snapshot; /* 1: the run checkpoints after this epoch: prepare the state for it */
} vx_epoch_in;

typedef struct {
    int64_t env_steps;                  /* environment steps collected this epoch */
    double episodes;                    /* episodes that ended during them */
    double return_sum;                  /* the sum of those episodes' returns (reward units) */
    double collect_s;                   /* time spent collecting (device time on a GPU) */
    double metric[VX_ALGO_MAX_METRICS]; /* the algorithm's metrics, in its table's order; NaN:
                                         * none this epoch */
    /* Non-empty: this run's learning produced numbers that are not finite (a loss, a gradient
     * norm) and can only go on from garbage; the run stops with this message (VX_ERR_DIVERGED).
     * It is one run's alone: a group's other members go on. */
    char diverged[256];
} vx_epoch_out;

/* A greedy policy for evaluation: actions (n × VX_ACTION_BRANCHES) for n observations (n × D),
 * both in host memory. */
typedef struct {
    vx_status (*act)(void *ctx, const float *obs, int n, int32_t *actions, vx_err *e);
    void *ctx;
} vx_policy;

/* The state of an instance for a checkpoint, as save() gives it: tensors and counters (host
 * memory, valid until the next call on the instance), and side files written by callbacks (the
 * replay buffer: too large for the tensor file and written in chunks). `wait` (may be NULL) blocks
 * until the tensors' data is complete (a GPU copies it asynchronously). When `detached`, the data
 * is a snapshot that training no longer touches: the run may write it from another thread while
 * the next epochs run, until it calls snapshot again. */
typedef struct {
    vx_tensor tensors[VX_ALGO_MAX_TENSORS];
    size_t n_tensors;
    char meta_key[VX_ALGO_MAX_META][48];
    char meta_val[VX_ALGO_MAX_META][48];
    size_t n_meta;
    struct {
        const char *name; /* "replay": the file is checkpoint/<name>-<epoch>.bin */
        vx_status (*write)(void *ctx, const char *path, vx_err *e);
        void *ctx;
    } files[VX_ALGO_MAX_FILES];
    size_t n_files;
    int detached;
    vx_status (*wait)(void *ctx, vx_err *e);
    void *wait_ctx;
} vx_algo_state;

/* Appends a tensor (up to 3 dimensions; data in host memory) to a state; a full state ignores
 * it (VX_ALGO_MAX_TENSORS is sized for the largest network, with a static check in each
 * algorithm). */
static inline void vx_algo_state_add(vx_algo_state *o, const char *name, vx_dtype dt, int ndim,
                                     int64_t d0, int64_t d1, int64_t d2, const void *data)
{
    if (o->n_tensors == VX_ALGO_MAX_TENSORS) return;
    vx_tensor *x = &o->tensors[o->n_tensors++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->dtype = dt;
    x->ndim = ndim;
    x->shape[0] = d0, x->shape[1] = d1, x->shape[2] = d2;
    x->data = data;
}

/* Appends an integer counter to a state's metadata. */
static inline void vx_algo_state_meta(vx_algo_state *o, const char *key, long long v)
{
    if (o->n_meta == VX_ALGO_MAX_META) return;
    snprintf(o->meta_key[o->n_meta], sizeof o->meta_key[0], "%s", key);
    snprintf(o->meta_val[o->n_meta], sizeof o->meta_val[0], "%lld", v);
    o->n_meta++;
}

/* A checkpoint being restored: its tensors and metadata, and where its side files are. */
typedef struct {
    const vx_safetensors *st;
    const char *dir; /* the checkpoint folder */
} vx_ckpt_view;

/* The path of side file `name` of a checkpoint (its metadata "file.<name>" names it inside the
 * checkpoint folder); an error naming the checkpoint and field when missing. */
static inline vx_status vx_ckpt_file(const vx_ckpt_view *ck, const char *name, char *path, size_t n,
                                     vx_err *e)
{
    char key[64];
    snprintf(key, sizeof key, "file.%s", name);
    const char *f = vx_safetensors_meta(ck->st, key);
    if (!f || !*f || strchr(f, '/'))
        return vx_err_line(e, VX_ERR_FORMAT, ck->st->path, -1, key, "no %s file named", name);
    snprintf(path, n, "%s/%s", ck->dir, f);
    return VX_OK;
}

typedef struct vx_algo vx_algo; /* an instance */

typedef struct vx_algo_ops {
    const char *name;    /* "dqn": the value of train.algo */
    const char *summary; /* one line for --help */

    /* settings: a plain struct the run stores and binds to the algorithm's key sections */
    size_t settings_size;
    void (*settings_default)(void *settings);
    const vx_section *const *sections; /* NULL-terminated: its keys in the one key table */
    vx_status (*settings_check)(const void *settings, const vx_run_params *run, vx_err *e);

    const vx_metric *metrics;
    int n_metrics;

    vx_status (*create)(const vx_algo_init *init, vx_algo **out, vx_err *e);
    /* The settings as resolved at creation (a GPU may choose the batch): written to config.yaml. */
    void (*settings_resolved)(const vx_algo *a, void *settings);
    /* One line for the log: where it runs and what it chose ("on the GPU, batch 1024, …"). */
    void (*describe)(const vx_algo *a, char *buf, size_t n);
    /* One epoch: collect run->steps_per_epoch steps of every environment, learn from them. */
    vx_status (*epoch)(vx_algo *a, const vx_epoch_in *in, vx_epoch_out *out, vx_err *e);
    /* The greedy policy as of now (on a GPU this copies the weights to the host once). */
    vx_status (*policy)(vx_algo *a, vx_policy *out, vx_err *e);
    /* The tensors (and metadata) the last policy() acts with, for a checkpoint that is only ever
     * evaluated (checkpoint/best.safetensors): restore(weights_only = 1) reads them back. Host
     * memory, valid until the next call; it changes nothing in training. */
    vx_status (*policy_state)(vx_algo *a, vx_algo_state *out, vx_err *e);
    /* The state for a checkpoint after the epoch just run. final: the run ends (or stops) here, so
     * nothing may stay in flight. */
    vx_status (*save)(vx_algo *a, int final, vx_algo_state *out, vx_err *e);
    /* Back to a saved state (counters, tensors, side files). weights_only: only what acting needs
     * (evaluating a checkpoint). */
    vx_status (*restore)(vx_algo *a, const vx_ckpt_view *ck, int weights_only, vx_err *e);
    /* Device bytes this instance reserved. */
    size_t (*reserved)(const vx_algo *a);
    void (*free)(vx_algo *a);

    /* ---- fused trials (optional: an algorithm without them leaves these NULL) ----------------
     * K runs whose settings agree but for member_keys make one group (train.h, vx_train_group):
     * create_group makes their K instances at once (in[k] run k's, each with its own settings,
     * seed and environments; every in[k].dev the same), and epoch_group runs one epoch of every
     * member still in the group (a[k] NULL: run k has left and freed its instance; in[k] and
     * out[k] are run k's). Everything else (policy, save, free, …) is called on one member, as
     * on an instance of its own. A member's results are its run's alone: bit for bit where the
     * group runs the same arithmetic, else within the tolerance the algorithm's notes state.
     * member_keys: the keys (besides the run's own: train.seed, train.run_dir, …) members may
     * differ in; every other key must agree. fuses(kind): 1 where create_group really fuses the
     * members' work on a device of that kind, each member's results bit for bit its run's alone
     * (a search groups trials there by default); 2 where it fuses them within a tolerance (a
     * search groups them only when asked: its results would then depend on how many trials ran
     * at once); 0 where it runs them one after another (the reference, grouped only when
     * asked). */
    const char *const *member_keys; /* NULL-terminated */
    int (*fuses)(int device_kind);
    vx_status (*create_group)(const vx_algo_init *in, int K, vx_algo **out, vx_err *e);
    vx_status (*epoch_group)(vx_algo *const *a, int K, const vx_epoch_in *in, vx_epoch_out *out,
                             vx_err *e);
} vx_algo_ops;

/* An instance begins with this; an algorithm's own struct embeds it as its first member. */
struct vx_algo {
    const vx_algo_ops *ops;
};

#ifdef __cplusplus
}
#endif

#endif

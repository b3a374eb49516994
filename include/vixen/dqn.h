/* dqn.h — the branching dueling Double-DQN: the algorithm (vx_algo_dqn, behind algo.h), its
 * settings, and the CPU reference pieces its backends and the tests use — the learner's update
 * step (losses in dqn_loss.h), ε-greedy acting and n-step transitions (dqn_act.h).
 *
 * Shapes: B = batch, N = environments, D = VX_OBS_DIM, O = the Q-network's output row (nn.h). */
#ifndef VIXEN_DQN_H
#define VIXEN_DQN_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/algo.h"
#include "vixen/dqn_loss.h"
#include "vixen/nn.h"
#include "vixen/replay.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the learner's settings and the CPU reference learner ------------------------------------ */

typedef struct {
    int loss;            /* VX_LOSS_MSE, VX_LOSS_HUBER (default), VX_LOSS_C51 */
    double gamma;        /* 0.99 */
    double huber_kappa;  /* 1 */
    int atoms;           /* C51 support size (51); 1 for the other losses */
    double v_min, v_max; /* C51 support, −10 .. 10 */
    int n_step;          /* 1 */
    int target_every;    /* hard copy every C updates (1000) when tau is 0 */
    double tau;          /* Polyak averaging weight per update; 0 = hard copies */
    double grad_clip;    /* global-norm clip, 10; 0 = off */
    int batch;           /* 256 */
    int tf32;            /* GPU only: TF32 tensor-core GEMMs (0: float32, as the CPU) */
    int fused;           /* GPU only, a learner alone: its update in two fused kernels where
                          * they take its network and loss — 0 never, 1 where they measured
                          * faster (past VX_DQN_FUSED_BATCH; the default), 2 always,
                          * 3 always and layer by layer (dqn_layers.h) */
    vx_adam_cfg adam;
} vx_dqn_cfg;

/* dqn.fused = 1 (the default) takes the fused update past this batch: at 1,024 rows it measured
 * slower than a GEMM a layer, at 4,096 faster (docs/benchmarks.md, 2026-12-07). */
#define VX_DQN_FUSED_BATCH 2048

void vx_dqn_cfg_default(vx_dqn_cfg *c);
/* The settings' own checks; the error names the key (dqn.gamma, …). */
vx_status vx_dqn_cfg_check(const vx_dqn_cfg *c, vx_err *e);
/* The network the learner trains for `net` (trunk and head widths) on `env_shape` inputs: the
 * input width, branches and atoms filled in; and its output row's shape for the loss. */
vx_status vx_dqn_layout(const vx_dqn_cfg *c, const vx_qnet_cfg *net, vx_qnet_layout *L,
                        vx_loss_shape *shape, vx_err *e);

typedef struct {
    vx_dqn_cfg cfg;
    vx_qnet_layout L;
    vx_loss_shape shape;
    float *online, *target, *grads;
    vx_adam adam;
    vx_qnet_ws ws_s, ws_next, ws_target;
    float *dq;       /* B × O */
    float *priority; /* B: the new priorities' |δ| part, after an update */
    int64_t updates;
} vx_dqn;

typedef struct {
    double loss, grad_norm, q_mean, q_max, priority_mean;
} vx_dqn_update_stats;

/* The CPU learner for network `net` (vx_qnet_cfg_default's input and branches when in_dim is 0). */
vx_status vx_dqn_create(const vx_dqn_cfg *cfg, const vx_qnet_cfg *net, uint64_t seed, vx_dqn *out,
                        vx_err *e);
void vx_dqn_free(vx_dqn *d);

/* One gradient step on a sampled batch: forward online(s), online(s'), target(s'); loss;
 * backward; clip; Adam; target sync. Afterwards d->priority holds each sample's new priority
 * input (mean |δ| or mean cross-entropy) for vx_replay_update. */
void vx_dqn_update(vx_dqn *d, const vx_replay_batch *b, int B, vx_dqn_update_stats *st);

/* ε-greedy actions (dqn_act.h) for N observations with the weights `params` (NULL: the online
 * ones) at acting step `step`. ws must hold at least one row; eps = 0 is the greedy policy.
 * q_mean_out (may be NULL): the mean greedy Q. */
void vx_dqn_act(vx_dqn *d, const float *params, vx_qnet_ws *ws, const float *obs, int N, double eps,
                uint64_t seed, uint64_t step, int32_t *actions, double *q_mean_out);

/* Copies online → target. */
void vx_dqn_sync_target(vx_dqn *d);

/* n-step transitions per environment (n = 1 passes every step through). Push each step's
 * (obs, action, reward, flags, next_obs); complete transitions are appended to `out`. */
typedef struct {
    int n, N, D;
    double gamma;
    int *count;   /* pending per env */
    int *head;    /* ring start per env */
    float *obs;   /* N × n × D */
    int32_t *act; /* N × n × VX_ACTION_BRANCHES */
    float *rew;   /* N × n */
} vx_nstep;

typedef struct {
    size_t n, cap;
    float *obs, *next_obs, *rewards;
    int32_t *actions;
    uint8_t *terminated, *truncated, *steps;
} vx_transition_buf;

vx_status vx_nstep_create(int n, int N, int D, double gamma, vx_nstep *out, vx_err *e);
void vx_nstep_free(vx_nstep *s);
vx_status vx_tbuf_reserve(vx_transition_buf *t, size_t cap, int D, vx_err *e);
void vx_tbuf_free(vx_transition_buf *t);
/* next_obs: the observation after the step (for an ended episode, the pre-reset final one). */
void vx_nstep_push(vx_nstep *s, const float *obs, const int32_t *actions, const float *rewards,
                   const uint8_t *terminated, const uint8_t *truncated, const float *next_obs,
                   vx_transition_buf *out);
vx_transitions vx_tbuf_view(const vx_transition_buf *t);

/* ---- the algorithm --------------------------------------------------------------------------- */

/* Everything `dqn.*` and `replay.*` set. */
typedef struct {
    vx_dqn_cfg learner;
    int trunk[VX_QNET_MAX_TRUNK], n_trunk; /* dqn.trunk: widths of the shared trunk */
    int head_hidden;                       /* dqn.head_hidden: value/advantage hidden width */
    vx_replay_kind replay_kind;
    int64_t replay_capacity;
    double replay_alpha, replay_eps, beta0;
    int64_t beta_updates; /* updates over which β rises from beta0 to 1 */
    int rank_refresh;
    int updates_per_epoch; /* 0: envs · steps / batch · replay_ratio */
    double replay_ratio;
    int warmup; /* transitions stored before the first update */
    double eps_start, eps_end;
    int eps_decay_epochs;
    int overlap;   /* 1: the next epoch's rollout acts with the weights from before this epoch's
                    * updates, so a GPU collects it while this epoch trains (the CPU acts alike) */
    int batch_set; /* dqn.batch was given: a GPU keeps it instead of choosing one */
    int acting;    /* dqn.acting, GPU only: VX_ACTING_FLOAT32 (a GEMM a layer, whose actions the
                    * CPU's match), VX_ACTING_TF32, VX_ACTING_TF32X3 or VX_ACTING_BF16 (the
                    * forward pass, the actions and the environments' step in one fused kernel on
                    * tensor cores) */
} vx_dqn_settings;

enum { VX_ACTING_FLOAT32, VX_ACTING_TF32, VX_ACTING_TF32X3, VX_ACTING_BF16 };

void vx_dqn_settings_default(vx_dqn_settings *s);
/* The Q-network configuration the settings describe. */
void vx_dqn_net_cfg(const vx_dqn_settings *s, vx_qnet_cfg *out);
int vx_dqn_updates_per_epoch(const vx_dqn_settings *s, const vx_run_params *run);
double vx_dqn_epsilon_at(const vx_dqn_settings *s, int epoch);
/* β after `updates` updates: beta0 + (1 − beta0) · min(1, updates / beta_updates) — a function
 * of the training done, so planning a longer run does not change an early epoch. */
double vx_dqn_beta_at(const vx_dqn_settings *s, int64_t updates);

extern const vx_algo_ops vx_algo_dqn;

#ifdef __cplusplus
}
#endif

#endif

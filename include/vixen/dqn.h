/* dqn.h — the branching Double-DQN learner (CPU reference): ε-greedy acting, n-step
 * transitions, the update step (losses in dqn_loss.h), target-network sync.
 *
 * Shapes: B = batch, N = environments, D = 51, O = the Q-network's output row (nn.h). */
#ifndef VIXEN_DQN_H
#define VIXEN_DQN_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/dqn_loss.h"
#include "vixen/nn.h"
#include "vixen/replay.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int loss;           /* VX_LOSS_MSE, VX_LOSS_HUBER (default), VX_LOSS_C51 */
    double gamma;       /* 0.99 */
    double huber_kappa; /* 1 */
    int atoms;          /* C51 support size (51); 1 for the other losses */
    double v_min, v_max;/* C51 support, −10 .. 10 */
    int n_step;         /* 1 */
    int target_every;   /* hard copy every C updates (1000) when tau is 0 */
    double tau;         /* Polyak averaging weight per update; 0 = hard copies */
    double grad_clip;   /* global-norm clip, 10; 0 = off */
    int batch;          /* 256 */
    int tf32;           /* GPU only: TF32 tensor-core GEMMs (0: float32, as the CPU) */
    vx_adam_cfg adam;
} vx_dqn_cfg;

void vx_dqn_cfg_default(vx_dqn_cfg *c);

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

/* qcfg's atoms is set from cfg (C51: cfg->atoms, otherwise 1). */
vx_status vx_dqn_create(const vx_dqn_cfg *cfg, const vx_qnet_cfg *qcfg, uint64_t seed,
                        vx_dqn *out, vx_err *e);
void vx_dqn_free(vx_dqn *d);

/* One gradient step on a sampled batch: forward online(s), online(s'), target(s'); loss;
 * backward; clip; Adam; target sync. Afterwards d->priority holds each sample's new priority
 * input (mean |δ| or mean cross-entropy) for vx_replay_update. */
void vx_dqn_update(vx_dqn *d, const vx_replay_batch *b, int B, vx_dqn_update_stats *st);

/* ε-greedy per branch: each branch of each environment independently explores with probability
 * eps. Random numbers come from Philox stream (seed, 2^40 + env) at counter `step`, so a GPU
 * twin can draw the same. eps = 0 is the greedy policy. ws must hold at least one row. */
void vx_dqn_act(vx_dqn *d, vx_qnet_ws *ws, const float *obs, int N, double eps, uint64_t seed,
                uint64_t step, int32_t *actions, double *q_mean_out);

/* Copies online → target. */
void vx_dqn_sync_target(vx_dqn *d);

/* n-step transitions per environment (n = 1 passes every step through). Push each step's
 * (obs, action, reward, flags, next_obs); complete transitions are appended to `out`. */
typedef struct {
    int n, N, D;
    double gamma;
    int *count;      /* pending per env */
    int *head;       /* ring start per env */
    float *obs;      /* N × n × D */
    int32_t *act;    /* N × n × 3 */
    float *rew;      /* N × n */
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

#ifdef __cplusplus
}
#endif

#endif

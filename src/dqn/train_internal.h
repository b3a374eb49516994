/* train_internal.h — what the training loop (train.c) shares with its GPU backend
 * (train_cuda.cu). Not part of the public API.
 *
 * The trainer holds the host side of a run: the market, the CPU environments (on the GPU path
 * a host mirror of the device environments' states, which checkpoints read), the learner (on
 * the GPU path a host mirror of the weights and Adam's moments, filled before each evaluation
 * and checkpoint), the n-step accumulator, observations and counters. The GPU backend does the
 * epoch's collection and updates; everything else — the run folder, metrics, evaluation,
 * checkpoint files — is the same code for both. */
#ifndef VIXEN_TRAIN_INTERNAL_H
#define VIXEN_TRAIN_INTERNAL_H

#include "vixen/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vx_train_gpu vx_train_gpu;

typedef struct {
    vx_train_cfg cfg;
    vx_market market;
    vx_env *env;
    vx_dqn dqn;
    vx_replay *replay;
    vx_nstep ns;
    vx_transition_buf tbuf;
    vx_qnet_ws act_ws;
    float *obs, *next_obs, *final_obs, *merged, *rew;
    int32_t *act;
    uint8_t *te, *tr;
    double *ep_ret;
    /* batch */
    float *b_obs, *b_next, *b_rew, *b_w;
    int32_t *b_act;
    uint8_t *b_te, *b_tr, *b_steps;
    uint32_t *b_idx, *b_gen;
    /* overlap: acting reads these weights, the online ones as they were before the previous
     * epoch's updates (the GPU collects an epoch ahead while training; the CPU acts alike) */
    float *act_params;
    int collected_ahead; /* resumed after a stop: this epoch's rollout is already in the buffer */
    vx_train_gpu *gpu;   /* NULL: the CPU path */
    /* counters */
    int epoch; /* epochs completed */
    int64_t env_steps;
    uint64_t act_step;
    char ckpt_path[1100], replay_path[1100];
} vx_trainer;


/* What one epoch's collection and updates report. */
typedef struct {
    double collect_s, learn_s;
    double return_sum, episodes;
    int updates; /* 0: none (warm-up) */
    vx_dqn_update_stats stats;
} vx_epoch_work;

#ifdef VX_HAVE_CUDA
/* train_cuda.cu: the GPU backend. create uploads the trainer's state (fresh or resumed). */
vx_status vx_train_gpu_create(vx_trainer *t, vx_train_gpu **out, vx_err *e);
void vx_train_gpu_free(vx_train_gpu *g);
/* The trainer's host state (after a resume) → the device. */
vx_status vx_train_gpu_push(vx_train_gpu *g, vx_trainer *t, vx_err *e);
/* Epoch t->epoch: collection (unless collected ahead), insert, the snapshot for the next
 * rollout, K updates; waits at the end for the statistics only. */
vx_status vx_train_gpu_epoch(vx_train_gpu *g, vx_trainer *t, int K, vx_epoch_work *w, vx_err *e);
/* Device → the trainer's host mirrors: weights only (full = 0, for evaluation) or everything a
 * checkpoint holds (full = 1; a rollout collected ahead is first inserted). */
vx_status vx_train_gpu_pull(vx_train_gpu *g, vx_trainer *t, int full, vx_err *e);
vx_status vx_train_gpu_save_replay(vx_train_gpu *g, const char *path, uint64_t *inserted, vx_err *e);
vx_status vx_train_gpu_load_replay(vx_train_gpu *g, const char *path, uint64_t *inserted, vx_err *e);
#endif

double vx_train_epsilon_at(const vx_train_cfg *c, int epoch);
double vx_train_beta_at(const vx_train_cfg *c, int epoch);

#ifdef __cplusplus
}
#endif

#endif

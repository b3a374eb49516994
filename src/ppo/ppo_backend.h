/* ppo_backend.h — the seam between the PPO algorithm (ppo_algo.c: settings, schedules,
 * metrics, checkpoint tensors, the policy) and where it runs: the CPU reference
 * (ppo_backend_cpu.c) or, registered as a device's "ppo" backend, a CUDA twin. Internal.
 *
 * A backend owns the actor-critic, its optimizer, the rollout storage and the collection from
 * the environments it is given. One iteration: a rollout of T steps (normalised observations
 * with the statistics frozen for the iteration, sampled actions with their log-probabilities,
 * values, rewards, flags, and the value of each truncated episode's final observation), GAE,
 * `update_epochs` passes of shuffled minibatches, then the observation statistics take in the
 * rollout. The state a checkpoint holds is exchanged through host arrays the backend owns. */
#ifndef VIXEN_PPO_BACKEND_H
#define VIXEN_PPO_BACKEND_H

#include <math.h>
#include "vixen/env.h"
#include "vixen/hd.h"
#include "vixen/ppo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VX_PPO_PERM_STREAM (4ull << 40) /* Philox streams of the minibatch shuffles */

typedef struct {
    const vx_ppo_settings *s;
    const vx_run_params *run;
    const vx_ac_layout *L;
    vx_device *dev;
    vx_env *env;
    const float *init_params; /* host: the initial weights */
} ppo_init;

/* Everything a checkpoint holds. Host memory owned by the backend. */
typedef struct {
    float *params, *adam_m, *adam_v; /* n_params each */
    double *obs_mean, *obs_var;      /* D each: the running observation statistics */
    double obs_count;
    vx_env_state *env; /* N */
    float *obs;        /* N × D: the current raw observations */
    double *ep_ret;    /* N: the running episode returns */
    int64_t adam_t, updates;
    uint64_t act_step; /* acting steps taken: the Philox counter of the sampling draws */
    int64_t iterations;
} ppo_state;

typedef struct {
    int epoch; /* 0-based: the iteration */
    double lr; /* this iteration's learning rate */
} ppo_plan;

typedef struct {
    double collect_s, learn_s;
    double return_sum, episodes;
    int64_t env_steps;
    int updates; /* minibatch updates run (fewer than planned after a target-KL stop) */
    double pg_loss, v_loss, entropy, approx_kl, clipfrac, explained_var, grad_norm;
} ppo_result;

typedef struct ppo_backend ppo_backend;

typedef struct {
    const char *name;
    vx_status (*create)(const ppo_init *init, ppo_backend **out, ppo_state **state, vx_err *e);
    void (*free)(ppo_backend *b);
    void (*describe)(const ppo_backend *b, char *buf, size_t n);
    vx_status (*iteration)(ppo_backend *b, const ppo_plan *p, ppo_result *r, vx_err *e);
    /* The weights and the observation statistics the policy acts with, into host memory. */
    vx_status (*weights)(ppo_backend *b, float *params, double *obs_mean, double *obs_var,
                         vx_err *e);
    /* Fills the state buffer for a checkpoint (synchronous). */
    vx_status (*save)(ppo_backend *b, vx_err *e);
    /* Back to the state buffer's content. */
    vx_status (*restore)(ppo_backend *b, vx_err *e);
    size_t (*reserved)(const ppo_backend *b);
} ppo_backend_ops;

extern const ppo_backend_ops vx_ppo_backend_cpu;
/* src/ppo/ppo_backend_cuda.cu; registered as a CUDA device's "ppo" backend */
extern const ppo_backend_ops vx_ppo_backend_cuda;

/* One minibatch, gathered: M samples of the rollout. */
typedef struct {
    size_t M;
    const float *obs;   /* M × D, normalised as the rollout saw them */
    const int32_t *act; /* M × 3 */
    const float *logp;  /* log π_old(a|s) */
    const float *val;   /* V_old(s) */
    const float *adv;   /* raw advantages (normalised here when ppo.norm_adv) */
    const float *ret;   /* returns */
} ppo_minibatch;

typedef struct {
    double loss, pg, v, entropy, approx_kl, clipfrac; /* means over the minibatch */
} ppo_minibatch_stats;

/* The CPU reference of one minibatch's loss and gradient (before the clip and Adam): advantages
 * normalised by the minibatch's mean and sample standard deviation when configured, the forward
 * pass, each sample's loss (ppo_math.h), and the backward pass into grads (dz, dv: M × 15 and M
 * floats of scratch; ws sized for M rows). */
void vx_ppo_minibatch(const vx_ac_layout *L, const float *params, const vx_ppo_settings *s,
                      const ppo_minibatch *mb, vx_ac_ws *ws, float *dz, float *dv, float *grads,
                      ppo_minibatch_stats *out);

/* The observation normalisation both backends apply: (x − mean) / sqrt(var + 1e-8), clipped to
 * ±clip; with norm_obs off, x as it is. */
VX_HD static inline float vx_ppo_norm_obs(float x, double mean, double var, double clip, int on)
{
    if (!on) return x;
    double z = ((double)x - mean) / sqrt(var + 1e-8);
    return (float)(z > clip ? clip : z < -clip ? -clip : z);
}

#ifdef __cplusplus
}
#endif

#endif

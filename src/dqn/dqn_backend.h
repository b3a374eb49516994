/* dqn_backend.h — the seam between the DQN algorithm (dqn_algo.c: settings, schedules, metrics,
 * checkpoint tensors, the policy) and where it runs: the CPU reference (dqn_backend_cpu.c) or a
 * CUDA device (dqn_backend_cuda.cu, registered as the device's "dqn" backend). Internal.
 *
 * A backend owns the learner, the replay buffer and the collection from the environments it is
 * given: one epoch is collection (N × T steps, ε-greedy, n-step transitions) then K updates. With
 * overlap on, the rollout of epoch e + 1 acts with the weights as they were before epoch e's
 * updates (a GPU collects it while epoch e trains; the CPU acts with the same snapshot, so both
 * compute the same thing). The state a checkpoint holds (everything but the replay buffer) is
 * exchanged through host arrays the backend allocates (pinned on a GPU). */
#ifndef VIXEN_DQN_BACKEND_H
#define VIXEN_DQN_BACKEND_H

#include "vixen/dqn.h"
#include "vixen/env.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const vx_dqn_settings *s; /* as resolved by the algorithm */
    const vx_run_params *run;
    const vx_qnet_layout *L;
    const vx_loss_shape *shape;
    vx_device *dev;
    vx_env *env;
    const float *init_params; /* host: the initial online weights (the target starts equal) */
    size_t mem_share;         /* device bytes it may plan for */
} dqn_init;

/* Everything a checkpoint holds but the replay buffer. Host memory owned by the backend. */
typedef struct {
    float *online, *target, *adam_m, *adam_v; /* n_params each */
    float *acting;                            /* n_params: the weights the next rollout acts with */
    vx_env_state *env;                        /* N */
    float *obs;                               /* N × D: the current observations */
    double *ep_ret;                           /* N: the running episode returns */
    int64_t *nstep_count_head;                /* 2 × N: pending count, then ring head */
    float *nstep_obs;                         /* N × n × D */
    int32_t *nstep_act;                       /* N × n × VX_ACTION_BRANCHES */
    float *nstep_rew;                         /* N × n */
    int64_t adam_t, updates;
    uint64_t act_step;        /* acting steps taken (the Philox counter of the acting draws) */
    uint64_t replay_inserted; /* transitions ever inserted: ties the replay file to the state */
    int collected_ahead;      /* the next epoch's rollout is already in the replay buffer */
} dqn_state;

typedef struct {
    int epoch;       /* 0-based */
    double eps;      /* ε of this epoch's rollout */
    double next_eps; /* ε of the next one (collected ahead with overlap) */
    double beta;
    int K;        /* updates once the buffer is warm */
    int snapshot; /* the run checkpoints after this epoch */
    int ahead;    /* the next epoch's rollout may start during this one */
} dqn_plan;

typedef struct {
    double collect_s, learn_s; /* device time on a GPU */
    double return_sum, episodes;
    int64_t env_steps;
    int updates; /* 0: still warming up */
    double loss, q_mean, q_max, grad_norm;
} dqn_result;

typedef struct dqn_backend dqn_backend;

typedef struct {
    const char *name; /* "cpu", "cuda" */
    /* *state is the backend's host state buffer (valid until free) */
    vx_status (*create)(const dqn_init *init, dqn_backend **out, dqn_state **state, vx_err *e);
    void (*free)(dqn_backend *b);
    /* What it chose when the settings left it free (a GPU picks the batch and scales the
     * learning rate with it); written back into s. */
    void (*resolved)(const dqn_backend *b, vx_dqn_settings *s);
    void (*describe)(const dqn_backend *b, char *buf, size_t n);
    vx_status (*epoch)(dqn_backend *b, const dqn_plan *p, dqn_result *r, vx_err *e);
    /* The online weights, into host memory (synchronous). */
    vx_status (*weights)(dqn_backend *b, float *host, vx_err *e);
    /* Fills the state buffer for a checkpoint after the epoch just run. With the snapshot planned,
     * a GPU has already queued the copies (into its state buffer and a device copy of the replay
     * buffer) during the epoch: *detached = 1, and wait() completes them (final: a rollout
     * running ahead is waited for and left out — the state is the epoch's). Unplanned: the
     * state is taken in place, *detached = 0 (a rollout running ahead is inserted first:
     * collected_ahead). */
    vx_status (*save)(dqn_backend *b, int final, int *detached, vx_err *e);
    vx_status (*wait)(dqn_backend *b, vx_err *e);
    /* The replay buffer into `path`: from the snapshot when detached (any thread), else the live
     * buffer (the training thread, synchronously). */
    vx_status (*save_replay)(dqn_backend *b, int detached, const char *path, vx_err *e);
    /* Back to the host state buffer's content; then the replay buffer from `path`. */
    vx_status (*restore)(dqn_backend *b, vx_err *e);
    vx_status (*load_replay)(dqn_backend *b, const char *path, uint64_t *inserted, vx_err *e);
    size_t (*reserved)(const dqn_backend *b);

    /* ---- fused trials (optional: NULL where the backend has none) ----
     * create_group: K backends made at once (in[k] member k's; their settings agree but for the
     * algorithm's member keys), whose updates run as one learner group (learner_cuda.h): one
     * launch of K members' updates instead of K launches. Each member collects on its own
     * streams, with its own environments, replay buffer and acting weights. A member is freed
     * alone (free); what the group shares goes with the last. A member never checkpoints (save
     * refuses); weights gives its own. epoch_group: one epoch of every member still in the
     * group (b[k] NULL: freed), p[k] and r[k] member k's; the updates' count is the group's. */
    vx_status (*create_group)(const dqn_init *in, int K, dqn_backend **out, dqn_state **state,
                              vx_err *e);
    vx_status (*epoch_group)(dqn_backend *const *b, int K, const dqn_plan *p, dqn_result *r,
                             vx_err *e);
} dqn_backend_ops;

extern const dqn_backend_ops vx_dqn_backend_cpu;

#ifdef __cplusplus
}
#endif

#endif

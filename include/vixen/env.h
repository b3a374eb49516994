/* env.h — N trading environments stepped at once (CPU reference; the GPU calls the same
 * dynamics from env_dynamics.h).
 *
 * Shape letters: N = environments, D = 51 observation floats, 3 action branches
 * (exposure 0..8, order type 0..2, urgency 0..2). All arrays are caller-owned. */
#ifndef VIXEN_ENV_H
#define VIXEN_ENV_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/util.h"
#include "vixen/data.h"
#include "vixen/env_dynamics.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t max_contracts;  /* 4: exposure levels map to −4..4 contracts */
    int32_t episode_len;    /* 390: one regular session of 1-minute bars */
    double commission;      /* 2.25 $ per contract per side */
    double slippage_ticks;  /* 1 */
    double tick;            /* 0.25 (ES) */
    double multiplier;      /* 50 (ES) */
    double reward_scale;    /* 0: computed from the training rows (see vx_env_reward_scale) */
    double drawdown_limit;  /* 0: 3 · reward_scale · sqrt(episode_len) */
    double eval_fraction;   /* 0.2: the last 20% of rows are held out for evaluation */
    uint64_t seed;
} vx_env_cfg;

typedef enum { VX_SPLIT_TRAIN, VX_SPLIT_EVAL } vx_split;

void vx_env_cfg_default(vx_env_cfg *c);

/* The reward scale: multiplier · max_contracts · the standard deviation of close-to-close price
 * changes over the given rows — so a full position's typical one-bar PnL is one reward unit. */
double vx_env_reward_scale(const vx_market *m, int64_t row_lo, int64_t row_hi, double multiplier,
                           int32_t max_contracts);

/* Row ranges of the two splits, by time: training first, evaluation last. */
void vx_env_split_rows(const vx_market *m, double eval_fraction, vx_split split, int64_t *lo,
                       int64_t *hi);

typedef struct vx_env vx_env;

/* Creates N environments over one split of `m` (which must outlive them) and resets them. */
vx_status vx_env_create(const vx_env_cfg *cfg, const vx_market *m, vx_split split, size_t n,
                        vx_env **out, vx_err *e);
void vx_env_free(vx_env *env);

size_t vx_env_count(const vx_env *env);
const vx_env_params *vx_env_params_get(const vx_env *env);
const vx_env_state *vx_env_states(const vx_env *env);

/* Restarts environment i's episode at `row` of its split (evaluation walks the held-out bars in
 * order). The row must leave a whole episode before the split's end. */
vx_status vx_env_reset_to(vx_env *env, size_t i, int64_t row, vx_err *e);

/* Replaces all N states (restoring a checkpoint). */
void vx_env_set_states(vx_env *env, const vx_env_state *states);

/* Writes every environment's current observation (N × D). */
void vx_env_observe_all(const vx_env *env, float *obs);

/* Steps all environments. actions: N × 3 int32. Out: obs N × D, rewards N, terminated N,
 * truncated N, and final_obs N × D (may be NULL): the last observation of an episode that ended
 * at this step (rows of other environments are left untouched). An action out of range is an
 * error naming the environment and branch, and nothing is stepped. */
vx_status vx_env_step(vx_env *env, const int32_t *actions, float *obs, float *rewards,
                      uint8_t *terminated, uint8_t *truncated, float *final_obs, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

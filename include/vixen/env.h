/* env.h — N trading environments stepped at once, on the CPU (the reference) or on a CUDA device,
 * behind one type: the dynamics are env_dynamics.h's on both, bit for bit.
 *
 * Shape letters: N = environments, D = VX_OBS_DIM observation floats, VX_ACTION_BRANCHES action
 * branches (exposure 0..8, order type 0..2, urgency 0..2). Stepping arrays live in the memory
 * of the environment's device (host memory for the CPU) and are the caller's; work is queued on
 * the stream given (a CUDA stream of that device, never NULL there: the legacy default stream is
 * refused; NULL on the CPU, where a call has finished when it returns). */
#ifndef VIXEN_ENV_H
#define VIXEN_ENV_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/data.h"
#include "vixen/device.h"
#include "vixen/env_dynamics.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t max_contracts; /* 4: exposure levels map to −4..4 contracts */
    int32_t episode_len;   /* 390: one regular session of 1-minute bars */
    double commission;     /* 2.25 $ per contract per side */
    double slippage_ticks; /* 1 */
    double tick;           /* 0.25 (ES) */
    double multiplier;     /* 50 (ES) */
    double reward_scale;   /* 0: computed from the training rows (see vx_env_reward_scale) */
    double drawdown_limit; /* 0: 3 · reward_scale · sqrt(episode_len) */
    int32_t reward;        /* VX_REWARD_PNL, or VX_REWARD_VOL: each step's PnL over the ex-ante
                            * volatility of a full position (Zhang, Zohren & Roberts 2019) */
    /* the splits, by time (vx_env_split_rows): training, then validation, then test */
    double val_fraction;  /* 0.15 of the rows (0: no validation split) */
    double test_fraction; /* 0.15 of the rows: the test region (all folds' test blocks) */
    int32_t gap;          /* 240 (VX_FEATURE_WARMUP): rows left out between two splits, so no
                           * feature of one split looks back into the one before */
    int32_t folds;        /* 1: one split; K: walk-forward, the test region cut into K blocks */
    int32_t fold;         /* 1..folds: which block is the test split (0: the last) */
    uint64_t seed;
} vx_env_cfg;

enum { VX_REWARD_PNL = 0, VX_REWARD_VOL = 1 };

typedef enum { VX_SPLIT_TRAIN, VX_SPLIT_VAL, VX_SPLIT_TEST } vx_split;
const char *vx_split_name(vx_split s); /* "train", "validation", "test" */

void vx_env_cfg_default(vx_env_cfg *c);

/* The reward scale: multiplier · max_contracts · the standard deviation of close-to-close price
 * changes over the given rows — so a full position's typical one-bar PnL is one reward unit. */
double vx_env_reward_scale(const vx_market *m, int64_t row_lo, int64_t row_hi, double multiplier,
                           int32_t max_contracts);

/* The vol-scaled reward's unit at each of m's rows (out: m->rows doubles): multiplier ·
 * max_contracts · σ̂_r, with σ̂_r² an exponentially weighted mean (λ = 0.99, a half-life of about
 * 69 bars) of squared close-to-close changes up to and including bar r — known at the decision,
 * so no look-ahead — floored at a quarter tick. */
void vx_env_reward_units(const vx_market *m, const vx_env_cfg *c, double *out);

/* The rows [lo, hi) of one split of m's R feature rows, by time. The test region is the last
 * ⌊test_fraction·R⌋ rows, cut into `folds` consecutive blocks; fold k's test split is block k,
 * its validation split the ⌊val_fraction·R⌋ rows ending `gap` rows before that block, and its
 * training split every row from the first up to `gap` rows before the validation split (an
 * expanding window: later folds train on more). With one fold: train | gap | val | gap | test.
 * A split may come out empty (hi ≤ lo) when the fractions leave it no rows. */
void vx_env_split_rows(const vx_market *m, const vx_env_cfg *c, vx_split split, int64_t *lo,
                       int64_t *hi);
/* Checks the split settings and that each split of m (validation only when val_fraction > 0)
 * holds at least `min_rows` rows; the error names the split and its size. */
vx_status vx_env_check_splits(const vx_market *m, const vx_env_cfg *c, int64_t min_rows, vx_err *e);

/* The parameters of environments over one split of `m` (host pointers into the market): the
 * settings checked, the split's rows, the reward scale and drawdown limit resolved. What every
 * backend starts from; no environment is made. */
vx_status vx_env_params_make(const vx_env_cfg *cfg, const vx_market *m, vx_split split,
                             vx_env_params *out, vx_err *e);

typedef struct vx_env vx_env;

/* Creates N environments over one split of `m` (which must outlive them) on `dev` (NULL: the
 * CPU) and resets them: environment i starts episode 1 at a row drawn from its own Philox
 * stream, the same on every device. */
vx_status vx_env_create(const vx_env_cfg *cfg, const vx_market *m, vx_split split, size_t n,
                        vx_device *dev, vx_env **out, vx_err *e);
void vx_env_free(vx_env *env);

size_t vx_env_count(const vx_env *env);
vx_device *vx_env_device(const vx_env *env);
/* The parameters, with host pointers into the market (prices and features as the market holds
 * them), whatever the device. */
const vx_env_params *vx_env_params_get(const vx_env *env);
/* Device memory the environments reserved (market rows, states). */
size_t vx_env_reserved(const vx_env *env);

/* Writes every environment's current observation (N × D). */
vx_status vx_env_observe(vx_env *env, float *obs, vx_stream s, vx_err *e);

/* Steps all environments. actions: N × VX_ACTION_BRANCHES int32. Out: obs N × D, rewards N,
 * terminated N, truncated N, and final_obs N × D (may be NULL): the last observation of an episode
 * that ended at this step (rows of other environments are left untouched). An action out of
 * range: on the CPU an error naming the environment and branch, and nothing is stepped; on a
 * GPU (which cannot stop the others) that environment is left unstepped (reward 0, flags 0) and
 * counted in vx_env_bad_actions. */
vx_status vx_env_step(vx_env *env, const int32_t *actions, float *obs, float *rewards,
                      uint8_t *terminated, uint8_t *truncated, float *final_obs, vx_stream s,
                      vx_err *e);

/* The environments' parameters (pointers into the device's memory) and their N states, for a
 * kernel that steps them itself with vx_env_step_one — as the backend's own step kernel does, in
 * the same arithmetic (compiled with --fmad=false, as that kernel is) — inside work of its own
 * (PPO's fused rollout step). s: the stream those kernels run on, which the synchronous calls then
 * wait for. VX_ERR_ARG where the environments keep no device state (the CPU). */
vx_status vx_env_device_view(vx_env *env, vx_stream s, vx_env_params *p, vx_env_state **states,
                             vx_err *e);

/* Checks n states (host memory) against these environments' parameters before they are used —
 * states restored from a checkpoint are data from a file: the bar index inside the split with the
 * episode's remaining steps ending inside it, the step count inside the episode, the position
 * inside the exposure grid (±max_contracts) and the last change within twice that, the time in
 * position at most the steps, an episode number ≥ 1, cash, entry, realised PnL, equity and peak
 * finite with the peak at least the equity and 0. These are the invariants the dynamics keep. The
 * error names `file`, the `tensor` and the row (environment) and field at fault. */
vx_status vx_env_check_states(const vx_env *env, const vx_env_state *s, size_t n, const char *file,
                              const char *tensor, vx_err *e);

/* Queues a copy of the N states into host memory (pinned, for it to run asynchronously on a GPU)
 * or from it; the copy is done once s has reached it (on the CPU, on return). load_states checks
 * the states first (vx_env_check_states) and loads nothing when one is refused. */
vx_status vx_env_copy_states(vx_env *env, vx_env_state *host, vx_stream s, vx_err *e);
vx_status vx_env_load_states(vx_env *env, const vx_env_state *host, vx_stream s, vx_err *e);
/* Synchronous versions: after everything queued so far on the stream of the last call. */
vx_status vx_env_get_states(vx_env *env, vx_env_state *out, vx_err *e);
vx_status vx_env_set_states(vx_env *env, const vx_env_state *in, vx_err *e);

/* Actions refused so far (always 0 on the CPU, which returns an error instead). Synchronous. */
vx_status vx_env_bad_actions(vx_env *env, uint64_t *count, vx_err *e);

/* ---- the CPU reference only ------------------------------------------------------------------ */

/* The live states of a CPU environment (NULL on other devices). */
const vx_env_state *vx_env_states(const vx_env *env);
/* Restarts environment i with a flat book at `row` of its split, for an episode of `steps` steps
 * (1..episode_len): it ends, truncated, at row + steps, as a full episode ends after
 * episode_len (evaluation walks a split in order this way). row + steps must stay inside the
 * split. CPU environments only. */
vx_status vx_env_reset_to(vx_env *env, size_t i, int64_t row, int32_t steps, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

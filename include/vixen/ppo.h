/* ppo.h — PPO (Schulman et al. 2017), the second algorithm behind algo.h: its settings (the
 * `ppo.*` keys) and its table. One epoch of the run is one PPO iteration: a rollout of T steps
 * of the N environments with the current policy, GAE, then `update_epochs` passes over the
 * rollout in `minibatches` shuffled minibatches. The arithmetic is ppo_math.h's, the network
 * actor_critic.h's; docs/algorithms.md has the formulas and their sources. */
#ifndef VIXEN_PPO_H
#define VIXEN_PPO_H

#include <stdint.h>
#include "vixen/actor_critic.h"
#include "vixen/algo.h"
#include "vixen/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int trunk[VX_AC_MAX_TRUNK], n_trunk; /* ppo.trunk: 160, 160 */
    int shared;                          /* ppo.shared: one trunk for both heads */
    vx_adam_cfg adam;                    /* lr 3e-4, eps 1e-5 (CleanRL's) */
    int anneal_lr;        /* 1: the rate falls linearly to 0 over the planned epochs */
    double gamma;         /* 0.99 */
    double gae_lambda;    /* 0.95 */
    int update_epochs;    /* 4 */
    int minibatches;      /* 32 */
    int norm_adv;         /* 1: advantages normalised per minibatch */
    double clip;          /* 0.2: the ratio's (and the value's) clip */
    int clip_value;       /* 1 */
    double ent_coef;      /* 0.01 */
    double vf_coef;       /* 0.5 */
    double max_grad_norm; /* 0.5 */
    double target_kl;     /* 0: off; else stop the iteration's updates once an epoch's mean
                           * approximate KL exceeds it */
    int norm_obs;         /* 1: observations normalised by running mean and variance */
    double obs_clip;      /* 10: the normalised observation's clip */
    int tf32;             /* GPU only: TF32 tensor-core products (0: float32's accuracy) */
    int fused;            /* GPU only: 1: the fused kernels where the network fits them
                           * (src/ppo/ppo_fused.h); 0: one cuBLASLt GEMM per layer */
} vx_ppo_settings;

void vx_ppo_settings_default(vx_ppo_settings *s);
void vx_ppo_net_cfg(const vx_ppo_settings *s, vx_ac_cfg *out);

extern const vx_algo_ops vx_algo_ppo;

#ifdef __cplusplus
}
#endif

#endif

/* ppo_fused.h — PPO's fused kernels on a CUDA device (internal): the actor-critic's whole forward
 * pass, the sampling, the observation normalisation and the environments' step of every step of
 * a rollout in one launch, and a minibatch's gather, forward pass, loss and backward pass in
 * another, with the activations in shared memory and every product on tensor cores
 * (src/nn/tc_tile.cuh).
 *
 * Why: the per-layer path (ac_cuda.h, cuBLASLt) spends an update in about thirty launches of
 * small GEMMs and helper kernels; here a minibatch is two launches: the gradient kernel, then one
 * that adds its blocks' gradients in a fixed order, takes the norm and does the optimizer's step
 * (writing the kernels' copies of the weights too).
 *
 * The network: both trunks side by side as one "wide" network. Layer 0 reads the input once for
 * both trunks (its weights [W_pi | W_v]); deeper layers are one product per trunk (G = 2 groups,
 * 1 when the trunk is shared); the two heads are one 16-column product over the top activations
 * — the 15 logits from the policy trunk's half, the value (column 15) from the value trunk's.
 * The weights are read from a packed copy (the biases; widths padded to the tensor cores' tiles
 * with zeros, ppo_fused_plan.h) and from fragment copies (every product's B operand in the order
 * a warp's lanes load it), both written by ppo_fused_pack (the weights as loaded) and by
 * ppo_fused_grad's step (after each of its steps). Maps from each packed and fragment float to its
 * place in the flat parameters (or none: padding) serve the packing and the gradient's scatter,
 * and their inverse the step's writes.
 *
 * Precision: tf32 = 1 multiplies in TF32; tf32 = 0 in 3×TF32 (tc_tile.cuh), float32's accuracy.
 * Gradients: each block of the gradient kernel writes its rows' gradient (every weight and bias)
 * to a slice of its own, and the second launch adds the slices in block order — the same bits
 * every run (the only atomics are the rollout's arrival counter that elects its last block, and
 * the second launch's grid-wide barrier).
 *
 * Takes: trunks of 1 to 4 layers whose widths are multiples of 16 and fit in shared memory at
 * 32 rows a block or more (ppo_fused_fits says why not); everything else runs on ac_cuda. */
#ifndef VIXEN_PPO_FUSED_H
#define VIXEN_PPO_FUSED_H

#include <cuda_runtime.h>
#include "vixen/actor_critic.h"
#include "vixen/env.h"
#include "vixen/nn.h"
#include "vixen/ppo_math.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ppo_fused ppo_fused;

/* 1 when the fused kernels take this network on a device with `smem_optin` bytes of shared
 * memory a block; else 0 and why. */
int ppo_fused_fits(const vx_ac_layout *L, size_t smem_optin, char *why, size_t why_n);

/* max_rows: the most rows of a minibatch (the update's gradient slices are sized for it). */
vx_status ppo_fused_create(const vx_ac_layout *L, int max_rows, int tf32, vx_device *dev,
                           ppo_fused **out, vx_err *e);
void ppo_fused_free(ppo_fused *f);
size_t ppo_fused_reserved(const ppo_fused *f);

/* The packed and fragment copies from the flat parameters (device), for the kernels below: at
 * the start of a rollout (the weights as loaded or resumed); ppo_fused_grad's step keeps them
 * current after that. */
vx_status ppo_fused_pack(ppo_fused *f, const float *params, cudaStream_t s, vx_err *e);

/* One rollout step (or the values after the rollout), N rows, or `steps` rollout steps in one
 * launch; pointers are device memory and NULL leaves a part out. */
typedef struct {
    int N;
    /* Steps in this launch (0 or 1: one). More than one needs the sampling and the environments'
     * step with next_obs = obs (a step reads what the one before wrote), tr, fin_out and
     * boot_own, and takes no logits or values. Then the per-step arrays (store, act, logp, val,
     * rew, te, tr) are the launch's first step's, step k's k · N rows further on; the first
     * step's bootstrap is fin, fin_flag and boot (the step before the launch), a later step's its
     * predecessor's — fin_out, tr and boot_own (the launch's first step's own bootstrap row, N
     * floats a step, written by the step after it: the last one's by the next launch). */
    int steps;
    float *boot_own;
    const float *obs;         /* N × in_dim, raw */
    const double *mean, *var; /* the observation statistics (read when norm) */
    double clip;              /* obs_clip */
    int norm;                 /* norm_obs */
    float *store;             /* N × in_dim: the normalised rows, for the updates */
    double *part;             /* ppo_fused_act_blocks(N) × 2 in_dim: each block's raw column
                               * sums and sums of squares are added to its own */
    uint64_t seed;            /* sampling: act, logp, val and step all given, or none */
    unsigned long long *step; /* the acting counter (advanced by the launch's steps when the
                               * environments' step is here too) */
    int32_t *act;             /* N × 3 */
    float *logp, *val;        /* N */
    const float *fin;         /* N × in_dim: pre-reset observations */
    const uint8_t *fin_flag;  /* N: whose (truncated at the step before) */
    float *boot;              /* N: the value of the row's fin where flagged, else 0 */
    float *logits, *values;   /* N × 15 and N: the heads' outputs */
    /* The environment step after the sampling (states given, and the sampling): each row's
     * environment stepped with its action (vx_env_step_one, as the environments' own kernel),
     * its next observation into next_obs (obs: a block reads its rows before it writes them),
     * an ended episode's last one into fin_out, the reward and the flags; the episode accounting
     * (ep_ret += reward; at an end ret_sum += ep_ret, ep_count += 1, ep_ret = 0); and the last
     * block to finish advances *step (every block has read it by then). */
    vx_env_params envp; /* vx_env_device_view */
    vx_env_state *states;
    float *next_obs, *fin_out, *rew; /* all three needed with states */
    uint8_t *te, *tr;
    double *ep_ret, *ret_sum, *ep_count;
} ppo_fused_act_args;

int ppo_fused_act_blocks(int N);
vx_status ppo_fused_act(ppo_fused *f, const ppo_fused_act_args *a, cudaStream_t s, vx_err *e);

/* One minibatch's gradient: M rows, the loss's statistics per block into parts
 * (ppo_fused_grad_blocks(M) × 5 doubles: pg, v, entropy, approx KL, clipped), the gradient,
 * scaled by 1/M as the loss, into grads (n_params floats, padding left alone). */
typedef struct {
    int M;
    const uint32_t *perm; /* rows perm[cursor · M + j] of the rollout (NULL: rows 0..M−1) */
    const int *cursor;    /* device: the minibatch's index */
    const float *obs;     /* rollout × in_dim, normalised */
    const int32_t *act;   /* rollout × 3 */
    const float *logp, *val, *adv, *ret;
    const double *adv_stat; /* 2 a minibatch, at the cursor: mean and standard deviation */
    vx_ppo_loss_cfg lc;
    int norm_adv;
    const float *dz, *dv; /* instead of the loss (tests): its gradients, M × 15 and M */
    double *parts;
} ppo_fused_grad_args;

int ppo_fused_grad_blocks(const ppo_fused *f, int M);
/* The blocks of the second launch (the sum and the step), and how many a thread a float would
 * take: fewer when not all of those could be resident (tests). */
void ppo_fused_step_grid(const ppo_fused *f, size_t *blocks, size_t *wanted);
/* The minibatch's end (ppo_mb_end.cuh: statistics, the target-KL stop, the cursor), for block
 * 0 of the update's second launch to do. */
typedef struct {
    int M, blocks, minibatches; /* blocks: of parts (ppo_fused_grad_blocks) */
    const double *parts;
    double target_kl;
    double *stats;
    int *ctl;
} ppo_fused_end;
/* With o (an optimizer's state, vx_optim_view_of), also the optimizer's step in the second
 * launch: the norm into *o->norm, each parameter of params clipped and stepped as vx_optim_step
 * does (optim_math.h) and written straight into the packed and fragment copies (no
 * ppo_fused_pack needed), the step count advanced; with `end`, the minibatch's end by block 0
 * past the grid's barrier (every block has read the stop flag by then). o NULL: the gradient
 * alone (params and end unused, end must be NULL). */
vx_status ppo_fused_grad(ppo_fused *f, const ppo_fused_grad_args *a, float *grads, float *params,
                         const vx_optim_view *o, const ppo_fused_end *end, cudaStream_t s,
                         vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

/* ppo_fused_plan.h — the layout and the sizes of PPO's fused kernels (ppo_fused.h), in plain C
 * (ppo_fused_plan.c) so that the trial memory estimate (src/hyperopt/budget.c) computes the very
 * numbers the kernels are created with (internal).
 *
 * The packed copy of the weights the kernels read: layer 0 one Dp × G·H_0 matrix ([W_pi | W_v],
 * rows past the input's width zero), each deeper layer G blocks of H_{l−1} × H_l, every layer's
 * biases G·H_l wide, the heads one (G·H_top) × 16 matrix (the policy's 15 logits from the policy
 * trunk's rows, the value in column 15 from the value trunk's) and 16 biases; every tensor starts
 * on 8 floats (the kernels' float2 loads need 8 bytes; 32 keeps a tile's rows in whole sectors).
 *
 * The memory estimate assumes a Hopper's 227 KB of shared memory a block (VX_PF_SMEM_HOPPER). On
 * a GPU with less, the update's blocks may take 32 rows (twice the gradient slices), or the
 * network may not fit at all and run the per-layer path: the estimate is then low, and the
 * search's first chunk, which measures, corrects it. */
#ifndef VIXEN_PPO_FUSED_PLAN_H
#define VIXEN_PPO_FUSED_PLAN_H

#include <stddef.h>
#include "vixen/actor_critic.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef VX_PF_THREADS
#define VX_PF_THREADS                                                                              \
    512 /* a block's threads: 16 warps (H200: 41.7 ms an iteration, 46.7 with 8) */
#endif
#define VX_PF_WARPS (VX_PF_THREADS / 32)
#ifndef VX_PF_ACT_ROWS
#define VX_PF_ACT_ROWS 16 /* a rollout step's rows a block: 2,048 environments fill 128 SMs */
#endif
#define VX_PF_HEAD 16 /* the heads' columns: 15 logits, then the value */
/* Shared rows this many floats past their width (a multiple of 16). With 8 the weight gradients'
 * column-major loads fall in 32 different banks and the forward pass's row loads in 16 (2-way
 * conflicts); with 4 it is the other way round. 8 measured faster in TF32 (docs/benchmarks.md). */
#define VX_PF_PAD 8
#define VX_PF_OUT_LD (VX_PF_HEAD + VX_PF_PAD)
#define VX_PF_MAX_IN 128 /* the input's width at most (its statistics are staged per block) */
/* The shared memory a block may have on the GPUs the memory estimate assumes (Hopper's 227 KB). */
#define VX_PF_SMEM_HOPPER 232448

/* The hidden layers a fused network may have: PPO's trunk (VX_AC_MAX_TRUNK), or the DQN's trunk
 * of up to 3 layers and its heads' hidden layer (dqn_fused_plan.h). Not 5, for a 4-layer DQN
 * trunk: PPO's kernels keep a table a layer in local memory, and that table one entry longer made
 * PPO's iteration 1.5 % slower (docs/benchmarks.md). */
#define VX_PF_MAX_LAYERS 4

/* The network as the kernels see it: widths and offsets (floats) into the packed copy. Layer l's
 * row of activations is W[l] wide. Layer 0 is one product over the input row; layer l ≥ 1 runs
 * as g[l] groups side by side, group i reading H[l − 1] columns of the layer below from column
 * i·H[l − 1] and writing H[l] of its own from i·H[l]: PPO's two separate trunks (g = 2, H the
 * trunks' widths, W = 2H), or one group reading the whole row below (g = 1, H = W: a shared
 * trunk, every layer of the DQN's). */
typedef struct {
    int in, Dp;              /* the input's width, and padded to 16 */
    int n, G;                /* hidden layers; PPO's trunks side by side (2 separate, 1 shared) */
    int H[VX_PF_MAX_LAYERS]; /* a group's columns (above) */
    int W[VX_PF_MAX_LAYERS]; /* a layer's row: all its groups' columns */
    int g[VX_PF_MAX_LAYERS]; /* the groups of its product (layers l ≥ 1) */
    /* the gradient with respect to layer l's output scaled by this before it goes down to layer
     * l − 1 (the weight and bias gradients take it unscaled): 1 but for the DQN's heads' hidden
     * layer, whose gradient reaches the trunk scaled by 1 / (branches + 1) as the reference's */
    float dscale[VX_PF_MAX_LAYERS];
    int w[VX_PF_MAX_LAYERS];      /* each layer's weights */
    int w_step[VX_PF_MAX_LAYERS]; /* layers of g > 1: from one group's block to the next */
    int b[VX_PF_MAX_LAYERS];      /* each layer's biases */
    int wh, bh;                   /* the heads' weights and biases */
    int top;                      /* W[n − 1] */
    /* The fragment copies (vx_pf_frags): each product's B operand read from global memory, in
     * the order a warp's lanes take it (tc_tile.cuh's tc::frag), offsets in floats. */
    int E;                         /* floats a lane's share of a tile: 4 (3×TF32) or 2 (TF32) */
    int fw[VX_PF_MAX_LAYERS], fwh; /* forward: each layer's W, the heads' */
    int fb[VX_PF_MAX_LAYERS], fbh; /* backward: W_lᵀ for l ≥ 1, the heads' */
    int f_step[VX_PF_MAX_LAYERS];  /* layers of g > 1: from one group's matrix to the next */
} vx_pf_net;

/* The packed layout of L into t; with src (the returned count of ints), each packed float's
 * index in the flat parameters, −1 for padding. Returns the packed copy's floats. Assumes
 * vx_pf_rows(L, …) > 0. */
size_t vx_pf_layout(const vx_ac_layout *L, vx_pf_net *t, int *src);
/* The fragment copies' layout for `passes` (3: 3×TF32, 1: TF32) into t, after vx_pf_layout;
 * with src (vx_pf_layout's map) and fsrc (the returned count of ints), each fragment float's
 * index in the flat parameters, −1 for padding. Returns the copies' floats. */
size_t vx_pf_frags(vx_pf_net *t, int passes, const int *src, int *fsrc);
/* Bytes of shared memory a block of `rows` rows uses. */
size_t vx_pf_smem(const vx_pf_net *t, int rows);
/* The update's rows a block (64 or 32: the most whose shared memory fits smem_optin bytes, as a
 * rollout step's block of 2 × VX_PF_ACT_ROWS rows must), or 0 when the fused kernels do not take
 * L — and why. */
int vx_pf_rows(const vx_ac_layout *L, size_t smem_optin, char *why, size_t why_n);
/* The blocks of the update (256 threads a block, a packed float or a parameter a thread, which
 * ever are more), at most: its launch may take fewer (what can be resident at once). */
size_t vx_pf_sum_blocks(size_t packed, size_t n_params);
/* Device bytes of the fused kernels' own buffers for minibatches of up to max_rows rows. */
size_t vx_pf_bytes(const vx_ac_layout *L, int rows, int max_rows, int tf32);

#ifdef __cplusplus
}
#endif

#endif

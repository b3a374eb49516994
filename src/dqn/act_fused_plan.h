/* act_fused_plan.h — the layout and sizes of the DQN's fused acting kernel (act_fused.h), in
 * plain C (act_fused_plan.c), so that the trial memory estimate and the CPU tests compute the very
 * numbers the kernel is created with (internal).
 *
 * The kernel runs every step of a rollout for its block's VX_AF_ROWS environments: the
 * Q-network's forward pass on tensor cores (tc_tile.cuh), every activation in shared memory, then
 * each row's ε-greedy actions, environment step and n-step emit. It reads two copies of the acting
 * weights, remade from the flat parameter vector at the start of each rollout (one launch):
 *
 *   packed  the biases in the kernel's order: each trunk layer's, the heads' first layers' side
 *           by side ([value | branch 0 | branch 1 | …], Hh each), the heads' second layers' each
 *           at its columns of the block's head outputs (o2), zero in the padding;
 *   frags   every weight matrix as the products' B operand in fragment order (tc::frag): the
 *           trunk's layers (layer 0's K the input padded to Dp, zero rows past it), the heads'
 *           first layers as one H_top × G·Hh matrix, each head's second layer Hh × P2[g]
 *           (columns past its N2[g] zero). In TF32 and 3×TF32 its tiles are 8 × 8 floats; in
 *           BF16 16 × 8 bf16, each matrix's K rounded up to 16 with zero rows.
 *
 * map[i] is each packed float's, then each fragment element's, index in the flat parameters (−1:
 * zero padding): a fragment float's in TF32, each of a float's two bf16 halves' (lower first) in
 * BF16; with 3×TF32 a fragment's four floats are two weights' big parts then their small parts,
 * so the map repeats. */
#ifndef VIXEN_ACT_FUSED_PLAN_H
#define VIXEN_ACT_FUSED_PLAN_H

#include <stddef.h>
#include "vixen/dqn.h"
#include "vixen/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VX_AF_THREADS 512 /* a block's threads: 16 warps */
#define VX_AF_ROWS 16     /* rows a block: 2,048 environments in 128 blocks */
#define VX_AF_HEADS (1 + VX_QNET_MAX_BRANCHES)
/* 32-bit words a row for acting: each branch's greedy action, then each branch's first block of
 * draws (4 words) */
#define VX_AF_PICK (VX_QNET_MAX_BRANCHES * 5)

/* The network as the kernel sees it: widths, and offsets (floats) into the two copies. */
typedef struct {
    int in, Dp;               /* the input's width, and padded to 16 */
    int n;                    /* trunk layers */
    int H[VX_QNET_MAX_TRUNK]; /* their widths */
    int Hh, G;                /* a head's hidden width; heads: the value's, then a branch's */
    int N2[VX_AF_HEADS];      /* head g's outputs: Z for the value, n_d·Z for branch d */
    int P2[VX_AF_HEADS];      /* padded to 8 */
    int o2[VX_AF_HEADS];      /* its first column in the block's head outputs */
    int W2;                   /* the head outputs' width: Σ P2 */
    int nb, Z, out_dim;       /* branches, atoms, the Q-network's output row */
    int branch[VX_QNET_MAX_BRANCHES], out_off[VX_QNET_MAX_BRANCHES];
    int b[VX_QNET_MAX_TRUNK];  /* packed: each trunk layer's biases */
    int bh1, bh2;              /* packed: the heads' first and second layers' biases */
    int packed;                /* the packed copy's floats */
    int bf16;                  /* the fragments in bf16 (dqn.acting bf16), else TF32's floats */
    int E;                     /* floats a lane's share of a tile: 4 (3×TF32) or 2 (TF32, BF16) */
    int pad;                   /* floats past a multiple of 16 a row of activations: 4, 8 BF16 */
    int fw[VX_QNET_MAX_TRUNK]; /* frags: each trunk layer's W */
    int fh1, fh2[VX_AF_HEADS]; /* frags: the heads' first layers, each head's second */
    int frags;                 /* the fragment copy's floats */
    int maps;                  /* the map's entries: packed, then the fragments' elements */
} vx_af_net;

/* Whether the fused kernel takes L in precision `acting` (VX_ACTING_TF32, _TF32X3 or _BF16) with
 * blocks of at most smem_optin bytes of shared memory; if not, why. */
int vx_af_fits(const vx_qnet_layout *L, int acting, size_t smem_optin, char *why, size_t why_n);
/* The layout of L for precision `acting` into t; with map (t->maps ints), each float's or bf16's
 * index in the flat parameters as the top comment says. */
void vx_af_layout(const vx_qnet_layout *L, int acting, vx_af_net *t, int *map);
/* Bytes of shared memory a block uses. */
size_t vx_af_smem(const vx_af_net *t);
/* Device bytes of the kernel's own buffers (the two copies and the map). */
size_t vx_af_bytes(const vx_qnet_layout *L, int acting);

#ifdef __cplusplus
}
#endif

#endif

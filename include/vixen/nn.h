/* nn.h — the branching dueling Q-network (Tavakoli et al. 2018), its gradients, and Adam.
 *
 * Shapes: B = batch, D = 51 state dims, H = trunk width, Hh = head width, K = branches (3),
 * n_d = actions of branch d (9, 3, 3), Z = atoms (1 for expected-value DQN, 51 for C51).
 *
 *   trunk:   h_1 = relu(x W_1 + b_1), …, h_L = relu(h_{L-1} W_L + b_L)           (B × H)
 *   value:   V = relu(h_L Wv1 + bv1) Wv2 + bv2                                    (B × Z)
 *   branch:  A_d = relu(h_L Wd1 + bd1) Wd2 + bd2                                  (B × n_d·Z)
 *   output:  Q_d[a, z] = V[z] + A_d[a, z] − mean_a' A_d[a', z]      (B × Σ_d n_d·Z, branch-major)
 *
 * With Z = 1 the output is the Q-values; with Z = 51 it is the logits whose softmax over z gives
 * each (branch, action)'s return distribution (the dueling form applied per atom, as in Rainbow).
 * All parameters live in one flat array (so Adam, clipping and checkpoints see one vector); the
 * layout gives each tensor's offset, each on a 16-byte boundary (the padding floats between
 * tensors are zero and stay zero: no gradient reaches them). Weights are stored [in × out],
 * row-major. */
#ifndef VIXEN_NN_H
#define VIXEN_NN_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VX_QNET_MAX_TRUNK 4
#define VX_QNET_MAX_BRANCHES 4

typedef struct {
    int in_dim;                          /* 51 */
    int n_trunk;                         /* 2 */
    int trunk[VX_QNET_MAX_TRUNK];        /* 256, 256 */
    int head_hidden;                     /* 64: value and advantage hidden width */
    int n_branches;                      /* 3 */
    int branch[VX_QNET_MAX_BRANCHES];    /* 9, 3, 3 */
    int atoms;                           /* 1 (DQN) or 51 (C51) */
} vx_qnet_cfg;

void vx_qnet_cfg_default(vx_qnet_cfg *c);

typedef struct {
    size_t w, b; /* offsets of the weight [in × out] and bias [out] in the flat parameters */
    int in, out;
} vx_dense;

typedef struct {
    vx_qnet_cfg cfg;
    vx_dense trunk[VX_QNET_MAX_TRUNK];
    vx_dense value1, value2;
    vx_dense adv1[VX_QNET_MAX_BRANCHES], adv2[VX_QNET_MAX_BRANCHES];
    int out_offset[VX_QNET_MAX_BRANCHES]; /* where branch d starts in a row of the output */
    int out_dim;                          /* Σ_d n_d · Z */
    size_t n_params;                      /* length of the flat vector (tensors 16-byte aligned) */
    size_t n_weights;                     /* trainable numbers: n_params less the zero padding */
    size_t n_tensors;                     /* weights and biases, for checkpoints */
} vx_qnet_layout;

vx_status vx_qnet_layout_make(const vx_qnet_cfg *cfg, vx_qnet_layout *out, vx_err *e);
/* Name ("trunk.0.weight", "value.1.bias", "branch.2.0.weight", …), offset, shape of tensor i. */
void vx_qnet_tensor(const vx_qnet_layout *L, size_t i, char *name, size_t name_n, size_t *offset,
                    int *rows, int *cols);

/* Activations of one forward pass, kept for the backward pass. Sized for up to max_batch rows. */
typedef struct {
    int max_batch;
    float *trunk[VX_QNET_MAX_TRUNK]; /* B × H_l, after ReLU */
    float *v1, *v;                   /* B × Hh (after ReLU), B × Z */
    float *a1[VX_QNET_MAX_BRANCHES]; /* B × Hh (after ReLU) */
    float *a[VX_QNET_MAX_BRANCHES];  /* B × n_d·Z */
    float *q;                        /* B × out_dim */
    float *scratch;                  /* backward: gradients flowing through the heads */
    float *mem_;
} vx_qnet_ws;

vx_status vx_qnet_ws_create(const vx_qnet_layout *L, int max_batch, vx_qnet_ws *ws, vx_err *e);
void vx_qnet_ws_free(vx_qnet_ws *ws);

/* He-normal for ReLU layers, Xavier-uniform for the two output layers, zero biases; drawn from
 * Philox stream (seed, tensor index). */
void vx_qnet_init(const vx_qnet_layout *L, uint64_t seed, float *params);

/* x: B × in_dim. Fills ws (ws->q is the output). */
void vx_qnet_forward(const vx_qnet_layout *L, const float *params, const float *x, int B,
                     vx_qnet_ws *ws);
/* dq: B × out_dim, the loss gradient with respect to ws->q. Writes (overwrites) grads. The
 * gradient reaching the trunk is scaled by 1/(branches + 1), as in the BDQ reference. */
void vx_qnet_backward(const vx_qnet_layout *L, const float *params, const float *x, int B,
                      const float *dq, vx_qnet_ws *ws, float *grads);

/* Global-norm clipping: returns the norm before clipping; scales grads when max_norm > 0 and the
 * norm exceeds it. */
double vx_grad_clip(float *grads, size_t n, double max_norm);

/* Adam (Kingma & Ba 2015) with bias correction; decoupled weight decay (off at 0). */
typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
} vx_adam_cfg;

typedef struct {
    vx_adam_cfg cfg;
    size_t n;
    int64_t t; /* steps taken */
    float *m, *v;
} vx_adam;

void vx_adam_cfg_default(vx_adam_cfg *c); /* lr 1e-4, 0.9, 0.999, 1e-8, 0 */
vx_status vx_adam_create(const vx_adam_cfg *cfg, size_t n, vx_adam *out, vx_err *e);
void vx_adam_free(vx_adam *a);
void vx_adam_step(vx_adam *a, float *params, const float *grads);

#ifdef __cplusplus
}
#endif

#endif

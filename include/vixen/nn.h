/* nn.h — the branching dueling Q-network (Tavakoli et al. 2018), built from dense layers
 * (dense.h): its layout, initialisation, forward and backward passes on a device, and the
 * optimizer (Adam with global-norm clipping) over its flat parameter vector.
 *
 * Shapes: B = batch, D = input width, H = trunk width, Hh = head width, K = branches,
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
 * row-major.
 *
 * Two levels: vx_qnet is the network on a device (CPU or CUDA: one type, the backend chosen by
 * the device), the unit learners use; the `_ref` functions with a vx_qnet_ws are the CPU
 * reference it is built on, which tests open up (activations, a float64 build). */
#ifndef VIXEN_NN_H
#define VIXEN_NN_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/dense.h"
#include "vixen/device.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VX_QNET_MAX_TRUNK 4
#define VX_QNET_MAX_BRANCHES 4

typedef struct {
    int in_dim;                       /* VX_OBS_DIM */
    int n_trunk;                      /* 2 */
    int trunk[VX_QNET_MAX_TRUNK];     /* 256, 256 */
    int head_hidden;                  /* 64: value and advantage hidden width */
    int n_branches;                   /* VX_ACTION_BRANCHES */
    int branch[VX_QNET_MAX_BRANCHES]; /* 9, 3, 3: the environment's action levels */
    int atoms;                        /* 1 (DQN) or 51 (C51) */
} vx_qnet_cfg;

/* The trading environment's network: its observation in, its three action branches out. */
void vx_qnet_cfg_default(vx_qnet_cfg *c);

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
/* The widest activation rows of a layout, for sizing: the widest trunk layer (or the input), and
 * the widest branch output (n_d · Z). */
void vx_qnet_widths(const vx_qnet_layout *L, size_t *hmax, size_t *amax);
/* He-normal for ReLU layers, Xavier-uniform for the two output layers, zero biases; drawn from
 * Philox stream (seed, tensor index). params: host memory, n_params floats. */
void vx_qnet_init(const vx_qnet_layout *L, uint64_t seed, float *params);

/* ---- the network on a device ----------------------------------------------------------------- */

typedef struct vx_qnet vx_qnet;

/* Activations for forward passes of up to max_batch rows, and for the backward pass of up to
 * backward_batch rows (0: forward only — a target or acting network needs no gradients). */
vx_status vx_qnet_create(const vx_qnet_layout *L, int max_batch, int backward_batch, vx_device *dev,
                         vx_qnet **out, vx_err *e);
void vx_qnet_free(vx_qnet *q);
/* TF32 tensor-core GEMMs on a GPU (ignored on the CPU); off by default and in parity tests. */
vx_status vx_qnet_set_tf32(vx_qnet *q, int on, vx_err *e);
/* x: B × in_dim, params: n_params floats (both in the device's memory). The output stays in the
 * network's memory: vx_qnet_output, B × out_dim. */
vx_status vx_qnet_forward(vx_qnet *q, const float *params, const float *x, int B, vx_stream s,
                          vx_err *e);
const float *vx_qnet_output(const vx_qnet *q);
/* Backward through the last forward of the first B rows (same params and x): dq is B × out_dim;
 * grads (n_params floats) are overwritten. The trunk's gradient is scaled by 1/(branches + 1),
 * as in the BDQ reference. */
vx_status vx_qnet_backward(vx_qnet *q, const float *params, const float *x, int B, const float *dq,
                           float *grads, vx_stream s, vx_err *e);
/* Device bytes the network reserved. */
size_t vx_qnet_reserved(const vx_qnet *q);

/* A group of K networks of one layout run as one: the members of fused trials, each with its own
 * parameters, inputs, output and gradients at the strides below (floats, each a multiple of 4 so
 * that every member's tensors stay 16-byte aligned). The calls above on a group are the calls on
 * every member at once — on a GPU each GEMM one strided-batched GEMM over the members — with
 * params, x, dq, grads and the output holding the K members at those strides; vx_qnet_create is
 * the group of one (whose output holds B × out_dim floats only, not a whole stride). */
typedef struct {
    size_t params; /* a member's parameters (and gradients): n_params rounded up */
    size_t x;      /* its input rows: max_batch × in_dim rounded up */
    size_t q;      /* its output and dq rows: max_batch × out_dim rounded up */
} vx_qnet_strides;

vx_qnet_strides vx_qnet_member_strides(const vx_qnet_layout *L, int max_batch);
/* The strides a network was made with (its layout's at its max_batch). */
vx_qnet_strides vx_qnet_strides_of(const vx_qnet *q);
vx_status vx_qnet_create_group(const vx_qnet_layout *L, int members, int max_batch,
                               int backward_batch, vx_device *dev, vx_qnet **out, vx_err *e);
int vx_qnet_members(const vx_qnet *q);

/* ---- the CPU reference ----------------------------------------------------------------------- */

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
/* x: B × in_dim. Fills ws (ws->q is the output). */
void vx_qnet_forward_ref(const vx_qnet_layout *L, const float *params, const float *x, int B,
                         vx_qnet_ws *ws);
/* dq: B × out_dim, the loss gradient with respect to ws->q. Writes (overwrites) grads. */
void vx_qnet_backward_ref(const vx_qnet_layout *L, const float *params, const float *x, int B,
                          const float *dq, vx_qnet_ws *ws, float *grads);

/* Global-norm clipping: returns the norm before clipping; scales grads when max_norm > 0 and the
 * norm exceeds it. */
double vx_grad_clip(float *grads, size_t n, double max_norm);

/* Adam (Kingma & Ba 2015) with bias correction; decoupled weight decay (off at 0). The
 * per-element arithmetic is optim_math.h's, shared with the GPU. */
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
vx_status vx_adam_cfg_check(const vx_adam_cfg *c, vx_err *e);
vx_status vx_adam_create(const vx_adam_cfg *cfg, size_t n, vx_adam *out, vx_err *e);
void vx_adam_free(vx_adam *a);
void vx_adam_step(vx_adam *a, float *params, const float *grads);

/* ---- the optimizer on a device --------------------------------------------------------------- */

/* Global-norm clipping then Adam over one flat vector, on a device; every scalar (the norm, the
 * step count) in the device's memory, so a step can be captured in a CUDA graph. */
typedef struct vx_optim vx_optim;

vx_status vx_optim_create(const vx_adam_cfg *cfg, double max_norm, size_t n, vx_device *dev,
                          vx_optim **out, vx_err *e);
void vx_optim_free(vx_optim *o);
/* Clips grads (in place, as the CPU does) and steps params. Device memory. */
vx_status vx_optim_step(vx_optim *o, float *params, float *grads, vx_stream s, vx_err *e);
/* The norm before clipping of the last step: a double in the device's memory. */
const double *vx_optim_norm(const vx_optim *o);
/* Where each step from now on reads its learning rate and whether to do nothing (a double and an
 * int in the device's memory; NULL: the configured rate, never skip). A captured step then
 * follows a schedule, and a stop decided on the device, without being captured again; a skipped
 * step leaves the parameters, the moments, the step count and the norm as they were. */
void vx_optim_set_controls(vx_optim *o, const double *lr, const int *skip);
/* Queues copies of the moments (n floats each, host memory: pinned for a GPU) and the step count
 * into host memory, or from it; done once s reaches them. */
vx_status vx_optim_copy_state(vx_optim *o, float *m, float *v, int64_t *t, vx_stream s, vx_err *e);
vx_status vx_optim_load_state(vx_optim *o, const float *m, const float *v, const int64_t *t,
                              vx_stream s, vx_err *e);
size_t vx_optim_reserved(const vx_optim *o);

/* An optimizer's state in the device's memory, for a kernel that fuses the step into its own
 * work (PPO's fused kernels: the clip and Adam in the same launches as the gradient's sum and
 * the weights' repacking): the moments, the step count, the norm (the fused step writes it), the
 * settings (VX_OPTIM_H_N doubles) and the controls of vx_optim_set_controls (NULL when unset).
 * Such a step must do what vx_optim_step does, with optim_math.h's arithmetic. Member 0 of a
 * group. */
enum {
    VX_OPTIM_H_LR,
    VX_OPTIM_H_B1,
    VX_OPTIM_H_B2,
    VX_OPTIM_H_EPS,
    VX_OPTIM_H_WD,
    VX_OPTIM_H_CLIP,
    VX_OPTIM_H_N
};
typedef struct {
    float *m, *v;
    long long *t;
    double *norm;
    const double *hyper;
    const double *lr;
    const int *skip;
} vx_optim_view;
/* VX_ERR_ARG for an optimizer that keeps no such state (the CPU's). */
vx_status vx_optim_view_of(vx_optim *o, vx_optim_view *out, vx_err *e);

/* A group of K optimizers, the members of fused trials: member k's parameters, gradients and
 * moments at k·stride floats (its first n used), with its own settings (cfgs[k], max_norms[k])
 * and its own norm, step count and controls. The calls above on a group act on every member:
 * vx_optim_norm gives K doubles, vx_optim_set_controls reads K rates and K skip flags, the states
 * copy K·stride floats each way and K step counts. Each member steps as an optimizer of its own
 * would, bit for bit. vx_optim_create is the group of one (stride n). */
vx_status vx_optim_create_group(const vx_adam_cfg *cfgs, const double *max_norms, size_t n,
                                size_t stride, int members, vx_device *dev, vx_optim **out,
                                vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

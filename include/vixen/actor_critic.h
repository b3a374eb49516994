/* actor_critic.h — PPO's actor-critic, built from dense layers (dense.h) like the Q-network:
 * its layout, initialisation, and the CPU reference forward and backward passes.
 *
 * Shapes: B = batch, D = input width (the normalised observation), H_l = trunk widths,
 * K = VX_PPO_LOGITS = 15 (the three branches' logits, 9 + 3 + 3).
 *
 *   policy trunk:  h_1 = relu(x W_1 + b_1), …, h_L = relu(h_{L-1} W_L + b_L)      (B × H_L)
 *   logits:        z = h_L W_pi + b_pi                                            (B × K)
 *   value trunk:   g_1 … g_L likewise from x (or, shared, g = h)                   (B × H_L)
 *   value:         V = g_L W_v + b_v                                              (B × 1)
 *
 * Separate trunks (the default) keep the value loss from pulling on the policy's features; a
 * shared trunk halves the work. Initialisation follows CleanRL's: He-normal for the hidden
 * layers, the policy head's weights scaled to 0.01 (a near-uniform first policy) and the value
 * head's to 1, biases zero. All parameters live in one flat vector, each tensor 16-byte aligned.
 * The float CPU code here and the float64 build the tests check gradients with are the same
 * source (src/nn/ac_impl.h). */
#ifndef VIXEN_ACTOR_CRITIC_H
#define VIXEN_ACTOR_CRITIC_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/dense.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VX_AC_MAX_TRUNK 4

typedef struct {
    int in_dim;                 /* VX_OBS_DIM */
    int n_trunk;                /* 2 */
    int trunk[VX_AC_MAX_TRUNK]; /* 160, 160: about 70 K parameters with separate trunks */
    int shared;                 /* 1: one trunk feeds both heads */
    int n_logits;               /* VX_PPO_LOGITS */
} vx_ac_cfg;

void vx_ac_cfg_default(vx_ac_cfg *c);

typedef struct {
    vx_ac_cfg cfg;
    vx_dense pi[VX_AC_MAX_TRUNK], v[VX_AC_MAX_TRUNK]; /* v unused when shared */
    vx_dense pi_head, v_head;
    size_t n_params;  /* length of the flat vector */
    size_t n_weights; /* trainable numbers */
    size_t n_tensors; /* weights and biases, for checkpoints */
} vx_ac_layout;

vx_status vx_ac_layout_make(const vx_ac_cfg *cfg, vx_ac_layout *out, vx_err *e);
/* Name ("pi.0.weight", "v.1.bias", "pi_head.weight", …), offset and shape of tensor i. */
void vx_ac_tensor(const vx_ac_layout *L, size_t i, char *name, size_t name_n, size_t *offset,
                  int *rows, int *cols);
/* The initial parameters (host, n_params floats), drawn from Philox stream (seed, tensor). */
void vx_ac_init(const vx_ac_layout *L, uint64_t seed, float *params);

/* Activations of one forward pass (kept for the backward pass), for up to max_batch rows. */
typedef struct {
    int max_batch;
    float *pi[VX_AC_MAX_TRUNK], *v[VX_AC_MAX_TRUNK]; /* B × H_l after ReLU */
    float *logits;                                   /* B × K */
    float *value;                                    /* B */
    float *scratch;                                  /* backward */
    float *mem_;
} vx_ac_ws;

vx_status vx_ac_ws_create(const vx_ac_layout *L, int max_batch, vx_ac_ws *ws, vx_err *e);
void vx_ac_ws_free(vx_ac_ws *ws);
/* x: B × in_dim. Fills ws->logits and ws->value. */
void vx_ac_forward_ref(const vx_ac_layout *L, const float *params, const float *x, int B,
                       vx_ac_ws *ws);
/* Backward through the last forward of these rows: dlogits B × K and dvalue B, the loss's
 * gradients; writes (overwrites) grads (n_params floats). */
void vx_ac_backward_ref(const vx_ac_layout *L, const float *params, const float *x, int B,
                        const float *dlogits, const float *dvalue, vx_ac_ws *ws, float *grads);

#ifdef __cplusplus
}
#endif

#endif

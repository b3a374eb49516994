/* ac_f64.h — the actor-critic instantiated in float64 (ac_impl.h with VX_T = double), for
 * finite-difference gradient checks of the same code the float network runs. */
#ifndef VIXEN_AC_F64_H
#define VIXEN_AC_F64_H
#include "vixen/actor_critic.h"

/* Forward: logits (B × n_logits) and values (B). */
void ac64_forward(const vx_ac_layout *L, const double *p, const double *x, int B, double *logits,
                  double *value);
/* Forward then backward from dlogits and dvalue: grads (n_params, overwritten). */
void ac64_backward(const vx_ac_layout *L, const double *p, const double *x, int B,
                   const double *dlogits, const double *dvalue, double *grads);
/* The smallest |pre-activation| of any hidden unit over the batch (ReLU kinks must be far). */
double ac64_min_preact(const vx_ac_layout *L, const double *p, const double *x, int B);
#endif

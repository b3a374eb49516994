/* qnet_f64.h — the Q-network instantiated in float64 for gradient checks. */
#ifndef VIXEN_QNET_F64_H
#define VIXEN_QNET_F64_H
#include "vixen/nn.h"

/* Forward (returns ws q in `q`, B × out_dim) and backward in double, on scratch it allocates. */
void qnet64_run_forward(const vx_qnet_layout *L, const double *p, const double *x, int B,
                        double *q);
void qnet64_run_backward(const vx_qnet_layout *L, const double *p, const double *x, int B,
                         const double *dq, double *grads);
#endif

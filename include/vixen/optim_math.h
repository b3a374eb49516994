/* optim_math.h — one element of Adam and of Polyak averaging, host and device (VX_HD): the CPU's
 * float arithmetic, one correctly rounded operation at a time, so the CPU optimizer and the GPU
 * kernels step the same numbers.
 *
 * Adam (Kingma & Ba 2015) with bias correction and decoupled weight decay (Loshchilov & Hutter
 * 2019), per element:
 *   m ← β1·m + (1 − β1)·g,   v ← β2·v + (1 − β2)·g·g,
 *   p ← p − lr · ( (m·c1) / (sqrt(v·c2) + ε) + wd·p ),   c1 = 1/(1 − β1^t), c2 = 1/(1 − β2^t).
 * Polyak: θ⁻ ← θ⁻ + τ·(θ − θ⁻). */
#ifndef VIXEN_OPTIM_MATH_H
#define VIXEN_OPTIM_MATH_H

#include <math.h>
#include <stdint.h>
#include "vixen/hd.h"

/* The step's constants: computed in double from the step count t ≥ 1, then rounded once. */
typedef struct {
    float lr, b1, b2, eps, wd, c1, c2;
} vx_adam_step_k;

VX_HD static inline vx_adam_step_k vx_adam_constants(double lr, double beta1, double beta2,
                                                     double eps, double wd, int64_t t)
{
    vx_adam_step_k k;
    k.lr = (float)lr, k.b1 = (float)beta1, k.b2 = (float)beta2, k.eps = (float)eps,
    k.wd = (float)wd;
    k.c1 = (float)(1.0 / (1.0 - pow(beta1, (double)t)));
    k.c2 = (float)(1.0 / (1.0 - pow(beta2, (double)t)));
    return k;
}

/* The global-norm clip (every backend's): when a positive max_norm is exceeded, the gradient is
 * scaled by max_norm / norm, rounded to float once; returns whether it clips, *scale 1 if not. */
VX_HD static inline int vx_clip_scale(double max_norm, double norm, float *scale)
{
    int clip = max_norm > 0 && norm > max_norm;
    *scale = clip ? (float)(max_norm / norm) : 1.0f;
    return clip;
}

/* A step's constants and its clip, as a GPU step's kernels hand them on (taken once a member by
 * the launch that has the norm, read by the launch that steps). */
typedef struct {
    vx_adam_step_k k;
    int clip;    /* the norm exceeds the clip */
    float scale; /* the clip's factor, when clip */
} vx_step_consts;

VX_HD static inline void vx_adam_elem(const vx_adam_step_k *k, float *p, float *m, float *v,
                                      float g)
{
    float mi = VX_FADD(VX_FMUL(k->b1, *m), VX_FMUL(1 - k->b1, g));
    float vi = VX_FADD(VX_FMUL(k->b2, *v), VX_FMUL(VX_FMUL(1 - k->b2, g), g));
    *m = mi;
    *v = vi;
    float upd = VX_FADD(VX_FDIV(VX_FMUL(mi, k->c1), VX_FADD(VX_FSQRT(VX_FMUL(vi, k->c2)), k->eps)),
                        VX_FMUL(k->wd, *p));
    *p = VX_FSUB(*p, VX_FMUL(k->lr, upd));
}

VX_HD static inline float vx_polyak_elem(float target, float online, float tau)
{
    return VX_FADD(target, VX_FMUL(tau, VX_FSUB(online, target)));
}

#endif

/* dqn_loss.h — the per-sample loss arithmetic of the branching Double-DQN, host and device.
 *
 * One sample at a time, `VX_HD static inline`, so the CPU learner and the CUDA kernels compute
 * the same numbers. Rows are in the Q-network's output layout (nn.h): branch-major, [action][atom].
 *
 * Expected-value loss (Tavakoli et al. 2018, "mean" target; van Hasselt et al. 2016):
 *   a*_d = argmax_a Q_d(s', a)                       the online network picks,
 *   y    = r + γ^m (1 − terminated) · (1/K) Σ_d Q⁻_d(s', a*_d)   the target network evaluates;
 *   δ_d  = Q_d(s, a_d) − y,  loss = w · (1/K) Σ_d ℓ(δ_d),  ℓ = ½δ² (mse) or Huber(κ),
 *   priority = (1/K) Σ_d |δ_d|.
 * m is the transition's n-step count; truncation bootstraps, termination does not.
 *
 * C51 (Bellemare et al. 2017) per branch, with the branches sharing one target distribution: the
 * mixture (1/K) Σ_d Φ(r + γ^m z, p⁻_d(s', a*_d)) of the branches' projected target distributions.
 * Its mean is exactly the expected-value target above, so the C51 learner is the distributional
 * version of the same BDQ "mean" target. docs/algorithms.md says why. */
#ifndef VIXEN_DQN_LOSS_H
#define VIXEN_DQN_LOSS_H

#include <math.h>
#include <stdint.h>
#include "vixen/hd.h"

#define VX_LOSS_MAX_BRANCHES 4
#define VX_LOSS_MAX_ATOMS 128

/* Shape of one output row. */
typedef struct {
    int n_branches;
    int branch[VX_LOSS_MAX_BRANCHES]; /* actions per branch */
    int offset[VX_LOSS_MAX_BRANCHES]; /* start of branch d in the row */
    int atoms;                        /* 1, or the C51 support size */
    float v_min, v_max;               /* C51 support */
} vx_loss_shape;

enum { VX_LOSS_MSE = 0, VX_LOSS_HUBER = 1, VX_LOSS_C51 = 2 };

/* ℓ and dℓ/dδ */
VX_HD static inline float vx_loss_elem(int kind, float d, float kappa, float *grad)
{
    if (kind == VX_LOSS_HUBER) {
        float a = fabsf(d);
        if (a <= kappa) {
            *grad = d;
            return 0.5f * d * d;
        }
        *grad = d > 0 ? kappa : -kappa;
        return kappa * (a - 0.5f * kappa);
    }
    *grad = d;
    return 0.5f * d * d;
}

/* argmax over a branch's actions of the row's Q (expected value over atoms for C51; ties go to
 * the lowest action). */
VX_HD static inline float vx_loss_q(const vx_loss_shape *s, const float *row, int d, int a)
{
    const float *x = row + s->offset[d] + a * s->atoms;
    if (s->atoms == 1) return x[0];
    /* softmax(logits) · z */
    float mx = x[0];
    for (int i = 1; i < s->atoms; i++) mx = x[i] > mx ? x[i] : mx;
    float dz = (s->v_max - s->v_min) / (float)(s->atoms - 1), num = 0, den = 0;
    for (int i = 0; i < s->atoms; i++) {
        float p = expf(x[i] - mx);
        den += p;
        num += p * (s->v_min + (float)i * dz);
    }
    return num / den;
}

VX_HD static inline int vx_loss_argmax(const vx_loss_shape *s, const float *row, int d)
{
    int best = 0;
    float bq = vx_loss_q(s, row, d, 0);
    for (int a = 1; a < s->branch[d]; a++) {
        float q = vx_loss_q(s, row, d, a);
        if (q > bq) bq = q, best = a;
    }
    return best;
}

/* Expected-value loss of one sample. q_s, q_next_online, q_next_target: output rows; dq: the row
 * of dLoss/dQ to fill (zeroed here; scaled by `scale`, usually 1/B). Returns w·loss; *priority
 * gets the mean |δ_d|. */
VX_HD static inline float vx_loss_dqn(const vx_loss_shape *s, int kind, float kappa, float gamma_m,
                                      const float *q_s, const float *q_next_online,
                                      const float *q_next_target, const int32_t *actions,
                                      float reward, int terminated, float w, float scale, float *dq,
                                      int out_dim, float *priority)
{
    for (int i = 0; i < out_dim; i++) dq[i] = 0;
    float boot = 0;
    for (int d = 0; d < s->n_branches; d++) {
        int a = vx_loss_argmax(s, q_next_online, d);
        boot += q_next_target[s->offset[d] + a];
    }
    boot /= (float)s->n_branches;
    float y = reward + (terminated ? 0.0f : gamma_m * boot);
    float loss = 0, pr = 0, inv_k = 1.0f / (float)s->n_branches;
    for (int d = 0; d < s->n_branches; d++) {
        int j = s->offset[d] + actions[d];
        float delta = q_s[j] - y, g;
        loss += vx_loss_elem(kind, delta, kappa, &g);
        dq[j] = w * inv_k * g * scale;
        pr += fabsf(delta);
    }
    *priority = pr * inv_k;
    return w * loss * inv_k;
}

/* Projects the distribution p over the support, shifted to r + γ z (γ = 0 when terminated), onto
 * the support, adding `mass` times it into m. When b lands on an atom exactly (l = u) the whole
 * probability goes to that atom, so no mass is lost (Bellemare et al.'s formula gives it 0). */
VX_HD static inline void vx_loss_project(const vx_loss_shape *s, const float *p, float reward,
                                         float gamma, float mass, float *m)
{
    int M = s->atoms;
    float dz = (s->v_max - s->v_min) / (float)(M - 1);
    for (int j = 0; j < M; j++) {
        float tz = reward + gamma * (s->v_min + (float)j * dz);
        tz = tz < s->v_min ? s->v_min : (tz > s->v_max ? s->v_max : tz);
        float b = (tz - s->v_min) / dz;
        int l = (int)floorf(b), u = (int)ceilf(b);
        l = l < 0 ? 0 : (l > M - 1 ? M - 1 : l);
        u = u < 0 ? 0 : (u > M - 1 ? M - 1 : u);
        if (l == u) {
            m[l] += mass * p[j];
        } else {
            m[l] += mass * p[j] * ((float)u - b);
            m[u] += mass * p[j] * (b - (float)l);
        }
    }
}

/* softmax of a logits row of M atoms into p */
VX_HD static inline void vx_loss_softmax(const float *x, int M, float *p)
{
    float mx = x[0], den = 0;
    for (int i = 1; i < M; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < M; i++) den += (p[i] = expf(x[i] - mx));
    for (int i = 0; i < M; i++) p[i] /= den;
}

/* C51 loss of one sample: the branches' cross-entropies against the shared target mixture.
 * Returns w · mean_d CE_d; *priority gets mean_d CE_d. `m` (atoms floats) is scratch. */
VX_HD static inline float vx_loss_c51(const vx_loss_shape *s, float gamma_m, const float *q_s,
                                      const float *q_next_online, const float *q_next_target,
                                      const int32_t *actions, float reward, int terminated, float w,
                                      float scale, float *dq, int out_dim, float *priority)
{
    int M = s->atoms;
    float m[VX_LOSS_MAX_ATOMS], p[VX_LOSS_MAX_ATOMS];
    for (int i = 0; i < out_dim; i++) dq[i] = 0;
    for (int i = 0; i < M; i++) m[i] = 0;
    float inv_k = 1.0f / (float)s->n_branches, g = terminated ? 0.0f : gamma_m;
    for (int d = 0; d < s->n_branches; d++) {
        int a = vx_loss_argmax(s, q_next_online, d);
        vx_loss_softmax(q_next_target + s->offset[d] + a * M, M, p);
        vx_loss_project(s, p, reward, g, inv_k, m);
    }
    float loss = 0;
    for (int d = 0; d < s->n_branches; d++) {
        int j = s->offset[d] + actions[d] * M;
        vx_loss_softmax(q_s + j, M, p);
        float ce = 0;
        for (int i = 0; i < M; i++) {
            ce -= m[i] * logf(p[i] > 1e-30f ? p[i] : 1e-30f);
            dq[j + i] = w * inv_k * (p[i] - m[i]) * scale; /* d CE / d logit, Σm = 1 */
        }
        loss += ce;
    }
    *priority = loss * inv_k;
    return w * loss * inv_k;
}

#endif

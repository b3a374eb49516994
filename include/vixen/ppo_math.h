/* ppo_math.h — PPO's per-sample arithmetic, host and device (VX_HD), written once: sampling the
 * factorised categorical policy, its log-probability and entropy, one environment's GAE, and the
 * clipped-surrogate loss of one sample with its gradient with respect to the logits and the
 * value. The CPU learner (src/ppo) calls these; the GPU twin's kernels will call the same code.
 *
 * The policy: the action's three branches (exposure 9, order type 3, urgency 3) are independent
 * categoricals over their own logits, so log π(a|s) = Σ_b log π_b(a_b|s) and the entropy is the
 * sum of the branches' entropies.
 *
 * Sampling draws one uniform per branch from Philox stream (seed, VX_PPO_ACT_STREAM + env), branch
 * b at step t from counter (3t + b) · 2^16 (vx_ppo_rng), and inverts the branch's CDF, computed in
 * double: a float and a double softmax
 * of the same logits agree far beyond a draw's resolution, so the CPU and a GPU pick the same
 * action from the same logits (a tie at a CDF boundary has probability of order 1e-15).
 *
 * Loss of one sample (Schulman et al. 2017; the "37 implementation details" of Huang et al.
 * 2022 where they apply — advantage normalisation per minibatch, value clipping, the entropy
 * bonus, the global gradient-norm clip):
 *   r = exp(log π_new − log π_old),   L_pg = max(−A·r, −A·clip(r, 1 − ε, 1 + ε))
 *   L_v = ½ (V − R)²   or, clipped: ½ max((V − R)², (V_old + clip(V − V_old, −ε, ε) − R)²)
 *   L = L_pg + c_v · L_v − c_e · H
 * with A the (normalised) advantage, R = A_raw + V_old the return, H the entropy. */
#ifndef VIXEN_PPO_MATH_H
#define VIXEN_PPO_MATH_H

#include <math.h>
#include <stdint.h>
#include "vixen/env_dynamics.h"
#include "vixen/hd.h"
#include "vixen/philox.h"

#define VX_PPO_ACT_STREAM (3ull << 40) /* Philox streams of the sampling draws: this + env id */
#define VX_PPO_LOGITS (VX_EXPOSURE_LEVELS + VX_ORDER_TYPES + VX_URGENCY_LEVELS) /* 15 */

/* Branch b's logits start at VX_PPO_OFFSET[b] and number VX_PPO_N[b]. */
VX_HD static inline int vx_ppo_branch_n(int b)
{
    return b == 0 ? VX_EXPOSURE_LEVELS : b == 1 ? VX_ORDER_TYPES : VX_URGENCY_LEVELS;
}
VX_HD static inline int vx_ppo_branch_off(int b)
{
    return b == 0 ? 0 : b == 1 ? VX_EXPOSURE_LEVELS : VX_EXPOSURE_LEVELS + VX_ORDER_TYPES;
}

/* log-softmax of a branch's n ≤ VX_EXPOSURE_LEVELS logits (out: n values) and, when prob is not
 * NULL, the probabilities (prob: n values, exp(z_k − max) / Σ: the exponentials the sum needed
 * anyway — a GPU thread spent most of the sampling and of the loss in exp(), and this halves
 * their count). Everything here is double: the network's float logits are widened first (15 per
 * sample), and the float64 gradient check runs the same code. */
VX_HD static inline void vx_ppo_log_softmax(const double *z, int n, double *out, double *prob)
{
    double mx = z[0], s = 0, e[VX_EXPOSURE_LEVELS]; /* the widest branch */
    for (int k = 1; k < n; k++) mx = z[k] > mx ? z[k] : mx;
    for (int k = 0; k < n; k++) e[k] = exp(z[k] - mx);
    for (int k = 0; k < n; k++) s += e[k];
    double ls = log(s) + mx;
    for (int k = 0; k < n; k++) out[k] = z[k] - ls;
    if (prob)
        for (int k = 0; k < n; k++) prob[k] = e[k] / s;
}

/* The reader of branch b's draw of environment `env` at step `step`: each branch of each step
 * its own counters (vx_rng_part), so no draw is another's. (One reader from counter `step` had
 * read counter step + 1 for the third branch: the next step's first.) */
VX_HD static inline vx_rng vx_ppo_rng(uint64_t seed, uint64_t env, uint64_t step, int b)
{
    return vx_rng_part(seed, VX_PPO_ACT_STREAM + env, step, VX_ACTION_BRANCHES, b);
}

/* Samples the three branches for environment `env` at step `step` from its logits (15 floats);
 * returns log π(a|s), the sum over the branches. */
VX_HD static inline double vx_ppo_sample(const double *logits, uint64_t seed, uint64_t env,
                                         uint64_t step, int32_t *actions)
{
    double logp = 0, lp[VX_EXPOSURE_LEVELS], p[VX_EXPOSURE_LEVELS];
    for (int b = 0; b < VX_ACTION_BRANCHES; b++) {
        int n = vx_ppo_branch_n(b);
        vx_ppo_log_softmax(logits + vx_ppo_branch_off(b), n, lp, p);
        vx_rng g = vx_ppo_rng(seed, env, step, b);
        double u = vx_rng_uniform_double(&g), c = 0;
        int a = n - 1; /* the last category takes what rounding leaves above the sum */
        for (int k = 0; k < n; k++) {
            c += p[k];
            if (u < c) {
                a = k;
                break;
            }
        }
        actions[b] = a;
        logp += lp[a];
    }
    return logp;
}

/* The greedy action (the mode of each branch; ties to the lowest index). */
VX_HD static inline void vx_ppo_greedy(const double *logits, int32_t *actions)
{
    for (int b = 0; b < VX_ACTION_BRANCHES; b++) {
        const double *z = logits + vx_ppo_branch_off(b);
        int best = 0;
        for (int k = 1; k < vx_ppo_branch_n(b); k++)
            if (z[k] > z[best]) best = k;
        actions[b] = best;
    }
}

/* log π(a|s) and the entropy H of the policy at logits (double). */
VX_HD static inline double vx_ppo_logp_entropy(const double *logits, const int32_t *actions,
                                               double *entropy)
{
    double logp = 0, h = 0, lp[VX_EXPOSURE_LEVELS], p[VX_EXPOSURE_LEVELS];
    for (int b = 0; b < VX_ACTION_BRANCHES; b++) {
        int n = vx_ppo_branch_n(b);
        vx_ppo_log_softmax(logits + vx_ppo_branch_off(b), n, lp, p);
        logp += lp[actions[b]];
        for (int k = 0; k < n; k++) h -= p[k] * lp[k];
    }
    if (entropy) *entropy = h;
    return logp;
}

/* One environment's GAE over T steps, backwards (Schulman et al. 2016):
 *   δ_t = r_t + γ · V_next_t − V_t,   A_t = δ_t + γλ · c_t · A_{t+1}
 * where V_next_t is V(s_{t+1}) when the episode goes on, the value of the pre-reset final
 * observation when it was truncated at t (`boot`), and 0 when it terminated; c_t = 0 when the
 * episode ended at t (either flag), so no advantage leaks across episodes. `last_value` is
 * V(s_T), the observation after the rollout. Arrays are strided by `stride` (the environments
 * of one step are consecutive). Writes the advantages; returns are A + V. */
VX_HD static inline void vx_ppo_gae(int T, size_t stride, const float *reward,
                                    const uint8_t *terminated, const uint8_t *truncated,
                                    const float *value, const float *boot, float last_value,
                                    double gamma, double lambda, float *adv)
{
    double next_adv = 0, next_value = last_value;
    for (int t = T - 1; t >= 0; t--) {
        size_t i = (size_t)t * stride;
        double v_next = terminated[i] ? 0.0 : truncated[i] ? (double)boot[i] : next_value;
        int cont = !terminated[i] && !truncated[i];
        double delta = (double)reward[i] + gamma * v_next - (double)value[i];
        double a = delta + gamma * lambda * (cont ? next_adv : 0.0);
        adv[i] = (float)a;
        next_adv = a;
        next_value = value[i];
    }
}

typedef struct {
    double clip;     /* ε of the ratio (and of the value when clip_value) */
    int clip_value;  /* 1: the clipped value loss */
    double vf_coef;  /* c_v */
    double ent_coef; /* c_e */
} vx_ppo_loss_cfg;

typedef struct {
    double pg, v, entropy; /* the sample's L_pg, L_v and H */
    double approx_kl;      /* (r − 1) − log r  (Schulman's k3 estimator) */
    int clipped;           /* |r − 1| > ε */
} vx_ppo_loss_out;

/* The sample's loss from its log π (logp) and entropy h: the clipped surrogate and the value
 * loss into *o (with the statistics), their slopes in log π (*g_logp) and in V (*g_v).
 * vx_ppo_loss and the fused kernels' lanes (src/ppo/ppo_lanes.cuh) share it. */
VX_HD static inline void vx_ppo_loss_terms(const vx_ppo_loss_cfg *c, double logp, double h,
                                           double value, double old_logp, double old_value,
                                           double adv, double ret, double *g_logp, double *g_v,
                                           vx_ppo_loss_out *o)
{
    double log_r = logp - old_logp, r = exp(log_r);
    double rc = r < 1 - c->clip ? 1 - c->clip : r > 1 + c->clip ? 1 + c->clip : r;
    double un = -adv * r, cl = -adv * rc;
    /* dL_pg / dlogπ: −A·r where the unclipped term is the max, 0 where the clipped one is */
    *g_logp = un >= cl ? -adv * r : 0.0;
    double dv = value - ret, v_loss = 0.5 * dv * dv;
    *g_v = dv;
    if (c->clip_value) {
        double d = value - old_value;
        d = d < -c->clip ? -c->clip : d > c->clip ? c->clip : d;
        double vc = old_value + d - ret, lc = 0.5 * vc * vc;
        /* the clipped term can exceed the other only where the clip is active, and there its
         * slope in V is 0 */
        if (lc > v_loss) v_loss = lc, *g_v = 0.0;
    }
    o->pg = un >= cl ? un : cl, o->v = v_loss, o->entropy = h;
    o->approx_kl = (r - 1) - log_r;
    o->clipped = fabs(r - 1) > c->clip;
}

/* The loss of one sample and, scaled by `scale` (1 / minibatch size), its gradient: dlogits
 * (15) with respect to the logits and *dvalue with respect to the value. adv is the advantage as
 * the loss uses it (normalised when configured), ret the return. */
VX_HD static inline double vx_ppo_loss(const vx_ppo_loss_cfg *c, const double *logits, double value,
                                       const int32_t *actions, double old_logp, double old_value,
                                       double adv, double ret, double scale, double *dlogits,
                                       double *dvalue, vx_ppo_loss_out *o)
{
    /* p: each logit's probability, computed once (the entropy and the gradient use it thrice) */
    double lp[VX_PPO_LOGITS], p[VX_PPO_LOGITS], logp = 0, h = 0;
    for (int b = 0; b < VX_ACTION_BRANCHES; b++) {
        int n = vx_ppo_branch_n(b), off = vx_ppo_branch_off(b);
        vx_ppo_log_softmax(logits + off, n, lp + off, p + off);
        logp += lp[off + actions[b]];
        for (int k = 0; k < n; k++) h -= p[off + k] * lp[off + k];
    }
    vx_ppo_loss_out t;
    double g_logp, g_v;
    vx_ppo_loss_terms(c, logp, h, value, old_logp, old_value, adv, ret, &g_logp, &g_v, &t);
    for (int b = 0; b < VX_ACTION_BRANCHES; b++) {
        int n = vx_ppo_branch_n(b), off = vx_ppo_branch_off(b);
        double hb = 0;
        for (int k = 0; k < n; k++) hb -= p[off + k] * lp[off + k];
        for (int k = 0; k < n; k++) {
            double pk = p[off + k];
            double d_logp = (k == actions[b] ? 1.0 : 0.0) - pk; /* dlogπ_b(a_b) / dz_k */
            double d_h = -pk * (lp[off + k] + hb);              /* dH_b / dz_k */
            dlogits[off + k] = scale * (g_logp * d_logp - c->ent_coef * d_h);
        }
    }
    *dvalue = scale * c->vf_coef * g_v;
    if (o) *o = t;
    return t.pg + c->vf_coef * t.v - c->ent_coef * t.entropy;
}

#endif

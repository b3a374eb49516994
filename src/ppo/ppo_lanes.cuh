/* ppo_lanes.cuh — one sample's PPO arithmetic (ppo_math.h) spread over 16 lanes of a warp, for
 * the fused kernels: lane k holds logit k (k < 15) and lane 15 the value.
 *
 * Why: one thread a sample ran its 15 double exp() calls and the sums between them one after
 * another while the rest of the block waited at the next barrier (in the update, 64 threads of
 * 512 worked; the loss was about a tenth of the kernel). Here each lane takes the exp of its own
 * logit, and each sum the one-thread code runs in order — the softmax's Σ, the entropy, log π,
 * the sampling's cumulative sums — every lane runs in the same order over its neighbours'
 * values, read by shuffles. The operations and their order are vx_ppo_loss's and
 * vx_ppo_sample's, so the results are bit-identical to theirs (tests/ppo/ppo_lanes_cuda.cu
 * checks it): only where the work is done changes.
 *
 * All 32 lanes of a warp call these together (the shuffles take the whole warp), two rows a warp:
 * lanes 0-15 one row, 16-31 the other. A lane of a row that does not exist passes any finite
 * values and ignores what it gets back. Loops over a branch's logits run the widest branch's
 * count in every lane, so that every lane reaches every shuffle. */
#ifndef VIXEN_PPO_LANES_CUH
#define VIXEN_PPO_LANES_CUH

#include "vixen/ppo_math.h"

#define PPO_LANES 16 /* lanes a sample: 15 logits and the value */

static_assert(VX_PPO_LOGITS < PPO_LANES, "a lane a logit, then the value's");

/* Lane src's v (src within this lane's row of 16). */
static __device__ inline double row_get(double v, int src)
{
    return __shfl_sync(0xffffffffu, v, src, PPO_LANES);
}

/* The branch of the row's lane k: its first logit and its count (the value's lane, 15, counts
 * as the last branch's: what it computes is not used). */
static __device__ inline void lane_branch(int k, int *b, int *off, int *n)
{
    *b = k < VX_EXPOSURE_LEVELS ? 0 : k < VX_EXPOSURE_LEVELS + VX_ORDER_TYPES ? 1 : 2;
    *off = vx_ppo_branch_off(*b);
    *n = vx_ppo_branch_n(*b);
}

/* vx_ppo_log_softmax of the lane's branch: the lane's log-probability and probability. */
static __device__ inline void lanes_log_softmax(double z, int off, int n, double *lp, double *p)
{
    double mx = row_get(z, off), s = 0;
    for (int j = 1; j < VX_EXPOSURE_LEVELS; j++) {
        double zj = row_get(z, off + (j < n ? j : 0));
        if (j < n) mx = zj > mx ? zj : mx;
    }
    double e = exp(z - mx);
    for (int j = 0; j < VX_EXPOSURE_LEVELS; j++) {
        double ej = row_get(e, off + (j < n ? j : 0));
        if (j < n) s += ej;
    }
    double ls = log(s) + mx;
    *lp = z - ls;
    *p = e / s;
}

/* vx_ppo_sample over the row's lanes, z the lane's logit: every lane gets the three actions and
 * returns log π(a|s). A lane draws its branch's uniform (vx_ppo_rng). */
static __device__ inline double lanes_sample(double z, uint64_t seed, uint64_t env, uint64_t step,
                                             int32_t *actions)
{
    int k = threadIdx.x % PPO_LANES, b, off, n;
    lane_branch(k, &b, &off, &n);
    double lp, p;
    lanes_log_softmax(z, off, n, &lp, &p);
    vx_rng g = vx_ppo_rng(seed, env, step, b);
    double u = vx_rng_uniform_double(&g), c = 0;
    /* the cumulative sum up to this lane's logit, in the one-thread order */
    for (int j = 0; j < VX_EXPOSURE_LEVELS; j++) {
        double pj = row_get(p, off + (j < n ? j : 0));
        if (j <= k - off) c += pj;
    }
    /* the first logit whose cumulative sum passes u; the last when rounding leaves none */
    unsigned hit = __ballot_sync(0xffffffffu, k - off < n && u < c);
    hit = hit >> (threadIdx.x & 16) & 0xffffu; /* this row's lanes */
    double logp = 0;
    for (int bb = 0; bb < VX_ACTION_BRANCHES; bb++) {
        int o = vx_ppo_branch_off(bb), m = vx_ppo_branch_n(bb);
        unsigned mine = hit >> o & ((1u << m) - 1);
        int a = mine ? __ffs(mine) - 1 : m - 1;
        actions[bb] = a;
        logp += row_get(lp, o + a);
    }
    return logp;
}

/* vx_ppo_loss over the row's lanes, z the lane's logit or (lane 15) the value. Returns lane k's
 * dlogits[k], or in lane 15 *dvalue; *o (every lane) as vx_ppo_loss's. */
static __device__ inline double lanes_loss(const vx_ppo_loss_cfg *c, double z,
                                           const int32_t *actions, double old_logp,
                                           double old_value, double adv, double ret, double scale,
                                           vx_ppo_loss_out *o)
{
    int k = threadIdx.x % PPO_LANES, b, off, n;
    lane_branch(k, &b, &off, &n);
    double lp, p;
    lanes_log_softmax(z, off, n, &lp, &p);
    double t = p * lp, logp = 0, h = 0, value = row_get(z, VX_PPO_LOGITS);
    for (int bb = 0; bb < VX_ACTION_BRANCHES; bb++)
        logp += row_get(lp, vx_ppo_branch_off(bb) + actions[bb]);
    for (int j = 0; j < VX_PPO_LOGITS; j++) h -= row_get(t, j);
    double g_logp, g_v; /* from here as vx_ppo_loss, in every lane */
    vx_ppo_loss_terms(c, logp, h, value, old_logp, old_value, adv, ret, &g_logp, &g_v, o);
    double hb = 0; /* the lane's branch's entropy */
    for (int j = 0; j < VX_EXPOSURE_LEVELS; j++) {
        double tj = row_get(t, off + (j < n ? j : 0));
        if (j < n) hb -= tj;
    }
    if (k == VX_PPO_LOGITS) return scale * c->vf_coef * g_v;
    double d_logp = (k - off == actions[b] ? 1.0 : 0.0) - p;
    double d_h = -p * (lp + hb);
    return scale * (g_logp * d_logp - c->ent_coef * d_h);
}

#endif

/* act_step.cuh — one environment's acting step on a CUDA device, as both collection kernels run
 * it (rollout_cuda.cu's per-layer path, act_fused.cu's fused one): its ε-greedy actions from its
 * Q row (dqn_act.h, the CPU's arithmetic), then its step with them (vx_env_step_one: the
 * environments' own step through vx_env_device_view), then its n-step emit (emit_one). The
 * includer is compiled without fused multiply-adds, as the environments' kernel is. Device code
 * only (internal). */
#ifndef VIXEN_ACT_STEP_CUH
#define VIXEN_ACT_STEP_CUH

#include "vixen/dqn_act.h"
#include "vixen/env.h"
#include "rollout_cuda.h"

/* Environment i: actions from q (its output row), then its step into next, rew, te, tr and
 * final_obs (the pre-reset observation of an episode that ended). The actions are in range by
 * construction (the shape's branches are the environment's: checked at the rollout's creation).
 * greedy (each branch's argmax of q) and first (each branch's first block of draws), where not
 * NULL, were made ahead by other threads; vx_act_egreedy's arithmetic either way. */
static __device__ inline void act_and_step(const vx_loss_shape &shape, const float *q, int i,
                                           double eps, uint64_t seed, uint64_t step,
                                           int32_t *actions, const vx_env_params &p,
                                           vx_env_state *states, float *next, float *rew,
                                           uint8_t *te, uint8_t *tr, float *final_obs,
                                           const int *greedy = 0, const vx_u32x4 *first = 0)
{
    int32_t a[VX_ACTION_BRANCHES];
    for (int k = 0; k < shape.n_branches; k++) {
        int g = greedy ? greedy[k] : vx_loss_argmax(&shape, q, k);
        vx_rng r = first ? vx_act_rng_with_first(seed, (uint64_t)i, step, k, first[k])
                         : vx_act_rng(seed, (uint64_t)i, step, k);
        a[k] = vx_act_branch(&r, eps, shape.branch[k], g);
    }
    for (int b = 0; b < VX_ACTION_BRANCHES; b++) actions[(size_t)i * VX_ACTION_BRANCHES + b] = a[b];
    vx_env_state st = states[i];
    vx_env_step_one(&p, &st, (uint64_t)i, a[0], a[1], a[2], next + (size_t)i * VX_OBS_DIM, &rew[i],
                    &te[i], &tr[i], final_obs + (size_t)i * VX_OBS_DIM);
    states[i] = st;
}

/* Environment i's emit at step t of the rollout, by the 32 lanes of one warp (every lane calls
 * it; m: 3 ints of shared memory the warp owns): the CPU collection's episode accounting and
 * vx_nstep_push for step t into the fixed slots of (t, i) — lane 0 the scalars
 * (vx_nstep_push_meta), every lane its share of the observations' copies — then the
 * environment's next observation over its current one in obs (and into xs, if not NULL: the
 * current one's copy, read in its place).
 * next_obs, rew, te, tr and final_obs are the step's, written before by act_and_step (visible to
 * the warp: the caller synchronises between). A thread per environment copying its 45-float rows alone wrote 32
 * scattered rows a store and took 50 µs a step for 2,048 environments. */
static __device__ inline void emit_one(const dqn_emit_args &a, int N, int t, int i, int *m,
                                       float *obs, const int32_t *act, const float *rew,
                                       const uint8_t *te, const uint8_t *tr, const float *next_obs,
                                       const float *final_obs, float *xs = 0)
{
    const int D = VX_OBS_DIM, A = VX_ACTION_BRANCHES, n = a.n, lane = threadIdx.x & 31;
    int ended = te[i] | tr[i];
    size_t slot = (size_t)i * n, base = ((size_t)t * N + i) * n;
    vx_nstep_ring ring = {a.ns.count + i, a.ns.head + i, a.ns.obs + slot * D, a.ns.act + slot * A,
                          a.ns.rew + slot};
    vx_nstep_out o = {a.out.obs + base * D,     a.out.next_obs + base * D,
                      a.out.actions + base * A, a.out.rewards + base,
                      a.out.term + base,        a.out.trunc + base,
                      a.out.steps + base};
    if (lane == 0) {
        a.ep_ret[i] += rew[i];
        if (ended) {
            a.ret_sum[i] += a.ep_ret[i];
            a.ep_count[i] += 1;
            a.ep_ret[i] = 0;
        }
        m[2] = vx_nstep_push_meta(ring, n, a.gamma, act + (size_t)i * A, rew[i], te[i], tr[i], o,
                                  &m[0], &m[1]);
    }
    __syncwarp();
    int p = m[0], first = m[1], emit = m[2];
    /* the current observation: the fused kernel's own copy in shared memory (xs, the row its
     * products read; the global row was written a step ago and is a round trip to L2 away) */
    const float *x = xs ? xs : obs + (size_t)i * D;
    const float *nx = (ended ? final_obs : next_obs) + (size_t)i * D;
    for (int k = lane; k < D; k += 32) ring.obs[p * D + k] = x[k];
    for (int j = 0; j < emit; j++) {
        const float *from = ring.obs + (size_t)((first + j) % n) * D; /* this lane's own writes */
        for (int k = lane; k < D; k += 32) {
            o.obs[(size_t)j * D + k] = from[k];
            o.next_obs[(size_t)j * D + k] = nx[k];
        }
    }
    if (a.flags)
        for (int j = lane; j < n; j += 32) a.flags[base + j] = j < emit;
    /* the next step's observation: each lane over the floats it has read itself (and into xs,
     * where the fused kernel keeps it for its next step) */
    for (int k = lane; k < D; k += 32) {
        float v = next_obs[(size_t)i * D + k];
        obs[(size_t)i * D + k] = v;
        if (xs) xs[k] = v;
    }
    __syncwarp(); /* m is read by every lane before the warp's next environment overwrites it */
}

#endif

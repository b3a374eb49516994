/* act_step.cuh — one environment's acting step on a CUDA device, as both collection kernels run
 * it (rollout_cuda.cu's per-layer path, act_fused.cu's fused one): its ε-greedy actions from its
 * Q row (dqn_act.h, the CPU's arithmetic), then its step with them (vx_env_step_one: the
 * environments' own step through vx_env_device_view). The includer is compiled without fused
 * multiply-adds, as the environments' kernel is. Device code only (internal). */
#ifndef VIXEN_ACT_STEP_CUH
#define VIXEN_ACT_STEP_CUH

#include "vixen/dqn_act.h"
#include "vixen/env.h"

/* Environment i: actions from q (its output row), then its step into next, rew, te, tr and
 * final_obs (the pre-reset observation of an episode that ended). The actions are in range by
 * construction (the shape's branches are the environment's: checked at the rollout's creation). */
static __device__ inline void act_and_step(const vx_loss_shape &shape, const float *q, int i,
                                           double eps, uint64_t seed, uint64_t step,
                                           int32_t *actions, const vx_env_params &p,
                                           vx_env_state *states, float *next, float *rew,
                                           uint8_t *te, uint8_t *tr, float *final_obs)
{
    int32_t a[VX_ACTION_BRANCHES];
    vx_act_egreedy(&shape, q, seed, (uint64_t)i, step, eps, a, NULL);
    for (int b = 0; b < VX_ACTION_BRANCHES; b++) actions[(size_t)i * VX_ACTION_BRANCHES + b] = a[b];
    vx_env_state st = states[i];
    vx_env_step_one(&p, &st, (uint64_t)i, a[0], a[1], a[2], next + (size_t)i * VX_OBS_DIM, &rew[i],
                    &te[i], &tr[i], final_obs + (size_t)i * VX_OBS_DIM);
    states[i] = st;
}

/* The rollout's step counter on (once a step, by one thread): the emit after the acting kernel
 * reads the step as tcount[0] − 1; in a loop's body it also decides whether the loop goes on. */
static __device__ inline void count_step(int *tcount, int in_loop, cudaGraphConditionalHandle loop)
{
    tcount[0] += 1;
    if (in_loop) {
        tcount[1] -= 1;
        cudaGraphSetConditional(loop, tcount[1] > 0);
    }
}

#endif

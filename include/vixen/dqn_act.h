/* dqn_act.h — the DQN's per-environment collection arithmetic, host and device: ε-greedy acting
 * on one row of Q-values, and one environment's n-step accumulator push. Written once as
 * `VX_HD static inline` functions: the CPU collection loop (dqn_cpu.c) and the GPU rollout
 * kernels (rollout_cuda.cu) call the same code, so both collect the same transitions.
 *
 * ε-greedy: each branch of each environment explores on its own with probability ε; environment
 * i's draws for branch k at acting step t come from Philox stream (seed, VX_ACT_STREAM + i), from
 * counter vx_rng_part_first(t, VX_LOSS_MAX_BRANCHES, k) on — one uniform and one bounded integer,
 * whether it explores or not, so the greedy choice never shifts the random sequence, and no
 * branch or step reads another's words. (One reader from counter t for a step's six words reads
 * counter t + 1 too: the next step's first branch's draws. docs/algorithms.md.)
 *
 * n-step (Sutton & Barto 7.1; each environment keeps its last n (state, action, reward)): when n
 * are pending the oldest leaves as a transition with R = Σ_{k<n} γ^k r_k, the observation after
 * the n-th step and m = n; when the episode ends (either flag) every pending start leaves with
 * the rewards up to the end, the pre-reset final observation, its own m and the end's flags. */
#ifndef VIXEN_DQN_ACT_H
#define VIXEN_DQN_ACT_H

#include <stdint.h>
#include "vixen/dqn_loss.h"
#include "vixen/env_dynamics.h"
#include "vixen/hd.h"
#include "vixen/philox.h"

#define VX_ACT_STREAM (1ull << 40) /* Philox stream ids of the acting draws: this + env id */

/* The reader of branch k's draws of environment `env` at acting step `step`, and the first
 * block it reads (which a GPU thread may make ahead of the step: vx_rng_with_first). */
VX_HD static inline uint64_t vx_act_first_block(uint64_t step, int k)
{
    return vx_rng_part_first(step, VX_LOSS_MAX_BRANCHES, k);
}

VX_HD static inline vx_rng vx_act_rng(uint64_t seed, uint64_t env, uint64_t step, int k)
{
    return vx_rng_make(seed, VX_ACT_STREAM + env, vx_act_first_block(step, k));
}

/* vx_act_rng's reader with its first block made ahead (vx_philox_block of stream
 * VX_ACT_STREAM + env at vx_act_first_block(step, k)): the same words, that block's and on. */
VX_HD static inline vx_rng vx_act_rng_with_first(uint64_t seed, uint64_t env, uint64_t step, int k,
                                                 vx_u32x4 first)
{
    return vx_rng_with_first(seed, VX_ACT_STREAM + env, vx_act_first_block(step, k), first);
}

/* A branch's ε-greedy action from its reader: a uniform u, then a bounded integer over its n
 * actions, both drawn whether it explores or not; the integer if u < ε, else `greedy`. */
VX_HD static inline int32_t vx_act_branch(vx_rng *g, double eps, int n, int greedy)
{
    float u = vx_rng_uniform(g);
    uint32_t ra = vx_rng_below(g, (uint32_t)n);
    return u < eps ? (int32_t)ra : (int32_t)greedy;
}

/* Actions (VX_ACTION_BRANCHES of them) of environment `env` at acting step `step` from its
 * output row `q`. Each branch's greedy Q is added to *q_greedy_sum (may be NULL). */
VX_HD static inline void vx_act_egreedy(const vx_loss_shape *s, const float *q, uint64_t seed,
                                        uint64_t env, uint64_t step, double eps, int32_t *actions,
                                        double *q_greedy_sum)
{
    for (int k = 0; k < s->n_branches; k++) {
        int greedy = vx_loss_argmax(s, q, k);
        if (q_greedy_sum) *q_greedy_sum += vx_loss_q(s, q, k, greedy);
        vx_rng g = vx_act_rng(seed, env, step, k);
        actions[k] = vx_act_branch(&g, eps, s->branch[k], greedy);
    }
}

/* One environment's n-step ring: its `n` slots of observation (D floats each), action and
 * reward, the count pending and the ring's head. */
typedef struct {
    int *count, *head; /* this environment's */
    float *obs;        /* n × D */
    int32_t *act;      /* n × VX_ACTION_BRANCHES */
    float *rew;        /* n */
} vx_nstep_ring;

/* Where emitted transitions go: consecutive slots from these pointers. */
typedef struct {
    float *obs, *next_obs; /* × D */
    int32_t *actions;      /* × VX_ACTION_BRANCHES */
    float *rewards;
    uint8_t *terminated, *truncated, *steps;
} vx_nstep_out;

/* The part of a push (vx_nstep_push_one) that is not the observations' copies: the step's action
 * and reward into the ring's slot *slot, then each completed transition's action, R, flags and
 * m into out's slots 0, 1, …, the ring's count and head moved on; returns how many (at most n).
 * Transition j starts from the observation in ring slot (*first + j) % n. R accumulates in
 * double, in the order r_0, r_1, … (correctly rounded on the device too). The GPU rollout calls
 * this from one lane of a warp and copies the observations with all of them. */
VX_HD static inline int vx_nstep_push_meta(vx_nstep_ring r, int n, double gamma, const int32_t *act,
                                           float rew, uint8_t terminated, uint8_t truncated,
                                           vx_nstep_out out, int *slot, int *first)
{
    int cnt = *r.count, head = *r.head;
    int p = (head + cnt) % n;
    for (int b = 0; b < VX_ACTION_BRANCHES; b++) r.act[p * VX_ACTION_BRANCHES + b] = act[b];
    r.rew[p] = rew;
    *slot = p, *first = head;
    cnt++;
    int ended = terminated || truncated;
    int emit = ended ? cnt : (cnt == n ? 1 : 0);
    for (int j = 0; j < emit; j++) {
        int len = ended ? cnt : n;
        double R = 0, g = 1;
        for (int k = 0; k < len; k++) {
            R = VX_DADD(R, VX_DMUL(g, (double)r.rew[(head + k) % n]));
            g = VX_DMUL(g, gamma);
        }
        for (int b = 0; b < VX_ACTION_BRANCHES; b++)
            out.actions[j * VX_ACTION_BRANCHES + b] = r.act[head * VX_ACTION_BRANCHES + b];
        out.rewards[j] = (float)R;
        out.terminated[j] = ended ? terminated : 0;
        out.truncated[j] = ended ? truncated : 0;
        out.steps[j] = (uint8_t)len;
        head = (head + 1) % n;
        cnt--;
    }
    if (ended) head = 0;
    *r.count = cnt;
    *r.head = head;
    return emit;
}

/* Pushes one step (obs, act, rew, the flags, and next_obs: the observation after the step — the
 * pre-reset final one when the episode ended) and writes the transitions it completes into
 * out's slots 0, 1, …; returns how many (at most n). */
VX_HD static inline int vx_nstep_push_one(vx_nstep_ring r, int n, int D, double gamma,
                                          const float *obs, const int32_t *act, float rew,
                                          uint8_t terminated, uint8_t truncated,
                                          const float *next_obs, vx_nstep_out out)
{
    int p, first;
    int emit = vx_nstep_push_meta(r, n, gamma, act, rew, terminated, truncated, out, &p, &first);
    for (int k = 0; k < D; k++) r.obs[p * D + k] = obs[k];
    for (int j = 0; j < emit; j++) {
        const float *from = r.obs + (size_t)((first + j) % n) * D;
        for (int k = 0; k < D; k++) {
            out.obs[(size_t)j * D + k] = from[k];
            out.next_obs[(size_t)j * D + k] = next_obs[k];
        }
    }
    return emit;
}

#endif

/* budget.c — what one trial reserves (hyperopt.h's estimate) and the plan a study runs under.
 *
 * The estimate follows what the objects of a run allocate on a GPU through their accounts, term by
 * term, from the same layouts and settings they are created from (the network's parameter count
 * and widths from its layout, the replay's bytes per transition from the replay), so a change of
 * network or buffer moves the estimate with it. On the CPU the same objects hold host memory (most
 * of it outside the accounts), so there the figure bounds RAM, and the cores bound concurrency.
 * Benchmarks compare it with what trials really reserved (hyperopt's `mem_measured`). */
#include "vixen/actor_critic.h"
#include "vixen/dqn.h"
#include "vixen/hyperopt.h"
#include "vixen/ppo.h"
#include "vixen/replay.h"
#include "../dqn/act_fused_plan.h"
#include "../dqn/dqn_fused_plan.h"
#include "../ppo/ppo_fused_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MB ((size_t)1 << 20)

static size_t clampz(size_t x, size_t lo, size_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* The market's share every environment object uploads: features, OHLC and a reward unit a row. */
static size_t market_bytes(const vx_train_cfg *c)
{
    /* the synthetic market has 390 bars a day; a file market is not known before it is read:
     * the synthetic size stands in, and a file study's first chunk measures the truth */
    size_t rows = (size_t)c->synth_days * 390;
    return rows * (VX_MARKET_FEATURES * 4 + 4 * 8 + 8);
}

/* One Q-network object (qnet_cuda.cu): activations of max_batch rows forward, bwd rows backward,
 * its GEMM workspaces (a training network's trunk of two layers or more has two: its weight
 * gradients' side stream has its own). */
static size_t qnet_bytes(const vx_qnet_layout *L, size_t rows, size_t bwd_rows)
{
    const vx_qnet_cfg *c = &L->cfg;
    size_t hmax, amax, fwd = 0, bwd = 0;
    vx_qnet_widths(L, &hmax, &amax);
    size_t htop = c->n_trunk ? (size_t)c->trunk[c->n_trunk - 1] : (size_t)c->in_dim;
    for (int l = 0; l < c->n_trunk; l++) fwd += (size_t)c->trunk[l];
    fwd += (size_t)c->head_hidden + (size_t)c->atoms;
    for (int d = 0; d < c->n_branches; d++)
        fwd += (size_t)c->head_hidden + (size_t)c->branch[d] * (size_t)c->atoms;
    fwd += (size_t)L->out_dim;
    size_t heads = (size_t)c->n_branches + 1;
    if (bwd_rows)
        bwd =
            (size_t)c->atoms + 2 * hmax + heads * ((size_t)c->atoms + amax + c->head_hidden + htop);
    size_t trunk_ws = (c->n_trunk >= 2 ? 2 : 1) * clampz(bwd_rows * (8 << 10), 4 * MB, 32 * MB);
    size_t ws = bwd_rows ? trunk_ws + heads * MB : MB + heads * (256 << 10);
    return (rows * fwd + bwd_rows * bwd) * 4 + ws;
}

static vx_status dqn_memory(const vx_train_cfg *c, const vx_dqn_settings *s, int kind,
                            vx_trial_memory *m, vx_err *e)
{
    vx_qnet_cfg net;
    vx_dqn_net_cfg(s, &net);
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_status st = vx_dqn_layout(&s->learner, &net, &L, &shape, e);
    if (st) return st;
    size_t P = L.n_params, B = (size_t)s->learner.batch, N = (size_t)c->envs;
    size_t T = (size_t)c->steps_per_epoch, D = VX_OBS_DIM, A = VX_ACTION_BRANCHES;
    size_t n = (size_t)s->learner.n_step, O = (size_t)L.out_dim;
    m->params = (int64_t)L.n_weights; /* as a run counts them; P has the padding too */
    m->batch = (int)B;
    /* online, target, gradients, Adam's m and v, the acting copy */
    m->weights = P * 4 * 6;
    /* the learner's nets: online over [s; s'] (2B rows, B backward) and target over s' (B rows),
     * with the learner's batch buffers (observations, targets, weights, indices, flags) */
    m->activations =
        qnet_bytes(&L, 2 * B, B) + qnet_bytes(&L, B, 0) + B * (O * 4 + 2 * D * 4 + A * 4 + 40);
    /* a learner alone may update through the fused kernels instead (dqn_fused_plan.h: both
     * networks' weight copies and a gradient slice a block — at the default network more than the
     * nets above): a trial may run alone or in a group, so the larger of the two */
    size_t own = 0; /* the fused update's own buffers, 0 where it is not taken */
    if (kind == VX_DEVICE_CUDA && s->learner.fused == 3)
        own = vx_dl_bytes(&L, s->learner.loss, (int)B, s->learner.tf32);
    else if (kind == VX_DEVICE_CUDA &&
             (s->learner.fused == 2 || (s->learner.fused == 1 && (int)B > VX_DQN_FUSED_BATCH)) &&
             vx_df_rows(&L, s->learner.loss, (int)B, VX_PF_SMEM_HOPPER, NULL, 0) > 0)
        own = vx_df_bytes(&L, (int)B, s->learner.tf32);
    if (own) {
        size_t fused = own + B * (O * 4 + 2 * D * 4 + A * 4 + 40);
        m->activations = fused > m->activations ? fused : m->activations;
    }
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, s->replay_kind, (size_t)s->replay_capacity);
    rc.obs_dim = (int)D;
    size_t C = (size_t)s->replay_capacity;
    m->replay = C * (vx_replay_bytes_per_transition(&rc) + 4) +
                (s->replay_kind == VX_REPLAY_RANK ? C * 28 : 0);
    /* the rollout (rollout_cuda.cu): the acting net over N rows; an epoch's transitions in T·N·n
     * slots (each step may emit up to n), packed into as many again with their flags and
     * positions when n > 1 (the scan's scratch is bounded by 4 bytes a slot); the n-step rings;
     * the environments and their market */
    size_t slots = N * T * n, per_slot = 2 * D * 4 + A * 4 + 4 + 3;
    size_t transitions = slots * per_slot + (n > 1 ? slots * (per_slot + 8 + 4) : 0);
    /* fused acting (act_fused_plan.h) keeps its activations in shared memory: its weights'
     * copies instead of a network over N rows, where it takes the network (a Hopper's shared
     * memory assumed) */
    size_t acting = qnet_bytes(&L, N, 0);
    if (kind == VX_DEVICE_CUDA && s->acting != VX_ACTING_FLOAT32 &&
        vx_af_fits(&L, s->acting, VX_PF_SMEM_HOPPER, NULL, 0))
        acting = vx_af_bytes(&L, s->acting);
    m->envs = acting + transitions + N * (3 * D * 4 + n * (D + A + 1) * 4 + 96) +
              N * sizeof(vx_env_state) + market_bytes(c);
    m->fixed = 2 * MB;           /* small buffers, statistics, the replay's update window */
    if (kind == VX_DEVICE_CPU) { /* the CPU learner: one network's activations, no workspaces */
        m->activations = B * (O * 4 + 2 * D * 4 + A * 4 + 40) * 3;
        m->fixed = MB;
    }
    return VX_OK;
}

static vx_status ppo_memory(const vx_train_cfg *c, const vx_ppo_settings *s, int kind,
                            vx_trial_memory *m, vx_err *e)
{
    vx_ac_cfg net;
    vx_ppo_net_cfg(s, &net);
    vx_ac_layout L;
    vx_status st = vx_ac_layout_make(&net, &L, e);
    if (st) return st;
    size_t P = L.n_params, N = (size_t)c->envs, T = (size_t)c->steps_per_epoch, TN = N * T;
    size_t D = VX_OBS_DIM, A = VX_ACTION_BRANCHES, K = (size_t)net.n_logits;
    size_t M = TN / (size_t)s->minibatches, E = (size_t)s->update_epochs;
    size_t W = (size_t)net.in_dim, sum = 0;
    for (int l = 0; l < net.n_trunk; l++) {
        if ((size_t)net.trunk[l] > W) W = (size_t)net.trunk[l];
        sum += (size_t)net.trunk[l] * (net.shared ? 1 : 2);
    }
    m->params = (int64_t)L.n_weights; /* as a run counts them; P has the padding too */
    m->batch = (int)M;
    m->weights = P * 4 * 4; /* parameters, gradients, Adam's m and v */
    /* the actor-critic twice: acting over 2N rows, updating over M; each row its trunk outputs,
     * logits, value and three backward rows of the widest layer; the minibatch's gathered rows */
    size_t row = (sum + K + 1 + 3 * W) * 4;
    m->activations = (2 * N + M) * row + M * (D * 4 + K * 4 + A * 4 + 24);
    /* the rollout: observations, log-probabilities, values, rewards, advantages, returns, actions,
     * flags, the shuffles' keys and permutations */
    m->replay = TN * (D * 4 + 7 * 4 + A * 4 + 2 + 3 * 4 + E * 4 + 8);
    m->envs = N * (4 * D * 4 + 24) + N * sizeof(vx_env_state) + market_bytes(c);
    /* each actor-critic's GEMM workspace (8 KB a row, 4 to 32 MB: ppo_backend_cuda.cu), the
     * shuffles' sort scratch (bounded by 8 bytes a rollout step), statistics */
    m->fixed = kind == VX_DEVICE_CPU ? MB
                                     : clampz(2 * N * (8 << 10), 4 * MB, 32 * MB) +
                                           clampz(M * (8 << 10), 4 * MB, 32 * MB) + TN * 8 + 2 * MB;
    /* on a GPU whose shared memory the fused kernels fit (ppo_fused.h), neither actor-critic
     * object exists: the packed weights, their fragment copies and each block's gradient slice
     * instead, no workspace; the small buffers a quarter MB (with 2 MB here, 24 trials of
     * test_study_cuda's PPO space came out 2.3 to 3.5 MB under the estimate on an H200) */
    int rows = kind != VX_DEVICE_CPU && s->fused ? vx_pf_rows(&L, VX_PF_SMEM_HOPPER, NULL, 0) : 0;
    if (rows) {
        m->activations = vx_pf_bytes(&L, rows, (int)M, s->tf32) + M * (D * 4 + K * 4 + A * 4 + 24);
        /* the sort's scratch, every minibatch's advantage statistics, the rollout's partial sums,
         * the values after it, small buffers */
        m->fixed =
            TN * 8 + E * (size_t)s->minibatches * 16 + (N / 16 + 1) * 2 * D * 8 + N * 4 + MB / 4;
    }
    return VX_OK;
}

vx_status vx_trial_memory_of(const vx_train_cfg *c, int kind, vx_trial_memory *out, vx_err *e)
{
    memset(out, 0, sizeof *out);
    const vx_algo_ops *ops = vx_train_algo(c);
    vx_status st;
    if (strcmp(ops->name, "dqn") == 0)
        st = dqn_memory(c, vx_train_algo_settings_c(c, "dqn"), kind, out, e);
    else if (strcmp(ops->name, "ppo") == 0)
        st = ppo_memory(c, vx_train_algo_settings_c(c, "ppo"), kind, out, e);
    else
        return vx_err_set(e, VX_ERR_UNSUPPORTED, "hyperopt: no memory profile for '%s'", ops->name);
    if (st) return st;
    out->total = out->weights + out->activations + out->replay + out->envs + out->fixed;
    return VX_OK;
}

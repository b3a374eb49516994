/* train_cuda.cu — the GPU backend of the training loop (train_internal.h).
 *
 * Two streams and one host thread. The collect stream runs rollouts (rollout_cuda.h: T steps of
 * act → env step → n-step emit, one graph); the learn stream inserts a finished rollout into the
 * device replay buffer and runs the updates (dqn_cuda.h: one graph per update). The hand-offs are
 * events, never a synchronize:
 *
 *   learn:   wait(rollout e) → insert e → snapshot online → act weights → K updates → stats copy
 *   collect:                                  wait(snapshot) → rollout e + 1 (overlap on)
 *
 * With overlap on, rollout e + 1 acts with the weights as they were before epoch e's updates and
 * runs while they run; the CPU trainer acts with the same snapshot, so both paths compute the
 * same thing. A rollout is not started ahead when the epoch ends at a checkpoint, so a checkpoint
 * never has a rollout in flight; a stop between checkpoints waits for it and inserts it
 * (collected_ahead, honoured on resume). The host waits once per epoch, for the statistics that
 * were copied into pinned memory behind the last update.
 *
 * The backend opens a CUDA device context (vx_device) for the run: the environments are created
 * on it, so their memory is charged to its budget; the other components still allocate on the
 * current device directly. */
#include "vixen/cuda_util.h"
#include "vixen/dqn_cuda.h"
#include "vixen/device.h"
#include "vixen/replay.h"
#include "vixen/rollout_cuda.h"
#include "train_internal.h"
#include "../util/cuda_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct vx_train_gpu {
    vx_device *dev; /* the CUDA context the environments and the replay buffer are created on */
    cudaStream_t learn, collect;
    vx_env *env;
    vx_replay *replay;
    vx_dqn_cuda *dqn;
    vx_rollout_cuda *roll;
    float *act_params;     /* device: the weights acting reads */
    int in_flight;         /* a rollout for the current epoch was started during the last one */
    int eager;             /* the reference path: kernel by kernel, synchronised */
    cudaEvent_t snap;      /* learn stream: the act weights are written and the staging inserted */
    cudaEvent_t c0[2], c1[2], l0, l1; /* timing: rollouts (by epoch parity), updates */
    double *ep_host;       /* pinned: 2 doubles per parity, the rollouts' episode statistics */
    int updates_since_sort;
};

/* The update step's time model, measured on an H200 (docs/benchmarks.md: 216 µs at batch 1,024,
 * 397 µs at 4,096, float32): t(B) ≈ t0 + B·slope.
 * Below B ≈ t0/slope the step is launch-bound, so samples per second grow with B; the epoch's
 * fixed sample budget S costs S·t0/B + S·slope. */
#define STEP_T0_US 156.0
#define STEP_SLOPE_US 0.059

/* Device bytes one batch row costs the learner: three forward workspaces (activations, output,
 * backward scratch) and the sampled batch. */
static size_t bytes_per_row(const vx_qnet_layout *L)
{
    const vx_qnet_cfg *c = &L->cfg;
    size_t f = 0, hmax = (size_t)c->in_dim, amax = 0;
    for (int l = 0; l < c->n_trunk; l++) {
        f += (size_t)c->trunk[l];
        hmax = (size_t)c->trunk[l] > hmax ? (size_t)c->trunk[l] : hmax;
    }
    f += (size_t)c->head_hidden + (size_t)c->atoms;
    for (int d = 0; d < c->n_branches; d++) {
        size_t a = (size_t)c->branch[d] * (size_t)c->atoms;
        f += (size_t)c->head_hidden + a;
        amax = a > amax ? a : amax;
    }
    f += (size_t)L->out_dim + (size_t)c->atoms + amax + (size_t)c->head_hidden + 2 * hmax;
    return 3 * f * 4 + (2 * (size_t)c->in_dim * 4 + 12 + 4 + 3 + 4 + 8) + 2 * (size_t)L->out_dim * 4 + 16;
}

/* The batch, when the user did not set one: the smallest power of two at which the launch-bound
 * part of the epoch's update time is a tenth of the sample-bound part (larger batches then buy
 * little), kept to at least 32 updates per epoch (learning needs steps, not only samples), to a
 * quarter of the free device memory, and never below the configured batch. The learning rate
 * grows linearly with the batch past 4× the configured one, up to 8× the configured rate: linear
 * scaling is a rule for SGD, and Adam's step does not grow with the batch the same way, so the
 * guard keeps a laptop-sized configuration (batch 64) from reaching rates of 1e-2. */
#define LR_SCALE_MAX 8.0
static void choose_batch(vx_train_cfg *c, const vx_qnet_layout *L, size_t free_bytes)
{
    int B0 = c->dqn.batch;
    double S = (double)c->envs * c->steps_per_epoch * c->replay_ratio;
    double want = 10.0 * STEP_T0_US / STEP_SLOPE_US;
    size_t by_mem = free_bytes / 4 / bytes_per_row(L);
    int B = 1;
    while (B < want) B *= 2;
    const char *why = "launch-bound below it (measured step time model)";
    if (c->updates_per_epoch == 0 && B > S / 32) {
        while (B > 1 && B > S / 32) B /= 2;
        why = "keeps 32 updates per epoch";
    }
    if ((size_t)B > by_mem) {
        while (B > 1 && (size_t)B > by_mem) B /= 2;
        why = "a quarter of free device memory";
    }
    if (B < B0) {
        B = B0;
        why = "the configured batch is larger";
    }
    c->dqn.batch = B;
    double lr0 = c->dqn.adam.lr;
    if (B > 4 * B0) c->dqn.adam.lr = lr0 * fmin((double)B / B0, LR_SCALE_MAX);
    vx_log(VX_LOG_INFO,
           "train: batch %d chosen on the GPU (configured %d; %s; %.1f GB free, %zu B per row); "
           "learning rate %g%s",
           B, B0, why, free_bytes / 1e9, bytes_per_row(L), c->dqn.adam.lr,
           B > 4 * B0 ? " (scaled with the batch past 4x the configured one, at most 8x)" : "");
}

extern "C" void vx_train_gpu_free(vx_train_gpu *g)
{
    if (!g) return;
    if (g->learn) cudaStreamSynchronize(g->learn);
    if (g->collect) cudaStreamSynchronize(g->collect);
    vx_rollout_cuda_free(g->roll);
    vx_dqn_cuda_free(g->dqn);
    vx_replay_free(g->replay);
    vx_env_free(g->env);
    cudaFree(g->act_params);
    cudaFreeHost(g->ep_host);
    if (g->snap) cudaEventDestroy(g->snap);
    for (int p = 0; p < 2; p++) {
        if (g->c0[p]) cudaEventDestroy(g->c0[p]);
        if (g->c1[p]) cudaEventDestroy(g->c1[p]);
    }
    if (g->l0) cudaEventDestroy(g->l0);
    if (g->l1) cudaEventDestroy(g->l1);
    if (g->learn) cudaStreamDestroy(g->learn);
    if (g->collect) cudaStreamDestroy(g->collect);
    vx_device_close(g->dev);
    free(g);
}

extern "C" vx_status vx_train_gpu_push(vx_train_gpu *g, vx_trainer *t, vx_err *e)
{
    vx_status st = VX_OK;
    size_t np = t->dqn.L.n_params;
    vx_rollout_state rs = {t->obs, t->ep_ret, &t->ns, &t->act_step};
    st = vx_dqn_cuda_set_state(g->dqn, t->dqn.online, t->dqn.target, t->dqn.adam.m, t->dqn.adam.v,
                               (long long)t->dqn.adam.t, (long long)t->dqn.updates, e);
    if (!st) st = vx_env_set_states(g->env, vx_env_states(t->env), e);
    if (!st) st = vx_rollout_cuda_set_state(g->roll, &rs, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpy(g->act_params, t->act_params, np * 4, cudaMemcpyHostToDevice));
fail:
    return st;
}

extern "C" vx_status vx_train_gpu_create(vx_trainer *t, vx_train_gpu **out, vx_err *e)
{
    *out = NULL;
    vx_status st = VX_OK;
    vx_train_cfg *c = &t->cfg;
    vx_train_gpu *g = (vx_train_gpu *)calloc(1, sizeof *g);
    if (!g) return vx_err_set(e, VX_ERR_NOMEM, "train: out of memory");
    g->eager = !c->gpu_graphs;
    size_t np = t->dqn.L.n_params, free_b = 0, total_b = 0;
    vx_env_cfg ec = c->env;
    ec.seed = c->seed;
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, c->replay_kind, (size_t)c->replay_capacity);
    rc.alpha = c->replay_alpha, rc.eps = c->replay_eps, rc.rank_refresh = c->rank_refresh;
    rc.seed = c->seed;
    {
        vx_device_cfg dc;
        vx_device_cfg_default(&dc);
        dc.kind = VX_DEVICE_CUDA;
        st = vx_device_open(&dc, &g->dev, e);
        if (st) goto fail;
    }
    VX_CUDA_CHECK(cudaStreamCreateWithFlags(&g->learn, cudaStreamNonBlocking));
    VX_CUDA_CHECK(cudaStreamCreateWithFlags(&g->collect, cudaStreamNonBlocking));
    VX_CUDA_CHECK(cudaEventCreateWithFlags(&g->snap, cudaEventDisableTiming));
    for (int p = 0; p < 2; p++) {
        VX_CUDA_CHECK(cudaEventCreate(&g->c0[p]));
        VX_CUDA_CHECK(cudaEventCreate(&g->c1[p]));
    }
    VX_CUDA_CHECK(cudaEventCreate(&g->l0));
    VX_CUDA_CHECK(cudaEventCreate(&g->l1));
    VX_CUDA_CHECK(cudaMallocHost((void **)&g->ep_host, 4 * sizeof(double)));
    VX_CUDA_CHECK(cudaMalloc((void **)&g->act_params, np * 4));
    st = vx_env_create(&ec, &t->market, VX_SPLIT_TRAIN, (size_t)c->envs, g->dev, &g->env, e);
    if (!st) st = vx_replay_create(&rc, g->dev, &g->replay, e);
    if (st) goto fail;
    {
        vx_rollout_cfg ro = {c->steps_per_epoch, c->dqn.n_step, c->dqn.gamma, c->seed,
                             &t->dqn.L, &t->dqn.shape, g->act_params, c->dqn.tf32};
        st = vx_rollout_cuda_create(&ro, g->env, g->collect, &g->roll, e);
    }
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (!c->batch_set) choose_batch(c, &t->dqn.L, free_b);
    {
        vx_qnet_cfg q = t->dqn.L.cfg;
        st = vx_dqn_cuda_create(&c->dqn, &q, t->dqn.online, g->replay, g->learn, &g->dqn, e);
    }
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpy(g->act_params, t->act_params, np * 4, cudaMemcpyHostToDevice));
    if (!vx_replay_on_device(g->replay)) {
        vx_log(VX_LOG_WARN, "train: the replay buffer is on the CPU (see the warning above); "
                            "training continues kernel by kernel, slower");
        g->eager = 1; /* a CPU buffer's staged copies cannot be captured into a graph */
    }
    *out = g;
    return VX_OK;
fail:
    vx_train_gpu_free(g);
    return st;
}

/* Starts the rollout of epoch `ep` on the collect stream, behind the snapshot event. */
static vx_status start_rollout(vx_train_gpu *g, vx_trainer *t, int ep, vx_err *e)
{
    vx_status st = VX_OK;
    int p = ep & 1;
    VX_CUDA_CHECK(cudaStreamWaitEvent(g->collect, g->snap, 0));
    st = vx_rollout_cuda_set_eps(g->roll, vx_train_epsilon_at(&t->cfg, ep), e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(g->c0[p], g->collect));
    st = vx_rollout_cuda_run(g->roll, g->eager, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpyAsync(g->ep_host + 2 * p, vx_rollout_cuda_episode_stats(g->roll), 16,
                                  cudaMemcpyDeviceToHost, g->collect));
    VX_CUDA_CHECK(cudaEventRecord(g->c1[p], g->collect));
    if (g->eager) VX_CUDA_CHECK(cudaStreamSynchronize(g->collect));
fail:
    return st;
}

/* The hand-off: the learn stream waits for rollout `ep` and inserts it. */
static vx_status insert_rollout(vx_train_gpu *g, vx_trainer *t, int ep, vx_err *e)
{
    vx_status st = VX_OK;
    int p = ep & 1;
    vx_transitions tv;
    size_t n;
    VX_CUDA_CHECK(cudaStreamWaitEvent(g->learn, g->c1[p], 0));
    if (t->cfg.dqn.n_step > 1) VX_CUDA_CHECK(cudaEventSynchronize(g->c1[p])); /* the count */
    vx_rollout_cuda_staged(g->roll, &tv, &n);
    st = vx_replay_insert(g->replay, &tv, n, g->learn, e);
    if (st) goto fail;
    t->env_steps += (int64_t)t->cfg.envs * t->cfg.steps_per_epoch;
    t->act_step += (uint64_t)t->cfg.steps_per_epoch;
fail:
    return st;
}

extern "C" vx_status vx_train_gpu_epoch(vx_train_gpu *g, vx_trainer *t, int K, vx_epoch_work *w,
                                        vx_err *e)
{
    vx_status st = VX_OK;
    const vx_train_cfg *c = &t->cfg;
    int ep = t->epoch, p = ep & 1, collected = !t->collected_ahead;
    size_t np = t->dqn.L.n_params;
    if (collected) {
        if (!g->in_flight) { /* acting reads the snapshot (overlap) or the weights as they are */
            if (!c->overlap)
                VX_CUDA_CHECK(cudaMemcpyAsync(g->act_params, vx_dqn_cuda_online(g->dqn), np * 4,
                                              cudaMemcpyDeviceToDevice, g->learn));
            VX_CUDA_CHECK(cudaEventRecord(g->snap, g->learn));
            st = start_rollout(g, t, ep, e);
            if (st) goto fail;
        }
        st = insert_rollout(g, t, ep, e);
        if (st) goto fail;
    }
    t->collected_ahead = 0;
    g->in_flight = 0;
    if (c->overlap)
        VX_CUDA_CHECK(cudaMemcpyAsync(g->act_params, vx_dqn_cuda_online(g->dqn), np * 4,
                                      cudaMemcpyDeviceToDevice, g->learn));
    VX_CUDA_CHECK(cudaEventRecord(g->snap, g->learn));
    if (c->overlap && ep + 1 < c->epochs && (ep + 1) % c->checkpoint_every != 0) {
        st = start_rollout(g, t, ep + 1, e); /* runs beside this epoch's updates */
        if (st) goto fail;
        g->in_flight = 1;
    }
    if (!g->eager && !vx_replay_on_device(g->replay)) {
        /* the buffer fell back to the CPU during the run: the captured update graph points at
         * freed device memory and must not run again */
        vx_log(VX_LOG_WARN, "train: the replay buffer moved to the CPU; updates continue kernel "
                            "by kernel");
        g->eager = 1;
    }
    VX_CUDA_CHECK(cudaEventRecord(g->l0, g->learn));
    {
        int64_t size = (int64_t)vx_replay_size(g->replay); /* host bookkeeping: no read-back */
        int warm = size >= c->warmup && size >= c->dqn.batch;
        if (warm) {
            st = vx_replay_set_beta(g->replay, vx_train_beta_at(c, ep), g->learn, e);
            for (int k = 0; k < K && !st; k++) {
                if (c->replay_kind == VX_REPLAY_RANK &&
                    (g->updates_since_sort == 0 || g->updates_since_sort >= c->rank_refresh)) {
                    st = vx_replay_rank_refresh(g->replay, g->learn, e);
                    g->updates_since_sort = 0;
                }
                g->updates_since_sort++;
                if (!st) st = g->eager ? vx_dqn_cuda_update_eager(g->dqn, e) : vx_dqn_cuda_update(g->dqn, e);
                if (!st && g->eager) VX_CUDA_CHECK(cudaStreamSynchronize(g->learn));
            }
            if (st) goto fail;
            w->updates = K;
        }
    }
    VX_CUDA_CHECK(cudaEventRecord(g->l1, g->learn));
    st = vx_dqn_cuda_stats_fetch(g->dqn, e);
    if (st) goto fail;
    /* the epoch boundary: the statistics, already copied, and the timings */
    {
        vx_dqn_cuda_acc a;
        float ms = 0;
        st = vx_dqn_cuda_stats_read(g->dqn, &a, e);
        if (st) goto fail;
        if (a.n > 0) {
            w->stats.loss = a.loss / a.n;
            w->stats.q_mean = a.q_mean / a.n;
            w->stats.grad_norm = a.grad_norm / a.n;
            w->stats.q_max = a.q_max;
        }
        VX_CUDA_CHECK(cudaEventElapsedTime(&ms, g->l0, g->l1));
        w->learn_s = ms / 1e3;
        if (collected) {
            VX_CUDA_CHECK(cudaEventSynchronize(g->c1[p]));
            VX_CUDA_CHECK(cudaEventElapsedTime(&ms, g->c0[p], g->c1[p]));
            w->collect_s = ms / 1e3;
            w->return_sum = g->ep_host[2 * p];
            w->episodes = g->ep_host[2 * p + 1];
        }
    }
    t->dqn.updates = vx_dqn_cuda_updates(g->dqn);
fail:
    return st;
}

extern "C" vx_status vx_train_gpu_pull(vx_train_gpu *g, vx_trainer *t, int full, vx_err *e)
{
    vx_status st = VX_OK;
    long long adam_t = 0;
    size_t np = t->dqn.L.n_params;
    if (full && g->in_flight) { /* a stop between checkpoints: keep the rollout collected ahead */
        st = insert_rollout(g, t, t->epoch, e);
        if (st) goto fail;
        g->in_flight = 0;
        t->collected_ahead = 1;
    }
    if (!full) { /* an evaluation needs the online weights only */
        st = vx_dqn_cuda_weights(g->dqn, t->dqn.online, e);
        goto fail;
    }
    st = vx_dqn_cuda_get_state(g->dqn, t->dqn.online, t->dqn.target, t->dqn.adam.m, t->dqn.adam.v,
                               &adam_t, e);
    if (st) goto fail;
    t->dqn.adam.t = adam_t;
    t->dqn.updates = vx_dqn_cuda_updates(g->dqn);
    VX_CUDA_CHECK(cudaStreamSynchronize(g->learn));
    VX_CUDA_CHECK(cudaStreamSynchronize(g->collect));
    VX_CUDA_CHECK(cudaMemcpy(t->act_params, g->act_params, np * 4, cudaMemcpyDeviceToHost));
    {
        vx_rollout_state rs = {t->obs, t->ep_ret, &t->ns, &t->act_step};
        vx_env_state *states = (vx_env_state *)malloc((size_t)t->cfg.envs * sizeof *states);
        if (!states) {
            st = vx_err_set(e, VX_ERR_NOMEM, "train: out of memory");
            goto fail;
        }
        st = vx_env_get_states(g->env, states, e);
        if (!st) st = vx_env_set_states(t->env, states, e);
        free(states);
        if (!st) st = vx_rollout_cuda_get_state(g->roll, &rs, e);
    }
fail:
    return st;
}

extern "C" vx_status vx_train_gpu_save_replay(vx_train_gpu *g, const char *path, uint64_t *inserted,
                                              vx_err *e)
{
    vx_replay_stats rs;
    vx_status st = vx_replay_save(g->replay, path, e);
    if (!st) st = vx_replay_stats_get(g->replay, &rs, NULL, e);
    if (!st) *inserted = rs.inserted;
    return st;
}

extern "C" vx_status vx_train_gpu_load_replay(vx_train_gpu *g, const char *path, uint64_t *inserted,
                                              vx_err *e)
{
    vx_replay_stats rs;
    vx_status st = vx_replay_load(g->replay, path, e);
    if (!st) st = vx_replay_stats_get(g->replay, &rs, NULL, e);
    if (!st) *inserted = rs.inserted;
    return st;
}

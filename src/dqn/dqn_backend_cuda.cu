/* dqn_backend_cuda.cu — the DQN's CUDA backend (dqn_backend.h), registered as the device's "dqn"
 * backend: collection as one graph per rollout (rollout_cuda.h), each update as another
 * (learner_cuda.h), the replay buffer on the device, two streams and one host thread.
 *
 * The collect stream runs rollouts; the learn stream inserts a finished rollout into the replay
 * buffer and runs the updates. The hand-offs are events, never a synchronize:
 *
 *   learn:   wait(rollout e) → insert e → snapshot online → act weights → K updates → stats copy
 *   collect:                                  wait(snapshot) → rollout e + 1 (overlap on)
 *
 * With overlap on, rollout e + 1 acts with the weights as they were before epoch e's updates and
 * runs while they run; the CPU backend acts with the same snapshot, so both compute the same
 * thing. The host waits once per epoch, for the statistics copied into pinned memory behind the
 * last update.
 *
 * Checkpoints without stopping: when the run plans one after epoch e, the collection state (the
 * environments, observations, n-step rings, acting counter) is copied on the collect stream after
 * rollout e and before rollout e + 1 starts, and the learner's state and a device copy of the
 * replay buffer on the learn stream after the updates — all into pinned host buffers and the
 * replay buffer's snapshot, behind events. The checkpoint is then epoch e's state exactly, while
 * rollout e + 1 and the next epochs go on; the run's writer thread waits for the events and
 * writes. An unplanned checkpoint (a stop between checkpoints) waits instead: a rollout running
 * ahead is inserted first (collected_ahead, honoured on resume). Counters come from the host's
 * own bookkeeping, never a read-back. */
#include "vixen/dqn_act.h"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "dqn_backend.h"
#include "learner_cuda.h"
#include "rollout_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Fused trials (dqn_backend.h's create_group): what the members share — the learner group over
 * their replay buffers, the stream its updates and the members' inserts run on, the timing. The
 * buffers are the group's: the learner's graph samples every member's, also after a member has
 * left (its last transitions, its updates then unread), so they go with the group. */
typedef struct {
    vx_device *dev;
    int K, refs;
    cudaStream_t s;
    dqn_learner *learner;
    vx_replay **replay; /* K */
    size_t stride;      /* floats from one member's weights to the next's */
    cudaEvent_t l0, l1;
    dqn_learner_acc *acc; /* K, host */
    int *stopped, *seen;  /* K: the member's run has stopped (its steps skipped); scratch */
} dqn_group;

struct dqn_backend {
    dqn_group *grp; /* a member of a fused group (NULL: alone) */
    int member;     /* its index in the group's learner */
    vx_dqn_settings s;
    vx_run_params run;
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_device *dev;
    vx_env *env;
    vx_mem mem;
    cudaStream_t learn, collect;
    vx_replay *replay;
    dqn_learner *learner;
    dqn_rollout *roll;
    float *act_params; /* device: the weights acting reads */
    int in_flight;     /* the next epoch's rollout was started during this one */
    int ahead_ep;      /* which epoch that rollout is */
    int planned;       /* the last epoch queued a snapshot's copies */
    int async;         /* checkpoints are device snapshots (the replay snapshot is reserved) */
    int eager;         /* the reference path: kernel by kernel, synchronised */
    int collected_ahead;
    cudaEvent_t snap, snap_collect, snap_learn;
    cudaEvent_t c0[2], c1[2], l0, l1; /* timing: rollouts (by epoch parity), updates */
    double *ep_host;      /* pinned: 2 doubles per parity, the rollouts' episode statistics */
    uint64_t *step_host;  /* pinned: the acting counter's copy (the host keeps its own) */
    int64_t *adam_t_host; /* pinned: Adam's step count's copy (likewise) */
    int updates_since_sort;
    int K;
    /* the host's bookkeeping */
    uint64_t act_step, inserted;
    int64_t adam_t;
    dqn_state st; /* pinned buffers */
    char chose[160];
};

/* The update step's time model, measured on an H200 (docs/benchmarks.md: 216 µs at batch 1,024,
 * 397 µs at 4,096, float32): t(B) ≈ t0 + B·slope.
 * Below B ≈ t0/slope the step is launch-bound, so samples per second grow with B; the epoch's
 * fixed sample budget S costs S·t0/B + S·slope. */
#define STEP_T0_US 156.0
#define STEP_SLOPE_US 0.059

/* Device bytes one batch row costs the learner: the online network's forward rows (2 per sample:
 * s and s′) and backward rows, the target network's forward row, and the sampled batch. */
static size_t bytes_per_row(const vx_qnet_layout *L)
{
    const vx_qnet_cfg *c = &L->cfg;
    size_t f = 0, hmax, amax;
    vx_qnet_widths(L, &hmax, &amax);
    for (int l = 0; l < c->n_trunk; l++) f += (size_t)c->trunk[l];
    f += (size_t)c->head_hidden + (size_t)c->atoms;
    for (int d = 0; d < c->n_branches; d++)
        f += (size_t)c->head_hidden + (size_t)c->branch[d] * (size_t)c->atoms;
    f += (size_t)L->out_dim;
    size_t Htop = c->n_trunk ? (size_t)c->trunk[c->n_trunk - 1] : (size_t)c->in_dim;
    size_t bwd =
        (size_t)c->atoms + 2 * hmax +
        (size_t)(c->n_branches + 1) * ((size_t)c->atoms + amax + (size_t)c->head_hidden + Htop);
    size_t batch = 2 * (size_t)c->in_dim * 4 + VX_ACTION_BRANCHES * 4 + 4 + 3 + 4 + 8;
    return (3 * f + bwd) * 4 + batch + 2 * (size_t)L->out_dim * 4 + 16;
}

/* The batch, when the user did not set one: the smallest power of two at which the launch-bound
 * part of the epoch's update time is a tenth of the sample-bound part (larger batches then buy
 * little), kept to at least MIN_UPDATES updates per epoch (learning needs steps, not only
 * samples), to a quarter of the memory share this learner may plan for (the device context's
 * budget less what others reserved, or what the caller gave it — never the device's free memory;
 * the other three quarters hold the replay buffer, the environments and the cuBLASLt workspaces,
 * at most 32 MB for the trunk), and never below the configured batch. The learning rate grows
 * linearly with the batch past 4× the configured one, up to 8× the configured rate: linear scaling
 * is a rule for SGD, and Adam's step does not grow with the batch the same way, so the guard keeps
 * a laptop-sized configuration (batch 64) from reaching rates of 1e-2.
 *
 * MIN_UPDATES was 32 until measured (2026-12-01, the CPU path, the learning test's strong-signal
 * market, 8 epochs, seeds 1–4): batch 512 at 43 updates per epoch gave held-out Sharpe −16.4,
 * 24.6, 34.4, 4.0; batch 256 at 85 updates 34.2, 33.6, 36.4, 24.5; batch 128 at 170 updates 43.7,
 * 42.3, 46.5, 51.0 (batch 64, the configured one: 66.8, 57.7). Too few steps cost more than the
 * larger batch bought. */
#define MIN_UPDATES 128
#define VX_STR_(x) #x
#define VX_STR(x) VX_STR_(x)
#define LR_SCALE_MAX 8.0
static void choose_batch(dqn_backend *b, size_t share)
{
    vx_dqn_settings *s = &b->s;
    int B0 = s->learner.batch;
    double S = (double)b->run.envs * b->run.steps_per_epoch * s->replay_ratio;
    double want = 10.0 * STEP_T0_US / STEP_SLOPE_US;
    size_t by_mem = share / 4 / bytes_per_row(&b->L);
    int B = 1;
    while (B < want) B *= 2;
    const char *why = "launch-bound below it (measured step time model)";
    if (s->updates_per_epoch == 0 && B > S / MIN_UPDATES) {
        while (B > 1 && B > S / MIN_UPDATES) B /= 2;
        why = "keeps " VX_STR(MIN_UPDATES) " updates per epoch";
    }
    if ((size_t)B > by_mem) {
        while (B > 1 && (size_t)B > by_mem) B /= 2;
        why = "a quarter of the memory share";
    }
    if (B < B0) {
        B = B0;
        why = "the configured batch is larger";
    }
    if ((int64_t)B > s->replay_capacity) B = (int)s->replay_capacity;
    s->learner.batch = B;
    double lr0 = s->learner.adam.lr;
    if (B > 4 * B0) s->learner.adam.lr = lr0 * fmin((double)B / B0, LR_SCALE_MAX);
    snprintf(b->chose, sizeof b->chose, "batch %d chosen (%s; %.1f GB share, %zu B per row)", B,
             why, share / 1e9, bytes_per_row(&b->L));
    vx_log(VX_LOG_INFO,
           "dqn: batch %d chosen on the GPU (configured %d; %s; %.1f GB share, %zu B "
           "per row); learning rate %g%s",
           B, B0, why, share / 1e9, bytes_per_row(&b->L), s->learner.adam.lr,
           B > 4 * B0 ? " (scaled with the batch past 4x the configured one, at most 8x)" : "");
}

static void group_unref(dqn_group *g)
{
    if (!g || --g->refs > 0) return;
    if (g->s) cudaStreamSynchronize(g->s);
    dqn_learner_free(g->learner);
    for (int k = 0; g->replay && k < g->K; k++) vx_replay_free(g->replay[k]);
    vx_cuda_event_destroy(g->dev, g->l0, 1);
    vx_cuda_event_destroy(g->dev, g->l1, 1);
    vx_cuda_stream_destroy(g->dev, g->s);
    free(g->replay);
    free(g->acc);
    free(g->stopped);
    free(g->seen);
    free(g);
}

/* A member of a group is freed under the group's lock (train/group.c), so refs needs no atomics.
 * The group's stream may still insert from this member's rollout: it is waited for first. */
static void cuda_free_backend(dqn_backend *b)
{
    if (!b) return;
    if (b->grp && b->grp->s) cudaStreamSynchronize(b->grp->s);
    if (b->learn) cudaStreamSynchronize(b->learn);
    if (b->collect) cudaStreamSynchronize(b->collect);
    dqn_rollout_free(b->roll);
    dqn_learner_free(b->learner);
    if (b->grp) group_unref(b->grp); /* the replay buffer is the group's */
    else vx_replay_free(b->replay);
    cudaEvent_t untimed[] = {b->snap, b->snap_collect, b->snap_learn};
    cudaEvent_t timed[] = {b->c0[0], b->c0[1], b->c1[0], b->c1[1], b->l0, b->l1};
    for (int i = 0; i < 3; i++) vx_cuda_event_destroy(b->dev, untimed[i], 0);
    for (int i = 0; i < 6; i++) vx_cuda_event_destroy(b->dev, timed[i], 1);
    vx_cuda_stream_destroy(b->dev, b->learn);
    vx_cuda_stream_destroy(b->dev, b->collect);
    vx_mem_release(&b->mem);
    free(b);
}

static vx_status state_alloc(dqn_backend *b, vx_err *e)
{
    dqn_state *s = &b->st;
    vx_mem *m = &b->mem;
    size_t np = b->L.n_params, N = (size_t)b->run.envs, n = (size_t)b->s.learner.n_step;
    size_t D = VX_OBS_DIM, A = VX_ACTION_BRANCHES;
    vx_status st = vx_mem_alloc_host(m, np * 4, &s->online, e);
    if (!st) st = vx_mem_alloc_host(m, np * 4, &s->target, e);
    if (!st) st = vx_mem_alloc_host(m, np * 4, &s->adam_m, e);
    if (!st) st = vx_mem_alloc_host(m, np * 4, &s->adam_v, e);
    if (!st) st = vx_mem_alloc_host(m, np * 4, &s->acting, e);
    if (!st) st = vx_mem_alloc_host(m, N * sizeof(vx_env_state), &s->env, e);
    if (!st) st = vx_mem_alloc_host(m, N * D * 4, &s->obs, e);
    if (!st) st = vx_mem_alloc_host(m, N * 8, &s->ep_ret, e);
    if (!st) st = vx_mem_alloc_host(m, 2 * N * 8, &s->nstep_count_head, e);
    if (!st) st = vx_mem_alloc_host(m, N * n * D * 4, &s->nstep_obs, e);
    if (!st) st = vx_mem_alloc_host(m, N * n * A * 4, &s->nstep_act, e);
    if (!st) st = vx_mem_alloc_host(m, N * n * 4, &s->nstep_rew, e);
    if (!st) st = vx_mem_alloc_host(m, 4 * sizeof(double), &b->ep_host, e);
    if (!st) st = vx_mem_alloc_host(m, sizeof(uint64_t), &b->step_host, e);
    if (!st) st = vx_mem_alloc_host(m, sizeof(int64_t), &b->adam_t_host, e);
    return st;
}

/* Everything of a backend but its learner (a group's members share one): the streams, events and
 * state buffers, the replay buffer, the rollout, the acting weights (the initial ones, copied),
 * and the batch (chosen for `share` bytes when the settings leave it free). */
static vx_status create_member(const dqn_init *in, size_t share, dqn_backend **out, vx_err *e)
{
    *out = NULL;
    vx_status st = vx_cuda_enter(in->dev, e);
    if (st) return st;
    dqn_backend *b = (dqn_backend *)calloc(1, sizeof *b);
    if (!b) return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    b->s = *in->s, b->run = *in->run, b->L = *in->L, b->shape = *in->shape;
    b->dev = in->dev, b->env = in->env;
    b->eager = !b->run.gpu_graphs;
    vx_mem_init(&b->mem, in->dev, "dqn");
    size_t np = b->L.n_params;
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, b->s.replay_kind, (size_t)b->s.replay_capacity);
    rc.alpha = b->s.replay_alpha, rc.eps = b->s.replay_eps, rc.rank_refresh = b->s.rank_refresh;
    rc.seed = b->run.seed;
    st = vx_cuda_stream_create(in->dev, &b->learn, e);
    if (!st) st = vx_cuda_stream_create(in->dev, &b->collect, e);
    if (!st) st = state_alloc(b, e);
    if (!st) st = vx_mem_alloc(&b->mem, np * 4, &b->act_params, e);
    if (st) goto fail;
    st = vx_cuda_event_create(b->dev, &b->snap, 0, e);
    if (!st) st = vx_cuda_event_create(b->dev, &b->snap_collect, 0, e);
    if (!st) st = vx_cuda_event_create(b->dev, &b->snap_learn, 0, e);
    for (int p = 0; p < 2 && !st; p++) {
        st = vx_cuda_event_create(b->dev, &b->c0[p], 1, e);
        if (!st) st = vx_cuda_event_create(b->dev, &b->c1[p], 1, e);
    }
    if (!st) st = vx_cuda_event_create(b->dev, &b->l0, 1, e);
    if (!st) st = vx_cuda_event_create(b->dev, &b->l1, 1, e);
    if (!st) st = vx_replay_create(&rc, in->dev, &b->replay, e);
    if (st) goto fail;
    {
        dqn_rollout_cfg ro = {b->run.steps_per_epoch,
                              b->s.learner.n_step,
                              b->s.learner.gamma,
                              b->run.seed,
                              &b->L,
                              &b->shape,
                              b->act_params,
                              b->s.learner.tf32,
                              b->s.acting};
        st = dqn_rollout_create(&ro, in->env, b->collect, &b->roll, e);
    }
    if (st) goto fail;
    if (!b->s.batch_set) choose_batch(b, share);
    VX_CUDA_CHECK(
        cudaMemcpyAsync(b->act_params, in->init_params, np * 4, cudaMemcpyHostToDevice, b->learn));
    VX_CUDA_CHECK(cudaStreamSynchronize(b->learn));
    b->K = vx_dqn_updates_per_epoch(&b->s, &b->run);
    *out = b;
    return VX_OK;
fail:
    cuda_free_backend(b);
    return st;
}

static vx_status cuda_create(const dqn_init *in, dqn_backend **out, dqn_state **state, vx_err *e)
{
    *out = NULL;
    dqn_backend *b;
    vx_status st =
        create_member(in, in->mem_share ? in->mem_share : vx_device_available(in->dev), &b, e);
    if (st) return st;
    st = dqn_learner_create(&b->s.learner, &b->L, &b->shape, in->init_params, b->replay, in->dev,
                            b->learn, &b->learner, e);
    if (st) goto fail;
    if (!vx_replay_on_device(b->replay)) {
        vx_log(VX_LOG_WARN, "dqn: the replay buffer is on the CPU (see the warning above); "
                            "training continues kernel by kernel, slower");
        b->eager = 1; /* a CPU buffer's staged copies cannot be captured into a graph */
    } else if (b->run.async_checkpoints) {
        /* the replay buffer's snapshot now, so a run knows at its start whether the device has
         * room for it (as much again as the buffer), not at its first checkpoint */
        vx_err why;
        if (vx_replay_snap_reserve(b->replay, &why) == VX_OK) b->async = 1;
        else
            vx_log(VX_LOG_WARN,
                   "dqn: no room for a device snapshot of the replay buffer (%s); "
                   "checkpoints are written in place, pausing training",
                   why.msg);
    }
    if (!b->eager) { /* the graphs now, before the trials sharing the GPU start working */
        st = dqn_rollout_prepare(b->roll, e);
        if (!st && b->s.replay_kind != VX_REPLAY_RANK) st = dqn_learner_prepare(b->learner, e);
        if (st) goto fail;
    }
    *out = b;
    *state = &b->st;
    return VX_OK;
fail:
    cuda_free_backend(b);
    return st;
}

static void cuda_resolved(const dqn_backend *b, vx_dqn_settings *s) { *s = b->s; }

static void cuda_describe(const dqn_backend *b, char *buf, size_t n)
{
    char fused[64] = "";
    if (b->grp)
        snprintf(fused, sizeof fused, ", its updates fused with %d other trials'", b->grp->K - 1);
    snprintf(buf, n, "on the GPU%s%s%s%s", fused, b->chose[0] ? " (" : "", b->chose,
             b->chose[0] ? ")" : "");
}

/* Starts the rollout of epoch `ep` on the collect stream, behind the snapshot event. */
static vx_status start_rollout(dqn_backend *b, int ep, double eps, vx_err *e)
{
    vx_status st = VX_OK;
    int p = ep & 1;
    VX_CUDA_CHECK(cudaStreamWaitEvent(b->collect, b->snap, 0));
    st = dqn_rollout_set_eps(b->roll, eps, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(b->c0[p], b->collect));
    st = dqn_rollout_run(b->roll, b->eager, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpyAsync(b->ep_host + 2 * p, dqn_rollout_episode_stats(b->roll), 16,
                                  cudaMemcpyDeviceToHost, b->collect));
    VX_CUDA_CHECK(cudaEventRecord(b->c1[p], b->collect));
    if (b->eager) VX_CUDA_CHECK(cudaStreamSynchronize(b->collect));
fail:
    return st;
}

/* The hand-off: stream s (the learn stream; a group's) waits for rollout `ep` and inserts it. */
static vx_status insert_rollout(dqn_backend *b, int ep, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    int p = ep & 1;
    vx_transitions tv;
    size_t n;
    VX_CUDA_CHECK(cudaStreamWaitEvent(s, b->c1[p], 0));
    if (b->s.learner.n_step > 1) VX_CUDA_CHECK(cudaEventSynchronize(b->c1[p])); /* the count */
    dqn_rollout_staged(b->roll, &tv, &n);
    st = vx_replay_insert(b->replay, &tv, n, s, e);
    if (st) goto fail;
    b->inserted += n;
    b->act_step += (uint64_t)b->run.steps_per_epoch;
fail:
    return st;
}

/* The collection state after the last inserted rollout, queued on the collect stream. */
static vx_status snap_collection(dqn_backend *b, vx_err *e)
{
    dqn_state *s = &b->st;
    dqn_rollout_state rs = {s->obs,       s->ep_ret,    s->nstep_count_head, s->nstep_obs,
                            s->nstep_act, s->nstep_rew, b->step_host};
    vx_status st = vx_env_copy_states(b->env, s->env, b->collect, e);
    if (!st) st = dqn_rollout_copy_state(b->roll, &rs, b->collect, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(b->snap_collect, b->collect));
fail:
    return st;
}

/* The learner's state, the acting weights and the replay buffer, queued on the learn stream. */
static vx_status snap_learning(dqn_backend *b, int replay_snapshot, vx_err *e)
{
    dqn_state *s = &b->st;
    vx_status st = dqn_learner_copy_state(b->learner, s->online, s->target, s->adam_m, s->adam_v,
                                          b->adam_t_host, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpyAsync(s->acting, b->act_params, b->L.n_params * 4,
                                  cudaMemcpyDeviceToHost, b->learn));
    if (replay_snapshot) st = vx_replay_snap(b->replay, b->learn, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(b->snap_learn, b->learn));
fail:
    return st;
}

/* The host's counters as of the state being saved. */
static void state_counters(dqn_backend *b)
{
    dqn_state *s = &b->st;
    s->updates = dqn_learner_updates(b->learner);
    s->adam_t = b->adam_t;
    s->act_step = b->act_step;
    s->replay_inserted = b->inserted;
    s->collected_ahead = b->collected_ahead;
}

/* The updates' statistics (sums over a.n updates) and their time into r. */
static void result_learning(const dqn_learner_acc *a, float ms, dqn_result *r)
{
    if (a->n > 0) {
        r->loss = a->loss / a->n;
        r->q_mean = a->q_mean / a->n;
        r->grad_norm = a->grad_norm / a->n;
        r->q_max = a->q_max;
    }
    r->learn_s = ms / 1e3;
}

/* The rollout of parity `par`: its time and episodes into r, once it has ended. (Its steps are
 * the epoch's whether or not this call collected them: a resumed run's first epoch inserts the
 * rollout its stopped run collected ahead.) */
static vx_status result_collection(dqn_backend *b, int par, dqn_result *r, vx_err *e)
{
    vx_status st = VX_OK;
    float ms = 0;
    VX_CUDA_CHECK(cudaEventSynchronize(b->c1[par]));
    VX_CUDA_CHECK(cudaEventElapsedTime(&ms, b->c0[par], b->c1[par]));
    r->collect_s = ms / 1e3;
    r->return_sum = b->ep_host[2 * par];
    r->episodes = b->ep_host[2 * par + 1];
fail:
    return st;
}

static vx_status cuda_epoch(dqn_backend *b, const dqn_plan *p, dqn_result *r, vx_err *e)
{
    vx_status st = vx_cuda_enter(b->dev, e);
    int ep = p->epoch, par = ep & 1, collected = !b->collected_ahead;
    size_t np = b->L.n_params;
    if (st) return st;
    /* a snapshot needs the buffer on the device and its snapshot reserved: else the checkpoint
     * after this epoch is taken in place (save's unplanned path) */
    int snapshot = p->snapshot && b->async && vx_replay_on_device(b->replay);
    b->planned = 0;
    if (collected) {
        if (!b->in_flight) { /* acting reads the snapshot (overlap) or the weights as they are */
            if (!b->s.overlap)
                VX_CUDA_CHECK(cudaMemcpyAsync(b->act_params, dqn_learner_online(b->learner), np * 4,
                                              cudaMemcpyDeviceToDevice, b->learn));
            VX_CUDA_CHECK(cudaEventRecord(b->snap, b->learn));
            st = start_rollout(b, ep, p->eps, e);
            if (st) goto fail;
        }
        st = insert_rollout(b, ep, b->learn, e);
        if (st) goto fail;
    }
    b->collected_ahead = 0;
    b->in_flight = 0;
    if (b->s.overlap)
        VX_CUDA_CHECK(cudaMemcpyAsync(b->act_params, dqn_learner_online(b->learner), np * 4,
                                      cudaMemcpyDeviceToDevice, b->learn));
    VX_CUDA_CHECK(cudaEventRecord(b->snap, b->learn));
    /* a planned checkpoint: the collection as it is now, before the next rollout changes it */
    if (snapshot) st = snap_collection(b, e);
    if (st) goto fail;
    if (p->ahead && b->s.overlap) {
        st = start_rollout(b, ep + 1, p->next_eps, e); /* runs beside this epoch's updates */
        if (st) goto fail;
        b->in_flight = 1;
        b->ahead_ep = ep + 1;
    }
    VX_CUDA_CHECK(cudaEventRecord(b->l0, b->learn));
    {
        int64_t size = (int64_t)vx_replay_size(b->replay); /* host bookkeeping: no read-back */
        if (size >= b->s.warmup && size >= b->s.learner.batch) {
            st = vx_replay_set_beta(b->replay, p->beta, b->learn, e);
            /* the epoch's updates in as few launches as the rank buffer's re-sorts allow (one
             * where there are none), each launch a run of updates inside the graph */
            for (int k = 0; k < p->K && !st;) {
                int rank = b->s.replay_kind == VX_REPLAY_RANK;
                if (rank &&
                    (b->updates_since_sort == 0 || b->updates_since_sort >= b->s.rank_refresh)) {
                    st = vx_replay_rank_refresh(b->replay, b->learn, e);
                    b->updates_since_sort = 0;
                }
                if (!st && !b->eager && !vx_replay_on_device(b->replay)) {
                    /* the buffer fell back to the CPU (a launch failed, in set_beta, a sort or
                     * an update): the captured graph points at freed device memory and must
                     * not run again */
                    vx_log(VX_LOG_WARN, "dqn: the replay buffer moved to the CPU; updates "
                                        "continue kernel by kernel");
                    b->eager = 1;
                }
                int n = 1;
                if (!b->eager) {
                    n = p->K - k;
                    if (rank && n > b->s.rank_refresh - b->updates_since_sort)
                        n = b->s.rank_refresh - b->updates_since_sort;
                    if (n < 1) n = 1;
                }
                if (!st)
                    st = b->eager ? dqn_learner_update(b->learner, 1, e)
                                  : dqn_learner_update_n(b->learner, n, e);
                if (!st) b->adam_t += n, b->updates_since_sort += n, k += n;
                if (!st && b->eager) VX_CUDA_CHECK(cudaStreamSynchronize(b->learn));
            }
            if (st) goto fail;
            r->updates = p->K;
        }
    }
    VX_CUDA_CHECK(cudaEventRecord(b->l1, b->learn));
    st = dqn_learner_stats_fetch(b->learner, e);
    if (!st && snapshot) st = snap_learning(b, 1, e);
    if (st) goto fail;
    if (snapshot) {
        state_counters(b);
        b->planned = 1;
    }
    /* the epoch boundary: the statistics, already copied, and the timings */
    {
        dqn_learner_acc a;
        float ms = 0;
        st = dqn_learner_stats_read(b->learner, &a, e);
        if (st) goto fail;
        VX_CUDA_CHECK(cudaEventElapsedTime(&ms, b->l0, b->l1));
        result_learning(&a, ms, r);
        r->env_steps = (int64_t)b->run.envs * b->run.steps_per_epoch;
        if (collected) st = result_collection(b, par, r, e);
        if (st) goto fail;
    }
    b->st.updates = dqn_learner_updates(b->learner);
fail:
    return st;
}

static vx_status cuda_weights(dqn_backend *b, float *host, vx_err *e)
{
    vx_status st = vx_cuda_enter(b->dev, e);
    if (st) return st;
    const float *online;
    if (b->grp) { /* its slice of the group's weights, after the group's last updates */
        VX_CUDA_CHECK(cudaStreamWaitEvent(b->learn, b->grp->l1, 0));
        online = dqn_learner_online(b->grp->learner) + (size_t)b->member * b->grp->stride;
    } else {
        online = dqn_learner_online(b->learner);
    }
    VX_CUDA_CHECK(
        cudaMemcpyAsync(host, online, b->L.n_params * 4, cudaMemcpyDeviceToHost, b->learn));
    VX_CUDA_CHECK(cudaStreamSynchronize(b->learn));
fail:
    return st;
}

/* A member of a fused group is a search's trial, which never checkpoints (train.h). */
static vx_status group_refuses(const char *what, vx_err *e)
{
    return vx_err_set(e, VX_ERR_UNSUPPORTED, "dqn: a member of a fused group is never %s", what);
}

static vx_status cuda_save(dqn_backend *b, int final, int *detached, vx_err *e)
{
    if (b->grp) return group_refuses("checkpointed", e);
    vx_status st = vx_cuda_enter(b->dev, e);
    if (st) return st;
    if (b->planned) {                /* queued during the epoch: epoch e's state while e + 1 runs */
        if (final && b->in_flight) { /* nothing may stay in flight; this rollout is not saved */
            VX_CUDA_CHECK(cudaStreamSynchronize(b->collect));
            b->in_flight = 0;
        }
        *detached = 1;
        return VX_OK;
    }
    /* unplanned (a stop between checkpoints): settle everything, then copy */
    if (b->in_flight) { /* keep the rollout collected ahead */
        st = insert_rollout(b, b->ahead_ep, b->learn, e);
        if (st) goto fail;
        b->in_flight = 0;
        b->collected_ahead = 1;
    }
    st = snap_collection(b, e);
    if (!st) st = snap_learning(b, 0, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaStreamSynchronize(b->collect));
    VX_CUDA_CHECK(cudaStreamSynchronize(b->learn));
    state_counters(b);
    *detached = 0;
fail:
    return st;
}

static vx_status cuda_wait(dqn_backend *b, vx_err *e)
{
    vx_status st = vx_cuda_enter(b->dev, e);
    if (st) return st;
    VX_CUDA_CHECK(cudaEventSynchronize(b->snap_collect));
    VX_CUDA_CHECK(cudaEventSynchronize(b->snap_learn));
fail:
    return st;
}

static vx_status cuda_save_replay(dqn_backend *b, int detached, const char *path, vx_err *e)
{
    return detached ? vx_replay_snap_save(b->replay, path, e) : vx_replay_save(b->replay, path, e);
}

static vx_status cuda_restore(dqn_backend *b, vx_err *e)
{
    if (b->grp) return group_refuses("resumed", e);
    const dqn_state *s = &b->st;
    vx_status st = vx_cuda_enter(b->dev, e);
    if (st) return st;
    dqn_rollout_state rs = {s->obs,       s->ep_ret,    s->nstep_count_head, s->nstep_obs,
                            s->nstep_act, s->nstep_rew, b->step_host};
    *b->step_host = s->act_step;
    *b->adam_t_host = s->adam_t;
    st = dqn_learner_load_state(b->learner, s->online, s->target, s->adam_m, s->adam_v,
                                b->adam_t_host, s->updates, e);
    if (!st) st = vx_env_set_states(b->env, s->env, e);
    if (!st) st = dqn_rollout_load_state(b->roll, &rs, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpyAsync(b->act_params, s->acting, b->L.n_params * 4,
                                  cudaMemcpyHostToDevice, b->learn));
    VX_CUDA_CHECK(cudaStreamSynchronize(b->learn));
    b->act_step = s->act_step;
    b->adam_t = s->adam_t;
    b->collected_ahead = s->collected_ahead;
    b->in_flight = 0;
    b->planned = 0;
fail:
    return st;
}

static vx_status cuda_load_replay(dqn_backend *b, const char *path, uint64_t *inserted, vx_err *e)
{
    if (b->grp) return group_refuses("resumed", e);
    vx_replay_stats rs;
    vx_status st = vx_replay_load(b->replay, path, e);
    if (!st) st = vx_replay_stats_get(b->replay, &rs, NULL, e);
    if (!st) *inserted = b->inserted = rs.inserted;
    /* the buffer takes the saved run's draw seed, which the update graph built at creation holds
     * as a kernel argument: it is built again at the next update (a resume, never a trial) */
    if (!st) dqn_learner_forget_graph(b->learner);
    return st;
}

/* A member of a group: its own parts and a K-th of the learner group. */
static size_t cuda_reserved(const dqn_backend *b)
{
    size_t learner = b->grp ? dqn_learner_reserved(b->grp->learner) / (size_t)b->grp->K
                            : dqn_learner_reserved(b->learner);
    return b->mem.bytes + vx_replay_reserved(b->replay) + learner + dqn_rollout_reserved(b->roll);
}

/* ---- fused trials -----------------------------------------------------------------------------
 * K members, each with its own environments, rollout (its graph on its own collect stream),
 * replay buffer and acting weights; their updates one learner group (learner_cuda.h) on the
 * group's stream, which also inserts each member's rollout. An epoch:
 *
 *   member k's collect:  rollout e ─┐                       ┌→ rollout e + 1 (overlap)
 *   group's stream:                 └→ insert e (each k) → act weights (each k) → K members'
 *                                                           updates, one launch → statistics
 *
 * The members' rollouts run side by side; what is one launch for all is the updates, where the
 * time of many small trials went (docs/benchmarks.md). A member's arithmetic is its run's alone
 * but for the GEMMs, strided-batched for the group: the same sums in another order, so its
 * results agree with its run alone within a tolerance, not bit for bit (docs/algorithms.md). */
static vx_status cuda_create_group(const dqn_init *in, int K, dqn_backend **out, dqn_state **state,
                                   vx_err *e)
{
    for (int k = 0; k < K; k++) out[k] = NULL, state[k] = NULL;
    if (K < 1) return vx_err_set(e, VX_ERR_ARG, "dqn: a group of %d members", K);
    /* one share for all, the least any member was given: every member then chooses the same
     * batch (the group's learner runs one), and none more than it would alone */
    size_t share = 0;
    for (int k = 0; k < K; k++) {
        size_t m = in[k].mem_share ? in[k].mem_share : vx_device_available(in[k].dev);
        if (!share || (m && m < share)) share = m;
    }
    vx_status st = vx_cuda_enter(in[0].dev, e);
    if (st) return st;
    dqn_group *g = (dqn_group *)calloc(1, sizeof *g);
    vx_dqn_cfg *cfgs = (vx_dqn_cfg *)calloc((size_t)K, sizeof *cfgs);
    float *params = NULL;
    if (g) {
        g->replay = (vx_replay **)calloc((size_t)K, sizeof *g->replay);
        g->acc = (dqn_learner_acc *)calloc((size_t)K, sizeof *g->acc);
        g->stopped = (int *)calloc((size_t)K, sizeof *g->stopped);
        g->seen = (int *)calloc((size_t)K, sizeof *g->seen);
    }
    if (!g || !cfgs || !g->replay || !g->acc || !g->stopped || !g->seen) {
        if (g) free(g->replay), free(g->acc), free(g->stopped), free(g->seen);
        free(g), free(cfgs);
        return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    }
    g->dev = in[0].dev, g->K = K;
    for (int k = 0; k < K && !st; k++) {
        if (in[k].dev != g->dev) {
            st = vx_err_set(e, VX_ERR_ARG, "dqn: member %d of a group on another device", k);
            break;
        }
        st = create_member(&in[k], share, &out[k], e);
        if (st) break;
        out[k]->grp = g, out[k]->member = k;
        g->replay[k] = out[k]->replay; /* the group's from now on */
        g->refs++;
        cfgs[k] = out[k]->s.learner;
        if (!vx_replay_on_device(g->replay[k]))
            st = vx_err_set(e, VX_ERR_UNSUPPORTED,
                            "dqn: member %d's replay buffer is on the CPU: no fused group", k);
        else if (out[k]->eager)
            st = vx_err_set(e, VX_ERR_UNSUPPORTED,
                            "dqn: a fused group runs as CUDA graphs (train.gpu_graphs is off)");
        else st = dqn_rollout_prepare(out[k]->roll, e);
    }
    if (!st) st = vx_cuda_stream_create(g->dev, &g->s, e);
    if (!st) st = vx_cuda_event_create(g->dev, &g->l0, 1, e);
    if (!st) st = vx_cuda_event_create(g->dev, &g->l1, 1, e);
    if (!st) { /* member k's starting weights at k × stride, the padding 0 */
        size_t np = in[0].L->n_params;
        g->stride = dqn_learner_stride_for(in[0].L, cfgs[0].batch, K);
        params = (float *)calloc((size_t)K * g->stride, sizeof *params);
        if (!params) st = vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
        for (int k = 0; k < K && !st; k++)
            memcpy(params + (size_t)k * g->stride, in[k].init_params, np * sizeof *params);
    }
    if (!st)
        st = dqn_learner_create_group(cfgs, K, in[0].L, in[0].shape, params, g->replay, g->dev,
                                      g->s, &g->learner, e);
    if (!st && dqn_learner_stride(g->learner) != g->stride)
        st = vx_err_set(e, VX_ERR_ARG, "dqn: the group's weights are %zu floats apart, not %zu",
                        dqn_learner_stride(g->learner), g->stride);
    if (!st) st = dqn_learner_prepare(g->learner, e); /* before the trials start working */
    free(params);
    free(cfgs);
    if (st) {
        int members = g->refs;
        for (int k = 0; k < K; k++) cuda_free_backend(out[k]), out[k] = NULL;
        if (!members) group_unref(g); /* no member took it with it */
        return st;
    }
    for (int k = 0; k < K; k++) state[k] = &out[k]->st;
    return VX_OK;
}

/* One epoch of the members still in the group (b[k] NULL: gone); p[k], r[k] member k's. */
static vx_status cuda_epoch_group(dqn_backend *const *b, int K, const dqn_plan *p, dqn_result *r,
                                  vx_err *e)
{
    int first = 0;
    while (first < K && !b[first]) first++;
    if (first == K) return VX_OK;
    dqn_group *g = b[first]->grp;
    if (!g) return vx_err_set(e, VX_ERR_ARG, "dqn: a group's epoch of a backend alone");
    vx_status st = vx_cuda_enter(g->dev, e);
    if (st) return st;
    size_t np = b[first]->L.n_params;
    const float *online = dqn_learner_online(g->learner);
    for (int k = first; k < K; k++) {
        dqn_backend *m = b[k];
        if (!m) continue;
        if (m->grp != g) return vx_err_set(e, VX_ERR_ARG, "dqn: member %d of another group", k);
        if (p[k].K != p[first].K)
            return vx_err_set(e, VX_ERR_ARG, "dqn: members %d and %d plan %d and %d updates", first,
                              k, p[first].K, p[k].K);
        memset(&r[k], 0, sizeof r[k]);
    }
    /* collection: the rollouts not started ahead, all before the first insert (which may wait
     * for its rollout on the host) so that they run side by side */
    for (int k = first; k < K && !st; k++) {
        dqn_backend *m = b[k];
        if (!m || m->in_flight) continue;
        if (!m->s.overlap)
            VX_CUDA_CHECK(cudaMemcpyAsync(m->act_params, online + (size_t)m->member * g->stride,
                                          np * 4, cudaMemcpyDeviceToDevice, g->s));
        VX_CUDA_CHECK(cudaEventRecord(m->snap, g->s));
        st = start_rollout(m, p[k].epoch, p[k].eps, e);
        if (st) goto fail;
        m->in_flight = 1;
        m->ahead_ep = p[k].epoch;
    }
    /* each member's rollout in, its acting weights for the next, the next rollout started */
    for (int k = first; k < K && !st; k++) {
        dqn_backend *m = b[k];
        if (!m) continue;
        const float *mine = online + (size_t)m->member * g->stride;
        int ep = p[k].epoch;
        st = insert_rollout(m, ep, g->s, e);
        if (st) goto fail;
        m->in_flight = 0;
        if (m->s.overlap)
            VX_CUDA_CHECK(
                cudaMemcpyAsync(m->act_params, mine, np * 4, cudaMemcpyDeviceToDevice, g->s));
        VX_CUDA_CHECK(cudaEventRecord(m->snap, g->s));
        if (p[k].ahead && m->s.overlap) { /* runs beside the group's updates */
            st = start_rollout(m, ep + 1, p[k].next_eps, e);
            if (st) goto fail;
            m->in_flight = 1;
            m->ahead_ep = ep + 1;
        }
    }
    /* a member not stepped now has stopped for good (group.c: it retired or left): its
     * optimizer steps are skipped from now on, so its weights stay its run's last */
    {
        int changed = 0;
        for (int i = 0; i < g->K; i++) g->seen[i] = 0;
        for (int k = first; k < K; k++)
            if (b[k]) g->seen[b[k]->member] = 1;
        for (int i = 0; i < g->K; i++)
            if (!g->seen[i] && !g->stopped[i]) g->stopped[i] = changed = 1;
        if (changed) st = dqn_learner_set_stopped(g->learner, g->stopped, e);
        if (st) goto fail;
    }
    VX_CUDA_CHECK(cudaEventRecord(g->l0, g->s));
    {
        /* the members insert alike (the same environments and steps), so one is warm when all
         * are; host bookkeeping, no read-back */
        const dqn_backend *m0 = b[first];
        int64_t size = (int64_t)vx_replay_size(m0->replay);
        int updates = 0;
        if (size >= m0->s.warmup && size >= m0->s.learner.batch) {
            /* the graph samples every member's buffer, also a stopped one's: one that stopped
             * before its buffer held a batch would be sampled empty */
            for (int i = 0; i < g->K && !st; i++)
                if ((int64_t)vx_replay_size(g->replay[i]) < m0->s.learner.batch)
                    st = vx_err_set(e, VX_ERR_ARG,
                                    "dqn: member %d of the fused group stopped before its replay "
                                    "buffer held a batch; the group stops",
                                    i);
            if (st) goto fail;
            for (int k = first; k < K && !st; k++)
                if (b[k]) st = vx_replay_set_beta(b[k]->replay, p[k].beta, g->s, e);
            for (int k = 0; k < g->K && !st; k++)
                if (!vx_replay_on_device(g->replay[k])) /* a launch failed: the graph is stale */
                    st = vx_err_set(e, VX_ERR_CUDA,
                                    "dqn: member %d's replay buffer fell back to the CPU; the "
                                    "fused group stops",
                                    k);
            if (!st) st = dqn_learner_update_n(g->learner, p[first].K, e);
            if (st) goto fail;
            updates = p[first].K;
        }
        VX_CUDA_CHECK(cudaEventRecord(g->l1, g->s));
        st = dqn_learner_stats_fetch(g->learner, e);
        if (!st) st = dqn_learner_stats_read(g->learner, g->acc, e);
        if (st) goto fail;
        float ms = 0;
        VX_CUDA_CHECK(cudaEventElapsedTime(&ms, g->l0, g->l1));
        for (int k = first; k < K; k++) {
            dqn_backend *m = b[k];
            if (!m) continue;
            m->adam_t += updates;
            r[k].updates = updates;
            result_learning(&g->acc[m->member], ms, &r[k]);
            r[k].env_steps = (int64_t)m->run.envs * m->run.steps_per_epoch;
            st = result_collection(m, p[k].epoch & 1, &r[k], e);
            if (st) goto fail;
            m->st.updates = dqn_learner_updates(g->learner);
        }
    }
fail:
    return st;
}

extern "C" const dqn_backend_ops vx_dqn_backend_cuda = {
    "cuda",       cuda_create,      cuda_free_backend, cuda_resolved,     cuda_describe,
    cuda_epoch,   cuda_weights,     cuda_save,         cuda_wait,         cuda_save_replay,
    cuda_restore, cuda_load_replay, cuda_reserved,     cuda_create_group, cuda_epoch_group,
};

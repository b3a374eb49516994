/* learner_cuda.cu — the DQN update on a CUDA device (learner_cuda.h), the twin of vx_dqn_update:
 * the loss arithmetic is dqn_loss.h's, the network and optimizer are nn.h's device objects, the
 * replay buffer is replay.h's on the same device.
 *
 * One update, as the graph holds it:
 *   learn:  sample → fork ─ online([s; s′]) (2B rows) ─ join → loss ┬ backward (rows 0..B−1) →
 *   side:          └─ target(s′) ───────────────────────┘            └ new priorities ──┐
 *   learn:  clip + Adam ─ join → statistics (→ Polyak when τ > 0)                       │
 *                        └──────────────────────────────────────────────────────────────┘
 * The new priorities are the loss's and touch only the replay buffer, which the backward pass and
 * the optimizer never read, so their update runs beside them instead of after them.
 * The graph runs n of them in one launch: the update is the body of a conditional while node,
 * followed by the hard target copy when it is due (τ = 0) and the count of updates left, which
 * decides on the device whether the loop goes on. One launch an epoch instead of one an update:
 * many trials' threads sharing a GPU had spent their time queueing launches behind one another
 * (the driver takes a lock per launch), and a trial's first graph instantiation waited for them.
 * Kernel by kernel (eager), the host issues the same kernels and the copy, update by update.
 * Built without fused multiply-adds (CMakeLists.txt): the loss must round like the CPU's. */
#include "vixen/dqn_loss.h"
#include "vixen/optim_math.h"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "../util/pdl.cuh"
#include "dqn_fused.h"
#include "learner_cuda.h"
#include "../replay/replay_group_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A member's own settings, in device memory (the rest of vx_dqn_cfg is the group's). */
typedef struct {
    double gamma;
    float kappa, tau;
    long long target_every;
} member_cfg;

struct dqn_learner {
    vx_device *dev;
    int K;            /* members */
    vx_dqn_cfg *cfgs; /* K; the group's shared settings are cfgs[0]'s */
    vx_dqn_cfg cfg;   /* cfgs[0] */
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_replay **replay; /* K (or all NULL) */
    cudaStream_t s, side;
    vx_mem mem;
    vx_qnet *qs, *qt; /* qs: online on [s; s′] (2B rows, one pass); qt: target on s′ */
    vx_optim *opt;
    /* a learner alone whose network and loss the fused update takes (dqn.fused): its update in
     * two launches (dqn_fused.h), without qs and qt */
    dqn_fused *fz;
    vx_optim_view ov; /* fz's view of opt */
    /* fz's copies not yet made from the weights (after creation, after a load): the next update
     * packs them first; the updates keep them current after that (the flat weights have no other
     * writer) */
    int fz_stale;
    /* member k's tensors at k × these strides (floats): its weights, target and gradients; its
     * s and s′ rows back to back; its rows of the online and the target outputs (dq as the
     * online's) */
    size_t sp, sx, sq, sqt;
    float *online, *target, *grads, *dq, *loss, *prio;
    float *obs2;
    vx_replay_batch *b; /* K: member k's view of the batch arrays (b[0] is their base) */
    member_cfg *mc;     /* K, device */
    float2 *qstat;
    dqn_learner_acc *acc, *acc_host; /* K each */
    cudaEvent_t fork, join, acc_ready;
    cudaEvent_t pfork, pjoin; /* the priority update's branch (the top comment) */
    cudaGraph_t graph;        /* the loop of updates (the top comment) */
    cudaGraphExec_t exec;
    cudaGraphConditionalHandle loop;
    long long *count; /* device: [0] updates made, [1] updates left in this launch */
    long long updates;
    /* a group's members' replay work (their samples, their priority updates): one launch each
     * for all members where their buffers make a replay group (rg), else on R side streams,
     * parallel branches of the graph (one after another on the learner's stream, 64 members'
     * small sample and update kernels had made the group slower than 64 learners of their own) */
    vx_replay_group *rg;
    int R;
    cudaStream_t rs[8];
    cudaEvent_t rfork, rjoin[8];
    int any_tau, any_hard; /* some member averages (τ > 0), some copies (τ = 0) */
    /* a group's optimizer controls (vx_optim_set_controls): each member's configured rate, and
     * whether its steps are skipped (a member whose run has stopped keeps its weights) */
    double *ctl_lr;
    int *ctl_skip, *skip_host;
};

/* A warp a block: with 128 threads a learner alone at batch 1,024 had 8 blocks on 8 SMs (8.7 µs
 * in an H100 timeline, its threads each reading rows of Q of their own); spread over 32 SMs the
 * update took 1–3 µs less at batch 1,024 and 4–6 µs less at 4,096 (H100). Each thread's
 * arithmetic is the same. */
#define LOSS_THREADS 32

/* One thread a sample, blockIdx.y the member: its settings mc[k] (or `one` when mc is NULL, a
 * loss alone), its rows of Q(s), Q(s′) and dq at k × sq, of the target's Q(s′) at k × sqt, its
 * batch rows at k × B of b's arrays. */
static __global__ void loss_kernel(vx_loss_shape shape, int kind, const member_cfg *mc,
                                   member_cfg one, const float *qs_all, const float *qn_all,
                                   size_t sq, const float *qt_all, size_t sqt, int O,
                                   vx_replay_batch b, int B, float *dq_all, float *loss,
                                   float *prio, float2 *qstat)
{
    vx_pdl_wait();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned k = blockIdx.y;
    if (i >= B) return;
    member_cfg c = mc ? mc[k] : one;
    size_t j = (size_t)k * B + i; /* the sample's row among all members' */
    const float *qs = qs_all + k * sq, *qn = qn_all + k * sq, *qt = qt_all + k * sqt;
    float *dq = dq_all + k * sq;
    const int32_t *a = b.actions + j * VX_ACTION_BRANCHES;
    if (qstat) { /* Q(s, a) of the taken actions: their sum over branches and their maximum */
        float sum = 0, mx = -INFINITY;
        for (int d = 0; d < shape.n_branches; d++) {
            float q = vx_loss_q(&shape, qs + (size_t)i * O, d, a[d]);
            sum += q;
            mx = q > mx ? q : mx;
        }
        qstat[j] = make_float2(sum, mx);
    }
    int m = b.steps ? b.steps[j] : 1;
    float gm = (float)pow(c.gamma, (double)m);
    float scale = 1.0f / (float)B;
    size_t r = (size_t)i * O;
    if (kind == VX_LOSS_C51)
        loss[j] = vx_loss_c51(&shape, gm, qs + r, qn + r, qt + r, a, b.rewards[j], b.terminated[j],
                              b.weights[j], scale, dq + r, O, &prio[j]);
    else
        loss[j] = vx_loss_dqn(&shape, kind, c.kappa, gm, qs + r, qn + r, qt + r, a, b.rewards[j],
                              b.terminated[j], b.weights[j], scale, dq + r, O, &prio[j]);
}

extern "C" vx_status dqn_loss_cuda(const vx_loss_shape *shape, int kind, double kappa, double gamma,
                                   const float *q_s, const float *q_next_online,
                                   const float *q_next_target, int out_dim,
                                   const vx_replay_batch *b, int B, float *dq, float *loss,
                                   float *priority, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    member_cfg one = {gamma, (float)kappa, 0.0f, 1};
    VX_CUDA_CHECK(vx_pdl_launch(loss_kernel, dim3((B + LOSS_THREADS - 1) / LOSS_THREADS),
                                dim3(LOSS_THREADS), 0, s, *shape, kind, (const member_cfg *)NULL,
                                one, q_s, q_next_online, (size_t)0, q_next_target, (size_t)0,
                                out_dim, *b, B, dq, loss, priority, (float2 *)NULL));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

/* One block a member (blockIdx.x) adds this update's batch into its accumulator in a fixed order
 * (deterministic). nb: the branches. */
static __global__ void stats_kernel(const float *loss_all, const float2 *qstat_all, int B, int nb,
                                    const double *norm_all, dqn_learner_acc *acc_all)
{
    __shared__ double sl[256], sq[256];
    __shared__ float sm[256];
    vx_pdl_wait();
    unsigned k = blockIdx.x;
    const float *loss = loss_all + (size_t)k * B;
    const float2 *qstat = qstat_all + (size_t)k * B;
    dqn_learner_acc *acc = acc_all + k;
    double l = 0, q = 0;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < B; i += blockDim.x) {
        l += loss[i];
        q += qstat[i].x;
        m = fmaxf(m, qstat[i].y);
    }
    sl[threadIdx.x] = l, sq[threadIdx.x] = q, sm[threadIdx.x] = m;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) {
            sl[threadIdx.x] += sl[threadIdx.x + o];
            sq[threadIdx.x] += sq[threadIdx.x + o];
            sm[threadIdx.x] = fmaxf(sm[threadIdx.x], sm[threadIdx.x + o]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        acc->loss += sl[0] / B;
        acc->q_mean += sq[0] / ((double)B * nb);
        acc->q_max = acc->n == 0 || sm[0] > acc->q_max ? sm[0] : acc->q_max;
        acc->grad_norm += norm_all[k];
        acc->n += 1;
    }
}

/* Polyak averaging of the members with τ > 0 (blockIdx.y the member). */
static __global__ void polyak_kernel(float *target, const float *online, size_t n, size_t stride,
                                     const member_cfg *mc)
{
    vx_pdl_wait();
    unsigned k = blockIdx.y;
    float tau = mc[k].tau;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (tau > 0 && i < n)
        target[k * stride + i] =
            vx_polyak_elem(target[k * stride + i], online[k * stride + i], tau);
}

/* The loop's own steps. Before it: the count it starts from and the updates to make. */
static __global__ void loop_start_kernel(long long *count, long long made, long long n)
{
    count[0] = made;
    count[1] = n;
}

/* After an update: the hard target copy of each member with τ = 0 whose update just made is a
 * multiple of its target_every (after_update's rule, on the device). It runs after every update
 * and copies after one in target_every (1,000 by default), so its grid is small and strides over
 * the weights: a block for every 256 weights had been 570 blocks a member, each only to return. */
#define TARGET_DUE_BLOCKS 32
static __global__ void target_due_kernel(float *target, const float *online, size_t n,
                                         size_t stride, const long long *count,
                                         const member_cfg *mc)
{
    vx_pdl_wait();
    unsigned k = blockIdx.y;
    if (mc[k].tau > 0 || (count[0] + 1) % mc[k].target_every != 0) return;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        target[k * stride + i] = online[k * stride + i];
}

/* Then: one update more made, one fewer left; the loop goes on while some are left. */
static __global__ void loop_tick_kernel(long long *count, cudaGraphConditionalHandle loop)
{
    vx_pdl_wait();
    count[0] += 1;
    count[1] -= 1;
    cudaGraphSetConditional(loop, count[1] > 0);
}

/* Given batches (device memory, one a member) into the learner's batch arrays, in place of a
 * sample. */
static vx_status copy_batch(dqn_learner *d, const vx_replay_batch *given, vx_err *e)
{
    vx_status st = VX_OK;
    size_t B = (size_t)d->cfg.batch, D = (size_t)d->L.cfg.in_dim;
    cudaMemcpyKind c = cudaMemcpyDeviceToDevice;
    for (int k = 0; k < d->K; k++) {
        const vx_replay_batch *b = &given[k];
        vx_replay_batch *to = &d->b[k];
        VX_CUDA_CHECK(cudaMemcpyAsync(to->obs, b->obs, B * D * 4, c, d->s));
        VX_CUDA_CHECK(cudaMemcpyAsync(to->next_obs, b->next_obs, B * D * 4, c, d->s));
        VX_CUDA_CHECK(
            cudaMemcpyAsync(to->actions, b->actions, B * VX_ACTION_BRANCHES * 4, c, d->s));
        VX_CUDA_CHECK(cudaMemcpyAsync(to->rewards, b->rewards, B * 4, c, d->s));
        VX_CUDA_CHECK(cudaMemcpyAsync(to->terminated, b->terminated, B, c, d->s));
        VX_CUDA_CHECK(cudaMemcpyAsync(to->truncated, b->truncated, B, c, d->s));
        if (b->steps) VX_CUDA_CHECK(cudaMemcpyAsync(to->steps, b->steps, B, c, d->s));
        else VX_CUDA_CHECK(cudaMemsetAsync(to->steps, 1, B, d->s));
        VX_CUDA_CHECK(cudaMemcpyAsync(to->weights, b->weights, B * 4, c, d->s));
    }
fail:
    return st;
}

static unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }

/* Every member's sample (sample = 1) or priority update (0), queued behind stream `base` (the
 * learner's, or its side stream for the update) and ending on it: member k's on side stream
 * k mod R between a fork from base and the join back into it; a learner alone (R = 0) on base. */
static vx_status replay_work(dqn_learner *d, int sample, cudaStream_t base, vx_err *e)
{
    vx_status st = VX_OK;
    size_t B = (size_t)d->cfg.batch;
    if (d->rg)
        return sample ? vx_replay_group_sample(d->rg, base, e)
                      : vx_replay_group_update(d->rg, base, e);
    if (d->R) {
        VX_CUDA_CHECK(cudaEventRecord(d->rfork, base));
        for (int j = 0; j < d->R; j++) VX_CUDA_CHECK(cudaStreamWaitEvent(d->rs[j], d->rfork, 0));
    }
    for (int k = 0; k < d->K && !st; k++) {
        cudaStream_t s = d->R ? d->rs[k % d->R] : base;
        st = sample ? vx_replay_sample(d->replay[k], B, &d->b[k], s, e)
                    : vx_replay_update(d->replay[k], d->b[k].index, d->b[k].gen,
                                       d->prio + (size_t)k * B, B, s, e);
    }
    for (int j = 0; j < d->R; j++) { /* joined even after a failure: a capture must end whole */
        VX_CUDA_CHECK(cudaEventRecord(d->rjoin[j], d->rs[j]));
        VX_CUDA_CHECK(cudaStreamWaitEvent(base, d->rjoin[j], 0));
    }
fail:
    return st;
}

/* The fused update (a learner alone): the gradient kernel, then the new priorities beside the
 * slices' sum and the optimizer's step, as update_body runs them beside the backward pass. */
static vx_status fused_body(dqn_learner *d, const vx_replay_batch *fixed, vx_err *e)
{
    vx_status st = VX_OK;
    dqn_fused_args a;
    a.b = d->b[0], a.B = d->cfg.batch, a.gamma = d->cfg.gamma, a.kappa = (float)d->cfg.huber_kappa;
    a.loss = d->loss, a.prio = d->prio, a.qstat = d->qstat;
    st = dqn_fused_grad(d->fz, &a, d->s, e);
    if (st) return st;
    if (!fixed) {
        VX_CUDA_CHECK(cudaEventRecord(d->pfork, d->s));
        VX_CUDA_CHECK(cudaStreamWaitEvent(d->side, d->pfork, 0));
        st = replay_work(d, 0, d->side, e);
        VX_CUDA_CHECK(cudaEventRecord(d->pjoin, d->side));
    }
    if (!st) st = dqn_fused_step(d->fz, a.B, d->grads, d->online, &d->ov, d->s, e);
    if (!fixed) {
        VX_CUDA_CHECK(cudaStreamWaitEvent(d->s, d->pjoin, 0));
        if (d->replay[0]) vx_replay_follow(d->replay[0], d->s);
    }
fail:
    return st;
}

/* the sequence the graph holds; fixed (tests): learn from those batches instead of samples, and
 * leave the replay buffers alone */
static vx_status update_body(dqn_learner *d, const vx_replay_batch *fixed, vx_err *e)
{
    vx_status st = VX_OK;
    int B = d->cfg.batch, O = d->L.out_dim, K = d->K;
    size_t np = d->L.n_params;
    if (fixed) st = copy_batch(d, fixed, e);
    else st = replay_work(d, 1, d->s, e);
    if (st) goto fail;
    if (d->fz) {
        st = fused_body(d, fixed, e);
        goto stats;
    }
    VX_CUDA_CHECK(cudaEventRecord(d->fork, d->s));
    VX_CUDA_CHECK(cudaStreamWaitEvent(d->side, d->fork, 0));
    /* online(s) and online(s′) as one pass over 2B rows: rows 0..B−1 of every activation are
     * online(s)'s, which the backward pass reads */
    st = vx_qnet_forward(d->qs, d->online, d->obs2, 2 * B, d->s, e);
    if (!st) st = vx_qnet_forward(d->qt, d->target, d->b[0].next_obs, B, d->side, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(d->join, d->side));
    VX_CUDA_CHECK(cudaStreamWaitEvent(d->s, d->join, 0));
    {
        const float *qs = vx_qnet_output(d->qs);
        member_cfg none = {0, 0, 0, 1};
        VX_CUDA_CHECK(vx_pdl_launch(
            loss_kernel, dim3((unsigned)(B + LOSS_THREADS - 1) / LOSS_THREADS, (unsigned)K),
            dim3(LOSS_THREADS), 0, d->s, d->shape, d->cfg.loss, d->mc, none, qs, qs + (size_t)B * O,
            d->sq, vx_qnet_output(d->qt), d->sqt, O, d->b[0], B, d->dq, d->loss, d->prio,
            d->qstat));
        VX_CUDA_LAUNCH_CHECK(d->s);
    }
    if (!fixed) { /* the new priorities beside the backward pass and Adam (the top comment) */
        VX_CUDA_CHECK(cudaEventRecord(d->pfork, d->s));
        VX_CUDA_CHECK(cudaStreamWaitEvent(d->side, d->pfork, 0));
        st = replay_work(d, 0, d->side, e);
        VX_CUDA_CHECK(cudaEventRecord(d->pjoin, d->side));
    }
    if (!st) st = vx_qnet_backward(d->qs, d->online, d->obs2, B, d->dq, d->grads, d->s, e);
    if (!st) st = vx_optim_step(d->opt, d->online, d->grads, d->s, e);
    if (!fixed) {
        VX_CUDA_CHECK(cudaStreamWaitEvent(d->s, d->pjoin, 0));
        /* the buffers' waits (their reads, their frees) on the learner's stream, not on the side
         * streams that go with the learner */
        for (int k = 0; k < d->K; k++)
            if (d->replay[k]) vx_replay_follow(d->replay[k], d->s);
    }
stats:
    if (st) goto fail;
    VX_CUDA_CHECK(vx_pdl_launch(stats_kernel, dim3((unsigned)K), dim3(256), 0, d->s, d->loss,
                                d->qstat, B, d->shape.n_branches, vx_optim_norm(d->opt), d->acc));
    VX_CUDA_LAUNCH_CHECK(d->s);
    if (d->any_tau) {
        VX_CUDA_CHECK(vx_pdl_launch(polyak_kernel, dim3(blocks_for(np), (unsigned)K), dim3(256), 0,
                                    d->s, d->target, d->online, np, d->sp, d->mc));
        VX_CUDA_LAUNCH_CHECK(d->s);
        if (d->fz) st = dqn_fused_pack_target(d->fz, d->target, d->s, e);
    }
fail:
    return st;
}

extern "C" void dqn_learner_free(dqn_learner *d)
{
    if (!d) return;
    if (d->exec) cudaGraphExecDestroy(d->exec);
    if (d->graph) cudaGraphDestroy(d->graph);
    vx_cuda_event_destroy(d->dev, d->fork, 0);
    vx_cuda_event_destroy(d->dev, d->join, 0);
    vx_cuda_event_destroy(d->dev, d->pfork, 0);
    vx_cuda_event_destroy(d->dev, d->pjoin, 0);
    vx_cuda_event_destroy(d->dev, d->acc_ready, 0);
    vx_cuda_stream_destroy(d->dev, d->side);
    for (int j = 0; j < d->R; j++) {
        vx_cuda_event_destroy(d->dev, d->rjoin[j], 0);
        vx_cuda_stream_destroy(d->dev, d->rs[j]);
    }
    vx_cuda_event_destroy(d->dev, d->rfork, 0);
    vx_replay_group_free(d->rg);
    vx_qnet_free(d->qs);
    vx_qnet_free(d->qt);
    dqn_fused_free(d->fz);
    vx_optim_free(d->opt);
    vx_mem_release(&d->mem);
    free(d->cfgs);
    free(d->replay);
    free(d->b);
    free(d);
}

/* What the members must share (their networks run as one; their batches as one launch). */
static vx_status group_check(const vx_dqn_cfg *c, int K, vx_err *e)
{
    if (K < 1 || K > 65535)
        return vx_err_set(e, VX_ERR_ARG, "dqn: a group of %d learners (1 to 65535)", K);
    for (int k = 0; k < K; k++) {
        vx_status st = vx_dqn_cfg_check(&c[k], e);
        if (st) return st;
        const char *key = c[k].loss != c[0].loss     ? "dqn.loss"
                          : c[k].atoms != c[0].atoms ? "dqn.atoms"
                          : c[k].v_min != c[0].v_min ? "dqn.v_min"
                          : c[k].v_max != c[0].v_max ? "dqn.v_max"
                          : c[k].batch != c[0].batch ? "dqn.batch"
                          : c[k].tf32 != c[0].tf32   ? "dqn.tf32"
                                                     : NULL;
        if (key)
            return vx_err_set(e, VX_ERR_ARG,
                              "dqn: %s differs between members 0 and %d of a learner group", key,
                              k);
    }
    return VX_OK;
}

extern "C" vx_status dqn_learner_create_group(const vx_dqn_cfg *cfgs, int K,
                                              const vx_qnet_layout *L, const vx_loss_shape *shape,
                                              const float *params, vx_replay *const *replays,
                                              vx_device *dev, cudaStream_t s, dqn_learner **out,
                                              vx_err *e)
{
    *out = NULL;
    vx_status st = group_check(cfgs, K, e);
    if (!st) st = vx_cuda_enter(dev, e);
    if (st) return st;
    dqn_learner *d = (dqn_learner *)calloc(1, sizeof *d);
    member_cfg *mc = (member_cfg *)calloc((size_t)K, sizeof *mc);
    vx_adam_cfg *adam = (vx_adam_cfg *)calloc((size_t)K, sizeof *adam);
    double *clip = (double *)calloc((size_t)K, sizeof *clip);
    double *lr = (double *)calloc((size_t)K, sizeof *lr);
    if (d) {
        d->cfgs = (vx_dqn_cfg *)calloc((size_t)K, sizeof *d->cfgs);
        d->replay = (vx_replay **)calloc((size_t)K, sizeof *d->replay);
        d->b = (vx_replay_batch *)calloc((size_t)K, sizeof *d->b);
    }
    if (!d || !mc || !adam || !clip || !lr || !d->cfgs || !d->replay || !d->b) {
        free(mc), free(adam), free(clip), free(lr);
        if (d) free(d->cfgs), free(d->replay), free(d->b);
        free(d);
        return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    }
    d->dev = dev, d->K = K, d->cfg = cfgs[0], d->L = *L, d->shape = *shape, d->s = s;
    memcpy(d->cfgs, cfgs, (size_t)K * sizeof *cfgs);
    for (int k = 0; k < K; k++) {
        d->replay[k] = replays ? replays[k] : NULL;
        mc[k].gamma = cfgs[k].gamma, mc[k].kappa = (float)cfgs[k].huber_kappa;
        mc[k].tau = (float)cfgs[k].tau, mc[k].target_every = cfgs[k].target_every;
        adam[k] = cfgs[k].adam, clip[k] = cfgs[k].grad_clip;
        if (cfgs[k].tau > 0) d->any_tau = 1;
        else d->any_hard = 1;
    }
    vx_mem_init(&d->mem, dev, "dqn learner");
    size_t np = L->n_params, B = (size_t)cfgs[0].batch, O = (size_t)L->out_dim;
    size_t D = (size_t)L->cfg.in_dim, A = VX_ACTION_BRANCHES, kk = (size_t)K;
    vx_mem *m = &d->mem;
    int fused = cfgs[0].fused, layers = fused == 3;
    if (K == 1 && (fused >= 2 || (fused == 1 && B > VX_DQN_FUSED_BATCH))) {
        char why[96];
        vx_err fe;
        int takes = layers
                        ? dqn_fused_layers_take(L, cfgs[0].loss, cfgs[0].tf32, dev, why, sizeof why)
                        : dqn_fused_rows(L, cfgs[0].loss, (int)B, dev, why, sizeof why) > 0;
        if (!takes) {
            vx_log(VX_LOG_INFO, "dqn: the update a GEMM a layer (the fused one does not take %s)",
                   why);
        } else if (dqn_fused_create(L, shape, cfgs[0].loss, (int)B, cfgs[0].tf32, layers, dev,
                                    &d->fz, &fe)) {
            /* the per-layer path computes the same update: it takes over (the memory estimate
             * reserves the larger of the two paths' buffers, budget.c). A CUDA error that does
             * not stick is cleared here, or the next launch's check would report it. */
            (void)cudaGetLastError();
            vx_log(VX_LOG_WARN,
                   "dqn: the update a GEMM a layer (the fused one could not be made: %s)", fe.msg);
        }
    }
    /* a group's target network takes the online's max batch too, so that its input stride is
     * the online's: member k's s′ rows are read where the online pass reads them */
    if (!st && !d->fz) st = vx_qnet_create_group(L, K, 2 * (int)B, (int)B, dev, &d->qs, e);
    if (!st && !d->fz)
        st = vx_qnet_create_group(L, K, K > 1 ? 2 * (int)B : (int)B, 0, dev, &d->qt, e);
    if (!st && !d->fz) st = vx_qnet_set_tf32(d->qs, cfgs[0].tf32, e);
    if (!st && !d->fz) st = vx_qnet_set_tf32(d->qt, cfgs[0].tf32, e);
    if (st) goto fail;
    if (K == 1) { /* the strides are never used past member 0: sizes as they are */
        d->sp = np, d->sx = 2 * B * D, d->sq = B * O, d->sqt = B * O;
    } else {
        vx_qnet_strides S = vx_qnet_strides_of(d->qs), T = vx_qnet_strides_of(d->qt);
        d->sp = S.params, d->sx = S.x, d->sq = S.q, d->sqt = T.q;
        if (T.x != S.x || T.params != S.params) {
            st = vx_err_set(e, VX_ERR_ARG, "dqn: the group's networks' strides differ");
            goto fail;
        }
    }
    st = vx_optim_create_group(adam, clip, np, d->sp, K, dev, &d->opt, e);
    if (!st && d->fz) st = vx_optim_view_of(d->opt, &d->ov, e);
    d->fz_stale = 1;
    if (!st) st = vx_cuda_stream_create(dev, &d->side, e);
    if (!st) st = vx_mem_alloc(m, kk * d->sp * 4, &d->online, e);
    if (!st) st = vx_mem_alloc(m, kk * d->sp * 4, &d->target, e);
    if (!st) st = vx_mem_alloc(m, kk * d->sp * 4, &d->grads, e);
    if (!st) st = vx_mem_alloc(m, kk * d->sq * 4, &d->dq, e);
    if (!st) st = vx_mem_alloc(m, kk * B * 4, &d->loss, e);
    if (!st) st = vx_mem_alloc(m, kk * B * 4, &d->prio, e);
    if (!st) st = vx_mem_alloc(m, kk * B * sizeof(float2), &d->qstat, e);
    if (!st) st = vx_mem_alloc(m, kk * sizeof(dqn_learner_acc), &d->acc, e);
    if (!st) st = vx_mem_alloc_host(m, kk * sizeof(dqn_learner_acc), &d->acc_host, e);
    if (!st) st = vx_mem_alloc(m, kk * sizeof(member_cfg), &d->mc, e);
    if (!st) st = vx_mem_alloc(m, kk * d->sx * 4, &d->obs2, e);
    if (!st) st = vx_mem_alloc(m, kk * B * A * 4, &d->b[0].actions, e);
    if (!st) st = vx_mem_alloc(m, kk * B * 4, &d->b[0].rewards, e);
    if (!st) st = vx_mem_alloc(m, kk * B, &d->b[0].terminated, e);
    if (!st) st = vx_mem_alloc(m, kk * B, &d->b[0].truncated, e);
    if (!st) st = vx_mem_alloc(m, kk * B, &d->b[0].steps, e);
    if (!st) st = vx_mem_alloc(m, kk * B * 4, &d->b[0].weights, e);
    if (!st) st = vx_mem_alloc(m, kk * B * 4, &d->b[0].index, e);
    if (!st) st = vx_mem_alloc(m, kk * B * 4, &d->b[0].gen, e);
    if (!st) st = vx_mem_alloc(m, 2 * sizeof(long long), &d->count, e);
    if (!st && K > 1) st = vx_mem_alloc(m, kk * sizeof(double), &d->ctl_lr, e);
    if (!st && K > 1) st = vx_mem_alloc(m, kk * sizeof(int), &d->ctl_skip, e);
    if (!st && K > 1) st = vx_mem_alloc_host(m, kk * sizeof(int), &d->skip_host, e);
    if (st) goto fail;
    for (size_t k = 0; k < kk; k++) { /* member k's rows of the batch arrays */
        vx_replay_batch *b = &d->b[k], *b0 = &d->b[0];
        b->obs = d->obs2 + k * d->sx;
        b->next_obs = b->obs + B * D;
        b->actions = b0->actions + k * B * A, b->rewards = b0->rewards + k * B;
        b->terminated = b0->terminated + k * B, b->truncated = b0->truncated + k * B;
        b->steps = b0->steps + k * B, b->weights = b0->weights + k * B;
        b->index = b0->index + k * B, b->gen = b0->gen + k * B;
    }
    st = vx_cuda_event_create(dev, &d->fork, 0, e);
    if (!st) st = vx_cuda_event_create(dev, &d->join, 0, e);
    if (!st) st = vx_cuda_event_create(dev, &d->pfork, 0, e);
    if (!st) st = vx_cuda_event_create(dev, &d->pjoin, 0, e);
    if (!st) st = vx_cuda_event_create(dev, &d->acc_ready, 0, e);
    if (!st && K > 1 && replays) {
        char why[160];
        vx_err ge;
        if (vx_replay_group_create(d->replay, K, d->b, d->prio, B, B, dev, &d->rg, why, sizeof why,
                                   &ge))
            snprintf(why, sizeof why, "%.150s", ge.msg); /* its records refused: unfused */
        if (!d->rg)
            vx_log(VX_LOG_INFO, "dqn: a learner group's replay work member by member: %s", why);
    }
    /* side streams only for replay work member by member */
    if (!st && K > 1 && !d->rg) st = vx_cuda_event_create(dev, &d->rfork, 0, e);
    for (int j = 0; j < (K < 8 ? K : 8) && K > 1 && !d->rg && !st; j++) {
        st = vx_cuda_stream_create(dev, &d->rs[j], e);
        if (!st) st = vx_cuda_event_create(dev, &d->rjoin[j], 0, e);
        if (!st) d->R = j + 1;
        else vx_cuda_stream_destroy(dev, d->rs[j]); /* R counts pairs made whole */
    }
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemsetAsync(d->acc, 0, kk * sizeof(dqn_learner_acc), s));
    /* the padding between tensors and between members is never written */
    VX_CUDA_CHECK(cudaMemsetAsync(d->grads, 0, kk * d->sp * 4, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->mc, mc, kk * sizeof *mc, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->online, params, kk * d->sp * 4, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->target, params, kk * d->sp * 4, cudaMemcpyHostToDevice, s));
    if (K > 1) { /* the configured rates (the same steps as without controls) and no skips */
        for (int k = 0; k < K; k++) lr[k] = cfgs[k].adam.lr;
        VX_CUDA_CHECK(cudaMemcpyAsync(d->ctl_lr, lr, kk * sizeof *lr, cudaMemcpyHostToDevice, s));
        VX_CUDA_CHECK(cudaMemsetAsync(d->ctl_skip, 0, kk * sizeof(int), s));
        vx_optim_set_controls(d->opt, d->ctl_lr, d->ctl_skip);
    }
    VX_CUDA_CHECK(cudaStreamSynchronize(s)); /* creation only: the params are the caller's */
    free(mc), free(adam), free(clip), free(lr);
    *out = d;
    return VX_OK;
fail:
    if (d->mc) cudaStreamSynchronize(s); /* mc's or lr's copy may be in flight */
    free(mc), free(adam), free(clip), free(lr);
    dqn_learner_free(d);
    return st;
}

extern "C" vx_status dqn_learner_create(const vx_dqn_cfg *cfg, const vx_qnet_layout *L,
                                        const vx_loss_shape *shape, const float *params,
                                        vx_replay *replay, vx_device *dev, cudaStream_t s,
                                        dqn_learner **out, vx_err *e)
{
    return dqn_learner_create_group(cfg, 1, L, shape, params, &replay, dev, s, out, e);
}

/* The hard target copies every target_every updates (τ = 0), after the update on the stream. */
static vx_status after_update(dqn_learner *d, vx_err *e)
{
    vx_status st = VX_OK;
    d->updates++;
    for (int k = 0; k < d->K; k++)
        if (d->cfgs[k].tau == 0 && d->updates % d->cfgs[k].target_every == 0) {
            VX_CUDA_CHECK(cudaMemcpyAsync(d->target + (size_t)k * d->sp,
                                          d->online + (size_t)k * d->sp, d->L.n_params * 4,
                                          cudaMemcpyDeviceToDevice, d->s));
            if (d->fz) st = dqn_fused_target_due(d->fz, NULL, 0, d->s, e);
        }
fail:
    return st;
}

/* The loop graph: a while node whose body is one update and its bookkeeping (the top comment).
 * A failed build leaves nothing behind for the next try. */
static vx_status build_loop(dqn_learner *d, vx_err *e)
{
    cudaGraph_t captured = NULL;
    size_t np = d->L.n_params;
    cudaError_t rc;
    /* every launch makes one update or more: the body runs at least once */
    vx_status st = vx_cuda_loop_begin(d->s, &d->graph, &d->loop, e);
    if (st) return st;
    st = update_body(d, NULL, e);
    rc = cudaSuccess;
    if (!st && d->any_hard)
        rc = vx_pdl_launch(target_due_kernel, dim3(TARGET_DUE_BLOCKS, (unsigned)d->K), dim3(256), 0,
                           d->s, d->target, d->online, np, d->sp, (const long long *)d->count,
                           (const member_cfg *)d->mc);
    if (!st && rc == cudaSuccess && d->fz && d->any_hard) /* a learner alone: cfg's period */
        st = dqn_fused_target_due(d->fz, d->count, d->cfg.target_every, d->s, e);
    if (!st && rc == cudaSuccess)
        rc = vx_pdl_launch(loop_tick_kernel, dim3(1), dim3(1), 0, d->s, d->count, d->loop);
    {
        cudaError_t end = cudaStreamEndCapture(d->s, &captured); /* always ends the capture */
        if (rc == cudaSuccess) rc = end;
    }
    if (st) goto fail;
    VX_CUDA_CHECK(rc);
    VX_CUDA_CHECK(cudaGraphInstantiate(&d->exec, d->graph, 0));
fail:
    if (!d->exec && d->graph) {
        cudaGraphDestroy(d->graph);
        d->graph = NULL;
    }
    return st;
}

extern "C" vx_status dqn_learner_prepare(dqn_learner *d, vx_err *e)
{
    vx_status st = vx_cuda_enter(d->dev, e);
    return st || d->exec ? st : build_loop(d, e);
}

extern "C" void dqn_learner_forget_graph(dqn_learner *d)
{
    if (vx_cuda_enter(d->dev, NULL) == VX_OK) cudaStreamSynchronize(d->s); /* none in flight */
    if (d->exec) cudaGraphExecDestroy(d->exec);
    if (d->graph) cudaGraphDestroy(d->graph);
    d->exec = NULL;
    d->graph = NULL;
}

/* The fused update's copies made from the weights where they are stale (fz_stale). */
static vx_status fused_fresh(dqn_learner *d, vx_err *e)
{
    if (!d->fz || !d->fz_stale) return VX_OK;
    vx_status st = dqn_fused_pack(d->fz, d->online, d->target, d->s, e);
    if (!st) d->fz_stale = 0;
    return st;
}

/* n updates in one launch of the loop graph (built here at the first, unless prepared). */
extern "C" vx_status dqn_learner_update_n(dqn_learner *d, int n, vx_err *e)
{
    vx_status st = n > 0 ? dqn_learner_prepare(d, e) : VX_OK;
    if (st || n <= 0) return st;
    st = fused_fresh(d, e);
    if (st) return st;
    loop_start_kernel<<<1, 1, 0, d->s>>>(d->count, d->updates, n);
    VX_CUDA_LAUNCH_CHECK(d->s);
    st = vx_cuda_graph_launch(d->dev, d->exec, d->s, e);
    if (!st) d->updates += n;
fail:
    return st;
}

extern "C" vx_status dqn_learner_update(dqn_learner *d, int eager, vx_err *e)
{
    if (!eager) return dqn_learner_update_n(d, 1, e);
    vx_status st = vx_cuda_enter(d->dev, e);
    if (!st) st = fused_fresh(d, e);
    if (st) return st;
    st = update_body(d, NULL, e);
    return st ? st : after_update(d, e);
}

extern "C" vx_status dqn_learner_update_batch(dqn_learner *d, const vx_replay_batch *b,
                                              float *priority, vx_err *e)
{
    vx_status st = vx_cuda_enter(d->dev, e);
    if (!st) st = fused_fresh(d, e);
    if (!st) st = update_body(d, b, e);
    if (st) return st;
    if (priority)
        VX_CUDA_CHECK(cudaMemcpyAsync(priority, d->prio, (size_t)d->K * d->cfg.batch * 4,
                                      cudaMemcpyDeviceToDevice, d->s));
    st = after_update(d, e);
fail:
    return st;
}

extern "C" vx_status dqn_learner_stats_fetch(dqn_learner *d, vx_err *e)
{
    vx_status st = VX_OK;
    size_t n = (size_t)d->K * sizeof *d->acc;
    VX_CUDA_CHECK(cudaMemcpyAsync(d->acc_host, d->acc, n, cudaMemcpyDeviceToHost, d->s));
    VX_CUDA_CHECK(cudaMemsetAsync(d->acc, 0, n, d->s));
    VX_CUDA_CHECK(cudaEventRecord(d->acc_ready, d->s));
fail:
    return st;
}

extern "C" vx_status dqn_learner_stats_read(dqn_learner *d, dqn_learner_acc *out, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaEventSynchronize(d->acc_ready));
    memcpy(out, d->acc_host, (size_t)d->K * sizeof *out);
fail:
    return st;
}

extern "C" vx_status dqn_learner_set_stopped(dqn_learner *d, const int *stopped, vx_err *e)
{
    vx_status st = VX_OK;
    if (d->K == 1) return vx_err_set(e, VX_ERR_ARG, "dqn: a learner alone has no members to stop");
    /* the previous epoch's copy has run (its statistics were read after it): the pinned
     * staging is free */
    memcpy(d->skip_host, stopped, (size_t)d->K * sizeof(int));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->ctl_skip, d->skip_host, (size_t)d->K * sizeof(int),
                                  cudaMemcpyHostToDevice, d->s));
fail:
    return st;
}

extern "C" float *dqn_learner_online(dqn_learner *d) { return d->online; }
extern "C" long long dqn_learner_updates(const dqn_learner *d) { return d->updates; }
extern "C" int dqn_learner_members(const dqn_learner *d) { return d->K; }
extern "C" int dqn_learner_fused(const dqn_learner *d) { return d->fz != NULL; }
extern "C" size_t dqn_learner_stride(const dqn_learner *d) { return d->sp; }

extern "C" size_t dqn_learner_stride_for(const vx_qnet_layout *L, int batch, int K)
{
    return K == 1 ? L->n_params : vx_qnet_member_strides(L, 2 * batch).params;
}

extern "C" size_t dqn_learner_reserved(const dqn_learner *d)
{
    return d->mem.bytes + (d->qs ? vx_qnet_reserved(d->qs) : 0) +
           (d->qt ? vx_qnet_reserved(d->qt) : 0) + (d->fz ? dqn_fused_reserved(d->fz) : 0) +
           vx_optim_reserved(d->opt) + vx_replay_group_reserved(d->rg);
}

extern "C" vx_status dqn_learner_copy_state(dqn_learner *d, float *online, float *target, float *m,
                                            float *v, int64_t *adam_t, vx_err *e)
{
    vx_status st = vx_cuda_enter(d->dev, e);
    size_t b = (size_t)d->K * d->sp * 4;
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(online, d->online, b, cudaMemcpyDeviceToHost, d->s));
    VX_CUDA_CHECK(cudaMemcpyAsync(target, d->target, b, cudaMemcpyDeviceToHost, d->s));
    st = vx_optim_copy_state(d->opt, m, v, adam_t, d->s, e);
fail:
    return st;
}

extern "C" vx_status dqn_learner_load_state(dqn_learner *d, const float *online,
                                            const float *target, const float *m, const float *v,
                                            const int64_t *adam_t, long long updates, vx_err *e)
{
    vx_status st = vx_cuda_enter(d->dev, e);
    size_t b = (size_t)d->K * d->sp * 4;
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(d->online, online, b, cudaMemcpyHostToDevice, d->s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->target, target, b, cudaMemcpyHostToDevice, d->s));
    st = vx_optim_load_state(d->opt, m, v, adam_t, d->s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaStreamSynchronize(d->s));
    d->updates = updates;
    d->fz_stale = 1;
fail:
    return st;
}

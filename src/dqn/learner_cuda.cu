/* learner_cuda.cu — the DQN update on a CUDA device (learner_cuda.h), the twin of vx_dqn_update:
 * the loss arithmetic is dqn_loss.h's, the network and optimizer are nn.h's device objects, the
 * replay buffer is replay.h's on the same device.
 *
 * One update, as the graph holds it:
 *   learn:  sample → fork ─ online([s; s′]) (2B rows, one pass) ─ join → loss → backward (rows
 *   side:          └─ target(s′) ─────────────────────────┘        0..B−1) → clip + Adam → new
 *                                                                   priorities → statistics
 *                                                                   (→ Polyak when τ > 0)
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
#include "learner_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct dqn_learner {
    vx_device *dev;
    vx_dqn_cfg cfg;
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_replay *replay;
    cudaStream_t s, side;
    vx_mem mem;
    vx_qnet *qs, *qt; /* qs: online on [s; s′] (2B rows, one pass); qt: target on s′ */
    vx_optim *opt;
    float *online, *target, *grads, *dq, *loss, *prio;
    float *obs2; /* the sampled s and s′ rows back to back: b.obs = obs2, b.next_obs = + B·D */
    vx_replay_batch b;
    float2 *qstat;
    dqn_learner_acc *acc, *acc_host;
    cudaEvent_t fork, join, acc_ready;
    cudaGraph_t graph; /* the loop of updates (the top comment) */
    cudaGraphExec_t exec;
    cudaGraphConditionalHandle loop;
    long long *count; /* device: [0] updates made, [1] updates left in this launch */
    long long updates;
};

static __global__ void loss_kernel(vx_loss_shape shape, int kind, float kappa, double gamma,
                                   const float *qs, const float *qn, const float *qt, int O,
                                   vx_replay_batch b, int B, float *dq, float *loss, float *prio,
                                   float2 *qstat)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B) return;
    if (qstat) { /* Q(s, a) of the taken actions: their sum over branches and their maximum */
        float sum = 0, mx = -INFINITY;
        for (int k = 0; k < shape.n_branches; k++) {
            float q = vx_loss_q(&shape, qs + (size_t)i * O, k,
                                b.actions[(size_t)i * VX_ACTION_BRANCHES + k]);
            sum += q;
            mx = q > mx ? q : mx;
        }
        qstat[i] = make_float2(sum, mx);
    }
    int m = b.steps ? b.steps[i] : 1;
    float gm = (float)pow(gamma, (double)m);
    float scale = 1.0f / (float)B;
    size_t r = (size_t)i * O;
    const int32_t *a = b.actions + (size_t)i * VX_ACTION_BRANCHES;
    if (kind == VX_LOSS_C51)
        loss[i] = vx_loss_c51(&shape, gm, qs + r, qn + r, qt + r, a, b.rewards[i], b.terminated[i],
                              b.weights[i], scale, dq + r, O, &prio[i]);
    else
        loss[i] = vx_loss_dqn(&shape, kind, kappa, gm, qs + r, qn + r, qt + r, a, b.rewards[i],
                              b.terminated[i], b.weights[i], scale, dq + r, O, &prio[i]);
}

extern "C" vx_status dqn_loss_cuda(const vx_loss_shape *shape, int kind, double kappa, double gamma,
                                   const float *q_s, const float *q_next_online,
                                   const float *q_next_target, int out_dim,
                                   const vx_replay_batch *b, int B, float *dq, float *loss,
                                   float *priority, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    loss_kernel<<<(B + 127) / 128, 128, 0, s>>>(*shape, kind, (float)kappa, gamma, q_s,
                                                q_next_online, q_next_target, out_dim, *b, B, dq,
                                                loss, priority, NULL);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

/* One block adds this update's batch into the accumulator in a fixed order (deterministic). */
static __global__ void stats_kernel(const float *loss, const float2 *qstat, int B, int K,
                                    const double *norm, dqn_learner_acc *acc)
{
    __shared__ double sl[256], sq[256];
    __shared__ float sm[256];
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
        acc->q_mean += sq[0] / ((double)B * K);
        acc->q_max = acc->n == 0 || sm[0] > acc->q_max ? sm[0] : acc->q_max;
        acc->grad_norm += *norm;
        acc->n += 1;
    }
}

static __global__ void polyak_kernel(float *target, const float *online, size_t n, float tau)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) target[i] = vx_polyak_elem(target[i], online[i], tau);
}

/* The loop's own steps. Before it: the count it starts from and the updates to make. */
static __global__ void loop_start_kernel(long long *count, long long made, long long n)
{
    count[0] = made;
    count[1] = n;
}

/* After an update: the hard target copy when the update just made is a multiple of target_every
 * (after_update's rule, on the device). */
static __global__ void target_due_kernel(float *target, const float *online, size_t n,
                                         const long long *count, long long every)
{
    if ((count[0] + 1) % every != 0) return;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) target[i] = online[i];
}

/* Then: one update more made, one fewer left; the loop goes on while some are left. */
static __global__ void loop_tick_kernel(long long *count, cudaGraphConditionalHandle loop)
{
    count[0] += 1;
    count[1] -= 1;
    cudaGraphSetConditional(loop, count[1] > 0);
}

/* A given batch (device memory) into the learner's batch arrays, in place of a sample. */
static vx_status copy_batch(dqn_learner *d, const vx_replay_batch *b, vx_err *e)
{
    vx_status st = VX_OK;
    size_t B = (size_t)d->cfg.batch, D = (size_t)d->L.cfg.in_dim;
    cudaMemcpyKind k = cudaMemcpyDeviceToDevice;
    VX_CUDA_CHECK(cudaMemcpyAsync(d->b.obs, b->obs, B * D * 4, k, d->s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->b.next_obs, b->next_obs, B * D * 4, k, d->s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->b.actions, b->actions, B * VX_ACTION_BRANCHES * 4, k, d->s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->b.rewards, b->rewards, B * 4, k, d->s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->b.terminated, b->terminated, B, k, d->s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->b.truncated, b->truncated, B, k, d->s));
    if (b->steps) VX_CUDA_CHECK(cudaMemcpyAsync(d->b.steps, b->steps, B, k, d->s));
    else VX_CUDA_CHECK(cudaMemsetAsync(d->b.steps, 1, B, d->s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->b.weights, b->weights, B * 4, k, d->s));
fail:
    return st;
}

/* the sequence the graph holds; fixed (tests): learn from that batch instead of a sample, and
 * leave the replay buffer alone */
static vx_status update_body(dqn_learner *d, const vx_replay_batch *fixed, vx_err *e)
{
    vx_status st = VX_OK;
    int B = d->cfg.batch, O = d->L.out_dim;
    size_t np = d->L.n_params;
    st = fixed ? copy_batch(d, fixed, e) : vx_replay_sample(d->replay, (size_t)B, &d->b, d->s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(d->fork, d->s));
    VX_CUDA_CHECK(cudaStreamWaitEvent(d->side, d->fork, 0));
    /* online(s) and online(s′) as one pass over 2B rows: rows 0..B−1 of every activation are
     * online(s)'s, which the backward pass reads */
    st = vx_qnet_forward(d->qs, d->online, d->obs2, 2 * B, d->s, e);
    if (!st) st = vx_qnet_forward(d->qt, d->target, d->b.next_obs, B, d->side, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(d->join, d->side));
    VX_CUDA_CHECK(cudaStreamWaitEvent(d->s, d->join, 0));
    loss_kernel<<<(B + 127) / 128, 128, 0, d->s>>>(
        d->shape, d->cfg.loss, (float)d->cfg.huber_kappa, d->cfg.gamma, vx_qnet_output(d->qs),
        vx_qnet_output(d->qs) + (size_t)B * O, vx_qnet_output(d->qt), O, d->b, B, d->dq, d->loss,
        d->prio, d->qstat);
    VX_CUDA_LAUNCH_CHECK(d->s);
    st = vx_qnet_backward(d->qs, d->online, d->b.obs, B, d->dq, d->grads, d->s, e);
    if (!st) st = vx_optim_step(d->opt, d->online, d->grads, d->s, e);
    if (!st && !fixed)
        st = vx_replay_update(d->replay, d->b.index, d->b.gen, d->prio, (size_t)B, d->s, e);
    if (st) goto fail;
    stats_kernel<<<1, 256, 0, d->s>>>(d->loss, d->qstat, B, d->shape.n_branches,
                                      vx_optim_norm(d->opt), d->acc);
    VX_CUDA_LAUNCH_CHECK(d->s);
    if (d->cfg.tau > 0) {
        polyak_kernel<<<(unsigned)((np + 255) / 256), 256, 0, d->s>>>(d->target, d->online, np,
                                                                      (float)d->cfg.tau);
        VX_CUDA_LAUNCH_CHECK(d->s);
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
    vx_cuda_event_destroy(d->dev, d->acc_ready, 0);
    vx_cuda_stream_destroy(d->dev, d->side);
    vx_qnet_free(d->qs);
    vx_qnet_free(d->qt);
    vx_optim_free(d->opt);
    vx_mem_release(&d->mem);
    free(d);
}

extern "C" vx_status dqn_learner_create(const vx_dqn_cfg *cfg, const vx_qnet_layout *L,
                                        const vx_loss_shape *shape, const float *params,
                                        vx_replay *replay, vx_device *dev, cudaStream_t s,
                                        dqn_learner **out, vx_err *e)
{
    *out = NULL;
    vx_status st = vx_dqn_cfg_check(cfg, e);
    if (!st) st = vx_cuda_enter(dev, e);
    if (st) return st;
    dqn_learner *d = (dqn_learner *)calloc(1, sizeof *d);
    if (!d) return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    d->dev = dev, d->cfg = *cfg, d->L = *L, d->shape = *shape, d->replay = replay, d->s = s;
    vx_mem_init(&d->mem, dev, "dqn learner");
    size_t np = L->n_params, B = (size_t)cfg->batch, O = (size_t)L->out_dim;
    size_t D = (size_t)L->cfg.in_dim, A = VX_ACTION_BRANCHES;
    vx_mem *m = &d->mem;
    st = vx_qnet_create(L, 2 * (int)B, (int)B, dev, &d->qs, e);
    if (!st) st = vx_qnet_create(L, (int)B, 0, dev, &d->qt, e);
    if (!st) st = vx_qnet_set_tf32(d->qs, cfg->tf32, e);
    if (!st) st = vx_qnet_set_tf32(d->qt, cfg->tf32, e);
    if (!st) st = vx_optim_create(&cfg->adam, cfg->grad_clip, np, dev, &d->opt, e);
    if (!st) st = vx_cuda_stream_create(dev, &d->side, e);
    if (!st) st = vx_mem_alloc(m, np * 4, &d->online, e);
    if (!st) st = vx_mem_alloc(m, np * 4, &d->target, e);
    if (!st) st = vx_mem_alloc(m, np * 4, &d->grads, e);
    if (!st) st = vx_mem_alloc(m, B * O * 4, &d->dq, e);
    if (!st) st = vx_mem_alloc(m, B * 4, &d->loss, e);
    if (!st) st = vx_mem_alloc(m, B * 4, &d->prio, e);
    if (!st) st = vx_mem_alloc(m, B * sizeof(float2), &d->qstat, e);
    if (!st) st = vx_mem_alloc(m, sizeof(dqn_learner_acc), &d->acc, e);
    if (!st) st = vx_mem_alloc_host(m, sizeof(dqn_learner_acc), &d->acc_host, e);
    if (!st) st = vx_mem_alloc(m, 2 * B * D * 4, &d->obs2, e);
    if (!st) st = vx_mem_alloc(m, B * A * 4, &d->b.actions, e);
    if (!st) st = vx_mem_alloc(m, B * 4, &d->b.rewards, e);
    if (!st) st = vx_mem_alloc(m, B, &d->b.terminated, e);
    if (!st) st = vx_mem_alloc(m, B, &d->b.truncated, e);
    if (!st) st = vx_mem_alloc(m, B, &d->b.steps, e);
    if (!st) st = vx_mem_alloc(m, B * 4, &d->b.weights, e);
    if (!st) st = vx_mem_alloc(m, B * 4, &d->b.index, e);
    if (!st) st = vx_mem_alloc(m, B * 4, &d->b.gen, e);
    if (!st) st = vx_mem_alloc(m, 2 * sizeof(long long), &d->count, e);
    if (st) goto fail;
    d->b.obs = d->obs2;
    d->b.next_obs = d->obs2 + B * D;
    st = vx_cuda_event_create(dev, &d->fork, 0, e);
    if (!st) st = vx_cuda_event_create(dev, &d->join, 0, e);
    if (!st) st = vx_cuda_event_create(dev, &d->acc_ready, 0, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemsetAsync(d->acc, 0, sizeof(dqn_learner_acc), s));
    VX_CUDA_CHECK(cudaMemsetAsync(d->grads, 0, np * 4, s)); /* the padding is never written */
    VX_CUDA_CHECK(cudaMemcpyAsync(d->online, params, np * 4, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->target, params, np * 4, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaStreamSynchronize(s)); /* creation only: the params are the caller's */
    *out = d;
    return VX_OK;
fail:
    dqn_learner_free(d);
    return st;
}

/* The hard target copy every target_every updates (τ = 0), after the update on the stream. */
static vx_status after_update(dqn_learner *d, vx_err *e)
{
    vx_status st = VX_OK;
    d->updates++;
    if (d->cfg.tau == 0 && d->updates % d->cfg.target_every == 0)
        VX_CUDA_CHECK(cudaMemcpyAsync(d->target, d->online, d->L.n_params * 4,
                                      cudaMemcpyDeviceToDevice, d->s));
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
    if (!st && d->cfg.tau == 0)
        target_due_kernel<<<(unsigned)((np + 255) / 256), 256, 0, d->s>>>(
            d->target, d->online, np, d->count, d->cfg.target_every);
    if (!st) loop_tick_kernel<<<1, 1, 0, d->s>>>(d->count, d->loop);
    rc = st ? cudaSuccess : cudaGetLastError();
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

/* n updates in one launch of the loop graph (built here at the first, unless prepared). */
extern "C" vx_status dqn_learner_update_n(dqn_learner *d, int n, vx_err *e)
{
    vx_status st = n > 0 ? dqn_learner_prepare(d, e) : VX_OK;
    if (st || n <= 0) return st;
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
    if (st) return st;
    st = update_body(d, NULL, e);
    return st ? st : after_update(d, e);
}

extern "C" vx_status dqn_learner_update_batch(dqn_learner *d, const vx_replay_batch *b,
                                              float *priority, vx_err *e)
{
    vx_status st = vx_cuda_enter(d->dev, e);
    if (!st) st = update_body(d, b, e);
    if (st) return st;
    if (priority)
        VX_CUDA_CHECK(cudaMemcpyAsync(priority, d->prio, (size_t)d->cfg.batch * 4,
                                      cudaMemcpyDeviceToDevice, d->s));
    st = after_update(d, e);
fail:
    return st;
}

extern "C" vx_status dqn_learner_stats_fetch(dqn_learner *d, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(
        cudaMemcpyAsync(d->acc_host, d->acc, sizeof *d->acc, cudaMemcpyDeviceToHost, d->s));
    VX_CUDA_CHECK(cudaMemsetAsync(d->acc, 0, sizeof *d->acc, d->s));
    VX_CUDA_CHECK(cudaEventRecord(d->acc_ready, d->s));
fail:
    return st;
}

extern "C" vx_status dqn_learner_stats_read(dqn_learner *d, dqn_learner_acc *out, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaEventSynchronize(d->acc_ready));
    *out = *d->acc_host;
fail:
    return st;
}

extern "C" float *dqn_learner_online(dqn_learner *d) { return d->online; }
extern "C" long long dqn_learner_updates(const dqn_learner *d) { return d->updates; }

extern "C" size_t dqn_learner_reserved(const dqn_learner *d)
{
    return d->mem.bytes + vx_qnet_reserved(d->qs) + vx_qnet_reserved(d->qt) +
           vx_optim_reserved(d->opt);
}

extern "C" vx_status dqn_learner_copy_state(dqn_learner *d, float *online, float *target, float *m,
                                            float *v, int64_t *adam_t, vx_err *e)
{
    vx_status st = vx_cuda_enter(d->dev, e);
    size_t b = d->L.n_params * 4;
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
    size_t b = d->L.n_params * 4;
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(d->online, online, b, cudaMemcpyHostToDevice, d->s));
    VX_CUDA_CHECK(cudaMemcpyAsync(d->target, target, b, cudaMemcpyHostToDevice, d->s));
    st = vx_optim_load_state(d->opt, m, v, adam_t, d->s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaStreamSynchronize(d->s));
    d->updates = updates;
fail:
    return st;
}

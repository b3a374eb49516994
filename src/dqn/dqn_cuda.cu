/* dqn_cuda.cu — ε-greedy acting on the device (the twin of vx_dqn_act): one thread per
 * environment, the argmax and expected values from dqn_loss.h, the draws from philox.h. */
#include "vixen/dqn_cuda.h"
#include "vixen/philox.h"
#include "../util/cuda_check.h"

#define ACT_STREAM (1ull << 40)

static __global__ void act_kernel(vx_loss_shape shape, const float *q, int out_dim, int N,
                                  const double *eps, uint64_t seed,
                                  const unsigned long long *step, int32_t *actions)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float *row = q + (size_t)i * out_dim;
    vx_rng g = vx_rng_make(seed, ACT_STREAM + (uint64_t)i, *step);
    double e = *eps;
    for (int k = 0; k < shape.n_branches; k++) {
        int greedy = vx_loss_argmax(&shape, row, k);
        float u = vx_rng_uniform(&g);
        uint32_t ra = vx_rng_below(&g, (uint32_t)shape.branch[k]);
        actions[(size_t)i * 3 + k] = u < e ? (int32_t)ra : greedy;
    }
}

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
            float q = vx_loss_q(&shape, qs + (size_t)i * O, k, b.actions[(size_t)i * 3 + k]);
            sum += q;
            mx = q > mx ? q : mx;
        }
        qstat[i] = make_float2(sum, mx);
    }
    int m = b.steps ? b.steps[i] : 1;
    float gm = (float)pow(gamma, (double)m);
    float scale = 1.0f / (float)B;
    size_t r = (size_t)i * O;
    if (kind == VX_LOSS_C51)
        loss[i] = vx_loss_c51(&shape, gm, qs + r, qn + r, qt + r, b.actions + (size_t)i * 3,
                              b.rewards[i], b.terminated[i], b.weights[i], scale, dq + r, O, &prio[i]);
    else
        loss[i] = vx_loss_dqn(&shape, kind, kappa, gm, qs + r, qn + r, qt + r,
                              b.actions + (size_t)i * 3, b.rewards[i], b.terminated[i],
                              b.weights[i], scale, dq + r, O, &prio[i]);
}

extern "C" vx_status vx_dqn_cuda_loss(const vx_loss_shape *shape, int kind, double kappa,
                                      double gamma, const float *q_s, const float *q_next_online,
                                      const float *q_next_target, int out_dim,
                                      const vx_replay_batch *b, int B, float *dq, float *loss,
                                      float *priority, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    loss_kernel<<<(B + 127) / 128, 128, 0, s>>>(*shape, kind, (float)kappa, gamma, q_s,
                                                q_next_online, q_next_target, out_dim, *b, B, dq,
                                                loss, priority, NULL);
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
}

static __global__ void counter_kernel(unsigned long long *c, unsigned long long by) { *c += by; }

extern "C" vx_status vx_dqn_cuda_act(const vx_loss_shape *shape, const float *q, int out_dim,
                                     int N, const double *eps, uint64_t seed,
                                     const unsigned long long *step, int32_t *actions,
                                     cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    act_kernel<<<(N + 127) / 128, 128, 0, s>>>(*shape, q, out_dim, N, eps, seed, step, actions);
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
}

extern "C" vx_status vx_cuda_counter_add(unsigned long long *counter, unsigned long long by,
                                         cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    counter_kernel<<<1, 1, 0, s>>>(counter, by);
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
}

/* ---- the captured update ----------------------------------------------------------------------- */

struct vx_dqn_cuda {
    vx_dqn_cfg cfg;
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_replay *replay;
    cudaStream_t s;
    vx_qnet_cuda *qs, *qt; /* qs: online on [s; s′] (2B rows, one pass); qt: target on s′ */
    float *target, *grads, *m, *v, *dq, *loss, *prio;
    vx_optim_dev o;
    vx_replay_batch b;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    long long updates;
    /* target(s′) runs beside online([s; s′]): a side stream, forked and joined by events (inside
     * the graph, parallel branches) */
    cudaStream_t side[2];
    cudaEvent_t fork, join[2];
    float *obs2; /* the sampled s and s′ rows back to back: b.obs = obs2, b.next_obs = obs2 + B·D */
    /* statistics summed on the device over the updates since the last reset, read back
     * asynchronously into pinned memory (vx_dqn_cuda_stats_*) */
    float2 *qstat;
    vx_dqn_cuda_acc *acc, *acc_host;
    cudaEvent_t acc_ready;
};

/* One block adds this update's batch into the accumulator in a fixed order (deterministic). */
static __global__ void stats_kernel(const float *loss, const float2 *qstat, int B, int K,
                                    const double *norm, vx_dqn_cuda_acc *acc)
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
    if (i < n) target[i] = __fadd_rn(target[i], __fmul_rn(tau, __fsub_rn(online[i], target[i])));
}

/* the sequence the graph holds */
static vx_status update_body(vx_dqn_cuda *d, vx_err *e)
{
    vx_status st = VX_OK;
    int B = d->cfg.batch, O = d->L.out_dim;
    size_t np = d->L.n_params;
    float *online = vx_qnet_cuda_params(d->qs);
    st = vx_replay_sample(d->replay, (size_t)B, &d->b, d->s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(d->fork, d->s));
    VX_CUDA_CHECK(cudaStreamWaitEvent(d->side[1], d->fork, 0));
    /* online(s) and online(s′) as one pass over 2B rows: rows 0..B−1 of every activation are
     * online(s)'s, which the backward pass reads */
    st = vx_qnet_cuda_forward(d->qs, online, d->obs2, 2 * B, d->s, e);
    if (!st) st = vx_qnet_cuda_forward(d->qt, d->target, d->b.next_obs, B, d->side[1], e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(d->join[1], d->side[1]));
    VX_CUDA_CHECK(cudaStreamWaitEvent(d->s, d->join[1], 0));
    loss_kernel<<<(B + 127) / 128, 128, 0, d->s>>>(
        d->shape, d->cfg.loss, (float)d->cfg.huber_kappa, d->cfg.gamma, vx_qnet_cuda_output(d->qs),
        vx_qnet_cuda_output(d->qs) + (size_t)B * O, vx_qnet_cuda_output(d->qt), O, d->b, B, d->dq, d->loss,
        d->prio, d->qstat);
    VX_CUDA_LAUNCH_CHECK();
    if (!st) st = vx_qnet_cuda_backward(d->qs, online, d->b.obs, B, d->dq, d->grads, d->s, e);
    if (!st) st = vx_grad_clip_cuda(d->grads, np, d->cfg.grad_clip, &d->o, d->s, e);
    if (!st) st = vx_adam_step_cuda(&d->cfg.adam, online, d->grads, d->m, d->v, np, &d->o, d->s, e);
    if (!st) st = vx_replay_update(d->replay, d->b.index, d->b.gen, d->prio, (size_t)B, d->s, e);
    if (st) goto fail;
    stats_kernel<<<1, 256, 0, d->s>>>(d->loss, d->qstat, B, d->shape.n_branches, d->o.norm, d->acc);
    VX_CUDA_LAUNCH_CHECK();
    if (d->cfg.tau > 0) {
        polyak_kernel<<<(unsigned)((np + 255) / 256), 256, 0, d->s>>>(d->target, online, np,
                                                                      (float)d->cfg.tau);
        VX_CUDA_LAUNCH_CHECK();
    }
fail:
    return st;
}

extern "C" void vx_dqn_cuda_free(vx_dqn_cuda *d)
{
    if (!d) return;
    if (d->exec) cudaGraphExecDestroy(d->exec);
    if (d->graph) cudaGraphDestroy(d->graph);
    for (int k = 0; k < 2; k++) {
        if (d->side[k]) cudaStreamDestroy(d->side[k]);
        if (d->join[k]) cudaEventDestroy(d->join[k]);
    }
    if (d->fork) cudaEventDestroy(d->fork);
    if (d->acc_ready) cudaEventDestroy(d->acc_ready);
    cudaFree(d->qstat), cudaFree(d->acc), cudaFreeHost(d->acc_host);
    vx_qnet_cuda_free(d->qs), vx_qnet_cuda_free(d->qt);
    cudaFree(d->target), cudaFree(d->grads), cudaFree(d->m), cudaFree(d->v), cudaFree(d->dq);
    cudaFree(d->loss), cudaFree(d->prio), cudaFree(d->o.norm), cudaFree(d->o.t);
    cudaFree(d->o.scratch);
    cudaFree(d->obs2), cudaFree(d->b.actions), cudaFree(d->b.rewards);
    cudaFree(d->b.terminated), cudaFree(d->b.truncated), cudaFree(d->b.steps);
    cudaFree(d->b.weights), cudaFree(d->b.index), cudaFree(d->b.gen);
    free(d);
}

extern "C" vx_status vx_dqn_cuda_create(const vx_dqn_cfg *cfg, const vx_qnet_cfg *qcfg,
                                        const float *params, vx_replay *replay,
                                        cudaStream_t s, vx_dqn_cuda **out, vx_err *e)
{
    *out = NULL;
    vx_dqn cpu; /* the CPU learner checks the settings and gives the layout and shape */
    vx_status st = vx_dqn_create(cfg, qcfg, 1, &cpu, e);
    if (st) return st;
    vx_dqn_cuda *d = (vx_dqn_cuda *)calloc(1, sizeof *d);
    if (!d) {
        vx_dqn_free(&cpu);
        return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    }
    d->cfg = *cfg;
    d->L = cpu.L;
    d->shape = cpu.shape;
    vx_dqn_free(&cpu);
    d->replay = replay;
    d->s = s;
    size_t np = d->L.n_params, B = (size_t)cfg->batch, O = (size_t)d->L.out_dim, D = (size_t)d->L.cfg.in_dim;
    st = vx_qnet_cuda_create(&d->L, 2 * (int)B, &d->qs, e);
    if (!st) st = vx_qnet_cuda_create(&d->L, (int)B, &d->qt, e);
    if (!st) st = vx_qnet_cuda_set_tf32(d->qs, cfg->tf32, e);
    if (!st) st = vx_qnet_cuda_set_tf32(d->qt, cfg->tf32, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaStreamCreateWithFlags(&d->side[0], cudaStreamNonBlocking));
    VX_CUDA_CHECK(cudaStreamCreateWithFlags(&d->side[1], cudaStreamNonBlocking));
    VX_CUDA_CHECK(cudaEventCreateWithFlags(&d->fork, cudaEventDisableTiming));
    VX_CUDA_CHECK(cudaEventCreateWithFlags(&d->join[0], cudaEventDisableTiming));
    VX_CUDA_CHECK(cudaEventCreateWithFlags(&d->join[1], cudaEventDisableTiming));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->target, np * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->grads, np * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->m, np * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->v, np * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->dq, B * O * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->loss, B * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->prio, B * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->qstat, B * sizeof(float2)));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->acc, sizeof(vx_dqn_cuda_acc)));
    VX_CUDA_CHECK(cudaMallocHost((void **)&d->acc_host, sizeof(vx_dqn_cuda_acc)));
    VX_CUDA_CHECK(cudaEventCreateWithFlags(&d->acc_ready, cudaEventDisableTiming));
    VX_CUDA_CHECK(cudaMemsetAsync(d->acc, 0, sizeof(vx_dqn_cuda_acc), s));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->o.norm, 8));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->o.t, 8));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->o.scratch, 1024 * 8));
    VX_CUDA_CHECK(cudaMemsetAsync(d->o.scratch, 0, 1024 * 8, s));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->obs2, 2 * B * D * 4));
    d->b.obs = d->obs2;
    d->b.next_obs = d->obs2 + B * D;
    VX_CUDA_CHECK(cudaMalloc((void **)&d->b.actions, B * 12));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->b.rewards, B * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->b.terminated, B));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->b.truncated, B));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->b.steps, B));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->b.weights, B * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->b.index, B * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&d->b.gen, B * 4));
    VX_CUDA_CHECK(cudaMemsetAsync(d->grads, 0, np * 4, s)); /* the padding is never written */
    VX_CUDA_CHECK(cudaMemsetAsync(d->m, 0, np * 4, s));
    VX_CUDA_CHECK(cudaMemsetAsync(d->v, 0, np * 4, s));
    VX_CUDA_CHECK(cudaMemsetAsync(d->o.t, 0, 8, s));
    st = vx_qnet_cuda_upload(d->qs, params, s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpyAsync(d->target, params, np * 4, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaStreamSynchronize(s)); /* creation only: the params are the caller's */
    *out = d;
    return VX_OK;
fail:
    vx_dqn_cuda_free(d);
    return st;
}

extern "C" vx_status vx_dqn_cuda_update(vx_dqn_cuda *d, vx_err *e)
{
    vx_status st = VX_OK;
    if (!d->exec) { /* capture on first use: the buffer is filled by then */
        VX_CUDA_CHECK(cudaStreamBeginCapture(d->s, cudaStreamCaptureModeThreadLocal));
        st = update_body(d, e);
        cudaError_t rc = cudaStreamEndCapture(d->s, &d->graph);
        if (st) goto fail;
        VX_CUDA_CHECK(rc);
        VX_CUDA_CHECK(cudaGraphInstantiate(&d->exec, d->graph, 0));
    }
    VX_CUDA_CHECK(cudaGraphLaunch(d->exec, d->s));
    d->updates++;
    if (d->cfg.tau == 0 && d->updates % d->cfg.target_every == 0)
        VX_CUDA_CHECK(cudaMemcpyAsync(d->target, vx_qnet_cuda_params(d->qs),
                                      d->L.n_params * 4, cudaMemcpyDeviceToDevice, d->s));
fail:
    return st;
}

extern "C" vx_status vx_dqn_cuda_update_eager(vx_dqn_cuda *d, vx_err *e)
{
    vx_status st = update_body(d, e);
    if (st) return st;
    d->updates++;
    if (d->cfg.tau == 0 && d->updates % d->cfg.target_every == 0) {
        cudaError_t rc = cudaMemcpyAsync(d->target, vx_qnet_cuda_params(d->qs), d->L.n_params * 4,
                                         cudaMemcpyDeviceToDevice, d->s);
        if (rc) return vx_err_set(e, VX_ERR_CUDA, "dqn: target copy: %s", cudaGetErrorString(rc));
    }
    return VX_OK;
}

extern "C" vx_status vx_dqn_cuda_weights(vx_dqn_cuda *d, float *host, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaStreamSynchronize(d->s));
    VX_CUDA_CHECK(cudaMemcpy(host, vx_qnet_cuda_params(d->qs), d->L.n_params * 4,
                             cudaMemcpyDeviceToHost));
fail:
    return st;
}

/* ---- statistics and state ---------------------------------------------------------------------- */

extern "C" vx_status vx_dqn_cuda_stats_fetch(vx_dqn_cuda *d, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaMemcpyAsync(d->acc_host, d->acc, sizeof *d->acc, cudaMemcpyDeviceToHost, d->s));
    VX_CUDA_CHECK(cudaMemsetAsync(d->acc, 0, sizeof *d->acc, d->s));
    VX_CUDA_CHECK(cudaEventRecord(d->acc_ready, d->s));
fail:
    return st;
}

extern "C" vx_status vx_dqn_cuda_stats_read(vx_dqn_cuda *d, vx_dqn_cuda_acc *out, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaEventSynchronize(d->acc_ready));
    *out = *d->acc_host;
fail:
    return st;
}

extern "C" float *vx_dqn_cuda_online(vx_dqn_cuda *d) { return vx_qnet_cuda_params(d->qs); }
extern "C" cudaStream_t vx_dqn_cuda_stream(vx_dqn_cuda *d) { return d->s; }
extern "C" long long vx_dqn_cuda_updates(const vx_dqn_cuda *d) { return d->updates; }

extern "C" vx_status vx_dqn_cuda_get_state(vx_dqn_cuda *d, float *online, float *target, float *m,
                                           float *v, long long *adam_t, vx_err *e)
{
    vx_status st = VX_OK;
    size_t b = d->L.n_params * 4;
    VX_CUDA_CHECK(cudaStreamSynchronize(d->s));
    VX_CUDA_CHECK(cudaMemcpy(online, vx_qnet_cuda_params(d->qs), b, cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(target, d->target, b, cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(m, d->m, b, cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(v, d->v, b, cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(adam_t, d->o.t, sizeof *adam_t, cudaMemcpyDeviceToHost));
fail:
    return st;
}

extern "C" vx_status vx_dqn_cuda_set_state(vx_dqn_cuda *d, const float *online, const float *target,
                                           const float *m, const float *v, long long adam_t,
                                           long long updates, vx_err *e)
{
    vx_status st = VX_OK;
    size_t b = d->L.n_params * 4;
    VX_CUDA_CHECK(cudaStreamSynchronize(d->s));
    VX_CUDA_CHECK(cudaMemcpy(vx_qnet_cuda_params(d->qs), online, b, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(d->target, target, b, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(d->m, m, b, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(d->v, v, b, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(d->o.t, &adam_t, sizeof adam_t, cudaMemcpyHostToDevice));
    d->updates = updates;
fail:
    return st;
}

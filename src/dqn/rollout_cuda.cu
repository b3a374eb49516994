/* rollout_cuda.cu — experience collection on the GPU: per step forward → act → env step → emit,
 * T steps captured as one graph (rollout_cuda.h). Built without fused multiply-adds: the n-step
 * return R = Σ γ^k r_k must round like vx_nstep_push's.
 *
 * Order of the staged transitions: the CPU trainer appends, per step, env 0's completed
 * transitions, then env 1's, …; a step completes at most n transitions per environment. So each
 * (step, env, j) has a fixed staging slot; with n = 1 every slot is used and the staging buffer
 * is already in the CPU's order; with n > 1 unused slots are flagged off and one scan + scatter
 * at the end of the rollout packs the rest in order. */
#include "vixen/dqn_cuda.h"
#include "vixen/rollout_cuda.h"
#include "../util/cuda_check.h"

#include <cub/cub.cuh>
#include <stdlib.h>
#include <string.h>

#define D VX_OBS_DIM
#define A VX_ACTION_BRANCHES /* int32 actions per environment */

typedef struct { /* the n-step accumulator of vx_nstep, on the device */
    int *count, *head;
    float *obs;
    int32_t *act;
    float *rew;
} dev_nstep;

typedef struct { /* transitions, device arrays */
    float *obs, *next_obs, *rewards;
    int32_t *actions;
    uint8_t *term, *trunc, *steps;
} dev_trans;

struct vx_rollout_cuda {
    vx_rollout_cfg cfg;
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_env *env; /* on a CUDA device */
    int N, T, n;
    cudaStream_t s;
    vx_qnet_cuda *net;
    float *obs[2], *final_obs, *rew;
    int32_t *act;
    uint8_t *te, *tr;
    dev_nstep ns;
    double *ep_ret, *ret_sum, *ep_count, *ep_stats; /* ep_stats: sum, count */
    double *eps;
    unsigned long long *step;
    dev_trans raw, packed;      /* raw: T·N·n slots; packed (n > 1 only) */
    uint32_t *flags, *pos;      /* n > 1 */
    unsigned long long *count, *count_host;
    void *cub_tmp;
    size_t cub_tmp_n;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

/* One thread per environment: vx_nstep_push and the episode accounting of the CPU trainer's
 * collect(), for step t. */
static __global__ void emit_kernel(int N, int n, int t, double gamma, const float *obs,
                                   const int32_t *act, const float *rew, const uint8_t *te,
                                   const uint8_t *tr, const float *next_obs, const float *final_obs,
                                   dev_nstep ns, dev_trans out, uint32_t *flags, double *ep_ret,
                                   double *ret_sum, double *ep_count, unsigned long long *step)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) *step += 1; /* the act kernel of this step has read it */
    if (i >= N) return;
    int ended = te[i] | tr[i];
    ep_ret[i] += rew[i];
    if (ended) {
        ret_sum[i] += ep_ret[i];
        ep_count[i] += 1;
        ep_ret[i] = 0;
    }
    /* push */
    size_t slot = (size_t)i * n;
    int cnt = ns.count[i], head = ns.head[i];
    int p = (head + cnt) % n;
    for (int k = 0; k < D; k++) ns.obs[(slot + p) * D + k] = obs[(size_t)i * D + k];
    for (int b = 0; b < A; b++) ns.act[(slot + p) * A + b] = act[(size_t)i * A + b];
    ns.rew[slot + p] = rew[i];
    cnt++;
    const float *nx = (ended ? final_obs : next_obs) + (size_t)i * D;
    int emit = ended ? cnt : cnt == n ? 1 : 0;
    size_t base = ((size_t)t * N + i) * n;
    for (int j = 0; j < n; j++) {
        if (flags) flags[base + j] = j < emit;
        if (j >= emit) continue;
        int len = ended ? cnt : n;
        double R = 0, g = 1;
        for (int k = 0; k < len; k++) {
            R += g * ns.rew[slot + (head + k) % n];
            g *= gamma;
        }
        size_t o = base + j;
        for (int k = 0; k < D; k++) {
            out.obs[o * D + k] = ns.obs[(slot + head) * D + k];
            out.next_obs[o * D + k] = nx[k];
        }
        for (int b = 0; b < A; b++) out.actions[o * A + b] = ns.act[(slot + head) * A + b];
        out.rewards[o] = (float)R;
        out.term[o] = ended ? te[i] : 0;
        out.trunc[o] = ended ? tr[i] : 0;
        out.steps[o] = (uint8_t)len;
        head = (head + 1) % n;
        cnt--;
    }
    if (ended) head = 0;
    ns.count[i] = cnt;
    ns.head[i] = head;
}

/* n > 1: packs the flagged slots in order (pos is the flags' exclusive scan). */
static __global__ void pack_kernel(size_t slots, const uint32_t *flags, const uint32_t *pos,
                                   dev_trans raw, dev_trans out, unsigned long long *count)
{
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= slots * D) return;
    size_t o = x / D;
    int k = (int)(x % D);
    if (x == 0) *count = (unsigned long long)pos[slots - 1] + flags[slots - 1];
    if (!flags[o]) return;
    size_t q = pos[o];
    out.obs[q * D + k] = raw.obs[o * D + k];
    out.next_obs[q * D + k] = raw.next_obs[o * D + k];
    if (k == 0) {
        for (int b = 0; b < A; b++) out.actions[q * A + b] = raw.actions[o * A + b];
        out.rewards[q] = raw.rewards[o];
        out.term[q] = raw.term[o];
        out.trunc[q] = raw.trunc[o];
        out.steps[q] = raw.steps[o];
    }
}

/* One thread: the rollout's episode sums in environment order, then the per-env sums reset. */
static __global__ void episodes_kernel(int N, double *ret_sum, double *ep_count, double *out)
{
    double r = 0, c = 0;
    for (int i = 0; i < N; i++) {
        r += ret_sum[i];
        c += ep_count[i];
        ret_sum[i] = 0;
        ep_count[i] = 0;
    }
    out[0] = r;
    out[1] = c;
}

static __global__ void set_double_kernel(double *x, double v) { *x = v; }

static vx_status trans_alloc(dev_trans *t, size_t n, vx_err *e)
{
    vx_status st = VX_OK;
    VX_CUDA_CHECK(cudaMalloc((void **)&t->obs, n * D * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&t->next_obs, n * D * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&t->rewards, n * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&t->actions, n * A * sizeof(int32_t)));
    VX_CUDA_CHECK(cudaMalloc((void **)&t->term, n));
    VX_CUDA_CHECK(cudaMalloc((void **)&t->trunc, n));
    VX_CUDA_CHECK(cudaMalloc((void **)&t->steps, n));
fail:
    return st;
}

static void trans_free(dev_trans *t)
{
    cudaFree(t->obs), cudaFree(t->next_obs), cudaFree(t->rewards), cudaFree(t->actions);
    cudaFree(t->term), cudaFree(t->trunc), cudaFree(t->steps);
}

extern "C" void vx_rollout_cuda_free(vx_rollout_cuda *r)
{
    if (!r) return;
    if (r->exec) cudaGraphExecDestroy(r->exec);
    if (r->graph) cudaGraphDestroy(r->graph);
    vx_qnet_cuda_free(r->net);
    cudaFree(r->obs[0]), cudaFree(r->obs[1]), cudaFree(r->final_obs), cudaFree(r->rew);
    cudaFree(r->act), cudaFree(r->te), cudaFree(r->tr);
    cudaFree(r->ns.count), cudaFree(r->ns.head), cudaFree(r->ns.obs), cudaFree(r->ns.act);
    cudaFree(r->ns.rew);
    cudaFree(r->ep_ret), cudaFree(r->ret_sum), cudaFree(r->ep_count), cudaFree(r->ep_stats);
    cudaFree(r->eps), cudaFree(r->step);
    trans_free(&r->raw), trans_free(&r->packed);
    cudaFree(r->flags), cudaFree(r->pos), cudaFree(r->count), cudaFreeHost(r->count_host);
    cudaFree(r->cub_tmp);
    free(r);
}

extern "C" vx_status vx_rollout_cuda_create(const vx_rollout_cfg *cfg, vx_env *env,
                                            cudaStream_t s, vx_rollout_cuda **out, vx_err *e)
{
    *out = NULL;
    if (cfg->steps < 1 || cfg->n_step < 1 || cfg->n_step > 255)
        return vx_err_set(e, VX_ERR_ARG, "rollout: steps %d and n_step %d must be positive (n ≤ 255)",
                          cfg->steps, cfg->n_step);
    if (vx_device_kind(vx_env_device(env)) != VX_DEVICE_CUDA)
        return vx_err_set(e, VX_ERR_ARG, "rollout: the environments are on %s, not a CUDA device",
                          vx_device_name(vx_env_device(env)));
    vx_rollout_cuda *r = (vx_rollout_cuda *)calloc(1, sizeof *r);
    if (!r) return vx_err_set(e, VX_ERR_NOMEM, "rollout: out of memory");
    vx_status st = VX_OK;
    r->cfg = *cfg;
    r->L = *cfg->layout;
    r->shape = *cfg->shape;
    r->env = env;
    r->N = (int)vx_env_count(env);
    r->T = cfg->steps;
    r->n = cfg->n_step;
    r->s = s;
    size_t N = (size_t)r->N, n = (size_t)r->n, slots = (size_t)r->T * N * n;
    st = vx_qnet_cuda_create(&r->L, r->N, &r->net, e);
    if (!st) st = vx_qnet_cuda_set_tf32(r->net, cfg->tf32, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMalloc((void **)&r->obs[0], N * D * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->obs[1], N * D * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->final_obs, N * D * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->rew, N * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->act, N * A * sizeof(int32_t)));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->te, N));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->tr, N));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->ns.count, N * sizeof(int)));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->ns.head, N * sizeof(int)));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->ns.obs, N * n * D * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->ns.act, N * n * A * sizeof(int32_t)));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->ns.rew, N * n * 4));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->ep_ret, N * 8));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->ret_sum, N * 8));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->ep_count, N * 8));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->ep_stats, 2 * 8));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->eps, 8));
    VX_CUDA_CHECK(cudaMalloc((void **)&r->step, 8));
    st = trans_alloc(&r->raw, slots, e);
    if (st) goto fail;
    if (n > 1) {
        st = trans_alloc(&r->packed, slots, e);
        if (st) goto fail;
        VX_CUDA_CHECK(cudaMalloc((void **)&r->flags, slots * 4));
        VX_CUDA_CHECK(cudaMalloc((void **)&r->pos, slots * 4));
        VX_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(NULL, r->cub_tmp_n, r->flags, r->pos, (int)slots));
        VX_CUDA_CHECK(cudaMalloc(&r->cub_tmp, r->cub_tmp_n));
    }
    VX_CUDA_CHECK(cudaMalloc((void **)&r->count, 8));
    VX_CUDA_CHECK(cudaMallocHost((void **)&r->count_host, 8));
    VX_CUDA_CHECK(cudaMemsetAsync(r->ns.count, 0, N * sizeof(int), s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->ns.head, 0, N * sizeof(int), s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->ep_ret, 0, N * 8, s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->ret_sum, 0, N * 8, s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->ep_count, 0, N * 8, s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->eps, 0, 8, s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->step, 0, 8, s));
    st = vx_env_observe(env, r->obs[0], s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaStreamSynchronize(s)); /* creation only */
    *out = r;
    return VX_OK;
fail:
    vx_rollout_cuda_free(r);
    return st;
}

extern "C" vx_status vx_rollout_cuda_set_eps(vx_rollout_cuda *r, double eps, vx_err *e)
{
    vx_status st = VX_OK;
    set_double_kernel<<<1, 1, 0, r->s>>>(r->eps, eps); /* the value travels as an argument */
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
}

/* The sequence the graph holds. */
static vx_status rollout_body(vx_rollout_cuda *r, vx_err *e)
{
    vx_status st = VX_OK;
    int N = r->N, n = r->n, O = r->L.out_dim;
    size_t slots = (size_t)r->T * N * n;
    unsigned blocks = (unsigned)((N + 127) / 128);
    for (int t = 0; t < r->T && !st; t++) {
        float *cur = r->obs[t & 1], *next = r->obs[(t + 1) & 1];
        st = vx_qnet_cuda_forward(r->net, r->cfg.act_params, cur, N, r->s, e);
        if (!st)
            st = vx_dqn_cuda_act(&r->shape, vx_qnet_cuda_output(r->net), O, N, r->eps, r->cfg.seed,
                                 r->step, r->act, r->s, e);
        if (!st)
            st = vx_env_step(r->env, r->act, next, r->rew, r->te, r->tr, r->final_obs, r->s, e);
        if (st) break;
        emit_kernel<<<blocks, 128, 0, r->s>>>(N, n, t, r->cfg.gamma, cur, r->act, r->rew, r->te,
                                              r->tr, next, r->final_obs, r->ns, r->raw, r->flags,
                                              r->ep_ret, r->ret_sum, r->ep_count, r->step);
        VX_CUDA_LAUNCH_CHECK();
    }
    if (st) goto fail;
    if (r->T & 1) /* the current observations always start a rollout in obs[0] */
        VX_CUDA_CHECK(cudaMemcpyAsync(r->obs[0], r->obs[1], (size_t)N * D * 4,
                                      cudaMemcpyDeviceToDevice, r->s));
    if (n > 1) {
        size_t tmp = r->cub_tmp_n;
        VX_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(r->cub_tmp, tmp, r->flags, r->pos, (int)slots, r->s));
        pack_kernel<<<(unsigned)((slots * D + 255) / 256), 256, 0, r->s>>>(slots, r->flags, r->pos,
                                                                           r->raw, r->packed, r->count);
        VX_CUDA_LAUNCH_CHECK();
        VX_CUDA_CHECK(cudaMemcpyAsync(r->count_host, r->count, 8, cudaMemcpyDeviceToHost, r->s));
    }
    episodes_kernel<<<1, 1, 0, r->s>>>(N, r->ret_sum, r->ep_count, r->ep_stats);
    VX_CUDA_LAUNCH_CHECK();
fail:
    return st;
}

extern "C" vx_status vx_rollout_cuda_run(vx_rollout_cuda *r, int eager, vx_err *e)
{
    vx_status st = VX_OK;
    if (eager) return rollout_body(r, e);
    if (!r->exec) {
        VX_CUDA_CHECK(cudaStreamBeginCapture(r->s, cudaStreamCaptureModeThreadLocal));
        st = rollout_body(r, e);
        cudaError_t rc = cudaStreamEndCapture(r->s, &r->graph);
        if (st) goto fail;
        VX_CUDA_CHECK(rc);
        VX_CUDA_CHECK(cudaGraphInstantiate(&r->exec, r->graph, 0));
    }
    VX_CUDA_CHECK(cudaGraphLaunch(r->exec, r->s));
fail:
    return st;
}

extern "C" void vx_rollout_cuda_staged(vx_rollout_cuda *r, vx_transitions *out, size_t *n)
{
    const dev_trans *t = r->n > 1 ? &r->packed : &r->raw;
    *out = (vx_transitions){t->obs, t->next_obs, t->actions, t->rewards, t->term, t->trunc, t->steps};
    *n = r->n > 1 ? (size_t)*r->count_host : (size_t)r->T * (size_t)r->N;
}

extern "C" const double *vx_rollout_cuda_episode_stats(const vx_rollout_cuda *r)
{
    return r->ep_stats;
}

extern "C" vx_status vx_rollout_cuda_get_state(vx_rollout_cuda *r, vx_rollout_state *x, vx_err *e)
{
    vx_status st = VX_OK;
    size_t N = (size_t)r->N, n = (size_t)r->n;
    unsigned long long step;
    VX_CUDA_CHECK(cudaStreamSynchronize(r->s));
    VX_CUDA_CHECK(cudaMemcpy(x->obs, r->obs[0], N * D * 4, cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(x->episode_return, r->ep_ret, N * 8, cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(x->nstep->count, r->ns.count, N * sizeof(int), cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(x->nstep->head, r->ns.head, N * sizeof(int), cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(x->nstep->obs, r->ns.obs, N * n * D * 4, cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(x->nstep->act, r->ns.act, N * n * A * sizeof(int32_t),
                             cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(x->nstep->rew, r->ns.rew, N * n * 4, cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(&step, r->step, 8, cudaMemcpyDeviceToHost));
    *x->act_step = step;
fail:
    return st;
}

extern "C" vx_status vx_rollout_cuda_set_state(vx_rollout_cuda *r, const vx_rollout_state *x,
                                               vx_err *e)
{
    vx_status st = VX_OK;
    size_t N = (size_t)r->N, n = (size_t)r->n;
    unsigned long long step = *x->act_step;
    VX_CUDA_CHECK(cudaStreamSynchronize(r->s));
    VX_CUDA_CHECK(cudaMemcpy(r->obs[0], x->obs, N * D * 4, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(r->ep_ret, x->episode_return, N * 8, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(r->ns.count, x->nstep->count, N * sizeof(int), cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(r->ns.head, x->nstep->head, N * sizeof(int), cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(r->ns.obs, x->nstep->obs, N * n * D * 4, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(r->ns.act, x->nstep->act, N * n * A * sizeof(int32_t),
                             cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(r->ns.rew, x->nstep->rew, N * n * 4, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(r->step, &step, 8, cudaMemcpyHostToDevice));
fail:
    return st;
}

/* rollout_cuda.cu — the DQN's collection on a CUDA device (rollout_cuda.h): per step the acting
 * forward pass → ε-greedy actions → environment step → n-step emit, T steps captured as one
 * graph: a conditional while node whose body is one step (the step's index and the steps left
 * on the device), then the rollout's tail (the n-step packing, the episode sums) as a second
 * graph. One step's nodes instead of T steps' unrolled: a graph of about 13 nodes instead of
 * 1,300 to instantiate and upload, which with many trials on one GPU had taken each trial up to
 * 0.6 s and 2 s while the others launched. Kernel by kernel (eager), the host issues the same
 * step T times. With fused acting (act_fused.h) the T steps are one launch of that kernel
 * instead (each of its blocks steps its own environments), graph or eager. The current
 * observations are always obs[0]: each step writes the next ones to obs[1], and the emit copies
 * each environment's over its row of obs[0] once it has used both. The acting and n-step
 * arithmetic is dqn_act.h's, the CPU collection's own code.
 *
 * Order of the staged transitions: the CPU collection appends, per step, environment 0's
 * completed transitions, then environment 1's, …; a step completes at most n transitions per
 * environment. So each (step, environment, j) has a fixed staging slot; with n = 1 every slot is
 * used and the staging buffer is already in the CPU's order; with n > 1 unused slots are flagged
 * off and one scan + scatter at the end of the rollout packs the rest in order.
 * Built without fused multiply-adds (CMakeLists.txt), like the environment. */
#include "vixen/dqn_act.h"
#include "../util/block_sum.cuh"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "../util/pdl.cuh"
#include "act_fused.h"
#include "act_step.cuh"
#include "rollout_cuda.h"

#include <cub/cub.cuh>
#include <stdlib.h>
#include <string.h>

#define D VX_OBS_DIM
#define A VX_ACTION_BRANCHES

typedef dqn_dev_trans dev_trans;

struct dqn_rollout {
    dqn_rollout_cfg cfg;
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_device *dev;
    vx_env *env;
    vx_env_params envp;       /* vx_env_device_view: the environments as act_step_kernel steps */
    vx_env_state *env_states; /* them */
    int N, T, n;
    cudaStream_t s;
    vx_mem mem;
    vx_qnet *net;         /* the per-layer path's acting network (NULL: fused) */
    dqn_act_fused *fused; /* the fused path's kernel (dqn.acting tf32, tf32x3 or bf16) */
    float *obs[2], *final_obs, *rew;
    int32_t *act;
    uint8_t *te, *tr;
    dqn_emit_args emit; /* ns, raw, flags and the episode sums (below) as the emit reads them */
    dqn_dev_nstep ns;
    int64_t *count_head; /* 2 × N: the checkpoint's form of count/head */
    double *ep_ret, *ret_sum, *ep_count, *ep_stats; /* ep_stats: sum, count */
    double *eps;
    unsigned long long *step;
    dev_trans raw, packed; /* raw: T·N·n slots; packed (n > 1 only) */
    uint32_t *flags, *pos; /* n > 1 */
    unsigned long long *count, *count_host;
    void *cub_tmp;
    size_t cub_tmp_n;
    int *tcount;    /* device: [0] the step within the rollout, [1] steps left */
    unsigned *done; /* device: the fused kernel's blocks finished its launch */
    cudaGraph_t graph, tail;
    cudaGraphExec_t exec, tail_exec;
    cudaGraphConditionalHandle loop;
};

static __global__ void act_kernel(vx_loss_shape shape, const float *q, int O, int N,
                                  const double *eps, uint64_t seed, const unsigned long long *step,
                                  int32_t *actions)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    vx_act_egreedy(&shape, q + (size_t)i * O, seed, (uint64_t)i, *step, *eps,
                   actions + (size_t)i * A, NULL);
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

/* A thread per environment: its ε-greedy actions, then its step with them (act_step.cuh) — the
 * acting and the environments' launches in one. It also moves the step counter on (a launch
 * less) and, in the loop's body (in_loop), decides whether the loop goes on. */
static __global__ void act_step_kernel(vx_loss_shape shape, const float *q, int O, int N,
                                       const double *eps, uint64_t seed,
                                       const unsigned long long *step, int32_t *actions,
                                       vx_env_params p, vx_env_state *states, float *next,
                                       float *rew, uint8_t *te, uint8_t *tr, float *final_obs,
                                       int *tcount, int in_loop, cudaGraphConditionalHandle loop)
{
    vx_pdl_wait();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) count_step(tcount, in_loop, loop);
    if (i >= N) return;
    act_and_step(shape, q + (size_t)i * O, i, *eps, seed, *step, actions, p, states, next, rew, te,
                 tr, final_obs);
}

extern "C" vx_status dqn_act_cuda(const vx_loss_shape *shape, const float *q, int out_dim, int N,
                                  const double *eps, uint64_t seed, const unsigned long long *step,
                                  int32_t *actions, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    act_kernel<<<(N + 127) / 128, 128, 0, s>>>(*shape, q, out_dim, N, eps, seed, step, actions);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

/* A warp per environment (EMIT_ENVS a block): its emit for step t (act_step.cuh, emit_one), t
 * read as tcount[0] − 1 (the act kernel has moved it on); the acting counter on (every act
 * kernel has read it). */
#define EMIT_ENVS 4
static __global__ void emit_kernel(int N, const int *tcount, dqn_emit_args a, float *obs,
                                   const int32_t *act, const float *rew, const uint8_t *te,
                                   const uint8_t *tr, const float *next_obs, const float *final_obs,
                                   unsigned long long *step)
{
    __shared__ int meta[EMIT_ENVS][3]; /* the ring slot of the step, the first start, emitted */
    vx_pdl_wait();
    int i = blockIdx.x * EMIT_ENVS + threadIdx.x / 32;
    if (blockIdx.x == 0 && threadIdx.x == 0) *step += 1;
    if (i >= N) return; /* the whole warp */
    emit_one(a, N, tcount[0] - 1, i, meta[threadIdx.x / 32], obs, act, rew, te, tr, next_obs,
             final_obs);
}

/* The step counter: reset before a rollout, advanced by each step's act_step_kernel (in the graph,
 * the loop goes on while steps are left), or by T at the end of the fused kernel's one launch. */
static __global__ void steps_start_kernel(int *tcount, int T)
{
    tcount[0] = 0;
    tcount[1] = T;
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

/* One block: the rollout's episode sums (each thread its strided share of the environments in
 * order, then a fixed tree: the same bits every run), then the per-env sums reset. One thread
 * over 2,048 environments took 167 µs of a 6.7 ms rollout. */
#define EPISODE_THREADS 256
static __global__ void __launch_bounds__(EPISODE_THREADS)
    episodes_kernel(int N, double *ret_sum, double *ep_count, double *out)
{
    __shared__ double sh[EPISODE_THREADS];
    double r = 0, c = 0;
    for (int i = threadIdx.x; i < N; i += EPISODE_THREADS) {
        r += ret_sum[i];
        c += ep_count[i];
        ret_sum[i] = 0;
        ep_count[i] = 0;
    }
    r = vx_block_sum<EPISODE_THREADS>(r, sh);
    c = vx_block_sum<EPISODE_THREADS>(c, sh);
    if (threadIdx.x == 0) out[0] = r, out[1] = c;
}

static __global__ void set_double_kernel(double *x, double v) { *x = v; }

/* count/head (int) ↔ the checkpoint's int64 [2 × N] */
static __global__ void ring_to64_kernel(const int *count, const int *head, int N, int64_t *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = count[i], out[N + i] = head[i];
}

static __global__ void ring_from64_kernel(const int64_t *in, int N, int *count, int *head)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) count[i] = (int)in[i], head[i] = (int)in[N + i];
}

static vx_status trans_alloc(vx_mem *m, dev_trans *t, size_t n, vx_err *e)
{
    vx_status st = vx_mem_alloc(m, n * D * 4, &t->obs, e);
    if (!st) st = vx_mem_alloc(m, n * D * 4, &t->next_obs, e);
    if (!st) st = vx_mem_alloc(m, n * 4, &t->rewards, e);
    if (!st) st = vx_mem_alloc(m, n * A * 4, &t->actions, e);
    if (!st) st = vx_mem_alloc(m, n, &t->term, e);
    if (!st) st = vx_mem_alloc(m, n, &t->trunc, e);
    if (!st) st = vx_mem_alloc(m, n, &t->steps, e);
    return st;
}

extern "C" void dqn_rollout_free(dqn_rollout *r)
{
    if (!r) return;
    if (r->exec) cudaGraphExecDestroy(r->exec);
    if (r->graph) cudaGraphDestroy(r->graph);
    if (r->tail_exec) cudaGraphExecDestroy(r->tail_exec);
    if (r->tail) cudaGraphDestroy(r->tail);
    vx_qnet_free(r->net);
    dqn_act_fused_free(r->fused);
    vx_mem_release(&r->mem);
    free(r);
}

extern "C" vx_status dqn_rollout_create(const dqn_rollout_cfg *cfg, vx_env *env, cudaStream_t s,
                                        dqn_rollout **out, vx_err *e)
{
    *out = NULL;
    if (cfg->steps < 1 || cfg->n_step < 1 || cfg->n_step > 255)
        return vx_err_set(e, VX_ERR_ARG,
                          "rollout: steps %d and n_step %d must be positive (n ≤ 255)", cfg->steps,
                          cfg->n_step);
    const vx_loss_shape *sh = cfg->shape;
    if (sh->n_branches != A || sh->branch[0] != VX_EXPOSURE_LEVELS ||
        sh->branch[1] != VX_ORDER_TYPES || sh->branch[2] != VX_URGENCY_LEVELS)
        return vx_err_set(e, VX_ERR_ARG,
                          "rollout: the network's %d action branches are not the environment's "
                          "(%d × %d × %d)",
                          sh->n_branches, VX_EXPOSURE_LEVELS, VX_ORDER_TYPES, VX_URGENCY_LEVELS);
    vx_device *dev = vx_env_device(env);
    vx_status st = vx_cuda_enter(dev, e);
    if (st) return st;
    dqn_rollout *r = (dqn_rollout *)calloc(1, sizeof *r);
    if (!r) return vx_err_set(e, VX_ERR_NOMEM, "rollout: out of memory");
    r->cfg = *cfg;
    r->L = *cfg->layout;
    r->shape = *cfg->shape;
    r->dev = dev;
    r->env = env;
    r->N = (int)vx_env_count(env);
    r->T = cfg->steps;
    r->n = cfg->n_step;
    r->s = s;
    vx_mem_init(&r->mem, dev, "dqn rollout");
    vx_mem *m = &r->mem;
    size_t N = (size_t)r->N, n = (size_t)r->n, slots = (size_t)r->T * N * n;
    /* the fused kernel where it takes the network, else GEMMs in TF32 for TF32 or BF16 acting
     * (the reduced precision cuBLASLt takes) and in float32 for 3×TF32's float32-like accuracy */
    int gemm_tf32 = cfg->tf32 || cfg->acting == VX_ACTING_TF32 || cfg->acting == VX_ACTING_BF16;
    if (cfg->acting != VX_ACTING_FLOAT32) {
        st = dqn_act_fused_create(&r->L, cfg->acting, dev, &r->fused, e);
        if (st == VX_ERR_UNSUPPORTED) {
            vx_log(VX_LOG_WARN, "%s: acting runs a GEMM a layer, in %s", e->msg,
                   gemm_tf32 ? "TF32" : "float32");
            st = VX_OK;
        }
    }
    if (!st && !r->fused) st = vx_qnet_create(&r->L, r->N, 0, dev, &r->net, e);
    if (!st && !r->fused) st = vx_qnet_set_tf32(r->net, gemm_tf32, e);
    if (!st) st = vx_mem_alloc(m, N * D * 4, &r->obs[0], e);
    if (!st) st = vx_mem_alloc(m, N * D * 4, &r->obs[1], e);
    if (!st) st = vx_mem_alloc(m, N * D * 4, &r->final_obs, e);
    if (!st) st = vx_mem_alloc(m, N * 4, &r->rew, e);
    if (!st) st = vx_mem_alloc(m, N * A * 4, &r->act, e);
    if (!st) st = vx_mem_alloc(m, N, &r->te, e);
    if (!st) st = vx_mem_alloc(m, N, &r->tr, e);
    if (!st) st = vx_mem_alloc(m, N * sizeof(int), &r->ns.count, e);
    if (!st) st = vx_mem_alloc(m, N * sizeof(int), &r->ns.head, e);
    if (!st) st = vx_mem_alloc(m, N * n * D * 4, &r->ns.obs, e);
    if (!st) st = vx_mem_alloc(m, N * n * A * 4, &r->ns.act, e);
    if (!st) st = vx_mem_alloc(m, N * n * 4, &r->ns.rew, e);
    if (!st) st = vx_mem_alloc(m, 2 * N * 8, &r->count_head, e);
    if (!st) st = vx_mem_alloc(m, N * 8, &r->ep_ret, e);
    if (!st) st = vx_mem_alloc(m, N * 8, &r->ret_sum, e);
    if (!st) st = vx_mem_alloc(m, N * 8, &r->ep_count, e);
    if (!st) st = vx_mem_alloc(m, 2 * 8, &r->ep_stats, e);
    if (!st) st = vx_mem_alloc(m, 8, &r->eps, e);
    if (!st) st = vx_mem_alloc(m, 8, &r->step, e);
    if (!st) st = vx_mem_alloc(m, 2 * sizeof(int), &r->tcount, e);
    if (!st) st = vx_mem_alloc(m, sizeof(unsigned), &r->done, e);
    if (!st) st = trans_alloc(m, &r->raw, slots, e);
    if (!st && n > 1) {
        st = trans_alloc(m, &r->packed, slots, e);
        if (!st) st = vx_mem_alloc(m, slots * 4, &r->flags, e);
        if (!st) st = vx_mem_alloc(m, slots * 4, &r->pos, e);
        if (st) goto fail;
        VX_CUDA_CHECK(
            cub::DeviceScan::ExclusiveSum(NULL, r->cub_tmp_n, r->flags, r->pos, (int)slots));
        st = vx_mem_alloc(m, r->cub_tmp_n, &r->cub_tmp, e);
    }
    if (!st) st = vx_mem_alloc(m, 8, &r->count, e);
    if (!st) st = vx_mem_alloc_host(m, 8, &r->count_host, e);
    if (st) goto fail;
    r->emit.n = r->n, r->emit.gamma = cfg->gamma, r->emit.ns = r->ns, r->emit.out = r->raw;
    r->emit.flags = r->flags, r->emit.ep_ret = r->ep_ret, r->emit.ret_sum = r->ret_sum;
    r->emit.ep_count = r->ep_count;
    VX_CUDA_CHECK(cudaMemsetAsync(r->ns.count, 0, N * sizeof(int), s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->ns.head, 0, N * sizeof(int), s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->ep_ret, 0, N * 8, s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->done, 0, sizeof(unsigned), s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->ret_sum, 0, N * 8, s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->ep_count, 0, N * 8, s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->eps, 0, 8, s));
    VX_CUDA_CHECK(cudaMemsetAsync(r->step, 0, 8, s));
    st = vx_env_observe(env, r->obs[0], s, e);
    if (!st) st = vx_env_device_view(env, s, &r->envp, &r->env_states, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaStreamSynchronize(s)); /* creation only */
    *out = r;
    return VX_OK;
fail:
    dqn_rollout_free(r);
    return st;
}

extern "C" vx_status dqn_rollout_set_eps(dqn_rollout *r, double eps, vx_err *e)
{
    vx_status st = VX_OK;
    set_double_kernel<<<1, 1, 0, r->s>>>(r->eps, eps); /* the value travels as an argument */
    VX_CUDA_LAUNCH_CHECK(r->s);
fail:
    return st;
}

/* The fused path's whole rollout, T steps in one launch: its blocks' environments are
 * independent, so each block runs every step of its own (act_fused.h). */
static vx_status fused_steps(dqn_rollout *r, vx_err *e)
{
    dqn_act_fused_args a;
    memset(&a, 0, sizeof a);
    a.N = r->N, a.obs = r->obs[0], a.shape = r->shape, a.eps = r->eps, a.seed = r->cfg.seed;
    a.step = r->step, a.actions = r->act, a.envp = r->envp, a.states = r->env_states;
    a.next = r->obs[1], a.rew = r->rew, a.final_obs = r->final_obs, a.te = r->te, a.tr = r->tr;
    a.steps = r->T, a.tcount = r->tcount, a.emit = r->emit, a.done = r->done;
    return dqn_act_fused_step(r->fused, &a, r->s, e);
}

/* One step of the per-layer path: the forward pass on obs[0], then the actions and the
 * environments' step into obs[1] with the counter on, then the emit (which copies obs[1] over
 * obs[0]). In the loop's body (in_loop) the counter also decides whether the loop goes on. */
static vx_status step_body(dqn_rollout *r, int in_loop, vx_err *e)
{
    vx_status st = VX_OK;
    int N = r->N, O = r->L.out_dim;
    /* 32 environments a block: a thread's environment step is a long chain of its own loads,
     * and 2,048 environments in blocks of 128 would use 16 SMs */
    unsigned blocks = (unsigned)((N + 31) / 32);
    float *cur = r->obs[0], *next = r->obs[1];
    st = vx_qnet_forward(r->net, r->cfg.act_params, cur, N, r->s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(vx_pdl_launch(
        act_step_kernel, dim3(blocks), dim3(32), 0, r->s, r->shape, vx_qnet_output(r->net), O, N,
        (const double *)r->eps, r->cfg.seed, (const unsigned long long *)r->step, r->act, r->envp,
        r->env_states, next, r->rew, r->te, r->tr, r->final_obs, r->tcount, in_loop, r->loop));
    VX_CUDA_LAUNCH_CHECK(r->s);
    VX_CUDA_CHECK(vx_pdl_launch(emit_kernel, dim3((unsigned)((N + EMIT_ENVS - 1) / EMIT_ENVS)),
                                dim3(32 * EMIT_ENVS), 0, r->s, N, (const int *)r->tcount, r->emit,
                                cur, (const int32_t *)r->act, (const float *)r->rew,
                                (const uint8_t *)r->te, (const uint8_t *)r->tr, (const float *)next,
                                (const float *)r->final_obs, r->step));
    VX_CUDA_LAUNCH_CHECK(r->s);
fail:
    return st;
}

/* After the T steps: the n-step packing and the episode sums. */
static vx_status tail_body(dqn_rollout *r, vx_err *e)
{
    vx_status st = VX_OK;
    int N = r->N, n = r->n;
    size_t slots = (size_t)r->T * N * n;
    if (n > 1) {
        size_t tmp = r->cub_tmp_n;
        VX_CUDA_CHECK(
            cub::DeviceScan::ExclusiveSum(r->cub_tmp, tmp, r->flags, r->pos, (int)slots, r->s));
        pack_kernel<<<(unsigned)((slots * D + 255) / 256), 256, 0, r->s>>>(
            slots, r->flags, r->pos, r->raw, r->packed, r->count);
        VX_CUDA_LAUNCH_CHECK(r->s);
        VX_CUDA_CHECK(cudaMemcpyAsync(r->count_host, r->count, 8, cudaMemcpyDeviceToHost, r->s));
    }
    episodes_kernel<<<1, EPISODE_THREADS, 0, r->s>>>(N, r->ret_sum, r->ep_count, r->ep_stats);
    VX_CUDA_LAUNCH_CHECK(r->s);
fail:
    return st;
}

/* The two graphs (the top comment): the loop over one step's body (the fused path: its one
 * launch), and the tail. A failed build leaves nothing behind for the next try. */
static vx_status build_graphs(dqn_rollout *r, vx_err *e)
{
    cudaGraph_t captured = NULL;
    cudaError_t rc, end;
    vx_status st = VX_OK;
    if (r->fused) {
        VX_CUDA_CHECK(cudaStreamBeginCapture(r->s, cudaStreamCaptureModeThreadLocal));
        st = fused_steps(r, e);
        end = cudaStreamEndCapture(r->s, &r->graph); /* always ends the capture */
    } else {
        /* a rollout has a step or more: the body runs at least once */
        st = vx_cuda_loop_begin(r->s, &r->graph, &r->loop, e);
        if (st) return st;
        st = step_body(r, 1, e);
        end = cudaStreamEndCapture(r->s, &captured); /* always ends the capture */
    }
    if (st) goto fail;
    VX_CUDA_CHECK(end);
    VX_CUDA_CHECK(cudaStreamBeginCapture(r->s, cudaStreamCaptureModeThreadLocal));
    st = tail_body(r, e);
    rc = cudaStreamEndCapture(r->s, &r->tail);
    if (st) goto fail;
    VX_CUDA_CHECK(rc);
    VX_CUDA_CHECK(cudaGraphInstantiate(&r->exec, r->graph, 0));
    VX_CUDA_CHECK(cudaGraphInstantiate(&r->tail_exec, r->tail, 0));
fail:
    if (!r->tail_exec) {
        if (r->exec) cudaGraphExecDestroy(r->exec);
        if (r->graph) cudaGraphDestroy(r->graph);
        if (r->tail) cudaGraphDestroy(r->tail);
        r->exec = NULL, r->graph = NULL, r->tail = NULL;
    }
    return st;
}

extern "C" vx_status dqn_rollout_prepare(dqn_rollout *r, vx_err *e)
{
    vx_status st = vx_cuda_enter(r->dev, e);
    return st || r->tail_exec ? st : build_graphs(r, e);
}

extern "C" vx_status dqn_rollout_run(dqn_rollout *r, int eager, vx_err *e)
{
    vx_status st = eager ? vx_cuda_enter(r->dev, e) : dqn_rollout_prepare(r, e);
    if (st) return st;
    if (r->fused)
        st = dqn_act_fused_pack(r->fused, r->cfg.act_params, r->s, e); /* this rollout's */
    if (st) return st;
    steps_start_kernel<<<1, 1, 0, r->s>>>(r->tcount, r->T);
    VX_CUDA_LAUNCH_CHECK(r->s);
    if (eager) {
        if (r->fused) st = fused_steps(r, e);
        for (int t = 0; t < r->T && !st && !r->fused; t++) st = step_body(r, 0, e);
        if (!st) st = tail_body(r, e);
        return st;
    }
    st = vx_cuda_graph_launch(r->dev, r->exec, r->s, e);
    if (!st) st = vx_cuda_graph_launch(r->dev, r->tail_exec, r->s, e);
fail:
    return st;
}

extern "C" void dqn_rollout_staged(dqn_rollout *r, vx_transitions *out, size_t *n)
{
    const dev_trans *t = r->n > 1 ? &r->packed : &r->raw;
    *out =
        (vx_transitions){t->obs, t->next_obs, t->actions, t->rewards, t->term, t->trunc, t->steps};
    *n = r->n > 1 ? (size_t)*r->count_host : (size_t)r->T * (size_t)r->N;
}

extern "C" int dqn_rollout_fused(const dqn_rollout *r) { return r->fused != NULL; }

extern "C" const double *dqn_rollout_episode_stats(const dqn_rollout *r) { return r->ep_stats; }

extern "C" size_t dqn_rollout_reserved(const dqn_rollout *r)
{
    return r->mem.bytes + (r->net ? vx_qnet_reserved(r->net) : 0) +
           (r->fused ? dqn_act_fused_reserved(r->fused) : 0);
}

extern "C" vx_status dqn_rollout_copy_state(dqn_rollout *r, const dqn_rollout_state *x,
                                            cudaStream_t s, vx_err *e)
{
    vx_status st = vx_cuda_enter(r->dev, e);
    size_t N = (size_t)r->N, n = (size_t)r->n;
    if (st) return st;
    ring_to64_kernel<<<(unsigned)((N + 127) / 128), 128, 0, s>>>(r->ns.count, r->ns.head, r->N,
                                                                 r->count_head);
    VX_CUDA_LAUNCH_CHECK(s);
    VX_CUDA_CHECK(cudaMemcpyAsync(x->obs, r->obs[0], N * D * 4, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(x->ep_ret, r->ep_ret, N * 8, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(x->count_head, r->count_head, 2 * N * 8, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(x->ring_obs, r->ns.obs, N * n * D * 4, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(x->ring_act, r->ns.act, N * n * A * 4, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(x->ring_rew, r->ns.rew, N * n * 4, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(x->act_step, r->step, 8, cudaMemcpyDeviceToHost, s));
fail:
    return st;
}

extern "C" vx_status dqn_rollout_load_state(dqn_rollout *r, const dqn_rollout_state *x, vx_err *e)
{
    vx_status st = vx_cuda_enter(r->dev, e);
    size_t N = (size_t)r->N, n = (size_t)r->n;
    cudaStream_t s = r->s;
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(r->obs[0], x->obs, N * D * 4, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(r->ep_ret, x->ep_ret, N * 8, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(r->count_head, x->count_head, 2 * N * 8, cudaMemcpyHostToDevice, s));
    ring_from64_kernel<<<(unsigned)((N + 127) / 128), 128, 0, s>>>(r->count_head, r->N, r->ns.count,
                                                                   r->ns.head);
    VX_CUDA_LAUNCH_CHECK(s);
    VX_CUDA_CHECK(
        cudaMemcpyAsync(r->ns.obs, x->ring_obs, N * n * D * 4, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(r->ns.act, x->ring_act, N * n * A * 4, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(r->ns.rew, x->ring_rew, N * n * 4, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(r->step, x->act_step, 8, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaStreamSynchronize(s));
fail:
    return st;
}

/* ppo_backend_cuda.cu — PPO's CUDA backend (ppo_backend.h), registered as the device's "ppo"
 * backend: the CPU reference's iteration (ppo_backend_cpu.c) with every step on the device, on
 * one stream, and the host waiting once per iteration.
 *
 *   rollout graph  T steps: normalise the observations (statistics frozen; the raw sums for the
 *                  next statistics taken per step), the forward pass, sampling with the CPU's
 *                  Philox draws (ppo_math.h), the environment step, the episode accounting;
 *                  then the values after the rollout, GAE per environment, returns, explained
 *                  variance, the episode sums, the update epochs' shuffles (Philox keys sorted
 *                  with CUB; a stable radix sort of the 32-bit keys with the indices as values
 *                  orders ties by index, as the CPU's sort of key << 32 | index does), and every
 *                  minibatch's advantage mean and standard deviation
 *   minibatch graph  the gradient of the minibatch named by a device cursor (its rows gathered,
 *                  their advantages normalised, forward, the per-sample loss and gradient of
 *                  ppo_math.h, backward), the clip and Adam (vx_optim — or, on the fused path, the
 *                  fused kernels' own step on its state — reading this iteration's learning
 *                  rate and the target-KL stop from device memory), the statistics; launched
 *                  update_epochs × minibatches times
 *   end            the observation statistics take in the rollout; the statistics are copied
 *                  into pinned memory behind an event, the iteration's one wait
 *
 * Two ways to run the network. The fused kernels (ppo_fused.h, the default where the network
 * fits them): a rollout's normalisation, forward passes, sampling and environment steps are one
 * launch (each block takes its environments through every step), and a minibatch three (its
 * gradient; the fixed-order sum with the norm; the optimizer's step, which writes the kernels'
 * copies of the weights and ends the minibatch). The per-layer path (ppo.fused = 0, or a network
 * the fused kernels do not take): ac_cuda.h's cuBLASLt GEMMs with small kernels between them.
 *
 * A truncated episode's bootstrap needs the value of its pre-reset observation. The CPU runs the
 * value network on that one row. The per-layer path values all N pre-reset rows beside the N
 * current ones at the next step (the value trunk runs on 2N rows, the policy on N), so the graph
 * has no data-dependent shape; in the fused kernel a block that holds such a row runs its forward
 * pass over its pre-reset rows too, below its current ones. The target-KL stop is decided on the
 * device: once set, the remaining minibatches still run their forward and backward passes but
 * neither step the weights nor count — the same result as the CPU's break, without a read-back in
 * the iteration.
 *
 * Sums over samples are fixed-order tree reductions in double, so the same inputs give the same
 * bits every run; with run.gpu_graphs = 0 the same kernels run one by one, synchronised (the
 * reference the graphs are tested against). */
#include "vixen/ppo_math.h"
#include "../nn/ac_cuda.h"
#include "../util/block_sum.cuh"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "ppo_backend.h"
#include "ppo_fused.h"
#include "ppo_mb_end.cuh"

#include <cub/cub.cuh>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define D VX_OBS_DIM
#define K VX_PPO_LOGITS
#define A VX_ACTION_BRANCHES
#define RB 256 /* threads of the reducing kernels */

/* the statistics' and controls' layouts: ppo_mb_end.cuh */

struct ppo_backend {
    vx_ppo_settings s;
    vx_run_params run;
    vx_ac_layout L;
    vx_device *dev;
    vx_env *env;
    vx_mem mem;
    cudaStream_t st;
    int eager;
    size_t N, T, M, TN, np;
    ppo_fused *fused;       /* the fused kernels, or else: */
    ac_cuda *net_act;       /* rows 2N: the rollout's forward passes */
    ac_cuda *net_mb;        /* rows M: the updates */
    char per_layer_why[96]; /* why the fused kernels do not take the network */
    vx_optim *opt;
    vx_optim_view ov;   /* its state, for the fused kernels' own step */
    vx_env_params envp; /* the environments, for the fused kernels to step them */
    vx_env_state *env_states;
    double *rs_part; /* the rollout statistics' blocks (rollout_stats_kernel) */
    unsigned *rs_arrived;
    /* device */
    float *params, *grads;
    double *obs_mean, *obs_var, *obs_count, *raw_sum, *raw_sum2;
    double *raw_part;     /* norm_kernel's blocks' partial raw sums */
    float *obs, *x, *fin; /* N × D raw; 2N × D normalised [obs; fin]; N × D pre-reset */
    float *r_obs, *r_logp, *r_val, *r_rew, *r_boot, *r_adv, *r_ret, *last_val;
    int32_t *r_act;
    uint8_t *r_te, *r_tr;
    double *ep_ret, *ret_sum, *ep_count;
    unsigned long long *act_step;
    long long *iter;
    uint32_t *keys_in, *keys_out, *idx_in, *perm; /* perm: update_epochs × TN */
    void *cub_tmp;
    size_t cub_tmp_n;
    float *mb_obs, *mb_logp, *mb_val, *mb_adv, *mb_ret, *mb_dz, *mb_dv;
    int32_t *mb_act;
    double *mb_parts, *adv_tab, *stats, *lr; /* adv_tab: 2 per minibatch of the iteration */
    int *ctl;
    /* graphs */
    cudaGraph_t g_roll, g_mb;
    cudaGraphExec_t x_roll, x_mb;
    cudaEvent_t c0, c1, l1;
    /* pinned */
    double *stats_host;
    int64_t *adam_t_host;
    ppo_state host; /* the checkpoint's buffers */
    /* the host's bookkeeping */
    uint64_t act_step_h;
    int64_t iter_h, updates_h;
    double obs_count_h;
};

/* ---- kernels ------------------------------------------------------------------------------- */

static __device__ double block_sum(double v, double *sh) { return vx_block_sum<RB>(v, sh); }

/* Rows a block of norm_kernel takes: its slice of the observations is read once, coalesced. */
#define NORM_ROWS 32

/* Normalises the N observations into x (and `store`, the rollout's copy) and, when fin is given,
 * the N pre-reset observations into x's rows N..2N. With part
 * (blocks × 2D doubles), each block also adds its rows' raw column sums and sums of squares to its
 * own partial sums — the same block, rows and order every step, so the statistics are the same bits
 * every run. */
static __global__ void norm_kernel(int N, const float *obs, const float *fin, const double *mean,
                                   const double *var, double clip, int on, float *x, float *store,
                                   double *part)
{
    __shared__ float sh[NORM_ROWS * D];
    __shared__ double m[D], v[D];
    if (threadIdx.x < D) m[threadIdx.x] = mean[threadIdx.x], v[threadIdx.x] = var[threadIdx.x];
    __syncthreads();
    size_t base = (size_t)blockIdx.x * NORM_ROWS * D;
    int rows = N - (int)blockIdx.x * NORM_ROWS;
    int n = (rows < NORM_ROWS ? rows : NORM_ROWS) * D;
    for (int k = threadIdx.x; k < n; k += blockDim.x) {
        int d = k % D;
        float o = obs[base + k];
        float z = vx_ppo_norm_obs(o, m[d], v[d], clip, on);
        sh[k] = o;
        x[base + k] = z;
        if (store) store[base + k] = z;
        if (fin) x[(size_t)N * D + base + k] = vx_ppo_norm_obs(fin[base + k], m[d], v[d], clip, on);
    }
    if (!part) return;
    __syncthreads();
    if (threadIdx.x >= D) return;
    double s = 0, s2 = 0;
    for (int k = threadIdx.x; k < n; k += D) s += sh[k], s2 += (double)sh[k] * sh[k];
    double *p = part + (size_t)blockIdx.x * 2 * D;
    p[threadIdx.x] += s, p[D + threadIdx.x] += s2;
}

/* One block of D threads: the rollout's raw sums from the blocks' partial sums, in block order. */
static __global__ void raw_sums_kernel(int blocks, const double *part, double *raw_sum,
                                       double *raw_sum2)
{
    int d = threadIdx.x;
    if (d >= D) return;
    double s = 0, s2 = 0;
    for (int b = 0; b < blocks; b++)
        s += part[(size_t)b * 2 * D + d], s2 += part[(size_t)b * 2 * D + D + d];
    raw_sum[d] = s, raw_sum2[d] = s2;
}

/* One thread per environment: its action and log-probability at step t (the CPU's draws), its
 * value; with t > 0, the bootstrap of step t − 1 from the value of its pre-reset row. */
static __global__ void sample_kernel(int N, int t, const float *logits, const float *values,
                                     uint64_t seed, const unsigned long long *step, int32_t *act,
                                     float *logp, float *val, float *boot_prev,
                                     const uint8_t *tr_prev)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    double z[K];
    for (int k = 0; k < K; k++) z[k] = logits[(size_t)i * K + k];
    size_t o = (size_t)t * N + i;
    logp[o] = (float)vx_ppo_sample(z, seed, (uint64_t)i, *step, act + o * A);
    val[o] = values[i];
    if (boot_prev) boot_prev[i] = tr_prev[i] ? values[N + i] : 0.0f;
}

/* One thread per environment: the episode accounting of the step; thread 0 advances the acting
 * counter (the sampling of this step has read it). */
static __global__ void episode_kernel(int N, const float *rew, const uint8_t *te, const uint8_t *tr,
                                      double *ep_ret, double *ret_sum, double *ep_count,
                                      unsigned long long *step)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) *step += 1;
    if (i >= N) return;
    ep_ret[i] += rew[i];
    if (te[i] || tr[i]) {
        ret_sum[i] += ep_ret[i];
        ep_count[i] += 1;
        ep_ret[i] = 0;
    }
}

/* One thread per environment: the last step's bootstrap from the values of its pre-reset rows
 * (fin_values; NULL: already in boot), then GAE and the returns. values: after the rollout.
 * The buffers never overlap (__restrict__): the compiler may then load a step's inputs before
 * the step after it has stored its advantage. */
static __global__ void gae_kernel(int N, int T, const float *__restrict__ values,
                                  const float *__restrict__ fin_values,
                                  const float *__restrict__ rew, const uint8_t *__restrict__ te,
                                  const uint8_t *__restrict__ tr, const float *__restrict__ val,
                                  float *__restrict__ boot, double gamma, double lambda,
                                  float *__restrict__ adv, float *__restrict__ ret)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    size_t last = (size_t)(T - 1) * N + i;
    if (fin_values) boot[last] = tr[last] ? fin_values[i] : 0.0f;
    vx_ppo_gae(T, (size_t)N, rew + i, te + i, tr + i, val + i, boot + i, values[i], gamma, lambda,
               adv + i);
    for (int t = 0; t < T; t++) {
        size_t k = (size_t)t * N + i;
        ret[k] = adv[k] + val[k];
    }
}

/* The rollout's statistics over RS_BLOCKS blocks (one block had taken 134 µs for 262,144
 * samples on an H200): each block sums its share (a fixed stride) of the returns and their errors
 * and of the environments' finished episodes, its tree sums (block_sum) go to part, and the last
 * block to finish adds the blocks' in block order (the same bits every run), writes the
 * statistics and resets the iteration's sums and controls. */
#define RS_BLOCKS 64
enum { R_Y, R_Y2, R_D, R_D2, R_RET, R_EPS, R_N };
static __global__ void rollout_stats_kernel(size_t TN, int N, const float *ret, const float *val,
                                            double *ret_sum, double *ep_count, double *stats,
                                            int *ctl, double *part, unsigned *arrived)
{
    __shared__ double sh[RB];
    __shared__ int last;
    double v[R_N] = {0, 0, 0, 0, 0, 0};
    size_t stride = (size_t)RS_BLOCKS * RB;
    for (size_t k = (size_t)blockIdx.x * RB + threadIdx.x; k < TN; k += stride) {
        double y = ret[k], d = y - (double)val[k];
        v[R_Y] += y, v[R_Y2] += y * y, v[R_D] += d, v[R_D2] += d * d;
    }
    for (size_t i = (size_t)blockIdx.x * RB + threadIdx.x; i < (size_t)N; i += stride) {
        v[R_RET] += ret_sum[i], v[R_EPS] += ep_count[i];
        ret_sum[i] = 0, ep_count[i] = 0;
    }
    for (int q = 0; q < R_N; q++) {
        double sum = block_sum(v[q], sh);
        if (threadIdx.x == 0) part[blockIdx.x * R_N + q] = sum;
    }
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(arrived, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last || threadIdx.x != 0) return;
    __threadfence();
    double a[R_N] = {0, 0, 0, 0, 0, 0};
    for (int blk = 0; blk < RS_BLOCKS; blk++)
        for (int q = 0; q < R_N; q++) a[q] += ((volatile double *)part)[blk * R_N + q];
    double n = (double)TN, vy = a[R_Y2] / n - (a[R_Y] / n) * (a[R_Y] / n);
    double vd = a[R_D2] / n - (a[R_D] / n) * (a[R_D] / n);
    for (int k = 0; k < S_N; k++) stats[k] = 0;
    stats[S_EV] = vy > 0 ? 1 - vd / vy : nan("");
    stats[S_RET] = a[R_RET], stats[S_EPS] = a[R_EPS];
    ctl[C_CURSOR] = 0, ctl[C_STOP] = 0;
    *arrived = 0; /* ready for the next launch */
}

/* The Philox keys of update epoch k (the CPU's u32 draws of stream PERM + iteration · epochs + k,
 * in order: draw i is word i % 4 of block i / 4) and the indices they sort. */
static __global__ void keys_kernel(size_t TN, uint64_t seed, const long long *iter, int epochs,
                                   int k, uint32_t *keys, uint32_t *idx)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= TN) return;
    uint64_t stream = VX_PPO_PERM_STREAM + (uint64_t)*iter * (uint64_t)epochs + (uint64_t)k;
    keys[i] = vx_philox_block(seed, stream, i / 4).v[i % 4];
    idx[i] = (uint32_t)i;
}

/* The minibatch at the cursor: M samples of the rollout, gathered (one thread per element of
 * the observations; the first of each row copies the rest). */
static __global__ void gather_kernel(int M, const uint32_t *perm, const int *ctl, const float *obs,
                                     const int32_t *act, const float *logp, const float *val,
                                     const float *adv, const float *ret, float *m_obs,
                                     int32_t *m_act, float *m_logp, float *m_val, float *m_adv,
                                     float *m_ret)
{
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= (size_t)M * D) return;
    size_t j = x / D, d = x % D;
    size_t q = perm[(size_t)ctl[C_CURSOR] * M + j];
    m_obs[x] = obs[q * D + d];
    if (d != 0) return;
    for (int b = 0; b < A; b++) m_act[j * A + b] = act[q * A + b];
    m_logp[j] = logp[q], m_val[j] = val[q], m_adv[j] = adv[q], m_ret[j] = ret[q];
}

/* One block a minibatch of the iteration (all update epochs'): its advantage mean and sample
 * standard deviation (as torch.std), into out + 2 · minibatch — before the updates, which only
 * read them. */
static __global__ void adv_table_kernel(int M, const uint32_t *perm, const float *adv, double *out)
{
    __shared__ double sh[RB];
    const uint32_t *q = perm + (size_t)blockIdx.x * M;
    double s = 0;
    for (int j = threadIdx.x; j < M; j += RB) s += adv[q[j]];
    double mean = block_sum(s, sh) / M, ss = 0;
    for (int j = threadIdx.x; j < M; j += RB) ss += (adv[q[j]] - mean) * (adv[q[j]] - mean);
    ss = block_sum(ss, sh);
    double *o = out + 2 * (size_t)blockIdx.x;
    if (threadIdx.x == 0) o[0] = mean, o[1] = M > 1 ? sqrt(ss / (M - 1)) : 0;
}

/* One thread per sample (blocks of RB): the loss's gradient with respect to its logits and
 * value (ppo_math.h, scaled by 1/M); each block's sums of the samples' statistics into parts
 * (P_N per block). */
static __global__ void loss_kernel(int M, vx_ppo_loss_cfg c, int norm_adv, const float *logits,
                                   const float *values, const int32_t *act, const float *logp,
                                   const float *val, const float *adv, const float *ret,
                                   const double *adv_tab, const int *ctl, float *dz, float *dv,
                                   double *parts)
{
    const double *adv_stat = adv_tab + 2 * (size_t)ctl[C_CURSOR];
    __shared__ double sh[RB];
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    double st[P_N] = {0, 0, 0, 0, 0};
    if (j < M) {
        double z[K], g[K], gv;
        for (int k = 0; k < K; k++) z[k] = logits[(size_t)j * K + k];
        double a = norm_adv ? (adv[j] - adv_stat[0]) / (adv_stat[1] + 1e-8) : adv[j];
        vx_ppo_loss_out o;
        vx_ppo_loss(&c, z, values[j], act + (size_t)j * A, logp[j], val[j], a, ret[j], 1.0 / M, g,
                    &gv, &o);
        for (int k = 0; k < K; k++) dz[(size_t)j * K + k] = (float)g[k];
        dv[j] = (float)gv;
        st[P_PG] = o.pg, st[P_V] = o.v, st[P_ENT] = o.entropy, st[P_KL] = o.approx_kl;
        st[P_CLIP] = o.clipped;
    }
    for (int p = 0; p < P_N; p++) {
        double t = block_sum(st[p], sh);
        if (threadIdx.x == 0) parts[(size_t)blockIdx.x * P_N + p] = t;
    }
}

/* The per-layer path's minibatch end (ppo_mb_end.cuh), one block of a warp a statistic. */
static __global__ void mb_end_kernel(int M, int blocks, const double *parts, const double *norm,
                                     int minibatches, double target_kl, double *stats, int *ctl)
{
    ppo_mb_end(M, blocks, parts, norm, minibatches, target_kl, stats, ctl);
}

/* One block of D threads: the observation statistics take in the rollout's raw sums (Chan et
 * al.'s merge, as the CPU's update_obs_stats); the iteration counter advances. */
static __global__ void end_kernel(double nb, int norm_obs, const double *raw_sum,
                                  const double *raw_sum2, double *mean, double *var, double *count,
                                  long long *iter)
{
    int d = threadIdx.x;
    double c = *count, tot = c + nb;
    if (norm_obs && d < D) {
        double mb = raw_sum[d] / nb, vb = raw_sum2[d] / nb - mb * mb;
        vb = vb > 0 ? vb : 0;
        double delta = mb - mean[d];
        double m2 = var[d] * c + vb * nb + delta * delta * c * nb / tot;
        mean[d] += delta * nb / tot;
        var[d] = m2 / tot;
    }
    __syncthreads();
    if (d == 0) {
        if (norm_obs) *count = tot;
        *iter += 1;
    }
}

static __global__ void set_double_kernel(double *x, double v) { *x = v; }

/* ---- the sequences the graphs hold ------------------------------------------------------------
 */

static unsigned blocks(size_t n) { return (unsigned)((n + 127) / 128); }
static unsigned loss_blocks(size_t M) { return (unsigned)((M + RB - 1) / RB); }

/* Blocks of the rollout's normalisation, each with its partial raw sums in raw_part. */
static unsigned norm_blocks(const ppo_backend *b)
{
    return b->fused ? (unsigned)ppo_fused_act_blocks((int)b->N)
                    : (unsigned)((b->N + NORM_ROWS - 1) / NORM_ROWS);
}

/* Rollout steps t..t + steps − 1 (or, with t = T, the values after the rollout) through the
 * fused kernel, in one launch. */
static vx_status fused_steps(ppo_backend *b, int t, int steps, vx_err *e)
{
    size_t N = b->N, o = (size_t)t * N;
    int last = t == (int)b->T;
    ppo_fused_act_args a;
    memset(&a, 0, sizeof a);
    a.N = (int)N, a.obs = b->obs, a.mean = b->obs_mean, a.var = b->obs_var;
    a.clip = b->s.obs_clip, a.norm = b->s.norm_obs;
    if (!last) {
        a.steps = steps, a.boot_own = b->r_boot + o;
        a.store = b->r_obs + o * D, a.part = b->raw_part;
        a.seed = b->run.seed, a.step = b->act_step;
        a.act = b->r_act + o * A, a.logp = b->r_logp + o, a.val = b->r_val + o;
        /* and the environments' step, with its episode accounting */
        a.envp = b->envp, a.states = b->env_states;
        a.next_obs = b->obs, a.fin_out = b->fin;
        a.rew = b->r_rew + o, a.te = b->r_te + o, a.tr = b->r_tr + o;
        a.ep_ret = b->ep_ret, a.ret_sum = b->ret_sum, a.ep_count = b->ep_count;
    } else {
        a.values = b->last_val;
    }
    if (t > 0) { /* the bootstrap of the step before, from its truncated rows' pre-reset values */
        a.fin = b->fin, a.fin_flag = b->r_tr + o - N, a.boot = b->r_boot + o - N;
    }
    return ppo_fused_act(b->fused, &a, b->st, e);
}

/* Rollout step t through the per-layer path: normalise, forward, sample. */
static vx_status layered_step(ppo_backend *b, int t, vx_err *e)
{
    vx_status st = VX_OK;
    int N = (int)b->N;
    size_t o = (size_t)t * N;
    cudaStream_t s = b->st;
    norm_kernel<<<norm_blocks(b), RB, 0, s>>>(N, b->obs, b->fin, b->obs_mean, b->obs_var,
                                              b->s.obs_clip, b->s.norm_obs, b->x, b->r_obs + o * D,
                                              b->raw_part);
    VX_CUDA_LAUNCH_CHECK(s);
    st = ac_cuda_forward(b->net_act, b->params, b->x, N, t ? 2 * N : N, s, e);
    if (st) goto fail;
    sample_kernel<<<blocks(N), 128, 0, s>>>(
        N, t, ac_cuda_logits(b->net_act), ac_cuda_values(b->net_act), b->run.seed, b->act_step,
        b->r_act, b->r_logp, b->r_val, t ? b->r_boot + o - N : NULL, t ? b->r_tr + o - N : NULL);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

static vx_status rollout_body(ppo_backend *b, vx_err *e)
{
    vx_status st = VX_OK;
    int N = (int)b->N, T = (int)b->T;
    cudaStream_t s = b->st;
    unsigned nb = norm_blocks(b);
    const float *values = NULL, *fin_values = NULL;               /* after the rollout */
    if (b->fused) st = ppo_fused_pack(b->fused, b->params, s, e); /* the weights as loaded */
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemsetAsync(b->raw_part, 0, nb * 2 * D * 8, s));
    if (b->fused) { /* one launch: every step's acting, environments' step and accounting */
        st = fused_steps(b, 0, T, e);
        if (st) goto fail;
    } else { /* a step at a time: acting, the environments' step, the accounting */
        for (int t = 0; t < T; t++) {
            size_t o = (size_t)t * N;
            st = layered_step(b, t, e);
            if (!st)
                st = vx_env_step(b->env, b->r_act + o * A, b->obs, b->r_rew + o, b->r_te + o,
                                 b->r_tr + o, b->fin, s, e);
            if (st) goto fail;
            episode_kernel<<<blocks(N), 128, 0, s>>>(N, b->r_rew + o, b->r_te + o, b->r_tr + o,
                                                     b->ep_ret, b->ret_sum, b->ep_count,
                                                     b->act_step);
            VX_CUDA_LAUNCH_CHECK(s);
        }
    }
    raw_sums_kernel<<<1, 64, 0, s>>>((int)nb, b->raw_part, b->raw_sum, b->raw_sum2);
    VX_CUDA_LAUNCH_CHECK(s);
    /* the values after the rollout: the last observations and the last step's pre-reset ones */
    if (b->fused) {
        st = fused_steps(b, T, 1, e);
        values = b->last_val;
    } else {
        norm_kernel<<<nb, RB, 0, s>>>(N, b->obs, b->fin, b->obs_mean, b->obs_var, b->s.obs_clip,
                                      b->s.norm_obs, b->x, NULL, NULL);
        VX_CUDA_LAUNCH_CHECK(s);
        st = ac_cuda_forward(b->net_act, b->params, b->x, 0, 2 * N, s, e);
        values = ac_cuda_values(b->net_act), fin_values = values + N;
    }
    if (st) goto fail;
    gae_kernel<<<blocks(N), 128, 0, s>>>(N, T, values, fin_values, b->r_rew, b->r_te, b->r_tr,
                                         b->r_val, b->r_boot, b->s.gamma, b->s.gae_lambda, b->r_adv,
                                         b->r_ret);
    VX_CUDA_LAUNCH_CHECK(s);
    rollout_stats_kernel<<<RS_BLOCKS, RB, 0, s>>>(b->TN, N, b->r_ret, b->r_val, b->ret_sum,
                                                  b->ep_count, b->stats, b->ctl, b->rs_part,
                                                  b->rs_arrived);
    VX_CUDA_LAUNCH_CHECK(s);
    for (int k = 0; k < b->s.update_epochs; k++) {
        keys_kernel<<<blocks(b->TN), 128, 0, s>>>(b->TN, b->run.seed, b->iter, b->s.update_epochs,
                                                  k, b->keys_in, b->idx_in);
        VX_CUDA_LAUNCH_CHECK(s);
        size_t tmp = b->cub_tmp_n;
        VX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b->cub_tmp, tmp, b->keys_in, b->keys_out,
                                                      b->idx_in, b->perm + (size_t)k * b->TN,
                                                      (int)b->TN, 0, 32, s));
    }
    /* every minibatch's advantage statistics, for the updates to read at their cursor */
    adv_table_kernel<<<(unsigned)(b->s.update_epochs * b->s.minibatches), RB, 0, s>>>(
        (int)b->M, b->perm, b->r_adv, b->adv_tab);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

/* A minibatch through the fused kernels: its gradient, the optimizer's step, the minibatch's
 * end. */
static vx_status fused_minibatch(ppo_backend *b, vx_err *e)
{
    ppo_fused_grad_args a;
    memset(&a, 0, sizeof a);
    a.M = (int)b->M, a.perm = b->perm, a.cursor = b->ctl + C_CURSOR;
    a.obs = b->r_obs, a.act = b->r_act, a.logp = b->r_logp, a.val = b->r_val, a.adv = b->r_adv;
    a.ret = b->r_ret, a.adv_stat = b->adv_tab;
    a.lc = (vx_ppo_loss_cfg){b->s.clip, b->s.clip_value, b->s.vf_coef, b->s.ent_coef};
    a.norm_adv = b->s.norm_adv, a.parts = b->mb_parts;
    ppo_fused_end end = {a.M,
                         ppo_fused_grad_blocks(b->fused, a.M),
                         b->s.minibatches,
                         b->mb_parts,
                         b->s.target_kl,
                         b->stats,
                         b->ctl};
    return ppo_fused_grad(b->fused, &a, b->grads, b->params, &b->ov, &end, b->st, e);
}

/* A minibatch's gradient through the per-layer path: gather, forward, loss, backward. */
static vx_status layered_grad(ppo_backend *b, int *parts_n, vx_err *e)
{
    vx_status st = VX_OK;
    int M = (int)b->M;
    cudaStream_t s = b->st;
    gather_kernel<<<blocks(b->M * D), 128, 0, s>>>(
        M, b->perm, b->ctl, b->r_obs, b->r_act, b->r_logp, b->r_val, b->r_adv, b->r_ret, b->mb_obs,
        b->mb_act, b->mb_logp, b->mb_val, b->mb_adv, b->mb_ret);
    VX_CUDA_LAUNCH_CHECK(s);
    st = ac_cuda_forward(b->net_mb, b->params, b->mb_obs, M, M, s, e);
    if (st) goto fail;
    {
        vx_ppo_loss_cfg lc = {b->s.clip, b->s.clip_value, b->s.vf_coef, b->s.ent_coef};
        loss_kernel<<<loss_blocks(b->M), RB, 0, s>>>(
            M, lc, b->s.norm_adv, ac_cuda_logits(b->net_mb), ac_cuda_values(b->net_mb), b->mb_act,
            b->mb_logp, b->mb_val, b->mb_adv, b->mb_ret, b->adv_tab, b->ctl, b->mb_dz, b->mb_dv,
            b->mb_parts);
        VX_CUDA_LAUNCH_CHECK(s);
    }
    *parts_n = (int)loss_blocks(b->M);
    st = ac_cuda_backward(b->net_mb, b->params, b->mb_obs, M, b->mb_dz, b->mb_dv, b->grads, s, e);
fail:
    return st;
}

static vx_status minibatch_body(ppo_backend *b, vx_err *e)
{
    vx_status st = VX_OK;
    int parts_n = 0;
    cudaStream_t s = b->st;
    /* the fused kernels take the norm in the gradient's sum and do the optimizer's step
     * themselves, writing their copies of the weights as they go, and end the minibatch in
     * block 0 of the second launch, past its barrier (ppo_fused.h) */
    if (b->fused) return fused_minibatch(b, e);
    st = layered_grad(b, &parts_n, e);
    if (!st) st = vx_optim_step(b->opt, b->params, b->grads, s, e);
    if (st) goto fail;
    mb_end_kernel<<<1, 32 * P_N, 0, s>>>((int)b->M, parts_n, b->mb_parts, vx_optim_norm(b->opt),
                                         b->s.minibatches, b->s.target_kl, b->stats, b->ctl);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

typedef vx_status (*body_fn)(ppo_backend *b, vx_err *e);

/* A body's graph, captured and instantiated unless it is already; nothing runs. */
static vx_status build_body(ppo_backend *b, body_fn body, cudaGraph_t *g, cudaGraphExec_t *x,
                            vx_err *e)
{
    vx_status st = VX_OK;
    if (!*x) {
        VX_CUDA_CHECK(cudaStreamBeginCapture(b->st, cudaStreamCaptureModeThreadLocal));
        st = body(b, e);
        cudaError_t rc = cudaStreamEndCapture(b->st, g);
        if (st) goto fail;
        VX_CUDA_CHECK(rc);
        VX_CUDA_CHECK(cudaGraphInstantiate(x, *g, 0));
    }
fail:
    if (!*x && *g) { /* a failed capture leaves nothing behind for the next try */
        cudaGraphDestroy(*g);
        *g = NULL;
    }
    return st;
}

/* Runs a body: kernel by kernel and synchronised (eager), or as its graph (built at creation, or
 * here if that failed). */
static vx_status run_body(ppo_backend *b, body_fn body, cudaGraph_t *g, cudaGraphExec_t *x,
                          vx_err *e)
{
    vx_status st = VX_OK;
    if (b->eager) {
        st = body(b, e);
        if (!st) VX_CUDA_CHECK(cudaStreamSynchronize(b->st));
        return st;
    }
    st = build_body(b, body, g, x, e);
    if (!st) st = vx_cuda_graph_launch(b->dev, *x, b->st, e);
fail:
    return st;
}

/* ---- the backend ------------------------------------------------------------------------------
 */

static void cuda_free(ppo_backend *b)
{
    if (!b) return;
    if (b->st) cudaStreamSynchronize(b->st);
    if (b->x_roll) cudaGraphExecDestroy(b->x_roll);
    if (b->x_mb) cudaGraphExecDestroy(b->x_mb);
    if (b->g_roll) cudaGraphDestroy(b->g_roll);
    if (b->g_mb) cudaGraphDestroy(b->g_mb);
    cudaEvent_t ev[] = {b->c0, b->c1, b->l1};
    for (int i = 0; i < 3; i++) vx_cuda_event_destroy(b->dev, ev[i], 1);
    ppo_fused_free(b->fused);
    ac_cuda_free(b->net_act);
    ac_cuda_free(b->net_mb);
    vx_optim_free(b->opt);
    vx_cuda_stream_destroy(b->dev, b->st);
    vx_mem_release(&b->mem);
    free(b);
}

static vx_status alloc_all(ppo_backend *b, vx_err *e)
{
    vx_mem *m = &b->mem;
    size_t N = b->N, TN = b->TN, M = b->M, np = b->np, E = (size_t)b->s.update_epochs;
    ppo_state *h = &b->host;
    struct {
        void *ptr; /* where the device pointer goes */
        size_t bytes;
    } dev[] = {
        {&b->params, np * 4},
        {&b->grads, np * 4},
        {&b->obs_mean, D * 8},
        {&b->obs_var, D * 8},
        {&b->obs_count, 8},
        {&b->raw_sum, D * 8},
        {&b->raw_sum2, D * 8},
        {&b->raw_part, (N / 16 + 1) * 2 * D * 8}, /* blocks of 16 rows or more */
        {&b->obs, N * D * 4},
        {&b->x, 2 * N * D * 4},
        {&b->fin, N * D * 4},
        {&b->r_obs, TN * D * 4},
        {&b->r_logp, TN * 4},
        {&b->r_val, TN * 4},
        {&b->r_rew, TN * 4},
        {&b->r_boot, TN * 4},
        {&b->r_adv, TN * 4},
        {&b->r_ret, TN * 4},
        {&b->last_val, N * 4},
        {&b->r_act, TN * A * 4},
        {&b->r_te, TN},
        {&b->r_tr, TN},
        {&b->ep_ret, N * 8},
        {&b->ret_sum, N * 8},
        {&b->ep_count, N * 8},
        {&b->act_step, 8},
        {&b->iter, 8},
        {&b->keys_in, TN * 4},
        {&b->keys_out, TN * 4},
        {&b->idx_in, TN * 4},
        {&b->perm, E * TN * 4},
        {&b->mb_obs, M * D * 4},
        {&b->mb_logp, M * 4},
        {&b->mb_val, M * 4},
        {&b->mb_adv, M * 4},
        {&b->mb_ret, M * 4},
        {&b->mb_dz, M * K * 4},
        {&b->mb_dv, M * 4},
        {&b->mb_act, M * A * 4},
        {&b->mb_parts, P_N * (M / 16 + 1) * 8}, /* blocks of 16 samples or more */
        {&b->adv_tab, 2 * E * (size_t)b->s.minibatches * 8},
        {&b->stats, S_N * 8},
        {&b->lr, 8},
        {&b->ctl, C_N * 4},
        {&b->rs_part, RS_BLOCKS * R_N * 8},
        {&b->rs_arrived, 8},
    };
    vx_status st = VX_OK;
    for (size_t i = 0; i < sizeof dev / sizeof *dev && !st; i++)
        st = vx_mem_alloc(m, dev[i].bytes, dev[i].ptr, e);
    if (!st) st = vx_mem_alloc_host(m, np * 4, &h->params, e);
    if (!st) st = vx_mem_alloc_host(m, np * 4, &h->adam_m, e);
    if (!st) st = vx_mem_alloc_host(m, np * 4, &h->adam_v, e);
    if (!st) st = vx_mem_alloc_host(m, D * 8, &h->obs_mean, e);
    if (!st) st = vx_mem_alloc_host(m, D * 8, &h->obs_var, e);
    if (!st) st = vx_mem_alloc_host(m, N * sizeof(vx_env_state), &h->env, e);
    if (!st) st = vx_mem_alloc_host(m, N * D * 4, &h->obs, e);
    if (!st) st = vx_mem_alloc_host(m, N * 8, &h->ep_ret, e);
    if (!st) st = vx_mem_alloc_host(m, S_N * 8, &b->stats_host, e);
    if (!st) st = vx_mem_alloc_host(m, 8, &b->adam_t_host, e);
    if (st) return st;
    b->cub_tmp_n = 0;
    if (cub::DeviceRadixSort::SortPairs(NULL, b->cub_tmp_n, b->keys_in, b->keys_out, b->idx_in,
                                        b->perm, (int)TN, 0, 32) != cudaSuccess)
        return vx_err_set(e, VX_ERR_CUDA, "ppo: the shuffle's sort cannot be sized");
    return vx_mem_alloc(m, b->cub_tmp_n, &b->cub_tmp, e);
}

/* The host state buffer's content into the device (synchronous): the weights, the moments, the
 * statistics, the environments, the observations, the counters. */
static vx_status upload_state(ppo_backend *b, vx_err *e)
{
    const ppo_state *h = &b->host;
    cudaStream_t s = b->st;
    size_t np = b->np, N = b->N;
    unsigned long long step = h->act_step;
    long long it = h->iterations;
    vx_status st = VX_OK;
    *b->adam_t_host = h->adam_t;
    VX_CUDA_CHECK(cudaMemcpyAsync(b->params, h->params, np * 4, cudaMemcpyHostToDevice, s));
    st = vx_optim_load_state(b->opt, h->adam_m, h->adam_v, b->adam_t_host, s, e);
    if (!st) st = vx_env_load_states(b->env, h->env, s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpyAsync(b->obs_mean, h->obs_mean, D * 8, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(b->obs_var, h->obs_var, D * 8, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(b->obs, h->obs, N * D * 4, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(b->ep_ret, h->ep_ret, N * 8, cudaMemcpyHostToDevice, s));
    set_double_kernel<<<1, 1, 0, s>>>(b->obs_count, h->obs_count);
    VX_CUDA_LAUNCH_CHECK(s);
    VX_CUDA_CHECK(cudaMemcpyAsync(b->act_step, &step, 8, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(b->iter, &it, 8, cudaMemcpyHostToDevice, s));
    VX_CUDA_CHECK(cudaStreamSynchronize(s)); /* the two counters above are stack memory */
    b->act_step_h = h->act_step, b->iter_h = h->iterations, b->updates_h = h->updates;
    b->obs_count_h = h->obs_count;
fail:
    return st;
}

/* cuBLASLt workspace for GEMMs over `rows` rows: the weight gradients reduce over the rows, and
 * split-K kernels need room for their partial sums (8 KB a row, 4 to 32 MB, as the DQN's). */
static size_t workspace(size_t rows)
{
    size_t w = rows * 8192, lo = (size_t)4 << 20, hi = (size_t)32 << 20;
    return w < lo ? lo : w > hi ? hi : w;
}

static vx_status cuda_create(const ppo_init *in, ppo_backend **out, ppo_state **state, vx_err *e)
{
    *out = NULL;
    vx_status st = vx_cuda_enter(in->dev, e);
    if (st) return st;
    ppo_backend *b = (ppo_backend *)calloc(1, sizeof *b);
    if (!b) return vx_err_set(e, VX_ERR_NOMEM, "ppo: out of memory");
    b->s = *in->s, b->run = *in->run, b->L = *in->L, b->dev = in->dev, b->env = in->env;
    b->eager = !b->run.gpu_graphs;
    b->N = vx_env_count(in->env), b->T = (size_t)b->run.steps_per_epoch;
    b->TN = b->N * b->T, b->M = b->TN / (size_t)b->s.minibatches, b->np = b->L.n_params;
    if (b->TN > INT_MAX) { /* CUB's sort counts its items in an int */
        size_t tn = b->TN;
        free(b);
        return vx_err_set(e, VX_ERR_ARG,
                          "ppo: a rollout of %zu steps (train.envs × train.steps_per_epoch); the "
                          "GPU's shuffles take at most %d",
                          tn, INT_MAX);
    }
    vx_mem_init(&b->mem, in->dev, "ppo");
    ppo_state *h = &b->host;
    st = vx_cuda_stream_create(in->dev, &b->st, e);
    if (!st) st = alloc_all(b, e);
    if (st) goto fail;
    /* the fused kernels where they take the network (and are asked for), else one GEMM a layer */
    {
        int optin = 0;
        VX_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                             vx_device_index(in->dev)));
        if (!b->s.fused) snprintf(b->per_layer_why, sizeof b->per_layer_why, "ppo.fused = 0");
        else if (ppo_fused_fits(&b->L, (size_t)optin, b->per_layer_why, sizeof b->per_layer_why))
            st = ppo_fused_create(&b->L, (int)b->M, b->s.tf32, in->dev, &b->fused, e);
    }
    if (!st && !b->fused)
        st = ac_cuda_create(&b->L, (int)(2 * b->N), workspace(2 * b->N), in->dev, &b->net_act, e);
    if (!st && !b->fused)
        st = ac_cuda_create(&b->L, (int)b->M, workspace(b->M), in->dev, &b->net_mb, e);
    if (!st) st = vx_optim_create(&b->s.adam, b->s.max_grad_norm, b->np, in->dev, &b->opt, e);
    if (st) goto fail;
    if (!b->fused) {
        ac_cuda_set_tf32(b->net_act, b->s.tf32);
        ac_cuda_set_tf32(b->net_mb, b->s.tf32);
    }
    vx_optim_set_controls(b->opt, b->lr, b->ctl + C_STOP);
    if (b->fused) st = vx_optim_view_of(b->opt, &b->ov, e); /* the controls just set included */
    if (!st && b->fused) st = vx_env_device_view(b->env, b->st, &b->envp, &b->env_states, e);
    if (!st) st = vx_cuda_event_create(b->dev, &b->c0, 1, e);
    if (!st) st = vx_cuda_event_create(b->dev, &b->c1, 1, e);
    if (!st) st = vx_cuda_event_create(b->dev, &b->l1, 1, e);
    if (st) goto fail;
    /* the starting state, as the CPU backend's: the initial weights, zero moments, statistics
     * mean 0 and variance 1 over a count of 1e-4, the environments as they are */
    memcpy(h->params, in->init_params, b->np * 4);
    memset(h->adam_m, 0, b->np * 4), memset(h->adam_v, 0, b->np * 4);
    for (int d = 0; d < D; d++) h->obs_mean[d] = 0, h->obs_var[d] = 1;
    h->obs_count = 1e-4;
    memset(h->ep_ret, 0, b->N * 8);
    st = vx_env_get_states(b->env, h->env, e);
    if (!st) st = vx_env_observe(b->env, b->obs, b->st, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpyAsync(h->obs, b->obs, b->N * D * 4, cudaMemcpyDeviceToHost, b->st));
    VX_CUDA_CHECK(cudaMemsetAsync(b->grads, 0, b->np * 4, b->st)); /* the padding stays 0 */
    VX_CUDA_CHECK(cudaMemsetAsync(b->fin, 0, b->N * D * 4, b->st));
    VX_CUDA_CHECK(cudaMemsetAsync(b->r_boot, 0, b->TN * 4, b->st));
    VX_CUDA_CHECK(cudaMemsetAsync(b->ret_sum, 0, b->N * 8, b->st));
    VX_CUDA_CHECK(cudaMemsetAsync(b->ep_count, 0, b->N * 8, b->st));
    VX_CUDA_CHECK(cudaMemsetAsync(b->ctl, 0, C_N * 4, b->st));
    VX_CUDA_CHECK(cudaMemsetAsync(b->rs_arrived, 0, 8, b->st));
    VX_CUDA_CHECK(cudaStreamSynchronize(b->st));
    st = upload_state(b, e);
    /* the graphs now, before the trials sharing the GPU start working (vx_device_ready) */
    if (!st && !b->eager) st = build_body(b, rollout_body, &b->g_roll, &b->x_roll, e);
    if (!st && !b->eager) st = build_body(b, minibatch_body, &b->g_mb, &b->x_mb, e);
    if (st) goto fail;
    *out = b;
    *state = h;
    return VX_OK;
fail:
    cuda_free(b);
    return st;
}

static void cuda_describe(const ppo_backend *b, char *buf, size_t n)
{
    char how[160];
    if (b->fused) snprintf(how, sizeof how, "fused kernels, %s", b->s.tf32 ? "TF32" : "3xTF32");
    else
        snprintf(how, sizeof how, "a GEMM a layer (%s)%s", b->per_layer_why,
                 b->s.tf32 ? ", TF32" : "");
    snprintf(buf, n, "on the GPU (minibatch %zu, %s, %s)", b->M,
             b->eager ? "kernel by kernel" : "CUDA graphs", how);
}

static vx_status cuda_iteration(ppo_backend *b, const ppo_plan *p, ppo_result *r, vx_err *e)
{
    memset(r, 0, sizeof *r);
    vx_status st = vx_cuda_enter(b->dev, e);
    if (st) return st;
    cudaStream_t s = b->st;
    int updates = b->s.update_epochs * b->s.minibatches;
    set_double_kernel<<<1, 1, 0, s>>>(b->lr, p->lr); /* the value travels as an argument */
    VX_CUDA_LAUNCH_CHECK(s);
    VX_CUDA_CHECK(cudaEventRecord(b->c0, s));
    st = run_body(b, rollout_body, &b->g_roll, &b->x_roll, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaEventRecord(b->c1, s));
    for (int k = 0; k < updates && !st; k++)
        st = run_body(b, minibatch_body, &b->g_mb, &b->x_mb, e);
    if (st) goto fail;
    end_kernel<<<1, 64, 0, s>>>((double)b->TN, b->s.norm_obs, b->raw_sum, b->raw_sum2, b->obs_mean,
                                b->obs_var, b->obs_count, b->iter);
    VX_CUDA_LAUNCH_CHECK(s);
    VX_CUDA_CHECK(cudaMemcpyAsync(b->stats_host, b->stats, S_N * 8, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaEventRecord(b->l1, s));
    VX_CUDA_CHECK(cudaEventSynchronize(b->l1)); /* the iteration's one wait */
    {
        const double *x = b->stats_host;
        double n = x[S_UPDATES] > 0 ? x[S_UPDATES] : 1;
        float ms = 0;
        r->updates = (int)x[S_UPDATES];
        r->pg_loss = x[S_PG] / n, r->v_loss = x[S_V] / n, r->entropy = x[S_ENT] / n;
        r->approx_kl = x[S_KL] / n, r->clipfrac = x[S_CLIP] / n, r->grad_norm = x[S_NORM] / n;
        r->explained_var = x[S_EV];
        r->return_sum = x[S_RET], r->episodes = x[S_EPS];
        r->env_steps = (int64_t)b->TN;
        VX_CUDA_CHECK(cudaEventElapsedTime(&ms, b->c0, b->c1));
        r->collect_s = ms / 1e3;
        VX_CUDA_CHECK(cudaEventElapsedTime(&ms, b->c1, b->l1));
        r->learn_s = ms / 1e3;
    }
    b->act_step_h += b->T;
    b->iter_h++;
    b->updates_h += r->updates;
    if (b->s.norm_obs) b->obs_count_h += (double)b->TN;
    b->host.updates = b->updates_h, b->host.iterations = b->iter_h;
fail:
    return st;
}

static vx_status cuda_weights(ppo_backend *b, float *params, double *mean, double *var, vx_err *e)
{
    vx_status st = vx_cuda_enter(b->dev, e);
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(params, b->params, b->np * 4, cudaMemcpyDeviceToHost, b->st));
    VX_CUDA_CHECK(cudaMemcpyAsync(mean, b->obs_mean, D * 8, cudaMemcpyDeviceToHost, b->st));
    VX_CUDA_CHECK(cudaMemcpyAsync(var, b->obs_var, D * 8, cudaMemcpyDeviceToHost, b->st));
    VX_CUDA_CHECK(cudaStreamSynchronize(b->st));
fail:
    return st;
}

static vx_status cuda_save(ppo_backend *b, vx_err *e)
{
    ppo_state *h = &b->host;
    cudaStream_t s = b->st;
    vx_status st = vx_cuda_enter(b->dev, e);
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(h->params, b->params, b->np * 4, cudaMemcpyDeviceToHost, s));
    st = vx_optim_copy_state(b->opt, h->adam_m, h->adam_v, b->adam_t_host, s, e);
    if (!st) st = vx_env_copy_states(b->env, h->env, s, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpyAsync(h->obs_mean, b->obs_mean, D * 8, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(h->obs_var, b->obs_var, D * 8, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(h->obs, b->obs, b->N * D * 4, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaMemcpyAsync(h->ep_ret, b->ep_ret, b->N * 8, cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaStreamSynchronize(s));
    h->adam_t = *b->adam_t_host;
    h->obs_count = b->obs_count_h;
    h->act_step = b->act_step_h;
    h->iterations = b->iter_h;
    h->updates = b->updates_h;
fail:
    return st;
}

static vx_status cuda_restore(ppo_backend *b, vx_err *e)
{
    vx_status st = vx_cuda_enter(b->dev, e);
    return st ? st : upload_state(b, e);
}

static size_t cuda_reserved(const ppo_backend *b)
{
    if (b->fused) return b->mem.bytes + ppo_fused_reserved(b->fused) + vx_optim_reserved(b->opt);
    return b->mem.bytes + ac_cuda_reserved(b->net_act) + ac_cuda_reserved(b->net_mb) +
           vx_optim_reserved(b->opt);
}

extern "C" const ppo_backend_ops vx_ppo_backend_cuda = {
    "cuda",       cuda_create, cuda_free,    cuda_describe, cuda_iteration,
    cuda_weights, cuda_save,   cuda_restore, cuda_reserved,
};

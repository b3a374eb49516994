/* ppo_fused.cu — PPO's fused kernels (ppo_fused.h): a rollout's normalisation, forward pass,
 * sampling and environment step, step after step, in one launch (act_kernel); a minibatch's
 * gather, forward pass, loss and backward pass in another (grad_kernel), then, in one cooperative
 * launch, the fixed-order sum of its blocks' gradients, the norm and the optimizer's step, which
 * also writes the kernels' copies of the weights and ends the minibatch (sum_step_kernel).
 *
 * Compiled with --fmad=false (CMakeLists.txt), as the environments' own kernel is: the rollout
 * step runs vx_env_step_one, whose results must match the CPU's bit for bit; the products are
 * tensor-core instructions, which the flag does not touch.
 *
 * The network, its passes over a block's rows in shared memory and the second launch are
 * fused_net.cuh's, which the DQN's fused update shares. */
#include "../nn/fused_net.cuh"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "../util/pdl.cuh"
#include "ppo_backend.h"
#include "ppo_fused.h"
#include "ppo_fused_plan.h"
#include "ppo_lanes.cuh"
#include "ppo_mb_end.cuh"
#include "vixen/optim_math.h"

#include <cooperative_groups.h>
#include <type_traits>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using namespace fused;

#define ACT_ROWS VX_PF_ACT_ROWS
#define MAX_IN VX_PF_MAX_IN
#define N_STATS 5 /* the loss's statistics summed per block: pg, v, entropy, KL, clipped */

/* The minibatch's end (ppo_mb_end.cuh), for sum_step_kernel's block 0. */
struct mb_end {
    ppo_fused_end e;
    __device__ void operator()(const vx_optim_view &o) const
    {
        ppo_mb_end(e.M, e.blocks, e.parts, o.norm, e.minibatches, e.target_kl, e.stats, e.ctl);
    }
};

/* What the kernels below take for granted of the two overridable sizes. */
static_assert(ACT_ROWS % 16 == 0 && 2 * ACT_ROWS <= 64 && ACT_ROWS * MAX_IN <= WARPS * 256,
              "whole tiles of rows; raw rows staged in the warps' staging");
static_assert(ACT_ROWS <= 2 * WARPS, "a rollout step's samples in one pass of the lanes");
static_assert(WARPS >= N_STATS && N_STATS * 64 <= THREADS,
              "a warp a statistic; each row's statistics (64 rows) in the block sums' doubles");

struct ppo_fused {
    vx_ac_layout L;
    vx_device *dev;
    vx_mem mem;
    int rows; /* the update's rows a block */
    copies c; /* the weights' copies, the slices (fused_net.cuh) */
};

/* ---- the rows ---------------------------------------------------------------------------- */

/* Rows row0.. of x (N × in) into s.xs from its row `to`, normalised; with `raw`, the raw values
 * too (R × in). The caller synchronises before reading them. */
static __device__ void load_rows(const net &t, int R, int row0, int N, const float *x,
                                 const ppo_fused_act_args &a, smem &s, int to, float *store,
                                 float *raw)
{
    each(R, t.Dp, [&](int r, int d) {
        int i = row0 + r;
        float z = 0;
        if (i < N && d < t.in) {
            float o = x[(size_t)i * t.in + d];
            z = vx_ppo_norm_obs(o, s.red[d], s.red[MAX_IN + d], a.clip, a.norm);
            if (store) store[(size_t)i * t.in + d] = z;
            if (raw) raw[r * t.in + d] = o;
        }
        s.xs[(to + r) * s.ldx + d] = z;
    });
}

/* ---- kernels ------------------------------------------------------------------------------- */

/* ACT_ROWS rows a block, for each of the launch's steps: normalise (and store, and add the raw
 * column sums to the block's own partial sums, rows in order: the same bits every run), the
 * forward pass, the sample of each row with the CPU's draws, its value, the environment's step.
 * When a row's episode was truncated at the step before, its bootstrap needs the value of its
 * pre-reset observation: a block that has such a row puts its rows' pre-reset observations below
 * the current ones (rows R..2R) and runs one forward pass over both — more rows, but no second
 * pass to wait for.
 *
 * A rollout's steps need nothing of another block's rows (the statistics are frozen for the
 * rollout, the weights too, and a row's draws depend on its index and the step alone), so a block
 * runs all of them in turn: one launch a rollout instead of one a step, and no block waits at a
 * step's end for the slowest. Step k's arrays are the first step's, k · N rows further on; its
 * bootstrap reads step k − 1's flags and pre-reset rows, written by this block's own threads
 * (the barrier at the top of the loop makes them visible to the others). */
template <int P>
static __global__ void __launch_bounds__(THREADS)
    act_kernel(net t, const float *wp, const float *wf, ppo_fused_act_args a, unsigned *arrived)
{
    extern __shared__ __align__(128) float base[];
    vx_pdl_wait();
    const int R = ACT_ROWS;
    smem s = carve(t, 2 * R, base);
    int row0 = blockIdx.x * R, r = threadIdx.x, i = row0 + r;
    int steps = a.steps > 1 ? a.steps : 1;
    /* the acting counter at the launch (the last block moves it on, once every block has read it
     * here) */
    unsigned long long step0 = a.act ? *a.step : 0;
    for (int k = 0; k < steps; k++) {
        size_t o = (size_t)k * a.N; /* step k's rows in the per-step arrays */
        const uint8_t *fin_flag = k ? a.tr + o - a.N : a.fin_flag;
        float *boot = !k ? a.boot : a.boot_own ? a.boot_own + o - a.N : NULL;
        const float *fin_rows = k ? a.fin_out : a.fin;
        __syncthreads(); /* step k − 1's rows written, its reads of shared memory done */
        int flag = boot && r < R && i < a.N && fin_flag[i];
        for (int d = threadIdx.x; d < t.in && a.norm; d += THREADS)
            s.red[d] = a.mean[d], s.red[MAX_IN + d] = a.var[d];
        int fin = __syncthreads_or(flag);     /* the whole block, or none of it */
        float *raw = a.part ? s.stage : NULL; /* the stage is free until the forward pass */
        load_rows(t, R, row0, a.N, a.obs, a, s, 0, a.store ? a.store + o * t.in : NULL, raw);
        if (fin) load_rows(t, R, row0, a.N, fin_rows, a, s, R, NULL, NULL);
        __syncthreads();
        if (raw && threadIdx.x < t.in) {
            int d = threadIdx.x, rows = a.N - row0 < R ? a.N - row0 : R;
            double sum = 0, sum2 = 0;
            for (int q = 0; q < rows; q++) {
                double v = raw[q * t.in + d];
                sum += v, sum2 += v * v;
            }
            double *p = a.part + (size_t)blockIdx.x * 2 * t.in;
            p[d] += sum, p[t.in + d] += sum2;
        }
        __syncthreads();
        forward<P>(t, wp, wf, fin ? 2 * R : R, s);
        int32_t *act = a.act ? a.act + o * VX_ACTION_BRANCHES : NULL;
        if (act) { /* each row's sample (ppo_lanes.cuh: 16 lanes a row, two rows a warp) */
            int warp = threadIdx.x >> 5, q = threadIdx.x % PPO_LANES;
            if (2 * warp < R) { /* the whole warp (R is even) */
                int rr = 2 * warp + (threadIdx.x & 31) / PPO_LANES, ii = row0 + rr;
                int live = ii < a.N;
                double z = live ? s.out[rr * OUT_LD + q] : 0.0;
                int32_t ac[VX_ACTION_BRANCHES];
                double lp = lanes_sample(z, a.seed, (uint64_t)(live ? ii : 0), step0 + k, ac);
                if (live && q == 0) {
                    for (int b = 0; b < VX_ACTION_BRANCHES; b++)
                        act[(size_t)ii * VX_ACTION_BRANCHES + b] = ac[b];
                    a.logp[o + ii] = (float)lp;
                }
            }
            __syncthreads(); /* the actions, for the environment's step below */
        }
        if (r < R && i < a.N) {
            const float *out = s.out + r * OUT_LD;
            if (act) a.val[o + i] = out[VX_PPO_LOGITS];
            if (a.logits)
                for (int q = 0; q < VX_PPO_LOGITS; q++)
                    a.logits[(size_t)i * VX_PPO_LOGITS + q] = out[q];
            if (a.values) a.values[i] = out[VX_PPO_LOGITS];
            if (boot) boot[i] = flag ? s.out[(R + r) * OUT_LD + VX_PPO_LOGITS] : 0.0f;
            if (act && a.states) { /* the environment's step, in the same launch
                                    * (next_obs, fin_out and rew given with states: ppo_fused.h) */
                const int32_t *ac = act + (size_t)i * VX_ACTION_BRANCHES;
                vx_env_state st = a.states[i];
                float rew;
                uint8_t te, tr;
                vx_env_step_one(&a.envp, &st, (uint64_t)i, ac[0], ac[1], ac[2],
                                a.next_obs + (size_t)i * VX_OBS_DIM, &rew, &te, &tr,
                                a.fin_out + (size_t)i * VX_OBS_DIM);
                a.states[i] = st;
                a.rew[o + i] = rew, a.te[o + i] = te, a.tr[o + i] = tr;
                double ep = a.ep_ret[i] + rew;
                if (te || tr) {
                    a.ret_sum[i] += ep;
                    a.ep_count[i] += 1;
                    ep = 0;
                }
                a.ep_ret[i] = ep;
            }
        }
    }
    if (a.act && a.states) { /* the acting counter, once every block has read it */
        /* the flag in s.red (free since the normalisation): static shared memory would push
         * the kernel past the dynamic size allow_smem grants */
        volatile int *last = (volatile int *)s.red;
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            *last = atomicAdd(arrived, 1u) == gridDim.x - 1;
        }
        __syncthreads();
        if (*last && threadIdx.x == 0) {
            __threadfence();
            *a.step += steps;
            *arrived = 0; /* ready for the next launch */
        }
    }
}

/* A block's gradient slice: bf16 in TF32 (P = 1), float32 in 3×TF32 (float32's accuracy). The
 * sum reads every block's slice of the whole network for each minibatch (128 slices of 77 K
 * floats); in bf16 it reads half the bytes, 0.8 ms of a 14.4 ms TF32 iteration on an H100. The
 * products and the sum stay float32; a slice is rounded to 8 bits once, as it is stored, which
 * moved the TF32 gradient's distance from the CPU's from 6.6e-3 to 6.8e-3 (TF32's own products
 * are most of it), and PPO's learning test passes with it (docs/evaluation.md). */
template <int P> using slice_t = typename std::conditional<P == 1, __nv_bfloat16, float>::type;

/* R rows of a minibatch a block: gather them, the forward pass, each row's loss and its
 * gradient with respect to the heads (or the given one), the statistics' block sums, the
 * backward pass into the block's slice of `partial`. */
template <int P>
static __global__ void __launch_bounds__(THREADS)
    grad_kernel(net t, const float *wp, const float *wf, int R, ppo_fused_grad_args a,
                slice_t<P> *partial, size_t packed)
{
    extern __shared__ __align__(128) float base[];
    vx_pdl_wait();
    smem s = carve(t, R, base);
    int row0 = blockIdx.x * R, cursor = a.cursor ? *a.cursor : 0;
    if (threadIdx.x < R) {
        int j = row0 + threadIdx.x;
        s.rowq[threadIdx.x] = j >= a.M ? -1 : a.perm ? (int)a.perm[(size_t)cursor * a.M + j] : j;
    }
    __syncthreads();
    each(R, t.Dp, [&](int r, int d) {
        int q = s.rowq[r];
        s.xs[r * s.ldx + d] = q >= 0 && d < t.in ? a.obs[(size_t)q * t.in + d] : 0.0f;
    });
    __syncthreads();
    forward<P>(t, wp, wf, R, s);
    /* each row's loss and its gradient with respect to the heads (ppo_lanes.cuh: 16 lanes a
     * row, two rows a warp), then the row's statistics into s.red */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, k = lane % PPO_LANES;
    for (int r0 = 0; r0 < R; r0 += 2 * WARPS) {
        int r = r0 + 2 * warp + lane / PPO_LANES, q = r < R ? s.rowq[r] : -1, j = row0 + r;
        float *o = s.out + r * OUT_LD;
        double st[N_STATS] = {0, 0, 0, 0, 0}, g = 0;
        if (a.dz) { /* given (tests) */
            if (q >= 0) g = k < VX_PPO_LOGITS ? a.dz[(size_t)j * VX_PPO_LOGITS + k] : a.dv[j];
        } else { /* every lane of the warp: the shuffles need them all */
            int32_t act[VX_ACTION_BRANCHES] = {0, 0, 0};
            double adv = 0, old_logp = 0, old_val = 0, ret = 0, z = 0;
            if (q >= 0) {
                for (int b = 0; b < VX_ACTION_BRANCHES; b++)
                    act[b] = a.act[(size_t)q * VX_ACTION_BRANCHES + b];
                adv = a.adv[q], old_logp = a.logp[q], old_val = a.val[q], ret = a.ret[q];
                z = o[k];
                if (a.norm_adv) {
                    const double *m = a.adv_stat + 2 * (size_t)cursor;
                    adv = (adv - m[0]) / (m[1] + 1e-8);
                }
            }
            vx_ppo_loss_out lo;
            g = lanes_loss(&a.lc, z, act, old_logp, old_val, adv, ret, 1.0 / a.M, &lo);
            if (q >= 0) {
                st[0] = lo.pg, st[1] = lo.v, st[2] = lo.entropy, st[3] = lo.approx_kl;
                st[4] = lo.clipped;
            }
        }
        if (r < R) {
            o[k] = (float)g; /* 0 past the minibatch's end */
            if (k == 0)
                for (int p = 0; p < N_STATS; p++) s.red[p * R + r] = st[p];
        }
    }
    /* the statistics' block sums: warp p adds statistic p's in a fixed order (lanes' strided
     * sums, then a shuffle tree) — one barrier, where a block-wide tree a statistic took
     * eleven */
    __syncthreads(); /* also the barrier after the gradients above */
    if (warp < N_STATS && a.parts) {
        double sum = 0;
        for (int r = lane; r < R; r += 32) sum += s.red[warp * R + r];
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
        if (lane == 0) a.parts[(size_t)blockIdx.x * N_STATS + warp] = sum;
    }
    backward<P, false>(t, wf, R, s, partial + (size_t)blockIdx.x * packed);
}

/* ---- the host side ------------------------------------------------------------------------- */

extern "C" int ppo_fused_fits(const vx_ac_layout *L, size_t smem_optin, char *why, size_t why_n)
{
    return vx_pf_rows(L, smem_optin, why, why_n) > 0;
}

extern "C" int ppo_fused_act_blocks(int N) { return (N + ACT_ROWS - 1) / ACT_ROWS; }

extern "C" int ppo_fused_grad_blocks(const ppo_fused *f, int M)
{
    return (M + f->rows - 1) / f->rows;
}

extern "C" void ppo_fused_step_grid(const ppo_fused *f, size_t *blocks, size_t *wanted)
{
    *blocks = f->c.sum_step_blocks;
    *wanted = vx_pf_sum_blocks(f->c.packed, f->L.n_params);
}

extern "C" void ppo_fused_free(ppo_fused *f)
{
    if (!f) return;
    vx_mem_release(&f->mem);
    free(f);
}

extern "C" size_t ppo_fused_reserved(const ppo_fused *f) { return f->mem.bytes; }

/* Dynamic shared memory past 48 KB, allowed per kernel: up to the device's most, always. The
 * limit is the kernel's, for the whole process: trials of other shapes running beside this one
 * set it too, and a trial that set its own need would refuse a wider neighbour's launches
 * ("invalid argument", seen in test_study_cuda's PPO space). */
template <int P> static cudaError_t allow_smem(int bytes)
{
    cudaError_t rc =
        cudaFuncSetAttribute(act_kernel<P>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (rc == cudaSuccess)
        rc = cudaFuncSetAttribute(grad_kernel<P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  bytes);
    return rc;
}

extern "C" vx_status ppo_fused_create(const vx_ac_layout *L, int max_rows, int tf32, vx_device *dev,
                                      ppo_fused **out, vx_err *e)
{
    *out = NULL;
    vx_status st = vx_cuda_enter(dev, e);
    if (st) return st;
    int optin = 0, passes = tf32 ? 1 : 3, rows;
    char why[96];
    ppo_fused *f = NULL;
    VX_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                         vx_device_index(dev)));
    rows = vx_pf_rows(L, (size_t)optin, why, sizeof why);
    if (!rows) return vx_err_set(e, VX_ERR_ARG, "ppo: the fused kernels do not take %s", why);
    f = (ppo_fused *)calloc(1, sizeof *f);
    if (!f) return vx_err_set(e, VX_ERR_NOMEM, "ppo: out of memory");
    f->L = *L, f->dev = dev;
    vx_mem_init(&f->mem, dev, "ppo fused kernels");
    f->rows = rows; /* 64 on an H200: 8,192 rows in 128 blocks */
    st = copies_create<mb_end, slice_t<1>>(
        &f->c, [&](net *t, int *src) { return vx_pf_layout(L, t, src); }, passes, L->n_params,
        (max_rows + rows - 1) / rows, dev, &f->mem, "ppo", e);
    if (st) goto fail;
    VX_CUDA_CHECK(passes == 1 ? allow_smem<1>(optin) : allow_smem<3>(optin));
    *out = f;
    return VX_OK;
fail:
    ppo_fused_free(f);
    return st;
}

extern "C" vx_status ppo_fused_pack(ppo_fused *f, const float *params, cudaStream_t s, vx_err *e)
{
    return copies_pack(&f->c, params, f->c.wp, f->c.wf, s, e);
}

extern "C" vx_status ppo_fused_act(ppo_fused *f, const ppo_fused_act_args *a, cudaStream_t s,
                                   vx_err *e)
{
    vx_status st = VX_OK;
    if (a->N < 1) return VX_OK;
    /* several steps: each reads the observations the one before wrote, and bootstraps from it */
    if (a->steps > 1 && !(a->act && a->states && a->next_obs == a->obs && a->tr && a->fin_out &&
                          a->boot_own && !a->logits && !a->values))
        return vx_err_set(e, VX_ERR_ARG,
                          "ppo: %d rollout steps in a launch need the sampling, the "
                          "environments' step into obs, its flags, pre-reset rows and bootstrap "
                          "rows, and no logits or values",
                          a->steps);
    unsigned blocks = (unsigned)ppo_fused_act_blocks(a->N);
    size_t bytes = vx_pf_smem(&f->c.nt, 2 * ACT_ROWS);
    VX_CUDA_CHECK(vx_pdl_launch(f->c.passes == 1 ? act_kernel<1> : act_kernel<3>, dim3(blocks),
                                dim3(THREADS), bytes, s, f->c.nt, (const float *)f->c.wp,
                                (const float *)f->c.wf, *a, f->c.arrived + 1));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

extern "C" vx_status ppo_fused_grad(ppo_fused *f, const ppo_fused_grad_args *a, float *grads,
                                    float *params, const vx_optim_view *o, const ppo_fused_end *end,
                                    cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    const copies *c = &f->c;
    int blocks = ppo_fused_grad_blocks(f, a->M);
    size_t bytes = vx_pf_smem(&c->nt, f->rows);
    ppo_fused_end no_end;
    memset(&no_end, 0, sizeof no_end);
    if (a->M < 1 || blocks > c->max_blocks)
        return vx_err_set(e, VX_ERR_ARG, "ppo: a minibatch of %d rows (at most %d)", a->M,
                          c->max_blocks * f->rows);
    if (end && !o) return vx_err_set(e, VX_ERR_ARG, "ppo: a minibatch's end without its step");
    if (c->passes == 1) {
        VX_CUDA_CHECK(vx_pdl_launch(grad_kernel<1>, dim3(blocks), dim3(THREADS), bytes, s, c->nt,
                                    (const float *)c->wp, (const float *)c->wf, f->rows, *a,
                                    (slice_t<1> *)c->partial, c->packed));
    } else {
        VX_CUDA_CHECK(vx_pdl_launch(grad_kernel<3>, dim3(blocks), dim3(THREADS), bytes, s, c->nt,
                                    (const float *)c->wp, (const float *)c->wf, f->rows, *a,
                                    (slice_t<3> *)c->partial, c->packed));
    }
    VX_CUDA_LAUNCH_CHECK(s);
    {
        mb_end me = {end ? *end : no_end};
        int has_end = end != NULL;
        st = c->passes == 1
                 ? copies_sum_step<slice_t<1>>(c, blocks, grads, params, o, has_end, me, s, e)
                 : copies_sum_step<slice_t<3>>(c, blocks, grads, params, o, has_end, me, s, e);
    }
fail:
    return st;
}

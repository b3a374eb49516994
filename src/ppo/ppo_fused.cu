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
 * Shared memory of a block of R rows (floats, each buffer 32-byte aligned):
 *   red    a double a thread: block sums (and the observation statistics while normalising)
 *   stage  256 a warp: the tiles on their way to an epilogue (tc_tile.cuh)
 *   out    R × 24: the heads' outputs (15 logits, the value), then their gradients
 *   xs     R × (Dp + 8): the input rows, zero beyond in_dim
 *   act_l  R × (G·H_l + 8) per layer: the activations after the ReLU, overwritten in the backward
 *          pass by the gradients with respect to the layer's output (ReLU mask applied)
 *   rowq   R ints: each row's sample in the rollout (−1: past the minibatch's end)
 * The backward pass of layer l first writes its weight gradient (act_{l−1}ᵀ · δ_l) and bias
 * gradient (δ_l's column sums), then δ_{l−1} = (δ_l · W_lᵀ) ⊙ (act_{l−1} > 0) over act_{l−1} —
 * in that order, since the weight gradient still reads act_{l−1}. */
#include "../nn/tc_tile.cuh"
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS VX_PF_THREADS
#define WARPS VX_PF_WARPS
#define ACT_ROWS VX_PF_ACT_ROWS
#define HEAD VX_PF_HEAD
#define OUT_LD VX_PF_OUT_LD
#define MAX_IN VX_PF_MAX_IN
#define N_STATS 5 /* the loss's statistics summed per block: pg, v, entropy, KL, clipped */
/* The heads' K split into this many chunks whatever a block's rows: a row's logits and value are
 * then summed in the same order whether its block runs 16 rows or 32 (a truncated neighbour's
 * pre-reset row) — its sampled action does not depend on its neighbours. */
#define HEAD_CHUNKS 4

#define SUM_THREADS 256 /* the slices' sum and the optimizer's step: threads a block */
/* The slices' loads a thread has in flight (the sum's order is the same whatever it is): 32
 * took 3 µs off a minibatch against 8 (H100, TF32 iteration 14.9 → 14.5 ms); 16 about as much;
 * a float2 or float4 a thread (fewer threads) was slower (docs/benchmarks.md). */
static constexpr int SUM_AHEAD = 32; /* a constant, not a macro: pragmas do not expand those */

typedef vx_pf_net net;
namespace cg = cooperative_groups;

/* The optimizer step's constants, taken by each block of sum_step_kernel from the norm. */
typedef vx_step_consts step_consts;

/* What the kernels below take for granted of the two overridable sizes. */
static_assert(THREADS >= 128 && THREADS % 32 == 0,
              "whole warps, at least 128 (a thread per input column, per row)");
static_assert(ACT_ROWS % 16 == 0 && 2 * ACT_ROWS <= 64 && ACT_ROWS * MAX_IN <= WARPS * 256,
              "whole tiles of rows; raw rows staged in the warps' staging");
static_assert(WARPS >= 4 * HEAD_CHUNKS, "the heads' split: 4 strips (64 rows) × HEAD_CHUNKS");
static_assert(ACT_ROWS <= 2 * WARPS, "a rollout step's samples in one pass of the lanes");
static_assert(VX_PF_PAD % 4 == 0 && OUT_LD % 4 == 0,
              "rows of whole 16-byte units: ldmatrix reads them (tc_tile.cuh's ldsm_a)");
static_assert(WARPS >= N_STATS && N_STATS * 64 <= THREADS,
              "a warp a statistic; each row's statistics (64 rows) in the block sums' doubles");

struct ppo_fused {
    vx_ac_layout L;
    net nt;
    vx_device *dev;
    vx_mem mem;
    int passes;        /* 1: TF32; 3: 3×TF32 */
    int rows;          /* the update's rows a block */
    int max_blocks;    /* the update's blocks at max_rows */
    size_t packed;     /* floats of the packed copy */
    float *wp;         /* the packed weights (the biases are read from here) */
    int *src;          /* packed float → its index in the flat parameters, −1 for padding */
    size_t frags;      /* floats of the fragment copies */
    float *wf;         /* the weights as the products' B operands (tc::frag) */
    int *fsrc;         /* fragment float → its index in the flat parameters, −1 for padding */
    float *partial;    /* max_blocks × packed: each block's gradient, laid out as wp */
    int *inv;          /* a parameter's floats: its packed one, its forward and backward fragment
                          slots (the big part's; −1: none), 3 ints a parameter */
    double *nparts;    /* sum_step_kernel: each block's Σ g² */
    unsigned *arrived; /* the blocks done: of sum_step_kernel, of a rollout */
    unsigned sum_step_blocks; /* its grid: a thread a packed float, or what is resident */
};

/* ---- shared memory ----------------------------------------------------------------------- */

struct smem {
    double *red;
    float *stage, *out, *xs, *act[VX_AC_MAX_TRUNK];
    int *rowq;
    int ldx, ld[VX_AC_MAX_TRUNK];
};

static __device__ smem carve(const net &t, int R, float *base)
{
    smem s;
    s.red = (double *)base;
    float *p = base + 2 * THREADS;
    s.stage = p, p += WARPS * 256;
    s.out = p, p += R * OUT_LD;
    s.ldx = t.Dp + VX_PF_PAD;
    s.xs = p, p += R * s.ldx;
    for (int l = 0; l < t.n; l++) {
        s.ld[l] = t.G * t.H[l] + VX_PF_PAD;
        s.act[l] = p, p += R * s.ld[l];
    }
    s.rowq = (int *)p;
    /* shared memory, as the compiler would not know through the struct: ld.shared and
     * st.shared, not generic accesses */
    __builtin_assume(__isShared(s.red) && __isShared(s.stage) && __isShared(s.out) &&
                     __isShared(s.xs) && __isShared(s.rowq));
    for (int l = 0; l < t.n; l++) __builtin_assume(__isShared(s.act[l]));
    return s;
}

/* ---- the passes ---------------------------------------------------------------------------- */

using tc::col_major;
using tc::row_major;

/* fn(r, c) for every r < R, c < W, spread over the block's threads: each thread one column and
 * every (THREADS / W)-th row (no division per element: these loops run between every two
 * products), or every THREADS-th column of each row when W is wider than the block. */
template <class Fn> static __device__ inline void each(int R, int W, Fn fn)
{
    int per = THREADS / W;
    if (per > 0) {
        int c = threadIdx.x % W, r0 = threadIdx.x / W;
        if (r0 < per)
            for (int r = r0; r < R; r += per) fn(r, c);
    } else {
        for (int r = 0; r < R; r++)
            for (int c = threadIdx.x; c < W; c += THREADS) fn(r, c);
    }
}

/* The forward pass of the R rows in s.xs: the trunks into s.act, the heads into s.out (the
 * weights from the fragment copies wf, the biases from the packed ones wp). */
template <int P>
static __device__ void forward(const net &t, const float *wp, const float *wf, int R, smem &s)
{
    int W0 = t.G * t.H[0];
    tc::gemm<P, tc::RELU, row_major, tc::frag>(1, R, W0, t.Dp, s.xs, s.ldx, 0, wf + t.fw[0], W0 / 8,
                                               0, s.act[0], s.ld[0], 0, wp + t.b[0]);
    __syncthreads();
    for (int l = 1; l < t.n; l++) {
        int H = t.H[l], Hp = t.H[l - 1];
        tc::gemm<P, tc::RELU, row_major, tc::frag>(t.G, R, H, Hp, s.act[l - 1], s.ld[l - 1], Hp,
                                                   wf + t.fw[l], H / 8, t.f_step[l], s.act[l],
                                                   s.ld[l], H, wp + t.b[l]);
        __syncthreads();
    }
    /* the heads: 16 columns of a long K, split among the warps (it synchronises) */
    float *out = s.out;
    const float *bh = wp + t.bh;
    tc::gemm_splitk<P, row_major, tc::frag>(
        R, t.top, HEAD_CHUNKS, s.act[t.n - 1], s.ld[t.n - 1], wf + t.fwh, HEAD / 8, s.stage,
        [&](int r, int c, float v) { out[r * OUT_LD + c] = v + bh[c]; });
}

/* The backward pass from the heads' gradients in s.out: every weight's and bias's gradient over
 * the block's rows into part, laid out as the packed weights (padding included:
 * sum_step_kernel takes only what maps to a parameter). Each layer's δ overwrites its activations.
 */
template <int P>
static __device__ void backward(const net &t, const float *wf, int R, smem &s, float *part)
{
    /* a layer's bias gradient: the column sums of its δ, rows in order */
    auto bias = [&](const float *d, int ld, int cols, float *to) {
        for (int c = threadIdx.x; c < cols; c += THREADS) {
            float sum = 0;
            for (int r = 0; r < R; r++) sum += d[r * ld + c];
            to[c] = sum;
        }
    };
    int n = t.n, top = t.top;
    float *at = s.act[n - 1];
    int ldt = s.ld[n - 1];
    /* the heads */
    tc::gemm<P, tc::STORE, col_major, row_major>(1, top, HEAD, R, at, ldt, 0, s.out, OUT_LD, 0,
                                                 part + t.wh, HEAD, 0);
    bias(s.out, OUT_LD, HEAD, part + t.bh);
    __syncthreads();
    tc::gemm<P, tc::MASK, row_major, tc::frag>(1, R, top, HEAD, s.out, OUT_LD, 0, wf + t.fbh,
                                               top / 8, 0, at, ldt, 0);
    __syncthreads();
    /* the trunks' layers from the top; layer 0 last */
    for (int l = n - 1; l >= 1; l--) {
        int H = t.H[l], Hp = t.H[l - 1], ld = s.ld[l], ldp = s.ld[l - 1];
        float *a = s.act[l], *ap = s.act[l - 1];
        int w = t.w[l], step = t.w_step[l];
        tc::gemm<P, tc::STORE, col_major, row_major>(t.G, Hp, H, R, ap, ldp, Hp, a, ld, H, part + w,
                                                     H, step);
        bias(a, ld, t.G * H, part + t.b[l]);
        __syncthreads();
        tc::gemm<P, tc::MASK, row_major, tc::frag>(t.G, R, Hp, H, a, ld, H, wf + t.fb[l], Hp / 8,
                                                   t.f_step[l], ap, ldp, Hp);
        __syncthreads();
    }
    int W0 = t.G * t.H[0];
    tc::gemm<P, tc::STORE, col_major, row_major>(1, t.Dp, W0, R, s.xs, s.ldx, 0, s.act[0], s.ld[0],
                                                 0, part + t.w[0], W0, 0);
    bias(s.act[0], s.ld[0], W0, part + t.b[0]);
}

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

/* R rows of a minibatch a block: gather them, the forward pass, each row's loss and its
 * gradient with respect to the heads (or the given one), the statistics' block sums, the
 * backward pass into the block's slice of `partial`. */
template <int P>
static __global__ void __launch_bounds__(THREADS)
    grad_kernel(net t, const float *wp, const float *wf, int R, ppo_fused_grad_args a,
                float *partial, size_t packed)
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
    backward<P>(t, wf, R, s, partial + (size_t)blockIdx.x * packed);
}

/* The sum of a double a thread of a SUM_THREADS block, in a fixed order (the same bits every
 * run): a shuffle tree in each warp, then thread 0 adds the warps' in order — two barriers (the
 * second frees sh), where a block-wide tree takes ten. Thread 0 gets the sum. */
static __device__ double block_sum(double v, double *sh)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double sum = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < SUM_THREADS / 32; w++) sum += sh[w];
    __syncthreads(); /* sh free again */
    return sum;
}

/* The gradient, then the optimizer's step, in one launch (a minibatch's second and last).
 *
 * The gradient: the blocks' slices added in block order (in double), each packed float that is
 * a parameter's into its place in the flat vector (whose padding is left alone). Without an
 * optimizer (with_o 0) that is all.
 *
 * With one, its norm: each block's Σ g² (g as stored, squared in double, as the optimizer's own
 * sum does) in a fixed tree, then, past the grid's barrier (a cooperative launch: every block is
 * resident), every block adds the blocks' sums itself in the same fixed order — the same bits in
 * each, so no block waits for another's constants. Then the step, a thread a parameter: the clip
 * (the clipped gradient written back, as the optimizer's own step leaves it) and Adam
 * (optim_math.h), and the new value straight into the packed copy and the fragment copies (split
 * into its big and small parts when E = 4). A skipped step (the controls' flag) leaves the norm,
 * the moments, the weights and the step count alone. Then, with `has_end`, the last block to
 * finish does the minibatch's end (ppo_mb_end.cuh): every block has read the stop flag it may set.
 *
 * The step's count and the stop flag are read by each block before the barrier, after which
 * block 0 moves the count on. Whatever the grid (capped at what can be resident), each thread
 * takes every (grid · SUM_THREADS)-th float; the slices are read once, with SUM_AHEAD loads in
 * flight.
 * With a thread a packed float (the grid uncapped: networks up to about 660 × 256 packed floats
 * on a 132-SM Hopper) the norm's sums are the ones the separate sum and step launches took; a
 * capped grid adds them in another fixed order (the same bits run after run on one device). */
static __global__ void __launch_bounds__(SUM_THREADS)
    sum_step_kernel(const float *partial, int blocks, const int *src, size_t packed, float *g,
                    int with_o, vx_optim_view o, double *nparts, float *params, size_t n,
                    const int *inv, int E, float *wp, float *wf, int has_end, ppo_fused_end end,
                    unsigned *arrived)
{
    __shared__ double sh[SUM_THREADS / 32];
    __shared__ step_consts c;
    __shared__ int last;
    vx_pdl_wait();
    int skip = with_o && o.skip && *o.skip;
    long long t = with_o && !skip ? *o.t : 0;
    size_t first = (size_t)blockIdx.x * SUM_THREADS + threadIdx.x;
    size_t stride = (size_t)gridDim.x * SUM_THREADS;
    double sq = 0;
    for (size_t p = first; p < packed; p += stride) {
        if (src[p] < 0) continue;
        double sum = 0;
#pragma unroll(SUM_AHEAD) /* the slices' loads in flight together */
        for (int b = 0; b < blocks; b++) sum += partial[(size_t)b * packed + p];
        float gf = (float)sum;
        g[src[p]] = gf;
        sq += (double)gf * gf;
    }
    if (!with_o) return;
    if (!skip) {
        double part = block_sum(sq, sh);
        if (threadIdx.x == 0) nparts[blockIdx.x] = part;
        cg::this_grid().sync();
        double v = 0;
        for (unsigned b = threadIdx.x; b < gridDim.x; b += SUM_THREADS) v += __ldcg(nparts + b);
        double all = block_sum(v, sh);
        if (threadIdx.x == 0) {
            const double *h = o.hyper;
            double norm = sqrt(all), max_norm = h[VX_OPTIM_H_CLIP];
            c.k = vx_adam_constants(o.lr ? *o.lr : h[VX_OPTIM_H_LR], h[VX_OPTIM_H_B1],
                                    h[VX_OPTIM_H_B2], h[VX_OPTIM_H_EPS], h[VX_OPTIM_H_WD], t + 1);
            c.clip = vx_clip_scale(max_norm, norm, &c.scale);
            if (blockIdx.x == 0) *o.norm = norm, *o.t = t + 1;
        }
        __syncthreads();
        for (size_t i = first; i < n; i += stride) {
            vx_adam_step_k k = c.k;
            float gi = __ldcg(g + i); /* another block's, written before the barrier */
            if (c.clip) {
                gi *= c.scale;
                g[i] = gi;
            }
            vx_adam_elem(&k, &params[i], &o.m[i], &o.v[i], gi);
            float x = params[i];
            const int *q = inv + 3 * i; /* all −1 for the flat vector's padding between tensors */
            if (q[0] >= 0) wp[q[0]] = x;
            float big = E == 4 ? __uint_as_float(__float_as_uint(x) & 0xffffe000u) : x;
            for (int j = 1; j <= 2; j++)
                if (q[j] >= 0) {
                    wf[q[j]] = big;
                    if (E == 4) wf[q[j] + 2] = x - big;
                }
        }
    }
    if (!has_end) return;
    __syncthreads(); /* the block's reads of the stop flag done */
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(arrived, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    ppo_mb_end(end.M, end.blocks, end.parts, o.norm, end.minibatches, end.target_kl, end.stats,
               end.ctl);
    if (threadIdx.x == 0) *arrived = 0; /* ready for the next launch */
}

/* The packed copy (its first `packed` threads) and the fragment copies (the next `frags`): with
 * E = 4, floats 0 and 1 of each 4 of the latter the big parts (the top 10 mantissa bits,
 * tc::split's), 2 and 3 what is left of the same two weights. One launch for both. */
static __global__ void pack_kernel(const float *params, const int *src, size_t packed,
                                   const int *fsrc, size_t frags, int E, float *wp, float *wf)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < packed) {
        wp[i] = src[i] >= 0 ? params[src[i]] : 0.0f;
        return;
    }
    i -= packed;
    if (i >= frags) return;
    float v = fsrc[i] >= 0 ? params[fsrc[i]] : 0.0f;
    if (E == 4) {
        float big = __uint_as_float(__float_as_uint(v) & 0xffffe000u);
        v = i & 2 ? v - big : big;
    }
    wf[i] = v;
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
    *blocks = f->sum_step_blocks;
    *wanted = vx_pf_sum_blocks(f->packed, f->L.n_params);
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
    int optin = 0;
    char why[96];
    int *src = NULL, *fsrc = NULL, *inv = NULL, rows;
    size_t np = L->n_params;
    ppo_fused *f = NULL;
    cudaStream_t setup = NULL;
    VX_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                         vx_device_index(dev)));
    rows = vx_pf_rows(L, (size_t)optin, why, sizeof why);
    if (!rows) return vx_err_set(e, VX_ERR_ARG, "ppo: the fused kernels do not take %s", why);
    f = (ppo_fused *)calloc(1, sizeof *f);
    if (!f) return vx_err_set(e, VX_ERR_NOMEM, "ppo: out of memory");
    f->L = *L, f->dev = dev, f->passes = tf32 ? 1 : 3;
    vx_mem_init(&f->mem, dev, "ppo fused kernels");
    f->packed = vx_pf_layout(L, &f->nt, NULL);
    f->rows = rows; /* 64 on an H200: 8,192 rows in 128 blocks */
    f->max_blocks = (max_rows + f->rows - 1) / f->rows;
    f->frags = vx_pf_frags(&f->nt, f->passes, NULL, NULL);
    src = (int *)malloc(f->packed * sizeof *src);
    fsrc = (int *)malloc(f->frags * sizeof *fsrc);
    inv = (int *)malloc(np * 3 * sizeof *inv);
    if (!src || !fsrc || !inv) {
        st = vx_err_set(e, VX_ERR_NOMEM, "ppo: out of memory");
        goto fail;
    }
    vx_pf_layout(L, &f->nt, src);
    vx_pf_frags(&f->nt, f->passes, src, fsrc);
    /* the inverse maps, for the optimizer's step to write each parameter's copies */
    for (size_t i = 0; i < np * 3; i++) inv[i] = -1;
    for (size_t p = 0; p < f->packed; p++)
        if (src[p] >= 0) inv[3 * (size_t)src[p]] = (int)p;
    for (size_t i = 0; i < f->frags; i++) /* the forward copies first, then the backward ones */
        if (fsrc[i] >= 0 && (f->nt.E == 2 || !(i & 2)))
            inv[3 * (size_t)fsrc[i] + (i < (size_t)f->nt.fbh ? 1 : 2)] = (int)i;
    st = vx_mem_alloc(&f->mem, f->packed * 4, &f->wp, e);
    if (!st) st = vx_mem_alloc(&f->mem, f->packed * sizeof *src, &f->src, e);
    if (!st) st = vx_mem_alloc(&f->mem, f->frags * 4, &f->wf, e);
    if (!st) st = vx_mem_alloc(&f->mem, f->frags * sizeof *fsrc, &f->fsrc, e);
    if (!st) st = vx_mem_alloc(&f->mem, np * 3 * sizeof *inv, &f->inv, e);
    if (!st) st = vx_mem_alloc(&f->mem, vx_pf_sum_blocks(f->packed, np) * 8, &f->nparts, e);
    if (!st) st = vx_mem_alloc(&f->mem, 2 * sizeof(unsigned), &f->arrived, e);
    if (!st) st = vx_mem_alloc(&f->mem, (size_t)f->max_blocks * f->packed * 4, &f->partial, e);
    if (st) goto fail;
    /* on a stream of the context's, waited for: src is freed below, and the caller's stream (a
     * non-blocking one) is not ordered behind anything else. The slices' padding between tensors
     * is never written nor read — zeroed so that no float of them is undefined. */
    st = vx_cuda_stream_create(dev, &setup, e);
    if (st) goto fail;
    VX_CUDA_CHECK(
        cudaMemcpyAsync(f->src, src, f->packed * sizeof *src, cudaMemcpyHostToDevice, setup));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(f->fsrc, fsrc, f->frags * sizeof *fsrc, cudaMemcpyHostToDevice, setup));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(f->inv, inv, np * 3 * sizeof *inv, cudaMemcpyHostToDevice, setup));
    VX_CUDA_CHECK(cudaMemsetAsync(f->arrived, 0, 2 * sizeof(unsigned), setup));
    VX_CUDA_CHECK(cudaMemsetAsync(f->partial, 0, (size_t)f->max_blocks * f->packed * 4, setup));
    VX_CUDA_CHECK(cudaStreamSynchronize(setup));
    VX_CUDA_CHECK(f->passes == 1 ? allow_smem<1>(optin) : allow_smem<3>(optin));
    { /* sum_step_kernel's grid: every block resident at once (its launch is cooperative) */
        int per_sm = 0, sms = 0;
        VX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sum_step_kernel,
                                                                    SUM_THREADS, 0));
        sms = vx_cuda_sm_count(dev);
        size_t want = vx_pf_sum_blocks(f->packed, np), can = (size_t)per_sm * (size_t)sms;
        f->sum_step_blocks = (unsigned)(want < can ? want : can);
        if (!f->sum_step_blocks) {
            st = vx_err_set(e, VX_ERR_CUDA, "ppo: the gradient's sum and step cannot be resident");
            goto fail;
        }
    }
    vx_cuda_stream_destroy(dev, setup);
    free(src);
    free(fsrc);
    free(inv);
    *out = f;
    return VX_OK;
fail:
    if (setup) vx_cuda_stream_destroy(dev, setup);
    free(src);
    free(fsrc);
    free(inv);
    ppo_fused_free(f);
    return st;
}

extern "C" vx_status ppo_fused_pack(ppo_fused *f, const float *params, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    pack_kernel<<<(unsigned)((f->packed + f->frags + 255) / 256), 256, 0, s>>>(
        params, f->src, f->packed, f->fsrc, f->frags, f->nt.E, f->wp, f->wf);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
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
    size_t bytes = vx_pf_smem(&f->nt, 2 * ACT_ROWS);
    VX_CUDA_CHECK(vx_pdl_launch(f->passes == 1 ? act_kernel<1> : act_kernel<3>, dim3(blocks),
                                dim3(THREADS), bytes, s, f->nt, (const float *)f->wp,
                                (const float *)f->wf, *a, f->arrived + 1));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

extern "C" vx_status ppo_fused_grad(ppo_fused *f, const ppo_fused_grad_args *a, float *grads,
                                    float *params, const vx_optim_view *o, const ppo_fused_end *end,
                                    cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    int blocks = ppo_fused_grad_blocks(f, a->M);
    size_t bytes = vx_pf_smem(&f->nt, f->rows);
    vx_optim_view none;
    ppo_fused_end no_end;
    memset(&none, 0, sizeof none);
    memset(&no_end, 0, sizeof no_end);
    if (a->M < 1 || blocks > f->max_blocks)
        return vx_err_set(e, VX_ERR_ARG, "ppo: a minibatch of %d rows (at most %d)", a->M,
                          f->max_blocks * f->rows);
    if (end && !o) return vx_err_set(e, VX_ERR_ARG, "ppo: a minibatch's end without its step");
    VX_CUDA_CHECK(vx_pdl_launch(f->passes == 1 ? grad_kernel<1> : grad_kernel<3>, dim3(blocks),
                                dim3(THREADS), bytes, s, f->nt, (const float *)f->wp,
                                (const float *)f->wf, f->rows, *a, f->partial, f->packed));
    VX_CUDA_LAUNCH_CHECK(s);
    VX_CUDA_CHECK(vx_pdl_launch_cooperative(
        sum_step_kernel, dim3(f->sum_step_blocks), dim3(SUM_THREADS), 0, s, o != NULL,
        (const float *)f->partial, blocks, (const int *)f->src, f->packed, grads, (int)(o != NULL),
        o ? *o : none, f->nparts, params, f->L.n_params, (const int *)f->inv, f->nt.E, f->wp, f->wf,
        (int)(end != NULL), end ? *end : no_end, f->arrived));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

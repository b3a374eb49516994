/* fused_net.cuh — what the fused kernels of PPO (src/ppo/ppo_fused.cu) and of the DQN's update
 * (src/dqn/dqn_fused.cu) share: a network of a few hidden layers and one 16-column output product
 * (vx_pf_net, ppo_fused_plan.h) run by a block over its rows in shared memory, forward and
 * backward, every product on tensor cores (tc_tile.cuh); then, in a second, cooperative launch,
 * the fixed-order sum of the blocks' gradient slices, its norm and the optimizer's step, which
 * also writes the kernels' copies of the weights (internal; device code only).
 *
 * Shared memory of a block of R rows (floats, each buffer 32-byte aligned):
 *   red    a double a thread: block sums (and PPO's observation statistics while normalising)
 *   stage  256 a warp: the tiles on their way to an epilogue (tc_tile.cuh)
 *   out    R × 24: the heads' outputs (16 columns), then their gradients
 *   xs     R × (Dp + 8): the input rows, zero beyond in_dim
 *   act_l  R × (W_l + 8) per layer: the activations after the ReLU, overwritten in the backward
 *          pass by the gradients with respect to the layer's output (ReLU mask applied)
 *   rowq   R ints: each row's index in its source (−1: past the batch's end)
 * The backward pass of layer l first writes its weight gradient (act_{l−1}ᵀ · δ_l) and bias
 * gradient (δ_l's column sums), then δ_{l−1} = (δ_l · W_lᵀ) ⊙ (act_{l−1} > 0) over act_{l−1} —
 * in that order, since the weight gradient still reads act_{l−1}. */
#ifndef VIXEN_FUSED_NET_CUH
#define VIXEN_FUSED_NET_CUH

#include "tc_tile.cuh"
#include "../ppo/ppo_fused_plan.h"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "../util/pdl.cuh"
#include "vixen/nn.h"
#include "vixen/optim_math.h"

#include <cooperative_groups.h>
#include <stdlib.h>
#include <string.h>

namespace fused
{

const int THREADS = VX_PF_THREADS;
const int WARPS = VX_PF_WARPS;
const int HEAD = VX_PF_HEAD;
const int OUT_LD = VX_PF_OUT_LD;
/* The heads' K split into this many chunks whatever a block's rows: a row's outputs are then
 * summed in the same order whether its block runs 16 rows or 32 (PPO: a truncated neighbour's
 * pre-reset row) — nothing of a row depends on its neighbours. */
const int HEAD_CHUNKS = 4;

const int SUM_THREADS = 256; /* the slices' sum and the optimizer's step: threads a block */
/* The slices' loads a thread has in flight (the sum's order is the same whatever it is): 32
 * took 3 µs off a PPO minibatch against 8 (H100, TF32 iteration 14.9 → 14.5 ms); 16 about as
 * much; a float2 or float4 a thread (fewer threads) was slower (docs/benchmarks.md). */
constexpr int SUM_AHEAD = 32; /* a constant, not a macro: pragmas do not expand those */

static_assert(THREADS >= 128 && THREADS % 32 == 0,
              "whole warps, at least 128 (a thread per input column, per row)");
static_assert(WARPS >= 4 * HEAD_CHUNKS, "the heads' split: 4 strips (64 rows) × HEAD_CHUNKS");
static_assert(VX_PF_PAD % 4 == 0 && OUT_LD % 4 == 0,
              "rows of whole 16-byte units: ldmatrix reads them (tc_tile.cuh's ldsm_a)");

typedef vx_pf_net net;

/* ---- shared memory ----------------------------------------------------------------------- */

struct smem {
    double *red;
    float *stage, *out, *xs, *act[VX_PF_MAX_LAYERS];
    int *rowq;
    int ldx, ld[VX_PF_MAX_LAYERS];
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
        s.ld[l] = t.W[l] + VX_PF_PAD;
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

/* The forward pass of the R rows in s.xs: the layers into s.act, the heads' 16 columns into
 * s.out (the weights from the fragment copies wf, the biases from the packed ones wp). Layer 0,
 * one group whatever the network, apart: its product's shape then known to the compiler. */
template <int P>
static __device__ void forward(const net &t, const float *wp, const float *wf, int R, smem &s)
{
    int W0 = t.W[0];
    tc::gemm<P, tc::RELU, row_major, tc::frag>(1, R, W0, t.Dp, s.xs, s.ldx, 0, wf + t.fw[0], W0 / 8,
                                               0, s.act[0], s.ld[0], 0, wp + t.b[0]);
    __syncthreads();
    for (int l = 1; l < t.n; l++) {
        int gl = t.g[l], N = t.H[l], K = t.H[l - 1];
        tc::gemm<P, tc::RELU, row_major, tc::frag>(gl, R, N, K, s.act[l - 1], s.ld[l - 1], K,
                                                   wf + t.fw[l], N / 8, t.f_step[l], s.act[l],
                                                   s.ld[l], N, wp + t.b[l]);
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
 * the block's rows into part, laid out as the packed weights (padding included: the sum takes
 * only what maps to a parameter), stored as S (float, or bf16: each product and sum is float32
 * and rounded once, as it is stored). Each layer's δ overwrites its activations. DSCALE: t.dscale
 * read (a network that has one not 1: PPO's has none, and the code it takes cost registers). */
template <int P, bool DSCALE, typename S = float>
static __device__ void backward(const net &t, const float *wf, int R, smem &s, S *part)
{
    /* a layer's bias gradient: the column sums of its δ, rows in order */
    auto bias = [&](const float *d, int ld, int cols, S *to) {
        for (int c = threadIdx.x; c < cols; c += THREADS) {
            float sum = 0;
            for (int r = 0; r < R; r++) sum += d[r * ld + c];
            to[c] = (S)sum;
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
    /* the layers from the top; layer 0 last */
    for (int l = n - 1; l >= 1; l--) {
        int gl = t.g[l], N = t.H[l], K = t.H[l - 1], ld = s.ld[l], ldp = s.ld[l - 1];
        float *a = s.act[l], *ap = s.act[l - 1];
        tc::gemm<P, tc::STORE, col_major, row_major>(gl, K, N, R, ap, ldp, K, a, ld, N,
                                                     part + t.w[l], N, t.w_step[l]);
        bias(a, ld, t.W[l], part + t.b[l]);
        __syncthreads();
        if (DSCALE && t.dscale[l] != 1.0f) { /* the weight and bias gradients have read δ */
            float sc = t.dscale[l];
            each(R, t.W[l], [&](int r, int c) { a[r * ld + c] *= sc; });
            __syncthreads();
        }
        tc::gemm<P, tc::MASK, row_major, tc::frag>(gl, R, K, N, a, ld, N, wf + t.fb[l], K / 8,
                                                   t.f_step[l], ap, ldp, K);
        __syncthreads();
    }
    int W0 = t.W[0];
    tc::gemm<P, tc::STORE, col_major, row_major>(1, t.Dp, W0, R, s.xs, s.ldx, 0, s.act[0], s.ld[0],
                                                 0, part + t.w[0], W0, 0);
    bias(s.act[0], s.ld[0], W0, part + t.b[0]);
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
 * the moments, the weights and the step count alone. With `has_end`, block 0 calls end(o) (PPO:
 * the minibatch's end, ppo_mb_end.cuh) past the barrier, before its share of the step: every
 * block has read the stop flag end may set before the barrier, and the norm end reads is block
 * 0's own. It had been the last block to finish, after every block's step (a timing build: 2.1
 * µs from block 0's step to that block's arrival, 2.2 µs of end); beside the other blocks' step
 * the updates of a PPO iteration took 0.06–0.2 ms less (H100, 2026-12-07).
 *
 * The step's count and the stop flag are read by each block before the barrier, after which
 * block 0 moves the count on. Whatever the grid (capped at what can be resident), each thread
 * takes every (grid · SUM_THREADS)-th float; the slices are read once, with SUM_AHEAD loads in
 * flight.
 * With a thread a packed float (the grid uncapped: networks up to about 660 × 256 packed floats
 * on a 132-SM Hopper) the norm's sums are the ones the separate sum and step launches took; a
 * capped grid adds them in another fixed order (the same bits run after run on one device). */
template <class End, typename S = float>
static __global__ void __launch_bounds__(SUM_THREADS)
    sum_step_kernel(const S *partial, int blocks, const int *src, size_t packed, float *g,
                    int with_o, vx_optim_view o, double *nparts, float *params, size_t n,
                    const int *inv, int E, float *wp, float *wf, int has_end, End end)
{
    __shared__ double sh[SUM_THREADS / 32];
    __shared__ vx_step_consts c;
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
        for (int b = 0; b < blocks; b++) sum += (float)partial[(size_t)b * packed + p];
        float gf = (float)sum;
        g[src[p]] = gf;
        sq += (double)gf * gf;
    }
    if (!with_o) return;
    if (!skip) {
        double part = block_sum(sq, sh);
        if (threadIdx.x == 0) nparts[blockIdx.x] = part;
        cooperative_groups::this_grid().sync();
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
        if (has_end && blockIdx.x == 0) end(o);
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
    } else if (has_end && blockIdx.x == 0) {
        end(o); /* stopped: the cursor moves on, the stop flag stays */
    }
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

/* No end (sum_step_kernel's has_end 0). */
struct no_end {
    __device__ void operator()(const vx_optim_view &) const {}
};

/* ---- the host side ------------------------------------------------------------------------- */

/* A fused network's device copies of the weights and the buffers of its update's two launches. */
struct copies {
    net nt;
    int passes;        /* 1: TF32; 3: 3×TF32 */
    int max_blocks;    /* the gradient kernel's blocks at most (the slices) */
    size_t n_params;   /* the flat parameters' floats */
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
    unsigned *arrived; /* [1]: the caller's count of its blocks done ([0] unused) */
    unsigned sum_step_blocks; /* its grid: a thread a packed float, or what is resident */
};

/* The copies of a network of np parameters, laid out by layout(net *, int *src) (a packed
 * layout and its map, as vx_pf_layout; it returns the packed floats), for `passes` and an update
 * of up to max_blocks blocks, in mem; sum_step_kernel with End sizes its grid, resident whether
 * its slices are float or S (a caller whose slices may also be bf16 passes S). */
template <class End, class S = float, class Layout>
static vx_status copies_create(copies *c, Layout layout, int passes, size_t np, int max_blocks,
                               vx_device *dev, vx_mem *mem, const char *who, vx_err *e)
{
    vx_status st = VX_OK;
    cudaStream_t setup = NULL;
    net nt;
    size_t packed = layout(&nt, NULL), frags = vx_pf_frags(&nt, passes, NULL, NULL);
    int *src = (int *)malloc(packed * sizeof *src), *fsrc = (int *)malloc(frags * sizeof *fsrc);
    int *inv = (int *)malloc(np * 3 * sizeof *inv);
    memset(c, 0, sizeof *c);
    if (!src || !fsrc || !inv) {
        st = vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", who);
        goto fail;
    }
    layout(&nt, src);
    vx_pf_frags(&nt, passes, src, fsrc);
    c->nt = nt, c->passes = passes, c->max_blocks = max_blocks, c->n_params = np;
    c->packed = packed, c->frags = frags;
    /* the inverse maps, for the optimizer's step to write each parameter's copies */
    for (size_t i = 0; i < np * 3; i++) inv[i] = -1;
    for (size_t p = 0; p < packed; p++)
        if (src[p] >= 0) inv[3 * (size_t)src[p]] = (int)p;
    for (size_t i = 0; i < frags; i++) /* the forward copies first, then the backward ones */
        if (fsrc[i] >= 0 && (nt.E == 2 || !(i & 2)))
            inv[3 * (size_t)fsrc[i] + (i < (size_t)nt.fbh ? 1 : 2)] = (int)i;
    st = vx_mem_alloc(mem, packed * 4, &c->wp, e);
    if (!st) st = vx_mem_alloc(mem, packed * sizeof *src, &c->src, e);
    if (!st) st = vx_mem_alloc(mem, frags * 4, &c->wf, e);
    if (!st) st = vx_mem_alloc(mem, frags * sizeof *fsrc, &c->fsrc, e);
    if (!st) st = vx_mem_alloc(mem, np * 3 * sizeof *inv, &c->inv, e);
    if (!st) st = vx_mem_alloc(mem, vx_pf_sum_blocks(packed, np) * 8, &c->nparts, e);
    if (!st) st = vx_mem_alloc(mem, 2 * sizeof(unsigned), &c->arrived, e);
    if (!st) st = vx_mem_alloc(mem, (size_t)max_blocks * packed * 4, &c->partial, e);
    if (st) goto fail;
    /* on a stream of the context's, waited for: the maps are freed below, and the caller's
     * stream (a non-blocking one) is not ordered behind anything else. The slices' padding between tensors
     * is never written nor read — zeroed so that no float of them is undefined. */
    st = vx_cuda_stream_create(dev, &setup, e);
    if (st) goto fail;
    VX_CUDA_CHECK(cudaMemcpyAsync(c->src, src, packed * sizeof *src, cudaMemcpyHostToDevice, setup));
    VX_CUDA_CHECK(
        cudaMemcpyAsync(c->fsrc, fsrc, frags * sizeof *fsrc, cudaMemcpyHostToDevice, setup));
    VX_CUDA_CHECK(cudaMemcpyAsync(c->inv, inv, np * 3 * sizeof *inv, cudaMemcpyHostToDevice, setup));
    VX_CUDA_CHECK(cudaMemsetAsync(c->arrived, 0, 2 * sizeof(unsigned), setup));
    VX_CUDA_CHECK(cudaMemsetAsync(c->partial, 0, (size_t)max_blocks * packed * 4, setup));
    VX_CUDA_CHECK(cudaStreamSynchronize(setup));
    { /* sum_step_kernel's grid: every block resident at once (its launch is cooperative) */
        int per_sm = 0, per_sm_s = 0, sms = 0;
        VX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, sum_step_kernel<End, float>, SUM_THREADS, 0));
        VX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm_s, sum_step_kernel<End, S>, SUM_THREADS, 0));
        if (per_sm_s < per_sm) per_sm = per_sm_s;
        sms = vx_cuda_sm_count(dev);
        size_t want = vx_pf_sum_blocks(packed, np), can = (size_t)per_sm * (size_t)sms;
        c->sum_step_blocks = (unsigned)(want < can ? want : can);
        if (!c->sum_step_blocks)
            st = vx_err_set(e, VX_ERR_CUDA, "%s: the gradient's sum and step cannot be resident",
                            who);
    }
fail:
    if (setup) vx_cuda_stream_destroy(dev, setup);
    free(src), free(fsrc), free(inv);
    return st;
}

/* The packed and fragment copies of params into wp and wf (c's, or another network's of the
 * same layout: a target's), one launch. */
static vx_status copies_pack(const copies *c, const float *params, float *wp, float *wf,
                             cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    pack_kernel<<<(unsigned)((c->packed + c->frags + 255) / 256), 256, 0, s>>>(
        params, c->src, c->packed, c->fsrc, c->frags, c->nt.E, wp, wf);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

/* The second launch over the first `blocks` slices (of S: float, or bf16 where the caller's
 * first launch wrote those): the gradient into grads; with o, the norm and the optimizer's step
 * of params (and c's copies), and end(o) by block 0 when has_end. */
template <typename S = float, class End>
static vx_status copies_sum_step(const copies *c, int blocks, float *grads, float *params,
                                 const vx_optim_view *o, int has_end, End end, cudaStream_t s,
                                 vx_err *e)
{
    vx_status st = VX_OK;
    vx_optim_view none;
    memset(&none, 0, sizeof none);
    VX_CUDA_CHECK(vx_pdl_launch_cooperative(
        sum_step_kernel<End, S>, dim3(c->sum_step_blocks), dim3(SUM_THREADS), 0, s, o != NULL,
        (const S *)c->partial, blocks, (const int *)c->src, c->packed, grads, (int)(o != NULL),
        o ? *o : none, c->nparts, params, c->n_params, (const int *)c->inv, c->nt.E, c->wp, c->wf,
        has_end, end));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

} // namespace fused

#endif

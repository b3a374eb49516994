/* ppo_fused.cu — PPO's fused kernels (ppo_fused.h): a rollout step's normalisation, forward pass
 * and sampling in one launch (act_kernel), a minibatch's gather, forward pass, loss and backward
 * pass in another (grad_kernel), and the fixed-order sum of its blocks' gradients (sum_kernel).
 *
 * Shared memory of a block of R rows (floats, each buffer 32-byte aligned):
 *   red    a double a thread: block sums (and the observation statistics while normalising)
 *   stage  256 a warp: the tiles on their way to an epilogue (tc_tile.cuh)
 *   out    R × 20: the heads' outputs (15 logits, the value), then their gradients
 *   xs     R × (Dp + 4): the input rows, zero beyond in_dim
 *   act_l  R × (G·H_l + 4) per layer: the activations after the ReLU, overwritten in the backward
 *          pass by the gradients with respect to the layer's output (ReLU mask applied)
 *   rowq   R ints: each row's sample in the rollout (−1: past the minibatch's end)
 * The backward pass of layer l first writes its weight gradient (act_{l−1}ᵀ · δ_l) and bias
 * gradient (δ_l's column sums), then δ_{l−1} = (δ_l · W_lᵀ) ⊙ (act_{l−1} > 0) over act_{l−1} —
 * in that order, since the weight gradient still reads act_{l−1}. */
#include "../nn/tc_tile.cuh"
#include "../util/block_sum.cuh"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "ppo_backend.h"
#include "ppo_fused.h"
#include "ppo_fused_plan.h"

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

typedef vx_pf_net net;

/* What the kernels below take for granted of the two overridable sizes. */
static_assert(THREADS >= 128 && (THREADS & (THREADS - 1)) == 0,
              "a power of two (vx_block_sum), at least 128 (a thread per input column, per row)");
static_assert(ACT_ROWS % 16 == 0 && 2 * ACT_ROWS <= 64 && ACT_ROWS * MAX_IN <= WARPS * 256,
              "whole tiles of rows; raw rows staged in the warps' staging");
static_assert(WARPS >= 4 * HEAD_CHUNKS, "the heads' split: 4 strips (64 rows) × HEAD_CHUNKS");

struct ppo_fused {
    vx_ac_layout L;
    net nt;
    vx_device *dev;
    vx_mem mem;
    int passes;     /* 1: TF32; 3: 3×TF32 */
    int rows;       /* the update's rows a block */
    int max_blocks; /* the update's blocks at max_rows */
    size_t packed;  /* floats of the packed copy */
    float *wp;      /* the packed weights (the biases are read from here) */
    int *src;       /* packed float → its index in the flat parameters, −1 for padding */
    size_t frags;   /* floats of the fragment copies */
    float *wf;      /* the weights as the products' B operands (tc::frag) */
    int *fsrc;      /* fragment float → its index in the flat parameters, −1 for padding */
    float *partial; /* max_blocks × packed: each block's gradient, laid out as wp */
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
    s.ldx = t.Dp + 4;
    s.xs = p, p += R * s.ldx;
    for (int l = 0; l < t.n; l++) {
        s.ld[l] = t.G * t.H[l] + 4;
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
    tc::gemm<P, tc::RELU, row_major, tc::frag>(1, R, W0, t.Dp, s.xs, s.ldx, 0, wf + t.fw[0],
                                               W0 / 8, 0, s.act[0], s.ld[0], 0, wp + t.b[0]);
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
 * the block's rows into part, laid out as the packed weights (padding included: sum_kernel
 * takes only what maps to a parameter). Each layer's δ overwrites its activations. */
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

/* ACT_ROWS rows a block: normalise (and store, and add the raw column sums to the block's own
 * partial sums, rows in order: the same bits every run), the forward pass, the sample of each
 * row with the CPU's draws, its value. When a row's episode was truncated at the step before,
 * its bootstrap needs the value of its pre-reset observation: a block that has such a row puts
 * its rows' pre-reset observations below the current ones (rows R..2R) and runs one forward
 * pass over both — more rows, but no second pass to wait for. */
template <int P>
static __global__ void __launch_bounds__(THREADS)
    act_kernel(net t, const float *wp, const float *wf, ppo_fused_act_args a)
{
    extern __shared__ __align__(128) float base[];
    const int R = ACT_ROWS;
    smem s = carve(t, 2 * R, base);
    int row0 = blockIdx.x * R, r = threadIdx.x, i = row0 + r;
    int flag = a.boot && r < R && i < a.N && a.fin_flag[i];
    for (int d = threadIdx.x; d < t.in && a.norm; d += THREADS)
        s.red[d] = a.mean[d], s.red[MAX_IN + d] = a.var[d];
    int fin = __syncthreads_or(flag);     /* the whole block, or none of it */
    float *raw = a.part ? s.stage : NULL; /* the stage is free until the forward pass */
    load_rows(t, R, row0, a.N, a.obs, a, s, 0, a.store, raw);
    if (fin) load_rows(t, R, row0, a.N, a.fin, a, s, R, NULL, NULL);
    __syncthreads();
    if (raw && threadIdx.x < t.in) {
        int d = threadIdx.x, rows = a.N - row0 < R ? a.N - row0 : R;
        double sum = 0, sum2 = 0;
        for (int q = 0; q < rows; q++) {
            double o = raw[q * t.in + d];
            sum += o, sum2 += o * o;
        }
        double *p = a.part + (size_t)blockIdx.x * 2 * t.in;
        p[d] += sum, p[t.in + d] += sum2;
    }
    __syncthreads();
    forward<P>(t, wp, wf, fin ? 2 * R : R, s);
    if (r < R && i < a.N) {
        const float *o = s.out + r * OUT_LD;
        if (a.act) {
            double z[VX_PPO_LOGITS];
            for (int k = 0; k < VX_PPO_LOGITS; k++) z[k] = o[k];
            a.logp[i] = (float)vx_ppo_sample(z, a.seed, (uint64_t)i, *a.step,
                                             a.act + (size_t)i * VX_ACTION_BRANCHES);
            a.val[i] = o[VX_PPO_LOGITS];
        }
        if (a.logits)
            for (int k = 0; k < VX_PPO_LOGITS; k++) a.logits[(size_t)i * VX_PPO_LOGITS + k] = o[k];
        if (a.values) a.values[i] = o[VX_PPO_LOGITS];
        if (a.boot) a.boot[i] = flag ? s.out[(R + r) * OUT_LD + VX_PPO_LOGITS] : 0.0f;
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
    double st[N_STATS] = {0, 0, 0, 0, 0};
    if (threadIdx.x < R) {
        int r = threadIdx.x, q = s.rowq[r], j = row0 + r;
        float *o = s.out + r * OUT_LD;
        if (q < 0) {
            for (int k = 0; k < HEAD; k++) o[k] = 0;
        } else if (a.dz) {
            for (int k = 0; k < VX_PPO_LOGITS; k++) o[k] = a.dz[(size_t)j * VX_PPO_LOGITS + k];
            o[VX_PPO_LOGITS] = a.dv[j];
        } else {
            double z[VX_PPO_LOGITS], g[VX_PPO_LOGITS], gv;
            for (int k = 0; k < VX_PPO_LOGITS; k++) z[k] = o[k];
            double adv = a.adv[q];
            if (a.norm_adv) {
                const double *m = a.adv_stat + 2 * (size_t)cursor;
                adv = (adv - m[0]) / (m[1] + 1e-8);
            }
            vx_ppo_loss_out lo;
            vx_ppo_loss(&a.lc, z, o[VX_PPO_LOGITS], a.act + (size_t)q * VX_ACTION_BRANCHES,
                        a.logp[q], a.val[q], adv, a.ret[q], 1.0 / a.M, g, &gv, &lo);
            for (int k = 0; k < VX_PPO_LOGITS; k++) o[k] = (float)g[k];
            o[VX_PPO_LOGITS] = (float)gv;
            st[0] = lo.pg, st[1] = lo.v, st[2] = lo.entropy, st[3] = lo.approx_kl;
            st[4] = lo.clipped;
        }
    }
    for (int p = 0; p < N_STATS; p++) { /* also the barrier after the gradients above */
        double sum = vx_block_sum<THREADS>(st[p], s.red);
        if (threadIdx.x == 0 && a.parts) a.parts[(size_t)blockIdx.x * N_STATS + p] = sum;
    }
    backward<P>(t, wf, R, s, partial + (size_t)blockIdx.x * packed);
}

/* The gradient: the blocks' slices added in block order (in double), each packed float that is
 * a parameter's into its place in the flat vector (whose padding is left alone). */
static __global__ void sum_kernel(const float *partial, int blocks, const int *src, size_t packed,
                                  float *g)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= packed || src[p] < 0) return;
    double sum = 0;
#pragma unroll 8 /* the slices' loads in flight together: this kernel only reads memory */
    for (int b = 0; b < blocks; b++) sum += partial[(size_t)b * packed + p];
    g[src[p]] = (float)sum;
}

static __global__ void pack_kernel(const float *params, const int *src, size_t n, float *wp)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) wp[i] = src[i] >= 0 ? params[src[i]] : 0.0f;
}

/* The fragment copies: with E = 4, floats 0 and 1 of each 4 the big parts (the top 10 mantissa
 * bits, tc::split's), 2 and 3 what is left of the same two weights. */
static __global__ void frag_kernel(const float *params, const int *fsrc, size_t n, int E,
                                   float *wf)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
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
    int *src = NULL, *fsrc = NULL, rows;
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
    if (!src || !fsrc) {
        st = vx_err_set(e, VX_ERR_NOMEM, "ppo: out of memory");
        goto fail;
    }
    vx_pf_layout(L, &f->nt, src);
    vx_pf_frags(&f->nt, f->passes, src, fsrc);
    st = vx_mem_alloc(&f->mem, f->packed * 4, &f->wp, e);
    if (!st) st = vx_mem_alloc(&f->mem, f->packed * sizeof *src, &f->src, e);
    if (!st) st = vx_mem_alloc(&f->mem, f->frags * 4, &f->wf, e);
    if (!st) st = vx_mem_alloc(&f->mem, f->frags * sizeof *fsrc, &f->fsrc, e);
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
    VX_CUDA_CHECK(cudaMemsetAsync(f->partial, 0, (size_t)f->max_blocks * f->packed * 4, setup));
    VX_CUDA_CHECK(cudaStreamSynchronize(setup));
    VX_CUDA_CHECK(f->passes == 1 ? allow_smem<1>(optin) : allow_smem<3>(optin));
    vx_cuda_stream_destroy(dev, setup);
    free(src);
    free(fsrc);
    *out = f;
    return VX_OK;
fail:
    if (setup) vx_cuda_stream_destroy(dev, setup);
    free(src);
    free(fsrc);
    ppo_fused_free(f);
    return st;
}

extern "C" vx_status ppo_fused_pack(ppo_fused *f, const float *params, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    pack_kernel<<<(unsigned)((f->packed + 255) / 256), 256, 0, s>>>(params, f->src, f->packed,
                                                                    f->wp);
    VX_CUDA_LAUNCH_CHECK(s);
    frag_kernel<<<(unsigned)((f->frags + 255) / 256), 256, 0, s>>>(params, f->fsrc, f->frags,
                                                                   f->nt.E, f->wf);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

extern "C" vx_status ppo_fused_act(ppo_fused *f, const ppo_fused_act_args *a, cudaStream_t s,
                                   vx_err *e)
{
    vx_status st = VX_OK;
    if (a->N < 1) return VX_OK;
    unsigned blocks = (unsigned)ppo_fused_act_blocks(a->N);
    size_t bytes = vx_pf_smem(&f->nt, 2 * ACT_ROWS);
    if (f->passes == 1) act_kernel<1><<<blocks, THREADS, bytes, s>>>(f->nt, f->wp, f->wf, *a);
    else act_kernel<3><<<blocks, THREADS, bytes, s>>>(f->nt, f->wp, f->wf, *a);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

extern "C" vx_status ppo_fused_grad(ppo_fused *f, const ppo_fused_grad_args *a, float *grads,
                                    cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    int blocks = ppo_fused_grad_blocks(f, a->M);
    size_t bytes = vx_pf_smem(&f->nt, f->rows);
    if (a->M < 1 || blocks > f->max_blocks)
        return vx_err_set(e, VX_ERR_ARG, "ppo: a minibatch of %d rows (at most %d)", a->M,
                          f->max_blocks * f->rows);
    if (f->passes == 1)
        grad_kernel<1>
            <<<blocks, THREADS, bytes, s>>>(f->nt, f->wp, f->wf, f->rows, *a, f->partial,
                                            f->packed);
    else
        grad_kernel<3>
            <<<blocks, THREADS, bytes, s>>>(f->nt, f->wp, f->wf, f->rows, *a, f->partial,
                                            f->packed);
    VX_CUDA_LAUNCH_CHECK(s);
    sum_kernel<<<(unsigned)((f->packed + 255) / 256), 256, 0, s>>>(f->partial, blocks, f->src,
                                                                   f->packed, grads);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

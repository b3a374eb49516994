/* act_fused.cu — the DQN's acting steps in one launch (act_fused.h): VX_AF_ROWS environments a
 * block and, each step, their observations into shared memory, the trunk's layers, the heads'
 * first layers (side by side: one product) and each head's second layer on tensor cores
 * (tc_tile.cuh), the dueling aggregation, then a thread per environment for its actions and its
 * step, and a warp per environment for its n-step emit (act_step.cuh). The last block to finish
 * moves the rollout's counters on: every block has read them by then.
 *
 * Compiled with --fmad=false (CMakeLists.txt), as the environments' own kernel is: the step runs
 * vx_env_step_one, whose results must match the CPU's bit for bit; the products are tensor-core
 * instructions, which the flag does not touch.
 *
 * Shared memory of a block (floats, each buffer on 8 floats; act_fused_plan.c's vx_af_smem;
 * pad: 4 floats, 8 in BF16):
 *   xs   R × (Dp + pad): the observations, zero past the input's width (the emit writes the
 *        next step's)
 *   act  R × (r16(H_l) + pad) a trunk layer: its activations after the ReLU
 *   h1   R × (r16(G·Hh) + pad): the heads' first layers, after the ReLU; after the products,
 *        each warp's 3 ints for the emit (row 0 onwards)
 *   out  R × (W2 + 4): the heads' second layers, with their biases
 *   qs   R × r8(out_dim): the Q-network's output rows, which acting reads
 *   pick R × VX_AF_PICK words: each row's greedy actions (from the dueling aggregation, one
 *        atom) and its branches' first blocks of draws (from the warps after the dueling
 *        aggregation's, beside it)
 * In BF16 a product whose K is not a multiple of 16 reads A's columns up to K rounded to 16
 * against zero rows of B: the activation buffers' padding, zeroed once at the start, and, for a
 * head's second layer, the next head's first 8 activations — or, past the last head, the
 * padding, which from the second step on also holds the emit's ints in row 0 (small slot and
 * count values: finite, so their products with the zero rows are 0). */
#include "../nn/tc_tile.cuh"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "act_fused.h"
#include "act_fused_plan.h"
#include "act_step.cuh"

#include <stdlib.h>
#include <string.h>

#define THREADS VX_AF_THREADS
#define ROWS VX_AF_ROWS
/* the emit's 3 ints a warp live in h1, at least ROWS × (16 + 4) floats */
static_assert(3 * (THREADS / 32) <= ROWS * 20, "h1 holds every warp's emit ints");

typedef vx_af_net net;

struct dqn_act_fused {
    net t;
    int acting; /* VX_ACTING_TF32, _TF32X3 or _BF16 */
    vx_device *dev;
    vx_mem mem;
    float *copies; /* the packed biases, then the fragments */
    int *map;      /* each copy float's (bf16's) index in the flat parameters (−1: zero) */
    int smem;      /* bytes of shared memory a block */
};

static __device__ inline int r16(int n) { return (n + 15) & ~15; }
static __device__ inline int r8(int n) { return (n + 7) & ~7; }

using tc::frag;
using tc::row_major;

extern __shared__ __align__(128) float smem[]; /* the block's buffers (carve) */

/* p, a pointer into the block's buffers, as one the compiler knows is in shared memory
 * (derived from the shared array itself). Through the trunk's loop-carried input pointer, and the
 * layer pointers read back from the buffers' table, that knowledge was lost whatever the
 * __builtin_assume said: two in three of the products' loads of A were generic loads (PTX ld, not
 * ld.shared), which wait in the queue of the global ones — in a profile, most of the products'
 * long-scoreboard waits. */
static __device__ inline float *in_smem(const float *p) { return smem + (p - smem); }

/* A block's shared-memory buffers (the top comment), as vx_af_smem sizes them. */
typedef struct {
    float *xs, *act[VX_QNET_MAX_TRUNK], *h1, *out, *qs;
    int ldx, ld[VX_QNET_MAX_TRUNK], ldh, ldo, ldq;
    int *pick; /* R × VX_AF_PICK: a row's greedy actions, then its first blocks of draws */
} smem_bufs;

/* Row r's greedy actions (one a branch), and its branches' first blocks of draws. */
static __device__ inline int *row_greedy(const smem_bufs &m, int r)
{
    return m.pick + r * VX_AF_PICK;
}
static __device__ inline vx_u32x4 *row_draws(const smem_bufs &m, int r)
{
    return (vx_u32x4 *)(row_greedy(m, r) + VX_QNET_MAX_BRANCHES);
}

static __device__ inline smem_bufs carve(const net &t, float *p)
{
    const int R = ROWS;
    smem_bufs m;
    m.xs = p, m.ldx = t.Dp + t.pad;
    p += R * m.ldx;
    for (int l = 0; l < t.n; l++) {
        m.ld[l] = r16(t.H[l]) + t.pad;
        m.act[l] = p, p += R * m.ld[l];
    }
    m.h1 = p, m.ldh = r16(t.G * t.Hh) + t.pad;
    p += R * m.ldh;
    m.out = p, m.ldo = t.W2 + 4;
    p += R * m.ldo;
    m.qs = p, m.ldq = r8(t.out_dim);
    p += R * m.ldq;
    m.pick = (int *)p;
    return m;
}

/* The block's R observations (rows row0… of obs; zeros past N) into m.xs, unless they are there
 * already (load 0), then the network's products: the heads' outputs, with their biases, in
 * m.out. Every thread calls it; it ends with them complete. */
template <int P>
static __device__ void products(const net &t, const float *wp, const float *wf, const float *obs,
                                int N, int row0, const smem_bufs &m, int load)
{
    const int R = ROWS;
    /* shared memory, as the compiler would not know through the pointers: ld.shared and
     * st.shared, not generic accesses */
    __builtin_assume(__isShared(m.xs) && __isShared(m.h1) && __isShared(m.out) && __isShared(m.qs));
    for (int x = threadIdx.x; load && x < R * t.Dp; x += THREADS) {
        int r = x / t.Dp, d = x % t.Dp, i = row0 + r;
        m.xs[r * m.ldx + d] = i < N && d < t.in ? obs[(size_t)i * t.in + d] : 0.0f;
    }
    if (load) __syncthreads();
    /* the trunk */
    const float *h = m.xs;
    int ldh_in = m.ldx, K = t.Dp;
    for (int l = 0; l < t.n; l++) {
        int H = t.H[l];
        float *act = in_smem(m.act[l]);
        tc::gemm<P, tc::RELU, row_major, frag>(1, R, H, K, in_smem(h), ldh_in, 0, wf + t.fw[l],
                                               H / 8, 0, act, m.ld[l], 0, wp + t.b[l]);
        __syncthreads();
        h = act, ldh_in = m.ld[l], K = H;
    }
    /* the heads' first layers, side by side */
    int W1 = t.G * t.Hh;
    tc::gemm<P, tc::RELU, row_major, frag>(1, R, W1, K, in_smem(h), ldh_in, 0, wf + t.fh1, W1 / 8,
                                           0, m.h1, m.ldh, 0, wp + t.bh1);
    __syncthreads();
    /* each head's second layer: independent products, one barrier after them all, each head's
     * strips on warps of their own (w0: the first) */
    for (int g = 0, w0 = 0; g < t.G; w0 += t.P2[g] / 8, g++)
        tc::gemm<P, tc::BIAS, row_major, frag>(1, R, t.P2[g], t.Hh, m.h1 + g * t.Hh, m.ldh, 0,
                                               wf + t.fh2[g], t.P2[g] / 8, 0, m.out + t.o2[g],
                                               m.ldo, 0, wp + t.bh2 + t.o2[g], w0);
    __syncthreads();
}

/* The dueling aggregation into m.qs, in the CPU's order (qnet_impl.h): each head's output with
 * its bias (added by the product, as the CPU adds it), the mean of a branch's advantages over its
 * actions, Q = (V + A) − mean; with one atom also each branch's greedy action into the row's picks,
 * as vx_loss_argmax finds it in the row (the first largest), by the thread that made the branch's
 * values (the acting thread's scan of the row had been a chain of dependent loads). Ends with the
 * rows complete. */
static __device__ void dueling(const net &t, const smem_bufs &m)
{
    const int R = ROWS;
    __builtin_assume(__isShared(m.out) && __isShared(m.qs) && __isShared(m.pick));
    int per = t.nb * t.Z;
    for (int x = threadIdx.x; x < R * per; x += THREADS) {
        int r = x / per, d = (x % per) / t.Z, z = x % t.Z;
        const float *o = m.out + r * m.ldo; /* the outputs with their biases */
        float v = o[t.o2[0] + z];
        int n = t.branch[d], c = t.o2[1 + d];
        float mean = 0;
        for (int k = 0; k < n; k++) mean += o[c + k * t.Z + z];
        mean /= n;
        float *q = m.qs + r * m.ldq + t.out_off[d], best = 0;
        int greedy = 0;
        for (int k = 0; k < n; k++) {
            float x = v + o[c + k * t.Z + z] - mean;
            q[k * t.Z + z] = x;
            if (k == 0 || x > best) best = x, greedy = k;
        }
        if (t.Z == 1) row_greedy(m, r)[d] = greedy;
    }
    __syncthreads();
}

static __device__ inline void prefetch_l1(const void *p)
{
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

/* Environment i's first loads of its step and emit, into L1 ahead of them (the weights the
 * products stream through L1 would have evicted them earlier): its state (read here), the next
 * bar's prices and features, its n-step ring's counters and its running return. Each was a
 * round trip to L2 in the chain of one thread's dependent loads. */
static __device__ inline void prefetch_step(const dqn_act_fused_args &a, int i)
{
    const vx_env_params &p = a.envp;
    int64_t row = a.states[i].row, t1 = row + 1;
    prefetch_l1(p.open + t1), prefetch_l1(p.high + t1), prefetch_l1(p.low + t1);
    prefetch_l1(p.close + t1);
    if (p.reward_kind) prefetch_l1(p.reward_unit + row);
    const float *f = p.features + t1 * VX_MARKET_FEATURES; /* 180 bytes: two or three lines */
    prefetch_l1(f), prefetch_l1(f + 32), prefetch_l1(f + VX_MARKET_FEATURES - 1);
    prefetch_l1(a.emit.ns.count + i), prefetch_l1(a.emit.ns.head + i);
    prefetch_l1(a.emit.ep_ret + i);
}

/* The forward pass alone (a.actions NULL: the tests' Q rows), or a.steps whole steps of the
 * block's environments. The environments of a block depend on no other block's, so the steps
 * need no barrier between blocks: a rollout is one launch, not a graph node a step (a step's
 * launch and the loop's turn had been a quarter of its time). The counters are read once at the
 * start, and moved on by the last block to finish. */
template <int P>
static __global__ void __launch_bounds__(THREADS)
    act_kernel(net t, const float *wp, const float *wf, dqn_act_fused_args a)
{
    float *base = smem;
    const int R = ROWS;
    const smem_bufs m = carve(t, base);
    int row0 = blockIdx.x * R;
    if (P == tc::BF16) { /* its products read A's columns up to K rounded to 16 (the top) */
        for (float *x = base + threadIdx.x; x < m.qs + R * m.ldq; x += THREADS) *x = 0.0f;
        __syncthreads();
    }
    if (!a.actions) {
        products<P>(t, wp, wf, a.obs, a.N, row0, m, 1);
        dueling(t, m);
        for (int x = threadIdx.x; a.q && x < R * t.out_dim; x += THREADS) {
            int r = x / t.out_dim, c = x % t.out_dim, i = row0 + r;
            if (i < a.N) a.q[(size_t)i * t.out_dim + c] = m.qs[r * m.ldq + c];
        }
        return;
    }
    int t0 = *a.tcount, warp = threadIdx.x >> 5, i = row0 + threadIdx.x;
    unsigned long long step0 = *a.step;
    double eps = *a.eps;
    for (int k = 0; k < a.steps; k++) {
        products<P>(t, wp, wf, a.obs, a.N, row0, m, k == 0);
        /* beside the dueling aggregation (its R · branches · atoms items on the first threads),
         * the warps after them make each row's branches' first blocks of draws, a thread a block
         * (the row's acting thread would make them one after another), and the last warp fetches
         * the step's first loads into L1 */
        int p0 = (R * t.nb * t.Z + 31) & ~31, j = threadIdx.x - p0;
        int idle = p0 + R * t.nb <= THREADS - 32;
        if (idle && j >= 0 && j < R * t.nb && row0 + j / t.nb < a.N)
            row_draws(m, j / t.nb)[j % t.nb] =
                vx_philox_block(a.seed, VX_ACT_STREAM + (uint64_t)(row0 + j / t.nb),
                                vx_act_first_block(step0 + k, j % t.nb));
        int last = threadIdx.x - (THREADS - 32);
        if (idle && last >= 0 && last < R && row0 + last < a.N) prefetch_step(a, row0 + last);
        dueling(t, m);
        if (threadIdx.x < R && i < a.N)
            act_and_step(a.shape, m.qs + threadIdx.x * m.ldq, i, eps, a.seed, step0 + k, a.actions,
                         a.envp, a.states, a.next, a.rew, a.te, a.tr, a.final_obs,
                         t.Z == 1 ? row_greedy(m, threadIdx.x) : NULL,
                         idle ? row_draws(m, threadIdx.x) : NULL);
        __syncthreads();                    /* the block's environments stepped */
        int *meta = (int *)m.h1 + 3 * warp; /* h1: free until the next step's products */
        for (int r = warp; r < R; r += THREADS / 32)
            if (row0 + r < a.N)
                emit_one(a.emit, a.N, t0 + k, row0 + r, meta, a.obs, a.actions, a.rew, a.te, a.tr,
                         a.next, a.final_obs, m.xs + r * m.ldx);
        __syncthreads(); /* the next observations in obs and in xs, for the next step */
    }
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(a.done, 1u) == gridDim.x - 1) { /* the last block: all have read them */
            *a.done = 0;
            *a.step = step0 + (unsigned long long)a.steps;
            a.tcount[0] = t0 + a.steps; /* as the per-layer steps leave it (read by nothing now) */
        }
    }
}

/* The copies from the flat parameters, a thread a map entry: the packed biases as they are, the
 * fragments as they are (E = 2), or, with E = 4, floats 0 and 1 of each 4 the big parts (the top
 * 10 mantissa bits, tc::split's) and 2 and 3 what is left of the same two weights, or in bf16
 * (rounded to nearest, even), two to a float. */
static __global__ void pack_kernel(const float *params, const int *map, int packed, int entries,
                                   int E, int bf16, float *copies)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= entries) return;
    float v = map[i] >= 0 ? params[map[i]] : 0.0f;
    if (i >= packed && bf16) {
        ((__nv_bfloat16 *)(copies + packed))[i - packed] = __float2bfloat16_rn(v);
        return;
    }
    if (i >= packed && E == 4) {
        float big = __uint_as_float(__float_as_uint(v) & 0xffffe000u);
        v = (i - packed) & 2 ? v - big : big;
    }
    copies[i] = v;
}

/* ---- the host side ------------------------------------------------------------------------- */

/* Dynamic shared memory past 48 KB: the device's most, always (the limit is the kernel's, for the
 * whole process: trials of other shapes set it too, and a smaller one would refuse a wider
 * neighbour's launches). */
static cudaError_t allow_smem(int acting, int bytes)
{
    const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
    if (acting == VX_ACTING_BF16) return cudaFuncSetAttribute(act_kernel<tc::BF16>, a, bytes);
    if (acting == VX_ACTING_TF32X3) return cudaFuncSetAttribute(act_kernel<3>, a, bytes);
    return cudaFuncSetAttribute(act_kernel<1>, a, bytes);
}

extern "C" vx_status dqn_act_fused_create(const vx_qnet_layout *L, int acting, vx_device *dev,
                                          dqn_act_fused **out, vx_err *e)
{
    *out = NULL;
    vx_status st = vx_cuda_enter(dev, e);
    if (st) return st;
    int optin = 0, *map = NULL;
    char why[96];
    size_t copies;
    dqn_act_fused *f = NULL;
    if (acting != VX_ACTING_TF32 && acting != VX_ACTING_TF32X3 && acting != VX_ACTING_BF16)
        return vx_err_set(e, VX_ERR_ARG, "dqn: fused acting has no precision %d", acting);
    VX_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                         vx_device_index(dev)));
    if (!vx_af_fits(L, acting, (size_t)optin, why, sizeof why))
        return vx_err_set(e, VX_ERR_UNSUPPORTED, "dqn: fused acting does not take %s", why);
    f = (dqn_act_fused *)calloc(1, sizeof *f);
    if (!f) return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    f->acting = acting, f->dev = dev;
    vx_mem_init(&f->mem, dev, "dqn fused acting");
    vx_af_layout(L, acting, &f->t, NULL);
    copies = (size_t)f->t.packed + (size_t)f->t.frags;
    f->smem = (int)vx_af_smem(&f->t);
    map = (int *)malloc((size_t)f->t.maps * sizeof *map);
    if (!map) {
        st = vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
        goto fail;
    }
    vx_af_layout(L, acting, &f->t, map);
    st = vx_mem_alloc(&f->mem, copies * 4, &f->copies, e);
    if (!st) st = vx_mem_alloc(&f->mem, (size_t)f->t.maps * sizeof *map, &f->map, e);
    if (st) goto fail;
    /* not cudaMemcpy: from pageable memory it returns once the map is staged, its DMA maybe still
     * on the way, and a pack queued at once on the caller's non-blocking stream could read the
     * map half copied; the upload waits for its own stream */
    st = vx_device_upload(dev, f->map, map, (size_t)f->t.maps * sizeof *map, e);
    if (st) goto fail;
    VX_CUDA_CHECK(allow_smem(acting, optin));
    free(map);
    *out = f;
    return VX_OK;
fail:
    free(map);
    dqn_act_fused_free(f);
    return st;
}

extern "C" void dqn_act_fused_free(dqn_act_fused *f)
{
    if (!f) return;
    vx_mem_release(&f->mem);
    free(f);
}

extern "C" vx_status dqn_act_fused_pack(dqn_act_fused *f, const float *params, cudaStream_t s,
                                        vx_err *e)
{
    vx_status st = VX_OK;
    int n = f->t.maps;
    pack_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(params, f->map, f->t.packed, n, f->t.E,
                                                            f->t.bf16, f->copies);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

extern "C" vx_status dqn_act_fused_step(dqn_act_fused *f, const dqn_act_fused_args *a,
                                        cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    unsigned blocks = (unsigned)((a->N + ROWS - 1) / ROWS);
    /* the emit keeps each next observation in the block's input rows: a row is one */
    if (a->actions && f->t.in != VX_OBS_DIM)
        return vx_err_set(e, VX_ERR_ARG, "dqn: fused acting steps a network of %d inputs, not %d",
                          f->t.in, VX_OBS_DIM);
    const float *wp = f->copies, *wf = f->copies + f->t.packed;
    const size_t bytes = (size_t)f->smem;
    if (f->acting == VX_ACTING_BF16)
        act_kernel<tc::BF16><<<blocks, THREADS, bytes, s>>>(f->t, wp, wf, *a);
    else if (f->acting == VX_ACTING_TF32X3)
        act_kernel<3><<<blocks, THREADS, bytes, s>>>(f->t, wp, wf, *a);
    else act_kernel<1><<<blocks, THREADS, bytes, s>>>(f->t, wp, wf, *a);
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

extern "C" size_t dqn_act_fused_reserved(const dqn_act_fused *f) { return f->mem.bytes; }

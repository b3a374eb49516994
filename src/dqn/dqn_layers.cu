/* dqn_layers.cu — the DQN's update layer by layer (dqn_layers.h): layers_kernel, its phases and
 * its launch.
 *
 * Built with --fmad=false (CMakeLists.txt), as dqn_fused.cu: the dueling aggregation and the
 * loss round as the CPU's do. */
#include "dqn_layers.h"

#include <cooperative_groups.h>

using namespace fused;

#define PAD VX_PF_PAD

/* The kernel's arguments. */
struct layers_args {
    net t;
    const float *wp, *wf, *wpt, *wft; /* the online and the target's copies */
    float *act;                       /* activations and gradients (act_of, dact_of, dout_of) */
    vx_dl_plan p;
    float *partial; /* a slice a chunk of rows, each laid out as the packed weights */
    size_t packed;
    update_args u;
};

/* Floats of all the hidden layers' rows (Σ W). */
static __device__ size_t widths(const net &t)
{
    size_t w = 0;
    for (int l = 0; l < t.n; l++) w += (size_t)t.W[l];
    return w;
}

/* Layer l's activations over pass q (0: the target over s′, 1: the online network over s′,
 * 2: over s): B rows of W[l]. */
static __device__ float *act_of(const layers_args &k, int l, int q)
{
    size_t B = (size_t)k.u.a.B, off = 0;
    for (int i = 0; i < l; i++) off += (size_t)k.t.W[i];
    return k.act + 3 * B * off + q * B * (size_t)k.t.W[l];
}

/* The gradient with respect to layer l's output over s (after its ReLU's mask): B rows of W[l]. */
static __device__ float *dact_of(const layers_args &k, int l)
{
    size_t B = (size_t)k.u.a.B, off = 0;
    for (int i = 0; i < l; i++) off += (size_t)k.t.W[i];
    return k.act + 3 * B * widths(k.t) + B * off;
}

/* The gradient with respect to the heads' 16 outputs over s: B rows of HEAD. */
static __device__ float *dout_of(const layers_args &k)
{
    return k.act + 4 * (size_t)k.u.a.B * widths(k.t);
}

/* ---- staging --------------------------------------------------------------------------------- */

/* 16 bytes from global memory into shared memory, asynchronously (through L2 only: what other
 * blocks wrote before the grid's last barrier is seen). cp_wait waits for this thread's. */
static __device__ inline void cp16(float *dst, const float *src)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

static __device__ inline void cp_wait(void) { asm volatile("cp.async.wait_all;" ::: "memory"); }

/* rows × cols (cols a multiple of 4, rows 16-byte aligned) from src (ld floats a row) into dst
 * (ldd), rows from `valid` on zero. Asynchronous: cp_wait, then the block's barrier. */
static __device__ void stage_rows(float *dst, int ldd, const float *src, size_t ld, int rows,
                                  int valid, int cols)
{
    int per = cols >> 2;
    for (int i = threadIdx.x; i < rows * per; i += THREADS) {
        int r = i / per, c = (i - r * per) << 2;
        float *d = dst + r * ldd + c;
        if (r < valid) cp16(d, src + (size_t)r * ld + c);
        else *(float4 *)d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

/* Rows row0.. of the input x (B × in) into dst, zero past the batch and the input's width (Dp
 * columns): x's rows are not 16-byte aligned, so a float at a time. */
static __device__ void stage_input(float *dst, int ldd, const net &t, const float *x, int row0,
                                   int rows, int B)
{
    for (int i = threadIdx.x; i < rows * t.Dp; i += THREADS) {
        int r = i / t.Dp, d = i - r * t.Dp, j = row0 + r;
        dst[r * ldd + d] = j < B && d < t.in ? x[(size_t)j * t.in + d] : 0.0f;
    }
}

/* Columns n0 .. n0 + ct of a frag B of K rows and N columns (N / 8 tiles a row of tiles) into
 * dst as a frag B of ct columns (ct / 8 tiles a row): each row of tiles' part is contiguous. */
static __device__ void stage_frag(float *dst, const float *b, int K, int N, int n0, int ct, int E)
{
    int row = ct * 4 * E, per = row >> 2; /* (ct / 8) tiles × 32 lanes × E floats */
    for (int i = threadIdx.x; i < (K / 8) * per; i += THREADS) {
        int kt = i / per, c = (i - kt * per) << 2;
        cp16(dst + (size_t)kt * row + c, b + ((size_t)kt * (N / 8) + n0 / 8) * 32 * E + c);
    }
}

/* rows × cols of src (lds) into global dst (ld), 16 bytes at a time, past L1 (another block
 * reads them after the grid's barrier). */
static __device__ void store_rows(float *dst, size_t ld, const float *src, int lds, int rows,
                                  int cols)
{
    int per = cols >> 2;
    for (int i = threadIdx.x; i < rows * per; i += THREADS) {
        int r = i / per, c = (i - r * per) << 2;
        __stcg((float4 *)(dst + (size_t)r * ld + c), *(const float4 *)(src + r * lds + c));
    }
}

/* Where the kernel's time goes, for measuring it (-DVX_DL_TIMING=N in the CUDA flags): block 0
 * reads the global timer after each phase and after each barrier, and every Nth launch prints
 * the spans, µs — each phase's own work, then its wait at the barrier, in order — and, within
 * the second forward phase and the loss phase, its first item's steps. Off (0) in
 * every build that is not measuring. */
#ifndef VX_DL_TIMING
#define VX_DL_TIMING 0
#endif
#if VX_DL_TIMING
__device__ unsigned long long dl_time[16], dl_sub[16];
__device__ unsigned dl_launches;
#define DL_MARK(i)                                                                                 \
    if (blockIdx.x == 0 && threadIdx.x == 0)                                                       \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(dl_time[i]))
/* within a phase: block 0's first item of it, at mark i of dl_sub */
#define DL_SUB(i, first)                                                                           \
    if (blockIdx.x == 0 && threadIdx.x == 0 && (first))                                            \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(dl_sub[i]))
#else
#define DL_MARK(i) (void)0
#define DL_SUB(i, first) (void)(first)
#endif

/* ---- the phases ------------------------------------------------------------------------------ */

/* A forward tile's product, C = ReLU(A · B + bias) (rt × ct, inner K; B the tile's weights,
 * staged): strips of 16 × 32 where they give no warp more than one. A TF32 tile of 96 × 64 is
 * then 12 strips on the 16 warps, each done in one go, where tc::gemm (the widest strips that
 * still give every warp one) makes 24 strips of 16 × 16 and half the warps run two in turn, each
 * loading its A again; 3×TF32's 96 × 32 tile, 6 strips where it made 24 of 16 × 8. Batch 1,024 on
 * an H100 (2026-12-07): forward layer 1's product 4.2 µs against 6.2 (TF32); the update in a loop
 * 120.5 against 124.6 µs (TF32), 163.5 against 175.6 (3×TF32). Every element of C takes the same
 * products in the same order whatever the strips' width, so the bits are the same. */
template <int P>
static __device__ void tile_gemm(int rt, int ct, int K, const float *as, int lda, const float *bs,
                                 float *cs, int ldc, const float *bias)
{
    if (ct % 32 == 0 && (rt / 16) * (ct / 32) <= THREADS / 32)
        tc::block_gemm<4, P, tc::RELU, tc::row_major, tc::sfrag>(1, rt, ct, K, as, lda, 0, bs,
                                                                 ct / 8, 0, cs, ldc, 0, bias, 0);
    else
        tc::gemm<P, tc::RELU, tc::row_major, tc::sfrag>(1, rt, ct, K, as, lda, 0, bs, ct / 8, 0, cs,
                                                        ldc, 0, bias);
}

/* A chunk's weight gradient for a column tile, C = Aᵀ · D (K × cc, inner: the chunk's rows; A
 * the layer's input, column-major view): a strip as wide as the tile (cc = 64 in TF32, 32 in
 * 3×TF32), so the K / 16 strips (at most 16: one a warp) each read A once. In a loop at batch
 * 1,024 on an H100 (2026-12-07): 119.2–119.7 µs against 120.7–120.8 with tc::gemm's 16 × 16
 * strips (TF32); 3×TF32, 16 × 32 against 16 × 16 strips: 173.7–174.3 against 175.6–175.7. The same
 * bits either way. */
template <int P>
static __device__ void wgrad_gemm(int K, int cc, int rows, const float *as, int lda,
                                  const float *ds, int ldd, float *part, int ldc)
{
    if (cc == 64 && K / 16 <= THREADS / 32)
        tc::block_gemm<8, P, tc::STORE, tc::col_major, tc::row_major>(
            1, K, cc, rows, as, lda, 0, ds, ldd, 0, part, ldc, 0, 0, 0);
    else if (cc == 32 && K / 16 <= THREADS / 32)
        tc::block_gemm<4, P, tc::STORE, tc::col_major, tc::row_major>(
            1, K, cc, rows, as, lda, 0, ds, ldd, 0, part, ldc, 0, 0, 0);
    else
        tc::gemm<P, tc::STORE, tc::col_major, tc::row_major>(1, K, cc, rows, as, lda, 0, ds, ldd, 0,
                                                             part, ldc, 0);
}

/* Layer l's forward pass over the three passes' rows: tiles of rt rows (of one pass) × ct
 * columns. */
template <int P> static __device__ void forward_phase(const layers_args &k, int l, float *sm)
{
    const net &t = k.t;
    const vx_dl_plan &p = k.p;
    int B = k.u.a.B, N = t.W[l], K = l ? t.W[l - 1] : t.Dp, rt = p.rt;
    int per_pass = (B + rt - 1) / rt, cts = (N + p.ct - 1) / p.ct;
    int lda = K + PAD, ldc = p.ct + PAD;
    float *as = sm, *bs = as + (size_t)rt * lda, *cs = bs + (size_t)K * p.ct * t.E / 2;
    for (int it = blockIdx.x; it < 3 * per_pass * cts; it += gridDim.x) {
        int j = it % cts, tile = it / cts, q = tile / per_pass;
        int r0 = (tile % per_pass) * rt, rows = min(rt, B - r0);
        int n0 = j * p.ct, ct = min(p.ct, N - n0);
        const float *wf = q ? k.wf : k.wft, *wp = q ? k.wp : k.wpt;
        bool first = l == 1 && it == (int)blockIdx.x;
        DL_SUB(0, first);
        if (l == 0) stage_input(as, lda, t, q == 2 ? k.u.a.b.obs : k.u.a.b.next_obs, r0, rt, B);
        else stage_rows(as, lda, act_of(k, l - 1, q) + (size_t)r0 * K, K, rt, rows, K);
        stage_frag(bs, wf + t.fw[l], K, N, n0, ct, t.E);
        cp_wait();
        __syncthreads();
        DL_SUB(1, first);
        tile_gemm<P>(rt, ct, K, as, lda, bs, cs, ldc, wp + t.b[l] + n0);
        __syncthreads();
        DL_SUB(2, first);
        store_rows(act_of(k, l, q) + (size_t)r0 * N + n0, N, cs, ldc, rows, ct);
        __syncthreads(); /* the tile's buffers free for the next */
        DL_SUB(3, first);
    }
}

/* The heads over the three passes, the dueling aggregation, the loss, and the gradient down to
 * the heads' hidden layer's output, 16 rows a block — update_kernel's arithmetic. */
template <int P> static __device__ void loss_phase(const layers_args &k, float *sm)
{
    const int R = 16;
    const net &t = k.t;
    const update_args &u = k.u;
    int B = u.a.B, top = t.top, ldh = top + PAD, O = u.O;
    /* out: the three passes' heads' outputs (then, the first R rows, the gradients); q: their Q
     * rows, the target's over s′, the online network's over s′ and over s, then dq */
    float *hid = sm, *out = hid + 3 * R * ldh, *stage = out + 3 * R * OUT_LD;
    float *qt = stage + WARPS * 256, *qn = qt + R * QLD, *qs = qn + R * QLD, *dq = qs + R * QLD;
    for (int it = blockIdx.x; it < (B + R - 1) / R; it += gridDim.x) {
        int row0 = it * R, rows = min(R, B - row0);
        bool first = it == (int)blockIdx.x;
        DL_SUB(4, first);
        for (int q = 0; q < 3; q++)
            stage_rows(hid + q * R * ldh, ldh, act_of(k, t.n - 1, q) + (size_t)row0 * top, top, R,
                       rows, top);
        cp_wait();
        __syncthreads();
        DL_SUB(5, first);
        for (int q = 0; q < 3; q++) {
            const float *wf = q ? k.wf : k.wft, *bh = (q ? k.wp : k.wpt) + t.bh;
            float *o = out + q * R * OUT_LD;
            tc::gemm_splitk<P, tc::row_major, tc::frag>(
                R, top, HEAD_CHUNKS, hid + q * R * ldh, ldh, wf + t.fwh, HEAD / 8, stage,
                [&](int r, int c, float v) { o[r * OUT_LD + c] = v + bh[c]; });
        } /* gemm_splitk synchronises */
        DL_SUB(6, first);
        duel(u.shape, O, 3 * R, out, qt); /* qt, qn, qs: R rows each, one after another */
        __syncthreads();
        DL_SUB(7, first);
        row_losses(u, R, row0, qs, qn, qt, dq);
        __syncthreads();
        DL_SUB(8, first);
        duel_back(u.shape, O, R, dq, out);
        __syncthreads();
        DL_SUB(9, first);
        float *hs = hid + 2 * R * ldh; /* the online network's over s, masked in place */
        store_rows(dout_of(k) + (size_t)row0 * HEAD, HEAD, out, OUT_LD, rows, HEAD);
        tc::gemm<P, tc::MASK, tc::row_major, tc::frag>(1, R, top, HEAD, out, OUT_LD, 0,
                                                       k.wf + t.fbh, top / 8, 0, hs, ldh, 0);
        __syncthreads();
        store_rows(dact_of(k, t.n - 1) + (size_t)row0 * top, top, hs, ldh, rows, top);
        __syncthreads();
        DL_SUB(10, first);
    }
}

/* The gradient with respect to layer l − 1's output from layer l's (l ≥ 1), over s: scaled by
 * dscale[l], times W_lᵀ, through layer l − 1's ReLU. Tiles of rtb rows × ct columns. */
template <int P> static __device__ void dgrad_phase(const layers_args &k, int l, float *sm)
{
    const net &t = k.t;
    const vx_dl_plan &p = k.p;
    int B = k.u.a.B, N = t.W[l - 1], K = t.W[l], rt = p.rtb;
    int tiles = (B + rt - 1) / rt, cts = (N + p.ct - 1) / p.ct;
    int lda = K + PAD, ldc = p.ct + PAD;
    float *as = sm, *bs = as + (size_t)rt * lda, *cs = bs + (size_t)K * p.ct * t.E / 2;
    float sc = t.dscale[l];
    for (int it = blockIdx.x; it < tiles * cts; it += gridDim.x) {
        int j = it % cts, r0 = (it / cts) * rt, rows = min(rt, B - r0);
        int n0 = j * p.ct, ct = min(p.ct, N - n0);
        stage_rows(as, lda, dact_of(k, l) + (size_t)r0 * K, K, rt, rows, K);
        stage_frag(bs, k.wf + t.fb[l], K, N, n0, ct, t.E);
        stage_rows(cs, ldc, act_of(k, l - 1, 2) + (size_t)r0 * N + n0, N, rt, rows, ct);
        cp_wait();
        __syncthreads();
        if (sc != 1.0f) { /* as backward() scales δ_l once its weight gradient has read it */
            for (int i = threadIdx.x; i < rt * K; i += THREADS) as[(i / K) * lda + i % K] *= sc;
            __syncthreads();
        }
        tc::gemm<P, tc::MASK, tc::row_major, tc::sfrag>(1, rt, ct, K, as, lda, 0, bs, ct / 8, 0, cs,
                                                        ldc, 0);
        __syncthreads();
        store_rows(dact_of(k, l - 1) + (size_t)r0 * N + n0, N, cs, ldc, rows, ct);
        __syncthreads();
    }
}

/* Every weight and bias gradient, chunk by chunk of ch rows over s, chunk c's into slice c:
 * items of a chunk are each layer's column tiles, then the heads. */
template <int P> static __device__ void wgrad_phase(const layers_args &k, float *sm)
{
    const net &t = k.t;
    const vx_dl_plan &p = k.p;
    int B = k.u.a.B, ch = p.ch, chunks = (B + ch - 1) / ch, per = 1;
    for (int l = 0; l < t.n; l++) per += (t.W[l] + p.ct - 1) / p.ct;
    for (int it = blockIdx.x; it < chunks * per; it += gridDim.x) {
        int c = it / per, j = it % per, r0 = c * ch, rows = min(ch, B - r0), l = 0;
        while (l < t.n && j >= (t.W[l] + p.ct - 1) / p.ct) j -= (t.W[l] + p.ct - 1) / p.ct, l++;
        bool heads = l == t.n;
        int K = l == 0 ? t.Dp : t.W[l - 1], N = heads ? HEAD : t.W[l];
        int n0 = heads ? 0 : j * p.ct, cc = heads ? HEAD : min(p.ct, N - n0);
        int lda = K + PAD, ldd = (heads ? HEAD : p.ct) + PAD;
        float *as = sm, *ds = as + (size_t)ch * lda;
        if (l == 0) stage_input(as, lda, t, k.u.a.b.obs, r0, ch, B);
        else stage_rows(as, lda, act_of(k, l - 1, 2) + (size_t)r0 * K, K, ch, rows, K);
        const float *d = heads ? dout_of(k) : dact_of(k, l);
        stage_rows(ds, ldd, d + (size_t)r0 * N + n0, N, ch, rows, cc);
        cp_wait();
        __syncthreads();
        float *part = k.partial + (size_t)c * k.packed;
        int w = heads ? t.wh : t.w[l], b = heads ? t.bh : t.b[l];
        wgrad_gemm<P>(K, cc, ch, as, lda, ds, ldd, part + w + n0, N);
        for (int x = threadIdx.x; x < cc; x += THREADS) { /* the bias: column sums, in row order */
            float sum = 0;
            for (int r = 0; r < ch; r++) sum += ds[r * ldd + x];
            part[b + n0 + x] = sum;
        }
        __syncthreads();
    }
}

/* The update's gradient, phase after phase, the grid waiting for itself between them. */
template <int P> static __global__ void __launch_bounds__(THREADS) layers_kernel(layers_args k)
{
    extern __shared__ __align__(128) float sm[];
    vx_pdl_wait();
    cooperative_groups::grid_group grid = cooperative_groups::this_grid();
    int m = 0;
    DL_MARK(m++);
    for (int l = 0; l < k.t.n; l++) {
        forward_phase<P>(k, l, sm);
        DL_MARK(m++);
        grid.sync();
        DL_MARK(m++);
    }
    loss_phase<P>(k, sm);
    DL_MARK(m++);
    grid.sync();
    DL_MARK(m++);
    for (int l = k.t.n - 1; l >= 1; l--) {
        dgrad_phase<P>(k, l, sm);
        DL_MARK(m++);
        grid.sync();
        DL_MARK(m++);
    }
    wgrad_phase<P>(k, sm);
    DL_MARK(m++);
#if VX_DL_TIMING
    if (blockIdx.x == 0 && threadIdx.x == 0 && ++dl_launches % VX_DL_TIMING == 0) {
        printf("layers_kernel, block 0 (us: work, barrier, ...):");
        for (int i = 1; i < m; i++) printf(" %.2f", (dl_time[i] - dl_time[i - 1]) * 1e-3);
        printf("; all %.2f; forward 1 (stage, product, store):",
               (dl_time[m - 1] - dl_time[0]) * 1e-3);
        for (int i = 1; i <= 3; i++) printf(" %.2f", (dl_sub[i] - dl_sub[i - 1]) * 1e-3);
        printf("; loss (stage, heads, duel, losses, duel back, mask and stores):");
        for (int i = 5; i <= 10; i++) printf(" %.2f", (dl_sub[i] - dl_sub[i - 1]) * 1e-3);
        printf("\n");
    }
#else
    (void)m;
#endif
}

/* ---- the host side ------------------------------------------------------------------------- */

vx_status dqn_layers_prepare(int passes, const vx_dl_plan *p, vx_device *dev, int *grid, vx_err *e)
{
    vx_status st = VX_OK;
    void (*kern)(layers_args) = passes == 1 ? layers_kernel<1> : layers_kernel<3>;
    int optin = 0, per_sm = 0;
    *grid = 0;
    VX_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                         vx_device_index(dev)));
    /* the device's most, not this network's: the limit is the kernel's, for the whole process */
    VX_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    VX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, THREADS, p->smem));
    *grid = per_sm * vx_cuda_sm_count(dev);
    if (*grid < 1)
        st = vx_err_set(e, VX_ERR_CUDA, "dqn: the layer-by-layer update cannot be resident");
fail:
    return st;
}

vx_status dqn_layers_grad(const copies *c, const float *wpt, const float *wft, const vx_dl_plan *p,
                          float *act, int grid, const update_args *u, cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    layers_args k;
    k.t = c->nt, k.wp = c->wp, k.wf = c->wf, k.wpt = wpt, k.wft = wft, k.act = act, k.p = *p;
    k.partial = c->partial, k.packed = c->packed, k.u = *u;
    VX_CUDA_CHECK(vx_pdl_launch_cooperative(c->passes == 1 ? layers_kernel<1> : layers_kernel<3>,
                                            dim3(grid), dim3(THREADS), p->smem, s, 1, k));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

/* tc_tile.cuh — a thread block's matrix products on tensor cores (TF32, mma.sync m16n8k8), for
 * fused kernels that keep a network's activations in shared memory and run a whole forward and
 * backward pass in one launch (internal; device code only).
 *
 * One call, block_gemm, computes C = A · B for G groups at once (the groups: the policy and value
 * trunks side by side), every warp of the block taking strips of 16 rows × 8·NT columns in turn.
 * A and B each are row-major (element (i, k) at p[i·ld + k]) or column-major (at p[i + k·ld]) —
 * the transposes of the backward pass are column-major views of the same buffers, nothing is
 * copied. Each finished strip goes from the accumulators straight to C (shared or global
 * memory): as it is (STORE), plus a bias (BIAS: an output layer), plus a bias and through a ReLU
 * (RELU: a forward layer), or as the
 * gradient through the ReLU whose activations C already holds (MASK: kept where the activation is
 * positive, else 0). gemm_splitk, for the 16-column heads, splits K among the warps and hands its
 * elements to an epilogue.
 *
 * The PTX instruction, not the wmma API: its fragments' layout is documented (PTX ISA,
 * "Matrix Fragments for mma.m16n8k8" with .tf32), so each lane loads its own elements with
 * offsets computed once per strip and the epilogues work on the accumulators in place — where
 * wmma's opaque fragments cost about half the instructions of these small, instruction-bound
 * products. With g = lane / 4 and t = lane % 4, a lane holds
 *   A (16 × 8):  (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)
 *   B (8 × 8):   (t, g), (t + 4, g)
 *   C (16 × 8):  (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)
 *
 * Precision: PASSES = 1 takes both operands as TF32 (10-bit mantissas, the rest of a float's
 * dropped) and multiplies once; with PASSES = 3 each operand is split into a TF32 "big" part and
 * what is left ("small", itself taken as TF32) and the product is big·big + big·small + small·big
 * (the 3×TF32 scheme of CUTLASS): about 21 of float32's 24 mantissa bits per operand, with the
 * products accumulated in float32 — float32's accuracy at three tensor-core products per tile.
 * Accumulation is in float32 either way.
 *
 * B may also come as tc::frag: pre-split and in fragment order (ppo_fused_plan.c's vx_pf_frags
 * lays the weights out so), each 8 × 8 tile 32 lanes' shares in a row, a lane's share its b0 and
 * b1 (TF32) or their big parts then their small parts (3×TF32). A lane then loads a tile's share
 * as one 8- or 16-byte vector and splits nothing: the weights come from global memory (L2), and
 * the scalar loads and the splits were most of these products' instructions and of their
 * waiting. For frag, ldb is B's tiles a row (N / 8).
 *
 * BF16 (P = tc::BF16, for acting only): block_gemm with a row-major A and a frag B whose tiles
 * are 16 × 8 in bf16 (mma.sync m16n8k16, "Matrix Fragments for mma.m16n8k16 with floating point
 * type"): a lane holds
 *   A (16 × 16): pairs (g, 2t…2t+1), (g + 8, 2t…), (g, 2t + 8…), (g + 8, 2t + 8…)
 *   B (16 × 8):  pairs (2t…2t+1, g), (2t + 8…2t + 9, g)
 * each pair one 32-bit register, the lower element in the lower half. A stays float32 in shared
 * memory, each pair loaded as a float2 and rounded to bf16 (to nearest, even) on its way in; B's
 * tiles are a lane's 4 bf16 as one 8-byte vector, so a k16 step loads as many bytes of B as a
 * TF32 k8 step does: half the bytes and half the products of TF32 for the same K. K a multiple
 * of 16 (past a product's real K, B's rows are zero and A's columns finite); rows of A best 8
 * floats past a multiple of 16 wide (float2 loads then free of bank conflicts).
 *
 * Memory: A, a row- or column-major B, and C but for STORE and BIAS are in shared memory (the compiler
 * is told so); a frag B is in global memory, read through the read-only path, and an sfrag B
 * (the same layout) in shared memory.
 *
 * Shapes: M a multiple of 16, N of 8·NT, K of 8 (the caller pads with zeros); ld even and every
 * matrix 8-byte aligned (C's pairs are stored as float2), a row-major A 16-byte aligned with ld
 * a multiple of 4 (its rows are read 16 bytes at a time by ldmatrix: ldsm_a). Bank conflicts of the scalar loads
 * from shared memory depend on the rows' width: 4 floats past a multiple of 16 (the acting
 * kernels' layout) keeps row-major loads of A free of them and gives the column-major views of
 * the backward pass 2-way conflicts; 8 past (PPO's minibatch kernel, VX_PF_PAD) the other way
 * round. */
#ifndef VIXEN_TC_TILE_CUH
#define VIXEN_TC_TILE_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#ifndef TC_BF16_U
#define TC_BF16_U 4 /* BF16 k16 steps loaded ahead in a narrow strip (strip_bf16) */
#endif
#ifndef TC_LDSM
#define TC_LDSM 2 /* a row-major A by ldmatrix: 0 never, 1 always, 2 but in TF32's wide strips */
#endif
#ifndef TC_U_WIDE
#define TC_U_WIDE 2 /* steps loaded ahead in a wide strip (NT > 2; see strip) */
#endif
#ifndef TC_U_NARROW
#define TC_U_NARROW 4 /* steps loaded ahead in a narrow strip (NT ≤ 2; see strip) */
#endif

namespace tc
{

/* The precision template argument P (PASSES) taking bf16: not a count of passes (those are 1 or
 * 3) but the k of its one m16n8k16 product. */
enum { BF16 = 16 };

struct row_major {
};
struct col_major {
};
struct frag {
};
/* A frag B staged in shared memory (a layer-by-layer kernel copies each tile's weights there
 * before its products): the same layout, read with ld.shared rather than the read-only path. */
struct sfrag {
};

template <typename L> struct is_row {
    static const bool value = false;
};
template <> struct is_row<row_major> {
    static const bool value = true;
};

template <typename L> struct is_frag {
    static const bool value = false;
};
template <> struct is_frag<frag> {
    static const bool value = true;
};
template <> struct is_frag<sfrag> {
    static const bool value = true;
};

/* B in shared memory: every layout but a frag one. */
template <typename L> struct b_shared {
    static const bool value = true;
};
template <> struct b_shared<frag> {
    static const bool value = false;
};

/* The offset of element (i, k) of a row- or column-major matrix with leading dimension ld. */
template <typename L> __device__ inline size_t at(int i, int k, int ld)
{
    return is_row<L>::value ? (size_t)i * ld + k : (size_t)i + (size_t)k * ld;
}

/* A frag tile's floats a lane (a BF16 tile's 4 bf16 take 2). */
template <int PASSES> __device__ inline int frag_e() { return PASSES == 3 ? 4 : 2; }

/* The offset of B's element (k, n) — for frag, of its tile, k and n multiples of the tile's
 * height (8, or 16 for BF16) and 8. */
template <typename LB, int PASSES> __device__ inline size_t at_b(int k, int n, int ldb)
{
    const int kt = PASSES == BF16 ? k >> 4 : k >> 3;
    if (is_frag<LB>::value) return ((size_t)kt * ldb + (n >> 3)) * 32 * frag_e<PASSES>();
    return at<LB>(k, n, ldb);
}

/* x as a TF32 operand (PASSES 1), or as big + small TF32 parts (PASSES 3). The tensor cores
 * read a TF32 operand's sign, exponent and top 10 mantissa bits and ignore the other 13, so a
 * float's bits serve as they are (rounded toward zero), and big is x with those 13 bits cleared:
 * one instruction, and one subtraction for small (exact), where a rounding conversion costs
 * several — and these conversions were most of the instructions of the kernels built on this. */
template <int PASSES> __device__ inline void split(float x, uint32_t &big, uint32_t &small)
{
    if (PASSES == 1) {
        big = __float_as_uint(x);
    } else {
        big = __float_as_uint(x) & 0xffffe000u;
        small = __float_as_uint(x - __uint_as_float(big));
    }
}

/* d += a · b, one m16n8k8 TF32 product. */
__device__ inline void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* d += a · b, one m16n8k16 BF16 product (float32 accumulation). */
__device__ inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Two floats as a bf16 pair, each rounded to nearest (even): x in the lower half. */
__device__ inline uint32_t bf16_pair(float2 v)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(v.x, v.y);
    return *(const uint32_t *)&h;
}

/* One step of 8 along K: d[j] += A's 16 × 8 · B's 8 × 8 (tile j), from the raw floats (for a
 * frag B, its parts as loaded). */
template <int NT, int PASSES, bool FRAG>
__device__ inline void step(float (&d)[NT][4], const float (&fa)[4], const float (&fb)[NT][4])
{
    uint32_t ab[4], as[4];
#pragma unroll
    for (int q = 0; q < 4; q++) split<PASSES>(fa[q], ab[q], as[q]);
#pragma unroll
    for (int j = 0; j < NT; j++) {
        uint32_t bb[2], bs[2];
        if (FRAG) {
            bb[0] = __float_as_uint(fb[j][0]), bb[1] = __float_as_uint(fb[j][1]);
            bs[0] = __float_as_uint(fb[j][2]), bs[1] = __float_as_uint(fb[j][3]);
        } else {
            split<PASSES>(fb[j][0], bb[0], bs[0]);
            split<PASSES>(fb[j][1], bb[1], bs[1]);
        }
        if (PASSES == 3) { /* the small products first: they are the ones rounding hurts */
            mma(d[j], as, bb);
            mma(d[j], ab, bs);
        }
        mma(d[j], ab, bb);
    }
}

/* This lane's share of a row-major A's 16 × 8 in shared memory, in one instruction where four
 * scalar loads took four: ldmatrix's four 8 × 8 matrices of 16-bit elements are, read as 32-bit
 * ones, four 8 × 4 blocks — rows 0–7 and 8–15 of columns 0–3, the same of columns 4–7 — and a
 * lane's element of each is (lane / 4, lane % 4), which is the fragment's (g, t), (g + 8, t),
 * (g, t + 4), (g + 8, t + 4). addr: this lane's row of them (lda_rows below), 16-byte aligned. */
__device__ inline void ldsm_a(float (&fa)[4], uint32_t addr)
{
    uint32_t r[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#pragma unroll
    for (int q = 0; q < 4; q++) fa[q] = __uint_as_float(r[q]);
}

/* The shared-memory address whose 16 bytes lane gives ldsm_a: lanes 0–7 rows 0–7 and lanes 8–15
 * rows 8–15 of columns 0–3, lanes 16–31 the same rows of columns 4–7. */
__device__ inline uint32_t lda_rows(const float *a, int lda, int lane)
{
    return (uint32_t)__cvta_generic_to_shared(a + (size_t)((lane & 7) + (lane & 8)) * lda +
                                              ((lane >> 4) << 2));
}

/* This lane's share of one step's operands: A's 16 × 8 at pa (or, with LDSM, from the
 * shared-memory address sa), B's 8 × 8 tiles at pb + j·bn (a frag B from global memory through
 * the read-only path, or from shared memory with BSH). */
template <int NT, int PASSES, bool FRAG, bool LDSM, bool BSH>
__device__ inline void load_step(float (&fa)[4], float (&fb)[NT][4], const float *pa, size_t a8,
                                 size_t a4, uint32_t sa, const float *pb, size_t b4, size_t bn)
{
    if (LDSM) ldsm_a(fa, sa);
    else fa[0] = pa[0], fa[1] = pa[a8], fa[2] = pa[a4], fa[3] = pa[a8 + a4];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        if (FRAG && PASSES == 3) {
            const float4 *q = (const float4 *)(pb + j * bn);
            float4 v = BSH ? *q : __ldg(q);
            fb[j][0] = v.x, fb[j][1] = v.y, fb[j][2] = v.z, fb[j][3] = v.w;
        } else if (FRAG) {
            const float2 *q = (const float2 *)(pb + j * bn);
            float2 v = BSH ? *q : __ldg(q);
            fb[j][0] = v.x, fb[j][1] = v.y;
        } else {
            fb[j][0] = pb[j * bn], fb[j][1] = pb[j * bn + b4];
        }
    }
}

/* d[j] += A (16 × K from a: its row 0, column 0) · B (K × 8 columns from b + 8j), this lane's
 * share. U steps' operands are loaded before any is multiplied: B often comes from global
 * memory (the weights, through L1 and L2), and a warp's loads in flight together hide the
 * latency one at a time would wait for (U as large as the registers allow: 4 for narrow strips,
 * 2 for wide ones). */
template <int NT, int PASSES, typename LA, typename LB>
__device__ inline void strip(float (&d)[NT][4], const float *a, int lda, const float *b, int ldb,
                             int K)
{
    const int U = NT > 2 ? TC_U_WIDE : TC_U_NARROW;
    const bool F = is_frag<LB>::value, BSH = b_shared<LB>::value;
    /* A's share by ldmatrix (ldsm_a) where it measured faster: everywhere in 3×TF32 and in
     * TF32's narrow strips; in TF32's wide ones it made PPO's update 19 % slower (TC_LDSM) */
    const bool LDSM =
        is_row<LA>::value && (TC_LDSM == 1 || (TC_LDSM == 2 && (PASSES == 3 || NT <= 2)));
    /* said to the compiler, which cannot see it through the callers' pointers: it then loads
     * with ld.shared, not with generic loads (which queue with the global ones) */
    __builtin_assume(__isShared(a));
    if (BSH) __builtin_assume(__isShared(b));
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const float *pa = a + at<LA>(g, t, lda);
    const float *pb = b + (F ? (size_t)lane * frag_e<PASSES>() : at<LB>(t, g, ldb));
    const size_t a8 = at<LA>(8, 0, lda), a4 = at<LA>(0, 4, lda), ak = at<LA>(0, 8, lda);
    const size_t b4 = at<LB>(4, 0, ldb), bn = at_b<LB, PASSES>(0, 8, ldb);
    const size_t bk = at_b<LB, PASSES>(8, 0, ldb);
    uint32_t sa = LDSM ? lda_rows(a, lda, lane) : 0, sk = (uint32_t)(ak * sizeof(float));
    int k = 0;
    for (; k + 8 * U <= K; k += 8 * U, pa += U * ak, sa += U * sk, pb += U * bk) {
        float fa[U][4], fb[U][NT][4];
#pragma unroll
        for (int u = 0; u < U; u++)
            load_step<NT, PASSES, F, LDSM, BSH>(fa[u], fb[u], pa + u * ak, a8, a4, sa + u * sk,
                                           pb + u * bk, b4, bn);
#pragma unroll
        for (int u = 0; u < U; u++) step<NT, PASSES, F>(d, fa[u], fb[u]);
    }
    for (; k < K; k += 8, pa += ak, sa += sk, pb += bk) { /* the steps left */
        float fa[4], fb[NT][4];
        load_step<NT, PASSES, F, LDSM, BSH>(fa, fb, pa, a8, a4, sa, pb, b4, bn);
        step<NT, PASSES, F>(d, fa, fb);
    }
}

/* strip in BF16: d[j] += A (16 × K from a, row-major, float32 in shared memory) · B (K × 8
 * columns of frag tile column j), K a multiple of 16. U k16 steps' operands are loaded before any
 * is multiplied: a step covers twice a TF32 step's K with half its loads of B. 4 ahead, since
 * the acting kernel's loads of A are ld.shared (1.814–1.819 ms a collection against 1.835–1.838
 * with 8, H100; while they were generic loads, 8 had been the faster: 2.022 against
 * 2.038–2.049 ms on an H200). The products are added in the same order whatever U. */
template <int NT>
__device__ inline void strip_bf16(float (&d)[NT][4], const float *a, int lda, const float *b,
                                  int ldb, int K)
{
    const int U = NT > 2 ? 2 : TC_BF16_U;
    __builtin_assume(__isShared(a));
    int lane = threadIdx.x & 31;
    const float *pa = a + (size_t)(lane >> 2) * lda + 2 * (lane & 3);
    const uint2 *pb = (const uint2 *)b + lane; /* a tile: 32 lanes' 8 bytes */
    const size_t a8 = (size_t)8 * lda, bk = (size_t)ldb * 32;
    int k = 0;
    for (; k + 16 * U <= K; k += 16 * U, pa += 16 * U, pb += U * bk) {
        float2 fa[U][4];
        uint2 fb[U][NT];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const float *p = pa + 16 * u;
            fa[u][0] = *(const float2 *)p, fa[u][1] = *(const float2 *)(p + a8);
            fa[u][2] = *(const float2 *)(p + 8), fa[u][3] = *(const float2 *)(p + a8 + 8);
#pragma unroll
            for (int j = 0; j < NT; j++) fb[u][j] = __ldg(pb + u * bk + 32 * j);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            uint32_t ra[4];
#pragma unroll
            for (int q = 0; q < 4; q++) ra[q] = bf16_pair(fa[u][q]);
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint32_t rb[2] = {fb[u][j].x, fb[u][j].y};
                mma_bf16(d[j], ra, rb);
            }
        }
    }
    for (; k < K; k += 16, pa += 16, pb += bk) { /* the steps left */
        uint32_t ra[4] = {bf16_pair(*(const float2 *)pa), bf16_pair(*(const float2 *)(pa + a8)),
                          bf16_pair(*(const float2 *)(pa + 8)),
                          bf16_pair(*(const float2 *)(pa + a8 + 8))};
#pragma unroll
        for (int j = 0; j < NT; j++) {
            uint2 v = __ldg(pb + 32 * j);
            uint32_t rb[2] = {v.x, v.y};
            mma_bf16(d[j], ra, rb);
        }
    }
}

/* What block_gemm does with each finished strip of C. */
enum { STORE, RELU, MASK, BIAS };

/* The G products C_g = A_g · B_g (M × N, inner dimension K) with A_g = A + g·a_step, B_g = B +
 * g·b_step, C_g = C + g·c_step (in elements; C row-major, ldc; float, or bf16 for STORE, each
 * element rounded once) and, for RELU and BIAS (the bias added, no ReLU), the bias of C_g's
 * columns at bias + g·c_step. Strip s goes to warp (w0 + s) mod warps: independent products of a
 * few strips each, issued one after another, start on different warps. Synchronises nothing: the
 * caller puts __syncthreads() between dependent products. */
template <int NT, int PASSES, int MODE, typename LA, typename LB, typename CT = float>
__device__ void block_gemm(int G, int M, int N, int K, const float *A, int lda, size_t a_step,
                           const float *B, int ldb, size_t b_step, CT *C, int ldc, size_t c_step,
                           const float *bias, int w0)
{
    int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
    int warp = ((threadIdx.x >> 5) - w0 % warps + warps) % warps;
    int g8 = lane >> 2, t2 = 2 * (lane & 3);
    int cols = N / (8 * NT), per_g = (M / 16) * cols;
    for (int s = warp; s < G * per_g; s += warps) {
        int g = s / per_g, r = s % per_g, mi = r / cols, nj = r % cols;
        int r0 = 16 * mi, n0 = 8 * NT * nj;
        if (MODE == RELU || MODE == MASK) __builtin_assume(__isShared(C));
        float d[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0;
        if constexpr (PASSES == BF16) { /* acting's products (the top comment) */
            static_assert(is_row<LA>::value && is_frag<LB>::value && !b_shared<LB>::value,
                          "BF16 takes a row-major A and a frag B (from global memory)");
            strip_bf16<NT>(d, A + g * a_step + at<LA>(r0, 0, lda), lda,
                           B + g * b_step + at_b<LB, PASSES>(0, n0, ldb), ldb, K);
        } else {
            strip<NT, PASSES, LA, LB>(d, A + g * a_step + at<LA>(r0, 0, lda), lda,
                                      B + g * b_step + at_b<LB, PASSES>(0, n0, ldb), ldb, K);
        }
        CT *c = C + g * c_step + (size_t)(r0 + g8) * ldc + n0 + t2;
        if constexpr (sizeof(CT) == 2) { /* STORE to bf16 */
            static_assert(MODE == STORE, "bf16 C: STORE only");
#pragma unroll
            for (int j = 0; j < NT; j++) {
                *(__nv_bfloat162 *)(c + 8 * j) = __floats2bfloat162_rn(d[j][0], d[j][1]);
                *(__nv_bfloat162 *)(c + 8 * j + 8 * (size_t)ldc) =
                    __floats2bfloat162_rn(d[j][2], d[j][3]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < NT; j++) {
                float2 lo = make_float2(d[j][0], d[j][1]), hi = make_float2(d[j][2], d[j][3]);
                float2 *plo = (float2 *)(c + 8 * j), *phi = (float2 *)(c + 8 * j + 8 * (size_t)ldc);
                if (MODE == RELU) {
                    float2 b = *(const float2 *)(bias + g * c_step + n0 + 8 * j + t2);
                    lo.x = fmaxf(lo.x + b.x, 0.0f), lo.y = fmaxf(lo.y + b.y, 0.0f);
                    hi.x = fmaxf(hi.x + b.x, 0.0f), hi.y = fmaxf(hi.y + b.y, 0.0f);
                } else if (MODE == BIAS) {
                    float2 b = *(const float2 *)(bias + g * c_step + n0 + 8 * j + t2);
                    lo.x += b.x, lo.y += b.y, hi.x += b.x, hi.y += b.y;
                } else if (MODE == MASK) {
                    float2 ylo = *plo, yhi = *phi;
                    lo.x = ylo.x > 0 ? lo.x : 0.0f, lo.y = ylo.y > 0 ? lo.y : 0.0f;
                    hi.x = yhi.x > 0 ? hi.x : 0.0f, hi.y = yhi.y > 0 ? hi.y : 0.0f;
                }
                *plo = lo, *phi = hi;
            }
        }
    }
}

/* block_gemm with the widest strips (40, 16 or 8 columns) that divide N and still give every
 * warp a strip: a wide strip loads and converts each element of A once for all its columns, and
 * the instructions a product takes bound these small kernels. */
template <int PASSES, int MODE, typename LA, typename LB, typename CT>
__device__ inline void gemm(int G, int M, int N, int K, const float *A, int lda, size_t a_step,
                            const float *B, int ldb, size_t b_step, CT *C, int ldc,
                            size_t c_step, const float *bias = 0, int w0 = 0)
{
    int warps = blockDim.x >> 5, tiles = G * (M / 16) * (N / 8);
#define TC_GEMM(NT)                                                                                \
    block_gemm<NT, PASSES, MODE, LA, LB, CT>(G, M, N, K, A, lda, a_step, B, ldb, b_step, C, ldc,   \
                                         c_step, bias, w0)
    if (N % 40 == 0 && tiles / 5 >= warps) TC_GEMM(5);
    else if (N % 16 == 0 && tiles / 2 >= warps) TC_GEMM(2);
    else TC_GEMM(1);
#undef TC_GEMM
}

/* C = A · B (M × 16, inner dimension K) when its M / 16 strips are few (a network's 16-column
 * heads): each strip's K is split into `chunks` chunks, a chunk a warp (strips × chunks ≤ the
 * block's warps), and the chunks' tiles are added in chunk order (the same bits every run) on
 * their way to epi(i, j, value). One warp would otherwise walk all of a long K alone while the
 * others wait. stage: 256 floats a warp. Synchronises the block: every thread must call it. */
template <int PASSES, typename LA, typename LB, class Epi>
__device__ void gemm_splitk(int M, int K, int chunks, const float *A, int lda, const float *B,
                            int ldb, float *stage, Epi epi)
{
    static_assert(PASSES != BF16, "gemm_splitk runs TF32 strips only");
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int strips = M / 16, steps = K / 8;
    int per = (steps + chunks - 1) / chunks;
    if (warp < strips * chunks) {
        int s = warp % strips, k0 = (warp / strips) * per * 8;
        int k1 = k0 + per * 8 < K ? k0 + per * 8 : K;
        float d[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
        if (k1 > k0)
            strip<2, PASSES, LA, LB>(d, A + at<LA>(16 * s, k0, lda), lda,
                                     B + at_b<LB, PASSES>(k0, 0, ldb), ldb, k1 - k0);
        float *my = stage + 256 * warp + (lane >> 2) * 16 + 2 * (lane & 3);
        for (int j = 0; j < 2; j++) {
            my[8 * j] = d[j][0], my[8 * j + 1] = d[j][1];
            my[8 * j + 128] = d[j][2], my[8 * j + 129] = d[j][3];
        }
    }
    __syncthreads();
    for (int x = threadIdx.x; x < strips * 256; x += blockDim.x) {
        int s = x >> 8, q = x & 255;
        float v = 0;
        for (int c = 0; c < chunks; c++) v += stage[256 * (c * strips + s) + q];
        epi(16 * s + (q >> 4), q & 15, v);
    }
    __syncthreads();
}

} // namespace tc

#endif

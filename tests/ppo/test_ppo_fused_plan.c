/* test_ppo_fused_plan.c — the fused kernels' fragment copies (ppo_fused_plan.c's vx_pf_frags),
 * on the CPU: every float of the copies is mapped, and each one holds the weight the tensor
 * cores expect there. The expectation is written here from the PTX ISA's fragment layout of
 * mma.m16n8k8 with .tf32 (a lane l holds B(l % 4, l / 4) and B(l % 4 + 4, l / 4) of an 8 × 8
 * tile) and from the actor-critic's own layout (vx_dense: W[in × out] row-major in the flat
 * parameters) — not from vx_pf_layout's map. A copy laid out by the wrong order (k and n
 * swapped, W where Wᵀ belongs, a trunk's block at the other trunk's offset, big and small parts
 * swapped in their slots) maps some float to another weight, and a copy with a gap leaves one
 * unmapped. */
#include "helpers.h"
#include "ppo/ppo_fused_plan.h"
#include "vixen/actor_critic.h"
#include "vixen/ppo_math.h"

#include <limits.h>
#include <stdlib.h>

enum { UNSET = INT_MIN };

/* The flat parameter index of B(k, n) of a K × N product operand: B = W (forward, W[k × n]) or
 * B = Wᵀ (backward, W[n × k]), W with `cols` columns at offset w. */
static int weight(size_t w, int cols, int k, int n, int transposed)
{
    return transposed ? (int)(w + (size_t)n * cols + k) : (int)(w + (size_t)k * cols + n);
}

/* Checks the copy of one K × N operand at off: every float of the copy is B(k, n)'s index as
 * want(k, n) gives it (E = 4: the big part at slots 0 and 1, the small part of the same weight
 * at 2 and 3). Counts the floats checked. */
typedef int (*want_fn)(const void *ctx, int k, int n);
static size_t check(const int *fsrc, int off, int K, int N, int E, want_fn want, const void *ctx)
{
    size_t seen = 0;
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) {
            int tile = (k / 8) * (N / 8) + n / 8, lane = 4 * (n % 8) + k % 4, slot = (k % 8) / 4;
            const int *f = fsrc + off + (tile * 32 + lane) * E;
            assert_int_equal(f[slot], want(ctx, k, n));
            if (E == 4) assert_int_equal(f[slot + 2], want(ctx, k, n));
            seen += (size_t)(E / 2);
        }
    return seen;
}

typedef struct {
    size_t w;
    int cols, transposed;
} dense_ref;

static int dense_want(const void *ctx, int k, int n)
{
    const dense_ref *d = ctx;
    return weight(d->w, d->cols, k, n, d->transposed);
}

/* Layer 0's forward operand: Dp × G·H0, rows past the input zero, the value trunk's columns
 * after the policy trunk's. */
typedef struct {
    const vx_ac_layout *L;
    int in, H0;
} layer0_ref;

static int layer0_want(const void *ctx, int k, int n)
{
    const layer0_ref *r = ctx;
    if (k >= r->in) return -1;
    const vx_dense *d = n < r->H0 ? &r->L->pi[0] : &r->L->v[0];
    return weight(d->w, r->H0, k, n % r->H0, 0);
}

/* The heads: (G·Ht) × 16, the 15 logits from the policy trunk's rows, the value (column 15)
 * from the value trunk's; a shared trunk feeds both from every row. */
typedef struct {
    const vx_ac_layout *L;
    int Ht, G, transposed;
} heads_ref;

static int heads_want(const void *ctx, int k, int n)
{
    const heads_ref *r = ctx;
    int row = r->transposed ? n : k, col = r->transposed ? k : n;
    int pi_row = r->G == 1 || row < r->Ht, v_row = r->G == 1 || row >= r->Ht;
    if (col < VX_PPO_LOGITS)
        return pi_row ? (int)(r->L->pi_head.w + (size_t)row * VX_PPO_LOGITS + col) : -1;
    return v_row ? (int)(r->L->v_head.w + (size_t)(r->G == 1 ? row : row - r->Ht)) : -1;
}

static void frag_case(int shared, int n, const int *width, int passes)
{
    vx_ac_cfg cfg;
    vx_ac_cfg_default(&cfg);
    cfg.shared = shared, cfg.n_trunk = n;
    for (int l = 0; l < n; l++) cfg.trunk[l] = width[l];
    vx_ac_layout L;
    vx_err e;
    assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
    vx_pf_net t;
    size_t packed = vx_pf_layout(&L, &t, NULL);
    int *src = malloc(packed * sizeof *src);
    vx_pf_layout(&L, &t, src);
    size_t nf = vx_pf_frags(&t, passes, NULL, NULL);
    int *fsrc = malloc(nf * sizeof *fsrc);
    for (size_t i = 0; i < nf; i++) fsrc[i] = UNSET;
    assert_int_equal(vx_pf_frags(&t, passes, src, fsrc), nf);
    int E = passes == 3 ? 4 : 2, G = shared ? 1 : 2, Ht = width[n - 1];
    assert_int_equal(t.E, E);
    for (size_t i = 0; i < nf; i++) assert_true(fsrc[i] >= -1 && fsrc[i] < (int)L.n_params);

    size_t seen = 0;
    layer0_ref r0 = {&L, cfg.in_dim, width[0]};
    seen += check(fsrc, t.fw[0], t.Dp, G * width[0], E, layer0_want, &r0);
    for (int l = 1; l < n; l++)
        for (int g = 0; g < G; g++) {
            const vx_dense *d = g ? &L.v[l] : &L.pi[l];
            dense_ref fw = {d->w, width[l], 0}, bw = {d->w, width[l], 1};
            seen +=
                check(fsrc, t.fw[l] + g * t.f_step[l], width[l - 1], width[l], E, dense_want, &fw);
            seen +=
                check(fsrc, t.fb[l] + g * t.f_step[l], width[l], width[l - 1], E, dense_want, &bw);
        }
    heads_ref hf = {&L, Ht, G, 0}, hb = {&L, Ht, G, 1};
    seen += check(fsrc, t.fwh, G * Ht, VX_PF_HEAD, E, heads_want, &hf);
    seen += check(fsrc, t.fbh, VX_PF_HEAD, G * Ht, E, heads_want, &hb);
    assert_int_equal(seen, nf); /* every float checked once: the copies hold nothing else */
    free(fsrc), free(src);
}

void test_fused_fragment_copies(void **state)
{
    (void)state;
    const int two[] = {160, 160}, three[] = {48, 32, 64}, one[] = {32};
    for (int passes = 1; passes <= 3; passes += 2) {
        frag_case(0, 2, two, passes);
        frag_case(1, 2, two, passes);
        frag_case(0, 3, three, passes);
        frag_case(1, 1, one, passes);
    }
}

/* The shared memory of a block of R rows, against the buffers ppo_fused.cu's carve() lays out
 * (its top comment), in floats: a double a thread (2 · 512), 256 a warp (16 warps), the heads'
 * outputs R × 24, the input rows R × (Dp + 8), each layer's activations R × (G·H + 8), then R
 * ints rounded to 8 — summed by hand for in_dim 51 (Dp 64) and trunks 48, 32, 64, separate
 * (G = 2) and shared (G = 1). Then which configurations the kernels take: the update's rows are
 * the most of 64 and 32 that fit, and none when 32 do not. */
void test_fused_smem_and_rows(void **state)
{
    (void)state;
    vx_ac_cfg cfg;
    vx_ac_cfg_default(&cfg);
    cfg.in_dim = 51, cfg.n_trunk = 3, cfg.trunk[0] = 48, cfg.trunk[1] = 32, cfg.trunk[2] = 64;
    const size_t fixed = 2 * 512 + 16 * 256;
    /* per row: 24 + 72 + (2·48 + 8) + (2·32 + 8) + (2·64 + 8) = 408; shared: 24 + 72 + 56 + 40 +
     * 72 = 264 */
    const size_t per_row[2] = {408, 264};
    char why[96];
    for (int shared = 0; shared <= 1; shared++) {
        cfg.shared = shared;
        vx_ac_layout L;
        vx_err e;
        assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
        vx_pf_net t;
        vx_pf_layout(&L, &t, NULL);
        size_t s64 = (fixed + 64 * per_row[shared] + 64) * 4;
        size_t s32 = (fixed + 32 * per_row[shared] + 32) * 4;
        assert_int_equal(vx_pf_smem(&t, 64), s64);
        assert_int_equal(vx_pf_smem(&t, 32), s32);
        assert_int_equal(vx_pf_rows(&L, s64, why, sizeof why), 64);
        assert_int_equal(vx_pf_rows(&L, s64 - 1, why, sizeof why), 32);
        assert_int_equal(vx_pf_rows(&L, s32, why, sizeof why), 32);
        assert_int_equal(vx_pf_rows(&L, s32 - 1, why, sizeof why), 0);
        assert_string_equal(why, "trunks too wide for shared memory");
    }
    /* widths the 16-row tiles cannot cover, and an input past the staged statistics */
    const struct {
        int in, width;
        const char *why;
    } no[] = {{51, 40, "trunk widths that are not multiples of 16"},
              {51, 8, "trunk widths that are not multiples of 16"},
              {129, 32, "an input wider than 128"}};
    for (int i = 0; i < 3; i++) {
        cfg.in_dim = no[i].in, cfg.n_trunk = 1, cfg.trunk[0] = no[i].width;
        vx_ac_layout L;
        vx_err e;
        assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
        assert_int_equal(vx_pf_rows(&L, VX_PF_SMEM_HOPPER, why, sizeof why), 0);
        assert_string_equal(why, no[i].why);
    }
    cfg.in_dim = 128, cfg.trunk[0] = 32; /* the widest input taken */
    vx_ac_layout L;
    vx_err e;
    assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
    assert_int_equal(vx_pf_rows(&L, VX_PF_SMEM_HOPPER, why, sizeof why), 64);
}

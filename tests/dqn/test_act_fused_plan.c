/* test_act_fused_plan.c — the fused acting kernel's copies of the weights (act_fused_plan.c), on
 * the CPU: the Q-network's forward pass computed in float64 from nothing but the copies, read the
 * way the tensor cores read them, gives the reference forward pass's Q-values (vx_qnet_forward_ref)
 * for three networks (the GPU reference shape, odd widths, C51) in the three precisions' layouts.
 *
 * The reading is written here from the PTX ISA's fragment layout of mma.m16n8k8 with .tf32 (lane
 * l of an 8 × 8 tile holds B(l % 4, l / 4) and B(l % 4 + 4, l / 4); with 3×TF32 the small parts
 * follow the big ones), and of mma.m16n8k16 with .bf16 (lane l of a 16 × 8 tile holds
 * B(2(l % 4) + i, l / 4) for i = 0, 1, 8, 9, in that order, each pair a 32-bit word with its
 * first in the lower half) — not from the plan's map. For BF16 the reference pass takes the flat
 * weights rounded to bf16 (to nearest, even) here. A copy laid out in the wrong order (k and n
 * swapped, a head's columns at another head's place, a bias off by a head, the big and small
 * parts swapped), a weight left out, or an input row past the observation's width that is not
 * zero changes the Q-values. Each weight and bias must also be mapped exactly once (twice for
 * 3×TF32's two parts). */
#include "helpers.h"
#include "dqn/act_fused_plan.h"
#include "vixen/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* f rounded to bf16, to nearest (even), as the bf16's 16 bits. */
static uint16_t bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float float_of_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The copies as the pack kernel makes them: biases as they are, fragments as they are (E = 2)
 * or as big part (the top 10 mantissa bits) then what is left (E = 4), or in bf16, two a float
 * (map entry 2j in float j's lower half: little-endian, the lower address). */
static float *copies_of(const vx_af_net *t, const int *map, const float *params)
{
    int total = t->packed + t->frags;
    float *c = malloc((size_t)total * sizeof *c);
    if (t->bf16) {
        for (int i = 0; i < t->packed; i++) c[i] = map[i] >= 0 ? params[map[i]] : 0.0f;
        uint16_t *h = (uint16_t *)(c + t->packed);
        for (int i = t->packed; i < t->maps; i++)
            h[i - t->packed] = map[i] >= 0 ? bf16_bits(params[map[i]]) : 0;
        return c;
    }
    for (int i = 0; i < total; i++) {
        float v = map[i] >= 0 ? params[map[i]] : 0.0f;
        if (i >= t->packed && t->E == 4) {
            float big;
            uint32_t u;
            memcpy(&u, &v, 4);
            u &= 0xffffe000u;
            memcpy(&big, &u, 4);
            v = (i - t->packed) & 2 ? v - big : big;
        }
        c[i] = v;
    }
    return c;
}

/* B(k, n) of the K × N operand whose fragments start at f (N a multiple of 8); E 0: bf16. */
static double b_of(const float *f, int N, int E, int k, int n)
{
    if (E == 0) {
        int tile = (k / 16) * (N / 8) + n / 8, lane = 4 * (n % 8) + (k % 8) / 2;
        int half = (k % 2) + 2 * ((k % 16) / 8);
        const uint16_t *h = (const uint16_t *)f + (tile * 32 + lane) * 4;
        return float_of_bf16(h[half]);
    }
    int tile = (k / 8) * (N / 8) + n / 8, lane = 4 * (n % 8) + k % 4, slot = (k % 8) / 4;
    const float *p = f + (tile * 32 + lane) * E;
    return E == 4 ? (double)p[slot] + (double)p[slot + 2] : (double)p[slot];
}

/* y (rows × N) = x (rows × K) · B + bias, through a ReLU when relu. */
static void layer(const double *x, int rows, int K, const float *f, int N, int E, const float *bias,
                  int relu, double *y)
{
    for (int r = 0; r < rows; r++)
        for (int n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0;
            for (int k = 0; k < K; k++) s += x[(size_t)r * K + k] * b_of(f, N, E, k, n);
            y[(size_t)r * N + n] = relu && s < 0 ? 0 : s;
        }
}

static void check_net(const vx_qnet_cfg *cfg, int acting)
{
    vx_qnet_layout L;
    vx_err e;
    if (vx_qnet_layout_make(cfg, &L, &e)) fail_msg("%s", e.msg);
    vx_af_net t;
    vx_af_layout(&L, acting, &t, NULL);
    int *map = malloc((size_t)t.maps * sizeof *map);
    vx_af_layout(&L, acting, &t, map);
    int x3 = acting == VX_ACTING_TF32X3, bf = acting == VX_ACTING_BF16;
    assert_int_equal(t.E, x3 ? 4 : 2);
    assert_int_equal(t.bf16, bf);
    assert_int_equal(t.maps, t.packed + (bf ? 2 : 1) * t.frags);
    /* every weight and bias mapped once (each fragment float pair of 3×TF32: twice) */
    int *seen = calloc(L.n_params, sizeof *seen);
    for (int i = 0; i < t.maps; i++) {
        assert_true(map[i] >= -1 && map[i] < (int)L.n_params);
        if (map[i] >= 0) seen[map[i]] += i < t.packed ? 2 : (x3 ? 1 : 2);
    }
    size_t mapped = 0;
    for (size_t i = 0; i < L.n_params; i++) {
        assert_true(seen[i] == 0 || seen[i] == 2);
        mapped += seen[i] == 2;
    }
    assert_int_equal(mapped, L.n_weights); /* the flat vector's padding is never read */
    /* random weights and observations, as a test draws them */
    float *params = calloc(L.n_params, sizeof *params);
    uint64_t s = 12345;
    for (size_t i = 0; i < L.n_params; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        params[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 0.4f;
    }
    const int B = 5;
    float *x = malloc((size_t)B * cfg->in_dim * sizeof *x);
    for (int i = 0; i < B * cfg->in_dim; i++) x[i] = (float)sin(0.37 * i) * 2.0f;
    float *c = copies_of(&t, map, params);
    const float *wp = c, *wf = c + t.packed;
    const int E = bf ? 0 : t.E; /* b_of's reading */
    /* the forward pass from the copies alone, in float64 */
    int wmax = t.Dp;
    for (int l = 0; l < t.n; l++) wmax = t.H[l] > wmax ? t.H[l] : wmax;
    if (t.G * t.Hh > wmax) wmax = t.G * t.Hh;
    if (t.W2 > wmax) wmax = t.W2;
    double *a = calloc((size_t)B * wmax, sizeof *a), *b = calloc((size_t)B * wmax, sizeof *b);
    for (int r = 0; r < B; r++)
        for (int d = 0; d < t.Dp; d++) a[r * t.Dp + d] = d < t.in ? x[r * t.in + d] : 1e6;
    /* the big value past the input's width: layer 0's rows there must be zero */
    int K = t.Dp;
    for (int l = 0; l < t.n; l++) {
        layer(a, B, K, wf + t.fw[l], t.H[l], E, wp + t.b[l], 1, b);
        memcpy(a, b, (size_t)B * t.H[l] * sizeof *a);
        K = t.H[l];
    }
    layer(a, B, K, wf + t.fh1, t.G * t.Hh, E, wp + t.bh1, 1, b); /* b: the heads' hidden */
    double *o = calloc((size_t)B * t.W2, sizeof *o), *h = malloc((size_t)B * t.Hh * sizeof *h);
    for (int g = 0; g < t.G; g++) {
        for (int r = 0; r < B; r++)
            for (int k = 0; k < t.Hh; k++)
                h[r * t.Hh + k] = b[(size_t)r * t.G * t.Hh + g * t.Hh + k];
        double *y = malloc((size_t)B * t.P2[g] * sizeof *y);
        layer(h, B, t.Hh, wf + t.fh2[g], t.P2[g], E, wp + t.bh2 + t.o2[g], 0, y);
        for (int r = 0; r < B; r++)
            for (int n = 0; n < t.P2[g]; n++) {
                if (n >= t.N2[g]) assert_true(y[r * t.P2[g] + n] == 0); /* padding */
                o[(size_t)r * t.W2 + t.o2[g] + n] = y[r * t.P2[g] + n];
            }
        free(y);
    }
    /* the dueling aggregation, against the reference forward pass */
    vx_qnet_ws ws;
    if (vx_qnet_ws_create(&L, B, &ws, &e)) fail_msg("%s", e.msg);
    if (bf) /* the reference on the same bf16 weights, the biases as they are */
        for (size_t i = 0; i < L.n_params; i++) {
            int bias = 0;
            for (int l = 0; l < L.cfg.n_trunk; l++)
                bias |= i >= L.trunk[l].b && i < L.trunk[l].b + (size_t)L.trunk[l].out;
            for (int g = 0; g < t.G; g++) {
                const vx_dense *d1 = g ? &L.adv1[g - 1] : &L.value1;
                const vx_dense *d2 = g ? &L.adv2[g - 1] : &L.value2;
                bias |= i >= d1->b && i < d1->b + (size_t)d1->out;
                bias |= i >= d2->b && i < d2->b + (size_t)d2->out;
            }
            if (!bias) params[i] = float_of_bf16(bf16_bits(params[i]));
        }
    vx_qnet_forward_ref(&L, params, x, B, &ws);
    double worst = 0, scale = 0;
    for (int r = 0; r < B; r++)
        for (int d = 0; d < t.nb; d++)
            for (int z = 0; z < t.Z; z++) {
                const double *row = o + (size_t)r * t.W2;
                int n = t.branch[d];
                double mean = 0;
                for (int k = 0; k < n; k++) mean += row[t.o2[1 + d] + k * t.Z + z];
                mean /= n;
                for (int k = 0; k < n; k++) {
                    double q = row[t.o2[0] + z] + row[t.o2[1 + d] + k * t.Z + z] - mean;
                    double ref = ws.q[(size_t)r * L.out_dim + t.out_off[d] + k * t.Z + z];
                    worst = fmax(worst, fabs(q - ref));
                    scale = fmax(scale, fabs(ref));
                }
            }
    print_message("trunk %d×%d, heads %d, atoms %d, %s: Q from the copies within %.2g of the "
                  "reference (|Q| up to %.3g)\n",
                  t.n, t.H[0], t.Hh, t.Z,
                  bf   ? "BF16"
                  : x3 ? "3×TF32"
                       : "TF32",
                  worst, scale);
    assert_true(scale > 0.1);
    assert_true(worst <= 1e-5 * scale);
    vx_qnet_ws_free(&ws);
    free(o), free(h), free(a), free(b), free(c), free(x), free(params), free(seen), free(map);
}

void test_act_fused_copies(void **state)
{
    (void)state;
    vx_qnet_cfg c;
    vx_qnet_cfg_default(&c);
    c.n_trunk = 2, c.trunk[0] = c.trunk[1] = 256, c.head_hidden = 64; /* the GPU reference */
    for (int p = VX_ACTING_TF32; p <= VX_ACTING_BF16; p++) check_net(&c, p);
    vx_qnet_cfg_default(&c); /* odd widths (K not a multiple of 16 for BF16), three layers */
    c.n_trunk = 3, c.trunk[0] = 40, c.trunk[1] = 24, c.trunk[2] = 56, c.head_hidden = 8;
    for (int p = VX_ACTING_TF32; p <= VX_ACTING_BF16; p++) check_net(&c, p);
    vx_qnet_cfg_default(&c); /* C51 */
    c.n_trunk = 2, c.trunk[0] = c.trunk[1] = 32, c.head_hidden = 8, c.atoms = 51;
    for (int p = VX_ACTING_TF32; p <= VX_ACTING_BF16; p++) check_net(&c, p);
    /* what the kernel does not take, and says why */
    vx_qnet_layout L;
    vx_err e;
    char why[96];
    c.trunk[0] = 36;
    if (vx_qnet_layout_make(&c, &L, &e)) fail_msg("%s", e.msg);
    assert_int_equal(vx_af_fits(&L, VX_ACTING_TF32X3, 232448, why, sizeof why), 0);
    assert_string_equal(why, "trunk widths that are not multiples of 8");
    c.trunk[0] = c.trunk[1] = 4096, c.atoms = 1;
    if (vx_qnet_layout_make(&c, &L, &e)) fail_msg("%s", e.msg);
    assert_int_equal(vx_af_fits(&L, VX_ACTING_TF32X3, 232448, why, sizeof why), 0);
    assert_string_equal(why, "a network too wide for shared memory");
    vx_qnet_cfg_default(&c);
    c.n_trunk = 2, c.trunk[0] = c.trunk[1] = 256, c.head_hidden = 64;
    if (vx_qnet_layout_make(&c, &L, &e)) fail_msg("%s", e.msg);
    for (int p = VX_ACTING_TF32; p <= VX_ACTING_BF16; p++)
        assert_int_equal(vx_af_fits(&L, p, 232448, why, sizeof why), 1);
    /* BF16's rows are 4 floats wider: a network that just fits TF32's shared memory does not
     * fit BF16's, and the check says so with the precision's own sizes */
    vx_af_net t32, tb;
    vx_af_layout(&L, VX_ACTING_TF32, &t32, NULL);
    vx_af_layout(&L, VX_ACTING_BF16, &tb, NULL);
    size_t s32 = vx_af_smem(&t32), sb = vx_af_smem(&tb);
    assert_true(sb > s32);
    assert_int_equal(vx_af_fits(&L, VX_ACTING_TF32, s32, why, sizeof why), 1);
    assert_int_equal(vx_af_fits(&L, VX_ACTING_BF16, s32, why, sizeof why), 0);
    assert_string_equal(why, "a network too wide for shared memory");
    /* the BF16 copies: half TF32's fragment floats (every K here a multiple of 16, so no rows
     * added), and a map entry a bf16 */
    assert_int_equal(tb.frags * 2, t32.frags);
    assert_int_equal(tb.maps, tb.packed + 2 * tb.frags);
}

/* The shared memory a block is launched with, against the buffers act_fused.cu's carve() lays
 * out (its top comment): R = 16 rows of xs (Dp + pad), each trunk layer's activations
 * (r16(H) + pad), the heads' first layers (r16(G·Hh) + pad), the heads' outputs (W2 + 4), the
 * Q rows (r8(out_dim)) and the acting picks (20 words), in floats. Too few bytes and the kernel
 * reads and writes past its shared memory; the sums here are done by hand for a net whose widths
 * are not multiples of 16 (40, 24, 56; G·Hh = 24; out_dim 12), so a missing rounding or pad shows.
 */
void test_act_fused_smem(void **state)
{
    (void)state;
    vx_qnet_cfg c;
    vx_qnet_cfg_default(&c);
    c.in_dim = 51, c.n_trunk = 3, c.trunk[0] = 40, c.trunk[1] = 24, c.trunk[2] = 56;
    c.head_hidden = 8, c.n_branches = 2, c.branch[0] = 9, c.branch[1] = 3, c.atoms = 1;
    vx_qnet_layout L;
    vx_err e;
    if (vx_qnet_layout_make(&c, &L, &e)) fail_msg("%s", e.msg);
    assert_int_equal(L.out_dim, 12);
    /* heads: value 1 → 8, branch 9 → 16, branch 3 → 8: W2 = 32 */
    const int floats_tf32 = 16 * (64 + 4)                                   /* xs */
                            + 16 * (48 + 4) + 16 * (32 + 4) + 16 * (64 + 4) /* trunk */
                            + 16 * (32 + 4)                                 /* h1: r16(24) */
                            + 16 * (32 + 4)                                 /* out */
                            + 16 * 16                                       /* qs: r8(12) */
                            + 16 * 20; /* picks: 4 greedy actions, 4 blocks of 4 draws */
    const int floats_bf16 = 16 * (64 + 8) + 16 * (48 + 8) + 16 * (32 + 8) + 16 * (64 + 8) +
                            16 * (32 + 8) + 16 * (32 + 4) + 16 * 16 + 16 * 20;
    const int acting[] = {VX_ACTING_TF32, VX_ACTING_TF32X3, VX_ACTING_BF16};
    const int floats[] = {floats_tf32, floats_tf32, floats_bf16};
    char why[96];
    for (int i = 0; i < 3; i++) {
        vx_af_net t;
        vx_af_layout(&L, acting[i], &t, NULL);
        assert_int_equal(t.W2, 32);
        assert_int_equal(vx_af_smem(&t), (size_t)floats[i] * 4);
        /* the check takes the net with exactly its bytes, not one fewer */
        assert_int_equal(vx_af_fits(&L, acting[i], (size_t)floats[i] * 4, why, sizeof why), 1);
        assert_int_equal(vx_af_fits(&L, acting[i], (size_t)floats[i] * 4 - 1, why, sizeof why), 0);
    }
    /* a head width the 8-column tiles cannot cover */
    c.head_hidden = 12;
    if (vx_qnet_layout_make(&c, &L, &e)) fail_msg("%s", e.msg);
    assert_int_equal(vx_af_fits(&L, VX_ACTING_TF32, 232448, why, sizeof why), 0);
    assert_string_equal(why, "a head width that is not a multiple of 8");
}

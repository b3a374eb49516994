/* test_act_fused_plan.c — the fused acting kernel's copies of the weights (act_fused_plan.c), on
 * the CPU: the Q-network's forward pass computed in float64 from nothing but the copies, read the
 * way the tensor cores read them, gives the reference forward pass's Q-values (vx_qnet_forward_ref)
 * for three networks (the GPU reference shape, odd widths, C51) in both precisions' layouts.
 *
 * The reading is written here from the PTX ISA's fragment layout of mma.m16n8k8 with .tf32 (lane
 * l of an 8 × 8 tile holds B(l % 4, l / 4) and B(l % 4 + 4, l / 4); with 3×TF32 the small parts
 * follow the big ones) — not from the plan's map. A copy laid out in the wrong order (k and n
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

/* The copies as the pack kernel makes them: biases as they are, fragments as they are (E = 2)
 * or as big part (the top 10 mantissa bits) then what is left (E = 4). */
static float *copies_of(const vx_af_net *t, const int *map, const float *params)
{
    int total = t->packed + t->frags;
    float *c = malloc((size_t)total * sizeof *c);
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

/* B(k, n) of the K × N operand whose fragments start at f (N a multiple of 8). */
static double b_of(const float *f, int N, int E, int k, int n)
{
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

static void check_net(const vx_qnet_cfg *cfg, int passes)
{
    vx_qnet_layout L;
    vx_err e;
    if (vx_qnet_layout_make(cfg, &L, &e)) fail_msg("%s", e.msg);
    vx_af_net t;
    vx_af_layout(&L, passes, &t, NULL);
    int total = t.packed + t.frags;
    int *map = malloc((size_t)total * sizeof *map);
    vx_af_layout(&L, passes, &t, map);
    assert_int_equal(t.E, passes == 3 ? 4 : 2);
    /* every weight and bias mapped once (each fragment float pair of 3×TF32: twice) */
    int *seen = calloc(L.n_params, sizeof *seen);
    for (int i = 0; i < total; i++) {
        assert_true(map[i] >= -1 && map[i] < (int)L.n_params);
        if (map[i] >= 0) seen[map[i]] += i < t.packed ? 2 : (passes == 3 ? 1 : 2);
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
        layer(a, B, K, wf + t.fw[l], t.H[l], t.E, wp + t.b[l], 1, b);
        memcpy(a, b, (size_t)B * t.H[l] * sizeof *a);
        K = t.H[l];
    }
    layer(a, B, K, wf + t.fh1, t.G * t.Hh, t.E, wp + t.bh1, 1, b); /* b: the heads' hidden */
    double *o = calloc((size_t)B * t.W2, sizeof *o), *h = malloc((size_t)B * t.Hh * sizeof *h);
    for (int g = 0; g < t.G; g++) {
        for (int r = 0; r < B; r++)
            for (int k = 0; k < t.Hh; k++)
                h[r * t.Hh + k] = b[(size_t)r * t.G * t.Hh + g * t.Hh + k];
        double *y = malloc((size_t)B * t.P2[g] * sizeof *y);
        layer(h, B, t.Hh, wf + t.fh2[g], t.P2[g], t.E, wp + t.bh2 + t.o2[g], 0, y);
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
                  t.n, t.H[0], t.Hh, t.Z, passes == 3 ? "3×TF32" : "TF32", worst, scale);
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
    for (int p = 1; p <= 3; p += 2) check_net(&c, p);
    vx_qnet_cfg_default(&c); /* odd widths, three layers */
    c.n_trunk = 3, c.trunk[0] = 40, c.trunk[1] = 24, c.trunk[2] = 56, c.head_hidden = 16;
    check_net(&c, 3);
    vx_qnet_cfg_default(&c); /* C51 */
    c.n_trunk = 2, c.trunk[0] = c.trunk[1] = 32, c.head_hidden = 8, c.atoms = 51;
    for (int p = 1; p <= 3; p += 2) check_net(&c, p);
    /* what the kernel does not take, and says why */
    vx_qnet_layout L;
    vx_err e;
    char why[96];
    c.trunk[0] = 36;
    if (vx_qnet_layout_make(&c, &L, &e)) fail_msg("%s", e.msg);
    assert_int_equal(vx_af_fits(&L, 232448, why, sizeof why), 0);
    assert_string_equal(why, "trunk widths that are not multiples of 8");
    c.trunk[0] = c.trunk[1] = 4096, c.atoms = 1;
    if (vx_qnet_layout_make(&c, &L, &e)) fail_msg("%s", e.msg);
    assert_int_equal(vx_af_fits(&L, 232448, why, sizeof why), 0);
    assert_string_equal(why, "a network too wide for shared memory");
    vx_qnet_cfg_default(&c);
    c.n_trunk = 2, c.trunk[0] = c.trunk[1] = 256, c.head_hidden = 64;
    if (vx_qnet_layout_make(&c, &L, &e)) fail_msg("%s", e.msg);
    assert_int_equal(vx_af_fits(&L, 232448, why, sizeof why), 1);
}

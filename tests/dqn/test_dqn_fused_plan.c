/* test_dqn_fused_plan.c — the fused update's layout of the Q-network (dqn_fused_plan.c), on the
 * CPU: the network the fused kernels see, run here in float64 from the packed copy alone (its
 * layers, ReLUs and 16-column output product as fused_net.cuh reads them, then the dueling
 * aggregation), gives the Q rows the float64 reference forward pass (qnet_f64.c) gives from the
 * flat parameters; and the packed map holds every parameter exactly once. A head's weights placed
 * in another head's columns, an advantage column off by one, the value in the wrong column, a
 * hidden head read by the wrong output, a row or a bias shifted: each moves some Q by far more
 * than the 1e-10 bar (both passes in float64 from the same float weights; the weights are of order
 * 0.1, every bias set to a distinct nonzero value). Also which networks and losses it takes, and
 * the rows a block. */
#include "helpers.h"
#include "../nn/qnet_f64.h"
#include "dqn/dqn_fused_plan.h"
#include "vixen/dqn_loss.h"
#include "vixen/nn.h"
#include "vixen/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Q rows of B inputs x from the packed copy wp, in float64: fused_net.cuh's reading of it. */
static void packed_forward(const vx_qnet_layout *L, const vx_pf_net *t, const float *wp,
                           const float *x, int B, double *q)
{
    int maxw = t->Dp;
    for (int l = 0; l < t->n; l++) maxw = t->W[l] > maxw ? t->W[l] : maxw;
    double *a = calloc((size_t)maxw, 8), *h = calloc((size_t)maxw, 8), out[VX_PF_HEAD];
    for (int r = 0; r < B; r++) {
        for (int d = 0; d < t->Dp; d++) a[d] = d < t->in ? x[(size_t)r * t->in + d] : 0;
        int K = t->Dp;
        for (int l = 0; l < t->n; l++) { /* every layer one group: g = 1 */
            assert_int_equal(t->g[l], 1);
            for (int c = 0; c < t->W[l]; c++) {
                double s = wp[t->b[l] + c];
                for (int k = 0; k < K; k++) s += a[k] * wp[t->w[l] + k * t->W[l] + c];
                h[c] = s > 0 ? s : 0;
            }
            K = t->W[l];
            for (int c = 0; c < K; c++) a[c] = h[c];
        }
        for (int c = 0; c < VX_PF_HEAD; c++) {
            double s = wp[t->bh + c];
            for (int k = 0; k < t->top; k++) s += a[k] * wp[t->wh + k * VX_PF_HEAD + c];
            out[c] = s;
        }
        double v = out[L->out_dim]; /* the value after the advantages */
        for (int d = 0; d < L->cfg.n_branches; d++) {
            int n = L->cfg.branch[d], k0 = L->out_offset[d];
            double mean = 0;
            for (int k = 0; k < n; k++) mean += out[k0 + k];
            mean /= n;
            for (int k = 0; k < n; k++) q[(size_t)r * L->out_dim + k0 + k] = v + out[k0 + k] - mean;
        }
    }
    free(a), free(h);
}

/* A network of n_trunk layers (widths t0, t1, then t1 again), heads of `head`, and the branches
 * given (nb 0: the environment's 9, 3, 3). */
static void check_network(int t0, int t1, int n_trunk, int head, int nb, const int *branch)
{
    vx_qnet_cfg c;
    vx_qnet_cfg_default(&c);
    c.n_trunk = n_trunk, c.head_hidden = head;
    for (int l = 0; l < n_trunk; l++) c.trunk[l] = l ? t1 : t0;
    if (nb) {
        c.n_branches = nb;
        for (int d = 0; d < nb; d++) c.branch[d] = branch[d];
    }
    vx_qnet_layout L;
    vx_err e;
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_OK);
    assert_true(vx_df_rows(&L, VX_LOSS_HUBER, 1024, 232448, NULL, 0) > 0);
    size_t np = L.n_params;
    float *p = calloc(np, 4);
    vx_qnet_init(&L, 5, p);
    /* distinct nonzero biases, and the zero padding too — not rising evenly with the index: the
     * dueling mean takes an even step out, and two branches' output biases swapped would then
     * give the same Q */
    for (size_t i = 0; i < np; i++)
        if (p[i] == 0) p[i] = 0.01f * (float)((i * i % 97) + 1);
    vx_pf_net t;
    size_t packed = vx_df_layout(&L, &t, NULL);
    assert_int_equal(t.Dp, (t.in + 15) & ~15); /* layer 0's weight gradient: whole row tiles */
    int *src = malloc(packed * sizeof *src);
    assert_int_equal(vx_df_layout(&L, &t, src), packed);
    /* every trainable parameter mapped once (the padding between tensors never) */
    int *count = calloc(np, sizeof *count);
    float *wp = calloc(packed, 4);
    for (size_t k = 0; k < packed; k++)
        if (src[k] >= 0) {
            assert_true((size_t)src[k] < np);
            count[src[k]]++;
            wp[k] = p[src[k]];
        }
    size_t mapped = 0;
    for (size_t i = 0; i < np; i++) {
        assert_true(count[i] <= 1);
        mapped += (size_t)count[i];
    }
    assert_int_equal(mapped, L.n_weights);
    /* the heads' gradient reaches the trunk scaled by 1 / (branches + 1), nothing else; every
     * layer one group, its columns its row */
    assert_int_equal(t.n, n_trunk + 1);
    for (int l = 0; l < t.n; l++) {
        assert_true(t.dscale[l] == (l == n_trunk ? 1.0f / (c.n_branches + 1) : 1.0f));
        assert_int_equal(t.H[l], t.W[l]);
        assert_int_equal(t.g[l], 1);
    }
    enum { B = 5 };
    float x[B * VX_OBS_DIM];
    vx_rng g = vx_rng_make(3, 0, 0);
    for (int i = 0; i < B * VX_OBS_DIM; i++) x[i] = (float)vx_rng_normal(&g);
    /* the reference in float64 from the same float weights and inputs: the two differ only in
     * the order of their additions (about 1e-16 relative), where a misplaced weight moves Q by
     * about its own size. (Against the float32 reference the bar had to sit at float32's
     * rounding, which one machine's BLAS met and another's did not.) */
    double *p64 = malloc(np * sizeof *p64), x64[B * VX_OBS_DIM], ref[B * 16];
    for (size_t i = 0; i < np; i++) p64[i] = p[i];
    for (int i = 0; i < B * VX_OBS_DIM; i++) x64[i] = x[i];
    qnet64_run_forward(&L, p64, x64, B, ref);
    double q[B * 16], worst = 0;
    packed_forward(&L, &t, wp, x, B, q);
    for (int i = 0; i < B * L.out_dim; i++) {
        double d = fabs(q[i] - ref[i]) / (1e-3 + fabs(ref[i]));
        worst = d > worst ? d : worst;
    }
    printf("fused layout, trunk %d × [%d, %d], heads %d, %d branches: Q from the packed copy "
           "within %.2g of the float64 reference\n",
           n_trunk, t0, t1, head, c.n_branches, worst);
    assert_true(worst < 1e-10);
    free(p64), free(p), free(src), free(count), free(wp);
}

void test_dqn_fused_layout(void **state)
{
    (void)state;
    const int two[2] = {5, 2}, four[4] = {2, 3, 4, 5};
    check_network(256, 256, 2, 64, 0, NULL); /* the default */
    check_network(32, 48, 2, 16, 0, NULL);
    check_network(64, 0, 1, 32, 0, NULL);
    check_network(32, 16, 3, 16, 2, two); /* the most layers; 1 / 3 of the heads' gradient */
    check_network(48, 32, 2, 16, 4, four);
}

void test_dqn_fused_takes(void **state)
{
    (void)state;
    vx_qnet_cfg c;
    vx_qnet_cfg_default(&c);
    vx_qnet_layout L;
    vx_err e;
    char why[96];
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_OK);
    assert_int_equal(vx_df_rows(&L, VX_LOSS_HUBER, 1024, 232448, why, sizeof why), 16);
    assert_int_equal(vx_df_rows(&L, VX_LOSS_MSE, 2048, 232448, why, sizeof why), 16);
    assert_int_equal(vx_df_rows(&L, VX_LOSS_HUBER, 4096, 232448, why, sizeof why), 32);
    /* 64 rows need more than a Hopper's shared memory on the default network: 32 up to 1,024
     * slices, then refused; on a narrower network 64 */
    assert_int_equal(vx_df_rows(&L, VX_LOSS_HUBER, 4100, 232448, why, sizeof why), 32);
    assert_int_equal(vx_df_rows(&L, VX_LOSS_HUBER, 32768, 232448, why, sizeof why), 32);
    assert_int_equal(vx_df_rows(&L, VX_LOSS_HUBER, 32769, 232448, why, sizeof why), 0);
    assert_non_null(strstr(why, "1,024 gradient slices"));
    vx_qnet_cfg narrow = c;
    narrow.trunk[0] = narrow.trunk[1] = 64;
    vx_qnet_layout Ln;
    assert_int_equal(vx_qnet_layout_make(&narrow, &Ln, &e), VX_OK);
    assert_int_equal(vx_df_rows(&Ln, VX_LOSS_HUBER, 4100, 232448, why, sizeof why), 64);
    assert_int_equal(vx_df_rows(&L, VX_LOSS_C51, 1024, 232448, why, sizeof why), 0);
    assert_non_null(strstr(why, "C51"));
    vx_pf_net t;
    vx_df_layout(&L, &t, NULL);
    /* the network's buffers and, past them, the kernel's four Q row buffers (target Q(s′),
     * online Q(s′), Q(s), dq) */
    for (int R = 16; R <= 64; R *= 2)
        assert_int_equal(vx_df_smem(&t, R) - vx_pf_smem(&t, R), (size_t)4 * R * VX_DF_QLD * 4);
    /* the memory estimate: both networks' copies and maps, 3 ints a parameter, a slice a block
     * (64 at 1,024 rows) */
    size_t packed = vx_df_layout(&L, &t, NULL), frags = vx_pf_frags(&t, 1, NULL, NULL);
    assert_int_equal(vx_df_bytes(&L, 1024, 1), packed * 12 + frags * 12 + L.n_params * 12 +
                                                   64 * packed * 4 +
                                                   vx_pf_sum_blocks(packed, L.n_params) * 8 + 64);
    size_t need = vx_df_smem(&t, 16);
    assert_int_equal(vx_df_rows(&L, VX_LOSS_HUBER, 1024, need, why, sizeof why), 16);
    assert_int_equal(vx_df_rows(&L, VX_LOSS_HUBER, 1024, need - 1, why, sizeof why), 0);
    assert_non_null(strstr(why, "shared memory"));
    /* more rows a block only where they fit: 16 at 4,096 rows when 32 would not */
    assert_int_equal(vx_df_rows(&L, VX_LOSS_HUBER, 4096, vx_df_smem(&t, 32) - 1, why, sizeof why),
                     16);
    c.trunk[1] = 40;
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_OK);
    assert_int_equal(vx_df_rows(&L, VX_LOSS_HUBER, 1024, 232448, why, sizeof why), 0);
    assert_non_null(strstr(why, "multiples of 16"));
    c.trunk[1] = 64, c.n_trunk = 4, c.trunk[2] = c.trunk[3] = 64; /* one layer too many */
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_OK);
    assert_int_equal(vx_df_rows(&L, VX_LOSS_HUBER, 1024, 232448, why, sizeof why), 0);
    assert_non_null(strstr(why, "more than 3 layers"));
}

/* The layer-by-layer update's tiles (vx_dl_plan_make) on the default network, against the
 * shared memory of each phase counted here by hand (floats; rows VX_PF_PAD = 8 past their width):
 * in TF32 the largest phase is a forward tile of 96 rows over K = 256 — its input rows
 * 96 × 264, the weights' 64 columns 256 × 64, its output 96 × 72 — so a byte less than that
 * takes 64-row tiles; in 3×TF32 (the weights' big and small parts) 32 columns a tile. Then its
 * slices (a chunk of 128 rows each), its activations' buffer and its memory estimate. A plan
 * that sized a phase short would let the kernel write past its shared memory on the device. */
void test_dqn_layers_plan(void **state)
{
    (void)state;
    vx_qnet_cfg c;
    vx_qnet_cfg_default(&c);
    vx_qnet_layout L;
    vx_err e;
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_OK);
    vx_pf_net t;
    size_t packed = vx_df_layout(&L, &t, NULL);
    vx_dl_plan p;
    size_t fwd96 = 96 * 264 + 256 * 64 + 96 * 72; /* 48,640 floats */
    assert_int_equal(vx_dl_plan_make(&t, 1, 232448, &p), 1);
    assert_int_equal(p.rt, 96), assert_int_equal(p.ct, 64), assert_int_equal(p.ch, 128);
    assert_int_equal(p.rtb, 32);
    assert_int_equal(p.smem, fwd96 * 4);
    /* the other phases, each under it: the first layer's forward tile, the input gradient, the
     * loss's 16 rows, a weight-gradient chunk */
    assert_int_equal(t.Dp, 64); /* the input's 51 floats padded */
    assert_int_equal(vx_dl_fwd_floats(&t, &p, 2, 0), 96 * 72 + 64 * 64 + 96 * 72);
    assert_int_equal(vx_dl_dgrad_floats(&t, &p, 2, 2), 32 * 264 + 256 * 64 + 32 * 72);
    assert_int_equal(vx_dl_loss_floats(&t), 3 * 16 * 264 + 3 * 16 * 24 + 16 * 256 + 4 * 16 * 16);
    assert_int_equal(vx_dl_wgrad_floats(&t, &p, 1), 128 * 264 + 128 * 72);
    assert_int_equal(vx_dl_wgrad_floats(&t, &p, t.n), 128 * 264 + 128 * 24); /* the heads */
    assert_int_equal(vx_dl_plan_make(&t, 1, fwd96 * 4 - 1, &p), 1);
    assert_int_equal(p.rt, 64), assert_int_equal(p.ch, 128);
    /* now the largest: a weight-gradient chunk (37,888 floats a 64-row forward tile) */
    assert_int_equal(p.smem, (128 * 264 + 128 * 72) * 4);
    assert_int_equal(vx_dl_plan_make(&t, 3, 232448, &p), 1);
    assert_int_equal(p.rt, 96), assert_int_equal(p.ct, 32);
    assert_int_equal(p.smem, (96 * 264 + 256 * 32 * 2 + 96 * 40) * 4);
    /* nothing fits: 16-row tiles of K = 256 alone take more */
    assert_int_equal(vx_dl_plan_make(&t, 1, 40000, &p), 0);
    assert_int_equal(p.smem, 0);
    assert_int_equal(vx_dl_plan_make(&t, 1, 232448, &p), 1);
    assert_int_equal(vx_dl_chunks(&p, 1024), 8);
    assert_int_equal(vx_dl_chunks(&p, 1025), 9);
    /* every hidden layer's rows over three passes, their gradients over one, the heads' 16 */
    assert_int_equal(vx_dl_act_floats(&t, 1024), (size_t)1024 * (4 * (256 + 256 + 256) + 16));
    size_t frags = vx_pf_frags(&t, 1, NULL, NULL);
    assert_int_equal(vx_dl_bytes(&L, VX_LOSS_HUBER, 1024, 1),
                     packed * 12 + frags * 12 + L.n_params * 12 + 8 * packed * 4 +
                         vx_pf_sum_blocks(packed, L.n_params) * 8 + 64 +
                         vx_dl_act_floats(&t, 1024) * 4);
    assert_int_equal(vx_dl_bytes(&L, VX_LOSS_C51, 1024, 1), 0);
}

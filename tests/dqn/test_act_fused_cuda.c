/* test_act_fused_cuda.c — the DQN's fused acting kernel (src/dqn/act_fused.h) against the
 * per-layer float32 path on the same GPU. Skipped (77) without one.
 *
 * - Q-values: for the GPU reference network (trunk 256 × 256, heads 64), a C51 network and a
 *   three-layer one, over 2,053 observations (a last block of 5 rows; nothing written past it),
 *   3×TF32 within 1e-5 of the largest |Q| of the float32 path, TF32 within 1e-2 but further than
 *   1e-7 (so each precision is the one asked for: a TF32 kernel fails the first bound, a float32
 *   one the last). BF16 against a float64 forward pass written here whose products take their
 *   operands rounded to bf16 (to nearest, even) as the tensor cores do: within 5e-3 of the scale
 *   at worst and with an rms error under a tenth of the kernel's rms error from float32 (a float32
 *   activation may round the other way than its float64 twin at a tie; measured on an H100: rms
 *   0.019, 9e-6 and 0.015 of float32's for the three networks), and more than 3e-3 from float32
 *   at worst. A TF32 kernel, or one rounding toward zero, would fail the rms bound: its error
 *   from the bf16 pass would be the size of bf16's own (reasoned, not run as a mutation).
 * - A rollout (dqn.acting tf32x3 against float32, the same environments and weights): with
 *   ε = 1 every staged transition (observations, actions, rewards, flags, lengths) and the
 *   episode statistics are the same, bit for bit, over 3 steps, in 3×TF32 and BF16 through the
 *   graphs and in TF32 kernel by kernel (the acting draws, the step counter, the environments'
 *   step and the n-step emit, which the fused kernel does itself, are the per-layer path's); again
 * with 3-step returns over 4-step episodes, in the second of two rollouts of 9 steps (the counters
 * a rollout leaves key the next one's draws), and for C51 over 4,100 environments (more blocks than
 * fit the device at once); with ε = 0, over three steps (and six steps of 2-step episodes), each
 * environment followed while the two paths agree: the same observations, and where the greedy
 * actions agree the same reward and next observation, and every action that differs a near-tie on
 * the float32 path (its two actions' Q within 3e-5 of the scale): a kernel acting on the wrong row,
 * branch, Q or a stale observation fails it. */
#include "helpers.h"
#include "dqn/act_fused.h"
#include "dqn/rollout_cuda.h"
#include "vixen/dqn.h"
#include "vixen/env.h"
#include "vixen/nn.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)
#define A VX_ACTION_BRANCHES
#define D VX_OBS_DIM

static vx_device *g_dev;
static int g_bf16_ok = 1; /* every network's BF16 bounds held */

static const char *net_names[3] = {"256×256", "C51 64×64", "320×96×40, heads 24"};

/* 0: the GPU reference network; 1: C51; 2: three layers, the first wide enough for the products'
 * widest strips (40 columns) */
static void net_of(int which, vx_qnet_layout *L, vx_loss_shape *shape)
{
    vx_dqn_cfg dc;
    vx_dqn_cfg_default(&dc);
    vx_qnet_cfg net;
    vx_qnet_cfg_default(&net);
    if (which == 1) {
        dc.loss = VX_LOSS_C51;
        net.trunk[0] = net.trunk[1] = 64, net.head_hidden = 32;
    } else if (which == 2) {
        net.n_trunk = 3, net.trunk[0] = 320, net.trunk[1] = 96, net.trunk[2] = 40;
        net.head_hidden = 24;
    } else {
        net.trunk[0] = net.trunk[1] = 256, net.head_hidden = 64;
    }
    vx_err e;
    if (vx_dqn_layout(&dc, &net, L, shape, &e)) fail_msg("%s", e.msg);
}

/* v rounded to bf16 (to nearest, even: the tensor cores' and cvt.rn's rounding), as a double. */
static double bf16_of(double x)
{
    float v = (float)x;
    uint32_t u;
    memcpy(&u, &v, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&v, &u, 4);
    return v;
}

/* y (out) = ReLU?(b + Σ_k x_k · W_kj) in float64, the operands rounded to bf16 first (bf) as the
 * BF16 products take them, or as they are. */
static void dense_bf16(const vx_dense *d, const float *p, const double *x, int relu, int bf,
                       double *y)
{
    for (int j = 0; j < d->out; j++) {
        double s = 0;
        for (int k = 0; k < d->in; k++) {
            double w = p[d->w + (size_t)k * d->out + (size_t)j];
            s += bf ? bf16_of(x[k]) * bf16_of(w) : x[k] * w;
        }
        s += p[d->b + (size_t)j];
        y[j] = relu && s < 0 ? 0 : s;
    }
}

/* The Q-network's row for observation x in float64, every product's operands in bf16 (bf) or as
 * they are: the trunk, each head's two layers, the dueling aggregation (qnet_impl.h's order of
 * terms). */
static void q_bf16(const vx_qnet_layout *L, const float *p, const float *x, int bf, double *q)
{
    const vx_qnet_cfg *c = &L->cfg;
    double a[1024], b[1024], v[64], h[1024], o[1024];
    for (int k = 0; k < c->in_dim; k++) a[k] = x[k];
    for (int l = 0; l < c->n_trunk; l++) {
        dense_bf16(&L->trunk[l], p, a, 1, bf, b);
        memcpy(a, b, sizeof(double) * (size_t)c->trunk[l]);
    }
    dense_bf16(&L->value1, p, a, 1, bf, h);
    dense_bf16(&L->value2, p, h, 0, bf, v);
    for (int d = 0; d < c->n_branches; d++) {
        int n = c->branch[d], Z = c->atoms;
        dense_bf16(&L->adv1[d], p, a, 1, bf, h);
        dense_bf16(&L->adv2[d], p, h, 0, bf, o);
        for (int z = 0; z < Z; z++) {
            double mean = 0;
            for (int k = 0; k < n; k++) mean += o[k * Z + z];
            mean /= n;
            for (int k = 0; k < n; k++)
                q[L->out_offset[d] + k * Z + z] = v[z] + o[k * Z + z] - mean;
        }
    }
}

static float *device_copy(const void *host, size_t bytes)
{
    void *d;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    /* a cudaMemcpy from pageable memory can return before its DMA lands; the work that reads
     * this may be queued on a non-blocking stream, which does not wait for it */
    CK(cudaDeviceSynchronize());
    return d;
}

static void q_against_float32(int which, int acting)
{
    vx_qnet_layout L;
    vx_loss_shape shape;
    net_of(which, &L, &shape);
    const int N = 2053;
    size_t O = (size_t)L.out_dim;
    float *params = malloc(L.n_params * 4), *x = malloc((size_t)N * D * 4);
    vx_qnet_init(&L, 7, params);
    for (size_t i = 0; i < (size_t)N * D; i++) x[i] = (float)sin(0.013 * (double)i) * 1.5f;
    float *d_params = device_copy(params, L.n_params * 4), *d_x = device_copy(x, (size_t)N * D * 4);
    float *d_q, *ref = malloc((size_t)N * O * 4), *got = malloc((size_t)N * O * 4);
    /* a tail past the last row, which the kernel must not touch */
    const size_t tail = 4096;
    CK(cudaMalloc((void **)&d_q, ((size_t)N * O + tail) * 4));
    CK(cudaMemset(d_q + (size_t)N * O, 0xff, tail * 4));
    vx_err e;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    vx_qnet *q;
    if (vx_qnet_create(&L, N, 0, g_dev, &q, &e) || vx_qnet_forward(q, d_params, d_x, N, s, &e))
        fail_msg("%s", e.msg);
    CK(cudaMemcpyAsync(ref, vx_qnet_output(q), (size_t)N * O * 4, cudaMemcpyDeviceToHost, s));
    dqn_act_fused *f;
    if (dqn_act_fused_create(&L, acting, g_dev, &f, &e)) fail_msg("%s", e.msg);
    dqn_act_fused_args a;
    memset(&a, 0, sizeof a);
    a.N = N, a.obs = d_x, a.q = d_q, a.shape = shape;
    if (dqn_act_fused_pack(f, d_params, s, &e) || dqn_act_fused_step(f, &a, s, &e))
        fail_msg("%s", e.msg);
    CK(cudaMemcpyAsync(got, d_q, (size_t)N * O * 4, cudaMemcpyDeviceToHost, s));
    uint32_t *after = malloc(tail * 4);
    CK(cudaMemcpyAsync(after, d_q + (size_t)N * O, tail * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < tail; i++) assert_int_equal(after[i], 0xffffffffu);
    free(after);
    /* the worst difference, a NaN on either side counting as infinite (fmax would skip it), and
     * where it is: a wrong row or column says which block or strip to look at */
    double worst = 0, scale = 0, ss = 0;
    size_t at = 0;
    for (size_t i = 0; i < (size_t)N * O; i++) {
        double d = (double)got[i] - (double)ref[i];
        if (!(fabs(d) <= worst)) worst = isnan(d) ? INFINITY : fabs(d), at = i;
        ss += d * d;
        scale = fmax(scale, fabs((double)ref[i]));
    }
    const char *names[] = {"", "TF32", "3×TF32", "BF16"};
    print_message("%s, %s: |Q| up to %.3g, the fused kernel within %.3g (%.2g of the scale)\n",
                  net_names[which], names[acting], scale, worst, worst / scale);
    if (worst > 1e-2 * scale) { /* a failure to come: what went wrong, before it fails */
        double q64[1024];
        q_bf16(&L, params, x + at / O * D, 0, q64);
        int wrong = 0, rows = 0, last = -1;
        for (size_t i = 0; i < (size_t)N * O; i++)
            if (!(fabs((double)got[i] - (double)ref[i]) <= 1e-2 * scale))
                wrong++, rows += (int)(i / O) != last, last = (int)(i / O);
        print_message("  worst at row %zu (block %zu), column %zu: fused %.9g, per layer %.9g, "
                      "float64 %.9g; %d values in %d rows past 1e-2 of the scale\n",
                      at / O, at / O / 16, at % O, (double)got[at], (double)ref[at], q64[at % O],
                      wrong, rows);
    }
    assert_true(scale > 0.1);
    if (acting == VX_ACTING_TF32X3) {
        assert_true(worst <= 1e-5 * scale);
    } else if (acting == VX_ACTING_TF32) {
        assert_true(worst <= 1e-2 * scale);
        assert_true(worst > 1e-7 * scale);
    } else {
        double *q64 = malloc(O * sizeof *q64), worst_bf = 0, ss_bf = 0;
        for (int i = 0; i < N; i++) {
            q_bf16(&L, params, x + (size_t)i * D, 1, q64);
            for (size_t c = 0; c < O; c++) {
                double d = (double)got[(size_t)i * O + c] - q64[c];
                if (!(fabs(d) <= worst_bf)) worst_bf = isnan(d) ? INFINITY : fabs(d);
                ss_bf += d * d;
            }
        }
        double rms = sqrt(ss / (double)(N * O)), rms_bf = sqrt(ss_bf / (double)(N * O));
        print_message("%s, BF16: from float32 rms %.3g; from the float64 pass on bf16 operands "
                      "within %.3g (%.2g of the scale), rms %.3g (%.2g of float32's)\n",
                      net_names[which], rms, worst_bf, worst_bf / scale, rms_bf, rms_bf / rms);
        g_bf16_ok &= worst > 3e-3 * scale && worst_bf <= 5e-3 * scale && rms_bf <= 0.1 * rms;
        free(q64);
    }
    dqn_act_fused_free(f);
    vx_qnet_free(q);
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d_params)), CK(cudaFree(d_x)), CK(cudaFree(d_q));
    free(params), free(x), free(ref), free(got);
}

static void test_q_against_float32(void **state)
{
    (void)state;
    for (int which = 0; which < 3; which++)
        for (int acting = VX_ACTING_TF32; acting <= VX_ACTING_BF16; acting++)
            q_against_float32(which, acting);
    assert_true(g_bf16_ok); /* after every network's figures are printed */
}

/* ---- rollouts ---------------------------------------------------------------------------------
 */

typedef struct {
    int32_t *act;
    float *rew, *next, *obs;
    uint8_t *term, *trunc, *steps;
    size_t n;           /* transitions staged */
    double episodes[2]; /* the episode statistics: the returns' sum, the episodes ended */
} staged;

/* `rounds` rollouts of T steps of N environments with acting `acting` at ε and n-step returns
 * over n_step steps (episodes of episode_len steps; 0: the default), through the graphs or
 * (eager) kernel by kernel; the last rollout's staged transitions and episode statistics on the
 * host. */
static staged rollout(const vx_qnet_layout *L, const vx_loss_shape *shape, const float *d_params,
                      const vx_market *m, int N, int T, int n_step, int episode_len, double eps,
                      int acting, int eager, int rounds)
{
    vx_env_cfg c;
    vx_env_cfg_default(&c);
    c.seed = 5;
    if (episode_len) c.episode_len = episode_len;
    vx_env *env;
    vx_err e;
    if (vx_env_create(&c, m, VX_SPLIT_TRAIN, (size_t)N, g_dev, &env, &e)) fail_msg("%s", e.msg);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    dqn_rollout_cfg rc = {T, n_step, 0.99, 11, L, shape, d_params, 0, acting};
    dqn_rollout *r;
    if (dqn_rollout_create(&rc, env, s, &r, &e)) fail_msg("%s", e.msg);
    assert_int_equal(dqn_rollout_fused(r), acting != 0); /* the path asked for, no fallback */
    if (dqn_rollout_set_eps(r, eps, &e)) fail_msg("%s", e.msg);
    for (int k = 0; k < rounds; k++) {
        if (dqn_rollout_run(r, eager, &e)) fail_msg("%s", e.msg);
        CK(cudaStreamSynchronize(s));
    }
    vx_transitions t;
    size_t n;
    dqn_rollout_staged(r, &t, &n);
    if (n_step == 1) assert_int_equal(n, (size_t)N * T);
    staged h = {malloc(n * A * 4),
                malloc(n * 4),
                malloc(n * D * 4),
                malloc(n * D * 4),
                malloc(n),
                malloc(n),
                malloc(n),
                n,
                {0, 0}};
    CK(cudaMemcpy(h.act, t.actions, n * A * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h.rew, t.rewards, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h.next, t.next_obs, n * D * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h.obs, t.obs, n * D * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h.term, t.terminated, n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h.trunc, t.truncated, n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h.steps, t.steps, n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h.episodes, dqn_rollout_episode_stats(r), 16, cudaMemcpyDeviceToHost));
    dqn_rollout_free(r);
    vx_env_free(env);
    CK(cudaStreamDestroy(s));
    return h;
}

static void staged_free(staged *h)
{
    free(h->act), free(h->rew), free(h->next), free(h->obs);
    free(h->term), free(h->trunc), free(h->steps);
}

/* Every staged transition and the episode statistics, bit for bit. */
static void assert_staged_equal(const staged *x, const staged *y)
{
    assert_int_equal(x->n, y->n);
    size_t n = x->n;
    assert_memory_equal(x->act, y->act, n * A * 4);
    assert_memory_equal(x->rew, y->rew, n * 4);
    assert_memory_equal(x->obs, y->obs, n * D * 4);
    assert_memory_equal(x->next, y->next, n * D * 4);
    assert_memory_equal(x->term, y->term, n);
    assert_memory_equal(x->trunc, y->trunc, n);
    assert_memory_equal(x->steps, y->steps, n);
    assert_memory_equal(x->episodes, y->episodes, sizeof x->episodes);
}

/* Greedy acting (ε = 0), T steps of N environments over episodes of episode_len steps (0: the
 * default), the per-layer float32 path against 3×TF32 fused. Each environment is followed while
 * both paths' trajectories agree: then its observation is the same on both, and every action the
 * paths disagree on must be a float32 near-tie (the CPU's Q on that observation); after a
 * disagreement the trajectories part and the environment is left. Steps after the first see
 * observations the kernel made itself (a stale one, or another row's, fails here). Out: the
 * environments followed to the last step, and those that parted. */
static void greedy_followed(const vx_qnet_layout *L, const vx_loss_shape *shape,
                            const float *params, const float *d_params, const vx_market *m, int N,
                            int T, int episode_len, int *followed_all, int *parted)
{
    staged x = rollout(L, shape, d_params, m, N, T, 1, episode_len, 0.0, 0, 0, 1);
    staged y = rollout(L, shape, d_params, m, N, T, 1, episode_len, 0.0, VX_ACTING_TF32X3, 0, 1);
    vx_qnet_ws ws;
    vx_err e;
    if (vx_qnet_ws_create(L, (size_t)N * T, &ws, &e)) fail_msg("%s", e.msg);
    vx_qnet_forward_ref(L, params, x.obs, (size_t)N * T, &ws); /* the CPU's float32 Q */
    int differ = 0, last = 0, spread[A] = {0};
    double scale = 0;
    for (size_t i = 0; i < (size_t)N * T * L->out_dim; i++) scale = fmax(scale, fabs(ws.q[i]));
    for (int i = 0; i < N; i++) {
        for (int t = 0; t < T; t++) {
            size_t k = (size_t)t * N + i; /* n = 1: step t's transition of environment i */
            assert_memory_equal(x.obs + k * D, y.obs + k * D, D * 4);
            int same = 1;
            for (int b = 0; b < A; b++) {
                int32_t p = x.act[k * A + b], q = y.act[k * A + b];
                spread[b] |= 1 << p;
                if (p == q) continue;
                same = 0;
                const float *row = ws.q + k * L->out_dim + L->out_offset[b];
                double gap = fabs((double)row[p] - (double)row[q]);
                if (gap > 3e-5 * scale) /* twice the Q test's bound, and float32's own spread */
                    fail_msg("environment %d, step %d, branch %d: %d on the float32 path, %d "
                             "fused, Q %.6g and %.6g",
                             i, t, b, p, q, row[p], row[q]);
            }
            if (!same) {
                differ++;
                break;
            }
            assert_true(x.rew[k] == y.rew[k]);
            assert_memory_equal(x.next + k * D, y.next + k * D, D * 4);
            last += t == T - 1;
        }
    }
    /* the greedy actions are not all one: the comparison could tell rows apart */
    for (int b = 0; b < A; b++) assert_true(__builtin_popcount((unsigned)spread[b]) >= 2);
    assert_true(last > N / 2);
    *followed_all = last, *parted = differ;
    vx_qnet_ws_free(&ws);
    staged_free(&x), staged_free(&y);
}

static void test_rollout_acts_as_the_per_layer_path(void **state)
{
    (void)state;
    vx_series ser;
    th_synth(&ser, 12, 4, 0.2);
    vx_market m;
    vx_err e;
    if (vx_market_from_series(&ser, &m, &e)) fail_msg("%s", e.msg);
    vx_qnet_layout L;
    vx_loss_shape shape;
    net_of(0, &L, &shape);
    float *params = malloc(L.n_params * 4);
    vx_qnet_init(&L, 3, params);
    float *d_params = device_copy(params, L.n_params * 4);
    const int N = 2053;
    /* ε = 1: the draws alone decide, three steps; 3×TF32 through the graphs, TF32 kernel by
     * kernel, BF16 through the graphs */
    staged x = rollout(&L, &shape, d_params, &m, N, 3, 1, 0, 1.0, 0, 0, 1);
    const int precisions[3] = {VX_ACTING_TF32X3, VX_ACTING_TF32, VX_ACTING_BF16};
    for (int k = 0; k < 3; k++) {
        staged y = rollout(&L, &shape, d_params, &m, N, 3, 1, 0, 1.0, precisions[k], k == 1, 1);
        assert_staged_equal(&x, &y);
        staged_free(&y);
    }
    staged_free(&x);
    { /* ε = 0.5, one step from the same observations, 3×TF32 fused: each branch's uniform decides
       * whether it explores, so a uniform from the wrong word (not the one vx_act_branch draws
       * first) changes about a third of the actions; the paths may part only at a near-tie of
       * the greedy choice (at least 99 % the same) */
        staged xe = rollout(&L, &shape, d_params, &m, N, 1, 1, 0, 0.5, 0, 0, 1);
        staged ye = rollout(&L, &shape, d_params, &m, N, 1, 1, 0, 0.5, VX_ACTING_TF32X3, 0, 1);
        int agree = 0;
        for (size_t k = 0; k < xe.n * A; k++) agree += xe.act[k] == ye.act[k];
        print_message("ε = 0.5: %d of %zu actions the same on both paths\n", agree, xe.n * A);
        assert_true(agree >= 0.99 * (double)(xe.n * A));
        staged_free(&xe), staged_free(&ye);
    }
    /* … and with 3-step returns over episodes of 4 steps, the second rollout of 9 steps: the
     * emit's rings, its flushes at an episode's end, its flags and packing, the episode sums
     * (every environment ends two episodes or more), and the counters the first rollout left
     * (the acting draws of the second are keyed by them) */
    x = rollout(&L, &shape, d_params, &m, N, 9, 3, 4, 1.0, 0, 0, 2);
    assert_true(x.episodes[1] >= 2.0 * N); /* stop-outs may end more */
    int partial = 0;
    for (size_t k = 0; k < x.n; k++) partial += x.steps[k] < 3;
    assert_true(partial > 0); /* an episode's end flushed its shorter returns */
    for (int k = 0; k < 2; k++) {
        staged y = rollout(&L, &shape, d_params, &m, N, 9, 3, 4, 1.0,
                           k ? VX_ACTING_TF32 : VX_ACTING_TF32X3, k, 2);
        assert_staged_equal(&x, &y);
        staged_free(&y);
    }
    print_message("ε = 1, 3-step returns, episodes of 4 steps, a second rollout: %zu transitions "
                  "over 9 steps, %d of them shorter, the same on both paths\n",
                  x.n, partial);
    staged_free(&x);
    { /* C51 (its dueling aggregation on every warp, no prefetch) over 4,100 environments: 257
       * blocks, more than an H100's or H200's multiprocessors hold at once, so some start after
       * others have finished — the counters must still be read by all before they move on */
        vx_qnet_layout Lc;
        vx_loss_shape sc;
        net_of(1, &Lc, &sc);
        float *pc = malloc(Lc.n_params * 4);
        vx_qnet_init(&Lc, 5, pc);
        float *d_pc = device_copy(pc, Lc.n_params * 4);
        staged xc = rollout(&Lc, &sc, d_pc, &m, 4100, 5, 3, 3, 1.0, 0, 0, 2);
        staged yc = rollout(&Lc, &sc, d_pc, &m, 4100, 5, 3, 3, 1.0, VX_ACTING_TF32, 0, 2);
        assert_staged_equal(&xc, &yc);
        staged_free(&xc), staged_free(&yc);
        /* greedy C51 (its actions from the expected values over atoms, the acting thread's own
         * scan: the dueling pass finds greedy actions for one atom only), one step from the same
         * observations, the float32 path against 3×TF32 fused: every action the same but at a
         * near-tie, and the actions not all one */
        xc = rollout(&Lc, &sc, d_pc, &m, 4100, 1, 1, 0, 0.0, 0, 0, 1);
        yc = rollout(&Lc, &sc, d_pc, &m, 4100, 1, 1, 0, 0.0, VX_ACTING_TF32X3, 0, 1);
        int agree = 0, spread = 0;
        for (size_t k = 0; k < xc.n * A; k++) {
            agree += xc.act[k] == yc.act[k];
            spread |= 1 << xc.act[k];
        }
        print_message("C51, greedy: %d of %zu actions the same on both paths\n", agree, xc.n * A);
        assert_true(agree >= 0.99 * (double)(xc.n * A));
        assert_true(__builtin_popcount((unsigned)spread) >= 2);
        staged_free(&xc), staged_free(&yc);
        CK(cudaFree(d_pc));
        free(pc);
    }
    { /* ties: with every weight 0 every Q is 0, and the greedy action of each branch is its
       * first (vx_loss_argmax's rule, which the fused kernel's dueling pass keeps; taking the last
       * of equal values, or another branch's, shows here) */
        float *d_zero = NULL;
        CK(cudaMalloc((void **)&d_zero, L.n_params * 4));
        CK(cudaMemset(d_zero, 0, L.n_params * 4));
        CK(cudaDeviceSynchronize()); /* before the rollouts' own streams read it */
        staged xz = rollout(&L, &shape, d_zero, &m, 64, 2, 1, 0, 0.0, 0, 0, 1);
        for (size_t k = 0; k < xz.n * A; k++) assert_int_equal(xz.act[k], 0);
        for (int k = 0; k < 3; k++) {
            staged yz = rollout(&L, &shape, d_zero, &m, 64, 2, 1, 0, 0.0, precisions[k], 0, 1);
            assert_staged_equal(&xz, &yz);
            staged_free(&yz);
        }
        staged_free(&xz);
        CK(cudaFree(d_zero));
    }
    /* ε = 0: greedy, three steps of the default episodes, then six of episodes of two steps
     * (the observations the kernel keeps after an episode's end are the new episode's) */
    int followed[2], differ[2];
    greedy_followed(&L, &shape, params, d_params, &m, N, 3, 0, &followed[0], &differ[0]);
    greedy_followed(&L, &shape, params, d_params, &m, N, 6, 2, &followed[1], &differ[1]);
    print_message(
        "ε = 1: 3 steps of %d environments identical; ε = 0: %d of them followed through "
        "3 steps, %d parted at a near-tie; through 6 steps of 2-step episodes %d and %d\n",
        N, followed[0], differ[0], followed[1], differ[1]);
    CK(cudaFree(d_params));
    free(params);
    vx_market_close(&m);
}

int main(void)
{
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CUDA;
    vx_err e;
    if (vx_device_open(&dc, &g_dev, &e)) {
        printf("skipped: %s\n", e.msg);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q_against_float32),
        cmocka_unit_test(test_rollout_acts_as_the_per_layer_path),
    };
    int failed = cmocka_run_group_tests_name("act_fused_cuda", tests, NULL, NULL);
    vx_device_close(g_dev);
    return failed;
}

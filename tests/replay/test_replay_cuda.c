/* test_replay_cuda.c — the GPU replay buffer (vx_replay on a CUDA device context) against the
 * CPU reference and its guarantees: contents and ring order; with one seed, the CPU's draws draw
 * for draw, the same probabilities and IS weights against float64 to 1e-5; with independent
 * seeds, the GPU's sampled frequencies against the CPU's (two-sample chi-square) and against
 * float64 P(i) (power against a 5% error in α stated); no drift after 10 M device updates, stale
 * and duplicate updates, NaN clamping, no draw of an empty slot, a captured sample→update graph
 * replayed 1,000 times, both fallbacks (allocation failure, launch failure) with fault injection
 * and a budget refusal, chunked save/load byte-identical with the CPU's file, and a snapshot
 * written from another thread; a replay group's members byte for byte their twins alone.
 * Skipped (77) without a GPU. */
#include "helpers.h"
#include "vixen/cuda_util.h"
#include "vixen/philox.h"
#include "vixen/replay.h"
#include "vixen/device.h"
#include "replay/replay_group_cuda.h"
#include "tree_check_cuda.h"

#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { D = 8 };

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)

static vx_device *g_dev; /* the CUDA context every GPU buffer here is created on */

typedef struct { /* a device batch of B samples */
    float *obs, *next, *rew, *w;
    int32_t *act;
    uint8_t *te, *tu, *st;
    uint32_t *idx, *gen;
    vx_replay_batch b;
} dbatch;

static void dbatch_make(dbatch *x, size_t B)
{
    CK(cudaMalloc((void **)&x->obs, B * D * 4));
    CK(cudaMalloc((void **)&x->next, B * D * 4));
    CK(cudaMalloc((void **)&x->rew, B * 4));
    CK(cudaMalloc((void **)&x->w, B * 4));
    CK(cudaMalloc((void **)&x->act, B * 12));
    CK(cudaMalloc((void **)&x->te, B));
    CK(cudaMalloc((void **)&x->tu, B));
    CK(cudaMalloc((void **)&x->st, B));
    CK(cudaMalloc((void **)&x->idx, B * 4));
    CK(cudaMalloc((void **)&x->gen, B * 4));
    x->b = (vx_replay_batch){x->obs, x->next, x->act, x->rew, x->te,
                             x->tu,  x->st,   x->w,   x->idx, x->gen};
}

static void dbatch_free(dbatch *x)
{
    cudaFree(x->obs), cudaFree(x->next), cudaFree(x->rew), cudaFree(x->w), cudaFree(x->act);
    cudaFree(x->te), cudaFree(x->tu), cudaFree(x->st), cudaFree(x->idx), cudaFree(x->gen);
}

/* n transitions numbered k0..: obs all k, next k + 0.5, reward k; on the host (h) and device (d) */
typedef struct {
    float *o, *nx, *r;
    int32_t *a;
    uint8_t *f;
    vx_transitions h, d;
    float *d_o, *d_nx, *d_r;
    int32_t *d_a;
    uint8_t *d_f;
} tset;

static void tset_make(tset *t, size_t n, int k0)
{
    t->o = malloc(n * D * 4), t->nx = malloc(n * D * 4), t->r = malloc(n * 4);
    t->a = malloc(n * 12), t->f = calloc(n, 1);
    for (size_t i = 0; i < n; i++) {
        float k = (float)(k0 + (int)i);
        for (int j = 0; j < D; j++) t->o[i * D + j] = k, t->nx[i * D + j] = k + 0.5f;
        t->r[i] = k;
        t->a[i * 3] = (int)(i % 9), t->a[i * 3 + 1] = (int)(i % 3), t->a[i * 3 + 2] = 2;
    }
    CK(cudaMalloc((void **)&t->d_o, n * D * 4));
    CK(cudaMalloc((void **)&t->d_nx, n * D * 4));
    CK(cudaMalloc((void **)&t->d_r, n * 4));
    CK(cudaMalloc((void **)&t->d_a, n * 12));
    CK(cudaMalloc((void **)&t->d_f, n));
    CK(cudaMemcpy(t->d_o, t->o, n * D * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(t->d_nx, t->nx, n * D * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(t->d_r, t->r, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(t->d_a, t->a, n * 12, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(t->d_f, t->f, n, cudaMemcpyHostToDevice));
    /* a cudaMemcpy from pageable memory can return before its DMA lands; the work that reads
     * this may be queued on a non-blocking stream, which does not wait for it */
    CK(cudaDeviceSynchronize());
    t->h = (vx_transitions){t->o, t->nx, t->a, t->r, t->f, t->f, NULL};
    t->d = (vx_transitions){t->d_o, t->d_nx, t->d_a, t->d_r, t->d_f, t->d_f, NULL};
}

static void tset_free(tset *t)
{
    free(t->o), free(t->nx), free(t->r), free(t->a), free(t->f);
    cudaFree(t->d_o), cudaFree(t->d_nx), cudaFree(t->d_r), cudaFree(t->d_a), cudaFree(t->d_f);
}

static vx_replay_cfg cfg_of(vx_replay_kind k, size_t cap)
{
    vx_replay_cfg c;
    vx_replay_cfg_default(&c, k, cap);
    c.obs_dim = D;
    c.seed = 11;
    return c;
}

/* Sets slots [0, n) to priorities |td| via device update with stamps `gen`. */
static void dev_update(vx_replay *r, const uint32_t *idx, const uint32_t *gen, const float *td,
                       size_t n)
{
    uint32_t *di, *dg;
    float *dt;
    CK(cudaMalloc((void **)&di, n * 4));
    CK(cudaMalloc((void **)&dg, n * 4));
    CK(cudaMalloc((void **)&dt, n * 4));
    CK(cudaMemcpy(di, idx, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dg, gen, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dt, td, n * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
    vx_err e;
    assert_int_equal(vx_replay_update(r, di, dg, dt, n, NULL, &e), VX_OK);
    CK(cudaDeviceSynchronize());
    cudaFree(di), cudaFree(dg), cudaFree(dt);
}

static void test_contents_and_ring(void **state)
{
    (void)state;
    vx_replay_cfg c = cfg_of(VX_REPLAY_PROPORTIONAL, 5000);
    vx_replay *r;
    vx_err e;
    assert_int_equal(vx_replay_create(&c, g_dev, &r, &e), VX_OK);
    assert_int_equal(vx_replay_on_device(r), 1);
    tset t;
    tset_make(&t, 3000, 0);
    assert_int_equal(vx_replay_insert(r, &t.d, 3000, NULL, &e), VX_OK);
    tset u;
    tset_make(&u, 3000, 3000); /* wraps: slots 0..999 now hold 5000..5999 */
    assert_int_equal(vx_replay_insert(r, &u.d, 3000, NULL, &e), VX_OK);
    dbatch x;
    dbatch_make(&x, 1000);
    float *obs = malloc(1000 * D * 4), *rew = malloc(4000), *w = malloc(4000);
    uint32_t *idx = malloc(4000), *gen = malloc(4000);
    for (int it = 0; it < 20; it++) {
        assert_int_equal(vx_replay_sample(r, 1000, &x.b, NULL, &e), VX_OK);
        CK(cudaMemcpy(obs, x.obs, 1000 * D * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(rew, x.rew, 4000, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(w, x.w, 4000, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(idx, x.idx, 4000, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gen, x.gen, 4000, cudaMemcpyDeviceToHost));
        for (int j = 0; j < 1000; j++) {
            assert_true(idx[j] < 5000);
            float k = idx[j] < 1000 ? 5000.0f + idx[j] : (float)idx[j];
            assert_near(rew[j], k, 0);
            assert_near(obs[j * D + D - 1], k, 0);
            assert_int_equal(gen[j], idx[j] < 1000 ? 2 : 1);
            assert_true(w[j] > 0 && w[j] <= 1);
        }
    }
    vx_replay_stats s;
    double fresh;
    assert_int_equal(vx_replay_stats_get(r, &s, &fresh, &e), VX_OK);
    assert_int_equal(s.size, 5000);
    assert_int_equal(s.inserted, 6000);
    assert_true(fabs(s.total - fresh) <= 1e-12 * fresh); /* all at max priority 1: 5000 */
    assert_true(fabs(s.total - 5000) < 1e-9);
    free(obs), free(rew), free(w), free(idx), free(gen);
    dbatch_free(&x);
    tset_free(&t);
    tset_free(&u);
    vx_replay_free(r);
}

/* Every tree depth, 0 (one slot) to 3: insert, sample, update, and the stored total stays exact. */
static void test_small_capacities(void **state)
{
    (void)state;
    const size_t caps[6] = {1, 2, 16, 17, 300, 4097};
    for (int c = 0; c < 6; c++) {
        vx_replay_cfg cfg = cfg_of(VX_REPLAY_PROPORTIONAL, caps[c]);
        vx_replay *r;
        vx_err e;
        assert_int_equal(vx_replay_create(&cfg, g_dev, &r, &e), VX_OK);
        tset t;
        tset_make(&t, caps[c] + 5, 0);
        assert_int_equal(vx_replay_insert(r, &t.d, caps[c] + 5, NULL, &e), VX_OK);
        dbatch x;
        dbatch_make(&x, 64);
        float td[64], *dt;
        for (int j = 0; j < 64; j++) td[j] = 0.5f + (float)(j % 5);
        CK(cudaMalloc((void **)&dt, sizeof td));
        CK(cudaMemcpy(dt, td, sizeof td, cudaMemcpyHostToDevice));
        CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
        for (int it = 0; it < 10; it++) {
            assert_int_equal(vx_replay_sample(r, 64, &x.b, NULL, &e), VX_OK);
            assert_int_equal(vx_replay_update(r, x.idx, x.gen, dt, 64, NULL, &e), VX_OK);
        }
        uint32_t idx[64];
        CK(cudaMemcpy(idx, x.idx, sizeof idx, cudaMemcpyDeviceToHost));
        for (int j = 0; j < 64; j++) assert_true(idx[j] < caps[c]);
        vx_replay_stats s;
        double fresh;
        assert_int_equal(vx_replay_stats_get(r, &s, &fresh, &e), VX_OK);
        if (!(fabs(s.total - fresh) <= 1e-12 * fresh))
            fail_msg("capacity %zu: total %.17g, fresh %.17g", caps[c], s.total, fresh);
        assert_true(fabs(s.max_priority - (4.5 + 1e-6)) < 1e-6);
        cudaFree(dt);
        dbatch_free(&x);
        tset_free(&t);
        vx_replay_free(r);
    }
}

/* ---- float64 probabilities from the priorities, computed here ------------------------------
 * P(i) = p_i^α / Σ p^α (proportional) or rank(i)^−α / Σ_k k^−α (rank, rank 1 the largest
 * priority, ties by slot index), p = |td| + ε — from the priorities alone, never from a buffer. */
typedef struct {
    double p;
    uint32_t slot;
} prio_slot;

static int by_priority_desc(const void *a, const void *b)
{
    const prio_slot *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->slot > y->slot) - (x->slot < y->slot);
}

static void float64_probs(vx_replay_kind kind, const float *td, size_t n, double alpha, double *P)
{
    prio_slot *v = malloc(n * sizeof *v);
    double z = 0;
    for (size_t i = 0; i < n; i++) v[i] = (prio_slot){fabs((double)td[i]) + 1e-6, (uint32_t)i};
    if (kind == VX_REPLAY_RANK) qsort(v, n, sizeof *v, by_priority_desc);
    for (size_t k = 0; k < n; k++) {
        double m = kind == VX_REPLAY_RANK ? pow((double)(k + 1), -alpha) : pow(v[k].p, alpha);
        P[v[k].slot] = m;
        z += m;
    }
    for (size_t i = 0; i < n; i++) P[i] /= z;
    free(v);
}

/* The same seed and the same contents on both backends: the same probabilities, the same draws
 * (replay_math.h: the same uniform numbers and the same strata on both), and the GPU's importance
 * weights against float64 (N·P_i)^−β / max_j (N·P_j)^−β from the priorities. This is an identity
 * check of the two implementations, not a statistical one: with one seed the two samples are the
 * same sample, so no distribution test between them would mean anything. The distributions are
 * compared on independent streams in test_independent_streams_against_cpu. */
static void equivalence(vx_replay_kind kind)
{
    const size_t N = 4000, B = 1000, DRAWS = 10000;
    vx_replay_cfg c = cfg_of(kind, 4096);
    vx_replay *g;
    vx_replay *h;
    vx_err e;
    assert_int_equal(vx_replay_create(&c, g_dev, &g, &e), VX_OK);
    assert_int_equal(vx_replay_create(&c, NULL, &h, &e), VX_OK);
    tset t;
    tset_make(&t, N, 0);
    assert_int_equal(vx_replay_insert(g, &t.d, N, NULL, &e), VX_OK);
    assert_int_equal(vx_replay_insert(h, &t.h, N, NULL, &e), VX_OK);
    uint32_t *idx = malloc(N * 4), *gen = malloc(N * 4);
    float *td = malloc(N * 4);
    vx_rng rng = vx_rng_make(3, 0, 0);
    for (size_t i = 0; i < N; i++) {
        idx[i] = (uint32_t)i, gen[i] = 1;
        td[i] = (float)pow(10.0, -2 + 3 * vx_rng_uniform_double(&rng)); /* 0.01 .. 10 */
    }
    dev_update(g, idx, gen, td, N);
    assert_int_equal(vx_replay_update(h, idx, gen, td, N, NULL, &e), VX_OK);
    assert_int_equal(vx_replay_set_beta(g, 0.5, NULL, &e), VX_OK);
    /* the same probabilities */
    double worst = 0;
    for (size_t i = 0; i < N; i++) {
        double pg, ph;
        assert_int_equal(vx_replay_prob(h, i, &ph, &e), VX_OK);
        assert_int_equal(vx_replay_prob(g, i, &pg, &e), VX_OK);
        worst = fmax(worst, fabs(pg - ph) / ph);
    }
    /* rank masses are summed by a device scan, in another order than the CPU's loop */
    assert_true(worst < (kind == VX_REPLAY_RANK ? 1e-10 : 1e-12));
    double *P = malloc(N * sizeof *P), pmin = 1;
    float64_probs(kind, td, N, c.alpha, P);
    for (size_t i = 0; i < N; i++) pmin = fmin(pmin, P[i]);
    /* 10,000 draws each, draw for draw */
    uint32_t *a = malloc(DRAWS * 4), *b = malloc(DRAWS * 4);
    float *w = malloc(B * 4);
    dbatch x;
    dbatch_make(&x, B);
    float *hw = malloc(B * 4), *ho = malloc(B * D * 4), *hn = malloc(B * D * 4),
          *hr = malloc(B * 4);
    int32_t *ha = malloc(B * 12);
    uint8_t *ht = malloc(B), *hu = malloc(B), *hs = malloc(B);
    uint32_t *hi = malloc(B * 4), *hg = malloc(B * 4);
    vx_replay_batch hb = {ho, hn, ha, hr, ht, hu, hs, hw, hi, hg};
    double wworst = 0;
    for (size_t k = 0; k < DRAWS / B; k++) {
        assert_int_equal(vx_replay_sample(g, B, &x.b, NULL, &e), VX_OK);
        CK(cudaMemcpy(a + k * B, x.idx, B * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(w, x.w, B * 4, cudaMemcpyDeviceToHost));
        for (size_t j = 0; j < B; j++) { /* (N·P)^−β / (N·P_min)^−β = (P / P_min)^−β */
            double want = pow(P[a[k * B + j]] / pmin, -0.5);
            wworst = fmax(wworst, fabs(w[j] - want) / want);
        }
        assert_int_equal(vx_replay_set_beta(h, 0.5, NULL, &e), VX_OK);
        assert_int_equal(vx_replay_sample(h, B, &hb, NULL, &e), VX_OK);
        memcpy(b + k * B, hi, B * 4);
    }
    /* Only a uniform number within rounding (1e-16 of the total) of a boundary between two
     * slots could be sent different ways by the two trees' last bits: far below one chance in a
     * million over these draws, so any difference is a real one. */
    size_t differ = 0;
    for (size_t j = 0; j < DRAWS; j++) differ += a[j] != b[j];
    printf("%s, same seed: %zu of 10,000 draws differ between GPU and CPU; IS weights against "
           "float64, max relative difference %.2e\n",
           kind == VX_REPLAY_RANK ? "rank" : "proportional", differ, wworst);
    assert_int_equal(differ, 0);
    assert_true(wworst < 1e-5);
    free(a), free(b), free(w), free(hw), free(ho), free(hn), free(hr), free(ha), free(ht), free(hu);
    free(hs), free(hi), free(hg), free(idx), free(gen), free(td), free(P);
    dbatch_free(&x);
    tset_free(&t);
    vx_replay_free(h);
    vx_replay_free(g);
}

static void test_equivalence_with_cpu(void **state)
{
    (void)state;
    equivalence(VX_REPLAY_PROPORTIONAL);
    equivalence(VX_REPLAY_RANK);
}

/* A deep tree (2^20 slots: depth 5, levels of 65,536 and 4,096 nodes updated by the whole grid
 * of the cooperative update, the three above by one block) built and changed the same way on
 * both backends: inserts of 2,000 up to 1,000 short of full, 20 updates of 20,000 random slots
 * each (two chunks of the device's update: VX_REPLAY_UPDATE_CHUNK) — duplicates across the
 * grid's blocks, one stale stamp in 97, a NaN in 1,009 — then inserts of 2,000 again, one of
 * which wraps the ring (the insert's last-block rebuild over two segments, over leaves the
 * updates had changed), and 20 updates more; then 8 samples of 1,021 (the draw counter must
 * advance by the draws, not by the blocks' share) and one of 8,192, draw for draw. A parent
 * recomputed before its children were final, a missed level or segment, a wrong winner among
 * duplicates or a clamp from the wrong chunk changes the total or sends draws elsewhere. */
static void test_deep_tree_against_cpu(void **state)
{
    (void)state;
    const size_t cap = 1 << 20, CH = 2000, U = 20000, T = cap + 5000;
    vx_replay_cfg c = cfg_of(VX_REPLAY_PROPORTIONAL, cap);
    vx_replay *g, *h;
    vx_err e;
    assert_int_equal(vx_replay_create(&c, g_dev, &g, &e), VX_OK);
    assert_int_equal(vx_replay_create(&c, NULL, &h, &e), VX_OK);
    tset t;
    tset_make(&t, CH, 0);
    uint32_t *idx = malloc(U * 4), *gen = malloc(U * 4);
    float *td = malloc(U * 4);
    vx_rng rng = vx_rng_make(5, 0, 0);
    const size_t stops[2] = {cap - 1000, T};
    for (size_t done = 0, phase = 0; phase < 2; phase++) {
        for (; done < stops[phase]; done += CH) {
            size_t n = stops[phase] - done < CH ? stops[phase] - done : CH;
            assert_int_equal(vx_replay_insert(g, &t.d, n, NULL, &e), VX_OK);
            assert_int_equal(vx_replay_insert(h, &t.h, n, NULL, &e), VX_OK);
        }
        for (int round = 0; round < 20; round++) {
            for (size_t k = 0; k < U; k++) {
                idx[k] = vx_rng_below(&rng, (uint32_t)cap);
                gen[k] = idx[k] < T - cap ? 2 : 1; /* the slots the ring writes twice */
                if (k % 97 == 5) gen[k]++;         /* stale */
                td[k] =
                    k % 1009 == 3 ? NAN : (float)pow(10.0, -3 + 5 * vx_rng_uniform_double(&rng));
            }
            dev_update(g, idx, gen, td, U);
            assert_int_equal(vx_replay_update(h, idx, gen, td, U, NULL, &e), VX_OK);
        }
    }
    vx_replay_stats sg, sh;
    double fg, fh;
    assert_int_equal(vx_replay_stats_get(g, &sg, &fg, &e), VX_OK);
    assert_int_equal(vx_replay_stats_get(h, &sh, &fh, &e), VX_OK);
    printf("2^20 slots after 40 updates of 20,000: GPU total %.17g, CPU %.17g, GPU fresh sum "
           "%.17g; stale %llu / %llu, clamped %llu / %llu\n",
           sg.total, sh.total, fg, (unsigned long long)sg.stale_updates,
           (unsigned long long)sh.stale_updates, (unsigned long long)sg.clamped,
           (unsigned long long)sh.clamped);
    assert_true(fabs(sg.total - sh.total) <= 1e-12 * sh.total);
    assert_true(fabs(sg.total - fg) <= 1e-12 * fg);
    assert_true(sg.max_priority == sh.max_priority);
    assert_true(sg.stale_updates == sh.stale_updates && sg.stale_updates > 0);
    assert_true(sg.clamped == sh.clamped && sg.clamped > 0);
    enum { B = 1021 };
    dbatch x;
    dbatch_make(&x, B);
    float ho[B * D], hn[B * D], hr[B], hw[B], gw[B], go[B * D];
    int32_t ha[B * 3];
    uint8_t ht[B], hu[B], hs[B];
    uint32_t hi[B], hg[B], gi[B];
    vx_replay_batch hb = {ho, hn, ha, hr, ht, hu, hs, hw, hi, hg};
    size_t differ = 0, wdiffer = 0, odiffer = 0;
    for (int k = 0; k < 8; k++) {
        assert_int_equal(vx_replay_sample(g, B, &x.b, NULL, &e), VX_OK);
        assert_int_equal(vx_replay_sample(h, B, &hb, NULL, &e), VX_OK);
        CK(cudaMemcpy(gi, x.idx, sizeof gi, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gw, x.w, sizeof gw, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(go, x.obs, sizeof go, cudaMemcpyDeviceToHost));
        for (int j = 0; j < B; j++) {
            differ += gi[j] != hi[j];
            wdiffer += fabsf(gw[j] - hw[j]) > 1e-6f * hw[j];
        }
        for (int j = 0; j < B * D; j++) odiffer += go[j] != ho[j];
    }
    printf("8 samples of 1,021 with one seed: %zu draws differ, %zu IS weights beyond 1e-6, %zu "
           "state floats differ\n",
           differ, wdiffer, odiffer);
    assert_int_equal(differ, 0);
    assert_int_equal(wdiffer, 0);
    assert_int_equal(odiffer, 0);
    /* a larger sample: 1,024 blocks counting in for the RNG counter */
    enum { BB = 8192 };
    dbatch y;
    dbatch_make(&y, BB);
    float *bo = malloc(BB * D * 4), *bn = malloc(BB * D * 4), *br = malloc(BB * 4);
    float *bw = malloc(BB * 4), *yo = malloc(BB * D * 4);
    int32_t *ba = malloc(BB * 12);
    uint8_t *bt = malloc(BB), *bu = malloc(BB), *bs = malloc(BB);
    uint32_t *bi = malloc(BB * 4), *bg = malloc(BB * 4), *yi = malloc(BB * 4);
    vx_replay_batch big = {bo, bn, ba, br, bt, bu, bs, bw, bi, bg};
    assert_int_equal(vx_replay_sample(g, BB, &y.b, NULL, &e), VX_OK);
    assert_int_equal(vx_replay_sample(h, BB, &big, NULL, &e), VX_OK);
    CK(cudaMemcpy(yi, y.idx, BB * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(yo, y.obs, BB * D * 4, cudaMemcpyDeviceToHost));
    differ = 0, odiffer = 0;
    for (int j = 0; j < BB; j++) differ += yi[j] != bi[j];
    for (int j = 0; j < BB * D; j++) odiffer += yo[j] != bo[j];
    printf("a sample of 8,192: %zu draws differ, %zu state floats differ\n", differ, odiffer);
    assert_int_equal(differ, 0);
    assert_int_equal(odiffer, 0);
    free(bo), free(bn), free(br), free(bw), free(yo), free(ba), free(bt), free(bu), free(bs);
    free(bi), free(bg), free(yi);
    dbatch_free(&y);
    dbatch_free(&x);
    free(idx), free(gen), free(td);
    tset_free(&t);
    vx_replay_free(h);
    vx_replay_free(g);
}

/* The upper 1e-4 quantile of χ²(dof), Wilson–Hilferty (94.77 at 49 dof against the exact 94.60:
 * slightly lenient, never stricter). */
static double chi2_crit_1e4(double dof)
{
    const double z = 3.7190164854556804; /* the standard normal's upper 1e-4 point */
    double h = 2 / (9 * dof), c = 1 - h + z * sqrt(h);
    return dof * c * c * c;
}

enum { NS = 50 }; /* slots in the independent-stream comparison */

/* n sample calls of one draw each on a GPU buffer, counted per slot. Each call writes its index
 * into its own element of one device array (read back once at the end) and its other fields into
 * a one-row scratch batch, so the loop queues launches without waiting for any. */
static void gpu_counts(vx_replay *g, size_t n, size_t *count)
{
    dbatch x;
    dbatch_make(&x, 1);
    uint32_t *d_all, *all = malloc(n * 4);
    CK(cudaMalloc((void **)&d_all, n * 4));
    vx_replay_batch b = x.b;
    vx_err e;
    for (size_t c = 0; c < n; c++) {
        b.index = d_all + c;
        assert_int_equal(vx_replay_sample(g, 1, &b, NULL, &e), VX_OK);
    }
    CK(cudaMemcpy(all, d_all, n * 4, cudaMemcpyDeviceToHost));
    for (size_t c = 0; c < n; c++) {
        assert_true(all[c] < NS);
        count[all[c]]++;
    }
    cudaFree(d_all);
    free(all);
    dbatch_free(&x);
}

static void cpu_counts(vx_replay *h, size_t n, size_t *count)
{
    float o[D], nx[D], rw, w;
    int32_t a[3];
    uint8_t te, tu, st;
    uint32_t i, gn;
    vx_replay_batch b = {o, nx, a, &rw, &te, &tu, &st, &w, &i, &gn};
    vx_err e;
    for (size_t c = 0; c < n; c++) {
        assert_int_equal(vx_replay_sample(h, 1, &b, NULL, &e), VX_OK);
        assert_true(i < NS);
        count[i]++;
    }
}

/* GPU against CPU with DIFFERENT seeds, so the two samples are independent: two-sample
 * chi-square on the slot counts.
 *
 * The draws: n = 200,000 sample calls of one draw each on each buffer. A call of B > 1 draws is
 * stratified (one draw in each of B equal slices of the mass), so its draws are not independent
 * and its counts are not multinomial; with B = 1 the one stratum is the whole mass and each
 * call's draw comes from its own Philox block (counter = draws so far, one more per call), so
 * each buffer's n draws are independent with its P(i), and the two buffers' draws are
 * independent of each other (different keys). (Stratification itself is tested exactly against
 * float64 on the CPU, test_replay's test_stratified_draws_per_stratum, and the GPU's strata are
 * the CPU's draw for draw: equivalence above.)
 *
 * The statistic: with equal sample sizes, Pearson's homogeneity statistic of the 2 × 50 table is
 * X² = Σ_i (g_i − h_i)² / (g_i + h_i), χ²(49) when both samplers draw from one distribution,
 * whatever it is (every expected count is above 250). Significance 1e-4 (critical value 94.8),
 * fixed seeds. Power against a GPU sampler using 0.95·α (the CPU correct): the non-centrality
 * λ = n Σ (P'_i − P_i)² / (P'_i + P_i) is printed, 188 (proportional) and 183 (rank), asserted
 * above 170; P(χ²'(49, 170) < 94.8) = 3e-8. The GPU's counts are also tested against the float64 P
 * directly (one-sample, χ²(49); λ 387 and 363 against 0.95·α, asserted above 300, miss 2e-21).
 * The same statistic over two CPU buffers 200,000 draws each averaged 50.2 across 100 seed pairs
 * (variance 82–91; χ²(49): 49, 98), and 161–336 across 30 when one buffer ran at 0.95·α.
 *
 * Priorities: 50 distinct values log-uniform over three decades (0.1 .. 100), scrambled over the
 * slots (slot i gets step 17·i mod 50) so rank order is not slot order. */
static void test_independent_streams_against_cpu(void **state)
{
    (void)state;
    const size_t n = 200000;
    float td[NS];
    uint32_t idx[NS], gen[NS];
    for (int i = 0; i < NS; i++) {
        td[i] = (float)pow(10.0, -1 + 3.0 * ((17 * i) % NS) / (NS - 1));
        idx[i] = (uint32_t)i, gen[i] = 1;
    }
    tset t;
    tset_make(&t, NS, 0);
    const vx_replay_kind kinds[2] = {VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK};
    const char *names[2] = {"proportional", "rank"};
    for (int k = 0; k < 2; k++) {
        vx_replay_cfg c = cfg_of(kinds[k], 64);
        vx_replay *g, *h;
        vx_err e;
        c.seed = 101;
        assert_int_equal(vx_replay_create(&c, g_dev, &g, &e), VX_OK);
        assert_int_equal(vx_replay_on_device(g), 1);
        c.seed = 202;
        assert_int_equal(vx_replay_create(&c, NULL, &h, &e), VX_OK);
        assert_int_equal(vx_replay_insert(g, &t.d, NS, NULL, &e), VX_OK);
        assert_int_equal(vx_replay_insert(h, &t.h, NS, NULL, &e), VX_OK);
        dev_update(g, idx, gen, td, NS);
        assert_int_equal(vx_replay_update(h, idx, gen, td, NS, NULL, &e), VX_OK);
        size_t gc[NS] = {0}, hc[NS] = {0};
        gpu_counts(g, n, gc);
        cpu_counts(h, n, hc);
        assert_int_equal(vx_replay_on_device(g), 1); /* no fallback: these were the GPU's draws */
        double P[NS], Palt[NS];
        float64_probs(kinds[k], td, NS, c.alpha, P);
        float64_probs(kinds[k], td, NS, 0.95 * c.alpha, Palt);
        double two = 0, one = 0, lam_two = 0, lam_one = 0;
        for (int i = 0; i < NS; i++) {
            double sum = (double)(gc[i] + hc[i]), dif = (double)gc[i] - (double)hc[i];
            double want = (double)n * P[i], dp = Palt[i] - P[i];
            assert_true(sum > 0);
            two += dif * dif / sum;
            one += ((double)gc[i] - want) * ((double)gc[i] - want) / want;
            lam_two += (double)n * dp * dp / (Palt[i] + P[i]);
            lam_one += (double)n * dp * dp / P[i];
        }
        double crit = chi2_crit_1e4(NS - 1);
        printf("%s, %zu one-draw calls each: GPU (seed 101) vs CPU (seed 202) two-sample X² %.1f, "
               "GPU vs float64 P X² %.1f; χ²(49), reject above %.1f (p = 1e-4); "
               "non-centralities against a GPU at 0.95·α %.0f and %.0f\n",
               names[k], n, two, one, crit, lam_two, lam_one);
        assert_true(lam_two > 170 && lam_one > 300); /* the design's power */
        assert_true(two < crit);
        assert_true(one < crit);
        vx_replay_free(h);
        vx_replay_free(g);
    }
    tset_free(&t);
}

static void test_no_drift_stale_duplicates_clamp(void **state)
{
    (void)state;
    const size_t cap = 1 << 16, CH = 16384;
    vx_replay_cfg c = cfg_of(VX_REPLAY_PROPORTIONAL, cap);
    vx_replay *r;
    vx_err e;
    assert_int_equal(vx_replay_create(&c, g_dev, &r, &e), VX_OK);
    tset t;
    tset_make(&t, cap, 0);
    assert_int_equal(vx_replay_insert(r, &t.d, cap, NULL, &e), VX_OK);
    /* 10 M updates from 8 pools of random slots and priorities over nine orders of magnitude */
    uint32_t *di[8], *dg, *hi = malloc(CH * 4), *hg = malloc(CH * 4);
    float *dt[8], *ht = malloc(CH * 4);
    vx_rng g = vx_rng_make(77, 0, 0);
    CK(cudaMalloc((void **)&dg, CH * 4));
    for (size_t k = 0; k < CH; k++) hg[k] = 1;
    CK(cudaMemcpy(dg, hg, CH * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
    for (int p = 0; p < 8; p++) {
        for (size_t k = 0; k < CH; k++) {
            hi[k] = vx_rng_below(&g, cap);
            ht[k] = (float)pow(10.0, -6 + 9 * vx_rng_uniform_double(&g));
        }
        CK(cudaMalloc((void **)&di[p], CH * 4));
        CK(cudaMalloc((void **)&dt[p], CH * 4));
        CK(cudaMemcpy(di[p], hi, CH * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dt[p], ht, CH * 4, cudaMemcpyHostToDevice));
        CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
    }
    for (size_t done = 0, p = 0; done < 10000000; done += CH, p = (p + 1) % 8)
        assert_int_equal(vx_replay_update(r, di[p], dg, dt[p], CH, NULL, &e), VX_OK);
    vx_replay_stats s;
    double fresh;
    assert_int_equal(vx_replay_stats_get(r, &s, &fresh, &e), VX_OK);
    printf("after 10 M device updates: stored total %.17g, fresh sum %.17g, relative %.2e\n",
           s.total, fresh, fabs(s.total - fresh) / fresh);
    assert_true(fabs(s.total - fresh) / fresh < 1e-9);
    assert_int_equal(s.stale_updates, 0);
    /* duplicates: the last entry wins; NaN and Inf clamp to the running maximum */
    uint32_t idx[4] = {7, 7, 9, 10}, gen[4] = {1, 1, 1, 1};
    float td[4] = {100.0f, 2.0f, NAN, INFINITY};
    dev_update(r, idx, gen, td, 4);
    double p7, p9, p10, pmax;
    assert_int_equal(vx_replay_stats_get(r, &s, &fresh, &e), VX_OK);
    assert_int_equal(s.clamped, 2);
    vx_replay_prob(r, 7, &p7, &e);
    vx_replay_prob(r, 9, &p9, &e);
    vx_replay_prob(r, 10, &p10, &e);
    pmax = pow(s.max_priority, 0.6) / s.total;
    assert_true(fabs(p7 - pow(2.0 + 1e-6, 0.6) / s.total) < 1e-12 * p7 + 1e-300);
    assert_true(fabs(p9 - pmax) <= 1e-12 * pmax && fabs(p10 - pmax) <= 1e-12 * pmax);
    assert_true(s.max_priority >= 100.0); /* the overwritten duplicate still counted for the max */
    /* stale: overwrite slot 5 and update it with the old stamp */
    tset one;
    tset_make(&one, cap, 0);
    assert_int_equal(vx_replay_insert(r, &one.d, cap, NULL, &e), VX_OK); /* every stamp is 2 */
    uint32_t s5[1] = {5}, g5[1] = {1};
    float t5[1] = {1000.0f};
    dev_update(r, s5, g5, t5, 1);
    assert_int_equal(vx_replay_stats_get(r, &s, &fresh, &e), VX_OK);
    assert_int_equal(s.stale_updates, 1);
    assert_true(s.max_priority < 1000.0);
    for (int p = 0; p < 8; p++) cudaFree(di[p]), cudaFree(dt[p]);
    cudaFree(dg);
    free(hi), free(hg), free(ht);
    tset_free(&t);
    tset_free(&one);
    vx_replay_free(r);
}

static void test_empty_slots_never_drawn_and_graph_replay(void **state)
{
    (void)state;
    vx_replay_cfg c = cfg_of(VX_REPLAY_PROPORTIONAL, 100000);
    vx_replay *r;
    vx_err e;
    assert_int_equal(vx_replay_create(&c, g_dev, &r, &e), VX_OK);
    tset t;
    tset_make(&t, 3000, 0);
    assert_int_equal(vx_replay_insert(r, &t.d, 3000, NULL, &e), VX_OK);
    const size_t B = 1024;
    dbatch x;
    dbatch_make(&x, B);
    float *td, *htd = malloc(B * 4);
    for (size_t j = 0; j < B; j++) htd[j] = (float)(0.1 + (j % 17));
    CK(cudaMalloc((void **)&td, B * 4));
    CK(cudaMemcpy(td, htd, B * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    assert_int_equal(vx_replay_set_beta(r, 0.6, s, &e), VX_OK);
    /* capture sample → update as one graph, replay it 1,000 times */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    assert_int_equal(vx_replay_sample(r, B, &x.b, s, &e), VX_OK);
    assert_int_equal(vx_replay_update(r, x.idx, x.gen, td, B, s, &e), VX_OK);
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    uint32_t *first = malloc(B * 4), *idx = malloc(B * 4);
    for (int k = 0; k < 1000; k++) {
        CK(cudaGraphLaunch(exec, s));
        if (k == 0) {
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(first, x.idx, B * 4, cudaMemcpyDeviceToHost));
        }
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(idx, x.idx, B * 4, cudaMemcpyDeviceToHost));
    assert_true(memcmp(first, idx, B * 4) != 0); /* the RNG counter advanced on the device */
    for (size_t j = 0; j < B; j++) assert_true(idx[j] < 3000); /* 97,000 empty slots never drawn */
    vx_replay_stats st;
    double fresh;
    assert_int_equal(vx_replay_stats_get(r, &st, &fresh, &e), VX_OK);
    printf("graph replayed 1,000 times: total %.17g, fresh %.17g, stale %llu\n", st.total, fresh,
           (unsigned long long)st.stale_updates);
    assert_true(fabs(st.total - fresh) / fresh < 1e-12);
    assert_int_equal(st.stale_updates, 0);
    assert_true(fabs(st.max_priority - (16.1 + 1e-6)) < 1e-5);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    cudaFree(td);
    free(htd), free(first), free(idx);
    dbatch_free(&x);
    tset_free(&t);
    vx_replay_free(r);
}

static void check_sample_valid(vx_replay *r, size_t size, int k_of_slot_is_slot)
{
    dbatch x;
    dbatch_make(&x, 256);
    vx_err e;
    vx_status st = vx_replay_sample(r, 256, &x.b, NULL, &e);
    if (st) fail_msg("sample: %s", e.msg);
    uint32_t idx[256];
    float rew[256];
    CK(cudaMemcpy(idx, x.idx, sizeof idx, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(rew, x.rew, sizeof rew, cudaMemcpyDeviceToHost));
    for (int j = 0; j < 256; j++) {
        assert_true(idx[j] < size);
        if (k_of_slot_is_slot) assert_near(rew[j], (float)idx[j], 0);
    }
    /* and an update goes through */
    float td[256];
    for (int j = 0; j < 256; j++) td[j] = 1.0f + (float)j;
    float *dt;
    CK(cudaMalloc((void **)&dt, sizeof td));
    CK(cudaMemcpy(dt, td, sizeof td, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
    assert_int_equal(vx_replay_update(r, x.idx, x.gen, dt, 256, NULL, &e), VX_OK);
    cudaFree(dt);
    dbatch_free(&x);
}

static void test_fallbacks(void **state)
{
    (void)state;
    if (getenv("VX_SKIP_FAULT_INJECTION"))
        skip(); /* under compute-sanitizer: its report would
                 * list the injected launch failure */
    vx_replay_cfg c = cfg_of(VX_REPLAY_PROPORTIONAL, 2000);
    vx_replay *r;
    vx_err e;
    tset t;
    tset_make(&t, 1500, 0);
    /* 1. the allocation fails at creation: a CPU buffer behind the same calls */
    th_log_start();
    vx_replay_inject_fault(VX_FAULT_ALLOC);
    assert_int_equal(vx_replay_create(&c, g_dev, &r, &e), VX_OK);
    assert_int_equal(vx_replay_on_device(r), 0);
    assert_non_null(strstr(th_log_text(), "device allocation"));
    assert_non_null(strstr(th_log_text(), "continuing on the CPU buffer"));
    assert_int_equal(vx_replay_insert(r, &t.d, 1500, NULL, &e), VX_OK);
    check_sample_valid(r, 1500, 1);
    vx_replay_free(r);
    /* 2. a launch fails later: contents move to the CPU, the call completes there */
    assert_int_equal(vx_replay_create(&c, g_dev, &r, &e), VX_OK);
    assert_int_equal(vx_replay_on_device(r), 1);
    assert_int_equal(vx_replay_insert(r, &t.d, 1500, NULL, &e), VX_OK);
    th_log_start();
    vx_replay_inject_fault(VX_FAULT_LAUNCH);
    check_sample_valid(r, 1500, 1);
    assert_int_equal(vx_replay_on_device(r), 0);
    assert_non_null(strstr(th_log_text(), "sample kernel launch failed"));
    assert_non_null(strstr(th_log_text(), "contents moved"));
    int warnings = 0;
    for (const char *p = th_log_text(); (p = strstr(p, "continuing on the CPU")); p++) warnings++;
    assert_int_equal(warnings, 1); /* one warning */
    vx_replay_stats s;
    assert_int_equal(vx_replay_stats_get(r, &s, NULL, &e), VX_OK);
    assert_int_equal(s.size, 1500);
    assert_int_equal(s.inserted, 1500);
    th_log_stop();
    vx_replay_free(r);
    tset_free(&t);
}

static int files_equal(const char *p, const char *q)
{
    uint8_t *a, *b;
    size_t na, nb;
    vx_err e;
    assert_int_equal(vx_file_read_all(p, &a, &na, &e), VX_OK);
    assert_int_equal(vx_file_read_all(q, &b, &nb, &e), VX_OK);
    int same = na == nb && memcmp(a, b, na) == 0;
    free(a), free(b);
    return same;
}

/* Fills a device buffer past a wrap and gives it some history (samples, updates with a NaN). */
static void fill_and_train(vx_replay *r, const tset *t, size_t n, size_t B, int rounds)
{
    vx_err e;
    assert_int_equal(vx_replay_insert(r, &t->d, n, NULL, &e), VX_OK);
    assert_int_equal(vx_replay_set_beta(r, 0.45, NULL, &e), VX_OK);
    dbatch x;
    dbatch_make(&x, B);
    float *td = malloc(B * 4), *dt;
    CK(cudaMalloc((void **)&dt, B * 4));
    vx_rng g = vx_rng_make(31, 0, 0);
    for (int it = 0; it < rounds; it++) {
        for (size_t j = 0; j < B; j++) td[j] = (float)pow(10.0, -2 + 4 * vx_rng_uniform_double(&g));
        if (it == 1) td[3] = NAN;
        CK(cudaMemcpy(dt, td, B * 4, cudaMemcpyHostToDevice));
        CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
        assert_int_equal(vx_replay_sample(r, B, &x.b, NULL, &e), VX_OK);
        assert_int_equal(vx_replay_update(r, x.idx, x.gen, dt, B, NULL, &e), VX_OK);
    }
    cudaFree(dt);
    free(td);
    dbatch_free(&x);
}

/* Save and load through the pinned staging in several chunks (obs 32 MiB, the stamps 16 MiB):
 * the GPU's file is byte for byte what a CPU buffer holding it writes, and a GPU buffer loading
 * that file draws exactly what the saved one draws next. */
static void test_save_load_across_backends(void **state)
{
    (void)state;
    const size_t cap = ((size_t)1 << 20) + 3, n = cap + 1000, B = 4096;
    char dir[64], pa[128], pb[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(pa, sizeof pa, "%s/gpu.bin", dir);
    snprintf(pb, sizeof pb, "%s/cpu.bin", dir);
    tset t;
    tset_make(&t, n, 0);
    vx_replay_kind kinds[3] = {VX_REPLAY_UNIFORM, VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK};
    for (int k = 0; k < 3; k++) {
        vx_replay_cfg c = cfg_of(kinds[k], cap);
        vx_replay *g, *h, *g2;
        vx_err e;
        assert_int_equal(vx_replay_create(&c, g_dev, &g, &e), VX_OK);
        assert_int_equal(vx_replay_on_device(g), 1);
        fill_and_train(g, &t, n, B, 5);
        assert_int_equal(vx_replay_save(g, pa, &e), VX_OK);
        c.seed = 99; /* the file's seed wins */
        assert_int_equal(vx_replay_create(&c, NULL, &h, &e), VX_OK);
        assert_int_equal(vx_replay_load(h, pa, &e), VX_OK);
        assert_int_equal(vx_replay_save(h, pb, &e), VX_OK);
        if (!files_equal(pa, pb)) fail_msg("kind %d: the GPU's file differs from the CPU's", k);
        assert_int_equal(vx_replay_create(&c, g_dev, &g2, &e), VX_OK);
        assert_int_equal(vx_replay_load(g2, pb, &e), VX_OK);
        vx_replay_stats s1, s2;
        double f1, f2;
        assert_int_equal(vx_replay_stats_get(g, &s1, &f1, &e), VX_OK);
        assert_int_equal(vx_replay_stats_get(g2, &s2, &f2, &e), VX_OK);
        assert_int_equal(s1.size, cap);
        assert_int_equal(s2.size, s1.size);
        assert_int_equal(s2.inserted, n);
        assert_int_equal(s2.clamped, s1.clamped);
        assert_int_equal(s2.stale_updates, s1.stale_updates);
        assert_true(s2.max_priority == s1.max_priority && s2.total == s1.total && f1 == f2);
        assert_int_equal(vx_replay_set_beta(g2, 0.45, NULL, &e), VX_OK);
        /* rank: the file holds no order (the loaded buffer sorts anew); sort both now */
        assert_int_equal(vx_replay_rank_refresh(g, NULL, &e), VX_OK);
        assert_int_equal(vx_replay_rank_refresh(g2, NULL, &e), VX_OK);
        dbatch x, y;
        dbatch_make(&x, B);
        dbatch_make(&y, B);
        uint32_t *xi = malloc(B * 4), *yi = malloc(B * 4);
        float *xw = malloc(B * 4), *yw = malloc(B * 4);
        float *xo = malloc(B * D * 4), *yo = malloc(B * D * 4);
        for (int it = 0; it < 3; it++) {
            assert_int_equal(vx_replay_sample(g, B, &x.b, NULL, &e), VX_OK);
            assert_int_equal(vx_replay_sample(g2, B, &y.b, NULL, &e), VX_OK);
            CK(cudaMemcpy(xi, x.idx, B * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(yi, y.idx, B * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(xw, x.w, B * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(yw, y.w, B * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(xo, x.obs, B * D * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(yo, y.obs, B * D * 4, cudaMemcpyDeviceToHost));
            assert_memory_equal(xi, yi, B * 4);
            assert_memory_equal(xw, yw, B * 4);
            assert_memory_equal(xo, yo, B * D * 4);
        }
        printf("kind %d: %.1f MB saved by the GPU equal the CPU's file; reloaded, same draws\n", k,
               (double)(cap * (2 * D * 4 + 16 + 8)) / 1e6);
        free(xi), free(yi), free(xw), free(yw), free(xo), free(yo);
        dbatch_free(&x);
        dbatch_free(&y);
        vx_replay_free(g), vx_replay_free(h), vx_replay_free(g2);
    }
    tset_free(&t);
    th_rmtree(dir);
}

typedef struct {
    vx_replay *r;
    const char *path;
    vx_status st;
} saver;

static void *snap_save_thread(void *arg)
{
    saver *sv = arg;
    vx_err e;
    sv->st = vx_replay_snap_save(sv->r, sv->path, &e);
    return NULL;
}

/* A snapshot taken on a stream is written from another thread while the buffer changes: the file
 * is the one a synchronous save at snap time wrote. */
static void test_snapshot(void **state)
{
    (void)state;
    const size_t cap = 300000, B = 2048;
    char dir[64], pa[128], pb[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(pa, sizeof pa, "%s/save.bin", dir);
    snprintf(pb, sizeof pb, "%s/snap.bin", dir);
    tset t;
    tset_make(&t, cap, 0);
    vx_replay_cfg c = cfg_of(VX_REPLAY_PROPORTIONAL, cap);
    vx_replay *r;
    vx_err e;
    assert_int_equal(vx_replay_create(&c, g_dev, &r, &e), VX_OK);
    assert_int_equal(vx_replay_snap_save(r, pb, &e), VX_ERR_ARG); /* nothing taken yet */
    fill_and_train(r, &t, cap / 2, B, 4);
    size_t before = vx_replay_reserved(r);
    assert_true(before > 0);
    assert_int_equal(vx_replay_save(r, pa, &e), VX_OK);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    assert_int_equal(vx_replay_snap(r, s, &e), VX_OK);
    assert_true(vx_replay_reserved(r) > before); /* the copy, charged to the buffer */
    /* the buffer goes on changing on s: new rows, a wrap, new priorities */
    assert_int_equal(vx_replay_insert(r, &t.d, cap, s, &e), VX_OK);
    dbatch x;
    dbatch_make(&x, B);
    float *dt;
    CK(cudaMalloc((void **)&dt, B * 4));
    CK(cudaMemsetAsync(dt, 0x40, B * 4, s));
    assert_int_equal(vx_replay_sample(r, B, &x.b, s, &e), VX_OK);
    assert_int_equal(vx_replay_update(r, x.idx, x.gen, dt, B, s, &e), VX_OK);
    saver sv = {r, pb, VX_ERR_ARG};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, snap_save_thread, &sv), 0);
    pthread_join(th, NULL);
    assert_int_equal(sv.st, VX_OK);
    if (!files_equal(pa, pb)) fail_msg("the snapshot's file differs from the save at snap time");
    /* and the live buffer did change */
    assert_int_equal(vx_replay_save(r, pb, &e), VX_OK);
    assert_false(files_equal(pa, pb));
    printf("snapshot of %zu slots written from another thread: equal to the save at snap time; "
           "reserved %.1f MB -> %.1f MB\n",
           cap, before / 1e6, vx_replay_reserved(r) / 1e6);
    cudaFree(dt);
    dbatch_free(&x);
    cudaStreamDestroy(s);
    vx_replay_free(r);
    tset_free(&t);
    th_rmtree(dir);
}

/* A replay group (replay_group_cuda.h): K buffers sampled and updated by one launch each give
 * every member exactly what its own calls give a twin buffer. The members differ in seed, α, ε
 * and contents, so a launch that read another member's record, RNG counter, batch or td, or one
 * member's α or ε for all, would differ; every batch array is compared byte for byte after each
 * of 6 rounds of sample → update (a NaN among the td, duplicate draws as they come, new
 * transitions between one round's sample and its update: stale entries), then each
 * buffer's saved file (priorities, tree inputs, counters) against its twin's. Uniform buffers:
 * the samples alike. Buffers that cannot be a group (rank-based, one on the CPU) are refused with
 * the reason. */
enum { GK = 3 };

static void group_against_alone(vx_replay_kind kind)
{
    const size_t cap = 4096 + 5, B = 1021;
    static const double alpha[GK] = {0.6, 0.45, 0.8}, eps[GK] = {1e-6, 1e-3, 1e-2};
    vx_replay *alone[GK], *grp[GK];
    dbatch xa[GK], xg[GK];
    tset t[GK];
    vx_replay_batch out[GK];
    vx_err e;
    for (int k = 0; k < GK; k++) {
        vx_replay_cfg c = cfg_of(kind, cap);
        c.seed = 40 + (uint64_t)k, c.alpha = alpha[k], c.eps = eps[k];
        assert_int_equal(vx_replay_create(&c, g_dev, &alone[k], &e), VX_OK);
        assert_int_equal(vx_replay_create(&c, g_dev, &grp[k], &e), VX_OK);
        assert_true(vx_replay_on_device(alone[k]) && vx_replay_on_device(grp[k]));
        /* the ring wrapped once, by a different count in each member: their cursors, stamps and
         * sizes differ */
        size_t more = 700 + 250 * (size_t)k;
        tset_make(&t[k], cap, 1000 * k);
        for (int twin = 0; twin < 2; twin++) {
            vx_replay *x = twin ? grp[k] : alone[k];
            assert_int_equal(vx_replay_insert(x, &t[k].d, cap - 100, NULL, &e), VX_OK);
            assert_int_equal(vx_replay_insert(x, &t[k].d, more, NULL, &e), VX_OK);
        }
        assert_int_equal(vx_replay_set_beta(alone[k], 0.4 + 0.1 * k, NULL, &e), VX_OK);
        assert_int_equal(vx_replay_set_beta(grp[k], 0.4 + 0.1 * k, NULL, &e), VX_OK);
        dbatch_make(&xa[k], B), dbatch_make(&xg[k], B);
        out[k] = xg[k].b;
    }
    float *td = malloc(GK * B * 4), *dt;
    CK(cudaMalloc((void **)&dt, GK * B * 4));
    vx_replay_group *g;
    char why[160];
    assert_int_equal(vx_replay_group_create(grp, GK, out, dt, B, B, g_dev, &g, why, sizeof why, &e),
                     VX_OK);
    if (!g) fail_msg("no group: %s", why);
    vx_rng r = vx_rng_make(77, 0, 0);
    size_t bytes[10] = {B * D * 4, B * D * 4, B * 12, B * 4, B, B, B, B * 4, B * 4, B * 4};
    for (int round = 0; round < 6; round++) {
        for (size_t j = 0; j < GK * B; j++)
            td[j] = (float)pow(10.0, -2 + 4 * vx_rng_uniform_double(&r));
        td[5 + B] = NAN; /* member 1's: clamped to its running maximum */
        CK(cudaMemcpy(dt, td, GK * B * 4, cudaMemcpyHostToDevice));
        CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
        for (int k = 0; k < GK; k++)
            assert_int_equal(vx_replay_sample(alone[k], B, &xa[k].b, NULL, &e), VX_OK);
        assert_int_equal(vx_replay_group_sample(g, NULL, &e), VX_OK);
        CK(cudaDeviceSynchronize());
        if (round == 2) /* new transitions between a sample and its update: stale entries */
            for (int k = 0; k < GK; k++) {
                assert_int_equal(vx_replay_insert(alone[k], &t[k].d, 64, NULL, &e), VX_OK);
                assert_int_equal(vx_replay_insert(grp[k], &t[k].d, 64, NULL, &e), VX_OK);
            }
        for (int k = 0; k < GK; k++) {
            const void *pa[10] = {xa[k].obs, xa[k].next, xa[k].act, xa[k].rew, xa[k].te,
                                  xa[k].tu,  xa[k].st,   xa[k].w,   xa[k].idx, xa[k].gen};
            const void *pg[10] = {xg[k].obs, xg[k].next, xg[k].act, xg[k].rew, xg[k].te,
                                  xg[k].tu,  xg[k].st,   xg[k].w,   xg[k].idx, xg[k].gen};
            for (int a = 0; a < 10; a++) {
                uint8_t *ha = malloc(bytes[a]), *hg = malloc(bytes[a]);
                CK(cudaMemcpy(ha, pa[a], bytes[a], cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(hg, pg[a], bytes[a], cudaMemcpyDeviceToHost));
                if (memcmp(ha, hg, bytes[a]) != 0)
                    fail_msg("round %d, member %d: batch array %d differs from its twin's", round,
                             k, a);
                free(ha), free(hg);
            }
            assert_int_equal(
                vx_replay_update(alone[k], xa[k].idx, xa[k].gen, dt + k * B, B, NULL, &e), VX_OK);
        }
        assert_int_equal(vx_replay_group_update(g, NULL, &e), VX_OK);
        CK(cudaDeviceSynchronize());
    }
    char dir[64], pa[128], pg[128];
    th_tmpdir(dir, sizeof dir);
    for (int k = 0; k < GK; k++) {
        snprintf(pa, sizeof pa, "%s/alone-%d.bin", dir, k);
        snprintf(pg, sizeof pg, "%s/group-%d.bin", dir, k);
        assert_int_equal(vx_replay_save(alone[k], pa, &e), VX_OK);
        assert_int_equal(vx_replay_save(grp[k], pg, &e), VX_OK);
        if (!files_equal(pa, pg)) fail_msg("member %d's saved buffer differs from its twin's", k);
    }
    printf("replay group of %d (%s), 6 rounds of %zu: every batch and every saved buffer byte for "
           "byte its twin's alone\n",
           GK, kind == VX_REPLAY_UNIFORM ? "uniform" : "proportional", B);
    th_rmtree(dir);
    vx_replay_group_free(g);
    for (int k = 0; k < GK; k++) {
        vx_replay_free(alone[k]), vx_replay_free(grp[k]);
        dbatch_free(&xa[k]), dbatch_free(&xg[k]);
        tset_free(&t[k]);
    }
    cudaFree(dt);
    free(td);
}

static void test_group_against_alone(void **state)
{
    (void)state;
    group_against_alone(VX_REPLAY_PROPORTIONAL);
    group_against_alone(VX_REPLAY_UNIFORM);
    /* refused, with the reason: a rank-based buffer; one on the CPU */
    vx_replay *r[2];
    vx_replay_batch out[2];
    memset(out, 0, sizeof out);
    vx_err e;
    char why[160];
    vx_replay_group *g;
    for (int c = 0; c < 2; c++) {
        vx_replay_cfg k = cfg_of(c == 0 ? VX_REPLAY_RANK : VX_REPLAY_PROPORTIONAL, 1024);
        assert_int_equal(vx_replay_create(&k, g_dev, &r[0], &e), VX_OK);
        assert_int_equal(vx_replay_create(&k, c == 0 ? g_dev : NULL, &r[1], &e), VX_OK);
        assert_int_equal(
            vx_replay_group_create(r, 2, out, NULL, 64, 64, g_dev, &g, why, sizeof why, &e), VX_OK);
        assert_null(g);
        assert_non_null(strstr(why, c == 0 ? "rank-based" : "buffer 1 is not on the device"));
        vx_replay_free(r[0]), vx_replay_free(r[1]);
    }
}

/* A context whose budget is too small: the buffer starts on the CPU with the warning, behind the
 * same calls; a small one fits and is charged to the context. */
static void test_budget_refusal_falls_back(void **state)
{
    (void)state;
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CUDA;
    dc.budget = 4 << 20;
    vx_device *dev;
    vx_err e;
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    vx_replay_cfg c = cfg_of(VX_REPLAY_PROPORTIONAL, 100000);
    vx_replay *big, *small;
    th_log_start();
    assert_int_equal(vx_replay_create(&c, dev, &big, &e), VX_OK);
    assert_int_equal(vx_replay_on_device(big), 0);
    assert_non_null(strstr(th_log_text(), "memory budget"));
    assert_non_null(strstr(th_log_text(), "continuing on the CPU buffer"));
    th_log_stop();
    assert_int_equal(vx_replay_reserved(big), 0);
    tset t;
    tset_make(&t, 1500, 0);
    assert_int_equal(vx_replay_insert(big, &t.d, 1500, NULL, &e), VX_OK);
    check_sample_valid(big, 1500, 1);
    c.capacity = 1000;
    assert_int_equal(vx_replay_create(&c, dev, &small, &e), VX_OK);
    assert_int_equal(vx_replay_on_device(small), 1);
    vx_device_mem m;
    vx_device_memory(dev, &m);
    assert_int_equal(m.reserved, vx_replay_reserved(small));
    assert_int_equal(vx_replay_snap(big, NULL, &e), VX_ERR_UNSUPPORTED);
    vx_replay_free(big), vx_replay_free(small);
    vx_device_memory(dev, &m);
    assert_int_equal(m.reserved, 0);
    tset_free(&t);
    vx_device_close(dev);
}

/* The insert's rebuild of the tree over its new leaves, node by node: inserts whose ranges start
 * and end off every level's node boundaries, on them, across the ring's end, a whole ring and one
 * more than a ring, into trees of depth 0 to 6 (16 and 4,096 slots exact powers of 16: a whole
 * ring's insert makes the root a full node), with priority updates between that raise the running
 * maximum (the new leaves' value) and change leaves beside them. After each insert every inner
 * node of the device tree is checked against its children added in order on the host, bit for
 * bit — a partial node summed from a stale child, a full node given another height's sum, a node
 * left out across the wrap or a level skipped fails here — the leaves set count the transitions
 * stored, and the new leaves hold max_p^α (within 1e-12: the device's pow against the host's).
 * Each update is counted whole (no stale entry) and raises max_p. */
static void test_insert_rebuild_exact(void **state)
{
    (void)state;
    enum { N_CAPS = 7 };
    const size_t caps[N_CAPS] = {1, 16, 17, 4096, 4097, 70000, ((size_t)1 << 20) + 3};
    const size_t sizes[] = {1,    2,    15,   16,   17,    255,   256, 257,
                            2048, 2000, 4095, 4097, 65536, 70001, 4096};
    enum { N_SIZES = sizeof sizes / sizeof *sizes, MAXN = 70001, U = 64 };
    tset t;
    tset_make(&t, MAXN, 0);
    vx_rng rng = vx_rng_make(17, 0, 0);
    long long inserts = 0, checks = 0;
    for (int ci = 0; ci < N_CAPS; ci++) {
        size_t C = caps[ci], cursor = 0, stored = 0;
        vx_replay_cfg c = cfg_of(VX_REPLAY_PROPORTIONAL, C);
        vx_replay *r;
        vx_err e;
        assert_int_equal(vx_replay_create(&c, g_dev, &r, &e), VX_OK);
        uint32_t *writes = calloc(C, 4);
        for (int pass = 0; pass < 2; pass++)
            for (int j = 0; j < N_SIZES; j++) {
                size_t n = sizes[j];
                if (n > C + 1) continue;
                assert_int_equal(vx_replay_insert(r, &t.d, n, NULL, &e), VX_OK);
                size_t skip = n > C ? n - C : 0; /* only the last C land */
                for (size_t k = skip; k < n; k++) writes[(cursor + k) % C]++;
                cursor = (cursor + n) % C;
                stored = stored + n < C ? stored + n : C;
                size_t set;
                long long bad = tree_check(r, &set);
                if (bad != 0 || set != stored)
                    fail_msg("capacity %zu, insert of %zu (pass %d): %lld nodes wrong, %zu of %zu "
                             "leaves set",
                             C, n, pass, bad, set, stored);
                vx_replay_stats st;
                assert_int_equal(vx_replay_stats_get(r, &st, NULL, &e), VX_OK);
                double want = pow(st.max_priority, c.alpha);
                for (size_t k = skip; k < n; k += (n - skip) / 7 + 1) { /* 8 of the new leaves */
                    double got = tree_leaf(r, (cursor + C - n % C + k) % C);
                    if (!(fabs(got - want) <= 1e-12 * want))
                        fail_msg("capacity %zu, insert of %zu: new leaf %.17g, max_p^alpha %.17g",
                                 C, n, got, want);
                }
                inserts++, checks++;
                if (j % 2) continue;
                /* priorities up to 10^(1 + j/4): the running maximum climbs */
                uint32_t idx[U], gen[U];
                float td[U];
                for (int k = 0; k < U; k++) {
                    idx[k] = vx_rng_below(&rng, (uint32_t)stored);
                    gen[k] = writes[idx[k]];
                    td[k] = (float)pow(10.0, -1 + (2 + j / 4.0) * vx_rng_uniform_double(&rng));
                }
                dev_update(r, idx, gen, td, U);
                bad = tree_check(r, &set);
                if (bad != 0) fail_msg("capacity %zu, after an update: %lld nodes wrong", C, bad);
                vx_replay_stats after;
                assert_int_equal(vx_replay_stats_get(r, &after, NULL, &e), VX_OK);
                double top = 0;
                for (int k = 0; k < U; k++) top = fmax(top, fabs((double)td[k]) + c.eps);
                assert_int_equal(after.stale_updates, st.stale_updates); /* every entry current */
                assert_true(after.max_priority == fmax(st.max_priority, top));
                checks++;
            }
        free(writes);
        vx_replay_free(r);
    }
    printf("insert rebuild: %lld inserts into 7 capacities (depths 0 to 6), %lld whole trees "
           "checked node by node: every inner node its children's ordered sum, the new leaves "
           "max_p^alpha\n",
           inserts, checks);
    tset_free(&t);
}

/* A buffer pins its save and load staging at its first save or load, not when it is made: a
 * search's trials never save theirs (a buffer that pinned at creation fails here). The staging
 * made then serves the save and a load into another buffer, which pins its own at the load. */
static void test_staging_pinned_at_first_use(void **state)
{
    (void)state;
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CUDA;
    vx_device *dev;
    vx_err e;
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/r.bin", dir);
    vx_replay_cfg c = cfg_of(VX_REPLAY_PROPORTIONAL, 5000);
    vx_replay *r, *r2;
    assert_int_equal(vx_replay_create(&c, dev, &r, &e), VX_OK);
    assert_int_equal(vx_replay_on_device(r), 1);
    tset t;
    tset_make(&t, 3000, 0);
    assert_int_equal(vx_replay_insert(r, &t.d, 3000, NULL, &e), VX_OK);
    check_sample_valid(r, 3000, 1);
    vx_replay_stats s1, s2;
    assert_int_equal(vx_replay_stats_get(r, &s1, NULL, &e), VX_OK);
    vx_device_mem m;
    vx_device_memory(dev, &m);
    assert_int_equal(m.host, 0); /* made, filled, sampled, counted: nothing pinned */
    assert_int_equal(vx_replay_save(r, path, &e), VX_OK);
    vx_device_memory(dev, &m);
    size_t one = m.host;
    assert_true(one >= 2 * 5000 * sizeof(float)); /* two halves, each the obs array at least */
    assert_int_equal(vx_replay_save(r, path, &e), VX_OK); /* the same halves again */
    vx_device_memory(dev, &m);
    assert_int_equal(m.host, one);
    assert_int_equal(vx_replay_create(&c, dev, &r2, &e), VX_OK);
    assert_int_equal(vx_replay_load(r2, path, &e), VX_OK);
    vx_device_memory(dev, &m);
    assert_int_equal(m.host, 2 * one);
    assert_int_equal(vx_replay_stats_get(r2, &s2, NULL, &e), VX_OK);
    assert_int_equal(s2.size, s1.size);
    assert_true(s2.total == s1.total);
    check_sample_valid(r2, 3000, 1);
    printf("staging: nothing pinned until the first save; %zu bytes after it\n", one);
    vx_replay_free(r), vx_replay_free(r2);
    vx_device_memory(dev, &m);
    assert_int_equal(m.host, 0);
    tset_free(&t);
    th_rmtree(dir);
    vx_device_close(dev);
}

int main(void)
{
    if (vx_cuda_device_count() == 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CUDA;
    vx_err e;
    if (vx_device_open(&dc, &g_dev, &e)) {
        printf("cannot open the CUDA device: %s\n", e.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contents_and_ring),
        cmocka_unit_test(test_small_capacities),
        cmocka_unit_test(test_equivalence_with_cpu),
        cmocka_unit_test(test_deep_tree_against_cpu),
        cmocka_unit_test(test_independent_streams_against_cpu),
        cmocka_unit_test(test_no_drift_stale_duplicates_clamp),
        cmocka_unit_test(test_empty_slots_never_drawn_and_graph_replay),
        cmocka_unit_test(test_fallbacks),
        cmocka_unit_test(test_save_load_across_backends),
        cmocka_unit_test(test_snapshot),
        cmocka_unit_test(test_budget_refusal_falls_back),
        cmocka_unit_test(test_group_against_alone),
        cmocka_unit_test(test_staging_pinned_at_first_use),
        cmocka_unit_test(test_insert_rebuild_exact),
    };
    int failed = cmocka_run_group_tests_name("replay_cuda", tests, NULL, NULL);
    vx_device_close(g_dev);
    return failed;
}

/* test_replay.c — the replay buffer's hard guarantees, each with a test: ring order, no index
 * beyond size and no empty slot, no zero-priority draw, clamping of non-finite priorities, no drift
 * of the total after 10 M updates, stale updates ignored, sampled frequencies matching P(i)
 * (chi-square), importance weights, save/restore to the same future (and to the same file bytes),
 * a smaller file loaded over a fuller buffer, refused bad files, the settings' checks naming the
 * field, replay_math.h's tree shape against what the CPU buffer allocates, and the CPU buffer on
 * its device (no snapshot; a budget that refuses it). */
#include "helpers.h"
#include "vixen/philox.h"
#include "vixen/replay.h"
#include "vixen/replay_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { D = 4 };

typedef struct {
    float obs[D], next[D], reward;
    int32_t act[3];
    uint8_t term, trunc;
} tr;

/* The calls as the tests use them: β with each sample, statuses checked where none is looked at. */
static vx_status sample(vx_replay *r, size_t B, double beta, vx_replay_batch *b, vx_err *e)
{
    assert_int_equal(vx_replay_set_beta(r, beta, NULL, e), VX_OK);
    return vx_replay_sample(r, B, b, NULL, e);
}

static void update(vx_replay *r, const uint32_t *idx, const uint32_t *gen, const float *td,
                   size_t n)
{
    vx_err e;
    assert_int_equal(vx_replay_update(r, idx, gen, td, n, NULL, &e), VX_OK);
}

static void stats(vx_replay *r, vx_replay_stats *s)
{
    vx_err e;
    assert_int_equal(vx_replay_stats_get(r, s, NULL, &e), VX_OK);
}

static double total_recomputed(vx_replay *r)
{
    vx_replay_stats s;
    double z;
    vx_err e;
    assert_int_equal(vx_replay_stats_get(r, &s, &z, &e), VX_OK);
    return z;
}

static double prob(vx_replay *r, size_t i)
{
    double p;
    vx_err e;
    assert_int_equal(vx_replay_prob(r, i, &p, &e), VX_OK);
    return p;
}

/* Inserts n transitions whose fields encode their number k0 + i. */
static void insert_n(vx_replay *r, size_t n, int k0)
{
    float *o = malloc(n * D * 4), *nx = malloc(n * D * 4), *rw = malloc(n * 4);
    int32_t *a = malloc(n * 12);
    uint8_t *te = calloc(n, 1), *tu = calloc(n, 1);
    for (size_t i = 0; i < n; i++) {
        int k = k0 + (int)i;
        for (int d = 0; d < D; d++) o[i * D + d] = (float)k, nx[i * D + d] = (float)k + 0.5f;
        rw[i] = (float)k;
        a[i * 3] = k % 9, a[i * 3 + 1] = k % 3, a[i * 3 + 2] = (k / 3) % 3;
        te[i] = k % 7 == 0, tu[i] = k % 5 == 0;
    }
    vx_transitions t = {o, nx, a, rw, te, tu, NULL};
    vx_err e;
    assert_int_equal(vx_replay_insert(r, &t, n, NULL, &e), VX_OK);
    free(o), free(nx), free(rw), free(a), free(te), free(tu);
}

typedef struct {
    float *obs, *next, *rew, *w;
    int32_t *act;
    uint8_t *te, *tu, *steps;
    uint32_t *idx, *gen;
    vx_replay_batch b;
} batch;

static void batch_make(batch *x, size_t B)
{
    x->obs = malloc(B * D * 4), x->next = malloc(B * D * 4), x->rew = malloc(B * 4);
    x->w = malloc(B * 4), x->act = malloc(B * 12), x->te = malloc(B), x->tu = malloc(B);
    x->steps = malloc(B), x->idx = malloc(B * 4), x->gen = malloc(B * 4);
    x->b = (vx_replay_batch){x->obs, x->next,  x->act, x->rew, x->te,
                             x->tu,  x->steps, x->w,   x->idx, x->gen};
}

static void batch_free(batch *x)
{
    free(x->obs), free(x->next), free(x->rew), free(x->w), free(x->act), free(x->te);
    free(x->tu), free(x->steps), free(x->idx), free(x->gen);
}

static vx_replay *make(vx_replay_kind kind, size_t cap, uint64_t seed)
{
    vx_replay_cfg c;
    vx_replay_cfg_default(&c, kind, cap);
    c.obs_dim = D;
    c.seed = seed;
    vx_replay *r;
    vx_err e;
    assert_int_equal(vx_replay_create(&c, NULL, &r, &e), VX_OK);
    return r;
}

static void test_ring_wraps_and_contents(void **state)
{
    (void)state;
    vx_replay *r = make(VX_REPLAY_UNIFORM, 5, 1);
    insert_n(r, 7, 0); /* 0..6: slots hold 5, 6, 2, 3, 4 */
    vx_replay_stats s;
    stats(r, &s);
    assert_int_equal(s.size, 5);
    assert_int_equal(s.inserted, 7);
    batch x;
    batch_make(&x, 2000);
    vx_err e;
    assert_int_equal(sample(r, 2000, 0.4, &x.b, &e), VX_OK);
    int seen[5] = {0};
    const int holds[5] = {5, 6, 2, 3, 4};
    for (int j = 0; j < 2000; j++) {
        uint32_t i = x.idx[j];
        assert_true(i < 5);
        seen[i] = 1;
        int k = holds[i];
        assert_float_equal(x.obs[j * D], k, 0);
        assert_float_equal(x.next[j * D + 3], k + 0.5, 0);
        assert_float_equal(x.rew[j], k, 0);
        assert_int_equal(x.act[j * 3], k % 9);
        assert_int_equal(x.act[j * 3 + 2], (k / 3) % 3);
        assert_int_equal(x.te[j], k % 7 == 0);
        assert_int_equal(x.tu[j], k % 5 == 0);
        assert_int_equal(x.steps[j], 1);
        assert_float_equal(x.w[j], 1, 0);
        assert_int_equal(x.gen[j], i < 2 ? 2 : 1); /* slots 0 and 1 were written twice */
    }
    for (int i = 0; i < 5; i++) assert_true(seen[i]);
    batch_free(&x);
    vx_replay_free(r);
    /* empty buffer */
    r = make(VX_REPLAY_PROPORTIONAL, 8, 1);
    batch_make(&x, 4);
    assert_int_equal(sample(r, 4, 0.4, &x.b, &e), VX_ERR_ARG);
    batch_free(&x);
    vx_replay_free(r);
}

static void set_all_priorities(vx_replay *r, size_t n, const float *td)
{
    /* sampling returns the stamps; for tests, stamps are 1 (each slot written once) */
    uint32_t *idx = malloc(n * 4), *gen = malloc(n * 4);
    for (size_t i = 0; i < n; i++) idx[i] = (uint32_t)i, gen[i] = 1;
    update(r, idx, gen, td, n);
    free(idx), free(gen);
}

static double chi_square(vx_replay *r, size_t N, size_t draws, size_t B)
{
    size_t *count = calloc(N, sizeof *count);
    batch x;
    batch_make(&x, B);
    vx_err e;
    for (size_t c = 0; c < draws / B; c++) {
        assert_int_equal(sample(r, B, 0.5, &x.b, &e), VX_OK);
        for (size_t j = 0; j < B; j++) {
            assert_true(x.idx[j] < N);
            count[x.idx[j]]++;
        }
    }
    double chi = 0;
    for (size_t i = 0; i < N; i++) {
        double want = (double)draws * prob(r, i);
        chi += (count[i] - want) * (count[i] - want) / want;
    }
    free(count);
    batch_free(&x);
    return chi;
}

static void test_frequencies_match_probabilities(void **state)
{
    (void)state;
    const size_t N = 50;
    float td[50];
    vx_rng g = vx_rng_make(5, 0, 0);
    for (size_t i = 0; i < N; i++) td[i] = (float)(0.05 + 3 * vx_rng_uniform_double(&g));
    vx_replay_kind kinds[3] = {VX_REPLAY_UNIFORM, VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK};
    for (int k = 0; k < 3; k++) {
        vx_replay *r = make(kinds[k], 64, 9);
        insert_n(r, N, 0);
        set_all_priorities(r, N, td);
        double sum = 0;
        for (size_t i = 0; i < N; i++) sum += prob(r, i);
        assert_true(fabs(sum - 1) < 1e-12);
        if (kinds[k] == VX_REPLAY_PROPORTIONAL) {
            double z = 0;
            for (size_t i = 0; i < N; i++) z += pow(td[i] + 1e-6, 0.6);
            assert_true(fabs(prob(r, 3) - pow(td[3] + 1e-6, 0.6) / z) < 1e-12);
        }
        double chi = chi_square(r, N, 100000, 100);
        printf("kind %d: chi-square %.1f over %zu cells (49 dof; p = 0.001 at 85.4)\n", k, chi, N);
        assert_true(chi < 85.35);
        vx_replay_free(r);
    }
    /* and the test can fail: frequencies of the proportional sampler against uniform P */
    vx_replay *r = make(VX_REPLAY_PROPORTIONAL, 64, 9);
    insert_n(r, N, 0);
    set_all_priorities(r, N, td);
    size_t count[50] = {0};
    batch x;
    batch_make(&x, 100);
    vx_err e;
    for (int c = 0; c < 1000; c++) {
        sample(r, 100, 0.5, &x.b, &e);
        for (int j = 0; j < 100; j++) count[x.idx[j]]++;
    }
    double chi = 0;
    for (size_t i = 0; i < N; i++) chi += (count[i] - 2000.0) * (count[i] - 2000.0) / 2000.0;
    assert_true(chi > 85.35);
    batch_free(&x);
    vx_replay_free(r);
}

static void test_rank_probabilities(void **state)
{
    (void)state;
    vx_replay *r = make(VX_REPLAY_RANK, 16, 3);
    insert_n(r, 10, 0);
    float td[10] = {5, 1, 9, 3, 7, 2, 8, 4, 6, 0.5f}; /* ranks: slot 2 first, slot 9 last */
    set_all_priorities(r, 10, td);
    double z = 0;
    for (int k = 1; k <= 10; k++) z += pow(k, -0.7);
    batch x;
    batch_make(&x, 10);
    vx_err e;
    assert_int_equal(sample(r, 10, 0.5, &x.b, &e), VX_OK); /* refreshes the order */
    assert_true(fabs(prob(r, 2) - 1 / z) < 1e-12);
    assert_true(fabs(prob(r, 9) - pow(10, -0.7) / z) < 1e-12);
    assert_true(fabs(prob(r, 0) - pow(5, -0.7) / z) < 1e-12); /* 5 is 5th largest */
    /* weights: w = (N P)^−β / (N P_min)^−β */
    for (int j = 0; j < 10; j++) {
        double P = prob(r, x.idx[j]);
        double w = pow(10 * P, -0.5) / pow(10 * pow(10, -0.7) / z, -0.5);
        assert_true(fabs(x.w[j] - w) < 1e-6);
    }
    batch_free(&x);
    vx_replay_free(r);
}

static void test_weights_proportional(void **state)
{
    (void)state;
    vx_replay *r = make(VX_REPLAY_PROPORTIONAL, 32, 4);
    insert_n(r, 20, 0);
    float td[20];
    for (int i = 0; i < 20; i++) td[i] = (float)(i + 1);
    set_all_priorities(r, 20, td);
    batch x;
    batch_make(&x, 200);
    vx_err e;
    assert_int_equal(sample(r, 200, 0.4, &x.b, &e), VX_OK);
    double pmin = prob(r, 0); /* td 1 is the smallest */
    int saw_one = 0;
    for (int j = 0; j < 200; j++) {
        double P = prob(r, x.idx[j]);
        double w = pow(20 * P, -0.4) / pow(20 * pmin, -0.4);
        assert_true(fabs(x.w[j] - w) < 1e-6);
        assert_true(x.w[j] > 0 && x.w[j] <= 1);
        saw_one |= x.idx[j] == 0 && x.w[j] == 1.0f;
    }
    assert_true(saw_one);
    batch_free(&x);
    vx_replay_free(r);
}

static void test_zero_priority_and_empty_slots_never_drawn(void **state)
{
    (void)state;
    /* p^α underflows to exactly 0 for p = 1e-200 and α = 2: those leaves hold 0 */
    vx_replay_cfg c;
    vx_replay_cfg_default(&c, VX_REPLAY_PROPORTIONAL, 1000);
    c.obs_dim = D;
    c.alpha = 2;
    c.eps = 1e-200;
    vx_replay *r;
    vx_err e;
    assert_int_equal(vx_replay_create(&c, NULL, &r, &e), VX_OK);
    insert_n(r, 10, 0); /* 990 empty leaves */
    float td[10] = {0, 1, 0, 0, 2, 0, 0, 0, 3, 0};
    set_all_priorities(r, 10, td);
    assert_true(prob(r, 0) == 0);
    batch x;
    batch_make(&x, 1000);
    for (int it = 0; it < 200; it++) {
        assert_int_equal(sample(r, 1000, 1.0, &x.b, &e), VX_OK);
        for (int j = 0; j < 1000; j++) {
            assert_true(x.idx[j] < 10);
            assert_true(td[x.idx[j]] > 0);
        }
    }
    batch_free(&x);
    vx_replay_free(r);
}

static void test_clamp_and_max_priority(void **state)
{
    (void)state;
    vx_replay *r = make(VX_REPLAY_PROPORTIONAL, 16, 4);
    insert_n(r, 4, 0);
    float td[4] = {-7.0f, NAN, INFINITY, 0.5f};
    set_all_priorities(r, 4, td);
    vx_replay_stats s;
    stats(r, &s);
    assert_int_equal(s.clamped, 2);
    assert_true(fabs(s.max_priority - (7 + 1e-6)) < 1e-9); /* |−7| + ε */
    /* the clamped ones took the running max; all four are finite and positive */
    double z = total_recomputed(r);
    assert_true(isfinite(z) && z > 0);
    assert_true(fabs(prob(r, 1) - prob(r, 0)) < 1e-15);
    /* new items enter at the largest priority seen */
    insert_n(r, 1, 4);
    assert_true(fabs(prob(r, 4) - prob(r, 0)) < 1e-15);
    vx_replay_free(r);
}

static void test_total_does_not_drift(void **state)
{
    (void)state;
    const size_t cap = 1 << 16;
    vx_replay *r = make(VX_REPLAY_PROPORTIONAL, cap, 4);
    insert_n(r, cap, 0);
    enum { CHUNK = 4096 };
    uint32_t idx[CHUNK], gen[CHUNK];
    float td[CHUNK];
    vx_rng g = vx_rng_make(77, 0, 0);
    for (size_t done = 0; done < 10000000; done += CHUNK) {
        for (int k = 0; k < CHUNK; k++) {
            idx[k] = vx_rng_below(&g, cap);
            gen[k] = 1;
            /* priorities over nine orders of magnitude, the hard case for float sums */
            td[k] = (float)pow(10.0, -6 + 9 * vx_rng_uniform_double(&g));
        }
        update(r, idx, gen, td, CHUNK);
    }
    vx_replay_stats s;
    stats(r, &s);
    double fresh = total_recomputed(r);
    printf("after 10 M updates: stored total %.17g, fresh sum %.17g, relative %.2e\n", s.total,
           fresh, fabs(s.total - fresh) / fresh);
    assert_true(fabs(s.total - fresh) / fresh < 1e-9);
    vx_replay_free(r);
}

static void test_stale_update_ignored(void **state)
{
    (void)state;
    vx_replay *r = make(VX_REPLAY_PROPORTIONAL, 8, 4);
    insert_n(r, 8, 0);
    batch x;
    batch_make(&x, 8);
    vx_err e;
    assert_int_equal(sample(r, 8, 0.5, &x.b, &e), VX_OK);
    uint32_t slot = x.idx[0];
    double before = prob(r, slot);
    insert_n(r, 8, 100); /* every slot overwritten: the sample's stamps are stale */
    float td[8];
    for (int j = 0; j < 8; j++) td[j] = 1000;
    update(r, x.idx, x.gen, td, 8);
    vx_replay_stats s;
    stats(r, &s);
    assert_int_equal(s.stale_updates, 8);
    assert_true(fabs(prob(r, slot) - before) < 1e-15);
    /* a fresh sample's update applies */
    assert_int_equal(sample(r, 8, 0.5, &x.b, &e), VX_OK);
    update(r, x.idx, x.gen, td, 1);
    stats(r, &s);
    assert_int_equal(s.stale_updates, 8);
    assert_true(fabs(s.max_priority - 1000) < 1e-3);
    batch_free(&x);
    vx_replay_free(r);
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

static void test_save_restore_same_future(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/replay.bin", dir);
    vx_replay_kind kinds[3] = {VX_REPLAY_UNIFORM, VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK};
    for (int k = 0; k < 3; k++) {
        vx_replay *a = make(kinds[k], 64, 21), *b = make(kinds[k], 64, 99);
        insert_n(a, 90, 0);
        batch x, y;
        batch_make(&x, 16);
        batch_make(&y, 16);
        vx_err e;
        float td[16];
        for (int it = 0; it < 7; it++) { /* some history: samples, updates */
            assert_int_equal(sample(a, 16, 0.5, &x.b, &e), VX_OK);
            for (int j = 0; j < 16; j++) td[j] = (float)(j + it);
            update(a, x.idx, x.gen, td, 16);
        }
        assert_int_equal(vx_replay_save(a, path, &e), VX_OK);
        assert_int_equal(vx_replay_load(b, path, &e), VX_OK);
        for (int it = 0; it < 150; it++) { /* past a rank refresh */
            assert_int_equal(sample(a, 16, 0.6, &x.b, &e), VX_OK);
            assert_int_equal(sample(b, 16, 0.6, &y.b, &e), VX_OK);
            assert_memory_equal(x.idx, y.idx, 16 * 4);
            assert_memory_equal(x.w, y.w, 16 * 4);
            assert_memory_equal(x.obs, y.obs, 16 * D * 4);
            for (int j = 0; j < 16; j++) td[j] = (float)(3 * j % 7 + it);
            update(a, x.idx, x.gen, td, 16);
            update(b, y.idx, y.gen, td, 16);
            if (it % 40 == 0) insert_n(a, 5, 1000 + it), insert_n(b, 5, 1000 + it);
        }
        /* the loaded buffer writes the file it was loaded from, byte for byte */
        char again[160];
        snprintf(again, sizeof again, "%s/again.bin", dir);
        vx_replay *b2 = make(kinds[k], 64, 5);
        assert_int_equal(vx_replay_load(b2, path, &e), VX_OK);
        assert_int_equal(vx_replay_save(b2, again, &e), VX_OK);
        assert_true(files_equal(path, again));
        vx_replay_free(b2);
        batch_free(&x);
        batch_free(&y);
        /* a buffer of another shape refuses the file */
        vx_replay *c = make(kinds[k], 32, 1);
        assert_int_equal(vx_replay_load(c, path, &e), VX_ERR_ARG);
        assert_non_null(strstr(e.msg, "does not match"));
        vx_replay_free(c);
        vx_replay_free(a);
        vx_replay_free(b);
    }
    th_rmtree(dir);
}

/* A file of 10 transitions loaded into a buffer that held 64: only the 10 are drawn (the leaves
 * the buffer held beyond the file's size are emptied); a truncated or foreign file is refused. */
static void test_load_smaller_and_bad_files(void **state)
{
    (void)state;
    char dir[64], path[128], cut[160];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/small.bin", dir);
    snprintf(cut, sizeof cut, "%s/cut.bin", dir);
    vx_replay_kind kinds[3] = {VX_REPLAY_UNIFORM, VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK};
    vx_err e;
    for (int k = 0; k < 3; k++) {
        vx_replay *small = make(kinds[k], 64, 2), *full = make(kinds[k], 64, 2);
        insert_n(small, 10, 0);
        insert_n(full, 64, 100);
        assert_int_equal(vx_replay_save(small, path, &e), VX_OK);
        assert_int_equal(vx_replay_load(full, path, &e), VX_OK);
        assert_int_equal(vx_replay_size(full), 10);
        batch x;
        batch_make(&x, 500);
        assert_int_equal(sample(full, 500, 0.5, &x.b, &e), VX_OK);
        for (int j = 0; j < 500; j++) {
            assert_true(x.idx[j] < 10);
            assert_float_equal(x.rew[j], (float)x.idx[j], 0);
        }
        double sum = 0;
        for (size_t i = 0; i < 64; i++) sum += prob(full, i);
        assert_true(fabs(sum - 1) < 1e-12);
        batch_free(&x);
        /* the same file cut short, and a file that is not a replay file */
        uint8_t *bytes;
        size_t n;
        assert_int_equal(vx_file_read_all(path, &bytes, &n, &e), VX_OK);
        FILE *f = fopen(cut, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(bytes, 1, n - 3, f), n - 3);
        fclose(f);
        assert_int_equal(vx_replay_load(full, cut, &e), VX_ERR_FORMAT);
        assert_non_null(strstr(e.msg, "truncated"));
        f = fopen(cut, "wb");
        assert_int_equal(fwrite("not a replay file at all, not even close", 1, 40, f), 40);
        fclose(f);
        assert_int_equal(vx_replay_load(full, cut, &e), VX_ERR_FORMAT);
        assert_non_null(strstr(e.msg, "not a vixen replay file"));
        free(bytes);
        vx_replay_free(small);
        vx_replay_free(full);
    }
    th_rmtree(dir);
}

/* vx_replay_cfg_check refuses what vx_replay_create refuses, naming the field; create refuses it
 * too, before allocating anything. */
static void test_cfg_check_names_the_field(void **state)
{
    (void)state;
    const char *field[8] = {"capacity", "capacity", "obs_dim",      "alpha",
                            "alpha",    "eps",      "rank_refresh", "kind"};
    for (int i = 0; i < 8; i++) {
        vx_replay_cfg c;
        vx_replay_cfg_default(&c, VX_REPLAY_RANK, 100);
        switch (i) {
        case 0: c.capacity = 0; break;
        case 1: c.capacity = ((size_t)1 << 31) + 1; break;
        case 2: c.obs_dim = 0; break;
        case 3: c.alpha = -0.5; break;
        case 4: c.alpha = NAN; break;
        case 5: c.eps = 0; break;
        case 6: c.rank_refresh = 0; break;
        case 7: c.kind = (vx_replay_kind)7; break;
        }
        vx_err e;
        assert_int_equal(vx_replay_cfg_check(&c, &e), VX_ERR_ARG);
        if (!strstr(e.msg, field[i])) fail_msg("case %d: '%s' lacks '%s'", i, e.msg, field[i]);
        vx_replay *r = (vx_replay *)&e; /* create must set it to NULL */
        assert_int_equal(vx_replay_create(&c, NULL, &r, &e), VX_ERR_ARG);
        assert_null(r);
        assert_non_null(strstr(e.msg, field[i]));
    }
    vx_replay_cfg c;
    vx_replay_cfg_default(&c, VX_REPLAY_PROPORTIONAL, (size_t)1 << 31);
    vx_err e;
    assert_int_equal(vx_replay_cfg_check(&c, &e), VX_OK); /* the largest capacity is allowed */
}

/* replay_math.h's tree shape: the widths by hand for a few capacities, and exactly what the CPU
 * buffer allocates (its reserved bytes, less a uniform buffer's, are the two trees). */
static void test_tree_shape_is_what_the_cpu_allocates(void **state)
{
    (void)state;
    const size_t caps[5] = {1, 16, 17, 100000, (size_t)1 << 20};
    const int depth[5] = {0, 1, 2, 5, 5};
    const size_t widths[5][6] = {
        {1},
        {1, 16},
        {1, 16, 32},
        {1, 16, 32, 400, 6256, 100000},
        {1, 16, 256, 4096, 65536, 1048576},
    };
    for (int k = 0; k < 5; k++) {
        vx_replay_tree_shape sh = vx_replay_tree_shape_of(caps[k]);
        assert_int_equal(sh.depth, depth[k]);
        size_t nodes = 0;
        for (int l = 0; l < VX_REPLAY_MAX_LEVELS; l++) {
            assert_int_equal(sh.width[l], l <= depth[k] ? widths[k][l] : 0);
            nodes += sh.width[l];
        }
        vx_replay_cfg c;
        vx_replay_cfg_default(&c, VX_REPLAY_PROPORTIONAL, caps[k]);
        c.obs_dim = 1;
        vx_replay *p, *u, *rk;
        vx_err e;
        assert_int_equal(vx_replay_create(&c, NULL, &p, &e), VX_OK);
        c.kind = VX_REPLAY_UNIFORM;
        assert_int_equal(vx_replay_create(&c, NULL, &u, &e), VX_OK);
        c.kind = VX_REPLAY_RANK;
        assert_int_equal(vx_replay_create(&c, NULL, &rk, &e), VX_OK);
        assert_int_equal(vx_replay_reserved(p) - vx_replay_reserved(u), 2 * sizeof(double) * nodes);
        assert_int_equal(vx_replay_reserved(rk) - vx_replay_reserved(u), caps[k] * 12);
        assert_int_equal(vx_replay_reserved(u), caps[k] * (2 * sizeof(float) + 16 + 8));
        vx_replay_free(p), vx_replay_free(u), vx_replay_free(rk);
    }
}

/* The CPU buffer: on its device, no snapshot, and a device budget that is too small refuses it. */
static void test_cpu_device_snapshot_and_budget(void **state)
{
    (void)state;
    vx_replay *r = make(VX_REPLAY_PROPORTIONAL, 64, 1);
    vx_err e;
    assert_int_equal(vx_replay_on_device(r), 1);
    assert_ptr_equal(vx_replay_device(r), vx_device_cpu());
    assert_int_equal(vx_replay_snap(r, NULL, &e), VX_ERR_UNSUPPORTED);
    assert_int_equal(vx_replay_snap_save(r, "/nonexistent/x", &e), VX_ERR_UNSUPPORTED);
    vx_replay_free(r);
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    dc.budget = 1 << 20;
    vx_device *dev;
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    vx_replay_cfg c;
    vx_replay_cfg_default(&c, VX_REPLAY_PROPORTIONAL, 100000);
    assert_int_equal(vx_replay_create(&c, dev, &r, &e), VX_ERR_NOMEM);
    assert_non_null(strstr(e.msg, "budget"));
    c.capacity = 100;
    assert_int_equal(vx_replay_create(&c, dev, &r, &e), VX_OK);
    vx_device_mem m;
    vx_device_memory(dev, &m);
    assert_int_equal(m.reserved, vx_replay_reserved(r));
    vx_replay_free(r);
    vx_device_memory(dev, &m);
    assert_int_equal(m.reserved, 0);
    vx_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_wraps_and_contents),
        cmocka_unit_test(test_frequencies_match_probabilities),
        cmocka_unit_test(test_rank_probabilities),
        cmocka_unit_test(test_weights_proportional),
        cmocka_unit_test(test_zero_priority_and_empty_slots_never_drawn),
        cmocka_unit_test(test_clamp_and_max_priority),
        cmocka_unit_test(test_total_does_not_drift),
        cmocka_unit_test(test_stale_update_ignored),
        cmocka_unit_test(test_save_restore_same_future),
        cmocka_unit_test(test_load_smaller_and_bad_files),
        cmocka_unit_test(test_cfg_check_names_the_field),
        cmocka_unit_test(test_tree_shape_is_what_the_cpu_allocates),
        cmocka_unit_test(test_cpu_device_snapshot_and_budget),
    };
    return cmocka_run_group_tests_name("replay", tests, NULL, NULL);
}

/* test_dqn_group_cuda.c — a group of DQN learners (fused trials: dqn_learner_create_group) against
 * the same members run as learners of their own. The members differ in everything a group lets
 * them differ in (γ, Huber κ, τ, target_every, clip, learning rate, weight decay), and in their
 * starting weights and data; each member must follow its own learner:
 *   fixed batches, 4 updates, Huber and C51: each member's priorities, mean loss and pre-clip norm
 *   within 1e-5 relative, its online and target weights within 1e-5 relative L2 (the group's GEMMs
 *   are strided-batched, its learners' plain: the order of a sum may differ, so not bit for bit);
 *   the same group with member 0's settings given to member 1 misses member 1's priorities by far
 *   more than that (the test's power against "one member's settings for all");
 *   sampled from proportional buffers (the same draws for a member and its learner while their
 *   priorities agree), 30 updates as captured loops: the same bounds;
 *   the group's captured loop against its kernels issued one by one, over proportional buffers
 *   (priorities fed back): bit-identical after 30 updates in launches of 1, 12 and 17.
 * Skipped (77) without a GPU. */
#include "helpers.h"
#include "vixen/cuda_util.h"
#include "vixen/device.h"
#include "vixen/dqn.h"
#include "vixen/philox.h"
#include "dqn/learner_cuda.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)

/* The sampled test's buffers (-DSAMPLED_KIND=VX_REPLAY_UNIFORM for uniform ones). Open: under
 * any compute-sanitizer tool the sampled test fails with a CUDA error that no tool traces to a
 * kernel (at full speed, and with CUDA_LAUNCH_BLOCKING=1, it passes); learners alone over the
 * same buffers are clean. Probed 2026-12-04 under memcheck: it fails as well with the group's
 * updates eager (no graph); it passes with the members' replay work on the group's own stream
 * instead of side streams, and with a device synchronisation after each of the group's
 * launches — so it needs the members' replay kernels running side by side, but no access is
 * ever reported out of bounds. */
#ifndef SAMPLED_KIND
#define SAMPLED_KIND VX_REPLAY_PROPORTIONAL
#endif
enum { K = 3, B = 64, D = VX_OBS_DIM, A = VX_ACTION_BRANCHES };

static vx_device *g_dev;

static void *dup_dev(const void *h, size_t n)
{
    void *d;
    CK(cudaMalloc(&d, n));
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    /* a cudaMemcpy from pageable memory can return before its DMA lands; the work that reads
     * this may be queued on a non-blocking stream, which does not wait for it */
    CK(cudaDeviceSynchronize());
    return d;
}

static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The members' settings: every per-member setting different. */
static void member_cfgs(int loss, vx_dqn_cfg *c)
{
    const double gamma[K] = {0.99, 0.5, 0.9}, kappa[K] = {1, 0.25, 4}, tau[K] = {0, 0.05, 0};
    const int every[K] = {2, 1000, 3};
    const double clip[K] = {0.5, 0, 10}, lr[K] = {1e-3, 3e-4, 1e-4}, wd[K] = {0, 0.01, 0};
    for (int k = 0; k < K; k++) {
        vx_dqn_cfg_default(&c[k]);
        c[k].loss = loss, c[k].batch = B;
        c[k].atoms = loss == VX_LOSS_C51 ? 21 : 1, c[k].v_min = -5, c[k].v_max = 5;
        c[k].gamma = gamma[k], c[k].huber_kappa = kappa[k], c[k].tau = tau[k];
        c[k].target_every = every[k], c[k].grad_clip = clip[k];
        c[k].adam.lr = lr[k], c[k].adam.weight_decay = wd[k];
    }
}

/* n random transitions (device memory), seeded. */
static vx_transitions transitions(size_t n, uint64_t seed)
{
    float *o = malloc(n * D * 4), *x = malloc(n * D * 4), *r = malloc(n * 4);
    int32_t *a = malloc(n * A * 4);
    uint8_t *te = malloc(n), *tu = malloc(n), *sp = malloc(n);
    vx_rng g = vx_rng_make(seed, 0, 0);
    for (size_t i = 0; i < n * D; i++)
        o[i] = (float)vx_rng_normal(&g), x[i] = (float)vx_rng_normal(&g);
    for (size_t i = 0; i < n; i++) {
        r[i] = (float)vx_rng_normal(&g);
        a[i * A] = (int32_t)vx_rng_below(&g, 9), a[i * A + 1] = (int32_t)vx_rng_below(&g, 3);
        a[i * A + 2] = (int32_t)vx_rng_below(&g, 3);
        te[i] = i % 11 == 0, tu[i] = i % 7 == 0, sp[i] = (uint8_t)(1 + i % 3);
    }
    vx_transitions t = {dup_dev(o, n * D * 4), dup_dev(x, n * D * 4), dup_dev(a, n * A * 4),
                        dup_dev(r, n * 4),     dup_dev(te, n),        dup_dev(tu, n),
                        dup_dev(sp, n)};
    free(o), free(x), free(r), free(a), free(te), free(tu), free(sp);
    return t;
}

static void transitions_free(vx_transitions *t)
{
    cudaFree((void *)t->obs), cudaFree((void *)t->next_obs), cudaFree((void *)t->actions);
    cudaFree((void *)t->rewards), cudaFree((void *)t->terminated), cudaFree((void *)t->truncated);
    cudaFree((void *)t->steps);
}

/* A fixed batch of B from transitions t, with importance weights in (0.2, 1]. */
static vx_replay_batch batch_of(const vx_transitions *t, uint64_t seed)
{
    float w[B];
    vx_rng g = vx_rng_make(seed, 1, 0);
    for (int i = 0; i < B; i++) w[i] = 0.2f + 0.8f * vx_rng_uniform(&g);
    vx_replay_batch b = {(float *)t->obs,
                         (float *)t->next_obs,
                         (int32_t *)t->actions,
                         (float *)t->rewards,
                         (uint8_t *)t->terminated,
                         (uint8_t *)t->truncated,
                         (uint8_t *)t->steps,
                         dup_dev(w, sizeof w),
                         NULL,
                         NULL};
    return b;
}

/* The starting weights: member k's from seed 20 + k, at the group's stride. */
static float *start_weights(const vx_qnet_layout *L, size_t stride)
{
    float *p = calloc(K * stride, 4);
    for (int k = 0; k < K; k++) vx_qnet_init(L, 20 + (uint64_t)k, p + k * stride);
    return p;
}

/* A case: the members' settings, their network's layout and loss shape, the group's stride and
 * the members' starting weights (the caller frees them). */
static float *member_case(int loss, vx_dqn_cfg *c, vx_qnet_layout *L, vx_loss_shape *shape,
                          size_t *stride)
{
    member_cfgs(loss, c);
    vx_qnet_cfg qc;
    vx_qnet_cfg_default(&qc);
    vx_err e;
    assert_int_equal(vx_dqn_layout(&c[0], &qc, L, shape, &e), VX_OK);
    *stride = dqn_learner_stride_for(L, B, K);
    return start_weights(L, *stride);
}

typedef struct {
    float *online, *target, *m, *v, *prio;
    int64_t t[K];
    dqn_learner_acc acc[K];
} seen;

/* The learner's state, its statistics since the last read and (when given) its priorities. */
static void look(dqn_learner *d, const float *d_prio, cudaStream_t s, seen *out)
{
    vx_err e;
    size_t n = (size_t)dqn_learner_members(d) * dqn_learner_stride(d);
    out->online = malloc(n * 4), out->target = malloc(n * 4), out->m = malloc(n * 4);
    out->v = malloc(n * 4), out->prio = malloc((size_t)dqn_learner_members(d) * B * 4);
    assert_int_equal(dqn_learner_stats_fetch(d, &e), VX_OK);
    assert_int_equal(
        dqn_learner_copy_state(d, out->online, out->target, out->m, out->v, out->t, &e), VX_OK);
    if (d_prio)
        CK(cudaMemcpyAsync(out->prio, d_prio, (size_t)dqn_learner_members(d) * B * 4,
                           cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    assert_int_equal(dqn_learner_stats_read(d, out->acc, &e), VX_OK);
}

static void seen_free(seen *s)
{
    free(s->online), free(s->target), free(s->m), free(s->v), free(s->prio);
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

/* Member k of group g against learner one (a group of one); returns the worst relative error. */
static double compare(const seen *g, int k, size_t stride, const seen *one, size_t np,
                      int with_prio, const char *what)
{
    size_t at = (size_t)k * stride;
    double ew = rel_l2(g->online + at, one->online, np),
           et = rel_l2(g->target + at, one->target, np);
    double em = rel_l2(g->m + at, one->m, np), ev = rel_l2(g->v + at, one->v, np);
    double ep = with_prio ? rel_l2(g->prio + (size_t)k * B, one->prio, B) : 0;
    double el = rel(g->acc[k].loss, one->acc[0].loss);
    double en = rel(g->acc[k].grad_norm, one->acc[0].grad_norm);
    double worst = fmax(fmax(fmax(ew, et), fmax(em, ev)), fmax(ep, fmax(el, en)));
    printf(
        "%s member %d: weights %.1e, target %.1e, moments %.1e %.1e, priorities %.1e, loss %.1e, "
        "norm %.1e\n",
        what, k, ew, et, em, ev, ep, el, en);
    assert_int_equal(g->t[k], one->t[0]);
    assert_int_equal(g->acc[k].n, one->acc[0].n);
    return worst;
}

static void fixed_batches(int loss)
{
    vx_dqn_cfg c[K];
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_err e;
    size_t stride;
    float *p = member_case(loss, c, &L, &shape, &stride);
    size_t np = L.n_params;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    vx_transitions t[K];
    vx_replay_batch b[K];
    for (int k = 0; k < K; k++)
        t[k] = transitions(B, 40 + (uint64_t)k), b[k] = batch_of(&t[k], 50 + k);
    dqn_learner *grp, *one[K], *wrong;
    vx_status st = dqn_learner_create_group(c, K, &L, &shape, p, NULL, g_dev, s, &grp, &e);
    if (st) fail_msg("group: %s", e.msg);
    assert_int_equal(dqn_learner_stride(grp), stride);
    for (int k = 0; k < K; k++)
        assert_int_equal(
            dqn_learner_create(&c[k], &L, &shape, p + k * stride, NULL, g_dev, s, &one[k], &e),
            VX_OK);
    /* member 1's weights and data under member 0's settings: what a group that gave every member
     * member 0's settings would compute for member 1 */
    assert_int_equal(dqn_learner_create(&c[0], &L, &shape, p + stride, NULL, g_dev, s, &wrong, &e),
                     VX_OK);
    float *gp, *op[K], *wp;
    CK(cudaMalloc((void **)&gp, K * B * 4));
    CK(cudaMalloc((void **)&wp, B * 4));
    for (int k = 0; k < K; k++) CK(cudaMalloc((void **)&op[k], B * 4));
    double worst = 0, power = INFINITY;
    const char *name = loss == VX_LOSS_C51 ? "C51" : "Huber";
    for (int u = 0; u < 4; u++) {
        st = dqn_learner_update_batch(grp, b, gp, &e);
        if (st) fail_msg("group update %d: %s", u, e.msg);
        for (int k = 0; k < K; k++)
            assert_int_equal(dqn_learner_update_batch(one[k], &b[k], op[k], &e), VX_OK);
        assert_int_equal(dqn_learner_update_batch(wrong, &b[1], wp, &e), VX_OK);
        seen sg, so, sw;
        look(grp, gp, s, &sg);
        look(wrong, wp, s, &sw);
        power = fmin(power, rel_l2(sg.prio + B, sw.prio, B));
        for (int k = 0; k < K; k++) {
            look(one[k], op[k], s, &so);
            char what[64];
            snprintf(what, sizeof what, "%s, fixed batch, update %d,", name, u + 1);
            worst = fmax(worst, compare(&sg, k, stride, &so, np, 1, what));
            seen_free(&so);
        }
        /* the hard copies: member 0's target is its online after updates 2 and 4, member 2's
         * after update 3 */
        if (u == 1 || u == 3) assert_memory_equal(sg.target, sg.online, np * 4);
        if (u == 2) assert_memory_equal(sg.target + 2 * stride, sg.online + 2 * stride, np * 4);
        seen_free(&sg), seen_free(&sw);
    }
    printf("%s, fixed batches: worst member error %.1e (bound 1e-5); member 1 under member 0's "
           "settings misses its priorities by %.1e\n",
           name, worst, power);
    assert_true(worst < 1e-5);
    assert_true(power > 1e-3);
    dqn_learner_free(grp), dqn_learner_free(wrong);
    for (int k = 0; k < K; k++) {
        dqn_learner_free(one[k]);
        cudaFree(op[k]), cudaFree(b[k].weights);
        transitions_free(&t[k]);
    }
    cudaFree(gp), cudaFree(wp);
    cudaStreamDestroy(s);
    free(p);
}

static void test_fixed_batches_huber(void **state)
{
    (void)state;
    fixed_batches(VX_LOSS_HUBER);
}

static void test_fixed_batches_c51(void **state)
{
    (void)state;
    fixed_batches(VX_LOSS_C51);
}

/* K buffers of `kind`, member k's filled with its own 4,096 transitions. */
static void buffers(vx_replay_kind kind, vx_replay **r, cudaStream_t s)
{
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, kind, 8192);
    vx_err e;
    for (int k = 0; k < K; k++) {
        rc.seed = 60 + (uint64_t)k;
        assert_int_equal(vx_replay_create(&rc, g_dev, &r[k], &e), VX_OK);
        vx_transitions t = transitions(4096, 70 + (uint64_t)k);
        assert_int_equal(vx_replay_insert(r[k], &t, 4096, s, &e), VX_OK);
        CK(cudaStreamSynchronize(s));
        transitions_free(&t);
    }
}

/* Sampled: the group and its members' own learners, each over its own buffer (the same draws
 * while the priorities agree), 30 updates as captured loops (launches of 10). */
static void test_sampled_matches_members(void **state)
{
    (void)state;
    vx_dqn_cfg c[K];
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_err e;
    size_t stride;
    float *p = member_case(VX_LOSS_HUBER, c, &L, &shape, &stride);
    size_t np = L.n_params;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    vx_replay *rg[K], *ro[K];
    buffers(SAMPLED_KIND, rg, s);
    buffers(SAMPLED_KIND, ro, s);
    dqn_learner *grp, *one[K];
    assert_int_equal(dqn_learner_create_group(c, K, &L, &shape, p, rg, g_dev, s, &grp, &e), VX_OK);
    for (int k = 0; k < K; k++)
        assert_int_equal(
            dqn_learner_create(&c[k], &L, &shape, p + k * stride, ro[k], g_dev, s, &one[k], &e),
            VX_OK);
    for (int r = 0; r < 3; r++) {
        vx_status st = dqn_learner_update_n(grp, 10, &e);
        if (st) fail_msg("group launch %d: %s", r, e.msg);
        for (int k = 0; k < K; k++) assert_int_equal(dqn_learner_update_n(one[k], 10, &e), VX_OK);
    }
    assert_int_equal(dqn_learner_updates(grp), 30);
    seen sg, so;
    look(grp, NULL, s, &sg);
    double worst = 0;
    for (int k = 0; k < K; k++) {
        look(one[k], NULL, s, &so);
        worst = fmax(worst, compare(&sg, k, stride, &so, np, 0, "sampled, 30 updates,"));
        seen_free(&so);
    }
    printf("sampled, 30 updates: worst member error %.1e (bound 1e-5)\n", worst);
    assert_true(worst < 1e-5);
    seen_free(&sg);
    dqn_learner_free(grp);
    for (int k = 0; k < K; k++)
        dqn_learner_free(one[k]), vx_replay_free(rg[k]), vx_replay_free(ro[k]);
    cudaStreamDestroy(s);
    free(p);
}

/* The group's loop graph against its kernels one by one, over proportional buffers. */
static void test_group_graph_equals_eager(void **state)
{
    (void)state;
    vx_dqn_cfg c[K];
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_err e;
    size_t stride;
    float *p = member_case(VX_LOSS_HUBER, c, &L, &shape, &stride);
    c[0].target_every = 5, c[2].target_every = 7; /* copies inside the launches */
    cudaStream_t s1, s2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    vx_replay *r1[K], *r2[K];
    buffers(VX_REPLAY_PROPORTIONAL, r1, s1);
    buffers(VX_REPLAY_PROPORTIONAL, r2, s2);
    dqn_learner *g1, *g2;
    assert_int_equal(dqn_learner_create_group(c, K, &L, &shape, p, r1, g_dev, s1, &g1, &e), VX_OK);
    assert_int_equal(dqn_learner_create_group(c, K, &L, &shape, p, r2, g_dev, s2, &g2, &e), VX_OK);
    const int runs[] = {1, 12, 17};
    for (int r = 0; r < 3; r++) {
        vx_status st = dqn_learner_update_n(g1, runs[r], &e);
        if (st) fail_msg("graph launch %d: %s", r, e.msg);
    }
    for (int u = 0; u < 30; u++) assert_int_equal(dqn_learner_update(g2, 1, &e), VX_OK);
    seen a, b;
    look(g1, NULL, s1, &a);
    look(g2, NULL, s2, &b);
    size_t n = K * stride;
    assert_memory_equal(a.online, b.online, n * 4);
    assert_memory_equal(a.target, b.target, n * 4);
    assert_memory_equal(a.m, b.m, n * 4);
    for (int k = 0; k < K; k++) {
        /* the loop's tail adds the statistics there: every update's, the same sums */
        assert_int_equal(a.acc[k].n, 30);
        assert_int_equal(b.acc[k].n, 30);
        assert_true(a.acc[k].loss == b.acc[k].loss && a.acc[k].grad_norm == b.acc[k].grad_norm);
        assert_true(a.acc[k].q_mean == b.acc[k].q_mean && a.acc[k].q_max == b.acc[k].q_max);
        assert_true(memcmp(a.online + k * stride, p + k * stride, L.n_params * 4) != 0);
        vx_replay_stats x, y;
        assert_int_equal(vx_replay_stats_get(r1[k], &x, NULL, &e), VX_OK);
        assert_int_equal(vx_replay_stats_get(r2[k], &y, NULL, &e), VX_OK);
        assert_true(x.total == y.total && x.max_priority == y.max_priority);
    }
    printf("group of %d, 30 updates, graph (launches of 1, 12, 17) vs eager: weights, targets, "
           "moments, statistics and replay totals bit-identical\n",
           K);
    seen_free(&a), seen_free(&b);
    dqn_learner_free(g1), dqn_learner_free(g2);
    for (int k = 0; k < K; k++) vx_replay_free(r1[k]), vx_replay_free(r2[k]);
    cudaStreamDestroy(s1), cudaStreamDestroy(s2);
    free(p);
}

/* Members that must share a setting and do not: refused, naming the key. */
static void test_group_refuses_mixed_shapes(void **state)
{
    (void)state;
    vx_dqn_cfg c[K];
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_err e;
    size_t stride;
    float *p = member_case(VX_LOSS_HUBER, c, &L, &shape, &stride);
    c[2].batch = 32;
    dqn_learner *d = NULL;
    assert_int_equal(dqn_learner_create_group(c, K, &L, &shape, p, NULL, g_dev, NULL, &d, &e),
                     VX_ERR_ARG);
    assert_null(d);
    assert_non_null(strstr(e.msg, "dqn.batch"));
    assert_non_null(strstr(e.msg, "members 0 and 2"));
    free(p);
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
        printf("%s\n", e.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_batches_huber),
        cmocka_unit_test(test_fixed_batches_c51),
        cmocka_unit_test(test_sampled_matches_members),
        cmocka_unit_test(test_group_graph_equals_eager),
        cmocka_unit_test(test_group_refuses_mixed_shapes),
    };
    const char *only = getenv("VX_TEST_FILTER"); /* cmocka's filter: `*` wildcards */
    if (only && *only) cmocka_set_test_filter(only);
    int failed = cmocka_run_group_tests_name("dqn_group_cuda", tests, NULL, NULL);
    vx_device_close(g_dev);
    return failed;
}

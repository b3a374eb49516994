/* test_group_seam.c — the group's side of fused trials (src/train/group.c) against a stub
 * algorithm whose group calls record what they were given.
 *
 * On the CPU the real algorithms compute a group's members exactly as alone, so a group that
 * stepped a member it should not, lost a failure or planned a member for the wrong memory would
 * still give every run its own results (test_group.c). The stub makes those visible:
 *   - epoch_group sees exactly the members still in the group, each with its own epoch number,
 *     and each run gets back its own member's results; a member that retired is never stepped
 *     again, though its instance lives until it leaves;
 *   - a failed group epoch reaches every member still in it, with its reason, and
 *     vx_train_group_failed tells which runs it reached;
 *   - a run of another algorithm, or of one without groups, is refused and the others train;
 *   - each member is created with the memory it would plan for alone (its own device's room, or
 *     its part of a given budget), on one share holding what they had together; the group's peak
 *     is divided among its members. */
#include "helpers.h"
#include "train/group.h"
#include "vixen/algo.h"
#include "vixen/train.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_K 4
#define MAX_ROUNDS 8
#define KIB ((size_t)1024)

/* ---- the stub algorithm: its instance is its run's seed and a block on its device ------------ */

typedef struct {
    struct vx_algo base;
    int id; /* the run's seed */
    int epochs;
    vx_mem mem;
} stub;

/* What the stub was called with. Its group calls run under the group's mutex, so one record. */
static struct {
    int creates, made, freed;
    size_t mem_share[MAX_K]; /* by id */
    vx_device *dev[MAX_K];   /* by id */
    size_t share_room;       /* what the group's share had left before the first member's block */
    int rounds, fail_round;
    int present[MAX_ROUNDS][MAX_K]; /* by place in the group */
    int wrong_epoch;                /* a member stepped with an epoch number not its next */
} rec;

static void rec_reset(int fail_round)
{
    memset(&rec, 0, sizeof rec);
    rec.fail_round = fail_round;
}

/* Member id's block: (id + 1) × 64 KiB, so the peak says whose blocks were held together. */
static size_t block_of(int id) { return (size_t)(id + 1) * 64 * KIB; }

static vx_status stub_create_group(const vx_algo_init *in, int K, vx_algo **out, vx_err *e);

static void stub_free(vx_algo *a)
{
    stub *s = (stub *)a;
    vx_mem_release(&s->mem);
    free(s);
    rec.freed++;
}

static vx_status stub_epoch_group(vx_algo *const *a, int K, const vx_epoch_in *in,
                                  vx_epoch_out *out, vx_err *e)
{
    int r = rec.rounds++;
    if (r == rec.fail_round) return vx_err_set(e, VX_ERR_IO, "stub: round %d fails", r);
    for (int k = 0; k < K; k++) {
        if (r < MAX_ROUNDS) rec.present[r][k] = a[k] != NULL;
        if (!a[k]) continue;
        stub *s = (stub *)a[k];
        if (in[k].epoch != s->epochs) rec.wrong_epoch++;
        s->epochs++;
        out[k].metric[0] = s->id * 100 + in[k].epoch;
        out[k].env_steps = s->epochs;
    }
    return VX_OK;
}

static const char *const no_keys[] = {NULL};

static const vx_algo_ops stub_ops = {
    .name = "stub",
    .free = stub_free,
    .member_keys = no_keys,
    .create_group = stub_create_group,
    .epoch_group = stub_epoch_group,
};
/* the same functions under another name: another algorithm to the group */
static const vx_algo_ops other_ops = {
    .name = "other",
    .free = stub_free,
    .member_keys = no_keys,
    .create_group = stub_create_group,
    .epoch_group = stub_epoch_group,
};
static const vx_algo_ops lone_ops = {.name = "lone", .free = stub_free}; /* no groups */

static vx_status stub_create_group(const vx_algo_init *in, int K, vx_algo **out, vx_err *e)
{
    rec.creates++;
    if (K > 0 && in[0].dev) rec.share_room = vx_device_available(in[0].dev);
    for (int i = 0; i < K; i++) {
        stub *s = calloc(1, sizeof *s);
        if (!s) return vx_err_set(e, VX_ERR_NOMEM, "stub: out of memory");
        s->base.ops = &stub_ops;
        s->id = (int)in[i].run->seed;
        vx_mem_init(&s->mem, in[i].dev, "stub");
        void *p;
        vx_status st = vx_mem_alloc(&s->mem, block_of(s->id), &p, e);
        if (st) {
            free(s);
            return st;
        }
        rec.mem_share[s->id] = in[i].mem_share;
        rec.dev[s->id] = in[i].dev;
        out[i] = &s->base;
        rec.made++;
    }
    return VX_OK;
}

/* ---- a member's run: join, ask for its epochs, retire, leave ----------------------------------
 */

typedef struct {
    vx_train_group *g;
    int k, id;
    const vx_algo_ops *ops;
    vx_device *dev; /* its own device (NULL: none) */
    int epochs;     /* epochs it asks for */
    int hold;       /* 1: between retiring and leaving, wait for the test's release */
    int no_err;     /* 1: its run asks for no error text (NULL) */
    vx_status join_st, epoch_st;
    vx_err err;
    int done;
    double got[MAX_ROUNDS];
    int64_t steps[MAX_ROUNDS];
} member;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void gate_set(int open)
{
    pthread_mutex_lock(&gate.mu);
    gate.open = open;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
}

static void *member_run(void *arg)
{
    member *m = arg;
    vx_run_params run = {
        .envs = 1, .steps_per_epoch = 1, .epochs = m->epochs, .seed = (uint64_t)m->id};
    vx_algo_init in = {.run = &run, .dev = m->dev};
    vx_algo *a;
    m->join_st = vx_train_group_join(m->g, m->k, m->ops, &in, &a, &m->err);
    for (int i = 0; !m->join_st && i < m->epochs; i++) {
        vx_epoch_in ei = {.epoch = i};
        vx_epoch_out eo = {0};
        m->epoch_st = vx_train_group_epoch(m->g, m->k, &ei, &eo, m->no_err ? NULL : &m->err);
        if (m->epoch_st) break;
        m->got[i] = eo.metric[0];
        m->steps[i] = eo.env_steps;
        m->done++;
    }
    vx_train_group_retire(m->g, m->k);
    pthread_mutex_lock(&gate.mu);
    while (m->hold && !gate.open) pthread_cond_wait(&gate.cv, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
    vx_train_group_leave(m->g, m->k);
    return NULL;
}

static void start(member *m, pthread_t *t)
{
    if (pthread_create(t, NULL, member_run, m)) fail_msg("pthread_create");
}

/* Member k's epochs gave member k's results: its id, its epoch, its count of epochs. */
static void assert_own_results(const member *m)
{
    for (int i = 0; i < m->done; i++) {
        if (m->got[i] != m->id * 100 + i || m->steps[i] != i + 1)
            fail_msg("member %d's epoch %d got %.0f (%lld steps), not its own %d (%d)", m->k, i,
                     m->got[i], (long long)m->steps[i], m->id * 100 + i, i + 1);
    }
}

/* ---- tests ------------------------------------------------------------------------------------
 */

static void test_epochs_reach_exactly_the_members_in(void **state)
{
    (void)state;
    rec_reset(-1);
    vx_train_group *g;
    vx_err e;
    if (vx_train_group_create(3, NULL, 0, "seam", &g, &e)) fail_msg("%s", e.msg);
    /* member 1 retires after one epoch but leaves only when the others are done: its instance is
     * still there while they train, and must not be stepped */
    member m[3] = {
        {.g = g, .k = 0, .id = 2, .ops = &stub_ops, .epochs = 4},
        {.g = g, .k = 1, .id = 0, .ops = &stub_ops, .epochs = 1, .hold = 1},
        {.g = g, .k = 2, .id = 1, .ops = &stub_ops, .epochs = 4},
    };
    pthread_t t[3];
    gate_set(0);
    for (int k = 0; k < 3; k++) start(&m[k], &t[k]);
    pthread_join(t[0], NULL);
    pthread_join(t[2], NULL);
    assert_int_equal(rec.freed, 2); /* the held member's instance is still there */
    gate_set(1);
    pthread_join(t[1], NULL);
    for (int k = 0; k < 3; k++) {
        if (m[k].join_st || m[k].epoch_st) fail_msg("member %d: %s", k, m[k].err.msg);
        assert_int_equal(m[k].done, m[k].epochs);
        assert_own_results(&m[k]);
    }
    assert_int_equal(rec.creates, 1);
    assert_int_equal(rec.made, 3);
    assert_int_equal(rec.rounds, 4);
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 3; k++)
            if (rec.present[r][k] != (k != 1 || r == 0))
                fail_msg("round %d: member %d %s", r, k,
                         rec.present[r][k] ? "stepped after it retired" : "not stepped");
    assert_int_equal(rec.wrong_epoch, 0);
    assert_int_equal(rec.freed, 3);
    assert_int_equal(vx_train_group_failed(g, -1, NULL), 0);
    vx_train_group_free(g);
}

static void test_failed_epoch_reaches_the_members_in(void **state)
{
    (void)state;
    rec_reset(1); /* the group's second epoch fails */
    vx_train_group *g;
    vx_err e;
    if (vx_train_group_create(3, NULL, 0, "seam", &g, &e)) fail_msg("%s", e.msg);
    /* member 2 ends after the first epoch: the failure never reaches it. Member 1 asks for no
     * error text: the failure reaches it all the same. */
    member m[3] = {
        {.g = g, .k = 0, .id = 0, .ops = &stub_ops, .epochs = 3},
        {.g = g, .k = 1, .id = 1, .ops = &stub_ops, .epochs = 3, .no_err = 1},
        {.g = g, .k = 2, .id = 2, .ops = &stub_ops, .epochs = 1},
    };
    pthread_t t[3];
    gate_set(1);
    for (int k = 0; k < 3; k++) start(&m[k], &t[k]);
    for (int k = 0; k < 3; k++) pthread_join(t[k], NULL);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(m[k].join_st, VX_OK);
        assert_int_equal(m[k].done, 1);
        assert_int_equal(m[k].epoch_st, VX_ERR_IO);
        if (!m[k].no_err && !strstr(m[k].err.msg, "stub: round 1 fails"))
            fail_msg("member %d was told \"%s\"", k, m[k].err.msg);
        vx_err why;
        memset(&why, 0, sizeof why);
        assert_int_equal(vx_train_group_failed(g, k, &why), 1);
        assert_int_equal(why.status, VX_ERR_IO);
        assert_non_null(strstr(why.msg, "stub: round 1 fails"));
    }
    assert_int_equal(m[2].epoch_st, VX_OK);
    assert_int_equal(m[2].done, 1);
    assert_int_equal(vx_train_group_failed(g, 2, NULL), 0); /* it had left */
    assert_int_equal(vx_train_group_failed(g, -1, NULL), 1);
    assert_int_equal(rec.rounds, 2); /* no epoch after the failure */
    assert_int_equal(rec.freed, 3);
    vx_train_group_free(g);
}

/* Runs of another algorithm, or of one that trains no groups, are refused; the rest train. The
 * first to join decides the group's algorithm, so either the stub's runs or the other one may be
 * refused; each refusal names both algorithms. */
static void test_other_algorithms_are_refused(void **state)
{
    (void)state;
    rec_reset(-1);
    vx_train_group *g;
    vx_err e;
    /* on a share (a budget): it closes, its peak kept, only once every member has gone, those
     * refused included */
    if (vx_train_group_create(4, NULL, 4096 * KIB, "seam", &g, &e)) fail_msg("%s", e.msg);
    member m[4] = {
        {.g = g, .k = 0, .id = 0, .ops = &stub_ops, .epochs = 2},
        {.g = g, .k = 1, .id = 1, .ops = &other_ops, .epochs = 2},
        {.g = g, .k = 2, .id = 2, .ops = &stub_ops, .epochs = 2},
        {.g = g, .k = 3, .id = 3, .ops = &lone_ops, .epochs = 2},
    };
    pthread_t t[4];
    gate_set(1);
    for (int k = 0; k < 4; k++) start(&m[k], &t[k]);
    for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
    /* the lone run: refused for training no groups, or for not being the group's algorithm
     * when another joined first */
    if (!(m[3].join_st == VX_ERR_UNSUPPORTED && strstr(m[3].err.msg, "lone trains no groups")) &&
        !(m[3].join_st == VX_ERR_ARG && strstr(m[3].err.msg, "trains lone in a group of")))
        fail_msg("the lone run: status %d, \"%s\"", (int)m[3].join_st, m[3].err.msg);
    int joined = 0;
    const vx_algo_ops *group_ops = NULL;
    for (int k = 0; k < 3; k++) {
        if (m[k].join_st == VX_OK) {
            if (group_ops && group_ops != m[k].ops) fail_msg("two algorithms in one group");
            group_ops = m[k].ops;
            joined++;
            assert_int_equal(m[k].done, 2);
            assert_own_results(&m[k]);
            continue;
        }
        assert_int_equal(m[k].join_st, VX_ERR_ARG);
        char want[80];
        snprintf(want, sizeof want, "trains %s in a group of %s", m[k].ops->name,
                 m[k].ops == &stub_ops ? "other" : "stub");
        if (!strstr(m[k].err.msg, want)) fail_msg("member %d was told \"%s\"", k, m[k].err.msg);
    }
    assert_true(joined == 2 ? group_ops == &stub_ops : joined == 1 && group_ops == &other_ops);
    assert_int_equal(rec.creates, 1);
    assert_int_equal(rec.made, joined);
    assert_int_equal(rec.rounds, 2);
    assert_int_equal(rec.freed, joined);
    size_t held = 0; /* the joined members' blocks, all held at once */
    for (int k = 0; k < 3; k++) held += m[k].join_st == VX_OK ? block_of(m[k].id) : 0;
    assert_int_equal(vx_train_group_peak(g), held / 4);
    vx_train_group_free(g);
}

/* Each member planned for what it had alone; the share holds what they had together. */
static void run_on_shares(size_t budget, const size_t *own, const size_t *want_share,
                          size_t want_room)
{
    rec_reset(-1);
    vx_device *dev[3] = {NULL, NULL, NULL};
    vx_err e;
    for (int k = 0; k < 3; k++)
        if (own[k] && vx_device_share(NULL, own[k], "member", &dev[k], &e)) fail_msg("%s", e.msg);
    vx_train_group *g;
    if (vx_train_group_create(3, NULL, budget, "seam", &g, &e)) fail_msg("%s", e.msg);
    member m[3];
    pthread_t t[3];
    gate_set(1);
    for (int k = 0; k < 3; k++) {
        m[k] = (member){.g = g, .k = k, .id = 2 - k, .ops = &stub_ops, .dev = dev[k], .epochs = 1};
        start(&m[k], &t[k]);
    }
    for (int k = 0; k < 3; k++) pthread_join(t[k], NULL);
    for (int k = 0; k < 3; k++) {
        if (m[k].join_st || m[k].epoch_st) fail_msg("member %d: %s", k, m[k].err.msg);
        int id = m[k].id;
        if (rec.mem_share[id] != want_share[k])
            fail_msg("member %d planned for %zu B, not %zu", k, rec.mem_share[id], want_share[k]);
        assert_non_null(rec.dev[id]);
        assert_ptr_equal(rec.dev[id], rec.dev[m[0].id]); /* one share */
        assert_ptr_not_equal(rec.dev[id], dev[k]);
    }
    assert_int_equal(rec.share_room, want_room);
    /* every block was held at once: the peak is their sum, a third of it each */
    size_t sum = block_of(0) + block_of(1) + block_of(2);
    assert_int_equal(vx_train_group_peak(g), sum / 3);
    vx_train_group_free(g);
    for (int k = 0; k < 3; k++) vx_device_close(dev[k]);
}

static void test_members_plan_for_what_they_had_alone(void **state)
{
    (void)state;
    /* no budget given: each its own device's room, the share their sum */
    size_t own[3] = {512 * KIB, 1536 * KIB, 1024 * KIB};
    run_on_shares(0, own, own, 3072 * KIB);
    /* a budget: a third each, whatever the members' own devices */
    size_t third[3] = {1024 * KIB, 1024 * KIB, 1024 * KIB};
    run_on_shares(3072 * KIB, own, third, 3072 * KIB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epochs_reach_exactly_the_members_in),
        cmocka_unit_test(test_failed_epoch_reaches_the_members_in),
        cmocka_unit_test(test_other_algorithms_are_refused),
        cmocka_unit_test(test_members_plan_for_what_they_had_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_group.c — fused trials in the train layer (train.h: vx_train_group), on the CPU, where a
 * group's members run one after another (the reference a fusing backend is held to).
 *
 * - Which settings keep two runs out of one group: a shape key, a key of the run itself, an
 *   algorithm without groups.
 * - Three runs with different learning rates, discounts and seeds trained as one group, one of
 *   them stopped after its second epoch, give each exactly what it gives alone: the same metrics
 *   and the same best weights, bit for bit. A group that handed a member another's results, ran
 *   an epoch twice or skipped one, or kept stepping a member that left, fails it.
 * - A member whose run fails before it joins (its folder cannot be made) or is refused before it
 *   starts (it would checkpoint) does not hold the others: they train, and give what they give
 *   alone; the failure names the folder or the key.
 * - A group whose creation fails tells every member, and vx_train_group_failed says why.
 * - A member gets no memory it would not have had alone: at a trial's budget that holds its
 *   algorithm but not its environments too, it is refused alone and refused in a group (whose
 *   share pools what the members had left, not K trials' budgets). Members on shares of
 *   different sizes pool the sum of what each had left: refused just short of it, trained just
 *   over it. */
#include "helpers.h"
#include "vixen/dqn.h"
#include "vixen/io.h"
#include "vixen/train.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *tiny_keys[][2] = {
    {"data.synth_days", "12"},       {"env.episode_len", "60"},   {"train.envs", "16"},
    {"train.steps_per_epoch", "40"}, {"dqn.batch", "32"},         {"dqn.trunk", "32,32"},
    {"dqn.head_hidden", "16"},       {"dqn.warmup", "200"},       {"train.eval_every", "1"},
    {"train.epochs", "4"},           {"replay.capacity", "4000"}, {"train.checkpoint_every", "0"},
    {"train.final_test", "0"},       {"train.device", "cpu"},
};

static void tiny(vx_train_cfg *c, const char *dir, const char *lr, const char *gamma,
                 const char *seed)
{
    vx_train_cfg_default(c);
    vx_err e;
    for (size_t i = 0; i < sizeof tiny_keys / sizeof *tiny_keys; i++)
        if (vx_train_cfg_set(c, tiny_keys[i][0], tiny_keys[i][1], "test", &e))
            fail_msg("%s", e.msg);
    if (vx_train_cfg_set(c, "dqn.lr", lr, "test", &e) ||
        vx_train_cfg_set(c, "dqn.gamma", gamma, "test", &e) ||
        vx_train_cfg_set(c, "train.seed", seed, "test", &e))
        fail_msg("%s", e.msg);
    snprintf(c->run_dir, sizeof c->run_dir, "%s", dir);
}

static void set(vx_train_cfg *c, const char *key, const char *value)
{
    vx_err e;
    if (vx_train_cfg_set(c, key, value, "test", &e)) fail_msg("%s", e.msg);
}

static void test_group_keys(void **state)
{
    (void)state;
    vx_train_cfg *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    char key[160];
    tiny(a, "a", "1e-3", "0.99", "1");
    tiny(b, "b", "3e-4", "0.9", "7"); /* member keys and the run's own */
    set(b, "train.patience", "3");
    set(b, "replay.alpha", "0.5");
    vx_train_group_key(a, b, key, sizeof key);
    assert_string_equal(key, "");
    vx_dqn_settings *q = vx_train_algo_settings(b, "dqn");
    q->batch_set = 0; /* the same batch, but left for a GPU to choose: not the same setting */
    vx_train_group_key(a, b, key, sizeof key);
    assert_string_equal(key, "dqn.batch");
    q->batch_set = 1;
    set(b, "dqn.n_step", "3"); /* the rollout's transitions: the group's */
    vx_train_group_key(a, b, key, sizeof key);
    assert_string_equal(key, "dqn.n_step");
    tiny(b, "b", "1e-3", "0.99", "1");
    set(b, "dqn.trunk", "32,16"); /* a shape */
    vx_train_group_key(a, b, key, sizeof key);
    assert_string_equal(key, "dqn.trunk");
    tiny(b, "b", "1e-3", "0.99", "1");
    set(b, "replay.capacity", "3000"); /* the last section's keys count too */
    vx_train_group_key(a, b, key, sizeof key);
    assert_string_equal(key, "replay.capacity");
    tiny(b, "b", "1e-3", "0.99", "1");
    set(b, "train.envs", "8");
    vx_train_group_key(a, b, key, sizeof key);
    assert_string_equal(key, "train.envs");
    tiny(b, "b", "1e-3", "0.99", "1");
    set(b, "data.synth_seed", "2"); /* another market */
    vx_train_group_key(a, b, key, sizeof key);
    assert_string_equal(key, "data.synth_seed");
    /* every key of the run itself may differ: each member validates, stops, checkpoints and
     * writes on its own thread (a key missing from that list would split groups for nothing) */
    const char *own[][2] = {
        {"train.eval_every", "3"},       {"train.max_revisits", "2"},
        {"train.final_test", "1"},       {"train.async_checkpoints", "0"}, /* the default is 1 */
        {"train.checkpoint_every", "2"}, {"train.patience", "5"},
    };
    for (size_t i = 0; i < sizeof own / sizeof *own; i++) {
        tiny(b, "b", "1e-3", "0.99", "2");
        set(b, own[i][0], own[i][1]);
        vx_train_group_key(a, b, key, sizeof key);
        if (key[0]) fail_msg("%s %s: kept out of the group by '%s'", own[i][0], own[i][1], key);
    }
    tiny(b, "b", "1e-3", "0.99", "1");
    set(b, "data.synth_seed", "2");
    set(a, "train.algo", "ppo"); /* PPO trains no groups, even with itself */
    set(b, "train.algo", "ppo");
    set(b, "data.synth_seed", "1");
    vx_train_group_key(a, b, key, sizeof key);
    assert_string_equal(key, "train.algo");
    free(a), free(b);
}

/* ---- members against runs alone ----------------------------------------------------------------
 */

typedef struct {
    vx_train_cfg cfg;
    vx_train_group *g;
    int k;
    int stop_after; /* 0: never */
    int epochs;     /* epochs it reported */
    vx_status st;
    vx_err e;
    pthread_t th;
} member;

static int on_epoch(const vx_epoch_report *r, void *ctx)
{
    member *m = ctx;
    m->epochs = r->epoch;
    return m->stop_after && r->epoch >= m->stop_after;
}

static void *member_main(void *arg)
{
    member *m = arg;
    m->st = vx_train_run_member(&m->cfg, NULL, m->g, m->k, on_epoch, m, &m->e);
    return NULL;
}

static void run_group(member *m, int K)
{
    vx_err e;
    vx_train_group *g;
    if (vx_train_group_create(K, NULL, 0, "test", &g, &e)) fail_msg("%s", e.msg);
    for (int k = 0; k < K; k++) {
        m[k].g = g, m[k].k = k;
        assert_int_equal(pthread_create(&m[k].th, NULL, member_main, &m[k]), 0);
    }
    for (int k = 0; k < K; k++) pthread_join(m[k].th, NULL);
    assert_int_equal(vx_train_group_failed(g, -1, NULL), 0);
    vx_train_group_free(g);
}

static char *file_text(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    size_t n;
    char *d = (char *)th_read(p, &n);
    char *s = malloc(n + 1);
    memcpy(s, d, n);
    s[n] = 0;
    free(d);
    return s;
}

/* metrics.csv without its timing columns (env_steps_per_s onwards) */
static void strip_timing(char *csv)
{
    const char *t = strstr(csv, "env_steps_per_s");
    assert_non_null(t);
    int keep = 0;
    for (const char *q = csv; q < t; q++) keep += *q == ',';
    char *w = csv;
    for (char *line = csv; *line;) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        size_t cut = len;
        for (size_t i = 0, commas = 0; i < len; i++)
            if (line[i] == ',' && ++commas == (size_t)keep) {
                cut = i;
                break;
            }
        memmove(w, line, cut);
        w += cut;
        *w++ = '\n';
        line += len + (end ? 1 : 0);
    }
    *w = 0;
}

/* The two runs' metrics (timing aside) and best weights agree bit for bit. */
static void assert_same_run(const char *a, const char *b)
{
    char *x = file_text(a, "metrics.csv"), *y = file_text(b, "metrics.csv");
    strip_timing(x);
    strip_timing(y);
    if (strcmp(x, y) != 0) fail_msg("%s and %s: metrics differ:\n%s\n---\n%s", a, b, x, y);
    free(x), free(y);
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/checkpoint/best.safetensors", a);
    snprintf(pb, sizeof pb, "%s/checkpoint/best.safetensors", b);
    vx_safetensors sa, sb;
    vx_err e;
    if (vx_safetensors_read(pa, &sa, &e) || vx_safetensors_read(pb, &sb, &e)) fail_msg("%s", e.msg);
    assert_int_equal(sa.n, sb.n);
    assert_true(sa.n > 0);
    for (size_t i = 0; i < sa.n; i++) {
        const vx_tensor *p = &sa.tensors[i], *q = &sb.tensors[i];
        assert_string_equal(p->name, q->name);
        assert_int_equal(p->dtype, q->dtype);
        assert_int_equal(p->ndim, q->ndim);
        size_t bytes = p->dtype == VX_DT_U8 ? 1 : p->dtype == VX_DT_F32 ? 4 : 8;
        for (int d = 0; d < p->ndim; d++) {
            assert_int_equal(p->shape[d], q->shape[d]);
            bytes *= (size_t)p->shape[d];
        }
        if (memcmp(p->data, q->data, bytes) != 0)
            fail_msg("%s and %s: best tensor %s differs", a, b, p->name);
    }
    vx_safetensors_free(&sa);
    vx_safetensors_free(&sb);
}

static void test_members_give_what_they_give_alone(void **state)
{
    (void)state;
    char root[64], dir[3][128], alone[3][128];
    th_tmpdir(root, sizeof root);
    const char *lr[3] = {"1e-3", "3e-4", "2e-3"}, *gamma[3] = {"0.99", "0.9", "0.95"};
    const char *seed[3] = {"1", "2", "3"};
    member *m = calloc(3, sizeof *m);
    for (int k = 0; k < 3; k++) {
        snprintf(dir[k], sizeof dir[k], "%s/g%d", root, k);
        snprintf(alone[k], sizeof alone[k], "%s/a%d", root, k);
        tiny(&m[k].cfg, dir[k], lr[k], gamma[k], seed[k]);
    }
    m[1].stop_after = 2; /* it leaves; the others go on without it */
    run_group(m, 3);
    for (int k = 0; k < 3; k++) {
        if (m[k].st != VX_OK && !(k == 1 && m[k].st == VX_ERR_STOPPED))
            fail_msg("member %d: %s", k, m[k].e.msg);
        assert_int_equal(m[k].epochs, k == 1 ? 2 : 4);
    }
    for (int k = 0; k < 3; k++) { /* each alone */
        member a;
        memset(&a, 0, sizeof a);
        tiny(&a.cfg, alone[k], lr[k], gamma[k], seed[k]);
        a.stop_after = m[k].stop_after;
        vx_err e;
        vx_status st = vx_train_run(&a.cfg, NULL, 0, on_epoch, &a, NULL, &e);
        assert_int_equal(st, m[k].st);
        assert_same_run(dir[k], alone[k]);
    }
    /* and they differ from one another: the comparison could tell a member from another */
    char *x = file_text(dir[0], "metrics.csv"), *y = file_text(dir[2], "metrics.csv");
    strip_timing(x);
    strip_timing(y);
    assert_true(strcmp(x, y) != 0);
    print_message("member 0's metrics:\n%s", x);
    free(x), free(y);
    free(m);
    th_rmtree(root);
}

static void test_member_that_never_joins(void **state)
{
    (void)state;
    char root[64], dir[128], alone[128], blocked[160];
    th_tmpdir(root, sizeof root);
    snprintf(dir, sizeof dir, "%s/g0", root);
    snprintf(alone, sizeof alone, "%s/a0", root);
    snprintf(blocked, sizeof blocked, "%s/file/run", root);
    char file[128];
    snprintf(file, sizeof file, "%s/file", root);
    th_write_str(file, "a file where a folder would go\n");
    member *m = calloc(2, sizeof *m);
    tiny(&m[0].cfg, dir, "1e-3", "0.99", "1");
    tiny(&m[1].cfg, blocked, "1e-3", "0.99", "2");
    run_group(m, 2);
    assert_int_equal(m[0].st, VX_OK);
    assert_int_not_equal(m[1].st, VX_OK);
    assert_non_null(strstr(m[1].e.msg, file));
    member a;
    memset(&a, 0, sizeof a);
    tiny(&a.cfg, alone, "1e-3", "0.99", "1");
    vx_err e;
    if (vx_train_run(&a.cfg, NULL, 0, on_epoch, &a, NULL, &e)) fail_msg("%s", e.msg);
    assert_same_run(dir, alone);
    free(m);
    th_rmtree(root);
}

/* A member whose run is refused before it starts (a run in a group never checkpoints) leaves
 * the group at once: the other trains, as it does alone, and does not wait for it. */
static void test_refused_member_does_not_hold_the_group(void **state)
{
    (void)state;
    char root[64], dir[2][128], alone[128];
    th_tmpdir(root, sizeof root);
    member *m = calloc(2, sizeof *m);
    for (int k = 0; k < 2; k++) {
        snprintf(dir[k], sizeof dir[k], "%s/g%d", root, k);
        tiny(&m[k].cfg, dir[k], "1e-3", "0.99", k ? "2" : "1");
    }
    set(&m[1].cfg, "train.checkpoint_every", "1");
    run_group(m, 2);
    if (m[0].st) fail_msg("member 0: %s", m[0].e.msg);
    assert_int_equal(m[0].epochs, 4);
    assert_int_equal(m[1].st, VX_ERR_ARG);
    assert_non_null(strstr(m[1].e.msg, "train.checkpoint_every 1"));
    assert_int_equal(m[1].epochs, 0);
    member a;
    memset(&a, 0, sizeof a);
    snprintf(alone, sizeof alone, "%s/a0", root);
    tiny(&a.cfg, alone, "1e-3", "0.99", "1");
    vx_err e;
    if (vx_train_run(&a.cfg, NULL, 0, on_epoch, &a, NULL, &e)) fail_msg("%s", e.msg);
    assert_same_run(dir[0], alone);
    free(m);
    th_rmtree(root);
}

/* A member's settings its algorithm refuses at creation (after every run has joined): the group
 * fails as one, each member's run says why, and vx_train_group_failed tells the engine. */
static void test_failed_creation_tells_every_member(void **state)
{
    (void)state;
    char root[64], dir[2][128];
    th_tmpdir(root, sizeof root);
    member *m = calloc(2, sizeof *m);
    for (int k = 0; k < 2; k++) {
        snprintf(dir[k], sizeof dir[k], "%s/g%d", root, k);
        tiny(&m[k].cfg, dir[k], "1e-3", "0.99", k ? "2" : "1");
    }
    vx_err e;
    vx_train_group *g;
    /* a share of 1 KB on a CPU device of its own: the replay buffers do not fit */
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    vx_device *dev;
    if (vx_device_open(&dc, &dev, &e)) fail_msg("%s", e.msg);
    if (vx_train_group_create(2, dev, 1024, "tiny-share", &g, &e)) fail_msg("%s", e.msg);
    for (int k = 0; k < 2; k++) {
        m[k].g = g, m[k].k = k;
        assert_int_equal(pthread_create(&m[k].th, NULL, member_main, &m[k]), 0);
    }
    for (int k = 0; k < 2; k++) pthread_join(m[k].th, NULL);
    vx_err why;
    assert_int_equal(vx_train_group_failed(g, -1, &why), 1);
    assert_int_equal(vx_train_group_failed(g, 1, NULL), 1); /* it reached each member's run */
    assert_int_equal(why.status, VX_ERR_NOMEM);
    assert_non_null(strstr(why.msg, "tiny-share"));
    assert_non_null(strstr(why.msg, "group member 0: ")); /* whose creation it was */
    for (int k = 0; k < 2; k++) {
        assert_int_equal(m[k].st, VX_ERR_NOMEM);
        assert_non_null(strstr(m[k].e.msg, "tiny-share"));
    }
    vx_train_group_free(g);
    vx_device_close(dev);
    free(m);
    th_rmtree(root);
}

/* ---- memory: a member gets no room it would not have had alone --------------------------------
 */

typedef struct {
    vx_train_cfg cfg;
    vx_device *share; /* the member's own, as a search's trial has */
    vx_train_group *g;
    int k;
    vx_status st;
    vx_err e;
    pthread_t th;
} shared_member;

static void *shared_main(void *arg)
{
    shared_member *m = arg;
    m->st = vx_train_run_member(&m->cfg, m->share, m->g, m->k, NULL, NULL, &m->e);
    return NULL;
}

/* Two members, member k on a share of budget[k] of dev, in a group whose own budget is
 * group_budget (0: pooled from the members'); the largest peak the members' shares reached. */
static size_t run_on_shares(vx_device *dev, const char *root, const char *tag,
                            const size_t budget[2], size_t group_budget, shared_member *m,
                            vx_train_group **g)
{
    vx_err e;
    if (vx_train_group_create(2, dev, group_budget, tag, g, &e)) fail_msg("%s", e.msg);
    for (int k = 0; k < 2; k++) {
        char d[160];
        snprintf(d, sizeof d, "%s/%s%d", root, tag, k);
        tiny(&m[k].cfg, d, "1e-3", "0.99", k ? "2" : "1");
        set(&m[k].cfg, "train.epochs", "2");
        if (vx_device_share(dev, budget[k], "member", &m[k].share, &e)) fail_msg("%s", e.msg);
        m[k].g = *g, m[k].k = k;
        assert_int_equal(pthread_create(&m[k].th, NULL, shared_main, &m[k]), 0);
    }
    size_t peak = 0;
    for (int k = 0; k < 2; k++) {
        pthread_join(m[k].th, NULL);
        vx_device_mem mm;
        vx_device_memory(m[k].share, &mm);
        if (mm.peak > peak) peak = mm.peak;
        vx_device_close(m[k].share);
    }
    return peak;
}

static void test_member_gets_no_more_memory_than_alone(void **state)
{
    (void)state;
    char root[64];
    th_tmpdir(root, sizeof root);
    vx_err e;
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    vx_device *dev;
    if (vx_device_open(&dc, &dev, &e)) fail_msg("%s", e.msg);
    /* what a member's environments and its algorithm take, with room to spare */
    shared_member *m = calloc(2, sizeof *m);
    vx_train_group *g;
    const size_t roomy[2] = {(size_t)1 << 32, (size_t)1 << 32};
    size_t envs = run_on_shares(dev, root, "roomy", roomy, (size_t)1 << 33, m, &g);
    for (int k = 0; k < 2; k++) assert_int_equal(m[k].st, VX_OK);
    size_t algo = vx_train_group_peak(g);
    vx_train_group_free(g);
    assert_true(envs > 0 && algo > 0);
    /* a budget that holds the algorithm but not the environments as well: alone, refused */
    size_t B = algo + envs / 2;
    vx_device *sh;
    if (vx_device_share(dev, B, "alone", &sh, &e)) fail_msg("%s", e.msg);
    vx_train_cfg *c = malloc(sizeof *c);
    char d[160];
    snprintf(d, sizeof d, "%s/alone", root);
    tiny(c, d, "1e-3", "0.99", "1");
    set(c, "train.epochs", "2");
    assert_int_equal(vx_train_run(c, sh, 0, NULL, NULL, NULL, &e), VX_ERR_NOMEM);
    vx_device_close(sh);
    /* in a group, on shares of B each, the pooled room is what they had left: refused too */
    memset(m, 0, 2 * sizeof *m);
    const size_t tight[2] = {B, B};
    run_on_shares(dev, root, "tight", tight, 0, m, &g);
    for (int k = 0; k < 2; k++) assert_int_equal(m[k].st, VX_ERR_NOMEM);
    assert_int_equal(vx_train_group_failed(g, 0, NULL), 1);
    vx_train_group_free(g);
    /* shares of different sizes: the pool is what each had left, summed. Member 0 has a quarter
     * of its environments to spare, member 1 lacks half of them: together short of two
     * algorithms, refused (a pool of twice member 0's room would hold them) */
    memset(m, 0, 2 * sizeof *m);
    const size_t uneven[2] = {algo + envs + envs / 4, B};
    run_on_shares(dev, root, "uneven", uneven, 0, m, &g);
    for (int k = 0; k < 2; k++) assert_int_equal(m[k].st, VX_ERR_NOMEM);
    vx_train_group_free(g);
    /* … and member 0 with twice its environments to spare: together enough, both train (a pool
     * of twice the smaller room would refuse them) */
    memset(m, 0, 2 * sizeof *m);
    const size_t enough[2] = {algo + 3 * envs, B};
    run_on_shares(dev, root, "enough", enough, 0, m, &g);
    for (int k = 0; k < 2; k++)
        if (m[k].st) fail_msg("member %d: %s", k, m[k].e.msg);
    vx_train_group_free(g);
    print_message("a member's environments %zu B, its algorithm %zu B: at %zu B a trial, refused "
                  "alone and in a group\n",
                  envs, algo, B);
    free(c), free(m);
    vx_device_close(dev);
    th_rmtree(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_keys),
        cmocka_unit_test(test_members_give_what_they_give_alone),
        cmocka_unit_test(test_member_that_never_joins),
        cmocka_unit_test(test_refused_member_does_not_hold_the_group),
        cmocka_unit_test(test_failed_creation_tells_every_member),
        cmocka_unit_test(test_member_gets_no_more_memory_than_alone),
    };
    return cmocka_run_group_tests_name("group", tests, NULL, NULL);
}

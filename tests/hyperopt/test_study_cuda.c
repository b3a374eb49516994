/* test_study_cuda.c — studies on the GPU (skipped without a device).
 *
 * - The budget's estimate against what trials really reserve: a study whose space spans the
 *   settings memory depends on (n-step horizon, loss, replay kind, batch, environments, for the
 *   DQN; trunk width, minibatches, environments for PPO), each trial's estimate within [1, 1.25]
 *   of its share's measured peak (never below it: the shares are sized from the estimate).
 * - The same DQN study at concurrency 1 and 6, and at 6 with one launcher thread issuing every
 *   graph launch, gives the same trials bit for bit. */
#include "helpers.h"
#include "hyperopt/study_internal.h"
#include "util/device_cuda.h"
#include "vixen/cuda_util.h"
#include "vixen/hyperopt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vx_device *g_dev;

static vx_train_cfg *base_of(const char *algo)
{
    vx_train_cfg *c = malloc(sizeof *c);
    vx_train_cfg_default(c);
    vx_err e;
    const char *keys[][2] = {{"train.algo", algo},        {"data.synth_days", "30"},
                             {"train.epochs", "2"},       {"train.eval_every", "1"},
                             {"train.device", "cuda"},    {"dqn.warmup", "200"},
                             {"replay.capacity", "50000"}};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (vx_train_cfg_set(c, keys[i][0], keys[i][1], "test", &e)) fail_msg("%s", e.msg);
    return c;
}

static vx_trial *run_with(const char *dir, const char *space, const vx_train_cfg *base, int swarm,
                          int gens, int concurrency, int launcher, size_t *n)
{
    vx_study_cfg c;
    vx_study_cfg_default(&c);
    c.pso.swarm = swarm, c.generations = gens, c.concurrency = concurrency, c.prune = 0;
    vx_study *s;
    vx_err e;
    if (vx_study_create(dir, &c, space, strlen(space), base, &s, &e)) fail_msg("%s", e.msg);
    vx_study_set_launcher(s, launcher);
    if (vx_study_run(s, g_dev, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
    vx_study_close(s);
    char path[512];
    snprintf(path, sizeof path, "%s/study.db", dir);
    vx_store st;
    if (vx_store_open(&st, path, 1, &e)) fail_msg("%s", e.msg);
    vx_trial *t;
    if (vx_store_trials(&st, &t, n, &e)) fail_msg("%s", e.msg);
    vx_store_close(&st);
    return t;
}

static vx_trial *run(const char *dir, const char *space, const vx_train_cfg *base, int swarm,
                     int gens, int concurrency, size_t *n)
{
    return run_with(dir, space, base, swarm, gens, concurrency, 0, n);
}

static void check_estimates(const char *algo, const char *space)
{
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    vx_train_cfg *base = base_of(algo);
    size_t n;
    vx_trial *t = run(dir, space, base, 12, 2, 6, &n);
    double lo = INFINITY, hi = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double r = (double)t[i].mem_estimate / (double)t[i].mem_measured;
        lo = fmin(lo, r), hi = fmax(hi, r);
        char p[sizeof t[i].params];
        snprintf(p, sizeof p, "%s", t[i].params);
        for (char *c = p; *c; c++)
            if (*c == '\n') *c = ' ';
        printf("%s trial %2zu: estimate %7.1f MB, measured %7.1f MB, ratio %.3f, %s%s%s | %s\n",
               algo, i, t[i].mem_estimate / 1e6, t[i].mem_measured / 1e6, r,
               vx_trial_status_name(t[i].status), t[i].error[0] ? ": " : "", t[i].error, p);
        bad += !(r >= 1 && r <= 1.25) || t[i].status != VX_TRIAL_DONE;
    }
    printf("%s: %zu trials, estimate / measured in [%.3f, %.3f] (wanted [1, 1.25])\n", algo, n, lo,
           hi);
    assert_int_equal(bad, 0);
    free(t), free(base);
    th_rmtree(dir);
}

static void test_dqn_estimates(void **state)
{
    (void)state;
    check_estimates("dqn", "dqn.n_step: {type: int, low: 1, high: 5}\n"
                           "dqn.loss: {type: categorical, values: [mse, huber, c51]}\n"
                           "replay.kind: {type: categorical, values: [uniform, proportional, "
                           "rank], encoding: score}\n"
                           "dqn.batch: {type: logint, low: 32, high: 2048}\n"
                           "train.envs: {type: logint, low: 16, high: 1024}\n");
}

static void test_ppo_estimates(void **state)
{
    (void)state;
    check_estimates("ppo", "ppo.minibatches: {type: categorical, values: [4, 8, 16, 32]}\n"
                           "ppo.trunk: {type: categorical, values: [\"64,64\", \"160,160\", "
                           "\"256,256\"]}\n"
                           "train.envs: {type: categorical, values: [64, 256, 1024]}\n"
                           "ppo.shared: {type: int, low: 0, high: 1}\n");
}

static void test_concurrency_does_not_change_results(void **state)
{
    (void)state;
    char a[64], b[64], c[64];
    th_tmpdir(a, sizeof a), th_tmpdir(b, sizeof b), th_tmpdir(c, sizeof c);
    vx_train_cfg *base = base_of("dqn");
    const char *space = "dqn.lr: {type: logfloat, low: 1.0e-4, high: 3.0e-3}\n"
                        "dqn.n_step: {type: int, low: 1, high: 3}\n";
    size_t na, nb, nc;
    vx_trial *x = run(a, space, base, 6, 2, 1, &na), *y = run(b, space, base, 6, 2, 6, &nb);
    long long before = vx_cuda_launcher_launches(g_dev);
    vx_trial *z = run_with(c, space, base, 6, 2, 6, 1, &nc);
    long long launched = vx_cuda_launcher_launches(g_dev) - before;
    assert_int_equal(na, nb);
    assert_int_equal(na, nc);
    for (size_t i = 0; i < na; i++) {
        if (strcmp(x[i].params, y[i].params) || memcmp(&x[i].objective, &y[i].objective, 8))
            fail_msg("trial %zu: %.17g at concurrency 1, %.17g at 6", i, x[i].objective,
                     y[i].objective);
        if (strcmp(x[i].params, z[i].params) || memcmp(&x[i].objective, &z[i].objective, 8))
            fail_msg("trial %zu: %.17g at concurrency 1, %.17g at 6 with one launcher thread", i,
                     x[i].objective, z[i].objective);
    }
    printf("12 GPU trials at concurrency 1, 6, and 6 through one launcher thread (%lld graph "
           "launches through it): identical\n",
           launched);
    assert_true(launched > 0);
    free(x), free(y), free(z), free(base);
    th_rmtree(a), th_rmtree(b), th_rmtree(c);
}

/* An MPI rank's device (vx_device_open_local): the GPU of its node-local rank modulo the GPUs,
 * and the budget of a GPU split between the ranks that share it. */
static void test_rank_devices(void **state)
{
    (void)state;
    int gpus = vx_device_cuda_count(), cores;
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CUDA;
    dc.budget = (size_t)8 << 30;
    vx_err e;
    vx_device *alone, *d;
    if (vx_device_open_local(&dc, 0, 1, &alone, &cores, &e)) fail_msg("%s", e.msg);
    vx_device_mem m1;
    vx_device_memory(alone, &m1);
    assert_int_equal(m1.budget, dc.budget);
    vx_device_close(alone);
    /* 2·gpus + 1 ranks on the node: rank gpus takes GPU 0, shared by three ranks when there is
     * one GPU (by 3 ranks of 3: 0, 1, 2) and by two otherwise (0 and gpus, 2·gpus) */
    int local = 2 * gpus + 1, rank = gpus;
    if (vx_device_open_local(&dc, rank, local, &d, &cores, &e)) fail_msg("%s", e.msg);
    char want[24];
    snprintf(want, sizeof want, "cuda:%d ", rank % gpus);
    assert_int_equal(strncmp(vx_device_name(d), want, strlen(want)), 0);
    vx_device_mem m;
    vx_device_memory(d, &m);
    assert_int_equal(m.budget, dc.budget / 3); /* GPU 0: ranks 0, gpus and 2·gpus */
    printf("rank %d of %d on %d GPU(s): %s, budget %.2f GiB of %.2f\n", rank, local, gpus,
           vx_device_name(d), m.budget / 1073741824.0, dc.budget / 1073741824.0);
    vx_device_close(d);
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
        cmocka_unit_test(test_dqn_estimates),
        cmocka_unit_test(test_ppo_estimates),
        cmocka_unit_test(test_concurrency_does_not_change_results),
        cmocka_unit_test(test_rank_devices),
    };
    const char *only = getenv("VX_TEST_FILTER"); /* cmocka's filter: `*` wildcards */
    if (only && *only) cmocka_set_test_filter(only);
    int failed = cmocka_run_group_tests_name("study_cuda", tests, NULL, NULL);
    vx_device_close(g_dev);
    return failed;
}

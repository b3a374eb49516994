/* test_study.c — studies of tiny DQN trials on the CPU (hyperopt.h).
 *
 * - The same study at concurrency 1, 2 and 4 gives the same trials bit for bit (parameters,
 *   seeds, objectives, statuses) and the same best (layer 5: 1 is the sequential study).
 * - Killed (SIGKILL) at a spread of points — inside trials' file writes and at the store's commits
 *   — and resumed, a study ends with exactly the uninterrupted study's trials and best.
 * - Pruning: every pruned trial's best validation so far was below the median of the earlier
 *   generations' trials at that epoch, computed here in float64 from the store's curves, and no
 *   trial that ran to the end ever was (after the warm-up).
 * - The five out-of-memory layers, each triggered by the allocation fault hook (device.h) or by
 *   memory held on the device: (1) the plan's concurrency from the estimate and the margin, and a
 *   trial too large for the budget refused up front; (2) the first chunk at ceil(max / 2), then
 *   the concurrency scaled to the measurement, and a chunk the device refuses run again at half;
 *   (3) a trial its share refuses halves its batch and runs again while the others' results stay
 *   as they were; (4) below 10% free the concurrency halves with a warning; (5) = the first test.
 * - best.yaml trained on its own reproduces the best trial's validation result exactly.
 * - The store, `vixen hyperopt status` and report.html read back rows written here, whose every
 *   count, order and best are known by hand; layers 2 and 4 of the engine on numbers of their own;
 *   a trial its share refuses at every batch fails after five halvings. */
#define _GNU_SOURCE /* memmem */
#include "helpers.h"
#include "hyperopt/study_common.h"
#include "hyperopt/study_internal.h"
#include "train/checkpoint.h"
#include "vixen/dqn.h"
#include "vixen/hyperopt.h"
#include "vixen/ppo.h"
#include "vixen/replay.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *small_keys[][2] = {
    {"data.synth_days", "12"},       {"env.episode_len", "60"},   {"train.envs", "16"},
    {"train.steps_per_epoch", "40"}, {"dqn.batch", "32"},         {"dqn.trunk", "32,32"},
    {"dqn.head_hidden", "16"},       {"dqn.warmup", "200"},       {"train.eval_every", "1"},
    {"train.epochs", "4"},           {"replay.capacity", "4000"}, {"train.device", "cpu"},
};

static vx_train_cfg *small_base(void)
{
    vx_train_cfg *c = malloc(sizeof *c);
    vx_train_cfg_default(c);
    vx_err e;
    for (size_t i = 0; i < sizeof small_keys / sizeof *small_keys; i++)
        if (vx_train_cfg_set(c, small_keys[i][0], small_keys[i][1], "test", &e))
            fail_msg("%s", e.msg);
    return c;
}

static void small_cfg(vx_study_cfg *c, int swarm, int gens, int concurrency)
{
    vx_study_cfg_default(c);
    c->pso.swarm = swarm;
    c->generations = gens;
    c->concurrency = concurrency;
}

/* Runs a new study in dir on dev, its trials grouped as `fuse` says (vx_study_set_fuse); the
 * status it returns. */
static vx_status run_study_fused(const char *dir, const vx_study_cfg *c, vx_device *dev, int fuse,
                                 vx_err *e)
{
    vx_train_cfg *base = small_base();
    vx_study *s;
    vx_status st = vx_study_create(dir, c, space_text, strlen(space_text), base, &s, e);
    free(base);
    if (st) return st;
    vx_study_set_fuse(s, fuse);
    st = vx_study_run(s, dev, NULL, NULL, NULL, e);
    vx_study_close(s);
    return st;
}

static vx_status run_study(const char *dir, const vx_study_cfg *c, vx_device *dev, vx_err *e)
{
    return run_study_fused(dir, c, dev, -1, e);
}

static vx_study_event *events_of(const char *dir, size_t *n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/study.db", dir);
    vx_store s;
    vx_err e;
    if (vx_store_open(&s, path, 1, &e)) fail_msg("%s", e.msg);
    vx_study_event *ev;
    if (vx_store_events(&s, &ev, n, &e)) fail_msg("%s", e.msg);
    vx_store_close(&s);
    return ev;
}

/* How many of a study's chunks ran some trials as groups (their events say so). */
static int grouped_chunks(const char *dir)
{
    size_t n;
    vx_study_event *ev = events_of(dir, &n);
    int grouped = 0;
    for (size_t i = 0; i < n; i++) grouped += strstr(ev[i].note, "in groups of") != NULL;
    free(ev);
    return grouped;
}

/* A trial's parameters without the keys a group's members may differ in (the DQN's
 * member_keys that the space varies: dqn.lr and dqn.gamma). */
static void shared_params(const vx_trial *t, char *out, size_t n)
{
    out[0] = 0;
    const char *p = t->params;
    while (*p) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) + 1 : strlen(p);
        if (strncmp(p, "dqn.lr=", 7) != 0 && strncmp(p, "dqn.gamma=", 10) != 0)
            snprintf(out + strlen(out), n - strlen(out), "%.*s", (int)len, p);
        p += len;
    }
}

/* Every group the log announces ("hyperopt: g0-p0-s0 g0-p2-s0 train as one group (…)") is of
 * trials that may train together: the same n_step and loss. How many groups, and how many of
 * their trials, it announced. */
static int check_groups(const char *dir, const char *log, int *members)
{
    size_t n;
    vx_trial *t = trials_of(dir, &n);
    int groups = 0;
    *members = 0;
    for (const char *l = strstr(log, " train as one group ("); l;
         l = strstr(l + 1, " train as one group (")) {
        const char *start = l;
        while (start > log && start[-1] != '\n') start--;
        start = strstr(start, "hyperopt: ");
        assert_true(start && start < l);
        start += strlen("hyperopt: ");
        char first[2048] = "", label[48];
        int k = 0;
        for (const char *q = start; q < l; k++) {
            int gen, particle, seed, used;
            assert_int_equal(sscanf(q, "g%d-p%d-s%d%n", &gen, &particle, &seed, &used), 3);
            snprintf(label, sizeof label, "g%d-p%d-s%d", gen, particle, seed);
            const vx_trial *m = NULL;
            for (size_t i = 0; i < n; i++)
                if (t[i].generation == gen && t[i].particle == particle && t[i].seed_index == seed)
                    m = &t[i];
            if (!m) fail_msg("%s: announced in a group, not in the store", label);
            char mine[2048];
            shared_params(m, mine, sizeof mine);
            if (k == 0) snprintf(first, sizeof first, "%s", mine);
            else if (strcmp(first, mine) != 0)
                fail_msg("%s grouped with trials it may not train with:\n%s---\n%s", label, first,
                         mine);
            q += used;
            while (*q == ' ') q++;
        }
        assert_true(k >= 2);
        groups++;
        *members += k;
    }
    free(t);
    return groups;
}

static void test_concurrency_does_not_change_results(void **state)
{
    (void)state;
    char root[64], d[4][128];
    th_tmpdir(root, sizeof root);
    const int conc[4] = {1, 2, 4, 4};
    for (int k = 0; k < 4; k++) {
        snprintf(d[k], sizeof d[k], "%s/c%d%s", root, conc[k], k == 3 ? "-fused" : "");
        vx_study_cfg c;
        small_cfg(&c, 6, 3, conc[k]);
        vx_err e;
        /* the last: trials that may train as one group do (on the CPU, one after another) */
        if (k == 3) th_log_start();
        if (run_study_fused(d[k], &c, NULL, k == 3 ? 1 : -1, &e))
            fail_msg("concurrency %d: %s", conc[k], e.msg);
    }
    int members, groups = check_groups(d[3], th_log_text(), &members);
    th_log_stop();
    assert_true(groups > 0);
    assert_same_trials(d[0], d[1], -1);
    assert_same_trials(d[0], d[2], -1);
    assert_same_trials(d[0], d[3], -1);
    assert_int_equal(grouped_chunks(d[2]), 0); /* the CPU fuses nothing: alone by default */
    int grouped = grouped_chunks(d[3]);
    assert_true(grouped > 0);
    print_message("… and at 4 with groups (%d chunks grouped, %d groups of %d trials in all, each "
                  "of one n_step and loss): identical\n",
                  grouped, groups, members);
    /* a grouped trial's measured memory (its share's peak and its part of its group's) is what
     * it measures alone: the plan's estimate for the next chunks is not skewed by grouping */
    size_t n, n3;
    vx_trial *t = trials_of(d[0], &n), *t3 = trials_of(d[3], &n3);
    assert_int_equal(n, n3);
    int pruned = 0, done = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(t[i].mem_measured > 0);
        if (t[i].mem_measured != t3[i].mem_measured)
            fail_msg("trial %zu: %lld B measured alone, %lld B in a group", i,
                     (long long)t[i].mem_measured, (long long)t3[i].mem_measured);
        pruned += t[i].status == VX_TRIAL_PRUNED, done += t[i].status == VX_TRIAL_DONE;
    }
    print_message("18 trials at concurrency 1, 2 and 4: identical (%d done, %d pruned)\n", done,
                  pruned);
    free(t), free(t3);
    th_rmtree(root);
}

/* ---- pruning, checked from the store -----------------------------------------------------------
 */

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_pruning_follows_earlier_medians(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    vx_study_cfg c;
    small_cfg(&c, 8, 3, 2);
    c.prune_warmup = 1;
    vx_err e;
    if (run_study(dir, &c, NULL, &e)) fail_msg("%s", e.msg);
    size_t n, np;
    vx_trial *t = trials_of(dir, &n);
    char path[512];
    snprintf(path, sizeof path, "%s/study.db", dir);
    vx_store s;
    assert_int_equal(vx_store_open(&s, path, 1, &e), VX_OK);
    vx_curve_point *pts;
    int64_t *of;
    assert_int_equal(vx_store_curves(&s, &pts, &of, &np, &e), VX_OK);
    vx_store_close(&s);
    /* best so far of trial i at epoch ep (NaN: no validation at ep) */
    double best[64][8];
    for (int i = 0; i < 64; i++)
        for (int k = 0; k < 8; k++) best[i][k] = NAN;
    for (size_t k = 0; k < np; k++) {
        double prev = NAN;
        for (int ep = 1; ep < pts[k].epoch; ep++)
            if (!isnan(best[of[k]][ep])) prev = best[of[k]][ep];
        double v = pts[k].sharpe;
        best[of[k]][pts[k].epoch] = isnan(prev) || v > prev ? v : prev;
    }
    int pruned = 0, checked = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].generation == 0) {
            assert_int_not_equal(t[i].status, VX_TRIAL_PRUNED); /* nothing to compare with */
            continue;
        }
        /* never inside the warm-up: one validation (an epoch each) before any comparison */
        if (t[i].status == VX_TRIAL_PRUNED && t[i].epochs < 2)
            fail_msg("trial %zu pruned at epoch %d, inside the warm-up", i, t[i].epochs);
        for (int ep = 2; ep <= t[i].epochs; ep++) { /* after the warm-up of one validation */
            double vals[64];
            int m = 0;
            for (size_t j = 0; j < n; j++)
                if (t[j].generation < t[i].generation && !isnan(best[j][ep]))
                    vals[m++] = best[j][ep];
            if (m < 3) continue;
            qsort(vals, (size_t)m, sizeof *vals, by_value);
            double med = m % 2 ? vals[m / 2] : (vals[m / 2 - 1] + vals[m / 2]) / 2;
            int below = best[i][ep] < med;
            checked++;
            if (ep < t[i].epochs) assert_false(below); /* it would have stopped here */
            if (ep == t[i].epochs) {
                if (t[i].status == VX_TRIAL_PRUNED && !below)
                    fail_msg("trial %zu pruned at epoch %d: %.4f >= median %.4f", i, ep,
                             best[i][ep], med);
                if (t[i].status == VX_TRIAL_DONE && below && ep < 4)
                    fail_msg("trial %zu below the median at epoch %d but not pruned", i, ep);
                pruned += t[i].status == VX_TRIAL_PRUNED;
            }
        }
    }
    print_message("pruning: %d trials pruned, %d trial-epochs checked against float64 medians\n",
                  pruned, checked);
    assert_true(pruned >= 1);
    free(t), free(pts), free(of);
    th_rmtree(dir);
}

/* The median is of the earlier trials' best validation so far (not their latest), and of an even
 * count it is the mean of the middle two. Generation 0's curves are rewritten in the store with
 * values far outside any real Sharpe ratio (±1e6 and -1e9), generation 1 is deleted and run again
 * on resume; with a warm-up of one validation the medians are then:
 *   epoch 2: bests so far {-1e9, -1e9, 1e6, 1e6}: median about -5e8, no trial below it (the upper
 *            middle value, 1e6, would prune them all here);
 *   epoch 3: bests so far all 1e6 (the latest values {1e6, 1e6, -1e9, -1e9}, median about -5e8,
 *            would prune none): every trial is pruned here.
 * So every trial of generation 1 ends pruned after exactly 3 epochs. */
static void test_pruning_median_of_best_so_far(void **state)
{
    (void)state;
    char dir[64], path[512];
    th_tmpdir(dir, sizeof dir);
    vx_study_cfg c;
    small_cfg(&c, 4, 2, 2);
    c.prune_warmup = 1;
    vx_err e;
    if (run_study(dir, &c, NULL, &e)) fail_msg("%s", e.msg);
    snprintf(path, sizeof path, "%s/study.db", dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    const char *sql = "DELETE FROM trials WHERE generation = 1;"
                      "DELETE FROM curves WHERE trial >= 4;"
                      "UPDATE curves SET sharpe = CASE"
                      " WHEN epoch = 2 AND trial >= 2 THEN 1e6"
                      " WHEN epoch = 3 AND trial < 2 THEN 1e6"
                      " ELSE -1e9 END;";
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) fail_msg("%s", msg);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT COUNT(*) FROM curves WHERE trial < 4 AND epoch "
                                        "BETWEEN 1 AND 4",
                                        -1, &q, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(q, 0), 16); /* four validations of each, epochs 1..4 */
    sqlite3_finalize(q);
    sqlite3_close(db);
    vx_study *s;
    assert_int_equal(vx_study_open(dir, 0, &s, &e), VX_OK);
    if (vx_study_run(s, NULL, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
    vx_study_close(s);
    size_t n;
    vx_trial *t = trials_of(dir, &n);
    assert_int_equal(n, 8);
    for (size_t i = 4; i < n; i++)
        if (t[i].status != VX_TRIAL_PRUNED || t[i].epochs != 3)
            fail_msg("trial %zu: %s after %d epochs (want pruned after 3)", i,
                     vx_trial_status_name(t[i].status), t[i].epochs);
    free(t);
    th_rmtree(dir);
}

/* A trial whose learning diverges fails with its run's message, alone: the study goes on with
 * the others. Rewards scaled up by 1e30 under MSE give an inf loss in the first epoch with
 * updates (test_train's divergence test); the space chooses that scale or the data's (0) per
 * trial, so exactly the trials with 1.0e-30 must fail. */
static void test_a_diverging_trial_fails_alone(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    const char *space = "env.reward_scale: {type: categorical, values: [1.0e-30, 0]}\n"
                        "dqn.lr: {type: logfloat, low: 1.0e-4, high: 3.0e-3}\n";
    vx_study_cfg c;
    small_cfg(&c, 4, 1, 2);
    vx_train_cfg *base = small_base();
    vx_err e;
    if (vx_train_cfg_set(base, "dqn.loss", "mse", "test", &e)) fail_msg("%s", e.msg);
    vx_study *s;
    vx_status st = vx_study_create(dir, &c, space, strlen(space), base, &s, &e);
    free(base);
    if (st) fail_msg("%s", e.msg);
    st = vx_study_run(s, NULL, NULL, NULL, NULL, &e);
    vx_study_close(s);
    if (st) fail_msg("%s", e.msg);
    size_t n;
    vx_trial *t = trials_of(dir, &n);
    int failed = 0, done = 0;
    for (size_t i = 0; i < n; i++) {
        int scaled = strstr(t[i].params, "env.reward_scale=1.0e-30") != NULL;
        printf("trial %zu: %s, %s\n", i, vx_trial_status_name(t[i].status),
               scaled ? "rewards scaled by 1e30" : "the data's scale");
        if (scaled) {
            assert_int_equal(t[i].status, VX_TRIAL_FAILED);
            assert_non_null(strstr(t[i].error, "dqn: the learning diverged"));
            assert_true(isnan(t[i].objective));
            failed++;
        } else {
            assert_int_equal(t[i].status, VX_TRIAL_DONE);
            assert_true(isfinite(t[i].objective));
            done++;
        }
    }
    free(t);
    assert_true(failed >= 1 && done >= 1);
    th_rmtree(dir);
}

/* ---- a study killed at a spread of points, then resumed ----------------------------------------
 */

static char out[1 << 16], err[1 << 14];

static int vixen(const char *env, const char *args)
{
    static char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s %s", env, VX_BINARY, args);
    return th_run(cmd, out, sizeof out, err, sizeof err);
}

static void test_kill_and_resume(void **state)
{
    (void)state;
    char root[64], space[128], ref[128], args[4096];
    study_folder(root, sizeof root, space, sizeof space);
    snprintf(ref, sizeof ref, "%s/ref", root);
    const char *study = "--swarm 4 --generations 2 --concurrency 1";
    snprintf(args, sizeof args, "hyperopt %s " SMALL " %s --study %s", space, study, ref);
    if (vixen("", args) != 0) fail_msg("%s", err);
    /* the file-system steps of the whole study (trials' writes and the store's commits) */
    snprintf(args, sizeof args, "hyperopt %s " SMALL " %s --study %s/count", space, study, root);
    assert_int_equal(vixen("VIXEN_FAULT_AT=1000000", args), 0);
    int kills = 0;
    for (int cut = 1; cut <= 12; cut++) {
        char dir[128], env[64];
        snprintf(dir, sizeof dir, "%s/k%d", root, cut);
        /* a spread over the study: early steps densely (creating the store), then every 37th */
        int at = cut <= 4 ? cut * 2 : 8 + (cut - 4) * 37;
        snprintf(env, sizeof env, "VIXEN_FAULT_AT=%d", at);
        snprintf(args, sizeof args, "hyperopt %s " SMALL " %s --study %s", space, study, dir);
        int rc = vixen(env, args);
        if (rc == 0) break; /* past the last step */
        if (rc != 137) fail_msg("cut at step %d: exit %d: %s", at, rc, err);
        kills++;
        snprintf(args, sizeof args, "hyperopt --resume %s", dir);
        rc = vixen("", args);
        if (rc != 0 && strstr(err, "no study here")) { /* killed before the store existed */
            snprintf(args, sizeof args, "hyperopt %s " SMALL " %s --study %s", space, study, dir);
            th_rmtree(dir);
            rc = vixen("", args);
        }
        if (rc != 0) fail_msg("resume after a cut at step %d: exit %d: %s", at, rc, err);
        assert_same_trials(ref, dir, -1);
    }
    print_message("kill -9 at %d points of a 8-trial study, each resumed to the uninterrupted "
                  "result\n",
                  kills);
    assert_true(kills >= 8);
    th_rmtree(root);
}

/* Usage errors are errors, not crashes: --resume with settings it would ignore, a study folder
 * path too long (it once crashed on a null study), no SPACE, no --study. */
static void test_command_errors(void **state)
{
    (void)state;
    char root[64], space[128], args[4096], longp[600];
    study_folder(root, sizeof root, space, sizeof space);
    const char *bad[] = {"--plan",     "--swarm 3",        "--generations 2", "--seed 4",
                         "--no-prune", "--prune-warmup 1", "--margin 0.3",    "--seeds 2"};
    for (int i = 0; i < 8; i++) {
        snprintf(args, sizeof args, "hyperopt --resume %s %s", root, bad[i]);
        assert_int_equal(vixen("", args), 2);
        assert_non_null(strstr(err, "--resume takes the study's own"));
    }
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    snprintf(args, sizeof args, "hyperopt %s " SMALL " --study %s/%s", space, root, longp);
    assert_int_equal(vixen("", args), 1);
    assert_non_null(strstr(err, "too long"));
    assert_int_equal(vixen("", "hyperopt --study x"), 2);
    /* a concurrency of 0 is the budget's choice, not one a user asks for: 1..4096 */
    snprintf(args, sizeof args, "hyperopt %s " SMALL " --plan --concurrency 0", space);
    assert_int_equal(vixen("", args), 2);
    /* a margin outside [0, 1) is a usage error naming the flag (it had been exit 1) */
    snprintf(args, sizeof args, "hyperopt %s " SMALL " --plan --margin 1.5", space);
    assert_int_equal(vixen("", args), 2);
    assert_non_null(strstr(err, "--margin 1.5: a share of the budget in [0, 1)"));
    snprintf(args, sizeof args, "hyperopt %s", space);
    assert_int_equal(vixen("", args), 2);
    assert_non_null(strstr(err, "--study"));
    snprintf(args, sizeof args, "hyperopt %s " SMALL " --study %s/l --launcher two", space, root);
    assert_int_equal(vixen("", args), 2);
    assert_non_null(strstr(err, "--launcher takes threads or one, not 'two'"));
    snprintf(args, sizeof args, "hyperopt %s " SMALL " --study %s/f --fuse maybe", space, root);
    assert_int_equal(vixen("", args), 2);
    assert_non_null(strstr(err, "--fuse takes auto, on or off, not 'maybe'"));
    /* trials that differ only in the learning rate, grouped on request: the log says how */
    char lr_space[160];
    snprintf(lr_space, sizeof lr_space, "%s/lr.yaml", root);
    th_write_str(lr_space, "dqn.lr: {type: logfloat, low: 1.0e-4, high: 3.0e-3}\n");
    snprintf(args, sizeof args,
             "hyperopt %s " SMALL " --set train.epochs=2 --study %s/fused --swarm 3 "
             "--generations 1 --concurrency 3 --fuse on",
             lr_space, root);
    assert_int_equal(vixen("", args), 0);
    assert_non_null(
        strstr(err, "g0-p0-s0 g0-p1-s0 g0-p2-s0 train as one group (one after another"));
    assert_non_null(strstr(err, "3 running (3 in groups)")); /* the progress line */
    /* its generation counts from 1: the one generation of --generations 1 is "1/1" */
    assert_non_null(strstr(err, "hyperopt: generation 1/1 | "));
    snprintf(args, sizeof args, "hyperopt status %s/none", root);
    assert_int_equal(vixen("", args), 1);
    assert_non_null(strstr(err, "no study here"));
    /* nor does a resume make the folder it found no study in (it had left none/lock) */
    snprintf(args, sizeof args, "hyperopt --resume %s/none", root);
    assert_int_equal(vixen("", args), 1);
    assert_non_null(strstr(err, "no study here"));
    snprintf(args, sizeof args, "%s/none", root);
    assert_int_not_equal(access(args, F_OK), 0);
    th_rmtree(root);
}

/* ---- out of memory ------------------------------------------------------------------------------
 */

/* The estimate's parts, each against its documented sizes computed here (docs/hyperopt.md): the
 * DQN's six copies of the weights; the replay's bytes a transition plus 4; the rollout's T·N·n
 * staging slots (2 observations, the actions, the reward, 3 flag bytes), packed again with 12
 * bytes more when n > 1, and the n-step rings (n observations, actions and rewards an
 * environment); the CPU learner's three rows of batch buffers and 1 MB fixed, a GPU's 2 MB fixed
 * and at least two networks' 4 MB GEMM workspaces. A part counted low (trials planned past what
 * fits) fails here. */
static void test_estimate_parts(void **state)
{
    (void)state;
    vx_train_cfg *base = small_base();
    vx_err e;
    vx_trial_memory cpu, gpu, n3;
    assert_int_equal(vx_trial_memory_of(base, VX_DEVICE_CPU, &cpu, &e), VX_OK);
    assert_int_equal(vx_trial_memory_of(base, VX_DEVICE_CUDA, &gpu, &e), VX_OK);
    vx_train_cfg *t = malloc(sizeof *t);
    *t = *base;
    assert_int_equal(vx_train_cfg_set(t, "dqn.n_step", "3", "t", &e), VX_OK);
    assert_int_equal(vx_trial_memory_of(t, VX_DEVICE_CPU, &n3, &e), VX_OK);
    const vx_dqn_settings *dq = vx_train_algo_settings(base, "dqn");
    vx_qnet_cfg net;
    vx_dqn_net_cfg(dq, &net);
    vx_qnet_layout L;
    vx_loss_shape shape;
    assert_int_equal(vx_dqn_layout(&dq->learner, &net, &L, &shape, &e), VX_OK);
    const double P = (double)L.n_params, D = VX_OBS_DIM, A = VX_ACTION_BRANCHES;
    const double N = 16, T = 40, B = 32, C = 4000, O = L.out_dim, MB = 1 << 20;
    assert_true(cpu.params == (int64_t)L.n_weights);
    assert_true((double)cpu.weights == P * 4 * 6);
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, dq->replay_kind, (size_t)C);
    rc.obs_dim = VX_OBS_DIM;
    assert_true((double)cpu.replay == C * ((double)vx_replay_bytes_per_transition(&rc) + 4));
    double slot = 2 * D * 4 + A * 4 + 4 + 3;
    double more = N * T * 3 * slot - N * T * slot  /* 3 slots a step instead of 1 */
                  + N * T * 3 * (slot + 8 + 4)     /* packed again, flags and positions */
                  + N * (3 - 1) * (D + A + 1) * 4; /* the rings' two more places */
    assert_true((double)n3.envs - (double)cpu.envs == more);
    assert_true((double)cpu.activations == B * (O * 4 + 2 * D * 4 + A * 4 + 40) * 3);
    assert_true((double)cpu.fixed == MB && (double)gpu.fixed == 2 * MB);
    assert_true((double)gpu.activations >= 2 * 4 * MB);
    assert_true(gpu.weights == cpu.weights && gpu.replay == cpu.replay);
    assert_int_equal(gpu.total, gpu.weights + gpu.activations + gpu.replay + gpu.envs + gpu.fixed);
    free(t), free(base);
}

/* The estimate's parts that move with a setting, each difference against its documented sizes
 * (docs/hyperopt.md) computed here in float64:
 * - a day more of market: 390 bars of features (4 bytes each), OHLC (8 each) and a reward unit;
 * - an environment more: its acting network's forward row (the trunk, the value head and each
 *   branch's head, the output), its T·n staging slots (packed again when n > 1), three
 *   observations, the n-step ring's n places, 96 bytes and its state;
 * - n = 2 packs the rollout again (the packing starts at n = 2, not 3);
 * - on a GPU, the learner's networks at batch B: the online over 2B rows forward and B backward
 *   with a GEMM workspace of 4 MB (8 KB a row, at least 4 MB) and 1 MB a head, the target over B
 *   rows with 1 MB and a quarter MB a head, and the batch buffers;
 * - a rank buffer holds at least one more copy of its (priority, slot) pairs than the order and
 *   cdf arrays its bytes a transition count: the sort of the order is not in place. */
static void test_estimate_moves_with_settings(void **state)
{
    (void)state;
    vx_train_cfg *base = small_base(), *t = malloc(sizeof *t);
    vx_err e;
    const vx_dqn_settings *dq = vx_train_algo_settings(base, "dqn");
    vx_qnet_cfg net;
    vx_dqn_net_cfg(dq, &net);
    vx_qnet_layout L;
    vx_loss_shape shape;
    assert_int_equal(vx_dqn_layout(&dq->learner, &net, &L, &shape, &e), VX_OK);
    const double D = VX_OBS_DIM, A = VX_ACTION_BRANCHES, T = 40, MB = 1 << 20;
    const double O = L.out_dim, Z = net.atoms, Hh = net.head_hidden, heads = net.n_branches + 1;
    const double slot = 2 * D * 4 + A * 4 + 4 + 3;
    double fwd = Hh + Z + O; /* a forward row: trunk, value head, each branch's head, output */
    for (int l = 0; l < net.n_trunk; l++) fwd += net.trunk[l];
    for (int d = 0; d < net.n_branches; d++) fwd += Hh + net.branch[d] * Z;
    vx_trial_memory a, b;
    assert_int_equal(vx_trial_memory_of(base, VX_DEVICE_CPU, &a, &e), VX_OK);
    /* a day more */
    *t = *base;
    assert_int_equal(vx_train_cfg_set(t, "data.synth_days", "13", "t", &e), VX_OK);
    assert_int_equal(vx_trial_memory_of(t, VX_DEVICE_CPU, &b, &e), VX_OK);
    assert_true((double)b.envs - (double)a.envs == 390 * (VX_MARKET_FEATURES * 4 + 4 * 8 + 8));
    assert_true((double)b.total - (double)a.total == (double)b.envs - (double)a.envs);
    /* an environment more, at n = 1 and at n = 2 */
    for (int n = 1; n <= 2; n++) {
        char nv[16];
        snprintf(nv, sizeof nv, "%d", n);
        *t = *base;
        assert_int_equal(vx_train_cfg_set(t, "dqn.n_step", nv, "t", &e), VX_OK);
        assert_int_equal(vx_trial_memory_of(t, VX_DEVICE_CPU, &a, &e), VX_OK);
        assert_int_equal(vx_train_cfg_set(t, "train.envs", "17", "t", &e), VX_OK);
        assert_int_equal(vx_trial_memory_of(t, VX_DEVICE_CPU, &b, &e), VX_OK);
        double per_env = 4 * fwd + T * n * slot + (n > 1 ? T * n * (slot + 8 + 4) : 0) + 3 * D * 4 +
                         n * (D + A + 1) * 4 + 96 + (double)sizeof(vx_env_state);
        if ((double)b.envs - (double)a.envs != per_env)
            fail_msg("n = %d: an environment more adds %.0f bytes, by hand %.0f", n,
                     (double)b.envs - (double)a.envs, per_env);
    }
    /* the GPU learner's networks, whole, at batch 32 and 64 (the trunk's two workspaces at their
     * 4 MB: its own and its weight gradients' side stream's) */
    size_t hmax, amax;
    vx_qnet_widths(&L, &hmax, &amax);
    const double htop = net.n_trunk ? net.trunk[net.n_trunk - 1] : net.in_dim;
    const double bwd = Z + 2 * (double)hmax + heads * (Z + (double)amax + Hh + htop);
    for (int B = 32; B <= 64; B *= 2) {
        char bv[16];
        snprintf(bv, sizeof bv, "%d", B);
        *t = *base;
        assert_int_equal(vx_train_cfg_set(t, "dqn.batch", bv, "t", &e), VX_OK);
        assert_int_equal(vx_trial_memory_of(t, VX_DEVICE_CUDA, &a, &e), VX_OK);
        double online = (2 * B * fwd + B * bwd) * 4 + 2 * 4 * MB + heads * MB;
        double target = B * fwd * 4 + MB + heads * MB / 4;
        double want = online + target + B * (O * 4 + 2 * D * 4 + A * 4 + 40);
        if ((double)a.activations != want)
            fail_msg("GPU activations at batch %d: %.0f, by hand %.0f", B, (double)a.activations,
                     want);
    }
    /* a rank buffer */
    *t = *base;
    assert_int_equal(vx_train_cfg_set(t, "replay.kind", "rank", "t", &e), VX_OK);
    assert_int_equal(vx_trial_memory_of(t, VX_DEVICE_CPU, &a, &e), VX_OK);
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, VX_REPLAY_RANK, 4000);
    rc.obs_dim = VX_OBS_DIM;
    assert_true((double)a.replay >= 4000 * ((double)vx_replay_bytes_per_transition(&rc) + 4 + 12));
    free(t), free(base);
}

/* PPO's estimate on the CPU, each part against its documented sizes computed here: 4 copies of
 * the weights; the actor-critic over 2N acting rows and M minibatch rows, a row its trunk outputs
 * (twice with separate trunks), logits, value and three backward rows of the widest layer, and
 * the minibatch's gathered rows; the rollout's T·N steps (observation, 7 floats, actions, 2 flag
 * bytes, 3 more floats, a shuffle key an update epoch, 8 bytes of permutation); the environments
 * with their market; 1 MB fixed. 15 environments × 40 steps in 8 minibatches: M = 75 rows. */
static void test_estimate_ppo(void **state)
{
    (void)state;
    vx_train_cfg *c = small_base();
    vx_err e;
    static const char *ppo[][2] = {{"train.algo", "ppo"},
                                   {"train.envs", "15"},
                                   {"train.steps_per_epoch", "40"},
                                   {"ppo.minibatches", "8"}};
    for (size_t i = 0; i < sizeof ppo / sizeof *ppo; i++)
        if (vx_train_cfg_set(c, ppo[i][0], ppo[i][1], "test", &e)) fail_msg("%s", e.msg);
    const vx_ppo_settings *ps = vx_train_algo_settings(c, "ppo");
    vx_ac_cfg net;
    vx_ppo_net_cfg(ps, &net);
    vx_ac_layout L;
    assert_int_equal(vx_ac_layout_make(&net, &L, &e), VX_OK);
    const double N = 15, TN = 600, M = 75, E = ps->update_epochs, MB = 1 << 20;
    const double D = VX_OBS_DIM, A = VX_ACTION_BRANCHES, K = net.n_logits;
    double W = net.in_dim, sum = 0;
    for (int l = 0; l < net.n_trunk; l++) {
        W = fmax(W, net.trunk[l]);
        sum += net.trunk[l] * (net.shared ? 1 : 2);
    }
    vx_trial_memory m;
    assert_int_equal(vx_trial_memory_of(c, VX_DEVICE_CPU, &m, &e), VX_OK);
    assert_true(m.params == (int64_t)L.n_weights);
    assert_int_equal(m.batch, 75);
    assert_true((double)m.weights == (double)L.n_params * 4 * 4);
    assert_true((double)m.activations ==
                (2 * N + M) * (sum + K + 1 + 3 * W) * 4 + M * (D * 4 + K * 4 + A * 4 + 24));
    assert_true((double)m.replay == TN * (D * 4 + 7 * 4 + A * 4 + 2 + 3 * 4 + E * 4 + 8));
    assert_true((double)m.envs == N * (4 * D * 4 + 24) + N * (double)sizeof(vx_env_state) +
                                      12 * 390 * (VX_MARKET_FEATURES * 4 + 4 * 8 + 8));
    assert_true((double)m.fixed == MB);
    assert_int_equal(m.total, m.weights + m.activations + m.replay + m.envs + m.fixed);
    free(c);
}

/* layer 1: concurrency = floor(available after the margin / the largest trial's estimate) */
static void test_layer1_estimate_and_margin(void **state)
{
    (void)state;
    vx_train_cfg *base = small_base();
    vx_space sp;
    vx_err e;
    assert_int_equal(vx_space_load_text(&sp, space_text, strlen(space_text), "s", &e), VX_OK);
    vx_trial_memory m;
    assert_int_equal(vx_trial_memory_of(base, VX_DEVICE_CPU, &m, &e), VX_OK);
    /* the largest the space allows: n_step 3 (the rings), otherwise as the base */
    vx_train_cfg *t = malloc(sizeof *t);
    *t = *base;
    assert_int_equal(vx_train_cfg_set(t, "dqn.n_step", "3", "t", &e), VX_OK);
    vx_trial_memory worst;
    assert_int_equal(vx_trial_memory_of(t, VX_DEVICE_CPU, &worst, &e), VX_OK);
    assert_true(worst.total > m.total);
    assert_int_equal(m.total, m.weights + m.activations + m.replay + m.envs + m.fixed);
    vx_dqn_settings *dq = vx_train_algo_settings(base, "dqn");
    (void)dq;
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, VX_REPLAY_PROPORTIONAL, 4000);
    rc.obs_dim = VX_OBS_DIM;
    assert_true(m.replay >= 4000 * vx_replay_bytes_per_transition(&rc));
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    dc.budget = (size_t)(worst.total * 7.2); /* × 0.8 = 5.76 trials: 5 */
    vx_device *dev;
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    vx_study_cfg c;
    small_cfg(&c, 6, 1, 6);
    vx_plan p;
    assert_int_equal(vx_study_plan(&c, &sp, base, dev, &p, &e), VX_OK);
    assert_int_equal(p.trial.total, worst.total);
    assert_int_equal(p.max_concurrent, 5);
    c.margin = 0.5; /* × 0.5 = 3.6: 3 */
    assert_int_equal(vx_study_plan(&c, &sp, base, dev, &p, &e), VX_OK);
    assert_int_equal(p.max_concurrent, 3);
    c.concurrency = 0; /* from the budget: the first chunk is half, rounded up */
    assert_int_equal(vx_study_plan(&c, &sp, base, dev, &p, &e), VX_OK);
    assert_int_equal(p.first_chunk, (p.max_concurrent + 1) / 2);
    c.cpu_cores = 8; /* cores enough for memory's 3 (odd: ceil(3 / 2) = 2, not 1) */
    assert_int_equal(vx_study_plan(&c, &sp, base, dev, &p, &e), VX_OK);
    assert_int_equal(p.max_concurrent, 3);
    assert_int_equal(p.first_chunk, 2);
    /* the batch bounds: the largest power of two whose trial (the base at that batch) fits the
     * available memory alone, and the largest that fits a third of it */
    int want_alone = 0, want_shared = 0;
    for (int b = 2; b <= (1 << 20); b *= 2) {
        char bv[16];
        snprintf(bv, sizeof bv, "%d", b);
        *t = *base;
        assert_int_equal(vx_train_cfg_set(t, "dqn.batch", bv, "t", &e), VX_OK);
        vx_trial_memory bm;
        assert_int_equal(vx_trial_memory_of(t, VX_DEVICE_CPU, &bm, &e), VX_OK);
        if (bm.total <= p.available) want_alone = b;
        if (bm.total <= p.available / 3) want_shared = b;
    }
    print_message("batch bounds: %d alone, %d in a third\n", want_alone, want_shared);
    assert_true(want_shared >= 2 && want_alone > want_shared && want_alone < (1 << 20));
    assert_int_equal(p.batch_max, want_alone);
    assert_int_equal(p.batch_max_shared, want_shared);
    c.cpu_cores = 0;
    vx_device_close(dev);
    dc.budget = worst.total; /* × 0.8: not even one */
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    c.margin = 0.2;
    assert_int_equal(vx_study_plan(&c, &sp, base, dev, &p, &e), VX_ERR_NOMEM);
    assert_non_null(strstr(e.msg, "one trial needs"));
    vx_device_close(dev);
    free(t), free(base);
}

/* The largest trial combines every parameter's largest setting: with n-step 1..3 and a replay of
 * 1,000..8,000 transitions, the plan's trial is the one at n-step 3 with 8,000 (more than either
 * alone). */
static void test_layer1_worst_trial_combines_parameters(void **state)
{
    (void)state;
    const char *text = "dqn.n_step: {type: int, low: 1, high: 3}\n"
                       "replay.capacity: {type: int, low: 1000, high: 8000}\n";
    vx_space sp;
    vx_err e;
    assert_int_equal(vx_space_load_text(&sp, text, strlen(text), "s", &e), VX_OK);
    vx_train_cfg *base = small_base(), *t = malloc(sizeof *t);
    *t = *base;
    assert_int_equal(vx_train_cfg_set(t, "dqn.n_step", "3", "t", &e), VX_OK);
    assert_int_equal(vx_train_cfg_set(t, "replay.capacity", "8000", "t", &e), VX_OK);
    vx_trial_memory worst;
    assert_int_equal(vx_trial_memory_of(t, VX_DEVICE_CPU, &worst, &e), VX_OK);
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    dc.budget = worst.total * 10;
    vx_device *dev;
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    vx_study_cfg c;
    small_cfg(&c, 4, 1, 2);
    vx_plan p;
    assert_int_equal(vx_study_plan(&c, &sp, base, dev, &p, &e), VX_OK);
    assert_int_equal(p.trial.total, worst.total);
    assert_int_equal(p.trial.replay, worst.replay);
    assert_int_equal(p.trial.envs, worst.envs);
    vx_device_close(dev);
    free(t), free(base);
}

/* The device holds `limit` bytes for the trials: a share's reservation past it is refused as the
 * device would refuse it. */
typedef struct {
    vx_device *dev;
    size_t limit;
    int refused;
} device_limit;

static int device_full(void *ctx, const vx_device *d, const char *owner, size_t bytes)
{
    (void)d, (void)owner;
    device_limit *l = ctx;
    vx_device_mem m;
    vx_device_memory(l->dev, &m);
    if (m.reserved + bytes <= l->limit) return 0;
    l->refused++;
    return VX_FAULT_DEVICE;
}

/* layer 2: a device that holds 2.5 trials though the plan allows four: the chunk of 4 (asked
 * for) is refused in part, halved, and run again; the results are those of the study that never
 * ran out */
static void test_layer2_refused_chunk_halves(void **state)
{
    (void)state;
    char root[64], ref[128], dir[128];
    th_tmpdir(root, sizeof root);
    snprintf(ref, sizeof ref, "%s/ref", root);
    snprintf(dir, sizeof dir, "%s/oom", root);
    vx_study_cfg c;
    small_cfg(&c, 4, 2, 1);
    vx_err e;
    if (run_study(ref, &c, NULL, &e)) fail_msg("%s", e.msg);
    size_t n;
    vx_trial *t = trials_of(ref, &n);
    int64_t per = t[0].mem_measured; /* what one trial really reserves */
    free(t);
    assert_true(per > 0);
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    vx_device *dev;
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    device_limit lim = {dev, (size_t)(2.5 * (double)per), 0};
    vx_mem_set_fault(device_full, &lim);
    small_cfg(&c, 4, 2, 4);
    uint64_t t0 = vx_now_ns();
    vx_status st = run_study(dir, &c, dev, &e);
    double took = vx_seconds_since(t0);
    vx_mem_set_fault(NULL, NULL);
    if (st) fail_msg("%s", e.msg);
    assert_true(lim.refused >= 1);
    /* the refused trials end before they are ready: the start gate (engine.c) must not wait
     * for them until its deadline (60 s) */
    printf("layer 2: the study with refused trials took %.1f s\n", took);
    assert_true(took < 30);
    assert_same_trials(ref, dir, -1);
    /* the store's events say what happened */
    vx_study_event *ev = events_of(dir, &n);
    int halved = 0;
    for (size_t i = 0; i < n; i++) halved += strstr(ev[i].note, "concurrency 4 -> 2") != NULL;
    assert_int_equal(halved, 1);
    free(ev);
    vx_device_close(dev);
    th_rmtree(root);
}

/* layer 2, ramp-up: with the concurrency left to the budget, the first chunk runs at half the
 * estimate's, then the rest at what the first measured */
static void test_layer2_ramp_up(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    vx_train_cfg *base = small_base();
    vx_space sp;
    vx_err e;
    assert_int_equal(vx_space_load_text(&sp, space_text, strlen(space_text), "s", &e), VX_OK);
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    vx_study_cfg c;
    small_cfg(&c, 4, 1, 0);
    vx_device *dev;
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    vx_plan p;
    assert_int_equal(vx_study_plan(&c, &sp, base, dev, &p, &e), VX_OK);
    vx_study *s;
    assert_int_equal(vx_study_create(dir, &c, space_text, strlen(space_text), base, &s, &e), VX_OK);
    assert_int_equal(vx_study_run(s, dev, NULL, NULL, NULL, &e), VX_OK);
    vx_study_close(s);
    size_t n;
    vx_study_event *ev = events_of(dir, &n);
    assert_true(n >= 2);
    assert_int_equal(ev[0].running, p.first_chunk);
    if (p.max_concurrent > p.first_chunk) {
        assert_non_null(strstr(ev[0].note, "a trial"));
        assert_int_equal(ev[1].concurrency, p.max_concurrent);
    }
    print_message("ramp-up: plan %d at once, first chunk %d, then %d (%s)\n", p.max_concurrent,
                  p.first_chunk, ev[1].concurrency, ev[0].note);
    free(ev);
    vx_device_close(dev);
    free(base);
    th_rmtree(dir);
}

/* Refuses, once, the replay buffer made on the first share whose label begins with `label`, as
 * the share would. */
typedef struct {
    const char *label;
    int done;
} refusal;

static int refuse_replay_once(void *ctx, const vx_device *d, const char *owner, size_t bytes)
{
    (void)bytes;
    refusal *r = ctx; /* asked from every trial's thread: the first match takes it */
    if (strncmp(vx_device_label(d), r->label, strlen(r->label)) != 0 ||
        strcmp(owner, "replay") != 0)
        return 0;
    int never = 0;
    return __atomic_compare_exchange_n(&r->done, &never, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)
               ? VX_FAULT_REFUSE
               : 0;
}

/* A study of `swarm` trials at once (one generation, no pruning) in <root>/ref, then the same in
 * <root>/oom with r's refusal and its trials grouped as `fuse` says; its status. */
static vx_status study_and_refused(char *root, size_t n_root, char *ref, char *dir, size_t n,
                                   int swarm, int fuse, refusal *r, vx_err *e)
{
    th_tmpdir(root, n_root);
    snprintf(ref, n, "%s/ref", root);
    snprintf(dir, n, "%s/oom", root);
    vx_study_cfg c;
    small_cfg(&c, swarm, 1, swarm);
    c.prune = 0;
    if (run_study(ref, &c, NULL, e)) fail_msg("%s", e->msg);
    vx_mem_set_fault(refuse_replay_once, r);
    vx_status st = run_study_fused(dir, &c, NULL, fuse, e);
    vx_mem_set_fault(NULL, NULL);
    return st;
}

/* layer 3: that trial halves its batch (32 -> 16) and runs again; every other trial's result is
 * the one of the study that never ran out of memory */
static void test_layer3_trial_halves_its_batch(void **state)
{
    (void)state;
    char root[64], ref[128], dir[128];
    refusal r = {"g0-p1-s0", 0}; /* that trial's first attempt */
    vx_err e;
    vx_status st = study_and_refused(root, sizeof root, ref, dir, sizeof ref, 3, -1, &r, &e);
    if (st) fail_msg("%s", e.msg);
    assert_true(r.done);
    size_t n;
    vx_trial *t = trials_of(dir, &n);
    assert_int_equal(t[1].halvings, 1);
    assert_int_equal(t[1].batch, 16);
    assert_int_equal(t[1].status, VX_TRIAL_DONE);
    assert_int_equal(t[0].halvings + t[2].halvings, 0);
    /* its result is that of its config trained at batch 16 from scratch */
    vx_train_cfg *cfg = small_base();
    char line[256];
    for (const char *p = t[1].params; sscanf(p, "%255[^\n]", line) == 1;) {
        char *eq = strchr(line, '=');
        *eq = '\0';
        if (vx_train_cfg_set(cfg, line, eq + 1, "t", &e)) fail_msg("%s", e.msg);
        p = strchr(p, '\n') + 1;
    }
    assert_int_equal(vx_train_cfg_set(cfg, "dqn.batch", "16", "t", &e), VX_OK);
    cfg->final_test = 0;
    snprintf(cfg->run_dir, sizeof cfg->run_dir, "%s/alone", root);
    if (vx_train_run(cfg, NULL, 0, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
    char ck[256];
    snprintf(ck, sizeof ck, "%s/alone/checkpoint", root);
    int epoch;
    double val;
    assert_true(vx_ckpt_best(ck, &epoch, &val));
    assert_true(same_bits(val, t[1].objective));
    free(cfg), free(t);
    assert_same_trials(ref, dir, 1);
    th_rmtree(root);
}

/* A group its share refuses fails as one; its members run again alone, with no halving, and
 * every trial's result is the one of the study that never grouped or ran out of memory. */
static void test_refused_group_runs_its_members_alone(void **state)
{
    (void)state;
    char root[64], ref[128], dir[128];
    refusal r = {"group-of-", 0}; /* the first group's share */
    vx_err e;
    th_log_start();
    vx_status st = study_and_refused(root, sizeof root, ref, dir, sizeof ref, 6, 1, &r, &e);
    const char *log = th_log_text();
    if (st) fail_msg("%s", e.msg);
    assert_true(r.done);
    assert_non_null(strstr(log, "its group failed"));
    assert_non_null(strstr(log, "it runs again alone"));
    th_log_stop();
    assert_true(grouped_chunks(dir) > 0);
    size_t n;
    vx_trial *t = trials_of(dir, &n);
    for (size_t i = 0; i < n; i++) assert_int_equal(t[i].halvings, 0);
    free(t);
    assert_same_trials(ref, dir, -1);
    th_rmtree(root);
}

/* layer 4: memory held on the device by someone else (92% of the budget) leaves under 10% free:
 * the concurrency halves before the chunk, with a warning in the log and the store */
static void test_layer4_watchdog(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    vx_train_cfg *base = small_base();
    vx_trial_memory m;
    vx_err e;
    assert_int_equal(vx_trial_memory_of(base, VX_DEVICE_CPU, &m, &e), VX_OK);
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    dc.budget = 100 * m.total;
    vx_device *dev;
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    vx_mem ballast;
    vx_mem_init(&ballast, dev, "another tenant");
    void *p;
    assert_int_equal(vx_mem_alloc(&ballast, 92 * m.total, &p, &e), VX_OK); /* never touched */
    vx_study_cfg c;
    small_cfg(&c, 4, 1, 4);
    th_log_start();
    vx_status st = run_study(dir, &c, dev, &e);
    const char *log = th_log_text();
    if (st) fail_msg("%s", e.msg);
    assert_non_null(strstr(log, "% free: concurrency 4 -> 2"));
    th_log_stop();
    vx_mem_release(&ballast);
    vx_device_close(dev);
    free(base);
    th_rmtree(dir);
}

/* ---- what a user sees --------------------------------------------------------------------- */

/* Fields of one CSV line, quotes honoured. */
static int csv_fields(const char *line)
{
    int n = 1, quoted = 0;
    for (const char *c = line; *c && *c != '\n'; c++) {
        if (*c == '"') quoted = !quoted;
        else if (*c == ',' && !quoted) n++;
    }
    return n;
}

static volatile int g_stop;

static void stop_at_first_chunk(const vx_study_progress *p, void *ctx)
{
    (void)ctx;
    if (p->running > 0) g_stop = 1; /* the chunk's trials see it at their next epoch */
}

static char *read_text(const char *path)
{
    size_t n;
    char *t = (char *)th_read(path, &n);
    t = realloc(t, n + 1);
    assert_non_null(t);
    t[n] = '\0';
    return t;
}

static char *printed(vx_status (*fn)(const char *, FILE *, vx_err *), const char *dir);

/* trials.csv keeps a value with commas in one column; the report's table shows each key's own
 * value where one key is another's prefix (env.reward, env.reward_scale) and names as the best
 * trial the one best.yaml holds (seeds 2: the best particle's first seed); a study stopped while
 * its trials run leaves none "running" in the store, and resumes to the uninterrupted result. */
static void test_outputs_and_a_stop(void **state)
{
    (void)state;
    char root[64], a[128], b[128], path[512];
    th_tmpdir(root, sizeof root);
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(b, sizeof b, "%s/b", root);
    /* the longer key first: a search for "env.reward" alone would find its line */
    const char *sp = "dqn.trunk: {type: categorical, values: [\"16,16\", \"32,32\"]}\n"
                     "env.reward_scale: {type: float, low: 50, high: 100}\n"
                     "env.reward: {type: categorical, values: [pnl, vol]}\n";
    vx_train_cfg *base = small_base();
    vx_study_cfg c;
    small_cfg(&c, 3, 2, 2);
    c.seeds = 2;
    vx_study *s;
    vx_err e;
    assert_int_equal(vx_study_create(a, &c, sp, strlen(sp), base, &s, &e), VX_OK);
    if (vx_study_run(s, NULL, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
    vx_study_close(s);
    snprintf(path, sizeof path, "%s/trials.csv", a);
    char *csv = read_text(path);
    int want = csv_fields(csv), rows = 0;
    for (char *l = strchr(csv, '\n'); l && l[1]; l = strchr(l + 1, '\n'), rows++)
        if (csv_fields(l + 1) != want)
            fail_msg("a row of %d fields, the header %d: %.200s", csv_fields(l + 1), want, l + 1);
    assert_int_equal(rows, 12);
    assert_true(strstr(csv, ",\"16,16\",") || strstr(csv, ",\"32,32\","));
    free(csv);
    snprintf(path, sizeof path, "%s/report.html", a);
    char *html = read_text(path);
    /* the table's columns: trial .. seconds (10), dqn.trunk, env.reward_scale, env.reward */
    const char *tb = strstr(html, "<section id=\"best\">");
    assert_non_null(tb);
    int cells = 0;
    for (const char *r = strstr(tb, "<tbody>"); (r = strstr(r + 1, "<tr")) != NULL;) {
        const char *end = strstr(r, "</tr>");
        int col = 0;
        for (const char *td = strstr(r, "<td>"); td && td < end; td = strstr(td + 1, "<td>"))
            if (++col == 13) {
                if (strncmp(td + 4, "pnl<", 4) != 0 && strncmp(td + 4, "vol<", 4) != 0)
                    fail_msg("env.reward shows %.20s", td + 4);
                cells++;
            }
    }
    assert_true(cells >= 1);
    /* the best trial the page names is the one best.yaml was written from */
    size_t nt;
    vx_trial *t = trials_of(a, &nt);
    snprintf(path, sizeof path, "%s/best.yaml", a);
    vx_train_cfg *by = malloc(sizeof *by);
    vx_train_cfg_default(by);
    assert_int_equal(vx_train_cfg_load(by, path, &e), VX_OK);
    const char *named = strstr(html, "the best trial: ");
    assert_non_null(named);
    long id = atol(named + strlen("the best trial: "));
    assert_true(id >= 0 && (size_t)id < nt);
    assert_int_equal(t[id].seed_index, 0);
    char *st = printed(vx_study_status, a), said[64]; /* and so does status */
    snprintf(said, sizeof said, "best trial: %ld (", id);
    if (!strstr(st, said)) fail_msg("status does not say '%s':\n%s", said, st);
    free(st);
    assert_true(by->seed == t[id].train_seed);
    assert_int_equal(by->threads, 1); /* the trial's BLAS threads: the same last bits */
    assert_int_equal(by->n_files, 0);
    /* a particle's objective is the mean of its seeds' (NaN if one has none): the swarm as stored
     * before generation 1 holds each particle's best of generation 0, i.e. that mean */
    snprintf(path, sizeof path, "%s/study.db", a);
    sqlite3 *db;
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT particle, pbest_f FROM swarm WHERE generation = 1 "
                                        "ORDER BY particle",
                                        -1, &q, NULL),
                     SQLITE_OK);
    int particles = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        int i = sqlite3_column_int(q, 0);
        double mean = (t[i * 2].objective + t[i * 2 + 1].objective) / 2; /* generation 0's */
        double got = sqlite3_column_type(q, 1) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 1);
        if (!(isnan(mean) ? isnan(got) : got == mean))
            fail_msg("particle %d: best %.17g, its seeds' mean %.17g", i, got, mean);
        particles++;
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    assert_int_equal(particles, 3);
    free(by), free(html), free(t);
    /* stopped while the first chunk runs: nothing left "running" in the store */
    g_stop = 0;
    assert_int_equal(vx_study_create(b, &c, sp, strlen(sp), base, &s, &e), VX_OK);
    assert_int_equal(vx_study_run(s, NULL, stop_at_first_chunk, NULL, &g_stop, &e), VX_ERR_STOPPED);
    vx_study_close(s);
    t = trials_of(b, &nt);
    assert_true(nt >= 1);
    for (size_t i = 0; i < nt; i++) assert_int_not_equal(t[i].status, VX_TRIAL_RUNNING);
    free(t);
    assert_int_equal(vx_study_open(b, 0, &s, &e), VX_OK);
    if (vx_study_run(s, NULL, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
    vx_study_close(s);
    assert_same_trials(a, b, -1);
    free(base);
    th_rmtree(root);
}

/* ---- best.yaml ----------------------------------------------------------------------------------
 */

static void test_best_yaml_reproduces_the_trial(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    vx_study_cfg c;
    small_cfg(&c, 4, 2, 2);
    vx_err e;
    if (run_study(dir, &c, NULL, &e)) fail_msg("%s", e.msg);
    size_t n;
    vx_trial *t = trials_of(dir, &n);
    const vx_trial *best = NULL;
    for (size_t i = 0; i < n; i++)
        if (t[i].status >= VX_TRIAL_DONE && isfinite(t[i].objective) &&
            (!best || t[i].objective > best->objective))
            best = &t[i];
    assert_non_null(best);
    char path[512];
    snprintf(path, sizeof path, "%s/best.yaml", dir);
    vx_train_cfg *cfg = malloc(sizeof *cfg);
    vx_train_cfg_default(cfg);
    if (vx_train_cfg_load(cfg, path, &e)) fail_msg("%s", e.msg);
    snprintf(cfg->run_dir, sizeof cfg->run_dir, "%s/again", dir);
    assert_int_equal(cfg->final_test, 1);
    vx_eval_report r;
    if (vx_train_run(cfg, NULL, 0, NULL, NULL, &r, &e)) fail_msg("%s", e.msg);
    int epoch;
    double val;
    snprintf(path, sizeof path, "%s/again/checkpoint", dir);
    assert_true(vx_ckpt_best(path, &epoch, &val));
    assert_int_equal(epoch, best->best_epoch);
    if (!same_bits(val, best->objective))
        fail_msg("best.yaml trained alone: %.17g, the trial: %.17g", val, best->objective);
    vx_eval_report_free(&r);
    /* the study's test evaluation is the same checkpoint's */
    snprintf(path, sizeof path, "%s/test.txt", dir);
    size_t tn;
    uint8_t *text = th_read(path, &tn);
    assert_non_null(memmem(text, tn, "tested once", 11));
    free(text);
    /* status reads it back */
    FILE *f = tmpfile();
    assert_int_equal(vx_study_status(dir, f, &e), VX_OK);
    rewind(f);
    char line[4096];
    size_t got = fread(line, 1, sizeof line - 1, f);
    line[got] = '\0';
    fclose(f);
    assert_non_null(strstr(line, "finished: best.yaml"));
    assert_non_null(strstr(line, "8 finished"));
    free(cfg), free(t);
    th_rmtree(dir);
}

/* A store made before trials recorded their rank (no `rank` column) is read as it is by status,
 * and gets the column when a study opens it to go on. */
static void test_store_without_the_rank_column(void **state)
{
    (void)state;
    char root[64], path[128];
    th_tmpdir(root, sizeof root);
    vx_study_cfg c;
    small_cfg(&c, 2, 1, 1);
    vx_err e;
    if (run_study(root, &c, NULL, &e)) fail_msg("%s", e.msg);
    snprintf(path, sizeof path, "%s/study.db", root);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "ALTER TABLE trials DROP COLUMN rank", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    for (int readonly = 1; readonly >= 0; readonly--) {
        vx_store st;
        if (vx_store_open(&st, path, readonly, &e)) fail_msg("%s", e.msg);
        vx_trial *t;
        size_t n;
        if (vx_store_trials(&st, &t, &n, &e)) fail_msg("%s", e.msg);
        assert_int_equal(n, 2);
        assert_int_equal(t[0].rank, 0);
        if (!readonly) assert_int_equal(vx_store_trial_put(&st, &t[0], &e), VX_OK);
        free(t);
        vx_store_close(&st);
    }
    th_rmtree(root);
}

/* ---- the store, the status and the report, from rows written here --------------------------- */

/* The store gives back what it was given: every status (a failed trial's too), NaN as NaN (SQLite
 * keeps it as NULL), each field in its own column, for more rows than the readers' first
 * allocation (64, then doubling); a curve put again replaces the old one; the swarm's rows hold
 * each particle's position, velocity and best as the swarm has them (a best still −inf: NULL); a
 * folder that already holds a store is refused, and that store is left as it was. Every value is
 * a closed form of the row's index, exact in binary64. */
static void test_store_round_trip(void **state)
{
    (void)state;
    char root[64], path[128];
    th_tmpdir(root, sizeof root);
    snprintf(path, sizeof path, "%s/study.db", root);
    vx_store s;
    vx_err e;
    assert_int_equal(vx_store_create(&s, path, &e), VX_OK);
    enum { N = 200, N_EV = 130 };
    vx_trial *t = calloc(N, sizeof *t);
    assert_non_null(t);
    assert_int_equal(vx_store_begin(&s, &e), VX_OK);
    for (int i = 0; i < N; i++) {
        vx_trial *x = &t[i];
        x->id = i, x->generation = i / 10, x->particle = i % 10, x->seed_index = i % 3;
        x->status = (vx_trial_status)(i % 5); /* pending .. failed, in turn */
        x->objective = i % 7 == 0 ? NAN : 0.25 * i - 7;
        x->objective_se = i % 11 == 0 ? NAN : 1.0 / 64 * i;
        x->best_epoch = i % 4, x->epochs = i % 9;
        x->train_seed = 1000003ull * (uint64_t)i + (1ull << 40);
        x->batch = 1 + i, x->halvings = i % 6;
        x->mem_estimate = (int64_t)i << 33, x->mem_measured = (int64_t)i * 12345;
        x->seconds = i % 13 == 0 ? NAN : 0.5 * i;
        x->env_steps = (int64_t)i * 777, x->updates = (int64_t)i * 3, x->rank = i % 4;
        snprintf(x->params, sizeof x->params, "a=%d\nb=x%d\n", i, i);
        if (x->status == VX_TRIAL_FAILED) snprintf(x->error, sizeof x->error, "failed %d", i);
        assert_int_equal(vx_store_trial_put(&s, x, &e), VX_OK);
        vx_curve_point pts[2] = {{0, 0.5 * i, NAN}, {1, NAN, 0.25}};
        assert_int_equal(vx_store_curve_put(&s, i, pts, 2, &e), VX_OK);
    }
    vx_curve_point again = {3, 2.0, 0.125}; /* trial 5's curve, put again: it replaces */
    assert_int_equal(vx_store_curve_put(&s, 5, &again, 1, &e), VX_OK);
    for (int i = 0; i < N_EV; i++) {
        vx_study_event ev;
        memset(&ev, 0, sizeof ev);
        ev.t = 1000.0 + i, ev.generation = i / 7, ev.concurrency = 1 + i % 4, ev.running = i % 3;
        ev.reserved = (int64_t)i << 20, ev.peak = (int64_t)i << 21;
        ev.free_b = (int64_t)i << 22, ev.total = (int64_t)i << 23;
        snprintf(ev.note, sizeof ev.note, "note %d", i);
        assert_int_equal(vx_store_event(&s, &ev, &e), VX_OK);
    }
    assert_int_equal(vx_store_commit(&s, &e), VX_OK);
    /* the swarm of generation 0: particle 0 has a best, the others none yet (−inf) */
    vx_pso_cfg pc;
    vx_pso_cfg_default(&pc);
    pc.swarm = 3;
    const double lo[2] = {0, -1}, hi[2] = {1, 1};
    vx_pso p;
    assert_int_equal(vx_pso_init(&p, &pc, 2, lo, hi, &e), VX_OK);
    assert_int_equal(vx_pso_report(&p, 0, 1.5, &e), VX_OK);
    assert_int_equal(vx_store_swarm_put(&s, &p, &e), VX_OK);
    vx_store_close(&s);

    assert_int_equal(vx_store_open(&s, path, 1, &e), VX_OK);
    vx_trial *r;
    size_t n;
    if (vx_store_trials(&s, &r, &n, &e)) fail_msg("%s", e.msg);
    assert_int_equal(n, N);
    for (int i = 0; i < N; i++) {
        const vx_trial *a = &t[i], *b = &r[i];
        int same = a->id == b->id && a->generation == b->generation && a->particle == b->particle &&
                   a->seed_index == b->seed_index && a->status == b->status &&
                   same_bits(a->objective, b->objective) &&
                   same_bits(a->objective_se, b->objective_se) &&
                   same_bits(a->seconds, b->seconds) && a->best_epoch == b->best_epoch &&
                   a->epochs == b->epochs && a->train_seed == b->train_seed &&
                   a->batch == b->batch && a->halvings == b->halvings &&
                   a->mem_estimate == b->mem_estimate && a->mem_measured == b->mem_measured &&
                   a->env_steps == b->env_steps && a->updates == b->updates && a->rank == b->rank &&
                   strcmp(a->params, b->params) == 0 && strcmp(a->error, b->error) == 0;
        if (!same)
            fail_msg("trial %d read back as id %lld, status %d, objective %.17g (put: status %d, "
                     "objective %.17g)",
                     i, (long long)b->id, (int)b->status, b->objective, (int)a->status,
                     a->objective);
    }
    free(r);
    vx_curve_point *pts;
    int64_t *of;
    if (vx_store_curves(&s, &pts, &of, &n, &e)) fail_msg("%s", e.msg);
    assert_int_equal(n, 2 * N - 1);
    for (size_t k = 0, i = 0; i < N; i++) {
        int m = i == 5 ? 1 : 2;
        for (int j = 0; j < m; j++, k++) {
            assert_int_equal(of[k], (int64_t)i);
            if (i == 5) {
                assert_int_equal(pts[k].epoch, 3);
                assert_true(pts[k].sharpe == 2.0 && pts[k].se == 0.125);
            } else {
                assert_int_equal(pts[k].epoch, j);
                assert_true(j ? isnan(pts[k].sharpe) && pts[k].se == 0.25
                              : pts[k].sharpe == 0.5 * (double)i && isnan(pts[k].se));
            }
        }
    }
    free(pts), free(of);
    vx_study_event *ev;
    if (vx_store_events(&s, &ev, &n, &e)) fail_msg("%s", e.msg);
    assert_int_equal(n, N_EV);
    for (int i = 0; i < N_EV; i++) {
        char note[32];
        snprintf(note, sizeof note, "note %d", i);
        assert_true(ev[i].t == 1000.0 + i);
        assert_int_equal(ev[i].generation, i / 7);
        assert_int_equal(ev[i].concurrency, 1 + i % 4);
        assert_int_equal(ev[i].running, i % 3);
        assert_true(ev[i].reserved == (int64_t)i << 20 && ev[i].peak == (int64_t)i << 21 &&
                    ev[i].free_b == (int64_t)i << 22 && ev[i].total == (int64_t)i << 23);
        assert_string_equal(ev[i].note, note);
    }
    free(ev);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(s.db,
                                        "SELECT generation, particle, x, v, pbest_x, pbest_f "
                                        "FROM swarm ORDER BY particle",
                                        -1, &q, NULL),
                     SQLITE_OK);
    int rows = 0;
    size_t bytes = 2 * sizeof(double);
    while (sqlite3_step(q) == SQLITE_ROW) {
        int i = sqlite3_column_int(q, 1);
        assert_int_equal(i, rows);
        assert_int_equal(sqlite3_column_int(q, 0), 0);
        const double *want[3] = {p.x + 2 * i, p.v + 2 * i, p.pbest_x + 2 * i};
        for (int c = 0; c < 3; c++) {
            assert_int_equal(sqlite3_column_bytes(q, 2 + c), (int)bytes);
            assert_memory_equal(sqlite3_column_blob(q, 2 + c), want[c], bytes);
        }
        if (i == 0) assert_true(sqlite3_column_double(q, 5) == 1.5);
        else assert_int_equal(sqlite3_column_type(q, 5), SQLITE_NULL);
        rows++;
    }
    sqlite3_finalize(q);
    assert_int_equal(rows, 3);
    vx_store_close(&s);
    vx_pso_free(&p);
    /* a second store in its place is refused, and the first keeps its trials */
    e.msg[0] = '\0';
    assert_int_equal(vx_store_create(&s, path, &e), VX_ERR_ARG);
    assert_non_null(strstr(e.msg, "already holds a study"));
    assert_int_equal(vx_store_open(&s, path, 1, &e), VX_OK);
    if (vx_store_trials(&s, &r, &n, &e)) fail_msg("%s", e.msg);
    assert_int_equal(n, N);
    free(r);
    vx_store_close(&s);
    free(t);
    th_rmtree(root);
}

/* Text a function printed to a FILE *. */
static char *printed(vx_status (*fn)(const char *, FILE *, vx_err *), const char *dir)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    vx_err e;
    if (fn(dir, f, &e)) fail_msg("%s", e.msg);
    long n = ftell(f);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* The first cell of each row of the report's table of the best trials: the trials' ids, in its
 * order. */
static int table_ids(const char *html, long *ids, int max, int *first_is_agent)
{
    const char *tb = strstr(html, "<section id=\"best\">");
    assert_non_null(tb);
    const char *body = strstr(tb, "<tbody>"), *end = strstr(tb, "</tbody>");
    int n = 0;
    *first_is_agent = 0;
    for (const char *r = strstr(body, "<tr"); r && r < end && n < max; r = strstr(r + 1, "<tr")) {
        if (n == 0) *first_is_agent = strncmp(r, "<tr class=\"agent\">", 18) == 0;
        ids[n++] = atol(strstr(r, "<td>") + 4);
    }
    return n;
}

/* A new store in a folder of its own (root; its study.db in path) holding a study's settings —
 * generations, seeds, pruning and swarm as given, the defaults for the rest, in the order the
 * store keeps them — and the test space: what vixen hyperopt status and report read, written by
 * hand. */
static void store_of_settings(char *root, size_t rn, char *path, size_t pn, int generations,
                              int seeds, int prune, int swarm, vx_store *s)
{
    th_tmpdir(root, rn);
    snprintf(path, pn, "%s/study.db", root);
    vx_err e;
    assert_int_equal(vx_store_create(s, path, &e), VX_OK);
    vx_pso_cfg pc;
    vx_pso_cfg_default(&pc);
    char settings[512];
    snprintf(settings, sizeof settings,
             "generations=%d\nseeds=%d\nmargin=0.2\nprune=%d\nprune_warmup=2\nswarm=%d\nw=%.17g\n"
             "c1=%.17g\nc2=%.17g\nvmax=%.17g\nseed=1\n",
             generations, seeds, prune, swarm, pc.w, pc.c1, pc.c2, pc.vmax);
    assert_int_equal(vx_store_meta_set(s, "settings", settings, &e), VX_OK);
    assert_int_equal(vx_store_meta_set(s, "space", space_text, &e), VX_OK);
}

/* vixen hyperopt status and report.html on a store written here, so every count is known: 2
 * generations x 3 particles = 6 trials, of which trial 0 done (0.5), 1 pruned (0.9: a pruned
 * trial's best counts), 2 failed, 3 running, 4 done (0.2, one halving), 5 never started.
 *   status: 4 finished (2 done, 1 pruned, 1 failed), 1 running, 6 − 4 − 1 = 1 to go; the best so
 *     far is trial 1, the highest objective;
 *   report: 2 not run (trial 5, and the running trial 3); its table of the best trials is in
 *     decreasing objective, 1, 0, 4 (the failed trial has none); it names trial 1 as the best so
 *     far, then, once the study recorded its chosen best (trial 0), that one. */
static void test_status_and_report_of_a_store(void **state)
{
    (void)state;
    char root[64], path[128];
    vx_store s;
    vx_err e;
    store_of_settings(root, sizeof root, path, sizeof path, 2, 1, 1, 3, &s);
    const struct {
        vx_trial_status status;
        double objective;
        int halvings;
    } rows[5] = {{VX_TRIAL_DONE, 0.5, 0},
                 {VX_TRIAL_PRUNED, 0.9, 0},
                 {VX_TRIAL_FAILED, NAN, 0},
                 {VX_TRIAL_RUNNING, NAN, 0},
                 {VX_TRIAL_DONE, 0.2, 1}};
    for (int i = 0; i < 5; i++) {
        vx_trial t;
        memset(&t, 0, sizeof t);
        t.id = i, t.generation = i / 3, t.particle = i % 3;
        t.status = rows[i].status, t.objective = rows[i].objective, t.objective_se = 0.1;
        t.halvings = rows[i].halvings, t.batch = 32;
        snprintf(t.params, sizeof t.params,
                 "dqn.lr=0.001\ndqn.gamma=0.95\ndqn.n_step=2\ndqn.loss=mse\n");
        if (t.status == VX_TRIAL_FAILED) snprintf(t.error, sizeof t.error, "it failed");
        assert_int_equal(vx_store_trial_put(&s, &t, &e), VX_OK);
    }
    vx_store_close(&s);
    /* no process holds the study: the trial the store has running had stopped with it */
    char *st = printed(vx_study_status, root);
    if (!strstr(st, "trials: 4 finished (2 done, 1 pruned, 1 failed), 1 stopped mid-run (run "
                    "again on resume), 1 to go; 1 out-of-memory halvings\n") ||
        !strstr(st, "best trial so far: 1 (generation 0, particle 1, seed 0): validation Sharpe "
                    "0.9000") ||
        !strstr(st, "not finished"))
        fail_msg("status:\n%s", st);
    free(st);
    { /* while another process holds the study, its trials run and it is not to be resumed */
        int ready[2];
        assert_int_equal(pipe(ready), 0);
        pid_t holder = fork();
        if (holder == 0) {
            int fd;
            vx_err ce;
            if (vx_folder_lock(root, &fd, &ce)) _exit(1);
            if (write(ready[1], "x", 1) != 1) _exit(1);
            pause();
            _exit(0);
        }
        char x;
        assert_int_equal(read(ready[0], &x, 1), 1);
        st = printed(vx_study_status, root);
        char who[64];
        snprintf(who, sizeof who, "running now\n(process %ld holds the study)", (long)holder);
        if (!strstr(st, "1 running, 1 to go") || !strstr(st, who)) fail_msg("status:\n%s", st);
        free(st);
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
        close(ready[0]), close(ready[1]);
    }
    for (int chosen = 0; chosen < 2; chosen++) {
        if (chosen) { /* what finish() records: the swarm's best, trial 0 */
            assert_int_equal(vx_store_open(&s, path, 0, &e), VX_OK);
            assert_int_equal(vx_store_meta_set(&s, "best", "0", &e), VX_OK);
            vx_store_close(&s);
            char *stc = printed(vx_study_status, root); /* status names it too */
            if (!strstr(stc, "best trial: 0 (generation 0, particle 0, seed 0)"))
                fail_msg("status once chosen:\n%s", stc);
            free(stc);
        }
        if (vx_study_report_write(root, &e)) fail_msg("%s", e.msg);
        char rp[160];
        snprintf(rp, sizeof rp, "%s/report.html", root);
        char *html = read_text(rp);
        if (!strstr(html, "6 trials — 2 done, 1 pruned, 1 failed, 2 not run; 1 out-of-memory "
                          "halvings"))
            fail_msg("the report's counts: %.300s", strstr(html, "<ul class=\"facts\">"));
        const char *named =
            chosen ? "the best trial: 0</strong>" : "the best trial so far: 1</strong>";
        if (!strstr(html, named)) fail_msg("the report does not say '%s'", named);
        long ids[8];
        int agent, n = table_ids(html, ids, 8, &agent);
        if (n != 3 || ids[0] != 1 || ids[1] != 0 || ids[2] != 4 || !agent)
            fail_msg("the table's trials: %d rows, %ld %ld %ld (want 1 0 4)", n,
                     n > 0 ? ids[0] : -1, n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1);
        free(html);
    }
    th_rmtree(root);
}

/* With several seeds the swarm ranks a particle by its seeds' mean, and status and the report
 * name the best so far the same way (they had named the best single trial, another particle's
 * than best.yaml's): 1 generation × 2 particles × 2 seeds, particle 0's seeds 1.0 and 0.0 (mean
 * 0.5, the best single trial), particle 1's 0.6 and 0.6 (mean 0.6): trial 2, its first seed. */
static void test_best_so_far_by_the_seeds_mean(void **state)
{
    (void)state;
    char root[64], path[128];
    vx_store s;
    vx_err e;
    store_of_settings(root, sizeof root, path, sizeof path, 1, 2, 0, 2, &s);
    const double objective[4] = {1.0, 0.0, 0.6, 0.6};
    for (int i = 0; i < 4; i++) {
        vx_trial t;
        memset(&t, 0, sizeof t);
        t.id = i, t.generation = 0, t.particle = i / 2, t.seed_index = i % 2;
        t.status = VX_TRIAL_DONE, t.objective = objective[i], t.objective_se = 0.1;
        t.batch = 32;
        snprintf(t.params, sizeof t.params,
                 "dqn.lr=0.001\ndqn.gamma=0.95\ndqn.n_step=2\n"
                 "dqn.loss=mse\n");
        assert_int_equal(vx_store_trial_put(&s, &t, &e), VX_OK);
    }
    vx_store_close(&s);
    char *st = printed(vx_study_status, root);
    if (!strstr(st, "best trial so far: 2 (generation 0, particle 1, seed 0): validation Sharpe "
                    "0.6000 ± 0.1000 at epoch 0; its particle's mean over 2 seeds 0.6000"))
        fail_msg("status:\n%s", st);
    free(st);
    if (vx_study_report_write(root, &e)) fail_msg("%s", e.msg);
    snprintf(path, sizeof path, "%s/report.html", root);
    char *html = read_text(path);
    if (!strstr(html, "the best trial so far: 2</strong>"))
        fail_msg("the report: %.300s", strstr(html, "the best trial"));
    free(html);
    th_rmtree(root);
}

/* ---- layers 2 and 4 of the engine, on their own ---------------------------------------------- */

static void *no_trial(void *arg) { return arg; }

/* A chunk of `started` trials that have ended (threads that return at once) with the given
 * refusals and measurements, ended on eng: its status, and its note in note. */
static vx_status end_chunk(vx_engine *eng, int started, const int *refused, const int64_t *measured,
                           char *note, size_t n_note, vx_err *e)
{
    vx_chunk c;
    assert_int_equal(vx_chunk_init(&c, 8, e), VX_OK);
    c.n = c.started = started;
    for (int k = 0; k < started; k++) {
        c.jobs[k].device_refused = refused[k];
        c.jobs[k].t.mem_measured = measured[k];
        assert_int_equal(pthread_create(&c.jobs[k].thread, NULL, no_trial, NULL), 0);
    }
    vx_status st = vx_chunk_end(eng, &c, note, n_note, e);
    vx_chunk_free(&c);
    return st;
}

/* Layer 2 after a chunk: the device refused some of its trials: the concurrency goes to half the
 * chunk, rounded up (3 -> 2); refused running alone: an error. The first chunk's measurement sets
 * the concurrency to floor(available / per trial), at most the cap, per trial the estimate of the
 * largest trial, or on a GPU what a trial measured when that is more: with 1000 B available, an
 * estimate of 100 B and 400 B measured, min(10, cap 8) = 8 on the CPU and floor(1000 / 400) = 2
 * on a GPU. Layer 4 before a chunk: below 10% of the budget free, the concurrency halves, rounded
 * up (3 -> 2 -> 1, and 1 stays); with the budget free again it stays. */
static void test_engine_layers_2_and_4(void **state)
{
    (void)state;
    int cur, ramped;
    vx_engine eng;
    memset(&eng, 0, sizeof eng);
    eng.cur = &cur, eng.ramped = &ramped;
    eng.kind = VX_DEVICE_CPU, eng.avail = 1000, eng.worst = 100, eng.cap = 8;
    char note[160];
    vx_err e;
    const int none[3] = {0, 0, 0}, one_of_3[3] = {0, 1, 0}, alone[1] = {1};
    const int64_t small[3] = {10, 10, 10}, big[1] = {400};
    cur = 3, ramped = 0;
    assert_int_equal(end_chunk(&eng, 3, one_of_3, small, note, sizeof note, &e), VX_OK);
    assert_int_equal(cur, 2);
    assert_int_equal(ramped, 1);
    assert_non_null(strstr(note, "the device refused 1 of 3 trials: concurrency 3 -> 2"));
    cur = 1;
    assert_int_equal(end_chunk(&eng, 1, alone, small, note, sizeof note, &e), VX_ERR_NOMEM);
    assert_int_equal(cur, 1);
    cur = 1, ramped = 0;
    assert_int_equal(end_chunk(&eng, 1, none, big, note, sizeof note, &e), VX_OK);
    assert_int_equal(cur, 8);
    assert_int_equal(ramped, 1);
    eng.kind = VX_DEVICE_CUDA; /* only eng's numbers are read: no GPU needed */
    cur = 1, ramped = 0;
    assert_int_equal(end_chunk(&eng, 1, none, big, note, sizeof note, &e), VX_OK);
    assert_int_equal(cur, 2);
    cur = 2; /* ramped: nothing changes */
    assert_int_equal(end_chunk(&eng, 2, none, small, note, sizeof note, &e), VX_OK);
    assert_int_equal(cur, 2);
    assert_string_equal(note, "");

    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    dc.budget = 100000000;
    vx_device *dev;
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    vx_mem ballast;
    vx_mem_init(&ballast, dev, "another tenant");
    void *p;
    assert_int_equal(vx_mem_alloc(&ballast, 93000000, &p, &e), VX_OK); /* never touched */
    memset(&eng, 0, sizeof eng);
    eng.dev = dev, eng.cur = &cur, eng.ramped = &ramped;
    const int steps[][2] = {{3, 2}, {2, 1}, {1, 1}};
    for (int i = 0; i < 3; i++) {
        cur = steps[i][0];
        vx_watchdog(&eng, note, sizeof note);
        assert_int_equal(cur, steps[i][1]);
        char want[64];
        snprintf(want, sizeof want, "free: concurrency %d -> %d", steps[i][0], steps[i][1]);
        if (steps[i][0] > 1) assert_non_null(strstr(note, want));
        else assert_string_equal(note, "");
    }
    vx_mem_release(&ballast);
    vx_device_info info; /* the driver's count (the machine's RAM) must leave 10% too */
    assert_int_equal(vx_device_query(dev, &info, &e), VX_OK);
    if ((double)info.free >= 0.2 * (double)info.total) {
        cur = 4;
        vx_watchdog(&eng, note, sizeof note);
        assert_int_equal(cur, 4);
        assert_string_equal(note, "");
    }
    vx_device_close(dev);
}

/* Refuses every replay buffer made on a share whose label begins with `label`. */
typedef struct {
    const char *label;
    int count;
} refusals;

static int refuse_replay_always(void *ctx, const vx_device *d, const char *owner, size_t bytes)
{
    (void)bytes;
    refusals *r = ctx;
    if (strncmp(vx_device_label(d), r->label, strlen(r->label)) != 0 ||
        strcmp(owner, "replay") != 0)
        return 0;
    __atomic_add_fetch(&r->count, 1, __ATOMIC_SEQ_CST);
    return VX_FAULT_REFUSE;
}

typedef struct {
    int chunks;
    int64_t share[8];
} shares_seen;

static void note_share(const vx_study_progress *p, void *ctx)
{
    shares_seen *s = ctx;
    if (p->running > 0 && s->chunks < 8) s->share[s->chunks++] = p->mem_per_trial;
}

/* layer 3 to its end: a trial its share refuses at every batch halves it 32 -> 16 -> 8 -> 4 -> 2
 * -> 1 (five halvings, six attempts) and then fails, with its error and no objective; the other
 * trials' results are those of the study that never ran out, and status counts it failed. The
 * reference study (3 trials at concurrency 2: chunks of 2, then 1) gives every trial the same
 * share, available / concurrency, the last chunk's lone trial too. */
static void test_a_trial_fails_after_its_halvings(void **state)
{
    (void)state;
    char root[64], ref[128], dir[128];
    th_tmpdir(root, sizeof root);
    snprintf(ref, sizeof ref, "%s/ref", root);
    snprintf(dir, sizeof dir, "%s/failing", root);
    vx_study_cfg c;
    small_cfg(&c, 3, 1, 2);
    c.prune = 0;
    vx_train_cfg *base = small_base();
    vx_study *s;
    vx_err e;
    shares_seen seen = {0, {0}};
    assert_int_equal(vx_study_create(ref, &c, space_text, strlen(space_text), base, &s, &e), VX_OK);
    if (vx_study_run(s, NULL, note_share, &seen, NULL, &e)) fail_msg("%s", e.msg);
    vx_study_close(s);
    free(base);
    assert_int_equal(seen.chunks, 2);
    assert_true(seen.share[0] > 0);
    if (seen.share[1] != seen.share[0])
        fail_msg("a share of %lld B in the first chunk, %lld B in the second",
                 (long long)seen.share[0], (long long)seen.share[1]);
    refusals r = {"g0-p1-s0", 0};
    vx_mem_set_fault(refuse_replay_always, &r);
    vx_status st = run_study(dir, &c, NULL, &e);
    vx_mem_set_fault(NULL, NULL);
    if (st) fail_msg("%s", e.msg);
    size_t n;
    vx_trial *t = trials_of(dir, &n);
    assert_int_equal(n, 3);
    assert_int_equal(t[1].status, VX_TRIAL_FAILED);
    assert_int_equal(t[1].halvings, 5);
    assert_int_equal(t[1].batch, 1);
    assert_int_equal(r.count, 6);
    assert_true(isnan(t[1].objective));
    assert_true(t[1].error[0] != '\0');
    assert_int_equal(t[0].halvings + t[2].halvings, 0);
    free(t);
    assert_same_trials(ref, dir, 1);
    char *text = printed(vx_study_status, dir);
    if (!strstr(text, "trials: 3 finished (2 done, 0 pruned, 1 failed), 0 running, 0 to go"))
        fail_msg("status:\n%s", text);
    free(text);
    th_rmtree(root);
}

/* `--resume DIR --concurrency N` runs the rest at N (a study stopped before any trial ran, then
 * resumed at 3: its first chunk runs 3 trials, where the budget's own choice would start with
 * half the most it allows, at most ceil(4 / 2) = 2). */
static void test_resume_at_a_concurrency(void **state)
{
    (void)state;
    char dir[64], args[256];
    th_tmpdir(dir, sizeof dir);
    vx_study_cfg c;
    small_cfg(&c, 4, 1, 1);
    c.prune = 0;
    vx_train_cfg *base = small_base();
    vx_study *s;
    vx_err e;
    assert_int_equal(vx_study_create(dir, &c, space_text, strlen(space_text), base, &s, &e), VX_OK);
    volatile int stop = 1;
    assert_int_equal(vx_study_run(s, NULL, NULL, NULL, &stop, &e), VX_ERR_STOPPED);
    vx_study_close(s);
    free(base);
    snprintf(args, sizeof args, "hyperopt --resume %s --concurrency 3", dir);
    if (vixen("", args) != 0) fail_msg("%s", err);
    size_t n;
    vx_study_event *ev = events_of(dir, &n);
    assert_true(n >= 1);
    assert_int_equal(ev[0].running, 3);
    assert_int_equal(ev[0].concurrency, 3);
    free(ev);
    th_rmtree(dir);
}

/* Layer 3's smaller batch: half for the DQN; for PPO minibatch rows that still divide the
 * rollout (600 rows in minibatches of 75: 37 would not, 30 does), none below 2. */
static void test_halved_batch(void **state)
{
    (void)state;
    vx_train_cfg *c = small_base();
    assert_int_equal(vx_trial_halved_batch(c, 32), 16);
    assert_int_equal(vx_trial_halved_batch(c, 1), 0);
    vx_err e;
    static const char *ppo[][2] = {{"train.algo", "ppo"},
                                   {"train.envs", "15"},
                                   {"train.steps_per_epoch", "40"},
                                   {"ppo.minibatches", "8"}};
    for (size_t i = 0; i < sizeof ppo / sizeof *ppo; i++)
        if (vx_train_cfg_set(c, ppo[i][0], ppo[i][1], "test", &e)) fail_msg("%s", e.msg);
    static const int cases[][2] = {{75, 30}, {600, 300}, {30, 15}, {5, 2}, {3, 0}, {2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int half = vx_trial_halved_batch(c, cases[i][0]);
        assert_int_equal(half, cases[i][1]);
        if (half) assert_int_equal(vx_trial_set_batch(c, half, &e), VX_OK); /* a valid split */
    }
    free(c);
}

/* An MPI rank on the CPU (vx_device_open_local) gets its node's cores divided by the ranks there,
 * and a study caps its concurrency at them. */
static void test_rank_cpu_share(void **state)
{
    (void)state;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CPU;
    vx_device *d;
    vx_err e;
    int cores = 0;
    for (int local = 1; local <= 4; local++) {
        if (vx_device_open_local(&dc, local - 1, local, &d, &cores, &e)) fail_msg("%s", e.msg);
        assert_int_equal(cores, online > local ? online / local : 1);
        vx_device_close(d);
    }
    vx_study_cfg c;
    small_cfg(&c, 8, 1, 0);
    c.cpu_cores = 1;
    vx_space sp;
    if (vx_space_load_text(&sp, space_text, strlen(space_text), "space", &e)) fail_msg("%s", e.msg);
    vx_train_cfg *base = small_base();
    vx_plan p;
    if (vx_study_plan(&c, &sp, base, NULL, &p, &e)) fail_msg("%s", e.msg);
    assert_int_equal(p.max_concurrent, 1);
    free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrency_does_not_change_results),
        cmocka_unit_test(test_refused_group_runs_its_members_alone),
        cmocka_unit_test(test_pruning_follows_earlier_medians),
        cmocka_unit_test(test_pruning_median_of_best_so_far),
        cmocka_unit_test(test_estimate_parts),
        cmocka_unit_test(test_estimate_moves_with_settings),
        cmocka_unit_test(test_estimate_ppo),
        cmocka_unit_test(test_layer1_estimate_and_margin),
        cmocka_unit_test(test_layer1_worst_trial_combines_parameters),
        cmocka_unit_test(test_layer2_refused_chunk_halves),
        cmocka_unit_test(test_layer2_ramp_up),
        cmocka_unit_test(test_layer3_trial_halves_its_batch),
        cmocka_unit_test(test_layer4_watchdog),
        cmocka_unit_test(test_best_yaml_reproduces_the_trial),
        cmocka_unit_test(test_outputs_and_a_stop),
        cmocka_unit_test(test_kill_and_resume),
        cmocka_unit_test(test_command_errors),
        cmocka_unit_test(test_a_diverging_trial_fails_alone),
        cmocka_unit_test(test_rank_cpu_share),
        cmocka_unit_test(test_halved_batch),
        cmocka_unit_test(test_store_without_the_rank_column),
        cmocka_unit_test(test_store_round_trip),
        cmocka_unit_test(test_status_and_report_of_a_store),
        cmocka_unit_test(test_best_so_far_by_the_seeds_mean),
        cmocka_unit_test(test_engine_layers_2_and_4),
        cmocka_unit_test(test_a_trial_fails_after_its_halvings),
        cmocka_unit_test(test_resume_at_a_concurrency),
    };
    const char *only = getenv("VX_TEST_ONLY");
    if (only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

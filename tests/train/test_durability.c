/* test_durability.c — a run loses nothing: killed or failing at every file-system step of its
 * writes it resumes exactly or starts cleanly; a second training into a folder in use is refused
 * and the first goes on unharmed; a double interrupt during a checkpoint waits for its commit;
 * checkpoints from another run or with damaged bytes are refused; the safetensors reader refuses
 * what would crash it; temporary files never follow a planted link; FIFOs are refused at once.
 *
 * The cut points come from the fault-injection hook of util.h (VIXEN_FAULT_AT=N kills the `vixen`
 * process at its N-th file-system step): the test walks N from 1 until a run finishes untouched,
 * so every step of every write of a whole run is cut once. */
#define _DEFAULT_SOURCE
#include "helpers.h"
#include "vixen/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16], err[1 << 14];

/* A tiny DQN run: validated and checkpointed every epoch (so best, latest and the replay side
 * file are all written each epoch). */
#define SMALL                                                                                      \
    "--set data.synth_days=12 --set env.episode_len=60 --set train.envs=16 "                       \
    "--set train.steps_per_epoch=40 --set dqn.batch=32 --set net.trunk=32,32 "                     \
    "--set net.head_hidden=16 --set train.warmup=200 --set train.eval_every=1 "                    \
    "--set train.checkpoint_every=1 --set train.device=cpu"
#define EPOCHS 2

/* Every step is cut; the sanitizer build (ten times slower a run) cuts every VIXEN_CUT_STRIDE-th.
 */
static int stride(void)
{
    const char *s = getenv("VIXEN_CUT_STRIDE");
    return s && atoi(s) > 0 ? atoi(s) : 1;
}

static int vixen_env(const char *env, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s %s", env, VX_BINARY, args);
    return th_run(cmd, out, sizeof out, err, sizeof err);
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Fails when any "*.tmp.*" file is left under dir (one level of subfolders). */
static void assert_no_temps(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (ent->d_name[0] == '.') continue;
        if (strstr(ent->d_name, ".tmp.")) fail_msg("%s/%s left behind", dir, ent->d_name);
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", dir, ent->d_name);
        struct stat sb;
        if (stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode)) assert_no_temps(sub);
    }
    closedir(d);
}

/* The tensors of two checkpoint files are equal bit for bit (names, shapes, bytes). */
static void assert_same_tensors(const char *a, const char *b)
{
    vx_safetensors x, y;
    vx_err e;
    if (vx_safetensors_read(a, &x, &e)) fail_msg("%s", e.msg);
    if (vx_safetensors_read(b, &y, &e)) fail_msg("%s", e.msg);
    assert_int_equal(x.n, y.n);
    for (size_t i = 0; i < x.n; i++) {
        const vx_tensor *t = &x.tensors[i];
        size_t bytes = t->dtype == VX_DT_U8 ? 1 : t->dtype == VX_DT_F32 ? 4 : 8;
        for (int d = 0; d < t->ndim; d++) bytes *= (size_t)t->shape[d];
        int found = 0;
        for (size_t j = 0; j < y.n; j++) {
            if (strcmp(y.tensors[j].name, t->name) != 0) continue;
            found = 1;
            if (memcmp(t->data, y.tensors[j].data, bytes) != 0)
                fail_msg("tensor %s differs between %s and %s", t->name, a, b);
        }
        if (!found) fail_msg("tensor %s missing from %s", t->name, b);
    }
    const char *ea = vx_safetensors_meta(&x, "epoch"), *eb = vx_safetensors_meta(&y, "epoch");
    assert_non_null(ea);
    assert_non_null(eb);
    assert_string_equal(ea, eb);
    vx_safetensors_free(&x);
    vx_safetensors_free(&y);
}

/* metrics.csv holds epochs 1..n once each, in order. */
static void assert_metrics_rows(const char *run, int n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/metrics.csv", run);
    size_t len;
    uint8_t *raw = th_read(path, &len);
    char *text = calloc(len + 1, 1);
    memcpy(text, raw, len);
    free(raw);
    int want = 1;
    for (char *line = strchr(text, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
        int ep = atoi(line + 1);
        if (ep != want) fail_msg("%s: row for epoch %d where epoch %d was due", path, ep, want);
        want++;
    }
    if (want != n + 1) fail_msg("%s: %d rows, want %d", path, want - 1, n);
    free(text);
}

/* Finishes a cut run the way a user would: --resume when a checkpoint was committed, else the
 * same command again. Both must succeed and give the uninterrupted run's final checkpoint. */
static void finish_and_compare(const char *run, const char *ref, const char *what)
{
    char path[1024], args[2048];
    snprintf(path, sizeof path, "%s/checkpoint/latest.safetensors", run);
    if (exists(path)) snprintf(args, sizeof args, "train --resume %s --epochs %d", run, EPOCHS);
    else snprintf(args, sizeof args, "train " SMALL " --epochs %d --run %s", EPOCHS, run);
    int rc = vixen_env("", args);
    if (rc != 0) fail_msg("%s: finishing with `%s` failed (%d): %s", what, args, rc, err);
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/checkpoint/latest.safetensors", ref);
    snprintf(b, sizeof b, "%s/checkpoint/latest.safetensors", run);
    assert_same_tensors(a, b);
    snprintf(a, sizeof a, "%s/checkpoint/best.safetensors", ref);
    snprintf(b, sizeof b, "%s/checkpoint/best.safetensors", run);
    assert_same_tensors(a, b);
    assert_metrics_rows(run, EPOCHS);
    assert_no_temps(run);
}

static void reference_run(const char *dir, char *ref, size_t n)
{
    snprintf(ref, n, "%s/ref", dir);
    char args[2048];
    snprintf(args, sizeof args, "train " SMALL " --epochs %d --run %s", EPOCHS, ref);
    if (vixen_env("", args) != 0) fail_msg("reference run failed: %s", err);
}

/* mode "kill": SIGKILL at step k; "fail": step k fails with EIO (the run reports it and exits). */
static void cut_every_step(const char *mode)
{
    char dir[64], ref[128];
    th_tmpdir(dir, sizeof dir);
    reference_run(dir, ref, sizeof ref);
    int k = 1, cuts = 0;
    for (;; k += stride()) {
        char run[128], env[128], args[2048];
        snprintf(run, sizeof run, "%s/%s-%d", dir, mode, k);
        snprintf(env, sizeof env, "VIXEN_FAULT_AT=%d VIXEN_FAULT_MODE=%s", k, mode);
        snprintf(args, sizeof args, "train " SMALL " --epochs %d --run %s", EPOCHS, run);
        int rc = vixen_env(env, args);
        if (rc == 0 && !strstr(err, "fault injected")) break; /* past the run's last step */
        if (strcmp(mode, "kill") == 0 && rc != 137)
            fail_msg("step %d: expected a kill, got exit %d: %s", k, rc, err);
        if (strcmp(mode, "fail") == 0 && rc != 1 && rc != 0)
            fail_msg("step %d: an I/O error should end the run with exit 1, got %d: %s", k, rc,
                     err);
        char what[64];
        snprintf(what, sizeof what, "%s at step %d", mode, k);
        finish_and_compare(run, ref, what);
        th_rmtree(run);
        cuts++;
        assert_true(k < 1000);
    }
    /* a whole run: the identity, config.yaml, 2 × (best + replay + latest), eval, report */
    print_message("%s: %d cut points (every %d), each resumed or restarted to the uninterrupted "
                  "result\n",
                  mode, cuts, stride());
    assert_true(cuts * stride() >= 40);
    th_rmtree(dir);
}

static void test_kill_at_every_file_system_step(void **state)
{
    (void)state;
    cut_every_step("kill");
}

static void test_io_error_at_every_file_system_step(void **state)
{
    (void)state;
    cut_every_step("fail");
}

/* A double Ctrl-C at each step: when it lands inside a checkpoint write, the process quits only
 * after that checkpoint has committed (the latest checkpoint then holds the epoch being written),
 * and the run resumes to the uninterrupted result. */
static void test_double_interrupt_waits_for_the_commit(void **state)
{
    (void)state;
    char dir[64], ref[128];
    th_tmpdir(dir, sizeof dir);
    reference_run(dir, ref, sizeof ref);
    int deferred = 0;
    for (int k = 1; k < 1000; k += stride()) {
        char run[128], env[128], args[2048];
        snprintf(run, sizeof run, "%s/int-%d", dir, k);
        snprintf(env, sizeof env, "VIXEN_FAULT_AT=%d VIXEN_FAULT_MODE=sigint", k);
        snprintf(args, sizeof args, "train " SMALL " --epochs %d --run %s", EPOCHS, run);
        int rc = vixen_env(env, args);
        if (rc == 0 && !strstr(err, "interrupted")) break; /* past the last step */
        if (strstr(err, "as soon as the checkpoint being written has committed")) {
            deferred++;
            if (rc != 130 || !strstr(err, "the checkpoint has been written; quitting"))
                fail_msg("step %d: exit %d without the commit: %s", k, rc, err);
            assert_no_temps(run); /* the write in flight was finished, not cut */
        }
        char what[64];
        snprintf(what, sizeof what, "double interrupt at step %d", k);
        finish_and_compare(run, ref, what);
        th_rmtree(run);
    }
    print_message("double interrupt: %d steps inside a checkpoint write deferred the exit\n",
                  deferred);
    assert_true(deferred * stride() >= 10);
    th_rmtree(dir);
}

/* Starts `vixen train` of the SMALL run for ever (100,000 epochs) into `run` in the background,
 * its output discarded; with folds > 1 a walk-forward over that many folds. */
static pid_t spawn_endless(const char *run, int folds)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0) return pid;
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 1), dup2(fd, 2);
    char cmd[4096], walk[64] = "";
    if (folds > 1) snprintf(walk, sizeof walk, "--set split.test=0.3 --folds %d", folds);
    snprintf(cmd, sizeof cmd, "exec %s train " SMALL " %s --epochs 100000 --run %s", VX_BINARY,
             walk, run);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
}

/* A second training (or resume) into a folder in use is refused naming the holder; the first
 * finishes its epochs with its own checkpoint and resumes exactly. */
static void test_second_training_refused(void **state)
{
    (void)state;
    char dir[64], run[128], lock[160], args[2048];
    th_tmpdir(dir, sizeof dir);
    snprintf(run, sizeof run, "%s/r", dir);
    snprintf(lock, sizeof lock, "%s/lock", run);
    pid_t a = spawn_endless(run, 1);
    /* wait until A holds the lock and has written a checkpoint */
    char ckpt[192], pid[32];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint/latest.safetensors", run);
    for (int i = 0; i < 2400 && !exists(ckpt); i++) usleep(50000); /* 2 min: a loaded machine */
    assert_true(exists(ckpt));
    snprintf(pid, sizeof pid, "process %d", (int)a);
    snprintf(args, sizeof args, "train " SMALL " --epochs 2 --run %s", run);
    assert_int_equal(vixen_env("", args), 1);
    if (!strstr(err, "in use by another vixen") || !strstr(err, pid))
        fail_msg("second training: %s", err);
    snprintf(args, sizeof args, "train --resume %s --epochs 2", run);
    assert_int_equal(vixen_env("", args), 1);
    if (!strstr(err, "in use by another vixen") || !strstr(err, pid))
        fail_msg("resume while in use: %s", err);
    /* A stops on Ctrl-C with a checkpoint, exit 130 (interrupted), the test split untouched */
    kill(a, SIGINT);
    int ws;
    assert_int_equal(waitpid(a, &ws, 0), a);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 130);
    vx_safetensors s;
    vx_err e;
    if (vx_safetensors_read(ckpt, &s, &e)) fail_msg("%s", e.msg);
    int64_t ep = 0;
    assert_int_equal(vx_safetensors_meta_int(&s, "epoch", 1, 100000, &ep, &e), VX_OK);
    vx_safetensors_free(&s);
    char done[192];
    snprintf(done, sizeof done, "%s/eval.json", run);
    assert_false(exists(done));
    /* and A's run goes on: resumed one more epoch, its rows once each */
    snprintf(args, sizeof args, "train --resume %s --epochs %d", run, (int)ep + 1);
    if (vixen_env("", args) != 0) fail_msg("resume after the refusals: %s", err);
    assert_metrics_rows(run, (int)ep + 1);
    th_rmtree(dir);
}

/* Ctrl-C in a walk-forward's first fold ends the walk there (it went on to train every later
 * fold for one epoch, each stopped at once by the same interrupt). */
static void test_interrupted_walk_forward_stops(void **state)
{
    (void)state;
    char dir[64], run[128], ckpt[192], fold2[192];
    th_tmpdir(dir, sizeof dir);
    snprintf(run, sizeof run, "%s/w", dir);
    snprintf(ckpt, sizeof ckpt, "%s/fold-1/checkpoint/latest.safetensors", run);
    snprintf(fold2, sizeof fold2, "%s/fold-2", run);
    pid_t a = spawn_endless(run, 2);
    for (int i = 0; i < 2400 && !exists(ckpt); i++) usleep(50000); /* 2 min: a loaded machine */
    assert_true(exists(ckpt));
    kill(a, SIGINT);
    int ws;
    assert_int_equal(waitpid(a, &ws, 0), a);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 130);
    assert_false(exists(fold2));
    /* the stopped fold was not tested (its eval.json would mark it finished): a resume trains it
     * on from its checkpoint, then the second fold */
    char done[192], args[1024];
    snprintf(done, sizeof done, "%s/fold-1/eval.json", run);
    assert_false(exists(done));
    vx_safetensors s;
    vx_err e;
    if (vx_safetensors_read(ckpt, &s, &e)) fail_msg("%s", e.msg);
    int64_t ep = 0;
    assert_int_equal(vx_safetensors_meta_int(&s, "epoch", 1, 100000, &ep, &e), VX_OK);
    vx_safetensors_free(&s);
    snprintf(args, sizeof args, "train --resume %s --epochs %d", run, (int)ep + 1);
    if (vixen_env("", args) != 0) fail_msg("resuming the walk: %s", err);
    if (!strstr(err, "fold 1 of 2") || !strstr(err, "resuming")) fail_msg("%s", err);
    char fold1_rows[192];
    snprintf(fold1_rows, sizeof fold1_rows, "%s/fold-1", run);
    assert_metrics_rows(fold1_rows, (int)ep + 1);
    assert_true(exists(done));
    snprintf(done, sizeof done, "%s/fold-2/eval.json", run);
    assert_true(exists(done));
    /* the finished walk resumed as it is evaluates both folds again, to the same summary — the
     * checkpoint lines and warnings as their runs wrote them (it had reworded the first) */
    char summary[192];
    snprintf(summary, sizeof summary, "%s/walk_forward.txt", run);
    size_t n0, n1;
    char *before = (char *)th_read(summary, &n0);
    snprintf(args, sizeof args, "train --resume %s", run);
    if (vixen_env("", args) != 0) fail_msg("resuming the finished walk: %s", err);
    char *after = (char *)th_read(summary, &n1);
    if (n0 != n1 || memcmp(before, after, n0) != 0)
        fail_msg("the summary changed:\n%.*s\n---\n%.*s", (int)n0, before, (int)n1, after);
    free(before), free(after);
    th_rmtree(dir);
}

/* A checkpoint of another run, a damaged side file and damaged tensor bytes are refused on
 * resume, each naming what is wrong. */
static void test_foreign_or_damaged_checkpoint_refused(void **state)
{
    (void)state;
    char dir[64], args[2048], path[256];
    th_tmpdir(dir, sizeof dir);
    const char *names[2] = {"a", "b"};
    for (int i = 0; i < 2; i++) { /* two runs of their own seeds: their files differ */
        snprintf(args, sizeof args, "train " SMALL " --set train.seed=%d --epochs 1 --run %s/%s",
                 i + 1, dir, names[i]);
        if (vixen_env("", args) != 0) fail_msg("%s", err);
    }
    /* a's replay file, kept for the swap below */
    char other[256];
    snprintf(other, sizeof other, "%s/a/checkpoint/replay-00000001.bin", dir);
    size_t on;
    uint8_t *obytes = th_read(other, &on);
    /* b's checkpoint folder copied into a */
    snprintf(args, sizeof args, "rm -r %s/a/checkpoint && cp -r %s/b/checkpoint %s/a/", dir, dir,
             dir);
    assert_int_equal(system(args), 0);
    snprintf(args, sizeof args, "train --resume %s/a --epochs 2", dir);
    assert_int_equal(vixen_env("", args), 1);
    if (!strstr(err, "run_id") || !strstr(err, "belongs to run")) fail_msg("%s", err);
    /* one flipped byte in b's replay file */
    snprintf(path, sizeof path, "%s/b/checkpoint/replay-00000001.bin", dir);
    size_t n;
    uint8_t *bytes = th_read(path, &n);
    bytes[n / 2] ^= 0x10;
    th_write(path, bytes, n);
    snprintf(args, sizeof args, "train --resume %s/b --epochs 2", dir);
    assert_int_equal(vixen_env("", args), 1);
    if (!strstr(err, "replay-00000001.bin") || !strstr(err, "damaged")) fail_msg("%s", err);
    bytes[n / 2] ^= 0x10;
    th_write(path, bytes, n);
    /* a whole, valid replay file of another run (a's, same epoch and shape, another seed) in b's
     * place: only the checksum b's checkpoint recorded for it tells them apart */
    th_write(path, obytes, on);
    free(obytes);
    assert_int_equal(vixen_env("", args), 1);
    if (!strstr(err, "xxh3.replay") || !strstr(err, "from another checkpoint")) fail_msg("%s", err);
    th_write(path, bytes, n);
    free(bytes);
    /* one flipped byte in b's tensors */
    snprintf(path, sizeof path, "%s/b/checkpoint/latest.safetensors", dir);
    bytes = th_read(path, &n);
    bytes[n - 5] ^= 0x01;
    th_write(path, bytes, n);
    assert_int_equal(vixen_env("", args), 1);
    if (!strstr(err, "checksum_xxh3") || !strstr(err, "damaged")) fail_msg("%s", err);
    bytes[n - 5] ^= 0x01;
    th_write(path, bytes, n);
    free(bytes);
    /* 30 random bit flips anywhere but the header's padding (where a flip changes nothing): each
     * refused; before checksums, all 30 were accepted */
    bytes = th_read(path, &n);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)bytes[i] << (8 * i);
    size_t json_end = 8 + (size_t)hl;
    while (bytes[json_end - 1] == ' ') json_end--;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (int flip = 0; flip < 30; flip++) {
        size_t at;
        do {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            at = (size_t)((rng >> 33) % n);
        } while (at >= json_end && at < 8 + hl);
        uint8_t bit = (uint8_t)(1u << ((rng >> 20) & 7));
        bytes[at] ^= bit;
        th_write(path, bytes, n);
        if (vixen_env("", args) != 1) fail_msg("a flip at byte %zu of %zu was accepted", at, n);
        bytes[at] ^= bit;
    }
    th_write(path, bytes, n);
    free(bytes);
    /* restored, it resumes */
    if (vixen_env("", args) != 0) fail_msg("%s", err);
    th_rmtree(dir);
}

/* ---- the safetensors reader on hostile headers ----------------------------------------------- */

/* Writes an 8-byte length, the JSON header and `data_len` bytes of data, then reads it back. */
static vx_status read_crafted(const char *dir, const char *json, size_t data_len, vx_err *e)
{
    char path[256];
    snprintf(path, sizeof path, "%s/crafted.safetensors", dir);
    size_t hl = strlen(json);
    uint8_t *buf = calloc(8 + hl + data_len + 1, 1);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    th_write(path, buf, 8 + hl + data_len);
    free(buf);
    vx_safetensors s;
    vx_status st = vx_safetensors_read(path, &s, e);
    if (!st) vx_safetensors_free(&s);
    return st;
}

static void test_safetensors_hostile_headers(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    struct {
        const char *json;
        size_t data;
        const char *want; /* in the message; NULL: accepted */
    } cases[] = {
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, NULL},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        /* shapes that a cast would keep although data_offsets fit: negative, fractional */
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-1,-2],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
         "\"data_offsets\":[0,8]}}",
         8, "shape[1]"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, "overlap"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12, "gap"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         16, "given twice"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "after the last"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e300]}}", 8, "data_offsets"},
        {"{\"__metadata__\":{\"a\":1},\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[0,8]}}",
         8, "strings"},
        {"{\"__metadata__\":{\"a\":\"x\",\"a\":\"y\"}}", 0, "given twice"},
        {"{\"__metadata__\":{\"checksum_xxh3\":\"0000000000000000\"},\"w\":{\"dtype\":\"F32\","
         "\"shape\":[2],\"data_offsets\":[0,8]}}",
         8, "checksum mismatch"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        vx_err e;
        vx_status st = read_crafted(dir, cases[i].json, cases[i].data, &e);
        if (!cases[i].want && st) fail_msg("case %zu refused: %s", i, e.msg);
        if (cases[i].want && (!st || !strstr(e.msg, cases[i].want)))
            fail_msg("case %zu: want '%s', got %s", i, cases[i].want, st ? e.msg : "accepted");
    }
    /* 40 metadata entries all come back (the reader kept 16 and dropped the rest silently) */
    vx_meta *m = calloc(40, sizeof *m);
    for (int i = 0; i < 40; i++) {
        snprintf(m[i].key, sizeof m[i].key, "k%d", i);
        snprintf(m[i].value, sizeof m[i].value, "v%d", i);
    }
    char path[256];
    snprintf(path, sizeof path, "%s/meta.safetensors", dir);
    vx_err e;
    assert_int_equal(vx_safetensors_write(path, NULL, 0, m, 40, &e), VX_OK);
    vx_safetensors s;
    assert_int_equal(vx_safetensors_read(path, &s, &e), VX_OK);
    assert_string_equal(vx_safetensors_meta(&s, "k39"), "v39");
    vx_safetensors_free(&s);
    free(m);
    th_rmtree(dir);
}

/* ---- files --------------------------------------------------------------------------------- */

/* A symbolic link planted at the temporary name is not followed: its target keeps its bytes. */
static void test_atomic_write_never_follows_a_planted_link(void **state)
{
    (void)state;
    char dir[64], victim[128], path[128], tmp[192];
    th_tmpdir(dir, sizeof dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(path, sizeof path, "%s/out.txt", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    th_write_str(victim, "precious");
    assert_int_equal(symlink(victim, tmp), 0);
    vx_atomic_file af;
    vx_err e;
    assert_int_equal(vx_atomic_open(&af, path, &e), VX_OK);
    fputs("new", af.f);
    assert_int_equal(vx_atomic_commit(&af, &e), VX_OK);
    size_t n;
    char *v = (char *)th_read(victim, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(v, "precious", 8);
    free(v);
    v = (char *)th_read(path, &n);
    assert_int_equal(n, 3);
    free(v);
    th_rmtree(dir);
}

static void on_alarm(int sig) { (void)sig; }

/* A FIFO is refused at once (reading it would block until a writer came). */
static void test_fifo_refused_without_blocking(void **state)
{
    (void)state;
    char dir[64], fifo[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    signal(SIGALRM, on_alarm);
    alarm(5); /* a blocked open would end in EINTR, not hang the suite */
    uint8_t *data;
    size_t n;
    vx_err e;
    assert_int_not_equal(vx_file_read_all(fifo, &data, &n, &e), VX_OK);
    alarm(0);
    assert_non_null(strstr(e.msg, "a FIFO"));
    vx_safetensors s;
    assert_int_not_equal(vx_safetensors_read(fifo, &s, &e), VX_OK);
    assert_non_null(strstr(e.msg, "not a regular file"));
    th_rmtree(dir);
}

/* Paths longer than the run folder's buffer are refused, not truncated. */
static void test_long_run_path_refused(void **state)
{
    (void)state;
    char args[2048], longp[700];
    memset(longp, 'x', sizeof longp - 1);
    longp[0] = '/', longp[1] = 't', longp[2] = 'm', longp[3] = 'p', longp[4] = '/';
    longp[sizeof longp - 1] = '\0';
    snprintf(args, sizeof args, "train --epochs 1 --run %s", longp);
    assert_int_equal(vixen_env("", args), 2);
    assert_non_null(strstr(err, "--run: a folder path of 699 characters"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_hostile_headers),
        cmocka_unit_test(test_atomic_write_never_follows_a_planted_link),
        cmocka_unit_test(test_fifo_refused_without_blocking),
        cmocka_unit_test(test_long_run_path_refused),
        cmocka_unit_test(test_foreign_or_damaged_checkpoint_refused),
        cmocka_unit_test(test_second_training_refused),
        cmocka_unit_test(test_interrupted_walk_forward_stops),
        cmocka_unit_test(test_double_interrupt_waits_for_the_commit),
        cmocka_unit_test(test_kill_at_every_file_system_step),
        cmocka_unit_test(test_io_error_at_every_file_system_step),
    };
    const char *only = getenv("VX_TEST_ONLY"); /* one test by name, e.g. when checking a mutation */
    if (only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

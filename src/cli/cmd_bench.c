/* cmd_bench.c — `vixen bench`: runs the groups of the benchmark registry (bench/registry.c) and
 * prints their results as JSON on stdout (and --out FILE).
 *
 * The command names no group itself except in the two old flags kept as aliases (--no-learn is
 * --skip learn, --no-train is --skip gpu-train): which groups exist, what --help says about them,
 * what --only and --skip accept and what runs all come from the table. GPU groups run only when a
 * CUDA device is present, asked at run time (vx_device_cuda_count), so this file is the same in
 * CPU and CUDA builds. */
#include "args.h"
#include "bench.h"
#include "cli.h"
#include "vixen/device.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SKIP 16

/* "data, env, learn, …": the table's groups, for error messages */
static void print_groups(FILE *f)
{
    size_t n;
    const vx_bench_entry *reg = vx_bench_registry(&n);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%s", i ? ", " : "", reg[i].group);
}

/* The command's paragraph with one line per group, as --help prints it (malloc'd; NULL when out
 * of memory). */
static char *about_text(void)
{
    char *buf = NULL;
    size_t len = 0, n;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    const vx_bench_entry *reg = vx_bench_registry(&n);
    fprintf(f, "Runs the benchmark suite on synthetic data and prints JSON with each figure and "
               "its target. The groups, in the order they run (GPU groups only when a CUDA device "
               "is present):\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "\n  %-12s %s%s", reg[i].group, reg[i].about, reg[i].needs_gpu ? " [GPU]" : "");
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Whether this build has the GPU groups (a CUDA build). */
static int gpu_build(void)
{
    size_t n;
    const vx_bench_entry *r = vx_bench_registry(&n);
    for (size_t i = 0; i < n; i++)
        if (r[i].needs_gpu) return 1;
    return 0;
}

static int check_group(const char *opt, const char *group)
{
    if (vx_bench_find(group)) return 0;
    if (strncmp(group, "gpu-", 4) == 0 && !gpu_build()) { /* a GPU group of a CUDA build */
        if (!strcmp(opt, "skip")) return 0;               /* nothing of it to leave out here */
        fprintf(stderr, "vixen bench: --%s %s: this build has no CUDA (built without nvcc)\n", opt,
                group);
        return -1;
    }
    fprintf(stderr, "vixen bench: --%s: unknown group '%s' (groups in this build: ", opt, group);
    print_groups(stderr);
    fprintf(stderr, ")\n");
    return -1;
}

static int listed(const char *group, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(group, names[i]) == 0) return 1;
    return 0;
}

/* Runs the chosen groups and prints their JSON (stdout, and --out); the exit code. */
static int run_groups(const vx_bench_opts *bo, const char *only, const char *const *skip,
                      int n_skip, const char *out)
{
    static vx_bench_result r[256];
    const int max = (int)(sizeof r / sizeof *r);
    int n = 0, failed = 0, gpus = -1; /* -1: not asked yet (it starts the CUDA runtime) */
    size_t n_reg;
    const vx_bench_entry *reg = vx_bench_registry(&n_reg);
    for (size_t i = 0; i < n_reg; i++) {
        const vx_bench_entry *g = &reg[i];
        if ((only && strcmp(only, g->group) != 0) || listed(g->group, skip, n_skip)) continue;
        if (g->needs_gpu) {
            if (gpus < 0) gpus = vx_device_cuda_count();
            if (gpus == 0) {
                fprintf(stderr, "bench: %s skipped: no CUDA device\n", g->group);
                continue;
            }
        }
        int k = g->run(bo, r + n, max - n, stderr);
        if (k < 0) {
            fprintf(stderr, "bench: group %s failed\n", g->group);
            failed = 1;
        } else {
            n += k;
        }
    }
    vx_bench_print_json(stdout, r, n);
    if (out) {
        vx_err err;
        vx_atomic_file af;
        vx_status st = vx_atomic_open(&af, out, &err);
        if (!st) {
            vx_bench_print_json(af.f, r, n);
            st = vx_atomic_commit(&af, &err);
        }
        if (st) {
            fprintf(stderr, "vixen: %s\n", err.msg);
            failed = 1;
        }
    }
    fflush(stdout);
    return failed ? VX_EXIT_FAIL : VX_EXIT_OK;
}

/* A new folder for the benches' files, under $TMPDIR (else /tmp). */
static int bench_folder(char *path, size_t n)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    if (snprintf(path, n, "%s/vixen-bench-XXXXXX", base) >= (int)n) {
        fprintf(stderr, "vixen bench: TMPDIR is too long\n");
        return -1;
    }
    if (!mkdtemp(path)) {
        fprintf(stderr, "vixen bench: cannot make a folder in %s: %s\n", base, strerror(errno));
        return -1;
    }
    return 0;
}

/* The benches write their data into a temporary folder. A bench stopped by Ctrl-C or kill would
 * leave it behind, and removing a tree is no work for a signal handler; so the groups run in a
 * child process, and this one waits, passes a SIGINT, SIGTERM or SIGHUP on to it, removes the
 * folder however the child ended, and then ends the same way. */
static volatile sig_atomic_t g_child;

static void pass_on(int sig)
{
    if (g_child > 0) kill((pid_t)g_child, sig);
}

static int wait_then_clean(pid_t child, const char *tmp)
{
    static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa, old[3];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = pass_on;
    sigemptyset(&sa.sa_mask);
    g_child = child;
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &sa, &old[i]);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {}
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &old[i], NULL);
    vx_remove_tree(tmp, NULL);
    if (WIFSIGNALED(status)) { /* end as the child did, so a shell sees the interrupt */
        int sig = WTERMSIG(status);
        signal(sig, SIG_DFL);
        raise(sig);
        return 128 + sig;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : VX_EXIT_FAIL;
}

int vx_cmd_bench(int argc, char **argv)
{
    const char *bars_s = NULL, *envs_s = NULL, *steps_s = NULL, *out = NULL, *only = NULL;
    const char *skip[MAX_SKIP + 2]; /* room for the two aliases after the user's */
    int n_skip = 0, learn_skip = 0, train_skip = 0;
    vx_opt opts[] = {
        {"bars", "N", "bars for the data benchmarks (default 1000000)", &bars_s, NULL, NULL, NULL,
         0},
        {"envs", "N", "environments for the env benchmark (default 4096)", &envs_s, NULL, NULL,
         NULL, 0},
        {"steps", "T", "steps for the env benchmark (default 1000)", &steps_s, NULL, NULL, NULL, 0},
        {"out", "FILE", "also write the JSON to FILE", &out, NULL, NULL, NULL, 0},
        {"only", "GROUP", "run this group alone (the groups are listed above)", &only, NULL, NULL,
         NULL, 0},
        {"skip", "GROUP", "leave this group out (repeatable)", NULL, NULL, skip, &n_skip, MAX_SKIP},
        {"no-learn", NULL, "the same as --skip learn", NULL, &learn_skip, NULL, NULL, 0},
        {"no-train", NULL, "the same as --skip gpu-train", NULL, &train_skip, NULL, NULL, 0},
    };
    char *about = about_text();
    if (!about) {
        fprintf(stderr, "vixen bench: out of memory\n");
        return VX_EXIT_FAIL;
    }
    vx_cmd c = {"vixen bench", NULL, about, opts, sizeof opts / sizeof *opts, 0, 0};
    const char *pos[1];
    size_t np;
    int rc = vx_args_parse(&c, argc, argv, pos, &np);
    free(about);                       /* only --help prints it */
    vx_device_request_work_queues(32); /* the search's rows run many trials here (device.h) */
    long bars = 1000000, envs = 4096, steps = 1000;
    if (!rc && bars_s && vx_arg_long(&c, "bars", bars_s, 1000, 100000000, &bars)) rc = 2;
    if (!rc && envs_s && vx_arg_long(&c, "envs", envs_s, 1, 10000000, &envs)) rc = 2;
    if (!rc && steps_s && vx_arg_long(&c, "steps", steps_s, 1, 100000000, &steps)) rc = 2;
    if (!rc && only && check_group("only", only)) rc = 2;
    for (int i = 0; !rc && i < n_skip; i++)
        if (check_group("skip", skip[i])) rc = 2;
    if (rc) return rc == 1 ? VX_EXIT_OK : VX_EXIT_USAGE;
    /* the aliases are not checked: gpu-train is no group in a CPU build, and --no-train there
     * has always meant nothing to skip */
    if (learn_skip) skip[n_skip++] = "learn";
    if (train_skip) skip[n_skip++] = "gpu-train";

    char tmp[4096];
    if (bench_folder(tmp, sizeof tmp)) return VX_EXIT_FAIL;
    vx_bench_opts bo = {(size_t)bars, (size_t)envs, (size_t)steps, tmp};
    fflush(NULL); /* nothing buffered twice by the child */
    pid_t child = fork();
    if (child < 0) { /* no process to spare: run here, and an interrupt leaves the folder */
        rc = run_groups(&bo, only, skip, n_skip, out);
        vx_remove_tree(tmp, NULL);
        return rc;
    }
    if (child == 0) _exit(run_groups(&bo, only, skip, n_skip, out));
    return wait_then_clean(child, tmp);
}

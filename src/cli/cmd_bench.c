/* cmd_bench.c — `vixen bench`: the benchmark suite, as JSON on stdout (and --out FILE). */
#include "args.h"
#include "bench.h"
#include "cli.h"
#if VX_HAVE_CUDA
#include "vixen/cuda_util.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --only GROUP: one of the groups below, or all of them when not given */
static const char *g_only;
static int want(const char *group) { return !g_only || strcmp(g_only, group) == 0; }

int vx_cmd_bench(int argc, char **argv)
{
    const char *bars_s = NULL, *envs_s = NULL, *steps_s = NULL, *out = NULL, *only = NULL;
    int learn_skip = 0, train_skip = 0;
    vx_opt opts[] = {
        {"bars", "N", "bars for the data benchmarks (default 1000000)", &bars_s, NULL, NULL, NULL, 0},
        {"envs", "N", "environments for the env benchmark (default 4096)", &envs_s, NULL, NULL, NULL, 0},
        {"steps", "T", "steps for the env benchmark (default 1000)", &steps_s, NULL, NULL, NULL, 0},
        {"out", "FILE", "also write the JSON to FILE", &out, NULL, NULL, NULL, 0},
        {"only", "GROUP", "run one group: data, env, learn, gpu-env, gpu-dqn, gpu-replay, gpu-train",
         &only, NULL, NULL, NULL, 0},
        {"no-learn", NULL, "skip the learner benchmarks (replay at 1 M, updates, epochs)", NULL,
         &learn_skip, NULL, NULL, 0},
        {"no-train", NULL, "skip the GPU training-epoch benchmarks (a few minutes)", NULL,
         &train_skip, NULL, NULL, 0},
    };
    vx_cmd c = {"vixen bench", NULL,
                "Runs the benchmark suite on synthetic data: CSV and DBN parsing, features, "
                "feature-cache load, CPU environment stepping, replay sampling at 1 M capacity, "
                "DQN updates and a whole epoch; prints JSON with each figure and its target.",
                opts, sizeof opts / sizeof *opts, 0, 0};
    const char *pos[1];
    size_t np;
    int rc = vx_args_parse(&c, argc, argv, pos, &np);
    long bars = 1000000, envs = 4096, steps = 1000;
    if (!rc && bars_s && vx_arg_long(&c, "bars", bars_s, 1000, 100000000, &bars)) rc = 2;
    if (!rc && envs_s && vx_arg_long(&c, "envs", envs_s, 1, 10000000, &envs)) rc = 2;
    if (!rc && steps_s && vx_arg_long(&c, "steps", steps_s, 1, 100000000, &steps)) rc = 2;
    if (!rc && only) {
        const char *groups[] = {"data", "env", "learn", "gpu-env", "gpu-dqn", "gpu-replay", "gpu-train"};
        int ok = 0;
        for (size_t i = 0; i < sizeof groups / sizeof *groups; i++) ok |= strcmp(only, groups[i]) == 0;
        if (!ok) {
            fprintf(stderr, "vixen bench: --only: unknown group '%s'\n", only);
            rc = 2;
        }
        g_only = only;
    }
    if (rc) return rc == 1 ? VX_EXIT_OK : VX_EXIT_USAGE;

    char tmp[] = "/tmp/vixen-bench-XXXXXX";
    if (!mkdtemp(tmp)) {
        perror("vixen bench: mkdtemp");
        return VX_EXIT_FAIL;
    }
    vx_bench_result r[160];
    int n = want("data") ? vx_bench_data((size_t)bars, tmp, r, 16, stderr) : 0;
    const int max = (int)(sizeof r / sizeof *r);
    int failed = n < 0;
    if (n < 0) n = 0;
    /* the environment on the synthetic market */
    vx_synth_cfg sc;
    vx_synth_default(&sc);
    sc.days = 60;
    vx_series s = {0};
    vx_market m;
    vx_err err;
    vx_status st = vx_synth_generate(&sc, &s, NULL, &err);
    if (!st) st = vx_market_from_series(&s, &m, &err);
    vx_series_free(&s);
    if (!st && !want("env")) vx_market_close(&m);
    if (!st && want("env")) {
        vx_env_cfg ec;
        vx_env_cfg_default(&ec);
        vx_env_bench_stats bs;
        fprintf(stderr, "bench: env stepping\n");
        st = vx_bench_env_run(&m, &ec, (size_t)envs, (size_t)steps, &bs, NULL, &err);
        vx_market_close(&m);
        if (!st) {
            vx_bench_result *x = &r[n++];
            memset(x, 0, sizeof *x);
            snprintf(x->name, sizeof x->name, "env_step_cpu");
            snprintf(x->unit, sizeof x->unit, "env-steps/s");
            x->items = (double)envs * (double)steps;
            x->seconds = bs.seconds;
            x->value = bs.env_steps_per_s;
            x->target = 5e6;
        }
    }
    if (st) {
        fprintf(stderr, "vixen: %s\n", err.msg);
        failed = 1;
    }
    if (!learn_skip && want("learn")) {
        int k = vx_bench_learn(r + n, max - n, stderr);
        if (k > 0) n += k;
    }
#if VX_HAVE_CUDA
    if (vx_cuda_device_count() > 0) {
        if (want("gpu-env")) n += vx_bench_env_cuda(r + n, max - n, stderr);
        if (want("gpu-dqn")) n += vx_bench_dqn_cuda(r + n, max - n, stderr);
        if (want("gpu-replay")) n += vx_bench_replay_cuda(r + n, max - n, stderr);
        if (!train_skip && want("gpu-train")) n += vx_bench_train_cuda(r + n, max - n, stderr);
    }
#endif
    vx_remove_tree(tmp, NULL);
    vx_bench_print_json(stdout, r, n);
    if (out) {
        vx_atomic_file af;
        if (vx_atomic_open(&af, out, &err) == VX_OK) {
            vx_bench_print_json(af.f, r, n);
            if (vx_atomic_commit(&af, &err)) failed = 1;
        } else {
            failed = 1;
        }
        if (failed) fprintf(stderr, "vixen: %s\n", err.msg);
    }
    return failed ? VX_EXIT_FAIL : VX_EXIT_OK;
}

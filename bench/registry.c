/* registry.c — the table of benchmark groups that `vixen bench` runs, and the adapters that give
 * each benchmark the one signature the table holds.
 *
 * Why a table: the command used to call every benchmark by hand and check --only against a list
 * of names of its own, so a new benchmark meant edits in three places that could disagree. Here
 * it is one entry; the command loops over the table for --only, --skip, --help and the run.
 * The GPU entries are compiled only in CUDA builds (this file is built with VX_HAVE_CUDA=1
 * there); whether a device is present is the command's question, asked at run time.
 *
 * The adapters are deliberately thin: each benchmark's own code stays in its file. The
 * environment group is the exception in size only — it builds the 60-day synthetic market and
 * turns vx_bench_env_run's statistics into a result row, the part `vixen env bench` does not
 * share. */
#include "bench.h"

#include <string.h>

static int bench_data(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    return vx_bench_data(o->bars, o->tmp_dir, out, max, log);
}

static int bench_env(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    if (max < 1) return 0;
    vx_synth_cfg sc;
    vx_synth_default(&sc);
    sc.days = 60;
    vx_series s = {0};
    vx_market m;
    vx_err e;
    vx_status st = vx_synth_generate(&sc, &s, NULL, &e);
    if (!st) st = vx_market_from_series(&s, &m, &e);
    vx_series_free(&s);
    if (st) {
        if (log) fprintf(log, "bench: %s\n", e.msg);
        return -1;
    }
    vx_env_cfg ec;
    vx_env_cfg_default(&ec);
    vx_env_bench_stats bs;
    if (log) fprintf(log, "bench: env stepping\n");
    st = vx_bench_env_run(&m, &ec, o->envs, o->steps, &bs, NULL, &e);
    vx_market_close(&m);
    if (st) {
        if (log) fprintf(log, "bench: %s\n", e.msg);
        return -1;
    }
    vx_bench_result *x = &out[0];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "env_step_cpu");
    snprintf(x->unit, sizeof x->unit, "env-steps/s");
    x->items = (double)o->envs * (double)o->steps;
    x->seconds = bs.seconds;
    x->value = bs.env_steps_per_s;
    x->target = 5e6;
    return 1;
}

static int bench_learn(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    return vx_bench_learn(out, max, log);
}

static int bench_ppo(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    (void)o;
    return vx_bench_ppo(out, max, log);
}

static int bench_hyperopt(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    (void)o;
    return vx_bench_hyperopt(out, max, log);
}

#if VX_HAVE_CUDA
static int bench_gpu_env(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    return vx_bench_env_cuda(out, max, log);
}

static int bench_gpu_dqn(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    return vx_bench_dqn_cuda(out, max, log);
}

static int bench_gpu_replay(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    return vx_bench_replay_cuda(out, max, log);
}

static int bench_gpu_train(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    return vx_bench_train_cuda(out, max, log);
}

static int bench_gpu_collect(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    (void)o;
    return vx_bench_collect_cuda(out, max, log);
}

static int bench_gpu_ppo(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    return vx_bench_ppo_cuda(out, max, log);
}

static int bench_gpu_fused(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log)
{
    (void)o;
    int n = vx_bench_fused_cuda(out, max, log);
    int m = n < 0 ? -1 : vx_bench_fused_dqn_cuda(out + n, max - n, log);
    return m < 0 ? -1 : n + m;
}
#endif

static const vx_bench_entry registry[] = {
    {"data", "CSV and DBN parsing, features, feature-cache load (--bars)", 0, bench_data},
    {"env", "CPU environment stepping with random actions (--envs, --steps)", 0, bench_env},
    {"learn", "CPU replay sample + update at 1 M, a DQN update, the default epoch", 0, bench_learn},
    {"ppo", "a CPU PPO iteration at the defaults, beside its FLOP bound", 0, bench_ppo},
    {"hyperopt", "study trials one by one, at once in threads, as processes (the GPU if any)", 0,
     bench_hyperopt},
#if VX_HAVE_CUDA
    {"gpu-env", "environment stepping on the device, 100 steps as one graph", 1, bench_gpu_env},
    {"gpu-dqn", "one captured DQN update at batch 1,024 and 4,096", 1, bench_gpu_dqn},
    {"gpu-replay", "device replay over capacities x batches, inserts; the CPU grid", 1,
     bench_gpu_replay},
    {"gpu-collect", "the 2,048 x 100 collection alone: float32 per layer, fused tf32/tf32x3/bf16",
     1, bench_gpu_collect},
    {"gpu-train", "whole training epochs on the GPU and the CPU (a few minutes)", 1,
     bench_gpu_train},
    {"gpu-ppo", "PPO iterations at 2,048 x 128, 4 x 32 minibatches, float32 and TF32", 1,
     bench_gpu_ppo},
    {"gpu-fused",
     "the trunk, the network step, whole DQN updates: 1 trial, 64 apart, 64 as a group", 1,
     bench_gpu_fused},
#endif
};

const vx_bench_entry *vx_bench_registry(size_t *n)
{
    *n = sizeof registry / sizeof *registry;
    return registry;
}

const vx_bench_entry *vx_bench_find(const char *group)
{
    for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
        if (strcmp(registry[i].group, group) == 0) return &registry[i];
    return NULL;
}

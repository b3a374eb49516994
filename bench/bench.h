/* bench.h — the benchmark suite behind `vixen bench` and `vixen env bench`.
 *
 * Each benchmark times real work on real-sized synthetic inputs (best of several repetitions,
 * after a warm-up) and reports items per second against the target the issue set. Targets are
 * checked here, in benchmarks — never in timed unit tests.
 *
 * The groups `vixen bench` runs are one table (bench/registry.c): a name, a line for --help,
 * whether it needs a GPU, and one function signature for all, so adding a benchmark is one entry
 * there and the command needs no change. */
#ifndef VIXEN_BENCH_H
#define VIXEN_BENCH_H

#include <stddef.h>
#include <stdio.h>
#include "vixen/data.h"
#include "vixen/env.h"

typedef struct {
    char name[48];
    char unit[24];  /* what `rate` counts per second, or "ms" for a latency */
    double items;   /* items processed per repetition */
    double seconds; /* best repetition */
    double value;   /* items / seconds, or milliseconds for latencies */
    double target;  /* the figure to meet */
    int lower_is_better;
} vx_bench_result;

/* Data benchmarks over `bars` synthetic bars: CSV parse, DBN parse (plain and zstd), features,
 * cache load. Temporary files go under `tmp_dir`. Returns the number of results, or -1. */
int vx_bench_data(size_t bars, const char *tmp_dir, vx_bench_result *out, int max, FILE *log);

/* Environment stepping: `envs` environments for `steps` steps with random actions. */
typedef struct {
    double env_steps_per_s;
    double seconds;
    size_t episodes_ended, terminated;
    double mean_reward, mean_episode_return; /* NAN when no episode ended */
} vx_env_bench_stats;

vx_status vx_bench_env_run(const vx_market *m, const vx_env_cfg *cfg, size_t envs, size_t steps,
                           vx_env_bench_stats *out, FILE *progress, vx_err *e);

/* Learner benchmarks: replay sample + update at 1 M capacity (against a textbook sum tree), one
 * update at batch 256, the CPU default epoch. */
int vx_bench_learn(vx_bench_result *out, int max, FILE *log);

/* PPO on the CPU: one iteration at the defaults, env-steps/s beside the FLOP-bound estimate. */
int vx_bench_ppo(vx_bench_result *out, int max, FILE *log);

/* GPU replay: sample + update graphs over capacities × batches, inserts (CUDA builds only). */
int vx_bench_replay_cuda(vx_bench_result *out, int max, FILE *log);

/* GPU environment stepping as a 100-step graph (CUDA builds only). */
int vx_bench_env_cuda(vx_bench_result *out, int max, FILE *log);

/* One captured DQN update on the GPU at batch 1,024 and 4,096 (CUDA builds only). */
int vx_bench_dqn_cuda(vx_bench_result *out, int max, FILE *log);

/* Whole training epochs through vx_train_run: the reference workload on the GPU (PER 100 K and
 * 10 M, batch 1,024; then the batch the GPU chooses) and on the CPU (CUDA builds only). */
int vx_bench_train_cuda(vx_bench_result *out, int max, FILE *log);
/* The reference 2,048 × 100 collection alone: per layer in float32 and fused in TF32, TF32×3 and
 * BF16 (CUDA builds only). */
int vx_bench_collect_cuda(vx_bench_result *out, int max, FILE *log);
/* PPO iterations on the GPU at 2,048 × 128 through vx_train_run, float32 and TF32. */
int vx_bench_ppo_cuda(vx_bench_result *out, int max, FILE *log);
/* The pieces of fused trials: the Q-network's trunk, and the whole network's learning step
 * (forward, backward, clip, Adam), for one trial, 64 as a graph each and 64 as one group (CUDA
 * builds only). */
int vx_bench_fused_cuda(vx_bench_result *out, int max, FILE *log);
/* Whole DQN updates of fused trials: one trial, 64 as a learner each, 64 as one learner group. */
int vx_bench_fused_dqn_cuda(vx_bench_result *out, int max, FILE *log);

/* Study trials one after another, at once in threads, and as separate processes: aggregate
 * updates per second, memory per trial estimated and measured (the GPU when present). */
int vx_bench_hyperopt(vx_bench_result *out, int max, FILE *log);

void vx_bench_print_json(FILE *f, const vx_bench_result *r, int n);

/* What a group may need from the command line; each uses the fields it names and ignores the
 * rest, so one signature serves every group. */
typedef struct {
    size_t bars;         /* data: synthetic bars to parse and featurise (default 1,000,000) */
    size_t envs, steps;  /* env: environments × steps (default 4,096 × 1,000) */
    const char *tmp_dir; /* an existing folder for temporary files; the caller removes it */
} vx_bench_opts;

/* One group: writes at most `max` results to `out` and returns how many, or -1 when the group
 * could not run (the reason already written to `log`; nothing it wrote to `out` counts). Progress
 * lines go to `log`. */
typedef int (*vx_bench_fn)(const vx_bench_opts *o, vx_bench_result *out, int max, FILE *log);

typedef struct {
    const char *group; /* what --only and --skip name */
    const char *about; /* one line for --help */
    int needs_gpu;     /* run only when a CUDA device is present */
    vx_bench_fn run;
} vx_bench_entry;

/* The table, in the order `vixen bench` runs it; its length in *n. GPU entries exist only in
 * CUDA builds. */
const vx_bench_entry *vx_bench_registry(size_t *n);
/* The entry named `group`, or NULL. */
const vx_bench_entry *vx_bench_find(const char *group);

#endif

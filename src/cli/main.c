/* main.c — the `vixen` command: dispatch to the subcommands, install the log sink.
 *
 * The only place that exits. Library code reports through vx_status and the log sink; here the
 * sink writes "vixen: " lines to stderr so that stdout stays clean for JSON. */
#include "cli.h"
#include "vixen/util.h"

#include <stdio.h>
#include <string.h>

static void stderr_sink(vx_log_level level, const char *line, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "vixen: %s%s\n", level == VX_LOG_WARN ? "warning: " : "", line);
}

/* Progress of the library's long jobs: one vx_progress line per job, shown when the job is still
 * running after a second (short jobs stay silent, also at their end). */
typedef struct {
    const char *job;
    vx_progress p;
    uint64_t start_ns;
} progress_state;

static void progress_sink(const char *job, const char *unit, uint64_t done, uint64_t total,
                          void *ctx)
{
    progress_state *ps = ctx;
    if (ps->job != job) { /* a new job: the label's pointer identifies it */
        ps->job = job;
        ps->start_ns = vx_now_ns();
        vx_progress_start(&ps->p, stderr, job, unit, total);
        ps->p.printed = 0;
    }
    int shown = vx_seconds_since(ps->start_ns) >= 1.0;
    if (done >= total) {
        if (shown || ps->p.printed) vx_progress_finish(&ps->p, done);
        ps->job = NULL;
    } else if (shown) {
        vx_progress_update(&ps->p, done);
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: vixen COMMAND [SUBCOMMAND] [options]\n"
               "\n"
               "vixen trains reinforcement-learning trading agents on OHLCV futures bars.\n"
               "\n"
               "commands:\n"
               "  train [FILE...]          train a DQN or PPO agent (synthetic market if no FILE)\n"
               "  eval RUN|CHECKPOINT      evaluate a policy on the test split, next to baselines\n"
               "  report RUN               write the run's report.html (charts, tables) again\n"
               "  data inspect FILE...     bars, range, interval, gaps, instruments, validation\n"
               "  data synth               write the synthetic market (CSV or DBN)\n"
               "  data features FILE...    compute the 45 market features into the feature cache\n"
               "  env bench                step N environments with a random policy, report speed\n"
               "  bench                    the benchmark suite (JSON)\n"
               "  hyperopt SPACE [FILE...] tune training settings with a particle swarm\n"
               "  hyperopt status DIR      a study's progress and best trial\n"
               "  hyperopt report DIR      write a study's report.html again\n"
               "\n"
               "Every command takes --help. Exit codes: 0 ok, 1 failure, 2 usage error.\n");
}

int main(int argc, char **argv)
{
    vx_log_set_sink(stderr_sink, NULL, VX_LOG_INFO);
    static progress_state ps;
    vx_progress_set_sink(progress_sink, &ps);
    if (argc < 2) {
        usage(stderr);
        return VX_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return VX_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("vixen 0.1.0\n");
        return VX_EXIT_OK;
    }
    if (strcmp(cmd, "train") == 0) return vx_cmd_train(argc - 2, argv + 2);
    if (strcmp(cmd, "eval") == 0) return vx_cmd_eval(argc - 2, argv + 2);
    if (strcmp(cmd, "report") == 0) return vx_cmd_report(argc - 2, argv + 2);
    if (strcmp(cmd, "data") == 0) return vx_cmd_data(argc - 2, argv + 2);
    if (strcmp(cmd, "env") == 0) return vx_cmd_env(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0) return vx_cmd_bench(argc - 2, argv + 2);
    if (strcmp(cmd, "hyperopt") == 0) return vx_cmd_hyperopt(argc - 2, argv + 2);
    fprintf(stderr, "vixen: unknown command '%s' (see vixen --help)\n", cmd);
    return VX_EXIT_USAGE;
}

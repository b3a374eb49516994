/* cmd_report.c — `vixen report RUN`: (re)writes a run folder's report.html and prints its path.
 *
 * Training writes the report itself; this command is for a run whose files were changed or made
 * by an older vixen, and for looking again after editing nothing. A walk-forward folder has no
 * eval.json of its own (its folds are whole runs, fold-1/ …): there it writes every fold's report,
 * one path a line, so one command covers both kinds of folder. */
#include "args.h"
#include "cli.h"
#include "vixen/train.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int write_one(const char *dir)
{
    vx_err e;
    if (vx_report_write(dir, &e)) {
        fprintf(stderr, "vixen: %s\n", e.msg);
        return VX_EXIT_FAIL;
    }
    printf("%s/report.html\n", dir);
    return VX_EXIT_OK;
}

int vx_cmd_report(int argc, char **argv)
{
    vx_cmd c = {"vixen report",
                "RUN",
                "Writes RUN/report.html, one self-contained page (no network, no scripts) made "
                "from the run folder's eval.json, metrics.csv and config.yaml: the evaluation "
                "table with warnings, equity curves of the agent and the baselines on the test "
                "split, the agent's drawdown, loss and validation Sharpe per epoch with the chosen "
                "checkpoint, the agent's action histograms and the config. `vixen train` writes it "
                "at the end of every run; this writes it again and prints its path. For a "
                "walk-forward folder (--folds K) it writes the report of each fold, fold-1/ to "
                "fold-K/.",
                NULL,
                0,
                1,
                1};
    const char *pos[2];
    size_t np;
    int rc = vx_args_parse(&c, argc, argv, pos, &np);
    if (rc) return rc == 1 ? VX_EXIT_OK : VX_EXIT_USAGE;
    const char *run = pos[0];
    struct stat sb;
    if (stat(run, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "vixen: %s: %s\n", run,
                stat(run, &sb) != 0 ? "no such run folder" : "a file, not a run folder");
        return VX_EXIT_FAIL;
    }
    char path[4096];
    if (strlen(run) + 32 > sizeof path) { /* room for the longest name below */
        fprintf(stderr, "vixen: %.200s…: run folder path too long\n", run);
        return VX_EXIT_FAIL;
    }
    snprintf(path, sizeof path, "%s/walk_forward.json", run);
    int walk = exists(path);
    snprintf(path, sizeof path, "%s/eval.json", run);
    if (!walk || exists(path)) return write_one(run); /* a missing eval.json: its error */
    int k = 1;
    for (;; k++) {
        snprintf(path, sizeof path, "%s/fold-%d", run, k);
        if (!exists(path)) break;
        if ((rc = write_one(path))) return rc;
    }
    if (k == 1) {
        fprintf(stderr, "vixen: %s: a walk-forward folder without fold-1/: no run to report\n",
                run);
        return VX_EXIT_FAIL;
    }
    return VX_EXIT_OK;
}

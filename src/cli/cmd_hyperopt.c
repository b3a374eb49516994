/* cmd_hyperopt.c — `vixen hyperopt`: a particle-swarm study over training settings (hyperopt.h).
 *
 *   vixen hyperopt SPACE [FILE...] --study DIR [--config FILE] [--set KEY=VALUE]... [options]
 *   vixen hyperopt SPACE ... --plan          the hardware budget only
 *   vixen hyperopt --resume DIR              go on with a study after a stop or a crash
 *   vixen hyperopt status DIR                a study's state (also while it runs)
 *
 * Under an MPI launcher (mpirun -np K vixen hyperopt ..., srun) rank 0 runs the command and the
 * other ranks serve its study (hyperopt.h, "across processes"): each opens its own device and runs
 * the sets of trials rank 0 hands it.
 *
 * Ctrl-C (or SIGTERM) stops the trials running at their next epoch's end, marks them pending in
 * the store and ends the study (the finished trials' results are kept; --resume runs the stopped
 * ones again from the start); a second one quits at once, which loses nothing either: every write
 * to the store is a transaction, and trials left running are run again. */
#include "args.h"
#include "cli.h"
#include "vixen/device.h"
#include "vixen/env.h"
#include "vixen/train.h"
#include "vixen/hyperopt.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SETS 64

static volatile int g_stop;
static int g_quiet; /* a worker rank: rank 0 says it */

static void on_interrupt(int sig)
{
    (void)sig;
    if (g_stop) _exit(VX_EXIT_INTERRUPTED);
    g_stop = 1;
    if (g_quiet) return;
    static const char m[] = "\nvixen: interrupted: stopping the trials running at their next epoch "
                            "(interrupt again to quit at once; --resume goes on either way)\n";
    ssize_t n = write(STDERR_FILENO, m, sizeof m - 1);
    (void)n;
}

static void handle_interrupts(int on)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on ? on_interrupt : SIG_DFL;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void print_progress(const vx_study_progress *p, void *ctx)
{
    (void)ctx;
    char t[32];
    vx_format_duration(p->seconds, t, sizeof t);
    char best[2200] = "";
    if (p->best == p->best) { /* not NaN */
        int k = snprintf(best, sizeof best, " | best %.3f:", p->best);
        for (const char *c = p->best_params; *c && k < (int)sizeof best - 2; c++)
            best[k++] = *c == '\n' ? (c[1] ? ',' : '\0') : *c;
        best[k] = '\0';
    }
    char ranks[32] = "";
    if (p->ranks > 1) snprintf(ranks, sizeof ranks, " over %d ranks", p->ranks);
    char mem[48] = ""; /* none on a rank 0 that only coordinates */
    if (p->mem_per_trial > 0)
        snprintf(mem, sizeof mem, ", a %.0f MB share a trial", p->mem_per_trial / 1e6);
    char grouped[32] = "";
    if (p->grouped > 0) snprintf(grouped, sizeof grouped, " (%d in groups)", p->grouped);
    fprintf(stderr,
            "hyperopt: generation %d/%d | trials %d/%d done, %d running%s | concurrency %d%s%s | "
            "%d halvings, %d pruned, %d failed | %s%s\n",
            p->generation + 1, p->generations, p->done, p->total, p->running, grouped,
            p->concurrency, ranks, mem, p->halvings, p->pruned, p->failed, t, best);
}

static int fail(const vx_err *e)
{
    fprintf(stderr, "vixen: %s\n", e->msg);
    return VX_EXIT_FAIL;
}

static int status_cmd(int argc, char **argv)
{
    vx_cmd c = {"vixen hyperopt status",
                "DIR",
                "Prints a study's state from its store: trials finished, running and to go, "
                "out-of-memory halvings, the best trial so far with its parameters. Safe beside "
                "a running study.",
                NULL,
                0,
                1,
                1};
    const char *pos[2];
    size_t np;
    int rc = vx_args_parse(&c, argc, argv, pos, &np);
    if (rc) return rc == 2 ? VX_EXIT_USAGE : VX_EXIT_OK;
    vx_err e;
    if (vx_study_status(pos[0], stdout, &e)) return fail(&e);
    return VX_EXIT_OK;
}

static int report_cmd(int argc, char **argv)
{
    vx_cmd c = {"vixen hyperopt report",
                "DIR",
                "Writes the study's report.html again from its store (also while it runs) and "
                "prints its path.",
                NULL,
                0,
                1,
                1};
    const char *pos[2];
    size_t np;
    int rc = vx_args_parse(&c, argc, argv, pos, &np);
    if (rc) return rc == 2 ? VX_EXIT_USAGE : VX_EXIT_OK;
    vx_err e;
    if (vx_study_report_write(pos[0], &e)) return fail(&e);
    printf("%s/report.html\n", pos[0]);
    return VX_EXIT_OK;
}

/* A rank's device: its node's GPU by its place there, or its share of the cores. */
static vx_status open_rank_device(const vx_ranks *r, int kind, vx_device **out, int *cores,
                                  vx_err *e)
{
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = kind;
    dc.threads = 1; /* on the CPU every trial runs its own BLAS in its own thread */
    return vx_device_open_local(&dc, r->local_rank, r->local_size, out, cores, e);
}

/* Ranks > 0: rank 0's study, until it is done. */
static int serve_cmd(const vx_ranks *r)
{
    g_quiet = 1;
    handle_interrupts(1);
    vx_err e;
    vx_status st = vx_study_serve(r, open_rank_device, &g_stop, &e);
    handle_interrupts(0);
    if (st) fprintf(stderr, "vixen: rank %d on %s: %s\n", r->rank, r->host, e.msg);
    return st ? VX_EXIT_FAIL : VX_EXIT_OK;
}

static int study_cmd(int argc, char **argv, const vx_ranks *r);

/* The data every trial trains on, opened once before a study is made: a file that cannot be read,
 * or a market too short for its splits, is one error here rather than the same failure in every
 * trial of every generation, with a study folder left behind (as vixen train checks first). */
static int check_data(const vx_train_cfg *base)
{
    vx_market m;
    vx_err e;
    vx_status st = vx_train_open_market(base, &m, &e);
    if (st) return fail(&e);
    st = vx_env_check_splits(&m, &base->env, (int64_t)base->env.episode_len + 2, &e);
    vx_market_close(&m);
    return st ? fail(&e) : VX_EXIT_OK;
}

int vx_cmd_hyperopt(int argc, char **argv)
{
    if (argc > 0 && strcmp(argv[0], "status") == 0) return status_cmd(argc - 1, argv + 1);
    if (argc > 0 && strcmp(argv[0], "report") == 0) return report_cmd(argc - 1, argv + 1);
    vx_ranks r = {0, 1, 0, 1, 1, ""};
    int mpi = vx_mpi_launched();
    if (mpi) {
        vx_err e;
        if (vx_mpi_init(&r, &e)) return fail(&e);
    }
    /* many trials at once in this process: more hardware queues, a GPU's 32 divided among the
     * ranks on it (device.h), before the first CUDA call */
    vx_device_request_work_queues(vx_device_work_queues_for(r.local_size));
    int rc = r.rank > 0 ? serve_cmd(&r) : study_cmd(argc, argv, &r);
    vx_study_release_ranks(&r); /* whatever rank 0 did, the others hear of it */
    if (mpi) vx_mpi_finalize();
    return rc;
}

static int study_cmd(int argc, char **argv, const vx_ranks *r)
{
    const char *config = NULL, *study = NULL, *resume = NULL, *device = NULL, *algo = NULL;
    const char *gens = NULL, *swarm = NULL, *seeds = NULL, *conc = NULL, *seed = NULL;
    const char *margin = NULL, *warmup = NULL, *launcher = NULL, *fuse = NULL, *sets[MAX_SETS];
    int n_sets = 0, plan = 0, no_prune = 0, coordinate_only = 0;
    vx_opt opts[] = {
        {"study", "DIR", "the study folder (new)", &study, NULL, NULL, NULL, 0},
        {"resume", "DIR", "go on with the study in DIR", &resume, NULL, NULL, NULL, 0},
        {"config", "FILE", "the base training settings (YAML), which the space's keys vary",
         &config, NULL, NULL, NULL, 0},
        {"set", "KEY=VALUE", "override one base setting (repeatable)", NULL, NULL, sets, &n_sets,
         MAX_SETS},
        {"algo", "dqn|ppo", "the trials' learning algorithm (same as --set train.algo=NAME)", &algo,
         NULL, NULL, NULL, 0},
        {"generations", "N", "generations of the swarm (5)", &gens, NULL, NULL, NULL, 0},
        {"swarm", "N", "particles (20)", &swarm, NULL, NULL, NULL, 0},
        {"seeds", "N", "training seeds per particle, its objective their mean (1)", &seeds, NULL,
         NULL, NULL, 0},
        {"concurrency", "N", "trials at once (default: as many as the budget allows)", &conc, NULL,
         NULL, NULL, 0},
        {"launcher", "threads|one",
         "how trials launch their graphs: each from its own thread (threads, the default) or "
         "all through one launcher thread (one; one process only)",
         &launcher, NULL, NULL, NULL, 0},
        {"fuse", "auto|on|off",
         "trials whose settings differ only in what a group lets its members differ in train as "
         "one group (on), each alone (off), or grouped where the algorithm fuses their work on the "
         "device with results bit for bit the trials' alone (auto, the default; under MPI the "
         "only choice). A GPU fuses DQN groups' updates within a tolerance, so only when asked",
         &fuse, NULL, NULL, NULL, 0},
        {"seed", "S", "seed of the swarm (1)", &seed, NULL, NULL, NULL, 0},
        {"margin", "F", "share of the memory budget kept free (0.2)", &margin, NULL, NULL, NULL, 0},
        {"no-prune", NULL, "no median pruning", NULL, &no_prune, NULL, NULL, 0},
        {"prune-warmup", "N", "validations before a trial may be pruned (2)", &warmup, NULL, NULL,
         NULL, 0},
        {"device", "cpu|cuda|auto", "where trials run (default: the base config's train.device)",
         &device, NULL, NULL, NULL, 0},
        {"plan", NULL, "print the hardware budget and the concurrency it allows, and exit", NULL,
         &plan, NULL, NULL, 0},
        {"coordinate-only", NULL,
         "under MPI: rank 0 runs no trials, only the swarm, the store and the progress", NULL,
         &coordinate_only, NULL, NULL, 0},
    };
    vx_cmd c = {
        "vixen hyperopt",
        "SPACE [FILE...]",
        "Tunes training settings with a particle swarm. SPACE is a YAML file of parameters, "
        "each a training key with its type and range (dqn.lr: {type: logfloat, low: 1e-4, high: "
        "3e-3}; types float, logfloat, int, logint, categorical with values: [...]). Each "
        "particle of each generation trains the base config (defaults, --config, --set, FILE...) "
        "with its values; its objective is the best validation Sharpe ratio. Trials run several "
        "at once on one device, as many as its memory budget allows. The study folder gets "
        "study.db (the store: resumable after any crash), trials/, trials.csv, best.yaml "
        "(`vixen train --config best.yaml` trains the best trial again) and test.txt, the best "
        "trial evaluated once on the test split. `vixen hyperopt status DIR` reads a study. Under "
        "mpirun or srun every rank runs trials on its own device (its node's GPU by its place "
        "there, or its share of the cores) and rank 0 keeps the study; the folder must be on a "
        "file system every rank sees.",
        opts,
        sizeof opts / sizeof *opts,
        0,
        VX_TRAIN_MAX_FILES + 1};
    const char **pos = malloc((size_t)argc * sizeof *pos + 1);
    if (!pos) {
        fprintf(stderr, "vixen: out of memory\n");
        return VX_EXIT_FAIL;
    }
    size_t np;
    int rc = vx_args_parse(&c, argc, argv, pos, &np);
    if (rc) {
        free(pos);
        return rc == 2 ? VX_EXIT_USAGE : VX_EXIT_OK;
    }
    long v;
    vx_study_cfg sc;
    vx_study_cfg_default(&sc);
    if (gens && vx_arg_long(&c, "generations", gens, 1, 100000, &v) == 0) sc.generations = (int)v;
    else if (gens) rc = VX_EXIT_USAGE;
    if (swarm && vx_arg_long(&c, "swarm", swarm, 1, 100000, &v) == 0) sc.pso.swarm = (int)v;
    else if (swarm) rc = VX_EXIT_USAGE;
    if (seeds && vx_arg_long(&c, "seeds", seeds, 1, 1000, &v) == 0) sc.seeds = (int)v;
    else if (seeds) rc = VX_EXIT_USAGE;
    if (conc && vx_arg_long(&c, "concurrency", conc, 1, 4096, &v) == 0) sc.concurrency = (int)v;
    else if (conc) rc = VX_EXIT_USAGE;
    if (seed && vx_arg_long(&c, "seed", seed, 0, 0x7fffffffffffffffL, &v) == 0)
        sc.pso.seed = (uint64_t)v;
    else if (seed) rc = VX_EXIT_USAGE;
    if (warmup && vx_arg_long(&c, "prune-warmup", warmup, 0, 1000000, &v) == 0)
        sc.prune_warmup = (int)v;
    else if (warmup) rc = VX_EXIT_USAGE;
    if (margin && vx_arg_double(&c, "margin", margin, &sc.margin) != 0) rc = VX_EXIT_USAGE;
    else if (margin && !(sc.margin >= 0 && sc.margin < 1)) { /* a usage error, as every flag's */
        fprintf(stderr, "vixen: --margin %s: a share of the budget in [0, 1)\n", margin);
        rc = VX_EXIT_USAGE;
    }
    sc.prune = !no_prune;
    int one_launcher = launcher && strcmp(launcher, "one") == 0;
    if (!rc && launcher && !one_launcher && strcmp(launcher, "threads") != 0) {
        fprintf(stderr, "vixen: --launcher takes threads or one, not '%s'\n", launcher);
        rc = VX_EXIT_USAGE;
    }
    if (!rc && one_launcher && r->size > 1) {
        fprintf(stderr, "vixen: --launcher one is for a study in one process (under MPI each "
                        "rank's trials launch from their own threads)\n");
        rc = VX_EXIT_USAGE;
    }
    int fuse_mode = !fuse || strcmp(fuse, "auto") == 0 ? -1 : strcmp(fuse, "on") == 0 ? 1 : 0;
    if (!rc && fuse && fuse_mode == 0 && strcmp(fuse, "off") != 0) {
        fprintf(stderr, "vixen: --fuse takes auto, on or off, not '%s'\n", fuse);
        rc = VX_EXIT_USAGE;
    }
    if (!rc && fuse_mode >= 0 && r->size > 1) {
        fprintf(stderr, "vixen: --fuse on|off is for a study in one process (under MPI each "
                        "rank groups its trials where its device fuses them)\n");
        rc = VX_EXIT_USAGE;
    }
    if (!rc && resume &&
        (np || study || config || n_sets || algo || plan || gens || swarm || seeds || seed ||
         margin || warmup || no_prune)) {
        fprintf(stderr, "vixen: --resume takes the study's own space and settings (only "
                        "--concurrency and --device may be given)\n");
        rc = VX_EXIT_USAGE;
    }
    if (!rc && !resume && np < 1) {
        fprintf(stderr, "vixen: hyperopt needs a SPACE file (see --help)\n");
        rc = VX_EXIT_USAGE;
    }
    if (!rc && !resume && !plan && !study) {
        fprintf(stderr, "vixen: hyperopt needs --study DIR (or --plan, or --resume DIR)\n");
        rc = VX_EXIT_USAGE;
    }
    vx_train_cfg *base = malloc(sizeof *base);
    uint8_t *space_text = NULL;
    size_t space_len = 0;
    vx_space space;
    vx_err e;
    if (!base) rc = VX_EXIT_FAIL;
    if (!rc) vx_train_cfg_default(base);
    if (!rc && !resume) {
        if (config && vx_train_cfg_load(base, config, &e)) rc = fail(&e);
        if (!rc) rc = vx_cli_apply_sets(base, sets, n_sets);
        if (!rc && algo && vx_train_cfg_set(base, "train.algo", algo, "--algo", &e)) {
            fprintf(stderr, "vixen: %s\n", e.msg);
            rc = VX_EXIT_USAGE;
        }
        if (!rc) rc = vx_cli_set_files(base, pos + 1, np - 1);
        if (!rc && vx_file_read_all(pos[0], &space_text, &space_len, &e)) rc = fail(&e);
        if (!rc && vx_space_load_text(&space, (const char *)space_text, space_len, pos[0], &e))
            rc = fail(&e);
        if (!rc && vx_space_check(&space, base, &e)) rc = fail(&e);
        /* a space that searches the algorithm lets any algorithm's keys matter to some trial */
        if (!rc && !vx_space_has(&space, "train.algo"))
            rc = vx_cli_sets_for_algo(base, sets, n_sets);
        if (!rc && config && !vx_space_has(&space, "train.algo"))
            rc = vx_cli_config_for_algo(base, config);
    }
    if (!rc && device && vx_train_cfg_set(base, "train.device", device, "--device", &e)) {
        fprintf(stderr, "vixen: %s\n", e.msg);
        rc = VX_EXIT_USAGE;
    }
    free(pos);
    vx_study *s = NULL;
    vx_device *dev = NULL;
    int cores = 0; /* every core, unless ranks share the node */
    if (!rc && resume) {
        if (vx_study_open(resume, sc.concurrency, &s, &e)) rc = fail(&e);
    }
    if (!rc) {
        vx_device_cfg dc;
        vx_device_cfg_default(&dc);
        /* a resumed study runs where it was created, unless --device says otherwise */
        dc.kind = s && !device ? vx_study_device_kind(s) : base->device;
        dc.threads = 1; /* on the CPU every trial runs its own BLAS in its own thread */
        /* a rank 0 that runs trials takes its share of the node; one that only coordinates
         * (or a process alone) the whole device */
        vx_status ds = r->size > 1 && !coordinate_only
                           ? open_rank_device(r, dc.kind, &dev, &cores, &e)
                           : vx_device_open(&dc, &dev, &e);
        if (ds) {
            fprintf(stderr, "vixen: device: %s\n", e.msg);
            rc = VX_EXIT_FAIL;
        }
    }
    if (!rc && plan) {
        vx_plan p;
        if (vx_study_plan(&sc, &space, base, dev, &p, &e)) rc = fail(&e);
        else vx_plan_print(&p, stdout);
    } else if (!rc) {
        if (!s) rc = check_data(base);
        if (!rc && !s &&
            vx_study_create(study, &sc, (const char *)space_text, space_len, base, &s, &e))
            rc = fail(&e);
        if (!rc) {
            vx_study_set_launcher(s, one_launcher);
            vx_study_set_fuse(s, fuse_mode);
            handle_interrupts(1);
            vx_status st = vx_study_run_ranks(s, dev, r, coordinate_only, cores, print_progress,
                                              NULL, &g_stop, &e);
            handle_interrupts(0);
            const char *dir = resume ? resume : study;
            if (st == VX_ERR_STOPPED) {
                fprintf(stderr, "vixen: %s: vixen hyperopt --resume %s\n", e.msg, dir);
                rc = VX_EXIT_INTERRUPTED;
            } else if (st) {
                rc = fail(&e);
            } else {
                vx_study_status(dir, stdout, &e);
                char path[1100];
                snprintf(path, sizeof path, "%s/test.txt", dir);
                uint8_t *t;
                size_t n;
                if (vx_file_read_all(path, &t, &n, &e) == VX_OK) {
                    printf("the best trial on the test split (evaluated once):\n%.*s", (int)n,
                           (const char *)t);
                    free(t);
                }
            }
        }
    }
    vx_study_close(s);
    vx_device_close(dev);
    free(space_text);
    free(base);
    return rc;
}

/* cmd_train.c — `vixen train` and `vixen eval`.
 *
 * Settings come from, in order: the defaults, --config FILE (YAML), --set KEY=VALUE overrides,
 * and the few direct options (--epochs, --run, FILE arguments). `--resume RUN` reads RUN's own
 * resolved config.yaml instead of the defaults.
 *
 * Ctrl-C (or SIGTERM, as schedulers send before a kill) stops after the current epoch with a
 * checkpoint, so the run can be resumed. A second one quits at once — unless a checkpoint is being
 * written, in which case it quits the moment that checkpoint has committed (util.h's critical
 * sections). The handler stays installed (sigaction, not C's one-shot signal()), so a second
 * signal never takes the default action in the middle of a write. */
#include "args.h"
#include "cli.h"
#include "vixen/device.h"
#include "vixen/io.h"
#include "vixen/train.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SETS 64

static volatile sig_atomic_t g_interrupted;

static void say(const char *m) /* async-signal-safe */
{
    ssize_t n = write(STDERR_FILENO, m, strlen(m));
    (void)n;
}

/* Runs when the last checkpoint write in flight at a second interrupt has committed. */
static void quit_after_commit(void)
{
    say("vixen: the checkpoint has been written; quitting (resume with --resume)\n");
    _exit(VX_EXIT_INTERRUPTED);
}

static void on_interrupt(int sig)
{
    (void)sig;
    if (!g_interrupted) {
        g_interrupted = 1;
        say("\nvixen: interrupted: finishing this epoch, then a checkpoint (interrupt again to "
            "quit at once)\n");
        return;
    }
    if (vx_critical_exit_request()) {
        say("vixen: quitting; the last checkpoint written is kept (resume with --resume)\n");
        _exit(VX_EXIT_INTERRUPTED);
    }
    say("vixen: quitting as soon as the checkpoint being written has committed\n");
}

static void handle_interrupts(int on)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on ? on_interrupt : SIG_DFL;
    sa.sa_flags = SA_RESTART; /* reads and writes in flight go on */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (on) vx_critical_set_exit_hook(quit_after_commit);
}

/* Applies KEY=VALUE overrides (cli.h). */
int vx_cli_apply_sets(vx_train_cfg *c, const char **sets, int n)
{
    for (int i = 0; i < n; i++) {
        const char *eq = strchr(sets[i], '=');
        if (!eq) {
            fprintf(stderr, "vixen: --set needs KEY=VALUE, got '%s'\n", sets[i]);
            return VX_EXIT_USAGE;
        }
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
        vx_err e;
        if (vx_train_cfg_set(c, key, eq + 1, "--set", &e)) {
            fprintf(stderr, "vixen: %s\n", e.msg);
            return VX_EXIT_USAGE;
        }
    }
    return VX_EXIT_OK;
}

int vx_cli_sets_for_algo(const vx_train_cfg *c, const char **sets, int n)
{
    for (int i = 0; i < n; i++) {
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)strcspn(sets[i], "="), sets[i]);
        int a = vx_train_key_algo(key);
        if (a >= 0 && a != c->algo) {
            fprintf(stderr,
                    "vixen: --set %s: a setting of %s, but this trains %s, so it would change "
                    "nothing (--algo chooses the algorithm)\n",
                    key, vx_algo_at(a)->name, vx_train_algo(c)->name);
            return VX_EXIT_USAGE;
        }
    }
    return VX_EXIT_OK;
}

/* A config file may well keep every algorithm's sections (one file, switched with --algo), so
 * the keys of another algorithm than the one trained are a warning, not an error as they are on
 * --set: the user learns they change nothing, and the run's config.yaml keeps only its own. */
int vx_cli_config_for_algo(const vx_train_cfg *c, const char *path)
{
    vx_kv *kv;
    size_t n;
    vx_err e;
    if (vx_yaml_read_flat(path, &kv, &n, &e)) { /* it loaded a moment ago */
        fprintf(stderr, "vixen: %s\n", e.msg);
        return VX_EXIT_FAIL;
    }
    for (size_t i = 0; i < n; i++) {
        int a = vx_train_key_algo(kv[i].key);
        if (a >= 0 && a != c->algo)
            fprintf(stderr,
                    "vixen: warning: %s: line %d: %s is a setting of %s, but this trains %s; it "
                    "changes nothing\n",
                    path, kv[i].line, kv[i].key, vx_algo_at(a)->name, vx_train_algo(c)->name);
    }
    vx_kv_free(kv, n);
    return VX_EXIT_OK;
}

int vx_cli_set_files(vx_train_cfg *c, const char **pos, size_t np)
{
    if (np > VX_TRAIN_MAX_FILES) {
        fprintf(stderr, "vixen: at most %d data files or folders\n", VX_TRAIN_MAX_FILES);
        return VX_EXIT_USAGE;
    }
    for (size_t i = 0; i < np; i++) {
        if (strlen(pos[i]) >= sizeof c->files[0]) {
            fprintf(stderr, "vixen: path too long: %s\n", pos[i]);
            return VX_EXIT_USAGE;
        }
        snprintf(c->files[i], sizeof c->files[0], "%s", pos[i]);
    }
    if (np) c->n_files = (int)np;
    return VX_EXIT_OK;
}

static int print_epoch(const vx_epoch_report *r, void *ctx)
{
    (void)ctx;
    char steps[32], eta[32], line[512];
    vx_format_count((double)r->env_steps, steps, sizeof steps);
    vx_format_duration(r->eta_seconds, eta, sizeof eta);
    int n = snprintf(line, sizeof line, "epoch %d/%d | %s env steps (%.0f/s)", r->epoch, r->epochs,
                     steps, r->env_steps_per_s);
    for (int i = 0; i < r->n_metrics && n < (int)sizeof line; i++) {
        if (!r->metrics[i].fmt || isnan(r->metric[i])) continue;
        n += snprintf(line + n, sizeof line - (size_t)n, " | ");
        if (n < (int)sizeof line)
            n += snprintf(line + n, sizeof line - (size_t)n, r->metrics[i].fmt, r->metric[i]);
    }
    if (n < (int)sizeof line) {
        if (r->episodes > 0)
            n += snprintf(line + n, sizeof line - (size_t)n, " | episode return %.3g",
                          r->episode_return);
        else n += snprintf(line + n, sizeof line - (size_t)n, " | episode return -");
    }
    if (r->validated && n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, " | val Sharpe %.2f ± %.2f%s",
                      r->val.sharpe, r->val.sharpe_se, r->best ? " (best)" : "");
    fprintf(stderr, "%s | eta %s\n", line, eta);
    return g_interrupted;
}

/* Whether a direct option (--epochs and the like, "the same as --set KEY=...") is given beside a
 * --set of its own key: which was meant? A usage error, not a silent choice. */
static int option_and_set(const char *opt, const char *given, const char *key, const char **sets,
                          int n_sets)
{
    if (!given) return 0;
    for (int i = 0; i < n_sets; i++)
        if (strcspn(sets[i], "=") == strlen(key) && strncmp(sets[i], key, strlen(key)) == 0) {
            fprintf(stderr, "vixen: --%s %s and --set %s both given; give one\n", opt, given,
                    sets[i]);
            return 1;
        }
    return 0;
}

/* The settings a resume may change: how far the run goes and where and how it runs, none of what
 * it learns (a resume continues to the result of an uninterrupted run, on either device). */
static const char *const resume_keys[] = {"train.epochs", "train.device", "train.gpu_graphs",
                                          "train.async_checkpoints", "train.checkpoint_every"};

/* A resume's options: everything else the run's config.yaml already holds. Returns an exit
 * code. */
static int check_resume(const char *config, const char *run, const char *algo, const char *folds,
                        size_t files, const char **sets, int n_sets)
{
    const char *what = config  ? "--config"
                       : run   ? "--run"
                       : algo  ? "--algo"
                       : folds ? "--folds"
                       : files ? "a data file"
                               : NULL;
    if (what) {
        fprintf(stderr,
                "vixen: --resume continues a run as its config.yaml says; %s would change it "
                "(start a new run instead)\n",
                what);
        return VX_EXIT_USAGE;
    }
    for (int i = 0; i < n_sets; i++) {
        size_t n = strcspn(sets[i], "=");
        int ok = 0;
        for (size_t k = 0; k < sizeof resume_keys / sizeof *resume_keys; k++)
            ok |= strlen(resume_keys[k]) == n && strncmp(sets[i], resume_keys[k], n) == 0;
        if (!ok) {
            fprintf(stderr,
                    "vixen: --resume: --set %.*s would change the run being resumed; a resume "
                    "may set only train.epochs, train.device, train.gpu_graphs, "
                    "train.async_checkpoints and train.checkpoint_every\n",
                    (int)n, sets[i]);
            return VX_EXIT_USAGE;
        }
    }
    return VX_EXIT_OK;
}

static int g_made_runs; /* reserve_folder made runs/ too */

/* A new folder for a run without one named: runs/<date>-<time>, or -2, -3… after it when that is
 * taken, made here (mkdir fails on a folder that exists, so runs started in the same second each
 * get their own). Returns an exit code. */
static int reserve_folder(char *dir, size_t n)
{
    char stem[64];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stem, sizeof stem, "runs/%Y%m%d-%H%M%S", &tm);
    vx_err e;
    struct stat sb;
    g_made_runs = stat("runs", &sb) != 0;
    if (vx_mkdirs("runs", &e)) {
        fprintf(stderr, "vixen: %s\n", e.msg);
        return VX_EXIT_FAIL;
    }
    for (int k = 1; k < 1000; k++) {
        if (k == 1) snprintf(dir, n, "%s", stem);
        else snprintf(dir, n, "%s-%d", stem, k);
        if (mkdir(dir, 0755) == 0) return VX_EXIT_OK;
        if (errno != EEXIST) {
            fprintf(stderr, "vixen: %s: cannot create folder: %s\n", dir, strerror(errno));
            return VX_EXIT_FAIL;
        }
    }
    fprintf(stderr, "vixen: %s: a thousand runs this second; name one (--run)\n", stem);
    return VX_EXIT_FAIL;
}

/* A reserved folder (reserve_folder) whose run failed before it trained holds only what taking it
 * wrote (a walk-forward's: its config.yaml and lock): it goes, as a named folder's would never have
 * been made (run.c, walk.c). Anything else in it (metrics, a checkpoint, a fold) keeps it. */
static void unreserve_folder(const char *dir)
{
    static const char *const bare[] = {"lock", "run-id", "checkpoint", "config.yaml"};
    char path[1100];
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    DIR *d = opendir(dir);
    if (!d) return;
    int other = 0;
    for (struct dirent *x; (x = readdir(d)) != NULL;) {
        int known = !strcmp(x->d_name, ".") || !strcmp(x->d_name, "..");
        for (size_t k = 0; k < sizeof bare / sizeof *bare; k++)
            known |= !strcmp(x->d_name, bare[k]);
        other |= !known;
    }
    closedir(d);
    if (other || (rmdir(path) != 0 && errno != ENOENT)) return; /* checkpoint/ not empty */
    for (size_t k = 0; k < sizeof bare / sizeof *bare; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, bare[k]);
        unlink(path);
    }
    rmdir(dir);
    if (g_made_runs) rmdir("runs"); /* only if nothing else is in it */
}

int vx_cmd_train(int argc, char **argv)
{
    const char *config = NULL, *run = NULL, *resume = NULL, *epochs = NULL, *device = NULL;
    const char *folds = NULL, *algo = NULL;
    const char *sets[MAX_SETS];
    int n_sets = 0, keys = 0;
    vx_opt opts[] = {
        {"config", "FILE", "settings file (YAML: section: {key: value})", &config, NULL, NULL, NULL,
         0},
        {"set", "KEY=VALUE", "override one setting (repeatable), e.g. --set dqn.lr=3e-4", NULL,
         NULL, sets, &n_sets, MAX_SETS},
        {"epochs", "N", "same as --set train.epochs=N", &epochs, NULL, NULL, NULL, 0},
        {"device", "cpu|cuda|auto", "where to train (default auto: the GPU when one is present)",
         &device, NULL, NULL, NULL, 0},
        {"run", "DIR", "the run folder (default runs/<date>-<time>, then -2, -3... when taken)",
         &run, NULL, NULL, NULL, 0},
        {"resume", "DIR", "continue the run in DIR from its last checkpoint", &resume, NULL, NULL,
         NULL, 0},
        {"algo", "dqn|ppo", "the learning algorithm (same as --set train.algo=NAME)", &algo, NULL,
         NULL, NULL, 0},
        {"folds", "K", "walk-forward over K folds (same as --set split.folds=K)", &folds, NULL,
         NULL, NULL, 0},
        {"keys", NULL, "list every setting and exit", NULL, &keys, NULL, NULL, 0},
    };
    vx_cmd c = {
        "vixen train",
        "[FILE...]",
        "Trains an agent (--algo: the branching dueling Double-DQN by default, or PPO) on the "
        "bars in FILE... (CSV or DBN, through the feature cache), or on the synthetic "
        "market when none is given. Bars split by time into train, validation and test "
        "(split.*): the agent is validated every train.eval_every epochs, the best is "
        "kept, and that one is evaluated once on the test split next to baselines. The "
        "run folder gets config.yaml, metrics.csv, TensorBoard events, checkpoint/ "
        "(latest and best), eval.{json,txt} and report.html (one self-contained page of "
        "tables and charts: open it in a browser; `vixen report RUN` writes it again).",
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
    if (rc == 1) printf("\nsettings (--set KEY=VALUE, or in the --config file):\n");
    if (rc == 1 || (!rc && keys)) vx_train_cfg_print_keys(stdout);
    if (rc || keys) {
        free(pos);
        return rc == 2 ? VX_EXIT_USAGE : VX_EXIT_OK;
    }
    if (option_and_set("epochs", epochs, "train.epochs", sets, n_sets) ||
        option_and_set("device", device, "train.device", sets, n_sets) ||
        option_and_set("algo", algo, "train.algo", sets, n_sets) ||
        option_and_set("folds", folds, "split.folds", sets, n_sets) ||
        option_and_set("run", run, "train.run_dir", sets, n_sets)) {
        free(pos);
        return VX_EXIT_USAGE;
    }
    if (resume && (rc = check_resume(config, run, algo, folds, np, sets, n_sets)) != 0) {
        free(pos);
        return rc;
    }
    vx_train_cfg cfg;
    vx_train_cfg_default(&cfg);
    char default_dir[sizeof cfg.run_dir];
    snprintf(default_dir, sizeof default_dir, "%s", cfg.run_dir);
    vx_err e;
    /* the folder's length first: a --resume folder's config.yaml is read below */
    const char *dir = resume ? resume : run;
    if (dir && strlen(dir) >= sizeof cfg.run_dir) {
        fprintf(stderr, "vixen: --%s: a folder path of %zu characters (at most %zu)\n",
                resume ? "resume" : "run", strlen(dir), sizeof cfg.run_dir - 1);
        free(pos);
        return VX_EXIT_USAGE;
    }
    struct stat dsb;
    if (dir && stat(dir, &dsb) == 0 && !S_ISDIR(dsb.st_mode)) {
        fprintf(stderr, "vixen: --%s %s: a file, not a folder\n", resume ? "resume" : "run", dir);
        free(pos);
        return VX_EXIT_USAGE;
    }
    char path[1100];
    if (resume) {
        snprintf(path, sizeof path, "%s/config.yaml", resume);
        if (vx_train_cfg_load(&cfg, path, &e)) {
            fprintf(stderr, "vixen: %s\n", e.msg);
            free(pos);
            return VX_EXIT_FAIL;
        }
    }
    if (config && vx_train_cfg_load(&cfg, config, &e)) {
        fprintf(stderr, "vixen: %s\n", e.msg);
        free(pos);
        return VX_EXIT_FAIL;
    }
    rc = vx_cli_apply_sets(&cfg, sets, n_sets);
    if (!rc && epochs && vx_train_cfg_set(&cfg, "train.epochs", epochs, "--epochs", &e)) {
        fprintf(stderr, "vixen: %s\n", e.msg);
        rc = VX_EXIT_USAGE;
    }
    if (!rc && device && vx_train_cfg_set(&cfg, "train.device", device, "--device", &e)) {
        fprintf(stderr, "vixen: %s\n", e.msg);
        rc = VX_EXIT_USAGE;
    }
    if (!rc && algo && vx_train_cfg_set(&cfg, "train.algo", algo, "--algo", &e)) {
        fprintf(stderr, "vixen: %s\n", e.msg);
        rc = VX_EXIT_USAGE;
    }
    if (!rc && folds && vx_train_cfg_set(&cfg, "split.folds", folds, "--folds", &e)) {
        fprintf(stderr, "vixen: %s\n", e.msg);
        rc = VX_EXIT_USAGE;
    }
    if (!rc) rc = vx_cli_sets_for_algo(&cfg, sets, n_sets);
    if (!rc && config) rc = vx_cli_config_for_algo(&cfg, config);
    if (!rc) rc = vx_cli_set_files(&cfg, pos, np);
    if (!rc && cfg.env.folds > 1 && cfg.env.fold == 0 && !cfg.final_test) {
        fprintf(stderr,
                "vixen: a walk-forward (%d folds) is its folds' tests: train.final_test 0 "
                "would leave it nothing to report\n",
                cfg.env.folds);
        rc = VX_EXIT_USAGE;
    }
    free(pos);
    if (rc) return rc;
    int reserved = 0; /* the folder made here, for a run given none */
    if (dir) snprintf(cfg.run_dir, sizeof cfg.run_dir, "%s", dir);
    else if (strcmp(cfg.run_dir, default_dir) == 0) { /* neither --config nor --set named one */
        rc = reserve_folder(cfg.run_dir, sizeof cfg.run_dir);
        if (rc) return rc;
        reserved = 1;
    }
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = cfg.device;
    dc.threads = cfg.threads;
    vx_device *dev;
    if (vx_device_open(&dc, &dev, &e)) {
        fprintf(stderr, "vixen: train.device: %s\n", e.msg);
        if (reserved) unreserve_folder(cfg.run_dir);
        return VX_EXIT_FAIL;
    }
    fprintf(stderr, "vixen: %s run in %s: %s, %d epochs x %d envs x %d steps\n",
            resume ? "resuming the" : "training a", cfg.run_dir, vx_train_algo(&cfg)->name,
            cfg.epochs, cfg.envs, cfg.steps_per_epoch);
    handle_interrupts(1);
    vx_eval_report r;
    int walk = cfg.env.folds > 1 && cfg.env.fold == 0;
    vx_status st = walk ? vx_train_walk_forward(&cfg, dev, cfg.env.folds, resume != NULL,
                                                print_epoch, NULL, &r, &e)
                        : vx_train_run(&cfg, dev, resume != NULL, print_epoch, NULL, &r, &e);
    handle_interrupts(0);
    vx_device_close(dev);
    if (st == VX_ERR_STOPPED) { /* said after the fact: the checkpoint is on disk now */
        fprintf(stderr, "vixen: %s: vixen train --resume %s\n", e.msg, cfg.run_dir);
        return VX_EXIT_INTERRUPTED;
    }
    if (st) {
        fprintf(stderr, "vixen: %s\n", e.msg);
        if (reserved) unreserve_folder(cfg.run_dir);
        return VX_EXIT_FAIL;
    }
    if (!cfg.final_test) { /* nothing was tested, so there is no table and no report */
        printf("no test evaluation (train.final_test 0): the test split is untouched; evaluate "
               "it once with vixen eval %s\nrun folder: %s\n",
               cfg.run_dir, cfg.run_dir);
        return VX_EXIT_OK;
    }
    if (walk) printf("walk-forward, all %d folds' test blocks: ", cfg.env.folds);
    vx_eval_print(stdout, &r);
    vx_eval_report_free(&r);
    printf("run folder: %s\n", cfg.run_dir);
    if (walk) printf("reports: %s/fold-*/report.html\n", cfg.run_dir);
    else printf("report: %s/report.html (open it in a browser)\n", cfg.run_dir);
    return VX_EXIT_OK;
}

/* The resolved configuration a checkpoint carries in its metadata, read from memory. */
static vx_status load_config_from_checkpoint(vx_train_cfg *cfg, const char *ckpt, vx_err *e)
{
    vx_safetensors s;
    vx_status st = vx_safetensors_read(ckpt, &s, e);
    if (st) return st;
    const char *text = vx_safetensors_meta(&s, "config");
    if (!text) {
        vx_safetensors_free(&s);
        return vx_err_line(e, VX_ERR_NOT_FOUND, ckpt, -1, "config",
                           "no config.yaml beside it and none in its metadata (use --config)");
    }
    char name[1200];
    snprintf(name, sizeof name, "%.1100s (its config)", ckpt);
    st = vx_train_cfg_load_text(cfg, text, strlen(text), name, e);
    vx_safetensors_free(&s);
    return st;
}

int vx_cmd_eval(int argc, char **argv)
{
    const char *config = NULL, *split_name = NULL, *which = NULL;
    const char *sets[MAX_SETS], *data[VX_TRAIN_MAX_FILES];
    int n_sets = 0, n_data = 0, json = 0;
    vx_opt opts[] = {
        {"split", "train|validation|test", "the split to evaluate (default test)", &split_name,
         NULL, NULL, NULL, 0},
        {"checkpoint", "best|latest",
         "a run's checkpoint to evaluate (default best: the validation's choice, when there is "
         "one)",
         &which, NULL, NULL, NULL, 0},
        {"data", "FILE", "evaluate on these bars instead (repeatable)", NULL, NULL, data, &n_data,
         VX_TRAIN_MAX_FILES},
        {"config", "FILE", "settings (default: the run's config.yaml)", &config, NULL, NULL, NULL,
         0},
        {"set", "KEY=VALUE", "override one setting (repeatable)", NULL, NULL, sets, &n_sets,
         MAX_SETS},
        {"json", NULL, "print JSON", NULL, &json, NULL, NULL, 0},
    };
    vx_cmd c = {"vixen eval",
                "RUN|CHECKPOINT",
                "Runs the greedy policy of a run's checkpoint (the best on validation, else the "
                "latest) or of a checkpoint file on one split (the test split unless --split), "
                "next to buy-and-hold, flat, momentum, ridge and (synthetic markets) the oracle, "
                "with the agent's in-sample row: PnL gross, costs and net, annualised Sharpe with "
                "its standard error, max drawdown, turnover, hit rate, trades.",
                opts,
                sizeof opts / sizeof *opts,
                1,
                1};
    const char *pos[2];
    size_t np;
    int rc = vx_args_parse(&c, argc, argv, pos, &np);
    if (rc) return rc == 1 ? VX_EXIT_OK : VX_EXIT_USAGE;
    vx_split split = VX_SPLIT_TEST;
    if (split_name) {
        if (!strcmp(split_name, "train")) split = VX_SPLIT_TRAIN;
        else if (!strcmp(split_name, "validation") || !strcmp(split_name, "val"))
            split = VX_SPLIT_VAL;
        else if (strcmp(split_name, "test") != 0) {
            fprintf(stderr, "vixen: --split: train, validation or test, not '%s'\n", split_name);
            return VX_EXIT_USAGE;
        }
    }
    if (which && strcmp(which, "best") != 0 && strcmp(which, "latest") != 0) {
        fprintf(stderr, "vixen: --checkpoint: best or latest, not '%s'\n", which);
        return VX_EXIT_USAGE;
    }
    char ckpt[1100], cfgpath[1100];
    struct stat sb;
    if (stat(pos[0], &sb) != 0) {
        fprintf(stderr, "vixen: %s: no such run folder or checkpoint\n", pos[0]);
        return VX_EXIT_FAIL;
    }
    if (S_ISDIR(sb.st_mode)) {
        char wf[1100];
        snprintf(wf, sizeof wf, "%s/fold-1", pos[0]);
        snprintf(ckpt, sizeof ckpt, "%s/checkpoint", pos[0]);
        if (stat(wf, &sb) == 0 && stat(ckpt, &sb) != 0) { /* a walk-forward's own folder */
            fprintf(stderr,
                    "vixen: %s is a walk-forward's folder: evaluate one of its folds (%s/fold-K); "
                    "walk_forward.txt holds all of them\n",
                    pos[0], pos[0]);
            return VX_EXIT_FAIL;
        }
        snprintf(ckpt, sizeof ckpt, "%s/checkpoint/best.safetensors", pos[0]);
        if (which && !strcmp(which, "best") && stat(ckpt, &sb) != 0) {
            fprintf(stderr,
                    "vixen: %s has no best checkpoint: nothing was validated (train.eval_every 0, "
                    "or stopped before the first validation); --checkpoint latest evaluates the "
                    "last\n",
                    pos[0]);
            return VX_EXIT_FAIL;
        }
        if ((which && !strcmp(which, "latest")) || (!which && stat(ckpt, &sb) != 0))
            snprintf(ckpt, sizeof ckpt, "%s/checkpoint/latest.safetensors", pos[0]);
        snprintf(cfgpath, sizeof cfgpath, "%s/config.yaml", pos[0]);
    } else {
        if (which) {
            fprintf(stderr, "vixen: --checkpoint picks a run's checkpoint; %s is a file\n", pos[0]);
            return VX_EXIT_USAGE;
        }
        snprintf(ckpt, sizeof ckpt, "%s", pos[0]);
        const char *slash = strrchr(pos[0], '/');
        int dl = slash ? (int)(slash - pos[0]) : 1;
        snprintf(cfgpath, sizeof cfgpath, "%.*s/../config.yaml", dl, slash ? pos[0] : ".");
    }
    vx_train_cfg cfg;
    vx_train_cfg_default(&cfg);
    vx_err e;
    vx_status lst;
    if (config || stat(cfgpath, &sb) == 0)
        lst = vx_train_cfg_load(&cfg, config ? config : cfgpath, &e);
    else lst = load_config_from_checkpoint(&cfg, ckpt, &e); /* a checkpoint copied on its own */
    if (lst) {
        fprintf(stderr, "vixen: %s\n", e.msg);
        return VX_EXIT_FAIL;
    }
    rc = vx_cli_apply_sets(&cfg, sets, n_sets);
    if (!rc) rc = vx_cli_set_files(&cfg, data, (size_t)n_data);
    if (rc) return rc;
    vx_market m;
    vx_eval_report r;
    memset(&r, 0, sizeof r);
    vx_eval_opts o = {1, NULL, split != VX_SPLIT_TRAIN};
    vx_status st = vx_train_open_market(&cfg, &m, &e);
    if (!st) {
        st = vx_env_check_splits(&m, &cfg.env, (int64_t)cfg.env.episode_len + 2, &e);
        if (!st) st = vx_eval_checkpoint(&cfg, ckpt, &m, split, &o, &r, &e);
        vx_market_close(&m);
    }
    if (st) {
        vx_eval_report_free(&r);
        fprintf(stderr, "vixen: %s\n", e.msg);
        return VX_EXIT_FAIL;
    }
    if (json) vx_eval_json(stdout, &r);
    else vx_eval_print(stdout, &r);
    vx_eval_report_free(&r);
    return VX_EXIT_OK;
}

/* bench_hyperopt.c — many trials at once against one after another, the path a study takes.
 *
 * The same trials five ways, in one call: a study of 20 particles at concurrency 1 (one after
 * another), the same study at concurrency 20 (each trial in a thread of its own on a share of the
 * device, launching its own graphs), the same again with one launcher thread issuing every
 * trial's graph launches (GPU only), the same again with the trials fused (`--fuse on`: their
 * updates one learner group; GPU only), and 20 separate `vixen train` processes of the same
 * config started together; then on a GPU the one-after-another and fused studies again with TF32
 * learning (dqn.tf32 1 in every trial). The
 * trials are the default DQN on the default market, for a few epochs; the study's one parameter
 * is dqn.eps_end in [0.05, 0.05 + 1e-8], so the trials are the same settings to the eighth digit
 * (a space needs a parameter). The figure is the aggregate updates per second: every trial's
 * updates over the wall time of the whole set. Beside it, memory per trial as the budget
 * estimated it and as the trial's share measured it (its peak reservation).
 *
 * On a GPU: 20 trials of 10 epochs. On the CPU: as many trials as cores, 2 epochs each (the
 * figures then say how threads share cores, which is not what the targets are about). */
#define _DEFAULT_SOURCE
#include "bench.h"
#include "vixen/hyperopt.h"
#include "vixen/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *space = "dqn.eps_end: {type: float, low: 0.05, high: 0.05000001}\n";

typedef struct {
    int batch; /* the first trial's (the GPU chooses it from the device's memory) */
    double seconds, updates;
    double mem_estimate, mem_measured; /* bytes, the mean over trials */
    int trials, not_done;
} run_figures;

static vx_status study(const char *dir, int trials, int epochs, int concurrency, int launcher,
                       int fuse, int tf32, vx_device *dev, run_figures *f, vx_err *e)
{
    memset(f, 0, sizeof *f);
    vx_train_cfg *base = malloc(sizeof *base);
    if (!base) return vx_err_set(e, VX_ERR_NOMEM, "bench: out of memory");
    vx_train_cfg_default(base);
    vx_status st = tf32 ? vx_train_cfg_set(base, "dqn.tf32", "1", "bench", e) : VX_OK;
    if (st) {
        free(base);
        return st;
    }
    base->epochs = epochs;
    base->eval_every = epochs;
    base->device = vx_device_kind(dev);
    vx_study_cfg c;
    vx_study_cfg_default(&c);
    c.pso.swarm = trials;
    c.generations = 1;
    c.concurrency = concurrency;
    c.prune = 0;
    vx_study *s;
    uint64_t t0 = vx_now_ns();
    st = vx_study_create(dir, &c, space, strlen(space), base, &s, e);
    if (!st) vx_study_set_launcher(s, launcher);
    if (!st) vx_study_set_fuse(s, fuse);
    if (!st) st = vx_study_run(s, dev, NULL, NULL, NULL, e);
    f->seconds = vx_seconds_since(t0);
    vx_study_close(s);
    free(base);
    /* the trials' own figures, from trials.csv: updates and memory */
    char path[600];
    snprintf(path, sizeof path, "%s/trials.csv", dir);
    FILE *in = st ? NULL : fopen(path, "r");
    char line[8192];
    if (in && fgets(line, sizeof line, in)) /* the header */
        while (fgets(line, sizeof line, in)) {
            /* id,generation,particle,seed,status,objective,objective_se,best_epoch,epochs,
             * train_seed,batch,halvings,mem_estimate,mem_measured,seconds,env_steps,updates */
            char *field[17];
            char *p = line;
            int k = 0;
            for (; k < 17 && p; k++) {
                field[k] = p;
                p = strchr(p, ',');
                if (p) *p++ = '\0';
            }
            if (k < 17) continue;
            if (strcmp(field[4], "done") != 0) { /* a figure over fewer trials says so */
                fprintf(stderr, "bench: hyperopt: trial %s is %s: %.300s", field[0], field[4],
                        p ? p : "\n");
                f->not_done++;
            }
            f->mem_estimate += atof(field[12]);
            f->mem_measured += atof(field[13]);
            f->updates += atof(field[16]);
            if (!f->trials) f->batch = atoi(field[10]);
            f->trials++;
        }
    if (in) fclose(in);
    if (f->trials) f->mem_estimate /= f->trials, f->mem_measured /= f->trials;
    return st;
}

/* The default config's market, opened and closed (written to the feature cache if not there). */
static vx_status warm_market(vx_err *e)
{
    vx_train_cfg *c = malloc(sizeof *c);
    if (!c) return vx_err_set(e, VX_ERR_NOMEM, "bench: out of memory");
    vx_train_cfg_default(c);
    vx_market m;
    vx_status st = vx_train_open_market_own(c, &m, e);
    if (!st) vx_market_close(&m);
    free(c);
    return st;
}

/* n `vixen train` processes of the same config at once; the wall time until the last ends. */
static double processes(const char *dir, int n, int epochs, int cuda, FILE *log)
{
    char exe[1024];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return NAN;
    exe[len] = '\0';
    pid_t *pid = calloc((size_t)n, sizeof *pid);
    if (!pid) return NAN;
    uint64_t t0 = vx_now_ns();
    int started = 0;
    for (int i = 0; i < n; i++) {
        pid[i] = fork();
        if (pid[i] < 0) break;
        if (pid[i] == 0) {
            char run[700], ep[64], ev[64];
            snprintf(run, sizeof run, "%s/p%02d", dir, i);
            snprintf(ep, sizeof ep, "train.epochs=%d", epochs);
            snprintf(ev, sizeof ev, "train.eval_every=%d", epochs);
            vx_device_forget_work_queues(); /* each process as `vixen train` runs alone */
            int null = open("/dev/null", O_WRONLY);
            if (null >= 0) dup2(null, 1), dup2(null, 2);
            execl(exe, exe, "train", "--set", ep, "--set", ev, "--set", "train.final_test=0",
                  "--set", "train.checkpoint_every=0", "--set", "train.async_checkpoints=0",
                  "--set", "dqn.batch=64", "--set", cuda ? "train.device=cuda" : "train.device=cpu",
                  "--run", run, (char *)NULL);
            _exit(127);
        }
        started++;
    }
    int failed = started < n;
    for (int i = 0; i < started; i++) {
        int ws;
        if (waitpid(pid[i], &ws, 0) != pid[i] || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) failed = 1;
    }
    double sec = vx_seconds_since(t0);
    free(pid);
    if (failed) {
        fprintf(log, "bench: one of the %d training processes failed\n", n);
        return NAN;
    }
    return sec;
}

static void put(vx_bench_result *r, const char *name, const char *unit, double items,
                double seconds, double value, double target)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->unit, sizeof r->unit, "%s", unit);
    r->items = items, r->seconds = seconds, r->value = value, r->target = target;
}

int vx_bench_hyperopt(vx_bench_result *out, int max, FILE *log)
{
    if (max < 15) return 0;
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.threads = 1;
    vx_device *dev;
    vx_err e;
    if (vx_device_open(&dc, &dev, &e)) {
        fprintf(log, "bench: %s\n", e.msg);
        return -1;
    }
    int cuda = vx_device_kind(dev) == VX_DEVICE_CUDA;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int trials = cuda ? 20 : (int)(cores > 1 ? cores : 2), epochs = cuda ? 10 : 2;
    char root[64], d1[128], dn[128], dl[128], df[128], dp[128], d1t[128], dft[128];
    snprintf(root, sizeof root, "/tmp/vixen-bench-hyperopt-%d", (int)getpid());
    snprintf(d1, sizeof d1, "%s/one-by-one", root);
    snprintf(dn, sizeof dn, "%s/at-once", root);
    snprintf(dl, sizeof dl, "%s/one-launcher", root);
    snprintf(df, sizeof df, "%s/fused", root);
    snprintf(dp, sizeof dp, "%s/processes", root);
    snprintf(d1t, sizeof d1t, "%s/one-by-one-tf32", root);
    snprintf(dft, sizeof dft, "%s/fused-tf32", root);
    run_figures one, many, launched = {0}, fused = {0}, one_tf32 = {0}, fused_tf32 = {0};
    /* the trials' market opened once before the timed studies, so that each finds it in the
     * feature cache as a study on a market opened before does; else the first study alone would
     * pay for synthesising it (0.22–0.28 s on an H100 host, 2026-12-05) */
    vx_status st = warm_market(&e);
    if (st) {
        fprintf(log, "bench: hyperopt: %s\n", e.msg);
        vx_device_close(dev);
        return -1;
    }
    fprintf(log, "bench: hyperopt: %d trials of %d epochs on %s, one after another\n", trials,
            epochs, vx_device_name(dev));
    st = study(d1, trials, epochs, 1, 0, 0, 0, dev, &one, &e);
    if (!st) {
        fprintf(log, "bench: hyperopt: %.1f s; the same %d at once\n", one.seconds, trials);
        st = study(dn, trials, epochs, trials, 0, 0, 0, dev, &many, &e);
    }
    if (!st && cuda) { /* the launcher thread is a GPU matter */
        fprintf(log, "bench: hyperopt: %.1f s; at once, one launcher thread\n", many.seconds);
        st = study(dl, trials, epochs, trials, 1, 0, 0, dev, &launched, &e);
    }
    if (!st && cuda) { /* the updates of the trials fused into one learner group */
        fprintf(log, "bench: hyperopt: %.1f s; at once, fused (--fuse on)\n", launched.seconds);
        st = study(df, trials, epochs, trials, 0, 1, 0, dev, &fused, &e);
    }
    /* the same two ends with TF32 learning (dqn.tf32 1 in every trial, one after another and
     * fused): whether the ratio depends on the arithmetic both run (at the default batch of 64
     * it did not: 2026-12-05, TF32 sped up the trials alone, not the group) */
    if (!st && cuda) {
        fprintf(log, "bench: hyperopt: %.1f s; TF32 learning, one after another\n", fused.seconds);
        st = study(d1t, trials, epochs, 1, 0, 0, 1, dev, &one_tf32, &e);
    }
    if (!st && cuda) {
        fprintf(log, "bench: hyperopt: %.1f s; TF32 learning, fused\n", one_tf32.seconds);
        st = study(dft, trials, epochs, trials, 0, 1, 1, dev, &fused_tf32, &e);
    }
    vx_device_close(dev);
    if (st) {
        fprintf(log, "bench: hyperopt: %s\n", e.msg);
        vx_remove_tree(root, NULL);
        return -1;
    }
    fprintf(log, "bench: hyperopt: %.1f s; %d processes at once (the trials' batch: %d)\n",
            cuda ? fused_tf32.seconds : many.seconds, trials, one.batch);
    int not_done = one.not_done + many.not_done + launched.not_done + fused.not_done +
                   one_tf32.not_done + fused_tf32.not_done;
    if (not_done)
        fprintf(log, "bench: hyperopt: %d trials did not finish: the figures count fewer\n",
                not_done);
    vx_mkdirs(dp, NULL);
    double sp = processes(dp, trials, epochs, cuda, log);
    vx_remove_tree(root, NULL);
    int n = 0;
    double u1 = one.updates / one.seconds, un = many.updates / many.seconds;
    put(&out[n++], "hyperopt trials one after another", "updates/s", one.updates, one.seconds, u1,
        0);
    char name[48];
    snprintf(name, sizeof name, "hyperopt %d trials at once", trials);
    put(&out[n++], name, "updates/s", many.updates, many.seconds, un, 10 * u1);
    snprintf(name, sizeof name, "hyperopt %d processes at once", trials);
    put(&out[n++], name, "updates/s", one.updates, sp, one.updates / sp, 0);
    put(&out[n++], "hyperopt speed-up, at once / one by one", "x", 1, 1, un / u1, 10);
    if (cuda) {
        double ul = launched.updates / launched.seconds;
        snprintf(name, sizeof name, "hyperopt %d at once, one launcher thread", trials);
        put(&out[n++], name, "updates/s", launched.updates, launched.seconds, ul, 10 * u1);
        put(&out[n++], "hyperopt speed-up, one launcher thread", "x", 1, 1, ul / u1, 10);
        double uf = fused.updates / fused.seconds;
        snprintf(name, sizeof name, "hyperopt %d at once, fused", trials);
        put(&out[n++], name, "updates/s", fused.updates, fused.seconds, uf, 10 * u1);
        put(&out[n++], "hyperopt speed-up, fused", "x", 1, 1, uf / u1, 10);
        put(&out[n++], "hyperopt memory per trial, measured fused", "MB", 1, 1,
            fused.mem_measured / 1e6, 0);
        double ut1 = one_tf32.updates / one_tf32.seconds;
        double utf = fused_tf32.updates / fused_tf32.seconds;
        put(&out[n++], "hyperopt TF32 trials one after another", "updates/s", one_tf32.updates,
            one_tf32.seconds, ut1, 0);
        snprintf(name, sizeof name, "hyperopt TF32 %d at once, fused", trials);
        put(&out[n++], name, "updates/s", fused_tf32.updates, fused_tf32.seconds, utf, 10 * ut1);
        put(&out[n++], "hyperopt speed-up, fused, TF32", "x", 1, 1, utf / ut1, 10);
    }
    put(&out[n++], "hyperopt memory per trial, estimate", "MB", 1, 1, many.mem_estimate / 1e6, 0);
    put(&out[n++], "hyperopt memory per trial, measured", "MB", 1, 1, many.mem_measured / 1e6, 0);
    /* within 25% and never below: the ratio in [1, 1.25] */
    put(&out[n++], "hyperopt memory estimate / measured", "x", 1, 1,
        many.mem_measured > 0 ? many.mem_estimate / many.mem_measured : NAN, 1.25);
    out[n - 1].lower_is_better = 1;
    return n;
}

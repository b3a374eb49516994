/* run.c — a training run, written once for every algorithm (algo.h) and every device: the run
 * folder, the market and the training environments, the epoch loop, metrics (CSV and
 * TensorBoard, with the algorithm's own columns), evaluations through the algorithm's policy,
 * checkpoints and resume, and stopping on request.
 *
 * One epoch: the algorithm's epoch (collect N × T steps, learn) → an evaluation every few epochs
 * → a metrics row → a checkpoint every few epochs. A checkpoint on a GPU is a device snapshot the
 * algorithm prepares during the epoch (so it is known before the epoch runs); a background thread
 * writes it while the next epochs train, at most one at a time: a checkpoint falling due while
 * one is still being written waits for the next epoch after it (the last epoch and a stop always
 * checkpoint, after waiting). On the CPU, checkpoints are written in place.
 *
 * Resume is exact: a checkpoint holds everything the algorithm needs (its tensors, counters and
 * side files) and all randomness is counter-based Philox, so a resumed run computes what an
 * uninterrupted one would (tests check the final weights bit for bit). */
#include "checkpoint.h"
#include "eval_internal.h"
#include "group.h"
#include "vixen/io.h"
#include "vixen/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL /* header-only: no library to link */
#include <xxhash.h>

vx_status vx_train_open_market_own(const vx_train_cfg *c, vx_market *m, vx_err *e)
{
    char dir[1024]; /* the feature cache's, for files and synthetic markets alike */
    if (c->cache_dir[0]) snprintf(dir, sizeof dir, "%s", c->cache_dir);
    else vx_cache_default_dir(dir, sizeof dir);
    if (c->n_files > 0) {
        const char *paths[VX_TRAIN_MAX_FILES];
        for (int i = 0; i < c->n_files; i++) paths[i] = c->files[i];
        vx_load_opts o = {.instrument = c->instrument[0] ? c->instrument : NULL,
                          .max_inflate = c->max_inflate};
        return vx_market_open(paths, (size_t)c->n_files, &o, dir, m, e);
    }
    vx_synth_cfg sc;
    vx_synth_default(&sc);
    sc.days = c->synth_days;
    sc.seed = c->synth_seed;
    sc.signal_strength = c->synth_strength;
    sc.drift = c->synth_drift;
    sc.signal_phi = c->synth_phi;
    return vx_market_synth(&sc, dir, m, e);
}

double vx_epoch_metric(const vx_epoch_report *r, const char *name)
{
    for (int i = 0; i < r->n_metrics; i++)
        if (strcmp(r->metrics[i].name, name) == 0) return r->metric[i];
    return NAN;
}

/* ---- metrics columns: the run's and the algorithm's ------------------------------------------ */

#define MAX_COLS (16 + VX_ALGO_MAX_METRICS)

typedef struct {
    const char *name[MAX_COLS];
    int algo[MAX_COLS]; /* the algorithm's metric index, or −1: the run's own */
    int n;
} columns;

/* epoch, env_steps, the algorithm's results, the episode and evaluation figures, then the
 * timings (env_steps_per_s, the algorithm's, seconds): rows of runs that should agree compare
 * equal up to the timing columns at the end. */
static const char *const run_results[] = {
    "episode_return", "episode_pnl",      "episodes",     "val_sharpe",   "val_sharpe_se",
    "val_pnl",        "val_max_drawdown", "val_turnover", "val_hit_rate", "val_best"};

static void columns_make(columns *c, const vx_algo_ops *a)
{
    c->n = 0;
#define COL(nm, i) (c->name[c->n] = (nm), c->algo[c->n] = (i), c->n++)
    COL("epoch", -1);
    COL("env_steps", -1);
    for (int i = 0; i < a->n_metrics; i++)
        if (!a->metrics[i].timing) COL(a->metrics[i].name, i);
    for (size_t i = 0; i < sizeof run_results / sizeof *run_results; i++) COL(run_results[i], -1);
    COL("env_steps_per_s", -1);
    for (int i = 0; i < a->n_metrics; i++)
        if (a->metrics[i].timing) COL(a->metrics[i].name, i);
    COL("seconds", -1);
#undef COL
}

static double run_value(const char *name, const vx_epoch_report *r, double scale)
{
    const vx_eval_metrics *v = &r->val;
    if (!strcmp(name, "epoch")) return r->epoch;
    if (!strcmp(name, "env_steps")) return (double)r->env_steps;
    if (!strcmp(name, "episode_return")) return r->episode_return;
    if (!strcmp(name, "episode_pnl")) return r->episode_return * scale;
    if (!strcmp(name, "episodes")) return r->episodes;
    if (!strcmp(name, "env_steps_per_s")) return r->env_steps_per_s;
    if (!strcmp(name, "seconds")) return r->seconds;
    if (!r->validated) return NAN;
    if (!strcmp(name, "val_sharpe")) return v->sharpe;
    if (!strcmp(name, "val_sharpe_se")) return v->sharpe_se;
    if (!strcmp(name, "val_pnl")) return v->net;
    if (!strcmp(name, "val_max_drawdown")) return v->max_drawdown;
    if (!strcmp(name, "val_turnover")) return v->turnover;
    if (!strcmp(name, "val_best")) return r->best;
    return v->hit_rate; /* val_hit_rate */
}

static vx_status write_eval(const char *dir, const vx_eval_report *r, vx_err *e)
{
    char path[1100];
    const char *ext[2] = {"json", "txt"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/eval.%s", dir, ext[k]);
        vx_atomic_file af;
        vx_status st = vx_atomic_open(&af, path, e);
        if (st) return st;
        if (k == 0) vx_eval_json(af.f, r);
        else vx_eval_print(af.f, r);
        st = vx_atomic_commit(&af, e);
        if (st) return st;
    }
    return VX_OK;
}

/* ---- the run --------------------------------------------------------------------------------- */

typedef struct {
    vx_train_cfg cfg; /* resolved: the algorithm's slot holds what it chose */
    const vx_algo_ops *ops;
    vx_market market;
    int have_market;
    vx_env *env;
    vx_algo *algo;
    vx_train_group *group; /* a member's run: algo is the group's (group.h) */
    int member;
    char ckpt_dir[1100];
    int lock_fd;                    /* the run folder's lock (run_folder.c), −1: not held */
    char run_id[VX_RUN_ID_LEN + 1]; /* the run's identity, in every checkpoint */
    char *config;                   /* cfg as YAML */
    char devices[VX_DEVICES_LEN];   /* what trained the run, in order (devices_add) */
    char data_id[33];               /* the market's bars' identity (market_id) */
    ckpt_writer writer;
    int epoch; /* epochs completed */
    int64_t env_steps;
    int written, deferred; /* checkpoints written; due ones that waited for the writer */
    int best_epoch;        /* the validation's best so far (0: none yet) */
    double best_val;
    int since_best; /* validations since it */
} run_state;

static void run_free(run_state *r)
{
    vx_ckpt_writer_join(&r->writer, NULL);
    if (r->group) vx_train_group_leave(r->group, r->member); /* frees its instance */
    else if (r->algo) r->ops->free(r->algo);
    vx_env_free(r->env);
    if (r->have_market) vx_market_close(&r->market);
    free(r->config);
    vx_folder_unlock(r->lock_fd); /* last: nothing of this run is written after it */
    free(r);
}

/* Writes a checkpoint of the epochs completed: in the background when the state is a detached
 * snapshot and the run allows it, else here. */
static vx_status checkpoint(run_state *r, int final, int *started, vx_err *e)
{
    vx_status st = vx_ckpt_writer_join(&r->writer, e); /* a failed background write fails here */
    ckpt_job job;
    memset(&job, 0, sizeof job);
    if (!st) st = r->ops->save(r->algo, final, &job.st, e);
    if (st) return st;
    snprintf(job.dir, sizeof job.dir, "%s", r->ckpt_dir);
    snprintf(job.algo, sizeof job.algo, "%s", r->ops->name);
    snprintf(job.run_id, sizeof job.run_id, "%s", r->run_id);
    snprintf(job.devices, sizeof job.devices, "%s", r->devices);
    snprintf(job.data_id, sizeof job.data_id, "%s", r->data_id);
    job.epoch = r->epoch;
    job.env_steps = r->env_steps;
    job.config = r->config ? strdup(r->config) : NULL;
    if (r->config && !job.config) return vx_err_set(e, VX_ERR_NOMEM, "checkpoint: out of memory");
    if (!final && job.st.detached && r->cfg.async_checkpoints) {
        *started = 1;
        return vx_ckpt_writer_start(&r->writer, &job, e);
    }
    st = vx_ckpt_write(&job, e);
    free(job.config);
    return st;
}

/* The policy as of now on the validation split; when it beats the best so far, it becomes
 * checkpoint/best.safetensors. */
static vx_status validate(run_state *r, vx_eval_metrics *val, int *best, vx_err *e)
{
    vx_policy pol;
    vx_eval_report ev;
    memset(&ev, 0, sizeof ev);
    vx_status st = r->ops->policy(r->algo, &pol, e);
    if (!st) st = vx_eval_run(&r->market, &r->cfg.env, VX_SPLIT_VAL, &pol, NULL, &ev, e);
    *val = ev.row[VX_EVAL_AGENT];
    val->period_pnl = NULL; /* freed below with the report */
    *best = !st && (r->best_epoch == 0 || val->sharpe > r->best_val);
    if (*best) {
        ckpt_job job;
        memset(&job, 0, sizeof job);
        st = r->ops->policy_state(r->algo, &job.st, e);
        snprintf(job.dir, sizeof job.dir, "%s", r->ckpt_dir);
        snprintf(job.algo, sizeof job.algo, "%s", r->ops->name);
        snprintf(job.run_id, sizeof job.run_id, "%s", r->run_id);
        snprintf(job.devices, sizeof job.devices, "%s", r->devices);
        snprintf(job.data_id, sizeof job.data_id, "%s", r->data_id);
        job.epoch = r->epoch;
        job.env_steps = r->env_steps;
        job.config = r->config;
        job.best = 1;
        job.val_sharpe = val->sharpe;
        job.val_sharpe_se = val->sharpe_se;
        if (!st) st = vx_ckpt_write(&job, e);
        if (!st) r->best_epoch = r->epoch, r->best_val = val->sharpe, r->since_best = 0;
    } else if (!st) {
        r->since_best++;
    }
    vx_eval_report_free(&ev);
    return st;
}

/* Whether the run folder is fit for this start: a new run needs one without a checkpoint, a
 * resume one with (asked again once the folder is locked). */
static vx_status folder_check(const run_state *r, const vx_train_cfg *c, int resume, vx_err *e)
{
    char path[1200], done[1200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", r->ckpt_dir, VX_CKPT_FILE);
    snprintf(done, sizeof done, "%s/eval.json", c->run_dir);
    int has_ckpt = stat(path, &sb) == 0, finished = stat(done, &sb) == 0;
    if (!resume && has_ckpt)
        return vx_err_line(e, VX_ERR_ARG, c->run_dir, -1, "",
                           "already holds a run; resume it (--resume) or pick another folder");
    if (!resume && finished) /* a finished run without checkpoints (train.checkpoint_every 0) */
        return vx_err_line(e, VX_ERR_ARG, c->run_dir, -1, "",
                           "already holds a finished run (eval.json); pick another folder");
    if (resume && !has_ckpt && finished)
        return vx_err_line(e, VX_ERR_NOT_FOUND, c->run_dir, -1, "",
                           "finished without a checkpoint to resume (train.checkpoint_every 0 "
                           "keeps none): its results are in eval.json; train further in a new "
                           "run");
    if (resume && !has_ckpt)
        return vx_err_line(e, VX_ERR_NOT_FOUND, c->run_dir, -1, "",
                           "has no checkpoint to resume (the run stopped before its first one): "
                           "start it again without --resume");
    return VX_OK;
}

/* The identity of a market's bars: XXH3-64 over its timestamps, prices, volumes and instrument,
 * in hex. Unlike the feature cache's key it does not change with a file's path or time, only
 * with the bars themselves. */
static void market_id(const vx_market *m, char out[33])
{
    XXH3_state_t *h = XXH3_createState();
    if (!h) {
        out[0] = '\0';
        return;
    }
    size_t n = m->n_bars;
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, m->ts, n * sizeof *m->ts);
    const double *cols[5] = {m->open, m->high, m->low, m->close, m->volume};
    for (int c = 0; c < 5; c++) XXH3_64bits_update(h, cols[c], n * sizeof(double));
    XXH3_64bits_update(h, &m->instrument_id, sizeof m->instrument_id);
    snprintf(out, 33, "%016llx", (unsigned long long)XXH3_64bits_digest(h));
    XXH3_freeState(h);
}

/* Adds the device this process trains on to a run's list ("A; then B"), unless it is the last
 * one there. A list that would not fit keeps its first device, an ellipsis and the new one. */
static void devices_add(char *list, size_t n, const char *name)
{
    static const char sep[] = "; then ";
    const char *last = list;
    for (const char *p = strstr(list, sep); p; p = strstr(p + 1, sep)) last = p + strlen(sep);
    if (!list[0]) {
        snprintf(list, n, "%s", name);
        return;
    }
    if (strcmp(last, name) == 0) return;
    size_t len = strlen(list);
    if (len + strlen(sep) + strlen(name) < n) {
        snprintf(list + len, n - len, "%s%s", sep, name);
        return;
    }
    const char *second = strstr(list, sep);
    size_t first = second ? (size_t)(second - list) : len;
    char *tail = list + first;
    snprintf(tail, n - first, "%s…%s%s", sep, sep, name);
}

/* The run folder made and locked, its identity written (or read, on resume), and what an
 * interrupted attempt left in it removed. */
static vx_status folder_take(run_state *r, const vx_train_cfg *c, int resume, vx_err *e)
{
    vx_status st = vx_mkdirs(r->ckpt_dir, e);
    /* the folder is ours before anything in it is looked at or touched */
    if (!st) st = vx_folder_lock(c->run_dir, &r->lock_fd, e);
    if (!st) st = folder_check(r, c, resume, e);
    if (!st)
        st = resume ? vx_run_id_read(c->run_dir, r->run_id, e)
                    : vx_run_id_create(c->run_dir, r->run_id, e);
    if (st) return st;
    vx_ckpt_clean(r->ckpt_dir);
    vx_ckpt_clean_temps(c->run_dir);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", r->ckpt_dir, VX_CKPT_BEST);
    if (!resume) unlink(path); /* a best from an attempt that never checkpointed */
    else if (vx_ckpt_best(r->ckpt_dir, &r->best_epoch, &r->best_val) && c->eval_every > 0)
        r->since_best = -1; /* counted from the checkpoint's epoch below */
    return VX_OK;
}

/* A folder that exists is taken first, so a second vixen in it is refused before any setup. One
 * that does not is made only after the market, the environments and the algorithm: a start that
 * fails there (a bad data file, a setting the algorithm refuses, too little memory) leaves no
 * empty run folder behind. */
static vx_status run_open(run_state *r, const vx_train_cfg *c, vx_device *dev, int resume,
                          vx_err *e)
{
    r->cfg = *c;
    r->ops = vx_train_algo(c);
    snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s/checkpoint", c->run_dir);
    char path[1200];
    struct stat sb;
    int existed = stat(c->run_dir, &sb) == 0;
    vx_status st = existed ? folder_take(r, c, resume, e) : folder_check(r, c, resume, e);
    if (st) return st;
    st = vx_train_open_market(c, &r->market, e);
    if (st) return st;
    r->have_market = 1;
    market_id(&r->market, r->data_id);
    /* every split must hold an episode: the walks (eval.c) and the random starts need one */
    st = vx_env_check_splits(&r->market, &c->env, (int64_t)c->env.episode_len + 2, e);
    if (st) return st;
    vx_env_cfg ec = c->env;
    ec.seed = c->seed;
    st = vx_env_create(&ec, &r->market, VX_SPLIT_TRAIN, (size_t)c->envs, dev, &r->env, e);
    if (st) return st;
    vx_run_params run;
    vx_train_run_params(c, &run);
    vx_algo_init in = {c->algo_settings[c->algo], &run, dev, r->env, 0};
    if (r->group) st = vx_train_group_join(r->group, r->member, r->ops, &in, &r->algo, e);
    else st = r->ops->create(&in, &r->algo, e);
    if (st) return st;
    r->ops->settings_resolved(r->algo, r->cfg.algo_settings[c->algo]);
    r->config = vx_train_cfg_text(&r->cfg);
    if (!r->config) return vx_err_set(e, VX_ERR_NOMEM, "train: cannot format the config");
    if (!existed) st = folder_take(r, c, resume, e);
    if (st) return st;
    if (resume) {
        vx_safetensors s;
        st = vx_ckpt_open(r->ckpt_dir, r->ops->name, r->run_id, &s, &r->epoch, &r->env_steps, e);
        if (st) return st;
        vx_ckpt_view ck = {&s, r->ckpt_dir};
        st = r->ops->restore(r->algo, &ck, 0, e);
        const char *devs = vx_safetensors_meta(&s, "devices"); /* none before 2026-12-08 */
        snprintf(r->devices, sizeof r->devices, "%s", devs ? devs : "not recorded");
        vx_safetensors_free(&s);
        if (st && e && !strstr(e->msg, r->ckpt_dir)) { /* the file read: latest, not best */
            char m[sizeof e->msg];
            snprintf(m, sizeof m, "%s", e->msg);
            snprintf(path, sizeof path, "%s/%s", r->ckpt_dir, VX_CKPT_FILE);
            vx_err_line(e, st, path, -1, "", "resume: %s", m);
        }
        if (st) return st;
        if (r->since_best < 0) r->since_best = (r->epoch - r->best_epoch) / c->eval_every;
    }
    { /* the resolved configuration, before any epoch: a resume's too, so that the epochs it
       * was given (--epochs) hold for the next resume */
        snprintf(path, sizeof path, "%s/config.yaml", c->run_dir);
        vx_atomic_file af;
        st = vx_atomic_open(&af, path, e);
        if (st) return st;
        if (fputs(r->config, af.f) == EOF) {
            vx_atomic_abort(&af);
            return vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
        }
        st = vx_atomic_commit(&af, e);
        if (st) return st;
    }
    char what[256];
    r->ops->describe(r->algo, what, sizeof what);
    vx_log(VX_LOG_INFO, "train: %s, on %s", what, vx_device_name(dev));
    devices_add(r->devices, sizeof r->devices, vx_device_kernels(dev));
    return VX_OK;
}

/* The one evaluation on the test split: the best checkpoint (or, with none, the last one),
 * with the baselines and its in-sample row, and the warnings a reader needs. */
static vx_status final_test(run_state *r, vx_eval_report *ev, vx_err *e)
{
    const vx_train_cfg *c = &r->cfg;
    vx_eval_opts o = {1, NULL, 1};
    char path[1200];
    vx_status st;
    if (r->best_epoch > 0) {
        snprintf(path, sizeof path, "%s/%s", r->ckpt_dir, VX_CKPT_BEST);
        st = vx_eval_checkpoint(c, path, &r->market, VX_SPLIT_TEST, &o, ev, e);
        if (!st)
            snprintf(ev->checkpoint, sizeof ev->checkpoint,
                     "best: epoch %d of %d, validation Sharpe %.2f (chosen on the validation "
                     "split; the test split is evaluated once, here)",
                     r->best_epoch, r->epoch, r->best_val);
    } else {
        vx_policy pol;
        st = r->ops->policy(r->algo, &pol, e);
        if (!st) st = vx_eval_run(&r->market, &c->env, VX_SPLIT_TEST, &pol, &o, ev, e);
        if (!st) {
            snprintf(ev->checkpoint, sizeof ev->checkpoint,
                     "last: epoch %d (nothing was validated: train.eval_every 0 or split.val 0)",
                     r->epoch);
            snprintf(ev->trained_on, sizeof ev->trained_on, "%s", r->devices);
        }
    }
    if (st) return st;
    /* warnings: memorising the training bars, and seeing them too often */
    const vx_eval_metrics *in = &ev->row[VX_EVAL_IN_SAMPLE];
    if (ev->baselines.has_oracle && in->present) {
        double oracle;
        st = vx_eval_rule_sharpe(&r->market, &c->env, VX_SPLIT_TRAIN, VX_EVAL_ORACLE,
                                 &ev->baselines, &oracle, e);
        if (!st && in->sharpe > oracle)
            vx_eval_warn(ev,
                         "the agent's in-sample Sharpe (%.2f) beats the oracle's on the same "
                         "training bars (%.2f): it has learned the noise of the training split",
                         in->sharpe, oracle);
    }
    int64_t lo, hi;
    vx_env_split_rows(&r->market, &c->env, VX_SPLIT_TRAIN, &lo, &hi);
    double visits = (double)r->env_steps / (double)(hi - lo);
    if (!st && c->max_revisits > 0 && visits > c->max_revisits)
        vx_eval_warn(ev,
                     "training took %.0f steps per training bar (train.max_revisits %d): "
                     "results may rest on memorised bars",
                     visits, c->max_revisits);
    return st;
}

static vx_status train_run(const vx_train_cfg *c, vx_device *dev, int resume, vx_train_group *g,
                           int member, vx_epoch_fn on_epoch, void *ctx, vx_eval_report *final_eval,
                           vx_err *e)
{
    if (final_eval) memset(final_eval, 0, sizeof *final_eval);
    vx_status st = vx_train_cfg_check(c, e);
    if (st) return st;
    run_state *r = calloc(1, sizeof *r);
    if (!r) return vx_err_set(e, VX_ERR_NOMEM, "train: out of memory");
    r->lock_fd = -1;
    r->group = g, r->member = member;
    st = run_open(r, c, dev, resume, e);
    if (!st && r->epoch > c->epochs) /* a resume cannot train fewer epochs than it has */
        st = vx_err_line(e, VX_ERR_ARG, c->run_dir, -1, "train.epochs",
                         "%d is below the checkpoint's epoch %d: resume with --epochs %d or more",
                         c->epochs, r->epoch, r->epoch);
    if (!st && resume && r->epoch == c->epochs && c->final_test)
        vx_log(VX_LOG_INFO,
               "train: the run has all its %d epochs: its chosen checkpoint is evaluated on the "
               "test split again (the same result; --epochs N to train further)",
               c->epochs);
    if (!st) vx_device_ready(dev); /* made, graphs built: the work starts now */
    columns cols;
    columns_make(&cols, r->ops);
    vx_csv_log csv = {0};
    vx_tfevents tb = {0};
    char path[1100];
    if (!st) {
        snprintf(path, sizeof path, "%s/metrics.csv", c->run_dir);
        /* rows past the checkpoint resumed from (or all, for a new run) were an attempt's */
        st = vx_csv_log_open(&csv, path, cols.name, cols.n, r->epoch, e);
    }
    if (!st) st = vx_tfevents_open(&tb, c->run_dir, e);
    double scale = !st ? vx_env_params_get(r->env)->reward_scale : 1;
    int validating = c->eval_every > 0 && c->env.val_fraction > 0;
    uint64_t run_start = vx_now_ns();
    int first_epoch = r->epoch, pending = 0, requested = 0;
    while (!st && r->epoch < c->epochs) {
        uint64_t t0 = vx_now_ns();
        int last = r->epoch + 1 == c->epochs;
        int ckpts = c->checkpoint_every > 0; /* 0: a run that is never resumed (a trial) */
        int due = ckpts && ((r->epoch + 1) % c->checkpoint_every == 0 || pending);
        /* a snapshot needs the writer idle: the last epoch waits for it, others defer */
        if (last) st = vx_ckpt_writer_join(&r->writer, e);
        int snap = !st && ckpts && (last || (due && !vx_ckpt_writer_busy(&r->writer)));
        if (due && !snap && !pending) r->deferred++;
        pending = due && !snap;
        vx_epoch_in in = {r->epoch, snap};
        vx_epoch_out out;
        memset(&out, 0, sizeof out);
        for (int i = 0; i < VX_ALGO_MAX_METRICS; i++) out.metric[i] = NAN;
        if (!st && r->group) st = vx_train_group_epoch(r->group, r->member, &in, &out, e);
        else if (!st) st = r->ops->epoch(r->algo, &in, &out, e);
        if (!st && out.diverged[0]) /* before this epoch's weights are validated or saved */
            st = vx_err_set(e, VX_ERR_DIVERGED, "train: epoch %d of %d: %s", r->epoch + 1,
                            c->epochs, out.diverged);
        if (st) break;
        r->epoch++;
        r->env_steps += out.env_steps;
        vx_epoch_report rep;
        memset(&rep, 0, sizeof rep);
        if (validating && (r->epoch % c->eval_every == 0 || last)) {
            st = validate(r, &rep.val, &rep.best, e);
            rep.validated = 1;
        }
        if (st) break;
        int patience_out = validating && c->patience > 0 && r->since_best >= c->patience;
        rep.epoch = r->epoch, rep.epochs = c->epochs, rep.env_steps = r->env_steps;
        rep.episodes = out.episodes;
        rep.episode_return = out.episodes > 0 ? out.return_sum / out.episodes : NAN;
        rep.env_steps_per_s = out.collect_s > 0 ? (double)out.env_steps / out.collect_s : 0;
        rep.metrics = r->ops->metrics;
        rep.n_metrics = r->ops->n_metrics;
        memcpy(rep.metric, out.metric, sizeof rep.metric);
        rep.seconds = vx_seconds_since(t0);
        rep.eta_seconds =
            vx_seconds_since(run_start) / (r->epoch - first_epoch) * (c->epochs - r->epoch);
        double row[MAX_COLS];
        for (int i = 0; i < cols.n; i++)
            row[i] =
                cols.algo[i] >= 0 ? out.metric[cols.algo[i]] : run_value(cols.name[i], &rep, scale);
        st = vx_csv_log_row(&csv, row, e);
        for (int i = 1; i < cols.n && !st; i++) {
            if (isnan(row[i])) continue;
            char tag[64];
            snprintf(tag, sizeof tag, "%s/%s", strncmp(cols.name[i], "val_", 4) ? "train" : "val",
                     cols.name[i]);
            st = vx_tfevents_scalar(&tb, tag, r->epoch, row[i], e);
        }
        rep.checkpointed = snap;
        int stop = !st && on_epoch ? on_epoch(&rep, ctx) : 0;
        requested |= stop && !last; /* a stop at the last epoch is the end anyway */
        if (!st && patience_out && !stop) {
            vx_log(VX_LOG_INFO,
                   "train: stopping early at epoch %d: %d validations without beating epoch %d's "
                   "Sharpe %.2f (train.patience %d)",
                   r->epoch, r->since_best, r->best_epoch, r->best_val, c->patience);
            stop = 1;
        }
        int started = 0;
        if (!st && (snap || (stop && ckpts))) {
            st = checkpoint(r, last || stop, &started, e);
            r->written++;
        }
        if (stop) break;
    }
    /* a member's last epoch is behind it: the others need not wait for what follows */
    if (r->group) vx_train_group_retire(r->group, r->member);
    if (!st) st = vx_ckpt_writer_join(&r->writer, e);
    if (!st && r->deferred)
        vx_log(VX_LOG_INFO,
               "train: %d checkpoints written; %d fell due while the last was still "
               "being written and were taken at the next epoch end after it",
               r->written, r->deferred);
    if (!st && requested && c->checkpoint_every > 0) /* the test split waits for the end */
        st = vx_err_set(e, VX_ERR_STOPPED,
                        "stopped after epoch %d of %d on request; its checkpoint is written: "
                        "continue with --resume",
                        r->epoch, c->epochs);
    else if (!st && requested) /* a run that never checkpoints cannot be resumed */
        st = vx_err_set(e, VX_ERR_STOPPED,
                        "stopped after epoch %d of %d on request (train.checkpoint_every 0: no "
                        "checkpoint to resume from)",
                        r->epoch, c->epochs);
    vx_eval_report ev;
    memset(&ev, 0, sizeof ev);
    int testing = !st && c->final_test;
    if (testing) st = final_test(r, &ev, e);
    if (testing && !st) st = write_eval(c->run_dir, &ev, e);
    if (testing && !st) st = vx_report_write(c->run_dir, e);
    if (!st && final_eval) *final_eval = ev;
    else vx_eval_report_free(&ev);
    vx_csv_log_close(&csv);
    vx_tfevents_close(&tb);
    run_free(r);
    return st;
}

vx_status vx_train_run(const vx_train_cfg *c, vx_device *dev, int resume, vx_epoch_fn on_epoch,
                       void *ctx, vx_eval_report *final_eval, vx_err *e)
{
    return train_run(c, dev, resume, NULL, 0, on_epoch, ctx, final_eval, e);
}

vx_status vx_train_run_member(const vx_train_cfg *c, vx_device *dev, vx_train_group *g, int k,
                              vx_epoch_fn on_epoch, void *ctx, vx_err *e)
{
    vx_status st = VX_OK;
    if (c->checkpoint_every != 0) /* a group is never resumed (train.h) */
        st = vx_err_set(e, VX_ERR_ARG,
                        "train: a run in a group never checkpoints (train.checkpoint_every %d)",
                        c->checkpoint_every);
    if (!st) st = train_run(c, dev, 0, g, k, on_epoch, ctx, NULL, e);
    vx_train_group_leave(g, k); /* when it never joined; else it has already left */
    return st;
}

/* ---- evaluating a checkpoint ----------------------------------------------------------------- */

vx_status vx_eval_checkpoint(const vx_train_cfg *c, const char *ckpt_path, const vx_market *m,
                             vx_split split, const vx_eval_opts *opts, vx_eval_report *out,
                             vx_err *e)
{
    memset(out, 0, sizeof *out);
    vx_safetensors s;
    vx_status st = vx_safetensors_read(ckpt_path, &s, e);
    if (st) return st;
    const char *fmt = vx_safetensors_meta(&s, "format");
    const char *name = vx_safetensors_meta(&s, "algo");
    if (fmt && strncmp(fmt, "vixen-dqn-", 10) == 0) name = "dqn"; /* before the algorithm seam */
    const vx_algo_ops *ops = name ? vx_algo_find(name) : NULL;
    int known = fmt && (strcmp(fmt, VX_CKPT_FORMAT) == 0 || strcmp(fmt, "vixen-run-1") == 0 ||
                        strncmp(fmt, "vixen-dqn-", 10) == 0);
    if (!known)
        st = vx_err_line(e, VX_ERR_FORMAT, ckpt_path, -1, "format", "not a vixen checkpoint");
    else if (!ops)
        st = vx_err_line(e, VX_ERR_FORMAT, ckpt_path, -1, "algo", "unknown algorithm '%s'",
                         name ? name : "");
    vx_algo *a = NULL;
    if (!st) {
        vx_run_params run;
        vx_train_run_params(c, &run);
        vx_algo_init in = {vx_train_algo_settings_c(c, ops->name), &run, NULL, NULL, 0};
        st = ops->create(&in, &a, e);
    }
    if (!st) {
        vx_ckpt_view ck = {&s, "."};
        st = ops->restore(a, &ck, 1, e);
    }
    vx_policy pol;
    if (!st) st = ops->policy(a, &pol, e);
    if (!st) st = vx_eval_run(m, &c->env, split, &pol, opts, out, e);
    if (!st) {
        const char *kind = vx_safetensors_meta(&s, "kind"), *ep = vx_safetensors_meta(&s, "epoch");
        snprintf(out->checkpoint, sizeof out->checkpoint, "%s (%s, epoch %s)", ckpt_path,
                 kind ? kind : "latest", ep ? ep : "?");
        const char *devs = vx_safetensors_meta(&s, "devices"); /* none before 2026-12-08 */
        snprintf(out->trained_on, sizeof out->trained_on, "%s", devs ? devs : "");
        /* the bars' identity: a data file changed since, or another one, is other bars */
        const char *key = vx_safetensors_meta(&s, "data_id");
        char id[33];
        market_id(m, id);
        if (key && id[0] && strcmp(key, id) != 0)
            vx_eval_warn(out,
                         "evaluated on other bars than the run trained on (their identity %s; "
                         "the run's %s): a data file changed since, or another was given",
                         id, key);
    }
    if (a) ops->free(a);
    vx_safetensors_free(&s);
    return st;
}

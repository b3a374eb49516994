/* study.c — a study (hyperopt.h): the swarm's generations evaluated as training runs, in chunks
 * of concurrent trials on shares of one device, recorded in the store as they finish.
 *
 * Determinism. A trial's result is a function of its config and seed alone (the run is
 * deterministic on each device, and its batch is fixed explicitly, never chosen from the memory it
 * happens to get). A generation's positions are a function of the seed and the earlier
 * generations' objectives, reported to the swarm in particle order once a particle's trials are
 * all in. Pruning compares a trial only with trials of earlier generations, which are complete
 * before its generation starts. So neither the concurrency nor the order in which trials finish
 * changes anything — and a study resumed after a kill, which re-runs the trials that were running
 * and reads the others' results back from the store, ends exactly where an uninterrupted one does.
 *
 * Memory. The budget (budget.c) gives the largest trial the space allows; `available` is the
 * device context's free budget less the margin; each trial of a chunk of c runs on a share of
 * available / c. The five layers of hyperopt.h are marked "layer N" below. */
#define _DEFAULT_SOURCE
#include "study_internal.h"
#include "vixen/dqn.h"
#include "vixen/ppo.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_CURVE 100000

const char *vx_trial_status_name(vx_trial_status s)
{
    static const char *const names[] = {"pending", "running", "done", "pruned", "failed"};
    return (unsigned)s <= VX_TRIAL_FAILED ? names[s] : "?";
}

void vx_study_cfg_default(vx_study_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->generations = 5;
    c->seeds = 1;
    c->margin = 0.2;
    c->prune = 1;
    c->prune_warmup = 2;
    vx_pso_cfg_default(&c->pso);
}

static vx_status cfg_check(const vx_study_cfg *c, vx_err *e)
{
    if (c->generations < 1 || c->generations > 100000)
        return vx_err_set(e, VX_ERR_ARG, "generations %d is outside 1..100000", c->generations);
    if (c->seeds < 1 || c->seeds > 1000)
        return vx_err_set(e, VX_ERR_ARG, "seeds %d is outside 1..1000", c->seeds);
    if (c->concurrency < 0 || c->concurrency > 4096)
        return vx_err_set(e, VX_ERR_ARG, "concurrency %d is outside 0..4096", c->concurrency);
    if (!(c->margin >= 0 && c->margin < 1))
        return vx_err_set(e, VX_ERR_ARG, "margin %g is outside [0, 1)", c->margin);
    if (c->prune_warmup < 0)
        return vx_err_set(e, VX_ERR_ARG, "prune warm-up %d is negative", c->prune_warmup);
    return vx_pso_cfg_check(&c->pso, e);
}

/* ---- the batch each algorithm can halve ------------------------------------------------------ */

/* The setting whose halving halves a trial's per-batch memory: the DQN's batch; PPO's minibatch
 * rows, by doubling the minibatches. */
static int batch_of(const vx_train_cfg *c)
{
    const char *a = vx_train_algo(c)->name;
    if (strcmp(a, "dqn") == 0)
        return ((const vx_dqn_settings *)vx_train_algo_settings_c(c, "dqn"))->learner.batch;
    if (strcmp(a, "ppo") == 0) {
        const vx_ppo_settings *s = vx_train_algo_settings_c(c, "ppo");
        return (int)((int64_t)c->envs * c->steps_per_epoch / s->minibatches);
    }
    return 0;
}

static vx_status set_batch(vx_train_cfg *c, int batch, vx_err *e)
{
    const char *a = vx_train_algo(c)->name;
    char v[32];
    if (strcmp(a, "dqn") == 0) {
        snprintf(v, sizeof v, "%d", batch); /* given explicitly: a GPU never chooses another */
        return vx_train_cfg_set(c, "dqn.batch", v, "hyperopt", e);
    }
    if (strcmp(a, "ppo") == 0) {
        int64_t rows = (int64_t)c->envs * c->steps_per_epoch;
        if (batch < 2 || rows % batch != 0)
            return vx_err_set(e, VX_ERR_ARG, "ppo: minibatches of %d rows do not divide %lld",
                              batch, (long long)rows);
        snprintf(v, sizeof v, "%lld", (long long)(rows / batch));
        return vx_train_cfg_set(c, "ppo.minibatches", v, "hyperopt", e);
    }
    return VX_OK;
}

/* ---- the study ---------------------------------------------------------------------------------
 */

struct vx_study {
    char dir[512];
    vx_store store;
    vx_study_cfg cfg;
    vx_space space;
    vx_train_cfg *base;
    int lock_fd;
    int per_gen; /* trials of a generation: swarm × seeds */
    size_t n_trials;
    vx_trial *trials; /* every trial of every generation, by id */
    vx_curve_point **curve;
    int *n_curve;
    uint64_t t0;
    int cur_concurrency; /* the concurrency the next chunk runs at (0: not planned yet) */
    int ramped;          /* the first chunk's measurement was taken */
};

static vx_status path_in(const vx_study *s, char *buf, size_t n, const char *name, vx_err *e)
{
    if ((size_t)snprintf(buf, n, "%s/%s", s->dir, name) >= n)
        return vx_err_line(e, VX_ERR_ARG, s->dir, -1, "", "study folder path too long");
    return VX_OK;
}

/* The study's own settings as "key=value" lines, and back. */
static char *settings_text(const vx_study_cfg *c)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    fprintf(f,
            "generations=%d\nseeds=%d\nmargin=%.17g\nprune=%d\nprune_warmup=%d\nswarm=%d\n"
            "w=%.17g\nc1=%.17g\nc2=%.17g\nvmax=%.17g\nseed=%llu\n",
            c->generations, c->seeds, c->margin, c->prune, c->prune_warmup, c->pso.swarm, c->pso.w,
            c->pso.c1, c->pso.c2, c->pso.vmax, (unsigned long long)c->pso.seed);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

vx_status vx_study_settings_parse(const char *text, vx_study_cfg *c, const char *where, vx_err *e)
{
    vx_study_cfg_default(c);
    unsigned long long seed = 0;
    int got = sscanf(text,
                     "generations=%d\nseeds=%d\nmargin=%lf\nprune=%d\nprune_warmup=%d\nswarm=%d\n"
                     "w=%lf\nc1=%lf\nc2=%lf\nvmax=%lf\nseed=%llu",
                     &c->generations, &c->seeds, &c->margin, &c->prune, &c->prune_warmup,
                     &c->pso.swarm, &c->pso.w, &c->pso.c1, &c->pso.c2, &c->pso.vmax, &seed);
    if (got != 11)
        return vx_err_line(e, VX_ERR_FORMAT, where, -1, "settings",
                           "the study's settings are "
                           "damaged");
    c->pso.seed = seed;
    return cfg_check(c, e);
}

/* The base config must be one whose validation is the objective. */
static vx_status base_check(const vx_train_cfg *b, vx_err *e)
{
    if (b->eval_every < 1 || !(b->env.val_fraction > 0))
        return vx_err_set(e, VX_ERR_ARG,
                          "the objective is the validation Sharpe ratio: the base config needs "
                          "train.eval_every >= 1 and split.val > 0 (it has %d and %g)",
                          b->eval_every, b->env.val_fraction);
    if (b->env.folds > 1)
        return vx_err_set(e, VX_ERR_ARG, "split.folds %d: a study's trials are single runs",
                          b->env.folds);
    if (batch_of(b) < 1)
        return vx_err_set(e, VX_ERR_UNSUPPORTED, "hyperopt: algorithm '%s' is not supported",
                          vx_train_algo(b)->name);
    return vx_train_cfg_check(b, e);
}

static vx_status alloc_trials(vx_study *s, vx_err *e)
{
    s->per_gen = s->cfg.pso.swarm * s->cfg.seeds;
    s->n_trials = (size_t)s->per_gen * (size_t)s->cfg.generations;
    s->trials = calloc(s->n_trials, sizeof *s->trials);
    s->curve = calloc(s->n_trials, sizeof *s->curve);
    s->n_curve = calloc(s->n_trials, sizeof *s->n_curve);
    if (!s->trials || !s->curve || !s->n_curve)
        return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory for %zu trials", s->n_trials);
    for (size_t i = 0; i < s->n_trials; i++) {
        vx_trial *t = &s->trials[i];
        t->id = (int64_t)i;
        t->seed_index = (int)(i % (size_t)s->cfg.seeds);
        t->particle = (int)(i / (size_t)s->cfg.seeds % (size_t)s->cfg.pso.swarm);
        t->generation = (int)(i / (size_t)s->per_gen);
        t->status = VX_TRIAL_PENDING;
        t->objective = t->objective_se = NAN;
        t->train_seed = s->base->seed + (uint64_t)t->seed_index;
    }
    return VX_OK;
}

/* Reads back what the store holds: finished trials keep their results, trials that were running
 * when the last process ended are pending again (they start from scratch). */
static vx_status load_trials(vx_study *s, vx_err *e)
{
    vx_trial *rows;
    size_t n;
    vx_status st = vx_store_trials(&s->store, &rows, &n, e);
    if (st) return st;
    for (size_t i = 0; i < n && !st; i++) {
        if (rows[i].id < 0 || (size_t)rows[i].id >= s->n_trials) {
            st = vx_err_line(e, VX_ERR_FORMAT, s->store.path, -1, "trials",
                             "trial %lld is outside the study's %zu", (long long)rows[i].id,
                             s->n_trials);
            break;
        }
        vx_trial *t = &s->trials[rows[i].id];
        *t = rows[i];
        if (t->status == VX_TRIAL_RUNNING) t->status = VX_TRIAL_PENDING;
    }
    free(rows);
    if (st) return st;
    vx_curve_point *pts;
    int64_t *of;
    st = vx_store_curves(&s->store, &pts, &of, &n, e);
    if (st) return st;
    for (size_t i = 0; i < n && !st; i++) {
        if (of[i] < 0 || (size_t)of[i] >= s->n_trials) continue;
        size_t k = (size_t)of[i];
        if (s->trials[k].status < VX_TRIAL_DONE) continue; /* a re-run writes it again */
        vx_curve_point *c = realloc(s->curve[k], (size_t)(s->n_curve[k] + 1) * sizeof *c);
        if (!c) st = vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
        else c[s->n_curve[k]++] = pts[i], s->curve[k] = c;
    }
    free(pts);
    free(of);
    return st;
}

static vx_status study_alloc(const char *dir, vx_study **out, vx_err *e)
{
    *out = NULL;
    vx_study *s = calloc(1, sizeof *s);
    if (!s) return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    s->lock_fd = -1;
    s->base = malloc(sizeof *s->base);
    if (!s->base) {
        free(s);
        return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    }
    if (strlen(dir) >= sizeof s->dir - 64) {
        free(s->base), free(s);
        return vx_err_line(e, VX_ERR_ARG, dir, -1, "", "study folder path too long");
    }
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->t0 = vx_now_ns();
    *out = s;
    vx_status st = vx_mkdirs(dir, e);
    if (!st) st = vx_folder_lock(dir, &s->lock_fd, e); /* one process a study */
    return st;
}

vx_status vx_study_create(const char *dir, const vx_study_cfg *cfg, const char *space_text,
                          size_t space_len, const vx_train_cfg *base, vx_study **out, vx_err *e)
{
    vx_status st = cfg_check(cfg, e);
    if (st) return st;
    vx_study *s;
    st = study_alloc(dir, &s, e);
    if (!st) {
        s->cfg = *cfg;
        *s->base = *base;
        st = vx_space_load_text(&s->space, space_text, space_len, "search space", e);
    }
    if (!st) st = base_check(s->base, e);
    if (!st) st = vx_space_check(&s->space, s->base, e);
    char path[600], *yaml = NULL, *settings = NULL, *space = NULL;
    if (!st) st = path_in(s, path, sizeof path, "study.db", e);
    if (!st) st = vx_store_create(&s->store, path, e);
    if (!st) {
        yaml = vx_train_cfg_text(s->base);
        settings = settings_text(&s->cfg);
        space = malloc(space_len + 1);
        if (!yaml || !settings || !space)
            st = vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
        else memcpy(space, space_text, space_len), space[space_len] = '\0';
    }
    if (!st && strlen(space) != space_len)
        st = vx_err_set(e, VX_ERR_FORMAT, "search space: a NUL byte in the file");
    if (!st) st = vx_store_begin(&s->store, e);
    if (!st) st = vx_store_meta_set(&s->store, "space", space, e);
    if (!st) st = vx_store_meta_set(&s->store, "base", yaml, e);
    if (!st) st = vx_store_meta_set(&s->store, "settings", settings, e);
    if (!st) st = vx_store_commit(&s->store, e);
    free(yaml), free(settings), free(space);
    if (!st) st = alloc_trials(s, e);
    if (st) {
        vx_study_close(s); /* NULL when the folder could not be taken */
        return st;
    }
    *out = s;
    return VX_OK;
}

vx_status vx_study_open(const char *dir, int concurrency, vx_study **out, vx_err *e)
{
    vx_study *s;
    vx_status st = study_alloc(dir, &s, e);
    char path[600], *text = NULL;
    if (!st) st = path_in(s, path, sizeof path, "study.db", e);
    if (!st) st = vx_store_open(&s->store, path, 0, e);
    if (!st) st = vx_store_meta_get(&s->store, "settings", &text, e);
    if (!st) st = vx_study_settings_parse(text, &s->cfg, path, e);
    free(text), text = NULL;
    if (!st) st = vx_store_meta_get(&s->store, "space", &text, e);
    if (!st) st = vx_space_load_text(&s->space, text, strlen(text), path, e);
    free(text), text = NULL;
    if (!st) st = vx_store_meta_get(&s->store, "base", &text, e);
    if (!st) {
        vx_train_cfg_default(s->base);
        st = vx_train_cfg_load_text(s->base, text, strlen(text), path, e);
    }
    free(text);
    if (!st) st = alloc_trials(s, e);
    if (!st) st = load_trials(s, e);
    if (st) {
        vx_study_close(s);
        return st;
    }
    s->cfg.concurrency = concurrency;
    *out = s;
    return VX_OK;
}

int vx_study_device_kind(const vx_study *s) { return s->base->device; }

void vx_study_close(vx_study *s)
{
    if (!s) return;
    vx_store_close(&s->store);
    for (size_t i = 0; s->curve && i < s->n_trials; i++) free(s->curve[i]);
    free(s->curve), free(s->n_curve), free(s->trials);
    vx_folder_unlock(s->lock_fd);
    free(s->base);
    free(s);
}

/* ---- the plan ----------------------------------------------------------------------------------
 */

/* The largest estimate over the space: each parameter in turn at each of its candidate values
 * (numbers: their bounds; categories: each), keeping the one that needs most. */
static vx_status worst_trial(const vx_space *sp, const vx_train_cfg *base, int kind,
                             vx_trial_memory *out, vx_err *e)
{
    vx_train_cfg *c = malloc(sizeof *c), *t = malloc(sizeof *t);
    if (!c || !t) {
        free(c), free(t);
        return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    }
    *c = *base;
    vx_status st = vx_trial_memory_of(c, kind, out, e);
    for (int i = 0; i < sp->n && !st; i++) {
        const vx_param *p = &sp->p[i];
        int nv = p->type == VX_PARAM_CATEGORICAL ? p->n_values : 2;
        char best[VX_PARAM_VALUE_LEN] = "";
        for (int k = 0; k < nv && !st; k++) {
            char v[VX_PARAM_VALUE_LEN];
            if (p->type == VX_PARAM_CATEGORICAL) snprintf(v, sizeof v, "%s", p->values[k]);
            else
                snprintf(v, sizeof v,
                         p->type == VX_PARAM_INT || p->type == VX_PARAM_LOGINT ? "%.0f" : "%.17g",
                         k ? p->high : p->low);
            *t = *c;
            vx_trial_memory m;
            st = vx_train_cfg_set(t, p->key, v, "search space", e);
            if (!st) st = vx_trial_memory_of(t, kind, &m, e);
            if (!st && m.total > out->total) *out = m, snprintf(best, sizeof best, "%s", v);
        }
        if (!st && best[0]) st = vx_train_cfg_set(c, p->key, best, "search space", e);
    }
    free(c), free(t);
    return st;
}

static int cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

vx_status vx_study_plan(const vx_study_cfg *cfg, const vx_space *space, const vx_train_cfg *base,
                        vx_device *dev, vx_plan *p, vx_err *e)
{
    memset(p, 0, sizeof *p);
    snprintf(p->device, sizeof p->device, "%s", vx_device_name(dev));
    p->kind = vx_device_kind(dev);
    vx_status st = vx_device_query(dev, &p->info, e);
    if (st) return st;
    vx_device_mem m;
    vx_device_memory(dev, &m);
    p->budget = m.budget;
    size_t avail = vx_device_available(dev);
    /* layer 1: the margin */
    p->available = (size_t)((double)avail * (1 - cfg->margin));
    if (p->kind == VX_DEVICE_CPU && p->available > p->info.free) p->available = p->info.free;
    st = worst_trial(space, base, p->kind, &p->trial, e);
    if (st) return st;
    size_t per = p->trial.total ? p->trial.total : 1;
    int64_t fit = (int64_t)(p->available / per);
    p->fit = fit;
    int cap = cfg->pso.swarm * cfg->seeds;
    if (p->kind == VX_DEVICE_CPU && cap > cores()) cap = cores(); /* a trial keeps a core busy */
    if (cfg->concurrency > 0) cap = cfg->concurrency; /* asked for: the memory still bounds it */
    p->max_concurrent = fit < cap ? (int)fit : cap;
    p->first_chunk = (p->max_concurrent + 1) / 2;
    if (cfg->concurrency > 0) p->first_chunk = p->max_concurrent; /* asked for: no ramp-up */
    /* batch bounds: the largest power of two whose trial fits alone, and in one share */
    vx_train_cfg *t = malloc(sizeof *t);
    if (!t) return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    size_t share = p->max_concurrent > 0 ? p->available / (size_t)p->max_concurrent : 0;
    for (int b = 2; b <= (1 << 20) && !st; b *= 2) {
        *t = *base;
        vx_trial_memory tm;
        if (set_batch(t, b, NULL) != VX_OK) continue;
        if (vx_trial_memory_of(t, p->kind, &tm, NULL) != VX_OK) break;
        if (tm.total <= p->available) p->batch_max = b;
        if (tm.total <= share) p->batch_max_shared = b;
    }
    free(t);
    if (p->max_concurrent < 1)
        return vx_err_set(e, VX_ERR_NOMEM,
                          "hyperopt: one trial needs %.1f MB (estimate) but %s has %.1f MB "
                          "available after the %.0f%% margin",
                          per / 1e6, p->device, p->available / 1e6, cfg->margin * 100);
    return VX_OK;
}

void vx_plan_print(const vx_plan *p, FILE *f)
{
    const vx_trial_memory *t = &p->trial;
    fprintf(f, "device      %s\n", p->device);
    if (p->kind == VX_DEVICE_CPU)
        fprintf(f, "            %d cores, %.2f GiB memory, %.2f GiB free\n", p->info.units,
                p->info.total / 1073741824.0, p->info.free / 1073741824.0);
    else
        fprintf(f, "            %d SMs, %.2f GiB memory, %.2f GiB free\n", p->info.units,
                p->info.total / 1073741824.0, p->info.free / 1073741824.0);
    fprintf(f, "budget      %.1f MB; after the margin %.1f MB available\n", p->budget / 1e6,
            p->available / 1e6);
    fprintf(f,
            "per trial   %.1f MB (largest the space allows): %lld parameters, weights %.1f, "
            "activations %.1f (batch %d), replay %.1f, environments %.1f, fixed %.1f MB\n",
            t->total / 1e6, (long long)t->params, t->weights / 1e6, t->activations / 1e6, t->batch,
            t->replay / 1e6, t->envs / 1e6, t->fixed / 1e6);
    fprintf(f,
            "concurrency memory allows %lld trials at once; at most %d run (the first chunk %d, "
            "then as measured)\n",
            (long long)p->fit, p->max_concurrent, p->first_chunk);
    fprintf(f, "batch       at most %d alone, %d in a share at that concurrency\n", p->batch_max,
            p->batch_max_shared);
}

/* ---- running trials ----------------------------------------------------------------------------
 */

/* One trial in its thread. */
typedef struct {
    vx_study *s;
    vx_trial t; /* in: identity, params, seed, batch; out: the result */
    const double *x;
    vx_device *dev;
    size_t share;
    const double *median; /* per epoch: earlier generations' median best-so-far (NaN: none) */
    int n_median;
    volatile int *stop;
    vx_curve_point *curve;
    int n_curve, cap_curve;
    int validations, pruned, device_refused, out_of_memory;
    double best, best_se;
    vx_status st;
    vx_err err;
    pthread_t thread;
} trial_job;

static void trial_label(const vx_trial *t, char *buf, size_t n)
{
    snprintf(buf, n, "g%d-p%d-s%d", t->generation, t->particle, t->seed_index);
}

/* The trial's run: validations recorded, pruned against earlier generations (after the warm-up),
 * stopped when the study is. */
static int on_epoch(const vx_epoch_report *r, void *ctx)
{
    trial_job *j = ctx;
    double upd = vx_epoch_metric(r, "updates");
    if (isfinite(upd)) j->t.updates = (int64_t)upd; /* the algorithm counts them all */
    j->t.env_steps = r->env_steps;
    j->t.epochs = r->epoch;
    if (r->validated) {
        if (j->n_curve == j->cap_curve) {
            int cap = j->cap_curve ? 2 * j->cap_curve : 16;
            vx_curve_point *c = realloc(j->curve, (size_t)cap * sizeof *c);
            if (!c) {
                j->out_of_memory = 1; /* a failure, not a prune or a stop */
                return 1;
            }
            j->curve = c, j->cap_curve = cap;
        }
        j->curve[j->n_curve++] = (vx_curve_point){r->epoch, r->val.sharpe, r->val.sharpe_se};
        j->validations++;
        if (isfinite(r->val.sharpe) && !(r->val.sharpe <= j->best)) { /* the first best counts */
            j->best = r->val.sharpe, j->best_se = r->val.sharpe_se;
            j->t.best_epoch = r->epoch;
        }
        const vx_study_cfg *c = &j->s->cfg;
        double med = r->epoch < j->n_median ? j->median[r->epoch] : NAN;
        if (c->prune && j->validations > c->prune_warmup && isfinite(med) && !(j->best >= med)) {
            j->pruned = 1;
            return 1;
        }
    }
    return *j->stop != 0;
}

static vx_status trial_config(const trial_job *j, vx_train_cfg *c, vx_err *e)
{
    const vx_study *s = j->s;
    *c = *s->base;
    vx_status st = vx_space_apply(&s->space, j->x, c, e);
    if (!st) st = set_batch(c, j->t.batch, e);
    if (st) return st;
    c->seed = j->t.train_seed;
    c->final_test = 0;       /* the study tests its best trial, once */
    c->checkpoint_every = 0; /* a trial is re-run, never resumed */
    c->async_checkpoints = 0;
    char id[32];
    snprintf(id, sizeof id, "trials/%06lld", (long long)j->t.id);
    if ((size_t)snprintf(c->run_dir, sizeof c->run_dir, "%s/%s", s->dir, id) >= sizeof c->run_dir)
        return vx_err_line(e, VX_ERR_ARG, s->dir, -1, "", "study folder path too long");
    return vx_train_cfg_check(c, e);
}

/* layer 3: a trial its share refuses halves its batch and starts again, alone */
static void *trial_main(void *arg)
{
    trial_job *j = arg;
    char label[48];
    trial_label(&j->t, label, sizeof label);
    vx_log_set_thread_tag(label, VX_LOG_WARN);
    vx_train_cfg *c = malloc(sizeof *c);
    if (!c) {
        j->st = vx_err_set(&j->err, VX_ERR_NOMEM, "%s: out of memory", label);
        return NULL;
    }
    uint64_t t0 = vx_now_ns();
    for (;;) {
        j->n_curve = j->validations = j->pruned = j->device_refused = j->out_of_memory = 0;
        j->best = j->best_se = NAN;
        j->t.updates = j->t.env_steps = 0;
        j->st = trial_config(j, c, &j->err);
        if (j->st) break;
        vx_remove_tree(c->run_dir, NULL); /* whatever an attempt before left */
        vx_device *sh = NULL;
        j->st = vx_device_share(j->dev, j->share, label, &sh, &j->err);
        if (j->st) break;
        j->st = vx_train_run(c, sh, 0, on_epoch, j, NULL, &j->err);
        vx_device_mem m;
        vx_device_memory(sh, &m);
        if ((int64_t)m.peak > j->t.mem_measured) j->t.mem_measured = (int64_t)m.peak;
        vx_device_close(sh);
        if (j->st != VX_ERR_NOMEM) break;
        if (!m.refused) { /* the device, not the share: the study's concern (layers 2, 4) */
            j->device_refused = 1;
            break;
        }
        if (j->t.batch < 2) break;
        vx_log(VX_LOG_WARN, "out of memory in its %.1f MB share at batch %d: halving to %d",
               j->share / 1e6, j->t.batch, j->t.batch / 2);
        j->t.batch /= 2;
        j->t.halvings++;
    }
    free(c);
    j->t.seconds = vx_seconds_since(t0);
    return NULL;
}

/* The result of a joined job into its trial; VX_OK unless the store fails. */
static vx_status record(vx_study *s, trial_job *j, vx_err *e)
{
    vx_trial *t = &s->trials[j->t.id];
    *t = j->t;
    t->objective = j->best, t->objective_se = j->best_se;
    if (j->out_of_memory && !j->st)
        j->st = vx_err_set(&j->err, VX_ERR_NOMEM, "out of host memory for the curve");
    if (j->out_of_memory) t->status = VX_TRIAL_FAILED;
    /* pruned at its last validation, a run ends normally: still a pruned trial */
    else if ((j->st == VX_OK || j->st == VX_ERR_STOPPED) && j->pruned) t->status = VX_TRIAL_PRUNED;
    else if (j->st == VX_OK) t->status = VX_TRIAL_DONE;
    else if (j->st == VX_ERR_STOPPED || j->device_refused) t->status = VX_TRIAL_PENDING;
    else {
        t->status = VX_TRIAL_FAILED;
        t->objective = NAN;
        snprintf(t->error, sizeof t->error, "%.500s", j->err.msg);
        char label[48];
        trial_label(t, label, sizeof label);
        vx_log(VX_LOG_WARN, "hyperopt: trial %s failed: %s", label, j->err.msg);
    }
    if (t->status == VX_TRIAL_PENDING) { /* runs again; the store says so (status) */
        vx_status ps = vx_store_begin(&s->store, e);
        if (!ps) ps = vx_store_trial_put(&s->store, t, e);
        if (!ps) ps = vx_store_commit(&s->store, e);
        return ps;
    }
    free(s->curve[t->id]);
    s->curve[t->id] = j->curve;
    s->n_curve[t->id] = j->n_curve;
    j->curve = NULL;
    vx_status st = vx_store_begin(&s->store, e);
    if (!st) st = vx_store_trial_put(&s->store, t, e);
    if (!st) st = vx_store_curve_put(&s->store, t->id, s->curve[t->id], s->n_curve[t->id], e);
    if (!st) st = vx_store_commit(&s->store, e);
    else vx_store_rollback(&s->store);
    return st;
}

/* Per epoch, the median over trials of generations before g of their best validation so far
 * (NaN where fewer than 3 trials reached that epoch). */
static double *medians(const vx_study *s, int g, int *n_out)
{
    int E = 0;
    size_t end = (size_t)g * (size_t)s->per_gen;
    for (size_t i = 0; i < end; i++)
        for (int k = 0; k < s->n_curve[i]; k++)
            if (s->curve[i][k].epoch + 1 > E) E = s->curve[i][k].epoch + 1;
    double *med = malloc((size_t)(E ? E : 1) * sizeof *med);
    double *vals = malloc((end ? end : 1) * sizeof *vals);
    if (!med || !vals) {
        free(med), free(vals);
        *n_out = 0;
        return NULL;
    }
    for (int ep = 0; ep < E; ep++) {
        size_t n = 0;
        for (size_t i = 0; i < end; i++) {
            double best = NAN;
            int reached = 0;
            for (int k = 0; k < s->n_curve[i] && s->curve[i][k].epoch <= ep; k++) {
                double v = s->curve[i][k].sharpe;
                if (isfinite(v) && !(v <= best)) best = v;
                reached = s->curve[i][k].epoch == ep;
            }
            if (reached && isfinite(best)) vals[n++] = best;
        }
        /* insertion sort: a few dozen values */
        for (size_t a = 1; a < n; a++)
            for (size_t b = a; b > 0 && vals[b - 1] > vals[b]; b--) {
                double x = vals[b];
                vals[b] = vals[b - 1], vals[b - 1] = x;
            }
        med[ep] = n < 3 ? NAN : n % 2 ? vals[n / 2] : (vals[n / 2 - 1] + vals[n / 2]) / 2;
    }
    free(vals);
    *n_out = E;
    return med;
}

/* The trial's parameters as "key=value" lines. */
static void params_text(const vx_space *sp, const double *x, char *out, size_t n)
{
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < sp->n && k < n; i++) {
        char v[VX_PARAM_VALUE_LEN];
        vx_space_value(sp, i, x, v, sizeof v);
        k += (size_t)snprintf(out + k, n - k, "%s=%s\n", sp->p[i].key, v);
    }
}

static vx_status event(vx_study *s, vx_device *dev, int g, int running, const char *note, vx_err *e)
{
    vx_study_event ev;
    memset(&ev, 0, sizeof ev);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now); /* wall time: a resumed study's events follow on */
    ev.t = (double)now.tv_sec + now.tv_nsec * 1e-9;
    ev.generation = g;
    ev.concurrency = s->cur_concurrency;
    ev.running = running;
    vx_device_mem m;
    vx_device_memory(dev, &m);
    ev.reserved = (int64_t)m.reserved, ev.peak = (int64_t)m.peak;
    vx_device_info info;
    if (vx_device_query(dev, &info, NULL) == VX_OK)
        ev.free_b = (int64_t)info.free, ev.total = (int64_t)info.total;
    snprintf(ev.note, sizeof ev.note, "%s", note ? note : "");
    return vx_store_event(&s->store, &ev, e);
}

/* layer 4: below 10% free on the device (the driver's count, or the budget's), halve */
static void watchdog(vx_study *s, vx_device *dev, int g, vx_err *e)
{
    vx_device_info info;
    if (vx_device_query(dev, &info, NULL) != VX_OK || !info.total) return;
    vx_device_mem m;
    vx_device_memory(dev, &m);
    double free_frac = (double)info.free / (double)info.total;
    double budget_frac = m.budget ? (double)vx_device_available(dev) / (double)m.budget : 1;
    double f = free_frac < budget_frac ? free_frac : budget_frac;
    if (f >= 0.10 || s->cur_concurrency <= 1) return;
    int to = (s->cur_concurrency + 1) / 2;
    char note[160];
    snprintf(note, sizeof note, "only %.1f%% free: concurrency %d -> %d", 100 * f,
             s->cur_concurrency, to);
    vx_log(VX_LOG_WARN, "hyperopt: %s", note);
    s->cur_concurrency = to;
    event(s, dev, g, 0, note, e);
}

/* A particle's objective: the mean of its seeds' (NaN when one of them has none). */
static double particle_objective(const vx_study *s, int g, int i)
{
    double sum = 0;
    for (int k = 0; k < s->cfg.seeds; k++) {
        const vx_trial *t = &s->trials[((size_t)g * s->cfg.pso.swarm + i) * s->cfg.seeds + k];
        if (!isfinite(t->objective)) return NAN;
        sum += t->objective;
    }
    return sum / s->cfg.seeds;
}

static int particle_done(const vx_study *s, int g, int i)
{
    for (int k = 0; k < s->cfg.seeds; k++)
        if (s->trials[((size_t)g * s->cfg.pso.swarm + i) * s->cfg.seeds + k].status < VX_TRIAL_DONE)
            return 0;
    return 1;
}

/* The trials of generation g from the swarm's positions; a trial the store already finished must
 * have been run with these very parameters (else the store belongs to another study). */
static vx_status prepare_generation(vx_study *s, const vx_pso *p, int g, int kind, vx_err *e)
{
    vx_train_cfg *c = malloc(sizeof *c);
    if (!c) return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    vx_status st = VX_OK;
    for (int k = 0; k < s->per_gen && !st; k++) {
        vx_trial *t = &s->trials[(size_t)g * s->per_gen + k];
        const double *x = vx_pso_position(p, t->particle);
        char params[sizeof t->params];
        params_text(&s->space, x, params, sizeof params);
        if (t->status >= VX_TRIAL_DONE) {
            if (strcmp(params, t->params) != 0)
                st = vx_err_line(e, VX_ERR_FORMAT, s->store.path, -1, "trials",
                                 "trial %lld was run with other parameters than the swarm gives "
                                 "it now: the store does not belong to this study's settings",
                                 (long long)t->id);
            continue;
        }
        snprintf(t->params, sizeof t->params, "%s", params);
        *c = *s->base;
        st = vx_space_apply(&s->space, x, c, e);
        vx_trial_memory m;
        if (!st) st = vx_trial_memory_of(c, kind, &m, e);
        if (!st && t->halvings == 0) t->batch = batch_of(c);
        if (!st) t->mem_estimate = (int64_t)m.total;
    }
    free(c);
    return st;
}

/* Reports every particle of g whose trials are all in, in particle order, to the swarm. */
static vx_status report_ready(vx_study *s, vx_pso *p, int g, int *next, vx_err *e)
{
    vx_status st = VX_OK;
    while (!st && *next < s->cfg.pso.swarm && particle_done(s, g, *next)) {
        st = vx_pso_report(p, *next, particle_objective(s, g, *next), e);
        (*next)++;
    }
    return st;
}

static void progress(vx_study *s, const vx_pso *p, int g, int running, size_t share,
                     vx_study_progress_fn cb, void *ctx)
{
    if (!cb) return;
    vx_study_progress pr;
    memset(&pr, 0, sizeof pr);
    pr.generation = g, pr.generations = s->cfg.generations;
    pr.total = (int)s->n_trials;
    for (size_t i = 0; i < s->n_trials; i++) {
        const vx_trial *t = &s->trials[i];
        pr.done += t->status >= VX_TRIAL_DONE;
        pr.halvings += t->halvings;
        pr.pruned += t->status == VX_TRIAL_PRUNED;
        pr.failed += t->status == VX_TRIAL_FAILED;
    }
    pr.running = running;
    pr.concurrency = s->cur_concurrency;
    pr.mem_per_trial = (int64_t)share;
    pr.best = p->gbest_particle >= 0 ? p->gbest_f : NAN;
    if (p->gbest_particle >= 0)
        params_text(&s->space, p->gbest_x, pr.best_params, sizeof pr.best_params);
    pr.seconds = vx_seconds_since(s->t0);
    cb(&pr, ctx);
}

/* Runs the pending trials of generation g in chunks. */
static vx_status run_generation(vx_study *s, vx_pso *p, int g, vx_device *dev, size_t avail,
                                int cap, size_t worst, vx_study_progress_fn cb, void *ctx,
                                volatile int *stop, vx_err *e)
{
    int n_med = 0, next = 0;
    double *med = medians(s, g, &n_med);
    size_t base = (size_t)g * s->per_gen;
    trial_job *jobs = calloc((size_t)s->per_gen, sizeof *jobs);
    int *todo = malloc((size_t)s->per_gen * sizeof *todo);
    vx_status st = !jobs || !todo || (!med && g > 0)
                       ? vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory")
                       : VX_OK;
    if (!st) st = report_ready(s, p, g, &next, e);
    while (!st) {
        int n = 0;
        for (int k = 0; k < s->per_gen; k++)
            if (s->trials[base + k].status == VX_TRIAL_PENDING) todo[n++] = k;
        if (n == 0) break;
        if (*stop) {
            st = vx_err_set(e, VX_ERR_STOPPED,
                            "hyperopt: stopped in generation %d; resume with "
                            "--resume",
                            g + 1);
            break;
        }
        watchdog(s, dev, g, e);
        int c = s->cur_concurrency < n ? s->cur_concurrency : n;
        size_t share = avail / (size_t)s->cur_concurrency;
        /* the chunk's trials are running: a kill from here re-runs them */
        st = vx_store_begin(&s->store, e);
        for (int k = 0; k < c && !st; k++) {
            vx_trial *t = &s->trials[base + todo[k]];
            t->status = VX_TRIAL_RUNNING;
            st = vx_store_trial_put(&s->store, t, e);
        }
        if (!st) st = vx_store_commit(&s->store, e);
        else vx_store_rollback(&s->store);
        if (st) break;
        int started = 0;
        for (int k = 0; k < c; k++) {
            trial_job *j = &jobs[k];
            memset(j, 0, sizeof *j);
            j->s = s, j->t = s->trials[base + todo[k]], j->dev = dev, j->share = share;
            j->x = vx_pso_position(p, j->t.particle);
            j->median = med, j->n_median = n_med, j->stop = stop;
            j->t.status = VX_TRIAL_RUNNING;
            if (pthread_create(&j->thread, NULL, trial_main, j) != 0) {
                st = vx_err_set(e, VX_ERR_NOMEM, "hyperopt: cannot start a trial thread: %s",
                                strerror(errno));
                break;
            }
            started++;
        }
        progress(s, p, g, started, share, cb, ctx); /* the chunk as it starts */
        int refused = 0;
        int64_t measured = 0;
        for (int k = 0; k < started; k++) {
            pthread_join(jobs[k].thread, NULL);
            refused += jobs[k].device_refused;
            if (jobs[k].t.mem_measured > measured) measured = jobs[k].t.mem_measured;
            vx_status rs = record(s, &jobs[k], e);
            if (!st) st = rs;
            free(jobs[k].curve);
        }
        for (int k = started; k < c; k++) s->trials[base + todo[k]].status = VX_TRIAL_PENDING;
        if (st) break;
        char note[160] = "";
        if (refused && s->cur_concurrency > 1) { /* layer 2: the device was fuller than planned */
            int to = (c + 1) / 2;
            snprintf(note, sizeof note, "the device refused %d of %d trials: concurrency %d -> %d",
                     refused, c, s->cur_concurrency, to);
            vx_log(VX_LOG_WARN, "hyperopt: %s", note);
            s->cur_concurrency = to;
            s->ramped = 1;
        } else if (refused) {
            st = vx_err_set(e, VX_ERR_NOMEM,
                            "hyperopt: the device refused a trial running alone (%.1f MB "
                            "share): free memory on it or lower the batch",
                            share / 1e6);
            break;
        } else if (!s->ramped) { /* layer 2: scale to what a trial really took */
            s->ramped = 1;
            /* a share never below the largest trial the space allows (so no later trial halves
             * what it would not halve alone), nor below what the first chunk really took; on the
             * CPU most of a trial's memory is outside the accounts, so the estimate stands */
            int64_t per = (int64_t)worst;
            if (vx_device_kind(dev) != VX_DEVICE_CPU && measured > per) per = measured;
            int64_t fit = per > 0 ? (int64_t)(avail / (size_t)per) : cap;
            int to = fit < cap ? (int)fit : cap;
            if (to > s->cur_concurrency) {
                snprintf(note, sizeof note,
                         "the first chunk peaked at %.1f MB a trial (the largest trial's estimate "
                         "%.1f MB): concurrency %d -> %d",
                         measured / 1e6, worst / 1e6, s->cur_concurrency, to);
                vx_log(VX_LOG_INFO, "hyperopt: %s", note);
                s->cur_concurrency = to;
            }
        }
        if (!st) st = event(s, dev, g, c, note, e);
        if (!st) st = report_ready(s, p, g, &next, e);
        progress(s, p, g, 0, share, cb, ctx);
    }
    free(med), free(jobs), free(todo);
    return st;
}

/* ---- the end of a study ------------------------------------------------------------------------
 */

static const vx_trial *best_trial(const vx_study *s, const vx_pso *p)
{
    if (p->gbest_particle < 0) return NULL;
    size_t id =
        ((size_t)p->gbest_generation * s->cfg.pso.swarm + (size_t)p->gbest_particle) * s->cfg.seeds;
    return &s->trials[id];
}

static void csv_quoted(FILE *f, const char *v, size_t n)
{
    fputs(",\"", f);
    for (size_t i = 0; i < n; i++) fputs(v[i] == '"' ? "\"\"" : (char[2]){v[i], 0}, f);
    fputc('"', f);
}

static vx_status write_trials_csv(const vx_study *s, vx_err *e)
{
    char path[600];
    vx_status st = path_in(s, path, sizeof path, "trials.csv", e);
    vx_atomic_file af;
    if (!st) st = vx_atomic_open(&af, path, e);
    if (st) return st;
    FILE *f = af.f;
    fprintf(f, "id,generation,particle,seed,status,objective,objective_se,best_epoch,epochs,"
               "train_seed,batch,halvings,mem_estimate,mem_measured,seconds,env_steps,updates");
    for (int i = 0; i < s->space.n; i++) fprintf(f, ",%s", s->space.p[i].key);
    fprintf(f, ",error\n");
    for (size_t i = 0; i < s->n_trials; i++) {
        const vx_trial *t = &s->trials[i];
        fprintf(f, "%lld,%d,%d,%d,%s,%.17g,%.17g,%d,%d,%llu,%d,%d,%lld,%lld,%.3f,%lld,%lld",
                (long long)t->id, t->generation, t->particle, t->seed_index,
                vx_trial_status_name(t->status), t->objective, t->objective_se, t->best_epoch,
                t->epochs, (unsigned long long)t->train_seed, t->batch, t->halvings,
                (long long)t->mem_estimate, (long long)t->mem_measured, t->seconds,
                (long long)t->env_steps, (long long)t->updates);
        /* the values in the space's order, from the "key=value" lines, then the error: quoted
         * (a value may hold commas: "64,64"), their quotes doubled */
        const char *line = t->params;
        for (int k = 0; k < s->space.n; k++) {
            const char *eq = line ? strchr(line, '=') : NULL, *nl = eq ? strchr(eq, '\n') : NULL;
            csv_quoted(f, eq && nl ? eq + 1 : "", eq && nl ? (size_t)(nl - eq - 1) : 0);
            line = eq && nl ? nl + 1 : NULL;
        }
        csv_quoted(f, t->error, strlen(t->error));
        fputc('\n', f);
    }
    if (ferror(f)) {
        vx_atomic_abort(&af);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
    }
    return vx_atomic_commit(&af, e);
}

/* best.yaml: the best trial's config, as a run of its own (tested at the end, checkpointed as the
 * base says, in a folder of its own) — the same training, so the same validation results. */
static vx_status write_best(const vx_study *s, const vx_trial *t, const double *x, vx_err *e)
{
    vx_train_cfg *c = malloc(sizeof *c);
    if (!c) return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    trial_job j;
    memset(&j, 0, sizeof j);
    j.s = (vx_study *)s, j.t = *t, j.x = x;
    vx_status st = trial_config(&j, c, e);
    if (!st) {
        c->final_test = s->base->final_test;
        c->checkpoint_every = s->base->checkpoint_every;
        c->async_checkpoints = s->base->async_checkpoints;
        snprintf(c->run_dir, sizeof c->run_dir, "%s", "runs/run");
    }
    char path[600];
    vx_atomic_file af;
    if (!st) st = path_in(s, path, sizeof path, "best.yaml", e);
    if (!st) st = vx_atomic_open(&af, path, e);
    if (!st) {
        fprintf(af.f,
                "# vixen hyperopt: the best trial (%s), validation Sharpe %.4f ± %.4f at "
                "epoch %d\n",
                s->dir, t->objective, t->objective_se, t->best_epoch);
        if (vx_train_cfg_write(c, af.f) != VX_OK || ferror(af.f)) {
            vx_atomic_abort(&af);
            st = vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
        } else {
            st = vx_atomic_commit(&af, e);
        }
    }
    free(c);
    return st;
}

/* The best trial's chosen checkpoint on the test split, once: test.json and test.txt. */
static vx_status test_best(vx_study *s, const vx_trial *t, const double *x, vx_err *e)
{
    char *done = NULL, json[600];
    vx_status ts = vx_store_meta_get(&s->store, "tested", &done, e);
    free(done);
    if (ts == VX_OK) return VX_OK; /* already, once */
    if (ts != VX_ERR_NOT_FOUND) return ts;
    vx_status pst = path_in(s, json, sizeof json, "test.json", e);
    if (pst) return pst;
    if (access(json, F_OK) == 0) /* written by a process killed before it said so */
        return vx_store_meta_set(&s->store, "tested", "1", e);
    vx_train_cfg *c = malloc(sizeof *c);
    if (!c) return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    trial_job j;
    memset(&j, 0, sizeof j);
    j.s = s, j.t = *t, j.x = x;
    vx_status st = trial_config(&j, c, e);
    vx_market m;
    int have_market = 0;
    if (!st) st = vx_train_open_market(c, &m, e), have_market = !st;
    char ckpt[700];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint/best.safetensors", c->run_dir);
    vx_eval_report r;
    memset(&r, 0, sizeof r);
    vx_eval_opts o = {1, NULL, 1};
    if (!st) st = vx_eval_checkpoint(c, ckpt, &m, VX_SPLIT_TEST, &o, &r, e);
    if (!st)
        snprintf(r.checkpoint, sizeof r.checkpoint,
                 "best trial %lld, epoch %d: validation Sharpe %.2f (tested once)",
                 (long long)t->id, t->best_epoch, t->objective);
    for (int k = 0; k < 2 && !st; k++) {
        char path[600];
        vx_atomic_file af;
        st = path_in(s, path, sizeof path, k ? "test.txt" : "test.json", e);
        if (!st) st = vx_atomic_open(&af, path, e);
        if (st) break;
        if (k) vx_eval_print(af.f, &r);
        else vx_eval_json(af.f, &r);
        if (ferror(af.f)) {
            vx_atomic_abort(&af);
            st = vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
        } else {
            st = vx_atomic_commit(&af, e);
        }
    }
    vx_eval_report_free(&r);
    if (have_market) vx_market_close(&m);
    free(c);
    if (!st) st = vx_store_meta_set(&s->store, "tested", "1", e);
    return st;
}

static vx_status finish(vx_study *s, const vx_pso *p, vx_err *e)
{
    vx_status st = write_trials_csv(s, e);
    const vx_trial *t = best_trial(s, p);
    if (!st && !t)
        st = vx_err_set(e, VX_ERR_VALIDATION,
                        "hyperopt: no trial has a validation result (see trials.csv)");
    char id[32];
    if (t) snprintf(id, sizeof id, "%lld", (long long)t->id);
    if (!st) st = vx_store_meta_set(&s->store, "best", id, e); /* the report names this one */
    if (!st) st = write_best(s, t, p->gbest_x, e);
    if (!st) st = test_best(s, t, p->gbest_x, e);
    if (!st) st = vx_study_report_write(s->dir, e);
    return st;
}

vx_status vx_study_run(vx_study *s, vx_device *dev, vx_study_progress_fn cb, void *ctx,
                       volatile int *stop, vx_err *e)
{
    static volatile int never;
    if (!stop) stop = &never;
    vx_plan plan;
    vx_status st = vx_study_plan(&s->cfg, &s->space, s->base, dev, &plan, e);
    if (st) return st;
    int cap = s->per_gen;
    if (plan.kind == VX_DEVICE_CPU && cap > cores()) cap = cores();
    if (s->cfg.concurrency > 0) cap = s->cfg.concurrency;
    if (!s->cur_concurrency) s->cur_concurrency = plan.first_chunk;
    s->ramped = s->cfg.concurrency > 0; /* a concurrency asked for is kept */
    vx_log(VX_LOG_INFO,
           "hyperopt: %d generations x %d particles x %d seeds on %s; a trial needs %.1f MB "
           "(estimate), %.1f MB available: %d at once at most, starting with %d",
           s->cfg.generations, s->cfg.pso.swarm, s->cfg.seeds, plan.device, plan.trial.total / 1e6,
           plan.available / 1e6, plan.max_concurrent, s->cur_concurrency);
    vx_pso p;
    st = vx_pso_init(&p, &s->cfg.pso, s->space.dims, s->space.lo, s->space.hi, e);
    for (int g = 0; g < s->cfg.generations && !st; g++) {
        if (g > 0) st = vx_pso_step(&p, e);
        if (!st) st = vx_store_swarm_put(&s->store, &p, e);
        if (!st) st = prepare_generation(s, &p, g, plan.kind, e);
        if (!st)
            st = run_generation(s, &p, g, dev, plan.available, cap, plan.trial.total, cb, ctx, stop,
                                e);
    }
    if (!st) st = finish(s, &p, e);
    vx_pso_free(&p);
    return st;
}

/* ---- status ------------------------------------------------------------------------------------
 */

vx_status vx_study_status(const char *dir, FILE *f, vx_err *e)
{
    char path[600];
    if ((size_t)snprintf(path, sizeof path, "%s/study.db", dir) >= sizeof path)
        return vx_err_line(e, VX_ERR_ARG, dir, -1, "", "study folder path too long");
    vx_store st0;
    vx_status st = vx_store_open(&st0, path, 1, e);
    if (st) return st;
    char *settings = NULL, *tested = NULL;
    vx_study_cfg cfg;
    vx_trial *t = NULL;
    size_t n = 0;
    st = vx_store_meta_get(&st0, "settings", &settings, e);
    if (!st) st = vx_study_settings_parse(settings, &cfg, path, e);
    if (!st) st = vx_store_trials(&st0, &t, &n, e);
    int tested_done = vx_store_meta_get(&st0, "tested", &tested, NULL) == VX_OK;
    free(tested);
    if (!st) {
        size_t total = (size_t)cfg.generations * cfg.pso.swarm * cfg.seeds;
        int count[VX_TRIAL_FAILED + 1] = {0}, halvings = 0;
        const vx_trial *best = NULL;
        for (size_t i = 0; i < n; i++) {
            count[t[i].status]++;
            halvings += t[i].halvings;
            if (t[i].status >= VX_TRIAL_DONE && isfinite(t[i].objective) &&
                (!best || t[i].objective > best->objective))
                best = &t[i];
        }
        int finished = count[VX_TRIAL_DONE] + count[VX_TRIAL_PRUNED] + count[VX_TRIAL_FAILED];
        fprintf(f, "study %s: %d generations x %d particles x %d seeds (%zu trials)\n", dir,
                cfg.generations, cfg.pso.swarm, cfg.seeds, total);
        fprintf(f,
                "trials: %d finished (%d done, %d pruned, %d failed), %d running, %zu to go; "
                "%d out-of-memory halvings\n",
                finished, count[VX_TRIAL_DONE], count[VX_TRIAL_PRUNED], count[VX_TRIAL_FAILED],
                count[VX_TRIAL_RUNNING], total - (size_t)finished - count[VX_TRIAL_RUNNING],
                halvings);
        if (best) {
            fprintf(f,
                    "best trial so far: %lld (generation %d, particle %d, seed %d): validation "
                    "Sharpe %.4f ± %.4f at epoch %d\n",
                    (long long)best->id, best->generation + 1, best->particle, best->seed_index,
                    best->objective, best->objective_se, best->best_epoch);
            fputs(best->params, f);
        }
        fprintf(f, "%s\n",
                tested_done ? "finished: best.yaml, test.txt (the best trial on the test split, "
                              "once), trials.csv, report.html"
                : (size_t)finished == total ? "every trial finished; the test evaluation is due"
                                            : "not finished (vixen hyperopt --resume DIR goes on)");
    }
    free(settings);
    free(t);
    vx_store_close(&st0);
    return st;
}

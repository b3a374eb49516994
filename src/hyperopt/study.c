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

/* ---- the study ---------------------------------------------------------------------------------
 */

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
    if (vx_trial_batch_of(b) < 1)
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
    s->fuse = -1;
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
    *out = NULL;
    { /* no study: nothing made (study_alloc makes the folder and its lock) */
        char db[600];
        struct stat sb;
        if ((size_t)snprintf(db, sizeof db, "%s/study.db", dir) >= sizeof db)
            return vx_err_line(e, VX_ERR_ARG, dir, -1, "", "study folder path too long");
        if (stat(db, &sb) != 0)
            return vx_err_line(e, VX_ERR_NOT_FOUND, db, -1, "", "no study here");
    }
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

vx_status vx_study_worker_copy(const char *dir, const char *settings, const char *space,
                               const char *base, int concurrency, vx_study **out, vx_err *e)
{
    *out = NULL;
    vx_study *s = calloc(1, sizeof *s);
    if (!s || !(s->base = malloc(sizeof *s->base))) {
        free(s);
        return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    }
    s->lock_fd = -1; /* rank 0 holds the folder's lock */
    s->fuse = -1;    /* each rank groups where its device fuses */
    s->t0 = vx_now_ns();
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    vx_status st = strlen(dir) >= sizeof s->dir - 64
                       ? vx_err_line(e, VX_ERR_ARG, dir, -1, "", "study folder path too long")
                       : vx_study_settings_parse(settings, &s->cfg, "rank 0's study", e);
    if (!st) st = vx_space_load_text(&s->space, space, strlen(space), "rank 0's study", e);
    if (!st) {
        vx_train_cfg_default(s->base);
        st = vx_train_cfg_load_text(s->base, base, strlen(base), "rank 0's study", e);
    }
    if (st) {
        vx_study_close(s);
        return st;
    }
    s->cfg.concurrency = concurrency;
    s->per_gen = s->cfg.pso.swarm * s->cfg.seeds;
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

/* The batch a plan tries after b (0: the first; 0 back: none left): the DQN's powers of two up to
 * 2^20; a divisor of PPO's rollout rows from 2 up (rows / m for m falling). */
static int64_t next_batch(int ppo, int64_t rows, int64_t b)
{
    if (!ppo) return b == 0 ? 2 : b < (1 << 20) ? 2 * b : 0;
    for (int64_t m = b ? (rows - 1) / b : rows / 2; m >= 1; m--)
        if (rows % m == 0 && rows / m > b) return rows / m <= INT32_MAX ? rows / m : 0;
    return 0;
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
    if (p->kind == VX_DEVICE_CPU && cap > vx_study_cores(cfg)) /* a trial keeps a core busy */
        cap = vx_study_cores(cfg);
    if (cfg->concurrency > 0) cap = cfg->concurrency; /* asked for: the memory still bounds it */
    p->max_concurrent = fit < cap ? (int)fit : cap;
    p->first_chunk = (p->max_concurrent + 1) / 2;
    if (cfg->concurrency > 0) p->first_chunk = p->max_concurrent; /* asked for: no ramp-up */
    /* batch bounds: the largest batch whose trial fits alone, and in one share — a power of two
     * for the DQN, for PPO a minibatch's rows (a divisor of the rollout's: those are what it can
     * take, from the whole rollout in one minibatch down to 2 rows) */
    vx_train_cfg *t = malloc(sizeof *t);
    if (!t) return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    size_t share = p->max_concurrent > 0 ? p->available / (size_t)p->max_concurrent : 0;
    int ppo = strcmp(vx_train_algo(base)->name, "ppo") == 0;
    int64_t rows = (int64_t)base->envs * base->steps_per_epoch;
    p->rollout_rows = ppo ? rows : 0;
    for (int64_t b = next_batch(ppo, rows, 0); b > 0 && !st; b = next_batch(ppo, rows, b)) {
        *t = *base;
        vx_trial_memory tm;
        if (vx_trial_set_batch(t, (int)b, NULL) != VX_OK) continue;
        if (vx_trial_memory_of(t, p->kind, &tm, NULL) != VX_OK) break;
        if (tm.total <= p->available) p->batch_max = (int)b;
        if (tm.total <= share) p->batch_max_shared = (int)b;
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
            "activations %.1f (%s %d%s), replay %.1f, environments %.1f, fixed %.1f MB\n",
            t->total / 1e6, (long long)t->params, t->weights / 1e6, t->activations / 1e6,
            p->rollout_rows ? "minibatch" : "batch", t->batch, p->rollout_rows ? " rows" : "",
            t->replay / 1e6, t->envs / 1e6, t->fixed / 1e6);
    fprintf(f,
            "concurrency memory allows %lld trials at once; at most %d run (the first chunk %d, "
            "then as measured)\n",
            (long long)p->fit, p->max_concurrent, p->first_chunk);
    if (p->rollout_rows)
        fprintf(f,
                "minibatch   at most %d rows alone, %d in a share at that concurrency (of the "
                "rollout's %lld)\n",
                p->batch_max, p->batch_max_shared, (long long)p->rollout_rows);
    else
        fprintf(f, "batch       at most %d alone, %d in a share at that concurrency\n",
                p->batch_max, p->batch_max_shared);
}

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
        vx_trial_label(s, t, label, sizeof label);
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

static vx_status event(vx_study *s, vx_device *dev, int g, int running, int concurrency,
                       const char *note, vx_err *e)
{
    vx_study_event ev;
    vx_event_fill(dev, g, concurrency, running, note, &ev);
    return vx_store_event(&s->store, &ev, e);
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
        if (!st && t->halvings == 0) t->batch = vx_trial_batch_of(c);
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

/* The trials of a running chunk that train in groups. */
static int grouped_in(const vx_chunk *c, int busy)
{
    int n = 0;
    for (int k = 0; busy && k < c->started; k++) n += c->jobs[k].group != NULL;
    return n;
}

static void progress(vx_study *s, const vx_pso *p, int g, int running, int grouped, size_t share,
                     const vx_engine *eng, const vx_workers *w, vx_study_progress_fn cb, void *ctx)
{
    if (!cb) return;
    vx_study_progress pr;
    memset(&pr, 0, sizeof pr);
    pr.grouped = grouped;
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
    pr.concurrency = (eng->local ? *eng->cur : 0) + vx_workers_concurrency(w);
    pr.ranks = eng->local + vx_workers_count(w);
    pr.mem_per_trial = (int64_t)share;
    pr.best = p->gbest_particle >= 0 ? p->gbest_f : NAN;
    if (p->gbest_particle >= 0)
        params_text(&s->space, p->gbest_x, pr.best_params, sizeof pr.best_params);
    pr.seconds = vx_seconds_since(s->t0);
    cb(&pr, ctx);
}

/* Marks up to `max` pending trials of generation g running (in the store: a kill from here
 * re-runs them) and copies them into t, their positions into x. */
static vx_status claim(vx_study *s, const vx_pso *p, int g, int max, vx_trial *t, const double **x,
                       int *n, vx_err *e)
{
    size_t base = (size_t)g * s->per_gen;
    *n = 0;
    for (int k = 0; k < s->per_gen && *n < max; k++)
        if (s->trials[base + k].status == VX_TRIAL_PENDING) {
            vx_trial *tr = &s->trials[base + k];
            tr->status = VX_TRIAL_RUNNING;
            t[*n] = *tr;
            x[(*n)++] = vx_pso_position(p, tr->particle);
        }
    if (*n == 0) return VX_OK;
    vx_status st = vx_store_begin(&s->store, e);
    for (int k = 0; k < *n && !st; k++) st = vx_store_trial_put(&s->store, &t[k], e);
    if (!st) st = vx_store_commit(&s->store, e);
    else vx_store_rollback(&s->store);
    if (st)
        for (int k = 0; k < *n; k++) s->trials[t[k].id].status = VX_TRIAL_PENDING;
    return st;
}

/* What a worker returned, recorded as if its trials had run here. */
static vx_status record_reply(vx_study *s, int g, vx_reply *r, vx_err *e)
{
    if (r->error[0])
        return vx_err_set(e, VX_ERR_IO, "hyperopt: rank %d failed: %s", r->worker, r->error);
    vx_status st = VX_OK;
    for (int k = 0; k < r->n && !st; k++) {
        const vx_trial_outcome *o = &r->o[k];
        if (o->t.id < 0 || (size_t)o->t.id >= s->n_trials || o->t.generation != g ||
            s->trials[o->t.id].status != VX_TRIAL_RUNNING) {
            st = vx_err_set(e, VX_ERR_FORMAT,
                            "hyperopt: rank %d returned trial %lld, which it "
                            "was not given",
                            r->worker, (long long)o->t.id);
            break;
        }
        trial_job j;
        memset(&j, 0, sizeof j);
        j.s = s, j.t = o->t, j.best = o->best, j.best_se = o->best_se;
        j.pruned = o->pruned, j.out_of_memory = o->out_of_memory;
        j.device_refused = o->device_refused, j.st = (vx_status)o->st;
        snprintf(j.err.msg, sizeof j.err.msg, "%s", o->err);
        j.curve = r->curve[k], j.n_curve = o->n_curve;
        r->curve[k] = NULL; /* record takes it */
        st = record(s, &j, e);
        free(j.curve);
    }
    if (!st && r->ev.note[0]) {
        vx_study_event ev = r->ev;
        snprintf(ev.note, sizeof ev.note, "rank %d: %.140s", r->worker, r->ev.note);
        st = vx_store_event(&s->store, &ev, e);
    }
    return st;
}

/* Runs the pending trials of generation g: in chunks on this process's engine (when `local`), and
 * in sets handed to the worker ranks as they become free. Results are recorded as they come, in
 * whatever order; the swarm hears them in particle order (report_ready). */
static vx_status run_generation(vx_study *s, vx_pso *p, int g, vx_engine *eng, vx_workers *w,
                                int local, vx_study_progress_fn cb, void *ctx, volatile int *stop,
                                vx_err *e)
{
    int n_med = 0, next = 0, n_workers = vx_workers_count(w);
    double *med = medians(s, g, &n_med);
    vx_trial *t = malloc((size_t)s->per_gen * sizeof *t);
    const double **x = malloc((size_t)s->per_gen * sizeof *x);
    vx_chunk ch = {0};
    vx_status st = !t || !x || (!med && g > 0)
                       ? vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory")
                       : vx_chunk_init(&ch, s->per_gen, e);
    if (!st) st = report_ready(s, p, g, &next, e);
    int local_busy = 0, stopping = 0;
    volatile int halt = 0; /* what this process's trials read: the stop, or an error */
    char note[160];
    while (!st) {
        if (*stop) vx_flag_set(&halt);
        if (*stop && !stopping) {
            stopping = 1;
            vx_workers_stop(w);
        }
        /* the pending trials are spread over the ranks free now: no rank takes more than its
         * part while another that could run them waits */
        int n = 0, pending = 0, free_ranks = local && !local_busy;
        for (int k = 0; k < s->per_gen; k++)
            pending += s->trials[(size_t)g * s->per_gen + k].status == VX_TRIAL_PENDING;
        for (int k = 1; k <= n_workers; k++) free_ranks += vx_workers_capacity(w, k) > 0;
        int part = free_ranks ? (pending + free_ranks - 1) / free_ranks : 0;
        if (!stopping && local && !local_busy && part > 0) {
            vx_watchdog(eng, note, sizeof note);
            if (note[0]) st = event(s, eng->dev, g, 0, *eng->cur, note, e);
            int max = *eng->cur < part ? *eng->cur : part;
            if (!st) st = claim(s, p, g, max, t, x, &n, e);
            if (!st && n) st = vx_chunk_start(s, eng, &ch, t, x, n, med, n_med, &halt, e);
            if (!st && n) {
                local_busy = 1;
                progress(s, p, g, ch.started + vx_workers_running(w), grouped_in(&ch, 1), ch.share,
                         eng, w, cb, ctx);
            }
        }
        for (int k = 1; k <= n_workers && !st && !stopping; k++) {
            int cap = vx_workers_capacity(w, k);
            if (cap > part) cap = part;
            if (cap <= 0) continue;
            st = claim(s, p, g, cap, t, x, &n, e);
            if (!st && n) st = vx_workers_send(w, k, s, g, t, x, n, med, n_med, e);
            if (!st && n)
                progress(s, p, g, (local_busy ? ch.started : 0) + vx_workers_running(w),
                         grouped_in(&ch, local_busy), ch.share, eng, w, cb, ctx);
        }
        if (st || (!local_busy && vx_workers_running(w) == 0)) break;
        /* wait for the local chunk or a worker's reply, whichever comes first */
        if (local_busy && vx_chunk_wait(&ch, n_workers ? 2 : 100)) {
            local_busy = 0;
            st = vx_chunk_end(eng, &ch, note, sizeof note, e);
            for (int k = 0; k < ch.started; k++) {
                vx_status rs = record(s, &ch.jobs[k], e);
                if (!st) st = rs;
                free(ch.jobs[k].curve);
            }
            if (!st) st = event(s, eng->dev, g, ch.started, *eng->cur, note, e);
            if (!st) st = report_ready(s, p, g, &next, e);
            progress(s, p, g, vx_workers_running(w), 0, ch.share, eng, w, cb, ctx);
            continue;
        }
        vx_reply r;
        int got = n_workers ? vx_workers_poll(w, &r, e) : 0;
        if (got < 0) st = VX_ERR_IO;
        if (got > 0) {
            if (r.interrupted && !stopping) stopping = 1, vx_flag_set(&halt), vx_workers_stop(w);
            st = record_reply(s, g, &r, e);
            vx_reply_free(&r);
            if (!st) st = report_ready(s, p, g, &next, e);
            progress(s, p, g, (local_busy ? ch.started : 0) + vx_workers_running(w),
                     grouped_in(&ch, local_busy), ch.share, eng, w, cb, ctx);
        } else if (!got && !local_busy) {
            struct timespec ms = {0, 2000000};
            nanosleep(&ms, NULL); /* only workers are busy: poll, do not spin */
        }
    }
    if (local_busy) { /* an error while the local chunk ran: it ends with the study */
        vx_workers_stop(w);
        vx_flag_set(&halt); /* its trials stop at their next epoch */
        vx_chunk_wait(&ch, -1);
        char ignored[160];
        vx_err e2;
        vx_chunk_end(eng, &ch, ignored, sizeof ignored, &e2);
        for (int k = 0; k < ch.started; k++) free(ch.jobs[k].curve);
    }
    if (!st && stopping)
        st = vx_err_set(e, VX_ERR_STOPPED,
                        "hyperopt: stopped in generation %d; resume with "
                        "--resume",
                        g + 1);
    vx_chunk_free(&ch);
    free(med), free(t), free(x);
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
    fprintf(f,
            "id,generation,particle,seed,status,objective,objective_se,best_epoch,epochs,"
            "train_seed,batch,halvings,mem_estimate,mem_measured,seconds,env_steps,updates,rank");
    for (int i = 0; i < s->space.n; i++) fprintf(f, ",%s", s->space.p[i].key);
    fprintf(f, ",error\n");
    for (size_t i = 0; i < s->n_trials; i++) {
        const vx_trial *t = &s->trials[i];
        fprintf(f, "%lld,%d,%d,%d,%s,%.17g,%.17g,%d,%d,%llu,%d,%d,%lld,%lld,%.3f,%lld,%lld,%d",
                (long long)t->id, t->generation, t->particle, t->seed_index,
                vx_trial_status_name(t->status), t->objective, t->objective_se, t->best_epoch,
                t->epochs, (unsigned long long)t->train_seed, t->batch, t->halvings,
                (long long)t->mem_estimate, (long long)t->mem_measured, t->seconds,
                (long long)t->env_steps, (long long)t->updates, t->rank);
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
    vx_status st = vx_trial_config(s, t, x, c, e);
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
    vx_status st = vx_trial_config(s, t, x, c, e);
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

vx_status vx_study_run_with(vx_study *s, vx_device *dev, vx_workers *w, int local,
                            vx_study_progress_fn cb, void *ctx, volatile int *stop, vx_err *e)
{
    static volatile int never;
    if (!stop) stop = &never;
    vx_plan plan;
    vx_engine eng;
    int state[2] = {s->cur_concurrency, s->ramped};
    vx_status st = vx_engine_init(s, dev, &eng, state, &plan, e);
    if (st) return st;
    eng.local = local;
    if (!local && vx_workers_count(w) == 0) {
        if (s->launcher) vx_device_set_launcher(dev, 0, NULL);
        return vx_err_set(e, VX_ERR_ARG,
                          "hyperopt: rank 0 runs no trials and there are no "
                          "other ranks");
    }
    if (local)
        vx_log(VX_LOG_INFO,
               "hyperopt: %d generations x %d particles x %d seeds on %s; a trial needs %.1f MB "
               "(estimate), %.1f MB available: %d at once at most, starting with %d",
               s->cfg.generations, s->cfg.pso.swarm, s->cfg.seeds, plan.device,
               plan.trial.total / 1e6, plan.available / 1e6, plan.max_concurrent, *eng.cur);
    /* the base config's market, opened once for every trial (and the test) that trains on it
     * (market_hold.c); without it (out of memory, or a market the trials cannot open either)
     * each trial opens its own and says why */
    vx_market_hold *market = NULL;
    if (vx_train_market_hold(s->base, &market, NULL) != VX_OK) market = NULL;
    vx_pso p;
    st = vx_pso_init(&p, &s->cfg.pso, s->space.dims, s->space.lo, s->space.hi, e);
    for (int g = 0; g < s->cfg.generations && !st; g++) {
        if (g > 0) st = vx_pso_step(&p, e);
        if (!st) st = vx_store_swarm_put(&s->store, &p, e);
        if (!st) st = prepare_generation(s, &p, g, plan.kind, e);
        if (!st) st = run_generation(s, &p, g, &eng, w, local, cb, ctx, stop, e);
        s->cur_concurrency = *eng.cur, s->ramped = *eng.ramped;
    }
    if (!st) st = finish(s, &p, e);
    vx_pso_free(&p);
    vx_train_market_release(market);                       /* every trial's view is closed by now */
    if (s->launcher) vx_device_set_launcher(dev, 0, NULL); /* the device is the caller's */
    return st;
}

void vx_study_set_launcher(vx_study *s, int one) { s->launcher = one != 0; }

void vx_study_set_fuse(vx_study *s, int mode) { s->fuse = mode < 0 ? -1 : mode != 0; }

vx_status vx_study_run(vx_study *s, vx_device *dev, vx_study_progress_fn cb, void *ctx,
                       volatile int *stop, vx_err *e)
{
    return vx_study_run_with(s, dev, NULL, 1, cb, ctx, stop, e);
}

/* ---- status ------------------------------------------------------------------------------------
 */

const vx_trial *vx_study_best_so_far(const vx_trial *t, size_t n, const vx_study_cfg *c,
                                     double *mean)
{
    size_t evals = (size_t)c->generations * c->pso.swarm, per = (size_t)c->seeds;
    double *sum = calloc(evals ? evals : 1, sizeof *sum);
    int *have = calloc(evals ? evals : 1, sizeof *have);
    const vx_trial **first = calloc(evals ? evals : 1, sizeof *first);
    const vx_trial *best = NULL;
    double m = NAN;
    if (sum && have && first) {
        for (size_t i = 0; i < n; i++) {
            const vx_trial *x = &t[i];
            if (x->generation < 0 || x->generation >= c->generations || x->particle < 0 ||
                x->particle >= c->pso.swarm || !isfinite(x->objective))
                continue;
            size_t k = (size_t)x->generation * c->pso.swarm + (size_t)x->particle;
            sum[k] += x->objective, have[k]++;
            if (x->seed_index == 0) first[k] = x;
        }
        for (size_t k = 0; k < evals; k++)
            if ((size_t)have[k] == per && first[k] && (!best || sum[k] / per > m))
                best = first[k], m = sum[k] / per;
    }
    free(sum), free(have), free(first);
    if (mean) *mean = m;
    return best;
}

vx_status vx_study_status(const char *dir, FILE *f, vx_err *e)
{
    char path[600];
    if ((size_t)snprintf(path, sizeof path, "%s/study.db", dir) >= sizeof path)
        return vx_err_line(e, VX_ERR_ARG, dir, -1, "", "study folder path too long");
    vx_store st0;
    vx_status st = vx_store_open(&st0, path, 1, e);
    if (st) return st;
    char *settings = NULL, *tested = NULL, *chosen = NULL;
    vx_study_cfg cfg;
    vx_trial *t = NULL;
    size_t n = 0;
    st = vx_store_meta_get(&st0, "settings", &settings, e);
    if (!st) st = vx_study_settings_parse(settings, &cfg, path, e);
    if (!st) st = vx_store_trials(&st0, &t, &n, e);
    int tested_done = vx_store_meta_get(&st0, "tested", &tested, NULL) == VX_OK;
    free(tested);
    long long chosen_id =
        vx_store_meta_get(&st0, "best", &chosen, NULL) == VX_OK ? atoll(chosen) : -1;
    free(chosen);
    if (!st) {
        size_t total = (size_t)cfg.generations * cfg.pso.swarm * cfg.seeds;
        int count[VX_TRIAL_FAILED + 1] = {0}, halvings = 0;
        const vx_trial *best = vx_study_best_so_far(t, n, &cfg, NULL);
        for (size_t i = 0; i < n; i++) {
            count[t[i].status]++;
            halvings += t[i].halvings;
            if (t[i].id == chosen_id) best = &t[i]; /* the swarm's, recorded at the end */
        }
        int finished = count[VX_TRIAL_DONE] + count[VX_TRIAL_PRUNED] + count[VX_TRIAL_FAILED];
        /* a study process holds the folder's lock while it runs (this one's own does not count:
         * a study prints its status as it ends) */
        long holder;
        int live = vx_folder_held(dir, &holder) && holder != (long)getpid();
        fprintf(f, "study %s: %d generations x %d particles x %d seeds (%zu trials)\n", dir,
                cfg.generations, cfg.pso.swarm, cfg.seeds, total);
        fprintf(f,
                "trials: %d finished (%d done, %d pruned, %d failed), %d %s, %zu to go; "
                "%d out-of-memory halvings\n",
                finished, count[VX_TRIAL_DONE], count[VX_TRIAL_PRUNED], count[VX_TRIAL_FAILED],
                count[VX_TRIAL_RUNNING],
                live || !count[VX_TRIAL_RUNNING] ? "running"
                                                 : "stopped mid-run (run again on resume)",
                total - (size_t)finished - count[VX_TRIAL_RUNNING], halvings);
        if (best) {
            fprintf(f,
                    "best trial%s: %lld (generation %d, particle %d, seed %d): validation "
                    "Sharpe %.4f ± %.4f at epoch %d",
                    best->id == chosen_id ? "" : " so far", (long long)best->id, best->generation,
                    best->particle, best->seed_index, best->objective, best->objective_se,
                    best->best_epoch);
            if (cfg.seeds > 1) { /* what the swarm ranks: the particle's mean */
                double sum = 0;
                for (size_t i = 0; i < n; i++)
                    if (t[i].generation == best->generation && t[i].particle == best->particle)
                        sum += t[i].objective;
                fprintf(f, "; its particle's mean over %d seeds %.4f", cfg.seeds, sum / cfg.seeds);
            }
            fprintf(f, "\n");
            fputs(best->params, f);
        }
        fprintf(f, "%s\n",
                tested_done ? "finished: best.yaml, test.txt (the best trial on the test split, "
                              "once), trials.csv, report.html"
                : live      ? "running now"
                : (size_t)finished == total ? "every trial finished; the test evaluation is due"
                                            : "not finished (vixen hyperopt --resume DIR goes on)");
        if (live && !tested_done) fprintf(f, "(process %ld holds the study)\n", holder);
    }
    free(settings);
    free(t);
    vx_store_close(&st0);
    return st;
}

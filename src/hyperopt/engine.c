/* engine.c — the trials one process runs (study_internal.h): each trial a training run in a thread
 * of its own on a share of the device, started in chunks, with layers 2, 3 and 4 of the
 * out-of-memory protection (hyperopt.h). A study in one process drives one engine; in an MPI study
 * every rank drives its own, under its own budget, and rank 0 records what they all return. */
#define _DEFAULT_SOURCE
#include "study_internal.h"
#include "vixen/dqn.h"
#include "vixen/ppo.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the batch each algorithm can halve ------------------------------------------------------ */

/* The setting whose halving halves a trial's per-batch memory: the DQN's batch; PPO's minibatch
 * rows, by doubling the minibatches. */
int vx_trial_batch_of(const vx_train_cfg *c)
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

int vx_trial_halved_batch(const vx_train_cfg *c, int batch)
{
    if (strcmp(vx_train_algo(c)->name, "ppo") != 0) return batch / 2;
    /* PPO's minibatch rows must divide the rollout: the largest divisor at most half of them (an
     * odd count of rows has no exact half: 75 of 600 rows goes to 30, not 37) */
    int64_t rows = (int64_t)c->envs * c->steps_per_epoch;
    for (int d = batch / 2; d >= 2; d--)
        if (rows % d == 0) return d;
    return 0;
}

vx_status vx_trial_set_batch(vx_train_cfg *c, int batch, vx_err *e)
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

/* ---- one trial ------------------------------------------------------------------------------- */

void vx_trial_label(const vx_study *s, const vx_trial *t, char *buf, size_t n)
{
    snprintf(buf, n, "%sg%d-p%d-s%d", s->tag, t->generation, t->particle, t->seed_index);
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
    return vx_flag_get(j->stop) != 0;
}

vx_status vx_trial_config(const vx_study *s, const vx_trial *t, const double *x, vx_train_cfg *c,
                          vx_err *e)
{
    *c = *s->base;
    vx_status st = vx_space_apply(&s->space, x, c, e);
    if (!st) st = vx_trial_set_batch(c, t->batch, e);
    if (st) return st;
    c->seed = t->train_seed;
    c->final_test = 0;       /* the study tests its best trial, once */
    c->checkpoint_every = 0; /* a trial is re-run, never resumed */
    c->async_checkpoints = 0;
    c->threads = 1; /* what cmd_hyperopt gives the device on the CPU: best.yaml keeps it */
    char id[32];
    snprintf(id, sizeof id, "trials/%06lld", (long long)t->id);
    if ((size_t)snprintf(c->run_dir, sizeof c->run_dir, "%s/%s", s->dir, id) >= sizeof c->run_dir)
        return vx_err_line(e, VX_ERR_ARG, s->dir, -1, "", "study folder path too long");
    return vx_train_cfg_check(c, e);
}

/* The start gate: a trial whose objects and graphs are made waits until every trial of its chunk
 * is as far (or has ended), so that no trial builds its graphs while others already run (on the
 * H200 an instantiation then took 100 times as long). A trial that ends before it counts as
 * arrived, and so does one whose first attempt ran out of memory during its creation (its retry
 * waits only for those still setting up); a retry after it got there passes straight through. A
 * stop asked for ends the wait, and so does a minute. On the CPU the gate buys little, but one
 * path for both kinds keeps it under the CPU suite's tests. */
#define GATE_SECONDS 60
static void gate_arrive(trial_job *j, int wait)
{
    vx_chunk *c = j->chunk;
    pthread_mutex_lock(&c->mu);
    if (!j->arrived) {
        j->arrived = 1;
        c->ready++;
        pthread_cond_broadcast(&c->cv);
        /* in tenths of a second: a stop comes from a signal handler, which cannot signal cv */
        for (int slice = 0;
             wait && c->ready < c->n && !vx_flag_get(j->stop) && slice < 10 * GATE_SECONDS;
             slice++) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 100000000L;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&c->cv, &c->mu, &until);
        }
    }
    pthread_mutex_unlock(&c->mu);
}

static void trial_ready(void *ctx) { gate_arrive(ctx, 1); }

/* layer 3: a trial its share refuses halves its batch and starts again, alone */
static void *trial_main(void *arg)
{
    trial_job *j = arg;
    char label[48];
    vx_trial_label(j->s, &j->t, label, sizeof label);
    vx_log_set_thread_tag(label, VX_LOG_WARN);
    vx_train_cfg *c = malloc(sizeof *c);
    uint64_t t0 = vx_now_ns();
    if (!c) j->st = vx_err_set(&j->err, VX_ERR_NOMEM, "%s: out of memory", label);
    for (int attempt = 0; c; attempt++) {
        vx_train_group *g = attempt == 0 ? j->group : NULL; /* a retry runs alone */
        j->n_curve = j->validations = j->pruned = j->device_refused = j->out_of_memory = 0;
        j->best = j->best_se = NAN;
        j->t.updates = j->t.env_steps = 0;
        j->st = vx_trial_config(j->s, &j->t, j->x, c, &j->err);
        if (j->st) break;
        vx_remove_tree(c->run_dir, NULL); /* whatever an attempt before left */
        vx_device *sh = NULL;
        j->st = vx_device_share(j->dev, j->share, label, &sh, &j->err);
        if (j->st) break;
        /* the trial's estimate in one piece, so that its objects' blocks do not each queue at
         * the driver behind the other trials' (device.h); without it they still can */
        vx_err why;
        /* (a member's algorithm lives on its group's share, not this one) */
        if (!g && vx_device_reserve_ahead(sh, (size_t)j->t.mem_estimate, &why) != VX_OK)
            vx_log(VX_LOG_INFO, "memory not reserved ahead: %s", why.msg);
        vx_device_on_ready(sh, trial_ready, j);
        if (g) j->st = vx_train_run_member(c, sh, g, j->member, on_epoch, j, &j->err);
        else j->st = vx_train_run(c, sh, 0, on_epoch, j, NULL, &j->err);
        vx_device_mem m;
        vx_device_memory(sh, &m);
        if ((int64_t)m.peak > j->t.mem_measured) j->t.mem_measured = (int64_t)m.peak;
        vx_device_close(sh);
        j->grouped = g != NULL;
        if (g && vx_train_group_failed(g, j->member, &why)) { /* not its doing: alone, as it was */
            vx_log(VX_LOG_WARN, "its group failed (%s): it runs again alone", why.msg);
            continue;
        }
        if (j->st != VX_ERR_NOMEM) break;
        if (!m.refused) { /* the device, not the share: the study's concern (layers 2, 4) */
            j->device_refused = 1;
            break;
        }
        int half = vx_trial_halved_batch(c, j->t.batch);
        if (half < 1) break;
        vx_log(VX_LOG_WARN, "out of memory in its %.1f MB share at batch %d: halving to %d",
               j->share / 1e6, j->t.batch, half);
        j->t.batch = half;
        j->t.halvings++;
    }
    free(c);
    vx_train_group_leave(j->group, j->member); /* one that never ran does not hold its group */
    gate_arrive(j, 0); /* one that never got there does not hold the others */
    j->t.seconds = vx_seconds_since(t0);
    pthread_mutex_lock(&j->chunk->mu); /* the chunk's waiter learns of it */
    j->chunk->finished++;
    pthread_cond_broadcast(&j->chunk->cv);
    pthread_mutex_unlock(&j->chunk->mu);
    return NULL;
}

/* The result of a joined job into its trial; VX_OK unless the store fails. */

/* ---- the engine ------------------------------------------------------------------------------ */

static int cores_of(const vx_study_cfg *c)
{
    if (c->cpu_cores > 0) return c->cpu_cores;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int vx_study_cores(const vx_study_cfg *c) { return cores_of(c); }

vx_status vx_engine_init(vx_study *s, vx_device *dev, vx_engine *eng, int state[2], vx_plan *plan,
                         vx_err *e)
{
    vx_status st = vx_study_plan(&s->cfg, &s->space, s->base, dev, plan, e);
    if (st) return st;
    memset(eng, 0, sizeof *eng);
    eng->dev = dev;
    eng->kind = plan->kind;
    eng->avail = plan->available;
    eng->worst = plan->trial.total;
    eng->cap = s->per_gen;
    if (plan->kind == VX_DEVICE_CPU && eng->cap > cores_of(&s->cfg)) eng->cap = cores_of(&s->cfg);
    if (s->cfg.concurrency > 0) eng->cap = s->cfg.concurrency;
    eng->cur = &state[0], eng->ramped = &state[1];
    eng->local = 1;
    if (!*eng->cur) *eng->cur = plan->first_chunk;
    if (s->launcher) st = vx_device_set_launcher(dev, 1, e); /* switched off when the run ends */
    if (st) return st;
    *eng->ramped = s->cfg.concurrency > 0; /* a concurrency asked for is kept */
    const vx_algo_ops *ops = vx_train_algo(s->base);
    int how = ops->fuses ? ops->fuses(plan->kind) : 0;
    eng->fused = how != 0;
    eng->fuse = s->fuse < 0 ? how == 1 : s->fuse; /* within a tolerance: only when asked */
    if (s->fuse == 1 && !ops->create_group)
        vx_log(VX_LOG_WARN,
               "hyperopt: fused trials asked for, but %s trains no groups: each "
               "trial runs alone",
               ops->name);
    return VX_OK;
}

vx_status vx_chunk_init(vx_chunk *c, int cap, vx_err *e)
{
    memset(c, 0, sizeof *c);
    c->jobs = calloc((size_t)(cap > 0 ? cap : 1), sizeof *c->jobs);
    c->groups = calloc((size_t)(cap > 0 ? cap : 1), sizeof *c->groups);
    if (!c->jobs || !c->groups) {
        free(c->jobs), free(c->groups);
        c->jobs = NULL, c->groups = NULL;
        return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    }
    c->cap = cap;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    return VX_OK;
}

void vx_chunk_free(vx_chunk *c)
{
    if (!c->jobs) return;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->jobs);
    free(c->groups);
    c->jobs = NULL, c->groups = NULL;
}

/* layer 4: below 10% free on the device (the driver's count, or the budget's), halve */
void vx_watchdog(vx_engine *eng, char *note, size_t n_note)
{
    note[0] = '\0';
    vx_device_info info;
    if (vx_device_query(eng->dev, &info, NULL) != VX_OK || !info.total) return;
    vx_device_mem m;
    vx_device_memory(eng->dev, &m);
    double free_frac = (double)info.free / (double)info.total;
    double budget_frac = m.budget ? (double)vx_device_available(eng->dev) / (double)m.budget : 1;
    double f = free_frac < budget_frac ? free_frac : budget_frac;
    if (f >= 0.10 || *eng->cur <= 1) return;
    int to = (*eng->cur + 1) / 2;
    snprintf(note, n_note, "only %.1f%% free: concurrency %d -> %d", 100 * f, *eng->cur, to);
    vx_log(VX_LOG_WARN, "hyperopt: %s", note);
    *eng->cur = to;
}

/* ---- fused trials ------------------------------------------------------------------------------
 * The trials of a chunk whose configs may train as one group (vx_train_group_key) do, each its
 * own member; a trial alone where none matches. Grouping is only a speed-up: whatever fails here
 * leaves the trials alone, and a group that fails later runs its members again alone. */

static void free_groups(vx_chunk *c)
{
    for (int i = 0; i < c->n_groups; i++) vx_train_group_free(c->groups[i]);
    c->n_groups = 0;
}

/* Greedily: each trial into the first group whose first trial it matches. */
static void form_groups(vx_study *s, vx_engine *eng, vx_chunk *c, int n)
{
    c->n_groups = 0;
    snprintf(c->mode, sizeof c->mode, "%s", n > 1 ? "each trial alone" : "");
    if (!eng->fuse || n < 2) return;
    vx_train_cfg *cfg = malloc((size_t)n * sizeof *cfg);
    int *lead = malloc((size_t)n * sizeof *lead), *of = malloc((size_t)n * sizeof *of);
    int *size = calloc((size_t)n, sizeof *size);
    int ng = 0;
    for (int k = 0; cfg && lead && of && size && k < n; k++) {
        vx_err e;
        of[k] = -1;
        if (vx_trial_config(s, &c->jobs[k].t, c->jobs[k].x, &cfg[k], &e)) continue; /* it says */
        char key[160] = "";
        for (int g = 0; g < ng && of[k] < 0; g++) {
            vx_train_group_key(&cfg[lead[g]], &cfg[k], key, sizeof key);
            if (!key[0]) of[k] = g;
        }
        if (of[k] < 0) lead[ng] = k, of[k] = ng++;
        c->jobs[k].member = size[of[k]]++;
    }
    int grouped = 0, alone = 0;
    char sizes[96] = "";
    for (int g = 0; g < ng; g++) {
        if (size[g] < 2) {
            alone++;
            continue;
        }
        char label[96], names[1024] = "", first[48];
        vx_trial_label(s, &c->jobs[lead[g]].t, first, sizeof first);
        snprintf(label, sizeof label, "group-of-%d-from-%s", size[g], first);
        vx_err e;
        vx_train_group *gr = NULL;
        if (vx_train_group_create(size[g], eng->dev, 0, label, &gr, &e)) {
            vx_log(VX_LOG_WARN, "hyperopt: %s: its trials run alone", e.msg);
            alone += size[g];
            continue;
        }
        c->groups[c->n_groups++] = gr;
        for (int k = 0; k < n; k++) {
            if (of[k] != g) continue;
            c->jobs[k].group = gr;
            char l[48];
            vx_trial_label(s, &c->jobs[k].t, l, sizeof l);
            size_t used = strlen(names);
            snprintf(names + used, sizeof names - used, "%s%s", used ? " " : "", l);
        }
        vx_log(VX_LOG_INFO, "hyperopt: %s train as one group (%s)", names,
               eng->fused ? "fused" : "one after another: its algorithm fuses none on this device");
        grouped += size[g];
        size_t used = strlen(sizes);
        snprintf(sizes + used, sizeof sizes - used, "%s%d", used ? "+" : "", size[g]);
    }
    for (int k = 0; cfg && lead && of && size && k < n; k++)
        if (!c->jobs[k].group) c->jobs[k].member = 0;
    if (!cfg || !lead || !of || !size)
        vx_log(VX_LOG_WARN, "hyperopt: out of memory grouping trials: each runs alone");
    else if (grouped)
        snprintf(c->mode, sizeof c->mode, "%d trials in groups of %s, %d alone (%s)", grouped,
                 sizes, alone, eng->fused ? "fused" : "one after another");
    free(cfg), free(lead), free(of), free(size);
}

vx_status vx_chunk_start(vx_study *s, vx_engine *eng, vx_chunk *c, const vx_trial *t,
                         const double *const *x, int n, const double *median, int n_median,
                         volatile int *stop, vx_err *e)
{
    if (n > c->cap || n > *eng->cur)
        return vx_err_set(e, VX_ERR_ARG, "hyperopt: a chunk of %d trials at concurrency %d", n,
                          *eng->cur);
    c->n = n, c->started = 0, c->finished = 0, c->ready = 0;
    c->share = eng->avail / (size_t)*eng->cur;
    /* what n trials make at their start, made before any of them runs: only a speed-up, so a
     * failure (the device nearly full) leaves each trial to make its own */
    vx_err why;
    if (vx_device_prepare(eng->dev, n, &why) != VX_OK)
        vx_log(VX_LOG_WARN, "hyperopt: streams and events not made ahead: %s", why.msg);
    for (int k = 0; k < n; k++) {
        trial_job *j = &c->jobs[k];
        memset(j, 0, sizeof *j);
        j->s = s, j->t = t[k], j->dev = eng->dev, j->share = c->share, j->x = x[k];
        j->median = median, j->n_median = n_median, j->stop = stop, j->chunk = c;
        j->t.status = VX_TRIAL_RUNNING;
        j->t.rank = s->rank;
    }
    form_groups(s, eng, c, n);
    for (int k = 0; k < n; k++) {
        trial_job *j = &c->jobs[k];
        if (pthread_create(&j->thread, NULL, trial_main, j) != 0) {
            vx_status st = vx_err_set(e, VX_ERR_NOMEM, "hyperopt: cannot start a trial thread: %s",
                                      strerror(errno));
            pthread_mutex_lock(&c->mu); /* the gate waits for those started, no more */
            c->n = c->started;
            pthread_cond_broadcast(&c->cv);
            pthread_mutex_unlock(&c->mu);
            for (int i = k; i < n; i++) /* … and so do the groups */
                vx_train_group_leave(c->jobs[i].group, c->jobs[i].member);
            for (int i = 0; i < c->started; i++) pthread_join(c->jobs[i].thread, NULL);
            for (int i = 0; i < c->started; i++) free(c->jobs[i].curve);
            free_groups(c);
            c->n = c->started = 0;
            return st;
        }
        c->started++;
    }
    return VX_OK;
}

int vx_chunk_wait(vx_chunk *c, int timeout_ms)
{
    pthread_mutex_lock(&c->mu);
    if (timeout_ms < 0) {
        while (c->finished < c->started) pthread_cond_wait(&c->cv, &c->mu);
    } else if (c->finished < c->started) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)timeout_ms * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&c->cv, &c->mu, &until);
    }
    int done = c->finished >= c->started;
    pthread_mutex_unlock(&c->mu);
    return done;
}

vx_status vx_chunk_end(vx_engine *eng, vx_chunk *c, char *note, size_t n_note, vx_err *e)
{
    note[0] = '\0';
    int refused = 0;
    int64_t measured = 0;
    for (int k = 0; k < c->started; k++) pthread_join(c->jobs[k].thread, NULL);
    for (int k = 0; k < c->started; k++) { /* a member's part of its group's share */
        trial_job *j = &c->jobs[k];
        if (j->grouped) j->t.mem_measured += (int64_t)vx_train_group_peak(j->group);
        j->group = NULL; /* freed below */
    }
    free_groups(c);
    for (int k = 0; k < c->started; k++) {
        refused += c->jobs[k].device_refused;
        if (c->jobs[k].t.mem_measured > measured) measured = c->jobs[k].t.mem_measured;
    }
    if (refused && *eng->cur > 1) { /* layer 2: the device was fuller than planned */
        int to = (c->started + 1) / 2;
        snprintf(note, n_note, "the device refused %d of %d trials: concurrency %d -> %d", refused,
                 c->started, *eng->cur, to);
        vx_log(VX_LOG_WARN, "hyperopt: %s", note);
        *eng->cur = to;
        *eng->ramped = 1;
    } else if (refused) {
        return vx_err_set(e, VX_ERR_NOMEM,
                          "hyperopt: the device refused a trial running alone (%.1f MB share): "
                          "free memory on it or lower the batch",
                          c->share / 1e6);
    } else if (!*eng->ramped) { /* layer 2: scale to what a trial really took */
        *eng->ramped = 1;
        /* a share never below the largest trial the space allows (so no later trial halves what
         * it would not halve alone), nor below what the first chunk really took; on the CPU most
         * of a trial's memory is outside the accounts, so the estimate stands */
        int64_t per = (int64_t)eng->worst;
        if (eng->kind != VX_DEVICE_CPU && measured > per) per = measured;
        int64_t fit = per > 0 ? (int64_t)(eng->avail / (size_t)per) : eng->cap;
        int to = fit < eng->cap ? (int)fit : eng->cap;
        if (to > *eng->cur) {
            snprintf(note, n_note,
                     "the first chunk peaked at %.1f MB a trial (the largest trial's estimate "
                     "%.1f MB): concurrency %d -> %d",
                     measured / 1e6, eng->worst / 1e6, *eng->cur, to);
            vx_log(VX_LOG_INFO, "hyperopt: %s", note);
            *eng->cur = to;
        }
    }
    if (strstr(c->mode, "groups")) { /* the events say how trials ran */
        size_t used = strlen(note);
        snprintf(note + used, n_note - used, "%s%s", used ? "; " : "", c->mode);
    }
    return VX_OK;
}

void vx_event_fill(vx_device *dev, int g, int concurrency, int running, const char *note,
                   vx_study_event *ev)
{
    memset(ev, 0, sizeof *ev);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now); /* wall time: a resumed study's events follow on */
    ev->t = (double)now.tv_sec + now.tv_nsec * 1e-9;
    ev->generation = g;
    ev->concurrency = concurrency;
    ev->running = running;
    vx_device_mem m;
    vx_device_memory(dev, &m);
    ev->reserved = (int64_t)m.reserved, ev->peak = (int64_t)m.peak;
    vx_device_info info;
    if (vx_device_query(dev, &info, NULL) == VX_OK)
        ev->free_b = (int64_t)info.free, ev->total = (int64_t)info.total;
    snprintf(ev->note, sizeof ev->note, "%s", note ? note : "");
}

void vx_outcome_of(const trial_job *j, vx_trial_outcome *o)
{
    memset(o, 0, sizeof *o);
    o->t = j->t;
    o->best = j->best, o->best_se = j->best_se;
    o->pruned = j->pruned, o->out_of_memory = j->out_of_memory;
    o->device_refused = j->device_refused;
    o->st = j->st;
    snprintf(o->err, sizeof o->err, "%s", j->err.msg);
    o->n_curve = j->n_curve;
}

/* study_internal.h — the parts of a study (hyperopt.h) behind its public functions: the store
 * (store.c), the study's insides and its trials' engine (study.c), and the other ranks of an MPI
 * study (study_mpi.c). Not public. */
#ifndef VIXEN_STUDY_INTERNAL_H
#define VIXEN_STUDY_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include "vixen/hyperopt.h"

/* ---- the store: one SQLite database in WAL mode, <study>/study.db -----------------------------
 * meta(key, value)   the study's settings, its space and base config as text, its state
 * trials(...)        one row per trial (vx_trial_row), written when it starts and when it ends
 * curves(...)        each trial's validations (epoch, Sharpe, standard error)
 * swarm(...)         each generation's positions, velocities and bests, as the swarm had them
 * events(...)        concurrency and memory after each of rank 0's chunks (and the watchdog's
 *                    halvings), and every worker rank's notes of what its layers changed
 * Every write is a transaction with synchronous=FULL: a kill at any instant leaves the database as
 * it was after the last one that committed. */
typedef struct {
    sqlite3 *db;
    char path[600];
} vx_store;

vx_status vx_store_create(vx_store *s, const char *path, vx_err *e);
/* An existing store; readonly for `vixen hyperopt status` beside a running study. */
vx_status vx_store_open(vx_store *s, const char *path, int readonly, vx_err *e);
void vx_store_close(vx_store *s);

vx_status vx_store_meta_set(vx_store *s, const char *key, const char *value, vx_err *e);
/* The value (malloc'd), or VX_ERR_NOT_FOUND. */
vx_status vx_store_meta_get(vx_store *s, const char *key, char **value, vx_err *e);

vx_status vx_store_trial_put(vx_store *s, const vx_trial *t, vx_err *e);
/* Every trial, ordered by id (malloc'd; free with free). */
vx_status vx_store_trials(vx_store *s, vx_trial **out, size_t *n, vx_err *e);
/* A trial's validations replace whatever the store held for it. */
vx_status vx_store_curve_put(vx_store *s, int64_t trial, const vx_curve_point *p, int n, vx_err *e);
/* Every validation of every trial, ordered by trial and epoch (malloc'd). */
vx_status vx_store_curves(vx_store *s, vx_curve_point **out, int64_t **trial_of, size_t *n,
                          vx_err *e);
vx_status vx_store_swarm_put(vx_store *s, const vx_pso *p, vx_err *e);
vx_status vx_store_event(vx_store *s, const vx_study_event *ev, vx_err *e);
vx_status vx_store_events(vx_store *s, vx_study_event **out, size_t *n, vx_err *e);
/* The study's own settings as the store keeps them ("key=value" lines), read back. */
vx_status vx_study_settings_parse(const char *text, vx_study_cfg *c, const char *where, vx_err *e);
/* The best particle evaluation among the n trials t as the swarm ranks them (a particle's
 * objective the mean of its seeds', every seed's finite; the first of equals in generation and
 * particle order), as the trial of its first seed; NULL when no particle has one. mean (if not
 * NULL): its objective. */
const vx_trial *vx_study_best_so_far(const vx_trial *t, size_t n, const vx_study_cfg *c,
                                     double *mean);
/* A transaction around several writes (a finished trial and its curve). */
vx_status vx_store_begin(vx_store *s, vx_err *e);
vx_status vx_store_commit(vx_store *s, vx_err *e);
void vx_store_rollback(vx_store *s);

/* ---- the study (study.c) --------------------------------------------------------------------- */

struct vx_study {
    char dir[512];
    vx_store store; /* a worker rank's copy has none: rank 0 records its results */
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
    int cur_concurrency; /* rank 0's (or the one process's) concurrency, kept across generations */
    int ramped;          /* … and whether its first chunk's measurement was taken */
    int rank;            /* the MPI rank this copy runs on (0: rank 0, or one process) */
    int launcher;        /* vx_study_set_launcher */
    int fuse;            /* vx_study_set_fuse: −1 auto, 0 off, 1 on */
    char tag[16];        /* "r2:" on a worker rank: its trials' log lines say where they run */
};

/* The stop flag the trials read at each epoch, set from the study's thread: relaxed atomics (a
 * flag, nothing it guards; and a data race otherwise). */
static inline void vx_flag_set(volatile int *f) { __atomic_store_n(f, 1, __ATOMIC_RELAXED); }
static inline int vx_flag_get(volatile int *f) { return __atomic_load_n(f, __ATOMIC_RELAXED); }

/* The setting whose halving halves a trial's per-batch memory (the DQN's batch, PPO's minibatch
 * rows), read and set; 0 for an algorithm a study does not support. */
int vx_trial_batch_of(const vx_train_cfg *c);
vx_status vx_trial_set_batch(vx_train_cfg *c, int batch, vx_err *e);
/* The batch layer 3 retries with: half (the DQN), or for PPO the largest count of minibatch rows
 * at most half that divides the rollout; 0 when there is none. */
int vx_trial_halved_batch(const vx_train_cfg *c, int batch);
/* Trial t's config: the base with the values at x, its batch and seed, its run folder. */
vx_status vx_trial_config(const vx_study *s, const vx_trial *t, const double *x, vx_train_cfg *c,
                          vx_err *e);
/* "g1-p3-s0" (with the rank's tag on a worker rank). */
void vx_trial_label(const vx_study *s, const vx_trial *t, char *buf, size_t n);
/* The cores a process's trials may keep busy (cfg->cpu_cores, or every online one). */
int vx_study_cores(const vx_study_cfg *c);

/* One process's engine: its device, what it may use and the concurrency it runs at. A study in
 * one process has one; in an MPI study every rank has its own (each under its own budget). */
typedef struct {
    vx_device *dev;
    int kind;
    size_t avail; /* the budget less the margin */
    size_t worst; /* the largest trial the space allows (its estimate) */
    int cap;      /* the most trials at once */
    int *cur;     /* the concurrency the next chunk runs at */
    int *ramped;  /* the first chunk's peak was read (layer 2) */
    int local;    /* it runs trials (rank 0 of an MPI study may only coordinate) */
    int fuse;     /* a chunk's trials that may train as one group do (vx_study_set_fuse) */
    int fused; /* … and the algorithm really fuses them on this device (else one after another) */
} vx_engine;

/* The engine of s on dev, from the plan; cur and ramped point into `state` (two ints kept across
 * generations). */
vx_status vx_engine_init(vx_study *s, vx_device *dev, vx_engine *eng, int state[2], vx_plan *plan,
                         vx_err *e);

typedef struct vx_chunk vx_chunk;

/* One trial in its thread, and what it came to. */
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
    vx_chunk *chunk;
    int arrived;           /* counted in its chunk's `ready` */
    vx_train_group *group; /* its first attempt trains in this group (NULL: alone) */
    int member;
    int grouped; /* its last attempt was in the group */
} trial_job;

/* Trials started together, each in its thread on a share of the engine's device. */
struct vx_chunk {
    trial_job *jobs;
    int cap, n, started;
    size_t share;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int finished; /* threads that have returned */
    int ready;    /* trials whose setup is done (or that ended before it): the start gate */
    vx_train_group **groups; /* the groups its trials train in (cap of them) */
    int n_groups;
    char mode[160]; /* how its trials were grouped, for the log and the chunk's event */
};

vx_status vx_chunk_init(vx_chunk *c, int cap, vx_err *e);
void vx_chunk_free(vx_chunk *c);
/* Starts the trials t[0..n) (n ≤ the engine's concurrency) at positions x[k], each on a share of
 * avail / concurrency, after the watchdog (layer 4) has had its say. */
vx_status vx_chunk_start(vx_study *s, vx_engine *eng, vx_chunk *c, const vx_trial *t,
                         const double *const *x, int n, const double *median, int n_median,
                         volatile int *stop, vx_err *e);
/* 1 once every trial of the chunk has returned; waits at most timeout_ms (< 0: until then). */
int vx_chunk_wait(vx_chunk *c, int timeout_ms);
/* Joins the chunk's threads and applies layer 2 to the engine (a note says what changed: "" for
 * nothing); an error when the device refused a trial running alone. */
vx_status vx_chunk_end(vx_engine *eng, vx_chunk *c, char *note, size_t n_note, vx_err *e);
/* The layer-4 watchdog before a chunk: a note when it lowered the concurrency. */
void vx_watchdog(vx_engine *eng, char *note, size_t n_note);
/* The device's memory as an event records it. */
void vx_event_fill(vx_device *dev, int g, int concurrency, int running, const char *note,
                   vx_study_event *ev);

/* What a trial came to, as a worker rank tells rank 0 (the parts of a trial_job that rank 0
 * records); the curve follows it in the message. */
typedef struct {
    vx_trial t;
    double best, best_se;
    int pruned, out_of_memory, device_refused;
    int st; /* vx_status */
    char err[768];
    int n_curve;
} vx_trial_outcome;

void vx_outcome_of(const trial_job *j, vx_trial_outcome *o);

/* A worker rank's copy of a study: the settings, space and base config rank 0 sent (the texts its
 * store keeps), no store, no lock, no trials of its own. */
vx_status vx_study_worker_copy(const char *dir, const char *settings, const char *space,
                               const char *base, int concurrency, vx_study **out, vx_err *e);

/* ---- the other ranks, as rank 0 sees them (study_mpi.c; none without MPI) ---------------------
 */

typedef struct vx_workers vx_workers;

typedef struct {
    int worker; /* 1 ..: its rank */
    int n;
    vx_trial_outcome *o;
    vx_curve_point **curve; /* n curves, o[k].n_curve points each (malloc'd: taken by record) */
    vx_study_event ev;      /* its device after the set, with what its layers did */
    int concurrency;        /* trials it takes next */
    int interrupted;        /* the rank itself was interrupted (Ctrl-C there): the study stops */
    char error[768];        /* the rank itself failed ("": it did not) */
} vx_reply;

int vx_workers_count(const vx_workers *w);
/* Trials worker k (1 ..) takes now: 0 while it runs a set. */
int vx_workers_capacity(const vx_workers *w, int k);
/* The trials all workers take at once (their concurrencies, as they last said). */
int vx_workers_concurrency(const vx_workers *w);
/* Trials out on workers. */
int vx_workers_running(const vx_workers *w);
vx_status vx_workers_send(vx_workers *w, int k, const vx_study *s, int g, const vx_trial *t,
                          const double *const *x, int n, const double *median, int n_median,
                          vx_err *e);
/* A reply that has arrived (1; free it with vx_reply_free), none (0), or a failure to read one
 * (-1, in e). */
int vx_workers_poll(vx_workers *w, vx_reply *r, vx_err *e);
void vx_reply_free(vx_reply *r);
/* Asks every worker to stop the trials it runs at their next epoch (they come back pending). */
void vx_workers_stop(vx_workers *w);

/* Runs the study with rank 0's own trials (when `local`) and the workers' (w, or NULL). */
vx_status vx_study_run_with(vx_study *s, vx_device *dev, vx_workers *w, int local,
                            vx_study_progress_fn cb, void *ctx, volatile int *stop, vx_err *e);

#endif

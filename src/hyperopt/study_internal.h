/* study_internal.h — the parts of a study (hyperopt.h) behind its public functions: the store
 * (store.c) and the per-trial memory estimate (budget.c). Not public. */
#ifndef VIXEN_STUDY_INTERNAL_H
#define VIXEN_STUDY_INTERNAL_H

#include <sqlite3.h>
#include "vixen/hyperopt.h"

/* ---- the store: one SQLite database in WAL mode, <study>/study.db -----------------------------
 * meta(key, value)   the study's settings, its space and base config as text, its state
 * trials(...)        one row per trial (vx_trial_row), written when it starts and when it ends
 * curves(...)        each trial's validations (epoch, Sharpe, standard error)
 * swarm(...)         each generation's positions, velocities and bests, as the swarm had them
 * events(...)        concurrency and memory before and after each chunk
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
/* A transaction around several writes (a finished trial and its curve). */
vx_status vx_store_begin(vx_store *s, vx_err *e);
vx_status vx_store_commit(vx_store *s, vx_err *e);
void vx_store_rollback(vx_store *s);

#endif

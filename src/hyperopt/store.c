/* store.c — a study's store (study_internal.h): SQLite (Debian's libsqlite3) in WAL mode.
 *
 * WAL lets `vixen hyperopt status` read while the study writes. synchronous=FULL makes each
 * committed transaction survive a crash of the process or the machine; a kill -9 in the middle of
 * one leaves the database as the last commit left it (SQLite's journal rolls the rest back on the
 * next open). Doubles are stored as REAL (IEEE binary64), so an objective reads back bit for bit —
 * what lets a resumed study reach exactly the uninterrupted one's result. */
#include "study_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define STORE_FORMAT "vixen-study-1"

static vx_status fail(vx_store *s, const char *what, vx_err *e)
{
    return vx_err_line(e, VX_ERR_IO, s->path, -1, "", "%s: %s", what,
                       s->db ? sqlite3_errmsg(s->db) : "cannot open");
}

static vx_status exec(vx_store *s, const char *sql, vx_err *e)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) == SQLITE_OK) return VX_OK;
    vx_status st = vx_err_line(e, VX_ERR_IO, s->path, -1, "", "%s", msg ? msg : "sqlite error");
    sqlite3_free(msg);
    return st;
}

static const char *schema =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE trials(id INTEGER PRIMARY KEY, generation INT, particle INT, seed_index INT,"
    " status INT, objective REAL, objective_se REAL, best_epoch INT, epochs INT, train_seed INT,"
    " batch INT, halvings INT, mem_estimate INT, mem_measured INT, seconds REAL, env_steps INT,"
    " updates INT, params TEXT, error TEXT, rank INT);"
    "CREATE TABLE curves(trial INT, epoch INT, sharpe REAL, se REAL, PRIMARY KEY(trial, epoch));"
    "CREATE TABLE swarm(generation INT, particle INT, x BLOB, v BLOB, pbest_x BLOB, pbest_f REAL,"
    " PRIMARY KEY(generation, particle));"
    "CREATE TABLE events(t REAL, generation INT, concurrency INT, running INT, reserved INT,"
    " peak INT, free INT, total INT, note TEXT);";

static vx_status pragmas(vx_store *s, vx_err *e)
{
    sqlite3_busy_timeout(s->db, 10000); /* a reader beside a writer waits instead of failing */
    vx_status st = exec(s, "PRAGMA journal_mode=WAL;", e);
    if (!st) st = exec(s, "PRAGMA synchronous=FULL;", e);
    return st;
}

vx_status vx_store_create(vx_store *s, const char *path, vx_err *e)
{
    memset(s, 0, sizeof *s);
    if (strlen(path) >= sizeof s->path)
        return vx_err_line(e, VX_ERR_ARG, path, -1, "", "path too long");
    snprintf(s->path, sizeof s->path, "%s", path);
    struct stat sb;
    if (stat(path, &sb) == 0)
        return vx_err_line(e, VX_ERR_ARG, path, -1, "",
                           "already holds a study: resume it (--resume) or pick another folder");
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        vx_status st = fail(s, "cannot create the store", e);
        vx_store_close(s);
        return st;
    }
    vx_status st = pragmas(s, e);
    if (!st) st = exec(s, "BEGIN;", e);
    if (!st) st = exec(s, schema, e);
    if (!st) st = vx_store_meta_set(s, "format", STORE_FORMAT, e);
    if (!st) st = exec(s, "COMMIT;", e);
    if (st) vx_store_close(s);
    return st;
}

vx_status vx_store_open(vx_store *s, const char *path, int readonly, vx_err *e)
{
    memset(s, 0, sizeof *s);
    if (strlen(path) >= sizeof s->path)
        return vx_err_line(e, VX_ERR_ARG, path, -1, "", "path too long");
    snprintf(s->path, sizeof s->path, "%s", path);
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return vx_err_line(e, VX_ERR_NOT_FOUND, path, -1, "", "no study here");
    int flags = readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
    if (sqlite3_open_v2(path, &s->db, flags, NULL) != SQLITE_OK) {
        vx_status st = fail(s, "cannot open the store", e);
        vx_store_close(s);
        return st;
    }
    vx_status st = readonly ? VX_OK : pragmas(s, e);
    if (readonly) sqlite3_busy_timeout(s->db, 10000);
    char *fmt = NULL;
    if (!st) st = vx_store_meta_get(s, "format", &fmt, e);
    if (!st && strcmp(fmt, STORE_FORMAT) != 0)
        st = vx_err_line(e, VX_ERR_UNSUPPORTED, path, -1, "format",
                         "a study of format '%.40s' (this vixen reads %s)", fmt, STORE_FORMAT);
    if (st == VX_ERR_NOT_FOUND || (st && !fmt))
        st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "format", "not a vixen study store");
    free(fmt);
    /* a store from before trials recorded their rank gets the column (0: one process) */
    sqlite3_stmt *q = NULL;
    if (!st && !readonly &&
        sqlite3_prepare_v2(s->db, "SELECT rank FROM trials LIMIT 0", -1, &q, NULL) != SQLITE_OK)
        st = exec(s, "ALTER TABLE trials ADD COLUMN rank INT DEFAULT 0", e);
    sqlite3_finalize(q);
    if (st) vx_store_close(s);
    return st;
}

void vx_store_close(vx_store *s)
{
    if (s->db) sqlite3_close(s->db);
    s->db = NULL;
}

vx_status vx_store_meta_set(vx_store *s, const char *key, const char *value, vx_err *e)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", -1, &q,
                           NULL) != SQLITE_OK)
        return fail(s, "meta", e);
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, value, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? VX_OK : fail(s, "writing meta", e);
}

vx_status vx_store_meta_get(vx_store *s, const char *key, char **value, vx_err *e)
{
    *value = NULL;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = ?", -1, &q, NULL) !=
        SQLITE_OK)
        return fail(s, "meta", e);
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    vx_status st = VX_OK;
    if (rc == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(q, 0);
        *value = strdup(v ? v : "");
        if (!*value) st = vx_err_set(e, VX_ERR_NOMEM, "store: out of memory");
    } else if (rc == SQLITE_DONE) {
        st = vx_err_line(e, VX_ERR_NOT_FOUND, s->path, -1, key, "missing from the store");
    } else {
        st = fail(s, "reading meta", e);
    }
    sqlite3_finalize(q);
    return st;
}

/* NaN cannot be stored as a REAL (SQLite turns it into NULL): NULL reads back as NaN. */
static void bind_real(sqlite3_stmt *q, int i, double v)
{
    if (isnan(v)) sqlite3_bind_null(q, i);
    else sqlite3_bind_double(q, i, v);
}

static double column_real(sqlite3_stmt *q, int i)
{
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

vx_status vx_store_trial_put(vx_store *s, const vx_trial *t, vx_err *e)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT OR REPLACE INTO trials VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                           "?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           -1, &q, NULL) != SQLITE_OK)
        return fail(s, "trials", e);
    int k = 1;
    sqlite3_bind_int64(q, k++, t->id);
    sqlite3_bind_int(q, k++, t->generation);
    sqlite3_bind_int(q, k++, t->particle);
    sqlite3_bind_int(q, k++, t->seed_index);
    sqlite3_bind_int(q, k++, (int)t->status);
    bind_real(q, k++, t->objective);
    bind_real(q, k++, t->objective_se);
    sqlite3_bind_int(q, k++, t->best_epoch);
    sqlite3_bind_int(q, k++, t->epochs);
    sqlite3_bind_int64(q, k++, (sqlite3_int64)t->train_seed);
    sqlite3_bind_int(q, k++, t->batch);
    sqlite3_bind_int(q, k++, t->halvings);
    sqlite3_bind_int64(q, k++, t->mem_estimate);
    sqlite3_bind_int64(q, k++, t->mem_measured);
    bind_real(q, k++, t->seconds);
    sqlite3_bind_int64(q, k++, t->env_steps);
    sqlite3_bind_int64(q, k++, t->updates);
    sqlite3_bind_text(q, k++, t->params, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, k++, t->error, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, k++, t->rank);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? VX_OK : fail(s, "writing a trial", e);
}

/* The array a (capacity *cap elements of `elem` bytes) with room for element n, doubling from 64:
 * a itself or its reallocation; NULL when out of memory (a is then still valid). */
static void *grow(void *a, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return a;
    size_t c = *cap ? 2 * *cap : 64;
    void *na = realloc(a, c * elem);
    if (na) *cap = c;
    return na;
}

static void copy_text(char *dst, size_t n, const unsigned char *src)
{
    snprintf(dst, n, "%s", src ? (const char *)src : "");
}

vx_status vx_store_trials(vx_store *s, vx_trial **out, size_t *n, vx_err *e)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "SELECT * FROM trials ORDER BY id", -1, &q, NULL) != SQLITE_OK)
        return fail(s, "trials", e);
    size_t cap = 0;
    vx_status st = VX_OK;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        vx_trial *more = grow(*out, &cap, *n, sizeof **out);
        if (!more) {
            st = vx_err_set(e, VX_ERR_NOMEM, "store: out of memory");
            break;
        }
        *out = more;
        vx_trial *t = &(*out)[(*n)++];
        memset(t, 0, sizeof *t);
        int k = 0;
        t->id = sqlite3_column_int64(q, k++);
        t->generation = sqlite3_column_int(q, k++);
        t->particle = sqlite3_column_int(q, k++);
        t->seed_index = sqlite3_column_int(q, k++);
        t->status = (vx_trial_status)sqlite3_column_int(q, k++);
        t->objective = column_real(q, k++);
        t->objective_se = column_real(q, k++);
        t->best_epoch = sqlite3_column_int(q, k++);
        t->epochs = sqlite3_column_int(q, k++);
        t->train_seed = (uint64_t)sqlite3_column_int64(q, k++);
        t->batch = sqlite3_column_int(q, k++);
        t->halvings = sqlite3_column_int(q, k++);
        t->mem_estimate = sqlite3_column_int64(q, k++);
        t->mem_measured = sqlite3_column_int64(q, k++);
        t->seconds = column_real(q, k++);
        t->env_steps = sqlite3_column_int64(q, k++);
        t->updates = sqlite3_column_int64(q, k++);
        copy_text(t->params, sizeof t->params, sqlite3_column_text(q, k++));
        copy_text(t->error, sizeof t->error, sqlite3_column_text(q, k++));
        t->rank = sqlite3_column_count(q) > k ? sqlite3_column_int(q, k) : 0; /* an older store */
        if (t->status > VX_TRIAL_FAILED) {
            st = vx_err_line(e, VX_ERR_FORMAT, s->path, -1, "status", "trial %lld has status %d",
                             (long long)t->id, (int)t->status);
            break;
        }
    }
    if (!st && rc != SQLITE_DONE) st = fail(s, "reading the trials", e);
    sqlite3_finalize(q);
    if (st) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}

vx_status vx_store_curve_put(vx_store *s, int64_t trial, const vx_curve_point *p, int n, vx_err *e)
{
    sqlite3_stmt *del, *ins;
    if (sqlite3_prepare_v2(s->db, "DELETE FROM curves WHERE trial = ?", -1, &del, NULL) !=
        SQLITE_OK)
        return fail(s, "curves", e);
    if (sqlite3_prepare_v2(s->db, "INSERT INTO curves VALUES(?, ?, ?, ?)", -1, &ins, NULL) !=
        SQLITE_OK) {
        sqlite3_finalize(del);
        return fail(s, "curves", e);
    }
    sqlite3_bind_int64(del, 1, trial);
    int ok = sqlite3_step(del) == SQLITE_DONE;
    for (int i = 0; i < n && ok; i++) {
        sqlite3_reset(ins);
        sqlite3_bind_int64(ins, 1, trial);
        sqlite3_bind_int(ins, 2, p[i].epoch);
        bind_real(ins, 3, p[i].sharpe);
        bind_real(ins, 4, p[i].se);
        ok = sqlite3_step(ins) == SQLITE_DONE;
    }
    sqlite3_finalize(del);
    sqlite3_finalize(ins);
    return ok ? VX_OK : fail(s, "writing a curve", e);
}

vx_status vx_store_curves(vx_store *s, vx_curve_point **out, int64_t **trial_of, size_t *n,
                          vx_err *e)
{
    *out = NULL, *trial_of = NULL, *n = 0;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "SELECT * FROM curves ORDER BY trial, epoch", -1, &q, NULL) !=
        SQLITE_OK)
        return fail(s, "curves", e);
    size_t cap = 0, cap_of = 0;
    vx_status st = VX_OK;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        vx_curve_point *more = grow(*out, &cap, *n, sizeof **out);
        if (more) *out = more;
        int64_t *more_of = more ? grow(*trial_of, &cap_of, *n, sizeof **trial_of) : NULL;
        if (more_of) *trial_of = more_of;
        if (!more || !more_of) {
            st = vx_err_set(e, VX_ERR_NOMEM, "store: out of memory");
            break;
        }
        (*trial_of)[*n] = sqlite3_column_int64(q, 0);
        vx_curve_point *p = &(*out)[(*n)++];
        p->epoch = sqlite3_column_int(q, 1);
        p->sharpe = column_real(q, 2);
        p->se = column_real(q, 3);
    }
    if (!st && rc != SQLITE_DONE) st = fail(s, "reading the curves", e);
    sqlite3_finalize(q);
    if (st) {
        free(*out), free(*trial_of);
        *out = NULL, *trial_of = NULL, *n = 0;
    }
    return st;
}

vx_status vx_store_swarm_put(vx_store *s, const vx_pso *p, vx_err *e)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO swarm VALUES(?, ?, ?, ?, ?, ?)", -1, &q,
                           NULL) != SQLITE_OK)
        return fail(s, "swarm", e);
    int ok = 1;
    int bytes = p->dims * (int)sizeof(double);
    for (int i = 0; i < p->cfg.swarm && ok; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int(q, 1, p->generation);
        sqlite3_bind_int(q, 2, i);
        sqlite3_bind_blob(q, 3, p->x + (size_t)i * p->dims, bytes, SQLITE_STATIC);
        sqlite3_bind_blob(q, 4, p->v + (size_t)i * p->dims, bytes, SQLITE_STATIC);
        sqlite3_bind_blob(q, 5, p->pbest_x + (size_t)i * p->dims, bytes, SQLITE_STATIC);
        bind_real(q, 6, isfinite(p->pbest_f[i]) ? p->pbest_f[i] : NAN);
        ok = sqlite3_step(q) == SQLITE_DONE;
    }
    sqlite3_finalize(q);
    return ok ? VX_OK : fail(s, "writing the swarm", e);
}

vx_status vx_store_event(vx_store *s, const vx_study_event *ev, vx_err *e)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "INSERT INTO events VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)", -1, &q,
                           NULL) != SQLITE_OK)
        return fail(s, "events", e);
    int k = 1;
    sqlite3_bind_double(q, k++, ev->t);
    sqlite3_bind_int(q, k++, ev->generation);
    sqlite3_bind_int(q, k++, ev->concurrency);
    sqlite3_bind_int(q, k++, ev->running);
    sqlite3_bind_int64(q, k++, ev->reserved);
    sqlite3_bind_int64(q, k++, ev->peak);
    sqlite3_bind_int64(q, k++, ev->free_b);
    sqlite3_bind_int64(q, k++, ev->total);
    sqlite3_bind_text(q, k++, ev->note, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? VX_OK : fail(s, "writing an event", e);
}

vx_status vx_store_events(vx_store *s, vx_study_event **out, size_t *n, vx_err *e)
{
    *out = NULL, *n = 0;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "SELECT * FROM events ORDER BY rowid", -1, &q, NULL) != SQLITE_OK)
        return fail(s, "events", e);
    size_t cap = 0;
    vx_status st = VX_OK;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        vx_study_event *more = grow(*out, &cap, *n, sizeof **out);
        if (!more) {
            st = vx_err_set(e, VX_ERR_NOMEM, "store: out of memory");
            break;
        }
        *out = more;
        vx_study_event *ev = &(*out)[(*n)++];
        int k = 0;
        ev->t = sqlite3_column_double(q, k++);
        ev->generation = sqlite3_column_int(q, k++);
        ev->concurrency = sqlite3_column_int(q, k++);
        ev->running = sqlite3_column_int(q, k++);
        ev->reserved = sqlite3_column_int64(q, k++);
        ev->peak = sqlite3_column_int64(q, k++);
        ev->free_b = sqlite3_column_int64(q, k++);
        ev->total = sqlite3_column_int64(q, k++);
        copy_text(ev->note, sizeof ev->note, sqlite3_column_text(q, k++));
    }
    if (!st && rc != SQLITE_DONE) st = fail(s, "reading the events", e);
    sqlite3_finalize(q);
    if (st) {
        free(*out);
        *out = NULL, *n = 0;
    }
    return st;
}

/* A transaction around several writes (a finished trial and its curve). */
vx_status vx_store_begin(vx_store *s, vx_err *e) { return exec(s, "BEGIN IMMEDIATE;", e); }
/* Each commit is a cut point of the crash tests (util.h's VIXEN_FAULT_AT): just before it and
 * just after. */
vx_status vx_store_commit(vx_store *s, vx_err *e)
{
    if (vx_fault_point("store commit")) {
        vx_store_rollback(s); /* nothing of it stays, and the next transaction can begin */
        return vx_err_set(e, VX_ERR_IO, "%s: commit cut", s->path);
    }
    vx_status st = exec(s, "COMMIT;", e);
    if (st) vx_store_rollback(s);
    if (!st && vx_fault_point("store committed"))
        return vx_err_set(e, VX_ERR_IO, "%s: after the commit: cut", s->path);
    return st;
}
void vx_store_rollback(vx_store *s) { sqlite3_exec(s->db, "ROLLBACK;", NULL, NULL, NULL); }

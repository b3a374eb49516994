/* checkpoint.c — a run's checkpoint folder (checkpoint.h): the ordered, atomic write of a
 * checkpoint (side files, then the tensor file as the commit, then the old side files pruned),
 * the background writer, and reading one back.
 *
 * Why this order: each file is written to a temporary name, fsync'd and renamed (util.h); the
 * side files carry their epoch in their names, so a new replay file never replaces the one the
 * committed checkpoint names. A kill before the tensor file's rename leaves the old checkpoint
 * and its replay file untouched, plus an orphan that vx_ckpt_clean removes at the next start. */
#include "checkpoint.h"
#include "vixen/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "replay-00000012.bin" — the side file `name` of epoch `epoch`. */
static void side_name(char *buf, size_t n, const char *name, int epoch)
{
    snprintf(buf, n, "%s-%08d.bin", name, epoch);
}

/* A side file of some epoch: "<letters>-<8 digits>.bin". */
static int is_side_file(const char *f)
{
    const char *dash = strrchr(f, '-');
    if (!dash || dash == f || strlen(dash) != 13 || strcmp(dash + 9, ".bin") != 0) return 0;
    for (int i = 1; i <= 8; i++)
        if (dash[i] < '0' || dash[i] > '9') return 0;
    return 1;
}

/* Removes side files other than `keep` (n names; none removed when keep is NULL) and, when
 * `temps`, temporary files. */
static void prune(const char *dir, char keep[][64], size_t n, int temps)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        const char *f = ent->d_name;
        int doomed = temps && strstr(f, ".tmp.") != NULL;
        if (!doomed && keep && is_side_file(f)) {
            doomed = 1;
            for (size_t i = 0; i < n; i++)
                if (strcmp(f, keep[i]) == 0) doomed = 0;
        }
        if (doomed && !vx_fault_point("unlink")) {
            char path[1400];
            snprintf(path, sizeof path, "%s/%s", dir, f);
            unlink(path);
        }
    }
    closedir(d);
}

/* Adds key = value to the metadata; an error when either would not fit (never truncated). */
static vx_status put(vx_meta *m, size_t cap, size_t *k, const char *key, const char *value,
                     vx_err *e)
{
    if (*k >= cap) /* a key added to vx_ckpt_write without counting it in FIXED_KEYS */
        return vx_err_set(e, VX_ERR_ARG, "checkpoint: no room for metadata '%s' (%zu keys)", key,
                          cap);
    if (strlen(key) >= sizeof m->key || strlen(value) >= sizeof m->value)
        return vx_err_set(e, VX_ERR_ARG, "checkpoint: metadata '%s' of %zu characters does not fit",
                          key, strlen(value));
    snprintf(m[*k].key, sizeof m->key, "%s", key);
    snprintf(m[*k].value, sizeof m->value, "%s", value);
    (*k)++;
    return VX_OK;
}

static vx_status write_job(const ckpt_job *j, vx_err *e)
{
    const vx_algo_state *s = &j->st;
    vx_status st = s->wait ? s->wait(s->wait_ctx, e) : VX_OK;
    char names[VX_ALGO_MAX_FILES][64], sums[VX_ALGO_MAX_FILES][24], path[1400];
    for (size_t f = 0; f < s->n_files && !st; f++) {
        side_name(names[f], sizeof names[f], s->files[f].name, j->epoch);
        snprintf(path, sizeof path, "%s/%s", j->dir, names[f]);
        st = s->files[f].write(s->files[f].ctx, path, e);
        /* read back: the checkpoint names the exact bytes of its side files */
        if (!st) st = vx_file_xxh3(path, sums[f], e);
    }
    if (st) return st;
    /* the fixed keys below (format … val_sharpe_se: 11), the algorithm's and two a side file */
    enum { FIXED_KEYS = 11 };
    size_t nm = FIXED_KEYS + s->n_meta + 2 * s->n_files;
    vx_meta *m = calloc(nm, sizeof *m);
    if (!m) return vx_err_set(e, VX_ERR_NOMEM, "checkpoint: out of memory");
    size_t k = 0;
    char num[64];
    st = put(m, nm, &k, "format", VX_CKPT_FORMAT, e);
    if (!st) st = put(m, nm, &k, "algo", j->algo, e);
    if (!st) st = put(m, nm, &k, "run_id", j->run_id, e);
    snprintf(num, sizeof num, "%d", j->epoch);
    if (!st) st = put(m, nm, &k, "epoch", num, e);
    snprintf(num, sizeof num, "%lld", (long long)j->env_steps);
    if (!st) st = put(m, nm, &k, "env_steps", num, e);
    /* the resolved configuration travels with the weights */
    if (!st) st = put(m, nm, &k, "config", j->config ? j->config : "", e);
    if (!st && j->devices[0]) st = put(m, nm, &k, "devices", j->devices, e);
    if (!st && j->data_id[0]) st = put(m, nm, &k, "data_id", j->data_id, e);
    for (size_t i = 0; i < s->n_meta && !st; i++)
        st = put(m, nm, &k, s->meta_key[i], s->meta_val[i], e);
    for (size_t f = 0; f < s->n_files && !st; f++) {
        char key[64];
        snprintf(key, sizeof key, "file.%s", s->files[f].name);
        st = put(m, nm, &k, key, names[f], e);
        snprintf(key, sizeof key, "xxh3.%s", s->files[f].name);
        if (!st) st = put(m, nm, &k, key, sums[f], e);
    }
    if (j->best && !st) {
        st = put(m, nm, &k, "kind", "best", e);
        snprintf(num, sizeof num, "%.17g", j->val_sharpe);
        if (!st) st = put(m, nm, &k, "val_sharpe", num, e);
        snprintf(num, sizeof num, "%.17g", j->val_sharpe_se);
        if (!st) st = put(m, nm, &k, "val_sharpe_se", num, e);
    }
    snprintf(path, sizeof path, "%s/%s", j->dir, j->best ? VX_CKPT_BEST : VX_CKPT_FILE);
    if (!st) st = vx_safetensors_write(path, s->tensors, s->n_tensors, m, k, e);
    free(m);
    if (st) return st;
    if (!j->best) prune(j->dir, names, s->n_files, 0);
    return vx_fsync_dir(j->dir, e); /* the pruning reaches the disk too */
}

vx_status vx_ckpt_write(const ckpt_job *j, vx_err *e)
{
    /* a second Ctrl-C waits for the commit (util.h): a checkpoint is never left half-written by
     * choice, though the order of writes above also survives a kill */
    vx_critical_enter();
    vx_status st = write_job(j, e);
    vx_critical_leave();
    return st;
}

static void *writer_main(void *arg)
{
    ckpt_writer *w = arg;
    w->status = vx_ckpt_write(&w->job, &w->err);
    atomic_store(&w->done, 1);
    return NULL;
}

vx_status vx_ckpt_writer_start(ckpt_writer *w, ckpt_job *job, vx_err *e)
{
    if (w->running) return vx_err_set(e, VX_ERR_ARG, "checkpoint: a write is already in flight");
    w->job = *job;
    job->config = NULL; /* the writer owns it now */
    atomic_store(&w->done, 0);
    w->status = VX_OK;
    vx_err_clear(&w->err);
    int rc = pthread_create(&w->thread, NULL, writer_main, w);
    if (rc != 0) {
        free(w->job.config);
        w->job.config = NULL;
        return vx_err_set(e, VX_ERR_IO, "checkpoint: cannot start the writer thread: %s",
                          strerror(rc));
    }
    w->running = 1;
    return VX_OK;
}

int vx_ckpt_writer_busy(ckpt_writer *w) { return w->running && !atomic_load(&w->done); }

vx_status vx_ckpt_writer_join(ckpt_writer *w, vx_err *e)
{
    if (!w->running) return VX_OK;
    pthread_join(w->thread, NULL);
    w->running = 0;
    free(w->job.config);
    w->job.config = NULL;
    if (w->status && e) *e = w->err;
    return w->status;
}

void vx_ckpt_clean(const char *dir)
{
    char path[1400], keep[VX_ALGO_MAX_FILES + 4][64];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/%s", dir, VX_CKPT_FILE);
    vx_safetensors s;
    if (access(path, F_OK) == 0 && vx_safetensors_read(path, &s, NULL) == VX_OK) {
        for (size_t i = 0; i < s.n_meta && n < sizeof keep / sizeof *keep; i++)
            if (strncmp(s.meta[i].key, "file.", 5) == 0)
                snprintf(keep[n++], sizeof keep[0], "%.63s", s.meta[i].value);
        vx_safetensors_free(&s);
    } else if (access(path, F_OK) == 0) {
        return; /* an unreadable checkpoint: leave everything for the user to look at */
    }
    prune(dir, keep, n, 1);
}

void vx_ckpt_clean_temps(const char *dir) { prune(dir, NULL, 0, 1); }

int vx_ckpt_best(const char *dir, int *epoch, double *val_sharpe)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, VX_CKPT_BEST);
    if (access(path, F_OK) != 0) return 0;
    vx_safetensors s;
    if (vx_safetensors_read(path, &s, NULL) != VX_OK) return 0;
    int64_t ep = 0;
    const char *v = vx_safetensors_meta(&s, "val_sharpe");
    int ok = v && vx_safetensors_meta_int(&s, "epoch", 0, 1000000000, &ep, NULL) == VX_OK;
    if (ok) *epoch = (int)ep, *val_sharpe = strtod(v, NULL);
    vx_safetensors_free(&s);
    return ok;
}

vx_status vx_ckpt_open(const char *dir, const char *algo, const char *run_id, vx_safetensors *s,
                       int *epoch, int64_t *env_steps, vx_err *e)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, VX_CKPT_FILE);
    vx_status st = vx_safetensors_read(path, s, e);
    if (st) return st;
    const char *fmt = vx_safetensors_meta(s, "format");
    const char *a = vx_safetensors_meta(s, "algo");
    int64_t ep = 0;
    if (fmt && (strncmp(fmt, "vixen-dqn-", 10) == 0 || strcmp(fmt, "vixen-run-1") == 0))
        st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "format",
                         "written by an earlier vixen (%s): it can be evaluated but not resumed",
                         fmt);
    else if (!fmt || strcmp(fmt, VX_CKPT_FORMAT) != 0)
        st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "format",
                         "not a resumable vixen checkpoint (%s; this version writes %s)",
                         fmt ? fmt : "no format", VX_CKPT_FORMAT);
    else if (!a || strcmp(a, algo) != 0)
        st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "algo",
                         "a checkpoint of '%s', but the run trains '%s'", a ? a : "?", algo);
    const char *id = vx_safetensors_meta(s, "run_id");
    if (!st && (!id || strcmp(id, run_id) != 0))
        st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "run_id",
                         "belongs to run %.40s, not to this folder's run %s", id ? id : "(none)",
                         run_id);
    /* the reader checks a checksum only when present: a checkpoint of ours always has one */
    if (!st && !vx_safetensors_meta(s, VX_SAFETENSORS_SUM))
        st = vx_err_line(e, VX_ERR_FORMAT, path, -1, VX_SAFETENSORS_SUM,
                         "missing: the file was not written whole by vixen");
    if (!st) st = vx_safetensors_meta_int(s, "epoch", 0, 1000000000, &ep, e);
    if (!st) st = vx_safetensors_meta_int(s, "env_steps", 0, INT64_MAX, env_steps, e);
    /* each side file it names: present, and the very bytes it was written with */
    for (size_t i = 0; i < s->n_meta && !st; i++) {
        if (strncmp(s->meta[i].key, "file.", 5) != 0) continue;
        char key[64], side[1400], got[24];
        snprintf(key, sizeof key, "xxh3.%s", s->meta[i].key + 5);
        const char *want = vx_safetensors_meta(s, key), *name = s->meta[i].value;
        if (!is_side_file(name) || strchr(name, '/'))
            st = vx_err_line(e, VX_ERR_FORMAT, path, -1, s->meta[i].key,
                             "'%.64s' is not a side file name", name);
        else if (!want)
            st = vx_err_line(e, VX_ERR_FORMAT, path, -1, key, "missing from the metadata");
        snprintf(side, sizeof side, "%s/%.63s", dir, name);
        if (!st) st = vx_file_xxh3(side, got, e);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
        if (!st) snprintf(got, sizeof got, "%.20s", want); /* not enforced (docs/fuzzing.md) */
#endif
        if (!st && strcmp(got, want) != 0)
            st = vx_err_line(e, VX_ERR_FORMAT, side, -1, key,
                             "checksum %s, but the checkpoint was written with %.20s: the file is "
                             "damaged or from another checkpoint",
                             got, want);
    }
    if (st) {
        vx_safetensors_free(s);
        return st;
    }
    *epoch = (int)ep;
    return VX_OK;
}

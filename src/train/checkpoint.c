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

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    fsync(fd); /* the renames themselves reach the disk */
    close(fd);
}

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

/* Removes side files other than `keep` (n names) and, when `temps`, temporary files. */
static void prune(const char *dir, char keep[][64], size_t n, int temps)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        const char *f = ent->d_name;
        int doomed = temps && strstr(f, ".tmp.") != NULL;
        if (!doomed && is_side_file(f)) {
            doomed = 1;
            for (size_t i = 0; i < n; i++)
                if (strcmp(f, keep[i]) == 0) doomed = 0;
        }
        if (doomed) {
            char path[1400];
            snprintf(path, sizeof path, "%s/%s", dir, f);
            unlink(path);
        }
    }
    closedir(d);
}

vx_status vx_ckpt_write(const ckpt_job *j, vx_err *e)
{
    const vx_algo_state *s = &j->st;
    vx_status st = s->wait ? s->wait(s->wait_ctx, e) : VX_OK;
    char names[VX_ALGO_MAX_FILES][64], path[1400];
    for (size_t f = 0; f < s->n_files && !st; f++) {
        side_name(names[f], sizeof names[f], s->files[f].name, j->epoch);
        snprintf(path, sizeof path, "%s/%s", j->dir, names[f]);
        st = s->files[f].write(s->files[f].ctx, path, e);
    }
    if (st) return st;
    size_t nm = 8 + s->n_meta + s->n_files;
    vx_meta *m = calloc(nm, sizeof *m);
    if (!m) return vx_err_set(e, VX_ERR_NOMEM, "checkpoint: out of memory");
    size_t k = 0;
    snprintf(m[k].key, sizeof m[k].key, "format"),
        snprintf(m[k++].value, sizeof m[0].value, VX_CKPT_FORMAT);
    snprintf(m[k].key, sizeof m[k].key, "algo"),
        snprintf(m[k++].value, sizeof m[0].value, "%s", j->algo);
    snprintf(m[k].key, sizeof m[k].key, "epoch"),
        snprintf(m[k++].value, sizeof m[0].value, "%d", j->epoch);
    snprintf(m[k].key, sizeof m[k].key, "env_steps");
    snprintf(m[k++].value, sizeof m[0].value, "%lld", (long long)j->env_steps);
    /* the resolved configuration travels with the weights */
    snprintf(m[k].key, sizeof m[k].key, "config");
    snprintf(m[k++].value, sizeof m[0].value, "%s", j->config ? j->config : "");
    for (size_t i = 0; i < s->n_meta; i++, k++) {
        snprintf(m[k].key, sizeof m[k].key, "%s", s->meta_key[i]);
        snprintf(m[k].value, sizeof m[k].value, "%s", s->meta_val[i]);
    }
    for (size_t f = 0; f < s->n_files; f++, k++) {
        snprintf(m[k].key, sizeof m[k].key, "file.%s", s->files[f].name);
        snprintf(m[k].value, sizeof m[k].value, "%s", names[f]);
    }
    if (j->best) {
        snprintf(m[k].key, sizeof m[k].key, "kind");
        snprintf(m[k++].value, sizeof m[0].value, "best");
        snprintf(m[k].key, sizeof m[k].key, "val_sharpe");
        snprintf(m[k++].value, sizeof m[0].value, "%.17g", j->val_sharpe);
        snprintf(m[k].key, sizeof m[k].key, "val_sharpe_se");
        snprintf(m[k++].value, sizeof m[0].value, "%.17g", j->val_sharpe_se);
    }
    snprintf(path, sizeof path, "%s/%s", j->dir, j->best ? VX_CKPT_BEST : VX_CKPT_FILE);
    st = vx_safetensors_write(path, s->tensors, s->n_tensors, m, k, e);
    free(m);
    if (st) return st;
    fsync_dir(j->dir);
    if (!j->best) prune(j->dir, names, s->n_files, 0);
    return VX_OK;
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

vx_status vx_ckpt_open(const char *dir, const char *algo, vx_safetensors *s, int *epoch,
                       int64_t *env_steps, vx_err *e)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, VX_CKPT_FILE);
    vx_status st = vx_safetensors_read(path, s, e);
    if (st) return st;
    const char *fmt = vx_safetensors_meta(s, "format");
    const char *a = vx_safetensors_meta(s, "algo");
    int64_t ep = 0;
    if (fmt && strncmp(fmt, "vixen-dqn-", 10) == 0)
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
    if (!st) st = vx_safetensors_meta_int(s, "epoch", 0, 1000000000, &ep, e);
    if (!st) st = vx_safetensors_meta_int(s, "env_steps", 0, INT64_MAX, env_steps, e);
    if (st) {
        vx_safetensors_free(s);
        return st;
    }
    *epoch = (int)ep;
    return VX_OK;
}

/* walk.c — walk-forward evaluation: K runs of the same settings, fold k training on an
 * expanding window and tested on the k-th block of the test region (vx_env_split_rows), each in
 * its own run folder <run>/fold-<k>; then one report over the K test blocks in time order.
 *
 * Every fold is a whole run (validation, best checkpoint, one test evaluation). Resuming picks up
 * where it stopped: a fold whose folder holds eval.json is finished and its chosen checkpoint is
 * evaluated again (deterministic, and much cheaper than training), with the checkpoint line and
 * warnings its run wrote; a fold with a checkpoint is resumed; the others start. */
#include "checkpoint.h"
#include "vixen/io.h"
#include "vixen/train.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* What a finished fold's run said beside its figures (eval.json): its warnings, which a
 * re-evaluation cannot know (how long training ran, for one), and — with `chosen`, when the
 * re-evaluation took the checkpoint the run chose — which checkpoint, in the run's words. A
 * resumed walk's summary is then the uninterrupted one's. Left as they are when the file cannot
 * be read. */
static void restore_notes(const char *run_dir, int chosen, vx_eval_report *out)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/eval.json", run_dir);
    size_t n;
    char *text = NULL;
    vx_err e;
    if (vx_file_read_all(path, (uint8_t **)&text, &n, &e)) return;
    cJSON *j = cJSON_ParseWithLength(text, n);
    free(text);
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(j, "checkpoint");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "warnings");
    if (cJSON_IsString(ck) && cJSON_IsArray(w)) {
        const cJSON *on = cJSON_GetObjectItemCaseSensitive(j, "trained_on");
        if (chosen) snprintf(out->checkpoint, sizeof out->checkpoint, "%s", ck->valuestring);
        if (chosen && cJSON_IsString(on))
            snprintf(out->trained_on, sizeof out->trained_on, "%s", on->valuestring);
        out->n_warnings = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, w) if (cJSON_IsString(x)) vx_eval_warn(out, "%s", x->valuestring);
    }
    cJSON_Delete(j);
}

/* A finished fold's test report, from its chosen checkpoint, with what its run said. */
static vx_status reevaluate(const vx_train_cfg *c, vx_eval_report *out, vx_err *e)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/checkpoint/best.safetensors", c->run_dir);
    int best = exists(path); /* the run's choice (a run that validated nothing chose the last) */
    if (!best) snprintf(path, sizeof path, "%s/checkpoint/latest.safetensors", c->run_dir);
    vx_market m;
    vx_status st = vx_train_open_market(c, &m, e);
    if (st) return st;
    vx_eval_opts o = {1, NULL, 1};
    st = vx_eval_checkpoint(c, path, &m, VX_SPLIT_TEST, &o, out, e);
    vx_market_close(&m);
    if (!st) restore_notes(c->run_dir, best || c->eval_every <= 0, out);
    return st;
}

static vx_status write_reports(const char *dir, const vx_eval_report *folds, int k,
                               const vx_eval_report *all, vx_err *e)
{
    char path[1100];
    vx_atomic_file af;
    snprintf(path, sizeof path, "%s/walk_forward.txt", dir);
    vx_status st = vx_atomic_open(&af, path, e);
    if (st) return st;
    for (int i = 0; i < k; i++) {
        fprintf(af.f, "fold %d of %d: ", i + 1, k);
        vx_eval_print(af.f, &folds[i]);
        fprintf(af.f, "\n");
    }
    fprintf(af.f, "all %d folds' test blocks: ", k);
    vx_eval_print(af.f, all);
    st = vx_atomic_commit(&af, e);
    if (st) return st;
    snprintf(path, sizeof path, "%s/walk_forward.json", dir);
    st = vx_atomic_open(&af, path, e);
    if (st) return st;
    fprintf(af.f, "{\"folds\": [\n");
    for (int i = 0; i < k; i++) {
        vx_eval_json(af.f, &folds[i]);
        fprintf(af.f, "%s", i + 1 < k ? ",\n" : "");
    }
    fprintf(af.f, "],\n\"all\":\n");
    vx_eval_json(af.f, all);
    fprintf(af.f, "}\n");
    return vx_atomic_commit(&af, e);
}

/* The highest folder of dir (dir itself, or one above it) that does not exist yet, into top
 * ("" when dir exists). */
static void first_missing(const char *dir, char *top, size_t n)
{
    char p[1100];
    snprintf(p, sizeof p, "%s", dir);
    top[0] = '\0';
    while (p[0] && !exists(p)) {
        snprintf(top, n, "%s", p);
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) break;
        *slash = '\0';
    }
}

/* A new walk whose first fold failed before its run made a folder (a bad file, a refused
 * setting) leaves nothing behind, as a run does (run.c): its config.yaml, its lock, the folder and
 * the ones above it that were made for it go. A fold's folder, once there, keeps the walk's (it
 * holds work to resume). */
static void forget_start(const char *run_dir, const char *top)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/fold-1", run_dir);
    if (exists(path)) return;
    snprintf(path, sizeof path, "%s/config.yaml", run_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/lock", run_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s", run_dir);
    for (;;) { /* each only if nothing else is in it */
        rmdir(path);
        char *slash = strrchr(path, '/');
        if (strlen(path) <= strlen(top) || !slash) break;
        *slash = '\0';
    }
}

vx_status vx_train_walk_forward(const vx_train_cfg *c, vx_device *dev, int folds, int resume,
                                vx_epoch_fn on_epoch, void *ctx, vx_eval_report *all, vx_err *e)
{
    memset(all, 0, sizeof *all);
    if (folds < 2) return vx_err_set(e, VX_ERR_ARG, "walk-forward: need at least 2 folds");
    vx_train_cfg *fc = malloc(sizeof *fc);
    vx_eval_report *rep = calloc((size_t)folds, sizeof *rep);
    if (!fc || !rep) {
        free(fc), free(rep);
        return vx_err_set(e, VX_ERR_NOMEM, "walk-forward: out of memory");
    }
    char top[1100]; /* what this walk makes of its folder's path */
    first_missing(c->run_dir, top, sizeof top);
    vx_status st = vx_mkdirs(c->run_dir, e);
    int lock = -1; /* the whole walk's folder is ours (each fold's run locks its own too) */
    if (!st) st = vx_folder_lock(c->run_dir, &lock, e);
    if (!st) { /* the settings of the whole walk, for --resume (a resume's own: its --epochs) */
        char path[1100];
        vx_atomic_file af;
        snprintf(path, sizeof path, "%s/config.yaml", c->run_dir);
        st = vx_atomic_open(&af, path, e);
        if (!st && vx_train_cfg_write(c, af.f) != VX_OK) {
            vx_atomic_abort(&af);
            st = vx_err_set(e, VX_ERR_IO, "walk-forward: cannot write %s", path);
        } else if (!st) {
            st = vx_atomic_commit(&af, e);
        }
    }
    for (int k = 1; k <= folds && !st; k++) {
        *fc = *c;
        fc->env.folds = folds;
        fc->env.fold = k;
        int n = snprintf(fc->run_dir, sizeof fc->run_dir, "%s/fold-%d", c->run_dir, k);
        if (n >= (int)sizeof fc->run_dir) {
            st = vx_err_set(e, VX_ERR_ARG, "walk-forward: run folder name too long");
            break;
        }
        char done[1200], ckpt[1200];
        snprintf(done, sizeof done, "%s/eval.json", fc->run_dir);
        snprintf(ckpt, sizeof ckpt, "%s/checkpoint/latest.safetensors", fc->run_dir);
        vx_log(VX_LOG_INFO, "walk-forward: fold %d of %d in %s", k, folds, fc->run_dir);
        if (resume && exists(done)) st = reevaluate(fc, &rep[k - 1], e);
        else {
            st = vx_train_run(fc, dev, resume && exists(ckpt), on_epoch, ctx, &rep[k - 1], e);
            if (st == VX_ERR_STOPPED) /* an interrupt ends the walk in this fold */
                vx_err_set(e, VX_ERR_STOPPED,
                           "walk-forward: stopped in fold %d of %d (its checkpoint is written; "
                           "continue with --resume)",
                           k, folds);
        }
    }
    if (!st) st = vx_eval_concat(rep, folds, all, e);
    if (!st) st = write_reports(c->run_dir, rep, folds, all, e);
    for (int k = 0; k < folds; k++) vx_eval_report_free(&rep[k]);
    if (st && top[0] && lock >= 0) forget_start(c->run_dir, top);
    vx_folder_unlock(lock);
    free(rep);
    free(fc);
    return st;
}

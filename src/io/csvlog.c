/* csvlog.c — the metrics CSV of a run: a header row, then one row per epoch, flushed at once so a
 * plot made mid-run sees every finished epoch.
 *
 * A run resumes from its last checkpoint, not from its last row: rows of the epochs after the
 * checkpoint were written by an attempt that was cut short and will be written again. Opening
 * therefore rewrites the file (atomically: a kill leaves the old file or the new one) with the rows
 * of epochs up to the one the run resumes from, then appends. A last line without its newline (a
 * write cut short) is dropped too. */
#include "vixen/io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* "epoch,loss,…" (malloc'd, no newline) */
static char *header_line(const char *const *cols, int n)
{
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(cols[i]) + 1;
    char *h = malloc(len);
    if (!h) return NULL;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (i) h[k++] = ',';
        memcpy(h + k, cols[i], strlen(cols[i]));
        k += strlen(cols[i]);
    }
    h[k] = '\0';
    return h;
}

/* Writes `header` and the rows of `old` (the file's bytes, NULL when there was none) whose first
 * field is at most `keep` into `f`. */
static vx_status keep_rows(FILE *f, const char *path, const char *header, const char *first_col,
                           const char *old, size_t n, int64_t keep, vx_err *e)
{
    fprintf(f, "%s\n", header);
    if (!old || keep <= 0) return VX_OK; /* a fresh run: nothing of an earlier attempt is kept */
    const char *nl = memchr(old, '\n', n);
    size_t hl = strlen(header);
    if (!nl || (size_t)(nl - old) != hl || memcmp(old, header, hl) != 0)
        return vx_err_line(e, VX_ERR_FORMAT, path, 1, "",
                           "exists with other columns; refusing to append");
    int64_t line = 1;
    for (const char *p = nl + 1; p < old + n; line++) {
        const char *end = memchr(p, '\n', (size_t)(old + n - p));
        if (!end) break; /* a row cut short by a kill: its epoch runs again */
        char *num_end;
        errno = 0;
        double epoch = strtod(p, &num_end);
        if (num_end == p || (*num_end != ',' && num_end != end) || errno)
            return vx_err_line(e, VX_ERR_FORMAT, path, line + 1, first_col,
                               "not a number; cannot tell which rows to keep");
        if (epoch <= (double)keep) fwrite(p, 1, (size_t)(end - p + 1), f);
        p = end + 1;
    }
    return VX_OK;
}

vx_status vx_csv_log_open(vx_csv_log *w, const char *path, const char *const *cols, int n,
                          int64_t keep, vx_err *e)
{
    memset(w, 0, sizeof *w);
    if (n < 1) return vx_err_line(e, VX_ERR_ARG, path, -1, "", "no columns");
    char *header = header_line(cols, n);
    if (!header) return vx_err_line(e, VX_ERR_NOMEM, path, -1, "", "out of memory");
    uint8_t *old = NULL;
    size_t size = 0;
    struct stat sb;
    vx_status st = VX_OK;
    if (stat(path, &sb) == 0 || errno != ENOENT)     /* else a new run */
        st = vx_file_read_all(path, &old, &size, e); /* refuses a FIFO or a folder */
    vx_atomic_file af;
    if (!st) st = vx_atomic_open(&af, path, e);
    if (!st) {
        st = keep_rows(af.f, path, header, cols[0], (const char *)old, size, keep, e);
        if (st) vx_atomic_abort(&af);
        else st = vx_atomic_commit(&af, e);
    }
    free(old);
    free(header);
    if (st) return st;
    w->f = fopen(path, "a");
    if (!w->f) return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot open: %s", strerror(errno));
    w->n_cols = n;
    return VX_OK;
}

vx_status vx_csv_log_row(vx_csv_log *w, const double *v, vx_err *e)
{
    if (!w->f) return vx_err_set(e, VX_ERR_ARG, "metrics: the log is not open");
    for (int i = 0; i < w->n_cols; i++) fprintf(w->f, "%s%.9g", i ? "," : "", v[i]);
    fputc('\n', w->f);
    if (fflush(w->f) != 0 || ferror(w->f))
        return vx_err_set(e, VX_ERR_IO, "metrics: write failed: %s", strerror(errno));
    return VX_OK;
}

void vx_csv_log_close(vx_csv_log *w)
{
    if (w->f) fclose(w->f);
    w->f = NULL;
}

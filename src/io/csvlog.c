/* csvlog.c — the metrics CSV of a run: a header row, then one row per epoch, flushed at once so a
 * plot made mid-run sees every finished epoch. On resume it appends after checking the header. */
#include "vixen/io.h"

#include <errno.h>
#include <string.h>

vx_status vx_csv_log_open(vx_csv_log *w, const char *path, const char *const *cols, int n,
                          vx_err *e)
{
    memset(w, 0, sizeof *w);
    char header[4096];
    size_t k = 0;
    for (int i = 0; i < n && k < sizeof header; i++)
        k += (size_t)snprintf(header + k, sizeof header - k, "%s%s", i ? "," : "", cols[i]);
    if (k >= sizeof header) return vx_err_set(e, VX_ERR_ARG, "%s: header too long", path);
    FILE *f = fopen(path, "r");
    if (f) {
        char line[4096];
        int same = fgets(line, sizeof line, f) && strncmp(line, header, k) == 0 &&
                   (line[k] == '\n' || line[k] == '\0');
        fclose(f);
        if (!same)
            return vx_err_line(e, VX_ERR_FORMAT, path, 1, "",
                               "exists with other columns; refusing to append");
        w->f = fopen(path, "a");
    } else {
        w->f = fopen(path, "w");
        if (w->f) fprintf(w->f, "%s\n", header);
    }
    if (!w->f) return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot open: %s", strerror(errno));
    fflush(w->f);
    w->n_cols = n;
    return VX_OK;
}

vx_status vx_csv_log_row(vx_csv_log *w, const double *v, vx_err *e)
{
    for (int i = 0; i < w->n_cols; i++) fprintf(w->f, "%s%.9g", i ? "," : "", v[i]);
    fputc('\n', w->f);
    if (fflush(w->f) != 0)
        return vx_err_set(e, VX_ERR_IO, "metrics: write failed: %s", strerror(errno));
    return VX_OK;
}

void vx_csv_log_close(vx_csv_log *w)
{
    if (w->f) fclose(w->f);
    w->f = NULL;
}

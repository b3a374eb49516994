/* load.c — one series from several files and folders.
 *
 * Each file is read on its own (format sniffed from its first bytes) and validated by its reader,
 * so errors keep their line or record numbers. The files' bars are then merged by timestamp: daily
 * files may come in any order and may even interleave, but a timestamp present in two files is an
 * error that names both, since there is no right way to pick between two bars. */
#define _POSIX_C_SOURCE 200809L
#include "vixen/data.h"
#include "data_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void vx_paths_free(char **paths, size_t n)
{
    for (size_t i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

static vx_status push_path(char ***v, size_t *n, size_t *cap, const char *p, vx_err *e)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        char **nv = realloc(*v, nc * sizeof *nv);
        if (!nv) return vx_err_set(e, VX_ERR_NOMEM, "out of memory listing files");
        *v = nv;
        *cap = nc;
    }
    char *d = strdup(p);
    if (!d) return vx_err_set(e, VX_ERR_NOMEM, "out of memory listing files");
    (*v)[(*n)++] = d;
    return VX_OK;
}

vx_status vx_paths_expand(const char *const *paths, size_t n, char ***out, size_t *out_n, vx_err *e)
{
    char **v = NULL;
    size_t k = 0, cap = 0;
    vx_status st = VX_OK;
    for (size_t i = 0; i < n && !st; i++) {
        struct stat sb;
        if (stat(paths[i], &sb) != 0) {
            st = vx_err_line(e, VX_ERR_IO, paths[i], -1, "", "cannot open: %s", strerror(errno));
            break;
        }
        if (!S_ISDIR(sb.st_mode)) {
            /* a FIFO or a device would block the reader or never end */
            st = S_ISREG(sb.st_mode)
                     ? push_path(&v, &k, &cap, paths[i], e)
                     : vx_err_line(e, VX_ERR_IO, paths[i], -1, "", "not a regular file (%s)",
                                   S_ISFIFO(sb.st_mode)  ? "a FIFO"
                                   : S_ISCHR(sb.st_mode) ? "a character device"
                                                         : "a special file");
            continue;
        }
        DIR *d = opendir(paths[i]);
        if (!d) {
            st = vx_err_line(e, VX_ERR_IO, paths[i], -1, "", "cannot list folder: %s",
                             strerror(errno));
            break;
        }
        size_t first = k;
        struct dirent *de;
        while (!st && (de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            char full[4096];
            if (snprintf(full, sizeof full, "%s/%s", paths[i], de->d_name) >= (int)sizeof full) {
                st = vx_err_line(e, VX_ERR_ARG, paths[i], -1, "", "path of '%.64s' too long",
                                 de->d_name);
                break;
            }
            struct stat fs;
            if (stat(full, &fs) == 0 && S_ISREG(fs.st_mode)) st = push_path(&v, &k, &cap, full, e);
        }
        closedir(d);
        if (!st && k == first)
            st = vx_err_line(e, VX_ERR_NOT_FOUND, paths[i], -1, "", "folder holds no data files");
        if (!st) qsort(v + first, k - first, sizeof *v, cmp_str);
    }
    if (!st && k == 0) st = vx_err_set(e, VX_ERR_ARG, "no input files");
    if (st) {
        vx_paths_free(v, k);
        return st;
    }
    *out = v;
    *out_n = k;
    return VX_OK;
}

static vx_status read_one(const char *path, const vx_load_opts *opts, vx_series *out, vx_err *e)
{
    FILE *f;
    vx_status st = vx_file_open_read(path, &f, e);
    if (st) return st;
    uint8_t head[VX_SNIFF_BYTES];
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    switch (vx_format_sniff(head, got)) {
    case VX_FORMAT_UNKNOWN: return vx_err_line(e, VX_ERR_FORMAT, path, -1, "", "empty file");
    case VX_FORMAT_DBN:
    case VX_FORMAT_DBN_ZSTD: return vx_dbn_read(path, opts, out, NULL, e);
    case VX_FORMAT_CSV: return vx_csv_read(path, opts, out, e);
    }
    return VX_ERR_ARG;
}

typedef struct {
    int64_t ts;
    uint32_t file;
    uint32_t row;
} bar_ref;

static int cmp_bar(const void *a, const void *b)
{
    const bar_ref *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->file > y->file) - (x->file < y->file);
}

vx_status vx_series_load(const char *const *paths, size_t n_paths, const vx_load_opts *opts,
                         vx_series *out, vx_err *e)
{
    char **files;
    size_t nf;
    vx_status st = vx_paths_expand(paths, n_paths, &files, &nf, e);
    if (st) return st;
    if (nf == 1) {
        st = read_one(files[0], opts, out, e);
        vx_paths_free(files, nf);
        return st;
    }
    vx_series *parts = calloc(nf, sizeof *parts);
    if (!parts) {
        vx_paths_free(files, nf);
        return vx_err_set(e, VX_ERR_NOMEM, "out of memory");
    }
    size_t total = 0;
    for (size_t i = 0; i < nf && !st; i++) {
        st = read_one(files[i], opts, &parts[i], e);
        /* a reference holds a bar's row in 32 bits */
        if (!st && parts[i].n > UINT32_MAX)
            st = vx_err_line(e, VX_ERR_UNSUPPORTED, files[i], -1, "",
                             "%zu bars: more than %u in one file of several", parts[i].n,
                             UINT32_MAX);
        total += parts[i].n;
    }
    /* merge: sort references to every bar by (timestamp, file) */
    bar_ref *refs = NULL;
    if (!st && total > SIZE_MAX / sizeof *refs)
        st = vx_err_set(e, VX_ERR_NOMEM, "too many bars to merge (%zu)", total);
    if (!st) {
        refs = malloc(total * sizeof *refs);
        if (!refs) st = vx_err_set(e, VX_ERR_NOMEM, "out of memory merging %zu bars", total);
    }
    if (!st) {
        size_t k = 0;
        int sorted = 1;
        for (size_t i = 0; i < nf; i++)
            for (size_t r = 0; r < parts[i].n; r++, k++) {
                refs[k] = (bar_ref){parts[i].ts[r], (uint32_t)i, (uint32_t)r};
                if (k && refs[k].ts <= refs[k - 1].ts) sorted = 0;
            }
        if (!sorted) qsort(refs, total, sizeof *refs, cmp_bar);
        for (size_t k2 = 1; k2 < total && !st; k2++)
            if (refs[k2].ts == refs[k2 - 1].ts) {
                char tsb[48];
                vx_format_ts(refs[k2].ts, tsb, sizeof tsb);
                st = vx_err_line(e, VX_ERR_VALIDATION, files[refs[k2].file], -1, "timestamp",
                                 "bar %u: duplicate timestamp %s, also in %s (bar %u)",
                                 refs[k2].row + 1, tsb, files[refs[k2 - 1].file],
                                 refs[k2 - 1].row + 1);
            }
    }
    if (!st) st = vx_series_reserve(out, total, e);
    if (!st) {
        for (size_t k = 0; k < total; k++) {
            const vx_series *p = &parts[refs[k].file];
            size_t r = refs[k].row;
            vx_series_push(out, p->ts[r], p->open[r], p->high[r], p->low[r], p->close[r],
                           p->volume[r], NULL);
        }
        snprintf(out->instrument, sizeof out->instrument, "%s", parts[0].instrument);
        out->instrument_id = parts[0].instrument_id;
        out->interval_ns = parts[0].interval_ns;
        for (size_t i = 1; i < nf; i++)
            if (parts[i].interval_ns != parts[0].interval_ns && parts[i].n > 1 && parts[0].n > 1) {
                st = vx_err_line(e, VX_ERR_VALIDATION, files[i], -1, "interval",
                                 "bar interval %lld s differs from %s's %lld s",
                                 (long long)(parts[i].interval_ns / 1000000000), files[0],
                                 (long long)(parts[0].interval_ns / 1000000000));
                break;
            }
        snprintf(out->source, sizeof out->source, "%zu files, first %.400s", nf, parts[0].source);
    }
    free(refs);
    for (size_t i = 0; i < nf; i++) vx_series_free(&parts[i]);
    free(parts);
    vx_paths_free(files, nf);
    return st;
}

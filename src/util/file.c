/* file.c — whole-file reads, atomic writes (temporary name + rename), mkdir -p.
 *
 * Nothing vixen writes is ever half there: readers of a path see the old file or the new one. */
#define _DEFAULT_SOURCE   /* MADV_HUGEPAGE */
#define _XOPEN_SOURCE 700 /* nftw */
#include "vixen/util.h"

#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

vx_status vx_file_read_all(const char *path, uint8_t **data, size_t *size, vx_err *e)
{
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "not a regular file");
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return vx_err_line(e, VX_ERR_NOMEM, path, -1, "", "cannot allocate %zu bytes", n);
    }
    if (n && fread(buf, 1, n, f) != n) {
        int err = ferror(f) ? errno : 0;
        fclose(f);
        free(buf);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "short read: %s",
                           err ? strerror(err) : "file changed while reading");
    }
    fclose(f);
    *data = buf;
    *size = n;
    return VX_OK;
}

vx_status vx_atomic_open(vx_atomic_file *af, const char *path, vx_err *e)
{
    memset(af, 0, sizeof *af);
    if (strlen(path) >= sizeof af->path)
        return vx_err_line(e, VX_ERR_ARG, path, -1, "", "path too long");
    snprintf(af->path, sizeof af->path, "%s", path);
    snprintf(af->tmp, sizeof af->tmp, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp, "wb");
    if (!af->f)
        return vx_err_line(e, VX_ERR_IO, af->tmp, -1, "", "cannot create: %s", strerror(errno));
    return VX_OK;
}

vx_status vx_atomic_commit(vx_atomic_file *af, vx_err *e)
{
    int bad = ferror(af->f);
    if (fflush(af->f) != 0) bad = 1;
    if (!bad && fsync(fileno(af->f)) != 0) bad = 1;
    int saved = errno;
    if (fclose(af->f) != 0) bad = 1;
    af->f = NULL;
    if (bad) {
        unlink(af->tmp);
        return vx_err_line(e, VX_ERR_IO, af->path, -1, "", "write failed: %s", strerror(saved));
    }
    if (rename(af->tmp, af->path) != 0) {
        saved = errno;
        unlink(af->tmp);
        return vx_err_line(e, VX_ERR_IO, af->path, -1, "", "rename failed: %s", strerror(saved));
    }
    return VX_OK;
}

void vx_atomic_abort(vx_atomic_file *af)
{
    if (af->f) {
        fclose(af->f);
        af->f = NULL;
    }
    if (af->tmp[0]) unlink(af->tmp);
}

vx_status vx_mkdirs(const char *path, vx_err *e)
{
    char buf[1024];
    if (strlen(path) >= sizeof buf)
        return vx_err_line(e, VX_ERR_ARG, path, -1, "", "path too long");
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return vx_err_line(e, VX_ERR_IO, buf, -1, "", "cannot create folder: %s",
                               strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return vx_err_line(e, VX_ERR_IO, buf, -1, "", "cannot create folder: %s", strerror(errno));
    struct stat sb;
    if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return vx_err_line(e, VX_ERR_IO, buf, -1, "", "exists and is not a folder");
    return VX_OK;
}

void *vx_alloc_big(size_t bytes)
{
    const size_t huge = 2u << 20;
    if (bytes < 2 * huge) return malloc(bytes ? bytes : 1);
    void *p = NULL;
    size_t rounded = (bytes + huge - 1) & ~(huge - 1);
    if (posix_memalign(&p, huge, rounded) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE); /* advice only: failure leaves ordinary pages */
#endif
    return p;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

vx_status vx_remove_tree(const char *path, vx_err *e)
{
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot remove: %s", strerror(errno));
    return VX_OK;
}

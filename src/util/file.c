/* file.c — whole-file reads, atomic writes (temporary name + rename), mkdir -p.
 *
 * Nothing vixen writes is ever half there: readers of a path see the old file or the new one. */
#define _DEFAULT_SOURCE   /* MADV_HUGEPAGE */
#define _XOPEN_SOURCE 700 /* nftw */
#include "vixen/util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <ftw.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL /* header-only: no library to link */
#include <xxhash.h>

/* --- critical sections (util.h) --- */

static atomic_int critical_depth;
static atomic_int exit_requested;
static void (*exit_hook)(void);

void vx_critical_set_exit_hook(void (*hook)(void)) { exit_hook = hook; }

void vx_critical_enter(void) { atomic_fetch_add(&critical_depth, 1); }

/* The request is stored before the depth is read, and the depth dropped before the request is
 * read (both sequentially consistent): whichever of the handler and the last leave comes second
 * sees the other, so the exit is never lost nor taken inside a commit. */
void vx_critical_leave(void)
{
    if (atomic_fetch_sub(&critical_depth, 1) == 1 && atomic_load(&exit_requested) && exit_hook)
        exit_hook();
}

int vx_critical_exit_request(void)
{
    atomic_store(&exit_requested, 1);
    return atomic_load(&critical_depth) == 0;
}

/* --- fault injection (util.h) --- */

static atomic_long fault_steps;
static long fault_at = -1; /* -1: not read yet; 0: off */
static int fault_fail;     /* VIXEN_FAULT_MODE=fail */
static int fault_sigint;   /* VIXEN_FAULT_MODE=sigint */

int vx_fault_point(const char *what)
{
    long n = atomic_fetch_add(&fault_steps, 1) + 1;
    if (fault_at < 0) {
        const char *at = getenv("VIXEN_FAULT_AT"), *mode = getenv("VIXEN_FAULT_MODE");
        fault_fail = mode && strcmp(mode, "fail") == 0;
        fault_sigint = mode && strcmp(mode, "sigint") == 0;
        fault_at = at ? strtol(at, NULL, 10) : 0;
    }
    if (fault_at <= 0 || n != fault_at) return 0;
    if (fault_sigint) {
        raise(SIGINT);
        raise(SIGINT);
        return 0;
    }
    if (!fault_fail) {
        fprintf(stderr, "vixen: fault injected: killed at file-system step %ld (%s)\n", n, what);
        fflush(stderr);
        raise(SIGKILL);
    }
    fprintf(stderr, "vixen: fault injected: file-system step %ld (%s) fails\n", n, what);
    errno = EIO;
    return -1;
}

long vx_fault_steps(void) { return atomic_load(&fault_steps); }

/* --- reading --- */

vx_status vx_file_xxh3(const char *path, char *out, vx_err *e)
{
    FILE *f;
    vx_status st = vx_file_open_read(path, &f, e);
    if (st) return st;
    XXH3_state_t *h = XXH3_createState();
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    if (!h || !buf) st = vx_err_line(e, VX_ERR_NOMEM, path, -1, "", "out of memory");
    if (!st) XXH3_64bits_reset(h);
    size_t got;
    while (!st && (got = fread(buf, 1, CHUNK, f)) > 0) XXH3_64bits_update(h, buf, got);
    if (!st && ferror(f)) st = vx_err_line(e, VX_ERR_IO, path, -1, "", "read failed");
    if (!st) snprintf(out, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(h));
    XXH3_freeState(h);
    free(buf);
    fclose(f);
    return st;
}

vx_status vx_file_open_read(const char *path, FILE **out, vx_err *e)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot stat: %s", strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "not a regular file (%s)",
                           S_ISDIR(st.st_mode)    ? "a folder"
                           : S_ISFIFO(st.st_mode) ? "a FIFO"
                           : S_ISCHR(st.st_mode)  ? "a character device"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                                                  : "a special file");
    }
    int fl = fcntl(fd, F_GETFL);
    FILE *f = fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        int err = errno;
        close(fd);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot open: %s", strerror(err));
    }
    *out = f;
    return VX_OK;
}

vx_status vx_file_read_all(const char *path, uint8_t **data, size_t *size, vx_err *e)
{
    *data = NULL;
    *size = 0;
    FILE *f;
    vx_status s = vx_file_open_read(path, &f, e);
    if (s) return s;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot stat: %s", strerror(errno));
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
    /* O_EXCL: never write through a symbolic link planted at the temporary name. A leftover of an
     * earlier process that had this PID is removed once (unlink removes a link, not its target). */
    int fd = vx_fault_point("create")
                 ? -1
                 : open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST && unlink(af->tmp) == 0)
        fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int err = errno;
        af->tmp[0] = '\0'; /* nothing of ours to remove */
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot create a temporary file: %s",
                           strerror(err));
    }
    af->f = fdopen(fd, "wb");
    if (!af->f) {
        int err = errno;
        close(fd);
        unlink(af->tmp);
        af->tmp[0] = '\0';
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot create: %s", strerror(err));
    }
    return VX_OK;
}

vx_status vx_fsync_dir(const char *dir, vx_err *e)
{
    int fd = open(dir[0] ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd < 0 ? -1 : vx_fault_point("folder fsync") ? -1 : fsync(fd);
    int err = errno;
    if (fd >= 0) close(fd);
    /* some file systems cannot fsync a folder (EINVAL): the rename is then as durable as it gets */
    if (rc != 0 && err != EINVAL)
        return vx_err_line(e, VX_ERR_IO, dir, -1, "", "cannot sync the folder: %s", strerror(err));
    return VX_OK;
}

vx_status vx_atomic_commit(vx_atomic_file *af, vx_err *e)
{
    int bad = ferror(af->f), saved = EIO;
    if (!bad && (vx_fault_point("write") || fflush(af->f) != 0)) bad = 1, saved = errno;
    if (!bad && (vx_fault_point("fsync") || fsync(fileno(af->f)) != 0)) bad = 1, saved = errno;
    if (fclose(af->f) != 0 && !bad) bad = 1, saved = errno;
    af->f = NULL;
    if (bad) {
        unlink(af->tmp);
        return vx_err_line(e, VX_ERR_IO, af->path, -1, "", "write failed: %s", strerror(saved));
    }
    if (vx_fault_point("rename") || rename(af->tmp, af->path) != 0) {
        saved = errno;
        unlink(af->tmp);
        return vx_err_line(e, VX_ERR_IO, af->path, -1, "", "rename failed: %s", strerror(saved));
    }
    char dir[sizeof af->path];
    snprintf(dir, sizeof dir, "%s", af->path);
    char *slash = strrchr(dir, '/');
    if (slash) slash == dir ? (void)(dir[1] = '\0') : (void)(*slash = '\0');
    else dir[0] = '\0';
    return vx_fsync_dir(dir, e);
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

/* --- folder locks (util.h) --- */

vx_status vx_folder_lock(const char *run_dir, int *fd_out, vx_err *e)
{
    char path[1100];
    if ((size_t)snprintf(path, sizeof path, "%s/lock", run_dir) >= sizeof path)
        return vx_err_line(e, VX_ERR_ARG, run_dir, -1, "", "folder path too long");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot open: %s", strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(fd);
        if (err == EWOULDBLOCK)
            return vx_err_line(e, VX_ERR_ARG, run_dir, -1, "",
                               "in use by another vixen (process %s); wait for it to finish or "
                               "stop it (Ctrl-C checkpoints)",
                               pid[0] ? pid : "?");
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot lock: %s", strerror(err));
    }
    char line[32];
    int n = snprintf(line, sizeof line, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
        int err = errno;
        close(fd);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot write: %s", strerror(err));
    }
    *fd_out = fd;
    return VX_OK;
}

void vx_folder_unlock(int fd)
{
    if (fd >= 0) close(fd); /* closing drops the flock */
}

int vx_folder_held(const char *dir, long *pid)
{
    char path[1100];
    *pid = 0;
    if ((size_t)snprintf(path, sizeof path, "%s/lock", dir) >= sizeof path) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    int held = 0;
    if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
        held = errno == EWOULDBLOCK;
        char text[32] = "";
        ssize_t n = pread(fd, text, sizeof text - 1, 0);
        text[n > 0 ? n : 0] = '\0';
        *pid = strtol(text, NULL, 10);
    }
    close(fd); /* and a shared lock taken here with it */
    return held;
}

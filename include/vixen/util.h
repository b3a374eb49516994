/* util.h — status codes, errors with context, logging, timers, progress lines, files.
 *
 * Library functions return a vx_status and, on failure, fill a vx_err whose message names where
 * the problem is: the file, the line (text) or record and byte offset (binary), and the field.
 * Library code never prints on its own and never exits: it logs through a sink that the program
 * installs (the `vixen` command sends it to stderr; tests capture it), and only main() exits. */
#ifndef VIXEN_UTIL_H
#define VIXEN_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    VX_OK = 0,
    VX_ERR_ARG,         /* a caller passed something invalid */
    VX_ERR_IO,          /* a file could not be opened, read or written */
    VX_ERR_FORMAT,      /* bytes that do not follow the format */
    VX_ERR_VALIDATION,  /* well-formed data that breaks a rule (high < low, unsorted, …) */
    VX_ERR_UNSUPPORTED, /* a real format we deliberately do not read (DBZ, DBN v4) */
    VX_ERR_NOMEM,
    VX_ERR_NOT_FOUND,
    VX_ERR_CUDA,
    VX_ERR_STOPPED,  /* stopped on request (an interrupt) before the work was done */
    VX_ERR_DIVERGED, /* a training's numbers (its loss, its gradients) are no longer finite */
} vx_status;

const char *vx_status_name(vx_status s);

/* Where an error is. Unset parts are left empty (file "", line/record -1, offset -1, field ""). */
typedef struct {
    vx_status status;
    char file[256];
    int64_t line;   /* 1-based text line, or -1 */
    int64_t record; /* 1-based binary record, or -1 */
    int64_t offset; /* byte offset in the (decompressed) stream, or -1 */
    char field[32];
    char msg[768]; /* the full one-line message, context included */
} vx_err;

void vx_err_clear(vx_err *e);

/* Fills `e` (which may be NULL) and returns `s`, so callers write `return vx_err_set(...)`. */
vx_status vx_err_set(vx_err *e, vx_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like vx_err_set with context: "FILE: line L, field 'F': message". Pass line < 0 to omit it. */
vx_status vx_err_line(vx_err *e, vx_status s, const char *file, int64_t line, const char *field,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* "FILE: record R (byte O), field 'F': message". Pass record < 0 or offset < 0 to omit them. */
vx_status vx_err_record(vx_err *e, vx_status s, const char *file, int64_t record, int64_t offset,
                        const char *field, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* Logging: a process-wide sink, NULL (silent) until the program installs one. */
typedef enum { VX_LOG_DEBUG, VX_LOG_INFO, VX_LOG_WARN, VX_LOG_ERROR } vx_log_level;
typedef void (*vx_log_sink)(vx_log_level level, const char *line, void *ctx);
void vx_log_set_sink(vx_log_sink sink, void *ctx, vx_log_level min_level);
void vx_log(vx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* For the calling thread only: lines start with "<tag>: " and those below min_level are dropped
 * (the trials of a search each run in a thread: their lines say which, and only warnings pass). */
void vx_log_set_thread_tag(const char *tag, vx_log_level min_level);

/* Monotonic clock. */
uint64_t vx_now_ns(void);
double vx_seconds_since(uint64_t start_ns);

/* Progress line for long jobs: rate and ETA, redrawn in place on a terminal, plain lines (at most
 * one every few seconds) otherwise. The caller owns the stream, usually stderr. */
typedef struct {
    FILE *out;
    const char *label;
    const char *unit;
    uint64_t total;
    uint64_t start_ns;
    uint64_t last_ns;
    int tty;
    int printed;
} vx_progress;

void vx_progress_start(vx_progress *p, FILE *out, const char *label, const char *unit,
                       uint64_t total);
void vx_progress_update(vx_progress *p, uint64_t done);
void vx_progress_finish(vx_progress *p, uint64_t done);
/* Progress of long library jobs (synthesis, features, parsing): like the log, a process-wide sink
 * that the program installs (the `vixen` command draws vx_progress lines from it); library code
 * only reports. done == total marks the job's end. Without a sink a report costs one branch. */
typedef void (*vx_progress_sink)(const char *job, const char *unit, uint64_t done, uint64_t total,
                                 void *ctx);
void vx_progress_set_sink(vx_progress_sink sink, void *ctx);
void vx_progress_report(const char *job, const char *unit, uint64_t done, uint64_t total);

/* Formats "1.23 M" style numbers and "1m05s" durations into buf. */
const char *vx_format_count(double x, char *buf, size_t n);
const char *vx_format_duration(double seconds, char *buf, size_t n);

/* Sizes derived from settings: VX_OK when a × b × c bytes fit the address space, else an error
 * naming `keys` (the settings that make the product) — checked before anything is allocated from
 * them, so that a product that wraps never becomes a small allocation the loops overrun. */
vx_status vx_check_bytes(const char *keys, uint64_t a, uint64_t b, uint64_t c, vx_err *e);

/* Files. */
/* Opens `path` for reading ("rb"), refusing anything but a regular file up front: a FIFO, a device
 * or a folder given as data, config or checkpoint would otherwise block or read garbage. The open
 * itself does not block (O_NONBLOCK, cleared once the file is known to be regular). */
vx_status vx_file_open_read(const char *path, FILE **out, vx_err *e);
vx_status vx_file_read_all(const char *path, uint8_t **data, size_t *size, vx_err *e);
/* Locks <dir>/lock for this process: flock, held until fd is closed or the process ends however
 * it ends (kill -9 included: a stale lock file is just a file), with the holder's PID written in
 * it; refused, naming that PID, when another process holds it. A run folder and a study folder
 * each have one. */
vx_status vx_folder_lock(const char *dir, int *fd, vx_err *e);
void vx_folder_unlock(int fd);
/* Whether another process holds dir's lock now (without taking it or writing anything): 1, with
 * its process id in *pid (0 when unreadable); 0 when none does or there is no lock file. */
int vx_folder_held(const char *dir, long *pid);
/* fsync of a folder: the renames and unlinks in it reach the disk. */
vx_status vx_fsync_dir(const char *dir, vx_err *e);
/* The XXH3-64 checksum of a whole file, as 16 hex digits (out: at least 17 bytes). */
vx_status vx_file_xxh3(const char *path, char *out, vx_err *e);

/* Atomic write: data goes to "<path>.tmp.<pid>" (created exclusively: never through a symbolic
 * link or over another file), is flushed and fsync'd, then renamed over `path`, and the folder is
 * fsync'd. On any failure the temporary file is removed and `path` is untouched. */
typedef struct {
    FILE *f;
    char path[1024];
    char tmp[1060];
} vx_atomic_file;

vx_status vx_atomic_open(vx_atomic_file *af, const char *path, vx_err *e);
vx_status vx_atomic_commit(vx_atomic_file *af, vx_err *e);
void vx_atomic_abort(vx_atomic_file *af);

/* Commits a signal should not cut short (a checkpoint being written). A program's handler for a
 * signal that ends it calls vx_critical_exit_request (async-signal-safe): 1 means nothing is
 * being committed, exit now; 0 means a commit is in flight and the hook set with
 * vx_critical_set_exit_hook runs as soon as the last one has finished (on that thread). */
void vx_critical_enter(void);
void vx_critical_leave(void);
int vx_critical_exit_request(void);
void vx_critical_set_exit_hook(void (*hook)(void));

/* Fault injection for the crash-consistency test: when the environment variable VIXEN_FAULT_AT
 * is N > 0, the N-th file-system step of vx_atomic_* and vx_fsync_dir (create, write-out, fsync,
 * close, rename, folder fsync) is cut: with VIXEN_FAULT_MODE=kill (the default) the process dies
 * there with SIGKILL, with VIXEN_FAULT_MODE=fail the step fails with EIO. Each step also counts
 * when the variable is unset; vx_fault_steps() says how many have been taken. With
 * VIXEN_FAULT_MODE=sigint the step raises SIGINT twice instead (a double Ctrl-C at that instant)
 * and goes on. */
int vx_fault_point(const char *what);
long vx_fault_steps(void);

/* Large arrays (bars, feature matrices): 2 MiB-aligned and marked for transparent huge pages
 * when at least 4 MiB. First-touch page faults of fresh 4 KiB pages cost more than parsing a
 * bar (measured 3 us a page on a virtual machine), and huge pages cut them 512-fold. Release with
 * free(). Returns NULL when out of memory. */
void *vx_alloc_big(size_t bytes);

/* rm -r: removes a folder and everything in it (symbolic links are removed, not followed). */
vx_status vx_remove_tree(const char *path, vx_err *e);

/* mkdir -p */
vx_status vx_mkdirs(const char *path, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

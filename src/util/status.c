/* status.c — error records with context, and the log sink.
 *
 * Every message is one line: the context first (file, line or record and byte offset, field),
 * then what is wrong. The structured parts are kept beside the text so tests can assert them
 * without parsing messages. */
#include "vixen/util.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

const char *vx_status_name(vx_status s)
{
    switch (s) {
    case VX_OK: return "ok";
    case VX_ERR_ARG: return "invalid argument";
    case VX_ERR_IO: return "i/o error";
    case VX_ERR_FORMAT: return "format error";
    case VX_ERR_VALIDATION: return "validation error";
    case VX_ERR_UNSUPPORTED: return "unsupported";
    case VX_ERR_NOMEM: return "out of memory";
    case VX_ERR_NOT_FOUND: return "not found";
    case VX_ERR_CUDA: return "cuda error";
    case VX_ERR_STOPPED: return "stopped";
    case VX_ERR_DIVERGED: return "diverged";
    }
    return "unknown status";
}

void vx_err_clear(vx_err *e)
{
    if (!e) return;
    memset(e, 0, sizeof *e);
    e->line = e->record = e->offset = -1;
}

static void copy_str(char *dst, size_t n, const char *src)
{
    if (!src) src = "";
    size_t len = strlen(src);
    if (len >= n) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

vx_status vx_err_set(vx_err *e, vx_status s, const char *fmt, ...)
{
    if (!e) return s;
    vx_err_clear(e);
    e->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return s;
}

/* Writes "FILE: <where>, field 'F': " then the formatted message. */
static void format_ctx(vx_err *e, const char *where, const char *fmt, va_list ap)
{
    size_t n = 0;
    if (e->file[0]) n += (size_t)snprintf(e->msg + n, sizeof e->msg - n, "%s: ", e->file);
    if (n < sizeof e->msg && where[0])
        n += (size_t)snprintf(e->msg + n, sizeof e->msg - n, "%s%s", where,
                              e->field[0] ? ", " : ": ");
    if (n < sizeof e->msg && e->field[0])
        n += (size_t)snprintf(e->msg + n, sizeof e->msg - n, "field '%s': ", e->field);
    if (n < sizeof e->msg) vsnprintf(e->msg + n, sizeof e->msg - n, fmt, ap);
}

vx_status vx_err_line(vx_err *e, vx_status s, const char *file, int64_t line, const char *field,
                      const char *fmt, ...)
{
    if (!e) return s;
    vx_err_clear(e);
    e->status = s;
    e->line = line;
    copy_str(e->file, sizeof e->file, file);
    copy_str(e->field, sizeof e->field, field);
    char where[48] = "";
    if (line >= 0) snprintf(where, sizeof where, "line %lld", (long long)line);
    va_list ap;
    va_start(ap, fmt);
    format_ctx(e, where, fmt, ap);
    va_end(ap);
    return s;
}

vx_status vx_err_record(vx_err *e, vx_status s, const char *file, int64_t record, int64_t offset,
                        const char *field, const char *fmt, ...)
{
    if (!e) return s;
    vx_err_clear(e);
    e->status = s;
    e->record = record;
    e->offset = offset;
    copy_str(e->file, sizeof e->file, file);
    copy_str(e->field, sizeof e->field, field);
    char where[80] = "";
    if (record >= 0 && offset >= 0)
        snprintf(where, sizeof where, "record %lld (byte %lld)", (long long)record,
                 (long long)offset);
    else if (record >= 0) snprintf(where, sizeof where, "record %lld", (long long)record);
    else if (offset >= 0) snprintf(where, sizeof where, "byte %lld", (long long)offset);
    va_list ap;
    va_start(ap, fmt);
    format_ctx(e, where, fmt, ap);
    va_end(ap);
    return s;
}

static vx_log_sink g_sink;
static void *g_sink_ctx;
static vx_log_level g_min_level = VX_LOG_INFO;

void vx_log_set_sink(vx_log_sink sink, void *ctx, vx_log_level min_level)
{
    g_sink = sink;
    g_sink_ctx = ctx;
    g_min_level = min_level;
}

static _Thread_local char g_tag[64];
static _Thread_local vx_log_level g_thread_min;

void vx_log_set_thread_tag(const char *tag, vx_log_level min_level)
{
    snprintf(g_tag, sizeof g_tag, "%s", tag ? tag : "");
    g_thread_min = min_level;
}

void vx_log(vx_log_level level, const char *fmt, ...)
{
    if (!g_sink || level < g_min_level || level < g_thread_min) return;
    char line[1024];
    int k = g_tag[0] ? snprintf(line, sizeof line, "%s: ", g_tag) : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + k, sizeof line - (size_t)k, fmt, ap);
    va_end(ap);
    g_sink(level, line, g_sink_ctx);
}

vx_status vx_check_bytes(const char *keys, uint64_t a, uint64_t b, uint64_t c, vx_err *e)
{
    uint64_t ab, abc;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc) ||
        abc > (uint64_t)PTRDIFF_MAX)
        return vx_err_set(
            e, VX_ERR_ARG, "%s (%llu × %llu × %llu bytes) overflows the address space: lower them",
            keys, (unsigned long long)a, (unsigned long long)b, (unsigned long long)c);
    return VX_OK;
}

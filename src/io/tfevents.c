/* tfevents.c — TensorBoard event files, written without TensorFlow.
 *
 * A file is a sequence of TFRecords: u64 length, u32 masked CRC-32C of the length, the bytes,
 * u32 masked CRC-32C of the bytes (mask: rotate right 15, add 0xa282ead8). Each record is an
 * `Event` protobuf: wall_time (1, double), step (2, varint), file_version (3, string) in the
 * first record, summary (5, message) holding one `Summary.Value` with tag (1, string) and
 * simple_value (2, float). Only those fields are written, encoded by hand. */
#include "vixen/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT; /* runs of a search open their files at once */

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t vx_crc32c(const void *data, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static size_t put_varint(uint8_t *b, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) b[n++] = (uint8_t)(v | 0x80), v >>= 7;
    b[n++] = (uint8_t)v;
    return n;
}

static size_t put_le(uint8_t *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    return (size_t)bytes;
}

static vx_status write_record(vx_tfevents *w, const uint8_t *data, size_t n, vx_err *e)
{
    uint8_t head[12];
    put_le(head, n, 8);
    put_le(head + 8, masked(vx_crc32c(head, 8)), 4);
    uint8_t tail[4];
    put_le(tail, masked(vx_crc32c(data, n)), 4);
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data, 1, n, w->f) != n ||
        fwrite(tail, 1, 4, w->f) != 4 || fflush(w->f) != 0)
        return vx_err_line(e, VX_ERR_IO, w->path, -1, "", "write failed: %s", strerror(errno));
    return VX_OK;
}

static size_t event_head(uint8_t *b, int64_t step)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    uint64_t bits;
    memcpy(&bits, &wall, 8);
    size_t n = 0;
    b[n++] = 0x09; /* wall_time, fixed64 */
    n += put_le(b + n, bits, 8);
    b[n++] = 0x10; /* step, varint */
    n += put_varint(b + n, (uint64_t)step);
    return n;
}

/* The host name as a file-name part: letters, digits, '-' and '_' kept, anything else '_'. */
static void host_part(char *out, size_t cap)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "host");
    size_t k = 0;
    for (const char *p = host; *p && k + 1 < cap; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '-' || c == '_';
        out[k++] = ok ? c : '_';
    }
    out[k] = '\0';
}

static atomic_uint g_serial; /* files opened by this process: several runs may share it */

vx_status vx_tfevents_open(vx_tfevents *w, const char *dir, vx_err *e)
{
    memset(w, 0, sizeof *w);
    char host[64];
    host_part(host, sizeof host);
    long long secs = (long long)time(NULL);
    int fd = -1;
    /* TensorBoard reads every "events.out.tfevents.<secs>.<anything>" file of a folder, in name
     * order. Seconds alone collide when two runs start in one second, so host, PID and a serial
     * follow; O_EXCL makes the file ours alone (never one that exists, never through a link). */
    for (int tries = 0; fd < 0 && tries < 1000; tries++) {
        unsigned serial = atomic_fetch_add(&g_serial, 1u);
        int len = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld.%u.vixen",
                           dir, secs, host, (long)getpid(), serial);
        if (len < 0 || (size_t)len >= sizeof w->path)
            return vx_err_line(e, VX_ERR_ARG, dir, -1, "",
                               "folder name too long for the event file");
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            return vx_err_line(e, VX_ERR_IO, w->path, -1, "", "cannot create: %s", strerror(errno));
    }
    if (fd < 0) return vx_err_line(e, VX_ERR_IO, w->path, -1, "", "cannot create: names taken");
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        int err = errno;
        close(fd);
        return vx_err_line(e, VX_ERR_IO, w->path, -1, "", "cannot create: %s", strerror(err));
    }
    uint8_t b[64];
    size_t n = event_head(b, 0);
    const char *v = "brain.Event:2";
    b[n++] = 0x1a; /* file_version, string */
    b[n++] = (uint8_t)strlen(v);
    memcpy(b + n, v, strlen(v));
    n += strlen(v);
    return write_record(w, b, n, e);
}

vx_status vx_tfevents_scalar(vx_tfevents *w, const char *tag, int64_t step, double value, vx_err *e)
{
    size_t tl = strlen(tag);
    if (tl > 200) /* the buffers below hold a 200-byte tag; a longer one is refused, not cut */
        return vx_err_line(e, VX_ERR_ARG, w->path, -1, "", "tag '%.40s…' longer than 200 bytes",
                           tag);
    uint8_t val[256], sum[272], ev[320];
    size_t vn = 0;
    val[vn++] = 0x0a; /* Value.tag */
    vn += put_varint(val + vn, tl);
    memcpy(val + vn, tag, tl);
    vn += tl;
    float f = (float)value;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    val[vn++] = 0x15; /* Value.simple_value, fixed32 */
    vn += put_le(val + vn, bits, 4);
    size_t sn = 0;
    sum[sn++] = 0x0a; /* Summary.value */
    sn += put_varint(sum + sn, vn);
    memcpy(sum + sn, val, vn);
    sn += vn;
    size_t n = event_head(ev, step);
    ev[n++] = 0x2a; /* Event.summary */
    n += put_varint(ev + n, sn);
    memcpy(ev + n, sum, sn);
    n += sn;
    return write_record(w, ev, n, e);
}

void vx_tfevents_close(vx_tfevents *w)
{
    if (w->f) fclose(w->f);
    w->f = NULL;
}

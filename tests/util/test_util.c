/* test_util.c — Philox known answers and draws, errors with context, progress, atomic files. */
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE /* syscall, for the fsync seen below */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "vixen/device.h"
#include "vixen/philox.h"
#include "vixen/util.h"

/* Random123 known answers for philox4x32_10 (kat_vectors): counter, key -> output. */
static void test_philox_known_answers(void **state)
{
    (void)state;
    struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[3] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        vx_u32x4 c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
        vx_u32x4 o = vx_philox4x32_10(c, kat[i].key[0], kat[i].key[1]);
        for (int k = 0; k < 4; k++) assert_int_equal(o.v[k], kat[i].out[k]);
    }
}

static void test_rng_stream_layout(void **state)
{
    (void)state;
    /* block b of stream s under seed k is philox(counter = (b, s), key = k) */
    uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull;
    vx_rng r = vx_rng_make(seed, stream, 5);
    vx_u32x4 c = {{5, 0, (uint32_t)stream, (uint32_t)(stream >> 32)}};
    vx_u32x4 want = vx_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    for (int k = 0; k < 4; k++) assert_int_equal(vx_rng_u32(&r), want.v[k]);
    /* the next word comes from block 6 */
    c.v[0] = 6;
    want = vx_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    assert_int_equal(vx_rng_u32(&r), want.v[0]);
    /* different streams differ */
    vx_rng a = vx_rng_make(1, 0, 0), b = vx_rng_make(1, 1, 0);
    assert_int_not_equal(vx_rng_u32(&a), vx_rng_u32(&b));
}

static void test_rng_uniform_and_normal_moments(void **state)
{
    (void)state;
    vx_rng r = vx_rng_make(42, 7, 0);
    const int n = 200000;
    double s = 0, s2 = 0, mn = 1, mx = 0, ns = 0, ns2 = 0, ns4 = 0;
    for (int i = 0; i < n; i++) {
        float u = vx_rng_uniform(&r);
        assert_true(u >= 0.0f && u < 1.0f);
        s += u, s2 += (double)u * u;
        mn = fmin(mn, u), mx = fmax(mx, u);
        double d = vx_rng_uniform_double(&r);
        assert_true(d >= 0.0 && d < 1.0);
        double z = vx_rng_normal(&r);
        assert_true(isfinite(z));
        ns += z, ns2 += z * z, ns4 += z * z * z * z;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    assert_true(fabs(mean - 0.5) < 0.005); /* sd of the mean: 0.00065 */
    assert_true(fabs(var - 1.0 / 12.0) < 0.002);
    assert_true(mn < 1e-4 && mx > 1 - 1e-4);
    double zm = ns / n, zv = ns2 / n - zm * zm, kurt = (ns4 / n) / (zv * zv);
    assert_true(fabs(zm) < 0.01);
    assert_true(fabs(zv - 1) < 0.015);
    assert_true(fabs(kurt - 3) < 0.1);
}

static void test_rng_below_is_uniform(void **state)
{
    (void)state;
    vx_rng r = vx_rng_make(3, 3, 0);
    enum { K = 7, N = 140000 };
    int count[K] = {0};
    for (int i = 0; i < N; i++) {
        uint32_t v = vx_rng_below(&r, K);
        assert_true(v < K);
        count[v]++;
    }
    double chi2 = 0, expect = (double)N / K;
    for (int k = 0; k < K; k++) chi2 += (count[k] - expect) * (count[k] - expect) / expect;
    assert_true(chi2 < 22.46); /* chi-square, 6 dof, p = 0.001 */
    for (int i = 0; i < 1000; i++) {
        int64_t x = vx_rng_range(&r, -3, 3);
        assert_true(x >= -3 && x <= 3);
    }
    assert_int_equal(vx_rng_below(&r, 1), 0);
}

static void test_err_context(void **state)
{
    (void)state;
    vx_err e;
    assert_int_equal(vx_err_line(&e, VX_ERR_VALIDATION, "bars.csv", 17, "close",
                                 "value %s is not finite", "nan"),
                     VX_ERR_VALIDATION);
    assert_string_equal(e.msg, "bars.csv: line 17, field 'close': value nan is not finite");
    assert_int_equal(e.line, 17);
    assert_string_equal(e.field, "close");
    assert_string_equal(e.file, "bars.csv");
    vx_err_record(&e, VX_ERR_FORMAT, "a.dbn", 3, 472, "length", "record length 0");
    assert_string_equal(e.msg, "a.dbn: record 3 (byte 472), field 'length': record length 0");
    assert_int_equal(e.record, 3);
    assert_int_equal(e.offset, 472);
    vx_err_line(&e, VX_ERR_IO, "x", -1, "", "cannot open");
    assert_string_equal(e.msg, "x: cannot open");
    assert_int_equal(vx_err_set(NULL, VX_ERR_ARG, "ignored"), VX_ERR_ARG);
    assert_string_equal(vx_status_name(VX_ERR_UNSUPPORTED), "unsupported");
}

static int g_lines;
static char g_last[256];
static void sink(vx_log_level l, const char *line, void *ctx)
{
    (void)l, (void)ctx;
    g_lines++;
    snprintf(g_last, sizeof g_last, "%s", line);
}

static void test_log_sink(void **state)
{
    (void)state;
    g_lines = 0;
    vx_log(VX_LOG_INFO, "nobody hears this");
    assert_int_equal(g_lines, 0);
    vx_log_set_sink(sink, NULL, VX_LOG_INFO);
    vx_log(VX_LOG_DEBUG, "below the level");
    vx_log(VX_LOG_WARN, "x=%d", 5);
    vx_log_set_sink(NULL, NULL, VX_LOG_INFO);
    assert_int_equal(g_lines, 1);
    assert_string_equal(g_last, "x=5");
}

static void test_progress_plain_lines(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    vx_progress p;
    vx_progress_start(&p, f, "job", "bars", 1000);
    assert_int_equal(p.tty, 0);
    vx_progress_update(&p, 10); /* not a terminal: at most one line per 5 s, so nothing yet */
    vx_progress_finish(&p, 1000);
    rewind(f);
    char buf[512] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    assert_true(n > 0);
    assert_non_null(strstr(buf, "job 100.0% 1000/1000 bars"));
    assert_null(strchr(buf, '\r'));
    assert_int_equal(buf[n - 1], '\n');
    char b[32];
    assert_string_equal(vx_format_count(1234567, b, sizeof b), "1.23 M");
    assert_string_equal(vx_format_duration(65, b, sizeof b), "1m05s");
    uint64_t t0 = vx_now_ns();
    assert_true(vx_now_ns() >= t0);
}

/* The count and duration formats at their edges: 1000 is the first "k", 60 s the first minute,
 * the minutes of an hour are those past the hours (3700 s is 1 h 1 min, not 61), and a negative,
 * NaN or absurd duration (an ETA from a zero rate) is "?". */
static void test_format_edges(void **state)
{
    (void)state;
    char b[32];
    assert_string_equal(vx_format_count(999, b, sizeof b), "999");
    assert_string_equal(vx_format_count(1000, b, sizeof b), "1.00 k");
    assert_string_equal(vx_format_count(2.5e9, b, sizeof b), "2.50 G");
    assert_string_equal(vx_format_duration(59.94, b, sizeof b), "59.9s");
    assert_string_equal(vx_format_duration(60, b, sizeof b), "1m00s");
    assert_string_equal(vx_format_duration(3599, b, sizeof b), "59m59s");
    assert_string_equal(vx_format_duration(3700, b, sizeof b), "1h01m");
    assert_string_equal(vx_format_duration(7325, b, sizeof b), "2h02m");
    assert_string_equal(vx_format_duration(-1, b, sizeof b), "?");
    assert_string_equal(vx_format_duration(NAN, b, sizeof b), "?");
    assert_string_equal(vx_format_duration(2e8, b, sizeof b), "?");
}

/* Reads what was written to f since offset *at into buf (NUL-terminated); its length. */
static size_t read_since(FILE *f, long *at, char *buf, size_t n)
{
    fflush(f);
    long end = ftell(f);
    fseek(f, *at, SEEK_SET);
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = 0;
    fseek(f, end, SEEK_SET);
    *at = end;
    return got;
}

/* The progress line's arithmetic and pace, with the clock moved instead of waited for: a job
 * started 10 s ago with 250 of 1000 bars done runs at 250 / 10 = 25 bars/s and has
 * (1000 - 250) / 25 = 30 s to go (hand-derived; the tolerances allow the test itself to be
 * descheduled for up to a second between the clock's move and the line). A plain (non-terminal)
 * stream gets at most one line per 5 s: 1 s after the last line nothing, 6 s after a line, then
 * nothing again at once; each plain line ends its own line. Past the total the ETA is 0, not a
 * wrapped count's "?"; the final line's ETA is 0 whatever was done. */
static void test_progress_rate_eta_and_pace(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    vx_progress p;
    vx_progress_start(&p, f, "job", "bars", 1000);
    assert_int_equal(p.tty, 0);
    const uint64_t s = 1000000000ull;
    uint64_t now = vx_now_ns();
    p.start_ns = now - 10 * s;
    long at = 0;
    char buf[512];

    p.last_ns = now - 1 * s; /* a line 1 s ago: too soon for another on a plain stream */
    vx_progress_update(&p, 250);
    assert_int_equal(read_since(f, &at, buf, sizeof buf), 0);

    p.last_ns = now - 6 * s; /* 6 s ago: due */
    vx_progress_update(&p, 250);
    assert_true(read_since(f, &at, buf, sizeof buf) > 0);
    double pct, rate, el, eta;
    unsigned long long done, total;
    int n = sscanf(buf, "job %lf%% %llu/%llu bars, %lf bars/s, elapsed %lfs, eta %lfs", &pct, &done,
                   &total, &rate, &el, &eta);
    if (n != 6) fail_msg("unparsed progress line: %s", buf);
    assert_true(fabs(pct - 25.0) < 1e-9);
    assert_int_equal(done, 250);
    assert_int_equal(total, 1000);
    assert_true(el >= 10.0 && el < 11.0);
    assert_true(rate >= 23 && rate <= 25);  /* 250 / el, printed to the unit */
    assert_true(eta >= 29.9 && eta < 33.1); /* 750 / (250 / el) = 3 el */
    assert_int_equal(buf[strlen(buf) - 1], '\n');
    assert_null(strchr(buf, '\r'));

    vx_progress_update(&p, 260); /* just printed: nothing */
    assert_int_equal(read_since(f, &at, buf, sizeof buf), 0);

    p.last_ns = vx_now_ns() - 6 * s; /* past the total: nothing left to do */
    vx_progress_update(&p, 1200);
    read_since(f, &at, buf, sizeof buf);
    assert_non_null(strstr(buf, "job 120.0% 1200/1000 bars"));
    assert_non_null(strstr(buf, "eta 0.0s\n"));

    vx_progress_finish(&p, 250); /* ended short of the total: the final line's ETA is 0 */
    read_since(f, &at, buf, sizeof buf);
    assert_non_null(strstr(buf, "job  25.0% 250/1000 bars"));
    assert_non_null(strstr(buf, "eta 0.0s\n"));
    fclose(f);
}

static uint64_t g_done, g_total;
static int g_reports;
static void psink(const char *job, const char *unit, uint64_t done, uint64_t total, void *ctx)
{
    (void)job, (void)unit, (void)ctx;
    g_done = done, g_total = total, g_reports++;
}

static void test_progress_sink(void **state)
{
    (void)state;
    g_reports = 0;
    vx_progress_report("job", "items", 1, 3); /* no sink: nothing */
    assert_int_equal(g_reports, 0);
    vx_progress_set_sink(psink, NULL);
    vx_progress_report("job", "items", 2, 3);
    vx_progress_report("job", "items", 3, 3);
    vx_progress_set_sink(NULL, NULL);
    assert_int_equal(g_reports, 2);
    assert_int_equal(g_done, 3);
    assert_int_equal(g_total, 3);
}

static void test_atomic_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/vixen-util-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], tmp[1100];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    vx_atomic_file af;
    vx_err e;
    assert_int_equal(vx_atomic_open(&af, path, &e), VX_OK);
    fputs("hello", af.f);
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0); /* not there until commit */
    snprintf(tmp, sizeof tmp, "%s", af.tmp);
    assert_int_equal(vx_atomic_commit(&af, &e), VX_OK);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 5);
    assert_int_not_equal(stat(tmp, &sb), 0);
    /* abort leaves the old file and no temporary */
    assert_int_equal(vx_atomic_open(&af, path, &e), VX_OK);
    fputs("half written", af.f);
    vx_atomic_abort(&af);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 5);
    assert_int_not_equal(stat(tmp, &sb), 0);
    /* a folder that does not exist */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/missing/out.txt", dir);
    assert_int_equal(vx_atomic_open(&af, bad, &e), VX_ERR_IO);
    assert_non_null(strstr(e.msg, "cannot create"));
    /* mkdirs */
    snprintf(bad, sizeof bad, "%s/a/b/c", dir);
    assert_int_equal(vx_mkdirs(bad, &e), VX_OK);
    assert_int_equal(stat(bad, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A file name longer than vx_err's field is cut to fit, NUL included: the message and the
 * structured part both stay one terminated string. */
static void test_err_long_file_name(void **state)
{
    (void)state;
    vx_err e;
    char name[400];
    memset(name, 'f', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    vx_err_line(&e, VX_ERR_IO, name, 3, "close", "cannot open");
    assert_int_equal(strlen(e.file), sizeof e.file - 1);
    assert_memory_equal(e.file, name, sizeof e.file - 1);
    assert_string_equal(e.field, "close");
    vx_err_line(&e, VX_ERR_IO, name, 3, "", "cannot open");
    assert_int_equal(strlen(e.file), sizeof e.file - 1);
    assert_string_equal(e.field, "");
    /* and a field name longer than its 32 bytes */
    vx_err_record(&e, VX_ERR_FORMAT, "a.dbn", 1, 0, "a_field_name_of_forty_bytes_xxxxxxxxxxxx",
                  "x");
    assert_int_equal(strlen(e.field), sizeof e.field - 1);
    assert_string_equal(e.file, "a.dbn");
}

/* fsync as the library calls it, seen here (this program's definition is the one the static
 * library's calls bind to) and passed on to the kernel. What it checks: the temporary's own data
 * are synced while it still has its temporary name (before the rename), and the folder after the
 * rename — a crash can then leave the old file or the whole new one, never a renamed empty one.
 * Nothing else in a test can tell a missing fsync from a present one. */
static const char *g_watch_tmp, *g_watch_path;
static int g_tmp_synced, g_dir_synced_after_rename;

int fsync(int fd)
{
    struct stat fs, ps;
    if (g_watch_tmp && fstat(fd, &fs) == 0) {
        if (S_ISREG(fs.st_mode) && stat(g_watch_tmp, &ps) == 0 && ps.st_ino == fs.st_ino &&
            ps.st_dev == fs.st_dev)
            g_tmp_synced = 1;
        if (S_ISDIR(fs.st_mode) && stat(g_watch_path, &ps) == 0) g_dir_synced_after_rename = 1;
    }
    return (int)syscall(SYS_fsync, fd);
}

/* Every failure of an atomic write removes its temporary and leaves the old file: a write that
 * fails (the file-size limit, as a full disk would), a rename that fails (the target a folder),
 * and a commit syncs the data before the rename and the folder after it. */
static void test_atomic_file_failures(void **state)
{
    (void)state;
    char dir[] = "/tmp/vixen-util-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], tmp[1100];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    vx_atomic_file af;
    vx_err e;
    struct stat sb;
    /* the syncs of a good commit */
    assert_int_equal(vx_atomic_open(&af, path, &e), VX_OK);
    fputs("old", af.f);
    snprintf(tmp, sizeof tmp, "%s", af.tmp);
    g_watch_tmp = tmp, g_watch_path = path, g_tmp_synced = g_dir_synced_after_rename = 0;
    assert_int_equal(vx_atomic_commit(&af, &e), VX_OK);
    g_watch_tmp = g_watch_path = NULL;
    assert_int_equal(g_tmp_synced, 1);
    assert_int_equal(g_dir_synced_after_rename, 1);
    /* a write past the file-size limit: EFBIG (SIGXFSZ ignored), as ENOSPC would be */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 4096;
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < lim.rlim_cur) lim.rlim_cur = old.rlim_max;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(vx_atomic_open(&af, path, &e), VX_OK);
    snprintf(tmp, sizeof tmp, "%s", af.tmp);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    static char block[8192];
    memset(block, 'x', sizeof block);
    for (int i = 0; i < 4; i++) fwrite(block, 1, sizeof block, af.f);
    vx_status st = vx_atomic_commit(&af, &e);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, VX_ERR_IO);
    assert_non_null(strstr(e.msg, "write failed"));
    assert_non_null(strstr(e.msg, "out.txt"));
    assert_int_not_equal(stat(tmp, &sb), 0); /* no temporary left */
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 3); /* the old file, whole */
    /* a rename that fails: the target is a folder that is not empty */
    char folder[300], inside[320];
    snprintf(folder, sizeof folder, "%s/taken", dir);
    snprintf(inside, sizeof inside, "%s/x", folder);
    assert_int_equal(vx_mkdirs(folder, &e), VX_OK);
    FILE *f = fopen(inside, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(vx_atomic_open(&af, folder, &e), VX_OK);
    snprintf(tmp, sizeof tmp, "%s", af.tmp);
    fputs("new", af.f);
    assert_int_equal(vx_atomic_commit(&af, &e), VX_ERR_IO);
    assert_non_null(strstr(e.msg, "rename failed"));
    assert_int_not_equal(stat(tmp, &sb), 0);
    assert_int_equal(stat(inside, &sb), 0);
    /* a leftover temporary of an earlier process with this PID is replaced, not a failure */
    f = fopen(tmp, "w");
    assert_non_null(f);
    fputs("stale", f);
    fclose(f);
    assert_int_equal(vx_atomic_open(&af, folder, &e), VX_OK);
    vx_atomic_abort(&af);
    assert_int_not_equal(stat(tmp, &sb), 0);
    /* mkdirs over a file that is not a folder: refused, not taken as done */
    assert_int_equal(vx_mkdirs(path, &e), VX_ERR_IO);
    assert_non_null(strstr(e.msg, "not a folder"));
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A CPU context of its own with a memory budget. */
static vx_device *open_cpu(size_t budget)
{
    vx_device_cfg c;
    vx_device_cfg_default(&c);
    c.kind = VX_DEVICE_CPU;
    c.budget = budget;
    vx_device *d;
    vx_err e;
    if (vx_device_open(&c, &d, &e)) fail_msg("%s", e.msg);
    return d;
}

/* The memory budget: accounts charge their context, a block past the budget is refused before any
 * allocation (naming the owner), releasing returns every byte, and two contexts count apart. */
static void test_device_accounts_and_budget(void **state)
{
    (void)state;
    vx_device *d = open_cpu(1000), *d2 = open_cpu(1000);
    vx_err e;
    assert_int_equal(vx_device_kind(d), VX_DEVICE_CPU);
    assert_non_null(strstr(vx_device_name(d), "cpu ("));
    vx_mem a, b;
    vx_mem_init(&a, d, "first");
    vx_mem_init(&b, d, "second");
    char *p = NULL, *q = NULL, *r = NULL;
    assert_int_equal(vx_mem_alloc(&a, 600, &p, &e), VX_OK);
    memset(p, 1, 600);                                            /* really usable */
    assert_int_equal(vx_mem_alloc_host(&a, 5000, &r, &e), VX_OK); /* host staging: not budgeted */
    assert_int_equal(vx_device_available(d), 400);
    assert_int_equal(vx_mem_alloc(&b, 401, &q, &e), VX_ERR_NOMEM);
    assert_null(q);
    assert_non_null(strstr(e.msg, "second: "));
    assert_non_null(strstr(e.msg, "exceed the memory budget"));
    assert_int_equal(vx_mem_alloc(&b, 400, &q, &e), VX_OK);
    vx_device_mem m;
    vx_device_memory(d, &m);
    assert_int_equal(m.reserved, 1000);
    assert_int_equal(m.peak, 1000);
    assert_int_equal(m.host, 5000);
    assert_int_equal(a.bytes, 600);
    assert_int_equal(a.host, 5000);
    assert_int_equal(vx_device_available(d2), 1000); /* another context, its own budget */
    vx_mem_release(&a);
    assert_int_equal(a.bytes, 0);
    vx_device_memory(d, &m);
    assert_int_equal(m.reserved, 400);
    assert_int_equal(m.host, 0);
    assert_int_equal(m.peak, 1000);
    vx_mem_release(&b);
    assert_int_equal(vx_device_available(d), 1000);
    /* the CPU has no registered backends: components use their reference */
    assert_null(vx_device_backend(d, "replay"));
    vx_device_close(d);
    vx_device_close(d2);
    /* NULL is the process-wide CPU context */
    assert_int_equal(vx_device_kind(NULL), VX_DEVICE_CPU);
    assert_ptr_equal(vx_device_cpu(), vx_device_cpu());
}

/* Shares: a block is charged to the share and its parent; the share's own budget refuses first
 * (naming the share), the parent's refuses what all shares together would exceed, a refused
 * block leaves every counter as it was, and releasing returns the bytes to both. */
static void test_device_shares(void **state)
{
    (void)state;
    vx_device *d = open_cpu(1000), *s1, *s2;
    vx_err e;
    assert_int_equal(vx_device_share(d, 600, "trial 1", &s1, &e), VX_OK);
    assert_int_equal(vx_device_share(d, 600, "trial 2", &s2, &e), VX_OK);
    assert_string_equal(vx_device_label(s1), "trial 1");
    assert_non_null(strstr(vx_device_name(s1), "share 'trial 1'"));
    assert_int_equal(vx_device_kind(s1), VX_DEVICE_CPU);
    vx_mem a, b;
    vx_mem_init(&a, s1, "replay");
    vx_mem_init(&b, s2, "replay");
    char *p = NULL, *q = NULL;
    /* reserving ahead: a share's, once, before its first block; nothing to do on the CPU */
    assert_int_equal(vx_device_reserve_ahead(d, 100, &e), VX_ERR_ARG);
    assert_int_equal(vx_device_reserve_ahead(s2, 100, &e), VX_OK);
    assert_int_equal(vx_mem_alloc(&a, 601, &p, &e), VX_ERR_NOMEM); /* past its share */
    assert_non_null(strstr(e.msg, "share 'trial 1'"));
    assert_int_equal(vx_mem_alloc(&a, 500, &p, &e), VX_OK);
    assert_int_equal(vx_device_reserve_ahead(s1, 100, &e), VX_ERR_ARG); /* after a block */
    assert_int_equal(vx_device_available(s1), 100);
    assert_int_equal(vx_device_available(d), 500);
    /* trial 2's share allows 600, the device only 500 more */
    assert_int_equal(vx_mem_alloc(&b, 550, &q, &e), VX_ERR_NOMEM);
    assert_non_null(strstr(e.msg, "budget of cpu ("));
    vx_device_mem m;
    vx_device_memory(s2, &m);
    assert_int_equal(m.reserved, 0); /* the refused block was taken back from the share too */
    assert_int_equal(m.peak, 0);     /* and never held there: no peak of 550 */
    assert_int_equal(vx_mem_alloc(&b, 450, &q, &e), VX_OK);
    vx_device_memory(s2, &m);
    assert_int_equal(m.peak, 450);
    vx_device_memory(d, &m);
    assert_int_equal(m.reserved, 950);
    assert_int_equal(m.peak, 950);
    vx_mem_release(&a);
    vx_device_memory(d, &m);
    assert_int_equal(m.reserved, 450);
    assert_int_equal(vx_device_available(s1), 600);
    vx_mem_release(&b);
    assert_int_equal(vx_device_available(d), 1000);
    vx_device_info info;
    assert_int_equal(vx_device_query(s1, &info, &e), VX_OK);
    assert_true(info.total > 0 && info.free <= info.total && info.units >= 1);
    vx_device_close(s1);
    vx_device_close(s2);
    vx_device_close(d);
}

/* A context closed while an object still holds memory on it (a caller's bug, warned of) stays
 * until the object releases it, and a share closed that way keeps the context it was carved from
 * too; a context closed before its share stays while the share is open, and makes no new
 * shares: freed at once, the release or the share's close would go through freed contexts
 * (AddressSanitizer's build reports it; here the counters read after the close show the contexts
 * still there). */
static void test_device_close_while_held(void **state)
{
    (void)state;
    vx_device *d = open_cpu(1000), *s;
    vx_err e;
    assert_int_equal(vx_device_share(d, 600, "trial 1", &s, &e), VX_OK);
    vx_mem a;
    vx_mem_init(&a, s, "replay");
    char *p = NULL;
    assert_int_equal(vx_mem_alloc(&a, 500, &p, &e), VX_OK);
    vx_device_close(s); /* warns: 500 bytes still reserved */
    vx_device_close(d); /* the same: the share's 500 are charged to it */
    vx_device_close(s); /* a second close of a closing context does nothing */
    vx_device_mem m;
    vx_device_memory(s, &m);
    assert_int_equal(m.reserved, 500);
    vx_device_memory(d, &m);
    assert_int_equal(m.reserved, 500);
    p[499] = 1;            /* the block is still the object's */
    vx_mem_release(&a);    /* closes the share, then the context */
    assert_null(a.blocks); /* (AddressSanitizer: nothing read or written after the frees) */
    vx_mem_release(&a);    /* a second release touches no context */

    /* the context closed first, its share still open and holding memory: the context stays
     * while the share is open, not only while memory is reserved on it */
    d = open_cpu(1000);
    assert_int_equal(vx_device_share(d, 600, "trial 2", &s, &e), VX_OK);
    vx_mem_init(&a, s, "replay");
    assert_int_equal(vx_mem_alloc(&a, 300, &p, &e), VX_OK);
    vx_device_close(d); /* warns: 300 bytes and a share */
    vx_device *s2;
    assert_int_equal(vx_device_share(d, 100, "late", &s2, &e), VX_ERR_ARG); /* closed: no more */
    vx_mem_release(&a); /* the share is idle but open: both stay */
    vx_device_memory(d, &m);
    assert_int_equal(m.reserved, 0);
    vx_device_memory(s, &m);
    assert_int_equal(m.budget, 600);
    vx_device_close(s); /* the share, then the context it held */
}

/* A block of 0 bytes holds its context as any block does; of two threads giving back a closed
 * share's last blocks at once, one closes the share and its closed parent, and the other touches
 * neither after its own release (AddressSanitizer's build reports a use after free otherwise:
 * 500 rounds, each a race of two releases); a share of the process-wide CPU context closes too. */
typedef struct {
    vx_mem *m;
    pthread_barrier_t *go;
} releaser;

static void *release_at_once(void *p)
{
    releaser *r = p;
    pthread_barrier_wait(r->go);
    vx_mem_release(r->m);
    return NULL;
}

static void test_device_close_races(void **state)
{
    (void)state;
    vx_device *d = open_cpu(1 << 20), *s;
    vx_err e;
    vx_mem a, b;
    char *p;
    /* a zero-byte block */
    assert_int_equal(vx_device_share(d, 600, "zero", &s, &e), VX_OK);
    vx_mem_init(&a, s, "zero");
    assert_int_equal(vx_mem_alloc(&a, 0, &p, &e), VX_OK);
    vx_device_close(s); /* held by the block: stays */
    vx_device_mem m;
    vx_device_memory(s, &m);
    assert_int_equal(m.budget, 600);
    vx_mem_release(&a);
    vx_device_close(d);
    /* two releases at once */
    for (int round = 0; round < 500; round++) {
        d = open_cpu(1 << 20);
        assert_int_equal(vx_device_share(d, 1 << 19, "race", &s, &e), VX_OK);
        vx_mem_init(&a, s, "a");
        vx_mem_init(&b, s, "b");
        assert_int_equal(vx_mem_alloc(&a, 100, &p, &e), VX_OK);
        assert_int_equal(vx_mem_alloc(&b, 100, &p, &e), VX_OK);
        vx_device_close(s);
        vx_device_close(d);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        releaser ra = {&a, &go}, rb = {&b, &go};
        pthread_t ta, tb;
        assert_int_equal(pthread_create(&ta, NULL, release_at_once, &ra), 0);
        assert_int_equal(pthread_create(&tb, NULL, release_at_once, &rb), 0);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        pthread_barrier_destroy(&go);
    }
    /* a share of the process-wide CPU context */
    assert_int_equal(vx_device_share(NULL, 100, "process", &s, &e), VX_OK);
    vx_mem_init(&a, s, "x");
    assert_int_equal(vx_mem_alloc(&a, 10, &p, &e), VX_OK);
    vx_device_close(s);
    vx_mem_release(&a);
}

static int refuse_big_replay(void *ctx, const vx_device *dev, const char *owner, size_t bytes)
{
    (void)dev;
    ++*(int *)ctx;
    return strcmp(owner, "replay") == 0 && bytes > 100;
}

/* The fault hook refuses what it says, as a full device would, and nothing else. */
static void test_device_alloc_fault_hook(void **state)
{
    (void)state;
    int asked = 0;
    vx_mem_set_fault(refuse_big_replay, &asked);
    vx_mem a, b;
    vx_mem_init(&a, NULL, "replay");
    vx_mem_init(&b, NULL, "learner");
    char *p = NULL;
    vx_err e;
    assert_int_equal(vx_mem_alloc(&a, 101, &p, &e), VX_ERR_NOMEM);
    assert_non_null(strstr(e.msg, "injected"));
    assert_int_equal(vx_mem_alloc(&a, 100, &p, &e), VX_OK);
    assert_int_equal(vx_mem_alloc(&b, 4096, &p, &e), VX_OK);
    vx_mem_set_fault(NULL, NULL);
    assert_int_equal(vx_mem_alloc(&a, 4096, &p, &e), VX_OK);
    assert_int_equal(asked, 3);
    vx_mem_release(&a);
    vx_mem_release(&b);
}

/* Who refused is counted where it refused: a block past a share's own budget on the share (the
 * search halves such a trial's batch), a block past the device's on the device and not on the
 * share (the search reports the device full, engine.c); the fault hook's VX_FAULT_REFUSE on the
 * context asked, its VX_FAULT_DEVICE on the device the share is carved from. The hook is asked
 * about device memory only: host staging is neither asked about nor refused. */
static int g_fault_asked;
static int fault_as_told(void *ctx, const vx_device *dev, const char *owner, size_t bytes)
{
    (void)dev, (void)owner, (void)bytes;
    g_fault_asked++;
    return *(int *)ctx;
}

static void test_device_refusals_counted(void **state)
{
    (void)state;
    vx_device *d = open_cpu(1000), *s1, *s2;
    vx_err e;
    assert_int_equal(vx_device_share(d, 600, "trial 1", &s1, &e), VX_OK);
    assert_int_equal(vx_device_share(d, 600, "trial 2", &s2, &e), VX_OK);
    vx_mem a, b;
    vx_mem_init(&a, s1, "a");
    vx_mem_init(&b, s2, "b");
    char *p = NULL;
    vx_device_mem md, m1, m2;
    assert_int_equal(vx_mem_alloc(&a, 601, &p, &e), VX_ERR_NOMEM); /* the share's budget */
    vx_device_memory(d, &md);
    vx_device_memory(s1, &m1);
    assert_int_equal(m1.refused, 1);
    assert_int_equal(md.refused, 0);
    assert_int_equal(vx_mem_alloc(&a, 500, &p, &e), VX_OK);
    assert_int_equal(vx_mem_alloc(&b, 550, &p, &e), VX_ERR_NOMEM); /* the device's budget */
    vx_device_memory(d, &md);
    vx_device_memory(s2, &m2);
    assert_int_equal(md.refused, 1);
    assert_int_equal(m2.refused, 0);

    int how = VX_FAULT_DEVICE;
    g_fault_asked = 0;
    vx_mem_set_fault(fault_as_told, &how);
    assert_int_equal(vx_mem_alloc(&b, 10, &p, &e), VX_ERR_NOMEM);
    vx_device_memory(d, &md);
    vx_device_memory(s2, &m2);
    assert_int_equal(md.refused, 2);
    assert_int_equal(m2.refused, 0);
    how = VX_FAULT_REFUSE;
    assert_int_equal(vx_mem_alloc(&b, 10, &p, &e), VX_ERR_NOMEM);
    vx_device_memory(d, &md);
    vx_device_memory(s2, &m2);
    assert_int_equal(md.refused, 2);
    assert_int_equal(m2.refused, 1);
    assert_int_equal(m2.reserved, 0);
    assert_int_equal(g_fault_asked, 2);
    char *h = NULL; /* host staging: not the hook's business */
    assert_int_equal(vx_mem_alloc_host(&b, 64, &h, &e), VX_OK);
    assert_non_null(h);
    assert_int_equal(g_fault_asked, 2);
    vx_mem_set_fault(NULL, NULL);
    vx_mem_release(&a);
    vx_mem_release(&b);
    vx_device_close(s1);
    vx_device_close(s2);
    vx_device_close(d);
}

/* A share of a share: a block is charged to all three contexts, the middle one's budget refuses
 * what the inner one would allow (taking it back from the inner one), and releasing gives the
 * bytes back to every level, the outermost included. */
static void test_device_nested_shares(void **state)
{
    (void)state;
    vx_device *d = open_cpu(1000), *s, *t;
    vx_err e;
    assert_int_equal(vx_device_share(d, 600, "study", &s, &e), VX_OK);
    assert_int_equal(vx_device_share(s, 800, "trial", &t, &e), VX_OK);
    vx_mem a;
    vx_mem_init(&a, t, "replay");
    char *p = NULL;
    vx_device_mem m;
    assert_int_equal(vx_mem_alloc(&a, 200, &p, &e), VX_OK);
    vx_device_memory(d, &m);
    assert_int_equal(m.reserved, 200);
    vx_device_memory(s, &m);
    assert_int_equal(m.reserved, 200);
    assert_int_equal(vx_mem_alloc(&a, 401, &p, &e), VX_ERR_NOMEM); /* 601 > the middle's 600 */
    vx_device_memory(t, &m);
    assert_int_equal(m.reserved, 200);
    vx_device_memory(d, &m);
    assert_int_equal(m.reserved, 200);
    vx_mem_release(&a);
    assert_int_equal(vx_device_available(t), 800);
    assert_int_equal(vx_device_available(s), 600);
    assert_int_equal(vx_device_available(d), 1000);
    vx_device_close(t);
    vx_device_close(s);
    vx_device_close(d);
}

/* A block the budget allows but the allocator cannot give (2^60 bytes: past any address space)
 * fails naming its owner and leaves the accounts as they were: nothing reserved on the context,
 * no peak that counts it, nothing on the account, and the account still usable. (Under
 * AddressSanitizer the allocator returns NULL too: __asan_default_options below.) */
static void test_device_alloc_failure_leaves_accounts(void **state)
{
    (void)state;
    vx_device *d = open_cpu(SIZE_MAX / 2);
    vx_err e;
    vx_mem a;
    vx_mem_init(&a, d, "huge");
    char *p = (char *)&e;
    assert_int_equal(vx_mem_alloc(&a, (size_t)1 << 60, &p, &e), VX_ERR_NOMEM);
    assert_null(p);
    assert_non_null(strstr(e.msg, "huge: "));
    assert_non_null(strstr(e.msg, "out of host memory"));
    vx_device_mem m;
    vx_device_memory(d, &m);
    assert_int_equal(m.reserved, 0);
    assert_int_equal(m.peak, 0); /* never held: a trial's measured peak must not count it */
    assert_int_equal(a.bytes, 0);
    assert_null(a.blocks);
    assert_int_equal(vx_device_available(d), SIZE_MAX / 2);
    assert_int_equal(vx_mem_alloc(&a, 10, &p, &e), VX_OK);
    vx_device_memory(d, &m);
    assert_int_equal(m.peak, 10);
    vx_mem_release(&a);
    vx_device_close(d); /* nothing held: closed now (a wrong count would leave it to leak) */
}

/* The work queues a search asks for: a GPU's 32 divided among the ranks sharing it, never below
 * CUDA's 8; a value the user set is kept, and only a value of vixen's own is taken back. */
static void test_work_queues(void **state)
{
    (void)state;
    const char *had = getenv("CUDA_VISIBLE_DEVICES");
    char *saved = had ? strdup(had) : NULL;
    setenv("CUDA_VISIBLE_DEVICES", "0", 1);
    assert_int_equal(vx_device_work_queues_for(1), 32);
    assert_int_equal(vx_device_work_queues_for(2), 16);
    assert_int_equal(vx_device_work_queues_for(3), 10);
    assert_int_equal(vx_device_work_queues_for(8), 8);
    setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7", 1); /* one rank per GPU: all 32 each */
    assert_int_equal(vx_device_work_queues_for(8), 32);
    assert_int_equal(vx_device_work_queues_for(16), 16);
    setenv("CUDA_VISIBLE_DEVICES", "2,3", 1);
    assert_int_equal(vx_device_work_queues_for(4), 16);
    if (saved) setenv("CUDA_VISIBLE_DEVICES", saved, 1);
    else unsetenv("CUDA_VISIBLE_DEVICES");
    free(saved);

    const char *q = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    char *user = q ? strdup(q) : NULL;
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    assert_int_equal(vx_device_request_work_queues(99), 1);
    assert_string_equal(getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "32"); /* clamped to CUDA's most */
    vx_device_forget_work_queues();
    assert_null(getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4", 1); /* the user's */
    assert_int_equal(vx_device_request_work_queues(32), 0);
    vx_device_forget_work_queues();
    assert_string_equal(getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "4");
    if (user) setenv("CUDA_DEVICE_MAX_CONNECTIONS", user, 1);
    else unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    free(user);
}

/* Asking for CUDA where there is none is an error that says why; AUTO takes the CPU then. */
static void test_device_open_kinds(void **state)
{
    (void)state;
    vx_device_cfg c;
    vx_device_cfg_default(&c);
    vx_device *d;
    vx_err e;
    assert_int_equal(vx_device_open(&c, &d, &e), VX_OK);
    assert_int_equal(vx_device_kind(d),
                     vx_device_cuda_count() > 0 ? VX_DEVICE_CUDA : VX_DEVICE_CPU);
    vx_device_close(d);
    if (vx_device_cuda_count() == 0) {
        c.kind = VX_DEVICE_CUDA;
        assert_int_equal(vx_device_open(&c, &d, &e), VX_ERR_ARG);
        assert_non_null(strstr(e.msg, "cuda asked for, but"));
    }
    c.kind = 7; /* a kind no build has: refused, not taken as the CPU */
    d = (vx_device *)&c;
    assert_int_equal(vx_device_open(&c, &d, &e), VX_ERR_ARG);
    assert_null(d);
    assert_non_null(strstr(e.msg, "unknown kind 7"));
    /* the process-wide CPU context refuses nothing the allocator gives */
    vx_device_mem m;
    vx_device_memory(NULL, &m);
    assert_true(m.budget == SIZE_MAX);
}

/* A process among local_size on a node gets the node's CPU memory budget divided among them: the
 * budget asked for (1000 B over 4 processes: 250 each), or, asked for none, what the node has
 * free divided (about half the whole for 2; MemAvailable moves between the two reads, hence the
 * margins). */
static void test_device_open_local_divides_budget(void **state)
{
    (void)state;
    vx_device_cfg c;
    vx_device_cfg_default(&c);
    c.kind = VX_DEVICE_CPU;
    c.budget = 1000;
    vx_device *d;
    vx_err e;
    int cores = 0;
    vx_device_mem m;
    assert_int_equal(vx_device_open_local(&c, 3, 4, &d, &cores, &e), VX_OK);
    vx_device_memory(d, &m);
    assert_int_equal(m.budget, 250);
    assert_true(cores >= 1);
    vx_device_close(d);
    assert_int_equal(vx_device_open_local(&c, 0, 1, &d, &cores, &e), VX_OK); /* alone: all */
    vx_device_memory(d, &m);
    assert_int_equal(m.budget, 1000);
    vx_device_close(d);

    c.budget = 0;
    vx_device *whole = open_cpu(0);
    vx_device_mem w;
    vx_device_memory(whole, &w);
    vx_device_close(whole);
    assert_int_equal(vx_device_open_local(&c, 1, 2, &d, &cores, &e), VX_OK);
    vx_device_memory(d, &m);
    vx_device_close(d);
    double ratio = (double)m.budget / (double)w.budget;
    if (ratio < 0.4 || ratio > 0.6) fail_msg("budget %zu of %zu: not half", m.budget, w.budget);
}

/* AddressSanitizer's allocator aborts on a request past its maximum by default: here it returns
 * NULL as glibc's does, for test_device_alloc_failure_leaves_accounts (not called without it). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_rng_stream_layout),
        cmocka_unit_test(test_rng_uniform_and_normal_moments),
        cmocka_unit_test(test_rng_below_is_uniform),
        cmocka_unit_test(test_err_context),
        cmocka_unit_test(test_log_sink),
        cmocka_unit_test(test_progress_plain_lines),
        cmocka_unit_test(test_progress_sink),
        cmocka_unit_test(test_format_edges),
        cmocka_unit_test(test_progress_rate_eta_and_pace),
        cmocka_unit_test(test_atomic_file),
        cmocka_unit_test(test_atomic_file_failures),
        cmocka_unit_test(test_err_long_file_name),
        cmocka_unit_test(test_device_accounts_and_budget),
        cmocka_unit_test(test_device_shares),
        cmocka_unit_test(test_device_close_while_held),
        cmocka_unit_test(test_device_close_races),
        cmocka_unit_test(test_device_alloc_fault_hook),
        cmocka_unit_test(test_device_refusals_counted),
        cmocka_unit_test(test_device_nested_shares),
        cmocka_unit_test(test_device_alloc_failure_leaves_accounts),
        cmocka_unit_test(test_device_open_kinds),
        cmocka_unit_test(test_device_open_local_divides_budget),
        cmocka_unit_test(test_work_queues),
    };
    return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}

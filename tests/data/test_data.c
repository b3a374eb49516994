/* test_data.c — CSV reading and writing, timestamps, validation, multi-file loading, and the
 * synthetic market, and inputs that must be refused (FIFOs, synthetic parameters out of range).
 * The DBN and feature groups live beside it (test_dbn.c, test_features.c,
 * test_features_ref.c). */
#include "helpers.h"
#include "data_tests.h"
#include "../../src/data/data_internal.h"
#include "vixen/philox.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static vx_status parse(const char *text, vx_series *s, vx_err *e)
{
    memset(s, 0, sizeof *s);
    vx_status st = vx_csv_parse("t.csv", text, strlen(text), NULL, s, e);
    return st;
}

static int64_t ns(int y, int mo, int d, int h, int mi, int sec)
{
    return ((int64_t)vx_days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 +
            sec) *
           1000000000ll;
}

static void test_csv_basic_and_extra_columns(void **state)
{
    (void)state;
    vx_series s;
    vx_err e;
    const char *csv = "Date,Open,High,Low,Close,Adj Close,Volume\n"
                      "2024-01-02,4000.25,4010,3990.5,4005,4005,1200\n"
                      "   \n" /* a line of spaces is skipped like an empty one */
                      "2024-01-03,4005,4020,4001,4019.75,4019.75,0\n";
    assert_int_equal(parse(csv, &s, &e), VX_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.ts[0], ns(2024, 1, 2, 0, 0, 0));
    assert_int_equal(s.ts[1], ns(2024, 1, 3, 0, 0, 0));
    assert_true(s.open[0] == 4000.25 && s.high[0] == 4010 && s.low[0] == 3990.5);
    assert_true(s.close[1] == 4019.75 && s.volume[0] == 1200 && s.volume[1] == 0);
    assert_int_equal(s.interval_ns, 86400000000000ll);
    vx_series_free(&s);
    /* the caller's instrument name labels the series */
    vx_load_opts o = {.instrument = "ES"};
    memset(&s, 0, sizeof s);
    assert_int_equal(vx_csv_parse("t.csv", csv, strlen(csv), &o, &s, &e), VX_OK);
    assert_string_equal(s.instrument, "ES");
    vx_series_free(&s);
}

/* Rows much shorter than the header (a long name over a one-letter column) make the reader's
 * first guess of the row count too small, so the series grows while reading: every bar read
 * before a growth must survive it. */
static void test_csv_series_grows_without_losing_bars(void **state)
{
    (void)state;
    enum { ROWS = 3000 };
    size_t cap = 128 + (size_t)ROWS * 32;
    char *text = malloc(cap), *w = text;
    assert_non_null(text);
    w += sprintf(w, "timestamp,open,high,low,close,volume,a_long_ignored_column_name_that_"
                    "makes_the_header_far_longer_than_any_row\n");
    for (int i = 0; i < ROWS; i++)
        w += sprintf(w, "%d,%d,%d,1,%d,1,x\n", 1000000000 + 60 * i, 2 + i % 7, 9, 2 + i % 5);
    vx_series s;
    vx_err e;
    memset(&s, 0, sizeof s);
    assert_int_equal(vx_csv_parse("t.csv", text, (size_t)(w - text), NULL, &s, &e), VX_OK);
    /* csv.c's first guess is bytes / header length + 16: about 800 of the 3000 rows here */
    assert_true((size_t)(w - text) / 100 + 16 < ROWS / 2);
    assert_int_equal(s.n, ROWS);
    for (int i = 0; i < ROWS; i++) {
        assert_int_equal(s.ts[i], (1000000000ll + 60 * i) * 1000000000ll);
        assert_true(s.open[i] == 2 + i % 7 && s.close[i] == 2 + i % 5 && s.high[i] == 9);
    }
    vx_series_free(&s);
    free(text);
}

static void test_csv_timestamp_formats(void **state)
{
    (void)state;
    struct {
        const char *text;
        int64_t want0;
    } cases[] = {
        {"timestamp,open,high,low,close,volume\n2024-03-01 09:30,1,2,1,2,5\n",
         ns(2024, 3, 1, 9, 30, 0)},
        {"datetime;open;high;low;close;volume\n2024-03-01 09:30:15;1;2;1;2;5\n",
         ns(2024, 3, 1, 9, 30, 15)},
        {"time\topen\thigh\tlow\tclose\tvolume\n2024-03-01T09:30:15.250Z\t1\t2\t1\t2\t5\n",
         ns(2024, 3, 1, 9, 30, 15) + 250000000},
        {"timestamp,open,high,low,close,volume\n2024-03-01T09:30:00-05:00,1,2,1,2,5\n",
         ns(2024, 3, 1, 14, 30, 0)},
        {"timestamp,open,high,low,close,volume\n2024-03-01T09:30:00+0100,1,2,1,2,5\n",
         ns(2024, 3, 1, 8, 30, 0)},
        {"date,time,open,high,low,close,volume\n2024-03-01,09:31:00,1,2,1,2,5\n",
         ns(2024, 3, 1, 9, 31, 0)},
        {"timestamp,open,high,low,close,volume\n1709285400,1,2,1,2,5\n", 1709285400000000000ll},
        {"timestamp,open,high,low,close,volume\n1709285400123,1,2,1,2,5\n", 1709285400123000000ll},
        {"timestamp,open,high,low,close,volume\n1709285400123456789,1,2,1,2,5\n",
         1709285400123456789ll},
        /* microseconds: below 1e17, at or above 1e14 */
        {"timestamp,open,high,low,close,volume\n1709285400123456,1,2,1,2,5\n",
         1709285400123456000ll},
        /* before 1970: negative epoch seconds, and milliseconds picked by magnitude */
        {"timestamp,open,high,low,close,volume\n-86400,1,2,1,2,5\n", -86400000000000ll},
        {"timestamp,open,high,low,close,volume\n-100000000000,1,2,1,2,5\n", -100000000000000000ll},
        /* exactly 1e11 is milliseconds (seconds stop below it): 1973-03-03T09:46:40Z */
        {"timestamp,open,high,low,close,volume\n100000000000,1,2,1,2,5\n", 100000000000000000ll},
        /* a full timestamp column wins over a date column beside it */
        {"date,timestamp,open,high,low,close,volume\n2024-03-01,2024-03-01 09:30,1,2,1,2,5\n",
         ns(2024, 3, 1, 9, 30, 0)},
        /* the separator is the one the header holds most of: one stray tab in a comma header
         * (a free-text column) does not make it tab-separated */
        {"timestamp,open,high,low,close,volume,note\tx\n2024-03-01 09:30,1,2,1,2,5,a\tb\n",
         ns(2024, 3, 1, 9, 30, 0)},
        {"\xEF\xBB\xBF\"Timestamp\",\"OPEN\",\"High\",\"low\",\"Close\",\"VOLUME\"\r\n"
         "\"2024-03-01 09:30:00\",1,2,1,2,5\r\n",
         ns(2024, 3, 1, 9, 30, 0)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        vx_series s;
        vx_err e;
        vx_status st = parse(cases[i].text, &s, &e);
        if (st) fail_msg("case %zu: %s", i, e.msg);
        assert_int_equal(s.n, 1);
        assert_int_equal(s.ts[0], cases[i].want0);
        vx_series_free(&s);
    }
    /* a column named twice ("volume" and its alias "vol"; "open" twice): which is it? An error
     * naming both (the first had been taken silently) */
    vx_series s;
    vx_err e;
    assert_int_equal(
        parse("timestamp,open,high,low,close,volume,vol\n2024-03-01,1,2,1,2,5,-7\n", &s, &e),
        VX_ERR_FORMAT);
    vx_series_free(&s);
    if (!strstr(e.msg,
                "two volume columns in the header: 'volume' (column 6) and 'vol' (column 7)"))
        fail_msg("%s", e.msg);
    assert_int_equal(e.line, 1);
    assert_int_equal(
        parse("timestamp,open,high,low,close,volume,Open\n2024-03-01,1,2,1,2,5,1\n", &s, &e),
        VX_ERR_FORMAT);
    vx_series_free(&s);
    assert_non_null(strstr(e.msg, "two open columns"));
}

static void test_datetime_parser(void **state)
{
    (void)state;
    int64_t t;
    assert_int_equal(vx_parse_datetime("2024-02-29", 10, &t), 0);
    assert_int_equal(t, ns(2024, 2, 29, 0, 0, 0));
    assert_int_equal(vx_parse_datetime("2023-02-29", 10, &t), -1);
    assert_int_equal(vx_parse_datetime("2024-13-01", 10, &t), -1);
    assert_int_equal(vx_parse_datetime("2024-01-01 24:00", 16, &t), -1);
    assert_int_equal(vx_parse_datetime("2024-01-01 10:00x", 17, &t), -1);
    assert_int_equal(vx_parse_datetime("3024-01-01", 10, &t), -1); /* past int64 nanoseconds */
    assert_int_equal(vx_parse_datetime("2262-04-11", 10, &t), 0);
    assert_int_equal(vx_parse_datetime("1969-12-31T23:59:59Z", 20, &t), 0);
    assert_int_equal(t, -1000000000ll);
    /* Gregorian leap years: centuries are not, unless divisible by 400 (2000-02-29 is epoch
     * second 951782400) */
    assert_int_equal(vx_parse_datetime("1900-02-29", 10, &t), -1);
    assert_int_equal(vx_parse_datetime("2100-02-29", 10, &t), -1);
    assert_int_equal(vx_parse_datetime("2000-02-29", 10, &t), 0);
    assert_int_equal(t, 951782400ll * 1000000000);
    /* a leap second (:60) is read, folded forward onto the next second: 2017-01-01T00:00:00Z */
    assert_int_equal(vx_parse_datetime("2016-12-31T23:59:60Z", 20, &t), 0);
    assert_int_equal(t, 1483228800ll * 1000000000);
    assert_int_equal(vx_parse_datetime("2016-12-31T18:59:60-05:00", 25, &t), 0); /* the same */
    assert_int_equal(t, 1483228800ll * 1000000000);
    /* anywhere else :60 is an error (it had been read as the next minute, so the next bar's
     * error blamed the wrong line), as is a fraction finer than a nanosecond (it had been cut) */
    assert_int_equal(vx_parse_datetime("2024-01-02T14:33:60Z", 20, &t), -1);
    assert_int_equal(vx_parse_datetime("2016-12-31T23:59:60+01:00", 25, &t), -1);
    assert_int_equal(vx_parse_datetime("2024-01-02T14:33:00.123456789Z", 30, &t), 0);
    assert_int_equal(vx_parse_datetime("2024-01-02T14:33:00.1234567891Z", 31, &t), -1);
    /* an offset's minutes count as minutes (India, +05:30): 2024-03-01T04:00:00Z */
    assert_int_equal(vx_parse_datetime("2024-03-01T09:30:00+05:30", 25, &t), 0);
    assert_int_equal(t, 1709265600ll * 1000000000);
    assert_int_equal(vx_parse_datetime("2024-03-01T09:30:00+01:60", 25, &t), -1);
    /* before 1677-09-21 int64 nanoseconds cannot hold the time, as after 2262 */
    assert_int_equal(vx_parse_datetime("1600-01-01", 10, &t), -1);
    assert_int_equal(vx_parse_datetime("1677-09-22", 10, &t), 0);
    assert_true(t < 0);
    char buf[48];
    vx_format_ts(1609160400000000000ll, buf, sizeof buf);
    assert_string_equal(buf, "2020-12-28T13:00:00Z");
    vx_format_ts(1609160400000000001ll, buf, sizeof buf);
    assert_string_equal(buf, "2020-12-28T13:00:00.000000001Z");
    assert_int_equal(vx_parse_datetime(buf, strlen(buf), &t), 0);
    assert_int_equal(t, 1609160400000000001ll);
    /* before 1970: the second is floored, the fraction counts up from it */
    vx_format_ts(-1, buf, sizeof buf);
    assert_string_equal(buf, "1969-12-31T23:59:59.999999999Z");
    vx_format_ts(-86400000000000ll, buf, sizeof buf);
    assert_string_equal(buf, "1969-12-31T00:00:00Z");
}

static void test_eastern_time(void **state)
{
    (void)state;
    /* 2024: DST from 2024-03-10 07:00Z to 2024-11-03 06:00Z */
    int64_t s = ns(2024, 3, 10, 6, 59, 59) / 1000000000;
    assert_int_equal(vx_eastern_offset_s(s), -5 * 3600);
    assert_int_equal(vx_eastern_offset_s(s + 1), -4 * 3600);
    s = ns(2024, 11, 3, 5, 59, 59) / 1000000000;
    assert_int_equal(vx_eastern_offset_s(s), -4 * 3600);
    assert_int_equal(vx_eastern_offset_s(s + 1), -5 * 3600);
    assert_int_equal(vx_eastern_offset_s(ns(2024, 1, 15, 12, 0, 0) / 1000000000), -5 * 3600);
}

typedef struct {
    const char *text;
    vx_status status;
    int64_t line;
    const char *field;
    const char *words; /* must appear in the message */
} bad_case;

static void test_csv_rejects_bad_input(void **state)
{
    (void)state;
    const char *h = "timestamp,open,high,low,close,volume\n";
    char buf[16][512];
    bad_case cases[] = {
        {"", VX_ERR_FORMAT, -1, "", "empty file"},
        {"\n\n  \n", VX_ERR_FORMAT, -1, "", "empty file"},
        {"\xEF\xBB\xBF", VX_ERR_FORMAT, -1, "", "empty file"}, /* a byte order mark alone */
        {"timestamp,open,high,low,close,volume\n", VX_ERR_FORMAT, -1, "", "no data rows"},
        {"timestamp,open,high,low,close\n2024-01-01,1,2,1,2\n", VX_ERR_FORMAT, 1, "volume",
         "missing column"},
        {"open,high,low,close,volume\n1,2,1,2,3\n", VX_ERR_FORMAT, 1, "timestamp",
         "missing column"},
        {buf[0], VX_ERR_VALIDATION, 3, "close", "not finite"},
        {buf[1], VX_ERR_VALIDATION, 2, "high", "below low"},
        {buf[2], VX_ERR_VALIDATION, 3, "timestamp", "earlier than"},
        {buf[3], VX_ERR_VALIDATION, 3, "timestamp", "duplicate"},
        {buf[4], VX_ERR_FORMAT, 2, "open", "not a decimal number"},
        {buf[5], VX_ERR_FORMAT, 2, "timestamp", "cannot read"},
        {buf[6], VX_ERR_VALIDATION, 2, "low", "not positive"},
        {buf[7], VX_ERR_FORMAT, 3, "", "expected 6 fields (the header's), found 4"},
        /* wider rows too (a stray separator shifts nothing silently) */
        {buf[9], VX_ERR_FORMAT, 3, "", "expected 6 fields (the header's), found 8"},
        /* numbers are decimal: strtod's hexadecimal (0x10 = 16) is refused, and a number past a
         * double's range is named as such, not as infinity */
        {buf[10], VX_ERR_FORMAT, 2, "open", "'0x10' is not a decimal number"},
        {buf[11], VX_ERR_FORMAT, 2, "volume", "'1e400' is beyond a double's range"},
        {buf[12], VX_ERR_FORMAT, 2, "high", "'2e' is not a decimal number"},
        /* a :60 second that is no leap second is an error on its own line (it had been the next
         * minute, and the next line a duplicate) */
        {buf[13], VX_ERR_FORMAT, 2, "timestamp", "cannot read '2024-01-02T14:33:60Z'"},
        /* epoch seconds whose nanoseconds overflow int64 (they would wrap to 2216) */
        {buf[8], VX_ERR_FORMAT, 3, "timestamp", "not epoch time"},
        /* with a separate time column the date is a calendar date, never epoch seconds */
        {"date,time,open,high,low,close,volume\n20240301,09:30,1,2,1,2,5\n", VX_ERR_FORMAT, 2,
         "date", "cannot read"},
    };
    snprintf(buf[0], 512, "%s2024-01-01 10:00,1,2,1,2,5\n2024-01-01 10:01,1,2,1,nan,5\n", h);
    snprintf(buf[1], 512, "%s2024-01-01 10:00,1,0.5,1.5,1,5\n", h);
    snprintf(buf[2], 512, "%s2024-01-01 10:05,1,2,1,2,5\n2024-01-01 10:01,1,2,1,2,5\n", h);
    snprintf(buf[3], 512, "%s2024-01-01 10:05,1,2,1,2,5\n2024-01-01 10:05,1,2,1,2,5\n", h);
    snprintf(buf[4], 512, "%s2024-01-01 10:00,1x,2,1,2,5\n", h);
    snprintf(buf[5], 512, "%s01/02/2024 10:00,1,2,1,2,5\n", h);
    snprintf(buf[6], 512, "%s2024-01-01 10:00,1,2,-1,2,5\n", h);
    snprintf(buf[7], 512, "%s2024-01-01 10:00,1,2,1,2,5\n2024-01-01 10:01,1,2,1\n", h);
    snprintf(buf[8], 512, "%s1709285400,1,2,1,2,5\n99999999999,1,2,1,2,5\n", h);
    snprintf(buf[9], 512, "%s2024-01-01 10:00,1,2,1,2,5\n2024-01-01 10:01,1,2,1,2,5,6,7\n", h);
    snprintf(buf[10], 512, "%s2024-01-01 10:00,0x10,2,1,2,5\n", h);
    snprintf(buf[11], 512, "%s2024-01-01 10:00,1,2,1,2,1e400\n", h);
    snprintf(buf[12], 512, "%s2024-01-01 10:00,1,2e,1,2,5\n", h);
    snprintf(buf[13], 512, "%s2024-01-02T14:33:60Z,1,2,1,2,5\n2024-01-02T14:34:00Z,1,2,1,2,5\n", h);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        vx_series s;
        vx_err e;
        vx_status st = parse(cases[i].text, &s, &e);
        vx_series_free(&s);
        if (st != cases[i].status) fail_msg("case %zu: status %d, message: %s", i, st, e.msg);
        assert_int_equal(e.line, cases[i].line);
        assert_string_equal(e.field, cases[i].field);
        assert_string_equal(e.file, "t.csv");
        if (!strstr(e.msg, cases[i].words))
            fail_msg("case %zu: '%s' lacks '%s'", i, e.msg, cases[i].words);
        assert_null(strchr(e.msg, '\n'));
        assert_true(strncmp(e.msg, "t.csv: ", 7) == 0);
    }
}

static void test_csv_other_price_checks(void **state)
{
    (void)state;
    const char *h = "timestamp,open,high,low,close,volume\n";
    const char *rows[] = {"2024-01-01,3,2.5,1,2,5\n",   /* high < open */
                          "2024-01-01,1.5,2,1.6,2,5\n", /* low > open */
                          "2024-01-01,1,2,1,2,-5\n",    /* volume < 0 */
                          "2024-01-01,1,inf,1,2,5\n",   /* not finite */
                          "2024-01-01,0,0,0,0,5\n",     /* zero is not a price */
                          "2024-01-01,2,3,1.5,1.2,5\n", /* low > close (low <= open) */
                          "2024-01-01,1,1.5,1,2,5\n"};  /* high < close (high >= open) */
    const char *fields[] = {"high", "low", "volume", "high", "open", "low", "high"};
    for (int i = 0; i < 7; i++) {
        char text[256];
        snprintf(text, sizeof text, "%s%s", h, rows[i]);
        vx_series s;
        vx_err e;
        assert_int_equal(parse(text, &s, &e), VX_ERR_VALIDATION);
        assert_string_equal(e.field, fields[i]);
        vx_series_free(&s);
    }
}

static void test_csv_write_read_roundtrip(void **state)
{
    (void)state;
    char dir[64], path[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/x.csv", dir);
    vx_series s;
    th_synth(&s, 3, 5, 0.1);
    s.open[7] = 4000.1234567891234; /* not on the tick grid: needs 17 digits */
    s.high[7] = fmax(s.high[7], s.open[7]);
    s.low[7] = fmin(s.low[7], s.open[7]);
    vx_err e;
    assert_int_equal(vx_csv_write(path, &s, &e), VX_OK);
    vx_series r = {0};
    assert_int_equal(vx_csv_read(path, NULL, &r, &e), VX_OK);
    assert_int_equal(r.n, s.n);
    assert_memory_equal(r.ts, s.ts, s.n * sizeof *s.ts);
    assert_memory_equal(r.open, s.open, s.n * sizeof(double));
    assert_memory_equal(r.high, s.high, s.n * sizeof(double));
    assert_memory_equal(r.low, s.low, s.n * sizeof(double));
    assert_memory_equal(r.close, s.close, s.n * sizeof(double));
    assert_memory_equal(r.volume, s.volume, s.n * sizeof(double));
    assert_string_equal(r.instrument, "x");
    assert_int_equal(r.interval_ns, 60000000000ll);
    vx_series_free(&s);
    vx_series_free(&r);
    th_rmtree(dir);
}

static void test_load_several_files_in_time_order(void **state)
{
    (void)state;
    char dir[64], a[128], b[128], c[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/day2.csv", dir);
    snprintf(b, sizeof b, "%s/day1.csv", dir);
    const char *h = "timestamp,open,high,low,close,volume\n";
    char t[512];
    snprintf(t, sizeof t, "%s2024-01-03 10:00,5,6,4,5,1\n2024-01-03 10:01,5,6,4,6,1\n", h);
    th_write_str(a, t);
    snprintf(t, sizeof t, "%s2024-01-02 10:00,1,2,1,2,1\n2024-01-02 10:01,2,3,2,3,1\n", h);
    th_write_str(b, t);
    vx_series s = {0};
    vx_err e;
    const char *one[1] = {dir};
    assert_int_equal(vx_series_load(one, 1, NULL, &s, &e), VX_OK);
    assert_int_equal(s.n, 4);
    for (size_t i = 1; i < s.n; i++) assert_true(s.ts[i] > s.ts[i - 1]);
    assert_true(s.close[0] == 2 && s.close[3] == 6);
    assert_int_equal(s.interval_ns, 60000000000ll); /* the files' interval carries over */
    /* the folder is read in name order: the first file (day1) names the series */
    assert_string_equal(s.instrument, "day1");
    vx_series_free(&s);
    /* a timestamp in two files */
    snprintf(c, sizeof c, "%s/dup.csv", dir);
    snprintf(t, sizeof t, "%s2024-01-03 10:01,5,6,4,6,1\n", h);
    th_write_str(c, t);
    const char *three[3] = {a, b, c};
    assert_int_equal(vx_series_load(three, 3, NULL, &s, &e), VX_ERR_VALIDATION);
    assert_non_null(strstr(e.msg, "duplicate timestamp 2024-01-03T10:01:00Z"));
    assert_non_null(strstr(e.msg, "day2.csv"));
    assert_non_null(strstr(e.msg, "dup.csv"));
    assert_string_equal(e.field, "timestamp");
    /* the later file in the list is the one refused, with 1-based bar numbers on both sides:
     * dup.csv's bar 1 repeats day2.csv's bar 2 */
    assert_string_equal(e.file, c);
    if (!strstr(e.msg, "bar 1: duplicate") || !strstr(e.msg, "day2.csv (bar 2)"))
        fail_msg("%s", e.msg);
    vx_series_free(&s);
    /* files of different bar intervals (1 minute, 5 minutes) do not make one series */
    snprintf(c, sizeof c, "%s/five.csv", dir);
    snprintf(t, sizeof t, "%s2024-01-04 10:00,5,6,4,5,1\n2024-01-04 10:05,5,6,4,6,1\n", h);
    th_write_str(c, t);
    const char *mixed[2] = {a, c};
    assert_int_equal(vx_series_load(mixed, 2, NULL, &s, &e), VX_ERR_VALIDATION);
    assert_string_equal(e.field, "interval");
    assert_non_null(strstr(e.msg, "differs"));
    vx_series_free(&s);
    /* one file is read as it is, its reader's source label kept */
    const char *single[1] = {b};
    assert_int_equal(vx_series_load(single, 1, NULL, &s, &e), VX_OK);
    char src[160];
    snprintf(src, sizeof src, "csv %s", b);
    assert_string_equal(s.source, src);
    vx_series_free(&s);
    /* a missing file */
    const char *missing[1] = {"/nonexistent/bars.csv"};
    assert_int_equal(vx_series_load(missing, 1, NULL, &s, &e), VX_ERR_IO);
    assert_non_null(strstr(e.msg, "/nonexistent/bars.csv"));
    th_rmtree(dir);
}

/* A folder's files come back in name order whatever order the folder lists them in, and hidden
 * files (an editor's or the OS's: .DS_Store, .notes.swp) are not data. */
static void test_folder_listing_sorted_without_hidden_files(void **state)
{
    (void)state;
    char dir[64], p[128];
    th_tmpdir(dir, sizeof dir);
    const char *names[6] = {"d.csv", "b.csv", "f.csv", "a.csv", "e.csv", "c.csv"};
    const char *h = "timestamp,open,high,low,close,volume\n";
    for (int i = 0; i < 6; i++) {
        char t[256];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        /* file "a" holds 2024-01-02 10:00, "b" 10:01, … */
        snprintf(t, sizeof t, "%s2024-01-02 10:0%d,1,2,1,2,1\n", h, names[i][0] - 'a');
        th_write_str(p, t);
    }
    snprintf(p, sizeof p, "%s/.DS_Store", dir);
    th_write_str(p, "not data\n");
    const char *one[1] = {dir};
    char **files;
    size_t nf;
    vx_err e;
    assert_int_equal(vx_paths_expand(one, 1, &files, &nf, &e), VX_OK);
    assert_int_equal(nf, 6);
    for (size_t i = 0; i < nf; i++) {
        char want[128];
        snprintf(want, sizeof want, "%s/%c.csv", dir, (char)('a' + i));
        assert_string_equal(files[i], want);
    }
    vx_paths_free(files, nf);
    vx_series s = {0};
    assert_int_equal(vx_series_load(one, 1, NULL, &s, &e), VX_OK);
    assert_int_equal(s.n, 6);
    assert_string_equal(s.instrument, "a");
    vx_series_free(&s);
    th_rmtree(dir);
}

static void test_stats_report_gaps(void **state)
{
    (void)state;
    vx_series s;
    vx_err e;
    const char *csv = "timestamp,open,high,low,close,volume\n"
                      "2024-01-02 10:00,1,2,1,2,1\n2024-01-02 10:01,1,2,1,2,1\n"
                      "2024-01-02 10:02,1,2,1,2,1\n2024-01-02 10:07,1,2,1,2,1\n"
                      "2024-01-02 10:08,1,2,1,2,1\n2024-01-02 10:10,1,2,1,2,1\n";
    assert_int_equal(parse(csv, &s, &e), VX_OK);
    vx_series_stats st;
    vx_series_stats_compute(&s, &st);
    assert_int_equal(st.bars, 6);
    assert_int_equal(st.interval_ns, 60000000000ll);
    assert_int_equal(st.gaps, 2);
    assert_int_equal(st.largest_gap_ns, 300000000000ll);
    assert_int_equal(st.largest_gap_at, s.ts[3]);
    vx_series_free(&s);
    /* spacings 1, 1, 2, 2 minutes: a tie, and the finer spacing is the interval (the coarser
     * bars are gaps rather than the 1-minute bars being read as too dense) */
    const char *tie = "timestamp,open,high,low,close,volume\n"
                      "2024-01-02 10:00,1,2,1,2,1\n2024-01-02 10:01,1,2,1,2,1\n"
                      "2024-01-02 10:02,1,2,1,2,1\n2024-01-02 10:04,1,2,1,2,1\n"
                      "2024-01-02 10:06,1,2,1,2,1\n";
    assert_int_equal(parse(tie, &s, &e), VX_OK);
    assert_int_equal(s.interval_ns, 60000000000ll);
    vx_series_stats_compute(&s, &st);
    assert_int_equal(st.gaps, 2);
    vx_series_free(&s);
    /* bars 584 years apart are further apart than int64 nanoseconds hold: the spacing
     * saturates rather than wrapping negative */
    assert_int_equal(parse("timestamp,open,high,low,close,volume\n1678-01-01,1,2,1,2,1\n"
                           "2262-01-01,1,2,1,2,1\n",
                           &s, &e),
                     VX_OK);
    assert_int_equal(s.interval_ns, INT64_MAX);
    vx_series_stats_compute(&s, &st);
    assert_int_equal(st.gaps, 0);
    vx_series_free(&s);
}

static void test_synth_is_deterministic_and_consistent(void **state)
{
    (void)state;
    vx_series a, b, c;
    th_synth(&a, 10, 7, 0.15);
    th_synth(&b, 10, 7, 0.15);
    th_synth(&c, 10, 8, 0.15);
    assert_int_equal(a.n, 3900);
    assert_memory_equal(a.close, b.close, a.n * sizeof(double));
    assert_memory_equal(a.volume, b.volume, a.n * sizeof(double));
    assert_true(memcmp(a.close, c.close, a.n * sizeof(double)) != 0);
    char why[160];
    for (size_t i = 0; i < a.n; i++) {
        assert_null(vx_bar_check(i ? a.ts[i - 1] : INT64_MIN, a.ts[i], a.open[i], a.high[i],
                                 a.low[i], a.close[i], a.volume[i], why, sizeof why));
        double px[4] = {a.open[i], a.high[i], a.low[i], a.close[i]};
        for (int k = 0; k < 4; k++) assert_true(fmod(px[k], 0.25) == 0.0);
    }
    /* sessions: 390 bars from 09:30 New York time on weekdays */
    for (size_t d = 0; d < 10; d++) {
        int64_t t0 = a.ts[d * 390] / 1000000000;
        int64_t local = t0 + vx_eastern_offset_s(t0);
        assert_int_equal(local % 86400, 9 * 3600 + 30 * 60);
        int64_t day = local / 86400;
        int wd = (int)((day % 7 + 7 + 4) % 7);
        assert_true(wd >= 1 && wd <= 5);
        assert_int_equal(a.ts[d * 390 + 389] - a.ts[d * 390], 389 * 60000000000ll);
    }
    vx_series_free(&a);
    vx_series_free(&b);
    vx_series_free(&c);
}

static double signal_corr(double strength)
{
    vx_synth_cfg cfg;
    vx_synth_default(&cfg);
    cfg.days = 40;
    cfg.signal_strength = strength;
    vx_series s = {0};
    double *sig;
    vx_err e;
    assert_int_equal(vx_synth_generate(&cfg, &s, &sig, &e), VX_OK);
    /* correlation between the signal in force at bar t and bar t's close-to-close return,
     * within sessions (the overnight gap is excluded) */
    double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
    size_t n = 0;
    for (size_t t = 1; t < s.n; t++) {
        if (t % 390 == 0) continue;
        double r = log(s.close[t] / s.close[t - 1]), x = sig[t];
        sx += x, sy += r, sxx += x * x, syy += r * r, sxy += x * r;
        n++;
    }
    double cov = sxy / n - sx / n * sy / n;
    double c = cov / sqrt((sxx / n - sx / n * sx / n) * (syy / n - sy / n * sy / n));
    free(sig);
    vx_series_free(&s);
    return c;
}

static void test_synth_planted_signal(void **state)
{
    (void)state;
    /* 15,600 bars: the correlation's standard error is about 0.008 */
    double c0 = signal_corr(0.0), c3 = signal_corr(0.3);
    assert_true(fabs(c0) < 0.03);
    assert_true(c3 > 0.15);
}

/* A small fuzz of the CSV reader: damaged copies of a valid file must parse or fail with a
 * one-line message (ASan checks the memory accesses in the sanitizer run). */
static void test_damaged_csv_never_crashes(void **state)
{
    (void)state;
    const char *good = "Date,Time,Open,High,Low,Close,Volume\n"
                       "2024-01-02,09:30,4000.25,4001,3999.75,4000.5,120\n"
                       "2024-01-02,09:31,4000.5,4002,4000,4001.75,80\n"
                       "2024-01-02,09:32,4001.75,4003,4001.5,4002,95\n";
    size_t n = strlen(good);
    char *c = malloc(n + 1);
    const char alphabet[] = ",;\t\n\r.:-+eE0123456789 \"nNaA";
    vx_rng r = vx_rng_make(99, 2, 0);
    size_t failed = 0;
    for (int it = 0; it < 5000; it++) {
        memcpy(c, good, n + 1);
        size_t len = n;
        int flips = 1 + (int)vx_rng_below(&r, 6);
        for (int f = 0; f < flips; f++)
            c[vx_rng_below(&r, (uint32_t)n)] = alphabet[vx_rng_below(&r, sizeof alphabet - 1)];
        if (vx_rng_below(&r, 4) == 0) len = vx_rng_below(&r, (uint32_t)n);
        vx_series s = {0};
        vx_err e;
        vx_err_clear(&e);
        if (vx_csv_parse("f.csv", c, len, NULL, &s, &e) != VX_OK) {
            failed++;
            assert_true(strncmp(e.msg, "f.csv: ", 7) == 0);
            assert_null(strchr(e.msg, '\n'));
        } else {
            for (size_t i = 1; i < s.n; i++) assert_true(s.ts[i] > s.ts[i - 1]);
        }
        vx_series_free(&s);
    }
    assert_true(failed > 1000);
    free(c);
}

/* Every synthetic parameter finite and in range: `vixen data synth --strength nan` once wrote NaN
 * prices and exited 0. */
static void test_synth_refuses_bad_parameters(void **state)
{
    (void)state;
    struct {
        const char *field;
        size_t off;
        double v;
    } bad[] = {
        {"signal_strength", offsetof(vx_synth_cfg, signal_strength), NAN},
        {"signal_strength", offsetof(vx_synth_cfg, signal_strength), INFINITY},
        {"signal_strength", offsetof(vx_synth_cfg, signal_strength), -0.5},
        {"signal_phi", offsetof(vx_synth_cfg, signal_phi), NAN},
        {"signal_phi", offsetof(vx_synth_cfg, signal_phi), 1.0},
        {"drift", offsetof(vx_synth_cfg, drift), -INFINITY},
        {"drift", offsetof(vx_synth_cfg, drift), NAN},
        {"t_dof", offsetof(vx_synth_cfg, t_dof), NAN},
        {"t_dof", offsetof(vx_synth_cfg, t_dof), 1e300},
        {"bar_vol", offsetof(vx_synth_cfg, bar_vol), INFINITY},
        {"garch_alpha", offsetof(vx_synth_cfg, garch_alpha), NAN},
        {"start_price", offsetof(vx_synth_cfg, start_price), NAN},
        {"tick", offsetof(vx_synth_cfg, tick), 0},
        {"intraday_u", offsetof(vx_synth_cfg, intraday_u), NAN},
        {"overnight_vol", offsetof(vx_synth_cfg, overnight_vol), -1},
        {"base_volume", offsetof(vx_synth_cfg, base_volume), NAN},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        vx_synth_cfg c;
        vx_synth_default(&c);
        c.days = 2;
        memcpy((char *)&c + bad[i].off, &bad[i].v, sizeof(double));
        vx_series s = {0};
        vx_err e;
        vx_err_clear(&e);
        vx_status st = vx_synth_generate(&c, &s, NULL, &e);
        if (st != VX_ERR_ARG || strcmp(e.field, bad[i].field) != 0)
            fail_msg("%s = %g: status %d, '%s'", bad[i].field, bad[i].v, st, e.msg);
        assert_int_equal(vx_synth_check(&c, &e), VX_ERR_ARG);
        assert_int_equal(s.n, 0);
        vx_series_free(&s);
    }
    vx_synth_cfg c;
    vx_synth_default(&c);
    c.days = 50001; /* past 2262, nanosecond timestamps overflow */
    vx_err e;
    assert_int_equal(vx_synth_check(&c, &e), VX_ERR_ARG);
    assert_string_equal(e.field, "days");
    /* in range, but the prices leave it: a drift of -10 a year reaches the tick within 2 years */
    c.days = 1000;
    c.drift = -10;
    vx_series s = {0};
    assert_int_equal(vx_synth_generate(&c, &s, NULL, &e), VX_ERR_ARG);
    if (!strstr(e.msg, "out of range")) fail_msg("%s", e.msg);
    vx_series_free(&s);
    vx_synth_default(&c);
    c.days = 1;
    c.signal_phi = -0.5;
    assert_int_equal(vx_synth_generate(&c, &s, NULL, &e), VX_OK);
    vx_series_free(&s);
}

static void hung(int sig)
{
    (void)sig;
    static const char msg[] = "test_data: hung on a FIFO\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

/* A FIFO given as data is refused at once (opening one for reading blocks until a writer comes):
 * the readers, the loader, the cache key and the market; a folder holding one skips it. */
static void test_fifo_refused(void **state)
{
    (void)state;
    char dir[64], fifo[128], sub[128], csv[160], sub_fifo[160], cache[128];
    th_tmpdir(dir, sizeof dir);
    snprintf(fifo, sizeof fifo, "%s/bars.csv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    signal(SIGALRM, hung);
    alarm(20);
    const char *paths[1] = {fifo};
    vx_series s = {0};
    vx_err e;
    assert_int_equal(vx_series_load(paths, 1, NULL, &s, &e), VX_ERR_IO);
    if (!strstr(e.msg, "not a regular file (a FIFO)") || !strstr(e.msg, fifo))
        fail_msg("%s", e.msg);
    assert_int_equal(vx_csv_read(fifo, NULL, &s, &e), VX_ERR_IO);
    assert_int_equal(vx_dbn_read(fifo, NULL, &s, NULL, &e), VX_ERR_IO);
    char key[33];
    assert_int_equal(vx_cache_key(paths, 1, NULL, key, &e), VX_ERR_IO);
    vx_market m;
    assert_int_equal(vx_market_open(paths, 1, NULL, cache, &m, &e), VX_ERR_IO);
    assert_int_equal(vx_market_open(paths, 1, NULL, NULL, &m, &e), VX_ERR_IO);
    /* in a folder, only regular files are data */
    snprintf(sub, sizeof sub, "%s/day", dir);
    assert_int_equal(vx_mkdirs(sub, &e), VX_OK);
    snprintf(csv, sizeof csv, "%s/a.csv", sub);
    snprintf(sub_fifo, sizeof sub_fifo, "%s/b.csv", sub);
    th_write_str(csv, "timestamp,open,high,low,close,volume\n2024-01-02T14:30:00Z,1,2,1,2,3\n");
    assert_int_equal(mkfifo(sub_fifo, 0600), 0);
    const char *folder[1] = {sub};
    assert_int_equal(vx_series_load(folder, 1, NULL, &s, &e), VX_OK);
    assert_int_equal(s.n, 1);
    assert_int_equal(vx_cache_key(folder, 1, NULL, key, &e), VX_OK);
    alarm(0);
    vx_series_free(&s);
    th_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_basic_and_extra_columns),
        cmocka_unit_test(test_csv_series_grows_without_losing_bars),
        cmocka_unit_test(test_csv_timestamp_formats),
        cmocka_unit_test(test_datetime_parser),
        cmocka_unit_test(test_eastern_time),
        cmocka_unit_test(test_csv_rejects_bad_input),
        cmocka_unit_test(test_csv_other_price_checks),
        cmocka_unit_test(test_csv_write_read_roundtrip),
        cmocka_unit_test(test_load_several_files_in_time_order),
        cmocka_unit_test(test_folder_listing_sorted_without_hidden_files),
        cmocka_unit_test(test_stats_report_gaps),
        cmocka_unit_test(test_synth_is_deterministic_and_consistent),
        cmocka_unit_test(test_synth_planted_signal),
        cmocka_unit_test(test_damaged_csv_never_crashes),
        cmocka_unit_test(test_synth_refuses_bad_parameters),
        cmocka_unit_test(test_fifo_refused),
    };
    int failed = cmocka_run_group_tests_name("data_csv", tests, NULL, NULL);
    failed += run_dbn_tests();
    failed += run_feature_tests();
    failed += run_feature_ref_tests();
    return failed ? 1 : 0;
}

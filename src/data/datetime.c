/* datetime.c — calendar arithmetic and the timestamp formats the CSV reader accepts.
 *
 * Accepted: YYYY-MM-DD; YYYY-MM-DD HH:MM[:SS[.f…]] with a space or 'T' between; optionally
 * followed by 'Z' or an offset (+HH:MM, +HHMM, +HH). A time without an offset is UTC. Fractions
 * of up to 9 digits (nanoseconds; more are refused, not cut). A second of 60 only at 23:59 (a leap
 * second, folded onto the next day's first). Days from the civil date use Howard Hinnant's
 * algorithm (exact for the proleptic Gregorian calendar). */
#include "vixen/data.h"
#include "data_internal.h"

#include <string.h>

int64_t vx_days_from_civil(int y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return (int64_t)era * 146097 + (int64_t)doe - 719468;
}

void vx_civil_from_days(int64_t z, int *y, unsigned *m, unsigned *d)
{
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t yy = (int64_t)yoe + era * 400;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int)(yy + (*m <= 2));
}

static int digits(const char *s, size_t len, size_t at, size_t n, int *out)
{
    if (at + n > len) return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[at + i];
        if (c < '0' || c > '9') return -1;
        v = v * 10 + (c - '0');
    }
    *out = v;
    return 0;
}

static int days_in_month(int y, int m)
{
    static const int dm[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 ? 28 + leap : dm[m - 1];
}

int vx_parse_datetime(const char *s, size_t len, int64_t *ns_out)
{
    int y, mo, d, hh = 0, mi = 0, ss = 0;
    int64_t frac_ns = 0;
    if (digits(s, len, 0, 4, &y) || len < 10 || s[4] != '-' || digits(s, len, 5, 2, &mo) ||
        s[7] != '-' || digits(s, len, 8, 2, &d))
        return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo)) return -1;
    size_t i = 10;
    if (i < len && (s[i] == 'T' || s[i] == ' ')) {
        i++;
        if (digits(s, len, i, 2, &hh) || i + 2 >= len || s[i + 2] != ':' ||
            digits(s, len, i + 3, 2, &mi))
            return -1;
        i += 5;
        if (i < len && s[i] == ':') {
            if (digits(s, len, i + 1, 2, &ss)) return -1;
            i += 3;
            if (i < len && (s[i] == '.' || s[i] == ',')) {
                i++;
                size_t nd = 0;
                int64_t scale = 100000000;
                while (i < len && s[i] >= '0' && s[i] <= '9') {
                    if (nd < 9) {
                        frac_ns += (s[i] - '0') * scale;
                        scale /= 10;
                    }
                    nd++;
                    i++;
                }
                if (nd == 0 || nd > 9) return -1; /* finer than a nanosecond: not dropped */
            }
        }
        if (hh > 23 || mi > 59 || ss > 60) return -1;
    }
    int64_t offset_s = 0;
    if (i < len && s[i] == 'Z') {
        i++;
    } else if (i < len && (s[i] == '+' || s[i] == '-')) {
        int sign = s[i] == '-' ? -1 : 1, oh, om = 0;
        if (digits(s, len, i + 1, 2, &oh)) return -1;
        i += 3;
        if (i < len && s[i] == ':') i++;
        if (i < len) {
            if (digits(s, len, i, 2, &om)) return -1;
            i += 2;
        }
        if (oh > 23 || om > 59) return -1;
        offset_s = sign * (oh * 3600 + om * 60);
    }
    if (i != len) return -1;
    /* a second of 60 is a leap second, which only ends a UTC day (23:59:60Z, folded onto the next
     * day's first second); anywhere else it is an error, not the next minute */
    if (ss == 60 && (((hh * 60 + mi) * 60 - offset_s) % 86400 + 86400) % 86400 != 86340) return -1;
    int64_t days = vx_days_from_civil(y, (unsigned)mo, (unsigned)d);
    int64_t secs = days * 86400 + hh * 3600 + mi * 60 + ss - offset_s;
    /* int64 nanoseconds reach from 1677 to 2262; outside that the time cannot be stored */
    if (secs > INT64_MAX / 1000000000 - 1 || secs < INT64_MIN / 1000000000 + 1) return -1;
    *ns_out = secs * 1000000000 + frac_ns;
    return 0;
}

void vx_format_ts(int64_t ns, char *buf, size_t n)
{
    int64_t secs = ns >= 0 ? ns / 1000000000 : -((-ns + 999999999) / 1000000000);
    int64_t sub = ns - secs * 1000000000;
    int64_t days = secs >= 0 ? secs / 86400 : -((-secs + 86399) / 86400);
    int64_t sod = secs - days * 86400;
    int y;
    unsigned m, d;
    vx_civil_from_days(days, &y, &m, &d);
    if (sub)
        snprintf(buf, n, "%04d-%02u-%02uT%02d:%02d:%02d.%09dZ", y, m, d, (int)(sod / 3600),
                 (int)(sod % 3600 / 60), (int)(sod % 60), (int)sub);
    else
        snprintf(buf, n, "%04d-%02u-%02uT%02d:%02d:%02dZ", y, m, d, (int)(sod / 3600),
                 (int)(sod % 3600 / 60), (int)(sod % 60));
}

/* US Eastern time: UTC-5, or UTC-4 from the second Sunday of March 02:00 local to the first
 * Sunday of November 02:00 local (the rule since 2007; earlier years use it too, knowingly). */
int64_t vx_eastern_offset_s(int64_t utc_s)
{
    int64_t days = utc_s >= 0 ? utc_s / 86400 : -((-utc_s + 86399) / 86400);
    int y;
    unsigned m, d;
    vx_civil_from_days(days, &y, &m, &d);
    /* weekday of March 1 and November 1: 1970-01-01 was a Thursday (4, with Sunday = 0) */
    int64_t mar1 = vx_days_from_civil(y, 3, 1), nov1 = vx_days_from_civil(y, 11, 1);
    int wd_mar1 = (int)(((mar1 % 7) + 7 + 4) % 7), wd_nov1 = (int)(((nov1 % 7) + 7 + 4) % 7);
    int64_t dst_start_day = mar1 + (7 - wd_mar1) % 7 + 7;            /* second Sunday */
    int64_t dst_end_day = nov1 + (7 - wd_nov1) % 7;                  /* first Sunday */
    int64_t start_utc = dst_start_day * 86400 + 2 * 3600 + 5 * 3600; /* 02:00 EST */
    int64_t end_utc = dst_end_day * 86400 + 2 * 3600 + 4 * 3600;     /* 02:00 EDT */
    return (utc_s >= start_utc && utc_s < end_utc) ? -4 * 3600 : -5 * 3600;
}

/* timer.c — a monotonic clock and the progress line for long jobs.
 *
 * On a terminal the line is redrawn in place at most ten times a second; when stderr is a file or
 * a pipe (CI logs, nohup) it prints a plain line at most every five seconds, so logs stay short. */
#define _POSIX_C_SOURCE 200809L
#include "vixen/util.h"

#include <time.h>
#include <unistd.h>

uint64_t vx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double vx_seconds_since(uint64_t start_ns) { return (double)(vx_now_ns() - start_ns) * 1e-9; }

const char *vx_format_count(double x, char *buf, size_t n)
{
    const char *suffix[] = {"", " k", " M", " G", " T"};
    int i = 0;
    while (x >= 1000.0 && i < 4) {
        x /= 1000.0;
        i++;
    }
    snprintf(buf, n, i == 0 ? "%.0f%s" : "%.2f%s", x, suffix[i]);
    return buf;
}

const char *vx_format_duration(double s, char *buf, size_t n)
{
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, n, "?");
    } else if (s < 60) {
        snprintf(buf, n, "%.1fs", s);
    } else if (s < 3600) {
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    } else {
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
    }
    return buf;
}

void vx_progress_start(vx_progress *p, FILE *out, const char *label, const char *unit,
                       uint64_t total)
{
    p->out = out;
    p->label = label;
    p->unit = unit;
    p->total = total;
    p->start_ns = p->last_ns = vx_now_ns();
    p->tty = out && isatty(fileno(out));
    p->printed = 0;
}

static void progress_print(vx_progress *p, uint64_t done, int final)
{
    double el = vx_seconds_since(p->start_ns);
    double rate = el > 0 ? (double)done / el : 0.0;
    char rb[32], eb[32], tb[32];
    vx_format_count(rate, rb, sizeof rb);
    vx_format_duration(el, tb, sizeof tb);
    if (p->total > 0) {
        double frac = (double)done / (double)p->total;
        double eta =
            rate > 0 ? (double)(p->total - (done < p->total ? done : p->total)) / rate : -1;
        vx_format_duration(final ? 0 : eta, eb, sizeof eb);
        fprintf(p->out, "%s%s %5.1f%% %llu/%llu %s, %s%s/s, elapsed %s, eta %s%s",
                p->tty ? "\r\033[K" : "", p->label, 100.0 * frac, (unsigned long long)done,
                (unsigned long long)p->total, p->unit, rb, p->unit, tb, eb,
                (p->tty && !final) ? "" : "\n");
    } else {
        fprintf(p->out, "%s%s %llu %s, %s%s/s, elapsed %s%s", p->tty ? "\r\033[K" : "", p->label,
                (unsigned long long)done, p->unit, rb, p->unit, tb, (p->tty && !final) ? "" : "\n");
    }
    fflush(p->out);
    p->printed = 1;
}

void vx_progress_update(vx_progress *p, uint64_t done)
{
    if (!p->out) return;
    uint64_t now = vx_now_ns();
    uint64_t every = p->tty ? 100000000ull : 5000000000ull;
    if (now - p->last_ns < every) return;
    p->last_ns = now;
    progress_print(p, done, 0);
}

void vx_progress_finish(vx_progress *p, uint64_t done)
{
    if (!p->out) return;
    progress_print(p, done, 1);
}

static vx_progress_sink g_progress;
static void *g_progress_ctx;

void vx_progress_set_sink(vx_progress_sink sink, void *ctx)
{
    g_progress = sink;
    g_progress_ctx = ctx;
}

void vx_progress_report(const char *job, const char *unit, uint64_t done, uint64_t total)
{
    if (g_progress) g_progress(job, unit, done, total, g_progress_ctx);
}

/* svg.h — the pieces of a self-contained HTML page with SVG charts, drawn in C: HTML escaping,
 * number formats, and plots (axes with round steps, lines thinned to at most VX_PLOT_MAX_POINTS
 * points that keep each stretch's extremes). A run's report.html (src/train/report.c) and a
 * study's (src/hyperopt/study_report.c) are made with them; no script, nothing fetched. */
#ifndef VIXEN_SVG_H
#define VIXEN_SVG_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VX_PLOT_MAX_POINTS 1500

/* The pages' style sheet (inline in each page's <style>). */
extern const char *const vx_page_css;

/* Text for HTML: & < > " ' escaped, control characters other than tab and line ends dropped. */
void vx_html_esc_n(FILE *f, const char *s, size_t n);
void vx_html_esc(FILE *f, const char *s);
/* v with `dec` decimals and thousands separators, a real minus sign; "–" when undefined. */
const char *vx_fmt_num(char *buf, size_t n, double v, int dec);
/* "+$1,234" / "−$1,234" */
const char *vx_fmt_money_signed(char *buf, size_t n, double v);
/* Axis label of a dollar value: $1,500 / $25k / $1.5M, by the axis' size. */
const char *vx_fmt_axis_money(char *buf, size_t n, double v, double step, double top);

typedef struct {
    FILE *f;
    double l, t, w, h;     /* the plot area, in px */
    double x0, x1, y0, y1; /* the data range it shows */
} vx_plot;

double vx_plot_clamp(double v);
/* Data coordinates to pixels. */
double vx_plot_x(const vx_plot *p, double x);
double vx_plot_y(const vx_plot *p, double y);
/* A step of 1, 2, 2.5 or 5 · 10^k giving about n intervals over span. */
double vx_nice_step(double span, int n);
/* Widens [lo, hi] to whole steps of about n intervals; returns the step. */
double vx_nice_range(double *lo, double *hi, int n);
/* Decimals that show every multiple of step exactly (0.25 → 2). */
int vx_step_decimals(double step);
void vx_svg_open(FILE *f, const char *id, double w, double h, const char *label);
/* Horizontal grid lines and labels every step over [y0, y1] (money or plain numbers), the zero
 * line darker, and the frame's left and bottom edges. */
void vx_plot_y_axis(const vx_plot *p, double step, int money);
void vx_plot_x_tick(const vx_plot *p, double x, const char *label);
/* Whole-number ticks (epochs, trials) over [x0, x1], and the axis title. */
void vx_plot_x_axis_int(const vx_plot *p, const char *title);
/* The points to draw of y[0..n): all when few; else, per bucket, its first, lowest and highest
 * point in order, and the last point. Returns how many (≤ VX_PLOT_MAX_POINTS + 1) went into idx. */
size_t vx_plot_thin(const double *y, size_t n, size_t *idx);
/* The "d" of a line through (x[i], y[i]) (x NULL: x = i), thinned; a non-finite y lifts the
 * pen. idx: room for VX_PLOT_MAX_POINTS + 2. */
void vx_plot_path(const vx_plot *p, const double *x, const double *y, size_t n, size_t *idx);
void vx_plot_line(const vx_plot *p, const char *name, const char *colour, double width,
                  const char *dash, const double *x, const double *y, size_t n, size_t *idx);
/* Widens [*lo, *hi] to the finite values of y. */
void vx_minmax(const double *y, size_t n, double *lo, double *hi);

#ifdef __cplusplus
}
#endif

#endif

/* svg.c — HTML text and SVG plots for the self-contained report pages (svg.h). */
#include "vixen/svg.h"

#include <math.h>
#include <string.h>

/* The pages' one style sheet: plain system fonts, tables with tabular figures, charts that
 * scale down with the window. */
const char *const vx_page_css =
    "*{box-sizing:border-box}\n"
    "body{margin:0 auto;max-width:1120px;padding:24px 28px 48px;color:#1f2328;background:#fff;"
    "font:14px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif}\n"
    "h1{font-size:22px;margin:0 0 2px}\n"
    "h2{font-size:17px;margin:34px 0 10px;padding-bottom:4px;border-bottom:1px solid #d0d7de}\n"
    "h3{font-size:14px;margin:16px 0 4px}\n"
    "code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}\n"
    ".muted,.note{color:#656d76}\n"
    ".note{font-size:12.5px;margin:4px 0 10px}\n"
    ".facts{margin:14px 0;padding:0;list-style:none}\n"
    ".facts li{margin:3px 0}\n"
    ".warn{background:#fff8c5;border:1px solid #d4a72c;border-left:6px solid #bf8700;"
    "border-radius:6px;padding:10px 16px;margin:16px 0}\n"
    ".warn ul{margin:6px 0 0 18px;padding:0}\n"
    ".ok{color:#1a7f37}\n"
    ".scroll{overflow-x:auto}\n"
    "table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}\n"
    "th,td{padding:5px 9px;border-bottom:1px solid #d0d7de;text-align:right;white-space:nowrap}\n"
    "th:first-child,td:first-child{text-align:left}\n"
    "thead th{background:#f6f8fa;font-weight:600}\n"
    "tr.agent td{font-weight:600;background:#ddf4ff}\n"
    "tr.in_sample td{color:#656d76;font-style:italic}\n"
    ".swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px}\n"
    "svg.chart{display:block;max-width:100%;height:auto}\n"
    "svg text{font-family:system-ui,sans-serif;font-size:11px;fill:#57606a}\n"
    "svg text.lg{font-size:12px;fill:#1f2328}\n"
    "svg text.lv{font-size:12px;font-weight:600;fill:#1f2328}\n"
    ".grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:8px "
    "28px}\n"
    "figure{margin:0}\n"
    "pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:12px 14px;"
    "overflow:auto;font:12px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}\n"
    "footer{margin-top:36px;font-size:12px;color:#656d76}\n";

/* ---- HTML text ------------------------------------------------------------------------------- */

void vx_html_esc_n(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            /* control characters other than tab and line ends are not text; drop them */
            if (ch >= 0x20 || ch == '\n' || ch == '\t') fputc(ch, f);
        }
    }
}

void vx_html_esc(FILE *f, const char *s) { vx_html_esc_n(f, s, strlen(s)); }

/* v with `dec` decimals and thousands separators, a real minus sign; "–" when undefined. */
const char *vx_fmt_num(char *buf, size_t n, double v, int dec)
{
    if (!isfinite(v)) return snprintf(buf, n, "–"), buf;
    char digits[64];
    snprintf(digits, sizeof digits, "%.*f", dec, fabs(v));
    int neg = v < 0 && strspn(digits, "0.") != strlen(digits); /* no "−0" */
    size_t int_len = strcspn(digits, "."), k = 0;
    if (neg) k += (size_t)snprintf(buf + k, n - k, "−");
    for (size_t i = 0; digits[i] && k + 2 < n; i++) {
        if (i < int_len && i > 0 && (int_len - i) % 3 == 0) buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k < n ? k : n - 1] = '\0';
    return buf;
}

/* "+$1,234" / "−$1,234" */
const char *vx_fmt_money_signed(char *buf, size_t n, double v)
{
    char a[48];
    vx_fmt_num(a, sizeof a, fabs(v), 0);
    int zero = strcmp(a, "0") == 0;
    snprintf(buf, n, "%s$%s", zero ? "" : v < 0 ? "−" : "+", a);
    return buf;
}

/* ---- charts: plots in SVG -------------------------------------------------------------------- */

double vx_plot_clamp(double v) { return v < -1e5 ? -1e5 : v > 1e5 ? 1e5 : v; }
double vx_plot_x(const vx_plot *p, double x)
{
    return vx_plot_clamp(p->l + (x - p->x0) / (p->x1 - p->x0) * p->w);
}
double vx_plot_y(const vx_plot *p, double y)
{
    return vx_plot_clamp(p->t + (p->y1 - y) / (p->y1 - p->y0) * p->h);
}

/* A step of 1, 2, 2.5 or 5 · 10^k giving about n intervals over span. */
double vx_nice_step(double span, int n)
{
    double raw = span / n, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * mag;
}

/* Widens [lo, hi] to whole steps of about n intervals; returns the step. */
double vx_nice_range(double *lo, double *hi, int n)
{
    if (!isfinite(*lo) || !isfinite(*hi) || !isfinite(*hi - *lo)) *lo = -1, *hi = 1;
    if (!(*hi > *lo)) {
        double d = fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1;
        *lo -= d, *hi += d;
    }
    double s = vx_nice_step(*hi - *lo, n);
    *lo = floor(*lo / s) * s, *hi = ceil(*hi / s) * s;
    return s;
}

/* Decimals that show every multiple of step exactly (0.25 → 2). */
int vx_step_decimals(double step)
{
    int d = 0;
    while (d < 6 && fabs(step * pow(10, d) - round(step * pow(10, d))) > 1e-6 * step * pow(10, d))
        d++;
    return d;
}

/* Axis label of a dollar value: $1,500 / $25k / $1.5M, by the axis' size. */
const char *vx_fmt_axis_money(char *buf, size_t n, double v, double step, double top)
{
    double scale = 1;
    const char *suffix = "";
    if (top >= 1e6) scale = 1e6, suffix = "M";
    else if (top >= 1e4) scale = 1e3, suffix = "k";
    char a[64];
    vx_fmt_num(a, sizeof a, fabs(v) / scale, vx_step_decimals(step / scale));
    if (strchr(a, '.')) { /* 5.0k → 5k */
        size_t k = strlen(a);
        while (a[k - 1] == '0') a[--k] = '\0';
        if (a[k - 1] == '.') a[k - 1] = '\0';
    }
    int zero = strcmp(a, "0") == 0;
    snprintf(buf, n, "%s$%s%s", v < 0 && !zero ? "−" : "", a, zero ? "" : suffix);
    return buf;
}

void vx_svg_open(FILE *f, const char *id, double w, double h, const char *label)
{
    fprintf(f,
            "<svg id=\"%s\" class=\"chart\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" "
            "height=\"%.0f\" role=\"img\" aria-label=\"",
            id, w, h, w, h);
    vx_html_esc(f, label);
    fprintf(f, "\">\n");
}

/* Horizontal grid lines and labels every step over [y0, y1] (money or plain numbers), the zero
 * line darker, and the frame's left and bottom edges. */
void vx_plot_y_axis(const vx_plot *p, double step, int money)
{
    double top = fmax(fabs(p->y0), fabs(p->y1));
    int dec = vx_step_decimals(step);
    for (int k = 0; k <= 40; k++) {
        double v = p->y0 + k * step;
        if (v > p->y1 + step * 1e-6) break;
        if (fabs(v) < step * 1e-6) v = 0;
        double y = vx_plot_y(p, v);
        char lab[64];
        if (money) vx_fmt_axis_money(lab, sizeof lab, v, step, top);
        else vx_fmt_num(lab, sizeof lab, v, dec);
        fprintf(p->f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                p->l, y, p->l + p->w, y, v == 0 ? "#8c959f" : "#eaeef2", p->l - 6, y + 4, lab);
    }
    fprintf(p->f, "<path d=\"M%.1f %.1fV%.1fH%.1f\" fill=\"none\" stroke=\"#8c959f\"/>\n", p->l,
            p->t, p->t + p->h, p->l + p->w);
}

void vx_plot_x_tick(const vx_plot *p, double x, const char *label)
{
    double X = vx_plot_x(p, x), Y = p->t + p->h;
    fprintf(p->f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#8c959f\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
            X, Y, X, Y + 5, X, Y + 18);
    vx_html_esc(p->f, label);
    fprintf(p->f, "</text>\n");
}

/* Whole-number ticks (epochs) over [x0, x1]. */
void vx_plot_x_axis_int(const vx_plot *p, const char *title)
{
    double step = fmax(1, round(vx_nice_step(p->x1 - p->x0, 6)));
    for (double x = ceil(p->x0 / step) * step; x <= p->x1 + 1e-9; x += step) {
        char lab[32];
        snprintf(lab, sizeof lab, "%.0f", x);
        vx_plot_x_tick(p, x, lab);
    }
    fprintf(p->f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", p->l + p->w / 2,
            p->t + p->h + 34, title);
}

/* The points to draw of y[0..n): all when few; else, per bucket, its first, lowest and highest
 * point in order, and the last point. Returns how many (≤ VX_PLOT_MAX_POINTS + 1) went into idx. */
size_t vx_plot_thin(const double *y, size_t n, size_t *idx)
{
    if (n <= VX_PLOT_MAX_POINTS) {
        for (size_t i = 0; i < n; i++) idx[i] = i;
        return n;
    }
    size_t buckets = VX_PLOT_MAX_POINTS / 3, k = 0;
    for (size_t b = 0; b < buckets; b++) {
        size_t lo = b * n / buckets, hi = (b + 1) * n / buckets, mn = lo, mx = lo;
        for (size_t i = lo; i < hi; i++) {
            if (!isfinite(y[i])) continue;
            if (!isfinite(y[mn]) || y[i] < y[mn]) mn = i;
            if (!isfinite(y[mx]) || y[i] > y[mx]) mx = i;
        }
        size_t a = mn < mx ? mn : mx, c = mn < mx ? mx : mn;
        idx[k++] = lo;
        if (a != lo) idx[k++] = a;
        if (c != a) idx[k++] = c;
    }
    if (idx[k - 1] != n - 1) idx[k++] = n - 1;
    return k;
}

/* The "d" of a line through (x[i], y[i]) (x NULL: x = i), thinned; a non-finite y lifts the
 * pen. */
void vx_plot_path(const vx_plot *p, const double *x, const double *y, size_t n, size_t *idx)
{
    size_t k = vx_plot_thin(y, n, idx);
    int pen = 0;
    for (size_t j = 0; j < k; j++) {
        size_t i = idx[j];
        double xv = x ? x[i] : (double)i;
        if (!isfinite(y[i]) || !isfinite(xv)) {
            pen = 0;
            continue;
        }
        fprintf(p->f, "%s%.1f %.1f", pen ? "L" : "M", vx_plot_x(p, xv), vx_plot_y(p, y[i]));
        pen = 1;
    }
}

void vx_plot_line(const vx_plot *p, const char *name, const char *colour, double width,
                  const char *dash, const double *x, const double *y, size_t n, size_t *idx)
{
    fprintf(p->f,
            "<path class=\"series\" data-series=\"%s\" fill=\"none\" stroke=\"%s\" "
            "stroke-width=\"%.1f\" stroke-linejoin=\"round\"",
            name, colour, width);
    if (dash && *dash) fprintf(p->f, " stroke-dasharray=\"%s\"", dash);
    fprintf(p->f, " d=\"");
    vx_plot_path(p, x, y, n, idx);
    fprintf(p->f, "\"/>\n");
}

void vx_minmax(const double *y, size_t n, double *lo, double *hi)
{
    for (size_t i = 0; i < n; i++)
        if (isfinite(y[i])) *lo = fmin(*lo, y[i]), *hi = fmax(*hi, y[i]);
}

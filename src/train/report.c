/* report.c — report.html: the one page a person opens to judge a finished run. What was evaluated
 * and any warnings, the evaluation table, the equity curves of the agent and the baselines on the
 * evaluated split, the agent's drawdown, the training curves (loss, validation Sharpe ± se with the
 * chosen checkpoint marked), the agent's action histograms, and the config.
 *
 * It is made from the run folder's files (eval.json, metrics.csv, config.yaml), not from the
 * training's memory, so `vixen report RUN` can write it again for any run and the page shows
 * exactly what the files say. Everything is read and checked before the page is opened, so bad
 * input is an error naming the file (and line, or JSON field) and no page is written; the page is
 * written to a temporary name and renamed.
 *
 * The page is static and self-contained: inline CSS and SVG drawn here, no script, no font, image
 * or style sheet fetched, so it opens offline in any browser and travels as one file. Long series
 * are thinned to at most VX_PLOT_MAX_POINTS points a line (each bucket keeps its first, lowest and
 * highest point, so peaks and troughs survive), which keeps a year of days or thousands of epochs
 * small. */
#include "vixen/svg.h"
#include "vixen/train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- what the page is made of ---------------------------------------------------------------- */

enum {
    F_NET,
    F_GROSS,
    F_COSTS,
    F_PER_BAR,
    F_SHARPE,
    F_SE,
    F_MAXDD,
    F_TURN,
    F_HIT,
    F_TRADES,
    F_BARS
};
#define N_FIGS 11
static const char *const fig_keys[N_FIGS] = {"net",      "gross",     "costs",        "pnl_per_bar",
                                             "sharpe",   "sharpe_se", "max_drawdown", "turnover",
                                             "hit_rate", "trades",    "bars"};

enum { H_EXPOSURE, H_ORDER, H_URGENCY, H_POSITION };
#define N_HISTS 4
static const char *const hist_keys[N_HISTS] = {"exposure_hist", "order_hist", "urgency_hist",
                                               "position_hist"};
static const int hist_len[N_HISTS] = {VX_EXPOSURE_LEVELS, VX_ORDER_TYPES, VX_URGENCY_LEVELS,
                                      VX_EXPOSURE_LEVELS};

typedef struct {
    int present;
    double fig[N_FIGS]; /* NaN where eval.json has null */
    double *pnl;        /* period_pnl (not read for in_sample: it is over the training split) */
    size_t n_pnl;
    double *hist[N_HISTS]; /* the agent's only */
} row_data;

/* metrics.csv columns the page uses; only epoch is required (another algorithm may log no loss) */
enum { M_EPOCH, M_LOSS, M_SHARPE, M_SE, M_BEST };
#define N_MCOLS 5
static const char *const mcol_names[N_MCOLS] = {"epoch", "loss", "val_sharpe", "val_sharpe_se",
                                                "val_best"};

/* the colours of the rows, by vx_eval_row; the baselines muted so the agent stands out */
static const char *const row_colour[VX_EVAL_ROWS] = {"#1f6feb", "#000000", "#6e7781", "#8c959f",
                                                     "#d97706", "#1a7f37", "#8250df"};
static const char *const row_dash[VX_EVAL_ROWS] = {"", "", "", "5 4", "", "", "2 3"};

typedef struct {
    const char *dir;
    char eval_path[1100], metrics_path[1100], config_path[1100], out_path[1100];
    cJSON *json;
    char split[64], period[64];           /* HTML-escaped, ready to print */
    const char *checkpoint;               /* points into json */
    const char *trained_on;               /* points into json ("" when not recorded) */
    double first_row, last_row, episodes; /* NaN when absent */
    double *ts;                           /* period_end_unix_s */
    size_t n_ts;
    row_data row[VX_EVAL_ROWS];
    int have_baselines, momentum_k;
    double ridge_lambda;
    const cJSON *warnings; /* an array of strings, or NULL */
    double *m[N_MCOLS];    /* metrics.csv, NaN where the column is absent or nan */
    int has[N_MCOLS];
    size_t n_ep, cap_ep;
    char *config;
    size_t config_n;
    int max_contracts;
    char algo[32];
} report;

static void report_free(report *r)
{
    cJSON_Delete(r->json);
    free(r->ts);
    for (int k = 0; k < VX_EVAL_ROWS; k++) {
        free(r->row[k].pnl);
        for (int h = 0; h < N_HISTS; h++) free(r->row[k].hist[h]);
    }
    for (int c = 0; c < N_MCOLS; c++) free(r->m[c]);
    free(r->config);
}

/* ---- eval.json ------------------------------------------------------------------------------- */

/* src escaped for HTML into dst (cut short to fit, never inside an entity). */
static void esc_buf(char *dst, size_t n, const char *src)
{
    size_t k = 0;
    for (; *src; src++) {
        const char *rep = *src == '&'   ? "&amp;"
                          : *src == '<' ? "&lt;"
                          : *src == '>' ? "&gt;"
                          : *src == '"' ? "&quot;"
                                        : NULL;
        size_t len = rep ? strlen(rep) : 1;
        if (k + len >= n) break;
        if (rep) memcpy(dst + k, rep, len);
        else dst[k] = *src;
        k += len;
    }
    dst[k] = '\0';
}

static vx_status bad_field(const report *r, const char *field, vx_err *e, const char *what)
{
    return vx_err_line(e, VX_ERR_FORMAT, r->eval_path, -1, field, "%s", what);
}

/* A number (null, which eval.json writes for an undefined figure, reads as NaN). */
static vx_status json_number(const report *r, const cJSON *o, const char *where, const char *key,
                             double *out, vx_err *e)
{
    char field[80];
    snprintf(field, sizeof field, "%s%s", where, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return bad_field(r, field, e, "missing");
    if (cJSON_IsNull(v)) *out = NAN;
    else if (cJSON_IsNumber(v)) *out = v->valuedouble;
    else return bad_field(r, field, e, "not a number");
    return VX_OK;
}

/* An array of finite numbers; want > 0: exactly that many. */
static vx_status json_numbers(const report *r, const cJSON *o, const char *where, const char *key,
                              size_t want, double **out, size_t *n, vx_err *e)
{
    char field[80];
    snprintf(field, sizeof field, "%s%s", where, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return bad_field(r, field, e, "missing");
    if (!cJSON_IsArray(v)) return bad_field(r, field, e, "not an array");
    size_t k = (size_t)cJSON_GetArraySize(v);
    if (want && k != want)
        return vx_err_line(e, VX_ERR_FORMAT, r->eval_path, -1, field,
                           "%zu values where %zu were expected", k, want);
    double *a = malloc((k ? k : 1) * sizeof *a);
    if (!a) return vx_err_set(e, VX_ERR_NOMEM, "report: out of memory");
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, v)
    {
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) {
            free(a);
            return vx_err_line(e, VX_ERR_FORMAT, r->eval_path, -1, field,
                               "value %zu is not a number", i + 1);
        }
        a[i++] = x->valuedouble;
    }
    *out = a;
    if (n) *n = k;
    return VX_OK;
}

static vx_status read_row(report *r, int k, const cJSON *o, vx_err *e)
{
    const char *key = vx_eval_row_key((vx_eval_row)k);
    char where[40];
    snprintf(where, sizeof where, "rows.%s", key);
    row_data *d = &r->row[k];
    if (!cJSON_IsObject(o)) return bad_field(r, where, e, "not an object");
    strcat(where, ".");
    d->present = 1;
    vx_status st = VX_OK;
    for (int i = 0; i < N_FIGS && !st; i++)
        st = json_number(r, o, where, fig_keys[i], &d->fig[i], e);
    if (!st && k != VX_EVAL_IN_SAMPLE) {
        st = json_numbers(r, o, where, "period_pnl", 0, &d->pnl, &d->n_pnl, e);
        if (!st && d->n_pnl != r->n_ts) {
            char field[80];
            snprintf(field, sizeof field, "%speriod_pnl", where);
            st = vx_err_line(e, VX_ERR_FORMAT, r->eval_path, -1, field,
                             "%zu values, but period_end_unix_s has %zu", d->n_pnl, r->n_ts);
        }
    }
    for (int h = 0; h < N_HISTS && !st && k == VX_EVAL_AGENT; h++)
        st = json_numbers(r, o, where, hist_keys[h], (size_t)hist_len[h], &d->hist[h], NULL, e);
    return st;
}

static vx_status read_eval(report *r, vx_err *e)
{
    uint8_t *text;
    size_t n;
    vx_status st = vx_file_read_all(r->eval_path, &text, &n, e);
    if (st) return st;
    const char *t = (const char *)text, *end = NULL;
    r->json = cJSON_ParseWithLengthOpts(t, n, &end, 0);
    const char *stop = end && end >= t && end <= t + n ? end : t + n, *rest = stop;
    while (r->json && rest < t + n && strchr(" \t\r\n", *rest)) rest++;
    if (!r->json || rest < t + n) { /* where the parser stopped, or what follows the value */
        int64_t line = 1;
        for (const char *p = t; p < (r->json ? rest : stop); p++) line += *p == '\n';
        free(text);
        return vx_err_line(e, VX_ERR_FORMAT, r->eval_path, line, "", "%s",
                           r->json ? "text after the JSON value" : "not valid JSON");
    }
    free(text);
    const cJSON *o = r->json;
    if (!cJSON_IsObject(o)) return bad_field(r, "", e, "not a JSON object");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "split");
    if (!cJSON_IsString(v)) return bad_field(r, "split", e, "missing, or not text");
    esc_buf(r->split, sizeof r->split, v->valuestring);
    v = cJSON_GetObjectItemCaseSensitive(o, "period");
    esc_buf(r->period, sizeof r->period, cJSON_IsString(v) ? v->valuestring : "trading day");
    v = cJSON_GetObjectItemCaseSensitive(o, "checkpoint");
    if (v && !cJSON_IsString(v)) return bad_field(r, "checkpoint", e, "not text");
    r->checkpoint = v ? v->valuestring : "";
    v = cJSON_GetObjectItemCaseSensitive(o, "trained_on");
    if (v && !cJSON_IsString(v)) return bad_field(r, "trained_on", e, "not text");
    r->trained_on = v ? v->valuestring : "";
    const char *opt[3] = {"first_row", "last_row", "episodes"};
    double *dst[3] = {&r->first_row, &r->last_row, &r->episodes};
    for (int i = 0; i < 3; i++) {
        *dst[i] = NAN;
        if (cJSON_GetObjectItemCaseSensitive(o, opt[i]))
            if ((st = json_number(r, o, "", opt[i], dst[i], e))) return st;
    }
    if ((st = json_numbers(r, o, "", "period_end_unix_s", 0, &r->ts, &r->n_ts, e))) return st;
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(o, "rows");
    if (!cJSON_IsObject(rows)) return bad_field(r, "rows", e, "missing, or not an object");
    for (int k = 0; k < VX_EVAL_ROWS && !st; k++) {
        const cJSON *ro = cJSON_GetObjectItemCaseSensitive(rows, vx_eval_row_key((vx_eval_row)k));
        if (ro) st = read_row(r, k, ro, e);
    }
    if (st) return st;
    if (!r->row[VX_EVAL_AGENT].present) return bad_field(r, "rows.agent", e, "missing");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "baselines");
    if (cJSON_IsObject(b)) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(b, "momentum_lookback");
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(b, "ridge_lambda");
        r->have_baselines = 1;
        r->momentum_k = cJSON_IsNumber(k) ? k->valueint : 0;
        r->ridge_lambda = cJSON_IsNumber(l) ? l->valuedouble : NAN;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "warnings");
    if (v) {
        if (!cJSON_IsArray(v)) return bad_field(r, "warnings", e, "not an array");
        const cJSON *w;
        cJSON_ArrayForEach(w, v)
        {
            if (!cJSON_IsString(w)) return bad_field(r, "warnings", e, "holds a value not text");
        }
        r->warnings = v;
    }
    return VX_OK;
}

/* ---- metrics.csv ----------------------------------------------------------------------------- */

/* The next line of a NUL-terminated text, cut there (its '\r' too); NULL at the end. */
static char *next_line(char **p)
{
    char *l = *p;
    if (!*l) return NULL;
    char *nl = strchr(l, '\n');
    if (nl) *nl = '\0', *p = nl + 1;
    else *p = l + strlen(l);
    size_t k = strlen(l);
    if (k && l[k - 1] == '\r') l[k - 1] = '\0';
    return l;
}

static vx_status push_epoch(report *r, const double *v, vx_err *e)
{
    /* a run resumed from a checkpoint older than its last logged epoch logs those epochs again:
     * the later rows are the run's, so they replace the earlier ones */
    while (r->n_ep > 0 && !(v[M_EPOCH] > r->m[M_EPOCH][r->n_ep - 1])) r->n_ep--;
    if (r->n_ep == r->cap_ep) {
        size_t cap = r->cap_ep ? 2 * r->cap_ep : 64;
        for (int c = 0; c < N_MCOLS; c++) {
            double *a = realloc(r->m[c], cap * sizeof *a);
            if (!a) return vx_err_set(e, VX_ERR_NOMEM, "report: out of memory");
            r->m[c] = a;
        }
        r->cap_ep = cap;
    }
    for (int c = 0; c < N_MCOLS; c++) r->m[c][r->n_ep] = v[c];
    r->n_ep++;
    return VX_OK;
}

static vx_status parse_metrics(report *r, char *text, vx_err *e)
{
    const char *path = r->metrics_path;
    char *p = text, *head = next_line(&p);
    if (!head || !*head) return vx_err_line(e, VX_ERR_FORMAT, path, 1, "", "no header line");
    int ncol = 1;
    for (const char *s = head; *s; s++) ncol += *s == ',';
    const char **name = malloc((size_t)ncol * sizeof *name);
    int *use = malloc((size_t)ncol * sizeof *use);
    if (!name || !use) {
        free(name), free(use);
        return vx_err_set(e, VX_ERR_NOMEM, "report: out of memory");
    }
    char *s = head;
    for (int c = 0; c < ncol; c++) {
        name[c] = s;
        char *comma = strchr(s, ',');
        if (comma) *comma = '\0', s = comma + 1;
        use[c] = -1;
        for (int k = 0; k < N_MCOLS; k++)
            if (strcmp(name[c], mcol_names[k]) == 0 && !r->has[k]) use[c] = k, r->has[k] = 1;
    }
    vx_status st = VX_OK;
    if (!r->has[M_EPOCH])
        st = vx_err_line(e, VX_ERR_FORMAT, path, 1, "epoch", "the header has no such column");
    char *line;
    for (int64_t ln = 2; !st && (line = next_line(&p)); ln++) {
        if (strspn(line, " \t") == strlen(line)) continue;
        double v[N_MCOLS];
        for (int k = 0; k < N_MCOLS; k++) v[k] = NAN;
        char *q = line;
        for (int c = 0; c < ncol && !st; c++) {
            char *end;
            double x = strtod(q, &end);
            while (*end == ' ' || *end == '\t') end++;
            char sep = c + 1 < ncol ? ',' : '\0';
            if (end == q || (*end != sep && *end != ',' && *end != '\0')) {
                size_t k = strcspn(q, ",");
                st = vx_err_line(e, VX_ERR_FORMAT, path, ln, name[c], "not a number: '%.*s'",
                                 (int)(k < 24 ? k : 24), q);
            } else if (*end != sep) {
                st =
                    vx_err_line(e, VX_ERR_FORMAT, path, ln, "", "%s fields where the header has %d",
                                *end ? "more" : "fewer", ncol);
            } else {
                if (use[c] >= 0) v[use[c]] = x;
                q = end + 1;
            }
        }
        if (!st && !isfinite(v[M_EPOCH]))
            st = vx_err_line(e, VX_ERR_FORMAT, path, ln, "epoch", "not a finite number");
        if (!st) st = push_epoch(r, v, e);
    }
    free(name);
    free(use);
    return st;
}

static vx_status read_metrics(report *r, vx_err *e)
{
    uint8_t *data;
    size_t n;
    vx_status st = vx_file_read_all(r->metrics_path, &data, &n, e);
    if (st) return st;
    char *text = realloc(data, n + 1);
    if (!text) {
        free(data);
        return vx_err_set(e, VX_ERR_NOMEM, "report: out of memory");
    }
    text[n] = '\0';
    if (memchr(text, '\0', n))
        st = vx_err_line(e, VX_ERR_FORMAT, r->metrics_path, -1, "",
                         "holds a NUL byte: not a text file");
    else st = parse_metrics(r, text, e);
    free(text);
    return st;
}

/* ---- config.yaml: shown as text, and read as settings (checked, and the contracts at full
 * exposure, which label the histograms) -------------------------------------------------------- */

static vx_status read_config(report *r, vx_err *e)
{
    uint8_t *data;
    vx_status st = vx_file_read_all(r->config_path, &data, &r->config_n, e);
    if (st) return st;
    r->config = (char *)data;
    vx_train_cfg *c = malloc(sizeof *c);
    if (!c) return vx_err_set(e, VX_ERR_NOMEM, "report: out of memory");
    vx_train_cfg_default(c);
    st = vx_train_cfg_load(c, r->config_path, e);
    if (!st) {
        r->max_contracts = c->env.max_contracts;
        snprintf(r->algo, sizeof r->algo, "%s", vx_train_algo(c)->name);
    }
    free(c);
    return st;
}

/* The date of a period's end, as the axis shows it. */
static void fmt_date(char *buf, size_t n, double unix_s, int with_time)
{
    time_t t = fabs(unix_s) < 1e12 ? (time_t)unix_s : 0; /* beyond year 30000: not a date */
    struct tm tm;
    if (fabs(unix_s) >= 1e12 || !gmtime_r(&t, &tm)) snprintf(buf, n, "?");
    else strftime(buf, n, with_time ? "%m-%d %H:%M" : "%Y-%m-%d", &tm);
}

/* x ticks at periods 1, 1 + step, … (x = period, 0 the start), labelled with their end dates. */
static void x_axis_dates(const vx_plot *p, const report *r)
{
    size_t n = r->n_ts, step = n > 6 ? (n - 1 + 4) / 5 : 1; /* at most 6, evenly spaced */
    /* ticks hours apart need the time of day to differ (only periods of bars can be so close) */
    int with_time = !strcmp(r->period, "bar") && n > 1 && r->ts[n - 1] - r->ts[0] < 3 * 86400.0;
    for (size_t j = 1; j <= n; j += step) {
        char lab[32];
        fmt_date(lab, sizeof lab, r->ts[j - 1], with_time);
        vx_plot_x_tick(p, (double)j, lab);
    }
}

static const char *row_label(const report *r, int k, char *buf, size_t n)
{
    if (k == VX_EVAL_MOMENTUM && r->have_baselines && r->momentum_k > 0)
        snprintf(buf, n, "momentum (%d bars)", r->momentum_k);
    else if (k == VX_EVAL_RIDGE && r->have_baselines && isfinite(r->ridge_lambda))
        snprintf(buf, n, "ridge (λ %g)", r->ridge_lambda);
    else if (k == VX_EVAL_IN_SAMPLE) snprintf(buf, n, "agent, in-sample (training split)");
    else snprintf(buf, n, "%s", vx_eval_row_name((vx_eval_row)k));
    return buf;
}

/* Cumulative net PnL of a row, from 0 before the first period: n + 1 values. */
static double *cumulative(const row_data *d)
{
    double *c = malloc((d->n_pnl + 1) * sizeof *c);
    if (!c) return NULL;
    c[0] = 0;
    for (size_t i = 0; i < d->n_pnl; i++) c[i + 1] = c[i] + d->pnl[i];
    return c;
}

static vx_status chart_equity(FILE *f, const report *r, size_t *idx, vx_err *e)
{
    size_t n = r->n_ts;
    fprintf(f, "<section id=\"equity\">\n<h2>Equity on the %s split</h2>\n", r->split);
    if (n == 0) {
        fprintf(f,
                "<p class=\"note\">No periods were evaluated: nothing to draw.</p>\n</section>\n");
        return VX_OK;
    }
    double *cum[VX_EVAL_ROWS] = {0};
    double lo = 0, hi = 0;
    for (int k = 0; k < VX_EVAL_ROWS; k++) {
        if (!r->row[k].present || k == VX_EVAL_IN_SAMPLE) continue;
        if (!(cum[k] = cumulative(&r->row[k]))) {
            for (int j = 0; j < k; j++) free(cum[j]);
            return vx_err_set(e, VX_ERR_NOMEM, "report: out of memory");
        }
        vx_minmax(cum[k], n + 1, &lo, &hi);
    }
    double step = vx_nice_range(&lo, &hi, 6);
    vx_plot p = {f, 78, 14, 600, 260, 0, (double)n, lo, hi};
    vx_svg_open(f, "chart-equity", 900, 310,
                "cumulative net PnL of the agent and the baselines per period");
    vx_plot_y_axis(&p, step, 1);
    x_axis_dates(&p, r);
    /* the baselines first, the agent on top; the legend in the same order as the table */
    for (int k = VX_EVAL_ROWS - 1; k >= 0; k--)
        if (cum[k])
            vx_plot_line(&p, vx_eval_row_key((vx_eval_row)k), row_colour[k],
                         k == VX_EVAL_AGENT ? 2.4 : 1.4, row_dash[k], NULL, cum[k], n + 1, idx);
    double ly = 22;
    for (int k = 0; k < VX_EVAL_ROWS; k++) {
        if (!cum[k]) continue;
        char name[64], fin[64];
        row_label(r, k, name, sizeof name);
        vx_fmt_money_signed(fin, sizeof fin, cum[k][n]);
        fprintf(f,
                "<g class=\"legend\" data-series=\"%s\"><line x1=\"696\" y1=\"%.0f\" x2=\"720\" "
                "y2=\"%.0f\" stroke=\"%s\" stroke-width=\"%s\"%s%s%s/><text x=\"726\" y=\"%.0f\" "
                "class=\"lg\">",
                vx_eval_row_key((vx_eval_row)k), ly, ly, row_colour[k],
                k == VX_EVAL_AGENT ? "2.4" : "1.6", *row_dash[k] ? " stroke-dasharray=\"" : "",
                row_dash[k], *row_dash[k] ? "\"" : "", ly + 4);
        vx_html_esc(f, name);
        fprintf(f, "</text><text x=\"726\" y=\"%.0f\" class=\"lv\">%s</text></g>\n", ly + 18, fin);
        ly += 40;
    }
    fprintf(f,
            "</svg>\n<p class=\"note\">Cumulative net PnL (after costs) per %s, from $0 before "
            "the first; the legend gives each policy's total. The agent's in-sample row is over "
            "the training split and is not drawn.</p>\n",
            r->period);
    /* the agent's drawdown: its equity below the running peak (the start, $0, included) */
    double *dd = cum[VX_EVAL_AGENT], peak = 0, worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i <= n; i++) {
        peak = fmax(peak, dd[i]);
        dd[i] -= peak;
        if (dd[i] < worst) worst = dd[i], worst_at = i;
    }
    double dlo = worst, dhi = 0;
    step = vx_nice_range(&dlo, &dhi, 4);
    vx_plot q = {f, 78, 14, 600, 180, 0, (double)n, dlo, dhi};
    fprintf(f, "<h3 id=\"drawdown\">The agent's drawdown</h3>\n");
    vx_svg_open(f, "chart-drawdown", 900, 230, "the agent's equity below its running peak");
    vx_plot_y_axis(&q, step, 1);
    x_axis_dates(&q, r);
    fprintf(f, "<path class=\"area\" fill=\"#cf222e\" fill-opacity=\"0.18\" stroke=\"none\" d=\"");
    vx_plot_path(&q, NULL, dd, n + 1, idx);
    fprintf(f, "L%.1f %.1fL%.1f %.1fZ\"/>\n", vx_plot_x(&q, (double)n), vx_plot_y(&q, 0),
            vx_plot_x(&q, 0), vx_plot_y(&q, 0));
    vx_plot_line(&q, "drawdown", "#cf222e", 1.6, "", NULL, dd, n + 1, idx);
    char w[64], when[32] = "";
    vx_fmt_num(w, sizeof w, -worst, 0);
    if (worst_at > 0) fmt_date(when, sizeof when, r->ts[worst_at - 1], 0);
    fprintf(f,
            "</svg>\n<p class=\"note\">Measured at the end of each %s: the largest drawdown is "
            "<strong>$%s</strong>%s%s. The table's max DD is measured bar by bar, so it can be "
            "larger.</p>\n</section>\n",
            r->period, w, worst_at ? " on " : "", when);
    for (int k = 0; k < VX_EVAL_ROWS; k++) free(cum[k]);
    return VX_OK;
}

/* ---- training curves ------------------------------------------------------------------------- */

/* The epochs with a finite value of column c, as (x, y) copies (returns how many). */
static size_t finite_points(const report *r, int c, double *x, double *y)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n_ep; i++)
        if (isfinite(r->m[c][i])) x[k] = r->m[M_EPOCH][i], y[k] = r->m[c][i], k++;
    return k;
}

static void epoch_range(const report *r, double *x0, double *x1)
{
    *x0 = r->m[M_EPOCH][0], *x1 = r->m[M_EPOCH][r->n_ep - 1];
    if (!(*x1 > *x0)) *x0 -= 1, *x1 += 1;
}

static void chart_loss(FILE *f, const report *r, double *x, double *y, size_t *idx)
{
    fprintf(f, "<figure>\n<h3>Loss</h3>\n");
    size_t n = r->has[M_LOSS] ? finite_points(r, M_LOSS, x, y) : 0;
    if (n == 0) {
        fprintf(f, "<p class=\"note\">%s</p>\n</figure>\n",
                r->has[M_LOSS] ? "No loss was logged yet (learning had not started)."
                               : "metrics.csv has no loss column for this algorithm.");
        return;
    }
    double lo = INFINITY, hi = -INFINITY;
    vx_minmax(y, n, &lo, &hi);
    double step = vx_nice_range(&lo, &hi, 5);
    vx_plot p = {f, 64, 12, 380, 190, 0, 0, lo, hi};
    epoch_range(r, &p.x0, &p.x1);
    vx_svg_open(f, "chart-loss", 460, 250, "training loss per epoch");
    vx_plot_y_axis(&p, step, 0);
    vx_plot_x_axis_int(&p, "epoch");
    vx_plot_line(&p, "loss", "#1f6feb", 1.8, "", x, y, n, idx);
    if (n <= 80)
        for (size_t i = 0; i < n; i++)
            fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#1f6feb\"/>",
                    vx_plot_x(&p, x[i]), vx_plot_y(&p, y[i]));
    fprintf(f, "\n</svg>\n<p class=\"note\">The algorithm's training loss, mean per epoch.</p>\n"
               "</figure>\n");
}

static void chart_val(FILE *f, const report *r, double *x, double *y, double *se, size_t *idx)
{
    fprintf(f, "<figure>\n<h3>Validation Sharpe ratio</h3>\n");
    size_t n = r->has[M_SHARPE] ? finite_points(r, M_SHARPE, x, y) : 0;
    if (n == 0) {
        fprintf(f, "<p class=\"note\">Nothing was validated in this run (train.eval_every 0, or no "
                   "validation split), so the last checkpoint was the one tested.</p>\n"
                   "</figure>\n");
        return;
    }
    /* the standard error of each point (NaN: none), and the chosen checkpoint: the last epoch
     * marked best, which is the best one */
    double lo = INFINITY, hi = -INFINITY, best = NAN, best_y = NAN;
    for (size_t i = 0, k = 0; i < r->n_ep; i++) {
        if (r->m[M_BEST][i] == 1 && isfinite(r->m[M_SHARPE][i]))
            best = r->m[M_EPOCH][i], best_y = r->m[M_SHARPE][i];
        if (!isfinite(r->m[M_SHARPE][i])) continue;
        se[k] = r->has[M_SE] && isfinite(r->m[M_SE][i]) ? r->m[M_SE][i] : NAN;
        lo = fmin(lo, y[k] - (isfinite(se[k]) ? se[k] : 0));
        hi = fmax(hi, y[k] + (isfinite(se[k]) ? se[k] : 0));
        k++;
    }
    double step = vx_nice_range(&lo, &hi, 5);
    vx_plot p = {f, 64, 12, 380, 190, 0, 0, lo, hi};
    epoch_range(r, &p.x0, &p.x1);
    vx_svg_open(f, "chart-val", 460, 250,
                "validation Sharpe ratio per epoch, with its standard error");
    vx_plot_y_axis(&p, step, 0);
    vx_plot_x_axis_int(&p, "epoch");
    /* ± se: one band over each run of points that have it */
    for (size_t i = 0; i < n;) {
        if (!isfinite(se[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && isfinite(se[j])) j++;
        fprintf(f, "<path class=\"band\" fill=\"#1f6feb\" fill-opacity=\"0.15\" stroke=\"none\" "
                   "d=\"");
        if (j - i == 1) { /* a lone point: an error bar */
            double X = vx_plot_x(&p, x[i]);
            fprintf(f, "M%.1f %.1fH%.1fV%.1fH%.1fZ", X - 2, vx_plot_y(&p, y[i] + se[i]), X + 2,
                    vx_plot_y(&p, y[i] - se[i]), X - 2);
        } else { /* upper edge forwards, lower edge back, both thinned alike */
            size_t m = vx_plot_thin(y + i, j - i, idx);
            for (size_t t = 0; t < m; t++) {
                size_t k = i + idx[t];
                fprintf(f, "%s%.1f %.1f", t ? "L" : "M", vx_plot_x(&p, x[k]),
                        vx_plot_y(&p, y[k] + se[k]));
            }
            for (size_t t = m; t-- > 0;) {
                size_t k = i + idx[t];
                fprintf(f, "L%.1f %.1f", vx_plot_x(&p, x[k]), vx_plot_y(&p, y[k] - se[k]));
            }
            fprintf(f, "Z");
        }
        fprintf(f, "\"/>\n");
        i = j;
    }
    vx_plot_line(&p, "val_sharpe", "#1f6feb", 1.8, "", x, y, n, idx);
    if (n <= 80)
        for (size_t i = 0; i < n; i++)
            fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#1f6feb\"/>",
                    vx_plot_x(&p, x[i]), vx_plot_y(&p, y[i]));
    fprintf(f, "\n");
    if (isfinite(best)) {
        double bx = vx_plot_x(&p, best);
        fprintf(f,
                "<g class=\"best\" data-best-epoch=\"%.0f\"><line x1=\"%.1f\" y1=\"%.1f\" "
                "x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1a7f37\" stroke-dasharray=\"4 3\"/>"
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5.5\" fill=\"none\" stroke=\"#1a7f37\" "
                "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" "
                "fill=\"#1a7f37\">chosen: epoch %.0f</text></g>\n",
                best, bx, p.t, bx, p.t + p.h, bx, vx_plot_y(&p, best_y), bx + (bx > 300 ? -6 : 6),
                p.t + 12, bx > 300 ? "end" : "start", best);
    }
    fprintf(f, "</svg>\n<p class=\"note\">Annualised Sharpe ratio on the validation split, with a "
               "band of ± one standard error");
    if (isfinite(best))
        fprintf(f, "; the green line marks the checkpoint chosen (epoch %.0f, the best)", best);
    fprintf(f, ".</p>\n</figure>\n");
}

/* ---- the agent's actions --------------------------------------------------------------------- */

static void chart_hist(FILE *f, const char *id, const char *title, const double *h, int n,
                       char labels[][24], const char *xlabel)
{
    fprintf(f, "<figure>\n<h3>%s</h3>\n", title);
    double total = 0, top = 0;
    for (int i = 0; i < n; i++) total += h[i];
    if (!(total > 0)) {
        fprintf(f, "<p class=\"note\">No bars were counted.</p>\n</figure>\n");
        return;
    }
    for (int i = 0; i < n; i++) top = fmax(top, 100 * h[i] / total);
    double lo = 0, hi = top;
    double step = vx_nice_range(&lo, &hi, 4);
    vx_plot p = {f, 46, 18, 370, 160, 0, n, 0, hi};
    vx_svg_open(f, id, 430, 222, title);
    vx_plot_y_axis(&p, step, 0);
    double slot = p.w / n;
    for (int i = 0; i < n; i++) {
        double share = 100 * h[i] / total, x = p.l + slot * i + slot * 0.15,
               y = vx_plot_y(&p, share);
        fprintf(f,
                "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                "fill=\"#1f6feb\" fill-opacity=\"0.8\"><title>%s: %.0f (%.1f%%)</title></rect>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.*f%%</text>",
                x, y, slot * 0.7, p.t + p.h - y, labels[i], h[i], share, x + slot * 0.35, y - 4,
                share < 10 ? 1 : 0, share);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                x + slot * 0.35, p.t + p.h + 16, labels[i]);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n</svg>\n</figure>\n",
            p.l + p.w / 2, p.t + p.h + 36, xlabel);
}

static void histograms(FILE *f, const report *r)
{
    const row_data *a = &r->row[VX_EVAL_AGENT];
    char lev[VX_EXPOSURE_LEVELS][24], ord[VX_ORDER_TYPES][24] = {"market", "limit", "VWAP"},
                                      urg[VX_URGENCY_LEVELS][24] = {"⅓", "⅔", "all"};
    for (int i = 0; i < VX_EXPOSURE_LEVELS; i++) { /* env.md: round((−1 + e/4) · max_contracts) */
        int c = (int)lround((-1 + i / 4.0) * r->max_contracts);
        if (c < 0) snprintf(lev[i], sizeof lev[i], "−%d", -c);
        else snprintf(lev[i], sizeof lev[i], c > 0 ? "+%d" : "%d", c);
    }
    char xl[2][96];
    snprintf(xl[0], sizeof xl[0], "target position, contracts (max_contracts %d)",
             r->max_contracts);
    snprintf(xl[1], sizeof xl[1], "position held, nearest level (contracts)");
    fprintf(f,
            "<section id=\"actions\">\n<h2>The agent's actions on the %s split</h2>\n"
            "<p class=\"note\">Share of the bars evaluated on which the agent chose each "
            "action, and the position it held.</p>\n<div class=\"grid2\">\n",
            r->split);
    chart_hist(f, "hist-exposure", "Exposure chosen", a->hist[H_EXPOSURE], VX_EXPOSURE_LEVELS, lev,
               xl[0]);
    chart_hist(f, "hist-order", "Order type", a->hist[H_ORDER], VX_ORDER_TYPES, ord, "order type");
    chart_hist(f, "hist-urgency", "Urgency", a->hist[H_URGENCY], VX_URGENCY_LEVELS, urg,
               "part of the gap to the target traded this bar");
    chart_hist(f, "hist-position", "Position held", a->hist[H_POSITION], VX_EXPOSURE_LEVELS, lev,
               xl[1]);
    fprintf(f, "</div>\n</section>\n");
}

/* ---- the page -------------------------------------------------------------------------------- */

static void header(FILE *f, const report *r)
{
    const row_data *a = &r->row[VX_EVAL_AGENT];
    char b[64], d[64], ep[64], lo[64], hi[64];
    fprintf(f, "<header>\n<h1>Run report</h1>\n<p class=\"muted\">run folder <code>");
    vx_html_esc(f, r->dir);
    fprintf(f, "</code> · algorithm <code>");
    vx_html_esc(f, r->algo);
    fprintf(f, "</code> · %zu epoch%s logged</p>\n</header>\n", r->n_ep, r->n_ep == 1 ? "" : "s");
    fprintf(f, "<section id=\"summary\">\n<ul class=\"facts\">\n<li><strong>Evaluated:</strong> "
               "the <strong>");
    fprintf(f, "%s</strong> split", r->split);
    if (isfinite(r->first_row) && isfinite(r->last_row))
        fprintf(f, ", rows %s–%s", vx_fmt_num(lo, sizeof lo, r->first_row, 0),
                vx_fmt_num(hi, sizeof hi, r->last_row, 0));
    fprintf(f, ": %s bars in %s %s%s", vx_fmt_num(b, sizeof b, a->fig[F_BARS], 0),
            vx_fmt_num(d, sizeof d, (double)r->n_ts, 0), r->period, r->n_ts == 1 ? "" : "s");
    if (isfinite(r->episodes))
        fprintf(f, ", walked as %s episodes", vx_fmt_num(ep, sizeof ep, r->episodes, 0));
    fprintf(f, "; money after costs.</li>\n<li><strong>Checkpoint:</strong> ");
    vx_html_esc(f, r->checkpoint[0] ? r->checkpoint : "not recorded");
    fprintf(f, "</li>\n<li><strong>Trained on:</strong> ");
    vx_html_esc(f, r->trained_on[0] ? r->trained_on : "not recorded");
    fprintf(f, "</li>\n</ul>\n");
    int nw = r->warnings ? cJSON_GetArraySize(r->warnings) : 0;
    if (nw) {
        fprintf(f, "<div class=\"warn\" id=\"warnings\"><strong>⚠ %d warning%s</strong>\n<ul>\n",
                nw, nw == 1 ? "" : "s");
        const cJSON *w;
        cJSON_ArrayForEach(w, r->warnings)
        {
            fprintf(f, "<li>");
            vx_html_esc(f, w->valuestring);
            fprintf(f, "</li>\n");
        }
        fprintf(f, "</ul>\n</div>\n");
    } else {
        fprintf(f, "<p class=\"ok\" id=\"warnings\">No warnings.</p>\n");
    }
    fprintf(f, "</section>\n");
}

static void table(FILE *f, const report *r)
{
    fprintf(f, "<section id=\"evaluation\">\n<h2>Evaluation</h2>\n<div class=\"scroll\"><table>\n"
               "<thead><tr><th>policy</th><th>net $</th><th>gross $</th><th>costs $</th>"
               "<th>$/bar</th><th>Sharpe ± se</th><th>max DD $</th><th>turnover</th>"
               "<th>hit rate</th><th>trades</th><th>bars</th></tr></thead>\n<tbody>\n");
    for (int k = 0; k < VX_EVAL_ROWS; k++) {
        const row_data *d = &r->row[k];
        if (!d->present) continue;
        char name[64], c[8][64];
        fprintf(f, "<tr class=\"%s\"><td>", vx_eval_row_key((vx_eval_row)k));
        if (k != VX_EVAL_IN_SAMPLE)
            fprintf(f, "<span class=\"swatch\" style=\"background:%s\"></span>", row_colour[k]);
        vx_html_esc(f, row_label(r, k, name, sizeof name));
        fprintf(f, "</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>",
                vx_fmt_num(c[0], 64, d->fig[F_NET], 0), vx_fmt_num(c[1], 64, d->fig[F_GROSS], 0),
                vx_fmt_num(c[2], 64, d->fig[F_COSTS], 0),
                vx_fmt_num(c[3], 64, d->fig[F_PER_BAR], 2));
        vx_fmt_num(c[4], 64, d->fig[F_SHARPE], 2);
        if (isfinite(d->fig[F_SE]))
            fprintf(f, "<td>%s ± %s</td>", c[4], vx_fmt_num(c[5], 64, d->fig[F_SE], 2));
        else fprintf(f, "<td>%s</td>", c[4]);
        fprintf(f, "<td>%s</td><td>%s</td>", vx_fmt_num(c[6], 64, d->fig[F_MAXDD], 0),
                vx_fmt_num(c[7], 64, d->fig[F_TURN], 3));
        if (isfinite(d->fig[F_HIT])) fprintf(f, "<td>%.1f%%</td>", 100 * d->fig[F_HIT]);
        else fprintf(f, "<td>–</td>");
        fprintf(f, "<td>%s</td><td>%s</td></tr>\n", vx_fmt_num(c[0], 64, d->fig[F_TRADES], 0),
                vx_fmt_num(c[1], 64, d->fig[F_BARS], 0));
    }
    fprintf(f,
            "</tbody></table></div>\n<p class=\"note\">Money in dollars after costs unless "
            "named gross. Sharpe: annualised from the net PnL per %s, ± its standard error "
            "(Lo 2002). Max DD: the largest fall of net equity below its peak, bar by bar. "
            "Turnover: contracts traded per bar. Hit rate: of the bars ending with a position, "
            "the share with a net gain. Baselines are fitted on the training split only.</p>\n"
            "</section>\n",
            r->period);
}

static vx_status write_page(FILE *f, const report *r, vx_err *e)
{
    size_t n = r->n_ep ? r->n_ep : 1;
    size_t *idx =
        malloc((VX_PLOT_MAX_POINTS + 2) * sizeof *idx); /* what vx_plot_thin() can return */
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *se = malloc(n * sizeof *se);
    if (!idx || !x || !y || !se) {
        free(idx), free(x), free(y), free(se);
        return vx_err_set(e, VX_ERR_NOMEM, "report: out of memory");
    }
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
               "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
               "<title>vixen run report: ");
    vx_html_esc(f, r->dir);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", vx_page_css);
    header(f, r);
    table(f, r);
    vx_status st = chart_equity(f, r, idx, e);
    if (!st) {
        fprintf(f, "<section id=\"training\">\n<h2>Training</h2>\n");
        if (r->n_ep == 0) fprintf(f, "<p class=\"note\">metrics.csv holds no epochs.</p>\n");
        else {
            fprintf(f, "<div class=\"grid2\">\n");
            chart_loss(f, r, x, y, idx);
            chart_val(f, r, x, y, se, idx);
            fprintf(f, "</div>\n");
        }
        fprintf(f, "</section>\n");
        histograms(f, r);
        fprintf(f, "<section id=\"config\">\n<h2>Configuration</h2>\n"
                   "<p class=\"note\">config.yaml: every setting of the run, resolved.</p>\n"
                   "<pre>");
        vx_html_esc_n(f, r->config, r->config_n);
        fprintf(f, "</pre>\n</section>\n<footer>Written by vixen from the run folder's eval.json, "
                   "metrics.csv and config.yaml; <code>vixen report RUN</code> writes it "
                   "again.</footer>\n</body>\n</html>\n");
    }
    free(idx), free(x), free(y), free(se);
    return st;
}

vx_status vx_report_write(const char *run_dir, vx_err *e)
{
    report *r = calloc(1, sizeof *r);
    if (!r) return vx_err_set(e, VX_ERR_NOMEM, "report: out of memory");
    r->dir = run_dir;
    snprintf(r->eval_path, sizeof r->eval_path, "%s/eval.json", run_dir);
    snprintf(r->metrics_path, sizeof r->metrics_path, "%s/metrics.csv", run_dir);
    snprintf(r->config_path, sizeof r->config_path, "%s/config.yaml", run_dir);
    snprintf(r->out_path, sizeof r->out_path, "%s/report.html", run_dir);
    vx_status st = read_eval(r, e);
    if (!st) st = read_metrics(r, e);
    if (!st) st = read_config(r, e);
    vx_atomic_file af;
    if (!st) st = vx_atomic_open(&af, r->out_path, e);
    if (!st) {
        st = write_page(af.f, r, e);
        if (st) vx_atomic_abort(&af);
        else st = vx_atomic_commit(&af, e);
    }
    report_free(r);
    free(r);
    return st;
}

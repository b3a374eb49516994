/* study_report.c — a study's report.html (hyperopt.h): what was searched and what it found, made
 * from the study's store and test.txt, like a run's report from its files.
 *
 *   the study: the space, the swarm, the trials' statuses, the best trial with its parameters and
 *     its one test evaluation
 *   optimisation history: every trial's objective in trial order (pruned ones grey, failed ones
 *     left out), the best particle objective so far
 *   each parameter against the objective
 *   the validation curves of the best trials
 *   concurrency and memory over the study's time
 *   the ten best trials as a table
 * Static, self-contained (inline CSS and SVG from svg.h), written to a temporary name and renamed.
 */
#include "study_internal.h"
#include "vixen/svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOP_CURVES 5
#define TOP_TABLE 10

typedef struct {
    const char *dir;
    vx_study_cfg cfg;
    vx_space space;
    char *space_text;
    vx_trial *t;
    size_t n;
    vx_curve_point *pts;
    int64_t *of;
    size_t n_pts;
    vx_study_event *ev;
    size_t n_ev;
    int64_t best_id; /* the swarm's best (best.yaml's, test.txt's); −1 before the study ended */
    char *test;      /* test.txt, or NULL before the study ended */
    size_t test_n;
    size_t *idx; /* room for what vx_plot_thin returns */
} page;

static const char *const colours[TOP_CURVES] = {"#1f6feb", "#bf3989", "#1a7f37", "#9a6700",
                                                "#6e7781"};

/* The text of `key`'s value in a trial's "key=value" lines (a whole line's key, so "ppo.clip"
 * never finds "ppo.clip_value"); NULL when absent. */
static const char *param_text(const char *params, const char *key, size_t *len)
{
    size_t kl = strlen(key);
    for (const char *l = params; l && *l;) {
        const char *nl = strchr(l, '\n');
        if (strncmp(l, key, kl) == 0 && l[kl] == '=') {
            *len = nl ? (size_t)(nl - l - kl - 1) : strlen(l + kl + 1);
            return l + kl + 1;
        }
        l = nl ? nl + 1 : NULL;
    }
    return NULL;
}

/* The value as a number (categories: their index); NaN when absent. */
static double param_value(const vx_param *p, const char *params)
{
    size_t vl;
    const char *v = param_text(params, p->key, &vl);
    if (!v) return NAN;
    if (p->type != VX_PARAM_CATEGORICAL) return atof(v);
    for (int k = 0; k < p->n_values; k++)
        if (strlen(p->values[k]) == vl && strncmp(p->values[k], v, vl) == 0) return k;
    return NAN;
}

static int by_objective(const void *a, const void *b)
{
    const vx_trial *x = *(const vx_trial *const *)a, *y = *(const vx_trial *const *)b;
    double u = isfinite(x->objective) ? x->objective : -INFINITY;
    double v = isfinite(y->objective) ? y->objective : -INFINITY;
    return u < v ? 1 : u > v ? -1 : (x->id > y->id) - (x->id < y->id);
}

static void points(const vx_plot *p, const double *x, const double *y, const int *grey, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) continue;
        fprintf(p->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.6\" fill=\"%s\"/>\n",
                vx_plot_x(p, x[i]), vx_plot_y(p, y[i]), grey && grey[i] ? "#afb8c1" : "#1f6feb");
    }
}

/* A plot frame of W × H with its y axis over [lo, hi] (widened to round steps). */
static vx_plot frame(FILE *f, const char *id, const char *label, double x0, double x1, double lo,
                     double hi, double w, double h)
{
    vx_svg_open(f, id, w, h, label);
    vx_plot p = {f, 56, 14, w - 72, h - 58, x0, x1, lo, hi};
    if (!(p.x1 > p.x0)) p.x1 = p.x0 + 1;
    double step = vx_nice_range(&p.y0, &p.y1, 5);
    vx_plot_y_axis(&p, step, 0);
    return p;
}

static void history(FILE *f, const page *g)
{
    double *x = malloc(g->n * sizeof *x), *y = malloc(g->n * sizeof *y);
    double *best = malloc(g->n * sizeof *best);
    int *grey = malloc(g->n * sizeof *grey);
    if (!x || !y || !best || !grey) goto done;
    double lo = INFINITY, hi = -INFINITY, run = NAN;
    for (size_t i = 0; i < g->n; i++) {
        const vx_trial *t = &g->t[i];
        x[i] = (double)t->id;
        y[i] = t->status >= VX_TRIAL_DONE ? t->objective : NAN;
        grey[i] = t->status == VX_TRIAL_PRUNED;
        if (t->status == VX_TRIAL_DONE && isfinite(y[i]) && !(y[i] <= run)) run = y[i];
        best[i] = run;
    }
    vx_minmax(y, g->n, &lo, &hi);
    fprintf(f, "<figure>\n<h3>Optimisation history</h3>\n");
    vx_plot p = frame(f, "history", "each trial's validation Sharpe ratio, in trial order", 0,
                      g->n ? (double)(g->n - 1) : 1, lo, hi, 1000, 300);
    vx_plot_x_axis_int(&p, "trial");
    points(&p, x, y, grey, g->n);
    vx_plot_line(&p, "best", "#cf222e", 1.6, "", x, best, g->n, g->idx);
    fprintf(f, "</svg>\n<p class=\"note\">Blue: trials that ran their epochs; grey: pruned "
               "(their best before the stop); red: the best finished trial so far. The "
               "objective is each trial's best validation Sharpe ratio.</p>\n</figure>\n");
done:
    free(x), free(y), free(best), free(grey);
}

static void parameters(FILE *f, const page *g)
{
    double *x = malloc((g->n ? g->n : 1) * sizeof *x), *y = malloc((g->n ? g->n : 1) * sizeof *y);
    int *grey = malloc((g->n ? g->n : 1) * sizeof *grey);
    if (!x || !y || !grey) goto done;
    fprintf(f, "<section id=\"parameters\">\n<h2>Each parameter against the objective</h2>\n"
               "<div class=\"grid2\">\n");
    for (int k = 0; k < g->space.n; k++) {
        const vx_param *p = &g->space.p[k];
        int logx = p->type == VX_PARAM_LOGFLOAT || p->type == VX_PARAM_LOGINT;
        double lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < g->n; i++) {
            double v = param_value(p, g->t[i].params);
            x[i] = logx && v > 0 ? log10(v) : v;
            y[i] = g->t[i].status >= VX_TRIAL_DONE ? g->t[i].objective : NAN;
            grey[i] = g->t[i].status == VX_TRIAL_PRUNED;
        }
        vx_minmax(y, g->n, &lo, &hi);
        double x0 = p->type == VX_PARAM_CATEGORICAL ? -0.5 : logx ? log10(p->low) : p->low;
        double x1 = p->type == VX_PARAM_CATEGORICAL ? p->n_values - 0.5
                    : logx                          ? log10(p->high)
                                                    : p->high;
        char id[96], label[160];
        snprintf(id, sizeof id, "param-%d", k);
        snprintf(label, sizeof label, "validation Sharpe ratio against %s", p->key);
        fprintf(f, "<figure>\n<h3>");
        vx_html_esc(f, p->key);
        fprintf(f, "%s</h3>\n", logx ? " (log scale)" : "");
        vx_plot q = frame(f, id, label, x0, x1, lo, hi, 500, 260);
        if (p->type == VX_PARAM_CATEGORICAL) {
            for (int v = 0; v < p->n_values; v++) vx_plot_x_tick(&q, v, p->values[v]);
        } else if (p->type == VX_PARAM_INT && p->high - p->low <= 12) { /* every whole number */
            for (double v = p->low; v <= p->high; v++) {
                char lab[32];
                snprintf(lab, sizeof lab, "%.0f", v);
                vx_plot_x_tick(&q, v, lab);
            }
        } else {
            double a = x0, b = x1, step = vx_nice_range(&a, &b, 4);
            for (int j = 0; j <= 40; j++) { /* a few ticks; counted, as a step can vanish */
                double v = a + j * step;
                if (v > b + step * 1e-9) break;
                if (v < x0 - step * 1e-9 || v > x1 + step * 1e-9) continue;
                char lab[48];
                snprintf(lab, sizeof lab, "%.3g", logx ? pow(10, v) : v);
                vx_plot_x_tick(&q, v, lab);
            }
        }
        points(&q, x, y, grey, g->n);
        fprintf(f, "</svg>\n</figure>\n");
    }
    fprintf(f, "</div>\n</section>\n");
done:
    free(x), free(y), free(grey);
}

static void curves(FILE *f, const page *g, const vx_trial *const *top, int n_top)
{
    double lo = INFINITY, hi = -INFINITY, e1 = 1;
    for (size_t i = 0; i < g->n_pts; i++)
        for (int k = 0; k < n_top; k++)
            if (g->of[i] == top[k]->id) {
                if (isfinite(g->pts[i].sharpe))
                    lo = fmin(lo, g->pts[i].sharpe), hi = fmax(hi, g->pts[i].sharpe);
                e1 = fmax(e1, g->pts[i].epoch);
            }
    fprintf(f, "<figure>\n<h3>Validation curves of the best trials</h3>\n");
    vx_plot p = frame(f, "curves", "validation Sharpe ratio per epoch of the best trials", 0, e1,
                      lo, hi, 1000, 300);
    vx_plot_x_axis_int(&p, "epoch");
    double *x = malloc((g->n_pts ? g->n_pts : 1) * sizeof *x);
    double *y = malloc((g->n_pts ? g->n_pts : 1) * sizeof *y);
    for (int k = 0; x && y && k < n_top; k++) {
        size_t m = 0;
        for (size_t i = 0; i < g->n_pts; i++)
            if (g->of[i] == top[k]->id) x[m] = g->pts[i].epoch, y[m++] = g->pts[i].sharpe;
        char name[32];
        snprintf(name, sizeof name, "trial-%lld", (long long)top[k]->id);
        vx_plot_line(&p, name, colours[k], 1.6, "", x, y, m, g->idx);
    }
    free(x), free(y);
    fprintf(f, "</svg>\n<p class=\"note\">");
    for (int k = 0; k < n_top; k++)
        fprintf(f, "%s<span class=\"swatch\" style=\"background:%s\"></span>trial %lld (%.2f)",
                k ? " &nbsp; " : "", colours[k], (long long)top[k]->id, top[k]->objective);
    fprintf(f, "</p>\n</figure>\n");
}

static void resources(FILE *f, const page *g)
{
    size_t n = g->n_ev ? g->n_ev : 1;
    double *t = malloc(n * sizeof *t), *c = malloc(n * sizeof *c), *m = malloc(n * sizeof *m);
    if (!t || !c || !m) goto done;
    double t1 = 1, clo = 0, chi = 1, mlo = 0, mhi = 1, t0 = g->n_ev ? g->ev[0].t : 0;
    for (size_t i = 0; i < g->n_ev; i++) { /* seconds since the study's first chunk ended */
        t[i] = g->ev[i].t - t0, c[i] = g->ev[i].concurrency, m[i] = g->ev[i].peak / 1e6;
        t1 = fmax(t1, t[i]);
    }
    vx_minmax(c, g->n_ev, &clo, &chi);
    vx_minmax(m, g->n_ev, &mlo, &mhi);
    fprintf(f,
            "<section id=\"resources\">\n<h2>Concurrency and memory</h2>\n<div class=\"grid2\">\n"
            "<figure>\n<h3>Trials at once</h3>\n");
    vx_plot p = frame(f, "concurrency", "trials run at once, per chunk", 0, t1, 0, chi, 500, 240);
    vx_plot_x_axis_int(&p, "seconds");
    vx_plot_line(&p, "concurrency", "#1f6feb", 1.6, "", t, c, g->n_ev, g->idx);
    fprintf(f, "</svg>\n</figure>\n<figure>\n<h3>Device memory reserved (peak, MB)</h3>\n");
    vx_plot q = frame(f, "memory", "the peak of the memory the trials reserved, MB", 0, t1, 0, mhi,
                      500, 240);
    vx_plot_x_axis_int(&q, "seconds");
    vx_plot_line(&q, "memory", "#9a6700", 1.6, "", t, m, g->n_ev, g->idx);
    fprintf(f, "</svg>\n</figure>\n</div>\n");
    int notes = 0;
    for (size_t i = 0; i < g->n_ev; i++)
        if (g->ev[i].note[0]) {
            fprintf(f, "%s<li>%.1f s: ", notes++ ? "" : "<ul class=\"note\">\n", g->ev[i].t - t0);
            vx_html_esc(f, g->ev[i].note);
            fprintf(f, "</li>\n");
        }
    fprintf(f, "%s</section>\n", notes ? "</ul>\n" : "");
done:
    free(t), free(c), free(m);
}

static void table(FILE *f, const page *g, const vx_trial *const *top, int n_top)
{
    fprintf(f, "<section id=\"best\">\n<h2>The best trials</h2>\n<div class=\"scroll\"><table>\n"
               "<thead><tr><th>trial</th><th>generation</th><th>particle</th><th>seed</th>"
               "<th>status</th><th>validation Sharpe ± se</th><th>at epoch</th><th>batch</th>"
               "<th>MB estimated / measured</th><th>seconds</th>");
    for (int k = 0; k < g->space.n; k++) {
        fprintf(f, "<th>");
        vx_html_esc(f, g->space.p[k].key);
        fprintf(f, "</th>");
    }
    fprintf(f, "</tr></thead>\n<tbody>\n");
    for (int i = 0; i < n_top; i++) {
        const vx_trial *t = top[i];
        fprintf(f,
                "<tr%s><td>%lld</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td><td>%.3f ± "
                "%.3f</td><td>%d</td><td>%d%s</td><td>%.1f / %.1f</td><td>%.1f</td>",
                i == 0 ? " class=\"agent\"" : "", (long long)t->id, t->generation, t->particle,
                t->seed_index, vx_trial_status_name(t->status), t->objective, t->objective_se,
                t->best_epoch, t->batch, t->halvings ? " (halved)" : "", t->mem_estimate / 1e6,
                t->mem_measured / 1e6, t->seconds);
        for (int k = 0; k < g->space.n; k++) {
            size_t vl;
            const char *v = param_text(t->params, g->space.p[k].key, &vl);
            fprintf(f, "<td>");
            if (v) vx_html_esc_n(f, v, vl);
            fprintf(f, "</td>");
        }
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</tbody></table></div>\n</section>\n");
}

static void header(FILE *f, const page *g, const vx_trial *best)
{
    int count[VX_TRIAL_FAILED + 1] = {0}, halvings = 0;
    for (size_t i = 0; i < g->n; i++) count[g->t[i].status]++, halvings += g->t[i].halvings;
    fprintf(f, "<header>\n<h1>Study report</h1>\n<p class=\"muted\">study folder <code>");
    vx_html_esc(f, g->dir);
    fprintf(f,
            "</code></p>\n<ul class=\"facts\">\n<li>%d generations × %d particles × %d "
            "seed%s: %zu trials — %d done, %d pruned, %d failed, %d not run; %d out-of-memory "
            "halvings</li>\n",
            g->cfg.generations, g->cfg.pso.swarm, g->cfg.seeds, g->cfg.seeds > 1 ? "s" : "",
            (size_t)g->cfg.generations * g->cfg.pso.swarm * g->cfg.seeds, count[VX_TRIAL_DONE],
            count[VX_TRIAL_PRUNED], count[VX_TRIAL_FAILED],
            (int)((size_t)g->cfg.generations * g->cfg.pso.swarm * g->cfg.seeds - g->n) +
                count[VX_TRIAL_PENDING] + count[VX_TRIAL_RUNNING],
            halvings);
    fprintf(f,
            "<li>the swarm: inertia %.4g, cognitive %.4g, social %.4g, velocities at most %.2g "
            "of each range, seed %llu; median pruning %s</li>\n",
            g->cfg.pso.w, g->cfg.pso.c1, g->cfg.pso.c2, g->cfg.pso.vmax,
            (unsigned long long)g->cfg.pso.seed, g->cfg.prune ? "on" : "off");
    if (best) {
        int chosen = best->id == g->best_id;
        fprintf(f,
                "<li><strong>the best trial%s: %lld</strong> (generation %d, particle %d, seed "
                "%d), validation Sharpe %.3f ± %.3f at epoch %d%s</li>\n",
                chosen ? "" : " so far", (long long)best->id, best->generation, best->particle,
                best->seed_index, best->objective, best->objective_se, best->best_epoch,
                chosen ? " (the best particle's first seed); <code>best.yaml</code> trains it again"
                       : "");
    }
    fprintf(f, "</ul>\n</header>\n");
    if (g->test) {
        fprintf(f, "<section id=\"test\">\n<h2>The best trial on the test split</h2>\n"
                   "<p class=\"note\">Evaluated once, at the end, with the checkpoint its "
                   "validation chose; nothing in the search saw the test split.</p>\n<pre>");
        vx_html_esc_n(f, g->test, g->test_n);
        fprintf(f, "</pre>\n</section>\n");
    }
    fprintf(f, "<section id=\"space\">\n<h2>The search space</h2>\n<pre>");
    vx_html_esc(f, g->space_text);
    fprintf(f, "</pre>\n</section>\n");
}

static vx_status write_page(FILE *f, const page *g, vx_err *e)
{
    const vx_trial **order = malloc((g->n ? g->n : 1) * sizeof *order);
    if (!order) return vx_err_set(e, VX_ERR_NOMEM, "report: out of memory");
    int n_fin = 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->t[i].status >= VX_TRIAL_DONE && isfinite(g->t[i].objective))
            order[n_fin++] = &g->t[i];
    qsort(order, (size_t)n_fin, sizeof *order, by_objective);
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
               "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
               "<title>vixen study report: ");
    vx_html_esc(f, g->dir);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", vx_page_css);
    /* so far, while the study runs: as the swarm ranks them */
    const vx_trial *best = vx_study_best_so_far(g->t, g->n, &g->cfg, NULL);
    for (size_t i = 0; i < g->n; i++)
        if (g->t[i].id == g->best_id) best = &g->t[i];
    header(f, g, best);
    fprintf(f, "<section id=\"search\">\n<h2>The search</h2>\n");
    history(f, g);
    if (n_fin) curves(f, g, order, n_fin < TOP_CURVES ? n_fin : TOP_CURVES);
    fprintf(f, "</section>\n");
    parameters(f, g);
    resources(f, g);
    if (n_fin) table(f, g, order, n_fin < TOP_TABLE ? n_fin : TOP_TABLE);
    fprintf(f, "<footer>Written by vixen from the study's store (study.db) and test.txt; "
               "<code>vixen hyperopt status DIR</code> reads the store.</footer>\n</body>\n"
               "</html>\n");
    free(order);
    return ferror(f) ? vx_err_set(e, VX_ERR_IO, "report: write failed") : VX_OK;
}

vx_status vx_study_report_write(const char *dir, vx_err *e)
{
    page g;
    memset(&g, 0, sizeof g);
    g.dir = dir;
    char path[600];
    if ((size_t)snprintf(path, sizeof path, "%s/study.db", dir) >= sizeof path)
        return vx_err_line(e, VX_ERR_ARG, dir, -1, "", "study folder path too long");
    vx_store s;
    vx_status st = vx_store_open(&s, path, 1, e);
    if (st) return st;
    char *settings = NULL;
    st = vx_store_meta_get(&s, "settings", &settings, e);
    if (!st) st = vx_study_settings_parse(settings, &g.cfg, path, e);
    if (!st) st = vx_store_meta_get(&s, "space", &g.space_text, e);
    if (!st) st = vx_space_load_text(&g.space, g.space_text, strlen(g.space_text), path, e);
    if (!st) st = vx_store_trials(&s, &g.t, &g.n, e);
    if (!st) st = vx_store_curves(&s, &g.pts, &g.of, &g.n_pts, e);
    if (!st) st = vx_store_events(&s, &g.ev, &g.n_ev, e);
    char *best = NULL;
    g.best_id = -1;
    if (!st && vx_store_meta_get(&s, "best", &best, NULL) == VX_OK) g.best_id = atoll(best);
    free(best);
    vx_store_close(&s);
    free(settings);
    snprintf(path, sizeof path, "%s/test.txt", dir);
    uint8_t *test;
    if (!st && vx_file_read_all(path, &test, &g.test_n, NULL) == VX_OK) g.test = (char *)test;
    g.idx = malloc((VX_PLOT_MAX_POINTS + 2) * sizeof *g.idx);
    if (!st && !g.idx) st = vx_err_set(e, VX_ERR_NOMEM, "report: out of memory");
    vx_atomic_file af;
    if (!st) {
        snprintf(path, sizeof path, "%s/report.html", dir);
        st = vx_atomic_open(&af, path, e);
    }
    if (!st) {
        st = write_page(af.f, &g, e);
        if (st) vx_atomic_abort(&af);
        else st = vx_atomic_commit(&af, e);
    }
    free(g.space_text), free(g.t), free(g.pts), free(g.of), free(g.ev), free(g.test), free(g.idx);
    return st;
}

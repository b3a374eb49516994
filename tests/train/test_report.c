/* test_report.c — report.html: from hand-made run files whose every figure is known (the page's
 * sections, numbers, escaping, the chosen checkpoint, the geometry of the equity curve, thinning
 * of long series, nothing fetched), its errors on bad input (naming the file and line or field,
 * the old page left alone), a real tiny run and walk-forward through `vixen report`, and then the
 * page in a real headless browser: no console message, the charts laid out with a real size, and
 * a screenshot with the charts' pixels in it.
 *
 * The browser part needs Chromium (scripts/deps.sh test installs Debian's); without one the test
 * does everything else and exits 77, which ctest reports as skipped. */
#define _XOPEN_SOURCE 700
#include "helpers.h"
#include "vixen/dqn.h"
#include "vixen/hyperopt.h"
#include "vixen/train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef VX_HAVE_ZLIB
#include <zlib.h>
#endif

static char g_out[1 << 20], g_err[1 << 20];
static char g_run[128];     /* a real tiny run's folder, for the browser */
static char g_browser[512]; /* the browser found on PATH */
static char g_study[128];   /* a tiny study's folder, for the browser */

/* ---- files ----------------------------------------------------------------------------------- */

static char *slurp(const char *path)
{
    size_t n;
    uint8_t *d = th_read(path, &n);
    char *s = realloc(d, n + 1);
    assert_non_null(s);
    s[n] = '\0';
    return s;
}

static void put(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    th_write_str(p, text);
}

static int file_exists(const char *dir, const char *name)
{
    char p[512];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

/* The fixture: five trading days. The agent's daily PnL 100, −300, 50, 400, −100 makes equity
 * 0, 100, −200, −150, 250, 150: its largest drawdown is $300, reached on the second day
 * (2024-01-03). The in-sample row's huge PnL must stay off the equity chart; ridge and oracle are
 * absent. Text fields carry markup that must come out escaped. */
static const char *fixture_eval =
    "{\"split\": \"test\", \"first_row\": 1000, \"last_row\": 1301, \"episodes\": 5,\n"
    " \"period\": \"trading day\",\n"
    " \"period_end_unix_s\": [1704232800, 1704319200, 1704405600, 1704492000, 1704578400],\n"
    " \"checkpoint\": \"best: epoch 3 of 5, validation Sharpe 1.50 <x>\",\n"
    " \"rows\": {\n"
    "  \"agent\": {\"net\": 150, \"gross\": 400, \"costs\": 250, \"pnl_per_bar\": 0.5,\n"
    "   \"sharpe\": 1.234, \"sharpe_se\": 0.5678, \"max_drawdown\": 350, \"turnover\": 0.25,\n"
    "   \"hit_rate\": 0.55, \"trades\": 12, \"bars\": 300, \"stop_outs\": 0,\n"
    "   \"exposure_hist\": [0, 1, 2, 3, 4, 5, 6, 7, 8], \"order_hist\": [10, 20, 30],\n"
    "   \"urgency_hist\": [1, 1, 2], \"position_hist\": [9, 0, 0, 0, 0, 0, 0, 0, 0],\n"
    "   \"period_pnl\": [100, -300, 50, 400, -100]},\n"
    "  \"in_sample\": {\"net\": 8e6, \"gross\": 8e6, \"costs\": 0, \"pnl_per_bar\": 1,\n"
    "   \"sharpe\": 9, \"sharpe_se\": 1, \"max_drawdown\": 0, \"turnover\": 0.1, \"hit_rate\": "
    "0.9,\n"
    "   \"trades\": 3, \"bars\": 900, \"stop_outs\": 0,\n"
    "   \"exposure_hist\": [0, 0, 0, 0, 9, 0, 0, 0, 0], \"order_hist\": [9, 0, 0],\n"
    "   \"urgency_hist\": [9, 0, 0], \"position_hist\": [0, 0, 0, 0, 9, 0, 0, 0, 0],\n"
    "   \"period_pnl\": [1e6, 1e6, 1e6, 1e6, 1e6, 1e6, 1e6, 1e6]},\n"
    "  \"buy_hold\": {\"net\": 160, \"gross\": 170, \"costs\": 10, \"pnl_per_bar\": 0.53,\n"
    "   \"sharpe\": 2.5, \"sharpe_se\": 1.1, \"max_drawdown\": 0, \"turnover\": 0.01,\n"
    "   \"hit_rate\": 0.5, \"trades\": 1, \"bars\": 300, \"stop_outs\": 0,\n"
    "   \"exposure_hist\": [0, 0, 0, 0, 0, 0, 0, 0, 300], \"order_hist\": [300, 0, 0],\n"
    "   \"urgency_hist\": [0, 0, 300], \"position_hist\": [0, 0, 0, 0, 0, 0, 0, 0, 300],\n"
    "   \"period_pnl\": [10, 20, 30, 40, 60]},\n"
    "  \"flat\": {\"net\": 0, \"gross\": 0, \"costs\": 0, \"pnl_per_bar\": 0, \"sharpe\": 0,\n"
    "   \"sharpe_se\": 0, \"max_drawdown\": 0, \"turnover\": 0, \"hit_rate\": 0, \"trades\": 0,\n"
    "   \"bars\": 300, \"stop_outs\": 0, \"exposure_hist\": [0, 0, 0, 0, 300, 0, 0, 0, 0],\n"
    "   \"order_hist\": [300, 0, 0], \"urgency_hist\": [0, 0, 300],\n"
    "   \"position_hist\": [0, 0, 0, 0, 300, 0, 0, 0, 0], \"period_pnl\": [0, 0, 0, 0, 0]},\n"
    "  \"momentum\": {\"net\": -250, \"gross\": -100, \"costs\": 150, \"pnl_per_bar\": -0.83,\n"
    "   \"sharpe\": -3.21, \"sharpe_se\": null, \"max_drawdown\": 250, \"turnover\": 0.3,\n"
    "   \"hit_rate\": null, \"trades\": 30, \"bars\": 300, \"stop_outs\": 0,\n"
    "   \"exposure_hist\": [0, 0, 0, 0, 0, 0, 0, 0, 0], \"order_hist\": [0, 0, 0],\n"
    "   \"urgency_hist\": [0, 0, 0], \"position_hist\": [0, 0, 0, 0, 0, 0, 0, 0, 0],\n"
    "   \"period_pnl\": [-50, -50, -50, -50, -50]}},\n"
    " \"baselines\": {\"momentum_lookback\": 20, \"momentum_train_sharpe\": 0.4,\n"
    "  \"ridge_lambda\": 0.01, \"oracle\": false},\n"
    " \"warnings\": [\"results may rest on <memorised> bars & \\\"more\\\"\"]}\n";

/* Epochs 3 and 4 were logged, then the run resumed from epoch 2 and logged them again: the later
 * rows count. Loss is finite at epochs 2, 3', 4'; validation at 1, 3', 5; the last epoch marked
 * best is 3', so the chosen checkpoint is epoch 3 (not 1, the first marked). */
static const char *fixture_metrics =
    "epoch,env_steps,loss,val_sharpe,val_sharpe_se,val_best,seconds\n"
    "1,100,nan,0.5,0.2,1,0.1\n"
    "2,200,0.9,nan,nan,nan,0.1\n"
    "3,300,7.5,4.0,0.3,1,0.1\n"
    "4,400,7.0,nan,nan,nan,0.1\n"
    "3,300,0.5,1.5,0.3,1,0.1\r\n"
    "4,400,0.4,nan,nan,nan,0.1\n"
    "5,500,-nan,1.2,0.3,0,0.1\n"
    "\n";

/* config.yaml as a run writes it, with max_contracts 2 and markup in a text value */
static void write_config(const char *dir)
{
    vx_train_cfg *c = malloc(sizeof *c);
    assert_non_null(c);
    vx_train_cfg_default(c);
    vx_err e;
    assert_int_equal(vx_train_cfg_set(c, "env.max_contracts", "2", NULL, &e), VX_OK);
    assert_int_equal(vx_train_cfg_set(c, "data.instrument", "<script>alert(1)</script>", NULL, &e),
                     VX_OK);
    char p[512];
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    assert_int_equal(vx_train_cfg_write(c, f), VX_OK);
    fclose(f);
    free(c);
}

static void write_fixture(const char *dir)
{
    put(dir, "eval.json", fixture_eval);
    put(dir, "metrics.csv", fixture_metrics);
    write_config(dir);
}

/* s with its first `from` replaced by `to` (malloc'd). */
static char *replaced(const char *s, const char *from, const char *to)
{
    const char *at = strstr(s, from);
    assert_non_null(at);
    size_t n = strlen(s) - strlen(from) + strlen(to) + 1;
    char *r = malloc(n);
    assert_non_null(r);
    snprintf(r, n, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
    return r;
}

/* ---- reading the page back ------------------------------------------------------------------- */

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

static int is_void(const char *name, size_t n)
{
    const char *v[] = {"meta", "br", "hr", "img", "input", "link", "wbr", "area", "base", "col"};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (strlen(v[i]) == n && strncmp(v[i], name, n) == 0) return 1;
    return 0;
}

/* Every element opened is closed, innermost first (void elements and "<x/>" excepted), and every
 * '<' in the text starts a tag: escaping held, and the browser cannot nest things otherwise than
 * the C code meant. */
static void check_balanced(const char *html)
{
    const char *stack[64];
    size_t len[64];
    int depth = 0;
    for (const char *p = html; (p = strchr(p, '<'));) {
        if (p[1] == '!') { /* the doctype */
            p = strchr(p, '>');
            assert_non_null(p);
            continue;
        }
        int close = p[1] == '/';
        const char *name = p + 1 + close;
        size_t n = strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789");
        if (n == 0) fail_msg("a '<' that starts no tag: %.40s", p);
        const char *end = strchr(name, '>');
        assert_non_null(end);
        if (close) {
            if (depth == 0 || len[depth - 1] != n || strncmp(stack[depth - 1], name, n) != 0)
                fail_msg("</%.*s> closes <%.*s>", (int)n, name, depth ? (int)len[depth - 1] : 0,
                         depth ? stack[depth - 1] : "");
            depth--;
        } else if (end[-1] != '/' && !is_void(name, n)) {
            assert_true(depth < 64);
            stack[depth] = name, len[depth] = n, depth++;
        }
        p = end + 1;
        if (!close && n == 5 && strncmp(name, "style", 5) == 0) p = strstr(p, "</style>");
        assert_non_null(p);
    }
    assert_int_equal(depth, 0);
}

/* The <svg id="id"> element's text (malloc'd). */
static char *svg_of(const char *html, const char *id)
{
    char key[64];
    snprintf(key, sizeof key, "<svg id=\"%s\"", id);
    const char *a = strstr(html, key);
    if (!a) fail_msg("no %s", key);
    const char *b = strstr(a, "</svg>");
    assert_non_null(b);
    size_t n = (size_t)(b - a) + 6;
    char *s = malloc(n + 1);
    assert_non_null(s);
    memcpy(s, a, n);
    s[n] = '\0';
    return s;
}

/* The points of a series' path in an SVG ("M x y L x y …"); returns how many. */
static int path_points(const char *svg, const char *series, double *x, double *y, int max)
{
    char key[96];
    snprintf(key, sizeof key, "<path class=\"series\" data-series=\"%s\"", series);
    const char *p = strstr(svg, key);
    if (!p) return -1;
    p = strstr(p, " d=\"");
    assert_non_null(p);
    p += 4;
    int n = 0;
    while (*p == 'M' || *p == 'L') {
        char *end;
        double a = strtod(p + 1, &end), b = strtod(end, &end);
        assert_true(n < max);
        x[n] = a, y[n] = b, n++;
        p = end;
    }
    assert_int_equal(*p, '"');
    return n;
}

/* Nothing that a browser would fetch or run: no URL, script, frame, image, link or import. */
static void check_self_contained(const char *html)
{
    const char *bad[] = {"http://", "https://", "<script", "<link",  "<img", "<iframe",
                         "@import", "url(",     " src=",   " href=", "//cdn"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (strstr(html, bad[i])) fail_msg("the page holds '%s'", bad[i]);
}

/* No coordinate in any chart is NaN or infinite. */
static void check_svgs_finite(const char *html)
{
    for (const char *p = html; (p = strstr(p, "<svg"));) {
        const char *end = strstr(p, "</svg>");
        assert_non_null(end);
        for (const char *q = p; q < end; q++)
            if (!strncasecmp(q, "nan", 3) || !strncasecmp(q, "inf", 3))
                fail_msg("a chart holds '%.20s'", q);
        p = end;
    }
}

static char *write_and_read(const char *dir)
{
    vx_err e;
    vx_status st = vx_report_write(dir, &e);
    if (st) fail_msg("%s", e.msg);
    char p[512];
    snprintf(p, sizeof p, "%s/report.html", dir);
    return slurp(p);
}

/* ---- the page from known files --------------------------------------------------------------- */

static void test_report_from_fixture(void **state)
{
    (void)state;
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    write_fixture(dir);
    char *h = write_and_read(dir);
    assert_int_equal(th_count_files(dir), 4); /* the three inputs and the page: no temporary */
    assert_int_equal(strncmp(h, "<!DOCTYPE html>\n<html lang=\"en\">", 32), 0);
    assert_non_null(strstr(h, "<meta charset=\"utf-8\">"));
    assert_non_null(strstr(h, "</body>\n</html>\n"));
    check_balanced(h);
    check_self_contained(h);
    check_svgs_finite(h);
    const char *sections[] = {"<section id=\"summary\">", "<section id=\"evaluation\">",
                              "<section id=\"equity\">",  "<section id=\"training\">",
                              "<section id=\"actions\">", "<section id=\"config\">",
                              "<h3 id=\"drawdown\">"};
    for (size_t i = 0; i < sizeof sections / sizeof *sections; i++)
        if (!strstr(h, sections[i])) fail_msg("no %s", sections[i]);
    assert_int_equal(count(h, "<svg id="), 8);
    /* the header: split, rows, bars, days, episodes, checkpoint, the warning — all escaped */
    assert_non_null(strstr(h, "the <strong>test</strong> split, rows 1,000–1,301: 300 bars in 5 "
                              "trading days, walked as 5 episodes"));
    assert_non_null(strstr(h, "best: epoch 3 of 5, validation Sharpe 1.50 &lt;x&gt;"));
    assert_non_null(strstr(h, "<div class=\"warn\" id=\"warnings\"><strong>⚠ 1 warning</strong>"));
    assert_non_null(strstr(h, "results may rest on &lt;memorised&gt; bars &amp; &quot;more&quot;"));
    assert_non_null(strstr(h, "&lt;script&gt;alert(1)&lt;/script&gt;")); /* config.yaml */
    /* the table: every present row, labelled, with its figures; absent rows absent */
    assert_non_null(strstr(h, "<td>150</td><td>400</td><td>250</td><td>0.50</td>"
                              "<td>1.23 ± 0.57</td><td>350</td><td>0.250</td><td>55.0%</td>"
                              "<td>12</td><td>300</td>"));
    assert_non_null(strstr(h, "<tr class=\"in_sample\"><td>agent, in-sample (training split)"));
    assert_non_null(strstr(h, "<td>8,000,000</td>"));
    assert_non_null(strstr(h, "momentum (20 bars)</td><td>−250</td><td>−100</td><td>150</td>"
                              "<td>−0.83</td><td>−3.21</td><td>250</td><td>0.300</td><td>–</td>"));
    assert_null(strstr(h, "<tr class=\"ridge\""));
    assert_null(strstr(h, "<tr class=\"oracle\""));
    /* equity: the agent and each baseline present on the test split, not the in-sample row */
    char *eq = svg_of(h, "chart-equity");
    const char *drawn[] = {"agent", "buy_hold", "flat", "momentum"};
    for (int i = 0; i < 4; i++) {
        char key[96];
        snprintf(key, sizeof key, "<path class=\"series\" data-series=\"%s\"", drawn[i]);
        if (!strstr(eq, key)) fail_msg("the equity chart has no %s line", drawn[i]);
    }
    assert_null(strstr(eq, "in_sample"));
    assert_null(strstr(eq, "ridge"));
    assert_non_null(strstr(eq, ">agent</text><text x=\"726\" y=\"40\" class=\"lv\">+$150</text>"));
    assert_non_null(strstr(eq, "class=\"lv\">+$160<"));
    assert_non_null(strstr(eq, "class=\"lv\">−$250<"));
    assert_non_null(strstr(eq, "class=\"lv\">$0<"));
    assert_non_null(strstr(eq, ">2024-01-02</text>"));
    assert_non_null(strstr(eq, ">2024-01-06</text>"));
    /* the agent's line: the start and five days, evenly spaced, and up on the page exactly when
     * equity is up (y grows downwards) */
    const double cum[6] = {0, 100, -200, -150, 250, 150};
    double x[8], y[8];
    assert_int_equal(path_points(eq, "agent", x, y, 8), 6);
    for (int i = 1; i < 6; i++) assert_true(fabs((x[i] - x[i - 1]) - (x[1] - x[0])) < 0.2);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            if (cum[i] < cum[j] && !(y[i] > y[j])) fail_msg("day %d drawn above day %d", i, j);
    /* the money axis spans the curves (−250 … 250), not the in-sample row's millions */
    assert_non_null(strstr(eq, ">$300</text>"));
    assert_non_null(strstr(eq, ">−$300</text>"));
    assert_null(strstr(eq, "M</text>"));
    free(eq);
    /* drawdown: $300, on the second day */
    char *dd = svg_of(h, "chart-drawdown");
    assert_int_equal(path_points(dd, "drawdown", x, y, 8), 6);
    assert_true(y[2] > y[3] && y[3] > y[5] && y[5] > y[1] && fabs(y[1] - y[0]) < 0.05);
    free(dd);
    assert_non_null(strstr(h, "the largest drawdown is <strong>$300</strong> on 2024-01-03"));
    /* training: the rows of the resumed run replace the earlier ones; NaN skipped */
    char *loss = svg_of(h, "chart-loss");
    assert_int_equal(path_points(loss, "loss", x, y, 8), 3);
    assert_int_equal(count(loss, "<circle class=\"pt\""), 3);
    assert_non_null(strstr(loss, ">0.9</text>")); /* the axis: 0.4 … 0.9, not the 7.5 replaced */
    free(loss);
    char *val = svg_of(h, "chart-val");
    assert_int_equal(path_points(val, "val_sharpe", x, y, 8), 3);
    assert_non_null(strstr(val, "<g class=\"best\" data-best-epoch=\"3\">"));
    assert_non_null(strstr(val, "chosen: epoch 3</text>"));
    assert_non_null(strstr(val, "<path class=\"band\""));
    free(val);
    /* the histograms: levels of max_contracts 2, shares of each */
    char *ex = svg_of(h, "hist-exposure");
    assert_int_equal(count(ex, "<rect class=\"bar\""), 9);
    assert_non_null(strstr(ex, ">−2</text>"));
    assert_non_null(strstr(ex, ">+2</text>"));
    assert_non_null(strstr(ex, ">22%</text>")); /* 8 of 36 */
    assert_non_null(strstr(ex, "max_contracts 2"));
    free(ex);
    char *od = svg_of(h, "hist-order");
    assert_int_equal(count(od, "<rect class=\"bar\""), 3);
    assert_non_null(strstr(od, ">50%</text>"));
    assert_non_null(strstr(od, ">VWAP</text>"));
    free(od);
    char *ps = svg_of(h, "hist-position");
    assert_non_null(strstr(ps, ">100%</text>"));
    free(ps);
    assert_true(strlen(h) < 60000);
    /* the same files make the same page */
    char *h2 = write_and_read(dir);
    assert_string_equal(h, h2);
    free(h2);
    free(h);
    th_rmtree(dir);
}

/* A year of minutes' worth of periods and 5000 epochs: each line thinned to at most 1501 points,
 * keeping the one-day spike that a plain stride would step over; the page stays small. */
static void test_long_series_thinned(void **state)
{
    (void)state;
    enum { N = 20000, EPOCHS = 5000, SPIKE = 12345 };
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    char *json = malloc(1 << 20), *csv = malloc(1 << 20);
    assert_non_null(json);
    assert_non_null(csv);
    size_t k = 0;
    k += (size_t)sprintf(json + k,
                         "{\"split\": \"test\", \"period\": \"bar\", \"period_end_unix_s\": [");
    for (int i = 0; i < N; i++)
        k += (size_t)sprintf(json + k, "%s%d", i ? "," : "", 1704232800 + 60 * i);
    k += (size_t)sprintf(json + k,
                         "], \"rows\": {\"agent\": {\"net\": 0, \"gross\": 0, \"costs\": 0, "
                         "\"pnl_per_bar\": 0, \"sharpe\": 0, \"sharpe_se\": 0, "
                         "\"max_drawdown\": 0, \"turnover\": 0, \"hit_rate\": 0, "
                         "\"trades\": 0, \"bars\": 20000, "
                         "\"exposure_hist\": [1,1,1,1,1,1,1,1,1], "
                         "\"order_hist\": [1,1,1], \"urgency_hist\": [1,1,1], "
                         "\"position_hist\": [1,1,1,1,1,1,1,1,1], \"period_pnl\": [");
    uint64_t s = 7;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int v = i == SPIKE ? 50000 : i == SPIKE + 1 ? -50000 : (int)((s >> 33) % 201) - 100;
        k += (size_t)sprintf(json + k, "%s%d", i ? "," : "", v);
    }
    sprintf(json + k, "]}}}\n");
    put(dir, "eval.json", json);
    k = (size_t)sprintf(csv, "epoch,loss,val_sharpe,val_sharpe_se,val_best\n");
    for (int i = 1; i <= EPOCHS; i++)
        k += (size_t)sprintf(csv + k, "%d,%g,%g,0.5,%d\n", i, 1.0 / i, sin(i / 50.0), i == 4321);
    put(dir, "metrics.csv", csv);
    write_config(dir);
    char *h = write_and_read(dir);
    check_balanced(h);
    check_svgs_finite(h);
    char *eq = svg_of(h, "chart-equity");
    double *x = malloc(4000 * sizeof *x), *y = malloc(4000 * sizeof *y);
    int n = path_points(eq, "agent", x, y, 4000);
    if (n < 1000 || n > 1501) fail_msg("the equity line has %d points", n);
    printf("20001 equity points drawn as %d\n", n);
    int top = 0;
    for (int i = 0; i < n; i++)
        if (y[i] < y[top]) top = i;
    double at = (x[top] - x[0]) / (x[n - 1] - x[0]) * N; /* x = period; the spike ends SPIKE+1 */
    if (fabs(at - (SPIKE + 1)) > 6) fail_msg("the highest point is at period %.0f", at);
    assert_non_null(strstr(eq, ">2024-01-02</text>"));
    free(eq);
    char *loss = svg_of(h, "chart-loss");
    n = path_points(loss, "loss", x, y, 4000);
    if (n < 1000 || n > 1501) fail_msg("the loss line has %d points", n);
    assert_int_equal(count(loss, "<circle"), 0); /* no markers on so many points */
    free(loss);
    char *val = svg_of(h, "chart-val");
    assert_non_null(strstr(val, "data-best-epoch=\"4321\""));
    free(val);
    if (strlen(h) > 300000) fail_msg("the page is %zu bytes", strlen(h));
    free(x), free(y), free(h), free(json), free(csv);
    th_rmtree(dir);
}

/* ---- bad input: an error naming the file and where, and the old page left alone -------------- */

typedef struct {
    const char *file, *text; /* what to write over the fixture's file (NULL text: remove it) */
    const char *msg;         /* in the error message */
    vx_status status;        /* 0: the settings reader's own */
} bad_case;

static void test_bad_inputs(void **state)
{
    (void)state;
    const bad_case cases[] = {
        {"eval.json", NULL, "eval.json: cannot open", VX_ERR_IO},
        {"eval.json", "{\"split\": \"test\",\n \"rows\": x\n}\n",
         "eval.json: line 2: not valid JSON", VX_ERR_FORMAT},
        {"eval.json", "{\"split\": \"test\"}\n\n}\n", "eval.json: line 3: text after the JSON",
         VX_ERR_FORMAT},
        {"eval.json", "[1, 2]", "eval.json: not a JSON object", VX_ERR_FORMAT},
        {"eval.json", "{\"rows\": {}, \"period_end_unix_s\": []}", "field 'split'", VX_ERR_FORMAT},
        {"eval.json", "{\"split\": \"test\", \"period_end_unix_s\": [], \"rows\": {}}",
         "field 'rows.agent': missing", VX_ERR_FORMAT},
        {"metrics.csv", NULL, "metrics.csv: cannot open", VX_ERR_IO},
        {"metrics.csv", "", "metrics.csv: line 1: no header line", VX_ERR_FORMAT},
        {"metrics.csv", "step,loss\n1,2\n", "metrics.csv: line 1, field 'epoch'", VX_ERR_FORMAT},
        {"metrics.csv", "epoch,loss\n1,0.5\n2,0.4\n3,zero\n",
         "metrics.csv: line 4, field 'loss': not a number: 'zero'", VX_ERR_FORMAT},
        {"metrics.csv", "epoch,loss\n1,0.5\n2\n", "metrics.csv: line 3: fewer fields",
         VX_ERR_FORMAT},
        {"metrics.csv", "epoch,loss\n1,0.5,9\n", "metrics.csv: line 2: more fields", VX_ERR_FORMAT},
        {"metrics.csv", "epoch,loss\nnan,0.5\n", "line 2, field 'epoch': not a finite",
         VX_ERR_FORMAT},
        {"config.yaml", NULL, "config.yaml: cannot open", VX_ERR_IO},
        {"config.yaml", "train:\n  epochs: 3\n  frobnicate: 1\n", "config.yaml: line 3", 0},
    };
    char dir[64];
    th_tmpdir(dir, sizeof dir);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const bad_case *c = &cases[i];
        write_fixture(dir);
        put(dir, "report.html", "the old page");
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, c->file);
        if (c->text) put(dir, c->file, c->text);
        else unlink(p);
        vx_err e;
        vx_status st = vx_report_write(dir, &e);
        if (st == VX_OK || !strstr(e.msg, c->msg))
            fail_msg("case %zu: status %d, message '%s', expected '%s'", i, st, st ? e.msg : "",
                     c->msg);
        if (c->status) assert_int_equal(st, c->status);
        snprintf(p, sizeof p, "%s/report.html", dir);
        char *old = slurp(p);
        assert_string_equal(old, "the old page");
        free(old);
        assert_int_equal(th_count_files(dir), c->text ? 4 : 3); /* no temporary left */
    }
    /* a row's period PnL must cover the split's periods; a figure must be a number; a histogram
     * must have its length */
    const char *edits[][3] = {
        {"[10, 20, 30, 40, 60]", "[10, 20, 30, 40]",
         "eval.json: field 'rows.buy_hold.period_pnl': 4 values, but period_end_unix_s has 5"},
        {"\"sharpe\": 1.234", "\"sharpe\": \"hi\"",
         "eval.json: field 'rows.agent.sharpe': not a number"},
        {"[10, 20, 30]", "[10, 20, 30, 4]",
         "eval.json: field 'rows.agent.order_hist': 4 values where 3 were expected"},
        {"[100, -300, 50, 400, -100]", "[100, -300, null, 400, -100]",
         "eval.json: field 'rows.agent.period_pnl': value 3 is not a number"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        write_fixture(dir);
        char *j = replaced(fixture_eval, edits[i][0], edits[i][1]);
        put(dir, "eval.json", j);
        free(j);
        vx_err e;
        assert_int_equal(vx_report_write(dir, &e), VX_ERR_FORMAT);
        if (!strstr(e.msg, edits[i][2])) fail_msg("'%s', expected '%s'", e.msg, edits[i][2]);
    }
    vx_err e;
    /* no such folder */
    assert_int_equal(vx_report_write("/nonexistent/run", &e), VX_ERR_IO);
    assert_non_null(strstr(e.msg, "/nonexistent/run/eval.json"));
    th_rmtree(dir);
}

/* ---- a real run, and the command ------------------------------------------------------------- */

static void tiny(vx_train_cfg *c, const char *dir)
{
    vx_train_cfg_default(c);
    vx_dqn_settings *d = vx_train_algo_settings(c, "dqn");
    c->synth_days = 60; /* a test split of 9 trading days: curves with some shape */
    c->env.episode_len = 60;
    c->envs = 16;
    c->steps_per_epoch = 40;
    d->learner.batch = 32;
    d->trunk[0] = d->trunk[1] = 32;
    d->head_hidden = 16;
    c->epochs = 6;
    d->warmup = 200;
    c->eval_every = 1;
    c->checkpoint_every = 3;
    d->replay_capacity = 5000;
    snprintf(c->run_dir, sizeof c->run_dir, "%s", dir);
}

static int vixen(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s", VX_BINARY, args);
    return th_run(cmd, g_out, sizeof g_out, g_err, sizeof g_err);
}

static void test_run_writes_report_and_command(void **state)
{
    (void)state;
    char root[64], args[1024];
    th_tmpdir(root, sizeof root);
    snprintf(g_run, sizeof g_run, "%s/run", root);
    vx_train_cfg *c = malloc(sizeof *c);
    assert_non_null(c);
    tiny(c, g_run);
    vx_err e;
    if (vx_train_run(c, NULL, 0, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
    char p[512];
    snprintf(p, sizeof p, "%s/report.html", g_run);
    char *h = slurp(p);
    check_balanced(h);
    check_self_contained(h);
    check_svgs_finite(h);
    assert_int_equal(count(h, "<svg id="), 8);
    assert_non_null(strstr(h, "<tr class=\"oracle\">")); /* a synthetic market: every baseline */
    assert_non_null(strstr(h, "data-best-epoch=\""));
    assert_non_null(strstr(h, "checkpoint chosen (epoch"));
    char *eq = svg_of(h, "chart-equity");
    double x[64], y[64];
    int n = path_points(eq, "agent", x, y, 64);
    assert_true(n >= 5); /* the start and each test day */
    free(eq);
    printf("report of a tiny run: %zu bytes\n", strlen(h));
    free(h);
    /* the command writes it again and prints its path */
    unlink(p);
    snprintf(args, sizeof args, "report %s", g_run);
    assert_int_equal(vixen(args), 0);
    char want[600];
    snprintf(want, sizeof want, "%s/report.html\n", g_run);
    assert_string_equal(g_out, want);
    assert_true(file_exists(g_run, "report.html"));
    assert_int_equal(vixen("report"), 2);
    assert_int_equal(vixen("report --help"), 0);
    assert_non_null(strstr(g_out, "usage: vixen report RUN"));
    assert_int_equal(vixen("--help"), 0);
    assert_non_null(strstr(g_out, "report RUN"));
    assert_int_equal(vixen("train --help"), 0);
    assert_non_null(strstr(g_out, "report.html"));
    snprintf(args, sizeof args, "report %s/nothing", root);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(g_err, "no such run folder"));
    snprintf(args, sizeof args, "report %s", root); /* a folder, but no run */
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(g_err, "eval.json: cannot open"));
    /* walk-forward: each fold is a run with its report; the command rewrites them all */
    char walk[128];
    snprintf(walk, sizeof walk, "%s/walk", root);
    tiny(c, walk);
    c->epochs = 2;
    c->env.test_fraction = 0.3;
    vx_eval_report all;
    if (vx_train_walk_forward(c, NULL, 2, 0, NULL, NULL, &all, &e)) fail_msg("%s", e.msg);
    char f1[160], f2[160];
    snprintf(f1, sizeof f1, "%s/fold-1", walk);
    snprintf(f2, sizeof f2, "%s/fold-2", walk);
    /* the one report is over both folds' test blocks, in order: their rows, periods and money */
    double rows[2][2], periods = 0, net = 0, bars = 0, edge[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/eval.json", k ? f2 : f1);
        char *text = slurp(p);
        cJSON *o = cJSON_Parse(text);
        assert_non_null(o);
        rows[k][0] = cJSON_GetObjectItem(o, "first_row")->valuedouble;
        rows[k][1] = cJSON_GetObjectItem(o, "last_row")->valuedouble;
        const cJSON *ends = cJSON_GetObjectItem(o, "period_end_unix_s");
        periods += cJSON_GetArraySize(ends);
        /* fold 1's last day and fold 2's first: one trading day (UTC date of ts + 2 h) when the
         * blocks' boundary falls inside it, counted once in the whole */
        const cJSON *d = cJSON_GetArrayItem(ends, k ? 0 : cJSON_GetArraySize(ends) - 1);
        edge[k] = floor((d->valuedouble + 7200) / 86400);
        const cJSON *ag = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "rows"), "agent");
        net += cJSON_GetObjectItem(ag, "net")->valuedouble;
        bars += cJSON_GetObjectItem(ag, "bars")->valuedouble;
        cJSON_Delete(o);
        free(text);
    }
    assert_true(rows[0][1] == rows[1][0]); /* consecutive blocks */
    assert_true((double)all.first_row == rows[0][0] && (double)all.last_row == rows[1][1]);
    assert_true((double)all.n_periods == periods - (edge[0] == edge[1]));
    assert_true(all.row[VX_EVAL_AGENT].bars == bars);
    assert_true(fabs(all.row[VX_EVAL_AGENT].net - net) < 1e-6 * (1 + fabs(net)));
    vx_eval_report_free(&all);
    assert_true(file_exists(f1, "report.html") && file_exists(f2, "report.html"));
    snprintf(p, sizeof p, "%s/report.html", f1);
    unlink(p);
    snprintf(args, sizeof args, "report %s", walk);
    assert_int_equal(vixen(args), 0);
    snprintf(want, sizeof want, "%s/report.html\n%s/report.html\n", f1, f2);
    assert_string_equal(g_out, want);
    assert_true(file_exists(f1, "report.html"));
    /* resuming the finished walk trains nothing again: each fold's chosen checkpoint is evaluated
     * again (walk.c) — best.safetensors, the one its eval.json was made from, or latest.safetensors
     * where the fold has no best (fold 2's removed here) — with the baselines and the in-sample
     * row, so the folds' rows are those of their eval.json */
    snprintf(p, sizeof p, "%s/checkpoint/best.safetensors", f2);
    assert_int_equal(unlink(p), 0);
    if (vx_train_walk_forward(c, NULL, 2, 1, NULL, NULL, &all, &e)) fail_msg("%s", e.msg);
    vx_eval_report_free(&all);
    snprintf(p, sizeof p, "%s/walk_forward.json", walk);
    char *wtext = slurp(p);
    cJSON *wj = cJSON_Parse(wtext);
    assert_non_null(wj);
    const cJSON *folds = cJSON_GetObjectItem(wj, "folds");
    assert_int_equal(cJSON_GetArraySize(folds), 2);
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/eval.json", k ? f2 : f1);
        char *text = slurp(p);
        cJSON *o = cJSON_Parse(text);
        assert_non_null(o);
        const cJSON *fold = cJSON_GetArrayItem(folds, k);
        const char *was = cJSON_GetObjectItem(o, "checkpoint")->valuestring;
        const char *now = cJSON_GetObjectItem(fold, "checkpoint")->valuestring;
        int best = 0;
        assert_non_null(strstr(was, "best: epoch "));
        assert_int_equal(sscanf(strstr(was, "best: epoch ") + 12, "%d", &best), 1);
        char want_ck[256]; /* fold 1's chosen checkpoint as its run named it; fold 2's the
                            * latest, which the re-evaluation names (its run chose another) */
        if (k == 0) snprintf(want_ck, sizeof want_ck, "%s", was);
        else
            snprintf(want_ck, sizeof want_ck, "%s/checkpoint/latest.safetensors (latest, epoch 2)",
                     f2);
        if (strcmp(now, want_ck) != 0)
            fail_msg("fold %d: checkpoint '%s', not '%s'", k + 1, now, want_ck);
        const cJSON *rw = cJSON_GetObjectItem(o, "rows"), *rn = cJSON_GetObjectItem(fold, "rows");
        assert_int_equal(cJSON_GetArraySize(rn), cJSON_GetArraySize(rw));
        assert_non_null(cJSON_GetObjectItem(rn, "in_sample"));
        assert_non_null(cJSON_GetObjectItem(rn, "buy_hold"));
        const cJSON *row;
        cJSON_ArrayForEach(row, rw)
        {
            /* the agent from another checkpoint (fold 2's latest) may trade differently */
            int agent = !strcmp(row->string, "agent") || !strcmp(row->string, "in_sample");
            if (k == 1 && agent) continue;
            const cJSON *again = cJSON_GetObjectItem(rn, row->string);
            assert_non_null(again);
            const char *keys[] = {"net", "sharpe", "trades", "bars"};
            for (int i = 0; i < 4; i++)
                if (cJSON_GetObjectItem(again, keys[i])->valuedouble !=
                    cJSON_GetObjectItem(row, keys[i])->valuedouble)
                    fail_msg("fold %d: rows.%s.%s differs when evaluated again", k + 1, row->string,
                             keys[i]);
        }
        cJSON_Delete(o);
        free(text);
    }
    cJSON_Delete(wj);
    free(wtext);
    free(c);
}

/* ---- a study's report --------------------------------------------------------------------- */

static int browse(const char *page, const char *what, const char *size); /* below */
static int console_lines(void);

/* A tiny study's page from its store: balanced, self-contained, finite; the history has a point
 * for every trial with a result, each parameter a chart; the command writes it again. */
static void test_study_report(void **state)
{
    (void)state;
    th_tmpdir(g_study, sizeof g_study);
    vx_train_cfg *c = malloc(sizeof *c);
    vx_train_cfg_default(c);
    vx_err e;
    const char *keys[][2] = {
        {"data.synth_days", "12"},       {"env.episode_len", "60"},   {"train.envs", "16"},
        {"train.steps_per_epoch", "40"}, {"dqn.batch", "32"},         {"dqn.trunk", "32,32"},
        {"dqn.head_hidden", "16"},       {"dqn.warmup", "200"},       {"train.eval_every", "1"},
        {"train.epochs", "3"},           {"replay.capacity", "4000"}, {"train.device", "cpu"}};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        assert_int_equal(vx_train_cfg_set(c, keys[i][0], keys[i][1], "t", &e), VX_OK);
    const char *space = "dqn.lr: {type: logfloat, low: 1.0e-4, high: 3.0e-3}\n"
                        "dqn.n_step: {type: int, low: 1, high: 3}\n"
                        "dqn.loss: {type: categorical, values: [mse, huber]}\n";
    vx_study_cfg sc;
    vx_study_cfg_default(&sc);
    sc.pso.swarm = 4, sc.generations = 2, sc.concurrency = 2;
    vx_study *s;
    assert_int_equal(vx_study_create(g_study, &sc, space, strlen(space), c, &s, &e), VX_OK);
    if (vx_study_run(s, NULL, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
    vx_study_close(s);
    free(c);
    char page[256];
    snprintf(page, sizeof page, "%s/report.html", g_study);
    char *h = slurp(page);
    check_balanced(h);
    check_self_contained(h);
    check_svgs_finite(h);
    const char *ids[] = {"history", "curves",      "param-0", "param-1",
                         "param-2", "concurrency", "memory"};
    for (int i = 0; i < 7; i++) {
        char key[64];
        snprintf(key, sizeof key, "<svg id=\"%s\"", ids[i]);
        if (!strstr(h, key)) fail_msg("the study report has no %s", key);
    }
    char *hist = svg_of(h, "history");
    assert_int_equal(count(hist, "<circle"), 8); /* 8 trials, each with a validation result */
    free(hist);
    assert_non_null(strstr(h, "The best trial on the test split"));
    assert_non_null(strstr(h, "dqn.n_step: {type: int"));
    free(h);
    unlink(page);
    char args[300];
    snprintf(args, sizeof args, "hyperopt report %s", g_study);
    assert_int_equal(vixen(args), 0);
    assert_true(file_exists(g_study, "report.html"));
    snprintf(args, sizeof args, "hyperopt report %s/none", g_study);
    assert_int_equal(vixen(args), 1);
    assert_non_null(strstr(g_err, "no study here"));
}

/* In the browser: no console message, every chart laid out at a readable size. */
static void test_study_report_in_browser(void **state)
{
    (void)state;
    char page[256], probe[256];
    snprintf(page, sizeof page, "%s/report.html", g_study);
    snprintf(probe, sizeof probe, "%s/probe.html", g_study);
    assert_int_equal(browse(page, "--dump-dom", "1200,2000"), 0);
    if (console_lines()) fail_msg("console messages on the study report: %.2000s", g_err);
    char *src = slurp(page);
    assert_int_equal(count(g_out, "<circle"), count(src, "<circle"));
    const char *measure =
        "<script>(function () { var o = [];\n"
        "document.querySelectorAll('svg.chart').forEach(function (s) {\n"
        "  var b = s.getBoundingClientRect();\n"
        "  o.push(s.id + ' ' + Math.round(b.width) + ' ' + Math.round(b.height)); });\n"
        "var pre = document.createElement('pre'); pre.id = 'measured';\n"
        "pre.textContent = o.join('\\n') + '\\n'; document.body.appendChild(pre); })();</script>\n";
    char *at = strstr(src, "</body>");
    assert_non_null(at);
    FILE *f = fopen(probe, "w");
    assert_non_null(f);
    fprintf(f, "%.*s%s%s", (int)(at - src), src, measure, at);
    fclose(f);
    free(src);
    assert_int_equal(browse(probe, "--dump-dom", "1200,2000"), 0);
    const char *m = strstr(g_out, "<pre id=\"measured\">");
    if (!m) fail_msg("the measuring script wrote nothing: %.1000s", g_err);
    const char *ids[] = {"history", "curves", "param-0", "concurrency", "memory"};
    for (int i = 0; i < 5; i++) {
        char key[64];
        snprintf(key, sizeof key, "\n%s ", ids[i]);
        const char *l = strstr(m, key);
        if (!l && strncmp(m + 19, key + 1, strlen(key) - 1) == 0) l = m + 18;
        if (!l) fail_msg("no size for %s: %.600s", ids[i], m);
        int w = 0, hgt = 0;
        assert_int_equal(sscanf(l + strlen(key), "%d %d", &w, &hgt), 2);
        if (w < 300 || hgt < 120) fail_msg("%s laid out at %d x %d px", ids[i], w, hgt);
    }
}

/* ---- the page in a real browser -------------------------------------------------------------- */

static int find_browser(void)
{
    const char *names[] = {"chromium", "chromium-browser"};
    const char *path = getenv("PATH");
    if (!path) return 0;
    for (size_t i = 0; i < 2; i++) {
        for (const char *p = path; *p;) {
            size_t n = strcspn(p, ":");
            snprintf(g_browser, sizeof g_browser, "%.*s/%s", (int)n, p, names[i]);
            if (n && access(g_browser, X_OK) == 0) return 1;
            p += n + (p[n] == ':');
        }
    }
    g_browser[0] = '\0';
    return 0;
}

/* Runs the browser headless on one local page with `what` (--dump-dom, --screenshot=…), its
 * console messages logged to stderr, under a time limit and with its own throwaway profile. */
static int browse(const char *page, const char *what, const char *size)
{
    char profile[64], cmd[2048];
    th_tmpdir(profile, sizeof profile);
    snprintf(cmd, sizeof cmd,
             "timeout 90 '%s' --headless --no-sandbox --disable-gpu --no-first-run "
             "--no-default-browser-check --disable-extensions --hide-scrollbars "
             "--user-data-dir=%s --enable-logging=stderr --v=0 --window-size=%s %s 'file://%s'",
             g_browser, profile, size, what, page);
    int rc = th_run(cmd, g_out, sizeof g_out, g_err, sizeof g_err);
    th_rmtree(profile);
    if (rc == 124) fail_msg("the browser did not finish within 90 s on %s", page);
    return rc;
}

/* The console messages of the last page: Chromium logs each (errors, uncaught exceptions, SVG
 * attributes it could not parse) as a line with "CONSOLE" in it. */
static int console_lines(void)
{
    int n = 0;
    for (const char *p = g_err; (p = strstr(p, "CONSOLE")); p++) n++;
    return n;
}

#ifdef VX_HAVE_ZLIB
typedef struct {
    double ink; /* the share of pixels that are not white */
    long agent; /* pixels within a small distance of the agent's blue (#1f6feb) */
    long w, h;
} png_stats;

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int paeth(int a, int b, int c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) and counts pixels. */
static png_stats png_read(const char *path)
{
    size_t n;
    uint8_t *d = th_read(path, &n), *z = malloc(n);
    assert_non_null(z);
    assert_true(n > 33 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0);
    png_stats s = {0, 0, be32(d + 16), be32(d + 20)};
    int depth = d[24], type = d[25], interlace = d[28], bpp = type == 6 ? 4 : 3;
    if (depth != 8 || (type != 2 && type != 6) || interlace)
        fail_msg("%s: a PNG this test does not decode (depth %d, colour type %d)", path, depth,
                 type);
    size_t zn = 0;
    for (size_t p = 8; p + 12 <= n;) {
        uint32_t len = be32(d + p);
        assert_true(p + 12 + len <= n);
        if (memcmp(d + p + 4, "IDAT", 4) == 0) memcpy(z + zn, d + p + 8, len), zn += len;
        p += 12 + len;
    }
    size_t stride = (size_t)s.w * bpp, rn = (stride + 1) * (size_t)s.h;
    uint8_t *raw = malloc(rn);
    uLongf out = rn;
    assert_non_null(raw);
    assert_int_equal(uncompress(raw, &out, z, zn), Z_OK);
    assert_int_equal(out, rn);
    long ink = 0;
    for (long y = 0; y < s.h; y++) {
        uint8_t *row = raw + (size_t)y * (stride + 1), f = row[0], *px = row + 1;
        uint8_t *up = y ? raw + (size_t)(y - 1) * (stride + 1) + 1 : NULL;
        for (size_t i = 0; i < stride; i++) {
            int a = i >= (size_t)bpp ? px[i - bpp] : 0, b = up ? up[i] : 0;
            int c = up && i >= (size_t)bpp ? up[i - bpp] : 0;
            px[i] += f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : f == 4 ? paeth(a, b, c) : 0;
        }
        for (long x = 0; x < s.w; x++) {
            const uint8_t *q = px + x * bpp;
            if (q[0] < 250 || q[1] < 250 || q[2] < 250) ink++;
            if (abs(q[0] - 0x1f) < 40 && abs(q[1] - 0x6f) < 40 && abs(q[2] - 0xeb) < 40) s.agent++;
        }
    }
    s.ink = (double)ink / ((double)s.w * (double)s.h);
    free(raw), free(z), free(d);
    return s;
}
#endif

static void test_browser(void **state)
{
    (void)state;
    char dir[64], page[256], bad[256], empty[256], probe[256], shot[256], blank[256];
    th_tmpdir(dir, sizeof dir);
    snprintf(page, sizeof page, "%s/report.html", g_run);
    snprintf(bad, sizeof bad, "%s/bad.html", dir);
    snprintf(empty, sizeof empty, "%s/empty.html", dir);
    snprintf(probe, sizeof probe, "%s/probe.html", dir);
    snprintf(shot, sizeof shot, "%s/report.png", dir);
    snprintf(blank, sizeof blank, "%s/empty.png", dir);
    /* 1. the console check sees errors: a page with a path the SVG parser rejects and a script
     * that throws must log them, or a clean result below would prove nothing */
    put(dir, "bad.html",
        "<!DOCTYPE html><html><body><svg width=\"50\" height=\"50\">"
        "<path d=\"M 0 NaN L 5 5\"/></svg><script>notDefined();</script>"
        "</body></html>\n");
    assert_int_equal(browse(bad, "--dump-dom", "800,600"), 0);
    if (console_lines() < 2)
        fail_msg("the browser logged %d console lines for a page with two errors: this check "
                 "cannot see errors here; stderr: %.2000s",
                 console_lines(), g_err);
    /* 2. the report loads without a single console message, and the parsed DOM holds every
     * chart and every path the file has (nothing dropped or re-nested by the parser) */
    char *src = slurp(page);
    assert_int_equal(browse(page, "--dump-dom", "1200,2000"), 0);
    if (console_lines()) fail_msg("console messages on the report: %.2000s", g_err);
    const char *ids[] = {"chart-equity",  "chart-drawdown", "chart-loss",   "chart-val",
                         "hist-exposure", "hist-order",     "hist-urgency", "hist-position"};
    for (int i = 0; i < 8; i++) {
        char key[64];
        snprintf(key, sizeof key, "<svg id=\"%s\"", ids[i]);
        if (!strstr(g_out, key)) fail_msg("the rendered DOM has no %s", key);
    }
    assert_int_equal(count(g_out, "<path"), count(src, "<path"));
    assert_int_equal(count(g_out, "<rect class=\"bar\""), count(src, "<rect class=\"bar\""));
    assert_non_null(strstr(g_out, "<tr class=\"agent\">"));
    /* 3. layout: a copy with a test-only script that measures what the browser laid out — each
     * chart's box and each line's length — and writes it into the DOM */
    const char *measure =
        "<script>(function () { var o = [];\n"
        "document.querySelectorAll('svg.chart').forEach(function (s) {\n"
        "  var b = s.getBoundingClientRect();\n"
        "  o.push('svg ' + s.id + ' ' + Math.round(b.width) + ' ' + Math.round(b.height)); });\n"
        "document.querySelectorAll('path.series').forEach(function (p) {\n"
        "  var b = p.getBBox();\n"
        "  o.push('line ' + p.ownerSVGElement.id + ':' + p.getAttribute('data-series') + ' ' +\n"
        "         Math.round(p.getTotalLength()) + ' ' + Math.round(b.width)); });\n"
        "var pre = document.createElement('pre'); pre.id = 'measured';\n"
        "pre.textContent = o.join('\\n') + '\\n'; document.body.appendChild(pre); })();</script>\n";
    char *at = strstr(src, "</body>");
    assert_non_null(at);
    FILE *f = fopen(probe, "w");
    assert_non_null(f);
    fprintf(f, "%.*s%s%s", (int)(at - src), src, measure, at);
    fclose(f);
    assert_int_equal(browse(probe, "--dump-dom", "1200,2000"), 0);
    if (console_lines()) fail_msg("console messages while measuring: %.2000s", g_err);
    const char *m = strstr(g_out, "<pre id=\"measured\">");
    if (!m) fail_msg("the measuring script wrote nothing: %.1000s", g_err);
    for (int i = 0; i < 8; i++) {
        char key[64];
        snprintf(key, sizeof key, "svg %s ", ids[i]);
        const char *l = strstr(m, key);
        assert_non_null(l);
        int w = 0, hgt = 0;
        assert_int_equal(sscanf(l + strlen(key), "%d %d", &w, &hgt), 2);
        if (w < 300 || hgt < 120) fail_msg("%s laid out at %d x %d px", ids[i], w, hgt);
    }
    const char *l = strstr(m, "line chart-equity:agent ");
    assert_non_null(l);
    int len = 0, width = 0;
    assert_int_equal(sscanf(l + strlen("line chart-equity:agent "), "%d %d", &len, &width), 2);
    if (len < 500 || width < 500)
        fail_msg("the agent's equity line: %d px long, %d wide", len, width);
    assert_non_null(strstr(m, "line chart-loss:loss "));
    assert_non_null(strstr(m, "line chart-val:val_sharpe "));
    printf("measured in the browser:\n%.*s\n", (int)(strstr(m, "</pre>") - m - 19), m + 19);
    /* 4. pixels: the report's screenshot against an empty page's, same size */
    put(dir, "empty.html", "<!DOCTYPE html><html><body></body></html>\n");
    char opt[300];
    snprintf(opt, sizeof opt, "--screenshot=%s", blank);
    assert_int_equal(browse(empty, opt, "1200,1800"), 0);
    snprintf(opt, sizeof opt, "--screenshot=%s", shot);
    assert_int_equal(browse(page, opt, "1200,1800"), 0);
    if (console_lines()) fail_msg("console messages on the screenshot: %.2000s", g_err);
#ifdef VX_HAVE_ZLIB
    /* decoded: the empty page is all white (which shows the decoder works), the report has ink
     * over a fair share of the window and the agent's blue in hundreds of pixels — the table
     * swatch, the highlighted row aside, those are its lines. This proves the page is painted,
     * with colour where the charts are; not that every chart is correct (the checks above). */
    png_stats e0 = png_read(blank), r0 = png_read(shot);
    printf("screenshot %ldx%ld: %.1f%% of the pixels not white, %ld of the agent's blue (empty "
           "page: %.1f%%, %ld)\n",
           r0.w, r0.h, 100 * r0.ink, r0.agent, 100 * e0.ink, e0.agent);
    assert_true(e0.w == 1200 && r0.w == 1200 && r0.h == 1800);
    assert_true(e0.ink == 0 && e0.agent == 0);
    if (r0.ink < 0.03 || r0.agent < 300)
        fail_msg("the screenshot looks blank: %.2f%% ink, %ld blue pixels", 100 * r0.ink, r0.agent);
#else
    /* without zlib only the compressed sizes: a page of text and charts compresses far worse than
     * a blank one. This proves something was painted, not what. */
    size_t n0, n1;
    free(th_read(blank, &n0));
    free(th_read(shot, &n1));
    printf("screenshot %zu bytes, empty page %zu bytes\n", n1, n0);
    if (n1 < 4 * n0) fail_msg("the screenshot (%zu bytes) looks blank (empty: %zu)", n1, n0);
#endif
    free(src);
    th_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_from_fixture),
        cmocka_unit_test(test_long_series_thinned),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_run_writes_report_and_command),
        cmocka_unit_test(test_study_report),
    };
    int rc = cmocka_run_group_tests_name("report", tests, NULL, NULL);
    if (!rc && !find_browser()) {
        printf("test_report: skipped the browser part: no chromium or chromium-browser on PATH "
               "(scripts/deps.sh test installs Debian's chromium)\n");
        rc = 77;
    } else if (!rc) {
        printf("test_report: browser %s\n", g_browser);
        const struct CMUnitTest browser[] = {cmocka_unit_test(test_browser),
                                             cmocka_unit_test(test_study_report_in_browser)};
        rc = cmocka_run_group_tests_name("report in a browser", browser, NULL, NULL);
    }
    char root[128];
    if (g_run[0]) { /* the tiny run's folder: its parent is the test's */
        snprintf(root, sizeof root, "%.*s", (int)(strrchr(g_run, '/') - g_run), g_run);
        th_rmtree(root);
    }
    if (g_study[0]) th_rmtree(g_study);
    return rc;
}

/* eval_print.c — an evaluation report as a table (eval.txt, the terminal) and as JSON (eval.json,
 * `vixen eval --json`, the run report). The JSON is built with cJSON, so warnings and names are
 * escaped correctly; numbers that are undefined (a standard error over fewer than two periods)
 * are written as null. */
#include "vixen/eval.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* "momentum (20 bars)", "ridge (λ 0.01)", or the plain name. */
static void row_label(const vx_eval_report *r, int k, char *buf, size_t n)
{
    if (k == VX_EVAL_MOMENTUM && r->have_baselines)
        snprintf(buf, n, "momentum %d", r->baselines.momentum_k);
    else if (k == VX_EVAL_IN_SAMPLE) snprintf(buf, n, "agent (train)");
    else snprintf(buf, n, "%s", vx_eval_row_name((vx_eval_row)k));
}

void vx_eval_print(FILE *f, const vx_eval_report *r)
{
    const vx_eval_metrics *any = NULL;
    for (int k = 0; k < VX_EVAL_ROWS && !any; k++)
        if (r->row[k].present && k != VX_EVAL_IN_SAMPLE) any = &r->row[k];
    fprintf(f, "%s split: rows %lld..%lld, %.0f bars in %zu %s, %zu episodes; after costs\n",
            vx_split_name(r->split), (long long)r->first_row, (long long)r->last_row,
            any ? any->bars : 0.0, r->n_periods, r->period_is_day ? "trading days" : "bars",
            r->episodes);
    if (r->checkpoint[0]) fprintf(f, "checkpoint: %s\n", r->checkpoint);
    if (r->trained_on[0]) fprintf(f, "trained on: %s\n", r->trained_on);
    fprintf(f, "  %-15s %11s %11s %10s %8s %15s %10s %8s %7s %7s\n", "policy", "net $", "gross $",
            "costs $", "$/bar", "Sharpe ± se", "max DD $", "turnover", "hit", "trades");
    for (int k = 0; k < VX_EVAL_ROWS; k++) {
        const vx_eval_metrics *x = &r->row[k];
        if (!x->present) continue;
        char name[40], sr[40];
        row_label(r, k, name, sizeof name);
        if (isnan(x->sharpe_se)) snprintf(sr, sizeof sr, "%.2f", x->sharpe);
        else snprintf(sr, sizeof sr, "%.2f ± %.2f", x->sharpe, x->sharpe_se);
        fprintf(f, "  %-15s %11.0f %11.0f %10.0f %8.2f %15s %10.0f %8.3f %6.1f%% %7.0f\n", name,
                x->net, x->gross, x->costs, x->pnl_per_bar, sr, x->max_drawdown, x->turnover,
                100 * x->hit_rate, x->trades);
    }
    for (int i = 0; i < r->n_warnings; i++) fprintf(f, "warning: %s\n", r->warnings[i]);
}

static void num(cJSON *o, const char *k, double v)
{
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

static cJSON *hist(const double *h, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(h[i]));
    return a;
}

static cJSON *metrics_json(const vx_eval_metrics *x)
{
    cJSON *o = cJSON_CreateObject();
    num(o, "net", x->net);
    num(o, "gross", x->gross);
    num(o, "costs", x->costs);
    num(o, "pnl_per_bar", x->pnl_per_bar);
    num(o, "sharpe", x->sharpe);
    num(o, "sharpe_se", x->sharpe_se);
    num(o, "max_drawdown", x->max_drawdown);
    num(o, "turnover", x->turnover);
    num(o, "hit_rate", x->hit_rate);
    num(o, "trades", x->trades);
    num(o, "bars", x->bars);
    num(o, "stop_outs", x->stop_outs);
    cJSON_AddItemToObject(o, "exposure_hist", hist(x->exposure_hist, VX_EXPOSURE_LEVELS));
    cJSON_AddItemToObject(o, "order_hist", hist(x->order_hist, VX_ORDER_TYPES));
    cJSON_AddItemToObject(o, "urgency_hist", hist(x->urgency_hist, VX_URGENCY_LEVELS));
    cJSON_AddItemToObject(o, "position_hist", hist(x->position_hist, VX_EXPOSURE_LEVELS));
    cJSON_AddItemToObject(o, "period_pnl", hist(x->period_pnl, (int)x->n_periods));
    return o;
}

void vx_eval_json(FILE *f, const vx_eval_report *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "split", vx_split_name(r->split));
    cJSON_AddNumberToObject(o, "first_row", (double)r->first_row);
    cJSON_AddNumberToObject(o, "last_row", (double)r->last_row);
    cJSON_AddNumberToObject(o, "episodes", (double)r->episodes);
    num(o, "reward_scale", r->reward_scale);
    num(o, "bars_per_year", r->bars_per_year);
    num(o, "periods_per_year", r->periods_per_year);
    cJSON_AddStringToObject(o, "period", r->period_is_day ? "trading day" : "bar");
    cJSON *ts = cJSON_CreateArray();
    for (size_t i = 0; i < r->n_periods; i++) /* whole seconds since 1970 (UTC) */
        cJSON_AddItemToArray(ts, cJSON_CreateNumber((double)(r->period_end_ts[i] / 1000000000ll)));
    cJSON_AddItemToObject(o, "period_end_unix_s", ts);
    cJSON_AddStringToObject(o, "checkpoint", r->checkpoint);
    cJSON_AddStringToObject(o, "trained_on", r->trained_on);
    cJSON *rows = cJSON_CreateObject();
    for (int k = 0; k < VX_EVAL_ROWS; k++)
        if (r->row[k].present)
            cJSON_AddItemToObject(rows, vx_eval_row_key((vx_eval_row)k), metrics_json(&r->row[k]));
    cJSON_AddItemToObject(o, "rows", rows);
    if (r->have_baselines) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddNumberToObject(b, "momentum_lookback", r->baselines.momentum_k);
        num(b, "momentum_train_sharpe", r->baselines.momentum_sharpe);
        num(b, "ridge_lambda", r->baselines.ridge_lambda);
        num(b, "oracle_band", r->baselines.oracle_band);
        cJSON_AddBoolToObject(b, "oracle", r->baselines.has_oracle);
        cJSON_AddItemToObject(o, "baselines", b);
    }
    cJSON *w = cJSON_CreateArray();
    for (int i = 0; i < r->n_warnings; i++)
        cJSON_AddItemToArray(w, cJSON_CreateString(r->warnings[i]));
    cJSON_AddItemToObject(o, "warnings", w);
    char *text = cJSON_Print(o);
    if (text) fprintf(f, "%s\n", text);
    free(text);
    cJSON_Delete(o);
}

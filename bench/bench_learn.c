/* bench_learn.c — learner benchmarks: replay sample + priority update at 1 M capacity (ours
 * against a textbook binary sum tree in the same run), one DQN update at batch 256 with the
 * default network, and the CPU default epoch end to end.
 *
 * The rank-based headline, per_rank_1m, is what a training run pays per call: the mean over 200
 * consecutive calls, which include the two rank sorts that run in them (the first call's and the
 * 101st, at the default rank_refresh of 100). A median drops the sort as an outlier by
 * construction, so the median between sorts is kept beside it as its own row. */
#include "bench.h"
#include "vixen/dqn.h"
#include "vixen/philox.h"
#include "vixen/replay.h"
#include "vixen/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The textbook proportional sampler (Schaul et al.'s sum tree as commonly written): float64
 * nodes, updates propagate the delta upward, one descent per draw, IS weights from the batch
 * maximum. The baseline ours is measured against. */
typedef struct {
    size_t cap;
    double *tree; /* 2·cap − 1 nodes, leaves at cap − 1 … */
} plain_tree;

static void plain_update(plain_tree *t, size_t i, double p)
{
    size_t n = i + t->cap - 1;
    double delta = p - t->tree[n];
    t->tree[n] = p;
    while (n > 0) {
        n = (n - 1) / 2;
        t->tree[n] += delta;
    }
}

static size_t plain_find(const plain_tree *t, double u)
{
    size_t n = 0;
    while (n < t->cap - 1) {
        size_t l = 2 * n + 1;
        if (u <= t->tree[l]) n = l;
        else u -= t->tree[l], n = l + 1;
    }
    return n - (t->cap - 1);
}

static double median(double *x, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j] < x[j - 1]; j--) {
            double t = x[j];
            x[j] = x[j - 1], x[j - 1] = t;
        }
    return x[n / 2];
}

static void add(vx_bench_result *r, int *n, int max, const char *name, const char *unit,
                double items, double secs, double value, double target, int lower)
{
    if (*n >= max) return;
    vx_bench_result *x = &r[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->unit, sizeof x->unit, "%s", unit);
    x->items = items, x->seconds = secs, x->value = value, x->target = target;
    x->lower_is_better = lower;
}

/* Keeps each epoch's seconds (ctx: 3 doubles). */
static int epoch_seconds(const vx_epoch_report *r, void *ctx)
{
    if (r->epoch >= 1 && r->epoch <= 3) ((double *)ctx)[r->epoch - 1] = r->seconds;
    return 0;
}

int vx_bench_learn(vx_bench_result *out, int max, FILE *log)
{
    int n = 0;
    const size_t cap = 1 << 20, B = 1024, D = VX_OBS_DIM;
    vx_err e;
    /* --- replay at 1 M: fill, then time sample(1024) + update(1024) ------------------------ */
    vx_replay_kind kinds[3] = {VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK, VX_REPLAY_UNIFORM};
    const char *names[3] = {"per_proportional_1m", "per_rank_1m_between_sorts",
                            "replay_uniform_1m"};
    const char *kind_names[3] = {"proportional", "rank-based", "uniform"};
    const int rank_calls = 200;
    float *o = malloc(4096 * D * 4), *rw = malloc(4096 * 4), *td = malloc(B * 4);
    int32_t *a = calloc(4096 * 3, 4);
    uint8_t *f0 = calloc(4096, 1);
    float *bo = malloc(B * D * 4), *bn = malloc(B * D * 4), *br = malloc(B * 4),
          *bw = malloc(B * 4);
    int32_t *ba = malloc(B * 12);
    uint8_t *bt = malloc(B), *bu = malloc(B), *bs = malloc(B);
    uint32_t *bi = malloc(B * 4), *bg = malloc(B * 4);
    vx_rng g = vx_rng_make(5, 0, 0);
    for (size_t i = 0; i < 4096 * D; i++) o[i] = vx_rng_uniform(&g);
    for (size_t i = 0; i < 4096; i++) rw[i] = vx_rng_uniform(&g);
    vx_replay_batch b = {bo, bn, ba, br, bt, bu, bs, bw, bi, bg};
    double ours_us = 0;
    for (int k = 0; k < 3; k++) {
        vx_replay_cfg rc;
        vx_replay_cfg_default(&rc, kinds[k], cap);
        vx_replay *r;
        if (vx_replay_create(&rc, NULL, &r, &e)) continue;
        if (log) fprintf(log, "bench: filling a %zu-slot %s buffer\n", cap, kind_names[k]);
        vx_transitions t = {o, o, a, rw, f0, f0, NULL};
        for (size_t filled = 0; filled < cap; filled += 4096)
            vx_replay_insert(r, &t, 4096, NULL, &e);
        vx_replay_set_beta(r, 0.5, NULL, &e);
        if (kinds[k] == VX_REPLAY_RANK) {
            /* the user's path: consecutive calls on the freshly filled buffer, sorts and all */
            vx_replay_stats s0 = {0}, s1 = {0};
            vx_replay_stats_get(r, &s0, NULL, &e);
            double sum = 0;
            for (int rep = 0; rep < rank_calls; rep++) {
                for (size_t j = 0; j < B; j++) td[j] = (float)(3 * vx_rng_uniform_double(&g));
                uint64_t t0 = vx_now_ns();
                vx_replay_sample(r, B, &b, NULL, &e);
                vx_replay_update(r, bi, bg, td, B, NULL, &e);
                sum += vx_seconds_since(t0);
            }
            vx_replay_stats_get(r, &s1, NULL, &e);
            int sorts = (int)(s1.refreshes - s0.refreshes);
            int want = (rank_calls + rc.rank_refresh - 1) / rc.rank_refresh;
            if (log)
                fprintf(log, "bench: per_rank_1m: %d calls, %d rank sorts (expected %d)\n",
                        rank_calls, sorts, want);
            double mean = sum / rank_calls;
            add(out, &n, max, "per_rank_1m", "us", (double)B, mean, mean * 1e6, 0, 1);
        }
        /* median of 40 after one call: for the rank buffer that call sorts (the 200 above leave
         * it due), so the median is the cost between sorts */
        double times[41];
        for (int rep = 0; rep < 41; rep++) {
            for (size_t j = 0; j < B; j++) td[j] = (float)(3 * vx_rng_uniform_double(&g));
            uint64_t t0 = vx_now_ns();
            vx_replay_sample(r, B, &b, NULL, &e);
            vx_replay_update(r, bi, bg, td, B, NULL, &e);
            times[rep] = vx_seconds_since(t0);
        }
        double med = median(times + 1, 40); /* the first call (a rank sort) aside */
        if (k == 0) ours_us = med * 1e6;
        add(out, &n, max, names[k], "us", (double)B, med, med * 1e6, k == 0 ? 400 : 0, 1);
        vx_replay_free(r);
    }
    /* the plain tree: the same work (draws, gathers, weights, updates) */
    plain_tree pt = {cap, calloc(2 * cap, sizeof(double))};
    float *store = malloc(cap * D * 4 * 2);
    if (pt.tree && store) {
        for (size_t i = 0; i < cap; i++) plain_update(&pt, i, pow(1.0, 0.6));
        /* real values, written: a zero fill can become a lazy calloc and fault during timing */
        for (size_t i = 0; i < cap * D * 2; i++) store[i] = (float)(i & 1023);
        double times[41];
        size_t idx[1024];
        for (int rep = 0; rep < 41; rep++) {
            for (size_t j = 0; j < B; j++) td[j] = (float)(3 * vx_rng_uniform_double(&g));
            uint64_t t0 = vx_now_ns();
            double total = pt.tree[0], seg = total / (double)B, wmax = 0;
            for (size_t j = 0; j < B; j++) {
                idx[j] = plain_find(&pt, ((double)j + vx_rng_uniform_double(&g)) * seg);
                double P = pt.tree[idx[j] + cap - 1] / total;
                bw[j] = (float)pow((double)cap * P, -0.5);
                wmax = bw[j] > wmax ? bw[j] : wmax;
                memcpy(bo + j * D, store + idx[j] * D, D * 4);
                memcpy(bn + j * D, store + (cap + idx[j]) * D, D * 4);
            }
            for (size_t j = 0; j < B; j++) bw[j] = (float)(bw[j] / wmax);
            for (size_t j = 0; j < B; j++) plain_update(&pt, idx[j], pow(fabs(td[j]) + 1e-6, 0.6));
            times[rep] = vx_seconds_since(t0);
        }
        double med = median(times + 1, 40);
        add(out, &n, max, "per_plain_sum_tree_1m", "us", (double)B, med, med * 1e6, 0, 1);
        if (ours_us > 0)
            add(out, &n, max, "per_ours_over_plain", "ratio", 1, 0, ours_us / (med * 1e6), 0, 1);
    }
    free(pt.tree), free(store);
    free(o), free(rw), free(td), free(a), free(f0), free(bo), free(bn), free(br), free(bw);
    free(ba), free(bt), free(bu), free(bs), free(bi), free(bg);

    /* --- one update at batch 256, default network ------------------------------------------ */
    vx_dqn_cfg dc;
    vx_dqn_cfg_default(&dc);
    dc.batch = 256;
    vx_qnet_cfg q;
    vx_qnet_cfg_default(&q);
    vx_dqn d;
    if (!vx_dqn_create(&dc, &q, 1, &d, &e)) {
        size_t Bu = 256;
        float *xo = malloc(Bu * D * 4), *xn = malloc(Bu * D * 4), *xr = malloc(Bu * 4),
              *xw = malloc(Bu * 4);
        int32_t *xa = malloc(Bu * 12);
        uint8_t *xt = calloc(Bu, 1), *xu = calloc(Bu, 1), *xs = malloc(Bu);
        for (size_t i = 0; i < Bu * D; i++) xo[i] = vx_rng_uniform(&g), xn[i] = vx_rng_uniform(&g);
        for (size_t i = 0; i < Bu; i++) {
            xr[i] = vx_rng_uniform(&g), xw[i] = 1, xs[i] = 1;
            xa[i * 3] = (int32_t)vx_rng_below(&g, 9), xa[i * 3 + 1] = (int32_t)vx_rng_below(&g, 3);
            xa[i * 3 + 2] = (int32_t)vx_rng_below(&g, 3);
        }
        vx_replay_batch ub = {xo, xn, xa, xr, xt, xu, xs, xw, NULL, NULL};
        double times[31];
        for (int rep = 0; rep < 31; rep++) {
            uint64_t t0 = vx_now_ns();
            vx_dqn_update(&d, &ub, (int)Bu, NULL);
            times[rep] = vx_seconds_since(t0);
        }
        double med = median(times + 1, 30);
        add(out, &n, max, "dqn_update_b256", "ms", (double)Bu, med, med * 1e3, 8, 1);
        free(xo), free(xn), free(xr), free(xw), free(xa), free(xt), free(xu), free(xs);
        vx_dqn_free(&d);
    }

    /* --- the CPU default epoch end to end -------------------------------------------------- */
    char dir[] = "/tmp/vixen-bench-run-XXXXXX";
    if (mkdtemp(dir)) {
        vx_train_cfg c;
        vx_train_cfg_default(&c);
        c.epochs = 3;
        vx_dqn_settings *dq = vx_train_algo_settings(&c, "dqn");
        dq->warmup = 0;
        c.eval_every = 0;
        snprintf(c.run_dir, sizeof c.run_dir, "%s/run", dir);
        if (log) fprintf(log, "bench: 3 epochs at the CPU defaults\n");
        double secs[3] = {0, 0, 0};
        vx_eval_report r;
        if (!vx_train_run(&c, NULL, 0, epoch_seconds, secs, &r, &e)) {
            /* epochs 2 and 3 as the epoch report times them: the test evaluation at the end,
             * with its baselines, is not an epoch */
            double s = 0.5 * (secs[1] + secs[2]);
            add(out, &n, max, "epoch_cpu_default", "s", (double)c.envs * c.steps_per_epoch, s, s, 0,
                1);
            vx_eval_report_free(&r);
        } else if (log) {
            fprintf(log, "bench: %s\n", e.msg);
        }
        if (vx_remove_tree(dir, &e) && log) fprintf(log, "bench: %s\n", e.msg);
    }
    return n;
}

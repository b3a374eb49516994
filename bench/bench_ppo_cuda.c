/* bench_ppo_cuda.c — PPO iterations on the GPU through `vx_train_run`, the path `vixen train
 * --algo ppo` takes: 2,048 environments × 128 steps, 4 passes × 32 minibatches of 8,192, the
 * default 70,736-weight actor-critic: the fused kernels (the default) at float32's accuracy
 * (3×TF32) and in TF32, then the per-layer cuBLASLt path in float32 for comparison (ppo.fused =
 * 0, no target). The figure is the median wall time
 * of epochs 3..12 as the epoch callback measures it (rollout, GAE, shuffles, 128 updates, the
 * statistics' read-back, metrics; no evaluation, no checkpoint; epochs 1 and 2 capture the
 * graphs and choose the GEMM algorithms), with the device-timed rollout and update parts beside
 * it. Targets (the issue's): ≤ 20 ms float32 (≥ 13.1 M env-steps/s), ≤ 10 ms with TF32.
 * Built with CUDA only. */
#include "bench.h"
#include "vixen/ppo.h"
#include "vixen/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EPOCHS 12
#define FROM 2

typedef struct {
    int n;
    double seconds[EPOCHS], collect_s[EPOCHS], learn_s[EPOCHS];
} epochs_seen;

static int seen(const vx_epoch_report *r, void *ctx)
{
    epochs_seen *s = ctx;
    if (s->n < EPOCHS) {
        double ups = vx_epoch_metric(r, "updates_per_s");
        s->seconds[s->n] = r->seconds;
        s->collect_s[s->n] = r->env_steps_per_s > 0 ? 2048.0 * 128 / r->env_steps_per_s : NAN;
        s->learn_s[s->n] = ups > 0 ? vx_epoch_metric(r, "updates") / (s->n + 1) / ups : NAN;
        s->n++;
    }
    return 0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_from(const double *v, int from, int to)
{
    double t[EPOCHS];
    int n = 0;
    for (int i = from; i < to; i++)
        if (!isnan(v[i])) t[n++] = v[i];
    if (n == 0) return NAN;
    qsort(t, (size_t)n, sizeof *t, cmp);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void put(vx_bench_result *r, int *n, int max, const char *name, const char *unit,
                double value, double target, int lower)
{
    if (*n >= max) return;
    vx_bench_result *x = &r[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->unit, sizeof x->unit, "%s", unit);
    x->items = 1, x->value = value, x->target = target, x->lower_is_better = lower;
}

int vx_bench_ppo_cuda(vx_bench_result *out, int max, FILE *log)
{
    int n = 0;
    char dir[] = "/tmp/vixen-bench-ppo-gpu-XXXXXX";
    if (!mkdtemp(dir)) return -1;
    static const struct {
        int fused, tf32;
        const char *suffix, *what;
        double target_ms;
    } ways[] = {
        {1, 0, "", "fused kernels, 3xTF32", 20},
        {1, 1, "_tf32", "fused kernels, TF32", 10},
        {0, 0, "_per_layer", "a cuBLASLt GEMM a layer, float32", 0},
    };
    for (size_t w = 0; w < sizeof ways / sizeof *ways; w++) {
        int tf32 = ways[w].tf32;
        vx_train_cfg c;
        vx_train_cfg_default(&c);
        vx_err e;
        if (vx_train_cfg_set(&c, "train.algo", "ppo", NULL, &e)) return -1;
        vx_ppo_settings *s = vx_train_algo_settings(&c, "ppo");
        c.device = VX_DEVICE_CUDA;
        c.envs = 2048, c.steps_per_epoch = 128, c.epochs = EPOCHS;
        c.eval_every = 0, c.checkpoint_every = 1000;
        s->update_epochs = 4, s->minibatches = 32, s->tf32 = tf32, s->fused = ways[w].fused;
        snprintf(c.run_dir, sizeof c.run_dir, "%s/run%zu", dir, w);
        if (log)
            fprintf(log,
                    "bench: %d PPO iterations on the GPU, 2,048 × 128, 4 × 32 minibatches, %s\n",
                    EPOCHS, ways[w].what);
        epochs_seen es = {0};
        vx_device *dev = NULL;
        vx_device_cfg dc;
        vx_device_cfg_default(&dc);
        dc.kind = VX_DEVICE_CUDA;
        vx_status st = vx_device_open(&dc, &dev, &e);
        if (!st) st = vx_train_run(&c, dev, 0, seen, &es, NULL, &e);
        vx_device_close(dev);
        if (st) {
            if (log) fprintf(log, "bench: %s\n", e.msg);
            continue;
        }
        double it = median_from(es.seconds, FROM, es.n), steps = 2048.0 * 128;
        const char *sfx = ways[w].suffix;
        double target = ways[w].target_ms;
        char name[48];
        snprintf(name, sizeof name, "ppo_iteration_gpu%s", sfx);
        put(out, &n, max, name, "ms", it * 1e3, target, 1);
        snprintf(name, sizeof name, "ppo_env_steps_gpu%s", sfx);
        put(out, &n, max, name, "env-steps/s", steps / it, target > 0 ? steps / (target / 1e3) : 0,
            0);
        snprintf(name, sizeof name, "ppo_rollout_gpu%s", sfx);
        put(out, &n, max, name, "ms", median_from(es.collect_s, FROM, es.n) * 1e3, 0, 1);
        snprintf(name, sizeof name, "ppo_update_gpu%s", sfx);
        put(out, &n, max, name, "ms", median_from(es.learn_s, FROM, es.n) * 1e3, 0, 1);
    }
    vx_err e;
    vx_remove_tree(dir, &e);
    return n;
}

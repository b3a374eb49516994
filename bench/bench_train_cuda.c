/* bench_train_cuda.c — whole training epochs through `vx_train_run`, the reference workload:
 * 2,048 environments × 100 steps collected, 341 updates at batch 1,024, the default network,
 * proportional replay at 100 K and 10 M capacity; then the same shape at the batch the GPU
 * chooses; and one epoch of it on the CPU path for comparison. GPU epochs: median wall time of
 * epochs 2..N (epoch 1 captures the graphs and has no updates before the buffer is warm), as the
 * epoch callback measures it (collection, updates, statistics, metrics; no evaluation, no
 * checkpoint). The collection alone, per layer and fused in each precision, is a group of its own
 * (gpu-collect). Built with CUDA only. */
#include "bench.h"
#include "vixen/dqn.h"
#include "vixen/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EPOCHS 8

typedef struct {
    int n;
    double seconds[EPOCHS], collect_s[EPOCHS], learn_s[EPOCHS];
    int64_t updates;
} epochs_seen;

static int seen(const vx_epoch_report *r, void *ctx)
{
    epochs_seen *s = ctx;
    if (s->n < EPOCHS) {
        s->seconds[s->n] = r->seconds;
        s->collect_s[s->n] = r->env_steps_per_s > 0 ? 2048.0 * 100 / r->env_steps_per_s : NAN;
        double ups = vx_epoch_metric(r, "updates_per_s");
        s->learn_s[s->n] = ups > 0 ? 1.0 / ups : NAN; /* per update */
        s->n++;
    }
    s->updates = (int64_t)vx_epoch_metric(r, "updates");
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

static void reference(vx_train_cfg *c, const char *dir, int device, int64_t capacity, int epochs)
{
    vx_train_cfg_default(c);
    c->synth_days = 200;
    c->epochs = epochs;
    c->envs = 2048;
    c->steps_per_epoch = 100;
    vx_dqn_settings *dq = vx_train_algo_settings(c, "dqn");
    /* the reference network the GPU targets were set on (145,936 weights), whatever the default */
    dq->n_trunk = 2, dq->trunk[0] = dq->trunk[1] = 256, dq->head_hidden = 64;
    dq->learner.batch = 1024;
    dq->batch_set = 1;
    dq->replay_capacity = capacity;
    dq->warmup = 2000;
    c->eval_every = 0;
    c->checkpoint_every = 1000000;
    c->device = device;
    snprintf(c->run_dir, sizeof c->run_dir, "%s", dir);
}

static vx_dqn_settings *dqn_of(vx_train_cfg *c) { return vx_train_algo_settings(c, "dqn"); }

static int run_one(vx_train_cfg *c, epochs_seen *s, FILE *log)
{
    vx_err e;
    memset(s, 0, sizeof *s);
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = c->device;
    vx_device *dev;
    vx_status st = vx_device_open(&dc, &dev, &e);
    if (!st) {
        st = vx_train_run(c, dev, 0, seen, s, NULL, &e);
        vx_device_close(dev);
    }
    vx_remove_tree(c->run_dir, NULL);
    if (st) fprintf(log, "bench: training run failed: %s\n", e.msg);
    return st == VX_OK;
}

static void put(vx_bench_result *r, const char *name, const char *unit, double value, double target,
                int lower)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->unit, sizeof r->unit, "%s", unit);
    r->value = value;
    r->items = 1;
    r->seconds = lower ? value / 1e3 : 1 / value;
    r->target = target;
    r->lower_is_better = lower;
}

/* The 2,048 × 100 collection alone (overlap off, so nothing runs beside the rollout while its
 * events time it; median of epochs 2–4): per layer in float32, then the fused acting kernel
 * (dqn.acting) in its three precisions. Its own group so that a change to acting can be measured
 * in seconds, not the minutes of the epochs. */
int vx_bench_collect_cuda(vx_bench_result *out, int max, FILE *log)
{
    int n = 0;
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/vixen-bench-collect-%d", (int)getpid());
    vx_train_cfg c;
    epochs_seen s;
    if (n + 1 <= max) {
        reference(&c, dir, VX_DEVICE_CUDA, 100000, 4);
        dqn_of(&c)->overlap = 0;
        if (run_one(&c, &s, log))
            put(&out[n++], "gpu collection 2048x100 (alone)", "ms",
                median_from(s.collect_s, 1, 4) * 1e3, 1, 1);
    }
    /* … and with the fused acting kernel (dqn.acting), in its three precisions */
    const char *acting[3] = {"gpu collection 2048x100 (alone, tf32 acting)",
                             "gpu collection 2048x100 (alone, tf32x3 acting)",
                             "gpu collection 2048x100 (alone, bf16 acting)"};
    const int precision[3] = {VX_ACTING_TF32, VX_ACTING_TF32X3, VX_ACTING_BF16};
    for (int k = 0; k < 3 && n + 1 <= max; k++) {
        reference(&c, dir, VX_DEVICE_CUDA, 100000, 4);
        dqn_of(&c)->overlap = 0;
        dqn_of(&c)->acting = precision[k];
        if (run_one(&c, &s, log))
            put(&out[n++], acting[k], "ms", median_from(s.collect_s, 1, 4) * 1e3, 2, 1);
    }
    return n;
}

int vx_bench_train_cuda(vx_bench_result *out, int max, FILE *log)
{
    int n = 0;
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/vixen-bench-train-%d", (int)getpid());
    vx_train_cfg c;
    epochs_seen s;
    const int64_t caps[2] = {100000, 10000000};
    const char *names[2] = {"gpu epoch (PER 100K, batch 1024)", "gpu epoch (PER 10M, batch 1024)"};
    for (int k = 0; k < 2 && n + 3 <= max; k++) {
        reference(&c, dir, VX_DEVICE_CUDA, caps[k], EPOCHS);
        if (!run_one(&c, &s, log)) continue;
        double ep = median_from(s.seconds, 1, EPOCHS) * 1e3;
        put(&out[n++], names[k], "ms", ep, 20, 1);
        if (k == 0) {
            put(&out[n++], "gpu collection beside updates", "ms",
                median_from(s.collect_s, 1, EPOCHS) * 1e3, 0, 1);
            put(&out[n++], "gpu update in training (batch 1024)", "ms",
                median_from(s.learn_s, 1, EPOCHS) * 1e3, 0.05, 1);
        }
        fprintf(log, "%s: median %.1f ms over epochs 2..%d\n", names[k], ep, EPOCHS);
    }
    /* the batch the GPU chooses */
    if (n + 3 <= max) {
        reference(&c, dir, VX_DEVICE_CUDA, 1000000, EPOCHS);
        dqn_of(&c)->batch_set = 0;
        if (run_one(&c, &s, log)) {
            double ep = median_from(s.seconds, 1, EPOCHS);
            double per_update = median_from(s.learn_s, 1, EPOCHS);
            put(&out[n++], "gpu epoch (auto batch, PER 1M)", "ms", ep * 1e3, 20, 1);
            put(&out[n++], "gpu updates/s (auto batch)", "updates/s", 1 / per_update, 0, 0);
            put(&out[n++], "gpu env-steps/s (auto batch)", "steps/s",
                2048.0 * 100 / median_from(s.collect_s, 1, EPOCHS), 0, 0);
            fprintf(log, "auto batch: %lld updates in %d epochs\n", (long long)s.updates, EPOCHS);
        }
    }
    /* TF32 GEMMs: the reference batch, and the batch the GPU chooses */
    if (n + 2 <= max) {
        reference(&c, dir, VX_DEVICE_CUDA, 100000, EPOCHS);
        dqn_of(&c)->learner.tf32 = 1;
        if (run_one(&c, &s, log))
            put(&out[n++], "gpu epoch tf32 (PER 100K, batch 1024)", "ms",
                median_from(s.seconds, 1, EPOCHS) * 1e3, 20, 1);
        reference(&c, dir, VX_DEVICE_CUDA, 1000000, EPOCHS);
        dqn_of(&c)->learner.tf32 = 1;
        dqn_of(&c)->batch_set = 0;
        if (run_one(&c, &s, log))
            put(&out[n++], "gpu epoch tf32 (auto batch, PER 1M)", "ms",
                median_from(s.seconds, 1, EPOCHS) * 1e3, 20, 1);
    }
    /* the same reference epoch on the CPU path (2 epochs: the second has updates) */
    if (n < max) {
        reference(&c, dir, VX_DEVICE_CPU, 100000, 2);
        if (run_one(&c, &s, log) && s.n == 2)
            put(&out[n++], "cpu epoch (PER 100K, batch 1024)", "ms", s.seconds[1] * 1e3, 0, 1);
    }
    return n;
}

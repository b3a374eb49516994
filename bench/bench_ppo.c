/* bench_ppo.c — PPO on the CPU: one iteration at the default shape (128 environments × 100
 * steps, 4 passes × 32 minibatches, the 70,736-weight actor-critic) as the epoch report times it,
 * in environment steps per second, beside the FLOP-bound estimate for this machine: the float
 * work per environment step (a forward pass in the rollout, then per pass a forward and a
 * backward, about 2 + 6 · passes FLOP per weight) against the rate a large SGEMM reaches here. */
#include "bench.h"
#include "vixen/ppo.h"
#include "vixen/train.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

static void put(vx_bench_result *r, int *n, int max, const char *name, const char *unit,
                double value)
{
    if (*n >= max) return;
    vx_bench_result *x = &r[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->unit, sizeof x->unit, "%s", unit);
    x->items = 1, x->seconds = 0, x->value = value;
}

static int epoch_seconds(const vx_epoch_report *r, void *ctx)
{
    if (r->epoch >= 1 && r->epoch <= 3) ((double *)ctx)[r->epoch - 1] = r->seconds;
    return 0;
}

/* The best of five 1024³ SGEMMs, in FLOP/s: what OpenBLAS reaches on this machine's cores. */
static double sgemm_rate(void)
{
    const int n = 1024;
    float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4),
          *c = malloc((size_t)n * n * 4);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return 0;
    }
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = 0.5f;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        uint64_t t0 = vx_now_ns();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double s = vx_seconds_since(t0);
        best = s < best ? s : best;
    }
    free(a), free(b), free(c);
    return 2.0 * n * n * n / best;
}

int vx_bench_ppo(vx_bench_result *out, int max, FILE *log)
{
    int n = 0;
    char dir[] = "/tmp/vixen-bench-ppo-XXXXXX";
    if (!mkdtemp(dir)) return -1;
    vx_train_cfg c;
    vx_train_cfg_default(&c);
    vx_err e;
    if (vx_train_cfg_set(&c, "train.algo", "ppo", NULL, &e)) return -1;
    c.epochs = 3, c.eval_every = 0, c.checkpoint_every = 1000;
    snprintf(c.run_dir, sizeof c.run_dir, "%s/run", dir);
    const vx_ppo_settings *s = vx_train_algo_settings(&c, "ppo");
    if (log) fprintf(log, "bench: 3 PPO iterations at the CPU defaults\n");
    double secs[3] = {0, 0, 0};
    if (vx_train_run(&c, NULL, 0, epoch_seconds, secs, NULL, &e)) {
        if (log) fprintf(log, "bench: %s\n", e.msg);
    } else {
        vx_ac_cfg net;
        vx_ppo_net_cfg(s, &net);
        vx_ac_layout L;
        vx_ac_layout_make(&net, &L, NULL);
        double it = 0.5 * (secs[1] + secs[2]), steps = (double)c.envs * c.steps_per_epoch;
        double flop = (2.0 + 6.0 * s->update_epochs) * (double)L.n_weights;
        double rate = sgemm_rate();
        put(out, &n, max, "ppo_iteration_cpu", "ms", it * 1e3);
        out[n - 1].lower_is_better = 1, out[n - 1].seconds = it, out[n - 1].items = steps;
        put(out, &n, max, "ppo_env_steps_cpu", "env-steps/s", steps / it);
        put(out, &n, max, "ppo_flop_per_env_step", "FLOP", flop);
        put(out, &n, max, "sgemm_1024_cpu", "GFLOP/s", rate / 1e9);
        put(out, &n, max, "ppo_env_steps_cpu_flop_bound", "env-steps/s", rate / flop);
    }
    vx_remove_tree(dir, &e);
    return n;
}

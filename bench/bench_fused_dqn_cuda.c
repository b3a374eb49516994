/* bench_fused_dqn_cuda.c — whole DQN updates of fused trials: the default network and settings
 * (batch 256), each trial with its own proportional buffer of 65,536 random transitions, an
 * update being sample → online and target forwards → loss → backward → clip → Adam → new
 * priorities → statistics, as the training run's captured loop makes them (20 updates a launch):
 *   one trial alone;
 *   64 trials, a learner each on a stream of its own, their launches queued together (the
 *   search's way now);
 *   64 trials as one learner group (dqn_learner_create_group: each GEMM one strided-batched GEMM
 *   over the 64, one loss kernel, one optimizer launch pair; the members' samples one launch and
 *   their priority updates one cooperative launch, a replay group over their own buffers).
 * The figure is updates a second over all trials; the median of 10 timed launches after 2
 * untimed ones, in float32, then the three ways again with TF32 learning (dqn.tf32 = 1): a group
 * of 64 at batch 256 is 16,384 rows a GEMM, where one trial's 256 rows are launch-bound, so the
 * tensor cores can change the ratios and not only the times. Built with CUDA only. */
#include "bench.h"
#include "bench_cuda.h"
#include "vixen/device.h"
#include "vixen/dqn.h"
#include "dqn/learner_cuda.h"
#include "vixen/philox.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

enum { K = 64, N = 65536, U = 20, WARM = 2, REPS = 10 };

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median µs of `n` learners' launches of U updates each, queued together on their streams
 * from one event, to the last one's end. */
static double launches_us(dqn_learner **d, cudaStream_t *s, int n, cudaStream_t main_s, vx_err *e)
{
    cudaEvent_t start, end, done[K];
    int bad = cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&end) != cudaSuccess;
    for (int k = 0; k < n && !bad; k++)
        bad = cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming) != cudaSuccess;
    double us[REPS];
    for (int r = 0; r < WARM + REPS && !bad; r++) {
        bad = cudaEventRecord(start, main_s) != cudaSuccess;
        for (int k = 0; k < n && !bad; k++)
            bad = cudaStreamWaitEvent(s[k], start, 0) != cudaSuccess ||
                  dqn_learner_update_n(d[k], U, e) != VX_OK ||
                  cudaEventRecord(done[k], s[k]) != cudaSuccess ||
                  cudaStreamWaitEvent(main_s, done[k], 0) != cudaSuccess;
        float ms = 0;
        bad = bad || cudaEventRecord(end, main_s) != cudaSuccess ||
              cudaEventSynchronize(end) != cudaSuccess ||
              cudaEventElapsedTime(&ms, start, end) != cudaSuccess;
        if (r >= WARM) us[r - WARM] = ms * 1e3;
    }
    cudaEventDestroy(start), cudaEventDestroy(end);
    for (int k = 0; k < n; k++) cudaEventDestroy(done[k]);
    if (bad) return -1;
    qsort(us, REPS, sizeof *us, cmp_d);
    return us[REPS / 2];
}

/* One precision's three ways (dc[*].tf32 already set): the learners made over the buffers
 * (rep[0, K) each, rep[K, 2K) the group, rep[2K] alone), each way timed (µs a launch of U updates
 * into t[0..2]: alone, a learner each, the group), then freed. */
static vx_status time_ways(const vx_dqn_cfg *dc, const vx_qnet_layout *L,
                           const vx_loss_shape *shape, const float *p, size_t stride,
                           vx_replay **rep, vx_device *dev, cudaStream_t *s, cudaStream_t main_s,
                           double t[3], vx_err *e)
{
    dqn_learner *each[K] = {0}, *alone = NULL, *group = NULL;
    vx_status st = VX_OK;
    for (int k = 0; k < K && !st; k++)
        st = dqn_learner_create(&dc[k], L, shape, p + k * stride, rep[k], dev, s[k], &each[k], e);
    if (!st) st = dqn_learner_create(&dc[0], L, shape, p, rep[2 * K], dev, s[0], &alone, e);
    if (!st) st = dqn_learner_create_group(dc, K, L, shape, p, rep + K, dev, s[0], &group, e);
    for (int k = 0; k < K && !st; k++) st = dqn_learner_prepare(each[k], e);
    if (!st) st = dqn_learner_prepare(alone, e);
    if (!st) st = dqn_learner_prepare(group, e);
    if (!st) {
        t[0] = launches_us(&alone, s, 1, main_s, e);
        t[1] = launches_us(each, s, K, main_s, e);
        t[2] = launches_us(&group, s, 1, main_s, e);
        if (t[0] <= 0 || t[1] <= 0 || t[2] <= 0)
            st = vx_err_set(e, VX_ERR_CUDA, "bench: fused DQN: a timed launch failed");
    }
    if (main_s) cudaStreamSynchronize(main_s);
    for (int k = 0; k < K; k++) {
        if (s[k]) cudaStreamSynchronize(s[k]); /* idle before the frees (device.h) */
        dqn_learner_free(each[k]);
    }
    dqn_learner_free(alone), dqn_learner_free(group);
    return st;
}

int vx_bench_fused_dqn_cuda(vx_bench_result *out, int max, FILE *log)
{
    if (max < 12) return 0;
    vx_device *dev = vx_bench_cuda_open(log);
    if (!dev) return -1;
    vx_err e;
    vx_dqn_cfg dc[K];
    for (int k = 0; k < K; k++) vx_dqn_cfg_default(&dc[k]);
    vx_qnet_cfg qc;
    vx_qnet_cfg_default(&qc);
    vx_qnet_layout L;
    vx_loss_shape shape;
    vx_status st = vx_dqn_layout(&dc[0], &qc, &L, &shape, &e);
    const int B = dc[0].batch;
    size_t D = (size_t)L.cfg.in_dim, stride = dqn_learner_stride_for(&L, B, K);
    /* the transitions every buffer holds (their draws differ: each buffer its own seed) */
    float *o = malloc(N * D * 4), *r = malloc(N * 4), *p = calloc(K * stride, 4);
    int32_t *a = malloc(N * 12);
    uint8_t *f = calloc(N, 1);
    vx_mem mem;
    vx_mem_init(&mem, dev, "fused DQN bench");
    vx_transitions t = {0};
    float *d_o = NULL, *d_r = NULL;
    int32_t *d_a = NULL;
    uint8_t *d_f = NULL;
    if (!o || !r || !p || !a || !f) st = vx_err_set(&e, VX_ERR_NOMEM, "bench: out of memory");
    if (!st) {
        vx_rng g = vx_rng_make(1, 0, 0);
        for (size_t i = 0; i < N * D; i++) o[i] = (float)vx_rng_normal(&g);
        for (size_t i = 0; i < N; i++) {
            r[i] = (float)vx_rng_normal(&g);
            a[i * 3] = (int32_t)vx_rng_below(&g, 9), a[i * 3 + 1] = (int32_t)vx_rng_below(&g, 3);
            a[i * 3 + 2] = (int32_t)vx_rng_below(&g, 3);
        }
        for (int k = 0; k < K; k++) vx_qnet_init(&L, 1 + (uint64_t)k, p + k * stride);
        st = vx_mem_alloc(&mem, N * D * 4, &d_o, &e);
    }
    if (!st) st = vx_mem_alloc(&mem, N * 4, &d_r, &e);
    if (!st) st = vx_mem_alloc(&mem, N * 12, &d_a, &e);
    if (!st) st = vx_mem_alloc(&mem, N, &d_f, &e);
    if (!st) st = vx_device_upload(dev, d_o, o, N * D * 4, &e);
    if (!st) st = vx_device_upload(dev, d_r, r, N * 4, &e);
    if (!st) st = vx_device_upload(dev, d_a, a, N * 12, &e);
    if (!st) st = vx_device_upload(dev, d_f, f, N, &e);
    t.obs = d_o, t.next_obs = d_o, t.actions = d_a, t.rewards = d_r;
    t.terminated = d_f, t.truncated = d_f;
    free(o), free(r), free(a), free(f);
    /* buffers: [0, K) the learners', [K, 2K) the group's, 2K the trial alone's */
    vx_replay *rep[2 * K + 1] = {0};
    cudaStream_t s[K] = {0}, main_s = NULL;
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, VX_REPLAY_PROPORTIONAL, N);
    for (int k = 0; k < K && !st; k++) {
        vx_stream vs;
        st = vx_stream_create(dev, &vs, &e);
        s[k] = (cudaStream_t)vs;
    }
    if (!st) {
        vx_stream vs;
        st = vx_stream_create(dev, &vs, &e);
        main_s = (cudaStream_t)vs;
    }
    for (int k = 0; k < 2 * K + 1 && !st; k++) {
        rc.seed = 100 + (uint64_t)(k % K);
        st = vx_replay_create(&rc, dev, &rep[k], &e);
        if (!st) st = vx_replay_insert(rep[k], &t, N, s[0], &e);
    }
    if (!st && log)
        fprintf(log,
                "bench: fused: whole DQN updates (batch %d, %d-transition proportional buffers): "
                "one trial, %d as a learner each, %d as one group\n",
                B, N, K, K);
    double us[2][3]; /* [float32, TF32][alone, a learner each, the group], a launch */
    for (int tf = 0; tf < 2 && !st; tf++) {
        for (int k = 0; k < K; k++) dc[k].tf32 = tf;
        st = time_ways(dc, &L, &shape, p, stride, rep, dev, s, main_s, us[tf], &e);
    }
    if (main_s) cudaStreamSynchronize(main_s);
    for (int k = 0; k < K; k++)
        if (s[k]) cudaStreamSynchronize(s[k]); /* idle before the frees (device.h) */
    for (int k = 0; k < 2 * K + 1; k++) vx_replay_free(rep[k]);
    for (int k = 0; k < K; k++) vx_stream_destroy(dev, s[k]);
    vx_stream_destroy(dev, main_s);
    vx_mem_release(&mem);
    vx_device_close(dev);
    free(p);
    if (st) {
        if (log) fprintf(log, "bench: fused DQN: %s\n", e.msg);
        return -1;
    }
    int n = 0;
    for (int tf = 0; tf < 2; tf++) {
        const char *pre = tf ? "fused DQN (TF32)" : "fused DQN update";
        char name[96];
        vx_bench_result *w = out + n;
        snprintf(name, sizeof name, "%s, one trial alone", pre);
        vx_bench_put(&out[n++], name, "updates/s", U, us[tf][0]);
        snprintf(name, sizeof name, "%s, 64 trials, a learner each", pre);
        vx_bench_put(&out[n++], name, "updates/s", (double)K * U, us[tf][1]);
        snprintf(name, sizeof name, "%s, 64 trials as one group", pre);
        vx_bench_put(&out[n++], name, "updates/s", (double)K * U, us[tf][2]);
        snprintf(name, sizeof name, "%s: a learner each / alone", pre);
        vx_bench_put(&out[n++], name, "x", 1, 1), out[n - 1].value = w[1].value / w[0].value;
        snprintf(name, sizeof name, "%s: group / alone", pre);
        vx_bench_put(&out[n++], name, "x", 1, 1), out[n - 1].value = w[2].value / w[0].value;
        out[n - 1].target = 40;
        snprintf(name, sizeof name, "%s: group / a learner each", pre);
        vx_bench_put(&out[n++], name, "x", 1, 1), out[n - 1].value = w[2].value / w[1].value;
        out[n - 1].target = 3;
    }
    return n;
}

/* bench_fused_cuda.c — the pieces of fused trials so far, for one trial, 64 trials as a graph each,
 * and 64 trials as one group. Two of them: the default Q-network's trunk (51 inputs, 256 → 256,
 * ReLU) forward and backward, the GEMMs with their epilogues; and the whole default Q-network
 * (about 151 K weights: trunk, value head, three advantage branches, dueling) forward and backward
 * from a fixed dq, then global-norm clipping and Adam. At batch 64, each way captured as CUDA
 * graphs:
 *   one trial alone (one graph on one stream);
 *   64 trials, a graph each on a stream of its own, launched together (the search's way now);
 *   64 trials as one group (vx_dense_forward_group, vx_dense_backward_group: every GEMM one
 *   strided-batched GEMM over the 64).
 * The figure is trunk passes a second over all trials; the median of 100 timed replays after 10
 * untimed ones, float32. Only the trunk's GEMMs: the rest of an update (loss, heads, Adam, the
 * replay buffer) is not in it, so these are not the update figures. Built with CUDA only.
 */
#include "bench.h"
#include "bench_cuda.h"
#include "vixen/dense.h"
#include "vixen/device.h"
#include "vixen/nn.h"
#include "vixen/philox.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

enum { K = 64, B = 64, IN = 51, H = 256, WARM = 10, REPS = 100 };

typedef struct {
    vx_dense l1, l2;
    size_t np; /* one member's parameters (and gradients), floats */
} trunk;

/* One member's (or the group's) tensors: member k at base + k × its size. */
typedef struct {
    float *P, *g, *x, *h1, *h2, *dh2, *dh1;
} tensors;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Forward through both layers, then backward (dh2 given: the gradient at the trunk's top). */
static vx_status pass(vx_dense_ctx *c, const trunk *t, int k0, int members, const tensors *m,
                      cudaStream_t s, vx_err *e)
{
    vx_dense_group g1 = {members, t->np, (size_t)B * IN, (size_t)B * H, 0, 0};
    vx_dense_group g2 = {members, t->np, (size_t)B * H, (size_t)B * H, 0, 0};
    float *P = m->P + (size_t)k0 * t->np, *g = m->g + (size_t)k0 * t->np;
    float *x = m->x + (size_t)k0 * B * IN, *h1 = m->h1 + (size_t)k0 * B * H;
    float *h2 = m->h2 + (size_t)k0 * B * H, *dh2 = m->dh2 + (size_t)k0 * B * H;
    float *dh1 = m->dh1 + (size_t)k0 * B * H;
    vx_status st = vx_dense_forward_group(c, &t->l1, &g1, P, x, B, h1, 1, s, e);
    if (!st) st = vx_dense_forward_group(c, &t->l2, &g2, P, h1, B, h2, 1, s, e);
    if (!st) st = vx_dense_backward_group(c, &t->l2, &g2, P, h1, B, dh2, g, dh1, 0, s, e);
    if (!st) st = vx_dense_backward_group(c, &t->l1, &g1, P, x, B, dh1, g, NULL, 0, s, e);
    return st;
}

/* What is timed: one call queuing its work on s. */
typedef vx_status (*work_fn)(const void *ctx, cudaStream_t s, vx_err *e);

/* The work run once eagerly (its plans made outside the capture), then captured. */
static vx_status capture(work_fn work, const void *ctx, cudaStream_t s, cudaGraphExec_t *exec,
                         vx_err *e)
{
    cudaGraph_t graph = NULL;
    vx_status st = work(ctx, s, e);
    if (!st && cudaStreamSynchronize(s) != cudaSuccess)
        st = vx_err_set(e, VX_ERR_CUDA, "bench: the work to capture failed");
    if (!st && cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        st = vx_err_set(e, VX_ERR_CUDA, "bench: cannot capture");
    if (!st) {
        st = work(ctx, s, e);
        if (cudaStreamEndCapture(s, &graph) != cudaSuccess && !st)
            st = vx_err_set(e, VX_ERR_CUDA, "bench: the capture failed");
    }
    if (!st && cudaGraphInstantiate(exec, graph, 0) != cudaSuccess)
        st = vx_err_set(e, VX_ERR_CUDA, "bench: cannot instantiate the graph");
    if (graph) cudaGraphDestroy(graph);
    return st;
}

/* The trunk's pass over members k0 .. k0 + members − 1. */
typedef struct {
    vx_dense_ctx *c;
    const trunk *t;
    int k0, members;
    const tensors *m;
} trunk_work;

static vx_status trunk_pass(const void *ctx, cudaStream_t s, vx_err *e)
{
    const trunk_work *w = ctx;
    return pass(w->c, w->t, w->k0, w->members, w->m, s, e);
}

/* The median µs of K graphs launched together on their streams, from one event to the last. */
static double together_us(cudaGraphExec_t *exec, cudaStream_t *s, cudaStream_t main_s)
{
    cudaEvent_t start, end, done[K];
    int bad = cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&end) != cudaSuccess;
    for (int k = 0; k < K && !bad; k++)
        bad = cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming) != cudaSuccess;
    double us[REPS];
    for (int r = 0; r < WARM + REPS && !bad; r++) {
        bad = cudaEventRecord(start, main_s) != cudaSuccess;
        for (int k = 0; k < K && !bad; k++)
            bad = cudaStreamWaitEvent(s[k], start, 0) != cudaSuccess ||
                  cudaGraphLaunch(exec[k], s[k]) != cudaSuccess ||
                  cudaEventRecord(done[k], s[k]) != cudaSuccess ||
                  cudaStreamWaitEvent(main_s, done[k], 0) != cudaSuccess;
        float ms = 0;
        bad = bad || cudaEventRecord(end, main_s) != cudaSuccess ||
              cudaEventSynchronize(end) != cudaSuccess ||
              cudaEventElapsedTime(&ms, start, end) != cudaSuccess;
        if (r >= WARM) us[r - WARM] = ms * 1e3;
    }
    cudaEventDestroy(start), cudaEventDestroy(end);
    for (int k = 0; k < K; k++) cudaEventDestroy(done[k]);
    if (bad) return -1;
    qsort(us, REPS, sizeof *us, cmp_d);
    return us[REPS / 2];
}

/* ---- the Q-network and its optimizer --------------------------------------------------------- */

typedef struct {
    vx_qnet *net;
    vx_optim *opt;
    float *P, *g, *x, *dq; /* the members' tensors at the group's strides */
} net_set;

/* Forward, backward from dq, clip and Adam: the learning half of an update. */
static vx_status net_step(const void *ctx, cudaStream_t s, vx_err *e)
{
    const net_set *n = ctx;
    vx_status st = vx_qnet_forward(n->net, n->P, n->x, B, s, e);
    if (!st) st = vx_qnet_backward(n->net, n->P, n->x, B, n->dq, n->g, s, e);
    if (!st) st = vx_optim_step(n->opt, n->P, n->g, s, e);
    return st;
}

/* members K of the default network: the group's (or, K = 1 with `at` set, member `at` of the
 * shared tensors as a network of its own) */
static vx_status net_make(vx_device *dev, const vx_qnet_layout *L, int members, const net_set *all,
                          int at, net_set *out, vx_err *e)
{
    vx_qnet_strides S = vx_qnet_member_strides(L, B);
    vx_adam_cfg ac[K];
    double clip[K];
    for (int k = 0; k < members; k++) vx_adam_cfg_default(&ac[k]), clip[k] = 10.0;
    memset(out, 0, sizeof *out);
    out->P = all->P + (size_t)at * S.params, out->g = all->g + (size_t)at * S.params;
    out->x = all->x + (size_t)at * S.x, out->dq = all->dq + (size_t)at * S.q;
    vx_status st = vx_qnet_create_group(L, members, B, B, dev, &out->net, e);
    if (!st)
        st = vx_optim_create_group(ac, clip, L->n_params, S.params, members, dev, &out->opt, e);
    return st;
}

static void net_free(net_set *n)
{
    vx_qnet_free(n->net);
    vx_optim_free(n->opt);
}

/* t1, tk, tg: µs of the step for one network, 64 as a graph each, 64 as one group */
static vx_status bench_net(vx_device *dev, cudaStream_t *s, cudaStream_t main_s, double *t1,
                           double *tk, double *tg, vx_err *e)
{
    vx_qnet_cfg qc;
    vx_qnet_cfg_default(&qc);
    vx_qnet_layout L;
    vx_status st = vx_qnet_layout_make(&qc, &L, e);
    if (st) return st;
    vx_qnet_strides S = vx_qnet_member_strides(&L, B);
    vx_mem mem;
    vx_mem_init(&mem, dev, "fused bench network");
    net_set all = {0}, one = {0}, grp = {0}, each[K];
    memset(each, 0, sizeof each);
    size_t np = S.params * K, nx = S.x * K, nq = S.q * K;
    float *h = malloc((np > nx ? (np > nq ? np : nq) : (nx > nq ? nx : nq)) * sizeof(float));
    if (!h) return vx_err_set(e, VX_ERR_NOMEM, "bench: out of memory");
    st = vx_mem_alloc(&mem, np * 4, &all.P, e);
    if (!st) st = vx_mem_alloc(&mem, np * 4, &all.g, e);
    if (!st) st = vx_mem_alloc(&mem, nx * 4, &all.x, e);
    if (!st) st = vx_mem_alloc(&mem, nq * 4, &all.dq, e);
    for (int k = 0; k < K && !st; k++) vx_qnet_init(&L, 1 + (uint64_t)k, h + (size_t)k * S.params);
    if (!st) st = vx_device_upload(dev, all.P, h, np * 4, e);
    vx_rng r = vx_rng_make(3, 0, 0);
    for (size_t i = 0; i < nx; i++) h[i] = (float)vx_rng_normal(&r);
    if (!st) st = vx_device_upload(dev, all.x, h, nx * 4, e);
    for (size_t i = 0; i < nq; i++) h[i] = (float)(0.01 * vx_rng_normal(&r));
    if (!st) st = vx_device_upload(dev, all.dq, h, nq * 4, e);
    free(h);
    cudaGraphExec_t g1 = NULL, gg = NULL, ge[K] = {0};
    if (!st) st = net_make(dev, &L, 1, &all, 0, &one, e);
    if (!st) st = net_make(dev, &L, K, &all, 0, &grp, e);
    for (int k = 0; k < K && !st; k++) st = net_make(dev, &L, 1, &all, k, &each[k], e);
    if (!st) st = capture(net_step, &one, s[0], &g1, e);
    if (!st) st = capture(net_step, &grp, s[0], &gg, e);
    for (int k = 0; k < K && !st; k++) st = capture(net_step, &each[k], s[k], &ge[k], e);
    if (!st) {
        *t1 = vx_bench_graph_median_us(g1, s[0], WARM, REPS);
        *tk = together_us(ge, s, main_s);
        *tg = vx_bench_graph_median_us(gg, s[0], WARM, REPS);
        if (*t1 <= 0 || *tk <= 0 || *tg <= 0)
            st = vx_err_set(e, VX_ERR_CUDA, "bench: fused: a timed replay of the network failed");
    }
    if (g1) cudaGraphExecDestroy(g1);
    if (gg) cudaGraphExecDestroy(gg);
    for (int k = 0; k < K; k++) {
        if (ge[k]) cudaGraphExecDestroy(ge[k]);
        net_free(&each[k]);
    }
    net_free(&one);
    net_free(&grp);
    vx_mem_release(&mem);
    return st;
}

int vx_bench_fused_cuda(vx_bench_result *out, int max, FILE *log)
{
    if (max < 12) return 0;
    vx_device *dev = vx_bench_cuda_open(log);
    if (!dev) return -1;
    vx_err e;
    trunk t;
    size_t off = 0, weights = 0;
    t.l1 = vx_dense_place(&off, &weights, IN, H);
    t.l2 = vx_dense_place(&off, &weights, H, H);
    t.np = off;
    vx_mem mem;
    vx_mem_init(&mem, dev, "fused bench");
    tensors m;
    size_t n[7] = {t.np,          t.np,          (size_t)B * IN, (size_t)B * H,
                   (size_t)B * H, (size_t)B * H, (size_t)B * H};
    float **slot[7] = {&m.P, &m.g, &m.x, &m.h1, &m.h2, &m.dh2, &m.dh1};
    vx_status st = VX_OK;
    for (int i = 0; i < 7 && !st; i++) {
        st = vx_mem_alloc(&mem, n[i] * K * sizeof(float), slot[i], &e);
        if (st || i == 1 || i == 3 || i == 4 || i == 6) continue; /* outputs: written first */
        float *h = malloc(n[i] * K * sizeof(float));
        if (!h) {
            st = vx_err_set(&e, VX_ERR_NOMEM, "bench: out of memory");
            break;
        }
        vx_rng g = vx_rng_make(7, (uint64_t)i, 0);
        for (size_t j = 0; j < n[i] * K; j++) h[j] = (float)(0.1 * vx_rng_normal(&g));
        st = vx_device_upload(dev, *slot[i], h, n[i] * K * sizeof(float), &e);
        free(h);
    }
    vx_dense_ctx *ctx[K] = {0};
    cudaStream_t s[K] = {0}, main_s = NULL;
    cudaGraphExec_t each[K] = {0}, alone = NULL, group = NULL;
    for (int k = 0; k < K && !st; k++) {
        vx_stream vs;
        st = vx_dense_ctx_create(dev, 0, &ctx[k], &e);
        if (!st) st = vx_stream_create(dev, &vs, &e);
        if (!st) s[k] = (cudaStream_t)vs;
    }
    if (!st) {
        vx_stream vs;
        st = vx_stream_create(dev, &vs, &e);
        main_s = (cudaStream_t)vs;
    }
    if (log && !st)
        fprintf(log,
                "bench: fused: the trunk (%d -> %d -> %d) at batch %d: one trial, %d as a "
                "graph each, %d as one group\n",
                IN, H, H, B, K, K);
    for (int k = 0; k < K && !st; k++) {
        trunk_work w = {ctx[k], &t, k, 1, &m};
        st = capture(trunk_pass, &w, s[k], &each[k], &e);
    }
    trunk_work w1 = {ctx[0], &t, 0, 1, &m}, wk = {ctx[0], &t, 0, K, &m};
    if (!st) st = capture(trunk_pass, &w1, s[0], &alone, &e);
    if (!st) st = capture(trunk_pass, &wk, s[0], &group, &e);
    double t1 = -1, tk = -1, tg = -1, n1 = -1, nk = -1, ng = -1;
    if (!st) {
        t1 = vx_bench_graph_median_us(alone, s[0], WARM, REPS);
        tk = together_us(each, s, main_s);
        tg = vx_bench_graph_median_us(group, s[0], WARM, REPS);
        if (t1 <= 0 || tk <= 0 || tg <= 0)
            st = vx_err_set(&e, VX_ERR_CUDA, "bench: fused: a timed replay failed");
    }
    if (!st && log)
        fprintf(log,
                "bench: fused: the default Q-network's forward, backward, clip and Adam: one "
                "trial, %d as a graph each, %d as one group\n",
                K, K);
    if (!st) st = bench_net(dev, s, main_s, &n1, &nk, &ng, &e);
    if (alone) cudaGraphExecDestroy(alone);
    if (group) cudaGraphExecDestroy(group);
    for (int k = 0; k < K; k++) {
        if (each[k]) cudaGraphExecDestroy(each[k]);
        vx_dense_ctx_free(ctx[k]);
        vx_stream_destroy(dev, s[k]);
    }
    vx_stream_destroy(dev, main_s);
    vx_mem_release(&mem);
    vx_device_close(dev);
    if (st) {
        if (log) fprintf(log, "bench: fused: %s\n", e.msg);
        return -1;
    }
    int r = 0;
    vx_bench_put(&out[r++], "fused trunk, one trial alone", "passes/s", 1, t1);
    vx_bench_put(&out[r++], "fused trunk, 64 trials, a graph each", "passes/s", K, tk);
    vx_bench_put(&out[r++], "fused trunk, 64 trials as one group", "passes/s", K, tg);
    double a1 = out[0].value, ak = out[1].value, ag = out[2].value;
    vx_bench_put(&out[r++], "fused trunk: a graph each / alone", "x", 1, 1),
        out[r - 1].value = ak / a1;
    vx_bench_put(&out[r++], "fused trunk: group / alone", "x", 1, 1), out[r - 1].value = ag / a1;
    vx_bench_put(&out[r++], "fused trunk: group / a graph each", "x", 1, 1),
        out[r - 1].value = ag / ak;
    vx_bench_put(&out[r++], "fused network step, one trial alone", "steps/s", 1, n1);
    vx_bench_put(&out[r++], "fused network step, 64 trials, a graph each", "steps/s", K, nk);
    vx_bench_put(&out[r++], "fused network step, 64 trials as one group", "steps/s", K, ng);
    a1 = out[6].value, ak = out[7].value, ag = out[8].value;
    vx_bench_put(&out[r++], "fused network step: a graph each / alone", "x", 1, 1),
        out[r - 1].value = ak / a1;
    vx_bench_put(&out[r++], "fused network step: group / alone", "x", 1, 1),
        out[r - 1].value = ag / a1;
    vx_bench_put(&out[r++], "fused network step: group / a graph each", "x", 1, 1),
        out[r - 1].value = ag / ak;
    return r;
}

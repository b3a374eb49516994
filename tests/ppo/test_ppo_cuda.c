/* test_ppo_cuda.c — PPO's CUDA backend against the CPU reference (skipped, 77, without a GPU).
 *
 * 1. The actor-critic's forward and backward passes on the device against the CPU's, separate
 *    and shared trunks, with more value rows than policy rows (the rollout's shape): the
 *    per-layer path (ac_cuda.h), and the fused kernels (ppo_fused.h) over trunks of one to three
 *    layers of unequal widths, in 3×TF32 (within 1e-5, as float32) and TF32, with several blocks
 *    of rows and a partial last one, every output poisoned first. The fused kernels' own
 *    optimizer step against vx_optim_step: clipped, unclipped and skipped, and the copies of
 *    the weights it writes against copies packed from its weights. The loss and the sampling
 *    spread over 16 lanes a sample against the one-thread functions, bit for bit.
 * 2. CPU vs GPU, one iteration from the same weights and environments (TF32 off), through the
 *    fused kernels and through the per-layer path: the sampled actions must be the same (the
 *    environments end in the same states, bit for bit — one differing action would change a
 *    state), the losses and statistics and the new weights and moments within 1e-5 relative,
 *    Adam's first moment tensor by tensor (a gradient wrong in one small tensor shows there).
 *    What differs is only the products' rounding (OpenBLAS's float32 against cuBLASLt's float32
 *    or the fused kernels' 3×TF32, ~1e-7 relative per output) and the order of the device's
 *    reductions; through 8 Adam steps these stay near 1e-6 in the weights' relative L2 distance.
 * 3. The target-KL stop decided on the device ends the updates where the CPU's does.
 * 4. CUDA graphs against the kernel-by-kernel path: 10 iterations, every statistic and the final
 *    state bit for bit.
 * 5. Runs: a GPU run stopped and resumed ends with an uninterrupted one's checkpoint, bit for
 *    bit; a GPU checkpoint resumes on the CPU and a CPU checkpoint on the GPU. */
#include "helpers.h"
#include "ppo/ppo_backend.h"
#include "vixen/cuda_util.h"
#include "vixen/io.h"
#include "vixen/ppo.h"
#include "vixen/ppo_math.h"
#include "vixen/train.h"
#include "nn/ac_cuda.h"
#include "ppo/ppo_fused.h"
#include "ppo_lanes_cuda.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)
#define D VX_OBS_DIM

static vx_device *g_dev;

/* ‖a − b‖ / ‖b‖ over n floats. */
static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- 1. the network ------------------------------------------------------------------------- */

static void ac_forward_backward(int shared)
{
    vx_ac_cfg cfg;
    vx_ac_cfg_default(&cfg);
    cfg.shared = shared;
    vx_ac_layout L;
    vx_err e;
    assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
    enum { BP = 37, BV = 74, K = VX_PPO_LOGITS };
    size_t np = L.n_params;
    float *p = malloc(np * 4), *x = malloc(BV * D * 4), *dz = malloc(BP * K * 4);
    float *dv = malloc(BP * 4), *g = calloc(np, 4), *gg = calloc(np, 4);
    float logits[BV * K], values[BV];
    vx_ac_init(&L, 3, p);
    vx_rng r = vx_rng_make(5, 0, 0);
    for (size_t i = 0; i < np; i++) p[i] += 0.05f * (float)vx_rng_normal(&r);
    for (int i = 0; i < BV * D; i++) x[i] = (float)vx_rng_normal(&r);
    for (int i = 0; i < BP * K; i++) dz[i] = (float)vx_rng_normal(&r) / BP;
    for (int i = 0; i < BP; i++) dv[i] = (float)vx_rng_normal(&r) / BP;
    /* the CPU: policy on BP rows, values on BV rows (two forwards), backward on BP rows */
    vx_ac_ws ws;
    assert_int_equal(vx_ac_ws_create(&L, BV, &ws, &e), VX_OK);
    vx_ac_forward_ref(&L, p, x, BV, &ws);
    memcpy(values, ws.value, sizeof values);
    vx_ac_forward_ref(&L, p, x, BP, &ws);
    memcpy(logits, ws.logits, BP * K * 4);
    vx_ac_backward_ref(&L, p, x, BP, dz, dv, &ws, g);
    /* the GPU */
    ac_cuda *a;
    assert_int_equal(ac_cuda_create(&L, BV, 0, g_dev, &a, &e), VX_OK);
    float *d_p, *d_x, *d_dz, *d_dv, *d_g;
    CK(cudaMalloc((void **)&d_p, np * 4));
    CK(cudaMalloc((void **)&d_x, BV * D * 4));
    CK(cudaMalloc((void **)&d_dz, BP * K * 4));
    CK(cudaMalloc((void **)&d_dv, BP * 4));
    CK(cudaMalloc((void **)&d_g, np * 4));
    CK(cudaMemcpy(d_p, p, np * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_x, x, BV * D * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_dz, dz, BP * K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_dv, dv, BP * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(d_g, 0, np * 4));
    CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
    float glogits[BP * K], gvalues[BV];
    assert_int_equal(ac_cuda_forward(a, d_p, d_x, BP, BV, NULL, &e), VX_OK);
    CK(cudaMemcpy(glogits, ac_cuda_logits(a), sizeof glogits, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gvalues, ac_cuda_values(a), sizeof gvalues, cudaMemcpyDeviceToHost));
    double el = rel_l2(glogits, logits, BP * K), ev = rel_l2(gvalues, values, BV);
    /* backward needs the forward of the same rows for both heads */
    assert_int_equal(ac_cuda_forward(a, d_p, d_x, BP, BP, NULL, &e), VX_OK);
    assert_int_equal(ac_cuda_backward(a, d_p, d_x, BP, d_dz, d_dv, d_g, NULL, &e), VX_OK);
    CK(cudaMemcpy(gg, d_g, np * 4, cudaMemcpyDeviceToHost));
    double eg = rel_l2(gg, g, np);
    printf("actor-critic (%s trunk) GPU vs CPU, rel L2: logits %.2e, values %.2e, gradient %.2e\n",
           shared ? "shared" : "separate", el, ev, eg);
    assert_true(el < 1e-5 && ev < 1e-5 && eg < 1e-5);
    /* every tensor's gradient is there (a skipped layer would leave zeros) */
    for (size_t i = 0; i < L.n_tensors; i++) {
        char name[64];
        size_t off;
        int rows, cols;
        vx_ac_tensor(&L, i, name, sizeof name, &off, &rows, &cols);
        double tensor_err = rel_l2(gg + off, g + off, (size_t)rows * cols);
        if (!(tensor_err < 1e-4)) fail_msg("%s: gradient differs (rel L2 %.2e)", name, tensor_err);
    }
    ac_cuda_free(a);
    cudaFree(d_p), cudaFree(d_x), cudaFree(d_dz), cudaFree(d_dv), cudaFree(d_g);
    vx_ac_ws_free(&ws);
    free(p), free(x), free(dz), free(dv), free(g), free(gg);
}

static void test_actor_critic_separate(void **state)
{
    (void)state;
    ac_forward_backward(0);
}

static void test_actor_critic_shared(void **state)
{
    (void)state;
    ac_forward_backward(1);
}

/* The fused kernels' forward pass over BV rows (act_kernel, normalisation off) and gradient over
 * BP rows (grad_kernel with the heads' gradients given) against the CPU's. */
static void fused_case(int shared, int n, const int *width, int tf32, double tol)
{
    vx_ac_cfg cfg;
    vx_ac_cfg_default(&cfg);
    cfg.shared = shared, cfg.n_trunk = n;
    char shape[64] = "";
    for (int l = 0; l < n; l++) {
        cfg.trunk[l] = width[l];
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%d", l ? "," : "",
                 width[l]);
    }
    vx_ac_layout L;
    vx_err e;
    assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
    /* 150 rows: three blocks of the update (the last partial) and 19 of a rollout step */
    enum { BP = 150, BV = 300, K = VX_PPO_LOGITS };
    size_t np = L.n_params;
    float *p = malloc(np * 4), *x = malloc(BV * D * 4), *dz = malloc(BP * K * 4);
    float *dv = malloc(BP * 4), *g = calloc(np, 4), *gg = calloc(np, 4);
    float *logits = malloc(BV * K * 4), *values = malloc(BV * 4);
    float *glogits = malloc(BV * K * 4), *gvalues = malloc(BV * 4);
    vx_ac_init(&L, 3, p);
    vx_rng r = vx_rng_make(5, (uint64_t)n, (uint64_t)shared);
    for (size_t i = 0; i < np; i++) p[i] += 0.05f * (float)vx_rng_normal(&r);
    for (int i = 0; i < BV * D; i++) x[i] = (float)vx_rng_normal(&r);
    for (int i = 0; i < BP * K; i++) dz[i] = (float)vx_rng_normal(&r) / BP;
    for (int i = 0; i < BP; i++) dv[i] = (float)vx_rng_normal(&r) / BP;
    vx_ac_ws ws;
    assert_int_equal(vx_ac_ws_create(&L, BV, &ws, &e), VX_OK);
    vx_ac_forward_ref(&L, p, x, BV, &ws);
    memcpy(values, ws.value, BV * 4);
    memcpy(logits, ws.logits, BV * K * 4);
    vx_ac_forward_ref(&L, p, x, BP, &ws);
    vx_ac_backward_ref(&L, p, x, BP, dz, dv, &ws, g);
    ppo_fused *f;
    if (ppo_fused_create(&L, BP, tf32, g_dev, &f, &e)) fail_msg("%s", e.msg);
    float *d_p, *d_x, *d_dz, *d_dv, *d_g, *d_logits, *d_values;
    CK(cudaMalloc((void **)&d_p, np * 4));
    CK(cudaMalloc((void **)&d_x, BV * D * 4));
    CK(cudaMalloc((void **)&d_dz, BP * K * 4));
    CK(cudaMalloc((void **)&d_dv, BP * 4));
    CK(cudaMalloc((void **)&d_g, np * 4));
    CK(cudaMalloc((void **)&d_logits, BV * K * 4));
    CK(cudaMalloc((void **)&d_values, BV * 4));
    CK(cudaMemcpy(d_p, p, np * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_x, x, BV * D * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_dz, dz, BP * K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_dv, dv, BP * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
    /* NaN everywhere an output goes: a float left unwritten fails the comparisons */
    CK(cudaMemset(d_g, 0xff, np * 4));
    CK(cudaMemset(d_logits, 0xff, BV * K * 4));
    CK(cudaMemset(d_values, 0xff, BV * 4));
    assert_int_equal(ppo_fused_pack(f, d_p, NULL, &e), VX_OK);
    ppo_fused_act_args a;
    memset(&a, 0, sizeof a);
    a.N = BV, a.obs = d_x, a.logits = d_logits, a.values = d_values;
    a.steps = 2; /* several steps need the sampling and the environments: refused, not run */
    assert_int_equal(ppo_fused_act(f, &a, NULL, &e), VX_ERR_ARG);
    printf("a launch of 2 steps without them: %s\n", e.msg);
    a.steps = 0;
    assert_int_equal(ppo_fused_act(f, &a, NULL, &e), VX_OK);
    ppo_fused_grad_args ga;
    memset(&ga, 0, sizeof ga);
    ga.M = BP, ga.obs = d_x, ga.dz = d_dz, ga.dv = d_dv;
    assert_int_equal(ppo_fused_grad(f, &ga, d_g, NULL, NULL, NULL, NULL, &e), VX_OK);
    CK(cudaMemcpy(glogits, d_logits, BV * K * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gvalues, d_values, BV * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gg, d_g, np * 4, cudaMemcpyDeviceToHost));
    /* the gradient over the parameters; the padding between tensors is left alone (still NaN) */
    char *real = calloc(np, 1);
    double num = 0, den = 0;
    for (size_t i = 0; i < L.n_tensors; i++) {
        char name[64];
        size_t off;
        int rows, cols;
        vx_ac_tensor(&L, i, name, sizeof name, &off, &rows, &cols);
        size_t cnt = (size_t)rows * cols;
        double tensor_err = rel_l2(gg + off, g + off, cnt);
        if (!(tensor_err < 10 * tol))
            fail_msg("%s: gradient differs (rel L2 %.2e)", name, tensor_err);
        memset(real + off, 1, cnt);
        for (size_t k = off; k < off + cnt; k++)
            num += ((double)gg[k] - g[k]) * ((double)gg[k] - g[k]), den += (double)g[k] * g[k];
    }
    for (size_t i = 0; i < np; i++)
        if (!real[i] && !isnan(gg[i])) fail_msg("gradient padding float %zu written: %g", i, gg[i]);
    free(real);
    double el = rel_l2(glogits, logits, BV * K), ev = rel_l2(gvalues, values, BV);
    double eg = sqrt(num / den);
    printf("fused %s [%s] %s GPU vs CPU, rel L2: logits %.2e, values %.2e, gradient %.2e\n",
           shared ? "shared" : "separate", shape, tf32 ? "TF32" : "3xTF32", el, ev, eg);
    if (!(el < tol && ev < tol && eg < tol)) fail_msg("beyond %.0e", tol);
    ppo_fused_free(f);
    cudaFree(d_p), cudaFree(d_x), cudaFree(d_dz), cudaFree(d_dv), cudaFree(d_g);
    cudaFree(d_logits), cudaFree(d_values);
    vx_ac_ws_free(&ws);
    free(p), free(x), free(dz), free(dv), free(g), free(gg);
    free(logits), free(values), free(glogits), free(gvalues);
}

static void test_fused_actor_critic(void **state)
{
    (void)state;
    const int two[] = {160, 160}, three[] = {48, 32, 64}, one[] = {32};
    fused_case(0, 2, two, 0, 1e-5);
    fused_case(1, 2, two, 0, 1e-5);
    fused_case(0, 3, three, 0, 1e-5);
    fused_case(1, 1, one, 0, 1e-5);
    /* TF32: 10-bit mantissas, errors near 1e-3 (the gradient's near 1e-2, measured 9.0e-3 on an
     * H200) — 3xTF32 above must be far better than that */
    fused_case(0, 2, two, 1, 3e-2);
}

/* The fused optimizer step (ppo_fused_grad with an optimizer: the norm and the step) against the
 * optimizer's own (vx_optim_step) from the same weights and heads' gradients, two steps: with
 * the clip active (max_norm under the gradient's norm) and not, and skipped. The two sum the
 * norm in different fixed orders (double), so a clip's scale may differ in its last bit: the
 * weights, moments and clipped gradients must agree within 1e-6 rel L2, the norms within
 * 1e-12, the step counts exactly; a skipped step must leave everything as it was, bit for bit.
 * Then the fused object's copies of the weights, written by the step itself, must give the same
 * logits bit for bit as copies packed from its weights — a parameter written to the wrong copy
 * slot, or not at all, changes them. */
static void fused_step_case(double max_norm, int skip, int wide)
{
    vx_ac_cfg cfg;
    vx_ac_cfg_default(&cfg);
    if (wide) cfg.trunk[0] = cfg.trunk[1] = 256;
    vx_ac_layout L;
    vx_err e;
    assert_int_equal(vx_ac_layout_make(&cfg, &L, &e), VX_OK);
    enum { B = 150, K = VX_PPO_LOGITS };
    size_t np = L.n_params;
    float *p = malloc(np * 4), *x = malloc(B * D * 4), *dz = malloc(B * K * 4), *dv = malloc(B * 4);
    vx_ac_init(&L, 3, p);
    vx_rng r = vx_rng_make(9, 1, 2);
    for (size_t i = 0; i < np; i++) p[i] += 0.05f * (float)vx_rng_normal(&r);
    for (int i = 0; i < B * D; i++) x[i] = (float)vx_rng_normal(&r);
    for (int i = 0; i < B * K; i++) dz[i] = (float)vx_rng_normal(&r);
    for (int i = 0; i < B; i++) dv[i] = (float)vx_rng_normal(&r);
    ppo_fused *fa, *fb;
    if (ppo_fused_create(&L, B, 0, g_dev, &fa, &e)) fail_msg("%s", e.msg);
    if (ppo_fused_create(&L, B, 0, g_dev, &fb, &e)) fail_msg("%s", e.msg);
    size_t grid, wanted;
    ppo_fused_step_grid(fb, &grid, &wanted);
    vx_adam_cfg ac = {1e-3, 0.9, 0.999, 1e-8, 0.01};
    vx_optim *oa, *ob;
    assert_int_equal(vx_optim_create(&ac, max_norm, np, g_dev, &oa, &e), VX_OK);
    assert_int_equal(vx_optim_create(&ac, max_norm, np, g_dev, &ob, &e), VX_OK);
    float *d_pa, *d_pb, *d_ga, *d_gb, *d_x, *d_dz, *d_dv, *d_la, *d_lb;
    int *d_skip;
    CK(cudaMalloc((void **)&d_pa, np * 4));
    CK(cudaMalloc((void **)&d_pb, np * 4));
    CK(cudaMalloc((void **)&d_ga, np * 4));
    CK(cudaMalloc((void **)&d_gb, np * 4));
    CK(cudaMalloc((void **)&d_x, B * D * 4));
    CK(cudaMalloc((void **)&d_dz, B * K * 4));
    CK(cudaMalloc((void **)&d_dv, B * 4));
    CK(cudaMalloc((void **)&d_la, B * K * 4));
    CK(cudaMalloc((void **)&d_lb, B * K * 4));
    CK(cudaMalloc((void **)&d_skip, sizeof(int)));
    CK(cudaMemcpy(d_pa, p, np * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_pb, p, np * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(d_ga, 0, np * 4)); /* the padding between tensors stays 0 */
    CK(cudaMemset(d_gb, 0, np * 4));
    CK(cudaMemcpy(d_x, x, B * D * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_dz, dz, B * K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_dv, dv, B * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_skip, &skip, sizeof skip, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* its DMA landed (cudaMemcpy may return first) */
    vx_optim_set_controls(oa, NULL, d_skip);
    vx_optim_set_controls(ob, NULL, d_skip);
    vx_optim_view view;
    assert_int_equal(vx_optim_view_of(ob, &view, &e), VX_OK);
    ppo_fused_grad_args ga;
    memset(&ga, 0, sizeof ga);
    ga.M = B, ga.obs = d_x, ga.dz = d_dz, ga.dv = d_dv;
    assert_int_equal(ppo_fused_pack(fb, d_pb, NULL, &e), VX_OK); /* once: the steps keep it */
    for (int step = 0; step < 2; step++) {
        assert_int_equal(ppo_fused_pack(fa, d_pa, NULL, &e), VX_OK);
        assert_int_equal(ppo_fused_grad(fa, &ga, d_ga, NULL, NULL, NULL, NULL, &e), VX_OK);
        assert_int_equal(vx_optim_step(oa, d_pa, d_ga, NULL, &e), VX_OK);
        assert_int_equal(ppo_fused_grad(fb, &ga, d_gb, d_pb, &view, NULL, NULL, &e), VX_OK);
    }
    CK(cudaDeviceSynchronize());
    float *h[8];
    for (int i = 0; i < 8; i++) CK(cudaMallocHost((void **)&h[i], np * 4));
    int64_t ta = -1, tb = -1;
    double na = -1, nb = -1;
    CK(cudaMemcpy(h[0], d_pa, np * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h[1], d_pb, np * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h[2], d_ga, np * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h[3], d_gb, np * 4, cudaMemcpyDeviceToHost));
    assert_int_equal(vx_optim_copy_state(oa, h[4], h[5], &ta, NULL, &e), VX_OK);
    assert_int_equal(vx_optim_copy_state(ob, h[6], h[7], &tb, NULL, &e), VX_OK);
    CK(cudaMemcpy(&na, vx_optim_norm(oa), 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&nb, vx_optim_norm(ob), 8, cudaMemcpyDeviceToHost));
    CK(cudaDeviceSynchronize());
    double ep = rel_l2(h[1], h[0], np), eg = rel_l2(h[3], h[2], np);
    double em = rel_l2(h[6], h[4], np), ev = rel_l2(h[7], h[5], np);
    printf(
        "fused optimizer step, max norm %g%s%s: norm %.9g vs %.9g, steps %lld vs %lld; rel L2 "
        "weights %.2e, clipped gradient %.2e, m %.2e, v %.2e; the step's grid %zu blocks of %zu\n",
        max_norm, skip ? ", skipped" : "", wide ? ", trunks 256, 256" : "", nb, na, (long long)tb,
        (long long)ta, ep, eg, em, ev, grid, wanted);
    assert_int_equal(ta, skip ? 0 : 2);
    assert_int_equal(tb, ta);
    if (skip) {
        assert_memory_equal(h[1], p, np * 4);
        assert_memory_equal(h[0], p, np * 4);
        assert_true(na == 0 && nb == 0); /* never taken */
    } else {
        assert_true(fabs(nb - na) <= 1e-12 * na);
        if (max_norm > 0) assert_true(na > max_norm); /* the clip was active */
        assert_true(ep < 1e-6 && eg < 1e-6 && em < 1e-6 && ev < 1e-6);
        assert_true(rel_l2(h[1], p, np) > 1e-4); /* the weights moved */
    }
    /* the copies the step wrote against copies packed from its own weights */
    ppo_fused_act_args a;
    memset(&a, 0, sizeof a);
    a.N = B, a.obs = d_x, a.logits = d_lb;
    assert_int_equal(ppo_fused_act(fb, &a, NULL, &e), VX_OK);
    assert_int_equal(ppo_fused_pack(fa, d_pb, NULL, &e), VX_OK);
    a.logits = d_la;
    assert_int_equal(ppo_fused_act(fa, &a, NULL, &e), VX_OK);
    CK(cudaMemcpy(h[0], d_la, B * K * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h[1], d_lb, B * K * 4, cudaMemcpyDeviceToHost));
    assert_memory_equal(h[0], h[1], B * K * 4);
    for (int i = 0; i < 8; i++) cudaFreeHost(h[i]);
    cudaFree(d_pa), cudaFree(d_pb), cudaFree(d_ga), cudaFree(d_gb), cudaFree(d_x);
    cudaFree(d_dz), cudaFree(d_dv), cudaFree(d_la), cudaFree(d_lb), cudaFree(d_skip);
    vx_optim_free(oa), vx_optim_free(ob);
    ppo_fused_free(fa), ppo_fused_free(fb);
    free(p), free(x), free(dz), free(dv);
}

static void test_fused_optimizer_step(void **state)
{
    (void)state;
    fused_step_case(0.05, 0, 0); /* clipped: the heads' gradients here have a norm far above it */
    fused_step_case(0, 0, 0);    /* no clip */
    fused_step_case(0.05, 1, 0); /* skipped */
    /* two trunks of 256, 256: more packed floats than the step's launch keeps resident threads
     * (about 660 × 256 on a 132-SM Hopper), so each thread takes several and the norm's parts
     * are added in the capped grid's order */
    fused_step_case(0.05, 0, 1);
}

/* The lanes' loss and sampling (ppo_lanes.cuh: 16 lanes a sample, its sums read by shuffles)
 * against the one-thread vx_ppo_loss and vx_ppo_sample they replace in the fused kernels, on the
 * device, bit for bit: every gradient, statistic, action and log π of 4,096 rows, in two loss
 * settings. The rows cover small and large logits, ties and one dominant logit, ratios inside
 * and outside the clip, the value's clip active and not. A sum taken in another order, a lane
 * reading a neighbour of the wrong branch, or a branch drawing another branch's uniform changes
 * bits in some rows; the sampled actions must also be the CPU's own. */
static void lanes_case(const vx_ppo_loss_cfg *c, uint64_t seed)
{
    enum { ROWS = 4096, W = 16, A = VX_ACTION_BRANCHES };
    float *head = malloc(ROWS * W * sizeof *head);
    int32_t *act = malloc(ROWS * A * sizeof *act), *sa[2], *cpu = malloc(ROWS * A * sizeof *cpu);
    double *prev = malloc(ROWS * 4 * sizeof *prev), *g[2], *st[2], *lp[2];
    for (int i = 0; i < 2; i++) {
        g[i] = malloc(ROWS * W * sizeof(double)), st[i] = malloc(ROWS * LANES_STATS * 8);
        sa[i] = malloc(ROWS * A * sizeof(int32_t)), lp[i] = malloc(ROWS * sizeof(double));
    }
    vx_rng r = vx_rng_make(seed, 11, 0);
    const double scales[] = {0.01, 1, 8, 40};
    for (int i = 0; i < ROWS; i++) {
        float *h = head + i * W;
        for (int k = 0; k < VX_PPO_LOGITS; k++) h[k] = (float)(scales[i % 4] * vx_rng_normal(&r));
        if (i % 7 == 0) h[1] = h[0], h[10] = h[9], h[13] = h[12]; /* ties */
        if (i % 11 == 0) h[vx_rng_below(&r, VX_PPO_LOGITS)] = 60.0f;
        h[VX_PPO_LOGITS] = (float)(2 * vx_rng_normal(&r));
        for (int b = 0; b < A; b++) act[i * A + b] = (int32_t)vx_rng_below(&r, vx_ppo_branch_n(b));
        double z[VX_PPO_LOGITS];
        for (int k = 0; k < VX_PPO_LOGITS; k++) z[k] = h[k];
        double *pv = prev + i * 4;
        pv[0] = vx_ppo_logp_entropy(z, act + i * A, NULL) + 0.3 * vx_rng_normal(&r);
        pv[1] = h[VX_PPO_LOGITS] + 0.3 * vx_rng_normal(&r);
        pv[2] = vx_rng_normal(&r), pv[3] = 2 * vx_rng_normal(&r);
    }
    const uint64_t step = 77;
    CK(ppo_lanes_run(c, ROWS, head, act, prev, seed, step, g, st, sa, lp));
    int clipped = 0, v_clipped = 0, same_cpu = 0;
    for (int i = 0; i < ROWS; i++) {
        clipped += st[1][i * LANES_STATS + 4] != 0;
        v_clipped += g[1][i * W + VX_PPO_LOGITS] == 0;
        double z[VX_PPO_LOGITS];
        for (int k = 0; k < VX_PPO_LOGITS; k++) z[k] = head[i * W + k];
        vx_ppo_sample(z, seed, (uint64_t)i, step, cpu + i * A);
        same_cpu += memcmp(cpu + i * A, sa[1] + i * A, A * sizeof *cpu) == 0;
    }
    int bad_g = 0, bad_st = 0, bad_a = 0, bad_lp = 0;
    for (int i = 0; i < ROWS; i++) {
        bad_g += memcmp(g[0] + i * W, g[1] + i * W, W * sizeof(double)) != 0;
        bad_st += memcmp(st[0] + i * LANES_STATS, st[1] + i * LANES_STATS,
                         LANES_STATS * sizeof(double)) != 0;
        bad_a += memcmp(sa[0] + i * A, sa[1] + i * A, A * sizeof(int32_t)) != 0;
        bad_lp += memcmp(lp[0] + i, lp[1] + i, sizeof(double)) != 0;
    }
    printf(
        "lanes vs one thread, clip %g%s: rows differing in gradient %d, statistics %d, actions "
        "%d, log pi %d of %d (ratio clipped in %d, value clip active in %d; actions the CPU's in "
        "%d)\n",
        c->clip, c->clip_value ? " (value too)" : "", bad_g, bad_st, bad_a, bad_lp, ROWS, clipped,
        v_clipped, same_cpu);
    assert_int_equal(bad_g + bad_st + bad_a + bad_lp, 0);
    assert_int_equal(same_cpu, ROWS);
    assert_true(clipped > ROWS / 20 && clipped < ROWS - ROWS / 20); /* both sides of the clip */
    if (c->clip_value) assert_true(v_clipped > ROWS / 20 && v_clipped < ROWS - ROWS / 20);
    for (int i = 0; i < 2; i++) free(g[i]), free(st[i]), free(sa[i]), free(lp[i]);
    free(head), free(act), free(prev), free(cpu);
}

static void test_fused_loss_lanes(void **state)
{
    (void)state;
    vx_ppo_loss_cfg a = {0.2, 1, 0.5, 0.01}, b = {0.1, 0, 1.0, 0.0};
    lanes_case(&a, 21);
    lanes_case(&b, 22);
}

/* ---- backends side by side ------------------------------------------------------------------ */

typedef struct {
    vx_market m;
    vx_ppo_settings s;
    vx_run_params run;
    vx_ac_layout L;
    float *init;
} setup;

static void setup_make(setup *u, int N, int T, int epochs, int minibatches)
{
    vx_series ser;
    vx_err e;
    th_synth(&ser, 12, 4, 0.2);
    assert_int_equal(vx_market_from_series(&ser, &u->m, &e), VX_OK);
    vx_ppo_settings_default(&u->s);
    u->s.update_epochs = epochs, u->s.minibatches = minibatches;
    memset(&u->run, 0, sizeof u->run);
    u->run.envs = N, u->run.steps_per_epoch = T, u->run.epochs = 20, u->run.seed = 7;
    u->run.gpu_graphs = 1;
    vx_ac_cfg net;
    vx_ppo_net_cfg(&u->s, &net);
    assert_int_equal(vx_ac_layout_make(&net, &u->L, &e), VX_OK);
    u->init = malloc(u->L.n_params * 4);
    vx_ac_init(&u->L, u->run.seed, u->init);
}

static void setup_free(setup *u)
{
    free(u->init);
    vx_market_close(&u->m);
}

typedef struct {
    const ppo_backend_ops *ops;
    ppo_backend *b;
    ppo_state *st;
    vx_env *env;
} learner;

static void learner_make(learner *l, setup *u, vx_device *dev)
{
    vx_err e;
    vx_env_cfg ec;
    vx_env_cfg_default(&ec);
    ec.seed = 11;
    ec.episode_len = 40; /* episodes end inside a rollout: truncations and their bootstraps */
    assert_int_equal(
        vx_env_create(&ec, &u->m, VX_SPLIT_TRAIN, (size_t)u->run.envs, dev, &l->env, &e), VX_OK);
    l->ops = dev ? vx_device_backend(dev, "ppo") : &vx_ppo_backend_cpu;
    assert_non_null(l->ops);
    ppo_init in = {&u->s, &u->run, &u->L, dev, l->env, u->init};
    if (l->ops->create(&in, &l->b, &l->st, &e)) fail_msg("%s", e.msg);
}

static void learner_free(learner *l)
{
    l->ops->free(l->b);
    vx_env_free(l->env);
}

static void iterate(learner *l, int epoch, double lr, ppo_result *r)
{
    vx_err e;
    ppo_plan p = {epoch, lr};
    if (l->ops->iteration(l->b, &p, r, &e)) fail_msg("%s", e.msg);
}

static void save(learner *l)
{
    vx_err e;
    if (l->ops->save(l->b, &e)) fail_msg("%s", e.msg);
}

/* |a − b| ≤ tol · (|b| + floor): relative, with a floor for statistics near 0 (the policy loss
 * of normalised advantages is a mean of terms of both signs). */
static void close_to(const char *what, double a, double b, double tol, double floor)
{
    double err = fabs(a - b) / (fabs(b) + floor);
    printf("  %-14s cpu %+.9e  gpu %+.9e  relative %.1e\n", what, b, a, err);
    if (!(err <= tol)) fail_msg("%s: GPU %.9g against CPU %.9g (relative %.2e)", what, a, b, err);
}

/* ---- 2. CPU vs GPU -------------------------------------------------------------------------- */

static void cpu_and_gpu_agree(int fused)
{
    setup u;
    setup_make(&u, 64, 64, 2, 4); /* 4,096 samples, 8 minibatches of 1,024 */
    u.s.fused = fused;
    learner c, g;
    learner_make(&c, &u, NULL);
    learner_make(&g, &u, g_dev);
    ppo_result rc, rg;
    iterate(&c, 0, u.s.adam.lr, &rc);
    iterate(&g, 0, u.s.adam.lr, &rg);
    save(&c), save(&g);
    char how[256];
    g.ops->describe(g.b, how, sizeof how);
    printf("one iteration, CPU against GPU %s (%d and %d updates, %.0f episodes):\n", how,
           rc.updates, rg.updates, rc.episodes);
    assert_true((strstr(how, "fused kernels") != NULL) == fused);
    assert_int_equal(rc.updates, 8);
    assert_int_equal(rg.updates, 8);
    assert_true(rc.episodes > 0);
    /* the same actions: the environments are in the same states */
    assert_memory_equal(c.st->env, g.st->env, (size_t)u.run.envs * sizeof(vx_env_state));
    assert_memory_equal(c.st->obs, g.st->obs, (size_t)u.run.envs * D * 4);
    assert_true(rc.episodes == rg.episodes);
    close_to("return sum", rg.return_sum, rc.return_sum, 1e-12, 1);
    close_to("pg loss", rg.pg_loss, rc.pg_loss, 1e-5, 1);
    close_to("value loss", rg.v_loss, rc.v_loss, 1e-5, 1e-3);
    close_to("entropy", rg.entropy, rc.entropy, 1e-5, 1e-3);
    close_to("approx kl", rg.approx_kl, rc.approx_kl, 1e-5, 1e-3);
    close_to("clip fraction", rg.clipfrac, rc.clipfrac, 1e-5, 1);
    close_to("explained var", rg.explained_var, rc.explained_var, 1e-5, 1);
    close_to("grad norm", rg.grad_norm, rc.grad_norm, 1e-5, 1e-3);
    size_t np = u.L.n_params;
    double ew = rel_l2(g.st->params, c.st->params, np);
    double em = rel_l2(g.st->adam_m, c.st->adam_m, np);
    double ev = rel_l2(g.st->adam_v, c.st->adam_v, np);
    printf("  new weights rel L2 %.2e, Adam m %.2e, v %.2e\n", ew, em, ev);
    assert_true(ew < 1e-5 && em < 1e-5 && ev < 1e-5);
    for (size_t i = 0; i < u.L.n_tensors; i++) { /* each tensor's gradients, through Adam's m */
        char name[64];
        size_t off;
        int rows, cols;
        vx_ac_tensor(&u.L, i, name, sizeof name, &off, &rows, &cols);
        double t = rel_l2(g.st->adam_m + off, c.st->adam_m + off, (size_t)rows * cols);
        if (!(t < 1e-4)) fail_msg("%s: Adam's m differs (rel L2 %.2e)", name, t);
    }
    for (int d = 0; d < D; d++) {
        close_to("obs mean", g.st->obs_mean[d], c.st->obs_mean[d], 1e-9, 1e-6);
        close_to("obs var", g.st->obs_var[d], c.st->obs_var[d], 1e-9, 1e-6);
        if (d == 1) break; /* printed for two features; all are checked below */
    }
    for (int d = 0; d < D; d++) {
        assert_true(fabs(g.st->obs_mean[d] - c.st->obs_mean[d]) <=
                    1e-9 * (fabs(c.st->obs_mean[d]) + 1e-6));
        assert_true(fabs(g.st->obs_var[d] - c.st->obs_var[d]) <=
                    1e-9 * (fabs(c.st->obs_var[d]) + 1e-6));
    }
    assert_true(g.st->obs_count == c.st->obs_count);
    assert_int_equal(g.st->act_step, c.st->act_step);
    assert_int_equal(g.st->adam_t, c.st->adam_t);
    assert_int_equal(g.st->iterations, 1);
    learner_free(&c), learner_free(&g);
    setup_free(&u);
}

static void test_cpu_and_gpu_agree(void **state)
{
    (void)state;
    cpu_and_gpu_agree(1);
}

static void test_cpu_and_gpu_agree_per_layer(void **state)
{
    (void)state;
    cpu_and_gpu_agree(0);
}

/* ---- 3. target-KL --------------------------------------------------------------------------- */

static void test_target_kl_stops_where_the_cpu_does(void **state)
{
    (void)state;
    setup u;
    setup_make(&u, 32, 32, 3, 4);
    u.s.target_kl = 1e-12; /* any update passes it: the updates end after the first epoch */
    learner c, g;
    learner_make(&c, &u, NULL);
    learner_make(&g, &u, g_dev);
    ppo_result rc, rg;
    iterate(&c, 0, u.s.adam.lr, &rc);
    iterate(&g, 0, u.s.adam.lr, &rg);
    save(&c), save(&g);
    printf("target KL 1e-12: %d updates on the CPU, %d on the GPU (of 12 planned)\n", rc.updates,
           rg.updates);
    assert_int_equal(rc.updates, 4);
    assert_int_equal(rg.updates, 4);
    assert_int_equal(g.st->adam_t, 4);
    double ew = rel_l2(g.st->params, c.st->params, u.L.n_params);
    printf("  weights rel L2 %.2e\n", ew);
    assert_true(ew < 1e-5);
    learner_free(&c), learner_free(&g);
    setup_free(&u);
}

/* ---- 4. graphs vs kernel by kernel ---------------------------------------------------------- */

static void test_graphs_match_kernel_by_kernel(void **state)
{
    (void)state;
    setup u;
    setup_make(&u, 64, 32, 4, 4);
    u.s.target_kl = 0.01; /* with a larger rate some iterations stop early */
    u.s.adam.lr = 2e-3;
    learner gr, ea;
    learner_make(&gr, &u, g_dev);
    u.run.gpu_graphs = 0;
    learner_make(&ea, &u, g_dev);
    int stopped = 0;
    for (int it = 0; it < 10; it++) {
        ppo_result a, b;
        double lr = u.s.adam.lr * (1 - it / 20.0);
        iterate(&gr, it, lr, &a);
        iterate(&ea, it, lr, &b);
        stopped += a.updates < 16;
        assert_int_equal(a.updates, b.updates);
        const double *x[] = {&a.return_sum, &a.episodes, &a.pg_loss,       &a.v_loss,   &a.entropy,
                             &a.approx_kl,  &a.clipfrac, &a.explained_var, &a.grad_norm};
        const double *y[] = {&b.return_sum, &b.episodes, &b.pg_loss,       &b.v_loss,   &b.entropy,
                             &b.approx_kl,  &b.clipfrac, &b.explained_var, &b.grad_norm};
        for (size_t k = 0; k < sizeof x / sizeof *x; k++)
            if (memcmp(x[k], y[k], 8) != 0)
                fail_msg("iteration %d: statistic %zu differs (%.17g against %.17g)", it, k, *x[k],
                         *y[k]);
    }
    save(&gr), save(&ea);
    size_t np = u.L.n_params, N = (size_t)u.run.envs;
    assert_memory_equal(gr.st->params, ea.st->params, np * 4);
    assert_memory_equal(gr.st->adam_m, ea.st->adam_m, np * 4);
    assert_memory_equal(gr.st->adam_v, ea.st->adam_v, np * 4);
    assert_memory_equal(gr.st->obs_mean, ea.st->obs_mean, D * 8);
    assert_memory_equal(gr.st->obs_var, ea.st->obs_var, D * 8);
    assert_memory_equal(gr.st->env, ea.st->env, N * sizeof(vx_env_state));
    assert_memory_equal(gr.st->ep_ret, ea.st->ep_ret, N * 8);
    assert_int_equal(gr.st->updates, ea.st->updates);
    printf("graphs and kernel by kernel: 10 iterations bit-identical (%d stopped early by the "
           "target KL; %lld updates)\n",
           stopped, (long long)gr.st->updates);
    /* both paths of the end-of-epoch check were taken: some iterations stopped, and some epoch
     * passed it (more updates than one epoch's per iteration) */
    assert_true(stopped > 0 && gr.st->updates > 10 * u.s.minibatches);
    learner_free(&gr), learner_free(&ea);
    setup_free(&u);
}

/* ---- 5. runs and checkpoints ---------------------------------------------------------------- */

static int stop_at(const vx_epoch_report *r, void *ctx) { return r->epoch == *(const int *)ctx; }

static void small(vx_train_cfg *c, const char *dir, int device)
{
    vx_train_cfg_default(c);
    c->algo = 1; /* ppo */
    vx_ppo_settings *s = vx_train_algo_settings(c, "ppo");
    c->synth_days = 12, c->env.episode_len = 60;
    c->envs = 64, c->steps_per_epoch = 32, c->epochs = 4, c->eval_every = 2;
    c->checkpoint_every = 2;
    c->device = device;
    s->minibatches = 4, s->update_epochs = 2;
    snprintf(c->run_dir, sizeof c->run_dir, "%s", dir);
}

static void train(vx_train_cfg *c, int resume, int *stop)
{
    vx_err e;
    vx_device *dev = c->device == VX_DEVICE_CPU ? NULL : g_dev;
    vx_status st = vx_train_run(c, dev, resume, stop ? stop_at : NULL, stop, NULL, &e);
    if (st != (stop ? VX_ERR_STOPPED : VX_OK)) fail_msg("%s", e.msg); /* a stop skips the test */
}

static size_t count_of(const vx_tensor *t)
{
    size_t k = 1;
    for (int d = 0; d < t->ndim; d++) k *= (size_t)t->shape[d];
    return k;
}

static vx_safetensors latest(const char *dir)
{
    char p[128];
    vx_safetensors s;
    vx_err e;
    snprintf(p, sizeof p, "%s/checkpoint/latest.safetensors", dir);
    if (vx_safetensors_read(p, &s, &e)) fail_msg("%s", e.msg);
    return s;
}

static void test_checkpoints_resume_on_either_device(void **state)
{
    (void)state;
    char a[64], b[64], c2[64];
    th_tmpdir(a, sizeof a), th_tmpdir(b, sizeof b), th_tmpdir(c2, sizeof c2);
    vx_train_cfg c;
    vx_err e;
    small(&c, a, VX_DEVICE_CUDA);
    train(&c, 0, NULL);
    small(&c, b, VX_DEVICE_CUDA);
    train(&c, 0, &(int){2});
    train(&c, 1, NULL);
    vx_safetensors sa = latest(a), sb = latest(b);
    assert_int_equal(sa.n, sb.n);
    for (size_t i = 0; i < sa.n; i++) {
        const vx_tensor *x = &sa.tensors[i];
        const vx_tensor *y = &sb.tensors[i];
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->dtype, y->dtype);
        size_t nb = count_of(x) * (x->dtype == VX_DT_U8 ? 1 : x->dtype == VX_DT_F32 ? 4 : 8);
        assert_int_equal(count_of(x), count_of(y));
        if (memcmp(x->data, y->data, nb) != 0)
            fail_msg("tensor %s differs after a resume on the GPU", x->name);
    }
    assert_string_equal(vx_safetensors_meta(&sa, "updates"), vx_safetensors_meta(&sb, "updates"));
    assert_string_equal(vx_safetensors_meta(&sa, "updates"), "32");
    printf("GPU run stopped after epoch 2 and resumed: %zu tensors bit-identical to the "
           "uninterrupted run's\n",
           sa.n);
    vx_safetensors_free(&sb);
    /* the GPU's checkpoint after epoch 2 goes on on the CPU */
    small(&c, b, VX_DEVICE_CUDA);
    th_rmtree(b);
    train(&c, 0, &(int){2});
    small(&c, b, VX_DEVICE_CPU);
    train(&c, 1, NULL);
    sb = latest(b);
    assert_string_equal(vx_safetensors_meta(&sb, "updates"), "32");
    size_t n0 = (size_t)VX_OBS_DIM * 160;
    const vx_tensor *wa = vx_safetensors_get(&sa, "policy.pi.0.weight", VX_DT_F32, n0, &e);
    const vx_tensor *wb = vx_safetensors_get(&sb, "policy.pi.0.weight", VX_DT_F32, n0, &e);
    assert_non_null(wa);
    assert_non_null(wb);
    double ew = rel_l2(wb->data, wa->data, n0);
    printf("the GPU's checkpoint resumed on the CPU: first layer rel L2 %.2e from the GPU's "
           "run\n",
           ew);
    assert_true(ew < 1e-3);
    /* and a CPU checkpoint on the GPU */
    small(&c, c2, VX_DEVICE_CPU);
    train(&c, 0, &(int){2});
    small(&c, c2, VX_DEVICE_CUDA);
    train(&c, 1, NULL);
    vx_safetensors sc = latest(c2);
    assert_string_equal(vx_safetensors_meta(&sc, "updates"), "32");
    vx_safetensors_free(&sa), vx_safetensors_free(&sb), vx_safetensors_free(&sc);
    th_rmtree(a), th_rmtree(b), th_rmtree(c2);
}

int main(void)
{
    if (vx_cuda_device_count() == 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CUDA;
    vx_err e;
    if (vx_device_open(&dc, &g_dev, &e)) {
        printf("%s\n", e.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_actor_critic_separate),
        cmocka_unit_test(test_actor_critic_shared),
        cmocka_unit_test(test_fused_actor_critic),
        cmocka_unit_test(test_fused_optimizer_step),
        cmocka_unit_test(test_fused_loss_lanes),
        cmocka_unit_test(test_cpu_and_gpu_agree),
        cmocka_unit_test(test_cpu_and_gpu_agree_per_layer),
        cmocka_unit_test(test_target_kl_stops_where_the_cpu_does),
        cmocka_unit_test(test_graphs_match_kernel_by_kernel),
        cmocka_unit_test(test_checkpoints_resume_on_either_device),
    };
    const char *only = getenv("VX_TEST_FILTER"); /* cmocka's filter: `*` wildcards */
    if (only && *only) cmocka_set_test_filter(only);
    int failed = cmocka_run_group_tests_name("ppo_cuda", tests, NULL, NULL);
    vx_device_close(g_dev);
    return failed;
}

/* test_nn_cuda.c — the Q-network on a CUDA device against the CPU reference (float32 both, TF32
 * off: relative L2 error below 1e-5), for the expected-value head and a C51 head, with the TF32
 * switch shown to take effect; and ε-greedy actions from the GPU rollout's kernel equal to
 * vx_dqn_act's, the exploration draws included. Skipped (77) without a GPU. */
#include "helpers.h"
#include "vixen/cuda_util.h"
#include "vixen/device.h"
#include "vixen/dqn.h"
#include "vixen/philox.h"
#include "dqn/rollout_cuda.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)

static vx_device *g_dev;

static double rel_l2(const float *a, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d, den += (double)ref[i] * ref[i];
    }
    return sqrt(num / den);
}

static void forward_parity(int atoms)
{
    vx_qnet_cfg c;
    vx_qnet_cfg_default(&c);
    c.atoms = atoms;
    vx_qnet_layout L;
    vx_err e;
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_OK);
    const int B = 300, D = VX_OBS_DIM;
    size_t nq = (size_t)B * L.out_dim;
    float *p = malloc(L.n_params * 4), *x = malloc((size_t)B * D * 4), *out = malloc(nq * 4);
    vx_qnet_init(&L, 5 + (uint64_t)atoms, p);
    vx_rng g = vx_rng_make(8, 0, 0);
    for (size_t i = 0; i < L.n_params; i++)
        p[i] += 0.01f * (float)vx_rng_normal(&g); /* biases too */
    for (int i = 0; i < B * D; i++) x[i] = (float)vx_rng_normal(&g);
    vx_qnet_ws ws;
    assert_int_equal(vx_qnet_ws_create(&L, B, &ws, &e), VX_OK);
    vx_qnet_forward_ref(&L, p, x, B, &ws);
    vx_mem m;
    vx_mem_init(&m, g_dev, "test");
    float *dp, *dx;
    vx_stream s;
    vx_qnet *q;
    assert_int_equal(vx_mem_alloc(&m, L.n_params * 4, &dp, &e), VX_OK);
    assert_int_equal(vx_mem_alloc(&m, (size_t)B * D * 4, &dx, &e), VX_OK);
    assert_int_equal(vx_device_upload(g_dev, dp, p, L.n_params * 4, &e), VX_OK);
    assert_int_equal(vx_device_upload(g_dev, dx, x, (size_t)B * D * 4, &e), VX_OK);
    assert_int_equal(vx_stream_create(g_dev, &s, &e), VX_OK);
    assert_int_equal(vx_qnet_create(&L, B, 0, g_dev, &q, &e), VX_OK);
    assert_int_equal(vx_qnet_forward(q, dp, dx, B, s, &e), VX_OK);
    assert_int_equal(vx_stream_sync(g_dev, s, &e), VX_OK);
    assert_int_equal(vx_device_download(g_dev, out, vx_qnet_output(q), nq * 4, &e), VX_OK);
    double err = rel_l2(out, ws.q, nq);
    printf("forward, atoms %d: relative L2 error %.2e; the network reserved %.1f MB\n", atoms, err,
           vx_qnet_reserved(q) / 1e6);
    assert_true(err < 1e-5);
    /* the TF32 switch: tensor-core products round inputs to 10-bit mantissas, so the output
     * moves off the float32 result by ~1e-4..1e-3 relative — more than float32 rounding (the
     * switch took effect), far less than an error in the network would */
    assert_int_equal(vx_qnet_set_tf32(q, 1, &e), VX_OK);
    assert_int_equal(vx_qnet_forward(q, dp, dx, B, s, &e), VX_OK);
    assert_int_equal(vx_stream_sync(g_dev, s, &e), VX_OK);
    assert_int_equal(vx_device_download(g_dev, out, vx_qnet_output(q), nq * 4, &e), VX_OK);
    err = rel_l2(out, ws.q, nq);
    printf("forward with TF32, atoms %d: relative L2 error %.2e\n", atoms, err);
    assert_true(err > 1e-5 && err < 1e-2);
    vx_qnet_free(q);
    vx_stream_destroy(g_dev, s);
    vx_mem_release(&m);
    free(p), free(x), free(out);
    vx_qnet_ws_free(&ws);
}

static void test_forward_matches_cpu(void **state)
{
    (void)state;
    forward_parity(1);
    forward_parity(11);
}

static void test_actions_match_cpu(void **state)
{
    (void)state;
    vx_dqn_cfg dc;
    vx_dqn_cfg_default(&dc);
    dc.batch = 8;
    vx_qnet_cfg qc;
    vx_qnet_cfg_default(&qc);
    vx_dqn d;
    vx_err e;
    assert_int_equal(vx_dqn_create(&dc, &qc, 4, &d, &e), VX_OK);
    const int N = 1000, D = VX_OBS_DIM, A = VX_ACTION_BRANCHES;
    float *x = malloc((size_t)N * D * 4);
    vx_rng g = vx_rng_make(2, 0, 0);
    for (int i = 0; i < N * D; i++) x[i] = (float)vx_rng_normal(&g);
    vx_qnet_ws ws;
    assert_int_equal(vx_qnet_ws_create(&d.L, N, &ws, &e), VX_OK);
    vx_mem m;
    vx_mem_init(&m, g_dev, "test");
    float *dx, *dp;
    double *deps;
    unsigned long long *dstep;
    int32_t *dact, *cpu = malloc((size_t)N * A * 4), *gpu = malloc((size_t)N * A * 4);
    vx_stream s;
    vx_qnet *q;
    assert_int_equal(vx_mem_alloc(&m, (size_t)N * D * 4, &dx, &e), VX_OK);
    assert_int_equal(vx_mem_alloc(&m, d.L.n_params * 4, &dp, &e), VX_OK);
    assert_int_equal(vx_mem_alloc(&m, 8, &deps, &e), VX_OK);
    assert_int_equal(vx_mem_alloc(&m, 8, &dstep, &e), VX_OK);
    assert_int_equal(vx_mem_alloc(&m, (size_t)N * A * 4, &dact, &e), VX_OK);
    assert_int_equal(vx_device_upload(g_dev, dx, x, (size_t)N * D * 4, &e), VX_OK);
    assert_int_equal(vx_device_upload(g_dev, dp, d.online, d.L.n_params * 4, &e), VX_OK);
    assert_int_equal(vx_stream_create(g_dev, &s, &e), VX_OK);
    assert_int_equal(vx_qnet_create(&d.L, N, 0, g_dev, &q, &e), VX_OK);
    assert_int_equal(vx_qnet_forward(q, dp, dx, N, s, &e), VX_OK);
    assert_int_equal(vx_stream_sync(g_dev, s, &e), VX_OK);
    vx_qnet_forward_ref(&d.L, d.online, x, N, &ws);
    double epss[3] = {0.0, 0.3, 1.0};
    for (int k = 0; k < 3; k++) {
        unsigned long long step = 17 + (unsigned long long)k;
        assert_int_equal(vx_device_upload(g_dev, deps, &epss[k], 8, &e), VX_OK);
        assert_int_equal(vx_device_upload(g_dev, dstep, &step, 8, &e), VX_OK);
        assert_int_equal(dqn_act_cuda(&d.shape, vx_qnet_output(q), d.L.out_dim, N, deps, 9, dstep,
                                      dact, (cudaStream_t)s, &e),
                         VX_OK);
        assert_int_equal(vx_stream_sync(g_dev, s, &e), VX_OK);
        assert_int_equal(vx_device_download(g_dev, gpu, dact, (size_t)N * A * 4, &e), VX_OK);
        vx_dqn_act(&d, NULL, &ws, x, N, epss[k], 9, step, cpu, NULL);
        /* the same except where the greedy choice is a near tie under float rounding */
        int differ = 0;
        for (int i = 0; i < N; i++)
            for (int b = 0; b < A; b++) {
                if (cpu[i * A + b] == gpu[i * A + b]) continue;
                const float *row = ws.q + (size_t)i * d.L.out_dim + d.shape.offset[b];
                float best = row[cpu[i * A + b]], other = row[gpu[i * A + b]];
                if (fabsf(best - other) > 1e-4f * (fabsf(best) + 1)) differ++;
            }
        printf("eps %.1f: actions equal but for near ties (%d real differences)\n", epss[k],
               differ);
        assert_int_equal(differ, 0);
    }
    vx_qnet_free(q);
    vx_stream_destroy(g_dev, s);
    vx_mem_release(&m);
    free(x), free(cpu), free(gpu);
    vx_qnet_ws_free(&ws);
    vx_dqn_free(&d);
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
        cmocka_unit_test(test_forward_matches_cpu),
        cmocka_unit_test(test_actions_match_cpu),
    };
    int failed = cmocka_run_group_tests_name("nn_cuda", tests, NULL, NULL);
    vx_device_close(g_dev);
    return failed;
}

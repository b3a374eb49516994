/* test_nn_cuda.c — the GPU forward pass against the CPU one (float32 both, TF32 off: relative
 * L2 error below 1e-5), for the expected-value head and a C51 head; and ε-greedy actions from the
 * GPU equal to vx_dqn_act's, the exploration draws included. Skipped (77) without a GPU. */
#include "helpers.h"
#include "vixen/cuda_util.h"
#include "vixen/dqn.h"
#include "vixen/dqn_cuda.h"
#include "vixen/nn_cuda.h"
#include "vixen/philox.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)

static void forward_parity(int atoms)
{
    vx_qnet_cfg c;
    vx_qnet_cfg_default(&c);
    c.atoms = atoms;
    vx_qnet_layout L;
    vx_err e;
    assert_int_equal(vx_qnet_layout_make(&c, &L, &e), VX_OK);
    const int B = 300;
    float *p = malloc(L.n_params * 4), *x = malloc((size_t)B * 51 * 4);
    vx_qnet_init(&L, 5 + (uint64_t)atoms, p);
    vx_rng g = vx_rng_make(8, 0, 0);
    for (size_t i = 0; i < L.n_params; i++) p[i] += 0.01f * (float)vx_rng_normal(&g); /* biases too */
    for (int i = 0; i < B * 51; i++) x[i] = (float)vx_rng_normal(&g);
    vx_qnet_ws ws;
    assert_int_equal(vx_qnet_ws_create(&L, B, &ws, &e), VX_OK);
    vx_qnet_forward(&L, p, x, B, &ws);
    vx_qnet_cuda *q;
    assert_int_equal(vx_qnet_cuda_create(&L, B, &q, &e), VX_OK);
    float *dx, *out = malloc((size_t)B * L.out_dim * 4);
    CK(cudaMalloc((void **)&dx, (size_t)B * 51 * 4));
    CK(cudaMemcpy(dx, x, (size_t)B * 51 * 4, cudaMemcpyHostToDevice));
    assert_int_equal(vx_qnet_cuda_upload(q, p, 0, &e), VX_OK);
    assert_int_equal(vx_qnet_cuda_forward(q, NULL, dx, B, 0, &e), VX_OK);
    CK(cudaMemcpy(out, vx_qnet_cuda_output(q), (size_t)B * L.out_dim * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0, worst = 0;
    for (size_t i = 0; i < (size_t)B * L.out_dim; i++) {
        double d = (double)out[i] - ws.q[i];
        num += d * d, den += (double)ws.q[i] * ws.q[i];
        worst = fmax(worst, fabs(d));
    }
    printf("forward, atoms %d: relative L2 error %.2e, max abs difference %.2e\n", atoms,
           sqrt(num / den), worst);
    assert_true(sqrt(num / den) < 1e-5);
    /* the TF32 switch: tensor-core products round inputs to 10-bit mantissas, so the output
     * moves off the float32 result by ~1e-4..1e-3 relative — more than float32 rounding (the
     * switch took effect), far less than an error in the network would */
    assert_int_equal(vx_qnet_cuda_set_tf32(q, 1, &e), VX_OK);
    assert_int_equal(vx_qnet_cuda_forward(q, NULL, dx, B, 0, &e), VX_OK);
    CK(cudaMemcpy(out, vx_qnet_cuda_output(q), (size_t)B * L.out_dim * 4, cudaMemcpyDeviceToHost));
    num = den = 0;
    for (size_t i = 0; i < (size_t)B * L.out_dim; i++) {
        double d = (double)out[i] - ws.q[i];
        num += d * d, den += (double)ws.q[i] * ws.q[i];
    }
    printf("forward with TF32, atoms %d: relative L2 error %.2e\n", atoms, sqrt(num / den));
    assert_true(sqrt(num / den) > 1e-5 && sqrt(num / den) < 1e-2);
    cudaFree(dx);
    free(p), free(x), free(out);
    vx_qnet_ws_free(&ws);
    vx_qnet_cuda_free(q);
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
    const int N = 1000;
    float *x = malloc((size_t)N * 51 * 4);
    vx_rng g = vx_rng_make(2, 0, 0);
    for (int i = 0; i < N * 51; i++) x[i] = (float)vx_rng_normal(&g);
    vx_qnet_ws ws;
    assert_int_equal(vx_qnet_ws_create(&d.L, N, &ws, &e), VX_OK);
    vx_qnet_cuda *q;
    assert_int_equal(vx_qnet_cuda_create(&d.L, N, &q, &e), VX_OK);
    assert_int_equal(vx_qnet_cuda_upload(q, d.online, 0, &e), VX_OK);
    float *dx;
    double *deps;
    unsigned long long *dstep;
    int32_t *dact, *cpu = malloc((size_t)N * 12), *gpu = malloc((size_t)N * 12);
    CK(cudaMalloc((void **)&dx, (size_t)N * 51 * 4));
    CK(cudaMalloc((void **)&deps, 8));
    CK(cudaMalloc((void **)&dstep, 8));
    CK(cudaMalloc((void **)&dact, (size_t)N * 12));
    CK(cudaMemcpy(dx, x, (size_t)N * 51 * 4, cudaMemcpyHostToDevice));
    assert_int_equal(vx_qnet_cuda_forward(q, NULL, dx, N, 0, &e), VX_OK);
    vx_qnet_forward(&d.L, d.online, x, N, &ws);
    double epss[3] = {0.0, 0.3, 1.0};
    for (int k = 0; k < 3; k++) {
        unsigned long long step = 17 + (unsigned long long)k;
        CK(cudaMemcpy(deps, &epss[k], 8, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dstep, &step, 8, cudaMemcpyHostToDevice));
        assert_int_equal(vx_dqn_cuda_act(&d.shape, vx_qnet_cuda_output(q), d.L.out_dim, N, deps,
                                         9, dstep, dact, 0, &e),
                         VX_OK);
        CK(cudaMemcpy(gpu, dact, (size_t)N * 12, cudaMemcpyDeviceToHost));
        vx_dqn_act(&d, &ws, x, N, epss[k], 9, step, cpu, NULL);
        /* the same except where the greedy choice is a near tie under float rounding */
        int differ = 0;
        for (int i = 0; i < N; i++)
            for (int b = 0; b < 3; b++) {
                if (cpu[i * 3 + b] == gpu[i * 3 + b]) continue;
                const float *row = ws.q + (size_t)i * d.L.out_dim + d.shape.offset[b];
                float best = row[cpu[i * 3 + b]], other = row[gpu[i * 3 + b]];
                if (fabsf(best - other) > 1e-4f * (fabsf(best) + 1)) differ++;
            }
        printf("eps %.1f: actions equal but for near ties (%d real differences)\n", epss[k], differ);
        assert_int_equal(differ, 0);
    }
    /* the device counter */
    unsigned long long step = 5;
    CK(cudaMemcpy(dstep, &step, 8, cudaMemcpyHostToDevice));
    assert_int_equal(vx_cuda_counter_add(dstep, 3, 0, &e), VX_OK);
    CK(cudaMemcpy(&step, dstep, 8, cudaMemcpyDeviceToHost));
    assert_int_equal(step, 8);
    cudaFree(dx), cudaFree(deps), cudaFree(dstep), cudaFree(dact);
    free(x), free(cpu), free(gpu);
    vx_qnet_ws_free(&ws);
    vx_qnet_cuda_free(q);
    vx_dqn_free(&d);
}

int main(void)
{
    if (vx_cuda_device_count() == 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_matches_cpu),
        cmocka_unit_test(test_actions_match_cpu),
    };
    return cmocka_run_group_tests_name("nn_cuda", tests, NULL, NULL);
}

/* test_env_cuda.c — CPU and GPU environments driven by the same actions from the same seeds give
 * identical observations, rewards, flags, final observations and states, bit for bit, through
 * episode ends and stop-outs. One vx_env on the CPU, one on a CUDA device context; the GPU one is
 * driven on a stream of the test's own. Skipped (77) without a GPU. */
#include "helpers.h"
#include "vixen/cuda_util.h"
#include "vixen/device.h"
#include "vixen/env.h"
#include "vixen/philox.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)
#define A VX_ACTION_BRANCHES

static void test_cpu_and_gpu_step_alike(void **state)
{
    (void)state;
    vx_series s;
    th_synth(&s, 12, 4, 0.2);
    vx_market m;
    vx_err e;
    assert_int_equal(vx_market_from_series(&s, &m, &e), VX_OK);
    vx_env_cfg c;
    vx_env_cfg_default(&c);
    c.seed = 21;
    c.drawdown_limit = 0; /* the default: some stop-outs happen under random trading */
    const size_t N = 512, T = 1000, D = VX_OBS_DIM;
    vx_device_cfg dc;
    vx_device_cfg_default(&dc);
    dc.kind = VX_DEVICE_CUDA;
    vx_device *dev;
    assert_int_equal(vx_device_open(&dc, &dev, &e), VX_OK);
    vx_env *cpu, *gpu;
    assert_int_equal(vx_env_create(&c, &m, VX_SPLIT_TRAIN, N, NULL, &cpu, &e), VX_OK);
    assert_int_equal(vx_env_create(&c, &m, VX_SPLIT_TRAIN, N, dev, &gpu, &e), VX_OK);
    assert_ptr_equal(vx_env_device(gpu), dev);
    assert_memory_equal(vx_env_params_get(cpu), vx_env_params_get(gpu), sizeof(vx_env_params));
    assert_null(vx_env_states(gpu)); /* device memory: read through get_states */
    assert_int_equal(vx_env_reset_to(gpu, 0, vx_env_params_get(gpu)->row_lo, 1, &e), VX_ERR_ARG);
    vx_device_mem dm;
    vx_device_memory(dev, &dm);
    assert_true(vx_env_reserved(gpu) >= N * sizeof(vx_env_state) + m.rows * 4 * sizeof(double));
    assert_int_equal(dm.reserved, vx_env_reserved(gpu)); /* all of it charged to the context */
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    float *obs = malloc(N * D * 4), *fin = malloc(N * D * 4), *rew = malloc(N * 4);
    float *gobs = malloc(N * D * 4), *gfin = malloc(N * D * 4), *grew = malloc(N * 4);
    uint8_t *te = malloc(N), *tr = malloc(N), *gte = malloc(N), *gtr = malloc(N);
    int32_t *act = malloc(N * A * sizeof(int32_t));
    float *d_obs, *d_fin, *d_rew;
    uint8_t *d_te, *d_tr;
    int32_t *d_act;
    CK(cudaMalloc((void **)&d_obs, N * D * 4));
    CK(cudaMalloc((void **)&d_fin, N * D * 4));
    CK(cudaMalloc((void **)&d_rew, N * 4));
    CK(cudaMalloc((void **)&d_te, N));
    CK(cudaMalloc((void **)&d_tr, N));
    CK(cudaMalloc((void **)&d_act, N * A * sizeof(int32_t)));
    /* the first observations */
    assert_int_equal(vx_env_observe(cpu, obs, NULL, &e), VX_OK);
    assert_int_equal(vx_env_observe(gpu, d_obs, st, &e), VX_OK);
    CK(cudaMemcpyAsync(gobs, d_obs, N * D * 4, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    assert_memory_equal(obs, gobs, N * D * 4);
    vx_rng g = vx_rng_make(99, 0, 0);
    size_t ended = 0, stopped = 0;
    for (size_t t = 0; t < T; t++) {
        for (size_t i = 0; i < N; i++) {
            act[i * A] = (int32_t)vx_rng_below(&g, 9);
            act[i * A + 1] = (int32_t)vx_rng_below(&g, 3);
            act[i * A + 2] = (int32_t)vx_rng_below(&g, 3);
        }
        memset(fin, 0, N * D * 4);
        CK(cudaMemsetAsync(d_fin, 0, N * D * 4, st));
        CK(cudaMemcpyAsync(d_act, act, N * A * sizeof(int32_t), cudaMemcpyHostToDevice, st));
        assert_int_equal(vx_env_step(cpu, act, obs, rew, te, tr, fin, NULL, &e), VX_OK);
        assert_int_equal(vx_env_step(gpu, d_act, d_obs, d_rew, d_te, d_tr, d_fin, st, &e), VX_OK);
        CK(cudaMemcpyAsync(gobs, d_obs, N * D * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaMemcpyAsync(gfin, d_fin, N * D * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaMemcpyAsync(grew, d_rew, N * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaMemcpyAsync(gte, d_te, N, cudaMemcpyDeviceToHost, st));
        CK(cudaMemcpyAsync(gtr, d_tr, N, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st)); /* and `act` may be rewritten */
        if (memcmp(rew, grew, N * 4) != 0) fail_msg("step %zu: rewards differ", t);
        if (memcmp(obs, gobs, N * D * 4) != 0) fail_msg("step %zu: observations differ", t);
        assert_memory_equal(te, gte, N);
        assert_memory_equal(tr, gtr, N);
        assert_memory_equal(fin, gfin, N * D * 4);
        for (size_t i = 0; i < N; i++) ended += te[i] | tr[i], stopped += te[i];
    }
    vx_env_state *sg = malloc(N * sizeof *sg);
    assert_int_equal(vx_env_get_states(gpu, sg, &e), VX_OK);
    assert_memory_equal(vx_env_states(cpu), sg, N * sizeof *sg);
    printf("%zu envs x %zu steps: identical; %zu episodes ended (%zu stop-outs)\n", N, T, ended,
           stopped);
    assert_true(ended > N);   /* episodes of 390 steps: every env went through resets */
    assert_true(stopped > 0); /* and the stop-out path ran */
    /* a bad action is counted and leaves that environment alone */
    act[0] = 9;
    CK(cudaMemcpyAsync(d_act, act, N * A * sizeof(int32_t), cudaMemcpyHostToDevice, st));
    assert_int_equal(vx_env_step(gpu, d_act, d_obs, d_rew, d_te, d_tr, NULL, st, &e), VX_OK);
    uint64_t bad;
    assert_int_equal(vx_env_bad_actions(gpu, &bad, &e), VX_OK);
    assert_int_equal(bad, 1);
    vx_env_state s0;
    assert_int_equal(vx_env_get_states(gpu, sg, &e), VX_OK);
    s0 = vx_env_states(cpu)[0];
    assert_memory_equal(&s0, &sg[0], sizeof s0);
    CK(cudaStreamSynchronize(st));
    CK(cudaStreamDestroy(st));
    cudaFree(d_obs), cudaFree(d_fin), cudaFree(d_rew), cudaFree(d_te), cudaFree(d_tr),
        cudaFree(d_act);
    free(obs), free(fin), free(rew), free(gobs), free(gfin), free(grew), free(te), free(tr);
    free(gte), free(gtr), free(act), free(sg);
    vx_env_free(cpu);
    vx_env_free(gpu);
    vx_device_memory(dev, &dm);
    assert_int_equal(dm.reserved, 0);
    vx_device_close(dev);
    vx_market_close(&m);
}

int main(void)
{
    if (vx_cuda_device_count() == 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_and_gpu_step_alike),
    };
    return cmocka_run_group_tests_name("env_cuda", tests, NULL, NULL);
}

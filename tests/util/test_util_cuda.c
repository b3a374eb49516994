/* test_util_cuda.c — the device Philox twin draws exactly what the host draws.
 *
 * Exits 77 (skipped) when no CUDA device is present. Words, uniform floats and bounded integers
 * must be bit-identical; normals go through double log/cos, whose device implementations may
 * differ from glibc in the last ulp, so they are compared with a relative tolerance of 1e-14. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "vixen/cuda_util.h"
#include "vixen/philox.h"

enum { STREAMS = 8192, PER = 64, BELOW = 1000003 };

static void test_device_draws_equal_host(void **state)
{
    (void)state;
    size_t n = (size_t)STREAMS * PER;
    uint32_t *w = malloc(n * 4), *b = malloc(n * 4);
    float *u = malloc(n * 4);
    double *z = malloc(n * 8);
    assert_true(w && b && u && z);
    vx_err e;
    vx_status st = vx_philox_fill_cuda(99, STREAMS, PER, BELOW, w, u, z, b, &e);
    if (st) fprintf(stderr, "%s\n", e.msg);
    assert_int_equal(st, VX_OK);
    size_t bad_w = 0, bad_u = 0, bad_b = 0;
    double worst_z = 0;
    for (size_t s = 0; s < STREAMS; s++) {
        vx_rng rw = vx_rng_make(99, s * 4 + 0, 0), ru = vx_rng_make(99, s * 4 + 1, 0);
        vx_rng rn = vx_rng_make(99, s * 4 + 2, 0), rb = vx_rng_make(99, s * 4 + 3, 0);
        for (size_t k = 0; k < PER; k++) {
            size_t i = s * PER + k;
            bad_w += w[i] != vx_rng_u32(&rw);
            bad_u += u[i] != vx_rng_uniform(&ru);
            bad_b += b[i] != vx_rng_below(&rb, BELOW);
            double h = vx_rng_normal(&rn);
            double rel = fabs(z[i] - h) / fmax(fabs(h), 1e-300);
            if (rel > worst_z) worst_z = rel;
        }
    }
    printf("device vs host over %zu draws each: words %zu differ, uniforms %zu, integers %zu; "
           "normals max relative difference %.3g\n",
           n, bad_w, bad_u, bad_b, worst_z);
    assert_int_equal(bad_w, 0);
    assert_int_equal(bad_u, 0);
    assert_int_equal(bad_b, 0);
    assert_true(worst_z < 1e-14);
    free(w), free(b), free(u), free(z);
}

int main(void)
{
    if (vx_cuda_device_count() == 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    char desc[256];
    vx_err e;
    if (vx_cuda_device_describe(0, desc, sizeof desc, &e) == VX_OK) printf("device: %s\n", desc);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_draws_equal_host),
    };
    return cmocka_run_group_tests_name("util_cuda", tests, NULL, NULL);
}

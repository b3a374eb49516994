/* test_util_cuda.c — the device Philox twin draws exactly what the host draws; a free of a
 * context's device memory waits for that context's streams and for nothing else on the device.
 *
 * Exits 77 (skipped) when no CUDA device is present. Words, uniform floats and bounded integers
 * must be bit-identical; normals go through double log/cos, whose device implementations may
 * differ from glibc in the last ulp, so they are compared with a relative tolerance of 1e-14. */
#define _DEFAULT_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <pthread.h>
#include <unistd.h>

#include "spin_cuda.h"
#include "vixen/cuda_util.h"
#include "vixen/device.h"
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

/* ---- what a free waits for ------------------------------------------------------------------ */

typedef struct {
    vx_device *dev, *a, *b; /* the device and two shares of it: two trials */
} two_shares;

static int shares_setup(void **state)
{
    two_shares *t = calloc(1, sizeof *t);
    vx_device_cfg c;
    vx_device_cfg_default(&c);
    c.kind = VX_DEVICE_CUDA;
    vx_err e;
    if (!t || vx_device_open(&c, &t->dev, &e) ||
        vx_device_share(t->dev, 64 << 20, "a", &t->a, &e) ||
        vx_device_share(t->dev, 64 << 20, "b", &t->b, &e))
        return -1;
    *state = t;
    return 0;
}

static int shares_teardown(void **state)
{
    two_shares *t = *state;
    vx_device_close(t->a);
    vx_device_close(t->b);
    vx_device_close(t->dev);
    free(t);
    return 0;
}

/* A trial's start and end must not stall the others: with cudaFree (which waits for the whole
 * device) b's free returns only when a's kernel gives up, 5 s later, and a's stream is idle. */
static void test_free_does_not_wait_for_another_context(void **state)
{
    two_shares *t = *state;
    if (!spin_device_has_pools(0)) {
        printf("skipped: the device has no memory pools (frees go through cudaFree)\n");
        return;
    }
    spin *busy = spin_start(t->a, NULL, 5.0);
    assert_non_null(busy);
    vx_mem m;
    vx_mem_init(&m, t->b, "test");
    void *p = NULL;
    vx_err e;
    assert_int_equal(vx_mem_alloc(&m, 1 << 20, &p, &e), VX_OK);
    vx_mem_release(&m);
    int still = spin_busy(busy);
    spin_end(busy);
    if (!still) fail_msg("share b's alloc and free waited for share a's kernel to finish");
}

typedef struct {
    vx_mem *m;
    spin *destroy_first; /* destroy this stream, then free */
    volatile int done;
} freer;

static void *free_in_thread(void *arg)
{
    freer *f = arg;
    if (f->destroy_first) spin_destroy_stream(f->destroy_first);
    vx_mem_release(f->m);
    f->done = 1;
    return NULL;
}

/* The memory a context's kernel still writes must outlive it: a free that did not wait for the
 * context's streams (or a stream destroyed without waiting for its work, so that the free no
 * longer sees it) would return at once, the kernel then writing to memory given back. */
static void own_stream_case(two_shares *t, int destroy_stream_first)
{
    vx_mem m;
    vx_mem_init(&m, t->a, "test");
    int *p = NULL;
    vx_err e;
    assert_int_equal(vx_mem_alloc(&m, sizeof *p, &p, &e), VX_OK);
    spin *busy = spin_start(t->a, p, 5.0);
    assert_non_null(busy);
    freer f = {&m, destroy_stream_first ? busy : NULL, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, free_in_thread, &f), 0);
    usleep(300 * 1000);
    int early = f.done;
    spin_release(busy);
    pthread_join(th, NULL);
    spin_end(busy);
    if (early)
        fail_msg("the free of memory a kernel of its context still uses returned before the "
                 "kernel finished%s",
                 destroy_stream_first ? " (its stream destroyed first)" : "");
    printf("a free waited for its own context's kernel%s\n",
           destroy_stream_first ? " (stream destroyed first)" : "");
}

static void test_free_waits_for_its_own_streams(void **state) { own_stream_case(*state, 0); }
static void test_stream_destroy_waits_for_its_work(void **state) { own_stream_case(*state, 1); }

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
        cmocka_unit_test_setup_teardown(test_free_does_not_wait_for_another_context, shares_setup,
                                        shares_teardown),
        cmocka_unit_test_setup_teardown(test_free_waits_for_its_own_streams, shares_setup,
                                        shares_teardown),
        cmocka_unit_test_setup_teardown(test_stream_destroy_waits_for_its_work, shares_setup,
                                        shares_teardown),
    };
    return cmocka_run_group_tests_name("util_cuda", tests, NULL, NULL);
}

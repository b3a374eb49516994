/* test_util_cuda.c — the device Philox twin draws exactly what the host draws; a free of a
 * context's device memory waits for that context's streams and for nothing else on the device;
 * the context's cache hands streams, events and pinned blocks out again only once their last
 * owner's work is done, and a share's memory reserved ahead hands a freed block out again only to
 * that share, once its work is done; a share closed while a block and a stream are held stays
 * open until both go; the launcher thread keeps every stream's order.
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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <unistd.h>

#include "cache_cuda.h"
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
    if (f->m) vx_mem_release(f->m);
    f->done = 1;
    return NULL;
}

/* Runs f (a free, a stream's destruction, or both) in a thread while `busy`'s kernel spins;
 * whether it returned within 300 ms, before the kernel was let go. */
static int returned_before_release(freer *f, spin *busy)
{
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, free_in_thread, f), 0);
    usleep(300 * 1000);
    int early = f->done;
    spin_release(busy);
    pthread_join(th, NULL);
    return early;
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
    int early = returned_before_release(&f, busy);
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

/* ---- the cache: streams, events, pinned blocks --------------------------------------------- */

/* A stream given back comes out again (the cache, not the driver), and only once its work is
 * done: a plain hand-back would give the next owner a stream with the last owner's kernel on it. */
static void test_stream_comes_back_idle(void **state)
{
    two_shares *t = *state;
    spin *busy = spin_start(t->a, NULL, 5.0);
    assert_non_null(busy);
    void *s = spin_stream(busy);
    freer f = {NULL, busy, 0};
    int early = returned_before_release(&f, busy);
    void *again = cache_stream_take(t->b);
    assert_non_null(again);
    int same = again == s, idle = cache_stream_idle(again);
    cache_stream_give(t->b, again);
    spin_end(busy);
    printf("a stream given back by share a %s its kernel; taken by share b: %s, %s\n",
           early ? "without waiting for" : "after", same ? "the same stream" : "another stream",
           idle ? "idle" : "busy");
    assert_false(early);
    assert_true(same);
    assert_true(idle);
}

/* An event given back comes out complete, as a new one is, even while what its last owner
 * recorded is still to come: else the next owner's first wait on it would wait for another
 * trial's work (a cache that handed events out as they were fails here: the kernel still runs). */
static void test_event_comes_back_complete(void **state)
{
    two_shares *t = *state;
    for (int timing = 0; timing < 2; timing++) {
        spin *busy = spin_start(t->a, NULL, 5.0);
        assert_non_null(busy);
        void *ev = cache_event_take(t->a, timing);
        assert_non_null(ev);
        assert_int_equal(cache_event_record_behind(ev, busy), 0);
        assert_false(cache_event_complete(ev)); /* behind the kernel */
        cache_event_give(t->a, ev, timing);
        void *again = cache_event_take(t->b, timing);
        usleep(50 * 1000); /* the reset record's stream has nothing before it */
        int same = again == ev, done = cache_event_complete(again), running = spin_busy(busy);
        cache_event_give(t->b, again, timing);
        spin_end(busy);
        printf("%s event given back behind a running kernel and taken again: %s, %s (the kernel "
               "%s)\n",
               timing ? "a timing" : "an", same ? "the same event" : "another event",
               done ? "complete" : "pending", running ? "still running" : "finished");
        assert_true(same);
        assert_true(running);
        assert_true(done);
    }
}

/* An event last recorded inside a stream capture (the Q-networks' fork and join events are) has
 * no record to wait for: it still goes back to the cache and comes out complete. */
static void test_captured_event_comes_back(void **state)
{
    two_shares *t = *state;
    void *ev = cache_event_take(t->a, 0);
    assert_non_null(ev);
    assert_int_equal(cache_event_record_in_capture(t->a, ev), 0);
    cache_event_give(t->a, ev, 0);
    void *again = cache_event_take(t->b, 0);
    usleep(50 * 1000);
    int same = again == ev, done = cache_event_complete(again);
    cache_event_give(t->b, again, 0);
    printf("an event recorded in a capture, given back and taken again: %s, %s\n",
           same ? "the same event" : "another event", done ? "complete" : "pending");
    assert_true(same);
    assert_true(done);
}

/* Pinned blocks: distinct, aligned, reused for a request of their size, not for one under half
 * of it nor for one larger; a free waits for the owner's copy into the block, as cudaFreeHost
 * (which waited for the whole device) did: else the block's next owner, another trial, would see
 * the copy land. */
static void test_pinned_blocks(void **state)
{
    two_shares *t = *state;
    vx_mem m1, m2;
    vx_mem_init(&m1, t->a, "test pinned 1");
    vx_mem_init(&m2, t->b, "test pinned 2");
    unsigned char *p = NULL, *q = NULL, *r = NULL, *u = NULL, *w = NULL;
    vx_err e;
    assert_int_equal(vx_mem_alloc_host(&m1, 1000, &p, &e), VX_OK);
    assert_int_equal(vx_mem_alloc_host(&m2, 5000, &q, &e), VX_OK);
    assert_true(((uintptr_t)p % 256) == 0 && ((uintptr_t)q % 256) == 0);
    assert_true(p + 1000 <= q || q + 5000 <= p); /* no overlap */
    memset(p, 1, 1000), memset(q, 2, 5000);
    /* the copy behind a kernel of share a's, into p; then a's free of p */
    spin *busy = spin_start(t->a, NULL, 5.0);
    assert_non_null(busy);
    assert_int_equal(cache_copy_behind(busy, p, 1000, 0x5a), 0);
    freer f = {&m1, NULL, 0};
    int early = returned_before_release(&f, busy);
    size_t landed = 0;
    for (int i = 0; i < 1000; i++) landed += p[i] == 0x5a; /* still the cache's: readable */
    vx_mem_init(&m1, t->b, "test pinned 3");
    /* p's block (1,024 B) is idle: under half of it and over it get others, 900 B gets it */
    assert_int_equal(vx_mem_alloc_host(&m1, 100, &u, &e), VX_OK);
    assert_int_equal(vx_mem_alloc_host(&m1, 1100, &w, &e), VX_OK);
    assert_int_equal(vx_mem_alloc_host(&m1, 900, &r, &e), VX_OK);
    printf("pinned: a free behind a pending copy %s; %zu of 1000 bytes landed before it "
           "returned; of the freed 1,000 B block 100 B %s, 1,100 B %s, 900 B %s\n",
           early ? "returned at once" : "waited", landed, u == p ? "reuses it" : "gets another",
           w == p ? "reuses it" : "gets another", r == p ? "reuses it" : "does not reuse it");
    spin_end(busy);
    assert_false(early);
    assert_int_equal(landed, 1000);
    assert_ptr_not_equal(u, p);
    assert_ptr_not_equal(w, p);
    assert_ptr_equal(r, p);
    assert_true(u + 100 <= q || q + 5000 <= u);
    assert_true(w + 1100 <= q || q + 5000 <= w);
    assert_true(w + 1100 <= u || u + 100 <= w);
    vx_mem_release(&m1);
    vx_mem_release(&m2);
}

/* The launcher thread: 8 threads x 200 launches of two graphs that do not commute, each thread
 * on its own stream, give the host's sequence on every stream; every launch went through the
 * launcher, and none after it was switched off. */
/* A share's memory reserved ahead: its blocks come from the piece (the share's count of reserved
 * bytes the same as without it), a freed block serves the share's next request of its size or up
 * to half smaller, and only once the share's kernel still writing it has finished; a request
 * past the piece's rest comes from the driver; a second reservation is refused. */
static void test_reserved_ahead(void **state)
{
    two_shares *t = *state;
    if (!spin_device_has_pools(0)) {
        printf("skipped: the device has no memory pools (nothing is reserved ahead)\n");
        return;
    }
    vx_err e;
    vx_device *sh = NULL;
    assert_int_equal(vx_device_share(t->dev, 64 << 20, "ahead", &sh, &e), VX_OK);
    assert_int_equal(vx_device_reserve_ahead(sh, 4 << 20, &e), VX_OK);
    assert_int_equal(vx_device_reserve_ahead(sh, 4 << 20, &e), VX_ERR_ARG);
    size_t size, carved;
    int used;
    cache_ahead_stats(sh, &size, &carved, &used);
    assert_int_equal(size, 4 << 20);
    assert_int_equal(carved, 0);
    vx_mem m1, m2, m3;
    vx_mem_init(&m1, sh, "ahead 1");
    vx_mem_init(&m2, sh, "ahead 2");
    vx_mem_init(&m3, sh, "ahead 3");
    char *p = NULL, *q = NULL, *r = NULL, *u = NULL, *w = NULL;
    assert_int_equal(vx_mem_alloc(&m1, 1 << 20, &p, &e), VX_OK);
    assert_int_equal(vx_mem_alloc(&m2, 1000, &q, &e), VX_OK);
    cache_ahead_stats(sh, &size, &carved, &used);
    vx_device_mem mm;
    vx_device_memory(sh, &mm);
    printf("reserved ahead: 4 MB; blocks of 1 MB and 1,000 B carved %zu B (%d in use), the "
           "share's count %zu B\n",
           carved, used, mm.reserved);
    assert_int_equal(carved, (1 << 20) + 1024);
    assert_int_equal(used, 2);
    assert_int_equal(mm.reserved, (1 << 20) + 1000);
    assert_true((uintptr_t)p % 256 == 0 && (uintptr_t)q % 256 == 0 && q == p + (1 << 20));
    /* a kernel of the share's writes p's first int once let go; the free must wait for it */
    spin *busy = spin_start(sh, (int *)p, 5.0);
    assert_non_null(busy);
    freer f = {&m1, NULL, 0};
    int early = returned_before_release(&f, busy);
    spin_end(busy);
    assert_int_equal(vx_mem_alloc(&m3, 600000, &r, &e), VX_OK);  /* p's block: at least half */
    assert_int_equal(vx_mem_alloc(&m3, 400000, &u, &e), VX_OK);  /* under half: carved */
    assert_int_equal(vx_mem_alloc(&m3, 3 << 20, &w, &e), VX_OK); /* past the rest: the driver */
    cache_ahead_stats(sh, &size, &carved, &used);
    int in_piece = w >= p && w < p + size;
    printf("reserved ahead: the free of a block its share's kernel writes %s; 600,000 B %s its "
           "block, 400,000 B %s, 3 MB %s; %zu B carved, %d blocks in use\n",
           early ? "returned at once" : "waited", r == p ? "reuses" : "does not reuse",
           u == p ? "reuses it" : "is carved", in_piece ? "from the piece" : "from the driver",
           carved, used);
    assert_false(early);
    assert_ptr_equal(r, p);
    assert_ptr_equal(u, q + 1024);
    assert_false(in_piece);
    assert_int_equal(carved, (1 << 20) + 1024 + 400128);
    assert_int_equal(used, 3);
    /* each block written, then all read again: blocks that overlapped would show it */
    assert_int_equal(cache_fill_check(r, 600000, 0x3c), 0);
    assert_int_equal(cache_fill_check(u, 400000, 0x4d), 0);
    assert_int_equal(cache_fill_check(w, 3 << 20, 0x5e), 0);
    assert_int_equal(cache_fill_check(q, 1000, 0x6f), 0);
    assert_int_equal(cache_check(r, 600000, 0x3c) || cache_check(u, 400000, 0x4d) ||
                         cache_check(w, 3 << 20, 0x5e) || cache_check(q, 1000, 0x6f),
                     0);
    /* charged as without the piece: the share and its parent, block by block */
    vx_device_mem pm;
    vx_device_memory(sh, &mm);
    vx_device_memory(t->dev, &pm);
    assert_int_equal(mm.reserved, 1000 + 600000 + 400000 + (3 << 20));
    assert_int_equal(pm.reserved, mm.reserved);
    vx_mem_release(&m2);
    vx_mem_release(&m3);
    cache_ahead_stats(sh, &size, &carved, &used);
    vx_device_memory(sh, &mm);
    printf("reserved ahead: all freed: %d blocks in use, %zu B carved (the free ends go back)\n",
           used, carved);
    assert_int_equal(used, 0);
    assert_int_equal(carved, 0);
    assert_int_equal(mm.reserved, 0);
    vx_device_close(sh);
}

/* A share closed while a block of its piece and a stream are still held (a caller's bug, warned
 * of) stays open until both go: the block is still the holder's to write and read, and the
 * release then gives the device its bytes back (freed at the close, the release had gone
 * through a freed share). */
static void test_close_while_held(void **state)
{
    two_shares *t = *state;
    vx_err e;
    vx_device *sh = NULL;
    assert_int_equal(vx_device_share(t->dev, 64 << 20, "held", &sh, &e), VX_OK);
    int pools = spin_device_has_pools(0);
    if (pools) assert_int_equal(vx_device_reserve_ahead(sh, 4 << 20, &e), VX_OK);
    vx_mem m;
    vx_mem_init(&m, sh, "held");
    char *p = NULL;
    vx_stream s = NULL;
    assert_int_equal(vx_mem_alloc(&m, 1 << 20, &p, &e), VX_OK);
    assert_int_equal(vx_stream_create(sh, &s, &e), VX_OK);
    vx_device_mem before;
    vx_device_memory(t->dev, &before);
    vx_device_close(sh); /* warns: 1 MB and a stream still held */
    assert_int_equal(cache_fill_check(p, 1 << 20, 0x7a), 0);
    assert_int_equal(vx_stream_sync(sh, s, &e), VX_OK);
    vx_stream_destroy(sh, s);
    assert_int_equal(cache_check(p, 1 << 20, 0x7a), 0);
    vx_mem_release(&m); /* the share closes here */
    vx_device_mem after;
    vx_device_memory(t->dev, &after);
    printf("closed while held: the device's count %zu B before the release, %zu B after (pieces "
           "reserved ahead: %s)\n",
           before.reserved, after.reserved, pools ? "yes" : "no");
    assert_int_equal(before.reserved - after.reserved, 1 << 20);
}

static void test_launcher_keeps_order(void **state)
{
    two_shares *t = *state;
    vx_err e;
    long long before = cache_launcher_launches(t->dev);
    assert_int_equal(vx_device_set_launcher(t->dev, 1, &e), VX_OK);
    int bad = cache_launch_order(t->a, 8, 200);
    long long through = cache_launcher_launches(t->dev) - before;
    assert_int_equal(vx_device_set_launcher(t->dev, 0, &e), VX_OK);
    int bad_direct = cache_launch_order(t->b, 8, 200);
    long long after = cache_launcher_launches(t->dev) - before - through;
    printf("launcher: 8 threads x 200 launches, %d streams out of order, %lld launches through "
           "the launcher; switched off: %d out of order, %lld through it\n",
           bad, through, bad_direct, after);
    assert_int_equal(bad, 0);
    assert_int_equal(through, 8 * 200);
    assert_int_equal(bad_direct, 0);
    assert_int_equal(after, 0);
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
        cmocka_unit_test_setup_teardown(test_free_does_not_wait_for_another_context, shares_setup,
                                        shares_teardown),
        cmocka_unit_test_setup_teardown(test_free_waits_for_its_own_streams, shares_setup,
                                        shares_teardown),
        cmocka_unit_test_setup_teardown(test_stream_destroy_waits_for_its_work, shares_setup,
                                        shares_teardown),
        cmocka_unit_test_setup_teardown(test_stream_comes_back_idle, shares_setup, shares_teardown),
        cmocka_unit_test_setup_teardown(test_event_comes_back_complete, shares_setup,
                                        shares_teardown),
        cmocka_unit_test_setup_teardown(test_captured_event_comes_back, shares_setup,
                                        shares_teardown),
        cmocka_unit_test_setup_teardown(test_pinned_blocks, shares_setup, shares_teardown),
        cmocka_unit_test_setup_teardown(test_reserved_ahead, shares_setup, shares_teardown),
        cmocka_unit_test_setup_teardown(test_close_while_held, shares_setup, shares_teardown),
        cmocka_unit_test_setup_teardown(test_launcher_keeps_order, shares_setup, shares_teardown),
    };
    return cmocka_run_group_tests_name("util_cuda", tests, NULL, NULL);
}

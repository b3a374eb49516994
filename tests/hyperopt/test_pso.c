/* test_pso.c — the search space and the particle swarm (hyperopt.h).
 *
 * The swarm: one move worked out by hand in float64 from the documented draws (so a flipped sign,
 * a swapped pbest/gbest, a missing clamp or a wrong reflection fails); convergence on the sphere
 * and on Rastrigin over several seeds, with the swarm ahead of random search given the same
 * evaluations (a swarm whose moves were wrong would do no better than random); reports in order
 * only; the same positions whatever order generations are drawn in.
 * The space: every type decoded at its bounds and inside, each whole number of an integer range
 * reachable with its share of the coordinate, both categorical encodings, values applied to a
 * config, and every malformed file refused naming the line and the parameter. */
#include "helpers.h"
#include "vixen/dqn.h"
#include "vixen/hyperopt.h"
#include "vixen/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the swarm ------------------------------------------------------------------------------- */

/* The documented draw: stream (kind << 56 | generation << 24 | particle), first block = d, the
 * first two words as a 53-bit uniform. Written out again here from the spec. */
static double spec_draw(uint64_t seed, int kind, int gen, int particle, int d)
{
    uint64_t stream = ((uint64_t)kind << 56) | ((uint64_t)gen << 24) | (uint64_t)particle;
    vx_u32x4 b = vx_philox_block(seed, stream, (uint64_t)d);
    uint64_t hi = b.v[0], lo = b.v[1];
    return (double)(((hi << 32) | lo) >> 11) / 9007199254740992.0;
}

static void test_pso_first_positions_and_one_move_by_hand(void **state)
{
    (void)state;
    vx_pso_cfg c;
    vx_pso_cfg_default(&c);
    c.swarm = 3, c.seed = 77;
    double lo[2] = {-1, 10}, hi[2] = {3, 20};
    vx_pso p;
    vx_err e;
    assert_int_equal(vx_pso_init(&p, &c, 2, lo, hi, &e), VX_OK);
    double x[3][2], v[3][2];
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 2; d++) {
            double r = hi[d] - lo[d];
            x[i][d] = lo[d] + r * spec_draw(77, 1, 0, i, d);
            double target = lo[d] + r * spec_draw(77, 2, 0, i, d);
            v[i][d] = fmax(fmin((target - x[i][d]) / 2, 0.5 * r), -0.5 * r);
            assert_true(vx_pso_position(&p, i)[d] == x[i][d]);
            assert_true(p.v[i * 2 + d] == v[i][d]);
        }
    /* objectives: particle 1 best, particle 2 failed (NaN) */
    double f[3] = {-4.0, 2.5, NAN};
    for (int i = 0; i < 3; i++) assert_int_equal(vx_pso_report(&p, i, f[i], &e), VX_OK);
    assert_int_equal(p.gbest_particle, 1);
    assert_true(p.gbest_f == 2.5);
    assert_int_equal(vx_pso_step(&p, &e), VX_OK);
    const double gb[2] = {x[1][0], x[1][1]};
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 2; d++) {
            double r1 = spec_draw(77, 3, 1, i, d), r2 = spec_draw(77, 4, 1, i, d);
            double cog = i == 2 ? 0 : 1.49618 * r1 * (x[i][d] - x[i][d]); /* pbest = x for 0, 1 */
            double nv = 0.7298 * v[i][d] + cog + 1.49618 * r2 * (gb[d] - x[i][d]);
            double vm = 0.5 * (hi[d] - lo[d]);
            nv = fmax(fmin(nv, vm), -vm);
            double nx = x[i][d] + nv;
            if (nx > hi[d]) nx = 2 * hi[d] - nx, nv = -nv;
            if (nx < lo[d]) nx = 2 * lo[d] - nx, nv = -nv;
            if (fabs(vx_pso_position(&p, i)[d] - nx) > 1e-12 || fabs(p.v[i * 2 + d] - nv) > 1e-12)
                fail_msg("particle %d coordinate %d: x %.17g v %.17g, by hand x %.17g v %.17g", i,
                         d, vx_pso_position(&p, i)[d], p.v[i * 2 + d], nx, nv);
        }
    vx_pso_free(&p);
}

/* A particle pushed through a wall comes back inside, its velocity reversed; every velocity is
 * within vmax of its range. */
static void test_pso_reflects_and_clamps(void **state)
{
    (void)state;
    vx_pso_cfg c;
    vx_pso_cfg_default(&c);
    c.swarm = 2, c.vmax = 0.25;
    double lo[1] = {0}, hi[1] = {1};
    vx_pso p;
    vx_err e;
    assert_int_equal(vx_pso_init(&p, &c, 1, lo, hi, &e), VX_OK);
    p.x[0] = 0.95, p.v[0] = 0.25; /* particle 0 runs into the top wall */
    p.x[1] = 0.05, p.v[1] = -0.25;
    assert_int_equal(vx_pso_report(&p, 0, NAN, &e), VX_OK);
    assert_int_equal(vx_pso_report(&p, 1, NAN, &e), VX_OK);
    /* no finite objective: only inertia moves them: v = 0.7298·0.25 = 0.18245 */
    assert_int_equal(vx_pso_step(&p, &e), VX_OK);
    assert_true(fabs(p.x[0] - (2 * 1 - (0.95 + 0.18245))) < 1e-12);
    assert_true(fabs(p.v[0] + 0.18245) < 1e-12);
    assert_true(fabs(p.x[1] - (0 - (0.05 - 0.18245))) < 1e-12);
    assert_true(fabs(p.v[1] - 0.18245) < 1e-12);
    /* a huge pull is clamped to vmax · range */
    assert_int_equal(vx_pso_report(&p, 0, 1.0, &e), VX_OK);
    assert_int_equal(vx_pso_report(&p, 1, 0.0, &e), VX_OK);
    for (int g = 0; g < 50; g++) {
        for (int i = 0; i < 2; i++) {
            assert_true(fabs(p.v[i]) <= 0.25 + 1e-15);
            assert_true(p.x[i] >= 0 && p.x[i] <= 1);
        }
        if (g) {
            assert_int_equal(vx_pso_report(&p, 0, -(double)g, &e), VX_OK);
            assert_int_equal(vx_pso_report(&p, 1, -(double)g, &e), VX_OK);
        }
        assert_int_equal(vx_pso_step(&p, &e), VX_OK);
    }
    vx_pso_free(&p);
}

static void test_pso_reports_in_order_once(void **state)
{
    (void)state;
    vx_pso_cfg c;
    vx_pso_cfg_default(&c);
    c.swarm = 3;
    double lo[1] = {0}, hi[1] = {1};
    vx_pso p;
    vx_err e;
    assert_int_equal(vx_pso_init(&p, &c, 1, lo, hi, &e), VX_OK);
    assert_int_equal(vx_pso_report(&p, 1, 1, &e), VX_ERR_ARG); /* before particle 0 */
    assert_int_equal(vx_pso_report(&p, 0, 1, &e), VX_OK);
    assert_int_equal(vx_pso_report(&p, 0, 1, &e), VX_ERR_ARG); /* twice */
    assert_int_equal(vx_pso_step(&p, &e), VX_ERR_ARG);         /* particles 1, 2 missing */
    assert_non_null(strstr(e.msg, "particle 1"));
    /* ties go to the earlier particle */
    assert_int_equal(vx_pso_report(&p, 1, 1, &e), VX_OK);
    assert_int_equal(vx_pso_report(&p, 2, 1, &e), VX_OK);
    assert_int_equal(p.gbest_particle, 0);
    vx_pso_free(&p);
    c.swarm = 0;
    assert_int_equal(vx_pso_init(&p, &c, 1, lo, hi, &e), VX_ERR_ARG);
    vx_pso_cfg_default(&c);
    c.vmax = 0;
    assert_int_equal(vx_pso_init(&p, &c, 1, lo, hi, &e), VX_ERR_ARG);
}

/* Two moves by hand with c1 ≠ c2, a small inertia and a vmax that binds at the start: the second
 * move is the first where a personal best differs from the position, so it is what checks the
 * cognitive term's weight (c1, not c2) and its draw (r1 = kind 3, not kind 4). The second
 * generation's reports also check the best updates: a worse result keeps the personal best, an
 * equal one keeps the earlier position (only a strictly better result replaces a best), a better
 * one becomes the swarm's best with its generation. */
static void test_pso_second_move_by_hand(void **state)
{
    (void)state;
    vx_pso_cfg c;
    vx_pso_cfg_default(&c);
    c.swarm = 3, c.seed = 5, c.w = 0.4, c.c1 = 0.5, c.c2 = 2.0, c.vmax = 0.1;
    double lo[2] = {-2, 0}, hi[2] = {2, 100};
    vx_pso p;
    vx_err e;
    assert_int_equal(vx_pso_init(&p, &c, 2, lo, hi, &e), VX_OK);
    double x[3][2], v[3][2];
    int clamped = 0;
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 2; d++) {
            double r = hi[d] - lo[d], vm = 0.1 * r;
            x[i][d] = lo[d] + r * spec_draw(5, 1, 0, i, d);
            double half = (lo[d] + r * spec_draw(5, 2, 0, i, d) - x[i][d]) / 2;
            v[i][d] = fmax(fmin(half, vm), -vm);
            clamped += fabs(half) > vm;
            assert_true(vx_pso_position(&p, i)[d] == x[i][d]);
            assert_true(p.v[i * 2 + d] == v[i][d]); /* within vmax of the range from the start */
        }
    /* the initial clamp must bind somewhere for this to test it (here 5 of the 6 do) */
    assert_true(clamped >= 1);
    /* one move of particle i from (x, v) towards pbest pb and gbest gb, generation g, by hand */
#define MOVE(g, pb, gb)                                                                            \
    for (int i = 0; i < 3; i++)                                                                    \
        for (int d = 0; d < 2; d++) {                                                              \
            double r1 = spec_draw(5, 3, g, i, d), r2 = spec_draw(5, 4, g, i, d);                   \
            double vm = 0.1 * (hi[d] - lo[d]);                                                     \
            double nv =                                                                            \
                0.4 * v[i][d] + 0.5 * r1 * (pb[i][d] - x[i][d]) + 2.0 * r2 * (gb[d] - x[i][d]);    \
            nv = fmax(fmin(nv, vm), -vm);                                                          \
            double nx = x[i][d] + nv;                                                              \
            if (nx > hi[d]) nx = 2 * hi[d] - nx, nv = -nv;                                         \
            if (nx < lo[d]) nx = 2 * lo[d] - nx, nv = -nv;                                         \
            x[i][d] = nx, v[i][d] = nv;                                                            \
        }
    double pb[3][2], gb[2];
    memcpy(pb, x, sizeof pb);
    const double f0[3] = {1.0, 3.0, 2.0};
    for (int i = 0; i < 3; i++) assert_int_equal(vx_pso_report(&p, i, f0[i], &e), VX_OK);
    memcpy(gb, x[1], sizeof gb);
    assert_int_equal(vx_pso_step(&p, &e), VX_OK);
    MOVE(1, pb, gb)
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 2; d++)
            if (fabs(vx_pso_position(&p, i)[d] - x[i][d]) > 1e-12)
                fail_msg("move 1, particle %d coordinate %d: %.17g, by hand %.17g", i, d,
                         vx_pso_position(&p, i)[d], x[i][d]);
    /* generation 1: particle 0 worse, particle 1 equal to its best, particle 2 the new best */
    const double f1[3] = {0.5, 3.0, 5.0};
    for (int i = 0; i < 3; i++) assert_int_equal(vx_pso_report(&p, i, f1[i], &e), VX_OK);
    memcpy(pb[2], x[2], sizeof pb[2]);
    memcpy(gb, x[2], sizeof gb);
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 2; d++) assert_true(p.pbest_x[i * 2 + d] == pb[i][d]);
    assert_true(p.pbest_f[0] == 1.0 && p.pbest_f[1] == 3.0 && p.pbest_f[2] == 5.0);
    assert_int_equal(p.gbest_particle, 2);
    assert_int_equal(p.gbest_generation, 1);
    assert_true(p.gbest_f == 5.0 && p.gbest_x[0] == gb[0] && p.gbest_x[1] == gb[1]);
    assert_int_equal(vx_pso_step(&p, &e), VX_OK);
    MOVE(2, pb, gb)
#undef MOVE
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 2; d++)
            if (fabs(vx_pso_position(&p, i)[d] - x[i][d]) > 1e-12 ||
                fabs(p.v[i * 2 + d] - v[i][d]) > 1e-12)
                fail_msg("move 2, particle %d coordinate %d: x %.17g v %.17g, by hand x %.17g "
                         "v %.17g",
                         i, d, vx_pso_position(&p, i)[d], p.v[i * 2 + d], x[i][d], v[i][d]);
    vx_pso_free(&p);
}

/* No non-finite objective is ever a best: NaN (a failed trial), +inf and -inf leave the personal
 * and the swarm's bests unset. */
static void test_pso_nonfinite_is_never_a_best(void **state)
{
    (void)state;
    vx_pso_cfg c;
    vx_pso_cfg_default(&c);
    c.swarm = 3;
    double lo[1] = {0}, hi[1] = {1};
    vx_pso p;
    vx_err e;
    assert_int_equal(vx_pso_init(&p, &c, 1, lo, hi, &e), VX_OK);
    const double f[3] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(vx_pso_report(&p, i, f[i], &e), VX_OK);
        assert_true(p.pbest_f[i] == -INFINITY);
    }
    assert_int_equal(p.gbest_particle, -1);
    assert_int_equal(p.gbest_generation, -1);
    assert_true(p.gbest_f == -INFINITY);
    vx_pso_free(&p);
}

/* The settings' ranges at their edges: w in [0, 1), c1 and c2 in [0, 4], vmax in (0, 1], 1 to
 * 100,000 particles; and every coordinate's bounds a range (lo < hi, both finite). */
static void test_pso_settings_at_their_edges(void **state)
{
    (void)state;
    struct {
        double w, c1, c2, vmax;
        int swarm, ok;
    } cases[] = {
        {0, 0, 0, 1, 1, 1},
        {0.999, 4, 4, 1e-9, 100000, 1},
        {1, 1.5, 1.5, 0.5, 20, 0},
        {-0.1, 1.5, 1.5, 0.5, 20, 0},
        {0.7, 4.001, 1.5, 0.5, 20, 0},
        {0.7, 1.5, 4.001, 0.5, 20, 0},
        {0.7, -1, 1.5, 0.5, 20, 0},
        {0.7, 1.5, 1.5, 1.001, 20, 0},
        {0.7, 1.5, 1.5, 0.5, 100001, 0},
        {NAN, 1.5, 1.5, 0.5, 20, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        vx_pso_cfg c;
        vx_pso_cfg_default(&c);
        c.w = cases[k].w, c.c1 = cases[k].c1, c.c2 = cases[k].c2, c.vmax = cases[k].vmax;
        c.swarm = cases[k].swarm;
        vx_err e;
        if ((vx_pso_cfg_check(&c, &e) == VX_OK) != cases[k].ok)
            fail_msg("case %zu: w %g c1 %g c2 %g vmax %g swarm %d: want %s", k, c.w, c.c1, c.c2,
                     c.vmax, c.swarm, cases[k].ok ? "accepted" : "refused");
    }
    vx_pso_cfg c;
    vx_pso_cfg_default(&c);
    vx_pso p;
    vx_err e;
    const double lo[][2] = {{0, 1}, {0, 1}, {0, NAN}, {-INFINITY, 0}};
    const double hi[][2] = {{1, 1}, {1, 0.5}, {1, 2}, {1, 1}};
    for (int k = 0; k < 4; k++) /* an empty range, a reversed one, NaN, an infinite bound */
        if (vx_pso_init(&p, &c, 2, lo[k], hi[k], &e) != VX_ERR_ARG)
            fail_msg("bounds case %d accepted", k);
    assert_int_equal(vx_pso_init(&p, &c, 2, lo[0], (const double[]){1, 1.5}, &e), VX_OK);
    vx_pso_free(&p);
}

static double sphere(const double *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

static double rastrigin(const double *x, int n)
{
    double s = 10.0 * n;
    for (int i = 0; i < n; i++) s += x[i] * x[i] - 10 * cos(2 * 3.14159265358979323846 * x[i]);
    return s;
}

/* The best of `gens` generations of a swarm of 20 minimising f over [-5.12, 5.12]^n. */
static double swarm_min(double (*f)(const double *, int), int n, int gens, uint64_t seed)
{
    vx_pso_cfg c;
    vx_pso_cfg_default(&c);
    c.seed = seed;
    double lo[8], hi[8];
    for (int d = 0; d < n; d++) lo[d] = -5.12, hi[d] = 5.12;
    vx_pso p;
    vx_err e;
    assert_int_equal(vx_pso_init(&p, &c, n, lo, hi, &e), VX_OK);
    for (int g = 0; g < gens; g++) {
        for (int i = 0; i < c.swarm; i++)
            assert_int_equal(vx_pso_report(&p, i, -f(vx_pso_position(&p, i), n), &e), VX_OK);
        if (g + 1 < gens) assert_int_equal(vx_pso_step(&p, &e), VX_OK);
    }
    double best = -p.gbest_f;
    vx_pso_free(&p);
    return best;
}

/* Random search with the same evaluations (uniform points of its own Philox stream). */
static double random_min(double (*f)(const double *, int), int n, int evals, uint64_t seed)
{
    vx_rng r = vx_rng_make(seed, 99, 0);
    double best = INFINITY, x[8];
    for (int k = 0; k < evals; k++) {
        for (int d = 0; d < n; d++) x[d] = -5.12 + 10.24 * vx_rng_uniform_double(&r);
        best = fmin(best, f(x, n));
    }
    return best;
}

/* Sphere in 5 dimensions, 100 generations: every one of 5 seeds ends below 1e-5 (random search
 * with the same 2,000 points gets about 3: no swarm with a wrong move gets anywhere near). */
static void test_pso_converges_on_sphere(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 5; seed++) {
        double s = swarm_min(sphere, 5, 100, seed), r = random_min(sphere, 5, 2000, seed);
        print_message("sphere 5-d seed %llu: swarm %.3g, random search %.3g\n",
                      (unsigned long long)seed, s, r);
        assert_true(s < 1e-5);
        assert_true(r > 0.1);
    }
}

/* Rastrigin in 2 dimensions (many local minima 1 apart, global 0 at the origin), 100 generations:
 * the swarm's median over 9 seeds is below 0.1 and below random search's median with the same
 * 2,000 points, and at least 6 of the 9 reach the global basin (< 0.5). */
static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_pso_rastrigin(void **state)
{
    (void)state;
    double s[9], r[9];
    int basin = 0;
    for (int k = 0; k < 9; k++) {
        s[k] = swarm_min(rastrigin, 2, 100, 100 + (uint64_t)k);
        r[k] = random_min(rastrigin, 2, 2000, 100 + (uint64_t)k);
        basin += s[k] < 0.5;
    }
    qsort(s, 9, sizeof *s, by_value);
    qsort(r, 9, sizeof *r, by_value);
    print_message("rastrigin 2-d over 9 seeds: swarm median %.3g (worst %.3g), random median "
                  "%.3g, %d in the global basin\n",
                  s[4], s[8], r[4], basin);
    assert_true(s[4] < 0.1);
    assert_true(s[4] < r[4]);
    assert_true(basin >= 6);
}

/* ---- the space ------------------------------------------------------------------------------- */

static const char *mixed =
    "dqn.lr: {type: logfloat, low: 1.0e-4, high: 1.0e-2}\n"
    "dqn.gamma:\n  type: float\n  low: 0.9\n  high: 0.999\n"
    "dqn.n_step: {type: int, low: 1, high: 5}\n"
    "dqn.batch: {type: logint, low: 32, high: 512}\n"
    "dqn.loss: {type: categorical, values: [mse, huber, c51]}\n"
    "replay.kind: {type: categorical, values: [uniform, proportional, rank], encoding: score}\n";

static void test_space_types_and_bounds(void **state)
{
    (void)state;
    vx_space s;
    vx_err e;
    if (vx_space_load_text(&s, mixed, strlen(mixed), "mixed.yaml", &e)) fail_msg("%s", e.msg);
    assert_int_equal(s.n, 6);
    assert_int_equal(s.dims, 8); /* 5 single coordinates + 3 scores */
    assert_true(fabs(s.lo[0] - log(1e-4)) < 1e-15 && fabs(s.hi[0] - log(1e-2)) < 1e-15);
    assert_true(s.lo[2] == 0.5 && s.hi[2] == 5.5);
    assert_true(s.lo[4] == -0.5 && s.hi[4] == 2.5);
    assert_true(s.lo[5] == 0 && s.hi[7] == 1);
    double x[8];
    char v[128];
    /* each corner of the box decodes to a value inside the bounds */
    for (int corner = 0; corner < 2; corner++) {
        for (int d = 0; d < 8; d++) x[d] = corner ? s.hi[d] : s.lo[d];
        vx_space_value(&s, 0, x, v, sizeof v);
        assert_true(fabs(atof(v) - (corner ? 1e-2 : 1e-4)) < 1e-15);
        /* never outside [low, high]: exp(log(1e-2)) is 0.010000000000000004 in float64, so the
         * top corner must come back as the bound itself */
        assert_true(atof(v) >= 1e-4 && atof(v) <= 1e-2);
        if (corner) assert_string_equal(v, "0.01");
        vx_space_value(&s, 2, x, v, sizeof v);
        assert_string_equal(v, corner ? "5" : "1");
        vx_space_value(&s, 3, x, v, sizeof v);
        assert_string_equal(v, corner ? "512" : "32");
        vx_space_value(&s, 4, x, v, sizeof v);
        assert_string_equal(v, corner ? "c51" : "mse");
    }
    /* integers: each of 1..5 owns an equal fifth of the coordinate */
    int hits[6] = {0};
    for (int k = 0; k < 1000; k++) {
        x[2] = 0.5 + 5.0 * (k + 0.5) / 1000;
        vx_space_value(&s, 2, x, v, sizeof v);
        int n = atoi(v);
        assert_true(n >= 1 && n <= 5);
        hits[n]++;
    }
    for (int n = 1; n <= 5; n++) assert_int_equal(hits[n], 200);
    /* a logint: each whole number owns the unit interval around it on the log scale, so the
     * coordinate runs from log(31.5) to log(512.5), and the middle of n's interval decodes to n
     * (its exp, sqrt(n^2 - 1/4), is just below n: it rounds, not truncates) */
    assert_true(s.lo[3] == log(31.5) && s.hi[3] == log(512.5));
    for (int n = 32; n <= 512; n++) {
        x[3] = (log(n - 0.5) + log(n + 0.5)) / 2;
        vx_space_value(&s, 3, x, v, sizeof v);
        if (atoi(v) != n) fail_msg("logint: the middle of %d's interval decodes to %s", n, v);
    }
    /* log scale: the middle of the lr coordinate is the geometric mean */
    x[0] = (s.lo[0] + s.hi[0]) / 2;
    vx_space_value(&s, 0, x, v, sizeof v);
    assert_true(fabs(atof(v) - 1e-3) < 1e-15);
    /* scores: the highest wins, ties to the first */
    x[5] = 0.2, x[6] = 0.9, x[7] = 0.4;
    vx_space_value(&s, 5, x, v, sizeof v);
    assert_string_equal(v, "proportional");
    x[5] = x[6] = x[7] = 0.5;
    vx_space_value(&s, 5, x, v, sizeof v);
    assert_string_equal(v, "uniform");
    /* applied to a config: every key takes its value */
    vx_train_cfg *c = malloc(sizeof *c);
    vx_train_cfg_default(c);
    assert_int_equal(vx_space_check(&s, c, &e), VX_OK);
    for (int d = 0; d < 8; d++) x[d] = (s.lo[d] + s.hi[d]) / 2;
    x[7] = 1; /* rank */
    assert_int_equal(vx_space_apply(&s, x, c, &e), VX_OK);
    vx_dqn_settings *dq = vx_train_algo_settings(c, "dqn");
    assert_true(fabs(dq->learner.adam.lr - 1e-3) < 1e-15);
    assert_int_equal(dq->learner.n_step, 3);
    assert_int_equal(dq->learner.loss, VX_LOSS_HUBER); /* the middle of three */
    assert_int_equal(dq->replay_kind, VX_REPLAY_RANK);
    free(c);
}

static void test_space_refuses_bad_files(void **state)
{
    (void)state;
    struct {
        const char *text, *want;
    } cases[] = {
        {"dqn.lr: {low: 1, high: 2}\n", "no type"},
        {"dqn.lr: {type: real, low: 1, high: 2}\n", "type 'real'"},
        {"dqn.lr: {type: float, low: 2, high: 1}\n", "low must be below high"},
        {"dqn.lr: {type: float, low: 1}\n", "needs low and high"},
        {"dqn.n_step: {type: int, low: 3, high: 3}\n", "low must be below high"},
        {"dqn.lr: {type: float, low: x, high: 1}\n", "'x' is not a number"},
        {"dqn.lr: {type: logfloat, low: 0, high: 1}\n", "low > 0"},
        {"dqn.n_step: {type: int, low: 1.5, high: 3}\n", "whole"},
        {"dqn.batch: {type: logint, low: 0, high: 3}\n", "low >= 1"},
        {"dqn.loss: {type: categorical, values: [mse]}\n", "at least 2"},
        {"dqn.loss: {type: categorical, values: [mse, mse]}\n", "given twice"},
        {"dqn.loss: {type: categorical, values: [mse, c51], encoding: onehot}\n", "encoding"},
        {"dqn.loss: {type: categorical, values: [mse, c51], low: 1}\n", "not low/high"},
        {"dqn.lr: {type: float, low: 1, high: 2, step: 1}\n", "unknown field 'step'"},
        {"dqn.lr: {type: float, low: 1, high: 2, encoding: score}\n", "categorical"},
        {"train.seed: {type: int, low: 1, high: 9}\n", "not searched"},
        {"split.val: {type: float, low: 0.1, high: 0.2}\n", "not searched"},
        {"env.commission: {type: float, low: 0, high: 2}\n", "not searched"},
        {"dqn.lr: {type: float, low: 1, high: 2}\ndqn.lr: {type: float, low: 1, high: 2}\n",
         "given twice"},
        {"", "no parameters"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        vx_space s;
        vx_err e;
        vx_status st = vx_space_load_text(&s, cases[i].text, strlen(cases[i].text), "s.yaml", &e);
        if (!st || !strstr(e.msg, cases[i].want) || !strstr(e.msg, "s.yaml"))
            fail_msg("case %zu: want '%s', got %s", i, cases[i].want, st ? e.msg : "accepted");
    }
    /* every key that defines the market, the costs or the measured run is refused, and so is
     * any key of the data and split sections */
    static const char *fixed[] = {
        "train.seed", "train.run_dir",      "train.device",   "train.final_test", "env.commission",
        "env.tick",   "env.slippage_ticks", "env.multiplier", "data.synth_days",  "split.test"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        char text[128];
        snprintf(text, sizeof text, "%s: {type: int, low: 1, high: 9}\n", fixed[i]);
        vx_space s;
        vx_err e;
        vx_status st = vx_space_load_text(&s, text, strlen(text), "s.yaml", &e);
        if (!st || !strstr(e.msg, "not searched"))
            fail_msg("%s: want 'not searched', got %s", fixed[i], st ? e.msg : "accepted");
    }
    /* keys the config refuses, found before any trial runs */
    vx_train_cfg *c = malloc(sizeof *c);
    vx_train_cfg_default(c);
    const char *bad[][2] = {
        {"dqn.learning_rate: {type: float, low: 1, high: 2}\n",
         "s.yaml: line 1, field 'dqn.learning_rate': unknown key"},
        {"dqn.lr: {type: float, low: 1e-4, high: 1e-3}\ndqn.gamma: {type: float, low: 0.9, "
         "high: 2}\n",
         "s.yaml: line 2, field 'dqn.gamma': 2 is outside"},
        {"dqn.loss: {type: categorical, values: [mse, l1]}\n",
         "line 1, field 'dqn.loss': 'l1' is not one"}};
    for (int i = 0; i < 3; i++) {
        vx_space s;
        vx_err e;
        assert_int_equal(vx_space_load_text(&s, bad[i][0], strlen(bad[i][0]), "s.yaml", &e), VX_OK);
        vx_status st = vx_space_check(&s, c, &e);
        if (!st || !strstr(e.msg, bad[i][1]))
            fail_msg("check %d: want '%s', got %s", i, bad[i][1], st ? e.msg : "accepted");
    }
    /* a key of another algorithm than the base trains is refused, naming its line, its
     * algorithm and the one the trials train (the replay's keys and a renamed key are the DQN's);
     * it is taken when the base trains that algorithm, or when the space searches train.algo */
    const char *ppo_lr = "dqn.gamma: {type: float, low: 0.9, high: 0.99}\n"
                         "ppo.lr: {type: logfloat, low: 1e-4, high: 1e-3}\n";
    const char *other[][3] = {
        {ppo_lr, "dqn",
         "s.yaml: line 2, field 'ppo.lr': a setting of ppo, but the trials train dqn"},
        {"replay.alpha: {type: float, low: 0.4, high: 0.8}\n", "ppo",
         "line 1, field 'replay.alpha': a setting of dqn, but the trials train ppo"},
        {"train.warmup: {type: int, low: 100, high: 900}\n", "ppo",
         "field 'train.warmup': a setting of dqn"},
        {"ppo.clip: {type: float, low: 0.1, high: 0.3}\n", "ppo", NULL},
        {"dqn.lr: {type: logfloat, low: 1e-4, high: 1e-3}\n"
         "train.algo: {type: categorical, values: [dqn, ppo]}\n"
         "ppo.lr: {type: logfloat, low: 1e-4, high: 1e-3}\n",
         "dqn", NULL},
        {"train.epochs: {type: int, low: 2, high: 9}\n", "ppo", NULL},
    };
    for (int i = 0; i < 6; i++) {
        vx_space s;
        vx_err e;
        vx_train_cfg_default(c);
        assert_int_equal(vx_train_cfg_set(c, "train.algo", other[i][1], "test", &e), VX_OK);
        assert_int_equal(vx_space_load_text(&s, other[i][0], strlen(other[i][0]), "s.yaml", &e),
                         VX_OK);
        vx_status st = vx_space_check(&s, c, &e);
        if (other[i][2] ? !st || !strstr(e.msg, other[i][2]) : st != VX_OK)
            fail_msg("algorithm %d: want %s, got %s", i, other[i][2] ? other[i][2] : "accepted",
                     st ? e.msg : "accepted");
    }
    free(c);
}

/* A parameter whose key begins with another's is a parameter of its own (the fields are matched
 * to a parameter by the whole key, not by a prefix); a logint may start at 1 (its coordinate then
 * starts at log 0.5). */
static void test_space_keys_and_edges(void **state)
{
    (void)state;
    const char *text = "dqn.lr_decay: {type: float, low: 0.1, high: 0.2}\n"
                       "dqn.lr: {type: logint, low: 1, high: 8}\n";
    vx_space s;
    vx_err e;
    if (vx_space_load_text(&s, text, strlen(text), "s.yaml", &e)) fail_msg("%s", e.msg);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.dims, 2);
    assert_string_equal(s.p[0].key, "dqn.lr_decay");
    assert_int_equal(s.p[0].type, VX_PARAM_FLOAT);
    assert_true(s.lo[0] == 0.1 && s.hi[0] == 0.2);
    assert_string_equal(s.p[1].key, "dqn.lr");
    assert_int_equal(s.p[1].type, VX_PARAM_LOGINT);
    assert_true(s.lo[1] == log(0.5) && s.hi[1] == log(8.5));
}

/* A trial keeps its values as "key=value" lines in 2,048 characters: the space is refused when its
 * lines could need all of them, a number counted at 25 characters (written %.17g it takes at most
 * 24: "-1.2345678901234567e-308"), and accepted when they fit with the terminating zero. 23 keys
 * of 62 characters take 23 · (62 + 1 + 25 + 1) = 2,047; 32 of 37 take 32 · (37 + 27) = 2,048. */
static void test_space_params_text_limit(void **state)
{
    (void)state;
    const struct {
        int n, len, ok;
    } cases[] = {{23, 62, 1}, {32, 37, 0}};
    for (int k = 0; k < 2; k++) {
        char text[8192];
        size_t at = 0;
        for (int i = 0; i < cases[k].n; i++) {
            char key[64];
            snprintf(key, sizeof key, "dqn.p%02d", i);
            memset(key + 7, 'x', (size_t)cases[k].len - 7);
            key[cases[k].len] = '\0';
            at += (size_t)snprintf(text + at, sizeof text - at,
                                   "%s: {type: float, low: 0, high: 1}\n", key);
        }
        vx_space s;
        vx_err e;
        vx_status st = vx_space_load_text(&s, text, at, "s.yaml", &e);
        if (cases[k].ok && st) fail_msg("%d keys of %d: %s", cases[k].n, cases[k].len, e.msg);
        if (!cases[k].ok && (!st || !strstr(e.msg, "2047")))
            fail_msg("%d keys of %d: want refused, got %s", cases[k].n, cases[k].len,
                     st ? e.msg : "accepted");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pso_first_positions_and_one_move_by_hand),
        cmocka_unit_test(test_pso_reflects_and_clamps),
        cmocka_unit_test(test_pso_reports_in_order_once),
        cmocka_unit_test(test_pso_second_move_by_hand),
        cmocka_unit_test(test_pso_nonfinite_is_never_a_best),
        cmocka_unit_test(test_pso_settings_at_their_edges),
        cmocka_unit_test(test_pso_converges_on_sphere),
        cmocka_unit_test(test_pso_rastrigin),
        cmocka_unit_test(test_space_types_and_bounds),
        cmocka_unit_test(test_space_refuses_bad_files),
        cmocka_unit_test(test_space_keys_and_edges),
        cmocka_unit_test(test_space_params_text_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

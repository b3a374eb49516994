/* pso.c — the particle swarm of hyperopt.h over a box of coordinates.
 *
 * Draws: stream (kind, generation, particle) of Philox under the study's seed, first block = the
 * coordinate. Kind 1 is the initial position, 2 the initial velocity's target point, 3 and 4 the
 * r1 and r2 of a generation's move — so any particle's numbers in any generation can be drawn
 * without drawing anyone else's, in any order. */
#include "vixen/hyperopt.h"
#include "vixen/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { DRAW_POSITION = 1, DRAW_VELOCITY = 2, DRAW_R1 = 3, DRAW_R2 = 4 };

void vx_pso_cfg_default(vx_pso_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->swarm = 20;
    c->w = 0.7298;
    c->c1 = c->c2 = 1.49618;
    c->vmax = 0.5;
    c->seed = 1;
}

vx_status vx_pso_cfg_check(const vx_pso_cfg *c, vx_err *e)
{
    if (c->swarm < 1 || c->swarm > 100000)
        return vx_err_set(e, VX_ERR_ARG, "swarm size %d is outside 1..100000", c->swarm);
    if (!(c->w >= 0 && c->w < 1))
        return vx_err_set(e, VX_ERR_ARG, "inertia w = %g is outside [0, 1)", c->w);
    if (!(c->c1 >= 0 && c->c1 <= 4 && c->c2 >= 0 && c->c2 <= 4))
        return vx_err_set(e, VX_ERR_ARG, "c1 = %g and c2 = %g must be in [0, 4]", c->c1, c->c2);
    if (!(c->vmax > 0 && c->vmax <= 1))
        return vx_err_set(e, VX_ERR_ARG, "vmax = %g (a fraction of each range) is outside (0, 1]",
                          c->vmax);
    return VX_OK;
}

/* Uniform in [0, 1): coordinate d's draw of (kind, generation, particle). */
static double draw(const vx_pso *p, int kind, int gen, int particle, int d)
{
    uint64_t stream = ((uint64_t)kind << 56) | ((uint64_t)(uint32_t)gen << 24) | (uint32_t)particle;
    vx_rng r = vx_rng_make(p->cfg.seed, stream, (uint64_t)d);
    return vx_rng_uniform_double(&r);
}

static double clamp(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

vx_status vx_pso_init(vx_pso *p, const vx_pso_cfg *cfg, int dims, const double *lo,
                      const double *hi, vx_err *e)
{
    memset(p, 0, sizeof *p);
    vx_status st = vx_pso_cfg_check(cfg, e);
    if (st) return st;
    if (dims < 1 || dims > VX_SPACE_MAX_DIMS)
        return vx_err_set(e, VX_ERR_ARG, "%d coordinates (1..%d)", dims, VX_SPACE_MAX_DIMS);
    for (int d = 0; d < dims; d++)
        if (!(isfinite(lo[d]) && isfinite(hi[d]) && lo[d] < hi[d]))
            return vx_err_set(e, VX_ERR_ARG, "coordinate %d's bounds [%g, %g] are not a range", d,
                              lo[d], hi[d]);
    p->cfg = *cfg;
    p->dims = dims;
    memcpy(p->lo, lo, (size_t)dims * sizeof *lo);
    memcpy(p->hi, hi, (size_t)dims * sizeof *hi);
    size_t n = (size_t)cfg->swarm, nd = n * (size_t)dims;
    p->x = malloc(nd * sizeof *p->x);
    p->v = malloc(nd * sizeof *p->v);
    p->pbest_x = malloc(nd * sizeof *p->pbest_x);
    p->pbest_f = malloc(n * sizeof *p->pbest_f);
    p->gbest_x = malloc((size_t)dims * sizeof *p->gbest_x);
    p->reported = calloc(n, sizeof *p->reported);
    if (!p->x || !p->v || !p->pbest_x || !p->pbest_f || !p->gbest_x || !p->reported) {
        vx_pso_free(p);
        return vx_err_set(e, VX_ERR_NOMEM, "swarm: out of memory");
    }
    for (int i = 0; i < cfg->swarm; i++) {
        for (int d = 0; d < dims; d++) {
            double r = hi[d] - lo[d];
            double x = lo[d] + r * draw(p, DRAW_POSITION, 0, i, d);
            double target = lo[d] + r * draw(p, DRAW_VELOCITY, 0, i, d);
            double vm = cfg->vmax * r;
            p->x[(size_t)i * dims + d] = x;
            p->v[(size_t)i * dims + d] = clamp((target - x) / 2, -vm, vm);
            p->pbest_x[(size_t)i * dims + d] = x;
        }
        p->pbest_f[i] = -INFINITY;
    }
    memcpy(p->gbest_x, p->x, (size_t)dims * sizeof *p->x);
    p->gbest_f = -INFINITY;
    p->gbest_particle = p->gbest_generation = -1;
    return VX_OK;
}

void vx_pso_free(vx_pso *p)
{
    free(p->x), free(p->v), free(p->pbest_x), free(p->pbest_f), free(p->gbest_x);
    free(p->reported);
    p->x = p->v = p->pbest_x = p->pbest_f = p->gbest_x = NULL;
    p->reported = NULL;
}

const double *vx_pso_position(const vx_pso *p, int i) { return p->x + (size_t)i * p->dims; }

vx_status vx_pso_report(vx_pso *p, int i, double f, vx_err *e)
{
    if (i < 0 || i >= p->cfg.swarm)
        return vx_err_set(e, VX_ERR_ARG, "swarm: particle %d of %d", i, p->cfg.swarm);
    if (p->reported[i] || (i > 0 && !p->reported[i - 1]))
        return vx_err_set(e, VX_ERR_ARG,
                          "swarm: particle %d reported %s in generation %d (reports come once "
                          "each, in particle order)",
                          i, p->reported[i] ? "twice" : "before the one ahead of it",
                          p->generation);
    p->reported[i] = 1;
    if (!isfinite(f)) return VX_OK; /* a failed evaluation is never a best */
    const double *x = vx_pso_position(p, i);
    if (f > p->pbest_f[i]) {
        p->pbest_f[i] = f;
        memcpy(p->pbest_x + (size_t)i * p->dims, x, (size_t)p->dims * sizeof *x);
    }
    if (f > p->gbest_f) {
        p->gbest_f = f;
        p->gbest_particle = i;
        p->gbest_generation = p->generation;
        memcpy(p->gbest_x, x, (size_t)p->dims * sizeof *x);
    }
    return VX_OK;
}

/* Back into [lo, hi] by reflection at the wall it crossed, reversing the velocity; a step longer
 * than the range (not possible with vmax ≤ 1, kept for safety) ends clamped. */
static void reflect(double *x, double *v, double lo, double hi)
{
    if (*x > hi) *x = 2 * hi - *x, *v = -*v;
    else if (*x < lo) *x = 2 * lo - *x, *v = -*v;
    *x = clamp(*x, lo, hi);
}

vx_status vx_pso_step(vx_pso *p, vx_err *e)
{
    for (int i = 0; i < p->cfg.swarm; i++)
        if (!p->reported[i])
            return vx_err_set(e, VX_ERR_ARG,
                              "swarm: generation %d moved before particle %d was "
                              "evaluated",
                              p->generation, i);
    int g = p->generation + 1, D = p->dims;
    int have_best = p->gbest_particle >= 0;
    for (int i = 0; i < p->cfg.swarm; i++) {
        double *x = p->x + (size_t)i * D, *v = p->v + (size_t)i * D;
        const double *pb = p->pbest_x + (size_t)i * D;
        for (int d = 0; d < D; d++) {
            double r1 = draw(p, DRAW_R1, g, i, d), r2 = draw(p, DRAW_R2, g, i, d);
            /* a particle without a finite result yet is pulled only by the others' best */
            double cog = isfinite(p->pbest_f[i]) ? p->cfg.c1 * r1 * (pb[d] - x[d]) : 0;
            double soc = have_best ? p->cfg.c2 * r2 * (p->gbest_x[d] - x[d]) : 0;
            double vm = p->cfg.vmax * (p->hi[d] - p->lo[d]);
            v[d] = clamp(p->cfg.w * v[d] + cog + soc, -vm, vm);
            x[d] += v[d];
            reflect(&x[d], &v[d], p->lo[d], p->hi[d]);
        }
        p->reported[i] = 0;
    }
    p->generation = g;
    return VX_OK;
}

/* replay.c — the replay buffer's generic part: default settings and their checks, sizing, the fault
 * hook for tests, and the public functions, each a dispatch through the buffer's operations table
 * (replay_internal.h). The save file, its checks and its checksum, shared by every backend, are in
 * replay_file.c.
 *
 * The implementation comes from the device: vx_device_backend(dev, "replay") — the CUDA backend on
 * a CUDA context of a CUDA build — or, on the CPU, the reference in replay_cpu.c. Nothing here
 * knows whether the build has CUDA (device_open.c registers the backends), so the core library
 * links without it. The settings are checked here, once, before any backend allocates. */
#include "replay_internal.h"

#include <stdlib.h>
#include <string.h>

void vx_replay_cfg_default(vx_replay_cfg *c, vx_replay_kind kind, size_t capacity)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->capacity = capacity;
    c->obs_dim = VX_OBS_DIM;
    c->alpha = kind == VX_REPLAY_RANK ? 0.7 : 0.6;
    c->eps = 1e-6;
    c->rank_refresh = 100;
    c->seed = 1;
}

vx_status vx_replay_cfg_check(const vx_replay_cfg *c, vx_err *e)
{
    if (c->kind != VX_REPLAY_UNIFORM && c->kind != VX_REPLAY_PROPORTIONAL &&
        c->kind != VX_REPLAY_RANK)
        return vx_err_set(e, VX_ERR_ARG, "replay: kind %d is not uniform, proportional or rank",
                          (int)c->kind);
    if (c->capacity < 1 || c->capacity > ((size_t)1 << 31))
        return vx_err_set(e, VX_ERR_ARG, "replay: capacity %zu out of range 1..2^31", c->capacity);
    if (c->obs_dim < 1)
        return vx_err_set(e, VX_ERR_ARG, "replay: obs_dim must be >= 1 (got %d)", c->obs_dim);
    if (!(c->alpha >= 0))
        return vx_err_set(e, VX_ERR_ARG, "replay: alpha must be >= 0 (got %g)", c->alpha);
    if (!(c->eps > 0)) return vx_err_set(e, VX_ERR_ARG, "replay: eps must be > 0 (got %g)", c->eps);
    if (c->rank_refresh < 1)
        return vx_err_set(e, VX_ERR_ARG, "replay: rank_refresh must be >= 1 (got %d)",
                          c->rank_refresh);
    return VX_OK;
}

size_t vx_replay_bytes_per_transition(const vx_replay_cfg *c)
{
    /* two states, the small fields, the raw priority */
    size_t b = 2 * (size_t)c->obs_dim * sizeof(float) + sizeof(vx_slot_meta) + sizeof(double);
    /* sum and min trees: the leaves plus 1/15 of them above, when the capacity fills the leaves */
    if (c->kind == VX_REPLAY_PROPORTIONAL) b += 2 * sizeof(double) * 16 / 15 + 1;
    if (c->kind == VX_REPLAY_RANK) b += sizeof(uint32_t) + sizeof(double); /* order, cdf */
    return b;
}

/* ---- the fault hook -------------------------------------------------------------------------- */

static vx_fault g_fault;

void vx_replay_inject_fault(vx_fault f) { g_fault = f; }

int vx_replay_fault_take(vx_fault f)
{
    if (f == VX_FAULT_NONE || g_fault != f) return 0;
    g_fault = VX_FAULT_NONE;
    return 1;
}

/* ---- dispatch -------------------------------------------------------------------------------- */

vx_status vx_replay_create(const vx_replay_cfg *cfg, vx_device *dev, vx_replay **out, vx_err *e)
{
    *out = NULL;
    vx_status st = vx_replay_cfg_check(cfg, e);
    if (st) return st;
    if (!dev) dev = vx_device_cpu();
    const vx_replay_ops *ops = (const vx_replay_ops *)vx_device_backend(dev, "replay");
    if (!ops && vx_device_kind(dev) != VX_DEVICE_CPU)
        return vx_err_set(e, VX_ERR_UNSUPPORTED, "replay: no replay buffer for %s in this build",
                          vx_device_name(dev));
    if (!ops) ops = &vx_replay_cpu_ops;
    vx_replay *r = calloc(1, sizeof *r);
    if (!r) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory");
    r->ops = ops;
    r->dev = dev;
    r->cfg = *cfg;
    st = ops->create(r, e);
    if (st) {
        free(r);
        return st;
    }
    *out = r;
    return VX_OK;
}

void vx_replay_free(vx_replay *r)
{
    if (!r) return;
    r->ops->free(r);
    free(r);
}

vx_device *vx_replay_device(const vx_replay *r) { return r->dev; }
int vx_replay_on_device(const vx_replay *r) { return r->ops->on_device(r); }
size_t vx_replay_size(const vx_replay *r) { return r->ops->size(r); }
size_t vx_replay_reserved(const vx_replay *r) { return r->ops->reserved(r); }

vx_status vx_replay_insert(vx_replay *r, const vx_transitions *t, size_t n, vx_stream s, vx_err *e)
{
    return r->ops->insert(r, t, n, s, e);
}

vx_status vx_replay_set_beta(vx_replay *r, double beta, vx_stream s, vx_err *e)
{
    /* the importance-sampling exponent, annealed from beta0 to 1 (docs/algorithms.md); a NaN
     * would reach every weight of every batch that follows */
    if (!(beta >= 0 && beta <= 1))
        return vx_err_set(e, VX_ERR_ARG, "replay: beta %g is outside [0, 1]", beta);
    return r->ops->set_beta(r, beta, s, e);
}

vx_status vx_replay_sample(vx_replay *r, size_t B, vx_replay_batch *out, vx_stream s, vx_err *e)
{
    return r->ops->sample(r, B, out, s, e);
}

void vx_replay_follow(vx_replay *r, vx_stream s)
{
    if (r->ops->follow) r->ops->follow(r, s);
}

vx_status vx_replay_rank_refresh(vx_replay *r, vx_stream s, vx_err *e)
{
    return r->ops->rank_refresh(r, s, e);
}

vx_status vx_replay_update(vx_replay *r, const uint32_t *index, const uint32_t *gen,
                           const float *td, size_t n, vx_stream s, vx_err *e)
{
    return r->ops->update(r, index, gen, td, n, s, e);
}

vx_status vx_replay_stats_get(vx_replay *r, vx_replay_stats *out, double *total_recomputed,
                              vx_err *e)
{
    return r->ops->stats(r, out, total_recomputed, e);
}

vx_status vx_replay_prob(vx_replay *r, size_t i, double *p, vx_err *e)
{
    return r->ops->prob(r, i, p, e);
}

vx_status vx_replay_save(vx_replay *r, const char *path, vx_err *e)
{
    return r->ops->save(r, path, e);
}

vx_status vx_replay_load(vx_replay *r, const char *path, vx_err *e)
{
    return r->ops->load(r, path, e);
}

vx_status vx_replay_snap(vx_replay *r, vx_stream s, vx_err *e) { return r->ops->snap(r, s, e); }

vx_status vx_replay_snap_reserve(vx_replay *r, vx_err *e) { return r->ops->snap_reserve(r, e); }

vx_status vx_replay_snap_save(vx_replay *r, const char *path, vx_err *e)
{
    return r->ops->snap_save(r, path, e);
}

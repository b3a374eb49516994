/* env_cpu.c — the CPU backend of the environment (env_internal.h): the reference every other
 * backend is tested against.
 *
 * A plain loop over environments calling vx_env_step_one from env_dynamics.h; the CUDA backend
 * launches one thread per environment on the same function. Parameters and first states arrive
 * finished from env.c, so this file only holds the state array — charged to the CPU context's
 * account like any device memory, so a budgeted CPU context counts it — and steps it. Calls run
 * to completion before they return: streams are ignored and sync has nothing to wait for. The
 * two CPU-only calls (vx_env_states, vx_env_reset_to) live here because only this backend's states
 * are host memory the caller may read in place. */
#include "env_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    vx_env_params p; /* host pointers into the market */
    size_t n;
    vx_env_state *s; /* N */
    vx_mem mem;
} env_cpu;

static void cpu_free(void *impl)
{
    env_cpu *c = impl;
    if (!c) return;
    vx_mem_release(&c->mem);
    free(c);
}

static vx_status cpu_create(const vx_env_params *p, const vx_market *m, const vx_env_state *init,
                            size_t n, vx_device *dev, void **impl, vx_stream *setup, vx_err *e)
{
    (void)m;
    *impl = NULL;
    *setup = NULL;
    env_cpu *c = calloc(1, sizeof *c);
    if (!c) return vx_err_set(e, VX_ERR_NOMEM, "env: out of memory");
    vx_mem_init(&c->mem, dev, "environments");
    vx_status st = vx_mem_alloc(&c->mem, n * sizeof *c->s, &c->s, e);
    if (st) {
        cpu_free(c);
        return st;
    }
    c->p = *p;
    c->n = n;
    memcpy(c->s, init, n * sizeof *c->s);
    *impl = c;
    return VX_OK;
}

static vx_status cpu_observe(void *impl, float *obs, vx_stream s, vx_err *e)
{
    (void)s, (void)e;
    env_cpu *c = impl;
    for (size_t i = 0; i < c->n; i++) vx_env_observe_one(&c->p, &c->s[i], obs + i * VX_OBS_DIM);
    return VX_OK;
}

/* All actions are checked before any environment steps: an error leaves every state as it was. */
static vx_status cpu_step(void *impl, const int32_t *actions, float *obs, float *rewards,
                          uint8_t *terminated, uint8_t *truncated, float *final_obs, vx_stream s,
                          vx_err *e)
{
    (void)s;
    static const int32_t limits[VX_ACTION_BRANCHES] = {VX_EXPOSURE_LEVELS, VX_ORDER_TYPES,
                                                       VX_URGENCY_LEVELS};
    static const char *branch[VX_ACTION_BRANCHES] = {"exposure", "order_type", "urgency"};
    env_cpu *c = impl;
    for (size_t i = 0; i < c->n; i++)
        for (int b = 0; b < VX_ACTION_BRANCHES; b++) {
            int32_t a = actions[i * VX_ACTION_BRANCHES + (size_t)b];
            if (a < 0 || a >= limits[b])
                return vx_err_line(e, VX_ERR_ARG, "env.step", -1, branch[b],
                                   "environment %zu: action %d out of range 0..%d", i, a,
                                   limits[b] - 1);
        }
    for (size_t i = 0; i < c->n; i++) {
        const int32_t *a = actions + i * VX_ACTION_BRANCHES;
        vx_env_step_one(&c->p, &c->s[i], i, a[0], a[1], a[2], obs + i * VX_OBS_DIM, &rewards[i],
                        &terminated[i], &truncated[i],
                        final_obs ? final_obs + i * VX_OBS_DIM : NULL);
    }
    return VX_OK;
}

static vx_status cpu_copy_states(void *impl, vx_env_state *host, vx_stream s, vx_err *e)
{
    (void)s, (void)e;
    env_cpu *c = impl;
    memcpy(host, c->s, c->n * sizeof *c->s);
    return VX_OK;
}

static vx_status cpu_load_states(void *impl, const vx_env_state *host, vx_stream s, vx_err *e)
{
    (void)s, (void)e;
    env_cpu *c = impl;
    memcpy(c->s, host, c->n * sizeof *c->s);
    return VX_OK;
}

static vx_status cpu_sync(void *impl, vx_stream s, vx_err *e)
{
    (void)impl, (void)s, (void)e;
    return VX_OK;
}

static vx_status cpu_bad_actions(void *impl, uint64_t *count, vx_stream s, vx_err *e)
{
    (void)impl, (void)s, (void)e;
    *count = 0; /* refused with an error instead */
    return VX_OK;
}

static size_t cpu_reserved(const void *impl) { return ((const env_cpu *)impl)->mem.bytes; }

const vx_env_backend vx_env_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .free = cpu_free,
    .observe = cpu_observe,
    .step = cpu_step,
    .copy_states = cpu_copy_states,
    .load_states = cpu_load_states,
    .sync = cpu_sync,
    .bad_actions = cpu_bad_actions,
    .reserved = cpu_reserved,
};

/* ---- the CPU reference only ------------------------------------------------------------------ */

const vx_env_state *vx_env_states(const vx_env *env)
{
    return env->ops == &vx_env_cpu_ops ? ((const env_cpu *)env->impl)->s : NULL;
}

vx_status vx_env_reset_to(vx_env *env, size_t i, int64_t row, int32_t steps, vx_err *e)
{
    if (env->ops != &vx_env_cpu_ops)
        return vx_err_set(e, VX_ERR_ARG, "env: reset_to needs CPU environments (these are on %s)",
                          vx_device_name(env->dev));
    env_cpu *c = env->impl;
    const vx_env_params *p = &c->p;
    if (i >= c->n || steps < 1 || steps > p->episode_len || row < p->row_lo ||
        row + steps > p->row_hi - 1)
        return vx_err_set(e, VX_ERR_ARG,
                          "env: cannot start environment %zu at row %lld for %d steps (split rows "
                          "%lld..%lld)",
                          i, (long long)row, steps, (long long)p->row_lo, (long long)p->row_hi);
    vx_env_reset(p, &c->s[i], i);
    c->s[i].row = row;
    /* the step count is not observed: starting it late only moves the truncation earlier */
    c->s[i].steps = p->episode_len - steps;
    return VX_OK;
}

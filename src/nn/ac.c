/* ac.c — the actor-critic's layout (offsets, names), initialisation, and the float CPU reference
 * of its forward and backward passes (ac_impl.h with VX_T = float). */
#include "vixen/actor_critic.h"
#include "vixen/env_dynamics.h"
#include "vixen/philox.h"
#include "vixen/ppo_math.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VX_T float
#define VX_GEMM cblas_sgemm
#define VX_NAME(x) acf_##x
#include "ac_impl.h"

#define AC_INIT_STREAM 0x41430000ull /* "AC": Philox streams of the initial weights */

void vx_ac_cfg_default(vx_ac_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->in_dim = VX_OBS_DIM;
    c->n_trunk = 2;
    c->trunk[0] = c->trunk[1] = 160;
    c->shared = 0;
    c->n_logits = VX_PPO_LOGITS;
}

vx_status vx_ac_layout_make(const vx_ac_cfg *c, vx_ac_layout *L, vx_err *e)
{
    memset(L, 0, sizeof *L);
    if (c->in_dim < 1 || c->n_trunk < 0 || c->n_trunk > VX_AC_MAX_TRUNK || c->n_logits < 1)
        return vx_err_set(e, VX_ERR_ARG, "actor-critic: invalid shape (in %d, trunk layers %d)",
                          c->in_dim, c->n_trunk);
    for (int l = 0; l < c->n_trunk; l++)
        if (c->trunk[l] < 1 || c->trunk[l] > 65536)
            return vx_err_set(e, VX_ERR_ARG, "actor-critic: trunk layer %d width %d", l,
                              c->trunk[l]);
    L->cfg = *c;
    size_t off = 0, weights = 0;
    int in = c->in_dim;
    for (int l = 0; l < c->n_trunk; l++) in = c->trunk[l];
    int top = in; /* the trunks' output width */
    in = c->in_dim;
    for (int l = 0; l < c->n_trunk; l++) {
        L->pi[l] = vx_dense_place(&off, &weights, in, c->trunk[l]);
        in = c->trunk[l];
    }
    L->pi_head = vx_dense_place(&off, &weights, top, c->n_logits);
    in = c->in_dim;
    for (int l = 0; l < c->n_trunk && !c->shared; l++) {
        L->v[l] = vx_dense_place(&off, &weights, in, c->trunk[l]);
        in = c->trunk[l];
    }
    L->v_head = vx_dense_place(&off, &weights, top, 1);
    L->n_params = vx_dense_align(off);
    L->n_weights = weights;
    L->n_tensors = 2 * ((size_t)c->n_trunk * (c->shared ? 1 : 2) + 2);
    return VX_OK;
}

/* The dense layers in parameter order, with their names and init gains. */
static int dense_list(const vx_ac_layout *L, const vx_dense **d, char names[][32], double *gain)
{
    int k = 0, n = L->cfg.n_trunk;
    for (int l = 0; l < n; l++, k++) {
        snprintf(names[k], 32, "pi.%d", l);
        d[k] = &L->pi[l], gain[k] = sqrt(2.0);
    }
    snprintf(names[k], 32, "pi_head");
    d[k] = &L->pi_head, gain[k++] = 0.01;
    for (int l = 0; l < n && !L->cfg.shared; l++, k++) {
        snprintf(names[k], 32, "v.%d", l);
        d[k] = &L->v[l], gain[k] = sqrt(2.0);
    }
    snprintf(names[k], 32, "v_head");
    d[k] = &L->v_head, gain[k++] = 1.0;
    return k;
}

void vx_ac_tensor(const vx_ac_layout *L, size_t i, char *name, size_t name_n, size_t *offset,
                  int *rows, int *cols)
{
    const vx_dense *d[2 * VX_AC_MAX_TRUNK + 2];
    char names[2 * VX_AC_MAX_TRUNK + 2][32];
    double gain[2 * VX_AC_MAX_TRUNK + 2];
    dense_list(L, d, names, gain);
    const vx_dense *x = d[i / 2];
    if (i % 2 == 0) {
        snprintf(name, name_n, "%s.weight", names[i / 2]);
        *offset = x->w, *rows = x->in, *cols = x->out;
    } else {
        snprintf(name, name_n, "%s.bias", names[i / 2]);
        *offset = x->b, *rows = 1, *cols = x->out;
    }
}

void vx_ac_init(const vx_ac_layout *L, uint64_t seed, float *params)
{
    const vx_dense *d[2 * VX_AC_MAX_TRUNK + 2];
    char names[2 * VX_AC_MAX_TRUNK + 2][32];
    double gain[2 * VX_AC_MAX_TRUNK + 2];
    int n = dense_list(L, d, names, gain);
    memset(params, 0, L->n_params * sizeof(float)); /* biases and padding */
    for (int k = 0; k < n; k++) { /* N(0, gain² / in): He for the ReLU layers at √2 */
        vx_rng r = vx_rng_make(seed, AC_INIT_STREAM + (uint64_t)k, 0);
        double sd = gain[k] / sqrt((double)d[k]->in);
        float *w = params + d[k]->w;
        for (size_t i = 0; i < (size_t)d[k]->in * d[k]->out; i++)
            w[i] = (float)(vx_rng_normal(&r) * sd);
    }
}

vx_status vx_ac_ws_create(const vx_ac_layout *L, int B, vx_ac_ws *ws, vx_err *e)
{
    memset(ws, 0, sizeof *ws);
    const vx_ac_cfg *c = &L->cfg;
    size_t W = (size_t)c->in_dim, total = 0;
    for (int l = 0; l < c->n_trunk; l++) {
        total += (size_t)B * c->trunk[l] * (c->shared ? 1 : 2);
        if ((size_t)c->trunk[l] > W) W = (size_t)c->trunk[l];
    }
    total += (size_t)B * (c->n_logits + 1) + 3 * (size_t)B * W;
    float *p = calloc(total, sizeof *p);
    if (!p) return vx_err_set(e, VX_ERR_NOMEM, "actor-critic: out of memory for batch %d", B);
    ws->mem_ = p;
    ws->max_batch = B;
    for (int l = 0; l < c->n_trunk; l++) ws->pi[l] = p, p += (size_t)B * c->trunk[l];
    for (int l = 0; l < c->n_trunk && !c->shared; l++) ws->v[l] = p, p += (size_t)B * c->trunk[l];
    ws->logits = p, p += (size_t)B * c->n_logits;
    ws->value = p, p += (size_t)B;
    ws->scratch = p;
    return VX_OK;
}

void vx_ac_ws_free(vx_ac_ws *ws)
{
    free(ws->mem_);
    memset(ws, 0, sizeof *ws);
}

static acf_ac_acts acts_of(vx_ac_ws *ws)
{
    acf_ac_acts a;
    memcpy(a.pi, ws->pi, sizeof a.pi);
    memcpy(a.v, ws->v, sizeof a.v);
    a.logits = ws->logits, a.value = ws->value, a.scratch = ws->scratch;
    return a;
}

void vx_ac_forward_ref(const vx_ac_layout *L, const float *params, const float *x, int B,
                       vx_ac_ws *ws)
{
    /* The workspace holds max_batch rows; more would write past it (a caller's bug, which the
     * sanitised Debug build of the tests catches here rather than as a heap overflow). */
    assert(B >= 0 && B <= ws->max_batch);
    acf_ac_acts a = acts_of(ws);
    acf_ac_forward(L, params, x, B, &a);
}

void vx_ac_backward_ref(const vx_ac_layout *L, const float *params, const float *x, int B,
                        const float *dlogits, const float *dvalue, vx_ac_ws *ws, float *grads)
{
    assert(B >= 0 && B <= ws->max_batch);
    acf_ac_acts a = acts_of(ws);
    acf_ac_backward(L, params, x, B, dlogits, dvalue, &a, grads);
}

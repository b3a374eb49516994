/* ac_impl.h — forward and backward of the actor-critic (actor_critic.h) over the dense layer
 * (dense_impl.h), written once for any element type: ac.c includes it with VX_T = float, the
 * tests with VX_T = double for finite-difference gradient checks of the very same code. The
 * includer defines VX_T, VX_GEMM and VX_NAME as dense_impl.h says. */
#include "dense_impl.h"

typedef struct {
    VX_T *pi[VX_AC_MAX_TRUNK], *v[VX_AC_MAX_TRUNK];
    VX_T *logits, *value;
    VX_T *scratch; /* 3 × B × max(H, D) */
} VX_NAME(ac_acts);

static const VX_T *VX_NAME(ac_trunk_fwd)(const vx_dense *layers, int n, const VX_T *p,
                                         const VX_T *x, int B, VX_T **out)
{
    const VX_T *h = x;
    for (int l = 0; l < n; l++) {
        VX_NAME(dense_fwd)(&layers[l], p, h, B, out[l], 1);
        h = out[l];
    }
    return h;
}

static void VX_NAME(ac_forward)(const vx_ac_layout *L, const VX_T *p, const VX_T *x, int B,
                                VX_NAME(ac_acts) * s)
{
    const vx_ac_cfg *c = &L->cfg;
    const VX_T *h = VX_NAME(ac_trunk_fwd)(L->pi, c->n_trunk, p, x, B, s->pi);
    VX_NAME(dense_fwd)(&L->pi_head, p, h, B, s->logits, 0);
    const VX_T *g = c->shared ? h : VX_NAME(ac_trunk_fwd)(L->v, c->n_trunk, p, x, B, s->v);
    VX_NAME(dense_fwd)(&L->v_head, p, g, B, s->value, 0);
}

/* Backward through a trunk from dh (B × H_top at its output; used as scratch). */
static void VX_NAME(ac_trunk_bwd)(const vx_dense *layers, int n, VX_T *const *acts, const VX_T *p,
                                  const VX_T *x, int B, VX_T *dh, VX_T *dh2, VX_T *g)
{
    for (int l = n - 1; l >= 0; l--) {
        VX_NAME(relu_mask)(dh, acts[l], (size_t)B * layers[l].out);
        const VX_T *in = l ? acts[l - 1] : x;
        VX_NAME(dense_bwd)(&layers[l], p, in, B, dh, g, l ? dh2 : NULL, 0);
        VX_T *t = dh;
        dh = dh2;
        dh2 = t;
    }
}

static void VX_NAME(ac_backward)(const vx_ac_layout *L, const VX_T *p, const VX_T *x, int B,
                                 const VX_T *dlogits, const VX_T *dvalue, VX_NAME(ac_acts) * s,
                                 VX_T *g)
{
    const vx_ac_cfg *c = &L->cfg;
    int n = c->n_trunk, W = c->in_dim;
    for (int l = 0; l < n; l++) W = c->trunk[l] > W ? c->trunk[l] : W;
    VX_T *dh = s->scratch, *dh2 = dh + (size_t)B * W, *dg = dh2 + (size_t)B * W;
    const VX_T *top_pi = n ? s->pi[n - 1] : x;
    /* the heads: dlogits → W_pi, b_pi, dh; dvalue → W_v, b_v, and (shared) into dh as well */
    VX_NAME(dense_bwd)(&L->pi_head, p, top_pi, B, dlogits, g, n ? dh : NULL, 0);
    if (c->shared) {
        VX_NAME(dense_bwd)(&L->v_head, p, top_pi, B, dvalue, g, n ? dh : NULL, 1);
        if (n) VX_NAME(ac_trunk_bwd)(L->pi, n, s->pi, p, x, B, dh, dh2, g);
        return;
    }
    const VX_T *top_v = n ? s->v[n - 1] : x;
    VX_NAME(dense_bwd)(&L->v_head, p, top_v, B, dvalue, g, n ? dg : NULL, 0);
    if (n) {
        VX_NAME(ac_trunk_bwd)(L->pi, n, s->pi, p, x, B, dh, dh2, g);
        VX_NAME(ac_trunk_bwd)(L->v, n, s->v, p, x, B, dg, dh, g);
    }
}

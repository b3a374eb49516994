/* qnet_impl.h — forward and backward of the branching dueling Q-network over the dense layer
 * (dense_impl.h), written once for any element type.
 *
 * Included by qnet_cpu.c with VX_T = float (the network vixen trains) and by the tests with
 * VX_T = double (so gradients can be checked against central finite differences in float64 on
 * the very same code). The includer defines VX_T, VX_GEMM and VX_NAME as dense_impl.h says.
 * Shapes as in include/vixen/nn.h. Row-major throughout; weights [in × out]. */
#include "dense_impl.h"

typedef struct {
    VX_T *trunk[VX_QNET_MAX_TRUNK];
    VX_T *v1, *v;
    VX_T *a1[VX_QNET_MAX_BRANCHES];
    VX_T *a[VX_QNET_MAX_BRANCHES];
    VX_T *q;
    VX_T *scratch; /* B × (Z + max n_d·Z + Hh + 2·max H) */
} VX_NAME(acts);

static void VX_NAME(forward)(const vx_qnet_layout *L, const VX_T *p, const VX_T *x, int B,
                             VX_NAME(acts) * s)
{
    const vx_qnet_cfg *c = &L->cfg;
    const VX_T *h = x;
    for (int l = 0; l < c->n_trunk; l++) {
        VX_NAME(dense_fwd)(&L->trunk[l], p, h, B, s->trunk[l], 1);
        h = s->trunk[l];
    }
    VX_NAME(dense_fwd)(&L->value1, p, h, B, s->v1, 1);
    VX_NAME(dense_fwd)(&L->value2, p, s->v1, B, s->v, 0);
    int Z = c->atoms;
    for (int d = 0; d < c->n_branches; d++) {
        VX_NAME(dense_fwd)(&L->adv1[d], p, h, B, s->a1[d], 1);
        VX_NAME(dense_fwd)(&L->adv2[d], p, s->a1[d], B, s->a[d], 0);
        int n = c->branch[d];
        for (int r = 0; r < B; r++) {
            const VX_T *a = s->a[d] + (size_t)r * n * Z, *v = s->v + (size_t)r * Z;
            VX_T *q = s->q + (size_t)r * L->out_dim + L->out_offset[d];
            for (int z = 0; z < Z; z++) {
                VX_T mean = 0;
                for (int k = 0; k < n; k++) mean += a[k * Z + z];
                mean /= n;
                for (int k = 0; k < n; k++) q[k * Z + z] = v[z] + a[k * Z + z] - mean;
            }
        }
    }
}

static void VX_NAME(backward)(const vx_qnet_layout *L, const VX_T *p, const VX_T *x, int B,
                              const VX_T *dq, VX_NAME(acts) * s, VX_T *g)
{
    const vx_qnet_cfg *c = &L->cfg;
    int Z = c->atoms, Hh = c->head_hidden, Hmax = 0, Amax = 0;
    for (int l = 0; l < c->n_trunk; l++) Hmax = c->trunk[l] > Hmax ? c->trunk[l] : Hmax;
    if (Hmax < c->in_dim) Hmax = c->in_dim; /* as vx_qnet_ws_create sized it */
    for (int d = 0; d < c->n_branches; d++)
        Amax = c->branch[d] * Z > Amax ? c->branch[d] * Z : Amax;
    VX_T *dv = s->scratch;              /* B × Z */
    VX_T *da = dv + (size_t)B * Z;      /* B × n_d·Z */
    VX_T *dhid = da + (size_t)B * Amax; /* B × Hh */
    VX_T *dh = dhid + (size_t)B * Hh;   /* B × H: gradient at the trunk's output */
    VX_T *dh2 = dh + (size_t)B * Hmax;  /* B × H: ping-pong for the trunk */
    const VX_T *top = c->n_trunk ? s->trunk[c->n_trunk - 1] : x;
    /* dueling aggregation: dV = Σ_d Σ_a dQ, dA_d[a] = dQ_d[a] − mean_a' dQ_d[a'] */
    memset(dv, 0, sizeof(VX_T) * (size_t)B * Z);
    for (int d = 0; d < c->n_branches; d++) {
        int n = c->branch[d];
        for (int r = 0; r < B; r++) {
            const VX_T *gq = dq + (size_t)r * L->out_dim + L->out_offset[d];
            VX_T *ga = da + (size_t)r * n * Z;
            for (int z = 0; z < Z; z++) {
                VX_T sum = 0;
                for (int k = 0; k < n; k++) sum += gq[k * Z + z];
                dv[(size_t)r * Z + z] += sum;
                for (int k = 0; k < n; k++) ga[k * Z + z] = gq[k * Z + z] - sum / n;
            }
        }
        VX_NAME(dense_bwd)(&L->adv2[d], p, s->a1[d], B, da, g, dhid, 0);
        VX_NAME(relu_mask)(dhid, s->a1[d], (size_t)B * Hh);
        VX_NAME(dense_bwd)(&L->adv1[d], p, top, B, dhid, g, dh, d > 0);
    }
    VX_NAME(dense_bwd)(&L->value2, p, s->v1, B, dv, g, dhid, 0);
    VX_NAME(relu_mask)(dhid, s->v1, (size_t)B * Hh);
    VX_NAME(dense_bwd)(&L->value1, p, top, B, dhid, g, dh, c->n_branches > 0);
    /* BDQ: the trunk receives the heads' gradient scaled by 1 / (branches + 1) */
    int H = c->n_trunk ? c->trunk[c->n_trunk - 1] : c->in_dim;
    VX_T scale = (VX_T)1 / (VX_T)(c->n_branches + 1);
    for (size_t i = 0; i < (size_t)B * H; i++) dh[i] *= scale;
    for (int l = c->n_trunk - 1; l >= 0; l--) {
        VX_NAME(relu_mask)(dh, s->trunk[l], (size_t)B * c->trunk[l]);
        const VX_T *in = l ? s->trunk[l - 1] : x;
        VX_NAME(dense_bwd)(&L->trunk[l], p, in, B, dh, g, l ? dh2 : NULL, 0);
        VX_T *t = dh;
        dh = dh2;
        dh2 = t;
    }
}

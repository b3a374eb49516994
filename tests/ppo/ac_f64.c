/* ac_f64.c — ac_impl.h compiled with double, the same code the float network runs. */
#include "ac_f64.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VX_T double
#define VX_GEMM cblas_dgemm
#define VX_NAME(x) ac64_##x
#include "../../src/nn/ac_impl.h"

static double *alloc_acts(const vx_ac_layout *L, int B, ac64_ac_acts *a)
{
    const vx_ac_cfg *c = &L->cfg;
    size_t W = (size_t)c->in_dim, total = 0;
    for (int l = 0; l < c->n_trunk; l++) {
        total += 2 * (size_t)B * c->trunk[l];
        if ((size_t)c->trunk[l] > W) W = (size_t)c->trunk[l];
    }
    total += (size_t)B * (c->n_logits + 1) + 3 * (size_t)B * W;
    double *m = calloc(total, sizeof *m), *p = m;
    memset(a, 0, sizeof *a);
    for (int l = 0; l < c->n_trunk; l++) a->pi[l] = p, p += (size_t)B * c->trunk[l];
    for (int l = 0; l < c->n_trunk; l++) a->v[l] = p, p += (size_t)B * c->trunk[l];
    a->logits = p, p += (size_t)B * c->n_logits;
    a->value = p, p += (size_t)B;
    a->scratch = p;
    return m;
}

void ac64_forward(const vx_ac_layout *L, const double *p, const double *x, int B, double *logits,
                  double *value)
{
    ac64_ac_acts a;
    double *m = alloc_acts(L, B, &a);
    ac64_ac_forward(L, p, x, B, &a);
    memcpy(logits, a.logits, (size_t)B * L->cfg.n_logits * sizeof *logits);
    memcpy(value, a.value, (size_t)B * sizeof *value);
    free(m);
}

void ac64_backward(const vx_ac_layout *L, const double *p, const double *x, int B,
                   const double *dlogits, const double *dvalue, double *grads)
{
    ac64_ac_acts a;
    double *m = alloc_acts(L, B, &a);
    ac64_ac_forward(L, p, x, B, &a);
    ac64_ac_backward(L, p, x, B, dlogits, dvalue, &a, grads);
    free(m);
}

/* Pre-activations of each hidden layer, recomputed without the ReLU. */
double ac64_min_preact(const vx_ac_layout *L, const double *p, const double *x, int B)
{
    ac64_ac_acts a;
    double *m = alloc_acts(L, B, &a), best = INFINITY;
    ac64_ac_forward(L, p, x, B, &a);
    const vx_ac_cfg *c = &L->cfg;
    for (int t = 0; t < (c->shared ? 1 : 2); t++) {
        const vx_dense *layers = t ? L->v : L->pi;
        double *const *acts = t ? a.v : a.pi;
        for (int l = 0; l < c->n_trunk; l++) {
            const double *in = l ? acts[l - 1] : x;
            double *pre = calloc((size_t)B * layers[l].out, sizeof *pre);
            ac64_dense_fwd(&layers[l], p, in, B, pre, 0);
            for (size_t i = 0; i < (size_t)B * layers[l].out; i++)
                best = fabs(pre[i]) < best ? fabs(pre[i]) : best;
            free(pre);
        }
    }
    free(m);
    return best;
}

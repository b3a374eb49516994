/* qnet_f64.c — qnet_impl.h compiled with double, the same code the float network runs. */
#include "qnet_f64.h"

#include <stdlib.h>

#define VX_T double
#define VX_GEMM cblas_dgemm
#define VX_NAME(x) qnet64_##x
#include "../../src/nn/qnet_impl.h"

static double *alloc_acts(const vx_qnet_layout *L, int B, qnet64_acts *a)
{
    const vx_qnet_cfg *c = &L->cfg;
    size_t total = 0, Hmax = (size_t)c->in_dim, Amax = 0;
    for (int l = 0; l < c->n_trunk; l++) {
        total += (size_t)B * c->trunk[l];
        if ((size_t)c->trunk[l] > Hmax) Hmax = (size_t)c->trunk[l];
    }
    for (int d = 0; d < c->n_branches; d++) {
        size_t n = (size_t)c->branch[d] * c->atoms;
        total += (size_t)B * (c->head_hidden + n);
        if (n > Amax) Amax = n;
    }
    total += (size_t)B * (c->head_hidden + c->atoms + L->out_dim);
    total += (size_t)B * (c->atoms + Amax + c->head_hidden + 2 * Hmax);
    double *m = calloc(total, sizeof *m), *p = m;
    for (int l = 0; l < c->n_trunk; l++) a->trunk[l] = p, p += (size_t)B * c->trunk[l];
    a->v1 = p, p += (size_t)B * c->head_hidden;
    a->v = p, p += (size_t)B * c->atoms;
    for (int d = 0; d < c->n_branches; d++) {
        a->a1[d] = p, p += (size_t)B * c->head_hidden;
        a->a[d] = p, p += (size_t)B * c->branch[d] * c->atoms;
    }
    a->q = p, p += (size_t)B * L->out_dim;
    a->scratch = p;
    return m;
}

void qnet64_run_forward(const vx_qnet_layout *L, const double *p, const double *x, int B, double *q)
{
    qnet64_acts a;
    double *m = alloc_acts(L, B, &a);
    qnet64_forward(L, p, x, B, &a);
    for (size_t i = 0; i < (size_t)B * L->out_dim; i++) q[i] = a.q[i];
    free(m);
}

void qnet64_run_backward(const vx_qnet_layout *L, const double *p, const double *x, int B,
                         const double *dq, double *grads)
{
    qnet64_acts a;
    double *m = alloc_acts(L, B, &a);
    qnet64_forward(L, p, x, B, &a);
    qnet64_backward(L, p, x, B, dq, &a, grads);
    free(m);
}

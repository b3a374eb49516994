/* qnet_cpu.c — the CPU side of the nn layer: the Q-network's float32 reference (forward and
 * backward from qnet_impl.h over OpenBLAS, activations in a vx_qnet_ws), the CPU backends of the
 * network and the optimizer objects (nn_internal.h), global-norm clipping and Adam.
 *
 * The element-wise parts (bias, ReLU, dueling mean) are plain loops; they are a few percent of
 * the time at the default widths. */
#include "vixen/optim_math.h"
#include "nn_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VX_T float
#define VX_GEMM cblas_sgemm
#define VX_NAME(x) qnet32_##x
#include "qnet_impl.h"

vx_status vx_qnet_ws_create(const vx_qnet_layout *L, int max_batch, vx_qnet_ws *ws, vx_err *e)
{
    memset(ws, 0, sizeof *ws);
    const vx_qnet_cfg *c = &L->cfg;
    size_t B = (size_t)max_batch, Hmax = 0, Amax = 0, total = 0;
    for (int l = 0; l < c->n_trunk; l++) {
        total += B * (size_t)c->trunk[l];
        Hmax = (size_t)c->trunk[l] > Hmax ? (size_t)c->trunk[l] : Hmax;
    }
    if (Hmax < (size_t)c->in_dim) Hmax = (size_t)c->in_dim;
    total += B * (size_t)c->head_hidden + B * (size_t)c->atoms;
    for (int d = 0; d < c->n_branches; d++) {
        size_t a = (size_t)c->branch[d] * (size_t)c->atoms;
        total += B * (size_t)c->head_hidden + B * a;
        Amax = a > Amax ? a : Amax;
    }
    total += B * (size_t)L->out_dim;
    size_t scratch = B * ((size_t)c->atoms + Amax + (size_t)c->head_hidden + 2 * Hmax);
    ws->mem_ = vx_alloc_big((total + scratch) * sizeof(float));
    if (!ws->mem_)
        return vx_err_set(e, VX_ERR_NOMEM, "qnet: cannot allocate activations for batch %d",
                          max_batch);
    float *p = ws->mem_;
    for (int l = 0; l < c->n_trunk; l++) ws->trunk[l] = p, p += B * (size_t)c->trunk[l];
    ws->v1 = p, p += B * (size_t)c->head_hidden;
    ws->v = p, p += B * (size_t)c->atoms;
    for (int d = 0; d < c->n_branches; d++) {
        ws->a1[d] = p, p += B * (size_t)c->head_hidden;
        ws->a[d] = p, p += B * (size_t)c->branch[d] * (size_t)c->atoms;
    }
    ws->q = p, p += B * (size_t)L->out_dim;
    ws->scratch = p;
    ws->max_batch = max_batch;
    return VX_OK;
}

void vx_qnet_ws_free(vx_qnet_ws *ws)
{
    free(ws->mem_);
    memset(ws, 0, sizeof *ws);
}

static qnet32_acts acts_of(vx_qnet_ws *ws)
{
    qnet32_acts a;
    memcpy(a.trunk, ws->trunk, sizeof a.trunk);
    a.v1 = ws->v1, a.v = ws->v;
    memcpy(a.a1, ws->a1, sizeof a.a1);
    memcpy(a.a, ws->a, sizeof a.a);
    a.q = ws->q, a.scratch = ws->scratch;
    return a;
}

void vx_qnet_forward_ref(const vx_qnet_layout *L, const float *params, const float *x, int B,
                         vx_qnet_ws *ws)
{
    qnet32_acts a = acts_of(ws);
    qnet32_forward(L, params, x, B, &a);
}

void vx_qnet_backward_ref(const vx_qnet_layout *L, const float *params, const float *x, int B,
                          const float *dq, vx_qnet_ws *ws, float *grads)
{
    qnet32_acts a = acts_of(ws);
    qnet32_backward(L, params, x, B, dq, &a, grads);
}

double vx_grad_clip(float *g, size_t n, double max_norm)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    double norm = sqrt(s);
    float k;
    if (vx_clip_scale(max_norm, norm, &k))
        for (size_t i = 0; i < n; i++) g[i] *= k;
    return norm;
}

void vx_adam_cfg_default(vx_adam_cfg *c)
{
    c->lr = 1e-4;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->weight_decay = 0;
}

vx_status vx_adam_cfg_check(const vx_adam_cfg *cfg, vx_err *e)
{
    if (!(cfg->lr > 0) || cfg->beta1 < 0 || cfg->beta1 >= 1 || cfg->beta2 < 0 || cfg->beta2 >= 1 ||
        !(cfg->eps > 0) || cfg->weight_decay < 0)
        return vx_err_set(e, VX_ERR_ARG, "adam: need lr > 0, betas in [0, 1), eps > 0, decay >= 0");
    return VX_OK;
}

vx_status vx_adam_create(const vx_adam_cfg *cfg, size_t n, vx_adam *a, vx_err *e)
{
    memset(a, 0, sizeof *a);
    vx_status st = vx_adam_cfg_check(cfg, e);
    if (st) return st;
    a->m = calloc(n ? n : 1, sizeof *a->m);
    a->v = calloc(n ? n : 1, sizeof *a->v);
    if (!a->m || !a->v) {
        vx_adam_free(a);
        return vx_err_set(e, VX_ERR_NOMEM, "adam: out of memory for %zu parameters", n);
    }
    a->cfg = *cfg;
    a->n = n;
    return VX_OK;
}

void vx_adam_free(vx_adam *a)
{
    free(a->m);
    free(a->v);
    memset(a, 0, sizeof *a);
}

void vx_adam_step(vx_adam *a, float *p, const float *g)
{
    a->t++;
    const vx_adam_cfg *c = &a->cfg;
    vx_adam_step_k k = vx_adam_constants(c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, a->t);
    for (size_t i = 0; i < a->n; i++) vx_adam_elem(&k, &p[i], &a->m[i], &a->v[i], g[i]);
}

/* ---- the network object on the CPU
 * ---------------------------------------------------------------- */

typedef struct {
    vx_qnet_layout L;
    int K;             /* members: one workspace each, run one after another */
    vx_qnet_strides S; /* where each member's tensors start */
    vx_qnet_ws *ws;
    float *q; /* a group's outputs at the member stride (NULL for one: ws[0].q) */
} cpu_qnet;

static void cq_free(void *impl)
{
    cpu_qnet *q = impl;
    for (int k = 0; q->ws && k < q->K; k++) vx_qnet_ws_free(&q->ws[k]);
    free(q->ws), free(q->q);
    free(q);
}

static vx_status cq_create(const vx_qnet_layout *L, int K, int max_batch, int backward_batch,
                           vx_device *dev, void **impl, vx_err *e)
{
    (void)backward_batch, (void)dev; /* every activation is kept: backward fits any forward */
    cpu_qnet *q = calloc(1, sizeof *q);
    if (!q) return vx_err_set(e, VX_ERR_NOMEM, "qnet: out of memory");
    q->L = *L, q->K = K;
    q->S = vx_qnet_member_strides(L, max_batch);
    q->ws = calloc((size_t)K, sizeof *q->ws);
    if (K > 1) q->q = calloc((size_t)K * q->S.q, sizeof(float));
    vx_status st =
        !q->ws || (K > 1 && !q->q) ? vx_err_set(e, VX_ERR_NOMEM, "qnet: out of memory") : VX_OK;
    for (int k = 0; k < K && !st; k++) st = vx_qnet_ws_create(L, max_batch, &q->ws[k], e);
    if (st) {
        cq_free(q);
        return st;
    }
    *impl = q;
    return VX_OK;
}

static vx_status cq_set_tf32(void *impl, int on, vx_err *e)
{
    (void)impl, (void)on, (void)e;
    return VX_OK;
}

/* A group's members one after another: the reference a GPU's batched group is held to. */
static vx_status cq_forward(void *impl, const float *params, const float *x, int B, vx_stream s,
                            vx_err *e)
{
    (void)s, (void)e;
    cpu_qnet *q = impl;
    for (int k = 0; k < q->K; k++) {
        vx_qnet_forward_ref(&q->L, params + k * q->S.params, x + k * q->S.x, B, &q->ws[k]);
        if (q->q)
            memcpy(q->q + k * q->S.q, q->ws[k].q, (size_t)B * (size_t)q->L.out_dim * sizeof(float));
    }
    return VX_OK;
}

static const float *cq_output(const void *impl)
{
    const cpu_qnet *q = impl;
    return q->q ? q->q : q->ws[0].q;
}

static vx_status cq_backward(void *impl, const float *params, const float *x, int B,
                             const float *dq, float *grads, vx_stream s, vx_err *e)
{
    (void)s, (void)e;
    cpu_qnet *q = impl;
    for (int k = 0; k < q->K; k++)
        vx_qnet_backward_ref(&q->L, params + k * q->S.params, x + k * q->S.x, B, dq + k * q->S.q,
                             &q->ws[k], grads + k * q->S.params);
    return VX_OK;
}

static size_t cq_reserved(const void *impl)
{
    (void)impl;
    return 0;
}

const vx_qnet_ops vx_qnet_cpu_ops = {cq_create, cq_free,     cq_set_tf32, cq_forward,
                                     cq_output, cq_backward, cq_reserved};

/* ---- the optimizer object on the CPU: vx_grad_clip then vx_adam_step, member by member ------- */

typedef struct {
    int K;
    size_t stride;
    vx_adam *adam;    /* one per member, n floats each */
    double *max_norm; /* per member */
    double *norm;     /* per member: the last step's norm before clipping */
    const double *lr; /* vx_optim_set_controls: K rates in host memory here, or NULL */
    const int *skip;  /* K flags, or NULL */
} cpu_optim;

static void co_free(void *impl)
{
    cpu_optim *o = impl;
    for (int k = 0; o->adam && k < o->K; k++) vx_adam_free(&o->adam[k]);
    free(o->adam), free(o->max_norm), free(o->norm);
    free(o);
}

static vx_status co_create(const vx_adam_cfg *cfg, const double *max_norm, size_t n, size_t stride,
                           int K, vx_device *dev, void **impl, vx_err *e)
{
    (void)dev;
    cpu_optim *o = calloc(1, sizeof *o);
    if (!o) return vx_err_set(e, VX_ERR_NOMEM, "optim: out of memory");
    o->K = K, o->stride = stride;
    o->adam = calloc((size_t)K, sizeof *o->adam);
    o->max_norm = malloc((size_t)K * sizeof *o->max_norm);
    o->norm = calloc((size_t)K, sizeof *o->norm);
    vx_status st = !o->adam || !o->max_norm || !o->norm
                       ? vx_err_set(e, VX_ERR_NOMEM, "optim: out of memory")
                       : VX_OK;
    for (int k = 0; k < K && !st; k++) {
        st = vx_adam_create(&cfg[k], n, &o->adam[k], e);
        o->max_norm[k] = max_norm[k];
    }
    if (st) {
        co_free(o);
        return st;
    }
    *impl = o;
    return VX_OK;
}

static vx_status co_step(void *impl, float *params, float *grads, vx_stream s, vx_err *e)
{
    (void)s, (void)e;
    cpu_optim *o = impl;
    for (int k = 0; k < o->K; k++) {
        if (o->skip && o->skip[k]) continue;
        vx_adam *a = &o->adam[k];
        if (o->lr) a->cfg.lr = o->lr[k];
        float *g = grads + k * o->stride;
        o->norm[k] = vx_grad_clip(g, a->n, o->max_norm[k]);
        vx_adam_step(a, params + k * o->stride, g);
    }
    return VX_OK;
}

static const double *co_norm(const void *impl) { return ((const cpu_optim *)impl)->norm; }

static void co_set_controls(void *impl, const double *lr, const int *skip)
{
    cpu_optim *o = impl;
    o->lr = lr, o->skip = skip;
}

static vx_status co_copy_state(void *impl, float *m, float *v, int64_t *t, vx_stream s, vx_err *e)
{
    (void)s, (void)e;
    cpu_optim *o = impl;
    for (int k = 0; k < o->K; k++) {
        const vx_adam *a = &o->adam[k];
        memcpy(m + k * o->stride, a->m, a->n * sizeof(float));
        memcpy(v + k * o->stride, a->v, a->n * sizeof(float));
        t[k] = a->t;
    }
    return VX_OK;
}

static vx_status co_load_state(void *impl, const float *m, const float *v, const int64_t *t,
                               vx_stream s, vx_err *e)
{
    (void)s, (void)e;
    cpu_optim *o = impl;
    for (int k = 0; k < o->K; k++) {
        vx_adam *a = &o->adam[k];
        memcpy(a->m, m + k * o->stride, a->n * sizeof(float));
        memcpy(a->v, v + k * o->stride, a->n * sizeof(float));
        a->t = t[k];
    }
    return VX_OK;
}

static size_t co_reserved(const void *impl)
{
    (void)impl;
    return 0;
}

const vx_optim_ops vx_optim_cpu_ops = {co_create,     co_free,         co_step,
                                       co_norm,       co_set_controls, co_copy_state,
                                       co_load_state, co_reserved,     NULL};

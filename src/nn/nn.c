/* nn.c — the nn layer's device-independent part: the Q-network's layout (offsets, names,
 * alignment) and initialisation, and the objects (dense context, network, optimizer) that find
 * their implementation through the device (nn_internal.h) and dispatch to it. */
#include "vixen/env_dynamics.h"
#include "vixen/philox.h"
#include "nn_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NN_INIT_STREAM 0x4e4e0000ull /* "NN": Philox streams of the initial weights */

void vx_qnet_cfg_default(vx_qnet_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->in_dim = VX_OBS_DIM;
    c->n_trunk = 2;
    c->trunk[0] = c->trunk[1] = 256;
    c->head_hidden = 64;
    c->n_branches = VX_ACTION_BRANCHES;
    c->branch[0] = VX_EXPOSURE_LEVELS;
    c->branch[1] = VX_ORDER_TYPES;
    c->branch[2] = VX_URGENCY_LEVELS;
    c->atoms = 1;
}

size_t vx_dense_align(size_t off) { return (off + 3) & ~(size_t)3; }

vx_dense vx_dense_place(size_t *off, size_t *weights, int in, int out)
{
    vx_dense d;
    d.w = vx_dense_align(*off);
    d.b = vx_dense_align(d.w + (size_t)in * out);
    d.in = in, d.out = out;
    *off = d.b + (size_t)out;
    *weights += (size_t)in * out + (size_t)out;
    return d;
}

vx_status vx_qnet_layout_make(const vx_qnet_cfg *c, vx_qnet_layout *L, vx_err *e)
{
    memset(L, 0, sizeof *L);
    if (c->in_dim < 1 || c->n_trunk < 0 || c->n_trunk > VX_QNET_MAX_TRUNK || c->head_hidden < 1 ||
        c->n_branches < 1 || c->n_branches > VX_QNET_MAX_BRANCHES || c->atoms < 1 ||
        c->atoms > 1024)
        return vx_err_set(e, VX_ERR_ARG,
                          "qnet: invalid shape (in %d, trunk layers %d, head %d, "
                          "branches %d, atoms %d)",
                          c->in_dim, c->n_trunk, c->head_hidden, c->n_branches, c->atoms);
    for (int l = 0; l < c->n_trunk; l++)
        if (c->trunk[l] < 1 || c->trunk[l] > 65536)
            return vx_err_set(e, VX_ERR_ARG, "qnet: trunk layer %d width %d", l, c->trunk[l]);
    for (int d = 0; d < c->n_branches; d++)
        if (c->branch[d] < 1 || c->branch[d] > 4096)
            return vx_err_set(e, VX_ERR_ARG, "qnet: branch %d has %d actions", d, c->branch[d]);
    L->cfg = *c;
    size_t off = 0, weights = 0;
    int in = c->in_dim;
    for (int l = 0; l < c->n_trunk; l++) {
        L->trunk[l] = vx_dense_place(&off, &weights, in, c->trunk[l]);
        in = c->trunk[l];
    }
    L->value1 = vx_dense_place(&off, &weights, in, c->head_hidden);
    L->value2 = vx_dense_place(&off, &weights, c->head_hidden, c->atoms);
    int out = 0;
    for (int d = 0; d < c->n_branches; d++) {
        L->adv1[d] = vx_dense_place(&off, &weights, in, c->head_hidden);
        L->adv2[d] = vx_dense_place(&off, &weights, c->head_hidden, c->branch[d] * c->atoms);
        L->out_offset[d] = out;
        out += c->branch[d] * c->atoms;
    }
    L->out_dim = out;
    L->n_params = vx_dense_align(off);
    L->n_weights = weights;
    L->n_tensors = 2 * ((size_t)c->n_trunk + 2 + 2 * (size_t)c->n_branches);
    return VX_OK;
}

/* The dense layers in parameter order. */
static int dense_list(const vx_qnet_layout *L, const vx_dense **out, char names[][32])
{
    int k = 0;
    for (int l = 0; l < L->cfg.n_trunk; l++) {
        snprintf(names[k], 32, "trunk.%d", l);
        out[k++] = &L->trunk[l];
    }
    snprintf(names[k], 32, "value.0");
    out[k++] = &L->value1;
    snprintf(names[k], 32, "value.1");
    out[k++] = &L->value2;
    for (int d = 0; d < L->cfg.n_branches; d++) {
        snprintf(names[k], 32, "branch.%d.0", d);
        out[k++] = &L->adv1[d];
        snprintf(names[k], 32, "branch.%d.1", d);
        out[k++] = &L->adv2[d];
    }
    return k;
}

void vx_qnet_tensor(const vx_qnet_layout *L, size_t i, char *name, size_t name_n, size_t *offset,
                    int *rows, int *cols)
{
    const vx_dense *d[2 * VX_QNET_MAX_TRUNK + 4 * VX_QNET_MAX_BRANCHES];
    char names[2 * VX_QNET_MAX_TRUNK + 4 * VX_QNET_MAX_BRANCHES][32];
    dense_list(L, d, names);
    const vx_dense *x = d[i / 2];
    if (i % 2 == 0) {
        snprintf(name, name_n, "%s.weight", names[i / 2]);
        *offset = x->w, *rows = x->in, *cols = x->out;
    } else {
        snprintf(name, name_n, "%s.bias", names[i / 2]);
        *offset = x->b, *rows = 1, *cols = x->out;
    }
}

void vx_qnet_init(const vx_qnet_layout *L, uint64_t seed, float *params)
{
    const vx_dense *d[2 * VX_QNET_MAX_TRUNK + 4 * VX_QNET_MAX_BRANCHES];
    char names[2 * VX_QNET_MAX_TRUNK + 4 * VX_QNET_MAX_BRANCHES][32];
    int n = dense_list(L, d, names);
    memset(params, 0, L->n_params * sizeof(float)); /* the padding between tensors */
    for (int k = 0; k < n; k++) {
        /* the value head's and each branch's second layer are the linear outputs */
        int is_output = d[k] == &L->value2;
        for (int b = 0; b < L->cfg.n_branches; b++) is_output |= d[k] == &L->adv2[b];
        vx_rng r = vx_rng_make(seed, NN_INIT_STREAM + (uint64_t)k, 0);
        size_t n_w = (size_t)d[k]->in * d[k]->out;
        float *w = params + d[k]->w;
        if (is_output) { /* Xavier (Glorot) uniform */
            double lim = sqrt(6.0 / (d[k]->in + d[k]->out));
            for (size_t i = 0; i < n_w; i++)
                w[i] = (float)((2 * vx_rng_uniform_double(&r) - 1) * lim);
        } else { /* He (Kaiming) normal for ReLU */
            double sd = sqrt(2.0 / d[k]->in);
            for (size_t i = 0; i < n_w; i++) w[i] = (float)(vx_rng_normal(&r) * sd);
        }
        memset(params + d[k]->b, 0, (size_t)d[k]->out * sizeof(float));
    }
}

void vx_qnet_widths(const vx_qnet_layout *L, size_t *hmax, size_t *amax)
{
    const vx_qnet_cfg *c = &L->cfg;
    *hmax = (size_t)c->in_dim;
    *amax = 0;
    for (int l = 0; l < c->n_trunk; l++)
        if ((size_t)c->trunk[l] > *hmax) *hmax = (size_t)c->trunk[l];
    for (int d = 0; d < c->n_branches; d++) {
        size_t a = (size_t)c->branch[d] * (size_t)c->atoms;
        if (a > *amax) *amax = a;
    }
}

const void *vx_nn_backend(vx_device *dev, const char *component, const void *cpu_ops, vx_err *e)
{
    const void *ops = vx_device_backend(dev, component);
    if (!ops && vx_device_kind(dev) == VX_DEVICE_CPU) ops = cpu_ops;
    if (!ops)
        vx_err_set(e, VX_ERR_UNSUPPORTED, "%s: no implementation for %s", component,
                   vx_device_name(dev));
    return ops;
}

/* ---- the dense context ----------------------------------------------------------------------- */

struct vx_dense_ctx {
    const vx_dense_ops *ops;
    void *impl;
};

vx_status vx_dense_ctx_create(vx_device *dev, size_t workspace, vx_dense_ctx **out, vx_err *e)
{
    *out = NULL;
    const vx_dense_ops *ops = vx_nn_backend(dev, "dense", &vx_dense_cpu_ops, e);
    if (!ops) return e ? e->status : VX_ERR_UNSUPPORTED;
    vx_dense_ctx *c = calloc(1, sizeof *c);
    if (!c) return vx_err_set(e, VX_ERR_NOMEM, "dense: out of memory");
    c->ops = ops;
    vx_status st = ops->create(dev, workspace, &c->impl, e);
    if (st) {
        free(c);
        return st;
    }
    *out = c;
    return VX_OK;
}

void vx_dense_ctx_free(vx_dense_ctx *c)
{
    if (!c) return;
    c->ops->free(c->impl);
    free(c);
}

void vx_dense_set_tf32(vx_dense_ctx *c, int on) { c->ops->set_tf32(c->impl, on); }
size_t vx_dense_reserved(const vx_dense_ctx *c) { return c->ops->reserved(c->impl); }

static const vx_dense_group g_alone = {1, 0, 0, 0, 0, 0};

vx_status vx_dense_forward(vx_dense_ctx *c, const vx_dense *d, const float *P, const float *x,
                           int B, float *y, int relu, vx_stream s, vx_err *e)
{
    return c->ops->forward(c->impl, d, &g_alone, P, x, B, y, relu, s, e);
}

vx_status vx_dense_backward(vx_dense_ctx *c, const vx_dense *d, const float *P, const float *x,
                            int B, const float *dy, float *g, float *dx, int flags, vx_stream s,
                            vx_err *e)
{
    if ((flags & VX_DENSE_DX_ONLY) && !dx)
        return vx_err_set(e, VX_ERR_ARG, "dense backward: dx only, and no dx");
    return c->ops->backward(c->impl, d, &g_alone, P, x, B, dy, g, dx, flags, s, e);
}

/* The group with its dx and dy strides filled in; members that would overlap their neighbours'
 * tensors are a caller's mistake, said here. */
static vx_status group_check(const vx_dense *d, const vx_dense_group *G0, int B, vx_dense_group *G,
                             vx_err *e)
{
    *G = *G0;
    if (!G->dx) G->dx = G->x;
    if (!G->dy) G->dy = G->y;
    size_t np = d->b + (size_t)d->out, nx = (size_t)B * d->in, ny = (size_t)B * d->out;
    if (G->K < 1 || G->K > 65535 || B < 0) /* a CUDA grid's second dimension holds the members */
        return vx_err_set(e, VX_ERR_ARG, "dense group: %d members (1..65535) at batch %d", G->K, B);
    if (G->K > 1 && (G->p < np || G->x < nx || G->y < ny || G->dx < nx || G->dy < ny))
        return vx_err_set(e, VX_ERR_ARG,
                          "dense group: strides %zu, %zu, %zu, %zu, %zu floats overlap members of "
                          "%zu, %zu, %zu",
                          G->p, G->x, G->y, G->dx, G->dy, np, nx, ny);
    return VX_OK;
}

vx_status vx_dense_forward_group(vx_dense_ctx *c, const vx_dense *d, const vx_dense_group *G0,
                                 const float *P, const float *x, int B, float *y, int relu,
                                 vx_stream s, vx_err *e)
{
    vx_dense_group G;
    vx_status st = group_check(d, G0, B, &G, e);
    return st ? st : c->ops->forward(c->impl, d, &G, P, x, B, y, relu, s, e);
}

vx_status vx_dense_backward_group(vx_dense_ctx *c, const vx_dense *d, const vx_dense_group *G0,
                                  const float *P, const float *x, int B, const float *dy, float *g,
                                  float *dx, int flags, vx_stream s, vx_err *e)
{
    if ((flags & VX_DENSE_DX_ONLY) && !dx)
        return vx_err_set(e, VX_ERR_ARG, "dense backward: dx only, and no dx");
    vx_dense_group G;
    vx_status st = group_check(d, G0, B, &G, e);
    return st ? st : c->ops->backward(c->impl, d, &G, P, x, B, dy, g, dx, flags, s, e);
}

/* ---- the network
 * --------------------------------------------------------------------------------- */

struct vx_qnet {
    const vx_qnet_ops *ops;
    void *impl;
    int members, max_batch, backward_batch;
    vx_qnet_strides strides;
};

vx_qnet_strides vx_qnet_member_strides(const vx_qnet_layout *L, int max_batch)
{
    vx_qnet_strides s;
    s.params = vx_dense_align(L->n_params);
    s.x = vx_dense_align((size_t)max_batch * (size_t)L->cfg.in_dim);
    s.q = vx_dense_align((size_t)max_batch * (size_t)L->out_dim);
    return s;
}

vx_status vx_qnet_create(const vx_qnet_layout *L, int max_batch, int backward_batch, vx_device *dev,
                         vx_qnet **out, vx_err *e)
{
    return vx_qnet_create_group(L, 1, max_batch, backward_batch, dev, out, e);
}

int vx_qnet_members(const vx_qnet *q) { return q->members; }
vx_qnet_strides vx_qnet_strides_of(const vx_qnet *q) { return q->strides; }

vx_status vx_qnet_create_group(const vx_qnet_layout *L, int members, int max_batch,
                               int backward_batch, vx_device *dev, vx_qnet **out, vx_err *e)
{
    *out = NULL;
    if (max_batch < 1 || backward_batch < 0 || backward_batch > max_batch)
        return vx_err_set(e, VX_ERR_ARG, "qnet: batches %d (forward) and %d (backward)", max_batch,
                          backward_batch);
    if (members < 1 || members > 65535) /* a CUDA grid's second dimension holds the members */
        return vx_err_set(e, VX_ERR_ARG, "qnet: a group of %d members (1..65535)", members);
    const vx_qnet_ops *ops = vx_nn_backend(dev, "qnet", &vx_qnet_cpu_ops, e);
    if (!ops) return e ? e->status : VX_ERR_UNSUPPORTED;
    vx_qnet *q = calloc(1, sizeof *q);
    if (!q) return vx_err_set(e, VX_ERR_NOMEM, "qnet: out of memory");
    q->ops = ops;
    q->members = members, q->max_batch = max_batch, q->backward_batch = backward_batch;
    q->strides = vx_qnet_member_strides(L, max_batch);
    vx_status st = ops->create(L, members, max_batch, backward_batch, dev, &q->impl, e);
    if (st) {
        free(q);
        return st;
    }
    *out = q;
    return VX_OK;
}

void vx_qnet_free(vx_qnet *q)
{
    if (!q) return;
    q->ops->free(q->impl);
    free(q);
}

vx_status vx_qnet_set_tf32(vx_qnet *q, int on, vx_err *e)
{
    return q->ops->set_tf32(q->impl, on, e);
}

vx_status vx_qnet_forward(vx_qnet *q, const float *params, const float *x, int B, vx_stream s,
                          vx_err *e)
{
    if (B < 1 || B > q->max_batch)
        return vx_err_set(e, VX_ERR_ARG, "qnet: batch %d outside 1..%d", B, q->max_batch);
    return q->ops->forward(q->impl, params, x, B, s, e);
}

const float *vx_qnet_output(const vx_qnet *q) { return q->ops->output(q->impl); }

vx_status vx_qnet_backward(vx_qnet *q, const float *params, const float *x, int B, const float *dq,
                           float *grads, vx_stream s, vx_err *e)
{
    if (B < 1 || B > q->backward_batch)
        return vx_err_set(e, VX_ERR_ARG, "qnet: backward batch %d outside 1..%d", B,
                          q->backward_batch);
    return q->ops->backward(q->impl, params, x, B, dq, grads, s, e);
}

size_t vx_qnet_reserved(const vx_qnet *q) { return q->ops->reserved(q->impl); }

/* ---- the optimizer
 * ------------------------------------------------------------------------------- */

struct vx_optim {
    const vx_optim_ops *ops;
    void *impl;
};

vx_status vx_optim_create(const vx_adam_cfg *cfg, double max_norm, size_t n, vx_device *dev,
                          vx_optim **out, vx_err *e)
{
    return vx_optim_create_group(cfg, &max_norm, n, n, 1, dev, out, e);
}

vx_status vx_optim_create_group(const vx_adam_cfg *cfgs, const double *max_norms, size_t n,
                                size_t stride, int members, vx_device *dev, vx_optim **out,
                                vx_err *e)
{
    *out = NULL;
    if (members < 1 || members > 65535 || stride < n)
        return vx_err_set(e, VX_ERR_ARG,
                          "optim: a group of %d members (1..65535) %zu floats apart, %zu each",
                          members, stride, n);
    vx_status st = VX_OK;
    for (int k = 0; k < members && !st; k++) st = vx_adam_cfg_check(&cfgs[k], e);
    if (st) return st;
    const vx_optim_ops *ops = vx_nn_backend(dev, "optim", &vx_optim_cpu_ops, e);
    if (!ops) return e ? e->status : VX_ERR_UNSUPPORTED;
    vx_optim *o = calloc(1, sizeof *o);
    if (!o) return vx_err_set(e, VX_ERR_NOMEM, "optim: out of memory");
    o->ops = ops;
    st = ops->create(cfgs, max_norms, n, stride, members, dev, &o->impl, e);
    if (st) {
        free(o);
        return st;
    }
    *out = o;
    return VX_OK;
}

void vx_optim_free(vx_optim *o)
{
    if (!o) return;
    o->ops->free(o->impl);
    free(o);
}

vx_status vx_optim_step(vx_optim *o, float *params, float *grads, vx_stream s, vx_err *e)
{
    return o->ops->step(o->impl, params, grads, s, e);
}

const double *vx_optim_norm(const vx_optim *o) { return o->ops->norm(o->impl); }

void vx_optim_set_controls(vx_optim *o, const double *lr, const int *skip)
{
    o->ops->set_controls(o->impl, lr, skip);
}

vx_status vx_optim_view_of(vx_optim *o, vx_optim_view *out, vx_err *e)
{
    if (!o->ops->view)
        return vx_err_set(e, VX_ERR_ARG, "optim: no device state to fuse a step with");
    o->ops->view(o->impl, out);
    return VX_OK;
}

vx_status vx_optim_copy_state(vx_optim *o, float *m, float *v, int64_t *t, vx_stream s, vx_err *e)
{
    return o->ops->copy_state(o->impl, m, v, t, s, e);
}

vx_status vx_optim_load_state(vx_optim *o, const float *m, const float *v, const int64_t *t,
                              vx_stream s, vx_err *e)
{
    return o->ops->load_state(o->impl, m, v, t, s, e);
}

size_t vx_optim_reserved(const vx_optim *o) { return o->ops->reserved(o->impl); }

/* qnet_cpu.c — the float32 CPU Q-network: layout, workspace, initialisation, and the forward and
 * backward passes instantiated from qnet_impl.h; global-norm clipping; Adam.
 *
 * GEMMs go through OpenBLAS (cblas). The element-wise parts (bias, ReLU, dueling mean) are plain
 * loops; they are a few percent of the time at the default widths. */
#include "vixen/nn.h"
#include "vixen/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VX_T float
#define VX_GEMM cblas_sgemm
#define VX_NAME(x) qnet32_##x
#include "qnet_impl.h"

#define NN_INIT_STREAM 0x4e4e0000ull /* "NN": Philox streams of the initial weights */

void vx_qnet_cfg_default(vx_qnet_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->in_dim = 51;
    c->n_trunk = 2;
    c->trunk[0] = c->trunk[1] = 256;
    c->head_hidden = 64;
    c->n_branches = 3;
    c->branch[0] = 9;
    c->branch[1] = 3;
    c->branch[2] = 3;
    c->atoms = 1;
}

/* Every tensor starts on a 16-byte boundary (4 floats): the GPU's fused GEMM kernels load
 * weights and biases in 16-byte vectors. The few padding floats stay zero. */
static size_t align4(size_t off) { return (off + 3) & ~(size_t)3; }

static vx_dense dense_at(size_t *off, size_t *weights, int in, int out)
{
    vx_dense d;
    d.w = align4(*off);
    d.b = align4(d.w + (size_t)in * out);
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
        return vx_err_set(e, VX_ERR_ARG, "qnet: invalid shape (in %d, trunk layers %d, head %d, "
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
        L->trunk[l] = dense_at(&off, &weights, in, c->trunk[l]);
        in = c->trunk[l];
    }
    L->value1 = dense_at(&off, &weights, in, c->head_hidden);
    L->value2 = dense_at(&off, &weights, c->head_hidden, c->atoms);
    int out = 0;
    for (int d = 0; d < c->n_branches; d++) {
        L->adv1[d] = dense_at(&off, &weights, in, c->head_hidden);
        L->adv2[d] = dense_at(&off, &weights, c->head_hidden, c->branch[d] * c->atoms);
        L->out_offset[d] = out;
        out += c->branch[d] * c->atoms;
    }
    L->out_dim = out;
    L->n_params = align4(off);
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

void vx_qnet_forward(const vx_qnet_layout *L, const float *params, const float *x, int B,
                     vx_qnet_ws *ws)
{
    qnet32_acts a = acts_of(ws);
    qnet32_forward(L, params, x, B, &a);
}

void vx_qnet_backward(const vx_qnet_layout *L, const float *params, const float *x, int B,
                      const float *dq, vx_qnet_ws *ws, float *grads)
{
    qnet32_acts a = acts_of(ws);
    qnet32_backward(L, params, x, B, dq, &a, grads);
}

void vx_qnet_init(const vx_qnet_layout *L, uint64_t seed, float *params)
{
    const vx_dense *d[2 * VX_QNET_MAX_TRUNK + 4 * VX_QNET_MAX_BRANCHES];
    char names[2 * VX_QNET_MAX_TRUNK + 4 * VX_QNET_MAX_BRANCHES][32];
    int n = dense_list(L, d, names);
    memset(params, 0, L->n_params * sizeof(float)); /* the padding between tensors */
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
            for (size_t i = 0; i < n_w; i++) w[i] = (float)((2 * vx_rng_uniform_double(&r) - 1) * lim);
        } else { /* He (Kaiming) normal for ReLU */
            double sd = sqrt(2.0 / d[k]->in);
            for (size_t i = 0; i < n_w; i++) w[i] = (float)(vx_rng_normal(&r) * sd);
        }
        memset(params + d[k]->b, 0, (size_t)d[k]->out * sizeof(float));
    }
}

double vx_grad_clip(float *g, size_t n, double max_norm)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    double norm = sqrt(s);
    if (max_norm > 0 && norm > max_norm) {
        float k = (float)(max_norm / norm);
        for (size_t i = 0; i < n; i++) g[i] *= k;
    }
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

vx_status vx_adam_create(const vx_adam_cfg *cfg, size_t n, vx_adam *a, vx_err *e)
{
    memset(a, 0, sizeof *a);
    if (!(cfg->lr > 0) || cfg->beta1 < 0 || cfg->beta1 >= 1 || cfg->beta2 < 0 || cfg->beta2 >= 1 ||
        !(cfg->eps > 0) || cfg->weight_decay < 0)
        return vx_err_set(e, VX_ERR_ARG, "adam: need lr > 0, betas in [0, 1), eps > 0, decay >= 0");
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
    const double b1 = a->cfg.beta1, b2 = a->cfg.beta2;
    const float c1 = (float)(1.0 / (1.0 - pow(b1, (double)a->t)));
    const float c2 = (float)(1.0 / (1.0 - pow(b2, (double)a->t)));
    const float lr = (float)a->cfg.lr, eps = (float)a->cfg.eps, wd = (float)a->cfg.weight_decay;
    const float fb1 = (float)b1, fb2 = (float)b2;
    for (size_t i = 0; i < a->n; i++) {
        float m = fb1 * a->m[i] + (1 - fb1) * g[i];
        float v = fb2 * a->v[i] + (1 - fb2) * g[i] * g[i];
        a->m[i] = m;
        a->v[i] = v;
        p[i] -= lr * ((m * c1) / (sqrtf(v * c2) + eps) + wd * p[i]);
    }
}

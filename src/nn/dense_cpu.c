/* dense_cpu.c — the dense layer on the CPU (dense.h): dense_impl.h's float arithmetic over
 * OpenBLAS, behind the dense context's ops table. A CPU context holds nothing: every call is
 * done when it returns. */
#include "nn_internal.h"

#include <stdlib.h>

#define VX_T float
#define VX_GEMM cblas_sgemm
#define VX_NAME(x) dense32_##x
#include "dense_impl.h"

static vx_status dc_create(vx_device *dev, size_t workspace, void **impl, vx_err *e)
{
    (void)dev, (void)workspace, (void)e;
    *impl = NULL;
    return VX_OK;
}

static void dc_free(void *impl) { (void)impl; }
static void dc_set_tf32(void *impl, int on) { (void)impl, (void)on; }
static size_t dc_reserved(const void *impl)
{
    (void)impl;
    return 0;
}

/* A group is its members one after another: the reference the GPU's batched GEMMs are held to. */
static vx_status dc_forward(void *impl, const vx_dense *d, const vx_dense_group *G, const float *P,
                            const float *x, int B, float *y, int relu, vx_stream s, vx_err *e)
{
    (void)impl, (void)s, (void)e;
    for (int k = 0; k < G->K; k++)
        dense32_dense_fwd(d, P + k * G->p, x + k * G->x, B, y + k * G->y, relu);
    return VX_OK;
}

static vx_status dc_backward(void *impl, const vx_dense *d, const vx_dense_group *G, const float *P,
                             const float *x, int B, const float *dy, float *g, float *dx, int flags,
                             vx_stream s, vx_err *e)
{
    (void)impl, (void)s, (void)e;
    for (int k = 0; k < G->K; k++) {
        float *dxk = dx ? dx + k * G->dx : NULL;
        float *gk = flags & VX_DENSE_DX_ONLY ? NULL : g + k * G->p;
        dense32_dense_bwd(d, P + k * G->p, x + k * G->x, B, dy + k * G->dy, gk, dxk,
                          flags & VX_DENSE_ACCUMULATE);
        if (dxk && (flags & VX_DENSE_RELU_IN))
            dense32_relu_mask(dxk, x + k * G->x, (size_t)B * (size_t)d->in);
    }
    return VX_OK;
}

const vx_dense_ops vx_dense_cpu_ops = {dc_create,   dc_free,    dc_set_tf32,
                                       dc_reserved, dc_forward, dc_backward};

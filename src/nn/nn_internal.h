/* nn_internal.h — the nn layer's backend seam (internal): the ops tables a device implements for
 * the dense layer, the Q-network and the optimizer, and the generic objects that dispatch to
 * them. The CPU tables live in dense_cpu.c and qnet_cpu.c; the CUDA ones in dense_cuda.cu,
 * qnet_cuda.cu and optim_cuda.cu, registered with the device (src/util/device_open.c). */
#ifndef VIXEN_NN_INTERNAL_H
#define VIXEN_NN_INTERNAL_H

#include "vixen/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    vx_status (*create)(vx_device *dev, size_t workspace, void **impl, vx_err *e);
    void (*free)(void *impl);
    void (*set_tf32)(void *impl, int on);
    size_t (*reserved)(const void *impl);
    /* G: the group (one member for the plain calls), checked by the caller, its dx and dy
     * strides filled in */
    vx_status (*forward)(void *impl, const vx_dense *d, const vx_dense_group *G, const float *P,
                         const float *x, int B, float *y, int relu, vx_stream s, vx_err *e);
    vx_status (*backward)(void *impl, const vx_dense *d, const vx_dense_group *G, const float *P,
                          const float *x, int B, const float *dy, float *g, float *dx, int flags,
                          vx_stream s, vx_err *e); /* VX_DENSE_* flags */
} vx_dense_ops;

typedef struct {
    /* K members (vx_qnet_create_group); the other calls then work on all K at the strides of
     * vx_qnet_member_strides(L, max_batch) */
    vx_status (*create)(const vx_qnet_layout *L, int K, int max_batch, int backward_batch,
                        vx_device *dev, void **impl, vx_err *e);
    void (*free)(void *impl);
    vx_status (*set_tf32)(void *impl, int on, vx_err *e);
    vx_status (*forward)(void *impl, const float *params, const float *x, int B, vx_stream s,
                         vx_err *e);
    const float *(*output)(const void *impl);
    vx_status (*backward)(void *impl, const float *params, const float *x, int B, const float *dq,
                          float *grads, vx_stream s, vx_err *e);
    size_t (*reserved)(const void *impl);
} vx_qnet_ops;

typedef struct {
    /* K members (vx_optim_create_group), their settings cfg[k], max_norm[k], at k·stride */
    vx_status (*create)(const vx_adam_cfg *cfg, const double *max_norm, size_t n, size_t stride,
                        int K, vx_device *dev, void **impl, vx_err *e);
    void (*free)(void *impl);
    vx_status (*step)(void *impl, float *params, float *grads, vx_stream s, vx_err *e);
    const double *(*norm)(const void *impl);
    void (*set_controls)(void *impl, const double *lr, const int *skip);
    vx_status (*copy_state)(void *impl, float *m, float *v, int64_t *t, vx_stream s, vx_err *e);
    vx_status (*load_state)(void *impl, const float *m, const float *v, const int64_t *t,
                            vx_stream s, vx_err *e);
    size_t (*reserved)(const void *impl);
    void (*view)(void *impl, vx_optim_view *out); /* NULL: none (vx_optim_view_of) */
} vx_optim_ops;

extern const vx_dense_ops vx_dense_cpu_ops;
extern const vx_qnet_ops vx_qnet_cpu_ops;
extern const vx_optim_ops vx_optim_cpu_ops;

/* The device's implementation of a component, or the CPU's for a CPU device; NULL (with e) when
 * the device has none. */
const void *vx_nn_backend(vx_device *dev, const char *component, const void *cpu_ops, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

/* nn_cuda.h — the branching dueling Q-network's forward pass on the GPU (CUDA builds only).
 *
 * The same layout and parameters as nn.h (one flat float vector, weights [in × out]); GEMMs
 * through cuBLAS in plain float32 (TF32 off: the parity test compares with the CPU at 1e-5),
 * bias + ReLU and the dueling aggregation in small kernels. Activations live in a workspace sized
 * for max_batch at creation; nothing is allocated per call. */
#ifndef VIXEN_NN_CUDA_H
#define VIXEN_NN_CUDA_H

#include <cuda_runtime.h>
#include "vixen/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vx_qnet_cuda vx_qnet_cuda;

vx_status vx_qnet_cuda_create(const vx_qnet_layout *L, int max_batch, vx_qnet_cuda **out,
                              vx_err *e);
void vx_qnet_cuda_free(vx_qnet_cuda *q);
/* TF32 tensor-core GEMMs (10-bit mantissa products, float32 sums): several times the float32
 * throughput; off by default, and off in every parity test. */
vx_status vx_qnet_cuda_set_tf32(vx_qnet_cuda *q, int on, vx_err *e);
/* The device parameter vector (n_params floats), for uploads and optimizer kernels. */
float *vx_qnet_cuda_params(vx_qnet_cuda *q);
/* Copies host parameters in (asynchronously on s). */
vx_status vx_qnet_cuda_upload(vx_qnet_cuda *q, const float *host_params, cudaStream_t s,
                              vx_err *e);
/* x: B × in_dim on the device. The output (B × out_dim) stays in the workspace:
 * vx_qnet_cuda_output. params: a device parameter vector of this layout (NULL: the network's own),
 * so one workspace can run the online and the target weights. */
vx_status vx_qnet_cuda_forward(vx_qnet_cuda *q, const float *params, const float *x, int B,
                               cudaStream_t s, vx_err *e);
const float *vx_qnet_cuda_output(const vx_qnet_cuda *q);

/* Backward through the last forward of this workspace (same params and x): dq is B × out_dim on
 * the device; grads (n_params floats, device) are overwritten. The trunk's gradient is scaled by
 * 1/(branches + 1), as on the CPU. */
vx_status vx_qnet_cuda_backward(vx_qnet_cuda *q, const float *params, const float *x, int B,
                                const float *dq, float *grads, cudaStream_t s, vx_err *e);

/* Global-norm clipping and Adam on the device, with every scalar in device memory so the whole
 * update can be captured: vx_grad_clip_cuda writes the norm before clipping into *norm, and the
 * next vx_adam_step_cuda applies the clip factor as it reads the gradients (and writes the
 * clipped gradients back): two launches instead of a separate scaling pass. The Adam step counter
 * t is incremented on the device. scratch must start zeroed (it holds arrival counters that the
 * kernels reset after use). */
typedef struct {
    double *norm;            /* device scalar */
    long long *t;            /* device step counter */
    double *scratch;         /* device, >= 1024 doubles, zeroed once */
    double max_norm;         /* host: the clip the next Adam step applies (0: none) */
} vx_optim_dev;

vx_status vx_grad_clip_cuda(float *grads, size_t n, double max_norm, vx_optim_dev *o,
                            cudaStream_t s, vx_err *e);
vx_status vx_adam_step_cuda(const vx_adam_cfg *cfg, float *params, float *grads, float *m,
                            float *v, size_t n, vx_optim_dev *o, cudaStream_t s, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

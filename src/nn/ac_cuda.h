/* ac_cuda.h — the actor-critic (actor_critic.h) on a CUDA device, for PPO's CUDA backend
 * (internal): the forward and backward passes of ac_impl.h through the dense layer's cuBLASLt
 * GEMMs, with the activations kept on the device for the backward pass.
 *
 * Forward rows: the policy trunk and head run on the first B_pi rows of x, the value trunk and
 * head on the first B_v (≥ B_pi) — the rollout values the pre-reset observations of truncated
 * episodes (rows N..2N) beside the current ones without running the policy on them. A shared
 * trunk runs on B_v rows, its policy head on B_pi. Everything is queued on the caller's stream;
 * every pointer is device memory. */
#ifndef VIXEN_AC_CUDA_H
#define VIXEN_AC_CUDA_H

#include <cuda_runtime.h>
#include "vixen/actor_critic.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ac_cuda ac_cuda;

/* max_rows: the most rows of any forward or backward; its activations are allocated once.
 * workspace: bytes of cuBLASLt workspace for its GEMMs (0: the dense layer's default). */
vx_status ac_cuda_create(const vx_ac_layout *L, int max_rows, size_t workspace, vx_device *dev,
                         ac_cuda **out, vx_err *e);
void ac_cuda_free(ac_cuda *a);
void ac_cuda_set_tf32(ac_cuda *a, int on);
/* Fills the logits (B_pi × K) and values (B_v); B_pi may be 0 (values only). */
vx_status ac_cuda_forward(ac_cuda *a, const float *params, const float *x, int B_pi, int B_v,
                          cudaStream_t s, vx_err *e);
const float *ac_cuda_logits(const ac_cuda *a);
const float *ac_cuda_values(const ac_cuda *a);
/* Backward through the last forward, which ran B rows for both heads: dlogits B × K and dvalue
 * B into grads (n_params, overwritten; its padding is left alone). */
vx_status ac_cuda_backward(ac_cuda *a, const float *params, const float *x, int B,
                           const float *dlogits, const float *dvalue, float *grads, cudaStream_t s,
                           vx_err *e);
size_t ac_cuda_reserved(const ac_cuda *a);

#ifdef __cplusplus
}
#endif

#endif

/* dqn_fused.h — the DQN's update in two launches on a CUDA device (internal): a block of rows
 * gathers its s′ and s rows, runs the target network over s′, the online network over s′ and
 * over s (keeping the activations of s), the dueling aggregation, the loss with each sample's new
 * priority, and the backward pass into a gradient slice of its own, all in shared memory with
 * every product on tensor cores; then one cooperative launch adds the slices in block order,
 * takes the norm, clips and steps Adam, writing the kernels' copies of the online weights too
 * (src/nn/fused_net.cuh, the machinery PPO's minibatch kernel runs on).
 *
 * Why: the per-layer path (learner_cuda.cu over qnet_cuda.cu) spends an update in about eighty
 * launches of small GEMMs and helper kernels, a chain whose length, not its arithmetic, sets an
 * update's time.
 *
 * The weights are read from packed and fragment copies (dqn_fused_plan.h), the online network's
 * and the target's: dqn_fused_pack writes both from the flat vectors; the update keeps the
 * online copies current; the target's follow the target through dqn_fused_target_due (a hard
 * copy, when due) or dqn_fused_pack_target (after Polyak averaging).
 *
 * Precision: tf32 = 1 multiplies in TF32; tf32 = 0 in 3×TF32 (tc_tile.cuh), float32's accuracy.
 * The loss is dqn_loss.h's, the dueling aggregation the reference's order of operations (the
 * file is built without fused multiply-adds). Gradients are added in a fixed order: the same bits
 * every run.
 *
 * Takes: one learner (not a group), the expected-value losses (MSE, Huber), trunks of 1 to 3
 * layers whose widths and the heads' hidden layers' (all heads together) are multiples of 16, at
 * most 15 actions over the branches, fitting shared memory (dqn_fused_rows says why not). */
#ifndef VIXEN_DQN_FUSED_H
#define VIXEN_DQN_FUSED_H

#include <cuda_runtime.h>
#include "vixen/dqn_loss.h"
#include "vixen/nn.h"
#include "vixen/replay.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dqn_fused dqn_fused;

/* The rows a block of the update at this batch, or 0 when the fused update does not take this
 * network and loss on this device — and why. */
int dqn_fused_rows(const vx_qnet_layout *L, int loss, int batch, vx_device *dev, char *why,
                   size_t why_n);

/* 1 when the layer-by-layer update (dqn_layers.h) takes this network and loss on this device in
 * TF32 (tf32 = 1) or 3×TF32, else 0 — and why. */
int dqn_fused_layers_take(const vx_qnet_layout *L, int loss, int tf32, vx_device *dev, char *why,
                          size_t why_n);

/* An update of up to `batch` rows; layers: its gradient layer by layer (dqn_layers.h), else a
 * block of rows at a time. */
vx_status dqn_fused_create(const vx_qnet_layout *L, const vx_loss_shape *shape, int loss, int batch,
                           int tf32, int layers, vx_device *dev, dqn_fused **out, vx_err *e);
void dqn_fused_free(dqn_fused *f);
size_t dqn_fused_reserved(const dqn_fused *f);

/* Both networks' copies from the flat vectors (device memory). */
vx_status dqn_fused_pack(dqn_fused *f, const float *online, const float *target, cudaStream_t s,
                         vx_err *e);
/* The target's copies from the flat target (after Polyak averaging). */
vx_status dqn_fused_pack_target(dqn_fused *f, const float *target, cudaStream_t s, vx_err *e);
/* The target's copies := the online's when (count[0] + 1) is a multiple of `every` (count: the
 * updates made before this one, read on the device), or always when count is NULL. */
vx_status dqn_fused_target_due(dqn_fused *f, const long long *count, long long every,
                               cudaStream_t s, vx_err *e);

/* One update from the batch b (device arrays, B rows), in two calls: dqn_fused_grad writes each
 * row's loss (w · ℓ), new priority and (Σ, max) of Q(s, a) over the branches into loss, prio and
 * qstat (B each) and the blocks' gradient slices; dqn_fused_step then adds the slices into grads
 * (n_params floats, padding left alone) and, with o, takes the norm and steps params (the flat
 * online weights) and the online copies. Apart so that the priorities' update may run beside the
 * step. */
typedef struct {
    vx_replay_batch b;
    int B;
    double gamma;
    float kappa;
    float *loss, *prio;
    float2 *qstat;
} dqn_fused_args;

vx_status dqn_fused_grad(dqn_fused *f, const dqn_fused_args *a, cudaStream_t s, vx_err *e);
vx_status dqn_fused_step(dqn_fused *f, int B, float *grads, float *params, const vx_optim_view *o,
                         cudaStream_t s, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

/* dqn_layers.h — the DQN's update layer by layer, one cooperative launch (internal, CUDA C++):
 * the first of dqn_fused.h's two calls when that update is made with `layers` set.
 *
 * Why: dqn_fused.cu's update_kernel gives each block 16 rows and runs the whole network on them:
 * every block reads every weight four times, and at a batch of 1,024 only 64 blocks have rows —
 * each a long chain of dependent steps on one SM. Here every block of the grid (one an SM) takes
 * a tile of one layer's product at a time, its operands — the rows below and the weights'
 * columns — staged into shared memory in one go, and the grid waits for itself between layers:
 *   1. the forward passes, a layer at a time over the three passes' rows (the target over s′,
 *      the online network over s′ and over s), activations to global memory;
 *   2. the heads' outputs, the dueling aggregation, each row's loss and dQ, the aggregation's
 *      backward pass and the heads' input gradient, 16 rows a block (dqn_fused_loss.cuh);
 *   3. the input gradients, a layer at a time down to the first hidden layer's;
 *   4. the weight and bias gradients of every layer, chunk by chunk of rows, each chunk's into
 *      its own slice (laid out as the packed weights), which dqn_fused_step adds in chunk order.
 * The activations' arithmetic is update_kernel's (each output element one strip's products over
 * all of K, in order), so Q values, losses and priorities are the same bits; the weight
 * gradients are summed over chunks of rows rather than 16-row blocks, so they differ in their
 * last bits. Tiles: vx_dl_plan (dqn_fused_plan.h). */
#ifndef VIXEN_DQN_LAYERS_H
#define VIXEN_DQN_LAYERS_H

#include "dqn_fused_loss.cuh"

/* The kernel's shared memory limit set to the device's most, and its grid: the blocks that can
 * be resident at once (an SM's, times the SMs). */
vx_status dqn_layers_prepare(int passes, const vx_dl_plan *p, vx_device *dev, int *grid, vx_err *e);

/* The launch: the online network's copies and slices c (fused_net.cuh), the target's copies
 * wpt and wft, the tiles p, the activations' buffer act (vx_dl_act_floats of the batch). */
vx_status dqn_layers_grad(const fused::copies *c, const float *wpt, const float *wft,
                          const vx_dl_plan *p, float *act, int grid, const fused::update_args *u,
                          cudaStream_t s, vx_err *e);

#endif

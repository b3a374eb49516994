/* ppo_lanes_cuda.h — runs the lanes' PPO arithmetic (src/ppo/ppo_lanes.cuh) and the one-thread
 * functions of ppo_math.h side by side on the device, for test_ppo_cuda.c. */
#ifndef VIXEN_TEST_PPO_LANES_CUDA_H
#define VIXEN_TEST_PPO_LANES_CUDA_H

#include "vixen/ppo_math.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LANES_STATS 5 /* pg, v, entropy, approx_kl, clipped */

/* One sample a row. In: head (rows × 16: the 15 logits, then the value), act (rows × 3),
 * prev (rows × 4: old log π, old value, advantage, return). Out, [0] the one-thread
 * functions' and [1] the lanes': g (rows × 16: the gradient with respect to the logits, then
 * the value's), st (rows × LANES_STATS), the sampled actions (rows × 3) and their log π (rows),
 * sampling row i as environment i at `step`. rows is even. Returns a cudaError_t as int. */
int ppo_lanes_run(const vx_ppo_loss_cfg *c, int rows, const float *head, const int32_t *act,
                  const double *prev, uint64_t seed, uint64_t step, double *g[2], double *st[2],
                  int32_t *sampled[2], double *logp[2]);

#ifdef __cplusplus
}
#endif

#endif

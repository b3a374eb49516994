/* tree_check_cuda.h — a test's look inside a GPU proportional buffer's tree (tree_check_cuda.cu).
 */
#ifndef VX_TREE_CHECK_CUDA_H
#define VX_TREE_CHECK_CUDA_H

#include "vixen/replay.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads every level of the buffer's sum and min trees and counts the inner nodes that are not
 * exactly (bit for bit) the sum of their 16 children added in order from 0 (child 0 first) and
 * the least of them; -1 when the buffer is not a proportional one on the device or a copy fails.
 * *leaves_set: the leaves below the buffer's size with a sum > 0 (each a transition's p^α). */
long long tree_check(vx_replay *r, size_t *leaves_set);
/* Leaf i's sum (p_i^α), or NaN when it cannot be read. */
double tree_leaf(vx_replay *r, size_t i);

#ifdef __cplusplus
}
#endif

#endif

/* tree_check_cuda.cu — tree_check (tree_check_cuda.h): the device tree copied to the host and
 * each inner node recomputed there, in plain double, from its children. */
#include "tree_check_cuda.h"
#include "replay/replay_cuda_internal.h"

#include <math.h>
#include <stdlib.h>

extern "C" long long tree_check(vx_replay *r, size_t *leaves_set)
{
    *leaves_set = 0;
    if (r->cfg.kind != VX_REPLAY_PROPORTIONAL || !vx_replay_on_device(r)) return -1;
    rc_buf *b = rcb(r);
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
    int D = b->tree.depth;
    double *sum[VX_REPLAY_MAX_LEVELS] = {0}, *min[VX_REPLAY_MAX_LEVELS] = {0};
    long long bad = 0;
    for (int l = 0; l <= D && bad >= 0; l++) {
        size_t w = b->shape.width[l];
        sum[l] = (double *)malloc(w * sizeof(double));
        min[l] = (double *)malloc(w * sizeof(double));
        if (!sum[l] || !min[l] ||
            cudaMemcpy(sum[l], b->tree.sum[l], w * 8, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(min[l], b->tree.min[l], w * 8, cudaMemcpyDeviceToHost) != cudaSuccess)
            bad = -1;
    }
    for (int l = 0; l < D && bad >= 0; l++) {
        size_t n = b->shape.width[l + 1] / VX_REPLAY_FAN; /* the nodes with children */
        for (size_t node = 0; node < n; node++) {
            double s = 0, m = INFINITY;
            for (int c = 0; c < VX_REPLAY_FAN; c++) {
                s += sum[l + 1][node * VX_REPLAY_FAN + c];
                m = fmin(m, min[l + 1][node * VX_REPLAY_FAN + c]);
            }
            bad += s != sum[l][node] || m != min[l][node];
        }
    }
    for (size_t i = 0; bad >= 0 && i < b->size; i++) *leaves_set += sum[D][i] > 0;
    for (int l = 0; l <= D; l++) free(sum[l]), free(min[l]);
    return bad;
}

extern "C" double tree_leaf(vx_replay *r, size_t i)
{
    if (r->cfg.kind != VX_REPLAY_PROPORTIONAL || !vx_replay_on_device(r)) return NAN;
    rc_buf *b = rcb(r);
    double v = NAN;
    if (i >= b->shape.width[b->tree.depth] ||
        cudaMemcpy(&v, b->tree.sum[b->tree.depth] + i, 8, cudaMemcpyDeviceToHost) != cudaSuccess)
        return NAN;
    return v;
}

/* dqn_fused_loss.cuh — what the DQN's fused update kernels do between the forward and the
 * backward pass, over a block's rows in shared memory: the dueling aggregation, each row's loss
 * with its new priority and dQ, and the aggregation's backward pass (internal; device code only).
 * update_kernel (dqn_fused.cu, a block runs the whole network on its rows) and layers_kernel
 * (dqn_layers.cu, the grid runs one layer at a time) both call these: the same arithmetic, in the
 * reference's order of operations. The files including this are built with --fmad=false. */
#ifndef VIXEN_DQN_FUSED_LOSS_CUH
#define VIXEN_DQN_FUSED_LOSS_CUH

#include "../nn/fused_net.cuh"
#include "dqn_fused.h"
#include "dqn_fused_plan.h"
#include "vixen/env_dynamics.h"

#include <math.h>

namespace fused
{

const int QLD = VX_DF_QLD;

/* The update kernels' own arguments beside dqn_fused_args. */
struct update_args {
    dqn_fused_args a;
    vx_loss_shape shape;
    int kind, O;
};

/* The dueling aggregation of `rows` rows of heads' outputs out (OUT_LD floats a row) into Q rows
 * q (QLD a row), in the reference's order: the branch's mean advantage, then V + A − mean. A
 * thread a (row, branch). The layer-by-layer kernel passes its three passes' rows at once. The
 * caller synchronises. */
static __device__ void duel(const vx_loss_shape &sh, int O, int rows, const float *out, float *q)
{
    int nb = sh.n_branches;
    for (int i = threadIdx.x; i < rows * nb; i += THREADS) {
        int d = i % nb, r = i / nb;
        const float *o = out + r * OUT_LD;
        float *qr = q + r * QLD, v = o[O];
        int n = sh.branch[d], k0 = sh.offset[d];
        float mean = 0;
        for (int k = 0; k < n; k++) mean += o[k0 + k];
        mean /= n;
        for (int k = 0; k < n; k++) qr[k0 + k] = v + o[k0 + k] - mean;
    }
}

/* Each of the R rows from row0: its loss, new priority and Q statistics into the batch's arrays,
 * its dQ into dq (zero past the batch), from Q(s) qs, the online Q(s′) qn and the target's qt —
 * a thread a row (loss_kernel's arithmetic, learner_cuda.cu). The caller synchronises. */
static __device__ void row_losses(const update_args &u, int R, int row0, const float *qs,
                                  const float *qn, const float *qt, float *dq)
{
    const dqn_fused_args &a = u.a;
    const vx_loss_shape &sh = u.shape;
    int O = u.O;
    for (int r = threadIdx.x; r < R; r += THREADS) {
        int j = row0 + r;
        float *g = dq + r * QLD;
        if (j >= a.B) {
            for (int k = 0; k < O; k++) g[k] = 0;
            continue;
        }
        const float *q = qs + r * QLD;
        const int32_t *act = a.b.actions + (size_t)j * VX_ACTION_BRANCHES;
        float sum = 0, mx = -INFINITY;
        for (int d = 0; d < sh.n_branches; d++) {
            float v = vx_loss_q(&sh, q, d, act[d]);
            sum += v;
            mx = v > mx ? v : mx;
        }
        a.qstat[j] = make_float2(sum, mx);
        int m = a.b.steps ? a.b.steps[j] : 1;
        float gm = (float)pow(a.gamma, (double)m);
        a.loss[j] = vx_loss_dqn(&sh, u.kind, a.kappa, gm, q, qn + r * QLD, qt + r * QLD, act,
                                a.b.rewards[j], a.b.terminated[j], a.b.weights[j],
                                1.0f / (float)a.B, g, O, &a.prio[j]);
    }
}

/* The dueling aggregation's backward pass (the reference's order) from the rows' dQ into the
 * heads' gradients out (dA_d = dQ_d − mean dQ_d, dV = Σ dQ in column O), zero past the value.
 * The caller synchronises. */
static __device__ void duel_back(const vx_loss_shape &sh, int O, int R, const float *dq,
                                 float *out)
{
    for (int r = threadIdx.x; r < R; r += THREADS) {
        const float *g = dq + r * QLD;
        float *o = out + r * OUT_LD, dv = 0;
        for (int d = 0; d < sh.n_branches; d++) {
            int n = sh.branch[d], k0 = sh.offset[d];
            float sum = 0;
            for (int k = 0; k < n; k++) sum += g[k0 + k];
            dv += sum;
            for (int k = 0; k < n; k++) o[k0 + k] = g[k0 + k] - sum / n;
        }
        o[O] = dv;
        for (int k = O + 1; k < HEAD; k++) o[k] = 0;
    }
}

} // namespace fused

#endif

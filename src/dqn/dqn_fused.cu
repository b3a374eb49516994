/* dqn_fused.cu — the DQN's update in two launches (dqn_fused.h): update_kernel, R rows a block,
 * then fused_net.cuh's sum of the slices and optimizer step.
 *
 * Built with --fmad=false (CMakeLists.txt): the dueling aggregation and the loss round as the
 * CPU's do; the products are tensor-core instructions, which the flag does not touch. */
#include "../nn/fused_net.cuh"
#include "../util/cuda_check.h"
#include "../util/device_cuda.h"
#include "../util/pdl.cuh"
#include "dqn_fused.h"
#include "dqn_fused_loss.cuh"
#include "dqn_fused_plan.h"
#include "dqn_layers.h"
#include "vixen/env_dynamics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using namespace fused;

struct dqn_fused {
    vx_qnet_layout L;
    vx_loss_shape shape;
    int loss;
    vx_mem mem;
    int rows;         /* the update's rows a block (update_kernel) */
    copies c;         /* the online network's copies, the slices (fused_net.cuh) */
    float *wpt, *wft; /* the target's packed and fragment copies, laid out as c's */
    /* layer by layer (dqn_layers.h) when layers is set: its tiles, its grid, its activations
     * (for up to `batch` rows) */
    int layers, grid, batch;
    vx_dl_plan plan;
    float *act;
};

/* The rows of a gradient slice: a block's, or a chunk's (layer by layer). */
static int slice_rows(const dqn_fused *f) { return f->layers ? f->plan.ch : f->rows; }

/* Rows row0.. of x (B × in) into s.xs, zero past the batch and the input's width. */
static __device__ void load_rows(const net &t, int R, int row0, int B, const float *x, smem &s)
{
    each(R, t.Dp, [&](int r, int d) {
        int i = row0 + r;
        s.xs[r * s.ldx + d] = i < B && d < t.in ? x[(size_t)i * t.in + d] : 0.0f;
    });
}

/* R rows a block: the target's Q(s′), the online Q(s′), the online Q(s) with its activations
 * kept, each row's loss and dq, the dueling aggregation's backward pass into s.out (the heads'
 * gradients: dA_d = dQ_d − mean dQ_d, dV = Σ dQ), the backward pass into the block's slice. */
template <int P>
static __global__ void __launch_bounds__(THREADS)
    update_kernel(net t, const float *wp, const float *wf, const float *wpt, const float *wft,
                  int R, update_args u, float *partial, size_t packed)
{
    extern __shared__ __align__(128) float base[];
    vx_pdl_wait();
    smem s = carve(t, R, base);
    float *qt = (float *)s.rowq + ((R + 7) & ~7), *qn = qt + R * QLD, *qs = qn + R * QLD;
    float *dq = qs + R * QLD;
    const dqn_fused_args &a = u.a;
    const vx_loss_shape &sh = u.shape;
    int row0 = blockIdx.x * R, O = u.O;
    load_rows(t, R, row0, a.B, a.b.next_obs, s);
    __syncthreads();
    forward<P>(t, wpt, wft, R, s);
    duel(sh, O, R, s.out, qt);
    forward<P>(t, wp, wf, R, s); /* its first barriers order duel's reads of s.out before */
    duel(sh, O, R, s.out, qn);
    __syncthreads();
    load_rows(t, R, row0, a.B, a.b.obs, s);
    __syncthreads();
    forward<P>(t, wp, wf, R, s);
    duel(sh, O, R, s.out, qs);
    __syncthreads();
    row_losses(u, R, row0, qs, qn, qt, dq);
    __syncthreads();
    duel_back(sh, O, R, dq, s.out);
    __syncthreads();
    backward<P, true>(t, wf, R, s, partial + (size_t)blockIdx.x * packed);
}

/* The target's copies := the online's when due (dqn_fused_target_due). */
static __global__ void target_due_kernel(const float *wp, float *wpt, size_t packed,
                                         const float *wf, float *wft, size_t frags,
                                         const long long *count, long long every)
{
    vx_pdl_wait();
    if (count && (count[0] + 1) % every != 0) return;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < packed; i += stride)
        wpt[i] = wp[i];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < frags; i += stride)
        wft[i] = wf[i];
}

/* ---- the host side ------------------------------------------------------------------------- */

static int optin_of(vx_device *dev)
{
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               vx_device_index(dev)) != cudaSuccess)
        return 0;
    return optin;
}

extern "C" int dqn_fused_rows(const vx_qnet_layout *L, int loss, int batch, vx_device *dev,
                              char *why, size_t why_n)
{
    return vx_df_rows(L, loss, batch, (size_t)optin_of(dev), why, why_n);
}

extern "C" int dqn_fused_layers_take(const vx_qnet_layout *L, int loss, int tf32, vx_device *dev,
                                     char *why, size_t why_n)
{
    vx_pf_net t;
    vx_dl_plan p;
    size_t optin = (size_t)optin_of(dev);
    if (vx_df_rows(L, loss, 16, optin, why, why_n) <= 0) return 0;
    vx_df_layout(L, &t, NULL);
    vx_pf_frags(&t, tf32 ? 1 : 3, NULL, NULL);
    if (vx_dl_plan_make(&t, tf32 ? 1 : 3, optin, &p)) return 1;
    if (why) snprintf(why, why_n, "layers too wide for the layer-by-layer tiles");
    return 0;
}

extern "C" void dqn_fused_free(dqn_fused *f)
{
    if (!f) return;
    vx_mem_release(&f->mem);
    free(f);
}

extern "C" size_t dqn_fused_reserved(const dqn_fused *f) { return f->mem.bytes; }

/* Dynamic shared memory past 48 KB, up to the device's most (the limit is the kernel's, for the
 * whole process: a neighbour's wider network must not be refused). */
template <int P> static cudaError_t allow_smem(int bytes)
{
    return cudaFuncSetAttribute(update_kernel<P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                bytes);
}

extern "C" vx_status dqn_fused_create(const vx_qnet_layout *L, const vx_loss_shape *shape, int loss,
                                      int batch, int tf32, int layers, vx_device *dev,
                                      dqn_fused **out, vx_err *e)
{
    *out = NULL;
    vx_status st = vx_cuda_enter(dev, e);
    if (st) return st;
    int optin = optin_of(dev), passes = tf32 ? 1 : 3, rows;
    char why[96];
    dqn_fused *f = NULL;
    if (layers) rows = dqn_fused_layers_take(L, loss, tf32, dev, why, sizeof why) ? 16 : 0;
    else rows = vx_df_rows(L, loss, batch, (size_t)optin, why, sizeof why);
    if (!rows)
        return vx_err_set(e, VX_ERR_ARG, "dqn: the %s update does not take %s",
                          layers ? "layer-by-layer" : "fused", why);
    f = (dqn_fused *)calloc(1, sizeof *f);
    if (!f) return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    f->L = *L, f->shape = *shape, f->loss = loss, f->rows = rows;
    f->layers = layers, f->batch = batch;
    vx_mem_init(&f->mem, dev, "dqn fused update");
    if (layers) {
        vx_pf_net t;
        vx_df_layout(L, &t, NULL);
        vx_pf_frags(&t, passes, NULL, NULL);
        if (!vx_dl_plan_make(&t, passes, (size_t)optin, &f->plan)) {
            st = vx_err_set(e, VX_ERR_ARG, "dqn: the layer-by-layer update's tiles do not fit");
            goto fail;
        }
        st = vx_mem_alloc(&f->mem, vx_dl_act_floats(&t, batch) * 4, &f->act, e);
        if (st) goto fail;
    }
    st = copies_create<no_end>(
        &f->c, [&](net *t, int *src) { return vx_df_layout(L, t, src); }, passes, L->n_params,
        (batch + slice_rows(f) - 1) / slice_rows(f), dev, &f->mem, "dqn", e);
    if (!st) st = vx_mem_alloc(&f->mem, f->c.packed * 4, &f->wpt, e);
    if (!st) st = vx_mem_alloc(&f->mem, f->c.frags * 4, &f->wft, e);
    if (!st && layers) st = dqn_layers_prepare(passes, &f->plan, dev, &f->grid, e);
    if (st) goto fail;
    VX_CUDA_CHECK(passes == 1 ? allow_smem<1>(optin) : allow_smem<3>(optin));
    *out = f;
    return VX_OK;
fail:
    dqn_fused_free(f);
    return st;
}

extern "C" vx_status dqn_fused_pack(dqn_fused *f, const float *online, const float *target,
                                    cudaStream_t s, vx_err *e)
{
    vx_status st = copies_pack(&f->c, online, f->c.wp, f->c.wf, s, e);
    return st ? st : copies_pack(&f->c, target, f->wpt, f->wft, s, e);
}

extern "C" vx_status dqn_fused_pack_target(dqn_fused *f, const float *target, cudaStream_t s,
                                           vx_err *e)
{
    return copies_pack(&f->c, target, f->wpt, f->wft, s, e);
}

extern "C" vx_status dqn_fused_target_due(dqn_fused *f, const long long *count, long long every,
                                          cudaStream_t s, vx_err *e)
{
    vx_status st = VX_OK;
    /* a small grid striding over the copies: it runs after every update, copies after one in
     * `every` (learner_cuda.cu's target_due_kernel says why) */
    VX_CUDA_CHECK(vx_pdl_launch(target_due_kernel, dim3(32), dim3(256), 0, s,
                                (const float *)f->c.wp, f->wpt, f->c.packed, (const float *)f->c.wf,
                                f->wft, f->c.frags, count, every));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

extern "C" vx_status dqn_fused_grad(dqn_fused *f, const dqn_fused_args *a, cudaStream_t s,
                                    vx_err *e)
{
    vx_status st = VX_OK;
    const copies *c = &f->c;
    int blocks = (a->B + slice_rows(f) - 1) / slice_rows(f);
    size_t bytes = vx_df_smem(&c->nt, f->rows);
    update_args u;
    if (a->B < 1 || blocks > c->max_blocks || (f->layers && a->B > f->batch))
        return vx_err_set(e, VX_ERR_ARG, "dqn: a fused update of %d rows (at most %d)", a->B,
                          f->layers ? f->batch : c->max_blocks * f->rows);
    u.a = *a, u.shape = f->shape, u.kind = f->loss, u.O = f->L.out_dim;
    if (f->layers) return dqn_layers_grad(c, f->wpt, f->wft, &f->plan, f->act, f->grid, &u, s, e);
    VX_CUDA_CHECK(vx_pdl_launch(c->passes == 1 ? update_kernel<1> : update_kernel<3>, dim3(blocks),
                                dim3(THREADS), bytes, s, c->nt, (const float *)c->wp,
                                (const float *)c->wf, (const float *)f->wpt, (const float *)f->wft,
                                f->rows, u, c->partial, c->packed));
    VX_CUDA_LAUNCH_CHECK(s);
fail:
    return st;
}

extern "C" vx_status dqn_fused_step(dqn_fused *f, int B, float *grads, float *params,
                                    const vx_optim_view *o, cudaStream_t s, vx_err *e)
{
    int blocks = (B + slice_rows(f) - 1) / slice_rows(f);
    if (B < 1 || blocks > f->c.max_blocks)
        return vx_err_set(e, VX_ERR_ARG, "dqn: a fused update of %d rows (at most %d)", B,
                          f->c.max_blocks * slice_rows(f));
    return copies_sum_step(&f->c, blocks, grads, params, o, 0, no_end(), s, e);
}

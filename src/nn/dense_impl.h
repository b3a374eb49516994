/* dense_impl.h — the dense layer's CPU arithmetic, written once for any element type (the float
 * network vixen trains, and the float64 build tests check gradients on). The includer defines
 *   VX_T          element type
 *   VX_GEMM       cblas_sgemm or cblas_dgemm
 *   VX_NAME(x)    the prefix for the generated names
 * Row-major throughout; W [in × out]. */
#include <cblas.h>
#include <string.h>

/* y = x W + b (B × out), then ReLU if relu */
static inline void VX_NAME(dense_fwd)(const vx_dense *d, const VX_T *p, const VX_T *x, int B,
                                      VX_T *y, int relu)
{
    VX_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, d->out, d->in, 1, x, d->in, p + d->w,
            d->out, 0, y, d->out);
    const VX_T *bias = p + d->b;
    for (int r = 0; r < B; r++) { /* branch-free loops, so the compiler vectorises them */
        VX_T *row = y + (size_t)r * d->out;
        if (relu)
            for (int j = 0; j < d->out; j++) {
                VX_T v = row[j] + bias[j];
                row[j] = v > 0 ? v : 0;
            }
        else
            for (int j = 0; j < d->out; j++) row[j] += bias[j];
    }
}

/* Given dy (B × out, already masked by the ReLU derivative): when g is not NULL, dW = xᵀ dy and
 * db = Σ_rows dy; when dx is not NULL, dx (+)= dy Wᵀ (accumulating if accumulate). */
static inline void VX_NAME(dense_bwd)(const vx_dense *d, const VX_T *p, const VX_T *x, int B,
                                      const VX_T *dy, VX_T *g, VX_T *dx, int accumulate)
{
    if (g) {
        VX_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, d->in, d->out, B, 1, x, d->in, dy, d->out,
                0, g + d->w, d->out);
        VX_T *db = g + d->b;
        for (int j = 0; j < d->out; j++) db[j] = 0;
        for (int r = 0; r < B; r++)
            for (int j = 0; j < d->out; j++) db[j] += dy[(size_t)r * d->out + j];
    }
    if (dx)
        VX_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, B, d->in, d->out, 1, dy, d->out, p + d->w,
                d->out, accumulate ? 1 : 0, dx, d->in);
}

/* Zero the gradient where the forward output (after ReLU) was zero. A select, not a branch:
 * the compiler makes it a vector blend, where the branch (taken for about half the elements, at
 * random) was mispredicted so often that this loop was a fifth of a CPU PPO iteration. */
static inline void VX_NAME(relu_mask)(VX_T *dy, const VX_T *y, size_t n)
{
    for (size_t i = 0; i < n; i++) dy[i] = y[i] <= 0 ? 0 : dy[i];
}

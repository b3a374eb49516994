/* replay_cuda.cu — the replay buffer resident on the GPU: kernels and the device path of insert,
 * sample, rank refresh and update (the CUDA twin of replay_cpu.c; creation, fall-back and reads
 * are in replay_cuda_host.cu, save/load and snapshots in replay_cuda_file.cu).
 *
 * Layout: one pre-allocated ring in device memory — states and next states [capacity × D] float,
 * one 16-byte record of small fields per slot (reward, generation stamp, action, flags, n-step
 * count), the raw priority per slot, and the 16-ary float64 sum/min trees of replay_cpu.c, level
 * by level, shaped by replay_math.h. Cursor and size stay on the host (they only change at
 * insert, which the host orders). β, the running maximum priority, the RNG counter and the
 * counters live in `dev_state` in device memory, so no call reads anything back and the
 * sample → update sequence can be graph-captured. The draw positions, weights and rank masses
 * are replay_math.h's, the same functions the CPU calls.
 *
 * Kernels, one job each:
 *   insert_copy     new transitions into their slots, leaves at the running maximum priority;
 *   tree_rebuild    one block: the ancestors of a range of leaves, level by level (barriers
 *                   between levels are what makes each parent the exact sum of final children);
 *   sample_pick     one thread per draw: stratified draw, 16-ary descent, IS weight, small fields;
 *   sample_gather   the two states of each draw, coalesced along D; advances the RNG counter;
 *   update          stale stamps dropped, duplicates resolved (last entry wins, via an owner
 *                   array), leaves rewritten, then ancestors level by level.
 * Each kernel has a launcher taking the stream; each entry enters the device, checks its
 * arguments, launches on the caller's stream, and on any launch failure moves the buffer to the
 * CPU (replay_cuda_host.cu) and redoes the call there. */
#include "replay_cuda_internal.h"

#include <cub/cub.cuh>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A launch configuration that fails when a launch fault is injected (a real launch error). */
dim3 vx_rc_grid(size_t n, int block)
{
    if (vx_replay_fault_take(VX_FAULT_LAUNCH)) return dim3(0);
    return dim3((unsigned)((n + block - 1) / block));
}

static void note_stream(rc_buf *b, cudaStream_t s)
{
    b->last = s;
    b->have_last = 1;
}

/* ---- kernels -------------------------------------------------------------------------------- */

__device__ static void recompute(const dev_tree t, int l, size_t node)
{
    const double2 *cs = (const double2 *)(t.sum[l + 1] + node * FAN);
    const double2 *cm = (const double2 *)(t.min[l + 1] + node * FAN);
    double2 a[FAN / 2], b[FAN / 2];
#pragma unroll
    for (int c = 0; c < FAN / 2; c++) a[c] = cs[c], b[c] = cm[c]; /* all loads in flight */
    double s = 0, m = INFINITY;
#pragma unroll
    for (int c = 0; c < FAN / 2; c++) { /* the same order as the CPU: child 0, 1, 2, … */
        s += a[c].x;
        s += a[c].y;
        m = fmin(m, fmin(b[c].x, b[c].y));
    }
    t.sum[l][node] = s;
    t.min[l][node] = m;
}

static __global__ void insert_copy_kernel(vx_transitions t, size_t n, size_t start, size_t cap,
                                          int D, float *obs, float *next_obs, vx_slot_meta *meta,
                                          double *prio, dev_tree tree, double alpha, dev_state *ds,
                                          int proportional, size_t new_size)
{
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x == 0) ds->size = new_size; /* read by later kernels only, in stream order */
    if (x >= n * (size_t)D) return;
    size_t k = x / (size_t)D, d = x % (size_t)D, i = (start + k) % cap;
    obs[i * D + d] = t.obs[x];
    next_obs[i * D + d] = t.next_obs[x];
    if (d != 0) return;
    vx_slot_meta m = meta[i];
    for (int b = 0; b < VX_ACTION_BRANCHES; b++)
        m.action[b] = (uint8_t)t.actions[k * VX_ACTION_BRANCHES + b];
    m.reward = t.rewards[k];
    m.term = t.terminated[k];
    m.trunc = t.truncated[k];
    m.steps = t.steps ? t.steps[k] : 1;
    m.gen++;
    meta[i] = m;
    double p = ds->max_p;
    prio[i] = p;
    if (proportional) {
        double v = pow(p, alpha);
        tree.sum[tree.depth][i] = v;
        tree.min[tree.depth][i] = v > 0 ? v : INFINITY;
    }
}

/* One block: recomputes the ancestors of leaves [lo, lo + n) (n < capacity, no wrap; the caller
 * splits a wrapping range in two segments). */
static __global__ void tree_rebuild_kernel(dev_tree tree, size_t lo1, size_t n1, size_t lo2,
                                           size_t n2)
{
    for (int l = tree.depth - 1; l >= 0; l--) {
        int shift = FAN_SHIFT * (tree.depth - l);
        for (int seg = 0; seg < 2; seg++) {
            size_t lo = seg ? lo2 : lo1, n = seg ? n2 : n1;
            if (n == 0) continue;
            size_t a = lo >> shift, b = (lo + n - 1) >> shift;
            for (size_t node = a + threadIdx.x; node <= b; node += blockDim.x)
                recompute(tree, l, node);
        }
        __syncthreads();
    }
}

/* Leaf i of the whole leaf level: p^α from the raw priority below `size`, empty above. */
static __global__ void leaves_from_prio_kernel(const double *prio, size_t size, size_t width,
                                               dev_tree tree, double alpha)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= width) return;
    double v = i < size ? pow(prio[i], alpha) : 0.0;
    tree.sum[tree.depth][i] = v;
    tree.min[tree.depth][i] = v > 0 ? v : INFINITY;
}

/* Nodes [0, n) of level l from their children (one launch per level: the launch boundary is the
 * barrier between levels). */
static __global__ void tree_level_kernel(dev_tree tree, int l, size_t n)
{
    size_t node = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (node < n) recompute(tree, l, node);
}

static __global__ void sample_pick_kernel(size_t B, int proportional, uint64_t seed, dev_tree tree,
                                          const vx_slot_meta *meta, const dev_state *ds,
                                          vx_replay_batch out)
{
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= B) return;
    size_t i;
    float w = 1.0f;
    if (!proportional) {
        i = vx_replay_draw_slot(seed, ds->rng_block, j, (uint32_t)ds->size);
    } else {
        double total = tree.sum[0][0];
        double u = vx_replay_draw_u(seed, ds->rng_block, j, B, total);
        size_t node = 0;
        for (int l = 1; l <= tree.depth; l++) {
            /* all 16 children in one round trip (8 × 16-byte loads), then the scan in registers:
             * scanning the loads one by one made each level 16 dependent trips to memory */
            const double2 *cs = (const double2 *)(tree.sum[l] + node * FAN);
            double v[FAN];
#pragma unroll
            for (int c = 0; c < FAN / 2; c++) {
                double2 x = __ldg(cs + c);
                v[2 * c] = x.x;
                v[2 * c + 1] = x.y;
            }
            int pick = -1, last = -1;
#pragma unroll
            for (int c = 0; c < FAN; c++) {
                if (pick < 0 && v[c] > 0) {
                    last = c;
                    if (u < v[c]) pick = c;
                    else u -= v[c];
                }
            }
            if (pick < 0) { /* replay_cpu.c's rule; constant indices keep v in registers */
                pick = last;
#pragma unroll
                for (int c = 0; c < FAN; c++)
                    if (c == last) u = nextafter(v[c], 0.0);
            }
            node = node * FAN + (size_t)pick;
        }
        i = node;
        double P = tree.sum[tree.depth][i] / total, p_min = tree.min[0][0] / total;
        w = vx_replay_weight(P, p_min, ds->beta);
    }
    vx_slot_meta m = meta[i];
    out.index[j] = (uint32_t)i;
    out.gen[j] = m.gen;
    out.weights[j] = w;
    out.rewards[j] = m.reward;
    out.terminated[j] = m.term;
    out.truncated[j] = m.trunc;
    if (out.steps) out.steps[j] = m.steps;
    for (int b = 0; b < VX_ACTION_BRANCHES; b++)
        out.actions[j * VX_ACTION_BRANCHES + b] = m.action[b];
}

static __global__ void sample_gather_kernel(size_t B, int D, const float *obs,
                                            const float *next_obs, vx_replay_batch out,
                                            dev_state *ds)
{
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x == 0) ds->rng_block += B; /* after sample_pick, in stream order */
    if (x >= B * (size_t)D) return;
    size_t j = x / (size_t)D, d = x % (size_t)D, i = out.index[j];
    out.obs[x] = obs[i * D + d];
    out.next_obs[x] = next_obs[i * D + d];
}

/* The update, as a chain of kernels over the batch (spread over SMs; one block doing it all was
 * 46 µs at 1,024 entries): mark → leaves → one kernel per lower tree level → the top levels in
 * one block. Duplicate slots: the last entry wins (owner = the largest entry index). */
static __global__ void update_mark_kernel(const uint32_t *index, const uint32_t *gen,
                                          const float *td, size_t n, double eps,
                                          const vx_slot_meta *meta, int *owner, dev_state *ds)
{
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x, size = (size_t)ds->size;
    double p = 0;
    unsigned long long stale = 0, clamped = 0;
    if (k < n) {
        size_t i = index[k];
        if (i >= size || meta[i].gen != gen[k]) {
            stale = 1;
        } else {
            p = fabs((double)td[k]) + eps;
            if (!isfinite(p)) p = 0, clamped = 1;
            atomicMax(&owner[i], (int)k);
        }
    }
    for (int o = 16; o > 0; o >>= 1) { /* one atomic per warp, not per entry */
        p = fmax(p, __shfl_down_sync(0xffffffffu, p, o));
        stale += __shfl_down_sync(0xffffffffu, stale, o);
        clamped += __shfl_down_sync(0xffffffffu, clamped, o);
    }
    if ((threadIdx.x & 31) == 0) {
        if (p > 0) atomicMax(&ds->max_bits, (unsigned long long)__double_as_longlong(p));
        if (stale) atomicAdd(&ds->stale, stale);
        if (clamped) atomicAdd(&ds->clamped, clamped);
    }
}

static __global__ void update_leaf_kernel(const uint32_t *index, const uint32_t *gen,
                                          const float *td, size_t n, double alpha, double eps,
                                          int proportional, const vx_slot_meta *meta, double *prio,
                                          const int *owner, unsigned char *win, dev_tree tree,
                                          const dev_state *ds)
{
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    size_t i = index[k], size = (size_t)ds->size;
    win[k] = 0;
    if (i >= size || meta[i].gen != gen[k] || owner[i] != (int)k) return;
    win[k] = 1;
    double p = fabs((double)td[k]) + eps;
    if (!isfinite(p)) { /* the running maximum, this batch's finite priorities included */
        double b = __longlong_as_double((long long)ds->max_bits);
        p = b > ds->max_p ? b : ds->max_p;
    }
    prio[i] = p;
    if (proportional) {
        double v = pow(p, alpha);
        tree.sum[tree.depth][i] = v;
        tree.min[tree.depth][i] = v > 0 ? v : INFINITY;
    }
}

/* Level l's parents of the winners (equal parents are written with equal values). The first of
 * these kernels also folds the batch maximum into max_p and releases the owner marks. */
static __global__ void update_level_kernel(const uint32_t *index, size_t n,
                                           const unsigned char *win, int *owner, dev_tree tree,
                                           int l, int first, dev_state *ds)
{
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (first && k == 0) {
        double b = __longlong_as_double((long long)ds->max_bits);
        if (b > ds->max_p) ds->max_p = b;
        ds->max_bits = 0;
    }
    if (k >= n || !win[k]) return;
    if (first) owner[index[k]] = -1;
    if (l >= 0) recompute(tree, l, (size_t)index[k] >> (FAN_SHIFT * (tree.depth - l)));
}

/* Levels `top` .. 0 in one block: few nodes, barriers instead of launches. */
static __global__ void update_top_kernel(const uint32_t *index, size_t n, const unsigned char *win,
                                         dev_tree tree, int top)
{
    for (int l = top; l >= 0; l--) {
        int shift = FAN_SHIFT * (tree.depth - l);
        for (size_t k = threadIdx.x; k < n; k += blockDim.x)
            if (win[k]) recompute(tree, l, (size_t)index[k] >> shift);
        __syncthreads();
    }
}

static __global__ void iota_kernel(uint32_t *x, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (uint32_t)i;
}

static __global__ void rank_mass_kernel(double *w, size_t n, double alpha)
{
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) w[k] = vx_replay_rank_mass(k, alpha);
}

/* Rank-based draws: stratified u over the rank masses, the first rank whose cumulative mass
 * exceeds u (binary search), its slot from the sorted order. N: the order's length. */
static __global__ void sample_rank_kernel(size_t B, double alpha, uint64_t seed, const double *cdf,
                                          const uint32_t *order, const vx_slot_meta *meta,
                                          const dev_state *ds, vx_replay_batch out)
{
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= B) return;
    size_t N = (size_t)ds->order_n;
    double total = cdf[N - 1];
    double u = vx_replay_draw_u(seed, ds->rng_block, j, B, total);
    size_t k = vx_replay_cdf_find(cdf, N, u);
    size_t i = order[k];
    double P = vx_replay_rank_mass(k, alpha) / total;
    double p_min = vx_replay_rank_mass(N - 1, alpha) / total;
    vx_slot_meta m = meta[i];
    out.index[j] = (uint32_t)i;
    out.gen[j] = m.gen;
    out.weights[j] = vx_replay_weight(P, p_min, ds->beta);
    out.rewards[j] = m.reward;
    out.terminated[j] = m.term;
    out.truncated[j] = m.trunc;
    if (out.steps) out.steps[j] = m.steps;
    for (int b = 0; b < VX_ACTION_BRANCHES; b++)
        out.actions[j * VX_ACTION_BRANCHES + b] = m.action[b];
}

static __global__ void set_u64_kernel(unsigned long long *x, unsigned long long v) { *x = v; }
static __global__ void set_double_kernel(double *x, double v) { *x = v; }
static __global__ void set_state_kernel(dev_state *ds, dev_state v) { *ds = v; }

static __global__ void fill_kernel(double *x, size_t n, double v)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

/* ---- setup and rebuilds (queued on the stream given; the caller synchronises) ---------------- */

cudaError_t vx_rc_init_device(vx_replay *r, cudaStream_t s)
{
    rc_buf *b = rcb(r);
    size_t C = r->cfg.capacity;
    cudaError_t rc = cudaMemsetAsync(b->meta, 0, C * sizeof(vx_slot_meta), s);
    if (!rc) rc = cudaMemsetAsync(b->prio, 0, C * sizeof(double), s);
    if (!rc) rc = cudaMemsetAsync(b->owner, 0xff, C * sizeof(int), s); /* −1: no owner */
    for (int l = 0; !rc && b->tree.sum[0] && l <= b->tree.depth; l++) {
        size_t w = b->shape.width[l];
        rc = cudaMemsetAsync(b->tree.sum[l], 0, w * sizeof(double), s);
        if (!rc) {
            fill_kernel<<<vx_rc_grid(w, BLOCK), BLOCK, 0, s>>>(b->tree.min[l], w, INFINITY);
            rc = cudaGetLastError();
        }
    }
    if (!rc && b->iota) {
        iota_kernel<<<vx_rc_grid(C, BLOCK), BLOCK, 0, s>>>(b->iota, C);
        rc = cudaGetLastError();
    }
    if (!rc) {
        dev_state v;
        memset(&v, 0, sizeof v);
        v.max_p = 1.0;
        v.beta = b->host_beta;
        set_state_kernel<<<1, 1, 0, s>>>(b->ds, v); /* by value: no host buffer to keep alive */
        rc = cudaGetLastError();
    }
    return rc;
}

cudaError_t vx_rc_rebuild_tree(vx_replay *r, size_t size, cudaStream_t s)
{
    rc_buf *b = rcb(r);
    if (r->cfg.kind != VX_REPLAY_PROPORTIONAL) return cudaSuccess;
    int depth = b->tree.depth;
    size_t w = b->shape.width[depth];
    leaves_from_prio_kernel<<<vx_rc_grid(w, BLOCK), BLOCK, 0, s>>>(b->prio, size, w, b->tree,
                                                                   r->cfg.alpha);
    cudaError_t rc = cudaGetLastError();
    for (int l = depth - 1; !rc && l >= 0; l--) {
        size_t n = b->shape.width[l + 1] / FAN; /* the nodes that have children */
        tree_level_kernel<<<vx_rc_grid(n, BLOCK), BLOCK, 0, s>>>(b->tree, l, n);
        rc = cudaGetLastError();
    }
    return rc;
}

cudaError_t vx_rc_set_state(vx_replay *r, const dev_state *v, cudaStream_t s)
{
    set_state_kernel<<<1, 1, 0, s>>>(rcb(r)->ds, *v);
    return cudaGetLastError();
}

/* ---- entries ------------------------------------------------------------------------------- */

static vx_status launch_failed(vx_replay *r, const char *what, cudaError_t rc, vx_err *e)
{
    char why[200];
    snprintf(why, sizeof why, "%s kernel launch failed (%s)", what, cudaGetErrorString(rc));
    return vx_rc_fall_back(r, why, e);
}

vx_status vx_rc_insert(vx_replay *r, const vx_transitions *t, size_t n, vx_stream vs, vx_err *e)
{
    rc_buf *b = rcb(r);
    cudaStream_t s = (cudaStream_t)vs;
    if (n == 0) return VX_OK;
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device) return vx_rc_insert_cpu(r, t, n, s, e);
    note_stream(b, s);
    size_t C = r->cfg.capacity;
    int D = r->cfg.obs_dim, prop = r->cfg.kind == VX_REPLAY_PROPORTIONAL;
    /* more than a whole ring: only the last C land; the earlier ones are overwritten anyway */
    vx_transitions tt = *t;
    size_t skip = n > C ? n - C : 0;
    if (skip) {
        tt.obs += skip * D, tt.next_obs += skip * D, tt.actions += skip * VX_ACTION_BRANCHES,
            tt.rewards += skip;
        tt.terminated += skip, tt.truncated += skip;
        if (tt.steps) tt.steps += skip;
    }
    size_t m = n - skip, start = (b->cursor + skip) % C;
    insert_copy_kernel<<<vx_rc_grid(m * D, BLOCK), BLOCK, 0, s>>>(
        tt, m, start, C, D, b->obs, b->next_obs, b->meta, b->prio, b->tree, r->cfg.alpha, b->ds,
        prop, b->size + n < C ? b->size + n : C);
    cudaError_t rc = cudaGetLastError();
    if (!rc && prop) {
        size_t n1 = start + m <= C ? m : C - start, n2 = m - n1;
        tree_rebuild_kernel<<<vx_rc_grid(1, 1), 1024, 0, s>>>(b->tree, start, n1, 0, n2);
        rc = cudaGetLastError();
    }
    if (rc) {
        st = launch_failed(r, "insert", rc, e);
        return st ? st : vx_rc_insert_cpu(r, t, n, s, e);
    }
    b->cursor = (b->cursor + n) % C;
    b->size = b->size + n < C ? b->size + n : C;
    b->inserted += n;
    return VX_OK;
}

vx_status vx_rc_set_beta(vx_replay *r, double beta, vx_stream vs, vx_err *e)
{
    rc_buf *b = rcb(r);
    cudaStream_t s = (cudaStream_t)vs;
    b->host_beta = beta;
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device) return vx_replay_set_beta(b->cpu, beta, NULL, e);
    note_stream(b, s);
    /* the value travels as a launch argument: nothing on the host to keep alive or capture */
    set_double_kernel<<<1, 1, 0, s>>>(&b->ds->beta, beta);
    cudaError_t rc = cudaGetLastError();
    if (rc) {
        st = launch_failed(r, "set beta", rc, e);
        return st ? st : vx_replay_set_beta(b->cpu, beta, NULL, e);
    }
    return VX_OK;
}

/* The rank order: a stable radix sort of (priority, slot) pairs, descending — ties keep slot
 * order, as the CPU's comparison does — and, when the buffer's size changed, the cumulative rank
 * masses Σ_{k<=r} k^−α (a device scan). Every `rank_refresh` sample calls, decided by the host. */
cudaError_t vx_rc_sort_scratch(size_t C, size_t *bytes)
{
    size_t a = 0, s = 0;
    cudaError_t rc =
        cub::DeviceRadixSort::SortPairsDescending(NULL, a, (const double *)NULL, (double *)NULL,
                                                  (const uint32_t *)NULL, (uint32_t *)NULL, (int)C);
    if (!rc)
        rc = cub::DeviceScan::InclusiveSum(NULL, s, (const double *)NULL, (double *)NULL, (int)C);
    *bytes = a > s ? a : s;
    return rc;
}

cudaError_t vx_rc_rank_refresh(vx_replay *r, cudaStream_t s)
{
    rc_buf *b = rcb(r);
    int n = (int)b->size;
    size_t tmp = b->cub_tmp_n;
    cudaError_t rc = cub::DeviceRadixSort::SortPairsDescending(
        b->cub_tmp, tmp, (const double *)b->prio, b->keys_out, (const uint32_t *)b->iota, b->order,
        n, 0, (int)(sizeof(double) * 8), s);
    if (!rc && b->cdf_n != b->size) {
        rank_mass_kernel<<<vx_rc_grid(b->size, BLOCK), BLOCK, 0, s>>>(b->rank_w, b->size,
                                                                      r->cfg.alpha);
        rc = cudaGetLastError();
        tmp = b->cub_tmp_n;
        if (!rc)
            rc = cub::DeviceScan::InclusiveSum(b->cub_tmp, tmp, (const double *)b->rank_w, b->cdf,
                                               n, s);
        if (!rc) b->cdf_n = b->size;
    }
    if (!rc) {
        set_u64_kernel<<<1, 1, 0, s>>>(&b->ds->order_n, b->size);
        rc = cudaGetLastError();
    }
    if (!rc) {
        b->order_n = b->size;
        b->calls_since_refresh = 0;
    }
    return rc;
}

vx_status vx_rc_rank_refresh_entry(vx_replay *r, vx_stream vs, vx_err *e)
{
    rc_buf *b = rcb(r);
    cudaStream_t s = (cudaStream_t)vs;
    if (r->cfg.kind != VX_REPLAY_RANK) return VX_OK;
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device) return vx_replay_rank_refresh(b->cpu, NULL, e);
    if (b->size == 0) return VX_OK;
    note_stream(b, s);
    cudaError_t rc = vx_rc_rank_refresh(r, s);
    if (rc) {
        st = launch_failed(r, "rank sort", rc, e);
        return st ? st : vx_replay_rank_refresh(b->cpu, NULL, e);
    }
    return VX_OK;
}

vx_status vx_rc_sample(vx_replay *r, size_t B, vx_replay_batch *out, vx_stream vs, vx_err *e)
{
    rc_buf *b = rcb(r);
    cudaStream_t s = (cudaStream_t)vs;
    if (B == 0) return VX_OK;
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device) return vx_rc_sample_cpu(r, B, out, s, e); /* the CPU keeps its own size */
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (b->size == 0 && cudaStreamIsCapturing(s, &cs) != cudaSuccess) cudaGetLastError();
    /* captured into a graph, the sample runs later (after inserts): the size is read there */
    if (b->size == 0 && cs == cudaStreamCaptureStatusNone)
        return vx_err_set(e, VX_ERR_ARG, "replay: sample from an empty buffer");
    note_stream(b, s);
    int D = r->cfg.obs_dim, prop = r->cfg.kind == VX_REPLAY_PROPORTIONAL;
    cudaError_t rc = cudaSuccess;
    if (r->cfg.kind == VX_REPLAY_RANK) {
        if (b->order_n == 0 || b->calls_since_refresh >= r->cfg.rank_refresh)
            rc = vx_rc_rank_refresh(r, s);
        b->calls_since_refresh++;
        if (!rc) {
            sample_rank_kernel<<<vx_rc_grid(B, BLOCK), BLOCK, 0, s>>>(
                B, r->cfg.alpha, r->cfg.seed, b->cdf, b->order, b->meta, b->ds, *out);
            rc = cudaGetLastError();
        }
    } else {
        sample_pick_kernel<<<vx_rc_grid(B, BLOCK), BLOCK, 0, s>>>(B, prop, r->cfg.seed, b->tree,
                                                                  b->meta, b->ds, *out);
        rc = cudaGetLastError();
    }
    if (!rc) {
        sample_gather_kernel<<<vx_rc_grid(B * D, BLOCK), BLOCK, 0, s>>>(B, D, b->obs, b->next_obs,
                                                                        *out, b->ds);
        rc = cudaGetLastError();
    }
    if (rc) {
        st = launch_failed(r, "sample", rc, e);
        return st ? st : vx_rc_sample_cpu(r, B, out, s, e);
    }
    return VX_OK;
}

vx_status vx_rc_update(vx_replay *r, const uint32_t *index, const uint32_t *gen, const float *td,
                       size_t n, vx_stream vs, vx_err *e)
{
    rc_buf *b = rcb(r);
    cudaStream_t s = (cudaStream_t)vs;
    if (r->cfg.kind == VX_REPLAY_UNIFORM || n == 0) return VX_OK;
    vx_status st = vx_cuda_enter(r->dev, e);
    if (st) return st;
    if (!b->on_device) return vx_rc_update_cpu(r, index, gen, td, n, s, e);
    note_stream(b, s);
    int prop = r->cfg.kind == VX_REPLAY_PROPORTIONAL, depth = b->tree.depth;
    for (size_t off = 0; off < n; off += UPDATE_MAX) {
        size_t m = n - off < UPDATE_MAX ? n - off : UPDATE_MAX;
        const uint32_t *ix = index + off, *gn = gen + off;
        const float *t = td + off;
        dim3 grid = vx_rc_grid(m, BLOCK);
        update_mark_kernel<<<grid, BLOCK, 0, s>>>(ix, gn, t, m, r->cfg.eps, b->meta, b->owner,
                                                  b->ds);
        cudaError_t rc = cudaGetLastError();
        if (!rc) {
            update_leaf_kernel<<<grid, BLOCK, 0, s>>>(ix, gn, t, m, r->cfg.alpha, r->cfg.eps, prop,
                                                      b->meta, b->prio, b->owner, b->win, b->tree,
                                                      b->ds);
            rc = cudaGetLastError();
        }
        /* lower levels one launch each (down to level 3, or all when the tree is shallow), then
         * the top three levels in one block; a tree of depth 0 (capacity 1) has no ancestors */
        int top = depth - 1 < 2 ? depth - 1 : 2;
        for (int l = depth - 1, first = 1; !rc && l >= 0; l--, first = 0) {
            if (l <= top && !first) {
                update_top_kernel<<<1, 1024, 0, s>>>(ix, m, b->win, b->tree, l);
                rc = cudaGetLastError();
                break;
            }
            update_level_kernel<<<grid, BLOCK, 0, s>>>(ix, m, b->win, b->owner, b->tree, l, first,
                                                       b->ds);
            rc = cudaGetLastError();
        }
        if (!rc && depth == 0) { /* still fold the maximum and release the marks */
            update_level_kernel<<<grid, BLOCK, 0, s>>>(ix, m, b->win, b->owner, b->tree, -1, 1,
                                                       b->ds);
            rc = cudaGetLastError();
        }
        if (rc) {
            st = launch_failed(r, "update", rc, e);
            return st ? st : vx_rc_update_cpu(r, ix, gn, t, n - off, s, e);
        }
    }
    return VX_OK;
}

/* replay_cuda.cu — the replay buffer resident on the GPU (the CUDA twin of replay_cpu.c).
 *
 * Layout: one pre-allocated ring in device memory — states and next states [capacity × D] float,
 * one 16-byte record of small fields per slot (reward, generation stamp, action, flags, n-step
 * count), the raw priority per slot, and the 16-ary float64 sum/min trees of replay_cpu.c, level
 * by level. Cursor and size stay on the host (they only change at insert, which the host orders).
 * β, the running maximum priority, the RNG counter and the counters live in `dev_state` in device
 * memory, so no call reads anything back and the sample → update sequence can be graph-captured.
 *
 * Kernels, one job each:
 *   insert_copy     new transitions into their slots, leaves at the running maximum priority;
 *   tree_rebuild    one block: the ancestors of a range of leaves, level by level (barriers
 *                   between levels are what makes each parent the exact sum of final children);
 *   sample_pick     one thread per draw: stratified draw, 16-ary descent, IS weight, small fields;
 *   sample_gather   the two states of each draw, coalesced along D; advances the RNG counter;
 *   update          one block: stale stamps dropped, duplicates resolved (last entry wins, via an
 *                   owner array), leaves rewritten, then ancestors level by level.
 * Each kernel has a launcher taking the stream; each entry checks its arguments, launches, and on
 * any launch failure moves the buffer to the CPU (replay_cuda_host.cu) and redoes the call there. */
#include "vixen/philox.h"
#include "vixen/replay_cuda.h"
#include "../util/cuda_check.h"
#include "replay_internal.h"

#include <cub/cub.cuh>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "replay_cuda_internal.h"

static vx_fault g_fault;
void vx_replay_cuda_inject_fault(vx_fault f) { g_fault = f; }

/* A launch configuration that fails when a launch fault is injected (a real launch error). */
static dim3 grid_of(size_t n, int block)
{
    if (g_fault == VX_FAULT_LAUNCH) {
        g_fault = VX_FAULT_NONE;
        return dim3(0);
    }
    return dim3((unsigned)((n + block - 1) / block));
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
                                          double *prio, dev_tree tree, double alpha,
                                          dev_state *ds, int proportional, size_t new_size)
{
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x == 0) ds->size = new_size; /* read by later kernels only, in stream order */
    if (x >= n * (size_t)D) return;
    size_t k = x / (size_t)D, d = x % (size_t)D, i = (start + k) % cap;
    obs[i * D + d] = t.obs[x];
    next_obs[i * D + d] = t.next_obs[x];
    if (d != 0) return;
    vx_slot_meta m = meta[i];
    for (int b = 0; b < 3; b++) m.action[b] = (uint8_t)t.actions[k * 3 + b];
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
 * splits a wrapping range in two launches' worth of ranges, passed as two segments). */
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

static __global__ void sample_pick_kernel(size_t B, int proportional, uint64_t seed,
                                          dev_tree tree, const vx_slot_meta *meta,
                                          const dev_state *ds, vx_replay_batch out)
{
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= B) return;
    vx_rng g = vx_rng_make(seed, GPU_STREAM, ds->rng_block + j);
    size_t i;
    float w = 1.0f;
    if (!proportional) {
        i = vx_rng_below(&g, (uint32_t)ds->size);
    } else {
        double total = tree.sum[0][0];
        double u = ((double)j + vx_rng_uniform_double(&g)) * (total / (double)B);
        if (u >= total) u = nextafter(total, 0.0);
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
            if (pick < 0) {
                pick = last;
#pragma unroll
                for (int c = 0; c < FAN; c++)
                    if (c == last) u = nextafter(v[c], 0.0);
            }
            node = node * FAN + (size_t)pick;
        }
        i = node;
        double P = tree.sum[tree.depth][i] / total, p_min = tree.min[0][0] / total;
        w = powf((float)(P / p_min), (float)-ds->beta);
        w = w < 1.0f ? w : 1.0f;
    }
    vx_slot_meta m = meta[i];
    out.index[j] = (uint32_t)i;
    out.gen[j] = m.gen;
    out.weights[j] = w;
    out.rewards[j] = m.reward;
    out.terminated[j] = m.term;
    out.truncated[j] = m.trunc;
    if (out.steps) out.steps[j] = m.steps;
    for (int b = 0; b < 3; b++) out.actions[j * 3 + b] = m.action[b];
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
                                          const float *td, size_t n, double alpha,
                                          double eps, int proportional, const vx_slot_meta *meta,
                                          double *prio, const int *owner, unsigned char *win,
                                          dev_tree tree, const dev_state *ds)
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
static __global__ void update_level_kernel(const uint32_t *index, size_t n, const unsigned char *win,
                                           int *owner, dev_tree tree, int l, int first,
                                           dev_state *ds)
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
    if (k < n) w[k] = pow((double)(k + 1), -alpha);
}

/* Rank-based draws: stratified u over the rank masses, the first rank whose cumulative mass
 * exceeds u (binary search), its slot from the sorted order. N: the order's length. */
static __global__ void sample_rank_kernel(size_t B, double alpha, uint64_t seed,
                                          const double *cdf, const uint32_t *order,
                                          const vx_slot_meta *meta, const dev_state *ds,
                                          vx_replay_batch out)
{
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= B) return;
    vx_rng g = vx_rng_make(seed, GPU_STREAM, ds->rng_block + j);
    size_t N = (size_t)ds->order_n;
    double total = cdf[N - 1];
    double u = ((double)j + vx_rng_uniform_double(&g)) * (total / (double)B);
    if (u >= total) u = nextafter(total, 0.0);
    size_t lo = 0, hi = N - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    size_t i = order[lo];
    double P = pow((double)(lo + 1), -alpha) / total, p_min = pow((double)N, -alpha) / total;
    float w = powf((float)(P / p_min), (float)-ds->beta);
    vx_slot_meta m = meta[i];
    out.index[j] = (uint32_t)i;
    out.gen[j] = m.gen;
    out.weights[j] = w < 1.0f ? w : 1.0f;
    out.rewards[j] = m.reward;
    out.terminated[j] = m.term;
    out.truncated[j] = m.trunc;
    if (out.steps) out.steps[j] = m.steps;
    for (int b = 0; b < 3; b++) out.actions[j * 3 + b] = m.action[b];
}

static __global__ void set_u64_kernel(unsigned long long *x, unsigned long long v) { *x = v; }

static __global__ void fill_kernel(double *x, size_t n, double v)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}




/* ---- entries ------------------------------------------------------------------------------- */

extern "C" vx_status vx_replay_cuda_create(const vx_replay_cfg *cfg, vx_replay_cuda **out,
                                           vx_err *e)
{
    *out = NULL;
    vx_replay *probe; /* the same argument checks as the CPU buffer, on a tiny one */
    vx_replay_cfg small = *cfg;
    small.capacity = 1;
    vx_status st = vx_replay_create(&small, &probe, e);
    if (st) return st;
    vx_replay_free(probe);
    if (cfg->capacity > ((size_t)1 << 31))
        return vx_err_set(e, VX_ERR_ARG, "replay: capacity %zu out of range", cfg->capacity);
    vx_replay_cuda *r = (vx_replay_cuda *)calloc(1, sizeof *r);
    if (!r) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory");
    r->cfg = *cfg;
    r->host_beta = 0.4;
    size_t C = cfg->capacity, D = (size_t)cfg->obs_dim, bytes = 0;
    cudaError_t rc = cudaSuccess;
#define DEV_ALLOC(ptr, n)                                                                          \
    do {                                                                                           \
        size_t nb_ = (n);                                                                          \
        bytes += nb_;                                                                              \
        if (rc == cudaSuccess) rc = g_fault == VX_FAULT_ALLOC ? cudaErrorMemoryAllocation          \
                                                             : cudaMalloc((void **)&(ptr), nb_);   \
    } while (0)
    DEV_ALLOC(r->obs, C * D * sizeof(float));
    DEV_ALLOC(r->next_obs, C * D * sizeof(float));
    DEV_ALLOC(r->meta, C * sizeof(vx_slot_meta));
    DEV_ALLOC(r->prio, C * sizeof(double));
    DEV_ALLOC(r->owner, C * sizeof(int));
    DEV_ALLOC(r->win, UPDATE_MAX);
    DEV_ALLOC(r->ds, sizeof(dev_state));
    size_t widths[LEVELS] = {0};
    if (cfg->kind == VX_REPLAY_PROPORTIONAL) {
        size_t leaves = 1;
        int depth = 0;
        while (leaves < C) leaves *= FAN, depth++;
        r->tree.depth = depth;
        size_t width = (C + FAN - 1) / FAN * FAN;
        for (int l = depth; l >= 0; l--) {
            if (l == 0) width = 1;
            widths[l] = width;
            DEV_ALLOC(r->tree.sum[l], width * sizeof(double));
            DEV_ALLOC(r->tree.min[l], width * sizeof(double));
            width = ((width + FAN - 1) / FAN + FAN - 1) / FAN * FAN;
        }
    }
    if (cfg->kind == VX_REPLAY_RANK) {
        DEV_ALLOC(r->order, C * sizeof(uint32_t));
        DEV_ALLOC(r->iota, C * sizeof(uint32_t));
        DEV_ALLOC(r->cdf, C * sizeof(double));
        DEV_ALLOC(r->rank_w, C * sizeof(double));
        DEV_ALLOC(r->keys_out, C * sizeof(double));
        /* the sort's and the scan's scratch, sized once for the whole capacity */
        size_t a = 0, b = 0;
        if (rc == cudaSuccess)
            rc = cub::DeviceRadixSort::SortPairsDescending(NULL, a, (const double *)NULL, (double *)NULL,
                                                           (const uint32_t *)NULL, (uint32_t *)NULL,
                                                           (int)C);
        if (rc == cudaSuccess)
            rc = cub::DeviceScan::InclusiveSum(NULL, b, (const double *)NULL, (double *)NULL, (int)C);
        r->cub_tmp_n = a > b ? a : b;
        DEV_ALLOC(r->cub_tmp, r->cub_tmp_n);
        if (rc == cudaSuccess) {
            iota_kernel<<<grid_of(C, BLOCK), BLOCK>>>(r->iota, C);
            rc = cudaGetLastError();
        }
    }
#undef DEV_ALLOC
    if (g_fault == VX_FAULT_ALLOC) g_fault = VX_FAULT_NONE;
    if (rc == cudaSuccess) rc = cudaMemset(r->meta, 0, C * sizeof(vx_slot_meta));
    if (rc == cudaSuccess) rc = cudaMemset(r->prio, 0, C * sizeof(double));
    if (rc == cudaSuccess) rc = cudaMemset(r->owner, 0xff, C * sizeof(int)); /* −1: no owner */
    for (int l = 0; rc == cudaSuccess && l <= r->tree.depth && r->tree.sum[0]; l++) {
        rc = cudaMemset(r->tree.sum[l], 0, widths[l] * sizeof(double));
        if (rc == cudaSuccess) {
            fill_kernel<<<grid_of(widths[l], BLOCK), BLOCK>>>(r->tree.min[l], widths[l], INFINITY);
            rc = cudaGetLastError();
        }
    }
    if (rc == cudaSuccess) {
        dev_state ds;
        memset(&ds, 0, sizeof ds);
        ds.max_p = 1.0;
        ds.beta = 0.4;
        rc = cudaMemcpy(r->ds, &ds, sizeof ds, cudaMemcpyHostToDevice);
    }
    if (rc == cudaSuccess) rc = cudaDeviceSynchronize();
    if (rc != cudaSuccess) {
        char why[256];
        snprintf(why, sizeof why, "device allocation of %.1f MB failed (%s)", bytes / 1e6,
                 cudaGetErrorString(rc));
        cudaGetLastError();
        st = vx_rc_fall_back(r, why, e);
        if (st) {
            vx_rc_free_device(r);
            free(r);
            return st;
        }
    } else {
        r->on_device = 1;
    }
    *out = r;
    return VX_OK;
}

extern "C" void vx_replay_cuda_free(vx_replay_cuda *r)
{
    if (!r) return;
    vx_rc_free_device(r);
    vx_replay_free(r->cpu);
    free(r->stage);
    free(r);
}

extern "C" int vx_replay_cuda_on_device(const vx_replay_cuda *r) { return r->on_device; }

extern "C" size_t vx_replay_cuda_size(const vx_replay_cuda *r)
{
    if (r->on_device) return r->size;
    vx_replay_stats st;
    vx_replay_stats_get(r->cpu, &st);
    return st.size;
}


extern "C" vx_status vx_replay_cuda_insert(vx_replay_cuda *r, const vx_transitions *t, size_t n,
                                           cudaStream_t s, vx_err *e)
{
    if (n == 0) return VX_OK;
    if (!r->on_device) return vx_rc_insert_cpu(r, t, n, e);
    size_t C = r->cfg.capacity;
    int D = r->cfg.obs_dim, prop = r->cfg.kind == VX_REPLAY_PROPORTIONAL;
    /* more than a whole ring: only the last C land; the earlier ones are overwritten anyway */
    vx_transitions tt = *t;
    size_t skip = n > C ? n - C : 0;
    if (skip) {
        tt.obs += skip * D, tt.next_obs += skip * D, tt.actions += skip * 3, tt.rewards += skip;
        tt.terminated += skip, tt.truncated += skip;
        if (tt.steps) tt.steps += skip;
    }
    size_t m = n - skip, start = (r->cursor + skip) % C;
    insert_copy_kernel<<<grid_of(m * D, BLOCK), BLOCK, 0, s>>>(
        tt, m, start, C, D, r->obs, r->next_obs, r->meta, r->prio, r->tree, r->cfg.alpha, r->ds, prop,
        r->size + n < C ? r->size + n : C);
    cudaError_t rc = cudaGetLastError();
    if (!rc && prop) {
        size_t n1 = start + m <= C ? m : C - start, n2 = m - n1;
        tree_rebuild_kernel<<<grid_of(1, 1), 1024, 0, s>>>(r->tree, start, n1, 0, n2);
        rc = cudaGetLastError();
    }
    if (rc) {
        char why[200];
        snprintf(why, sizeof why, "insert kernel launch failed (%s)", cudaGetErrorString(rc));
        vx_status st = vx_rc_fall_back(r, why, e);
        return st ? st : vx_rc_insert_cpu(r, t, n, e);
    }
    r->cursor = (r->cursor + n) % C;
    r->size = r->size + n < C ? r->size + n : C;
    r->inserted += n;
    return VX_OK;
}

static __global__ void leaves_from_prio_kernel(const double *prio, size_t n, dev_tree tree,
                                                double alpha)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = pow(prio[i], alpha);
    tree.sum[tree.depth][i] = v;
    tree.min[tree.depth][i] = v > 0 ? v : INFINITY;
}

vx_status vx_rc_upload(vx_replay_cuda *r, const vx_replay_raw *raw, vx_err *e)
{
    vx_status st = VX_OK;
    size_t C = r->cfg.capacity, D = (size_t)r->cfg.obs_dim, n = raw->size;
    dev_state ds;
    VX_CUDA_CHECK(cudaDeviceSynchronize());
    VX_CUDA_CHECK(cudaMemcpy(&ds, r->ds, sizeof ds, cudaMemcpyDeviceToHost));
    VX_CUDA_CHECK(cudaMemcpy(r->obs, raw->obs, n * D * 4, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(r->next_obs, raw->next_obs, n * D * 4, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(r->meta, raw->meta, C * sizeof(vx_slot_meta), cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaMemcpy(r->prio, raw->prio, n * 8, cudaMemcpyHostToDevice));
    if (r->cfg.kind == VX_REPLAY_PROPORTIONAL && n > 0) {
        leaves_from_prio_kernel<<<grid_of(n, BLOCK), BLOCK>>>(r->prio, n, r->tree, r->cfg.alpha);
        VX_CUDA_LAUNCH_CHECK();
        tree_rebuild_kernel<<<1, 1024>>>(r->tree, 0, n, 0, 0);
        VX_CUDA_LAUNCH_CHECK();
    }
    ds.max_p = raw->max_p;
    ds.rng_block = raw->draws;
    ds.clamped = raw->clamped;
    ds.stale = raw->stale;
    ds.size = n;
    ds.order_n = 0;
    VX_CUDA_CHECK(cudaMemcpy(r->ds, &ds, sizeof ds, cudaMemcpyHostToDevice));
    VX_CUDA_CHECK(cudaDeviceSynchronize());
    r->size = n, r->cursor = raw->cursor, r->inserted = raw->inserted;
    r->cfg.seed = raw->seed;
    r->order_n = 0; /* rank: the next sample sorts */
fail:
    return st;
}

extern "C" vx_status vx_replay_cuda_set_beta(vx_replay_cuda *r, double beta, cudaStream_t s,
                                             vx_err *e)
{
    r->host_beta = beta;
    if (!r->on_device) return VX_OK;
    /* a kernel-free update: the value travels as a launch argument of a one-thread fill */
    fill_kernel<<<1, 1, 0, s>>>(&r->ds->beta, 1, beta);
    cudaError_t rc = cudaGetLastError();
    if (rc) return vx_err_set(e, VX_ERR_CUDA, "replay: set beta: %s", cudaGetErrorString(rc));
    return VX_OK;
}


/* The rank order: a stable radix sort of (priority, slot) pairs, descending — ties keep slot
 * order, as the CPU's comparison does — and, when the buffer's size changed, the cumulative rank
 * masses Σ_{k<=r} k^−α (a device scan). Every `rank_refresh` sample calls, decided by the host. */
cudaError_t vx_rc_rank_refresh(vx_replay_cuda *r, cudaStream_t s)
{
    int n = (int)r->size;
    size_t tmp = r->cub_tmp_n;
    cudaError_t rc = cub::DeviceRadixSort::SortPairsDescending(
        r->cub_tmp, tmp, (const double *)r->prio, r->keys_out, (const uint32_t *)r->iota, r->order,
        n, 0, (int)(sizeof(double) * 8), s);
    if (!rc && r->cdf_n != r->size) {
        rank_mass_kernel<<<grid_of(r->size, BLOCK), BLOCK, 0, s>>>(r->rank_w, r->size, r->cfg.alpha);
        rc = cudaGetLastError();
        tmp = r->cub_tmp_n;
        if (!rc) rc = cub::DeviceScan::InclusiveSum(r->cub_tmp, tmp, (const double *)r->rank_w, r->cdf, n, s);
        if (!rc) r->cdf_n = r->size;
    }
    if (!rc) {
        set_u64_kernel<<<1, 1, 0, s>>>(&r->ds->order_n, r->size);
        rc = cudaGetLastError();
    }
    if (!rc) {
        r->order_n = r->size;
        r->calls_since_refresh = 0;
    }
    return rc;
}

extern "C" vx_status vx_replay_cuda_rank_refresh(vx_replay_cuda *r, cudaStream_t s, vx_err *e)
{
    if (r->cfg.kind != VX_REPLAY_RANK || !r->on_device || r->size == 0) return VX_OK;
    cudaError_t rc = vx_rc_rank_refresh(r, s);
    if (rc) return vx_err_set(e, VX_ERR_CUDA, "replay: rank sort: %s", cudaGetErrorString(rc));
    return VX_OK;
}

extern "C" vx_status vx_replay_cuda_sample(vx_replay_cuda *r, size_t B, vx_replay_batch *out,
                                           cudaStream_t s, vx_err *e)
{
    if (B == 0) return VX_OK;
    if (!r->on_device) return vx_rc_sample_cpu(r, B, out, e); /* the CPU buffer keeps its own size */
    if (r->size == 0) return vx_err_set(e, VX_ERR_ARG, "replay: sample from an empty buffer");
    int D = r->cfg.obs_dim, prop = r->cfg.kind == VX_REPLAY_PROPORTIONAL;
    cudaError_t rc = cudaSuccess;
    if (r->cfg.kind == VX_REPLAY_RANK) {
        if (r->order_n == 0 || r->calls_since_refresh >= r->cfg.rank_refresh)
            rc = vx_rc_rank_refresh(r, s);
        r->calls_since_refresh++;
        if (!rc) {
            sample_rank_kernel<<<grid_of(B, BLOCK), BLOCK, 0, s>>>(
                B, r->cfg.alpha, r->cfg.seed, r->cdf, r->order, r->meta, r->ds, *out);
            rc = cudaGetLastError();
        }
    } else {
        sample_pick_kernel<<<grid_of(B, BLOCK), BLOCK, 0, s>>>(B, prop, r->cfg.seed,
                                                               r->tree, r->meta, r->ds, *out);
        rc = cudaGetLastError();
    }
    if (!rc) {
        sample_gather_kernel<<<grid_of(B * D, BLOCK), BLOCK, 0, s>>>(B, D, r->obs, r->next_obs,
                                                                     *out, r->ds);
        rc = cudaGetLastError();
    }
    if (rc) {
        char why[200];
        snprintf(why, sizeof why, "sample kernel launch failed (%s)", cudaGetErrorString(rc));
        vx_status st = vx_rc_fall_back(r, why, e);
        return st ? st : vx_rc_sample_cpu(r, B, out, e);
    }
    return VX_OK;
}


extern "C" vx_status vx_replay_cuda_update(vx_replay_cuda *r, const uint32_t *index,
                                           const uint32_t *gen, const float *td, size_t n,
                                           cudaStream_t s, vx_err *e)
{
    if (r->cfg.kind == VX_REPLAY_UNIFORM || n == 0) return VX_OK;
    if (!r->on_device) return vx_rc_update_cpu(r, index, gen, td, n, e);
    int prop = r->cfg.kind == VX_REPLAY_PROPORTIONAL, depth = r->tree.depth;
    for (size_t off = 0; off < n; off += UPDATE_MAX) {
        size_t m = n - off < UPDATE_MAX ? n - off : UPDATE_MAX;
        const uint32_t *ix = index + off, *gn = gen + off;
        const float *t = td + off;
        dim3 grid = grid_of(m, BLOCK);
        update_mark_kernel<<<grid, BLOCK, 0, s>>>(ix, gn, t, m, r->cfg.eps, r->meta,
                                                  r->owner, r->ds);
        cudaError_t rc = cudaGetLastError();
        if (!rc) {
            update_leaf_kernel<<<grid, BLOCK, 0, s>>>(ix, gn, t, m, r->cfg.alpha,
                                                      r->cfg.eps, prop, r->meta, r->prio,
                                                      r->owner, r->win, r->tree, r->ds);
            rc = cudaGetLastError();
        }
        /* lower levels one launch each (down to level 3, or all when the tree is shallow), then
         * the top three levels in one block; a tree of depth 0 (capacity 1) has no ancestors */
        int top = depth - 1 < 2 ? depth - 1 : 2;
        for (int l = depth - 1, first = 1; !rc && l >= 0; l--, first = 0) {
            if (l <= top && !first) {
                update_top_kernel<<<1, 1024, 0, s>>>(ix, m, r->win, r->tree, l);
                rc = cudaGetLastError();
                break;
            }
            update_level_kernel<<<grid, BLOCK, 0, s>>>(ix, m, r->win, r->owner, r->tree, l, first,
                                                       r->ds);
            rc = cudaGetLastError();
        }
        if (!rc && depth == 0) { /* still fold the maximum and release the marks */
            update_level_kernel<<<grid, BLOCK, 0, s>>>(ix, m, r->win, r->owner, r->tree, -1, 1,
                                                       r->ds);
            rc = cudaGetLastError();
        }
        if (rc) {
            char why[200];
            snprintf(why, sizeof why, "update kernel launch failed (%s)", cudaGetErrorString(rc));
            vx_status st = vx_rc_fall_back(r, why, e);
            return st ? st : vx_rc_update_cpu(r, ix, gn, t, n - off, e);
        }
    }
    return VX_OK;
}



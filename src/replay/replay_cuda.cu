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
 * Kernels, one launch per call (each launch costs a few µs, which at a batch of 1,024 is what
 * these calls are made of):
 *   insert   new transitions into their slots at the running maximum priority; block 0 writes
 *            the new leaves and their ancestors beside the other blocks' copies: the ancestors
 *            of new leaves only as closed ordered sums, the few that also hold older leaves
 *            summed from children gathered at once (rebuild_new), each node the exact sum of
 *            its final children in order;
 *   sample   one thread per draw picks (stratified draw, 16-ary descent or rank search, IS
 *            weight, small fields), then the block gathers its draws' two states, coalesced
 *            along D; the last block advances the RNG counter;
 *   update   a cooperative launch: stale stamps dropped, duplicates resolved (last entry wins,
 *            via an owner array), leaves rewritten, ancestors level by level, grid-wide
 *            barriers between the phases.
 * Each kernel has a launcher taking the stream; each entry enters the device, checks its
 * arguments, launches on the caller's stream, and on any launch failure moves the buffer to the
 * CPU (replay_cuda_host.cu) and redoes the call there. A replay group (replay_group_cuda.h, at
 * the end) runs K buffers' samples, or their updates, as one launch of the same device code, the
 * member in blockIdx.y; a failed group launch is an error (its caller stops the group). */
#include "replay_cuda_internal.h"
#include "replay_group_cuda.h"
#include "../util/pdl.cuh"

#include <cooperative_groups.h>
#include <cub/cub.cuh>
#include <math.h>
#include <stdlib.h>
#include <string.h>

namespace cg = cooperative_groups;

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

/* Node `node` of level l from its 16 children. The loads go to L2 (__ldcg): the children may
 * have been written by another block of the same launch, after a barrier, and an SM's L1 could
 * still hold the line from before. */
__device__ static void recompute(const dev_tree t, int l, size_t node)
{
    const double2 *cs = (const double2 *)(t.sum[l + 1] + node * FAN);
    const double2 *cm = (const double2 *)(t.min[l + 1] + node * FAN);
    double2 a[FAN / 2], b[FAN / 2];
#pragma unroll
    for (int c = 0; c < FAN / 2; c++) a[c] = __ldcg(cs + c), b[c] = __ldcg(cm + c); /* in flight */
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

/* The leaves an insert writes: [lo1, lo1 + n1) and [0, n2) (a range that wraps the ring), each
 * set to v (its sum) and vmin (its minimum). */
typedef struct {
    size_t lo1, n1, n2;
    double v, vmin;
} new_leaves;

/* The new leaves' overlap with leaves [x0, x1). */
__device__ static size_t new_overlap(const new_leaves *w, size_t x0, size_t x1)
{
    size_t n = 0, segs[2][2] = {{w->lo1, w->lo1 + w->n1}, {0, w->n2}};
    for (int k = 0; k < 2; k++) {
        size_t lo = x0 > segs[k][0] ? x0 : segs[k][0], hi = x1 < segs[k][1] ? x1 : segs[k][1];
        if (hi > lo) n += hi - lo;
    }
    return n;
}

#define PARTIAL_MAX 4 /* nodes of one level holding some new leaves and some others: 2 a range */

/* The new leaves and their ancestors, by the threads of one block, each sum the same additions in
 * the same order as recompute over the final children, so the same doubles as a level-by-level
 * rebuild — without waiting between levels for memory. A node of height h (its leaves 16^h)
 * is either
 *   full     every leaf new: its sum is F[h], 16 copies of F[h − 1] added from 0 (F[0] = v) —
 *            recompute's sum over children that are all full, by induction; its minimum vmin;
 *   partial  some leaves new, some not: at most two a range, PARTIAL_MAX a level;
 *   other    no leaf new: unchanged, never written.
 * So the children of a partial node are full (F), unchanged (read from the tree, all at once at
 * the start: nothing writes them) or the one or two partial nodes below it; the partial nodes are
 * then summed level by level upwards from shared memory. Writing them level by level with a
 * barrier between had been six round trips to memory (12.9 µs an insert of 2,048 into a
 * million-leaf tree on the H200, of which 4.4 the copy). The ranges are the caller's (in shared
 * memory); v and vmin are set here. n1 + n2 ≤ capacity. Needs a block of at least 64 threads; all
 * but warp 0 return before the partial nodes' sums, so nothing after it may need the block. */
__device__ static void rebuild_new(dev_tree tree, const dev_state *ds, double alpha,
                                   new_leaves *w_shared)
{
    const int D = tree.depth, L = D > 0 ? D : 1;
    const new_leaves *w = w_shared;
    __shared__ double F[VX_REPLAY_MAX_LEVELS + 1];
    __shared__ size_t part[VX_REPLAY_MAX_LEVELS][PARTIAL_MAX];
    __shared__ int n_part[VX_REPLAY_MAX_LEVELS];
    __shared__ double csum[VX_REPLAY_MAX_LEVELS][PARTIAL_MAX][FAN];
    __shared__ double cmin[VX_REPLAY_MAX_LEVELS][PARTIAL_MAX][FAN];
    __shared__ signed char from[VX_REPLAY_MAX_LEVELS][PARTIAL_MAX][FAN]; /* −1 read, k: part k */
    __shared__ double psum[VX_REPLAY_MAX_LEVELS][PARTIAL_MAX],
        pmin[VX_REPLAY_MAX_LEVELS][PARTIAL_MAX];
    if (threadIdx.x == 32) { /* the leaves' value and the full sums, beside the ranges' work */
        double v = pow(ds->max_p, alpha); /* max_p: no kernel of this launch writes it */
        w_shared->v = v, w_shared->vmin = v > 0 ? v : INFINITY;
        F[0] = v;
        for (int h = 1; h <= D; h++) {
            double x = 0;
            for (int c = 0; c < FAN; c++) x += F[h - 1];
            F[h] = x;
        }
    }
    /* each level's partial nodes by a thread of its own (warp 0), where one thread had walked
     * every level in turn on the insert's critical path */
    if (threadIdx.x < D) { /* D ≤ VX_REPLAY_MAX_LEVELS: within warp 0 */
        int l = threadIdx.x;
        int shift = FAN_SHIFT * (D - l), k = 0;
        size_t size = (size_t)1 << shift;
        for (int seg = 0; seg < 2; seg++) {
            size_t lo = seg ? 0 : w->lo1, n = seg ? w->n2 : w->n1;
            if (n == 0) continue;
            size_t ends[2] = {lo >> shift, (lo + n - 1) >> shift};
            for (int j = 0; j < 2; j++) {
                size_t node = ends[j], ov = new_overlap(w, node << shift, (node + 1) << shift);
                int seen = 0;
                for (int q = 0; q < k; q++) seen |= part[l][q] == node;
                if (!seen && ov > 0 && ov < size && k < PARTIAL_MAX) part[l][k++] = node;
            }
        }
        n_part[l] = k;
        /* their unchanged children are read after the next barrier: on their way to L2 now */
        for (int q = 0; q < k; q++) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(tree.sum[l + 1] + part[l][q] * FAN));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(tree.min[l + 1] + part[l][q] * FAN));
        }
    }
    __syncthreads();
    /* the new leaves, the full nodes, and the partial nodes' children gathered, side by side */
    for (size_t k = threadIdx.x; k < w->n1 + w->n2; k += blockDim.x) {
        size_t i = k < w->n1 ? w->lo1 + k : k - w->n1;
        tree.sum[D][i] = w->v;
        tree.min[D][i] = w->vmin;
    }
    for (int l = D - 1; l >= 0; l--) {
        int shift = FAN_SHIFT * (D - l);
        for (int seg = 0; seg < 2; seg++) {
            size_t lo = seg ? 0 : w->lo1, n = seg ? w->n2 : w->n1;
            if (n == 0) continue;
            size_t a = lo >> shift, b = (lo + n - 1) >> shift;
            for (size_t node = a + threadIdx.x; node <= b; node += blockDim.x)
                if (new_overlap(w, node << shift, (node + 1) << shift) == (size_t)1 << shift) {
                    tree.sum[l][node] = F[D - l]; /* (a whole ring's insert: a node may be
                                                   * full across the two ranges) */
                    tree.min[l][node] = w->vmin;
                }
        }
    }
    for (int t = threadIdx.x; t < L * PARTIAL_MAX * FAN; t += blockDim.x) {
        int l = t / (PARTIAL_MAX * FAN), q = t / FAN % PARTIAL_MAX, c = t % FAN;
        if (l >= D || q >= n_part[l]) continue;
        int cshift = FAN_SHIFT * (D - l - 1);
        size_t child = part[l][q] * FAN + c;
        size_t ov = new_overlap(w, child << cshift, (child + 1) << cshift);
        signed char f = -1;
        if (ov == ((size_t)1 << cshift)) { /* full */
            csum[l][q][c] = F[D - l - 1];
            cmin[l][q][c] = w->vmin;
        } else if (ov == 0) { /* unchanged */
            csum[l][q][c] = __ldcg(tree.sum[l + 1] + child);
            cmin[l][q][c] = __ldcg(tree.min[l + 1] + child);
        } else { /* partial: summed one level down */
            for (int k = 0; k < n_part[l + 1]; k++)
                if (part[l + 1][k] == child) f = (signed char)k;
        }
        from[l][q][c] = f;
    }
    __syncthreads();
    /* the partial nodes, from the leaves up: warp 0's alone (PARTIAL_MAX ≤ 32), a warp's
     * barrier between levels; each node's children read all at once, then added in recompute's
     * order (child 0, 1, 2, …). A block's barrier a level and the reads one after another had
     * taken 2.8 µs of block 0's 6.7 (H100, 2,048 into 2^20 slots). */
    if (threadIdx.x >= 32) return;
    for (int l = D - 1; l >= 0; l--) {
        int q = threadIdx.x;
        if (q < n_part[l]) {
            double v[FAN], vm[FAN], x = 0, m = INFINITY;
#pragma unroll
            for (int c = 0; c < FAN; c++) {
                int f = from[l][q][c];
                v[c] = f < 0 ? csum[l][q][c] : psum[l + 1][f];
                vm[c] = f < 0 ? cmin[l][q][c] : pmin[l + 1][f];
            }
#pragma unroll
            for (int c = 0; c < FAN; c++) x += v[c], m = fmin(m, vm[c]);
            psum[l][q] = x, pmin[l][q] = m;
            tree.sum[l][part[l][q]] = x;
            tree.min[l][part[l][q]] = m;
        }
        __syncwarp();
    }
}

/* Insert: the new transitions into their slots at the running maximum priority. With a
 * proportional buffer block 0 writes the new leaves and recomputes their ancestors while the
 * other blocks copy (every new leaf gets the same value, so the sums need no other block's
 * work); without one, every block copies. (The last block to finish had rebuilt after every
 * copy: 17.6 µs for 2,048 transitions, of which the copy alone about 9; then block 0 after its
 * share of the copy.) */
static __global__ void insert_kernel(vx_transitions t, size_t n, size_t start, size_t cap, int D,
                                     float *obs, float *next_obs, vx_slot_meta *meta, double *prio,
                                     dev_tree tree, double alpha, dev_state *ds, int proportional,
                                     size_t new_size, size_t n1, size_t n2)
{
    if (proportional && blockIdx.x == 0) {
        __shared__ new_leaves w;
        if (threadIdx.x == 0) w.lo1 = start, w.n1 = n1, w.n2 = n2;
        __syncthreads();
        rebuild_new(tree, ds, alpha, &w);
        return;
    }
    size_t x = (size_t)(blockIdx.x - (proportional ? 1 : 0)) * blockDim.x + threadIdx.x;
    if (x == 0) ds->size = new_size; /* read by later kernels only, in stream order */
    if (x < n * (size_t)D) {
        size_t k = x / (size_t)D, d = x % (size_t)D, i = (start + k) % cap;
        obs[i * D + d] = t.obs[x];
        next_obs[i * D + d] = t.next_obs[x];
        if (d == 0) {
            vx_slot_meta m = meta[i];
            for (int b = 0; b < VX_ACTION_BRANCHES; b++)
                m.action[b] = (uint8_t)t.actions[k * VX_ACTION_BRANCHES + b];
            m.reward = t.rewards[k];
            m.term = t.terminated[k];
            m.trunc = t.truncated[k];
            m.steps = t.steps ? t.steps[k] : 1;
            m.gen++;
            meta[i] = m;
            prio[i] = ds->max_p;
        }
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

/* The sample's inputs besides the buffer's arrays: the kind's own (tree, rank order). */
typedef struct {
    int kind; /* vx_replay_kind */
    double alpha;
    uint64_t seed;
    dev_tree tree;
    const double *cdf;
    const uint32_t *order;
} pick_args;

/* One buffer of a group (vx_replay_group), as its grouped launches read it: device memory, one
 * record a member, written once when the group is made (the arrays never move while the buffer
 * stays on the device, and a group refuses to launch once a member has left it). */
typedef struct {
    pick_args pick; /* its kind, α, seed and tree */
    double eps;
    const float *obs, *next_obs;
    vx_slot_meta *meta;
    double *prio;
    int *owner;
    unsigned char *win;
    dev_state *ds;
} rc_member;

/* What every draw of a sample reads before its own position: the size (uniform), the rank
 * order's length and total mass (rank), the tree's total and smallest leaf (proportional), β. */
typedef struct {
    size_t n;
    double total, least, beta;
} pick_base;

__device__ static pick_base pick_prepare(const pick_args *a, const dev_state *ds)
{
    pick_base p = {0, 0, 0, ds->beta};
    if (a->kind == VX_REPLAY_UNIFORM) {
        p.n = (size_t)ds->size;
    } else if (a->kind == VX_REPLAY_RANK) {
        p.n = (size_t)ds->order_n;
        p.total = a->cdf[p.n - 1];
    } else {
        p.total = a->tree.sum[0][0];
        p.least = a->tree.min[0][0];
    }
    return p;
}

/* Draw j's slot and importance weight, as replay_cpu.c draws it (replay_math.h's positions). */
__device__ static size_t pick(const pick_args *a, const pick_base *p, unsigned long long draws,
                              size_t j, size_t B, float *w)
{
    *w = 1.0f;
    if (a->kind == VX_REPLAY_UNIFORM) return vx_replay_draw_slot(a->seed, draws, j, (uint32_t)p->n);
    double u = vx_replay_draw_u(a->seed, draws, j, B, p->total);
    if (a->kind == VX_REPLAY_RANK) {
        size_t k = vx_replay_cdf_find(a->cdf, p->n, u);
        double P = vx_replay_rank_mass(k, a->alpha) / p->total;
        double p_min = vx_replay_rank_mass(p->n - 1, a->alpha) / p->total;
        *w = vx_replay_weight(P, p_min, p->beta);
        return a->order[k];
    }
    const dev_tree tree = a->tree;
    size_t node = 0;
    double leaf = p->total; /* depth 0: the root is the one leaf */
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
                if (u < v[c]) pick = c, leaf = v[c];
                else u -= v[c];
            }
        }
        if (pick < 0) { /* replay_cpu.c's rule; constant indices keep v in registers */
            pick = last;
#pragma unroll
            for (int c = 0; c < FAN; c++)
                if (c == last) u = nextafter(v[c], 0.0), leaf = v[c];
        }
        node = node * FAN + (size_t)pick;
    }
    *w = vx_replay_weight(leaf / p->total, p->least / p->total, p->beta);
    return node;
}

/* The whole sample in one launch: a block's first DRAWS threads pick a draw each (slot, weight,
 * small fields), then all 256 copy those draws' two states, coalesced along D (few draws a block:
 * the picks spread over many SMs, and a thread has a few floats of each state to copy, loaded
 * before they are stored so that they are in flight together). The RNG counter: thread 0 of each
 * block reads it, then thread 32 counts the block in; the last block to count in (every block has
 * read it by then) advances it. Each step costs a trip to memory, so what does not depend on the
 * counter is read beside it rather than after. Draw j is the same whatever DRAWS is: its position
 * in the batch sets its Philox counter. */
template <int DRAWS>
__device__ static void sample_body(size_t B, pick_args a, int D, const float *obs,
                                   const float *next_obs, const vx_slot_meta *meta, dev_state *ds,
                                   vx_replay_batch out)
{
    static_assert(DRAWS <= 32, "warp 0 picks, thread 32 counts the block in");
    __shared__ uint32_t slot[DRAWS];
    __shared__ unsigned long long draws;
    size_t j0 = (size_t)blockIdx.x * DRAWS;
    size_t rows = B - j0 < DRAWS ? B - j0 : DRAWS;
    pick_base base;
    if (threadIdx.x < rows) base = pick_prepare(&a, ds);
    if (threadIdx.x == 0) draws = ds->rng_block;
    __syncthreads();
    /* the block counts in, its counter read (it is in shared memory), by thread 32 (warp 1),
     * which needs the count's answer only at the end: its round trip runs beside the picks and
     * the gather, where thread 0 had waited for it before any pick began */
    unsigned counted = 0;
    if (threadIdx.x == 32) {
        __threadfence(); /* the read is done before the block counts in */
        counted = atomicAdd(&ds->sample_blocks, 1u);
    }
    if (threadIdx.x < rows) {
        size_t j = j0 + threadIdx.x;
        float w;
        size_t i = pick(&a, &base, draws, j, B, &w);
        vx_slot_meta m = meta[i];
        slot[threadIdx.x] = (uint32_t)i;
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
    __syncthreads();
    enum { AHEAD = 4 }; /* a thread's elements of each state in flight at once */
    size_t all = rows * (size_t)D;
    for (size_t x0 = threadIdx.x; x0 < all; x0 += AHEAD * (size_t)blockDim.x) {
        float o[AHEAD], n[AHEAD];
#pragma unroll
        for (int u = 0; u < AHEAD; u++) {
            size_t x = x0 + (size_t)u * blockDim.x;
            if (x < all) {
                size_t at = (size_t)slot[x / (size_t)D] * D + x % (size_t)D;
                o[u] = obs[at], n[u] = next_obs[at];
            }
        }
#pragma unroll
        for (int u = 0; u < AHEAD; u++) {
            size_t x = x0 + (size_t)u * blockDim.x;
            if (x < all) out.obs[j0 * D + x] = o[u], out.next_obs[j0 * D + x] = n[u];
        }
    }
    if (threadIdx.x == 32 && counted == gridDim.x - 1) { /* the last block to count in */
        __threadfence(); /* the write below after every block's count */
        ds->sample_blocks = 0;
        ds->rng_block = draws + B;
    }
}

static __global__ void sample_kernel(size_t B, pick_args a, int D, const float *obs,
                                     const float *next_obs, const vx_slot_meta *meta, dev_state *ds,
                                     vx_replay_batch out)
{
    vx_pdl_wait();
    sample_body<SAMPLE_DRAWS>(B, a, D, obs, next_obs, meta, ds, out);
}

/* A group's samples (vx_replay_group_sample): member blockIdx.y's draws from its own buffer into
 * its own batch, exactly as sample_kernel draws them alone (its blocks count into its own
 * dev_state, so the last of them advances its own RNG counter). Its blocks take GROUP_DRAWS draws
 * each: a group's K × B draws fill the device with fewer, fuller blocks (64 members at batch 256:
 * 512 blocks, not 2,048). The bounds: with its member's arguments read from memory rather than
 * from the launch's constants the kernel took 112 registers a thread, so that an SM held 2 of its
 * 256-thread blocks; a group of 64 at batch 256 with 8 draws a block took 76 µs (H100), 44 µs at
 * 64 registers (40 bytes spilled), 4 blocks an SM. */
static __global__ void __launch_bounds__(256, 4)
    sample_group_kernel(size_t B, int D, const rc_member *m, const vx_replay_batch *out)
{
    vx_pdl_wait();
    const rc_member *x = &m[blockIdx.y];
    sample_body<GROUP_DRAWS>(B, x->pick, D, x->obs, x->next_obs, x->meta, x->ds, out[blockIdx.y]);
}

/* The nodes per level that have children (top-level recomputes stop there). */
typedef struct {
    size_t n[LEVELS];
} level_nodes;

/* The update in one cooperative launch, its phases separated by grid-wide barriers:
 *   mark     stale stamps dropped; each valid entry claims its slot (owner: the largest entry
 *            index, so among duplicates the last entry wins, as on the CPU); the batch's largest
 *            finite priority and the counts;
 *   leaves   the winners write the raw priority and the leaf (a non-finite priority takes the
 *            running maximum, this batch's finite ones included);
 *   levels   the batch maximum folded into max_p and the claims released; then the winners'
 *            ancestors level by level (equal parents are written with equal values), a barrier
 *            after each, down to the first level of at most TOP_NODES nodes;
 *   top      those small levels recomputed whole by block 0, with block barriers (every node
 *            recomputed gives its old value unless a child changed).
 * One launch instead of six (mark, leaves, three levels, the top): each had cost a few µs. */
__device__ static void update_body(const uint32_t *index, const uint32_t *gen, const float *td,
                                   size_t n, double alpha, double eps, int proportional,
                                   const vx_slot_meta *meta, double *prio, int *owner,
                                   unsigned char *win, dev_tree tree, const level_nodes &ln,
                                   int top, dev_state *ds)
{
    cg::grid_group grid = cg::this_grid();
    /* entries dealt out across the blocks (k = block + blocks × thread): every SM gets some */
    size_t first = blockIdx.x + (size_t)gridDim.x * threadIdx.x;
    size_t step = (size_t)gridDim.x * blockDim.x, size = (size_t)ds->size;
    double pmax = 0;
    unsigned long long stale = 0, clamped = 0;
    for (size_t k = first; k < n; k += step) {
        size_t i = index[k];
        if (i >= size || meta[i].gen != gen[k]) {
            stale++;
            continue;
        }
        double p = fabs((double)td[k]) + eps;
        if (isfinite(p)) pmax = fmax(pmax, p);
        else clamped++;
        atomicMax(&owner[i], (int)k);
    }
    for (int o = 16; o > 0; o >>= 1) { /* one atomic per warp, not per entry */
        pmax = fmax(pmax, __shfl_down_sync(0xffffffffu, pmax, o));
        stale += __shfl_down_sync(0xffffffffu, stale, o);
        clamped += __shfl_down_sync(0xffffffffu, clamped, o);
    }
    if ((threadIdx.x & 31) == 0) {
        if (pmax > 0) atomicMax(&ds->max_bits, (unsigned long long)__double_as_longlong(pmax));
        if (stale) atomicAdd(&ds->stale, stale);
        if (clamped) atomicAdd(&ds->clamped, clamped);
    }
    grid.sync();
    double running =
        fmax(__longlong_as_double((long long)__ldcg(&ds->max_bits)), __ldcg(&ds->max_p));
    for (size_t k = first; k < n; k += step) {
        size_t i = index[k];
        int w = i < size && meta[i].gen == gen[k] && __ldcg(&owner[i]) == (int)k;
        win[k] = (unsigned char)w;
        if (!w) continue;
        double p = fabs((double)td[k]) + eps;
        if (!isfinite(p)) p = running;
        prio[i] = p;
        if (proportional) {
            double v = pow(p, alpha);
            tree.sum[tree.depth][i] = v;
            tree.min[tree.depth][i] = v > 0 ? v : INFINITY;
        }
    }
    grid.sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        double b = __longlong_as_double((long long)__ldcg(&ds->max_bits));
        if (b > ds->max_p) ds->max_p = b;
        ds->max_bits = 0;
    }
    for (size_t k = first; k < n; k += step)
        if (win[k]) owner[index[k]] = -1;
    if (!proportional) return;
    for (int l = tree.depth - 1; l > top; l--) {
        int shift = FAN_SHIFT * (tree.depth - l);
        for (size_t k = first; k < n; k += step)
            if (win[k]) recompute(tree, l, (size_t)index[k] >> shift);
        grid.sync();
    }
    if (blockIdx.x != 0) return;
    for (int l = top; l >= 0; l--) {
        for (size_t node = threadIdx.x; node < ln.n[l]; node += blockDim.x)
            recompute(tree, l, node);
        __syncthreads();
    }
}

static __global__ void update_kernel(const uint32_t *index, const uint32_t *gen, const float *td,
                                     size_t n, double alpha, double eps, int proportional,
                                     const vx_slot_meta *meta, double *prio, int *owner,
                                     unsigned char *win, dev_tree tree, level_nodes ln, int top,
                                     dev_state *ds)
{
    update_body(index, gen, td, n, alpha, eps, proportional, meta, prio, owner, win, tree, ln, top,
                ds);
}

/* A group's priority updates (vx_replay_group_update; proportional buffers) in one cooperative
 * launch: member blockIdx.y's n entries (its batch's index and stamps, its td at td + member ×
 * td_stride) into its own buffer, by gridDim.x blocks as update_kernel would with that grid
 * alone. The grid-wide
 * barriers then wait for every member's blocks: the members' phases run side by side, each
 * member's arithmetic its own. */
static __global__ void update_group_kernel(const rc_member *m, const vx_replay_batch *b,
                                           const float *td, size_t td_stride, size_t n,
                                           level_nodes ln, int top)
{
    const rc_member *x = &m[blockIdx.y];
    update_body(b[blockIdx.y].index, b[blockIdx.y].gen, td + blockIdx.y * td_stride, n,
                x->pick.alpha, x->eps, 1, x->meta, x->prio, x->owner, x->win, x->pick.tree, ln, top,
                x->ds);
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

void vx_rc_update_plan(vx_replay *r)
{
    rc_buf *b = rcb(r);
    int depth = r->cfg.kind == VX_REPLAY_PROPORTIONAL ? b->tree.depth : 0;
    b->up_top = -1;
    for (int l = 0; l < LEVELS; l++) {
        b->up_nodes[l] = l < depth ? b->shape.width[l + 1] / FAN : 0;
        if (l < depth && b->up_nodes[l] <= TOP_NODES) b->up_top = l;
    }
    int per_sm = 0; /* a smaller GPU: fewer blocks, each taking more entries */
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, update_kernel, UPDATE_THREADS, 0))
        cudaGetLastError(), per_sm = 1;
    b->up_blocks = (unsigned)(per_sm > 0 ? per_sm : 1) * (unsigned)vx_cuda_sm_count(r->dev);
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
    size_t n1 = start + m <= C ? m : C - start, n2 = m - n1;
    /* blocks of 1,024: with a tree, one more, block 0, rebuilds the tree's new part alone */
    dim3 grid = vx_rc_grid(m * D, 1024);
    if (grid.x) grid.x += (unsigned)prop; /* (an injected fault's empty grid stays empty) */
    insert_kernel<<<grid, 1024, 0, s>>>(tt, m, start, C, D, b->obs, b->next_obs, b->meta, b->prio,
                                        b->tree, r->cfg.alpha, b->ds, prop,
                                        b->size + n < C ? b->size + n : C, n1, n2);
    cudaError_t rc = cudaGetLastError();
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
    cudaError_t rc = cudaSuccess;
    if (r->cfg.kind == VX_REPLAY_RANK) {
        if (b->order_n == 0 || b->calls_since_refresh >= r->cfg.rank_refresh)
            rc = vx_rc_rank_refresh(r, s);
        b->calls_since_refresh++;
    }
    if (!rc) {
        pick_args a = {(int)r->cfg.kind, r->cfg.alpha, r->cfg.seed, b->tree, b->cdf, b->order};
        rc = vx_pdl_launch(sample_kernel, vx_rc_grid(B, SAMPLE_DRAWS), dim3(256), 0, s, B, a,
                           r->cfg.obs_dim, (const float *)b->obs, (const float *)b->next_obs,
                           (const vx_slot_meta *)b->meta, b->ds, *out);
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
    int prop = r->cfg.kind == VX_REPLAY_PROPORTIONAL;
    level_nodes ln;
    memcpy(ln.n, b->up_nodes, sizeof ln.n);
    int top = b->up_top;
    dev_tree tree = b->tree;
    tree.depth = prop ? b->tree.depth : 0;
    for (size_t off = 0; off < n; off += UPDATE_MAX) {
        size_t m = n - off < UPDATE_MAX ? n - off : UPDATE_MAX;
        const uint32_t *ix = index + off, *gn = gen + off;
        const float *t = td + off;
        double alpha = r->cfg.alpha, eps = r->cfg.eps;
        const vx_slot_meta *meta = b->meta;
        /* a cooperative launch: every block resident at once, so the grid can wait for itself
         * (a cluster of 8 blocks with its hardware barrier measured the same at 1,024 entries
         * and half as fast at 16,384); more entries than its threads: each takes several */
        cudaLaunchConfig_t lc = {};
        cudaLaunchAttribute at[1] = {};
        at[0].id = cudaLaunchAttributeCooperative;
        at[0].val.cooperative = 1;
        lc.gridDim = vx_rc_grid(m, UPDATE_ENTRIES);
        if (lc.gridDim.x > b->up_blocks) lc.gridDim.x = b->up_blocks;
        lc.blockDim = dim3(UPDATE_THREADS);
        lc.stream = s;
        lc.attrs = at;
        lc.numAttrs = 1;
        cudaError_t rc = cudaLaunchKernelEx(&lc, update_kernel, ix, gn, t, m, alpha, eps, prop,
                                            meta, b->prio, b->owner, b->win, tree, ln, top, b->ds);
        if (rc) {
            cudaGetLastError(); /* a refused launch leaves the error behind as well */
            st = launch_failed(r, "update", rc, e);
            return st ? st : vx_rc_update_cpu(r, ix, gn, t, n - off, s, e);
        }
    }
    return VX_OK;
}

/* ---- groups (replay_group_cuda.h) -------------------------------------------------------------
 * K buffers' samples and updates as one launch each: the same device code as a buffer's own
 * calls, member blockIdx.y of a grid of K rows. */

extern "C" const vx_replay_ops vx_replay_cuda_ops;

struct vx_replay_group {
    vx_replay **r; /* K, the owners' */
    int K;
    vx_device *dev;
    vx_mem mem;
    rc_member *members;   /* device, K */
    vx_replay_batch *out; /* device, K: member k's batch */
    const float *td;      /* member k's at td + k × td_stride */
    size_t td_stride, B;
    int kind, D;
    level_nodes ln;
    int top;
    unsigned update_blocks; /* a member's grid (x) */
};

static int refuse(char *why, size_t n, const char *fmt, long long k)
{
    if (why && n) snprintf(why, n, fmt, k);
    return 0;
}

/* Whether r[0..K) can be one group, else why not. */
static int group_fits(vx_replay *const *r, int K, size_t B, char *why, size_t n)
{
    if (K < 2) return refuse(why, n, "a group of %lld buffers", K);
    if (B == 0 || B > UPDATE_MAX)
        return refuse(why, n, "a batch of %lld rows, past one update launch", (long long)B);
    for (int k = 0; k < K; k++) {
        const vx_replay *x = r[k];
        if (!x || x->ops != &vx_replay_cuda_ops || !vx_replay_on_device(x))
            return refuse(why, n, "buffer %lld is not on the device", k);
        if (x->cfg.kind == VX_REPLAY_RANK) return refuse(why, n, "buffer %lld is rank-based", k);
        for (int j = 0; j < k; j++) /* two rows of a launch on one buffer would race */
            if (r[j] == x) return refuse(why, n, "buffer %lld is in the group twice", k);
        if (x->cfg.kind != r[0]->cfg.kind || x->cfg.capacity != r[0]->cfg.capacity ||
            x->cfg.obs_dim != r[0]->cfg.obs_dim || x->dev != r[0]->dev)
            return refuse(why, n, "buffer %lld differs from buffer 0 in kind, capacity or width",
                          k);
    }
    return 1;
}

extern "C" vx_status vx_replay_group_create(vx_replay *const *r, int K, const vx_replay_batch *out,
                                            const float *td, size_t td_stride, size_t B,
                                            vx_device *dev, vx_replay_group **g, char *why,
                                            size_t n, vx_err *e)
{
    *g = NULL;
    if (why && n) why[0] = '\0';
    if (!group_fits(r, K, B, why, n)) return VX_OK;
    if (r[0]->dev != dev) return refuse(why, n, "buffer %lld is on another device", 0), VX_OK;
    vx_status st = vx_cuda_enter(dev, e); /* the occupancy below is this device's */
    if (st) return st;
    rc_buf *b0 = rcb(r[0]);
    unsigned update_blocks = 1;
    if (r[0]->cfg.kind == VX_REPLAY_PROPORTIONAL) {
        /* every member's blocks resident at once, as one buffer's update needs its own */
        int per_sm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, update_group_kernel,
                                                          UPDATE_THREADS, 0))
            cudaGetLastError(), per_sm = 0;
        unsigned resident = (unsigned)(per_sm > 0 ? per_sm : 0) * (unsigned)vx_cuda_sm_count(dev);
        update_blocks = (unsigned)((B + UPDATE_ENTRIES - 1) / UPDATE_ENTRIES);
        if (update_blocks > b0->up_blocks) update_blocks = b0->up_blocks;
        if ((size_t)update_blocks * (size_t)K > resident) {
            refuse(why, n, "more update blocks than the device holds at once (%lld members)", K);
            return VX_OK;
        }
    }
    vx_replay_group *x = (vx_replay_group *)calloc(1, sizeof *x);
    rc_member *m = (rc_member *)calloc((size_t)K, sizeof *m);
    if (x) x->r = (vx_replay **)calloc((size_t)K, sizeof *x->r);
    if (!x || !m || !x->r) {
        if (x) free(x->r);
        free(x), free(m);
        return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory");
    }
    vx_mem_init(&x->mem, dev, "replay group");
    x->K = K, x->dev = dev, x->td = td, x->td_stride = td_stride, x->B = B;
    x->kind = (int)r[0]->cfg.kind, x->D = r[0]->cfg.obs_dim;
    memcpy(x->ln.n, b0->up_nodes, sizeof x->ln.n);
    x->top = b0->up_top;
    x->update_blocks = update_blocks;
    for (int k = 0; k < K; k++) {
        rc_buf *b = rcb(r[k]);
        const vx_replay_cfg *c = &r[k]->cfg;
        x->r[k] = r[k];
        m[k].pick.kind = (int)c->kind, m[k].pick.alpha = c->alpha, m[k].pick.seed = c->seed;
        m[k].pick.tree = b->tree, m[k].pick.cdf = b->cdf, m[k].pick.order = b->order;
        m[k].eps = c->eps;
        m[k].obs = b->obs, m[k].next_obs = b->next_obs, m[k].meta = b->meta, m[k].prio = b->prio;
        m[k].owner = b->owner, m[k].win = b->win, m[k].ds = b->ds;
    }
    st = vx_mem_alloc(&x->mem, (size_t)K * sizeof *m, &x->members, e);
    if (!st) st = vx_mem_alloc(&x->mem, (size_t)K * sizeof *out, &x->out, e);
    if (!st) st = vx_device_upload(dev, x->members, m, (size_t)K * sizeof *m, e);
    if (!st) st = vx_device_upload(dev, x->out, out, (size_t)K * sizeof *out, e);
    free(m);
    if (st) {
        vx_replay_group_free(x);
        return st;
    }
    *g = x;
    return VX_OK;
}

/* Every member still on the device and noted as using s (as its own call notes it). */
static vx_status group_ready(vx_replay_group *g, cudaStream_t s, const char *what, vx_err *e)
{
    vx_status st = vx_cuda_enter(g->dev, e);
    for (int k = 0; k < g->K && !st; k++) {
        rc_buf *b = rcb(g->r[k]);
        if (!b->on_device)
            st = vx_err_set(e, VX_ERR_CUDA,
                            "replay: member %d of a group left the device; the group's %s stops", k,
                            what);
        else note_stream(b, s);
    }
    return st;
}

extern "C" vx_status vx_replay_group_sample(vx_replay_group *g, cudaStream_t s, vx_err *e)
{
    vx_status st = group_ready(g, s, "sample", e);
    if (st) return st;
    dim3 grid = vx_rc_grid(g->B, GROUP_DRAWS);
    grid.y = (unsigned)g->K;
    cudaError_t rc = vx_pdl_launch(sample_group_kernel, grid, dim3(256), 0, s, g->B, g->D,
                                   (const rc_member *)g->members, (const vx_replay_batch *)g->out);
    if (rc)
        return vx_err_set(e, VX_ERR_CUDA, "replay: a group's sample launch failed (%s)",
                          cudaGetErrorString(rc));
    return VX_OK;
}

extern "C" vx_status vx_replay_group_update(vx_replay_group *g, cudaStream_t s, vx_err *e)
{
    if (g->kind != VX_REPLAY_PROPORTIONAL) return VX_OK; /* uniform: nothing to update */
    vx_status st = group_ready(g, s, "priority update", e);
    if (st) return st;
    cudaLaunchConfig_t lc = {};
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    lc.gridDim = dim3(g->update_blocks, (unsigned)g->K);
    if (vx_replay_fault_take(VX_FAULT_LAUNCH)) lc.gridDim = dim3(0);
    lc.blockDim = dim3(UPDATE_THREADS);
    lc.stream = s;
    lc.attrs = at;
    lc.numAttrs = 1;
    cudaError_t rc = cudaLaunchKernelEx(&lc, update_group_kernel, (const rc_member *)g->members,
                                        (const vx_replay_batch *)g->out, g->td, g->td_stride, g->B,
                                        g->ln, g->top);
    if (rc) {
        cudaGetLastError();
        return vx_err_set(e, VX_ERR_CUDA, "replay: a group's update launch failed (%s)",
                          cudaGetErrorString(rc));
    }
    return VX_OK;
}

extern "C" size_t vx_replay_group_reserved(const vx_replay_group *g)
{
    return g ? g->mem.bytes : 0;
}

extern "C" void vx_replay_group_free(vx_replay_group *g)
{
    if (!g) return;
    vx_mem_release(&g->mem);
    free(g->r);
    free(g);
}

/* replay_cpu.c — the CPU backend of the replay buffer, the reference (see replay.h for the
 * contract; replay.c dispatches here for buffers on the CPU).
 *
 * Storage is a ring of structure-of-arrays: obs and next_obs [capacity × D] float, actions as
 * bytes, reward, flags, n-step count, a generation stamp per slot. Every array is charged to the
 * device's memory account at creation (vx_mem: on the CPU, plain or huge-page-aligned malloc);
 * only the per-batch scratch and the rank sort's pairs are allocated outside it.
 *
 * Proportional: a sum tree and a min tree with 16 children per node (a node's children fill two
 * cache lines, so a draw at 1 M capacity touches 5 levels instead of a binary tree's 20 — the
 * binary version measured 1.16 ms per sample+update of 1,024 there, this one is in
 * docs/benchmarks.md), in float64, shaped by replay_math.h. An update rewrites a leaf and then
 * recomputes each ancestor as the sum (min) of its children — never `node += delta` — so the
 * stored total is exactly what a fresh bottom-up sum gives: it cannot drift however many updates
 * run. The descent never enters a subtree whose sum is zero, so a zero-priority (or empty) slot is
 * never drawn even when rounding pushes the target past a boundary.
 *
 * Rank: raw priorities per slot; a sort of the valid slots by priority (ties by slot index, so it
 * is deterministic) and the cumulative mass Σ_{k≤r} k^−α are rebuilt every `rank_refresh` sample
 * calls. Between refreshes the order is stale, as in the paper; slots first filled after the last
 * refresh wait for the next one (the first sample after any insert into an empty order refreshes).
 *
 * There is no snapshot on the CPU (a save is already a copy taken while nothing else runs). */
#include "replay_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FAN VX_REPLAY_FAN
#define TREE_MAX_LEVELS VX_REPLAY_MAX_LEVELS

typedef vx_slot_meta slot_meta;

typedef struct {
    vx_mem mem;
    size_t size, cursor;
    uint64_t inserted, clamped, stale, refreshes;
    double max_p, beta;
    uint64_t draws; /* samples drawn so far: draw j of a call uses Philox counter draws + j */
    /* ring */
    float *obs, *next_obs;
    slot_meta *meta; /* the small fields of a slot together: one cache miss per draw, not six */
    /* proportional: a FAN-ary tree, level 0 the root, level `depth` the leaves */
    int depth;
    double *sum[TREE_MAX_LEVELS]; /* sum[l]: width[l] nodes (replay_math.h) */
    double *min[TREE_MAX_LEVELS];
    /* rank (and the raw priority of every slot, both modes) */
    double *prio;
    uint32_t *order; /* slots by descending priority, order_n of them */
    double *cdf;     /* cdf[r] = Σ_{k<=r} (k+1)^−α */
    size_t order_n;
    int calls_since_refresh;
    int dirty; /* inserts since the last refresh */
    /* per-sample scratch, grown to the largest batch asked for */
    size_t scratch_n;
    size_t *scratch_idx;
    double *scratch_u;
} cpu_buf;

static cpu_buf *cb(const vx_replay *r) { return (cpu_buf *)r->impl; }

static void cpu_free(vx_replay *r)
{
    cpu_buf *b = cb(r);
    if (!b) return;
    vx_mem_release(&b->mem);
    free(b->scratch_idx), free(b->scratch_u);
    free(b);
    r->impl = NULL;
}

static vx_status cpu_create(vx_replay *r, vx_err *e)
{
    const vx_replay_cfg *cfg = &r->cfg;
    cpu_buf *b = calloc(1, sizeof *b);
    if (!b) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory");
    r->impl = b;
    vx_mem_init(&b->mem, r->dev, "replay");
    size_t C = cfg->capacity, D = (size_t)cfg->obs_dim;
    vx_err ae;
    vx_status st = vx_mem_alloc(&b->mem, C * D * sizeof(float), &b->obs, &ae);
    if (!st) st = vx_mem_alloc(&b->mem, C * D * sizeof(float), &b->next_obs, &ae);
    if (!st) st = vx_mem_alloc(&b->mem, C * sizeof *b->meta, &b->meta, &ae);
    if (!st) st = vx_mem_alloc(&b->mem, C * sizeof(double), &b->prio, &ae);
    if (!st) memset(b->meta, 0, C * sizeof *b->meta), memset(b->prio, 0, C * sizeof(double));
    if (!st && cfg->kind == VX_REPLAY_PROPORTIONAL) {
        vx_replay_tree_shape sh = vx_replay_tree_shape_of(C);
        b->depth = sh.depth;
        for (int l = sh.depth; l >= 0 && !st; l--) {
            size_t width = sh.width[l];
            st = vx_mem_alloc(&b->mem, width * sizeof(double), &b->sum[l], &ae);
            if (!st) st = vx_mem_alloc(&b->mem, width * sizeof(double), &b->min[l], &ae);
            for (size_t i = 0; !st && i < width; i++) b->sum[l][i] = 0, b->min[l][i] = INFINITY;
        }
    }
    if (!st && cfg->kind == VX_REPLAY_RANK) {
        st = vx_mem_alloc(&b->mem, C * sizeof(uint32_t), &b->order, &ae);
        if (!st) st = vx_mem_alloc(&b->mem, C * sizeof(double), &b->cdf, &ae);
    }
    if (st) {
        cpu_free(r);
        return vx_err_set(e, st, "replay: cannot allocate %zu transitions (%zu bytes each): %s", C,
                          vx_replay_bytes_per_transition(cfg), ae.msg);
    }
    b->max_p = 1.0;
    b->beta = 0.4;
    return VX_OK;
}

static int cpu_on_device(const vx_replay *r)
{
    (void)r;
    return 1;
}

static size_t cpu_size(const vx_replay *r) { return cb(r)->size; }
static size_t cpu_reserved(const vx_replay *r) { return cb(r)->mem.bytes; }

/* Sets leaf i to value v (p^α, or 0 for empty) and recomputes its ancestors from their children:
 * each parent is the plain sum (min) of its FAN children, never `parent += delta`. */
static void tree_recompute(cpu_buf *b, int l, size_t i);

static void tree_set(cpu_buf *b, size_t i, double v)
{
    int d = b->depth;
    b->sum[d][i] = v;
    b->min[d][i] = v > 0 ? v : INFINITY;
    for (int l = d - 1; l >= 0; l--) tree_recompute(b, l, i /= FAN);
}

static void set_priority(vx_replay *r, size_t i, double p)
{
    cpu_buf *b = cb(r);
    b->prio[i] = p;
    if (r->cfg.kind == VX_REPLAY_PROPORTIONAL) tree_set(b, i, pow(p, r->cfg.alpha));
}

static vx_status cpu_insert(vx_replay *r, const vx_transitions *t, size_t n, vx_stream s, vx_err *e)
{
    (void)s;
    cpu_buf *b = cb(r);
    size_t D = (size_t)r->cfg.obs_dim;
    for (size_t k = 0; k < n; k++)
        for (int j = 0; j < VX_ACTION_BRANCHES; j++) {
            int32_t a = t->actions[k * VX_ACTION_BRANCHES + j];
            if (a < 0 || a > vx_replay_action_max(j))
                return vx_err_set(e, VX_ERR_ARG,
                                  "replay: transition %zu action %d of branch %d outside 0..%d", k,
                                  a, j, vx_replay_action_max(j));
        }
    for (size_t k = 0; k < n; k++) {
        size_t i = b->cursor;
        memcpy(b->obs + i * D, t->obs + k * D, D * sizeof(float));
        memcpy(b->next_obs + i * D, t->next_obs + k * D, D * sizeof(float));
        slot_meta *m = &b->meta[i];
        for (int j = 0; j < VX_ACTION_BRANCHES; j++)
            m->action[j] = (uint8_t)t->actions[k * VX_ACTION_BRANCHES + j];
        m->reward = t->rewards[k];
        m->term = t->terminated[k];
        m->trunc = t->truncated[k];
        m->steps = t->steps ? t->steps[k] : 1;
        m->gen++;
        set_priority(r, i, b->max_p);
        b->cursor = (b->cursor + 1) % r->cfg.capacity;
        if (b->size < r->cfg.capacity) b->size++;
    }
    b->inserted += n;
    if (n) b->dirty = 1;
    return VX_OK;
}

static vx_status cpu_set_beta(vx_replay *r, double beta, vx_stream s, vx_err *e)
{
    (void)s, (void)e;
    cb(r)->beta = beta;
    return VX_OK;
}

/* qsort has no context argument in C11: sort (priority, slot) pairs instead */
typedef struct {
    double p;
    uint32_t i;
} pair;

static int cmp_pair(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static vx_status rank_refresh(vx_replay *r, vx_err *e)
{
    cpu_buf *b = cb(r);
    pair *tmp = malloc((b->size ? b->size : 1) * sizeof *tmp);
    if (!tmp) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory sorting ranks");
    for (size_t i = 0; i < b->size; i++) tmp[i] = (pair){b->prio[i], (uint32_t)i};
    qsort(tmp, b->size, sizeof *tmp, cmp_pair);
    double c = 0;
    for (size_t k = 0; k < b->size; k++) {
        b->order[k] = tmp[k].i;
        c += vx_replay_rank_mass(k, r->cfg.alpha);
        b->cdf[k] = c;
    }
    free(tmp);
    b->order_n = b->size;
    b->calls_since_refresh = 0;
    b->dirty = 0;
    b->refreshes++;
    return VX_OK;
}

static vx_status cpu_rank_refresh(vx_replay *r, vx_stream s, vx_err *e)
{
    (void)s;
    if (r->cfg.kind != VX_REPLAY_RANK || cb(r)->size == 0) return VX_OK;
    return rank_refresh(r, e);
}

/* Proportional descent for a whole batch, level by level: the B draws' loads at one level do not
 * depend on each other, so the memory system overlaps their cache misses (one draw at a time,
 * each level's load waits for the last: that version spent 0.8 ms on 1,024 draws at 1 M).
 * A child whose sum is zero is never entered; if rounding carries u past the last positive child,
 * that child is taken with u just inside it — so an empty or zero-priority slot is never
 * returned. On return node[j] is draw j's leaf. */
static void tree_find_batch(const cpu_buf *b, double *u, size_t *node, size_t B)
{
    for (size_t j = 0; j < B; j++) node[j] = 0;
    for (int l = 1; l <= b->depth; l++) {
        const double *level = b->sum[l];
        for (size_t j = 0; j < B; j++) {
            if (j + 8 < B) __builtin_prefetch(level + node[j + 8] * FAN);
            const double *cs = level + node[j] * FAN;
            double x = u[j];
            int pick = -1, last = -1;
            for (int c = 0; c < FAN; c++) {
                if (!(cs[c] > 0)) continue;
                last = c;
                if (x < cs[c]) {
                    pick = c;
                    break;
                }
                x -= cs[c];
            }
            if (pick < 0) {
                pick = last;
                x = nextafter(cs[last], 0);
            }
            u[j] = x;
            node[j] = node[j] * FAN + (size_t)pick;
        }
    }
}

static vx_status cpu_sample(vx_replay *r, size_t B, vx_replay_batch *out, vx_stream s, vx_err *e)
{
    (void)s;
    cpu_buf *b = cb(r);
    if (b->size == 0) return vx_err_set(e, VX_ERR_ARG, "replay: sample from an empty buffer");
    if (B == 0) return VX_OK;
    if (B > b->scratch_n) { /* once per new batch size, not per step */
        free(b->scratch_idx), free(b->scratch_u);
        b->scratch_idx = malloc(B * sizeof *b->scratch_idx);
        b->scratch_u = malloc(B * sizeof *b->scratch_u);
        b->scratch_n = b->scratch_idx && b->scratch_u ? B : 0;
        if (!b->scratch_n) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory for a batch");
    }
    size_t D = (size_t)r->cfg.obs_dim;
    if (r->cfg.kind == VX_REPLAY_RANK) {
        if (b->order_n == 0 || b->calls_since_refresh >= r->cfg.rank_refresh) {
            vx_status st = rank_refresh(r, e);
            if (st) return st;
        }
        b->calls_since_refresh++;
    }
    double total = 0, p_min = 1;
    if (r->cfg.kind == VX_REPLAY_PROPORTIONAL) {
        total = b->sum[0][0];
        p_min = b->min[0][0] / total;
    } else if (r->cfg.kind == VX_REPLAY_RANK) {
        total = b->cdf[b->order_n - 1];
        p_min = vx_replay_rank_mass(b->order_n - 1, r->cfg.alpha) / total;
    }
    /* 1. the slots and their weights */
    size_t *slot = b->scratch_idx;
    double *u = b->scratch_u;
    float *w = out->weights;
    if (r->cfg.kind == VX_REPLAY_UNIFORM) {
        for (size_t j = 0; j < B; j++) {
            slot[j] = vx_replay_draw_slot(r->cfg.seed, b->draws, j, (uint32_t)b->size);
            w[j] = 1;
        }
    } else {
        for (size_t j = 0; j < B; j++) u[j] = vx_replay_draw_u(r->cfg.seed, b->draws, j, B, total);
        if (r->cfg.kind == VX_REPLAY_PROPORTIONAL) tree_find_batch(b, u, slot, B);
        for (size_t j = 0; j < B; j++) {
            double P;
            if (r->cfg.kind == VX_REPLAY_PROPORTIONAL) {
                P = b->sum[b->depth][slot[j]] / total;
            } else {
                size_t k = vx_replay_cdf_find(b->cdf, b->order_n, u[j]);
                slot[j] = b->order[k];
                P = vx_replay_rank_mass(k, r->cfg.alpha) / total;
            }
            w[j] = vx_replay_weight(P, p_min, b->beta);
        }
    }
    b->draws += B;
    /* 2. the gather, a few rows ahead of the copy */
    for (size_t j = 0; j < B; j++) {
        size_t i = slot[j];
        if (j + 8 < B) {
            size_t a = slot[j + 8];
            __builtin_prefetch(b->obs + a * D);
            __builtin_prefetch(b->next_obs + a * D);
            __builtin_prefetch(&b->meta[a]);
        }
        const slot_meta *m = &b->meta[i];
        memcpy(out->obs + j * D, b->obs + i * D, D * sizeof(float));
        memcpy(out->next_obs + j * D, b->next_obs + i * D, D * sizeof(float));
        for (int k = 0; k < VX_ACTION_BRANCHES; k++)
            out->actions[j * VX_ACTION_BRANCHES + k] = m->action[k];
        out->rewards[j] = m->reward;
        out->terminated[j] = m->term;
        out->truncated[j] = m->trunc;
        if (out->steps) out->steps[j] = m->steps;
        out->index[j] = (uint32_t)i;
        out->gen[j] = m->gen;
    }
    return VX_OK;
}

/* Recomputes node i of level l from its children. */
static void tree_recompute(cpu_buf *b, int l, size_t i)
{
    const double *cs = b->sum[l + 1] + i * FAN, *cm = b->min[l + 1] + i * FAN;
    double s = 0, m = INFINITY;
    for (int c = 0; c < FAN; c++) {
        s += cs[c];
        m = cm[c] < m ? cm[c] : m;
    }
    b->sum[l][i] = s;
    b->min[l][i] = m;
}

static vx_status cpu_update(vx_replay *r, const uint32_t *index, const uint32_t *gen,
                            const float *td, size_t n, vx_stream s, vx_err *e)
{
    (void)s, (void)e;
    cpu_buf *b = cb(r);
    if (r->cfg.kind == VX_REPLAY_UNIFORM) return VX_OK;
    int tree = r->cfg.kind == VX_REPLAY_PROPORTIONAL && n <= b->scratch_n;
    size_t m = 0; /* leaves touched, for the batched recompute below */
    /* a non-finite priority takes the largest seen, its chunk's finite ones included wherever
     * they stand in it (the device resolves a chunk at once and must agree: replay_math.h);
     * looked for only in a chunk that has one */
    for (size_t c0 = 0; c0 < n; c0 += VX_REPLAY_UPDATE_CHUNK) {
        size_t end = n - c0 < VX_REPLAY_UPDATE_CHUNK ? n : c0 + VX_REPLAY_UPDATE_CHUNK;
        int any = 0;
        for (size_t k = c0; k < end && !any; k++) any = !isfinite(td[k]);
        double clamp_to = b->max_p;
        for (size_t k = c0; k < end && any; k++) {
            size_t i = index[k];
            double p = fabs((double)td[k]) + r->cfg.eps;
            if (i < b->size && b->meta[i].gen == gen[k] && isfinite(p) && p > clamp_to)
                clamp_to = p;
        }
        for (size_t k = c0; k < end; k++) {
            size_t i = index[k];
            if (i >= b->size || b->meta[i].gen != gen[k]) {
                b->stale++;
                continue;
            }
            double p = fabs((double)td[k]) + r->cfg.eps;
            if (!isfinite(p)) {
                p = clamp_to;
                b->clamped++;
            }
            if (p > b->max_p) b->max_p = p;
            if (!tree) {
                set_priority(r, i, p);
                continue;
            }
            /* duplicates in a batch: the last one wins, as applied in order */
            b->prio[i] = p;
            double v = pow(p, r->cfg.alpha);
            b->sum[b->depth][i] = v;
            b->min[b->depth][i] = v > 0 ? v : INFINITY;
            b->scratch_idx[m++] = i;
        }
    }
    /* ancestors, level by level for all touched leaves at once, so their cache misses overlap
     * (one leaf's chain at a time cost 0.22 ms per 1,024 updates at 1 M) */
    for (int l = b->depth - 1; l >= 0 && tree; l--)
        for (size_t k = 0; k < m; k++) {
            b->scratch_idx[k] /= FAN;
            if (k + 8 < m) __builtin_prefetch(b->sum[l + 1] + (b->scratch_idx[k + 8] / FAN) * FAN);
            tree_recompute(b, l, b->scratch_idx[k]);
        }
    return VX_OK;
}

static vx_status cpu_stats(vx_replay *r, vx_replay_stats *s, double *total_recomputed, vx_err *e)
{
    (void)e;
    const cpu_buf *b = cb(r);
    memset(s, 0, sizeof *s);
    s->size = b->size;
    s->capacity = r->cfg.capacity;
    s->inserted = b->inserted;
    s->total = b->sum[0] ? b->sum[0][0] : 0;
    s->max_priority = b->max_p;
    s->clamped = b->clamped;
    s->stale_updates = b->stale;
    s->refreshes = b->refreshes;
    if (total_recomputed) {
        double z = 0; /* a plain left-to-right sum: a different order from the tree's */
        for (size_t i = 0; b->sum[0] && i < b->size; i++) z += pow(b->prio[i], r->cfg.alpha);
        *total_recomputed = z;
    }
    return VX_OK;
}

static vx_status cpu_prob(vx_replay *r, size_t i, double *p, vx_err *e)
{
    cpu_buf *b = cb(r);
    *p = 0;
    if (i >= b->size) return VX_OK;
    switch (r->cfg.kind) {
    case VX_REPLAY_UNIFORM: *p = 1.0 / (double)b->size; break;
    case VX_REPLAY_PROPORTIONAL: *p = b->sum[b->depth][i] / b->sum[0][0]; break;
    case VX_REPLAY_RANK:
        if (b->order_n == 0 || b->dirty) {
            vx_status st = rank_refresh(r, e);
            if (st) return st;
        }
        for (size_t k = 0; k < b->order_n; k++)
            if (b->order[k] == i) {
                *p = vx_replay_rank_mass(k, r->cfg.alpha) / b->cdf[b->order_n - 1];
                break;
            }
        break;
    }
    return VX_OK;
}

/* ---- save / restore (the file layout: replay_internal.h) ------------------------------------- */

static vx_status cpu_save(vx_replay *r, const char *path, vx_err *e)
{
    const cpu_buf *b = cb(r);
    vx_replay_file_header h;
    vx_replay_header_init(&h, &r->cfg);
    h.dirty = (uint32_t)b->dirty;
    h.size = b->size, h.cursor = b->cursor, h.inserted = b->inserted, h.clamped = b->clamped;
    h.stale = b->stale, h.refreshes = b->refreshes, h.order_n = b->order_n;
    h.calls_since_refresh = b->calls_since_refresh;
    h.max_p = b->max_p;
    h.draws = b->draws;
    size_t n = b->size, D = (size_t)r->cfg.obs_dim;
    vx_atomic_file af;
    vx_status st = vx_atomic_open(&af, path, e);
    if (st) return st;
    vx_replay_writer w;
    st = vx_replay_writer_begin(&w, af.f, &h, e);
    if (!st) {
        vx_replay_writer_put(&w, b->obs, n * D * sizeof(float));
        vx_replay_writer_put(&w, b->next_obs, n * D * sizeof(float));
        vx_replay_writer_put(&w, b->meta, r->cfg.capacity * sizeof *b->meta);
        vx_replay_writer_put(&w, b->prio, n * sizeof(double));
        vx_replay_writer_put(&w, b->order, b->order_n * sizeof(uint32_t));
        st = vx_replay_writer_end(&w, path, e);
    }
    if (st) {
        vx_atomic_abort(&af);
        return st;
    }
    return vx_atomic_commit(&af, e);
}

/* Leaves [n, old) emptied, [0, n) from the raw priorities, ancestors recomputed. */
static void rebuild_leaves(vx_replay *r, size_t n, size_t old)
{
    cpu_buf *b = cb(r);
    if (r->cfg.kind != VX_REPLAY_PROPORTIONAL) return;
    for (size_t i = 0; i < n; i++) tree_set(b, i, pow(b->prio[i], r->cfg.alpha));
    for (size_t i = n; i < old; i++) tree_set(b, i, 0);
}

/* After a load that failed part-way (the arrays hold some of a file that was refused): an empty
 * buffer, as at creation, so nothing refused is ever drawn. */
static void cpu_make_empty(vx_replay *r, size_t old)
{
    cpu_buf *b = cb(r);
    size_t C = r->cfg.capacity;
    memset(b->meta, 0, C * sizeof *b->meta);
    memset(b->prio, 0, C * sizeof *b->prio);
    b->size = b->cursor = 0;
    b->inserted = b->clamped = b->stale = b->draws = 0;
    b->max_p = 1.0;
    b->order_n = 0;
    b->calls_since_refresh = 0;
    b->dirty = 0;
    rebuild_leaves(r, 0, old);
}

/* The file is checked as it is read (replay_file.c); counters change only once all of it
 * passed. */
static vx_status cpu_load(vx_replay *r, const char *path, vx_err *e)
{
    cpu_buf *b = cb(r);
    vx_replay_reader rd;
    vx_status st = vx_replay_reader_open(&rd, path, &r->cfg, e);
    if (st) return st;
    const vx_replay_file_header h = rd.h;
    size_t n = (size_t)h.size, D = (size_t)r->cfg.obs_dim;
    st = vx_replay_reader_read(&rd, b->obs, n * D * sizeof(float), e);
    if (!st) st = vx_replay_reader_read(&rd, b->next_obs, n * D * sizeof(float), e);
    if (!st) st = vx_replay_reader_read(&rd, b->meta, r->cfg.capacity * sizeof *b->meta, e);
    if (!st) st = vx_replay_reader_read(&rd, b->prio, n * sizeof(double), e);
    if (!st) st = vx_replay_reader_read(&rd, b->order, (size_t)h.order_n * sizeof(uint32_t), e);
    if (!st) st = vx_replay_reader_finish(&rd, e);
    vx_replay_reader_close(&rd);
    size_t old = b->size;
    if (st) {
        cpu_make_empty(r, old);
        return st;
    }
    b->size = n, b->cursor = h.cursor, b->inserted = h.inserted, b->clamped = h.clamped;
    b->stale = h.stale, b->refreshes = h.refreshes, b->max_p = h.max_p, b->draws = h.draws;
    r->cfg.seed = h.seed;
    b->dirty = (int)h.dirty, b->calls_since_refresh = (int)h.calls_since_refresh;
    b->order_n = h.order_n;
    /* slots [n, old) held the previous contents: their priorities go with them */
    if (old > n) memset(b->prio + n, 0, (old - n) * sizeof *b->prio);
    rebuild_leaves(r, n, old);
    if (r->cfg.kind == VX_REPLAY_RANK) {
        double c = 0;
        for (size_t k = 0; k < b->order_n; k++) {
            c += vx_replay_rank_mass(k, r->cfg.alpha);
            b->cdf[k] = c;
        }
    }
    return VX_OK;
}

static vx_status cpu_snap(vx_replay *r, vx_stream s, vx_err *e)
{
    (void)r, (void)s;
    return vx_err_set(e, VX_ERR_UNSUPPORTED,
                      "replay: a CPU buffer has no snapshot (save it with vx_replay_save)");
}

static vx_status cpu_snap_reserve(vx_replay *r, vx_err *e) { return cpu_snap(r, NULL, e); }

static vx_status cpu_snap_save(vx_replay *r, const char *path, vx_err *e)
{
    (void)path;
    return cpu_snap(r, NULL, e);
}

/* ---- raw access (replay_internal.h) ---------------------------------------------------------- */

vx_status vx_replay_raw_view(vx_replay *r, vx_replay_raw *out, vx_err *e)
{
    if (r->ops != &vx_replay_cpu_ops)
        return vx_err_set(e, VX_ERR_ARG, "replay: raw view of a buffer that is not on the CPU");
    cpu_buf *b = cb(r);
    out->obs = b->obs, out->next_obs = b->next_obs, out->meta = b->meta, out->prio = b->prio;
    out->size = b->size, out->cursor = b->cursor, out->inserted = b->inserted;
    out->draws = b->draws, out->clamped = b->clamped, out->stale = b->stale;
    out->max_p = b->max_p;
    return VX_OK;
}

vx_status vx_replay_raw_commit(vx_replay *r, const vx_replay_raw *raw, vx_err *e)
{
    if (r->ops != &vx_replay_cpu_ops)
        return vx_err_set(e, VX_ERR_ARG, "replay: raw commit to a buffer that is not on the CPU");
    if (raw->size > r->cfg.capacity || raw->cursor >= r->cfg.capacity)
        return vx_err_set(e, VX_ERR_ARG, "replay: import of %zu slots into capacity %zu", raw->size,
                          r->cfg.capacity);
    cpu_buf *b = cb(r);
    size_t old = b->size;
    b->size = raw->size, b->cursor = raw->cursor, b->inserted = raw->inserted;
    b->draws = raw->draws, b->clamped = raw->clamped, b->stale = raw->stale;
    b->max_p = raw->max_p;
    b->order_n = 0; /* rank: the next sample sorts */
    rebuild_leaves(r, raw->size, old);
    return VX_OK;
}

const vx_replay_ops vx_replay_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .free = cpu_free,
    .on_device = cpu_on_device,
    .size = cpu_size,
    .reserved = cpu_reserved,
    .insert = cpu_insert,
    .set_beta = cpu_set_beta,
    .sample = cpu_sample,
    .rank_refresh = cpu_rank_refresh,
    .update = cpu_update,
    .stats = cpu_stats,
    .prob = cpu_prob,
    .save = cpu_save,
    .load = cpu_load,
    .snap = cpu_snap,
    .snap_save = cpu_snap_save,
    .snap_reserve = cpu_snap_reserve,
};

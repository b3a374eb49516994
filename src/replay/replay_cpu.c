/* replay_cpu.c — the CPU reference of the replay buffer (see replay.h for the contract).
 *
 * Storage is a ring of structure-of-arrays: obs and next_obs [capacity × D] float, actions as
 * bytes, reward, flags, n-step count, a generation stamp per slot.
 *
 * Proportional: a sum tree and a min tree with 16 children per node (a node's children fill two
 * cache lines, so a draw at 1 M capacity touches 5 levels instead of a binary tree's 20 — the
 * binary version measured 1.16 ms per sample+update of 1,024 there, this one is in
 * docs/benchmarks.md), in float64. An update rewrites a leaf and then recomputes each ancestor
 * as the sum (min) of its children — never `node += delta` — so the stored total is exactly what
 * a fresh bottom-up sum gives: it cannot drift however many updates run. The descent never enters a subtree whose sum is zero, so a
 * zero-priority (or empty) slot is never drawn even when rounding pushes the target past a
 * boundary.
 *
 * Rank: raw priorities per slot; a sort of the valid slots by priority (ties by slot index, so it
 * is deterministic) and the cumulative mass Σ_{k≤r} k^−α are rebuilt every `rank_refresh` sample
 * calls. Between refreshes the order is stale, as in the paper; slots first filled after the last
 * refresh wait for the next one (the first sample after any insert into an empty order refreshes).
 */
#include "vixen/replay.h"
#include "vixen/philox.h"
#include "replay_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FAN VX_REPLAY_FAN
#define TREE_MAX_LEVELS VX_REPLAY_MAX_LEVELS

typedef vx_slot_meta slot_meta;

struct vx_replay {
    vx_replay_cfg cfg;
    size_t size, cursor;
    uint64_t inserted, clamped, stale, refreshes;
    double max_p;
    uint64_t draws; /* samples drawn so far: draw j of a call uses Philox counter draws + j */
    /* ring */
    float *obs, *next_obs;
    slot_meta *meta; /* the small fields of a slot together: one cache miss per draw, not six */
    /* proportional: a FAN-ary tree, level 0 the root, level `depth` the leaves */
    int depth;
    size_t leaves;                 /* FAN^depth >= capacity */
    double *sum[TREE_MAX_LEVELS];  /* sum[l]: FAN^l nodes */
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
};

void vx_replay_cfg_default(vx_replay_cfg *c, vx_replay_kind kind, size_t capacity)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->capacity = capacity;
    c->obs_dim = 51;
    c->alpha = kind == VX_REPLAY_RANK ? 0.7 : 0.6;
    c->eps = 1e-6;
    c->rank_refresh = 100;
    c->seed = 1;
}

size_t vx_replay_bytes_per_transition(const vx_replay_cfg *c)
{
    /* two states, the small fields, the raw priority */
    size_t b = 2 * (size_t)c->obs_dim * sizeof(float) + sizeof(slot_meta) + sizeof(double);
    /* sum and min trees: the leaves plus 1/15 of them above, when the capacity fills the leaves */
    if (c->kind == VX_REPLAY_PROPORTIONAL) b += 2 * sizeof(double) * 16 / 15 + 1;
    if (c->kind == VX_REPLAY_RANK) b += sizeof(uint32_t) + sizeof(double); /* order, cdf */
    return b;
}

void vx_replay_free(vx_replay *r)
{
    if (!r) return;
    free(r->obs), free(r->next_obs), free(r->meta), free(r->prio);
    for (int l = 0; l < TREE_MAX_LEVELS; l++) free(r->sum[l]), free(r->min[l]);
    free(r->order), free(r->cdf), free(r->scratch_idx), free(r->scratch_u);
    free(r);
}

vx_status vx_replay_create(const vx_replay_cfg *cfg, vx_replay **out, vx_err *e)
{
    *out = NULL;
    if (cfg->capacity < 1 || cfg->capacity > ((size_t)1 << 31))
        return vx_err_set(e, VX_ERR_ARG, "replay: capacity %zu out of range 1..2^31",
                          cfg->capacity);
    if (cfg->obs_dim < 1) return vx_err_set(e, VX_ERR_ARG, "replay: obs_dim must be >= 1");
    if (!(cfg->alpha >= 0) || !(cfg->eps > 0) || cfg->rank_refresh < 1)
        return vx_err_set(e, VX_ERR_ARG, "replay: need alpha >= 0, eps > 0, rank_refresh >= 1");
    vx_replay *r = calloc(1, sizeof *r);
    if (!r) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory");
    r->cfg = *cfg;
    size_t C = cfg->capacity, D = (size_t)cfg->obs_dim;
    r->obs = vx_alloc_big(C * D * sizeof(float));
    r->next_obs = vx_alloc_big(C * D * sizeof(float));
    r->meta = calloc(C, sizeof *r->meta);
    r->prio = calloc(C, sizeof(double));
    int ok = r->obs && r->next_obs && r->meta && r->prio;
    if (ok && cfg->kind == VX_REPLAY_PROPORTIONAL) {
        r->leaves = 1;
        r->depth = 0;
        while (r->leaves < C) r->leaves *= FAN, r->depth++;
        /* each level holds only the nodes the capacity needs, rounded up to whole groups of FAN
         * children (100 K slots: 100,000 leaves, not 16^5) */
        size_t width = (C + FAN - 1) / FAN * FAN;
        for (int l = r->depth; l >= 0 && ok; l--) {
            if (l == 0) width = 1;
            r->sum[l] = vx_alloc_big(width * sizeof(double));
            r->min[l] = vx_alloc_big(width * sizeof(double));
            ok = r->sum[l] && r->min[l];
            for (size_t i = 0; ok && i < width; i++) r->sum[l][i] = 0, r->min[l][i] = INFINITY;
            width = ((width + FAN - 1) / FAN + FAN - 1) / FAN * FAN;
        }
    }
    if (ok && cfg->kind == VX_REPLAY_RANK) {
        r->order = malloc(C * sizeof(uint32_t));
        r->cdf = malloc(C * sizeof(double));
        ok = r->order && r->cdf;
    }
    if (!ok) {
        vx_replay_free(r);
        return vx_err_set(e, VX_ERR_NOMEM, "replay: cannot allocate %zu transitions (%zu bytes each)",
                          C, vx_replay_bytes_per_transition(cfg));
    }
    r->max_p = 1.0;
    *out = r;
    return VX_OK;
}

/* Sets leaf i to value v (p^α, or 0 for empty) and recomputes its ancestors from their children:
 * each parent is the plain sum (min) of its FAN children, never `parent += delta`. */
static void tree_recompute(vx_replay *r, int l, size_t i);

static void tree_set(vx_replay *r, size_t i, double v)
{
    int d = r->depth;
    r->sum[d][i] = v;
    r->min[d][i] = v > 0 ? v : INFINITY;
    for (int l = d - 1; l >= 0; l--) tree_recompute(r, l, i /= FAN);
}

static void set_priority(vx_replay *r, size_t i, double p)
{
    r->prio[i] = p;
    if (r->cfg.kind == VX_REPLAY_PROPORTIONAL) tree_set(r, i, pow(p, r->cfg.alpha));
}

vx_status vx_replay_insert(vx_replay *r, const vx_transitions *t, size_t n, vx_err *e)
{
    size_t D = (size_t)r->cfg.obs_dim;
    for (size_t k = 0; k < n; k++)
        for (int b = 0; b < 3; b++)
            if (t->actions[k * 3 + b] < 0 || t->actions[k * 3 + b] > 255)
                return vx_err_set(e, VX_ERR_ARG, "replay: transition %zu action %d out of range",
                                  k, t->actions[k * 3 + b]);
    for (size_t k = 0; k < n; k++) {
        size_t i = r->cursor;
        memcpy(r->obs + i * D, t->obs + k * D, D * sizeof(float));
        memcpy(r->next_obs + i * D, t->next_obs + k * D, D * sizeof(float));
        slot_meta *m = &r->meta[i];
        for (int b = 0; b < 3; b++) m->action[b] = (uint8_t)t->actions[k * 3 + b];
        m->reward = t->rewards[k];
        m->term = t->terminated[k];
        m->trunc = t->truncated[k];
        m->steps = t->steps ? t->steps[k] : 1;
        m->gen++;
        set_priority(r, i, r->max_p);
        r->cursor = (r->cursor + 1) % r->cfg.capacity;
        if (r->size < r->cfg.capacity) r->size++;
    }
    r->inserted += n;
    if (n) r->dirty = 1;
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
    pair *tmp = malloc(r->size * sizeof *tmp);
    if (!tmp) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory sorting ranks");
    for (size_t i = 0; i < r->size; i++) tmp[i] = (pair){r->prio[i], (uint32_t)i};
    qsort(tmp, r->size, sizeof *tmp, cmp_pair);
    double c = 0;
    for (size_t k = 0; k < r->size; k++) {
        r->order[k] = tmp[k].i;
        c += pow((double)(k + 1), -r->cfg.alpha);
        r->cdf[k] = c;
    }
    free(tmp);
    r->order_n = r->size;
    r->calls_since_refresh = 0;
    r->dirty = 0;
    r->refreshes++;
    return VX_OK;
}

/* Proportional descent for a whole batch, level by level: the B draws' loads at one level do not
 * depend on each other, so the memory system overlaps their cache misses (one draw at a time,
 * each level's load waits for the last: that version spent 0.8 ms on 1,024 draws at 1 M).
 * A child whose sum is zero is never entered; if rounding carries u past the last positive child,
 * that child is taken with u just inside it — so an empty or zero-priority slot is never
 * returned. On return node[j] is draw j's leaf. */
static void tree_find_batch(const vx_replay *r, double *u, size_t *node, size_t B)
{
    for (size_t j = 0; j < B; j++) node[j] = 0;
    for (int l = 1; l <= r->depth; l++) {
        const double *level = r->sum[l];
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

static size_t cdf_find(const double *cdf, size_t n, double u)
{
    size_t lo = 0, hi = n - 1; /* first k with cdf[k] > u */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

vx_status vx_replay_sample(vx_replay *r, size_t B, double beta, vx_replay_batch *out, vx_err *e)
{
    if (r->size == 0) return vx_err_set(e, VX_ERR_ARG, "replay: sample from an empty buffer");
    if (B == 0) return VX_OK;
    if (B > r->scratch_n) { /* once per new batch size, not per step */
        free(r->scratch_idx), free(r->scratch_u);
        r->scratch_idx = malloc(B * sizeof *r->scratch_idx);
        r->scratch_u = malloc(B * sizeof *r->scratch_u);
        r->scratch_n = r->scratch_idx && r->scratch_u ? B : 0;
        if (!r->scratch_n) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory for a batch");
    }
    size_t D = (size_t)r->cfg.obs_dim;
    double N = (double)r->size;
    if (r->cfg.kind == VX_REPLAY_RANK) {
        if (r->order_n == 0 || r->calls_since_refresh >= r->cfg.rank_refresh) {
            vx_status st = rank_refresh(r, e);
            if (st) return st;
        }
        r->calls_since_refresh++;
    }
    double total = 0, p_min = 1;
    if (r->cfg.kind == VX_REPLAY_PROPORTIONAL) {
        total = r->sum[0][0];
        p_min = r->min[0][0] / total;
    } else if (r->cfg.kind == VX_REPLAY_RANK) {
        N = (double)r->order_n;
        total = r->cdf[r->order_n - 1];
        p_min = pow(N, -r->cfg.alpha) / total;
    }
    /* 1. the slots and their weights */
    size_t *slot = r->scratch_idx;
    double *u = r->scratch_u;
    float *w = out->weights;
    if (r->cfg.kind == VX_REPLAY_UNIFORM) {
        for (size_t j = 0; j < B; j++) {
            vx_rng g = vx_rng_make(r->cfg.seed, VX_REPLAY_STREAM, r->draws + j);
            slot[j] = vx_rng_below(&g, (uint32_t)r->size), w[j] = 1;
        }
    } else {
        double seg = total / (double)B;
        for (size_t j = 0; j < B; j++) {
            vx_rng g = vx_rng_make(r->cfg.seed, VX_REPLAY_STREAM, r->draws + j);
            u[j] = ((double)j + vx_rng_uniform_double(&g)) * seg;
            if (u[j] >= total) u[j] = nextafter(total, 0);
        }
        if (r->cfg.kind == VX_REPLAY_PROPORTIONAL) tree_find_batch(r, u, slot, B);
        for (size_t j = 0; j < B; j++) {
            double P;
            if (r->cfg.kind == VX_REPLAY_PROPORTIONAL) {
                P = r->sum[r->depth][slot[j]] / total;
            } else {
                size_t k = cdf_find(r->cdf, r->order_n, u[j]);
                slot[j] = r->order[k];
                P = pow((double)(k + 1), -r->cfg.alpha) / total;
            }
            /* (N·P)^−β / (N·P_min)^−β = (P / P_min)^−β: one powf, in the float of the output */
            float wj = powf((float)(P / p_min), (float)-beta);
            w[j] = wj < 1 ? wj : 1;
        }
    }
    r->draws += B;
    /* 2. the gather, a few rows ahead of the copy */
    for (size_t j = 0; j < B; j++) {
        size_t i = slot[j];
        if (j + 8 < B) {
            size_t a = slot[j + 8];
            __builtin_prefetch(r->obs + a * D);
            __builtin_prefetch(r->next_obs + a * D);
            __builtin_prefetch(&r->meta[a]);
        }
        const slot_meta *m = &r->meta[i];
        memcpy(out->obs + j * D, r->obs + i * D, D * sizeof(float));
        memcpy(out->next_obs + j * D, r->next_obs + i * D, D * sizeof(float));
        for (int b = 0; b < 3; b++) out->actions[j * 3 + b] = m->action[b];
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
static void tree_recompute(vx_replay *r, int l, size_t i)
{
    const double *cs = r->sum[l + 1] + i * FAN, *cm = r->min[l + 1] + i * FAN;
    double s = 0, m = INFINITY;
    for (int c = 0; c < FAN; c++) {
        s += cs[c];
        m = cm[c] < m ? cm[c] : m;
    }
    r->sum[l][i] = s;
    r->min[l][i] = m;
}

void vx_replay_update(vx_replay *r, const uint32_t *index, const uint32_t *gen, const float *td,
                      size_t n)
{
    if (r->cfg.kind == VX_REPLAY_UNIFORM) return;
    int tree = r->cfg.kind == VX_REPLAY_PROPORTIONAL && n <= r->scratch_n;
    size_t m = 0; /* leaves touched, for the batched recompute below */
    for (size_t k = 0; k < n; k++) {
        size_t i = index[k];
        if (i >= r->size || r->meta[i].gen != gen[k]) {
            r->stale++;
            continue;
        }
        double p = fabs((double)td[k]) + r->cfg.eps;
        if (!isfinite(p)) {
            p = r->max_p;
            r->clamped++;
        }
        if (p > r->max_p) r->max_p = p;
        if (!tree) {
            set_priority(r, i, p);
            continue;
        }
        /* duplicates in a batch: the last one wins, as applied in order */
        r->prio[i] = p;
        double v = pow(p, r->cfg.alpha);
        r->sum[r->depth][i] = v;
        r->min[r->depth][i] = v > 0 ? v : INFINITY;
        r->scratch_idx[m++] = i;
    }
    /* ancestors, level by level for all touched leaves at once, so their cache misses overlap
     * (one leaf's chain at a time cost 0.22 ms per 1,024 updates at 1 M) */
    for (int l = r->depth - 1; l >= 0 && tree; l--)
        for (size_t k = 0; k < m; k++) {
            r->scratch_idx[k] /= FAN;
            if (k + 8 < m) __builtin_prefetch(r->sum[l + 1] + (r->scratch_idx[k + 8] / FAN) * FAN);
            tree_recompute(r, l, r->scratch_idx[k]);
        }
}

void vx_replay_stats_get(const vx_replay *r, vx_replay_stats *s)
{
    memset(s, 0, sizeof *s);
    s->size = r->size;
    s->capacity = r->cfg.capacity;
    s->inserted = r->inserted;
    s->total = r->sum[0] ? r->sum[0][0] : 0;
    s->max_priority = r->max_p;
    s->clamped = r->clamped;
    s->stale_updates = r->stale;
    s->refreshes = r->refreshes;
}

double vx_replay_total_recomputed(const vx_replay *r)
{
    if (!r->sum[0]) return 0;
    double s = 0; /* a plain left-to-right sum: a different order from the tree's */
    for (size_t i = 0; i < r->size; i++) s += pow(r->prio[i], r->cfg.alpha);
    return s;
}

double vx_replay_prob(vx_replay *r, size_t i)
{
    if (i >= r->size) return 0;
    switch (r->cfg.kind) {
    case VX_REPLAY_UNIFORM: return 1.0 / (double)r->size;
    case VX_REPLAY_PROPORTIONAL: return r->sum[r->depth][i] / r->sum[0][0];
    case VX_REPLAY_RANK:
        if (r->order_n == 0 || r->dirty) rank_refresh(r, NULL);
        for (size_t k = 0; k < r->order_n; k++)
            if (r->order[k] == i) return pow((double)(k + 1), -r->cfg.alpha) / r->cdf[r->order_n - 1];
        return 0;
    }
    return 0;
}

/* ---- save / restore -------------------------------------------------------------------------- */

#define REPLAY_MAGIC "VXREPLAY"
#define REPLAY_FORMAT 3

typedef struct {
    char magic[8];
    uint32_t format, kind;
    uint64_t capacity;
    uint32_t obs_dim, dirty;
    uint64_t size, cursor, inserted, clamped, stale, refreshes, order_n;
    int64_t calls_since_refresh;
    double max_p, alpha, eps;
    uint64_t draws, seed; /* the draws continue the saved buffer's sequence */
} replay_header;

vx_status vx_replay_save(const vx_replay *r, const char *path, vx_err *e)
{
    replay_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, REPLAY_MAGIC, 8);
    h.format = REPLAY_FORMAT;
    h.kind = (uint32_t)r->cfg.kind;
    h.capacity = r->cfg.capacity;
    h.obs_dim = (uint32_t)r->cfg.obs_dim;
    h.dirty = (uint32_t)r->dirty;
    h.size = r->size, h.cursor = r->cursor, h.inserted = r->inserted, h.clamped = r->clamped;
    h.stale = r->stale, h.refreshes = r->refreshes, h.order_n = r->order_n;
    h.calls_since_refresh = r->calls_since_refresh;
    h.max_p = r->max_p, h.alpha = r->cfg.alpha, h.eps = r->cfg.eps;
    h.draws = r->draws;
    h.seed = r->cfg.seed;
    size_t n = r->size, D = (size_t)r->cfg.obs_dim;
    vx_atomic_file af;
    vx_status st = vx_atomic_open(&af, path, e);
    if (st) return st;
    int bad = fwrite(&h, sizeof h, 1, af.f) != 1;
    bad |= fwrite(r->obs, sizeof(float), n * D, af.f) != n * D;
    bad |= fwrite(r->next_obs, sizeof(float), n * D, af.f) != n * D;
    bad |= fwrite(r->meta, sizeof *r->meta, r->cfg.capacity, af.f) != r->cfg.capacity;
    bad |= fwrite(r->prio, sizeof(double), n, af.f) != n;
    if (r->order_n) bad |= fwrite(r->order, sizeof(uint32_t), r->order_n, af.f) != r->order_n;
    if (bad) {
        vx_atomic_abort(&af);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
    }
    return vx_atomic_commit(&af, e);
}

vx_status vx_replay_load(vx_replay *r, const char *path, vx_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot open");
    replay_header h;
    vx_status st = VX_OK;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, REPLAY_MAGIC, 8) != 0 ||
        h.format != REPLAY_FORMAT)
        st = vx_err_record(e, VX_ERR_FORMAT, path, -1, 0, "magic", "not a vixen replay file");
    else if (h.kind != (uint32_t)r->cfg.kind || h.capacity != r->cfg.capacity ||
             h.obs_dim != (uint32_t)r->cfg.obs_dim || h.size > h.capacity ||
             h.cursor >= h.capacity || h.order_n > h.size)
        st = vx_err_record(e, VX_ERR_ARG, path, -1, 8, "kind",
                           "saved buffer (kind %u, capacity %llu, obs %u) does not match this one "
                           "(kind %d, capacity %zu, obs %d)",
                           h.kind, (unsigned long long)h.capacity, h.obs_dim, (int)r->cfg.kind,
                           r->cfg.capacity, r->cfg.obs_dim);
    size_t n = (size_t)h.size, D = (size_t)r->cfg.obs_dim;
    if (!st) {
        int bad = fread(r->obs, sizeof(float), n * D, f) != n * D;
        bad |= fread(r->next_obs, sizeof(float), n * D, f) != n * D;
        bad |= fread(r->meta, sizeof *r->meta, r->cfg.capacity, f) != r->cfg.capacity;
        bad |= fread(r->prio, sizeof(double), n, f) != n;
        if (h.order_n) bad |= fread(r->order, sizeof(uint32_t), h.order_n, f) != h.order_n;
        if (bad) st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "", "truncated replay file");
    }
    fclose(f);
    if (st) return st;
    r->size = n, r->cursor = h.cursor, r->inserted = h.inserted, r->clamped = h.clamped;
    r->stale = h.stale, r->refreshes = h.refreshes, r->max_p = h.max_p, r->draws = h.draws;
    r->cfg.seed = h.seed;
    r->dirty = (int)h.dirty, r->calls_since_refresh = (int)h.calls_since_refresh;
    r->order_n = h.order_n;
    if (r->cfg.kind == VX_REPLAY_PROPORTIONAL) {
        for (size_t i = 0; i < n; i++) tree_set(r, i, pow(r->prio[i], r->cfg.alpha));
    }
    if (r->cfg.kind == VX_REPLAY_RANK) {
        double c = 0;
        for (size_t k = 0; k < r->order_n; k++) {
            c += pow((double)(k + 1), -r->cfg.alpha);
            r->cdf[k] = c;
        }
    }
    return VX_OK;
}

vx_status vx_replay_import(vx_replay *r, const float *obs, const float *next_obs,
                           const vx_slot_meta *meta, const double *prio, size_t size,
                           size_t cursor, double max_p, uint64_t inserted, vx_err *e)
{
    if (size > r->cfg.capacity || cursor >= r->cfg.capacity)
        return vx_err_set(e, VX_ERR_ARG, "replay: import of %zu slots into capacity %zu", size,
                          r->cfg.capacity);
    size_t D = (size_t)r->cfg.obs_dim;
    memcpy(r->obs, obs, size * D * sizeof(float));
    memcpy(r->next_obs, next_obs, size * D * sizeof(float));
    memcpy(r->meta, meta, r->cfg.capacity * sizeof *r->meta);
    r->size = size;
    r->cursor = cursor;
    r->max_p = max_p;
    r->inserted = inserted;
    r->order_n = 0;
    for (size_t i = 0; i < size; i++) set_priority(r, i, prio[i]);
    return VX_OK;
}

void vx_replay_raw_view(const vx_replay *r, vx_replay_raw *out)
{
    out->obs = r->obs, out->next_obs = r->next_obs, out->meta = r->meta, out->prio = r->prio;
    out->size = r->size, out->cursor = r->cursor, out->inserted = r->inserted;
    out->draws = r->draws, out->clamped = r->clamped, out->stale = r->stale;
    out->max_p = r->max_p;
    out->seed = r->cfg.seed;
}

void vx_replay_set_counters(vx_replay *r, uint64_t draws, uint64_t clamped, uint64_t stale)
{
    r->draws = draws, r->clamped = clamped, r->stale = stale;
}

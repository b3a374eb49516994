/* replay.h — the experience replay buffer: one interface, three samplers.
 *
 *   uniform        every stored transition equally likely, weights 1;
 *   proportional   P(i) = p_i^α / Σ_k p_k^α, stratified (one draw per equal slice of the total),
 *                  over a sum tree with float64 nodes recomputed from their children (no drift);
 *   rank           P(i) ∝ rank(i)^−α, rank 1 the largest priority; ranks from a sort refreshed
 *                  every `rank_refresh` sample calls; exact inverse-CDF draws inside B equal-mass
 *                  strata.
 * Schaul et al. 2016. Importance weights w_i = (N·P(i))^−β / max_j w_j, the max over the whole
 * buffer (the weight of the least likely item). Priorities p = |δ| + ε; new items get the largest
 * priority seen so far; a non-finite δ is clamped to that largest priority and counted.
 *
 * Every sample carries the slot's generation stamp; an update whose stamp no longer matches (the
 * slot was overwritten since it was sampled) is ignored and counted.
 *
 * Shapes: n inserted, B sampled, D = obs_dim. All arrays are caller-owned. */
#ifndef VIXEN_REPLAY_H
#define VIXEN_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { VX_REPLAY_UNIFORM, VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK } vx_replay_kind;

typedef struct {
    vx_replay_kind kind;
    size_t capacity;
    int obs_dim;      /* 51 */
    double alpha;     /* 0.6 (proportional), 0.7 (rank) */
    double eps;       /* 1e-6, added to |δ| */
    int rank_refresh; /* 100 sample calls between sorts */
    uint64_t seed;
} vx_replay_cfg;

void vx_replay_cfg_default(vx_replay_cfg *c, vx_replay_kind kind, size_t capacity);

/* n transitions to insert. steps: the n-step count of each (NULL means 1). */
typedef struct {
    const float *obs, *next_obs; /* n × D */
    const int32_t *actions;      /* n × 3 */
    const float *rewards;        /* n */
    const uint8_t *terminated, *truncated, *steps;
} vx_transitions;

/* B samples, written by vx_replay_sample. */
typedef struct {
    float *obs, *next_obs;
    int32_t *actions;
    float *rewards;
    uint8_t *terminated, *truncated, *steps;
    float *weights; /* importance weights in (0, 1] */
    uint32_t *index, *gen;
} vx_replay_batch;

typedef struct {
    size_t size, capacity;
    uint64_t inserted;      /* transitions ever inserted */
    double total;           /* Σ p^α as stored (proportional) */
    double max_priority;    /* the largest p seen */
    uint64_t clamped;       /* non-finite priorities clamped */
    uint64_t stale_updates; /* updates ignored because the slot was overwritten */
    uint64_t refreshes;     /* rank sorts */
} vx_replay_stats;

typedef struct vx_replay vx_replay;

vx_status vx_replay_create(const vx_replay_cfg *cfg, vx_replay **out, vx_err *e);
void vx_replay_free(vx_replay *r);
/* Copies n transitions in, overwriting the oldest once full. */
vx_status vx_replay_insert(vx_replay *r, const vx_transitions *t, size_t n, vx_err *e);
/* Draws B transitions; β only matters for the weights. An empty buffer is an error. */
vx_status vx_replay_sample(vx_replay *r, size_t B, double beta, vx_replay_batch *out, vx_err *e);
/* New priorities |δ| + ε for sampled slots (index and gen as the sample returned). */
void vx_replay_update(vx_replay *r, const uint32_t *index, const uint32_t *gen, const float *td,
                      size_t n);
void vx_replay_stats_get(const vx_replay *r, vx_replay_stats *s);
/* The sampling probability of slot i under the current priorities (for tests and reports). */
double vx_replay_prob(vx_replay *r, size_t i);
/* A fresh Σ p^α over the leaves, for checking the tree's stored total. */
double vx_replay_total_recomputed(const vx_replay *r);

/* Everything needed to resume: contents, priorities, cursor, generations, counters, RNG. Atomic
 * write; load requires a buffer created with the same kind, capacity and obs_dim. */
vx_status vx_replay_save(const vx_replay *r, const char *path, vx_err *e);
vx_status vx_replay_load(vx_replay *r, const char *path, vx_err *e);

/* Bytes of memory per stored transition (storage + priority structures), for sizing. */
size_t vx_replay_bytes_per_transition(const vx_replay_cfg *cfg);

#ifdef __cplusplus
}
#endif

#endif

/* fuzz_replay.c — libFuzzer target: the replay buffer file (src/replay/), as a resume reads it.
 * The input is loaded into a small CPU buffer of each kind (uniform, proportional, rank; the
 * fixed shape of fuzz_common.h: a file of another kind or shape must be refused), and a buffer
 * that accepted it is then used as training would: statistics, probabilities, samples, priority
 * updates, inserts and a rank sort. Whatever a file holds, loading either fails with an error or
 * leaves a buffer that all of these can use. */
#include "fuzz_common.h"

#include <stdlib.h>

enum { B = 8, D = VX_FUZZ_REPLAY_OBS_DIM };

static vx_fuzz_file g_in;

static void sample_update(vx_replay *r)
{
    float obs[B * D], next[B * D], rew[B], w[B], td[B];
    int32_t act[B * VX_ACTION_BRANCHES];
    uint8_t term[B], trunc[B], steps[B];
    uint32_t idx[B], gen[B];
    vx_replay_batch b = {obs, next, act, rew, term, trunc, steps, w, idx, gen};
    if (vx_replay_sample(r, B, &b, NULL, NULL) != VX_OK) return;
    for (int i = 0; i < B; i++) td[i] = (float)i - 3.5f;
    vx_replay_update(r, idx, gen, td, B, NULL, NULL);
}

static void insert_some(vx_replay *r)
{
    float obs[2 * D] = {0}, next[2 * D] = {0}, rew[2] = {1, -1};
    int32_t act[2 * VX_ACTION_BRANCHES] = {0};
    uint8_t term[2] = {0, 1}, trunc[2] = {0}, steps[2] = {1, 2};
    vx_transitions t = {obs, next, act, rew, term, trunc, steps};
    vx_replay_insert(r, &t, 2, NULL, NULL);
}

static void use(vx_replay *r)
{
    vx_replay_stats st;
    double total;
    vx_replay_stats_get(r, &st, &total, NULL);
    for (size_t i = 0; i < vx_replay_size(r); i++) {
        double p;
        vx_replay_prob(r, i, &p, NULL);
    }
    vx_replay_set_beta(r, 0.5, NULL, NULL);
    sample_update(r);
    insert_some(r);
    vx_replay_rank_refresh(r, NULL, NULL);
    sample_update(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (g_in.path[0] == 0) vx_fuzz_file_open(&g_in, "replay.bin");
    vx_fuzz_file_set(&g_in, data, size);
    const vx_replay_kind kinds[] = {VX_REPLAY_UNIFORM, VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK};
    for (int k = 0; k < 3; k++) {
        vx_replay_cfg c;
        vx_fuzz_replay_cfg(kinds[k], &c);
        vx_replay *r = NULL;
        if (vx_replay_create(&c, NULL, &r, NULL) != VX_OK) abort();
        if (vx_replay_load(r, g_in.path, NULL) == VX_OK) use(r);
        vx_replay_free(r);
    }
    return 0;
}

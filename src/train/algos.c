/* algos.c — the algorithm registry: every algorithm a run can train, by name (train.algo). Adding
 * one is an entry here and its vx_algo_ops (algo.h). The first entry is the default. */
#include "vixen/dqn.h"
#include "vixen/ppo.h"
#include "vixen/train.h"

#include <string.h>

static const vx_algo_ops *const algos[] = {&vx_algo_dqn, &vx_algo_ppo};
#define N_ALGOS (int)(sizeof algos / sizeof *algos)

/* train.algo's choices, in registry order (the settings table takes a NULL-terminated list) */
const char *const vx_algo_names[] = {"dqn", "ppo", NULL};

_Static_assert(N_ALGOS <= VX_ALGO_SLOTS, "raise VX_ALGO_SLOTS");
_Static_assert(sizeof(vx_dqn_settings) <= VX_ALGO_SETTINGS_BYTES, "raise VX_ALGO_SETTINGS_BYTES");
_Static_assert(sizeof(vx_ppo_settings) <= VX_ALGO_SETTINGS_BYTES, "raise VX_ALGO_SETTINGS_BYTES");

int vx_algo_count(void) { return N_ALGOS; }

const vx_algo_ops *vx_algo_at(int i) { return i >= 0 && i < N_ALGOS ? algos[i] : NULL; }

const vx_algo_ops *vx_algo_find(const char *name)
{
    for (int i = 0; i < N_ALGOS; i++)
        if (strcmp(algos[i]->name, name) == 0) return algos[i];
    return NULL;
}

/* study_common.h — what the study tests share: a small search space, the settings of tiny DQN
 * trials on the CPU, and the comparison of two studies' trials. */
#ifndef VIXEN_TEST_STUDY_COMMON_H
#define VIXEN_TEST_STUDY_COMMON_H

#include "vixen/hyperopt.h"

#include <stddef.h>

extern const char *space_text;

/* tiny DQN trials on the CPU, as `vixen hyperopt` arguments (and keys for the library) */
#define SMALL                                                                                      \
    "--set data.synth_days=12 --set env.episode_len=60 --set train.envs=16 "                       \
    "--set train.steps_per_epoch=40 --set dqn.batch=32 --set dqn.trunk=32,32 "                     \
    "--set dqn.head_hidden=16 --set dqn.warmup=200 --set train.eval_every=1 --set train.epochs=4 " \
    "--set replay.capacity=4000 --set train.device=cpu"

/* A fresh folder (root) with space_text in its space.yaml (space). */
void study_folder(char *root, size_t n_root, char *space, size_t n_space);
/* Every trial of the study in dir, from its store (fails the test when it cannot be read). */
vx_trial *trials_of(const char *dir, size_t *n);
int same_bits(double a, double b);
/* The trials of two studies agree: parameters, seeds, statuses, objectives bit for bit, and so
 * do their best.yaml (unless a trial is left out of the comparison: skip_trial ≥ 0). */
void assert_same_trials(const char *a, const char *b, int skip_trial);

#endif

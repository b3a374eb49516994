/* fuzz_common.h — what the libFuzzer targets share: an in-memory file that readers taking a path
 * can open (a memfd, reached as /proc/self/fd/N, so no input touches the disk), the fixed small
 * replay buffer and DQN run the replay and checkpoint targets load into, and the writers of their
 * seed inputs (fuzz_seeds.c and the checkpoint target's start-up use the same code, so a seed
 * always matches the instance it is loaded into). */
#ifndef VIXEN_FUZZ_COMMON_H
#define VIXEN_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/algo.h"
#include "vixen/replay.h"
#include "vixen/train.h"

/* An anonymous in-memory file, reopened by path for every read. */
typedef struct {
    int fd;
    char path[64];
} vx_fuzz_file;

/* Creates it; exits the process on failure (a fuzz target cannot run without it). */
void vx_fuzz_file_open(vx_fuzz_file *f, const char *name);
/* Replaces its contents with `n` bytes. */
void vx_fuzz_file_set(vx_fuzz_file *f, const uint8_t *data, size_t n);

/* The replay buffer the replay target loads files into: capacity 16, 3 features per observation,
 * so a whole buffer file is well under a kilobyte. */
#define VX_FUZZ_REPLAY_CAPACITY 16
#define VX_FUZZ_REPLAY_OBS_DIM 3
void vx_fuzz_replay_cfg(vx_replay_kind kind, vx_replay_cfg *c);
/* A buffer of that shape holding 20 transitions (wrapped once) with sampled priorities, saved. */
vx_status vx_fuzz_replay_seed(vx_replay_kind kind, const char *path, vx_err *e);

/* The DQN run the checkpoint target restores into: a 5-day synthetic market, 2 environments of
 * 4 steps an epoch, a trunk of 8, a replay buffer of 16. */
typedef struct {
    vx_train_cfg *cfg;
    vx_market market;
    const vx_algo_ops *ops;
    vx_run_params run;
} vx_fuzz_run;

vx_status vx_fuzz_run_open(vx_fuzz_run *r, vx_err *e);
void vx_fuzz_run_close(vx_fuzz_run *r);
/* An instance over new environments (*env, free after the instance), or, with env NULL, one that
 * only acts. */
vx_status vx_fuzz_run_algo(vx_fuzz_run *r, vx_env **env, vx_algo **out, vx_err *e);
/* Trains one epoch and writes its checkpoint into `dir` with the run's writer: the side files,
 * then "latest.safetensors" naming them, as the run VX_FUZZ_RUN_ID. */
#define VX_FUZZ_RUN_ID "0123456789abcdef0123456789abcdef"
vx_status vx_fuzz_run_checkpoint(vx_fuzz_run *r, const char *dir, vx_err *e);

/* Makes a private folder under $TMPDIR (or /tmp) that is removed at exit. */
void vx_fuzz_tempdir(char *buf, size_t n);

#endif

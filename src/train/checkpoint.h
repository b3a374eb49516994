/* checkpoint.h — writing and reading a run's checkpoint folder (internal to the train layer).
 *
 * A checkpoint is checkpoint/latest.safetensors (the algorithm's tensors, its counters, the run's
 * counters and identity, the resolved config) and the side files it names
 * (checkpoint/replay-<epoch>.bin) with their checksums.
 * The side files are written first, each atomically under a name of its own epoch; the tensor
 * file, renamed over latest.safetensors last, is the commit: a crash at any point leaves the
 * previous checkpoint whole (its side files are removed only after the new one is committed).
 *
 * A detached state (algo.h) may be written by a background thread while training goes on; at
 * most one write is in flight (the run takes no new snapshot until it has finished). */
#ifndef VIXEN_TRAIN_CHECKPOINT_H
#define VIXEN_TRAIN_CHECKPOINT_H

#include <pthread.h>
#include <stdatomic.h>
#include "vixen/eval.h"
#include "vixen/train.h"

/* vixen-run-2: the run's identity and each side file's checksum in the metadata, the data
 * section's checksum (vixen-run-1 checkpoints can be evaluated, not resumed) */
#define VX_CKPT_FORMAT "vixen-run-2"
#define VX_CKPT_FILE "latest.safetensors"
#define VX_CKPT_BEST "best.safetensors" /* weights only: the validation's best, for evaluation */

typedef struct {
    char dir[1100];   /* <run>/checkpoint */
    vx_algo_state st; /* the algorithm's (tensors point into its buffers) */
    char algo[32];
    char run_id[40]; /* the run's identity (run.c), in every checkpoint it writes */
    int epoch;       /* epochs completed */
    int64_t env_steps;
    char *config;                 /* the resolved config as YAML (owned) */
    char devices[VX_DEVICES_LEN]; /* the devices that trained the run so far, in order */
    char data_id[33];             /* the bars' identity (run.c, market_id) */
    /* a best checkpoint (file VX_CKPT_BEST, no side files, nothing pruned) when set, with the
     * validation figures in its metadata */
    int best;
    double val_sharpe, val_sharpe_se;
} ckpt_job;

typedef struct {
    pthread_t thread;
    int running;     /* a thread was started and not joined */
    atomic_int done; /* it has finished (join will not block) */
    ckpt_job job;
    vx_status status;
    vx_err err;
} ckpt_writer;

/* Writes the job now, on this thread. */
vx_status vx_ckpt_write(const ckpt_job *job, vx_err *e);
/* Starts writing the job on a thread of its own (the writer takes the job's config text). */
vx_status vx_ckpt_writer_start(ckpt_writer *w, ckpt_job *job, vx_err *e);
/* A write is in flight. */
int vx_ckpt_writer_busy(ckpt_writer *w);
/* Waits for the write in flight, if any; its status (VX_OK when there was none). */
vx_status vx_ckpt_writer_join(ckpt_writer *w, vx_err *e);

/* Removes what a crash may have left in the checkpoint folder: temporary files, and side files
 * the committed checkpoint does not name. */
void vx_ckpt_clean(const char *dir);
/* Removes temporary files ("*.tmp.*") a crash left in a folder. */
void vx_ckpt_clean_temps(const char *dir);
/* The best checkpoint's epoch and validation Sharpe ratio, when <dir>/best.safetensors exists
 * (returns 0 when it does not or cannot be read). */
int vx_ckpt_best(const char *dir, int *epoch, double *val_sharpe);
/* Reads <dir>/latest.safetensors of a run and checks it is a resumable checkpoint of `algo`
 * written by the run `run_id`, whose side files are present with the checksums it recorded;
 * its epoch and env_steps counters. */
vx_status vx_ckpt_open(const char *dir, const char *algo, const char *run_id, vx_safetensors *st,
                       int *epoch, int64_t *env_steps, vx_err *e);

/* ---- the run folder (run_folder.c) ---- */

#define VX_RUN_ID_LEN 32

/* A new random identity written to <run_dir>/run-id; reading it back. */
vx_status vx_run_id_create(const char *run_dir, char id[VX_RUN_ID_LEN + 1], vx_err *e);
vx_status vx_run_id_read(const char *run_dir, char id[VX_RUN_ID_LEN + 1], vx_err *e);

#endif

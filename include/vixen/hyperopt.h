/* hyperopt.h — the hyperparameter search: a search space over training keys, a particle swarm
 * that moves through it, and (later sections) the study that evaluates its particles as training
 * runs.
 *
 * The space. Each parameter is one training key (any key `vixen train --keys` lists) and how its
 * value is searched:
 *   float       a value in [low, high], searched on a linear scale
 *   logfloat    a value in [low, high] (both > 0), searched on the log scale
 *   int         a whole number in [low, high]
 *   logint      a whole number in [low, high] (low ≥ 1), searched on the log scale
 *   categorical one of `values`: encoding "round" gives it one coordinate in
 *               [-0.5, k - 0.5] that is rounded to a value's index (values next to each other are
 *               neighbours: order them so), encoding "score" gives it k coordinates in [0, 1],
 *               one score per value, and the value with the highest score is taken (no order)
 * A particle is a point of the coordinate box the parameters span; decoding it gives each key's
 * value as text, which is set on a copy of the base config through the key table, so a value the
 * key refuses is an error of the space, found before the search starts (vx_space_check).
 *
 * The file (YAML, read by the same strict reader as configs: a key given twice is an error):
 *   dqn.lr:     {type: logfloat, low: 1.0e-4, high: 3.0e-3}
 *   dqn.gamma:  {type: float, low: 0.9, high: 0.999}
 *   dqn.n_step: {type: int, low: 1, high: 5}
 *   dqn.loss:   {type: categorical, values: [mse, huber, c51], encoding: score}
 *
 * The swarm (Kennedy & Eberhart 1995, with the inertia weight of Shi & Eberhart 1998 and the
 * constriction values of Clerc & Kennedy 2002 as defaults: w = 0.7298, c1 = c2 = 1.49618). Each
 * generation every particle is evaluated; then, in particle order, personal and global bests are
 * updated (a strictly better objective replaces a best, so ties go to the earlier particle), and
 * the next generation moves every particle:
 *   v ← w v + c1 r1 (pbest − x) + c2 r2 (gbest − x),   |v_d| ≤ vmax (hi_d − lo_d),
 *   x ← x + v, reflected back into [lo_d, hi_d] (the velocity component reversed).
 * The objective is maximised. Every random number — initial positions and velocities, r1 and r2 —
 * is a Philox draw keyed by (seed, particle, generation, coordinate), so a generation's positions
 * depend only on the seed and the earlier generations' objectives: never on the order or the
 * concurrency in which particles were evaluated. */
#ifndef VIXEN_HYPEROPT_H
#define VIXEN_HYPEROPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "vixen/device.h"
#include "vixen/train.h"
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the search space ------------------------------------------------------------------------ */

typedef enum {
    VX_PARAM_FLOAT,
    VX_PARAM_LOGFLOAT,
    VX_PARAM_INT,
    VX_PARAM_LOGINT,
    VX_PARAM_CATEGORICAL,
} vx_param_type;

typedef enum { VX_ENCODE_ROUND, VX_ENCODE_SCORE } vx_param_encoding;

#define VX_SPACE_MAX_PARAMS 32
#define VX_SPACE_MAX_DIMS 128
#define VX_PARAM_MAX_VALUES 32
#define VX_PARAM_VALUE_LEN 128

typedef struct {
    char key[64]; /* the training key: "dqn.lr" */
    vx_param_type type;
    double low, high; /* numbers: the values' bounds */
    int n_values;     /* categorical */
    char values[VX_PARAM_MAX_VALUES][VX_PARAM_VALUE_LEN];
    vx_param_encoding encoding;
    int dim, n_dims; /* its coordinates: dim .. dim + n_dims − 1 */
    int line;        /* where the file defines it */
} vx_param;

typedef struct {
    char name[256]; /* the file (or what stands for it) the space was read from, for errors */
    vx_param p[VX_SPACE_MAX_PARAMS];
    int n;
    int dims;                                            /* coordinates in all */
    double lo[VX_SPACE_MAX_DIMS], hi[VX_SPACE_MAX_DIMS]; /* each coordinate's bounds */
} vx_space;

/* Reads a space file (or text in memory, `name` standing for the file); every error names the file,
 * the line and the parameter. */
vx_status vx_space_load(vx_space *s, const char *path, vx_err *e);
vx_status vx_space_load_text(vx_space *s, const char *text, size_t len, const char *name,
                             vx_err *e);
/* Every parameter's key is a training key of the algorithm the trials train (or of any, when the
 * space searches train.algo), and every value it can decode to (bounds, each category, the
 * middle) is accepted by that key on a copy of `base`; an error names the file, the line and the
 * key. */
vx_status vx_space_check(const vx_space *s, const vx_train_cfg *base, vx_err *e);
/* Whether the space searches `key` (a whole key: "train.algo"). */
int vx_space_has(const vx_space *s, const char *key);
/* Parameter i's value at coordinates x, as the text a key is set from ("0.000316", "3", "c51"). */
void vx_space_value(const vx_space *s, int i, const double *x, char *out, size_t n);
/* Sets every parameter's value at x on c. */
vx_status vx_space_apply(const vx_space *s, const double *x, vx_train_cfg *c, vx_err *e);

/* ---- the particle swarm ---------------------------------------------------------------------- */

typedef struct {
    int swarm;     /* particles (20) */
    double w;      /* inertia (0.7298) */
    double c1, c2; /* cognitive and social weights (1.49618 each) */
    double vmax;   /* the largest velocity, as a fraction of each coordinate's range (0.5) */
    uint64_t seed; /* of every draw */
} vx_pso_cfg;

void vx_pso_cfg_default(vx_pso_cfg *c);
vx_status vx_pso_cfg_check(const vx_pso_cfg *c, vx_err *e);

typedef struct {
    vx_pso_cfg cfg;
    int dims;
    double lo[VX_SPACE_MAX_DIMS], hi[VX_SPACE_MAX_DIMS];
    int generation;  /* the generation whose positions x holds (0: the first) */
    double *x, *v;   /* swarm × dims: positions and velocities */
    double *pbest_x; /* swarm × dims */
    double *pbest_f; /* swarm: −inf until a particle has a finite objective */
    double *gbest_x; /* dims */
    double gbest_f;  /* −inf until some particle has one */
    int gbest_particle, gbest_generation; /* −1 until then */
    int *reported;                        /* swarm: this generation's objective is in */
} vx_pso;

/* A swarm over the box [lo, hi]^dims (a space's coordinates: s->lo, s->hi), generation 0's
 * positions uniform in the box, velocities half the way to another uniform point. */
vx_status vx_pso_init(vx_pso *p, const vx_pso_cfg *cfg, int dims, const double *lo,
                      const double *hi, vx_err *e);
void vx_pso_free(vx_pso *p);
/* Particle i's coordinates in the current generation. */
const double *vx_pso_position(const vx_pso *p, int i);
/* The objective of particle i in the current generation (maximised; NaN or ±inf: a failed
 * evaluation, never a best). Reports must come in particle order (what makes ties resolve the
 * same whatever the concurrency); a report out of order or twice is an error. */
vx_status vx_pso_report(vx_pso *p, int i, double f, vx_err *e);
/* Moves every particle to the next generation; every particle must have been reported. */
vx_status vx_pso_step(vx_pso *p, vx_err *e);

/* ---- the hardware budget --------------------------------------------------------------------
 * What one trial reserves, estimated from its config without creating it:
 *   weights     parameters × 4 bytes × the copies the algorithm keeps (weights, Adam's two moments,
 *               gradients; the DQN also its target and acting copies)
 *   activations bytes one batch row needs in the forward and backward passes × the batch
 *   replay      capacity × bytes per transition (the DQN), or the rollout (PPO)
 *   envs        the environments' states, observations and their share of the market
 *   fixed       GEMM workspaces and small buffers
 * The study divides the device's budget less a safety margin by the largest estimate the space
 * allows (every numeric parameter at its top, each categorical at its largest value), which gives
 * the most trials that may run at once. */
typedef struct {
    int64_t params;
    size_t weights, activations, replay, envs, fixed;
    size_t total;
    int batch; /* the batch (DQN) or minibatch rows (PPO) the estimate is for */
} vx_trial_memory;

vx_status vx_trial_memory_of(const vx_train_cfg *c, int device_kind, vx_trial_memory *out,
                             vx_err *e);

/* ---- the study -------------------------------------------------------------------------------
 * A study is a folder: study.db (the store: the space, the base config, every trial with its
 * parameters, seed, status, validation curve and result, the swarm of each generation, the
 * concurrency and memory over time), trials/<id>/ (each trial's run folder), trials.csv,
 * best.yaml (the best trial's config: `vixen train --config best.yaml` trains it again), test.txt
 * and test.json (the best trial's one evaluation on the test split) and report.html.
 *
 * Trial (generation g, particle i, seed s) trains the base config with the particle's values, the
 * training seed base + s, no test evaluation and no resumable checkpoints; its objective is its
 * best validation Sharpe ratio, and a particle's is the mean over its seeds. Trials run in chunks,
 * each in a thread of its own on a share of the device (vx_device_share). Five layers keep an
 * out-of-memory error from ending the study: (1) the estimate with its margin sizes the shares;
 * (2) the first chunk runs at half the estimated concurrency, the peak it reserved then sets the
 * concurrency for the rest, and a chunk the device refuses is run again at half; (3) a trial its
 * share refuses halves its batch and starts again; (4) before each chunk the device's free memory
 * is read and below 10% the concurrency is halved, with a warning; (5) at concurrency 1 the study
 * is sequential. None of them changes a result that did not itself run out of memory: a trial's
 * result depends only on its config and seed, and the swarm's moves only on the results. */
typedef enum {
    VX_TRIAL_PENDING,
    VX_TRIAL_RUNNING,
    VX_TRIAL_DONE,
    VX_TRIAL_PRUNED,
    VX_TRIAL_FAILED,
} vx_trial_status;

const char *vx_trial_status_name(vx_trial_status s);

typedef struct {
    int64_t id; /* (generation × swarm + particle) × seeds + seed index */
    int generation, particle, seed_index;
    vx_trial_status status;
    double objective;    /* the best validation Sharpe ratio (NaN: none) */
    double objective_se; /* its standard error */
    int best_epoch, epochs;
    uint64_t train_seed;
    int batch;                          /* the batch it ran with (after halvings) */
    int halvings;                       /* out-of-memory halvings it took */
    int64_t mem_estimate, mem_measured; /* bytes: the budget's estimate, its share's peak */
    double seconds;
    int64_t env_steps, updates; /* work done, for the aggregate throughput */
    int rank;                   /* the MPI rank that ran it (0 in one process) */
    char params[2048];          /* "key=value" lines, the space's keys in order */
    char error[512];
} vx_trial;

typedef struct {
    int epoch;
    double sharpe, se;
} vx_curve_point;

typedef struct {
    double t; /* wall-clock time (Unix seconds) */
    int generation, concurrency, running;
    int64_t reserved, peak, free_b, total; /* bytes: the budget's view and the driver's */
    char note[160];
} vx_study_event;

typedef struct {
    int generations;  /* 5 */
    int seeds;        /* training seeds per particle (1) */
    int concurrency;  /* trials at once; 0: from the budget */
    double margin;    /* of the budget kept free (0.2) */
    int prune;        /* median pruning (1) */
    int prune_warmup; /* validations a trial makes before it may be pruned (2) */
    int cpu_cores;    /* cores this process's trials may keep busy on the CPU (0: every online
                       * one; an MPI rank gets its node's cores divided by the ranks there) */
    vx_pso_cfg pso;
} vx_study_cfg;

void vx_study_cfg_default(vx_study_cfg *c);

/* The plan: the device, the budget, the estimate per trial and the concurrency it allows. */
typedef struct {
    char device[192];
    int kind;
    vx_device_info info;
    size_t budget, available; /* the context's budget, and that less the margin */
    vx_trial_memory trial;    /* the largest estimate the space allows */
    int64_t fit;              /* floor(available / trial.total): what memory alone allows */
    int max_concurrent;       /* fit, capped at the trials of a generation (and at the cores on
                               * the CPU) */
    int first_chunk;          /* ceil(max_concurrent / 2) */
    int batch_max;            /* the largest batch that fits available at concurrency 1 (PPO:
                               * minibatch rows, a divisor of the rollout's) */
    int batch_max_shared;     /* … and in one share at max_concurrent */
    int64_t rollout_rows;     /* PPO: envs × steps, what minibatches divide (0: the DQN) */
} vx_plan;

vx_status vx_study_plan(const vx_study_cfg *cfg, const vx_space *space, const vx_train_cfg *base,
                        vx_device *dev, vx_plan *out, vx_err *e);
void vx_plan_print(const vx_plan *p, FILE *f);

typedef struct vx_study vx_study;

/* A new study in `dir` (refused when it holds one), or an existing one to resume (the space,
 * base config and settings come from its store; `cfg->concurrency` may differ). */
vx_status vx_study_create(const char *dir, const vx_study_cfg *cfg, const char *space_text,
                          size_t space_len, const vx_train_cfg *base, vx_study **out, vx_err *e);
vx_status vx_study_open(const char *dir, int concurrency, vx_study **out, vx_err *e);

/* Progress after each chunk: one line per call. */
typedef struct {
    int generation, generations;
    int done, total;          /* trials finished (any status) of the study */
    int running, concurrency; /* over every rank */
    int grouped;              /* of this process's running trials, those trained in groups */
    int ranks;                /* processes running trials (1 without MPI) */
    int64_t mem_per_trial;    /* the share each trial of this process runs in */
    int halvings, pruned, failed;
    double best; /* the best particle objective so far (NaN: none) */
    char best_params[2048];
    double seconds;
} vx_study_progress;

typedef void (*vx_study_progress_fn)(const vx_study_progress *p, void *ctx);

/* Runs the study to its end on dev (trials on shares of it): every pending trial, then the best
 * trial's one test evaluation, trials.csv, best.yaml and report.html. A stop asked by *stop
 * (set from a signal handler) stops the trials running at their next epoch (they are pending
 * again: a resume runs them from the start) and returns VX_ERR_STOPPED. */
vx_status vx_study_run(vx_study *s, vx_device *dev, vx_study_progress_fn cb, void *ctx,
                       volatile int *stop, vx_err *e);
void vx_study_close(vx_study *s);
/* How this process's trials reach the GPU, from the next run on: each trial's thread launches its
 * own graphs (one = 0, the default) or one launcher thread issues them all (one = 1;
 * vx_device_set_launcher). Results are the same either way; a choice of the run, not stored. */
void vx_study_set_launcher(vx_study *s, int one);
/* Fused trials (train.h's groups), from the next run on: the trials of a chunk whose configs may
 * train as one group do (mode 1), each member's result its run's alone, bit for bit or within
 * the tolerance the algorithm states where it fuses; each trial alone (0); or (−1, the default)
 * grouped where the algorithm fuses its members' work on the device bit for bit (algo.h's
 * fuses() 1), alone elsewhere. A choice of the run, not stored. */
void vx_study_set_fuse(vx_study *s, int mode);
/* The device kind the study's base config names (train.device: VX_DEVICE_AUTO, _CPU, _CUDA). */
int vx_study_device_kind(const vx_study *s);

/* <dir>/report.html from the study's store and test.txt (written at the end of a study; `vixen
 * hyperopt report DIR` writes it again, also for a study still running). */
vx_status vx_study_report_write(const char *dir, vx_err *e);

/* `vixen hyperopt status`: the study's state, read from its store (also while it runs). */
vx_status vx_study_status(const char *dir, FILE *f, vx_err *e);

/* ---- across processes: MPI (study_mpi.c) ------------------------------------------------------
 * `mpirun -np K vixen hyperopt ...` (or srun): rank 0 owns the swarm, the store and the progress
 * output, and hands the pending trials of a generation out in sets, one set to each rank as it
 * becomes free (rank 0 included, unless it only coordinates); every rank runs its sets on its own
 * device under its own budget, with the five layers inside it, and sends the results back. The
 * generation barrier of the swarm is kept and a trial's result depends only on its config and
 * seed, so the study ends where a single process ends, whichever rank ran what. Each rank takes
 * the GPU of its node-local rank (modulo the node's GPUs; ranks sharing one split its memory) or,
 * without one, its share of the node's cores. The study folder must be on a file system every
 * rank sees (the trials write their run folders there). A rank that dies takes the job down
 * (OpenMPI has no fault tolerance); --resume re-runs only the trials that were running. */
typedef struct {
    int rank, size;             /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* on this node (MPI_Comm_split_type, shared memory) */
    int rank0_here;             /* rank 0 runs on this node (its local rank 0) */
    char host[256];
} vx_ranks;

/* Whether this build has MPI, and whether this process was started by an MPI launcher (mpirun,
 * mpiexec, srun: their environment variables). */
int vx_mpi_built(void);
int vx_mpi_launched(void);
vx_status vx_mpi_init(vx_ranks *r, vx_err *e);
void vx_mpi_finalize(void);

/* Opens a rank's device of the given kind (vx_device_open_local with the rank's place on its
 * node): the command's, which links the backends. */
typedef vx_status (*vx_rank_open_fn)(const vx_ranks *r, int kind, vx_device **out, int *cores,
                                     vx_err *e);

/* Rank 0: runs the study with every rank (coordinate_only: rank 0 runs no trials itself). */
vx_status vx_study_run_ranks(vx_study *s, vx_device *dev, const vx_ranks *r, int coordinate_only,
                             int cores, vx_study_progress_fn cb, void *ctx, volatile int *stop,
                             vx_err *e);
/* Rank 0, on its way out whatever happened: the other ranks are told there is no (more) study
 * and waited for. */
void vx_study_release_ranks(const vx_ranks *r);
/* Ranks > 0: serves rank 0's study until it is done (or there is none). */
vx_status vx_study_serve(const vx_ranks *r, vx_rank_open_fn open, volatile int *stop, vx_err *e);

#ifdef __cplusplus
}
#endif

#endif

/* dqn_algo.c — the branching dueling Double-DQN as an algorithm of the run (algo.h): its settings
 * (the `dqn.*` and `replay.*` keys), its schedules (ε, β, updates per epoch), its metrics, the
 * tensors its checkpoints hold, and the greedy policy evaluation uses. Where the work runs is the
 * backend's business (dqn_backend.h): the CPU reference, or the device's "dqn" backend.
 *
 * An instance made without environments only acts: `vixen eval` restores a checkpoint's weights
 * into one and asks for its policy. */
#include "vixen/dqn.h"
#include "vixen/dqn_act.h"
#include "dqn_backend.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- settings -------------------------------------------------------------------------------- */

void vx_dqn_settings_default(vx_dqn_settings *s)
{
    memset(s, 0, sizeof *s);
    vx_dqn_cfg_default(&s->learner);
    s->learner.batch = 64;
    s->learner.adam.lr = 1e-3;
    s->learner.target_every = 500;
    s->n_trunk = 2;
    s->trunk[0] = s->trunk[1] = 64; /* small: on a year of bars, 256-wide memorised noise */
    s->head_hidden = 32;
    s->replay_kind = VX_REPLAY_PROPORTIONAL;
    s->replay_capacity = 100000;
    s->replay_alpha = 0.6;
    s->replay_eps = 0.01; /* in reward units: keeps IS weights from collapsing (1e-6 gave ~0.05) */
    s->beta0 = 0.4;
    s->beta_updates = 10000; /* about the default CPU run's 30 epochs × 341 updates */
    s->rank_refresh = 100;
    /* the reference shape (2,048 envs × 100 steps, 341 updates at batch 1,024), sized for a
     * laptop: 128 envs × 100 steps, 341 updates at batch 64 */
    s->updates_per_epoch = 0;
    s->replay_ratio = 1.705;
    s->warmup = 2000;
    s->eps_start = 1.0;
    s->eps_end = 0.05;
    s->eps_decay_epochs = 20;
    s->overlap = 1;
}

void vx_dqn_net_cfg(const vx_dqn_settings *s, vx_qnet_cfg *out)
{
    vx_qnet_cfg_default(out);
    out->n_trunk = s->n_trunk;
    for (int l = 0; l < s->n_trunk; l++) out->trunk[l] = s->trunk[l];
    out->head_hidden = s->head_hidden;
}

static double updates_exact(const vx_dqn_settings *s, const vx_run_params *run)
{
    if (s->updates_per_epoch > 0) return s->updates_per_epoch;
    double k = (double)run->envs * run->steps_per_epoch / s->learner.batch * s->replay_ratio;
    return k < 1 ? 1 : floor(k + 0.5);
}

int vx_dqn_updates_per_epoch(const vx_dqn_settings *s, const vx_run_params *run)
{
    double k = updates_exact(s, run);
    return k > 1e9 ? 1000000000 : (int)k;
}

double vx_dqn_epsilon_at(const vx_dqn_settings *s, int epoch)
{
    double f = (double)epoch / s->eps_decay_epochs;
    return s->eps_start + (s->eps_end - s->eps_start) * (f < 1 ? f : 1);
}

double vx_dqn_beta_at(const vx_dqn_settings *s, int64_t updates)
{
    double f = (double)updates / (double)s->beta_updates;
    return s->beta0 + (1 - s->beta0) * (f < 1 ? f : 1);
}

static const char *const loss_names[] = {"mse", "huber", "c51", NULL};
static const char *const replay_names[] = {"uniform", "proportional", "rank", NULL};
static const char *const acting_names[] = {"float32", "tf32", "tf32x3", "bf16", NULL};

#define F(field) offsetof(vx_dqn_settings, field), sizeof(((vx_dqn_settings *)0)->field)
#define NUM(name, type, field, lo, hi, help)                                                       \
    {                                                                                              \
        name, type, F(field), lo, hi, NULL, 0, 0, -1, help                                         \
    }
static const vx_key dqn_keys[] = {
    {"loss", VX_KEY_ENUM, F(learner.loss), 0, 0, loss_names, 0, 0, -1, "mse, huber or c51"},
    NUM("gamma", VX_KEY_DBL, learner.gamma, 0, 1, "discount"),
    NUM("n_step", VX_KEY_INT, learner.n_step, 1, 64, "n-step return horizon"),
    NUM("huber_kappa", VX_KEY_DBL, learner.huber_kappa, 1e-9, 1e9, "Huber threshold"),
    NUM("atoms", VX_KEY_INT, learner.atoms, 2, VX_LOSS_MAX_ATOMS, "C51 atoms"),
    NUM("v_min", VX_KEY_DBL, learner.v_min, -1e9, 1e9, "C51 support low end"),
    NUM("v_max", VX_KEY_DBL, learner.v_max, -1e9, 1e9, "C51 support high end"),
    NUM("target_every", VX_KEY_INT, learner.target_every, 1, 1e9,
        "hard target copy period (updates)"),
    NUM("tau", VX_KEY_DBL, learner.tau, 0, 1, "Polyak weight (0: hard copies)"),
    NUM("grad_clip", VX_KEY_DBL, learner.grad_clip, 0, 1e12, "global gradient-norm clip (0: off)"),
    {"batch", VX_KEY_INT, F(learner.batch), 1, 1 << 20, NULL, 0, 0,
     offsetof(vx_dqn_settings, batch_set), "batch size (unset: a GPU chooses it)"},
    NUM("tf32", VX_KEY_INT, learner.tf32, 0, 1,
        "GPU: 1 for TF32 tensor-core GEMMs (0: float32, like the CPU)"),
    NUM("fused", VX_KEY_INT, learner.fused, 0, 3,
        "GPU: a learner alone updates in two fused kernels where they take its network and loss: "
        "0 never (a GEMM a layer), 1 past a batch of 2,048 (where they measured faster; the "
        "default), 2 always, 3 always with the gradient layer by layer over the whole GPU"),
    NUM("lr", VX_KEY_DBL, learner.adam.lr, 1e-12, 10, "Adam learning rate"),
    NUM("adam_beta1", VX_KEY_DBL, learner.adam.beta1, 0, 0.999999, "Adam beta1"),
    NUM("adam_beta2", VX_KEY_DBL, learner.adam.beta2, 0, 0.9999999, "Adam beta2"),
    NUM("adam_eps", VX_KEY_DBL, learner.adam.eps, 1e-30, 1, "Adam epsilon"),
    NUM("weight_decay", VX_KEY_DBL, learner.adam.weight_decay, 0, 1, "decoupled weight decay"),
    {"trunk", VX_KEY_INTLIST, offsetof(vx_dqn_settings, trunk), sizeof(int), 1, 65536, NULL,
     offsetof(vx_dqn_settings, n_trunk), VX_QNET_MAX_TRUNK, -1, "trunk widths, e.g. [256, 256]"},
    NUM("head_hidden", VX_KEY_INT, head_hidden, 1, 65536, "value/advantage hidden width"),
    NUM("updates_per_epoch", VX_KEY_INT, updates_per_epoch, 0, 1e9,
        "updates per epoch (0: from the replay ratio)"),
    NUM("replay_ratio", VX_KEY_DBL, replay_ratio, 1e-6, 1e6,
        "updates · batch / transitions collected"),
    NUM("warmup", VX_KEY_INT, warmup, 0, 1e9, "transitions stored before learning"),
    NUM("eps_start", VX_KEY_DBL, eps_start, 0, 1, "exploration at the start"),
    NUM("eps_end", VX_KEY_DBL, eps_end, 0, 1, "exploration after the decay"),
    NUM("eps_decay_epochs", VX_KEY_INT, eps_decay_epochs, 1, 1e9, "epochs of linear decay"),
    {"acting", VX_KEY_ENUM, F(acting), 0, 0, acting_names, 0, 0, -1,
     "GPU acting: float32 (a GEMM a layer, as the CPU acts), tf32, tf32x3 or bf16 (one fused "
     "kernel a rollout on tensor cores; tf32x3 near float32's accuracy, bf16 the fastest)"},
    NUM("overlap", VX_KEY_INT, overlap, 0, 1,
        "1: act with weights one epoch old, so the GPU collects while it trains"),
};
static const vx_key replay_keys[] = {
    {"kind", VX_KEY_ENUM, F(replay_kind), 0, 0, replay_names, 0, 0, -1,
     "uniform, proportional or rank"},
    NUM("capacity", VX_KEY_I64, replay_capacity, 1, 2147483648.0, "transitions kept"),
    NUM("alpha", VX_KEY_DBL, replay_alpha, 0, 10, "priority exponent"),
    NUM("beta0", VX_KEY_DBL, beta0, 0, 1, "initial IS exponent (annealed to 1)"),
    NUM("beta_updates", VX_KEY_I64, beta_updates, 1, 1e15,
        "updates over which the IS exponent rises from beta0 to 1"),
    NUM("eps", VX_KEY_DBL, replay_eps, 1e-300, 1e6, "added to |TD error|"),
    NUM("rank_refresh", VX_KEY_INT, rank_refresh, 1, 1e9, "sample calls between rank sorts"),
};
static const vx_section dqn_section = {"dqn", dqn_keys, sizeof dqn_keys / sizeof *dqn_keys};
static const vx_section replay_section = {"replay", replay_keys,
                                          sizeof replay_keys / sizeof *replay_keys};
static const vx_section *const sections[] = {&dqn_section, &replay_section, NULL};

static void settings_default(void *s) { vx_dqn_settings_default(s); }

static void replay_cfg_of(const vx_dqn_settings *s, uint64_t seed, vx_replay_cfg *rc)
{
    vx_replay_cfg_default(rc, s->replay_kind, (size_t)s->replay_capacity);
    rc->alpha = s->replay_alpha, rc->eps = s->replay_eps, rc->rank_refresh = s->rank_refresh;
    rc->seed = seed;
}

/* Every size derived from the settings, overflow-checked: the arrays the backends allocate from
 * them (the keys' ranges keep them small on a 64-bit host today; a range widened later must
 * fail here rather than wrap into a small allocation the loops overrun), and the updates per
 * epoch, which an int counts. */
static vx_status check_sizes(const vx_dqn_settings *s, const vx_run_params *run, vx_err *e)
{
    const uint64_t N = (uint64_t)run->envs, D = VX_OBS_DIM, B = (uint64_t)s->learner.batch;
    const uint64_t n = (uint64_t)s->learner.n_step;
    if (run->envs < 1 || run->steps_per_epoch < 1 || s->learner.batch < 1 || s->learner.n_step < 1)
        return vx_err_set(e, VX_ERR_ARG,
                          "train.envs (%d), train.steps_per_epoch (%d), dqn.batch (%d) and "
                          "dqn.n_step (%d) must be >= 1",
                          run->envs, run->steps_per_epoch, s->learner.batch, s->learner.n_step);
    vx_status st = vx_check_bytes("train.envs × train.steps_per_epoch steps", N,
                                  (uint64_t)run->steps_per_epoch, 1, e);
    if (!st)
        st = vx_check_bytes("train.envs × dqn.n_step observations", N * D * sizeof(float), n, 1, e);
    if (!st) st = vx_check_bytes("dqn.batch observations", B, D, sizeof(float), e);
    vx_replay_cfg rc;
    replay_cfg_of(s, run->seed, &rc);
    if (!st)
        st = vx_check_bytes("replay.capacity transitions", (uint64_t)s->replay_capacity,
                            vx_replay_bytes_per_transition(&rc), 1, e);
    if (!st && !(updates_exact(s, run) <= 1e9))
        st = vx_err_set(e, VX_ERR_ARG,
                        "dqn.replay_ratio %g × train.envs %d × train.steps_per_epoch %d / "
                        "dqn.batch %d makes %.3g updates per epoch (at most 1e9): lower it or set "
                        "dqn.updates_per_epoch",
                        s->replay_ratio, run->envs, run->steps_per_epoch, s->learner.batch,
                        updates_exact(s, run));
    return st;
}

static vx_status settings_check(const void *p, const vx_run_params *run, vx_err *e)
{
    const vx_dqn_settings *s = p;
    vx_status st = vx_dqn_cfg_check(&s->learner, e);
    if (st) return st;
    if (s->eps_end > s->eps_start)
        return vx_err_set(e, VX_ERR_ARG, "dqn.eps_end (%g) is above dqn.eps_start (%g)", s->eps_end,
                          s->eps_start);
    if ((int64_t)s->learner.batch > s->replay_capacity)
        return vx_err_set(e, VX_ERR_ARG, "dqn.batch (%d) exceeds replay.capacity (%lld)",
                          s->learner.batch, (long long)s->replay_capacity);
    vx_replay_cfg rc;
    replay_cfg_of(s, run->seed, &rc);
    st = vx_replay_cfg_check(&rc, e);
    return st ? st : check_sizes(s, run, e);
}

/* ---- metrics --------------------------------------------------------------------------------- */

enum { M_UPDATES, M_LOSS, M_Q_MEAN, M_Q_MAX, M_GRAD_NORM, M_EPSILON, M_BETA, M_UPDATES_PER_S, N_M };
static const vx_metric metrics[N_M] = {
    {"updates", "%.0f updates", 0},
    {"loss", "loss %.4g", 0},
    {"q_mean", NULL, 0},
    {"q_max", NULL, 0},
    {"grad_norm", NULL, 0},
    {"epsilon", "eps %.2f", 0},
    {"beta", NULL, 0},
    {"updates_per_s", "%.0f updates/s", 1},
};

/* ---- the instance ---------------------------------------------------------------------------- */

typedef struct dqn_algo dqn_algo;

typedef struct {
    dqn_algo *a;
    int detached;
} replay_job;

struct dqn_algo {
    vx_algo base;
    vx_dqn_settings s; /* resolved */
    vx_run_params run;
    vx_device *dev;
    vx_env *env;
    vx_qnet_layout L;
    vx_loss_shape shape;
    const dqn_backend_ops *ops; /* NULL: an instance that only acts */
    dqn_backend *b;
    dqn_state *st;
    int K;
    float *params; /* host weights for the policy (and the starting weights) */
    vx_qnet_ws act_ws;
    replay_job job; /* the replay file of the last save */
    int fused;      /* a member of a group its backend runs as one (create_group) */
};

static void algo_free(vx_algo *a0)
{
    dqn_algo *a = (dqn_algo *)a0;
    if (!a) return;
    if (a->ops) a->ops->free(a->b);
    vx_qnet_ws_free(&a->act_ws);
    free(a->params);
    free(a);
}

/* The instance without its backend: settings, layout, initial weights, the acting workspace,
 * and which backend the device has (a->ops, or NULL for one that only acts: no env). */
static vx_status algo_new(const vx_algo_init *in, dqn_algo **out, vx_err *e)
{
    *out = NULL;
    /* the sizes again, whoever made the settings (the run checks them, a direct caller may not) */
    vx_status st = check_sizes(in->settings, in->run, e);
    if (st) return st;
    dqn_algo *a = calloc(1, sizeof *a);
    if (!a) return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    a->base.ops = &vx_algo_dqn;
    memcpy(&a->s, in->settings, sizeof a->s);
    a->run = *in->run;
    a->dev = in->dev;
    a->env = in->env;
    vx_qnet_cfg net;
    vx_dqn_net_cfg(&a->s, &net);
    st = vx_dqn_layout(&a->s.learner, &net, &a->L, &a->shape, e);
    if (!st) {
        a->params = calloc(a->L.n_params, sizeof(float)); /* the padding stays 0 */
        if (!a->params) st = vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    }
    if (!st) vx_qnet_init(&a->L, a->run.seed, a->params);
    if (!st) st = vx_qnet_ws_create(&a->L, 256, &a->act_ws, e);
    if (!st && in->env) {
        a->ops = vx_device_backend(in->dev, "dqn");
        if (!a->ops && vx_device_kind(in->dev) == VX_DEVICE_CPU) a->ops = &vx_dqn_backend_cpu;
        if (!a->ops)
            st = vx_err_set(e, VX_ERR_UNSUPPORTED, "dqn: no backend for %s",
                            vx_device_name(in->dev));
    }
    if (st) {
        algo_free(&a->base);
        return st;
    }
    *out = a;
    return VX_OK;
}

static dqn_init init_of(const dqn_algo *a, const vx_algo_init *in)
{
    dqn_init bi = {&a->s, &a->run, &a->L, &a->shape, in->dev, in->env, a->params, in->mem_share};
    return bi;
}

/* The backend made (a->b, a->st): what it chose, checked again. On failure a->ops is NULL, so
 * freeing the instance frees no backend. */
static vx_status backend_made(dqn_algo *a, vx_status st, vx_err *e)
{
    if (st) {
        a->ops = NULL;
        return st;
    }
    a->ops->resolved(a->b, &a->s); /* a GPU may have chosen the batch: check again */
    a->K = vx_dqn_updates_per_epoch(&a->s, &a->run);
    return check_sizes(&a->s, &a->run, e);
}

static vx_status algo_create(const vx_algo_init *in, vx_algo **out, vx_err *e)
{
    *out = NULL;
    dqn_algo *a;
    vx_status st = algo_new(in, &a, e);
    if (!st && a->ops) {
        dqn_init bi = init_of(a, in);
        st = backend_made(a, a->ops->create(&bi, &a->b, &a->st, e), e);
    }
    if (st) {
        if (a) algo_free(&a->base);
        return st;
    }
    *out = &a->base;
    return VX_OK;
}

static void settings_resolved(const vx_algo *a0, void *out)
{
    memcpy(out, &((const dqn_algo *)a0)->s, sizeof(vx_dqn_settings));
}

static void describe(const vx_algo *a0, char *buf, size_t n)
{
    const dqn_algo *a = (const dqn_algo *)a0;
    char where[160] = "acting only";
    if (a->ops) a->ops->describe(a->b, where, sizeof where);
    snprintf(buf, n, "dqn %s, batch %d, %d updates per epoch, %zu parameters", where,
             a->s.learner.batch, a->K, a->L.n_weights);
}

/* The epoch's plan from the schedules. */
static dqn_plan plan_of(const dqn_algo *a, const vx_epoch_in *in)
{
    int ep = in->epoch;
    dqn_plan p = {ep,
                  vx_dqn_epsilon_at(&a->s, ep),
                  vx_dqn_epsilon_at(&a->s, ep + 1),
                  vx_dqn_beta_at(&a->s, a->st->updates),
                  a->K,
                  in->snapshot,
                  a->s.overlap && ep + 1 < a->run.epochs};
    return p;
}

/* The backend's result as the run's metrics. */
static void result_out(const dqn_algo *a, const dqn_plan *p, const dqn_result *rp,
                       vx_epoch_out *out)
{
    dqn_result r = *rp;
    out->env_steps = r.env_steps;
    out->episodes = r.episodes;
    out->return_sum = r.return_sum;
    out->collect_s = r.collect_s;
    double *m = out->metric;
    int done = r.updates > 0;
    m[M_UPDATES] = (double)a->st->updates;
    m[M_LOSS] = done ? r.loss : NAN;
    m[M_Q_MEAN] = done ? r.q_mean : NAN;
    m[M_Q_MAX] = done ? r.q_max : NAN;
    m[M_GRAD_NORM] = done ? r.grad_norm : NAN;
    m[M_EPSILON] = p->eps;
    m[M_BETA] = p->beta;
    m[M_UPDATES_PER_S] = done && r.learn_s > 0 ? r.updates / r.learn_s : 0;
    if (done && !(isfinite(r.loss) && isfinite(r.grad_norm)))
        snprintf(out->diverged, sizeof out->diverged,
                 "dqn: the learning diverged: over this epoch's %lld updates the mean loss is %g "
                 "and the gradient norm %g. Lower dqn.lr, use dqn.loss=huber, or scale the "
                 "rewards down (env.reward_scale)",
                 (long long)r.updates, isnan(r.loss) ? NAN : r.loss,
                 isnan(r.grad_norm) ? NAN : r.grad_norm); /* "nan", not glibc's "-nan" */
}

static vx_status epoch(vx_algo *a0, const vx_epoch_in *in, vx_epoch_out *out, vx_err *e)
{
    dqn_algo *a = (dqn_algo *)a0;
    if (!a->ops) return vx_err_set(e, VX_ERR_ARG, "dqn: this instance only acts");
    dqn_plan p = plan_of(a, in);
    dqn_result r;
    memset(&r, 0, sizeof r);
    vx_status st = a->ops->epoch(a->b, &p, &r, e);
    if (!st) result_out(a, &p, &r, out);
    return st;
}

/* ---- the policy ------------------------------------------------------------------------------ */

static vx_status act_greedy(void *ctx, const float *obs, int n, int32_t *actions, vx_err *e)
{
    (void)e;
    dqn_algo *a = ctx;
    int D = a->L.cfg.in_dim, O = a->L.out_dim;
    for (int start = 0; start < n; start += a->act_ws.max_batch) {
        int rows = n - start < a->act_ws.max_batch ? n - start : a->act_ws.max_batch;
        vx_qnet_forward_ref(&a->L, a->params, obs + (size_t)start * D, rows, &a->act_ws);
        for (int r = 0; r < rows; r++) /* ε = 0: the draws never win */
            vx_act_egreedy(&a->shape, a->act_ws.q + (size_t)r * O, 0, (uint64_t)(start + r), 0, 0.0,
                           actions + (size_t)(start + r) * VX_ACTION_BRANCHES, NULL);
    }
    return VX_OK;
}

static vx_status policy(vx_algo *a0, vx_policy *out, vx_err *e)
{
    dqn_algo *a = (dqn_algo *)a0;
    if (a->ops) {
        vx_status st = a->ops->weights(a->b, a->params, e);
        if (st) return st;
    }
    out->act = act_greedy;
    out->ctx = a;
    return VX_OK;
}

/* ---- checkpoints ----------------------------------------------------------------------------- */

/* online and target (2 tensors per dense layer each) and the ten other tensors save() adds */
_Static_assert(2 * 2 * (VX_QNET_MAX_TRUNK + 2 + 2 * VX_QNET_MAX_BRANCHES) + 10 <=
                   VX_ALGO_MAX_TENSORS,
               "a checkpoint's tensors must fit in vx_algo_state");

/* The online and target weights tensor by tensor, as "online.trunk.0.weight", … (the names every
 * vixen DQN checkpoint has used). */
static void add_weights(vx_algo_state *o, const vx_qnet_layout *L, const char *prefix,
                        const float *p)
{
    for (size_t i = 0; i < L->n_tensors && o->n_tensors < VX_ALGO_MAX_TENSORS; i++) {
        char name[64];
        size_t off;
        int r, c;
        vx_qnet_tensor(L, i, name, sizeof name, &off, &r, &c);
        vx_tensor *x = &o->tensors[o->n_tensors++];
        snprintf(x->name, sizeof x->name, "%s.%s", prefix, name);
        x->dtype = VX_DT_F32;
        x->ndim = r == 1 ? 1 : 2;
        x->shape[0] = r == 1 ? c : r;
        x->shape[1] = c;
        x->data = p + off;
    }
}

static vx_status policy_state(vx_algo *a0, vx_algo_state *o, vx_err *e)
{
    (void)e;
    dqn_algo *a = (dqn_algo *)a0;
    memset(o, 0, sizeof *o);
    add_weights(o, &a->L, "online", a->params); /* what policy() copied, and acts with */
    vx_algo_state_meta(o, "params", (long long)a->L.n_params);
    return VX_OK;
}

static vx_status write_replay(void *ctx, const char *path, vx_err *e)
{
    replay_job *j = ctx;
    return j->a->ops->save_replay(j->a->b, j->detached, path, e);
}

static vx_status wait_state(void *ctx, vx_err *e)
{
    dqn_algo *a = ctx;
    return a->ops->wait(a->b, e);
}

static vx_status save(vx_algo *a0, int final, vx_algo_state *o, vx_err *e)
{
    dqn_algo *a = (dqn_algo *)a0;
    if (!a->ops) return vx_err_set(e, VX_ERR_ARG, "dqn: this instance only acts");
    int detached = 0;
    vx_status st = a->ops->save(a->b, final, &detached, e);
    if (st) return st;
    const dqn_state *s = a->st;
    int64_t N = a->run.envs, n = a->s.learner.n_step, np = (int64_t)a->L.n_params;
    memset(o, 0, sizeof *o);
    add_weights(o, &a->L, "online", s->online);
    add_weights(o, &a->L, "target", s->target);
    vx_algo_state_add(o, "adam.m", VX_DT_F32, 1, np, 0, 0, s->adam_m);
    vx_algo_state_add(o, "adam.v", VX_DT_F32, 1, np, 0, 0, s->adam_v);
    vx_algo_state_add(o, "acting", VX_DT_F32, 1, np, 0, 0, s->acting);
    vx_algo_state_add(o, "env.state", VX_DT_U8, 2, N, (int64_t)sizeof(vx_env_state), 0, s->env);
    vx_algo_state_add(o, "env.obs", VX_DT_F32, 2, N, VX_OBS_DIM, 0, s->obs);
    vx_algo_state_add(o, "env.episode_return", VX_DT_F64, 1, N, 0, 0, s->ep_ret);
    vx_algo_state_add(o, "nstep.count_head", VX_DT_I64, 2, 2, N, 0, s->nstep_count_head);
    vx_algo_state_add(o, "nstep.obs", VX_DT_F32, 3, N, n, VX_OBS_DIM, s->nstep_obs);
    vx_algo_state_add(o, "nstep.actions", VX_DT_U8, 1,
                      N * n * VX_ACTION_BRANCHES * (int64_t)sizeof(int32_t), 0, 0, s->nstep_act);
    vx_algo_state_add(o, "nstep.rewards", VX_DT_F32, 2, N, n, 0, s->nstep_rew);
    /* counters: read by wait()'s completion on a GPU, so they are set here from the host side */
    vx_algo_state_meta(o, "updates", (long long)s->updates);
    vx_algo_state_meta(o, "adam_t", (long long)s->adam_t);
    vx_algo_state_meta(o, "act_step", (long long)s->act_step);
    vx_algo_state_meta(o, "replay_inserted", (long long)s->replay_inserted);
    vx_algo_state_meta(o, "params", (long long)np);
    vx_algo_state_meta(o, "collected_ahead", s->collected_ahead);
    a->job.a = a;
    a->job.detached = detached;
    o->files[0].name = "replay";
    o->files[0].write = write_replay;
    o->files[0].ctx = &a->job;
    o->n_files = 1;
    o->detached = detached;
    o->wait = wait_state;
    o->wait_ctx = a;
    return VX_OK;
}

static vx_status copy_tensor(const vx_ckpt_view *ck, const char *name, vx_dtype dt, size_t count,
                             size_t elem, void *dst, vx_err *e)
{
    const vx_tensor *x = vx_safetensors_get(ck->st, name, dt, count, e);
    if (!x) return e ? e->status : VX_ERR_FORMAT;
    memcpy(dst, x->data, count * elem);
    return VX_OK;
}

/* A checkpoint's numbers are data from a file, checked before use: floats finite (and, with
 * nonneg, >= 0: Adam's second moments go under a square root); the error names the tensor and the
 * element. */
static vx_status check_floats(const vx_ckpt_view *ck, const char *name, const float *x, size_t n,
                              int nonneg, vx_err *e)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (nonneg && x[i] < 0))
            return vx_err_line(e, VX_ERR_FORMAT, ck->st->path, -1, name,
                               "element %zu is %g, not finite%s", i, (double)x[i],
                               nonneg ? " and >= 0" : "");
    return VX_OK;
}

static vx_status copy_floats(const vx_ckpt_view *ck, const char *name, size_t count, float *dst,
                             int nonneg, vx_err *e)
{
    vx_status st = copy_tensor(ck, name, VX_DT_F32, count, 4, dst, e);
    return st ? st : check_floats(ck, name, dst, count, nonneg, e);
}

static vx_status load_weights(const vx_ckpt_view *ck, const vx_qnet_layout *L, const char *prefix,
                              float *p, vx_err *e)
{
    for (size_t i = 0; i < L->n_tensors; i++) {
        char name[64], full[96];
        size_t off;
        int r, c;
        vx_qnet_tensor(L, i, name, sizeof name, &off, &r, &c);
        snprintf(full, sizeof full, "%s.%s", prefix, name);
        vx_status st = copy_floats(ck, full, (size_t)r * c, p + off, 0, e);
        if (st) return st;
    }
    return VX_OK;
}

/* The collection state: the environments' states (env.c checks them against the market), the
 * episode returns, and the n-step rings (pending counts 0..n, heads 0..n−1, actions inside their
 * branches, rewards finite). */
static vx_status check_collection(const dqn_algo *a, const vx_ckpt_view *ck, vx_err *e)
{
    const dqn_state *s = a->st;
    const char *path = ck->st->path;
    size_t N = (size_t)a->run.envs, n = (size_t)a->s.learner.n_step;
    vx_status st = vx_env_check_states(a->env, s->env, N, path, "env.state", e);
    for (size_t i = 0; !st && i < N; i++)
        if (!isfinite(s->ep_ret[i]))
            st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "env.episode_return",
                             "row %zu is %g, not finite", i, s->ep_ret[i]);
    for (size_t i = 0; !st && i < 2 * N; i++)
        if (s->nstep_count_head[i] < 0 || s->nstep_count_head[i] > (int64_t)(i < N ? n : n - 1))
            st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "nstep.count_head",
                             "entry %zu is %lld, outside 0..%zu", i,
                             (long long)s->nstep_count_head[i], i < N ? n : n - 1);
    static const int32_t levels[VX_ACTION_BRANCHES] = {VX_EXPOSURE_LEVELS, VX_ORDER_TYPES,
                                                       VX_URGENCY_LEVELS};
    for (size_t k = 0; !st && k < N * n * VX_ACTION_BRANCHES; k++) {
        int32_t v = s->nstep_act[k], hi = levels[k % VX_ACTION_BRANCHES] - 1;
        if (v < 0 || v > hi)
            st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "nstep.actions",
                             "environment %zu, entry %zu, branch %zu: action %d outside 0..%d",
                             k / VX_ACTION_BRANCHES / n, k / VX_ACTION_BRANCHES % n,
                             k % VX_ACTION_BRANCHES, v, hi);
    }
    return st;
}

static vx_status restore(vx_algo *a0, const vx_ckpt_view *ck, int weights_only, vx_err *e)
{
    dqn_algo *a = (dqn_algo *)a0;
    int64_t np = 0;
    vx_status st = vx_safetensors_meta_int(ck->st, "params", 1, INT64_MAX, &np, e);
    if (!st && np != (int64_t)a->L.n_params)
        st = vx_err_line(e, VX_ERR_FORMAT, ck->st->path, -1, "params",
                         "a network of %lld numbers stored (padding included), but these "
                         "settings make one of %zu (%zu parameters)",
                         (long long)np, a->L.n_params, a->L.n_weights);
    if (!st) st = load_weights(ck, &a->L, "online", a->params, e);
    if (st || weights_only || !a->ops) return st;
    dqn_state *s = a->st;
    size_t N = (size_t)a->run.envs, n = (size_t)a->s.learner.n_step, P = a->L.n_params;
    int64_t v;
    memcpy(s->online, a->params, P * sizeof(float));
    st = load_weights(ck, &a->L, "target", s->target, e);
    if (!st) st = copy_floats(ck, "adam.m", P, s->adam_m, 0, e);
    if (!st) st = copy_floats(ck, "adam.v", P, s->adam_v, 1, e);
    if (!st) st = copy_floats(ck, "acting", P, s->acting, 0, e);
    if (!st) st = copy_tensor(ck, "env.state", VX_DT_U8, N * sizeof(vx_env_state), 1, s->env, e);
    if (!st) st = copy_floats(ck, "env.obs", N * VX_OBS_DIM, s->obs, 0, e);
    if (!st) st = copy_tensor(ck, "env.episode_return", VX_DT_F64, N, 8, s->ep_ret, e);
    if (!st) st = copy_tensor(ck, "nstep.count_head", VX_DT_I64, 2 * N, 8, s->nstep_count_head, e);
    if (!st) st = copy_floats(ck, "nstep.obs", N * n * VX_OBS_DIM, s->nstep_obs, 0, e);
    if (!st)
        st = copy_tensor(ck, "nstep.actions", VX_DT_U8,
                         N * n * VX_ACTION_BRANCHES * sizeof(int32_t), 1, s->nstep_act, e);
    if (!st) st = copy_floats(ck, "nstep.rewards", N * n, s->nstep_rew, 0, e);
    if (!st) st = check_collection(a, ck, e);
    if (!st) st = vx_safetensors_meta_int(ck->st, "updates", 0, INT64_MAX, &s->updates, e);
    if (!st) st = vx_safetensors_meta_int(ck->st, "adam_t", 0, INT64_MAX, &s->adam_t, e);
    if (!st) st = vx_safetensors_meta_int(ck->st, "act_step", 0, INT64_MAX, &v, e);
    if (!st) s->act_step = (uint64_t)v;
    if (!st) st = vx_safetensors_meta_int(ck->st, "replay_inserted", 0, INT64_MAX, &v, e);
    if (!st) s->replay_inserted = (uint64_t)v;
    if (!st) st = vx_safetensors_meta_int(ck->st, "collected_ahead", 0, 1, &v, e);
    if (!st) s->collected_ahead = (int)v;
    if (!st) st = a->ops->restore(a->b, e);
    char path[1200];
    uint64_t inserted = 0;
    if (!st) st = vx_ckpt_file(ck, "replay", path, sizeof path, e);
    if (!st) st = a->ops->load_replay(a->b, path, &inserted, e);
    if (!st && inserted != s->replay_inserted)
        st = vx_err_line(e, VX_ERR_FORMAT, path, -1, "inserted",
                         "replay buffer (%llu inserted) does not belong to the checkpoint (%llu)",
                         (unsigned long long)inserted, (unsigned long long)s->replay_inserted);
    return st;
}

static size_t reserved(const vx_algo *a0)
{
    const dqn_algo *a = (const dqn_algo *)a0;
    return a->ops ? a->ops->reserved(a->b) : 0;
}

/* ---- fused trials ----------------------------------------------------------------------------
 * The keys the members of a group may differ in: the per-member scalars of the learner group
 * (dqn_learner_create_group: γ, κ, τ, the target period, the clip, Adam's settings), the
 * exploration and importance-sampling schedules, and the replay buffer's priority settings (each
 * member has a buffer of its own). The network's shape, the loss, the batch, n, the updates per
 * epoch and the warm-up are the group's. */
static const char *const member_keys[] = {
    "dqn.gamma",
    "dqn.huber_kappa",
    "dqn.target_every",
    "dqn.tau",
    "dqn.grad_clip",
    "dqn.lr",
    "dqn.adam_beta1",
    "dqn.adam_beta2",
    "dqn.adam_eps",
    "dqn.weight_decay",
    "dqn.eps_start",
    "dqn.eps_end",
    "dqn.eps_decay_epochs",
    "replay.alpha",
    "replay.beta0",
    "replay.beta_updates",
    "replay.eps",
    NULL,
};

/* A CUDA device fuses a group's updates (dqn_backend_cuda.cu): each member's results agree with
 * its run alone within a tolerance, not bit for bit (the group's GEMMs are strided-batched), so a
 * search groups trials there only when asked (algo.h: 2). The CPU runs them one after another. */
static int fuses(int device_kind) { return device_kind == VX_DEVICE_CUDA ? 2 : 0; }

/* A member's error, said to be its (the group's thread logs under another member's tag). */
static vx_status member_error(vx_status st, int k, vx_err *e)
{
    if (e) {
        char pre[40];
        size_t n = (size_t)snprintf(pre, sizeof pre, "group member %d: ", k);
        size_t len = strnlen(e->msg, sizeof e->msg - 1);
        if (len + n >= sizeof e->msg) len = sizeof e->msg - 1 - n; /* the end of a long one goes */
        memmove(e->msg + n, e->msg, len);
        memcpy(e->msg, pre, n);
        e->msg[n + len] = '\0';
    }
    return st;
}

/* Whether the backend runs these members as one: it has a group, every member trains (an env)
 * on the same device, as graphs, and its replay buffer is not rank-based (whose re-sorts fall
 * between the updates' launches, member by member). */
static int backend_fuses(const dqn_algo *const *a, const vx_algo_init *in, int K)
{
    if (K < 2 || !a[0]->ops || !a[0]->ops->create_group) return 0;
    for (int k = 0; k < K; k++)
        if (a[k]->ops != a[0]->ops || in[k].dev != in[0].dev || !in[k].env ||
            !a[k]->run.gpu_graphs || a[k]->s.replay_kind == VX_REPLAY_RANK)
            return 0;
    return 1;
}

static vx_status create_group(const vx_algo_init *in, int K, vx_algo **out, vx_err *e)
{
    for (int k = 0; k < K; k++) out[k] = NULL;
    dqn_algo **a = calloc((size_t)(K > 0 ? K : 1), sizeof *a);
    dqn_init *bi = calloc((size_t)(K > 0 ? K : 1), sizeof *bi);
    dqn_backend **b = calloc((size_t)(K > 0 ? K : 1), sizeof *b);
    dqn_state **st_of = calloc((size_t)(K > 0 ? K : 1), sizeof *st_of);
    vx_status st =
        a && bi && b && st_of ? VX_OK : vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    int k = 0;
    for (; k < K && !st; k++) {
        st = algo_new(&in[k], &a[k], e);
        if (st) st = member_error(st, k, e);
    }
    if (!st && backend_fuses((const dqn_algo *const *)a, in, K)) {
        const dqn_backend_ops *ops = a[0]->ops;
        for (int i = 0; i < K; i++) bi[i] = init_of(a[i], &in[i]);
        vx_status made = ops->create_group(bi, K, b, st_of, e);
        for (int i = 0; i < K; i++) { /* each takes its backend, also when another's fails */
            a[i]->b = b[i], a[i]->st = st_of[i], a[i]->fused = !made;
            vx_status ok = backend_made(a[i], made, e);
            if (!made && ok && !st) st = member_error(ok, i, e);
        }
        if (made) st = made;
    } else {
        for (int i = 0; i < K && !st; i++)
            if (a[i]->ops) {
                dqn_init one = init_of(a[i], &in[i]);
                st = backend_made(a[i], a[i]->ops->create(&one, &a[i]->b, &a[i]->st, e), e);
                if (st) st = member_error(st, i, e);
            }
    }
    for (int i = 0; i < K && a; i++) {
        if (st && a[i]) algo_free(&a[i]->base); /* a fused member frees its part of the group */
        else if (a[i]) out[i] = &a[i]->base;
    }
    free(a), free(bi), free(b), free(st_of);
    return st;
}

/* A fused group's epoch is one call of the backend's; else each member's in turn. */
static vx_status epoch_group(vx_algo *const *a0, int K, const vx_epoch_in *in, vx_epoch_out *out,
                             vx_err *e)
{
    const dqn_algo *const *a = (const dqn_algo *const *)a0;
    int first = 0;
    while (first < K && !a[first]) first++;
    if (first == K) return VX_OK;
    if (!a[first]->fused) {
        for (int k = 0; k < K; k++) {
            if (!a[k]) continue;
            vx_status st = epoch(a0[k], &in[k], &out[k], e);
            if (st) return member_error(st, k, e);
        }
        return VX_OK;
    }
    dqn_plan *p = calloc((size_t)K, sizeof *p);
    dqn_result *r = calloc((size_t)K, sizeof *r);
    dqn_backend **b = calloc((size_t)K, sizeof *b);
    vx_status st = p && r && b ? VX_OK : vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    for (int k = 0; k < K && !st; k++) {
        if (!a[k]) continue;
        p[k] = plan_of(a[k], &in[k]);
        b[k] = a[k]->b;
    }
    if (!st) st = a[first]->ops->epoch_group(b, K, p, r, e);
    for (int k = 0; k < K && !st; k++)
        if (a[k]) result_out(a[k], &p[k], &r[k], &out[k]);
    free(p), free(r), free(b);
    return st;
}

const vx_algo_ops vx_algo_dqn = {
    "dqn",
    "branching dueling Double-DQN (prioritized replay; MSE, Huber or C51 loss)",
    sizeof(vx_dqn_settings),
    settings_default,
    sections,
    settings_check,
    metrics,
    N_M,
    algo_create,
    settings_resolved,
    describe,
    epoch,
    policy,
    policy_state,
    save,
    restore,
    reserved,
    algo_free,
    member_keys,
    fuses,
    create_group,
    epoch_group,
};

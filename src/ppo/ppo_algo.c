/* ppo_algo.c — PPO as an algorithm of the run (algo.h): its `ppo.*` keys, the learning-rate
 * schedule, the metric columns, the tensors a checkpoint holds, and the greedy policy evaluation
 * uses (the mode of each branch, on observations normalised with the statistics saved with the
 * weights). Where the work runs is the backend's (ppo_backend.h): the CPU reference here, a
 * device's when it registers one. */
#include "vixen/ppo.h"
#include "vixen/ppo_math.h"
#include "ppo_backend.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void vx_ppo_settings_default(vx_ppo_settings *s)
{
    memset(s, 0, sizeof *s);
    vx_ac_cfg net;
    vx_ac_cfg_default(&net);
    s->n_trunk = net.n_trunk;
    for (int l = 0; l < net.n_trunk; l++) s->trunk[l] = net.trunk[l];
    s->shared = net.shared;
    vx_adam_cfg_default(&s->adam);
    s->adam.lr = 3e-4;
    s->adam.eps = 1e-5;
    s->anneal_lr = 1;
    s->gamma = 0.99;
    s->gae_lambda = 0.95;
    s->update_epochs = 4;
    s->minibatches = 32;
    s->norm_adv = 1;
    s->clip = 0.2;
    s->clip_value = 1;
    s->ent_coef = 0.01;
    s->vf_coef = 0.5;
    s->max_grad_norm = 0.5;
    s->target_kl = 0;
    s->norm_obs = 1;
    s->obs_clip = 10;
    s->fused = 1;
}

void vx_ppo_net_cfg(const vx_ppo_settings *s, vx_ac_cfg *out)
{
    vx_ac_cfg_default(out);
    out->n_trunk = s->n_trunk;
    for (int l = 0; l < s->n_trunk; l++) out->trunk[l] = s->trunk[l];
    out->shared = s->shared;
}

#define F(field) offsetof(vx_ppo_settings, field), sizeof(((vx_ppo_settings *)0)->field)
#define NUM(name, type, field, lo, hi, help)                                                       \
    {                                                                                              \
        name, type, F(field), lo, hi, NULL, 0, 0, -1, help                                         \
    }
static const vx_key ppo_keys[] = {
    {"trunk", VX_KEY_INTLIST, offsetof(vx_ppo_settings, trunk), sizeof(int), 1, 65536, NULL,
     offsetof(vx_ppo_settings, n_trunk), VX_AC_MAX_TRUNK, -1, "trunk widths, e.g. [160, 160]"},
    NUM("shared", VX_KEY_INT, shared, 0, 1, "1: one trunk for the policy and the value"),
    NUM("lr", VX_KEY_DBL, adam.lr, 1e-12, 10, "Adam learning rate"),
    NUM("adam_eps", VX_KEY_DBL, adam.eps, 1e-30, 1, "Adam epsilon"),
    NUM("anneal_lr", VX_KEY_INT, anneal_lr, 0, 1, "1: the rate falls linearly to 0 over the run"),
    NUM("gamma", VX_KEY_DBL, gamma, 0, 1, "discount"),
    NUM("gae_lambda", VX_KEY_DBL, gae_lambda, 0, 1, "GAE lambda"),
    NUM("update_epochs", VX_KEY_INT, update_epochs, 1, 1000, "passes over each rollout"),
    NUM("minibatches", VX_KEY_INT, minibatches, 1, 1 << 20, "minibatches per pass"),
    NUM("norm_adv", VX_KEY_INT, norm_adv, 0, 1, "1: advantages normalised per minibatch"),
    NUM("clip", VX_KEY_DBL, clip, 0, 10, "the ratio's clip (and the value's)"),
    NUM("clip_value", VX_KEY_INT, clip_value, 0, 1, "1: clipped value loss"),
    NUM("ent_coef", VX_KEY_DBL, ent_coef, 0, 100, "entropy bonus"),
    NUM("vf_coef", VX_KEY_DBL, vf_coef, 0, 100, "value loss weight"),
    NUM("max_grad_norm", VX_KEY_DBL, max_grad_norm, 0, 1e12, "global gradient-norm clip (0: off)"),
    NUM("target_kl", VX_KEY_DBL, target_kl, 0, 100,
        "stop an iteration's updates past this mean approximate KL (0: never)"),
    NUM("norm_obs", VX_KEY_INT, norm_obs, 0, 1, "1: running observation normalisation"),
    NUM("obs_clip", VX_KEY_DBL, obs_clip, 1e-6, 1e6, "clip of the normalised observations"),
    NUM("tf32", VX_KEY_INT, tf32, 0, 1,
        "GPU: TF32 tensor-core products (0: float32's accuracy, as the CPU)"),
    NUM("fused", VX_KEY_INT, fused, 0, 1,
        "GPU: the fused kernels where the network fits (0: one cuBLASLt GEMM per layer)"),
};
static const vx_section ppo_section = {"ppo", ppo_keys, sizeof ppo_keys / sizeof *ppo_keys};
static const vx_section *const sections[] = {&ppo_section, NULL};

static void settings_default(void *s) { vx_ppo_settings_default(s); }

/* Every size derived from the settings, overflow-checked: the rollout (envs × steps, indexed by
 * 32-bit keys in the shuffles), its arrays, a minibatch's, and the minibatch updates of an
 * iteration (an int). */
static vx_status check_sizes(const vx_ppo_settings *s, const vx_run_params *run, vx_err *e)
{
    if (run->envs < 1 || run->steps_per_epoch < 1 || s->minibatches < 1 || s->update_epochs < 1)
        return vx_err_set(e, VX_ERR_ARG,
                          "train.envs (%d), train.steps_per_epoch (%d), ppo.minibatches (%d) and "
                          "ppo.update_epochs (%d) must be >= 1",
                          run->envs, run->steps_per_epoch, s->minibatches, s->update_epochs);
    int64_t batch;
    if (__builtin_mul_overflow((int64_t)run->envs, (int64_t)run->steps_per_epoch, &batch) ||
        batch > 0xffffffffll)
        return vx_err_set(e, VX_ERR_ARG,
                          "train.envs (%d) × train.steps_per_epoch (%d) makes a rollout of more "
                          "than 2^32 - 1 steps",
                          run->envs, run->steps_per_epoch);
    if (batch % s->minibatches != 0 || batch / s->minibatches < 2)
        return vx_err_set(e, VX_ERR_ARG,
                          "ppo.minibatches (%d) must divide train.envs × train.steps_per_epoch "
                          "(%lld) into minibatches of at least 2",
                          s->minibatches, (long long)batch);
    int per_iteration;
    if (__builtin_mul_overflow(s->update_epochs, s->minibatches, &per_iteration))
        return vx_err_set(e, VX_ERR_ARG,
                          "ppo.update_epochs (%d) × ppo.minibatches (%d) minibatch updates per "
                          "iteration overflow an int",
                          s->update_epochs, s->minibatches);
    vx_status st = vx_check_bytes("train.envs × train.steps_per_epoch observations",
                                  (uint64_t)batch, VX_OBS_DIM, sizeof(float), e);
    if (!st)
        st = vx_check_bytes("train.envs × train.steps_per_epoch logits", (uint64_t)batch,
                            VX_PPO_LOGITS, sizeof(float), e);
    return st;
}

static vx_status settings_check(const void *p, const vx_run_params *run, vx_err *e)
{
    const vx_ppo_settings *s = p;
    vx_status st = vx_adam_cfg_check(&s->adam, e);
    if (!st) st = check_sizes(s, run, e);
    if (st) return st;
    vx_ac_cfg net;
    vx_ppo_net_cfg(s, &net);
    vx_ac_layout L;
    return vx_ac_layout_make(&net, &L, e);
}

/* ---- metrics --------------------------------------------------------------------------------- */

enum {
    M_UPDATES,
    M_PG_LOSS,
    M_V_LOSS,
    M_ENTROPY,
    M_APPROX_KL,
    M_CLIPFRAC,
    M_EXPLAINED_VAR,
    M_GRAD_NORM,
    M_LR,
    M_UPDATES_PER_S,
    N_M
};
static const vx_metric metrics[N_M] = {
    {"updates", "%.0f updates", 0},
    {"pg_loss", "pg %.4g", 0},
    {"v_loss", "v %.4g", 0},
    {"entropy", "entropy %.3g", 0},
    {"approx_kl", "kl %.2g", 0},
    {"clipfrac", NULL, 0},
    {"explained_var", NULL, 0},
    {"grad_norm", NULL, 0},
    {"lr", NULL, 0},
    {"updates_per_s", "%.0f updates/s", 1},
};

/* ---- the instance ---------------------------------------------------------------------------- */

typedef struct {
    vx_algo base;
    vx_ppo_settings s;
    vx_run_params run;
    vx_ac_layout L;
    vx_env *env;                /* the training environments (NULL: an instance that only acts) */
    const ppo_backend_ops *ops; /* NULL: an instance that only acts */
    ppo_backend *b;
    ppo_state *st;
    float *params; /* host weights the policy acts with (and the starting ones) */
    double *obs_mean, *obs_var;
    vx_ac_ws act_ws;
    float *act_obs; /* normalised observations of one batch of the policy */
} ppo_algo;

static void algo_free(vx_algo *a0)
{
    ppo_algo *a = (ppo_algo *)a0;
    if (!a) return;
    if (a->ops) a->ops->free(a->b);
    vx_ac_ws_free(&a->act_ws);
    free(a->params), free(a->obs_mean), free(a->obs_var), free(a->act_obs);
    free(a);
}

#define ACT_BATCH 256

static vx_status algo_create(const vx_algo_init *in, vx_algo **out, vx_err *e)
{
    *out = NULL;
    /* the sizes again, whoever made the settings (the run checks them, a direct caller may not) */
    vx_status st = check_sizes(in->settings, in->run, e);
    if (st) return st;
    ppo_algo *a = calloc(1, sizeof *a);
    if (!a) return vx_err_set(e, VX_ERR_NOMEM, "ppo: out of memory");
    a->base.ops = &vx_algo_ppo;
    memcpy(&a->s, in->settings, sizeof a->s);
    a->run = *in->run;
    a->env = in->env;
    vx_ac_cfg net;
    vx_ppo_net_cfg(&a->s, &net);
    st = vx_ac_layout_make(&net, &a->L, e);
    if (!st) {
        a->params = calloc(a->L.n_params, sizeof(float));
        a->obs_mean = calloc(VX_OBS_DIM, sizeof(double));
        a->obs_var = malloc(VX_OBS_DIM * sizeof(double));
        a->act_obs = malloc(ACT_BATCH * VX_OBS_DIM * sizeof(float));
        if (!a->params || !a->obs_mean || !a->obs_var || !a->act_obs)
            st = vx_err_set(e, VX_ERR_NOMEM, "ppo: out of memory");
    }
    if (!st) {
        vx_ac_init(&a->L, a->run.seed, a->params);
        for (int d = 0; d < VX_OBS_DIM; d++) a->obs_var[d] = 1;
        st = vx_ac_ws_create(&a->L, ACT_BATCH, &a->act_ws, e);
    }
    if (!st && in->env) {
        a->ops = vx_device_backend(in->dev, "ppo");
        if (!a->ops && vx_device_kind(in->dev) == VX_DEVICE_CPU) a->ops = &vx_ppo_backend_cpu;
        if (!a->ops)
            st = vx_err_set(e, VX_ERR_UNSUPPORTED,
                            "ppo: no backend for %s yet; train it with --device cpu",
                            vx_device_name(in->dev));
    }
    if (!st && a->ops) {
        ppo_init bi = {&a->s, &a->run, &a->L, in->dev, in->env, a->params};
        st = a->ops->create(&bi, &a->b, &a->st, e);
        if (st) a->ops = NULL;
    }
    if (st) {
        algo_free(&a->base);
        return st;
    }
    *out = &a->base;
    return VX_OK;
}

static void settings_resolved(const vx_algo *a0, void *out)
{
    memcpy(out, &((const ppo_algo *)a0)->s, sizeof(vx_ppo_settings));
}

static void describe(const vx_algo *a0, char *buf, size_t n)
{
    const ppo_algo *a = (const ppo_algo *)a0;
    char where[160] = "acting only";
    if (a->ops) a->ops->describe(a->b, where, sizeof where);
    snprintf(buf, n, "ppo %s, %d × %d minibatch updates per epoch, %zu parameters", where,
             a->s.update_epochs, a->s.minibatches, a->L.n_weights);
}

/* The learning rate of epoch e: annealed linearly to 0 over the planned epochs (CleanRL's
 * schedule: 1 − e / epochs), or constant. */
static double lr_at(const ppo_algo *a, int epoch)
{
    if (!a->s.anneal_lr || a->run.epochs < 1) return a->s.adam.lr;
    return a->s.adam.lr * (1.0 - (double)epoch / a->run.epochs);
}

static vx_status epoch(vx_algo *a0, const vx_epoch_in *in, vx_epoch_out *out, vx_err *e)
{
    ppo_algo *a = (ppo_algo *)a0;
    if (!a->ops) return vx_err_set(e, VX_ERR_ARG, "ppo: this instance only acts");
    ppo_plan p = {in->epoch, lr_at(a, in->epoch)};
    ppo_result r;
    vx_status st = a->ops->iteration(a->b, &p, &r, e);
    if (st) return st;
    out->env_steps = r.env_steps;
    out->episodes = r.episodes;
    out->return_sum = r.return_sum;
    out->collect_s = r.collect_s;
    double *m = out->metric;
    m[M_UPDATES] = (double)a->st->updates;
    m[M_PG_LOSS] = r.pg_loss;
    m[M_V_LOSS] = r.v_loss;
    m[M_ENTROPY] = r.entropy;
    m[M_APPROX_KL] = r.approx_kl;
    m[M_CLIPFRAC] = r.clipfrac;
    m[M_EXPLAINED_VAR] = r.explained_var;
    m[M_GRAD_NORM] = r.grad_norm;
    m[M_LR] = p.lr;
    m[M_UPDATES_PER_S] = r.learn_s > 0 ? r.updates / r.learn_s : 0;
    if (r.updates > 0 && !(isfinite(r.pg_loss) && isfinite(r.v_loss) && isfinite(r.grad_norm)))
        snprintf(
            out->diverged, sizeof out->diverged,
            "ppo: the learning diverged: over this epoch's %lld updates the policy loss is %g, "
            "the value loss %g and the gradient norm %g. Lower ppo.lr or scale the rewards "
            "down (env.reward_scale)",
            (long long)r.updates, isnan(r.pg_loss) ? NAN : r.pg_loss,
            isnan(r.v_loss) ? NAN : r.v_loss, /* "nan", not glibc's "-nan" */
            isnan(r.grad_norm) ? NAN : r.grad_norm);
    return VX_OK;
}

/* ---- the policy ------------------------------------------------------------------------------ */

static vx_status act_greedy(void *ctx, const float *obs, int n, int32_t *actions, vx_err *e)
{
    (void)e;
    ppo_algo *a = ctx;
    const int D = VX_OBS_DIM, K = VX_PPO_LOGITS;
    for (int start = 0; start < n; start += ACT_BATCH) {
        int rows = n - start < ACT_BATCH ? n - start : ACT_BATCH;
        for (int i = 0; i < rows * D; i++)
            a->act_obs[i] = vx_ppo_norm_obs(obs[(size_t)start * D + i], a->obs_mean[i % D],
                                            a->obs_var[i % D], a->s.obs_clip, a->s.norm_obs);
        vx_ac_forward_ref(&a->L, a->params, a->act_obs, rows, &a->act_ws);
        for (int r = 0; r < rows; r++) {
            double z[VX_PPO_LOGITS];
            for (int k = 0; k < K; k++) z[k] = a->act_ws.logits[r * K + k];
            vx_ppo_greedy(z, actions + (size_t)(start + r) * VX_ACTION_BRANCHES);
        }
    }
    return VX_OK;
}

static vx_status policy(vx_algo *a0, vx_policy *out, vx_err *e)
{
    ppo_algo *a = (ppo_algo *)a0;
    if (a->ops) {
        vx_status st = a->ops->weights(a->b, a->params, a->obs_mean, a->obs_var, e);
        if (st) return st;
    }
    out->act = act_greedy;
    out->ctx = a;
    return VX_OK;
}

/* ---- checkpoints ----------------------------------------------------------------------------- */

_Static_assert(2 * (2 * VX_AC_MAX_TRUNK + 2) * 3 + 8 <= VX_ALGO_MAX_TENSORS,
               "a checkpoint's tensors must fit in vx_algo_state");

/* The weights tensor by tensor ("policy.pi.0.weight", …), or Adam's moments alike. */
static void add_weights(vx_algo_state *o, const vx_ac_layout *L, const char *prefix, const float *p)
{
    for (size_t i = 0; i < L->n_tensors; i++) {
        char name[64], full[96];
        size_t off;
        int r, c;
        vx_ac_tensor(L, i, name, sizeof name, &off, &r, &c);
        snprintf(full, sizeof full, "%s.%s", prefix, name);
        vx_algo_state_add(o, full, VX_DT_F32, r == 1 ? 1 : 2, r == 1 ? c : r, c, 0, p + off);
    }
}

static void add_normaliser(vx_algo_state *o, const double *mean, const double *var)
{
    vx_algo_state_add(o, "obs.mean", VX_DT_F64, 1, VX_OBS_DIM, 0, 0, mean);
    vx_algo_state_add(o, "obs.var", VX_DT_F64, 1, VX_OBS_DIM, 0, 0, var);
}

static vx_status policy_state(vx_algo *a0, vx_algo_state *o, vx_err *e)
{
    (void)e;
    ppo_algo *a = (ppo_algo *)a0;
    memset(o, 0, sizeof *o);
    add_weights(o, &a->L, "policy", a->params); /* what policy() copied, and acts with */
    add_normaliser(o, a->obs_mean, a->obs_var);
    vx_algo_state_meta(o, "params", (long long)a->L.n_params);
    return VX_OK;
}

static vx_status save(vx_algo *a0, int final, vx_algo_state *o, vx_err *e)
{
    (void) final; /* no backend has work in flight between iterations */
    ppo_algo *a = (ppo_algo *)a0;
    if (!a->ops) return vx_err_set(e, VX_ERR_ARG, "ppo: this instance only acts");
    vx_status st = a->ops->save(a->b, e);
    if (st) return st;
    const ppo_state *s = a->st;
    int64_t N = a->run.envs;
    memset(o, 0, sizeof *o);
    add_weights(o, &a->L, "policy", s->params);
    add_weights(o, &a->L, "adam.m", s->adam_m);
    add_weights(o, &a->L, "adam.v", s->adam_v);
    add_normaliser(o, s->obs_mean, s->obs_var);
    vx_algo_state_add(o, "obs.count", VX_DT_F64, 1, 1, 0, 0, &s->obs_count);
    vx_algo_state_add(o, "env.state", VX_DT_U8, 2, N, (int64_t)sizeof(vx_env_state), 0, s->env);
    vx_algo_state_add(o, "env.obs", VX_DT_F32, 2, N, VX_OBS_DIM, 0, s->obs);
    vx_algo_state_add(o, "env.episode_return", VX_DT_F64, 1, N, 0, 0, s->ep_ret);
    vx_algo_state_meta(o, "params", (long long)a->L.n_params);
    vx_algo_state_meta(o, "adam_t", (long long)s->adam_t);
    vx_algo_state_meta(o, "updates", (long long)s->updates);
    vx_algo_state_meta(o, "act_step", (long long)s->act_step);
    vx_algo_state_meta(o, "iterations", (long long)s->iterations);
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

/* A checkpoint's numbers are data from a file, checked before use: finite (and, with nonneg,
 * >= 0: Adam's second moments and the observation variances go under a square root, the count
 * divides); the error names the tensor and the element. */
static vx_status check_values(const vx_ckpt_view *ck, const char *name, const float *f,
                              const double *d, size_t n, int nonneg, vx_err *e)
{
    for (size_t i = 0; i < n; i++) {
        double x = f ? (double)f[i] : d[i];
        if (!isfinite(x) || (nonneg && x < 0))
            return vx_err_line(e, VX_ERR_FORMAT, ck->st->path, -1, name,
                               "element %zu is %g, not finite%s", i, x, nonneg ? " and >= 0" : "");
    }
    return VX_OK;
}

static vx_status copy_floats(const vx_ckpt_view *ck, const char *name, size_t count, float *dst,
                             int nonneg, vx_err *e)
{
    vx_status st = copy_tensor(ck, name, VX_DT_F32, count, 4, dst, e);
    return st ? st : check_values(ck, name, dst, NULL, count, nonneg, e);
}

static vx_status copy_doubles(const vx_ckpt_view *ck, const char *name, size_t count, double *dst,
                              int nonneg, vx_err *e)
{
    vx_status st = copy_tensor(ck, name, VX_DT_F64, count, 8, dst, e);
    return st ? st : check_values(ck, name, NULL, dst, count, nonneg, e);
}

static vx_status load_weights(const vx_ckpt_view *ck, const vx_ac_layout *L, const char *prefix,
                              float *p, int nonneg, vx_err *e)
{
    for (size_t i = 0; i < L->n_tensors; i++) {
        char name[64], full[96];
        size_t off;
        int r, c;
        vx_ac_tensor(L, i, name, sizeof name, &off, &r, &c);
        snprintf(full, sizeof full, "%s.%s", prefix, name);
        vx_status st = copy_floats(ck, full, (size_t)r * c, p + off, nonneg, e);
        if (st) return st;
    }
    return VX_OK;
}

static vx_status restore(vx_algo *a0, const vx_ckpt_view *ck, int weights_only, vx_err *e)
{
    ppo_algo *a = (ppo_algo *)a0;
    int64_t np = 0, v;
    vx_status st = vx_safetensors_meta_int(ck->st, "params", 1, INT64_MAX, &np, e);
    if (!st && np != (int64_t)a->L.n_params)
        st = vx_err_line(e, VX_ERR_FORMAT, ck->st->path, -1, "params",
                         "a network of %lld numbers stored (padding included), but these "
                         "settings make one of %zu (%zu parameters)",
                         (long long)np, a->L.n_params, a->L.n_weights);
    if (!st) st = load_weights(ck, &a->L, "policy", a->params, 0, e);
    if (!st) st = copy_doubles(ck, "obs.mean", VX_OBS_DIM, a->obs_mean, 0, e);
    if (!st) st = copy_doubles(ck, "obs.var", VX_OBS_DIM, a->obs_var, 1, e);
    if (st || weights_only || !a->ops) return st;
    ppo_state *s = a->st;
    size_t N = (size_t)a->run.envs, P = a->L.n_params;
    memcpy(s->params, a->params, P * sizeof(float));
    memcpy(s->obs_mean, a->obs_mean, VX_OBS_DIM * 8);
    memcpy(s->obs_var, a->obs_var, VX_OBS_DIM * 8);
    st = load_weights(ck, &a->L, "adam.m", s->adam_m, 0, e);
    if (!st) st = load_weights(ck, &a->L, "adam.v", s->adam_v, 1, e);
    if (!st) st = copy_doubles(ck, "obs.count", 1, &s->obs_count, 1, e);
    if (!st) st = copy_tensor(ck, "env.state", VX_DT_U8, N * sizeof(vx_env_state), 1, s->env, e);
    if (!st) st = vx_env_check_states(a->env, s->env, N, ck->st->path, "env.state", e);
    if (!st) st = copy_floats(ck, "env.obs", N * VX_OBS_DIM, s->obs, 0, e);
    if (!st) st = copy_doubles(ck, "env.episode_return", N, s->ep_ret, 0, e);
    if (!st) st = vx_safetensors_meta_int(ck->st, "adam_t", 0, INT64_MAX, &s->adam_t, e);
    if (!st) st = vx_safetensors_meta_int(ck->st, "updates", 0, INT64_MAX, &s->updates, e);
    if (!st) st = vx_safetensors_meta_int(ck->st, "act_step", 0, INT64_MAX, &v, e);
    if (!st) s->act_step = (uint64_t)v;
    if (!st) st = vx_safetensors_meta_int(ck->st, "iterations", 0, INT64_MAX, &s->iterations, e);
    if (!st) st = a->ops->restore(a->b, e);
    return st;
}

static size_t reserved(const vx_algo *a0)
{
    const ppo_algo *a = (const ppo_algo *)a0;
    return a->ops ? a->ops->reserved(a->b) : 0;
}

const vx_algo_ops vx_algo_ppo = {
    "ppo",
    "PPO: clipped surrogate, GAE, a factorised categorical actor-critic",
    sizeof(vx_ppo_settings),
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
    NULL, /* no fused trials: a search runs PPO's trials each alone */
    NULL,
    NULL,
    NULL,
};

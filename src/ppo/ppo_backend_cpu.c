/* ppo_backend_cpu.c — PPO's CPU backend (ppo_backend.h), the reference a GPU twin is tested
 * against. One iteration, in order on the calling thread:
 *
 *   rollout   T steps: normalise the N observations (statistics frozen for the iteration),
 *             forward, sample each environment's action (ppo_math.h, Philox counter = acting
 *             step), step the environments, store everything; a truncated episode's final
 *             observation is valued for its bootstrap
 *   GAE       per environment, backwards (vx_ppo_gae); returns = advantages + values
 *   update    update_epochs passes; each a permutation of the T·N samples (the order of
 *             Philox keys, ties by index) cut into `minibatches` minibatches: forward, the
 *             per-sample loss with advantages normalised over the minibatch, backward, the
 *             global-norm clip, Adam; an epoch whose mean approximate KL passes target_kl ends
 *             the iteration's updates
 *   statistics the observation mean and variance take in the rollout's raw observations
 *             (Chan et al.'s parallel merge), for the next iteration
 *
 * Storage is step-major: sample (t, i) at t·N + i. */
#include "vixen/philox.h"
#include "vixen/ppo_math.h"
#include "ppo_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ppo_backend {
    vx_ppo_settings s;
    vx_run_params run;
    vx_ac_layout L;
    vx_env *env;
    ppo_state st;
    size_t N, T, D, M; /* envs, steps, observation width, minibatch size */
    float *grads;      /* n_params (the padding stays 0) */
    vx_adam adam;
    vx_ac_ws ws_act, ws_mb;
    /* the rollout, T × N (× D or × 3), and the shuffle's keys: most of the backend's memory, so
     * charged to the device (a search's trial measures its peak, as the DQN's replay is) */
    vx_mem mem;
    float *r_obs, *r_logp, *r_val, *r_rew, *r_boot, *r_adv, *r_ret;
    int32_t *r_act;
    uint8_t *r_te, *r_tr;
    /* one step */
    float *next_obs, *fin, *rew;
    int32_t *act;
    uint8_t *te, *tr;
    double *raw_sum, *raw_sum2; /* D: this rollout's raw observations */
    /* the update */
    uint64_t *keys; /* T·N: key << 32 | index */
    float *mb_obs, *mb_dz, *mb_dv, *mb_logp, *mb_val, *mb_adv, *mb_ret;
    int32_t *mb_act;
};

static void cpu_free(ppo_backend *b)
{
    if (!b) return;
    ppo_state *s = &b->st;
    free(s->params), free(s->adam_m), free(s->adam_v), free(s->obs_mean), free(s->obs_var);
    free(s->env), free(s->obs), free(s->ep_ret);
    free(b->grads);
    vx_adam_free(&b->adam);
    vx_ac_ws_free(&b->ws_act);
    vx_ac_ws_free(&b->ws_mb);
    vx_mem_release(&b->mem);
    free(b->next_obs), free(b->fin), free(b->rew), free(b->act), free(b->te), free(b->tr);
    free(b->raw_sum), free(b->raw_sum2), free(b->mb_obs), free(b->mb_dz);
    free(b->mb_dv), free(b->mb_logp), free(b->mb_val), free(b->mb_adv), free(b->mb_ret);
    free(b->mb_act);
    free(b);
}

static vx_status cpu_create(const ppo_init *in, ppo_backend **out, ppo_state **state, vx_err *e)
{
    *out = NULL;
    ppo_backend *b = calloc(1, sizeof *b);
    if (!b) return vx_err_set(e, VX_ERR_NOMEM, "ppo: out of memory");
    b->s = *in->s;
    b->run = *in->run;
    b->L = *in->L;
    b->env = in->env;
    size_t N = vx_env_count(in->env), T = (size_t)b->run.steps_per_epoch, D = VX_OBS_DIM;
    size_t TN = T * N, np = b->L.n_params, K = VX_PPO_LOGITS;
    b->N = N, b->T = T, b->D = D, b->M = TN / (size_t)b->s.minibatches;
    vx_mem_init(&b->mem, in->dev ? in->dev : vx_device_cpu(), "ppo rollout");
    vx_status st = vx_adam_create(&b->s.adam, np, &b->adam, e);
    if (!st) st = vx_ac_ws_create(&b->L, (int)N, &b->ws_act, e);
    if (!st) st = vx_ac_ws_create(&b->L, (int)b->M, &b->ws_mb, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN * D * 4, &b->r_obs, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN * 4, &b->r_logp, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN * 4, &b->r_val, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN * 4, &b->r_rew, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN * 4, &b->r_boot, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN * 4, &b->r_adv, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN * 4, &b->r_ret, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN * 3 * 4, &b->r_act, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN, &b->r_te, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN, &b->r_tr, e);
    if (!st) st = vx_mem_alloc(&b->mem, TN * 8, &b->keys, e);
    if (st) {
        cpu_free(b);
        return st;
    }
    memset(b->r_boot, 0, TN * 4);
    ppo_state *s = &b->st;
    s->params = malloc(np * 4), s->adam_m = malloc(np * 4), s->adam_v = malloc(np * 4);
    s->obs_mean = calloc(D, 8), s->obs_var = malloc(D * 8);
    s->env = malloc(N * sizeof(vx_env_state)), s->obs = malloc(N * D * 4);
    s->ep_ret = calloc(N, 8);
    b->grads = calloc(np, 4);
    b->next_obs = malloc(N * D * 4), b->fin = malloc(N * D * 4), b->rew = malloc(N * 4);
    b->act = malloc(N * 3 * 4), b->te = malloc(N), b->tr = malloc(N);
    b->raw_sum = malloc(D * 8), b->raw_sum2 = malloc(D * 8);
    b->mb_obs = malloc(b->M * D * 4), b->mb_dz = malloc(b->M * K * 4);
    b->mb_dv = malloc(b->M * 4), b->mb_logp = malloc(b->M * 4), b->mb_val = malloc(b->M * 4);
    b->mb_adv = malloc(b->M * 4), b->mb_ret = malloc(b->M * 4), b->mb_act = malloc(b->M * 12);
    if (!s->params || !s->adam_m || !s->adam_v || !s->obs_mean || !s->obs_var || !s->env ||
        !s->obs || !s->ep_ret || !b->grads || !b->next_obs || !b->fin || !b->rew || !b->act ||
        !b->te || !b->tr || !b->raw_sum || !b->raw_sum2 || !b->mb_obs || !b->mb_dz || !b->mb_dv ||
        !b->mb_logp || !b->mb_val || !b->mb_adv || !b->mb_ret || !b->mb_act) {
        cpu_free(b);
        return vx_err_set(e, VX_ERR_NOMEM, "ppo: out of memory for %zu × %zu steps", T, N);
    }
    memcpy(s->params, in->init_params, np * 4);
    for (size_t d = 0; d < D; d++) s->obs_var[d] = 1;
    s->obs_count = 1e-4; /* as gym's running statistics start */
    st = vx_env_observe(b->env, s->obs, NULL, e);
    if (st) {
        cpu_free(b);
        return st;
    }
    *out = b;
    *state = s;
    return VX_OK;
}

static void cpu_describe(const ppo_backend *b, char *buf, size_t n)
{
    snprintf(buf, n, "on the CPU, minibatch %zu", b->M);
}

/* Normalised copies of rows x (n × D) into out, and their raw sums into the rollout's. */
static void normalise(ppo_backend *b, const float *x, size_t n, float *out, int count)
{
    const ppo_state *s = &b->st;
    for (size_t i = 0; i < n; i++)
        for (size_t d = 0; d < b->D; d++) {
            float v = x[i * b->D + d];
            out[i * b->D + d] =
                vx_ppo_norm_obs(v, s->obs_mean[d], s->obs_var[d], b->s.obs_clip, b->s.norm_obs);
            if (count) b->raw_sum[d] += v, b->raw_sum2[d] += (double)v * v;
        }
}

static vx_status rollout(ppo_backend *b, ppo_result *r, vx_err *e)
{
    size_t N = b->N, D = b->D, K = VX_PPO_LOGITS;
    ppo_state *s = &b->st;
    memset(b->raw_sum, 0, D * 8), memset(b->raw_sum2, 0, D * 8);
    for (size_t t = 0; t < b->T; t++) {
        float *o = b->r_obs + t * N * D;
        normalise(b, s->obs, N, o, 1);
        vx_ac_forward_ref(&b->L, s->params, o, (int)N, &b->ws_act);
        for (size_t i = 0; i < N; i++) {
            double z[VX_PPO_LOGITS];
            for (size_t k = 0; k < K; k++) z[k] = b->ws_act.logits[i * K + k];
            double lp = vx_ppo_sample(z, b->run.seed, i, s->act_step, b->act + 3 * i);
            b->r_logp[t * N + i] = (float)lp;
            b->r_val[t * N + i] = b->ws_act.value[i];
        }
        memcpy(b->r_act + t * N * 3, b->act, N * 3 * sizeof(int32_t));
        vx_status st =
            vx_env_step(b->env, b->act, b->next_obs, b->rew, b->te, b->tr, b->fin, NULL, e);
        if (st) return st;
        memcpy(b->r_rew + t * N, b->rew, N * 4);
        memcpy(b->r_te + t * N, b->te, N), memcpy(b->r_tr + t * N, b->tr, N);
        memcpy(s->obs, b->next_obs, N * D * 4);
        /* the value of each truncated episode's final observation, for its bootstrap */
        for (size_t i = 0; i < N; i++) {
            b->r_boot[t * N + i] = 0;
            s->ep_ret[i] += b->rew[i];
            if (b->te[i] || b->tr[i]) {
                r->return_sum += s->ep_ret[i];
                r->episodes++;
                s->ep_ret[i] = 0;
            }
            if (!b->tr[i]) continue;
            float fo[VX_OBS_DIM];
            normalise(b, b->fin + i * D, 1, fo, 0);
            vx_ac_forward_ref(&b->L, s->params, fo, 1, &b->ws_mb);
            b->r_boot[t * N + i] = b->ws_mb.value[0];
        }
        s->act_step++;
    }
    r->env_steps = (int64_t)(b->T * N);
    return VX_OK;
}

/* GAE and returns; the value of the observation after the rollout bootstraps the last step. */
static void advantages(ppo_backend *b)
{
    size_t N = b->N, TN = b->T * N;
    float *o = b->mb_obs; /* N ≤ M is not guaranteed: value the last observations in chunks */
    for (size_t i0 = 0; i0 < N; i0 += b->M) {
        size_t n = N - i0 < b->M ? N - i0 : b->M;
        normalise(b, b->st.obs + i0 * b->D, n, o, 0);
        vx_ac_forward_ref(&b->L, b->st.params, o, (int)n, &b->ws_mb);
        for (size_t i = 0; i < n; i++)
            vx_ppo_gae((int)b->T, N, b->r_rew + i0 + i, b->r_te + i0 + i, b->r_tr + i0 + i,
                       b->r_val + i0 + i, b->r_boot + i0 + i, b->ws_mb.value[i], b->s.gamma,
                       b->s.gae_lambda, b->r_adv + i0 + i);
    }
    for (size_t k = 0; k < TN; k++) b->r_ret[k] = b->r_adv[k] + b->r_val[k];
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The permutation of update epoch k of iteration it: indices ordered by their Philox key (the
 * u32 draws of stream (seed, PERM + it · epochs + k), in order), ties by index. */
static void permutation(ppo_backend *b, int64_t it, int k)
{
    size_t TN = b->T * b->N;
    vx_rng g = vx_rng_make(b->run.seed,
                           VX_PPO_PERM_STREAM + (uint64_t)it * (uint64_t)b->s.update_epochs + k, 0);
    for (size_t i = 0; i < TN; i++) b->keys[i] = (uint64_t)vx_rng_u32(&g) << 32 | (uint64_t)i;
    qsort(b->keys, TN, sizeof *b->keys, cmp_u64);
}

void vx_ppo_minibatch(const vx_ac_layout *L, const float *params, const vx_ppo_settings *s,
                      const ppo_minibatch *mb, vx_ac_ws *ws, float *dz, float *dv, float *grads,
                      ppo_minibatch_stats *out)
{
    size_t M = mb->M, K = VX_PPO_LOGITS;
    vx_ppo_loss_cfg lc = {s->clip, s->clip_value, s->vf_coef, s->ent_coef};
    double am = 0, as = 0;
    for (size_t j = 0; j < M; j++) am += mb->adv[j];
    am /= (double)M;
    for (size_t j = 0; j < M; j++) as += (mb->adv[j] - am) * (mb->adv[j] - am);
    as = M > 1 ? sqrt(as / (double)(M - 1)) : 0; /* the sample sd, as torch.std */
    vx_ac_forward_ref(L, params, mb->obs, (int)M, ws);
    memset(out, 0, sizeof *out);
    for (size_t j = 0; j < M; j++) {
        double z[VX_PPO_LOGITS], g[VX_PPO_LOGITS], gv;
        for (size_t c = 0; c < K; c++) z[c] = ws->logits[j * K + c];
        double adv = s->norm_adv ? (mb->adv[j] - am) / (as + 1e-8) : mb->adv[j];
        vx_ppo_loss_out o;
        out->loss += vx_ppo_loss(&lc, z, ws->value[j], mb->act + 3 * j, mb->logp[j], mb->val[j],
                                 adv, mb->ret[j], 1.0 / (double)M, g, &gv, &o) /
                     (double)M;
        for (size_t c = 0; c < K; c++) dz[j * K + c] = (float)g[c];
        dv[j] = (float)gv;
        out->pg += o.pg / (double)M, out->v += o.v / (double)M;
        out->entropy += o.entropy / (double)M, out->approx_kl += o.approx_kl / (double)M;
        out->clipfrac += o.clipped / (double)M;
    }
    vx_ac_backward_ref(L, params, mb->obs, (int)M, dz, dv, ws, grads);
}

static vx_status update(ppo_backend *b, const ppo_plan *p, ppo_result *r)
{
    size_t D = b->D, M = b->M, np = b->L.n_params;
    ppo_state *s = &b->st;
    b->adam.cfg.lr = p->lr;
    int64_t it = s->iterations;
    for (int k = 0; k < b->s.update_epochs; k++) {
        permutation(b, it, k);
        double kl_epoch = 0;
        for (int mb = 0; mb < b->s.minibatches; mb++) {
            const uint64_t *idx = b->keys + (size_t)mb * M;
            for (size_t j = 0; j < M; j++) { /* gather the minibatch */
                size_t q = (size_t)(idx[j] & 0xffffffffu);
                memcpy(b->mb_obs + j * D, b->r_obs + q * D, D * 4);
                memcpy(b->mb_act + 3 * j, b->r_act + 3 * q, 3 * sizeof(int32_t));
                b->mb_logp[j] = b->r_logp[q], b->mb_val[j] = b->r_val[q];
                b->mb_adv[j] = b->r_adv[q], b->mb_ret[j] = b->r_ret[q];
            }
            ppo_minibatch mbv = {M,         b->mb_obs, b->mb_act, b->mb_logp,
                                 b->mb_val, b->mb_adv, b->mb_ret};
            ppo_minibatch_stats o;
            vx_ppo_minibatch(&b->L, s->params, &b->s, &mbv, &b->ws_mb, b->mb_dz, b->mb_dv, b->grads,
                             &o);
            r->grad_norm += vx_grad_clip(b->grads, np, b->s.max_grad_norm);
            vx_adam_step(&b->adam, s->params, b->grads);
            s->updates++, r->updates++;
            r->pg_loss += o.pg, r->v_loss += o.v, r->entropy += o.entropy;
            r->approx_kl += o.approx_kl, r->clipfrac += o.clipfrac;
            kl_epoch += o.approx_kl;
        }
        if (b->s.target_kl > 0 && kl_epoch / b->s.minibatches > b->s.target_kl) break;
    }
    double n = r->updates > 0 ? r->updates : 1;
    r->pg_loss /= n, r->v_loss /= n, r->entropy /= n, r->approx_kl /= n, r->clipfrac /= n;
    r->grad_norm /= n;
    return VX_OK;
}

/* Explained variance of the values: 1 − Var(returns − values) / Var(returns). */
static double explained_variance(const ppo_backend *b)
{
    size_t TN = b->T * b->N;
    double sy = 0, sy2 = 0, sd = 0, sd2 = 0;
    for (size_t k = 0; k < TN; k++) {
        double y = b->r_ret[k], d = y - b->r_val[k];
        sy += y, sy2 += y * y, sd += d, sd2 += d * d;
    }
    double vy = sy2 / TN - (sy / TN) * (sy / TN), vd = sd2 / TN - (sd / TN) * (sd / TN);
    return vy > 0 ? 1 - vd / vy : NAN;
}

/* The observation statistics take in the rollout (mean and variance merged by counts). */
static void update_obs_stats(ppo_backend *b)
{
    ppo_state *s = &b->st;
    double nb = (double)(b->T * b->N), tot = s->obs_count + nb;
    for (size_t d = 0; d < b->D; d++) {
        double mb = b->raw_sum[d] / nb, vb = b->raw_sum2[d] / nb - mb * mb;
        vb = vb > 0 ? vb : 0;
        double delta = mb - s->obs_mean[d];
        double m2 =
            s->obs_var[d] * s->obs_count + vb * nb + delta * delta * s->obs_count * nb / tot;
        s->obs_mean[d] += delta * nb / tot;
        s->obs_var[d] = m2 / tot;
    }
    s->obs_count = tot;
}

static vx_status cpu_iteration(ppo_backend *b, const ppo_plan *p, ppo_result *r, vx_err *e)
{
    memset(r, 0, sizeof *r);
    uint64_t t0 = vx_now_ns();
    vx_status st = rollout(b, r, e);
    if (st) return st;
    r->collect_s = vx_seconds_since(t0);
    uint64_t t1 = vx_now_ns();
    advantages(b);
    st = update(b, p, r);
    r->explained_var = explained_variance(b);
    if (b->s.norm_obs) update_obs_stats(b);
    b->st.iterations++;
    r->learn_s = vx_seconds_since(t1);
    return st;
}

static vx_status cpu_weights(ppo_backend *b, float *params, double *mean, double *var, vx_err *e)
{
    (void)e;
    memcpy(params, b->st.params, b->L.n_params * 4);
    memcpy(mean, b->st.obs_mean, b->D * 8);
    memcpy(var, b->st.obs_var, b->D * 8);
    return VX_OK;
}

static vx_status cpu_save(ppo_backend *b, vx_err *e)
{
    size_t np = b->L.n_params;
    memcpy(b->st.adam_m, b->adam.m, np * 4);
    memcpy(b->st.adam_v, b->adam.v, np * 4);
    b->st.adam_t = b->adam.t;
    return vx_env_get_states(b->env, b->st.env, e);
}

static vx_status cpu_restore(ppo_backend *b, vx_err *e)
{
    size_t np = b->L.n_params;
    memcpy(b->adam.m, b->st.adam_m, np * 4);
    memcpy(b->adam.v, b->st.adam_v, np * 4);
    b->adam.t = b->st.adam_t;
    return vx_env_set_states(b->env, b->st.env, e);
}

static size_t cpu_reserved(const ppo_backend *b)
{
    (void)b;
    return 0;
}

const ppo_backend_ops vx_ppo_backend_cpu = {
    "cpu",       cpu_create, cpu_free,    cpu_describe, cpu_iteration,
    cpu_weights, cpu_save,   cpu_restore, cpu_reserved,
};

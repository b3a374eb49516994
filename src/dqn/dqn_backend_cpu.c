/* dqn_backend_cpu.c — the DQN's CPU backend (dqn_backend.h), the reference the GPU is tested
 * against: collection is a loop over steps (ε-greedy acting on the CPU network, the environment
 * step, n-step transitions), learning a loop of sample → update → new priorities.
 *
 * Everything happens on the calling thread in order, so a checkpoint copies the state as it is
 * and writes the replay buffer from the live one: nothing is ever in flight. */
#include "vixen/dqn_act.h"
#include "dqn_backend.h"

#include <stdlib.h>
#include <string.h>

struct dqn_backend {
    vx_dqn_settings s;
    vx_run_params run;
    vx_env *env;
    vx_dqn dqn;
    vx_replay *replay;
    vx_nstep ns;
    vx_transition_buf tbuf;
    vx_qnet_ws act_ws;
    float *obs, *next_obs, *final_obs, *merged, *rew;
    int32_t *act;
    uint8_t *te, *tr;
    double *ep_ret;
    /* the sampled batch */
    float *b_obs, *b_next, *b_rew, *b_w;
    int32_t *b_act;
    uint8_t *b_te, *b_tr, *b_steps;
    uint32_t *b_idx, *b_gen;
    float *act_params; /* the weights acting reads with overlap on */
    uint64_t act_step;
    int collected_ahead;
    dqn_state st;
};

static void cpu_free(dqn_backend *b)
{
    if (!b) return;
    vx_dqn_free(&b->dqn);
    vx_replay_free(b->replay);
    vx_nstep_free(&b->ns);
    vx_tbuf_free(&b->tbuf);
    vx_qnet_ws_free(&b->act_ws);
    free(b->obs), free(b->next_obs), free(b->final_obs), free(b->merged), free(b->rew);
    free(b->act), free(b->te), free(b->tr), free(b->ep_ret);
    free(b->b_obs), free(b->b_next), free(b->b_rew), free(b->b_w), free(b->b_act);
    free(b->b_te), free(b->b_tr), free(b->b_steps), free(b->b_idx), free(b->b_gen);
    free(b->act_params);
    dqn_state *s = &b->st;
    free(s->online), free(s->target), free(s->adam_m), free(s->adam_v), free(s->acting);
    free(s->env), free(s->obs), free(s->ep_ret), free(s->nstep_count_head), free(s->nstep_obs);
    free(s->nstep_act), free(s->nstep_rew);
    free(b);
}

static vx_status cpu_create(const dqn_init *in, dqn_backend **out, dqn_state **state, vx_err *e)
{
    *out = NULL;
    dqn_backend *b = calloc(1, sizeof *b);
    if (!b) return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    b->s = *in->s;
    b->run = *in->run;
    b->env = in->env;
    size_t N = vx_env_count(in->env), D = VX_OBS_DIM, B = (size_t)b->s.learner.batch;
    size_t T = (size_t)b->run.steps_per_epoch, n = (size_t)b->s.learner.n_step;
    size_t np = in->L->n_params;
    vx_qnet_cfg net;
    vx_dqn_net_cfg(&b->s, &net);
    vx_replay_cfg rc;
    vx_replay_cfg_default(&rc, b->s.replay_kind, (size_t)b->s.replay_capacity);
    rc.alpha = b->s.replay_alpha, rc.eps = b->s.replay_eps, rc.rank_refresh = b->s.rank_refresh;
    rc.seed = b->run.seed;
    vx_status st = vx_dqn_create(&b->s.learner, &net, b->run.seed, &b->dqn, e);
    if (!st) {
        memcpy(b->dqn.online, in->init_params, np * sizeof(float));
        vx_dqn_sync_target(&b->dqn);
        /* charged to the run's context (a search's trial runs on a share of one) */
        st = vx_replay_create(&rc, in->dev, &b->replay, e);
    }
    if (!st) st = vx_nstep_create((int)n, (int)N, (int)D, b->s.learner.gamma, &b->ns, e);
    if (!st) st = vx_tbuf_reserve(&b->tbuf, N * (T + n), (int)D, e);
    if (!st) st = vx_qnet_ws_create(&b->dqn.L, (int)(N < 1024 ? N : 1024), &b->act_ws, e);
    if (st) {
        cpu_free(b);
        return st;
    }
    b->act_params = malloc(np * sizeof(float));
    b->obs = malloc(N * D * 4), b->next_obs = malloc(N * D * 4), b->final_obs = malloc(N * D * 4);
    b->merged = malloc(N * D * 4), b->rew = malloc(N * 4);
    b->act = malloc(N * VX_ACTION_BRANCHES * sizeof(int32_t));
    b->te = malloc(N), b->tr = malloc(N), b->ep_ret = calloc(N, sizeof(double));
    b->b_obs = malloc(B * D * 4), b->b_next = malloc(B * D * 4), b->b_rew = malloc(B * 4);
    b->b_w = malloc(B * 4), b->b_act = malloc(B * VX_ACTION_BRANCHES * sizeof(int32_t));
    b->b_te = malloc(B), b->b_tr = malloc(B), b->b_steps = malloc(B);
    b->b_idx = malloc(B * 4), b->b_gen = malloc(B * 4);
    dqn_state *s = &b->st;
    s->online = malloc(np * 4), s->target = malloc(np * 4), s->adam_m = malloc(np * 4);
    s->adam_v = malloc(np * 4), s->acting = malloc(np * 4);
    s->env = malloc(N * sizeof(vx_env_state)), s->obs = malloc(N * D * 4);
    s->ep_ret = malloc(N * 8), s->nstep_count_head = malloc(2 * N * 8);
    s->nstep_obs = malloc(N * n * D * 4);
    s->nstep_act = malloc(N * n * VX_ACTION_BRANCHES * sizeof(int32_t));
    s->nstep_rew = malloc(N * n * 4);
    if (!b->act_params || !b->obs || !b->next_obs || !b->final_obs || !b->merged || !b->rew ||
        !b->act || !b->te || !b->tr || !b->ep_ret || !b->b_obs || !b->b_next || !b->b_rew ||
        !b->b_w || !b->b_act || !b->b_te || !b->b_tr || !b->b_steps || !b->b_idx || !b->b_gen ||
        !s->online || !s->target || !s->adam_m || !s->adam_v || !s->acting || !s->env || !s->obs ||
        !s->ep_ret || !s->nstep_count_head || !s->nstep_obs || !s->nstep_act || !s->nstep_rew) {
        cpu_free(b);
        return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    }
    memcpy(b->act_params, b->dqn.online, np * sizeof(float));
    st = vx_env_observe(b->env, b->obs, NULL, e);
    if (st) {
        cpu_free(b);
        return st;
    }
    *out = b;
    *state = &b->st;
    return VX_OK;
}

static void cpu_resolved(const dqn_backend *b, vx_dqn_settings *s)
{
    (void)b, (void)s; /* the CPU takes the settings as they are */
}

static void cpu_describe(const dqn_backend *b, char *buf, size_t n)
{
    (void)b;
    snprintf(buf, n, "on the CPU");
}

/* N × T steps into the replay buffer. */
static vx_status collect(dqn_backend *b, double eps, double *ret_sum, double *episodes, vx_err *e)
{
    size_t N = vx_env_count(b->env), D = VX_OBS_DIM;
    b->tbuf.n = 0;
    /* with overlap on, acting reads the snapshot taken before the previous epoch's updates */
    const float *params = b->s.overlap ? b->act_params : NULL;
    for (int step = 0; step < b->run.steps_per_epoch; step++) {
        vx_dqn_act(&b->dqn, params, &b->act_ws, b->obs, (int)N, eps, b->run.seed, b->act_step++,
                   b->act, NULL);
        vx_status st =
            vx_env_step(b->env, b->act, b->next_obs, b->rew, b->te, b->tr, b->final_obs, NULL, e);
        if (st) return st;
        for (size_t i = 0; i < N; i++) {
            int ended = b->te[i] | b->tr[i];
            memcpy(b->merged + i * D, (ended ? b->final_obs : b->next_obs) + i * D, D * 4);
            b->ep_ret[i] += b->rew[i];
            if (ended) {
                *ret_sum += b->ep_ret[i];
                *episodes += 1;
                b->ep_ret[i] = 0;
            }
        }
        vx_nstep_push(&b->ns, b->obs, b->act, b->rew, b->te, b->tr, b->merged, &b->tbuf);
        float *swap = b->obs;
        b->obs = b->next_obs;
        b->next_obs = swap;
    }
    vx_transitions tv = vx_tbuf_view(&b->tbuf);
    return vx_replay_insert(b->replay, &tv, b->tbuf.n, NULL, e);
}

static vx_status learn(dqn_backend *b, int K, double beta, dqn_result *r, vx_err *e)
{
    size_t size = vx_replay_size(b->replay);
    if ((int64_t)size < b->s.warmup || (int64_t)size < b->s.learner.batch) return VX_OK;
    int B = b->s.learner.batch;
    vx_replay_batch rb = {b->b_obs, b->b_next,  b->b_act, b->b_rew, b->b_te,
                          b->b_tr,  b->b_steps, b->b_w,   b->b_idx, b->b_gen};
    vx_status st = vx_replay_set_beta(b->replay, beta, NULL, e);
    double loss = 0, q = 0, norm = 0, q_max = 0;
    for (int k = 0; k < K && !st; k++) {
        st = vx_replay_sample(b->replay, (size_t)B, &rb, NULL, e);
        if (st) break;
        vx_dqn_update_stats us;
        vx_dqn_update(&b->dqn, &rb, B, &us);
        st = vx_replay_update(b->replay, b->b_idx, b->b_gen, b->dqn.priority, (size_t)B, NULL, e);
        loss += us.loss, q += us.q_mean, norm += us.grad_norm;
        q_max = k == 0 || us.q_max > q_max ? us.q_max : q_max;
    }
    if (st) return st;
    r->updates = K;
    r->loss = loss / K, r->q_mean = q / K, r->grad_norm = norm / K, r->q_max = q_max;
    return VX_OK;
}

static vx_status cpu_epoch(dqn_backend *b, const dqn_plan *p, dqn_result *r, vx_err *e)
{
    uint64_t t0 = vx_now_ns();
    vx_status st = VX_OK;
    if (!b->collected_ahead) st = collect(b, p->eps, &r->return_sum, &r->episodes, e);
    b->collected_ahead = 0;
    r->env_steps = (int64_t)vx_env_count(b->env) * b->run.steps_per_epoch;
    r->collect_s = vx_seconds_since(t0);
    if (st) return st;
    uint64_t t1 = vx_now_ns();
    if (b->s.overlap) /* the next rollout acts with the weights as they are now */
        memcpy(b->act_params, b->dqn.online, b->dqn.L.n_params * sizeof(float));
    st = learn(b, p->K, p->beta, r, e);
    r->learn_s = vx_seconds_since(t1);
    b->st.updates = b->dqn.updates;
    return st;
}

static vx_status cpu_weights(dqn_backend *b, float *host, vx_err *e)
{
    (void)e;
    memcpy(host, b->dqn.online, b->dqn.L.n_params * sizeof(float));
    return VX_OK;
}

static vx_status cpu_save(dqn_backend *b, int final, int *detached, vx_err *e)
{
    (void) final;
    dqn_state *s = &b->st;
    size_t N = vx_env_count(b->env), n = (size_t)b->ns.n, np = b->dqn.L.n_params;
    size_t D = VX_OBS_DIM;
    *detached = 0;
    memcpy(s->online, b->dqn.online, np * 4);
    memcpy(s->target, b->dqn.target, np * 4);
    memcpy(s->adam_m, b->dqn.adam.m, np * 4);
    memcpy(s->adam_v, b->dqn.adam.v, np * 4);
    memcpy(s->acting, b->act_params, np * 4);
    memcpy(s->obs, b->obs, N * D * 4);
    memcpy(s->ep_ret, b->ep_ret, N * 8);
    for (size_t i = 0; i < N; i++)
        s->nstep_count_head[i] = b->ns.count[i], s->nstep_count_head[N + i] = b->ns.head[i];
    memcpy(s->nstep_obs, b->ns.obs, N * n * D * 4);
    memcpy(s->nstep_act, b->ns.act, N * n * VX_ACTION_BRANCHES * sizeof(int32_t));
    memcpy(s->nstep_rew, b->ns.rew, N * n * 4);
    s->adam_t = b->dqn.adam.t;
    s->updates = b->dqn.updates;
    s->act_step = b->act_step;
    s->collected_ahead = b->collected_ahead;
    vx_replay_stats rs;
    vx_status st = vx_replay_stats_get(b->replay, &rs, NULL, e);
    if (!st) s->replay_inserted = rs.inserted;
    if (!st) st = vx_env_get_states(b->env, s->env, e);
    return st;
}

static vx_status cpu_wait(dqn_backend *b, vx_err *e)
{
    (void)b, (void)e;
    return VX_OK;
}

static vx_status cpu_save_replay(dqn_backend *b, int detached, const char *path, vx_err *e)
{
    (void)detached;
    return vx_replay_save(b->replay, path, e);
}

static vx_status cpu_restore(dqn_backend *b, vx_err *e)
{
    const dqn_state *s = &b->st;
    size_t N = vx_env_count(b->env), n = (size_t)b->ns.n, np = b->dqn.L.n_params;
    size_t D = VX_OBS_DIM;
    memcpy(b->dqn.online, s->online, np * 4);
    memcpy(b->dqn.target, s->target, np * 4);
    memcpy(b->dqn.adam.m, s->adam_m, np * 4);
    memcpy(b->dqn.adam.v, s->adam_v, np * 4);
    memcpy(b->act_params, s->acting, np * 4);
    memcpy(b->obs, s->obs, N * D * 4);
    memcpy(b->ep_ret, s->ep_ret, N * 8);
    for (size_t i = 0; i < N; i++)
        b->ns.count[i] = (int)s->nstep_count_head[i],
        b->ns.head[i] = (int)s->nstep_count_head[N + i];
    memcpy(b->ns.obs, s->nstep_obs, N * n * D * 4);
    memcpy(b->ns.act, s->nstep_act, N * n * VX_ACTION_BRANCHES * sizeof(int32_t));
    memcpy(b->ns.rew, s->nstep_rew, N * n * 4);
    b->dqn.adam.t = s->adam_t;
    b->dqn.updates = s->updates;
    b->act_step = s->act_step;
    b->collected_ahead = s->collected_ahead;
    return vx_env_set_states(b->env, s->env, e);
}

static vx_status cpu_load_replay(dqn_backend *b, const char *path, uint64_t *inserted, vx_err *e)
{
    vx_replay_stats rs;
    vx_status st = vx_replay_load(b->replay, path, e);
    if (!st) st = vx_replay_stats_get(b->replay, &rs, NULL, e);
    if (!st) *inserted = rs.inserted;
    return st;
}

static size_t cpu_reserved(const dqn_backend *b) { return vx_replay_reserved(b->replay); }

const dqn_backend_ops vx_dqn_backend_cpu = {
    "cpu",        cpu_create, cpu_free, cpu_resolved,    cpu_describe, cpu_epoch,
    cpu_weights,  cpu_save,   cpu_wait, cpu_save_replay, cpu_restore,  cpu_load_replay,
    cpu_reserved, NULL,       NULL, /* no groups: the algorithm runs the members one after another
                                     */
};

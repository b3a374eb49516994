/* dqn_cpu.c — the CPU reference learner: update step, ε-greedy acting, target sync, n-step
 * transitions.
 *
 * The update is the reference sequence the GPU graph replays: online(s), online(s'), target(s')
 * forwards; per-sample loss from dqn_loss.h; one backward through online(s); global norm clip;
 * Adam; target sync by hard copy every C updates or Polyak τ (optim_math.h). Acting and the
 * n-step rings are dqn_act.h's, the code the GPU rollout runs too. */
#include "vixen/dqn.h"
#include "vixen/dqn_act.h"
#include "vixen/optim_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void vx_dqn_cfg_default(vx_dqn_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->loss = VX_LOSS_HUBER;
    c->gamma = 0.99;
    c->huber_kappa = 1.0;
    c->atoms = 51;
    c->v_min = -10;
    c->v_max = 10;
    c->n_step = 1;
    c->target_every = 1000;
    c->tau = 0;
    c->grad_clip = 10;
    c->batch = 256;
    c->fused = 1; /* past a batch of 2,048, where the fused update measured faster */
    vx_adam_cfg_default(&c->adam);
}

void vx_dqn_free(vx_dqn *d)
{
    free(d->online), free(d->target), free(d->grads), free(d->dq), free(d->priority);
    vx_adam_free(&d->adam);
    vx_qnet_ws_free(&d->ws_s);
    vx_qnet_ws_free(&d->ws_next);
    vx_qnet_ws_free(&d->ws_target);
    memset(d, 0, sizeof *d);
}

vx_status vx_dqn_cfg_check(const vx_dqn_cfg *cfg, vx_err *e)
{
    if (cfg->loss < VX_LOSS_MSE || cfg->loss > VX_LOSS_C51)
        return vx_err_set(e, VX_ERR_ARG, "dqn.loss: unknown loss %d", cfg->loss);
    if (!(cfg->gamma >= 0 && cfg->gamma <= 1) || cfg->n_step < 1 || cfg->n_step > 64 ||
        cfg->batch < 1 || !(cfg->tau >= 0 && cfg->tau <= 1) ||
        (cfg->tau == 0 && cfg->target_every < 1) || cfg->grad_clip < 0 || !(cfg->huber_kappa > 0))
        return vx_err_set(e, VX_ERR_ARG,
                          "dqn: need gamma in [0,1], n_step 1..64, batch >= 1, "
                          "tau in [0,1] (or target_every >= 1), clip >= 0");
    if (cfg->loss == VX_LOSS_C51 &&
        (cfg->atoms < 2 || cfg->atoms > VX_LOSS_MAX_ATOMS || !(cfg->v_max > cfg->v_min)))
        return vx_err_set(e, VX_ERR_ARG, "dqn: C51 needs 2..%d atoms and dqn.v_max > dqn.v_min",
                          VX_LOSS_MAX_ATOMS);
    return vx_adam_cfg_check(&cfg->adam, e);
}

vx_status vx_dqn_layout(const vx_dqn_cfg *cfg, const vx_qnet_cfg *net, vx_qnet_layout *L,
                        vx_loss_shape *shape, vx_err *e)
{
    vx_status st = vx_dqn_cfg_check(cfg, e);
    if (st) return st;
    vx_qnet_cfg q = *net;
    q.atoms = cfg->loss == VX_LOSS_C51 ? cfg->atoms : 1;
    if (q.n_branches > VX_LOSS_MAX_BRANCHES)
        return vx_err_set(e, VX_ERR_ARG, "dqn: at most %d branches", VX_LOSS_MAX_BRANCHES);
    st = vx_qnet_layout_make(&q, L, e);
    if (st) return st;
    memset(shape, 0, sizeof *shape);
    shape->n_branches = q.n_branches;
    for (int k = 0; k < q.n_branches; k++)
        shape->branch[k] = q.branch[k], shape->offset[k] = L->out_offset[k];
    shape->atoms = q.atoms;
    shape->v_min = (float)cfg->v_min;
    shape->v_max = (float)cfg->v_max;
    return VX_OK;
}

vx_status vx_dqn_create(const vx_dqn_cfg *cfg, const vx_qnet_cfg *qcfg, uint64_t seed, vx_dqn *d,
                        vx_err *e)
{
    memset(d, 0, sizeof *d);
    vx_status st = vx_dqn_layout(cfg, qcfg, &d->L, &d->shape, e);
    if (st) return st;
    d->cfg = *cfg;
    size_t np = d->L.n_params, B = (size_t)cfg->batch;
    d->online = calloc(np, sizeof(float)); /* zero padding between tensors (nn.h) */
    d->target = calloc(np, sizeof(float));
    d->grads = calloc(np, sizeof(float));
    d->dq = malloc(B * (size_t)d->L.out_dim * sizeof(float));
    d->priority = malloc(B * sizeof(float));
    if (!d->online || !d->target || !d->grads || !d->dq || !d->priority) {
        vx_dqn_free(d);
        return vx_err_set(e, VX_ERR_NOMEM, "dqn: out of memory");
    }
    st = vx_adam_create(&cfg->adam, np, &d->adam, e);
    if (!st) st = vx_qnet_ws_create(&d->L, cfg->batch, &d->ws_s, e);
    if (!st) st = vx_qnet_ws_create(&d->L, cfg->batch, &d->ws_next, e);
    if (!st) st = vx_qnet_ws_create(&d->L, cfg->batch, &d->ws_target, e);
    if (st) {
        vx_dqn_free(d);
        return st;
    }
    vx_qnet_init(&d->L, seed, d->online);
    vx_dqn_sync_target(d);
    return VX_OK;
}

void vx_dqn_sync_target(vx_dqn *d) { memcpy(d->target, d->online, d->L.n_params * sizeof(float)); }

void vx_dqn_update(vx_dqn *d, const vx_replay_batch *b, int B, vx_dqn_update_stats *st)
{
    const vx_qnet_layout *L = &d->L;
    int O = L->out_dim;
    vx_qnet_forward_ref(L, d->online, b->obs, B, &d->ws_s);
    vx_qnet_forward_ref(L, d->online, b->next_obs, B, &d->ws_next);
    vx_qnet_forward_ref(L, d->target, b->next_obs, B, &d->ws_target);
    double loss = 0, pr = 0, qsum = 0, qmax = -INFINITY;
    float scale = 1.0f / (float)B;
    for (int i = 0; i < B; i++) {
        const float *qs = d->ws_s.q + (size_t)i * O;
        int m = b->steps ? b->steps[i] : 1;
        float gm = (float)pow(d->cfg.gamma, m);
        float *dq = d->dq + (size_t)i * O;
        if (d->cfg.loss == VX_LOSS_C51)
            loss += vx_loss_c51(&d->shape, gm, qs, d->ws_next.q + (size_t)i * O,
                                d->ws_target.q + (size_t)i * O,
                                b->actions + (size_t)i * VX_ACTION_BRANCHES, b->rewards[i],
                                b->terminated[i], b->weights[i], scale, dq, O, &d->priority[i]);
        else
            loss += vx_loss_dqn(&d->shape, d->cfg.loss, (float)d->cfg.huber_kappa, gm, qs,
                                d->ws_next.q + (size_t)i * O, d->ws_target.q + (size_t)i * O,
                                b->actions + (size_t)i * VX_ACTION_BRANCHES, b->rewards[i],
                                b->terminated[i], b->weights[i], scale, dq, O, &d->priority[i]);
        pr += d->priority[i];
        for (int k = 0; k < d->shape.n_branches; k++) {
            float q = vx_loss_q(&d->shape, qs, k, b->actions[(size_t)i * VX_ACTION_BRANCHES + k]);
            qsum += q;
            qmax = q > qmax ? q : qmax;
        }
    }
    vx_qnet_backward_ref(L, d->online, b->obs, B, d->dq, &d->ws_s, d->grads);
    double norm = vx_grad_clip(d->grads, L->n_params, d->cfg.grad_clip);
    vx_adam_step(&d->adam, d->online, d->grads);
    d->updates++;
    if (d->cfg.tau > 0) {
        float t = (float)d->cfg.tau;
        for (size_t i = 0; i < L->n_params; i++)
            d->target[i] = vx_polyak_elem(d->target[i], d->online[i], t);
    } else if (d->updates % d->cfg.target_every == 0) {
        vx_dqn_sync_target(d);
    }
    if (st) {
        st->loss = loss / B;
        st->grad_norm = norm;
        st->priority_mean = pr / B;
        st->q_mean = qsum / ((double)B * d->shape.n_branches);
        st->q_max = qmax;
    }
}

void vx_dqn_act(vx_dqn *d, const float *params, vx_qnet_ws *ws, const float *obs, int N, double eps,
                uint64_t seed, uint64_t step, int32_t *actions, double *q_mean_out)
{
    const vx_qnet_layout *L = &d->L;
    int D = L->cfg.in_dim, O = L->out_dim, K = d->shape.n_branches;
    double qs = 0;
    for (int start = 0; start < N; start += ws->max_batch) {
        int n = N - start < ws->max_batch ? N - start : ws->max_batch;
        vx_qnet_forward_ref(L, params ? params : d->online, obs + (size_t)start * D, n, ws);
        for (int r = 0; r < n; r++) {
            int i = start + r;
            vx_act_egreedy(&d->shape, ws->q + (size_t)r * O, seed, (uint64_t)i, step, eps,
                           actions + (size_t)i * VX_ACTION_BRANCHES, &qs);
        }
    }
    if (q_mean_out) *q_mean_out = N ? qs / ((double)N * K) : 0;
}

/* ---- n-step ------------------------------------------------------------------------------- */

vx_status vx_nstep_create(int n, int N, int D, double gamma, vx_nstep *s, vx_err *e)
{
    memset(s, 0, sizeof *s);
    s->n = n, s->N = N, s->D = D, s->gamma = gamma;
    s->count = calloc((size_t)N, sizeof(int));
    s->head = calloc((size_t)N, sizeof(int));
    s->obs = malloc((size_t)N * n * D * sizeof(float));
    s->act = malloc((size_t)N * n * VX_ACTION_BRANCHES * sizeof(int32_t));
    s->rew = malloc((size_t)N * n * sizeof(float));
    if (!s->count || !s->head || !s->obs || !s->act || !s->rew) {
        vx_nstep_free(s);
        return vx_err_set(e, VX_ERR_NOMEM, "n-step: out of memory");
    }
    return VX_OK;
}

void vx_nstep_free(vx_nstep *s)
{
    free(s->count), free(s->head), free(s->obs), free(s->act), free(s->rew);
    memset(s, 0, sizeof *s);
}

vx_status vx_tbuf_reserve(vx_transition_buf *t, size_t cap, int D, vx_err *e)
{
    if (cap <= t->cap) return VX_OK;
    vx_tbuf_free(t);
    t->obs = malloc(cap * D * sizeof(float));
    t->next_obs = malloc(cap * D * sizeof(float));
    t->rewards = malloc(cap * sizeof(float));
    t->actions = malloc(cap * VX_ACTION_BRANCHES * sizeof(int32_t));
    t->terminated = malloc(cap), t->truncated = malloc(cap), t->steps = malloc(cap);
    if (!t->obs || !t->next_obs || !t->rewards || !t->actions || !t->terminated || !t->truncated ||
        !t->steps) {
        vx_tbuf_free(t);
        return vx_err_set(e, VX_ERR_NOMEM, "transition buffer: out of memory");
    }
    t->cap = cap;
    t->n = 0;
    return VX_OK;
}

void vx_tbuf_free(vx_transition_buf *t)
{
    free(t->obs), free(t->next_obs), free(t->rewards), free(t->actions);
    free(t->terminated), free(t->truncated), free(t->steps);
    memset(t, 0, sizeof *t);
}

vx_transitions vx_tbuf_view(const vx_transition_buf *t)
{
    vx_transitions v = {t->obs,        t->next_obs,  t->actions, t->rewards,
                        t->terminated, t->truncated, t->steps};
    return v;
}

void vx_nstep_push(vx_nstep *s, const float *obs, const int32_t *actions, const float *rewards,
                   const uint8_t *terminated, const uint8_t *truncated, const float *next_obs,
                   vx_transition_buf *out)
{
    int n = s->n, D = s->D;
    for (int i = 0; i < s->N; i++) {
        size_t slot = (size_t)i * n, o = out->n;
        vx_nstep_ring ring = {s->count + i, s->head + i, s->obs + slot * D,
                              s->act + slot * VX_ACTION_BRANCHES, s->rew + slot};
        vx_nstep_out dst = {
            out->obs + o * D, out->next_obs + o * D, out->actions + o * VX_ACTION_BRANCHES,
            out->rewards + o, out->terminated + o,   out->truncated + o,
            out->steps + o};
        out->n += (size_t)vx_nstep_push_one(
            ring, n, D, s->gamma, obs + (size_t)i * D, actions + (size_t)i * VX_ACTION_BRANCHES,
            rewards[i], terminated[i], truncated[i], next_obs + (size_t)i * D, dst);
    }
}

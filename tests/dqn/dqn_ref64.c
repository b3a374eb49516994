/* dqn_ref64.c — one learner update in float64, written out from the definitions (dqn_ref64.h),
 * and the fixed case the learner tests feed it. */
#include "helpers.h"
#include "dqn_ref64.h"
#include "vixen/philox.h"
#include "../nn/qnet_f64.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ref64_case(int multi_step_clip, vx_dqn_cfg *c, vx_qnet_cfg *q, ref64_batch *b)
{
    vx_dqn_cfg_default(c);
    c->loss = VX_LOSS_HUBER;
    c->gamma = 0.9;
    c->huber_kappa = 0.5; /* the batch's |δ| fall on both sides of it */
    c->batch = REF64_B;
    c->n_step = multi_step_clip ? 3 : 1;
    c->target_every = 2; /* the first update leaves the target alone, the second copies */
    c->tau = 0;
    /* the norms before clipping are about 0.41 and 0.36: 0.15 scales both updates' gradients
     * by 0.37 and 0.42 */
    c->grad_clip = multi_step_clip ? 0.15 : 0;
    c->adam.lr = 0.01;
    /* β2 = 1 − 2⁻¹⁰, exact in float (0.999 is not: the float's 1 − β2 is 1.3e-5 off 0.001, which
     * the second moment's check would see) */
    c->adam.beta2 = 0.9990234375;
    /* ε near the clipped gradients' elements, so that Adam's step depends on their size and not
     * only on their sign (with ε = 1e-8 the first step is lr · sign(g), whatever the clip did) */
    c->adam.eps = 1e-3;
    c->adam.weight_decay = 0.05;

    vx_qnet_cfg_default(q);
    q->in_dim = REF64_D;
    q->n_trunk = 2;
    q->trunk[0] = q->trunk[1] = 8;
    q->head_hidden = 4;

    memset(b, 0, sizeof *b);
    vx_rng g = vx_rng_make(21, 0, 0);
    for (int i = 0; i < REF64_B * REF64_D; i++)
        b->obs[i] = (float)vx_rng_normal(&g), b->next_obs[i] = (float)vx_rng_normal(&g);
    /* rows: live m = 1, live m = 3, truncated m = 1, truncated m = 3, terminated m = 1,
     * terminated m = 3 (the second case: every m = 1) */
    static const float rew[REF64_B] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f};
    static const float w[REF64_B] = {1.0f, 0.45f, 0.8f, 0.3f, 0.65f, 0.9f};
    static const int32_t act[REF64_B * 3] = {3, 0, 2, 8, 1, 0, 0, 2, 1, 5, 1, 2, 2, 0, 0, 7, 2, 1};
    static const uint8_t te[REF64_B] = {0, 0, 0, 0, 1, 1}, tu[REF64_B] = {0, 0, 1, 1, 0, 0};
    for (int i = 0; i < REF64_B; i++) {
        b->rewards[i] = rew[i];
        b->weights[i] = w[i];
        b->terminated[i] = te[i];
        b->truncated[i] = tu[i];
        b->steps[i] = (uint8_t)(multi_step_clip && i % 2 ? 3 : 1);
        b->index[i] = (uint32_t)i;
        for (int k = 0; k < VX_ACTION_BRANCHES; k++)
            b->actions[i * VX_ACTION_BRANCHES + k] = act[i * 3 + k];
    }
}

vx_replay_batch ref64_view(ref64_batch *b)
{
    vx_replay_batch v = {b->obs,       b->next_obs, b->actions, b->rewards, b->terminated,
                         b->truncated, b->steps,    b->weights, b->index,   b->gen};
    return v;
}

void ref64_target(const vx_qnet_layout *L, float *target) { vx_qnet_init(L, 1234, target); }

int ref64_init(ref64 *r, const vx_qnet_layout *L, const vx_dqn_cfg *c, const float *online,
               const float *target)
{
    memset(r, 0, sizeof *r);
    r->L = L;
    r->cfg = *c;
    size_t n = L->n_params;
    r->online = calloc(n, sizeof(double));
    r->target = calloc(n, sizeof(double));
    r->m = calloc(n, sizeof(double));
    r->v = calloc(n, sizeof(double));
    r->grads = calloc(n, sizeof(double));
    if (!r->online || !r->target || !r->m || !r->v || !r->grads) {
        ref64_free(r);
        return -1;
    }
    for (size_t i = 0; i < n; i++) r->online[i] = online[i], r->target[i] = target[i];
    return 0;
}

void ref64_free(ref64 *r)
{
    free(r->online), free(r->target), free(r->m), free(r->v), free(r->grads);
    memset(r, 0, sizeof *r);
}

/* The smallest |input| of any ReLU over B rows of x (the trunk's layers, the value and advantage
 * hidden layers), written out from the layout: a float pass and a float64 pass agree on which
 * units are on when no input is near 0. */
static double relu_gap(const vx_qnet_layout *L, const double *p, const double *x, int B)
{
    const vx_qnet_cfg *c = &L->cfg;
    int W = c->in_dim > c->head_hidden ? c->in_dim : c->head_hidden;
    for (int l = 0; l < c->n_trunk; l++) W = c->trunk[l] > W ? c->trunk[l] : W;
    double *h = malloc(sizeof(double) * 2 * (size_t)W), *z = h + W, gap = INFINITY;
    for (int r = 0; r < B; r++) {
        int n = c->in_dim;
        for (int i = 0; i < n; i++) h[i] = x[(size_t)r * n + i];
        const vx_dense *layers[VX_QNET_MAX_TRUNK + 1 + VX_QNET_MAX_BRANCHES];
        int nl = 0;
        for (int l = 0; l < c->n_trunk; l++) layers[nl++] = &L->trunk[l];
        layers[nl++] = &L->value1;
        for (int d = 0; d < c->n_branches; d++) layers[nl++] = &L->adv1[d];
        for (int l = 0; l < nl; l++) {
            const vx_dense *dl = layers[l];
            for (int j = 0; j < dl->out; j++) {
                z[j] = p[dl->b + j];
                for (int i = 0; i < dl->in; i++) z[j] += h[i] * p[dl->w + (size_t)i * dl->out + j];
                gap = fabs(z[j]) < gap ? fabs(z[j]) : gap;
            }
            if (l < c->n_trunk) /* the next layer's input: this one after ReLU */
                for (int j = 0; j < dl->out; j++) h[j] = z[j] > 0 ? z[j] : 0;
        }
    }
    free(h);
    return gap;
}

void ref64_update(ref64 *r, const vx_replay_batch *b, int B, ref64_out *out)
{
    const vx_qnet_layout *L = r->L;
    const vx_dqn_cfg *c = &r->cfg;
    int O = L->out_dim, K = L->cfg.n_branches, D = L->cfg.in_dim;
    size_t np = L->n_params;
    double *x = malloc(sizeof(double) * (size_t)B * D * 2), *nx = x + (size_t)B * D;
    double *qs = malloc(sizeof(double) * (size_t)B * O * 3), *qn = qs + (size_t)B * O,
           *qt = qn + (size_t)B * O;
    double *dq = calloc((size_t)B * O, sizeof(double));
    for (int i = 0; i < B * D; i++) x[i] = b->obs[i], nx[i] = b->next_obs[i];
    qnet64_run_forward(L, r->online, x, B, qs);
    qnet64_run_forward(L, r->online, nx, B, qn);
    qnet64_run_forward(L, r->target, nx, B, qt);

    memset(out, 0, sizeof *out);
    out->argmax_gap = INFINITY;
    out->relu_gap = relu_gap(L, r->online, x, B);
    double g2 = relu_gap(L, r->online, nx, B), g3 = relu_gap(L, r->target, nx, B);
    out->relu_gap = g2 < out->relu_gap ? g2 : out->relu_gap;
    out->relu_gap = g3 < out->relu_gap ? g3 : out->relu_gap;
    double kappa = c->huber_kappa;
    for (int i = 0; i < B; i++) {
        const double *s = qs + (size_t)i * O, *on = qn + (size_t)i * O, *tg = qt + (size_t)i * O;
        /* the bootstrap: each branch's argmax by the online network, valued by the target
         * network, averaged over the branches; and, for the check only, by the target's argmax */
        double boot = 0, boot_target_argmax = 0;
        for (int k = 0; k < K; k++) {
            int off = L->out_offset[k], n = L->cfg.branch[k], best = 0, tbest = 0;
            for (int a = 1; a < n; a++) {
                if (on[off + a] > on[off + best]) best = a;
                if (tg[off + a] > tg[off + tbest]) tbest = a;
            }
            double second = -INFINITY;
            for (int a = 0; a < n; a++)
                if (a != best && on[off + a] > second) second = on[off + a];
            if (!b->terminated[i] && on[off + best] - second < out->argmax_gap)
                out->argmax_gap = on[off + best] - second;
            boot += tg[off + best] / K;
            boot_target_argmax += tg[off + tbest] / K;
        }
        int m = b->steps ? b->steps[i] : 1;
        double gm = 1;
        for (int j = 0; j < m; j++) gm *= c->gamma;
        /* truncation bootstraps; only termination stops it */
        double y = b->rewards[i] + (b->terminated[i] ? 0.0 : gm * boot);
        if (!b->terminated[i]) {
            double gap = fabs(gm * (boot - boot_target_argmax));
            if (gap > out->double_dqn_gap) out->double_dqn_gap = gap;
        }
        double loss = 0, pr = 0, w = b->weights[i];
        for (int k = 0; k < K; k++) {
            int j = L->out_offset[k] + b->actions[i * VX_ACTION_BRANCHES + k];
            double delta = s[j] - y, l, g;
            if (c->loss == VX_LOSS_HUBER && fabs(delta) > kappa) {
                l = kappa * (fabs(delta) - 0.5 * kappa);
                g = delta > 0 ? kappa : -kappa;
                out->beyond_kappa++;
            } else {
                l = 0.5 * delta * delta;
                g = delta;
                out->within_kappa += c->loss == VX_LOSS_HUBER;
            }
            loss += l;
            pr += fabs(delta);
            dq[(size_t)i * O + j] = w * g / K / B; /* d(mean_i w_i (1/K) Σ_k ℓ_ik) / dQ */
        }
        out->loss += w * loss / K / B;
        out->priority[i] = pr / K;
    }

    /* the backward pass (the trunk's 1/(K+1) included), the global norm and the clip */
    memset(r->grads, 0, np * sizeof(double));
    qnet64_run_backward(L, r->online, x, B, dq, r->grads);
    double ss = 0;
    for (size_t i = 0; i < np; i++) ss += r->grads[i] * r->grads[i];
    out->grad_norm = sqrt(ss);
    out->clip_scale =
        c->grad_clip > 0 && out->grad_norm > c->grad_clip ? c->grad_clip / out->grad_norm : 1;
    for (size_t i = 0; i < np; i++) r->grads[i] *= out->clip_scale;

    /* Adam, bias-corrected at this step's t, with decoupled weight decay */
    r->t++;
    const vx_adam_cfg *a = &c->adam;
    double c1 = 1 / (1 - pow(a->beta1, (double)r->t)), c2 = 1 / (1 - pow(a->beta2, (double)r->t));
    for (size_t i = 0; i < np; i++) {
        double g = r->grads[i];
        r->m[i] = a->beta1 * r->m[i] + (1 - a->beta1) * g;
        r->v[i] = a->beta2 * r->v[i] + (1 - a->beta2) * g * g;
        r->online[i] -=
            a->lr * (r->m[i] * c1 / (sqrt(r->v[i] * c2) + a->eps) + a->weight_decay * r->online[i]);
    }

    /* the target network: a hard copy every target_every updates */
    r->updates++;
    if (r->updates % c->target_every == 0) memcpy(r->target, r->online, np * sizeof(double));
    free(x), free(qs), free(dq);
}

/* The largest |a − b| / (|b| + floor) over n pairs. */
static double max_rel(const float *a, const double *b, size_t n, double floor_)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (fabs(b[i]) + floor_);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* The largest |a − b| over n pairs, relative to the largest |b|. */
static double max_rel_to_max(const float *a, const double *b, size_t n)
{
    double mx = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fabs(b[i]) > mx ? fabs(b[i]) : mx;
        worst = fabs((double)a[i] - b[i]) > worst ? fabs((double)a[i] - b[i]) : worst;
    }
    return worst / mx;
}

void ref64_check(const char *who, const ref64 *r, const ref64_out *o, const ref64_seen *s, int B,
                 double tol, double wtol)
{
    const vx_dqn_cfg *c = &r->cfg;
    size_t np = r->L->n_params;
    double e_loss = fabs(s->loss - o->loss) / fabs(o->loss);
    double e_norm = fabs(s->grad_norm - o->grad_norm) / o->grad_norm;
    double e_pr = max_rel(s->priority, o->priority, (size_t)B, 1e-2);
    double e_m = max_rel_to_max(s->adam_m, r->m, np), e_v = max_rel_to_max(s->adam_v, r->v, np);
    double e_w = 0, w_abs = 0;
    for (size_t i = 0; i < np; i++) {
        double err = fabs((double)s->online[i] - r->online[i]);
        double rel = err / (wtol + tol * fabs(r->online[i]));
        e_w = rel > e_w ? rel : e_w;
        w_abs = err > w_abs ? err : w_abs;
    }
    printf("%s update %lld: loss %.9g (float64 %.9g, %.1e), grad norm %.9g (%.9g, %.1e), clip "
           "scale %.4f, priorities %.1e, moments %.1e %.1e, weights %.1e (%.2f of the "
           "tolerance); argmax lead %.3f, ReLU input %.1e, %d |δ| beyond κ and %d within, "
           "target-argmax gap %.3f\n",
           who, r->updates, s->loss, o->loss, e_loss, s->grad_norm, o->grad_norm, e_norm,
           o->clip_scale, e_pr, e_m, e_v, w_abs, e_w, o->argmax_gap, o->relu_gap, o->beyond_kappa,
           o->within_kappa, o->double_dqn_gap);

    /* The case must exercise what the assertions below are meant to catch, else they prove
     * nothing: every online argmax leads its runner-up by far more than float rounding (so both
     * sides bootstrap from the same actions); |δ| on both sides of κ; a target-network argmax
     * would move some live target; the clip scales the gradient (or is off). */
    assert_true(o->argmax_gap > 1e-3);
    assert_true(o->relu_gap > 1e-4);
    assert_true(o->beyond_kappa >= 1 && o->within_kappa >= 1);
    assert_true(o->double_dqn_gap > 0.05);
    if (c->grad_clip > 0) {
        assert_true(o->grad_norm > c->grad_clip); /* the clip triggers */
        assert_true(o->clip_scale < 0.5);
    } else {
        assert_true(o->clip_scale == 1);
    }

    /* Priorities, (1/K) Σ_k |δ_k| per row, see only the target: they catch γ forced to 0, γ for
     * γ^m (the rows with m = 3), the argmax taken from the target network (or the value read off
     * the online one), a terminated row that bootstraps, a truncated row that does not. */
    for (int i = 0; i < B; i++)
        assert_true(fabs(s->priority[i] - o->priority[i]) <= tol * (fabs(o->priority[i]) + 1e-2));
    /* The loss adds the IS weights and Huber's value beyond κ: it catches IS weights ignored
     * (priorities do not see them) and ½δ² used beyond κ. */
    assert_true(e_loss <= tol);
    /* The norm before the clip: catches a wrong dLoss/dQ scale (1/B or 1/K dropped: with the
     * clip on, the clipped step hides it), a wrong backward pass, a norm reported after the
     * clip. */
    assert_true(e_norm <= tol);
    /* Adam's moments hold the gradient it was given: the first after update 1 is (1 − β1)·g with
     * g clipped, so a skipped clip fails here (first case), and so does a clip applied although
     * it is off (second case); the weights below fail too. */
    assert_true(e_m <= tol && e_v <= tol);
    /* Every weight: the whole chain (every wrong program above that changes the gradient fails
     * here too), and Adam's own step: bias correction removed fails at update 1, bias correction
     * stuck at t = 1 at update 2; ε and the decoupled decay. */
    assert_int_equal(s->adam_t, r->t);
    assert_true(e_w <= 1);
    /* The target network: untouched after update 1 (target_every = 2), a copy of the online
     * weights after update 2. A sync every update, or none, fails one of these. */
    if (r->updates % c->target_every == 0) {
        assert_memory_equal(s->target, s->online, np * sizeof(float));
    } else {
        for (size_t i = 0; i < np; i++) assert_true((double)s->target[i] == r->target[i]);
    }
}

/* group.c — fused trials (train.h): K runs, each on a thread of its own, whose algorithm
 * instances are made and stepped as one group.
 *
 * One mutex guards the group; the algorithm's group calls run under it, so no member's instance
 * is ever used by two threads at once. Members meet twice:
 *   - joining: each run gives its init and waits; when every member has joined or left, the
 *     thread that sees it makes all the instances (create_group) on the group's device share;
 *   - each epoch: each run gives its epoch_in and waits; when every member still in the group
 *     has asked, the thread of the last to ask runs epoch_group and wakes the others.
 * Between two epochs a member validates, logs and decides to stop on its own thread, and its
 * instance is not touched by anyone else then: an epoch runs only once all members have asked.
 * Leaving frees the member's instance (under the mutex) and may complete a meeting the others
 * are waiting at. */
#include "group.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A member's state: RETIRED has its instance still (its run is finishing) but takes no more
 * epochs. */
enum { ABSENT, JOINED, RETIRED, LEFT };

struct vx_train_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int K;
    vx_device *parent; /* what the share is taken from (NULL: the CPU's context) */
    vx_device *dev;    /* the share the instances live on, until every member has left */
    size_t budget;     /* 0: the sum of what the members' own devices had left when they joined */
    size_t peak;
    size_t *avail; /* each joined member's: what its device had left (0: no device) */
    int *reached;  /* the group's failure was returned to this member's run */
    char label[64];
    const vx_algo_ops *ops;
    int *state;
    vx_algo_init *init; /* each joined member's, its run parameters copied into run[] */
    vx_run_params *run;
    vx_algo **algo; /* each member's instance: NULL before creation and after leaving */
    int decided;    /* members joined or left before the instances were made */
    int created, gone;
    vx_status create_st;
    /* epochs */
    int active;  /* members with an instance */
    int arrived; /* … of them waiting for this epoch */
    int *waiting;
    vx_algo **scratch;
    vx_epoch_in *in;
    vx_epoch_out *out;
    long long round; /* epochs run so far: a waiter's epoch is done when it moves */
    vx_status epoch_st;
    int failed;
    vx_err why;
};

vx_status vx_train_group_create(int K, vx_device *dev, size_t budget, const char *label,
                                vx_train_group **out, vx_err *e)
{
    *out = NULL;
    if (K < 1) return vx_err_set(e, VX_ERR_ARG, "train: a group of %d runs", K);
    vx_train_group *g = calloc(1, sizeof *g);
    if (!g) return vx_err_set(e, VX_ERR_NOMEM, "train: out of memory");
    size_t k = (size_t)K;
    g->state = calloc(k, sizeof *g->state);
    g->waiting = calloc(k, sizeof *g->waiting);
    g->init = calloc(k, sizeof *g->init);
    g->run = calloc(k, sizeof *g->run);
    g->algo = calloc(k, sizeof *g->algo);
    g->scratch = calloc(k, sizeof *g->scratch);
    g->in = calloc(k, sizeof *g->in);
    g->out = calloc(k, sizeof *g->out);
    g->avail = calloc(k, sizeof *g->avail);
    g->reached = calloc(k, sizeof *g->reached);
    if (!g->state || !g->waiting || !g->init || !g->run || !g->algo || !g->scratch || !g->in ||
        !g->out || !g->avail || !g->reached) {
        vx_train_group_free(g);
        return vx_err_set(e, VX_ERR_NOMEM, "train: out of memory");
    }
    g->K = K;
    g->parent = dev;
    g->budget = budget;
    snprintf(g->label, sizeof g->label, "%s", label ? label : "group");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    *out = g;
    return VX_OK;
}

void vx_train_group_free(vx_train_group *g)
{
    if (!g) return;
    if (g->state) { /* made: the mutex too */
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
    }
    free(g->state);
    free(g->waiting);
    free(g->init);
    free(g->run);
    free(g->algo);
    free(g->scratch);
    free(g->in);
    free(g->out);
    free(g->avail);
    free(g->reached);
    free(g);
}

static void fail(vx_train_group *g, vx_status st, const vx_err *why)
{
    if (g->failed) return; /* the first reason is the one to tell */
    g->failed = 1;
    g->why = *why;
    g->why.status = st;
}

/* Every member has joined or left: the instances of those that joined, made together. mu held. */
static void make_instances(vx_train_group *g)
{
    int n = 0;
    for (int k = 0; k < g->K; k++) n += g->state[k] == JOINED;
    vx_algo_init *in = calloc((size_t)(n ? n : 1), sizeof *in);
    vx_algo **made = calloc((size_t)(n ? n : 1), sizeof *made);
    vx_err e;
    memset(&e, 0, sizeof e);
    vx_status st = in && made ? VX_OK : vx_err_set(&e, VX_ERR_NOMEM, "train: out of memory");
    /* the share: what the members would have had alone, together (their algorithms are the same
     * size, so no member gets room it would not have had alone) */
    size_t budget = g->budget, pooled = 0;
    for (int k = 0; k < g->K; k++) pooled += g->state[k] == JOINED ? g->avail[k] : 0;
    if (!budget) budget = pooled;
    if (!st && n && (g->parent || budget))
        st = vx_device_share(g->parent, budget, g->label, &g->dev, &e);
    for (int k = 0, i = 0; !st && k < g->K; k++) {
        if (g->state[k] != JOINED) continue;
        in[i] = g->init[k];
        in[i].dev = g->dev;
        /* what it would plan for alone (a GPU may size its batch by it) */
        in[i].mem_share = g->budget ? g->budget / (size_t)g->K : g->avail[k];
        i++;
    }
    if (!st && n) st = g->ops->create_group(in, n, made, &e);
    for (int k = 0, i = 0; !st && k < g->K; k++)
        if (g->state[k] == JOINED) g->algo[k] = made[i++];
    g->active = st ? 0 : n;
    if (st) fail(g, st, &e);
    g->create_st = st;
    g->created = 1;
    free(in);
    free(made);
    pthread_cond_broadcast(&g->cv);
}

/* The group's failure, returned to member k's run. */
static void tell(vx_train_group *g, int k, vx_status st, vx_err *e)
{
    g->reached[k] = 1;
    if (!e) return;
    *e = g->why;
    e->status = st;
}

vx_status vx_train_group_join(vx_train_group *g, int k, const vx_algo_ops *ops,
                              const vx_algo_init *in, vx_algo **out, vx_err *e)
{
    *out = NULL;
    if (k < 0 || k >= g->K) return vx_err_set(e, VX_ERR_ARG, "train: no member %d in the group", k);
    pthread_mutex_lock(&g->mu);
    vx_status st = VX_OK;
    if (g->state[k] != ABSENT)
        st = vx_err_set(e, VX_ERR_ARG, "train: member %d joins its group twice", k);
    else if (g->ops && g->ops != ops)
        st = vx_err_set(e, VX_ERR_ARG, "train: member %d trains %s in a group of %s", k, ops->name,
                        g->ops->name);
    else if (!ops->create_group || !ops->epoch_group)
        st = vx_err_set(e, VX_ERR_UNSUPPORTED, "train: %s trains no groups", ops->name);
    if (st) { /* it will not join: the others need not wait for it */
        if (g->state[k] == ABSENT) g->state[k] = LEFT, g->decided++, g->gone++;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return st;
    }
    g->ops = ops;
    g->avail[k] = in->dev ? vx_device_available(in->dev) : 0;
    g->run[k] = *in->run;
    g->init[k] = *in;
    g->init[k].run = &g->run[k];
    g->state[k] = JOINED;
    g->decided++;
    while (!g->created) {
        if (g->decided == g->K) make_instances(g);
        else pthread_cond_wait(&g->cv, &g->mu);
    }
    st = g->create_st;
    if (st) tell(g, k, st, e);
    else *out = g->algo[k];
    pthread_mutex_unlock(&g->mu);
    return st;
}

/* Every member still in the group has asked: their epoch, then the waiters woken. mu held. */
static void run_epoch(vx_train_group *g)
{
    for (int k = 0; k < g->K; k++) g->scratch[k] = g->waiting[k] ? g->algo[k] : NULL;
    vx_err e;
    memset(&e, 0, sizeof e);
    vx_status st = g->ops->epoch_group(g->scratch, g->K, g->in, g->out, &e);
    if (st) fail(g, st, &e);
    g->epoch_st = st;
    for (int k = 0; k < g->K; k++) g->waiting[k] = 0;
    g->arrived = 0;
    g->round++;
    pthread_cond_broadcast(&g->cv);
}

vx_status vx_train_group_epoch(vx_train_group *g, int k, const vx_epoch_in *in, vx_epoch_out *out,
                               vx_err *e)
{
    pthread_mutex_lock(&g->mu);
    if (g->state[k] != JOINED || !g->algo[k] || g->failed) {
        vx_status st = g->failed ? g->why.status : VX_ERR_ARG;
        if (g->failed) tell(g, k, st, e);
        else vx_err_set(e, st, "train: member %d is not in its group", k);
        pthread_mutex_unlock(&g->mu);
        return st;
    }
    g->in[k] = *in;
    g->out[k] = *out;
    g->waiting[k] = 1;
    g->arrived++;
    long long round = g->round;
    while (g->round == round) {
        if (g->arrived == g->active) run_epoch(g);
        else pthread_cond_wait(&g->cv, &g->mu);
    }
    vx_status st = g->epoch_st;
    if (st) tell(g, k, st, e);
    else *out = g->out[k];
    pthread_mutex_unlock(&g->mu);
    return st;
}

/* Member k takes no more epochs; a meeting may be complete without it. mu held. */
static void retire(vx_train_group *g, int k)
{
    if (g->state[k] != JOINED) return;
    g->state[k] = RETIRED;
    if (g->algo[k]) g->active--;
    pthread_cond_broadcast(&g->cv);
}

void vx_train_group_retire(vx_train_group *g, int k)
{
    if (!g || k < 0 || k >= g->K) return;
    pthread_mutex_lock(&g->mu);
    retire(g, k);
    pthread_mutex_unlock(&g->mu);
}

void vx_train_group_leave(vx_train_group *g, int k)
{
    if (!g || k < 0 || k >= g->K) return;
    pthread_mutex_lock(&g->mu);
    if (g->state[k] != LEFT) {
        if (g->state[k] == ABSENT) g->decided++;
        retire(g, k);
        if (g->algo[k]) {
            g->ops->free(g->algo[k]);
            g->algo[k] = NULL;
        }
        g->state[k] = LEFT;
        if (++g->gone == g->K && g->dev) { /* the last: the share goes, its peak kept */
            vx_device_mem m;
            vx_device_memory(g->dev, &m);
            g->peak = m.peak;
            vx_device_close(g->dev);
            g->dev = NULL;
        }
        /* a meeting may be complete without it: whoever waits there looks again */
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
}

int vx_train_group_failed(const vx_train_group *g, int k, vx_err *why)
{
    pthread_mutex_lock((pthread_mutex_t *)&g->mu);
    int f = k < 0 ? g->failed : k < g->K && g->reached[k];
    if (f && why) *why = g->why;
    pthread_mutex_unlock((pthread_mutex_t *)&g->mu);
    return f;
}

size_t vx_train_group_peak(const vx_train_group *g) { return g->peak / (size_t)g->K; }

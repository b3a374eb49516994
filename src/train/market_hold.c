/* market_hold.c — markets held open for every run of the process that names them.
 *
 * A study's trials train on one market, and each opened it again: synthesized it (about 0.15 s
 * for the default market, 0.2 s for each of twenty at once) or read its features from the cache,
 * each with its own copy in memory (15 MB of features for the default market). A market held here
 * (vx_train_market_hold, by the search for its base config) is lent instead to every run whose
 * settings name the same market (the same files, instrument, cache folder and inflation limit, or
 * the same synthetic parameters): vx_train_open_market gives it a view — the same read-only bars
 * and features, owning nothing, so that closing the view frees nothing. A trial whose searched
 * keys change the market opens its own, as before. The data are the same either way (the market
 * is a function of those settings), so results do not change. */
#include "vixen/train.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vx_market_hold {
    char *key;
    vx_market m;
    int holders;
    struct vx_market_hold *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static vx_market_hold *g_held;

/* The settings a market is made from, as one string; NULL when out of memory. */
static char *market_key(const vx_train_cfg *c)
{
    size_t cap = 1024 + (size_t)c->n_files * sizeof c->files[0];
    char *k = malloc(cap);
    if (!k) return NULL;
    size_t n = (size_t)snprintf(k, cap, "files %d|%s|%s|%llu|synth %d %llu %a %a %a", c->n_files,
                                c->instrument, c->cache_dir, (unsigned long long)c->max_inflate,
                                c->synth_days, (unsigned long long)c->synth_seed, c->synth_strength,
                                c->synth_drift, c->synth_phi);
    for (int i = 0; i < c->n_files && n < cap; i++)
        n += (size_t)snprintf(k + n, cap - n, "|%s", c->files[i]);
    return k;
}

/* A view of m: its public fields, none of its ownership. */
static void lend(const vx_market *m, vx_market *out)
{
    *out = *m;
    out->signal_ = NULL;
    out->map_ = NULL;
    out->map_len_ = 0;
    memset(&out->series_, 0, sizeof out->series_);
    memset(&out->features_, 0, sizeof out->features_);
}

/* A held market of that key (the caller holds g_lock), or NULL. */
static vx_market_hold *find(const char *key)
{
    for (vx_market_hold *h = g_held; h; h = h->next)
        if (strcmp(h->key, key) == 0) return h;
    return NULL;
}

vx_status vx_train_market_hold(const vx_train_cfg *c, vx_market_hold **out, vx_err *e)
{
    *out = NULL;
    char *key = market_key(c);
    if (!key) return vx_err_set(e, VX_ERR_NOMEM, "train: out of memory");
    pthread_mutex_lock(&g_lock);
    vx_market_hold *h = find(key);
    if (h) h->holders++;
    pthread_mutex_unlock(&g_lock);
    if (h) {
        free(key);
        *out = h;
        return VX_OK;
    }
    h = calloc(1, sizeof *h);
    if (!h) {
        free(key);
        return vx_err_set(e, VX_ERR_NOMEM, "train: out of memory");
    }
    vx_status st = vx_train_open_market_own(c, &h->m, e);
    if (st) {
        free(key), free(h);
        return st;
    }
    h->key = key;
    h->holders = 1;
    pthread_mutex_lock(&g_lock);
    h->next = g_held;
    g_held = h;
    pthread_mutex_unlock(&g_lock);
    *out = h;
    return VX_OK;
}

void vx_train_market_release(vx_market_hold *h)
{
    if (!h) return;
    pthread_mutex_lock(&g_lock);
    int last = --h->holders == 0;
    if (last)
        for (vx_market_hold **p = &g_held; *p; p = &(*p)->next)
            if (*p == h) {
                *p = h->next;
                break;
            }
    pthread_mutex_unlock(&g_lock);
    if (!last) return;
    vx_market_close(&h->m);
    free(h->key);
    free(h);
}

vx_status vx_train_open_market(const vx_train_cfg *c, vx_market *m, vx_err *e)
{
    char *key = market_key(c);
    int lent = 0;
    if (key) {
        pthread_mutex_lock(&g_lock);
        vx_market_hold *h = find(key);
        if (h) lend(&h->m, m), lent = 1;
        pthread_mutex_unlock(&g_lock);
        free(key);
    }
    return lent ? VX_OK : vx_train_open_market_own(c, m, e);
}

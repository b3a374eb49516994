/* study_common.c — see study_common.h. */
#include "helpers.h"
#include "hyperopt/study_common.h"
#include "hyperopt/study_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *space_text = "dqn.lr: {type: logfloat, low: 1.0e-4, high: 3.0e-3}\n"
                         "dqn.gamma: {type: float, low: 0.9, high: 0.99}\n"
                         "dqn.n_step: {type: int, low: 1, high: 3}\n"
                         "dqn.loss: {type: categorical, values: [mse, huber]}\n";

void study_folder(char *root, size_t n_root, char *space, size_t n_space)
{
    th_tmpdir(root, n_root);
    snprintf(space, n_space, "%s/space.yaml", root);
    th_write_str(space, space_text);
}

vx_trial *trials_of(const char *dir, size_t *n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/study.db", dir);
    vx_store s;
    vx_err e;
    if (vx_store_open(&s, path, 1, &e)) fail_msg("%s", e.msg);
    vx_trial *t;
    if (vx_store_trials(&s, &t, n, &e)) fail_msg("%s", e.msg);
    vx_store_close(&s);
    return t;
}

int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

void assert_same_trials(const char *a, const char *b, int skip_trial)
{
    size_t na, nb;
    vx_trial *x = trials_of(a, &na), *y = trials_of(b, &nb);
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++) {
        if ((int)i == skip_trial) continue;
        if (strcmp(x[i].params, y[i].params) != 0 || x[i].status != y[i].status ||
            !same_bits(x[i].objective, y[i].objective) || x[i].train_seed != y[i].train_seed ||
            x[i].epochs != y[i].epochs || x[i].batch != y[i].batch)
            fail_msg("trial %zu differs: %s %s %.17g epochs %d batch %d | %s %s %.17g epochs %d "
                     "batch %d",
                     i, vx_trial_status_name(x[i].status), x[i].params, x[i].objective, x[i].epochs,
                     x[i].batch, vx_trial_status_name(y[i].status), y[i].params, y[i].objective,
                     y[i].epochs, y[i].batch);
    }
    free(x), free(y);
    if (skip_trial >= 0) return; /* the best may be the trial left out */
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/best.yaml", a);
    snprintf(pb, sizeof pb, "%s/best.yaml", b);
    size_t la, lb;
    uint8_t *ba = th_read(pa, &la), *bb = th_read(pb, &lb);
    /* the first line names the folder */
    const char *ra = memchr(ba, '\n', la), *rb = memchr(bb, '\n', lb);
    assert_non_null(ra);
    assert_non_null(rb);
    assert_int_equal(la - (size_t)(ra - (char *)ba), lb - (size_t)(rb - (char *)bb));
    assert_memory_equal(ra, rb, la - (size_t)(ra - (char *)ba));
    free(ba), free(bb);
}

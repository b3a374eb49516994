/* fuzz_checkpoint.c — libFuzzer target: a checkpoint file, as `vixen eval` and `--resume` read it.
 * The input goes through, in turn:
 *   - the safetensors reader (src/io/safetensors.c): header length, JSON, dtypes, shapes, offsets,
 *     metadata, checksum — and every tensor and number it accepted is then read back through the
 *     accessors, so a tensor that points outside the file is seen by AddressSanitizer;
 *   - the run's checkpoint open (src/train/checkpoint.c: format, algorithm, run identity,
 *     counters, the side files' checksums);
 *   - the DQN's restore of its weights (what evaluation does), then its policy acting once;
 *   - the full restore of the fixed small run of fuzz_common.h (weights, Adam moments, environment
 *     and n-step state, counters, and the replay file the seed checkpoint names, written at start
 *     in a private folder), then one training epoch from that state.
 * A checkpoint that is accepted must be one training can continue from. */
#include "fuzz_common.h"
#include "train/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static vx_fuzz_file g_in;
static int g_verbose; /* VX_FUZZ_VERBOSE=1: say why a checkpoint was refused (seed debugging) */

static void refused(const char *step, vx_status st, const vx_err *e)
{
    if (g_verbose && st) fprintf(stderr, "fuzz_checkpoint: %s: %s\n", step, e->msg);
}
static vx_fuzz_run g_run;
/* the seed run's checkpoint folder: its side files, and latest.safetensors, a link to the input */
static char g_fixture[512];

static void start(void)
{
    vx_err e;
    g_verbose = getenv("VX_FUZZ_VERBOSE") != NULL;
    vx_fuzz_file_open(&g_in, "checkpoint.safetensors");
    vx_fuzz_tempdir(g_fixture, sizeof g_fixture);
    char link[600];
    snprintf(link, sizeof link, "%s/%s", g_fixture, VX_CKPT_FILE);
    vx_err_clear(&e);
    if (vx_fuzz_run_open(&g_run, &e) != VX_OK ||
        vx_fuzz_run_checkpoint(&g_run, g_fixture, &e) != VX_OK || unlink(link) != 0 ||
        symlink(g_in.path, link) != 0) {
        fprintf(stderr, "fuzz_checkpoint: cannot set up: %s\n", e.msg);
        exit(1);
    }
}

static size_t dtype_size(vx_dtype d) { return d == VX_DT_U8 ? 1 : d == VX_DT_F32 ? 4 : 8; }

/* Reads every byte of every tensor, and every metadata value as text and as a number. */
static void touch(const vx_safetensors *s)
{
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < s->n; i++) {
        const vx_tensor *t = &s->tensors[i];
        size_t count = 1;
        for (int d = 0; d < t->ndim; d++) count *= (size_t)t->shape[d];
        const vx_tensor *g = vx_safetensors_get(s, t->name, t->dtype, count, NULL);
        const uint8_t *p = g ? g->data : NULL;
        for (size_t b = 0; p && b < count * dtype_size(t->dtype); b++) sink ^= p[b];
    }
    for (size_t i = 0; i < s->n_meta; i++) {
        int64_t v;
        const char *m = vx_safetensors_meta(s, s->meta[i].key);
        if (m) sink ^= (uint8_t)m[0];
        vx_safetensors_meta_int(s, s->meta[i].key, INT64_MIN, INT64_MAX, &v, NULL);
    }
    (void)sink;
}

static void open_as_run(void)
{
    vx_safetensors s;
    int epoch;
    int64_t steps;
    if (vx_ckpt_open(g_fixture, g_run.ops->name, VX_FUZZ_RUN_ID, &s, &epoch, &steps, NULL) == VX_OK)
        vx_safetensors_free(&s);
}

static void restore_weights(const vx_ckpt_view *ck)
{
    vx_algo *a = NULL;
    vx_policy pol;
    float obs[VX_OBS_DIM] = {0};
    int32_t act[VX_ACTION_BRANCHES];
    vx_err e;
    if (vx_fuzz_run_algo(&g_run, NULL, &a, NULL) != VX_OK) abort();
    vx_status st = g_run.ops->restore(a, ck, 1, &e);
    refused("weights", st, &e);
    if (!st && g_run.ops->policy(a, &pol, NULL) == VX_OK) pol.act(pol.ctx, obs, 1, act, NULL);
    g_run.ops->free(a);
}

static void restore_all(const vx_ckpt_view *ck)
{
    vx_env *env = NULL;
    vx_algo *a = NULL;
    vx_err e;
    if (vx_fuzz_run_algo(&g_run, &env, &a, NULL) != VX_OK) abort();
    vx_status st = g_run.ops->restore(a, ck, 0, &e);
    refused("restore", st, &e);
    if (!st) {
        vx_epoch_in in = {1, 0};
        vx_epoch_out out;
        st = g_run.ops->epoch(a, &in, &out, &e);
        refused("epoch", st, &e);
    }
    g_run.ops->free(a);
    vx_env_free(env);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_run.cfg) start();
    vx_fuzz_file_set(&g_in, data, size);
    vx_safetensors s;
    vx_err e;
    vx_status st = vx_safetensors_read(g_in.path, &s, &e);
    refused("read", st, &e);
    if (st) return 0;
    touch(&s);
    open_as_run();
    vx_ckpt_view ck = {&s, g_fixture};
    restore_weights(&ck);
    restore_all(&ck);
    vx_safetensors_free(&s);
    return 0;
}

/* fuzz_seeds.c — writes seed inputs for the fuzz targets whose formats only vixen writes, with the
 * library's own writers, so they always match the build:
 *   fuzz_seeds DIR   →  DIR/replay/seed-{uniform,proportional,rank}.bin   (fuzz_replay)
 *                       DIR/checkpoint/seed-latest.safetensors            (fuzz_checkpoint)
 *                       DIR/config/seed-resolved.yaml                     (fuzz_config)
 * scripts/fuzz runs it into each run's working corpus; tests/fuzz/corpus holds a copy. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const vx_err *e)
{
    fprintf(stderr, "fuzz_seeds: %s\n", e->msg);
    return 1;
}

static vx_status copy_file(const char *from, const char *to, vx_err *e)
{
    uint8_t *data;
    size_t n;
    vx_status st = vx_file_read_all(from, &data, &n, e);
    if (st) return st;
    vx_atomic_file af;
    st = vx_atomic_open(&af, to, e);
    if (!st && fwrite(data, 1, n, af.f) != n) {
        vx_atomic_abort(&af);
        st = vx_err_line(e, VX_ERR_IO, to, -1, "", "write failed");
    } else if (!st) {
        st = vx_atomic_commit(&af, e);
    }
    free(data);
    return st;
}

static vx_status write_replay(const char *dir, vx_err *e)
{
    const char *names[] = {"uniform", "proportional", "rank"};
    const vx_replay_kind kinds[] = {VX_REPLAY_UNIFORM, VX_REPLAY_PROPORTIONAL, VX_REPLAY_RANK};
    char path[1200];
    vx_status st = VX_OK;
    for (int k = 0; k < 3 && !st; k++) {
        snprintf(path, sizeof path, "%s/replay/seed-%s.bin", dir, names[k]);
        st = vx_fuzz_replay_seed(kinds[k], path, e);
    }
    return st;
}

static vx_status write_checkpoint(const char *dir, const vx_fuzz_run *r, vx_err *e)
{
    char tmp[512], from[1200], to[1200];
    vx_fuzz_tempdir(tmp, sizeof tmp);
    vx_status st = vx_fuzz_run_checkpoint((vx_fuzz_run *)r, tmp, e);
    snprintf(from, sizeof from, "%s/latest.safetensors", tmp);
    snprintf(to, sizeof to, "%s/checkpoint/seed-latest.safetensors", dir);
    if (!st) st = copy_file(from, to, e);
    return st;
}

static vx_status write_config(const char *dir, const vx_fuzz_run *r, vx_err *e)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/config/seed-resolved.yaml", dir);
    vx_atomic_file af;
    vx_status st = vx_atomic_open(&af, path, e);
    if (st) return st;
    if (vx_train_cfg_write(r->cfg, af.f) != VX_OK) {
        vx_atomic_abort(&af);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
    }
    return vx_atomic_commit(&af, e);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR\n");
        return 2;
    }
    vx_err e;
    char sub[1200];
    const char *subs[] = {"replay", "checkpoint", "config"};
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "%s/%s", argv[1], subs[i]);
        if (vx_mkdirs(sub, &e)) return fail(&e);
    }
    vx_fuzz_run r;
    vx_status st = vx_fuzz_run_open(&r, &e);
    if (!st) st = write_replay(argv[1], &e);
    if (!st) st = write_checkpoint(argv[1], &r, &e);
    if (!st) st = write_config(argv[1], &r, &e);
    vx_fuzz_run_close(&r);
    return st ? fail(&e) : 0;
}

/* fuzz_config.c — libFuzzer target: the YAML configuration, read the way `--config FILE` and a
 * run's own config.yaml are (vx_train_cfg_load: src/io/yaml_flat.c, then every key through the
 * settings table of src/io/settings.c and src/train/config.c), then checked.
 *
 * Besides the sanitizers it checks one property: whatever a file sets, the config written back
 * (vx_train_cfg_write, what a run saves as config.yaml) reads back to the same settings — a run
 * must always be able to resume from its own config. A writer may refuse a value (an error), but
 * what it writes must read back and write again identically; otherwise the target aborts with
 * both texts. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static vx_fuzz_file g_in, g_out;
static vx_train_cfg *g_a, *g_b;

/* Writes c into g_out; its text (malloc'd) in *text, NULL when the writer refused. */
static char *write_cfg(const vx_train_cfg *c, size_t *len)
{
    vx_fuzz_file_set(&g_out, NULL, 0);
    int fd = dup(g_out.fd);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) abort();
    vx_status st = vx_train_cfg_write(c, f);
    if (fclose(f) != 0) abort();
    if (st) return NULL;
    off_t n = lseek(g_out.fd, 0, SEEK_END);
    char *text = malloc((size_t)n + 1);
    if (!text || pread(g_out.fd, text, (size_t)n, 0) != n) abort();
    text[n] = 0;
    *len = (size_t)n;
    return text;
}

static void round_trip(void)
{
    size_t n1 = 0, n2 = 0;
    char *t1 = write_cfg(g_a, &n1);
    if (!t1) return;
    vx_err e;
    vx_train_cfg_default(g_b);
    if (vx_train_cfg_load(g_b, g_out.path, &e) != VX_OK) {
        fprintf(stderr, "fuzz_config: the written config does not read back: %s\n---\n%s---\n",
                e.msg, t1);
        abort();
    }
    char *t2 = write_cfg(g_b, &n2);
    if (!t2 || n1 != n2 || memcmp(t1, t2, n1) != 0) {
        fprintf(stderr, "fuzz_config: the config changed on a round trip\n---\n%s---\n%s---\n", t1,
                t2 ? t2 : "(refused)\n");
        abort();
    }
    free(t1);
    free(t2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_a) {
        vx_fuzz_file_open(&g_in, "config.yaml");
        vx_fuzz_file_open(&g_out, "written.yaml");
        g_a = malloc(sizeof *g_a), g_b = malloc(sizeof *g_b);
        if (!g_a || !g_b) abort();
    }
    vx_fuzz_file_set(&g_in, data, size);
    vx_train_cfg_default(g_a);
    if (vx_train_cfg_load(g_a, g_in.path, NULL) != VX_OK) return 0;
    vx_train_cfg_check(g_a, NULL);
    round_trip();
    return 0;
}

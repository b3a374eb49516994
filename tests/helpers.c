/* helpers.c — see helpers.h. */
#define _XOPEN_SOURCE 700
#include "helpers.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void th_tmpdir(char *buf, size_t n)
{
    snprintf(buf, n, "/tmp/vixen-test-XXXXXX");
    assert_non_null(mkdtemp(buf));
}

void th_rmtree(const char *path) { vx_remove_tree(path, NULL); }

void th_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void th_write_str(const char *path, const char *text) { th_write(path, text, strlen(text)); }

uint8_t *th_read(const char *path, size_t *n)
{
    uint8_t *d;
    vx_err e;
    assert_int_equal(vx_file_read_all(path, &d, n, &e), VX_OK);
    return d;
}

size_t th_count_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t k = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') k++;
    closedir(d);
    return k;
}

static char g_log[65536];
static size_t g_log_n;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER; /* trials log from their threads */

static void capture(vx_log_level level, const char *line, void *ctx)
{
    (void)level, (void)ctx;
    pthread_mutex_lock(&g_log_mu);
    int k = snprintf(g_log + g_log_n, sizeof g_log - g_log_n, "%s\n", line);
    if (k > 0 && g_log_n + (size_t)k < sizeof g_log) g_log_n += (size_t)k;
    pthread_mutex_unlock(&g_log_mu);
}

void th_log_start(void)
{
    g_log[0] = '\0';
    g_log_n = 0;
    vx_log_set_sink(capture, NULL, VX_LOG_DEBUG);
}
const char *th_log_text(void) { return g_log; }
void th_log_stop(void) { vx_log_set_sink(NULL, NULL, VX_LOG_INFO); }

static void slurp(const char *path, char *buf, size_t n)
{
    if (!buf) return;
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = '\0';
    fclose(f);
}

int th_run(const char *cmdline, char *out, size_t out_n, char *err, size_t err_n)
{
    char dir[64], cmd[8192], o[96], e[96];
    th_tmpdir(dir, sizeof dir);
    snprintf(o, sizeof o, "%s/out", dir);
    snprintf(e, sizeof e, "%s/err", dir);
    snprintf(cmd, sizeof cmd, "%s >%s 2>%s", cmdline, o, e);
    int rc = system(cmd);
    slurp(o, out, out_n);
    slurp(e, err, err_n);
    th_rmtree(dir);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void th_synth(vx_series *s, int days, uint64_t seed, double strength)
{
    vx_synth_cfg c;
    vx_synth_default(&c);
    c.days = days;
    c.seed = seed;
    c.signal_strength = strength;
    vx_err e;
    memset(s, 0, sizeof *s);
    assert_int_equal(vx_synth_generate(&c, s, NULL, &e), VX_OK);
}

void th_safetensors_rewrite(vx_safetensors *st, const char *key, const char *value)
{
    vx_meta *m = malloc((st->n_meta ? st->n_meta : 1) * sizeof *m);
    assert_non_null(m);
    size_t n = 0;
    for (size_t i = 0; i < st->n_meta; i++) {
        if (strcmp(st->meta[i].key, VX_SAFETENSORS_SUM) == 0) continue; /* the writer's own */
        m[n] = st->meta[i];
        if (key && strcmp(m[n].key, key) == 0) snprintf(m[n].value, sizeof m[n].value, "%s", value);
        n++;
    }
    char path[sizeof st->path];
    snprintf(path, sizeof path, "%s", st->path);
    vx_err e;
    if (vx_safetensors_write(path, st->tensors, st->n, m, n, &e) != VX_OK) fail_msg("%s", e.msg);
    free(m);
    vx_safetensors_free(st);
}

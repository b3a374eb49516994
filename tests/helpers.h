/* helpers.h — shared test helpers: temporary folders, files, captured logs, small markets. */
#ifndef VIXEN_TEST_HELPERS_H
#define VIXEN_TEST_HELPERS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include "vixen/data.h"
#include "vixen/io.h"
#include "vixen/util.h"

/* |a − b| <= tol, in double; false for a NaN or an infinity. The tests' one float comparison:
 * cmocka's assert_float_equal passes a NaN or an infinity (its relative fallback compares
 * NaN > NaN and inf > inf · FLT_EPSILON, both false) and rounds both sides to float first. */
#define assert_near(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (tol))

/* A fresh folder under /tmp, removed (with its contents) by th_rmtree. */
void th_tmpdir(char *buf, size_t n);
void th_rmtree(const char *path);
void th_write(const char *path, const void *data, size_t n);
void th_write_str(const char *path, const char *text);
uint8_t *th_read(const char *path, size_t *n);
size_t th_count_files(const char *dir);

/* Captures log lines into one buffer (cleared by th_log_start). */
void th_log_start(void);
const char *th_log_text(void);
void th_log_stop(void);

/* Runs a shell command line, capturing stdout and stderr into the given buffers. Returns the
 * exit code. */
int th_run(const char *cmdline, char *out, size_t out_n, char *err, size_t err_n);

/* Writes the safetensors file `st` was read from again through the writer — its tensors as they
 * now are in st's buffer, its metadata with `key` (when not NULL) set to `value` — so the checksum
 * matches whatever was changed: only the content checks behind it can refuse the file. Frees st. */
void th_safetensors_rewrite(vx_safetensors *st, const char *key, const char *value);

/* A synthetic series of `days` days. */
void th_synth(vx_series *s, int days, uint64_t seed, double strength);

#define TH_FIXTURE(name) VX_FIXTURES "/" name

#endif

/* io.h — file formats a run writes and reads: safetensors checkpoints, TensorBoard event files,
 * metrics CSV, and flat YAML configuration. Generic: nothing here knows about networks or
 * learners, so every layer above util may use it. */
#ifndef VIXEN_IO_H
#define VIXEN_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- safetensors: u64 header length, a JSON header, then raw little-endian tensors ---------- */

typedef enum { VX_DT_F32, VX_DT_F64, VX_DT_I64, VX_DT_U8 } vx_dtype;

typedef struct {
    char name[96];
    vx_dtype dtype;
    int ndim;
    int64_t shape[4];
    const void *data; /* writer: the bytes to write; reader: points into the loaded file */
} vx_tensor;

typedef struct {
    char key[64];
    char value[16384]; /* room for a whole resolved config */
} vx_meta;

/* The metadata key of the checksum (XXH3-64 over the metadata, the tensor entries and the data:
 * 16 hex digits), added by the writer and checked by the reader whenever present. */
#define VX_SAFETENSORS_SUM "checksum_xxh3"

/* Writes tensors and string metadata atomically (temporary file + rename). */
vx_status vx_safetensors_write(const char *path, const vx_tensor *t, size_t n, const vx_meta *meta,
                               size_t n_meta, vx_err *e);

typedef struct {
    char path[1024];
    uint8_t *file; /* the whole file; tensors point into it */
    size_t size;
    vx_tensor *tensors;
    size_t n;
    vx_meta *meta;
    size_t n_meta;
} vx_safetensors;

/* Reads a whole file and checks it (shapes, offsets tiling the data, unique names and keys, the
 * checksum); an error names the file and the tensor or key at fault. */
vx_status vx_safetensors_read(const char *path, vx_safetensors *out, vx_err *e);
void vx_safetensors_free(vx_safetensors *s);
/* The named tensor, checked against the expected dtype and element count; NULL (with e filled)
 * when missing or different. */
const vx_tensor *vx_safetensors_get(const vx_safetensors *s, const char *name, vx_dtype dt,
                                    size_t count, vx_err *e);
const char *vx_safetensors_meta(const vx_safetensors *s, const char *key);
/* A whole number from the metadata in lo..hi; an error naming the file and the key when it is
 * missing, not a number, or out of range. */
vx_status vx_safetensors_meta_int(const vx_safetensors *s, const char *key, int64_t lo, int64_t hi,
                                  int64_t *out, vx_err *e);

/* ---- TensorBoard event files (TFRecord framing, Event/Summary protobufs written by hand) ----- */

typedef struct {
    FILE *f;
    char path[1024];
} vx_tfevents;

/* Creates "<dir>/events.out.tfevents.<secs>.<host>.<pid>.<serial>.vixen", a new file (O_EXCL: never
 * an existing one, never through a link; two runs started in one second get two files), with its
 * file_version record. */
vx_status vx_tfevents_open(vx_tfevents *w, const char *dir, vx_err *e);
vx_status vx_tfevents_scalar(vx_tfevents *w, const char *tag, int64_t step, double value,
                             vx_err *e);
void vx_tfevents_close(vx_tfevents *w);
uint32_t vx_crc32c(const void *data, size_t n); /* Castagnoli, as TFRecord uses */

/* ---- metrics CSV: a header row, then one row per record; flushed every row ------------------ */

typedef struct {
    FILE *f;
    int n_cols;
} vx_csv_log;

/* Opens the log of a run that has completed `keep` epochs (0: a new run), the first column being
 * the epoch: the file is rewritten atomically with its header and the rows of epochs 1..keep of an
 * existing file (which must have the same header when any are kept), dropping the rows an attempt
 * cut short wrote after its last checkpoint; rows are then appended. */
vx_status vx_csv_log_open(vx_csv_log *w, const char *path, const char *const *cols, int n,
                          int64_t keep, vx_err *e);
vx_status vx_csv_log_row(vx_csv_log *w, const double *values, vx_err *e);
void vx_csv_log_close(vx_csv_log *w);

/* ---- flat YAML: "section: {key: scalar or [scalars]}" into dotted keys ---------------------- */

typedef struct {
    char *key;    /* "dqn.lr" */
    char *value;  /* a scalar's text; NULL for a list */
    char **items; /* a list's items, each exactly as written (commas and spaces kept) */
    size_t n_items;
    int line; /* 1-based line of the key in the file */
} vx_kv;

/* Reads a YAML file whose top level maps section names to maps of scalars or sequences of
 * scalars (one level of nesting). Anything else, a key or section given twice, or a NUL byte in a
 * value is an error naming the file, the line and the key. A scalar tagged !!binary is decoded
 * from base64 (how vx_settings_write keeps strings that are not UTF-8). No limit on the length of
 * a line, a value or a list. Release the result with vx_kv_free. */
vx_status vx_yaml_read_flat(const char *path, vx_kv **out, size_t *n, vx_err *e);
/* The same over text in memory (len bytes); `name` stands for the file in errors. */
vx_status vx_yaml_read_flat_text(const char *text, size_t len, const char *name, vx_kv **out,
                                 size_t *n, vx_err *e);
void vx_kv_free(vx_kv *kv, size_t n);

/* ---- settings: dotted keys over sections of plain structs ------------------------------------
 * One table entry per key: its type, where it lives in its section's struct, its range and help.
 * Each layer registers the section it owns (env.*, train.*, and each algorithm its own); a run
 * binds every section to its struct and reads YAML files, `--set KEY=VALUE` overrides and its own
 * resolved config.yaml through the same table, so an unknown key or a value out of range is
 * always an error naming the key (and the file and line), never ignored. */

typedef enum {
    VX_KEY_INT,     /* int */
    VX_KEY_I64,     /* int64_t */
    VX_KEY_U64,     /* uint64_t */
    VX_KEY_DBL,     /* double */
    VX_KEY_STR,     /* char[size] */
    VX_KEY_ENUM,    /* int: the index of one of `names` */
    VX_KEY_INTLIST, /* int[max_items], its length in the int at count_off */
    VX_KEY_STRLIST, /* char[max_items][size], its length in the int at count_off */
} vx_key_type;

typedef struct {
    const char *name; /* "lr": the key is "<section>.<name>" */
    vx_key_type type;
    size_t off, size;         /* the field's offset in the bound struct; a string's (row's) size */
    double min, max;          /* numbers and list items */
    const char *const *names; /* ENUM: the choices, NULL-terminated */
    size_t count_off;         /* lists: the offset of the int holding the length */
    int max_items;            /* lists */
    long flag_off;            /* ≥ 0: an int set to 1 when the key is set (a value "given") */
    const char *help;
} vx_key;

typedef struct {
    const char *name; /* "dqn" */
    const vx_key *keys;
    size_t n_keys;
} vx_section;

#define VX_SETTINGS_MAX 16

/* Sections, each bound to the struct its offsets are relative to. `renamed` (optional): pairs of
 * old and new key names, NULL-terminated — an old name is read as the new one. */
typedef struct {
    const vx_section *sec[VX_SETTINGS_MAX];
    void *base[VX_SETTINGS_MAX];
    int n;
    const char *const *renamed;
} vx_settings;

void vx_settings_bind(vx_settings *s, const vx_section *sec, void *base);
/* Sets one key from text; `where` (may be NULL) prefixes errors, e.g. "run.yaml: line 7". */
vx_status vx_settings_set(const vx_settings *s, const char *key, const char *value,
                          const char *where, vx_err *e);
/* Every key of a YAML file (vx_yaml_read_flat), each error naming the file and line; a key given
 * twice, also under its old and its new name, is an error. A YAML list sets a list key item by
 * item (an item may hold commas); a scalar sets it as `--set` does (comma-separated). */
vx_status vx_settings_load(const vx_settings *s, const char *yaml_path, vx_err *e);
/* The same over YAML text in memory; `name` stands for the file in errors. */
vx_status vx_settings_load_text(const vx_settings *s, const char *text, size_t len,
                                const char *name, vx_err *e);
/* Every key as YAML, section by section in binding order; the file reads back to the same
 * settings, byte for byte: strings are double-quoted with YAML escapes (newline, tab, quote,
 * backslash, control and line-separator characters), a string that is not UTF-8 is written as
 * !!binary base64, string lists as one item a line. VX_ERR_IO when the stream reports an error
 * (the caller still checks its fclose). */
vx_status vx_settings_write(const vx_settings *s, FILE *f);
/* "  dqn.lr                     Adam learning rate" lines, for --help. */
void vx_settings_print_keys(const vx_settings *s, FILE *f);
/* The first key (in binding order) whose value, as written, or whose "given" flag differs
 * between a and b — the same sections bound to two structs — leaving out the keys listed in skip1
 * and skip2 (dotted names, NULL-terminated; either may be NULL): 1 with "<section>.<name>" in key,
 * or 0 when all agree. −1 when out of memory. */
int vx_settings_difference(const vx_settings *a, const vx_settings *b, const char *const *skip1,
                           const char *const *skip2, char *key, size_t n);

#ifdef __cplusplus
}
#endif

#endif

/* yaml_flat.c — a YAML configuration of one nesting level, read with libyaml's event parser.
 *
 *   dqn:
 *     lr: 3.0e-4
 *     loss: huber
 *   net:
 *     trunk: [256, 256]
 *
 * gives ("dqn.lr", "3.0e-4"), ("dqn.loss", "huber"), ("net.trunk", items "256", "256"), each with
 * its line. What the keys mean and which values are allowed is decided by the caller's key table;
 * this file only refuses shapes it cannot flatten (deeper nesting, anchors, several documents),
 * keys given twice (YAML requires unique keys, and a second value would silently win) and NUL
 * bytes (a C string would end there). Every string is allocated to its length: no line, value or
 * list limit. Scalars tagged !!binary are base64-decoded, which is how the writer keeps bytes that
 * are not UTF-8 (libyaml reads only UTF-8, and its "\xNN" escape means the code point U+00NN, not
 * the byte). */
#include "vixen/io.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static vx_status fail(vx_err *e, const char *path, const yaml_event_t *ev, const char *what)
{
    return vx_err_line(e, VX_ERR_FORMAT, path, (int64_t)ev->start_mark.line + 1, "", "%s", what);
}

static int b64_digit(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Base64 (RFC 4648, whitespace between groups allowed, as YAML folds long ones) into a new
 * string; NULL when malformed. */
static char *b64_decode(const unsigned char *s, size_t n, size_t *out_len)
{
    char *out = malloc(n / 4 * 3 + 4);
    if (!out) return NULL;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (c == '=') {
            pad++;
            continue;
        }
        int d = b64_digit(c);
        if (d < 0 || pad) { /* a foreign character, or data after the padding */
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[k++] = (char)((acc >> bits) & 0xFF);
        }
    }
    if (pad > 2 || bits >= 6 || (acc & ((1u << bits) - 1)) != 0) { /* a stray digit or bits */
        free(out);
        return NULL;
    }
    out[k] = '\0';
    *out_len = k;
    return out;
}

/* The scalar's bytes as a new C string (decoded when tagged !!binary); NULL with `e` filled when it
 * cannot be one. */
static char *scalar_text(const yaml_event_t *ev, const char *path, vx_err *e)
{
    const unsigned char *v = ev->data.scalar.value;
    size_t n = ev->data.scalar.length, len = n;
    const char *tag = (const char *)ev->data.scalar.tag;
    char *s;
    if (tag && strcmp(tag, "tag:yaml.org,2002:binary") == 0) {
        s = b64_decode(v, n, &len);
        if (!s) {
            fail(e, path, ev, "!!binary: not base64");
            return NULL;
        }
    } else {
        s = malloc(n + 1);
        if (!s) {
            vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", path);
            return NULL;
        }
        memcpy(s, v, n);
        s[n] = '\0';
    }
    if (strlen(s) != len) {
        free(s);
        fail(e, path, ev, "a NUL byte in a key or value");
        return NULL;
    }
    return s;
}

void vx_kv_free(vx_kv *kv, size_t n)
{
    if (!kv) return;
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].value);
        for (size_t j = 0; j < kv[i].n_items; j++) free(kv[i].items[j]);
        free(kv[i].items);
    }
    free(kv);
}

/* A growing array of entries: the keys read, or the section names (for the duplicate check). */
typedef struct {
    vx_kv *kv;
    size_t n, cap;
} kv_list;

static vx_kv *kv_push(kv_list *l, char *key, int line)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        vx_kv *nk = realloc(l->kv, cap * sizeof *nk);
        if (!nk) return NULL;
        l->kv = nk;
        l->cap = cap;
    }
    vx_kv *k = &l->kv[l->n++];
    memset(k, 0, sizeof *k);
    k->key = key;
    k->line = line;
    return k;
}

static int item_push(vx_kv *k, char *item)
{
    if ((k->n_items & (k->n_items - 1)) == 0) { /* 0, 1, 2, 4, …: grow to the next power of two */
        char **ni = realloc(k->items, (k->n_items ? 2 * k->n_items : 1) * sizeof *ni);
        if (!ni) return -1;
        k->items = ni;
    }
    k->items[k->n_items++] = item;
    return 0;
}

static int by_key_then_line(const void *a, const void *b)
{
    const vx_kv *x = *(const vx_kv *const *)a, *y = *(const vx_kv *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* The entry that repeats an earlier key, the one earliest in the file; NULL when every key is
 * unique. Sorting makes it O(n log n), so a hostile file of many keys stays cheap. */
static const vx_kv *first_repeat(const vx_kv *kv, size_t n, int *nomem)
{
    *nomem = 0;
    if (n < 2) return NULL;
    const vx_kv **ix = malloc(n * sizeof *ix);
    if (!ix) {
        *nomem = 1;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) ix[i] = &kv[i];
    qsort(ix, n, sizeof *ix, by_key_then_line);
    const vx_kv *rep = NULL;
    for (size_t i = 1; i < n; i++)
        if (strcmp(ix[i - 1]->key, ix[i]->key) == 0 && (!rep || ix[i]->line < rep->line))
            rep = ix[i];
    free(ix);
    return rep;
}

static vx_status check_repeats(const kv_list *l, const char *path, const char *what, vx_err *e)
{
    int nomem;
    const vx_kv *rep = first_repeat(l->kv, l->n, &nomem);
    if (nomem) return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", path);
    if (!rep) return VX_OK;
    int first = 0;
    for (size_t i = 0; i < l->n && !first; i++)
        if (strcmp(l->kv[i].key, rep->key) == 0) first = l->kv[i].line;
    return vx_err_line(e, VX_ERR_FORMAT, path, rep->line, rep->key,
                       "%s '%s' given twice (first on line %d)", what, rep->key, first);
}

/* "section.key" */
static char *dotted(const char *section, const char *key)
{
    size_t a = strlen(section), b = strlen(key);
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    memcpy(s, section, a);
    s[a] = '.';
    memcpy(s + a + 1, key, b + 1);
    return s;
}

/* states: TOP (before the top map), SECTION (expecting a section name), SECTION_MAP (expecting
 * its map), KEY (expecting a key), VALUE (expecting its value), LIST (in a list) */
enum { TOP, SECTION, SECTION_MAP, KEY, VALUE, LIST };

typedef struct {
    const char *path;
    kv_list keys, sections;
    char *section, *key; /* the current ones (owned) */
    int state, docs, key_line;
} reader;

static vx_status on_scalar(reader *r, const yaml_event_t *ev, vx_err *e)
{
    if (r->state != SECTION && r->state != KEY && r->state != VALUE && r->state != LIST)
        return fail(e, r->path, ev, "a section name must be followed by a map of keys");
    char *s = scalar_text(ev, r->path, e);
    if (!s) return e ? e->status : VX_ERR_FORMAT;
    int line = (int)ev->start_mark.line + 1;
    if (r->state == SECTION) {
        free(r->section);
        r->section = s;
        char *copy = strdup(s);
        if (!copy || !kv_push(&r->sections, copy, line)) {
            free(copy);
            return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", r->path);
        }
        r->state = SECTION_MAP;
    } else if (r->state == KEY) {
        free(r->key);
        r->key = s;
        r->key_line = line;
        r->state = VALUE;
    } else if (r->state == VALUE) {
        char *k = dotted(r->section, r->key);
        vx_kv *kv = k ? kv_push(&r->keys, k, r->key_line) : NULL;
        if (!kv) {
            free(k), free(s);
            return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", r->path);
        }
        kv->value = s;
        r->state = KEY;
    } else if (item_push(&r->keys.kv[r->keys.n - 1], s)) { /* LIST */
        free(s);
        return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", r->path);
    }
    return VX_OK;
}

static vx_status on_event(reader *r, const yaml_event_t *ev, vx_err *e)
{
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++r->docs > 1) return fail(e, r->path, ev, "more than one YAML document");
        return VX_OK;
    case YAML_MAPPING_START_EVENT:
        if (r->state == TOP) r->state = SECTION;
        else if (r->state == SECTION_MAP) r->state = KEY;
        else return fail(e, r->path, ev, "nested too deep: only 'section: {key: value}' is read");
        return VX_OK;
    case YAML_MAPPING_END_EVENT: r->state = r->state == KEY ? SECTION : TOP; return VX_OK;
    case YAML_SEQUENCE_START_EVENT: {
        if (r->state != VALUE)
            return fail(e, r->path, ev, "a list is only allowed as a key's value");
        char *k = dotted(r->section, r->key);
        if (!k || !kv_push(&r->keys, k, r->key_line)) {
            free(k);
            return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", r->path);
        }
        r->state = LIST;
        return VX_OK;
    }
    case YAML_SEQUENCE_END_EVENT: r->state = KEY; return VX_OK;
    case YAML_SCALAR_EVENT: return on_scalar(r, ev, e);
    case YAML_ALIAS_EVENT: return fail(e, r->path, ev, "anchors and aliases are not supported");
    default: return VX_OK;
    }
}

vx_status vx_yaml_read_flat_text(const char *text, size_t len, const char *name, vx_kv **out,
                                 size_t *n_out, vx_err *e)
{
    *out = NULL;
    *n_out = 0;
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", name);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    reader r;
    memset(&r, 0, sizeof r);
    r.path = name;
    vx_status st = VX_OK;
    for (int done = 0; !done && !st;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            st = vx_err_line(e, VX_ERR_FORMAT, name, (int64_t)p.problem_mark.line + 1, "",
                             "YAML: %s", p.problem ? p.problem : "parse error");
            break;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        st = on_event(&r, &ev, e);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    if (!st) st = check_repeats(&r.sections, name, "section", e);
    if (!st) st = check_repeats(&r.keys, name, "key", e);
    vx_kv_free(r.sections.kv, r.sections.n);
    free(r.section);
    free(r.key);
    if (st) {
        vx_kv_free(r.keys.kv, r.keys.n);
        return st;
    }
    *out = r.keys.kv;
    *n_out = r.keys.n;
    return VX_OK;
}

vx_status vx_yaml_read_flat(const char *path, vx_kv **out, size_t *n_out, vx_err *e)
{
    *out = NULL;
    *n_out = 0;
    uint8_t *data;
    size_t size;
    vx_status st = vx_file_read_all(path, &data, &size, e); /* refuses FIFOs and folders */
    if (st) return st;
    st = vx_yaml_read_flat_text((const char *)data, size, path, out, n_out, e);
    free(data);
    return st;
}

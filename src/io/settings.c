/* settings.c — dotted keys over sections of plain structs (io.h): parse, range-check, write back.
 *
 * A key is "<section>.<name>"; its table entry says the type, the field's offset in the struct
 * the section is bound to, the allowed range and the help line. The same tables serve YAML
 * files, `--set` overrides, the resolved config written into a run folder and `--help`, so a key
 * exists in exactly one place. Nothing here knows what any key means.
 *
 * What is written reads back to the same bytes: a run's config.yaml must load again whatever its
 * paths hold (a newline, quotes, '#', a leading space, bytes that are not UTF-8, any length). A
 * value that does not fit its field is an error naming the key, never cut short. */
#include "vixen/io.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void vx_settings_bind(vx_settings *s, const vx_section *sec, void *base)
{
    if (s->n < VX_SETTINGS_MAX) {
        s->sec[s->n] = sec;
        s->base[s->n] = base;
        s->n++;
    }
}

/* The key's entry, the struct it lives in and its number among all bound keys (for the duplicate
 * check of a load). */
static const vx_key *find(const vx_settings *s, const char *key, void **base, size_t *slot)
{
    const char *dot = strchr(key, '.');
    if (!dot) return NULL;
    size_t sl = (size_t)(dot - key), first = 0;
    for (int i = 0; i < s->n; i++) {
        const vx_section *sec = s->sec[i];
        size_t at = first;
        first += sec->n_keys;
        if (strlen(sec->name) != sl || strncmp(sec->name, key, sl) != 0) continue;
        for (size_t k = 0; k < sec->n_keys; k++)
            if (strcmp(sec->keys[k].name, dot + 1) == 0) {
                *base = s->base[i];
                if (slot) *slot = at + k;
                return &sec->keys[k];
            }
    }
    return NULL;
}

/* A value as it goes into a one-line message: cut at 120 bytes (in the message, not the data) and
 * with control bytes shown as '?', so a value holding a newline cannot split the line. */
static void shown(char *v, size_t cap, const char *value)
{
    snprintf(v, cap, "%.120s", value);
    for (char *p = v; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

static vx_status bad(vx_err *e, const char *where, const char *key, const char *fmt,
                     const char *value, double lo, double hi)
{
    char msg[256], v[128];
    shown(v, sizeof v, value);
    snprintf(msg, sizeof msg, fmt, v, lo, hi);
    if (where && *where) return vx_err_set(e, VX_ERR_ARG, "%s: %s: %s", where, key, msg);
    return vx_err_set(e, VX_ERR_ARG, "%s: %s", key, msg);
}

static int parse_num(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    while (*end == ' ') end++;
    return errno || end == s || *end || !isfinite(*v) ? -1 : 0;
}

/* A list's items, checked and built aside, then copied in whole: a refused value leaves the old
 * list as it was. `value` is what errors show. */
static vx_status set_items(const vx_key *k, char *base, const char *key, const char *const *items,
                           size_t n, const char *value, const char *where, vx_err *e)
{
    if (n > (size_t)k->max_items)
        return bad(e, where, key, "'%s' has more than %g items", value, k->max_items, 0);
    if (k->type == VX_KEY_INTLIST) {
        if (n == 0) return bad(e, where, key, "'%s' is empty", value, 0, 0);
        int *vals = malloc(n * sizeof *vals);
        if (!vals) return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", key);
        for (size_t i = 0; i < n; i++) {
            double v;
            if (parse_num(items[i], &v) || v != floor(v) || v < k->min || v > k->max) {
                free(vals);
                return bad(e, where, key, "'%s' is not a whole number in %g .. %g", items[i],
                           k->min, k->max);
            }
            vals[i] = (int)v;
        }
        memcpy(base + k->off, vals, n * sizeof *vals);
        free(vals);
    } else {
        for (size_t i = 0; i < n; i++) {
            if (!items[i][0]) return bad(e, where, key, "'%s' has an empty item", value, 0, 0);
            if (strlen(items[i]) >= k->size)
                return bad(e, where, key, "'%s': an item is too long", items[i], 0, 0);
        }
        memset(base + k->off, 0, (size_t)k->max_items * k->size);
        for (size_t i = 0; i < n; i++)
            memcpy(base + k->off + i * k->size, items[i], strlen(items[i]) + 1);
    }
    *(int *)(base + k->count_off) = (int)n;
    return VX_OK;
}

/* A list given as one text: INTLIST items split at commas, spaces and brackets ("[64, 32]"),
 * STRLIST items at commas, each without its leading spaces, empty ones dropped. */
static vx_status set_list_text(const vx_key *k, char *base, const char *key, const char *value,
                               const char *where, vx_err *e)
{
    const char *seps = k->type == VX_KEY_INTLIST ? ", []" : ",";
    size_t len = strlen(value), cap = 1;
    for (const char *p = value; *p; p++) cap += strchr(seps, *p) != NULL;
    char *copy = malloc(len + 1);
    const char **items = malloc(cap * sizeof *items);
    if (!copy || !items) {
        free(copy), free(items);
        return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", key);
    }
    memcpy(copy, value, len + 1);
    size_t n = 0;
    for (char *p = copy; *p;) {
        size_t tok = strcspn(p, seps);
        char *next = p + tok + (p[tok] != '\0');
        p[tok] = '\0';
        while (*p == ' ') p++;
        if (*p) items[n++] = p;
        p = next;
    }
    vx_status st = set_items(k, base, key, items, n, value, where, e);
    free(items);
    free(copy);
    return st;
}

static vx_status set_scalar(const vx_key *k, char *base, const char *key, const char *value,
                            const char *where, vx_err *e)
{
    double v;
    switch (k->type) {
    case VX_KEY_INT:
    case VX_KEY_I64:
    case VX_KEY_U64:
    case VX_KEY_DBL:
        if (parse_num(value, &v)) return bad(e, where, key, "'%s' is not a number", value, 0, 0);
        if (v < k->min || v > k->max)
            return bad(e, where, key, "%s is outside %.15g .. %.15g", value, k->min, k->max);
        if (k->type != VX_KEY_DBL && v != floor(v))
            return bad(e, where, key, "%s is not a whole number", value, 0, 0);
        if (k->type == VX_KEY_INT) *(int *)(base + k->off) = (int)v;
        else if (k->type == VX_KEY_I64) *(int64_t *)(base + k->off) = (int64_t)v;
        else if (k->type == VX_KEY_U64) *(uint64_t *)(base + k->off) = (uint64_t)v;
        else *(double *)(base + k->off) = v;
        return VX_OK;
    case VX_KEY_STR:
        if (strlen(value) >= k->size)
            return bad(e, where, key, "'%s' is too long (at most %g bytes)", value,
                       (double)k->size - 1, 0);
        memcpy(base + k->off, value, strlen(value) + 1);
        return VX_OK;
    case VX_KEY_ENUM: {
        int i = 0;
        while (k->names[i] && strcmp(k->names[i], value) != 0) i++;
        if (!k->names[i])
            return bad(e, where, key, "'%s' is not one of the choices (vixen train --keys)", value,
                       0, 0);
        *(int *)(base + k->off) = i;
        return VX_OK;
    }
    case VX_KEY_INTLIST:
    case VX_KEY_STRLIST: return set_list_text(k, base, key, value, where, e);
    }
    return vx_err_set(e, VX_ERR_ARG, "%s: unknown key type", key);
}

static const char *canonical(const vx_settings *s, const char *key)
{
    for (const char *const *r = s->renamed; r && r[0]; r += 2)
        if (strcmp(r[0], key) == 0) return r[1];
    return key;
}

static vx_status unknown(vx_err *e, const char *where, const char *key)
{
    char k[128];
    shown(k, sizeof k, key);
    if (where && *where) return vx_err_set(e, VX_ERR_ARG, "%s: unknown key '%s'", where, k);
    return vx_err_set(e, VX_ERR_ARG, "unknown key '%s' (vixen train --keys lists them)", k);
}

vx_status vx_settings_set(const vx_settings *s, const char *key0, const char *value,
                          const char *where, vx_err *e)
{
    const char *key = canonical(s, key0);
    void *b = NULL;
    const vx_key *k = find(s, key, &b, NULL);
    if (!k) return unknown(e, where, key0);
    vx_status st = set_scalar(k, b, key, value, where, e);
    if (!st && k->flag_off >= 0) *(int *)((char *)b + k->flag_off) = 1;
    return st;
}

/* One entry of a YAML file: a scalar as `--set` gives it, a YAML list item by item. */
static vx_status set_kv(const vx_settings *s, const vx_kv *kv, const char *where, int *seen,
                        vx_err *e)
{
    const char *key = canonical(s, kv->key);
    void *b = NULL;
    size_t slot = 0;
    const vx_key *k = find(s, key, &b, &slot);
    if (!k) return unknown(e, where, kv->key);
    if (seen[slot]) /* "net.trunk" and "dqn.trunk" in one file: which one wins is no answer */
        return vx_err_set(e, VX_ERR_ARG, "%s: %s: given twice (first on line %d)", where, key,
                          seen[slot]);
    seen[slot] = kv->line > 0 ? kv->line : 1;
    vx_status st;
    if (kv->value) {
        st = set_scalar(k, b, key, kv->value, where, e);
    } else if (k->type == VX_KEY_INTLIST || k->type == VX_KEY_STRLIST) {
        const char *first = kv->n_items ? kv->items[0] : "[]";
        st = set_items(k, b, key, (const char *const *)kv->items, kv->n_items, first, where, e);
    } else {
        st = vx_err_set(e, VX_ERR_ARG, "%s: %s: one value expected, not a list", where, key);
    }
    if (!st && k->flag_off >= 0) *(int *)((char *)b + k->flag_off) = 1;
    return st;
}

static vx_status load_kvs(const vx_settings *s, const vx_kv *kv, size_t n, const char *name,
                          vx_err *e)
{
    size_t total = 1;
    for (int i = 0; i < s->n; i++) total += s->sec[i]->n_keys;
    int *seen = calloc(total, sizeof *seen); /* the line each key was set on, 0: not yet */
    char *where = malloc(strlen(name) + 32);
    vx_status st = VX_OK;
    if (!seen || !where) st = vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", name);
    for (size_t i = 0; i < n && !st; i++) {
        sprintf(where, "%s: line %d", name, kv[i].line);
        st = set_kv(s, &kv[i], where, seen, e);
    }
    free(where);
    free(seen);
    return st;
}

vx_status vx_settings_load(const vx_settings *s, const char *path, vx_err *e)
{
    vx_kv *kv;
    size_t n;
    vx_status st = vx_yaml_read_flat(path, &kv, &n, e);
    if (st) return st;
    st = load_kvs(s, kv, n, path, e);
    vx_kv_free(kv, n);
    return st;
}

vx_status vx_settings_load_text(const vx_settings *s, const char *text, size_t len,
                                const char *name, vx_err *e)
{
    vx_kv *kv;
    size_t n;
    vx_status st = vx_yaml_read_flat_text(text, len, name, &kv, &n, e);
    if (st) return st;
    st = load_kvs(s, kv, n, name, e);
    vx_kv_free(kv, n);
    return st;
}

/* ---- writing ----------------------------------------------------------------------------------
 */

/* The code point of the UTF-8 sequence at s (its length in *len), or -1 when s does not start a
 * valid one: a stray continuation byte, a truncated sequence, an overlong form, a surrogate or a
 * value past U+10FFFF — everything libyaml's reader refuses. */
static long utf8_next(const unsigned char *s, int *len)
{
    static const long min[4] = {0, 0x80, 0x800, 0x10000};
    int n = s[0] < 0x80             ? 1
            : (s[0] & 0xE0) == 0xC0 ? 2
            : (s[0] & 0xF0) == 0xE0 ? 3
            : (s[0] & 0xF8) == 0xF0 ? 4
                                    : 0;
    if (!n) return -1;
    long c = n == 1 ? s[0] : s[0] & (0x3F >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1; /* also stops at the terminating NUL */
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min[n - 1] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return -1;
    *len = n;
    return c;
}

static int is_utf8(const char *s)
{
    int n;
    for (const unsigned char *p = (const unsigned char *)s; *p; p += n)
        if (utf8_next(p, &n) < 0) return 0;
    return 1;
}

static void put_b64(FILE *f, const unsigned char *s, size_t n)
{
    static const char dig[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n) v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n) v |= s[i + 2];
        fputc(dig[v >> 18], f);
        fputc(dig[(v >> 12) & 63], f);
        fputc(i + 1 < n ? dig[(v >> 6) & 63] : '=', f);
        fputc(i + 2 < n ? dig[v & 63] : '=', f);
    }
}

/* A string as a YAML scalar libyaml reads back to the same bytes: double-quoted UTF-8 with every
 * character YAML would fold, refuse or treat as markup escaped (the C0 controls, DEL, the C1
 * controls including NEL, the line and paragraph separators, the byte-order mark, the
 * non-characters U+FFFE/U+FFFF), or !!binary base64 when the bytes are not UTF-8. */
static void yaml_str(FILE *f, const char *s)
{
    if (!is_utf8(s)) {
        fputs("!!binary \"", f);
        put_b64(f, (const unsigned char *)s, strlen(s));
        fputc('"', f);
        return;
    }
    fputc('"', f);
    int n;
    for (const unsigned char *p = (const unsigned char *)s; *p; p += n) {
        long c = utf8_next(p, &n);
        if (c == '"' || c == '\\') fprintf(f, "\\%c", (int)c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || (c >= 0x7F && c <= 0x9F)) fprintf(f, "\\x%02lX", c);
        else if (c == 0x2028 || c == 0x2029 || c == 0xFEFF || c == 0xFFFE || c == 0xFFFF)
            fprintf(f, "\\u%04lX", c);
        else fwrite(p, 1, (size_t)n, f);
    }
    fputc('"', f);
}

static void write_key(FILE *f, const vx_key *k, const char *base)
{
    const char *p = base + k->off;
    int count = k->type == VX_KEY_INTLIST || k->type == VX_KEY_STRLIST
                    ? *(const int *)(base + k->count_off)
                    : 0;
    fprintf(f, "  %s:", k->name);
    switch (k->type) {
    case VX_KEY_INT: fprintf(f, " %d", *(const int *)p); break;
    case VX_KEY_I64: fprintf(f, " %lld", (long long)*(const int64_t *)p); break;
    case VX_KEY_U64: fprintf(f, " %llu", (unsigned long long)*(const uint64_t *)p); break;
    case VX_KEY_DBL: fprintf(f, " %.17g", *(const double *)p); break;
    case VX_KEY_STR: fputc(' ', f), yaml_str(f, p); break;
    case VX_KEY_ENUM: fprintf(f, " %s", k->names[*(const int *)p]); break;
    case VX_KEY_INTLIST:
        fputs(" [", f);
        for (int j = 0; j < count; j++) fprintf(f, "%s%d", j ? ", " : "", ((const int *)p)[j]);
        fputc(']', f);
        break;
    case VX_KEY_STRLIST: /* one item a line: paths are long, and an item may hold a comma */
        if (!count) fputs(" []", f);
        for (int j = 0; j < count; j++) {
            fputs("\n    - ", f);
            yaml_str(f, p + (size_t)j * k->size);
        }
        break;
    }
    fputc('\n', f);
}

vx_status vx_settings_write(const vx_settings *s, FILE *f)
{
    for (int i = 0; i < s->n; i++) {
        const vx_section *sec = s->sec[i];
        /* a section bound twice (its keys split over two structs) is one YAML map */
        if (i == 0 || strcmp(s->sec[i - 1]->name, sec->name) != 0) fprintf(f, "%s:\n", sec->name);
        for (size_t j = 0; j < sec->n_keys; j++) write_key(f, &sec->keys[j], s->base[i]);
    }
    /* stdio marks a failed write on the stream; flushing here surfaces one still buffered */
    return fflush(f) != 0 || ferror(f) ? VX_ERR_IO : VX_OK;
}

static int listed(const char *const *list, const char *key)
{
    for (; list && *list; list++)
        if (strcmp(*list, key) == 0) return 1;
    return 0;
}

/* One key's value as written (malloc'd; NULL when out of memory). */
static char *key_text(const vx_key *k, const char *base)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    write_key(f, k, base);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

int vx_settings_difference(const vx_settings *a, const vx_settings *b, const char *const *skip1,
                           const char *const *skip2, char *key, size_t n)
{
    for (int i = 0; i < a->n && i < b->n; i++) {
        const vx_section *sec = a->sec[i];
        for (size_t j = 0; j < sec->n_keys; j++) {
            char name[160];
            snprintf(name, sizeof name, "%s.%s", sec->name, sec->keys[j].name);
            if (listed(skip1, name) || listed(skip2, name)) continue;
            const vx_key *k = &sec->keys[j];
            char *x = key_text(k, a->base[i]);
            char *y = key_text(k, b->base[i]);
            int differ = x && y && strcmp(x, y) != 0;
            /* "given" is part of a value: a batch set to 64 and one left for a GPU to choose */
            if (k->flag_off >= 0)
                differ |= *(const int *)((const char *)a->base[i] + k->flag_off) !=
                          *(const int *)((const char *)b->base[i] + k->flag_off);
            int failed = !x || !y;
            free(x);
            free(y);
            if (failed) return -1;
            if (differ) {
                snprintf(key, n, "%s", name);
                return 1;
            }
        }
    }
    return 0;
}

void vx_settings_print_keys(const vx_settings *s, FILE *f)
{
    for (int i = 0; i < s->n; i++)
        for (size_t j = 0; j < s->sec[i]->n_keys; j++) {
            char key[96];
            snprintf(key, sizeof key, "%s.%s", s->sec[i]->name, s->sec[i]->keys[j].name);
            fprintf(f, "  %-26s %s\n", key, s->sec[i]->keys[j].help);
        }
}

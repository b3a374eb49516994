/* settings.c — dotted keys over sections of plain structs (io.h): parse, range-check, write back.
 *
 * A key is "<section>.<name>"; its table entry says the type, the field's offset in the struct
 * the section is bound to, the allowed range and the help line. The same tables serve YAML
 * files, `--set` overrides, the resolved config written into a run folder and `--help`, so a key
 * exists in exactly one place. Nothing here knows what any key means. */
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

static const vx_key *find(const vx_settings *s, const char *key, void **base)
{
    const char *dot = strchr(key, '.');
    if (!dot) return NULL;
    size_t sl = (size_t)(dot - key);
    for (int i = 0; i < s->n; i++) {
        const vx_section *sec = s->sec[i];
        if (strlen(sec->name) != sl || strncmp(sec->name, key, sl) != 0) continue;
        for (size_t k = 0; k < sec->n_keys; k++)
            if (strcmp(sec->keys[k].name, dot + 1) == 0) {
                *base = s->base[i];
                return &sec->keys[k];
            }
    }
    return NULL;
}

static vx_status bad(vx_err *e, const char *where, const char *key, const char *fmt,
                     const char *value, double lo, double hi)
{
    char msg[256], v[128];
    snprintf(v, sizeof v, "%.120s", value); /* a long value is cut in the message, not the data */
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

static vx_status set_list(const vx_key *k, char *base, const char *key, const char *value,
                          const char *where, vx_err *e)
{
    int *count = (int *)(base + k->count_off);
    if (k->type == VX_KEY_INTLIST) {
        int vals[64], n = 0;
        char buf[1024];
        double v;
        if (strlen(value) >= sizeof buf) return bad(e, where, key, "'%s' is too long", value, 0, 0);
        snprintf(buf, sizeof buf, "%s", value);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ", []", &save); tok; tok = strtok_r(NULL, ", []", &save)) {
            if (n == k->max_items || n == 64)
                return bad(e, where, key, "'%s' has more than %g items", value, k->max_items, 0);
            if (parse_num(tok, &v) || v != floor(v) || v < k->min || v > k->max)
                return bad(e, where, key, "'%s' needs whole numbers in %g .. %g", value, k->min,
                           k->max);
            vals[n++] = (int)v;
        }
        if (n == 0) return bad(e, where, key, "'%s' is empty", value, 0, 0);
        *count = n;
        memcpy(base + k->off, vals, (size_t)n * sizeof(int));
        return VX_OK;
    }
    /* VX_KEY_STRLIST: comma-separated, surrounding spaces dropped; parsed aside first, so a
     * refused value leaves the old list whole */
    char *rows = calloc((size_t)k->max_items, k->size);
    if (!rows) return vx_err_set(e, VX_ERR_NOMEM, "%s: out of memory", key);
    int n = 0;
    vx_status st = VX_OK;
    const char *p = value;
    while (*p && !st) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        while (len && *p == ' ') p++, len--;
        if (len && (n == k->max_items || len >= k->size))
            st = bad(e, where, key, "'%s': too many or too long items", value, 0, 0);
        else if (len) {
            memcpy(rows + (size_t)n * k->size, p, len);
            n++;
        }
        if (!q) break;
        p = q + 1;
    }
    if (!st) {
        memcpy(base + k->off, rows, (size_t)k->max_items * k->size);
        *count = n;
    }
    free(rows);
    return st;
}

vx_status vx_settings_set(const vx_settings *s, const char *key0, const char *value,
                          const char *where, vx_err *e)
{
    const char *key = key0;
    for (const char *const *r = s->renamed; r && r[0]; r += 2)
        if (strcmp(r[0], key0) == 0) key = r[1];
    void *b = NULL;
    const vx_key *k = find(s, key, &b);
    if (!k) {
        if (where && *where) return vx_err_set(e, VX_ERR_ARG, "%s: unknown key '%s'", where, key0);
        return vx_err_set(e, VX_ERR_ARG, "unknown key '%s' (vixen train --keys lists them)", key0);
    }
    char *base = b;
    double v;
    vx_status st = VX_OK;
    switch (k->type) {
    case VX_KEY_INT:
    case VX_KEY_I64:
    case VX_KEY_U64:
    case VX_KEY_DBL:
        if (parse_num(value, &v)) return bad(e, where, key, "'%s' is not a number", value, 0, 0);
        if (v < k->min || v > k->max)
            return bad(e, where, key, "%s is outside %g .. %g", value, k->min, k->max);
        if (k->type != VX_KEY_DBL && v != floor(v))
            return bad(e, where, key, "%s is not a whole number", value, 0, 0);
        if (k->type == VX_KEY_INT) *(int *)(base + k->off) = (int)v;
        else if (k->type == VX_KEY_I64) *(int64_t *)(base + k->off) = (int64_t)v;
        else if (k->type == VX_KEY_U64) *(uint64_t *)(base + k->off) = (uint64_t)v;
        else *(double *)(base + k->off) = v;
        break;
    case VX_KEY_STR:
        if (strlen(value) >= k->size) return bad(e, where, key, "'%s' is too long", value, 0, 0);
        snprintf(base + k->off, k->size, "%s", value);
        break;
    case VX_KEY_ENUM: {
        int i = 0;
        while (k->names[i] && strcmp(k->names[i], value) != 0) i++;
        if (!k->names[i])
            return bad(e, where, key, "'%s' is not one of the choices (vixen train --keys)", value,
                       0, 0);
        *(int *)(base + k->off) = i;
        break;
    }
    case VX_KEY_INTLIST:
    case VX_KEY_STRLIST: st = set_list(k, base, key, value, where, e); break;
    }
    if (!st && k->flag_off >= 0) *(int *)(base + k->flag_off) = 1;
    return st;
}

vx_status vx_settings_load(const vx_settings *s, const char *path, vx_err *e)
{
    vx_kv *kv;
    size_t n;
    vx_status st = vx_yaml_read_flat(path, &kv, &n, e);
    if (st) return st;
    for (size_t i = 0; i < n && !st; i++) {
        char where[600];
        snprintf(where, sizeof where, "%s: line %d", path, kv[i].line);
        st = vx_settings_set(s, kv[i].key, kv[i].value, where, e);
    }
    free(kv);
    return st;
}

static void yaml_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

vx_status vx_settings_write(const vx_settings *s, FILE *f)
{
    for (int i = 0; i < s->n; i++) {
        const vx_section *sec = s->sec[i];
        const char *base = s->base[i];
        /* a section bound twice (its keys split over two structs) is one YAML map */
        if (i == 0 || strcmp(s->sec[i - 1]->name, sec->name) != 0) fprintf(f, "%s:\n", sec->name);
        for (size_t j = 0; j < sec->n_keys; j++) {
            const vx_key *k = &sec->keys[j];
            const char *p = base + k->off;
            int count = k->type == VX_KEY_INTLIST || k->type == VX_KEY_STRLIST
                            ? *(const int *)(base + k->count_off)
                            : 0;
            fprintf(f, "  %s: ", k->name);
            switch (k->type) {
            case VX_KEY_INT: fprintf(f, "%d", *(const int *)p); break;
            case VX_KEY_I64: fprintf(f, "%lld", (long long)*(const int64_t *)p); break;
            case VX_KEY_U64: fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)p); break;
            case VX_KEY_DBL: fprintf(f, "%.17g", *(const double *)p); break;
            case VX_KEY_STR: yaml_str(f, p); break;
            case VX_KEY_ENUM: fprintf(f, "%s", k->names[*(const int *)p]); break;
            case VX_KEY_INTLIST:
                fputc('[', f);
                for (int j2 = 0; j2 < count; j2++)
                    fprintf(f, "%s%d", j2 ? ", " : "", ((const int *)p)[j2]);
                fputc(']', f);
                break;
            case VX_KEY_STRLIST:
                fputc('[', f);
                for (int j2 = 0; j2 < count; j2++) {
                    if (j2) fputs(", ", f);
                    yaml_str(f, p + (size_t)j2 * k->size);
                }
                fputc(']', f);
                break;
            }
            fputc('\n', f);
        }
    }
    return ferror(f) ? VX_ERR_IO : VX_OK;
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

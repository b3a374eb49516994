/* space.c — the search space (hyperopt.h): reading the file, each parameter's coordinates, and
 * decoding a particle into key values.
 *
 * The file is read by the flat YAML reader every config goes through, so its sections are the
 * parameters ("dqn.lr: {type: …}") and their keys come back dotted ("dqn.lr.type"): the parameter
 * is everything before the last dot. */
#include "vixen/hyperopt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[] = {"float", "logfloat", "int", "logint", "categorical", NULL};

/* Keys a search may not move: those that define the market, its splits and what the objective
 * measures (moving them would compare trials on different validation data or costs), and those
 * the study sets itself. */
static const char *const fixed_keys[] = {
    "train.seed",         "train.run_dir",  "train.device",
    "train.final_test",   "env.commission", "env.tick",
    "env.slippage_ticks", "env.multiplier", NULL,
};
static const char *const fixed_sections[] = {"data.", "split.", NULL};

static vx_status bad(vx_err *e, const char *name, int line, const char *key, const char *fmt,
                     const char *arg)
{
    return vx_err_line(e, VX_ERR_FORMAT, name, line, key, fmt, arg);
}

/* A finite number, the whole text. */
static int parse_number(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

static vx_param *find_or_add(vx_space *s, const char *key, size_t klen, int line, const char *name,
                             vx_err *e, vx_status *st)
{
    for (int i = 0; i < s->n; i++)
        if (strlen(s->p[i].key) == klen && strncmp(s->p[i].key, key, klen) == 0) return &s->p[i];
    if (s->n == VX_SPACE_MAX_PARAMS) {
        *st = vx_err_line(e, VX_ERR_FORMAT, name, line, "", "more than %d parameters",
                          VX_SPACE_MAX_PARAMS);
        return NULL;
    }
    if (klen >= sizeof s->p[0].key) {
        *st = vx_err_line(e, VX_ERR_FORMAT, name, line, "", "a key of %zu characters", klen);
        return NULL;
    }
    vx_param *p = &s->p[s->n++];
    memset(p, 0, sizeof *p);
    memcpy(p->key, key, klen);
    p->key[klen] = '\0';
    p->type = (vx_param_type)-1;
    p->low = p->high = NAN;
    p->line = line;
    return p;
}

/* One "param.field: value" entry into its parameter. */
static vx_status take(vx_space *s, const vx_kv *kv, const char *name, vx_err *e)
{
    const char *dot = strrchr(kv->key, '.');
    vx_status st = VX_OK;
    if (!dot || dot == kv->key)
        return bad(e, name, kv->line, kv->key, "'%s' is not a parameter's field",
                   kv->key); /* cannot happen: the reader dots every key */
    vx_param *p = find_or_add(s, kv->key, (size_t)(dot - kv->key), kv->line, name, e, &st);
    if (!p) return st;
    const char *field = dot + 1, *v = kv->value;
    if (strcmp(field, "values") == 0) {
        if (!kv->items) return bad(e, name, kv->line, p->key, "%s: values must be a list", p->key);
        if (kv->n_items > VX_PARAM_MAX_VALUES)
            return vx_err_line(e, VX_ERR_FORMAT, name, kv->line, p->key,
                               "%s: %zu values (at most %d)", p->key, kv->n_items,
                               VX_PARAM_MAX_VALUES);
        for (size_t i = 0; i < kv->n_items; i++) {
            if (strlen(kv->items[i]) >= VX_PARAM_VALUE_LEN || !kv->items[i][0])
                return bad(e, name, kv->line, p->key, "%s: a value empty or too long", p->key);
            for (size_t j = 0; j < i; j++)
                if (strcmp(kv->items[j], kv->items[i]) == 0)
                    return bad(e, name, kv->line, p->key, "value '%s' given twice", kv->items[i]);
            snprintf(p->values[i], VX_PARAM_VALUE_LEN, "%s", kv->items[i]);
        }
        p->n_values = (int)kv->n_items;
        return VX_OK;
    }
    if (!v) return bad(e, name, kv->line, p->key, "%s: a list where one value belongs", field);
    if (strcmp(field, "type") == 0) {
        for (int t = 0; type_names[t]; t++)
            if (strcmp(v, type_names[t]) == 0) p->type = (vx_param_type)t;
        if ((int)p->type < 0)
            return bad(e, name, kv->line, p->key,
                       "type '%s' (float, logfloat, int, logint or categorical)", v);
    } else if (strcmp(field, "low") == 0 || strcmp(field, "high") == 0) {
        double x;
        if (!parse_number(v, &x))
            return vx_err_line(e, VX_ERR_FORMAT, name, kv->line, p->key, "%s: '%s' is not a number",
                               field, v);
        *(field[0] == 'l' ? &p->low : &p->high) = x;
    } else if (strcmp(field, "encoding") == 0) {
        if (strcmp(v, "round") == 0) p->encoding = VX_ENCODE_ROUND;
        else if (strcmp(v, "score") == 0) p->encoding = VX_ENCODE_SCORE;
        else return bad(e, name, kv->line, p->key, "encoding '%s' (round or score)", v);
    } else {
        return bad(e, name, kv->line, p->key,
                   "unknown field '%s' (type, low, high, values, encoding)", field);
    }
    return VX_OK;
}

static int is_whole(double x) { return x == floor(x) && fabs(x) < 9e15; }

/* The parameter complete and consistent; its coordinates appended to the space. */
static vx_status finish(vx_space *s, vx_param *p, const char *name, vx_err *e)
{
    int L = p->line;
    if ((int)p->type < 0) return bad(e, name, L, p->key, "%s: no type", p->key);
    for (int i = 0; fixed_keys[i]; i++)
        if (strcmp(p->key, fixed_keys[i]) == 0)
            return bad(e, name, L, p->key,
                       "%s is not searched: it defines the market, the costs or the run the "
                       "objective is measured on, or the study sets it",
                       p->key);
    for (int i = 0; fixed_sections[i]; i++)
        if (strncmp(p->key, fixed_sections[i], strlen(fixed_sections[i])) == 0)
            return bad(e, name, L, p->key,
                       "%s is not searched: the data and splits are what every trial is compared "
                       "on",
                       p->key);
    int cat = p->type == VX_PARAM_CATEGORICAL;
    if (cat) {
        if (!isnan(p->low) || !isnan(p->high))
            return bad(e, name, L, p->key, "%s: a categorical parameter takes values, not low/high",
                       p->key);
        if (p->n_values < 2)
            return bad(e, name, L, p->key, "%s: needs a list of at least 2 values", p->key);
    } else {
        if (p->n_values)
            return bad(e, name, L, p->key, "%s: values belong to a categorical parameter", p->key);
        if (p->encoding != VX_ENCODE_ROUND)
            return bad(e, name, L, p->key, "%s: encoding belongs to a categorical parameter",
                       p->key);
        if (isnan(p->low) || isnan(p->high))
            return bad(e, name, L, p->key, "%s: needs low and high", p->key);
        if (!(p->low < p->high))
            return bad(e, name, L, p->key, "%s: low must be below high", p->key);
        if ((p->type == VX_PARAM_INT || p->type == VX_PARAM_LOGINT) &&
            (!is_whole(p->low) || !is_whole(p->high)))
            return bad(e, name, L, p->key, "%s: low and high of an integer must be whole", p->key);
        if (p->type == VX_PARAM_LOGFLOAT && !(p->low > 0))
            return bad(e, name, L, p->key, "%s: a logfloat needs low > 0", p->key);
        if (p->type == VX_PARAM_LOGINT && !(p->low >= 1))
            return bad(e, name, L, p->key, "%s: a logint needs low >= 1", p->key);
    }
    p->dim = s->dims;
    p->n_dims = cat && p->encoding == VX_ENCODE_SCORE ? p->n_values : 1;
    if (s->dims + p->n_dims > VX_SPACE_MAX_DIMS)
        return bad(e, name, L, p->key, "more than %s coordinates in all", "128");
    for (int d = 0; d < p->n_dims; d++) {
        double lo, hi;
        switch (p->type) {
        case VX_PARAM_FLOAT: lo = p->low, hi = p->high; break;
        case VX_PARAM_LOGFLOAT: lo = log(p->low), hi = log(p->high); break;
        /* each whole number owns the unit interval around it */
        case VX_PARAM_INT: lo = p->low - 0.5, hi = p->high + 0.5; break;
        case VX_PARAM_LOGINT: lo = log(p->low - 0.5), hi = log(p->high + 0.5); break;
        default:
            if (p->encoding == VX_ENCODE_SCORE) lo = 0, hi = 1;
            else lo = -0.5, hi = p->n_values - 0.5;
        }
        s->lo[s->dims + d] = lo;
        s->hi[s->dims + d] = hi;
    }
    s->dims += p->n_dims;
    return VX_OK;
}

vx_status vx_space_load_text(vx_space *s, const char *text, size_t len, const char *name, vx_err *e)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    vx_kv *kv;
    size_t n;
    vx_status st = vx_yaml_read_flat_text(text, len, name, &kv, &n, e);
    if (st) return st;
    for (size_t i = 0; i < n && !st; i++) st = take(s, &kv[i], name, e);
    vx_kv_free(kv, n);
    for (int i = 0; i < s->n && !st; i++) st = finish(s, &s->p[i], name, e);
    /* a trial keeps its values as "key=value" lines (vx_trial.params): the longest must fit */
    size_t chars = 0;
    for (int i = 0; i < s->n && !st; i++) {
        size_t v = 25; /* a number written %.17g */
        for (int k = 0; k < s->p[i].n_values; k++)
            if (strlen(s->p[i].values[k]) > v) v = strlen(s->p[i].values[k]);
        chars += strlen(s->p[i].key) + 1 + v + 1;
    }
    if (!st && chars >= sizeof(((vx_trial *)0)->params))
        st = vx_err_line(e, VX_ERR_FORMAT, name, -1, "",
                         "the parameters' keys and values take up to %zu characters as text (a "
                         "trial records at most %zu): fewer or shorter ones",
                         chars, sizeof(((vx_trial *)0)->params) - 1);
    if (!st && s->n == 0)
        st = vx_err_line(e, VX_ERR_FORMAT, name, -1, "", "no parameters: nothing to search");
    return st;
}

vx_status vx_space_load(vx_space *s, const char *path, vx_err *e)
{
    uint8_t *text;
    size_t n;
    vx_status st = vx_file_read_all(path, &text, &n, e);
    if (st) return st;
    st = vx_space_load_text(s, (const char *)text, n, path, e);
    free(text);
    return st;
}

/* Parameter p's coordinate value(s) at x → the chosen value's index (categorical) or the number. */
static double decode(const vx_space *s, const vx_param *p, const double *x)
{
    (void)s;
    double c = x[p->dim];
    switch (p->type) {
    case VX_PARAM_FLOAT: return fmin(fmax(c, p->low), p->high);
    case VX_PARAM_LOGFLOAT: return fmin(fmax(exp(c), p->low), p->high);
    case VX_PARAM_INT: return fmin(fmax(floor(c + 0.5), p->low), p->high);
    case VX_PARAM_LOGINT: return fmin(fmax(floor(exp(c) + 0.5), p->low), p->high);
    default:
        if (p->encoding == VX_ENCODE_ROUND) return fmin(fmax(floor(c + 0.5), 0), p->n_values - 1);
        int best = 0; /* the highest score; ties to the first */
        for (int k = 1; k < p->n_values; k++)
            if (x[p->dim + k] > x[p->dim + best]) best = k;
        return best;
    }
}

void vx_space_value(const vx_space *s, int i, const double *x, char *out, size_t n)
{
    const vx_param *p = &s->p[i];
    double v = decode(s, p, x);
    if (p->type == VX_PARAM_CATEGORICAL) snprintf(out, n, "%s", p->values[(int)v]);
    else if (p->type == VX_PARAM_INT || p->type == VX_PARAM_LOGINT) snprintf(out, n, "%.0f", v);
    else snprintf(out, n, "%.17g", v); /* the exact double: a trial's config reads back to it */
}

vx_status vx_space_apply(const vx_space *s, const double *x, vx_train_cfg *c, vx_err *e)
{
    for (int i = 0; i < s->n; i++) {
        char v[VX_PARAM_VALUE_LEN];
        vx_space_value(s, i, x, v, sizeof v);
        vx_status st = vx_train_cfg_set(c, s->p[i].key, v, "search space", e);
        if (st) return st;
    }
    return VX_OK;
}

int vx_space_has(const vx_space *s, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->p[i].key, key) == 0) return 1;
    return 0;
}

/* Sets `value` on a copy of base as parameter p would; a refusal names the space's file and p's
 * line and key. */
static vx_status try_value(const vx_space *s, const vx_param *p, const vx_train_cfg *base,
                           const char *value, vx_train_cfg *c, vx_err *e)
{
    *c = *base;
    vx_status st = vx_train_cfg_set(c, p->key, value, NULL, e);
    if (st && e) { /* the key's own prefix dropped: the field names it */
        char why[sizeof e->msg];
        size_t k = strlen(p->key);
        int prefixed = strncmp(e->msg, p->key, k) == 0 && strncmp(e->msg + k, ": ", 2) == 0;
        snprintf(why, sizeof why, "%s", e->msg + (prefixed ? k + 2 : 0));
        vx_err_line(e, st, s->name, p->line, p->key, "%s", why);
    }
    return st;
}

vx_status vx_space_check(const vx_space *s, const vx_train_cfg *base, vx_err *e)
{
    vx_train_cfg *c = malloc(sizeof *c);
    if (!c) return vx_err_set(e, VX_ERR_NOMEM, "search space: out of memory");
    vx_status st = VX_OK;
    /* a key of another algorithm than the trials train would be searched with no effect on them */
    const char *trains = vx_train_algo(base)->name;
    for (int i = 0; i < s->n && !st && !vx_space_has(s, "train.algo"); i++) {
        int a = vx_train_key_algo(s->p[i].key);
        if (a >= 0 && a != base->algo)
            st = vx_err_line(e, VX_ERR_ARG, s->name, s->p[i].line, s->p[i].key,
                             "a setting of %s, but the trials train %s: set train.algo=%s "
                             "(--algo %s) or leave the key out",
                             vx_algo_at(a)->name, trains, vx_algo_at(a)->name, vx_algo_at(a)->name);
    }
    for (int i = 0; i < s->n && !st; i++) {
        const vx_param *p = &s->p[i];
        if (p->type == VX_PARAM_CATEGORICAL) {
            for (int k = 0; k < p->n_values && !st; k++)
                st = try_value(s, p, base, p->values[k], c, e);
            continue;
        }
        char v[3][VX_PARAM_VALUE_LEN];
        int whole = p->type == VX_PARAM_INT || p->type == VX_PARAM_LOGINT;
        const char *fmt = whole ? "%.0f" : "%.17g";
        snprintf(v[0], sizeof v[0], fmt, p->low);
        snprintf(v[1], sizeof v[1], fmt, p->high);
        snprintf(v[2], sizeof v[2], fmt,
                 whole ? floor((p->low + p->high) / 2) : (p->low + p->high) / 2);
        for (int k = 0; k < 3 && !st; k++) st = try_value(s, p, base, v[k], c, e);
    }
    free(c);
    return st;
}

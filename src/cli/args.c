/* args.c — see args.h. */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_help(const vx_cmd *c)
{
    printf("usage: %s%s%s%s\n\n%s\n", c->cmd, c->n_opts ? " [options]" : "", c->usage ? " " : "",
           c->usage ? c->usage : "", c->about);
    if (c->n_opts) printf("\noptions:\n");
    for (size_t i = 0; i < c->n_opts; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", c->opts[i].name, c->opts[i].arg ? " " : "",
                 c->opts[i].arg ? c->opts[i].arg : "");
        printf("  %-24s %s\n", left, c->opts[i].help);
    }
    printf("  %-24s %s\n", "--help", "show this help");
}

int vx_args_parse(const vx_cmd *c, int argc, char **argv, const char **pos, size_t *n_pos)
{
    *n_pos = 0;
    int only_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (!only_pos && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            print_help(c);
            return 1;
        }
        if (!only_pos && a[0] == '-' && a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t nl = eq ? (size_t)(eq - name) : strlen(name);
            vx_opt *o = NULL;
            for (size_t k = 0; k < c->n_opts; k++)
                if (strlen(c->opts[k].name) == nl && strncmp(c->opts[k].name, name, nl) == 0)
                    o = &c->opts[k];
            if (!o) {
                fprintf(stderr, "%s: unknown option '--%.*s' (see --help)\n", c->cmd, (int)nl,
                        name);
                return 2;
            }
            if (!o->arg) {
                if (eq) {
                    fprintf(stderr, "%s: option '--%s' takes no value\n", c->cmd, o->name);
                    return 2;
                }
                *o->flag = 1;
            } else {
                const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
                if (!v) {
                    fprintf(stderr, "%s: option '--%s' needs a value (%s)\n", c->cmd, o->name,
                            o->arg);
                    return 2;
                }
                if (o->list) {
                    if (*o->n_list >= o->list_max) {
                        fprintf(stderr, "%s: option '--%s' given more than %d times\n", c->cmd,
                                o->name, o->list_max);
                        return 2;
                    }
                    o->list[(*o->n_list)++] = v;
                } else if (*o->value) { /* which one was meant? (the last had won silently) */
                    fprintf(stderr, "%s: option '--%s' given twice ('%s', then '%s')\n", c->cmd,
                            o->name, *o->value, v);
                    return 2;
                } else {
                    *o->value = v;
                }
            }
            continue;
        }
        if (!only_pos && a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", c->cmd, a);
            return 2;
        }
        if (*n_pos >= c->max_pos) {
            fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", c->cmd, a);
            return 2;
        }
        pos[(*n_pos)++] = a;
    }
    if (*n_pos < c->min_pos) {
        fprintf(stderr, "%s: missing argument %s (see --help)\n", c->cmd, c->usage ? c->usage : "");
        return 2;
    }
    return 0;
}

int vx_arg_long(const vx_cmd *c, const char *name, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: --%s must be a whole number in %ld..%ld, got '%s'\n", c->cmd, name, lo,
                hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int vx_arg_double(const vx_cmd *c, const char *name, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "%s: --%s must be a number, got '%s'\n", c->cmd, name, s);
        return -1;
    }
    *out = v;
    return 0;
}

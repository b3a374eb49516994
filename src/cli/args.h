/* args.h — the command-line option parser shared by every `vixen` command.
 *
 * Options are `--name value`, `--name=value` or flags; everything else is positional. `--help`
 * prints the command's usage. Unknown options and missing values print one line and return 2,
 * the exit code for usage errors. */
#ifndef VIXEN_CLI_ARGS_H
#define VIXEN_CLI_ARGS_H

#include <stddef.h>

typedef struct {
    const char *name; /* without the dashes */
    const char *arg;  /* value placeholder for help, NULL for a flag */
    const char *help;
    const char **value; /* receives the value (options) */
    int *flag;          /* set to 1 (flags) */
    const char **list;  /* repeatable options: each value appended here … */
    int *n_list;        /* … counted here … */
    int list_max;       /* … up to this many */
} vx_opt;

typedef struct {
    const char *cmd;   /* "vixen data synth" */
    const char *usage; /* positional part, e.g. "FILE..." */
    const char *about; /* one paragraph */
    vx_opt *opts;
    size_t n_opts;
    size_t min_pos, max_pos;
} vx_cmd;

/* Returns 0 to go on, 1 when help was printed (exit 0), 2 on a usage error (exit 2). */
int vx_args_parse(const vx_cmd *c, int argc, char **argv, const char **pos, size_t *n_pos);

/* Parses a whole number / a float option value; prints an error and returns -1 when invalid. */
int vx_arg_long(const vx_cmd *c, const char *name, const char *s, long lo, long hi, long *out);
int vx_arg_double(const vx_cmd *c, const char *name, const char *s, double *out);

#endif

/* cli.h — the `vixen` commands. Each takes the arguments after its own name and returns the
 * process exit code: 0 success, 1 failure (the error already printed), 2 usage error. */
#ifndef VIXEN_CLI_H
#define VIXEN_CLI_H

#define VX_EXIT_OK 0
#define VX_EXIT_FAIL 1
#define VX_EXIT_USAGE 2
#define VX_EXIT_INTERRUPTED 130 /* 128 + SIGINT, as shells report it */

int vx_cmd_data(int argc, char **argv);
int vx_cmd_env(int argc, char **argv);
int vx_cmd_bench(int argc, char **argv);
int vx_cmd_train(int argc, char **argv);
int vx_cmd_eval(int argc, char **argv);
int vx_cmd_report(int argc, char **argv);
int vx_cmd_hyperopt(int argc, char **argv);

/* Shared by train and hyperopt (cmd_train.c): --set KEY=VALUE overrides, and data files given as
 * arguments; each returns an exit code (the error printed). */
#include <stddef.h>
#include "vixen/train.h"
int vx_cli_apply_sets(vx_train_cfg *c, const char **sets, int n);
/* A --set of another algorithm's key than c trains (ppo.lr for the DQN) is a usage error: it would
 * change nothing, most likely for want of --algo. */
int vx_cli_sets_for_algo(const vx_train_cfg *c, const char **sets, int n);
/* Warns of each key in the config file at path that belongs to another algorithm than c's. */
int vx_cli_config_for_algo(const vx_train_cfg *c, const char *path);
int vx_cli_set_files(vx_train_cfg *c, const char **pos, size_t np);

#endif

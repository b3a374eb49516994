/* eval_internal.h — what the evaluation's files share inside src/train: the baseline fitting
 * (baselines.c) walks a rule over the training split with eval.c's walk. */
#ifndef VIXEN_EVAL_INTERNAL_H
#define VIXEN_EVAL_INTERNAL_H

#include "vixen/eval.h"

/* The annualised Sharpe ratio of rule `kind` (a baseline row) with parameters b on a split. */
vx_status vx_eval_rule_sharpe(const vx_market *m, const vx_env_cfg *c, vx_split split,
                              vx_eval_row kind, const vx_baselines *b, double *sharpe, vx_err *e);

#endif

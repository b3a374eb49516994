/* group.h — what a member's run (run.c) asks of its group (group.c; train.h has the rest).
 * Internal to the train layer. */
#ifndef VIXEN_TRAIN_GROUP_H
#define VIXEN_TRAIN_GROUP_H

#include "vixen/train.h"

/* Member k's instance: waits until every member has joined or left, and the first of them to see
 * that makes all the instances (ops->create_group) on the group's share. in: member k's init
 * (its dev is replaced by the group's). */
vx_status vx_train_group_join(vx_train_group *g, int k, const vx_algo_ops *ops,
                              const vx_algo_init *in, vx_algo **out, vx_err *e);
/* Member k's epoch: waits until every member still in the group has asked, and the last to ask
 * runs them all (ops->epoch_group). out: as the run prepared it (metrics NaN); then member k's. */
vx_status vx_train_group_epoch(vx_train_group *g, int k, const vx_epoch_in *in, vx_epoch_out *out,
                               vx_err *e);

#endif

/* dqn_ref64.h — one learner update worked out plainly in float64, for the CPU and CUDA learner
 * tests, and the small fixed case both feed it.
 *
 * The network's forward and backward passes are qnet_f64's (qnet_impl.h compiled with double);
 * everything else is written out here from the definitions in dqn_loss.h, nn.h and optim_math.h,
 * without calling them: the Double-DQN target (argmax by the online network, value by the target
 * network, mean over branches, γ^m, no bootstrap after termination only), δ, Huber or MSE, dLoss/dQ
 * (IS weight · 1/K · 1/B), the global gradient norm and the clip, Adam with bias correction and
 * decoupled weight decay, and the hard target copy every target_every updates. */
#ifndef VIXEN_TEST_DQN_REF64_H
#define VIXEN_TEST_DQN_REF64_H

#include <stdint.h>
#include "vixen/dqn.h"

/* The fixed case: 6 transitions on a network of input 4, trunk [8, 8], heads 4, branches 9, 3, 3 */
enum { REF64_B = 6, REF64_D = 4 };

typedef struct {
    float obs[REF64_B * REF64_D], next_obs[REF64_B * REF64_D], rewards[REF64_B], weights[REF64_B];
    int32_t actions[REF64_B * VX_ACTION_BRANCHES];
    uint8_t terminated[REF64_B], truncated[REF64_B], steps[REF64_B];
    uint32_t index[REF64_B], gen[REF64_B];
} ref64_batch;

/* The learner's settings, its network and the batch. multi_step_clip = 1: n-step counts 1 and 3
 * and a clip that triggers; 0: every count 1 and no clip. */
void ref64_case(int multi_step_clip, vx_dqn_cfg *c, vx_qnet_cfg *q, ref64_batch *b);
/* The batch as the learner takes it (host pointers into b). */
vx_replay_batch ref64_view(ref64_batch *b);
/* A target network away from the online one, so that the online and target argmaxes differ. */
void ref64_target(const vx_qnet_layout *L, float *target);

typedef struct {
    const vx_qnet_layout *L;
    vx_dqn_cfg cfg;
    double *online, *target, *m, *v; /* n_params each */
    double *grads; /* the last update's gradient as Adam received it (after the clip) */
    long long t, updates;
} ref64;

typedef struct {
    double loss;      /* mean over the batch of w · (1/K) Σ_k ℓ(δ_k) */
    double grad_norm; /* before clipping */
    double clip_scale;
    double priority[REF64_B]; /* (1/K) Σ_k |δ_k| */
    /* what the batch exercised, for the tests to assert before trusting a comparison */
    double argmax_gap; /* smallest lead of an online argmax over the runner-up, live rows */
    double relu_gap;   /* smallest |input| of a ReLU in the three forward passes */
    int beyond_kappa, within_kappa;
    double double_dqn_gap; /* largest |bootstrap by online argmax − by target argmax|, live rows */
} ref64_out;

/* Starts from the learner's float weights (target as given; Adam's moments zero). */
int ref64_init(ref64 *r, const vx_qnet_layout *L, const vx_dqn_cfg *c, const float *online,
               const float *target);
void ref64_free(ref64 *r);
/* One update on B ≤ REF64_B rows of b. */
void ref64_update(ref64 *r, const vx_replay_batch *b, int B, ref64_out *out);

/* A learner's state after the same update (host copies). */
typedef struct {
    const float *online, *target, *adam_m, *adam_v, *priority;
    double loss, grad_norm;
    long long adam_t;
} ref64_seen;

/* cmocka assertions of a learner's update against the reference's (each says which wrong
 * programs it catches): loss, norm, priorities and moments within `tol` relative, every weight
 * within wtol + tol·|w|, the target network exactly as it should be; first, that the case
 * exercises what they are meant to catch. Prints the largest errors. */
void ref64_check(const char *who, const ref64 *r, const ref64_out *o, const ref64_seen *s, int B,
                 double tol, double wtol);

#endif

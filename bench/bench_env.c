/* bench_env.c — environment stepping speed with a random policy, observation writes included. */
#include "bench.h"
#include "vixen/philox.h"
#include <math.h>

#include <stdlib.h>

#define ACTION_TABLES 64

vx_status vx_bench_env_run(const vx_market *m, const vx_env_cfg *cfg, size_t envs, size_t steps,
                           vx_env_bench_stats *out, FILE *progress, vx_err *e)
{
    vx_env *env;
    vx_status st = vx_env_create(cfg, m, VX_SPLIT_TRAIN, envs, NULL, &env, e);
    if (st) return st;
    /* random actions drawn before timing, so the figure is the environment's alone */
    int32_t *acts = malloc(ACTION_TABLES * envs * VX_ACTION_BRANCHES * sizeof *acts);
    float *obs = malloc(envs * VX_OBS_DIM * sizeof *obs);
    float *rew = malloc(envs * sizeof *rew);
    uint8_t *term = malloc(envs), *trunc = malloc(envs);
    double *ep_ret = calloc(envs, sizeof *ep_ret);
    if (!acts || !obs || !rew || !term || !trunc || !ep_ret) {
        st = vx_err_set(e, VX_ERR_NOMEM, "env bench: out of memory");
        goto done;
    }
    vx_rng r = vx_rng_make(cfg->seed, 0xBE4C, 0);
    for (size_t i = 0; i < ACTION_TABLES * envs; i++) {
        int32_t *a = acts + i * VX_ACTION_BRANCHES;
        a[0] = (int32_t)vx_rng_below(&r, VX_EXPOSURE_LEVELS);
        a[1] = (int32_t)vx_rng_below(&r, VX_ORDER_TYPES);
        a[2] = (int32_t)vx_rng_below(&r, VX_URGENCY_LEVELS);
    }
    vx_progress pr;
    vx_progress_start(&pr, progress, "env bench", "steps", steps);
    double sum_r = 0, sum_ep = 0;
    size_t ended = 0, terminated = 0;
    uint64_t t0 = vx_now_ns();
    for (size_t t = 0; t < steps; t++) {
        st = vx_env_step(env, acts + (t % ACTION_TABLES) * envs * VX_ACTION_BRANCHES, obs, rew,
                         term, trunc, NULL, NULL, e);
        if (st) goto done;
        for (size_t i = 0; i < envs; i++) {
            sum_r += rew[i];
            ep_ret[i] += rew[i];
            if (term[i] | trunc[i]) {
                ended++;
                terminated += term[i];
                sum_ep += ep_ret[i];
                ep_ret[i] = 0;
            }
        }
        vx_progress_update(&pr, t + 1);
    }
    double secs = vx_seconds_since(t0);
    vx_progress_finish(&pr, steps);
    out->seconds = secs;
    out->env_steps_per_s = (double)(envs * steps) / secs;
    out->episodes_ended = ended;
    out->terminated = terminated;
    out->mean_reward = sum_r / (double)(envs * steps);
    out->mean_episode_return = ended ? sum_ep / (double)ended : NAN; /* none ended: no mean */
done:
    free(acts);
    free(obs);
    free(rew);
    free(term);
    free(trunc);
    free(ep_ret);
    vx_env_free(env);
    return st;
}

/* cmd_env.c — `vixen env bench`: N environments stepped by a random policy.
 *
 * The market is the synthetic one by default, or the files given (through the feature cache).
 * Prints env-steps per second on one core, observation writes included, and what the random
 * policy earned — which, with costs, should be negative. */
#include "args.h"
#include "bench.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vx_cmd_env(int argc, char **argv)
{
    if (argc < 1 || strcmp(argv[0], "bench") != 0) {
        if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
            printf("usage: vixen env bench [options] [FILE...] (see vixen env bench --help)\n");
            return VX_EXIT_OK;
        }
        fprintf(stderr, "vixen env: expected the subcommand 'bench' (see vixen env --help)\n");
        return VX_EXIT_USAGE;
    }
    const char *envs_s = NULL, *steps_s = NULL, *days_s = NULL, *seed_s = NULL, *cache = NULL,
               *instrument = NULL;
    int json = 0;
    vx_opt opts[] = {
        {"envs", "N", "environments stepped at once (default 4096)", &envs_s, NULL, NULL, NULL, 0},
        {"steps", "T", "steps of every environment (default 2000)", &steps_s, NULL, NULL, NULL, 0},
        {"days", "D", "days of synthetic market when no FILE is given (default 60)", &days_s, NULL,
         NULL, NULL, 0},
        {"seed", "S", "seed of the market and the episodes (default 1)", &seed_s, NULL, NULL, NULL,
         0},
        {"cache", "DIR", "feature cache folder for FILE inputs", &cache, NULL, NULL, NULL, 0},
        {"instrument", "ID|SYMBOL", "instrument of multi-instrument DBN files", &instrument, NULL,
         NULL, NULL, 0},
        {"json", NULL, "print the result as JSON", NULL, &json, NULL, NULL, 0},
    };
    vx_cmd c = {"vixen env bench",
                "[FILE...]",
                "Steps N trading environments with uniformly random actions on one core and "
                "reports env-steps per second (observation writes included) and the policy's "
                "mean reward.",
                opts,
                sizeof opts / sizeof *opts,
                0,
                4096};
    static const char *pos[4096]; /* c.max_pos: no allocation to fail */
    size_t np;
    int rc = vx_args_parse(&c, argc - 1, argv + 1, pos, &np);
    long envs = 4096, steps = 2000, days = 60, seed = 1;
    if (!rc && envs_s && vx_arg_long(&c, "envs", envs_s, 1, 10000000, &envs)) rc = 2;
    if (!rc && steps_s && vx_arg_long(&c, "steps", steps_s, 1, 100000000, &steps)) rc = 2;
    /* 4 days: the fewest whose training split holds an episode (390 bars) past the warm-up and
     * the validation and test splits with their gaps */
    if (!rc && days_s && vx_arg_long(&c, "days", days_s, 4, 50000, &days)) rc = 2;
    if (!rc && days_s && np) {
        fprintf(stderr,
                "vixen env bench: --days sizes the synthetic market; FILE gives the bars\n");
        rc = 2;
    }
    if (!rc && seed_s && vx_arg_long(&c, "seed", seed_s, 0, 2147483647L, &seed)) rc = 2;
    if (rc) return rc == 1 ? VX_EXIT_OK : VX_EXIT_USAGE;
    vx_market m;
    vx_err err;
    vx_status st;
    if (np) {
        char dir[4096]; /* the default folder; --cache is passed as given, whatever its length */
        vx_cache_default_dir(dir, sizeof dir);
        if (!cache && strlen(dir) + 1 >= sizeof dir) {
            fprintf(stderr,
                    "vixen: %.200s…: the default cache folder's path is too long; give "
                    "--cache\n",
                    dir);
            return VX_EXIT_FAIL;
        }
        vx_load_opts lo = {.instrument = instrument};
        st = vx_market_open(pos, np, &lo, cache ? cache : dir, &m, &err);
    } else {
        vx_synth_cfg sc;
        vx_synth_default(&sc);
        sc.days = (int)days;
        sc.seed = (uint64_t)seed;
        vx_series s = {0};
        st = vx_synth_generate(&sc, &s, NULL, &err);
        if (!st) st = vx_market_from_series(&s, &m, &err);
        vx_series_free(&s);
    }
    if (st) {
        fprintf(stderr, "vixen: %s\n", err.msg);
        return VX_EXIT_FAIL;
    }
    vx_env_cfg ec;
    vx_env_cfg_default(&ec);
    ec.seed = (uint64_t)seed;
    vx_env_bench_stats bs;
    st = vx_bench_env_run(&m, &ec, (size_t)envs, (size_t)steps, &bs, json ? NULL : stderr, &err);
    if (st) {
        vx_market_close(&m);
        fprintf(stderr, "vixen: %s\n", err.msg);
        return VX_EXIT_FAIL;
    }
    /* no episode ended: no mean return (null in JSON, "-" in text), not a return of 0 */
    char ret[32] = "-";
    if (bs.episodes_ended) snprintf(ret, sizeof ret, "%.3f", bs.mean_episode_return);
    if (json) {
        char jret[32] = "null";
        if (bs.episodes_ended) snprintf(jret, sizeof jret, "%.6g", bs.mean_episode_return);
        printf("{\"envs\": %ld, \"steps\": %ld, \"seconds\": %.6f, \"env_steps_per_s\": %.6g, "
               "\"episodes_ended\": %zu, \"terminated\": %zu, \"mean_reward\": %.6g, "
               "\"mean_episode_return\": %s}\n",
               envs, steps, bs.seconds, bs.env_steps_per_s, bs.episodes_ended, bs.terminated,
               bs.mean_reward, jret);
    } else {
        char rate[32];
        printf("market: %s, %zu bars, %zu feature rows\n", m.instrument, m.n_bars, m.rows);
        printf("env bench: %ld envs x %ld steps in %.3f s = %s env-steps/s (one core)\n", envs,
               steps, bs.seconds, vx_format_count(bs.env_steps_per_s, rate, sizeof rate));
        printf("random policy: %zu episodes ended (%zu stopped out), mean reward %.4f per step, "
               "mean episode return %s\n",
               bs.episodes_ended, bs.terminated, bs.mean_reward, ret);
    }
    vx_market_close(&m);
    return VX_EXIT_OK;
}

/* test_study_mpi.c — a study over MPI ranks (hyperopt.h, "across processes"), on the CPU with tiny
 * DQN trials, through `mpirun --oversubscribe` on this machine.
 *
 * - The same study at 1, 2 and 3 ranks, and at 3 ranks with rank 0 only coordinating, gives the
 *   single-process study's trials bit for bit (parameters, seeds, statuses, objectives), its
 *   best.yaml and its test evaluation; every rank reported its device, and the ranks that run
 *   trials each ran some (the store records who ran what: a study that ignored its workers would
 *   give the same results, so this is what catches it).
 * - A worker rank killed (SIGKILL) mid-study takes the job down, and one interrupted alone (SIGINT
 *   to it, not through mpirun) makes rank 0 stop the study; either way --resume (at 2 ranks) ends
 *   with the uninterrupted result, and the trials finished before were not run again.
 * - The Slurm script and the MPI Operator manifest of examples/mpi: their keys, rank counts that
 *   match the resources they ask for, and vixen command lines the command accepts.
 * Skipped (77) in a build without MPI or where mpirun is missing. */
#include "helpers.h"
#include "hyperopt/study_common.h"
#include "hyperopt/study_internal.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

/* mpirun as root (CI), on this node only (no ssh), more ranks than cores, and no single-copy
 * shared-memory transfers (ptrace is often not allowed in containers). In the sanitizer build the
 * ranks run without leak detection: OpenMPI leaves thousands of blocks allocated at MPI_Finalize
 * from components it has unloaded by then, whose frames cannot be named or suppressed (memory
 * errors are still caught; vixen's own leaks are checked by the single-process tests). */
#define MPI_ENV                                                                                    \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated "             \
    "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 "           \
    "ASAN_OPTIONS=detect_leaks=0 "

static char out[1 << 16], err[1 << 16];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    static char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return th_run(cmd, out, sizeof out, err, sizeof err);
}

/* The end of what the last command wrote to stderr (where its error is). */
static const char *err_tail(void)
{
    size_t n = strlen(err);
    return n > 1500 ? err + n - 1500 : err;
}

static char *read_text(const char *path)
{
    size_t n;
    uint8_t *b = th_read(path, &n);
    char *t = realloc(b, n + 1);
    t[n] = '\0';
    return t;
}

static void assert_same_file(const char *a, const char *b, const char *name)
{
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", a, name);
    snprintf(pb, sizeof pb, "%s/%s", b, name);
    char *x = read_text(pa), *y = read_text(pb);
    if (strcmp(x, y) != 0) fail_msg("%s differs between %s and %s", name, a, b);
    free(x), free(y);
}

/* Trials each rank ran (ranks[0 .. 7]). */
static void ranks_of(const char *dir, int *ranks)
{
    memset(ranks, 0, 8 * sizeof *ranks);
    size_t n;
    vx_trial *t = trials_of(dir, &n);
    for (size_t i = 0; i < n; i++)
        if (t[i].rank >= 0 && t[i].rank < 8) ranks[t[i].rank]++;
    free(t);
}

static void test_ranks_give_the_single_process_result(void **state)
{
    (void)state;
    char root[64], space[128];
    study_folder(root, sizeof root, space, sizeof space);
    const char *study = "--swarm 6 --generations 3";
    if (sh("%s hyperopt %s " SMALL " %s --study %s/ref", VX_BINARY, space, study, root) != 0)
        fail_msg("%s", err);
    static const struct {
        int ranks, coordinate_only;
    } runs[] = {{1, 0}, {2, 0}, {3, 0}, {3, 1}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int k = runs[i].ranks, co = runs[i].coordinate_only;
        char dir[128], ref[128];
        snprintf(dir, sizeof dir, "%s/m%d%s", root, k, co ? "c" : "");
        snprintf(ref, sizeof ref, "%s/ref", root);
        int rc = sh(MPI_ENV "mpirun -np %d %s hyperopt %s " SMALL " %s --study %s%s", k, VX_BINARY,
                    space, study, dir, co ? " --coordinate-only" : "");
        if (rc != 0) fail_msg("%d ranks: exit %d: ...%s", k, rc, err_tail());
        assert_same_trials(ref, dir, -1);
        assert_same_file(ref, dir, "test.txt");
        int ranks[8];
        ranks_of(dir, ranks);
        for (int r = 1; r < k; r++) { /* each worker said where it runs, and ran trials */
            char said[32];
            snprintf(said, sizeof said, "rank %d on ", r);
            if (!strstr(err, said)) fail_msg("%d ranks: no '%s' line:\n%s", k, said, err);
            if (ranks[r] == 0) fail_msg("%d ranks: rank %d ran no trial", k, r);
        }
        if (co && ranks[0]) fail_msg("rank 0 only coordinates, yet ran %d trials", ranks[0]);
        if (k == 1 && ranks[0] != 18) fail_msg("one rank ran %d of 18 trials", ranks[0]);
        print_message("%d rank%s%s: the single-process study's 18 trials and best; trials by "
                      "rank %d %d %d\n",
                      k, k > 1 ? "s" : "", co ? " (rank 0 coordinating)" : "", ranks[0], ranks[1],
                      ranks[2]);
    }
    th_rmtree(root);
}

/* The pid of the vixen process of MPI rank `rank` whose command line holds `mark`, or 0. */
static pid_t rank_pid(int rank, const char *mark)
{
    DIR *d = opendir("/proc");
    pid_t found = 0;
    struct dirent *de;
    char want[48];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    while (d && !found && (de = readdir(d))) {
        pid_t pid = (pid_t)atol(de->d_name);
        if (pid <= 0) continue;
        char path[64];
        size_t n;
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        char cmd[4096];
        n = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i++) cmd[i] = cmd[i] ? cmd[i] : ' ';
        cmd[n] = '\0';
        if (!strstr(cmd, mark) || !strstr(cmd, "hyperopt") || strstr(cmd, "mpirun")) continue;
        snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
        f = fopen(path, "rb");
        if (!f) continue;
        static char env[1 << 16];
        n = fread(env, 1, sizeof env - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i += strlen(env + i) + 1)
            if (strcmp(env + i, want) == 0) found = pid;
    }
    if (d) closedir(d);
    return found;
}

/* Trials the store says are finished; 0 while it is not there yet (or still being made). */
static int finished_trials(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/study.db", dir);
    if (access(path, F_OK) != 0) return 0;
    vx_store st;
    vx_trial *t;
    size_t k;
    if (vx_store_open(&st, path, 1, NULL) != VX_OK) return 0;
    int n = 0;
    if (vx_store_trials(&st, &t, &k, NULL) == VX_OK) {
        for (size_t i = 0; i < k; i++) n += t[i].status >= VX_TRIAL_DONE;
        free(t);
    }
    vx_store_close(&st);
    return n;
}

/* trials that take a few seconds a study, so that a kill lands in the middle */
#define LONGER " --set train.steps_per_epoch=1000 --set train.epochs=10"

/* Starts a 3-rank study of the LONGER trials in dir, sends rank 1 `sig` once a few trials are in,
 * waits for mpirun (its exit status returned), resumes at 2 ranks and checks the result is ref's
 * and that the trials finished before the signal were not run again. */
static int signal_worker_then_resume(const char *root, const char *space, const char *ref,
                                     const char *dir, int sig, int *kept, int *left)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             MPI_ENV "exec mpirun -np 3 %s hyperopt %s " SMALL LONGER " --swarm 6 --generations 3 "
                     "--study %s >%s/job.out 2>%s/job.err",
             VX_BINARY, space, dir, root, root);
    pid_t job = fork();
    assert_true(job >= 0);
    if (job == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* once a few trials are in (and before the last), signal rank 1 */
    pid_t victim = 0;
    for (int tries = 0; tries < 6000 && !victim; tries++) {
        struct timespec ms = {0, 10000000};
        nanosleep(&ms, NULL);
        if (finished_trials(dir) >= 4) victim = rank_pid(1, dir);
    }
    if (!victim) {
        kill(job, SIGKILL);
        waitpid(job, NULL, 0);
        fail_msg("rank 1 not found while the study ran");
    }
    size_t n_before;
    vx_trial *t_before = trials_of(dir, &n_before);
    kill(victim, sig);
    int status;
    waitpid(job, &status, 0);
    assert_true(WIFEXITED(status));
    int rc = WEXITSTATUS(status);
    if (rc == 0) fail_msg("mpirun succeeded though rank 1 got signal %d", sig);
    *left = 18 - finished_trials(dir);
    assert_true(*left > 0); /* the signal landed in the middle */
    if (sh(MPI_ENV "mpirun -np 2 %s hyperopt --resume %s", VX_BINARY, dir) != 0)
        fail_msg("resume: ...%s", err_tail());
    assert_same_trials(ref, dir, -1);
    assert_same_file(ref, dir, "test.txt");
    /* a trial finished before the signal kept its row: the same rank and time, not run again */
    size_t n_after;
    vx_trial *t_after = trials_of(dir, &n_after);
    *kept = 0;
    for (size_t i = 0; i < n_before; i++) {
        if (t_before[i].status < VX_TRIAL_DONE) continue;
        const vx_trial *a = &t_after[t_before[i].id];
        if (!same_bits(a->seconds, t_before[i].seconds) || a->rank != t_before[i].rank)
            fail_msg("trial %lld finished before signal %d but ran again", (long long)a->id, sig);
        (*kept)++;
    }
    free(t_before), free(t_after);
    return rc;
}

/* SIGKILL: the job goes down (OpenMPI has no fault tolerance). SIGINT to rank 1 alone (not
 * through mpirun): rank 0 hears of it and stops the study as for its own Ctrl-C. */
static void test_signalled_worker_then_resume(void **state)
{
    (void)state;
    char root[64], space[128], ref[128], dir[160];
    study_folder(root, sizeof root, space, sizeof space);
    snprintf(ref, sizeof ref, "%s/ref", root);
    if (sh("%s hyperopt %s " SMALL LONGER " --swarm 6 --generations 3 --study %s", VX_BINARY, space,
           ref) != 0)
        fail_msg("%s", err);
    static const struct {
        int sig;
        const char *name;
    } sigs[] = {{SIGKILL, "killed (SIGKILL)"}, {SIGINT, "interrupted (SIGINT to it alone)"}};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        snprintf(dir, sizeof dir, "%s/s%d", root, sigs[i].sig);
        int kept, left;
        int rc = signal_worker_then_resume(root, space, ref, dir, sigs[i].sig, &kept, &left);
        if (sigs[i].sig == SIGINT) { /* rank 0 said why it stopped */
            char path[256];
            snprintf(path, sizeof path, "%s/job.err", root);
            char *t = read_text(path);
            if (!strstr(t, "stopped in generation"))
                fail_msg("rank 1 interrupted, rank 0 did not stop: ...%s",
                         strlen(t) > 1500 ? t + strlen(t) - 1500 : t);
            free(t);
        }
        print_message("rank 1 %s with %d of 18 trials finished (mpirun exit %d; %d left when the "
                      "job ended); resumed at 2 ranks to the uninterrupted result, the %d finished "
                      "before not run again\n",
                      sigs[i].name, kept, rc, left, kept);
    }
    th_rmtree(root);
}

/* ---- the templates --------------------------------------------------------------------------- */

/* `vixen hyperopt ARGS` as the templates give it, checked by the command itself with --plan on
 * the CPU: every option known, the space file there (its path under the image's /opt/vixen mapped
 * to the source tree), the settings valid. */
static void check_command(const char *args, const char *where)
{
    char mapped[4096] = "";
    size_t k = 0;
    for (const char *p = args; *p && k < sizeof mapped - 256; p++) {
        if (strncmp(p, "/opt/vixen/", 11) == 0) {
            k += (size_t)snprintf(mapped + k, sizeof mapped - k, "%s/", VX_SOURCE_DIR);
            p += 10;
        } else {
            mapped[k++] = *p;
        }
    }
    mapped[k] = '\0';
    const char *space = strstr(mapped, "examples/dqn-space.yaml");
    if (!space) fail_msg("%s: the command names no space file: %s", where, args);
    char *study = strstr(mapped, "--study ");
    if (!study) fail_msg("%s: no --study: %s", where, args);
    int rc = sh("cd %s && %s hyperopt %s --device cpu --plan", VX_SOURCE_DIR, VX_BINARY, mapped);
    if (rc != 0) fail_msg("%s: `vixen hyperopt %s --plan` failed: %s", where, mapped, err);
    if (!strstr(out, "concurrency")) fail_msg("%s: no plan printed", where);
}

/* The vixen arguments after "vixen hyperopt" in text, up to the end of the command line. */
static int vixen_args(const char *text, const char *after, char *args, size_t n)
{
    const char *p = strstr(text, after);
    if (!p) return 0;
    p = strstr(p, "vixen hyperopt ");
    if (!p) return 0;
    p += strlen("vixen hyperopt ");
    size_t k = 0;
    for (; *p && *p != ';' && k < n - 1; p++) {
        if (*p == '\\' && p[1] == '\n') { /* a continued line */
            p++;
            continue;
        }
        if (*p == '\n') break;
        args[k++] = *p;
    }
    while (k && args[k - 1] == ' ') k--;
    args[k] = '\0';
    return 1;
}

static void test_slurm_script(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/examples/mpi/slurm.sbatch", VX_SOURCE_DIR);
    char *t = read_text(path);
    assert_int_equal(sh("bash -n %s", path), 0);
    int nodes = 0, per_node = 0, gpus = 0;
    const char *p;
    if ((p = strstr(t, "#SBATCH --nodes="))) nodes = atoi(p + 16);
    if ((p = strstr(t, "#SBATCH --ntasks-per-node="))) per_node = atoi(p + 26);
    if ((p = strstr(t, "#SBATCH --gpus-per-node="))) gpus = atoi(p + 24);
    assert_true(nodes >= 1);
    assert_true(per_node >= 1);
    assert_int_equal(per_node, gpus); /* one rank per GPU */
    assert_non_null(strstr(t, "#SBATCH --requeue"));
    assert_non_null(strstr(t, "srun --mpi=pmix vixen hyperopt --resume \"$STUDY\""));
    char args[2048];
    assert_true(vixen_args(t, "else", args, sizeof args));
    char *q = strstr(args, "\"$STUDY\"");
    assert_non_null(q);
    memcpy(q, "/tmp/s  ", 8); /* $STUDY: any folder (the plan creates none) */
    check_command(args, "slurm.sbatch");
    free(t);
}

/* The scalar at a path of keys (and list indexes as "0", "1") in a YAML document, or NULL. */
static const char *yaml_at(yaml_document_t *doc, yaml_node_t *node, const char *const *keys)
{
    for (; *keys && node; keys++) {
        yaml_node_t *next = NULL;
        if (node->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *pr = node->data.mapping.pairs.start;
                 pr < node->data.mapping.pairs.top && !next; pr++) {
                yaml_node_t *k = yaml_document_get_node(doc, pr->key);
                if (k && k->type == YAML_SCALAR_NODE &&
                    strcmp((const char *)k->data.scalar.value, *keys) == 0)
                    next = yaml_document_get_node(doc, pr->value);
            }
        } else if (node->type == YAML_SEQUENCE_NODE) {
            long i = atol(*keys);
            yaml_node_item_t *it = node->data.sequence.items.start + i;
            if (i >= 0 && it < node->data.sequence.items.top)
                next = yaml_document_get_node(doc, *it);
        }
        node = next;
    }
    return node && node->type == YAML_SCALAR_NODE ? (const char *)node->data.scalar.value : NULL;
}

#define AT(...) yaml_at(&doc, root, (const char *const[]){__VA_ARGS__, NULL})

static void test_mpijob_manifest(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/examples/mpi/mpijob.yaml", VX_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) fail_msg("%s: %s", path, parser.problem);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    assert_non_null(root);
    assert_string_equal(AT("apiVersion"), "kubeflow.org/v2beta1");
    assert_string_equal(AT("kind"), "MPIJob");
    const char *slots = AT("spec", "slotsPerWorker");
    const char *launchers = AT("spec", "mpiReplicaSpecs", "Launcher", "replicas");
    const char *workers = AT("spec", "mpiReplicaSpecs", "Worker", "replicas");
    const char *gpus = AT("spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers",
                          "0", "resources", "limits", "nvidia.com/gpu");
    const char *mount = AT("spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers",
                           "0", "volumeMounts", "0", "mountPath");
    const char *claim = AT("spec", "mpiReplicaSpecs", "Worker", "template", "spec", "volumes", "0",
                           "persistentVolumeClaim", "claimName");
    const char *cmd = AT("spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers",
                         "0", "command", "2");
    assert_non_null(slots), assert_non_null(launchers), assert_non_null(workers);
    assert_non_null(gpus), assert_non_null(mount), assert_non_null(claim), assert_non_null(cmd);
    assert_string_equal(launchers, "1");
    assert_string_equal(gpus, slots); /* one rank per GPU */
    /* mpirun starts one rank per slot of every worker, and the study lives on the shared volume */
    char np[32];
    snprintf(np, sizeof np, "mpirun -np %d ", atoi(workers) * atoi(slots));
    const char *first = strstr(cmd, np);
    assert_non_null(first);
    assert_non_null(strstr(first + 1, np)); /* both the new study and the resume */
    assert_non_null(strstr(cmd, "--resume /studies/"));
    assert_int_equal(strncmp(mount, "/studies", 8), 0);
    char args[2048];
    assert_true(vixen_args(cmd, "else", args, sizeof args));
    check_command(args, "mpijob.yaml");
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
}

int main(void)
{
    if (!vx_mpi_built()) {
        fprintf(stderr, "test_study_mpi: this build has no MPI: skipped\n");
        return 77;
    }
    if (sh(MPI_ENV "mpirun --version") != 0) {
        fprintf(stderr, "test_study_mpi: no mpirun: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_give_the_single_process_result),
        cmocka_unit_test(test_signalled_worker_then_resume),
        cmocka_unit_test(test_slurm_script),
        cmocka_unit_test(test_mpijob_manifest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* study_mpi.c — a study over several processes through MPI (hyperopt.h, "across processes").
 *
 * Rank 0 runs the study as one process would (study.c) and sees the other ranks through
 * vx_workers: a set of pending trials goes to a rank as soon as it is free, its results come
 * back as one reply, and rank 0 records them in the store. A worker rank (vx_study_serve) keeps a
 * copy of the study without its store, runs each set it is given on its own engine (engine.c:
 * chunks, the layers against running out of memory) and replies once every trial of the set has
 * finished. Only the main thread of a rank calls MPI (MPI_THREAD_FUNNELED); trials run in threads
 * of their own and never do.
 *
 * The messages, all bytes (every rank runs the same build: the setup checks the sizes):
 *   SETUP 0 → k  the study: its folder, settings, space and base config as the store keeps them
 *                (or "no study": rank 0 failed before it had one, and rank k just ends)
 *   HELLO k → 0  the rank's host, device and the concurrency it starts with (or why it cannot)
 *   JOB   0 → k  a generation's set: the trials, their positions, the pruning medians
 *   REPLY k → 0  what each trial came to, its curve, the rank's device and concurrency after it
 *   STOP  0 → k  stop the trials running at their next epoch (they come back pending)
 *   DONE  0 → k  no more sets; BYE k → 0 answers it, so no message is left in flight when the
 *                ranks finalise
 * Waiting for a message is a probe every 2 ms, not a blocking receive: OpenMPI's blocking calls
 * spin a core, which trials on the same node would lose. Rank 0 sends without waiting (MPI_Isend);
 * a worker's sends block, but only until rank 0, which probes all the time, takes them. */
#define _DEFAULT_SOURCE
#include "study_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if VX_HAVE_MPI
#include <mpi.h>
#endif

int vx_mpi_built(void) { return VX_HAVE_MPI; }

int vx_mpi_launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                                       "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

#if !VX_HAVE_MPI

vx_status vx_mpi_init(vx_ranks *r, vx_err *e)
{
    memset(r, 0, sizeof *r);
    r->size = r->local_size = 1;
    return vx_err_set(e, VX_ERR_UNSUPPORTED,
                      "started by an MPI launcher, but this build of vixen has no MPI (every rank "
                      "would run the whole study): install OpenMPI's development package "
                      "(scripts/deps.sh) and build again");
}
void vx_mpi_finalize(void) {}
vx_status vx_study_run_ranks(vx_study *s, vx_device *dev, const vx_ranks *r, int coordinate_only,
                             int cores, vx_study_progress_fn cb, void *ctx, volatile int *stop,
                             vx_err *e)
{
    (void)r, (void)coordinate_only, (void)cores;
    return vx_study_run_with(s, dev, NULL, 1, cb, ctx, stop, e);
}
void vx_study_release_ranks(const vx_ranks *r) { (void)r; }
vx_status vx_study_serve(const vx_ranks *r, vx_rank_open_fn open, volatile int *stop, vx_err *e)
{
    (void)r, (void)open, (void)stop;
    return vx_err_set(e, VX_ERR_UNSUPPORTED, "this build of vixen has no MPI");
}
int vx_workers_count(const vx_workers *w) { return w ? 0 : 0; }
int vx_workers_capacity(const vx_workers *w, int k) { return w && k ? 0 : 0; }
int vx_workers_concurrency(const vx_workers *w) { return w ? 0 : 0; }
int vx_workers_running(const vx_workers *w) { return w ? 0 : 0; }
vx_status vx_workers_send(vx_workers *w, int k, const vx_study *s, int g, const vx_trial *t,
                          const double *const *x, int n, const double *median, int n_median,
                          vx_err *e)
{
    return vx_err_set(e, VX_ERR_UNSUPPORTED, "this build of vixen has no MPI");
}
int vx_workers_poll(vx_workers *w, vx_reply *r, vx_err *e) { return 0; }
void vx_reply_free(vx_reply *r) { (void)r; }
void vx_workers_stop(vx_workers *w) { (void)w; }

#else

static void pause_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

enum { TAG_SETUP = 1, TAG_HELLO, TAG_JOB, TAG_REPLY, TAG_STOP, TAG_DONE, TAG_BYE };

/* ---- messages: a growing byte buffer, and a reader that refuses to read past the end -------- */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} msg_buf;

static void put(msg_buf *b, const void *v, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, v, n);
    b->n += n;
}

static void put_int(msg_buf *b, int v) { put(b, &v, sizeof v); }

static void put_text(msg_buf *b, const char *t)
{
    int n = t ? (int)strlen(t) : 0;
    put_int(b, n);
    put(b, t, (size_t)n);
}

typedef struct {
    const char *p;
    size_t n, off;
    int bad;
} msg_rd;

static void get(msg_rd *r, void *v, size_t n)
{
    if (r->bad || n > r->n - r->off) {
        r->bad = 1;
        memset(v, 0, n);
        return;
    }
    memcpy(v, r->p + r->off, n);
    r->off += n;
}

static int get_int(msg_rd *r)
{
    int v;
    get(r, &v, sizeof v);
    return v;
}

/* A text of the message, malloc'd (NULL when the message is short or memory is). */
static char *get_text(msg_rd *r)
{
    int n = get_int(r);
    if (r->bad || n < 0 || (size_t)n > r->n - r->off) {
        r->bad = 1;
        return NULL;
    }
    char *t = malloc((size_t)n + 1);
    if (!t) return NULL;
    get(r, t, (size_t)n);
    t[n] = '\0';
    return t;
}

/* The next message for this rank from `from` (MPI_ANY_SOURCE for any), if one is there: 1 and
 * the message (its bytes malloc'd in *data), 0, or -1 when memory is short. */
static int probe(int from, int *src, int *tag, char **data, int *n)
{
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(from, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status);
    if (!flag) return 0;
    MPI_Get_count(&status, MPI_BYTE, n);
    *data = malloc((size_t)(*n > 0 ? *n : 1));
    if (!*data) return -1;
    MPI_Recv(*data, *n, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    *src = status.MPI_SOURCE, *tag = status.MPI_TAG;
    return 1;
}

/* A worker's blocking send: rank 0 always probes, so it never waits long. */
static void send_to_0(int tag, const msg_buf *b)
{
    MPI_Send(b->p, (int)b->n, MPI_BYTE, 0, tag, MPI_COMM_WORLD);
}

vx_status vx_mpi_init(vx_ranks *r, vx_err *e)
{
    memset(r, 0, sizeof *r);
    int provided = 0, argc = 0;
    char **argv = NULL;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return vx_err_set(e, VX_ERR_IO, "MPI_Init_thread failed");
    if (provided < MPI_THREAD_FUNNELED) {
        MPI_Finalize();
        return vx_err_set(e, VX_ERR_UNSUPPORTED,
                          "this MPI gives no thread support (MPI_THREAD_FUNNELED is needed: trials "
                          "run in threads)");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &r->local_rank);
    MPI_Comm_size(node, &r->local_size);
    MPI_Group world_g, node_g;
    int zero = 0, zero_here = MPI_UNDEFINED;
    MPI_Comm_group(MPI_COMM_WORLD, &world_g);
    MPI_Comm_group(node, &node_g);
    MPI_Group_translate_ranks(world_g, 1, &zero, node_g, &zero_here);
    r->rank0_here = zero_here != MPI_UNDEFINED;
    MPI_Group_free(&world_g), MPI_Group_free(&node_g);
    MPI_Comm_free(&node);
    int len = 0;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Get_processor_name(name, &len);
    snprintf(r->host, sizeof r->host, "%.*s", len, name);
    return VX_OK;
}

void vx_mpi_finalize(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Finalize();
}

/* ---- rank 0's view of the workers ------------------------------------------------------------ */

typedef struct {
    int capacity;    /* trials it takes (its concurrency, as it last said) */
    int running;     /* trials of the set it runs (0: free) */
    int stopped;     /* was told to stop */
    MPI_Request req; /* the last message sent to it */
    msg_buf out;     /* … and its bytes, kept until it is received */
} worker;

struct vx_workers {
    int n; /* ranks 1 .. n */
    worker *w;
};

static vx_workers g_workers;
static int g_setup_sent, g_released;

int vx_workers_count(const vx_workers *w) { return w ? w->n : 0; }

int vx_workers_capacity(const vx_workers *w, int k)
{
    return w && k >= 1 && k <= w->n && !w->w[k - 1].running && !w->w[k - 1].stopped
               ? w->w[k - 1].capacity
               : 0;
}

int vx_workers_concurrency(const vx_workers *w)
{
    int n = 0;
    for (int k = 0; w && k < w->n; k++) n += w->w[k].capacity;
    return n;
}

int vx_workers_running(const vx_workers *w)
{
    int n = 0;
    for (int k = 0; w && k < w->n; k++) n += w->w[k].running;
    return n;
}

/* Sends b to worker k without waiting for it to be received (the worker may be busy sending a
 * reply of its own); the message before must have been received first. */
static void send_to(vx_workers *w, int k, int tag, msg_buf *b)
{
    worker *wk = &w->w[k - 1];
    MPI_Wait(&wk->req, MPI_STATUS_IGNORE);
    free(wk->out.p);
    wk->out = *b;
    memset(b, 0, sizeof *b);
    MPI_Isend(wk->out.p, (int)wk->out.n, MPI_BYTE, k, tag, MPI_COMM_WORLD, &wk->req);
}

vx_status vx_workers_send(vx_workers *w, int k, const vx_study *s, int g, const vx_trial *t,
                          const double *const *x, int n, const double *median, int n_median,
                          vx_err *e)
{
    msg_buf b = {0};
    put_int(&b, g), put_int(&b, n), put_int(&b, n_median), put_int(&b, s->space.dims);
    put(&b, t, (size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) put(&b, x[i], (size_t)s->space.dims * sizeof *x[i]);
    if (n_median) put(&b, median, (size_t)n_median * sizeof *median);
    if (b.oom) {
        free(b.p);
        return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory for rank %d's set", k);
    }
    send_to(w, k, TAG_JOB, &b);
    w->w[k - 1].running = n;
    return VX_OK;
}

void vx_reply_free(vx_reply *r)
{
    for (int k = 0; r->curve && k < r->n; k++) free(r->curve[k]);
    free(r->curve), free(r->o);
    memset(r, 0, sizeof *r);
}

/* A REPLY's bytes into r; 0 when they are damaged (or memory is short). */
static int parse_reply(int src, const char *data, int n, vx_reply *r)
{
    memset(r, 0, sizeof *r);
    r->worker = src;
    msg_rd rd = {data, (size_t)n, 0, 0};
    int m = get_int(&rd);
    r->concurrency = get_int(&rd);
    r->interrupted = get_int(&rd);
    get(&rd, &r->ev, sizeof r->ev);
    get(&rd, r->error, sizeof r->error);
    r->error[sizeof r->error - 1] = r->ev.note[sizeof r->ev.note - 1] = '\0';
    if (rd.bad || m < 0 || (size_t)m > rd.n / sizeof *r->o) return 0;
    r->o = calloc((size_t)(m ? m : 1), sizeof *r->o);
    r->curve = calloc((size_t)(m ? m : 1), sizeof *r->curve);
    if (!r->o || !r->curve) return 0;
    r->n = m;
    get(&rd, r->o, (size_t)m * sizeof *r->o);
    for (int k = 0; k < m && !rd.bad; k++) {
        int c = r->o[k].n_curve;
        r->o[k].err[sizeof r->o[k].err - 1] = '\0';
        r->o[k].t.params[sizeof r->o[k].t.params - 1] = '\0';
        r->o[k].t.error[sizeof r->o[k].t.error - 1] = '\0';
        if (c < 0 || (size_t)c > (rd.n - rd.off) / sizeof(vx_curve_point)) rd.bad = 1;
        if (rd.bad || c == 0) continue;
        r->curve[k] = malloc((size_t)c * sizeof(vx_curve_point));
        if (!r->curve[k]) return 0;
        get(&rd, r->curve[k], (size_t)c * sizeof(vx_curve_point));
    }
    return !rd.bad && rd.off == rd.n;
}

int vx_workers_poll(vx_workers *w, vx_reply *r, vx_err *e)
{
    int src = -1, tag = 0, n = 0;
    char *data = NULL;
    int got = probe(MPI_ANY_SOURCE, &src, &tag, &data, &n);
    if (got < 0) {
        vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory for a rank's reply");
        return -1;
    }
    if (!got) return 0;
    if (tag != TAG_REPLY || src < 1 || src > w->n) {
        free(data);
        vx_err_set(e, VX_ERR_FORMAT, "hyperopt: rank %d sent message %d out of turn", src, tag);
        return -1;
    }
    int ok = parse_reply(src, data, n, r);
    free(data);
    if (!ok) {
        vx_reply_free(r);
        vx_err_set(e, VX_ERR_FORMAT, "hyperopt: rank %d's reply is damaged (%d bytes)", src, n);
        return -1;
    }
    worker *wk = &w->w[src - 1];
    if (r->n > 0 || !r->interrupted || r->error[0]) wk->running = 0; /* else: a notice only */
    if (r->concurrency > 0) wk->capacity = r->concurrency;
    return 1;
}

void vx_workers_stop(vx_workers *w)
{
    for (int k = 1; w && k <= w->n; k++) {
        if (w->w[k - 1].stopped) continue;
        w->w[k - 1].stopped = 1;
        msg_buf b = {0};
        put_int(&b, 0);
        send_to(w, k, TAG_STOP, &b);
    }
}

/* ---- rank 0 ---------------------------------------------------------------------------------- */

/* The study to every worker (s NULL: there is none, and they end). When its texts cannot be
 * read, the workers hear of no study and the status says why. */
static vx_status send_setup(const vx_ranks *r, const vx_study *s, int kind, int coordinate_only,
                            vx_err *e)
{
    char *settings = NULL, *space = NULL, *base = NULL, dir[PATH_MAX];
    vx_status st = VX_OK;
    if (s) {
        st = vx_store_meta_get((vx_store *)&s->store, "settings", &settings, e);
        if (!st) st = vx_store_meta_get((vx_store *)&s->store, "space", &space, e);
        if (!st) st = vx_store_meta_get((vx_store *)&s->store, "base", &base, e);
        /* the folder as every rank can name it, whatever its working directory */
        if (!realpath(s->dir, dir)) snprintf(dir, sizeof dir, "%s", s->dir);
    }
    int has = s && !st;
    msg_buf b = {0};
    put_int(&b, has);
    put_int(&b, (int)sizeof(vx_trial)), put_int(&b, (int)sizeof(vx_trial_outcome));
    put_int(&b, kind);
    put_int(&b, has ? s->cfg.concurrency : 0);
    put_int(&b, coordinate_only);
    put_text(&b, has ? dir : "");
    put_text(&b, settings), put_text(&b, space), put_text(&b, base);
    free(settings), free(space), free(base);
    if (b.oom) { /* the workers then hear of no study */
        free(b.p);
        memset(&b, 0, sizeof b);
        put_int(&b, 0);
        if (has) st = vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory for the ranks' setup");
    }
    for (int k = 1; k < r->size; k++)
        MPI_Send(b.p, (int)b.n, MPI_BYTE, k, TAG_SETUP, MPI_COMM_WORLD);
    free(b.p);
    g_setup_sent = 1;
    return st;
}

typedef struct {
    int concurrency, max_concurrent, cores;
    int64_t available, trial;
    char device[192];
    char host[256];
    char error[768];
} hello;

vx_status vx_study_run_ranks(vx_study *s, vx_device *dev, const vx_ranks *r, int coordinate_only,
                             int cores, vx_study_progress_fn cb, void *ctx, volatile int *stop,
                             vx_err *e)
{
    s->cfg.cpu_cores = cores;
    if (r->size < 2) return vx_study_run_with(s, dev, NULL, 1, cb, ctx, stop, e);
    vx_workers *w = &g_workers;
    w->n = r->size - 1;
    w->w = calloc((size_t)w->n, sizeof *w->w);
    if (!w->w) {
        send_setup(r, NULL, 0, 0, NULL);
        return vx_err_set(e, VX_ERR_NOMEM, "hyperopt: out of memory");
    }
    for (int k = 0; k < w->n; k++) w->w[k].req = MPI_REQUEST_NULL;
    /* the workers run on the kind of device rank 0 does (--device included) */
    vx_status st = send_setup(r, s, vx_device_kind(dev), coordinate_only, e);
    if (st) { /* the workers heard of no study: nothing to wait for */
        free(w->w);
        memset(w, 0, sizeof *w);
        return st;
    }
    for (int got = 0; got < w->n && !st;) { /* every rank's device and concurrency */
        int src = -1, tag = 0, n = 0;
        char *data = NULL;
        if (*stop)
            st = vx_err_set(e, VX_ERR_STOPPED, "hyperopt: stopped before every rank had started");
        int p = st ? 0 : probe(MPI_ANY_SOURCE, &src, &tag, &data, &n);
        if (p == 0) {
            if (!st) pause_ms(2);
            continue;
        }
        if (p > 0 && tag == TAG_REPLY) { /* a rank that said hello was interrupted since */
            free(data);
            st = vx_err_set(e, VX_ERR_STOPPED, "hyperopt: rank %d was interrupted", src);
            break;
        }
        hello h;
        msg_rd rd = {data, (size_t)(p > 0 ? n : 0), 0, 0};
        get(&rd, &h, sizeof h);
        free(data);
        if (p < 0 || tag != TAG_HELLO || rd.bad || src < 1 || src > w->n) {
            st = vx_err_set(e, VX_ERR_FORMAT, "hyperopt: rank %d's hello is damaged", src);
            break;
        }
        h.error[sizeof h.error - 1] = h.device[sizeof h.device - 1] = '\0';
        h.host[sizeof h.host - 1] = '\0';
        got++;
        if (h.error[0]) {
            st = vx_err_set(e, VX_ERR_IO, "hyperopt: rank %d on %s: %s", src, h.host, h.error);
            break;
        }
        w->w[src - 1].capacity = h.concurrency;
        vx_log(VX_LOG_INFO,
               "hyperopt: rank %d on %s: %s, %d cores; a trial needs %.1f MB (estimate), %.1f MB "
               "available: %d at once at most, starting with %d",
               src, h.host, h.device, h.cores, h.trial / 1e6, h.available / 1e6, h.max_concurrent,
               h.concurrency);
    }
    if (!st) {
        if (!coordinate_only)
            vx_log(VX_LOG_INFO, "hyperopt: rank 0 on %s: %s, %d cores", r->host,
                   vx_device_name(dev), cores);
        else vx_log(VX_LOG_INFO, "hyperopt: rank 0 on %s only coordinates", r->host);
        st = vx_study_run_with(s, dev, w, !coordinate_only, cb, ctx, stop, e);
    }
    return st;
}

void vx_study_release_ranks(const vx_ranks *r)
{
    if (r->size < 2 || r->rank != 0 || g_released) return;
    g_released = 1;
    if (!g_setup_sent) {
        send_setup(r, NULL, 0, 0, NULL);
        return;
    }
    vx_workers *w = &g_workers;
    if (!w->w) return;
    vx_workers_stop(w); /* a worker still running a set (an error here) stops it */
    for (int k = 1; k <= w->n; k++) {
        msg_buf b = {0};
        put_int(&b, 0);
        send_to(w, k, TAG_DONE, &b);
    }
    /* every worker answers DONE with BYE; whatever it sent before (a last reply) is dropped */
    for (int byes = 0; byes < w->n;) {
        int src, tag, n;
        char *data = NULL;
        int p = probe(MPI_ANY_SOURCE, &src, &tag, &data, &n);
        if (p <= 0) {
            pause_ms(2);
            continue;
        }
        free(data);
        byes += tag == TAG_BYE;
    }
    for (int k = 0; k < w->n; k++) {
        MPI_Wait(&w->w[k].req, MPI_STATUS_IGNORE);
        free(w->w[k].out.p);
    }
    free(w->w);
    memset(w, 0, sizeof *w);
}

/* ---- a worker rank --------------------------------------------------------------------------- */

typedef struct {
    const vx_ranks *r;
    vx_rank_open_fn open;
    vx_study *s;
    vx_engine eng;
    int state[2];
    volatile int *signal; /* this process's own interrupt */
    volatile int halt;    /* what its trials read: the interrupt, or rank 0's STOP */
    int done;             /* DONE came while a set ran: BYE once it is replied */
    int told;             /* rank 0 knows of this rank's interrupt */
} serve_ctx;

/* An interrupt that reached this rank alone (kill -INT, not mpirun's forwarding) while it has no
 * set: rank 0 hears of it as an empty reply, and stops the study as for its own. */
static void tell_interrupt(serve_ctx *c)
{
    if (!*c->signal || c->told) return;
    c->told = 1;
    msg_buf b = {0};
    vx_study_event ev;
    memset(&ev, 0, sizeof ev);
    char error[768] = "";
    put_int(&b, 0), put_int(&b, c->eng.cur ? *c->eng.cur : 0), put_int(&b, 1);
    put(&b, &ev, sizeof ev), put(&b, error, sizeof error);
    if (!b.oom) send_to_0(TAG_REPLY, &b);
    free(b.p);
}

/* Waits for rank 0's next message, heeding STOP: 1 with a JOB's bytes, 0 when DONE came. */
static int next_job(serve_ctx *c, char **data, int *n)
{
    for (;;) {
        if (*c->signal) vx_flag_set(&c->halt);
        if (c->s) tell_interrupt(c); /* after its HELLO: rank 0 reads replies then */
        int src, tag;
        int p = probe(0, &src, &tag, data, n);
        if (p < 0) return 0;
        if (p == 0) {
            pause_ms(2);
            continue;
        }
        if (tag == TAG_JOB) return 1;
        free(*data), *data = NULL;
        if (tag == TAG_STOP) vx_flag_set(&c->halt);
        if (tag == TAG_DONE) return 0;
    }
}

/* While a chunk runs: STOP and DONE are heeded at once (the trials stop at their next epoch). */
static void listen_while_running(serve_ctx *c)
{
    if (*c->signal) vx_flag_set(&c->halt);
    int src, tag, n;
    char *data = NULL;
    if (probe(0, &src, &tag, &data, &n) <= 0) return;
    free(data);
    if (tag == TAG_STOP) vx_flag_set(&c->halt);
    if (tag == TAG_DONE) vx_flag_set(&c->halt), c->done = 1;
}

/* Runs one set to its end (every trial finished, or pending again after a stop) and replies. */
static void run_set(serve_ctx *c, const char *data, int n)
{
    vx_study *s = c->s;
    msg_rd rd = {data, (size_t)n, 0, 0};
    int g = get_int(&rd), m = get_int(&rd), n_med = get_int(&rd), dims = get_int(&rd);
    msg_buf out = {0};
    char error[768] = "";
    vx_trial *t = NULL;
    double *xs = NULL, *med = NULL;
    const double **x = NULL;
    vx_trial_outcome *o = NULL;
    vx_curve_point **curve = NULL;
    int *todo = NULL;
    vx_trial *ct = NULL; /* a chunk's trials and positions */
    const double **cx = NULL;
    vx_chunk ch = {0};
    vx_err e;
    if (rd.bad || m < 1 || m > s->per_gen || n_med < 0 || n_med > 10000000 || dims != s->space.dims)
        snprintf(error, sizeof error, "a damaged set from rank 0 (%d bytes)", n);
    if (!error[0]) {
        t = calloc((size_t)m, sizeof *t), xs = calloc((size_t)m * dims, sizeof *xs);
        x = calloc((size_t)m, sizeof *x), o = calloc((size_t)m, sizeof *o);
        curve = calloc((size_t)m, sizeof *curve), todo = calloc((size_t)m, sizeof *todo);
        med = calloc((size_t)(n_med ? n_med : 1), sizeof *med);
        ct = calloc((size_t)m, sizeof *ct), cx = calloc((size_t)m, sizeof *cx);
        if (!t || !xs || !x || !o || !curve || !todo || !med || !ct || !cx)
            snprintf(error, sizeof error, "out of memory for a set of %d trials", m);
    }
    if (!error[0]) {
        get(&rd, t, (size_t)m * sizeof *t);
        for (int k = 0; k < m; k++) {
            t[k].params[sizeof t[k].params - 1] = t[k].error[sizeof t[k].error - 1] = '\0';
            if (t[k].id < 0 || t[k].generation != g) rd.bad = 1;
        }
        get(&rd, xs, (size_t)m * dims * sizeof *xs);
        get(&rd, med, (size_t)n_med * sizeof *med);
        if (rd.bad || rd.off != rd.n)
            snprintf(error, sizeof error, "a damaged set from rank 0 (%d bytes)", n);
    }
    if (!error[0] && vx_chunk_init(&ch, m, &e)) snprintf(error, sizeof error, "%s", e.msg);
    char note[160] = "", last[160] = "";
    int left = error[0] ? 0 : m;
    for (int k = 0; k < left; k++) todo[k] = k, x[k] = xs + (size_t)k * dims;
    /* chunks at this rank's concurrency until every trial has its outcome; a trial the device
     * refused (layer 2) runs again in a later, smaller chunk */
    while (left > 0) {
        vx_watchdog(&c->eng, note, sizeof note);
        if (note[0]) snprintf(last, sizeof last, "%s", note);
        int k_n = left < *c->eng.cur ? left : *c->eng.cur;
        for (int k = 0; k < k_n; k++) ct[k] = t[todo[k]], cx[k] = x[todo[k]];
        if (vx_chunk_start(s, &c->eng, &ch, ct, cx, k_n, med, n_med, &c->halt, &e)) {
            snprintf(error, sizeof error, "%s", e.msg);
            break;
        }
        while (!vx_chunk_wait(&ch, 2)) listen_while_running(c);
        if (vx_chunk_end(&c->eng, &ch, note, sizeof note, &e))
            snprintf(error, sizeof error, "%s", e.msg);
        if (note[0]) snprintf(last, sizeof last, "%s", note);
        int again = 0;
        for (int k = 0; k < ch.started; k++) {
            trial_job *j = &ch.jobs[k];
            int idx = todo[k];
            if (j->device_refused && !c->halt && !error[0]) { /* again, at the new size */
                free(j->curve);
                todo[again++] = idx;
                continue;
            }
            vx_outcome_of(j, &o[idx]);
            curve[idx] = j->curve, j->curve = NULL;
        }
        /* those to run again, then the ones no chunk has started yet */
        memmove(todo + again, todo + k_n, (size_t)(left - k_n) * sizeof *todo);
        left = again + (left - k_n);
        if (error[0]) break;
        if (c->halt) { /* stopping: what has not run comes back pending */
            for (int k = 0; k < left; k++) {
                o[todo[k]].t = t[todo[k]];
                o[todo[k]].st = VX_ERR_STOPPED;
            }
            left = 0;
        }
    }
    vx_study_event ev;
    vx_event_fill(c->eng.dev, g, *c->eng.cur, m, last, &ev);
    put_int(&out, error[0] ? 0 : m);
    put_int(&out, *c->eng.cur);
    put_int(&out, *c->signal != 0);
    c->told |= *c->signal != 0;
    put(&out, &ev, sizeof ev);
    put(&out, error, sizeof error);
    if (!error[0]) {
        put(&out, o, (size_t)m * sizeof *o);
        for (int k = 0; k < m; k++)
            if (o[k].n_curve) put(&out, curve[k], (size_t)o[k].n_curve * sizeof **curve);
    }
    if (out.oom) { /* say so in a message small enough to make */
        free(out.p);
        memset(&out, 0, sizeof out);
        snprintf(error, sizeof error, "out of memory for its reply");
        put_int(&out, 0), put_int(&out, *c->eng.cur), put_int(&out, *c->signal != 0);
        put(&out, &ev, sizeof ev);
        put(&out, error, sizeof error);
    }
    send_to_0(TAG_REPLY, &out);
    free(out.p);
    for (int k = 0; curve && k < m; k++) free(curve[k]);
    vx_chunk_free(&ch);
    free(t), free(xs), free(x), free(o), free(curve), free(todo), free(med), free(ct), free(cx);
}

/* The study rank 0 sent: a copy of it, this rank's device and engine, HELLO, then its sets until
 * DONE. A rank that cannot take part says why in its HELLO and waits for DONE. */
static vx_status serve_study(serve_ctx *c, msg_rd *rd, hello *h, vx_err *e)
{
    int kind = get_int(rd), concurrency = get_int(rd), coordinate_only = get_int(rd);
    char *dir = get_text(rd), *settings = get_text(rd), *space = get_text(rd);
    char *base = get_text(rd);
    vx_status st = VX_OK;
    if (rd->bad || !dir || !settings || !space || !base)
        st = vx_err_set(e, VX_ERR_FORMAT, "a damaged study from rank 0");
    if (!st) {
        char db[700];
        snprintf(db, sizeof db, "%s/study.db", dir);
        if (access(db, R_OK) != 0)
            st = vx_err_set(e, VX_ERR_IO,
                            "cannot see the study folder %s (no %s here): it must be on a file "
                            "system every rank shares",
                            dir, db);
    }
    if (!st) st = vx_study_worker_copy(dir, settings, space, base, concurrency, &c->s, e);
    free(dir), free(settings), free(space), free(base);
    vx_device *dev = NULL;
    int cores = 1;
    /* a coordinating rank 0 takes no share of its node: the ranks there divide it without it */
    vx_ranks place = *c->r;
    if (coordinate_only && place.rank0_here) place.local_rank--, place.local_size--;
    if (!st) st = c->open(&place, kind, &dev, &cores, e);
    vx_plan plan;
    if (!st) {
        snprintf(c->s->tag, sizeof c->s->tag, "r%d:", c->r->rank);
        c->s->rank = c->r->rank;
        c->s->cfg.cpu_cores = cores;
        st = vx_engine_init(c->s, dev, &c->eng, c->state, &plan, e);
    }
    if (!st) {
        h->concurrency = *c->eng.cur, h->max_concurrent = plan.max_concurrent, h->cores = cores;
        h->available = (int64_t)plan.available, h->trial = (int64_t)plan.trial.total;
        snprintf(h->device, sizeof h->device, "%s", plan.device);
    }
    if (st) snprintf(h->error, sizeof h->error, "%s", e->msg);
    msg_buf b = {0};
    put(&b, h, sizeof *h);
    send_to_0(TAG_HELLO, &b);
    free(b.p);
    char *data = NULL;
    int n;
    /* the base config's market, opened once for every trial of this rank that trains on it */
    vx_market_hold *market = NULL;
    if (!st && vx_train_market_hold(c->s->base, &market, NULL) != VX_OK) market = NULL;
    while (!c->done && next_job(c, &data, &n)) {
        if (!st) run_set(c, data, n);
        free(data), data = NULL;
    }
    vx_train_market_release(market);
    vx_study_close(c->s);
    vx_device_close(dev);
    return st;
}

vx_status vx_study_serve(const vx_ranks *r, vx_rank_open_fn open, volatile int *stop, vx_err *e)
{
    static volatile int never;
    serve_ctx c;
    memset(&c, 0, sizeof c);
    c.r = r, c.open = open, c.signal = stop ? stop : &never;
    char *setup = NULL;
    int src, tag, n, p;
    while ((p = probe(0, &src, &tag, &setup, &n)) == 0) pause_ms(2);
    if (p < 0) return vx_err_set(e, VX_ERR_NOMEM, "rank %d: out of memory", r->rank);
    msg_rd rd = {setup, (size_t)n, 0, 0};
    int has = get_int(&rd), trial_size = get_int(&rd), outcome_size = get_int(&rd);
    vx_status st = VX_OK;
    if (tag == TAG_SETUP && has) { /* else rank 0 has no study: nothing to do */
        hello h;
        memset(&h, 0, sizeof h);
        snprintf(h.host, sizeof h.host, "%s", r->host);
        if (trial_size == (int)sizeof(vx_trial) && outcome_size == (int)sizeof(vx_trial_outcome)) {
            st = serve_study(&c, &rd, &h, e);
        } else {
            st = vx_err_set(e, VX_ERR_UNSUPPORTED,
                            "rank %d runs another build of vixen than rank 0 (every rank must run "
                            "the same one)",
                            r->rank);
            snprintf(h.error, sizeof h.error, "%s", e->msg);
            msg_buf b = {0};
            put(&b, &h, sizeof h);
            send_to_0(TAG_HELLO, &b);
            free(b.p);
            char *job = NULL;
            while (next_job(&c, &job, &n)) free(job), job = NULL; /* until DONE */
        }
        msg_buf b = {0};
        put_int(&b, 0);
        send_to_0(TAG_BYE, &b);
        free(b.p);
    }
    free(setup);
    return st;
}

#endif

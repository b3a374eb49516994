/* device_cuda.cu — the CUDA kind of device context (device_cuda.h): the device made current per
 * thread, streams, events, the shared cuBLASLt handle, device and pinned memory charged to the
 * context's budget (device.c does the accounting; this file only allocates), and the launcher
 * thread that can issue every graph launch of the context.
 *
 * Device memory is stream-ordered (cudaMallocAsync, cudaFreeAsync on a stream of the context's
 * own) where the device has memory pools: cudaFree waits for the whole device to go idle, so
 * with many trials on one GPU every trial's start and end stalled all the others (measured on
 * the H200, 20 trials at once: 143 frees blocked for 7.5 s in all, up to 0.6 s each). A free
 * waits instead for the streams of the context that owned the memory (device_internal.h), then
 * hands the block back; the pool keeps nothing (release threshold 0), so the driver's count of
 * free memory, which the search's watchdog reads, stays what it was with cudaFree.
 *
 * Streams, events and pinned host memory are kept for reuse (struct cache below) instead of
 * made and destroyed with each object: with twenty trials starting at once, creating them
 * queued behind the other trials' calls into the driver (measured on the H200: 126 stream
 * creations 3.2 s in all, up to 175 ms each; 87 cudaMallocHost calls 1.2 s; cudaFreeHost waits
 * for the whole device, like cudaFree), where a trial alone made them in microseconds. */
#include "device_cuda.h"
#include "cuda_check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A list of idle handles (streams or events) of one kind. */
typedef struct {
    void **v;
    int n, cap;
} handle_list;

/* Pinned host memory: slabs from cudaMallocHost, carved into blocks; a freed block waits in
 * `idle` for a request of its size (or up to half smaller) and goes back to the driver only when
 * the context closes. Each block is preceded by its header. */
#define PIN_ALIGN 256
#define PIN_SLAB_MIN (1u << 20)
#define PIN_SLAB_MAX (64u << 20)
typedef struct {
    size_t size; /* the bytes after the header */
    size_t magic;
} pin_header;
#define PIN_MAGIC 0x70696e6e65645f31ull /* "pinned_1" */

typedef struct {
    pthread_mutex_t lock;
    handle_list streams, events, timed_events;
    void **slabs;
    int n_slabs, cap_slabs;
    char *bump;    /* the current slab's unused part */
    size_t left;   /* its bytes */
    size_t pinned; /* the slabs' bytes in all */
    void **idle;   /* freed blocks (their user pointers) */
    int n_idle, cap_idle;
} cache;

/* The launcher thread (vx_cuda_set_launcher): callers queue a launch and wait until it is
 * issued, so the stream's order is the caller's; only this thread calls cudaGraphLaunch. */
typedef struct launch_req {
    cudaGraphExec_t g;
    cudaStream_t s;
    cudaError_t rc;
    int done;
    struct launch_req *next;
} launch_req;

typedef struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    launch_req *head, *tail;
    int running, stop, index;
    long long launches;
} launcher;

typedef struct {
    cublasLtHandle_t lt;
    int sm_count;
    int pools;          /* the device has stream-ordered memory pools */
    cudaStream_t alloc; /* where allocations and frees are ordered (with pools) */
    cudaStream_t reset; /* nothing queued on it: where an event given back is recorded */
    cache c;
    launcher L;
} cuda_impl;

static int list_push(handle_list *l, void *h)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        void **grown = (void **)realloc(l->v, (size_t)cap * sizeof *grown);
        if (!grown) return 0;
        l->v = grown, l->cap = cap;
    }
    l->v[l->n++] = h;
    return 1;
}

static void *list_pop(handle_list *l) { return l->n ? l->v[--l->n] : NULL; }

/* Only a thread on another device switches: cudaGetDevice is safe anywhere, also inside a stream
 * capture, and most calls find the device already current. */
extern "C" vx_status vx_cuda_enter(const vx_device *d, vx_err *e)
{
    vx_status st = VX_OK;
    int cur = -1;
    if (!d || d->kind != VX_DEVICE_CUDA)
        return vx_err_set(e, VX_ERR_ARG, "a CUDA object needs a CUDA device context");
    VX_CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != d->index) VX_CUDA_CHECK(cudaSetDevice(d->index));
fail:
    return st;
}

/* The context's streams, which a free of its memory waits for (device_internal.h). */
static int streams_add(vx_device *d, cudaStream_t s)
{
    pthread_mutex_lock(&d->streams_lock);
    int ok = 1;
    if (d->n_streams == d->cap_streams) {
        int cap = d->cap_streams ? 2 * d->cap_streams : 16;
        void **grown = (void **)realloc(d->streams, (size_t)cap * sizeof *grown);
        if (grown) d->streams = grown, d->cap_streams = cap;
        else ok = 0;
    }
    if (ok) d->streams[d->n_streams++] = (void *)s;
    pthread_mutex_unlock(&d->streams_lock);
    return ok;
}

/* Whether that made a context closed while held idle: then the caller closes it (device.c). */
static int streams_remove(vx_device *d, cudaStream_t s)
{
    pthread_mutex_lock(&d->lock);
    pthread_mutex_lock(&d->streams_lock);
    for (int i = 0; i < d->n_streams; i++)
        if (d->streams[i] == (void *)s) {
            d->streams[i] = d->streams[--d->n_streams];
            break;
        }
    int claimed = vx_device_idle_claim(d);
    pthread_mutex_unlock(&d->streams_lock);
    pthread_mutex_unlock(&d->lock);
    return claimed;
}

/* Every stream of the context idle: nothing queued there can still touch its memory. A stream
 * that another thread is capturing into a graph is passed over: waiting for it would end that
 * capture in error, and what it is capturing does not run. (Its objects are that thread's, busy
 * capturing, not the ones whose memory is being freed.) */
static void streams_wait(vx_device *d)
{
    pthread_mutex_lock(&d->streams_lock);
    for (int i = 0; i < d->n_streams; i++) {
        cudaStream_t s = (cudaStream_t)d->streams[i];
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(s, &cs) != cudaSuccess) cudaGetLastError();
        if (cs == cudaStreamCaptureStatusNone) cudaStreamSynchronize(s);
    }
    pthread_mutex_unlock(&d->streams_lock);
}

static cache *cache_of(const vx_device *d) { return &((cuda_impl *)d->impl)->c; }

/* A stream from the cache, or a new one. */
extern "C" vx_status vx_cuda_stream_create(vx_device *d, cudaStream_t *s, vx_err *e)
{
    *s = NULL;
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    cache *c = cache_of(d);
    pthread_mutex_lock(&c->lock);
    *s = (cudaStream_t)list_pop(&c->streams);
    pthread_mutex_unlock(&c->lock);
    if (!*s) VX_CUDA_CHECK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
    if (!streams_add(d, *s)) {
        vx_cuda_stream_destroy(d, *s);
        *s = NULL;
        return vx_err_set(e, VX_ERR_NOMEM, "device: out of memory");
    }
fail:
    return st;
}

/* The stream's work finishes first: once it is gone, a free would no longer wait for it. An
 * idle, healthy stream goes back to the cache; one still capturing or in error is destroyed. */
extern "C" void vx_cuda_stream_destroy(vx_device *d, cudaStream_t s)
{
    if (!s) return;
    int keep = 0;
    if (vx_cuda_enter(d, NULL) == VX_OK) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        keep = cudaStreamIsCapturing(s, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone &&
               cudaStreamSynchronize(s) == cudaSuccess;
        if (!keep) cudaGetLastError();
    }
    if (keep) { /* into the cache while the context is surely open (its last use of it) */
        cache *c = cache_of(d);
        pthread_mutex_lock(&c->lock);
        keep = list_push(&c->streams, (void *)s);
        pthread_mutex_unlock(&c->lock);
    }
    /* the context let go of last: once it is, another thread may close it; the claim says this
     * was its last hold, and closes it here */
    int claimed = streams_remove(d, s);
    if (!keep) cudaStreamDestroy(s); /* off the context's list first: a free no longer waits */
    if (claimed) vx_device_close_now(d);
}

extern "C" vx_status vx_cuda_event_create(vx_device *d, cudaEvent_t *ev, int timing, vx_err *e)
{
    *ev = NULL;
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    cache *c = cache_of(d);
    pthread_mutex_lock(&c->lock);
    *ev = (cudaEvent_t)list_pop(timing ? &c->timed_events : &c->events);
    pthread_mutex_unlock(&c->lock);
    if (!*ev)
        VX_CUDA_CHECK(
            cudaEventCreateWithFlags(ev, timing ? cudaEventDefault : cudaEventDisableTiming));
fail:
    return st;
}

/* Kept after it is recorded on a stream with nothing queued, so that the next owner finds it
 * complete, as a new event is, whatever the last owner recorded (waits queued on it earlier keep
 * what they waited for). Not a wait for the old record: an event last recorded while its stream
 * was being captured into a graph has no record to wait for, and asking is an error. */
extern "C" void vx_cuda_event_destroy(vx_device *d, cudaEvent_t ev, int timing)
{
    if (!ev) return;
    int keep = vx_cuda_enter(d, NULL) == VX_OK &&
               cudaEventRecord(ev, ((cuda_impl *)d->impl)->reset) == cudaSuccess;
    if (!keep) cudaGetLastError();
    if (keep) {
        cache *c = cache_of(d);
        pthread_mutex_lock(&c->lock);
        keep = list_push(timing ? &c->timed_events : &c->events, (void *)ev);
        pthread_mutex_unlock(&c->lock);
    }
    if (!keep) cudaEventDestroy(ev);
}

/* Made ready for `trials` trainings starting at once: their streams and events made now, while
 * the device is quiet, not while the first trials already run. A DQN trial holds 18 streams at
 * most (its two, a stream per head of each of its three Q-networks, the learner's side stream,
 * the replay buffer's, the environments' setup stream, the optimizer's), 35 events without
 * timing (9 per Q-network, the learner's 3, its own 3, the replay buffer's 2) and 6 with; a PPO
 * trial fewer. */
#define PREPARE_STREAMS 18
#define PREPARE_EVENTS 35
#define PREPARE_TIMED 6
static vx_status cuda_prepare(vx_device *d, int trials, vx_err *e)
{
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    cache *c = cache_of(d);
    struct {
        handle_list *l;
        int want;
        int kind; /* 0 stream, 1 event, 2 timed event */
    } need[] = {{&c->streams, PREPARE_STREAMS * trials, 0},
                {&c->events, PREPARE_EVENTS * trials, 1},
                {&c->timed_events, PREPARE_TIMED * trials, 2}};
    for (size_t k = 0; k < sizeof need / sizeof *need && !st; k++) {
        for (;;) {
            pthread_mutex_lock(&c->lock);
            int enough = need[k].l->n >= need[k].want;
            pthread_mutex_unlock(&c->lock);
            if (enough) break;
            void *h = NULL;
            if (need[k].kind == 0) {
                cudaStream_t s;
                VX_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
                h = (void *)s;
            } else {
                cudaEvent_t ev;
                VX_CUDA_CHECK(cudaEventCreateWithFlags(
                    &ev, need[k].kind == 2 ? cudaEventDefault : cudaEventDisableTiming));
                h = (void *)ev;
            }
            pthread_mutex_lock(&c->lock);
            int ok = list_push(need[k].l, h);
            pthread_mutex_unlock(&c->lock);
            if (!ok) {
                if (need[k].kind == 0) cudaStreamDestroy((cudaStream_t)h);
                else cudaEventDestroy((cudaEvent_t)h);
                return vx_err_set(e, VX_ERR_NOMEM, "device: out of memory");
            }
        }
    }
fail:
    return st;
}

/* ---- the launcher thread ----------------------------------------------------------------------
 */

static void *launcher_main(void *arg)
{
    launcher *L = (launcher *)arg;
    cudaSetDevice(L->index);
    pthread_mutex_lock(&L->lock);
    for (;;) {
        while (!L->head && !L->stop) pthread_cond_wait(&L->work, &L->lock);
        if (!L->head) break; /* stopping, and nothing left to launch */
        launch_req *q = L->head;
        L->head = L->tail = NULL;
        pthread_mutex_unlock(&L->lock);
        for (launch_req *r = q; r; r = r->next) r->rc = cudaGraphLaunch(r->g, r->s);
        pthread_mutex_lock(&L->lock);
        for (launch_req *r = q, *next; r; r = next) {
            next = r->next; /* the request is the caller's: read before it may return */
            r->done = 1;
            L->launches++;
        }
        pthread_cond_broadcast(&L->done);
    }
    pthread_mutex_unlock(&L->lock);
    return NULL;
}

static void launcher_stop(launcher *L)
{
    if (!L->running) return;
    pthread_mutex_lock(&L->lock);
    L->stop = 1;
    pthread_cond_signal(&L->work);
    pthread_mutex_unlock(&L->lock);
    pthread_join(L->thread, NULL);
    L->running = 0, L->stop = 0;
}

static vx_status cuda_set_launcher(vx_device *d, int one, vx_err *e)
{
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    launcher *L = &((cuda_impl *)d->impl)->L;
    if (!one) {
        launcher_stop(L);
        return VX_OK;
    }
    if (L->running) return VX_OK;
    L->index = d->index, L->stop = 0, L->head = L->tail = NULL;
    if (pthread_create(&L->thread, NULL, launcher_main, L) != 0)
        return vx_err_set(e, VX_ERR_NOMEM, "device: cannot start the launcher thread");
    L->running = 1;
    return VX_OK;
}

extern "C" long long vx_cuda_launcher_launches(const vx_device *d)
{
    launcher *L = &((cuda_impl *)d->impl)->L;
    pthread_mutex_lock(&L->lock);
    long long n = L->launches;
    pthread_mutex_unlock(&L->lock);
    return n;
}

extern "C" vx_status vx_cuda_graph_launch(vx_device *d, cudaGraphExec_t g, cudaStream_t s,
                                          vx_err *e)
{
    vx_status st = VX_OK;
    launcher *L = &((cuda_impl *)d->impl)->L;
    if (!L->running) { /* set only while no trial runs: read without the lock */
        VX_CUDA_CHECK(cudaGraphLaunch(g, s));
        return VX_OK;
    }
    {
        launch_req r = {g, s, cudaSuccess, 0, NULL};
        pthread_mutex_lock(&L->lock);
        if (L->tail) L->tail->next = &r;
        else L->head = &r;
        L->tail = &r;
        pthread_cond_signal(&L->work);
        while (!r.done) pthread_cond_wait(&L->done, &L->lock);
        pthread_mutex_unlock(&L->lock);
        VX_CUDA_CHECK(r.rc);
    }
fail:
    return st;
}

extern "C" vx_status vx_cuda_loop_begin(cudaStream_t s, cudaGraph_t *graph,
                                        cudaGraphConditionalHandle *loop, vx_err *e)
{
    vx_status st = VX_OK;
    cudaGraphNode_t node;
    cudaGraphNodeParams p = {}; /* zeroed: the fields not set here must be */
    *graph = NULL;
    VX_CUDA_CHECK(cudaGraphCreate(graph, 0));
    VX_CUDA_CHECK(cudaGraphConditionalHandleCreate(loop, *graph, 1, cudaGraphCondAssignDefault));
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = *loop;
    p.conditional.type = cudaGraphCondTypeWhile;
    p.conditional.size = 1;
    VX_CUDA_CHECK(cudaGraphAddNode(&node, *graph, NULL, NULL, 0, &p));
    VX_CUDA_CHECK(cudaStreamBeginCaptureToGraph(s, p.conditional.phGraph_out[0], NULL, NULL, 0,
                                                cudaStreamCaptureModeThreadLocal));
    return VX_OK;
fail:
    if (*graph) cudaGraphDestroy(*graph);
    *graph = NULL;
    return st;
}

extern "C" cublasLtHandle_t vx_cuda_lt(const vx_device *d) { return ((cuda_impl *)d->impl)->lt; }
extern "C" int vx_cuda_sm_count(const vx_device *d) { return ((cuda_impl *)d->impl)->sm_count; }

/* ---- a share's device memory reserved ahead (vx_device_reserve_ahead) -------------------------
 *
 * One piece from the driver, carved front to back into blocks aligned as cudaMalloc aligns them;
 * a freed block waits in the list for the share's next request of its size or up to half smaller
 * (objects made again, as an evaluation's, ask for the sizes they asked for before). The blocks
 * are recorded here, not in the device memory, which the host cannot read. */
#define AHEAD_ALIGN 256
typedef struct {
    char *p;
    size_t n;
    int used;
} ahead_block;

typedef struct {
    pthread_mutex_t lock;
    char *base;
    size_t size, carved;
    ahead_block *blocks;
    int n_blocks, cap_blocks;
} ahead;

/* A block of n bytes (a multiple of AHEAD_ALIGN) from the share's piece, or NULL. */
static void *ahead_take(ahead *a, size_t n)
{
    pthread_mutex_lock(&a->lock);
    int best = -1;
    for (int i = 0; i < a->n_blocks; i++) {
        const ahead_block *b = &a->blocks[i];
        if (!b->used && b->n >= n && b->n / 2 <= n && (best < 0 || b->n < a->blocks[best].n))
            best = i;
    }
    void *p = NULL;
    if (best >= 0) {
        a->blocks[best].used = 1;
        p = a->blocks[best].p;
    } else if (a->size - a->carved >= n) {
        if (a->n_blocks == a->cap_blocks) {
            int cap = a->cap_blocks ? 2 * a->cap_blocks : 64;
            ahead_block *grown = (ahead_block *)realloc(a->blocks, (size_t)cap * sizeof *grown);
            if (grown) a->blocks = grown, a->cap_blocks = cap;
        }
        if (a->n_blocks < a->cap_blocks) {
            ahead_block *b = &a->blocks[a->n_blocks++];
            b->p = a->base + a->carved, b->n = n, b->used = 1;
            a->carved += n;
            p = b->p;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return p;
}

/* 1 if p is a block of the piece (now free for the share's next request), 0 if not the piece's.
 * Free blocks at the end of what was carved go back to the uncarved rest (the blocks are listed
 * in the order they were carved), so a share that frees and takes again in the reverse order, as
 * objects made and freed again do, does not run past the piece. */
static int ahead_give(ahead *a, void *p)
{
    if (!a || (char *)p < a->base || (char *)p >= a->base + a->size) return 0;
    pthread_mutex_lock(&a->lock);
    for (int i = 0; i < a->n_blocks; i++)
        if (a->blocks[i].p == (char *)p) a->blocks[i].used = 0;
    while (a->n_blocks && !a->blocks[a->n_blocks - 1].used) {
        a->n_blocks--;
        a->carved = (size_t)(a->blocks[a->n_blocks].p - a->base);
    }
    pthread_mutex_unlock(&a->lock);
    return 1;
}

static int ahead_in_use(ahead *a)
{
    pthread_mutex_lock(&a->lock);
    int used = 0;
    for (int i = 0; i < a->n_blocks; i++) used += a->blocks[i].used;
    pthread_mutex_unlock(&a->lock);
    return used;
}

static vx_status cuda_reserve_ahead(vx_device *share, size_t bytes, vx_err *e)
{
    vx_status st = vx_cuda_enter(share, e);
    if (st) return st;
    const cuda_impl *c = (const cuda_impl *)share->impl;
    if (!c->pools) return VX_OK;                      /* cudaMalloc and cudaFree: nothing gained */
    if (bytes > share->budget) bytes = share->budget; /* never more than the share may hold */
    bytes = (bytes + AHEAD_ALIGN - 1) / AHEAD_ALIGN * AHEAD_ALIGN;
    ahead *a = (ahead *)calloc(1, sizeof *a);
    if (!a) return vx_err_set(e, VX_ERR_NOMEM, "device: out of memory");
    void *p = NULL;
    cudaError_t rc = cudaMallocAsync(&p, bytes, c->alloc);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(c->alloc);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        if (p) cudaFreeAsync(p, c->alloc);
        free(a);
        return vx_err_set(e, rc == cudaErrorMemoryAllocation ? VX_ERR_NOMEM : VX_ERR_CUDA,
                          "%s: %.1f MB not reserved ahead: %s", share->name, bytes / 1e6,
                          cudaGetErrorString(rc));
    }
    pthread_mutex_init(&a->lock, NULL);
    a->base = (char *)p, a->size = bytes;
    share->ahead = a;
    return VX_OK;
}

/* Every block was freed (each after the share's streams went idle) before the share closes; one
 * still held (vx_device_close warns of bytes still reserved; a block of 0 bytes is one too)
 * keeps the piece, which its object may still use. */
static void cuda_share_close(vx_device *share)
{
    ahead *a = (ahead *)share->ahead;
    if (!a || share->reserved || ahead_in_use(a) || vx_cuda_enter(share, NULL) != VX_OK) return;
    const cuda_impl *c = (const cuda_impl *)share->impl;
    streams_wait(share);
    cudaFreeAsync(a->base, c->alloc);
    cudaStreamSynchronize(c->alloc);
    pthread_mutex_destroy(&a->lock);
    free(a->blocks);
    free(a);
    share->ahead = NULL;
}

extern "C" void vx_cuda_ahead_stats(const vx_device *share, size_t *size, size_t *carved,
                                    int *blocks_used)
{
    ahead *a = (ahead *)share->ahead;
    *size = *carved = 0, *blocks_used = 0;
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    *size = a->size, *carved = a->carved;
    for (int i = 0; i < a->n_blocks; i++) *blocks_used += a->blocks[i].used;
    pthread_mutex_unlock(&a->lock);
}

static vx_status cuda_alloc(vx_device *d, size_t bytes, void **out, vx_err *e)
{
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    const cuda_impl *c = (const cuda_impl *)d->impl;
    cudaError_t rc;
    *out = NULL;
    if (d->ahead && bytes <= SIZE_MAX - AHEAD_ALIGN) {
        size_t n = bytes ? (bytes + AHEAD_ALIGN - 1) / AHEAD_ALIGN * AHEAD_ALIGN : AHEAD_ALIGN;
        *out = ahead_take((ahead *)d->ahead, n);
        if (*out) return VX_OK;
    }
    if (c->pools) {
        /* ready for any stream once the allocating stream has passed it */
        rc = cudaMallocAsync(out, bytes ? bytes : 1, c->alloc);
        if (rc == cudaSuccess) rc = cudaStreamSynchronize(c->alloc);
    } else {
        rc = cudaMalloc(out, bytes ? bytes : 1);
    }
    if (rc != cudaSuccess) {
        cudaGetLastError(); /* an out-of-memory error is not sticky: clear it */
        if (*out && c->pools) cudaFreeAsync(*out, c->alloc);
        *out = NULL;
        return vx_err_set(e, rc == cudaErrorMemoryAllocation ? VX_ERR_NOMEM : VX_ERR_CUDA,
                          "cudaMalloc of %.1f MB on %s failed: %s", bytes / 1e6, d->name,
                          cudaGetErrorString(rc));
    }
    return VX_OK;
}

static void cuda_free(vx_device *d, void *p)
{
    if (vx_cuda_enter(d, NULL) != VX_OK) return;
    const cuda_impl *c = (const cuda_impl *)d->impl;
    if (!c->pools) {
        cudaFree(p);
        return;
    }
    streams_wait(d);
    if (ahead_give((ahead *)d->ahead, p)) return; /* the share's again */
    cudaFreeAsync(p, c->alloc);
    cudaStreamSynchronize(c->alloc); /* the pool gives the block back to the device here */
}

/* An idle block for n bytes, n to 2n (the caller holds the lock), or NULL. */
static void *take_idle(cache *c, size_t n)
{
    int best = -1;
    size_t best_sz = 0;
    for (int i = 0; i < c->n_idle; i++) {
        size_t sz = ((pin_header *)((char *)c->idle[i] - PIN_ALIGN))->size;
        if (sz >= n && sz / 2 <= n && (best < 0 || sz < best_sz)) best = i, best_sz = sz;
    }
    if (best < 0) return NULL;
    void *p = c->idle[best];
    c->idle[best] = c->idle[--c->n_idle];
    return p;
}

/* n bytes (and their header) from the current slab (the caller holds the lock), or NULL. */
static void *carve(cache *c, size_t n)
{
    if (c->left < n + PIN_ALIGN) return NULL;
    pin_header *h = (pin_header *)c->bump;
    h->size = n, h->magic = PIN_MAGIC;
    void *p = c->bump + PIN_ALIGN;
    c->bump += n + PIN_ALIGN;
    c->left -= n + PIN_ALIGN;
    return p;
}

/* A block of at least `bytes` from the cache's pinned slabs (the cache's comment): an idle block
 * of that size or up to twice it, else carved from the current slab, else from a new slab (each
 * new slab as large as all before it together, 1 to 64 MB, or the block alone if larger). The
 * slab is pinned outside the lock: pinning takes milliseconds, and every stream, event and pinned
 * block of the context would wait behind it. */
static vx_status cuda_alloc_host(vx_device *d, size_t bytes, void **out, vx_err *e)
{
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    cache *c = cache_of(d);
    *out = NULL;
    if (bytes > SIZE_MAX / 2)
        return vx_err_set(e, VX_ERR_NOMEM, "cudaMallocHost: %zu bytes asked", bytes);
    size_t n = bytes ? (bytes + PIN_ALIGN - 1) / PIN_ALIGN * PIN_ALIGN : PIN_ALIGN;
    size_t need = n + PIN_ALIGN;
    pthread_mutex_lock(&c->lock);
    void *p = take_idle(c, n);
    if (!p) p = carve(c, n);
    size_t slab = c->pinned < PIN_SLAB_MIN   ? PIN_SLAB_MIN
                  : c->pinned > PIN_SLAB_MAX ? PIN_SLAB_MAX
                                             : c->pinned;
    int grown = c->n_slabs < c->cap_slabs;
    if (!p && !grown) {
        int cap = c->cap_slabs ? 2 * c->cap_slabs : 16;
        void **more = (void **)realloc(c->slabs, (size_t)cap * sizeof *more);
        if (more) c->slabs = more, c->cap_slabs = cap, grown = 1;
    }
    pthread_mutex_unlock(&c->lock);
    if (p) {
        *out = p;
        return VX_OK;
    }
    if (!grown) return vx_err_set(e, VX_ERR_NOMEM, "device: out of memory");
    int own = need > slab; /* a block larger than a slab: a slab of its own */
    if (own) slab = need;
    void *fresh = NULL;
    cudaError_t rc = cudaMallocHost(&fresh, slab);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        return vx_err_set(e, VX_ERR_NOMEM, "cudaMallocHost of %.1f MB failed: %s", slab / 1e6,
                          cudaGetErrorString(rc));
    }
    pthread_mutex_lock(&c->lock);
    if (c->n_slabs == c->cap_slabs) { /* others' slabs filled the room meanwhile */
        int cap = 2 * c->cap_slabs;
        void **more = (void **)realloc(c->slabs, (size_t)cap * sizeof *more);
        if (!more) {
            pthread_mutex_unlock(&c->lock);
            cudaFreeHost(fresh);
            return vx_err_set(e, VX_ERR_NOMEM, "device: out of memory");
        }
        c->slabs = more, c->cap_slabs = cap;
    }
    c->slabs[c->n_slabs++] = fresh;
    c->pinned += slab;
    if (own) {
        pin_header *h = (pin_header *)fresh;
        h->size = n, h->magic = PIN_MAGIC;
        p = (char *)fresh + PIN_ALIGN;
    } else {
        c->bump = (char *)fresh; /* the old slab's rest stays unused */
        c->left = slab;
        p = carve(c, n);
    }
    pthread_mutex_unlock(&c->lock);
    *out = p;
    return VX_OK;
}

/* Back to the cache once the owning context's streams are idle: cudaFreeHost, which waited for
 * the whole device, made it safe to free a buffer a copy was still filling; the next owner of
 * the block may be another trial. */
static void cuda_free_host(vx_device *d, void *p)
{
    if (!p || vx_cuda_enter(d, NULL) != VX_OK) return;
    streams_wait(d);
    cache *c = cache_of(d);
    pthread_mutex_lock(&c->lock);
    if (c->n_idle == c->cap_idle) {
        int cap = c->cap_idle ? 2 * c->cap_idle : 64;
        void **grown = (void **)realloc(c->idle, (size_t)cap * sizeof *grown);
        if (grown) c->idle = grown, c->cap_idle = cap;
    }
    /* with no room to list it, the block stays the slab's until the context closes */
    if (c->n_idle < c->cap_idle) c->idle[c->n_idle++] = p;
    pthread_mutex_unlock(&c->lock);
}

/* What the cache holds, given back. */
static void cache_close(cache *c)
{
    for (int i = 0; i < c->streams.n; i++) cudaStreamDestroy((cudaStream_t)c->streams.v[i]);
    for (int i = 0; i < c->events.n; i++) cudaEventDestroy((cudaEvent_t)c->events.v[i]);
    for (int i = 0; i < c->timed_events.n; i++) cudaEventDestroy((cudaEvent_t)c->timed_events.v[i]);
    for (int i = 0; i < c->n_slabs; i++) cudaFreeHost(c->slabs[i]);
    free(c->streams.v), free(c->events.v), free(c->timed_events.v);
    free(c->slabs), free(c->idle);
    pthread_mutex_destroy(&c->lock);
}

static void cuda_close(vx_device *d)
{
    cuda_impl *c = (cuda_impl *)d->impl;
    if (!c) return;
    launcher_stop(&c->L);
    pthread_mutex_destroy(&c->L.lock);
    pthread_cond_destroy(&c->L.work);
    pthread_cond_destroy(&c->L.done);
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->alloc) {
        cudaStreamSynchronize(c->alloc);
        cudaStreamDestroy(c->alloc);
    }
    if (c->reset) cudaStreamDestroy(c->reset);
    cache_close(&c->c);
    free(c);
    d->impl = NULL;
}

/* A private stream per call: the copy orders only against itself (work already queued
 * elsewhere is the caller's to have waited for), and nothing else on the device waits for it. */
static vx_status cuda_copy(vx_device *d, void *dst, const void *src, size_t n, int to_device,
                           vx_err *e)
{
    cudaStream_t s = NULL;
    vx_status st = vx_cuda_stream_create(d, &s, e);
    if (st) return st;
    VX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n,
                                  to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s));
    VX_CUDA_CHECK(cudaStreamSynchronize(s));
fail:
    vx_cuda_stream_destroy(d, s);
    return st;
}

static vx_status cuda_stream_create(vx_device *d, vx_stream *out, vx_err *e)
{
    cudaStream_t s = NULL;
    vx_status st = vx_cuda_stream_create(d, &s, e);
    *out = s;
    return st;
}

static vx_status cuda_stream_sync(vx_device *d, vx_stream vs, vx_err *e)
{
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    if (!vs) return vx_err_set(e, VX_ERR_ARG, "device: no stream to wait for on %s", d->name);
    VX_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)vs));
fail:
    return st;
}

static void cuda_stream_destroy(vx_device *d, vx_stream s)
{
    vx_cuda_stream_destroy(d, (cudaStream_t)s);
}

static vx_status cuda_mem_info(vx_device *d, size_t *free_b, size_t *total_b, vx_err *e)
{
    vx_status st = vx_cuda_enter(d, e);
    if (st) return st;
    VX_CUDA_CHECK(cudaMemGetInfo(free_b, total_b));
fail:
    return st;
}

static int cuda_units(const vx_device *d) { return vx_cuda_sm_count(d); }

static const vx_device_ops cuda_ops = {
    cuda_alloc, cuda_free,          cuda_alloc_host,   cuda_free_host,      cuda_close,
    cuda_copy,  cuda_stream_create, cuda_stream_sync,  cuda_stream_destroy, cuda_mem_info,
    cuda_units, cuda_prepare,       cuda_set_launcher, cuda_reserve_ahead,  cuda_share_close};

extern "C" vx_status vx_device_open_cuda(const vx_device_cfg *cfg, vx_device **out, vx_err *e)
{
    *out = NULL;
    vx_status st = VX_OK;
    int n = 0;
    size_t free_b = 0, total_b = 0;
    cudaDeviceProp p;
    cublasStatus_t bs;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    if (cfg->index < 0 || cfg->index >= n)
        return vx_err_set(e, VX_ERR_ARG, "device: cuda:%d asked for, but %d CUDA device(s) visible",
                          cfg->index, n);
    vx_device *d = vx_device_alloc(VX_DEVICE_CUDA, cfg->index);
    cuda_impl *c = (cuda_impl *)calloc(1, sizeof *c);
    if (!d || !c) {
        free(d), free(c);
        return vx_err_set(e, VX_ERR_NOMEM, "device: out of memory");
    }
    pthread_mutex_init(&c->c.lock, NULL);
    pthread_mutex_init(&c->L.lock, NULL);
    pthread_cond_init(&c->L.work, NULL);
    pthread_cond_init(&c->L.done, NULL);
    d->impl = c;
    d->ops = &cuda_ops;
    VX_CUDA_CHECK(cudaSetDevice(cfg->index));
    {
        /* how a host thread waits for the device: VIXEN_CUDA_SYNC=block makes it sleep instead of
         * spinning on a core (many trials' threads, more than cores), =yield yields; the default
         * is the runtime's (spin while there are cores to spare) */
        const char *sync = getenv("VIXEN_CUDA_SYNC");
        unsigned flags = !sync                        ? 0
                         : strcmp(sync, "block") == 0 ? cudaDeviceScheduleBlockingSync
                         : strcmp(sync, "yield") == 0 ? cudaDeviceScheduleYield
                         : strcmp(sync, "spin") == 0  ? cudaDeviceScheduleSpin
                                                      : 0;
        if (flags) {
            cudaError_t rc = cudaSetDeviceFlags(flags);
            if (rc != cudaSuccess) {
                cudaGetLastError();
                vx_log(VX_LOG_WARN, "VIXEN_CUDA_SYNC=%s not applied: %s", sync,
                       cudaGetErrorString(rc));
            }
        }
    }
    VX_CUDA_CHECK(cudaGetDeviceProperties(&p, cfg->index));
    VX_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    c->sm_count = p.multiProcessorCount;
    VX_CUDA_CHECK(cudaDeviceGetAttribute(&c->pools, cudaDevAttrMemoryPoolsSupported, cfg->index));
    if (c->pools) {
        cudaMemPool_t pool;
        unsigned long long keep = 0; /* nothing held back from the device (the top comment) */
        VX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, cfg->index));
        VX_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
        VX_CUDA_CHECK(cudaStreamCreateWithFlags(&c->alloc, cudaStreamNonBlocking));
    }
    VX_CUDA_CHECK(cudaStreamCreateWithFlags(&c->reset, cudaStreamNonBlocking));
    bs = cublasLtCreate(&c->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        st = vx_err_set(e, VX_ERR_CUDA, "device: cublasLtCreate failed: status %d", (int)bs);
        goto fail;
    }
    d->total = total_b;
    d->budget = cfg->budget ? cfg->budget : free_b / 20 * 19;
    snprintf(d->name, sizeof d->name, "cuda:%d %.80s, sm_%d%d, %d SMs, %.1f GiB", cfg->index,
             p.name, p.major, p.minor, p.multiProcessorCount, total_b / 1073741824.0);
    snprintf(d->kernels, sizeof d->kernels, "%.80s, sm_%d%d, %d SMs, cuBLASLt %zu", p.name, p.major,
             p.minor, p.multiProcessorCount, (size_t)cublasLtGetVersion());
    *out = d;
    return VX_OK;
fail:
    cuda_close(d);
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->streams_lock);
    free(d);
    return st;
}

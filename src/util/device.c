/* device.c — the device context's generic part: the CPU kind, memory accounts charged to a
 * context under its budget, and the backend lookup. The CUDA kind is device_cuda.cu; opening
 * either is device_open.c.
 *
 * Accounting is by reservation, not by measurement: an object's account adds the bytes of every
 * block it allocates and the context refuses a block that would take the reserved total past the
 * budget — before asking the allocator — so trials sharing a device cannot starve each other
 * through the back door of the driver's free list. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "device_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct vx_mem_block {
    void *p;
    size_t n;
    int host;
    vx_mem_block *next;
};

void vx_device_cfg_default(vx_device_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->kind = VX_DEVICE_AUTO;
}

vx_device *vx_device_alloc(int kind, int index)
{
    vx_device *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->kind = kind;
    d->index = index;
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->streams_lock, NULL);
    return d;
}

static int g_queues_ours; /* this process set CUDA_DEVICE_MAX_CONNECTIONS */

int vx_device_request_work_queues(int n)
{
    if (getenv("CUDA_DEVICE_MAX_CONNECTIONS")) return 0;
    char v[16];
    snprintf(v, sizeof v, "%d", n < 1 ? 1 : n > 32 ? 32 : n);
    if (setenv("CUDA_DEVICE_MAX_CONNECTIONS", v, 1) != 0) return 0;
    g_queues_ours = 1;
    return 1;
}

/* The GPUs this process will see, without a CUDA call (which would be too early to ask for
 * queues after): CUDA_VISIBLE_DEVICES's entries where it is set, else the driver's list. */
static int gpus_without_cuda(void)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;
    if (v) {
        for (const char *p = v; *p; p++)
            if (*p != ',' && (p == v || p[-1] == ',')) n++;
        return n;
    }
    DIR *dir = opendir("/proc/driver/nvidia/gpus");
    if (!dir) return 0;
    for (struct dirent *d; (d = readdir(dir));)
        if (d->d_name[0] != '.') n++;
    closedir(dir);
    return n;
}

int vx_device_work_queues_for(int ranks_on_node)
{
    int gpus = gpus_without_cuda();
    if (gpus < 1) gpus = 1;
    if (ranks_on_node < 1) ranks_on_node = 1;
    int per_gpu = (ranks_on_node + gpus - 1) / gpus;
    int q = 32 / per_gpu;
    return q < 8 ? 8 : q;
}

void vx_device_forget_work_queues(void)
{
    if (g_queues_ours) unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    g_queues_ours = 0;
}

/* ---- the CPU kind ---------------------------------------------------------------------------- */

static vx_status cpu_alloc(vx_device *d, size_t bytes, void **out, vx_err *e)
{
    (void)d;
    /* large blocks huge-page aligned (util.h: first-touch faults cost more than the work) */
    *out = bytes >= ((size_t)4 << 20) ? vx_alloc_big(bytes) : malloc(bytes ? bytes : 1);
    return *out ? VX_OK : vx_err_set(e, VX_ERR_NOMEM, "out of host memory (%zu bytes)", bytes);
}

static void cpu_free(vx_device *d, void *p)
{
    (void)d;
    free(p);
}

static void cpu_close(vx_device *d) { (void)d; }

static vx_status cpu_copy(vx_device *d, void *dst, const void *src, size_t n, int to_device,
                          vx_err *e)
{
    (void)d, (void)to_device, (void)e;
    memcpy(dst, src, n);
    return VX_OK;
}

static vx_status cpu_stream_create(vx_device *d, vx_stream *out, vx_err *e)
{
    (void)d, (void)e;
    *out = NULL;
    return VX_OK;
}

static vx_status cpu_stream_sync(vx_device *d, vx_stream s, vx_err *e)
{
    (void)d, (void)s, (void)e;
    return VX_OK;
}

static void cpu_stream_destroy(vx_device *d, vx_stream s) { (void)d, (void)s; }

static void host_memory(size_t *total, size_t *avail);

static vx_status cpu_mem_info(vx_device *d, size_t *free_b, size_t *total_b, vx_err *e)
{
    (void)d, (void)e;
    host_memory(total_b, free_b);
    return VX_OK;
}

static int cpu_units(const vx_device *d)
{
    (void)d;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static const vx_device_ops cpu_ops = {cpu_alloc,
                                      cpu_free,
                                      cpu_alloc,
                                      cpu_free,
                                      cpu_close,
                                      cpu_copy,
                                      cpu_stream_create,
                                      cpu_stream_sync,
                                      cpu_stream_destroy,
                                      cpu_mem_info,
                                      cpu_units,
                                      NULL,
                                      NULL,
                                      NULL,
                                      NULL};

/* MemAvailable from /proc/meminfo, else the physical memory. */
static void host_memory(size_t *total, size_t *avail)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    *total = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    *avail = *total;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kb;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            *avail = (size_t)kb * 1024;
            break;
        }
    if (f) fclose(f);
}

void openblas_set_num_threads(int n); /* OpenBLAS's own (cblas.h does not declare them) */
char *openblas_get_corename(void);
char *openblas_get_config(void);

static void cpu_fill(vx_device *d, size_t budget)
{
    size_t avail;
    host_memory(&d->total, &avail);
    d->budget = budget ? budget : avail / 20 * 19;
    d->ops = &cpu_ops;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    /* OpenBLAS picks its kernels by the processor (OPENBLAS_CORETYPE overrides it), and kernels
     * of two families sum a product in another order: the same seed trains other weights on a
     * machine whose kernels differ, so the name says which ones ran. */
    snprintf(d->name, sizeof d->name, "cpu (%ld cores, %.1f GiB, OpenBLAS %s)", cores,
             d->total / 1073741824.0, openblas_get_corename());
    char version[32] = "";
    sscanf(openblas_get_config(), "OpenBLAS %31s", version); /* "OpenBLAS 0.3.21 DYNAMIC_ARCH …" */
    snprintf(d->kernels, sizeof d->kernels, "cpu, OpenBLAS %s %s", version,
             openblas_get_corename());
}

vx_status vx_device_open_cpu(const vx_device_cfg *cfg, vx_device **out, vx_err *e)
{
    *out = NULL;
    vx_device *d = vx_device_alloc(VX_DEVICE_CPU, 0);
    if (!d) return vx_err_set(e, VX_ERR_NOMEM, "device: out of memory");
    cpu_fill(d, cfg->budget);
    if (cfg->threads > 0) openblas_set_num_threads(cfg->threads);
    *out = d;
    return VX_OK;
}

static vx_device g_cpu;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static void cpu_global_init(void)
{
    g_cpu.kind = VX_DEVICE_CPU;
    pthread_mutex_init(&g_cpu.lock, NULL);
    pthread_mutex_init(&g_cpu.streams_lock, NULL); /* a share of it closing takes both */
    cpu_fill(&g_cpu, 0);
    g_cpu.budget = SIZE_MAX; /* the default context refuses nothing the allocator gives */
}

vx_device *vx_device_cpu(void)
{
    pthread_once(&g_cpu_once, cpu_global_init);
    return &g_cpu;
}

/* A context closed while objects still hold memory, streams or shares on it is a caller's bug,
 * said in a warning; it is closed when the last of them goes, not at once: freed then, their
 * frees would go through a freed context. Whoever lets go of the last hold claims the close in
 * the same critical section (vx_device_idle_claim), so exactly one thread closes it and nobody
 * touches it after. */

int vx_device_idle_claim(vx_device *d)
{
    if (d->closing != 1 || d->n_blocks || d->reserved || d->host || d->n_streams || d->n_shares)
        return 0;
    d->closing = 2;
    return 1;
}

void vx_device_close_now(vx_device *d)
{
    vx_device *up = d->parent;
    if (!up) d->ops->close(d);
    else if (d->ops->share_close) d->ops->share_close(d); /* a share's handles are its parent's */
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->streams_lock);
    free(d->streams);
    free(d);
    if (!up) return;
    pthread_mutex_lock(&up->lock); /* the share no longer holds its parent */
    pthread_mutex_lock(&up->streams_lock);
    up->n_shares--;
    int claimed = vx_device_idle_claim(up);
    pthread_mutex_unlock(&up->streams_lock);
    pthread_mutex_unlock(&up->lock);
    if (claimed) vx_device_close_now(up);
}

void vx_device_close(vx_device *d)
{
    if (!d || d == &g_cpu) return;
    pthread_mutex_lock(&d->lock);
    pthread_mutex_lock(&d->streams_lock);
    int again = d->closing != 0;
    if (!again) d->closing = 1;
    size_t reserved = d->reserved, host = d->host;
    int streams = d->n_streams, shares = d->n_shares;
    int now = !again && vx_device_idle_claim(d);
    char name[sizeof d->name];
    memcpy(name, d->name, sizeof name); /* d may be closed by another thread once unlocked */
    pthread_mutex_unlock(&d->streams_lock);
    pthread_mutex_unlock(&d->lock);
    if (now) vx_device_close_now(d);
    if (again || now) return;
    if (reserved || host)
        vx_log(VX_LOG_WARN,
               "device %s closed with %zu bytes still reserved (%zu pinned): closed once they are "
               "freed",
               name, reserved, host);
    if (streams)
        vx_log(VX_LOG_WARN,
               "device %s closed with %d stream(s) not destroyed: closed once they are", name,
               streams);
    if (shares)
        vx_log(VX_LOG_WARN, "device %s closed with %d share(s) still open: closed once they are",
               name, shares);
}

static const vx_device *dev_of(const vx_device *d) { return d ? d : vx_device_cpu(); }

vx_status vx_device_share(vx_device *d0, size_t budget, const char *label, vx_device **out,
                          vx_err *e)
{
    *out = NULL;
    vx_device *d = (vx_device *)dev_of(d0);
    vx_device *s = vx_device_alloc(d->kind, d->index);
    if (!s) return vx_err_set(e, VX_ERR_NOMEM, "device: out of memory");
    pthread_mutex_lock(&d->lock);
    int closed = d->closing != 0;
    if (!closed) d->n_shares++; /* the parent stays until its last share closes */
    else vx_err_set(e, VX_ERR_ARG, "device: %s is closed: no share of it", d->name);
    pthread_mutex_unlock(&d->lock);
    if (closed) {
        pthread_mutex_destroy(&s->lock);
        pthread_mutex_destroy(&s->streams_lock);
        free(s);
        return VX_ERR_ARG;
    }
    s->total = d->total;
    s->budget = budget;
    s->ops = d->ops;
    s->backends = d->backends;
    s->impl = d->impl;
    s->parent = d;
    snprintf(s->label, sizeof s->label, "%s", label ? label : "");
    snprintf(s->name, sizeof s->name, "%.120s (share '%.40s', %.1f MB)", d->name, s->label,
             budget / 1e6);
    memcpy(s->kernels, d->kernels, sizeof s->kernels);
    *out = s;
    return VX_OK;
}

const char *vx_device_label(const vx_device *d) { return dev_of(d)->label; }
const char *vx_device_kernels(const vx_device *d) { return dev_of(d)->kernels; }

vx_status vx_device_query(const vx_device *d0, vx_device_info *out, vx_err *e)
{
    vx_device *d = (vx_device *)dev_of(d0);
    memset(out, 0, sizeof *out);
    out->units = d->ops->sm_count(d);
    return d->ops->mem_info(d, &out->free, &out->total, e);
}

int vx_device_kind(const vx_device *d) { return dev_of(d)->kind; }
int vx_device_index(const vx_device *d) { return dev_of(d)->index; }
const char *vx_device_name(const vx_device *d) { return dev_of(d)->name; }

void vx_device_memory(const vx_device *d0, vx_device_mem *out)
{
    vx_device *d = (vx_device *)dev_of(d0);
    pthread_mutex_lock(&d->lock);
    out->total = d->total, out->budget = d->budget, out->reserved = d->reserved;
    out->peak = d->peak, out->host = d->host, out->refused = d->refused;
    pthread_mutex_unlock(&d->lock);
}

size_t vx_device_available(const vx_device *d)
{
    vx_device_mem m;
    vx_device_memory(d, &m);
    return m.budget > m.reserved ? m.budget - m.reserved : 0;
}

vx_status vx_device_upload(vx_device *d, void *dev_dst, const void *host_src, size_t n, vx_err *e)
{
    vx_device *x = (vx_device *)dev_of(d);
    return n ? x->ops->copy(x, dev_dst, host_src, n, 1, e) : VX_OK;
}

vx_status vx_device_download(vx_device *d, void *host_dst, const void *dev_src, size_t n, vx_err *e)
{
    vx_device *x = (vx_device *)dev_of(d);
    return n ? x->ops->copy(x, host_dst, dev_src, n, 0, e) : VX_OK;
}

vx_status vx_stream_create(vx_device *d, vx_stream *out, vx_err *e)
{
    vx_device *x = (vx_device *)dev_of(d);
    return x->ops->stream_create(x, out, e);
}

vx_status vx_stream_sync(vx_device *d, vx_stream s, vx_err *e)
{
    vx_device *x = (vx_device *)dev_of(d);
    return x->ops->stream_sync(x, s, e);
}

void vx_stream_destroy(vx_device *d, vx_stream s)
{
    vx_device *x = (vx_device *)dev_of(d);
    x->ops->stream_destroy(x, s);
}

void vx_device_on_ready(vx_device *d, vx_ready_fn fn, void *ctx)
{
    if (!d) return;
    d->on_ready = fn;
    d->ready_ctx = ctx;
}

void vx_device_ready(vx_device *d)
{
    if (d && d->on_ready) d->on_ready(d->ready_ctx);
}

vx_status vx_device_prepare(vx_device *d, int trainings, vx_err *e)
{
    vx_device *x = (vx_device *)dev_of(d);
    return x->ops->prepare && trainings > 0 ? x->ops->prepare(x, trainings, e) : VX_OK;
}

vx_status vx_device_reserve_ahead(vx_device *share, size_t bytes, vx_err *e)
{
    if (!share || !share->parent)
        return vx_err_set(e, VX_ERR_ARG, "device: memory is reserved ahead on a share only");
    if (share->ahead || share->reserved)
        return vx_err_set(e, VX_ERR_ARG, "device: %s: reserve ahead once, before its first block",
                          share->name);
    return share->ops->reserve_ahead && bytes ? share->ops->reserve_ahead(share, bytes, e) : VX_OK;
}

vx_status vx_device_set_launcher(vx_device *d, int one, vx_err *e)
{
    vx_device *x = (vx_device *)dev_of(d);
    return x->ops->set_launcher ? x->ops->set_launcher(x, one, e) : VX_OK;
}

const void *vx_device_backend(const vx_device *d, const char *component)
{
    const vx_backend_entry *b = dev_of(d)->backends;
    for (; b && b->component; b++)
        if (strcmp(b->component, component) == 0) return b->ops;
    return NULL;
}

/* ---- accounts -------------------------------------------------------------------------------- */

void vx_mem_init(vx_mem *m, vx_device *dev, const char *owner)
{
    memset(m, 0, sizeof *m);
    m->dev = (vx_device *)dev_of(dev);
    m->owner = owner;
}

static vx_mem_fault_fn g_fault;
static void *g_fault_ctx;

void vx_mem_set_fault(vx_mem_fault_fn fn, void *ctx)
{
    g_fault_ctx = ctx;
    g_fault = fn;
}

/* Gives one block of `bytes` back to one context; with claim, also whether that made a closed
 * context idle (vx_device_idle_claim, in the same critical section: of two threads giving back
 * its last blocks, only the one that gave back the very last claims it). */
static int uncharge_one(vx_device *d, size_t bytes, int host, int claim)
{
    pthread_mutex_lock(&d->lock);
    if (host) d->host -= bytes;
    else d->reserved -= bytes;
    d->n_blocks--;
    int claimed = 0;
    if (claim && d->closing == 1) { /* closing changes under both locks: either one reads it */
        pthread_mutex_lock(&d->streams_lock);
        claimed = vx_device_idle_claim(d);
        pthread_mutex_unlock(&d->streams_lock);
    }
    pthread_mutex_unlock(&d->lock);
    return claimed;
}

/* One block given back to `own` and the contexts it is a share of, up to (not including) `stop`:
 * the parents first and `own` last, with the claim — once `own` lets go, another thread may
 * close it, and its parents with it, so nothing of them is touched after. Whether `own` was
 * claimed (the caller then closes it). */
static void uncharge_parents(vx_device *d, vx_device *stop, size_t bytes, int host)
{
    if (!d || d == stop) return;
    uncharge_parents(d->parent, stop, bytes, host);
    uncharge_one(d, bytes, host, 0);
}

static int uncharge_upto(vx_device *own, vx_device *stop, size_t bytes, int host)
{
    if (own == stop) return 0;
    uncharge_parents(own->parent, stop, bytes, host);
    return uncharge_one(own, bytes, host, 1);
}

/* Reserves `bytes` on one context (device memory unless host), or says why not. */
static vx_status charge_one(vx_device *d, const vx_mem *m, size_t bytes, int host, vx_err *e)
{
    vx_status st = VX_OK;
    pthread_mutex_lock(&d->lock);
    if (!host && bytes > d->budget - (d->reserved < d->budget ? d->reserved : d->budget)) {
        d->refused++;
        st = vx_err_set(e, VX_ERR_NOMEM,
                        "%s: %.1f MB more would exceed the memory budget of %s (%.1f MB, %.1f MB "
                        "reserved)",
                        m->owner, bytes / 1e6, d->name, d->budget / 1e6, d->reserved / 1e6);
    } else if (host) d->host += bytes, d->n_blocks++;
    else d->reserved += bytes, d->n_blocks++;
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* The peaks of the account's context and those it is a share of, once its block is allocated: a
 * reservation refused further up, or an allocation that failed, was never held and is not a
 * peak (a trial's measured memory is its context's peak). */
static void note_peak(vx_device *d)
{
    for (; d; d = d->parent) {
        pthread_mutex_lock(&d->lock);
        if (d->reserved > d->peak) d->peak = d->reserved;
        pthread_mutex_unlock(&d->lock);
    }
}

/* Reserves `bytes` on the account's context and every context it is a share of (a share first,
 * so its own budget speaks first), or on none. */
static vx_status charge(vx_mem *m, size_t bytes, int host, int *claimed, vx_err *e)
{
    *claimed = 0;
    vx_mem_fault_fn fault = g_fault;
    int how = !host && fault ? fault(g_fault_ctx, m->dev, m->owner, bytes) : 0;
    if (how) {
        vx_device *d = m->dev; /* whose budget says no: the context's, or the device's */
        while (how == VX_FAULT_DEVICE && d->parent) d = d->parent;
        pthread_mutex_lock(&d->lock);
        d->refused++;
        pthread_mutex_unlock(&d->lock);
        return vx_err_set(e, VX_ERR_NOMEM, "%s: %.1f MB refused on %s (out of memory, injected)",
                          m->owner, bytes / 1e6, d->name);
    }
    for (vx_device *d = m->dev; d; d = d->parent) {
        vx_status st = charge_one(d, m, bytes, host, e);
        if (st) { /* the contexts below d give it back: a closed one may be idle now */
            *claimed = uncharge_upto(m->dev, d, bytes, host);
            return st;
        }
    }
    return VX_OK;
}

/* Whether the account's context was closed while held and this made it idle: then the caller
 * closes it. */
static int uncharge(vx_mem *m, size_t bytes, int host)
{
    return uncharge_upto(m->dev, NULL, bytes, host);
}

static vx_status mem_alloc(vx_mem *m, size_t bytes, void *ptr, int host, vx_err *e)
{
    void **out = ptr;
    *out = NULL;
    vx_mem_block *b = malloc(sizeof *b);
    if (!b) return vx_err_set(e, VX_ERR_NOMEM, "%s: out of host memory", m->owner);
    int claimed;
    vx_status st = charge(m, bytes, host, &claimed, e);
    if (st) {
        free(b);
        if (claimed) vx_device_close_now(m->dev);
        return st;
    }
    vx_device *d = m->dev;
    st = host ? d->ops->alloc_host(d, bytes, &b->p, e) : d->ops->alloc(d, bytes, &b->p, e);
    if (st) {
        claimed = uncharge(m, bytes, host);
        free(b);
        if (e) {
            char msg[sizeof e->msg];
            snprintf(msg, sizeof msg, "%s", e->msg);
            vx_err_set(e, st, "%s: %s", m->owner, msg);
        }
        if (claimed) vx_device_close_now(d);
        return st;
    }
    b->n = bytes, b->host = host;
    b->next = m->blocks;
    m->blocks = b;
    if (host) m->host += bytes;
    else m->bytes += bytes, note_peak(d);
    *out = b->p;
    return VX_OK;
}

vx_status vx_mem_alloc(vx_mem *m, size_t bytes, void *ptr, vx_err *e)
{
    return mem_alloc(m, bytes, ptr, 0, e);
}

vx_status vx_mem_alloc_host(vx_mem *m, size_t bytes, void *ptr, vx_err *e)
{
    return mem_alloc(m, bytes, ptr, 1, e);
}

void vx_mem_release(vx_mem *m)
{
    if (!m->dev) return;
    vx_device *d = m->dev;
    int claimed = 0; /* the last holder of a closed context's memory closes it */
    for (vx_mem_block *b = m->blocks, *next; b; b = next) {
        next = b->next;
        if (b->host) d->ops->free_host(d, b->p);
        else d->ops->free(d, b->p);
        claimed |= uncharge(m, b->n, b->host);
        free(b);
    }
    m->blocks = NULL;
    m->bytes = m->host = 0;
    if (claimed) vx_device_close_now(d);
}

/* device.h — where work runs: a device context (the CPU, or one CUDA GPU) that every object of a
 * training is created on, and that many trainings can share.
 *
 * A context holds what objects on one device have in common:
 *   - which device it is (a CUDA entry point makes it current — cudaSetDevice — for the calling
 *     thread, so trials in several threads may share one context);
 *   - the shared cuBLASLt handle and stream creation (CUDA; src/util/device_cuda.h);
 *   - a memory budget. Every allocation an object makes goes through its account (vx_mem), which
 *     charges the context: each object can say how many bytes it reserved, the context how many
 *     all of them did, and an allocation past the budget fails with VX_ERR_NOMEM instead of
 *     taking memory another trial counted on;
 *   - the backends: which implementation of each component (environment, replay, network,
 *     learner) runs on this kind of device. vx_device_open fills them (src/util/device_open.c, the
 *     one place that knows which backends a build has); a component asks with vx_device_backend.
 *
 * Streams: a vx_stream is a cudaStream_t on a CUDA device and NULL on the CPU. Array arguments of
 * an object created on a device live in that device's memory (host memory for the CPU).
 *
 * NULL as a device means the process-wide CPU context (no budget): what tests and small tools use.
 */
#ifndef VIXEN_DEVICE_H
#define VIXEN_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include "vixen/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device kinds. AUTO (only when opening) is the first CUDA device when one is present, else the
 * CPU. */
enum { VX_DEVICE_AUTO = 0, VX_DEVICE_CPU = 1, VX_DEVICE_CUDA = 2 };

typedef struct vx_device vx_device;
typedef void *vx_stream;

typedef struct {
    int kind;      /* VX_DEVICE_AUTO, _CPU, _CUDA */
    int index;     /* CUDA device ordinal */
    size_t budget; /* bytes objects may reserve; 0: what the device has free at opening, less 5% */
    int threads;   /* CPU: BLAS threads (0: leave OpenBLAS's choice) */
} vx_device_cfg;

void vx_device_cfg_default(vx_device_cfg *c);

/* Asks for n hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS, at most 32) for this process's
 * CUDA streams; it takes effect only before the process's first CUDA call, and a value the user
 * set is kept (then it returns 0, else 1). CUDA's default of 8 puts many trials' streams behind
 * one another (H200, 20 trials at once: their epochs 0.18 s with 8 queues, 0.10 s with 32), but
 * the queues are the GPU's channels, shared by every process on it (20 processes asking for 32:
 * 14 could not create a context), so only a process that runs many trials at once asks for more:
 * `vixen hyperopt` (32, divided among the ranks that share a GPU) and `vixen bench`.
 * vx_device_forget_work_queues takes the request back out of the environment, for a child about
 * to run another program. vx_device_work_queues_for: 32 divided among the ranks of a node that
 * share one of its GPUs (counted from CUDA_VISIBLE_DEVICES, else the driver's list, without a
 * CUDA call), at least CUDA's 8. */
int vx_device_request_work_queues(int n);
void vx_device_forget_work_queues(void);
int vx_device_work_queues_for(int ranks_on_node);

/* Opens a context. CUDA asked for in a build without CUDA, or with no device, is an error that
 * says which. */
vx_status vx_device_open(const vx_device_cfg *cfg, vx_device **out, vx_err *e);
void vx_device_close(vx_device *d);
/* A share of d: a context on the same device (its handles, streams and backends) with a budget of
 * its own. Every block an object on the share reserves is charged to the share and to d, so an
 * object that outgrows its share fails by itself — the trials of a search each get one — while d
 * still refuses what would take all shares past its budget. `label` names the share in errors.
 * Close shares before d. */
vx_status vx_device_share(vx_device *d, size_t budget, const char *label, vx_device **out,
                          vx_err *e);

/* What the hardware says now: memory free and in all (the driver's count for a GPU, MemAvailable
 * and RAM for the CPU: other processes' use included, unlike the budget), and multiprocessors
 * (CUDA) or online cores (the CPU). */
typedef struct {
    size_t free, total;
    int units;
} vx_device_info;

vx_status vx_device_query(const vx_device *d, vx_device_info *out, vx_err *e);

/* Usable CUDA devices in this build (0 without CUDA, a driver or a device). */
int vx_device_cuda_count(void);

/* Opens the context of one of `local_size` processes on a node (the ranks of an MPI job there):
 * kind CUDA (or AUTO where there are GPUs) takes GPU local_rank modulo the GPUs this process sees,
 * its budget (cfg->budget, or what the GPU has free) divided among the processes that share that
 * GPU; the CPU's memory budget is divided among all of them. *cores is this process's share of the
 * node's cores: the cores it is bound to when a launcher bound it, else the node's divided by
 * local_size. (Every process is taken to see the node's GPUs in the same order: a launcher that
 * gives each one GPU of its own makes them all "GPU 0" and divides its budget needlessly.) */
vx_status vx_device_open_local(const vx_device_cfg *cfg, int local_rank, int local_size,
                               vx_device **out, int *cores, vx_err *e);

/* The process-wide CPU context (what NULL stands for). */
vx_device *vx_device_cpu(void);

int vx_device_kind(const vx_device *d);
int vx_device_index(const vx_device *d);
/* "cpu (2 cores, 23.4 GiB)" or "cuda:0 NVIDIA H200, sm_90, 132 SMs, 139.8 GiB" */
const char *vx_device_name(const vx_device *d);
/* What decides the order of the device's arithmetic, so that two runs of one seed train the same
 * weights where it is the same: "cpu, OpenBLAS 0.3.21 Haswell" (OpenBLAS picks its kernels by
 * the processor) or "NVIDIA H200, sm_90, 132 SMs, cuBLASLt 130000". Unlike the name, it leaves
 * out what changes nothing in the results (the index, the memory, a share's label). */
const char *vx_device_kernels(const vx_device *d);

typedef struct {
    size_t total;    /* the device's memory (host RAM for the CPU) */
    size_t budget;   /* what objects on this context may reserve */
    size_t reserved; /* what they hold now */
    size_t peak;     /* the most they held at once */
    size_t host;     /* pinned host memory they hold (CUDA staging) */
    size_t refused;  /* reservations this context's own budget refused (or the fault hook, asked
                      * on it): for a share, "the share was too small", not "the device was full" */
} vx_device_mem;

void vx_device_memory(const vx_device *d, vx_device_mem *out);
/* budget − reserved: the share an object created now can count on. */
size_t vx_device_available(const vx_device *d);

/* A stream of the device for work queued by the caller (NULL on the CPU, where work is done when
 * a call returns); sync waits until everything queued on it is done. */
vx_status vx_stream_create(vx_device *d, vx_stream *out, vx_err *e);
vx_status vx_stream_sync(vx_device *d, vx_stream s, vx_err *e);
void vx_stream_destroy(vx_device *d, vx_stream s);

/* Made ready for `trainings` trainings that are about to start at once on d or its shares (CUDA:
 * their streams and events made in advance, which twenty trials making them at once while
 * others already run would queue for; the CPU: nothing). */
vx_status vx_device_prepare(vx_device *d, int trainings, vx_err *e);
/* The memory a share expects its objects to take, `bytes`, taken from the device now in one
 * piece (CUDA; the CPU: nothing): the share's blocks are then carved from it, a freed one kept
 * for the share's next block of its size, instead of each asking the driver, which twenty trials
 * setting up at once queue for (measured on the H200: 86 allocations 1.4 s in all, up to 38 ms
 * each). Only a speed-up: blocks past the piece come from the driver as before, the budget is
 * charged block by block as without it, and the piece goes back when the share closes. Once per
 * share, on a share only, before its first block. */
vx_status vx_device_reserve_ahead(vx_device *share, size_t bytes, vx_err *e);
/* one = 1: every graph launch on d and its shares is issued by one launcher thread of the
 * context (callers hand it over and wait until it is issued, so each stream's order is theirs);
 * 0: each thread launches its own (the default). Switch only while nothing is being launched.
 * No effect on the CPU. */
vx_status vx_device_set_launcher(vx_device *d, int one, vx_err *e);

/* A training on d says, once its objects (networks, buffers, the graphs built at creation) are
 * made and before its work starts, that it is ready (vx_train_run does); a hook set on d hears of
 * it, in the training's thread, and may hold it there: the search starts a chunk's trials' work
 * together, once every one of them has built its graphs (an instantiation while other trials run
 * took up to 100 times as long on the H200). NULL: no hook. */
typedef void (*vx_ready_fn)(void *ctx);
void vx_device_on_ready(vx_device *d, vx_ready_fn fn, void *ctx);
void vx_device_ready(vx_device *d);

/* Synchronous copies between host memory and the device's (any host memory; for setup, tests and
 * tools — the hot path queues its own copies on its streams). On the CPU, memcpy. */
vx_status vx_device_upload(vx_device *d, void *dev_dst, const void *host_src, size_t n, vx_err *e);
vx_status vx_device_download(vx_device *d, void *host_dst, const void *dev_src, size_t n,
                             vx_err *e);

/* The component's implementation for this device, or NULL when the device has none registered
 * (on the CPU a component then uses its reference implementation). */
const void *vx_device_backend(const vx_device *d, const char *component);

/* ---- memory accounts -------------------------------------------------------------------------
 * One per object: every block the object allocates, charged to its device. vx_mem_release frees
 * them all (objects allocate at creation and release at the end: no per-call allocation). On a
 * GPU the free waits for the streams made from the same context (vx_stream_create and the
 * library's own), not for the whole device: a stream the caller made some other way must be idle
 * before the memory its work uses is released. */
typedef struct vx_mem_block vx_mem_block;
typedef struct {
    vx_device *dev;
    const char *owner; /* named in out-of-memory errors: "replay", "dqn learner", … */
    size_t bytes;      /* device memory held */
    size_t host;       /* pinned host memory held */
    vx_mem_block *blocks;
} vx_mem;

void vx_mem_init(vx_mem *m, vx_device *dev, const char *owner);
/* `bytes` of the device's memory (uninitialised) into *(void **)ptr. */
vx_status vx_mem_alloc(vx_mem *m, size_t bytes, void *ptr, vx_err *e);
/* Host memory the device copies to and from at full speed (pinned on CUDA). */
vx_status vx_mem_alloc_host(vx_mem *m, size_t bytes, void *ptr, vx_err *e);
void vx_mem_release(vx_mem *m);

/* Fault injection for the out-of-memory tests: while set, every device-memory reservation first
 * asks fn(ctx, the context it is made on, the owner, bytes). VX_FAULT_REFUSE refuses it with
 * VX_ERR_NOMEM as that context's own budget would (counted in its `refused`: for a share, "the
 * share was too small"); VX_FAULT_DEVICE refuses it as a full device would (counted on the device
 * the context is a share of). 0 lets it through. NULL removes the hook. Process-wide, set while
 * nothing allocates; not for production use. */
enum { VX_FAULT_REFUSE = 1, VX_FAULT_DEVICE = 2 };
typedef int (*vx_mem_fault_fn)(void *ctx, const vx_device *dev, const char *owner, size_t bytes);
void vx_mem_set_fault(vx_mem_fault_fn fn, void *ctx);
/* The label a share was made with ("" for a context that is not a share). */
const char *vx_device_label(const vx_device *d);

#ifdef __cplusplus
}
#endif

#endif

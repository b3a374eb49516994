/* device_internal.h — the device context's insides, shared by device.c (the CPU kind, accounts,
 * lookups), device_cuda.cu (the CUDA kind) and device_open.c (the factory). Not public. */
#ifndef VIXEN_DEVICE_INTERNAL_H
#define VIXEN_DEVICE_INTERNAL_H

#include <pthread.h>
#include "vixen/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a kind of device does for the generic code. */
typedef struct {
    vx_status (*alloc)(vx_device *d, size_t bytes, void **out, vx_err *e);
    void (*free)(vx_device *d, void *p);
    vx_status (*alloc_host)(vx_device *d, size_t bytes, void **out, vx_err *e);
    void (*free_host)(vx_device *d, void *p);
    void (*close)(vx_device *d); /* the kind's own resources (handles), not the struct */
    /* synchronous copy; to_device: host → device, else device → host */
    vx_status (*copy)(vx_device *d, void *dst, const void *src, size_t n, int to_device, vx_err *e);
    vx_status (*stream_create)(vx_device *d, vx_stream *out, vx_err *e);
    vx_status (*stream_sync)(vx_device *d, vx_stream s, vx_err *e);
    void (*stream_destroy)(vx_device *d, vx_stream s);
    /* what the device has free and in all right now (the driver's count, not the budget's) */
    vx_status (*mem_info)(vx_device *d, size_t *free_b, size_t *total_b, vx_err *e);
    int (*sm_count)(const vx_device *d); /* multiprocessors (CUDA), cores (the CPU) */
    /* optional (NULL: nothing to do): vx_device_prepare, vx_device_set_launcher */
    vx_status (*prepare)(vx_device *d, int trainings, vx_err *e);
    vx_status (*set_launcher)(vx_device *d, int one, vx_err *e);
    /* optional: vx_device_reserve_ahead on a share, and what it took given back at its close */
    vx_status (*reserve_ahead)(vx_device *share, size_t bytes, vx_err *e);
    void (*share_close)(vx_device *share);
} vx_device_ops;

/* A component's implementation on a kind of device: {"env", &its_ops}. */
typedef struct {
    const char *component;
    const void *ops;
} vx_backend_entry;

struct vx_device {
    int kind, index;
    char name[192];
    char kernels[160]; /* vx_device_kernels: a share has its parent's */
    size_t total, budget;
    pthread_mutex_t lock; /* guards the counters: trials in several threads share a context */
    size_t reserved, peak, host, refused;
    const vx_device_ops *ops;
    const vx_backend_entry *backends; /* ends with {NULL, NULL}; NULL: none */
    void *impl;                       /* the kind's own state (CUDA: handles) */
    char label[64];                   /* a share's label */
    vx_device *parent;    /* a share (vx_device_share): the context it is carved from, which owns
                           * impl and is charged for everything the share reserves */
    void *ahead;          /* CUDA: a share's memory reserved ahead (vx_device_reserve_ahead) */
    vx_ready_fn on_ready; /* vx_device_on_ready */
    void *ready_ctx;
    /* CUDA: the streams made from this context and not destroyed yet (vx_cuda_stream_create).
     * A free of the context's memory waits for them, and for nothing else on the device: the
     * memory is this context's objects' own, so only their work can still be using it. */
    pthread_mutex_t streams_lock;
    void **streams;
    int n_streams, cap_streams;
    size_t n_blocks; /* blocks reserved on it (a block of 0 bytes too), under lock */
    int n_shares;    /* shares of this context not closed yet (under lock) */
    int closing;     /* 1: vx_device_close was called while something still held memory, streams or
                      * shares on the context; 2: being closed (claimed) */
};

/* A CPU context (device.c), and its initialisation for a struct the caller owns. */
vx_status vx_device_open_cpu(const vx_device_cfg *cfg, vx_device **out, vx_err *e);
/* A CUDA context (device_cuda.cu): device cfg->index made current, its handle made, the budget. */
vx_status vx_device_open_cuda(const vx_device_cfg *cfg, vx_device **out, vx_err *e);
/* With both of d's locks held: whether d was closed (vx_device_close) while something still held
 * it and nothing does now — then the caller, having let go of the locks, closes it with
 * vx_device_close_now (once: the claim marks it). Called where a hold is given back, in the
 * critical section that gives it back. */
int vx_device_idle_claim(vx_device *d);
/* The context's own resources and the struct; a share then lets go of its parent (which it
 * closes in turn when that was the parent's last hold). */
void vx_device_close_now(vx_device *d);
/* The common part of opening: the struct, its lock and counters. */
vx_device *vx_device_alloc(int kind, int index);

#ifdef __cplusplus
}
#endif

#endif

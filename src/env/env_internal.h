/* env_internal.h — what the generic environment (env.c) shares with its backends (env_cpu.c, the
 * reference, and env_cuda.cu). Not public.
 *
 * A backend is a table of functions over an opaque implementation (ggml-backend style). env.c
 * does everything that is the same on every device — checking the settings, resolving the
 * parameters, drawing the first episode starts with vx_env_reset on the host — and hands a
 * backend the finished parameters and initial states: a backend only holds and steps them, so
 * two devices created alike start alike by construction. A backend is found through the device
 * context (vx_device_backend(dev, "env"), registered in src/util/device_open.c); the CPU's is
 * used when a CPU context has none.
 *
 * Streams: env.c remembers the stream of the last queued call (observe, step, copy, load) and
 * passes it to sync, so the synchronous calls wait for that stream only. */
#ifndef VIXEN_ENV_INTERNAL_H
#define VIXEN_ENV_INTERNAL_H

#include "vixen/env.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name; /* "cpu", "cuda": for messages */
    /* N environments over p (host pointers into m) starting from init (N host states, read
     * before it returns). *setup: the stream the creation work ran on (synchronised), which the
     * synchronous calls use until a call names another; NULL on the CPU. */
    vx_status (*create)(const vx_env_params *p, const vx_market *m, const vx_env_state *init,
                        size_t n, vx_device *dev, void **impl, vx_stream *setup, vx_err *e);
    void (*free)(void *impl);
    vx_status (*observe)(void *impl, float *obs, vx_stream s, vx_err *e);
    vx_status (*step)(void *impl, const int32_t *actions, float *obs, float *rewards,
                      uint8_t *terminated, uint8_t *truncated, float *final_obs, vx_stream s,
                      vx_err *e);
    vx_status (*copy_states)(void *impl, vx_env_state *host, vx_stream s, vx_err *e);
    vx_status (*load_states)(void *impl, const vx_env_state *host, vx_stream s, vx_err *e);
    /* Waits until s has done everything queued on it. */
    vx_status (*sync)(void *impl, vx_stream s, vx_err *e);
    /* Actions refused so far, read after everything queued on s (synchronous). */
    vx_status (*bad_actions)(void *impl, uint64_t *count, vx_stream s, vx_err *e);
    size_t (*reserved)(const void *impl); /* bytes of device memory held */
    /* The parameters (pointers into device memory) and the N states, for a kernel that steps
     * the environments itself (vx_env_device_view); NULL: a backend that has none. */
    void (*device_view)(void *impl, vx_env_params *p, vx_env_state **states);
} vx_env_backend;

struct vx_env {
    const vx_env_backend *ops;
    void *impl;
    vx_device *dev;       /* never NULL: NULL at creation is vx_device_cpu() */
    vx_env_params params; /* host view: pointers into the market (and into units) */
    double *units;        /* a vol-scaled reward's unit per row (host; NULL for PnL rewards) */
    size_t n;
    vx_stream last; /* the stream of the last queued call: what synchronous calls wait for */
};

/* env_cpu.c: the reference, used on CPU contexts. */
extern const vx_env_backend vx_env_cpu_ops;
/* env_cuda.cu (CUDA builds): registered for CUDA contexts in src/util/device_open.c. */
extern const vx_env_backend vx_env_cuda_ops;

#ifdef __cplusplus
}
#endif

#endif

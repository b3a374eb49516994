/* device_open.c — the factory: opens a CPU or CUDA device context and attaches the backends this
 * build has for it. With device_cuda.cu, the only code that knows whether the build has CUDA:
 * every component finds its implementation through vx_device_backend, so nothing else needs
 * `#if VX_HAVE_CUDA`, and the core library links without the CUDA one.
 *
 * Built into the CUDA library when CUDA is on (it names the CUDA backends), into the core library
 * otherwise. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "device_internal.h"

#include <sched.h>
#include <unistd.h>

#if VX_HAVE_CUDA
/* The registry names each component's CUDA table, so it sees the components' internal headers:
 * the one place a lower layer's file looks up at higher ones (like ggml's backend registry). */
#include "../dqn/dqn_backend.h"
#include "../env/env_internal.h"
#include "../nn/nn_internal.h"
#include "../ppo/ppo_backend.h"
#include "../replay/replay_internal.h"

int vx_cuda_device_count(void);                   /* philox_cuda.cu */
extern const vx_dense_ops vx_dense_cuda_ops;      /* nn/dense_cuda.cu */
extern const vx_qnet_ops vx_qnet_cuda_ops;        /* nn/qnet_cuda.cu */
extern const vx_optim_ops vx_optim_cuda_ops;      /* nn/optim_cuda.cu */
extern const vx_replay_ops vx_replay_cuda_ops;    /* replay/replay_cuda_host.cu */
extern const dqn_backend_ops vx_dqn_backend_cuda; /* dqn/dqn_backend_cuda.cu */
/* vx_ppo_backend_cuda: ppo/ppo_backend_cuda.cu, declared in its header */

static const vx_backend_entry cuda_backends[] = {
    {"env", &vx_env_cuda_ops},     {"replay", &vx_replay_cuda_ops},
    {"dense", &vx_dense_cuda_ops}, {"qnet", &vx_qnet_cuda_ops},
    {"optim", &vx_optim_cuda_ops}, {"dqn", &vx_dqn_backend_cuda},
    {"ppo", &vx_ppo_backend_cuda}, {NULL, NULL},
};
#endif

int vx_device_cuda_count(void)
{
#if VX_HAVE_CUDA
    return vx_cuda_device_count();
#else
    return 0;
#endif
}

vx_status vx_device_open(const vx_device_cfg *cfg, vx_device **out, vx_err *e)
{
    *out = NULL;
    int kind = cfg->kind;
    if (kind == VX_DEVICE_AUTO) kind = vx_device_cuda_count() > 0 ? VX_DEVICE_CUDA : VX_DEVICE_CPU;
    if (kind == VX_DEVICE_CPU) return vx_device_open_cpu(cfg, out, e);
    if (kind != VX_DEVICE_CUDA) return vx_err_set(e, VX_ERR_ARG, "device: unknown kind %d", kind);
#if VX_HAVE_CUDA
    if (vx_device_cuda_count() == 0)
        return vx_err_set(e, VX_ERR_ARG, "device: cuda asked for, but no CUDA device is visible");
    vx_status st = vx_device_open_cuda(cfg, out, e);
    if (!st) (*out)->backends = cuda_backends;
    return st;
#else
    return vx_err_set(e, VX_ERR_ARG,
                      "device: cuda asked for, but this build of vixen has no CUDA "
                      "(rebuild with nvcc present)");
#endif
}

vx_status vx_device_open_local(const vx_device_cfg *cfg, int local_rank, int local_size,
                               vx_device **out, int *cores, vx_err *e)
{
    vx_device_cfg dc = *cfg;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int local = local_size > 0 ? local_size : 1;
    *cores = online > local ? (int)(online / local) : 1;
    /* a process the launcher bound to some cores (mpirun's --bind-to, Slurm's --cpus-per-task)
     * has its share already: those */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < online)
        *cores = CPU_COUNT(&set);
    int gpus = dc.kind == VX_DEVICE_CPU ? 0 : vx_device_cuda_count();
    int sharing = local; /* on the CPU: the node's processes share its memory */
    if (gpus > 0) {
        dc.kind = VX_DEVICE_CUDA;
        dc.index = local_rank % gpus;
        sharing = 0; /* the node's processes on this GPU */
        for (int k = 0; k < local; k++) sharing += k % gpus == dc.index;
    }
    if (sharing > 1 && !dc.budget) { /* what the device has free, divided among them */
        vx_device *d;
        vx_status st = vx_device_open(&dc, &d, e);
        if (st) return st;
        vx_device_mem m;
        vx_device_memory(d, &m);
        vx_device_close(d);
        dc.budget = m.budget;
    }
    if (sharing > 1) dc.budget /= (size_t)sharing;
    return vx_device_open(&dc, out, e);
}

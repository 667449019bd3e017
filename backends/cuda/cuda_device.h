/* The CUDA devices this process sees, as the CUDA backend answers
 * topology/'s probe (topology/cuda_probe.h), and the device scope every
 * backend call runs in.
 *
 * A device's facts need no context; reading free memory (cudaMemGetInfo)
 * creates the device's primary context (a few hundred MiB), so only a
 * rank's own GPU is measured by the node. Nothing here resets a device:
 * a caller inside a serving process may be using its contexts. */
#ifndef KVS_BACKENDS_CUDA_CUDA_DEVICE_H
#define KVS_BACKENDS_CUDA_CUDA_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "topology/cuda_probe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A device's bus id, name and total memory, as the driver reports them
 * (cudaDeviceGetPCIBusId, cudaGetDeviceProperties): no context is
 * created. A failure is KVS_ERR_CUDA naming the call and the device; *out
 * is written only on success. */
kvs_status kvs_cuda_device_describe(int ordinal, kvs_cuda_device_facts *out, kvs_error *err);

/* A device made current for the length of a call, and the calling
 * thread as it was after it: the context it had, or none, and the
 * runtime's choice of device (what cudaGetDevice reads and the thread's
 * next runtime call binds) unchanged.
 *
 * The runtime keeps that choice apart from the current context: after
 * cudaSetDevice(d), popping the context (cuCtxSetCurrent(NULL)) leaves a
 * thread with no context whose next call binds d, not the device 0 it had
 * before. And putting the choice back with cudaSetDevice is wrong on a
 * thread that never chose: since CUDA 12 cudaSetDevice(0) creates device
 * 0's primary context (about 0.5 GB) -- in every rank of a node, on the
 * GPU that rank 0 then finds short of its budget. So the scope never calls
 * cudaSetDevice: it makes the device's primary context current through the
 * driver (cuDevicePrimaryCtxRetain, cuCtxSetCurrent, found through the
 * runtime, so nothing links libcuda), which the runtime then uses, and puts
 * the thread's context (or none) back with cuCtxSetCurrent. The scope
 * retains each device's primary context once for the life of the process
 * and never releases it: kvshard's tables live in it, as the runtime's own
 * reference would keep it. A call inside the scope that chooses a device
 * itself (NCCL's blocking paths call cudaSetDevice on the caller's thread;
 * kvshard's communicators are nonblocking, whose work NCCL does on its own
 * threads) is undone on a thread that had no context when the earlier
 * choice's context is live; when it is not, the thread is left with no
 * context and the runtime's choice of this device, whose context is live:
 * no call creates a context the thread did not already have. Where the
 * driver cannot be asked, it falls back to cudaGetDevice / cudaSetDevice. */
/* The scope also puts the calling thread in CUDA's relaxed capture mode
 * for its length: an engine thread capturing a graph in global mode (torch's
 * default) would otherwise see its capture invalidated by any of kvshard's
 * event waits or queries on another thread, and kvshard's own calls refused.
 * kvshard never joins another thread's capture (its step refuses a
 * capturing engine stream), so relaxed mode costs nothing. */
typedef struct kvs_cuda_device_scope {
  void *saved;      /* the thread's CUcontext on entry; NULL: it had none */
  int previous;     /* the runtime's choice on entry (cudaGetDevice) when it had none; the
                       fallback's device */
  int switched;     /* whether enter changed the current context */
  int use_driver;   /* whether saved is the driver's answer */
  int capture_mode; /* the thread's stream capture mode on entry */
  int exchanged;    /* whether enter set relaxed mode (leave restores capture_mode) */
} kvs_cuda_device_scope;

/* Makes `device`'s primary context current (nothing changes when it
 * already is). On failure (KVS_ERR_CUDA naming the call and the device,
 * e.g. "cuDeviceGet(9): CUDA_ERROR_INVALID_DEVICE (invalid device
 * ordinal)") the thread is as it was and leave need not be called. */
kvs_status kvs_cuda_device_enter(int device, kvs_cuda_device_scope *scope, kvs_error *err);
/* Puts the thread's context, and on a thread that had none the runtime's
 * choice, back as enter found them. */
void kvs_cuda_device_leave(const kvs_cuda_device_scope *scope);

/* cudaMemGetInfo on `device`, inside a device scope (the thread's context
 * is as it was after). A failure is KVS_ERR_CUDA naming the call and the
 * device; the outputs are written only on success. */
kvs_status kvs_cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes,
                             kvs_error *err);

/* Copies host memory to device memory of the current device and returns
 * once it is there, after all earlier work on that device. cudaMemcpy alone
 * is not that: from pageable memory it returns once the source is staged,
 * before the data lands, and kernels on non-blocking streams are not
 * ordered after it. `what` names the copy in the error. */
kvs_status kvs_cuda_upload(void *dst, const void *src, size_t bytes, const char *what,
                           kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BACKENDS_CUDA_CUDA_DEVICE_H */

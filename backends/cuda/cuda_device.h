/* The CUDA devices this process sees: the one place that asks the CUDA
 * runtime for them (topology/'s GPU discovery, the NCCL backend and the
 * device benchmark all come here).
 *
 * Reading free memory (cudaMemGetInfo) needs a context on each device:
 * the list makes each device current once, which creates its primary
 * context (a few hundred MiB of device memory, the same the serving
 * process would create). It never resets a device, since a caller inside
 * a serving process may be using those contexts. */
#ifndef KVS_CUDA_CUDA_DEVICE_H
#define KVS_CUDA_CUDA_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cudaDeviceGetPCIBusId's "0000:1b:00.0" form, with room for the longest
 * domain the runtime prints. */
#define KVS_CUDA_PCI_BUS_ID_MAX 32
#define KVS_CUDA_DEVICE_NAME_MAX 256

typedef struct kvs_cuda_device_info {
  int ordinal;                              /* CUDA device ordinal in this process */
  char pci_bus_id[KVS_CUDA_PCI_BUS_ID_MAX]; /* cudaDeviceGetPCIBusId */
  char name[KVS_CUDA_DEVICE_NAME_MAX];      /* cudaDeviceProp.name */
  uint64_t free_bytes;                      /* cudaMemGetInfo */
  uint64_t total_bytes;
} kvs_cuda_device_info;

/* Lists the visible devices into out[0..cap) in ordinal order. No driver
 * or no device is KVS_ERR_UNSUPPORTED saying why (kvs_cuda_device_count);
 * a runtime error on a device is KVS_ERR_CUDA naming the call and the
 * device; more devices than cap is KVS_ERR_INVALID_ARGUMENT. *n_out and
 * out are written only on success. The calling thread's context is as it
 * was (kvs_cuda_device_enter). */
kvs_status kvs_cuda_devices_list(kvs_cuda_device_info *out, size_t cap, size_t *n_out,
                                 kvs_error *err);

/* A device made current for the length of a call, and the calling
 * thread's context put back after it: the one it had, or none. Restoring
 * "the caller's device" with cudaSetDevice is wrong on a thread that never
 * chose one: cudaGetDevice reads 0 there, and since CUDA 12 cudaSetDevice(0)
 * creates device 0's primary context (about 0.5 GB) -- in every rank of a
 * node, on the GPU that rank 0 then finds short of its budget. So the
 * scope saves and restores the thread's driver context itself
 * (cuCtxGetCurrent / cuCtxSetCurrent, found through the runtime, so
 * nothing links libcuda). Where the driver cannot be asked, it falls back
 * to cudaGetDevice / cudaSetDevice. (The runtime may remember the device a
 * scope set and bind that one again at the thread's next call that needs
 * a context, rather than device 0: either way no context is created that
 * the thread did not already have.) */
typedef struct kvs_cuda_device_scope {
  void *saved;    /* the thread's CUcontext on entry; NULL: it had none */
  int previous;   /* cudaGetDevice on entry (the fallback) */
  int switched;   /* whether enter changed the current device */
  int use_driver; /* whether saved is the driver's answer */
} kvs_cuda_device_scope;

/* Makes `device` current (nothing changes when it already is). On failure
 * (KVS_ERR_CUDA naming cudaSetDevice and the device) the thread is as it
 * was and leave need not be called. */
kvs_status kvs_cuda_device_enter(int device, kvs_cuda_device_scope *scope, kvs_error *err);
/* Puts the thread's context back as enter found it. */
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

#endif /* KVS_CUDA_CUDA_DEVICE_H */

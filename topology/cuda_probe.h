/* What the CUDA runtime says about the visible GPUs: the only place in
 * topology/ that calls CUDA, so the rest stays testable without it.
 *
 * Reading free memory (cudaMemGetInfo) needs a context on each device:
 * the probe sets each device current once, which creates its primary
 * context (a few hundred MiB of device memory, the same the serving
 * process would create). It never resets a device, since a caller inside
 * a serving process may be using those contexts. */
#ifndef KVS_TOPOLOGY_CUDA_PROBE_H
#define KVS_TOPOLOGY_CUDA_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "topology/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_cuda_device {
  int ordinal;             /* CUDA device ordinal in this process */
  kvs_pci_address pci;     /* from cudaDeviceGetPCIBusId */
  char name[KVS_GPU_MODEL_MAX];
  uint64_t free_bytes;     /* cudaMemGetInfo */
  uint64_t total_bytes;
} kvs_cuda_device;

/* Lists the visible CUDA devices into out[0..cap) in ordinal order.
 * No driver, no device, or a runtime error is KVS_ERR_UNSUPPORTED with
 * the CUDA error string in the message (the caller falls back); more
 * devices than cap is KVS_ERR_INVALID_ARGUMENT. *n_out and out are
 * written only on success. The current device is restored. */
kvs_status kvs_cuda_probe(kvs_cuda_device *out, size_t cap, size_t *n_out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOPOLOGY_CUDA_PROBE_H */

/* The visible CUDA devices as topology/ needs them: the list from the
 * cuda/ leaf (backends/cuda/cuda_device.h, the one place that asks the CUDA
 * runtime), each PCI bus id parsed. topology/ itself calls no CUDA, so
 * the rest stays testable without it. */
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
  int ordinal;         /* CUDA device ordinal in this process */
  kvs_pci_address pci; /* from cudaDeviceGetPCIBusId */
  char name[KVS_GPU_MODEL_MAX];
  uint64_t free_bytes; /* cudaMemGetInfo */
  uint64_t total_bytes;
} kvs_cuda_device;

/* Lists the visible CUDA devices into out[0..cap) in ordinal order
 * (kvs_cuda_devices_list). No driver or no device is KVS_ERR_UNSUPPORTED,
 * a runtime error KVS_ERR_CUDA, each with the CUDA error in the message
 * (the caller falls back to hwloc either way); more devices than cap is
 * KVS_ERR_INVALID_ARGUMENT. *n_out and out are written only on success. */
kvs_status kvs_cuda_probe(kvs_cuda_device *out, size_t cap, size_t *n_out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOPOLOGY_CUDA_PROBE_H */

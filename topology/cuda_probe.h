/* The visible CUDA devices as topology/ needs them, asked of the CUDA
 * backend (libkvshard-cuda.so.1, through backends/registry.h): topology/ itself
 * calls no CUDA and links no CUDA library, so a machine without CUDA
 * installed plans from hwloc alone, and the reason is kept for the note. */
#ifndef KVS_TOPOLOGY_CUDA_PROBE_H
#define KVS_TOPOLOGY_CUDA_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/cuda/entry.h"
#include "core/status.h"
#include "topology/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The probe's table and a device's facts: backends/cuda/entry.h. */

typedef struct kvs_cuda_device {
  int ordinal;         /* CUDA device ordinal in this process */
  kvs_pci_address pci; /* from cudaDeviceGetPCIBusId */
  char name[KVS_GPU_MODEL_MAX];
  uint64_t free_bytes; /* cudaMemGetInfo when measured, else 0 */
  uint64_t total_bytes;
} kvs_cuda_device;

/* Lists the visible CUDA devices into out[0..cap) in ordinal order, with
 * their free memory when measure_free (a context on every device). No
 * backend is KVS_ERR_LIBRARY, no driver or no device KVS_ERR_UNSUPPORTED,
 * a runtime error
 * KVS_ERR_CUDA, each with the reason in the message (the caller falls back
 * to hwloc either way); more devices than cap is KVS_ERR_INVALID_ARGUMENT.
 * *n_out and out are written only on success. */
kvs_status kvs_cuda_probe(kvs_cuda_device *out, size_t cap, bool measure_free, size_t *n_out,
                          kvs_error *err);

/* Free and total memory of one device (a context on that device only). */
kvs_status kvs_cuda_probe_mem_info(int ordinal, uint64_t *free_bytes, uint64_t *total_bytes,
                                   kvs_error *err);

/* How many devices the backend sees (KVS_ERR_UNSUPPORTED saying why when
 * none; KVS_ERR_LIBRARY when the backend cannot be loaded). */
kvs_status kvs_cuda_probe_device_count(int *count, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOPOLOGY_CUDA_PROBE_H */

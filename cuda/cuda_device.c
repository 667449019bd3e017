#include "cuda/cuda_device.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_status.h"

/* One device's facts; `what` names the call for kvs_cuda_status. */
static kvs_status describe(int ordinal, kvs_cuda_device_info *d, kvs_error *err) {
  char what[96];
  struct cudaDeviceProp prop;
  size_t free_bytes = 0, total_bytes = 0;
  kvs_status status;
  d->ordinal = ordinal;
  snprintf(what, sizeof what, "cudaDeviceGetPCIBusId of device %d", ordinal);
  status = kvs_cuda_status(cudaDeviceGetPCIBusId(d->pci_bus_id, (int)sizeof d->pci_bus_id, ordinal),
                           what, err);
  if (status != KVS_OK) return status;
  snprintf(what, sizeof what, "cudaGetDeviceProperties of device %d", ordinal);
  if ((status = kvs_cuda_status(cudaGetDeviceProperties(&prop, ordinal), what, err))) return status;
  snprintf(d->name, sizeof d->name, "%.*s", (int)(sizeof d->name - 1), prop.name);
  snprintf(what, sizeof what, "cudaSetDevice(%d)", ordinal);
  if ((status = kvs_cuda_status(cudaSetDevice(ordinal), what, err))) return status;
  snprintf(what, sizeof what, "cudaMemGetInfo on device %d", ordinal);
  if ((status = kvs_cuda_status(cudaMemGetInfo(&free_bytes, &total_bytes), what, err))) {
    return status;
  }
  d->free_bytes = free_bytes;
  d->total_bytes = total_bytes;
  return KVS_OK;
}

kvs_status kvs_cuda_devices_list(kvs_cuda_device_info *out, size_t cap, size_t *n_out,
                                 kvs_error *err) {
  if (out == NULL || n_out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "device list or its count is NULL");
  }
  int count = 0;
  kvs_status status = kvs_cuda_device_count(&count, err);
  if (status != KVS_OK) return status;
  if ((size_t)count > cap) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "CUDA sees %d devices, more than the %zu the caller made room for", count,
                         cap);
  }
  kvs_cuda_device_info *devices = calloc((size_t)count, sizeof *devices);
  if (devices == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory");
  int previous = 0;
  status = kvs_cuda_status(cudaGetDevice(&previous), "cudaGetDevice", err);
  for (int i = 0; status == KVS_OK && i < count; i++) status = describe(i, &devices[i], err);
  if (status == KVS_OK) {
    memcpy(out, devices, (size_t)count * sizeof *devices);
    *n_out = (size_t)count;
  }
  (void)cudaSetDevice(previous);
  free(devices);
  return status;
}

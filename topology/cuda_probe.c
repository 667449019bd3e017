#include "topology/cuda_probe.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Maps a failed runtime call to KVS_ERR_UNSUPPORTED and clears the
 * sticky error, so a later probe starts clean. */
#define CUDA_CHECK_GOTO(call, what)                                                  \
  do {                                                                               \
    cudaError_t rc_ = (call);                                                        \
    if (rc_ != cudaSuccess) {                                                        \
      (void)cudaGetLastError();                                                      \
      status = kvs_error_set(err, KVS_ERR_UNSUPPORTED, "CUDA %s failed: %s (%s)", what, \
                             cudaGetErrorString(rc_), cudaGetErrorName(rc_));         \
      goto done;                                                                     \
    }                                                                                \
  } while (0)

kvs_status kvs_cuda_probe(kvs_cuda_device *out, size_t cap, size_t *n_out, kvs_error *err) {
  kvs_status status = KVS_OK;
  int count = 0, previous = -1;
  kvs_cuda_device *devices = NULL;
  CUDA_CHECK_GOTO(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count <= 0) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED, "CUDA sees no device");
  }
  if ((size_t)count > cap) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "CUDA sees %d devices, more than the %zu the caller made room for",
                         count, cap);
  }
  devices = calloc((size_t)count, sizeof *devices);
  if (devices == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory");
  CUDA_CHECK_GOTO(cudaGetDevice(&previous), "cudaGetDevice");
  for (int i = 0; i < count; i++) {
    kvs_cuda_device *d = &devices[i];
    char busid[32];
    struct cudaDeviceProp prop;
    size_t free_bytes = 0, total_bytes = 0;
    d->ordinal = i;
    CUDA_CHECK_GOTO(cudaDeviceGetPCIBusId(busid, (int)sizeof busid, i), "cudaDeviceGetPCIBusId");
    if ((status = kvs_pci_address_parse(busid, &d->pci, err)) != KVS_OK) goto done;
    CUDA_CHECK_GOTO(cudaGetDeviceProperties(&prop, i), "cudaGetDeviceProperties");
    snprintf(d->name, sizeof d->name, "%.*s", (int)(sizeof d->name - 1), prop.name);
    CUDA_CHECK_GOTO(cudaSetDevice(i), "cudaSetDevice");
    CUDA_CHECK_GOTO(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    d->free_bytes = free_bytes;
    d->total_bytes = total_bytes;
  }
  memcpy(out, devices, (size_t)count * sizeof *devices);
  *n_out = (size_t)count;
done:
  if (previous >= 0) (void)cudaSetDevice(previous);
  free(devices);
  return status;
}

#include "topology/cuda_probe.h"

#include <stdio.h>
#include <stdlib.h>

#include "backends/cuda/cuda_device.h"

kvs_status kvs_cuda_probe(kvs_cuda_device *out, size_t cap, size_t *n_out, kvs_error *err) {
  if (out == NULL || n_out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "device list or its count is NULL");
  }
  kvs_cuda_device_info *found = calloc(cap > 0 ? cap : 1, sizeof *found);
  if (found == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory");
  kvs_cuda_device *devices = calloc(cap > 0 ? cap : 1, sizeof *devices);
  size_t n = 0;
  kvs_status status = devices == NULL ? kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory")
                                      : kvs_cuda_devices_list(found, cap, &n, err);
  for (size_t i = 0; status == KVS_OK && i < n; i++) {
    devices[i].ordinal = found[i].ordinal;
    status = kvs_pci_address_parse(found[i].pci_bus_id, &devices[i].pci, err);
    snprintf(devices[i].name, sizeof devices[i].name, "%.*s", (int)(sizeof devices[i].name - 1),
             found[i].name);
    devices[i].free_bytes = found[i].free_bytes;
    devices[i].total_bytes = found[i].total_bytes;
  }
  if (status == KVS_OK) {
    for (size_t i = 0; i < n; i++) out[i] = devices[i];
    *n_out = n;
  }
  free(devices);
  free(found);
  return status;
}

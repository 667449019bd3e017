#include "topology/cuda_probe.h"

#include <stdio.h>
#include <stdlib.h>

kvs_status kvs_cuda_probe_device_count(int *count, kvs_error *err) {
  if (count == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "count is NULL");
  const kvs_cuda_probe_table *t = NULL;
  kvs_status status = kvs_cuda_probe_table_get(&t, err);
  return status != KVS_OK ? status : t->device_count(count, err);
}

kvs_status kvs_cuda_probe_mem_info(int ordinal, uint64_t *free_bytes, uint64_t *total_bytes,
                                   kvs_error *err) {
  if (free_bytes == NULL || total_bytes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "free_bytes or total_bytes is NULL");
  }
  const kvs_cuda_probe_table *t = NULL;
  kvs_status status = kvs_cuda_probe_table_get(&t, err);
  return status != KVS_OK ? status : t->mem_info(ordinal, free_bytes, total_bytes, err);
}

/* One device from the backend's facts, its bus id parsed. */
static kvs_status describe(const kvs_cuda_probe_table *t, int ordinal, bool measure_free,
                           kvs_cuda_device *d, kvs_error *err) {
  kvs_cuda_device_facts facts;
  kvs_status status = t->device_facts(ordinal, &facts, err);
  if (status != KVS_OK) return status;
  d->ordinal = ordinal;
  if ((status = kvs_pci_address_parse(facts.pci_bus_id, &d->pci, err)) != KVS_OK) return status;
  snprintf(d->name, sizeof d->name, "%.*s", (int)(sizeof d->name - 1), facts.name);
  d->total_bytes = facts.total_bytes;
  d->free_bytes = 0;
  if (!measure_free) return KVS_OK;
  uint64_t total = 0;
  return t->mem_info(ordinal, &d->free_bytes, &total, err);
}

kvs_status kvs_cuda_probe(kvs_cuda_device *out, size_t cap, bool measure_free, size_t *n_out,
                          kvs_error *err) {
  if (out == NULL || n_out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "device list or its count is NULL");
  }
  const kvs_cuda_probe_table *t = NULL;
  int count = 0;
  kvs_status status = kvs_cuda_probe_table_get(&t, err);
  if (status == KVS_OK) status = t->device_count(&count, err);
  if (status != KVS_OK) return status;
  if ((size_t)count > cap) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "CUDA sees %d devices, more than the %zu the caller made room for", count,
                         cap);
  }
  kvs_cuda_device *devices = calloc(count > 0 ? (size_t)count : 1, sizeof *devices);
  if (devices == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory");
  for (int i = 0; status == KVS_OK && i < count; i++) {
    status = describe(t, i, measure_free, &devices[i], err);
  }
  if (status == KVS_OK) {
    for (int i = 0; i < count; i++) out[i] = devices[i];
    *n_out = (size_t)count;
  }
  free(devices);
  return status;
}

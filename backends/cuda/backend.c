/* The CUDA backend's entry points (libkvshard-cuda.so.1): the probe that
 * topology/ asks for the visible devices, and the device tables the node
 * drives. The core reaches them only through these tables
 * (backends/registry.h), so it links no CUDA library itself. */
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/entry.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/table_cuda.h"
#include "shard/table.h"
#include "topology/cuda_probe.h"

/* Exported from the backend's shared object; everything else is hidden. */
#define KVS_BACKEND_EXPORT __attribute__((visibility("default")))

KVS_BACKEND_EXPORT const void *kvs_backend_cuda_probe_v1(void);
KVS_BACKEND_EXPORT const void *kvs_backend_cuda_tables_v1(void);

const void *kvs_backend_cuda_probe_v1(void) {
  static const kvs_cuda_probe_table table = {
      .header = KVS_BACKEND_HEADER("cuda", kvs_cuda_probe_table),
      .device_count = kvs_cuda_device_count,
      .device_facts = kvs_cuda_device_describe,
      .mem_info = kvs_cuda_mem_info,
  };
  return &table;
}

const void *kvs_backend_cuda_tables_v1(void) {
  static const kvs_cuda_tables_table table = {
      .header = KVS_BACKEND_HEADER("cuda", kvs_cuda_tables_table),
      .open = kvs_cuda_table_open,
  };
  return &table;
}

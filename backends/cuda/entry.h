/* The CUDA backend's entry tables (libkvshard-cuda.so.1): what the core
 * asks it for through the registry (backends/registry.h). A leaf of the
 * plugin ABI: the types the tables pass are declared where they live
 * (topology/cuda_probe.h, shard/table.h, plan/device_layout.h) and named
 * here as incomplete structs, so topology/ and shard/ both include this
 * header without including each other. */
#ifndef KVS_BACKENDS_CUDA_ENTRY_H
#define KVS_BACKENDS_CUDA_ENTRY_H

#include <stdint.h>

#include "backends/registry.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cudaDeviceGetPCIBusId's "0000:1b:00.0" form, with room for the longest
 * domain the runtime prints, and a device name. */
#define KVS_CUDA_PCI_BUS_ID_MAX 32
#define KVS_CUDA_DEVICE_NAME_MAX 256

/* One device as the backend describes it without a context. */
typedef struct kvs_cuda_device_facts {
  char pci_bus_id[KVS_CUDA_PCI_BUS_ID_MAX];
  char name[KVS_CUDA_DEVICE_NAME_MAX];
  uint64_t total_bytes; /* as the driver reports it */
} kvs_cuda_device_facts;

/* The probe ("kvs_backend_cuda_probe_v1"): topology/ lists devices with it. */
typedef struct kvs_cuda_probe_table {
  kvs_backend_header header;
  /* How many devices this process sees; no driver or no device is
   * KVS_ERR_UNSUPPORTED saying why. Creates no context. */
  kvs_status (*device_count)(int *count, kvs_error *err);
  /* Bus id, name and total memory of a device. Creates no context. */
  kvs_status (*device_facts)(int ordinal, kvs_cuda_device_facts *out, kvs_error *err);
  /* Free and total memory of one device: creates this process's context
   * on that device only; the calling thread's own context is put back. */
  kvs_status (*mem_info)(int ordinal, uint64_t *free_bytes, uint64_t *total_bytes, kvs_error *err);
} kvs_cuda_probe_table;

struct kvs_device_layout;
struct kvs_table_limits;
struct kvs_cuda_table_options;
struct kvs_table_ops;

/* The device tables ("kvs_backend_cuda_tables_v1"): shard/ wraps what
 * open makes as a kvs_table_t (shard/table.h). */
typedef struct kvs_cuda_tables_table {
  kvs_backend_header header;
  kvs_status (*open)(int device, const struct kvs_device_layout *layout,
                     const struct kvs_table_limits *limits, void *stream,
                     const struct kvs_cuda_table_options *options, const struct kvs_table_ops **ops,
                     void **impl, uint64_t *bytes, kvs_error *err);
} kvs_cuda_tables_table;

/* The tables, from the backend linked into the program, else loaded (the
 * registry's getters): a missing backend or CUDA runtime is
 * KVS_ERR_LIBRARY naming the file and where it was looked for. */
kvs_status kvs_cuda_probe_table_get(const kvs_cuda_probe_table **out, kvs_error *err);
kvs_status kvs_cuda_tables_table_get(const kvs_cuda_tables_table **out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BACKENDS_CUDA_ENTRY_H */

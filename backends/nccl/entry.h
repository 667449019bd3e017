/* The NCCL backend's entry table (libkvshard-nccl.so.1): what the core
 * asks it for through the registry (backends/registry.h). A leaf of the
 * plugin ABI: the communicator vtable it hands out is shard/comm.h's,
 * named here as an incomplete struct. */
#ifndef KVS_BACKENDS_NCCL_ENTRY_H
#define KVS_BACKENDS_NCCL_ENTRY_H

#include <stddef.h>

#include "backends/registry.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvs_comm_vtable;

typedef struct kvs_nccl_open_args {
  int rank, nranks, device;
  const unsigned char *unique_id; /* KVS_NCCL_UNIQUE_ID_BYTES, or NULL with parent */
  void *parent;                   /* an ncclComm_t to split from, or NULL */
  int init_timeout_ms, timeout_ms;
} kvs_nccl_open_args;

/* "kvs_backend_nccl_v1". */
typedef struct kvs_nccl_table {
  kvs_backend_header header;
  kvs_status (*unique_id)(unsigned char *out, size_t bytes, kvs_error *err);
  kvs_status (*device_count)(int *count, kvs_error *err);
  /* A communicator's vtable and context for kvs_comm_create, and the rank
   * and size it holds; nothing stays allocated on failure. */
  kvs_status (*open)(const kvs_nccl_open_args *args, const struct kvs_comm_vtable **vtable,
                     void **ctx, int *rank, int *nranks, kvs_error *err);
  int (*version)(void); /* ncclGetVersion's */
  /* sizeof(kvs_comm_vtable) as the backend was built (kvs_mpi_table's
   * vtable_bytes says why). */
  size_t vtable_bytes;
} kvs_nccl_table;

/* The table: the backend linked into the program, else loaded. */
kvs_status kvs_comm_nccl_table(const kvs_nccl_table **out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BACKENDS_NCCL_ENTRY_H */

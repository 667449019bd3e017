/* The MPI backend's entry table (libkvshard-mpi.so.1): what the core asks
 * it for through the registry (backends/registry.h). A leaf of the plugin
 * ABI: the communicator vtable it hands out is shard/comm.h's, named here
 * as an incomplete struct. */
#ifndef KVS_BACKENDS_MPI_ENTRY_H
#define KVS_BACKENDS_MPI_ENTRY_H

#include <stddef.h>

#include "backends/registry.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvs_comm_vtable;

/* "kvs_backend_mpi_v1". */
typedef struct kvs_mpi_table {
  kvs_backend_header header;
  kvs_status (*init)(int *world_rank, int *world_size, kvs_error *err);
  kvs_status (*finalize)(kvs_error *err);
  /* A communicator's vtable and context for kvs_comm_create over the
   * handle (NULL: MPI_COMM_WORLD), and its rank and size. */
  kvs_status (*open)(const void *handle, size_t handle_bytes, int timeout_ms,
                     const struct kvs_comm_vtable **vtable, void **ctx, int *rank, int *size,
                     kvs_error *err);
  /* sizeof(kvs_comm_vtable) as the backend was built: the vtable open
   * hands out has every slot of a vtable that size. The field itself is
   * what a core whose vtable grew (the exchange slot) needs: the registry
   * refuses a table smaller than this struct, so an older backend, whose
   * vtable ends before that slot, is refused rather than read past. */
  size_t vtable_bytes;
} kvs_mpi_table;

/* The table: the backend linked into the program, else loaded. */
kvs_status kvs_comm_mpi_table(const kvs_mpi_table **out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BACKENDS_MPI_ENTRY_H */

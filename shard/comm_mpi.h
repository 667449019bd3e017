/* Communicators on MPI, through the MPI backend (libkvshard-mpi.so.1,
 * loaded by core/backend.h with libmpi.so.40): nothing here names an MPI
 * type, so the core builds and loads without MPI.
 *
 * The backend duplicates the caller's communicator, so its traffic never
 * matches the caller's own messages, and sets MPI_ERRORS_RETURN on the
 * duplicate so that an MPI error comes back as KVS_ERR_COMM instead of
 * ending the job. Every collective is nonblocking (MPI_Ibcast,
 * MPI_Iallreduce, MPI_Ibarrier) and polled against the communicator's
 * deadline: MPI has no portable way to learn that a peer died, so a dead
 * peer shows up as KVS_ERR_TIMEOUT naming the collective. The request
 * cannot be cancelled then, so the communicator is poisoned;
 * kvs_comm_abort calls MPI_Abort. */
#ifndef KVS_SHARD_COMM_MPI_H
#define KVS_SHARD_COMM_MPI_H

#include <stddef.h>

#include "core/backend.h"
#include "core/status.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kvs_mpi_init (MPI_Init_thread with MPI_THREAD_SINGLE unless the program
 * already started MPI), kvs_mpi_finalize (ends MPI only if kvs_mpi_init
 * started it) and kvs_comm_mpi_create (over an MPI_Comm handle; NULL:
 * MPI_COMM_WORLD) are kvshard.h's. A missing backend or libmpi is
 * KVS_ERR_LIBRARY naming it. */

/* ---- for the backend ---- */

/* The MPI backend's entry point ("kvs_backend_mpi_v1"). */
typedef struct kvs_mpi_table {
  kvs_backend_header header;
  kvs_status (*init)(int *world_rank, int *world_size, kvs_error *err);
  kvs_status (*finalize)(kvs_error *err);
  /* A communicator's vtable and context for kvs_comm_create over the
   * handle (NULL: MPI_COMM_WORLD), and its rank and size. */
  kvs_status (*open)(const void *handle, size_t handle_bytes, int timeout_ms,
                     const kvs_comm_vtable **vtable, void **ctx, int *rank, int *size,
                     kvs_error *err);
} kvs_mpi_table;

#define KVS_MPI_ENTRY "kvs_backend_mpi_v1"

/* The MPI backend's table: linked into the program, else loaded. */
kvs_status kvs_comm_mpi_table(const kvs_mpi_table **out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_COMM_MPI_H */

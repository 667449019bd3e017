/* Communicators on MPI, through the MPI backend (libkvshard-mpi.so.1,
 * loaded by backends/registry.h with libmpi.so.40): nothing here names an MPI
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
 * kvs_comm_abort calls MPI_Abort. An exchange (kvs_comm_exchange) posts
 * every transfer as MPI_Isend or MPI_Irecv, in pieces of at most 1 GiB
 * (MPI's counts are int), and waits for all of them against the same
 * deadline; on a timeout it names the transfers still pending, cancels
 * their requests and poisons the communicator. */
#ifndef KVS_SHARD_COMM_MPI_H
#define KVS_SHARD_COMM_MPI_H

#include <stddef.h>

#include "backends/mpi/entry.h"
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

/* The backend's entry table: backends/mpi/entry.h. */

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_COMM_MPI_H */

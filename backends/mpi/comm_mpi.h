/* The MPI backend: host buffers, real processes (Open MPI). The CPU
 * transport of the test matrix, and the bootstrap that carries NCCL's
 * unique id across nodes.
 *
 * It duplicates the caller's communicator, so its traffic never matches
 * the caller's own messages, and sets MPI_ERRORS_RETURN on the duplicate
 * so that an MPI error comes back as KVS_ERR_COMM instead of ending the
 * job. Every collective is nonblocking (MPI_Ibcast, MPI_Iallreduce,
 * MPI_Ibarrier) and polled against the communicator's deadline: MPI has
 * no portable way to learn that a peer died, so a dead peer shows up as
 * KVS_ERR_TIMEOUT naming the collective. The request cannot be cancelled
 * then, so the communicator is poisoned; kvs_comm_abort calls MPI_Abort. */
#ifndef KVS_SHARD_COMM_MPI_H
#define KVS_SHARD_COMM_MPI_H

#include <mpi.h>
#include <stddef.h>

#include "core/status.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_comm_mpi_options {
  size_t size;    /* sizeof(kvs_comm_mpi_options) */
  MPI_Comm comm;  /* the group; MPI_COMM_NULL means MPI_COMM_WORLD */
  int timeout_ms; /* deadline of every wait; > 0 */
} kvs_comm_mpi_options;

#define KVS_COMM_MPI_OPTIONS_INIT \
  { sizeof(kvs_comm_mpi_options), MPI_COMM_NULL, KVS_COMM_DEFAULT_TIMEOUT_MS }

/* MPI must be initialized by the caller (MPI_Init), and finalized after
 * the communicator is destroyed. options NULL means the INIT values. */
kvs_status kvs_comm_mpi_create(const kvs_comm_mpi_options *options, kvs_comm_t *out,
                               kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_COMM_MPI_H */

/* kvshard with MPI's types: for engines that run MPI themselves. The
 * library reaches MPI only through its MPI backend (libkvshard-mpi.so.1);
 * this is a typed form of kvs_comm_mpi_create.
 *
 *   mpicc engine.c $(pkg-config --cflags --libs kvshard) */
#ifndef KVS_KVSHARD_MPI_H
#define KVS_KVSHARD_MPI_H

#include <mpi.h>

#include "kvshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over `comm` (duplicated: kvshard's traffic never matches the
 * engine's messages). MPI must be initialised. */
static inline kvs_status kvs_comm_mpi_from(MPI_Comm comm, int timeout_ms, kvs_comm_t *out,
                                           kvs_error *err) {
  return kvs_comm_mpi_create(&comm, sizeof comm, timeout_ms, out, err);
}

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVSHARD_MPI_H */

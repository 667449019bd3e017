/* kvsim: drives a serving workload through the node (shard/node.h) on
 * every rank and proves that the ranks keep identical window bindings and
 * derive identical ring contexts on their tables.
 *
 *   mpirun -np N kvsim --tp N [--pp M] [--backend mpi|nccl|self] --steps S
 *                      --seed X [--requests R] [--json]
 *                      [--inject-divergence RANK:STEP]
 *
 * Ranks are MPI processes (or one, with --backend self); kvsim_local runs
 * them as threads without MPI. Rank 0 prints one JSON object as the last
 * line of stdout. Exit status: 0 when every check agreed, 1 when they did
 * but a --trace was not served whole, 2 bad arguments, 3 divergence
 * detected, 4 a communication or runtime failure, 5 the backend or device
 * is unavailable here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/comm_mpi.h"
#include "shard/comm_self.h"
#include "kvplan/args.h"
#include "tools/kvsim_args.h"
#include "tools/kvsim_run.h"

/* Only one rank should speak for argument errors; the launcher's rank
 * variable tells which before MPI is up. */
static bool first_rank_by_env(void) {
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (rank == NULL) rank = getenv("PMI_RANK");
  return rank == NULL || strcmp(rank, "0") == 0;
}

typedef struct comms {
  kvs_comm_t comm;
  bool mpi;
  int rank, size;
} comms;

static int open_comm(const kvsim_args *a, comms *c, kvs_error *err) {
  const char *b = a->backend;
  if (strcmp(b, "self") == 0) {
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (size != NULL && strcmp(size, "1") != 0) {
      kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                    "--backend self runs one rank, but mpirun started %s", size);
      return KVSIM_EXIT_USAGE;
    }
    return kvs_comm_self_create(&c->comm, err) == KVS_OK ? 0 : KVSIM_EXIT_FAILED;
  }
  /* nccl: the launcher's MPI communicator; the node makes its NCCL one.
   * Its libraries are asked for first. */
  if (strcmp(b, "nccl") == 0 && kvsim_nccl_ready(err) != KVS_OK) return KVSIM_EXIT_FAILED;
  if (kvs_mpi_init(&c->rank, &c->size, err) != KVS_OK) return KVSIM_EXIT_FAILED;
  c->mpi = true;
  return kvs_comm_mpi_create(NULL, 0, a->timeout_ms, &c->comm, err) == KVS_OK ? 0
                                                                              : KVSIM_EXIT_FAILED;
}

int main(int argc, char **argv) {
  kvsim_args a;
  int code = kvsim_parse(argc, argv, false, first_rank_by_env(), &a);
  if (code != 0) {
    return code < 0 ? 0 : code;
  }
  comms c;
  memset(&c, 0, sizeof c);
  kvs_error err;
  kvs_error_clear(&err);
  code = open_comm(&a, &c, &err);
  if (code != 0) {
    if (c.rank == 0) fprintf(stderr, "kvsim: %s backend unavailable: %s\n", a.backend, err.message);
  } else {
    code = kvsim_simulate(c.comm, &a, false);
  }
  kvs_comm_destroy(c.comm);
  if (c.mpi) (void)kvs_mpi_finalize(NULL);
  /* Rank 0's report lost to a full disk is a failed run (exit 4). */
  /* A trace not served whole (exit 1) is no failure to write: a report
   * lost to a full disk is exit 4 all the same. */
  int written =
      kvs_finish_stdout("kvsim", code == KVSIM_EXIT_NOT_WHOLE ? 0 : code, KVSIM_EXIT_FAILED);
  return written == 0 ? code : written;
}

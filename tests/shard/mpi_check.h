/* The MPI test programs' checks (exchange_mpi.c, pd_mpi.c): each program
 * defines `static int g_rank, g_failures`; a failed CHECK names the rank,
 * file and line and counts, and the program exits 1 at its end when any
 * failed. */
#ifndef KVS_TESTS_SHARD_MPI_CHECK_H
#define KVS_TESTS_SHARD_MPI_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "FAIL: rank %d: %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
      g_failures++;                                                          \
    }                                                                        \
  } while (0)

#endif /* KVS_TESTS_SHARD_MPI_CHECK_H */

/* kvs_comm_exchange over the MPI backend, as real processes under mpirun
 * (tests/shard/exchange_mpi_test.sh runs it on 2, 3 and 4 ranks), with the
 * backend linked in (//backends/mpi: the registry finds its entry point
 * without a dlopen), or its test build whose pieces are 4 KiB
 * (//backends/mpi:mpi_small_pieces), so a transfer of many pieces, and
 * pieces that end mid-buffer, run on small buffers the way a transfer past
 * INT_MAX bytes runs in 1 GiB pieces.
 *
 * Every rank, in order:
 *   1. pairs: three rounds in which every rank sends two messages to every
 *      rank (itself included) and receives two from each, sizes around the
 *      piece size and differing by pair and message, in a batch ordered
 *      differently by rank (receives or sends first, peers up or down),
 *      zero-byte transfers between; every byte compared; an allreduce
 *      after each round matches as before;
 *   2. large: 64 MiB each way with a partner (rank ^ 1), byte for byte;
 *   3. refusals: a peer outside the group and NULL data change nothing and
 *      the next batch matches;
 *   4. sizes: on communicators of their own, a receive larger and one
 *      smaller than the send it matches fail the receiving rank naming the
 *      transfer (the sending rank's MPI send completes: MPI's sender does
 *      not learn the receive's size);
 *   5. silent: with a 2 s deadline rank 0 receives from the last rank,
 *      which never calls: KVS_ERR_TIMEOUT within [2 s, 20 s) naming the
 *      receive, its bytes and its peer; poisoned after.
 * Each rank prints "exchange_mpi: rank R of N: ok (B bytes compared)" on
 * success; every failure is a line "FAIL: rank R: ..." and exit 1. */
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvshard.h"
#include "shard/comm.h"
#include "tests/shard/mpi_check.h"

static int g_rank = -1, g_size = 0, g_failures = 0;
static uint64_t g_compared = 0;

static uint8_t byte_of(int src, int dst, int k, size_t i) {
  uint64_t x = ((uint64_t)i + 1) * 0x9e3779b97f4a7c15ull ^
               ((uint64_t)src << 48 | (uint64_t)dst << 32 | (uint64_t)k << 16);
  x ^= x >> 29;
  return (uint8_t)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

static uint8_t *filled(int src, int dst, int k, size_t bytes) {
  uint8_t *p = malloc(bytes > 0 ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "FAIL: rank %d: no memory for %zu bytes\n", g_rank, bytes);
    exit(1);
  }
  for (size_t i = 0; i < bytes; i++) p[i] = byte_of(src, dst, k, i);
  return p;
}

/* Whether p holds the k-th message src -> dst; names the first wrong byte. */
static void expect_message(const uint8_t *p, size_t bytes, int src, int dst, int k) {
  for (size_t i = 0; i < bytes; i++) {
    if (p[i] != byte_of(src, dst, k, i)) {
      CHECK(false, "message %d from rank %d (%zu bytes): byte %zu is %u, not %u", k, src, bytes, i,
            p[i], byte_of(src, dst, k, i));
      return;
    }
  }
  g_compared += bytes;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sizes around 4 KiB pieces (the small-piece build's) and past several. */
static size_t pair_size(int src, int dst, int k, int round) {
  static const size_t sizes[] = {1, 4095, 4096, 4097, 3 * 4096 + 5, 100003, 65536, 12288};
  return sizes[(size_t)(src * 5 + dst * 3 + k + round * 7) % (sizeof sizes / sizeof *sizes)];
}

static void case_pairs(kvs_comm_t comm) {
  int n = g_size;
  for (int round = 0; round < 3; round++) {
    size_t per = (size_t)(2 * n);
    kvs_comm_transfer *sends = calloc(per, sizeof *sends),
                      *receives = calloc(per, sizeof *receives);
    kvs_comm_transfer *batch = calloc(3 * per, sizeof *batch);
    if (sends == NULL || receives == NULL || batch == NULL) exit(1);
    for (int p = 0; p < n; p++) {
      for (int k = 0; k < 2; k++) {
        int kk = 2 * round + k;
        size_t to = pair_size(g_rank, p, kk, round), from = pair_size(p, g_rank, kk, round);
        sends[2 * p + k] = (kvs_comm_transfer){p, true, filled(g_rank, p, kk, to), to};
        receives[2 * p + k] = (kvs_comm_transfer){p, false, calloc(1, from), from};
      }
    }
    /* Even ranks receive first, odd ranks send first; the first half goes
     * peer by peer downwards; each pair's messages stay in order. */
    const kvs_comm_transfer *first = g_rank % 2 == 0 ? receives : sends;
    const kvs_comm_transfer *second = g_rank % 2 == 0 ? sends : receives;
    size_t m = 0;
    for (int p = n - 1; p >= 0; p--) {
      batch[m++] = first[2 * p];
      batch[m++] = first[2 * p + 1];
      batch[m++] = (kvs_comm_transfer){(g_rank + p) % n, p % 2 == 0, NULL, 0};
    }
    for (int p = 0; p < n; p++) {
      batch[m++] = second[2 * p];
      batch[m++] = second[2 * p + 1];
    }
    kvs_error err;
    kvs_status s = kvs_comm_exchange(comm, batch, m, &err);
    CHECK(s == KVS_OK, "pairs round %d: %s: %s", round, kvs_status_name(s), err.message);
    for (int p = 0; s == KVS_OK && p < n; p++) {
      for (int k = 0; k < 2; k++) {
        const kvs_comm_transfer *r = &receives[2 * p + k];
        expect_message(r->data, r->bytes, p, g_rank, 2 * round + k);
      }
    }
    for (size_t i = 0; i < per; i++) {
      free(sends[i].data);
      free(receives[i].data);
    }
    free(sends);
    free(receives);
    free(batch);
    /* A collective after the round meets none of its messages. */
    kvs_comm_buffer b;
    if (kvs_comm_buffer_alloc(comm, 8, &b, &err) == KVS_OK) {
      *(uint64_t *)b.host = (uint64_t)g_rank + 1;
      s = kvs_comm_allreduce_u64(comm, &b, 1, KVS_COMM_SUM, &err);
      CHECK(s == KVS_OK && *(uint64_t *)b.host == (uint64_t)n * (uint64_t)(n + 1) / 2,
            "allreduce after round %d: %s %s", round, kvs_status_name(s), err.message);
      kvs_comm_buffer_free(comm, &b);
    }
  }
}

static void case_large(kvs_comm_t comm) {
  int partner = g_rank ^ 1;
  if (partner >= g_size) return; /* the odd rank out of 3 */
  const size_t bytes = (size_t)64 << 20;
  uint8_t *out = filled(g_rank, partner, 100, bytes), *in = calloc(1, bytes);
  if (in == NULL) exit(1);
  kvs_comm_transfer batch[2] = {{partner, false, in, bytes}, {partner, true, out, bytes}};
  kvs_error err;
  double t0 = now_s();
  kvs_status s = kvs_comm_exchange(comm, batch, 2, &err);
  double secs = now_s() - t0;
  CHECK(s == KVS_OK, "64 MiB with rank %d: %s: %s", partner, kvs_status_name(s), err.message);
  if (s == KVS_OK) expect_message(in, bytes, partner, g_rank, 100);
  fprintf(stderr, "exchange_mpi: rank %d: 64 MiB each way with rank %d in %.3f s\n", g_rank,
          partner, secs);
  free(out);
  free(in);
}

static void case_refusals(kvs_comm_t comm) {
  int peer = (g_rank + 1) % g_size, from = (g_rank + g_size - 1) % g_size;
  uint8_t *out = filled(g_rank, peer, 200, 5000), *in = calloc(1, 5000);
  kvs_comm_transfer bad[2] = {{peer, true, out, 5000}, {g_size, false, in, 5000}};
  kvs_error err;
  kvs_status s = kvs_comm_exchange(comm, bad, 2, &err);
  char want[160];
  snprintf(want, sizeof want,
           "exchange transfer 1 of 2 (a receive of 5000 bytes): peer %d is outside a group of %d "
           "ranks",
           g_size, g_size);
  CHECK(s == KVS_ERR_INVALID_ARGUMENT && strcmp(err.message, want) == 0, "refusal: %s: %s",
        kvs_status_name(s), err.message);
  bad[1] = (kvs_comm_transfer){from, false, NULL, 5000};
  s = kvs_comm_exchange(comm, bad, 2, &err);
  CHECK(s == KVS_ERR_INVALID_ARGUMENT && strstr(err.message, "has NULL data") != NULL,
        "NULL data: %s: %s", kvs_status_name(s), err.message);
  CHECK(kvs_comm_health(comm) == KVS_OK, "a refusal poisoned the communicator");
  kvs_comm_transfer good[2] = {{peer, true, out, 5000}, {from, false, in, 5000}};
  s = kvs_comm_exchange(comm, good, 2, &err);
  CHECK(s == KVS_OK, "after the refusals: %s: %s", kvs_status_name(s), err.message);
  if (s == KVS_OK) expect_message(in, 5000, from, g_rank, 200);
  free(out);
  free(in);
}

/* Rank 0 sends `sent` bytes to rank 1, which receives `received`: the
 * receiving rank fails naming its receive. */
static void case_size(size_t sent, size_t received, const char *says) {
  kvs_comm_t comm = NULL;
  kvs_error err;
  if (kvs_comm_mpi_create(NULL, 0, 20000, &comm, &err) != KVS_OK) {
    CHECK(false, "a second communicator: %s", err.message);
    return;
  }
  if (g_rank <= 1) {
    size_t bytes = g_rank == 0 ? sent : received;
    uint8_t *p = filled(0, 1, 300, bytes);
    kvs_comm_transfer t = {1 - g_rank, g_rank == 0, p, bytes};
    kvs_status s = kvs_comm_exchange(comm, &t, 1, &err);
    if (g_rank == 1) {
      CHECK(s == KVS_ERR_COMM && strstr(err.message, says) != NULL,
            "a receive of %zu matching a send of %zu: %s: %s", received, sent, kvs_status_name(s),
            err.message);
      CHECK(strstr(err.message, "receive of") != NULL && strstr(err.message, "from rank 0"),
            "the message names the receive: %s", err.message);
      CHECK(kvs_comm_health(comm) == KVS_ERR_COMM, "not poisoned");
    } else {
      CHECK(s == KVS_OK || s == KVS_ERR_COMM, "the sender: %s: %s", kvs_status_name(s),
            err.message);
    }
    free(p);
  }
  kvs_comm_destroy(comm);
}

static void case_silent(kvs_comm_t comm) {
  int last = g_size - 1;
  kvs_error err;
  if (kvs_comm_set_timeout_ms(comm, 2000, &err) != KVS_OK) exit(1);
  if (g_rank != 0) return; /* the last rank never calls; the others are not asked */
  uint8_t *in = calloc(1, 1 << 20), *out = filled(0, last, 400, 64);
  kvs_comm_transfer batch[2] = {{last, true, out, 64}, {last, false, in, 1 << 20}};
  double t0 = now_s();
  kvs_status s = kvs_comm_exchange(comm, batch, 2, &err);
  double secs = now_s() - t0;
  char want[96];
  snprintf(want, sizeof want, "receive of 1048576 bytes from rank %d", last);
  CHECK(s == KVS_ERR_TIMEOUT, "silent peer: %s: %s", kvs_status_name(s), err.message);
  CHECK(strstr(err.message, "mpi exchange on rank 0 of") != NULL &&
            strstr(err.message, "did not complete within 2000 ms") != NULL &&
            strstr(err.message, want) != NULL,
        "the timeout names the exchange, its peer and bytes: %s", err.message);
  CHECK(secs >= 1.9 && secs < 20.0, "gave up after %.2f s (deadline 2 s)", secs);
  s = kvs_comm_exchange(comm, batch, 2, &err);
  CHECK(s == KVS_ERR_COMM && strstr(err.message, "failed earlier (timed out)") != NULL,
        "poisoned after: %s: %s", kvs_status_name(s), err.message);
  free(in);
  free(out);
}

int main(void) {
  kvs_error err;
  if (kvs_mpi_init(&g_rank, &g_size, &err) != KVS_OK) {
    fprintf(stderr, "FAIL: kvs_mpi_init: %s\n", err.message);
    return 1;
  }
  kvs_comm_t comm = NULL;
  if (kvs_comm_mpi_create(NULL, 0, 20000, &comm, &err) != KVS_OK) {
    fprintf(stderr, "FAIL: rank %d: kvs_comm_mpi_create: %s\n", g_rank, err.message);
    return 1;
  }
  case_pairs(comm);
  case_large(comm);
  case_refusals(comm);
  if (g_size >= 2) {
    case_size(100, 200, "got a piece of 100 bytes where it expected 200");
    case_size(200, 100, "truncat");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  case_silent(comm);
  /* The silent case's rank waits until rank 0 has given up. */
  MPI_Barrier(MPI_COMM_WORLD);
  kvs_comm_destroy(comm);
  if (g_failures == 0) {
    printf("exchange_mpi: rank %d of %d: ok (%llu bytes compared)\n", g_rank, g_size,
           (unsigned long long)g_compared);
  }
  fflush(stdout);
  kvs_mpi_finalize(&err);
  return g_failures == 0 ? 0 : 1;
}

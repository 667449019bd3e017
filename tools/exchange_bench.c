/* kvs_exchange_bench: kvs_comm_exchange's throughput over MPI against plain
 * MPI_Send/MPI_Recv of the same bytes between the same two ranks, in one
 * run, as prefill/decode disaggregation moves a request's KV rows: rank 0
 * (prefill) sends R requests to rank 1 (decode).
 *
 *   mpirun -np 2 kvs_exchange_bench [--tokens 32768] [--total 1GiB]
 *                                   [--request-bytes B] [--rounds 5] [--json]
 *
 * A request is the full-history KV rows of --tokens tokens of dsv4-flash
 * (the compressed and indexer rows of every layer and the mapping: the
 * cost model's bytes per token, times the tokens), or --request-bytes;
 * --total (rounded up to whole requests) is what each round moves. The
 * exchange round is one kvs_comm_exchange batch of R transfers on each
 * rank; the plain round is R blocking MPI_Send (in pieces of at most 1 GiB:
 * MPI's counts are int) matched by R MPI_Recv, on a duplicate of
 * MPI_COMM_WORLD. Each round starts after a barrier and lasts until the
 * slower rank is done; the median of --rounds rounds is reported, and the
 * exchange's over the plain one's (1.0: the same speed). The received
 * bytes are checked once after each method's first round (untimed).
 *
 * Output: one line per method and the ratio; with --json one object on the
 * last line of rank 0's stdout. Exit 0 measured, 1 a failure (a refused
 * exchange, wrong bytes, no memory, standard output not written), 2 bad
 * usage or not two ranks. A
 * program to run by hand: no test asserts its figures. */
#include <jansson.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cost_model.h"
#include "kvplan/args.h"
#include "kvshard.h"
#include "tools/bench_time.h"

#define PIECE_BYTES ((size_t)1 << 30)
#define MAX_ROUNDS 100

typedef struct options {
  uint64_t tokens, total, request_bytes, rounds;
  bool json;
} options;

static void usage(FILE *out) {
  fputs(
      "usage: mpirun -np 2 kvs_exchange_bench [--tokens N] [--total BYTES] [--request-bytes B]\n"
      "                                       [--rounds N] [--json]\n"
      "  --tokens N          a request's tokens (default 32768): its bytes are dsv4-flash's\n"
      "                      full-history KV rows per token times N\n"
      "  --request-bytes B   a request's bytes instead (e.g. 64MiB, 3GiB)\n"
      "  --total BYTES       what each round moves, in whole requests (default 1GiB)\n"
      "  --rounds N          timed rounds per method, the median reported (default 5)\n"
      "  --json              one JSON object on the last line of rank 0's stdout\n",
      out);
}

/* 0 to run, -1 after --help, 2 after a one-line message. */
static int parse(int argc, char **argv, options *o) {
  static const char *const names[] = {"--tokens", "--total", "--request-bytes",
                                      "--rounds", "--json",  "--help"};
  const size_t n_names = sizeof names / sizeof *names;
  bool seen[6] = {false};
  *o = (options){32768, (uint64_t)1 << 30, 0, 5, false};
  for (int i = 1; i < argc; i++) {
    size_t k = 0;
    while (k < n_names && strcmp(argv[i], names[k]) != 0) k++;
    if (k == n_names && strcmp(argv[i], "-h") == 0) k = 5;
    if (k == n_names) {
      kvs_report_unknown_flag("kvs_exchange_bench", argv[i], names, n_names,
                              "kvs_exchange_bench --help");
      return 2;
    }
    if (seen[k]) {
      fprintf(stderr, "kvs_exchange_bench: %s is given twice; give it once\n", names[k]);
      return 2;
    }
    seen[k] = true;
    if (k == 5) {
      usage(stdout);
      return -1;
    }
    if (k == 4) {
      o->json = true;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "kvs_exchange_bench: %s needs a value\n", names[k]);
      return 2;
    }
    const char *value = argv[++i];
    kvs_error err;
    kvs_status s;
    if (k == 0) {
      s = kvs_parse_u64_in(names[k], value, 1, (uint64_t)1 << 30,
                           "a token count in [1, 1073741824]", &o->tokens, &err);
    } else if (k == 3) {
      s = kvs_parse_u64_in(names[k], value, 1, MAX_ROUNDS, "a round count in [1, 100]", &o->rounds,
                           &err);
    } else {
      s = kvs_parse_bytes(names[k], value, k == 1 ? &o->total : &o->request_bytes, &err);
    }
    if (s == KVS_OK && k != 0 && k != 3 && (k == 1 ? o->total : o->request_bytes) == 0) {
      s = kvs_error_set(&err, KVS_ERR_INVALID_ARGUMENT, "%s needs at least one byte", names[k]);
    }
    if (s != KVS_OK) {
      fprintf(stderr, "kvs_exchange_bench: %s\n", err.message);
      return 2;
    }
  }
  if (seen[0] && seen[2]) {
    fprintf(stderr,
            "kvs_exchange_bench: --tokens and --request-bytes both size a request; give "
            "one\n");
    return 2;
  }
  return 0;
}

/* A request's bytes: dsv4-flash's full-history bytes per token, times the
 * tokens. */
static kvs_status request_bytes_of(uint64_t tokens, uint64_t *out, kvs_error *err) {
  kvs_geometry g;
  kvs_status s = kvs_geometry_builtin("dsv4-flash", &g, err);
  uint64_t per_token = 0;
  if (s == KVS_OK) s = kvs_cost_kv_unit_bytes(&g, KVS_DEFAULT_WINDOW_PAGE, &per_token, err);
  if (s == KVS_OK) *out = per_token * tokens;
  return s;
}

static uint8_t byte_at(uint64_t request, uint64_t i) {
  return (uint8_t)((request * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull) >> 56);
}

/* Rank 0's requests written once; rank 1's checked: every 4 KiB-th byte and
 * the last of each request (the bytes' pattern differs by request). */
static bool check_one(const uint8_t *p, uint64_t r, uint64_t i, const char *what) {
  if (p[i] == byte_at(r, i)) return true;
  fprintf(stderr, "kvs_exchange_bench: %s: request %llu byte %llu is %u, not %u\n", what,
          (unsigned long long)r, (unsigned long long)i, p[i], byte_at(r, i));
  return false;
}

static bool check(const uint8_t *all, uint64_t n, uint64_t bytes, const char *what) {
  for (uint64_t r = 0; r < n; r++) {
    const uint8_t *p = all + r * bytes;
    for (uint64_t i = 0; i < bytes; i += 4096) {
      if (!check_one(p, r, i, what)) return false;
    }
    if (!check_one(p, r, bytes - 1, what)) return false;
  }
  return true;
}

/* The slower rank's seconds for this round. */
static double slowest(double secs) {
  double out = 0;
  MPI_Allreduce(&secs, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

static double round_exchange(kvs_comm_t comm, kvs_comm_transfer *batch, uint64_t n, int *failed) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = kvs_bench_seconds();
  kvs_error err;
  kvs_status s = kvs_comm_exchange(comm, batch, n, &err);
  double secs = kvs_bench_seconds() - t0;
  if (s != KVS_OK) {
    fprintf(stderr, "kvs_exchange_bench: exchange: %s: %s\n", kvs_status_name(s), err.message);
    *failed = 1;
  }
  return slowest(secs);
}

static double round_plain(MPI_Comm world, int rank, uint8_t *all, uint64_t n, uint64_t bytes,
                          int *failed) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = kvs_bench_seconds();
  for (uint64_t r = 0; r < n && !*failed; r++) {
    for (uint64_t at = 0; at < bytes; at += PIECE_BYTES) {
      int len = (int)(bytes - at < PIECE_BYTES ? bytes - at : PIECE_BYTES);
      uint8_t *p = all + r * bytes + at;
      int code = rank == 0 ? MPI_Send(p, len, MPI_BYTE, 1, 7, world)
                           : MPI_Recv(p, len, MPI_BYTE, 0, 7, world, MPI_STATUS_IGNORE);
      if (code != MPI_SUCCESS) {
        fprintf(stderr, "kvs_exchange_bench: plain MPI %s failed (%d)\n",
                rank == 0 ? "MPI_Send" : "MPI_Recv", code);
        *failed = 1;
        break;
      }
    }
  }
  return slowest(kvs_bench_seconds() - t0);
}

static int run(int argc, char **argv) {
  int rank = 0, size = 0;
  kvs_error err;
  if (kvs_mpi_init(&rank, &size, &err) != KVS_OK) {
    fprintf(stderr, "kvs_exchange_bench: %s\n", err.message);
    return 1;
  }
  options o;
  int rc = parse(argc, argv, &o);
  if (rc == 0 && size != 2) {
    if (rank == 0) {
      fprintf(stderr, "kvs_exchange_bench: runs on 2 ranks (mpirun -np 2), got %d\n", size);
    }
    rc = 2;
  }
  if (rc != 0) {
    kvs_mpi_finalize(&err);
    return rc < 0 ? 0 : rc;
  }
  uint64_t bytes = o.request_bytes;
  if (bytes == 0 && request_bytes_of(o.tokens, &bytes, &err) != KVS_OK) {
    fprintf(stderr, "kvs_exchange_bench: %s\n", err.message);
    kvs_mpi_finalize(&err);
    return 1;
  }
  uint64_t n = (o.total + bytes - 1) / bytes;
  uint64_t total = n * bytes;
  uint8_t *all = malloc(total);
  kvs_comm_transfer *batch = calloc(n, sizeof *batch);
  kvs_comm_t comm = NULL;
  MPI_Comm world = MPI_COMM_NULL;
  int failed = all == NULL || batch == NULL;
  if (failed) {
    fprintf(stderr, "kvs_exchange_bench: rank %d: no memory for %llu bytes\n", rank,
            (unsigned long long)total);
  }
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!failed && kvs_comm_mpi_create(NULL, 0, 600000, &comm, &err) != KVS_OK) {
    fprintf(stderr, "kvs_exchange_bench: %s\n", err.message);
    failed = 1;
  }
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  double exchange[MAX_ROUNDS], plain[MAX_ROUNDS];
  if (!failed) {
    MPI_Comm_dup(MPI_COMM_WORLD, &world);
    for (uint64_t r = 0; r < n; r++) {
      uint8_t *p = all + r * bytes;
      if (rank == 0) {
        for (uint64_t i = 0; i < bytes; i++) p[i] = byte_at(r, i);
      } else {
        memset(p, 0, bytes); /* touched before timing, as the sender's are */
      }
      batch[r] = (kvs_comm_transfer){1 - rank, rank == 0, p, bytes};
    }
    for (uint64_t k = 0; k < o.rounds && !failed; k++) {
      exchange[k] = round_exchange(comm, batch, n, &failed);
      if (k == 0 && rank == 1 && !failed && !check(all, n, bytes, "exchange")) failed = 1;
      MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      if (rank == 1 && k == 0) memset(all, 0, total);
      if (failed) break;
      plain[k] = round_plain(world, rank, all, n, bytes, &failed);
      if (k == 0 && rank == 1 && !failed && !check(all, n, bytes, "MPI_Recv")) failed = 1;
      MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    }
  }
  if (!failed && rank == 0) {
    double ex = kvs_bench_median(exchange, (int)o.rounds);
    double pl = kvs_bench_median(plain, (int)o.rounds);
    double gb = (double)total / 1e9;
    char rb[32], tb[32];
    kvs_format_bytes(bytes, rb, sizeof rb);
    kvs_format_bytes(total, tb, sizeof tb);
    printf("%llu requests of %s (%s a round), rank 0 -> rank 1, median of %llu rounds:\n",
           (unsigned long long)n, rb, tb, (unsigned long long)o.rounds);
    printf("  kvs_comm_exchange (one batch)  %8.3f s  %7.2f GB/s\n", ex, gb / ex);
    printf("  MPI_Send/MPI_Recv (in order)   %8.3f s  %7.2f GB/s\n", pl, gb / pl);
    printf("  exchange / plain throughput    %8.3f\n", pl / ex);
    if (o.json) {
      json_t *j =
          json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "requests", (json_int_t)n,
                    "request_bytes", (json_int_t)bytes, "round_bytes", (json_int_t)total, "rounds",
                    (json_int_t)o.rounds, "exchange_s", ex, "plain_s", pl, "exchange_gbs", gb / ex,
                    "plain_gbs", gb / pl, "exchange_over_plain", pl / ex);
      char *text = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
      if (text != NULL) printf("%s\n", text);
      free(text);
      json_decref(j);
    }
  }
  if (world != MPI_COMM_NULL) MPI_Comm_free(&world);
  kvs_comm_destroy(comm);
  free(all);
  free(batch);
  kvs_flush_stdout(); /* keeps a failed write's reason: MPI's teardown changes errno */
  kvs_mpi_finalize(&err);
  return failed ? 1 : 0;
}

/* A lost line (stdout closed, a full disk) is a failure, exit 1. */
int main(int argc, char **argv) {
  int rc = kvs_require_stdout("kvs_exchange_bench", 1);
  return rc != 0 ? rc : kvs_finish_stdout("kvs_exchange_bench", run(argc, argv), 1);
}

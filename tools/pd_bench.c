/* kvs_pd_bench: a prefill/decode transfer's throughput (kvshard.h,
 * "prefill/decode") against plain MPI_Send/MPI_Recv of the same bytes
 * between the same two ranks, in one run: rank 0 is a prefill node (tp 1,
 * one rank), rank 1 a decode node (tp 1), the link MPI_COMM_WORLD.
 *
 *   mpirun -np 2 kvs_pd_bench [--model dsv4-flash] [--tokens 32768,65536]
 *                             [--budget 6GiB] [--rounds 5] [--fp8] [--scattered]
 *                             [--json]
 *
 * Both nodes are host twins (device cpu) of --model with a --budget carve
 * on the bundled topology (its address range reserved; only the rows a
 * request writes cost memory), 2 running requests, max_seq_len the largest
 * --tokens. Per request size: the prefill leader admits a request of that
 * many tokens and binds its tail pages, fills every unit of its rows
 * (kvs_node_request_rows) with a pattern; the decode leader import-admits
 * it; then --rounds rounds of kvs_node_send_request on rank 0 and
 * kvs_node_receive_request on rank 1 (every unit's digest taken on both
 * sides and compared: the bytes are checked each round), each after a
 * barrier and timed until the slower rank is done, alternating with
 * --rounds rounds of blocking MPI_Send (pieces of at most 1 GiB) matched
 * by MPI_Recv of the receive's bytes on a duplicate of MPI_COMM_WORLD from
 * one buffer into another, and with rounds of plain MPI of the rows where
 * they live (the in-place baseline: each rank's units from
 * kvs_node_request_rows, one MPI_Isend/MPI_Irecv per run of units adjacent
 * on both ranks, all posted, then one wait): the same bytes between the
 * same pages with no kvshard protocol, so a machine whose copies run at
 * another speed in other memory does not move it. The medians are
 * reported (wall time, and each rank's CPU seconds, which a loaded
 * machine's scheduler moves less): the transfer's throughput is the
 * receive's bytes (kvs_node_transfer_report.bytes) over its wall time, and
 * its ratio to each plain one's (1.0: the same speed).
 *
 * Output: a line per size; with --json one object on the last line of
 * rank 0's stdout. Exit 0 measured, 1 a failure (a refused transfer, no
 * memory, a node that cannot be made, standard output not written), 2 bad
 * usage or not two ranks. A
 * program to run by hand: no test asserts its figures. */
#include <jansson.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "kvplan/args.h"
#include "kvshard.h"
#include "kvshard_mpi.h"
#include "tools/bench_time.h"

#define PIECE_BYTES ((size_t)1 << 30)
#define MAX_ROUNDS 100
#define MAX_SIZES 8

typedef struct options {
  const char *model;
  uint64_t tokens[MAX_SIZES];
  size_t n_tokens;
  uint64_t budget, rounds;
  bool fp8, json, scattered;
} options;

static void usage(FILE *out) {
  fputs(
      "usage: mpirun -np 2 kvs_pd_bench [--model NAME] [--tokens N[,N...]] [--budget BYTES]\n"
      "                                 [--rounds N] [--fp8] [--scattered] [--json]\n"
      "  --model NAME     the geometry (default dsv4-flash; kvs_geometry_resolve's names)\n"
      "  --tokens N,...   the requests' tokens, 1 to 16777216, each size once, at most 8\n"
      "                   (default 32768,65536)\n"
      "  --budget BYTES   each node's carve, at least one byte (default 6GiB; host memory is\n"
      "                   used only by the rows the requests write)\n"
      "  --rounds N       timed rounds per method and size, the median reported (default 5)\n"
      "  --fp8            fp8 KV and indexer rows (default bf16)\n"
      "  --scattered      the decode side's block table runs backwards: no two consecutive\n"
      "                   units are one message (default: consecutive pages on both sides)\n"
      "  --json           one JSON object on the last line of rank 0's stdout\n",
      out);
}

/* One size of --tokens (kvs_parse_list's item): a count, each once. */
static kvs_status token_item(const char *flag, const char *item, size_t index, void *ctx,
                             kvs_error *err) {
  options *o = ctx;
  kvs_status s = kvs_parse_u64_in(flag, item, 1, (uint64_t)1 << 24,
                                  "a token count in [1, 16777216]", &o->tokens[index], err);
  for (size_t k = 0; s == KVS_OK && k < index; k++) {
    if (o->tokens[k] == o->tokens[index]) {
      s = kvs_error_set(err, KVS_ERR_PARSE, "%s lists %s twice; give each size once", flag, item);
    }
  }
  return s;
}

/* 0 to run, -1 after --help, 2 after a one-line message. */
static int parse(int argc, char **argv, options *o) {
  static const char *const names[] = {"--model", "--tokens", "--budget", "--rounds",
                                      "--fp8",   "--json",   "--help",   "--scattered"};
  const size_t n_names = sizeof names / sizeof *names;
  bool seen[8] = {false};
  memset(o, 0, sizeof *o);
  o->model = "dsv4-flash";
  o->tokens[0] = 32768;
  o->tokens[1] = 65536;
  o->n_tokens = 2;
  o->budget = (uint64_t)6 << 30;
  o->rounds = 5;
  for (int i = 1; i < argc; i++) {
    size_t k = 0;
    while (k < n_names && strcmp(argv[i], names[k]) != 0) k++;
    if (k == n_names && strcmp(argv[i], "-h") == 0) k = 6;
    if (k == n_names) {
      kvs_report_unknown_flag("kvs_pd_bench", argv[i], names, n_names, "kvs_pd_bench --help");
      return 2;
    }
    if (seen[k]) {
      fprintf(stderr, "kvs_pd_bench: %s is given twice; give it once\n", names[k]);
      return 2;
    }
    seen[k] = true;
    if (k == 6) {
      usage(stdout);
      return -1;
    }
    if (k == 4 || k == 5 || k == 7) {
      *(k == 4 ? &o->fp8 : k == 5 ? &o->json : &o->scattered) = true;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "kvs_pd_bench: %s needs a value\n", names[k]);
      return 2;
    }
    const char *value = argv[++i];
    kvs_error err;
    kvs_status s = KVS_OK;
    if (k == 0) {
      o->model = value;
    } else if (k == 1) {
      s = kvs_parse_list(names[k], value, MAX_SIZES, &o->n_tokens, &err, token_item, o);
    } else if (k == 2) {
      s = kvs_parse_bytes(names[k], value, &o->budget, &err);
      if (s == KVS_OK && o->budget == 0) {
        s = kvs_error_set(&err, KVS_ERR_PARSE, "%s needs at least one byte, got '%s'", names[k],
                          value);
      }
    } else {
      s = kvs_parse_u64_in(names[k], value, 1, MAX_ROUNDS, "a round count in [1, 100]", &o->rounds,
                           &err);
    }
    if (s != KVS_OK) {
      fprintf(stderr, "kvs_pd_bench: %s\n", err.message);
      return 2;
    }
  }
  return 0;
}

/* The slower rank's seconds for this round. */
static double slowest(double secs) {
  double out = 0;
  MPI_Allreduce(&secs, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

/* This process's CPU seconds (user and system) so far. */
static double cpu_seconds(void) {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/* Whether any rank failed. */
static bool any(bool failed) {
  int f = failed, out = 0;
  MPI_Allreduce(&f, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return out != 0;
}

static uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t x = (h ^ (v + 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  return x * 0x94d049bb133111ebull;
}

typedef struct bench {
  int rank;
  kvs_node_t node;
  kvs_comm_t link;
  MPI_Comm world;
  uint64_t page;
} bench;

typedef struct figures {
  uint64_t tokens, bytes, wire_bytes, messages, units;
  double transfer_s, plain_s, send_s, receive_s;
  double cpu_transfer[2], cpu_plain[2]; /* each rank's CPU seconds a round (medians) */
  double in_place_s;                    /* plain MPI of the rows where they live */
  uint64_t in_place_messages;
} figures;

/* The rows where they live, as plain MPI would move them with no kvshard
 * protocol: the request's units on this rank (kvs_node_request_rows),
 * cut into messages where both ranks' units are adjacent in memory (the
 * two ranks agree on the cut: one allreduce of the joins). */
typedef struct in_place {
  void **address;
  int *bytes;
  size_t n;
} in_place;

static void in_place_free(in_place *m) {
  free(m->address);
  free(m->bytes);
  memset(m, 0, sizeof *m);
}

static kvs_status in_place_plan(bench *b, uint64_t request, const int64_t *pages, uint64_t n,
                                uint64_t tokens, in_place *out, kvs_error *err) {
  memset(out, 0, sizeof *out);
  size_t count = 0;
  kvs_node_transfer t = {sizeof t, request, pages, n, tokens, 0, NULL, 0, 0};
  kvs_status s = kvs_node_request_rows(b->node, &t, NULL, 0, &count, err);
  kvs_node_rows *units = s == KVS_OK ? calloc(count ? count : 1, sizeof *units) : NULL;
  /* Per unit: its bytes (min and max over the ranks must agree) and
   * whether it joins the next one. */
  long long *lo = calloc(2 * (count + 1), sizeof *lo), *hi = lo != NULL ? lo + count + 1 : NULL;
  int *joins = calloc(count + 1, sizeof *joins);
  out->address = calloc(count + 1, sizeof *out->address);
  out->bytes = calloc(count + 1, sizeof *out->bytes);
  if (s == KVS_OK && (units == NULL || lo == NULL || joins == NULL || out->address == NULL ||
                      out->bytes == NULL)) {
    s = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu units", count);
  }
  if (s == KVS_OK) s = kvs_node_request_rows(b->node, &t, units, count, &count, err);
  if (s == KVS_OK && count > (size_t)INT32_MAX / 2) {
    s = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%zu units: more than MPI counts", count);
  }
  for (size_t i = 0; s == KVS_OK && i < count; i++) {
    if (units[i].bytes > PIECE_BYTES) {
      s = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "unit %zu is %llu bytes: above one message",
                        i, (unsigned long long)units[i].bytes);
    }
  }
  long long counts[2] = {(long long)count, -(long long)count};
  MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_LONG_LONG, MPI_MIN, b->world);
  if (s == KVS_OK && counts[0] != -counts[1]) {
    s = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                      "the two ranks' requests have %lld and %lld "
                      "units: the in-place baseline needs the same",
                      counts[0], -counts[1]);
  }
  bool ok = !any(s != KVS_OK);
  for (size_t i = 0; ok && i < count; i++) {
    lo[i] = (long long)units[i].bytes;
    hi[i] = -(long long)units[i].bytes;
    joins[i] =
        i + 1 < count && (unsigned char *)units[i].address + units[i].bytes == units[i + 1].address;
  }
  if (ok) {
    MPI_Allreduce(MPI_IN_PLACE, lo, 2 * (int)(count + 1), MPI_LONG_LONG, MPI_MIN, b->world);
    MPI_Allreduce(MPI_IN_PLACE, joins, (int)count, MPI_INT, MPI_LAND, b->world);
  }
  for (size_t i = 0; ok && s == KVS_OK && i < count; i++) {
    if (lo[i] != -hi[i]) {
      s = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                        "unit %zu is %lld bytes on one rank and "
                        "%lld on the other",
                        i, lo[i], -hi[i]);
    }
  }
  for (size_t i = 0; ok && s == KVS_OK && i < count;) {
    size_t end = i + 1;
    uint64_t bytes = units[i].bytes;
    while (end < count && joins[end - 1] && bytes + units[end].bytes <= PIECE_BYTES) {
      bytes += units[end++].bytes;
    }
    out->address[out->n] = units[i].address;
    out->bytes[out->n++] = (int)bytes;
    i = end;
  }
  free(units);
  free(lo);
  free(joins);
  return s;
}

static void in_place_move(bench *b, const in_place *m, MPI_Request *requests) {
  for (size_t i = 0; i < m->n; i++) {
    if (b->rank == 0) {
      MPI_Isend(m->address[i], m->bytes[i], MPI_BYTE, 1, 8, b->world, &requests[i]);
    } else {
      MPI_Irecv(m->address[i], m->bytes[i], MPI_BYTE, 0, 8, b->world, &requests[i]);
    }
  }
  MPI_Waitall((int)m->n, requests, MPI_STATUSES_IGNORE);
}

/* Rank 0 fills the request's rows: 8 bytes at a time, distinct per unit. */
static kvs_status fill_rows(bench *b, uint64_t request, const int64_t *pages, uint64_t n,
                            uint64_t tokens, kvs_error *err) {
  size_t count = 0;
  kvs_node_transfer t = {sizeof t, request, pages, n, tokens, 0, NULL, 0, 0};
  kvs_status s = kvs_node_request_rows(b->node, &t, NULL, 0, &count, err);
  kvs_node_rows *units = s == KVS_OK ? calloc(count ? count : 1, sizeof *units) : NULL;
  if (s == KVS_OK && units == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu units", count);
  }
  if (s == KVS_OK) {
    s = kvs_node_request_rows(b->node, &t, units, count, &count, err);
  }
  for (size_t i = 0; s == KVS_OK && i < count; i++) {
    uint64_t seed = mix(request, i), *p = units[i].address;
    for (uint64_t w = 0; w < units[i].bytes / 8; w++) p[w] = mix(seed, w);
  }
  free(units);
  return s;
}

static kvs_status one_size(bench *b, const options *o, uint64_t request, uint64_t tokens,
                           figures *f, kvs_error *err) {
  memset(f, 0, sizeof *f);
  f->tokens = tokens;
  uint64_t P = b->page, n = (tokens + P - 1) / P;
  /* The decode side's table starts 7 pages in (below): both sides' pages
   * must be the node's. */
  uint64_t usable = kvs_node_usable_pages(b->node);
  if (n + 7 > usable) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "--tokens %llu fills %llu pages of %llu tokens (and the decode side's "
                         "table starts 7 pages in); a node of this --budget has %llu usable "
                         "pages: raise --budget or lower --tokens",
                         (unsigned long long)tokens, (unsigned long long)n, (unsigned long long)P,
                         (unsigned long long)usable);
  }
  int64_t *pages = calloc(n, sizeof *pages);
  if (pages == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a block table");
  /* Consecutive pages on both sides (one message per pool and layer), or
   * with --scattered the decode side's the other way round (one message
   * per unit). */
  for (uint64_t i = 0; i < n; i++) {
    pages[i] = (int64_t)(b->rank == 0 ? i : o->scattered ? n - 1 - i + 7 : i + 7);
  }
  uint64_t lo = tokens > P ? (tokens - P + 1) / P : 0, hi = (tokens - 1) / P + 1;
  kvs_status s = KVS_OK;
  int64_t slot = -1;
  if (b->rank == 0) {
    s = kvs_node_admit(b->node, request, &slot, err);
    if (s == KVS_OK) s = kvs_node_bind_pages(b->node, request, pages + lo, hi - lo, err);
  } else {
    kvs_node_transfer t = {sizeof t, request, pages, n, tokens, 0, NULL, 0, 0};
    s = kvs_node_import_admit(b->node, &t, &slot, err);
  }
  if (s == KVS_OK) s = kvs_node_step(b->node, NULL, NULL, err);
  if (s == KVS_OK && b->rank == 0) s = fill_rows(b, request, pages, n, tokens, err);
  if (any(s != KVS_OK)) {
    free(pages);
    return s != KVS_OK ? s : kvs_error_set(err, KVS_ERR_COMM, "the other rank failed");
  }
  int peer = 1 - b->rank;
  kvs_node_transfer t = {sizeof t, request, pages, n, tokens, 0, &peer, 1, 0};
  double transfer[MAX_ROUNDS], plain[MAX_ROUNDS], mine[MAX_ROUNDS], placed[MAX_ROUNDS];
  double cpu_t[MAX_ROUNDS], cpu_p[MAX_ROUNDS];
  unsigned char *buffer = NULL;
  in_place rows = {NULL, NULL, 0};
  MPI_Request *requests = NULL;
  if (s == KVS_OK) s = in_place_plan(b, request, pages, n, tokens, &rows, err);
  if (s == KVS_OK && (requests = calloc(rows.n + 1, sizeof *requests)) == NULL) {
    s = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu requests", rows.n);
  }
  if (any(s != KVS_OK) && s == KVS_OK) {
    s = kvs_error_set(err, KVS_ERR_COMM, "the other rank failed");
  }
  f->in_place_messages = rows.n;
  for (uint64_t k = 0; k < o->rounds && s == KVS_OK; k++) {
    kvs_node_transfer_report r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    MPI_Barrier(MPI_COMM_WORLD);
    double c0 = cpu_seconds(), t0 = kvs_bench_seconds();
    s = b->rank == 0 ? kvs_node_send_request(b->node, b->link, &t, &r, err)
                     : kvs_node_receive_request(b->node, b->link, &t, &r, err);
    mine[k] = kvs_bench_seconds() - t0;
    cpu_t[k] = cpu_seconds() - c0;
    transfer[k] = slowest(mine[k]);
    if (any(s != KVS_OK)) {
      if (s == KVS_OK) s = kvs_error_set(err, KVS_ERR_COMM, "the other rank's transfer failed");
      break;
    }
    if (k == 0) {
      /* The receive's bytes, from rank 1. */
      uint64_t counts[4] = {r.bytes, r.wire_bytes, r.messages, r.units};
      MPI_Bcast(counts, 4, MPI_UINT64_T, 1, MPI_COMM_WORLD);
      f->bytes = counts[0];
      f->wire_bytes = counts[1];
      f->messages = counts[2];
      f->units = counts[3];
      buffer = malloc(f->bytes);
      int no = buffer == NULL;
      if (any(no)) {
        s = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %llu bytes",
                          (unsigned long long)f->bytes);
        break;
      }
      memset(buffer, b->rank == 0 ? 0x5a : 0, f->bytes); /* touched before timing */
    }
    MPI_Barrier(MPI_COMM_WORLD);
    c0 = cpu_seconds();
    t0 = kvs_bench_seconds();
    for (uint64_t at = 0; at < f->bytes; at += PIECE_BYTES) {
      int len = (int)(f->bytes - at < PIECE_BYTES ? f->bytes - at : PIECE_BYTES);
      if (b->rank == 0) {
        MPI_Send(buffer + at, len, MPI_BYTE, 1, 7, b->world);
      } else {
        MPI_Recv(buffer + at, len, MPI_BYTE, 0, 7, b->world, MPI_STATUS_IGNORE);
      }
    }
    double plain_mine = kvs_bench_seconds() - t0;
    cpu_p[k] = cpu_seconds() - c0;
    plain[k] = slowest(plain_mine);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = kvs_bench_seconds();
    in_place_move(b, &rows, requests);
    placed[k] = slowest(kvs_bench_seconds() - t0);
  }
  if (s == KVS_OK) {
    double own = kvs_bench_median(mine, (int)o->rounds), other = own;
    MPI_Bcast(&other, 1, MPI_DOUBLE, 1, MPI_COMM_WORLD);
    f->send_s = b->rank == 0 ? own : 0;
    f->receive_s = other;
    f->transfer_s = kvs_bench_median(transfer, (int)o->rounds);
    f->plain_s = kvs_bench_median(plain, (int)o->rounds);
    f->in_place_s = kvs_bench_median(placed, (int)o->rounds);
    double cpu[2] = {kvs_bench_median(cpu_t, (int)o->rounds),
                     kvs_bench_median(cpu_p, (int)o->rounds)};
    double all[4] = {0, 0, 0, 0};
    MPI_Allgather(cpu, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, MPI_COMM_WORLD);
    f->cpu_transfer[0] = all[0];
    f->cpu_plain[0] = all[1];
    f->cpu_transfer[1] = all[2];
    f->cpu_plain[1] = all[3];
  }
  free(buffer);
  free(requests);
  in_place_free(&rows);
  /* The request leaves both nodes. */
  kvs_error local;
  if (b->rank == 0) kvs_node_free_pages(b->node, pages + lo, hi - lo, &local);
  if (b->rank == 1) kvs_node_free_pages(b->node, pages, n, &local);
  kvs_node_finish(b->node, request, &local);
  kvs_status stepped = kvs_node_step(b->node, NULL, NULL, &local);
  if (s == KVS_OK && stepped != KVS_OK) s = kvs_error_set(err, stepped, "%s", local.message);
  free(pages);
  return s;
}

static int run(int argc, char **argv) {
  int rank = 0, size = 0;
  kvs_error err;
  if (kvs_mpi_init(&rank, &size, &err) != KVS_OK) {
    fprintf(stderr, "kvs_pd_bench: %s\n", err.message);
    return 1;
  }
  options o;
  int rc = parse(argc, argv, &o);
  if (rc == 0 && size != 2) {
    if (rank == 0) fprintf(stderr, "kvs_pd_bench: runs on 2 ranks (mpirun -np 2), got %d\n", size);
    rc = 2;
  }
  if (rc != 0) {
    kvs_mpi_finalize(&err);
    return rc < 0 ? 0 : rc;
  }
  kvs_geometry g;
  bench b = {rank, NULL, NULL, MPI_COMM_NULL, 0};
  MPI_Comm own = MPI_COMM_NULL;
  kvs_comm_t node_comm = NULL;
  uint64_t longest = 0;
  for (size_t i = 0; i < o.n_tokens; i++) longest = o.tokens[i] > longest ? o.tokens[i] : longest;
  kvs_status s = kvs_geometry_resolve(o.model, &g, &err);
  MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &own);
  MPI_Comm_dup(MPI_COMM_WORLD, &b.world);
  if (s == KVS_OK) s = kvs_comm_mpi_from(own, 600000, &node_comm, &err);
  if (s == KVS_OK) s = kvs_comm_mpi_create(NULL, 0, 600000, &b.link, &err);
  if (s == KVS_OK) {
    kvs_node_options n;
    kvs_node_options_init(&n);
    n.geometry = &g;
    n.kv_dtype = o.fp8 ? KVS_KV_FP8 : KVS_KV_BF16;
    n.max_seq_len = longest;
    n.max_running = 2;
    n.radix = false;
    n.topology = "bundled";
    n.device = KVS_NODE_DEVICE_CPU;
    n.bind_numa = false;
    n.budget_bytes = o.budget;
    n.local_rank = KVS_NODE_UNCHECKED;
    n.host_index = KVS_NODE_UNCHECKED;
    s = kvs_node_create(node_comm, &n, &b.node, &err);
  }
  if (s != KVS_OK) fprintf(stderr, "kvs_pd_bench: rank %d: %s\n", rank, err.message);
  bool failed = any(s != KVS_OK);
  figures f[MAX_SIZES];
  if (!failed) {
    b.page = kvs_node_page(b.node);
    if (rank == 0) {
      printf(
          "%s (%s, %s pages), tp 1 -> tp 1 on one machine, %llu usable pages of %llu tokens "
          "a node, median of %llu rounds:\n",
          o.model, o.fp8 ? "fp8" : "bf16", o.scattered ? "scattered" : "consecutive",
          (unsigned long long)kvs_node_usable_pages(b.node), (unsigned long long)b.page,
          (unsigned long long)o.rounds);
    }
  }
  for (size_t i = 0; i < o.n_tokens && !failed; i++) {
    s = one_size(&b, &o, 1 + i, o.tokens[i], &f[i], &err);
    if (s != KVS_OK) fprintf(stderr, "kvs_pd_bench: rank %d: %s\n", rank, err.message);
    failed = any(s != KVS_OK);
    if (!failed && rank == 0) {
      double gb = (double)f[i].bytes / 1e9;
      char text[32];
      kvs_format_bytes(f[i].bytes, text, sizeof text);
      printf("  %llu tokens: %s in %llu units, %llu messages (%llu bytes on the wire)\n",
             (unsigned long long)f[i].tokens, text, (unsigned long long)f[i].units,
             (unsigned long long)f[i].messages, (unsigned long long)f[i].wire_bytes);
      printf("    send/receive_request  %8.4f s  %7.2f GB/s  (send %.4f s, receive %.4f s)\n",
             f[i].transfer_s, gb / f[i].transfer_s, f[i].send_s, f[i].receive_s);
      printf("    MPI_Send/MPI_Recv     %8.4f s  %7.2f GB/s\n", f[i].plain_s, gb / f[i].plain_s);
      printf("    transfer / plain throughput %.3f\n", f[i].plain_s / f[i].transfer_s);
      printf(
          "    MPI in place          %8.4f s  %7.2f GB/s  (the rows where they live, %llu "
          "messages)\n",
          f[i].in_place_s, gb / f[i].in_place_s, (unsigned long long)f[i].in_place_messages);
      printf("    transfer / in-place throughput %.3f\n", f[i].in_place_s / f[i].transfer_s);
      printf(
          "    CPU seconds a round: transfer %.4f (prefill) + %.4f (decode), plain %.4f + "
          "%.4f\n",
          f[i].cpu_transfer[0], f[i].cpu_transfer[1], f[i].cpu_plain[0], f[i].cpu_plain[1]);
    }
  }
  if (!failed && rank == 0 && o.json) {
    json_t *sizes = json_array();
    for (size_t i = 0; i < o.n_tokens; i++) {
      double gb = (double)f[i].bytes / 1e9;
      json_array_append_new(
          sizes,
          json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:[f,f], s:[f,f], s:f, s:I, "
                    "s:f}",
                    "tokens", (json_int_t)f[i].tokens, "bytes", (json_int_t)f[i].bytes,
                    "wire_bytes", (json_int_t)f[i].wire_bytes, "messages",
                    (json_int_t)f[i].messages, "transfer_s", f[i].transfer_s, "plain_s",
                    f[i].plain_s, "transfer_gbs", gb / f[i].transfer_s, "plain_gbs",
                    gb / f[i].plain_s, "transfer_over_plain", f[i].plain_s / f[i].transfer_s,
                    "cpu_transfer_s", f[i].cpu_transfer[0], f[i].cpu_transfer[1], "cpu_plain_s",
                    f[i].cpu_plain[0], f[i].cpu_plain[1], "in_place_s", f[i].in_place_s,
                    "in_place_messages", (json_int_t)f[i].in_place_messages,
                    "transfer_over_in_place", f[i].in_place_s / f[i].transfer_s));
    }
    json_t *j = json_pack("{s:s, s:b, s:b, s:I, s:o}", "model", o.model, "fp8", o.fp8, "scattered",
                          o.scattered, "rounds", (json_int_t)o.rounds, "sizes", sizes);
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    if (text != NULL) printf("%s\n", text);
    free(text);
    json_decref(j);
  }
  kvs_flush_stdout(); /* keeps a failed write's reason: MPI's teardown changes errno */
  kvs_node_destroy(b.node);
  kvs_comm_destroy(b.link);
  kvs_comm_destroy(node_comm);
  if (b.world != MPI_COMM_NULL) MPI_Comm_free(&b.world);
  if (own != MPI_COMM_NULL) MPI_Comm_free(&own);
  kvs_mpi_finalize(&err);
  return failed ? 1 : 0;
}

/* A lost line (stdout closed, a full disk) is a failure, exit 1. */
int main(int argc, char **argv) {
  int rc = kvs_require_stdout("kvs_pd_bench", 1);
  return rc != 0 ? rc : kvs_finish_stdout("kvs_pd_bench", run(argc, argv), 1);
}

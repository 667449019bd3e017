/* The core/ workloads of kvbench, fixed so runs compare across machines:
 * geometry head_dim 512, index_head_dim 128, 61 layers with ratio by
 * i % 4 (0, 4, 128, 4); pool of 4096 pages, swa_ratio 0.125, P 128, 512
 * window pages, 64 running requests, radix on. */
#include "tools/bench_core.h"

#include <stdio.h>
#include <time.h>

#include "core/cost_model.h"
#include "pool/window_pool.h"

#define P 128u

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static kvs_status bench_geometry(kvs_geometry *g, kvs_error *err) {
  static const uint32_t by_mod[4] = {0, 4, 128, 4};
  uint32_t ratios[61];
  for (size_t i = 0; i < 61; i++) ratios[i] = by_mod[i % 4];
  return kvs_geometry_init(g, 512, 128, 61, ratios, 61, err);
}

/* Keeps results observable so the loops are not optimised away. */
static volatile int64_t sink;

/* Full page fp's locations: fp * P + o, for every workload on the pool. */
static int64_t locs[4000][P];

/* The pool the first two workloads share. Returns 0, or 1 after a message;
 * g is left set for the solve. */
static int open_pool(kvs_geometry *g, kvs_window_pool_t *pool) {
  kvs_error err;
  kvs_pool_sizes sizes;
  kvs_window_pool_options options = KVS_WINDOW_POOL_OPTIONS_INIT;
  options.max_running = 64;
  options.radix = true;
  if (bench_geometry(g, &err) || kvs_pool_sizes_compute(4096, g, 0.125, P, 512, &sizes, &err) ||
      kvs_window_pool_create(&sizes, &options, pool, &err)) {
    fprintf(stderr, "kvbench: %s\n", err.message);
    return 1;
  }
  for (uint64_t fp = 0; fp < 4000; fp++) {
    for (uint64_t o = 0; o < P; o++) locs[fp][o] = (int64_t)(fp * P + o);
  }
  return 0;
}

/* (a) bind full page (i % 4000), then free it. The journal is drained
 * once per 1024 operations, as a scheduler step would. Sets *ns to the mean
 * per bind + free; returns 0, or 1 after a message. */
static int time_bind_free(kvs_window_pool_t pool, long n_alloc, double *ns) {
  static kvs_journal_entry drained[KVS_WINDOW_POOL_DEFAULT_JOURNAL];
  kvs_error err;
  double start = now_ns();
  for (long i = 0; i < n_alloc; i++) {
    const int64_t *page = locs[i % 4000];
    if (kvs_window_pool_alloc(pool, page, P, NULL, &err) ||
        kvs_window_pool_free(pool, page, P, &err)) {
      fprintf(stderr, "kvbench: bind/free %ld: %s\n", i, err.message);
      return 1;
    }
    if ((i & 1023) == 1023) {
      size_t n;
      kvs_window_pool_journal_drain(pool, drained, KVS_WINDOW_POOL_DEFAULT_JOURNAL, &n);
    }
  }
  *ns = (now_ns() - start) / (double)n_alloc;
  return 0;
}

/* (b) full pages 0..7 bound; ring context at P + (i % 7P) over locs
 * 0..8P-1. Sets *ns to the mean per context; returns 0, or 1 after a
 * message. */
static int time_window_ctx(kvs_window_pool_t pool, long n_ctx, double *ns) {
  kvs_error err;
  for (uint64_t fp = 0; fp < 8; fp++) {
    if (kvs_window_pool_alloc(pool, locs[fp], P, NULL, &err)) {
      fprintf(stderr, "kvbench: %s\n", err.message);
      return 1;
    }
  }
  const int64_t *full_locs = &locs[0][0];
  int64_t ring[P], own, prev;
  double start = now_ns();
  for (long i = 0; i < n_ctx; i++) {
    uint64_t pos = P + (uint64_t)i % (7 * P);
    if (kvs_window_pool_window_ctx(pool, pos, full_locs, 8 * P, &own, &prev, ring, &err)) {
      fprintf(stderr, "kvbench: window ctx %ld: %s\n", i, err.message);
      return 1;
    }
    sink += ring[i % P] + own;
  }
  *ns = (now_ns() - start) / (double)n_ctx;
  return 0;
}

/* (c) the byte-exact solve at 100 GiB + i bytes. Sets *ns to the mean per
 * solve; returns 0, or 1 after a message. */
static int time_solve(const kvs_geometry *g, long n_solve, double *ns) {
  kvs_error err;
  kvs_pool_sizes solved;
  double start = now_ns();
  for (long i = 0; i < n_solve; i++) {
    if (kvs_cost_solve_num_pages((100ull << 30) + (uint64_t)i, g, 0.125, 141, P, 64, &solved, NULL,
                                 &err)) {
      fprintf(stderr, "kvbench: solve %ld: %s\n", i, err.message);
      return 1;
    }
    sink += (int64_t)solved.full_token;
  }
  *ns = (now_ns() - start) / (double)n_solve;
  return 0;
}

int kvs_bench_core(json_t *results, int quick) {
  kvs_geometry g;
  kvs_window_pool_t pool = NULL;
  if (open_pool(&g, &pool) != 0) return 1;
  long scale = quick ? 100 : 1;
  double alloc_free_ns, ctx_ns, solve_ns;
  int rc = time_bind_free(pool, 2000000 / scale, &alloc_free_ns);
  if (rc == 0) rc = time_window_ctx(pool, 1000000 / scale, &ctx_ns);
  kvs_window_pool_destroy(pool);
  if (rc == 0) rc = time_solve(&g, 20000 / scale, &solve_ns);
  if (rc != 0) return rc;
  /* kvbench prints the keys in the order they are set. */
  json_object_set_new(results, "alloc_free_page_ns", json_real(alloc_free_ns));
  json_object_set_new(results, "window_ctx_ns", json_real(ctx_ns));
  json_object_set_new(results, "solve_ns", json_real(solve_ns));
  return 0;
}

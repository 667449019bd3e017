/* Prefill/decode over MPI: a request's rows from a prefill node to a
 * decode node (kvshard.h, "prefill/decode"), as real processes under
 * mpirun -np 8 (tests/shard/pd_mpi_test.sh). World ranks 0-3 are the
 * prefill node (tp 1 x pp 4 over a split of MPI_COMM_WORLD), 4-7 the
 * decode node (tp 4); the link is MPI_COMM_WORLD. Both are the node tests'
 * small model (tests/shard/small_model.h) on the bundled topology with
 * small budgets, host twins, a prefix cache on both (the decode side's
 * gives reuse; the prefill side's only makes the two sides' rows the same
 * shape: tail states travel).
 *
 *   pd_mpi flow [REQUESTS]   REQUESTS (200) requests of 1..3000 tokens,
 *                            seeded, a share of them in families that
 *                            share a prefix; then planted faults.
 *   pd_mpi kill K            the same flow, and prefill rank 2 SIGKILLs
 *                            itself when it should send request K (run
 *                            under mpirun --enable-recovery).
 *
 * Per request: the prefill leader admits it and binds its tail pages,
 * steps; every prefill rank fills each of its units (kvs_node_request_rows)
 * with a pattern keyed by content -- the page's chained key for a page's
 * units (compressed, indexer, window, tail states), the request for its
 * slot's rings -- so a reused prefix is byte-equal to what a new transfer
 * would bring. The decode leader evicts if its pages or window run short
 * (a step), matches the prompt's keys against its prefix cache, acquires
 * an exact hit, import-admits with reuse_tokens = the hit (a step); then
 * every prefill rank sends and every decode rank receives (KVS_OK: every
 * unit's digest agreed), and every decode rank reads its rows back through
 * kvs_node_request_rows with reuse 0 (the reused prefix included) and
 * compares them with the pattern. Each side's report is checked against
 * the bytes computed here from the views' row widths by transfer_rows.h's
 * rule: the decode rank's bytes, its reused bytes, the prefill rank's
 * bytes plus what reuse saved it. The decode leader then inserts the
 * request's full pages (tail pages keep their window binding as the
 * block's tail), frees its pages, releases and finishes it (a step).
 *
 * Then planted faults, one request each (tests of the digests through
 * the contract, pool by pool): decode rank 2's unit of a pool lands one
 * unit's step off (kvs_node_receive_planted) -- compressed_4 unit 3 (layer
 * 1's page 3, its pages ascending so page + 1 is the request's next),
 * window, compressed_128, indexer, the slot's state_4, state_128 and
 * index_state rings and the state_4 and index_state tail states. Every
 * decode rank must refuse with KVS_ERR_CORRUPT naming the view, layer and
 * positions of the first unit that differs (the planted one, or the one
 * whose place it overwrote when that comes first; the first plant must
 * name compressed_4, layer 1, positions 384..511); after the next step the
 * decode node's running count and free window pages are back to what they
 * were before the admission and kvs_node_check passes. Last, a refusal
 * that gives back a hit: a request of 5 full pages is cached (its last
 * page's tail kept), another with the same first keys hits its 640
 * tokens exactly and is planted; after the refusal the prefix cache's
 * paths, references, blocks and tails are what they were before it.
 * And a request the two sides disagree on (the prefill side sends 999
 * tokens, the decode side admitted 1000): every decode rank refuses it in
 * its header, and every prefill rank's send must fail saying so (it
 * returned KVS_OK with nothing moved before the fix).
 *
 * Kill mode: every decode rank's receive of request K must fail within the
 * link's deadline (3 s, plus the checks' slack) naming link rank 2; the
 * leader's refusal gives back the slot and window pages (capacity after a
 * step) and kvs_node_check passes on the decode node.
 *
 * Each rank prints "pd_mpi: rank R: ok ..." when all its checks passed;
 * a failed check is a line "FAIL: rank R: ..." and exit 1. */
#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvshard.h"
#include "kvshard_mpi.h"
#include "plan/device_layout.h"
#include "shard/node.h"
#include "shard/node_transfer.h"
#include "tests/shard/mpi_check.h"

#define SIDE_RANKS 4
#define PAGE 128
#define MAX_TOKENS 3000
#define MAX_PAGES ((MAX_TOKENS + PAGE - 1) / PAGE)
#define FAMILIES 6
#define VICTIM 2 /* the prefill rank kill mode ends */
#define MAX_UNITS 4096

static int g_rank = -1, g_failures = 0;

/* A check whose failure leaves nothing sensible to do next. */
#define REQUIRE(cond, ...)          \
  do {                              \
    if (!(cond)) {                  \
      CHECK(false, __VA_ARGS__);    \
      fflush(stderr);               \
      MPI_Abort(MPI_COMM_WORLD, 1); \
    }                               \
  } while (0)

static uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t x = (h ^ (v + 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 29);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the workload, the same on every rank ---- */

typedef struct request {
  uint64_t id;
  uint64_t tokens;
  uint64_t keys[MAX_PAGES]; /* page b's chained key (every page, the partial one too) */
} request;

static uint64_t g_seed = 0x5eed;

static uint64_t next_random(void) {
  g_seed = mix(g_seed, 1);
  return g_seed;
}

/* Families share a prefix of 2..12 pages; a family's request is its
 * prefix plus 0..P-2 tokens (its tail page full and cached with the
 * block's tail: later ones hit it exactly) or plus up to 1500. */
static void make_request(uint64_t id, request *r) {
  static uint64_t family_pages[FAMILIES];
  if (family_pages[0] == 0) {
    for (int f = 0; f < FAMILIES; f++) family_pages[f] = 2 + next_random() % 11;
  }
  r->id = id;
  uint64_t pick = next_random() % 10, shared = 0, family = 0;
  if (pick < 6) {
    family = next_random() % FAMILIES;
    shared = family_pages[family] * PAGE;
    uint64_t extra = next_random() % 3 == 0 ? next_random() % (PAGE - 1) : next_random() % 1501;
    r->tokens = shared + extra;
  } else {
    r->tokens = 1 + next_random() % MAX_TOKENS;
  }
  if (r->tokens > MAX_TOKENS) r->tokens = MAX_TOKENS;
  uint64_t chain = 0x6b6579;
  for (uint64_t b = 0; b * PAGE < r->tokens; b++) {
    bool common = (b + 1) * PAGE <= shared;
    chain = mix(chain, common ? mix(family + 1, b) : mix(0x1000000 + id, b));
    r->keys[b] = chain;
  }
}

static uint64_t pages_of(uint64_t tokens) { return (tokens + PAGE - 1) / PAGE; }

/* transfer_rows.h's tail: [*first, *first + n) */
static uint64_t tail_of(uint64_t tokens, uint64_t reuse, uint64_t *first) {
  uint64_t lo = tokens > PAGE ? (tokens - PAGE + 1) / PAGE : 0, hi = (tokens - 1) / PAGE + 1;
  if (lo < reuse / PAGE) lo = reuse / PAGE;
  *first = lo;
  return hi > lo ? hi - lo : 0;
}

/* ---- the pattern ---- */

static int pool_index(const char *view) {
  static const char *const names[] = {"window",  "compressed_4", "compressed_128", "indexer",
                                      "state_4", "state_128",    "index_state"};
  for (int i = 0; i < 7; i++) {
    if (strcmp(view, names[i]) == 0) return i;
  }
  return -1;
}

/* What a unit's rows are keyed by: the page's chained key, or the request
 * for its slot's rings. */
static uint64_t unit_key(const request *r, const kvs_node_rows *u) {
  int pool = pool_index(u->view);
  if (pool >= 4 && !u->tail_state) return mix(0x72696e67, r->id);
  return r->keys[u->first_token / PAGE];
}

static void fill(unsigned char *out, uint64_t bytes, uint64_t key, const kvs_node_rows *u) {
  uint64_t seed = mix(mix(mix(key, (uint64_t)pool_index(u->view)), u->layer), u->tail_state);
  for (uint64_t i = 0; i < bytes; i += 8) {
    uint64_t x = mix(seed, i / 8);
    size_t n = bytes - i < 8 ? (size_t)(bytes - i) : 8;
    memcpy(out + i, &x, n);
  }
}

/* ---- the expected bytes, from the views' row widths ---- */

typedef struct widths {
  uint64_t row[7]; /* bytes of one row of each pool's view */
  const kvs_device_layout *layout;
  uint64_t max_running;
} widths;

static void widths_of(kvs_node_t node, widths *w) {
  memset(w, 0, sizeof *w);
  w->layout = kvs_node_layout(node);
  w->max_running = kvs_node_max_running(node);
  for (size_t i = 0; i < kvs_node_view_count(node); i++) {
    kvs_node_view v;
    v.size = sizeof v;
    kvs_error err;
    REQUIRE(kvs_node_view_at(node, i, &v, &err) == KVS_OK, "view %zu: %s", i, err.message);
    int pool = pool_index(v.name);
    if (pool < 0) continue;
    REQUIRE(v.ndim == 3 && v.dtype != KVS_VIEW_UINT8, "view %s: rows of 3 dims, not fp8 pages",
            v.name);
    w->row[pool] = (uint64_t)v.shape[2] * kvs_view_dtype_bytes(v.dtype);
  }
}

/* The bytes of a request's units in layers [lo, hi) of this rank, by the
 * rule: full pages past the reuse for the compressed and indexer pools,
 * whole tail pages for the window, the slot's ring (8 or 128 rows) and two
 * tail-state rows per tail page for the ratio-4 rings. */
static uint64_t expected_bytes(const widths *w, uint64_t tokens, uint64_t reuse, size_t lo,
                               size_t hi) {
  uint64_t first, tails = tail_of(tokens, reuse, &first);
  uint64_t pages = pages_of(tokens) - reuse / PAGE, sum = 0;
  for (size_t l = lo; l < hi; l++) {
    uint32_t ratio = w->layout->layer_ratio[l - w->layout->first_layer];
    sum += tails * PAGE * w->row[0];
    if (ratio == 4) {
      sum += pages * (PAGE / 4) * (w->row[1] + w->row[3]);
      sum += (8 + 2 * tails) * (w->row[4] + w->row[6]);
    } else if (ratio == 128) {
      sum += pages * (PAGE / 128) * w->row[2];
      sum += 128 * w->row[5];
    }
  }
  return sum;
}

/* ---- the nodes ---- */

static kvs_node_t make_node(kvs_comm_t comm, bool prefill, kvs_geometry *g, uint64_t *budgets) {
  memset(g, 0, sizeof *g);
  g->head_dim = 64;
  g->index_head_dim = 32;
  g->n_layers = 4;
  g->n_ratios = 4;
  const uint32_t ratios[] = {0, 4, 128, 4};
  for (int i = 0; i < 4; i++) g->compress_ratios[i] = ratios[i];
  for (int i = 0; i < 8; i++) budgets[i] = 12ull << 20;
  kvs_node_options o;
  kvs_node_options_init(&o);
  o.geometry = g;
  o.qk_rope_head_dim = 64;
  o.swa_ratio = 0.04;
  o.max_seq_len = 4096;
  o.max_running = 4;
  o.radix = false;
  o.tp = prefill ? 1 : SIDE_RANKS;
  o.pp = prefill ? SIDE_RANKS : 1;
  o.topology = "bundled";
  o.device = KVS_NODE_DEVICE_CPU;
  o.bind_numa = false;
  o.budget_per_gpu = budgets;
  o.n_budget_per_gpu = 8;
  o.prefix_cache = true;
  o.local_rank = KVS_NODE_UNCHECKED;
  o.host_index = KVS_NODE_UNCHECKED;
  kvs_node_t node = NULL;
  kvs_error err;
  REQUIRE(kvs_node_create(comm, &o, &node, &err) == KVS_OK, "kvs_node_create (%s): %s",
          prefill ? "prefill" : "decode", err.message);
  return node;
}

static void step(kvs_node_t node, const char *what) {
  kvs_error err;
  kvs_status s = kvs_node_step(node, NULL, NULL, &err);
  REQUIRE(s == KVS_OK, "step (%s): %s: %s", what, kvs_status_name(s), err.message);
}

static kvs_node_capacity capacity(kvs_node_t node) {
  kvs_node_capacity c;
  memset(&c, 0, sizeof c);
  c.size = sizeof c;
  kvs_error err;
  REQUIRE(kvs_node_capacity_of(node, &c, &err) == KVS_OK, "capacity: %s", err.message);
  return c;
}

static kvs_node_rows g_units[MAX_UNITS];

static size_t units_of(kvs_node_t node, const request *r, const int64_t *pages, uint64_t reuse) {
  size_t n = 0;
  kvs_error err;
  kvs_node_transfer t = {sizeof t, r->id, pages, pages_of(r->tokens), r->tokens, reuse, NULL, 0, 0};
  kvs_status s = kvs_node_request_rows(node, &t, g_units, MAX_UNITS, &n, &err);
  REQUIRE(s == KVS_OK && n <= MAX_UNITS, "request_rows of request %llu: %s: %s",
          (unsigned long long)r->id, kvs_status_name(s), err.message);
  return n;
}

/* ---- the prefill side ---- */

typedef struct totals {
  uint64_t requests, bytes, reused_bytes, wire_bytes, messages, units, hits, hit_tokens, compared;
  double seconds;
} totals;

/* The tokens the prefill side sends the next request with (0: its own). */
static uint64_t g_send_tokens = 0;

/* The prefill side's request will be refused by the decode side's verdict. */
static bool g_expect_refusal = false;

/* False when the request's send failed (a dead prefill peer): the prefill
 * node, a rank short, steps no more. */
static bool prefill_request(kvs_node_t node, kvs_comm_t link, const request *r, const int *peers,
                            const widths *w, totals *t, int kill_at) {
  kvs_error err;
  uint64_t n = pages_of(r->tokens), usable = kvs_node_usable_pages(node);
  int64_t pages[MAX_PAGES];
  /* Pages in a rotating place, so the two sides' runs differ. */
  uint64_t off = (r->id * 37) % usable;
  for (uint64_t b = 0; b < n; b++) pages[b] = (int64_t)((off + b) % usable);
  uint64_t first, tails = tail_of(r->tokens, 0, &first);
  if (kvs_node_is_leader(node)) {
    int64_t slot = -1;
    REQUIRE(kvs_node_admit(node, r->id, &slot, &err) == KVS_OK, "prefill admit %llu: %s",
            (unsigned long long)r->id, err.message);
    REQUIRE(kvs_node_bind_pages(node, r->id, pages + first, tails, &err) == KVS_OK,
            "prefill bind %llu: %s", (unsigned long long)r->id, err.message);
  }
  step(node, "prefill admit");
  size_t nu = units_of(node, r, pages, 0);
  for (size_t i = 0; i < nu; i++) {
    fill(g_units[i].address, g_units[i].bytes, unit_key(r, &g_units[i]), &g_units[i]);
  }
  if (kill_at >= 0 && (uint64_t)kill_at == r->id && g_rank == VICTIM) {
    fprintf(stderr, "pd_mpi: rank %d kills itself before sending request %llu\n", g_rank,
            (unsigned long long)r->id);
    fflush(stderr);
    raise(SIGKILL);
  }
  kvs_node_transfer tr = {sizeof tr, r->id, pages, n, r->tokens, 0, peers, SIDE_RANKS, 0};
  if (g_send_tokens != 0) tr.tokens = g_send_tokens;
  kvs_node_transfer_report rep;
  memset(&rep, 0, sizeof rep);
  rep.size = sizeof rep;
  kvs_status s = kvs_node_send_request(node, link, &tr, &rep, &err);
  if (g_send_tokens != 0) {
    /* The decode side refused the request in its header (the two sides'
     * tokens differ): nothing moved, and the send must say so. */
    CHECK(s != KVS_OK && rep.bytes == 0,
          "send of request %llu with %llu tokens to decode ranks that expect %llu: %s (%llu bytes "
          "sent, %llu units): %s",
          (unsigned long long)r->id, (unsigned long long)tr.tokens, (unsigned long long)r->tokens,
          kvs_status_name(s), (unsigned long long)rep.bytes, (unsigned long long)rep.units,
          s == KVS_OK ? "KVS_OK" : err.message);
    fprintf(stderr, "pd_mpi: rank %d: send of request %llu refused by the decode side: %s: %s\n",
            g_rank, (unsigned long long)r->id, kvs_status_name(s),
            s == KVS_OK ? "(no message)" : err.message);
  } else if (kill_at >= 0 && (uint64_t)kill_at == r->id) {
    /* A prefill peer is dead: the send fails within the link's deadline. */
    CHECK(s != KVS_OK, "send of request %llu succeeded with prefill rank %d dead",
          (unsigned long long)r->id, VICTIM);
    fprintf(stderr, "pd_mpi: rank %d: send of request %llu failed: %s: %s\n", g_rank,
            (unsigned long long)r->id, kvs_status_name(s), err.message);
    return false;
  } else {
    if (g_expect_refusal) {
      /* A planted request: the rows went, the decode side's verdict says
       * it refused them, and the send says so. */
      CHECK(s == KVS_ERR_CORRUPT && strstr(err.message, "the decode side refused it") != NULL,
            "send of planted request %llu: %s: %s", (unsigned long long)r->id, kvs_status_name(s),
            s == KVS_OK ? "KVS_OK" : err.message);
    } else {
      REQUIRE(s == KVS_OK, "send of request %llu: %s: %s", (unsigned long long)r->id,
              kvs_status_name(s), err.message);
    }
    const kvs_device_layout *l = w->layout;
    uint64_t want = SIDE_RANKS * expected_bytes(w, r->tokens, 0, l->first_layer, l->end_layer);
    CHECK(rep.bytes + rep.reused_bytes == want,
          "request %llu (%llu tokens): sent %llu bytes and reuse saved %llu: %llu, the rule says "
          "%llu",
          (unsigned long long)r->id, (unsigned long long)r->tokens, (unsigned long long)rep.bytes,
          (unsigned long long)rep.reused_bytes, (unsigned long long)(rep.bytes + rep.reused_bytes),
          (unsigned long long)want);
    t->bytes += rep.bytes;
    t->reused_bytes += rep.reused_bytes;
    t->wire_bytes += rep.wire_bytes;
    t->messages += rep.messages;
    t->units += rep.units;
    t->seconds += rep.seconds;
    t->requests++;
  }
  if (kvs_node_is_leader(node)) {
    REQUIRE(kvs_node_free_pages(node, pages + first, tails, &err) == KVS_OK, "prefill free: %s",
            err.message);
    REQUIRE(kvs_node_finish(node, r->id, &err) == KVS_OK, "prefill finish: %s", err.message);
  }
  step(node, "prefill retire");
  return true;
}

/* ---- the decode side ---- */

typedef struct allocator {
  int64_t *free;
  size_t n;
} allocator;

static void give(allocator *a, int64_t page) { a->free[a->n++] = page; }

static int descending(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? 1 : a > b ? -1 : 0;
}

/* The leader's decision, broadcast to the decode ranks. */
typedef struct decision {
  int64_t pages[MAX_PAGES];
  uint64_t reuse;
} decision;

/* Leader: room for a request of n pages (n fresh pages, two window pages),
 * by eviction; the caller steps after. */
static void make_room(kvs_node_t node, allocator *a, uint64_t n) {
  kvs_error err;
  uint64_t droppable = 0, free_win = kvs_node_free_window_pages(node, &droppable);
  if (a->n >= n && free_win >= 2) return;
  int64_t freed[MAX_PAGES * 4];
  size_t n_freed = 0;
  uint64_t need = a->n >= n ? 0 : n - a->n, need_win = free_win >= 2 ? 0 : 2 - free_win;
  REQUIRE(kvs_node_prefix_evict(node, need, need_win, freed, sizeof freed / sizeof *freed, &n_freed,
                                &err) == KVS_OK,
          "evict: %s", err.message);
  for (size_t i = 0; i < n_freed; i++) give(a, freed[i]);
  free_win = kvs_node_free_window_pages(node, &droppable);
  REQUIRE(a->n >= n && free_win >= 2,
          "no room after eviction: %zu free pages for %llu, %llu free window pages", a->n,
          (unsigned long long)n, (unsigned long long)free_win);
}

/* Leader: match, acquire, pages past the hit, import_admit. */
static void decode_admit(kvs_node_t node, allocator *a, const request *r, decision *d, totals *t) {
  kvs_error err;
  uint64_t n = pages_of(r->tokens), full = r->tokens / PAGE;
  memset(d, 0, sizeof *d);
  kvs_node_prefix_hit hit;
  memset(&hit, 0, sizeof hit);
  hit.size = sizeof hit;
  int64_t hit_pages[MAX_PAGES];
  if (full > 0) {
    REQUIRE(
        kvs_node_prefix_match(node, r->keys, full, r->tokens, 0, &hit, hit_pages, &err) == KVS_OK,
        "match %llu: %s", (unsigned long long)r->id, err.message);
  }
  if (hit.hit_tokens > 0) {
    REQUIRE(!hit.reprefill && hit.host_pages == 0 && hit.hit_tokens % PAGE == 0 &&
                hit.hit_tokens < r->tokens,
            "request %llu: a hit of %llu tokens that is not exact", (unsigned long long)r->id,
            (unsigned long long)hit.hit_tokens);
    REQUIRE(kvs_node_prefix_acquire(node, r->id, &hit, &err) == KVS_OK, "acquire %llu: %s",
            (unsigned long long)r->id, err.message);
    d->reuse = hit.hit_tokens;
    t->hits++;
    t->hit_tokens += hit.hit_tokens;
  }
  for (uint64_t b = 0; b < n; b++) {
    d->pages[b] = b < d->reuse / PAGE ? hit_pages[b] : a->free[--a->n];
  }
  int64_t slot = -1;
  kvs_node_transfer tr = {sizeof tr, r->id, d->pages, n, r->tokens, d->reuse, NULL, 0, 0};
  kvs_status s = kvs_node_import_admit(node, &tr, &slot, &err);
  REQUIRE(s == KVS_OK, "import_admit %llu (%llu tokens, reuse %llu): %s: %s",
          (unsigned long long)r->id, (unsigned long long)r->tokens, (unsigned long long)d->reuse,
          kvs_status_name(s), err.message);
}

/* Leader, after a received request: its full pages into the cache (tail
 * pages keep their window binding as their block's tail), the rest back. */
static void decode_retire(kvs_node_t node, allocator *a, const request *r, const decision *d) {
  kvs_error err;
  uint64_t n = pages_of(r->tokens), full = r->tokens / PAGE, h = d->reuse / PAGE;
  uint8_t taken[MAX_PAGES] = {0}, tails[MAX_PAGES] = {0};
  uint64_t first, nt = tail_of(r->tokens, d->reuse, &first);
  for (uint64_t b = first; b < first + nt; b++) tails[b] = 1;
  if (full > h) {
    REQUIRE(kvs_node_prefix_insert(node, r->id, r->keys + h, d->pages + h, tails + h, full - h,
                                   taken + h, &err) == KVS_OK,
            "insert %llu: %s", (unsigned long long)r->id, err.message);
  }
  REQUIRE(kvs_node_free_pages(node, d->pages + h, n - h, &err) == KVS_OK, "free %llu: %s",
          (unsigned long long)r->id, err.message);
  for (uint64_t b = h; b < n; b++) {
    if (!taken[b]) give(a, d->pages[b]);
  }
  REQUIRE(kvs_node_prefix_release(node, r->id, &err) == KVS_OK, "release %llu: %s",
          (unsigned long long)r->id, err.message);
  REQUIRE(kvs_node_finish(node, r->id, &err) == KVS_OK, "finish %llu: %s",
          (unsigned long long)r->id, err.message);
}

static bool contains(const char *s, const char *part) { return strstr(s, part) != NULL; }

typedef enum outcome { RECEIVE_OK, RECEIVE_PLANTED, RECEIVE_KILLED, RECEIVE_REFUSED } outcome;

/* The planted faults, one request each: a pool's unit-th unit (travel
 * order among decode rank 2's units of that pool) lands one unit's step
 * away. The first is the brief's: compressed_4 unit 3, layer 1's page 3. */
static const kvs_transfer_plant PLANTS[] = {
    {KVS_XFER_COMPRESSED_4, 3, 1},   {KVS_XFER_WINDOW, 0, 1},    {KVS_XFER_WINDOW, 5, 1},
    {KVS_XFER_COMPRESSED_128, 1, 1}, {KVS_XFER_INDEXER, 2, 1},   {KVS_XFER_STATE_4, 0, 1},
    {KVS_XFER_STATE_4, 1, 1},        {KVS_XFER_STATE_128, 0, 1}, {KVS_XFER_INDEX_STATE, 0, 1},
    {KVS_XFER_INDEX_STATE, 2, 1},
};
#define N_PLANTS (sizeof PLANTS / sizeof *PLANTS)
static const kvs_transfer_plant *g_plant = &PLANTS[0];

/* The reuse the next request must get (-1: any). */
static int64_t g_want_reuse = -1;

static kvs_node_prefix_counts prefix_counts(kvs_node_t node) {
  kvs_node_prefix_counts c;
  memset(&c, 0, sizeof c);
  c.size = sizeof c;
  kvs_error err;
  REQUIRE(kvs_node_prefix_stats(node, &c, &err) == KVS_OK, "prefix stats: %s", err.message);
  return c;
}

/* The unit the decode side must name for the plant among units[0..n)
 * (request_rows, travel order), and the shift that keeps the plant's
 * wrong place inside its view: the planted unit, or the unit whose place
 * the wrong rows overwrote when that one comes first in travel order (the
 * refusal names the first unit whose digest differed; both differ). */
static const kvs_node_rows *planted_unit(kvs_node_t node, size_t n, int64_t *shift) {
  static const char *const names[] = {"window",  "compressed_4", "compressed_128", "indexer",
                                      "state_4", "state_128",    "index_state"};
  uint64_t seen = 0;
  for (size_t i = 0; i < n; i++) {
    const kvs_node_rows *u = &g_units[i];
    if (strcmp(u->view, names[g_plant->pool]) != 0 || seen++ != g_plant->unit) continue;
    *shift = 1;
    for (size_t v = 0; v < kvs_node_view_count(node); v++) {
      kvs_node_view view;
      view.size = sizeof view;
      if (kvs_node_view_at(node, v, &view, NULL) != KVS_OK || strcmp(view.name, u->view) != 0) {
        continue;
      }
      const unsigned char *end = (const unsigned char *)view.data + view.bytes;
      if ((const unsigned char *)u->address + 2 * u->bytes > end) *shift = -1;
    }
    /* The bf16 units here lie `bytes` apart (transfer_rows.h's step). */
    const unsigned char *wrong = (const unsigned char *)u->address + *shift * (int64_t)u->bytes;
    for (size_t j = 0; j < i; j++) {
      if ((const unsigned char *)g_units[j].address == wrong) return &g_units[j];
    }
    return u;
  }
  return NULL;
}

static void decode_request(kvs_node_t node, MPI_Comm side, kvs_comm_t link, allocator *a,
                           const request *r, const int *peers, const widths *w, totals *t,
                           outcome mode) {
  kvs_error err;
  bool leader = kvs_node_is_leader(node);
  uint64_t n = pages_of(r->tokens);
  if (leader) make_room(node, a, n);
  step(node, "decode room");
  kvs_node_capacity before = capacity(node);
  kvs_node_prefix_counts cached = prefix_counts(node);
  decision d;
  if (leader) decode_admit(node, a, r, &d, t);
  MPI_Bcast(&d, (int)sizeof d, MPI_BYTE, 0, side);
  if (g_want_reuse >= 0) {
    CHECK(d.reuse == (uint64_t)g_want_reuse, "request %llu reuses %llu tokens, not %lld",
          (unsigned long long)r->id, (unsigned long long)d.reuse, (long long)g_want_reuse);
  }
  step(node, "decode admit");
  kvs_node_transfer tr = {sizeof tr, r->id, d.pages, n, r->tokens, d.reuse, peers, SIDE_RANKS, 0};
  kvs_node_transfer_report rep;
  memset(&rep, 0, sizeof rep);
  rep.size = sizeof rep;
  double t0 = now_s();
  kvs_status s;
  const kvs_node_rows *bad = NULL;
  kvs_node_rows bad_unit;
  kvs_transfer_plant plant = *g_plant;
  if (mode == RECEIVE_PLANTED) {
    bad = planted_unit(node, units_of(node, r, d.pages, d.reuse), &plant.shift);
    REQUIRE(bad != NULL, "request %llu has no unit %llu of pool %d", (unsigned long long)r->id,
            (unsigned long long)g_plant->unit, (int)g_plant->pool);
    bad_unit = *bad;
    bad = &bad_unit;
  }
  if (mode == RECEIVE_PLANTED && kvs_node_rank(node) == 2) {
    s = kvs_node_receive_planted(node, link, &tr, &plant, &rep, &err);
  } else {
    s = kvs_node_receive_request(node, link, &tr, &rep, &err);
  }
  double secs = now_s() - t0;
  if (mode == RECEIVE_OK) {
    REQUIRE(s == KVS_OK, "receive of request %llu (%llu tokens, reuse %llu): %s: %s",
            (unsigned long long)r->id, (unsigned long long)r->tokens, (unsigned long long)d.reuse,
            kvs_status_name(s), err.message);
    size_t lo = w->layout->first_layer, hi = w->layout->end_layer;
    uint64_t want = expected_bytes(w, r->tokens, d.reuse, lo, hi);
    uint64_t saved = expected_bytes(w, r->tokens, 0, lo, hi) - want;
    CHECK(rep.bytes == want && rep.reused_bytes == saved,
          "request %llu (%llu tokens, reuse %llu): received %llu bytes, reuse saved %llu; the "
          "rule says %llu and %llu",
          (unsigned long long)r->id, (unsigned long long)r->tokens, (unsigned long long)d.reuse,
          (unsigned long long)rep.bytes, (unsigned long long)rep.reused_bytes,
          (unsigned long long)want, (unsigned long long)saved);
    CHECK(rep.units == units_of(node, r, d.pages, d.reuse), "request %llu: %llu units received",
          (unsigned long long)r->id, (unsigned long long)rep.units);
    /* Every unit of the request, the reused prefix's included. */
    size_t nu = units_of(node, r, d.pages, 0);
    for (size_t i = 0; i < nu; i++) {
      const kvs_node_rows *u = &g_units[i];
      unsigned char *want_rows = malloc((size_t)u->bytes);
      REQUIRE(want_rows != NULL, "no memory");
      fill(want_rows, u->bytes, unit_key(r, u), u);
      CHECK(memcmp(want_rows, u->address, (size_t)u->bytes) == 0,
            "request %llu (%llu tokens, reuse %llu): its %s%s rows of layer %u (positions "
            "%llu..%llu) differ from the prefill side's",
            (unsigned long long)r->id, (unsigned long long)r->tokens, (unsigned long long)d.reuse,
            u->view, u->tail_state ? " tail-state" : "", u->layer,
            (unsigned long long)u->first_token, (unsigned long long)(u->end_token - 1));
      t->compared += u->bytes;
      free(want_rows);
    }
    t->bytes += rep.bytes;
    t->reused_bytes += rep.reused_bytes;
    t->wire_bytes += rep.wire_bytes;
    t->messages += rep.messages;
    t->units += rep.units;
    t->seconds += rep.seconds;
    t->requests++;
    if (leader) decode_retire(node, a, r, &d);
    step(node, "decode retire");
    return;
  }
  /* Refused: every decode rank, the same verdict. */
  if (mode == RECEIVE_PLANTED) {
    CHECK(s == KVS_ERR_CORRUPT, "planted request %llu: %s: %s", (unsigned long long)r->id,
          kvs_status_name(s), err.message);
    char names[160];
    snprintf(names, sizeof names, "its %s%s rows of layer %u (positions %llu..%llu)", bad->view,
             bad->tail_state ? " tail-state" : "", bad->layer, (unsigned long long)bad->first_token,
             (unsigned long long)(bad->end_token - 1));
    if (g_plant == &PLANTS[0]) {
      CHECK(strcmp(names, "its compressed_4 rows of layer 1 (positions 384..511)") == 0,
            "the first plant is compressed_4 layer 1's page 3: %s", names);
    }
    CHECK(contains(err.message, "refused on every decode rank") &&
              contains(err.message, "decode rank 2:") && contains(err.message, names),
          "the refusal names the rank and \"%s\": %s", names, err.message);
    if (kvs_node_rank(node) == 2) {
      CHECK(rep.view != NULL && strcmp(rep.view, bad->view) == 0 && rep.layer == bad->layer &&
                rep.first_token == bad->first_token && rep.end_token == bad->end_token,
            "the planted rank's report: %s layer %u positions %llu..%llu; planted: %s",
            rep.view ? rep.view : "(none)", rep.layer, (unsigned long long)rep.first_token,
            (unsigned long long)rep.end_token, names);
    }
    fprintf(stderr, "pd_mpi: rank %d: planted request %llu (shift %lld) refused: %s\n", g_rank,
            (unsigned long long)r->id, (long long)plant.shift, err.message);
  } else if (mode == RECEIVE_REFUSED) {
    CHECK(s == KVS_ERR_INVALID_ARGUMENT && contains(err.message, "refused on every decode rank") &&
              contains(err.message, "tokens"),
          "request %llu sent with other tokens: %s: %s", (unsigned long long)r->id,
          kvs_status_name(s), err.message);
    fprintf(stderr, "pd_mpi: rank %d: request %llu (other tokens) refused: %s\n", g_rank,
            (unsigned long long)r->id, err.message);
  } else {
    char peer[64];
    snprintf(peer, sizeof peer, "from rank %d", VICTIM);
    CHECK(s == KVS_ERR_TIMEOUT || s == KVS_ERR_COMM, "request %llu with a dead peer: %s: %s",
          (unsigned long long)r->id, kvs_status_name(s), err.message);
    CHECK(contains(err.message, "refused") && contains(err.message, peer),
          "the refusal names the dead peer (link rank %d): %s", VICTIM, err.message);
    CHECK(secs < 3.0 + 12.0, "the refusal took %.2f s (link deadline 3 s)", secs);
    fprintf(stderr, "pd_mpi: rank %d: request %llu refused after %.2f s: %s: %s\n", g_rank,
            (unsigned long long)r->id, secs, kvs_status_name(s), err.message);
  }
  if (leader) {
    for (uint64_t b = d.reuse / PAGE; b < n; b++) give(a, d.pages[b]);
  }
  step(node, "decode after refusal");
  kvs_node_capacity after = capacity(node);
  kvs_node_prefix_counts now = prefix_counts(node);
  CHECK(now.holds == cached.holds && now.refs == cached.refs && now.blocks == cached.blocks &&
            now.tails == cached.tails,
        "after the refusal of request %llu (reuse %llu): the prefix cache holds %llu paths, %llu "
        "refs, %llu blocks, %llu tails; before its admission %llu, %llu, %llu, %llu",
        (unsigned long long)r->id, (unsigned long long)d.reuse, (unsigned long long)now.holds,
        (unsigned long long)now.refs, (unsigned long long)now.blocks, (unsigned long long)now.tails,
        (unsigned long long)cached.holds, (unsigned long long)cached.refs,
        (unsigned long long)cached.blocks, (unsigned long long)cached.tails);
  CHECK(after.running == before.running && after.free_window_pages == before.free_window_pages,
        "after the refusal: %llu running, %llu free window pages; before the admission %llu and "
        "%llu",
        (unsigned long long)after.running, (unsigned long long)after.free_window_pages,
        (unsigned long long)before.running, (unsigned long long)before.free_window_pages);
  kvs_node_report report;
  memset(&report, 0, sizeof report);
  report.size = sizeof report;
  s = kvs_node_check(node, &report, &err);
  CHECK(s == KVS_OK, "check after the refusal: %s: %s (%s)", kvs_status_name(s), err.message,
        kvs_divergence_name(report.kind));
  if (s == KVS_OK) {
    fprintf(stderr,
            "pd_mpi: rank %d: decode node consistent after the refusal (%llu running, "
            "%llu free window pages)\n",
            g_rank, (unsigned long long)after.running, (unsigned long long)after.free_window_pages);
  }
}

int main(int argc, char **argv) {
  kvs_error err;
  int size = 0;
  const char *mode = argc > 1 ? argv[1] : "flow";
  bool kill = strcmp(mode, "kill") == 0;
  if (!kill && strcmp(mode, "flow") != 0) {
    fprintf(stderr, "usage: pd_mpi flow [REQUESTS] | pd_mpi kill K\n");
    return 2;
  }
  int kill_at = kill ? (argc > 2 ? atoi(argv[2]) : 5) : -1;
  uint64_t requests = kill ? (uint64_t)kill_at + 1 : argc > 2 ? strtoull(argv[2], NULL, 10) : 200;
  if (kvs_mpi_init(&g_rank, &size, &err) != KVS_OK) {
    fprintf(stderr, "FAIL: kvs_mpi_init: %s\n", err.message);
    return 1;
  }
  REQUIRE(size == 2 * SIDE_RANKS, "pd_mpi runs on %d ranks, not %d", 2 * SIDE_RANKS, size);
  bool prefill = g_rank < SIDE_RANKS;
  MPI_Comm side;
  MPI_Comm_split(MPI_COMM_WORLD, prefill ? 0 : 1, g_rank, &side);
  kvs_comm_t node_comm = NULL, link = NULL;
  REQUIRE(kvs_comm_mpi_from(side, 60000, &node_comm, &err) == KVS_OK, "node comm: %s", err.message);
  REQUIRE(kvs_comm_mpi_create(NULL, 0, 60000, &link, &err) == KVS_OK, "link: %s", err.message);
  MPI_Comm alive = MPI_COMM_NULL; /* kill mode: the ranks that survive */
  if (kill) {
    REQUIRE(kvs_comm_set_timeout_ms(link, 3000, &err) == KVS_OK, "%s", err.message);
    MPI_Comm_split(MPI_COMM_WORLD, g_rank == VICTIM ? MPI_UNDEFINED : 0, g_rank, &alive);
  }
  kvs_geometry g;
  uint64_t budgets[8];
  kvs_node_t node = make_node(node_comm, prefill, &g, budgets);
  widths w;
  widths_of(node, &w);
  int peers[SIDE_RANKS];
  for (int i = 0; i < SIDE_RANKS; i++) peers[i] = prefill ? SIDE_RANKS + i : i;
  allocator a = {NULL, 0};
  if (!prefill && kvs_node_is_leader(node)) {
    uint64_t usable = kvs_node_usable_pages(node);
    a.free = calloc(usable, sizeof *a.free);
    REQUIRE(a.free != NULL, "no memory");
    for (uint64_t p = usable; p-- > 0;) give(&a, (int64_t)p);
  }
  if (g_rank == 0 || g_rank == SIDE_RANKS) {
    kvs_node_capacity c = capacity(node);
    fprintf(stderr,
            "pd_mpi: %s node: %llu usable pages, %llu window pages, %llu slots, layers %zu..%zu "
            "on its leader\n",
            prefill ? "prefill" : "decode", (unsigned long long)c.usable_pages,
            (unsigned long long)kvs_node_window_pages(node), (unsigned long long)c.max_running,
            w.layout->first_layer, w.layout->end_layer - 1);
  }
  totals t;
  memset(&t, 0, sizeof t);
  uint64_t tokens = 0;
  for (uint64_t i = 0; i < requests; i++) {
    request r;
    make_request(i, &r);
    tokens += r.tokens;
    if (prefill) {
      if (!prefill_request(node, link, &r, peers, &w, &t, kill_at)) break;
    } else {
      decode_request(node, side, link, &a, &r, peers, &w, &t,
                     kill && (uint64_t)kill_at == i ? RECEIVE_KILLED : RECEIVE_OK);
    }
    if (!prefill && !kill && i % 50 == 49) {
      kvs_node_report report;
      memset(&report, 0, sizeof report);
      report.size = sizeof report;
      kvs_status s = kvs_node_check(node, &report, &err);
      CHECK(s == KVS_OK, "decode check after request %llu: %s", (unsigned long long)i, err.message);
    }
  }
  if (!kill) {
    /* Planted faults on decode rank 2, one request each. */
    const uint64_t moved = t.bytes; /* the prefill side counts the planted requests' too */
    /* Pages in ascending order from here: the first plant's page + 1 is
     * the request's next page, so unit 3 is the first that differs. */
    if (a.free != NULL) qsort(a.free, a.n, sizeof *a.free, descending);
    for (size_t i = 0; i < N_PLANTS; i++) {
      g_plant = &PLANTS[i];
      g_expect_refusal = true;
      request r;
      memset(&r, 0, sizeof r);
      r.id = 100000 + i;
      r.tokens = 1000;
      for (uint64_t b = 0; b < pages_of(r.tokens); b++) r.keys[b] = mix(mix(0x706c616e74, i), b);
      if (prefill) {
        prefill_request(node, link, &r, peers, &w, &t, -1);
      } else {
        decode_request(node, side, link, &a, &r, peers, &w, &t, RECEIVE_PLANTED);
      }
    }
    /* A refusal that gives back a hit: request 200000 (5 full pages) is
     * cached with its last page's tail; request 200001 shares its keys,
     * hits 640 tokens exactly, and its first compressed_4 unit past the
     * hit is planted. The refusal releases the hit: the cache's paths,
     * references, blocks and tails are what they were before. */
    request shared[2];
    for (int k = 0; k < 2; k++) {
      memset(&shared[k], 0, sizeof shared[k]);
      shared[k].id = 200000 + (uint64_t)k;
      shared[k].tokens = k == 0 ? 5 * PAGE : 1000;
      uint64_t chain = 0x7368617265;
      for (uint64_t b = 0; b < pages_of(shared[k].tokens); b++) {
        chain = mix(chain, b < 5 ? mix(0x5eed5, b) : mix(shared[k].id, b));
        shared[k].keys[b] = chain;
      }
    }
    const kvs_transfer_plant hit_plant = {KVS_XFER_COMPRESSED_4, 0, 1};
    for (int k = 0; k < 2; k++) {
      g_plant = &hit_plant;
      g_expect_refusal = k == 1;
      g_want_reuse = k == 0 ? 0 : 5 * PAGE;
      if (prefill) {
        prefill_request(node, link, &shared[k], peers, &w, &t, -1);
      } else {
        decode_request(node, side, link, &a, &shared[k], peers, &w, &t,
                       k == 0 ? RECEIVE_OK : RECEIVE_PLANTED);
      }
    }
    g_want_reuse = -1;
    /* The two sides disagree on a request's tokens (the prefill side sends
     * one fewer, in as many pages): every decode rank refuses it in its
     * header; the prefill ranks must learn that nothing moved. */
    request odd;
    make_request(300000, &odd);
    odd.tokens = 1000;
    g_send_tokens = odd.tokens - 1;
    if (prefill) {
      prefill_request(node, link, &odd, peers, &w, &t, -1);
    } else {
      decode_request(node, side, link, &a, &odd, peers, &w, &t, RECEIVE_REFUSED);
    }
    g_send_tokens = 0;
    /* Both sides' bytes agree: what the prefill ranks sent, the decode
     * ranks received. */
    uint64_t mine[2] = {prefill ? moved : 0, prefill ? 0 : moved}, sum[2] = {0, 0};
    MPI_Allreduce(mine, sum, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum[0] == sum[1], "the prefill ranks sent %llu bytes, the decode ranks received %llu",
          (unsigned long long)sum[0], (unsigned long long)sum[1]);
  }
  if (!prefill && kvs_node_is_leader(node)) {
    kvs_node_prefix_counts c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    kvs_node_prefix_stats(node, &c, NULL);
    printf(
        "pd_mpi: decode leader: %llu requests (%llu tokens) received, %llu hits reusing %llu "
        "tokens; %llu bytes moved (%llu on the wire, %llu messages, %llu units), %llu bytes "
        "saved by reuse, %llu bytes compared; %.3f s in receive; cache %llu blocks, %llu "
        "tails, %llu evictions\n",
        (unsigned long long)t.requests, (unsigned long long)tokens, (unsigned long long)t.hits,
        (unsigned long long)t.hit_tokens, (unsigned long long)t.bytes,
        (unsigned long long)t.wire_bytes, (unsigned long long)t.messages,
        (unsigned long long)t.units, (unsigned long long)t.reused_bytes,
        (unsigned long long)t.compared, t.seconds, (unsigned long long)c.blocks,
        (unsigned long long)c.tails, (unsigned long long)c.evictions);
  }
  if (g_failures == 0) {
    printf("pd_mpi: rank %d: ok (%s, %llu requests, %llu bytes %s, %llu saved by reuse)\n", g_rank,
           prefill ? "prefill" : "decode", (unsigned long long)t.requests,
           (unsigned long long)t.bytes, prefill ? "sent" : "received",
           (unsigned long long)t.reused_bytes);
  }
  fflush(stdout);
  fflush(stderr);
  if (kill) {
    /* A rank is dead: MPI_Finalize would wait for it. The survivors meet
     * on a communicator without it, and leave. */
    MPI_Barrier(alive);
    _exit(g_failures == 0 ? 0 : 1);
  }
  free(a.free);
  kvs_node_destroy(node);
  kvs_comm_destroy(link);
  kvs_comm_destroy(node_comm);
  MPI_Comm_free(&side);
  kvs_mpi_finalize(&err);
  return g_failures == 0 ? 0 : 1;
}

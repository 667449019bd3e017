/* The host tier's copies on the host twin, measured against the copy a
 * program would write by hand: memcpy of the same spans between the same
 * memory, in the same run. A spill is a journal entry the table applies
 * (kvs_table_apply: the journal checked, each entry's spans copied); the
 * baseline walks the spans the table reports (kvs_table_host_spans) and
 * copies each layer's run of the page with memcpy. Both touch every byte
 * once untimed first, so neither pays the first page faults. */
#include "tools/bench_tier.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "plan/device_layout.h"
#include "pool/window_pool.h"
#include "shard/table.h"
#include "tools/bench_time.h"

#define MAX_PAGES 1024u
#define ROUNDS 7

/* A host move as the pool journals it (the prefix tag, the operation at
 * bit 56, the page; the slot as operand), checked by the pool's decoder. */
static int move_entry(bool fetch, uint64_t page, uint64_t slot, kvs_journal_entry *out) {
  kvs_journal_entry e;
  e.full_page =
      (int64_t)(KVS_JOURNAL_PREFIX_TAG |
                ((uint64_t)(fetch ? KVS_PREFIX_OP_FETCH : KVS_PREFIX_OP_SPILL) << 56) | page);
  e.window_page = (int64_t)slot;
  kvs_host_move m;
  if (!kvs_window_pool_host_move_of(&e, &m) || m.fetch != fetch || m.full_page != page ||
      m.slot != slot) {
    return 1;
  }
  *out = e;
  return 0;
}

typedef struct tier_rig {
  kvs_device_layout layout;
  kvs_table_t table;
  unsigned char *base;
  kvs_table_span_rows spans[KVS_TABLE_ROW_SPANS];
  size_t n_spans;
  uint64_t slot_bytes;
  kvs_journal_entry *spills, *fetches;
} tier_rig;

static int fail(const char *what, const kvs_error *err) {
  fprintf(stderr, "kvbench: host tier: %s: %s\n", what, err != NULL ? err->message : "");
  return 1;
}

/* DSV4-Flash, fp8 rows, every layer on the rank; MAX_PAGES x 2 full pages
 * (spilled from the first half, fetched into the second), as many slots. */
static int rig_make(tier_rig *r) {
  kvs_error err;
  kvs_geometry g;
  kvs_row_widths w;
  kvs_cost_terms terms;
  kvs_pool_sizes sizes;
  memset(r, 0, sizeof *r);
  size_t layers;
  if (kvs_geometry_builtin("dsv4-flash", &g, &err) != KVS_OK) return fail("geometry", &err);
  layers = kvs_geometry_layer_count(&g);
  if (kvs_row_widths_for(&g, KVS_KV_FP8, 64, &w, &err) != KVS_OK) return fail("widths", &err);
  if (kvs_cost_terms_make(&g, 0, layers, &w, &terms, &err) != KVS_OK ||
      kvs_pool_sizes_compute_terms(2 * MAX_PAGES + 1, &terms, 0.5, 128, 64, &sizes, &err) !=
          KVS_OK ||
      kvs_device_layout_build(&g, 0, layers, &w, &sizes, NULL, &r->layout, &err) != KVS_OK) {
    return fail("layout", &err);
  }
  kvs_table_limits limits = {8, 8};
  if (kvs_table_create_host(&r->layout, &limits, &r->table, &err) != KVS_OK ||
      kvs_table_host_tier(r->table, &r->layout, MAX_PAGES, &err) != KVS_OK) {
    return fail("host table", &err);
  }
  int64_t *mapping = NULL;
  void *base = NULL;
  if (kvs_table_memory(r->table, &base, &mapping, &err) != KVS_OK) return fail("carve", &err);
  r->base = base;
  r->n_spans = kvs_table_host_spans(&r->layout, r->spans);
  r->slot_bytes = kvs_table_host_slot_bytes(&r->layout);
  r->spills = calloc(MAX_PAGES, sizeof *r->spills);
  r->fetches = calloc(MAX_PAGES, sizeof *r->fetches);
  if (r->spills == NULL || r->fetches == NULL || r->n_spans == 0) return fail("memory", NULL);
  for (uint64_t i = 0; i < MAX_PAGES; i++) {
    if (move_entry(false, i, i, &r->spills[i]) ||
        move_entry(true, MAX_PAGES + i, i, &r->fetches[i]))
      return fail("the journal's host move entries", NULL);
  }
  return 0;
}

static void rig_free(tier_rig *r) {
  kvs_table_destroy(r->table);
  free(r->spills);
  free(r->fetches);
}

/* The baseline: page i's spans into slot i (spill) or slot i's back into
 * page MAX_PAGES + i (fetch), each layer's run one memcpy. */
static void memcpy_move(const tier_rig *r, uint64_t pages, bool fetch) {
  for (uint64_t i = 0; i < pages; i++) {
    unsigned char *slot = (unsigned char *)kvs_table_host_tier_slot(r->table, i, NULL, NULL);
    uint64_t page = fetch ? MAX_PAGES + i : i;
    for (size_t s = 0; s < r->n_spans; s++) {
      const kvs_table_span_rows *sp = &r->spans[s];
      unsigned char *rows = r->base + sp->offset + page * sp->page_step;
      for (uint64_t l = 0; l < sp->count; l++) {
        if (fetch) {
          memcpy(rows + l * sp->stride, slot + l * sp->width, (size_t)sp->width);
        } else {
          memcpy(slot + l * sp->width, rows + l * sp->stride, (size_t)sp->width);
        }
      }
      slot += sp->count * sp->width;
    }
  }
}

/* The node's seal of each spilled slot (shard/node_seal.c: XXH3-64 of
 * its bytes seeded by its block's chain), taken after a spill and checked
 * before a fetch; returns a sum so the work is not optimised away. */
static uint64_t seal_slots(const tier_rig *r, uint64_t pages) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < pages; i++) {
    const unsigned char *slot = kvs_table_host_tier_slot(r->table, i, NULL, NULL);
    sum += XXH3_64bits_withSeed(slot, (size_t)r->slot_bytes, i + 1);
  }
  return sum;
}

/* The five ways over `pages` pages, interleaved round by round so each
 * sees the same machine: memcpy spill, table spill, memcpy fetch, table
 * fetch, and the seals of the spilled slots; gbps[way] from each way's
 * median round. */
static int measure(tier_rig *r, uint64_t pages, int rounds, double gbps[5]) {
  double t[5][ROUNDS];
  volatile uint64_t sink = 0;
  for (int k = 0; k <= rounds; k++) { /* round 0 touches every byte, untimed */
    for (int way = 0; way < 5; way++) {
      bool fetch = way >= 2;
      kvs_error err;
      double t0 = kvs_bench_seconds();
      if (way == 4) {
        sink += seal_slots(r, pages);
      } else if (way % 2 == 0) {
        memcpy_move(r, pages, fetch);
      } else if (kvs_table_apply(r->table, fetch ? r->fetches : r->spills, NULL, (size_t)pages,
                                 &err) != KVS_OK) {
        return fail(fetch ? "fetch" : "spill", &err);
      }
      if (k > 0) t[way][k - 1] = kvs_bench_seconds() - t0;
    }
  }
  (void)sink;
  for (int way = 0; way < 5; way++) {
    gbps[way] = (double)(pages * r->slot_bytes) / kvs_bench_median(t[way], rounds) / 1e9;
  }
  return 0;
}

static void put(json_t *results, const char *what, unsigned long long pages, double value) {
  char key[48];
  snprintf(key, sizeof key, "tier_%s_%llu", what, pages);
  json_object_set_new(results, key, json_real(value));
}

int kvs_bench_tier(json_t *results, int quick) {
  tier_rig r;
  if (rig_make(&r)) {
    rig_free(&r);
    return 1;
  }
  static const uint64_t batches[] = {64, 256, MAX_PAGES};
  size_t n_batches = quick ? 2 : 3;
  int rounds = quick ? 3 : ROUNDS;
  int failed = 0;
  for (size_t b = 0; b < n_batches && !failed; b++) {
    double g[5];
    failed = measure(&r, batches[b], rounds, g);
    if (failed) break;
    unsigned long long n = (unsigned long long)batches[b];
    put(results, "spill_gbps", n, g[1]);
    put(results, "spill_memcpy_gbps", n, g[0]);
    put(results, "spill_vs_memcpy", n, g[1] / g[0]);
    put(results, "fetch_gbps", n, g[3]);
    put(results, "fetch_memcpy_gbps", n, g[2]);
    put(results, "fetch_vs_memcpy", n, g[3] / g[2]);
    /* The seal's time as a share of the spill's copy (it reads what the
     * copy wrote once more): taken after each spill, checked before each
     * fetch. */
    put(results, "seal_gbps", n, g[4]);
    put(results, "seal_vs_spill", n, g[1] / g[4]);
  }
  if (!failed) {
    json_object_set_new(results, "tier_slot_bytes", json_integer((json_int_t)r.slot_bytes));
  }
  rig_free(&r);
  return failed;
}

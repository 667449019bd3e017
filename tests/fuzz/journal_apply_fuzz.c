/* Fuzzes the journal apply path: random journals against a mirror pool
 * whose leader has bound a few pages. Every apply either succeeds or fails
 * with the mirror exactly as it was; either way the pool keeps its
 * integrity (conservation, digest == recomputation). Errors, never
 * corruption. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/window_pool.h"

#define PAGES 16
#define WINDOW_PAGES 9
#define P 8

static uint64_t mapping_hash(const struct kvs_window_pool *pool) {
  const int64_t *map = kvs_window_pool_mapping(pool);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i <= PAGES * P; i++) h = (h ^ (uint64_t)map[i]) * 1099511628211ull;
  return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvs_pool_sizes sizes = {P, 0.5, PAGES * P, WINDOW_PAGES, WINDOW_PAGES * P, 1};
  kvs_window_pool_t pool = NULL;
  if (kvs_window_pool_create(&sizes, NULL, &pool, NULL) != KVS_OK) __builtin_trap();
  /* Seed state: the first input byte picks which pages start bound. */
  uint8_t seed = size > 0 ? data[0] : 0;
  for (uint64_t fp = 0; fp < 8; fp++) {
    if (seed & (1u << fp)) {
      int64_t locs[P];
      for (int o = 0; o < P; o++) locs[o] = (int64_t)(fp * P + (uint64_t)o);
      kvs_window_pool_alloc(pool, locs, P, NULL, NULL);
    }
  }
  if (size > 0) data++, size--;
  /* The rest: batches of entries, 5 bytes each (a length byte ends a
   * batch): full page, window page (0xff = freed, else signed). */
  kvs_journal_entry batch[64];
  size_t n = 0;
  for (size_t at = 0; at + 5 <= size; at += 5) {
    uint64_t full_page = data[at] | (uint64_t)data[at + 1] << 8;
    int8_t window = (int8_t)data[at + 2];
    batch[n].full_page = data[at + 3] & 0x80 ? full_page << 40 : full_page % (PAGES + 2);
    batch[n].window_page = window == -1 ? KVS_JOURNAL_FREED : (int64_t)window;
    n++;
    if (n == 64 || (data[at + 4] & 1)) {
      uint64_t digest = kvs_window_pool_digest(pool);
      uint64_t hash = mapping_hash(pool);
      uint64_t available = kvs_window_pool_swa_available(pool);
      kvs_error err;
      if (kvs_window_pool_apply(pool, batch, n, &err) != KVS_OK) {
        if (digest != kvs_window_pool_digest(pool) || hash != mapping_hash(pool) ||
            available != kvs_window_pool_swa_available(pool)) {
          __builtin_trap(); /* a refused journal changed the mirror */
        }
      }
      if (kvs_window_pool_check_integrity(pool, &err) != KVS_OK) __builtin_trap();
      n = 0;
    }
  }
  kvs_window_pool_destroy(pool);
  return 0;
}

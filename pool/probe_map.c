#include "pool/probe_map.h"

#include <stdlib.h>
#include <string.h>

uint64_t kvs_pow2_at_least(uint64_t v) {
  uint64_t c = 16;
  while (c < v) c <<= 1;
  return c;
}

bool kvs_probe_map_init(kvs_probe_map *map, uint64_t max_items, bool values) {
  uint64_t capacity = kvs_pow2_at_least(2 * max_items);
  map->mask = capacity - 1;
  map->item = malloc((size_t)capacity * sizeof *map->item);
  map->value = values ? calloc((size_t)capacity, sizeof *map->value) : NULL;
  if (map->item == NULL || (values && map->value == NULL)) return false;
  /* Every byte 0xff is KVS_PROBE_EMPTY in every item. */
  memset(map->item, 0xff, (size_t)capacity * sizeof *map->item);
  return true;
}

void kvs_probe_map_free(kvs_probe_map *map) {
  free(map->item);
  free(map->value);
  memset(map, 0, sizeof *map);
}

uint64_t kvs_probe_map_insert(kvs_probe_map *map, uint64_t hash, uint64_t item, uint64_t value) {
  uint64_t at = kvs_probe_start(map, hash);
  while (map->item[at] != KVS_PROBE_EMPTY) at = kvs_probe_next(map, at);
  map->item[at] = item;
  if (map->value != NULL) map->value[at] = value;
  return at;
}

/* Whether the item at j, whose probe starts at `home`, may move back into
 * the gap at i: when home is not cyclically in (i, j]. */
static bool fills_gap(uint64_t i, uint64_t j, uint64_t home) {
  return i <= j ? (home <= i || home > j) : (home <= i && home > j);
}

void kvs_probe_map_erase(kvs_probe_map *map, uint64_t at, kvs_probe_hash_fn hash, const void *ctx) {
  uint64_t gap = at;
  for (uint64_t j = kvs_probe_next(map, gap); map->item[j] != KVS_PROBE_EMPTY;
       j = kvs_probe_next(map, j)) {
    if (fills_gap(gap, j, kvs_probe_start(map, hash(ctx, map->item[j])))) {
      map->item[gap] = map->item[j];
      if (map->value != NULL) map->value[gap] = map->value[j];
      gap = j;
    }
  }
  map->item[gap] = KVS_PROBE_EMPTY;
}

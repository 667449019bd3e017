/* The pool's one hash map: open addressing with linear probing, deletion by
 * backward shift (no tombstones), a power-of-two capacity at least twice
 * the most items it will hold, so an empty position always ends a probe
 * and probes stay short. It holds 64-bit items (and, when asked, a 64-bit
 * value beside each) and knows nothing of what they mean: the caller
 * hashes, and where an item names one of its records (a prefix node, a
 * host slot) the caller matches the record against its key. The prefix
 * index's (parent, key) -> node map and its request -> hold map, the host
 * tier's chain -> slot map and the request -> slot lookup all use it.
 * Private to //pool. */
#ifndef KVS_POOL_PROBE_MAP_H
#define KVS_POOL_PROBE_MAP_H

#include <stdbool.h>
#include <stdint.h>

/* An empty position's item (no caller stores it), and a position that is
 * not (a lookup that found nothing). */
#define KVS_PROBE_EMPTY UINT64_MAX
#define KVS_PROBE_NONE UINT64_MAX

typedef struct kvs_probe_map {
  uint64_t mask;   /* capacity - 1 */
  uint64_t *item;  /* per position: an item, or KVS_PROBE_EMPTY */
  uint64_t *value; /* per position: the item's value; NULL in a map without */
} kvs_probe_map;

/* The hash an item was inserted under, from the caller's own tables (ctx):
 * what a backward shift needs to move the items after a gap. */
typedef uint64_t (*kvs_probe_hash_fn)(const void *ctx, uint64_t item);

/* The least power of two at least v, and at least 16. */
uint64_t kvs_pow2_at_least(uint64_t v);

/* An empty map for at most max_items items, with a value beside each when
 * `values`. false when out of memory: what was allocated is left for
 * kvs_probe_map_free. */
bool kvs_probe_map_init(kvs_probe_map *map, uint64_t max_items, bool values);
void kvs_probe_map_free(kvs_probe_map *map);

/* A probe for `hash` visits kvs_probe_start, then kvs_probe_next of each
 * position, until it finds what it looks for or an empty position. */
static inline uint64_t kvs_probe_start(const kvs_probe_map *map, uint64_t hash) {
  return hash & map->mask;
}
static inline uint64_t kvs_probe_next(const kvs_probe_map *map, uint64_t at) {
  return (at + 1) & map->mask;
}

/* The position of `item` (inserted under `hash`), or KVS_PROBE_NONE: for a
 * map whose items are their own keys. */
static inline uint64_t kvs_probe_map_find(const kvs_probe_map *map, uint64_t hash, uint64_t item) {
  for (uint64_t at = kvs_probe_start(map, hash); map->item[at] != KVS_PROBE_EMPTY;
       at = kvs_probe_next(map, at)) {
    if (map->item[at] == item) return at;
  }
  return KVS_PROBE_NONE;
}

/* Puts `item` (with `value`, in a map with values) at the first empty
 * position of its probe and returns that position. The caller has made
 * sure it is not in the map and that the map has room. */
uint64_t kvs_probe_map_insert(kvs_probe_map *map, uint64_t hash, uint64_t item, uint64_t value);

/* Empties position `at` and shifts the items after it back over the gap,
 * so every item stays reachable from where its probe starts. */
void kvs_probe_map_erase(kvs_probe_map *map, uint64_t at, kvs_probe_hash_fn hash, const void *ctx);

#endif /* KVS_POOL_PROBE_MAP_H */

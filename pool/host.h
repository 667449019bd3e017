/* The prefix index's host tier: host slots, each holding one full page's
 * rows that left the GPU index, named by its chain (the hash of every key
 * from the root: a slot is found from a prompt's keys alone, and only
 * under the same prefix), reused least recently used first. A leaf: the
 * prefix index (prefix.h) owns it and replays its spill and fetch entries
 * here; it knows nothing of the index's nodes or of the pool. Private to
 * //pool (pool_internal.h's rule: it includes only the public headers and
 * the probe map). */
#ifndef KVS_POOL_HOST_H
#define KVS_POOL_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "pool/probe_map.h"

typedef struct kvs_host_rec {
  uint64_t chain;
  uint64_t used_at;   /* the index's clock when it was spilled or fetched */
  int32_t prev, next; /* least recently used first */
  uint8_t used;
} kvs_host_rec;

typedef struct kvs_pool_host {
  uint64_t n; /* slots; 0: no host tier */
  kvs_host_rec *rec;
  kvs_probe_map map; /* chain -> slot: items are slots, hashed by their chain */
  int32_t head, tail;
  uint64_t used;
  uint64_t spills, fetches, drops;
  uint64_t digest;
} kvs_pool_host;

/* The chain of a child with key under a node of chain parent (the root:
 * KVS_PREFIX_ROOT_CHAIN). */
#define KVS_PREFIX_ROOT_CHAIN UINT64_C(0x6b76736861726421)
uint64_t kvs_prefix_chain(uint64_t parent_chain, uint64_t key);

/* Apply refuses (changing nothing) or applies; undo reverses an applied
 * entry from what apply saved. */
kvs_status kvs_pool_host_init(kvs_pool_host *host, uint64_t slots, kvs_error *err);
void kvs_pool_host_free(kvs_pool_host *host);
int32_t kvs_pool_host_find(const kvs_pool_host *host, uint64_t chain);
/* The slot a spill takes: a free one, else the least recently used but
 * the slots keep[0..n_keep) names (ascending; a hit about to fetch from
 * them), -1 when every used slot is kept. */
int32_t kvs_pool_host_victim(const kvs_pool_host *host, const uint64_t *keep, size_t n_keep);
kvs_status kvs_pool_host_spill(kvs_pool_host *host, uint64_t slot, uint64_t chain, uint64_t clock,
                               kvs_host_rec *saved, kvs_error *err);
kvs_status kvs_pool_host_fetch(kvs_pool_host *host, uint64_t slot, uint64_t chain, uint64_t clock,
                               kvs_host_rec *saved, kvs_error *err);
/* A block read back from a write-through tier (the disk tier, which keeps
 * its copy): slot's record becomes the most recently used. Undone as a
 * fetch (kvs_pool_host_undo with spill false). */
kvs_status kvs_pool_host_touch(kvs_pool_host *host, uint64_t slot, uint64_t chain, uint64_t clock,
                               kvs_host_rec *saved, kvs_error *err);
/* Fills an empty tier's slots [0, n) with chains[0..n) in that order
 * (least recently used first), outside the journal: a disk tier found again
 * at creation, the same list on every rank. */
kvs_status kvs_pool_host_seed(kvs_pool_host *host, const uint64_t *chains, size_t n,
                              kvs_error *err);
void kvs_pool_host_undo(kvs_pool_host *host, uint64_t slot, bool spill, const kvs_host_rec *saved);
uint64_t kvs_pool_host_digest_range(const kvs_pool_host *host, uint64_t first, uint64_t end);
kvs_status kvs_pool_host_check(const kvs_pool_host *host, kvs_error *err);

#endif /* KVS_POOL_HOST_H */

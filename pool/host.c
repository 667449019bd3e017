/* The prefix cache's host tier: full pages the GPU index evicts move to a
 * fixed number of host slots instead of being lost, and a later prompt
 * whose keys continue past the GPU index finds them there by chain (the
 * hash of every key from the root), fetches them back into fresh GPU
 * pages and re-prefills one window. Slots are reused least recently used
 * first. Only the leader chooses slots; a spill or fetch is a journal
 * entry every rank replays (prefix_ops.c), so every rank's slots hold the
 * same chains, and the digest covers them one unit per slot. */
#include "pool/host.h"

#include <stdlib.h>
#include <string.h>

#include "core/mix.h"
#include "pool/window_pool.h"

uint64_t kvs_prefix_chain(uint64_t parent_chain, uint64_t key) {
  return kvs_splitmix64_finalise(kvs_mix64(parent_chain, key));
}

static uint64_t slot_term(uint64_t slot, const kvs_host_rec *r) {
  if (!r->used) return 0;
  return kvs_splitmix64_finalise(kvs_mix64(slot + 0x486f7374, r->chain));
}

kvs_status kvs_pool_host_init(kvs_pool_host *host, uint64_t slots, kvs_error *err) {
  memset(host, 0, sizeof *host);
  host->head = host->tail = -1;
  if (slots == 0) return KVS_OK;
  if (slots >= KVS_HOST_SLOTS_LIMIT) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a host tier holds fewer than 2^30 pages, %llu asked",
                         (unsigned long long)slots);
  }
  host->rec = calloc((size_t)slots, sizeof *host->rec);
  bool map = kvs_probe_map_init(&host->map, slots, false);
  if (host->rec == NULL || !map) {
    kvs_pool_host_free(host);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %llu-page host tier index",
                         (unsigned long long)slots);
  }
  for (uint64_t i = 0; i < slots; i++) host->rec[i].prev = host->rec[i].next = -1;
  host->n = slots;
  return KVS_OK;
}

void kvs_pool_host_free(kvs_pool_host *host) {
  free(host->rec);
  kvs_probe_map_free(&host->map);
  memset(host, 0, sizeof *host);
  host->head = host->tail = -1;
}

/* ---- chain -> slot ---- */

/* The map's items are slots, hashed by the chain they hold. */
static uint64_t slot_hash(const void *ctx, uint64_t slot) {
  const kvs_pool_host *host = ctx;
  return kvs_splitmix64_finalise(host->rec[slot].chain);
}

int32_t kvs_pool_host_find(const kvs_pool_host *host, uint64_t chain) {
  if (host->n == 0) return -1;
  const kvs_probe_map *map = &host->map;
  for (uint64_t at = kvs_probe_start(map, kvs_splitmix64_finalise(chain));
       map->item[at] != KVS_PROBE_EMPTY; at = kvs_probe_next(map, at)) {
    if (host->rec[map->item[at]].chain == chain) return (int32_t)map->item[at];
  }
  return -1;
}

static void map_insert(kvs_pool_host *host, int32_t slot) {
  kvs_probe_map_insert(&host->map, slot_hash(host, (uint64_t)slot), (uint64_t)slot, 0);
}

static void map_erase(kvs_pool_host *host, int32_t slot) {
  uint64_t at = kvs_probe_map_find(&host->map, slot_hash(host, (uint64_t)slot), (uint64_t)slot);
  kvs_probe_map_erase(&host->map, at, slot_hash, host);
}

/* ---- least recently used order ---- */

static void lru_remove(kvs_pool_host *host, int32_t s) {
  kvs_host_rec *r = &host->rec[s];
  if (r->prev >= 0) {
    host->rec[r->prev].next = r->next;
  } else {
    host->head = r->next;
  }
  if (r->next >= 0) {
    host->rec[r->next].prev = r->prev;
  } else {
    host->tail = r->prev;
  }
  r->prev = r->next = -1;
}

/* In used_at order from the tail (a new use goes last; an undo puts a
 * slot back where its stamp belongs). */
static void lru_insert(kvs_pool_host *host, int32_t s) {
  kvs_host_rec *r = &host->rec[s];
  int32_t after = host->tail;
  while (after >= 0 && host->rec[after].used_at > r->used_at) after = host->rec[after].prev;
  int32_t next = after >= 0 ? host->rec[after].next : host->head;
  r->prev = after;
  r->next = next;
  if (after >= 0) {
    host->rec[after].next = s;
  } else {
    host->head = s;
  }
  if (next >= 0) {
    host->rec[next].prev = s;
  } else {
    host->tail = s;
  }
}

static bool kept(const uint64_t *keep, size_t n_keep, int32_t slot) {
  size_t lo = 0, hi = n_keep;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (keep[mid] == (uint64_t)slot) return true;
    if (keep[mid] < (uint64_t)slot) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return false;
}

int32_t kvs_pool_host_victim(const kvs_pool_host *host, const uint64_t *keep, size_t n_keep) {
  if (host->n == 0) return -1;
  /* Slots fill in order and are only freed again by undoing the latest
   * spill into a fresh one, so the used slots are always [0, used). */
  if (host->used < host->n) return (int32_t)host->used;
  int32_t s = host->head;
  while (s >= 0 && kept(keep, n_keep, s)) s = host->rec[s].next;
  return s;
}

/* ---- the two operations and their undo ---- */

static kvs_status check_slot(const kvs_pool_host *host, uint64_t slot, const char *what,
                             kvs_error *err) {
  if (host->n == 0) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "prefix entry %s a host slot; this rank's pool has no host tier", what);
  }
  if (slot >= host->n) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "prefix entry %s host slot %llu, past the tier's %llu", what,
                         (unsigned long long)slot, (unsigned long long)host->n);
  }
  return KVS_OK;
}

kvs_status kvs_pool_host_spill(kvs_pool_host *host, uint64_t slot, uint64_t chain, uint64_t clock,
                               kvs_host_rec *saved, kvs_error *err) {
  kvs_status status = check_slot(host, slot, "spills into", err);
  if (status != KVS_OK) return status;
  int32_t s = (int32_t)slot;
  int32_t holder = kvs_pool_host_find(host, chain);
  if (holder >= 0 && holder != s) {
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "prefix entry spills a block into host slot %d, but slot %d holds it "
                         "already",
                         s, holder);
  }
  kvs_host_rec *r = &host->rec[s];
  if (holder == s) {
    /* Its own copy, evicted again: the slot becomes the most recent (the
     * rows are the same; the tables copy them anyway). */
    *saved = *r;
    lru_remove(host, s);
    r->used_at = clock;
    lru_insert(host, s);
    host->spills++;
    return KVS_OK;
  }
  if (!r->used && slot != host->used) {
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "prefix entry spills into host slot %d, but the tier fills slot %llu "
                         "next",
                         s, (unsigned long long)host->used);
  }
  *saved = *r;
  host->digest -= slot_term(slot, r);
  if (r->used) {
    map_erase(host, s);
    lru_remove(host, s);
    host->drops++;
  } else {
    host->used++;
  }
  r->used = 1;
  r->chain = chain;
  r->used_at = clock;
  map_insert(host, s);
  lru_insert(host, s);
  host->digest += slot_term(slot, r);
  host->spills++;
  return KVS_OK;
}

kvs_status kvs_pool_host_fetch(kvs_pool_host *host, uint64_t slot, uint64_t chain, uint64_t clock,
                               kvs_host_rec *saved, kvs_error *err) {
  kvs_status status = check_slot(host, slot, "fetches from", err);
  if (status != KVS_OK) return status;
  kvs_host_rec *r = &host->rec[slot];
  if (!r->used || r->chain != chain) {
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "prefix entry fetches a block from host slot %llu, which holds %s",
                         (unsigned long long)slot, r->used ? "another block" : "nothing");
  }
  *saved = *r;
  /* The block is on the GPU again: its slot is kept but goes first when a
   * full tier takes one (the least recently used end, at the head's
   * stamp), so a full tier holds each block once; until then an eviction
   * finds the copy there. */
  int32_t s = (int32_t)slot;
  lru_remove(host, s);
  (void)clock;
  r->used_at = host->head >= 0 ? host->rec[host->head].used_at : r->used_at;
  r->prev = -1;
  r->next = host->head;
  if (host->head >= 0) {
    host->rec[host->head].prev = s;
  } else {
    host->tail = s;
  }
  host->head = s;
  host->fetches++;
  return KVS_OK;
}

kvs_status kvs_pool_host_touch(kvs_pool_host *host, uint64_t slot, uint64_t chain, uint64_t clock,
                               kvs_host_rec *saved, kvs_error *err) {
  kvs_status status = check_slot(host, slot, "reads back", err);
  if (status != KVS_OK) return status;
  kvs_host_rec *r = &host->rec[slot];
  if (!r->used || r->chain != chain) {
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "prefix entry reads a block back from slot %llu, which holds %s",
                         (unsigned long long)slot, r->used ? "another block" : "nothing");
  }
  *saved = *r;
  lru_remove(host, (int32_t)slot);
  r->used_at = clock;
  lru_insert(host, (int32_t)slot);
  host->fetches++;
  return KVS_OK;
}

kvs_status kvs_pool_host_seed(kvs_pool_host *host, const uint64_t *chains, size_t n,
                              kvs_error *err) {
  if (host->used != 0 || n > host->n) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "seeding %zu blocks into a tier of %llu slots holding %llu", n,
                         (unsigned long long)host->n, (unsigned long long)host->used);
  }
  for (size_t i = 0; i < n; i++) {
    if (kvs_pool_host_find(host, chains[i]) >= 0) {
      kvs_host_rec none = {0, 0, -1, -1, 0};
      for (size_t j = i; j-- > 0;) kvs_pool_host_undo(host, j, true, &none);
      host->spills = 0;
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "block chain %016llx is seeded twice",
                           (unsigned long long)chains[i]);
    }
    kvs_host_rec saved;
    kvs_status status = kvs_pool_host_spill(host, i, chains[i], 0, &saved, err);
    if (status != KVS_OK) return status; /* checked above: unreachable */
  }
  host->spills = 0; /* found, not written */
  return KVS_OK;
}

void kvs_pool_host_undo(kvs_pool_host *host, uint64_t slot, bool spill, const kvs_host_rec *saved) {
  int32_t s = (int32_t)slot;
  kvs_host_rec *r = &host->rec[s];
  lru_remove(host, s);
  if (!spill || (saved->used && saved->chain == r->chain)) {
    r->used_at = saved->used_at;
    lru_insert(host, s);
    if (spill) {
      host->spills--;
    } else {
      host->fetches--;
    }
    return;
  }
  host->digest -= slot_term(slot, r);
  map_erase(host, s);
  host->spills--;
  r->used = saved->used;
  r->chain = saved->chain;
  r->used_at = saved->used_at;
  if (r->used) {
    map_insert(host, s);
    lru_insert(host, s);
    host->drops--;
  } else {
    host->used--;
  }
  host->digest += slot_term(slot, r);
}

/* ---- digest and integrity ---- */

uint64_t kvs_pool_host_digest_range(const kvs_pool_host *host, uint64_t first, uint64_t end) {
  if (end > host->n) end = host->n;
  uint64_t d = 0;
  for (uint64_t s = first; s < end; s++) d += slot_term(s, &host->rec[s]);
  return d;
}

kvs_status kvs_pool_host_check(const kvs_pool_host *host, kvs_error *err) {
  if (host->n == 0) return KVS_OK;
  uint64_t used = 0, listed = 0;
  for (uint64_t s = 0; s < host->n; s++) {
    const kvs_host_rec *r = &host->rec[s];
    if ((s < host->used) != (r->used != 0)) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "host slot %llu is %s, but the tier's %llu used slots are its first",
                           (unsigned long long)s, r->used ? "used" : "free",
                           (unsigned long long)host->used);
    }
    if (!r->used) continue;
    used++;
    if (kvs_pool_host_find(host, r->chain) != (int32_t)s) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "host slot %llu holds a block its chain map does not find there",
                           (unsigned long long)s);
    }
  }
  for (int32_t s = host->head; s >= 0; s = host->rec[s].next) {
    if (!host->rec[s].used || ++listed > used ||
        (host->rec[s].next >= 0 && host->rec[host->rec[s].next].used_at < host->rec[s].used_at)) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "the host tier's LRU list is broken at slot %d (free, a cycle, or out "
                           "of order)",
                           s);
    }
  }
  if (used != host->used || listed != used) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the host tier counts %llu used slots; %llu are used and %llu listed",
                         (unsigned long long)host->used, (unsigned long long)used,
                         (unsigned long long)listed);
  }
  uint64_t d = kvs_pool_host_digest_range(host, 0, host->n);
  if (d != host->digest) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the host tier's digest %016llx is not its slots' %016llx",
                         (unsigned long long)host->digest, (unsigned long long)d);
  }
  return KVS_OK;
}

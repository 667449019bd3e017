/* Request slots of the window pool: where per-request compress-state rings
 * live. A slot is bound to one running request by the leader's allocator,
 * journaled, replayed by followers, folded into the binding digest after
 * the full pages, and checked with the pages. Slot counts are small (max
 * running + 1), so lookups scan. */
#include <stdlib.h>
#include <string.h>

#include "core/window_pool_internal.h"

#define SLOT_HASH_EMPTY UINT64_MAX
#define SLOT_HASH_GONE (UINT64_MAX - 1)

/* ---- request -> slot hash ---- */

static uint64_t hash_of(uint64_t request) {
  request ^= request >> 33;
  request *= 0xff51afd7ed558ccdull;
  request ^= request >> 33;
  return request;
}

/* The probe index holding request, or the capacity when it is absent. */
static uint64_t hash_find(const struct kvs_window_pool *pool, uint64_t request) {
  uint64_t i = hash_of(request) & pool->hash_mask;
  for (uint64_t n = 0; n <= pool->hash_mask; n++, i = (i + 1) & pool->hash_mask) {
    if (pool->hash_key[i] == request) return i;
    if (pool->hash_key[i] == SLOT_HASH_EMPTY) break;
  }
  return pool->hash_mask + 1;
}

static void hash_put(struct kvs_window_pool *pool, uint64_t request, uint64_t slot) {
  uint64_t at = hash_find(pool, request);
  if (at <= pool->hash_mask) {
    pool->hash_slot[at] = slot;
    return;
  }
  uint64_t i = hash_of(request) & pool->hash_mask;
  while (pool->hash_key[i] != SLOT_HASH_EMPTY && pool->hash_key[i] != SLOT_HASH_GONE) {
    i = (i + 1) & pool->hash_mask;
  }
  if (pool->hash_key[i] == SLOT_HASH_GONE) pool->hash_gone--;
  pool->hash_key[i] = request;
  pool->hash_slot[i] = slot;
}

/* Rebuilds the hash from the slot table: drops every tombstone. */
static void hash_rebuild(struct kvs_window_pool *pool) {
  for (uint64_t i = 0; i <= pool->hash_mask; i++) pool->hash_key[i] = SLOT_HASH_EMPTY;
  pool->hash_gone = 0;
  for (uint64_t s = 0; s + 1 < pool->n_req_slots; s++) {
    if (pool->slot_request[s] >= 0) hash_put(pool, (uint64_t)pool->slot_request[s], s);
  }
}

/* Removes request's entry if it names this slot (a raw swap may have
 * pointed it elsewhere already). */
static void hash_drop(struct kvs_window_pool *pool, uint64_t request, uint64_t slot) {
  uint64_t at = hash_find(pool, request);
  if (at > pool->hash_mask || pool->hash_slot[at] != slot) return;
  pool->hash_key[at] = SLOT_HASH_GONE;
  if (++pool->hash_gone > (pool->hash_mask + 1) / 4) hash_rebuild(pool);
}

uint64_t kvs_slot_digest_term(uint64_t slot, uint64_t request) {
  /* A different seed from page terms: slot s and full page s never cancel. */
  return kvs_binding_digest_term(slot ^ 0x736c6f7473000000ull, request + 0x5bd1e995ull);
}

kvs_status kvs_pool_slots_init(struct kvs_window_pool *pool, kvs_state_rings rings,
                               uint64_t n_req_slots, kvs_error *err) {
  pool->state_rings = rings;
  pool->n_req_slots = n_req_slots;
  pool->bound_slots = 0;
  if ((rings == KVS_STATE_RINGS_PER_PAGE) != (n_req_slots == 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s state rings with %llu request slots: per-request rings need slots, "
                         "per-page rings none",
                         kvs_state_rings_name(rings), (unsigned long long)n_req_slots);
  }
  if (n_req_slots == 0) return KVS_OK;
  if (n_req_slots < 2 || n_req_slots > (UINT64_C(1) << 32)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%llu request slots: per-request rings need 2 .. 2^32 (one to bind and "
                         "the dummy)",
                         (unsigned long long)n_req_slots);
  }
  size_t n = (size_t)n_req_slots;
  pool->slot_request = malloc(n * sizeof *pool->slot_request);
  pool->slot_stamp = calloc(n, sizeof *pool->slot_stamp);
  pool->slot_overlay = calloc(n, sizeof *pool->slot_overlay);
  uint64_t capacity = 4;
  while (capacity < 2 * n_req_slots) capacity *= 2;
  pool->hash_mask = capacity - 1;
  pool->hash_key = malloc((size_t)capacity * sizeof *pool->hash_key);
  pool->hash_slot = malloc((size_t)capacity * sizeof *pool->hash_slot);
  if (pool->slot_request == NULL || pool->slot_stamp == NULL || pool->slot_overlay == NULL ||
      pool->hash_key == NULL || pool->hash_slot == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %llu request slots",
                         (unsigned long long)n_req_slots);
  }
  for (size_t i = 0; i + 1 < n; i++) pool->slot_request[i] = KVS_SLOT_FREE;
  pool->slot_request[n - 1] = KVS_SLOT_DUMMY;
  hash_rebuild(pool);
  pool->digest += kvs_slot_digest_term(n_req_slots - 1, (uint64_t)KVS_SLOT_DUMMY);
  return KVS_OK;
}

void kvs_pool_slots_free(struct kvs_window_pool *pool) {
  free(pool->slot_request);
  free(pool->slot_stamp);
  free(pool->slot_overlay);
  free(pool->hash_key);
  free(pool->hash_slot);
}

kvs_state_rings kvs_window_pool_state_rings(const struct kvs_window_pool *pool) {
  return pool->state_rings;
}

uint64_t kvs_window_pool_request_slots(const struct kvs_window_pool *pool) {
  return pool->n_req_slots;
}

uint64_t kvs_window_pool_bound_slots(const struct kvs_window_pool *pool) {
  return pool->bound_slots;
}

int64_t kvs_window_pool_slot_of(const struct kvs_window_pool *pool, uint64_t request) {
  /* Past the range a request id would alias the free and dummy markers. */
  if (request >= KVS_MAX_REQUEST_ID || pool->n_req_slots == 0) return -1;
  uint64_t at = hash_find(pool, request);
  return at > pool->hash_mask ? -1 : (int64_t)pool->hash_slot[at];
}

int64_t kvs_window_pool_slot_request(const struct kvs_window_pool *pool, uint64_t slot) {
  return slot < pool->n_req_slots ? pool->slot_request[slot] : KVS_SLOT_FREE;
}

/* The digest term of what a slot holds (0 for a free slot). */
static uint64_t term_of(uint64_t slot, int64_t request) {
  return request == KVS_SLOT_FREE ? 0 : kvs_slot_digest_term(slot, (uint64_t)request);
}

static void set_slot(struct kvs_window_pool *pool, uint64_t slot, int64_t request) {
  int64_t before = pool->slot_request[slot];
  pool->digest -= term_of(slot, before);
  pool->digest += term_of(slot, request);
  pool->slot_request[slot] = request;
  if (before >= 0) hash_drop(pool, (uint64_t)before, slot);
  if (request >= 0) hash_put(pool, (uint64_t)request, slot);
}

kvs_status kvs_window_pool_slot_bind(kvs_window_pool_t pool, uint64_t request, uint64_t *slot,
                                     kvs_error *err) {
  if (pool == NULL || slot == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "pool and slot output are required");
  }
  if (pool->n_req_slots == 0) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "this pool places its rings per window page: it has no request slots");
  }
  if (request >= KVS_MAX_REQUEST_ID) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "request %llu is not below 2^62, the journal's request range",
                         (unsigned long long)request);
  }
  int64_t held = kvs_window_pool_slot_of(pool, request);
  if (held >= 0) {
    return kvs_error_set(err, KVS_ERR_CONFLICT, "request %llu already holds request slot %lld",
                         (unsigned long long)request, (long long)held);
  }
  uint64_t free_slot = pool->n_req_slots;
  for (uint64_t s = 0; s + 1 < pool->n_req_slots && free_slot == pool->n_req_slots; s++) {
    if (pool->slot_request[s] == KVS_SLOT_FREE) free_slot = s;
  }
  if (free_slot == pool->n_req_slots) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED,
                         "all %llu request slots are bound: request %llu cannot be admitted",
                         (unsigned long long)(pool->n_req_slots - 1),
                         (unsigned long long)request);
  }
  kvs_status status = kvs_pool_journal_room(pool, 1, err);
  if (status != KVS_OK) return status;
  set_slot(pool, free_slot, (int64_t)request);
  pool->bound_slots++;
  kvs_pool_journal(pool, KVS_JOURNAL_SLOT_TAG | free_slot, (int64_t)request);
  *slot = free_slot;
  return KVS_OK;
}

kvs_status kvs_window_pool_slot_free(kvs_window_pool_t pool, uint64_t request, kvs_error *err) {
  if (pool == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "pool is NULL");
  int64_t slot = kvs_window_pool_slot_of(pool, request);
  if (slot < 0) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND, "request %llu holds no request slot",
                         (unsigned long long)request);
  }
  kvs_status status = kvs_pool_journal_room(pool, 1, err);
  if (status != KVS_OK) return status;
  set_slot(pool, (uint64_t)slot, KVS_SLOT_FREE);
  pool->bound_slots--;
  kvs_pool_journal(pool, KVS_JOURNAL_SLOT_TAG | (uint64_t)slot, KVS_JOURNAL_FREED);
  return KVS_OK;
}

kvs_status kvs_window_pool_slot_bind_raw(kvs_window_pool_t pool, uint64_t slot, int64_t request,
                                         kvs_error *err) {
  if (pool == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "pool is NULL");
  if (pool->n_req_slots == 0 || slot >= pool->n_req_slots - 1) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "request slot %llu is %s (%llu slots, the last the dummy)",
                         (unsigned long long)slot,
                         pool->n_req_slots > 0 && slot == pool->n_req_slots - 1 ? "the dummy"
                                                                                : "outside the pool",
                         (unsigned long long)pool->n_req_slots);
  }
  if (request < KVS_SLOT_FREE || request == KVS_SLOT_DUMMY) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a slot holds a request (>= 0) or -1 (free), not %lld", (long long)request);
  }
  /* The bound count follows the table, as kvs_window_pool_bind_raw's does. */
  int64_t before = pool->slot_request[slot];
  if (before == KVS_SLOT_FREE && request != KVS_SLOT_FREE) pool->bound_slots++;
  if (before != KVS_SLOT_FREE && request == KVS_SLOT_FREE) pool->bound_slots--;
  set_slot(pool, slot, request);
  return KVS_OK;
}

/* ---- replay ---- */

/* What slot s holds as replayed so far in this epoch. */
static int64_t replayed(const struct kvs_window_pool *pool, uint64_t s, uint32_t epoch) {
  return pool->slot_stamp[s] == epoch ? pool->slot_overlay[s] : pool->slot_request[s];
}

kvs_status kvs_pool_slots_validate(struct kvs_window_pool *pool, size_t i,
                                   const kvs_journal_entry *entry, uint32_t epoch,
                                   kvs_error *err) {
  uint64_t slot = entry->full_page & ~KVS_JOURNAL_SLOT_TAG;
  int64_t request = entry->window_page;
  if (pool->n_req_slots == 0 || slot >= pool->n_req_slots - 1) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "journal entry %zu names request slot %llu, %s", i,
                         (unsigned long long)slot,
                         pool->n_req_slots == 0 ? "but this pool has no request slots"
                         : slot == pool->n_req_slots - 1 ? "the reserved dummy slot"
                                                         : "outside the pool");
  }
  int64_t current = replayed(pool, slot, epoch);
  if (request >= 0) {
    if (current != KVS_SLOT_FREE) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "journal entry %zu binds request slot %llu to request %lld, but it "
                           "holds request %lld on this rank",
                           i, (unsigned long long)slot, (long long)request, (long long)current);
    }
    for (uint64_t s = 0; s + 1 < pool->n_req_slots; s++) {
      if (replayed(pool, s, epoch) == request) {
        return kvs_error_set(err, KVS_ERR_CONFLICT,
                             "journal entry %zu binds request %lld to slot %llu, but it holds "
                             "slot %llu on this rank",
                             i, (long long)request, (unsigned long long)slot,
                             (unsigned long long)s);
      }
    }
  } else if (request == KVS_JOURNAL_FREED) {
    if (current < 0) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "journal entry %zu frees request slot %llu, which is not bound on "
                           "this rank",
                           i, (unsigned long long)slot);
    }
  } else {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "journal entry %zu gives request slot %llu the value %lld; only "
                         "requests and %d (freed) exist",
                         i, (unsigned long long)slot, (long long)request, KVS_JOURNAL_FREED);
  }
  pool->slot_stamp[slot] = epoch;
  pool->slot_overlay[slot] = request >= 0 ? request : KVS_SLOT_FREE;
  return KVS_OK;
}

void kvs_pool_slots_commit(struct kvs_window_pool *pool, const kvs_journal_entry *entry) {
  uint64_t slot = entry->full_page & ~KVS_JOURNAL_SLOT_TAG;
  if (entry->window_page >= 0) {
    set_slot(pool, slot, entry->window_page);
    pool->bound_slots++;
  } else {
    set_slot(pool, slot, KVS_SLOT_FREE);
    pool->bound_slots--;
  }
}

/* ---- integrity and digest ---- */

kvs_status kvs_pool_slots_check(const struct kvs_window_pool *pool, kvs_error *err) {
  uint64_t n = pool->n_req_slots;
  if (n == 0) return KVS_OK;
  if (pool->slot_request[n - 1] != KVS_SLOT_DUMMY) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the dummy request slot %llu lost its binding: it holds %lld",
                         (unsigned long long)(n - 1), (long long)pool->slot_request[n - 1]);
  }
  uint64_t bound = 0;
  for (uint64_t s = 0; s + 1 < n; s++) {
    int64_t request = pool->slot_request[s];
    if (request == KVS_SLOT_FREE) continue;
    if (request < 0) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY, "request slot %llu holds %lld",
                           (unsigned long long)s, (long long)request);
    }
    for (uint64_t t = s + 1; t + 1 < n; t++) {
      if (pool->slot_request[t] == request) {
        return kvs_error_set(err, KVS_ERR_INTEGRITY,
                             "request %lld holds two request slots, %llu and %llu: their rings "
                             "alias",
                             (long long)request, (unsigned long long)s, (unsigned long long)t);
      }
    }
    int64_t found = kvs_window_pool_slot_of(pool, (uint64_t)request);
    if (found != (int64_t)s) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "request %lld holds request slot %llu, but its lookup names slot %lld",
                           (long long)request, (unsigned long long)s, (long long)found);
    }
    bound++;
  }
  if (bound != pool->bound_slots) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the pool counts %llu bound request slots, the table holds %llu",
                         (unsigned long long)pool->bound_slots, (unsigned long long)bound);
  }
  return KVS_OK;
}

uint64_t kvs_pool_slots_digest_range(const struct kvs_window_pool *pool, uint64_t first,
                                     uint64_t end) {
  if (end > pool->n_req_slots) end = pool->n_req_slots;
  uint64_t digest = 0;
  for (uint64_t s = first; s < end; s++) digest += term_of(s, pool->slot_request[s]);
  return digest;
}

/* ---- ring arithmetic ---- */

kvs_status kvs_request_state_loc(int64_t slot, int64_t pos, uint64_t ring, int64_t *out,
                                 kvs_error *err) {
  if (ring == 0 || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "ring size 0 or output NULL");
  }
  if (slot < 0 || pos < 0) {
    *out = -1;
    return KVS_OK;
  }
  *out = slot * (int64_t)ring + (int64_t)((uint64_t)pos % ring);
  return KVS_OK;
}

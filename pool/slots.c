/* Request slots of the window pool: where per-request compress-state rings
 * live. A slot is bound to one running request by the leader's allocator,
 * journaled, replayed by followers, folded into the binding digest after
 * the full pages, and checked with the pages. A leaf: the pool
 * (window_pool.c) owns it and does the journaling; nothing here calls the
 * pool. */
#include "pool/slots.h"

#include <stdlib.h>
#include <string.h>

#include "core/mix.h"

/* ---- request -> slot lookup ---- */

static uint64_t hash_of(uint64_t request) {
  request ^= request >> 33;
  request *= 0xff51afd7ed558ccdull;
  request ^= request >> 33;
  return request;
}

/* The lookup's items are requests, hashed by themselves. */
static uint64_t lookup_hash(const void *ctx, uint64_t request) {
  (void)ctx;
  return hash_of(request);
}

/* The lookup's position of request, or KVS_PROBE_NONE. */
static uint64_t lookup_find(const kvs_pool_slots *slots, uint64_t request) {
  return kvs_probe_map_find(&slots->lookup, hash_of(request), request);
}

static void lookup_put(kvs_pool_slots *slots, uint64_t request, uint64_t slot) {
  uint64_t at = lookup_find(slots, request);
  if (at != KVS_PROBE_NONE) {
    slots->lookup.value[at] = slot;
  } else {
    kvs_probe_map_insert(&slots->lookup, hash_of(request), request, slot);
  }
}

/* Removes request's entry if it names this slot (a raw swap may have
 * pointed it elsewhere already). */
static void lookup_drop(kvs_pool_slots *slots, uint64_t request, uint64_t slot) {
  uint64_t at = lookup_find(slots, request);
  if (at == KVS_PROBE_NONE || slots->lookup.value[at] != slot) return;
  kvs_probe_map_erase(&slots->lookup, at, lookup_hash, NULL);
}

/* ---- digest terms ---- */

uint64_t kvs_slot_digest_term(uint64_t slot, uint64_t request) {
  /* A different seed from page terms: slot s and full page s never cancel. */
  return kvs_binding_pair_term(slot ^ 0x736c6f7473000000ull, request + 0x5bd1e995ull);
}

/* The digest term of what slot `slot` holds (0 for a free slot): its
 * request, and the cached block whose tail state seeded its ring. */
static uint64_t term_of(const kvs_pool_slots *slots, uint64_t slot) {
  int64_t request = slots->request[slot];
  if (request == KVS_SLOT_FREE) return 0;
  uint64_t term = kvs_slot_digest_term(slot, (uint64_t)request);
  int64_t seed = slots->seed[slot];
  if (seed >= 0) term += kvs_binding_pair_term(slot ^ 0x7365656473000000ull, (uint64_t)seed);
  return term;
}

/* ---- lifecycle ---- */

kvs_status kvs_pool_slots_init(kvs_pool_slots *slots, kvs_state_rings rings, uint64_t n_req_slots,
                               kvs_error *err) {
  memset(slots, 0, sizeof *slots);
  slots->state_rings = rings;
  slots->n = n_req_slots;
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
  slots->request = malloc(n * sizeof *slots->request);
  slots->seed = malloc(n * sizeof *slots->seed);
  slots->stamp = calloc(n, sizeof *slots->stamp);
  slots->overlay = calloc(n, sizeof *slots->overlay);
  /* The lookup holds at most one request per slot. */
  bool lookup = kvs_probe_map_init(&slots->lookup, n_req_slots, true);
  if (slots->request == NULL || slots->seed == NULL || slots->stamp == NULL ||
      slots->overlay == NULL || !lookup) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %llu request slots",
                         (unsigned long long)n_req_slots);
  }
  for (size_t i = 0; i + 1 < n; i++) slots->request[i] = KVS_SLOT_FREE;
  for (size_t i = 0; i < n; i++) slots->seed[i] = -1;
  slots->request[n - 1] = KVS_SLOT_DUMMY;
  slots->digest = kvs_slot_digest_term(n_req_slots - 1, (uint64_t)KVS_SLOT_DUMMY);
  return KVS_OK;
}

void kvs_pool_slots_free(kvs_pool_slots *slots) {
  free(slots->request);
  free(slots->seed);
  free(slots->stamp);
  free(slots->overlay);
  kvs_probe_map_free(&slots->lookup);
}

/* ---- lookups ---- */

int64_t kvs_pool_slots_of(const kvs_pool_slots *slots, uint64_t request) {
  /* Past the range a request id would alias the free and dummy markers. */
  if (request >= KVS_MAX_REQUEST_ID || slots->n == 0) return -1;
  uint64_t at = lookup_find(slots, request);
  return at == KVS_PROBE_NONE ? -1 : (int64_t)slots->lookup.value[at];
}

int64_t kvs_pool_slots_request(const kvs_pool_slots *slots, uint64_t slot) {
  return slot < slots->n ? slots->request[slot] : KVS_SLOT_FREE;
}

/* ---- changes ---- */

kvs_status kvs_pool_slots_pick(const kvs_pool_slots *slots, uint64_t request, uint64_t *slot,
                               kvs_error *err) {
  if (slots->n == 0) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "this pool places its rings per window page: it has no request slots");
  }
  if (request >= KVS_MAX_REQUEST_ID) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "request %llu is not below 2^62, the journal's request range",
                         (unsigned long long)request);
  }
  int64_t held = kvs_pool_slots_of(slots, request);
  if (held >= 0) {
    return kvs_error_set(err, KVS_ERR_CONFLICT, "request %llu already holds request slot %lld",
                         (unsigned long long)request, (long long)held);
  }
  for (uint64_t s = 0; s + 1 < slots->n; s++) {
    if (slots->request[s] == KVS_SLOT_FREE) {
      *slot = s;
      return KVS_OK;
    }
  }
  return kvs_error_set(err, KVS_ERR_EXHAUSTED,
                       "all %llu request slots are bound: request %llu cannot be admitted",
                       (unsigned long long)(slots->n - 1), (unsigned long long)request);
}

void kvs_pool_slots_set(kvs_pool_slots *slots, uint64_t slot, int64_t request) {
  int64_t before = slots->request[slot];
  /* The bound count follows the table: free -> request binds, back frees. */
  if (before == KVS_SLOT_FREE && request != KVS_SLOT_FREE) slots->bound++;
  if (before != KVS_SLOT_FREE && request == KVS_SLOT_FREE) slots->bound--;
  slots->digest -= term_of(slots, slot);
  /* A slot that changes hands starts unseeded: its rings are cleared. */
  if (request != before) slots->seed[slot] = -1;
  slots->request[slot] = request;
  slots->digest += term_of(slots, slot);
  if (before >= 0) lookup_drop(slots, (uint64_t)before, slot);
  if (request >= 0) lookup_put(slots, (uint64_t)request, slot);
}

kvs_status kvs_pool_slots_bind_raw(kvs_pool_slots *slots, uint64_t slot, int64_t request,
                                   kvs_error *err) {
  if (slots->n == 0 || slot >= slots->n - 1) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "request slot %llu is %s (%llu slots, the last the dummy)",
                         (unsigned long long)slot,
                         slots->n > 0 && slot == slots->n - 1 ? "the dummy" : "outside the pool",
                         (unsigned long long)slots->n);
  }
  if (request < KVS_SLOT_FREE || request == KVS_SLOT_DUMMY) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a slot holds a request (>= 0) or -1 (free), not %lld",
                         (long long)request);
  }
  kvs_pool_slots_set(slots, slot, request);
  return KVS_OK;
}

/* ---- replay ---- */

void kvs_pool_slots_clear_stamps(kvs_pool_slots *slots) {
  if (slots->n > 0) memset(slots->stamp, 0, (size_t)slots->n * sizeof *slots->stamp);
}

/* What slot s holds as replayed so far in this epoch. */
static int64_t replayed(const kvs_pool_slots *slots, uint64_t s, uint32_t epoch) {
  return slots->stamp[s] == epoch ? slots->overlay[s] : slots->request[s];
}

kvs_status kvs_pool_slots_validate_seed(const kvs_pool_slots *slots, size_t i, uint64_t slot,
                                        uint32_t epoch, kvs_error *err) {
  if (slots->n == 0 || slot + 1 >= slots->n || replayed(slots, slot, epoch) < 0) {
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "journal entry %zu restores a tail state into request slot %llu, which "
                         "holds no request here (%llu slots)",
                         i, (unsigned long long)slot, (unsigned long long)slots->n);
  }
  return KVS_OK;
}

/* Whether a replayed bind of `request` to `slot` is consistent: the slot
 * free and the request holding no other slot (as replayed so far). */
static kvs_status validate_bind(const kvs_pool_slots *slots, size_t i, uint64_t slot,
                                int64_t request, uint32_t epoch, kvs_error *err) {
  int64_t current = replayed(slots, slot, epoch);
  if (current != KVS_SLOT_FREE) {
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "journal entry %zu binds request slot %llu to request %lld, but it "
                         "holds request %lld on this rank",
                         i, (unsigned long long)slot, (long long)request, (long long)current);
  }
  for (uint64_t s = 0; s + 1 < slots->n; s++) {
    if (replayed(slots, s, epoch) == request) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "journal entry %zu binds request %lld to slot %llu, but it holds "
                           "slot %llu on this rank",
                           i, (long long)request, (unsigned long long)slot, (unsigned long long)s);
    }
  }
  return KVS_OK;
}

kvs_status kvs_pool_slots_validate(kvs_pool_slots *slots, size_t i, const kvs_journal_entry *entry,
                                   uint32_t epoch, kvs_error *err) {
  uint64_t slot = entry->full_page & ~KVS_JOURNAL_SLOT_TAG;
  int64_t request = entry->window_page;
  if (slots->n == 0 || slot >= slots->n - 1) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "journal entry %zu names request slot %llu, %s",
                         i, (unsigned long long)slot,
                         slots->n == 0          ? "but this pool has no request slots"
                         : slot == slots->n - 1 ? "the reserved dummy slot"
                                                : "outside the pool");
  }
  if (request >= 0) {
    kvs_status status = validate_bind(slots, i, slot, request, epoch, err);
    if (status != KVS_OK) return status;
  } else if (request == KVS_JOURNAL_FREED) {
    if (replayed(slots, slot, epoch) < 0) {
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
  slots->stamp[slot] = epoch;
  slots->overlay[slot] = request >= 0 ? request : KVS_SLOT_FREE;
  return KVS_OK;
}

bool kvs_window_pool_slot_bind_of(const kvs_journal_entry *entry, uint64_t *slot) {
  if (entry == NULL || (entry->full_page & KVS_JOURNAL_SLOT_TAG) == 0 ||
      (entry->full_page & KVS_JOURNAL_PREFIX_TAG) == KVS_JOURNAL_PREFIX_TAG ||
      entry->window_page < 0) {
    return false;
  }
  if (slot != NULL) *slot = entry->full_page & ~KVS_JOURNAL_SLOT_TAG;
  return true;
}

void kvs_pool_slots_commit(kvs_pool_slots *slots, const kvs_journal_entry *entry) {
  uint64_t slot = entry->full_page & ~KVS_JOURNAL_SLOT_TAG;
  kvs_pool_slots_set(slots, slot, entry->window_page >= 0 ? entry->window_page : KVS_SLOT_FREE);
}

/* ---- integrity and digest ---- */

/* Slot s's request (>= 0) holds no later slot and its lookup names s. */
static kvs_status check_bound_slot(const kvs_pool_slots *slots, uint64_t s, kvs_error *err) {
  int64_t request = slots->request[s];
  for (uint64_t t = s + 1; t + 1 < slots->n; t++) {
    if (slots->request[t] == request) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "request %lld holds two request slots, %llu and %llu: their rings "
                           "alias",
                           (long long)request, (unsigned long long)s, (unsigned long long)t);
    }
  }
  int64_t found = kvs_pool_slots_of(slots, (uint64_t)request);
  if (found != (int64_t)s) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "request %lld holds request slot %llu, but its lookup names slot %lld",
                         (long long)request, (unsigned long long)s, (long long)found);
  }
  return KVS_OK;
}

kvs_status kvs_pool_slots_check(const kvs_pool_slots *slots, kvs_error *err) {
  uint64_t n = slots->n;
  if (n == 0) return KVS_OK;
  if (slots->request[n - 1] != KVS_SLOT_DUMMY) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the dummy request slot %llu lost its binding: it holds %lld",
                         (unsigned long long)(n - 1), (long long)slots->request[n - 1]);
  }
  uint64_t bound = 0;
  for (uint64_t s = 0; s + 1 < n; s++) {
    int64_t request = slots->request[s];
    if (request == KVS_SLOT_FREE) continue;
    if (request < 0) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY, "request slot %llu holds %lld",
                           (unsigned long long)s, (long long)request);
    }
    kvs_status status = check_bound_slot(slots, s, err);
    if (status != KVS_OK) return status;
    bound++;
  }
  if (bound != slots->bound) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the pool counts %llu bound request slots, the table holds %llu",
                         (unsigned long long)slots->bound, (unsigned long long)bound);
  }
  return KVS_OK;
}

uint64_t kvs_pool_slots_digest_range(const kvs_pool_slots *slots, uint64_t first, uint64_t end) {
  if (end > slots->n) end = slots->n;
  uint64_t digest = 0;
  for (uint64_t s = first; s < end; s++) digest += term_of(slots, s);
  return digest;
}

int64_t kvs_pool_slots_seed(const kvs_pool_slots *slots, uint64_t slot) {
  return slot < slots->n ? slots->seed[slot] : -1;
}

void kvs_pool_slots_set_seed(kvs_pool_slots *slots, uint64_t slot, int64_t page) {
  slots->digest -= term_of(slots, slot);
  slots->seed[slot] = page;
  slots->digest += term_of(slots, slot);
}

/* ---- ring arithmetic ---- */

kvs_status kvs_request_state_loc(int64_t slot, int64_t pos, uint64_t ring, int64_t *out,
                                 kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (ring == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "ring size 0: a request's ring holds at least one slot");
  }
  if (slot < 0 || pos < 0) {
    *out = -1;
    return KVS_OK;
  }
  /* In unsigned arithmetic, where nothing wraps unnoticed: slot x ring +
   * pos % ring must stay at or below INT64_MAX, or the location would be
   * a signed overflow (a wrong ring, or a negative "idle" location). */
  uint64_t within = (uint64_t)pos % ring;
  if ((uint64_t)slot > ((uint64_t)INT64_MAX - within) / ring) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "request slot %lld x ring %llu + position %lld %% ring does not fit in "
                         "int64: no ring location is that large",
                         (long long)slot, (unsigned long long)ring, (long long)pos);
  }
  *out = (int64_t)((uint64_t)slot * ring + within);
  return KVS_OK;
}

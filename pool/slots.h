/* The window pool's request slots, where per-request compress-state rings
 * live. A leaf of the pool: it keeps which request each slot serves, the
 * request -> slot lookup, the replay overlays and the slots' share of the
 * binding digest. It knows nothing of pages or of the journal's room and
 * calls nothing of the pool: the pool (window_pool.c) checks journal room,
 * asks the slots to change, and journals what it asked. Private to //pool
 * (pool_internal.h's rule: it includes only the public headers and the
 * probe map). */
#ifndef KVS_POOL_SLOTS_H
#define KVS_POOL_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/cost_model.h"
#include "core/status.h"
#include "pool/journal.h"
#include "pool/probe_map.h"
#include "pool/window_pool.h"

typedef struct kvs_pool_slots {
  kvs_state_rings state_rings; /* where the pool's sizes place the rings */
  uint64_t n;                  /* slots, the dummy (the last) included; 0 when rings are per page */
  uint64_t bound;              /* bound to requests, the dummy excluded */
  uint64_t digest;             /* the slots' terms of the pool digest, the dummy included */
  int64_t *request;            /* per slot: its request, KVS_SLOT_FREE or KVS_SLOT_DUMMY */
  int64_t *seed;               /* per slot: the cached block whose tail state its ring took; -1 */
  uint32_t *stamp;             /* per slot, during apply */
  int64_t *overlay;            /* a slot's request during apply */
  /* request -> slot (the item's value), so a lookup per batch row is
   * O(1) rather than a scan of every slot. */
  kvs_probe_map lookup;
} kvs_pool_slots;

/* Sets up n_req_slots slots (0 for per-page rings), all free but the dummy;
 * on failure what was allocated is left for kvs_pool_slots_free. */
kvs_status kvs_pool_slots_init(kvs_pool_slots *slots, kvs_state_rings rings, uint64_t n_req_slots,
                               kvs_error *err);
void kvs_pool_slots_free(kvs_pool_slots *slots);

/* The slot `request` holds, or -1 (also for ids past KVS_MAX_REQUEST_ID). */
int64_t kvs_pool_slots_of(const kvs_pool_slots *slots, uint64_t request);
/* What slot `slot` holds; KVS_SLOT_FREE past the slots. */
int64_t kvs_pool_slots_request(const kvs_pool_slots *slots, uint64_t slot);

/* The slot an allocator bind of `request` takes (the lowest free one),
 * changing nothing: KVS_ERR_UNSUPPORTED without slots, INVALID_ARGUMENT
 * past the request range, CONFLICT when it holds one, EXHAUSTED when none
 * is free, in that order. */
kvs_status kvs_pool_slots_pick(const kvs_pool_slots *slots, uint64_t request, uint64_t *slot,
                               kvs_error *err);
/* Makes slot `slot` hold `request` (a request or KVS_SLOT_FREE): the
 * lookup, the bound count and the digest follow. The caller has checked
 * the slot is not the dummy. */
void kvs_pool_slots_set(kvs_pool_slots *slots, uint64_t slot, int64_t request);
/* kvs_window_pool_slot_bind_raw's checks, then the set. */
kvs_status kvs_pool_slots_bind_raw(kvs_pool_slots *slots, uint64_t slot, int64_t request,
                                   kvs_error *err);

/* The cached block (its full page) whose tail state seeded slot `slot`'s
 * ring since it was bound, -1 for none; and setting it (the digest
 * follows). A slot that changes hands is unseeded. */
int64_t kvs_pool_slots_seed(const kvs_pool_slots *slots, uint64_t slot);
void kvs_pool_slots_set_seed(kvs_pool_slots *slots, uint64_t slot, int64_t page);

/* Clears the apply stamps (when the pool's epoch wraps). */
void kvs_pool_slots_clear_stamps(kvs_pool_slots *slots);
/* Pass 1 of apply for a tagged entry i: validates it against the slots as
 * replayed so far (stamped overlays of this epoch). */
kvs_status kvs_pool_slots_validate(kvs_pool_slots *slots, size_t i, const kvs_journal_entry *entry,
                                   uint32_t epoch, kvs_error *err);
/* Pass 1 for a tail-state restore into `slot` at entry i: the slot
 * holds a request as replayed so far. */
kvs_status kvs_pool_slots_validate_seed(const kvs_pool_slots *slots, size_t i, uint64_t slot,
                                        uint32_t epoch, kvs_error *err);
/* Pass 2: applies a validated tagged entry. */
void kvs_pool_slots_commit(kvs_pool_slots *slots, const kvs_journal_entry *entry);

/* Integrity of the slots; the digest is checked by the pool. */
kvs_status kvs_pool_slots_check(const kvs_pool_slots *slots, kvs_error *err);
/* The digest of slots [first, end), recomputed from the table. */
uint64_t kvs_pool_slots_digest_range(const kvs_pool_slots *slots, uint64_t first, uint64_t end);

#endif /* KVS_POOL_SLOTS_H */

/* The window pool's state, shared by its two source files (window_pool.c:
 * pages; window_pool_slots.c: request slots). Private to core/. */
#ifndef KVS_CORE_WINDOW_POOL_INTERNAL_H
#define KVS_CORE_WINDOW_POOL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/window_pool.h"

struct kvs_window_pool {
  uint64_t page;        /* P */
  uint64_t full_token;  /* mapped full locations (the sentinel row is extra) */
  uint64_t n_win_slots;
  uint64_t n_full_pages;
  uint64_t n_win_pages; /* dummy included */
  uint64_t dummy_full_base;
  uint64_t dummy_window_base;
  uint64_t chunk_budget;
  uint64_t digest;      /* sum of binding terms, dummy included */
  uint64_t bound_pages; /* bound full pages, dummy excluded */

  int64_t *map; /* full loc -> window slot, full_token + 1 rows */
  kvs_free_list_t free_list;
  kvs_journal_t journal;

  /* Scratch for validating a call before it changes anything. Stamps are
   * compared against `epoch`, so nothing needs clearing between calls. */
  uint32_t epoch;
  uint32_t *full_stamp;   /* per full page */
  uint32_t *full_count;   /* locations seen per full page (free path) */
  int64_t *full_overlay;  /* a full page's window page during apply */
  uint64_t *touched;      /* full pages a call touches */
  uint64_t *window_bases; /* window bases a call moves */
  uint32_t *win_stamp;    /* per window page */
  uint8_t *win_overlay;   /* a window page's free flag during apply */

  /* Request slots of per-request compress-state rings (window_pool_slots.c). */
  kvs_state_rings state_rings; /* where the pool's sizes place the rings */
  uint64_t n_req_slots;  /* the dummy (the last) included; 0 when rings are per page */
  uint64_t bound_slots;  /* bound by the allocator, the dummy excluded */
  int64_t *slot_request; /* per slot: its request, KVS_SLOT_FREE or KVS_SLOT_DUMMY */
  uint32_t *slot_stamp;  /* per slot, during apply */
  int64_t *slot_overlay; /* a slot's request during apply */
  /* request -> slot, open addressing (linear probing), so a lookup per
   * batch row is O(1) rather than a scan of every slot. */
  uint64_t hash_mask;    /* capacity - 1; capacity a power of two >= 2 x slots */
  uint64_t *hash_key;    /* request, or SLOT_HASH_EMPTY / SLOT_HASH_GONE */
  uint64_t *hash_slot;
  uint64_t hash_gone;    /* tombstones, rebuilt away past a quarter */
};


/* Request slots: created with the pool, checked with it, replayed with it. */
kvs_status kvs_pool_slots_init(struct kvs_window_pool *pool, kvs_state_rings rings,
                               uint64_t n_req_slots, kvs_error *err);
void kvs_pool_slots_free(struct kvs_window_pool *pool);
/* Pass 1 of apply for a tagged entry i: validates it against the slots as
 * replayed so far (stamped overlays of this epoch). */
kvs_status kvs_pool_slots_validate(struct kvs_window_pool *pool, size_t i,
                                   const kvs_journal_entry *entry, uint32_t epoch, kvs_error *err);
/* Pass 2: applies a validated tagged entry. */
void kvs_pool_slots_commit(struct kvs_window_pool *pool, const kvs_journal_entry *entry);
/* Integrity of the slots; the digest is checked by the caller. */
kvs_status kvs_pool_slots_check(const struct kvs_window_pool *pool, kvs_error *err);
/* The digest of slots [first, end). */
uint64_t kvs_pool_slots_digest_range(const struct kvs_window_pool *pool, uint64_t first,
                                     uint64_t end);
/* Appends one entry when journaling is on. */
void kvs_pool_journal(struct kvs_window_pool *pool, uint64_t full_page, int64_t window_page);
kvs_status kvs_pool_journal_room(const struct kvs_window_pool *pool, uint64_t entries,
                                 kvs_error *err);

#endif /* KVS_CORE_WINDOW_POOL_INTERNAL_H */

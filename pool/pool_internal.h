/* The window pool's request slots, where per-request compress-state rings
 * live: a leaf that pool/window_pool.c owns. It keeps which request each
 * slot serves, the request -> slot lookup, the replay overlays and the
 * slots' share of the binding digest. It knows nothing of pages or of the
 * journal and calls nothing of the pool: the pool checks journal room,
 * asks the leaf to change a slot, and journals what it asked. Private to
 * core/ (not a public header). */
#ifndef KVS_POOL_POOL_INTERNAL_H
#define KVS_POOL_POOL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/cost_model.h"
#include "core/status.h"
#include "pool/free_list.h"
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

/* One node of the prefix index, named by its full page. */
typedef struct kvs_prefix_rec {
  uint64_t key;
  int32_t parent; /* page of the parent node; -1: the root */
  uint32_t children;
  uint32_t refs;
  uint32_t depth; /* pages above it */
  int64_t writer; /* request re-prefilling its tail; -1 */
  uint8_t used;
  uint8_t tail;                 /* its window binding is retained by the cache */
  uint8_t in_leaf, in_tail;     /* on the evictable lists */
  int32_t leaf_prev, leaf_next; /* evictable leaves, least recently released first */
  int32_t tail_prev, tail_next; /* droppable tails, the same order */
  uint64_t used_at;             /* the index's clock when a request last held or released it */
  uint64_t chain;               /* the path's identity: its keys from the root, hashed */
  /* The index's clock when this node joined it: no other node of any
   * page ever has the same (every operation advances the clock), so a hit
   * that names it names this very block, not a later one on its page. */
  uint64_t born;
} kvs_prefix_rec;

/* The host tier (host.c): host slots, each holding one full
 * page's rows that left the GPU index, named by its chain (so a slot is
 * found from a prompt's keys alone, and only under the same prefix). */
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

/* A request's hold: the deepest node of its path, and the tail it writes. */
typedef struct kvs_prefix_hold {
  uint64_t request;
  int32_t node;    /* -1: holds nothing but writes a tail */
  int32_t writing; /* -1: writes none */
} kvs_prefix_hold;

/* What undoing one applied entry needs. */
typedef struct kvs_prefix_undo {
  kvs_journal_entry entry;
  kvs_prefix_rec saved;            /* the node before an evict */
  kvs_host_rec host_saved;         /* the host slot before a spill or fetch */
  int64_t hold_node, hold_writing; /* a hold before a release */
} kvs_prefix_undo;

typedef struct kvs_pool_prefix {
  uint64_t n;           /* records: one per full page; 0 when the cache is off */
  uint64_t align_pages; /* hits end on multiples of this many pages */
  kvs_prefix_rec *rec;
  kvs_probe_map map;       /* (parent, key) -> node: items are nodes, hashed by both */
  kvs_prefix_hold *hold;   /* max_holds of them: [0, holds) in use */
  kvs_probe_map holds_map; /* request -> its hold (the item's value, an index) */
  uint64_t holds, max_holds;
  uint64_t nodes, tails, refs_sum, evictable;
  uint64_t evictions, tail_drops;
  uint64_t digest;
  uint64_t clock; /* operations applied: every rank's the same */
  int32_t leaf_head, leaf_tail, tail_head, tail_tail;
  uint32_t *scratch; /* integrity: refs recounted */
  kvs_prefix_undo *undo;
  size_t undo_cap;
  kvs_pool_host host;
} kvs_pool_prefix;

struct kvs_window_pool {
  uint64_t page;       /* P */
  uint64_t full_token; /* mapped full locations (the sentinel row is extra) */
  uint64_t n_win_slots;
  uint64_t n_full_pages;
  uint64_t n_win_pages; /* dummy included */
  uint64_t dummy_full_base;
  uint64_t dummy_window_base;
  uint64_t chunk_budget;
  uint64_t digest;      /* sum of the page binding terms, dummy included */
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

  /* Request slots of per-request compress-state rings; their terms of
   * the digest are kept there (slots.digest). */
  kvs_pool_slots slots;

  /* The prefix cache (prefix.c); n == 0 when off. */
  kvs_pool_prefix prefix;
  /* The carve keeps tail states (kvs_pool_sizes.tail_states) and the pool
   * a prefix cache: an exact hit seeds its request's ring from them. */
  bool tail_states;
};

/* The pool's own steps, for the prefix leaf: journal room and an entry,
 * a full page's window page, one page bound or unbound (journaled). */
kvs_status kvs_pool_journal_room(const struct kvs_window_pool *pool, uint64_t entries,
                                 kvs_error *err);
void kvs_pool_journal(struct kvs_window_pool *pool, uint64_t a, int64_t b);
int64_t kvs_pool_window_page_of(const struct kvs_window_pool *pool, uint64_t full_page);
kvs_status kvs_pool_bind_page(struct kvs_window_pool *pool, uint64_t fp, kvs_error *err);
/* A fresh validation epoch for the pages' and slots' stamps (a value no
 * stamp holds: on the counter's wrap every stamp is cleared once). */
uint32_t kvs_pool_next_epoch(struct kvs_window_pool *pool);
void kvs_pool_unbind_page(struct kvs_window_pool *pool, uint64_t fp);

kvs_status kvs_pool_prefix_init(struct kvs_window_pool *pool, uint64_t align_tokens,
                                uint64_t max_running, size_t undo_cap, uint64_t host_slots,
                                kvs_error *err);
void kvs_pool_prefix_free(kvs_pool_prefix *prefix);
/* Replays the prefix entries of a batch in order, all or nothing (undone
 * on the first that does not apply). */
kvs_status kvs_pool_prefix_apply(struct kvs_window_pool *pool, const kvs_journal_entry *entries,
                                 size_t n, kvs_error *err);
kvs_status kvs_pool_prefix_check(const struct kvs_window_pool *pool, kvs_error *err);
/* An exact hit seeds its request's ring from its tail's state (tail
 * states only): the journal entries seeding `request`'s slot takes (0 or
 * 1), and the leader's seeding of it once the request holds both the hit
 * and `slot` (nothing when it does not, or is seeded already). The
 * caller has checked the journal's room. */
uint64_t kvs_pool_prefix_seed_entries(const struct kvs_window_pool *pool, uint64_t request);
kvs_status kvs_pool_prefix_seed_slot(struct kvs_window_pool *pool, uint64_t request, uint64_t slot,
                                     kvs_error *err);
uint64_t kvs_pool_prefix_digest_range(const kvs_pool_prefix *prefix, uint64_t first, uint64_t end);

/* The host tier (host.c). Apply refuses (changing nothing)
 * or applies; undo reverses an applied entry from what apply saved. */
kvs_status kvs_pool_host_init(kvs_pool_host *host, uint64_t slots, kvs_error *err);
void kvs_pool_host_free(kvs_pool_host *host);
int32_t kvs_pool_host_find(const kvs_pool_host *host, uint64_t chain);
/* The slot a spill takes: a free one, else the least recently used. */
int32_t kvs_pool_host_victim(const kvs_pool_host *host);
kvs_status kvs_pool_host_spill(kvs_pool_host *host, uint64_t slot, uint64_t chain, uint64_t clock,
                               kvs_host_rec *saved, kvs_error *err);
kvs_status kvs_pool_host_fetch(kvs_pool_host *host, uint64_t slot, uint64_t chain, uint64_t clock,
                               kvs_host_rec *saved, kvs_error *err);
void kvs_pool_host_undo(kvs_pool_host *host, uint64_t slot, bool spill, const kvs_host_rec *saved);
uint64_t kvs_pool_host_digest_range(const kvs_pool_host *host, uint64_t first, uint64_t end);
kvs_status kvs_pool_host_check(const kvs_pool_host *host, kvs_error *err);
/* A restore entry's operand: slot << 33 | half << 32 | window page, where
 * half says which half of the slot's 8-row ratio-4 ring the hit's last
 * four positions fill (prefix.c packs and reads it). */
#define KVS_RESTORE_MAX_SLOTS (UINT64_C(1) << 29)
#define KVS_RESTORE_MAX_WINDOW_PAGES (UINT64_C(1) << 32)

/* The chain of a child with key under a node of chain parent (the root:
 * KVS_PREFIX_ROOT_CHAIN). */
#define KVS_PREFIX_ROOT_CHAIN UINT64_C(0x6b76736861726421)
uint64_t kvs_prefix_chain(uint64_t parent_chain, uint64_t key);
/* Whether full page fp is a cached node / holds a cached tail. */
static inline bool kvs_pool_prefix_cached(const kvs_pool_prefix *prefix, uint64_t fp) {
  return prefix->n > 0 && fp < prefix->n && prefix->rec[fp].used;
}
static inline bool kvs_pool_prefix_is_tail(const kvs_pool_prefix *prefix, uint64_t fp) {
  return prefix->n > 0 && fp < prefix->n && prefix->rec[fp].used && prefix->rec[fp].tail;
}

#endif /* KVS_POOL_POOL_INTERNAL_H */

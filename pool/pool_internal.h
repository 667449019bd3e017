/* The window pool's core, private to //pool: the pool's struct and the
 * steps on its pages and journal that the pool's own files share.
 *
 * The pool is four concepts, one private header each, and its public
 * headers (window_pool.h, and free_list.h and journal.h, whose free_list.c
 * and journal.c include nothing else of the pool: the types and entry
 * formats every concept speaks):
 *   pool_internal.h  the core: the mapping and its bindings, the digest,
 *                    apply and the integrity check (window_pool.c), and
 *                    the leader's prefix calls, which combine the index
 *                    with pages, slots and the journal
 *                    (window_pool_prefix.c)
 *   slots.h          the request slots (slots.c)
 *   prefix.h         the prefix index (prefix.c; its operations and
 *                    their replay in prefix_ops.c), owning
 *   host.h           its host tier (host.c)
 * and one helper, probe_map.h (probe_map.c), the hash map they all use.
 *
 * The rule: includes go one way, down this list, never up or across.
 *   pool_internal.h -> slots.h, prefix.h -> host.h -> probe_map.h
 *   every one of them -> the public headers -> core/
 * The core composes the concepts; a concept knows nothing of the pool's
 * struct or of any concept above it, and calls nothing of the core (the
 * prefix index is handed the shape it indexes and, to check, the mapping).
 * Only window_pool*.c include this header. */
#ifndef KVS_POOL_POOL_INTERNAL_H
#define KVS_POOL_POOL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "pool/free_list.h"
#include "pool/journal.h"
#include "pool/prefix.h"
#include "pool/slots.h"
#include "pool/window_pool.h"

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

  /* The prefix index (prefix.h); n == 0 when the cache is off. */
  kvs_pool_prefix prefix;
  /* The carve keeps tail states (kvs_pool_sizes.tail_states) and the pool
   * a prefix cache: an exact hit seeds its request's ring from them. */
  bool tail_states;
};

/* The core's steps, for the leader's prefix calls (window_pool_prefix.c):
 * journal room and an entry, a full page's window page, one page bound or
 * unbound (journaled). */
kvs_status kvs_pool_journal_room(const struct kvs_window_pool *pool, uint64_t entries,
                                 kvs_error *err);
void kvs_pool_journal(struct kvs_window_pool *pool, uint64_t a, int64_t b);
int64_t kvs_pool_window_page_of(const struct kvs_window_pool *pool, uint64_t full_page);
kvs_status kvs_pool_bind_page(struct kvs_window_pool *pool, uint64_t fp, kvs_error *err);
void kvs_pool_unbind_page(struct kvs_window_pool *pool, uint64_t fp);
/* pages[0..n) in ascending order (in place, allocating nothing). */
void kvs_pool_sort_pages(uint64_t *pages, size_t n);
/* A fresh validation epoch for the pages' and slots' stamps (a value no
 * stamp holds: on the counter's wrap every stamp is cleared once). */
uint32_t kvs_pool_next_epoch(struct kvs_window_pool *pool);

/* An exact hit seeds its request's ring from its tail's state (tail
 * states only; window_pool_prefix.c): the journal entries seeding
 * `request`'s slot takes (0 or 1), and the leader's seeding of it once the
 * request holds both the hit and `slot` (nothing when it does not, or is
 * seeded already). The caller has checked the journal's room. */
uint64_t kvs_pool_seed_entries(const struct kvs_window_pool *pool, uint64_t request);
kvs_status kvs_pool_seed_slot(struct kvs_window_pool *pool, uint64_t request, uint64_t slot,
                              kvs_error *err);

#endif /* KVS_POOL_POOL_INTERNAL_H */

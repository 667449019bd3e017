/* The window pool's prefix index: one node per cached full page (named by
 * it), the requests' holds, the evictable lists, the index's share of the
 * digest and its integrity check (prefix.c), and its host tier (host.h).
 * Every change is one journaled operation (kvs_prefix_op, prefix_ops.c),
 * run the same way by the leader's calls (window_pool_prefix.c, which
 * journals it) and by a follower's replay, so both hold the same index. A
 * leaf of the pool: it knows of the pool only the shape it was created
 * for, and the mapping its integrity check is handed; it calls nothing of
 * the pool. Private to //pool (pool_internal.h's rule: it includes the
 * public headers, the probe map and host.h). */
#ifndef KVS_POOL_PREFIX_H
#define KVS_POOL_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "pool/host.h"
#include "pool/journal.h"
#include "pool/probe_map.h"
#include "pool/window_pool.h"

/* What the index knows of its pool, fixed at creation: the page size, the
 * full pages (one record each; the last is the dummy), the window pages
 * and the request slots (each with its dummy last; 0 slots with rings per
 * window page). */
typedef struct kvs_prefix_shape {
  uint64_t page;
  uint64_t full_pages;
  uint64_t window_pages;
  uint64_t request_slots;
} kvs_prefix_shape;

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

/* A request's hold: the deepest node of its path, and the tail it writes. */
typedef struct kvs_prefix_hold {
  uint64_t request;
  int32_t node;    /* -1: holds nothing but writes a tail */
  int32_t writing; /* -1: writes none */
} kvs_prefix_hold;

/* A block waiting to be written through: its page and birth (a page that
 * holds another block by its turn is not it). */
typedef struct kvs_prefix_pending {
  uint64_t born;
  int32_t page;
} kvs_prefix_pending;

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
  uint64_t droppable; /* tails on the droppable list (kvs_window_pool_prefix_evict's first) */
  uint64_t evictions, tail_drops;
  uint64_t digest;
  uint64_t clock; /* operations applied: every rank's the same */
  int32_t leaf_head, leaf_tail, tail_head, tail_tail;
  uint32_t *scratch; /* integrity: refs recounted */
  kvs_prefix_undo *undo;
  size_t undo_cap;
  kvs_pool_host host;
  /* The disk tier's index (n 0: none): the same records as the host
   * tier's, but written through (a block is stored once, soon after it is
   * cached, and keeps its copy when read back). */
  kvs_pool_host disk;
  /* Blocks one step writes at most, and how many the step the journal is
   * gathering writes (the leader's): writes wait for later steps rather
   * than make one step long. */
  uint64_t stores_per_step, stores_this_step;
  /* Leader: blocks cached and not yet stored, oldest first (a ring of
   * pending_cap; a block evicted before its turn is passed over and
   * counted in store_missed). */
  kvs_prefix_pending *pending;
  uint64_t pending_cap, pending_head, pending_len;
  uint64_t store_missed;
  kvs_prefix_shape shape;
} kvs_pool_prefix;

/* A restore entry's operand: slot << 33 | half << 32 | window page, where
 * half says which half of the slot's 8-row ratio-4 ring the hit's last
 * four positions fill (kvs_pool_prefix_restore_operand packs it,
 * kvs_window_pool_restore_of reads it). */
#define KVS_RESTORE_MAX_SLOTS (UINT64_C(1) << 29)
#define KVS_RESTORE_MAX_WINDOW_PAGES (UINT64_C(1) << 32)

/* The lower tiers of an index: a host tier of host_slots slots and a
 * disk tier of disk_slots (0: none), which writes at most stores_per_step
 * blocks a step (at least 1 with a disk tier). */
typedef struct kvs_prefix_tiers {
  uint64_t host_slots;
  uint64_t disk_slots;
  uint64_t stores_per_step;
} kvs_prefix_tiers;

/* An index for a pool of `shape` (n 0 until it succeeds): hits end on
 * multiples of lcm(P, align_tokens) tokens, at most 2 x max_running + 2
 * requests hold paths, a replayed batch carries at most undo_cap entries
 * (0: 4096), and the lower tiers `tiers`. On failure what was allocated
 * is left for kvs_pool_prefix_free. */
kvs_status kvs_pool_prefix_init(kvs_pool_prefix *p, const kvs_prefix_shape *shape,
                                uint64_t align_tokens, uint64_t max_running, size_t undo_cap,
                                const kvs_prefix_tiers *tiers, kvs_error *err);
void kvs_pool_prefix_free(kvs_pool_prefix *p);

/* The journal entry of one operation: `page` the node (its full page),
 * `operand` what kvs_prefix_op says. */
kvs_journal_entry kvs_prefix_entry(kvs_prefix_op op, uint64_t page, int64_t operand);
/* Applies one entry (the leader's, before it journals it): refused, it
 * changes nothing. */
kvs_status kvs_pool_prefix_run(kvs_pool_prefix *p, const kvs_journal_entry *entry, kvs_error *err);
/* The window page full page `page` holds once a batch's page entries are
 * replayed (the pool's overlays), -1 for none. */
typedef int64_t (*kvs_prefix_window_of)(const void *ctx, uint64_t page);
/* Replays the prefix entries of a batch in order, all or nothing (undone
 * on the first that does not apply); other entries are passed over. The
 * batch must leave the index as a leader's step does: every block it
 * starts linked, and every tail on a page it names keeping a window page
 * (window_of(ctx, page) as the batch leaves it). */
kvs_status kvs_pool_prefix_apply(kvs_pool_prefix *p, const kvs_journal_entry *entries, size_t n,
                                 kvs_prefix_window_of window_of, const void *ctx, kvs_error *err);

/* The child of `parent` (-1: the root) with `key`, or -1. */
int32_t kvs_pool_prefix_child(const kvs_pool_prefix *p, int32_t parent, uint64_t key);
/* The index in p->hold of request's hold, or -1. */
int64_t kvs_pool_prefix_hold_of(const kvs_pool_prefix *p, uint64_t request);
/* The chain of the path down to node (-1: the root's). */
uint64_t kvs_pool_prefix_chain_of(const kvs_pool_prefix *p, int32_t node);
/* Why full page `page` can hold no cached block (outside the history, or
 * the dummy), NULL when it can. */
const char *kvs_pool_prefix_unusable(const kvs_pool_prefix *p, int64_t page);
/* The operand of a restore of node's tail state (its tail in window page
 * window_page) into request slot `slot`. */
int64_t kvs_pool_prefix_restore_operand(const kvs_pool_prefix *p, int32_t node, uint64_t slot,
                                        uint64_t window_page);

/* Leader: queues block `page` (just cached, or back from the host tier)
 * for a write to the disk tier unless the tier has it (no disk tier:
 * nothing). */
void kvs_pool_prefix_queue_store(kvs_pool_prefix *p, int32_t page);

/* The index's digest over full pages [first, end): a term per node. */
uint64_t kvs_pool_prefix_digest_range(const kvs_pool_prefix *p, uint64_t first, uint64_t end);
/* Integrity: the records, the key map, the holds against the refs, the
 * children, the running totals and the host tier; a tail's full page must
 * be bound in `mapping` (the pool's full -> window mapping). */
kvs_status kvs_pool_prefix_check(const kvs_pool_prefix *p, const int64_t *mapping, kvs_error *err);
/* Fault injection: adds delta to node's refs, outside the journal (the
 * digest follows). */
void kvs_pool_prefix_add_refs(kvs_pool_prefix *p, uint64_t node, int32_t delta);

/* The index's own steps (prefix.c), for its operations (prefix_ops.c):
 * node fp's term of the digest (0 unless linked), the key map's insert and
 * erase of a node (by its parent and key), and a request's hold set (made
 * when it has none) or dropped. */
uint64_t kvs_prefix_node_term(uint64_t fp, const kvs_prefix_rec *r);
void kvs_pool_prefix_map_insert(kvs_pool_prefix *p, int32_t node);
void kvs_pool_prefix_map_erase(kvs_pool_prefix *p, int32_t node);
void kvs_pool_prefix_hold_put(kvs_pool_prefix *p, uint64_t request, int32_t node, int32_t writing);
void kvs_pool_prefix_hold_erase(kvs_pool_prefix *p, uint64_t request);

/* Whether full page fp is a cached node / holds a cached tail. */
static inline bool kvs_pool_prefix_cached(const kvs_pool_prefix *prefix, uint64_t fp) {
  return prefix->n > 0 && fp < prefix->n && prefix->rec[fp].used;
}
static inline bool kvs_pool_prefix_is_tail(const kvs_pool_prefix *prefix, uint64_t fp) {
  return prefix->n > 0 && fp < prefix->n && prefix->rec[fp].used && prefix->rec[fp].tail;
}

#endif /* KVS_POOL_PREFIX_H */

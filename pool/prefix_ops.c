/* The prefix index's operations: their journal entries, each operation
 * and its undo as one function, and the replay of a batch. An operation
 * runs the same way for the leader (kvs_pool_prefix_run, before its call
 * in window_pool_prefix.c journals the entry) and for a follower replaying
 * it (kvs_pool_prefix_apply), so both hold the same index; a replayed
 * batch that stops applying is undone entry by entry. The evictable lists,
 * which only the operations change, are kept here. */
#include <stdio.h>
#include <string.h>

#include "pool/prefix.h"

/* The operations, as kvs_prefix_op numbers and describes them (the
 * journal's format): a is the entry's page (a node, by its full page), b
 * its operand. */
enum {
  OP_NEW_KEY = KVS_PREFIX_OP_NEW_KEY,
  OP_NEW_LINK = KVS_PREFIX_OP_NEW_LINK,
  OP_ACQUIRE = KVS_PREFIX_OP_ACQUIRE,
  OP_RELEASE = KVS_PREFIX_OP_RELEASE,
  OP_TAIL = KVS_PREFIX_OP_TAIL,
  OP_WDONE = KVS_PREFIX_OP_WDONE,
  OP_UNTAIL = KVS_PREFIX_OP_UNTAIL,
  OP_EVICT = KVS_PREFIX_OP_EVICT,
  OP_SPILL = KVS_PREFIX_OP_SPILL,
  OP_FETCH = KVS_PREFIX_OP_FETCH,
  OP_RESTORE = KVS_PREFIX_OP_RESTORE,
  OP_STORE = KVS_PREFIX_OP_STORE,
  OP_LOAD = KVS_PREFIX_OP_LOAD,
  OP_COUNT
};

#define OP_SHIFT 56
#define A_MASK ((UINT64_C(1) << OP_SHIFT) - 1)

/* ---- the journal's entries ---- */

kvs_journal_entry kvs_prefix_entry(kvs_prefix_op op, uint64_t page, int64_t operand) {
  kvs_journal_entry e = {KVS_JOURNAL_PREFIX_TAG | ((uint64_t)op << OP_SHIFT) | (page & A_MASK),
                         operand};
  return e;
}

static unsigned entry_op(const kvs_journal_entry *e) {
  return (unsigned)((e->full_page >> OP_SHIFT) & 0x3f);
}

kvs_prefix_op kvs_window_pool_prefix_entry(const kvs_journal_entry *entry, uint64_t *page,
                                           int64_t *operand) {
  if (entry == NULL || (entry->full_page & KVS_JOURNAL_PREFIX_TAG) != KVS_JOURNAL_PREFIX_TAG) {
    return KVS_PREFIX_OP_NONE;
  }
  unsigned op = entry_op(entry);
  if (op < OP_NEW_KEY || op >= OP_COUNT) return KVS_PREFIX_OP_NONE;
  if (page != NULL) *page = entry->full_page & A_MASK;
  if (operand != NULL) *operand = entry->window_page;
  return (kvs_prefix_op)op;
}

bool kvs_window_pool_disk_io_of(const kvs_journal_entry *entry, kvs_disk_io *out) {
  uint64_t page = 0;
  int64_t operand = -1;
  kvs_prefix_op op = kvs_window_pool_prefix_entry(entry, &page, &operand);
  if ((op != KVS_PREFIX_OP_STORE && op != KVS_PREFIX_OP_LOAD) || operand < 0) return false;
  if (out != NULL) {
    kvs_disk_io io = {op == KVS_PREFIX_OP_LOAD, page, (uint64_t)operand};
    *out = io;
  }
  return true;
}

bool kvs_window_pool_host_move_of(const kvs_journal_entry *entry, kvs_host_move *out) {
  uint64_t page = 0;
  int64_t slot = -1;
  kvs_prefix_op op = kvs_window_pool_prefix_entry(entry, &page, &slot);
  if ((op != KVS_PREFIX_OP_SPILL && op != KVS_PREFIX_OP_FETCH) || slot < 0) return false;
  if (out != NULL) {
    kvs_host_move m = {op == KVS_PREFIX_OP_FETCH, page, (uint64_t)slot};
    *out = m;
  }
  return true;
}

/* ---- tail-state restores ---- */

/* The half of an 8-row ratio-4 ring that positions H - 4 .. H - 1 of a hit
 * at H = (depth + 1) x P fill: 0 (rows 0-3) or 1 (rows 4-7). */
static uint64_t restore_half(const kvs_pool_prefix *p, uint64_t depth) {
  uint64_t h = (depth + 1) * p->shape.page;
  return ((h - KVS_TAIL_STATE_POSITIONS) % (2 * KVS_TAIL_STATE_POSITIONS)) /
         KVS_TAIL_STATE_POSITIONS;
}

int64_t kvs_pool_prefix_restore_operand(const kvs_pool_prefix *p, int32_t node, uint64_t slot,
                                        uint64_t window_page) {
  uint64_t half = restore_half(p, p->rec[node].depth);
  return (int64_t)((slot << 33) | (half << 32) | window_page);
}

bool kvs_window_pool_restore_of(const kvs_journal_entry *entry, kvs_tail_restore *out) {
  uint64_t page = 0;
  int64_t operand = -1;
  if (kvs_window_pool_prefix_entry(entry, &page, &operand) != KVS_PREFIX_OP_RESTORE ||
      operand < 0) {
    return false;
  }
  if (out != NULL) {
    uint64_t b = (uint64_t)operand;
    kvs_tail_restore r = {
        page, b & UINT32_MAX, b >> 33,
        (b >> 33) * 2 * KVS_TAIL_STATE_POSITIONS + ((b >> 32) & 1) * KVS_TAIL_STATE_POSITIONS};
    *out = r;
  }
  return true;
}

/* ---- evictable lists (least recently released at the head) ---- */

/* Node n's links and flag on the leaf list, or on the tail list. */
static int32_t *prev_of(kvs_pool_prefix *p, int32_t n, bool tails) {
  return tails ? &p->rec[n].tail_prev : &p->rec[n].leaf_prev;
}
static int32_t *next_of(kvs_pool_prefix *p, int32_t n, bool tails) {
  return tails ? &p->rec[n].tail_next : &p->rec[n].leaf_next;
}
static uint8_t *listed(kvs_pool_prefix *p, int32_t n, bool tails) {
  return tails ? &p->rec[n].in_tail : &p->rec[n].in_leaf;
}

/* The link to the node after `prev` (-1: the list's head), and the link
 * to the node before `next` (-1: the list's tail). */
static int32_t *link_after(kvs_pool_prefix *p, int32_t prev, bool tails) {
  return prev >= 0 ? next_of(p, prev, tails) : tails ? &p->tail_head : &p->leaf_head;
}
static int32_t *link_before(kvs_pool_prefix *p, int32_t next, bool tails) {
  return next >= 0 ? prev_of(p, next, tails) : tails ? &p->tail_tail : &p->leaf_tail;
}

static void list_remove(kvs_pool_prefix *p, int32_t n, bool tails) {
  int32_t prev = *prev_of(p, n, tails), next = *next_of(p, n, tails);
  *link_after(p, prev, tails) = next;
  *link_before(p, next, tails) = prev;
  *listed(p, n, tails) = 0;
}

/* Inserts n into a list in order of used_at (least recent at the head):
 * a node released now goes to the tail; a parent a leaf's eviction left
 * childless, last used when its subtree was, goes back as far as that
 * (a bounded walk from the tail, then the head when older than it). */
static void list_append(kvs_pool_prefix *p, int32_t n, bool tails) {
  uint64_t used_at = p->rec[n].used_at;
  int32_t head = tails ? p->tail_head : p->leaf_head;
  int32_t after = tails ? p->tail_tail : p->leaf_tail; /* insert after this one (-1: the head) */
  if (head >= 0 && used_at < p->rec[head].used_at) {
    after = -1;
  } else {
    for (int steps = 0; after >= 0 && p->rec[after].used_at > used_at && steps < 256; steps++) {
      after = *prev_of(p, after, tails);
    }
  }
  int32_t next = *link_after(p, after, tails);
  *prev_of(p, n, tails) = after;
  *next_of(p, n, tails) = next;
  *listed(p, n, tails) = 1;
  *link_after(p, after, tails) = n;
  *link_before(p, next, tails) = n;
}

/* Puts node n on the lists it belongs on now, and takes it off the others:
 * an unreferenced childless node is an evictable leaf, an unreferenced
 * readable tail a droppable one. */
static void relist(kvs_pool_prefix *p, int32_t n) {
  if (n < 0) return;
  kvs_prefix_rec *r = &p->rec[n];
  bool leaf = r->used == 1 && r->refs == 0 && r->children == 0;
  bool tail = r->used == 1 && r->tail && r->refs == 0 && r->writer < 0;
  if (leaf != (bool)r->in_leaf) {
    if (leaf) {
      list_append(p, n, false);
      p->evictable++;
    } else {
      list_remove(p, n, false);
      p->evictable--;
    }
  }
  if (tail != (bool)r->in_tail) {
    if (tail) {
      list_append(p, n, true);
      p->droppable++;
    } else {
      list_remove(p, n, true);
      p->droppable--;
    }
  }
}

/* Takes node n off both lists (it leaves the index). */
static void unlist(kvs_pool_prefix *p, int32_t n) {
  if (p->rec[n].in_leaf) {
    list_remove(p, n, false);
    p->evictable--;
  }
  if (p->rec[n].in_tail) {
    list_remove(p, n, true);
    p->droppable--;
  }
}

/* ---- what the operations share ---- */

#define REFUSE(...) kvs_error_set(err, KVS_ERR_CONFLICT, __VA_ARGS__)

/* One entry being applied: its operation, its node (by its page) and that
 * node's record, its operand, and where its undo is recorded (NULL for
 * the leader's, which are never undone). */
typedef struct op_call {
  unsigned op;
  int32_t n;
  kvs_prefix_rec *r;
  int64_t b;
  kvs_prefix_undo *u;
} op_call;

static void set_refs_path(kvs_pool_prefix *p, int32_t n, int delta) {
  for (int32_t at = n; at >= 0; at = p->rec[at].parent) {
    p->digest -= kvs_prefix_node_term((uint64_t)at, &p->rec[at]);
    p->rec[at].refs = (uint32_t)((int64_t)p->rec[at].refs + delta);
    p->rec[at].used_at = p->clock;
    p->digest += kvs_prefix_node_term((uint64_t)at, &p->rec[at]);
    p->refs_sum = (uint64_t)((int64_t)p->refs_sum + delta);
    relist(p, at);
  }
}

/* Adds delta to node's children (none for the root, -1). */
static void add_children(kvs_pool_prefix *p, int32_t node, int delta) {
  if (node < 0) return;
  kvs_prefix_rec *r = &p->rec[node];
  p->digest -= kvs_prefix_node_term((uint64_t)node, r);
  r->children = (uint32_t)((int64_t)r->children + delta);
  p->digest += kvs_prefix_node_term((uint64_t)node, r);
  relist(p, node);
}

/* Records hold h as it was, for the undo (the leader records nothing). */
static void save_hold(const kvs_pool_prefix *p, int64_t h, kvs_prefix_undo *u) {
  if (u == NULL) return;
  u->hold_node = p->hold[h].node;
  u->hold_writing = p->hold[h].writing;
}

/* Puts back the hold an undo recorded. */
static void restore_hold(kvs_pool_prefix *p, int64_t request, const kvs_prefix_undo *u) {
  kvs_pool_prefix_hold_put(p, (uint64_t)request, (int32_t)u->hold_node, (int32_t)u->hold_writing);
}

/* ---- the operations, each with its undo (the exact reverse) ---- */

/* A block starts at page n with key b (it joins the index when linked). */
static kvs_status run_new_key(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  (void)p;
  if (c->r->used != 0) return REFUSE("prefix entry starts block %d, which is cached", c->n);
  c->r->used = 2;
  c->r->key = (uint64_t)c->b;
  return KVS_OK;
}
static void undo_new_key(kvs_pool_prefix *p, const op_call *c) {
  (void)p;
  c->r->used = 0;
}

/* The started block n joins the index under b (-1: the root), born now. */
static kvs_status run_new_link(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  kvs_prefix_rec *r = c->r;
  int32_t n = c->n;
  int64_t b = c->b;
  if (r->used != 2) return REFUSE("prefix entry links block %d, which was not started", n);
  if (b < -1 || b >= (int64_t)p->n || b == n || (b >= 0 && p->rec[b].used != 1)) {
    return REFUSE("prefix entry links block %d under %lld, which is not cached", n, (long long)b);
  }
  if (kvs_pool_prefix_child(p, (int32_t)b, r->key) >= 0) {
    return REFUSE(
        "prefix entry links block %d with key %llu under %lld, which has that "
        "key already",
        n, (unsigned long long)r->key, (long long)b);
  }
  r->used = 1;
  r->parent = (int32_t)b;
  r->depth = b >= 0 ? p->rec[b].depth + 1 : 0;
  r->children = r->refs = 0;
  r->tail = 0;
  r->writer = -1;
  r->used_at = p->clock;
  r->born = p->clock;
  r->chain = kvs_prefix_chain(kvs_pool_prefix_chain_of(p, (int32_t)b), r->key);
  kvs_pool_prefix_map_insert(p, n);
  p->nodes++;
  add_children(p, (int32_t)b, +1);
  p->digest += kvs_prefix_node_term((uint64_t)n, r);
  relist(p, n);
  return KVS_OK;
}
static void undo_new_link(kvs_pool_prefix *p, const op_call *c) {
  kvs_prefix_rec *r = c->r;
  p->digest -= kvs_prefix_node_term((uint64_t)c->n, r);
  unlist(p, c->n);
  kvs_pool_prefix_map_erase(p, c->n);
  p->nodes--;
  add_children(p, r->parent, -1);
  r->used = 2;
  r->parent = -1;
}

/* Request b holds the path down to n (a reference on every node of it). */
static kvs_status run_acquire(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  int32_t n = c->n;
  int64_t b = c->b;
  if (c->r->used != 1) return REFUSE("prefix entry acquires block %d, which is not cached", n);
  if (b < 0) return REFUSE("prefix entry acquires block %d for request %lld", n, (long long)b);
  int64_t h = kvs_pool_prefix_hold_of(p, (uint64_t)b);
  if (h >= 0 && p->hold[h].node >= 0) {
    return REFUSE("request %lld holds block %d already", (long long)b, p->hold[h].node);
  }
  if (h < 0 && p->holds >= p->max_holds) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED, "%llu requests hold prefixes already",
                         (unsigned long long)p->holds);
  }
  if (h >= 0) save_hold(p, h, c->u);
  kvs_pool_prefix_hold_put(p, (uint64_t)b, n, h >= 0 ? p->hold[h].writing : -1);
  set_refs_path(p, n, +1);
  return KVS_OK;
}
static void undo_acquire(kvs_pool_prefix *p, const op_call *c) {
  set_refs_path(p, c->n, -1);
  if (c->u->hold_node == -2) {
    kvs_pool_prefix_hold_erase(p, (uint64_t)c->b);
  } else {
    restore_hold(p, c->b, c->u);
  }
}

/* Request b lets go of the path down to n (its hold stays while it writes
 * a tail). */
static kvs_status run_release(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  int32_t n = c->n;
  int64_t b = c->b;
  int64_t h = b >= 0 ? kvs_pool_prefix_hold_of(p, (uint64_t)b) : -1;
  if (c->r->used != 1 || h < 0 || p->hold[h].node != n) {
    return REFUSE("prefix entry releases block %d for request %lld, which does not hold it", n,
                  (long long)b);
  }
  for (int32_t at = n; at >= 0; at = p->rec[at].parent) {
    if (p->rec[at].refs == 0) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "block %d on request %lld's path has no reference to release", at,
                           (long long)b);
    }
  }
  save_hold(p, h, c->u);
  if (p->hold[h].writing >= 0) {
    p->hold[h].node = -1;
  } else {
    kvs_pool_prefix_hold_erase(p, (uint64_t)b);
  }
  set_refs_path(p, n, -1);
  return KVS_OK;
}
static void undo_release(kvs_pool_prefix *p, const op_call *c) {
  set_refs_path(p, c->n, +1);
  restore_hold(p, c->b, c->u);
}

/* n's window page becomes the cache's, written by request b (-1: written). */
static kvs_status run_tail(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  kvs_prefix_rec *r = c->r;
  int32_t n = c->n;
  int64_t b = c->b;
  if (r->used != 1 || r->tail) {
    return REFUSE("prefix entry retains the tail of block %d, which %s", n,
                  r->used != 1 ? "is not cached" : "has one");
  }
  int64_t h = -1;
  if (b >= 0) {
    h = kvs_pool_prefix_hold_of(p, (uint64_t)b);
    if (h < 0 || p->hold[h].writing >= 0) {
      return REFUSE("request %lld writes block %d's tail but %s", (long long)b, n,
                    h < 0 ? "holds nothing" : "writes another");
    }
  }
  p->digest -= kvs_prefix_node_term((uint64_t)n, r);
  r->tail = 1;
  r->writer = b;
  p->digest += kvs_prefix_node_term((uint64_t)n, r);
  p->tails++;
  if (h >= 0) p->hold[h].writing = n;
  relist(p, n);
  return KVS_OK;
}
static void undo_tail(kvs_pool_prefix *p, const op_call *c) {
  kvs_prefix_rec *r = c->r;
  p->digest -= kvs_prefix_node_term((uint64_t)c->n, r);
  r->tail = 0;
  r->writer = -1;
  p->digest += kvs_prefix_node_term((uint64_t)c->n, r);
  p->tails--;
  if (c->b >= 0) {
    int64_t h = kvs_pool_prefix_hold_of(p, (uint64_t)c->b);
    if (h >= 0) p->hold[h].writing = -1;
  }
  relist(p, c->n);
}

/* Writer b is done with n's tail: it is readable (the hold goes with it
 * when it held nothing else). */
static kvs_status run_wdone(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  kvs_prefix_rec *r = c->r;
  int32_t n = c->n;
  int64_t b = c->b;
  int64_t h = b >= 0 ? kvs_pool_prefix_hold_of(p, (uint64_t)b) : -1;
  if (r->used != 1 || !r->tail || r->writer != b || h < 0 || p->hold[h].writing != n) {
    return REFUSE(
        "prefix entry ends request %lld's write of block %d's tail, which it "
        "does not write",
        (long long)b, n);
  }
  save_hold(p, h, c->u);
  p->digest -= kvs_prefix_node_term((uint64_t)n, r);
  r->writer = -1;
  p->digest += kvs_prefix_node_term((uint64_t)n, r);
  if (p->hold[h].node < 0) {
    kvs_pool_prefix_hold_erase(p, (uint64_t)b);
  } else {
    p->hold[h].writing = -1;
  }
  relist(p, n);
  return KVS_OK;
}
static void undo_wdone(kvs_pool_prefix *p, const op_call *c) {
  kvs_prefix_rec *r = c->r;
  p->digest -= kvs_prefix_node_term((uint64_t)c->n, r);
  r->writer = c->b;
  p->digest += kvs_prefix_node_term((uint64_t)c->n, r);
  restore_hold(p, c->b, c->u);
  relist(p, c->n);
}

/* n's readable tail is dropped (the pool frees its window page next). */
static kvs_status run_untail(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  kvs_prefix_rec *r = c->r;
  if (r->used != 1 || !r->tail || r->writer >= 0) {
    return REFUSE("prefix entry drops block %d's tail, which is %s", c->n,
                  r->used != 1 ? "not cached"
                  : !r->tail   ? "absent"
                               : "being written");
  }
  p->digest -= kvs_prefix_node_term((uint64_t)c->n, r);
  r->tail = 0;
  p->digest += kvs_prefix_node_term((uint64_t)c->n, r);
  p->tails--;
  p->tail_drops++;
  relist(p, c->n);
  return KVS_OK;
}
static void undo_untail(kvs_pool_prefix *p, const op_call *c) {
  kvs_prefix_rec *r = c->r;
  p->digest -= kvs_prefix_node_term((uint64_t)c->n, r);
  r->tail = 1;
  p->digest += kvs_prefix_node_term((uint64_t)c->n, r);
  p->tails++;
  p->tail_drops--;
  relist(p, c->n);
}

/* The unreferenced leaf n, of key b and without a tail, leaves the index. */
static kvs_status run_evict(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  kvs_prefix_rec *r = c->r;
  int32_t n = c->n;
  int64_t b = c->b;
#ifndef KVS_MUTANT_REPLAY_EVICTS_HELD /* defined: planted bug (tests/mutants), refs unchecked */
  if (r->used != 1 || r->key != (uint64_t)b || r->refs != 0 || r->children != 0 || r->tail) {
#else
  if (r->used != 1 || r->key != (uint64_t)b || r->children != 0 || r->tail) {
#endif
    return REFUSE("prefix entry evicts block %d (key %llu), which is %s", n, (unsigned long long)b,
                  r->used != 1            ? "not cached"
                  : r->key != (uint64_t)b ? "another key"
                  : r->refs               ? "referenced"
                  : r->children           ? "not a leaf"
                                          : "holding a tail");
  }
  p->digest -= kvs_prefix_node_term((uint64_t)n, r);
  unlist(p, n);
  kvs_pool_prefix_map_erase(p, n);
  r->used = 0;
  p->nodes--;
  p->evictions++;
  add_children(p, r->parent, -1);
  return KVS_OK;
}
static void undo_evict(kvs_pool_prefix *p, const op_call *c) {
  kvs_prefix_rec *r = c->r;
  *r = c->u->saved;
  r->in_leaf = r->in_tail = 0;
  kvs_pool_prefix_map_insert(p, c->n);
  p->nodes++;
  p->evictions--;
  add_children(p, r->parent, +1);
  p->digest += kvs_prefix_node_term((uint64_t)c->n, r);
  relist(p, c->n);
}

/* n's rows move to host slot b (a spill, before n is evicted), or back
 * from it (a fetch); the host tier keeps the slots. */
static kvs_status run_move(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  kvs_prefix_rec *r = c->r;
  bool spill = c->op == OP_SPILL;
  if (r->used != 1) {
    return REFUSE("prefix entry %s block %d, which is not cached", spill ? "spills" : "fetches",
                  c->n);
  }
  if (spill && (r->refs != 0 || r->children != 0)) {
    return REFUSE("prefix entry spills block %d, which is %s", c->n,
                  r->refs != 0 ? "referenced" : "not a leaf");
  }
  kvs_host_rec saved;
  uint64_t slot = (uint64_t)c->b;
  kvs_status status = spill ? kvs_pool_host_spill(&p->host, slot, r->chain, p->clock, &saved, err)
                            : kvs_pool_host_fetch(&p->host, slot, r->chain, p->clock, &saved, err);
  if (status == KVS_OK && c->u != NULL) c->u->host_saved = saved;
  return status;
}
static void undo_move(kvs_pool_prefix *p, const op_call *c) {
  kvs_pool_host_undo(&p->host, (uint64_t)c->b, c->op == OP_SPILL, &c->u->host_saved);
}

/* n's rows are written to disk slot b (a store: the block stays cached,
 * the disk tier gains it and drops its least recently used), or read back
 * from it into n (a load: n was just linked; the disk tier keeps its
 * copy). */
static kvs_status run_disk(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  kvs_prefix_rec *r = c->r;
  bool store = c->op == OP_STORE;
  uint64_t slot = (uint64_t)c->b;
  if (p->disk.n == 0) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "prefix entry %s the disk tier; this rank's pool has none",
                         store ? "writes to" : "reads from");
  }
  if (r->used != 1 || c->b < 0) {
    return REFUSE("prefix entry %s block %d, which is not cached", store ? "stores" : "loads",
                  c->n);
  }
  kvs_host_rec saved;
  kvs_status status = store ? kvs_pool_host_spill(&p->disk, slot, r->chain, p->clock, &saved, err)
                            : kvs_pool_host_touch(&p->disk, slot, r->chain, p->clock, &saved, err);
  if (status == KVS_OK && c->u != NULL) c->u->host_saved = saved;
  return status;
}
static void undo_disk(kvs_pool_prefix *p, const op_call *c) {
  kvs_pool_host_undo(&p->disk, (uint64_t)c->b, c->op == OP_STORE, &c->u->host_saved);
}

/* n's tail state seeds a request slot's ring. The slot is the pool's
 * (checked in order with the slots' entries, seeded there); here the
 * block: a readable tail at this depth. Nothing of the index changes, so
 * there is nothing to undo. */
static kvs_status run_restore(kvs_pool_prefix *p, const op_call *c, kvs_error *err) {
  const kvs_prefix_rec *r = c->r;
  uint64_t operand = (uint64_t)c->b;
  uint64_t window_page = operand & UINT32_MAX, slot = operand >> 33;
  if (r->used != 1 || !r->tail || r->writer >= 0 || c->b < 0 ||
      window_page + 1 >= p->shape.window_pages || slot + 1 >= p->shape.request_slots ||
      ((operand >> 32) & 1) != restore_half(p, r->depth)) {
    return REFUSE(
        "prefix entry restores block %d's tail state (window page %llu) into "
        "request slot %llu, but %s",
        c->n, (unsigned long long)window_page, (unsigned long long)slot,
        r->used != 1 || !r->tail || r->writer >= 0
            ? "the block has no readable tail"
            : "the operand does not fit this pool or this block");
  }
  return KVS_OK;
}

static const struct {
  kvs_status (*run)(kvs_pool_prefix *p, const op_call *c, kvs_error *err);
  void (*undo)(kvs_pool_prefix *p, const op_call *c);
} OPS[OP_COUNT] = {
    [OP_NEW_KEY] = {run_new_key, undo_new_key}, [OP_NEW_LINK] = {run_new_link, undo_new_link},
    [OP_ACQUIRE] = {run_acquire, undo_acquire}, [OP_RELEASE] = {run_release, undo_release},
    [OP_TAIL] = {run_tail, undo_tail},          [OP_WDONE] = {run_wdone, undo_wdone},
    [OP_UNTAIL] = {run_untail, undo_untail},    [OP_EVICT] = {run_evict, undo_evict},
    [OP_SPILL] = {run_move, undo_move},         [OP_FETCH] = {run_move, undo_move},
    [OP_RESTORE] = {run_restore, NULL},         [OP_STORE] = {run_disk, undo_disk},
    [OP_LOAD] = {run_disk, undo_disk},
};

/* ---- running and undoing an entry ---- */

/* Applies one entry, the clock advanced first (so every node's birth is
 * unique); u (may be NULL) records what undo needs. */
static kvs_status op_run(kvs_pool_prefix *p, const kvs_journal_entry *e, kvs_prefix_undo *u,
                         kvs_error *err) {
  unsigned op = entry_op(e);
  uint64_t a = e->full_page & A_MASK;
  const char *unusable = kvs_pool_prefix_unusable(p, (int64_t)a); /* a < 2^56 */
  if (unusable != NULL) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "prefix entry (op %u) names full page %llu, %s",
                         op, (unsigned long long)a, unusable);
  }
  op_call c = {op, (int32_t)a, &p->rec[a], e->window_page, u};
  p->clock++;
  if (u != NULL) {
    u->entry = *e;
    u->saved = *c.r;
    u->hold_node = -2;
    u->hold_writing = -2;
  }
  if (op >= OP_COUNT || OPS[op].run == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "prefix entry has unknown op %u", op);
  }
  return OPS[op].run(p, &c, err);
}

/* Applies one entry; on refusal nothing changed, the clock included (a
 * refused operation on one rank must not shift the births of the next
 * nodes against another rank's). */
static kvs_status op_apply(kvs_pool_prefix *p, const kvs_journal_entry *e, kvs_prefix_undo *u,
                           kvs_error *err) {
  uint64_t clock = p->clock;
  kvs_status status = op_run(p, e, u, err);
  if (status != KVS_OK) p->clock = clock;
  return status;
}

kvs_status kvs_pool_prefix_run(kvs_pool_prefix *p, const kvs_journal_entry *entry, kvs_error *err) {
  return op_apply(p, entry, NULL, err);
}

/* Undoes one applied entry (the reverse of op_apply, exactly). */
static void op_undo(kvs_pool_prefix *p, kvs_prefix_undo *u) {
  p->clock--;
  unsigned op = entry_op(&u->entry);
  uint64_t a = u->entry.full_page & A_MASK;
  op_call c = {op, (int32_t)a, &p->rec[a], u->entry.window_page, u};
  if (op < OP_COUNT && OPS[op].undo != NULL) OPS[op].undo(p, &c);
}

/* Why the batch, applied, leaves the index as no leader's step does (NULL:
 * it does not), and *page the block: a block started and never linked (a
 * leader journals both in one call), or a tail on a page the batch names
 * that keeps no window page (its bind lost, or its window page freed
 * while the tail stays). */
static const char *unfinished(const kvs_pool_prefix *p, size_t done,
                              const kvs_journal_entry *entries, size_t n,
                              kvs_prefix_window_of window_of, const void *ctx, uint64_t *page) {
  for (size_t i = 0; i < done; i++) {
    *page = p->undo[i].entry.full_page & A_MASK;
    if (entry_op(&p->undo[i].entry) == OP_NEW_KEY && p->rec[*page].used == 2) {
      return "starts block %llu and never links it";
    }
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t fp = entries[i].full_page;
    bool prefix = (fp & KVS_JOURNAL_PREFIX_TAG) == KVS_JOURNAL_PREFIX_TAG;
    if (!prefix && (fp & KVS_JOURNAL_SLOT_TAG)) continue; /* a request slot */
    *page = prefix ? fp & A_MASK : fp;
    if (*page < p->n && p->rec[*page].used == 1 && p->rec[*page].tail &&
        window_of(ctx, *page) < 0) {
      return "leaves block %llu keeping a tail on a full page with no window page";
    }
  }
  return NULL;
}

/* Undoes the done applied entries and says which entry refused why. */
static kvs_status refuse_batch(kvs_pool_prefix *p, size_t done, kvs_status status, size_t i,
                               kvs_error *err) {
  while (done-- > 0) op_undo(p, &p->undo[done]);
  if (err != NULL) {
    char message[KVS_ERROR_MESSAGE_MAX];
    snprintf(message, sizeof message, "%s", err->message);
    kvs_error_set(err, status, "journal entry %zu: %s", i, message);
  }
  return status;
}

kvs_status kvs_pool_prefix_apply(kvs_pool_prefix *p, const kvs_journal_entry *entries, size_t n,
                                 kvs_prefix_window_of window_of, const void *ctx, kvs_error *err) {
  size_t done = 0;
  for (size_t i = 0; i < n; i++) {
    const kvs_journal_entry *e = &entries[i];
    if ((e->full_page & KVS_JOURNAL_PREFIX_TAG) != KVS_JOURNAL_PREFIX_TAG) continue;
    kvs_status status;
    if (p->n == 0) {
      status = kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                             "journal entry %zu is a prefix-cache entry; this rank's pool has "
                             "no prefix cache",
                             i);
    } else if (done >= p->undo_cap) {
      status = kvs_error_set(err, KVS_ERR_JOURNAL_FULL,
                             "a step carries more than %zu prefix entries", p->undo_cap);
    } else {
      status = op_apply(p, e, &p->undo[done], err);
    }
    if (status != KVS_OK) return refuse_batch(p, done, status, i, err);
    done++;
  }
  /* The step is whole: it leaves the index as a leader's step does. */
  uint64_t page = 0;
  const char *why = unfinished(p, done, entries, n, window_of, ctx, &page);
  if (why != NULL) {
    while (done-- > 0) op_undo(p, &p->undo[done]);
    char what[128];
    snprintf(what, sizeof what, why, (unsigned long long)page);
    return kvs_error_set(err, KVS_ERR_CONFLICT, "the step %s (an entry lost or changed?)", what);
  }
  return KVS_OK;
}

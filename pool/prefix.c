/* The window pool's prefix cache: the index of cached full pages (one node
 * per page, named by it), the requests' holds, the evictable lists, the
 * index's share of the digest and its integrity check. Every change is one
 * operation below, run the same way by the leader (window_pool_prefix.c,
 * which then journals the entry) and by a follower replaying the entry, so
 * both hold the same index; a replayed batch that stops applying is undone
 * entry by entry. */
#include "pool/prefix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mix.h"

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
  OP_RESTORE = KVS_PREFIX_OP_RESTORE
};

#define OP_SHIFT 56
#define A_MASK ((UINT64_C(1) << OP_SHIFT) - 1)

kvs_journal_entry kvs_prefix_entry(kvs_prefix_op op, uint64_t page, int64_t operand) {
  kvs_journal_entry e = {KVS_JOURNAL_PREFIX_TAG | ((uint64_t)op << OP_SHIFT) | (page & A_MASK),
                         operand};
  return e;
}
static unsigned entry_op(const kvs_journal_entry *e) {
  return (unsigned)((e->full_page >> OP_SHIFT) & 0x3f);
}

const char *kvs_pool_prefix_unusable(const kvs_pool_prefix *p, int64_t page) {
  if (page < 0 || (uint64_t)page >= p->n) return "outside the history";
  if ((uint64_t)page == p->shape.full_pages - 1) return "the reserved dummy page";
  return NULL;
}

uint64_t kvs_pool_prefix_chain_of(const kvs_pool_prefix *p, int32_t node) {
  return node >= 0 ? p->rec[node].chain : KVS_PREFIX_ROOT_CHAIN;
}

kvs_prefix_op kvs_window_pool_prefix_entry(const kvs_journal_entry *entry, uint64_t *page,
                                           int64_t *operand) {
  if (entry == NULL || (entry->full_page & KVS_JOURNAL_PREFIX_TAG) != KVS_JOURNAL_PREFIX_TAG) {
    return KVS_PREFIX_OP_NONE;
  }
  unsigned op = entry_op(entry);
  if (op < OP_NEW_KEY || op > OP_RESTORE) return KVS_PREFIX_OP_NONE;
  if (page != NULL) *page = entry->full_page & A_MASK;
  if (operand != NULL) *operand = entry->window_page;
  return (kvs_prefix_op)op;
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

/* ---- digest ---- */

static uint64_t node_term(uint64_t fp, const kvs_prefix_rec *r) {
  if (r->used != 1) return 0;
  uint64_t h = kvs_mix64(fp + 0x51ed27, r->key);
  h = kvs_mix64(h, (uint64_t)(int64_t)r->parent);
  h = kvs_mix64(h, r->refs);
  h = kvs_mix64(h, r->tail);
  h = kvs_mix64(h, (uint64_t)r->writer);
  return kvs_splitmix64_finalise(h);
}

uint64_t kvs_pool_prefix_digest_range(const kvs_pool_prefix *prefix, uint64_t first, uint64_t end) {
  if (end > prefix->n) end = prefix->n;
  uint64_t d = 0;
  for (uint64_t fp = first; fp < end; fp++) d += node_term(fp, &prefix->rec[fp]);
  return d;
}

/* ---- hash maps ---- */

static uint64_t map_hash(int32_t parent, uint64_t key) {
  return kvs_splitmix64_finalise(key ^ ((uint64_t)(uint32_t)(parent + 1) << 17));
}

/* The key map's items are nodes, hashed by their parent and key. */
static uint64_t node_hash(const void *ctx, uint64_t node) {
  const kvs_pool_prefix *p = ctx;
  return map_hash(p->rec[node].parent, p->rec[node].key);
}

int32_t kvs_pool_prefix_child(const kvs_pool_prefix *p, int32_t parent, uint64_t key) {
  const kvs_probe_map *map = &p->map;
  for (uint64_t at = kvs_probe_start(map, map_hash(parent, key)); map->item[at] != KVS_PROBE_EMPTY;
       at = kvs_probe_next(map, at)) {
    const kvs_prefix_rec *r = &p->rec[map->item[at]];
    if (r->key == key && r->parent == parent) return (int32_t)map->item[at];
  }
  return -1;
}

static void map_insert(kvs_pool_prefix *p, int32_t node) {
  kvs_probe_map_insert(&p->map, node_hash(p, (uint64_t)node), (uint64_t)node, 0);
}

static void map_erase(kvs_pool_prefix *p, int32_t node) {
  uint64_t at = kvs_probe_map_find(&p->map, node_hash(p, (uint64_t)node), (uint64_t)node);
  kvs_probe_map_erase(&p->map, at, node_hash, p);
}

/* The holds map's items are requests, hashed by themselves; each one's
 * value is its hold's index. */
static uint64_t request_hash(const void *ctx, uint64_t request) {
  (void)ctx;
  return kvs_splitmix64_finalise(request);
}

/* The index of request's hold, or -1. */
int64_t kvs_pool_prefix_hold_of(const kvs_pool_prefix *p, uint64_t request) {
  uint64_t at = kvs_probe_map_find(&p->holds_map, request_hash(NULL, request), request);
  return at == KVS_PROBE_NONE ? -1 : (int64_t)p->holds_map.value[at];
}

static void hold_put(kvs_pool_prefix *p, uint64_t request, int32_t node, int32_t writing) {
  int64_t h = kvs_pool_prefix_hold_of(p, request);
  if (h < 0) {
    h = (int64_t)p->holds++;
    p->hold[h].request = request;
    kvs_probe_map_insert(&p->holds_map, request_hash(NULL, request), request, (uint64_t)h);
  }
  p->hold[h].node = node;
  p->hold[h].writing = writing;
}

/* Drops request's hold; the last hold takes its index. */
static void hold_erase(kvs_pool_prefix *p, uint64_t request) {
  uint64_t at = kvs_probe_map_find(&p->holds_map, request_hash(NULL, request), request);
  if (at == KVS_PROBE_NONE) return;
  uint64_t h = p->holds_map.value[at];
  kvs_probe_map_erase(&p->holds_map, at, request_hash, NULL);
  uint64_t last = --p->holds;
  if (h == last) return;
  p->hold[h] = p->hold[last];
  uint64_t moved = p->hold[h].request;
  p->holds_map.value[kvs_probe_map_find(&p->holds_map, request_hash(NULL, moved), moved)] = h;
}

/* ---- evictable lists (least recently released at the head) ---- */

static void list_remove(kvs_pool_prefix *p, int32_t n, bool tails) {
  kvs_prefix_rec *r = &p->rec[n];
  int32_t prev = tails ? r->tail_prev : r->leaf_prev, next = tails ? r->tail_next : r->leaf_next;
  int32_t *head = tails ? &p->tail_head : &p->leaf_head;
  int32_t *tail = tails ? &p->tail_tail : &p->leaf_tail;
  if (prev >= 0) {
    if (tails)
      p->rec[prev].tail_next = next;
    else
      p->rec[prev].leaf_next = next;
  } else {
    *head = next;
  }
  if (next >= 0) {
    if (tails)
      p->rec[next].tail_prev = prev;
    else
      p->rec[next].leaf_prev = prev;
  } else {
    *tail = prev;
  }
  if (tails)
    r->in_tail = 0;
  else
    r->in_leaf = 0;
}

#define PREV(p, n, tails) ((tails) ? (p)->rec[n].tail_prev : (p)->rec[n].leaf_prev)

/* Inserts n into a list in order of used_at (least recent at the head):
 * a node released now goes to the tail; a parent a leaf's eviction left
 * childless, last used when its subtree was, goes back as far as that
 * (a bounded walk from the tail, then the head when older than it). */
static void list_append(kvs_pool_prefix *p, int32_t n, bool tails) {
  kvs_prefix_rec *r = &p->rec[n];
  int32_t *head = tails ? &p->tail_head : &p->leaf_head;
  int32_t *tail = tails ? &p->tail_tail : &p->leaf_tail;
  int32_t after = *tail; /* insert after this one (-1: at the head) */
  if (*head >= 0 && r->used_at < p->rec[*head].used_at) {
    after = -1;
  } else {
    for (int steps = 0; after >= 0 && p->rec[after].used_at > r->used_at && steps < 256; steps++) {
      after = PREV(p, after, tails);
    }
  }
  int32_t next = after >= 0 ? (tails ? p->rec[after].tail_next : p->rec[after].leaf_next) : *head;
  if (tails) {
    r->tail_prev = after;
    r->tail_next = next;
    r->in_tail = 1;
  } else {
    r->leaf_prev = after;
    r->leaf_next = next;
    r->in_leaf = 1;
  }
  if (after >= 0) {
    if (tails)
      p->rec[after].tail_next = n;
    else
      p->rec[after].leaf_next = n;
  } else {
    *head = n;
  }
  if (next >= 0) {
    if (tails)
      p->rec[next].tail_prev = n;
    else
      p->rec[next].leaf_prev = n;
  } else {
    *tail = n;
  }
}

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
    if (tail)
      list_append(p, n, true);
    else
      list_remove(p, n, true);
  }
}

/* ---- lifecycle ---- */

static uint64_t gcd_u64(uint64_t a, uint64_t b) {
  while (b != 0) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

kvs_status kvs_pool_prefix_init(kvs_pool_prefix *p, const kvs_prefix_shape *shape,
                                uint64_t align_tokens, uint64_t max_running, size_t undo_cap,
                                uint64_t host_slots, kvs_error *err) {
  memset(p, 0, sizeof *p);
  p->host.head = p->host.tail = -1;
  p->shape = *shape;
  if (shape->full_pages >= (UINT64_C(1) << 30)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a prefix cache indexes at most 2^30 full pages, the pool has %llu",
                         (unsigned long long)shape->full_pages);
  }
  if (align_tokens == 0) align_tokens = 1;
  uint64_t lcm = align_tokens / gcd_u64(align_tokens, shape->page) * shape->page;
  uint64_t n = shape->full_pages;
  uint64_t max_holds = (max_running > 0 ? max_running : 1) * 2 + 2;
  p->align_pages = lcm / shape->page;
  p->max_holds = max_holds;
  p->undo_cap = undo_cap > 0 ? undo_cap : 4096;
  p->rec = calloc((size_t)n, sizeof *p->rec);
  bool map = kvs_probe_map_init(&p->map, n, false);
  bool holds_map = kvs_probe_map_init(&p->holds_map, max_holds, true);
  p->hold = calloc((size_t)max_holds, sizeof *p->hold);
  p->scratch = calloc((size_t)n, sizeof *p->scratch);
  p->undo = calloc(p->undo_cap, sizeof *p->undo);
  if (p->rec == NULL || !map || !holds_map || p->hold == NULL || p->scratch == NULL ||
      p->undo == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %llu-page prefix index",
                         (unsigned long long)n);
  }
  for (uint64_t i = 0; i < n; i++) {
    p->rec[i].parent = -1;
    p->rec[i].writer = -1;
    p->rec[i].leaf_prev = p->rec[i].leaf_next = -1;
    p->rec[i].tail_prev = p->rec[i].tail_next = -1;
  }
  p->leaf_head = p->leaf_tail = p->tail_head = p->tail_tail = -1;
  kvs_status status = kvs_pool_host_init(&p->host, host_slots, err);
  if (status != KVS_OK) return status;
  p->n = n;
  return KVS_OK;
}

void kvs_pool_prefix_free(kvs_pool_prefix *p) {
  free(p->rec);
  kvs_probe_map_free(&p->map);
  kvs_probe_map_free(&p->holds_map);
  free(p->hold);
  free(p->scratch);
  free(p->undo);
  kvs_pool_host_free(&p->host);
  memset(p, 0, sizeof *p);
}

/* ---- the operations (leader and replay alike) ---- */

#define REFUSE(...) kvs_error_set(err, KVS_ERR_CONFLICT, __VA_ARGS__)

static void set_refs_path(kvs_pool_prefix *p, int32_t n, int delta) {
  for (int32_t at = n; at >= 0; at = p->rec[at].parent) {
    p->digest -= node_term((uint64_t)at, &p->rec[at]);
    p->rec[at].refs = (uint32_t)((int64_t)p->rec[at].refs + delta);
    p->rec[at].used_at = p->clock;
    p->digest += node_term((uint64_t)at, &p->rec[at]);
    p->refs_sum = (uint64_t)((int64_t)p->refs_sum + delta);
    relist(p, at);
  }
}

/* Applies one entry, the clock advanced first (so every node's birth is
 * unique); u (may be NULL) records what undo needs. */
static kvs_status op_run(kvs_pool_prefix *p, const kvs_journal_entry *e, kvs_prefix_undo *u,
                         kvs_error *err) {
  unsigned op = entry_op(e);
  uint64_t a = e->full_page & A_MASK;
  int64_t b = e->window_page;
  const char *unusable = kvs_pool_prefix_unusable(p, (int64_t)a); /* a < 2^56 */
  if (unusable != NULL) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "prefix entry (op %u) names full page %llu, %s",
                         op, (unsigned long long)a, unusable);
  }
  int32_t n = (int32_t)a;
  kvs_prefix_rec *r = &p->rec[n];
  p->clock++;
  if (u != NULL) {
    u->entry = *e;
    u->saved = *r;
    u->hold_node = -2;
    u->hold_writing = -2;
  }
  switch (op) {
    case OP_NEW_KEY:
      if (r->used != 0) return REFUSE("prefix entry starts block %d, which is cached", n);
      r->used = 2;
      r->key = (uint64_t)b;
      return KVS_OK;
    case OP_NEW_LINK: {
      if (r->used != 2) return REFUSE("prefix entry links block %d, which was not started", n);
      if (b < -1 || b >= (int64_t)p->n || b == n || (b >= 0 && p->rec[b].used != 1)) {
        return REFUSE("prefix entry links block %d under %lld, which is not cached", n,
                      (long long)b);
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
      map_insert(p, n);
      p->nodes++;
      if (b >= 0) {
        p->digest -= node_term((uint64_t)b, &p->rec[b]);
        p->rec[b].children++;
        p->digest += node_term((uint64_t)b, &p->rec[b]);
        relist(p, (int32_t)b);
      }
      p->digest += node_term((uint64_t)n, r);
      relist(p, n);
      return KVS_OK;
    }
    case OP_ACQUIRE: {
      if (r->used != 1) return REFUSE("prefix entry acquires block %d, which is not cached", n);
      if (b < 0) return REFUSE("prefix entry acquires block %d for request %lld", n, (long long)b);
      int64_t h = kvs_pool_prefix_hold_of(p, (uint64_t)b);
      if (h >= 0 && p->hold[h].node >= 0) {
        return REFUSE("request %lld holds block %d already", (long long)b, p->hold[h].node);
      }
      if (h < 0 && p->holds >= p->max_holds) {
        return kvs_error_set(err, KVS_ERR_EXHAUSTED, "%llu requests hold prefixes already",
                             (unsigned long long)p->holds);
      }
      if (u != NULL && h >= 0) {
        u->hold_node = p->hold[h].node;
        u->hold_writing = p->hold[h].writing;
      }
      hold_put(p, (uint64_t)b, n, h >= 0 ? p->hold[h].writing : -1);
      set_refs_path(p, n, +1);
      return KVS_OK;
    }
    case OP_RELEASE: {
      int64_t h = b >= 0 ? kvs_pool_prefix_hold_of(p, (uint64_t)b) : -1;
      if (r->used != 1 || h < 0 || p->hold[h].node != n) {
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
      if (u != NULL) {
        u->hold_node = p->hold[h].node;
        u->hold_writing = p->hold[h].writing;
      }
      if (p->hold[h].writing >= 0) {
        p->hold[h].node = -1;
      } else {
        hold_erase(p, (uint64_t)b);
      }
      set_refs_path(p, n, -1);
      return KVS_OK;
    }
    case OP_TAIL: {
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
      p->digest -= node_term((uint64_t)n, r);
      r->tail = 1;
      r->writer = b;
      p->digest += node_term((uint64_t)n, r);
      p->tails++;
      if (h >= 0) p->hold[h].writing = n;
      relist(p, n);
      return KVS_OK;
    }
    case OP_WDONE: {
      int64_t h = b >= 0 ? kvs_pool_prefix_hold_of(p, (uint64_t)b) : -1;
      if (r->used != 1 || !r->tail || r->writer != b || h < 0 || p->hold[h].writing != n) {
        return REFUSE(
            "prefix entry ends request %lld's write of block %d's tail, which it "
            "does not write",
            (long long)b, n);
      }
      if (u != NULL) {
        u->hold_node = p->hold[h].node;
        u->hold_writing = p->hold[h].writing;
      }
      p->digest -= node_term((uint64_t)n, r);
      r->writer = -1;
      p->digest += node_term((uint64_t)n, r);
      if (p->hold[h].node < 0) {
        hold_erase(p, (uint64_t)b);
      } else {
        p->hold[h].writing = -1;
      }
      relist(p, n);
      return KVS_OK;
    }
    case OP_UNTAIL:
      if (r->used != 1 || !r->tail || r->writer >= 0) {
        return REFUSE("prefix entry drops block %d's tail, which is %s", n,
                      r->used != 1 ? "not cached"
                      : !r->tail   ? "absent"
                                   : "being written");
      }
      p->digest -= node_term((uint64_t)n, r);
      r->tail = 0;
      p->digest += node_term((uint64_t)n, r);
      p->tails--;
      p->tail_drops++;
      relist(p, n);
      return KVS_OK;
    case OP_EVICT: {
      if (r->used != 1 || r->key != (uint64_t)b || r->refs != 0 || r->children != 0 || r->tail) {
        return REFUSE("prefix entry evicts block %d (key %llu), which is %s", n,
                      (unsigned long long)b,
                      r->used != 1            ? "not cached"
                      : r->key != (uint64_t)b ? "another key"
                      : r->refs               ? "referenced"
                      : r->children           ? "not a leaf"
                                              : "holding a tail");
      }
      p->digest -= node_term((uint64_t)n, r);
      int32_t parent = r->parent;
      if (r->in_leaf) {
        list_remove(p, n, false);
        p->evictable--;
      }
      if (r->in_tail) list_remove(p, n, true);
      map_erase(p, n);
      r->used = 0;
      p->nodes--;
      p->evictions++;
      if (parent >= 0) {
        p->digest -= node_term((uint64_t)parent, &p->rec[parent]);
        p->rec[parent].children--;
        p->digest += node_term((uint64_t)parent, &p->rec[parent]);
        relist(p, parent);
      }
      return KVS_OK;
    }
    case OP_RESTORE: {
      /* The slot is the pool's (checked in order with the slots' entries,
       * seeded there); here the block: a readable tail at this depth. */
      uint64_t operand = (uint64_t)b;
      uint64_t window_page = operand & UINT32_MAX, slot = operand >> 33;
      if (r->used != 1 || !r->tail || r->writer >= 0 || b < 0 ||
          window_page + 1 >= p->shape.window_pages || slot + 1 >= p->shape.request_slots ||
          ((operand >> 32) & 1) != restore_half(p, r->depth)) {
        return REFUSE(
            "prefix entry restores block %d's tail state (window page %llu) into "
            "request slot %llu, but %s",
            n, (unsigned long long)window_page, (unsigned long long)slot,
            r->used != 1 || !r->tail || r->writer >= 0
                ? "the block has no readable tail"
                : "the operand does not fit this pool or this block");
      }
      return KVS_OK;
    }
    case OP_SPILL:
    case OP_FETCH: {
      if (r->used != 1) {
        return REFUSE("prefix entry %s block %d, which is not cached",
                      op == OP_SPILL ? "spills" : "fetches", n);
      }
      if (op == OP_SPILL && (r->refs != 0 || r->children != 0)) {
        return REFUSE("prefix entry spills block %d, which is %s", n,
                      r->refs != 0 ? "referenced" : "not a leaf");
      }
      kvs_host_rec saved;
      uint64_t slot = (uint64_t)b;
      kvs_status status =
          op == OP_SPILL ? kvs_pool_host_spill(&p->host, slot, r->chain, p->clock, &saved, err)
                         : kvs_pool_host_fetch(&p->host, slot, r->chain, p->clock, &saved, err);
      if (status == KVS_OK && u != NULL) u->host_saved = saved;
      return status;
    }
    default:
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "prefix entry has unknown op %u", op);
  }
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
static void op_undo(kvs_pool_prefix *p, const kvs_prefix_undo *u) {
  p->clock--;
  unsigned op = entry_op(&u->entry);
  int32_t n = (int32_t)(u->entry.full_page & A_MASK);
  int64_t b = u->entry.window_page;
  kvs_prefix_rec *r = &p->rec[n];
  switch (op) {
    case OP_NEW_KEY:
      r->used = 0;
      break;
    case OP_NEW_LINK:
      p->digest -= node_term((uint64_t)n, r);
      if (r->in_leaf) {
        list_remove(p, n, false);
        p->evictable--;
      }
      map_erase(p, n);
      p->nodes--;
      if (r->parent >= 0) {
        int32_t q = r->parent;
        p->digest -= node_term((uint64_t)q, &p->rec[q]);
        p->rec[q].children--;
        p->digest += node_term((uint64_t)q, &p->rec[q]);
        relist(p, q);
      }
      r->used = 2;
      r->parent = -1;
      break;
    case OP_ACQUIRE:
      set_refs_path(p, n, -1);
      if (u->hold_node == -2) {
        hold_erase(p, (uint64_t)b);
      } else {
        hold_put(p, (uint64_t)b, (int32_t)u->hold_node, (int32_t)u->hold_writing);
      }
      break;
    case OP_RELEASE:
      set_refs_path(p, n, +1);
      hold_put(p, (uint64_t)b, (int32_t)u->hold_node, (int32_t)u->hold_writing);
      break;
    case OP_TAIL:
      p->digest -= node_term((uint64_t)n, r);
      r->tail = 0;
      r->writer = -1;
      p->digest += node_term((uint64_t)n, r);
      p->tails--;
      if (b >= 0) {
        int64_t h = kvs_pool_prefix_hold_of(p, (uint64_t)b);
        if (h >= 0) p->hold[h].writing = -1;
      }
      relist(p, n);
      break;
    case OP_WDONE:
      p->digest -= node_term((uint64_t)n, r);
      r->writer = b;
      p->digest += node_term((uint64_t)n, r);
      hold_put(p, (uint64_t)b, (int32_t)u->hold_node, (int32_t)u->hold_writing);
      relist(p, n);
      break;
    case OP_UNTAIL:
      p->digest -= node_term((uint64_t)n, r);
      r->tail = 1;
      p->digest += node_term((uint64_t)n, r);
      p->tails++;
      p->tail_drops--;
      relist(p, n);
      break;
    case OP_EVICT: {
      *r = u->saved;
      r->in_leaf = r->in_tail = 0;
      map_insert(p, n);
      p->nodes++;
      p->evictions--;
      if (r->parent >= 0) {
        int32_t q = r->parent;
        p->digest -= node_term((uint64_t)q, &p->rec[q]);
        p->rec[q].children++;
        p->digest += node_term((uint64_t)q, &p->rec[q]);
        relist(p, q);
      }
      p->digest += node_term((uint64_t)n, r);
      relist(p, n);
      break;
    }
    case OP_SPILL:
    case OP_FETCH:
      kvs_pool_host_undo(&p->host, (uint64_t)b, op == OP_SPILL, &u->host_saved);
      break;
    default:
      break;
  }
}

kvs_status kvs_pool_prefix_apply(kvs_pool_prefix *p, const kvs_journal_entry *entries, size_t n,
                                 kvs_error *err) {
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
    if (status != KVS_OK) {
      while (done-- > 0) op_undo(p, &p->undo[done]);
      if (err != NULL) {
        char message[KVS_ERROR_MESSAGE_MAX];
        snprintf(message, sizeof message, "%s", err->message);
        kvs_error_set(err, status, "journal entry %zu: %s", i, message);
      }
      return status;
    }
    done++;
  }
  return KVS_OK;
}

/* ---- integrity ---- */

kvs_status kvs_pool_prefix_check(const kvs_pool_prefix *p, const int64_t *mapping, kvs_error *err) {
  uint32_t *count = p->scratch; /* holds through each node, then children */
  memset(count, 0, (size_t)p->n * sizeof *count);
  uint64_t nodes = 0, tails = 0, refs = 0;
  for (uint64_t fp = 0; fp < p->n; fp++) {
    const kvs_prefix_rec *r = &p->rec[fp];
    if (r->used == 0) continue;
    if (r->used != 1) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY, "cached block %llu was started, never linked",
                           (unsigned long long)fp);
    }
    nodes++;
    tails += r->tail;
    refs += r->refs;
    if (r->parent >= 0 && ((uint64_t)r->parent >= p->n || p->rec[r->parent].used != 1)) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "cached block %llu (key %llu) hangs under block %d, which is not "
                           "cached",
                           (unsigned long long)fp, (unsigned long long)r->key, r->parent);
    }
    if (kvs_pool_prefix_child(p, r->parent, r->key) != (int32_t)fp) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "cached block %llu (key %llu) is not where the key map finds it",
                           (unsigned long long)fp, (unsigned long long)r->key);
    }
    if (r->chain != kvs_prefix_chain(kvs_pool_prefix_chain_of(p, r->parent), r->key)) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "cached block %llu (key %llu) carries a chain that is not its path's",
                           (unsigned long long)fp, (unsigned long long)r->key);
    }
    if (r->tail && mapping[fp * p->shape.page] < 0) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "cached block %llu (key %llu) keeps a tail but its full page has no "
                           "window page bound",
                           (unsigned long long)fp, (unsigned long long)r->key);
    }
  }
  /* Conservation: every reference is a hold through the node. */
  uint64_t holds = 0;
  for (uint64_t i = 0; i <= p->holds_map.mask; i++) {
    if (p->holds_map.item[i] == KVS_PROBE_EMPTY) continue;
    holds++;
    const kvs_prefix_hold *hold = &p->hold[p->holds_map.value[i]];
    int32_t w = hold->writing;
    if (w >= 0 && (p->rec[w].used != 1 || p->rec[w].writer != (int64_t)hold->request)) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "request %llu writes block %d's tail, which does not name it",
                           (unsigned long long)hold->request, w);
    }
    for (int32_t at = hold->node; at >= 0; at = p->rec[at].parent) {
      if (p->rec[at].used != 1) {
        return kvs_error_set(err, KVS_ERR_INTEGRITY,
                             "request %llu holds a path through block %d, which is not cached",
                             (unsigned long long)hold->request, at);
      }
      count[at]++;
    }
  }
  if (holds != p->holds) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY, "the prefix index counts %llu holds, finds %llu",
                         (unsigned long long)p->holds, (unsigned long long)holds);
  }
  for (uint64_t fp = 0; fp < p->n; fp++) {
    const kvs_prefix_rec *r = &p->rec[fp];
    if (r->used != 1) continue;
    if (count[fp] != r->refs) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "cached block %llu (key %llu) counts %u references, the requests' "
                           "holds account for %u",
                           (unsigned long long)fp, (unsigned long long)r->key, r->refs, count[fp]);
    }
    if (r->writer >= 0) {
      int64_t h = kvs_pool_prefix_hold_of(p, (uint64_t)r->writer);
      if (h < 0 || p->hold[h].writing != (int32_t)fp) {
        return kvs_error_set(err, KVS_ERR_INTEGRITY,
                             "cached block %llu's tail is written by request %lld, which holds "
                             "no such write",
                             (unsigned long long)fp, (long long)r->writer);
      }
    }
  }
  /* The running totals. */
  if (nodes != p->nodes || tails != p->tails || refs != p->refs_sum) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the prefix index counts %llu blocks, %llu tails and %llu references; "
                         "its records hold %llu, %llu and %llu",
                         (unsigned long long)p->nodes, (unsigned long long)p->tails,
                         (unsigned long long)p->refs_sum, (unsigned long long)nodes,
                         (unsigned long long)tails, (unsigned long long)refs);
  }
  /* Children counts. */
  memset(count, 0, (size_t)p->n * sizeof *count);
  for (uint64_t fp = 0; fp < p->n; fp++) {
    if (p->rec[fp].used == 1 && p->rec[fp].parent >= 0) count[p->rec[fp].parent]++;
  }
  for (uint64_t fp = 0; fp < p->n; fp++) {
    if (p->rec[fp].used == 1 && count[fp] != p->rec[fp].children) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "cached block %llu counts %u children, the index holds %u",
                           (unsigned long long)fp, p->rec[fp].children, count[fp]);
    }
  }
  return kvs_pool_host_check(&p->host, err);
}

/* ---- fault injection ---- */

void kvs_pool_prefix_add_refs(kvs_pool_prefix *p, uint64_t node, int32_t delta) {
  p->digest -= node_term(node, &p->rec[node]);
  p->rec[node].refs = (uint32_t)((int64_t)p->rec[node].refs + delta);
  p->digest += node_term(node, &p->rec[node]);
}

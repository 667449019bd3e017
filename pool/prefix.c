/* The window pool's prefix cache: the index of cached full pages (one node
 * per page, named by it), the requests' holds, the evictable lists, the
 * index's share of the digest and its integrity check. Every change is one
 * operation below, run the same way by the leader (which then journals the
 * entry) and by a follower replaying the entry, so both hold the same
 * index; a replayed batch that stops applying is undone entry by entry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mix.h"
#include "pool/pool_internal.h"

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

static uint64_t entry_a(unsigned op, uint64_t a) {
  return KVS_JOURNAL_PREFIX_TAG | ((uint64_t)op << OP_SHIFT) | (a & A_MASK);
}
static unsigned entry_op(const kvs_journal_entry *e) {
  return (unsigned)((e->full_page >> OP_SHIFT) & 0x3f);
}

/* Why full page `page` can hold no cached block (outside the history,
 * or the dummy), NULL when it can. */
static const char *unusable_page(const struct kvs_window_pool *pool, int64_t page) {
  if (page < 0 || (uint64_t)page >= pool->prefix.n) return "outside the history";
  if ((uint64_t)page * pool->page == pool->dummy_full_base) return "the reserved dummy page";
  return NULL;
}

/* The chain of the path down to node (-1: the root's). */
static uint64_t chain_of(const kvs_pool_prefix *p, int32_t node) {
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
static uint64_t restore_half(const struct kvs_window_pool *pool, uint64_t depth) {
  uint64_t h = (depth + 1) * pool->page;
  return ((h - KVS_TAIL_STATE_POSITIONS) % (2 * KVS_TAIL_STATE_POSITIONS)) /
         KVS_TAIL_STATE_POSITIONS;
}

static int64_t restore_operand(uint64_t slot, uint64_t half, uint64_t window_page) {
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

static int32_t map_find(const kvs_pool_prefix *p, int32_t parent, uint64_t key) {
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
static int64_t hold_find(const kvs_pool_prefix *p, uint64_t request) {
  uint64_t at = kvs_probe_map_find(&p->holds_map, request_hash(NULL, request), request);
  return at == KVS_PROBE_NONE ? -1 : (int64_t)p->holds_map.value[at];
}

static void hold_put(kvs_pool_prefix *p, uint64_t request, int32_t node, int32_t writing) {
  int64_t h = hold_find(p, request);
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

kvs_status kvs_pool_prefix_init(struct kvs_window_pool *pool, uint64_t align_tokens,
                                uint64_t max_running, size_t undo_cap, uint64_t host_slots,
                                kvs_error *err) {
  kvs_pool_prefix *p = &pool->prefix;
  memset(p, 0, sizeof *p);
  p->host.head = p->host.tail = -1;
  if (pool->n_full_pages >= (UINT64_C(1) << 30)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a prefix cache indexes at most 2^30 full pages, the pool has %llu",
                         (unsigned long long)pool->n_full_pages);
  }
  if (align_tokens == 0) align_tokens = 1;
  uint64_t lcm = align_tokens / gcd_u64(align_tokens, pool->page) * pool->page;
  uint64_t n = pool->n_full_pages;
  uint64_t max_holds = (max_running > 0 ? max_running : 1) * 2 + 2;
  p->align_pages = lcm / pool->page;
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
static kvs_status op_run(struct kvs_window_pool *pool, const kvs_journal_entry *e,
                         kvs_prefix_undo *u, kvs_error *err) {
  kvs_pool_prefix *p = &pool->prefix;
  unsigned op = entry_op(e);
  uint64_t a = e->full_page & A_MASK;
  int64_t b = e->window_page;
  const char *unusable = unusable_page(pool, (int64_t)a); /* a < 2^56 */
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
      if (map_find(p, (int32_t)b, r->key) >= 0) {
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
      r->chain = kvs_prefix_chain(chain_of(p, (int32_t)b), r->key);
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
      int64_t h = hold_find(p, (uint64_t)b);
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
      int64_t h = b >= 0 ? hold_find(p, (uint64_t)b) : -1;
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
        h = hold_find(p, (uint64_t)b);
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
      int64_t h = b >= 0 ? hold_find(p, (uint64_t)b) : -1;
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
          window_page + 1 >= pool->n_win_pages || slot + 1 >= pool->slots.n ||
          ((operand >> 32) & 1) != restore_half(pool, r->depth)) {
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
static kvs_status op_apply(struct kvs_window_pool *pool, const kvs_journal_entry *e,
                           kvs_prefix_undo *u, kvs_error *err) {
  uint64_t clock = pool->prefix.clock;
  kvs_status status = op_run(pool, e, u, err);
  if (status != KVS_OK) pool->prefix.clock = clock;
  return status;
}

/* Undoes one applied entry (the reverse of op_apply, exactly). */
static void op_undo(struct kvs_window_pool *pool, const kvs_prefix_undo *u) {
  kvs_pool_prefix *p = &pool->prefix;
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
        int64_t h = hold_find(p, (uint64_t)b);
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

kvs_status kvs_pool_prefix_apply(struct kvs_window_pool *pool, const kvs_journal_entry *entries,
                                 size_t n, kvs_error *err) {
  kvs_pool_prefix *p = &pool->prefix;
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
      status = op_apply(pool, e, &p->undo[done], err);
    }
    if (status != KVS_OK) {
      while (done-- > 0) op_undo(pool, &p->undo[done]);
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

/* The leader's step: apply (it cannot be refused: the caller checked),
 * then journal. */
static kvs_status lead(struct kvs_window_pool *pool, unsigned op, uint64_t a, int64_t b,
                       kvs_error *err) {
  kvs_journal_entry e = {entry_a(op, a), b};
  kvs_status status = op_apply(pool, &e, NULL, err);
  if (status != KVS_OK) return status;
  kvs_pool_journal(pool, e.full_page, e.window_page);
  return KVS_OK;
}

/* ---- the leader's calls ---- */

static kvs_status need_prefix(const struct kvs_window_pool *pool, const char *call,
                              kvs_error *err) {
  if (pool == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", call);
  if (pool->prefix.n == 0) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "%s: this pool has no prefix cache (create it with prefix_cache)", call);
  }
  return KVS_OK;
}

/* A hit's stamp of node (-1: the root's, 0). */
static uint64_t stamp_of(const kvs_pool_prefix *p, int32_t node) {
  return node >= 0 ? p->rec[node].born : 0;
}

/* Why a hit no longer names what its match found (NULL: it does). Its
 * node must be the very block the match saw: cached, born when the stamp
 * says (a page evicted and cached again as any block, even under the same
 * keys, is a new birth), at the depth its tokens say. Its path above is
 * then unchanged too: a node with children is never evicted. */
static const char *stale_hit(const struct kvs_window_pool *pool, const kvs_prefix_hit *hit) {
  const kvs_pool_prefix *p = &pool->prefix;
  if (hit->node < 0) return hit->stamp == 0 ? NULL : "the root carries no stamp";
  if ((uint64_t)hit->node >= p->n || p->rec[hit->node].used != 1) return "is not cached";
  const kvs_prefix_rec *r = &p->rec[hit->node];
#ifndef KVS_MUTANT_HIT_NO_STAMP /* defined: planted bug (tests/mutants), a stale hit accepted */
  if (r->born != hit->stamp) return "is another block than the match found";
#endif
  if (hit->host_pages == 0 && hit->hit_tokens != ((uint64_t)r->depth + 1) * pool->page) {
    return "does not end where the hit's tokens say";
  }
  return NULL;
}

bool kvs_window_pool_prefix_enabled(const struct kvs_window_pool *pool) {
  return pool != NULL && pool->prefix.n > 0;
}

kvs_status kvs_window_pool_prefix_match(const struct kvs_window_pool *pool, const uint64_t *keys,
                                        size_t n, uint64_t prompt_tokens, uint64_t reprefill_tokens,
                                        kvs_prefix_hit *hit, int64_t *pages, kvs_error *err) {
  return kvs_window_pool_prefix_match_within(pool, keys, n, prompt_tokens, reprefill_tokens,
                                             UINT64_MAX, hit, pages, err);
}

kvs_status kvs_window_pool_prefix_match_within(const struct kvs_window_pool *pool,
                                               const uint64_t *keys, size_t n,
                                               uint64_t prompt_tokens, uint64_t reprefill_tokens,
                                               uint64_t max_host_pages, kvs_prefix_hit *hit,
                                               int64_t *pages, kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  if (hit == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: hit is NULL", __func__);
  if (keys == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: keys is NULL but n is %zu", __func__,
                         n);
  }
  const kvs_pool_prefix *p = &pool->prefix;
  uint64_t P = pool->page;
  memset(hit, 0, sizeof *hit);
  hit->node = -1;
  /* The boundary may not pass the prompt's last token: it is computed. */
  uint64_t cap = prompt_tokens > 0 ? (prompt_tokens - 1) / P : 0;
  int32_t cur = -1;
  int32_t best_exact = -1; /* deepest aligned node whose tail is readable */
  uint64_t exact_pages = 0, aligned_pages = 0;
  int32_t aligned_node = -1;
  for (size_t i = 0; i < n; i++) {
    int32_t next = map_find(p, cur, keys[i]);
    if (next < 0) break;
    cur = next;
    if (pages != NULL) pages[i] = next;
    uint64_t depth = i + 1;
    hit->matched_pages = depth;
    if (depth > cap || depth % p->align_pages != 0) continue;
    aligned_pages = depth;
    aligned_node = next;
    if (p->rec[next].tail && p->rec[next].writer < 0) {
      best_exact = next;
      exact_pages = depth;
    }
  }
  if (aligned_node >= 0) {
    uint64_t truncation = (aligned_pages - exact_pages) * P;
    const kvs_prefix_rec *deep = &p->rec[aligned_node];
    bool can_reprefill = reprefill_tokens > 0 && !deep->tail &&
                         kvs_pool_window_page_of(pool, (uint64_t)aligned_node) < 0 &&
                         reprefill_tokens <= aligned_pages * P;
    if (exact_pages == aligned_pages) {
      hit->node = best_exact;
      hit->hit_tokens = exact_pages * P;
    } else if (can_reprefill && reprefill_tokens < truncation) {
      hit->node = aligned_node;
      hit->hit_tokens = aligned_pages * P;
      hit->reprefill_tokens = reprefill_tokens;
      hit->reprefill = true;
    } else {
      hit->node = best_exact;
      hit->hit_tokens = exact_pages * P;
      hit->truncated_tokens = truncation;
    }
  }
  /* The host tier continues the path where the GPU index stops: the
   * blocks come back into fresh pages and the window is re-prefilled, so
   * the deeper boundary is taken only when it gains more than that. */
  uint64_t gpu_depth = hit->matched_pages;
  hit->stamp = stamp_of(p, (int32_t)hit->node);
  if (p->host.n == 0 || reprefill_tokens == 0 || gpu_depth >= n) return KVS_OK;
  uint64_t chain = chain_of(p, cur);
  uint64_t host_aligned = 0;
  for (size_t i = (size_t)gpu_depth; i < n && i - gpu_depth < max_host_pages; i++) {
    chain = kvs_prefix_chain(chain, keys[i]);
    if (kvs_pool_host_find(&p->host, chain) < 0) break;
    if (pages != NULL) pages[i] = -1;
    uint64_t depth = i + 1;
    hit->matched_pages = depth;
    if (depth <= cap && depth % p->align_pages == 0) host_aligned = depth;
  }
  uint64_t gpu_value = hit->hit_tokens - (hit->reprefill ? hit->reprefill_tokens : 0);
  if (host_aligned == 0 || reprefill_tokens > host_aligned * P ||
      host_aligned * P - reprefill_tokens <= gpu_value) {
    return KVS_OK;
  }
  hit->node = cur;
  hit->stamp = stamp_of(p, cur);
  hit->host_pages = host_aligned - gpu_depth;
  hit->hit_tokens = host_aligned * P;
  hit->reprefill_tokens = reprefill_tokens;
  hit->reprefill = true;
  hit->truncated_tokens = 0;
  return KVS_OK;
}

kvs_status kvs_window_pool_prefix_acquire(kvs_window_pool_t pool, uint64_t request,
                                          const kvs_prefix_hit *hit, kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  if (hit == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: hit is NULL", __func__);
  if (request >= KVS_MAX_REQUEST_ID) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "request %llu is past 2^62",
                         (unsigned long long)request);
  }
  kvs_pool_prefix *p = &pool->prefix;
  if (hit->host_pages > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the hit reaches %llu blocks into the host tier: take it with "
                         "kvs_window_pool_prefix_fetch, which gives them GPU pages",
                         (unsigned long long)hit->host_pages);
  }
  const char *stale = stale_hit(pool, hit);
  if (stale != NULL) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND,
                         "the hit names block %lld, which %s (match again: the index changed "
                         "since)",
                         (long long)hit->node, stale);
  }
  if (hit->node < 0) return KVS_OK;
  int64_t h = hold_find(p, request);
  if (h >= 0) {
    return kvs_error_set(err, KVS_ERR_CONFLICT, "request %llu holds a prefix already",
                         (unsigned long long)request);
  }
  if (p->holds >= p->max_holds) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED, "%llu requests hold prefixes already",
                         (unsigned long long)p->holds);
  }
  uint64_t fp = (uint64_t)hit->node;
  const kvs_prefix_rec *r = &p->rec[fp];
  if (hit->reprefill) {
    if (r->tail || kvs_pool_window_page_of(pool, fp) >= 0) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "block %llu's window page is bound already; the hit cannot write it",
                           (unsigned long long)fp);
    }
    if (kvs_free_list_available(pool->free_list) < pool->page) {
      return kvs_error_set(err, KVS_ERR_EXHAUSTED,
                           "no free window page to re-prefill block %llu's tail into",
                           (unsigned long long)fp);
    }
  } else if (!r->tail || r->writer >= 0) {
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "block %llu has no readable tail (%s): an exact hit needs it",
                         (unsigned long long)fp, r->tail ? "another request writes it" : "none");
  }
  /* An exact hit with tail states seeds the request's ring: now if it
   * holds a slot, else when it is bound (kvs_pool_prefix_seed_slot). */
  int64_t slot = kvs_pool_slots_of(&pool->slots, request);
  bool restore = pool->tail_states && !hit->reprefill && slot >= 0;
  uint64_t entries = hit->reprefill ? 3 : restore ? 2 : 1;
  if ((status = kvs_pool_journal_room(pool, entries, err))) return status;
  if ((status = lead(pool, OP_ACQUIRE, fp, (int64_t)request, err))) return status;
  if (hit->reprefill) {
    if ((status = kvs_pool_bind_page(pool, fp, err))) return status; /* checked: cannot fail */
    if ((status = lead(pool, OP_TAIL, fp, (int64_t)request, err))) return status;
  }
  if (restore) return kvs_pool_prefix_seed_slot(pool, request, (uint64_t)slot, err);
  return KVS_OK;
}

/* The block an exact hit of `request` seeds its ring from: what it holds,
 * when it holds through a readable tail it does not write; -1 otherwise
 * (no tail states, nothing held, a re-prefill, its own inserted path). */
static int64_t seed_of(const struct kvs_window_pool *pool, uint64_t request) {
  const kvs_pool_prefix *p = &pool->prefix;
  if (!pool->tail_states || p->n == 0) return -1;
  int64_t h = hold_find(p, request);
  if (h < 0 || p->hold[h].node < 0 || p->hold[h].writing >= 0) return -1;
  const kvs_prefix_rec *r = &p->rec[p->hold[h].node];
  return r->tail && r->writer < 0 ? p->hold[h].node : -1;
}

uint64_t kvs_pool_prefix_seed_entries(const struct kvs_window_pool *pool, uint64_t request) {
  return seed_of(pool, request) >= 0 ? 1 : 0;
}

kvs_status kvs_pool_prefix_seed_slot(struct kvs_window_pool *pool, uint64_t request, uint64_t slot,
                                     kvs_error *err) {
  int64_t fp = seed_of(pool, request);
  if (fp < 0 || kvs_pool_slots_seed(&pool->slots, slot) == fp) return KVS_OK;
  const kvs_prefix_rec *r = &pool->prefix.rec[fp];
  int64_t operand = restore_operand(slot, restore_half(pool, r->depth),
                                    (uint64_t)kvs_pool_window_page_of(pool, (uint64_t)fp));
  kvs_status status = lead(pool, OP_RESTORE, (uint64_t)fp, operand, err); /* room: the caller's */
  if (status == KVS_OK) kvs_pool_slots_set_seed(&pool->slots, slot, fp);
  return status;
}

kvs_status kvs_window_pool_prefix_fetch(kvs_window_pool_t pool, uint64_t request,
                                        const kvs_prefix_hit *hit, const uint64_t *keys,
                                        size_t n_keys, const int64_t *pages, kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  if (hit == NULL || keys == NULL || pages == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         hit == NULL    ? "hit"
                         : keys == NULL ? "keys"
                                        : "pages");
  }
  if (request >= KVS_MAX_REQUEST_ID) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "request %llu is past 2^62",
                         (unsigned long long)request);
  }
  kvs_pool_prefix *p = &pool->prefix;
  if (hit->host_pages == 0 || !hit->reprefill) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s: the hit has no host-tier blocks (take it with "
                         "kvs_window_pool_prefix_acquire)",
                         __func__);
  }
  int32_t parent = (int32_t)hit->node;
  const char *stale = stale_hit(pool, hit);
  if (stale != NULL) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND,
                         "the hit hangs under block %lld, which %s (match again: the index "
                         "changed since)",
                         (long long)hit->node, stale);
  }
  uint64_t first = hit->node >= 0 ? (uint64_t)p->rec[hit->node].depth + 1 : 0;
  uint64_t k = hit->host_pages;
  if (first + k > n_keys) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the hit needs keys up to page %llu; %zu given",
                         (unsigned long long)(first + k), n_keys);
  }
  if (hit->hit_tokens != (first + k) * pool->page) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the hit's %llu tokens are not the end of its %llu host blocks under "
                         "block %lld (match again)",
                         (unsigned long long)hit->hit_tokens, (unsigned long long)k,
                         (long long)hit->node);
  }
  if (hold_find(p, request) >= 0) {
    return kvs_error_set(err, KVS_ERR_CONFLICT, "request %llu holds a prefix already",
                         (unsigned long long)request);
  }
  if (p->holds >= p->max_holds) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED, "%llu requests hold prefixes already",
                         (unsigned long long)p->holds);
  }
  if (kvs_free_list_available(pool->free_list) < pool->page) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED,
                         "no free window page to re-prefill the fetched prefix's tail into");
  }
  /* Validate everything first: a refusal changes nothing. */
  uint32_t epoch = kvs_pool_next_epoch(pool);
  uint64_t chain = chain_of(p, parent);
  for (uint64_t i = 0; i < k; i++) {
    int64_t page = pages[i];
    const char *unusable = unusable_page(pool, page);
    if (unusable != NULL) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "fetch page %llu is full page %lld, %s",
                           (unsigned long long)i, (long long)page, unusable);
    }
    if (p->rec[page].used != 0 || pool->full_stamp[page] == epoch ||
        kvs_pool_window_page_of(pool, (uint64_t)page) >= 0) {
      return kvs_error_set(err, KVS_ERR_CONFLICT, "fetch page %llu is full page %lld, which is %s",
                           (unsigned long long)i, (long long)page,
                           pool->full_stamp[page] == epoch ? "given twice"
                           : p->rec[page].used != 0        ? "a cached block"
                                                           : "bound to a window page");
    }
    pool->full_stamp[page] = epoch;
    chain = kvs_prefix_chain(chain, keys[first + i]);
    if (kvs_pool_host_find(&p->host, chain) < 0) {
      return kvs_error_set(err, KVS_ERR_NOT_FOUND,
                           "block %llu of the hit is not in the host tier (match again: the tier "
                           "changed since)",
                           (unsigned long long)(first + i));
    }
  }
  if (map_find(p, parent, keys[first]) >= 0) {
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "block %llu of the hit is on the GPU again (match again)",
                         (unsigned long long)first);
  }
  if ((status = kvs_pool_journal_room(pool, 3 * k + 3, err))) return status;
  int32_t cur = parent;
  for (uint64_t i = 0; i < k; i++) {
    uint64_t page = (uint64_t)pages[i];
    if ((status = lead(pool, OP_NEW_KEY, page, (int64_t)keys[first + i], err)) ||
        (status = lead(pool, OP_NEW_LINK, page, cur, err))) {
      return status; /* validated above: unreachable */
    }
    int32_t slot = kvs_pool_host_find(&p->host, p->rec[page].chain);
    if ((status = lead(pool, OP_FETCH, page, slot, err))) return status;
    cur = (int32_t)page;
  }
  if ((status = lead(pool, OP_ACQUIRE, (uint64_t)cur, (int64_t)request, err)) ||
      (status = kvs_pool_bind_page(pool, (uint64_t)cur, err)) ||
      (status = lead(pool, OP_TAIL, (uint64_t)cur, (int64_t)request, err))) {
    return status;
  }
  return KVS_OK;
}

kvs_status kvs_window_pool_prefix_insert(kvs_window_pool_t pool, uint64_t request,
                                         const uint64_t *keys, const int64_t *pages,
                                         const uint8_t *tails, size_t n, uint8_t *taken,
                                         kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  if ((keys == NULL || pages == NULL || taken == NULL) && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL but n is %zu", __func__,
                         keys == NULL    ? "keys"
                         : pages == NULL ? "pages"
                                         : "taken",
                         n);
  }
  if (request >= KVS_MAX_REQUEST_ID) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "request %llu is past 2^62",
                         (unsigned long long)request);
  }
  if (n == 0) return KVS_OK;
  kvs_pool_prefix *p = &pool->prefix;
  int64_t h = hold_find(p, request);
  int32_t start = h >= 0 ? p->hold[h].node : -1;
  if (h < 0 && p->holds >= p->max_holds) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED, "%llu requests hold prefixes already",
                         (unsigned long long)p->holds);
  }
  /* Validate everything first: a refusal changes nothing. */
  uint32_t epoch = kvs_pool_next_epoch(pool);
  int32_t cur = start;
  bool virtual_cur = false; /* cur is a page this call adds */
  uint64_t entries = 2;
  for (size_t i = 0; i < n; i++) {
    int32_t next = virtual_cur ? -1 : map_find(p, cur, keys[i]);
    if (next >= 0) {
      cur = next;
      continue;
    }
    int64_t page = pages[i];
    const char *unusable = unusable_page(pool, page);
    if (unusable != NULL) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "insert page %zu is full page %lld, %s", i,
                           (long long)page, unusable);
    }
    if (p->rec[page].used != 0 || pool->full_stamp[page] == epoch) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "insert page %zu is full page %lld, which is cached already (as "
                           "another key, or twice in this call)",
                           i, (long long)page);
    }
    if (tails != NULL && tails[i] && kvs_pool_window_page_of(pool, (uint64_t)page) < 0) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "insert page %zu (full page %lld) keeps its window page as the "
                           "block's tail, but it has none bound",
                           i, (long long)page);
    }
    pool->full_stamp[page] = epoch;
    entries += 2 + (tails != NULL && tails[i] ? 1 : 0);
    cur = (int32_t)page;
    virtual_cur = true;
  }
  if ((status = kvs_pool_journal_room(pool, entries, err))) return status;
  cur = start;
  for (size_t i = 0; i < n; i++) {
    int32_t next = map_find(p, cur, keys[i]);
    if (next >= 0) {
      taken[i] = 0;
      cur = next;
      continue;
    }
    int64_t page = pages[i];
    if ((status = lead(pool, OP_NEW_KEY, (uint64_t)page, (int64_t)keys[i], err)) ||
        (status = lead(pool, OP_NEW_LINK, (uint64_t)page, cur, err))) {
      return status; /* validated above: unreachable */
    }
    if (tails != NULL && tails[i] && (status = lead(pool, OP_TAIL, (uint64_t)page, -1, err))) {
      return status;
    }
    taken[i] = 1;
    cur = (int32_t)page;
  }
  if (cur != start) {
    if (start >= 0 && (status = lead(pool, OP_RELEASE, (uint64_t)start, (int64_t)request, err))) {
      return status;
    }
    if ((status = lead(pool, OP_ACQUIRE, (uint64_t)cur, (int64_t)request, err))) return status;
  }
  return KVS_OK;
}

/* The request's hold and the tail it writes go: readable once written, or
 * (drop_tail: never written) dropped with its window page. */
static kvs_status let_go(kvs_window_pool_t pool, uint64_t request, bool drop_tail, kvs_error *err) {
  kvs_pool_prefix *p = &pool->prefix;
  int64_t h = hold_find(p, request);
  if (h < 0) return KVS_OK;
  int32_t node = p->hold[h].node, writing = p->hold[h].writing;
  size_t room = (node >= 0) + (writing >= 0 ? (drop_tail ? 3 : 1) : 0);
  kvs_status status = kvs_pool_journal_room(pool, room, err);
  if (status != KVS_OK) return status;
  if (writing >= 0) {
    if ((status = lead(pool, OP_WDONE, (uint64_t)writing, (int64_t)request, err))) return status;
    if (drop_tail) {
      if ((status = lead(pool, OP_UNTAIL, (uint64_t)writing, -1, err))) return status;
      kvs_pool_unbind_page(pool, (uint64_t)writing);
    }
  }
  if (node >= 0 && (status = lead(pool, OP_RELEASE, (uint64_t)node, (int64_t)request, err))) {
    return status;
  }
  return KVS_OK;
}

kvs_status kvs_window_pool_prefix_release(kvs_window_pool_t pool, uint64_t request,
                                          kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  return status != KVS_OK ? status : let_go(pool, request, false, err);
}

kvs_status kvs_window_pool_prefix_abandon(kvs_window_pool_t pool, uint64_t request,
                                          kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  return status != KVS_OK ? status : let_go(pool, request, true, err);
}

kvs_status kvs_window_pool_prefix_evict(kvs_window_pool_t pool, uint64_t need_pages,
                                        uint64_t need_window_pages, int64_t *freed, size_t cap,
                                        size_t *n_freed, uint64_t *window_pages_freed,
                                        kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  if (n_freed == NULL || (freed == NULL && cap > 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         n_freed == NULL ? "n_freed" : "freed");
  }
  kvs_pool_prefix *p = &pool->prefix;
  size_t got = 0;
  uint64_t wgot = 0;
  /* Tails first: a tail costs a truncation or a re-prefill, a block its
   * whole subtree. */
  while (wgot < need_window_pages && p->tail_head >= 0 &&
         kvs_pool_journal_room(pool, 2, NULL) == KVS_OK) {
    int32_t n = p->tail_head;
    if ((status = lead(pool, OP_UNTAIL, (uint64_t)n, -1, err))) return status;
    kvs_pool_unbind_page(pool, (uint64_t)n);
    wgot++;
  }
  while (got < need_pages && got < cap && p->leaf_head >= 0 &&
         kvs_pool_journal_room(pool, 4, NULL) == KVS_OK) {
    int32_t n = p->leaf_head;
    if (p->rec[n].tail) {
      if ((status = lead(pool, OP_UNTAIL, (uint64_t)n, -1, err))) return status;
      kvs_pool_unbind_page(pool, (uint64_t)n);
      wgot++;
    }
    /* With a host tier the block's rows move there (unless a copy is
     * there already: blocks never change once cached). */
    if (p->host.n > 0 && kvs_pool_host_find(&p->host, p->rec[n].chain) < 0 &&
        (status = lead(pool, OP_SPILL, (uint64_t)n, kvs_pool_host_victim(&p->host), err))) {
      return status;
    }
    if ((status = lead(pool, OP_EVICT, (uint64_t)n, (int64_t)p->rec[n].key, err))) return status;
    freed[got++] = n;
  }
  *n_freed = got;
  if (window_pages_freed != NULL) *window_pages_freed = wgot;
  return KVS_OK;
}

kvs_status kvs_window_pool_prefix_stats(const struct kvs_window_pool *pool, kvs_prefix_stats *out,
                                        kvs_error *err) {
  if (pool == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         pool == NULL ? "pool" : "out");
  }
  const kvs_pool_prefix *p = &pool->prefix;
  out->nodes = p->nodes;
  out->tails = p->tails;
  out->holds = p->holds;
  out->refs = p->refs_sum;
  out->evictable = p->evictable;
  out->evictions = p->evictions;
  out->tail_drops = p->tail_drops;
  out->digest = p->digest + p->host.digest;
  out->host_slots = p->host.n;
  out->host_blocks = p->host.used;
  out->spills = p->host.spills;
  out->fetches = p->host.fetches;
  out->host_drops = p->host.drops;
  return KVS_OK;
}

kvs_status kvs_window_pool_prefix_node(const struct kvs_window_pool *pool, uint64_t page,
                                       uint64_t *key, int64_t *parent, uint32_t *refs, bool *tail,
                                       kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  if (page >= pool->prefix.n || pool->prefix.rec[page].used != 1) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND, "full page %llu is not a cached block",
                         (unsigned long long)page);
  }
  const kvs_prefix_rec *r = &pool->prefix.rec[page];
  if (key != NULL) *key = r->key;
  if (parent != NULL) *parent = r->parent;
  if (refs != NULL) *refs = r->refs;
  if (tail != NULL) *tail = r->tail;
  return KVS_OK;
}

kvs_status kvs_window_pool_prefix_host_slot(const struct kvs_window_pool *pool, uint64_t slot,
                                            uint64_t *chain, kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  const kvs_pool_host *h = &pool->prefix.host;
  if (slot >= h->n || !h->rec[slot].used) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND,
                         "host slot %llu holds no block (the tier has %llu)",
                         (unsigned long long)slot, (unsigned long long)h->n);
  }
  if (chain != NULL) *chain = h->rec[slot].chain;
  return KVS_OK;
}

kvs_status kvs_window_pool_prefix_inject(kvs_window_pool_t pool, uint64_t page, int32_t delta,
                                         kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  kvs_pool_prefix *p = &pool->prefix;
  if (page >= p->n || p->rec[page].used != 1) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND, "full page %llu is not a cached block",
                         (unsigned long long)page);
  }
  p->digest -= node_term(page, &p->rec[page]);
  p->rec[page].refs = (uint32_t)((int64_t)p->rec[page].refs + delta);
  p->digest += node_term(page, &p->rec[page]);
  return KVS_OK;
}

/* ---- integrity ---- */

kvs_status kvs_pool_prefix_check(const struct kvs_window_pool *pool, kvs_error *err) {
  const kvs_pool_prefix *p = &pool->prefix;
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
    if (map_find(p, r->parent, r->key) != (int32_t)fp) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "cached block %llu (key %llu) is not where the key map finds it",
                           (unsigned long long)fp, (unsigned long long)r->key);
    }
    if (r->chain != kvs_prefix_chain(chain_of(p, r->parent), r->key)) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "cached block %llu (key %llu) carries a chain that is not its path's",
                           (unsigned long long)fp, (unsigned long long)r->key);
    }
    if (r->tail && kvs_pool_window_page_of(pool, fp) < 0) {
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
      int64_t h = hold_find(p, (uint64_t)r->writer);
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

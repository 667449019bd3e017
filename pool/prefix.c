/* The window pool's prefix index: its records (one node per full page,
 * named by it), the (parent, key) map, the requests' holds, the index's
 * share of the digest, its integrity check and its life. Every change to
 * it is one operation of prefix_ops.c. */
#include "pool/prefix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mix.h"

const char *kvs_pool_prefix_unusable(const kvs_pool_prefix *p, int64_t page) {
  if (page < 0 || (uint64_t)page >= p->n) return "outside the history";
  if ((uint64_t)page == p->shape.full_pages - 1) return "the reserved dummy page";
  return NULL;
}

uint64_t kvs_pool_prefix_chain_of(const kvs_pool_prefix *p, int32_t node) {
  return node >= 0 ? p->rec[node].chain : KVS_PREFIX_ROOT_CHAIN;
}

/* ---- digest ---- */

uint64_t kvs_prefix_node_term(uint64_t fp, const kvs_prefix_rec *r) {
  if (r->used != 1) return 0;
  uint64_t h = kvs_mix64(fp + 0x51ed27, r->key);
  h = kvs_mix64(h, (uint64_t)(int64_t)r->parent);
  h = kvs_mix64(h, r->refs);
  h = kvs_mix64(h, r->tail);
#ifndef KVS_MUTANT_DIGEST_NO_WRITER /* defined: planted bug (tests/mutants), no writer */
  h = kvs_mix64(h, (uint64_t)r->writer);
#endif
  return kvs_splitmix64_finalise(h);
}

uint64_t kvs_pool_prefix_digest_range(const kvs_pool_prefix *prefix, uint64_t first, uint64_t end) {
  if (end > prefix->n) end = prefix->n;
  uint64_t d = 0;
  for (uint64_t fp = first; fp < end; fp++) d += kvs_prefix_node_term(fp, &prefix->rec[fp]);
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

void kvs_pool_prefix_map_insert(kvs_pool_prefix *p, int32_t node) {
  kvs_probe_map_insert(&p->map, node_hash(p, (uint64_t)node), (uint64_t)node, 0);
}

void kvs_pool_prefix_map_erase(kvs_pool_prefix *p, int32_t node) {
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

void kvs_pool_prefix_hold_put(kvs_pool_prefix *p, uint64_t request, int32_t node, int32_t writing) {
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
void kvs_pool_prefix_hold_erase(kvs_pool_prefix *p, uint64_t request) {
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
                                const kvs_prefix_tiers *tiers, kvs_error *err) {
  memset(p, 0, sizeof *p);
  p->host.head = p->host.tail = -1;
  p->disk.head = p->disk.tail = -1;
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
  kvs_status status = kvs_pool_host_init(&p->host, tiers->host_slots, err);
  if (status != KVS_OK) return status;
  if (tiers->disk_slots > 0) {
    if (tiers->stores_per_step == 0 || tiers->stores_per_step >= KVS_HOST_SLOTS_LIMIT) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "a disk tier writes 1 to 2^30 blocks a step, %llu asked",
                           (unsigned long long)tiers->stores_per_step);
    }
    if ((status = kvs_pool_host_init(&p->disk, tiers->disk_slots, err)) != KVS_OK) {
      return status;
    }
    p->stores_per_step = tiers->stores_per_step;
    p->pending_cap = n;
    p->pending = calloc((size_t)n, sizeof *p->pending);
    if (p->pending == NULL) {
      return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the disk tier's write queue");
    }
  }
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
  kvs_pool_host_free(&p->disk);
  free(p->pending);
  memset(p, 0, sizeof *p);
}

/* ---- integrity ---- */

kvs_status kvs_pool_prefix_check(const kvs_pool_prefix *p, const int64_t *mapping, kvs_error *err) {
  uint32_t *count = p->scratch; /* holds through each node, then children */
  memset(count, 0, (size_t)p->n * sizeof *count);
  uint64_t nodes = 0, tails = 0, refs = 0, droppable = 0;
  for (uint64_t fp = 0; fp < p->n; fp++) {
    const kvs_prefix_rec *r = &p->rec[fp];
    if (r->used == 0) continue;
    droppable += r->in_tail;
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
  if (droppable != p->droppable) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the prefix index counts %llu droppable tails, its list holds %llu",
                         (unsigned long long)p->droppable, (unsigned long long)droppable);
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
  kvs_status status = kvs_pool_host_check(&p->host, err);
  if (status != KVS_OK || p->disk.n == 0) return status;
  status = kvs_pool_host_check(&p->disk, err);
  if (status != KVS_OK && err != NULL) {
    char message[KVS_ERROR_MESSAGE_MAX];
    snprintf(message, sizeof message, "%s", err->message);
    kvs_error_set(err, status, "the disk tier: %s", message);
  }
  return status;
}

/* ---- fault injection ---- */

void kvs_pool_prefix_add_refs(kvs_pool_prefix *p, uint64_t node, int32_t delta) {
  p->digest -= kvs_prefix_node_term(node, &p->rec[node]);
  p->rec[node].refs = (uint32_t)((int64_t)p->rec[node].refs + delta);
  p->digest += kvs_prefix_node_term(node, &p->rec[node]);
}

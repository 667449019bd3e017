/* The engine's calls on a node (kvshard.h): its leader-only request
 * mutations, the translation every rank may ask for, and what create
 * decided. Mutations go through the leader's pool, which journals each for
 * the next step's broadcast; a follower's pool changes only by that
 * broadcast, so a follower's call is refused before it touches anything. */
#include <stdio.h>

#include "shard/node_internal.h"

/* A follower refuses every mutation: it would desynchronise the ranks. */
static kvs_status leader_only(const struct kvs_node *node, const char *call, kvs_error *err) {
  if (node == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: node is NULL", call);
  if (node->rank == KVS_SHARD_LEADER) return KVS_OK;
  return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                       "%s on rank %d: only the leader (rank %d) changes bindings; followers "
                       "take them from the step broadcast",
                       call, node->rank, KVS_SHARD_LEADER);
}

static kvs_window_pool_t pool_of(const struct kvs_node *node) {
  return kvs_shard_pool(node->shard);
}

static bool per_request_rings(const struct kvs_node *node) {
  return kvs_window_pool_request_slots(pool_of(node)) > 0;
}

kvs_status kvs_node_admit(kvs_node_t node, uint64_t request, int64_t *slot, kvs_error *err) {
  kvs_status status = leader_only(node, "kvs_node_admit", err);
  if (status != KVS_OK) return status;
  if (slot == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "slot is NULL");
  if (!per_request_rings(node)) {
    *slot = -1; /* rings per window page: nothing to hold per request */
    return KVS_OK;
  }
  uint64_t bound = 0;
  status = kvs_window_pool_slot_bind(pool_of(node), request, &bound, err);
  if (status == KVS_OK) *slot = (int64_t)bound;
  return status;
}

kvs_status kvs_node_bind(kvs_node_t node, uint64_t request, const int64_t *locs, size_t n,
                         kvs_error *err) {
  kvs_status status = leader_only(node, "kvs_node_bind", err);
  if (status != KVS_OK) return status;
  if (locs == NULL && n > 0) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "locs is NULL");
  if (per_request_rings(node) && kvs_window_pool_slot_of(pool_of(node), request) < 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "kvs_node_bind for request %llu, which was not admitted (kvs_node_admit "
                         "gives it its ring slot first)",
                         (unsigned long long)request);
  }
  return kvs_window_pool_alloc(pool_of(node), locs, n, NULL, err);
}

kvs_status kvs_node_free(kvs_node_t node, const int64_t *locs, size_t n, kvs_error *err) {
  kvs_status status = leader_only(node, "kvs_node_free", err);
  if (status != KVS_OK) return status;
  if (locs == NULL && n > 0) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "locs is NULL");
  return kvs_window_pool_free(pool_of(node), locs, n, err);
}

kvs_status kvs_node_finish(kvs_node_t node, uint64_t request, kvs_error *err) {
  kvs_status status = leader_only(node, "kvs_node_finish", err);
  if (status != KVS_OK || !per_request_rings(node)) return status;
  return kvs_window_pool_slot_free(pool_of(node), request, err);
}

kvs_status kvs_node_translate(const struct kvs_node *node, const int64_t *locs, size_t n,
                              int64_t *out, kvs_error *err) {
  if (node == NULL || ((locs == NULL || out == NULL) && n > 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "node, locs and out are required");
  }
  /* Every rank's mirror holds the leader's bindings (the tables follow
   * it, and the checks prove both). All or nothing: a bad loc leaves out
   * unwritten past what was already checked, so check first. */
  uint64_t rows = kvs_window_pool_full_tokens(pool_of(node));
  for (size_t i = 0; i < n; i++) {
    if (locs[i] > (int64_t)rows) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "locs[%zu] = %lld is past the pool's %llu full-history tokens", i,
                           (long long)locs[i], (unsigned long long)rows);
    }
  }
  const int64_t *mapping = kvs_window_pool_mapping(pool_of(node));
  for (size_t i = 0; i < n; i++) out[i] = locs[i] < 0 ? -1 : mapping[locs[i]];
  return KVS_OK;
}

/* ---- the prefix cache ---- */

static kvs_status sized(size_t given, size_t want, const char *what, kvs_error *err) {
  if (given == want) return KVS_OK;
  return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                       "%s.size is %zu, this build's is %zu: set it to sizeof(%s)", what, given,
                       want, what);
}

kvs_status kvs_node_prefix_match(const struct kvs_node *node, const uint64_t *keys, size_t n,
                                 uint64_t prompt_tokens, uint64_t reprefill_tokens,
                                 kvs_node_prefix_hit *hit, int64_t *pages, kvs_error *err) {
  if (node == NULL || hit == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "kvs_node_prefix_match: node and hit are required");
  }
  kvs_status status = sized(hit->size, sizeof *hit, "kvs_node_prefix_hit", err);
  if (status != KVS_OK) return status;
  kvs_prefix_hit h;
  status = kvs_window_pool_prefix_match(kvs_shard_pool(node->shard), keys, n, prompt_tokens,
                                        reprefill_tokens, &h, pages, err);
  if (status != KVS_OK) return status;
  hit->matched_pages = h.matched_pages;
  hit->hit_tokens = h.hit_tokens;
  hit->reprefill_tokens = h.reprefill_tokens;
  hit->truncated_tokens = h.truncated_tokens;
  hit->block = h.block;
  hit->reprefill = h.reprefill;
  hit->host_pages = h.host_pages;
  hit->stamp = h.stamp;
  return KVS_OK;
}

/* The node's hit as the pool's. */
static kvs_prefix_hit pool_hit(const kvs_node_prefix_hit *hit) {
  kvs_prefix_hit h = {hit->matched_pages,    hit->hit_tokens, hit->reprefill_tokens,
                      hit->truncated_tokens, hit->block,      hit->reprefill,
                      hit->host_pages,       hit->stamp};
  return h;
}

/* What the leader's calls that take a hit check first: the leader, a hit
 * of this build's size; then the pool's hit. */
static kvs_status leader_hit(kvs_node_t node, const kvs_node_prefix_hit *hit, const char *call,
                             kvs_prefix_hit *out, kvs_error *err) {
  kvs_status status = leader_only(node, call, err);
  if (status != KVS_OK) return status;
  if (hit == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: hit is NULL", call);
  if ((status = sized(hit->size, sizeof *hit, "kvs_node_prefix_hit", err))) return status;
  *out = pool_hit(hit);
  return KVS_OK;
}

kvs_status kvs_node_prefix_acquire(kvs_node_t node, uint64_t request,
                                   const kvs_node_prefix_hit *hit, kvs_error *err) {
  kvs_prefix_hit h;
  kvs_status status = leader_hit(node, hit, "kvs_node_prefix_acquire", &h, err);
  if (status != KVS_OK) return status;
  if (h.host_pages > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the hit reaches %llu blocks into the host tier: take it with "
                         "kvs_node_prefix_fetch, which gives them pages",
                         (unsigned long long)h.host_pages);
  }
  return kvs_window_pool_prefix_acquire(pool_of(node), request, &h, err);
}

kvs_status kvs_node_prefix_fetch(kvs_node_t node, uint64_t request, const kvs_node_prefix_hit *hit,
                                 const uint64_t *keys, size_t n_keys, const int64_t *pages,
                                 kvs_error *err) {
  kvs_prefix_hit h;
  kvs_status status = leader_hit(node, hit, "kvs_node_prefix_fetch", &h, err);
  if (status != KVS_OK) return status;
  return kvs_window_pool_prefix_fetch(pool_of(node), request, &h, keys, n_keys, pages, err);
}

kvs_status kvs_node_prefix_insert(kvs_node_t node, uint64_t request, const uint64_t *keys,
                                  const int64_t *pages, const uint8_t *tails, size_t n,
                                  uint8_t *taken, kvs_error *err) {
  kvs_status status = leader_only(node, "kvs_node_prefix_insert", err);
  if (status != KVS_OK) return status;
  return kvs_window_pool_prefix_insert(pool_of(node), request, keys, pages, tails, n, taken, err);
}

kvs_status kvs_node_prefix_release(kvs_node_t node, uint64_t request, kvs_error *err) {
  kvs_status status = leader_only(node, "kvs_node_prefix_release", err);
  if (status != KVS_OK) return status;
  return kvs_window_pool_prefix_release(pool_of(node), request, err);
}

kvs_status kvs_node_prefix_abandon(kvs_node_t node, uint64_t request, kvs_error *err) {
  kvs_status status = leader_only(node, "kvs_node_prefix_abandon", err);
  if (status != KVS_OK) return status;
  return kvs_window_pool_prefix_abandon(pool_of(node), request, err);
}

kvs_status kvs_node_prefix_evict(kvs_node_t node, uint64_t need_pages, uint64_t need_window_pages,
                                 int64_t *freed, size_t cap, size_t *n_freed, kvs_error *err) {
  kvs_status status = leader_only(node, "kvs_node_prefix_evict", err);
  if (status != KVS_OK) return status;
  return kvs_window_pool_prefix_evict(pool_of(node), need_pages, need_window_pages, freed, cap,
                                      n_freed, NULL, err);
}

kvs_status kvs_node_prefix_stats(const struct kvs_node *node, kvs_node_prefix_counts *out,
                                 kvs_error *err) {
  if (node == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "kvs_node_prefix_stats: node and out are required");
  }
  kvs_status status = sized(out->size, sizeof *out, "kvs_node_prefix_counts", err);
  if (status != KVS_OK) return status;
  if (!kvs_window_pool_prefix_enabled(kvs_shard_pool(node->shard))) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "kvs_node_prefix_stats: this node keeps no prefix cache (create it with "
                         "options.prefix_cache or --prefix-cache)");
  }
  kvs_prefix_stats s;
  if ((status = kvs_window_pool_prefix_stats(kvs_shard_pool(node->shard), &s, err))) return status;
  out->blocks = s.nodes;
  out->tails = s.tails;
  out->holds = s.holds;
  out->refs = s.refs;
  out->evictable = s.evictable;
  out->evictions = s.evictions;
  out->tail_drops = s.tail_drops;
  out->digest = s.digest;
  out->host_slots = s.host_slots;
  out->host_blocks = s.host_blocks;
  out->spills = s.spills;
  out->fetches = s.fetches;
  out->host_drops = s.host_drops;
  out->host_page_bytes = s.host_slots > 0 ? kvs_node_host_page_bytes(node) : 0;
  return KVS_OK;
}

uint64_t kvs_node_host_page_bytes(const struct kvs_node *node) {
  if (node == NULL) return 0;
  return kvs_deployment_host_slot_bytes(node->plan, kvs_node_gpus(node), kvs_node_gpu_count(node));
}

/* ---- what create decided ---- */

int kvs_node_rank(const struct kvs_node *node) { return node != NULL ? node->rank : -1; }
int kvs_node_size(const struct kvs_node *node) { return node != NULL ? node->size : 0; }
bool kvs_node_is_leader(const struct kvs_node *node) {
  return node != NULL && node->rank == KVS_SHARD_LEADER;
}
uint64_t kvs_node_page(const struct kvs_node *node) {
  return node != NULL ? node->options.page : 0;
}
uint64_t kvs_node_num_pages(const struct kvs_node *node) {
  return node != NULL ? kvs_deployment_split(node->plan)->num_pages : 0;
}
/* The window's pages as the plan sized them, the dummy page included. */
uint64_t kvs_node_window_pages(const struct kvs_node *node) {
  return node != NULL ? node->layout->sizes.n_win_pages : 0;
}
uint64_t kvs_node_max_running(const struct kvs_node *node) {
  return node != NULL ? node->options.max_running : 0;
}
kvs_node_device kvs_node_device_of(const struct kvs_node *node) {
  if (node == NULL) return KVS_NODE_DEVICE_AUTO;
  return kvs_table_kind_of(node->table) == KVS_TABLE_CUDA ? KVS_NODE_DEVICE_CUDA
                                                          : KVS_NODE_DEVICE_CPU;
}
int kvs_node_cuda_device(const struct kvs_node *node) {
  return node != NULL ? kvs_table_device(node->table) : -1;
}

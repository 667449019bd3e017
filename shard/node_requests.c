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
  return node != NULL ? kvs_node_plan_split(node->plan)->num_pages : 0;
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

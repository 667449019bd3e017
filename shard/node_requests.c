/* The engine's calls on a node (kvshard.h): its leader-only request
 * mutations, the translation every rank may ask for, and what create
 * decided. Mutations go through the leader's pool, which journals each for
 * the next step's broadcast; a follower's pool changes only by that
 * broadcast, so a follower's call is refused before it touches anything. */
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "shard/node_disk.h"
#include "shard/node_internal.h"
#include "shard/node_seal.h"

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

/* The window pages retained prefix tails hold, and how many of them an
 * eviction could give back now (0 and 0 without a prefix cache). */
static void tail_pages(const struct kvs_node *node, uint64_t *tails, uint64_t *droppable) {
  kvs_prefix_stats s;
  *tails = *droppable = 0;
  kvs_window_pool_t pool = pool_of(node);
  if (!kvs_window_pool_prefix_enabled(pool) ||
      kvs_window_pool_prefix_stats(pool, &s, NULL) != KVS_OK) {
    return;
  }
  *tails = s.tails;
  *droppable = s.droppable;
}

/* A window too full for `need` more pages, in the engine's words: what is
 * free, what the prefix cache's tails hold, and what to call. */
static kvs_status window_full(const struct kvs_node *node, const char *call, uint64_t request,
                              uint64_t need, kvs_error *err) {
  uint64_t page = node->options.page;
  uint64_t free_pages = kvs_window_pool_swa_available(pool_of(node)) / page;
  uint64_t tails, droppable;
  tail_pages(node, &tails, &droppable);
  char remedy[320];
  if (!kvs_window_pool_prefix_enabled(pool_of(node))) {
    snprintf(remedy, sizeof remedy,
             "no prefix cache holds any (the node keeps none): free finished requests' pages "
             "(kvs_node_free) first");
  } else if (droppable > 0) {
    uint64_t want = need - free_pages < droppable ? need - free_pages : droppable;
    snprintf(remedy, sizeof remedy,
             "retained prefix tails hold %llu window pages, %llu of them droppable now: "
             "kvs_node_prefix_evict(node, 0, %llu, ...) (Python: node.prefix_evict(0, "
             "need_window_pages=%llu)) gives them back%s",
             (unsigned long long)tails, (unsigned long long)droppable, (unsigned long long)want,
             (unsigned long long)want,
             want < need - free_pages ? "; free finished requests' pages for the rest" : "");
  } else if (tails == 0) {
    snprintf(remedy, sizeof remedy,
             "retained prefix tails hold none: free finished requests' pages (kvs_node_free) "
             "first");
  } else {
    snprintf(remedy, sizeof remedy,
             "retained prefix tails hold %llu window pages, none droppable now (their blocks "
             "are held or re-prefilled): free finished requests' pages (kvs_node_free), or "
             "release their holds (kvs_node_prefix_release) and evict with need_window_pages",
             (unsigned long long)tails);
  }
  return kvs_error_set(err, KVS_ERR_EXHAUSTED,
                       "%s for request %llu: window free list out of slots: it needs %llu window "
                       "pages, %llu are free (of %llu the engine can bind); %s",
                       call, (unsigned long long)request, (unsigned long long)need,
                       (unsigned long long)free_pages,
                       (unsigned long long)(kvs_node_window_pages(node) - 1), remedy);
}

typedef kvs_status (*pool_alloc_fn)(kvs_window_pool_t, const int64_t *, size_t,
                                    kvs_free_list_shortfall *, kvs_error *);
typedef kvs_status (*pool_free_fn)(kvs_window_pool_t, const int64_t *, size_t, kvs_error *);

/* The one bind: locations or pages (`what`), the pool's form of each. */
static kvs_status bind_with(kvs_node_t node, const char *call, pool_alloc_fn alloc,
                            uint64_t request, const char *what, const int64_t *a, size_t n,
                            kvs_error *err) {
  kvs_status status = leader_only(node, call, err);
  if (status != KVS_OK) return status;
  if (a == NULL && n > 0) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  if (per_request_rings(node) && kvs_window_pool_slot_of(pool_of(node), request) < 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s for request %llu, which was not admitted (kvs_node_admit gives it "
                         "its ring slot first)",
                         call, (unsigned long long)request);
  }
  kvs_free_list_shortfall shortfall = {0, 0, 0, 0};
  status = alloc(pool_of(node), a, n, &shortfall, err);
  if (status == KVS_ERR_EXHAUSTED && shortfall.needed_units > 0) {
    return window_full(node, call, request, shortfall.needed_units, err);
  }
  return status;
}

static kvs_status free_with(kvs_node_t node, const char *call, pool_free_fn release,
                            const char *what, const int64_t *a, size_t n, kvs_error *err) {
  kvs_status status = leader_only(node, call, err);
  if (status != KVS_OK) return status;
  if (a == NULL && n > 0) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  return release(pool_of(node), a, n, err);
}

kvs_status kvs_node_bind(kvs_node_t node, uint64_t request, const int64_t *locs, size_t n,
                         kvs_error *err) {
  return bind_with(node, "kvs_node_bind", kvs_window_pool_alloc, request, "locs", locs, n, err);
}

kvs_status kvs_node_bind_pages(kvs_node_t node, uint64_t request, const int64_t *pages, size_t n,
                               kvs_error *err) {
  return bind_with(node, "kvs_node_bind_pages", kvs_window_pool_alloc_pages, request, "pages",
                   pages, n, err);
}

kvs_status kvs_node_free(kvs_node_t node, const int64_t *locs, size_t n, kvs_error *err) {
  return free_with(node, "kvs_node_free", kvs_window_pool_free, "locs", locs, n, err);
}

kvs_status kvs_node_free_pages(kvs_node_t node, const int64_t *pages, size_t n, kvs_error *err) {
  return free_with(node, "kvs_node_free_pages", kvs_window_pool_free_pages, "pages", pages, n, err);
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
                           "locs[%zu] = %lld is past the history: its locations are 0..%llu, "
                           "and location %llu (the sentinel row) reads -1",
                           i, (long long)locs[i], (unsigned long long)(rows - 1),
                           (unsigned long long)rows);
    }
  }
  const int64_t *mapping = kvs_window_pool_mapping(pool_of(node));
  for (size_t i = 0; i < n; i++) out[i] = locs[i] < 0 ? -1 : mapping[locs[i]];
  return KVS_OK;
}

/* ---- the prefix cache ---- */

static kvs_status sized(size_t given, size_t want, const char *what, kvs_error *err) {
  if (given == want) return KVS_OK;
  /* The sizes before the disk tier's fields, which a 0.8 caller's struct ends at. */
  if ((strcmp(what, "kvs_node_prefix_hit") == 0 &&
       given == offsetof(kvs_node_prefix_hit, disk_pages)) ||
      (strcmp(what, "kvs_node_prefix_counts") == 0 &&
       given == offsetof(kvs_node_prefix_counts, disk_slots))) {
    return KVS_OK;
  }
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
  if (hit->size > offsetof(kvs_node_prefix_hit, disk_pages)) hit->disk_pages = h.disk_pages;
  /* pages names what the hit reuses, nothing else: the pool's walk also
   * fills the matched pages past the hit (kvshard.h). */
  uint64_t reused = h.hit_tokens / node->options.page;
  for (size_t i = 0; pages != NULL && i < n; i++) {
    if (i >= reused) pages[i] = -1;
  }
  return KVS_OK;
}

/* The node's hit as the pool's. */
static kvs_prefix_hit pool_hit(const kvs_node_prefix_hit *hit) {
  kvs_prefix_hit h = {hit->matched_pages,    hit->hit_tokens, hit->reprefill_tokens,
                      hit->truncated_tokens, hit->block,      hit->reprefill,
                      hit->host_pages,       hit->stamp,      0};
  /* disk_pages is the match's report; fetch finds each block's tier again. */
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
  kvs_error local;
  kvs_error_clear(&local);
  status = kvs_window_pool_prefix_acquire(pool_of(node), request, &h, &local);
  if (status == KVS_ERR_EXHAUSTED && strstr(local.message, "no free window page") != NULL) {
    /* No window page for the tail the hit re-prefills. */
    return window_full(node, "kvs_node_prefix_acquire", request, 1, err);
  }
  if (status != KVS_OK && err != NULL) *err = local;
  return status;
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

kvs_status kvs_node_prefix_evict_for_fetch(kvs_node_t node, const kvs_node_prefix_hit *hit,
                                           const uint64_t *keys, size_t n_keys, uint64_t need_pages,
                                           int64_t *freed, size_t cap, size_t *n_freed,
                                           kvs_error *err) {
  kvs_prefix_hit h;
  kvs_status status = leader_hit(node, hit, "kvs_node_prefix_evict_for_fetch", &h, err);
  if (status != KVS_OK) return status;
  return kvs_window_pool_prefix_evict_for_fetch(pool_of(node), &h, keys, n_keys, need_pages, freed,
                                                cap, n_freed, NULL, err);
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
  if (out->size > offsetof(kvs_node_prefix_counts, disk_slots)) {
    kvs_node_disk_counts d;
    kvs_node_disk_counts_get(node, &d);
    out->disk_slots = s.disk_slots;
    out->disk_blocks = s.disk_blocks;
    out->stores = s.stores;
    out->loads = s.loads;
    out->disk_drops = s.disk_drops;
    out->store_missed = s.store_missed;
    out->disk_found = d.found;
    out->disk_refused = d.refused;
    out->disk_agreed = d.agreed;
    out->disk_failures = d.read_failures + d.write_failures;
    kvs_node_seal_counts seals;
    kvs_node_seal_counts_get(node, &seals);
    out->host_failures = seals.failures;
  }
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
uint64_t kvs_node_usable_pages(const struct kvs_node *node) {
  uint64_t n = kvs_node_num_pages(node);
  return n > 0 ? n - 1 : 0; /* the last full page is the dummy */
}
uint64_t kvs_node_free_window_pages(const struct kvs_node *node, uint64_t *droppable) {
  uint64_t tails = 0, drop = 0;
  if (node != NULL) tail_pages(node, &tails, &drop);
  if (droppable != NULL) *droppable = drop;
  if (node == NULL || node->options.page == 0) return 0;
  return kvs_window_pool_swa_available(pool_of(node)) / node->options.page;
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

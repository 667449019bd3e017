/* The leader's prefix calls: what the pool's public kvs_window_pool_prefix_*
 * do. Each takes the leader's decision on the prefix index (prefix.h)
 * together with what it needs of the pool's pages, request slots and
 * journal, checks everything first (a refusal changes nothing), then runs
 * the index's operations and journals each one, for every follower to
 * replay. The reads (match, stats, a node, a host slot) change nothing. */
#include "pool/window_pool.h"

#include <string.h>

#include "pool/pool_internal.h"

/* The leader's step: apply (it cannot be refused: the caller checked),
 * then journal. */
static kvs_status lead(struct kvs_window_pool *pool, kvs_prefix_op op, uint64_t a, int64_t b,
                       kvs_error *err) {
  kvs_journal_entry e = kvs_prefix_entry(op, a, b);
  kvs_status status = kvs_pool_prefix_run(&pool->prefix, &e, err);
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

/* Whether `request`, which holds nothing yet, can take a hold. */
static kvs_status can_hold(const kvs_pool_prefix *p, uint64_t request, kvs_error *err) {
  if (kvs_pool_prefix_hold_of(p, request) >= 0) {
    return kvs_error_set(err, KVS_ERR_CONFLICT, "request %llu holds a prefix already",
                         (unsigned long long)request);
  }
  if (p->holds >= p->max_holds) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED, "%llu requests hold prefixes already",
                         (unsigned long long)p->holds);
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
  if (hit->block < 0) return hit->stamp == 0 ? NULL : "the root carries no stamp";
  if ((uint64_t)hit->block >= p->n || p->rec[hit->block].used != 1) return "is not cached";
  const kvs_prefix_rec *r = &p->rec[hit->block];
#ifndef KVS_MUTANT_HIT_NO_STAMP /* defined: planted bug (tests/mutants), a stale hit accepted */
  if (r->born != hit->stamp) return "is another block than the match found";
#endif
  if (hit->host_pages == 0 && hit->hit_tokens != ((uint64_t)r->depth + 1) * pool->page) {
    return "does not end where the hit's tokens say";
  }
  return NULL;
}

/* KVS_ERR_NOT_FOUND when the hit is stale, saying how it relates to its
 * node ("names" it, or "hangs under" it). */
static kvs_status refuse_stale(const struct kvs_window_pool *pool, const kvs_prefix_hit *hit,
                               const char *relation, kvs_error *err) {
  const char *stale = stale_hit(pool, hit);
  if (stale == NULL) return KVS_OK;
  return kvs_error_set(err, KVS_ERR_NOT_FOUND,
                       "the hit %s block %lld, which %s (match again: the index changed since)",
                       relation, (long long)hit->block, stale);
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
  hit->block = -1;
  /* The boundary may not pass the prompt's last token: it is computed. */
  uint64_t cap = prompt_tokens > 0 ? (prompt_tokens - 1) / P : 0;
  int32_t cur = -1;
  int32_t best_exact = -1; /* deepest aligned node whose tail is readable */
  uint64_t exact_pages = 0, aligned_pages = 0;
  int32_t aligned_node = -1;
  for (size_t i = 0; i < n; i++) {
    int32_t next = kvs_pool_prefix_child(p, cur, keys[i]);
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
      hit->block = best_exact;
      hit->hit_tokens = exact_pages * P;
    } else if (can_reprefill && reprefill_tokens < truncation) {
      hit->block = aligned_node;
      hit->hit_tokens = aligned_pages * P;
      hit->reprefill_tokens = reprefill_tokens;
      hit->reprefill = true;
    } else {
      hit->block = best_exact;
      hit->hit_tokens = exact_pages * P;
      hit->truncated_tokens = truncation;
    }
  }
  /* The host tier continues the path where the GPU index stops: the
   * blocks come back into fresh pages and the window is re-prefilled, so
   * the deeper boundary is taken only when it gains more than that. */
  uint64_t gpu_depth = hit->matched_pages;
  hit->stamp = stamp_of(p, (int32_t)hit->block);
  if ((p->host.n == 0 && p->disk.n == 0) || reprefill_tokens == 0 || gpu_depth >= n) {
    return KVS_OK;
  }
  uint64_t chain = kvs_pool_prefix_chain_of(p, cur);
  uint64_t host_aligned = 0, disk_aligned = 0, disk_blocks = 0;
  for (size_t i = (size_t)gpu_depth; i < n && i - gpu_depth < max_host_pages; i++) {
    chain = kvs_prefix_chain(chain, keys[i]);
    if (kvs_pool_host_find(&p->host, chain) < 0) {
      if (kvs_pool_host_find(&p->disk, chain) < 0) break;
      disk_blocks++;
    }
    if (pages != NULL) pages[i] = -1;
    uint64_t depth = i + 1;
    hit->matched_pages = depth;
    if (depth <= cap && depth % p->align_pages == 0) {
      host_aligned = depth;
      disk_aligned = disk_blocks;
    }
  }
  uint64_t gpu_value = hit->hit_tokens - (hit->reprefill ? hit->reprefill_tokens : 0);
  if (host_aligned == 0 || reprefill_tokens > host_aligned * P ||
      host_aligned * P - reprefill_tokens <= gpu_value) {
    return KVS_OK;
  }
  hit->block = cur;
  hit->stamp = stamp_of(p, cur);
  hit->host_pages = host_aligned - gpu_depth;
  hit->disk_pages = disk_aligned;
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
  if ((status = refuse_stale(pool, hit, "names", err))) return status;
  if (hit->block < 0) return KVS_OK;
  if ((status = can_hold(p, request, err))) return status;
  uint64_t fp = (uint64_t)hit->block;
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
#ifndef KVS_MUTANT_HIT_NO_WRITER /* defined: planted bug (tests/mutants), a written tail read */
  } else if (!r->tail || r->writer >= 0) {
#else
  } else if (!r->tail) {
#endif
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "block %llu has no readable tail (%s): an exact hit needs it",
                         (unsigned long long)fp, r->tail ? "another request writes it" : "none");
  }
  /* An exact hit with tail states seeds the request's ring: now if it
   * holds a slot, else when it is bound (kvs_pool_seed_slot). */
  int64_t slot = kvs_pool_slots_of(&pool->slots, request);
  bool restore = pool->tail_states && !hit->reprefill && slot >= 0;
  uint64_t entries = hit->reprefill ? 3 : restore ? 2 : 1;
  if ((status = kvs_pool_journal_room(pool, entries, err))) return status;
  if ((status = lead(pool, KVS_PREFIX_OP_ACQUIRE, fp, (int64_t)request, err))) return status;
  if (hit->reprefill) {
    if ((status = kvs_pool_bind_page(pool, fp, err))) return status; /* checked: cannot fail */
    if ((status = lead(pool, KVS_PREFIX_OP_TAIL, fp, (int64_t)request, err))) return status;
  }
  if (restore) return kvs_pool_seed_slot(pool, request, (uint64_t)slot, err);
  return KVS_OK;
}

/* The block an exact hit of `request` seeds its ring from: what it holds,
 * when it holds through a readable tail it does not write; -1 otherwise
 * (no tail states, nothing held, a re-prefill, its own inserted path). */
static int64_t seed_of(const struct kvs_window_pool *pool, uint64_t request) {
  const kvs_pool_prefix *p = &pool->prefix;
  if (!pool->tail_states || p->n == 0) return -1;
  int64_t h = kvs_pool_prefix_hold_of(p, request);
  if (h < 0 || p->hold[h].node < 0 || p->hold[h].writing >= 0) return -1;
  const kvs_prefix_rec *r = &p->rec[p->hold[h].node];
  return r->tail && r->writer < 0 ? p->hold[h].node : -1;
}

uint64_t kvs_pool_seed_entries(const struct kvs_window_pool *pool, uint64_t request) {
  return seed_of(pool, request) >= 0 ? 1 : 0;
}

kvs_status kvs_pool_seed_slot(struct kvs_window_pool *pool, uint64_t request, uint64_t slot,
                              kvs_error *err) {
  int64_t fp = seed_of(pool, request);
  if (fp < 0 || kvs_pool_slots_seed(&pool->slots, slot) == fp) return KVS_OK;
  int64_t operand = kvs_pool_prefix_restore_operand(
      &pool->prefix, (int32_t)fp, slot, (uint64_t)kvs_pool_window_page_of(pool, (uint64_t)fp));
  kvs_status status =
      lead(pool, KVS_PREFIX_OP_RESTORE, (uint64_t)fp, operand, err); /* room: the caller's */
  if (status == KVS_OK) kvs_pool_slots_set_seed(&pool->slots, slot, fp);
  return status;
}

/* A hit reaching into the lower tiers, as fetch and the eviction for it
 * check it: it still hangs under the block its match found, its keys
 * reach its last block, each of its host_pages blocks is in the host
 * tier or the disk tier, and none is on the GPU again. slots (may be NULL) gets their host
 * slots (UINT64_MAX for a block read from disk); *first the first fetched
 * block's depth. */
static kvs_status host_part(const struct kvs_window_pool *pool, const kvs_prefix_hit *hit,
                            const uint64_t *keys, size_t n_keys, uint64_t *slots, uint64_t *first,
                            kvs_error *err) {
  const kvs_pool_prefix *p = &pool->prefix;
  if (hit->host_pages == 0 || !hit->reprefill) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the hit has no host-tier blocks (take it with "
                         "kvs_window_pool_prefix_acquire)");
  }
  kvs_status status = refuse_stale(pool, hit, "hangs under", err);
  if (status != KVS_OK) return status;
  uint64_t at = hit->block >= 0 ? (uint64_t)p->rec[hit->block].depth + 1 : 0;
  uint64_t k = hit->host_pages;
  if (at + k > n_keys) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the hit needs keys up to page %llu; %zu given",
                         (unsigned long long)(at + k), n_keys);
  }
  if (hit->hit_tokens != (at + k) * pool->page) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the hit's %llu tokens are not the end of its %llu host blocks under "
                         "block %lld (match again)",
                         (unsigned long long)hit->hit_tokens, (unsigned long long)k,
                         (long long)hit->block);
  }
  uint64_t chain = kvs_pool_prefix_chain_of(p, (int32_t)hit->block);
  for (uint64_t i = 0; i < k; i++) {
    chain = kvs_prefix_chain(chain, keys[at + i]);
    int32_t slot = kvs_pool_host_find(&p->host, chain);
    if (slot < 0 && kvs_pool_host_find(&p->disk, chain) < 0) {
      return kvs_error_set(err, KVS_ERR_NOT_FOUND,
                           "block %llu of the hit is not in the host tier%s (match again: the "
                           "tiers changed since)",
                           (unsigned long long)(at + i), p->disk.n > 0 ? " nor the disk tier" : "");
    }
    if (slots != NULL) slots[i] = slot >= 0 ? (uint64_t)slot : UINT64_MAX;
  }
  if (kvs_pool_prefix_child(p, (int32_t)hit->block, keys[at]) >= 0) {
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "block %llu of the hit is on the GPU again (match again)",
                         (unsigned long long)at);
  }
  *first = at;
  return KVS_OK;
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
  int32_t parent = (int32_t)hit->block;
  uint64_t first = 0;
  if ((status = host_part(pool, hit, keys, n_keys, NULL, &first, err))) return status;
  uint64_t k = hit->host_pages;
  if ((status = can_hold(p, request, err))) return status;
  if (kvs_free_list_available(pool->free_list) < pool->page) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED,
                         "no free window page to re-prefill the fetched prefix's tail into");
  }
  /* Validate everything first: a refusal changes nothing. */
  uint32_t epoch = kvs_pool_next_epoch(pool);
  for (uint64_t i = 0; i < k; i++) {
    int64_t page = pages[i];
    const char *unusable = kvs_pool_prefix_unusable(&pool->prefix, page);
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
  }
  if ((status = kvs_pool_journal_room(pool, 3 * k + 3, err))) return status;
  int32_t cur = parent;
  for (uint64_t i = 0; i < k; i++) {
    uint64_t page = (uint64_t)pages[i];
    if ((status = lead(pool, KVS_PREFIX_OP_NEW_KEY, page, (int64_t)keys[first + i], err)) ||
        (status = lead(pool, KVS_PREFIX_OP_NEW_LINK, page, cur, err))) {
      return status; /* validated above: unreachable */
    }
    int32_t slot = kvs_pool_host_find(&p->host, p->rec[page].chain);
    if (slot >= 0) {
      status = lead(pool, KVS_PREFIX_OP_FETCH, page, slot, err);
      /* Back from the host tier but gone from the disk tier: stored again. */
      kvs_pool_prefix_queue_store(p, (int32_t)page);
    } else {
      int32_t disk = kvs_pool_host_find(&p->disk, p->rec[page].chain);
      status = lead(pool, KVS_PREFIX_OP_LOAD, page, disk, err);
    }
    if (status != KVS_OK) return status;
    cur = (int32_t)page;
  }
  if ((status = lead(pool, KVS_PREFIX_OP_ACQUIRE, (uint64_t)cur, (int64_t)request, err)) ||
      (status = kvs_pool_bind_page(pool, (uint64_t)cur, err)) ||
      (status = lead(pool, KVS_PREFIX_OP_TAIL, (uint64_t)cur, (int64_t)request, err))) {
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
  int64_t h = kvs_pool_prefix_hold_of(p, request);
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
    int32_t next = virtual_cur ? -1 : kvs_pool_prefix_child(p, cur, keys[i]);
    if (next >= 0) {
      cur = next;
      continue;
    }
    int64_t page = pages[i];
    const char *unusable = kvs_pool_prefix_unusable(&pool->prefix, page);
    if (unusable != NULL) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "insert page %zu is full page %lld, %s", i,
                           (long long)page, unusable);
    }
#ifndef KVS_MUTANT_INSERT_NO_CACHED_CHECK /* defined: planted bug (tests/mutants) */
    if (p->rec[page].used != 0 || pool->full_stamp[page] == epoch) {
#else
    if (pool->full_stamp[page] == epoch) {
#endif
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
    int32_t next = kvs_pool_prefix_child(p, cur, keys[i]);
    if (next >= 0) {
      taken[i] = 0;
      cur = next;
      continue;
    }
    int64_t page = pages[i];
    if ((status = lead(pool, KVS_PREFIX_OP_NEW_KEY, (uint64_t)page, (int64_t)keys[i], err)) ||
        (status = lead(pool, KVS_PREFIX_OP_NEW_LINK, (uint64_t)page, cur, err))) {
      return status; /* validated above: unreachable */
    }
    if (tails != NULL && tails[i] &&
        (status = lead(pool, KVS_PREFIX_OP_TAIL, (uint64_t)page, -1, err))) {
      return status;
    }
    taken[i] = 1;
    cur = (int32_t)page;
    kvs_pool_prefix_queue_store(p, cur);
  }
  if (cur != start) {
    if (start >= 0 &&
        (status = lead(pool, KVS_PREFIX_OP_RELEASE, (uint64_t)start, (int64_t)request, err))) {
      return status;
    }
    if ((status = lead(pool, KVS_PREFIX_OP_ACQUIRE, (uint64_t)cur, (int64_t)request, err)))
      return status;
  }
  return KVS_OK;
}

/* The request's hold and the tail it writes go: readable once written, or
 * (drop_tail: never written) dropped with its window page. */
static kvs_status let_go(kvs_window_pool_t pool, uint64_t request, bool drop_tail, kvs_error *err) {
  kvs_pool_prefix *p = &pool->prefix;
  int64_t h = kvs_pool_prefix_hold_of(p, request);
  if (h < 0) return KVS_OK;
  int32_t node = p->hold[h].node, writing = p->hold[h].writing;
  size_t room = (node >= 0) + (writing >= 0 ? (drop_tail ? 3 : 1) : 0);
  kvs_status status = kvs_pool_journal_room(pool, room, err);
  if (status != KVS_OK) return status;
  if (writing >= 0) {
    if ((status = lead(pool, KVS_PREFIX_OP_WDONE, (uint64_t)writing, (int64_t)request, err)))
      return status;
    if (drop_tail) {
      if ((status = lead(pool, KVS_PREFIX_OP_UNTAIL, (uint64_t)writing, -1, err))) return status;
      kvs_pool_unbind_page(pool, (uint64_t)writing);
    }
  }
  if (node >= 0 &&
      (status = lead(pool, KVS_PREFIX_OP_RELEASE, (uint64_t)node, (int64_t)request, err))) {
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

/* The eviction (kvs_window_pool_prefix_evict's), keeping block `keep`
 * (-1: none) and host slots keep_slots[0..n_keep) (ascending): a hit's
 * block is the one node of its path that can be an unreferenced leaf (each
 * node above it has it below), so keeping it keeps the path. */
static kvs_status evict(kvs_window_pool_t pool, int32_t keep, const uint64_t *keep_slots,
                        size_t n_keep, uint64_t need_pages, uint64_t need_window_pages,
                        int64_t *freed, size_t cap, size_t *n_freed, uint64_t *window_pages_freed,
                        kvs_error *err) {
  kvs_pool_prefix *p = &pool->prefix;
  kvs_status status = KVS_OK;
  size_t got = 0;
  uint64_t wgot = 0;
  /* Tails first: a tail costs a truncation or a re-prefill, a block its
   * whole subtree. */
  while (wgot < need_window_pages && p->tail_head >= 0 &&
         kvs_pool_journal_room(pool, 2, NULL) == KVS_OK) {
    int32_t n = p->tail_head;
    if ((status = lead(pool, KVS_PREFIX_OP_UNTAIL, (uint64_t)n, -1, err))) return status;
    kvs_pool_unbind_page(pool, (uint64_t)n);
    wgot++;
  }
  for (;;) {
    int32_t n = p->leaf_head;
    if (n >= 0 && n == keep) n = p->rec[n].leaf_next;
    if (got >= need_pages || got >= cap || n < 0 ||
        kvs_pool_journal_room(pool, 4, NULL) != KVS_OK) {
      break;
    }
    if (p->rec[n].tail) {
      if ((status = lead(pool, KVS_PREFIX_OP_UNTAIL, (uint64_t)n, -1, err))) return status;
      kvs_pool_unbind_page(pool, (uint64_t)n);
      wgot++;
    }
    /* With a host tier the block's rows move there: into the slot of its
     * copy when the tier kept one since its fetch (that slot becomes the
     * most recent again), else a victim; a tier whose every slot a hit
     * keeps lets the block go. */
    int32_t slot = kvs_pool_host_find(&p->host, p->rec[n].chain);
    if (slot < 0) slot = kvs_pool_host_victim(&p->host, keep_slots, n_keep);
    if (slot >= 0 && (status = lead(pool, KVS_PREFIX_OP_SPILL, (uint64_t)n, slot, err))) {
      return status;
    }
    if ((status = lead(pool, KVS_PREFIX_OP_EVICT, (uint64_t)n, (int64_t)p->rec[n].key, err)))
      return status;
    freed[got++] = n;
  }
  *n_freed = got;
  if (window_pages_freed != NULL) *window_pages_freed = wgot;
  return KVS_OK;
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
  return evict(pool, -1, NULL, 0, need_pages, need_window_pages, freed, cap, n_freed,
               window_pages_freed, err);
}

kvs_status kvs_window_pool_prefix_evict_for_fetch(kvs_window_pool_t pool, const kvs_prefix_hit *hit,
                                                  const uint64_t *keys, size_t n_keys,
                                                  uint64_t need_pages, int64_t *freed, size_t cap,
                                                  size_t *n_freed, uint64_t *window_pages_freed,
                                                  kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  if (hit == NULL || keys == NULL || n_freed == NULL || (freed == NULL && cap > 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         hit == NULL       ? "hit"
                         : keys == NULL    ? "keys"
                         : n_freed == NULL ? "n_freed"
                                           : "freed");
  }
  /* The hit's host slots, kept from the spills: in the pool's scratch of
   * full pages (a fetch needs a full page per block, so a hit with more
   * blocks than the pool has pages can never be taken). */
  if (hit->host_pages >= pool->n_full_pages) {
    return kvs_error_set(
        err, KVS_ERR_INVALID_ARGUMENT, "the hit fetches %llu blocks; the pool has %llu full pages",
        (unsigned long long)hit->host_pages, (unsigned long long)pool->n_full_pages);
  }
  uint64_t first = 0;
  if ((status = host_part(pool, hit, keys, n_keys, pool->touched, &first, err))) return status;
  uint64_t evictions = need_pages < cap ? need_pages : cap;
  if ((status = kvs_pool_journal_room(pool, 4 * evictions + 3 * hit->host_pages + 3, err))) {
    return status;
  }
  kvs_pool_sort_pages(pool->touched, (size_t)hit->host_pages);
  return evict(pool, (int32_t)hit->block, pool->touched, (size_t)hit->host_pages, need_pages, 0,
               freed, cap, n_freed, window_pages_freed, err);
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
  out->digest = p->digest + p->host.digest + p->disk.digest;
  out->host_slots = p->host.n;
  out->host_blocks = p->host.used;
  out->spills = p->host.spills;
  out->fetches = p->host.fetches;
  out->host_drops = p->host.drops;
  out->disk_slots = p->disk.n;
  out->disk_blocks = p->disk.used;
  out->stores = p->disk.spills;
  out->loads = p->disk.fetches;
  out->disk_drops = p->disk.drops;
  out->store_pending = p->pending_len;
  out->store_missed = p->store_missed;
  out->droppable = p->droppable;
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
  kvs_pool_prefix_add_refs(p, page, delta);
  return KVS_OK;
}

/* ---- the disk tier's writes ---- */

void kvs_pool_prefix_queue_store(kvs_pool_prefix *p, int32_t page) {
  if (p->disk.n == 0 || kvs_pool_host_find(&p->disk, p->rec[page].chain) >= 0) return;
  if (p->pending_len == p->pending_cap) { /* the oldest waited too long */
    p->pending_head = (p->pending_head + 1) % p->pending_cap;
    p->pending_len--;
    p->store_missed++;
  }
  kvs_prefix_pending w = {p->rec[page].born, page};
  p->pending[(p->pending_head + p->pending_len) % p->pending_cap] = w;
  p->pending_len++;
}

kvs_status kvs_window_pool_prefix_write_back(kvs_window_pool_t pool, size_t *stored,
                                             kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (stored != NULL) *stored = 0;
  if (status != KVS_OK) return status;
  kvs_pool_prefix *p = &pool->prefix;
  while (p->pending_len > 0 && p->stores_this_step < p->stores_per_step) {
    kvs_prefix_pending w = p->pending[p->pending_head];
    const kvs_prefix_rec *r = &p->rec[w.page];
    bool same = r->used == 1 && r->born == w.born;
    if (same && kvs_pool_host_find(&p->disk, r->chain) < 0) {
      if (kvs_pool_journal_room(pool, 1, NULL) != KVS_OK) return KVS_OK; /* next step */
      int32_t slot = kvs_pool_host_victim(&p->disk, NULL, 0);
      if ((status = lead(pool, KVS_PREFIX_OP_STORE, (uint64_t)w.page, slot, err))) {
        return status; /* a used block and a victim: unreachable */
      }
      p->stores_this_step++;
      if (stored != NULL) (*stored)++;
    } else if (!same) {
      p->store_missed++; /* left the index before its turn */
    }
    p->pending_head = (p->pending_head + 1) % p->pending_cap;
    p->pending_len--;
  }
  return KVS_OK;
}

kvs_status kvs_window_pool_prefix_disk_seed(kvs_window_pool_t pool, const uint64_t *chains,
                                            size_t n, kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  if (chains == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: chains is NULL but n is %zu", __func__,
                         n);
  }
  if (pool->prefix.disk.n == 0) {
    return n == 0 ? KVS_OK
                  : kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                                  "%s: this pool has no disk tier (disk_pages)", __func__);
  }
  return kvs_pool_host_seed(&pool->prefix.disk, chains, n, err);
}

kvs_status kvs_window_pool_prefix_disk_slot(const struct kvs_window_pool *pool, uint64_t slot,
                                            uint64_t *chain, kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  const kvs_pool_host *d = &pool->prefix.disk;
  if (slot >= d->n || !d->rec[slot].used) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND,
                         "disk slot %llu holds no block (the tier has %llu)",
                         (unsigned long long)slot, (unsigned long long)d->n);
  }
  if (chain != NULL) *chain = d->rec[slot].chain;
  return KVS_OK;
}

size_t kvs_window_pool_prefix_disk_chains(const struct kvs_window_pool *pool, uint64_t *out,
                                          size_t cap) {
  if (pool == NULL || out == NULL) return 0;
  const kvs_pool_host *d = &pool->prefix.disk;
  size_t n = 0;
  for (int32_t s = d->head; s >= 0 && n < cap; s = d->rec[s].next) out[n++] = d->rec[s].chain;
  return n;
}

kvs_status kvs_window_pool_prefix_block(const struct kvs_window_pool *pool, uint64_t page,
                                        uint64_t *chain, uint64_t *depth, kvs_error *err) {
  kvs_status status = need_prefix(pool, __func__, err);
  if (status != KVS_OK) return status;
  if (!kvs_pool_prefix_cached(&pool->prefix, page)) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND, "full page %llu holds no cached block",
                         (unsigned long long)page);
  }
  if (chain != NULL) *chain = pool->prefix.rec[page].chain;
  if (depth != NULL) *depth = pool->prefix.rec[page].depth;
  return KVS_OK;
}

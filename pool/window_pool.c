/* The window pool: which window page backs each full page, the free list,
 * the journal and the digest, the replay and the integrity check. It owns
 * the request slots (slots.h) and the prefix index (prefix.h), leaves that
 * call nothing here: it checks journal room, asks a leaf to change, and
 * journals what it asked. */
#include "pool/window_pool.h"

#include "core/options.h"
#include "pool/pool_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mix.h"

/* ---- digest ---- */

uint64_t kvs_binding_digest_term(uint64_t full_page, uint64_t window_page) {
  return kvs_binding_pair_term(full_page, window_page);
}

uint64_t kvs_window_pool_digest(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->digest + pool->slots.digest + pool->prefix.digest +
                            pool->prefix.host.digest + pool->prefix.disk.digest
                      : 0;
}

uint64_t kvs_window_pool_page_digest(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->digest : 0;
}

uint64_t kvs_window_pool_digest_units(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->n_full_pages + pool->slots.n + pool->prefix.n + pool->prefix.host.n +
                            pool->prefix.disk.n
                      : 0;
}

uint64_t kvs_window_pool_digest_range(const struct kvs_window_pool *pool, uint64_t first,
                                      uint64_t end) {
  if (pool == NULL) return 0;
  uint64_t units = kvs_window_pool_digest_units(pool);
  if (end > units) end = units;
  uint64_t digest = 0;
  uint64_t page_end = end < pool->n_full_pages ? end : pool->n_full_pages;
  for (uint64_t fp = first; fp < page_end; fp++) {
    int64_t slot = pool->map[fp * pool->page];
    if (slot >= 0) digest += kvs_binding_digest_term(fp, (uint64_t)slot / pool->page);
  }
  /* Request slots follow the full pages in the digest's index space. */
  if (end > pool->n_full_pages) {
    uint64_t slot_first = first > pool->n_full_pages ? first - pool->n_full_pages : 0;
    uint64_t slot_end = end - pool->n_full_pages;
    if (slot_end > pool->slots.n) slot_end = pool->slots.n;
    if (slot_first < slot_end) {
      digest += kvs_pool_slots_digest_range(&pool->slots, slot_first, slot_end);
    }
  }
  /* Then the prefix index's nodes, one unit per full page. */
  uint64_t prefix_base = pool->n_full_pages + pool->slots.n;
  if (end > prefix_base) {
    uint64_t node_first = first > prefix_base ? first - prefix_base : 0;
    digest += kvs_pool_prefix_digest_range(&pool->prefix, node_first, end - prefix_base);
  }
  /* Then the host tier's slots, one unit each. */
  uint64_t host_base = prefix_base + pool->prefix.n;
  if (end > host_base) {
    uint64_t slot_first = first > host_base ? first - host_base : 0;
    digest += kvs_pool_host_digest_range(&pool->prefix.host, slot_first, end - host_base);
  }
  /* Then the disk tier's slots, one unit each. */
  uint64_t disk_base = host_base + pool->prefix.host.n;
  if (end > disk_base) {
    uint64_t slot_first = first > disk_base ? first - disk_base : 0;
    digest += kvs_pool_host_digest_range(&pool->prefix.disk, slot_first, end - disk_base);
  }
  return digest;
}

uint64_t kvs_window_pool_digest_recompute(const struct kvs_window_pool *pool) {
  if (pool == NULL) return 0;
  return kvs_window_pool_digest_range(pool, 0, kvs_window_pool_digest_units(pool));
}

/* ---- lifecycle ---- */

void kvs_window_pool_destroy(kvs_window_pool_t pool) {
  if (pool == NULL) return;
  free(pool->map);
  kvs_free_list_destroy(pool->free_list);
  kvs_journal_destroy(pool->journal);
  free(pool->full_stamp);
  free(pool->full_count);
  free(pool->full_overlay);
  free(pool->touched);
  free(pool->window_bases);
  free(pool->win_stamp);
  free(pool->win_overlay);
  kvs_pool_slots_free(&pool->slots);
  kvs_pool_prefix_free(&pool->prefix);
  free(pool);
}

/* The page loops run P (128) wide on every bind and free: they are written
 * to vectorize, and built per vector width where the compiler can, with AVX-512 or AVX2 picked at
 * load time on CPUs that have them. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_ADDRESS__)
#define KVS_PAGE_LOOP __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KVS_PAGE_LOOP
#endif

KVS_PAGE_LOOP static void fill_page(int64_t *row, int64_t window_base, uint64_t page) {
  for (uint64_t offset = 0; offset < page; offset++) row[offset] = window_base + (int64_t)offset;
}

/* Whether locs[0..P) is exactly the page starting at locs[0]. */
KVS_PAGE_LOOP static bool is_whole_page(const int64_t *locs, uint64_t page) {
  uint64_t base = (uint64_t)locs[0];
  uint64_t diff = 0;
  for (uint64_t offset = 0; offset < page; offset++)
    diff |= (uint64_t)locs[offset] ^ (base + offset);
  return diff == 0;
}

static void write_page(struct kvs_window_pool *pool, uint64_t full_base, int64_t window_base) {
  int64_t *row = pool->map + full_base;
  if (window_base < 0) {
    /* Every byte 0xff is -1 in every int64. */
    memset(row, 0xff, (size_t)pool->page * sizeof *row);
  } else {
    fill_page(row, window_base, pool->page);
  }
}

/* The prefix index of a pool whose pages and slots are set up. */
static kvs_status prefix_init(struct kvs_window_pool *pool, const kvs_window_pool_options *options,
                              kvs_error *err) {
  kvs_prefix_shape shape = {pool->page, pool->n_full_pages, pool->n_win_pages, pool->slots.n};
  size_t undo_cap =
      options->replay_capacity > 0 ? options->replay_capacity : options->journal_capacity;
  kvs_prefix_tiers tiers = {options->host_pages, options->disk_pages,
                            options->disk_stores_per_step};
  return kvs_pool_prefix_init(&pool->prefix, &shape, options->prefix_align, options->max_running,
                              undo_cap, &tiers, err);
}

kvs_status kvs_window_pool_create(const kvs_pool_sizes *sizes,
                                  const kvs_window_pool_options *options, kvs_window_pool_t *out,
                                  kvs_error *err) {
  if (sizes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: sizes is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  static const kvs_window_pool_options defaults = KVS_WINDOW_POOL_OPTIONS_INIT;
  kvs_window_pool_options adopted;
  kvs_status adopt = kvs_options_adopt(options, &defaults, sizeof defaults,
                                       "KVS_WINDOW_POOL_OPTIONS_INIT", &adopted, err);
  if (adopt != KVS_OK) return adopt;
  options = &adopted;
  if (options->host_pages > 0 && !options->prefix_cache) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "host_pages is %llu but prefix_cache is off: the host tier holds what "
                         "the prefix cache evicts",
                         (unsigned long long)options->host_pages);
  }
  if (options->disk_pages > 0 && !options->prefix_cache) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "disk_pages is %llu but prefix_cache is off: the disk tier holds what "
                         "the prefix cache caches",
                         (unsigned long long)options->disk_pages);
  }
  uint64_t page = sizes->page;
  if (page == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "page is 0; a window page holds at least one position");
  }
  if (sizes->full_token < page || sizes->full_token % page != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "full_token %llu must be whole pages of %llu and hold the dummy page",
                         (unsigned long long)sizes->full_token, (unsigned long long)page);
  }
  if (sizes->n_win_slots < page || sizes->n_win_slots % page != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "n_win_slots %llu must be whole pages of %llu and hold the dummy page",
                         (unsigned long long)sizes->n_win_slots, (unsigned long long)page);
  }
  if (sizes->full_token >= (SIZE_MAX / 2) / sizeof(int64_t) ||
      sizes->n_win_slots >= (SIZE_MAX / 2) / sizeof(int64_t)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "a %llu-token mapping does not fit in memory",
                         (unsigned long long)sizes->full_token);
  }
  uint64_t left; /* the window pages past the dummy and the working-set reserve */
  kvs_status status = kvs_cost_window_pages_left(sizes->n_win_slots / page, options->max_running,
                                                 options->radix, &left, err);
  if (status != KVS_OK) return status;

  struct kvs_window_pool *pool = calloc(1, sizeof *pool);
  if (pool == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a window pool");
  pool->page = page;
  pool->full_token = sizes->full_token;
  pool->n_win_slots = sizes->n_win_slots;
  pool->n_full_pages = sizes->full_token / page;
  pool->n_win_pages = sizes->n_win_slots / page;
  pool->dummy_full_base = sizes->full_token - page;
  pool->dummy_window_base = sizes->n_win_slots - page;

  size_t n_full = (size_t)pool->n_full_pages;
  size_t n_win = (size_t)pool->n_win_pages;
  size_t n_bases = n_full > n_win ? n_full : n_win;
  pool->map = malloc(((size_t)pool->full_token + 1) * sizeof *pool->map);
  pool->full_stamp = calloc(n_full, sizeof *pool->full_stamp);
  pool->full_count = calloc(n_full, sizeof *pool->full_count);
  pool->full_overlay = calloc(n_full, sizeof *pool->full_overlay);
  pool->touched = calloc(n_full, sizeof *pool->touched);
  pool->window_bases = calloc(n_bases, sizeof *pool->window_bases);
  pool->win_stamp = calloc(n_win, sizeof *pool->win_stamp);
  pool->win_overlay = calloc(n_win, sizeof *pool->win_overlay);
  if (pool->map == NULL || pool->full_stamp == NULL || pool->full_count == NULL ||
      pool->full_overlay == NULL || pool->touched == NULL || pool->window_bases == NULL ||
      pool->win_stamp == NULL || pool->win_overlay == NULL) {
    kvs_window_pool_destroy(pool);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %llu-token window pool",
                         (unsigned long long)sizes->full_token);
  }
  if ((status = kvs_free_list_create(pool->n_win_slots - page, page, &pool->free_list, err)) ||
      (status = kvs_journal_create(options->journal_capacity, &pool->journal, err)) ||
      (status = kvs_pool_slots_init(&pool->slots, sizes->state_rings, sizes->n_req_slots, err)) ||
      (options->prefix_cache && (status = prefix_init(pool, options, err)))) {
    kvs_window_pool_destroy(pool);
    return status;
  }
  for (uint64_t loc = 0; loc <= pool->full_token; loc++) pool->map[loc] = KVS_NO_WINDOW_SLOT;

  /* The dummy page: bound for good, outside the free list. */
  write_page(pool, pool->dummy_full_base, (int64_t)pool->dummy_window_base);
  pool->digest =
      kvs_binding_digest_term(pool->dummy_full_base / page, pool->dummy_window_base / page);

  pool->chunk_budget = left / 2 * page > page ? left / 2 * page : page;
  pool->tail_states = sizes->tail_states && options->prefix_cache && pool->slots.n > 0;
  /* A restore entry packs a request slot and a window page in 62 bits. */
  if (pool->tail_states &&
      (pool->slots.n > KVS_RESTORE_MAX_SLOTS || pool->n_win_pages > KVS_RESTORE_MAX_WINDOW_PAGES)) {
    kvs_status s =
        kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                      "tail states of %llu window pages and %llu request slots: a "
                      "pool keeps them for at most 2^32 and 2^29",
                      (unsigned long long)pool->n_win_pages, (unsigned long long)pool->slots.n);
    kvs_window_pool_destroy(pool);
    return s;
  }
  *out = pool;
  return KVS_OK;
}

/* ---- accessors (a NULL pool reads 0, or NULL) ---- */

uint64_t kvs_window_pool_page_size(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->page : 0;
}
uint64_t kvs_window_pool_full_tokens(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->full_token : 0;
}
uint64_t kvs_window_pool_window_slots(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->n_win_slots : 0;
}
uint64_t kvs_window_pool_swa_num_tokens(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->n_win_slots - pool->page + 1 : 0;
}
uint64_t kvs_window_pool_swa_available(const struct kvs_window_pool *pool) {
  return pool != NULL ? kvs_free_list_available(pool->free_list) : 0;
}
uint64_t kvs_window_pool_bound_pages(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->bound_pages : 0;
}
uint64_t kvs_window_pool_prefill_chunk_budget(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->chunk_budget : 0;
}
const int64_t *kvs_window_pool_mapping(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->map : NULL;
}

size_t kvs_window_pool_journal_pending(const struct kvs_window_pool *pool) {
  return pool != NULL ? kvs_journal_pending(pool->journal) : 0;
}
size_t kvs_window_pool_journal_capacity(const struct kvs_window_pool *pool) {
  return pool != NULL ? kvs_journal_capacity(pool->journal) : 0;
}
uint64_t kvs_window_pool_journal_sequence(const struct kvs_window_pool *pool) {
  return pool != NULL ? kvs_journal_sequence(pool->journal) : 0;
}
void kvs_window_pool_journal_drain(kvs_window_pool_t pool, kvs_journal_entry *out, size_t cap,
                                   size_t *n_out) {
  kvs_journal_drain(pool != NULL ? pool->journal : NULL, out, cap, n_out);
  /* A new step gathers: it writes its own share of blocks. */
  if (pool != NULL) pool->prefix.stores_this_step = 0;
}

/* ---- validation helpers ---- */

uint32_t kvs_pool_next_epoch(struct kvs_window_pool *pool) {
  if (++pool->epoch == 0) { /* wrapped: clear the stamps once */
    memset(pool->full_stamp, 0, (size_t)pool->n_full_pages * sizeof *pool->full_stamp);
    memset(pool->win_stamp, 0, (size_t)pool->n_win_pages * sizeof *pool->win_stamp);
    kvs_pool_slots_clear_stamps(&pool->slots);
    pool->epoch = 1;
  }
  return pool->epoch;
}

/* Room for `entries` journal entries, when journaling is on. */
static kvs_status journal_room(const struct kvs_window_pool *pool, uint64_t entries,
                               kvs_error *err) {
  size_t capacity = kvs_journal_capacity(pool->journal);
  if (capacity > 0 && entries > kvs_journal_room(pool->journal)) {
    return kvs_error_set(err, KVS_ERR_JOURNAL_FULL,
                         "binding journal has room for %zu of its %zu entries, this call needs "
                         "%llu; drain it first",
                         kvs_journal_room(pool->journal), capacity, (unsigned long long)entries);
  }
  return KVS_OK;
}

/* Appends one entry when journaling is on; journal_room said it fits. */
static void journal(struct kvs_window_pool *pool, uint64_t full_page, int64_t window_page) {
  if (kvs_journal_capacity(pool->journal) > 0) {
    /* journal_room said it fits: the push cannot be refused. */
    (void)kvs_journal_push(pool->journal, full_page, window_page, NULL);
  }
}

/* The window page a full page's base row holds, or -1. */
static inline int64_t window_page_of(const struct kvs_window_pool *pool, uint64_t full_page) {
  int64_t slot = pool->map[full_page * pool->page];
  return slot < 0 ? -1 : slot / (int64_t)pool->page;
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

void kvs_pool_sort_pages(uint64_t *pages, size_t n) {
  bool sorted = true;
  for (size_t i = 1; i < n && sorted; i++) sorted = pages[i - 1] < pages[i];
  if (!sorted) qsort(pages, n, sizeof *pages, compare_u64);
}

/* A call's pool and location array (when it holds locations) are given. */
static kvs_status check_locs(const struct kvs_window_pool *pool, const char *call,
                             const int64_t *full_locs, size_t n, kvs_error *err) {
  if (pool == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", call);
  }
  if (full_locs == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: full_locs is NULL but n is %zu", call,
                         n);
  }
  return KVS_OK;
}

/* Collects the distinct full pages `locs` cover into pool->touched, in
 * ascending order, and checks each is covered exactly once in full (after
 * check_locs for `call`). Negative locations are ignored. The common case
 * -- whole contiguous pages -- is checked without per-location counting. */
static kvs_status collect_pages(struct kvs_window_pool *pool, const char *call, const char *what,
                                const int64_t *locs, size_t n, size_t *n_pages, kvs_error *err) {
  kvs_status status = check_locs(pool, call, locs, n, err);
  if (status != KVS_OK) return status;
  uint64_t page = pool->page;
  uint32_t epoch = kvs_pool_next_epoch(pool);
  size_t touched = 0;
  bool fast = n % page == 0;
  for (size_t at = 0; fast && at < n; at += page) {
    int64_t base = locs[at];
    if (base < 0 || (uint64_t)base % page != 0 || (uint64_t)base >= pool->full_token ||
        !is_whole_page(locs + at, page) || pool->full_stamp[(uint64_t)base / page] == epoch) {
      fast = false;
      break;
    }
    pool->full_stamp[(uint64_t)base / page] = epoch;
    pool->touched[touched++] = (uint64_t)base / page;
  }
  if (!fast) {
    epoch = kvs_pool_next_epoch(pool);
    touched = 0;
    for (size_t i = 0; i < n; i++) {
      int64_t loc = locs[i];
      if (loc < 0) continue;
      if ((uint64_t)loc >= pool->full_token) {
        return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                             "%s got location %lld at index %zu, outside the history's %llu "
                             "locations (full pages 0..%llu)",
                             what, (long long)loc, i, (unsigned long long)pool->full_token,
                             (unsigned long long)(pool->n_full_pages - 1));
      }
      uint64_t fp = (uint64_t)loc / page;
      if (pool->full_stamp[fp] != epoch) {
        pool->full_stamp[fp] = epoch;
        pool->full_count[fp] = 0;
        pool->touched[touched++] = fp;
      }
      pool->full_count[fp]++;
    }
    char listing[200];
    int used = 0;
    size_t partial = 0;
    for (size_t i = 0; i < touched; i++) {
      uint64_t fp = pool->touched[i];
      if (pool->full_count[fp] == page) continue;
      if (partial++ < 4) {
        used += snprintf(listing + used, sizeof listing - (size_t)used,
                         "%sfull page %llu (%u of its locations)", partial > 1 ? ", " : "",
                         (unsigned long long)fp, pool->full_count[fp]);
        if (used >= (int)sizeof listing) used = (int)sizeof listing - 1;
      }
    }
    if (partial > 0) {
      return kvs_error_set(err, KVS_ERR_PARTIAL_PAGE,
                           "%s got partial pages: %s%s; a page is %llu locations and is "
                           "released whole",
                           what, listing, partial > 4 ? ", ..." : "", (unsigned long long)page);
    }
  }
  kvs_pool_sort_pages(pool->touched, touched);
  *n_pages = touched;
  return KVS_OK;
}

/* ---- allocation ---- */

/* More pages than the history has (touched's room) name one twice. */
static kvs_status too_many_pages(const struct kvs_window_pool *pool, size_t n, kvs_error *err) {
  if (n <= pool->n_full_pages) return KVS_OK;
  return kvs_error_set(err, KVS_ERR_CONFLICT,
                       "alloc names %zu full pages; the history has %llu, so one is named twice", n,
                       (unsigned long long)pool->n_full_pages);
}

/* A page named as the caller gave it: by its number alone, or with the
 * location it came from. Returns buf. */
static const char *given_as(char *buf, size_t cap, bool from_locs, uint64_t base) {
  buf[0] = '\0';
  if (from_locs) snprintf(buf, cap, " (from location %llu)", (unsigned long long)base);
  return buf;
}

/* The one bind path: a window page for each of pages[0..n), full-page
 * numbers inside the history (the location form checked its shape and
 * converted; the page form checked the range). All or nothing. */
static kvs_status bind_pages(struct kvs_window_pool *pool, const uint64_t *pages, size_t n,
                             bool from_locs, kvs_free_list_shortfall *shortfall, kvs_error *err) {
  uint64_t page = pool->page;
  uint32_t epoch = kvs_pool_next_epoch(pool);
  for (size_t i = 0; i < n; i++) {
    uint64_t fp = pages[i];
    uint64_t base = fp * page;
    char at[48]; /* formatted only for an error (this loop is every bind's) */
    if (base == pool->dummy_full_base) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "full page %llu (locations %llu..%llu) is the reserved dummy page, "
                           "bound for good; the engine's full pages are 0..%llu",
                           (unsigned long long)fp, (unsigned long long)base,
                           (unsigned long long)(base + page - 1),
                           (unsigned long long)(pool->n_full_pages - 2));
    }
    if (pool->full_stamp[fp] == epoch) {
      return kvs_error_set(err, KVS_ERR_CONFLICT, "alloc names full page %llu%s twice",
                           (unsigned long long)fp, given_as(at, sizeof at, from_locs, base));
    }
    pool->full_stamp[fp] = epoch;
    if (kvs_pool_prefix_cached(&pool->prefix, fp)) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "full page %llu%s is a cached prefix block (key %llu); a request "
                           "cannot write it (a hit reads it, it never binds it)",
                           (unsigned long long)fp, given_as(at, sizeof at, from_locs, base),
                           (unsigned long long)pool->prefix.rec[fp].key);
    }
    if (pool->map[base] != KVS_NO_WINDOW_SLOT) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "full page %llu%s already holds window page %lld; binding over "
                           "it would leak that window page",
                           (unsigned long long)fp, given_as(at, sizeof at, from_locs, base),
                           (long long)(pool->map[base] / (int64_t)page));
    }
  }
  kvs_status status = journal_room(pool, n, err);
  if (status != KVS_OK) return status;
  uint64_t *wbases = pool->window_bases;
  if ((status = kvs_free_list_alloc(pool->free_list, n, wbases, shortfall, err))) {
    return status;
  }
  for (size_t i = 0; i < n; i++) {
    write_page(pool, pages[i] * page, (int64_t)wbases[i]);
    pool->digest += kvs_binding_digest_term(pages[i], wbases[i] / page);
  }
  /* Journaled top of the stack first, so a follower replaying it always
   * takes its own top unit: O(1) per page and the same LIFO order. */
  for (size_t i = n; i-- > 0;) journal(pool, pages[i], (int64_t)(wbases[i] / page));
  pool->bound_pages += n;
  return KVS_OK;
}

kvs_status kvs_window_pool_alloc(kvs_window_pool_t pool, const int64_t *full_locs, size_t n,
                                 kvs_free_list_shortfall *shortfall, kvs_error *err) {
  kvs_status status = check_locs(pool, __func__, full_locs, n, err);
  if (status != KVS_OK) return status;
  if (n == 0) return KVS_OK;
  uint64_t page = pool->page;
  if (n % page != 0) {
    return kvs_error_set(err, KVS_ERR_PARTIAL_PAGE,
                         "alloc needs whole pages of %llu locations, got %zu locations",
                         (unsigned long long)page, n);
  }
  size_t n_pages = n / page;
  for (size_t i = 0; i < n_pages; i++) {
    const int64_t *chunk = full_locs + i * page;
    int64_t base = chunk[0];
    if (base < 0 || (uint64_t)base % page != 0) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "alloc pages start at a page base (a location that is a multiple "
                           "of %llu), got location %lld at index %zu",
                           (unsigned long long)page, (long long)base, i * page);
    }
    if ((uint64_t)base >= pool->full_token) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "alloc got location %lld (full page %llu), outside the history's "
                           "%llu locations (full pages 0..%llu)",
                           (long long)base, (unsigned long long)((uint64_t)base / page),
                           (unsigned long long)pool->full_token,
                           (unsigned long long)(pool->n_full_pages - 1));
    }
    if (!is_whole_page(chunk, page)) {
      uint64_t offset = 1;
      while (chunk[offset] == base + (int64_t)offset) offset++;
      return kvs_error_set(err, KVS_ERR_PARTIAL_PAGE,
                           "alloc pages must be contiguous ascending: full page %llu (from "
                           "location %lld) is given location %lld at offset %llu",
                           (unsigned long long)((uint64_t)base / page), (long long)base,
                           (long long)chunk[offset], (unsigned long long)offset);
    }
  }
  if ((status = too_many_pages(pool, n_pages, err))) return status; /* touched's room */
  for (size_t i = 0; i < n_pages; i++) pool->touched[i] = (uint64_t)full_locs[i * page] / page;
  return bind_pages(pool, pool->touched, n_pages, true, shortfall, err);
}

/* Pages given as numbers: each inside the history and not negative. */
static kvs_status check_pages(const struct kvs_window_pool *pool, const char *call,
                              const int64_t *pages, size_t n, bool skip_negative, kvs_error *err) {
  if (pool == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", call);
  if (pages == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pages is NULL but n is %zu", call, n);
  }
  for (size_t i = 0; i < n; i++) {
    if (pages[i] < 0 && skip_negative) continue;
    if (pages[i] < 0 || (uint64_t)pages[i] >= pool->n_full_pages) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "%s: pages[%zu] = %lld is not a full page (they are 0..%llu, the "
                           "last the reserved dummy)",
                           call, i, (long long)pages[i],
                           (unsigned long long)(pool->n_full_pages - 1));
    }
  }
  return KVS_OK;
}

kvs_status kvs_window_pool_alloc_pages(kvs_window_pool_t pool, const int64_t *pages, size_t n,
                                       kvs_free_list_shortfall *shortfall, kvs_error *err) {
  kvs_status status = check_pages(pool, "alloc", pages, n, false, err);
  if (status != KVS_OK || n == 0) return status;
  if ((status = too_many_pages(pool, n, err))) return status;
  for (size_t i = 0; i < n; i++) pool->touched[i] = (uint64_t)pages[i];
  return bind_pages(pool, pool->touched, n, false, shortfall, err);
}

/* The one free path over pool->touched[0..n_pages), distinct full pages
 * inside the history. */
static kvs_status free_touched(struct kvs_window_pool *pool, size_t n_pages, kvs_error *err) {
  uint64_t page = pool->page;
  uint64_t dummy_window_page = pool->dummy_window_base / page;
  uint32_t epoch = kvs_pool_next_epoch(pool);
  size_t n_bound = 0;
  kvs_status status;
  for (size_t i = 0; i < n_pages; i++) {
    uint64_t fp = pool->touched[i];
    if (fp * page == pool->dummy_full_base) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "full page %llu (locations %llu..%llu) is the reserved dummy page; "
                           "it is never freed",
                           (unsigned long long)fp, (unsigned long long)(fp * page),
                           (unsigned long long)(fp * page + page - 1));
    }
    int64_t wp = window_page_of(pool, fp);
    if (wp < 0) continue; /* already unbound: freeing it again is a no-op */
    if (kvs_pool_prefix_is_tail(&pool->prefix, fp)) continue; /* the cache's tail */
    if ((uint64_t)wp >= dummy_window_page || pool->win_stamp[wp] == epoch ||
        kvs_free_list_is_free(pool->free_list, (uint64_t)wp * page)) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "full page %llu is bound to window page %lld, which is %s; "
                           "returning it would alias two requests",
                           (unsigned long long)fp, (long long)wp,
                           (uint64_t)wp >= dummy_window_page ? "the dummy or outside the pool"
                           : pool->win_stamp[wp] == epoch    ? "bound to another freed page too"
                                                             : "already free");
    }
    pool->win_stamp[wp] = epoch;
    pool->window_bases[n_bound++] = (uint64_t)wp * page;
  }
  if ((status = journal_room(pool, n_bound, err))) return status;
  if ((status = kvs_free_list_free(pool->free_list, pool->window_bases, n_bound, err))) {
    return status; /* unreachable after the checks above; nothing changed */
  }
  for (size_t i = 0; i < n_pages; i++) {
    uint64_t fp = pool->touched[i];
    int64_t wp = window_page_of(pool, fp);
    if (wp < 0 || kvs_pool_prefix_is_tail(&pool->prefix, fp)) continue;
    write_page(pool, fp * page, KVS_NO_WINDOW_SLOT);
    pool->digest -= kvs_binding_digest_term(fp, (uint64_t)wp);
    journal(pool, fp, KVS_JOURNAL_FREED);
  }
  pool->bound_pages -= n_bound;
  return KVS_OK;
}

kvs_status kvs_window_pool_free(kvs_window_pool_t pool, const int64_t *full_locs, size_t n,
                                kvs_error *err) {
  size_t n_pages;
  kvs_status status = collect_pages(pool, __func__, "free", full_locs, n, &n_pages, err);
  if (status != KVS_OK || n_pages == 0) return status;
  return free_touched(pool, n_pages, err);
}

kvs_status kvs_window_pool_free_pages(kvs_window_pool_t pool, const int64_t *pages, size_t n,
                                      kvs_error *err) {
  kvs_status status = check_pages(pool, "free", pages, n, true, err);
  if (status != KVS_OK) return status;
  uint32_t epoch = kvs_pool_next_epoch(pool);
  size_t n_pages = 0;
  for (size_t i = 0; i < n; i++) {
    if (pages[i] < 0) continue; /* a block table's unassigned entry */
    uint64_t fp = (uint64_t)pages[i];
    if (pool->full_stamp[fp] == epoch) {
      return kvs_error_set(err, KVS_ERR_CONFLICT, "free names full page %llu twice (pages[%zu])",
                           (unsigned long long)fp, i);
    }
    pool->full_stamp[fp] = epoch;
    pool->touched[n_pages++] = fp;
  }
  if (n_pages == 0) return KVS_OK;
  return free_touched(pool, n_pages, err);
}

/* ---- for the leader's prefix calls (window_pool_prefix.c) ---- */

kvs_status kvs_pool_journal_room(const struct kvs_window_pool *pool, uint64_t entries,
                                 kvs_error *err) {
  return journal_room(pool, entries, err);
}
void kvs_pool_journal(struct kvs_window_pool *pool, uint64_t a, int64_t b) { journal(pool, a, b); }
int64_t kvs_pool_window_page_of(const struct kvs_window_pool *pool, uint64_t full_page) {
  return window_page_of(pool, full_page);
}
kvs_status kvs_pool_bind_page(struct kvs_window_pool *pool, uint64_t fp, kvs_error *err) {
  uint64_t wbase;
  kvs_status status = kvs_free_list_alloc(pool->free_list, 1, &wbase, NULL, err);
  if (status != KVS_OK) return status;
  write_page(pool, fp * pool->page, (int64_t)wbase);
  pool->digest += kvs_binding_digest_term(fp, wbase / pool->page);
  journal(pool, fp, (int64_t)(wbase / pool->page));
  pool->bound_pages++;
  return KVS_OK;
}
void kvs_pool_unbind_page(struct kvs_window_pool *pool, uint64_t fp) {
  int64_t wp = window_page_of(pool, fp);
  if (wp < 0) return;
  uint64_t base = (uint64_t)wp * pool->page;
  (void)kvs_free_list_free(pool->free_list, &base, 1, NULL);
  write_page(pool, fp * pool->page, KVS_NO_WINDOW_SLOT);
  pool->digest -= kvs_binding_digest_term(fp, (uint64_t)wp);
  journal(pool, fp, KVS_JOURNAL_FREED);
  pool->bound_pages--;
}

/* ---- lookups ---- */

kvs_status kvs_window_pool_translate(const struct kvs_window_pool *pool, int64_t full_loc,
                                     int64_t *out, kvs_error *err) {
  if (pool == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (full_loc < 0) {
    *out = KVS_NO_WINDOW_SLOT;
    return KVS_OK;
  }
  if ((uint64_t)full_loc > pool->full_token) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "location %lld is past the history's %llu locations and its sentinel "
                         "row (location %llu, which reads -1)",
                         (long long)full_loc, (unsigned long long)pool->full_token,
                         (unsigned long long)pool->full_token);
  }
  *out = pool->map[full_loc];
  return KVS_OK;
}

/* out[i] = the window slot of locs[i]. A negative loc reads as -1 (what the
 * sentinel row holds); one past the sentinel is an error, recorded in *bad
 * and reported after the loops, so the in-range path is one compare, one
 * load and one store. */
static inline void gather_slots(const int64_t *map, uint64_t sentinel, const int64_t *locs,
                                int64_t *out, uint64_t n, uint64_t *bad) {
#pragma GCC unroll 4
  for (uint64_t i = 0; i < n; i++) {
    uint64_t index = (uint64_t)locs[i];
    if (__builtin_expect(index <= sentinel, 1)) {
      out[i] = map[index];
    } else {
      *bad |= locs[i] >= 0;
      out[i] = KVS_NO_WINDOW_SLOT;
    }
  }
}

kvs_status kvs_window_pool_window_ctx(const struct kvs_window_pool *pool, uint64_t pos,
                                      const int64_t *full_locs, size_t n, int64_t *window_slot,
                                      int64_t *prev_window_slot, int64_t *ring_out,
                                      kvs_error *err) {
  if (pool == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", __func__);
  }
  if (full_locs == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: full_locs is NULL", __func__);
  }
  if (window_slot == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: window_slot is NULL", __func__);
  }
  if (prev_window_slot == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: prev_window_slot is NULL", __func__);
  }
  if (ring_out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: ring_out is NULL", __func__);
  }
  if (pos >= n) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "position %llu is past the %zu full locations given",
                         (unsigned long long)pos, n);
  }
  const uint64_t page = pool->page;
  const uint64_t sentinel = pool->full_token;
  const int64_t *map = pool->map;
  uint64_t bad = 0;
  int64_t own, prev;
  gather_slots(map, sentinel, full_locs + pos, &own, 1, &bad);
  gather_slots(map, sentinel, full_locs + (pos > 0 ? pos - 1 : 0), &prev, 1, &bad);
  if (pos + 1 >= page) {
    /* Every slot is reached: slot j holds the one position of the last P
     * congruent to j. Those positions are contiguous in full_locs; they
     * fill the ring from slot j0 = first % P to the end, then wrap. */
    uint64_t first = pos + 1 - page;
    uint64_t j0 = first % page;
    gather_slots(map, sentinel, full_locs + first, ring_out + j0, page - j0, &bad);
    gather_slots(map, sentinel, full_locs + first + (page - j0), ring_out, j0, &bad);
  } else {
    /* Early decode: slot j <= pos holds position j; the rest are unreached. */
    gather_slots(map, sentinel, full_locs, ring_out, pos + 1, &bad);
    for (uint64_t j = pos + 1; j < page; j++) ring_out[j] = KVS_NO_WINDOW_SLOT;
  }
  if (bad) {
    uint64_t lo = pos + 1 >= page ? pos + 1 - page : 0;
    for (uint64_t p = lo; p <= pos; p++) {
      if (full_locs[p] >= 0 && (uint64_t)full_locs[p] > sentinel) {
        return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                             "location %lld at position %llu is past the history's %llu "
                             "locations",
                             (long long)full_locs[p], (unsigned long long)p,
                             (unsigned long long)sentinel);
      }
    }
  }
  *window_slot = own;
  *prev_window_slot = prev;
  return KVS_OK;
}

/* ---- raw binding (dummy, tests, fault injection) ---- */

kvs_status kvs_window_pool_bind_raw(kvs_window_pool_t pool, uint64_t full_page_base,
                                    uint64_t window_page_base, kvs_error *err) {
  if (pool == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", __func__);
  }
  uint64_t page = pool->page;
  if (full_page_base % page != 0 || window_page_base % page != 0) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "window bindings are page-aligned: full location %llu, window "
                         "location %llu",
                         (unsigned long long)full_page_base, (unsigned long long)window_page_base);
  }
  if (full_page_base >= pool->full_token || window_page_base >= pool->n_win_slots) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "binding full location %llu -> window location %llu is outside the "
                         "pool (%llu full locations, %llu window slots)",
                         (unsigned long long)full_page_base, (unsigned long long)window_page_base,
                         (unsigned long long)pool->full_token,
                         (unsigned long long)pool->n_win_slots);
  }
  uint64_t fp = full_page_base / page;
  int64_t old = window_page_of(pool, fp);
  if (old >= 0) {
    pool->digest -= kvs_binding_digest_term(fp, (uint64_t)old);
  } else if (full_page_base != pool->dummy_full_base) {
    pool->bound_pages++;
  }
  write_page(pool, full_page_base, (int64_t)window_page_base);
  pool->digest += kvs_binding_digest_term(fp, window_page_base / page);
  return KVS_OK;
}

kvs_status kvs_window_pool_unbind_raw(kvs_window_pool_t pool, const int64_t *full_locs, size_t n,
                                      kvs_error *err) {
  size_t n_pages;
  kvs_status status = collect_pages(pool, __func__, "unbind", full_locs, n, &n_pages, err);
  if (status != KVS_OK) return status;
  for (size_t i = 0; i < n_pages; i++) {
    uint64_t fp = pool->touched[i];
    int64_t wp = window_page_of(pool, fp);
    if (wp < 0) continue;
    write_page(pool, fp * pool->page, KVS_NO_WINDOW_SLOT);
    pool->digest -= kvs_binding_digest_term(fp, (uint64_t)wp);
    if (fp * pool->page != pool->dummy_full_base) pool->bound_pages--;
  }
  return KVS_OK;
}

/* ---- replay ---- */

/* Whether window page wp is free as replayed so far in this epoch. */
static bool replayed_free(const struct kvs_window_pool *pool, int64_t wp, uint32_t epoch) {
  return pool->win_stamp[wp] == epoch
             ? pool->win_overlay[wp]
             : kvs_free_list_is_free(pool->free_list, (uint64_t)wp * pool->page);
}

/* Pass 1 of apply for page entry i: checks it against the pages as
 * replayed so far (the overlays of this epoch) and replays it there. */
static kvs_status validate_page_entry(struct kvs_window_pool *pool, size_t i,
                                      const kvs_journal_entry *entry, uint32_t epoch,
                                      kvs_error *err) {
  uint64_t fp = entry->full_page;
  int64_t wp = entry->window_page;
  uint64_t usable_window_pages = pool->n_win_pages - 1; /* the dummy is never moved */
  if (fp >= pool->n_full_pages || fp * pool->page == pool->dummy_full_base) {
    return kvs_error_set(
        err, KVS_ERR_OUT_OF_RANGE, "journal entry %zu names full page %llu, %s", i,
        (unsigned long long)fp,
        fp >= pool->n_full_pages ? "outside the history" : "the reserved dummy page");
  }
  int64_t current =
      pool->full_stamp[fp] == epoch ? pool->full_overlay[fp] : window_page_of(pool, fp);
  if (wp >= 0) {
    if ((uint64_t)wp >= usable_window_pages) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "journal entry %zu binds window page %lld, outside the %llu "
                           "allocatable window pages",
                           i, (long long)wp, (unsigned long long)usable_window_pages);
    }
    if (current >= 0) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "journal entry %zu binds full page %llu, which already holds "
                           "window page %lld on this rank",
                           i, (unsigned long long)fp, (long long)current);
    }
    if (!replayed_free(pool, wp, epoch)) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "journal entry %zu binds window page %lld to full page %llu, but "
                           "that window page is not free on this rank",
                           i, (long long)wp, (unsigned long long)fp);
    }
    pool->win_stamp[wp] = epoch;
    pool->win_overlay[wp] = 0;
    pool->full_overlay[fp] = wp;
  } else if (wp == KVS_JOURNAL_FREED) {
    if (current < 0) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "journal entry %zu frees full page %llu, which is not bound on "
                           "this rank",
                           i, (unsigned long long)fp);
    }
    bool window_free = replayed_free(pool, current, epoch);
    if ((uint64_t)current >= usable_window_pages || window_free) {
      return kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "journal entry %zu frees full page %llu, whose window page %lld is "
                           "%s on this rank",
                           i, (unsigned long long)fp, (long long)current,
                           window_free ? "already free" : "not allocatable");
    }
    pool->win_stamp[current] = epoch;
    pool->win_overlay[current] = 1;
    pool->full_overlay[fp] = KVS_NO_WINDOW_SLOT;
  } else {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "journal entry %zu has window page %lld; only page indices and %d "
                         "(freed) exist",
                         i, (long long)wp, KVS_JOURNAL_FREED);
  }
  pool->full_stamp[fp] = epoch;
  return KVS_OK;
}

/* Pass 2 of apply for a validated page entry: the bind or the free. */
static void commit_page_entry(struct kvs_window_pool *pool, const kvs_journal_entry *entry) {
  uint64_t page = pool->page;
  uint64_t fp = entry->full_page;
  int64_t wp = entry->window_page;
  if (wp >= 0) {
    kvs_free_list_take(pool->free_list, (uint64_t)wp * page, NULL);
    write_page(pool, fp * page, wp * (int64_t)page);
    pool->digest += kvs_binding_digest_term(fp, (uint64_t)wp);
    pool->bound_pages++;
  } else {
    int64_t current = window_page_of(pool, fp);
    uint64_t base = (uint64_t)current * page;
    kvs_free_list_free(pool->free_list, &base, 1, NULL);
    write_page(pool, fp * page, KVS_NO_WINDOW_SLOT);
    pool->digest -= kvs_binding_digest_term(fp, (uint64_t)current);
    pool->bound_pages--;
  }
}

/* The window page of full page fp as a batch's pass 1 left it (its
 * overlay when the batch names it), -1 for none (kvs_prefix_window_of). */
typedef struct replayed {
  const struct kvs_window_pool *pool;
  uint32_t epoch;
} replayed;
static int64_t replayed_window_page(const void *ctx, uint64_t fp) {
  const replayed *r = ctx;
  if (fp >= r->pool->n_full_pages) return KVS_NO_WINDOW_SLOT;
  return r->pool->full_stamp[fp] == r->epoch ? r->pool->full_overlay[fp]
                                             : window_page_of(r->pool, fp);
}

kvs_status kvs_window_pool_apply(kvs_window_pool_t pool, const kvs_journal_entry *entries, size_t n,
                                 kvs_error *err) {
  if (pool == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", __func__);
  }
  if (entries == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: entries is NULL but n is %zu",
                         __func__, n);
  }
  uint32_t epoch = kvs_pool_next_epoch(pool);
  bool any_prefix = false;
  /* Pass 1: replay onto overlays, so a bad entry anywhere changes nothing. */
  for (size_t i = 0; i < n; i++) {
    uint64_t fp = entries[i].full_page;
    kvs_status status = KVS_OK;
    if (pool->prefix.n > 0 && (fp & KVS_JOURNAL_PREFIX_TAG) == KVS_JOURNAL_PREFIX_TAG) {
      any_prefix = true;
      /* Replayed below, after the pages and slots validate; a restore's
       * slot is checked here, in order with the slots' own entries. */
      kvs_tail_restore r;
      if (kvs_window_pool_restore_of(&entries[i], &r)) {
        status = kvs_pool_slots_validate_seed(&pool->slots, i, r.slot, epoch, err);
      }
    } else if (fp & KVS_JOURNAL_SLOT_TAG) {
      status = kvs_pool_slots_validate(&pool->slots, i, &entries[i], epoch, err);
    } else {
      status = validate_page_entry(pool, i, &entries[i], epoch, err);
    }
    if (status != KVS_OK) return status;
  }
  /* The prefix index's entries, in order, undone on the first refusal;
   * with a prefix cache, also a batch of pages alone (it must not free a
   * tail's window page). */
  if (pool->prefix.n > 0) {
    replayed r = {pool, epoch};
    kvs_status status =
        kvs_pool_prefix_apply(&pool->prefix, entries, n, replayed_window_page, &r, err);
    if (status != KVS_OK) return status;
  }
  /* Pass 2: every entry is known to apply. */
  for (size_t i = 0; i < n; i++) {
    uint64_t fp = entries[i].full_page;
    if (any_prefix && (fp & KVS_JOURNAL_PREFIX_TAG) == KVS_JOURNAL_PREFIX_TAG) {
      /* A restore seeds its slot here, in order with the slots' binds. */
      kvs_tail_restore r;
      if (kvs_window_pool_restore_of(&entries[i], &r)) {
        kvs_pool_slots_set_seed(&pool->slots, r.slot, (int64_t)r.full_page);
      }
    } else if (fp & KVS_JOURNAL_SLOT_TAG) {
      kvs_pool_slots_commit(&pool->slots, &entries[i]);
    } else {
      commit_page_entry(pool, &entries[i]);
    }
  }
  return KVS_OK;
}

/* ---- integrity ---- */

kvs_status kvs_window_pool_check_integrity(const struct kvs_window_pool *pool, kvs_error *err) {
  if (pool == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", __func__);
  }
  uint64_t page = pool->page;
  if (pool->map[pool->dummy_full_base] != (int64_t)pool->dummy_window_base) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the reserved dummy page lost its permanent binding: full page %llu "
                         "maps to %lld, not window page %llu",
                         (unsigned long long)pool->dummy_full_base,
                         (long long)pool->map[pool->dummy_full_base],
                         (unsigned long long)pool->dummy_window_base);
  }
  if (pool->map[pool->full_token] != KVS_NO_WINDOW_SLOT) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the trailing sentinel row was written: it holds %lld, not -1",
                         (long long)pool->map[pool->full_token]);
  }
  uint8_t *seen = calloc((size_t)pool->n_win_pages, 1);
  if (seen == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the integrity check");
  }
  kvs_status status = KVS_OK;
  seen[pool->n_win_pages - 1] = 1; /* the dummy window page is bound */
  uint64_t bound = 0;
  for (uint64_t fp = 0; fp + 1 < pool->n_full_pages; fp++) {
    uint64_t base = fp * page;
    int64_t slot = pool->map[base];
    for (uint64_t offset = 0; offset < page; offset++) {
      int64_t expected = slot < 0 ? KVS_NO_WINDOW_SLOT : slot + (int64_t)offset;
      if (pool->map[base + offset] != expected) {
        status = kvs_error_set(err, KVS_ERR_INTEGRITY,
                               "full page %llu is bound partially or out of order at offset "
                               "%llu: it holds %lld, expected %lld",
                               (unsigned long long)base, (unsigned long long)offset,
                               (long long)pool->map[base + offset], (long long)expected);
        goto done;
      }
    }
    if (slot < 0) continue;
    if ((uint64_t)slot % page != 0) {
      status = kvs_error_set(err, KVS_ERR_INTEGRITY,
                             "window base %lld of full page %llu is not page-aligned; its ring "
                             "block aliases",
                             (long long)slot, (unsigned long long)base);
      goto done;
    }
    uint64_t index = (uint64_t)slot / page;
    if (index >= pool->n_win_pages) {
      status = kvs_error_set(err, KVS_ERR_INTEGRITY,
                             "full page %llu maps to window slot %lld, outside the %llu-slot "
                             "window pool",
                             (unsigned long long)base, (long long)slot,
                             (unsigned long long)pool->n_win_slots);
      goto done;
    }
    if (seen[index]) {
      status = kvs_error_set(err, KVS_ERR_INTEGRITY,
                             "window page %lld is bound to two full pages (the second is full "
                             "page %llu)",
                             (long long)slot, (unsigned long long)base);
      goto done;
    }
    seen[index] = 1;
    bound++;
  }
  const uint64_t *free_bases = kvs_free_list_bases(pool->free_list);
  uint64_t free_units = kvs_free_list_free_units(pool->free_list);
  for (uint64_t i = 0; i < free_units; i++) {
    uint64_t index = free_bases[i] / page;
    if (seen[index]) {
      status = kvs_error_set(err, KVS_ERR_INTEGRITY,
                             "window page %llu is both free and bound, or free twice",
                             (unsigned long long)free_bases[i]);
      goto done;
    }
    seen[index] = 1;
  }
  uint64_t capacity_units = kvs_free_list_capacity(pool->free_list) / page;
  if (free_units + bound != capacity_units) {
    status = kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "window pages leaked or double-freed: %llu free + %llu bound != "
                           "%llu",
                           (unsigned long long)free_units, (unsigned long long)bound,
                           (unsigned long long)capacity_units);
    goto done;
  }
  if (bound != pool->bound_pages) {
    status = kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "the pool counts %llu bound pages, the mapping holds %llu",
                           (unsigned long long)pool->bound_pages, (unsigned long long)bound);
    goto done;
  }
  if ((status = kvs_pool_slots_check(&pool->slots, err)) != KVS_OK) goto done;
  if (pool->prefix.n > 0 && (status = kvs_pool_prefix_check(&pool->prefix, pool->map, err))) {
    goto done;
  }
  uint64_t recomputed = kvs_window_pool_digest_recompute(pool);
  uint64_t running = kvs_window_pool_digest(pool);
  if (recomputed != running) {
    status = kvs_error_set(err, KVS_ERR_INTEGRITY,
                           "binding digest %016llx differs from its recomputation %016llx: "
                           "the mapping changed outside the pool's own calls",
                           (unsigned long long)running, (unsigned long long)recomputed);
  }
done:
  free(seen);
  return status;
}

/* ---- request slots (slots.c holds them; the pool journals) ---- */

kvs_state_rings kvs_window_pool_state_rings(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->slots.state_rings : KVS_STATE_RINGS_PER_PAGE;
}

uint64_t kvs_window_pool_request_slots(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->slots.n : 0;
}

uint64_t kvs_window_pool_bound_slots(const struct kvs_window_pool *pool) {
  return pool != NULL ? pool->slots.bound : 0;
}

int64_t kvs_window_pool_slot_of(const struct kvs_window_pool *pool, uint64_t request) {
  return pool != NULL ? kvs_pool_slots_of(&pool->slots, request) : -1;
}

int64_t kvs_window_pool_slot_request(const struct kvs_window_pool *pool, uint64_t slot) {
  return pool != NULL ? kvs_pool_slots_request(&pool->slots, slot) : KVS_SLOT_FREE;
}

kvs_status kvs_window_pool_slot_bind(kvs_window_pool_t pool, uint64_t request, uint64_t *slot,
                                     kvs_error *err) {
  if (pool == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", __func__);
  }
  if (slot == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: slot is NULL", __func__);
  }
  uint64_t picked;
  kvs_status status = kvs_pool_slots_pick(&pool->slots, request, &picked, err);
  /* An exact hit the request took before it was bound seeds the slot. */
  if (status == KVS_OK) {
    status = journal_room(pool, 1 + kvs_pool_seed_entries(pool, request), err);
  }
  if (status != KVS_OK) return status;
  kvs_pool_slots_set(&pool->slots, picked, (int64_t)request);
  journal(pool, KVS_JOURNAL_SLOT_TAG | picked, (int64_t)request);
  status = kvs_pool_seed_slot(pool, request, picked, err); /* checked: cannot fail */
  if (status != KVS_OK) return status;
  *slot = picked;
  return KVS_OK;
}

kvs_status kvs_window_pool_slot_free(kvs_window_pool_t pool, uint64_t request, kvs_error *err) {
  if (pool == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", __func__);
  }
  int64_t slot = kvs_pool_slots_of(&pool->slots, request);
  if (slot < 0) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND, "request %llu holds no request slot",
                         (unsigned long long)request);
  }
  kvs_status status = journal_room(pool, 1, err);
  if (status != KVS_OK) return status;
  kvs_pool_slots_set(&pool->slots, (uint64_t)slot, KVS_SLOT_FREE);
  journal(pool, KVS_JOURNAL_SLOT_TAG | (uint64_t)slot, KVS_JOURNAL_FREED);
  return KVS_OK;
}

kvs_status kvs_window_pool_slot_bind_raw(kvs_window_pool_t pool, uint64_t slot, int64_t request,
                                         kvs_error *err) {
  if (pool == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: pool is NULL", __func__);
  }
  return kvs_pool_slots_bind_raw(&pool->slots, slot, request, err);
}

/* ---- ring arithmetic ---- */

kvs_status kvs_window_ring_position(int64_t pos, uint64_t j, uint64_t win, int64_t *out,
                                    kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (win == 0 || win > INT64_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a ring holds at least one slot (and fewer than 2^63), got %llu",
                         (unsigned long long)win);
  }
  if (j > (uint64_t)INT64_MAX || (int64_t)j > pos) {
    *out = -1;
    return KVS_OK;
  }
  int64_t w = (int64_t)win;
  int64_t r = (pos - (int64_t)j) % w; /* pos >= j here, so r >= 0 */
  int64_t p = pos - r;
  *out = p >= 0 ? p : -1;
  return KVS_OK;
}

kvs_status kvs_state_loc(int64_t window_slot, uint64_t ring_size, uint64_t page, int64_t *out,
                         kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (ring_size == 0 || page == 0 || page % ring_size != 0 || page > INT64_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "ring_size %llu must divide P=%llu, or two pages share a ring block",
                         (unsigned long long)ring_size, (unsigned long long)page);
  }
  if (window_slot < 0) {
    *out = KVS_NO_WINDOW_SLOT;
    return KVS_OK;
  }
  int64_t pages = window_slot / (int64_t)page;
  *out = pages * (int64_t)ring_size + window_slot % (int64_t)ring_size;
  return KVS_OK;
}

#include "tools/workload.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/options.h"
#include "core/free_list.h"
#include "core/mix.h"
#include "core/window_pool.h"

typedef struct request {
  uint64_t id;
  uint64_t prompt;
  uint64_t total;     /* prompt + generated tokens */
  uint64_t done;      /* positions written */
  uint64_t next_done; /* after this step */
  uint64_t n_pages;   /* full-history pages owned */
  uint64_t lo, hi;    /* request pages [lo, hi) bound to window pages */
  int64_t *locs;      /* full location of each position, whole pages */
  bool active;
} request;

typedef struct arrival {
  uint64_t id;
  uint64_t prompt;
  uint64_t total;
} arrival;

struct kvs_workload {
  kvs_shard_t shard;
  kvs_window_pool_t pool;
  bool leader;
  kvs_workload_options o;
  uint64_t page;
  uint64_t chunk;
  uint64_t max_pages; /* full pages of the longest request */
  uint64_t rng;
  uint64_t next_id;

  request *slots;
  size_t *order; /* active slots, in admission order */
  size_t n_active;
  arrival *queue; /* ring buffer */
  size_t queue_head;
  size_t queue_count;

  kvs_free_list_t full_free; /* full-history pages, the dummy excluded */
  uint64_t free_win;         /* the scheduler's count of free window pages */
  uint64_t *bases;           /* scratch: max_pages full page bases */
  int64_t *ring;             /* scratch: P ring slots */
  uint64_t *hash_in;         /* scratch: 4 + P words per context */
  int32_t *blocks;           /* the step's block tables: max_running x max_pages */
  int64_t *positions;        /* the step's positions: max_running */
  bool per_request;          /* some rings are per request slot */
  uint64_t *req_ids;         /* the step's requests: max_running */
  kvs_workload_counters c;
};

static uint64_t uniform(uint64_t *state, uint64_t lo, uint64_t hi) {
  return hi <= lo ? lo : lo + kvs_splitmix64(state) % (hi - lo + 1);
}

uint64_t kvs_workload_max_seq_len(const kvs_workload_options *options) {
  return options->prompt_max + options->gen_max;
}

void kvs_workload_destroy(kvs_workload_t w) {
  if (w == NULL) return;
  if (w->slots != NULL) {
    for (uint64_t i = 0; i < w->o.max_running; i++) free(w->slots[i].locs);
  }
  free(w->slots);
  free(w->order);
  free(w->queue);
  kvs_free_list_destroy(w->full_free);
  free(w->bases);
  free(w->ring);
  free(w->hash_in);
  free(w->blocks);
  free(w->positions);
  free(w->req_ids);
  free(w);
}

kvs_status kvs_workload_create(kvs_shard_t shard, const kvs_workload_options *options,
                               kvs_workload_t *out, kvs_error *err) {
  if (shard == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "shard or output handle is NULL");
  }
  static const kvs_workload_options defaults = KVS_WORKLOAD_OPTIONS_INIT;
  kvs_workload_options adopted;
  kvs_status adopt = kvs_options_adopt(options, &defaults, sizeof defaults,
                                       "KVS_WORKLOAD_OPTIONS_INIT", &adopted, err);
  if (adopt != KVS_OK) return adopt;
  options = &adopted;
  if (options->max_running == 0 || options->max_waiting == 0 || options->prompt_min == 0 ||
      options->prompt_min > options->prompt_max || options->gen_min == 0 ||
      options->gen_min > options->gen_max || !(options->arrival_rate >= 0.0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "workload needs max_running, max_waiting >= 1, 1 <= prompt_min <= "
                         "prompt_max, 1 <= gen_min <= gen_max and arrival_rate >= 0");
  }
  kvs_window_pool_t pool = kvs_shard_pool(shard);
  uint64_t page = kvs_window_pool_page_size(pool);
  uint64_t n_req_slots = kvs_window_pool_request_slots(pool);
  if (n_req_slots > 0 && n_req_slots - 1 < options->max_running) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the pool has %llu request slots besides the dummy for %llu running "
                         "requests: every running request holds one",
                         (unsigned long long)(n_req_slots - 1),
                         (unsigned long long)options->max_running);
  }
  uint64_t full_pages = kvs_window_pool_full_tokens(pool) / page;
  uint64_t max_pages = (kvs_workload_max_seq_len(options) + page - 1) / page;
  if (max_pages + 1 > full_pages) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a %llu-token request needs %llu full pages; the pool has %llu besides "
                         "the dummy",
                         (unsigned long long)kvs_workload_max_seq_len(options),
                         (unsigned long long)max_pages, (unsigned long long)(full_pages - 1));
  }
  uint64_t chunk = options->chunk_tokens != 0 ? options->chunk_tokens
                                              : kvs_window_pool_prefill_chunk_budget(pool);
  size_t worst = kvs_shard_step_capacity_for(chunk, page, options->max_running);
  if (worst > kvs_shard_step_capacity(shard)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a step of this workload may journal %zu entries (%llu-token chunks, "
                         "%llu running), over the shard's step capacity of %zu",
                         worst, (unsigned long long)chunk, (unsigned long long)options->max_running,
                         kvs_shard_step_capacity(shard));
  }
  struct kvs_workload *w = calloc(1, sizeof *w);
  if (w == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a workload");
  w->shard = shard;
  w->pool = pool;
  w->leader = kvs_shard_is_leader(shard);
  w->o = *options;
  w->page = page;
  w->chunk = chunk;
  w->max_pages = max_pages;
  w->rng = options->seed;
  w->slots = calloc((size_t)options->max_running, sizeof *w->slots);
  w->order = calloc((size_t)options->max_running, sizeof *w->order);
  w->queue = calloc((size_t)options->max_waiting, sizeof *w->queue);
  w->bases = calloc((size_t)max_pages, sizeof *w->bases);
  w->ring = calloc((size_t)page, sizeof *w->ring);
  w->hash_in = calloc((size_t)page + 5, sizeof *w->hash_in);
  w->blocks = calloc((size_t)(options->max_running * max_pages), sizeof *w->blocks);
  w->positions = calloc((size_t)options->max_running, sizeof *w->positions);
  bool ok = w->slots != NULL && w->order != NULL && w->queue != NULL && w->bases != NULL &&
            w->ring != NULL && w->hash_in != NULL && w->blocks != NULL && w->positions != NULL &&
            (w->req_ids = calloc((size_t)options->max_running, sizeof *w->req_ids)) != NULL;
  for (uint64_t i = 0; ok && i < options->max_running; i++) {
    ok = (w->slots[i].locs = calloc((size_t)(max_pages * page), sizeof(int64_t))) != NULL;
  }
  kvs_status status = ok ? kvs_free_list_create((full_pages - 1) * page, page, &w->full_free, err)
                         : kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a workload");
  if (status != KVS_OK) {
    kvs_workload_destroy(w);
    return status;
  }
  w->free_win = kvs_window_pool_swa_available(pool) / page;
  w->per_request = n_req_slots > 0;
  *out = w;
  return KVS_OK;
}

void kvs_workload_counters_get(const struct kvs_workload *w, kvs_workload_counters *out) {
  *out = w->c;
  out->running = w->n_active;
  out->waiting = w->queue_count;
}

/* Two window pages per request (the page being written and the one
 * before: a P-token window spans at most two), less what it holds. */
static uint64_t reserve_of(const request *r) {
  uint64_t held = r->hi - r->lo;
  return held >= 2 ? 0 : 2 - held;
}

static uint64_t total_reserve(const struct kvs_workload *w) {
  uint64_t sum = 0;
  for (size_t i = 0; i < w->n_active; i++) sum += reserve_of(&w->slots[w->order[i]]);
  return sum;
}

/* The leader's allocator calls; followers skip them (their bindings come
 * from the broadcast). The first failure is kept and reported once. */
static void pool_alloc(struct kvs_workload *w, request *r, uint64_t first, uint64_t n,
                       kvs_status *status, kvs_error *err) {
  if (!w->leader || *status != KVS_OK || n == 0) return;
  *status =
      kvs_window_pool_alloc(w->pool, r->locs + first * w->page, (size_t)(n * w->page), NULL, err);
}

static void pool_free(struct kvs_workload *w, request *r, uint64_t first, uint64_t end,
                      kvs_status *status, kvs_error *err) {
  if (!w->leader || *status != KVS_OK || end <= first) return;
  *status = kvs_window_pool_free(w->pool, r->locs + first * w->page,
                                 (size_t)((end - first) * w->page), err);
}

/* The leader binds a request slot at admission and frees it at completion
 * (per-request rings); followers take theirs from the broadcast. */
static void slot_bind(struct kvs_workload *w, const request *r, kvs_status *status,
                      kvs_error *err) {
  if (!w->leader || !w->per_request || *status != KVS_OK) return;
  uint64_t slot;
  *status = kvs_window_pool_slot_bind(w->pool, r->id, &slot, err);
}

static void slot_free(struct kvs_workload *w, const request *r, kvs_status *status,
                      kvs_error *err) {
  if (!w->leader || !w->per_request || *status != KVS_OK) return;
  *status = kvs_window_pool_slot_free(w->pool, r->id, err);
}

static void arrive(struct kvs_workload *w) {
  double rate = w->o.arrival_rate;
  uint64_t n = (uint64_t)rate;
  double frac = rate - (double)n;
  if ((double)(kvs_splitmix64(&w->rng) >> 11) * 0x1.0p-53 < frac) n++;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t prompt = uniform(&w->rng, w->o.prompt_min, w->o.prompt_max);
    uint64_t gen = uniform(&w->rng, w->o.gen_min, w->o.gen_max);
    w->c.arrivals++;
    if (w->queue_count == w->o.max_waiting) {
      w->c.dropped++;
      continue;
    }
    arrival *a = &w->queue[(w->queue_head + w->queue_count++) % w->o.max_waiting];
    a->id = w->next_id++;
    a->prompt = prompt;
    a->total = prompt + gen;
  }
}

/* Frees what the previous step left behind: completed requests entirely,
 * the others' pages below their window. */
static void release(struct kvs_workload *w, kvs_status *status, kvs_error *err) {
  size_t kept = 0;
  for (size_t i = 0; i < w->n_active; i++) {
    size_t slot = w->order[i];
    request *r = &w->slots[slot];
    if (r->done == r->total) {
      pool_free(w, r, r->lo, r->hi, status, err);
      slot_free(w, r, status, err);
      w->free_win += r->hi - r->lo;
      for (uint64_t k = 0; k < r->n_pages; k++) w->bases[k] = (uint64_t)r->locs[k * w->page];
      /* Cannot fail: these bases were handed out by this list. */
      kvs_free_list_free(w->full_free, w->bases, (size_t)r->n_pages, NULL);
      r->active = false;
      w->c.completed++;
      continue;
    }
    if (r->done > 0) {
      /* The window of the last written position, done - 1, starts at
       * done - P: pages wholly below it are dead. */
      uint64_t need_lo = (r->done > w->page ? r->done - w->page : 0) / w->page;
      if (need_lo > r->lo) {
        pool_free(w, r, r->lo, need_lo, status, err);
        w->free_win += need_lo - r->lo;
        r->lo = need_lo;
      }
    }
    w->order[kept++] = slot;
  }
  w->n_active = kept;
}

static void admit(struct kvs_workload *w, kvs_status *status, kvs_error *err) {
  bool refused = false;
  while (w->queue_count > 0 && w->n_active < w->o.max_running) {
    const arrival *a = &w->queue[w->queue_head];
    uint64_t n_pages = (a->total + w->page - 1) / w->page;
    if (kvs_free_list_free_units(w->full_free) < n_pages || w->free_win < total_reserve(w) + 2) {
      refused = true;
      break;
    }
    size_t slot = 0;
    while (w->slots[slot].active) slot++; /* n_active < max_running: one is free */
    request *r = &w->slots[slot];
    kvs_free_list_alloc(w->full_free, (size_t)n_pages, w->bases, NULL, NULL);
    for (uint64_t k = 0; k < n_pages; k++) {
      for (uint64_t off = 0; off < w->page; off++) {
        r->locs[k * w->page + off] = (int64_t)(w->bases[k] + off);
      }
    }
    r->id = a->id;
    r->prompt = a->prompt;
    r->total = a->total;
    r->done = 0;
    r->next_done = 0;
    r->n_pages = n_pages;
    r->lo = 0;
    r->hi = 0;
    r->active = true;
    slot_bind(w, r, status, err);
    w->order[w->n_active++] = slot;
    w->queue_head = (w->queue_head + 1) % w->o.max_waiting;
    w->queue_count--;
    w->c.admitted++;
  }
  if (refused) w->c.refused++;
}

static void schedule(struct kvs_workload *w, kvs_status *status, kvs_error *err) {
  /* Decode first: its binds are covered by the reserve. */
  for (size_t i = 0; i < w->n_active; i++) {
    request *r = &w->slots[w->order[i]];
    r->next_done = r->done;
    if (r->done < r->prompt || r->done >= r->total) continue;
    uint64_t page = r->done / w->page;
    if (page >= r->hi) {
      pool_alloc(w, r, r->hi, 1, status, err);
      w->free_win--;
      r->hi++;
    }
    r->next_done = r->done + 1;
    w->c.decode_tokens++;
  }
  /* Then prefill chunks, FIFO, each shrunk to what is free beyond the
   * others' reserve. */
  uint64_t budget = w->chunk;
  uint64_t reserve = total_reserve(w);
  for (size_t i = 0; i < w->n_active && budget > 0; i++) {
    request *r = &w->slots[w->order[i]];
    if (r->done >= r->prompt) continue;
    uint64_t a = r->done;
    uint64_t c = r->prompt - a < budget ? r->prompt - a : budget;
    uint64_t own = reserve_of(r);
    uint64_t others = reserve - own;
    uint64_t allowed = w->free_win > others ? w->free_win - others : 0;
    uint64_t last = (a + c - 1) / w->page;
    if (last + 1 > r->hi + allowed) {
      uint64_t reach = (r->hi + allowed) * w->page;
      if (reach <= a) continue; /* not even one position fits */
      c = reach - a;
      last = (a + c - 1) / w->page;
    }
    uint64_t fresh = last + 1 > r->hi ? last + 1 - r->hi : 0;
    pool_alloc(w, r, r->hi, fresh, status, err);
    w->free_win -= fresh;
    r->hi += fresh;
    reserve = reserve - own + reserve_of(r);
    r->next_done = a + c;
    budget -= c;
    w->c.prefill_tokens += c;
  }
}

/* Every running request's ring context at its last written position,
 * folded in scheduling order (identical on every rank). */
static kvs_status contexts(struct kvs_workload *w, uint64_t *digest, kvs_error *err) {
  uint64_t h = 0x6b76736374787331ull;
  uint64_t P = w->page;
  for (size_t i = 0; i < w->n_active; i++) {
    const request *r = &w->slots[w->order[i]];
    if (r->next_done == 0) continue;
    uint64_t pos = r->next_done - 1;
    int64_t slot, prev;
    kvs_status status = kvs_window_pool_window_ctx(w->pool, pos, r->locs, (size_t)r->next_done,
                                                   &slot, &prev, w->ring, err);
    if (status != KVS_OK) return status;
    w->hash_in[0] = r->id;
    w->hash_in[1] = pos;
    w->hash_in[2] = (uint64_t)slot;
    w->hash_in[3] = (uint64_t)prev;
    /* The request slot its per-request rings live in (-1 per page). */
    w->hash_in[4] = (uint64_t)kvs_window_pool_slot_of(w->pool, r->id);
    memcpy(w->hash_in + 5, w->ring, (size_t)P * sizeof *w->ring);
    h = kvs_mix64(h, XXH3_64bits(w->hash_in, (size_t)(P + 5) * sizeof *w->hash_in));
    w->c.contexts++;
    /* On the leader every position in the window is bound by
     * construction; a hole is a scheduler bug, not a divergence. */
    if (w->leader) {
      bool hole = slot < 0;
      uint64_t reached = pos + 1 < P ? pos + 1 : P;
      for (uint64_t j = 0; j < P && !hole; j++) {
        if (j < reached || pos + 1 >= P) hole = w->ring[j] < 0;
      }
      if (hole) {
        return kvs_error_set(err, KVS_ERR_INTEGRITY,
                             "request %llu at position %llu reads an unbound window slot on the "
                             "leader: the scheduler freed a page still in its window",
                             (unsigned long long)r->id, (unsigned long long)pos);
      }
    }
  }
  *digest = h;
  return KVS_OK;
}

kvs_status kvs_workload_schedule(kvs_workload_t w, uint64_t step, kvs_error *err) {
  if (step != kvs_shard_next_step(w->shard)) {
    return kvs_error_set(
        err, KVS_ERR_EPOCH, "workload step %llu, but the shard runs step %llu next",
        (unsigned long long)step, (unsigned long long)kvs_shard_next_step(w->shard));
  }
  kvs_status planned = KVS_OK;
  kvs_error plan_err;
  kvs_error_clear(&plan_err);
  arrive(w);
  release(w, &planned, &plan_err);
  admit(w, &planned, &plan_err);
  schedule(w, &planned, &plan_err);
  if (w->leader && planned == KVS_OK &&
      kvs_window_pool_swa_available(w->pool) / w->page != w->free_win) {
    planned = kvs_error_set(&plan_err, KVS_ERR_INTEGRITY,
                            "the leader's pool has %llu free window pages, its scheduler "
                            "counts %llu",
                            (unsigned long long)(kvs_window_pool_swa_available(w->pool) / w->page),
                            (unsigned long long)w->free_win);
  }
  if (planned != KVS_OK) {
    /* Tell the followers why the leader stops, then report it. */
    kvs_shard_abort_step(w->shard, step, planned, plan_err.message, NULL);
    return kvs_error_set(err, planned, "leader's scheduler at step %llu: %s",
                         (unsigned long long)step, plan_err.message);
  }
  return KVS_OK;
}

void kvs_workload_batch(kvs_workload_t w, kvs_ring_batch *out) {
  uint64_t stride = w->max_pages;
  for (size_t i = 0; i < w->n_active; i++) {
    const request *r = &w->slots[w->order[i]];
    int32_t *row = w->blocks + i * stride;
    for (uint64_t b = 0; b < stride; b++) {
      row[b] = b < r->n_pages ? (int32_t)((uint64_t)r->locs[b * w->page] / w->page) : -1;
    }
    w->positions[i] = r->next_done > 0 ? (int64_t)(r->next_done - 1) : -1;
    w->req_ids[i] = r->id;
    w->c.contexts += r->next_done > 0;
  }
  kvs_ring_batch b = {.block_table = w->blocks,
                      .stride = stride,
                      .positions = w->positions,
                      .n_req = w->n_active,
                      .slots = NULL,
                      .requests = w->req_ids};
  *out = b;
}

/* The ratio-4 and ratio-128 ring locations of request r at pos, as the
 * pool derives them: per request from its slot, per page from the window
 * slot of pos. */
static kvs_status pool_state_locs(const struct kvs_workload *w, const request *r, uint64_t pos,
                                  int64_t *csa, int64_t *hca, kvs_error *err) {
  kvs_state_rings rings = kvs_window_pool_state_rings(w->pool);
  int64_t window_slot, req_slot = kvs_window_pool_slot_of(w->pool, r->id);
  kvs_status status = kvs_window_pool_translate(w->pool, r->locs[pos], &window_slot, err);
  if (status == KVS_OK) {
    status = kvs_state_rings_csa_per_request(rings)
                 ? kvs_request_state_loc(req_slot, (int64_t)pos, 8, csa, err)
                 : kvs_state_loc(window_slot, 8, w->page, csa, err);
  }
  if (status == KVS_OK) {
    status = kvs_state_rings_hca_per_request(rings)
                 ? kvs_request_state_loc(req_slot, (int64_t)pos, 128, hca, err)
                 : kvs_state_loc(window_slot, 128, w->page, hca, err);
  }
  return status;
}

kvs_status kvs_workload_verify_state(kvs_workload_t w, const int64_t *csa, const int64_t *hca,
                                     size_t n_req, kvs_error *err) {
  if (n_req != w->n_active) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "state locations of %zu requests for a batch of %zu", n_req, w->n_active);
  }
  for (size_t i = 0; i < w->n_active; i++) {
    const request *r = &w->slots[w->order[i]];
    int64_t want_csa = -1, want_hca = -1;
    if (r->next_done > 0) {
      kvs_status status = pool_state_locs(w, r, r->next_done - 1, &want_csa, &want_hca, err);
      if (status != KVS_OK) return status;
    }
    if (csa[i] != want_csa || hca[i] != want_hca) {
      return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                           "request %llu (row %zu): the table's ring locations (ratio 4: %lld, "
                           "ratio 128: %lld) are not the pool's (%lld, %lld); its request slot "
                           "here is %lld",
                           (unsigned long long)r->id, i, (long long)csa[i], (long long)hca[i],
                           (long long)want_csa, (long long)want_hca,
                           (long long)kvs_window_pool_slot_of(w->pool, r->id));
    }
  }
  return KVS_OK;
}

kvs_status kvs_workload_verify_ring(kvs_workload_t w, const int64_t *own, const int64_t *prev,
                                    const int64_t *ring, size_t n_req, kvs_error *err) {
  if (n_req != w->n_active) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "ring contexts of %zu requests for a batch of %zu", n_req, w->n_active);
  }
  uint64_t P = w->page;
  for (size_t i = 0; i < w->n_active; i++) {
    const request *r = &w->slots[w->order[i]];
    if (r->next_done == 0) {
      bool idle = own[i] == -1 && prev[i] == -1;
      for (uint64_t j = 0; j < P && idle; j++) idle = ring[i * P + j] == -1;
      if (!idle) {
        return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                             "request %llu has written nothing, yet its ring context row %zu "
                             "names slots",
                             (unsigned long long)r->id, i);
      }
      continue;
    }
    uint64_t pos = r->next_done - 1;
    int64_t slot, before;
    kvs_status status = kvs_window_pool_window_ctx(w->pool, pos, r->locs, (size_t)r->next_done,
                                                   &slot, &before, w->ring, err);
    if (status != KVS_OK) return status;
    bool same = slot == own[i] && before == prev[i] &&
                memcmp(w->ring, ring + i * P, (size_t)P * sizeof *ring) == 0;
    if (!same) {
      uint64_t j = 0;
      while (j < P && w->ring[j] == ring[i * P + j]) j++;
      return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                           "request %llu at position %llu: the table's ring context (own %lld, "
                           "previous %lld, ring slot %llu = %lld) is not the pool's (%lld, %lld, "
                           "%lld)",
                           (unsigned long long)r->id, (unsigned long long)pos, (long long)own[i],
                           (long long)prev[i], (unsigned long long)(j < P ? j : 0),
                           (long long)ring[i * P + (j < P ? j : 0)], (long long)slot,
                           (long long)before, (long long)w->ring[j < P ? j : 0]);
    }
  }
  return KVS_OK;
}

void kvs_workload_advance(kvs_workload_t w) {
  for (size_t i = 0; i < w->n_active; i++) {
    request *r = &w->slots[w->order[i]];
    r->done = r->next_done;
  }
}

kvs_status kvs_workload_step(kvs_workload_t w, uint64_t step, kvs_error *err) {
  kvs_status status = kvs_workload_schedule(w, step, err);
  if (status != KVS_OK) return status;
  kvs_status stepped = kvs_shard_step(w->shard, step, NULL, err);
  if (stepped != KVS_OK && stepped != KVS_ERR_DIVERGENCE) return stepped;
  uint64_t digest = 0;
  kvs_error ctx_err;
  status = contexts(w, &digest, &ctx_err);
  kvs_workload_advance(w);
  if (status != KVS_OK) {
    if (err != NULL) *err = ctx_err;
    return status;
  }
  w->c.context_digest = digest;
  kvs_shard_set_aux_digest(w->shard, step, digest);
  return stepped;
}

kvs_status kvs_workload_live_request(const struct kvs_workload *w, uint64_t *id, kvs_error *err) {
  const request *best = NULL;
  for (size_t i = 0; i < w->n_active; i++) {
    const request *r = &w->slots[w->order[i]];
    if (best == NULL || r->total - r->done > best->total - best->done) best = r;
  }
  if (best == NULL) return kvs_error_set(err, KVS_ERR_NOT_FOUND, "no request is running");
  *id = best->id;
  return KVS_OK;
}

kvs_status kvs_workload_live_page(const struct kvs_workload *w, uint64_t *full_page,
                                  kvs_error *err) {
  const request *best = NULL;
  for (size_t i = 0; i < w->n_active; i++) {
    const request *r = &w->slots[w->order[i]];
    if (r->done == 0 || r->hi == r->lo) continue;
    bool decoding = r->done >= r->prompt;
    bool best_decoding = best != NULL && best->done >= best->prompt;
    if (best == NULL || (decoding && !best_decoding) ||
        (decoding == best_decoding && r->total - r->done > best->total - best->done)) {
      best = r;
    }
  }
  if (best == NULL) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND, "no running request holds a window page yet");
  }
  uint64_t k = (best->done - 1) / w->page;
  *full_page = (uint64_t)best->locs[k * w->page] / w->page;
  return KVS_OK;
}

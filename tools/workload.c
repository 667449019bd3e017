#include "tools/workload.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/options.h"
#include "pool/free_list.h"
#include "core/mix.h"
#include "pool/window_pool.h"

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
  /* With a trace: */
  uint64_t slot;           /* its request slot */
  uint64_t hit_pages;      /* pages read from the prefix cache (the cache's) */
  uint64_t key_pages;      /* pages whose keys the trace gives */
  int64_t tail_page;       /* its page whose window it keeps for the cache; -1 */
  uint64_t reprefill_left; /* window tokens still to recompute */
  uint64_t inserted;       /* pages past the hit it gave the cache so far (leader) */
  uint64_t copy_steps;     /* steps its host-tier blocks still take to copy back */
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

  /* Trace mode. */
  const kvs_trace *trace;
  size_t next_arrival;     /* the trace's next request to arrive */
  uint64_t keys_per_block; /* pages per trace block */
  uint64_t *keys;          /* scratch: max_pages */
  int64_t *pages;          /* scratch: max_pages */
  uint8_t *tails, *taken;  /* scratch: max_pages */
  int64_t *evicted;        /* scratch: max_pages */
  uint8_t *cached;         /* per full page: the cache owns it (learned) */
  uint64_t *acq_req;       /* this step's acquires and tail writers: request -> node */
  int64_t *acq_node;
  bool *acq_writes;
  size_t n_acq, acq_cap;
  uint64_t fetched;     /* host-tier blocks fetched since the last acquire learned */
  uint64_t fetch_for;   /* the request that acquire was for (+ 1; 0: none) */
  uint64_t fetch_count; /* and how many blocks it fetched */
  uint64_t load_count;  /* of them, read from the disk tier */
  uint64_t loaded;      /* disk reads journaled since the last acquire */
  uint64_t deferred;    /* the request whose host hit last waited a step (+ 1; 0: none) */
};

static uint64_t uniform(uint64_t *state, uint64_t lo, uint64_t hi) {
  return hi <= lo ? lo : lo + kvs_splitmix64(state) % (hi - lo + 1);
}

uint64_t kvs_workload_max_seq_len(const kvs_workload_options *options) {
  if (options->trace != NULL) return options->trace->max_total;
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
  free(w->keys);
  free(w->pages);
  free(w->tails);
  free(w->taken);
  free(w->evicted);
  free(w->cached);
  free(w->acq_req);
  free(w->acq_node);
  free(w->acq_writes);
  free(w);
}

/* kvs_workload_create's trace: refused where the pool cannot replay it,
 * else its keys, the cache's scratch and a queue of all its requests. */
static kvs_status attach_trace(struct kvs_workload *w, uint64_t max_pages, uint64_t full_pages,
                               kvs_error *err) {
  const kvs_workload_options *options = &w->o;
  const kvs_trace *t = options->trace;
  uint64_t page = w->page;
  const char *why = NULL;
  if (!w->per_request) {
    why =
        "a trace needs rings per request (--state-rings per-request or hca-per-request): "
        "the leader's admissions travel as request-slot binds";
  } else if (t->block % page != 0) {
    why = "the trace's block is no whole number of pages";
  } else if (options->prefix_policy != KVS_PREFIX_POLICY_NONE &&
             !kvs_window_pool_prefix_enabled(w->pool)) {
    why = "a prefix policy needs a pool with a prefix cache";
  } else if (!(options->step_ms > 0)) {
    why = "a trace needs a step of positive duration";
  } else if (!(t->timestamp[t->n - 1] / options->step_ms < 0x1p53)) {
    why = "the trace's last arrival is 2^53 steps or more away: give a longer step";
  }
  if (why != NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s", why);
  w->trace = t;
  w->keys_per_block = t->block / page;
  w->acq_cap = 4 * (size_t)options->max_running + 16;
  bool ok = (w->keys = calloc((size_t)max_pages, sizeof *w->keys)) != NULL &&
            (w->pages = calloc((size_t)max_pages, sizeof *w->pages)) != NULL &&
            (w->tails = calloc((size_t)max_pages, sizeof *w->tails)) != NULL &&
            (w->taken = calloc((size_t)max_pages, sizeof *w->taken)) != NULL &&
            (w->evicted = calloc((size_t)max_pages, sizeof *w->evicted)) != NULL &&
            (w->cached = calloc((size_t)full_pages, sizeof *w->cached)) != NULL &&
            (w->acq_req = calloc(w->acq_cap, sizeof *w->acq_req)) != NULL &&
            (w->acq_node = calloc(w->acq_cap, sizeof *w->acq_node)) != NULL &&
            (w->acq_writes = calloc(w->acq_cap, sizeof *w->acq_writes)) != NULL;
  free(w->queue);
  w->o.max_waiting = t->n;
  if (!ok || (w->queue = calloc(t->n, sizeof *w->queue)) == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %zu-request trace", t->n);
  }
  return KVS_OK;
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
  if (max_pages + 1 > full_pages && options->trace != NULL) {
    max_pages = full_pages - 1; /* longer requests are skipped at arrival */
  } else if (max_pages + 1 > full_pages) {
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
  if (options->trace != NULL && (status = attach_trace(w, max_pages, full_pages, err)) != KVS_OK) {
    kvs_workload_destroy(w);
    return status;
  }
  *out = w;
  return KVS_OK;
}

void kvs_workload_counters_get(const struct kvs_workload *w, kvs_workload_counters *out) {
  *out = w->c;
  out->running = w->n_active;
  out->waiting = w->queue_count;
  out->max_request_tokens = w->max_pages * w->page;
}

/* KVS_WINDOW_PAGES_PER_REQUEST window pages per request (the page being
 * written and the one before: a P-token window spans at most two), less
 * what it holds. */
static uint64_t reserve_of(const request *r) {
  uint64_t held = r->hi - r->lo;
  return held >= KVS_WINDOW_PAGES_PER_REQUEST ? 0 : KVS_WINDOW_PAGES_PER_REQUEST - held;
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
    if (w->trace != NULL && r->done == r->total) {
      w->order[kept++] = slot; /* the leader's decisions end it (kvs_workload_learn) */
      continue;
    }
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
        if (w->trace != NULL && r->tail_page >= (int64_t)r->lo && r->tail_page < (int64_t)need_lo) {
          /* The page it keeps for the cache stays bound. */
          pool_free(w, r, r->lo, (uint64_t)r->tail_page, status, err);
          pool_free(w, r, (uint64_t)r->tail_page + 1, need_lo, status, err);
          w->free_win += need_lo - r->lo - 1;
        } else {
          pool_free(w, r, r->lo, need_lo, status, err);
          w->free_win += need_lo - r->lo;
        }
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
    if (kvs_free_list_free_units(w->full_free) < n_pages ||
        w->free_win < total_reserve(w) + KVS_WINDOW_PAGES_PER_REQUEST) {
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
    r->tail_page = -1;
    r->hit_pages = 0;
    r->reprefill_left = 0;
    r->copy_steps = 0;
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
    if (r->copy_steps > 0) {
      /* Its host-tier blocks are still on their way back: nothing of the
       * prompt past them can be computed yet. */
      r->copy_steps--;
      continue;
    }
    if (r->reprefill_left > 0) {
      /* A hit's window tokens before its boundary: computed into the
       * window page the hit bound, nothing new to bind. */
      uint64_t c = r->reprefill_left < budget ? r->reprefill_left : budget;
      r->reprefill_left -= c;
      budget -= c;
      w->c.prefill_tokens += c;
      if (r->reprefill_left > 0 || budget == 0) continue;
    }
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

/* ---- trace mode ----
 *
 * Requests arrive at their timestamps. Only the leader decides what they
 * reuse, when they are admitted and what the cache evicts (at the end of
 * its schedule, after every rank's deterministic part: slides, decode,
 * prefill); every decision is journaled, and every rank -- the leader too
 * -- learns them from the step's journal (kvs_workload_learn): a request
 * slot bound is an admission (its hit from the ACQUIRE before it), a slot
 * freed a completion (its pages back but those the cache took), an EVICT a
 * page back. So every rank's scheduler holds the same requests and pages. */

static uint64_t pages_of(const struct kvs_workload *w, uint64_t tokens) {
  return (tokens + w->page - 1) / w->page;
}

/* The simulated clock at a step: the steps run and the idle ones jumped. */
static double trace_now(const struct kvs_workload *w, uint64_t step) {
  return (double)(step + w->c.idle_steps_skipped) * w->o.step_ms;
}

static void arrive_trace(struct kvs_workload *w, uint64_t step) {
  const kvs_trace *t = w->trace;
  double now = trace_now(w, step);
  /* Idle before the next arrival: nothing runs or waits, so the steps
   * until it would change nothing (its admission step does the headroom
   * eviction an idle step would). The clock jumps to the first step at or
   * after it, on the same grid of step_ms, so every arrival keeps the
   * simulated time it had step by step. kvs_workload_create bounds the
   * grid (2^53 steps), so the step count is exact. */
  if (w->n_active == 0 && w->queue_count == 0 && w->next_arrival < t->n &&
      t->timestamp[w->next_arrival] > now) {
    double at = t->timestamp[w->next_arrival];
    uint64_t target = (uint64_t)ceil(at / w->o.step_ms);
    while ((double)target * w->o.step_ms < at) target++;
    uint64_t clock = step + w->c.idle_steps_skipped;
    if (target > clock) w->c.idle_steps_skipped += target - clock;
    now = trace_now(w, step);
  }
  if (w->next_arrival == 0 && t->timestamp[0] <= now) {
    w->c.trace_start_step = step + w->c.idle_steps_skipped;
  }
  while (w->next_arrival < t->n && t->timestamp[w->next_arrival] <= now) {
    size_t i = w->next_arrival++;
    w->c.arrivals++;
    uint64_t total = t->input[i] + t->output[i];
    if (pages_of(w, total) > w->max_pages) {
      w->c.trace_skipped++; /* the pool can never hold it */
      if (total > w->c.trace_longest) w->c.trace_longest = total;
      continue;
    }
    arrival *a = &w->queue[(w->queue_head + w->queue_count++) % w->o.max_waiting];
    a->id = i;
    a->prompt = t->input[i];
    a->total = total;
  }
}

/* The keys of request `id`'s pages whose trace block is whole: page j of
 * block b is key mix(id_b, j). Returns how many. */
uint64_t kvs_workload_trace_keys(const kvs_trace *t, uint64_t page, size_t id, uint64_t *keys) {
  uint64_t per_block = t->block / page;
  uint64_t n = (t->input[id] / t->block) * per_block;
  const uint64_t *ids = t->ids + t->first[id];
  for (uint64_t j = 0; j < n; j++) keys[j] = kvs_mix64(ids[j / per_block] + 1, j % per_block);
  return n;
}

static uint64_t trace_keys(struct kvs_workload *w, uint64_t id) {
  return kvs_workload_trace_keys(w->trace, w->page, (size_t)id, w->keys);
}

/* Which page a policy keeps the window of for the cache (-1: none): the
 * prompt's last page whose block is whole, where the trace's next turn can
 * match. sglang keeps a finished request's SWA only for the last window +
 * page (256) tokens of prompt and output (swa_radix_cache.py
 * cache_finished_req's swa_evicted_seqlen; research notes 2.2, 2.5): the
 * prompt end's window survives only when the output is that short. */
static int64_t tail_page_for(const struct kvs_workload *w, uint64_t key_pages, uint64_t hit_pages,
                             uint64_t input, uint64_t total) {
  if (w->o.prefix_policy == KVS_PREFIX_POLICY_NONE || key_pages <= hit_pages) return -1;
  if (w->o.prefix_policy == KVS_PREFIX_POLICY_SGLANG &&
      total - key_pages * w->page > w->page + 256) {
    (void)input;
    return -1;
  }
  return (int64_t)key_pages - 1;
}

static uint64_t running_reserve(const struct kvs_workload *w) {
  uint64_t sum = 0;
  for (size_t i = 0; i < w->n_active; i++) {
    const request *r = &w->slots[w->order[i]];
    if (r->done < r->total) sum += reserve_of(r);
  }
  return sum;
}

/* A hit that reaches into the host tier, taken in one decision: the
 * library's eviction for a fetch (kvs_window_pool_prefix_evict_for_fetch)
 * frees, keeping the hit's GPU path and host slots, as many GPU blocks as
 * the fetched blocks plus the request's own pages past what is free need;
 * the fetch then takes its pages from those evicted ones. That last part
 * is kvsim's policy, not the library's: evicted pages go back on every
 * rank's free list as the step is learned and the FETCH entries take the
 * same pages straight off it, so no follower's scheduler needs to guess
 * which free page the leader meant (an engine whose followers replay the
 * journal alone may fetch into any free page). A hit falls back to its GPU
 * part only when fewer blocks than it fetches could be evicted.
 * proj_full and win count what came back. */
static kvs_status take_host_hit(struct kvs_workload *w, const arrival *a, uint64_t n_keys,
                                uint64_t reprefill, kvs_prefix_hit *hit, uint64_t *proj_full,
                                uint64_t *win, bool *defer, kvs_error *err) {
  kvs_window_pool_t pool = w->pool;
  uint64_t P = w->page;
  /* Each block fetched costs an eviction (up to 4 entries) and the fetch's
   * 3, and each own page past the free ones an eviction more: the step's
   * journal room bounds how deep into the tier this hit goes. A hit that a
   * fresh step would hold whole waits for one (the request stays at the
   * queue's head) rather than go shallower now; once only, so that a step
   * that starts with little room again takes it shallower and no request
   * waits at the head for good. */
  size_t capacity = kvs_window_pool_journal_capacity(pool);
  size_t room = capacity - kvs_window_pool_journal_pending(pool);
  uint64_t own_all = pages_of(w, a->total) - hit->hit_tokens / P;
  uint64_t short_own = own_all > *proj_full ? 4 * (own_all - *proj_full) : 0;
  uint64_t max_host = room > 64 + short_own ? (room - 64 - short_own) / 7 : 0;
  uint64_t max_fresh = capacity > 64 + short_own ? (capacity - 64 - short_own) / 7 : 0;
  *defer = hit->host_pages > max_host && max_host < max_fresh && w->deferred != a->id + 1;
  w->deferred = *defer ? a->id + 1 : 0;
  if (*defer) return KVS_OK;
  w->c.host_hit_attempts++;
  kvs_status status = kvs_window_pool_prefix_match_within(pool, w->keys, (size_t)n_keys, a->prompt,
                                                          reprefill, max_host, hit, NULL, err);
  if (status != KVS_OK) return status;
  if (hit->host_pages > 0) {
    uint64_t own = pages_of(w, a->total) - hit->hit_tokens / P;
    uint64_t need = hit->host_pages + (own > *proj_full ? own - *proj_full : 0);
    size_t n_freed = 0;
    uint64_t wfreed = 0;
    kvs_error room_err;
    status =
        kvs_window_pool_prefix_evict_for_fetch(pool, hit, w->keys, (size_t)n_keys, need, w->evicted,
                                               (size_t)w->max_pages, &n_freed, &wfreed, &room_err);
    if (status != KVS_OK && status != KVS_ERR_JOURNAL_FULL) {
      if (err != NULL) *err = room_err;
      return status;
    }
    *win += wfreed;
    *proj_full += n_freed;
    if (status == KVS_OK && n_freed >= hit->host_pages) {
      *proj_full -= hit->host_pages;
      return kvs_window_pool_prefix_fetch(pool, a->id, hit, w->keys, (size_t)n_keys, w->evicted,
                                          err);
    }
  }
  /* Not a host hit after all (too deep for the step's room, or too few
   * blocks to evict): its GPU part. */
  w->c.host_hit_fallbacks++;
  return kvs_window_pool_prefix_match_within(pool, w->keys, (size_t)n_keys, a->prompt, reprefill, 0,
                                             hit, NULL, err);
}

/* The leader's decisions, journaled; nothing here changes the scheduler
 * (kvs_workload_learn does, on every rank). */
/* Entries the leader's journal has left this step. */
static size_t journal_room(const struct kvs_workload *w) {
  return kvs_window_pool_journal_capacity(w->pool) - kvs_window_pool_journal_pending(w->pool);
}

/* The request's next n pages past what it hit and inserted join the
 * cache; the one whose window it keeps joins with that window as its tail. */
static kvs_status insert_next(struct kvs_workload *w, request *r, size_t n, kvs_error *err) {
  uint64_t first = r->hit_pages + r->inserted;
  trace_keys(w, r->id);
  for (size_t k = 0; k < n; k++) {
    uint64_t pg = first + k;
    w->pages[k] = r->locs[pg * w->page] / (int64_t)w->page;
    w->tails[k] = (int64_t)pg == r->tail_page;
  }
  kvs_status status = kvs_window_pool_prefix_insert(w->pool, r->id, w->keys + first, w->pages,
                                                    w->tails, n, w->taken, err);
  if (status == KVS_OK) r->inserted += n;
  return status;
}

/* decide's first part: prompts whose prefill is done join the cache
 * early, under the policies that cache a block as soon as it is full. */
static void insert_early(struct kvs_workload *w, kvs_status *status, kvs_error *err) {
  bool cache = w->o.prefix_policy != KVS_PREFIX_POLICY_NONE;
  /* A prompt's pages join the cache as soon as its prefill is done, so
   * that the next turn of a conversation, arriving while this one still
   * decodes, already hits them, the page whose window the cache keeps
   * with it (that window is written: decode writes later pages).
   * kvshard's policy, and vLLM's: its KVCacheManager caches every block
   * as soon as it is full (cache_blocks after each scheduled chunk),
   * prompt blocks and their sliding-window blocks included. */
  bool early = w->o.prefix_policy == KVS_PREFIX_POLICY_KVSHARD ||
               w->o.prefix_policy == KVS_PREFIX_POLICY_VLLM;
  for (size_t i = 0; cache && early && i < w->n_active; i++) {
    request *r = &w->slots[w->order[i]];
    if (r->done < r->prompt || r->done >= r->total) continue;
    uint64_t upto = r->key_pages;
    if (upto <= r->hit_pages + r->inserted) continue;
    size_t room = journal_room(w);
    if (room < 64) break;
    uint64_t n_ins = upto - r->hit_pages - r->inserted;
    if (n_ins > (room - 32) / 3) n_ins = (room - 32) / 3;
    if ((*status = insert_next(w, r, (size_t)n_ins, err)) != KVS_OK) return;
  }
}

/* decide's second part: finished requests end, their pages joining the
 * cache (as the step has room) and their windows going back; *proj_full
 * grows by the full pages they return. */
static void complete(struct kvs_workload *w, uint64_t *proj_full, kvs_status *status,
                     kvs_error *err) {
  kvs_window_pool_t pool = w->pool;
  bool cache = w->o.prefix_policy != KVS_PREFIX_POLICY_NONE;
  uint64_t P = w->page;
  /* Completions: the pages join the cache, the windows go back. */
  for (size_t i = 0; i < w->n_active; i++) {
    request *r = &w->slots[w->order[i]];
    if (r->done != r->total) continue;
    /* Its pages join the cache in pieces the step has room for (a long
     * prompt's may take several steps); then it ends. */
    uint64_t to_insert = cache && r->key_pages > r->hit_pages + r->inserted
                             ? r->key_pages - r->hit_pages - r->inserted
                             : 0;
    size_t room = journal_room(w);
    if (room < 2 * (r->hi - r->lo) + 24) continue; /* no room: it ends at a later step */
    size_t fit = (room - 2 * (r->hi - r->lo) - 24) / 3;
    size_t n_ins = to_insert < fit ? (size_t)to_insert : fit;
    if (n_ins > 0 && (*status = insert_next(w, r, n_ins, err)) != KVS_OK) return;
    if (n_ins < to_insert) continue; /* the rest at the next step */
    uint64_t returned = 0;
    for (uint64_t k = r->hit_pages; k < r->n_pages; k++) {
      uint64_t fp = (uint64_t)r->locs[k * P] / P;
      int64_t parent;
      returned += kvs_window_pool_prefix_node(pool, fp, NULL, &parent, NULL, NULL, NULL) != KVS_OK;
    }
    *proj_full += returned;
    /* A kept window page the cache did not take (its key was cached by
     * another request meanwhile) goes back like the rest. */
    if (r->tail_page >= 0 && (r->tail_page < (int64_t)r->lo || r->tail_page >= (int64_t)r->hi)) {
      pool_free(w, r, (uint64_t)r->tail_page, (uint64_t)r->tail_page + 1, status, err);
    }
    pool_free(w, r, r->lo, r->hi, status, err);
    if (cache && *status == KVS_OK) *status = kvs_window_pool_prefix_release(pool, r->id, err);
    slot_free(w, r, status, err);
    if (*status != KVS_OK) return;
  }
}

static void decide(struct kvs_workload *w, kvs_status *status, kvs_error *err) {
  if (!w->leader || *status != KVS_OK) return;
  kvs_window_pool_t pool = w->pool;
  bool cache = w->o.prefix_policy != KVS_PREFIX_POLICY_NONE;
  uint64_t P = w->page;
  uint64_t proj_full = kvs_free_list_free_units(w->full_free);
  insert_early(w, status, err);
  if (*status != KVS_OK) return;
  complete(w, &proj_full, status, err);
  if (*status != KVS_OK) return;
  uint64_t win = kvs_window_pool_swa_available(pool) / P;
  uint64_t reserve = running_reserve(w);
  size_t n_freed = 0;
  uint64_t wfreed = 0;
  /* Headroom for a prefill chunk beyond the reserve: retained tails give
   * way first. */
  uint64_t want = reserve + pages_of(w, w->chunk) + 4;
  if (cache && win < want) {
    *status = kvs_window_pool_prefix_evict(pool, 0, want - win, NULL, 0, &n_freed, &wfreed, err);
    if (*status != KVS_OK) return;
    win += wfreed;
  }
  /* Admissions, FIFO from the queue's head, learned next. */
  size_t running = 0;
  for (size_t i = 0; i < w->n_active; i++)
    running += w->slots[w->order[i]].done < w->slots[w->order[i]].total;
  size_t admitted = 0;
  uint64_t slots_free = w->o.max_running - w->n_active;
  bool refused = false;
  while (admitted < w->queue_count && admitted < slots_free) {
    if (journal_room(w) < 32) break;
    const arrival *a = &w->queue[(w->queue_head + admitted) % w->o.max_waiting];
    uint64_t n_pages = pages_of(w, a->total);
    kvs_prefix_hit hit = {0, 0, 0, 0, -1, false, 0, 0, 0};
    if (cache) {
      uint64_t n_keys = trace_keys(w, a->id);
      uint64_t reprefill =
          w->o.prefix_policy == KVS_PREFIX_POLICY_KVSHARD ? w->o.reprefill_tokens : 0;
      *status = kvs_window_pool_prefix_match(pool, w->keys, (size_t)n_keys, a->prompt, reprefill,
                                             &hit, NULL, err);
      if (*status != KVS_OK) return;
      bool short_window = win < reserve + KVS_WINDOW_PAGES_PER_REQUEST * (admitted + 1) + 1;
      if (hit.host_pages > 0 && !short_window) {
        bool defer = false;
        *status = take_host_hit(w, a, n_keys, reprefill, &hit, &proj_full, &win, &defer, err);
        if (*status != KVS_OK) return;
        if (defer) break; /* admitted at the next step, with its journal's whole room */
      } else if ((hit.block >= 0 || hit.host_pages > 0) && hit.reprefill && short_window) {
        /* No window page for the re-prefill: take the exact part. */
        w->c.host_hit_attempts += hit.host_pages > 0;
        w->c.host_hit_fallbacks += hit.host_pages > 0;
        *status = kvs_window_pool_prefix_match(pool, w->keys, (size_t)n_keys, a->prompt, 0, &hit,
                                               NULL, err);
        if (*status != KVS_OK) return;
      }
      if (hit.block >= 0 && hit.host_pages == 0) {
        *status = kvs_window_pool_prefix_acquire(pool, a->id, &hit, err);
        if (*status != KVS_OK) return;
      }
    }
    uint64_t hit_pages = hit.hit_tokens / P;
    uint64_t own = n_pages - hit_pages;
    uint64_t need_win =
        reserve + KVS_WINDOW_PAGES_PER_REQUEST * (admitted + 1) + (hit.reprefill ? 1 : 0);
    if (cache && (own > proj_full || win < need_win)) {
      uint64_t need_full = own > proj_full ? own - proj_full : 0;
      uint64_t need_w = win < need_win ? need_win - win : 0;
      *status = kvs_window_pool_prefix_evict(pool, need_full, need_w, w->evicted,
                                             (size_t)w->max_pages, &n_freed, &wfreed, err);
      if (*status != KVS_OK) return;
      proj_full += n_freed;
      win += wfreed;
    }
    if (own > proj_full || win < need_win) {
      if (hit.block >= 0 || hit.host_pages > 0) {
        *status = kvs_window_pool_prefix_abandon(pool, a->id, err);
      }
      refused = true;
      break;
    }
    /* Its ring slot: an exact hit taken above seeds it (the pool journals
     * the restore after the slot's binding). */
    uint64_t slot;
    *status = kvs_window_pool_slot_bind(pool, a->id, &slot, err);
    if (*status != KVS_OK) return;
    if (hit.reprefill) win--;
    proj_full -= own;
    admitted++;
  }
  (void)running;
  if (refused) w->c.refused++;
}

static int64_t acquired(const struct kvs_workload *w, uint64_t request, bool *writes) {
  for (size_t i = w->n_acq; i-- > 0;) {
    if (w->acq_req[i] == request) {
      *writes = w->acq_writes[i];
      return w->acq_node[i];
    }
  }
  *writes = false;
  return -1;
}

static void note_acquire(struct kvs_workload *w, uint64_t request, int64_t node, bool writes) {
  for (size_t i = 0; i < w->n_acq; i++) {
    if (w->acq_req[i] == request) {
      if (node >= 0) w->acq_node[i] = node;
      w->acq_writes[i] = w->acq_writes[i] || writes;
      return;
    }
  }
  if (w->n_acq == w->acq_cap) return;
  w->acq_req[w->n_acq] = request;
  w->acq_node[w->n_acq] = node;
  w->acq_writes[w->n_acq] = writes;
  w->n_acq++;
}

static bool is_prefix(const kvs_journal_entry *e) {
  return (e->full_page & KVS_JOURNAL_PREFIX_TAG) == KVS_JOURNAL_PREFIX_TAG;
}
static bool is_slot(const kvs_journal_entry *e) {
  return !is_prefix(e) && (e->full_page & KVS_JOURNAL_SLOT_TAG) != 0;
}

static void finish_request(struct kvs_workload *w, size_t at) {
  request *r = &w->slots[w->order[at]];
  for (uint64_t k = r->hit_pages; k < r->n_pages; k++) {
    uint64_t base = (uint64_t)r->locs[k * w->page];
    if (w->cached[base / w->page]) continue; /* the cache took it */
    kvs_free_list_free(w->full_free, &base, 1, NULL);
  }
  r->active = false;
  w->c.completed++;
  w->c.trace_done++;
  for (size_t i = at + 1; i < w->n_active; i++) w->order[i - 1] = w->order[i];
  w->n_active--;
}

static kvs_status start_request(struct kvs_workload *w, uint64_t id, uint64_t slot_no,
                                kvs_error *err) {
  if (w->queue_count == 0 || w->queue[w->queue_head].id != id) {
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "the leader admitted trace request %llu; this rank's queue head is %lld",
                         (unsigned long long)id,
                         w->queue_count > 0 ? (long long)w->queue[w->queue_head].id : -1LL);
  }
  if (w->n_active == w->o.max_running) {
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "the leader admitted trace request %llu past %llu running requests",
                         (unsigned long long)id, (unsigned long long)w->o.max_running);
  }
  const arrival *a = &w->queue[w->queue_head];
  uint64_t P = w->page;
  bool writes = false;
  int64_t node = acquired(w, id, &writes);
  /* The hit's pages: its last block's ancestors, from this rank's index. */
  uint64_t hit_pages = 0;
  for (int64_t at = node; at >= 0 && hit_pages < w->max_pages;) {
    int64_t parent = -1;
    if (kvs_window_pool_prefix_node(w->pool, (uint64_t)at, NULL, &parent, NULL, NULL, err)) {
      return KVS_ERR_DIVERGENCE;
    }
    w->pages[hit_pages++] = at;
    at = parent;
  }
  size_t slot = 0;
  while (w->slots[slot].active) slot++;
  request *r = &w->slots[slot];
  uint64_t n_pages = pages_of(w, a->total);
  uint64_t own = n_pages - hit_pages;
  if (kvs_free_list_free_units(w->full_free) < own) {
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "the leader admitted trace request %llu needing %llu full pages; this "
                         "rank has %llu free",
                         (unsigned long long)id, (unsigned long long)own,
                         (unsigned long long)kvs_free_list_free_units(w->full_free));
  }
  for (uint64_t k = 0; k < hit_pages; k++) {
    uint64_t fp = (uint64_t)w->pages[hit_pages - 1 - k];
    for (uint64_t off = 0; off < P; off++) r->locs[k * P + off] = (int64_t)(fp * P + off);
  }
  kvs_free_list_alloc(w->full_free, (size_t)own, w->bases, NULL, NULL);
  for (uint64_t k = 0; k < own; k++) {
    for (uint64_t off = 0; off < P; off++) {
      r->locs[(hit_pages + k) * P + off] = (int64_t)(w->bases[k] + off);
    }
  }
  const kvs_trace *t = w->trace;
  r->id = id;
  r->prompt = a->prompt;
  r->total = a->total;
  r->done = hit_pages * P;
  r->next_done = r->done;
  r->n_pages = n_pages;
  r->lo = r->hi = hit_pages;
  r->active = true;
  r->slot = slot_no;
  r->hit_pages = hit_pages;
  r->inserted = 0;
  r->key_pages = (t->input[id] / t->block) * w->keys_per_block;
  if (r->key_pages > n_pages) r->key_pages = n_pages;
  r->tail_page = tail_page_for(w, r->key_pages, hit_pages, a->prompt, a->total);
  r->reprefill_left = writes ? w->o.reprefill_tokens : 0;
  /* Its blocks from the host tier are copied back before it computes. */
  uint64_t fetched = w->fetch_for == id + 1 ? w->fetch_count : 0;
  uint64_t loaded = w->fetch_for == id + 1 ? w->load_count : 0;
  /* A block from disk is read into host memory, then copied back as a
   * host block is. */
  double read_ms = (double)loaded * w->o.disk_ms_per_page;
  double copy_ms = (double)fetched * w->o.host_ms_per_page + read_ms;
  w->c.disk_hit_tokens += loaded * P;
  w->c.disk_read_ms += read_ms;
  r->copy_steps = copy_ms > 0 ? (uint64_t)ceil(copy_ms / w->o.step_ms) : 0;
  w->c.host_hit_tokens += fetched * P;
  w->c.host_copy_ms += copy_ms;
  w->fetch_for = 0;
  w->order[w->n_active++] = slot;
  w->queue_head = (w->queue_head + 1) % w->o.max_waiting;
  w->queue_count--;
  w->c.admitted++;
  w->c.prompt_tokens += a->prompt;
  w->c.hit_tokens += hit_pages * P;
  w->c.reprefill_tokens += r->reprefill_left;
  return KVS_OK;
}

kvs_status kvs_workload_learn(kvs_workload_t w, const kvs_journal_entry *entries, size_t n,
                              kvs_error *err) {
  if (w == NULL || (entries == NULL && n > 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: workload or entries is NULL",
                         __func__);
  }
  if (w->trace == NULL) return KVS_OK;
  w->n_acq = 0;
  for (size_t i = 0; i < n; i++) {
    const kvs_journal_entry *e = &entries[i];
    if (is_prefix(e)) {
      uint64_t page = 0;
      int64_t operand = -1;
      kvs_prefix_op op = kvs_window_pool_prefix_entry(e, &page, &operand);
      if (op == KVS_PREFIX_OP_NEW_LINK) {
        w->cached[page] = 1;
      } else if (op == KVS_PREFIX_OP_EVICT) {
        uint64_t base = page * w->page;
        w->cached[page] = 0;
        kvs_free_list_free(w->full_free, &base, 1, NULL);
      } else if (op == KVS_PREFIX_OP_FETCH || op == KVS_PREFIX_OP_LOAD) {
        /* A page the same step's eviction just gave back. */
        uint64_t base = page * w->page;
        if (kvs_free_list_take(w->full_free, base, NULL) != KVS_OK) {
          return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                               "the leader fetched a host-tier block into full page %llu, which "
                               "this rank's scheduler does not hold free",
                               (unsigned long long)page);
        }
        w->fetched++;
        if (op == KVS_PREFIX_OP_LOAD) w->loaded++;
      } else if (op == KVS_PREFIX_OP_ACQUIRE && operand >= 0) {
        note_acquire(w, (uint64_t)operand, (int64_t)page, false);
        w->fetch_for = (uint64_t)operand + 1;
        w->fetch_count = w->fetched;
        w->load_count = w->loaded;
        w->fetched = 0;
        w->loaded = 0;
      } else if (op == KVS_PREFIX_OP_TAIL && operand >= 0) {
        note_acquire(w, (uint64_t)operand, -1, true);
      }
    } else if (is_slot(e)) {
      uint64_t slot_no = e->full_page & ~KVS_JOURNAL_SLOT_TAG;
      if (e->window_page >= 0) {
        kvs_status status = start_request(w, (uint64_t)e->window_page, slot_no, err);
        if (status != KVS_OK) return status;
      } else {
        for (size_t k = 0; k < w->n_active; k++) {
          if (w->slots[w->order[k]].slot == slot_no) {
            finish_request(w, k);
            break;
          }
        }
      }
    }
  }
  kvs_prefix_stats stats;
  if (kvs_window_pool_prefix_stats(w->pool, &stats, NULL) == KVS_OK) {
    w->c.evictions = stats.evictions;
    w->c.tail_drops = stats.tail_drops;
    w->c.spills = stats.spills;
    w->c.host_drops = stats.host_drops;
    w->c.host_slots = stats.host_slots;
    w->c.disk_slots = stats.disk_slots;
    w->c.disk_blocks = stats.disk_blocks;
    w->c.stores = stats.stores;
    w->c.disk_drops = stats.disk_drops;
    w->c.store_missed = stats.store_missed;
    if (stats.nodes > w->c.peak_cached_pages) w->c.peak_cached_pages = stats.nodes;
  }
  return KVS_OK;
}

kvs_status kvs_workload_live_block(const struct kvs_workload *w, uint64_t *block, kvs_error *err) {
  for (size_t i = 0; i < w->n_active; i++) {
    const request *r = &w->slots[w->order[i]];
    if (w->trace != NULL && r->hit_pages > 0 && r->done < r->total) {
      *block = (uint64_t)r->locs[(r->hit_pages - 1) * w->page] / w->page;
      return KVS_OK;
    }
  }
  return kvs_error_set(err, KVS_ERR_NOT_FOUND, "no running request holds a cached block");
}

bool kvs_workload_trace_done(const struct kvs_workload *w) {
  return w != NULL && w->trace != NULL && w->next_arrival == w->trace->n && w->queue_count == 0 &&
         w->n_active == 0;
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
  if (w->trace != NULL) {
    /* Every rank's pool holds the leader's state as it stood after its
     * decisions of the last step. */
    w->free_win = kvs_window_pool_swa_available(w->pool) / w->page;
    arrive_trace(w, step);
  } else {
    arrive(w);
  }
  release(w, &planned, &plan_err);
  if (w->trace == NULL) admit(w, &planned, &plan_err);
  schedule(w, &planned, &plan_err);
  if (w->leader && planned == KVS_OK &&
      kvs_window_pool_swa_available(w->pool) / w->page != w->free_win) {
    planned = kvs_error_set(&plan_err, KVS_ERR_INTEGRITY,
                            "the leader's pool has %llu free window pages, its scheduler "
                            "counts %llu",
                            (unsigned long long)(kvs_window_pool_swa_available(w->pool) / w->page),
                            (unsigned long long)w->free_win);
  }
  if (w->trace != NULL) decide(w, &planned, &plan_err);
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

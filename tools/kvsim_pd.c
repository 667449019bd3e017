#include "tools/kvsim_pd.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/geometry.h"
#include "core/mix.h"
#include "core/model_config.h"
#include "kvplan/args.h"
#include "kvplan/plan_json.h"
#include "shard/comm.h"
#include "shard/comm_loopback.h"
#include "shard/node.h"
#include "shard/transfer_rows.h"
#include "tools/trace.h"
#include "tools/workload.h"

enum { SIDE_P = 0, SIDE_D = 1 };

/* The figures every rank adds to (summed over the link at the end): the
 * decode leader counts requests and tokens, every decode rank its
 * transfer reports' figures and the rule's bytes of its layers. */
enum {
  F_MOVED,         /* requests moved (agreed or refused) */
  F_SKIPPED,       /* requests longer than either node holds */
  F_AGREED,        /* requests whose digests agreed on every decode rank */
  F_REFUSED,       /* requests the decode side refused */
  F_SEND_FAILED,   /* prefill ranks' sends that failed */
  F_UNITS,         /* units moved and digested */
  F_BYTES,         /* their rows' bytes */
  F_WIRE,          /* what the links carried */
  F_REUSED,        /* rows the decode side kept (its prefix) */
  F_MESSAGES,      /* point-to-point messages of the rows */
  F_HIT_REQUESTS,  /* requests with a decode-side hit */
  F_HIT_TOKENS,    /* tokens those hits reused */
  F_PROMPT_TOKENS, /* tokens of the requests moved */
  F_LINK_NS,       /* simulated transfer time at --link-bandwidth */
  F_RULE,          /* KVS_XFER_POOLS figures: the rule's bytes, reuse 0 */
  F_COUNT = F_RULE + KVS_XFER_POOLS
};

/* What every rank thread shares, read-only once the threads start. */
typedef struct shared {
  const kvsim_args *a;
  kvs_trace trace;
  kvs_geometry geometry;
  uint64_t max_input;
  int ranks[2];
  kvs_comm_loopback_group_t group[2], link;
} shared;

typedef struct pd_rank {
  pthread_t thread;
  shared *s;
  int side, rank, link_rank;
  int code;
  kvs_comm_t comm, link;
  kvs_node_t node;
  uint64_t page;
  uint64_t limit; /* the most pages a request may fill on both nodes */
  int *peers;     /* the other node's link ranks */
  size_t n_peers;
  uint64_t *ctrl;      /* decode: [state, H, pages...] broadcast by the leader */
  uint64_t *keys;      /* the request's keys (learn) */
  uint64_t n_keys;     /* how many */
  uint64_t window;     /* the request's window_tokens (learn) */
  int64_t *hit_pages;  /* decode leader: match's pages */
  int64_t *evicted;    /* decode leader: pages eviction gave back */
  int64_t *free_pages; /* decode leader: the engine's free full pages (a stack) */
  size_t n_free;
  uint8_t *tails, *taken; /* decode leader: insert's */
  kvs_node_rows *rows;    /* this rank's units of a request */
  size_t rows_cap;
  uint64_t f[F_COUNT];
  bool diverged;
  char first_refusal[KVS_ERROR_MESSAGE_MAX + 96];
} pd_rank;

static kvs_status allreduce(kvs_comm_t comm, uint64_t *v, size_t n, kvs_comm_op op,
                            kvs_error *err) {
  kvs_comm_buffer buf = {NULL, NULL, 0, NULL};
  kvs_status status = kvs_comm_buffer_alloc(comm, n * sizeof(uint64_t), &buf, err);
  if (status != KVS_OK) return status;
  memcpy(buf.host, v, n * sizeof(uint64_t));
  status = kvs_comm_allreduce_u64(comm, &buf, n, op, err);
  if (status == KVS_OK) memcpy(v, buf.host, n * sizeof(uint64_t));
  kvs_comm_buffer_free(comm, &buf);
  return status;
}

static kvs_status broadcast(kvs_comm_t comm, uint64_t *v, size_t n, kvs_error *err) {
  kvs_comm_buffer buf = {NULL, NULL, 0, NULL};
  kvs_status status = kvs_comm_buffer_alloc(comm, n * sizeof(uint64_t), &buf, err);
  if (status != KVS_OK) return status;
  memcpy(buf.host, v, n * sizeof(uint64_t));
  status = kvs_comm_broadcast(comm, &buf, n * sizeof(uint64_t), 0, err);
  if (status == KVS_OK) memcpy(v, buf.host, n * sizeof(uint64_t));
  kvs_comm_buffer_free(comm, &buf);
  return status;
}

static const char *side_name(int side) { return side == SIDE_P ? "prefill" : "decode"; }

/* A failure ends the run: this rank says what failed and aborts both
 * communicators, so that no peer waits out a deadline. */
static int fail(pd_rank *r, const char *what, const kvs_error *err) {
  fprintf(stderr, "kvsim_local: %s rank %d: %s: %s: %s\n", side_name(r->side), r->rank, what,
          kvs_status_string(err->status), err->message);
  fflush(stderr);
  if (r->link != NULL) kvs_comm_abort(r->link, KVSIM_EXIT_FAILED);
  if (r->comm != NULL) kvs_comm_abort(r->comm, KVSIM_EXIT_FAILED);
  return KVSIM_EXIT_FAILED;
}

static uint64_t pages_of(const pd_rank *r, uint64_t tokens) {
  return (tokens + r->page - 1) / r->page;
}

/* ---- setup ---- */

static int node_up(pd_rank *r) {
  const kvsim_args *a = r->s->a;
  kvs_error err;
  kvs_error_clear(&err);
  kvs_status status =
      kvs_comm_loopback_create(r->s->group[r->side], r->rank, a->timeout_ms, &r->comm, &err);
  if (status == KVS_OK) {
    status = kvs_comm_loopback_create(r->s->link, r->link_rank, a->timeout_ms, &r->link, &err);
  }
  if (status != KVS_OK) return fail(r, "communicator", &err);
  kvs_node_options o;
  kvs_node_options_init(&o);
  o.geometry = &r->s->geometry;
  o.model_name = a->model;
  o.kv_dtype = KVS_KV_BF16;
  /* Rows on the host twin: the transfer moves and digests them. Both
   * sides keep a prefix cache, so that their rows have one shape (tail
   * states); only the decode side's is used. */
  o.index_only = false;
  o.device = KVS_NODE_DEVICE_CPU;
  o.prefix_cache = true;
  o.state_rings = a->state_rings;
  o.swa_ratio = a->swa_ratio;
  o.max_seq_len = r->s->max_input;
  o.max_running = a->max_running;
  o.radix = a->radix;
  o.topology = a->deploy.topology;
  o.tp = a->pd_tp[r->side];
  o.pp = a->pd_pp[r->side];
  o.check_every = a->check_every;
  o.check_integrity = true;
  /* Both nodes simulated on this machine's threads. */
  o.local_rank = KVS_NODE_UNCHECKED;
  o.host_index = KVS_NODE_UNCHECKED;
  o.budget_bytes =
      a->deploy.given[KVS_DEPLOY_BUDGET] ? a->deploy.budget : (uint64_t)(a->budget_mib * 1048576.0);
  status = kvs_node_create(r->comm, &o, &r->node, &err);
  if (status != KVS_OK) {
    fprintf(stderr, "kvsim_local: %s rank %d: node setup: %s: %s\n", side_name(r->side), r->rank,
            kvs_status_string(status), err.message);
    return status == KVS_ERR_INVALID_ARGUMENT ? KVSIM_EXIT_USAGE : KVSIM_EXIT_FAILED;
  }
  r->page = kvs_node_page(r->node);
  /* The longest request both nodes hold: its pages, and two window pages
   * more than its tail on the decode side. */
  uint64_t usable = kvs_node_usable_pages(r->node);
  uint64_t v[2] = {usable > 2 ? usable - 2 : 0, r->page};
  uint64_t w[1] = {r->page};
  if ((status = allreduce(r->link, v, 1, KVS_COMM_MIN, &err)) != KVS_OK ||
      (status = allreduce(r->link, w, 1, KVS_COMM_MAX, &err)) != KVS_OK) {
    return fail(r, "link", &err);
  }
  if (w[0] != r->page) {
    kvs_error_set(&err, KVS_ERR_INVALID_ARGUMENT,
                  "the nodes' pages differ (%" PRIu64 ", %" PRIu64 ")", r->page, w[0]);
    return fail(r, "link", &err);
  }
  r->limit = v[0];
  int np = r->s->ranks[SIDE_P], nd = r->s->ranks[SIDE_D];
  r->n_peers = (size_t)(r->side == SIDE_P ? nd : np);
  r->peers = calloc(r->n_peers, sizeof *r->peers);
  size_t max_pages = (size_t)pages_of(r, r->s->max_input) + 1;
  r->ctrl = calloc(2 + max_pages, sizeof *r->ctrl);
  r->keys = calloc(max_pages, sizeof *r->keys);
  r->hit_pages = calloc(max_pages, sizeof *r->hit_pages);
  r->evicted = calloc(max_pages, sizeof *r->evicted);
  r->tails = calloc(max_pages, 1);
  r->taken = calloc(max_pages, 1);
  r->free_pages = calloc(usable > 0 ? usable : 1, sizeof *r->free_pages);
  if (r->peers == NULL || r->ctrl == NULL || r->keys == NULL || r->hit_pages == NULL ||
      r->evicted == NULL || r->tails == NULL || r->taken == NULL || r->free_pages == NULL) {
    kvs_error_set(&err, KVS_ERR_NO_MEMORY, "out of memory");
    return fail(r, "setup", &err);
  }
  for (size_t i = 0; i < r->n_peers; i++) r->peers[i] = (r->side == SIDE_P ? np : 0) + (int)i;
  /* The decode leader's free list: every usable page, the lowest on top. */
  for (uint64_t p = 0; p < usable; p++) r->free_pages[p] = (int64_t)(usable - 1 - p);
  r->n_free = (size_t)usable;
  if (r->rank == 0) {
    fprintf(stderr,
            "kvsim_local: %s node: tp %d x pp %d, %" PRIu64 " full pages of %" PRIu64
            " tokens, %" PRIu64 " window pages\n",
            side_name(r->side), o.tp, o.pp, usable, r->page, kvs_node_window_pages(r->node));
  }
  return 0;
}

/* ---- the prefill side ---- */

/* A request's keys, and the window rows the decode side asks for: from
 * the page it keeps as the prompt's tail (kvshard's policy: the prompt's
 * last whole-block page), so that a later turn's hit there is exact; 0 (a
 * decode's own window) for a prompt without a whole block. Every rank of
 * both sides reads them from the trace, once a request. */
static void learn(pd_rank *r, uint64_t id, uint64_t tokens) {
  r->n_keys = kvs_workload_trace_keys(&r->s->trace, r->page, (size_t)id, r->keys);
  r->window = r->n_keys == 0 ? 0 : tokens - (r->n_keys - 1) * r->page;
}

/* This rank's units of the request into r->rows; their count in *n. */
static kvs_status rows_of(pd_rank *r, const kvs_node_transfer *t, size_t *n, kvs_error *err) {
  kvs_status status = kvs_node_request_rows(r->node, t, NULL, 0, n, err);
  if (status != KVS_OK) return status;
  if (*n > r->rows_cap) {
    kvs_node_rows *rows = realloc(r->rows, *n * sizeof *rows);
    if (rows == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu units", *n);
    r->rows = rows;
    r->rows_cap = *n;
  }
  return kvs_node_request_rows(r->node, t, r->rows, r->rows_cap, n, err);
}

/* What a prefill writes, as this simulation has it: every unit's rows a
 * sequence seeded by the request, the unit's view, layer and positions. */
static void fill_rows(const kvs_node_rows *u, uint64_t id) {
  uint64_t x = kvs_mix64(kvs_mix64(id + 1, u->layer), u->first_token);
  x = kvs_mix64(kvs_mix64(x, (uint64_t)(unsigned char)u->view[0] + u->view[strlen(u->view) - 1]),
                u->tail_state);
  unsigned char *p = u->address;
  uint64_t k = 0;
  for (; k + 8 <= u->bytes; k += 8) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    memcpy(p + k, &x, 8);
  }
  for (; k < u->bytes; k++) p[k] = (unsigned char)(x >> (8 * (k % 8)));
}

static int p_request(pd_rank *r, uint64_t id, uint64_t tokens) {
  kvs_error err;
  kvs_error_clear(&err);
  size_t n = (size_t)pages_of(r, tokens);
  int64_t *pages = r->hit_pages; /* the prefill node's block table: pages 0..n */
  for (size_t b = 0; b < n; b++) pages[b] = (int64_t)b;
  learn(r, id, tokens);
  uint64_t window = r->window;
  kvs_xfer_shape shape = {tokens, 0, r->page, window};
  uint64_t first, tails = kvs_xfer_tail(&shape, &first);
  kvs_status status = KVS_OK;
  if (r->rank == 0) {
    int64_t slot;
    status = kvs_node_admit(r->node, id, &slot, &err);
    if (status == KVS_OK) status = kvs_node_bind_pages(r->node, id, pages + first, tails, &err);
    if (status != KVS_OK) return fail(r, "admission", &err);
  }
  if ((status = kvs_node_step(r->node, NULL, NULL, &err)) != KVS_OK) return fail(r, "step", &err);
  size_t units = 0;
  kvs_node_transfer t = {sizeof t, id, pages, n, tokens, 0, r->peers, r->n_peers, window};
  if ((status = rows_of(r, &t, &units, &err)) != KVS_OK) return fail(r, "request rows", &err);
  for (size_t i = 0; i < units; i++) fill_rows(&r->rows[i], id);
  kvs_node_transfer_report rep = {.size = sizeof rep};
  status = kvs_node_send_request(r->node, r->link, &t, &rep, &err);
  if (status != KVS_OK) {
    if (r->f[F_SEND_FAILED]++ == 0) {
      fprintf(stderr, "kvsim_local: prefill rank %d: request %" PRIu64 ": send: %s: %s\n", r->rank,
              id, kvs_status_string(status), err.message);
    }
    if (kvs_comm_health(r->link) != KVS_OK) return fail(r, "send", &err);
  }
  if (r->rank == 0) {
    status = kvs_node_free_pages(r->node, pages + first, tails, &err);
    if (status == KVS_OK) status = kvs_node_finish(r->node, id, &err);
    if (status != KVS_OK) return fail(r, "finish", &err);
  }
  if ((status = kvs_node_step(r->node, NULL, NULL, &err)) != KVS_OK) return fail(r, "step", &err);
  return 0;
}

/* ---- the decode side ---- */

enum { GO = 1, AGAIN = 2 };

/* The decode leader's admission, one step's worth: the hit (first call),
 * the pages past it (evicting cached blocks when the free ones run
 * short), then kvs_node_import_admit. ctrl: [GO or AGAIN, H, pages]. */
static kvs_status d_admit(pd_rank *r, uint64_t id, uint64_t tokens, bool first_call,
                          kvs_error *err) {
  uint64_t P = r->page, n = pages_of(r, tokens);
  int64_t *pages = (int64_t *)(void *)(r->ctrl + 2);
  kvs_status status = KVS_OK;
  if (first_call) {
    r->ctrl[1] = 0;
    kvs_node_prefix_hit hit = {.size = sizeof hit};
    status = kvs_node_prefix_match(r->node, r->keys, (size_t)r->n_keys, tokens, 0, &hit,
                                   r->hit_pages, err);
    if (status != KVS_OK) return status;
    if (hit.block >= 0 && hit.hit_tokens > 0) {
      if ((status = kvs_node_prefix_acquire(r->node, id, &hit, err)) != KVS_OK) return status;
      r->ctrl[1] = hit.hit_tokens;
      for (uint64_t b = 0; b < hit.hit_tokens / P; b++) pages[b] = r->hit_pages[b];
    }
  }
  uint64_t hit_pages = r->ctrl[1] / P, own = n - hit_pages;
  uint64_t window = r->window, first_tail;
  kvs_xfer_shape shape = {tokens, r->ctrl[1], P, window};
  uint64_t tails = kvs_xfer_tail(&shape, &first_tail);
  uint64_t droppable = 0, win = kvs_node_free_window_pages(r->node, &droppable);
  uint64_t need_full = own > r->n_free ? own - r->n_free : 0;
  uint64_t need_win = win < tails ? tails - win : 0;
  if (need_full > 0 || need_win > 0) {
    size_t n_freed = 0;
    status =
        kvs_node_prefix_evict(r->node, need_full, need_win, r->evicted, (size_t)n, &n_freed, err);
    if (status != KVS_OK) return status;
    for (size_t i = 0; i < n_freed; i++) r->free_pages[r->n_free++] = r->evicted[i];
    uint64_t win_now = kvs_node_free_window_pages(r->node, NULL);
    if (own > r->n_free || win_now < tails) {
      if (n_freed == 0 && win_now == win) {
        return kvs_error_set(
            err, KVS_ERR_EXHAUSTED,
            "request %" PRIu64 " needs %" PRIu64 " full pages past its hit and %" PRIu64
            " window pages; %zu and %" PRIu64 " are free and nothing more is evictable",
            id, own, tails, r->n_free, win_now);
      }
      r->ctrl[0] = AGAIN; /* the step ran full: evict again after it */
      return KVS_OK;
    }
  }
  for (uint64_t b = hit_pages; b < n; b++) pages[b] = r->free_pages[--r->n_free];
  int64_t slot;
  kvs_node_transfer t = {sizeof t, id, pages, n, tokens, r->ctrl[1], NULL, 0, window};
  status = kvs_node_import_admit(r->node, &t, &slot, err);
  if (status == KVS_ERR_JOURNAL_FULL) {
    for (uint64_t b = n; b-- > hit_pages;) r->free_pages[r->n_free++] = pages[b];
    r->ctrl[0] = AGAIN;
    return KVS_OK;
  }
  r->ctrl[0] = GO;
  return status;
}

/* The decode leader's end of a request, one step's worth: its prompt's
 * pages join the cache past its hit (in pieces a step has room for), the
 * last one with its window as the block's tail when the request holds it
 * (kvshard's policy: the prompt's last whole-block page); then it lets go
 * of its path, frees its window pages and finishes. *inserted: pages
 * inserted so far. ctrl[0]: GO once finished. */
static kvs_status d_finish(pd_rank *r, uint64_t id, uint64_t tokens, uint64_t *inserted,
                           kvs_error *err) {
  uint64_t P = r->page, n = pages_of(r, tokens), H = r->ctrl[1];
  const int64_t *pages = (const int64_t *)(const void *)(r->ctrl + 2);
  uint64_t key_pages = r->n_keys;
  kvs_xfer_shape shape = {tokens, H, P, r->window};
  uint64_t first, tails = kvs_xfer_tail(&shape, &first);
  kvs_node_capacity c = {.size = sizeof c};
  kvs_status status = kvs_node_capacity_of(r->node, &c, err);
  if (status != KVS_OK) return status;
  uint64_t from = H / P + *inserted;
  r->ctrl[0] = AGAIN;
  if (from < key_pages) {
    size_t chunk = c.journal_room > 16 ? (c.journal_room - 16) / 3 : 0;
    if (chunk > key_pages - from) chunk = (size_t)(key_pages - from);
    if (chunk == 0) return KVS_OK;
    for (size_t k = 0; k < chunk; k++) {
      uint64_t pg = from + k;
      r->tails[k] = pg == key_pages - 1 && pg >= first && pg < first + tails;
    }
    status = kvs_node_prefix_insert(r->node, id, r->keys + from, pages + from, r->tails, chunk,
                                    r->taken + (from - H / P), err);
    if (status != KVS_OK) return status;
    *inserted += chunk;
    return KVS_OK;
  }
  if (c.journal_room < 8) return KVS_OK;
  if ((H > 0 || *inserted > 0) && (status = kvs_node_prefix_release(r->node, id, err)) != KVS_OK) {
    return status;
  }
  if ((status = kvs_node_free_pages(r->node, pages + first, tails, err)) != KVS_OK) return status;
  if ((status = kvs_node_finish(r->node, id, err)) != KVS_OK) return status;
  /* Its own pages back, but those the cache took. */
  for (uint64_t b = n; b-- > H / P;) {
    bool cached = b < H / P + *inserted && r->taken[b - H / P];
    if (!cached) r->free_pages[r->n_free++] = pages[b];
  }
  r->ctrl[0] = GO;
  return KVS_OK;
}

/* Leader decides, every rank learns it (ctrl, words of it) and steps,
 * until the leader says GO. */
typedef kvs_status (*decide_fn)(pd_rank *r, uint64_t id, uint64_t tokens, int round,
                                uint64_t *inserted, kvs_error *err);

static kvs_status admit_round(pd_rank *r, uint64_t id, uint64_t tokens, int round,
                              uint64_t *inserted, kvs_error *err) {
  (void)inserted;
  return d_admit(r, id, tokens, round == 0, err);
}

static kvs_status finish_round(pd_rank *r, uint64_t id, uint64_t tokens, int round,
                               uint64_t *inserted, kvs_error *err) {
  (void)round;
  return d_finish(r, id, tokens, inserted, err);
}

static int rounds(pd_rank *r, uint64_t id, uint64_t tokens, decide_fn decide, size_t words,
                  const char *what) {
  kvs_error err;
  kvs_error_clear(&err);
  uint64_t inserted = 0;
  for (int round = 0;; round++) {
    if (round > 10000) {
      kvs_error_set(&err, KVS_ERR_EXHAUSTED, "request %" PRIu64 ": no progress", id);
      return fail(r, what, &err);
    }
    if (r->rank == 0) {
      kvs_status status = decide(r, id, tokens, round, &inserted, &err);
      if (status != KVS_OK) return fail(r, what, &err);
    }
    if (broadcast(r->comm, r->ctrl, words, &err) != KVS_OK) return fail(r, what, &err);
    if (kvs_node_step(r->node, NULL, NULL, &err) != KVS_OK) return fail(r, "step", &err);
    if (r->ctrl[0] == GO) return 0;
  }
}

static int d_request(pd_rank *r, uint64_t id, uint64_t tokens) {
  kvs_error err;
  kvs_error_clear(&err);
  size_t n = (size_t)pages_of(r, tokens);
  learn(r, id, tokens);
  int rc = rounds(r, id, tokens, admit_round, 2 + n, "admission");
  if (rc != 0) return rc;
  uint64_t H = r->ctrl[1];
  const int64_t *pages = (const int64_t *)(const void *)(r->ctrl + 2);
  kvs_node_transfer t = {sizeof t, id, pages, n, tokens, H, r->peers, r->n_peers, r->window};
  kvs_node_transfer_report rep = {.size = sizeof rep};
  kvs_status status = kvs_node_receive_request(r->node, r->link, &t, &rep, &err);
  bool ok = status == KVS_OK;
  if (!ok) {
    if (kvs_comm_health(r->link) != KVS_OK || kvs_comm_health(r->comm) != KVS_OK) {
      return fail(r, "receive", &err);
    }
    if (r->first_refusal[0] == '\0') {
      snprintf(r->first_refusal, sizeof r->first_refusal, "request %" PRIu64 ": %s: %s", id,
               kvs_status_string(status), err.message);
    }
  }
  if (r->rank == 0) {
    r->f[F_MOVED]++;
    r->f[ok ? F_AGREED : F_REFUSED]++;
    r->f[F_PROMPT_TOKENS] += tokens;
    r->f[F_HIT_REQUESTS] += H > 0;
    r->f[F_HIT_TOKENS] += H;
  }
  r->f[F_UNITS] += rep.units;
  r->f[F_BYTES] += rep.bytes;
  r->f[F_WIRE] += rep.wire_bytes;
  r->f[F_REUSED] += rep.reused_bytes;
  r->f[F_MESSAGES] += rep.messages;
  /* The link time: every decode rank receives over its own link at once,
   * so a request takes as long as its largest share. */
  uint64_t wire = rep.wire_bytes;
  if (allreduce(r->comm, &wire, 1, KVS_COMM_MAX, &err) != KVS_OK) return fail(r, "link time", &err);
  if (r->rank == 0) {
    r->f[F_LINK_NS] += (uint64_t)((double)wire / r->s->a->link_bandwidth + 0.5);
  }
  if (ok) {
    /* The rule's bytes of the request on this rank, all of them (reuse 0),
     * from this rank's layout alone: what moved and what the decode side
     * kept. */
    const kvs_device_layout *layout = kvs_node_layout(r->node);
    kvs_xfer_shape whole = {tokens, 0, r->page, t.window_tokens};
    uint64_t bytes[KVS_XFER_POOLS];
    kvs_xfer_pool_bytes(layout, &whole, layout->first_layer, layout->end_layer, bytes);
    for (int p = 0; p < KVS_XFER_POOLS; p++) r->f[F_RULE + p] += bytes[p];
    return rounds(r, id, tokens, finish_round, 1, "finish");
  }
  /* Refused: the node finished it (and released its hit); its pages come
   * back to the leader's list with the step. */
  if (r->rank == 0) {
    for (size_t b = n; b-- > H / r->page;) r->free_pages[r->n_free++] = pages[b];
  }
  if (kvs_node_step(r->node, NULL, NULL, &err) != KVS_OK) return fail(r, "step", &err);
  return 0;
}

/* ---- the run ---- */

static int replay(pd_rank *r) {
  const kvs_trace *trace = &r->s->trace;
  uint64_t last = kvs_now_ns();
  for (size_t i = 0; i < trace->n; i++) {
    uint64_t tokens = trace->input[i];
    if (tokens == 0 || pages_of(r, tokens) > r->limit) {
      if (r->side == SIDE_D && r->rank == 0) r->f[F_SKIPPED]++;
      continue;
    }
    int rc = r->side == SIDE_P ? p_request(r, i, tokens) : d_request(r, i, tokens);
    if (rc != 0) return rc;
    uint64_t now = kvs_now_ns();
    double progress = r->s->a->progress_s;
    if (r->link_rank == 0 && progress > 0 && (double)(now - last) > progress * 1e9) {
      fprintf(stderr, "kvsim_local: --pd: %zu of %zu requests\n", i + 1, trace->n);
      last = now;
    }
  }
  return 0;
}

static json_t *rule_json(const uint64_t *f) {
  json_t *o = json_object();
  for (int p = 0; p < KVS_XFER_POOLS; p++) {
    json_object_set_new(o, kvs_xfer_pool_name((kvs_xfer_pool)p), kvs_json_u64(f[F_RULE + p]));
  }
  return o;
}

static void report(const pd_rank *r, const uint64_t *f, bool agree, double elapsed) {
  const kvsim_args *a = r->s->a;
  FILE *human = a->json ? stderr : stdout;
  uint64_t rule = 0;
  for (int p = 0; p < KVS_XFER_POOLS; p++) rule += f[F_RULE + p];
  double transfer_s = (double)f[F_LINK_NS] * 1e-9;
  fprintf(human,
          "kvsim_local --pd tp%dxpp%d:tp%dxpp%d: %" PRIu64 " requests moved (%" PRIu64
          " skipped), digests agreed on %" PRIu64 ", refused %" PRIu64 "\n",
          a->pd_tp[0], a->pd_pp[0], a->pd_tp[1], a->pd_pp[1], f[F_MOVED], f[F_SKIPPED], f[F_AGREED],
          f[F_REFUSED]);
  fprintf(human,
          "  moved %" PRIu64 " B of rows (%" PRIu64 " units, %" PRIu64 " messages, %" PRIu64
          " B on the wire); decode-side reuse kept %" PRIu64 " B (%" PRIu64
          " requests hit, %" PRIu64 " of %" PRIu64 " prompt tokens); the rule's %" PRIu64 " B\n",
          f[F_BYTES], f[F_UNITS], f[F_MESSAGES], f[F_WIRE], f[F_REUSED], f[F_HIT_REQUESTS],
          f[F_HIT_TOKENS], f[F_PROMPT_TOKENS], rule);
  fprintf(human, "  transfer time %.3f s at %g GB/s per decode rank's link; %.1f s to run\n",
          transfer_s, a->link_bandwidth, elapsed);
  fflush(human);
  json_t *o = json_object();
  json_object_set_new(o, "ranks", json_integer(r->s->ranks[0] + r->s->ranks[1]));
  json_object_set_new(o, "backend", json_string("loopback"));
  json_object_set_new(o, "device", json_string("cpu"));
  json_object_set_new(o, "digests_agree", json_boolean(agree));
  json_t *pd = json_object();
  json_t *sides[2];
  for (int s = 0; s < 2; s++) {
    sides[s] = json_object();
    json_object_set_new(sides[s], "tp", json_integer(a->pd_tp[s]));
    json_object_set_new(sides[s], "pp", json_integer(a->pd_pp[s]));
    json_object_set_new(sides[s], "ranks", json_integer(r->s->ranks[s]));
  }
  json_object_set_new(pd, "prefill", sides[0]);
  json_object_set_new(pd, "decode", sides[1]);
  json_object_set_new(pd, "trace_requests", kvs_json_u64(r->s->trace.n));
  json_object_set_new(pd, "requests", kvs_json_u64(f[F_MOVED]));
  json_object_set_new(pd, "skipped_requests", kvs_json_u64(f[F_SKIPPED]));
  json_object_set_new(pd, "digests_agreed", kvs_json_u64(f[F_AGREED]));
  json_object_set_new(pd, "refused", kvs_json_u64(f[F_REFUSED]));
  json_object_set_new(pd, "send_failures", kvs_json_u64(f[F_SEND_FAILED]));
  json_object_set_new(pd, "units", kvs_json_u64(f[F_UNITS]));
  json_object_set_new(pd, "bytes", kvs_json_u64(f[F_BYTES]));
  json_object_set_new(pd, "wire_bytes", kvs_json_u64(f[F_WIRE]));
  json_object_set_new(pd, "reused_bytes", kvs_json_u64(f[F_REUSED]));
  json_object_set_new(pd, "messages", kvs_json_u64(f[F_MESSAGES]));
  json_object_set_new(pd, "rule_bytes", rule_json(f));
  json_object_set_new(pd, "rule_total_bytes", kvs_json_u64(rule));
  json_object_set_new(pd, "prompt_tokens", kvs_json_u64(f[F_PROMPT_TOKENS]));
  json_object_set_new(pd, "hit_requests", kvs_json_u64(f[F_HIT_REQUESTS]));
  json_object_set_new(pd, "hit_tokens", kvs_json_u64(f[F_HIT_TOKENS]));
  json_object_set_new(pd, "link_gbps", json_real(a->link_bandwidth));
  json_object_set_new(pd, "transfer_s", json_real(transfer_s));
  json_object_set_new(pd, "elapsed_s", json_real(elapsed));
  json_object_set_new(o, "pd", pd);
  char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
  json_decref(o);
  if (text != NULL) printf("%s\n", text);
  free(text);
  kvs_flush_stdout();
}

/* The closing checks: each node's ranks agree (kvs_node_check), then the
 * figures over the link; the first link rank reports. */
static int finish(pd_rank *r, double elapsed) {
  kvs_error err;
  kvs_error_clear(&err);
  kvs_node_report nr;
  memset(&nr, 0, sizeof nr);
  nr.size = sizeof nr;
  kvs_status status = kvs_node_check(r->node, &nr, &err);
  if (status == KVS_ERR_DIVERGENCE) {
    r->diverged = true;
    if (r->rank == 0) {
      fprintf(stderr, "kvsim_local: %s node: divergence at the end: %s\n", side_name(r->side),
              err.message);
    }
  } else if (status != KVS_OK) {
    return fail(r, "final check", &err);
  }
  uint64_t f[F_COUNT + 1];
  memcpy(f, r->f, sizeof r->f);
  f[F_COUNT] = r->diverged;
  if (allreduce(r->link, f, F_COUNT + 1, KVS_COMM_SUM, &err) != KVS_OK) {
    return fail(r, "final figures", &err);
  }
  bool agree = f[F_COUNT] == 0 && f[F_REFUSED] == 0 && f[F_SEND_FAILED] == 0;
  if (r->first_refusal[0] != '\0') {
    fprintf(stderr, "kvsim_local: decode rank %d refused %s\n", r->rank, r->first_refusal);
  }
  fprintf(stderr, "kvsim_local: %s rank %d: %s\n", side_name(r->side), r->rank,
          r->diverged ? "DIVERGED" : "integrity ok");
  uint64_t said = 1;
  if (allreduce(r->link, &said, 1, KVS_COMM_MIN, &err) != KVS_OK) return fail(r, "final", &err);
  if (r->link_rank == 0) report(r, f, agree, elapsed);
  if (!agree) return KVSIM_EXIT_DIVERGED;
  return f[F_SKIPPED] > 0 ? KVSIM_EXIT_NOT_WHOLE : KVSIM_EXIT_AGREE;
}

static void *run_rank(void *arg) {
  pd_rank *r = arg;
  uint64_t start = kvs_now_ns();
  r->code = node_up(r);
  if (r->code == 0) r->code = replay(r);
  if (r->code == 0) r->code = finish(r, (double)(kvs_now_ns() - start) * 1e-9);
  kvs_node_destroy(r->node);
  r->node = NULL;
  return NULL;
}

static void rank_free(pd_rank *r) {
  kvs_node_destroy(r->node);
  kvs_comm_destroy(r->link);
  kvs_comm_destroy(r->comm);
  free(r->peers);
  free(r->ctrl);
  free(r->keys);
  free(r->hit_pages);
  free(r->evicted);
  free(r->tails);
  free(r->taken);
  free(r->free_pages);
  free(r->rows);
}

static int load(shared *s) {
  const kvsim_args *a = s->a;
  kvs_error err;
  kvs_error_clear(&err);
  kvs_model_config *config = malloc(sizeof *config);
  kvs_status status = config == NULL ? kvs_error_set(&err, KVS_ERR_NO_MEMORY, "out of memory")
                                     : kvs_model_config_resolve(a->model, config, &err);
  if (status == KVS_OK) status = kvs_model_config_planned_geometry(config, 0, &s->geometry, &err);
  free(config);
  if (status == KVS_OK) status = kvs_trace_load(a->trace, a->trace_block, &s->trace, &err);
  if (status != KVS_OK) {
    fprintf(stderr, "kvsim_local: %s\n", err.message);
    return status == KVS_ERR_NO_MEMORY ? KVSIM_EXIT_FAILED : KVSIM_EXIT_USAGE;
  }
  for (size_t i = 0; i < s->trace.n; i++) {
    if (s->trace.input[i] > s->max_input) s->max_input = s->trace.input[i];
  }
  return 0;
}

int kvsim_pd_run(const kvsim_args *a) {
  shared s;
  memset(&s, 0, sizeof s);
  s.a = a;
  int code = load(&s);
  if (code != 0) {
    kvs_trace_free(&s.trace);
    return code;
  }
  s.ranks[SIDE_P] = a->pd_tp[SIDE_P] * a->pd_pp[SIDE_P];
  s.ranks[SIDE_D] = a->pd_tp[SIDE_D] * a->pd_pp[SIDE_D];
  int total = s.ranks[0] + s.ranks[1];
  kvs_error err;
  kvs_error_clear(&err);
  pd_rank *ranks = calloc((size_t)total, sizeof *ranks);
  if (ranks == NULL || kvs_comm_loopback_group_create(s.ranks[0], &s.group[0], &err) != KVS_OK ||
      kvs_comm_loopback_group_create(s.ranks[1], &s.group[1], &err) != KVS_OK ||
      kvs_comm_loopback_group_create(total, &s.link, &err) != KVS_OK) {
    fprintf(stderr, "kvsim_local: %s\n", ranks == NULL ? "out of memory" : err.message);
    code = KVSIM_EXIT_FAILED;
  }
  int started = 0;
  for (int k = 0; code == 0 && k < total; k++) {
    int side = k < s.ranks[0] ? SIDE_P : SIDE_D;
    ranks[k] = (pd_rank){.s = &s,
                         .side = side,
                         .rank = side == SIDE_P ? k : k - s.ranks[0],
                         .link_rank = k,
                         .code = KVSIM_EXIT_FAILED};
    if (pthread_create(&ranks[k].thread, NULL, run_rank, &ranks[k]) != 0) break;
    started++;
  }
  if (code == 0 && started < total) code = KVSIM_EXIT_FAILED;
  for (int k = 0; k < started; k++) {
    pthread_join(ranks[k].thread, NULL);
    if (ranks[k].code > code) code = ranks[k].code;
  }
  for (int k = 0; k < started; k++) rank_free(&ranks[k]);
  free(ranks);
  kvs_comm_loopback_group_destroy(s.link);
  kvs_comm_loopback_group_destroy(s.group[1]);
  kvs_comm_loopback_group_destroy(s.group[0]);
  kvs_trace_free(&s.trace);
  return code;
}

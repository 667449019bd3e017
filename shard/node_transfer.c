/* Prefill/decode: a request's rows from its prefill node to its decode
 * node (kvshard.h, "prefill/decode").
 *
 * Five exchanges over the link, every pair of a prefill rank and a
 * decode rank in each:
 *   1. prefill -> decode: a header (the request, its tokens, the layers the
 *      rank holds, the rows' shape, its slot), its block table and every
 *      page's window page;
 *   2. decode -> prefill: the decode rank's header (the same, with the
 *      tokens its cache holds, the windows it asks for and the layers it
 *      wants from this prefill rank: each of its layers from one prefill
 *      rank holding it), its block table and windows;
 *   3. prefill -> decode: the rows, messages of units whose pages are
 *      consecutive on both sides, in rounds of about 4 MiB a pair;
 *   4. prefill -> decode: one digest per unit of what was sent, each side
 *      hashing where its rows live (the host twin on a thread beside the
 *      copy, a GPU with a kernel on the engine's stream);
 *   5. decode -> prefill: every decode rank's verdict once they agreed, so
 *      a prefill rank's send fails when the decode node refused.
 * Both sides compute the units and the runs from the two headers alone, so
 * every message is matched by size and order. The digests are taken
 * through the node's contract (its views, the mapping, the slot, as an
 * engine addresses rows), not through the units' offsets that placed the
 * rows: a transfer that wrote one pool's rows to a wrong page is caught
 * by the decode side, which names the pool, layer and positions, and
 * every decode rank refuses the request. A GPU node's rows move device to
 * device over an NCCL link; the small messages (1, 2, 4, 5) go through
 * kvs_comm_exchange_host, which stages them on such a link. */
#include "shard/node_transfer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/device_ref.h"
#include "core/geometry.h"
#include "core/mix.h"
#include "pool/window_pool.h"
#include "shard/comm.h"
#include "shard/node_internal.h"
#include "shard/table.h"

#define WIRE_MAGIC 0x3172656678737666ull /* "kvsxfer1", little-endian */
#define REASON_BYTES KVS_ERROR_MESSAGE_MAX
/* A message's bytes at most (one unit may be larger), and a round's at
 * least: what stays in a last-level cache between the copy and the hash. */
#define KVS_XFER_PIECE_BYTES ((uint64_t)4 << 20)

/* A header, then the sender's block table (ceil(tokens / page) pages),
 * then the window page each is bound to (-1: none). */
typedef struct wire_header {
  uint64_t magic;
  uint64_t request, tokens, reuse, page;
  uint64_t kv_dtype, state_rings, tail_states, shape; /* the rows' shape */
  uint64_t window_tokens;
  uint64_t rows_kind; /* kvs_table_kind of the rows: which digest each unit gets */
  uint32_t first_layer, end_layer;
  int64_t slot;
  uint32_t status; /* != 0: the sender refuses; reason says why */
  char reason[REASON_BYTES];
} wire_header;

/* The decode side's last word to every prefill rank: whether every decode
 * rank kept the request, or why not, so that a prefill engine finishes
 * only a request the decode side holds. */
typedef struct wire_verdict {
  uint64_t magic;
  uint32_t status;
  char reason[REASON_BYTES];
} wire_verdict;

/* Every peer's verdict in, or this side's out to every peer. */
static kvs_status verdicts_move(kvs_comm_t link, const kvs_node_transfer *t, wire_verdict *v,
                                bool send, kvs_comm_transfer *moves, kvs_error *err) {
  for (size_t i = 0; i < t->n_peers; i++) {
    moves[i] = (kvs_comm_transfer){t->peers[i], send, send ? (void *)v : (void *)&v[i], sizeof *v};
  }
  return kvs_comm_exchange_host(link, moves, t->n_peers, err);
}

static kvs_window_pool_t pool_of(const struct kvs_node *node) {
  return kvs_shard_pool(node->shard);
}

/* The rows' shape apart from the layer range: what two nodes must share
 * for a unit of one to be a unit of the other. */
static uint64_t rows_shape(const struct kvs_node *node) {
  const kvs_geometry *g = &node->geometry;
  size_t layers = kvs_geometry_layer_count(g);
  uint64_t h = kvs_mix64(0x6b76737368617065ull, g->head_dim);
  h = kvs_mix64(kvs_mix64(h, g->index_head_dim), layers);
  for (size_t i = 0; i < layers; i++) h = kvs_mix64(h, g->compress_ratios[i]);
  const kvs_row_widths *w = &node->widths;
  h = kvs_mix64(kvs_mix64(kvs_mix64(h, w->kv), w->index), w->csa_state);
  return kvs_mix64(kvs_mix64(h, w->hca_state), w->idx_state);
}

static void header_init(const struct kvs_node *node, const kvs_node_transfer *t, wire_header *h) {
  memset(h, 0, sizeof *h);
  h->magic = WIRE_MAGIC;
  h->request = t->request;
  h->tokens = t->tokens;
  h->reuse = t->reuse_tokens;
  h->page = node->options.page;
  h->kv_dtype = (uint64_t)node->options.kv_dtype;
  h->state_rings = (uint64_t)node->layout->sizes.state_rings;
  h->tail_states = node->layout->sizes.tail_states;
  h->shape = rows_shape(node);
  h->first_layer = (uint32_t)node->layout->first_layer;
  h->end_layer = (uint32_t)node->layout->end_layer;
  h->window_tokens = t->window_tokens;
  h->rows_kind = (uint64_t)kvs_table_kind_of(node->table);
  h->slot = -1;
}

/* Why two headers cannot pair (NULL: they can). */
static const char *mismatch(const wire_header *a, const wire_header *b) {
  if (a->magic != WIRE_MAGIC || b->magic != WIRE_MAGIC) return "not a transfer header";
  if (a->request != b->request) return "request";
  if (a->tokens != b->tokens) return "tokens";
  if (a->page != b->page) return "page size";
  if (a->kv_dtype != b->kv_dtype) return "kv dtype";
  if (a->state_rings != b->state_rings) return "state rings";
  if (a->tail_states != b->tail_states) return "tail states (a prefix cache on one side only)";
  if (a->shape != b->shape) return "model (head dims, layers and ratios, row widths)";
  if (a->rows_kind != b->rows_kind)
    return "rows digest (tables on the host on one side, a GPU on the other)";
  return NULL;
}

static kvs_xfer_shape shape_of(const struct kvs_node *node, uint64_t tokens, uint64_t reuse,
                               uint64_t window_tokens) {
  kvs_xfer_shape s = {tokens, reuse, node->options.page, window_tokens};
  return s;
}

/* The pages a request's tokens fill, checked against its block table and
 * the node's pages before anything is sized by them. */
static kvs_status pages_needed(const struct kvs_node *node, const kvs_node_transfer *t,
                               uint64_t *out, kvs_error *err) {
  uint64_t P = node->options.page;
  kvs_xfer_shape shape = shape_of(node, t->tokens, 0, 0);
  uint64_t need = kvs_xfer_pages(&shape);
  if (t->tokens == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "request %llu: tokens is 0",
                         (unsigned long long)t->request);
  }
  if (need > kvs_node_usable_pages(node) || t->pages == NULL || t->n_pages < need) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "request %llu: %llu tokens fill %llu pages of %llu; its block table "
                         "has %zu (the node has %llu)",
                         (unsigned long long)t->request, (unsigned long long)t->tokens,
                         (unsigned long long)need, (unsigned long long)P,
                         t->pages == NULL ? (size_t)0 : t->n_pages,
                         (unsigned long long)kvs_node_usable_pages(node));
  }
  *out = need;
  return KVS_OK;
}

/* This rank's side of the request, its tokens and block table's length
 * checked already (pages_needed): its pages checked, every page's window
 * page and its slot from its own mirror pool. */
static kvs_status side_of(const struct kvs_node *node, const kvs_node_transfer *t, uint64_t reuse,
                          uint64_t window_tokens, bool need_bound, kvs_xfer_side *side,
                          int64_t *windows, kvs_error *err) {
  uint64_t P = node->options.page;
  kvs_xfer_shape shape = shape_of(node, t->tokens, reuse, window_tokens);
  if (reuse % P != 0 || reuse >= t->tokens) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "request %llu: reuse_tokens %llu must be a multiple of the page (%llu) "
                         "below its %llu tokens",
                         (unsigned long long)t->request, (unsigned long long)reuse,
                         (unsigned long long)P, (unsigned long long)t->tokens);
  }
  uint64_t need = kvs_xfer_pages(&shape);
  uint64_t usable = kvs_node_usable_pages(node);
  uint64_t *seen = calloc((size_t)(usable / 64 + 1), sizeof *seen); /* a page named twice */
  if (seen == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %llu pages' marks",
                         (unsigned long long)usable);
  }
  for (uint64_t b = 0; b < need; b++) {
    int64_t page = t->pages[b];
    if (page < 0 || (uint64_t)page >= usable) {
      free(seen);
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "request %llu: block %llu of its block table is full page %lld, not "
                           "one of the engine's 0..%llu",
                           (unsigned long long)t->request, (unsigned long long)b, (long long)page,
                           (unsigned long long)(usable - 1));
    }
    uint64_t bit = (uint64_t)1 << ((uint64_t)page % 64);
    if (seen[page / 64] & bit) {
      uint64_t c = 0;
      while (t->pages[c] != page) c++;
      free(seen);
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "request %llu: full page %lld is both block %llu and block %llu",
                           (unsigned long long)t->request, (long long)page, (unsigned long long)c,
                           (unsigned long long)b);
    }
    seen[page / 64] |= bit;
  }
  free(seen);
  side->pages = t->pages;
  side->n_pages = (size_t)need;
  side->window = windows;
  const int64_t *mapping = kvs_window_pool_mapping(pool_of(node));
  for (uint64_t b = 0; b < need; b++) {
    int64_t slot = mapping[(uint64_t)t->pages[b] * P];
    windows[b] = slot < 0 ? -1 : slot / (int64_t)P;
  }
  uint64_t first, tails = kvs_xfer_tail(&shape, &first);
  for (uint64_t i = 0; i < tails; i++) {
    if (windows[first + i] < 0 && need_bound) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "request %llu: full page %lld (block %llu, positions %llu..%llu of "
                           "its window) is not bound to a window page on rank %d",
                           (unsigned long long)t->request, (long long)t->pages[first + i],
                           (unsigned long long)(first + i), (unsigned long long)((first + i) * P),
                           (unsigned long long)((first + i + 1) * P - 1), node->rank);
    }
  }
  side->slot = kvs_window_pool_slot_of(pool_of(node), t->request);
  if (side->slot < 0 && kvs_window_pool_request_slots(pool_of(node)) > 0 && need_bound) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "request %llu holds no request slot on rank %d (admit it first)",
                         (unsigned long long)t->request, node->rank);
  }
  return KVS_OK;
}

static kvs_status check_transfer(const struct kvs_node *node, kvs_comm_t link,
                                 const kvs_node_transfer *t, const char *call, kvs_error *err) {
  if (node == NULL || t == NULL || link == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", call,
                         node == NULL ? "node"
                         : t == NULL  ? "transfer"
                                      : "link");
  }
  if (t->size != sizeof *t) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s: transfer.size is %zu, this build's kvs_node_transfer is %zu", call,
                         t->size, sizeof *t);
  }
  if (t->peers == NULL || t->n_peers == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: no peers (the other node's ranks)",
                         call);
  }
  int size = kvs_comm_size(link), me = kvs_comm_rank(link);
  for (size_t i = 0; i < t->n_peers; i++) {
    if (t->peers[i] < 0 || t->peers[i] >= size || t->peers[i] == me) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "%s: peer %zu is link rank %d: the link's ranks are 0..%d and this "
                           "rank is %d",
                           call, i, t->peers[i], size - 1, me);
    }
    for (size_t j = 0; j < i; j++) {
      if (t->peers[j] == t->peers[i]) {
        return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: link rank %d is peer %zu and %zu",
                             call, t->peers[i], j, i);
      }
    }
  }
  /* Rows move where they live: a GPU's over a device link on that GPU
   * (NCCL), the host twin's over a link that moves host memory. */
  void *stream = NULL;
  int link_device = -1;
  bool device_link = kvs_comm_device_stream(link, &stream, &link_device, NULL) == KVS_OK;
  bool device_rows = kvs_table_kind_of(node->table) != KVS_TABLE_HOST;
  int rows_device = kvs_table_device(node->table);
  if (device_rows && !device_link) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "%s: this node's rows are on CUDA device %d and the '%s' link moves "
                         "host memory: link device nodes with NCCL (or hand "
                         "kvs_node_request_rows' descriptors to a transfer engine)",
                         call, rows_device, kvs_comm_backend(link));
  }
  if (device_rows && link_device != rows_device) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "%s: this node's rows are on CUDA device %d, but the '%s' link runs on "
                         "device %d: create the link on the node's GPU",
                         call, rows_device, kvs_comm_backend(link), link_device);
  }
  if (!device_rows && device_link) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "%s: this node's rows are in host memory and the '%s' link moves only "
                         "device memory: link host nodes with MPI, loopback or callbacks",
                         call, kvs_comm_backend(link));
  }
  if (node->options.index_only) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED, "%s: an index_only node holds no rows", call);
  }
  return KVS_OK;
}

/* ---- the digests, through the node's contract ---- */

typedef struct views {
  kvs_node_view v[KVS_XFER_POOLS];
  bool have[KVS_XFER_POOLS];
} views;

static void views_of(kvs_node_t node, views *out) {
  memset(out, 0, sizeof *out);
  size_t n = kvs_node_view_count(node);
  for (size_t i = 0; i < n; i++) {
    kvs_node_view v;
    v.size = sizeof v;
    if (kvs_node_view_at(node, i, &v, NULL) != KVS_OK) continue;
    for (int p = 0; p < KVS_XFER_POOLS; p++) {
      if (strcmp(v.name, kvs_xfer_pool_name((kvs_xfer_pool)p)) == 0) {
        out->v[p] = v;
        out->have[p] = true;
      }
    }
  }
}

/* Index of model layer `layer` on axis 0 of a view of `pool`: the window
 * holds every layer of the rank, the others its layers of their ratio. */
static int64_t view_layer(const struct kvs_node *node, kvs_xfer_pool pool, uint32_t layer) {
  size_t first = node->layout->first_layer;
  if (pool == KVS_XFER_WINDOW) return (int64_t)(layer - first);
  uint32_t ratio =
      pool == KVS_XFER_COMPRESSED_128 || pool == KVS_XFER_STATE_128 ? KVS_HCA_RATIO : KVS_CSA_RATIO;
  int64_t k = 0;
  for (size_t l = first; l < layer; l++) k += node->geometry.compress_ratios[l] == ratio;
  return k;
}

/* Where a unit's rows are as an engine finds them: the view, the block
 * table's page of its positions, the mapping, the slot. NULL: nowhere. */
static const unsigned char *contract_rows(const struct kvs_node *node, const views *vs,
                                          const kvs_xfer_side *side, const kvs_xfer_unit *u) {
  kvs_xfer_pool pool = (kvs_xfer_pool)u->pool;
  if (!vs->have[pool]) return NULL;
  const kvs_node_view *v = &vs->v[pool];
  uint64_t P = node->options.page, b = u->first_token / P;
  int64_t k = view_layer(node, pool, u->layer);
  size_t e = kvs_view_dtype_bytes(v->dtype);
  bool paged = v->dtype == KVS_VIEW_UINT8; /* fp8: [layers, pages, page bytes] */
  const unsigned char *base = (const unsigned char *)v->data + (uint64_t)(k * v->strides[0]) * e;
  const int64_t *mapping = kvs_window_pool_mapping(pool_of(node));
  int64_t page = b < side->n_pages ? side->pages[b] : -1;
  int64_t wslot = page < 0 ? -1 : mapping[(uint64_t)page * P];
  int64_t row;
  switch (pool) {
    case KVS_XFER_WINDOW:
      if (wslot < 0) return NULL;
      return base + (uint64_t)(paged ? wslot / (int64_t)P * v->strides[1]
                                     : wslot * v->strides[1] * (int64_t)e);
    case KVS_XFER_COMPRESSED_4:
    case KVS_XFER_COMPRESSED_128:
    case KVS_XFER_INDEXER: {
      if (page < 0) return NULL;
      int64_t r = pool == KVS_XFER_COMPRESSED_128 ? KVS_HCA_RATIO : KVS_CSA_RATIO;
      return base + (uint64_t)(paged ? page * v->strides[1]
                                     : page * (int64_t)P / r * v->strides[1] * (int64_t)e);
    }
    default:
      break;
  }
  bool csa = pool != KVS_XFER_STATE_128;
  int64_t ring = csa ? KVS_RING_SLOTS_CSA : KVS_RING_SLOTS_HCA;
  kvs_state_rings rings = node->options.state_rings;
  bool per_request = csa ? rings == KVS_STATE_RINGS_PER_REQUEST : rings != KVS_STATE_RINGS_PER_PAGE;
  if (u->tail) {
    /* After the slots' rings: window page w's two rows at 2w. */
    if (wslot < 0) return NULL;
    row = ((int64_t)kvs_node_max_running(node) + 1) * ring +
          (int64_t)KVS_TAIL_STATE_ROWS * (wslot / (int64_t)P);
  } else if (per_request) {
    if (side->slot < 0) return NULL;
    row = side->slot * ring;
  } else {
    if (wslot < 0) return NULL;
    row = wslot / (int64_t)P * ring;
  }
  return base + (uint64_t)(row * v->strides[1] * (int64_t)e);
}

static uint64_t unit_seed(const kvs_xfer_unit *u) {
  uint64_t h = kvs_mix64(0x6b76737864696731ull, u->pool);
  h = kvs_mix64(kvs_mix64(h, u->tail), u->layer);
  return kvs_mix64(kvs_mix64(h, u->first_token), u->end_token);
}

/* ---- a pair's units and runs ---- */

typedef struct pair {
  int peer;              /* link rank */
  wire_header *theirs;   /* the peer's header, then its pages */
  bool ok;               /* the two headers pair and rows move */
  size_t lo, hi;         /* the layers that move */
  kvs_xfer_unit *mine;   /* this side's units */
  kvs_xfer_unit *peer_u; /* the peer's, for their indices */
  size_t n;
  uint64_t *digests; /* the prefill side's, one per unit */
  uint64_t *here;    /* the decode side's own, one per unit */
  size_t *pieces;    /* the units' end of each message */
  size_t n_pieces;
  size_t *rounds; /* the pieces' end of each round */
  size_t n_rounds;
} pair;

static const int64_t *header_pages(const wire_header *h) {
  return (const int64_t *)(const void *)(h + 1);
}

static size_t header_bytes(uint64_t pages) {
  return sizeof(wire_header) + 2 * pages * sizeof(int64_t);
}

/* This side's pages and windows, after its header. */
static int64_t *own_pages(wire_header *h) { return (int64_t *)(void *)(h + 1); }

static kvs_xfer_side side_from(const wire_header *h, uint64_t pages) {
  kvs_xfer_side s = {header_pages(h), (size_t)pages, header_pages(h) + pages, h->slot};
  return s;
}

/* Units i and i + 1 lie one step apart on both sides: one message. */
static bool joins(const pair *p, size_t i) {
  const kvs_xfer_unit *a = &p->mine[i], *b = &p->mine[i + 1];
  return a->pool == b->pool && a->tail == b->tail && a->layer == b->layer && a->step == b->step &&
         b->index == a->index + 1 && p->peer_u[i + 1].index == p->peer_u[i].index + 1;
}

/* The bytes of units [first, end) as one message. */
static uint64_t span_bytes(const pair *p, size_t first, size_t end) {
  return (end - 1 - first) * p->mine[first].step + p->mine[end - 1].bytes;
}

/* Cuts the pair's units into messages (runs of joined units, at most
 * KVS_XFER_PIECE_BYTES each unless one unit is larger) and the messages
 * into rounds of about that many bytes, the unit a side hashes while its
 * rows are in cache (rows_move). Both sides cut alike: the cut reads both
 * sides' indices and the one shape. */
static kvs_status cut(pair *p, kvs_error *err) {
  p->pieces = calloc(p->n ? p->n : 1, sizeof *p->pieces);
  p->rounds = calloc(p->n ? p->n : 1, sizeof *p->rounds);
  if (p->pieces == NULL || p->rounds == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu messages", p->n);
  }
  p->n_pieces = p->n_rounds = 0;
  uint64_t in_round = 0;
  for (size_t i = 0; i < p->n;) {
    size_t end = i + 1;
    while (end < p->n && joins(p, end - 1) && span_bytes(p, i, end + 1) <= KVS_XFER_PIECE_BYTES) {
      end++;
    }
    p->pieces[p->n_pieces++] = end;
    in_round += span_bytes(p, i, end);
    if (in_round >= KVS_XFER_PIECE_BYTES) {
      p->rounds[p->n_rounds++] = p->n_pieces;
      in_round = 0;
    }
    i = end;
  }
  if (in_round > 0) p->rounds[p->n_rounds++] = p->n_pieces;
  return KVS_OK;
}

/* The pair's units on both sides and its messages; `receive`: the decode
 * side, which also keeps its own digests. */
static kvs_status plan_pair(const struct kvs_node *node, const kvs_xfer_shape *shape,
                            const kvs_xfer_side *mine, const kvs_xfer_side *theirs, bool receive,
                            pair *p, kvs_error *err) {
  size_t n = kvs_xfer_units(node->layout, shape, mine, p->lo, p->hi, NULL, 0);
  p->mine = calloc(n ? n : 1, sizeof *p->mine);
  p->peer_u = calloc(n ? n : 1, sizeof *p->peer_u);
  p->digests = calloc(n ? n : 1, sizeof *p->digests);
  p->here = receive ? calloc(n ? n : 1, sizeof *p->here) : NULL;
  if (p->mine == NULL || p->peer_u == NULL || p->digests == NULL || (receive && p->here == NULL)) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu units", n);
  }
  p->n = kvs_xfer_units(node->layout, shape, mine, p->lo, p->hi, p->mine, n);
  kvs_xfer_units(node->layout, shape, theirs, p->lo, p->hi, p->peer_u, n);
  for (size_t i = 0; i < n; i++) {
    if (p->peer_u[i].index < 0 || p->mine[i].index < 0) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "%s has no %s%s rows of layer %u for positions %llu..%llu (a window "
                           "page not bound there)",
                           p->mine[i].index < 0 ? "this rank" : "its peer",
                           kvs_xfer_pool_name((kvs_xfer_pool)p->mine[i].pool),
                           p->mine[i].tail ? " tail-state" : "", p->mine[i].layer,
                           (unsigned long long)p->mine[i].first_token,
                           (unsigned long long)(p->mine[i].end_token - 1));
    }
  }
  return cut(p, err);
}

static void pair_free(pair *p) {
  free(p->mine);
  free(p->peer_u);
  free(p->digests);
  free(p->here);
  free(p->pieces);
  free(p->rounds);
  p->mine = p->peer_u = NULL;
  p->digests = p->here = NULL;
  p->pieces = p->rounds = NULL;
}

/* The rows the decode side keeps of its prefix (what reuse saves), for
 * layers [lo, hi). */
static uint64_t reused_bytes(const struct kvs_node *node, uint64_t tokens, uint64_t reuse,
                             uint64_t window_tokens, size_t lo, size_t hi) {
  kvs_xfer_shape all = shape_of(node, tokens, 0, window_tokens);
  kvs_xfer_shape past = shape_of(node, tokens, reuse, window_tokens);
  uint64_t a[KVS_XFER_POOLS], b[KVS_XFER_POOLS], sum = 0;
  kvs_xfer_pool_bytes(node->layout, &all, lo, hi, a);
  kvs_xfer_pool_bytes(node->layout, &past, lo, hi, b);
  for (int i = 0; i < KVS_XFER_POOLS; i++) sum += a[i] - b[i];
  return sum;
}

static void refuse_header(wire_header *h, kvs_status status, const kvs_error *e) {
  h->status = (uint32_t)status;
  snprintf(h->reason, sizeof h->reason, "%s", e->message);
}

/* Everything a call allocates, freed in one place. */
typedef struct session {
  pair *pairs;
  size_t n_pairs;
  unsigned char *headers; /* the peers' headers, each header_bytes(pages) */
  unsigned char *own;     /* this side's header and pages */
  kvs_comm_transfer *t;
  wire_verdict *verdicts; /* one per peer */
} session;

static void session_free(session *s) {
  for (size_t i = 0; i < s->n_pairs && s->pairs != NULL; i++) pair_free(&s->pairs[i]);
  free(s->pairs);
  free(s->headers);
  free(s->own);
  free(s->t);
  free(s->verdicts);
}

static kvs_status session_open(session *s, const kvs_node_transfer *t, uint64_t pages,
                               kvs_error *err) {
  memset(s, 0, sizeof *s);
  size_t hb = header_bytes(pages);
  s->n_pairs = t->n_peers;
  s->pairs = calloc(t->n_peers, sizeof *s->pairs);
  s->headers = calloc(t->n_peers, hb);
  s->own = calloc(1, hb);
  s->t = calloc(t->n_peers, sizeof *s->t);
  s->verdicts = calloc(t->n_peers, sizeof *s->verdicts);
  if (s->pairs == NULL || s->headers == NULL || s->own == NULL || s->t == NULL ||
      s->verdicts == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a transfer with %zu peers",
                         t->n_peers);
  }
  for (size_t i = 0; i < t->n_peers; i++) {
    s->pairs[i].peer = t->peers[i];
    s->pairs[i].theirs = (wire_header *)(void *)(s->headers + i * hb);
  }
  return KVS_OK;
}

/* One header exchange: this side's to every peer, or every peer's in. */
static kvs_status headers_move(session *s, kvs_comm_t link, bool send, uint64_t pages,
                               uint64_t *wire, kvs_error *err) {
  size_t hb = header_bytes(pages);
  for (size_t i = 0; i < s->n_pairs; i++) {
    s->t[i] = (kvs_comm_transfer){s->pairs[i].peer, send,
                                  send ? (void *)s->own : (void *)s->pairs[i].theirs, hb};
  }
  *wire += s->n_pairs * hb;
  return kvs_comm_exchange_host(link, s->t, s->n_pairs, err);
}

/* Where the planted unit's rows would have gone: saved before the
 * receive so the fault can be made after it. */
typedef struct planted {
  unsigned char *right, *wrong, *saved;
  uint64_t bytes;
  size_t pair, unit; /* the unit it is */
} planted;

static void plant_find(kvs_node_t node, const session *s, const kvs_transfer_plant *plant,
                       planted *out) {
  memset(out, 0, sizeof *out);
  if (plant == NULL) return;
  void *base = NULL;
  int64_t *mapping = NULL;
  if (kvs_table_memory(node->table, &base, &mapping, NULL) != KVS_OK) return;
  uint64_t seen = 0;
  for (size_t i = 0; i < s->n_pairs; i++) {
    for (size_t u = 0; s->pairs[i].ok && u < s->pairs[i].n; u++) {
      const kvs_xfer_unit *unit = &s->pairs[i].mine[u];
      if (unit->pool != plant->pool || seen++ != plant->unit) continue;
      out->bytes = unit->bytes;
      out->pair = i;
      out->unit = u;
      out->right = (unsigned char *)base + unit->offset;
      out->wrong = out->right + plant->shift * (int64_t)unit->step;
      out->saved = malloc((size_t)unit->bytes);
      kvs_row_copy c = {out->saved,  out->right,  unit->bytes,    1,
                        unit->bytes, unit->bytes, KVS_ROW_TO_HOST};
      if (out->saved != NULL && kvs_table_copy_now(node->table, &c, 1, NULL) != KVS_OK) {
        free(out->saved);
        out->saved = NULL;
      }
      return;
    }
  }
}

/* The rows landed on the wrong page; the right one keeps what it held
 * (through the table's copies: the rows may be on a GPU). */
static void plant_apply(kvs_node_t node, planted *p) {
  unsigned char *landed = malloc((size_t)p->bytes);
  if (p->saved != NULL && landed != NULL) {
    /* Through the host, in order: the two places may overlap. */
    kvs_row_copy c[3] = {{landed, p->right, p->bytes, 1, p->bytes, p->bytes, KVS_ROW_TO_HOST},
                         {p->wrong, landed, p->bytes, 1, p->bytes, p->bytes, KVS_ROW_FROM_HOST},
                         {p->right, p->saved, p->bytes, 1, p->bytes, p->bytes, KVS_ROW_FROM_HOST}};
    (void)kvs_table_copy_now(node->table, c, 3, NULL);
  }
  free(landed);
  free(p->saved);
  p->saved = NULL;
}

/* units[first, end)'s digests through the contract into out, where the
 * rows live (kvs_table_rows_digest: the host's XXH3 or a GPU's kernel);
 * 0 where a unit has no rows on this rank: it then differs. */
static kvs_status hash_units(const struct kvs_node *node, const views *vs,
                             const kvs_xfer_side *side, const pair *p, size_t first, size_t end,
                             uint64_t *out, kvs_error *err) {
  if (end <= first) return KVS_OK;
  kvs_rows_unit *units = calloc(end - first, sizeof *units);
  size_t *at = malloc((end - first) * sizeof *at);
  uint64_t *got = malloc((end - first) * sizeof *got);
  kvs_status status = KVS_OK;
  if (units == NULL || at == NULL || got == NULL) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to digest %zu units", end - first);
  }
  size_t n = 0;
  for (size_t u = first; status == KVS_OK && u < end; u++) {
    const unsigned char *rows = contract_rows(node, vs, side, &p->mine[u]);
    out[u] = 0;
    if (rows == NULL || p->mine[u].bytes == 0) continue;
    units[n] = (kvs_rows_unit){rows, p->mine[u].bytes, unit_seed(&p->mine[u])};
    at[n++] = u;
  }
  if (status == KVS_OK) status = kvs_table_rows_digest(node->table, units, n, got, err);
  for (size_t i = 0; status == KVS_OK && i < n; i++) out[at[i]] = got[i];
  free(units);
  free(at);
  free(got);
  return status;
}

/* The host twin's hashing beside the copies: a thread that digests each
 * round once its rows are in (the decode side: after its exchange and a
 * planted fault; the prefill side: up to HASH_AHEAD rounds before they
 * are sent, close enough that the link copies rows still in the
 * last-level cache), while the calling thread moves the next round. The
 * link's copy takes a core (MPI's single copy runs in the receiver's
 * progress); the two sides' hashes then run beside it instead of stalling
 * it between rounds. */
#define HASH_AHEAD 4

typedef struct hasher {
  pthread_mutex_t m;
  pthread_cond_t c;
  const struct kvs_node *node;
  const views *vs;
  const kvs_xfer_side *side;
  const session *s;
  bool send;
  size_t rounds, ready; /* rounds in all, rounds whose rows are in */
  size_t done;          /* rounds hashed */
  bool finished;        /* the thread is done (status says how) */
  bool stop;            /* the transfer failed: stop hashing */
  kvs_status status;
  kvs_error err;
} hasher;

static kvs_status hash_round(const hasher *h, size_t round, kvs_error *err) {
  kvs_status status = KVS_OK;
  for (size_t i = 0; status == KVS_OK && i < h->s->n_pairs; i++) {
    const pair *p = &h->s->pairs[i];
    if (!p->ok || round >= p->n_rounds) continue;
    size_t k0 = round ? p->rounds[round - 1] : 0, k1 = p->rounds[round];
    size_t first = k0 ? p->pieces[k0 - 1] : 0, end = p->pieces[k1 - 1];
    status =
        hash_units(h->node, h->vs, h->side, p, first, end, h->send ? p->digests : p->here, err);
  }
  return status;
}

static void *hasher_run(void *arg) {
  hasher *h = arg;
  kvs_error err;
  kvs_error_clear(&err);
  kvs_status status = KVS_OK;
  for (size_t round = 0; status == KVS_OK && round < h->rounds; round++) {
    pthread_mutex_lock(&h->m);
    while (h->ready <= round && !h->stop) pthread_cond_wait(&h->c, &h->m);
    bool stop = h->stop && h->ready <= round;
    pthread_mutex_unlock(&h->m);
    if (stop) break;
    status = hash_round(h, round, &err);
    pthread_mutex_lock(&h->m);
    h->done = round + 1;
    pthread_cond_broadcast(&h->c);
    pthread_mutex_unlock(&h->m);
  }
  pthread_mutex_lock(&h->m);
  h->status = status;
  h->err = err;
  h->finished = true;
  pthread_cond_broadcast(&h->c);
  pthread_mutex_unlock(&h->m);
  return NULL;
}

static void hasher_ready(hasher *h, size_t ready, bool stop) {
  pthread_mutex_lock(&h->m);
  h->ready = ready;
  h->stop = stop;
  pthread_cond_broadcast(&h->c);
  pthread_mutex_unlock(&h->m);
}

/* Waits until every round before `round` is hashed (a planted fault may
 * write rows of any earlier round's page). */
static void hasher_wait(hasher *h, size_t round) {
  pthread_mutex_lock(&h->m);
  while (h->done < round && !h->finished) pthread_cond_wait(&h->c, &h->m);
  pthread_mutex_unlock(&h->m);
}

/* The rows of every pair that moves, round by round (each round one
 * exchange), each round's units hashed on this side once it moved: the
 * prefill side's digests of what it sent (p->digests), the decode side's
 * of what arrived (p->here), with a planted fault made before its round
 * is hashed. */
static kvs_status rows_move(session *s, kvs_node_t node, kvs_comm_t link, bool send,
                            const kvs_xfer_side *side, planted *pl, kvs_node_transfer_report *r,
                            kvs_error *err) {
  size_t cap = 0, rounds = 0;
  for (size_t i = 0; i < s->n_pairs; i++) {
    if (!s->pairs[i].ok) continue;
    cap += s->pairs[i].n_pieces;
    if (s->pairs[i].n_rounds > rounds) rounds = s->pairs[i].n_rounds;
  }
  kvs_comm_transfer *t = calloc(cap ? cap : 1, sizeof *t);
  if (t == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu messages", cap);
  void *base = NULL;
  int64_t *mapping = NULL;
  kvs_status status = kvs_table_memory(node->table, &base, &mapping, err);
  views vs;
  if (status == KVS_OK) views_of(node, &vs);
  const bool device = kvs_table_kind_of(node->table) != KVS_TABLE_HOST;
#ifdef KVS_MUTANT_PD_SEND_BEFORE_HASH /* planted bug, test builds only (tests/mutants) */
  const bool prehash = false;         /* the prefill side hashes after its sends */
#else
  const bool prehash = device && send;
#endif
  /* A GPU's decode side: the journal's row work queued on the engine's
   * stream (the new slot's ring clears, a hit's restores) lands before the
   * link, on a stream of its own, writes the rows over it. */
#ifndef KVS_MUTANT_PD_RECEIVE_NO_SYNC /* defined: planted bug (tests/mutants), no wait */
  if (status == KVS_OK && device && !send) status = kvs_table_sync(node->table, err);
#endif
  /* A GPU's prefill side hashes every unit first, on the engine's stream:
   * after the engine's writes of the rows, which the link's sends (on its
   * own stream) then read finished; at HBM speed it costs the link
   * nothing. A GPU's decode side hashes each round after its group. */
  for (size_t i = 0; prehash && status == KVS_OK && i < s->n_pairs; i++) {
    const pair *p = &s->pairs[i];
    if (p->ok) status = hash_units(node, &vs, side, p, 0, p->n, p->digests, err);
  }
  hasher h = {.node = node,
              .vs = &vs,
              .side = side,
              .s = s,
              .send = send,
              .rounds = rounds,
              .ready = send ? HASH_AHEAD : 0,
              .status = KVS_OK};
  pthread_t thread;
  bool threaded = false;
  if (status == KVS_OK && !device && rounds > 1) {
    pthread_mutex_init(&h.m, NULL);
    pthread_cond_init(&h.c, NULL);
    threaded = pthread_create(&thread, NULL, hasher_run, &h) == 0;
    if (!threaded) {
      pthread_mutex_destroy(&h.m);
      pthread_cond_destroy(&h.c);
    }
  }
  for (size_t round = 0; status == KVS_OK && round < rounds; round++) {
    size_t nt = 0;
    for (size_t i = 0; i < s->n_pairs; i++) {
      const pair *p = &s->pairs[i];
      if (!p->ok || round >= p->n_rounds) continue;
      for (size_t k = round ? p->rounds[round - 1] : 0; k < p->rounds[round]; k++) {
        size_t first = k ? p->pieces[k - 1] : 0;
        uint64_t bytes = span_bytes(p, first, p->pieces[k]);
        t[nt++] = (kvs_comm_transfer){p->peer, send, (unsigned char *)base + p->mine[first].offset,
                                      (size_t)bytes};
        r->wire_bytes += bytes;
        r->messages++;
      }
    }
    if (threaded && send) hasher_ready(&h, round + HASH_AHEAD, false);
    status = kvs_comm_exchange(link, t, nt, err);
    for (size_t i = 0; status == KVS_OK && pl != NULL && i < s->n_pairs; i++) {
      pair *p = &s->pairs[i];
      if (!p->ok || round >= p->n_rounds || pl->pair != i) continue;
      size_t k0 = round ? p->rounds[round - 1] : 0, k1 = p->rounds[round];
      size_t first = k0 ? p->pieces[k0 - 1] : 0, end = p->pieces[k1 - 1];
      if (pl->unit >= first && pl->unit < end) {
        if (threaded) hasher_wait(&h, round);
        plant_apply(node, pl);
      }
    }
    if (status != KVS_OK || prehash) continue;
    if (threaded) {
      if (!send) hasher_ready(&h, round + 1, false);
    } else {
      status = hash_round(&h, round, err);
    }
  }
  if (threaded) {
    /* A failed transfer stops it where it is. */
    hasher_ready(&h, send && status == KVS_OK ? rounds : h.ready, status != KVS_OK);
    pthread_join(thread, NULL);
    pthread_mutex_destroy(&h.m);
    pthread_cond_destroy(&h.c);
    if (status == KVS_OK && h.status != KVS_OK)
      status = kvs_error_set(err, h.status, "%s", h.err.message);
  }
  free(t);
  return status;
}

/* The prefill side's digests of every pair that moved, one message each:
 * after the rows, so that both sides hash at once. */
static kvs_status digests_move(session *s, kvs_comm_t link, bool send, uint64_t *wire,
                               kvs_error *err) {
  size_t nt = 0;
  for (size_t i = 0; i < s->n_pairs; i++) {
    const pair *p = &s->pairs[i];
    if (!p->ok) continue;
    s->t[nt++] = (kvs_comm_transfer){p->peer, send, p->digests, p->n * sizeof(uint64_t)};
    *wire += p->n * sizeof(uint64_t);
  }
  return kvs_comm_exchange_host(link, s->t, nt, err);
}

static void count_units(const session *s, kvs_node_transfer_report *r) {
  for (size_t i = 0; i < s->n_pairs; i++) {
    if (!s->pairs[i].ok) continue;
    r->units += s->pairs[i].n;
    for (size_t u = 0; u < s->pairs[i].n; u++) r->bytes += s->pairs[i].mine[u].bytes;
  }
}

/* What both sides check before anything moves: the arguments, the
 * report's size, the pages the tokens fill. */
static kvs_status begin(kvs_node_t node, kvs_comm_t link, const kvs_node_transfer *t,
                        const kvs_node_transfer_report *report, const char *call,
                        kvs_node_transfer_report *r, uint64_t *pages, kvs_error *err) {
  kvs_status status = check_transfer(node, link, t, call, err);
  if (status == KVS_OK && report != NULL && report->size != sizeof *report) {
    status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "%s: report.size is %zu, this build's kvs_node_transfer_report is %zu",
                           call, report->size, sizeof *report);
  }
  memset(r, 0, sizeof *r);
  r->size = sizeof *r;
  return status == KVS_OK ? pages_needed(node, t, pages, err) : status;
}

/* ---- the prefill side ---- */

kvs_status kvs_node_send_request(kvs_node_t node, kvs_comm_t link,
                                 const kvs_node_transfer *transfer,
                                 kvs_node_transfer_report *report, kvs_error *err) {
  uint64_t t0 = kvs_now_ns(), pages = 0;
  kvs_node_transfer_report r;
  kvs_status status = begin(node, link, transfer, report, "kvs_node_send_request", &r, &pages, err);
  if (status != KVS_OK) return status;
  session s;
  status = session_open(&s, transfer, pages, err);
  if (status != KVS_OK) {
    session_free(&s);
    return status;
  }
  wire_header *own = (wire_header *)(void *)s.own;
  header_init(node, transfer, own);
  /* Every page's window goes in the header: the decode side asks for the
   * windows it keeps (its window_tokens) and checks this side has them. */
  kvs_xfer_side side;
  kvs_error local;
  kvs_error_clear(&local);
  kvs_status mine = side_of(node, transfer, 0, 0, true, &side, own_pages(own) + pages, &local);
  if (mine != KVS_OK) {
    refuse_header(own, mine, &local);
  } else {
    memcpy(own_pages(own), transfer->pages, pages * sizeof(int64_t));
    own->slot = side.slot;
  }
  status = headers_move(&s, link, true, pages, &r.wire_bytes, err);
  if (status == KVS_OK) status = headers_move(&s, link, false, pages, &r.wire_bytes, err);
  /* A decode rank that refused the request in its header, or whose
   * header does not pair with this one, takes no rows: the send says so
   * (the first such rank) instead of succeeding with nothing moved. */
  kvs_status refused = KVS_OK;
  kvs_error refusal;
  kvs_error_clear(&refusal);
  for (size_t i = 0; status == KVS_OK && i < s.n_pairs; i++) {
    pair *p = &s.pairs[i];
    const wire_header *d = p->theirs;
    const char *differs = d->status != 0 ? NULL : mismatch(own, d);
    if (mine == KVS_OK && refused == KVS_OK && (d->status != 0 || differs != NULL)) {
      refused = d->status != 0 ? (kvs_status)d->status : KVS_ERR_INVALID_ARGUMENT;
      if (d->status != 0) {
        kvs_error_set(&refusal, refused, "request %llu: decode link rank %d refused it: %.*s",
                      (unsigned long long)transfer->request, p->peer, (int)(REASON_BYTES - 1),
                      d->reason);
      } else {
        kvs_error_set(&refusal, refused,
                      "request %llu: decode link rank %d's header differs from this rank's: %s",
                      (unsigned long long)transfer->request, p->peer, differs);
      }
    }
    p->ok = mine == KVS_OK && d->status == 0 && differs == NULL && d->first_layer < d->end_layer;
    if (!p->ok) continue;
    p->lo = d->first_layer;
    p->hi = d->end_layer;
    r.reused_bytes +=
        reused_bytes(node, transfer->tokens, d->reuse, d->window_tokens, p->lo, p->hi);
    kvs_xfer_shape shape = shape_of(node, transfer->tokens, d->reuse, d->window_tokens);
    kvs_xfer_side theirs = side_from(d, pages);
    status = plan_pair(node, &shape, &side, &theirs, false, p, err);
  }
  /* The rows, and the digests of what was sent, taken round by round
   * while the decode ranks hash what came. */
  if (status == KVS_OK) status = rows_move(&s, node, link, true, &side, NULL, &r, err);
  if (status == KVS_OK) status = digests_move(&s, link, true, &r.wire_bytes, err);
  /* The decode ranks' verdicts, which every decode rank whose link is
   * whole sends at its end: taken whenever this link is whole too, so
   * none is left for the next transfer to trip on. A request they refused
   * after its rows came (a digest that differs, a rank that disagreed) is
   * this call's failure too. */
  kvs_error heard;
  kvs_error_clear(&heard);
  kvs_status verdict = KVS_OK;
  if (kvs_comm_health(link) == KVS_OK) {
    verdict = verdicts_move(link, transfer, s.verdicts, false, s.t, &heard);
    r.wire_bytes += transfer->n_peers * sizeof(wire_verdict);
  }
  for (size_t i = 0; status == KVS_OK && verdict == KVS_OK && i < s.n_pairs; i++) {
    const wire_verdict *v = &s.verdicts[i];
    if (v->magic != WIRE_MAGIC) {
      verdict = kvs_error_set(&heard, KVS_ERR_CORRUPT,
                              "request %llu: decode link rank %d's verdict is not a transfer's",
                              (unsigned long long)transfer->request, s.pairs[i].peer);
    } else if (v->status != KVS_OK) {
      verdict = kvs_error_set(&heard, (kvs_status)v->status,
                              "request %llu: the decode side refused it (decode link rank %d "
                              "says: %.*s)",
                              (unsigned long long)transfer->request, s.pairs[i].peer,
                              (int)(REASON_BYTES - 200), v->reason);
    }
  }
  /* The first cause: the link, this rank's own refusal, a decode rank's
   * refusal in its header, then the verdicts. */
  if (status == KVS_OK && mine != KVS_OK) status = kvs_error_set(err, mine, "%s", local.message);
  if (status == KVS_OK && refused != KVS_OK) {
    status = kvs_error_set(err, refused, "%s", refusal.message);
  }
  if (status == KVS_OK && verdict != KVS_OK)
    status = kvs_error_set(err, verdict, "%s", heard.message);
  count_units(&s, &r);
  r.seconds = (double)(kvs_now_ns() - t0) * 1e-9;
  if (report != NULL) *report = r;
  session_free(&s);
  return status;
}

/* ---- the decode side ---- */

/* Every decode rank's reuse is the same, and this rank's mirror holds the
 * hit the leader acquired: the first reuse / P pages are cached blocks at
 * their depths (collective: one allreduce). */
static kvs_status check_reuse(kvs_node_t node, const kvs_node_transfer *t, kvs_status local,
                              kvs_error *err) {
  uint64_t *w = (uint64_t *)node->words.host;
  w[0] = t->reuse_tokens;
  w[1] = ~t->reuse_tokens;
  w[2] = t->window_tokens;
  w[3] = ~t->window_tokens;
  kvs_status status = kvs_comm_allreduce_u64(node->comm, &node->words, 4, KVS_COMM_MIN, err);
  if (status != KVS_OK) return status;
  if (local != KVS_OK) return local;
  for (int i = 0; i < 4; i += 2) {
    if (w[i] != ~w[i + 1]) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "request %llu: the decode ranks disagree on %s (%llu to %llu)",
                           (unsigned long long)t->request,
                           i == 0 ? "reuse_tokens" : "window_tokens", (unsigned long long)w[i],
                           (unsigned long long)~w[i + 1]);
    }
  }
  uint64_t P = node->options.page;
  for (uint64_t b = 0; b < t->reuse_tokens / P; b++) {
    uint64_t chain = 0, depth = 0;
    if (kvs_window_pool_prefix_block(pool_of(node), (uint64_t)t->pages[b], &chain, &depth, NULL) !=
            KVS_OK ||
        depth != b) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "request %llu: its reused prefix's block %llu (full page %lld) is not "
                           "a cached block at that depth on rank %d: acquire the hit on the "
                           "leader and step before the transfer",
                           (unsigned long long)t->request, (unsigned long long)b,
                           (long long)t->pages[b], node->rank);
    }
  }
  return KVS_OK;
}

/* Which prefill peer sends each of this rank's layers: one holding it,
 * spreading decode ranks over replicas (rank modulo their count); each
 * peer's layers must be one range. */
static kvs_status assign_layers(kvs_node_t node, session *s, const wire_header *own,
                                kvs_error *err) {
  size_t n = s->n_pairs;
  /* Per peer: its layers, whether it can send (why not, once), and what
   * it sends this rank. */
  size_t *ranges = calloc(4 * n, sizeof *ranges);
  bool *usable = calloc(n, sizeof *usable);
  const char **why = calloc(n, sizeof *why);
  if (ranges == NULL || usable == NULL || why == NULL) {
    free(ranges);
    free(usable);
    free(why);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu peers", n);
  }
  size_t *first = ranges, *end = ranges + n, *lo = ranges + 2 * n, *hi = ranges + 3 * n;
  size_t first_bad = n;
  for (size_t i = 0; i < n; i++) {
    const wire_header *h = s->pairs[i].theirs;
    why[i] = h->status != 0 ? h->reason : mismatch(own, h);
    usable[i] = why[i] == NULL;
    if (!usable[i] && first_bad == n) first_bad = i;
    first[i] = h->first_layer;
    end[i] = h->end_layer;
  }
  size_t layer = 0, peer = 0;
  kvs_status status =
      kvs_xfer_assign(node->layout->first_layer, node->layout->end_layer, (size_t)node->rank, n,
                      first, end, usable, lo, hi, &layer, &peer);
  if (status == KVS_ERR_NOT_FOUND) {
    bool known = first_bad < n;
    status = kvs_error_set(
        err, KVS_ERR_INVALID_ARGUMENT,
        "request %llu: layer %zu of decode rank %d is held by no prefill peer that can send "
        "it%s%d%s%s%s",
        (unsigned long long)own->request, layer, node->rank, known ? " (link rank " : "",
        known ? s->pairs[first_bad].peer : 0,
        known ? (s->pairs[first_bad].theirs->status != 0 ? " refused: "
                                                         : "'s differs from this rank's: ")
              : "",
        known ? why[first_bad] : "", known ? ")" : "");
  } else if (status == KVS_ERR_UNSUPPORTED) {
    status = kvs_error_set(err, status,
                           "request %llu: decode rank %d would take layers %zu..%zu and %zu from "
                           "link rank %d: a peer's layers must be one range",
                           (unsigned long long)own->request, node->rank, lo[peer], hi[peer] - 1,
                           layer, s->pairs[peer].peer);
  }
  for (size_t i = 0; status == KVS_OK && i < n; i++) {
    s->pairs[i].lo = lo[i];
    s->pairs[i].hi = hi[i];
  }
  free(ranges);
  free(usable);
  free(why);
  return status;
}

/* The first unit whose digest differs, named; KVS_OK when none does. */
static kvs_status verify(kvs_node_t node, const session *s, const kvs_node_transfer *t,
                         kvs_node_transfer_report *r, kvs_error *err) {
  for (size_t i = 0; i < s->n_pairs; i++) {
    const pair *p = &s->pairs[i];
    if (!p->ok) continue;
    for (size_t u = 0; u < p->n; u++) {
      const kvs_xfer_unit *unit = &p->mine[u];
      uint64_t here = p->here[u];
      if (here == p->digests[u]) continue;
      r->view = kvs_xfer_pool_name((kvs_xfer_pool)unit->pool);
      r->layer = unit->layer;
      r->first_token = unit->first_token;
      r->end_token = unit->end_token;
      return kvs_error_set(err, KVS_ERR_CORRUPT,
                           "request %llu: its %s%s rows of layer %u (positions %llu..%llu) on "
                           "decode rank %d differ from what prefill link rank %d sent (digest "
                           "%016llx here, %016llx there)",
                           (unsigned long long)t->request, r->view, unit->tail ? " tail-state" : "",
                           unit->layer, (unsigned long long)unit->first_token,
                           (unsigned long long)(unit->end_token - 1), node->rank, p->peer,
                           (unsigned long long)here, (unsigned long long)p->digests[u]);
    }
  }
  return KVS_OK;
}

/* The leader gives a refused request's rows back: its window pages past
 * the reused prefix, its hit, its slot (journaled). */
static void refuse(kvs_node_t node, const kvs_node_transfer *t) {
  if (!kvs_node_is_leader(node) || t->pages == NULL) return;
  uint64_t first = t->reuse_tokens / node->options.page;
  if (first < t->n_pages) kvs_node_free_pages(node, t->pages + first, t->n_pages - first, NULL);
  if (kvs_window_pool_prefix_enabled(pool_of(node))) {
    kvs_node_prefix_release(node, t->request, NULL);
  }
  if (kvs_window_pool_slot_of(pool_of(node), t->request) >= 0) {
    kvs_node_finish(node, t->request, NULL);
  }
}

kvs_status kvs_node_receive_planted(kvs_node_t node, kvs_comm_t link,
                                    const kvs_node_transfer *transfer,
                                    const kvs_transfer_plant *plant,
                                    kvs_node_transfer_report *report, kvs_error *err) {
  uint64_t t0 = kvs_now_ns(), pages = 0;
  kvs_node_transfer_report r;
  kvs_status status =
      begin(node, link, transfer, report, "kvs_node_receive_request", &r, &pages, err);
  if (status != KVS_OK) return status;
  session s;
  kvs_error local;
  kvs_error_clear(&local);
  kvs_status mine = session_open(&s, transfer, pages, &local);
  wire_header *own = (wire_header *)(void *)s.own;
  kvs_xfer_side side;
  memset(&side, 0, sizeof side);
  if (mine == KVS_OK) {
    header_init(node, transfer, own);
    mine = side_of(node, transfer, transfer->reuse_tokens, transfer->window_tokens, true, &side,
                   own_pages(own) + pages, &local);
  }
  mine = check_reuse(node, transfer, mine, &local);
  bool link_ok = s.own != NULL;
  if (link_ok) {
    /* Phase 1: the prefill ranks' headers. */
    kvs_status moved = headers_move(&s, link, false, pages, &r.wire_bytes, &local);
    if (moved != KVS_OK) {
      mine = moved;
      link_ok = false;
    }
  }
  if (link_ok) {
    if (mine == KVS_OK) mine = assign_layers(node, &s, own, &local);
    if (mine == KVS_OK) {
      memcpy(own_pages(own), transfer->pages, pages * sizeof(int64_t));
      own->slot = side.slot;
    }
    kvs_xfer_shape shape =
        shape_of(node, transfer->tokens, transfer->reuse_tokens, transfer->window_tokens);
    for (size_t i = 0; mine == KVS_OK && i < s.n_pairs; i++) {
      pair *p = &s.pairs[i];
      p->ok = p->hi > p->lo;
      if (!p->ok) continue;
      kvs_xfer_side theirs = side_from(p->theirs, pages);
      mine = plan_pair(node, &shape, &side, &theirs, true, p, &local);
      r.reused_bytes += reused_bytes(node, transfer->tokens, transfer->reuse_tokens,
                                     transfer->window_tokens, p->lo, p->hi);
    }
    if (mine != KVS_OK) {
      refuse_header(own, mine, &local);
      for (size_t i = 0; i < s.n_pairs; i++) s.pairs[i].ok = false;
    }
    /* Phase 2: this rank's header to every prefill rank, each with the
     * layers it wants from that one. */
    kvs_status moved = KVS_OK;
    {
      size_t hb = header_bytes(pages);
      unsigned char *each = calloc(s.n_pairs, hb);
      if (each == NULL) {
        moved = kvs_error_set(&local, KVS_ERR_NO_MEMORY, "no memory for %zu headers", s.n_pairs);
      } else {
        for (size_t i = 0; i < s.n_pairs; i++) {
          wire_header *h = (wire_header *)(void *)(each + i * hb);
          memcpy(h, own, hb);
          h->first_layer = (uint32_t)s.pairs[i].lo;
          h->end_layer = (uint32_t)s.pairs[i].hi;
          s.t[i] = (kvs_comm_transfer){s.pairs[i].peer, true, h, hb};
        }
        r.wire_bytes += s.n_pairs * hb;
        moved = kvs_comm_exchange_host(link, s.t, s.n_pairs, &local);
        free(each);
      }
    }
    if (moved != KVS_OK) mine = moved;
    /* Phase 3: the rows, each round hashed here as it lands (a planted
     * fault made first); phase 4: the prefill side's digests. */
    if (mine == KVS_OK) {
      planted pl;
      plant_find(node, &s, plant, &pl);
      mine = rows_move(&s, node, link, false, &side, &pl, &r, &local);
      free(pl.saved);
    }
    if (mine == KVS_OK) mine = digests_move(&s, link, false, &r.wire_bytes, &local);
    if (mine == KVS_OK) mine = verify(node, &s, transfer, &r, &local);
  }
  count_units(&s, &r);
  /* Every decode rank's verdict, the same everywhere. */
  int failed = -1;
  kvs_error reason;
  kvs_error_clear(&reason);
  status = kvs_comm_agree(node->comm, &node->words, mine, &local, &failed, &reason);
  if (s.verdicts != NULL && kvs_comm_health(link) == KVS_OK) {
    wire_verdict *v = &s.verdicts[0];
    v->magic = WIRE_MAGIC;
    v->status = (uint32_t)status;
    snprintf(v->reason, sizeof v->reason, "%s", status == KVS_OK ? "" : reason.message);
    /* Lost, it changes nothing here (every decode rank agreed already):
     * the prefill rank waiting for it misses its deadline, naming this
     * rank. */
    verdicts_move(link, transfer, v, true, s.t, NULL);
    r.wire_bytes += transfer->n_peers * sizeof *v;
  }
  if (status != KVS_OK) {
    refuse(node, transfer);
    status = failed < 0
                 ? kvs_error_set(err, status, "request %llu refused: %s",
                                 (unsigned long long)transfer->request, reason.message)
                 : kvs_error_set(err, status,
                                 "request %llu refused on every decode rank (decode rank "
                                 "%d: %s)",
                                 (unsigned long long)transfer->request, failed, reason.message);
  }
  r.seconds = (double)(kvs_now_ns() - t0) * 1e-9;
  if (report != NULL) *report = r;
  session_free(&s);
  return status;
}

kvs_status kvs_node_receive_request(kvs_node_t node, kvs_comm_t link,
                                    const kvs_node_transfer *transfer,
                                    kvs_node_transfer_report *report, kvs_error *err) {
  return kvs_node_receive_planted(node, link, transfer, NULL, report, err);
}

/* ---- descriptors and the decode side's admission ---- */

/* A request's side on this rank, its windows in memory of the caller's
 * (*windows, freed by it), for the two local calls. */
static kvs_status local_side(kvs_node_t node, const kvs_node_transfer *t, const char *call,
                             bool need_bound, kvs_xfer_side *side, int64_t **windows,
                             kvs_error *err) {
  *windows = NULL;
  if (t->size != sizeof *t) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s: transfer.size is %zu, this build's kvs_node_transfer is %zu", call,
                         t->size, sizeof *t);
  }
  uint64_t pages = 0;
  kvs_status status = pages_needed(node, t, &pages, err);
  if (status != KVS_OK) return status;
  *windows = calloc((size_t)pages, sizeof **windows);
  if (*windows == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %llu pages' windows",
                         (unsigned long long)pages);
  }
  return side_of(node, t, t->reuse_tokens, t->window_tokens, need_bound, side, *windows, err);
}

kvs_status kvs_node_request_rows(kvs_node_t node, const kvs_node_transfer *t, kvs_node_rows *out,
                                 size_t cap, size_t *n, kvs_error *err) {
  if (node == NULL || t == NULL || n == NULL || (out == NULL && cap > 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_node_request_rows: %s is NULL",
                         node == NULL ? "node"
                         : t == NULL  ? "transfer"
                         : n == NULL  ? "n"
                                      : "out");
  }
  kvs_xfer_side side;
  int64_t *windows = NULL;
  kvs_status status = local_side(node, t, "kvs_node_request_rows", true, &side, &windows, err);
  void *base = NULL;
  int64_t *mapping = NULL;
  if (status == KVS_OK) status = kvs_table_memory(node->table, &base, &mapping, err);
  kvs_xfer_shape shape = shape_of(node, t->tokens, t->reuse_tokens, t->window_tokens);
  size_t lo = node->layout->first_layer, hi = node->layout->end_layer;
  size_t count =
      status == KVS_OK ? kvs_xfer_units(node->layout, &shape, &side, lo, hi, NULL, 0) : 0;
  kvs_xfer_unit *units = status == KVS_OK ? calloc(count ? count : 1, sizeof *units) : NULL;
  if (status == KVS_OK && units == NULL) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu units", count);
  }
  if (status == KVS_OK) {
    kvs_xfer_units(node->layout, &shape, &side, lo, hi, units, count);
    for (size_t i = 0; i < count && i < cap; i++) {
      kvs_node_rows r = {kvs_xfer_pool_name((kvs_xfer_pool)units[i].pool),
                         units[i].layer,
                         units[i].tail,
                         (unsigned char *)base + units[i].offset,
                         units[i].offset,
                         units[i].bytes,
                         units[i].first_token,
                         units[i].end_token};
      out[i] = r;
    }
    *n = count;
  }
  free(units);
  free(windows);
  return status;
}

/* import_admit's checks: a slot, window pages and journal room for it. */
static kvs_status admit_room(kvs_node_t node, uint64_t request, size_t n_bind, bool need_slot,
                             kvs_error *err) {
  kvs_node_capacity c = {.size = sizeof c};
  kvs_status status = kvs_node_capacity_of(node, &c, err);
  if (status != KVS_OK) return status;
  if (need_slot && c.running >= c.max_running) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED,
                         "kvs_node_import_admit: request %llu needs a slot and all %llu are "
                         "running",
                         (unsigned long long)request, (unsigned long long)c.max_running);
  }
  if (n_bind > c.free_window_pages) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED,
                         "kvs_node_import_admit: request %llu needs %zu window pages, %llu are "
                         "free",
                         (unsigned long long)request, n_bind,
                         (unsigned long long)c.free_window_pages);
  }
  size_t entries = n_bind + need_slot;
  if (entries > c.journal_room) {
    return kvs_error_set(err, KVS_ERR_JOURNAL_FULL,
                         "kvs_node_import_admit: request %llu needs %zu journal entries, the next "
                         "step has room for %zu: step first",
                         (unsigned long long)request, entries, c.journal_room);
  }
  return KVS_OK;
}

kvs_status kvs_node_import_admit(kvs_node_t node, const kvs_node_transfer *t, int64_t *slot,
                                 kvs_error *err) {
  if (node == NULL || t == NULL || slot == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_node_import_admit: %s is NULL",
                         node == NULL ? "node"
                         : t == NULL  ? "transfer"
                                      : "slot");
  }
  if (!kvs_node_is_leader(node)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "kvs_node_import_admit on rank %d: only the leader (rank 0) admits; "
                         "the others receive its decisions with the next step",
                         node->rank);
  }
  kvs_xfer_side side;
  int64_t *windows = NULL;
  kvs_status status = local_side(node, t, "kvs_node_import_admit", false, &side, &windows, err);
  kvs_xfer_shape shape = shape_of(node, t->tokens, t->reuse_tokens, t->window_tokens);
  uint64_t first, tails = kvs_xfer_tail(&shape, &first);
  int64_t *bind = status == KVS_OK ? calloc(tails ? tails : 1, sizeof *bind) : NULL;
  if (status == KVS_OK && bind == NULL) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %llu pages",
                           (unsigned long long)tails);
  }
  size_t n_bind = 0;
  for (uint64_t b = first; status == KVS_OK && b < first + tails; b++) {
    if (windows[b] < 0) bind[n_bind++] = t->pages[b];
  }
  bool slots = kvs_window_pool_request_slots(pool_of(node)) > 0;
  bool need_slot = slots && kvs_window_pool_slot_of(pool_of(node), t->request) < 0;
  if (status == KVS_OK) status = admit_room(node, t->request, n_bind, need_slot, err);
  if (status == KVS_OK) {
    *slot = side.slot;
    if (need_slot) status = kvs_node_admit(node, t->request, slot, err);
  }
  if (status == KVS_OK && n_bind > 0) {
    status = kvs_node_bind_pages(node, t->request, bind, n_bind, err);
    if (status != KVS_OK && need_slot) kvs_node_finish(node, t->request, NULL);
  }
  free(bind);
  free(windows);
  return status;
}

/* A request's rows, unit by unit (shard/transfer_rows.h). */
#include "shard/transfer_rows.h"

#include <stddef.h>

#include "core/cost_model.h"
#include "core/device_ref.h"
#include "core/geometry.h"
#include "kvshard.h"

static const char *const POOL_NAMES[KVS_XFER_POOLS] = {
    "window", "compressed_4", "compressed_128", "indexer", "state_4", "state_128", "index_state"};

const char *kvs_xfer_pool_name(kvs_xfer_pool pool) {
  return (unsigned)pool < KVS_XFER_POOLS ? POOL_NAMES[pool] : "?";
}

uint64_t kvs_xfer_pages(const kvs_xfer_shape *shape) {
  return shape->page == 0 ? 0 : (shape->tokens + shape->page - 1) / shape->page;
}

uint64_t kvs_xfer_tail(const kvs_xfer_shape *shape, uint64_t *first) {
  uint64_t P = shape->page;
  *first = 0;
  if (P == 0 || shape->tokens == 0) return 0;
  uint64_t w = shape->window_tokens > P - 1 ? shape->window_tokens : P - 1;
  uint64_t lo = shape->tokens > w ? (shape->tokens - w) / P : 0;
  uint64_t hi = (shape->tokens - 1) / P + 1;
  uint64_t reused = shape->reuse / P;
  if (lo < reused) lo = reused;
  *first = lo;
  return hi > lo ? hi - lo : 0;
}

/* Which tier a pool reads and the layer ratio it needs. */
static kvs_device_tier pool_tier(kvs_xfer_pool pool, uint32_t *ratio) {
  static const kvs_device_tier tiers[KVS_XFER_POOLS] = {
      KVS_DEVICE_TIER_WINDOW,     KVS_DEVICE_TIER_COMPRESSED, KVS_DEVICE_TIER_COMPRESSED,
      KVS_DEVICE_TIER_INDEXER,    KVS_DEVICE_TIER_STATE,      KVS_DEVICE_TIER_STATE,
      KVS_DEVICE_TIER_INDEX_STATE};
  static const uint32_t ratios[KVS_XFER_POOLS] = {0, 4, 128, 4, 4, 128, 4};
  *ratio = ratios[pool];
  return tiers[pool];
}

/* The units' writer: counts past cap, writes below it. */
typedef struct sink {
  kvs_xfer_unit *out;
  size_t cap, n;
  uint64_t *sum; /* bytes per pool, or NULL */
} sink;

static void put(sink *s, kvs_xfer_pool pool, bool tail, size_t layer, int64_t index, uint64_t base,
                uint64_t bytes, uint64_t step, uint64_t first, uint64_t end) {
  if (s->out != NULL && s->n < s->cap) {
    kvs_xfer_unit u = {
        (uint8_t)pool, tail, (uint32_t)layer, index, index < 0 ? 0 : base + (uint64_t)index * step,
        bytes,         step, first,           end};
    s->out[s->n] = u;
  }
  if (s->sum != NULL) s->sum[pool] += bytes;
  s->n++;
}

static int64_t window_of(const kvs_xfer_side *side, uint64_t b) {
  return side->window != NULL && b < side->n_pages ? side->window[b] : -1;
}

/* A page's rows in a paged or plain region: bytes, and the step between
 * consecutive pages. */
static void page_rows(const kvs_device_region *r, uint64_t rows, uint64_t *bytes, uint64_t *step) {
  *bytes = rows * r->row_bytes;
  *step = r->page_rows != 0 ? r->page_bytes : *bytes;
}

static void layer_units(const kvs_device_layout *layout, const kvs_xfer_shape *shape,
                        const kvs_xfer_side *side, kvs_xfer_pool pool, size_t layer, sink *s) {
  uint32_t need;
  kvs_device_tier tier = pool_tier(pool, &need);
  uint32_t ratio = layout->layer_ratio[layer - layout->first_layer];
  if (need != 0 && ratio != need) return;
  kvs_device_region r;
  if (kvs_device_layout_region(layout, tier, layer, &r, NULL) != KVS_OK) return;
  uint64_t P = shape->page, L = shape->tokens;
  uint64_t first_tail, tails = kvs_xfer_tail(shape, &first_tail);
  uint64_t bytes, step;
  switch (pool) {
    case KVS_XFER_WINDOW:
      page_rows(&r, P, &bytes, &step);
      for (uint64_t t = 0; t < tails; t++) {
        uint64_t b = first_tail + t;
        put(s, pool, false, layer, window_of(side, b), r.offset, bytes, step, b * P,
            (b + 1) * P < L ? (b + 1) * P : L);
      }
      return;
    case KVS_XFER_COMPRESSED_4:
    case KVS_XFER_COMPRESSED_128:
    case KVS_XFER_INDEXER: {
      page_rows(&r, P / need, &bytes, &step);
      uint64_t n = kvs_xfer_pages(shape);
      for (uint64_t b = shape->reuse / P; b < n; b++) {
        int64_t page = b < side->n_pages ? side->pages[b] : -1;
        put(s, pool, false, layer, page, r.offset, bytes, step, b * P,
            (b + 1) * P < L ? (b + 1) * P : L);
      }
      return;
    }
    default:
      break;
  }
  /* A compress-state ring: per request slot or per window page. */
  bool csa = need == KVS_CSA_RATIO;
  kvs_state_rings rings = layout->sizes.state_rings;
  bool per_request =
      csa ? kvs_state_rings_csa_per_request(rings) : kvs_state_rings_hca_per_request(rings);
  uint64_t ring = csa ? KVS_RING_SLOTS_CSA : KVS_RING_SLOTS_HCA;
  bytes = ring * r.row_bytes;
  if (per_request) {
    put(s, pool, false, layer, side->slot, r.offset, bytes, bytes, L > ring ? L - ring : 0, L);
    if (!(csa && layout->sizes.tail_states)) return;
    uint64_t ring_rows = layout->sizes.n_req_slots * ring;
    uint64_t tail_bytes = KVS_TAIL_STATE_ROWS * r.row_bytes;
    for (uint64_t t = 0; t < tails; t++) {
      uint64_t b = first_tail + t;
      put(s, pool, true, layer, window_of(side, b), r.offset + ring_rows * r.row_bytes, tail_bytes,
          tail_bytes, (b + 1) * P - KVS_TAIL_STATE_POSITIONS, (b + 1) * P);
    }
    return;
  }
  for (uint64_t t = 0; t < tails; t++) {
    uint64_t b = first_tail + t;
    put(s, pool, false, layer, window_of(side, b), r.offset, bytes, bytes, b * P,
        (b + 1) * P < L ? (b + 1) * P : L);
  }
}

static size_t walk(const kvs_device_layout *layout, const kvs_xfer_shape *shape,
                   const kvs_xfer_side *side, size_t lo, size_t hi, sink *s) {
  if (layout == NULL || shape == NULL || side == NULL || shape->page == 0) return 0;
  if (lo < layout->first_layer) lo = layout->first_layer;
  if (hi > layout->end_layer) hi = layout->end_layer;
  for (int pool = 0; pool < KVS_XFER_POOLS; pool++) {
    for (size_t layer = lo; layer < hi; layer++) {
      layer_units(layout, shape, side, (kvs_xfer_pool)pool, layer, s);
    }
  }
  return s->n;
}

size_t kvs_xfer_units(const kvs_device_layout *layout, const kvs_xfer_shape *shape,
                      const kvs_xfer_side *side, size_t lo, size_t hi, kvs_xfer_unit *out,
                      size_t cap) {
  sink s = {out, cap, 0, NULL};
  return walk(layout, shape, side, lo, hi, &s);
}

void kvs_xfer_pool_bytes(const kvs_device_layout *layout, const kvs_xfer_shape *shape, size_t lo,
                         size_t hi, uint64_t out[KVS_XFER_POOLS]) {
  for (int i = 0; i < KVS_XFER_POOLS; i++) out[i] = 0;
  /* The units' bytes depend on the layout alone: a side without pages. */
  kvs_xfer_side side = {NULL, 0, NULL, -1};
  sink s = {NULL, 0, 0, out};
  walk(layout, shape, &side, lo, hi, &s);
}

kvs_status kvs_xfer_assign(size_t first, size_t end, size_t rank, size_t n_peers,
                           const size_t *peer_first, const size_t *peer_end, const bool *usable,
                           size_t *lo, size_t *hi, size_t *layer, size_t *peer) {
  for (size_t i = 0; i < n_peers; i++) lo[i] = hi[i] = 0;
  for (size_t l = first; l < end; l++) {
    size_t holders = 0, seen = 0;
    for (size_t i = 0; i < n_peers; i++) {
      holders += (usable == NULL || usable[i]) && peer_first[i] <= l && l < peer_end[i];
    }
    *layer = l;
    if (holders == 0) return KVS_ERR_NOT_FOUND;
    for (size_t i = 0; i < n_peers; i++) {
      if ((usable != NULL && !usable[i]) || !(peer_first[i] <= l && l < peer_end[i]) ||
          seen++ != rank % holders) {
        continue;
      }
      if (hi[i] != lo[i] && hi[i] != l) {
        *peer = i;
        return KVS_ERR_UNSUPPORTED;
      }
      if (hi[i] == lo[i]) lo[i] = l;
      hi[i] = l + 1;
    }
  }
  return KVS_OK;
}

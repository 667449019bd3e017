/* A request's rows, pool by pool and layer by layer: what moves when a
 * request leaves its prefill ranks for its decode ranks, as plain
 * arithmetic over one rank's device layout. The node's transfer
 * (node_transfer.c) walks these units to move and verify rows; kvplan
 * counts them to size a prefill/decode split; both read one rule.
 *
 * The rule, for a request of L tokens (positions [0, L)) whose decode
 * side already holds the first H (a multiple of P: decode-side reuse):
 *   - compressed (each ratio) and indexer rows: one unit per full page b
 *     of the block table in [H / P, ceil(L / P)), the page's P / r rows;
 *   - window rows: one unit per tail page, the pages b >= H / P holding
 *     the last W positions, W = max(window_tokens, P - 1): by default the
 *     P - 1 a decode at L reads (one or two pages); more when the decode
 *     side will keep an earlier page's window as a cached prefix's tail;
 *   - compress-state rings: per request slot, the slot's whole ring (8 or
 *     128 rows); per window page, each tail page's ring;
 *   - tail states (ratio 4, rings per request, with a prefix cache): each
 *     tail page's KVS_TAIL_STATE_ROWS rows, so a later hit on the decode
 *     side's copy of the page is as exact as one on the prefill side's.
 * A unit is whole pages' rows (a partial last page moves whole: its rows
 * past L are the engine's to overwrite); fp8 scales are inside the pages. */
#ifndef KVS_SHARD_TRANSFER_ROWS_H
#define KVS_SHARD_TRANSFER_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "plan/device_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The pools a request's state lives in, in the order they travel; their
 * names are the node's view names. */
typedef enum kvs_xfer_pool {
  KVS_XFER_WINDOW = 0,
  KVS_XFER_COMPRESSED_4 = 1,
  KVS_XFER_COMPRESSED_128 = 2,
  KVS_XFER_INDEXER = 3,
  KVS_XFER_STATE_4 = 4,
  KVS_XFER_STATE_128 = 5,
  KVS_XFER_INDEX_STATE = 6
} kvs_xfer_pool;

#define KVS_XFER_POOLS 7

/* "window", "compressed_4", "compressed_128", "indexer", "state_4",
 * "state_128", "index_state". */
const char *kvs_xfer_pool_name(kvs_xfer_pool pool);

/* What one side knows of a request: its block table's first ceil(L / P)
 * pages, the window page each is bound to (window[b] for page b; -1 none;
 * NULL: none bound), and its request slot (-1 none). */
typedef struct kvs_xfer_side {
  const int64_t *pages;
  size_t n_pages;
  const int64_t *window;
  int64_t slot;
} kvs_xfer_side;

/* The request's shape: tokens L, reused H, the page P, and the positions
 * whose window rows move (0: P - 1). */
typedef struct kvs_xfer_shape {
  uint64_t tokens;
  uint64_t reuse;
  uint64_t page;
  uint64_t window_tokens;
} kvs_xfer_shape;

/* Full pages the request's positions fill: ceil(L / P). */
uint64_t kvs_xfer_pages(const kvs_xfer_shape *shape);
/* The tail pages moved: [*first, *first + return value). */
uint64_t kvs_xfer_tail(const kvs_xfer_shape *shape, uint64_t *first);

/* One unit: a pool's rows of one layer for one page (or one ring). index
 * is what places it (full page, window page or slot), so two units of
 * consecutive indices lie `step` bytes apart. */
typedef struct kvs_xfer_unit {
  uint8_t pool; /* kvs_xfer_pool */
  bool tail;    /* tail-state rows of a window page */
  uint32_t layer;
  int64_t index;
  uint64_t offset; /* bytes from the carve's start (-1 index: 0) */
  uint64_t bytes;
  uint64_t step;
  uint64_t first_token, end_token;
} kvs_xfer_unit;

/* The units of layers [lo, hi) (within the layout's) for `side`, in travel
 * order (pool, then layer, then page): with out NULL, only counted.
 * Returns how many (at most cap are written). An index the side lacks
 * (a -1 page, window page or slot) gives index -1 and offset 0: the
 * caller refuses it, naming the unit. */
size_t kvs_xfer_units(const kvs_device_layout *layout, const kvs_xfer_shape *shape,
                      const kvs_xfer_side *side, size_t lo, size_t hi, kvs_xfer_unit *out,
                      size_t cap);

/* The bytes of each pool's units for layers [lo, hi), by the rule above,
 * from the layout alone (every unit is there): what kvplan prints. */
void kvs_xfer_pool_bytes(const kvs_device_layout *layout, const kvs_xfer_shape *shape, size_t lo,
                         size_t hi, uint64_t out[KVS_XFER_POOLS]);

/* Which prefill peer sends each of a decode rank's layers [first, end):
 * among the peers holding a layer (peer i holds [peer_first[i],
 * peer_end[i]); usable NULL, or false for a peer that cannot send), the
 * (rank mod their count)-th, peers in the link's order, so decode ranks
 * spread over replicas (tp 2 -> tp 2 pairs rank with rank). Fills
 * [lo[i], hi[i]) per peer (lo == hi: nothing). KVS_OK; KVS_ERR_NOT_FOUND
 * when layer *layer has no usable holder; KVS_ERR_UNSUPPORTED when peer
 * *peer would send layer *layer apart from the range it sends already
 * (a peer's layers must be one range). */
kvs_status kvs_xfer_assign(size_t first, size_t end, size_t rank, size_t n_peers,
                           const size_t *peer_first, const size_t *peer_end, const bool *usable,
                           size_t *lo, size_t *hi, size_t *layer, size_t *peer);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_TRANSFER_ROWS_H */

/* DSV4 KV cost model: pricing the four tiers out of one byte budget.
 *
 * The tiers grow by different laws. The window tier (sliding KV on every
 * layer) and the fp32 compress-state rings are sized in window pages; the
 * compressed tier (one row per `ratio` tokens) and the indexer tier (one
 * key per 4 tokens, CSA layers only) answer for the whole history, so they
 * are anchored to full_token = num_pages * P. The working-set floor is
 * applied once, in window pages, never by inflating swa_ratio: a ratio
 * raised to clear the floor at one anchor overshoots it at every larger
 * one.
 *
 * The page solve searches the exact pool bytes rather than dividing the
 * budget by a per-page cost: at small budgets the window pins at its floor
 * while the anchor shrinks, so a division over-sizes every tier at once
 * and the failure would surface at the first allocation.
 *
 * Names: a function of one type is named for it (kvs_pool_sizes_*,
 * kvs_row_widths_*, kvs_cost_terms_*, kvs_state_rings_*, kvs_kv_dtype_*);
 * every other function of the model is kvs_cost_*.
 *
 * NULL: every kvs_status call refuses a NULL geometry, terms, sizes, text
 * or output with KVS_ERR_INVALID_ARGUMENT naming it, before any work
 * (widths, options and shortfall may be NULL where said);
 * kvs_row_widths_default(NULL) is all-zero widths (which every pricing
 * refuses) and kvs_pool_sizes_num_pages reads 0 for NULL sizes or page 0. */
#ifndef KVS_CORE_COST_MODEL_H
#define KVS_CORE_COST_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/geometry.h"
#include "core/serving_defaults.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_BF16_BYTES 2u  /* window, compressed and indexer rows */
#define KVS_FP32_BYTES 4u  /* compress-state rings */
#define KVS_INT64_BYTES 8u /* one full -> window mapping entry */
/* P: the window page, which is also the sliding window and radix key. */
#define KVS_DEFAULT_WINDOW_PAGE 128u
/* Slack the auto planner keeps above the working set for plan-vs-measured
 * drift (observed around 265 MiB). */
#define KVS_AUTO_KV_SLACK_BYTES (2ull << 30)
/* "No live window state", in the mapping and every location derived from it. */
#define KVS_NO_WINDOW_SLOT (-1)
/* Pass as n_win_pages to size the window from swa_ratio. */
#define KVS_WINDOW_FROM_RATIO UINT64_MAX
/* The window pages a running request holds: the page being written and
 * the one before (a P-token window spans at most two). */
#define KVS_WINDOW_PAGES_PER_REQUEST 2u

/* Where the fp32 compress-state rings live.
 *
 * A ring holds a compressor's carry: the positions of the block it has not
 * emitted yet (8 for ratio 4, whose blocks overlap; 128 for ratio 128). Only
 * a running request has one, and only for its current block. The seed
 * anchors rings to window pages (n_win_pages x ring slots, the state
 * location derived from the window slot); a window page of a request that
 * is not compressing any more still pays for a ring. Per request, a ring
 * is bound to a request slot at admission and freed at completion, and the
 * state location is derived from the live slot and the position:
 *   state_loc = slot * ring + pos % ring,
 * never stored. Rings then cost (max_running + 1) x ring slots, the +1
 * being the dummy slot graph-padded rows write to, whatever the history. */
/* kvs_state_rings is kvshard.h's: KVS_STATE_RINGS_PER_PAGE (the seed's
 * layout, byte for byte), _PER_REQUEST (every ring per request slot),
 * _HCA_PER_REQUEST (ratio-128 rings per request, ratio-4 per page). */

/* "per-page", "per-request", "hca-per-request". */
const char *kvs_state_rings_name(kvs_state_rings rings);
/* The inverse; anything else is KVS_ERR_PARSE listing the three. */
kvs_status kvs_state_rings_parse(const char *text, kvs_state_rings *out, kvs_error *err);
/* Whether the ratio-4 (attention and indexer) / ratio-128 rings are per
 * request under this placement. */
bool kvs_state_rings_csa_per_request(kvs_state_rings rings);
bool kvs_state_rings_hca_per_request(kvs_state_rings rings);

/* Bytes of one row in each tier, and where the rings live. The defaults
 * price every KV tier in bf16, the rings in fp32, per window page (the
 * zero value: per-request rings need a request count these widths do not
 * carry); an engine storing fp8 rows sets its own widths. The serving
 * default, rings per request, is placed by kvs_cost_solve from its
 * max_running. */
typedef struct kvs_row_widths {
  uint64_t kv;        /* window and compressed KV row */
  uint64_t index;     /* indexer key row */
  uint64_t csa_state; /* attention ring row on a ratio-4 layer */
  uint64_t hca_state; /* attention ring row on a ratio-128 layer */
  uint64_t idx_state; /* indexer ring row */
  kvs_state_rings state_rings;
  /* Request slots, the dummy included, when some rings are per request
   * (at least 2: one to bind and the dummy); 0 when every ring is per page. */
  uint64_t n_req_slots;
  /* Tail states (only with the ratio-4 rings per request): every window
   * page also keeps what the next block's overlapping compression reads of
   * the ratio-4 rings (attention and indexer) at the page's end: the first
   * halves of its last KVS_TAIL_STATE_POSITIONS positions' ring rows, in
   * KVS_TAIL_STATE_ROWS rows after the request slots' rings in the same
   * regions. A node with a prefix cache keeps them, so a hit through a
   * retained tail is exact.
   *
   * A ratio-4 ring row is four equal parts, [kv first half | kv second
   * half | score first half | score second half] (fp32): a block's
   * compression reads the first halves of the block before's positions
   * and the second halves of its own. A tail-state row holds two
   * positions, each as [kv first half | score first half]. */
  bool tail_states;
} kvs_row_widths;

/* KVS_TAIL_STATE_POSITIONS (4: the positions before a ratio-4 block
 * boundary whose ring rows the next block's overlapping compression
 * reads, the ratio) and KVS_TAIL_STATE_ROWS (2: the ring-width rows their
 * first halves take in a window page's tail state) are kvshard.h's: an
 * engine writes those rows. */

/* Places the rings in w: `rings`, with a request slot per running request
 * and the dummy when some are per request, and tail states where a prefix
 * cache needs them (per-request ratio-4 rings). The one rule kvplan, the
 * node and the solve place rings by. NULL: nothing. */
void kvs_row_widths_place(kvs_row_widths *w, kvs_state_rings rings, uint64_t max_running,
                          bool prefix_cache);

/* bf16 KV rows (head_dim*2, index_head_dim*2) and fp32 ring rows holding
 * kv|score, (1+overlap)*width wide each: 2*2*head_dim*4 on CSA,
 * 2*head_dim*4 on HCA, 2*2*index_head_dim*4 for the indexer. */
kvs_row_widths kvs_row_widths_default(const kvs_geometry *geometry);

/* How KV rows are stored: kvs_kv_dtype is kvshard.h's (KVS_KV_BF16, every
 * row in bf16: head_dim x 2, index_head_dim x 2; KVS_KV_FP8, the fp8
 * serving layout below). */

/* "bf16", "fp8". */
const char *kvs_kv_dtype_name(kvs_kv_dtype dtype);
/* The inverse; anything else is KVS_ERR_PARSE listing both. */
kvs_status kvs_kv_dtype_parse(const char *text, kvs_kv_dtype *out, kvs_error *err);

/* Quantisation block of the fp8 indexer key: one fp32 scale per block. */
#define KVS_FP8_INDEX_BLOCK 128u
/* Scale bytes at the end of an fp8 KV row. */
#define KVS_FP8_KV_SCALE_BYTES 8u

/* Row widths for a dtype. bf16 is kvs_row_widths_default. fp8 is the
 * layout one public engine serves DSV4 with: a KV row of the no-rope part
 * in fp8 (head_dim - qk_rope bytes), the rope part in bf16 (2 x qk_rope)
 * and 8 bytes of scales, head_dim + qk_rope + 8 in all (584 for DSV4); an
 * indexer row of index_head_dim fp8 bytes plus one fp32 scale per 128
 * (132 for DSV4). The compress-state rings stay fp32 either way. fp8 needs
 * qk_rope_head_dim below head_dim and index_head_dim a multiple of 128,
 * each refused naming the field. */
kvs_status kvs_row_widths_for(const kvs_geometry *geometry, kvs_kv_dtype dtype,
                              uint64_t qk_rope_head_dim, kvs_row_widths *out, kvs_error *err);

/* The layer mix of a contiguous range of layers, with its row widths: all
 * a pool's bytes depend on. A pipeline stage prices its own range. */
typedef struct kvs_cost_terms {
  uint64_t n_layers; /* every layer has a window tier */
  uint64_t n_csa;    /* ratio-4 layers */
  uint64_t n_hca;    /* ratio-128 layers */
  kvs_row_widths widths;
} kvs_cost_terms;

/* Terms for layers [first, end) of the geometry; widths NULL means the
 * defaults. The geometry must validate; the range must be non-empty and
 * inside the used layers. */
kvs_status kvs_cost_terms_make(const kvs_geometry *geometry, size_t first, size_t end,
                               const kvs_row_widths *widths, kvs_cost_terms *out, kvs_error *err);

/* Python's round(): halves go to the even neighbour (0.5 -> 0, 1.5 -> 2).
 * The sizing uses it; the unit costs round up instead. */
double kvs_cost_round_half_even(double value);

/* round_half_even(swa_ratio * count): swa_ratio must be finite and >= 0. */
kvs_status kvs_cost_scale_count(double swa_ratio, uint64_t count, uint64_t *out, kvs_error *err);

/* Window pages reserved for the concurrent working set. Ported from the
 * reference code, not its docstring: 2*(max_running+1) decode transients,
 * plus 3*max_running in radix mode, plus the dummy page. */
kvs_status kvs_cost_reserved_window_pages(uint64_t max_running, bool radix, uint64_t *out,
                                          kvs_error *err);

/* The window pages a pool of n_win_pages (the dummy page included) has
 * left after the dummy and the working-set reserve above, 0 when they
 * take every page: the window pool's own rule (its prefill chunk budget is
 * half of them). */
kvs_status kvs_cost_window_pages_left(uint64_t n_win_pages, uint64_t max_running, bool radix,
                                      uint64_t *out, kvs_error *err);

/* The working-set floor in window pages: one prefill chunk's reach
 * (ceil(max_seq_len / page), capped at 8 pages) plus the reserve. */
kvs_status kvs_cost_window_floor_pages(uint64_t max_seq_len, uint64_t max_running, bool radix,
                                       uint64_t page, uint64_t *out, kvs_error *err);

/* Bytes per P-token page over all tiers and layers, window and rings
 * scaled by swa_ratio. For the affine planner only; never for the final
 * size. */
kvs_status kvs_cost_cache_per_page(const kvs_geometry *geometry, double swa_ratio, uint64_t page,
                                   uint64_t *out, kvs_error *err);

/* Full-anchored bytes per full-history token (compressed, indexer, the
 * mapping), rounded up: independent of swa_ratio. */
kvs_status kvs_cost_kv_unit_bytes(const kvs_geometry *geometry, uint64_t page, uint64_t *out,
                                  kvs_error *err);

/* Window-anchored bytes per window token (window KV on every layer and
 * both rings), rounded up. */
kvs_status kvs_cost_window_unit_bytes(const kvs_geometry *geometry, uint64_t page, uint64_t *out,
                                      kvs_error *err);

/* Pool dimensions for an anchor. Per-layer sizes are derived on demand by
 * kvs_pool_sizes_layer; they follow from these numbers and the ratio. */
typedef struct kvs_pool_sizes {
  uint64_t page; /* P */
  double swa_ratio;
  uint64_t full_token;  /* num_pages * P: the budget anchor */
  uint64_t n_win_pages; /* window pages, the dummy page included */
  uint64_t n_win_slots; /* n_win_pages * P */
  uint64_t n_layers;    /* layers these sizes were built for */
  kvs_state_rings state_rings;
  uint64_t n_req_slots; /* request slots, the dummy included; 0 when rings are per page */
  bool tail_states;     /* kvs_row_widths.tail_states */
} kvs_pool_sizes;

uint64_t kvs_pool_sizes_num_pages(const kvs_pool_sizes *sizes);

/* One compressed layer's tier sizes. */
typedef struct kvs_layer_sizes {
  uint32_t ratio;
  uint64_t ring_size;       /* ring slots per window page */
  uint64_t cmp_blocks;      /* full_token / ratio: full-anchored */
  bool has_indexer;         /* the two idx_* fields are meaningful only then */
  uint64_t idx_blocks;      /* full_token / 4 */
  bool state_per_request;   /* the rings below are per request slot, not per window page */
  uint64_t state_slots;     /* (n_win_pages or n_req_slots) * ring_size, + tail_state_rows */
  uint64_t idx_state_slots; /* (n_win_pages or n_req_slots) * 8, + tail_state_rows */
  /* With tail states, on a ratio-4 layer: n_win_pages * KVS_TAIL_STATE_ROWS
   * rows after the rings in both regions (window page w's at ring_rows +
   * w * KVS_TAIL_STATE_ROWS: position P - 4 + i of the page in row i / 2,
   * half i % 2); 0 otherwise. */
  uint64_t ring_rows; /* the rings' rows: state_slots without the tail states */
  uint64_t tail_state_rows;
} kvs_layer_sizes;

/* Sizes every tier for num_pages. n_win_pages is the window in whole pages
 * (the floor, a pinned window) or KVS_WINDOW_FROM_RATIO for
 * ceil(round_half_even(swa_ratio * full_token) / P); either way capped at
 * num_pages. A non-zero ratio that does not divide P is refused, naming
 * the layer. */
kvs_status kvs_pool_sizes_compute(uint64_t num_pages, const kvs_geometry *geometry,
                                  double swa_ratio, uint64_t page, uint64_t n_win_pages,
                                  kvs_pool_sizes *out, kvs_error *err);

/* The same for a layer range's terms (a pipeline stage). */
kvs_status kvs_pool_sizes_compute_terms(uint64_t num_pages, const kvs_cost_terms *terms,
                                        double swa_ratio, uint64_t page, uint64_t n_win_pages,
                                        kvs_pool_sizes *out, kvs_error *err);

/* Layer `layer`'s sizes. *present is false for a ratio-0 layer, which has
 * a window tier and nothing else (out is then left alone). */
kvs_status kvs_pool_sizes_layer(const kvs_pool_sizes *sizes, const kvs_geometry *geometry,
                                size_t layer, bool *present, kvs_layer_sizes *out, kvs_error *err);

/* The exact bytes of a pool, split by tier. Every allocated row counts:
 * n_scratch rows per compressed and indexer pool, one scratch row per
 * ring, and the mapping's trailing -1 sentinel (counted in scratch). */
typedef struct kvs_pool_breakdown {
  uint64_t window;      /* window KV, every layer */
  uint64_t compressed;  /* compressed KV blocks */
  uint64_t indexer;     /* indexer key blocks */
  uint64_t state;       /* attention compress-state ring slots */
  uint64_t index_state; /* indexer compress-state ring slots */
  uint64_t mapping;     /* full -> window mapping, one int64 per full token */
  uint64_t scratch;     /* scratch rows and the mapping sentinel */
  uint64_t total;       /* the sum of the above */
} kvs_pool_breakdown;

/* Exact pool bytes. The sizes must have been built for this geometry's
 * layer count (the error names both counts). */
kvs_status kvs_pool_sizes_bytes(const kvs_pool_sizes *sizes, const kvs_geometry *geometry,
                                uint64_t n_scratch, uint64_t *out, kvs_error *err);

kvs_status kvs_pool_sizes_bytes_terms(const kvs_pool_sizes *sizes, const kvs_cost_terms *terms,
                                      uint64_t n_scratch, kvs_pool_breakdown *out, kvs_error *err);

/* What one more window page costs a pool of these sizes and terms: its
 * rows on every layer (window KV, and the compress-state rings anchored to
 * window pages; per-request rings cost nothing per page), the difference
 * of the exact bytes at n_win_pages + 1 and n_win_pages. What a window
 * page bound to anything (a running request's, a prefix cache's retained
 * tail) holds on a device of these layers. */
kvs_status kvs_pool_sizes_window_page_bytes(const kvs_pool_sizes *sizes,
                                            const kvs_cost_terms *terms, uint64_t *out,
                                            kvs_error *err);

/* Whether sizes were built for these terms: the same layer count and the
 * same ring placement and request slots (KVS_ERR_INVALID_ARGUMENT naming
 * both otherwise). What prices a pool and what carves it must agree. */
kvs_status kvs_pool_sizes_check_terms(const kvs_pool_sizes *sizes, const kvs_cost_terms *terms,
                                      kvs_error *err);

/* What a device really allocates for a pool: core's exact bytes plus what
 * its carve adds (a control area, alignment padding between regions). A
 * planner that prices footprints plans what a device allocates, byte for
 * byte; with neither control nor padding it is the exact bytes. */
typedef struct kvs_device_footprint {
  uint64_t exact_bytes;   /* kvs_pool_sizes_bytes_terms' total */
  uint64_t control_bytes; /* the carve's control area (fault records, staging) */
  uint64_t padding_bytes; /* every alignment gap */
  uint64_t total_bytes;   /* exact + control + padding */
} kvs_device_footprint;

/* Why a budget was refused: it cannot pay for the minimal pool. */
typedef struct kvs_budget_shortfall {
  uint64_t available_bytes;
  uint64_t needed_bytes; /* what the minimal pool costs */
  uint64_t min_pages;    /* the minimal anchor: max(floor, 2) pages */
  uint64_t floor_win_pages;
} kvs_budget_shortfall;

/* The largest pool whose exact bytes fit: the greatest num_pages with the
 * window at max(floor_win_pages, ceil(swa_ratio * num_pages)). A budget
 * below the minimal pool is KVS_ERR_BUDGET_TOO_SMALL with *shortfall
 * filled (when non-NULL) and *out untouched.
 *
 * This is the seed's primitive, and it prices the seed's layout: the
 * geometry form takes the default row widths (kvs_row_widths_default),
 * whose rings live per window page, because it is not told how many
 * requests run and so cannot size per-request rings. kvplan solve's
 * answer, rings per request and every serving default, is kvs_cost_solve
 * below (DSV4-Flash at 80 GiB: 27,600 pages here, 53,653 there). The
 * _terms form prices whatever placement its terms' widths carry. */
kvs_status kvs_cost_solve_num_pages(uint64_t available_bytes, const kvs_geometry *geometry,
                                    double swa_ratio, uint64_t floor_win_pages, uint64_t page,
                                    uint64_t n_scratch, kvs_pool_sizes *out,
                                    kvs_budget_shortfall *shortfall, kvs_error *err);

kvs_status kvs_cost_solve_num_pages_terms(uint64_t available_bytes, const kvs_cost_terms *terms,
                                          double swa_ratio, uint64_t floor_win_pages, uint64_t page,
                                          uint64_t n_scratch, kvs_pool_sizes *out,
                                          kvs_budget_shortfall *shortfall, kvs_error *err);

/* What kvs_cost_solve sizes for: the inputs of `kvplan solve`, with its
 * defaults (core/serving_defaults.h). A versioned struct (core/options.h):
 * start from KVS_SOLVE_OPTIONS_INIT. */
typedef struct kvs_solve_options {
  size_t size;                 /* sizeof(kvs_solve_options), set by the INIT */
  double swa_ratio;            /* window share of the history (0.125) */
  uint64_t page;               /* window page P (128) */
  uint64_t n_scratch;          /* scratch rows per compressed/indexer pool (1) */
  uint64_t max_seq_len;        /* longest request, for the window floor (1 Mi) */
  uint64_t max_running;        /* concurrent requests (64): the floor and the request slots */
  bool radix;                  /* radix prefix sharing, for the floor (on) */
  uint64_t floor_win_pages;    /* 0: derived from max_seq_len, max_running, radix, page */
  kvs_kv_dtype kv_dtype;       /* row layout (bf16) */
  uint64_t qk_rope_head_dim;   /* the rope part of an fp8 row; unused for bf16 */
  kvs_state_rings state_rings; /* per request (max_running + 1 slots), as kvplan */
} kvs_solve_options;

#define KVS_SOLVE_OPTIONS_INIT                                                   \
  {                                                                              \
    sizeof(kvs_solve_options), KVS_DEFAULT_SWA_RATIO, KVS_DEFAULT_WINDOW_PAGE,   \
        KVS_DEFAULT_N_SCRATCH, KVS_DEFAULT_MAX_SEQ_LEN, KVS_DEFAULT_MAX_RUNNING, \
        KVS_DEFAULT_RADIX, 0, KVS_KV_BF16, 0, KVS_STATE_RINGS_PER_REQUEST        \
  }

/* The planning entry point for one device: the largest pool `kvplan
 * solve` sizes for the same budget, geometry and options, byte for byte
 * (kvplan solve calls it). The row widths come from kv_dtype, the rings
 * are placed by state_rings with max_running + 1 request slots, the
 * window floor is floor_win_pages or derived, then the exact solve above.
 * options NULL: the defaults. *out and *shortfall as for
 * kvs_cost_solve_num_pages; on any failure *out is untouched. */
kvs_status kvs_cost_solve(uint64_t available_bytes, const kvs_geometry *geometry,
                          const kvs_solve_options *options, kvs_pool_sizes *out,
                          kvs_budget_shortfall *shortfall, kvs_error *err);

/* The cost terms kvs_cost_solve prices the whole stack with for these
 * options (widths for the dtype, rings placed), e.g. to split the solved
 * pool's bytes by tier with kvs_pool_sizes_bytes_terms. */
kvs_status kvs_cost_solve_terms(const kvs_geometry *geometry, const kvs_solve_options *options,
                                kvs_cost_terms *out, kvs_error *err);

/* The affine (per page, fixed, reserve) price the auto planner splits
 * memory with. Conservative at shipped ratios; the pool itself is always
 * re-solved byte-exactly afterwards. */
typedef struct kvs_auto_cost {
  uint64_t cache_per_page;     /* cache_per_page + P * 8 (the mapping) */
  uint64_t fixed_cache_size;   /* intercept through the minimal pool, >= 0 */
  uint64_t min_reserve_tokens; /* (minimal pages + slack pages) * P */
} kvs_auto_cost;

kvs_status kvs_cost_auto_model(const kvs_geometry *geometry, double swa_ratio,
                               uint64_t floor_win_pages, uint64_t page, uint64_t n_scratch,
                               kvs_auto_cost *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_COST_MODEL_H */

/* Exact split of a model's layers into pipeline stages.
 *
 * Every device of the node shares one page count (page ids are common),
 * so the node holds as many pages as its tightest device allows. A stage
 * holds a contiguous layer range [first, end); each of its devices pays,
 * byte for byte as core/ prices it, for that range's window, compressed,
 * indexer and ring tiers plus its own full -> window mapping and scratch,
 * and, when the request prices footprints, what its carve adds (the device
 * tables' control area and alignment padding), so the plan is what the
 * device allocates.
 * The split maximises the common page count under the stages' budgets.
 *
 * Why the search is exact: a device's pool bytes never decrease when its
 * range gains a layer or the page count grows (every tier is a sum of
 * non-negative per-layer terms, and the window grows with the anchor).
 * So for a page count N and a slack h, stage s starting at layer a can
 * end anywhere in (a, R_s(a)], where R_s(a) is the last end whose bytes
 * fit budget_s - h, found by bisection; the ends reachable after s stages
 * are a union of such intervals, swept in O(L) per stage. Whether the
 * last stage can end at L is monotone in N and in h, so bisection on N
 * finds the largest feasible page count, then bisection on h, at that N,
 * the split whose smallest headroom is largest (the tie-break); among
 * those, each stage's layer count is the closest to its share of the
 * budgets. Cost: O(pp * L * log L) byte evaluations per probe, and
 * log2(B / 8P) probes on N plus log2(B) on h, B the smallest budget.
 *
 * NULL: every call refuses a NULL request, request->geometry (and, to
 * solve, request->stage_budgets) or output with KVS_ERR_INVALID_ARGUMENT
 * naming it; the optional outputs may be NULL where said. */
#ifndef KVS_PLAN_STAGE_SPLIT_H
#define KVS_PLAN_STAGE_SPLIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pipeline stages a split holds at most. */
#define KVS_MAX_STAGES 64

/* Prices what a device holding a layer range allocates at given sizes
 * (exact is core's breakdown of them): a device's carve, with its control
 * area and alignment padding. It must grow with the range and the page
 * count, as the exact bytes do, for the search to stay exact. */
typedef kvs_status (*kvs_footprint_fn)(void *ctx, const kvs_cost_terms *terms,
                                       const kvs_pool_sizes *sizes, const kvs_pool_breakdown *exact,
                                       kvs_device_footprint *out, kvs_error *err);

typedef struct kvs_split_request {
  const kvs_geometry *geometry;
  const kvs_row_widths *widths; /* NULL: kvs_row_widths_default */
  double swa_ratio;
  uint64_t page;
  uint64_t floor_win_pages; /* the window working-set floor, in pages */
  uint64_t n_scratch;       /* scratch rows per compressed/indexer pool */
  size_t n_stages;          /* 1..min(layers, KVS_MAX_STAGES) */
  /* Per stage, the budget of its tightest device: every device of a
   * stage holds the same bytes (tensor-parallel ranks replicate the
   * single DSV4 KV head). */
  const uint64_t *stage_budgets;
  /* Optional: what a device allocates (kvs_footprint_fn); NULL prices
   * core's exact bytes alone. Budgets are then held to the footprint. */
  kvs_footprint_fn footprint;
  void *footprint_ctx;
  /* Optional: one entry per layer, the bytes each device of the stage
   * holding that layer spends on it outside the pool (its share of the
   * layer's weights). A stage's budget then covers its layers' weights and
   * its pool together, so the split moves layers off a stage that also
   * holds heavy ones (the embedding is on the first layer's stage, the
   * output head on the last's). NULL: none. */
  const uint64_t *layer_weight_bytes;
} kvs_split_request;

typedef struct kvs_stage_plan {
  size_t first, end;     /* layers [first, end) */
  uint64_t budget;       /* weights and pool of each device */
  uint64_t weight_bytes; /* of it, the range's layer weights */
  kvs_cost_terms terms;
  kvs_pool_sizes sizes;        /* at the common page count, for this range */
  kvs_pool_breakdown bytes;    /* exact, kvs_pool_sizes_bytes_terms */
  kvs_device_footprint device; /* what a device of the stage allocates */
  /* The most pages this stage could hold alone with this range; the
   * stages whose max_pages equals the common count are the limit. */
  uint64_t max_pages;
} kvs_stage_plan;

typedef struct kvs_split {
  uint64_t num_pages;   /* the common page count */
  uint64_t full_token;  /* num_pages * page: tokens of history */
  uint64_t n_win_pages; /* the window every device sizes, in pages */
  size_t n_stages;
  kvs_stage_plan stages[KVS_MAX_STAGES];
} kvs_split;

/* Why no split fits: the minimal pool (max(floor, 2) pages) does not fit
 * every stage under any split. Filled from the split that needs the
 * smallest uniform budget increase; stage is the one that needs it. */
typedef struct kvs_split_shortfall {
  size_t stage;
  size_t first, end;
  uint64_t needed_bytes;    /* that stage's footprint at the minimal pool */
  uint64_t available_bytes; /* its budget */
  uint64_t min_pages;
  uint64_t floor_win_pages;
} kvs_split_shortfall;

/* Finds the split with the largest common page count (ties: the one whose
 * smallest stage headroom is largest, then layer counts closest to the
 * stages' shares of the budgets). KVS_ERR_BUDGET_TOO_SMALL fills *shortfall when non-NULL;
 * more stages than layers (or KVS_MAX_STAGES) is KVS_ERR_INVALID_ARGUMENT.
 * *out is written only on success. */
kvs_status kvs_split_solve(const kvs_split_request *request, kvs_split *out,
                           kvs_split_shortfall *shortfall, kvs_error *err);

/* Whether kvs_split_solve's split of the request would hold num_pages
 * pages (*out: its num_pages >= num_pages; false where it finds no split),
 * without solving: one feasibility sweep at the minimal pool and one at
 * num_pages, where the solve bisects the page count and then the headroom
 * and prices each stage again. The answer is the solve's because
 * feasibility is monotone in the page count (above). For a caller that
 * asks only whether budgets hold a demand (kvplan fit's bisections). */
kvs_status kvs_split_holds(const kvs_split_request *request, uint64_t num_pages, bool *out,
                           kvs_error *err);

/* The window, in pages, every device sizes at num_pages: the solve's
 * max(floor, ceil(round_half_even(swa_ratio * num_pages * P) / P)),
 * capped at num_pages. */
kvs_status kvs_split_window_pages(const kvs_split_request *request, uint64_t num_pages,
                                  uint64_t *out, kvs_error *err);

/* Exact sizes and bytes of one device holding layers [first, end) at
 * num_pages under the request's settings (its stage fields unused), and
 * its footprint (device may be NULL). */
kvs_status kvs_split_range_bytes(const kvs_split_request *request, size_t first, size_t end,
                                 uint64_t num_pages, kvs_pool_sizes *sizes,
                                 kvs_pool_breakdown *bytes, kvs_device_footprint *device,
                                 kvs_error *err);

/* The most pages one device holding layers [first, end) fits alone under
 * budget (its footprint, when the request prices one, and the range's
 * layer weights, when it gives them): *out is 0 when not even the minimal
 * pool (max(floor, 2) pages) fits. */
/* The range's layer weights (0 without them); KVS_ERR_OVERFLOW past 2^64. */
kvs_status kvs_split_range_weights(const kvs_split_request *request, size_t first, size_t end,
                                   uint64_t *out, kvs_error *err);

kvs_status kvs_split_range_max_pages(const kvs_split_request *request, size_t first, size_t end,
                                     uint64_t budget, uint64_t *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_STAGE_SPLIT_H */

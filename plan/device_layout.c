#include "plan/device_layout.h"

#include <stdbool.h>
#include <string.h>

#include "core/checked.h"
#include "core/options.h"

/* Overflow folds into a sticky flag (core/checked.h), so a whole layout is
 * checked once. */
static uint64_t mul(uint64_t a, uint64_t b, bool *of) { return kvs_mul(a, b, of); }
static uint64_t add(uint64_t a, uint64_t b, bool *of) { return kvs_add(a, b, of); }

/* Rounds up to a power-of-two alignment. */
static uint64_t align_up(uint64_t x, uint64_t alignment, bool *of) {
  return add(x, alignment - 1, of) & ~(alignment - 1);
}

const char *kvs_device_tier_name(kvs_device_tier tier) {
  switch (tier) {
    case KVS_DEVICE_TIER_MAPPING:
      return "mapping";
    case KVS_DEVICE_TIER_WINDOW:
      return "window";
    case KVS_DEVICE_TIER_COMPRESSED:
      return "compressed";
    case KVS_DEVICE_TIER_INDEXER:
      return "indexer";
    case KVS_DEVICE_TIER_STATE:
      return "state";
    case KVS_DEVICE_TIER_INDEX_STATE:
      return "index_state";
  }
  return "unknown tier";
}

kvs_row_widths kvs_row_widths_fp8(const kvs_geometry *geometry) {
  kvs_row_widths none = {0, 0, 0, 0, 0, KVS_STATE_RINGS_PER_PAGE, 0, false};
  if (geometry == NULL) return none; /* zero widths: every pricing refuses them */
  kvs_row_widths w = kvs_row_widths_default(geometry);
  w.kv = KVS_FP8_KV_ROW_BYTES;
  w.index = KVS_FP8_INDEX_ROW_BYTES;
  return w;
}

kvs_status kvs_device_layout_check_tables(const kvs_device_layout *layout, kvs_error *err) {
  if (layout == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: layout is NULL", __func__);
  }
  uint64_t a = layout->options.alignment;
  if (a < KVS_DEVICE_MIN_TABLE_ALIGNMENT) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "options.alignment %llu: tables are carved with every region on at least "
                         "%u bytes (what cudaMalloc gives its base and TMA and coalesced loads "
                         "want); alignment below that prices arithmetic only",
                         (unsigned long long)a, KVS_DEVICE_MIN_TABLE_ALIGNMENT);
  }
  return KVS_OK;
}

kvs_table_dims kvs_device_layout_dims(const kvs_device_layout *layout) {
  kvs_table_dims dims = {0, 0, 0};
  if (layout == NULL) return dims; /* page 0: kvs_table_dims_check refuses it */
  dims.page = layout->sizes.page;
  dims.full_token = layout->sizes.full_token;
  dims.n_win_slots = layout->sizes.n_win_slots;
  return dims;
}

/* Span indices, in allocation order. */
enum {
  SPAN_MAPPING = 0,
  SPAN_WINDOW = 1,
  SPAN_CMP_CSA = 2,
  SPAN_CMP_HCA = 3,
  SPAN_INDEXER = 4,
  SPAN_STATE_CSA = 5,
  SPAN_STATE_HCA = 6,
  SPAN_INDEX_STATE = 7
};

/* The caller's options (NULL: the defaults; an older caller's shorter
 * struct: defaults for the rest) into *adopted, checked; *options then
 * points at it. */
static kvs_status adopt_options(const kvs_device_layout_options **options,
                                kvs_device_layout_options *adopted, kvs_error *err) {
  static const kvs_device_layout_options defaults = KVS_DEVICE_LAYOUT_OPTIONS_INIT;
  kvs_status status = kvs_options_adopt(*options, &defaults, sizeof defaults,
                                        "KVS_DEVICE_LAYOUT_OPTIONS_INIT", adopted, err);
  if (status != KVS_OK) return status;
  *options = adopted;
  uint64_t a = adopted->alignment;
  if (a == 0 || (a & (a - 1)) != 0 || a > (1ull << 30)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "alignment %llu must be a power of two between 1 and 2^30 bytes",
                         (unsigned long long)a);
  }
  if (adopted->journal_capacity > UINT32_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "journal_capacity %llu exceeds 2^32 - 1 entries",
                         (unsigned long long)adopted->journal_capacity);
  }
  return KVS_OK;
}

static void set_span(kvs_device_span *s, kvs_device_tier tier, uint32_t ratio, uint64_t count,
                     uint64_t rows, uint64_t scratch_rows, uint64_t row_bytes, bool *of) {
  s->tier = tier;
  s->ratio = ratio;
  s->count = count;
  s->rows = rows;
  s->scratch_rows = scratch_rows;
  s->row_bytes = row_bytes;
  s->bytes = mul(add(rows, scratch_rows, of), row_bytes, of);
  s->page_rows = 0;
  s->page_bytes = 0;
  s->extent = s->bytes;
}

uint64_t kvs_device_page_quantum(kvs_device_tier tier, uint64_t row_bytes) {
  /* Rows of whole 16-byte units are stored as rows: no page structure. */
  if (row_bytes % KVS_DEVICE_TMA_BYTES == 0) return 0;
  switch (tier) {
    case KVS_DEVICE_TIER_WINDOW:
    case KVS_DEVICE_TIER_COMPRESSED:
      /* The fp8 row: its payload (what FlashMLA's TMA loads, at that
       * stride) and the scales a page keeps after all its payloads. */
      return row_bytes - row_bytes % KVS_DEVICE_TMA_BYTES;
    case KVS_DEVICE_TIER_INDEXER:
      /* The fp8 indexer row: DeepGEMM's page of keys then scales, whose
       * stride a TMA tensor map steps. */
      return KVS_DEVICE_TMA_BYTES;
    default:
      return 0;
  }
}

/* Groups a KV span's rows into pages of page_rows (the region's rows, its
 * scratch rows included, in whole pages), each page_bytes apart: its rows'
 * bytes rounded up to the tier's quantum. */
static void page_span(kvs_device_span *s, uint64_t page_rows, bool *of) {
  uint64_t quantum = kvs_device_page_quantum(s->tier, s->row_bytes);
  if (page_rows == 0 || quantum == 0) return;
  uint64_t rows = add(s->rows, s->scratch_rows, of);
  uint64_t pages = rows / page_rows + (rows % page_rows != 0);
  uint64_t raw = mul(page_rows, s->row_bytes, of);
  s->page_rows = page_rows;
  s->page_bytes = mul(raw / quantum + (raw % quantum != 0), quantum, of);
  s->extent = mul(pages, s->page_bytes, of);
}

/* What the carve decides: the spans in allocation order, the control area
 * and where the tiers start and end. */
typedef struct carved {
  kvs_device_span spans[KVS_DEVICE_SPAN_COUNT];
  uint64_t control_offset, faults_offset, journal_offset, control_bytes;
  uint64_t tiers_offset, tiers_end, total_bytes;
} carved;

/* The carve itself, which depends only on the layer mix (terms), the sizes
 * and the options, so pricing a layout needs no per-layer tables. Also
 * sums the rows it priced per tier (*sum). Overflow folds into *of. */
static void carve(const kvs_cost_terms *terms, const kvs_pool_sizes *sizes,
                  const kvs_device_layout_options *options, carved *l, kvs_pool_breakdown *sum,
                  bool *of) {
  const kvs_row_widths *w = &terms->widths;
  uint64_t ft = sizes->full_token;
  /* Ring units: window pages, or request slots for a ring kind placed per
   * request (kvs_layer_sizes.state_slots / idx_state_slots). */
  uint64_t csa_units =
      kvs_state_rings_csa_per_request(sizes->state_rings) ? sizes->n_req_slots : sizes->n_win_pages;
  uint64_t hca_units =
      kvs_state_rings_hca_per_request(sizes->state_rings) ? sizes->n_req_slots : sizes->n_win_pages;
  /* Tail states: rows after the ratio-4 rings, per window page. */
  uint64_t csa_rows = mul(csa_units, KVS_RING_SLOTS_CSA, of);
  if (sizes->tail_states) {
    csa_rows = add(csa_rows, mul(sizes->n_win_pages, KVS_TAIL_STATE_ROWS, of), of);
  }
  kvs_device_span *s = l->spans;
  set_span(&s[SPAN_MAPPING], KVS_DEVICE_TIER_MAPPING, 0, 1, ft, 1, KVS_INT64_BYTES, of);
  set_span(&s[SPAN_WINDOW], KVS_DEVICE_TIER_WINDOW, 0, terms->n_layers, sizes->n_win_slots, 0,
           w->kv, of);
  set_span(&s[SPAN_CMP_CSA], KVS_DEVICE_TIER_COMPRESSED, KVS_CSA_RATIO, terms->n_csa,
           ft / KVS_CSA_RATIO, options->n_scratch, w->kv, of);
  set_span(&s[SPAN_CMP_HCA], KVS_DEVICE_TIER_COMPRESSED, KVS_HCA_RATIO, terms->n_hca,
           ft / KVS_HCA_RATIO, options->n_scratch, w->kv, of);
  set_span(&s[SPAN_INDEXER], KVS_DEVICE_TIER_INDEXER, KVS_CSA_RATIO, terms->n_csa,
           ft / KVS_CSA_RATIO, options->n_scratch, w->index, of);
  set_span(&s[SPAN_STATE_CSA], KVS_DEVICE_TIER_STATE, KVS_CSA_RATIO, terms->n_csa, csa_rows, 1,
           w->csa_state, of);
  set_span(&s[SPAN_STATE_HCA], KVS_DEVICE_TIER_STATE, KVS_HCA_RATIO, terms->n_hca,
           mul(hca_units, KVS_RING_SLOTS_HCA, of), 1, w->hca_state, of);
  set_span(&s[SPAN_INDEX_STATE], KVS_DEVICE_TIER_INDEX_STATE, KVS_CSA_RATIO, terms->n_csa, csa_rows,
           1, w->idx_state, of);
  /* Real tables (any alignment but the arithmetic 1) carve the KV tiers in
   * the pages an engine's kernels read: a window page holds P rows, a
   * compressed page P / ratio, an indexer page P / 4. */
  if (options->alignment > 1) {
    uint64_t page = sizes->page;
    page_span(&s[SPAN_WINDOW], page, of);
    page_span(&s[SPAN_CMP_CSA], page / KVS_CSA_RATIO, of);
    page_span(&s[SPAN_CMP_HCA], page / KVS_HCA_RATIO, of);
    page_span(&s[SPAN_INDEXER], page / KVS_CSA_RATIO, of);
  }

  /* Control first: its fault records need 8-byte atomics, which an offset
   * after ragged tiers at alignment 1 would not give. It is a multiple of
   * 16 bytes, so the mapping after it is aligned whatever the option. */
  uint64_t a = options->alignment;
  l->control_offset = 0;
  l->faults_offset = 0;
  l->journal_offset = sizeof(kvs_device_faults);
  l->control_bytes =
      add(l->journal_offset, mul(options->journal_capacity, sizeof(kvs_journal_entry), of), of);
  l->tiers_offset = align_up(l->control_bytes, a, of);

  /* Each region starts on the alignment; the last of a kind needs no tail
   * padding, the next kind aligns its own start. */
  uint64_t cursor = l->tiers_offset;
  memset(sum, 0, sizeof *sum);
  for (int i = 0; i < KVS_DEVICE_SPAN_COUNT; i++) {
    kvs_device_span *span = &s[i];
    span->stride = align_up(span->extent, a, of);
    span->offset = align_up(cursor, a, of);
    if (span->count > 0) {
      cursor = add(add(span->offset, mul(span->count - 1, span->stride, of), of), span->extent, of);
    }
    uint64_t data = mul(mul(span->count, span->rows, of), span->row_bytes, of);
    uint64_t scratch = mul(mul(span->count, span->scratch_rows, of), span->row_bytes, of);
    sum->scratch = add(sum->scratch, scratch, of);
    switch (span->tier) {
      case KVS_DEVICE_TIER_MAPPING:
        sum->mapping = add(sum->mapping, data, of);
        break;
      case KVS_DEVICE_TIER_WINDOW:
        sum->window = add(sum->window, data, of);
        break;
      case KVS_DEVICE_TIER_COMPRESSED:
        sum->compressed = add(sum->compressed, data, of);
        break;
      case KVS_DEVICE_TIER_INDEXER:
        sum->indexer = add(sum->indexer, data, of);
        break;
      case KVS_DEVICE_TIER_STATE:
        sum->state = add(sum->state, data, of);
        break;
      case KVS_DEVICE_TIER_INDEX_STATE:
        sum->index_state = add(sum->index_state, data, of);
        break;
    }
  }
  sum->total =
      add(add(add(sum->window, sum->compressed, of), add(sum->indexer, sum->state, of), of),
          add(add(sum->index_state, sum->mapping, of), sum->scratch, of), of);
  l->tiers_end = cursor;
  l->total_bytes = cursor;
}

/* What the carve needs of the sizes: whole pages and ratios that divide P. */
static kvs_status check_sizes(const kvs_cost_terms *terms, const kvs_pool_sizes *sizes,
                              kvs_error *err) {
  kvs_table_dims dims = {sizes->page, sizes->full_token, sizes->n_win_slots};
  kvs_status status = kvs_table_dims_check(&dims, err);
  if (status != KVS_OK) return status;
  if ((terms->n_csa > 0 && sizes->page % KVS_CSA_RATIO != 0) ||
      (terms->n_hca > 0 && sizes->page % KVS_HCA_RATIO != 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "P=%llu must be divisible by every compress ratio of the device's layers "
                         "(%llu ratio-4, %llu ratio-128)",
                         (unsigned long long)sizes->page, (unsigned long long)terms->n_csa,
                         (unsigned long long)terms->n_hca);
  }
  /* The carve reads the placement from the sizes, core prices it from the
   * terms' widths: they must be one placement. */
  return kvs_pool_sizes_check_terms(sizes, terms, err);
}

static kvs_status overflowed(const kvs_pool_sizes *sizes, uint64_t alignment, kvs_error *err) {
  return kvs_error_set(err, KVS_ERR_OVERFLOW,
                       "a %llu-token pool at alignment %llu exceeds 64 bits of bytes",
                       (unsigned long long)sizes->full_token, (unsigned long long)alignment);
}

kvs_status kvs_device_layout_footprint(const kvs_cost_terms *terms, const kvs_pool_sizes *sizes,
                                       const kvs_device_layout_options *options,
                                       kvs_device_footprint *out, kvs_error *err) {
  kvs_device_layout_options adopted;
  if (terms == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: terms is NULL", __func__);
  }
  if (sizes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: sizes is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status;
  if ((status = adopt_options(&options, &adopted, err)) ||
      (status = check_sizes(terms, sizes, err))) {
    return status;
  }
  carved c;
  kvs_pool_breakdown sum;
  bool of = false;
  carve(terms, sizes, options, &c, &sum, &of);
  kvs_device_footprint f = {sum.total, c.control_bytes, 0, c.total_bytes};
  if (of) return overflowed(sizes, options->alignment, err);
  f.padding_bytes = f.total_bytes - f.exact_bytes - f.control_bytes;
  *out = f;
  return KVS_OK;
}

kvs_status kvs_device_layout_build(const kvs_geometry *geometry, size_t first, size_t end,
                                   const kvs_row_widths *widths, const kvs_pool_sizes *sizes,
                                   const kvs_device_layout_options *options, kvs_device_layout *out,
                                   kvs_error *err) {
  kvs_device_layout_options adopted;
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (sizes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: sizes is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status;
  kvs_cost_terms terms;
  kvs_pool_breakdown exact;
  if ((status = adopt_options(&options, &adopted, err)) ||
      (status = kvs_cost_terms_make(geometry, first, end, widths, &terms, err)) ||
      (status = kvs_pool_sizes_bytes_terms(sizes, &terms, options->n_scratch, &exact, err)) ||
      (status = check_sizes(&terms, sizes, err))) {
    return status;
  }

  /* Built aside and copied out whole, so *out is untouched on failure. */
  kvs_device_layout l;
  memset(&l, 0, sizeof l);
  l.options = *options;
  l.sizes = *sizes;
  l.terms = terms;
  l.first_layer = first;
  l.end_layer = end;
  uint32_t n_csa = 0, n_hca = 0;
  for (size_t i = 0; i < end - first; i++) {
    uint32_t ratio = geometry->compress_ratios[first + i];
    l.layer_ratio[i] = ratio;
    l.layer_rank[i] = ratio == KVS_CSA_RATIO   ? n_csa++
                      : ratio == KVS_HCA_RATIO ? n_hca++
                                               : (uint32_t)i;
  }
  bool of = false;
  kvs_pool_breakdown sum;
  carved c;
  carve(&terms, sizes, options, &c, &sum, &of);
  if (of) return overflowed(sizes, options->alignment, err);
  memcpy(l.spans, c.spans, sizeof l.spans);
  l.control_offset = c.control_offset;
  l.faults_offset = c.faults_offset;
  l.journal_offset = c.journal_offset;
  l.control_bytes = c.control_bytes;
  l.tiers_offset = c.tiers_offset;
  l.tiers_end = c.tiers_end;
  l.total_bytes = c.total_bytes;
  /* The carve must price exactly what core/ priced, tier by tier. */
  if (memcmp(&sum, &exact, sizeof sum) != 0) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "device layout rows (%llu bytes) disagree with core's exact pool bytes "
                         "(%llu)",
                         (unsigned long long)sum.total, (unsigned long long)exact.total);
  }
  l.exact = exact;
  l.padding_bytes = l.total_bytes - exact.total - l.control_bytes;
  *out = l;
  return KVS_OK;
}

kvs_status kvs_device_layout_region(const kvs_device_layout *layout, kvs_device_tier tier,
                                    size_t layer, kvs_device_region *out, kvs_error *err) {
  if (layout == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: layout is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  int span = -1;
  uint64_t rank = 0;
  if (tier == KVS_DEVICE_TIER_MAPPING) {
    span = SPAN_MAPPING;
  } else {
    if (layer < layout->first_layer || layer >= layout->end_layer) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "layer %zu is outside this device's layers [%zu, %zu)", layer,
                           layout->first_layer, layout->end_layer);
    }
    size_t i = layer - layout->first_layer;
    uint32_t ratio = layout->layer_ratio[i];
    rank = layout->layer_rank[i];
    bool csa = ratio == KVS_CSA_RATIO, hca = ratio == KVS_HCA_RATIO;
    switch (tier) {
      case KVS_DEVICE_TIER_WINDOW:
        span = SPAN_WINDOW, rank = i;
        break;
      case KVS_DEVICE_TIER_COMPRESSED:
        span = csa ? SPAN_CMP_CSA : hca ? SPAN_CMP_HCA : -1;
        break;
      case KVS_DEVICE_TIER_INDEXER:
        span = csa ? SPAN_INDEXER : -1;
        break;
      case KVS_DEVICE_TIER_STATE:
        span = csa ? SPAN_STATE_CSA : hca ? SPAN_STATE_HCA : -1;
        break;
      case KVS_DEVICE_TIER_INDEX_STATE:
        span = csa ? SPAN_INDEX_STATE : -1;
        break;
      default:
        return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tier %d is not a device tier",
                             (int)tier);
    }
    if (span < 0) {
      return kvs_error_set(err, KVS_ERR_NOT_FOUND, "layer %zu (ratio %u) has no %s tier: %s", layer,
                           ratio, kvs_device_tier_name(tier),
                           tier == KVS_DEVICE_TIER_COMPRESSED || tier == KVS_DEVICE_TIER_STATE
                               ? "a window-only layer keeps the window tier alone"
                               : "only ratio-4 layers run the indexer");
    }
  }
  const kvs_device_span *s = &layout->spans[span];
  kvs_device_region r;
  r.tier = s->tier;
  r.offset = s->offset + rank * s->stride;
  r.bytes = s->bytes;
  r.rows = s->rows;
  r.scratch_rows = s->scratch_rows;
  r.row_bytes = s->row_bytes;
  r.page_rows = s->page_rows;
  r.page_bytes = s->page_bytes;
  r.extent = s->extent;
  *out = r;
  return KVS_OK;
}

/* ---- the padded solve ---- */

typedef struct solve_ctx {
  const kvs_geometry *geometry;
  size_t first, end;
  const kvs_row_widths *widths;
  const kvs_cost_terms *terms;
  double swa_ratio;
  uint64_t floor_win_pages;
  uint64_t page;
  const kvs_device_layout_options *options;
} solve_ctx;

/* The layout of an n-page pool under the solve's window rule. */
static kvs_status layout_at(const solve_ctx *c, uint64_t num_pages, kvs_device_layout *out,
                            kvs_error *err) {
  kvs_pool_sizes sizes;
  kvs_status status = kvs_pool_sizes_compute_terms(num_pages, c->terms, c->swa_ratio, c->page,
                                                   KVS_WINDOW_FROM_RATIO, &sizes, err);
  if (status != KVS_OK) return status;
  uint64_t win = sizes.n_win_pages; /* min(ceil(ratio share), num_pages) */
  if (win < c->floor_win_pages) win = c->floor_win_pages;
  if (win > num_pages) win = num_pages;
  if ((status = kvs_pool_sizes_compute_terms(num_pages, c->terms, c->swa_ratio, c->page, win,
                                             &sizes, err))) {
    return status;
  }
  return kvs_device_layout_build(c->geometry, c->first, c->end, c->widths, &sizes, c->options, out,
                                 err);
}

/* Whether the n-page layout fits; false also when it cannot be priced. */
static bool fits_at(const solve_ctx *c, uint64_t num_pages, uint64_t budget,
                    kvs_device_layout *scratch) {
  return layout_at(c, num_pages, scratch, NULL) == KVS_OK && scratch->total_bytes <= budget;
}

kvs_status kvs_device_plan_solve(uint64_t budget_bytes, const kvs_geometry *geometry, size_t first,
                                 size_t end, const kvs_row_widths *widths, double swa_ratio,
                                 uint64_t floor_win_pages, uint64_t page,
                                 const kvs_device_layout_options *options, kvs_device_layout *out,
                                 kvs_budget_shortfall *shortfall, kvs_error *err) {
  kvs_device_layout_options adopted;
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status;
  kvs_cost_terms terms;
  if ((status = adopt_options(&options, &adopted, err)) ||
      (status = kvs_cost_terms_make(geometry, first, end, widths, &terms, err))) {
    return status;
  }
  solve_ctx c = {geometry, first, end, widths, &terms, swa_ratio, floor_win_pages, page, options};
  kvs_device_layout candidate;
  uint64_t lo = floor_win_pages > 2 ? floor_win_pages : 2;
  /* The minimal pool: priced for the error even when it does not fit. */
  if ((status = layout_at(&c, lo, &candidate, err))) return status;
  if (candidate.total_bytes > budget_bytes) {
    kvs_budget_shortfall s = {budget_bytes, candidate.total_bytes, lo, floor_win_pages};
    if (shortfall != NULL) *shortfall = s;
    return kvs_error_set(
        err, KVS_ERR_BUDGET_TOO_SMALL,
        "device budget %llu bytes cannot fit the minimal pool (%llu pages incl. "
        "the window working-set floor %llu, needing %llu bytes with %llu of "
        "control and %llu of alignment padding); give it a larger budget or "
        "lower max_running/max_seq_len",
        (unsigned long long)budget_bytes, (unsigned long long)lo,
        (unsigned long long)floor_win_pages, (unsigned long long)candidate.total_bytes,
        (unsigned long long)candidate.control_bytes, (unsigned long long)candidate.padding_bytes);
  }
  /* Core's exact solve of what is left after the control area bounds the
   * answer from above: padding only ever adds bytes, and the padded total
   * grows with the page count, so a bisection below it finds the largest
   * padded pool that fits. */
  kvs_pool_sizes upper;
  uint64_t hi;
  uint64_t after_control = budget_bytes - candidate.tiers_offset;
  if (kvs_cost_solve_num_pages_terms(after_control, &terms, swa_ratio, floor_win_pages, page,
                                     options->n_scratch, &upper, NULL, NULL) == KVS_OK) {
    hi = kvs_pool_sizes_num_pages(&upper) + 1;
  } else {
    hi = lo + 1; /* only the minimal pool fits */
  }
  if (hi <= lo) hi = lo + 1;
  kvs_device_layout best = candidate;
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (fits_at(&c, mid, budget_bytes, &candidate)) {
      lo = mid;
      best = candidate;
    } else {
      hi = mid;
    }
  }
  *out = best;
  return KVS_OK;
}

kvs_status kvs_device_faults_check(const kvs_device_faults *faults, kvs_error *err) {
  if (faults == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: faults is NULL", __func__);
  }
  const struct {
    const char *kernel;
    const char *item;
    const kvs_batch_fault *record;
  } records[] = {
      {"apply_journal", "journal entries naming a page outside the table", &faults->apply_journal},
      {"translate", "locs past the sentinel row", &faults->translate},
      {"state_locs", "window slots past the window pool or request slots past the request slots",
       &faults->state_locs},
      {"ring_ctx", "requests whose window reaches past their block table or the table",
       &faults->ring_ctx},
  };
  for (size_t i = 0; i < sizeof records / sizeof records[0]; i++) {
    const kvs_batch_fault *f = records[i].record;
    if (f->count == 0) continue;
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "%s faulted on %llu %s; the first at batch index %llu (those read -1)",
                         records[i].kernel, (unsigned long long)f->count, records[i].item,
                         (unsigned long long)f->first_index);
  }
  return KVS_OK;
}

#include "core/cost_model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/checked.h"
#include "core/options.h"

#define RING_CSA 8u   /* ring slots per window page on ratio-4 layers */
#define RING_HCA 128u /* ... on ratio-128 layers */

static kvs_status check_page(uint64_t page, kvs_error *err) {
  if (page == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "page is 0; a window page holds at least one position");
  }
  return KVS_OK;
}

static kvs_status check_swa_ratio(double swa_ratio, kvs_error *err) {
  if (!isfinite(swa_ratio) || swa_ratio < 0.0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "swa_ratio must be a finite, non-negative fraction of the full "
                         "history, got %g",
                         swa_ratio);
  }
  return KVS_OK;
}

kvs_row_widths kvs_row_widths_default(const kvs_geometry *geometry) {
  kvs_row_widths w = {0};         /* rings per window page, no request slots */
  if (geometry == NULL) return w; /* zero widths: every pricing refuses them */
  w.kv = geometry->head_dim * KVS_BF16_BYTES;
  w.index = geometry->index_head_dim * KVS_BF16_BYTES;
  w.csa_state = 2 * 2 * geometry->head_dim * KVS_FP32_BYTES;
  w.hca_state = 2 * 1 * geometry->head_dim * KVS_FP32_BYTES;
  w.idx_state = 2 * 2 * geometry->index_head_dim * KVS_FP32_BYTES;
  return w;
}

const char *kvs_state_rings_name(kvs_state_rings rings) {
  switch (rings) {
    case KVS_STATE_RINGS_PER_PAGE:
      return "per-page";
    case KVS_STATE_RINGS_PER_REQUEST:
      return "per-request";
    case KVS_STATE_RINGS_HCA_PER_REQUEST:
      return "hca-per-request";
  }
  return "unknown";
}

kvs_status kvs_state_rings_parse(const char *text, kvs_state_rings *out, kvs_error *err) {
  if (text == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: text is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  static const kvs_state_rings all[] = {KVS_STATE_RINGS_PER_PAGE, KVS_STATE_RINGS_PER_REQUEST,
                                        KVS_STATE_RINGS_HCA_PER_REQUEST};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (strcmp(text, kvs_state_rings_name(all[i])) == 0) {
      *out = all[i];
      return KVS_OK;
    }
  }
  return kvs_error_set(err, KVS_ERR_PARSE,
                       "state rings '%s' are none of per-page, per-request, hca-per-request", text);
}

bool kvs_state_rings_csa_per_request(kvs_state_rings rings) {
  return rings == KVS_STATE_RINGS_PER_REQUEST;
}

bool kvs_state_rings_hca_per_request(kvs_state_rings rings) {
  return rings == KVS_STATE_RINGS_PER_REQUEST || rings == KVS_STATE_RINGS_HCA_PER_REQUEST;
}

/* The ring units (window pages or request slots) each ring kind is sized
 * by. */
static uint64_t csa_ring_units(kvs_state_rings rings, uint64_t n_win_pages, uint64_t n_req_slots) {
  return kvs_state_rings_csa_per_request(rings) ? n_req_slots : n_win_pages;
}

static uint64_t hca_ring_units(kvs_state_rings rings, uint64_t n_win_pages, uint64_t n_req_slots) {
  return kvs_state_rings_hca_per_request(rings) ? n_req_slots : n_win_pages;
}

const char *kvs_kv_dtype_name(kvs_kv_dtype dtype) {
  return dtype == KVS_KV_FP8 ? "fp8" : dtype == KVS_KV_BF16 ? "bf16" : "unknown";
}

kvs_status kvs_kv_dtype_parse(const char *text, kvs_kv_dtype *out, kvs_error *err) {
  if (text == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: text is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (strcmp(text, "bf16") == 0) {
    *out = KVS_KV_BF16;
  } else if (strcmp(text, "fp8") == 0) {
    *out = KVS_KV_FP8;
  } else {
    return kvs_error_set(err, KVS_ERR_PARSE, "KV dtype '%s' is neither bf16 nor fp8", text);
  }
  return KVS_OK;
}

kvs_status kvs_row_widths_for(const kvs_geometry *geometry, kvs_kv_dtype dtype,
                              uint64_t qk_rope_head_dim, kvs_row_widths *out, kvs_error *err) {
  kvs_status status = kvs_geometry_validate(geometry, err);
  if (status != KVS_OK) return status;
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_row_widths w = kvs_row_widths_default(geometry);
  if (dtype == KVS_KV_BF16) {
    *out = w;
    return KVS_OK;
  }
  if (dtype != KVS_KV_FP8) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "KV dtype %d is neither bf16 nor fp8",
                         (int)dtype);
  }
  if (qk_rope_head_dim == 0 || qk_rope_head_dim >= geometry->head_dim) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "fp8 rows keep the rope part in bf16: qk_rope_head_dim must be in "
                         "[1, head_dim %llu), got %llu",
                         (unsigned long long)geometry->head_dim,
                         (unsigned long long)qk_rope_head_dim);
  }
  if (geometry->index_head_dim % KVS_FP8_INDEX_BLOCK != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "fp8 indexer keys are scaled per %u values: index_head_dim %llu is not a "
                         "multiple of it",
                         KVS_FP8_INDEX_BLOCK, (unsigned long long)geometry->index_head_dim);
  }
  /* fp8 no-rope part + bf16 rope part + scales. */
  w.kv = (geometry->head_dim - qk_rope_head_dim) + qk_rope_head_dim * KVS_BF16_BYTES +
         KVS_FP8_KV_SCALE_BYTES;
  w.index =
      geometry->index_head_dim + geometry->index_head_dim / KVS_FP8_INDEX_BLOCK * KVS_FP32_BYTES;
  *out = w;
  return KVS_OK;
}

void kvs_row_widths_place(kvs_row_widths *w, kvs_state_rings rings, uint64_t max_running,
                          bool prefix_cache) {
  if (w == NULL) return;
  w->state_rings = rings;
  w->n_req_slots = rings == KVS_STATE_RINGS_PER_PAGE ? 0 : max_running + 1;
  w->tail_states = prefix_cache && kvs_state_rings_csa_per_request(rings);
}

kvs_status kvs_cost_terms_make(const kvs_geometry *geometry, size_t first, size_t end,
                               const kvs_row_widths *widths, kvs_cost_terms *out, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status = kvs_geometry_validate(geometry, err);
  if (status != KVS_OK) return status;
  size_t n = kvs_geometry_layer_count(geometry);
  if (first >= end || end > n) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "layer range [%zu, %zu) is empty or outside the %zu-layer stack", first,
                         end, n);
  }
  kvs_cost_terms terms = {0};
  terms.widths = widths != NULL ? *widths : kvs_row_widths_default(geometry);
  const kvs_row_widths *w = &terms.widths;
  if (w->state_rings != KVS_STATE_RINGS_PER_PAGE && w->state_rings != KVS_STATE_RINGS_PER_REQUEST &&
      w->state_rings != KVS_STATE_RINGS_HCA_PER_REQUEST) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "state rings %d are not a placement",
                         (int)w->state_rings);
  }
  if (w->tail_states && !kvs_state_rings_csa_per_request(w->state_rings)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "tail states keep what %s rings already keep per window page: they go "
                         "with per-request rings only",
                         kvs_state_rings_name(w->state_rings));
  }
  if (w->state_rings == KVS_STATE_RINGS_PER_PAGE ? w->n_req_slots != 0 : w->n_req_slots < 2) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%llu request slots with %s state rings: per-request rings need at "
                         "least 2 (one to bind and the dummy), per-page rings none",
                         (unsigned long long)w->n_req_slots, kvs_state_rings_name(w->state_rings));
  }
  if (w->kv == 0 || w->index == 0 || w->csa_state == 0 || w->hca_state == 0 || w->idx_state == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "row widths must be non-zero (kv %llu, index %llu, csa_state %llu, "
                         "hca_state %llu, idx_state %llu)",
                         (unsigned long long)w->kv, (unsigned long long)w->index,
                         (unsigned long long)w->csa_state, (unsigned long long)w->hca_state,
                         (unsigned long long)w->idx_state);
  }
  terms.n_layers = end - first;
  for (size_t layer = first; layer < end; layer++) {
    uint32_t ratio = geometry->compress_ratios[layer];
    terms.n_csa += ratio == KVS_CSA_RATIO;
    terms.n_hca += ratio == KVS_HCA_RATIO;
  }
  *out = terms;
  return KVS_OK;
}

static kvs_status terms_all(const char *function, const kvs_geometry *geometry,
                            kvs_cost_terms *terms, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", function);
  }
  return kvs_cost_terms_make(geometry, 0, kvs_geometry_layer_count(geometry), NULL, terms, err);
}

double kvs_cost_round_half_even(double value) {
  if (!isfinite(value)) return value;
  double below = floor(value);
  double frac = value - below; /* exact for doubles */
  if (frac > 0.5) return below + 1.0;
  if (frac < 0.5) return below;
  return fmod(below, 2.0) == 0.0 ? below : below + 1.0;
}

/* round_half_even(ratio * count) as a count; false when it exceeds 64 bits. */
static bool scale_count(double ratio, uint64_t count, uint64_t *out) {
  double scaled = kvs_cost_round_half_even(ratio * (double)count);
  if (scaled >= 18446744073709551616.0) return false;
  *out = scaled <= 0.0 ? 0 : (uint64_t)scaled;
  return true;
}

kvs_status kvs_cost_scale_count(double swa_ratio, uint64_t count, uint64_t *out, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status = check_swa_ratio(swa_ratio, err);
  if (status != KVS_OK) return status;
  if (!scale_count(swa_ratio, count, out)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "swa_ratio %g x %llu tokens exceeds 64 bits",
                         swa_ratio, (unsigned long long)count);
  }
  return KVS_OK;
}

kvs_status kvs_cost_reserved_window_pages(uint64_t max_running, bool radix, uint64_t *out,
                                          kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  bool overflow = false;
  uint64_t pages = kvs_mul(2, kvs_add(max_running, 1, &overflow), &overflow);
  if (radix) pages = kvs_add(pages, kvs_mul(3, max_running, &overflow), &overflow);
  pages = kvs_add(pages, 1, &overflow);
  if (overflow) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "max_running %llu overflows the reserve",
                         (unsigned long long)max_running);
  }
  *out = pages;
  return KVS_OK;
}

kvs_status kvs_cost_window_pages_left(uint64_t n_win_pages, uint64_t max_running, bool radix,
                                      uint64_t *out, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  uint64_t reserved = 0;
  kvs_status status = kvs_cost_reserved_window_pages(max_running, radix, &reserved, err);
  if (status != KVS_OK) return status;
  uint64_t usable = n_win_pages > 0 ? n_win_pages - 1 : 0; /* less the dummy */
  *out = usable > reserved ? usable - reserved : 0;
  return KVS_OK;
}

kvs_status kvs_cost_window_floor_pages(uint64_t max_seq_len, uint64_t max_running, bool radix,
                                       uint64_t page, uint64_t *out, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status = check_page(page, err);
  if (status != KVS_OK) return status;
  uint64_t reserved;
  if ((status = kvs_cost_reserved_window_pages(max_running, radix, &reserved, err))) return status;
  uint64_t reach = kvs_div_ceil(max_seq_len, page);
  if (reach > 8) reach = 8; /* chunked prefill bounds the rest */
  bool overflow = false;
  uint64_t floor_pages = kvs_add(reach, reserved, &overflow);
  if (overflow) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "window floor overflows 64 bits");
  }
  *out = floor_pages;
  return KVS_OK;
}

/* The checks every per-page price makes, then the geometry's terms. */
static kvs_status unit_terms(const char *fn, const kvs_geometry *geometry, uint64_t page,
                             const void *out, kvs_cost_terms *t, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", fn);
  }
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  kvs_status status = check_page(page, err);
  return status != KVS_OK ? status : terms_all(fn, geometry, t, err);
}

kvs_status kvs_cost_cache_per_page(const kvs_geometry *geometry, double swa_ratio, uint64_t page,
                                   uint64_t *out, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_cost_terms t;
  kvs_status status;
  if ((status = check_page(page, err)) || (status = check_swa_ratio(swa_ratio, err)) ||
      (status = terms_all(__func__, geometry, &t, err))) {
    return status;
  }
  const kvs_row_widths *w = &t.widths;
  bool overflow = false;
  uint64_t win = 0, ring_csa = 0, ring_hca = 0;
  overflow |= !scale_count(swa_ratio, page, &win);
  /* Per-request rings are a fixed cost, not a per-page one. */
  if (!kvs_state_rings_csa_per_request(w->state_rings)) {
    overflow |= !scale_count(swa_ratio, RING_CSA, &ring_csa);
  }
  if (!kvs_state_rings_hca_per_request(w->state_rings)) {
    overflow |= !scale_count(swa_ratio, RING_HCA, &ring_hca);
  }
  /* The window tier exists on every layer; the rings are window-sized too. */
  uint64_t total = kvs_mul(kvs_mul(t.n_layers, win, &overflow), w->kv, &overflow);
  uint64_t csa = kvs_mul(page / KVS_CSA_RATIO, w->kv, &overflow);
  csa = kvs_add(csa, kvs_mul(page / KVS_CSA_RATIO, w->index, &overflow), &overflow);
  csa = kvs_add(csa, kvs_mul(ring_csa, w->idx_state, &overflow), &overflow);
  csa = kvs_add(csa, kvs_mul(ring_csa, w->csa_state, &overflow), &overflow);
  uint64_t hca = kvs_mul(page / KVS_HCA_RATIO, w->kv, &overflow);
  hca = kvs_add(hca, kvs_mul(ring_hca, w->hca_state, &overflow), &overflow);
  total = kvs_add(total, kvs_mul(t.n_csa, csa, &overflow), &overflow);
  total = kvs_add(total, kvs_mul(t.n_hca, hca, &overflow), &overflow);
  if (overflow) return kvs_error_set(err, KVS_ERR_OVERFLOW, "cache per page exceeds 64 bits");
  *out = total;
  return KVS_OK;
}

kvs_status kvs_cost_kv_unit_bytes(const kvs_geometry *geometry, uint64_t page, uint64_t *out,
                                  kvs_error *err) {
  kvs_cost_terms t;
  kvs_status status = unit_terms(__func__, geometry, page, out, &t, err);
  if (status != KVS_OK) return status;
  bool overflow = false;
  uint64_t per_page = kvs_mul(page, KVS_INT64_BYTES, &overflow);
  uint64_t csa = kvs_mul(page / KVS_CSA_RATIO, t.widths.kv + t.widths.index, &overflow);
  uint64_t hca = kvs_mul(page / KVS_HCA_RATIO, t.widths.kv, &overflow);
  per_page = kvs_add(per_page, kvs_mul(t.n_csa, csa, &overflow), &overflow);
  per_page = kvs_add(per_page, kvs_mul(t.n_hca, hca, &overflow), &overflow);
  if (overflow) return kvs_error_set(err, KVS_ERR_OVERFLOW, "kv unit bytes exceed 64 bits");
  *out = kvs_div_ceil(per_page, page);
  return KVS_OK;
}

kvs_status kvs_cost_window_unit_bytes(const kvs_geometry *geometry, uint64_t page, uint64_t *out,
                                      kvs_error *err) {
  kvs_cost_terms t;
  kvs_status status = unit_terms(__func__, geometry, page, out, &t, err);
  if (status != KVS_OK) return status;
  bool overflow = false;
  uint64_t per_page = kvs_mul(kvs_mul(t.n_layers, page, &overflow), t.widths.kv, &overflow);
  uint64_t csa = kvs_state_rings_csa_per_request(t.widths.state_rings)
                     ? 0
                     : kvs_mul(RING_CSA, t.widths.csa_state + t.widths.idx_state, &overflow);
  uint64_t hca = kvs_state_rings_hca_per_request(t.widths.state_rings)
                     ? 0
                     : kvs_mul(RING_HCA, t.widths.hca_state, &overflow);
  per_page = kvs_add(per_page, kvs_mul(t.n_csa, csa, &overflow), &overflow);
  per_page = kvs_add(per_page, kvs_mul(t.n_hca, hca, &overflow), &overflow);
  if (overflow) return kvs_error_set(err, KVS_ERR_OVERFLOW, "window unit bytes exceed 64 bits");
  *out = kvs_div_ceil(per_page, page);
  return KVS_OK;
}

uint64_t kvs_pool_sizes_num_pages(const kvs_pool_sizes *sizes) {
  /* No sizes, or a page of 0 (which would divide by zero): no pages. */
  if (sizes == NULL || sizes->page == 0) return 0;
  return sizes->full_token / sizes->page;
}

/* The window in pages for an anchor, per kvs_pool_sizes_compute; false on
 * 64-bit overflow. */
static bool window_pages(uint64_t num_pages, uint64_t full_token, double swa_ratio, uint64_t page,
                         uint64_t n_win_pages, uint64_t *out) {
  if (n_win_pages == KVS_WINDOW_FROM_RATIO) {
    uint64_t slots;
    if (!scale_count(swa_ratio, full_token, &slots)) return false;
    n_win_pages = kvs_div_ceil(slots, page);
  }
  *out = n_win_pages < num_pages ? n_win_pages : num_pages;
  return true;
}

/* A ratio-4 layer's compress-state rings have 8 rows (kvs_ring_size_for_ratio),
 * and every ring location is the position modulo 8 (per request slot) or
 * the window slot's (per window page), which the tables derive from
 * positions rebased by whole pages: a P that 8 does not divide would put a
 * position in another ring row than its own. */
#define CSA_RING_REFUSAL                                                                   \
  "P=%llu must be a multiple of 8 on a model with ratio-4 layers%s: their compress-state " \
  "rings have 8 rows, located by the position modulo 8 across whole pages"

kvs_status kvs_pool_sizes_compute_terms(uint64_t num_pages, const kvs_cost_terms *terms,
                                        double swa_ratio, uint64_t page, uint64_t n_win_pages,
                                        kvs_pool_sizes *out, kvs_error *err) {
  if (terms == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: terms is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status;
  if ((status = check_page(page, err)) || (status = check_swa_ratio(swa_ratio, err))) {
    return status;
  }
  if ((terms->n_csa > 0 && page % KVS_CSA_RATIO != 0) ||
      (terms->n_hca > 0 && page % KVS_HCA_RATIO != 0)) {
    return kvs_error_set(
        err, KVS_ERR_INVALID_ARGUMENT,
        "P=%llu must be divisible by ratio %u: each page holds P/ratio "
        "compressed blocks",
        (unsigned long long)page,
        terms->n_hca > 0 && page % KVS_HCA_RATIO != 0 ? KVS_HCA_RATIO : KVS_CSA_RATIO);
  }
  if (terms->n_csa > 0 && page % RING_CSA != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, CSA_RING_REFUSAL, (unsigned long long)page,
                         "");
  }
  bool overflow = false;
  uint64_t full_token = kvs_mul(num_pages, page, &overflow);
  uint64_t win = 0;
  if (overflow || !window_pages(num_pages, full_token, swa_ratio, page, n_win_pages, &win)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "%llu pages of %llu tokens exceed 64 bits",
                         (unsigned long long)num_pages, (unsigned long long)page);
  }
  out->page = page;
  out->swa_ratio = swa_ratio;
  out->full_token = full_token;
  out->n_win_pages = win;
  out->n_win_slots = win * page;
  out->n_layers = terms->n_layers;
  out->state_rings = terms->widths.state_rings;
  out->n_req_slots = terms->widths.n_req_slots;
  out->tail_states = terms->widths.tail_states;
  return KVS_OK;
}

kvs_status kvs_pool_sizes_compute(uint64_t num_pages, const kvs_geometry *geometry,
                                  double swa_ratio, uint64_t page, uint64_t n_win_pages,
                                  kvs_pool_sizes *out, kvs_error *err) {
  kvs_cost_terms t;
  kvs_status status = unit_terms(__func__, geometry, page, out, &t, err);
  if (status != KVS_OK) return status;
  /* Name the first layer whose ratio does not divide P. */
  for (size_t layer = 0; layer < t.n_layers; layer++) {
    uint32_t ratio = geometry->compress_ratios[layer];
    if (ratio != 0 && page % ratio != 0) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "P=%llu must be divisible by ratio %u of layer %zu: each page "
                           "holds P/ratio compressed blocks",
                           (unsigned long long)page, ratio, layer);
    }
    if (ratio == KVS_CSA_RATIO && page % RING_CSA != 0) {
      char where[40];
      snprintf(where, sizeof where, " (layer %zu)", layer);
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, CSA_RING_REFUSAL,
                           (unsigned long long)page, where);
    }
  }
  return kvs_pool_sizes_compute_terms(num_pages, &t, swa_ratio, page, n_win_pages, out, err);
}

kvs_status kvs_pool_sizes_layer(const kvs_pool_sizes *sizes, const kvs_geometry *geometry,
                                size_t layer, bool *present, kvs_layer_sizes *out, kvs_error *err) {
  if (sizes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: sizes is NULL", __func__);
  }
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (present == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: present is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  size_t n = kvs_geometry_layer_count(geometry);
  if (layer >= n) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "layer %zu is outside the %zu-layer stack",
                         layer, n);
  }
  uint32_t ratio = geometry->compress_ratios[layer];
  if (ratio == 0) {
    *present = false;
    return KVS_OK;
  }
  uint64_t ring;
  kvs_status status = kvs_ring_size_for_ratio(ratio, &ring, err);
  if (status != KVS_OK) return status;
  kvs_layer_sizes s = {0};
  s.ratio = ratio;
  s.ring_size = ring;
  s.cmp_blocks = sizes->full_token / ratio;
  s.has_indexer = ratio == KVS_CSA_RATIO;
  s.idx_blocks = s.has_indexer ? sizes->full_token / KVS_CSA_RATIO : 0;
  bool per_request = ratio == KVS_CSA_RATIO ? kvs_state_rings_csa_per_request(sizes->state_rings)
                                            : kvs_state_rings_hca_per_request(sizes->state_rings);
  uint64_t units = per_request ? sizes->n_req_slots : sizes->n_win_pages;
  s.state_per_request = per_request;
  s.ring_rows = units * ring;
  s.tail_state_rows =
      sizes->tail_states && ratio == KVS_CSA_RATIO ? sizes->n_win_pages * KVS_TAIL_STATE_ROWS : 0;
  s.state_slots = s.ring_rows + s.tail_state_rows;
  s.idx_state_slots = s.has_indexer ? units * RING_CSA + s.tail_state_rows : 0;
  *present = true;
  *out = s;
  return KVS_OK;
}

/* Every tier's bytes for an anchor and window; false on 64-bit overflow.
 * Shared by the exact pool bytes and every step of the solve. */
static bool breakdown_at(const kvs_cost_terms *t, uint64_t full_token, uint64_t n_win_pages,
                         uint64_t page, uint64_t n_scratch, kvs_pool_breakdown *b) {
  const kvs_row_widths *w = &t->widths;
  bool of = false;
  uint64_t win_slots = kvs_mul(n_win_pages, page, &of);
  uint64_t csa_blocks = full_token / KVS_CSA_RATIO;
  uint64_t hca_blocks = full_token / KVS_HCA_RATIO;

  b->window = kvs_mul(kvs_mul(t->n_layers, win_slots, &of), w->kv, &of);
  b->mapping = kvs_mul(full_token, KVS_INT64_BYTES, &of);
  b->compressed = kvs_add(kvs_mul(kvs_mul(t->n_csa, csa_blocks, &of), w->kv, &of),
                          kvs_mul(kvs_mul(t->n_hca, hca_blocks, &of), w->kv, &of), &of);
  b->indexer = kvs_mul(kvs_mul(t->n_csa, csa_blocks, &of), w->index, &of);
  uint64_t csa_ring =
      kvs_mul(csa_ring_units(w->state_rings, n_win_pages, w->n_req_slots), RING_CSA, &of);
  /* Tail states: rows of the ratio-4 regions, per window page. */
  if (w->tail_states)
    csa_ring = kvs_add(csa_ring, kvs_mul(n_win_pages, KVS_TAIL_STATE_ROWS, &of), &of);
  uint64_t hca_ring =
      kvs_mul(hca_ring_units(w->state_rings, n_win_pages, w->n_req_slots), RING_HCA, &of);
  b->state = kvs_add(kvs_mul(kvs_mul(t->n_csa, csa_ring, &of), w->csa_state, &of),
                     kvs_mul(kvs_mul(t->n_hca, hca_ring, &of), w->hca_state, &of), &of);
  b->index_state = kvs_mul(kvs_mul(t->n_csa, csa_ring, &of), w->idx_state, &of);
  /* n_scratch rows per compressed and indexer pool, one scratch row per
   * ring, and the mapping's trailing sentinel. */
  uint64_t csa_scratch =
      kvs_add(kvs_mul(n_scratch, w->kv + w->index, &of), w->csa_state + w->idx_state, &of);
  uint64_t hca_scratch = kvs_add(kvs_mul(n_scratch, w->kv, &of), w->hca_state, &of);
  b->scratch = kvs_add(
      kvs_add(kvs_mul(t->n_csa, csa_scratch, &of), kvs_mul(t->n_hca, hca_scratch, &of), &of),
      KVS_INT64_BYTES, &of);
  uint64_t total = kvs_add(b->window, b->mapping, &of);
  total = kvs_add(total, b->compressed, &of);
  total = kvs_add(total, b->indexer, &of);
  total = kvs_add(total, b->state, &of);
  total = kvs_add(total, b->index_state, &of);
  b->total = kvs_add(total, b->scratch, &of);
  return !of;
}

kvs_status kvs_pool_sizes_check_terms(const kvs_pool_sizes *sizes, const kvs_cost_terms *terms,
                                      kvs_error *err) {
  if (sizes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: sizes is NULL", __func__);
  }
  if (terms == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: terms is NULL", __func__);
  }
  if (sizes->n_layers != terms->n_layers) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "these sizes were built for a %llu-layer stack, not a %llu-layer one",
                         (unsigned long long)sizes->n_layers, (unsigned long long)terms->n_layers);
  }
  if (sizes->state_rings != terms->widths.state_rings ||
      sizes->n_req_slots != terms->widths.n_req_slots) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "these sizes place rings %s with %llu request slots, the terms %s with "
                         "%llu",
                         kvs_state_rings_name(sizes->state_rings),
                         (unsigned long long)sizes->n_req_slots,
                         kvs_state_rings_name(terms->widths.state_rings),
                         (unsigned long long)terms->widths.n_req_slots);
  }
  if (sizes->tail_states != terms->widths.tail_states) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "these sizes %s tail states, the terms %s",
                         sizes->tail_states ? "keep" : "keep no",
                         terms->widths.tail_states ? "do" : "do not");
  }
  return KVS_OK;
}

kvs_status kvs_pool_sizes_bytes_terms(const kvs_pool_sizes *sizes, const kvs_cost_terms *terms,
                                      uint64_t n_scratch, kvs_pool_breakdown *out, kvs_error *err) {
  if (sizes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: sizes is NULL", __func__);
  }
  if (terms == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: terms is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status = kvs_pool_sizes_check_terms(sizes, terms, err);
  if (status != KVS_OK) return status;
  kvs_pool_breakdown b;
  if (!breakdown_at(terms, sizes->full_token, sizes->n_win_pages, sizes->page, n_scratch, &b)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "pool of %llu tokens exceeds 64 bits of bytes",
                         (unsigned long long)sizes->full_token);
  }
  *out = b;
  return KVS_OK;
}

kvs_status kvs_pool_sizes_window_page_bytes(const kvs_pool_sizes *sizes,
                                            const kvs_cost_terms *terms, uint64_t *out,
                                            kvs_error *err) {
  if (sizes == NULL || terms == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         sizes == NULL   ? "sizes"
                         : terms == NULL ? "terms"
                                         : "out");
  }
  kvs_status status = kvs_pool_sizes_check_terms(sizes, terms, err);
  if (status != KVS_OK) return status;
  kvs_pool_breakdown at, more;
  if (sizes->n_win_pages == UINT64_MAX ||
      !breakdown_at(terms, sizes->full_token, sizes->n_win_pages, sizes->page, 0, &at) ||
      !breakdown_at(terms, sizes->full_token, sizes->n_win_pages + 1, sizes->page, 0, &more)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "a window of %llu pages exceeds 64 bits of bytes",
                         (unsigned long long)sizes->n_win_pages);
  }
  *out = more.total - at.total;
  return KVS_OK;
}

kvs_status kvs_pool_sizes_bytes(const kvs_pool_sizes *sizes, const kvs_geometry *geometry,
                                uint64_t n_scratch, uint64_t *out, kvs_error *err) {
  if (sizes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: sizes is NULL", __func__);
  }
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_cost_terms t;
  kvs_status status = terms_all(__func__, geometry, &t, err);
  if (status != KVS_OK) return status;
  kvs_pool_breakdown b;
  if ((status = kvs_pool_sizes_bytes_terms(sizes, &t, n_scratch, &b, err))) return status;
  *out = b.total;
  return KVS_OK;
}

/* One solve's fixed inputs; bytes_at prices an anchor under them. */
typedef struct solve_ctx {
  const kvs_cost_terms *terms;
  double swa_ratio;
  uint64_t floor_win_pages;
  uint64_t page;
  uint64_t n_scratch;
} solve_ctx;

/* The window the solve gives an anchor: the floor, or the ratio's share. */
static bool solve_window(const solve_ctx *c, uint64_t num_pages, uint64_t *full_token,
                         uint64_t *win) {
  bool of = false;
  *full_token = kvs_mul(num_pages, c->page, &of);
  uint64_t slots;
  if (of || !scale_count(c->swa_ratio, *full_token, &slots)) return false;
  uint64_t pages = kvs_div_ceil(slots, c->page);
  if (pages < c->floor_win_pages) pages = c->floor_win_pages;
  *win = pages < num_pages ? pages : num_pages;
  return true;
}

/* Exact bytes at an anchor; false on overflow, which never fits. */
static bool bytes_at(const solve_ctx *c, uint64_t num_pages, uint64_t *bytes) {
  uint64_t full_token, win;
  kvs_pool_breakdown b;
  if (!solve_window(c, num_pages, &full_token, &win) ||
      !breakdown_at(c->terms, full_token, win, c->page, c->n_scratch, &b)) {
    return false;
  }
  *bytes = b.total;
  return true;
}

static bool fits(const solve_ctx *c, uint64_t num_pages, uint64_t available) {
  uint64_t bytes;
  return bytes_at(c, num_pages, &bytes) && bytes <= available;
}

/* A guess at the answer from the affine price, so the exact search below
 * needs a handful of evaluations instead of ~60. Any guess is safe: the
 * search only trusts exact bytes. */
static double estimate_pages(const solve_ctx *c, uint64_t lo, uint64_t lo_bytes,
                             uint64_t available) {
  const kvs_cost_terms *t = c->terms;
  const kvs_row_widths *w = &t->widths;
  double page = (double)c->page;
  double full_per_page = page * KVS_INT64_BYTES +
                         (double)t->n_csa * (page / KVS_CSA_RATIO) * (double)(w->kv + w->index) +
                         (double)t->n_hca * (page / KVS_HCA_RATIO) * (double)w->kv;
  double win_per_page = (double)t->n_layers * page * (double)w->kv +
                        (double)t->n_csa * RING_CSA * (double)(w->csa_state + w->idx_state) +
                        (double)t->n_hca * RING_HCA * (double)w->hca_state;
  double share = c->swa_ratio < 1.0 ? c->swa_ratio : 1.0;
  double spare = (double)(available - lo_bytes);
  /* While the window is pinned at its floor only the anchor grows. */
  double pinned_until = share > 0 ? (double)c->floor_win_pages / share : INFINITY;
  double pinned_cost = (pinned_until - (double)lo) * full_per_page;
  if (pinned_until <= (double)lo) pinned_cost = 0, pinned_until = (double)lo;
  if (spare <= pinned_cost) return (double)lo + spare / full_per_page;
  return pinned_until + (spare - pinned_cost) / (full_per_page + share * win_per_page);
}

kvs_status kvs_cost_solve_num_pages_terms(uint64_t available_bytes, const kvs_cost_terms *terms,
                                          double swa_ratio, uint64_t floor_win_pages, uint64_t page,
                                          uint64_t n_scratch, kvs_pool_sizes *out,
                                          kvs_budget_shortfall *shortfall, kvs_error *err) {
  if (terms == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: terms is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status;
  kvs_pool_sizes minimal;
  uint64_t lo = floor_win_pages > 2 ? floor_win_pages : 2;
  /* Validates page, ratio and divisibility once for the whole search. */
  if ((status = kvs_pool_sizes_compute_terms(lo, terms, swa_ratio, page, floor_win_pages, &minimal,
                                             err))) {
    return status;
  }
  solve_ctx c = {terms, swa_ratio, floor_win_pages, page, n_scratch};
  uint64_t lo_bytes;
  if (!bytes_at(&c, lo, &lo_bytes)) {
    /* Not a small budget: a pool whose byte count does not exist. Saying
     * "needing 18446744073709551615 bytes" would pass an overflow off as a
     * size. */
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "the minimal pool (%llu pages: the window working-set floor of %llu "
                         "pages for these max_running and max_seq_len, on %llu layers) needs "
                         "more than 2^64 bytes: lower max_running/max_seq_len or the row widths",
                         (unsigned long long)lo, (unsigned long long)floor_win_pages,
                         (unsigned long long)terms->n_layers);
  }
  if (lo_bytes > available_bytes) {
    kvs_budget_shortfall s = {available_bytes, lo_bytes, lo, floor_win_pages};
    if (shortfall != NULL) *shortfall = s;
    return kvs_error_set(err, KVS_ERR_BUDGET_TOO_SMALL,
                         "KV budget %llu bytes cannot fit the minimal pool (%llu pages incl. "
                         "the window working-set floor %llu, needing %llu bytes); give it a larger "
                         "budget or lower max_running/max_seq_len",
                         (unsigned long long)s.available_bytes, (unsigned long long)s.min_pages,
                         (unsigned long long)s.floor_win_pages, (unsigned long long)s.needed_bytes);
  }
  /* Every page costs at least its 8*P mapping bytes, so past
   * available / (8*P) nothing fits: hi is a page count that does not. */
  uint64_t hi = available_bytes / (page * KVS_INT64_BYTES) + 1;
  if (hi <= lo) hi = lo + 1;

  /* Gallop outward from the affine guess, then bisect: lo fits, hi not. */
  double guess = estimate_pages(&c, lo, lo_bytes, available_bytes);
  if (hi - lo > 1) {
    uint64_t g = guess <= (double)(lo + 1)   ? lo + 1
                 : guess >= (double)(hi - 1) ? hi - 1
                                             : (uint64_t)guess;
    if (fits(&c, g, available_bytes)) {
      lo = g;
      for (uint64_t step = 1; hi - lo > step; step *= 2) {
        if (!fits(&c, lo + step, available_bytes)) {
          hi = lo + step;
          break;
        }
        lo += step;
      }
    } else {
      hi = g;
      for (uint64_t step = 1; hi - lo > step; step *= 2) {
        if (fits(&c, hi - step, available_bytes)) {
          lo = hi - step;
          break;
        }
        hi -= step;
      }
    }
  }
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (fits(&c, mid, available_bytes)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  uint64_t full_token = 0, win = 0;
  solve_window(&c, lo, &full_token, &win); /* lo fits, so it priced */
  return kvs_pool_sizes_compute_terms(lo, terms, swa_ratio, page, win, out, err);
}

kvs_status kvs_cost_solve_num_pages(uint64_t available_bytes, const kvs_geometry *geometry,
                                    double swa_ratio, uint64_t floor_win_pages, uint64_t page,
                                    uint64_t n_scratch, kvs_pool_sizes *out,
                                    kvs_budget_shortfall *shortfall, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_cost_terms t;
  kvs_pool_sizes probe;
  kvs_status status;
  /* Sizing once through the geometry names any layer whose ratio is bad. */
  if ((status = terms_all(__func__, geometry, &t, err)) ||
      (status = kvs_pool_sizes_compute(2, geometry, swa_ratio, page, 2, &probe, err))) {
    return status;
  }
  return kvs_cost_solve_num_pages_terms(available_bytes, &t, swa_ratio, floor_win_pages, page,
                                        n_scratch, out, shortfall, err);
}

/* The caller's options as this build's struct: an older caller's shorter
 * struct takes the defaults for what it lacks. */
static kvs_status adopt_solve_options(const kvs_solve_options *given, kvs_solve_options *out,
                                      kvs_error *err) {
  static const kvs_solve_options defaults = KVS_SOLVE_OPTIONS_INIT;
  return kvs_options_adopt(given, &defaults, sizeof defaults, "KVS_SOLVE_OPTIONS_INIT", out, err);
}

/* kvs_cost_solve_terms on adopted options. */
static kvs_status solve_terms(const char *function, const kvs_geometry *geometry,
                              const kvs_solve_options *o, kvs_cost_terms *out, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", function);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", function);
  }
  /* Zero running requests would size no request slot and no floor: a
   * pool for nobody, refused rather than planned. */
  if (o->max_running == 0 || o->max_running == UINT64_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "max_running must be in [1, 2^64 - 2] (one request slot each and the "
                         "dummy), got %llu",
                         (unsigned long long)o->max_running);
  }
  kvs_row_widths w;
  kvs_status status = kvs_row_widths_for(geometry, o->kv_dtype, o->qk_rope_head_dim, &w, err);
  if (status != KVS_OK) return status;
  kvs_row_widths_place(&w, o->state_rings, o->max_running, false);
  return kvs_cost_terms_make(geometry, 0, kvs_geometry_layer_count(geometry), &w, out, err);
}

kvs_status kvs_cost_solve_terms(const kvs_geometry *geometry, const kvs_solve_options *options,
                                kvs_cost_terms *out, kvs_error *err) {
  kvs_solve_options o;
  kvs_status status = adopt_solve_options(options, &o, err);
  if (status != KVS_OK) return status;
  return solve_terms(__func__, geometry, &o, out, err);
}

kvs_status kvs_cost_solve(uint64_t available_bytes, const kvs_geometry *geometry,
                          const kvs_solve_options *options, kvs_pool_sizes *out,
                          kvs_budget_shortfall *shortfall, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_solve_options o;
  kvs_cost_terms t;
  kvs_pool_sizes probe;
  kvs_status status;
  if ((status = adopt_solve_options(options, &o, err)) ||
      (status = solve_terms(__func__, geometry, &o, &t, err)) ||
      /* Sizing once through the geometry names any layer whose ratio does
       * not divide the page. */
      (status = kvs_pool_sizes_compute(2, geometry, o.swa_ratio, o.page, 2, &probe, err))) {
    return status;
  }
  uint64_t floor = o.floor_win_pages;
  if (floor == 0 && (status = kvs_cost_window_floor_pages(o.max_seq_len, o.max_running, o.radix,
                                                          o.page, &floor, err))) {
    return status;
  }
  return kvs_cost_solve_num_pages_terms(available_bytes, &t, o.swa_ratio, floor, o.page,
                                        o.n_scratch, out, shortfall, err);
}

kvs_status kvs_cost_auto_model(const kvs_geometry *geometry, double swa_ratio,
                               uint64_t floor_win_pages, uint64_t page, uint64_t n_scratch,
                               kvs_auto_cost *out, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status;
  uint64_t cache_per_page;
  if ((status = kvs_cost_cache_per_page(geometry, swa_ratio, page, &cache_per_page, err))) {
    return status;
  }
  bool of = false;
  uint64_t per_page = kvs_add(cache_per_page, kvs_mul(page, KVS_INT64_BYTES, &of), &of);
  uint64_t n0 = floor_win_pages > 2 ? floor_win_pages : 2;
  uint64_t slots = 0;
  uint64_t full0 = kvs_mul(n0, page, &of);
  if (!of && !scale_count(swa_ratio, full0, &slots)) of = true;
  if (of) return kvs_error_set(err, KVS_ERR_OVERFLOW, "auto cost model exceeds 64 bits");
  uint64_t win0 = kvs_div_ceil(slots, page);
  if (win0 < floor_win_pages) win0 = floor_win_pages;
  kvs_pool_sizes sizes;
  uint64_t base;
  if ((status = kvs_pool_sizes_compute(n0, geometry, swa_ratio, page, win0, &sizes, err)) ||
      (status = kvs_pool_sizes_bytes(&sizes, geometry, n_scratch, &base, err))) {
    return status;
  }
  uint64_t slack_pages = kvs_div_ceil(KVS_AUTO_KV_SLACK_BYTES, per_page > 0 ? per_page : 1);
  uint64_t linear = kvs_mul(n0, per_page, &of);
  uint64_t reserve = kvs_mul(kvs_add(n0, slack_pages, &of), page, &of);
  if (of) return kvs_error_set(err, KVS_ERR_OVERFLOW, "auto cost model exceeds 64 bits");
  out->cache_per_page = per_page;
  /* Saturating: a wrapped intercept would refuse every split. */
  out->fixed_cache_size = base > linear ? base - linear : 0;
  out->min_reserve_tokens = reserve;
  return KVS_OK;
}

#include "plan/stage_split.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The range totals of one (num_pages, window) probe, [first][end]: a
 * feasibility test asks for the same ranges again in every stage, and the
 * tie-break's bisection asks again at one page count some 40 times; the
 * footprint behind each total is a whole device carve, so each is priced
 * once per probe (kvplan fit's 101 x 1M-token DSV4-Pro search went from
 * 21 s to a few). */
typedef struct split_memo {
  uint64_t pages, win;  /* the probe the table holds */
  bool keyed;           /* false until the first probe */
  unsigned char *state; /* [(L + 1) x (L + 1)]: 0 not priced, 1 priced, 2 overflows */
  uint64_t *total;      /* [(L + 1) x (L + 1)] */
} split_memo;

/* One solve's fixed inputs and scratch tables. */
typedef struct split_ctx {
  const kvs_split_request *req;
  size_t n_layers;
  size_t n_stages;
  kvs_row_widths widths;
  size_t *csa_prefix;      /* [L + 1]: ratio-4 layers before index i */
  size_t *hca_prefix;      /* [L + 1]: ratio-128 layers before index i */
  unsigned char *reach;    /* [(S + 1) x (L + 1)]: ends reachable after s stages */
  size_t *reach_end;       /* [S x (L + 1)]: R_s(a), the last end stage s fits from a */
  uint64_t *weight_prefix; /* [L + 1]: layer weights before index i (all 0 without) */
  long *diff;              /* [L + 2]: interval sweep */
  uint64_t *limits;        /* [S]: the byte limit of each stage in this probe */
  bool *limit_ok;          /* [S]: false when the limit is below zero */
  split_memo *memo;        /* written through a const ctx: a cache, not an input */
} split_ctx;

/* A range's terms in O(1) from the prefix counts; equal, field for field,
 * to kvs_cost_terms_make over the same range (a test holds this). */
static kvs_cost_terms range_terms(const split_ctx *c, size_t first, size_t end) {
  kvs_cost_terms t;
  t.n_layers = end - first;
  t.n_csa = c->csa_prefix[end] - c->csa_prefix[first];
  t.n_hca = c->hca_prefix[end] - c->hca_prefix[first];
  t.widths = c->widths;
  return t;
}

/* The footprint of exact bytes b: the request's carve, or b alone. */
static kvs_status footprint_of(const kvs_split_request *req, const kvs_cost_terms *t,
                               const kvs_pool_sizes *sizes, const kvs_pool_breakdown *b,
                               kvs_device_footprint *out, kvs_error *err) {
  if (req->footprint == NULL) {
    kvs_device_footprint f = {b->total, 0, 0, b->total};
    *out = f;
    return KVS_OK;
  }
  return req->footprint(req->footprint_ctx, t, sizes, b, out, err);
}

/* The footprint of [first, end) at num_pages with the window win; false on
 * 64-bit overflow, which never fits. */
static bool range_total_priced(const split_ctx *c, size_t first, size_t end, uint64_t num_pages,
                               uint64_t win, uint64_t *total) {
  kvs_cost_terms t = range_terms(c, first, end);
  kvs_pool_sizes sizes;
  kvs_pool_breakdown b;
  kvs_device_footprint f;
  if (kvs_pool_sizes_compute_terms(num_pages, &t, c->req->swa_ratio, c->req->page, win, &sizes,
                                   NULL) != KVS_OK ||
      kvs_pool_sizes_bytes_terms(&sizes, &t, c->req->n_scratch, &b, NULL) != KVS_OK ||
      footprint_of(c->req, &t, &sizes, &b, &f, NULL) != KVS_OK) {
    return false;
  }
  uint64_t weights = c->weight_prefix[end] - c->weight_prefix[first];
  if (f.total_bytes > UINT64_MAX - weights) return false;
  *total = f.total_bytes + weights;
  return true;
}

/* range_total_priced through the probe's memo. */
static bool range_total(const split_ctx *c, size_t first, size_t end, uint64_t num_pages,
                        uint64_t win, uint64_t *total) {
  split_memo *m = c->memo;
  size_t side = c->n_layers + 1;
  if (!m->keyed || m->pages != num_pages || m->win != win) {
    memset(m->state, 0, side * side);
    m->pages = num_pages;
    m->win = win;
    m->keyed = true;
  }
  size_t i = first * side + end;
  if (m->state[i] == 0) {
    m->state[i] = range_total_priced(c, first, end, num_pages, win, &m->total[i]) ? 1 : 2;
  }
  if (m->state[i] == 2) return false;
  *total = m->total[i];
  return true;
}

static bool range_fits(const split_ctx *c, size_t stage, size_t first, size_t end,
                       uint64_t num_pages, uint64_t win) {
  uint64_t total;
  return c->limit_ok[stage] && range_total(c, first, end, num_pages, win, &total) &&
         total <= c->limits[stage];
}

/* How the stage limits of a probe derive from the budgets. */
typedef enum limit_mode {
  LIMIT_LESS_SLACK, /* budget - h: keep h bytes of headroom everywhere */
  LIMIT_PLUS_EXTRA  /* budget + h: what a uniform raise would allow */
} limit_mode;

static void set_limits(split_ctx *c, limit_mode mode, uint64_t h) {
  for (size_t s = 0; s < c->n_stages; s++) {
    uint64_t b = c->req->stage_budgets[s];
    if (mode == LIMIT_LESS_SLACK) {
      c->limit_ok[s] = b >= h;
      c->limits[s] = b >= h ? b - h : 0;
    } else {
      c->limit_ok[s] = true;
      c->limits[s] = b > UINT64_MAX - h ? UINT64_MAX : b + h;
    }
  }
}

static unsigned char *reach_row(const split_ctx *c, size_t stage) {
  return c->reach + stage * (c->n_layers + 1);
}

static size_t *end_row(const split_ctx *c, size_t stage) {
  return c->reach_end + stage * (c->n_layers + 1);
}

/* Whether some split fits every stage under the current limits at
 * num_pages; leaves the reach tables for split_backtrack. */
static bool feasible(const split_ctx *c, uint64_t num_pages, uint64_t win) {
  size_t L = c->n_layers;
  memset(c->reach, 0, (c->n_stages + 1) * (L + 1));
  reach_row(c, 0)[0] = 1;
  for (size_t s = 0; s < c->n_stages; s++) {
    const unsigned char *from = reach_row(c, s);
    unsigned char *to = reach_row(c, s + 1);
    size_t *ends = end_row(c, s);
    memset(c->diff, 0, (L + 2) * sizeof c->diff[0]);
    bool any = false;
    for (size_t a = 0; a < L; a++) {
      ends[a] = a;
      if (!from[a] || !range_fits(c, s, a, a + 1, num_pages, win)) continue;
      /* Bytes grow with the range: bisect for the last end that fits. */
      size_t lo = a + 1, hi = L + 1; /* lo fits, hi is past the stack */
      while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (range_fits(c, s, a, mid, num_pages, win)) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      ends[a] = lo;
      c->diff[a + 1]++;
      c->diff[lo + 1]--;
      any = true;
    }
    if (!any) return false;
    long open = 0;
    for (size_t e = 0; e <= L; e++) {
      open += c->diff[e];
      to[e] = open > 0;
    }
  }
  return reach_row(c, c->n_stages)[L] != 0;
}

/* After a feasible probe: the stage starts. Every candidate kept here is
 * optimal already; among them each stage, from the last, takes the share
 * of the layers left closest to its share of the budgets left, so equal
 * budgets get near-equal layer counts. */
static void split_backtrack(const split_ctx *c, size_t *first, size_t *end) {
  size_t e = c->n_layers;
  long double budget_left = 0.0L;
  for (size_t s = 0; s < c->n_stages; s++) budget_left += (long double)c->req->stage_budgets[s];
  for (size_t s = c->n_stages; s-- > 0;) {
    const unsigned char *from = reach_row(c, s);
    const size_t *ends = end_row(c, s);
    long double share = budget_left > 0.0L ? (long double)c->req->stage_budgets[s] / budget_left
                                           : 1.0L / (long double)(s + 1);
    long double target = share * (long double)e; /* layers this stage would take */
    size_t best = e;
    long double best_miss = 0.0L;
    for (size_t a = e; a-- > 0;) {
      if (!from[a] || ends[a] < e) continue;
      long double miss = (long double)(e - a) - target;
      if (miss < 0) miss = -miss;
      if (best == e || miss < best_miss) {
        best = a;
        best_miss = miss;
      }
    }
    first[s] = best;
    end[s] = e;
    e = best;
    budget_left -= (long double)c->req->stage_budgets[s];
  }
}

static void ctx_free(split_ctx *c) {
  free(c->csa_prefix);
  free(c->hca_prefix);
  free(c->reach);
  free(c->reach_end);
  free(c->diff);
  free(c->limits);
  free(c->limit_ok);
  free(c->weight_prefix);
  if (c->memo != NULL) {
    free(c->memo->state);
    free(c->memo->total);
    free(c->memo);
  }
}

/* The arguments every sizing call needs: a request with a geometry and
 * somewhere to put the answer. */
static kvs_status request_and_out(const char *fn, const kvs_split_request *req, const void *out,
                                  kvs_error *err) {
  if (req == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request is NULL", fn);
  if (req->geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request->geometry is NULL", fn);
  }
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  return KVS_OK;
}

kvs_status kvs_split_window_pages(const kvs_split_request *req, uint64_t num_pages, uint64_t *out,
                                  kvs_error *err) {
  kvs_status checked = request_and_out(__func__, req, out, err);
  if (checked != KVS_OK) return checked;
  kvs_cost_terms t;
  kvs_pool_sizes sizes;
  kvs_status status;
  size_t L = kvs_geometry_layer_count(req->geometry);
  if ((status = kvs_cost_terms_make(req->geometry, 0, L, req->widths, &t, err)) ||
      (status = kvs_pool_sizes_compute_terms(num_pages, &t, req->swa_ratio, req->page,
                                             KVS_WINDOW_FROM_RATIO, &sizes, err))) {
    return status;
  }
  /* The ratio's share (already capped at num_pages), raised to the floor,
   * capped again: the window kvs_cost_solve_num_pages gives this anchor. */
  uint64_t win = sizes.n_win_pages;
  if (win < req->floor_win_pages) win = req->floor_win_pages;
  *out = win < num_pages ? win : num_pages;
  return KVS_OK;
}

kvs_status kvs_split_range_bytes(const kvs_split_request *req, size_t first, size_t end,
                                 uint64_t num_pages, kvs_pool_sizes *sizes,
                                 kvs_pool_breakdown *bytes, kvs_device_footprint *device,
                                 kvs_error *err) {
  if (req == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request is NULL", __func__);
  }
  kvs_cost_terms t;
  kvs_pool_sizes s;
  kvs_pool_breakdown b;
  kvs_device_footprint f;
  uint64_t win;
  kvs_status status;
  if ((status = kvs_split_window_pages(req, num_pages, &win, err)) ||
      (status = kvs_cost_terms_make(req->geometry, first, end, req->widths, &t, err)) ||
      (status =
           kvs_pool_sizes_compute_terms(num_pages, &t, req->swa_ratio, req->page, win, &s, err)) ||
      (status = kvs_pool_sizes_bytes_terms(&s, &t, req->n_scratch, &b, err)) ||
      (status = footprint_of(req, &t, &s, &b, &f, err))) {
    return status;
  }
  if (sizes != NULL) *sizes = s;
  if (bytes != NULL) *bytes = b;
  if (device != NULL) *device = f;
  return KVS_OK;
}

/* The most pages one device with layers [first, end) holds alone under
 * budget: core's exact solve, or, with a footprint, the bisection of
 * kvs_split_range_max_pages. 0 when not even the minimal pool fits. */
static uint64_t max_pages_alone(const split_ctx *c, size_t first, size_t end, uint64_t budget) {
  const kvs_split_request *req = c->req;
  uint64_t pages = 0;
  if (req->footprint == NULL) {
    uint64_t weights = c->weight_prefix[end] - c->weight_prefix[first];
    if (budget <= weights) return 0;
    budget -= weights;
    kvs_cost_terms t = range_terms(c, first, end);
    kvs_pool_sizes alone;
    if (kvs_cost_solve_num_pages_terms(budget, &t, req->swa_ratio, req->floor_win_pages, req->page,
                                       req->n_scratch, &alone, NULL, NULL) != KVS_OK) {
      return 0;
    }
    return kvs_pool_sizes_num_pages(&alone);
  }
  if (kvs_split_range_max_pages(req, first, end, budget, &pages, NULL) != KVS_OK) return 0;
  return pages;
}

kvs_status kvs_split_range_weights(const kvs_split_request *req, size_t first, size_t end,
                                   uint64_t *out, kvs_error *err) {
  kvs_status checked = request_and_out(__func__, req, out, err);
  if (checked != KVS_OK) return checked;
  size_t L = kvs_geometry_layer_count(req->geometry);
  if (first >= end || end > L) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "layer range %zu-%zu outside the %zu layers",
                         first, end, L);
  }
  uint64_t sum = 0;
  for (size_t i = first; req->layer_weight_bytes != NULL && i < end; i++) {
    if (req->layer_weight_bytes[i] > UINT64_MAX - sum) {
      return kvs_error_set(err, KVS_ERR_OVERFLOW, "the weights of layers %zu-%zu pass 2^64 bytes",
                           first, end - 1);
    }
    sum += req->layer_weight_bytes[i];
  }
  *out = sum;
  return KVS_OK;
}

kvs_status kvs_split_range_max_pages(const kvs_split_request *req, size_t first, size_t end,
                                     uint64_t budget, uint64_t *out, kvs_error *err) {
  kvs_status checked = request_and_out(__func__, req, out, err);
  if (checked != KVS_OK) return checked;
  uint64_t weights = 0;
  kvs_status wstatus = kvs_split_range_weights(req, first, end, &weights, err);
  if (wstatus != KVS_OK) return wstatus;
  if (budget <= weights) {
    *out = 0;
    return KVS_OK;
  }
  budget -= weights;
  uint64_t lo = req->floor_win_pages > 2 ? req->floor_win_pages : 2;
  uint64_t hi = budget / (req->page * KVS_INT64_BYTES) + 1; /* never fits: the mapping alone */
  kvs_device_footprint f;
  kvs_status status = kvs_split_range_bytes(req, first, end, lo, NULL, NULL, &f, err);
  if (status != KVS_OK) return status;
  if (hi <= lo || f.total_bytes > budget) {
    *out = 0;
    return KVS_OK;
  }
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (kvs_split_range_bytes(req, first, end, mid, NULL, NULL, &f, NULL) == KVS_OK &&
        f.total_bytes <= budget) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  *out = lo;
  return KVS_OK;
}

static kvs_status check_request(const char *function, const kvs_split_request *req,
                                kvs_error *err) {
  if (req == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request is NULL", function);
  }
  if (req->geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request->geometry is NULL", function);
  }
  if (req->stage_budgets == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request->stage_budgets is NULL",
                         function);
  }
  kvs_status status = kvs_geometry_validate(req->geometry, err);
  if (status != KVS_OK) return status;
  size_t L = kvs_geometry_layer_count(req->geometry);
  if (req->n_stages == 0 || req->n_stages > L || req->n_stages > KVS_MAX_STAGES) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%zu pipeline stages: each stage needs at least one of the %zu layers "
                         "(and at most %d stages are planned)",
                         req->n_stages, L, KVS_MAX_STAGES);
  }
  /* Sizing once through the geometry names a layer whose ratio does not
   * divide the page; the terms check the row widths. */
  kvs_pool_sizes probe;
  kvs_cost_terms t;
  if ((status =
           kvs_pool_sizes_compute(2, req->geometry, req->swa_ratio, req->page, 2, &probe, err)) ||
      (status = kvs_cost_terms_make(req->geometry, 0, L, req->widths, &t, err))) {
    return status;
  }
  return KVS_OK;
}

static kvs_status ctx_init(split_ctx *c, const kvs_split_request *req, kvs_error *err) {
  memset(c, 0, sizeof *c);
  c->req = req;
  c->n_layers = kvs_geometry_layer_count(req->geometry);
  c->n_stages = req->n_stages;
  c->widths = req->widths != NULL ? *req->widths : kvs_row_widths_default(req->geometry);
  size_t L = c->n_layers, S = c->n_stages;
  c->csa_prefix = calloc(L + 1, sizeof *c->csa_prefix);
  c->hca_prefix = calloc(L + 1, sizeof *c->hca_prefix);
  c->reach = calloc((S + 1) * (L + 1), 1);
  c->reach_end = calloc(S * (L + 1), sizeof *c->reach_end);
  c->diff = calloc(L + 2, sizeof *c->diff);
  c->weight_prefix = calloc(L + 1, sizeof *c->weight_prefix);
  c->limits = calloc(S, sizeof *c->limits);
  c->limit_ok = calloc(S, sizeof *c->limit_ok);
  c->memo = calloc(1, sizeof *c->memo);
  if (c->memo != NULL) {
    c->memo->state = calloc((L + 1) * (L + 1), 1);
    c->memo->total = calloc((L + 1) * (L + 1), sizeof *c->memo->total);
  }
  if (!c->csa_prefix || !c->hca_prefix || !c->reach || !c->reach_end || !c->diff || !c->limits ||
      !c->limit_ok || !c->weight_prefix || !c->memo || !c->memo->state || !c->memo->total) {
    ctx_free(c);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory for the split tables");
  }
  for (size_t i = 0; i < L; i++) {
    uint32_t ratio = req->geometry->compress_ratios[i];
    c->csa_prefix[i + 1] = c->csa_prefix[i] + (ratio == KVS_CSA_RATIO);
    c->hca_prefix[i + 1] = c->hca_prefix[i] + (ratio == KVS_HCA_RATIO);
    uint64_t w = req->layer_weight_bytes != NULL ? req->layer_weight_bytes[i] : 0;
    if (w > UINT64_MAX - c->weight_prefix[i]) {
      ctx_free(c);
      return kvs_error_set(err, KVS_ERR_OVERFLOW, "the layer weights pass 2^64 bytes at layer %zu",
                           i);
    }
    c->weight_prefix[i + 1] = c->weight_prefix[i] + w;
  }
  return KVS_OK;
}

/* No split fits the minimal pool: find the smallest uniform raise that
 * would make one fit and name the stage that needs it. */
static kvs_status report_shortfall(split_ctx *c, uint64_t min_pages, uint64_t win,
                                   kvs_split_shortfall *shortfall, kvs_error *err) {
  const kvs_split_request *req = c->req;
  size_t first[KVS_MAX_STAGES], end[KVS_MAX_STAGES];
  uint64_t whole = UINT64_MAX;
  kvs_split_shortfall s = {
      0, 0, c->n_layers, UINT64_MAX, req->stage_budgets[0], min_pages, req->floor_win_pages};
  /* With every budget raised by the whole model's bytes any range fits. */
  if (range_total(c, 0, c->n_layers, min_pages, win, &whole)) {
    uint64_t lo = 0, hi = whole; /* lo does not fit, hi does */
    while (hi - lo > 1) {
      uint64_t mid = lo + (hi - lo) / 2;
      set_limits(c, LIMIT_PLUS_EXTRA, mid);
      if (feasible(c, min_pages, win)) {
        hi = mid;
      } else {
        lo = mid;
      }
    }
    set_limits(c, LIMIT_PLUS_EXTRA, hi);
    feasible(c, min_pages, win);
    split_backtrack(c, first, end);
    uint64_t worst = 0;
    for (size_t st = 0; st < c->n_stages; st++) {
      uint64_t total = UINT64_MAX;
      range_total(c, first[st], end[st], min_pages, win, &total);
      uint64_t budget = req->stage_budgets[st];
      uint64_t excess = total > budget ? total - budget : 0;
      if (excess > worst) {
        worst = excess;
        s.stage = st;
        s.first = first[st];
        s.end = end[st];
        s.needed_bytes = total;
        s.available_bytes = budget;
      }
    }
  }
  if (shortfall != NULL) *shortfall = s;
  return kvs_error_set(err, KVS_ERR_BUDGET_TOO_SMALL,
                       "stage %zu (layers %zu-%zu) has a budget of %llu bytes but needs %llu "
                       "bytes for %sthe minimal pool (%llu pages incl. the window working-set "
                       "floor %llu); give it a larger budget, or lower "
                       "max_running/max_seq_len",
                       s.stage, s.first, s.end - 1, (unsigned long long)s.available_bytes,
                       (unsigned long long)s.needed_bytes,
                       req->layer_weight_bytes != NULL ? "its layers' weights and " : "",
                       (unsigned long long)s.min_pages, (unsigned long long)s.floor_win_pages);
}

/* The smallest stage budget: every device pays 8 x P mapping bytes a
 * page, so past it / (8 x P) pages nothing fits. */
static uint64_t smallest_budget(const split_ctx *c) {
  uint64_t least = UINT64_MAX;
  for (size_t s = 0; s < c->n_stages; s++) {
    if (c->req->stage_budgets[s] < least) least = c->req->stage_budgets[s];
  }
  return least;
}

/* What both solves check first, then their context (ctx_free's to free). */
static kvs_status begin(const char *fn, const kvs_split_request *req, const void *out, split_ctx *c,
                        kvs_error *err) {
  kvs_status status = check_request(fn, req, err);
  if (status != KVS_OK) return status;
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  return ctx_init(c, req, err);
}

kvs_status kvs_split_holds(const kvs_split_request *req, uint64_t num_pages, bool *out,
                           kvs_error *err) {
  split_ctx c;
  kvs_status status = begin(__func__, req, out, &c, err);
  if (status != KVS_OK) return status;
  /* The solve's range: the minimal pool lo must fit, and it answers
   * below hi, the page count no stage's mapping can hold. */
  uint64_t lo = req->floor_win_pages > 2 ? req->floor_win_pages : 2;
  uint64_t hi = smallest_budget(&c) / (req->page * KVS_INT64_BYTES) + 1;
  if (hi <= lo) hi = lo + 1;
  uint64_t want = num_pages > lo ? num_pages : lo;
  uint64_t win = 0;
  bool holds = false;
  set_limits(&c, LIMIT_LESS_SLACK, 0);
  if ((status = kvs_split_window_pages(req, lo, &win, err)) == KVS_OK && feasible(&c, lo, win) &&
      want < hi) {
    holds = want == lo;
    if (!holds && (status = kvs_split_window_pages(req, want, &win, err)) == KVS_OK) {
      holds = feasible(&c, want, win);
    }
  }
  ctx_free(&c);
  if (status == KVS_OK) *out = holds;
  return status;
}

kvs_status kvs_split_solve(const kvs_split_request *req, kvs_split *out,
                           kvs_split_shortfall *shortfall, kvs_error *err) {
  split_ctx c;
  kvs_status status = begin(__func__, req, out, &c, err);
  if (status != KVS_OK) return status;

  /* The same minimal anchor as the single-device solve. */
  uint64_t lo = req->floor_win_pages > 2 ? req->floor_win_pages : 2;
  uint64_t win = 0;
  if ((status = kvs_split_window_pages(req, lo, &win, err)) != KVS_OK) goto done;
  set_limits(&c, LIMIT_LESS_SLACK, 0);
  if (!feasible(&c, lo, win)) {
    status = report_shortfall(&c, lo, win, shortfall, err);
    goto done;
  }
  /* Every device pays 8*P mapping bytes per page, so past the smallest
   * budget / (8*P) nothing fits: hi never fits. */
  uint64_t min_budget = smallest_budget(&c);
  uint64_t hi = min_budget / (req->page * KVS_INT64_BYTES) + 1;
  if (hi <= lo) hi = lo + 1;
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    uint64_t w;
    if ((status = kvs_split_window_pages(req, mid, &w, err)) != KVS_OK) goto done;
    if (feasible(&c, mid, w)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  uint64_t num_pages = lo;
  if ((status = kvs_split_window_pages(req, num_pages, &win, err)) != KVS_OK) goto done;

  /* Tie-break: among the splits holding num_pages, the one whose smallest
   * headroom is largest. Slack 0 fits; slack min_budget + 1 cannot. */
  uint64_t slack_lo = 0, slack_hi = min_budget + 1;
  while (slack_hi - slack_lo > 1) {
    uint64_t mid = slack_lo + (slack_hi - slack_lo) / 2;
    set_limits(&c, LIMIT_LESS_SLACK, mid);
    if (feasible(&c, num_pages, win)) {
      slack_lo = mid;
    } else {
      slack_hi = mid;
    }
  }
  set_limits(&c, LIMIT_LESS_SLACK, slack_lo);
  feasible(&c, num_pages, win); /* refills the reach tables for the backtrack */

  size_t first[KVS_MAX_STAGES], end[KVS_MAX_STAGES];
  split_backtrack(&c, first, end);
  kvs_split result;
  memset(&result, 0, sizeof result);
  result.num_pages = num_pages;
  result.n_win_pages = win;
  result.n_stages = c.n_stages;
  for (size_t s = 0; s < c.n_stages; s++) {
    kvs_stage_plan *st = &result.stages[s];
    st->first = first[s];
    st->end = end[s];
    st->budget = req->stage_budgets[s];
    st->weight_bytes = c.weight_prefix[end[s]] - c.weight_prefix[first[s]];
    /* The reported bytes come from core/ alone: the terms it builds, the
     * sizes it computes, the bytes it prices; the footprint from them. */
    if ((status =
             kvs_cost_terms_make(req->geometry, first[s], end[s], req->widths, &st->terms, err)) ||
        (status = kvs_pool_sizes_compute_terms(num_pages, &st->terms, req->swa_ratio, req->page,
                                               win, &st->sizes, err)) ||
        (status =
             kvs_pool_sizes_bytes_terms(&st->sizes, &st->terms, req->n_scratch, &st->bytes, err)) ||
        (status = footprint_of(req, &st->terms, &st->sizes, &st->bytes, &st->device, err))) {
      goto done;
    }
    st->max_pages = max_pages_alone(&c, first[s], end[s], st->budget);
  }
  result.full_token = result.stages[0].sizes.full_token;
  *out = result;
done:
  ctx_free(&c);
  return status;
}

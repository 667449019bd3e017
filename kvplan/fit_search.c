#include "kvplan/fit_search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/node_setup.h"
#include "shard/plan_overhead.h"
#include "kvplan/plan_weights.h"
#include "kvplan/tool_io.h"

/* ---- kvshard's own plan ---- */

/* Whole plans for every probe (the reference), or stages alone. */
static _Thread_local bool g_exhaustive;

void fit_search_set_exhaustive(bool exhaustive) { g_exhaustive = exhaustive; }

/* Whether GPUs a and b have the same memory terms (a budget at any share
 * is then the same). */
static bool same_terms(const kvs_memory_budget *a, const kvs_memory_budget *b) {
  return a->memory_bytes == b->memory_bytes && a->reserve_bytes == b->reserve_bytes;
}

/* The row's stages: where its ranks sit (the plan's own layout of them)
 * and, per stage, one GPU of each memory terms its GPUs have. */
static kvs_status layout_stages(fit_cluster *c, const fit_row *row, kvs_error *err) {
  const kvs_parallel *l = &row->layout;
  kvs_status status =
      kvs_rank_layout_cluster(c->gpus, c->n_gpus, l->tp, l->pp, false, c->slots, NULL, err);
  if (status != KVS_OK) return status;
  if (l->pp > KVS_MAX_STAGES) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "pp %zu exceeds the %d stages planned",
                         l->pp, KVS_MAX_STAGES);
  }
  size_t k = 0;
  for (size_t s = 0; s < l->pp; s++) {
    c->stage_first[s] = k;
    for (size_t r = 0; r < c->n_gpus; r++) {
      if (c->slots[r].pp_stage != s) continue;
      size_t g = c->slots[r].gpu;
      bool seen = false;
      for (size_t i = c->stage_first[s]; i < k && !seen; i++) {
        seen = same_terms(&c->memory[c->stage_gpus[i]], &c->memory[g]);
      }
      if (!seen) c->stage_gpus[k++] = g;
    }
  }
  c->stage_first[l->pp] = k;
  return KVS_OK;
}

/* The requests' share of the layout: pages, the window floor they need and
 * one ring slot each. */
static kvs_status size_requests(fit_cluster *c, fit_row *row, uint64_t requests, kvs_error *err) {
  const kvs_plan_options *o = c->options;
  row->requests = requests;
  row->pages = (c->context + o->page - 1) / o->page * requests;
  kvs_plan_model_place_rings(c->m, o->state_rings, requests > 0 ? requests : 1);
  return kvs_cost_window_floor_pages(c->context, requests > 0 ? requests : 1, o->radix, o->page,
                                     &row->floor_pages, err);
}

int fit_size_row(fit_cluster *c, fit_row *row) {
  kvs_error err;
  size_t n_planned = kvs_geometry_layer_count(&c->m->geometry);
  const kvs_parallel *l = &row->layout;
  if ((c->weights != NULL &&
       kvs_plan_layer_weights(c->weights, n_planned, l->tp, kvs_parallel_moe_gpus(l), c->layer,
                              &err) != KVS_OK) ||
      size_requests(c, row, row->requests, &err) != KVS_OK ||
      layout_stages(c, row, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan fit: %s\n", err.message);
    return 2;
  }
  return 0;
}

static kvs_plan_request request_of(const fit_cluster *c, const fit_row *row, bool weights) {
  const kvs_plan_model *m = c->m;
  kvs_plan_request r = {.geometry = &m->geometry,
                        .widths = &m->widths,
                        .swa_ratio = m->swa_ratio,
                        .page = c->options->page,
                        .floor_win_pages = row->floor_pages,
                        .n_scratch = c->options->scratch,
                        .tp = row->layout.tp,
                        .pp = row->layout.pp,
                        .layer_weight_bytes = weights && c->weights != NULL ? c->layer : NULL};
  return r;
}

/* Does a plan on c->budgets (one per GPU) hold the row's pages? The whole
 * plan; heaviest (may be NULL) gets its heaviest rank's weights. */
static bool holds_plan(fit_cluster *c, const fit_row *row, bool weights, uint64_t *heaviest) {
  kvs_plan_request request = request_of(c, row, weights);
  kvs_deployment_t plan = NULL;
  bool ok =
      kvs_deployment_make(&request, c->gpus, c->n_gpus, c->budgets, &plan, NULL, NULL) == KVS_OK &&
      kvs_deployment_split(plan)->num_pages >= row->pages;
  for (size_t r = 0; ok && heaviest != NULL && r < kvs_deployment_rank_count(plan); r++) {
    uint64_t w = kvs_deployment_rank(plan, r)->weight_bytes;
    if (r == 0 || w > *heaviest) *heaviest = w;
  }
  kvs_deployment_destroy(plan);
  return ok;
}

/* The same answer from the stages' tightest budgets, c->stage_budgets. */
static bool holds_stages(fit_cluster *c, const fit_row *row, bool weights) {
  kvs_plan_request request = request_of(c, row, weights);
  bool ok = false;
  return kvs_deployment_holds(&request, c->stage_budgets, row->pages, &ok, NULL) == KVS_OK && ok;
}

/* Budgets at share f by the one rule, f not held to 1: floor(memory x f)
 * - reserve on every GPU (the weights are priced per layer by the plan);
 * false when some GPU has nothing left. */
static bool set_fraction(fit_cluster *c, double f) {
  for (size_t g = 0; g < c->n_gpus; g++) {
    if (!kvs_memory_budget_bytes(c->memory[g].memory_bytes, f, 0, c->memory[g].reserve_bytes,
                                 &c->budgets[g])) {
      return false;
    }
  }
  return true;
}

/* The same per stage: its tightest GPU's budget at share f, from one GPU
 * of each memory terms it has (every GPU is in a stage, so false exactly
 * when set_fraction is). */
static bool set_fraction_stages(fit_cluster *c, const fit_row *row, double f) {
  for (size_t s = 0; s < row->layout.pp; s++) {
    for (size_t i = c->stage_first[s]; i < c->stage_first[s + 1]; i++) {
      const kvs_memory_budget *m = &c->memory[c->stage_gpus[i]];
      uint64_t b;
      if (!kvs_memory_budget_bytes(m->memory_bytes, f, 0, m->reserve_bytes, &b)) return false;
      if (i == c->stage_first[s] || b < c->stage_budgets[s]) c->stage_budgets[s] = b;
    }
  }
  return true;
}

/* The probes: the whole plan where the reference is asked for or a rank's
 * weights are read, else the stages. */
static bool holds_uniform(fit_cluster *c, const fit_row *row, uint64_t budget) {
  if (g_exhaustive) {
    for (size_t g = 0; g < c->n_gpus; g++) c->budgets[g] = budget;
    return holds_plan(c, row, false, NULL);
  }
  for (size_t s = 0; s < row->layout.pp; s++) c->stage_budgets[s] = budget;
  return holds_stages(c, row, false);
}

static bool holds_fraction(fit_cluster *c, const fit_row *row, double f, uint64_t *heaviest) {
  if (g_exhaustive || heaviest != NULL)
    return set_fraction(c, f) && holds_plan(c, row, true, heaviest);
  return set_fraction_stages(c, row, f) && holds_stages(c, row, true);
}

/* The smallest uniform KV budget: the whole stack's pool at the pages
 * needed always suffices for one rank, and far more than that for any. */
static void min_budget(fit_cluster *c, fit_row *row) {
  const uint64_t most = UINT64_C(1) << 52;
  /* One probe at the largest budget tells a layout out of reach. */
  row->budget_found = holds_uniform(c, row, most);
  uint64_t lo = 0, hi = UINT64_C(1) << 30;
  while (row->budget_found && hi < most && !holds_uniform(c, row, hi)) {
    lo = hi;
    hi *= 2;
  }
  while (row->budget_found && hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (holds_uniform(c, row, mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  row->min_budget = hi;
}

void fit_kvshard_demand(fit_cluster *c, fit_row *row) {
  min_budget(c, row);
  /* The smallest share of memory, weights and reserve included. */
  double flo = 0.0, fhi = FIT_MAX_FRACTION;
  row->fraction_found = holds_fraction(c, row, fhi, NULL);
  for (int i = 0; row->fraction_found && i < 64 && fhi - flo > 1e-9; i++) {
    double mid = 0.5 * (flo + fhi);
    if (holds_fraction(c, row, mid, NULL)) {
      fhi = mid;
    } else {
      flo = mid;
    }
  }
  /* Reported rounded up to 4 decimals, so the printed fraction holds. */
  row->min_fraction = ceil(fhi * 10000.0 - 1e-9) / 10000.0;
  if (row->fraction_found && !holds_fraction(c, row, row->min_fraction, &row->weights_bytes)) {
    row->min_fraction = fhi;
    holds_fraction(c, row, fhi, &row->weights_bytes);
  }
  row->fits = row->fraction_found && row->min_fraction <= c->fraction;
  uint64_t least = UINT64_MAX;
  for (size_t g = 0; g < c->n_gpus; g++) {
    if (c->memory[g].memory_bytes < least) least = c->memory[g].memory_bytes;
  }
  row->margin_bytes = row->fraction_found ? (int64_t)floor((double)least * c->fraction) -
                                                (int64_t)floor((double)least * row->min_fraction)
                                          : INT64_MIN;
}

/* At the share capacity mode set (per GPU and per stage). */
static bool holds_requests(fit_cluster *c, fit_row *row, uint64_t requests) {
  return size_requests(c, row, requests, NULL) == KVS_OK &&
         (g_exhaustive ? holds_plan(c, row, true, NULL) : holds_stages(c, row, true));
}

/* The largest r in [0, FIT_MAX_REQUESTS] with ok(r), ok falling once. */
static uint64_t most_requests(bool (*ok)(void *, uint64_t), void *ctx) {
  if (!ok(ctx, 1)) return 0;
  uint64_t lo = 1, hi = 2;
  while (hi <= FIT_MAX_REQUESTS && ok(ctx, hi)) lo = hi, hi *= 2;
  if (hi > FIT_MAX_REQUESTS) hi = FIT_MAX_REQUESTS + 1;
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (ok(ctx, mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

typedef struct capacity_probe {
  fit_cluster *c;
  fit_row *row;
} capacity_probe;

static bool kvshard_ok(void *ctx, uint64_t requests) {
  capacity_probe *p = ctx;
  return holds_requests(p->c, p->row, requests);
}

void fit_kvshard_capacity(fit_cluster *c, fit_row *row) {
  capacity_probe probe = {c, row};
  row->fraction_found = set_fraction(c, c->fraction) && set_fraction_stages(c, row, c->fraction);
  row->max_requests = row->fraction_found ? most_requests(kvshard_ok, &probe) : 0;
  row->fits = row->max_requests > 0;
  /* The row shows the pages and floor of what it holds. */
  size_requests(c, row, row->max_requests, NULL);
}

void fit_kvshard_buffers(fit_cluster *c, fit_row *row) {
  row->buffers_priced = false;
  bool answer = row->max_requests > 0 || (row->requests > 0 && row->fraction_found);
  if (!answer) return;
  double f =
      row->max_requests > 0 || row->min_fraction < c->fraction ? c->fraction : row->min_fraction;
  if (!set_fraction(c, f)) return;
  kvs_plan_request request = request_of(c, row, true);
  kvs_deployment_t plan = NULL;
  if (kvs_deployment_make(&request, c->gpus, c->n_gpus, c->budgets, &plan, NULL, NULL) != KVS_OK) {
    return;
  }
  kvs_node_deployment d =
      kvs_node_deployment_planned(plan, c->n_gpus, row->requests, c->options->radix, c->context);
  size_t most = 0;
  if (!g_exhaustive &&
      kvs_deployment_overhead_most(plan, c->gpus, &d, &most, &row->buffers, NULL) == KVS_OK) {
    row->buffers_priced = true;
    kvs_deployment_destroy(plan);
    return;
  }
  /* Rank by rank (the reference; or where some rank cannot be priced:
   * the others answer). */
  for (size_t r = 0; r < kvs_deployment_rank_count(plan); r++) {
    kvs_node_overhead o;
    if (kvs_deployment_overhead(plan, c->gpus, r, &d, &o, NULL) != KVS_OK) continue;
    if (!row->buffers_priced || o.total_bytes > row->buffers.total_bytes) row->buffers = o;
    row->buffers_priced = true;
  }
  kvs_deployment_destroy(plan);
}

/* ---- SGLang's sizing ---- */

/* One SGLang layout: its memory, and the options and demand for a count
 * of requests per group. */
typedef struct engine_probe {
  fit_cluster *c;
  fit_row *row;
  kvs_engine_memory memory;
  kvs_sglang_options options;
  uint64_t max_running; /* over every group */
  kvs_engine_pools pools;
  const char *why;
} engine_probe;

/* SGLang's default --max-running-requests unless the demand needs more:
 * each group's worker is given max_running // dp. */
static void engine_requests(engine_probe *e, uint64_t requests) {
  size_t dp = e->row->layout.dp;
  uint64_t needed = requests * dp;
  e->max_running =
      needed > KVS_ENGINE_DEFAULT_MAX_RUNNING ? needed : KVS_ENGINE_DEFAULT_MAX_RUNNING;
  e->options = kvs_engine_options(e->c->options, dp, e->max_running);
}

/* Do SGLang's pools at fraction f hold `requests` per group? */
static bool engine_holds(engine_probe *e, double f, uint64_t requests) {
  engine_requests(e, requests);
  if (kvs_engine_memory_at(&e->memory, f, NULL) != KVS_OK) return false;
  if (e->memory.rule.no_kv) {
    e->why = "the weights leave the KV cache no memory";
    return false;
  }
  size_t pp = e->row->layout.pp;
  uint64_t bytes[KVS_MAX_STAGES];
  for (size_t s = 0; s < pp; s++) bytes[s] = e->memory.rule.rest_bytes;
  if (kvs_engine_pools_make(e->c->m, &e->options, pp, bytes, &e->pools, NULL, NULL) != KVS_OK) {
    e->why = "SGLang's configurator refuses these options";
    return false;
  }
  kvs_engine_demand d = kvs_engine_demand_of(e->c->m, &e->options, requests, e->c->context);
  return kvs_engine_holds(&e->pools, &d, &e->why);
}

/* The layout's memory under SGLang's rule at its default fraction. */
static int engine_setup(engine_probe *e) {
  fit_cluster *c = e->c;
  kvs_engine_gpus gpus = {c->gpus, c->n_gpus, c->free_given, c->memory_given};
  kvs_engine_weights weights = {0, c->weights != NULL ? c->layer : NULL};
  kvs_error err;
  if (kvs_engine_memory_make(c->m, &e->row->layout, &gpus, &weights, -1.0, &e->memory, &err) !=
      KVS_OK) {
    /* A layout SGLang cannot run (more stages than layers for its own
     * split, a GPU without memory): said in the row, not fatal. */
    snprintf(e->row->sglang_why, sizeof e->row->sglang_why, "%.180s", err.message);
    return 1;
  }
  e->row->sglang_default = e->memory.by_default.mem_fraction_static;
  return 0;
}

static void say_why(fit_row *row, const char *why, double f) {
  snprintf(row->sglang_why, sizeof row->sglang_why, "at --mem-fraction-static %.3f %s", f,
           why != NULL ? why : "nothing is held");
}

int fit_sglang_demand(fit_cluster *c, fit_row *row) {
  engine_probe e = {.c = c, .row = row};
  if (engine_setup(&e) != 0) return 0;
  if (!engine_holds(&e, 1.0, row->requests)) {
    say_why(row, e.why, 1.0);
    return 0;
  }
  unsigned lo = 0, hi = 1000; /* thousandths: lo never holds (f = 0), hi does */
  while (hi - lo > 1) {
    unsigned mid = (lo + hi) / 2;
    if (engine_holds(&e, (double)mid / 1000.0, row->requests)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  engine_holds(&e, (double)hi / 1000.0, row->requests);
  row->sglang_found = true;
  row->sglang_fraction = (double)hi / 1000.0;
  row->sglang_full = e.pools.least.full;
  row->sglang_max_running = e.max_running;
  double judge = c->engine_fraction > 0.0 ? c->engine_fraction : row->sglang_default;
  row->sglang_fits = row->sglang_fraction <= judge;
  return 0;
}

typedef struct capacity_engine {
  engine_probe *e;
  double f;
} capacity_engine;

static bool engine_ok(void *ctx, uint64_t requests) {
  capacity_engine *p = ctx;
  return engine_holds(p->e, p->f, requests);
}

int fit_sglang_capacity(fit_cluster *c, fit_row *row) {
  engine_probe e = {.c = c, .row = row};
  if (engine_setup(&e) != 0) return 0;
  double f = c->engine_fraction > 0.0 ? c->engine_fraction : row->sglang_default;
  capacity_engine probe = {&e, f};
  row->sglang_fraction = f;
  row->sglang_max_requests = f > 0.0 && f <= 1.0 ? most_requests(engine_ok, &probe) : 0;
  row->sglang_found = row->sglang_max_requests > 0;
  row->sglang_fits = row->sglang_found;
  if (row->sglang_found) {
    engine_holds(&e, f, row->sglang_max_requests);
    row->sglang_full = e.pools.least.full;
    row->sglang_max_running = e.max_running;
  } else {
    engine_holds(&e, f, 1);
    say_why(row, e.why, f);
  }
  return 0;
}

/* kvplan solve: the largest pool one device's budget buys, byte-exact. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cost_model.h"
#include "kvplan/args.h"
#include "kvplan/kvplan.h"
#include "kvplan/plan_json.h"
#include "kvplan/plan_options.h"
#include "kvplan/sglang_report.h"
#include "kvplan/tool_io.h"

enum { OPT_BUDGET = 1, OPT_JSON, OPT_SWA_SWEEP };

static void usage(FILE *out) {
  fprintf(out,
          "usage: kvplan solve --budget BYTES [flags]\n"
          "  --budget BYTES          device budget for the KV pool (80GiB, 85899345920, ...)\n"
          "%s"
          "  --swa-sweep             what each window ratio buys: history tokens against the\n"
          "                          window cache (window pages beyond the floor)\n"
          "  --json                  one JSON object on the last line of stdout\n",
          kvs_plan_options_help);
}

static json_t *layers_json(const kvs_pool_sizes *sizes, const kvs_geometry *g) {
  json_t *layers = json_array();
  for (size_t layer = 0; layer < kvs_geometry_layer_count(g); layer++) {
    bool present = false;
    kvs_layer_sizes s;
    kvs_pool_sizes_layer(sizes, g, layer, &present, &s, NULL);
    if (!present) {
      json_array_append_new(layers, json_null());
      continue;
    }
    json_t *entry = json_object();
    json_object_set_new(entry, "ratio", kvs_json_u64(s.ratio));
    json_object_set_new(entry, "ring_size", kvs_json_u64(s.ring_size));
    json_object_set_new(entry, "cmp_blocks", kvs_json_u64(s.cmp_blocks));
    json_object_set_new(entry, "idx_blocks",
                        s.has_indexer ? kvs_json_u64(s.idx_blocks) : json_null());
    json_object_set_new(entry, "state_slots", kvs_json_u64(s.state_slots));
    json_object_set_new(entry, "idx_state_slots",
                        s.has_indexer ? kvs_json_u64(s.idx_state_slots) : json_null());
    json_array_append_new(layers, entry);
  }
  return layers;
}

static void print_json(json_t *object) {
  char *text = json_dumps(object, JSON_COMPACT);
  fprintf(kvs_tool_out(), "%s\n", text);
  free(text);
  json_decref(object);
}

static void print_table(const kvs_plan_model *m, const kvs_plan_options *o, uint64_t budget,
                        const kvs_pool_sizes *sizes, const kvs_pool_breakdown *b) {
  char buf[32], buf2[32];
  const kvs_geometry *g = &m->geometry;
  uint64_t floor_pages = m->floor_pages;
  kvs_plan_model_print(kvs_tool_out(), m, o);
  fprintf(kvs_tool_out(), "budget      %s (%llu bytes)\n",
          kvs_format_bytes(budget, buf, sizeof buf), (unsigned long long)budget);
  fprintf(kvs_tool_out(), "num_pages   %llu pages of %llu = %llu tokens of history\n",
          (unsigned long long)kvs_pool_sizes_num_pages(sizes), (unsigned long long)sizes->page,
          (unsigned long long)sizes->full_token);
  fprintf(kvs_tool_out(), "window      %llu pages (%llu slots), floor %llu pages, swa_ratio %g\n",
          (unsigned long long)sizes->n_win_pages, (unsigned long long)sizes->n_win_slots,
          (unsigned long long)floor_pages, sizes->swa_ratio);
  fprintf(kvs_tool_out(), "pool        %s (%llu bytes), headroom %s\n\n",
          kvs_format_bytes(b->total, buf, sizeof buf), (unsigned long long)b->total,
          kvs_format_bytes(budget - b->total, buf2, sizeof buf2));
  const struct {
    const char *name;
    uint64_t bytes;
  } tiers[] = {{"window", b->window},  {"compressed", b->compressed},   {"indexer", b->indexer},
               {"state", b->state},    {"index_state", b->index_state}, {"mapping", b->mapping},
               {"scratch", b->scratch}};
  fprintf(kvs_tool_out(), "%-12s %20s %12s %7s\n", "tier", "bytes", "", "share");
  for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++) {
    fprintf(kvs_tool_out(), "%-12s %20llu %12s %6.2f%%\n", tiers[i].name,
            (unsigned long long)tiers[i].bytes, kvs_format_bytes(tiers[i].bytes, buf, sizeof buf),
            b->total ? 100.0 * (double)tiers[i].bytes / (double)b->total : 0.0);
  }
  fprintf(kvs_tool_out(), "\n%-6s %-5s %5s %12s %12s %12s %15s\n", "layer", "kind", "ring",
          "cmp_blocks", "idx_blocks", "state_slots", "idx_state_slots");
  for (size_t layer = 0; layer < kvs_geometry_layer_count(g); layer++) {
    bool present = false;
    kvs_layer_sizes s;
    kvs_pool_sizes_layer(sizes, g, layer, &present, &s, NULL);
    if (!present) {
      fprintf(kvs_tool_out(), "%-6zu %-5s %5s %12s %12s %12s %15s\n", layer, "none", "-", "-", "-",
              "-", "-");
      continue;
    }
    char idx[24] = "-", idx_state[24] = "-";
    if (s.has_indexer) {
      snprintf(idx, sizeof idx, "%llu", (unsigned long long)s.idx_blocks);
      snprintf(idx_state, sizeof idx_state, "%llu", (unsigned long long)s.idx_state_slots);
    }
    fprintf(kvs_tool_out(), "%-6zu %-5s %5llu %12llu %12s %12llu %15s\n", layer,
            s.has_indexer ? "CSA" : "HCA", (unsigned long long)s.ring_size,
            (unsigned long long)s.cmp_blocks, idx, (unsigned long long)s.state_slots, idx_state);
  }
}

typedef struct solve_args {
  bool json;
  bool sweep;
  bool have_budget;
  uint64_t budget;
} solve_args;

static kvs_status solve_flag(void *ctx, int id, const char *value, kvs_error *err) {
  solve_args *a = ctx;
  if (id == OPT_JSON) {
    a->json = true;
    return KVS_OK;
  }
  if (id == OPT_SWA_SWEEP) {
    a->sweep = true;
    return KVS_OK;
  }
  a->have_budget = true;
  return kvs_deploy_size_parse(&kvs_deploy_flags_table[KVS_DEPLOY_BUDGET], "--budget", value,
                               &a->budget, err);
}

/* The SGLang object for --engine sglang on the same budget, or NULL (with
 * the reason on stderr, *ok false) when it cannot be computed. */
static json_t *sglang_json(const kvs_plan_options *o, const kvs_plan_model *m, uint64_t budget,
                           kvs_sglang_pools *pools, bool *ok) {
  kvs_sglang_options so = kvs_plan_options_sglang(o);
  kvs_error err;
  if (kvs_sglang_report_compute(m, &so, 0, kvs_geometry_layer_count(&m->config.geometry), budget,
                                pools, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan solve: --engine sglang: %s\n", err.message);
    *ok = false;
    return NULL;
  }
  *ok = true;
  return kvs_sglang_report_json(pools, &so, budget);
}

/* A budget below the minimal pool: exit 1, the JSON error object first
 * (with --json) and the message last. A minimal pool past the 4 EiB any
 * byte flag may give is no budget shortfall but options no device could
 * hold (a page of 2^40 tokens): bad usage, exit 2, no object. Takes sglang. */
static int report_shortfall(const kvs_budget_shortfall *shortfall, const kvs_error *err,
                            json_t *sglang, bool json) {
  if (shortfall->needed_bytes > KVS_MAX_BYTE_COUNT) {
    json_decref(sglang);
    fprintf(kvs_tool_err(),
            "kvplan solve: the minimal pool (%llu pages, the window floor %llu) needs %llu "
            "bytes, past the %llu bytes (4 EiB) any budget may give: lower --page, "
            "--max-running, --max-seq-len or the geometry\n",
            (unsigned long long)shortfall->min_pages,
            (unsigned long long)shortfall->floor_win_pages,
            (unsigned long long)shortfall->needed_bytes, (unsigned long long)KVS_MAX_BYTE_COUNT);
    return 2;
  }
  if (json) {
    json_t *object = json_object();
    json_object_set_new(object, "error", json_string("budget_too_small"));
    json_object_set_new(object, "available_bytes", kvs_json_u64(shortfall->available_bytes));
    json_object_set_new(object, "needed_bytes", kvs_json_u64(shortfall->needed_bytes));
    json_object_set_new(object, "min_pages", kvs_json_u64(shortfall->min_pages));
    json_object_set_new(object, "floor_win_pages", kvs_json_u64(shortfall->floor_win_pages));
    if (sglang != NULL) json_object_set_new(object, "sglang", sglang);
    print_json(object);
  } else {
    json_decref(sglang);
  }
  fflush(kvs_tool_out());
  fprintf(kvs_tool_err(), "kvplan solve: %s\n", err->message);
  return 1;
}

static int solve(const kvs_plan_options *o, kvs_plan_model *m, uint64_t budget, bool json) {
  kvs_error err;
  if (kvs_plan_options_resolve(o, m, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan solve: %s\n", err.message);
    return 2;
  }
  const kvs_geometry *g = &m->geometry;
  kvs_cost_terms terms;
  kvs_pool_sizes sizes;
  kvs_budget_shortfall shortfall;
  /* The library's one planning entry point, so an engine calling it gets
   * this answer byte for byte. */
  kvs_plan_model_window_cache(m, o, budget);
  kvs_solve_options so = kvs_plan_options_solve(o, m);
  kvs_status status = kvs_cost_solve_terms(g, &so, &terms, &err);
  if (status == KVS_OK) {
    status = kvs_cost_solve(budget, g, &so, &sizes, &shortfall, &err);
  }
  kvs_sglang_pools pools;
  bool sglang_ok = true;
  json_t *sglang = NULL;
  if (o->engine_sglang && (status == KVS_OK || status == KVS_ERR_BUDGET_TOO_SMALL)) {
    kvs_error keep = err; /* the sizing's message survives the SGLang call */
    sglang = sglang_json(o, m, budget, &pools, &sglang_ok);
    err = keep;
    if (!sglang_ok) return 2;
  }
  if (status == KVS_ERR_BUDGET_TOO_SMALL) return report_shortfall(&shortfall, &err, sglang, json);
  kvs_pool_breakdown breakdown;
  if (status == KVS_OK)
    status = kvs_pool_sizes_bytes_terms(&sizes, &terms, o->scratch, &breakdown, &err);
  if (status != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan solve: %s\n", err.message);
    json_decref(sglang);
    return 2;
  }
  if (json) {
    json_t *object = json_object();
    json_object_set_new(object, "num_pages", kvs_json_u64(kvs_pool_sizes_num_pages(&sizes)));
    json_object_set_new(object, "full_token", kvs_json_u64(sizes.full_token));
    json_object_set_new(object, "n_win_pages", kvs_json_u64(sizes.n_win_pages));
    json_object_set_new(object, "n_win_slots", kvs_json_u64(sizes.n_win_slots));
    json_object_set_new(object, "pool_bytes", kvs_json_u64(breakdown.total));
    json_object_set_new(object, "layers", layers_json(&sizes, g));
    if (sglang != NULL) json_object_set_new(object, "sglang", sglang);
    print_json(object);
  } else {
    print_table(m, o, budget, &sizes, &breakdown);
    if (sglang != NULL) {
      kvs_sglang_options so = kvs_plan_options_sglang(o);
      kvs_sglang_report_print(kvs_tool_out(), &pools, &so, budget, sizes.full_token, o->kv_dtype);
      json_decref(sglang);
    }
  }
  return 0;
}

/* What the window ratio buys: for each ratio the history the budget holds
 * and the window pages beyond the working-set floor, which is what keeps
 * recently used prefixes' windows cached for reuse (radix hits). */
static int sweep(const kvs_plan_options *o, kvs_plan_model *m, uint64_t budget, bool json) {
  static const double ratios[] = {0.0, 0.01, 0.02, 0.05, 0.1, 0.125, 0.2, 0.3, 0.5};
  kvs_error err;
  if (kvs_plan_options_resolve(o, m, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan solve: %s\n", err.message);
    return 2;
  }
  kvs_solve_options so = kvs_plan_options_solve(o, m);
  kvs_cost_terms terms;
  if (kvs_cost_solve_terms(&m->geometry, &so, &terms, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan solve: %s\n", err.message);
    return 2;
  }
  json_t *rows = json_array();
  if (!json) {
    kvs_plan_model_print(kvs_tool_out(), m, o);
    fprintf(kvs_tool_out(), "budget      %llu bytes, window floor %llu pages of %llu\n\n",
            (unsigned long long)budget, (unsigned long long)m->floor_pages,
            (unsigned long long)o->page);
    fprintf(kvs_tool_out(), "%9s %14s %12s %18s %22s\n", "swa_ratio", "history", "window pages",
            "cache pages", "cache tokens");
  }
  int rc = 0;
  for (size_t i = 0; i < sizeof ratios / sizeof ratios[0]; i++) {
    kvs_pool_sizes sizes;
    so.swa_ratio = ratios[i];
    if (kvs_cost_solve(budget, &m->geometry, &so, &sizes, NULL, &err) != KVS_OK) {
      fprintf(kvs_tool_err(), "kvplan solve: swa ratio %g: %s\n", ratios[i], err.message);
      rc = 1;
      break;
    }
    uint64_t cache = sizes.n_win_pages - m->floor_pages;
    if (json) {
      json_t *row = json_object();
      json_object_set_new(row, "swa_ratio", json_real(ratios[i]));
      json_object_set_new(row, "full_token", kvs_json_u64(sizes.full_token));
      json_object_set_new(row, "n_win_pages", kvs_json_u64(sizes.n_win_pages));
      json_object_set_new(row, "cache_pages", kvs_json_u64(cache));
      json_array_append_new(rows, row);
    } else {
      fprintf(kvs_tool_out(), "%9g %14llu %12llu %18llu %22llu\n", ratios[i],
              (unsigned long long)sizes.full_token, (unsigned long long)sizes.n_win_pages,
              (unsigned long long)cache, (unsigned long long)(cache * o->page));
    }
  }
  if (json && rc == 0) {
    json_t *object = json_object();
    json_object_set_new(object, "floor_win_pages", kvs_json_u64(m->floor_pages));
    json_object_set_new(object, "swa_sweep", rows);
    print_json(object);
  } else {
    json_decref(rows);
  }
  return rc;
}

int kvs_kvplan_solve(int argc, char **argv) {
  static const struct option own[] = {
      {"budget", required_argument, NULL, OPT_BUDGET},
      {"json", no_argument, NULL, OPT_JSON},
      {"swa-sweep", no_argument, NULL, OPT_SWA_SWEEP},
  };
  kvs_plan_options options;
  kvs_plan_options_init(&options);
  solve_args a = {false, false, false, 0};
  /* No deployment flag: one device's budget is its own --budget, read as
   * the table reads every budget. */
  const kvs_plan_parser parser = {
      "kvplan solve", own, sizeof own / sizeof own[0], solve_flag, &a, 0, NULL, &options, usage};
  int rc = kvs_plan_options_parse(&parser, argc, argv);
  if (rc != 0) return rc < 0 ? 0 : rc;
  if (!a.have_budget) {
    fprintf(kvs_tool_err(),
            "kvplan solve: --budget is required (kvplan solve --help lists every flag)\n");
    return 2;
  }
  kvs_plan_model *model = malloc(sizeof *model);
  if (model == NULL) {
    fprintf(kvs_tool_err(), "kvplan solve: out of memory\n");
    return 1;
  }
  rc = a.sweep ? (options.have_swa_ratio || options.have_window_cache
                      ? (fprintf(kvs_tool_err(),
                                 "kvplan solve: --swa-sweep tries the ratios itself: drop "
                                 "--swa-ratio and --window-cache\n"),
                         2)
                      : sweep(&options, model, a.budget, a.json))
               : solve(&options, model, a.budget, a.json);
  free(model);
  return rc;
}

/* kvplan solve: the largest pool one device's budget buys, byte-exact. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/cost_model.h"
#include "tools/args.h"
#include "tools/kvplan.h"
#include "tools/plan_json.h"
#include "tools/plan_options.h"

enum { OPT_BUDGET = 1, OPT_JSON };

static void usage(FILE *out) {
  fprintf(out,
          "usage: kvplan solve --budget BYTES [flags]\n"
          "  --budget BYTES          device budget for the KV pool (80GiB, 85899345920, ...)\n"
          "%s"
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
  printf("%s\n", text);
  free(text);
  json_decref(object);
}

static void print_table(const char *model, const kvs_geometry *g, uint64_t budget,
                        uint64_t floor_pages, const kvs_pool_sizes *sizes,
                        const kvs_pool_breakdown *b) {
  char buf[32], buf2[32];
  kvs_cost_terms t;
  kvs_cost_terms_make(g, 0, kvs_geometry_layer_count(g), NULL, &t, NULL);
  printf(
      "model       %s: %llu layers (%llu window-only, %llu CSA, %llu HCA), head_dim %llu, "
      "index_head_dim %llu\n",
      model, (unsigned long long)t.n_layers, (unsigned long long)(t.n_layers - t.n_csa - t.n_hca),
      (unsigned long long)t.n_csa, (unsigned long long)t.n_hca, (unsigned long long)g->head_dim,
      (unsigned long long)g->index_head_dim);
  printf("budget      %s (%llu bytes)\n", kvs_format_bytes(budget, buf, sizeof buf),
         (unsigned long long)budget);
  printf("num_pages   %llu pages of %llu = %llu tokens of history\n",
         (unsigned long long)kvs_pool_sizes_num_pages(sizes), (unsigned long long)sizes->page,
         (unsigned long long)sizes->full_token);
  printf("window      %llu pages (%llu slots), floor %llu pages, swa_ratio %g\n",
         (unsigned long long)sizes->n_win_pages, (unsigned long long)sizes->n_win_slots,
         (unsigned long long)floor_pages, sizes->swa_ratio);
  printf("pool        %s (%llu bytes), headroom %s\n\n",
         kvs_format_bytes(b->total, buf, sizeof buf), (unsigned long long)b->total,
         kvs_format_bytes(budget - b->total, buf2, sizeof buf2));
  const struct {
    const char *name;
    uint64_t bytes;
  } tiers[] = {{"window", b->window},  {"compressed", b->compressed},   {"indexer", b->indexer},
               {"state", b->state},    {"index_state", b->index_state}, {"mapping", b->mapping},
               {"scratch", b->scratch}};
  printf("%-12s %20s %12s %7s\n", "tier", "bytes", "", "share");
  for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++) {
    printf("%-12s %20llu %12s %6.2f%%\n", tiers[i].name, (unsigned long long)tiers[i].bytes,
           kvs_format_bytes(tiers[i].bytes, buf, sizeof buf),
           b->total ? 100.0 * (double)tiers[i].bytes / (double)b->total : 0.0);
  }
  printf("\n%-6s %-5s %5s %12s %12s %12s %15s\n", "layer", "kind", "ring", "cmp_blocks",
         "idx_blocks", "state_slots", "idx_state_slots");
  for (size_t layer = 0; layer < kvs_geometry_layer_count(g); layer++) {
    bool present = false;
    kvs_layer_sizes s;
    kvs_pool_sizes_layer(sizes, g, layer, &present, &s, NULL);
    if (!present) {
      printf("%-6zu %-5s %5s %12s %12s %12s %15s\n", layer, "none", "-", "-", "-", "-", "-");
      continue;
    }
    char idx[24] = "-", idx_state[24] = "-";
    if (s.has_indexer) {
      snprintf(idx, sizeof idx, "%llu", (unsigned long long)s.idx_blocks);
      snprintf(idx_state, sizeof idx_state, "%llu", (unsigned long long)s.idx_state_slots);
    }
    printf("%-6zu %-5s %5llu %12llu %12s %12llu %15s\n", layer, s.has_indexer ? "CSA" : "HCA",
           (unsigned long long)s.ring_size, (unsigned long long)s.cmp_blocks, idx,
           (unsigned long long)s.state_slots, idx_state);
  }
}

typedef struct solve_args {
  bool json;
  bool have_budget;
  uint64_t budget;
} solve_args;

static kvs_status solve_flag(void *ctx, int id, const char *value, kvs_error *err) {
  solve_args *a = ctx;
  if (id == OPT_JSON) {
    a->json = true;
    return KVS_OK;
  }
  a->have_budget = true;
  return kvs_parse_budget("--budget", value, &a->budget, err);
}

int kvs_kvplan_solve(int argc, char **argv) {
  static const struct option own[] = {
      {"budget", required_argument, NULL, OPT_BUDGET},
      {"json", no_argument, NULL, OPT_JSON},
  };
  kvs_plan_options options;
  kvs_plan_options_init(&options);
  solve_args a = {false, false, 0};
  int rc = kvs_plan_options_parse("kvplan solve", argc, argv, own, sizeof own / sizeof own[0],
                                  solve_flag, &a, &options, usage);
  if (rc != 0) return rc < 0 ? 0 : rc;
  bool json = a.json, have_budget = a.have_budget;
  uint64_t budget = a.budget;
  kvs_error err;
  if (!have_budget) {
    fprintf(stderr, "kvplan solve: --budget is required\n");
    usage(stderr);
    return 2;
  }
  kvs_geometry geometry;
  uint64_t floor_pages;
  const char *model;
  if (kvs_plan_options_resolve(&options, &geometry, &floor_pages, &model, &err) != KVS_OK) {
    fprintf(stderr, "kvplan solve: %s\n", err.message);
    return 2;
  }
  kvs_pool_sizes sizes;
  kvs_budget_shortfall shortfall;
  kvs_status status = kvs_solve_num_pages(budget, &geometry, options.swa_ratio, floor_pages,
                                          options.page, options.scratch, &sizes, &shortfall, &err);
  if (status == KVS_ERR_BUDGET_TOO_SMALL) {
    fprintf(stderr, "kvplan solve: %s\n", err.message);
    if (json) {
      json_t *object = json_object();
      json_object_set_new(object, "error", json_string("budget_too_small"));
      json_object_set_new(object, "available_bytes", kvs_json_u64(shortfall.available_bytes));
      json_object_set_new(object, "needed_bytes", kvs_json_u64(shortfall.needed_bytes));
      json_object_set_new(object, "min_pages", kvs_json_u64(shortfall.min_pages));
      json_object_set_new(object, "floor_win_pages", kvs_json_u64(shortfall.floor_win_pages));
      print_json(object);
    }
    return 1;
  }
  if (status != KVS_OK) {
    fprintf(stderr, "kvplan solve: %s\n", err.message);
    return 2;
  }
  kvs_cost_terms terms;
  kvs_pool_breakdown breakdown;
  if (kvs_cost_terms_make(&geometry, 0, kvs_geometry_layer_count(&geometry), NULL, &terms, &err) !=
          KVS_OK ||
      kvs_pool_bytes_terms(&sizes, &terms, options.scratch, &breakdown, &err) != KVS_OK) {
    fprintf(stderr, "kvplan solve: %s\n", err.message);
    return 1;
  }
  if (json) {
    json_t *object = json_object();
    json_object_set_new(object, "num_pages", kvs_json_u64(kvs_pool_sizes_num_pages(&sizes)));
    json_object_set_new(object, "full_token", kvs_json_u64(sizes.full_token));
    json_object_set_new(object, "n_win_pages", kvs_json_u64(sizes.n_win_pages));
    json_object_set_new(object, "n_win_slots", kvs_json_u64(sizes.n_win_slots));
    json_object_set_new(object, "pool_bytes", kvs_json_u64(breakdown.total));
    json_object_set_new(object, "layers", layers_json(&sizes, &geometry));
    print_json(object);
  } else {
    print_table(model, &geometry, budget, floor_pages, &sizes, &breakdown);
  }
  return 0;
}

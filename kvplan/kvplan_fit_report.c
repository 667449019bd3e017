/* kvplan fit's answer: the layouts sorted (those that serve the demand
 * first, fewest nodes first), as a table or one JSON object, then the
 * headline, whose refusal is the last line when nothing of one node (or of
 * --nodes) serves it. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplan/args.h"
#include "kvplan/kvplan_fit_internal.h"
#include "kvplan/plan_engine.h"
#include "kvplan/plan_json.h"
#include "kvplan/tool_io.h"

/* A static pointer for qsort's comparator: which answer to sort by. */
static const fit_args *g_sort_args;

static bool engine_of(const fit_args *a) { return a->options.engine_sglang; }

static bool row_fits(const fit_args *a, const fit_row *r) {
  return engine_of(a) ? r->sglang_fits : r->fits;
}

/* Requests the row holds over every group, in capacity mode. */
static uint64_t row_capacity(const fit_args *a, const fit_row *r) {
  return (engine_of(a) ? r->sglang_max_requests : r->max_requests) * r->groups;
}

static int compare_rows(const void *pa, const void *pb) {
  const fit_row *x = pa, *y = pb;
  const fit_args *a = g_sort_args;
  if (row_fits(a, x) != row_fits(a, y)) return row_fits(a, x) ? -1 : 1;
  if (x->nodes != y->nodes) return x->nodes < y->nodes ? -1 : 1;
  if (a->max_concurrency && row_capacity(a, x) != row_capacity(a, y)) {
    return row_capacity(a, x) > row_capacity(a, y) ? -1 : 1;
  }
  bool fx = engine_of(a) ? x->sglang_found : x->fraction_found;
  bool fy = engine_of(a) ? y->sglang_found : y->fraction_found;
  if (fx != fy) return fx ? -1 : 1;
  double vx = engine_of(a) ? x->sglang_fraction : x->min_fraction;
  double vy = engine_of(a) ? y->sglang_fraction : y->min_fraction;
  if (vx != vy) return vx < vy ? -1 : 1;
  size_t rx = x->layout.tp * x->layout.pp * x->layout.dp;
  size_t ry = y->layout.tp * y->layout.pp * y->layout.dp;
  if (rx != ry) return rx < ry ? -1 : 1;
  if (x->layout.dp != y->layout.dp) return x->layout.dp < y->layout.dp ? -1 : 1;
  return x->layout.tp > y->layout.tp ? -1 : x->layout.tp < y->layout.tp;
}

/* SGLang's launch for a row that it serves. */
static json_t *row_launch(const fit_args *a, const fit_row *r) {
  kvs_sglang_options options = kvs_engine_options(&a->options, r->layout.dp, r->sglang_max_running);
  return kvs_engine_launch_json(
      kvs_engine_launch_args(&r->layout, &options, r->sglang_fraction, r->sglang_full,
                             r->sglang_max_running, a->context),
      &r->hosts);
}

/* The --mem-fraction-static the launch line gives (3 decimals), as a
 * number: the JSON carries the value the launch uses, never a finer one
 * (a given --mem-fraction 0.8855 launches as 0.886). */
static double launch_fraction(double fraction) {
  char text[32];
  snprintf(text, sizeof text, "%.3f", fraction);
  return strtod(text, NULL);
}

static void row_engine_json(const fit_args *a, const fit_row *r, json_t *o) {
  bool found = r->sglang_found;
  /* mem_fraction_static: what the launch sets, in both modes (null where
   * SGLang serves nothing and there is no launch); --max-concurrency also
   * keeps sglang_mem_fraction, the fraction it counted at. */
  json_object_set_new(o, "mem_fraction_static",
                      found ? json_real(launch_fraction(r->sglang_fraction)) : json_null());
  if (a->max_concurrency) {
    json_object_set_new(o, "sglang_mem_fraction", json_real(r->sglang_fraction));
  }
  json_object_set_new(o, "sglang_default_mem_fraction", json_real(r->sglang_default));
  json_object_set_new(o, "sglang_fits", json_boolean(r->sglang_fits));
  json_object_set_new(o, "sglang_why", found ? json_null() : json_string(r->sglang_why));
  json_object_set_new(o, "sglang_full_tokens", kvs_json_u64(r->sglang_full));
  json_object_set_new(o, "sglang_max_running_requests", kvs_json_u64(r->sglang_max_running));
  if (a->max_concurrency) {
    json_object_set_new(o, "sglang_max_concurrency",
                        kvs_json_u64(r->sglang_max_requests * r->groups));
  }
  if (found) json_object_set_new(o, "launch", row_launch(a, r));
}

static json_t *row_json(const fit_args *a, const fit_row *r) {
  json_t *o = json_object();
  const size_t counts[] = {r->nodes,     r->layout.tp, r->layout.pp, r->layout.dp,
                           r->layout.ep, r->replicas,  r->groups};
  const char *const names[] = {"nodes", "tp", "pp", "dp", "ep", "replicas", "groups"};
  for (size_t i = 0; i < 7; i++) json_object_set_new(o, names[i], kvs_json_u64(counts[i]));
  json_object_set_new(o, "requests_per_group", kvs_json_u64(r->requests));
  json_object_set_new(o, "requests_per_replica", kvs_json_u64(r->requests * r->layout.dp));
  /* What the layout was sized for, under plan's keys (plan_json.h): its
   * requests all running, of --context tokens each. */
  json_object_set_new(o, "running_per_group", kvs_json_u64(r->requests));
  json_object_set_new(o, "max_seq_len", kvs_json_u64(a->context));
  json_object_set_new(o, "pages_needed", kvs_json_u64(r->pages));
  json_object_set_new(o, "floor_win_pages", kvs_json_u64(r->floor_pages));
  if (a->max_concurrency) {
    json_object_set_new(o, "max_concurrency", kvs_json_u64(r->max_requests * r->groups));
    json_object_set_new(o, "max_requests_per_group", kvs_json_u64(r->max_requests));
  } else {
    json_object_set_new(o, "min_kv_budget_bytes",
                        r->budget_found ? kvs_json_u64(r->min_budget) : json_null());
    json_object_set_new(o, "min_mem_fraction",
                        r->fraction_found ? json_real(r->min_fraction) : json_null());
    json_object_set_new(o, "weights_bytes", kvs_json_u64(r->weights_bytes));
    json_object_set_new(o, "margin_bytes",
                        r->fraction_found ? json_integer(r->margin_bytes) : json_null());
  }
  json_object_set_new(o, "fits", json_boolean(r->fits));
  if (engine_of(a)) row_engine_json(a, r, o);
  return o;
}

/* --json: the demand, the memory terms and every layout, one object. */
static void print_json(const fit_run *r, bool any) {
  const fit_args *a = r->a;
  const kvs_plan_options *o = &a->options;
  json_t *root = json_object();
  json_object_set_new(root, "model", json_string(r->m->name));
  json_object_set_new(root, "context", kvs_json_u64(a->context));
  json_object_set_new(root, "concurrency",
                      a->max_concurrency ? json_null() : kvs_json_u64(a->concurrency));
  json_object_set_new(root, "max_concurrency", json_boolean(a->max_concurrency));
  json_object_set_new(root, "kv_dtype", json_string(kvs_kv_dtype_name(o->kv_dtype)));
  json_object_set_new(root, "mtp_layers", kvs_json_u64(o->mtp));
  json_object_set_new(root, "gpus", kvs_json_u64(kvs_cluster_gpu_count(r->topo)));
  json_object_set_new(root, "memory_bytes", kvs_json_u64(r->memory[0].memory_bytes));
  json_object_set_new(root, "budget_source",
                      json_string(kvs_budget_source_name(r->memory[0].source)));
  json_object_set_new(root, "mem_fraction", json_real(a->deploy.mem_fraction));
  json_object_set_new(root, "reserve_bytes", kvs_json_u64(r->memory[0].reserve_bytes));
  json_object_set_new(root, "weights_source", json_string(fit_weights_source(a, r->m)));
  json_object_set_new(root, "engine", engine_of(a) ? json_string("sglang") : json_null());
  json_object_set_new(root, "fits", json_boolean(any));
  json_object_set_new(root, "nodes_needed",
                      r->hosts_needed > 0 ? kvs_json_u64(r->hosts_needed) : json_null());
  json_t *layouts = json_array();
  for (size_t i = 0; i < r->n_rows; i++) json_array_append_new(layouts, row_json(a, &r->rows[i]));
  json_object_set_new(root, "layouts", layouts);
  char *text = json_dumps(root, JSON_COMPACT);
  if (text != NULL) fprintf(kvs_tool_out(), "%s\n", text);
  free(text);
  json_decref(root);
}

/* The kvshard columns of a demand row. */
static void print_kvshard_cells(const fit_row *r) {
  char budget[32], margin[40], weights[32], fraction[16];
  if (r->budget_found) {
    kvs_format_bytes(r->min_budget, budget, sizeof budget);
  } else {
    snprintf(budget, sizeof budget, "-");
  }
  if (r->fraction_found) {
    snprintf(fraction, sizeof fraction, "%.4f", r->min_fraction);
    char b[32];
    uint64_t m =
        r->margin_bytes < 0 ? (uint64_t)(-(r->margin_bytes + 1)) + 1 : (uint64_t)r->margin_bytes;
    snprintf(margin, sizeof margin, "%s %s", r->margin_bytes < 0 ? "short" : "margin",
             kvs_format_bytes(m, b, sizeof b));
  } else {
    snprintf(fraction, sizeof fraction, "> %.0f", FIT_MAX_FRACTION);
    snprintf(margin, sizeof margin, "out of reach");
  }
  kvs_format_bytes(r->weights_bytes, weights, sizeof weights);
  fprintf(kvs_tool_out(), " %10llu %14s %12s %12s  %-4s %-18s", (unsigned long long)r->pages,
          budget, weights, fraction, r->fits ? "yes" : "no", margin);
}

/* The SGLang columns: its fraction and whether it fits, or why not. */
static void print_engine_cells(const fit_args *a, const fit_row *r) {
  char fraction[16];
  if (a->max_concurrency) {
    fprintf(kvs_tool_out(), " %8.3f %12llu", r->sglang_fraction,
            (unsigned long long)(r->sglang_max_requests * r->groups));
  } else {
    snprintf(fraction, sizeof fraction, r->sglang_found ? "%.3f" : "-", r->sglang_fraction);
    fprintf(kvs_tool_out(), " %8s %7.3f  %-4s", fraction, r->sglang_default,
            r->sglang_fits ? "yes" : "no");
  }
  if (!r->sglang_found) fprintf(kvs_tool_out(), "  %s", r->sglang_why);
}

static void print_row(const fit_args *a, const fit_row *r) {
  fprintf(kvs_tool_out(), "%5zu %4zu %4zu %4zu %4zu %6zu %9llu", r->nodes, r->layout.tp,
          r->layout.pp, r->layout.dp, r->layout.ep, r->groups, (unsigned long long)r->requests);
  if (a->max_concurrency) {
    fprintf(kvs_tool_out(), " %12llu", (unsigned long long)(r->max_requests * r->groups));
  } else {
    print_kvshard_cells(r);
  }
  if (engine_of(a)) print_engine_cells(a, r);
  fprintf(kvs_tool_out(), "\n");
}

/* The text report: the model, the node and the demand, then one row per
 * layout. */
static void fit_print_table(const fit_run *r) {
  const fit_args *a = r->a;
  char mem[32], reserve[32];
  kvs_plan_model_print(kvs_tool_out(), r->m, &a->options);
  fprintf(kvs_tool_out(), "topology    %s: %zu GPUs, %s each (%s)\n", kvs_cluster_label(r->topo),
          kvs_cluster_gpu_count(r->topo),
          kvs_format_bytes(r->memory[0].memory_bytes, mem, sizeof mem),
          kvs_budget_source_name(r->memory[0].source));
  if (a->max_concurrency) {
    fprintf(kvs_tool_out(), "demand      how many requests of %llu tokens each layout holds\n",
            (unsigned long long)a->context);
  } else {
    fprintf(kvs_tool_out(),
            "demand      %llu concurrent requests of %llu tokens, shared by every DP group\n",
            (unsigned long long)a->concurrency, (unsigned long long)a->context);
  }
  /* The one rule plan sizes by too, with fit's inputs (plan's default
   * --max-running of 64 prices 64 ring slots and holds fewer tokens). */
  fprintf(kvs_tool_out(),
          "sizing      each layout for the requests a DP group holds, all running: a state-ring "
          "slot each and their window floor, as kvplan plan --max-running N --max-seq-len %llu "
          "sizes N of them\n",
          (unsigned long long)a->context);
  fprintf(kvs_tool_out(),
          "memory      kvshard's rule at mem-fraction %.4f, a %s reserve, weights %s%s\n\n",
          a->deploy.mem_fraction,
          kvs_format_bytes(r->memory[0].reserve_bytes, reserve, sizeof reserve),
          fit_weights_source(a, r->m),
          engine_of(a) ? "; SGLang's own rule and default fraction beside it" : "");
  fprintf(kvs_tool_out(), "%5s %4s %4s %4s %4s %6s %9s", "nodes", "tp", "pp", "dp", "ep", "groups",
          "req/group");
  if (a->max_concurrency) {
    fprintf(kvs_tool_out(), " %12s", "max requests");
  } else {
    fprintf(kvs_tool_out(), " %10s %14s %12s %12s  %-4s %-18s", "pages", "min KV/GPU", "weights",
            "mem-fraction", "fits", "margin per GPU");
  }
  if (engine_of(a) && a->max_concurrency)
    fprintf(kvs_tool_out(), " %8s %12s", "sglang f", "sglang holds");
  if (engine_of(a) && !a->max_concurrency)
    fprintf(kvs_tool_out(), " %8s %7s  %-4s", "sglang f", "default", "fits");
  fprintf(kvs_tool_out(), "\n");
  for (size_t i = 0; i < r->n_rows; i++) print_row(a, &r->rows[i]);
}

/* The headline and the exit status: 0 when a layout of the planned nodes
 * serves the demand (or, asked how many, holds any); otherwise the reason
 * on the last line, with the nodes it would take. */
static int fit_headline(const fit_run *r, bool any) {
  const fit_args *a = r->a;
  size_t planned = kvs_cluster_host_count(r->topo);
  const char *nodes = planned > 1 ? "these nodes" : "this node";
  if (any) {
    if (!a->json)
      fprintf(kvs_tool_out(), "\nserved by %zu node%s\n", planned, planned > 1 ? "s" : "");
    return 0;
  }
  fflush(kvs_tool_out());
  if (a->max_concurrency) {
    fprintf(kvs_tool_err(), "kvplan fit: no layout of %s holds one request of %llu tokens\n", nodes,
            (unsigned long long)a->context);
  } else if (r->hosts_needed > 0) {
    fprintf(kvs_tool_err(),
            "kvplan fit: no layout of one node serves %llu requests of %llu tokens; %zu nodes "
            "do (give --nodes %zu)\n",
            (unsigned long long)a->concurrency, (unsigned long long)a->context, r->hosts_needed,
            r->hosts_needed);
  } else {
    fprintf(kvs_tool_err(),
            "kvplan fit: no layout of %s serves the demand (%llu requests of %llu tokens)%s\n",
            nodes, (unsigned long long)a->concurrency, (unsigned long long)a->context,
            planned == 1 && !a->deploy.given[KVS_DEPLOY_NODES] ? "; nor do 2 or 4 such nodes" : "");
  }
  return 1;
}

int fit_report(fit_run *r) {
  const fit_args *a = r->a;
  g_sort_args = a;
  qsort(r->rows, r->n_rows, sizeof *r->rows, compare_rows);
  /* The headline is one node's answer (or --nodes'): grown clusters only
   * say how many it would take. */
  size_t planned = kvs_cluster_host_count(r->topo);
  bool any = false;
  for (size_t i = 0; i < r->n_rows; i++) {
    any |= r->rows[i].nodes == planned && row_fits(a, &r->rows[i]);
  }
  if (a->json) {
    print_json(r, any);
  } else {
    fit_print_table(r);
  }
  return fit_headline(r, any);
}

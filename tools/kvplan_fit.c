/* kvplan fit: the inverse question. For C concurrent requests of L tokens,
 * which tp x pp layouts of this node can serve them, and with how much
 * memory?
 *
 * For every layout whose ranks divide the GPUs (the replicas share the
 * requests evenly), two searches over the node's own plan
 * (kvs_node_plan_make, the exact split and the device carve included):
 *   - the smallest KV budget per GPU, the same on every GPU, whose plan
 *     holds every request's history in whole pages with the window floor
 *     the requests need (max_seq_len L, max_running the replica's share);
 *   - the smallest memory fraction f whose budgets, floor(memory x f) -
 *     reserve on each GPU with the model's weights priced per layer, give
 *     such a plan.
 * A layout fits when that f is at most --mem-fraction; the margin (or the
 * shortfall) is what the difference is worth in bytes on the GPU with the
 * least memory. Both searches are bisections on a monotone question: more
 * bytes never hold fewer pages. Exit status: 0 some layout fits, 1 none
 * does (or the topology cannot be planned), 2 bad usage. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/model_weights.h"
#include "plan/cluster.h"
#include "plan/node_setup.h"
#include "tools/args.h"
#include "tools/kvplan.h"
#include "tools/plan_json.h"
#include "tools/plan_options.h"
#include "tools/plan_weights.h"
#include "plan/rank_layout.h"
#include "topology/topology.h"

/* f is searched up to this many times the memory, so a shortfall can be
 * stated; past it the layout is beyond reach. */
#define FIT_MAX_FRACTION 16.0
#define FIT_MAX_LAYOUTS 256

enum {
  OPT_CONTEXT = 1,
  OPT_CONCURRENCY,
  OPT_TOPOLOGY,
  OPT_MEM_FRACTION,
  OPT_RESERVE,
  OPT_WEIGHTS_TOTAL,
  OPT_NODES,
  OPT_JSON,
  OPT_PROGRESS_S,
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: kvplan fit --context L --concurrency C [flags]\n"
          "  --context L             tokens of every request (prompt and output)\n"
          "  --concurrency C         requests served at once by the node (the replicas of a\n"
          "                          layout share them evenly)\n"
          "  --topology FILE|live|bundled  as for kvplan plan (a list: one node each)\n"
          "  --nodes N               N identical nodes of that topology; without it, when\n"
          "                          no layout of one machine fits, 2 and 4 are tried\n"
          "  --mem-fraction F        share of each GPU's memory the engine may use (default\n"
          "                          0.9): a layout fits when it needs at most this\n"
          "  --reserve BYTES         taken off that share for the CUDA runtime (512MiB)\n"
          "  --weights-total BYTES   the whole model's weights, spread evenly over its\n"
          "                          layers (default: counted from a model folder, else\n"
          "                          not counted)\n"
          "%s"
          "  --json                  one JSON object on stdout\n"
          "  --progress-s T          seconds between progress lines on stderr while layouts\n"
          "                          are tried, [0, 86400] (default 2; 0: none), as kvsim's\n"
          "exit status: 0 some layout fits, 1 none does, 2 bad usage\n",
          kvs_plan_options_help);
}

typedef struct fit_args {
  kvs_plan_options options;
  bool have_context, have_concurrency, have_fraction, have_reserve, have_weights_total, json;
  bool have_nodes;
  uint64_t context, concurrency, reserve, weights_total, nodes;
  double fraction;
  double progress_s; /* --progress-s; 0: no progress lines */
  const char *topology;
} fit_args;

static kvs_status fit_flag(void *ctx, int id, const char *value, kvs_error *err) {
  fit_args *a = ctx;
  kvs_status status;
  switch (id) {
    case OPT_CONTEXT:
      a->have_context = true;
      status = kvs_parse_u64("--context", value, &a->context, err);
      if (status == KVS_OK && (a->context == 0 || a->context > (UINT64_C(1) << 40))) {
        return kvs_error_set(err, KVS_ERR_PARSE, "--context must be in [1, 2^40] tokens, got %s",
                             value);
      }
      return status;
    case OPT_CONCURRENCY:
      a->have_concurrency = true;
      status = kvs_parse_u64("--concurrency", value, &a->concurrency, err);
      if (status == KVS_OK && (a->concurrency == 0 || a->concurrency > (UINT64_C(1) << 24))) {
        return kvs_error_set(err, KVS_ERR_PARSE,
                             "--concurrency must be in [1, 2^24] requests, got %s", value);
      }
      return status;
    case OPT_TOPOLOGY:
      a->topology = value;
      return KVS_OK;
    case OPT_MEM_FRACTION:
      a->have_fraction = true;
      status = kvs_parse_double("--mem-fraction", value, &a->fraction, err);
      if (status == KVS_OK && !(a->fraction > 0.0 && a->fraction <= 1.0)) {
        return kvs_error_set(err, KVS_ERR_PARSE, "--mem-fraction must be in (0, 1], got %s", value);
      }
      return status;
    case OPT_RESERVE:
      a->have_reserve = true;
      return kvs_parse_bytes("--reserve", value, &a->reserve, err);
    case OPT_NODES:
      a->have_nodes = true;
      status = kvs_parse_u64("--nodes", value, &a->nodes, err);
      if (status == KVS_OK && (a->nodes == 0 || a->nodes > KVS_MAX_NODES)) {
        return kvs_error_set(err, KVS_ERR_PARSE, "--nodes must be between 1 and %d, got %s",
                             KVS_MAX_NODES, value);
      }
      return status;
    case OPT_WEIGHTS_TOTAL:
      a->have_weights_total = true;
      return kvs_parse_bytes("--weights-total", value, &a->weights_total, err);
    case OPT_PROGRESS_S:
      return kvs_parse_double_in("--progress-s", value, 0.0, 86400.0, "seconds in [0, 86400]",
                                 &a->progress_s, err);
    default:
      a->json = true; /* OPT_JSON */
      return KVS_OK;
  }
}

/* One layout's answer. */
typedef struct fit_row {
  size_t nodes; /* cluster nodes the layout spans */
  size_t tp, pp, replicas;
  uint64_t requests; /* per replica */
  uint64_t pages;    /* pages each rank must hold */
  uint64_t floor_pages;
  bool budget_found;
  uint64_t min_budget; /* uniform KV bytes per GPU */
  bool fraction_found; /* some f up to FIT_MAX_FRACTION holds it */
  double min_fraction;
  bool fits;
  int64_t margin_bytes;   /* negative: shortfall */
  uint64_t weights_bytes; /* the heaviest rank's, at min_fraction */
} fit_row;

/* What one probe needs: the request (floor set per layout) and the GPUs. */
typedef struct fit_ctx {
  kvs_plan_request request;
  const kvs_gpu_info *gpus;
  size_t n_gpus;
  const kvs_memory_budget *memory; /* each GPU's memory and reserve */
  uint64_t *budgets;               /* scratch, n_gpus */
  uint64_t pages;                  /* what must fit */
} fit_ctx;

/* Does a plan on c->budgets hold c->pages? */
static bool holds(fit_ctx *c, uint64_t *heaviest_weights) {
  kvs_node_plan_t plan = NULL;
  bool ok = kvs_node_plan_make(&c->request, c->gpus, c->n_gpus, c->budgets, &plan, NULL, NULL) ==
                KVS_OK &&
            kvs_node_plan_split(plan)->num_pages >= c->pages;
  if (ok && heaviest_weights != NULL) {
    *heaviest_weights = 0;
    for (size_t r = 0; r < kvs_node_plan_rank_count(plan); r++) {
      uint64_t w = kvs_node_plan_rank(plan, r)->weight_bytes;
      if (w > *heaviest_weights) *heaviest_weights = w;
    }
  }
  kvs_node_plan_destroy(plan);
  return ok;
}

static bool holds_uniform(fit_ctx *c, uint64_t budget) {
  for (size_t g = 0; g < c->n_gpus; g++) c->budgets[g] = budget;
  return holds(c, NULL);
}

/* Budgets at fraction f by the one rule, f not held to 1: floor(memory x
 * f) - reserve on every GPU (the weights are priced per layer by the plan);
 * false when some GPU has nothing left. */
static bool set_fraction(fit_ctx *c, double f) {
  for (size_t g = 0; g < c->n_gpus; g++) {
    if (!kvs_memory_budget_bytes(c->memory[g].memory_bytes, f, 0, c->memory[g].reserve_bytes,
                                 &c->budgets[g])) {
      return false;
    }
  }
  return true;
}

static bool holds_fraction(fit_ctx *c, double f, uint64_t *heaviest_weights) {
  return set_fraction(c, f) && holds(c, heaviest_weights);
}

static void solve_layout(fit_ctx *c, const fit_args *a, fit_row *row) {
  /* The smallest uniform KV budget: the whole stack's pool at the pages
   * needed always suffices for one rank, and far more than that for any. */
  const uint64_t most = UINT64_C(1) << 52;
  kvs_plan_request bare = c->request;
  c->request.layer_weight_bytes = NULL; /* the KV budget alone */
  /* One probe at the largest budget tells a layout out of reach (a
   * demand no budget serves costs one plan, not a search). */
  row->budget_found = holds_uniform(c, most);
  uint64_t lo = 0, hi = UINT64_C(1) << 30;
  while (row->budget_found && hi < most && !holds_uniform(c, hi)) {
    lo = hi;
    hi *= 2;
  }
  while (row->budget_found && hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (holds_uniform(c, mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  row->min_budget = hi;
  c->request = bare;

  /* The smallest memory fraction, weights and reserve included. */
  double flo = 0.0, fhi = FIT_MAX_FRACTION;
  row->fraction_found = holds_fraction(c, fhi, NULL);
  for (int i = 0; row->fraction_found && i < 64 && fhi - flo > 1e-9; i++) {
    double mid = 0.5 * (flo + fhi);
    if (holds_fraction(c, mid, NULL)) {
      fhi = mid;
    } else {
      flo = mid;
    }
  }
  /* Reported rounded up to 4 decimals, so the printed fraction holds. */
  row->min_fraction = ceil(fhi * 10000.0 - 1e-9) / 10000.0;
  if (row->fraction_found && !holds_fraction(c, row->min_fraction, &row->weights_bytes)) {
    row->min_fraction = fhi;
    holds_fraction(c, fhi, &row->weights_bytes);
  }
  double user = a->have_fraction ? a->fraction : KVS_DEFAULT_MEMORY_RATIO;
  row->fits = row->fraction_found && row->min_fraction <= user;
  uint64_t least = UINT64_MAX;
  for (size_t g = 0; g < c->n_gpus; g++) {
    if (c->memory[g].memory_bytes < least) least = c->memory[g].memory_bytes;
  }
  row->margin_bytes = row->fraction_found ? (int64_t)floor((double)least * user) -
                                                (int64_t)floor((double)least * row->min_fraction)
                                          : INT64_MIN;
}

static int compare_rows(const void *pa, const void *pb) {
  const fit_row *x = pa, *y = pb;
  if (x->fits != y->fits) return x->fits ? -1 : 1;
  if (x->nodes != y->nodes) return x->nodes < y->nodes ? -1 : 1;
  if (x->fraction_found != y->fraction_found) return x->fraction_found ? -1 : 1;
  if (x->min_fraction != y->min_fraction) return x->min_fraction < y->min_fraction ? -1 : 1;
  if (x->tp * x->pp != y->tp * y->pp) return x->tp * x->pp < y->tp * y->pp ? -1 : 1;
  return x->tp > y->tp ? -1 : x->tp < y->tp;
}

static json_t *row_json(const fit_row *r) {
  json_t *o = json_object();
  json_object_set_new(o, "nodes", kvs_json_u64(r->nodes));
  json_object_set_new(o, "tp", kvs_json_u64(r->tp));
  json_object_set_new(o, "pp", kvs_json_u64(r->pp));
  json_object_set_new(o, "replicas", kvs_json_u64(r->replicas));
  json_object_set_new(o, "requests_per_replica", kvs_json_u64(r->requests));
  json_object_set_new(o, "pages_needed", kvs_json_u64(r->pages));
  json_object_set_new(o, "floor_win_pages", kvs_json_u64(r->floor_pages));
  json_object_set_new(o, "min_kv_budget_bytes",
                      r->budget_found ? kvs_json_u64(r->min_budget) : json_null());
  json_object_set_new(o, "min_mem_fraction",
                      r->fraction_found ? json_real(r->min_fraction) : json_null());
  json_object_set_new(o, "weights_bytes", kvs_json_u64(r->weights_bytes));
  json_object_set_new(o, "fits", json_boolean(r->fits));
  json_object_set_new(o, "margin_bytes",
                      r->fraction_found ? json_integer(r->margin_bytes) : json_null());
  return o;
}

static void print_row(const fit_row *r) {
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
  printf("%5zu %4zu %4zu %8zu %9llu %10llu %14s %12s %12s  %-4s %s\n", r->nodes, r->tp, r->pp,
         r->replicas,
         (unsigned long long)r->requests, (unsigned long long)r->pages, budget, weights, fraction,
         r->fits ? "yes" : "no", margin);
}

/* One tp x pp of a cluster. */
typedef struct fit_layout {
  size_t tp, pp;
} fit_layout;

/* The layouts fit tries on a cluster of n GPUs, fewest ranks per replica
 * first: the ranks divide the GPUs, a stage holds at least one layer, a
 * tensor-parallel group fits in a node and in kvplan's bound. At most cap of them into out;
 * returns how many there are. */
static size_t list_layouts(const kvs_gpu_info *gpus, size_t n, size_t n_planned,
                           kvs_rank_slot *slots, fit_layout *out, size_t cap) {
  size_t count = 0;
  for (size_t ranks = 1; ranks <= n; ranks++) {
    if (n % ranks != 0) continue;
    for (size_t pp = 1; pp <= ranks; pp++) {
      if (ranks % pp != 0 || pp > n_planned || pp > KVS_MAX_STAGES) continue;
      if (ranks / pp > KVS_KVPLAN_MAX_GPUS) continue; /* as kvplan plan's --tp */
      if (kvs_rank_layout_cluster(gpus, n, ranks / pp, pp, false, slots, NULL, NULL) != KVS_OK) {
        continue;
      }
      if (count < cap) out[count] = (fit_layout){ranks / pp, pp};
      count++;
    }
  }
  return count;
}

/* Says on stderr, every --progress-s seconds, how far the search over a
 * large cluster has come (as kvsim does): each layout is two bisections
 * over whole-cluster plans, minutes on thousands of GPUs. */
typedef struct fit_progress {
  uint64_t start_ns, last_ns;
  double every_s; /* 0: silent */
} fit_progress;

static void say_progress(fit_progress *p, size_t done, size_t total, size_t n,
                         const fit_layout *at) {
  uint64_t now = kvs_now_ns();
  if (p->every_s <= 0 || (double)(now - p->last_ns) < p->every_s * 1e9) return;
  fprintf(stderr, "kvplan fit: %zu of %zu layouts of %zu GPUs tried (now tp %zu x pp %zu), %.0f s\n",
          done, total, n, at->tp, at->pp, (double)(now - p->start_ns) * 1e-9);
  p->last_ns = now;
}

/* The demand's sizing of one layout: requests per replica, the pages and
 * the window floor they need, the weights per layer at its tp. Returns 0,
 * or 2 after a message. */
static int size_row(const fit_args *a, kvs_plan_model *m, const kvs_model_weights *weights,
                    uint64_t *layer, size_t nodes, size_t n, const fit_layout *l, fit_row *row) {
  kvs_error err;
  const kvs_plan_options *o = &a->options;
  *row = (fit_row){.nodes = nodes, .tp = l->tp, .pp = l->pp, .replicas = n / (l->tp * l->pp)};
  row->requests = (a->concurrency + row->replicas - 1) / row->replicas;
  uint64_t per_request = (a->context + o->page - 1) / o->page;
  row->pages = per_request * row->requests;
  if (kvs_cost_window_floor_pages(a->context, row->requests, o->radix, o->page, &row->floor_pages,
                                  &err) != KVS_OK ||
      (weights != NULL && kvs_plan_layer_weights(weights, kvs_geometry_layer_count(&m->geometry),
                                                 row->tp, layer, &err) != KVS_OK)) {
    fprintf(stderr, "kvplan fit: %s\n", err.message);
    return 2;
  }
  kvs_plan_model_place_rings(m, o->state_rings, row->requests);
  return 0;
}

/* Every layout of one cluster: its rows appended to rows[*n_rows..].
 * memory[] is filled with the cluster's GPUs' memory terms. Returns 0, or
 * the exit status after a message. */
static int evaluate(fit_args *a, kvs_plan_model *m, kvs_cluster_t cluster,
                    const kvs_model_weights *weights, uint64_t *layer, fit_row *rows,
                    size_t *n_rows, kvs_memory_budget *memory, uint64_t *budgets) {
  kvs_error err;
  size_t n = kvs_cluster_gpu_count(cluster);
  const kvs_gpu_info *gpus = kvs_cluster_gpus(cluster);
  kvs_budget_request br = KVS_BUDGET_REQUEST_INIT;
  if (a->have_reserve) br.reserve_bytes = a->reserve;
  br.memory_ratio = 1.0; /* the memory itself; f is what is searched */
  if (kvs_node_budgets(&br, gpus, n, memory, &err) != KVS_OK) {
    fprintf(stderr, "kvplan fit: %s\n", err.message);
    return 1;
  }
  kvs_rank_slot *slots = calloc(n, sizeof *slots);
  fit_layout *layouts = calloc(FIT_MAX_LAYOUTS, sizeof *layouts);
  if (slots == NULL || layouts == NULL) {
    free(slots);
    free(layouts);
    fprintf(stderr, "kvplan fit: out of memory\n");
    return 1;
  }
  size_t room = FIT_MAX_LAYOUTS - *n_rows;
  size_t total = list_layouts(gpus, n, kvs_geometry_layer_count(&m->geometry), slots, layouts, room);
  if (total > room) {
    fprintf(stderr, "kvplan fit: %zu layouts of %zu GPUs; trying the %zu with the fewest ranks\n",
            total, n, room);
    total = room;
  }
  int rc = 0;
  fit_progress progress = {kvs_now_ns(), kvs_now_ns(), a->progress_s};
  for (size_t i = 0; i < total && rc == 0; i++) {
    fit_row *row = &rows[*n_rows];
    rc = size_row(a, m, weights, layer, kvs_cluster_node_count(cluster), n, &layouts[i], row);
    if (rc != 0) break;
    fit_ctx c = {.request = {.geometry = &m->geometry,
                             .widths = &m->widths,
                             .swa_ratio = m->swa_ratio,
                             .page = a->options.page,
                             .floor_win_pages = row->floor_pages,
                             .n_scratch = a->options.scratch,
                             .tp = row->tp,
                             .pp = row->pp,
                             .layer_weight_bytes = weights != NULL ? layer : NULL},
                 .gpus = gpus,
                 .n_gpus = n,
                 .memory = memory,
                 .budgets = budgets,
                 .pages = row->pages};
    solve_layout(&c, a, row);
    (*n_rows)++;
    say_progress(&progress, i + 1, total, n, &layouts[i]);
  }
  free(slots);
  free(layouts);
  return rc;
}

/* The margin and the report judge a layout against this fraction. */
static double user_fraction(const fit_args *a) {
  return a->have_fraction ? a->fraction : KVS_DEFAULT_MEMORY_RATIO;
}

/* Weights come from a model folder's safetensors unless --weights-total
 * gives them; a built-in model or a bare config.json carries none. */
static bool from_folder(const kvs_plan_model *m) { return m->have_config && m->config.is_folder; }

/* The flags fit refuses, then the model they describe. fit derives the
 * window floor and the budget itself, so the plan flags that would set
 * either are refused rather than silently overridden. Returns 0 or 2. */
static int resolve_model(fit_args *a, kvs_plan_model *m) {
  kvs_error err;
  kvs_plan_options *o = &a->options;
  if (o->have_floor_inputs || o->have_floor_pages) {
    fprintf(stderr,
            "kvplan fit: --context and --concurrency set the window floor; drop "
            "--max-seq-len, --max-running and --floor-pages\n");
    return 2;
  }
  if (o->have_window_cache) {
    fprintf(stderr,
            "kvplan fit: --window-cache is a share of a budget, and fit finds the budget: "
            "give --swa-ratio\n");
    return 2;
  }
  if (kvs_plan_options_resolve(o, m, &err) != KVS_OK) {
    fprintf(stderr, "kvplan fit: %s\n", err.message);
    return 2;
  }
  return 0;
}

/* Opens the cluster --topology and --nodes name. Where the topology fell
 * back to the bundled server, the note saying why goes to notes. Returns
 * 0, 2 for a bad name, or 1 for a topology that does not load. */
static int open_cluster(const fit_args *a, FILE *notes, kvs_cluster_t *topo) {
  char why[768];
  kvs_error err;
  if (kvs_cluster_open(a->topology, a->have_nodes ? (size_t)a->nodes : 0, topo, why, sizeof why,
                       &err) != KVS_OK) {
    fprintf(stderr, "kvplan fit: %s\n", err.message);
    return err.status == KVS_ERR_INVALID_ARGUMENT ? 2 : 1;
  }
  if (why[0] != '\0') fprintf(notes, "kvplan: %s\n", why);
  return 0;
}

/* What one run holds: the named cluster, the rows found and the scratch
 * every evaluation shares; fit_run_free releases it all. */
typedef struct fit_run {
  kvs_cluster_t topo;
  kvs_memory_budget *memory;  /* the named cluster's terms (the report quotes them) */
  kvs_memory_budget *grown;   /* a grown cluster's, 4 nodes at most */
  uint64_t *budgets;          /* scratch for the largest cluster */
  uint64_t *layer;            /* weight bytes per planned layer */
  kvs_model_weights *weights; /* NULL: weights not counted */
  fit_row *rows;
  size_t n_rows;
} fit_run;

/* Returns 0, or 1 after a message. */
static int fit_run_alloc(fit_run *r, const kvs_plan_model *m, bool counted) {
  size_t n = kvs_cluster_gpu_count(r->topo);
  size_t n_planned = kvs_geometry_layer_count(&m->geometry);
  /* Room for a grown cluster's memory terms (4 nodes at most) beside the
   * named one's. */
  size_t most = 4 * n;
  r->memory = calloc(n, sizeof *r->memory);
  r->grown = calloc(most, sizeof *r->grown);
  r->budgets = calloc(most, sizeof *r->budgets);
  r->layer = calloc(n_planned, sizeof *r->layer);
  r->weights = counted ? malloc(sizeof *r->weights) : NULL;
  r->rows = calloc(FIT_MAX_LAYOUTS, sizeof *r->rows);
  if (r->memory == NULL || r->grown == NULL || r->budgets == NULL || r->layer == NULL ||
      r->rows == NULL || (counted && r->weights == NULL)) {
    fprintf(stderr, "kvplan fit: out of memory\n");
    return 1;
  }
  return 0;
}

static void fit_run_free(fit_run *r) {
  free(r->memory);
  free(r->grown);
  free(r->budgets);
  free(r->layer);
  free(r->weights);
  free(r->rows);
  kvs_cluster_destroy(r->topo);
}

/* The whole model's weights, when they are counted. Returns 0, or 2 after
 * a message. */
static int count_weights(const fit_args *a, const kvs_plan_model *m, fit_run *r) {
  kvs_error err;
  if (r->weights != NULL && kvs_plan_weights_of(&m->config, a->have_weights_total, a->weights_total,
                                                r->weights, &err) != KVS_OK) {
    fprintf(stderr, "kvplan fit: %s\n", err.message);
    return 2;
  }
  return 0;
}

/* Every layout of the named cluster, then, where none of one machine
 * serves the demand (one machine named: not a list, no --nodes), every
 * layout of 2 and of 4 such machines. Returns 0, or the exit status after
 * a message. */
static int evaluate_all(fit_args *a, kvs_plan_model *m, fit_run *r) {
  int rc =
      evaluate(a, m, r->topo, r->weights, r->layer, r->rows, &r->n_rows, r->memory, r->budgets);
  if (rc != 0) return rc;
  bool fits_one = false;
  for (size_t i = 0; i < r->n_rows; i++) fits_one |= r->rows[i].fits;
  bool grow = !fits_one && !a->have_nodes && kvs_cluster_node_count(r->topo) == 1;
  for (size_t nodes = 2; grow && nodes <= 4; nodes *= 2) {
    kvs_cluster_t more = NULL;
    kvs_error err;
    if (kvs_cluster_open(a->topology, nodes, &more, NULL, 0, &err) != KVS_OK) {
      fprintf(stderr, "kvplan fit: %s\n", err.message);
      kvs_cluster_destroy(more);
      return 1;
    }
    rc = evaluate(a, m, more, r->weights, r->layer, r->rows, &r->n_rows, r->grown, r->budgets);
    kvs_cluster_destroy(more);
    if (rc != 0) return rc;
  }
  return 0;
}

/* --json: the demand, the memory terms and every layout, one object. */
static void print_json(const fit_args *a, const kvs_plan_model *m, const fit_run *r, bool any) {
  const kvs_plan_options *o = &a->options;
  const char *source = a->have_weights_total ? "total" : from_folder(m) ? "folder" : "none";
  json_t *root = json_object();
  json_object_set_new(root, "model", json_string(m->name));
  json_object_set_new(root, "context", kvs_json_u64(a->context));
  json_object_set_new(root, "concurrency", kvs_json_u64(a->concurrency));
  json_object_set_new(root, "kv_dtype", json_string(kvs_kv_dtype_name(o->kv_dtype)));
  json_object_set_new(root, "mtp_layers", kvs_json_u64(o->mtp));
  json_object_set_new(root, "gpus", kvs_json_u64(kvs_cluster_gpu_count(r->topo)));
  json_object_set_new(root, "memory_bytes", kvs_json_u64(r->memory[0].memory_bytes));
  json_object_set_new(root, "budget_source",
                      json_string(kvs_budget_source_name(r->memory[0].source)));
  json_object_set_new(root, "mem_fraction", json_real(user_fraction(a)));
  json_object_set_new(root, "reserve_bytes", kvs_json_u64(r->memory[0].reserve_bytes));
  json_object_set_new(root, "weights_source", json_string(source));
  json_object_set_new(root, "fits", json_boolean(any));
  json_t *layouts = json_array();
  for (size_t i = 0; i < r->n_rows; i++) json_array_append_new(layouts, row_json(&r->rows[i]));
  json_object_set_new(root, "layouts", layouts);
  char *text = json_dumps(root, JSON_COMPACT);
  if (text != NULL) printf("%s\n", text);
  free(text);
  json_decref(root);
}

/* The text report: the model, the node and the demand, then one row per
 * layout. */
static void print_table(const fit_args *a, const kvs_plan_model *m, const fit_run *r, bool any) {
  char mem[32], reserve[32];
  kvs_plan_model_print(stdout, m, &a->options);
  printf("topology    %s: %zu GPUs, %s each (%s)\n", kvs_cluster_label(r->topo),
         kvs_cluster_gpu_count(r->topo),
         kvs_format_bytes(r->memory[0].memory_bytes, mem, sizeof mem),
         kvs_budget_source_name(r->memory[0].source));
  printf("demand      %llu concurrent requests of %llu tokens, shared by each layout's replicas\n",
         (unsigned long long)a->concurrency, (unsigned long long)a->context);
  printf(
      "memory      a layout fits when it needs at most mem-fraction %.4f, with a %s reserve and "
      "%s\n\n",
      user_fraction(a), kvs_format_bytes(r->memory[0].reserve_bytes, reserve, sizeof reserve),
      a->have_weights_total ? "--weights-total spread over the layers, per rank (estimate)"
      : from_folder(m)      ? "the folder's weights per rank (estimate)"
                            : "no weights counted");
  printf("%5s %4s %4s %8s %9s %10s %14s %12s %12s  %-4s %s\n", "nodes", "tp", "pp", "replicas",
         "requests", "pages", "min KV/GPU", "weights", "mem-fraction", "fits", "margin per GPU");
  for (size_t i = 0; i < r->n_rows; i++) print_row(&r->rows[i]);
  if (!any) printf("\nno layout of this node serves the demand\n");
}

static int run(fit_args *a, kvs_plan_model *m) {
  int rc = resolve_model(a, m);
  if (rc != 0) return rc;
  /* With --json, stdout holds the object alone. */
  FILE *notes = a->json ? stderr : stdout;
  bool counted = from_folder(m) || a->have_weights_total;
  if (!counted) {
    fprintf(notes,
            "kvplan: weights are not counted (%s carries no weight size): give --model FOLDER "
            "to count them from its safetensors, or --weights-total BYTES\n",
            m->name);
  }
  fit_run r;
  memset(&r, 0, sizeof r);
  if ((rc = open_cluster(a, notes, &r.topo)) != 0) return rc;
  if ((rc = fit_run_alloc(&r, m, counted)) == 0 && (rc = count_weights(a, m, &r)) == 0 &&
      (rc = evaluate_all(a, m, &r)) == 0) {
    qsort(r.rows, r.n_rows, sizeof *r.rows, compare_rows);
    bool any = r.n_rows > 0 && r.rows[0].fits;
    if (a->json) {
      print_json(a, m, &r, any);
    } else {
      print_table(a, m, &r, any);
    }
    rc = any ? 0 : 1;
  }
  fit_run_free(&r);
  return rc;
}

int kvs_kvplan_fit(int argc, char **argv) {
  static const struct option own[] = {
      {"context", required_argument, NULL, OPT_CONTEXT},
      {"concurrency", required_argument, NULL, OPT_CONCURRENCY},
      {"topology", required_argument, NULL, OPT_TOPOLOGY},
      {"mem-fraction", required_argument, NULL, OPT_MEM_FRACTION},
      {"reserve", required_argument, NULL, OPT_RESERVE},
      {"weights-total", required_argument, NULL, OPT_WEIGHTS_TOTAL},
      {"nodes", required_argument, NULL, OPT_NODES},
      {"json", no_argument, NULL, OPT_JSON},
      {"progress-s", required_argument, NULL, OPT_PROGRESS_S},
  };
  fit_args a;
  memset(&a, 0, sizeof a);
  a.progress_s = 2.0;
  kvs_plan_options_init(&a.options);
  int rc = kvs_plan_options_parse("kvplan fit", argc, argv, own, sizeof own / sizeof own[0],
                                  fit_flag, &a, &a.options, usage);
  if (rc != 0) return rc < 0 ? 0 : rc;
  if (!a.have_context || !a.have_concurrency) {
    fprintf(stderr,
            "kvplan fit: --context and --concurrency are required (kvplan fit --help lists "
            "every flag)\n");
    return 2;
  }
  kvs_plan_model *model = malloc(sizeof *model);
  if (model == NULL) {
    fprintf(stderr, "kvplan fit: out of memory\n");
    return 1;
  }
  rc = run(&a, model);
  free(model);
  return rc;
}

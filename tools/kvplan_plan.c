/* kvplan plan: the per-rank KV plan of a serving node, the README's main
 * job and what `kvplan` runs with no arguments.
 *
 * The plan is made through the node's own setup steps (plan/node_setup.h):
 * the topology (live, --topology FILE, or the bundled server), each GPU's
 * budget by the one rule (CUDA's free memory, or a nominal 141 GB where
 * nothing is measured, x --mem-fraction - weights - --reserve; or --budget /
 * --budget-per-gpu as given), and the split priced as the device tables
 * carve it, so every rank's pool_bytes is what the node allocates on that
 * GPU. With no GPU visible to CUDA and no --topology, the bundled 8-GPU
 * server stands in, and the first line says so. Exit status: 0 planned, 1 the plan cannot be made
 * on this machine (budget too small, more ranks than GPUs, tp x pp not
 * dividing the GPUs, no GPU, a topology that does not load), 2 bad usage. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cost_model.h"
#include "plan/cluster.h"
#include "plan/node_setup.h"
#include "tools/args.h"
#include "tools/kvplan.h"
#include "tools/plan_json.h"
#include "tools/plan_options.h"
#include "tools/plan_svg.h"
#include "tools/plan_weights.h"
#include "tools/sglang_report.h"
#include "plan/node_plan.h"
#include "topology/source.h"
#include "topology/topology.h"

#define MAX_GPUS KVS_KVPLAN_MAX_GPUS

enum {
  OPT_TOPOLOGY = 1,
  OPT_TP,
  OPT_PP,
  OPT_BUDGET,
  OPT_BUDGET_PER_GPU,
  OPT_MEMORY_RATIO,
  OPT_MEM_FRACTION,
  OPT_WEIGHTS,
  OPT_WEIGHTS_PER_GPU,
  OPT_WEIGHTS_TOTAL,
  OPT_RESERVE,
  OPT_JSON,
  OPT_SVG,
  OPT_NODES,
  OPT_ALLOW_CROSS_NODE_TP
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: kvplan [plan] [flags]\n"
          "  --topology FILE|live|bundled  hwloc XML export, the running machine or the\n"
          "                          built-in 8-GPU server (default: live when CUDA sees\n"
          "                          GPUs, else bundled); a comma-separated list of\n"
          "                          exports plans a cluster, one node each, in order\n"
          "  --nodes N               N identical nodes of that topology (1..64)\n"
          "  --allow-cross-node-tp   let a tensor-parallel group span nodes (refused\n"
          "                          otherwise)\n"
          "  --tp N --pp N           tensor x pipeline parallel layout (default: all GPUs as\n"
          "                          one TP group; one of them alone takes the rest); tp x pp\n"
          "                          dividing the GPUs runs GPUs/(tp x pp) replicas\n"
          "  --budget BYTES          KV budget of every GPU (80GiB, 141GB, ...)\n"
          "  --budget-per-gpu B0,B1,.. one budget per GPU, in GPU index order\n"
          "  --mem-fraction F        share of each GPU's memory for weights, KV and the\n"
          "                          reserve (default 0.9; --memory-ratio is the same flag)\n"
          "  --weights BYTES         model weights on every GPU, as the engine measured them\n"
          "  --weights-per-gpu B0,.. the same per GPU, in GPU index order (default: counted\n"
          "                          from a model folder, else not counted)\n"
          "  --weights-total BYTES   the whole model's weights, not yet measured: spread\n"
          "                          evenly over its layers, each stage paying its own\n"
          "  --reserve BYTES         taken off that share for the CUDA runtime (512MiB)\n"
          "%s"
          "  --json                  one JSON object on stdout (notes go to stderr)\n"
          "  --svg FILE              write the memory map as SVG\n"
          "exit status: 0 planned, 1 the plan cannot be made here, 2 bad usage\n",
          kvs_plan_options_help);
}

typedef struct plan_args {
  kvs_plan_options options;
  const char *topology; /* NULL: the default */
  bool have_tp, have_pp;
  uint64_t tp, pp;
  bool have_budget;
  uint64_t budget;
  size_t n_budgets; /* --budget-per-gpu entries */
  uint64_t *budgets;
  bool have_ratio;     /* --memory-ratio */
  bool have_fraction;  /* --mem-fraction: the same number */
  double memory_ratio;
  bool have_weights;
  uint64_t weights;
  size_t n_weights; /* --weights-per-gpu entries */
  bool have_weights_total;
  uint64_t weights_total;
  uint64_t *weights_list;
  bool have_reserve;
  uint64_t reserve;
  bool json;
  const char *svg;
  bool have_nodes;
  uint64_t nodes;
  bool allow_cross_node_tp;
} plan_args;

/* Parses argv into args: 0 to go on, -1 after --help (exit 0), else the
 * exit status. */
static kvs_status plan_flag(void *ctx, int id, const char *value, kvs_error *err) {
  plan_args *a = ctx;
  switch (id) {
    case OPT_TOPOLOGY:
      a->topology = value;
      return KVS_OK;
    case OPT_TP:
      a->have_tp = true;
      return kvs_parse_u64("--tp", value, &a->tp, err);
    case OPT_PP:
      a->have_pp = true;
      return kvs_parse_u64("--pp", value, &a->pp, err);
    case OPT_BUDGET:
      a->have_budget = true;
      return kvs_parse_budget("--budget", value, &a->budget, err);
    case OPT_BUDGET_PER_GPU:
      return kvs_parse_budget_list("--budget-per-gpu", value, a->budgets, MAX_GPUS, &a->n_budgets,
                                   err);
    case OPT_MEMORY_RATIO:
      a->have_ratio = true;
      return kvs_parse_double("--memory-ratio", value, &a->memory_ratio, err);
    case OPT_MEM_FRACTION:
      a->have_fraction = true;
      return kvs_parse_double("--mem-fraction", value, &a->memory_ratio, err);
    case OPT_WEIGHTS:
      a->have_weights = true;
      return kvs_parse_bytes("--weights", value, &a->weights, err);
    case OPT_WEIGHTS_TOTAL:
      a->have_weights_total = true;
      return kvs_parse_bytes("--weights-total", value, &a->weights_total, err);
    case OPT_WEIGHTS_PER_GPU:
      return kvs_parse_bytes_list("--weights-per-gpu", value, a->weights_list, MAX_GPUS,
                                  &a->n_weights, err);
    case OPT_RESERVE:
      a->have_reserve = true;
      return kvs_parse_bytes("--reserve", value, &a->reserve, err);
    case OPT_JSON:
      a->json = true;
      return KVS_OK;
    case OPT_NODES:
      a->have_nodes = true;
      return kvs_parse_u64("--nodes", value, &a->nodes, err);
    case OPT_ALLOW_CROSS_NODE_TP:
      a->allow_cross_node_tp = true;
      return KVS_OK;
    default:
      a->svg = value;
      return KVS_OK; /* OPT_SVG */
  }
}

static int parse(int argc, char **argv, plan_args *a) {
  static const struct option own[] = {
      {"topology", required_argument, NULL, OPT_TOPOLOGY},
      {"tp", required_argument, NULL, OPT_TP},
      {"pp", required_argument, NULL, OPT_PP},
      {"budget", required_argument, NULL, OPT_BUDGET},
      {"budget-per-gpu", required_argument, NULL, OPT_BUDGET_PER_GPU},
      {"memory-ratio", required_argument, NULL, OPT_MEMORY_RATIO},
      {"mem-fraction", required_argument, NULL, OPT_MEM_FRACTION},
      {"weights", required_argument, NULL, OPT_WEIGHTS},
      {"weights-per-gpu", required_argument, NULL, OPT_WEIGHTS_PER_GPU},
      {"weights-total", required_argument, NULL, OPT_WEIGHTS_TOTAL},
      {"reserve", required_argument, NULL, OPT_RESERVE},
      {"json", no_argument, NULL, OPT_JSON},
      {"svg", required_argument, NULL, OPT_SVG},
      {"nodes", required_argument, NULL, OPT_NODES},
      {"allow-cross-node-tp", no_argument, NULL, OPT_ALLOW_CROSS_NODE_TP},
  };
  int rc = kvs_plan_options_parse("kvplan plan", argc, argv, own, sizeof own / sizeof own[0],
                                  plan_flag, a, &a->options, usage);
  if (rc != 0) return rc;
  if ((a->have_budget ? 1 : 0) + (a->n_budgets > 0 ? 1 : 0) > 1) {
    fprintf(stderr, "kvplan plan: give --budget or --budget-per-gpu, not both\n");
    return 2;
  }
  if (a->have_ratio && a->have_fraction) {
    fprintf(stderr, "kvplan plan: --memory-ratio and --mem-fraction are one flag; give it once\n");
    return 2;
  }
  if (a->have_weights + (a->n_weights > 0) + a->have_weights_total > 1) {
    fprintf(stderr,
            "kvplan plan: give one of --weights, --weights-per-gpu and --weights-total\n");
    return 2;
  }
  bool weights_given = a->have_weights || a->n_weights > 0 || a->have_weights_total;
  if ((a->have_ratio || a->have_fraction || a->have_reserve || weights_given) &&
      (a->have_budget || a->n_budgets > 0)) {
    fprintf(stderr,
            "kvplan plan: --%s applies to measured memory; --budget and "
            "--budget-per-gpu give the bytes themselves\n",
            a->have_ratio      ? "memory-ratio"
            : a->have_fraction ? "mem-fraction"
            : a->have_reserve  ? "reserve"
            : a->have_weights  ? "weights"
            : a->n_weights > 0 ? "weights-per-gpu"
                               : "weights-total");
    return 2;
  }
  if (!(a->memory_ratio > 0.0 && a->memory_ratio <= 1.0)) {
    fprintf(stderr, "kvplan plan: --%s must be in (0, 1], got %g\n",
            a->have_ratio ? "memory-ratio" : "mem-fraction", a->memory_ratio);
    return 2;
  }
  if (a->have_nodes && (a->nodes == 0 || a->nodes > KVS_MAX_NODES)) {
    fprintf(stderr, "kvplan plan: --nodes must be between 1 and %d, got %llu\n", KVS_MAX_NODES,
            (unsigned long long)a->nodes);
    return 2;
  }
  if (a->have_tp && (a->tp == 0 || a->tp > MAX_GPUS)) {
    fprintf(stderr, "kvplan plan: --tp must be between 1 and %d, got %llu\n", MAX_GPUS,
            (unsigned long long)a->tp);
    return 2;
  }
  if (a->have_pp && (a->pp == 0 || a->pp > MAX_GPUS)) {
    fprintf(stderr, "kvplan plan: --pp must be between 1 and %d, got %llu\n", MAX_GPUS,
            (unsigned long long)a->pp);
    return 2;
  }
  return 0;
}

static void print_json(json_t *object) {
  char *text = json_dumps(object, JSON_COMPACT);
  printf("%s\n", text);
  free(text);
  json_decref(object);
}

static const char *numa_text(int numa, char *buf, size_t len) {
  if (numa < 0) return "-";
  snprintf(buf, len, "%d", numa);
  return buf;
}

static void print_table(kvs_node_plan_t plan, const kvs_gpu_info *gpus,
                        const kvs_memory_budget *terms, size_t n_nodes) {
  const kvs_split *split = kvs_node_plan_split(plan);
  static const char *const heads[] = {"window",  "compressed", "indexer", "state",
                                      "idx_state", "mapping",  "scratch", "ctl+pad",
                                      "pool",    "weights",    "budget",  "headroom"};
  if (n_nodes > 1) printf("%4s ", "node");
  printf("%4s %3s %3s %4s %-12s %4s %-7s", "rank", "tp", "pp", "gpu", "pci_busid", "numa",
         "layers");
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) printf(" %10s", heads[i]);
  printf("\n");
  for (size_t r = 0; r < kvs_node_plan_rank_count(plan); r++) {
    const kvs_rank_plan *rp = kvs_node_plan_rank(plan, r);
    const kvs_gpu_info *gpu = &gpus[rp->gpu];
    char layers[32], numa[16], buf[32];
    snprintf(layers, sizeof layers, "%zu-%zu", rp->first, rp->end - 1);
    if (n_nodes > 1) printf("%4zu ", gpu->node);
    printf("%4zu %3zu %3zu %4zu %-12s %4s %-7s", rp->rank, rp->tp_rank, rp->pp_stage, gpu->index,
           gpu->pci_busid, numa_text(gpu->numa_node, numa, sizeof numa), layers);
    const uint64_t cells[] = {
        rp->bytes.window,       rp->bytes.compressed,
        rp->bytes.indexer,      rp->bytes.state,
        rp->bytes.index_state,  rp->bytes.mapping,
        rp->bytes.scratch,      rp->device.control_bytes + rp->device.padding_bytes,
        rp->device.total_bytes, terms[rp->gpu].weights_bytes + rp->weight_bytes,
        rp->budget_bytes,       rp->headroom_bytes};
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
      printf(" %10s", kvs_format_bytes(cells[i], buf, sizeof buf));
    }
    printf("%s\n", r == kvs_node_plan_limiting_rank(plan) ? "  <- limit" : "");
  }
  const kvs_rank_plan *lim = kvs_node_plan_rank(plan, kvs_node_plan_limiting_rank(plan));
  const kvs_gpu_info *gpu = &gpus[lim->gpu];
  char numa[16], buf[32];
  printf(
      "\nnum_pages   %llu pages of %llu tokens = %llu tokens of history, common to all "
      "ranks\n",
      (unsigned long long)split->num_pages, (unsigned long long)split->stages[0].sizes.page,
      (unsigned long long)split->full_token);
  printf("window      %llu pages (%llu slots) on every rank\n",
         (unsigned long long)split->n_win_pages,
         (unsigned long long)split->stages[0].sizes.n_win_slots);
  printf(
      "limited by  rank %zu: GPU %zu (%s, NUMA %s), stage %zu, layers %zu-%zu, headroom %s "
      "(%llu bytes): one more page does not fit its stage\n",
      lim->rank, gpu->index, gpu->pci_busid, numa_text(gpu->numa_node, numa, sizeof numa),
      lim->pp_stage, lim->first, lim->end - 1,
      kvs_format_bytes(lim->headroom_bytes, buf, sizeof buf),
      (unsigned long long)lim->headroom_bytes);
}

/* Step 1, as the node takes it; *note explains a stand-in. */
static int load_topology(const plan_args *a, kvs_cluster_t *out, char *note, size_t note_len) {
  kvs_error err;
  char why[768];
  if (kvs_cluster_open(a->topology, a->have_nodes ? (size_t)a->nodes : 0, out, why, sizeof why,
                       &err) != KVS_OK) {
    fprintf(stderr, "kvplan plan: %s\n", err.message);
    return err.status == KVS_ERR_INVALID_ARGUMENT ? 2 : 1;
  }
  if (why[0] != '\0') snprintf(note, note_len, "kvplan: %s", why);
  return 0;
}

/* Step 3, as the node takes it: budgets[0..n) and the terms behind them;
 * *what describes them for people. */
static int pick_budgets(const plan_args *a, kvs_cluster_t topo, const char *weights_term,
                        bool layer_weights, kvs_memory_budget *terms, uint64_t *budgets, char *what, size_t what_len,
                        char *note, size_t note_len) {
  size_t n = kvs_cluster_gpu_count(topo);
  kvs_budget_request request = KVS_BUDGET_REQUEST_INIT;
  if (a->have_budget) request.budget_bytes = a->budget;
  if (a->n_budgets > 0) {
    request.budget_per_gpu = a->budgets;
    request.n_budget_per_gpu = a->n_budgets;
  }
  request.memory_ratio = a->memory_ratio;
  if (a->have_reserve) request.reserve_bytes = a->reserve;
  if (a->have_weights) request.weights_bytes = a->weights;
  if (a->n_weights > 0) {
    request.weights_per_gpu = a->weights_list;
    request.n_weights_per_gpu = a->n_weights;
  }
  kvs_error err;
  if (a->n_budgets > 0 && a->n_budgets != n) {
    fprintf(stderr,
            "kvplan plan: --budget-per-gpu lists %zu budgets but topology '%s' has %zu "
            "GPUs\n",
            a->n_budgets, kvs_cluster_label(topo), n);
    return 2;
  }
  if (a->n_weights > 0 && a->n_weights != n) {
    fprintf(stderr,
            "kvplan plan: --weights-per-gpu lists %zu sizes but topology '%s' has %zu GPUs\n",
            a->n_weights, kvs_cluster_label(topo), n);
    return 2;
  }
  if (kvs_node_budgets(&request, kvs_cluster_gpus(topo), n, terms, &err) != KVS_OK) {
    fprintf(stderr, "kvplan plan: %s\n", err.message);
    return 1;
  }
  for (size_t i = 0; i < n; i++) budgets[i] = terms[i].budget_bytes;
  char buf[32], reserve[32];
  kvs_format_bytes(terms[0].reserve_bytes, reserve, sizeof reserve);
  switch (terms[0].source) {
    case KVS_BUDGET_EXPLICIT:
      if (a->have_budget) {
        snprintf(what, what_len, "%s per GPU (--budget)",
                 kvs_format_bytes(a->budget, buf, sizeof buf));
      } else {
        snprintf(what, what_len, "per GPU from --budget-per-gpu");
      }
      break;
    case KVS_BUDGET_MEASURED:
      snprintf(what, what_len, "free memory x %.2f%s - %s per GPU (CUDA)%s", a->memory_ratio,
               weights_term, reserve, layer_weights ? ", less each rank's layer weights" : "");
      break;
    case KVS_BUDGET_NOMINAL:
      snprintf(what, what_len, "nominal %llu GB x %.2f%s - %s%s%s per GPU%s",
               (unsigned long long)(terms[0].memory_bytes / 1000000000ull), a->memory_ratio,
               weights_term, reserve, a->n_weights > 0 ? "" : " = ",
               a->n_weights > 0 ? "" : kvs_format_bytes(budgets[0], buf, sizeof buf),
               layer_weights ? ", less each rank's layer weights" : "");
      if (note[0] == '\0') {
        snprintf(note, note_len,
                 "kvplan: no GPU memory measured (%s); budgets assume a nominal %llu GB per GPU "
                 "(give --budget or --budget-per-gpu)",
                 kvs_topology_cuda_note(kvs_cluster_node(topo, 0)),
                 (unsigned long long)(terms[0].memory_bytes / 1000000000ull));
      }
      break;
  }
  return 0;
}

/* A GPU whose budget cannot hold its stage's minimal pool: exit 1, the
 * JSON error object first (with --json) and the message last. A minimal
 * pool past the 4 EiB any byte flag may give (the library saturates what
 * overflows) is no shortfall but options no device could hold: exit 2. */
static int report_shortfall(const plan_args *a, const kvs_error *err, const kvs_plan_shortfall *s,
                            const kvs_gpu_info *gpus) {
  if (s->needed_bytes > KVS_MAX_BYTE_COUNT) {
    fprintf(stderr,
            "kvplan plan: the minimal pool of rank %zu (stage %zu, layers %zu-%zu, %llu pages) "
            "needs more than the %llu bytes (4 EiB) any budget may give: lower --page, "
            "--max-running, --max-seq-len or the geometry\n",
            s->rank, s->pp_stage, s->first, s->end - 1, (unsigned long long)s->min_pages,
            (unsigned long long)KVS_MAX_BYTE_COUNT);
    return 2;
  }
  if (a->json) {
    json_t *o = json_object();
    json_object_set_new(o, "error", json_string("budget_too_small"));
    json_object_set_new(o, "rank", kvs_json_u64(s->rank));
    json_object_set_new(o, "pp_stage", kvs_json_u64(s->pp_stage));
    json_object_set_new(o, "gpu", kvs_gpu_json(&gpus[s->gpu]));
    json_object_set_new(o, "layers",
                        json_pack("[II]", (json_int_t)s->first, (json_int_t)(s->end - 1)));
    json_object_set_new(o, "available_bytes", kvs_json_u64(s->available_bytes));
    json_object_set_new(o, "needed_bytes", kvs_json_u64(s->needed_bytes));
    json_object_set_new(o, "min_pages", kvs_json_u64(s->min_pages));
    print_json(o);
  }
  fflush(stdout);
  fprintf(stderr, "kvplan plan: %s\n", err->message);
  return 1;
}

/* Where the weights come from, and their per-layer estimate for a folder
 * at the plan's tp (layer_weights: planned layers entries, or NULL). */
typedef struct plan_weights {
  const char *source; /* "none", "measured", "folder", "total" */
  kvs_model_weights *folder;
  uint64_t *layer;
} plan_weights;

static int load_weights(const plan_args *a, const kvs_plan_model *m, size_t tp,
                        plan_weights *w) {
  w->source = "none";
  if (a->have_weights || a->n_weights > 0) {
    w->source = "measured";
    return 0;
  }
  bool folder = m->have_config && m->config.is_folder && !a->have_budget && a->n_budgets == 0;
  if (!folder && !a->have_weights_total) return 0;
  kvs_error err;
  size_t n_planned = kvs_geometry_layer_count(&m->geometry);
  w->folder = malloc(sizeof *w->folder);
  w->layer = calloc(n_planned, sizeof *w->layer);
  if (w->folder == NULL || w->layer == NULL) {
    fprintf(stderr, "kvplan plan: out of memory\n");
    return 1;
  }
  if (kvs_plan_weights_of(&m->config, a->have_weights_total, a->weights_total, w->folder, &err) !=
          KVS_OK ||
      kvs_plan_layer_weights(w->folder, n_planned, tp, w->layer, &err) != KVS_OK) {
    fprintf(stderr, "kvplan plan: %s\n", err.message);
    return 2;
  }
  w->source = a->have_weights_total ? "total" : "folder";
  return 0;
}

static size_t gcd(size_t a, size_t b) { return b == 0 ? a : gcd(b, a % b); }

/* tp x pp: every GPU of a machine in one TP group by default (over a
 * cluster, the largest group every node holds whole, the nodes as
 * pipeline stages); one of tp/pp alone takes the rest. */
static void pick_layout(const plan_args *a, kvs_cluster_t cluster, size_t *tp, size_t *pp) {
  size_t n = kvs_cluster_gpu_count(cluster);
  *tp = a->have_tp ? (size_t)a->tp : 0;
  *pp = a->have_pp ? (size_t)a->pp : 0;
  if (!a->have_tp && !a->have_pp) {
    size_t per_node = 0;
    for (size_t k = 0; k < kvs_cluster_node_count(cluster); k++) {
      per_node = gcd(per_node, kvs_topology_gpu_count(kvs_cluster_node(cluster, k)));
    }
    *tp = per_node > 0 ? per_node : n;
    *pp = n / *tp;
  } else if (!a->have_pp) {
    *pp = *tp <= n && n % *tp == 0 ? n / *tp : 1;
  } else if (!a->have_tp) {
    *tp = *pp <= n && n % *pp == 0 ? n / *pp : 1;
  }
}

/* "1, 2, 4 or 8": the counts k in [1, n] with n % (k * times) == 0. */
static void list_dividing(size_t n, size_t times, char *buf, size_t len) {
  size_t used = 0, count = 0, last = 0;
  buf[0] = '\0';
  for (size_t k = 1; k <= n && times > 0 && k * times <= n; k++) {
    if (n % (k * times) != 0) continue;
    if (count > 0 && used < len) {
      used += (size_t)snprintf(buf + used, len - used, "%s%zu", count > 1 ? ", " : "", last);
    }
    last = k;
    count++;
  }
  if (used < len) {
    snprintf(buf + used, len - used, "%s%zu", count > 1 ? " or " : "", count > 0 ? last : 0);
  }
}

/* tp x pp as picked, before any planning: the default is held to the
 * bounds --tp and --pp have, and a layout whose ranks do not divide the
 * GPUs is refused naming the values that do (exit 1: the plan cannot be
 * made on these GPUs), rather than by the library's bare refusal. */
static int check_layout(const plan_args *a, size_t n, size_t tp, size_t pp) {
  if (tp > MAX_GPUS || pp > MAX_GPUS) {
    fprintf(stderr,
            "kvplan plan: the default layout here is tp %zu x pp %zu, past the %d a tensor-"
            "parallel group or a pipeline may have (--tp and --pp refuse the same); give --tp "
            "and --pp\n",
            tp, pp, MAX_GPUS);
    return 1;
  }
  if (tp * pp > 0 && tp * pp <= n && n % (tp * pp) == 0) return 0;
  char values[512];
  /* The flag at fault: --tp beside a --pp that divides the GPUs (the tp
   * values that go with it), else whichever was given alone. */
  bool pp_divides = a->have_pp && a->pp <= n && n % a->pp == 0;
  const char *flag = a->have_pp && !(pp_divides && a->have_tp) ? "--pp" : "--tp";
  size_t times = pp_divides && a->have_tp ? (size_t)a->pp : 1;
  list_dividing(n, times, values, sizeof values);
  fprintf(stderr, "kvplan plan: tp %zu x pp %zu = %zu ranks, %s the %zu GPUs; %s can be %s%s\n",
          tp, pp, tp * pp, tp * pp > n ? "more ranks than" : "which does not divide", n, flag,
          values,
          times > 1                      ? " with this --pp"
          : a->have_tp && a->have_pp     ? ""
          : flag[2] == 't'               ? " (--pp then takes the rest)"
                                         : " (--tp then takes the rest)");
  return 1;
}

/* SGLang's pools on the same bytes: its own pipeline split, each stage on
 * its tightest GPU's budget less the weights of SGLang's layers for the
 * stage; the stage with the fewest tokens speaks for the server (every
 * stage serves the same requests). */
static int sglang_pools(const plan_args *a, const kvs_plan_model *m, kvs_node_plan_t plan,
                        const uint64_t *budgets, const uint64_t *layer_weights,
                        kvs_sglang_pools *out, uint64_t *available, json_t **stages_json) {
  kvs_error err;
  kvs_sglang_options so = kvs_plan_options_sglang(&a->options);
  size_t pp = kvs_node_plan_pp(plan), n_main = m->config.geometry.n_layers;
  size_t n_planned = kvs_geometry_layer_count(&m->geometry);
  json_t *stages = json_array();
  bool have_best = false;
  for (size_t s = 0; s < pp; s++) {
    size_t first, end;
    if (kvs_sglang_pp_range(n_main, pp, s, &first, &end, &err) != KVS_OK) {
      fprintf(stderr, "kvplan plan: --engine sglang: %s\n", err.message);
      json_decref(stages);
      return 2;
    }
    uint64_t avail = UINT64_MAX;
    for (size_t r = 0; r < kvs_node_plan_rank_count(plan); r++) {
      const kvs_rank_plan *rp = kvs_node_plan_rank(plan, r);
      if (rp->pp_stage == s && budgets[rp->gpu] < avail) avail = budgets[rp->gpu];
    }
    uint64_t w = 0;
    size_t weights_end = s + 1 == pp ? n_planned : end;
    for (size_t i = first; layer_weights != NULL && i < weights_end; i++) w += layer_weights[i];
    avail = avail > w ? avail - w : 0;
    kvs_sglang_pools p;
    if (kvs_sglang_report_compute(m, &so, first, end, avail, &p, &err) != KVS_OK) {
      fprintf(stderr, "kvplan plan: --engine sglang: %s\n", err.message);
      json_decref(stages);
      return 2;
    }
    json_t *one = kvs_sglang_report_json(&p, &so, avail);
    json_object_set_new(one, "layers", json_pack("[II]", (json_int_t)first, (json_int_t)(end - 1)));
    json_array_append_new(stages, one);
    if (!have_best || p.full < out->full) {
      *out = p;
      *available = avail;
      have_best = true;
    }
  }
  *stages_json = stages;
  return 0;
}

/* One plan being made: what run's steps hand each other. */
typedef struct plan_run {
  plan_args *a;
  kvs_plan_model *m;
  FILE *notes; /* stdout, or stderr under --json */
  kvs_cluster_t topo;
  const kvs_gpu_info *gpus;
  size_t n, n_nodes; /* GPUs, machines */
  size_t tp, pp;
  uint64_t *budgets;        /* per GPU: the KV budget */
  kvs_memory_budget *terms; /* per GPU: the rule's terms behind it */
  char budget_what[192];    /* the budgets, for people */
  char note[1024];          /* a stand-in topology or nominal memory, said once */
  plan_weights weights;
  kvs_node_plan_t plan;
  /* --engine sglang: the stage with the fewest tokens, and every stage. */
  kvs_sglang_pools sglang;
  uint64_t sglang_available;
  json_t *sglang_stages;
} plan_run;

/* The model and sizing flags, resolved; a probe solve refuses a geometry
 * no budget could hold before any topology is loaded. */
static int resolve_model(plan_args *a, kvs_plan_model *m) {
  kvs_error err;
  kvs_pool_sizes probe;
  if (kvs_plan_options_resolve(&a->options, m, &err) != KVS_OK ||
      kvs_pool_sizes_compute(2, &m->geometry, m->swa_ratio, a->options.page, 2, &probe, &err) !=
          KVS_OK) {
    fprintf(stderr, "kvplan plan: %s\n", err.message);
    return 2;
  }
  return 0;
}

/* First, so nobody reads a KV budget as if the weights were loaded. */
static void say_weights_uncounted(const plan_run *p) {
  const plan_args *a = p->a;
  bool explicit_budget = a->have_budget || a->n_budgets > 0;
  bool weights_given = a->have_weights || a->n_weights > 0 || a->have_weights_total;
  if (explicit_budget || weights_given || (p->m->have_config && p->m->config.is_folder)) return;
  fprintf(p->notes,
          "kvplan: weights are not counted (%s carries no weight size): the KV budgets below "
          "take the whole memory share; give --weights BYTES per GPU as the engine measured "
          "them, or --model FOLDER to count them from its safetensors\n",
          p->m->name);
}

/* The notes on the budgets just picked: a stand-in, the window cache's
 * pages, the weights counted from a folder. */
static void say_budget_notes(const plan_run *p) {
  const plan_args *a = p->a;
  if (p->note[0] != '\0') fprintf(p->notes, "%s\n", p->note);
  if (a->options.have_window_cache) {
    /* The share of the smallest GPU budget (before per-layer weights). */
    uint64_t smallest = UINT64_MAX;
    for (size_t g = 0; g < p->n; g++) {
      if (p->budgets[g] < smallest) smallest = p->budgets[g];
    }
    uint64_t extra = kvs_plan_model_window_cache(p->m, &a->options, smallest);
    fprintf(p->notes,
            "kvplan: --window-cache %g: the window floor plus %llu pages (that share of the "
            "smallest GPU budget), swa ratio 0\n",
            a->options.window_cache, (unsigned long long)extra);
  }
  if (p->weights.folder != NULL && strcmp(p->weights.source, "folder") == 0) {
    char buf[32];
    fprintf(p->notes,
            "kvplan: weights from %s: %s in %zu files (%llu tensors), estimated per GPU as %s\n",
            p->m->config.folder, kvs_format_bytes(p->weights.folder->total_bytes, buf, sizeof buf),
            p->weights.folder->n_files, (unsigned long long)p->weights.folder->n_tensors,
            kvs_plan_weights_estimate);
  }
}

/* Steps 2 and 3 on the loaded topology: the layout, the weights it
 * implies, and each GPU's budget. */
static int budget_gpus(plan_run *p) {
  const plan_args *a = p->a;
  p->n = kvs_cluster_gpu_count(p->topo);
  p->gpus = kvs_cluster_gpus(p->topo);
  p->n_nodes = kvs_cluster_node_count(p->topo);
  p->budgets = calloc(p->n, sizeof *p->budgets);
  p->terms = calloc(p->n, sizeof *p->terms);
  if (p->budgets == NULL || p->terms == NULL) {
    fprintf(stderr, "kvplan plan: out of memory\n");
    return 1;
  }
  pick_layout(a, p->topo, &p->tp, &p->pp);
  int rc = check_layout(a, p->n, p->tp, p->pp);
  if (rc != 0) return rc;
  rc = load_weights(a, p->m, p->tp == 0 ? 1 : p->tp, &p->weights);
  if (rc != 0) return rc;
  const char *weights_term = strcmp(p->weights.source, "measured") == 0 ? " - weights" : "";
  rc = pick_budgets(a, p->topo, weights_term, p->weights.layer != NULL, p->terms, p->budgets,
                    p->budget_what, sizeof p->budget_what, p->note, sizeof p->note);
  if (rc != 0) return rc;
  say_budget_notes(p);
  return 0;
}

/* Step 4: the plan on those budgets, and SGLang's pools beside it. */
static int make_plan(plan_run *p) {
  const plan_args *a = p->a;
  kvs_plan_model *m = p->m;
  kvs_plan_request request = {.geometry = &m->geometry,
                              .widths = &m->widths,
                              .swa_ratio = m->swa_ratio,
                              .page = a->options.page,
                              .floor_win_pages = m->floor_pages,
                              .n_scratch = a->options.scratch,
                              .tp = p->tp,
                              .pp = p->pp,
                              .layer_weight_bytes = p->weights.layer,
                              .allow_cross_node_tp = a->allow_cross_node_tp};
  kvs_plan_shortfall shortfall;
  kvs_error err;
  kvs_status status =
      kvs_node_plan_make(&request, p->gpus, p->n, p->budgets, &p->plan, &shortfall, &err);
  if (status == KVS_ERR_BUDGET_TOO_SMALL) return report_shortfall(a, &err, &shortfall, p->gpus);
  if (status != KVS_OK) {
    fprintf(stderr, "kvplan plan: %s\n", err.message);
    return 1;
  }
  if (!a->options.engine_sglang) return 0;
  return sglang_pools(a, m, p->plan, p->budgets, p->weights.layer, &p->sglang, &p->sglang_available,
                      &p->sglang_stages);
}

/* --svg: the memory map, titled with the layout and what it buys. */
static int write_svg(const plan_run *p) {
  const kvs_split *split = kvs_node_plan_split(p->plan);
  char title[512], subtitle[512];
  snprintf(title, sizeof title, "%s · tp %zu x pp %zu%s · %zu GPUs · %s", p->m->name, p->tp, p->pp,
           kvs_node_plan_replicas(p->plan) > 1 ? " (replicated)" : "", p->n,
           kvs_cluster_label(p->topo));
  snprintf(subtitle, sizeof subtitle,
           "%llu pages x %llu = %llu tokens of history on every rank · window %llu pages · "
           "budget %s · limited by rank %zu",
           (unsigned long long)split->num_pages, (unsigned long long)split->stages[0].sizes.page,
           (unsigned long long)split->full_token, (unsigned long long)split->n_win_pages,
           p->budget_what, kvs_node_plan_limiting_rank(p->plan));
  const char *svg_labels[KVS_MAX_NODES];
  for (size_t k = 0; k < p->n_nodes; k++) svg_labels[k] = kvs_cluster_node_label(p->topo, k);
  kvs_plan_svg svg = {.title = title,
                      .subtitle = subtitle,
                      .plan = p->plan,
                      .gpus = p->gpus,
                      .n_gpus = p->n,
                      .node_labels = svg_labels,
                      .n_nodes = p->n_nodes};
  kvs_error err;
  if (kvs_plan_svg_write(p->a->svg, &svg, &err) != KVS_OK) {
    /* Output that cannot be written: exit 1, as the README says. */
    fprintf(stderr, "kvplan plan: %s\n", err.message);
    return 1;
  }
  return 0;
}

/* The JSON `weights` object: the counted folder (or --weights-total). */
static json_t *weights_json(const plan_run *p) {
  const kvs_model_weights *f = p->weights.folder;
  bool folder = strcmp(p->weights.source, "folder") == 0;
  json_t *w = json_object();
  json_object_set_new(w, "folder", folder ? json_string(p->m->config.folder) : json_null());
  json_object_set_new(w, "total_bytes", kvs_json_u64(f->total_bytes));
  json_object_set_new(w, "embed_bytes", kvs_json_u64(f->embed_bytes));
  json_object_set_new(w, "head_bytes", kvs_json_u64(f->head_bytes));
  json_object_set_new(w, "mtp_bytes", kvs_json_u64(f->mtp_bytes));
  json_object_set_new(w, "files", kvs_json_u64(f->n_files));
  json_object_set_new(w, "tensors", kvs_json_u64(f->n_tensors));
  json_object_set_new(
      w, "estimate",
      json_string(folder ? kvs_plan_weights_estimate : kvs_plan_weights_spread_estimate));
  return w;
}

/* --json: the plan object (plan_json.h), with weights and SGLang's pools. */
static void print_plan_json(plan_run *p) {
  const plan_args *a = p->a;
  const char *labels[KVS_MAX_NODES];
  for (size_t k = 0; k < p->n_nodes; k++) labels[k] = kvs_cluster_node_label(p->topo, k);
  const kvs_plan_json_context context = {kvs_kv_dtype_name(a->options.kv_dtype), a->options.mtp,
                                         p->weights.source, labels, p->n_nodes};
  json_t *root = kvs_plan_json(p->plan, p->gpus, p->terms, &context);
  if (p->weights.folder != NULL) json_object_set_new(root, "weights", weights_json(p));
  if (p->sglang_stages != NULL) {
    kvs_sglang_options so = kvs_plan_options_sglang(&a->options);
    json_t *sg = kvs_sglang_report_json(&p->sglang, &so, p->sglang_available);
    json_object_set_new(sg, "stages", p->sglang_stages);
    p->sglang_stages = NULL; /* sg owns them now */
    json_object_set_new(root, "sglang", sg);
  }
  print_json(root);
}

/* The "weights" line of the text plan. */
static const char *weights_line(const char *source) {
  if (strcmp(source, "none") == 0) return "not counted";
  if (strcmp(source, "measured") == 0) {
    return "as measured (--weights / --weights-per-gpu), per GPU";
  }
  if (strcmp(source, "total") == 0) {
    return "--weights-total spread evenly over the layers, per rank by its layers (estimate)";
  }
  return "from the model folder, per rank by its layers (estimate)";
}

/* The plan for people: the model, the machine, the terms, the table. */
static void print_plan_text(const plan_run *p) {
  const plan_args *a = p->a;
  kvs_plan_model_print(stdout, p->m, &a->options);
  size_t packages = 0, numas = 0;
  for (size_t k = 0; k < p->n_nodes; k++) {
    packages += kvs_topology_package_count(kvs_cluster_node(p->topo, k));
    numas += kvs_topology_numa_count(kvs_cluster_node(p->topo, k));
  }
  printf("topology    %s: %zu GPUs (%s), %zu packages, %zu NUMA nodes\n",
         kvs_cluster_label(p->topo), p->n,
         p->gpus[0].model[0] != '\0' ? p->gpus[0].model : "model unknown", packages, numas);
  size_t replicas = kvs_node_plan_replicas(p->plan);
  printf("layout      tp %zu x pp %zu = %zu ranks per replica, %zu replica%s%s\n", p->tp, p->pp,
         p->tp * p->pp, replicas, replicas > 1 ? "s" : "",
         kvs_node_plan_cross_node_tp(p->plan)
             ? "; tensor-parallel groups span nodes (--allow-cross-node-tp)"
             : "");
  printf("budget      %s\n", p->budget_what);
  printf("weights     %s\n", weights_line(p->weights.source));
  printf("sizing      window floor %llu pages, swa_ratio %g, page %llu, scratch %llu\n\n",
         (unsigned long long)p->m->floor_pages, p->m->swa_ratio,
         (unsigned long long)a->options.page, (unsigned long long)a->options.scratch);
  print_table(p->plan, p->gpus, p->terms, p->n_nodes);
  if (p->sglang_stages != NULL) {
    kvs_sglang_options so = kvs_plan_options_sglang(&a->options);
    kvs_sglang_report_print(stdout, &p->sglang, &so, p->sglang_available,
                            kvs_node_plan_split(p->plan)->full_token, a->options.kv_dtype);
  }
  if (a->svg != NULL) printf("svg         %s\n", a->svg);
}

static void release(plan_run *p) {
  json_decref(p->sglang_stages);
  kvs_node_plan_destroy(p->plan);
  free(p->weights.folder);
  free(p->weights.layer);
  free(p->budgets);
  free(p->terms);
  kvs_cluster_destroy(p->topo);
}

/* The plan, in the node's own steps: the model, the topology, budgets,
 * the plan; then the picture and the plan as JSON or a table. */
static int run(plan_args *a, kvs_plan_model *m) {
  int rc = resolve_model(a, m);
  if (rc != 0) return rc;
  plan_run p;
  memset(&p, 0, sizeof p);
  p.a = a;
  p.m = m;
  p.notes = a->json ? stderr : stdout;
  p.weights.source = "none";
  say_weights_uncounted(&p);
  rc = load_topology(a, &p.topo, p.note, sizeof p.note);
  if (rc == 0) rc = budget_gpus(&p);
  if (rc == 0) rc = make_plan(&p);
  if (rc == 0 && a->svg != NULL) rc = write_svg(&p);
  if (rc == 0) {
    if (a->json) {
      print_plan_json(&p);
    } else {
      print_plan_text(&p);
    }
  }
  release(&p);
  return rc;
}

int kvs_kvplan_plan(int argc, char **argv) {
  plan_args a;
  memset(&a, 0, sizeof a);
  kvs_plan_options_init(&a.options);
  a.memory_ratio = KVS_DEFAULT_MEMORY_RATIO;
  a.budgets = calloc(MAX_GPUS, sizeof *a.budgets);
  a.weights_list = calloc(MAX_GPUS, sizeof *a.weights_list);
  kvs_plan_model *model = malloc(sizeof *model);
  if (a.budgets == NULL || a.weights_list == NULL || model == NULL) {
    fprintf(stderr, "kvplan plan: out of memory\n");
    free(a.budgets);
    free(a.weights_list);
    free(model);
    return 1;
  }
  int rc = parse(argc, argv, &a);
  if (rc == 0) rc = run(&a, model);
  free(a.budgets);
  free(a.weights_list);
  free(model);
  return rc < 0 ? 0 : rc;
}

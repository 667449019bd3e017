/* kvplan plan: the per-rank KV plan of a serving node, the README's main
 * job and what `kvplan` runs with no arguments.
 *
 * The plan is made through the node's own setup steps (shard/node_setup.h):
 * the topology (live, --topology FILE, or the bundled server), each GPU's
 * budget by the one rule (CUDA's free memory, or a nominal 141 GB where
 * nothing is measured, x --memory-ratio - --reserve; or --budget /
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
#include "shard/node_setup.h"
#include "tools/args.h"
#include "tools/kvplan.h"
#include "tools/plan_json.h"
#include "tools/plan_options.h"
#include "tools/plan_svg.h"
#include "topology/node_plan.h"
#include "topology/source.h"
#include "topology/topology.h"

#define MAX_GPUS 1024

enum {
  OPT_TOPOLOGY = 1,
  OPT_TP,
  OPT_PP,
  OPT_BUDGET,
  OPT_BUDGET_PER_GPU,
  OPT_MEMORY_RATIO,
  OPT_RESERVE,
  OPT_JSON,
  OPT_SVG
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: kvplan [plan] [flags]\n"
          "  --topology FILE|live|bundled  hwloc XML export, the running machine or the\n"
          "                          built-in 8-GPU server (default: live when CUDA sees\n"
          "                          GPUs, else bundled)\n"
          "  --tp N --pp N           tensor x pipeline parallel layout (default: all GPUs as\n"
          "                          one TP group; one of them alone takes the rest); tp x pp\n"
          "                          dividing the GPUs runs GPUs/(tp x pp) replicas\n"
          "  --budget BYTES          KV budget of every GPU (80GiB, 141GB, ...)\n"
          "  --budget-per-gpu B0,B1,.. one budget per GPU, in GPU index order\n"
          "  --memory-ratio F        share of each GPU's free memory for KV (default 0.9)\n"
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
  bool have_ratio;
  double memory_ratio;
  bool have_reserve;
  uint64_t reserve;
  bool json;
  const char *svg;
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
    case OPT_RESERVE:
      a->have_reserve = true;
      return kvs_parse_bytes("--reserve", value, &a->reserve, err);
    case OPT_JSON:
      a->json = true;
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
      {"reserve", required_argument, NULL, OPT_RESERVE},
      {"json", no_argument, NULL, OPT_JSON},
      {"svg", required_argument, NULL, OPT_SVG},
  };
  int rc = kvs_plan_options_parse("kvplan plan", argc, argv, own, sizeof own / sizeof own[0],
                                  plan_flag, a, &a->options, usage);
  if (rc != 0) return rc;
  if ((a->have_budget ? 1 : 0) + (a->n_budgets > 0 ? 1 : 0) > 1) {
    fprintf(stderr, "kvplan plan: give --budget or --budget-per-gpu, not both\n");
    return 2;
  }
  if ((a->have_ratio || a->have_reserve) && (a->have_budget || a->n_budgets > 0)) {
    fprintf(stderr,
            "kvplan plan: --%s applies to measured memory; --budget and "
            "--budget-per-gpu give the bytes themselves\n",
            a->have_ratio ? "memory-ratio" : "reserve");
    return 2;
  }
  if (!(a->memory_ratio > 0.0 && a->memory_ratio <= 1.0)) {
    fprintf(stderr, "kvplan plan: --memory-ratio must be in (0, 1], got %g\n", a->memory_ratio);
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

static void print_table(kvs_node_plan_t plan, const kvs_gpu_info *gpus) {
  const kvs_split *split = kvs_node_plan_split(plan);
  static const char *const heads[] = {"window",    "compressed", "indexer", "state",
                                      "idx_state", "mapping",    "scratch", "ctl+pad",
                                      "pool",      "budget",     "headroom"};
  printf("%4s %3s %3s %4s %-12s %4s %-7s", "rank", "tp", "pp", "gpu", "pci_busid", "numa",
         "layers");
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) printf(" %10s", heads[i]);
  printf("\n");
  for (size_t r = 0; r < kvs_node_plan_rank_count(plan); r++) {
    const kvs_rank_plan *rp = kvs_node_plan_rank(plan, r);
    const kvs_gpu_info *gpu = &gpus[rp->gpu];
    char layers[32], numa[16], buf[32];
    snprintf(layers, sizeof layers, "%zu-%zu", rp->first, rp->end - 1);
    printf("%4zu %3zu %3zu %4zu %-12s %4s %-7s", rp->rank, rp->tp_rank, rp->pp_stage, gpu->index,
           gpu->pci_busid, numa_text(gpu->numa_node, numa, sizeof numa), layers);
    const uint64_t cells[] = {
        rp->bytes.window,       rp->bytes.compressed,
        rp->bytes.indexer,      rp->bytes.state,
        rp->bytes.index_state,  rp->bytes.mapping,
        rp->bytes.scratch,      rp->device.control_bytes + rp->device.padding_bytes,
        rp->device.total_bytes, rp->budget_bytes,
        rp->headroom_bytes};
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
static int load_topology(const plan_args *a, kvs_topology_t *out, char *note, size_t note_len) {
  kvs_error err;
  char why[768];
  if (kvs_node_topology_open(a->topology, out, why, sizeof why, &err) != KVS_OK) {
    fprintf(stderr, "kvplan plan: %s\n", err.message);
    return 1;
  }
  if (why[0] != '\0') snprintf(note, note_len, "kvplan: %s", why);
  return 0;
}

/* Step 3, as the node takes it: budgets[0..n) and the terms behind them;
 * *what describes them for people. */
static int pick_budgets(const plan_args *a, kvs_topology_t topo, kvs_memory_budget *terms,
                        uint64_t *budgets, char *what, size_t what_len, char *note,
                        size_t note_len) {
  size_t n = kvs_topology_gpu_count(topo);
  kvs_budget_request request = KVS_BUDGET_REQUEST_INIT;
  if (a->have_budget) request.budget_bytes = a->budget;
  if (a->n_budgets > 0) {
    request.budget_per_gpu = a->budgets;
    request.n_budget_per_gpu = a->n_budgets;
  }
  request.memory_ratio = a->memory_ratio;
  if (a->have_reserve) request.reserve_bytes = a->reserve;
  kvs_error err;
  if (a->n_budgets > 0 && a->n_budgets != n) {
    fprintf(stderr,
            "kvplan plan: --budget-per-gpu lists %zu budgets but topology '%s' has %zu "
            "GPUs\n",
            a->n_budgets, kvs_topology_label(topo), n);
    return 2;
  }
  if (kvs_node_budgets(&request, kvs_topology_gpus(topo), n, terms, &err) != KVS_OK) {
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
      snprintf(what, what_len, "free memory x %.2f - %s per GPU (CUDA)", a->memory_ratio, reserve);
      break;
    case KVS_BUDGET_NOMINAL:
      snprintf(what, what_len, "nominal %llu GB x %.2f - %s = %s per GPU",
               (unsigned long long)(terms[0].memory_bytes / 1000000000ull), a->memory_ratio,
               reserve, kvs_format_bytes(budgets[0], buf, sizeof buf));
      if (note[0] == '\0') {
        snprintf(note, note_len,
                 "kvplan: no GPU memory measured (%s); budgets assume a nominal %llu GB per GPU "
                 "(give --budget or --budget-per-gpu)",
                 kvs_topology_cuda_note(topo),
                 (unsigned long long)(terms[0].memory_bytes / 1000000000ull));
      }
      break;
  }
  return 0;
}

static int report_shortfall(const plan_args *a, const kvs_error *err, const kvs_plan_shortfall *s,
                            const kvs_gpu_info *gpus) {
  fprintf(stderr, "kvplan plan: %s\n", err->message);
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
  return 1;
}

static int run(plan_args *a) {
  kvs_error err;
  kvs_geometry geometry;
  uint64_t floor_pages;
  const char *model;
  kvs_pool_sizes probe;
  if (kvs_plan_options_resolve(&a->options, &geometry, &floor_pages, &model, &err) != KVS_OK ||
      kvs_pool_sizes_compute(2, &geometry, a->options.swa_ratio, a->options.page, 2, &probe,
                             &err) != KVS_OK) {
    fprintf(stderr, "kvplan plan: %s\n", err.message);
    return 2;
  }
  char note[1024] = "", budget_what[160];
  kvs_topology_t topo = NULL;
  int rc = load_topology(a, &topo, note, sizeof note);
  if (rc != 0) return rc;
  size_t n = kvs_topology_gpu_count(topo);
  const kvs_gpu_info *gpus = kvs_topology_gpus(topo);
  uint64_t *budgets = calloc(n, sizeof *budgets);
  kvs_memory_budget *terms = calloc(n, sizeof *terms);
  kvs_node_plan_t plan = NULL;
  if (budgets == NULL || terms == NULL) {
    fprintf(stderr, "kvplan plan: out of memory\n");
    rc = 1;
    goto done;
  }
  if ((rc = pick_budgets(a, topo, terms, budgets, budget_what, sizeof budget_what, note,
                         sizeof note)) != 0) {
    goto done;
  }
  if (note[0] != '\0') fprintf(a->json ? stderr : stdout, "%s\n", note);

  /* Defaults: every GPU in one TP group; one of tp/pp alone takes the rest. */
  size_t tp = a->have_tp ? (size_t)a->tp : 0, pp = a->have_pp ? (size_t)a->pp : 0;
  if (!a->have_tp && !a->have_pp) {
    tp = n;
    pp = 1;
  } else if (!a->have_pp) {
    pp = tp <= n && n % tp == 0 ? n / tp : 1;
  } else if (!a->have_tp) {
    tp = pp <= n && n % pp == 0 ? n / pp : 1;
  }
  kvs_plan_request request = {&geometry,
                              NULL,
                              a->options.swa_ratio,
                              a->options.page,
                              floor_pages,
                              a->options.scratch,
                              tp,
                              pp,
                              NULL,
                              NULL};
  kvs_plan_shortfall shortfall;
  kvs_status status = kvs_node_plan_make(&request, gpus, n, budgets, &plan, &shortfall, &err);
  if (status == KVS_ERR_BUDGET_TOO_SMALL) {
    rc = report_shortfall(a, &err, &shortfall, gpus);
    goto done;
  }
  if (status != KVS_OK) {
    fprintf(stderr, "kvplan plan: %s\n", err.message);
    rc = 1;
    goto done;
  }
  const kvs_split *split = kvs_node_plan_split(plan);
  char title[512], subtitle[512];
  snprintf(title, sizeof title, "%s · tp %zu x pp %zu%s · %zu GPUs · %s", model, tp, pp,
           kvs_node_plan_replicas(plan) > 1 ? " (replicated)" : "", n, kvs_topology_label(topo));
  snprintf(subtitle, sizeof subtitle,
           "%llu pages x %llu = %llu tokens of history on every rank · window %llu pages · "
           "budget %s · limited by rank %zu",
           (unsigned long long)split->num_pages, (unsigned long long)split->stages[0].sizes.page,
           (unsigned long long)split->full_token, (unsigned long long)split->n_win_pages,
           budget_what, kvs_node_plan_limiting_rank(plan));
  if (a->svg != NULL) {
    kvs_plan_svg svg = {title, subtitle, plan, gpus, n};
    if (kvs_plan_svg_write(a->svg, &svg, &err) != KVS_OK) {
      fprintf(stderr, "kvplan plan: %s\n", err.message);
      rc = 2;
      goto done;
    }
  }
  if (a->json) {
    print_json(kvs_plan_json(plan, gpus, terms));
  } else {
    kvs_cost_terms t;
    kvs_cost_terms_make(&geometry, 0, kvs_geometry_layer_count(&geometry), NULL, &t, NULL);
    printf(
        "model       %s: %llu layers (%llu window-only, %llu CSA, %llu HCA), head_dim %llu, "
        "index_head_dim %llu\n",
        model, (unsigned long long)t.n_layers, (unsigned long long)(t.n_layers - t.n_csa - t.n_hca),
        (unsigned long long)t.n_csa, (unsigned long long)t.n_hca,
        (unsigned long long)geometry.head_dim, (unsigned long long)geometry.index_head_dim);
    printf("topology    %s: %zu GPUs (%s), %zu packages, %zu NUMA nodes\n",
           kvs_topology_label(topo), n, gpus[0].model[0] != '\0' ? gpus[0].model : "model unknown",
           kvs_topology_package_count(topo), kvs_topology_numa_count(topo));
    printf("layout      tp %zu x pp %zu = %zu ranks per replica, %zu replica%s\n", tp, pp, tp * pp,
           kvs_node_plan_replicas(plan), kvs_node_plan_replicas(plan) > 1 ? "s" : "");
    printf("budget      %s\n", budget_what);
    printf("sizing      window floor %llu pages, swa_ratio %g, page %llu, scratch %llu\n\n",
           (unsigned long long)floor_pages, a->options.swa_ratio,
           (unsigned long long)a->options.page, (unsigned long long)a->options.scratch);
    print_table(plan, gpus);
    if (a->svg != NULL) printf("svg         %s\n", a->svg);
  }
  rc = 0;
done:
  kvs_node_plan_destroy(plan);
  free(budgets);
  free(terms);
  kvs_topology_destroy(topo);
  return rc;
}

int kvs_kvplan_plan(int argc, char **argv) {
  plan_args a;
  memset(&a, 0, sizeof a);
  kvs_plan_options_init(&a.options);
  a.memory_ratio = KVS_DEFAULT_MEMORY_RATIO;
  a.budgets = calloc(MAX_GPUS, sizeof *a.budgets);
  if (a.budgets == NULL) {
    fprintf(stderr, "kvplan plan: out of memory\n");
    return 1;
  }
  int rc = parse(argc, argv, &a);
  if (rc == 0) rc = run(&a);
  free(a.budgets);
  return rc < 0 ? 0 : rc;
}

/* kvplan plan: the per-rank KV plan of a deployment, docs/operators.md's main
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
#include "plan/node_overhead.h"
#include "plan/node_setup.h"
#include "kvplan/args.h"
#include "kvplan/kvplan.h"
#include "kvplan/plan_json.h"
#include "kvplan/kvplan_plan_internal.h"
#include "kvplan/plan_engine.h"
#include "kvplan/plan_options.h"
#include "kvplan/plan_svg.h"
#include "kvplan/plan_weights.h"
#include "kvplan/sglang_report.h"
#include "plan/deployment.h"
#include "plan/parallel.h"
#include "shard/plan_overhead.h"
#include "topology/source.h"
#include "topology/topology.h"
#include "kvplan/tool_io.h"

#define MAX_GPUS KVS_KVPLAN_MAX_GPUS

/* The deployment flags plan takes: all of them. */
#define PLAN_DEPLOY_FLAGS KVS_DEPLOY_ALL

enum {
  OPT_JSON = 1,
  OPT_SVG,
  OPT_DP,
  OPT_EP,
  OPT_LAUNCH,
  OPT_PREFIX_CACHE,
};

static void usage(FILE *out) {
  fputs("usage: kvplan [plan] [flags]\n", out);
  kvs_deploy_flags_help(out, PLAN_DEPLOY_FLAGS);
  fprintf(out,
          "  --dp N                  attention data-parallel groups per replica, each tp x pp\n"
          "                          ranks with its own requests and KV (default 1)\n"
          "  --ep N                  routed experts sharded over N GPUs, dividing tp x dp\n"
          "                          (default 1); needs the weights split by kind\n"
          "  --launch                with --engine sglang: the SGLang flags that reproduce\n"
          "                          the plan (JSON: launch); over several hosts, one line\n"
          "                          per host with --nnodes, --node-rank and --dist-init-addr\n"
          "                          HOSTk:PORT (host k's address and a free port, for you\n"
          "                          to fill in; k is the server's first host)\n"
          "  --prefix-cache          with a prefix cache: the retained window tails the\n"
          "                          window holds past the running requests' working set;\n"
          "                          --host-cache implies it (its slots, slot bytes, tokens)\n"
          "%s"
          "  --json                  one JSON object on stdout (notes go to stderr)\n"
          "  --svg FILE              write the memory map as SVG\n"
          "--tp and --pp default to all GPUs as one TP group (one of them alone takes the\n"
          "rest); tp x pp dividing the GPUs runs GPUs/(tp x pp) replicas. Weights default\n"
          "to those counted from a model folder, else none. A --reserve that cannot hold\n"
          "the node's buffers beside its carve is exit 1.\n"
          "With --engine sglang the budget is SGLang's: free after load - free before load\n"
          "x (1 - --mem-fraction), --mem-fraction defaulting to SGLang's own for the GPU\n"
          "exit status: 0 planned, 1 the plan cannot be made here, 2 bad usage\n",
          kvs_plan_options_help);
}

/* One of plan's own flags into args: data-parallel attention, expert
 * parallelism, the engine's launch flags, the prefix cache and output. */
static kvs_status plan_flag(void *ctx, int id, const char *value, kvs_error *err) {
  plan_args *a = ctx;
  switch (id) {
    case OPT_DP:
      a->have_dp = true;
      return kvs_parse_u64_in("--dp", value, 1, MAX_GPUS, "a group count in [1, 1024]", &a->dp,
                              err);
    case OPT_EP:
      a->have_ep = true;
      return kvs_parse_u64_in("--ep", value, 1, MAX_GPUS, "a GPU count in [1, 1024]", &a->ep, err);
    case OPT_LAUNCH:
      a->launch = true;
      return KVS_OK;
    case OPT_PREFIX_CACHE:
      a->prefix_cache = true;
      return KVS_OK;
    case OPT_JSON:
      a->json = true;
      return KVS_OK;
    default:
      a->svg = value;
      return KVS_OK; /* OPT_SVG */
  }
}

static bool explicit_budget(const plan_args *a) {
  return a->deploy.given[KVS_DEPLOY_BUDGET] || a->deploy.given[KVS_DEPLOY_BUDGET_PER_GPU];
}

/* The flags that only SGLang's rule reads, and the one it does not. */
static int check_engine_flags(const plan_args *a) {
  const char *needs = a->deploy.given[KVS_DEPLOY_FREE_BEFORE_LOAD]
                          ? "--free-before-load is P of SGLang's memory rule"
                      : a->launch ? "--launch prints SGLang's flags"
                                  : NULL;
  if (needs != NULL && !a->options.engine_sglang) {
    fprintf(kvs_tool_err(), "kvplan plan: %s: give --engine sglang\n", needs);
    return 2;
  }
  if (a->launch && explicit_budget(a)) {
    fprintf(kvs_tool_err(),
            "kvplan plan: --launch needs SGLang's memory rule to choose --mem-fraction-static; "
            "--budget gives the KV bytes themselves\n");
    return 2;
  }
  if (a->options.engine_sglang && a->deploy.given[KVS_DEPLOY_RESERVE]) {
    fprintf(kvs_tool_err(),
            "kvplan plan: --reserve is kvshard's rule; SGLang reserves nothing at sizing time "
            "(its activations and CUDA graphs live in free before load x (1 - "
            "--mem-fraction)): drop --reserve or --engine sglang\n");
    return 2;
  }
  uint64_t dp = a->have_dp ? a->dp : 1;
  if (a->options.engine_sglang && kvs_engine_max_running_total(&a->options) < dp) {
    fprintf(kvs_tool_err(),
            "kvplan plan: --max-running %llu is fewer than the %llu DP groups; SGLang gives each "
            "group max-running-requests / dp of them\n",
            (unsigned long long)kvs_engine_max_running_total(&a->options), (unsigned long long)dp);
    return 2;
  }
  return 0;
}

static int parse(int argc, char **argv, plan_args *a) {
  static const struct option own[] = {
      {"json", no_argument, NULL, OPT_JSON},
      {"svg", required_argument, NULL, OPT_SVG},
      {"dp", required_argument, NULL, OPT_DP},
      {"ep", required_argument, NULL, OPT_EP},
      {"launch", no_argument, NULL, OPT_LAUNCH},
      {"prefix-cache", no_argument, NULL, OPT_PREFIX_CACHE},
  };
  const kvs_plan_parser parser = {"kvplan plan", own,         sizeof own / sizeof own[0],
                                  plan_flag,     a,           PLAN_DEPLOY_FLAGS,
                                  &a->deploy,    &a->options, usage};
  int rc = kvs_plan_options_parse(&parser, argc, argv);
  kvs_error err;
  if (rc == 0 &&
      kvs_deploy_flags_check(&a->deploy, PLAN_DEPLOY_FLAGS, NULL, false, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    rc = 2;
  }
  if (rc == 0) rc = check_engine_flags(a);
  return rc;
}

static void print_json(json_t *object) {
  char *text = json_dumps(object, JSON_COMPACT);
  fprintf(kvs_tool_out(), "%s\n", text);
  free(text);
  json_decref(object);
}

static const char *numa_text(int numa, char *buf, size_t len) {
  if (numa < 0) return "-";
  snprintf(buf, len, "%d", numa);
  return buf;
}

static void print_table(kvs_deployment_t plan, const kvs_gpu_info *gpus,
                        const kvs_memory_budget *terms, size_t n_hosts) {
  const kvs_split *split = kvs_deployment_split(plan);
  static const char *const heads[] = {"window",    "compressed", "indexer", "state",
                                      "idx_state", "mapping",    "scratch", "ctl+pad",
                                      "pool",      "weights",    "budget",  "headroom"};
  if (n_hosts > 1) fprintf(kvs_tool_out(), "%4s ", "node");
  fprintf(kvs_tool_out(), "%4s %3s %3s %4s %-12s %4s %-7s", "rank", "tp", "pp", "gpu", "pci_busid",
          "numa", "layers");
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
    fprintf(kvs_tool_out(), " %10s", heads[i]);
  fprintf(kvs_tool_out(), "\n");
  for (size_t r = 0; r < kvs_deployment_rank_count(plan); r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(plan, r);
    const kvs_gpu_info *gpu = &gpus[rp->gpu];
    char layers[32], numa[16], buf[32];
    snprintf(layers, sizeof layers, "%zu-%zu", rp->first, rp->end - 1);
    if (n_hosts > 1) fprintf(kvs_tool_out(), "%4zu ", gpu->host);
    fprintf(kvs_tool_out(), "%4zu %3zu %3zu %4zu %-12s %4s %-7s", rp->rank, rp->tp_rank,
            rp->pp_stage, gpu->index, gpu->pci_busid, numa_text(gpu->numa_node, numa, sizeof numa),
            layers);
    const uint64_t cells[] = {
        rp->bytes.window,       rp->bytes.compressed,
        rp->bytes.indexer,      rp->bytes.state,
        rp->bytes.index_state,  rp->bytes.mapping,
        rp->bytes.scratch,      rp->device.control_bytes + rp->device.padding_bytes,
        rp->device.total_bytes, terms[rp->gpu].weights_bytes + rp->weight_bytes,
        rp->budget_bytes,       rp->headroom_bytes};
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
      fprintf(kvs_tool_out(), " %10s", kvs_format_bytes(cells[i], buf, sizeof buf));
    }
    fprintf(kvs_tool_out(), "%s\n", r == kvs_deployment_limiting_rank(plan) ? "  <- limit" : "");
  }
  const kvs_rank_plan *lim = kvs_deployment_rank(plan, kvs_deployment_limiting_rank(plan));
  const kvs_gpu_info *gpu = &gpus[lim->gpu];
  char numa[16], buf[32];
  fprintf(kvs_tool_out(),
          "\nnum_pages   %llu pages of %llu tokens = %llu tokens of history, common to all "
          "ranks\n",
          (unsigned long long)split->num_pages, (unsigned long long)split->stages[0].sizes.page,
          (unsigned long long)split->full_token);
  fprintf(kvs_tool_out(), "window      %llu pages (%llu slots) on every rank\n",
          (unsigned long long)split->n_win_pages,
          (unsigned long long)split->stages[0].sizes.n_win_slots);
  fprintf(kvs_tool_out(),
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
  if (kvs_cluster_open(a->deploy.topology,
                       a->deploy.given[KVS_DEPLOY_NODES] ? (size_t)a->deploy.nodes : 0, out, why,
                       sizeof why, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    return err.status == KVS_ERR_INVALID_ARGUMENT ? 2 : 1;
  }
  /* Memory flags above what these GPUs have cannot be true: refused as
   * bad usage, in the sentence fit, kvsim and the node use. */
  if (kvs_deploy_flags_check_gpus(&a->deploy, PLAN_DEPLOY_FLAGS, kvs_cluster_gpus(*out),
                                  kvs_cluster_gpu_count(*out), &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    return 2;
  }
  if (why[0] != '\0') snprintf(note, note_len, "kvplan: %s", why);
  return 0;
}

/* The budget line and the note for memory nothing measured: the total
 * the driver of the GPU's model reports, or --gpu-memory. */
static void describe_nominal(const plan_args *a, kvs_cluster_t topo, const kvs_memory_budget *terms,
                             const char *weights_term, bool layer_weights, char *what,
                             size_t what_len, char *note, size_t note_len) {
  char memory[32], reserve[32], budget[32];
  kvs_format_bytes(terms[0].memory_bytes, memory, sizeof memory);
  kvs_format_bytes(terms[0].reserve_bytes, reserve, sizeof reserve);
  const char *source = a->deploy.gpu_memory != 0 ? "--gpu-memory" : "nominal";
  snprintf(
      what, what_len, "%s %s x %.2f%s - %s%s%s per GPU%s", source, memory, a->deploy.mem_fraction,
      weights_term, reserve, a->deploy.n_weights > 0 ? "" : " = ",
      a->deploy.n_weights > 0 ? "" : kvs_format_bytes(terms[0].budget_bytes, budget, sizeof budget),
      layer_weights ? ", less each rank's layer weights" : "");
  if (note[0] == '\0' && a->deploy.gpu_memory == 0) {
    snprintf(note, note_len,
             "kvplan: no GPU memory measured (%s); budgets assume each GPU's memory as its "
             "driver reports it, %s (%llu MiB) per GPU (give --gpu-memory, --budget or "
             "--budget-per-gpu)",
             kvs_topology_cuda_note(kvs_cluster_host(topo, 0)), memory,
             (unsigned long long)(terms[0].memory_bytes >> 20));
  }
}

/* Step 3, as the node takes it: budgets[0..n) and the terms behind them;
 * *what describes them for people. */
static int pick_budgets(const plan_args *a, kvs_cluster_t topo, const char *weights_term,
                        bool layer_weights, kvs_memory_budget *terms, uint64_t *budgets, char *what,
                        size_t what_len, char *note, size_t note_len) {
  size_t n = kvs_cluster_gpu_count(topo);
  kvs_budget_request request = KVS_BUDGET_REQUEST_INIT;
  if (a->deploy.given[KVS_DEPLOY_BUDGET]) request.budget_bytes = a->deploy.budget;
  if (a->deploy.n_budgets > 0) {
    request.budget_per_gpu = a->deploy.budgets;
    request.n_budget_per_gpu = a->deploy.n_budgets;
  }
  request.memory_ratio = a->deploy.mem_fraction;
  if (a->deploy.given[KVS_DEPLOY_RESERVE]) request.reserve_bytes = a->deploy.reserve;
  if (a->deploy.given[KVS_DEPLOY_WEIGHTS]) request.weights_bytes = a->deploy.weights;
  if (a->deploy.n_weights > 0) {
    request.weights_per_gpu = a->deploy.weights_list;
    request.n_weights_per_gpu = a->deploy.n_weights;
  }
  kvs_error err;
  if (a->deploy.n_budgets > 0 && a->deploy.n_budgets != n) {
    fprintf(kvs_tool_err(),
            "kvplan plan: --budget-per-gpu lists %zu budgets but topology '%s' has %zu "
            "GPUs\n",
            a->deploy.n_budgets, kvs_cluster_label(topo), n);
    return 2;
  }
  if (a->deploy.n_weights > 0 && a->deploy.n_weights != n) {
    fprintf(kvs_tool_err(),
            "kvplan plan: --weights-per-gpu lists %zu sizes but topology '%s' has %zu GPUs\n",
            a->deploy.n_weights, kvs_cluster_label(topo), n);
    return 2;
  }
  if (kvs_node_budgets_on_memory(&request, a->deploy.gpu_memory, kvs_cluster_gpus(topo), n, terms,
                                 &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    return 1;
  }
  for (size_t i = 0; i < n; i++) budgets[i] = terms[i].budget_bytes;
  char buf[32], reserve[32];
  kvs_format_bytes(terms[0].reserve_bytes, reserve, sizeof reserve);
  switch (terms[0].source) {
    case KVS_BUDGET_EXPLICIT:
      if (a->deploy.given[KVS_DEPLOY_BUDGET]) {
        snprintf(what, what_len, "%s per GPU (--budget)",
                 kvs_format_bytes(a->deploy.budget, buf, sizeof buf));
      } else {
        snprintf(what, what_len, "per GPU from --budget-per-gpu");
      }
      break;
    case KVS_BUDGET_MEASURED:
      snprintf(what, what_len, "free memory x %.2f%s - %s per GPU (CUDA)%s", a->deploy.mem_fraction,
               weights_term, reserve, layer_weights ? ", less each rank's layer weights" : "");
      break;
    case KVS_BUDGET_NOMINAL:
      describe_nominal(a, topo, terms, weights_term, layer_weights, what, what_len, note, note_len);
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
    fprintf(kvs_tool_err(),
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
  fflush(kvs_tool_out());
  fprintf(kvs_tool_err(), "kvplan plan: %s\n", err->message);
  return 1;
}

/* Where the weights come from, and their per-layer estimate for a folder
 * at the plan's tp (layer_weights: planned layers entries, or NULL). */

/* Where the weights come from when they are counted per layer: a split or
 * total on the command line, else a model folder (neither with explicit
 * budgets, which are the KV bytes themselves). */
static const char *layer_source(const plan_args *a, const kvs_plan_model *m) {
  if (a->deploy.given[KVS_DEPLOY_EXPERT_WEIGHTS]) return "split";
  if (a->deploy.given[KVS_DEPLOY_WEIGHTS_TOTAL]) return "total";
  bool folder = m->have_config && m->config.is_folder && !explicit_budget(a);
  return folder ? "folder" : NULL;
}

/* Data-parallel attention and expert parallelism divide the routed
 * experts apart from the rest, so they need the weights told apart by
 * kind: a folder whose tensors name their experts, or the two flags. A
 * total alone, or nothing counted under --ep, is refused naming the flag;
 * measured per-GPU weights are taken as measured at this layout. */
static int check_split(const plan_args *a, const kvs_plan_model *m, const kvs_parallel *l,
                       const plan_weights *w) {
  const char *flag = l->ep > 1 ? "--ep" : l->dp > 1 ? "--dp" : NULL;
  if (flag == NULL || strcmp(w->source, "measured") == 0 || explicit_budget(a)) return 0;
  size_t count = l->ep > 1 ? l->ep : l->dp;
  if (strcmp(w->source, "total") == 0 || strcmp(w->source, "none") == 0) {
    fprintf(kvs_tool_err(),
            "kvplan plan: %s %zu shares the routed experts over tp x dp GPUs and keeps the rest "
            "per tp group, which needs the weights split by kind: %s; give --expert-weights and "
            "--shared-weights, or --model FOLDER (or --weights as measured at this layout)\n",
            flag, count,
            strcmp(w->source, "total") == 0 ? "--weights-total does not say which is which"
                                            : "none are counted");
    return 2;
  }
  if (strcmp(w->source, "folder") == 0 && w->folder->n_expert_tensors == 0) {
    fprintf(kvs_tool_err(),
            "kvplan plan: %s %zu: no tensor of model folder %s is a routed expert's (names with "
            "mlp.experts.<e>. or ffn.experts.<e>.); give --expert-weights and --shared-weights\n",
            flag, count, m->config.folder);
    return 2;
  }
  return 0;
}

/* The weights per planned layer at the layout: shared bytes over tp, the
 * routed experts over tp x dp. */
static int load_weights(const plan_args *a, const kvs_plan_model *m, const kvs_parallel *l,
                        plan_weights *w) {
  w->source = a->deploy.given[KVS_DEPLOY_WEIGHTS] || a->deploy.n_weights > 0 ? "measured" : "none";
  const char *source = layer_source(a, m);
  if (source == NULL) return check_split(a, m, l, w);
  kvs_error err;
  size_t n_planned = kvs_geometry_layer_count(&m->geometry);
  w->folder = malloc(sizeof *w->folder);
  w->layer = calloc(n_planned, sizeof *w->layer);
  if (w->folder == NULL || w->layer == NULL) {
    fprintf(kvs_tool_err(), "kvplan plan: out of memory\n");
    return 1;
  }
  const kvs_plan_weights_given given = {a->deploy.given[KVS_DEPLOY_WEIGHTS_TOTAL],
                                        a->deploy.weights_total,
                                        a->deploy.given[KVS_DEPLOY_EXPERT_WEIGHTS],
                                        a->deploy.expert_weights, a->deploy.shared_weights};
  if (kvs_plan_weights_of(&m->config, &given, w->folder, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    return 2;
  }
  w->source = source;
  int rc = check_split(a, m, l, w);
  if (rc == 0 && kvs_plan_layer_weights(w->folder, n_planned, l->tp, kvs_parallel_moe_gpus(l),
                                        w->layer, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    rc = 2;
  }
  return rc;
}

static size_t gcd(size_t a, size_t b) { return b == 0 ? a : gcd(b, a % b); }

/* tp x pp x dp: every GPU of a machine in one TP group by default (over a
 * cluster, the largest group every node holds whole, the nodes as
 * pipeline stages), --dp groups cut from it; one of tp/pp alone takes the
 * rest of a group's share. */
static void pick_layout(const plan_args *a, kvs_cluster_t cluster, kvs_parallel *l) {
  size_t n = kvs_cluster_gpu_count(cluster);
  l->dp = a->have_dp ? (size_t)a->dp : 1;
  l->ep = a->have_ep ? (size_t)a->ep : 1;
  l->tp = a->deploy.given[KVS_DEPLOY_TP] ? (size_t)a->deploy.tp : 0;
  l->pp = a->deploy.given[KVS_DEPLOY_PP] ? (size_t)a->deploy.pp : 0;
  size_t share = l->dp <= n && n % l->dp == 0 ? n / l->dp : n; /* GPUs of the groups' tp x pp */
  if (!a->deploy.given[KVS_DEPLOY_TP] && !a->deploy.given[KVS_DEPLOY_PP]) {
    size_t per_host = 0;
    for (size_t k = 0; k < kvs_cluster_host_count(cluster); k++) {
      per_host = gcd(per_host, kvs_topology_gpu_count(kvs_cluster_host(cluster, k)));
    }
    l->tp = per_host > 0 ? per_host : n;
    if (l->tp % l->dp == 0) l->tp /= l->dp;
    l->pp = share / (l->tp > 0 && share % l->tp == 0 ? l->tp : share);
  } else if (!a->deploy.given[KVS_DEPLOY_PP]) {
    l->pp = l->tp <= share && share % l->tp == 0 ? share / l->tp : 1;
  } else if (!a->deploy.given[KVS_DEPLOY_TP]) {
    l->tp = l->pp <= share && share % l->pp == 0 ? share / l->pp : 1;
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
static int check_tp_pp(const plan_args *a, size_t n, size_t tp, size_t pp) {
  if (tp > MAX_GPUS || pp > MAX_GPUS) {
    fprintf(kvs_tool_err(),
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
  bool pp_divides = a->deploy.given[KVS_DEPLOY_PP] && a->deploy.pp <= n && n % a->deploy.pp == 0;
  const char *flag =
      a->deploy.given[KVS_DEPLOY_PP] && !(pp_divides && a->deploy.given[KVS_DEPLOY_TP]) ? "--pp"
                                                                                        : "--tp";
  size_t times = pp_divides && a->deploy.given[KVS_DEPLOY_TP] ? (size_t)a->deploy.pp : 1;
  list_dividing(n, times, values, sizeof values);
  fprintf(kvs_tool_err(),
          "kvplan plan: tp %zu x pp %zu = %zu ranks, %s the %zu GPUs; %s can be %s%s\n", tp, pp,
          tp * pp, tp * pp > n ? "more ranks than" : "which does not divide", n, flag, values,
          times > 1                                                          ? " with this --pp"
          : a->deploy.given[KVS_DEPLOY_TP] && a->deploy.given[KVS_DEPLOY_PP] ? ""
          : flag[2] == 't' ? " (--pp then takes the rest)"
                           : " (--tp then takes the rest)");
  return 1;
}

/* The whole layout: tp x pp as before, then --dp and --ep on top of it
 * (plan/parallel.h names the flag at fault). Exit 1: these GPUs cannot
 * hold it. */
static int check_layout(const plan_args *a, size_t n, const kvs_parallel *l) {
  if (l->dp > n || n % l->dp != 0) {
    char values[512];
    list_dividing(n, 1, values, sizeof values);
    fprintf(kvs_tool_err(), "kvplan plan: --dp %zu does not divide the %zu GPUs; --dp can be %s\n",
            l->dp, n, values);
    return 1;
  }
  int rc = check_tp_pp(a, n, l->tp, l->pp);
  if (rc != 0) return rc;
  kvs_error err;
  if (kvs_parallel_check(l, n, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    return 1;
  }
  return 0;
}

/* The model and sizing flags, resolved; a probe solve refuses a geometry
 * no budget could hold before any topology is loaded. */
static int resolve_model(plan_args *a, kvs_plan_model *m) {
  kvs_error err;
  kvs_pool_sizes probe;
  if (kvs_plan_options_resolve(&a->options, m, &err) != KVS_OK ||
      kvs_pool_sizes_compute(2, &m->geometry, m->swa_ratio, a->options.page, 2, &probe, &err) !=
          KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    return 2;
  }
  /* A node with a prefix cache (a host tier has one) carves tail states:
   * priced as it carves them. */
  m->prefix_cache = a->prefix_cache || a->deploy.host_cache > 0 || a->deploy.disk_cache > 0;
  kvs_plan_model_place_rings(m, m->widths.state_rings, a->options.max_running);
  return 0;
}

/* First, so nobody reads a KV budget as if the weights were loaded. Said
 * exactly when the plan's weights_source will be "none": by the same
 * tests load_weights makes (measured, then layer_source's split, total or
 * folder), so the note and the JSON never disagree. */
static void say_weights_uncounted(const plan_run *p) {
  const plan_args *a = p->a;
  bool measured = a->deploy.given[KVS_DEPLOY_WEIGHTS] || a->deploy.n_weights > 0;
  if (p->notes == NULL || explicit_budget(a) || measured || layer_source(a, p->m) != NULL) return;
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
  if (p->note[0] != '\0' && p->notes != NULL) fprintf(p->notes, "%s\n", p->note);
  if (a->options.have_window_cache) {
    /* The share of the smallest GPU budget (before per-layer weights). */
    uint64_t smallest = UINT64_MAX;
    for (size_t g = 0; g < p->n; g++) {
      if (p->budgets[g] < smallest) smallest = p->budgets[g];
    }
    uint64_t extra = kvs_plan_model_window_cache(p->m, &a->options, smallest);
    if (p->notes == NULL) return; /* the pages are added all the same */
    fprintf(p->notes,
            "kvplan: --window-cache %g: the window floor plus %llu pages (that share of the "
            "smallest GPU budget), swa ratio 0\n",
            a->options.window_cache, (unsigned long long)extra);
  }
  if (p->notes != NULL && p->weights.folder != NULL && strcmp(p->weights.source, "folder") == 0) {
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
  p->n_hosts = kvs_cluster_host_count(p->topo);
  p->budgets = calloc(p->n, sizeof *p->budgets);
  p->terms = calloc(p->n, sizeof *p->terms);
  if (p->budgets == NULL || p->terms == NULL) {
    fprintf(kvs_tool_err(), "kvplan plan: out of memory\n");
    return 1;
  }
  pick_layout(a, p->topo, &p->layout);
  int rc = check_layout(a, p->n, &p->layout);
  if (rc == 0) rc = load_weights(a, p->m, &p->layout, &p->weights);
  if (rc != 0) return rc;
  p->engine_rule = a->options.engine_sglang && !explicit_budget(a);
  if (p->engine_rule) {
    rc = kvplan_engine_budgets(p);
  } else {
    const char *weights_term = strcmp(p->weights.source, "measured") == 0 ? " - weights" : "";
    rc = pick_budgets(a, p->topo, weights_term, p->weights.layer != NULL, p->terms, p->budgets,
                      p->budget_what, sizeof p->budget_what, p->note, sizeof p->note);
  }
  if (rc != 0) return rc;
  say_budget_notes(p);
  return 0;
}

/* The request the plan is made from (kvs_deployment_make's). */
kvs_plan_request kvplan_plan_request(const plan_run *p) {
  const plan_args *a = p->a;
  const kvs_plan_model *m = p->m;
  kvs_plan_request request = {.geometry = &m->geometry,
                              .widths = &m->widths,
                              .swa_ratio = m->swa_ratio,
                              .page = a->options.page,
                              .floor_win_pages = m->floor_pages,
                              .n_scratch = a->options.scratch,
                              .tp = p->layout.tp,
                              .pp = p->layout.pp,
                              /* Under SGLang's rule every GPU gets the same
                               * rest, the weights already off it. */
                              .layer_weight_bytes = p->engine_rule ? NULL : p->weights.layer,
                              .allow_cross_host_tp = a->deploy.allow_cross_host_tp};
  return request;
}

/* Step 4: the plan on those budgets, and SGLang's pools beside it. */
static int make_plan(plan_run *p) {
  const plan_args *a = p->a;
  kvs_plan_request request = kvplan_plan_request(p);
  kvs_plan_shortfall shortfall;
  kvs_error err;
  kvs_status status =
      kvs_deployment_make(&request, p->gpus, p->n, p->budgets, &p->plan, &shortfall, &err);
  if (status == KVS_ERR_BUDGET_TOO_SMALL && p->engine_rule &&
      shortfall.needed_bytes <= KVS_MAX_BYTE_COUNT && a->svg == NULL) {
    /* SGLang's answer does not depend on kvshard's pool fitting beside it. */
    snprintf(p->kvshard_short, sizeof p->kvshard_short, "%s", err.message);
    p->plan = NULL;
    return kvplan_engine_pools(p);
  }
  if (status == KVS_ERR_BUDGET_TOO_SMALL) return report_shortfall(a, &err, &shortfall, p->gpus);
  if (status != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    return 1;
  }
  return a->options.engine_sglang ? kvplan_engine_pools(p) : 0;
}

/* What the node puts on each GPU beside its carve in the deployment
 * planned (device tables on every GPU, NCCL between a group's ranks,
 * max_batch --max-running, the step message of the shard's capacity over
 * the planned window), per rank into p->overheads; and, under kvshard's
 * rule, every budget from GPU memory must hold it in its reserve: exit 1
 * naming both numbers and the flag otherwise. An explicit budget is the
 * carve's own bytes (no check); SGLang's rule reserves nothing by design
 * (its graphs and activations live in P x (1 - f)): no check. */
static int price_buffers(plan_run *p) {
  const plan_args *a = p->a;
  size_t n = kvs_deployment_rank_count(p->plan);
  p->overheads = calloc(n, sizeof *p->overheads);
  if (p->overheads == NULL) {
    fprintf(kvs_tool_err(), "kvplan plan: out of memory\n");
    return 1;
  }
  kvs_node_deployment d = kvs_node_deployment_planned(p->plan, p->n, a->options.max_running,
                                                      a->options.radix, a->options.max_seq_len);
  kvs_error err;
  if (kvs_deployment_overheads(p->plan, p->gpus, &d, p->overheads, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    return 1;
  }
  if (p->engine_rule) return 0;
  /* The rank that needs the most of its reserve, if any needs more. */
  size_t worst = n;
  for (size_t r = 0; r < n; r++) {
    const kvs_memory_budget *b = &p->terms[kvs_deployment_rank(p->plan, r)->gpu];
    if (b->source != KVS_BUDGET_EXPLICIT && p->overheads[r] > b->reserve_bytes &&
        (worst == n || p->overheads[r] > p->overheads[worst])) {
      worst = r;
    }
  }
  if (worst == n) return 0;
  const kvs_rank_plan *rp = kvs_deployment_rank(p->plan, worst);
  kvs_node_overhead o;
  if (kvs_deployment_overhead(p->plan, p->gpus, worst, &d, &o, &err) != KVS_OK ||
      kvs_node_overhead_check(&p->terms[rp->gpu], &o, "--reserve", &err) == KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    return 1;
  }
  if (a->json) {
    json_t *e = json_object();
    json_object_set_new(e, "error", json_string("reserve_too_small"));
    json_object_set_new(e, "rank", kvs_json_u64(worst));
    json_object_set_new(e, "gpu", kvs_gpu_json(&p->gpus[rp->gpu]));
    json_object_set_new(e, "node_overhead_bytes", kvs_json_u64(o.total_bytes));
    json_object_set_new(e, "reserve_bytes", kvs_json_u64(p->terms[rp->gpu].reserve_bytes));
    print_json(e);
  }
  fflush(kvs_tool_out());
  fprintf(kvs_tool_err(), "kvplan plan: rank %zu (GPU %zu %s): %s\n", worst, rp->gpu,
          p->gpus[rp->gpu].pci_busid, err.message);
  return 1;
}

/* --svg: the memory map, titled with the layout and what it buys. */
static int write_svg(const plan_run *p) {
  const kvs_split *split = kvs_deployment_split(p->plan);
  char title[512], subtitle[512];
  snprintf(title, sizeof title, "%s · tp %zu x pp %zu x dp %zu%s · %zu GPUs · %s", p->m->name,
           p->layout.tp, p->layout.pp, p->layout.dp,
           kvs_deployment_replicas(p->plan) > p->layout.dp ? " (replicated)" : "", p->n,
           kvs_cluster_label(p->topo));
  snprintf(subtitle, sizeof subtitle,
           "%llu pages x %llu = %llu tokens of history on every rank · window %llu pages · "
           "budget %s · limited by rank %zu",
           (unsigned long long)split->num_pages, (unsigned long long)split->stages[0].sizes.page,
           (unsigned long long)split->full_token, (unsigned long long)split->n_win_pages,
           p->budget_what, kvs_deployment_limiting_rank(p->plan));
  const char *svg_labels[KVS_MAX_HOSTS];
  for (size_t k = 0; k < p->n_hosts; k++) svg_labels[k] = kvs_cluster_host_label(p->topo, k);
  kvs_plan_svg svg = {.title = title,
                      .subtitle = subtitle,
                      .plan = p->plan,
                      .gpus = p->gpus,
                      .n_gpus = p->n,
                      .terms = p->terms,
                      .host_labels = svg_labels,
                      .n_hosts = p->n_hosts};
  kvs_error err;
  if (kvs_plan_svg_write(p->a->svg, &svg, &err) != KVS_OK) {
    /* Output that cannot be written: exit 1, as docs/flags.md says. */
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
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
  json_object_set_new(w, "expert_bytes", kvs_json_u64(f->expert_bytes));
  json_object_set_new(w, "expert_tensors", kvs_json_u64(f->n_expert_tensors));
  const char *estimate = folder ? kvs_plan_weights_estimate
                         : strcmp(p->weights.source, "split") == 0
                             ? kvs_plan_weights_split_estimate
                             : kvs_plan_weights_spread_estimate;
  json_object_set_new(w, "estimate", json_string(estimate));
  return w;
}

/* The plan object when kvshard's own pool did not fit SGLang's rest: the
 * layout and why, under "kvshard". */
static json_t *unplanned_json(const plan_run *p, const kvs_plan_json_context *context) {
  json_t *root = json_object();
  const kvs_parallel *l = &p->layout;
  json_object_set_new(root, "tp", kvs_json_u64(l->tp));
  json_object_set_new(root, "pp", kvs_json_u64(l->pp));
  json_object_set_new(root, "dp", kvs_json_u64(l->dp));
  json_object_set_new(root, "ep", kvs_json_u64(l->ep));
  json_object_set_new(root, "replicas", kvs_json_u64(kvs_parallel_replicas(l, p->n)));
  json_object_set_new(root, "kv_dtype", json_string(context->kv_dtype));
  json_object_set_new(root, "mtp_layers", kvs_json_u64(context->mtp_layers));
  json_object_set_new(root, "weights_source", json_string(context->weights_source));
  json_t *kvshard = json_object();
  json_object_set_new(kvshard, "error", json_string("budget_too_small"));
  json_object_set_new(kvshard, "message", json_string(p->kvshard_short));
  json_object_set_new(root, "kvshard", kvshard);
  return root;
}

/* --json: the plan object (plan_json.h), with weights and SGLang's pools. */
static void print_plan_json(plan_run *p) {
  const plan_args *a = p->a;
  const char *labels[KVS_MAX_HOSTS];
  for (size_t k = 0; k < p->n_hosts; k++) labels[k] = kvs_cluster_host_label(p->topo, k);
  const kvs_plan_json_context context = {kvs_kv_dtype_name(a->options.kv_dtype),
                                         a->options.mtp,
                                         p->weights.source,
                                         labels,
                                         p->n_hosts,
                                         p->layout.dp,
                                         p->layout.ep,
                                         p->overheads,
                                         a->options.max_running,
                                         a->options.max_seq_len};
  json_t *root = p->plan != NULL ? kvs_plan_json(p->plan, p->gpus, p->terms, &context)
                                 : unplanned_json(p, &context);
  if (p->weights.folder != NULL) json_object_set_new(root, "weights", weights_json(p));
  kvplan_prefix_json(p, root);
  if (a->options.engine_sglang) kvplan_engine_json(p, root);
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
  if (strcmp(source, "split") == 0) {
    return "--expert-weights and --shared-weights spread evenly over the layers, per rank by its "
           "layers: shared / tp, experts / (tp x dp) (estimate)";
  }
  return "from the model folder, per rank by its layers (estimate)";
}

/* The "buffers" line: the most any rank's node puts beside its carve,
 * and what holds it. */
static void print_buffers_line(const plan_run *p) {
  uint64_t most = 0;
  size_t n = kvs_deployment_rank_count(p->plan);
  for (size_t r = 0; r < n; r++) {
    if (p->overheads[r] > most) most = p->overheads[r];
  }
  const kvs_memory_budget *b = &p->terms[kvs_deployment_rank(p->plan, 0)->gpu];
  char bytes[32], reserve[32];
  kvs_format_bytes(most, bytes, sizeof bytes);
  kvs_format_bytes(b->reserve_bytes, reserve, sizeof reserve);
  const char *groups = kvs_deployment_tp(p->plan) * kvs_deployment_pp(p->plan) > 1
                           ? "device tables' batch and step buffers, step messages over NCCL and "
                             "NCCL's own (estimated)"
                           : "device tables' batch and step buffers; one rank, no NCCL";
  if (p->engine_rule) {
    fprintf(kvs_tool_out(),
            "buffers     %s per GPU beside the carve (%s); SGLang's rule reserves nothing: they "
            "live in its P x (1 - f) with its graphs and activations\n",
            bytes, groups);
  } else if (b->source == KVS_BUDGET_EXPLICIT) {
    fprintf(kvs_tool_out(),
            "buffers     %s per GPU beside the carve (%s), not in the explicit budget, which is "
            "the carve's own bytes\n",
            bytes, groups);
  } else {
    fprintf(kvs_tool_out(),
            "buffers     %s per GPU beside the carve (%s), held by the %s reserve\n", bytes, groups,
            reserve);
  }
}

/* The plan for people: the model, the machine, the terms, the table. */
static void print_plan_text(const plan_run *p) {
  const plan_args *a = p->a;
  kvs_plan_model_print(kvs_tool_out(), p->m, &a->options);
  size_t packages = 0, numas = 0;
  for (size_t k = 0; k < p->n_hosts; k++) {
    packages += kvs_topology_package_count(kvs_cluster_host(p->topo, k));
    numas += kvs_topology_numa_count(kvs_cluster_host(p->topo, k));
  }
  fprintf(kvs_tool_out(), "topology    %s: %zu GPUs (%s), %zu packages, %zu NUMA nodes\n",
          kvs_cluster_label(p->topo), p->n,
          p->gpus[0].model[0] != '\0' ? p->gpus[0].model : "model unknown", packages, numas);
  const kvs_parallel *l = &p->layout;
  size_t replicas = kvs_parallel_replicas(l, p->n);
  fprintf(kvs_tool_out(),
          "layout      tp %zu x pp %zu x dp %zu = %zu GPUs per replica (ep %zu), %zu replica%s, "
          "%zu DP group%s of tp x pp%s\n",
          l->tp, l->pp, l->dp, l->tp * l->pp * l->dp, l->ep, replicas, replicas > 1 ? "s" : "",
          kvs_parallel_groups(l, p->n), kvs_parallel_groups(l, p->n) > 1 ? "s" : "",
          kvs_deployment_cross_host_tp(p->plan)
              ? "; tensor-parallel groups span nodes (--allow-cross-node-tp)"
              : "");
  fprintf(kvs_tool_out(), "budget      %s\n", p->budget_what);
  fprintf(kvs_tool_out(), "weights     %s\n", weights_line(p->weights.source));
  if (p->overheads != NULL) print_buffers_line(p);
  fprintf(kvs_tool_out(),
          "sizing      window floor %llu pages, swa_ratio %g, page %llu, scratch %llu\n\n",
          (unsigned long long)p->m->floor_pages, p->m->swa_ratio,
          (unsigned long long)a->options.page, (unsigned long long)a->options.scratch);
  if (p->plan == NULL) {
    fprintf(kvs_tool_out(), "kvshard     its own pool does not fit SGLang's rest here: %s\n",
            p->kvshard_short);
    kvplan_engine_text(p);
    return;
  }
  print_table(p->plan, p->gpus, p->terms, p->n_hosts);
  uint64_t tokens = kvs_deployment_split(p->plan)->full_token;
  size_t groups = kvs_parallel_groups(&p->layout, p->n);
  fprintf(kvs_tool_out(),
          "tokens      %llu tokens of history per DP group (the KV it holds for its requests), "
          "%llu over the %zu group%s\n",
          (unsigned long long)tokens, (unsigned long long)(tokens * groups), groups,
          groups > 1 ? "s" : "");
  /* The one rule plan and fit size by, with this plan's inputs: fit's
   * answer for N requests of L is this plan at --max-running N
   * --max-seq-len L, so the two never read as disagreeing. */
  fprintf(kvs_tool_out(),
          "running     sized for %llu running requests per DP group of up to %llu tokens "
          "(--max-running, --max-seq-len): each a state-ring slot and its share of the window "
          "floor; kvplan fit sizes a layout for the requests it counts, so its N requests of L "
          "tokens are this plan at --max-running N --max-seq-len L\n",
          (unsigned long long)a->options.max_running, (unsigned long long)a->options.max_seq_len);
  kvplan_prefix_text(p);
  if (a->options.engine_sglang) kvplan_engine_text(p);
  if (a->svg != NULL) fprintf(kvs_tool_out(), "svg         %s\n", a->svg);
}

void kvplan_plan_release(plan_run *p) {
  json_decref(p->sglang_stages);
  json_decref(p->launch);
  free(p->overheads);
  kvs_deployment_destroy(p->plan);
  free(p->weights.folder);
  free(p->weights.layer);
  free(p->budgets);
  free(p->terms);
  kvs_cluster_destroy(p->topo);
}

int kvplan_plan_make(plan_run *p, plan_args *a, kvs_plan_model *m, FILE *notes) {
  memset(p, 0, sizeof *p);
  p->a = a;
  p->m = m;
  p->notes = notes;
  p->weights.source = "none";
  int rc = resolve_model(a, m);
  if (rc != 0) return rc;
  say_weights_uncounted(p);
  rc = load_topology(a, &p->topo, p->note, sizeof p->note);
  if (rc == 0) rc = budget_gpus(p);
  if (rc == 0) rc = make_plan(p);
  if (rc == 0) rc = kvplan_prefix_price(p);
  if (rc == 0 && p->plan != NULL) rc = price_buffers(p);
  return rc;
}

/* The plan (kvplan_plan_make), then the picture and the plan as JSON or
 * a table. */
static int run(plan_args *a, kvs_plan_model *m) {
  plan_run p;
  int rc = kvplan_plan_make(&p, a, m, a->json ? kvs_tool_err() : kvs_tool_out());
  if (rc == 0 && a->svg != NULL) rc = write_svg(&p);
  if (rc == 0) {
    if (a->json) {
      print_plan_json(&p);
    } else {
      print_plan_text(&p);
    }
    if (a->options.engine_sglang) rc = kvplan_engine_verdict(&p);
  }
  kvplan_plan_release(&p);
  return rc;
}

int kvs_kvplan_plan(int argc, char **argv) {
  /* On the heap: the per-GPU lists are 16 KiB, and kvs_plan_run may run on
   * a thread with a small stack. */
  plan_args *a = calloc(1, sizeof *a);
  kvs_plan_model *model = malloc(sizeof *model);
  if (a == NULL || model == NULL) {
    fprintf(kvs_tool_err(), "kvplan plan: out of memory\n");
    free(a);
    free(model);
    return 1;
  }
  kvs_plan_options_init(&a->options);
  kvs_deploy_flags_init(&a->deploy);
  int rc = parse(argc, argv, a);
  if (rc == 0) rc = run(a, model);
  free(a);
  free(model);
  return rc < 0 ? 0 : rc;
}

/* kvplan fit: the inverse question. For C concurrent requests of L tokens,
 * which layouts of this node can serve them, and with how much memory? Or,
 * with --max-concurrency, how many requests of L tokens each layout holds.
 *
 * Layouts are tp x pp per data-parallel group, dp groups per replica and
 * ep GPUs of whole experts (kvplan/fit_search.h for the searches): every
 * tp x pp whose ranks divide the GPUs, and, where the weights are split by
 * kind (routed experts apart from the rest), every dp of it with its
 * experts sharded over the stage's tp x dp GPUs (ep = tp x dp), the layout
 * engines recommend for DSV4. The requests are shared evenly over every
 * DP group of every replica. The one-node answer is the headline: a demand
 * no layout of one machine serves says so and exits 1, naming the nodes it
 * would take, unless --nodes plans that many. Exit status: 0 some layout
 * serves the demand (the engine's answer with --engine sglang), 1 none
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
#include "plan/rank_layout.h"
#include "kvplan/args.h"
#include "kvplan/fit_search.h"
#include "kvplan/kvplan.h"
#include "kvplan/kvplan_fit_internal.h"
#include "kvplan/plan_engine.h"
#include "kvplan/plan_json.h"
#include "kvplan/plan_options.h"
#include "kvplan/plan_weights.h"
#include "topology/topology.h"
#include "kvplan/tool_io.h"

enum {
  OPT_CONTEXT = 1,
  OPT_CONCURRENCY,
  OPT_MAX_CONCURRENCY,
  OPT_TOPOLOGY,
  OPT_MEM_FRACTION,
  OPT_RESERVE,
  OPT_WEIGHTS_TOTAL,
  OPT_EXPERT_WEIGHTS,
  OPT_SHARED_WEIGHTS,
  OPT_GPU_MEMORY,
  OPT_FREE_BEFORE_LOAD,
  OPT_NODES,
  OPT_JSON,
  OPT_PROGRESS_S,
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: kvplan fit --context L (--concurrency C | --max-concurrency) [flags]\n"
          "  --context L             tokens of every request (prompt and output): 1048576,\n"
          "                          1M, 128K\n"
          "  --concurrency C         requests served at once (every DP group of every replica\n"
          "                          of a layout shares them evenly)\n"
          "  --max-concurrency       instead: how many requests of L tokens each layout holds\n"
          "  --topology FILE|live|bundled  as for kvplan plan (a list: one node each)\n"
          "  --nodes N               N identical nodes of that topology (default 1; a demand\n"
          "                          one node cannot serve names the nodes it needs)\n"
          "  --mem-fraction F        share of each GPU's memory the engine may use (default\n"
          "                          0.9; with --engine sglang its --mem-fraction-static,\n"
          "                          default SGLang's own): a layout fits when it needs at\n"
          "                          most this\n"
          "  --reserve BYTES         taken off that share for the node's buffers beside its\n"
          "                          carve and the CUDA runtime (512MiB); must hold the\n"
          "                          buffers of every answer's plan, else exit 1\n"
          "  --gpu-memory BYTES      every GPU's memory (default: measured, else the total\n"
          "                          its driver reports)\n"
          "  --free-before-load BYTES  with --engine sglang: free memory before the weights\n"
          "                          load (default: measured, else memory less 2.5 GiB)\n"
          "  --weights-total BYTES   the whole model's weights, spread evenly over its\n"
          "                          layers (default: counted from a model folder, else\n"
          "                          not counted)\n"
          "  --expert-weights BYTES --shared-weights BYTES\n"
          "                          the same in two kinds, which adds the dp x ep layouts\n"
          "%s"
          "  --json                  one JSON object on stdout\n"
          "  --progress-s T          seconds between progress lines on stderr while layouts\n"
          "                          are tried, [0, 86400] (default 2; 0: none), as kvsim's\n"
          "exit status: 0 some layout fits, 1 none does, 2 bad usage\n",
          kvs_plan_options_help);
}

/* The demand: its tokens, its count, or the question of the count. */
static kvs_status demand_flag(fit_args *a, int id, const char *value, kvs_error *err) {
  kvs_status status;
  switch (id) {
    case OPT_CONTEXT:
      a->have_context = true;
      status = kvs_parse_tokens("--context", value, &a->context, err);
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
    case OPT_MAX_CONCURRENCY:
      a->max_concurrency = true;
      return KVS_OK;
    case OPT_PROGRESS_S:
      return kvs_parse_double_in("--progress-s", value, 0.0, 86400.0, "seconds in [0, 86400]",
                                 &a->progress_s, err);
    default:
      a->json = true; /* OPT_JSON */
      return KVS_OK;
  }
}

/* The memory and the weights each layout is judged on. */
static kvs_status memory_flag(fit_args *a, int id, const char *value, kvs_error *err) {
  kvs_status status;
  switch (id) {
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
    case OPT_WEIGHTS_TOTAL:
      a->have_weights_total = true;
      return kvs_parse_bytes("--weights-total", value, &a->weights_total, err);
    case OPT_EXPERT_WEIGHTS:
      a->have_expert_weights = true;
      return kvs_parse_bytes("--expert-weights", value, &a->expert_weights, err);
    case OPT_SHARED_WEIGHTS:
      a->have_shared_weights = true;
      return kvs_parse_bytes("--shared-weights", value, &a->shared_weights, err);
    case OPT_GPU_MEMORY:
      return kvs_parse_budget("--gpu-memory", value, &a->gpu_memory, err);
    default:
      return kvs_parse_budget("--free-before-load", value, &a->free_before_load, err);
  }
}

static kvs_status fit_flag(void *ctx, int id, const char *value, kvs_error *err) {
  fit_args *a = ctx;
  kvs_status status;
  switch (id) {
    case OPT_TOPOLOGY:
      a->topology = value;
      return KVS_OK;
    case OPT_NODES:
      a->have_nodes = true;
      status = kvs_parse_u64("--nodes", value, &a->nodes, err);
      if (status == KVS_OK && (a->nodes == 0 || a->nodes > KVS_MAX_NODES)) {
        return kvs_error_set(err, KVS_ERR_PARSE, "--nodes must be between 1 and %d, got %s",
                             KVS_MAX_NODES, value);
      }
      return status;
    case OPT_MEM_FRACTION:
    case OPT_RESERVE:
    case OPT_WEIGHTS_TOTAL:
    case OPT_EXPERT_WEIGHTS:
    case OPT_SHARED_WEIGHTS:
    case OPT_GPU_MEMORY:
    case OPT_FREE_BEFORE_LOAD:
      return memory_flag(a, id, value, err);
    default:
      return demand_flag(a, id, value, err);
  }
}

/* Weights come from a model folder's safetensors unless a flag gives them;
 * a built-in model or a bare config.json carries none. */
static bool from_folder(const kvs_plan_model *m) { return m->have_config && m->config.is_folder; }

const char *fit_weights_source(const fit_args *a, const kvs_plan_model *m) {
  return a->have_expert_weights  ? "split"
         : a->have_weights_total ? "total"
         : from_folder(m)        ? "folder"
                                 : "none";
}

/* The flags fit refuses together, before any model is read. Returns 0 or
 * 2 after a message. */
static int check_flags(const fit_args *a) {
  const char *refusal =
      !a->have_context || (!a->have_concurrency && !a->max_concurrency)
          ? "--context and --concurrency are required (or --context and --max-concurrency; "
            "kvplan fit --help lists every flag)"
      : a->have_concurrency && a->max_concurrency
          ? "give --concurrency C (does the demand fit?) or --max-concurrency (how many fit?), "
            "not both"
      : a->have_expert_weights != a->have_shared_weights
          ? "--expert-weights and --shared-weights come together"
      : a->have_expert_weights && a->have_weights_total
          ? "give --weights-total or --expert-weights with --shared-weights, not both"
      : a->free_before_load != 0 && !a->options.engine_sglang
          ? "--free-before-load is P of SGLang's memory rule: give --engine sglang"
      : a->have_reserve && a->options.engine_sglang
          ? "--reserve is kvshard's rule; SGLang reserves nothing at sizing time: drop it"
          : NULL;
  if (refusal != NULL) {
    fprintf(kvs_tool_err(), "kvplan fit: %s\n", refusal);
    return 2;
  }
  return 0;
}

/* The plan flags fit refuses (it derives the window floor and the budget
 * itself), then the model they describe. Returns 0 or 2. */
static int resolve_model(fit_args *a, kvs_plan_model *m) {
  kvs_error err;
  kvs_plan_options *o = &a->options;
  if (o->have_floor_inputs || o->have_floor_pages) {
    fprintf(kvs_tool_err(),
            "kvplan fit: --context and --concurrency set the window floor; drop "
            "--max-seq-len, --max-running and --floor-pages\n");
    return 2;
  }
  if (o->have_window_cache) {
    fprintf(kvs_tool_err(),
            "kvplan fit: --window-cache is a share of a budget, and fit finds the budget: "
            "give --swa-ratio\n");
    return 2;
  }
  if (kvs_plan_options_resolve(o, m, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan fit: %s\n", err.message);
    return 2;
  }
  return 0;
}

int fit_run_alloc(fit_run *r) {
  size_t n = kvs_cluster_gpu_count(r->topo), most = 4 * n;
  bool counted = strcmp(fit_weights_source(r->a, r->m), "none") != 0;
  r->memory = calloc(n, sizeof *r->memory);
  r->grown = calloc(most, sizeof *r->grown);
  r->budgets = calloc(most, sizeof *r->budgets);
  r->layer = calloc(kvs_geometry_layer_count(&r->m->geometry), sizeof *r->layer);
  r->weights = counted ? calloc(1, sizeof *r->weights) : NULL;
  r->rows = calloc(FIT_MAX_LAYOUTS, sizeof *r->rows);
  if (r->memory == NULL || r->grown == NULL || r->budgets == NULL || r->layer == NULL ||
      r->rows == NULL || (counted && r->weights == NULL)) {
    fprintf(kvs_tool_err(), "kvplan fit: out of memory\n");
    return 1;
  }
  return 0;
}

void fit_run_free(fit_run *r) {
  free(r->memory);
  free(r->grown);
  free(r->budgets);
  free(r->layer);
  free(r->weights);
  free(r->rows);
  kvs_cluster_destroy(r->topo);
}

/* The whole model's weights, when they are counted, and whether their
 * routed experts are told apart. Returns 0, or 2 after a message. */
int fit_count_weights(fit_run *r) {
  const fit_args *a = r->a;
  kvs_error err;
  const kvs_plan_weights_given given = {a->have_weights_total, a->weights_total,
                                        a->have_expert_weights, a->expert_weights,
                                        a->shared_weights};
  if (r->weights != NULL &&
      kvs_plan_weights_of(&r->m->config, &given, r->weights, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan fit: %s\n", err.message);
    return 2;
  }
  r->split = a->have_expert_weights ||
             (r->weights != NULL && !a->have_weights_total && r->weights->n_expert_tensors > 0);
  if (!r->split && r->weights != NULL) {
    fprintf(r->notes,
            "kvplan: trying tp x pp layouts only: data-parallel attention with expert "
            "parallelism needs the weights split by kind (--expert-weights and "
            "--shared-weights, or a model folder whose experts are named)\n");
  }
  return 0;
}

/* Opens the cluster of `nodes` machines (0: as --topology names it).
 * Returns 0, 2 for a bad name, or 1 for a topology that does not load. */
int fit_open_cluster(const fit_args *a, size_t nodes, FILE *notes, kvs_cluster_t *topo) {
  char why[768];
  kvs_error err;
  if (kvs_cluster_open(a->topology, nodes, topo, why, sizeof why, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan fit: %s\n", err.message);
    kvs_cluster_destroy(*topo);
    *topo = NULL;
    return err.status == KVS_ERR_INVALID_ARGUMENT ? 2 : 1;
  }
  if (notes != NULL && why[0] != '\0') fprintf(notes, "kvplan: %s\n", why);
  return 0;
}

/* The one answer: the model, the cluster, the weights, every layout, the
 * report. */
static int run(fit_args *a, kvs_plan_model *m) {
  int rc = resolve_model(a, m);
  if (rc != 0) return rc;
  fit_run r;
  memset(&r, 0, sizeof r);
  r.a = a;
  r.m = m;
  r.notes =
      a->json ? kvs_tool_err() : kvs_tool_out(); /* with --json, stdout holds the object alone */
  if (strcmp(fit_weights_source(a, m), "none") == 0) {
    fprintf(r.notes,
            "kvplan: weights are not counted (%s carries no weight size): give --model FOLDER "
            "to count them from its safetensors, or --weights-total BYTES\n",
            m->name);
  }
  rc = fit_open_cluster(a, a->have_nodes ? (size_t)a->nodes : 0, r.notes, &r.topo);
  if (rc == 0) rc = fit_run_alloc(&r);
  if (rc == 0) rc = fit_count_weights(&r);
  if (rc == 0) rc = fit_evaluate_all(&r);
  if (rc == 0) rc = fit_report(&r);
  fit_run_free(&r);
  return rc;
}

int kvs_kvplan_fit(int argc, char **argv) {
  static const struct option own[] = {
      {"context", required_argument, NULL, OPT_CONTEXT},
      {"concurrency", required_argument, NULL, OPT_CONCURRENCY},
      {"max-concurrency", no_argument, NULL, OPT_MAX_CONCURRENCY},
      {"topology", required_argument, NULL, OPT_TOPOLOGY},
      {"mem-fraction", required_argument, NULL, OPT_MEM_FRACTION},
      {"reserve", required_argument, NULL, OPT_RESERVE},
      {"weights-total", required_argument, NULL, OPT_WEIGHTS_TOTAL},
      {"expert-weights", required_argument, NULL, OPT_EXPERT_WEIGHTS},
      {"shared-weights", required_argument, NULL, OPT_SHARED_WEIGHTS},
      {"gpu-memory", required_argument, NULL, OPT_GPU_MEMORY},
      {"free-before-load", required_argument, NULL, OPT_FREE_BEFORE_LOAD},
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
  if ((rc = check_flags(&a)) != 0) return rc;
  kvs_plan_model *model = malloc(sizeof *model);
  if (model == NULL) {
    fprintf(kvs_tool_err(), "kvplan fit: out of memory\n");
    return 1;
  }
  rc = run(&a, model);
  free(model);
  return rc;
}

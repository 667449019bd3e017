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

/* The deployment flags fit takes: the machine and its memory, and the
 * weights as a total or by kind (it finds the layout and the budget). */
#define FIT_DEPLOY_FLAGS                                                                  \
  (KVS_DEPLOY_BIT(KVS_DEPLOY_TOPOLOGY) | KVS_DEPLOY_BIT(KVS_DEPLOY_NODES) |               \
   KVS_DEPLOY_BIT(KVS_DEPLOY_MEM_FRACTION) | KVS_DEPLOY_BIT(KVS_DEPLOY_RESERVE) |         \
   KVS_DEPLOY_BIT(KVS_DEPLOY_WEIGHTS_TOTAL) | KVS_DEPLOY_BIT(KVS_DEPLOY_EXPERT_WEIGHTS) | \
   KVS_DEPLOY_BIT(KVS_DEPLOY_SHARED_WEIGHTS) | KVS_DEPLOY_BIT(KVS_DEPLOY_GPU_MEMORY) |    \
   KVS_DEPLOY_BIT(KVS_DEPLOY_FREE_BEFORE_LOAD))

enum {
  OPT_CONTEXT = 1,
  OPT_CONCURRENCY,
  OPT_MAX_CONCURRENCY,
  OPT_JSON,
  OPT_PROGRESS_S,
};

static void usage(FILE *out) {
  fputs(
      "usage: kvplan fit --context L (--concurrency C | --max-concurrency) [flags]\n"
      "  --context L             tokens of every request (prompt and output): 1048576,\n"
      "                          1M, 128K\n"
      "  --concurrency C         requests served at once (every DP group of every replica\n"
      "                          of a layout shares them evenly)\n"
      "  --max-concurrency       instead: how many requests of L tokens each layout holds\n",
      out);
  kvs_deploy_flags_help(out, FIT_DEPLOY_FLAGS);
  fprintf(out,
          "%s"
          "  --json                  one JSON object on stdout\n"
          "  --progress-s T          seconds between progress lines on stderr while layouts\n"
          "                          are tried, [0, 86400] (default 2; 0: none), as kvsim's\n"
          "A layout fits when it needs at most --mem-fraction of each GPU (with --engine\n"
          "sglang: its --mem-fraction-static, default SGLang's own). --nodes defaults to 1: a\n"
          "demand one node cannot serve names the nodes it needs. Weights default to those\n"
          "counted from a model folder, else none; split by kind, they add the dp x ep\n"
          "layouts. The reserve must hold the buffers of every answer's plan, else exit 1.\n"
          "exit status: 0 some layout fits, 1 none does, 2 bad usage\n",
          kvs_plan_options_help);
}

/* fit's own flags: the demand (its tokens, its count, or the question of
 * the count) and how it answers. */
static kvs_status fit_flag(void *ctx, int id, const char *value, kvs_error *err) {
  fit_args *a = ctx;
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

/* Weights come from a model folder's safetensors unless a flag gives them;
 * a built-in model or a bare config.json carries none. */
static bool from_folder(const kvs_plan_model *m) { return m->have_config && m->config.is_folder; }

const char *fit_weights_source(const fit_args *a, const kvs_plan_model *m) {
  return a->deploy.given[KVS_DEPLOY_EXPERT_WEIGHTS]  ? "split"
         : a->deploy.given[KVS_DEPLOY_WEIGHTS_TOTAL] ? "total"
         : from_folder(m)                            ? "folder"
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
          : NULL;
  kvs_error err;
  if (refusal == NULL &&
      kvs_deploy_flags_check(&a->deploy, FIT_DEPLOY_FLAGS, NULL, false, &err) != KVS_OK) {
    refusal = err.message;
  }
  if (refusal == NULL) {
    refusal = a->deploy.given[KVS_DEPLOY_FREE_BEFORE_LOAD] && !a->options.engine_sglang
                  ? "--free-before-load is P of SGLang's memory rule: give --engine sglang"
              : a->deploy.given[KVS_DEPLOY_RESERVE] && a->options.engine_sglang
                  ? "--reserve is kvshard's rule; SGLang reserves nothing at sizing time: drop it"
                  : NULL;
  }
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
  const kvs_plan_weights_given given = {a->deploy.given[KVS_DEPLOY_WEIGHTS_TOTAL],
                                        a->deploy.weights_total,
                                        a->deploy.given[KVS_DEPLOY_EXPERT_WEIGHTS],
                                        a->deploy.expert_weights, a->deploy.shared_weights};
  if (r->weights != NULL &&
      kvs_plan_weights_of(&r->m->config, &given, r->weights, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan fit: %s\n", err.message);
    return 2;
  }
  r->split = a->deploy.given[KVS_DEPLOY_EXPERT_WEIGHTS] ||
             (r->weights != NULL && !a->deploy.given[KVS_DEPLOY_WEIGHTS_TOTAL] &&
              r->weights->n_expert_tensors > 0);
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
  if (kvs_cluster_open(a->deploy.topology, nodes, topo, why, sizeof why, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan fit: %s\n", err.message);
    kvs_cluster_destroy(*topo);
    *topo = NULL;
    return err.status == KVS_ERR_INVALID_ARGUMENT ? 2 : 1;
  }
  /* Memory flags above what these GPUs have cannot be true: refused as
   * bad usage, in the sentence plan, kvsim and the node use. */
  if (kvs_deploy_flags_check_gpus(&a->deploy, FIT_DEPLOY_FLAGS, kvs_cluster_gpus(*topo),
                                  kvs_cluster_gpu_count(*topo), &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan fit: %s\n", err.message);
    kvs_cluster_destroy(*topo);
    *topo = NULL;
    return 2;
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
  rc = fit_open_cluster(a, a->deploy.given[KVS_DEPLOY_NODES] ? (size_t)a->deploy.nodes : 0, r.notes,
                        &r.topo);
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
      {"json", no_argument, NULL, OPT_JSON},
      {"progress-s", required_argument, NULL, OPT_PROGRESS_S},
  };
  /* On the heap: the deployment flags' per-GPU lists are 16 KiB, and
   * kvs_plan_run may run on a thread with a small stack. */
  fit_args *a = calloc(1, sizeof *a);
  kvs_plan_model *model = malloc(sizeof *model);
  if (a == NULL || model == NULL) {
    fprintf(kvs_tool_err(), "kvplan fit: out of memory\n");
    free(a);
    free(model);
    return 1;
  }
  a->progress_s = 2.0;
  kvs_plan_options_init(&a->options);
  kvs_deploy_flags_init(&a->deploy);
  const kvs_plan_parser parser = {"kvplan fit", own,         sizeof own / sizeof own[0],
                                  fit_flag,     a,           FIT_DEPLOY_FLAGS,
                                  &a->deploy,   &a->options, usage};
  int rc = kvs_plan_options_parse(&parser, argc, argv);
  if (rc == 0) rc = check_flags(a);
  if (rc == 0) rc = run(a, model);
  free(a);
  free(model);
  return rc < 0 ? 0 : rc;
}

/* kvplan plan --engine sglang: the plan in SGLang's terms. Its memory
 * rule gives every GPU's budget (kvplan/plan_engine.h), its configurator
 * sizes its pools on the same bytes per pipeline stage, and --launch says
 * the flags that reproduce them. */
#include <stdlib.h>
#include <string.h>

#include "plan/node_setup.h"
#include "kvplan/args.h"
#include "kvplan/kvplan_plan_internal.h"
#include "kvplan/plan_json.h"
#include "kvplan/sglang_report.h"
#include "topology/topology.h"
#include "kvplan/tool_io.h"

/* The heaviest GPU's measured weights (--weights, --weights-per-gpu). */
static uint64_t measured_weights(const plan_args *a) {
  uint64_t most = a->deploy.given[KVS_DEPLOY_WEIGHTS] ? a->deploy.weights : 0;
  for (size_t i = 0; i < a->deploy.n_weights; i++) {
    if (a->deploy.weights_list[i] > most) most = a->deploy.weights_list[i];
  }
  return most;
}

/* SGLang would not start: the JSON error object (with --json), the rule
 * for people, and the refusal on the last line. Exit 1. */
static int refuse_no_kv(const plan_run *p) {
  const kvs_engine_memory *e = &p->engine;
  char w[32], slack[32], a[32];
  if (p->a->json) {
    json_t *o = json_object();
    json_object_set_new(o, "error", json_string("no_kv_memory"));
    json_object_set_new(o, "engine", json_string("sglang"));
    kvs_engine_memory_json(o, e);
    char *text = json_dumps(o, JSON_COMPACT);
    fprintf(kvs_tool_out(), "%s\n", text);
    free(text);
    json_decref(o);
  } else {
    kvs_engine_memory_print(kvs_tool_out(), e);
  }
  fflush(kvs_tool_out());
  if (e->weights >= e->free_before_load) {
    /* No fraction helps: the weights alone do not fit where they load
     * (measured --weights above P are refused as usage before this; these
     * are the layout's share of a total, a split or a folder). */
    char p_text[32];
    fprintf(kvs_tool_err(),
            "kvplan plan: SGLang would refuse to start: %s of weights per GPU at tp %zu x pp %zu "
            "x dp %zu (ep %zu) are more than the %s free before load, so they cannot load at any "
            "--mem-fraction; spread them over more GPUs (a larger --pp, --ep or --nodes)\n",
            kvs_format_bytes(e->weights, w, sizeof w), p->layout.tp, p->layout.pp, p->layout.dp,
            p->layout.ep, kvs_format_bytes(e->free_before_load, p_text, sizeof p_text));
    return 1;
  }
  fprintf(kvs_tool_err(),
          "kvplan plan: SGLang would refuse to start: %s of weights per GPU leave %s, less than "
          "the %s free before load x (1 - %.3f) holds back for activations and CUDA graphs, so "
          "the KV cache gets nothing; raise --mem-fraction above %.3f (minimum viable %.4f)\n",
          kvs_format_bytes(e->weights, w, sizeof w), kvs_format_bytes(e->available, a, sizeof a),
          kvs_format_bytes((uint64_t)(e->rule.slack_gib * 1073741824.0), slack, sizeof slack),
          e->fraction, e->rule.suggested_mem_fraction, e->rule.min_viable_mem_fraction);
  return 1;
}

/* Every GPU's budget is SGLang's rest; the terms say how it was made:
 * memory P, ratio f, weights P - A (the heaviest stage's), no reserve. */
static void fill_budgets(plan_run *p) {
  const kvs_engine_memory *e = &p->engine;
  kvs_budget_source source =
      e->free_source == KVS_BUDGET_MEASURED ? KVS_BUDGET_MEASURED : KVS_BUDGET_NOMINAL;
  for (size_t g = 0; g < p->n; g++) {
    p->budgets[g] = e->rule.rest_bytes;
    p->terms[g] = (kvs_memory_budget){.source = source,
                                      .memory_bytes = e->free_before_load,
                                      .memory_ratio = e->fraction,
                                      .weights_bytes = e->free_before_load - e->available,
                                      .reserve_bytes = 0,
                                      .budget_bytes = e->rule.rest_bytes};
  }
  char free_text[32], weights[32], rest[32];
  snprintf(p->budget_what, sizeof p->budget_what,
           "SGLang's rule: free before load %s (%s) - %s of weights - %s x (1 - %.3f) = %s per "
           "GPU",
           kvs_format_bytes(e->free_before_load, free_text, sizeof free_text),
           kvs_engine_free_source_name(e->free_source),
           kvs_format_bytes(e->weights, weights, sizeof weights), free_text, e->fraction,
           kvs_format_bytes(e->rule.rest_bytes, rest, sizeof rest));
  if (e->free_source == KVS_BUDGET_NOMINAL && p->note[0] == '\0') {
    snprintf(p->note, sizeof p->note,
             "kvplan: no GPU memory measured (%s); SGLang's free memory before load is taken as "
             "each GPU's memory less 2.5 GiB of context, %s (give --free-before-load)",
             kvs_topology_cuda_note(kvs_cluster_host(p->topo, 0)), free_text);
  }
}

int kvplan_engine_budgets(plan_run *p) {
  const plan_args *a = p->a;
  kvs_engine_gpus gpus = {p->gpus, p->n, a->deploy.free_before_load, a->deploy.gpu_memory};
  kvs_engine_weights weights = {measured_weights(a), p->weights.layer};
  double fraction = a->deploy.given[KVS_DEPLOY_MEM_FRACTION] ? a->deploy.mem_fraction : -1.0;
  kvs_error err;
  if (kvs_engine_memory_make(p->m, &p->layout, &gpus, &weights, fraction, &p->engine, &err) !=
      KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: --engine sglang: %s\n", err.message);
    return 1;
  }
  p->sglang_max_running = kvs_engine_max_running_total(&a->options);
  p->sglang_options = kvs_engine_options(&a->options, p->layout.dp, p->sglang_max_running);
  if (p->engine.rule.no_kv) return refuse_no_kv(p);
  fill_budgets(p);
  return 0;
}

/* --launch: the flags, and where each server runs (the plan's own rank
 * layout: kvshard's pool may not have been planned beside SGLang's). */
static int make_launch(plan_run *p) {
  const plan_args *a = p->a;
  kvs_rank_slot *slots = calloc(p->n, sizeof *slots);
  kvs_error err;
  if (slots == NULL ||
      kvs_rank_layout_cluster(p->gpus, p->n, p->layout.tp, p->layout.pp,
                              a->deploy.allow_cross_host_tp, slots, NULL, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: --launch: %s\n",
            slots == NULL ? "out of memory" : err.message);
    free(slots);
    return 1;
  }
  kvs_engine_hosts hosts = kvs_engine_hosts_of(&p->layout, slots, p->gpus, p->n, p->n_hosts);
  free(slots);
  json_t *args =
      kvs_engine_launch_args(&p->layout, &p->sglang_options, p->engine.fraction,
                             p->sglang.least.full, p->sglang_max_running, a->options.max_seq_len);
  p->launch = kvs_engine_launch_json(args, &hosts);
  return 0;
}

/* Each stage's bytes for SGLang's pools: the rest under its rule, else
 * the stage's tightest explicit budget. */
static void stage_bytes(const plan_run *p, uint64_t *out) {
  size_t pp = p->layout.pp;
  for (size_t s = 0; s < pp; s++) out[s] = p->engine_rule ? p->engine.rule.rest_bytes : UINT64_MAX;
  for (size_t r = 0; !p->engine_rule && r < kvs_deployment_rank_count(p->plan); r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(p->plan, r);
    if (p->budgets[rp->gpu] < out[rp->pp_stage]) out[rp->pp_stage] = p->budgets[rp->gpu];
  }
}

int kvplan_engine_pools(plan_run *p) {
  const plan_args *a = p->a;
  if (!p->engine_rule) {
    p->sglang_max_running = kvs_engine_max_running_total(&a->options);
    p->sglang_options = kvs_engine_options(&a->options, p->layout.dp, p->sglang_max_running);
  }
  uint64_t *bytes = calloc(p->layout.pp, sizeof *bytes);
  if (bytes == NULL) {
    fprintf(kvs_tool_err(), "kvplan plan: out of memory\n");
    return 1;
  }
  stage_bytes(p, bytes);
  kvs_error err;
  kvs_status status = kvs_engine_pools_make(p->m, &p->sglang_options, p->layout.pp, bytes,
                                            &p->sglang, &p->sglang_stages, &err);
  free(bytes);
  if (status != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: --engine sglang: %s\n", err.message);
    return 2;
  }
  if (a->launch && !p->sglang.least.no_pool) return make_launch(p);
  return 0;
}

/* Whether SGLang's pools hold anything at its default fraction. */
static bool holds_at_default(const plan_run *p) {
  if (p->engine.at_default.no_kv) return false;
  size_t pp = p->layout.pp;
  uint64_t *bytes = calloc(pp, sizeof *bytes);
  kvs_engine_pools pools;
  bool holds = bytes != NULL;
  for (size_t s = 0; holds && s < pp; s++) bytes[s] = p->engine.at_default.rest_bytes;
  holds =
      holds &&
      kvs_engine_pools_make(p->m, &p->sglang_options, pp, bytes, &pools, NULL, NULL) == KVS_OK &&
      !pools.least.no_pool;
  free(bytes);
  return holds;
}

void kvplan_engine_json(plan_run *p, json_t *root) {
  json_t *sg = kvs_sglang_report_json(&p->sglang.least, &p->sglang_options, p->sglang.available);
  json_object_set_new(sg, "stages", p->sglang_stages);
  p->sglang_stages = NULL; /* sg owns them now */
  json_object_set_new(sg, "max_running_requests", kvs_json_u64(p->sglang_max_running));
  json_object_set_new(sg, "max_running_per_group", kvs_json_u64(p->sglang.max_running));
  if (p->engine_rule) {
    kvs_engine_memory_json(sg, &p->engine);
    json_object_set_new(sg, "holds_at_default", json_boolean(holds_at_default(p)));
  }
  json_object_set_new(root, "sglang", sg);
  if (p->launch != NULL) {
    json_object_set_new(root, "launch", p->launch);
    p->launch = NULL; /* root owns it now */
  }
}

/* The model a launch line loads: the folder planned, else the built-in's
 * published checkpoint. */
static const char *model_path(const kvs_plan_model *m) {
  if (m->have_config && m->config.is_folder) return m->config.folder;
  if (strcmp(m->name, "dsv4-pro") == 0) return "deepseek-ai/DeepSeek-V4-Pro";
  if (strcmp(m->name, "dsv4-flash") == 0) return "deepseek-ai/DeepSeek-V4-Flash";
  return m->name;
}

void kvplan_engine_text(const plan_run *p) {
  uint64_t tokens = p->plan != NULL ? kvs_deployment_split(p->plan)->full_token : 0;
  kvs_sglang_report_print(kvs_tool_out(), &p->sglang.least, &p->sglang_options, p->sglang.available,
                          tokens, p->a->options.kv_dtype);
  fprintf(kvs_tool_out(),
          "  --max-running-requests %llu over %zu DP group%s: %llu per group's worker\n",
          (unsigned long long)p->sglang_max_running, p->layout.dp, p->layout.dp > 1 ? "s" : "",
          (unsigned long long)p->sglang.max_running);
  if (p->engine_rule) {
    kvs_engine_memory_print(kvs_tool_out(), &p->engine);
    fprintf(kvs_tool_out(), "  at SGLang's default %.3f the pools hold %s\n",
            p->engine.by_default.mem_fraction_static,
            holds_at_default(p) ? "some KV" : "nothing: SGLang would refuse to start");
  }
  if (p->launch != NULL) kvs_engine_launch_print(kvs_tool_out(), model_path(p->m), p->launch);
}

int kvplan_engine_verdict(const plan_run *p) {
  if (!p->sglang.least.no_pool) return 0;
  char rest[32], fixed[32];
  fflush(kvs_tool_out());
  fprintf(kvs_tool_err(),
          "kvplan plan: SGLang would refuse to start (\"Not enough memory\"): the %s its pools "
          "get hold no full-token page once its ratio-128 state for %llu running requests (%s) "
          "is reserved; raise --mem-fraction or lower --max-running\n",
          kvs_format_bytes(p->sglang.available, rest, sizeof rest),
          (unsigned long long)p->sglang_options.max_running,
          kvs_format_bytes(p->sglang.least.c128_state_fixed_bytes, fixed, sizeof fixed));
  return 1;
}

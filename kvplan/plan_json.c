#include "kvplan/plan_json.h"

#include <stdint.h>

json_t *kvs_json_u64(uint64_t value) {
  /* Past INT64_MAX a json_int_t would wrap negative: a size shown as a
   * negative number is a lie, a real only loses digits. */
  return value > (uint64_t)INT64_MAX ? json_real((double)value) : json_integer((json_int_t)value);
}

json_t *kvs_gpu_json(const kvs_gpu_info *gpu) {
  json_t *o = json_object();
  json_object_set_new(o, "index", kvs_json_u64(gpu->index));
  json_object_set_new(o, "pci_busid", json_string(gpu->pci_busid));
  json_object_set_new(o, "numa_node",
                      gpu->numa_node >= 0 ? json_integer(gpu->numa_node) : json_null());
  json_object_set_new(o, "cpuset", json_string(gpu->cpuset));
  return o;
}

static json_t *tiers_json(const kvs_pool_breakdown *b) {
  json_t *tiers = json_object();
  json_object_set_new(tiers, "window", kvs_json_u64(b->window));
  json_object_set_new(tiers, "compressed", kvs_json_u64(b->compressed));
  json_object_set_new(tiers, "indexer", kvs_json_u64(b->indexer));
  json_object_set_new(tiers, "state", kvs_json_u64(b->state));
  json_object_set_new(tiers, "index_state", kvs_json_u64(b->index_state));
  json_object_set_new(tiers, "mapping", kvs_json_u64(b->mapping));
  json_object_set_new(tiers, "scratch", kvs_json_u64(b->scratch));
  return tiers;
}

static json_t *rank_json(const kvs_rank_plan *rp, const kvs_gpu_info *gpus,
                         const kvs_memory_budget *budget) {
  json_t *o = json_object();
  json_object_set_new(o, "rank", kvs_json_u64(rp->rank));
  json_object_set_new(o, "node", kvs_json_u64(gpus[rp->gpu].host));
  json_object_set_new(o, "tp_rank", kvs_json_u64(rp->tp_rank));
  json_object_set_new(o, "pp_stage", kvs_json_u64(rp->pp_stage));
  json_object_set_new(o, "gpu", kvs_gpu_json(&gpus[rp->gpu]));
  json_object_set_new(o, "layers",
                      json_pack("[II]", (json_int_t)rp->first, (json_int_t)(rp->end - 1)));
  json_object_set_new(o, "budget_bytes", kvs_json_u64(rp->budget_bytes));
  json_object_set_new(o, "budget_source", json_string(kvs_budget_source_name(budget->source)));
  json_object_set_new(o, "memory_bytes", kvs_json_u64(budget->memory_bytes));
  json_object_set_new(o, "memory_ratio", json_real(budget->memory_ratio));
  json_object_set_new(o, "weights_bytes", kvs_json_u64(budget->weights_bytes + rp->weight_bytes));
  json_object_set_new(o, "reserve_bytes", kvs_json_u64(budget->reserve_bytes));
  json_object_set_new(o, "pool_bytes", kvs_json_u64(rp->device.total_bytes));
  json_object_set_new(o, "exact_bytes", kvs_json_u64(rp->device.exact_bytes));
  json_object_set_new(o, "control_bytes", kvs_json_u64(rp->device.control_bytes));
  json_object_set_new(o, "padding_bytes", kvs_json_u64(rp->device.padding_bytes));
  json_object_set_new(o, "headroom_bytes", kvs_json_u64(rp->headroom_bytes));
  json_object_set_new(o, "tiers", tiers_json(&rp->bytes));
  return o;
}

json_t *kvs_plan_json(kvs_deployment_t plan, const kvs_gpu_info *gpus,
                      const kvs_memory_budget *budgets, const kvs_plan_json_context *context) {
  const kvs_split *split = kvs_deployment_split(plan);
  json_t *root = json_object();
  if (root == NULL) return NULL;
  json_object_set_new(root, "num_pages", kvs_json_u64(split->num_pages));
  json_object_set_new(root, "full_token", kvs_json_u64(split->full_token));
  json_object_set_new(root, "n_win_pages", kvs_json_u64(split->n_win_pages));
  json_object_set_new(root, "tp", kvs_json_u64(kvs_deployment_tp(plan)));
  json_object_set_new(root, "pp", kvs_json_u64(kvs_deployment_pp(plan)));
  /* The node plan lays out every DP group as one of its replicas. */
  size_t dp = context->dp > 0 ? context->dp : 1, ep = context->ep > 0 ? context->ep : 1;
  size_t groups = kvs_deployment_replicas(plan);
  json_object_set_new(root, "dp", kvs_json_u64(dp));
  json_object_set_new(root, "ep", kvs_json_u64(ep));
  json_object_set_new(root, "replicas", kvs_json_u64(groups / dp));
  json_object_set_new(root, "tokens_per_group", kvs_json_u64(split->full_token));
  json_object_set_new(root, "cluster_tokens", kvs_json_u64(split->full_token * groups));
  json_t *nodes = json_array();
  for (size_t k = 0; k < context->n_hosts; k++) {
    size_t count = 0;
    for (size_t r = 0; r < kvs_deployment_rank_count(plan); r++) {
      count += gpus[kvs_deployment_rank(plan, r)->gpu].host == k;
    }
    json_t *node = json_object();
    json_object_set_new(node, "node", kvs_json_u64(k));
    json_object_set_new(node, "label", json_string(context->host_labels[k]));
    json_object_set_new(node, "gpus", kvs_json_u64(count));
    json_array_append_new(nodes, node);
  }
  json_object_set_new(root, "nodes", nodes);
  json_object_set_new(root, "cross_node_tp", json_boolean(kvs_deployment_cross_host_tp(plan)));
  json_object_set_new(root, "kv_dtype", json_string(context->kv_dtype));
  json_object_set_new(root, "state_rings",
                      json_string(kvs_state_rings_name(split->stages[0].sizes.state_rings)));
  json_object_set_new(root, "request_slots", kvs_json_u64(split->stages[0].sizes.n_req_slots));
  json_object_set_new(root, "mtp_layers", kvs_json_u64(context->mtp_layers));
  json_object_set_new(root, "weights_source", json_string(context->weights_source));
  if (context->running_per_group != 0) {
    json_object_set_new(root, "running_per_group", kvs_json_u64(context->running_per_group));
    json_object_set_new(root, "max_seq_len", kvs_json_u64(context->max_seq_len));
  }
  json_object_set_new(root, "limiting_rank", kvs_json_u64(kvs_deployment_limiting_rank(plan)));
  json_t *ranks = json_array();
  for (size_t r = 0; r < kvs_deployment_rank_count(plan); r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(plan, r);
    json_t *rank = rank_json(rp, gpus, &budgets[rp->gpu]);
    if (context->node_overhead_bytes != NULL) {
      json_object_set_new(rank, "node_overhead_bytes",
                          kvs_json_u64(context->node_overhead_bytes[r]));
    }
    json_array_append_new(ranks, rank);
  }
  json_object_set_new(root, "ranks", ranks);
  return root;
}

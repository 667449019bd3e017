/* The plan as one JSON object: what `kvplan plan --json` prints and what
 * kvsim embeds as its `plan`, from one function, so the two can be
 * compared key for key. */
#ifndef KVS_KVPLAN_PLAN_JSON_H
#define KVS_KVPLAN_PLAN_JSON_H

#include <jansson.h>
#include <stdint.h>

#include "plan/memory_budget.h"
#include "topology/gpu.h"
#include "plan/deployment.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a plan was made for beyond its numbers. */
typedef struct kvs_plan_json_context {
  const char *kv_dtype;           /* "bf16", "fp8" */
  uint64_t mtp_layers;            /* speculative draft layers planned */
  const char *weights_source;     /* "none", "measured" (--weights), "folder", "total" */
  const char *const *host_labels; /* one per cluster node, in node order */
  size_t n_hosts;                 /* 1 on one machine */
  /* Attention data-parallel groups per replica and expert parallelism (0
   * reads as 1: a caller that predates them plans neither). */
  size_t dp, ep;
  /* Per plan rank, what the node puts on its GPU beside its carve in the
   * deployment kvplan plans (shard/plan_overhead.h,
   * kvs_node_deployment_planned): each rank's node_overhead_bytes. NULL:
   * the key is left out. */
  const uint64_t *node_overhead_bytes;
  /* What the pool was sized for: running requests per DP group (each a
   * state-ring slot and its share of the window floor) of up to
   * max_seq_len tokens, kvplan plan's --max-running and --max-seq-len (0:
   * the keys are left out). kvplan fit sizes a layout by the same rule
   * for the requests it counts and says so under the same keys. */
  uint64_t running_per_group, max_seq_len;
} kvs_plan_json_context;

/* A new object: num_pages, full_token, n_win_pages, tp, pp, dp, ep,
 * replicas (GPUs / (tp x pp x dp)), tokens_per_group (the tokens of history
 * one DP group holds: full_token), cluster_tokens (summed over every DP
 * group of every replica), nodes (each
 * node's label and GPU count), cross_host_tp, kv_dtype,
 * state_rings, request_slots (the dummy included; 0 per page), mtp_layers,
 * weights_source, running_per_group and max_seq_len (where the context
 * gives them), limiting_rank and ranks (each rank's
 * node, tp_rank, pp_stage, gpu, layers, budget terms with its weights, pool,
 * control and padding bytes, tiers, and node_overhead_bytes where the
 * context gives them). budgets[g] is GPU g's budget
 * (every GPU of gpus). NULL on allocation failure. */
json_t *kvs_plan_json(kvs_deployment_t plan, const kvs_gpu_info *gpus,
                      const kvs_memory_budget *budgets, const kvs_plan_json_context *context);

/* {"index", "pci_busid", "numa_node" (null when unknown), "cpuset"}. */
json_t *kvs_gpu_json(const kvs_gpu_info *gpu);

/* A byte count or other unsigned quantity as a JSON integer; past
 * INT64_MAX (which the tools refuse before printing) a JSON real, never a
 * wrapped negative integer. */
json_t *kvs_json_u64(uint64_t value);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_PLAN_JSON_H */

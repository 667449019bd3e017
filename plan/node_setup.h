/* The node's setup steps, one function each, in the order kvs_node_create
 * runs them. kvplan plans through the same functions (steps 1, 3 and 4),
 * so the plan it prints is what the node carves on every GPU, byte for
 * byte, the device tables' control area and alignment padding included.
 *
 *   1. the topology: live, an hwloc XML export, or the bundled server;
 *   2. (kvs_node_create) the rank's thread and host buffers bound to its
 *      GPU's NUMA node;
 *   3. each GPU's budget by core's one rule (kvs_memory_budget_rule):
 *      measured free bytes, or the nominal capacity where nothing can be
 *      measured, x memory ratio - reserve; or the caller's bytes;
 *   4. the plan: rank layout, the exact stage split and the common page
 *      count, every stage priced as the device layout carves it.
 *
 * Nothing here needs a GPU, MPI or NCCL.
 *
 * NULL: every kvs_status call refuses a NULL request, GPU list, plan or
 * output (and kvs_node_budgets an empty GPU list) with
 * KVS_ERR_INVALID_ARGUMENT naming it; spec NULL means "auto" and note may
 * be NULL. kvs_node_layout_options(NULL) gives the INIT options. */
#ifndef KVS_PLAN_NODE_SETUP_H
#define KVS_PLAN_NODE_SETUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/memory_budget.h"
#include "core/serving_defaults.h"
#include "core/status.h"
#include "plan/device_layout.h"
#include "plan/deployment.h"
#include "topology/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- step 1: the topology ---- */

/* Loads the topology `spec` names: NULL or "auto" (the running machine
 * when CUDA sees a GPU, else the bundled 8-GPU server), "live" (the
 * running machine), "bundled", or the path of an hwloc XML export. When
 * "auto" falls back to the bundled server, note (note_cap bytes, may be
 * NULL) says so and why; otherwise note is "". A topology that does not
 * load is KVS_ERR_IO / KVS_ERR_PARSE naming it; one without an NVIDIA GPU
 * is KVS_ERR_NOT_FOUND. "live" and "auto" with one of hwloc's variables
 * that replace the running machine set (HWLOC_XMLFILE, ...; see
 * kvs_topology_source_live) are KVS_ERR_UNSUPPORTED naming it: "auto"
 * does not fall back to the bundled server then. *out is written only on
 * success. */
kvs_status kvs_host_topology_open(const char *spec, kvs_topology_t *out, char *note,
                                  size_t note_cap, kvs_error *err);

/* The same, measuring free memory on every visible GPU only when
 * measure_free (which creates this process's context on each): a planner
 * measures them all (kvs_host_topology_open), a serving rank none (it
 * measures its own GPU when it budgets). */
kvs_status kvs_topology_open_spec(const char *spec, bool measure_free, kvs_topology_t *out,
                                  char *note, size_t note_cap, kvs_error *err);

/* ---- step 3: budgets ---- */

/* Where budgets come from; start from KVS_BUDGET_REQUEST_INIT. At most one
 * of budget_bytes and budget_per_gpu is given. */
typedef struct kvs_budget_request {
  uint64_t budget_bytes;          /* every GPU's bytes, as given; 0: not given */
  const uint64_t *budget_per_gpu; /* bytes per GPU in index order; NULL: not given */
  size_t n_budget_per_gpu;        /* must equal the GPU count */
  double memory_ratio;            /* (0, 1], applied to measured or nominal memory */
  uint64_t reserve_bytes;         /* taken off measured or nominal memory */
  /* Weights not yet loaded, taken off measured or nominal memory: every
   * GPU's bytes, or one per GPU in index order (at most one of the two). */
  uint64_t weights_bytes;
  const uint64_t *weights_per_gpu;
  size_t n_weights_per_gpu;
} kvs_budget_request;

#define KVS_BUDGET_REQUEST_INIT \
  { 0, NULL, 0, KVS_DEFAULT_MEMORY_RATIO, KVS_DEFAULT_RESERVE_BYTES, 0, NULL, 0 }

/* The budget of GPU gpus[index] (n_gpus in the list): the caller's bytes,
 * else its measured free memory (gpu->free_bytes, when CUDA measured it),
 * else its model's known memory (kvs_gpu_known_memory_bytes), through the
 * one rule. A GPU with none of these is KVS_ERR_INVALID_ARGUMENT naming it
 * and its PCI ids: nothing is invented. */
kvs_status kvs_node_gpu_budget(const kvs_budget_request *request, const kvs_gpu_info *gpus,
                               size_t n_gpus, size_t index, kvs_memory_budget *out, kvs_error *err);

/* Every GPU's budget, out[0..n_gpus). Refuses a per-GPU list of the wrong
 * length, both kinds of explicit bytes at once, and a ratio outside
 * (0, 1]. A budget, the reserve or the weights above a GPU's own memory
 * cannot be true: KVS_ERR_INVALID_ARGUMENT in memory_inputs.h's sentence,
 * naming them by the node's flags (--budget, --budget-per-gpu, --reserve,
 * --weights, --weights-per-gpu), here and in kvs_node_gpu_budget (which
 * holds every GPU of the list to it, so each rank refuses alike). out is
 * written only on success. */
kvs_status kvs_node_budgets(const kvs_budget_request *request, const kvs_gpu_info *gpus,
                            size_t n_gpus, kvs_memory_budget *out, kvs_error *err);

/* kvs_node_budgets with every GPU's memory given (memory_bytes, as kvplan
 * --gpu-memory gives it): that figure is budgeted as nominal memory in
 * place of what was measured or what the table of known models says
 * (the caller holds its inputs to it: kvs_memory_inputs_check);
 * memory_bytes 0 is kvs_node_budgets itself. */
kvs_status kvs_node_budgets_on_memory(const kvs_budget_request *request, uint64_t memory_bytes,
                                      const kvs_gpu_info *gpus, size_t n_gpus,
                                      kvs_memory_budget *out, kvs_error *err);

/* A GPU's total memory: memory_bytes when non-zero (kvplan --gpu-memory),
 * else what CUDA reported (gpu->total_bytes), else the total its model's
 * driver reports (kvs_gpu_known_memory_bytes); a GPU with none is
 * KVS_ERR_INVALID_ARGUMENT naming it. NULL gpu or out is refused. */
kvs_status kvs_node_gpu_total_memory(const kvs_gpu_info *gpu, uint64_t memory_bytes, uint64_t *out,
                                     kvs_error *err);

/* Every GPU's free memory before a model's weights load (SGLang's
 * pre_model_load_memory) into out[0..n_gpus), and where it came from into
 * sources[] (may be NULL): given_bytes for every GPU when non-zero
 * (explicit); else what CUDA measured free (measured); else the GPU's
 * total memory (kvs_node_gpu_total_memory) less
 * KVS_DEFAULT_CONTEXT_OVERHEAD_BYTES (nominal). A total at or below that
 * overhead is KVS_ERR_BUDGET_TOO_SMALL naming the GPU; given_bytes above
 * memory_bytes, or either above a GPU's own memory, cannot be true and is
 * KVS_ERR_INVALID_ARGUMENT in memory_inputs.h's sentence (naming them
 * --free-before-load and --gpu-memory). out is written only on success. */
kvs_status kvs_node_free_before_load(const kvs_gpu_info *gpus, size_t n_gpus, uint64_t given_bytes,
                                     uint64_t memory_bytes, uint64_t *out,
                                     kvs_budget_source *sources, kvs_error *err);

/* ---- step 4: the plan ---- */

/* The device layout options every rank carves with: the default alignment
 * and journal staging, the request's scratch rows. */
kvs_device_layout_options kvs_node_layout_options(const kvs_plan_request *request);

/* kvs_deployment_create with every stage priced by the device layout's
 * footprint (request->footprint is ignored): each rank's device.total_bytes
 * is what kvs_device_tables_create allocates for it. */
kvs_status kvs_deployment_make(const kvs_plan_request *request, const kvs_gpu_info *gpus,
                               size_t n_gpus, const uint64_t *budgets, kvs_deployment_t *out,
                               kvs_plan_shortfall *shortfall, kvs_error *err);

/* Whether the plan kvs_deployment_make makes for request would hold
 * num_pages pages, given its stages' tightest budgets (request->pp of
 * them, each the smallest budget of the stage's GPUs, as the plan takes
 * them): kvs_split_holds under the plan's own pricing, without placing or
 * pricing a rank. *out is written only on success. */
kvs_status kvs_deployment_holds(const kvs_plan_request *request, const uint64_t *stage_budgets,
                                uint64_t num_pages, bool *out, kvs_error *err);

/* The most pages a device holding layers [first, end) fits under budget,
 * priced as kvs_deployment_make prices (0: not even the minimal pool). The
 * node's ranks agree on the MIN of theirs. */
kvs_status kvs_node_max_pages(const kvs_plan_request *request, size_t first, size_t end,
                              uint64_t budget, uint64_t *out, kvs_error *err);

/* Rank `rank`'s device layout under a plan made by kvs_deployment_make with
 * the same request; its total_bytes is checked against the plan's
 * (KVS_ERR_INTEGRITY if they ever differ). */
kvs_status kvs_node_rank_layout(const kvs_plan_request *request, kvs_deployment_t plan, size_t rank,
                                kvs_device_layout *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_NODE_SETUP_H */

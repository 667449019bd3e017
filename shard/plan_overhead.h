/* What a node serving a plan puts on each rank's GPU beside its carve
 * (plan/node_overhead.h), from the plan itself: the step message of the
 * capacity the rank's shard will have (kvs_shard_step_capacity_of over its
 * stage's sizes), the tables' batch buffers for the deployment's rows, and
 * the communicator's buffers. One function for the node (its actual
 * configuration, at create) and for kvplan and kvsim's `plan` (the
 * deployment kvplan plans, kvs_node_deployment_planned), so the figure
 * kvplan prints is the one the node checks when it runs as planned.
 *
 * NULL: the kvs_status calls refuse a NULL plan, deployment or output with
 * KVS_ERR_INVALID_ARGUMENT naming it; *out is written only on success. */
#ifndef KVS_SHARD_PLAN_OVERHEAD_H
#define KVS_SHARD_PLAN_OVERHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "plan/node_overhead.h"
#include "plan/deployment.h"
#include "topology/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the node runs the plan. */
typedef struct kvs_node_deployment {
  bool cuda_tables;     /* device tables on the GPU (else the host twin: no table buffers) */
  bool device_comm;     /* the steps' communicator keeps device buffers (NCCL) */
  size_t max_batch;     /* rows a step carries (0: max_running) */
  uint64_t max_running; /* the shard's: its capacity's decode pages and slots */
  bool radix;           /* the shard's: the pages its chunk budget leaves */
  bool prefix_cache;    /* the shard's: a prefix cache's entries in each step */
  size_t step_capacity; /* 0: the shard's rule over the rank's stage */
  uint64_t max_seq_len; /* the tables' block-table rows */
  size_t agree_words;   /* the node's agreement scratch on a device communicator */
  /* NCCL's buffers with device_comm. NULL: NCCL's defaults at kvshard's
   * channels (KVS_NCCL_ESTIMATE_INIT), with the tree's three peers a
   * channel where the rank's group spans cluster nodes. */
  const kvs_nccl_estimate *nccl;
} kvs_node_deployment;

/* The node's collective scratch in words for a plan over n_gpus GPUs: the
 * budget gather's four words per GPU, or an error message and its status
 * word, the larger (what kvs_node_create allocates on its communicator). */
size_t kvs_node_agree_words(size_t n_gpus);

/* The deployment kvplan plans, and what kvsim's `plan` reports with it:
 * device tables on every GPU, NCCL between the ranks of a group when the
 * group has more than one (tp x pp > 1; the engine's communicator too, so
 * the agreement words are counted on the device), max_batch = max_running,
 * the shard's own step capacity (no prefix cache: kvplan plans none), NCCL's
 * default estimate. */
kvs_node_deployment kvs_node_deployment_planned(kvs_deployment_t plan, size_t n_gpus,
                                                uint64_t max_running, bool radix,
                                                uint64_t max_seq_len);

/* Rank `rank`'s buffers under deployment d. gpus[0..] is the GPU list the
 * plan was made for (its ranks' nodes tell a group that spans nodes).
 * A rank past the plan is KVS_ERR_INVALID_ARGUMENT; the rest as
 * kvs_shard_step_capacity_of and kvs_node_overhead_compute refuse. */
kvs_status kvs_deployment_overhead(kvs_deployment_t plan, const kvs_gpu_info *gpus, size_t rank,
                                   const kvs_node_deployment *d, kvs_node_overhead *out,
                                   kvs_error *err);

/* The rank whose buffers under d are the largest (the lowest of equals)
 * into *rank and its buffers into *out, as kvs_deployment_overhead prices
 * each, in one pass over the ranks (kvplan fit prices every layout of
 * thousands of GPUs). On failure, the first rank's refusal; *rank and
 * *out are then unspecified. */
kvs_status kvs_deployment_overhead_most(kvs_deployment_t plan, const kvs_gpu_info *gpus,
                                        const kvs_node_deployment *d, size_t *rank,
                                        kvs_node_overhead *out, kvs_error *err);

/* total_bytes of every rank of the plan into out[0..rank count). */
kvs_status kvs_deployment_overheads(kvs_deployment_t plan, const kvs_gpu_info *gpus,
                                    const kvs_node_deployment *d, uint64_t *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_PLAN_OVERHEAD_H */

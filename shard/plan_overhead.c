#include "shard/plan_overhead.h"

#include <stdint.h>
#include <stdlib.h>

#include "shard/shard.h"
#include "shard/step_message.h"

size_t kvs_node_agree_words(size_t n_gpus) {
  /* node.c's gather (B_WORDS per GPU) and kvs_comm_agree's message. */
  size_t gather = (n_gpus > 0 ? n_gpus : 1) * 4;
  size_t message = 1 + (KVS_ERROR_MESSAGE_MAX + sizeof(uint64_t) - 1) / sizeof(uint64_t);
  return gather > message ? gather : message;
}

kvs_node_deployment kvs_node_deployment_planned(kvs_deployment_t plan, size_t n_gpus,
                                                uint64_t max_running, bool radix,
                                                uint64_t max_seq_len) {
  bool group = plan != NULL && kvs_deployment_tp(plan) * kvs_deployment_pp(plan) > 1;
  kvs_node_deployment d = {.cuda_tables = true,
                           .device_comm = group,
                           .max_batch = (size_t)max_running,
                           .max_running = max_running,
                           .radix = radix,
                           .prefix_cache = false,
                           .step_capacity = 0,
                           .max_seq_len = max_seq_len,
                           .agree_words = group ? kvs_node_agree_words(n_gpus) : 0,
                           .nccl = NULL};
  return d;
}

/* How many of rank's tp x pp group run on its cluster node, and whether
 * the group has ranks on another. */
static size_t group_on_node(kvs_deployment_t plan, const kvs_gpu_info *gpus, size_t rank,
                            bool *spans) {
  const kvs_rank_plan *own = kvs_deployment_rank(plan, rank);
  size_t n = kvs_deployment_rank_count(plan), local = 0;
  *spans = false;
  for (size_t r = 0; r < n; r++) {
    const kvs_rank_plan *other = kvs_deployment_rank(plan, r);
    if (other->replica != own->replica) continue;
    if (gpus[other->gpu].host == gpus[own->gpu].host) {
      local++;
    } else {
      *spans = true;
    }
  }
  return local;
}

/* Rank rp's buffers, its group having `local` ranks on its cluster node
 * and `spans` telling whether it has ranks on another. */
static kvs_status overhead_of(kvs_deployment_t plan, const kvs_rank_plan *rp, size_t local,
                              bool spans, const kvs_node_deployment *d, kvs_node_overhead *out,
                              kvs_error *err) {
  const kvs_pool_sizes *sizes = &kvs_deployment_split(plan)->stages[rp->pp_stage].sizes;
  size_t capacity = 0;
  kvs_status status = kvs_shard_step_capacity_of(sizes, d->max_running, d->radix, d->prefix_cache,
                                                 d->step_capacity, &capacity, err);
  if (status != KVS_OK) return status;
  kvs_nccl_estimate nccl = KVS_NCCL_ESTIMATE_INIT;
  if (d->nccl != NULL) {
    nccl = *d->nccl;
  } else {
    /* NVLink SHARP has a head per rank of the node (none for one), and
     * across nodes the allreduce's tree connects up to three more peers a
     * channel (NCCL_MAX_TREE_ARITY). */
    if (local < nccl.nvls_heads) nccl.nvls_heads = (uint32_t)local;
    if (local < 2) nccl.nvls_channels = 0;
    if (spans) nccl.tree_peers = 3;
  }
  kvs_node_overhead_request r = {
      .max_batch = d->max_batch > 0 ? d->max_batch : (size_t)d->max_running,
      .max_seq_len = d->max_seq_len,
      .page = sizes->page,
      .cuda_tables = d->cuda_tables,
      .device_comm = d->device_comm,
      .message_bytes = kvs_step_message_bytes(capacity),
      .agree_words = d->agree_words,
      .nccl = &nccl};
  return kvs_node_overhead_compute(&r, out, err);
}

static const char *null_argument(kvs_deployment_t plan, const kvs_gpu_info *gpus,
                                 const kvs_node_deployment *d, const void *out) {
  return plan == NULL   ? "plan"
         : gpus == NULL ? "gpus"
         : d == NULL    ? "deployment"
         : out == NULL  ? "out"
                        : NULL;
}

kvs_status kvs_deployment_overhead(kvs_deployment_t plan, const kvs_gpu_info *gpus, size_t rank,
                                   const kvs_node_deployment *d, kvs_node_overhead *out,
                                   kvs_error *err) {
  const char *null = null_argument(plan, gpus, d, out);
  if (null != NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__, null);
  }
  const kvs_rank_plan *rp = kvs_deployment_rank(plan, rank);
  if (rp == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "rank %zu is past the plan's %zu", rank,
                         kvs_deployment_rank_count(plan));
  }
  bool spans = false;
  size_t local = d->nccl == NULL ? group_on_node(plan, gpus, rank, &spans) : 0;
  return overhead_of(plan, rp, local, spans, d, out, err);
}

kvs_status kvs_deployment_overhead_most(kvs_deployment_t plan, const kvs_gpu_info *gpus,
                                        const kvs_node_deployment *d, size_t *rank,
                                        kvs_node_overhead *out, kvs_error *err) {
  const char *null = null_argument(plan, gpus, d, out);
  if (null == NULL && rank == NULL) null = "rank";
  if (null != NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__, null);
  }
  size_t n = kvs_deployment_rank_count(plan);
  size_t replicas = kvs_deployment_replicas(plan);
  if (n == 0 || replicas == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: the plan has no rank", __func__);
  }
  /* Each replica's ranks per cluster node and how many nodes it touches,
   * in one pass: group_on_node's answer for every rank. */
  size_t n_hosts = 0;
  for (size_t r = 0; r < n; r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(plan, r);
    if (rp->replica >= replicas) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "rank %zu: replica %zu of %zu", r,
                           rp->replica, replicas);
    }
    if (gpus[rp->gpu].host >= n_hosts) n_hosts = gpus[rp->gpu].host + 1;
  }
  if (n_hosts > SIZE_MAX / sizeof(size_t) / replicas) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "%zu replicas over %zu cluster nodes", replicas,
                         n_hosts);
  }
  size_t *count = calloc(replicas * n_hosts, sizeof *count);
  size_t *nodes = calloc(replicas, sizeof *nodes);
  if (count == NULL || nodes == NULL) {
    free(count);
    free(nodes);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to count %zu replicas' ranks",
                         replicas);
  }
  for (size_t r = 0; r < n; r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(plan, r);
    if (count[rp->replica * n_hosts + gpus[rp->gpu].host]++ == 0) nodes[rp->replica]++;
  }
  kvs_status status = KVS_OK;
  bool found = false;
  for (size_t r = 0; r < n && status == KVS_OK; r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(plan, r);
    size_t local = count[rp->replica * n_hosts + gpus[rp->gpu].host];
    kvs_node_overhead o;
    status = overhead_of(plan, rp, local, nodes[rp->replica] > 1, d, &o, err);
    if (status == KVS_OK && (!found || o.total_bytes > out->total_bytes)) {
      *out = o;
      *rank = r;
      found = true;
    }
  }
  free(count);
  free(nodes);
  return status;
}

kvs_status kvs_deployment_overheads(kvs_deployment_t plan, const kvs_gpu_info *gpus,
                                    const kvs_node_deployment *d, uint64_t *out, kvs_error *err) {
  if (plan == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         plan == NULL ? "plan" : "out");
  }
  size_t n = kvs_deployment_rank_count(plan);
  for (size_t r = 0; r < n; r++) {
    kvs_node_overhead o;
    kvs_status status = kvs_deployment_overhead(plan, gpus, r, d, &o, err);
    if (status != KVS_OK) return status;
    out[r] = o.total_bytes;
  }
  return KVS_OK;
}

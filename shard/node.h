/* The node: the per-rank KV manager an engine links.
 *
 * One collective call per rank builds everything, in order, each step one
 * function that kvplan also uses (plan/node_setup.h), so what the node
 * carves is the plan kvplan prints, byte for byte:
 *
 *   1. the topology (live, an hwloc XML export, or the bundled server) of
 *      every node the ranks run on, gathered from the ranks, and
 *      this rank's GPU from the plan's locality-ordered layout (rank r of
 *      a tp x pp group is plan rank r), or the CUDA device the engine
 *      already selected;
 *   2. the calling thread and the node's host buffers bound to that GPU's
 *      NUMA node (reported, never fatal, where binding is unsupported);
 *   3. this rank's budget by the one rule (measured free bytes x memory
 *      ratio - reserve, or the engine's bytes), gathered so that every
 *      rank holds every GPU's budget;
 *   4. the exact stage split over those budgets and the page count the
 *      padded device layout of every rank's stage fits, agreed as the MIN
 *      over all ranks in one allreduce; a rank that cannot hold the
 *      minimal pool makes every rank fail with the same error naming that
 *      rank, its GPU and its layers;
 *   5. the tables: backends/cuda/device_tables on a GPU, or the host twin running
 *      core/device_ref's references (shard/table.h);
 *   6. the shard runtime: each node step is the shard's step (the
 *      journal received), then one table step over it (from the
 *      broadcast's device buffer on NCCL), and each check carries the
 *      tables' verdict against the pool into the shard's allreduce.
 *
 * Every rank must pass the same options; a fingerprint of everything that
 * shapes the pool (the geometry, the layout, the row widths, the sizing
 * options, the GPU list) is compared at create, and ranks that differ
 * fail together naming the first rank that differs.
 *
 * Per step the leader binds and frees through kvs_node_pool between steps;
 * kvs_node_step then broadcasts the bindings, applies them on every rank
 * (mirror pool and tables) and computes the ring contexts of the step's
 * batch of requests on the tables.
 *
 * Every call that communicates is collective. Failures are all-or-nothing
 * for create (nothing is left allocated, and every rank fails); a failed
 * step poisons the node as it poisons the shard. */
#ifndef KVS_SHARD_NODE_H
#define KVS_SHARD_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvshard.h"
#include "core/cost_model.h"
#include "core/geometry.h"
#include "plan/memory_budget.h"
#include "core/serving_defaults.h"
#include "core/status.h"
#include "pool/window_pool.h"
#include "plan/device_layout.h"
#include "plan/cluster.h"
#include "shard/comm.h"
#include "plan/node_overhead.h"
#include "plan/node_setup.h"
#include "shard/shard.h"
#include "shard/table.h"
#include "topology/binding.h"
#include "plan/deployment.h"
#include "topology/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The public face (kvs_node_t, kvs_node_device, kvs_node_options and
 * kvs_node_options_init, create and destroy, admit, bind, free, finish,
 * step, translate, check, the tables' views, rank, size, page, ...) is
 * kvshard.h's. What follows is for the library's own tools and tests,
 * which link it statically: the plan and the parts the node built. */

/* "auto", "cpu", "cuda". */
const char *kvs_node_device_name(kvs_node_device device);

/* Like kvs_node_create, planning over a cluster the caller gathered once
 * (kvs_cluster_gather on every rank alike) and lends: it must outlive the
 * node. */
kvs_status kvs_node_create_in_cluster(kvs_comm_t comm, const kvs_node_options *options,
                                      kvs_cluster_t cluster, kvs_node_t *out, kvs_error *err);

kvs_topology_t kvs_node_topology(const struct kvs_node *node);
/* Every GPU the plan covers, over every node, in plan order (the list
 * kvs_deployment's ranks index), and how many. */
const kvs_gpu_info *kvs_node_gpus(const struct kvs_node *node);
size_t kvs_node_gpu_count(const struct kvs_node *node);
/* The cluster the node planned (one node on one machine). */
kvs_cluster_t kvs_node_cluster(const struct kvs_node *node);
/* Why the bundled server stands in for the machine ("" when it does not). */
const char *kvs_node_topology_note(const struct kvs_node *node);
/* The whole node's plan (every rank of every replica the topology holds),
 * identical on every rank; this rank is plan rank kvs_node_rank. */
kvs_deployment_t kvs_deployment(const struct kvs_node *node);
const kvs_plan_request *kvs_deployment_request(const struct kvs_node *node);
const kvs_rank_plan *kvs_node_rank_plan(const struct kvs_node *node);
/* Every GPU's budget as the plan used it (kvs_topology_gpu_count of them). */
const kvs_memory_budget *kvs_node_gpu_budgets(const struct kvs_node *node);
const kvs_gpu_info *kvs_node_gpu(const struct kvs_node *node);
const kvs_binding_report *kvs_node_binding(const struct kvs_node *node);
/* This rank's device layout (what the tables carve). */
const kvs_device_layout *kvs_node_layout(const struct kvs_node *node);
kvs_table_t kvs_node_table(const struct kvs_node *node);
/* What this rank puts on its GPU beside its carve, as create priced it
 * with its actual configuration and checked against its budget's reserve
 * (shard/plan_overhead.h). */
const kvs_node_overhead *kvs_node_buffers(const struct kvs_node *node);
kvs_shard_t kvs_node_shard(const struct kvs_node *node);
/* This rank's pool: the leader allocates through it between steps. */
kvs_window_pool_t kvs_node_pool(const struct kvs_node *node);

/* ---- the step ---- */

/* What a step did and where its ring contexts are, in the tables' own
 * form. */
typedef struct kvs_node_step_info {
  kvs_shard_step_info info;
  kvs_ring_result ring; /* on the device for a cuda table */
  uint64_t digest;      /* of the ring contexts, when asked for; else 0 */
  void *event;          /* a cudaEvent_t after the step's device work; NULL on the host */
} kvs_node_step_info;

/* Collective: the next step (the node keeps the count) with rows in the
 * tables' own form (kvs_ring_batch: full block-table rows, and the rows'
 * requests, whose slots every rank resolves from its own mirror after the
 * step's apply): the broadcast, the apply on every rank (mirror pool and
 * tables), then the ring contexts of rows (may be NULL or empty). With
 * digest the contexts are also copied to host memory, hashed, and the hash
 * becomes the step's application digest (compared with the leader's in
 * the next step's header and at checks), so ranks that derive different
 * ring locations are caught. Returns the shard step's status:
 * KVS_ERR_DIVERGENCE (this rank is out of step with the leader; carry on
 * to the next check) still computes the contexts. kvs_node_step is this
 * over an engine's batch. */
kvs_status kvs_node_step_rows(kvs_node_t node, const kvs_ring_batch *rows, bool digest,
                              kvs_node_step_info *out, kvs_error *err);

/* The step the node runs next. */
uint64_t kvs_node_next_step(const struct kvs_node *node);

/* The communicator the steps and checks run on: the one create was given,
 * or the node's own NCCL one (step_backend "nccl"). */
kvs_comm_t kvs_node_step_comm(const struct kvs_node *node);

/* The last step's ring contexts in host memory (valid after a digest step
 * until the next step): n_req own and prev, n_req * P ring slots. */
kvs_status kvs_node_host_ring(const struct kvs_node *node, const int64_t **own,
                              const int64_t **prev, const int64_t **ring, size_t *n_req,
                              kvs_error *err);

/* The last step's ratio-4 and ratio-128 ring locations in host memory
 * (valid after a digest step until the next step), n_req each: per
 * request from the rows' request slots, per page from their window slots,
 * as the pool's widths place the rings. */
kvs_status kvs_node_host_state(const struct kvs_node *node, const int64_t **csa,
                               const int64_t **hca, size_t *n_req, kvs_error *err);

/* Collective: kvs_shard_check, whose one allreduce also carries every
 * rank's tables compared with its mirror pool's mapping and their fault
 * records (the shard's check hook): a table that missed or misapplied a
 * journal is an integrity divergence naming its rank, and on that rank
 * the first differing full page. Periodic checks through the shard cover
 * the tables the same way. kvs_node_check is this with the public
 * report. */
kvs_status kvs_node_check_report(kvs_node_t node, kvs_shard_report *report, kvs_error *err);

typedef struct kvs_node_stats {
  uint64_t steps;
  uint64_t broadcast_ns; /* the step's collective */
  uint64_t mirror_ns;    /* the mirror pool's replay (followers) */
  uint64_t apply_ns;     /* the tables' journal apply */
  uint64_t ring_ns;      /* the ring-context computation */
  uint64_t digest_ns;    /* copying contexts to the host and hashing them */
  uint64_t step_ns;      /* kvs_node_step end to end */
} kvs_node_stats;

void kvs_node_stats_get(const struct kvs_node *node, kvs_node_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_NODE_H */

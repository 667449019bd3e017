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
 *   6. the shard runtime, whose on_apply hook applies each step's journal
 *      to the tables (from the broadcast's device buffer on NCCL).
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

#include "core/cost_model.h"
#include "core/geometry.h"
#include "plan/memory_budget.h"
#include "core/serving_defaults.h"
#include "core/status.h"
#include "core/window_pool.h"
#include "plan/device_layout.h"
#include "plan/cluster.h"
#include "shard/comm.h"
#include "plan/node_setup.h"
#include "shard/shard.h"
#include "shard/table.h"
#include "topology/binding.h"
#include "plan/node_plan.h"
#include "topology/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_node *kvs_node_t;

/* Where the tables live. */
typedef enum kvs_node_device {
  KVS_NODE_DEVICE_AUTO = 0, /* cuda where a GPU is visible, else cpu */
  KVS_NODE_DEVICE_CPU = 1,  /* the host twin */
  KVS_NODE_DEVICE_CUDA = 2  /* backends/cuda/device_tables */
} kvs_node_device;

/* "auto", "cpu", "cuda". */
const char *kvs_node_device_name(kvs_node_device device);

/* A versioned config: start from KVS_NODE_OPTIONS_INIT. */
typedef struct kvs_node_options {
  size_t size; /* sizeof(kvs_node_options) */
  /* The model and the pool's shape; the same on every rank. */
  const kvs_geometry *geometry; /* required */
  /* NULL: bf16 rows, fp32 rings per window page. With rings per request,
   * n_req_slots must be at least max_running + 1 (the dummy slot). */
  const kvs_row_widths *widths;
  double swa_ratio;
  uint64_t page;
  uint64_t max_seq_len;
  uint64_t max_running;
  bool radix;
  uint64_t floor_win_pages; /* 0: derived from max_seq_len, max_running, radix, page */
  uint64_t n_scratch;
  /* The layout: tp * pp must equal the communicator's size. */
  int tp, pp;
  /* Step 1: NULL or "auto", "live", "bundled", or an hwloc XML path. */
  const char *topology;
  /* -1: the plan's GPU (its CUDA ordinal on a live topology); >= 0: the
   * CUDA device the engine selected for this rank. */
  int cuda_device;
  /* Step 2: bind the thread and host buffers to the GPU's NUMA node. */
  bool bind_numa;
  /* Step 3 (plan/node_setup.h). */
  kvs_budget_request budget;
  /* Step 5. */
  kvs_node_device device;
  size_t max_batch; /* ring-context rows per step; 0: max_running */
  /* Step 6 (shard/shard.h). */
  size_t step_capacity; /* 0: follows the pool's prefill chunk budget */
  uint64_t check_every;
  bool check_integrity;
  /* Step 1 over a cluster (plan/cluster.h): topology may be a list of
   * node exports, or nodes > 1 copies of one; every rank passes the same,
   * so every rank plans the same cluster. Rank r runs on plan rank r's
   * GPU, on that GPU's node. 0 with a single topology: the nodes the
   * ranks are on, discovered by host name (one node on one machine). */
  size_t nodes;
  bool allow_cross_node_tp;
  /* Where the launcher placed this rank, checked against the plan (a rank
   * launched out of node order would drive another rank's GPU): its local
   * rank on its machine and its node index. KVS_NODE_FROM_LAUNCHER reads
   * the local rank from the launcher's environment (OMPI_COMM_WORLD_LOCAL_RANK,
   * SLURM_LOCALID, MPI_LOCALRANKID; unchecked when none is set) and does not
   * check the node index; KVS_NODE_UNCHECKED checks nothing (a cluster
   * simulated on one machine); >= 0 is what another launcher says. */
  int local_rank;
  int node_index;
  /* Step 1 on a launched cluster (shard/cluster_gather.h): with nodes 0
   * and a single topology, the ranks discover their nodes, each reading
   * its own machine and naming its host (NULL: gethostname), and every
   * rank checks that it runs on the node the plan puts it on. */
  const char *host;
  /* The engine's cluster (from kvs_cluster_gather, or kvs_cluster_open
   * on every rank alike), borrowed; it must outlive the node. NULL: the
   * node gathers it from topology, nodes and host. */
  kvs_cluster_t cluster;
} kvs_node_options;

#define KVS_NODE_FROM_LAUNCHER (-2)
#define KVS_NODE_UNCHECKED (-1)

#define KVS_NODE_OPTIONS_INIT                                                             \
  {                                                                                       \
    sizeof(kvs_node_options), NULL, NULL, KVS_DEFAULT_SWA_RATIO, KVS_DEFAULT_WINDOW_PAGE, \
        KVS_DEFAULT_MAX_SEQ_LEN, KVS_DEFAULT_MAX_RUNNING, KVS_DEFAULT_RADIX, 0,           \
        KVS_DEFAULT_N_SCRATCH, 1, 1, NULL, -1, true, KVS_BUDGET_REQUEST_INIT,             \
        KVS_NODE_DEVICE_AUTO, 0, 0, 64, true, 0, false, KVS_NODE_FROM_LAUNCHER,            \
        KVS_NODE_FROM_LAUNCHER, NULL, NULL                                                \
  }

/* Collective: steps 1-6 (see the top of this file). On any rank's failure
 * every rank returns an error naming the lowest failing rank and what
 * failed there, and nothing stays allocated. comm is borrowed and must
 * outlive the node. */
kvs_status kvs_node_create(kvs_comm_t comm, const kvs_node_options *options, kvs_node_t *out,
                           kvs_error *err);
void kvs_node_destroy(kvs_node_t node);

/* ---- what create decided ---- */

int kvs_node_rank(const struct kvs_node *node);
int kvs_node_size(const struct kvs_node *node);
kvs_topology_t kvs_node_topology(const struct kvs_node *node);
/* Every GPU the plan covers, over every node, in plan order (the list
 * kvs_node_plan's ranks index), and how many. */
const kvs_gpu_info *kvs_node_gpus(const struct kvs_node *node);
size_t kvs_node_gpu_count(const struct kvs_node *node);
/* The cluster the node planned (one node on one machine). */
kvs_cluster_t kvs_node_cluster(const struct kvs_node *node);
/* Why the bundled server stands in for the machine ("" when it does not). */
const char *kvs_node_topology_note(const struct kvs_node *node);
/* The whole node's plan (every rank of every replica the topology holds),
 * identical on every rank; this rank is plan rank kvs_node_rank. */
kvs_node_plan_t kvs_node_plan(const struct kvs_node *node);
const kvs_plan_request *kvs_node_plan_request(const struct kvs_node *node);
const kvs_rank_plan *kvs_node_rank_plan(const struct kvs_node *node);
/* Every GPU's budget as the plan used it (kvs_topology_gpu_count of them). */
const kvs_memory_budget *kvs_node_gpu_budgets(const struct kvs_node *node);
const kvs_gpu_info *kvs_node_gpu(const struct kvs_node *node);
const kvs_binding_report *kvs_node_binding(const struct kvs_node *node);
/* This rank's device layout (what the tables carve). */
const kvs_device_layout *kvs_node_layout(const struct kvs_node *node);
kvs_table_t kvs_node_table(const struct kvs_node *node);
kvs_shard_t kvs_node_shard(const struct kvs_node *node);
/* This rank's pool: the leader allocates through it between steps. */
kvs_window_pool_t kvs_node_pool(const struct kvs_node *node);

/* ---- the step ---- */

/* What a step did and where its ring contexts are. */
typedef struct kvs_node_step_result {
  kvs_shard_step_info info;
  kvs_ring_result ring; /* on the device for a cuda table */
  uint64_t digest;      /* of the ring contexts, when asked for; else 0 */
} kvs_node_step_result;

/* Collective: step `step` (kvs_shard_next_step): the broadcast, the apply
 * on every rank (mirror pool and tables), then the ring contexts of batch
 * (may be NULL or empty) on the tables. With digest true the contexts are
 * also copied to host memory, hashed, and the hash becomes the step's
 * application digest (compared with the leader's in the next step's header
 * and at checks), so ranks that derive different ring locations are
 * caught. Returns the shard step's status: KVS_ERR_DIVERGENCE (this rank
 * is out of step with the leader; carry on to the next check) still
 * computes the contexts. */
kvs_status kvs_node_step(kvs_node_t node, uint64_t step, const kvs_ring_batch *batch, bool digest,
                         kvs_node_step_result *out, kvs_error *err);

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
 * the tables the same way. */
kvs_status kvs_node_check(kvs_node_t node, kvs_shard_report *report, kvs_error *err);

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

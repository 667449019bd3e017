/* Step 1 over a cluster: the topologies of several nodes, in node order,
 * and their GPUs as one list for the planner (each GPU's `node` set, its
 * `index` its position in the list). Each node keeps its own GPUs, NUMA
 * nodes and packages; the rank layout keeps tensor-parallel groups inside
 * a node and fills nodes in order with pipeline stages
 * (kvs_rank_layout_cluster). One node is the single-machine case.
 *
 * NULL: the kvs_status calls refuse a NULL output, count list, label list,
 * own topology or GPU list (when it holds GPUs) with
 * KVS_ERR_INVALID_ARGUMENT naming it. The accessors read 0, "" or NULL
 * for a NULL cluster; kvs_cluster_own_node and kvs_cluster_local_index read
 * SIZE_MAX for a NULL cluster (and the latter for a GPU past the list). */
#ifndef KVS_PLAN_CLUSTER_H
#define KVS_PLAN_CLUSTER_H

#include <stddef.h>

#include "core/status.h"
#include "topology/gpu.h"
#include "topology/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nodes a cluster plan holds at most. */
#define KVS_MAX_NODES 64
/* A node label's bytes at most, with its NUL. */
#define KVS_NODE_LABEL_MAX 320

typedef struct kvs_cluster *kvs_cluster_t;

/* spec: what kvs_node_topology_open takes for one node, or a
 * comma-separated list of them (hwloc XML exports, "bundled"), one per
 * node in node order. n_nodes > 1 with a single spec is that node n_nodes
 * times; with a list it must equal the list's length (0: the list's).
 * An empty entry, more than KVS_MAX_NODES nodes, "live" or "auto" in a
 * list (a planner sees only its own machine live) are refused; a node that
 * does not load is refused naming it. note as kvs_node_topology_open's. */
kvs_status kvs_cluster_open(const char *spec, size_t n_nodes, kvs_cluster_t *out, char *note,
                            size_t note_cap, kvs_error *err);
void kvs_cluster_destroy(kvs_cluster_t cluster);

/* A cluster from GPU lists that were learned elsewhere (gathered from the
 * ranks, kvs_cluster_gather): node k holds gpu_counts[k] GPUs, the next
 * ones of gpus in order, and is called labels[k]. own_node (< n_nodes) is
 * the node this process runs on and own_topology its loaded topology,
 * taken over on success (on failure the caller keeps it); the other nodes
 * are known only by their GPUs (kvs_cluster_node is NULL for them). Each
 * GPU's index and node are rewritten to its place in the cluster. */
kvs_status kvs_cluster_from_lists(size_t n_nodes, const size_t *gpu_counts,
                                  const kvs_gpu_info *gpus, const char *const *labels,
                                  size_t own_node, kvs_topology_t own_topology, kvs_cluster_t *out,
                                  kvs_error *err);

size_t kvs_cluster_node_count(const struct kvs_cluster *cluster);
/* A node's loaded topology; NULL for a node known only by its GPU list. */
kvs_topology_t kvs_cluster_node(const struct kvs_cluster *cluster, size_t node);
/* A node's label: its topology's, or the one it was gathered under. */
const char *kvs_cluster_node_label(const struct kvs_cluster *cluster, size_t node);
size_t kvs_cluster_node_gpu_count(const struct kvs_cluster *cluster, size_t node);
/* The node this process runs on, when the cluster knows it (gathered);
 * SIZE_MAX for a cluster described by topologies, which any machine may
 * plan. */
size_t kvs_cluster_own_node(const struct kvs_cluster *cluster);
size_t kvs_cluster_gpu_count(const struct kvs_cluster *cluster);
const kvs_gpu_info *kvs_cluster_gpus(const struct kvs_cluster *cluster);
/* A GPU's position within its own node (its index in that node's list). */
size_t kvs_cluster_local_index(const struct kvs_cluster *cluster, size_t gpu);
/* The one node's label, or "N nodes: first, ..." */
const char *kvs_cluster_label(const struct kvs_cluster *cluster);

/* A host tier of host_bytes on every machine (given as `name`, e.g.
 * "--host-cache") against the memory of each machine whose topology is
 * loaded (kvs_topology_memory_bytes; one known only by its GPUs is not
 * checked): more than a machine has cannot be true
 * (kvs_memory_host_check's KVS_ERR_INVALID_ARGUMENT, naming both). A NULL
 * cluster or name is KVS_ERR_INVALID_ARGUMENT naming it. */
kvs_status kvs_cluster_host_tier_check(const struct kvs_cluster *cluster, const char *name,
                                       uint64_t host_bytes, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_CLUSTER_H */

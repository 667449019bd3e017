/* Step 1 over a cluster: the topologies of several hosts, in host order,
 * and their GPUs as one list for the planner (each GPU's `host` set, its
 * `index` its position in the list). Each host keeps its own GPUs, NUMA
 * nodes and packages; the rank layout keeps tensor-parallel groups inside
 * a host and fills hosts in order with pipeline stages
 * (kvs_rank_layout_cluster). One host is the single-machine case.
 *
 * NULL: the kvs_status calls refuse a NULL output, count list, label list,
 * own topology or GPU list (when it holds GPUs) with
 * KVS_ERR_INVALID_ARGUMENT naming it. The accessors read 0, "" or NULL
 * for a NULL cluster; kvs_cluster_own_host and kvs_cluster_local_index read
 * SIZE_MAX for a NULL cluster (and the latter for a GPU past the list). */
#ifndef KVS_PLAN_CLUSTER_H
#define KVS_PLAN_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "topology/gpu.h"
#include "topology/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nodes a cluster plan holds at most. */
#define KVS_MAX_HOSTS 64
/* A host label's bytes at most, with its NUL. */
#define KVS_HOST_LABEL_MAX 320

typedef struct kvs_cluster *kvs_cluster_t;

/* spec: what kvs_host_topology_open takes for one host, or a
 * comma-separated list of them (hwloc XML exports, "bundled"), one per
 * host in host order. n_hosts > 1 with a single spec is that host n_hosts
 * times; with a list it must equal the list's length (0: the list's).
 * An empty entry, more than KVS_MAX_HOSTS hosts, "live" or "auto" in a
 * list (a planner sees only its own machine live) are refused; a host that
 * does not load is refused naming it. note as kvs_host_topology_open's. */
kvs_status kvs_cluster_open(const char *spec, size_t n_hosts, kvs_cluster_t *out, char *note,
                            size_t note_cap, kvs_error *err);

/* The same, measuring free memory on every visible GPU of a live host only
 * when measure_free (a context on each, as kvs_topology_open_spec): a
 * planner measures them all (kvs_cluster_open), a serving rank none (it
 * measures its own GPU when it budgets, shard/node.c). */
kvs_status kvs_cluster_open_spec(const char *spec, size_t n_hosts, bool measure_free,
                                 kvs_cluster_t *out, char *note, size_t note_cap, kvs_error *err);
void kvs_cluster_destroy(kvs_cluster_t cluster);

/* A cluster from GPU lists that were learned elsewhere (gathered from the
 * ranks, kvs_cluster_gather): host k holds gpu_counts[k] GPUs, the next
 * ones of gpus in order, and is called labels[k]. own_host (< n_hosts) is
 * the host this process runs on and own_topology its loaded topology,
 * taken over on success (on failure the caller keeps it); the other hosts
 * are known only by their GPUs (kvs_cluster_host is NULL for them). Each
 * GPU's index and host are rewritten to its place in the cluster. */
kvs_status kvs_cluster_from_lists(size_t n_hosts, const size_t *gpu_counts,
                                  const kvs_gpu_info *gpus, const char *const *labels,
                                  size_t own_host, kvs_topology_t own_topology, kvs_cluster_t *out,
                                  kvs_error *err);

size_t kvs_cluster_host_count(const struct kvs_cluster *cluster);
/* A host's loaded topology; NULL for a host known only by its GPU list. */
kvs_topology_t kvs_cluster_host(const struct kvs_cluster *cluster, size_t host);
/* A host's label: its topology's, or the one it was gathered under. */
const char *kvs_cluster_host_label(const struct kvs_cluster *cluster, size_t host);
size_t kvs_cluster_host_gpu_count(const struct kvs_cluster *cluster, size_t host);
/* The host this process runs on, when the cluster knows it (gathered);
 * SIZE_MAX for a cluster described by topologies, which any machine may
 * plan. */
size_t kvs_cluster_own_host(const struct kvs_cluster *cluster);
size_t kvs_cluster_gpu_count(const struct kvs_cluster *cluster);
const kvs_gpu_info *kvs_cluster_gpus(const struct kvs_cluster *cluster);
/* A GPU's position within its own host (its index in that host's list). */
size_t kvs_cluster_local_index(const struct kvs_cluster *cluster, size_t gpu);
/* The one host's label, or "N nodes: first, ..." */
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

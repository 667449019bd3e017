#include "plan/rank_layout.h"

#include <stdlib.h>
#include <string.h>

/* The GPU list sorted by host, package (and NUMA node), then position,
 * for first_with: qsort's comparator reads the list through this. */
typedef struct by_place {
  const kvs_gpu_info *gpus;
  bool by_numa;
} by_place;

static _Thread_local by_place g_place;

static int compare_place(const void *a, const void *b) {
  size_t i = *(const size_t *)a, j = *(const size_t *)b;
  const kvs_gpu_info *x = &g_place.gpus[i], *y = &g_place.gpus[j];
  if (x->host != y->host) return x->host < y->host ? -1 : 1;
  if (x->package != y->package) return x->package < y->package ? -1 : 1;
  if (g_place.by_numa && x->numa_node != y->numa_node) return x->numa_node < y->numa_node ? -1 : 1;
  return i < j ? -1 : i > j;
}

/* first[i]: the position of the first GPU (lowest list position) sharing
 * GPU i's host and package (and NUMA node), for every i at once: the list
 * sorted by that key and position, each run's head (O(n log n); a scan
 * per GPU made a 2,400-GPU cluster's layout 6 million comparisons).
 * order is scratch of n. */
static void first_with(const kvs_gpu_info *gpus, size_t n, bool by_numa, size_t *order,
                       size_t *first) {
  for (size_t i = 0; i < n; i++) order[i] = i;
  g_place = (by_place){gpus, by_numa};
  qsort(order, n, sizeof *order, compare_place);
  size_t head = 0;
  for (size_t k = 0; k < n; k++) {
    const kvs_gpu_info *x = &gpus[order[k]], *h = &gpus[order[head]];
    bool same = x->host == h->host && x->package == h->package &&
                (!by_numa || x->numa_node == h->numa_node);
    if (!same) head = k;
    first[order[k]] = order[head];
  }
}

typedef struct order_key {
  size_t host;          /* the host (machine) holding it */
  size_t package_first; /* the package's lowest GPU position */
  size_t numa_first;    /* the NUMA node's lowest GPU position */
  size_t position;
} order_key;

static int compare_keys(const void *a, const void *b) {
  const order_key *x = a, *y = b;
  if (x->host != y->host) return x->host < y->host ? -1 : 1;
  if (x->package_first != y->package_first) return x->package_first < y->package_first ? -1 : 1;
  if (x->numa_first != y->numa_first) return x->numa_first < y->numa_first ? -1 : 1;
  if (x->position != y->position) return x->position < y->position ? -1 : 1;
  return 0;
}

/* Appends the full groups of tp cut from run[0..len) to groups, and the
 * remainder (in order) to rest. */
static void cut_groups(const size_t *run, size_t len, size_t tp, size_t *groups, size_t *n_grouped,
                       size_t *rest, size_t *n_rest) {
  size_t full = len / tp * tp;
  memcpy(groups + *n_grouped, run, full * sizeof *run);
  *n_grouped += full;
  memcpy(rest + *n_rest, run + full, (len - full) * sizeof *run);
  *n_rest += len - full;
}

kvs_status kvs_rank_layout(const kvs_gpu_info *gpus, size_t n_gpus, size_t tp, size_t pp,
                           kvs_rank_slot *out, kvs_error *err) {
  return kvs_rank_layout_cluster(gpus, n_gpus, tp, pp, false, out, NULL, err);
}

kvs_status kvs_rank_layout_cluster(const kvs_gpu_info *gpus, size_t n_gpus, size_t tp, size_t pp,
                                   bool allow_cross_host_tp, kvs_rank_slot *out, bool *crossed,
                                   kvs_error *err) {
  if (gpus == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: gpus is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (n_gpus == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s: n_gpus is 0: no GPUs to lay ranks out on", __func__);
  }
  if (tp == 0 || pp == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tp %zu x pp %zu: both must be at least 1",
                         tp, pp);
  }
  if (tp > n_gpus || pp > n_gpus || tp * pp > n_gpus) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "tp %zu x pp %zu = %zu ranks, more ranks than the %zu GPUs", tp, pp,
                         tp * pp, n_gpus);
  }
  if (n_gpus % (tp * pp) != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "tp %zu x pp %zu = %zu ranks does not divide the %zu GPUs into whole "
                         "replicas",
                         tp, pp, tp * pp, n_gpus);
  }
  order_key *keys = calloc(n_gpus, sizeof *keys);
  size_t *groups = calloc(n_gpus, sizeof *groups);
  size_t *package_rest = calloc(n_gpus, sizeof *package_rest);
  size_t *node_rest = calloc(n_gpus, sizeof *node_rest);
  size_t *run = calloc(n_gpus, sizeof *run);
  size_t *host_rest = calloc(n_gpus, sizeof *host_rest);
  size_t *package_first = calloc(n_gpus, sizeof *package_first);
  size_t *numa_first = calloc(n_gpus, sizeof *numa_first);
  kvs_status status = KVS_OK;
  if (!keys || !groups || !package_rest || !node_rest || !run || !host_rest || !package_first ||
      !numa_first) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory for the rank layout");
    goto done;
  }
  first_with(gpus, n_gpus, false, run, package_first);
  first_with(gpus, n_gpus, true, run, numa_first);
  for (size_t i = 0; i < n_gpus; i++) {
    keys[i].host = gpus[i].host;
    keys[i].package_first = package_first[i];
    keys[i].numa_first = numa_first[i];
    keys[i].position = i;
  }
  qsort(keys, n_gpus, sizeof *keys, compare_keys);

  /* Walk hosts, packages within them and NUMA nodes within those,
   * in locality order: whole groups from a NUMA node first, a package's
   * leftovers next, a machine's leftovers then, and only the machines'
   * leftovers across the network. */
  size_t n_grouped = 0, n_host_rest = 0;
  size_t i = 0;
  while (i < n_gpus) {
    size_t host = keys[i].host;
    size_t n_package_rest = 0;
    while (i < n_gpus && keys[i].host == host) {
      size_t pkg = keys[i].package_first;
      size_t n_node_rest = 0;
      while (i < n_gpus && keys[i].host == host && keys[i].package_first == pkg) {
        size_t numa = keys[i].numa_first, len = 0;
        while (i < n_gpus && keys[i].host == host && keys[i].package_first == pkg &&
               keys[i].numa_first == numa) {
          run[len++] = keys[i++].position;
        }
        cut_groups(run, len, tp, groups, &n_grouped, node_rest, &n_node_rest);
      }
      cut_groups(node_rest, n_node_rest, tp, groups, &n_grouped, package_rest, &n_package_rest);
    }
    cut_groups(package_rest, n_package_rest, tp, groups, &n_grouped, host_rest, &n_host_rest);
  }
  /* Groups across hosts: n_host_rest is a multiple of tp since every other
   * group was whole and tp divides the GPU count. */
  if (n_host_rest > 0 && !allow_cross_host_tp) {
    size_t first_rank = n_grouped;
    status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "tp %zu: the tensor-parallel group of ranks %zu-%zu spans nodes %zu "
                           "and %zu (a node holds too few GPUs for it); it would all-reduce "
                           "across the network every layer: pick a tp that fits in a node, or "
                           "allow it (--allow-cross-node-tp)",
                           tp, first_rank, first_rank + tp - 1, gpus[host_rest[0]].host,
                           gpus[host_rest[tp - 1]].host);
    goto done;
  }
  memcpy(groups + n_grouped, host_rest, n_host_rest * sizeof *groups);
  if (crossed != NULL) *crossed = n_host_rest > 0;

  for (size_t g = 0; g < n_gpus / tp; g++) {
    for (size_t t = 0; t < tp; t++) {
      size_t rank = g * tp + t;
      out[rank].rank = rank;
      out[rank].replica = g / pp;
      out[rank].pp_stage = g % pp;
      out[rank].tp_rank = t;
      out[rank].gpu = groups[rank];
    }
  }
done:
  free(keys);
  free(groups);
  free(package_rest);
  free(node_rest);
  free(run);
  free(host_rest);
  free(package_first);
  free(numa_first);
  return status;
}

#include "plan/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/memory_inputs.h"
#include "plan/node_setup.h"

#define LABEL_MAX 512
#define SPEC_MAX 4096

struct kvs_cluster {
  size_t n_hosts;
  kvs_topology_t hosts[KVS_MAX_HOSTS]; /* NULL: known by its GPUs only */
  size_t host_gpus[KVS_MAX_HOSTS];
  char host_labels[KVS_MAX_HOSTS][KVS_HOST_LABEL_MAX];
  size_t own_host; /* SIZE_MAX: not known */
  size_t n_gpus;
  kvs_gpu_info *gpus;
  char label[LABEL_MAX];
};

void kvs_cluster_destroy(kvs_cluster_t c) {
  if (c == NULL) return;
  for (size_t i = 0; i < c->n_hosts; i++) kvs_topology_destroy(c->hosts[i]);
  free(c->gpus);
  free(c);
}

/* Splits spec at commas into parts[0..*n) (pointers into buf). */
static kvs_status split_list(const char *spec, char *buf, char **parts, size_t *n, kvs_error *err) {
  if (strlen(spec) >= SPEC_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "topology list %.64s... is too long", spec);
  }
  strcpy(buf, spec);
  *n = 0;
  for (char *p = buf;;) {
    char *comma = strchr(p, ',');
    if (comma != NULL) *comma = '\0';
    if (*n == KVS_MAX_HOSTS) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "topology list names more than %d nodes",
                           KVS_MAX_HOSTS);
    }
    if (p[0] == '\0') {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "topology list entry %zu is empty: give one topology per node, "
                           "separated by commas",
                           *n);
    }
    parts[(*n)++] = p;
    if (comma == NULL) return KVS_OK;
    p = comma + 1;
  }
}

/* Numbers the GPUs in cluster order, marks their hosts, and writes the
 * cluster's label from the hosts'. */
static void finish(struct kvs_cluster *c) {
  size_t at = 0;
  for (size_t i = 0; i < c->n_hosts; i++) {
    for (size_t k = 0; k < c->host_gpus[i]; k++, at++) {
      c->gpus[at].host = i;
      c->gpus[at].index = at;
    }
  }
  if (c->n_hosts == 1) {
    snprintf(c->label, sizeof c->label, "%s", c->host_labels[0]);
    return;
  }
  int n = snprintf(c->label, sizeof c->label, "%zu nodes: %s", c->n_hosts, c->host_labels[0]);
  for (size_t i = 1; i < c->n_hosts && n > 0 && (size_t)n < sizeof c->label; i++) {
    n += snprintf(c->label + n, sizeof c->label - (size_t)n, ", %s", c->host_labels[i]);
  }
}

kvs_status kvs_cluster_open(const char *spec, size_t n_hosts, kvs_cluster_t *out, char *note,
                            size_t note_cap, kvs_error *err) {
  return kvs_cluster_open_spec(spec, n_hosts, true, out, note, note_cap, err);
}

kvs_status kvs_cluster_open_spec(const char *spec, size_t n_hosts, bool measure_free,
                                 kvs_cluster_t *out, char *note, size_t note_cap, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (note != NULL && note_cap > 0) note[0] = '\0';
  if (n_hosts > KVS_MAX_HOSTS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%zu nodes: at most %d are planned",
                         n_hosts, KVS_MAX_HOSTS);
  }
  char *buf = malloc(SPEC_MAX);
  char *parts[KVS_MAX_HOSTS];
  struct kvs_cluster *c = calloc(1, sizeof *c);
  kvs_status status = KVS_OK;
  size_t n_parts = 1;
  if (buf == NULL || c == NULL) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a cluster");
    goto fail;
  }
  if (spec != NULL && strchr(spec, ',') != NULL) {
    if ((status = split_list(spec, buf, parts, &n_parts, err)) != KVS_OK) goto fail;
    for (size_t i = 0; i < n_parts; i++) {
      if (strcmp(parts[i], "live") == 0 || strcmp(parts[i], "auto") == 0) {
        status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                               "topology list entry %zu is '%s': a planner sees only its own "
                               "machine live; give each node's hwloc export",
                               i, parts[i]);
        goto fail;
      }
    }
    if (n_hosts > 1 && n_hosts != n_parts) {
      status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                             "%zu nodes, but the topology list names %zu", n_hosts, n_parts);
      goto fail;
    }
  } else {
    parts[0] = (char *)spec;
  }
  c->n_hosts = n_parts > 1 ? n_parts : (n_hosts > 0 ? n_hosts : 1);
  for (size_t i = 0; i < c->n_hosts; i++) {
    const char *part = parts[n_parts > 1 ? i : 0];
    char why[768] = "";
    if ((status = kvs_topology_open_spec(part, measure_free, &c->hosts[i], i == 0 ? why : NULL,
                                         i == 0 ? sizeof why : 0, err)) != KVS_OK) {
      if (c->n_hosts > 1 && err != NULL) {
        kvs_error inner = *err;
        kvs_error_set(err, status, "node %zu: %s", i, inner.message);
      }
      goto fail;
    }
    if (i == 0 && note != NULL && note_cap > 0) snprintf(note, note_cap, "%s", why);
    c->n_gpus += kvs_topology_gpu_count(c->hosts[i]);
  }
  c->gpus = calloc(c->n_gpus > 0 ? c->n_gpus : 1, sizeof *c->gpus);
  if (c->gpus == NULL) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu GPUs", c->n_gpus);
    goto fail;
  }
  size_t at = 0;
  for (size_t i = 0; i < c->n_hosts; i++) {
    c->host_gpus[i] = kvs_topology_gpu_count(c->hosts[i]);
    snprintf(c->host_labels[i], KVS_HOST_LABEL_MAX, "%s", kvs_topology_label(c->hosts[i]));
    const kvs_gpu_info *g = kvs_topology_gpus(c->hosts[i]);
    for (size_t k = 0; k < c->host_gpus[i]; k++) c->gpus[at++] = g[k];
  }
  finish(c);
  c->own_host = SIZE_MAX; /* described: any machine may plan it */
  free(buf);
  *out = c;
  return KVS_OK;
fail:
  free(buf);
  kvs_cluster_destroy(c);
  return status;
}

kvs_status kvs_cluster_from_lists(size_t n_hosts, const size_t *gpu_counts,
                                  const kvs_gpu_info *gpus, const char *const *labels,
                                  size_t own_host, kvs_topology_t own_topology, kvs_cluster_t *out,
                                  kvs_error *err) {
  if (gpu_counts == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: gpu_counts is NULL", __func__);
  }
  if (labels == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: labels is NULL", __func__);
  }
  if (own_topology == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: own_topology is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (n_hosts == 0 || n_hosts > KVS_MAX_HOSTS || own_host >= n_hosts) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%zu nodes with this process on node %zu: 1..%d nodes, and the own "
                         "node among them",
                         n_hosts, own_host, KVS_MAX_HOSTS);
  }
  size_t total = 0;
  for (size_t i = 0; i < n_hosts; i++) {
    if (gpu_counts[i] > SIZE_MAX / sizeof(kvs_gpu_info) - total) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "node %zu: %zu GPUs is too many", i,
                           gpu_counts[i]);
    }
    total += gpu_counts[i];
  }
  if (total > 0 && gpus == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s: gpus is NULL but gpu_counts list %zu GPUs", __func__, total);
  }
  if (gpu_counts[own_host] != kvs_topology_gpu_count(own_topology)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "node %zu lists %zu GPUs, but this process's topology '%s' has %zu",
                         own_host, gpu_counts[own_host], kvs_topology_label(own_topology),
                         kvs_topology_gpu_count(own_topology));
  }
  struct kvs_cluster *c = calloc(1, sizeof *c);
  if (c != NULL) c->gpus = calloc(total > 0 ? total : 1, sizeof *c->gpus);
  if (c == NULL || c->gpus == NULL) {
    kvs_cluster_destroy(c);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a cluster of %zu GPUs", total);
  }
  c->n_hosts = n_hosts;
  c->n_gpus = total;
  if (total > 0) memcpy(c->gpus, gpus, total * sizeof *c->gpus);
  for (size_t i = 0; i < n_hosts; i++) {
    c->host_gpus[i] = gpu_counts[i];
    snprintf(c->host_labels[i], KVS_HOST_LABEL_MAX, "%s", labels[i] != NULL ? labels[i] : "");
  }
  finish(c);
  c->own_host = own_host;
  c->hosts[own_host] = own_topology;
  *out = c;
  return KVS_OK;
}

/* The accessors read 0, "" or NULL for a NULL cluster (own host and a
 * GPU's local index: SIZE_MAX, "none"). */
size_t kvs_cluster_host_count(const struct kvs_cluster *c) { return c != NULL ? c->n_hosts : 0; }
kvs_topology_t kvs_cluster_host(const struct kvs_cluster *c, size_t host) {
  return c != NULL && host < c->n_hosts ? c->hosts[host] : NULL;
}
const char *kvs_cluster_host_label(const struct kvs_cluster *c, size_t host) {
  return c != NULL && host < c->n_hosts ? c->host_labels[host] : "";
}
size_t kvs_cluster_host_gpu_count(const struct kvs_cluster *c, size_t host) {
  return c != NULL && host < c->n_hosts ? c->host_gpus[host] : 0;
}
size_t kvs_cluster_own_host(const struct kvs_cluster *c) {
  return c != NULL ? c->own_host : SIZE_MAX;
}
size_t kvs_cluster_gpu_count(const struct kvs_cluster *c) { return c != NULL ? c->n_gpus : 0; }
const kvs_gpu_info *kvs_cluster_gpus(const struct kvs_cluster *c) {
  return c != NULL ? c->gpus : NULL;
}
const char *kvs_cluster_label(const struct kvs_cluster *c) { return c != NULL ? c->label : ""; }
size_t kvs_cluster_local_index(const struct kvs_cluster *c, size_t gpu) {
  /* A GPU past the list has no place in any host. */
  if (c == NULL || gpu >= c->n_gpus) return SIZE_MAX;
  size_t before = 0;
  for (size_t i = 0; i < c->n_hosts && i < c->gpus[gpu].host; i++) before += c->host_gpus[i];
  return gpu - before;
}

kvs_status kvs_cluster_host_tier_check(const struct kvs_cluster *c, const char *name,
                                       uint64_t host_bytes, kvs_error *err) {
  if (c == NULL || name == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         c == NULL ? "cluster" : "name");
  }
  size_t n = kvs_cluster_host_count(c);
  uint64_t memory[KVS_MAX_HOSTS] = {0};
  const char *labels[KVS_MAX_HOSTS] = {NULL};
  for (size_t k = 0; k < n && k < KVS_MAX_HOSTS; k++) {
    memory[k] = kvs_topology_memory_bytes(kvs_cluster_host(c, k));
    labels[k] = kvs_cluster_host_label(c, k);
  }
  return kvs_memory_host_check(name, host_bytes, memory, labels,
                               n < KVS_MAX_HOSTS ? n : KVS_MAX_HOSTS, err);
}

#include "shard/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/node_setup.h"

#define LABEL_MAX 512
#define SPEC_MAX 4096

struct kvs_cluster {
  size_t n_nodes;
  kvs_topology_t nodes[KVS_MAX_NODES];
  size_t n_gpus;
  kvs_gpu_info *gpus;
  char label[LABEL_MAX];
};

void kvs_cluster_destroy(kvs_cluster_t c) {
  if (c == NULL) return;
  for (size_t i = 0; i < c->n_nodes; i++) kvs_topology_destroy(c->nodes[i]);
  free(c->gpus);
  free(c);
}

/* Splits spec at commas into parts[0..*n) (pointers into buf). */
static kvs_status split_list(const char *spec, char *buf, char **parts, size_t *n,
                             kvs_error *err) {
  if (strlen(spec) >= SPEC_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "topology list %.64s... is too long",
                         spec);
  }
  strcpy(buf, spec);
  *n = 0;
  for (char *p = buf;;) {
    char *comma = strchr(p, ',');
    if (comma != NULL) *comma = '\0';
    if (*n == KVS_MAX_NODES) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "topology list names more than %d nodes", KVS_MAX_NODES);
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

kvs_status kvs_cluster_open(const char *spec, size_t n_nodes, kvs_cluster_t *out, char *note,
                            size_t note_cap, kvs_error *err) {
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "output is NULL");
  if (note != NULL && note_cap > 0) note[0] = '\0';
  if (n_nodes > KVS_MAX_NODES) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%zu nodes: at most %d are planned",
                         n_nodes, KVS_MAX_NODES);
  }
  char *buf = malloc(SPEC_MAX);
  char *parts[KVS_MAX_NODES];
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
    if (n_nodes > 1 && n_nodes != n_parts) {
      status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                             "%zu nodes, but the topology list names %zu", n_nodes, n_parts);
      goto fail;
    }
  } else {
    parts[0] = (char *)spec;
  }
  c->n_nodes = n_parts > 1 ? n_parts : (n_nodes > 0 ? n_nodes : 1);
  for (size_t i = 0; i < c->n_nodes; i++) {
    const char *part = parts[n_parts > 1 ? i : 0];
    char why[768] = "";
    if ((status = kvs_node_topology_open(part, &c->nodes[i], i == 0 ? why : NULL,
                                         i == 0 ? sizeof why : 0, err)) != KVS_OK) {
      if (c->n_nodes > 1 && err != NULL) {
        kvs_error inner = *err;
        kvs_error_set(err, status, "node %zu: %s", i, inner.message);
      }
      goto fail;
    }
    if (i == 0 && note != NULL && note_cap > 0) snprintf(note, note_cap, "%s", why);
    c->n_gpus += kvs_topology_gpu_count(c->nodes[i]);
  }
  c->gpus = calloc(c->n_gpus > 0 ? c->n_gpus : 1, sizeof *c->gpus);
  if (c->gpus == NULL) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu GPUs", c->n_gpus);
    goto fail;
  }
  size_t at = 0;
  for (size_t i = 0; i < c->n_nodes; i++) {
    const kvs_gpu_info *g = kvs_topology_gpus(c->nodes[i]);
    for (size_t k = 0; k < kvs_topology_gpu_count(c->nodes[i]); k++, at++) {
      c->gpus[at] = g[k];
      c->gpus[at].node = i;
      c->gpus[at].index = at;
    }
  }
  if (c->n_nodes == 1) {
    snprintf(c->label, sizeof c->label, "%s", kvs_topology_label(c->nodes[0]));
  } else {
    int n = snprintf(c->label, sizeof c->label, "%zu nodes: %s", c->n_nodes,
                     kvs_topology_label(c->nodes[0]));
    for (size_t i = 1; i < c->n_nodes && n > 0 && (size_t)n < sizeof c->label; i++) {
      n += snprintf(c->label + n, sizeof c->label - (size_t)n, ", %s",
                    kvs_topology_label(c->nodes[i]));
    }
  }
  free(buf);
  *out = c;
  return KVS_OK;
fail:
  free(buf);
  kvs_cluster_destroy(c);
  return status;
}

size_t kvs_cluster_node_count(const struct kvs_cluster *c) { return c->n_nodes; }
kvs_topology_t kvs_cluster_node(const struct kvs_cluster *c, size_t node) {
  return node < c->n_nodes ? c->nodes[node] : NULL;
}
size_t kvs_cluster_gpu_count(const struct kvs_cluster *c) { return c->n_gpus; }
const kvs_gpu_info *kvs_cluster_gpus(const struct kvs_cluster *c) { return c->gpus; }
const char *kvs_cluster_label(const struct kvs_cluster *c) { return c->label; }
size_t kvs_cluster_local_index(const struct kvs_cluster *c, size_t gpu) {
  size_t before = 0;
  for (size_t i = 0; i < c->n_nodes && i < c->gpus[gpu].node; i++) {
    before += kvs_topology_gpu_count(c->nodes[i]);
  }
  return gpu - before;
}

#include "topology/binding.h"

#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <string.h>

static void report_init(kvs_binding_report *r) { memset(r, 0, sizeof *r); }

/* Appends one reason to the report ("; " between them). */
static void add_reason(kvs_binding_report *r, const char *what, const char *why) {
  size_t used = strlen(r->reason);
  snprintf(r->reason + used, sizeof r->reason - used, "%s%s: %s", used > 0 ? "; " : "", what, why);
}

/* Binds the calling thread to cpuset and, softly (preferred, not
 * strict: a full node spills rather than failing), its memory policy to
 * nodeset. */
static void bind_sets(kvs_topology_t topology, hwloc_const_cpuset_t cpuset,
                      hwloc_const_nodeset_t nodeset, kvs_binding_report *r) {
  hwloc_topology_t h = kvs_topology_hwloc(topology);
  if (!kvs_topology_is_this_system(topology)) {
    add_reason(r, "not bound", "the topology was loaded from XML and is not this machine");
    return;
  }
  const struct hwloc_topology_support *support = hwloc_topology_get_support(h);
  if (cpuset == NULL || hwloc_bitmap_iszero(cpuset)) {
    add_reason(r, "CPUs not bound", "no local CPUs are known");
  } else if (!support->cpubind->set_thisthread_cpubind) {
    add_reason(r, "CPUs not bound", "hwloc cannot bind threads on this system");
  } else if (hwloc_set_cpubind(h, cpuset, HWLOC_CPUBIND_THREAD) != 0) {
    add_reason(r, "CPUs not bound", strerror(errno));
  } else {
    r->cpu_bound = true;
    hwloc_bitmap_list_snprintf(r->cpuset, sizeof r->cpuset, cpuset);
  }
  if (nodeset == NULL || hwloc_bitmap_iszero(nodeset)) {
    add_reason(r, "memory not bound", "no local NUMA node is known");
  } else if (!support->membind->set_thisthread_membind || !support->membind->bind_membind) {
    add_reason(r, "memory not bound", "hwloc cannot bind memory on this system");
  } else if (hwloc_set_membind(h, nodeset, HWLOC_MEMBIND_BIND,
                               HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0) {
    add_reason(r, "memory not bound", strerror(errno));
  } else {
    r->memory_bound = true;
  }
}

kvs_status kvs_topology_bind_thread(kvs_topology_t topology, size_t gpu_index,
                                    kvs_binding_report *report, kvs_error *err) {
  if (topology == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: topology is NULL", __func__);
  }
  if (report == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: report is NULL", __func__);
  }
  if (gpu_index >= kvs_topology_gpu_count(topology)) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "GPU %zu: the topology has %zu GPUs", gpu_index,
                         kvs_topology_gpu_count(topology));
  }
  report_init(report);
  hwloc_obj_t local = kvs_topology_gpu_locality(topology, gpu_index);
  if (local == NULL) {
    add_reason(report, "not bound", "the GPU has no PCI object in the topology");
    return KVS_OK;
  }
  bind_sets(topology, local->cpuset, local->nodeset, report);
  return KVS_OK;
}

kvs_status kvs_topology_bind_thread_numa(kvs_topology_t topology, unsigned numa_os_index,
                                         kvs_binding_report *report, kvs_error *err) {
  if (topology == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: topology is NULL", __func__);
  }
  if (report == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: report is NULL", __func__);
  }
  hwloc_obj_t node =
      hwloc_get_numanode_obj_by_os_index(kvs_topology_hwloc(topology), numa_os_index);
  if (node == NULL) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "NUMA node %u is not in the topology",
                         numa_os_index);
  }
  report_init(report);
  bind_sets(topology, node->cpuset, node->nodeset, report);
  return KVS_OK;
}

kvs_status kvs_topology_alloc_near(kvs_topology_t topology, size_t gpu_index, size_t bytes,
                                   void **out, kvs_binding_report *report, kvs_error *err) {
  if (topology == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: topology is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (report == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: report is NULL", __func__);
  }
  if (gpu_index >= kvs_topology_gpu_count(topology)) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "GPU %zu: the topology has %zu GPUs", gpu_index,
                         kvs_topology_gpu_count(topology));
  }
  if (bytes == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "cannot allocate 0 bytes near GPU %zu",
                         gpu_index);
  }
  kvs_binding_report r;
  report_init(&r);
  hwloc_topology_t h = kvs_topology_hwloc(topology);
  hwloc_obj_t local = kvs_topology_gpu_locality(topology, gpu_index);
  void *ptr = NULL;
  if (!kvs_topology_is_this_system(topology)) {
    add_reason(&r, "memory not bound", "the topology was loaded from XML and is not this machine");
  } else if (local == NULL || local->nodeset == NULL || hwloc_bitmap_iszero(local->nodeset)) {
    add_reason(&r, "memory not bound", "the GPU has no known NUMA node");
  } else if (!hwloc_topology_get_support(h)->membind->alloc_membind) {
    add_reason(&r, "memory not bound", "hwloc cannot bind allocations on this system");
  } else {
    ptr =
        hwloc_alloc_membind(h, bytes, local->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
    if (ptr != NULL) {
      r.memory_bound = true;
    } else {
      add_reason(&r, "memory not bound", strerror(errno));
    }
  }
  if (ptr == NULL) ptr = hwloc_alloc(h, bytes);
  if (ptr == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "cannot allocate %zu bytes of host memory", bytes);
  }
  *out = ptr;
  *report = r;
  return KVS_OK;
}

void kvs_topology_free_near(kvs_topology_t topology, void *ptr, size_t bytes) {
  if (topology == NULL || ptr == NULL) return;
  hwloc_free(kvs_topology_hwloc(topology), ptr, bytes);
}

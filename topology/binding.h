/* Host-side locality of a rank: run its threads and place its host
 * buffers (pinned staging, the host mirror of the window table) on the
 * NUMA node of its GPU, so PCIe transfers do not cross the socket link.
 *
 * Binding is best effort by design: a topology loaded from XML is not
 * this machine, a container may forbid it, an OS may not support it. In
 * every such case the call still succeeds (KVS_OK) and the report says
 * what was bound and why the rest was not; only bad arguments and a
 * failed allocation are errors. A NULL topology, report or output is
 * KVS_ERR_INVALID_ARGUMENT naming it. */
#ifndef KVS_TOPOLOGY_BINDING_H
#define KVS_TOPOLOGY_BINDING_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "topology/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_BINDING_REASON_MAX 256

typedef struct kvs_binding_report {
  bool cpu_bound;    /* the calling thread now runs on the local CPUs */
  bool memory_bound; /* its allocations (or this buffer) are on the local node(s) */
  char cpuset[KVS_CPUSET_STRING_MAX];  /* the CPUs bound to, list form; "" if none */
  char reason[KVS_BINDING_REASON_MAX]; /* why something was not bound; "" if all was */
} kvs_binding_report;

/* Binds the calling thread's CPUs and memory policy to the locality of
 * GPU gpu_index (its local CPUs and NUMA node(s)). An index past the
 * GPUs is KVS_ERR_OUT_OF_RANGE. What binding was refused is left as it
 * was and named in the report. */
kvs_status kvs_topology_bind_thread(kvs_topology_t topology, size_t gpu_index,
                                    kvs_binding_report *report, kvs_error *err);

/* The same for a NUMA node given by os index (a rank whose GPU has no
 * known locality may still be pinned to a node by the caller). A node
 * not in the topology is KVS_ERR_OUT_OF_RANGE. */
kvs_status kvs_topology_bind_thread_numa(kvs_topology_t topology, unsigned numa_os_index,
                                         kvs_binding_report *report, kvs_error *err);

/* Allocates bytes of host memory bound to GPU gpu_index's NUMA node(s).
 * Where binding is not supported the memory is allocated unbound (page
 * aligned all the same) and the report says so. Free with
 * kvs_topology_free_near. bytes 0 is KVS_ERR_INVALID_ARGUMENT; no memory
 * KVS_ERR_NO_MEMORY with *out untouched. */
kvs_status kvs_topology_alloc_near(kvs_topology_t topology, size_t gpu_index, size_t bytes,
                                   void **out, kvs_binding_report *report, kvs_error *err);

/* Frees memory from kvs_topology_alloc_near; NULL is accepted. */
void kvs_topology_free_near(kvs_topology_t topology, void *ptr, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOPOLOGY_BINDING_H */

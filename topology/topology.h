/* The machine as the planner sees it: hwloc's tree (live or from XML)
 * with its PCI and OS devices kept, and the GPUs found in it.
 *
 * GPUs are NVIDIA PCI functions of class display/3D in PCI bus id order,
 * the CUDA order under CUDA_DEVICE_ORDER=PCI_BUS_ID; NVSwitch chips are
 * bridges, not GPUs. On the running machine, when CUDA sees devices,
 * the GPU list is CUDA's instead (index = CUDA ordinal, so
 * CUDA_VISIBLE_DEVICES is honoured), each device matched to its hwloc
 * PCI object by bus id as hwloc/cudart.h does, with its free memory.
 * Each GPU's locality comes from its first non-I/O ancestor: that
 * object's cpuset, its NUMA node when it has exactly one, its package.
 *
 * NULL: kvs_topology_create refuses a NULL source (or a source without
 * its iface, prepare or is_this_system) and a NULL out with
 * KVS_ERR_INVALID_ARGUMENT naming it; the accessors read 0, false, ""
 * (label, cuda note) or NULL for a NULL topology. */
#ifndef KVS_TOPOLOGY_TOPOLOGY_H
#define KVS_TOPOLOGY_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "topology/gpu.h"
#include "topology/source.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_topology *kvs_topology_t;

/* Load options: a versioned config, initialise with the macro. */
typedef struct kvs_topology_options {
  size_t size; /* sizeof(kvs_topology_options) */
  /* Ask CUDA for the visible devices when the source is this machine
   * (bus ids, names and total memory: no CUDA context is created). */
  bool use_cuda;
  /* Also measure every visible GPU's free memory, which creates this
   * process's context on each: a planner's choice (kvplan), never a
   * serving rank's, which measures its own GPU only. */
  bool measure_free;
} kvs_topology_options;

#define KVS_TOPOLOGY_OPTIONS_INIT \
  { sizeof(kvs_topology_options), true, true }

/* Loads the topology from source (options NULL: the defaults) and finds
 * its GPUs. A topology without GPUs loads (gpu count 0). A source that
 * cannot be read or parsed is KVS_ERR_IO / KVS_ERR_PARSE naming it.
 * CUDA being absent is not an error: the hwloc GPU list is kept and
 * kvs_topology_cuda_note says why. A source that says it is this machine
 * but loads what hwloc calls another one (hwloc_topology_is_thissystem 0:
 * its discovery was replaced) is KVS_ERR_UNSUPPORTED naming hwloc's
 * backend; the live source's own refusals are kvs_topology_source_live's.
 * *out is written only on success. */
kvs_status kvs_topology_create(const kvs_topology_source *source,
                               const kvs_topology_options *options, kvs_topology_t *out,
                               kvs_error *err);

/* Frees the topology; NULL is accepted. */
void kvs_topology_destroy(kvs_topology_t topology);

size_t kvs_topology_gpu_count(kvs_topology_t topology);

/* The GPU at list position index (gpu->index == index), NULL past the
 * end. Valid until the topology is destroyed. */
const kvs_gpu_info *kvs_topology_gpu(kvs_topology_t topology, size_t index);

/* All GPUs as an array of kvs_topology_gpu_count entries. */
const kvs_gpu_info *kvs_topology_gpus(kvs_topology_t topology);

/* Whether the topology is the running machine (live): binding and CUDA
 * matching apply only then. */
bool kvs_topology_is_this_system(kvs_topology_t topology);

/* The source's label ("live", a path, the bundled description). */
const char *kvs_topology_label(kvs_topology_t topology);

/* Whether the GPU list came from CUDA (live, with devices visible). */
bool kvs_topology_cuda_used(kvs_topology_t topology);

/* Why CUDA was not used ("" when it was): not this machine, disabled by
 * the options, or the runtime's error ("no CUDA-capable device"). */
const char *kvs_topology_cuda_note(kvs_topology_t topology);

/* NUMA nodes and packages in the topology. */
size_t kvs_topology_numa_count(kvs_topology_t topology);
size_t kvs_topology_package_count(kvs_topology_t topology);

/* The machine's memory as hwloc reports it (the sum over its NUMA nodes:
 * measured live, as exported in an XML); 0 for NULL or where it is not
 * known. */
uint64_t kvs_topology_memory_bytes(kvs_topology_t topology);

/* The hwloc topology, borrowed (for binding and callers that walk it).
 * Typed as hwloc's struct so this header does not need hwloc.h. */
struct hwloc_topology *kvs_topology_hwloc(kvs_topology_t topology);

/* The non-I/O object a GPU is local to (an hwloc_obj_t), or NULL when
 * the GPU is not in the hwloc tree. */
struct hwloc_obj *kvs_topology_gpu_locality(kvs_topology_t topology, size_t index);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOPOLOGY_TOPOLOGY_H */

/* Compiles every public header of topology/ as pure C11 (no C++ leaks
 * into them) and links one symbol of each module. */
#include "topology/binding.h"
#include "topology/cuda_probe.h"
#include "topology/gpu.h"
#include "topology/layout.h"
#include "topology/node_plan.h"
#include "topology/source.h"
#include "topology/stage_split.h"
#include "topology/topology.h"

typedef kvs_status (*layout_fn)(const kvs_gpu_info *, size_t, size_t, size_t, kvs_rank_slot *,
                                kvs_error *);
typedef kvs_status (*bind_fn)(kvs_topology_t, size_t, kvs_binding_report *, kvs_error *);
typedef kvs_status (*probe_fn)(kvs_cuda_device *, size_t, size_t *, kvs_error *);
typedef kvs_status (*window_fn)(const kvs_split_request *, uint64_t, uint64_t *, kvs_error *);

/* Taking each address makes the link pull in every module. */
static volatile layout_fn layout = kvs_rank_layout;
static volatile bind_fn bind = kvs_topology_bind_thread;
static volatile probe_fn probe = kvs_cuda_probe;
static volatile window_fn window = kvs_split_window_pages;

int main(void) {
  kvs_topology_options options = KVS_TOPOLOGY_OPTIONS_INIT;
  kvs_topology_source source = kvs_topology_source_bundled();
  kvs_topology_destroy(NULL);
  kvs_node_plan_destroy(NULL);
  int linked = layout != 0 && bind != 0 && probe != 0 && window != 0;
  return options.use_cuda && source.iface != NULL && kvs_pci_is_nvidia_gpu(0x10de, 0x0302) &&
                 linked
             ? 0
             : 1;
}

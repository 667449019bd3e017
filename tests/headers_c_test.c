/* Every public header compiles as pure C11 with -pedantic: kvshard.h
 * includes them all (the tests are C++, so without this nothing would
 * notice a C++-only construct creeping into a header). Then one use of
 * each folder's API links from C: core's pool lifecycle, the blocks'
 * layout, topology's bundled server and layout, cuda/'s fault check, and
 * every options initialiser. */
#include "kvshard.h"

#include <stdio.h>
#include <string.h>

static int core_pool(void) {
  kvs_geometry geometry;
  kvs_error err;
  if (kvs_geometry_builtin("dsv4-flash", &geometry, &err) != KVS_OK) {
    fprintf(stderr, "builtin geometry: %s\n", err.message);
    return 1;
  }
  kvs_pool_sizes sizes;
  if (kvs_cost_solve_num_pages(8ull << 30, &geometry, 0.125, 21, KVS_DEFAULT_WINDOW_PAGE, 1, &sizes,
                          NULL, &err) != KVS_OK) {
    fprintf(stderr, "solve: %s\n", err.message);
    return 1;
  }
  kvs_window_pool_t pool = NULL;
  if (kvs_window_pool_create(&sizes, NULL, &pool, &err) != KVS_OK) {
    fprintf(stderr, "pool: %s\n", err.message);
    return 1;
  }
  int ok = kvs_window_pool_check_integrity(pool, &err) == KVS_OK;
  if (!ok) fprintf(stderr, "integrity: %s\n", err.message);
  kvs_window_pool_destroy(pool);
  kvs_window_pool_destroy(NULL);
  kvs_free_list_destroy(NULL);
  kvs_journal_destroy(NULL);
  return ok ? 0 : 1;
}

static int blocks(void) {
  kvs_block_layout layout;
  if (kvs_block_layout_init(64, 128, &layout, NULL) != KVS_OK) return 1;
  if (!kvs_block_format_readable(KVS_BLOCK_FORMAT_VERSION)) return 1;
  return kvs_bf16_from_float(1.0f) == 0x3f80 ? 0 : 1;
}

static int topology(void) {
  kvs_topology_source source = kvs_topology_source_bundled();
  kvs_topology_t topo = NULL;
  if (kvs_topology_create(&source, NULL, &topo, NULL) != KVS_OK) return 1;
  size_t n = kvs_topology_gpu_count(topo);
  kvs_rank_slot slots[8];
  kvs_status status = kvs_rank_layout(kvs_topology_gpus(topo), n, 4, 2, slots, NULL);
  kvs_topology_destroy(topo);
  kvs_node_plan_destroy(NULL);
  return n == 8 && status == KVS_OK && kvs_pci_is_nvidia_gpu(0x10de, 0x0302) ? 0 : 1;
}

static int cuda(void) {
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  kvs_device_faults faults = {fault, fault, fault, fault};
  kvs_device_tables_destroy(NULL);
  return kvs_device_faults_check(&faults, NULL) == KVS_OK ? 0 : 1;
}

/* Every options struct starts as its initialiser says: its own size. */
static int initialisers(void) {
  kvs_window_pool_options pool = KVS_WINDOW_POOL_OPTIONS_INIT;
  kvs_block_store_options store = KVS_BLOCK_STORE_OPTIONS_INIT;
  kvs_topology_options topo = KVS_TOPOLOGY_OPTIONS_INIT;
  kvs_device_layout_options layout = KVS_DEVICE_LAYOUT_OPTIONS_INIT;
  kvs_shard_options shard = KVS_SHARD_OPTIONS_INIT;
  kvs_comm_mpi_options mpi = KVS_COMM_MPI_OPTIONS_INIT;
  kvs_comm_nccl_options nccl = KVS_COMM_NCCL_OPTIONS_INIT;
  kvs_node_options node = KVS_NODE_OPTIONS_INIT;
  return pool.size == sizeof pool && store.size == sizeof store && topo.size == sizeof topo &&
                 layout.size == sizeof layout && shard.size == sizeof shard &&
                 mpi.size == sizeof mpi && nccl.size == sizeof nccl && node.size == sizeof node &&
                 layout.alignment == KVS_DEVICE_DEFAULT_ALIGNMENT && store.verify_on_open
             ? 0
             : 1;
}

int main(void) {
  if (strcmp(kvs_version(), KVS_VERSION_STRING) != 0) return 1;
  int failed = core_pool() | blocks() << 1 | topology() << 2 | cuda() << 3 | initialisers() << 4;
  if (failed != 0) {
    fprintf(stderr, "failed parts (bit mask: core, blocks, topology, cuda, options): %d\n", failed);
    return 1;
  }
  printf("kvshard %s: every public header compiles as C11\n", kvs_version());
  return 0;
}

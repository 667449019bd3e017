/* An engine outside Bazel: built against the installed kvshard with
 *   cc engine.c $(pkg-config --cflags --libs kvshard)
 * and nothing else. It plans one rank of the bundled 8-GPU server on the
 * host twin, binds pages for one request through the node's pool, steps
 * once, and checks the bindings round-trip. */
#include <kvshard.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const kvs_error *err) {
  fprintf(stderr, "engine: %s: %s\n", what, err->message);
  return 1;
}

int main(void) {
  if (strcmp(kvs_version(), KVS_VERSION_STRING) != 0) {
    fprintf(stderr, "engine: headers %s, library %s\n", KVS_VERSION_STRING, kvs_version());
    return 1;
  }
  kvs_error err;
  kvs_geometry geometry;
  if (kvs_geometry_builtin("dsv4-flash", &geometry, &err) != KVS_OK) return fail("geometry", &err);
  kvs_comm_t comm = NULL;
  if (kvs_comm_self_create(&comm, &err) != KVS_OK) return fail("comm", &err);
  kvs_node_options options = KVS_NODE_OPTIONS_INIT;
  options.geometry = &geometry;
  options.topology = "bundled";
  options.device = KVS_NODE_DEVICE_CPU;
  options.max_running = 4;
  options.max_seq_len = 4096;
  options.budget.budget_bytes = 2ull << 30;
  options.bind_numa = false;
  kvs_node_t node = NULL;
  if (kvs_node_create(comm, &options, &node, &err) != KVS_OK) return fail("node", &err);
  /* Two whole full pages (the leader binds between steps). */
  kvs_window_pool_t pool = kvs_node_pool(node);
  uint64_t page = kvs_window_pool_page_size(pool);
  int64_t *locs = malloc(2 * page * sizeof *locs);
  if (locs == NULL) return 1;
  for (uint64_t i = 0; i < 2 * page; i++) locs[i] = (int64_t)(page + i);
  if (kvs_window_pool_alloc(pool, locs, 2 * page, NULL, &err) != KVS_OK) return fail("alloc", &err);
  kvs_node_step_result result;
  if (kvs_node_step(node, kvs_shard_next_step(kvs_node_shard(node)), NULL, false, &result, &err) !=
      KVS_OK) {
    return fail("step", &err);
  }
  int64_t first = -1, last = -1;
  if (kvs_window_pool_translate(pool, locs[0], &first, &err) != KVS_OK ||
      kvs_window_pool_translate(pool, locs[2 * page - 1], &last, &err) != KVS_OK) {
    return fail("translate", &err);
  }
  const kvs_split *split = kvs_node_plan_split(kvs_node_plan(node));
  printf("engine: kvshard %s, %llu pages of %llu tokens on GPU %s, %llu bindings stepped, "
         "token %lld in window slot %lld\n",
         kvs_version(), (unsigned long long)split->num_pages, (unsigned long long)page,
         kvs_node_gpu(node)->pci_busid, (unsigned long long)result.info.entries,
         (long long)locs[0], (long long)first);
  /* Offsets within a page are preserved. */
  int ok = result.info.entries == 2 && first >= 0 && last >= 0 && first % (int64_t)page == 0 &&
           last % (int64_t)page == (int64_t)page - 1;
  free(locs);
  kvs_node_destroy(node);
  kvs_comm_destroy(comm);
  return ok ? 0 : 1;
}

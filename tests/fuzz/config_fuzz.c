/* Fuzzes the model config loader and prices whatever it accepts: any
 * input is refused with an error or yields a geometry every cost-model
 * call handles without overflow, crash or undefined behaviour.
 *
 * The corpus holds real configs (the shipped DeepSeek-V4 ones, and others'
 * that must be refused) and config_fuzz.dict the JSON tokens and field
 * names, so mutations stay JSON and reach the config reader; an input
 * counts as past parsing when jansson accepts it as JSON (the project's
 * field checks then ran on it). */
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "tests/fuzz/fuzz_stats.h"

KVS_FUZZ_TARGET("config_fuzz", "JSON jansson accepts: the config reader's field checks ran");

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  KVS_FUZZ_RUN();
  json_t *json = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
  if (json != NULL) KVS_FUZZ_PAST();
  json_decref(json);
  kvs_geometry g;
  kvs_error err;
  if (kvs_geometry_parse_json((const char *)data, size, &g, &err) != KVS_OK) return 0;
  if (kvs_geometry_validate(&g, &err) != KVS_OK) __builtin_trap(); /* accepted means valid */
  kvs_compressor kinds[KVS_MAX_LAYERS];
  size_t n = 0;
  if (kvs_geometry_compressors(&g, kinds, KVS_MAX_LAYERS, &n, &err) != KVS_OK) __builtin_trap();
  uint64_t out;
  kvs_cost_cache_per_page(&g, 0.125, 128, &out, &err);
  kvs_cost_kv_unit_bytes(&g, 128, &out, &err);
  kvs_cost_window_unit_bytes(&g, 128, &out, &err);
  const uint64_t budgets[] = {1, 1ull << 20, 80ull << 30, UINT64_MAX};
  for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
    kvs_pool_sizes sizes;
    if (kvs_cost_solve_num_pages(budgets[i], &g, 0.125, 21, 128, 4, &sizes, NULL, &err) == KVS_OK) {
      uint64_t bytes;
      if (kvs_pool_sizes_bytes(&sizes, &g, 4, &bytes, &err) != KVS_OK || bytes > budgets[i]) {
        __builtin_trap(); /* a solved pool always prices and always fits */
      }
    }
  }
  kvs_auto_cost cost;
  kvs_cost_auto_model(&g, 0.125, 21, 128, 4, &cost, &err);
  return 0;
}

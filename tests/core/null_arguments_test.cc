// Every function core/ declares, called with NULL (and zero where zero is
// meaningless): a kvs_status call refuses with KVS_ERR_INVALID_ARGUMENT and
// a message naming the argument, changing nothing; an accessor reads 0,
// NULL, "" or -1 as its header says; a destroy accepts NULL. Nothing
// crashes.
//
// Coverage is checked, not hoped for: //tests/core:null_arguments_coverage_test
// lists the functions of every header under core/ (and the functions of
// kvshard.h defined there) and fails naming any that appears nowhere in
// this file. A function without a pointer argument has nothing to refuse;
// it is listed in kNoPointer below so the check sees it was considered.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "backends/cuda/entry.h"
#include "backends/mpi/entry.h"
#include "backends/nccl/entry.h"
#include "backends/registry.h"
#include "core/cost_model.h"
#include "core/device_ref.h"
#include "pool/free_list.h"
#include "core/geometry.h"
#include "pool/journal.h"
#include "core/model_config.h"
#include "core/model_weights.h"
#include "core/options.h"
#include "core/regular_file.h"
#include "core/safetensors.h"
#include "backends/shared_object.h"
#include "core/sglang_memory.h"
#include "core/sglang_pools.h"
#include "core/status.h"
#include "core/table_math.h"
#include "core/version.h"
#include "pool/window_pool.h"
#include "tests/core/fixtures.h"
#include "tests/null_arguments.h"

namespace {

using kvs_test::Pool;

// Functions with no pointer argument: nothing to pass NULL to. Their
// names are here so the coverage check knows they were considered.
const char *const kNoPointer[] = {
    "kvs_state_rings_name",
    "kvs_state_rings_csa_per_request",
    "kvs_state_rings_hca_per_request",
    "kvs_kv_dtype_name",
    "kvs_cost_round_half_even",
    "kvs_compressor_ratio",
    "kvs_compressor_has_indexer",
    "kvs_compressor_projection_width_multiple",
    "kvs_compressor_overlapping",
    "kvs_compressor_visible_compressed",
    "kvs_compressor_name",
    "kvs_geometry_builtin_name",
    "kvs_binding_digest_term",
    "kvs_slot_digest_term",
    "kvs_status_string",
    "kvs_status_name",
    "kvs_version",
    "kvs_backend_name",
    "kvs_backend_file",
    "kvs_backend_broken",
};

kvs_geometry flash() {
  kvs_geometry g;
  EXPECT_EQ(kvs_geometry_builtin("dsv4-flash", &g, nullptr), KVS_OK);
  return g;
}

// A small per-page pool: P = 4, 8 full pages, 4 window pages.
kvs_pool_sizes small_sizes() {
  kvs_pool_sizes s{};
  s.page = 4;
  s.full_token = 32;
  s.n_win_pages = 4;
  s.n_win_slots = 16;
  s.n_layers = 1;
  s.state_rings = KVS_STATE_RINGS_PER_PAGE;
  return s;
}

Pool small_pool() {
  kvs_pool_sizes s = small_sizes();
  kvs_window_pool_t pool = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_create(&s, nullptr, &pool, &err), KVS_OK) << err.message;
  return Pool(pool);
}

TEST(NullArguments, the_no_pointer_list_names_real_functions) {
  // Calling each proves the list is not stale (a renamed function would
  // fail to build here).
  EXPECT_STREQ(kvs_state_rings_name(KVS_STATE_RINGS_PER_PAGE), "per-page");
  EXPECT_FALSE(kvs_state_rings_csa_per_request(KVS_STATE_RINGS_PER_PAGE));
  EXPECT_FALSE(kvs_state_rings_hca_per_request(KVS_STATE_RINGS_PER_PAGE));
  EXPECT_STREQ(kvs_kv_dtype_name(KVS_KV_BF16), "bf16");
  EXPECT_EQ(kvs_cost_round_half_even(2.5), 2.0);
  EXPECT_EQ(kvs_compressor_ratio(KVS_COMPRESSOR_CSA), 4u);
  EXPECT_TRUE(kvs_compressor_has_indexer(KVS_COMPRESSOR_CSA));
  EXPECT_EQ(kvs_compressor_projection_width_multiple(KVS_COMPRESSOR_CSA), 2u);
  EXPECT_TRUE(kvs_compressor_overlapping(KVS_COMPRESSOR_CSA));
  EXPECT_EQ(kvs_compressor_visible_compressed(KVS_COMPRESSOR_CSA, 7), 2u);
  EXPECT_STREQ(kvs_compressor_name(KVS_COMPRESSOR_HCA), "HCA");
  EXPECT_NE(kvs_geometry_builtin_name(0), nullptr);
  EXPECT_EQ(kvs_binding_digest_term(1, 2), kvs_binding_digest_term(1, 2));
  EXPECT_NE(kvs_slot_digest_term(1, 2), kvs_binding_digest_term(1, 2));
  EXPECT_STRNE(kvs_status_string(KVS_OK), "");
  EXPECT_STREQ(kvs_status_name(KVS_OK), "KVS_OK");
  EXPECT_STRNE(kvs_version(), "");
  EXPECT_STREQ(kvs_backend_name(KVS_BACKEND_MPI), "mpi");
  EXPECT_STRNE(kvs_backend_file(KVS_BACKEND_CUDA), "?");
  EXPECT_FALSE(kvs_backend_broken((kvs_backend_kind)7));
  EXPECT_EQ(sizeof kNoPointer / sizeof kNoPointer[0], 20u);
}

// ---- core/status.h ----

TEST(NullArguments, status) {
  // kvs_error_set and kvs_error_clear take a NULL error (the message is
  // not wanted); a NULL format leaves an empty message.
  EXPECT_EQ(kvs_error_set(nullptr, KVS_ERR_IO, "%s", "x"), KVS_ERR_IO);
  kvs_error err;
  EXPECT_EQ(kvs_error_set(&err, KVS_ERR_PARSE, nullptr), KVS_ERR_PARSE);
  EXPECT_EQ(err.status, KVS_ERR_PARSE);
  EXPECT_STREQ(err.message, "");
  kvs_error_clear(nullptr);
  // The thread's last failure is recorded with or without an error to
  // write it to, and only a reset clears it.
  kvs_error_last_failure_reset();
  EXPECT_EQ(kvs_error_last_failure(), KVS_OK);
  kvs_error_set(nullptr, KVS_ERR_BUDGET_TOO_SMALL, "x");
  EXPECT_EQ(kvs_error_last_failure(), KVS_ERR_BUDGET_TOO_SMALL);
  kvs_error_clear(&err);
  EXPECT_EQ(kvs_error_last_failure(), KVS_ERR_BUDGET_TOO_SMALL);
  kvs_error_last_failure_reset();
  EXPECT_EQ(kvs_error_last_failure(), KVS_OK);
}

// ---- backends/registry.h (the backend registry) ----

TEST(NullArguments, backend) {
  // Refused before any file is looked for (the message is the registry's).
  const void *table = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_backend_table(KVS_BACKEND_CUDA, nullptr, nullptr, 0, &table, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_backend_table(KVS_BACKEND_CUDA, "kvs_backend_cuda", nullptr, 0, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(table, nullptr);
  // kvs_shared_object_check: a NULL path is nothing there, a NULL reason
  // or none of room is not written.
  char why[64] = "x";
  EXPECT_EQ(kvs_shared_object_check(nullptr, why, sizeof why), KVS_SO_ABSENT);
  EXPECT_STREQ(why, "no path given");
  EXPECT_EQ(kvs_shared_object_check(nullptr, nullptr, 0), KVS_SO_ABSENT);
  // Each backend's getters (backends/*/entry.h): a NULL output is refused
  // before anything is loaded.
  EXPECT_EQ(kvs_cuda_probe_table_get(nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_cuda_tables_table_get(nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_comm_nccl_table(nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_comm_mpi_table(nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  // kvs_loaded_object: a NULL name is no object; libc is one.
  EXPECT_EQ(kvs_loaded_object(nullptr, RTLD_LAZY), nullptr);
  void *libc = kvs_loaded_object("libc.so.6", RTLD_LAZY);
  EXPECT_NE(libc, nullptr);
  if (libc != nullptr) dlclose(libc);
  EXPECT_EQ(kvs_loaded_object("libkvshard-not-there.so.9", RTLD_LAZY), nullptr);
  EXPECT_EQ(kvs_shared_object_check("/", why, 0), KVS_SO_BROKEN);
}

// ---- pool/journal.h ----

TEST(NullArguments, journal) {
  EXPECT_NULL_REFUSED("out", kvs_journal_create(4, nullptr, &err));
  kvs_journal_destroy(nullptr);
  EXPECT_EQ(kvs_journal_capacity(nullptr), 0u);
  EXPECT_EQ(kvs_journal_pending(nullptr), 0u);
  EXPECT_EQ(kvs_journal_room(nullptr), 0u);
  EXPECT_EQ(kvs_journal_sequence(nullptr), 0u);
  EXPECT_NULL_REFUSED("journal", kvs_journal_push(nullptr, 1, 2, &err));
  size_t n = 99;
  kvs_journal_drain(nullptr, nullptr, 4, &n);
  EXPECT_EQ(n, 0u);
  kvs_journal_t j = nullptr;
  ASSERT_EQ(kvs_journal_create(2, &j, nullptr), KVS_OK);
  ASSERT_EQ(kvs_journal_push(j, 1, 2, nullptr), KVS_OK);
  kvs_journal_drain(j, nullptr, 4, &n);  // nowhere to put them: none moved
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(kvs_journal_pending(j), 1u);
  kvs_journal_destroy(j);
}

// The journal's own capacity: past it the ring would be written beyond
// its end, and a 0-entry journal has no ring at all.
TEST(NullArguments, journal_push_past_capacity_is_refused_whole) {
  for (size_t capacity : {size_t(0), size_t(1), size_t(3)}) {
    kvs_journal_t j = nullptr;
    ASSERT_EQ(kvs_journal_create(capacity, &j, nullptr), KVS_OK);
    for (size_t i = 0; i < capacity; i++) ASSERT_EQ(kvs_journal_push(j, i, 0, nullptr), KVS_OK);
    kvs_error err;
    EXPECT_EQ(kvs_journal_push(j, 77, 5, &err), KVS_ERR_JOURNAL_FULL);
    EXPECT_NE(std::string(err.message).find("full page 77 -> 5"), std::string::npos) << err.message;
    EXPECT_EQ(kvs_journal_pending(j), capacity);
    EXPECT_EQ(kvs_journal_sequence(j), capacity);
    kvs_journal_entry out[4];
    size_t n = 0;
    kvs_journal_drain(j, out, 4, &n);
    EXPECT_EQ(n, capacity);
    if (capacity > 0) {
      // After a drain the ring takes entries again, wrapping correctly.
      EXPECT_EQ(kvs_journal_push(j, 9, 9, nullptr), KVS_OK);
      kvs_journal_drain(j, out, 4, &n);
      ASSERT_EQ(n, 1u);
      EXPECT_EQ(out[0].full_page, 9u);
    }
    kvs_journal_destroy(j);
  }
}

// ---- pool/free_list.h ----

TEST(NullArguments, free_list) {
  EXPECT_NULL_REFUSED("out", kvs_free_list_create(16, 4, nullptr, &err));
  kvs_free_list_destroy(nullptr);
  uint64_t bases[4] = {0, 0, 0, 0};
  EXPECT_NULL_REFUSED("list", kvs_free_list_alloc(nullptr, 1, bases, nullptr, &err));
  EXPECT_NULL_REFUSED("list", kvs_free_list_free(nullptr, bases, 1, &err));
  EXPECT_NULL_REFUSED("list", kvs_free_list_take(nullptr, 0, &err));
  EXPECT_FALSE(kvs_free_list_is_free(nullptr, 0));
  EXPECT_EQ(kvs_free_list_available(nullptr), 0u);
  EXPECT_EQ(kvs_free_list_free_units(nullptr), 0u);
  EXPECT_EQ(kvs_free_list_capacity(nullptr), 0u);
  EXPECT_EQ(kvs_free_list_page_unit(nullptr), 0u);
  EXPECT_EQ(kvs_free_list_bases(nullptr), nullptr);
  kvs_free_list_reset(nullptr);

  kvs_free_list_t list = nullptr;
  ASSERT_EQ(kvs_free_list_create(16, 4, &list, nullptr), KVS_OK);
  EXPECT_NULL_REFUSED("bases_out", kvs_free_list_alloc(list, 1, nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("bases", kvs_free_list_free(list, nullptr, 1, &err));
  EXPECT_EQ(kvs_free_list_free_units(list), 4u);                               // nothing taken
  EXPECT_EQ(kvs_free_list_alloc(list, 0, nullptr, nullptr, nullptr), KVS_OK);  // no units, no bases
  kvs_free_list_destroy(list);
}

// ---- core/geometry.h (and kvshard.h's geometry functions) ----

TEST(NullArguments, geometry) {
  const kvs_geometry g = flash();
  EXPECT_EQ(kvs_geometry_layer_count(nullptr), 0u);
  EXPECT_TRUE(kvs_compressor_from_ratio(4, nullptr));
  EXPECT_FALSE(kvs_compressor_from_ratio(5, nullptr));
  kvs_compressor out[KVS_MAX_LAYERS];
  size_t n = 0;
  EXPECT_NULL_REFUSED("geometry", kvs_geometry_compressors(nullptr, out, 4, &n, &err));
  EXPECT_NULL_REFUSED("out", kvs_geometry_compressors(&g, nullptr, KVS_MAX_LAYERS, &n, &err));
  EXPECT_NULL_REFUSED("geometry", kvs_geometry_validate(nullptr, &err));
  EXPECT_NULL_REFUSED("geometry",
                      kvs_geometry_check_every_layer_has_a_ratio(nullptr, "l", "r", &err));
  EXPECT_NULL_REFUSED("layers_name",
                      kvs_geometry_check_every_layer_has_a_ratio(&g, nullptr, "r", &err));
  EXPECT_NULL_REFUSED("ratios_name",
                      kvs_geometry_check_every_layer_has_a_ratio(&g, "l", nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_ring_size_for_ratio(4, nullptr, &err));
  const uint32_t ratios[] = {0, 4};
  EXPECT_NULL_REFUSED("out", kvs_geometry_init(nullptr, 8, 4, 2, ratios, 2, &err));
  kvs_geometry made;
  EXPECT_NULL_REFUSED("ratios", kvs_geometry_init(&made, 8, 4, 2, nullptr, 2, &err));
  const char json[] = "{}";
  EXPECT_NULL_REFUSED("text", kvs_geometry_parse_json(nullptr, 2, &made, &err));
  EXPECT_NULL_REFUSED("out", kvs_geometry_parse_json(json, 2, nullptr, &err));
  EXPECT_NULL_REFUSED("path", kvs_geometry_load_file(nullptr, &made, &err));
  EXPECT_NULL_REFUSED("out", kvs_geometry_load_file("x.json", nullptr, &err));
  EXPECT_NULL_REFUSED("name", kvs_geometry_builtin(nullptr, &made, &err));
  EXPECT_NULL_REFUSED("out", kvs_geometry_builtin("dsv4-flash", nullptr, &err));
  EXPECT_NULL_REFUSED("name_or_path", kvs_geometry_resolve(nullptr, &made, &err));
  EXPECT_NULL_REFUSED("out", kvs_geometry_resolve("dsv4-flash", nullptr, &err));
}

// ---- core/model_config.h, model_weights.h, safetensors.h, options.h,
// regular_file.h ----

TEST(NullArguments, model_files) {
  kvs_model_config *m = new kvs_model_config;
  const char json[] = "{}";
  EXPECT_NULL_REFUSED("text", kvs_model_config_parse_json(nullptr, 2, m, &err));
  EXPECT_NULL_REFUSED("out", kvs_model_config_parse_json(json, 2, nullptr, &err));
  EXPECT_NULL_REFUSED("name_or_path", kvs_model_config_resolve(nullptr, m, &err));
  EXPECT_NULL_REFUSED("out", kvs_model_config_resolve("dsv4-flash", nullptr, &err));
  ASSERT_EQ(kvs_model_config_resolve("dsv4-flash", m, nullptr), KVS_OK);
  kvs_geometry g;
  EXPECT_NULL_REFUSED("model", kvs_model_config_planned_geometry(nullptr, 0, &g, &err));
  EXPECT_NULL_REFUSED("out", kvs_model_config_planned_geometry(m, 0, nullptr, &err));
  delete m;

  kvs_model_weights *w = new kvs_model_weights;
  EXPECT_FALSE(kvs_model_weights_is_routed_expert(nullptr));
  EXPECT_NULL_REFUSED("folder", kvs_model_weights_load(nullptr, 4, w, &err));
  EXPECT_NULL_REFUSED("out", kvs_model_weights_load("tests/data/model-tiny", 4, nullptr, &err));
  delete w;

  EXPECT_NULL_REFUSED("path",
                      kvs_safetensors_read_header(nullptr, nullptr, nullptr, nullptr, &err));

  struct opts {
    size_t size;
    int x;
  } defaults = {sizeof(opts), 1}, out = {0, 0};
  EXPECT_NULL_REFUSED("defaults",
                      kvs_options_adopt(nullptr, nullptr, sizeof out, "INIT", &out, &err));
  EXPECT_NULL_REFUSED("init",
                      kvs_options_adopt(nullptr, &defaults, sizeof out, nullptr, &out, &err));
  EXPECT_NULL_REFUSED("out",
                      kvs_options_adopt(nullptr, &defaults, sizeof out, "INIT", nullptr, &err));
  EXPECT_REFUSED("cannot hold an options struct's size field",
                 kvs_options_adopt(nullptr, &defaults, 0, "INIT", &out, &err));
  EXPECT_EQ(out.size, 0u);  // untouched

  int fd = -1;
  uint64_t size = 0;
  EXPECT_NULL_REFUSED("path", kvs_open_regular(nullptr, "x", 10, &fd, &size, nullptr, &err));
  EXPECT_NULL_REFUSED("what",
                      kvs_open_regular("/dev/null", nullptr, 10, &fd, &size, nullptr, &err));
  EXPECT_NULL_REFUSED("fd_out",
                      kvs_open_regular("/dev/null", "x", 10, nullptr, &size, nullptr, &err));
  EXPECT_NULL_REFUSED("size", kvs_open_regular("/dev/null", "x", 10, &fd, nullptr, nullptr, &err));
  EXPECT_EQ(fd, -1);
}

// ---- core/sglang_pools.h ----

TEST(NullArguments, sglang_pools) {
  const kvs_geometry g = flash();
  kvs_sglang_model model;
  EXPECT_NULL_REFUSED("geometry", kvs_sglang_model_make(nullptr, 0, 1, 64, 128, 0, &model, &err));
  EXPECT_NULL_REFUSED("out", kvs_sglang_model_make(&g, 0, 1, 64, 128, 0, nullptr, &err));
  ASSERT_EQ(kvs_sglang_model_make(&g, 0, 1, 64, 128, 0, &model, nullptr), KVS_OK);
  const kvs_sglang_options options = KVS_SGLANG_OPTIONS_INIT;
  kvs_sglang_pools pools;
  EXPECT_NULL_REFUSED("model", kvs_sglang_pools_compute(nullptr, &options, 1, &pools, &err));
  EXPECT_NULL_REFUSED("options", kvs_sglang_pools_compute(&model, nullptr, 1, &pools, &err));
  EXPECT_NULL_REFUSED("out", kvs_sglang_pools_compute(&model, &options, 1, nullptr, &err));
  size_t first = 0, end = 0;
  EXPECT_NULL_REFUSED("first", kvs_sglang_pp_range(8, 2, 0, nullptr, &end, &err));
  EXPECT_NULL_REFUSED("end", kvs_sglang_pp_range(8, 2, 0, &first, nullptr, &err));
}

// ---- core/sglang_memory.h ----

TEST(NullArguments, sglang_memory) {
  const kvs_sglang_memory_input input = {1u << 30, 1u << 29, 0.9, false};
  kvs_sglang_memory memory;
  EXPECT_NULL_REFUSED("input", kvs_sglang_memory_rule(nullptr, &memory, &err));
  EXPECT_NULL_REFUSED("out", kvs_sglang_memory_rule(&input, nullptr, &err));
  const kvs_sglang_launch launch = {143771, 8, 1, 1, false, 0, 0};
  kvs_sglang_default_fraction fraction;
  EXPECT_NULL_REFUSED("launch", kvs_sglang_default_mem_fraction(nullptr, &fraction, &err));
  EXPECT_NULL_REFUSED("out", kvs_sglang_default_mem_fraction(&launch, nullptr, &err));
}

// ---- core/cost_model.h ----

TEST(NullArguments, cost_model) {
  const kvs_geometry g = flash();
  kvs_state_rings rings;
  EXPECT_NULL_REFUSED("text", kvs_state_rings_parse(nullptr, &rings, &err));
  EXPECT_NULL_REFUSED("out", kvs_state_rings_parse("per-page", nullptr, &err));
  kvs_kv_dtype dtype;
  EXPECT_NULL_REFUSED("text", kvs_kv_dtype_parse(nullptr, &dtype, &err));
  EXPECT_NULL_REFUSED("out", kvs_kv_dtype_parse("bf16", nullptr, &err));
  const kvs_row_widths none = kvs_row_widths_default(nullptr);
  EXPECT_EQ(none.kv, 0u);  // zero widths: every pricing refuses them
  kvs_row_widths widths;
  EXPECT_NULL_REFUSED("geometry", kvs_row_widths_for(nullptr, KVS_KV_BF16, 64, &widths, &err));
  EXPECT_NULL_REFUSED("out", kvs_row_widths_for(&g, KVS_KV_BF16, 64, nullptr, &err));
  kvs_cost_terms terms;
  EXPECT_NULL_REFUSED("geometry", kvs_cost_terms_make(nullptr, 0, 1, nullptr, &terms, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_terms_make(&g, 0, 1, nullptr, nullptr, &err));
  kvs_row_widths_place(nullptr, KVS_STATE_RINGS_PER_REQUEST, 4, true);  // nothing to place into
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, kvs_geometry_layer_count(&g), nullptr, &terms, nullptr),
            KVS_OK);
  uint64_t u = 0;
  EXPECT_NULL_REFUSED("out", kvs_cost_scale_count(0.5, 4, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_reserved_window_pages(4, true, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_window_floor_pages(1024, 4, true, 128, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_window_pages_left(1024, 4, true, nullptr, &err));
  EXPECT_NULL_REFUSED("geometry", kvs_cost_cache_per_page(nullptr, 0.1, 128, &u, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_cache_per_page(&g, 0.1, 128, nullptr, &err));
  EXPECT_NULL_REFUSED("geometry", kvs_cost_kv_unit_bytes(nullptr, 128, &u, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_kv_unit_bytes(&g, 128, nullptr, &err));
  EXPECT_NULL_REFUSED("geometry", kvs_cost_window_unit_bytes(nullptr, 128, &u, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_window_unit_bytes(&g, 128, nullptr, &err));
  EXPECT_EQ(kvs_pool_sizes_num_pages(nullptr), 0u);
  kvs_pool_sizes zero_page{};
  EXPECT_EQ(kvs_pool_sizes_num_pages(&zero_page), 0u);  // page 0 divides nothing
  kvs_pool_sizes sizes;
  EXPECT_NULL_REFUSED("geometry", kvs_pool_sizes_compute(8, nullptr, 0.1, 128,
                                                         KVS_WINDOW_FROM_RATIO, &sizes, &err));
  EXPECT_NULL_REFUSED(
      "out", kvs_pool_sizes_compute(8, &g, 0.1, 128, KVS_WINDOW_FROM_RATIO, nullptr, &err));
  EXPECT_NULL_REFUSED("terms", kvs_pool_sizes_compute_terms(8, nullptr, 0.1, 128,
                                                            KVS_WINDOW_FROM_RATIO, &sizes, &err));
  EXPECT_NULL_REFUSED("out", kvs_pool_sizes_compute_terms(8, &terms, 0.1, 128,
                                                          KVS_WINDOW_FROM_RATIO, nullptr, &err));
  ASSERT_EQ(kvs_pool_sizes_compute(8, &g, 0.1, 128, KVS_WINDOW_FROM_RATIO, &sizes, nullptr),
            KVS_OK);
  bool present = false;
  kvs_layer_sizes layer;
  EXPECT_NULL_REFUSED("sizes", kvs_pool_sizes_layer(nullptr, &g, 1, &present, &layer, &err));
  EXPECT_NULL_REFUSED("geometry", kvs_pool_sizes_layer(&sizes, nullptr, 1, &present, &layer, &err));
  EXPECT_NULL_REFUSED("present", kvs_pool_sizes_layer(&sizes, &g, 1, nullptr, &layer, &err));
  EXPECT_NULL_REFUSED("out", kvs_pool_sizes_layer(&sizes, &g, 1, &present, nullptr, &err));
  EXPECT_NULL_REFUSED("sizes", kvs_pool_sizes_bytes(nullptr, &g, 1, &u, &err));
  EXPECT_NULL_REFUSED("geometry", kvs_pool_sizes_bytes(&sizes, nullptr, 1, &u, &err));
  EXPECT_NULL_REFUSED("out", kvs_pool_sizes_bytes(&sizes, &g, 1, nullptr, &err));
  kvs_pool_breakdown bytes;
  EXPECT_NULL_REFUSED("sizes", kvs_pool_sizes_bytes_terms(nullptr, &terms, 1, &bytes, &err));
  EXPECT_NULL_REFUSED("terms", kvs_pool_sizes_bytes_terms(&sizes, nullptr, 1, &bytes, &err));
  EXPECT_NULL_REFUSED("out", kvs_pool_sizes_bytes_terms(&sizes, &terms, 1, nullptr, &err));
  EXPECT_NULL_REFUSED("sizes", kvs_pool_sizes_window_page_bytes(nullptr, &terms, &u, &err));
  EXPECT_NULL_REFUSED("terms", kvs_pool_sizes_window_page_bytes(&sizes, nullptr, &u, &err));
  EXPECT_NULL_REFUSED("out", kvs_pool_sizes_window_page_bytes(&sizes, &terms, nullptr, &err));
  EXPECT_NULL_REFUSED("sizes", kvs_pool_sizes_check_terms(nullptr, &terms, &err));
  EXPECT_NULL_REFUSED("terms", kvs_pool_sizes_check_terms(&sizes, nullptr, &err));
  EXPECT_NULL_REFUSED("geometry", kvs_cost_solve_num_pages(1ull << 40, nullptr, 0.1, 8, 128, 1,
                                                           &sizes, nullptr, &err));
  EXPECT_NULL_REFUSED(
      "out", kvs_cost_solve_num_pages(1ull << 40, &g, 0.1, 8, 128, 1, nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("terms", kvs_cost_solve_num_pages_terms(1ull << 40, nullptr, 0.1, 8, 128, 1,
                                                              &sizes, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_solve_num_pages_terms(1ull << 40, &terms, 0.1, 8, 128, 1,
                                                            nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("geometry",
                      kvs_cost_solve(1ull << 40, nullptr, nullptr, &sizes, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_solve(1ull << 40, &g, nullptr, nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("geometry", kvs_cost_solve_terms(nullptr, nullptr, &terms, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_solve_terms(&g, nullptr, nullptr, &err));
  kvs_auto_cost cost;
  EXPECT_NULL_REFUSED("geometry", kvs_cost_auto_model(nullptr, 0.1, 8, 128, 1, &cost, &err));
  EXPECT_NULL_REFUSED("out", kvs_cost_auto_model(&g, 0.1, 8, 128, 1, nullptr, &err));
}

// ---- pool/window_pool.h ----

TEST(NullArguments, window_pool_refuses_a_null_pool_and_reads_zero) {
  kvs_pool_sizes s = small_sizes();
  kvs_window_pool_t made = nullptr;
  EXPECT_NULL_REFUSED("sizes", kvs_window_pool_create(nullptr, nullptr, &made, &err));
  EXPECT_NULL_REFUSED("out", kvs_window_pool_create(&s, nullptr, nullptr, &err));
  EXPECT_EQ(made, nullptr);
  kvs_window_pool_destroy(nullptr);

  EXPECT_EQ(kvs_window_pool_page_size(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_full_tokens(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_window_slots(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_swa_num_tokens(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_swa_available(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_bound_pages(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_prefill_chunk_budget(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_mapping(nullptr), nullptr);
  EXPECT_EQ(kvs_window_pool_digest(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_page_digest(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_digest_recompute(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_digest_range(nullptr, 0, 8), 0u);
  EXPECT_EQ(kvs_window_pool_digest_units(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_journal_pending(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_journal_capacity(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_journal_sequence(nullptr), 0u);
  kvs_journal_entry entries[2];
  size_t n = 99;
  kvs_window_pool_journal_drain(nullptr, entries, 2, &n);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(kvs_window_pool_state_rings(nullptr), KVS_STATE_RINGS_PER_PAGE);
  EXPECT_EQ(kvs_window_pool_request_slots(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_bound_slots(nullptr), 0u);
  EXPECT_EQ(kvs_window_pool_slot_of(nullptr, 1), -1);
  EXPECT_EQ(kvs_window_pool_slot_request(nullptr, 0), KVS_SLOT_FREE);

  const int64_t locs[4] = {0, 1, 2, 3};
  int64_t slot = 0, prev = 0, ring[4];
  uint64_t bound = 0;
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_alloc(nullptr, locs, 4, nullptr, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_free(nullptr, locs, 4, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_alloc_pages(nullptr, locs, 1, nullptr, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_free_pages(nullptr, locs, 1, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_translate(nullptr, 0, &slot, &err));
  EXPECT_NULL_REFUSED("pool",
                      kvs_window_pool_window_ctx(nullptr, 0, locs, 4, &slot, &prev, ring, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_bind_raw(nullptr, 0, 0, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_unbind_raw(nullptr, locs, 4, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_check_integrity(nullptr, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_apply(nullptr, entries, 0, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_slot_bind(nullptr, 1, &bound, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_slot_free(nullptr, 1, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_slot_bind_raw(nullptr, 0, 1, &err));
}

// A valid pool with NULL arrays and outputs: refused, the pool unchanged.
TEST(NullArguments, window_pool_refuses_null_arrays_and_outputs_changing_nothing) {
  Pool pool = small_pool();
  kvs_window_pool_t p = pool.get();
  const int64_t locs[4] = {0, 1, 2, 3};
  ASSERT_EQ(kvs_window_pool_alloc(p, locs, 4, nullptr, nullptr), KVS_OK);
  const uint64_t digest = kvs_window_pool_digest(p);
  const size_t journaled = kvs_window_pool_journal_pending(p);
  int64_t slot = 7, prev = 7, ring[4] = {7, 7, 7, 7};
  uint64_t bound = 7;
  EXPECT_NULL_REFUSED("full_locs", kvs_window_pool_alloc(p, nullptr, 4, nullptr, &err));
  EXPECT_NULL_REFUSED("full_locs", kvs_window_pool_free(p, nullptr, 4, &err));
  EXPECT_NULL_REFUSED("pages", kvs_window_pool_alloc_pages(p, nullptr, 1, nullptr, &err));
  EXPECT_NULL_REFUSED("pages", kvs_window_pool_free_pages(p, nullptr, 1, &err));
  EXPECT_NULL_REFUSED("full_locs", kvs_window_pool_unbind_raw(p, nullptr, 4, &err));
  EXPECT_NULL_REFUSED("out", kvs_window_pool_translate(p, 0, nullptr, &err));
  EXPECT_NULL_REFUSED("full_locs",
                      kvs_window_pool_window_ctx(p, 0, nullptr, 4, &slot, &prev, ring, &err));
  EXPECT_NULL_REFUSED("window_slot",
                      kvs_window_pool_window_ctx(p, 0, locs, 4, nullptr, &prev, ring, &err));
  EXPECT_NULL_REFUSED("prev_window_slot",
                      kvs_window_pool_window_ctx(p, 0, locs, 4, &slot, nullptr, ring, &err));
  EXPECT_NULL_REFUSED("ring_out",
                      kvs_window_pool_window_ctx(p, 0, locs, 4, &slot, &prev, nullptr, &err));
  EXPECT_NULL_REFUSED("entries", kvs_window_pool_apply(p, nullptr, 1, &err));
  EXPECT_NULL_REFUSED("slot", kvs_window_pool_slot_bind(p, 1, nullptr, &err));
  EXPECT_EQ(slot, 7);
  EXPECT_EQ(prev, 7);
  EXPECT_EQ(ring[0], 7);
  EXPECT_EQ(bound, 7u);
  EXPECT_EQ(kvs_window_pool_digest(p), digest);
  EXPECT_EQ(kvs_window_pool_journal_pending(p), journaled);
  EXPECT_EQ(kvs_window_pool_bound_pages(p), 1u);
  EXPECT_EQ(kvs_window_pool_check_integrity(p, nullptr), KVS_OK);
  // Empty batches need no array.
  EXPECT_EQ(kvs_window_pool_alloc(p, nullptr, 0, nullptr, nullptr), KVS_OK);
  EXPECT_EQ(kvs_window_pool_free(p, nullptr, 0, nullptr), KVS_OK);
  EXPECT_EQ(kvs_window_pool_apply(p, nullptr, 0, nullptr), KVS_OK);
}

TEST(NullArguments, prefix_cache) {
  kvs_error err;
  kvs_prefix_hit hit;
  kvs_prefix_stats stats;
  uint64_t key = 1;
  int64_t page = 1, freed = 0;
  uint8_t taken = 0;
  size_t n_freed = 0;
  EXPECT_FALSE(kvs_window_pool_prefix_enabled(nullptr));
  EXPECT_NULL_REFUSED("pool",
                      kvs_window_pool_prefix_match(nullptr, &key, 1, 1000, 0, &hit, nullptr, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_acquire(nullptr, 1, &hit, &err));
  EXPECT_NULL_REFUSED(
      "pool", kvs_window_pool_prefix_insert(nullptr, 1, &key, &page, nullptr, 1, &taken, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_release(nullptr, 1, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_abandon(nullptr, 1, &err));
  EXPECT_NULL_REFUSED(
      "pool", kvs_window_pool_prefix_evict(nullptr, 1, 0, &freed, 1, &n_freed, nullptr, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_evict_for_fetch(
                                  nullptr, &hit, &key, 1, 1, &freed, 1, &n_freed, nullptr, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_stats(nullptr, &stats, &err));
  EXPECT_NULL_REFUSED(
      "pool", kvs_window_pool_prefix_node(nullptr, 1, nullptr, nullptr, nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_inject(nullptr, 1, 1, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_fetch(nullptr, 1, &hit, &key, 1, &page, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_host_slot(nullptr, 0, &key, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_write_back(nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_disk_seed(nullptr, &key, 1, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_disk_slot(nullptr, 0, &key, &err));
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_block(nullptr, 0, &key, &key, &err));
  EXPECT_EQ(kvs_window_pool_prefix_disk_chains(nullptr, &key, 1), 0u);
  EXPECT_FALSE(kvs_window_pool_disk_io_of(nullptr, nullptr));
  EXPECT_FALSE(kvs_window_pool_host_move_of(nullptr, nullptr));
  EXPECT_FALSE(kvs_window_pool_restore_of(nullptr, nullptr));
  EXPECT_FALSE(kvs_window_pool_slot_bind_of(nullptr, nullptr));
  EXPECT_EQ(kvs_window_pool_prefix_entry(nullptr, nullptr, nullptr), KVS_PREFIX_OP_NONE);
  EXPECT_NULL_REFUSED("pool", kvs_window_pool_prefix_match_within(nullptr, &key, 1, 1000, 0, 1,
                                                                  &hit, nullptr, &err));
  // A pool with a cache: the arrays and outputs, nothing changed.
  kvs_geometry g = kvs_test::args();
  kvs_pool_sizes s = kvs_test::sizes(8, g, 0.5, 5);
  kvs_window_pool_options options = KVS_WINDOW_POOL_OPTIONS_INIT;
  options.prefix_cache = true;
  kvs_window_pool_t raw = nullptr;
  ASSERT_EQ(kvs_window_pool_create(&s, &options, &raw, &err), KVS_OK) << err.message;
  Pool p(raw);
  ASSERT_TRUE(kvs_window_pool_prefix_enabled(p.get()));
  uint64_t digest = kvs_window_pool_digest(p.get());
  EXPECT_NULL_REFUSED(
      "hit", kvs_window_pool_prefix_match(p.get(), &key, 1, 1000, 0, nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED(
      "keys", kvs_window_pool_prefix_match(p.get(), nullptr, 1, 1000, 0, &hit, nullptr, &err));
  EXPECT_NULL_REFUSED("hit", kvs_window_pool_prefix_acquire(p.get(), 1, nullptr, &err));
  EXPECT_NULL_REFUSED(
      "keys", kvs_window_pool_prefix_insert(p.get(), 1, nullptr, &page, nullptr, 1, &taken, &err));
  EXPECT_NULL_REFUSED(
      "pages", kvs_window_pool_prefix_insert(p.get(), 1, &key, nullptr, nullptr, 1, &taken, &err));
  EXPECT_NULL_REFUSED(
      "taken", kvs_window_pool_prefix_insert(p.get(), 1, &key, &page, nullptr, 1, nullptr, &err));
  EXPECT_NULL_REFUSED(
      "n_freed", kvs_window_pool_prefix_evict(p.get(), 1, 0, &freed, 1, nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED(
      "freed", kvs_window_pool_prefix_evict(p.get(), 1, 0, nullptr, 1, &n_freed, nullptr, &err));
  EXPECT_NULL_REFUSED("hit", kvs_window_pool_prefix_evict_for_fetch(
                                 p.get(), nullptr, &key, 1, 1, &freed, 1, &n_freed, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_window_pool_prefix_stats(p.get(), nullptr, &err));
  EXPECT_NULL_REFUSED("hit",
                      kvs_window_pool_prefix_fetch(p.get(), 1, nullptr, &key, 1, &page, &err));
  EXPECT_NULL_REFUSED("keys",
                      kvs_window_pool_prefix_fetch(p.get(), 1, &hit, nullptr, 1, &page, &err));
  EXPECT_NULL_REFUSED("pages",
                      kvs_window_pool_prefix_fetch(p.get(), 1, &hit, &key, 1, nullptr, &err));
  EXPECT_EQ(kvs_window_pool_prefix_host_slot(p.get(), 0, nullptr, &err), KVS_ERR_NOT_FOUND);
  EXPECT_NULL_REFUSED("chains", kvs_window_pool_prefix_disk_seed(p.get(), nullptr, 1, &err));
  EXPECT_EQ(kvs_window_pool_prefix_disk_slot(p.get(), 0, nullptr, &err), KVS_ERR_NOT_FOUND);
  EXPECT_EQ(kvs_window_pool_prefix_block(p.get(), 1, nullptr, nullptr, &err), KVS_ERR_NOT_FOUND);
  EXPECT_EQ(kvs_window_pool_prefix_disk_chains(p.get(), nullptr, 1), 0u);
  size_t stored = 9;
  EXPECT_EQ(kvs_window_pool_prefix_write_back(p.get(), &stored, &err), KVS_OK);
  EXPECT_EQ(stored, 0u) << "no disk tier: nothing written";
  EXPECT_EQ(kvs_window_pool_prefix_node(p.get(), 1, nullptr, nullptr, nullptr, nullptr, &err),
            KVS_ERR_NOT_FOUND);
  EXPECT_EQ(kvs_window_pool_prefix_inject(p.get(), 1, 1, &err), KVS_ERR_NOT_FOUND);
  EXPECT_EQ(kvs_window_pool_digest(p.get()), digest);
  EXPECT_EQ(kvs_window_pool_journal_pending(p.get()), 0u);
}

TEST(NullArguments, ring_arithmetic) {
  EXPECT_NULL_REFUSED("out", kvs_window_ring_position(5, 1, 8, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_request_state_loc(1, 5, 8, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_state_loc(5, 8, 128, nullptr, &err));
  int64_t out = 0;
  EXPECT_REFUSED("ring size 0", kvs_request_state_loc(1, 5, 0, &out, &err));
  EXPECT_REFUSED("ring_size 0", kvs_state_loc(5, 0, 128, &out, &err));
  EXPECT_REFUSED("at least one slot", kvs_window_ring_position(5, 1, 0, &out, &err));
}

// ---- core/device_ref.h ----

TEST(NullArguments, device_ref) {
  const kvs_table_dims dims = {4, 32, 16};
  kvs_table_dims zero = {0, 32, 16};
  const kvs_journal_entry entry = {0, 0};
  int64_t map[33], in[2] = {0, 1}, out[2], out2[2], own[2], prev[2], ring[8];
  for (int64_t &m : map) m = -1;
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  EXPECT_NULL_REFUSED("dims", kvs_table_dims_check(nullptr, &err));
  EXPECT_REFUSED("page 0", kvs_table_dims_check(&zero, &err));
  EXPECT_FALSE(kvs_journal_entry_fits(nullptr, &entry));
  EXPECT_FALSE(kvs_journal_entry_fits(&dims, nullptr));
  EXPECT_FALSE(kvs_journal_entry_fits(&zero, &entry));
  EXPECT_NULL_REFUSED("dims", kvs_table_check_journal(nullptr, &entry, 1, &err));
  EXPECT_NULL_REFUSED("entries", kvs_table_check_journal(&dims, nullptr, 1, &err));
  EXPECT_EQ(kvs_ref_rows_digest(nullptr, 64, 7), kvs_ref_rows_digest(nullptr, 0, 7))
      << "no rows: the digest of no bytes, nothing read";
  EXPECT_NULL_REFUSED("dims", kvs_ref_apply_journal(map, nullptr, &entry, 1, &fault, &err));
  EXPECT_NULL_REFUSED("map", kvs_ref_apply_journal(nullptr, &dims, &entry, 1, &fault, &err));
  EXPECT_NULL_REFUSED("entries", kvs_ref_apply_journal(map, &dims, nullptr, 1, &fault, &err));
  EXPECT_NULL_REFUSED("dims", kvs_ref_translate(map, nullptr, in, 2, out, &fault, &err));
  EXPECT_NULL_REFUSED("map", kvs_ref_translate(nullptr, &dims, in, 2, out, &fault, &err));
  EXPECT_NULL_REFUSED("locs", kvs_ref_translate(map, &dims, nullptr, 2, out, &fault, &err));
  EXPECT_NULL_REFUSED("out", kvs_ref_translate(map, &dims, in, 2, nullptr, &fault, &err));
  EXPECT_NULL_REFUSED("dims", kvs_ref_state_locs(nullptr, in, 2, out, out2, &fault, &err));
  EXPECT_NULL_REFUSED("slots", kvs_ref_state_locs(&dims, nullptr, 2, out, out2, &fault, &err));
  EXPECT_REFUSED("need an output",
                 kvs_ref_state_locs(&dims, in, 2, nullptr, nullptr, &fault, &err));
  const kvs_state_placement none = kvs_state_placement_of(nullptr);
  EXPECT_EQ(none.page, 0u);
  EXPECT_NULL_REFUSED("placement", kvs_state_placement_check(nullptr, &err));
  EXPECT_REFUSED("P must be 1", kvs_state_placement_check(&none, &err));
  kvs_state_placement placement = {KVS_STATE_RINGS_PER_PAGE, 128, 256, 0};
  EXPECT_NULL_REFUSED(
      "placement", kvs_ref_batch_state_locs(nullptr, own, nullptr, in, 2, out, out2, &fault, &err));
  EXPECT_NULL_REFUSED("positions", kvs_ref_batch_state_locs(&placement, own, nullptr, nullptr, 2,
                                                            out, out2, &fault, &err));
  EXPECT_REFUSED(
      "own (window slots) is NULL",
      kvs_ref_batch_state_locs(&placement, nullptr, nullptr, in, 2, out, out2, &fault, &err));
  EXPECT_REFUSED("need an output", kvs_ref_batch_state_locs(&placement, own, nullptr, in, 2,
                                                            nullptr, nullptr, &fault, &err));
  const int32_t pages[2] = {0, 1};
  const kvs_block_tables tables = {pages, 2, 4};
  const kvs_block_tables no_rows = {nullptr, 2, 4};
  EXPECT_NULL_REFUSED("tables", kvs_block_tables_check(nullptr, 1, &err));
  EXPECT_NULL_REFUSED("tables->pages", kvs_block_tables_check(&no_rows, 1, &err));
  EXPECT_NULL_REFUSED(
      "map", kvs_ref_ring_ctx(nullptr, &dims, &tables, in, 1, own, prev, ring, &fault, &err));
  EXPECT_NULL_REFUSED(
      "dims", kvs_ref_ring_ctx(map, nullptr, &tables, in, 1, own, prev, ring, &fault, &err));
  EXPECT_NULL_REFUSED("tables",
                      kvs_ref_ring_ctx(map, &dims, nullptr, in, 1, own, prev, ring, &fault, &err));
  EXPECT_NULL_REFUSED("positions", kvs_ref_ring_ctx(map, &dims, &tables, nullptr, 1, own, prev,
                                                    ring, &fault, &err));
  EXPECT_NULL_REFUSED(
      "own", kvs_ref_ring_ctx(map, &dims, &tables, in, 1, nullptr, prev, ring, &fault, &err));
  EXPECT_NULL_REFUSED(
      "prev", kvs_ref_ring_ctx(map, &dims, &tables, in, 1, own, nullptr, ring, &fault, &err));
  EXPECT_NULL_REFUSED(
      "ring", kvs_ref_ring_ctx(map, &dims, &tables, in, 1, own, prev, nullptr, &fault, &err));
  EXPECT_NULL_REFUSED(
      "map", kvs_host_ring_ctx(nullptr, &dims, &tables, in, 1, own, prev, ring, &fault, &err));
  EXPECT_NULL_REFUSED(
      "ring", kvs_host_ring_ctx(map, &dims, &tables, in, 1, own, prev, nullptr, &fault, &err));
}

}  // namespace

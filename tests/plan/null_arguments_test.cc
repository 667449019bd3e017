// Every function plan/ declares, called with NULL (and zero where zero is
// meaningless): a kvs_status call refuses with KVS_ERR_INVALID_ARGUMENT and
// a message naming the argument, changing nothing; an accessor reads 0,
// NULL, "" or SIZE_MAX as its header says; a destroy accepts NULL. Nothing
// crashes. //tests/core:null_arguments_coverage_test fails naming any
// function of a plan/ header that appears nowhere here (kNoPointer lists
// those with no pointer argument).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/device_budget.h"
#include "plan/device_layout.h"
#include "plan/node_overhead.h"
#include "plan/memory_budget.h"
#include "plan/memory_inputs.h"
#include "plan/deployment.h"
#include "plan/node_setup.h"
#include "plan/parallel.h"
#include "plan/rank_layout.h"
#include "plan/stage_split.h"
#include "tests/topology/helpers.h"
#include "tests/null_arguments.h"

namespace {

const char *const kNoPointer[] = {"kvs_device_tier_name", "kvs_budget_source_name"};

kvs_geometry flash() {
  kvs_geometry g;
  EXPECT_EQ(kvs_geometry_builtin("dsv4-flash", &g, nullptr), KVS_OK);
  return g;
}

TEST(NullArguments, the_no_pointer_list_names_real_functions) {
  EXPECT_STREQ(kvs_device_tier_name(KVS_DEVICE_TIER_WINDOW), "window");
  EXPECT_STREQ(kvs_budget_source_name(KVS_BUDGET_NOMINAL), "nominal");
  EXPECT_EQ(sizeof kNoPointer / sizeof kNoPointer[0], 2u);
}

TEST(NullArguments, memory_budget_and_device_budget) {
  kvs_memory_budget b;
  EXPECT_NULL_REFUSED(
      "out", kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, 1ull << 30, 0.9, 0, 0, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_memory_budget_explicit(1ull << 30, nullptr, &err));
  EXPECT_FALSE(kvs_memory_budget_bytes(1ull << 30, 0.9, 0, 0, nullptr));
  (void)b;
  EXPECT_NULL_REFUSED("out",
                      kvs_device_budget_compute(1ull << 30, 1ull << 31, 0.9, 0, nullptr, &err));
  // Refused before anything is measured (no CUDA is asked).
  EXPECT_NULL_REFUSED("out", kvs_device_budget_query(0, 0.9, 0, nullptr, &err));
}

TEST(NullArguments, rank_layout) {
  std::vector<kvs_gpu_info> gpus = {kvs_test::fake_gpu(0, 0, 0), kvs_test::fake_gpu(1, 0, 0)};
  kvs_rank_slot slots[2];
  bool crossed = false;
  EXPECT_NULL_REFUSED("gpus", kvs_rank_layout(nullptr, 2, 2, 1, slots, &err));
  EXPECT_NULL_REFUSED("out", kvs_rank_layout(gpus.data(), 2, 2, 1, nullptr, &err));
  EXPECT_REFUSED("n_gpus is 0", kvs_rank_layout(gpus.data(), 0, 1, 1, slots, &err));
  EXPECT_NULL_REFUSED("gpus",
                      kvs_rank_layout_cluster(nullptr, 2, 2, 1, false, slots, &crossed, &err));
  EXPECT_NULL_REFUSED(
      "out", kvs_rank_layout_cluster(gpus.data(), 2, 2, 1, false, nullptr, &crossed, &err));
}

TEST(NullArguments, stage_split) {
  const kvs_geometry g = flash();
  const std::vector<uint64_t> budgets = {80ull << 30};
  kvs_split_request r{};
  r.geometry = &g;
  r.swa_ratio = 0.125;
  r.page = 128;
  r.floor_win_pages = 8;
  r.n_scratch = 1;
  r.n_stages = 1;
  r.stage_budgets = budgets.data();
  kvs_split_request no_geometry = r;
  no_geometry.geometry = nullptr;
  kvs_split_request no_budgets = r;
  no_budgets.stage_budgets = nullptr;
  kvs_split *split = new kvs_split;
  uint64_t u = 0;
  EXPECT_NULL_REFUSED("request", kvs_split_solve(nullptr, split, nullptr, &err));
  EXPECT_NULL_REFUSED("request->geometry", kvs_split_solve(&no_geometry, split, nullptr, &err));
  EXPECT_NULL_REFUSED("request->stage_budgets", kvs_split_solve(&no_budgets, split, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_split_solve(&r, nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("request", kvs_split_window_pages(nullptr, 8, &u, &err));
  EXPECT_NULL_REFUSED("request->geometry", kvs_split_window_pages(&no_geometry, 8, &u, &err));
  EXPECT_NULL_REFUSED("out", kvs_split_window_pages(&r, 8, nullptr, &err));
  EXPECT_NULL_REFUSED("request",
                      kvs_split_range_bytes(nullptr, 0, 1, 8, nullptr, nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("request->geometry", kvs_split_range_bytes(&no_geometry, 0, 1, 8, nullptr,
                                                                 nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("request", kvs_split_range_weights(nullptr, 0, 1, &u, &err));
  EXPECT_NULL_REFUSED("out", kvs_split_range_weights(&r, 0, 1, nullptr, &err));
  EXPECT_NULL_REFUSED("request", kvs_split_range_max_pages(nullptr, 0, 1, 1ull << 30, &u, &err));
  EXPECT_NULL_REFUSED("out", kvs_split_range_max_pages(&r, 0, 1, 1ull << 30, nullptr, &err));
  bool holds = true;
  EXPECT_NULL_REFUSED("request", kvs_split_holds(nullptr, 8, &holds, &err));
  EXPECT_NULL_REFUSED("request->geometry", kvs_split_holds(&no_geometry, 8, &holds, &err));
  EXPECT_NULL_REFUSED("request->stage_budgets", kvs_split_holds(&no_budgets, 8, &holds, &err));
  EXPECT_NULL_REFUSED("out", kvs_split_holds(&r, 8, nullptr, &err));
  EXPECT_TRUE(holds);
  delete split;
}

TEST(NullArguments, device_layout) {
  const kvs_geometry g = flash();
  kvs_pool_sizes sizes;
  ASSERT_EQ(kvs_pool_sizes_compute(8, &g, 0.125, 128, KVS_WINDOW_FROM_RATIO, &sizes, nullptr),
            KVS_OK);
  kvs_cost_terms terms;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, kvs_geometry_layer_count(&g), nullptr, &terms, nullptr),
            KVS_OK);
  kvs_device_layout *layout = new kvs_device_layout;
  const size_t L = kvs_geometry_layer_count(&g);
  EXPECT_NULL_REFUSED(
      "geometry", kvs_device_layout_build(nullptr, 0, L, nullptr, &sizes, nullptr, layout, &err));
  EXPECT_NULL_REFUSED("sizes",
                      kvs_device_layout_build(&g, 0, L, nullptr, nullptr, nullptr, layout, &err));
  EXPECT_NULL_REFUSED("out",
                      kvs_device_layout_build(&g, 0, L, nullptr, &sizes, nullptr, nullptr, &err));
  kvs_device_footprint f;
  EXPECT_NULL_REFUSED("terms", kvs_device_layout_footprint(nullptr, &sizes, nullptr, &f, &err));
  EXPECT_NULL_REFUSED("sizes", kvs_device_layout_footprint(&terms, nullptr, nullptr, &f, &err));
  EXPECT_NULL_REFUSED("out", kvs_device_layout_footprint(&terms, &sizes, nullptr, nullptr, &err));
  ASSERT_EQ(kvs_device_layout_build(&g, 0, L, nullptr, &sizes, nullptr, layout, nullptr), KVS_OK);
  kvs_device_region region;
  EXPECT_NULL_REFUSED("layout",
                      kvs_device_layout_region(nullptr, KVS_DEVICE_TIER_WINDOW, 0, &region, &err));
  EXPECT_NULL_REFUSED("out",
                      kvs_device_layout_region(layout, KVS_DEVICE_TIER_WINDOW, 0, nullptr, &err));
  const kvs_table_dims dims = kvs_device_layout_dims(nullptr);
  EXPECT_EQ(dims.page, 0u);
  const kvs_row_widths widths = kvs_row_widths_fp8(nullptr);
  EXPECT_EQ(widths.kv, 0u);
  EXPECT_NULL_REFUSED("geometry", kvs_device_plan_solve(1ull << 36, nullptr, 0, L, nullptr, 0.125,
                                                        8, 128, nullptr, layout, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_device_plan_solve(1ull << 36, &g, 0, L, nullptr, 0.125, 8, 128,
                                                   nullptr, nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("faults", kvs_device_faults_check(nullptr, &err));
  EXPECT_NULL_REFUSED("layout", kvs_device_layout_check_tables(nullptr, &err));
  EXPECT_EQ(kvs_device_page_quantum(KVS_DEVICE_TIER_WINDOW, 0), 0u) << "no row: no page";
  delete layout;
}

TEST(NullArguments, node_overhead) {
  const kvs_nccl_estimate e = KVS_NCCL_ESTIMATE_INIT;
  uint64_t u = 0;
  EXPECT_NULL_REFUSED("estimate", kvs_nccl_buffer_estimate(nullptr, &u, &err));
  EXPECT_NULL_REFUSED("out", kvs_nccl_buffer_estimate(&e, nullptr, &err));
  kvs_node_overhead_request r{};
  kvs_node_overhead o{};
  EXPECT_NULL_REFUSED("request", kvs_node_overhead_compute(nullptr, &o, &err));
  EXPECT_NULL_REFUSED("out", kvs_node_overhead_compute(&r, nullptr, &err));
  EXPECT_NULL_REFUSED("overhead", kvs_node_overhead_reserve(0, nullptr, &u, &err));
  EXPECT_NULL_REFUSED("out", kvs_node_overhead_reserve(0, &o, nullptr, &err));
  kvs_memory_budget b{};
  EXPECT_NULL_REFUSED("budget", kvs_node_overhead_check(nullptr, &o, "--reserve", &err));
  EXPECT_NULL_REFUSED("overhead", kvs_node_overhead_check(&b, nullptr, "--reserve", &err));
  ASSERT_EQ(kvs_node_overhead_compute(&r, &o, nullptr), KVS_OK) << "all zero: nothing on a GPU";
  EXPECT_EQ(o.total_bytes, 0u);
}

TEST(NullArguments, node_setup_and_node_plan) {
  kvs_topology_t t = nullptr;
  EXPECT_NULL_REFUSED("out", kvs_host_topology_open("bundled", nullptr, nullptr, 0, &err));
  EXPECT_NULL_REFUSED("out", kvs_topology_open_spec("bundled", false, nullptr, nullptr, 0, &err));
  ASSERT_EQ(kvs_host_topology_open("bundled", &t, nullptr, 0, nullptr), KVS_OK);
  kvs_test::Topology topology(t);
  const std::vector<kvs_gpu_info> gpus = kvs_test::gpus_of(t);
  const kvs_budget_request budget = KVS_BUDGET_REQUEST_INIT;
  kvs_memory_budget b[8];
  EXPECT_NULL_REFUSED("request", kvs_node_gpu_budget(nullptr, gpus.data(), 8, 0, b, &err));
  EXPECT_NULL_REFUSED("gpus", kvs_node_gpu_budget(&budget, nullptr, 8, 0, b, &err));
  EXPECT_NULL_REFUSED("out", kvs_node_gpu_budget(&budget, gpus.data(), 8, 0, nullptr, &err));
  EXPECT_NULL_REFUSED("request", kvs_node_budgets(nullptr, gpus.data(), 8, b, &err));
  EXPECT_NULL_REFUSED("gpus", kvs_node_budgets(&budget, nullptr, 8, b, &err));
  EXPECT_NULL_REFUSED("out", kvs_node_budgets(&budget, gpus.data(), 8, nullptr, &err));
  EXPECT_REFUSED("n_gpus is 0", kvs_node_budgets(&budget, gpus.data(), 0, b, &err));
  EXPECT_NULL_REFUSED("request", kvs_node_budgets_on_memory(nullptr, 1, gpus.data(), 8, b, &err));
  EXPECT_NULL_REFUSED("gpus", kvs_node_budgets_on_memory(&budget, 1, nullptr, 8, b, &err));
  EXPECT_NULL_REFUSED("out", kvs_node_budgets_on_memory(&budget, 1, gpus.data(), 8, nullptr, &err));
  EXPECT_REFUSED("n_gpus is 0", kvs_node_budgets_on_memory(&budget, 1, gpus.data(), 0, b, &err));
  uint64_t memory[8];
  EXPECT_NULL_REFUSED("gpu", kvs_node_gpu_total_memory(nullptr, 0, memory, &err));
  EXPECT_NULL_REFUSED("out", kvs_node_gpu_total_memory(gpus.data(), 0, nullptr, &err));
  EXPECT_NULL_REFUSED("gpus", kvs_node_free_before_load(nullptr, 8, 0, 0, memory, nullptr, &err));
  EXPECT_NULL_REFUSED("out",
                      kvs_node_free_before_load(gpus.data(), 8, 0, 0, nullptr, nullptr, &err));
  const kvs_memory_input inputs[KVS_MEMORY_INPUT_COUNT] = {};
  EXPECT_NULL_REFUSED("inputs", kvs_memory_inputs_check(nullptr, gpus.data(), 8, &err));
  EXPECT_NULL_REFUSED("gpus", kvs_memory_inputs_check(inputs, nullptr, 8, &err));
  EXPECT_EQ(kvs_memory_inputs_check(inputs, nullptr, 0, nullptr), KVS_OK);
  EXPECT_NULL_REFUSED("name", kvs_memory_host_check(nullptr, 1, nullptr, nullptr, 0, &err));
  EXPECT_NULL_REFUSED("memory",
                      kvs_memory_host_check("--host-cache", 1, nullptr, nullptr, 2, &err));
  EXPECT_EQ(kvs_memory_host_check("--host-cache", 1, nullptr, nullptr, 0, nullptr), KVS_OK);
  const kvs_parallel none{8, 1, 1, 1};
  EXPECT_NULL_REFUSED("p", kvs_parallel_check(nullptr, 8, &err));
  EXPECT_EQ(kvs_parallel_check(&none, 8, nullptr), KVS_OK);
  EXPECT_EQ(kvs_parallel_replicas(nullptr, 8), 0u);
  EXPECT_EQ(kvs_parallel_groups(nullptr, 8), 0u);
  EXPECT_EQ(kvs_parallel_moe_gpus(nullptr), 0u);
  const kvs_device_layout_options defaults = kvs_node_layout_options(nullptr);
  EXPECT_EQ(defaults.alignment, KVS_DEVICE_DEFAULT_ALIGNMENT);

  const kvs_geometry g = flash();
  kvs_plan_request r{};
  r.geometry = &g;
  r.swa_ratio = 0.125;
  r.page = 128;
  r.floor_win_pages = 8;
  r.n_scratch = 1;
  r.tp = 8;
  r.pp = 1;
  std::vector<uint64_t> budgets(8, 80ull << 30);
  kvs_deployment_t plan = nullptr;
  EXPECT_NULL_REFUSED("request", kvs_deployment_create(nullptr, gpus.data(), 8, budgets.data(),
                                                       &plan, nullptr, &err));
  EXPECT_NULL_REFUSED("gpus",
                      kvs_deployment_create(&r, nullptr, 8, budgets.data(), &plan, nullptr, &err));
  EXPECT_NULL_REFUSED("budgets",
                      kvs_deployment_create(&r, gpus.data(), 8, nullptr, &plan, nullptr, &err));
  EXPECT_NULL_REFUSED(
      "out", kvs_deployment_create(&r, gpus.data(), 8, budgets.data(), nullptr, nullptr, &err));
  EXPECT_NULL_REFUSED("request", kvs_deployment_make(nullptr, gpus.data(), 8, budgets.data(), &plan,
                                                     nullptr, &err));
  EXPECT_NULL_REFUSED(
      "out", kvs_deployment_make(&r, gpus.data(), 8, budgets.data(), nullptr, nullptr, &err));
  EXPECT_EQ(plan, nullptr);
  uint64_t pages = 0;
  EXPECT_NULL_REFUSED("request", kvs_node_max_pages(nullptr, 0, 1, 80ull << 30, &pages, &err));
  EXPECT_NULL_REFUSED("out", kvs_node_max_pages(&r, 0, 1, 80ull << 30, nullptr, &err));
  bool holds = true;
  EXPECT_NULL_REFUSED("request", kvs_deployment_holds(nullptr, budgets.data(), 8, &holds, &err));
  EXPECT_NULL_REFUSED("stage_budgets", kvs_deployment_holds(&r, nullptr, 8, &holds, &err));
  EXPECT_NULL_REFUSED("out", kvs_deployment_holds(&r, budgets.data(), 8, nullptr, &err));
  EXPECT_TRUE(holds);
  ASSERT_EQ(kvs_deployment_make(&r, gpus.data(), 8, budgets.data(), &plan, nullptr, nullptr),
            KVS_OK);
  kvs_test::Plan owned(plan);
  kvs_device_layout *layout = new kvs_device_layout;
  EXPECT_NULL_REFUSED("request", kvs_node_rank_layout(nullptr, plan, 0, layout, &err));
  EXPECT_NULL_REFUSED("plan", kvs_node_rank_layout(&r, nullptr, 0, layout, &err));
  EXPECT_NULL_REFUSED("out", kvs_node_rank_layout(&r, plan, 0, nullptr, &err));
  delete layout;
  EXPECT_EQ(kvs_deployment_host_slot_bytes(nullptr, gpus.data(), 8), 0u);
  EXPECT_EQ(kvs_deployment_host_slot_bytes(plan, nullptr, 8), 0u);
  uint64_t slots = 0;
  EXPECT_NULL_REFUSED("plan",
                      kvs_deployment_host_slots(nullptr, gpus.data(), 8, 1ull << 40, &slots, &err));
  EXPECT_NULL_REFUSED("gpus",
                      kvs_deployment_host_slots(plan, nullptr, 8, 1ull << 40, &slots, &err));
  EXPECT_NULL_REFUSED("slots",
                      kvs_deployment_host_slots(plan, gpus.data(), 8, 1ull << 40, nullptr, &err));
  EXPECT_REFUSED("not one page", kvs_deployment_host_slots(plan, gpus.data(), 8, 0, &slots, &err));
  kvs_retained_tails tails;
  EXPECT_NULL_REFUSED("plan", kvs_deployment_retained_tails(nullptr, 64, true, &tails, &err));
  EXPECT_NULL_REFUSED("out", kvs_deployment_retained_tails(plan, 64, true, nullptr, &err));

  kvs_deployment_destroy(nullptr);
  EXPECT_EQ(kvs_deployment_split(nullptr), nullptr);
  EXPECT_EQ(kvs_deployment_rank_count(nullptr), 0u);
  EXPECT_EQ(kvs_deployment_rank(nullptr, 0), nullptr);
  EXPECT_EQ(kvs_deployment_tp(nullptr), 0u);
  EXPECT_EQ(kvs_deployment_pp(nullptr), 0u);
  EXPECT_EQ(kvs_deployment_replicas(nullptr), 0u);
  EXPECT_EQ(kvs_deployment_limiting_rank(nullptr), SIZE_MAX);
  EXPECT_FALSE(kvs_deployment_cross_host_tp(nullptr));
  EXPECT_EQ(kvs_deployment_host_slot_bytes(nullptr, nullptr, 0), 0u);
  EXPECT_EQ(kvs_deployment_rank_host_bytes(nullptr, 0), 0u);
}

TEST(NullArguments, cluster) {
  kvs_cluster_t c = nullptr;
  EXPECT_NULL_REFUSED("out", kvs_cluster_open("bundled", 1, nullptr, nullptr, 0, &err));
  EXPECT_NULL_REFUSED("out", kvs_cluster_open_spec("bundled", 1, false, nullptr, nullptr, 0, &err));
  kvs_cluster_destroy(nullptr);
  kvs_topology_t t = nullptr;
  ASSERT_EQ(kvs_host_topology_open("bundled", &t, nullptr, 0, nullptr), KVS_OK);
  kvs_test::Topology topology(t);
  const std::vector<kvs_gpu_info> gpus = kvs_test::gpus_of(t);
  const size_t counts[1] = {8};
  const char *const labels[1] = {"node"};
  EXPECT_NULL_REFUSED("gpu_counts",
                      kvs_cluster_from_lists(1, nullptr, gpus.data(), labels, 0, t, &c, &err));
  EXPECT_NULL_REFUSED("gpus", kvs_cluster_from_lists(1, counts, nullptr, labels, 0, t, &c, &err));
  EXPECT_NULL_REFUSED("labels",
                      kvs_cluster_from_lists(1, counts, gpus.data(), nullptr, 0, t, &c, &err));
  EXPECT_NULL_REFUSED("own_topology",
                      kvs_cluster_from_lists(1, counts, gpus.data(), labels, 0, nullptr, &c, &err));
  EXPECT_NULL_REFUSED("out",
                      kvs_cluster_from_lists(1, counts, gpus.data(), labels, 0, t, nullptr, &err));
  EXPECT_EQ(c, nullptr);
  EXPECT_NULL_REFUSED("cluster", kvs_cluster_host_tier_check(nullptr, "--host-cache", 1, &err));
  EXPECT_EQ(kvs_cluster_host_count(nullptr), 0u);
  EXPECT_EQ(kvs_cluster_host(nullptr, 0), nullptr);
  EXPECT_STREQ(kvs_cluster_host_label(nullptr, 0), "");
  EXPECT_EQ(kvs_cluster_host_gpu_count(nullptr, 0), 0u);
  EXPECT_EQ(kvs_cluster_own_host(nullptr), SIZE_MAX);
  EXPECT_EQ(kvs_cluster_gpu_count(nullptr), 0u);
  EXPECT_EQ(kvs_cluster_gpus(nullptr), nullptr);
  EXPECT_EQ(kvs_cluster_local_index(nullptr, 0), SIZE_MAX);
  EXPECT_STREQ(kvs_cluster_label(nullptr), "");
  // A GPU past the list has no local index (it read past the array).
  ASSERT_EQ(kvs_cluster_open("bundled", 1, &c, nullptr, 0, nullptr), KVS_OK);
  EXPECT_EQ(kvs_cluster_local_index(c, 7), 7u);
  EXPECT_EQ(kvs_cluster_local_index(c, 8), SIZE_MAX);
  kvs_cluster_destroy(c);
}

}  // namespace

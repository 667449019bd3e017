// The node plan: every rank's bytes are core's exact pool bytes for its
// own layers at the common page count; TP ranks replicate their stage;
// heterogeneous budgets move layers; the limit and the shortfall name the
// right GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "tests/topology/helpers.h"
#include "plan/deployment.h"

using namespace kvs_test;

namespace {

constexpr uint64_t P = KVS_DEFAULT_WINDOW_PAGE;
constexpr uint64_t GiB = 1ull << 30;

struct Fixture {
  kvs_geometry geometry;
  kvs_plan_request request;
};

Fixture flash(size_t tp, size_t pp) {
  Fixture f;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_builtin("dsv4-flash", &f.geometry, &err), KVS_OK);
  f.request = kvs_plan_request{&f.geometry, nullptr, 0.125, P, 331, 1, tp, pp};
  return f;
}

Plan make_plan(const Fixture &f, const std::vector<kvs_gpu_info> &gpus,
               const std::vector<uint64_t> &budgets) {
  kvs_deployment_t plan = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_deployment_create(&f.request, gpus.data(), gpus.size(), budgets.data(), &plan,
                                  nullptr, &err),
            KVS_OK)
      << err.message;
  return Plan(plan);
}

// Each rank against core alone: the terms of its layers, the sizes at the
// common page count and window, the exact bytes; and the single-device
// solve of exactly those bytes lands on the common page count.
void expect_bytes_are_core_exact(const Fixture &f, kvs_deployment_t plan) {
  const kvs_split *split = kvs_deployment_split(plan);
  for (size_t r = 0; r < kvs_deployment_rank_count(plan); r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(plan, r);
    SCOPED_TRACE("rank " + std::to_string(r));
    kvs_cost_terms t;
    ASSERT_EQ(kvs_cost_terms_make(&f.geometry, rp->first, rp->end, nullptr, &t, nullptr), KVS_OK);
    kvs_pool_sizes sizes;
    ASSERT_EQ(kvs_pool_sizes_compute_terms(split->num_pages, &t, 0.125, P, split->n_win_pages,
                                           &sizes, nullptr),
              KVS_OK);
    kvs_pool_breakdown b;
    ASSERT_EQ(kvs_pool_sizes_bytes_terms(&sizes, &t, 1, &b, nullptr), KVS_OK);
    EXPECT_EQ(rp->bytes.window, b.window);
    EXPECT_EQ(rp->bytes.compressed, b.compressed);
    EXPECT_EQ(rp->bytes.indexer, b.indexer);
    EXPECT_EQ(rp->bytes.state, b.state);
    EXPECT_EQ(rp->bytes.index_state, b.index_state);
    EXPECT_EQ(rp->bytes.mapping, b.mapping);
    EXPECT_EQ(rp->bytes.scratch, b.scratch);
    EXPECT_EQ(rp->bytes.total, b.total);
    EXPECT_LE(rp->bytes.total, rp->budget_bytes);
    EXPECT_EQ(rp->headroom_bytes, rp->budget_bytes - rp->bytes.total);
    kvs_pool_sizes solved;
    ASSERT_EQ(
        kvs_cost_solve_num_pages_terms(b.total, &t, 0.125, 331, P, 1, &solved, nullptr, nullptr),
        KVS_OK);
    EXPECT_EQ(kvs_pool_sizes_num_pages(&solved), split->num_pages);
    EXPECT_EQ(solved.n_win_pages, split->n_win_pages);
  }
}

void expect_tp_ranks_replicate(kvs_deployment_t plan) {
  size_t tp = kvs_deployment_tp(plan);
  for (size_t r = 0; r < kvs_deployment_rank_count(plan); r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(plan, r);
    const kvs_rank_plan *lead = kvs_deployment_rank(plan, r - rp->tp_rank);
    EXPECT_EQ(lead->tp_rank, 0u);
    EXPECT_EQ(rp->first, lead->first);
    EXPECT_EQ(rp->end, lead->end);
    EXPECT_EQ(rp->bytes.total, lead->bytes.total);
    EXPECT_LT(rp->tp_rank, tp);
  }
}

}  // namespace

TEST(NodePlan, hgx_tp8_every_rank_holds_every_layer) {
  Topology t = load_xml(kHgx);
  Fixture f = flash(8, 1);
  Plan plan = make_plan(f, gpus_of(t.get()), std::vector<uint64_t>(8, 80 * GiB));
  ASSERT_TRUE(plan);
  kvs_pool_sizes s;
  ASSERT_EQ(kvs_cost_solve_num_pages(80 * GiB, &f.geometry, 0.125, 331, P, 1, &s, nullptr, nullptr),
            KVS_OK);
  EXPECT_EQ(kvs_deployment_split(plan.get())->num_pages, kvs_pool_sizes_num_pages(&s));
  for (size_t r = 0; r < 8; r++) {
    EXPECT_EQ(kvs_deployment_rank(plan.get(), r)->first, 0u);
    EXPECT_EQ(kvs_deployment_rank(plan.get(), r)->end, 43u);
  }
  expect_bytes_are_core_exact(f, plan.get());
  expect_tp_ranks_replicate(plan.get());
  EXPECT_EQ(kvs_deployment_limiting_rank(plan.get()), 0u);
}

TEST(NodePlan, hgx_tp4_pp2_splits_by_socket) {
  Topology t = load_xml(kHgx);
  std::vector<kvs_gpu_info> gpus = gpus_of(t.get());
  Fixture f = flash(4, 2);
  Plan plan = make_plan(f, gpus, std::vector<uint64_t>(8, 80 * GiB));
  ASSERT_TRUE(plan);
  expect_bytes_are_core_exact(f, plan.get());
  expect_tp_ranks_replicate(plan.get());
  const kvs_rank_plan *r0 = kvs_deployment_rank(plan.get(), 0);
  const kvs_rank_plan *r4 = kvs_deployment_rank(plan.get(), 4);
  EXPECT_EQ(r0->end, r4->first);
  EXPECT_EQ(gpus[r0->gpu].package, 0);
  EXPECT_EQ(gpus[r4->gpu].package, 1);
  // Two stages hold about twice the pages of one device with every layer.
  kvs_pool_sizes s;
  ASSERT_EQ(kvs_cost_solve_num_pages(80 * GiB, &f.geometry, 0.125, 331, P, 1, &s, nullptr, nullptr),
            KVS_OK);
  EXPECT_GT(kvs_deployment_split(plan.get())->num_pages, 19 * kvs_pool_sizes_num_pages(&s) / 10);
}

TEST(NodePlan, hgx_pp8_one_layer_group_per_gpu) {
  Topology t = load_xml(kHgx);
  Fixture f = flash(1, 8);
  Plan plan = make_plan(f, gpus_of(t.get()), std::vector<uint64_t>(8, 80 * GiB));
  ASSERT_TRUE(plan);
  expect_bytes_are_core_exact(f, plan.get());
  size_t covered = 0;
  for (size_t r = 0; r < 8; r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(plan.get(), r);
    EXPECT_EQ(rp->pp_stage, r);
    EXPECT_EQ(rp->first, covered);
    covered = rp->end;
    // 43 layers over 8 equal budgets: 5 or 6 each.
    EXPECT_GE(rp->end - rp->first, 5u);
    EXPECT_LE(rp->end - rp->first, 6u);
  }
  EXPECT_EQ(covered, 43u);
}

// A smaller GPU in stage 1 makes its whole stage take fewer layers; the
// limit is in a stage that cannot hold one more page.
TEST(NodePlan, heterogeneous_budgets_move_layers_to_the_roomy_stage) {
  Topology t = load_xml(kHgx);
  Fixture f = flash(4, 2);
  std::vector<uint64_t> budgets(8, 141 * GiB);
  budgets[5] = 80 * GiB;
  Plan plan = make_plan(f, gpus_of(t.get()), budgets);
  ASSERT_TRUE(plan);
  expect_bytes_are_core_exact(f, plan.get());
  const kvs_rank_plan *r0 = kvs_deployment_rank(plan.get(), 0);
  const kvs_rank_plan *r5 = kvs_deployment_rank(plan.get(), 5);
  EXPECT_GT(r0->end - r0->first, r5->end - r5->first);
  EXPECT_EQ(r5->budget_bytes, 80 * GiB);
  const kvs_split *split = kvs_deployment_split(plan.get());
  const kvs_rank_plan *lim =
      kvs_deployment_rank(plan.get(), kvs_deployment_limiting_rank(plan.get()));
  EXPECT_EQ(split->stages[lim->pp_stage].max_pages, split->num_pages);
}

// With every layer on every GPU, the smallest GPU is the limit.
TEST(NodePlan, tp8_limit_is_the_smallest_gpu) {
  Topology t = load_xml(kHgx);
  Fixture f = flash(8, 1);
  std::vector<uint64_t> budgets(8, 141 * GiB);
  budgets[5] = 80 * GiB;
  Plan plan = make_plan(f, gpus_of(t.get()), budgets);
  ASSERT_TRUE(plan);
  EXPECT_EQ(kvs_deployment_limiting_rank(plan.get()), 5u);
  kvs_pool_sizes s;
  ASSERT_EQ(kvs_cost_solve_num_pages(80 * GiB, &f.geometry, 0.125, 331, P, 1, &s, nullptr, nullptr),
            KVS_OK);
  EXPECT_EQ(kvs_deployment_split(plan.get())->num_pages, kvs_pool_sizes_num_pages(&s));
}

// Two replicas of tp 2 x pp 2 run one split: a stage is as small as its
// tightest GPU in either replica.
TEST(NodePlan, replicas_share_the_split_and_the_tightest_budget) {
  Topology t = load_xml(kHgx);
  std::vector<kvs_gpu_info> gpus = gpus_of(t.get());
  Fixture f = flash(2, 2);
  std::vector<uint64_t> budgets(8, 80 * GiB);
  budgets[6] = 60 * GiB;  // replica 1, stage 1
  Plan plan = make_plan(f, gpus, budgets);
  ASSERT_TRUE(plan);
  EXPECT_EQ(kvs_deployment_replicas(plan.get()), 2u);
  expect_bytes_are_core_exact(f, plan.get());
  for (size_t r = 0; r < 4; r++) {
    EXPECT_EQ(kvs_deployment_rank(plan.get(), r)->first,
              kvs_deployment_rank(plan.get(), r + 4)->first);
  }
  EXPECT_EQ(kvs_deployment_limiting_rank(plan.get()), 6u);
}

TEST(NodePlan, too_small_a_budget_names_the_gpu) {
  Topology t = load_xml(kHgx);
  Fixture f = flash(4, 2);
  std::vector<uint64_t> budgets(8, 80 * GiB);
  budgets[6] = 16ull << 20;  // below one layer's minimal pool
  std::vector<kvs_gpu_info> gpus = gpus_of(t.get());
  kvs_deployment_t plan = nullptr;
  kvs_plan_shortfall shortfall;
  kvs_error err;
  ASSERT_EQ(
      kvs_deployment_create(&f.request, gpus.data(), 8, budgets.data(), &plan, &shortfall, &err),
      KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_EQ(plan, nullptr);
  EXPECT_EQ(shortfall.gpu, 6u);
  EXPECT_EQ(shortfall.rank, 6u);
  EXPECT_EQ(shortfall.pp_stage, 1u);
  EXPECT_EQ(shortfall.available_bytes, 16ull << 20);
  EXPECT_NE(std::string(err.message).find("GPU 6 (0000:d1:00.0, rank 6, stage 1, layers "),
            std::string::npos)
      << err.message;
  EXPECT_NE(std::string(err.message).find("has a budget of 16777216 bytes"), std::string::npos)
      << err.message;
}

TEST(NodePlan, layout_errors_pass_through) {
  Topology t = load_xml(kHgx);
  std::vector<kvs_gpu_info> gpus = gpus_of(t.get());
  std::vector<uint64_t> budgets(8, 80 * GiB);
  kvs_deployment_t plan = nullptr;
  kvs_error err;
  Fixture f = flash(4, 4);
  EXPECT_EQ(kvs_deployment_create(&f.request, gpus.data(), 8, budgets.data(), &plan, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(err.message), "tp 4 x pp 4 = 16 ranks, more ranks than the 8 GPUs");
  EXPECT_EQ(plan, nullptr);
  kvs_deployment_destroy(nullptr);  // accepted
}

// The DGX-2: 16 V100s at 32 GB, tp 8 x pp 2, one stage per socket.
TEST(NodePlan, dgx2_tp8_pp2) {
  Topology t = load_xml(kDgx2);
  std::vector<kvs_gpu_info> gpus = gpus_of(t.get());
  Fixture f = flash(8, 2);
  Plan plan = make_plan(f, gpus, std::vector<uint64_t>(16, 28 * GiB));
  ASSERT_TRUE(plan);
  expect_bytes_are_core_exact(f, plan.get());
  expect_tp_ranks_replicate(plan.get());
  for (size_t r = 0; r < 16; r++) {
    EXPECT_EQ(gpus[kvs_deployment_rank(plan.get(), r)->gpu].numa_node, static_cast<int>(r / 8));
  }
}

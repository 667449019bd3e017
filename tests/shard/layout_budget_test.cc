// Rank layout and the budget agreement (over a loopback group).
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "shard/budget.h"
#include "shard/comm_self.h"
#include "shard/layout.h"
#include "tests/shard/ranks.h"

using kvs_test::run_ranks;

TEST(Layout, tp_major_ranks_and_an_even_contiguous_layer_split) {
  kvs_shard_layout l;
  kvs_error err;
  ASSERT_EQ(kvs_shard_layout_make(8, 5, 4, 2, 43, &l, &err), KVS_OK) << err.message;
  EXPECT_EQ(l.tp_rank, 1);
  EXPECT_EQ(l.pp_stage, 1);
  EXPECT_EQ(l.layer_first, 22u);
  EXPECT_EQ(l.layer_end, 43u);
  ASSERT_EQ(kvs_shard_layout_make(8, 3, 4, 2, 43, &l, &err), KVS_OK);
  EXPECT_EQ(l.pp_stage, 0);
  EXPECT_EQ(l.layer_first, 0u);
  EXPECT_EQ(l.layer_end, 22u);
  ASSERT_EQ(kvs_shard_layout_make(3, 2, 1, 3, 10, &l, &err), KVS_OK);
  EXPECT_EQ(l.layer_first, 7u);
  EXPECT_EQ(l.layer_end, 10u);
}

TEST(Layout, shapes_that_do_not_cover_the_group_are_refused_by_value) {
  kvs_shard_layout l;
  kvs_error err;
  EXPECT_EQ(kvs_shard_layout_make(8, 0, 3, 2, 43, &l, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "tp 3 x pp 2 = 6 ranks, but the group has 8");
  EXPECT_EQ(kvs_shard_layout_make(4, 4, 4, 1, 43, &l, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "rank 4 is outside a group of 4");
  EXPECT_EQ(kvs_shard_layout_make(4, 0, 1, 4, 3, &l, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "4 pipeline stages need at least as many layers, the model has 3");
  size_t bad[] = {0, 5, 5, 10};
  EXPECT_EQ(kvs_shard_layout_make_bounds(3, 0, 1, 3, 10, bad, &l, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "stage 1 is empty or reversed: layers [5, 5)");
  size_t good[] = {0, 2, 9, 10};
  ASSERT_EQ(kvs_shard_layout_make_bounds(3, 1, 1, 3, 10, good, &l, &err), KVS_OK);
  EXPECT_EQ(l.layer_first, 2u);
  EXPECT_EQ(l.layer_end, 9u);
}

namespace {

kvs_geometry flash() {
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_builtin("dsv4-flash", &g, &err), KVS_OK) << err.message;
  return g;
}

kvs_budget_options options() {
  kvs_budget_options o = KVS_BUDGET_OPTIONS_INIT;
  o.swa_ratio = 0.04;
  o.max_seq_len = 2048;
  o.max_running = 16;
  o.radix = false;
  return o;
}

constexpr uint64_t MiB = 1ull << 20;

}  // namespace

TEST(Budget, one_rank_agrees_with_itself_and_matches_the_core_solve) {
  kvs_comm_t comm;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  kvs_geometry g = flash();
  kvs_shard_layout l;
  ASSERT_EQ(kvs_shard_layout_make(1, 0, 1, 1, kvs_geometry_layer_count(&g), &l, &err), KVS_OK);
  kvs_budget_options o = options();
  kvs_shard_budget b;
  ASSERT_EQ(kvs_shard_agree_budget(comm, &g, &l, 900 * MiB, &o, &b, &err), KVS_OK) << err.message;
  uint64_t floor;
  ASSERT_EQ(kvs_cost_window_floor_pages(2048, 16, false, 128, &floor, &err), KVS_OK);
  kvs_pool_sizes solved;
  ASSERT_EQ(kvs_cost_solve_num_pages(900 * MiB, &g, 0.04, floor, 128, 1, &solved, nullptr, &err),
            KVS_OK);
  EXPECT_EQ(b.agreed_pages, kvs_pool_sizes_num_pages(&solved));
  EXPECT_EQ(b.sizes.full_token, solved.full_token);
  EXPECT_EQ(b.sizes.n_win_pages, solved.n_win_pages);
  EXPECT_EQ(b.slack_pages, 0u);
  EXPECT_LE(b.agreed_bytes, 900 * MiB);
  EXPECT_EQ(b.slack_bytes, 900 * MiB - b.agreed_bytes);
  kvs_comm_destroy(comm);
}

TEST(Budget, ranks_agree_on_the_minimum_and_each_reports_its_slack) {
  kvs_geometry g = flash();
  std::vector<kvs_shard_budget> got(4);
  const uint64_t budgets[] = {1000 * MiB, 950 * MiB, 900 * MiB, 980 * MiB};
  run_ranks(4, 5000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_layout l;
    ASSERT_EQ(kvs_shard_layout_make(4, rank, 2, 2, kvs_geometry_layer_count(&g), &l, &err), KVS_OK);
    kvs_budget_options o = options();
    ASSERT_EQ(kvs_shard_agree_budget(comm, &g, &l, budgets[rank], &o, &got[rank], &err), KVS_OK)
        << err.message;
  });
  uint64_t min_own = UINT64_MAX, max_own = 0;
  for (const auto &b : got) {
    min_own = std::min(min_own, b.own_pages);
    max_own = std::max(max_own, b.own_pages);
  }
  for (int r = 0; r < 4; r++) {
    const auto &b = got[r];
    EXPECT_EQ(b.agreed_pages, min_own) << "rank " << r;
    EXPECT_EQ(b.max_pages, max_own);
    EXPECT_EQ(b.slack_pages, b.own_pages - b.agreed_pages);
    EXPECT_LE(b.agreed_bytes, budgets[r]) << "the agreed pool must fit every rank";
    EXPECT_EQ(b.sizes.full_token, got[0].sizes.full_token) << "one page table for all";
    EXPECT_EQ(b.sizes.n_win_slots, got[0].sizes.n_win_slots);
    EXPECT_EQ(got[b.tightest_rank].own_pages, min_own);
  }
  // Stage 1 (layers 22..43) on the smallest budget is the tightest.
  EXPECT_EQ(got[0].tightest_rank, 2);
  EXPECT_EQ(got[2].slack_pages, 0u);
  EXPECT_GT(got[0].slack_pages, 0u);
}

TEST(Budget, a_rank_that_cannot_hold_the_minimal_pool_fails_every_rank_naming_it) {
  kvs_geometry g = flash();
  std::mutex m;
  std::vector<std::string> messages(3);
  run_ranks(3, 5000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_layout l;
    ASSERT_EQ(kvs_shard_layout_make(3, rank, 3, 1, kvs_geometry_layer_count(&g), &l, &err), KVS_OK);
    kvs_budget_options o = options();
    kvs_shard_budget b;
    EXPECT_EQ(
        kvs_shard_agree_budget(comm, &g, &l, rank == 1 ? 100 * MiB : 1000 * MiB, &o, &b, &err),
        KVS_ERR_BUDGET_TOO_SMALL);
    std::lock_guard<std::mutex> lock(m);
    messages[rank] = err.message;
  });
  EXPECT_EQ(messages[0],
            "rank 1 could not size its pool (its budget cannot hold the minimal pool, or its "
            "layers are invalid), so the group has no common page count");
  EXPECT_EQ(messages[2], messages[0]);
  EXPECT_EQ(messages[1].rfind("rank 1 (stage 0, layers [0, 43)): a budget of 104857600 bytes "
                              "cannot hold the minimal pool of 43 pages",
                              0),
            0u)
      << messages[1];
}

TEST(Budget, ranks_with_different_sizing_parameters_are_refused) {
  kvs_geometry g = flash();
  run_ranks(2, 5000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_layout l;
    ASSERT_EQ(kvs_shard_layout_make(2, rank, 2, 1, kvs_geometry_layer_count(&g), &l, &err), KVS_OK);
    kvs_budget_options o = options();
    if (rank == 1) o.swa_ratio = 0.05;
    kvs_shard_budget b;
    EXPECT_EQ(kvs_shard_agree_budget(comm, &g, &l, 1000 * MiB, &o, &b, &err),
              KVS_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.message).find("ranks passed different sizing parameters"),
              std::string::npos)
        << err.message;
  });
}

// The stage split is optimal: on small random cases and on the real
// models it matches brute force over every set of split points, where
// each candidate's page count is the minimum over its stages of core's
// own single-device solve. The bytes it reports are core's exact bytes.
#include "plan/stage_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/geometry.h"

namespace {

constexpr uint64_t P = KVS_DEFAULT_WINDOW_PAGE;
constexpr uint64_t GiB = 1ull << 30;

kvs_geometry builtin(const char *name) {
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_builtin(name, &g, &err), KVS_OK) << err.message;
  return g;
}

kvs_split_request request(const kvs_geometry &g, const std::vector<uint64_t> &budgets, double swa,
                          uint64_t floor_pages) {
  kvs_split_request r{};
  r.geometry = &g;
  r.widths = nullptr;
  r.swa_ratio = swa;
  r.page = P;
  r.floor_win_pages = floor_pages;
  r.n_scratch = 1;
  r.n_stages = budgets.size();
  r.stage_budgets = budgets.data();
  return r;
}

// The most pages one device holds with layers [first, end): core's solve,
// or 0 when even the minimal pool does not fit.
uint64_t range_weights(const kvs_split_request &r, size_t first, size_t end) {
  uint64_t sum = 0;
  for (size_t i = first; r.layer_weight_bytes != nullptr && i < end; i++) {
    sum += r.layer_weight_bytes[i];
  }
  return sum;
}

uint64_t alone(const kvs_split_request &r, size_t first, size_t end, uint64_t budget) {
  uint64_t weights = range_weights(r, first, end);
  if (budget <= weights) return 0;
  budget -= weights;
  kvs_cost_terms t;
  EXPECT_EQ(kvs_cost_terms_make(r.geometry, first, end, nullptr, &t, nullptr), KVS_OK);
  kvs_pool_sizes s;
  if (kvs_cost_solve_num_pages_terms(budget, &t, r.swa_ratio, r.floor_win_pages, r.page,
                                     r.n_scratch, &s, nullptr, nullptr) != KVS_OK) {
    return 0;
  }
  return kvs_pool_sizes_num_pages(&s);
}

struct Brute {
  uint64_t best_pages = 0;         // 0: no split holds the minimal pool
  uint64_t best_min_headroom = 0;  // among splits holding best_pages
  size_t optimal_splits = 0;
};

// Every way to cut L layers into S non-empty contiguous stages.
Brute brute_force(const kvs_split_request &r) {
  size_t L = kvs_geometry_layer_count(r.geometry), S = r.n_stages;
  Brute b;
  std::vector<size_t> cut(S + 1);
  cut[0] = 0;
  cut[S] = L;
  std::vector<std::pair<uint64_t, std::vector<size_t>>> scored;
  std::function<void(size_t)> rec = [&](size_t s) {
    if (s == S) {
      uint64_t pages = UINT64_MAX;
      for (size_t i = 0; i < S; i++) {
        pages = std::min(pages, alone(r, cut[i], cut[i + 1], r.stage_budgets[i]));
      }
      scored.push_back({pages, cut});
      return;
    }
    for (size_t c = cut[s - 1] + 1; c + (S - s) <= L; c++) {
      cut[s] = c;
      rec(s + 1);
    }
  };
  if (S == 1) {
    scored.push_back({alone(r, 0, L, r.stage_budgets[0]), cut});
  } else {
    rec(1);
  }
  for (auto &[pages, c] : scored) b.best_pages = std::max(b.best_pages, pages);
  if (b.best_pages == 0) return b;
  for (auto &[pages, c] : scored) {
    if (pages != b.best_pages) continue;
    b.optimal_splits++;
    uint64_t min_headroom = UINT64_MAX;
    for (size_t i = 0; i < S; i++) {
      kvs_pool_breakdown bytes;
      EXPECT_EQ(kvs_split_range_bytes(&r, c[i], c[i + 1], pages, nullptr, &bytes, nullptr, nullptr),
                KVS_OK);
      min_headroom = std::min(min_headroom,
                              r.stage_budgets[i] - range_weights(r, c[i], c[i + 1]) - bytes.total);
    }
    b.best_min_headroom = std::max(b.best_min_headroom, min_headroom);
  }
  return b;
}

// The split's own claims, checked against core alone.
void expect_consistent(const kvs_split_request &r, const kvs_split &split) {
  size_t L = kvs_geometry_layer_count(r.geometry);
  ASSERT_EQ(split.n_stages, r.n_stages);
  EXPECT_EQ(split.stages[0].first, 0u);
  EXPECT_EQ(split.stages[split.n_stages - 1].end, L);
  EXPECT_EQ(split.full_token, split.num_pages * P);
  uint64_t limit = UINT64_MAX;
  for (size_t s = 0; s < split.n_stages; s++) {
    const kvs_stage_plan &st = split.stages[s];
    if (s > 0) {
      EXPECT_EQ(st.first, split.stages[s - 1].end);
    }
    EXPECT_LT(st.first, st.end);
    kvs_cost_terms t;
    ASSERT_EQ(kvs_cost_terms_make(r.geometry, st.first, st.end, nullptr, &t, nullptr), KVS_OK);
    EXPECT_EQ(st.terms.n_layers, t.n_layers);
    EXPECT_EQ(st.terms.n_csa, t.n_csa);
    EXPECT_EQ(st.terms.n_hca, t.n_hca);
    kvs_pool_sizes sizes;
    ASSERT_EQ(kvs_pool_sizes_compute_terms(split.num_pages, &t, r.swa_ratio, P, split.n_win_pages,
                                           &sizes, nullptr),
              KVS_OK);
    kvs_pool_breakdown b;
    ASSERT_EQ(kvs_pool_sizes_bytes_terms(&sizes, &t, r.n_scratch, &b, nullptr), KVS_OK);
    EXPECT_EQ(st.bytes.total, b.total);
    EXPECT_EQ(st.bytes.window, b.window);
    EXPECT_EQ(st.bytes.compressed, b.compressed);
    EXPECT_EQ(st.bytes.indexer, b.indexer);
    EXPECT_EQ(st.bytes.state, b.state);
    EXPECT_EQ(st.bytes.index_state, b.index_state);
    EXPECT_EQ(st.bytes.mapping, b.mapping);
    EXPECT_EQ(st.bytes.scratch, b.scratch);
    EXPECT_EQ(st.weight_bytes, range_weights(r, st.first, st.end));
    EXPECT_LE(st.bytes.total + st.weight_bytes, r.stage_budgets[s]);
    EXPECT_EQ(st.budget, r.stage_budgets[s]);
    // Each stage's own solve agrees on the window and holds >= the count.
    uint64_t own = alone(r, st.first, st.end, r.stage_budgets[s]);
    EXPECT_EQ(st.max_pages, own);
    EXPECT_GE(own, split.num_pages);
    limit = std::min(limit, own);
  }
  // No stage can hold more in this split than the common count allows.
  EXPECT_EQ(limit, split.num_pages);
}

kvs_geometry random_geometry(std::mt19937_64 &rng, size_t n_layers) {
  static const uint32_t kinds[] = {0, 4, 128};
  std::vector<uint32_t> ratios(n_layers);
  for (uint32_t &r : ratios) r = kinds[rng() % 3];
  kvs_geometry g;
  EXPECT_EQ(kvs_geometry_init(&g, 64 * (1 + rng() % 8), 32 * (1 + rng() % 4), n_layers,
                              ratios.data(), ratios.size(), nullptr),
            KVS_OK);
  return g;
}

}  // namespace

// 400 random small cases: layers 1..9, 1..4 stages, heterogeneous budgets
// from "too small" to roomy, several window ratios and floors.
TEST(StageSplit, matches_brute_force_on_random_small_cases) {
  std::mt19937_64 rng(20240611);
  const double swas[] = {0.0, 0.125, 0.5, 1.0};
  int solved = 0, refused = 0;
  for (int c = 0; c < 400; c++) {
    size_t L = 1 + rng() % 9;
    kvs_geometry g = random_geometry(rng, L);
    size_t S = 1 + rng() % std::min<size_t>(L, 4);
    double swa = swas[rng() % 4];
    uint64_t floor_pages = rng() % 12;
    // Around what the whole stack needs for a few hundred pages.
    kvs_split_request probe = request(g, {1}, swa, floor_pages);
    kvs_pool_breakdown whole;
    ASSERT_EQ(
        kvs_split_range_bytes(&probe, 0, L, 64 + rng() % 512, nullptr, &whole, nullptr, nullptr),
        KVS_OK);
    std::vector<uint64_t> budgets(S);
    for (uint64_t &b : budgets) b = whole.total / (1 + rng() % (2 * S)) + rng() % 4096;
    kvs_split_request r = request(g, budgets, swa, floor_pages);
    Brute expect = brute_force(r);
    kvs_split split;
    kvs_split_shortfall shortfall;
    kvs_error err;
    kvs_status status = kvs_split_solve(&r, &split, &shortfall, &err);
    SCOPED_TRACE("case " + std::to_string(c) + ": " + std::to_string(L) + " layers, " +
                 std::to_string(S) + " stages");
    if (expect.best_pages == 0) {
      EXPECT_EQ(status, KVS_ERR_BUDGET_TOO_SMALL) << err.message;
      EXPECT_GT(shortfall.needed_bytes, shortfall.available_bytes);
      EXPECT_EQ(shortfall.available_bytes, budgets[shortfall.stage]);
      refused++;
      continue;
    }
    ASSERT_EQ(status, KVS_OK) << err.message;
    EXPECT_EQ(split.num_pages, expect.best_pages);
    expect_consistent(r, split);
    uint64_t min_headroom = UINT64_MAX;
    for (size_t s = 0; s < S; s++) {
      min_headroom = std::min(min_headroom, budgets[s] - split.stages[s].bytes.total);
    }
    EXPECT_EQ(min_headroom, expect.best_min_headroom) << "the tie-break is optimal too";
    solved++;
  }
  EXPECT_GT(solved, 200);
  EXPECT_GT(refused, 5);
}

// Layer weights: each stage's budget covers its layers' weights and its
// pool, so heavy layers move the cut. 300 random cases against every split.
TEST(StageSplit, prices_layer_weights_exactly) {
  std::mt19937_64 rng(20261130);
  int solved = 0, refused = 0, moved = 0;
  for (int c = 0; c < 300; c++) {
    size_t L = 2 + rng() % 8;
    kvs_geometry g = random_geometry(rng, L);
    size_t S = 2 + rng() % std::min<size_t>(L - 1, 3);
    uint64_t floor_pages = rng() % 12;
    kvs_split_request probe = request(g, {1}, 0.125, floor_pages);
    kvs_pool_breakdown whole;
    ASSERT_EQ(
        kvs_split_range_bytes(&probe, 0, L, 64 + rng() % 512, nullptr, &whole, nullptr, nullptr),
        KVS_OK);
    std::vector<uint64_t> weights(L);
    for (uint64_t &w : weights) w = rng() % 3 == 0 ? whole.total / (1 + rng() % 4) : rng() % 4096;
    std::vector<uint64_t> budgets(S);
    for (uint64_t &b : budgets)
      b = (whole.total + whole.total / 2) / (1 + rng() % S) + rng() % 4096;
    kvs_split_request r = request(g, budgets, 0.125, floor_pages);
    r.layer_weight_bytes = weights.data();
    Brute expect = brute_force(r);
    kvs_split split;
    kvs_split_shortfall shortfall;
    kvs_error err;
    kvs_status status = kvs_split_solve(&r, &split, &shortfall, &err);
    SCOPED_TRACE("case " + std::to_string(c));
    if (expect.best_pages == 0) {
      EXPECT_EQ(status, KVS_ERR_BUDGET_TOO_SMALL) << err.message;
      EXPECT_GT(shortfall.needed_bytes, shortfall.available_bytes);
      EXPECT_NE(std::string(err.message).find("weights"), std::string::npos) << err.message;
      refused++;
      continue;
    }
    ASSERT_EQ(status, KVS_OK) << err.message;
    EXPECT_EQ(split.num_pages, expect.best_pages);
    expect_consistent(r, split);
    uint64_t min_headroom = UINT64_MAX;
    for (size_t s = 0; s < S; s++) {
      min_headroom = std::min(
          min_headroom, budgets[s] - split.stages[s].weight_bytes - split.stages[s].bytes.total);
    }
    EXPECT_EQ(min_headroom, expect.best_min_headroom);
    // The same budgets without weights split differently in some cases.
    kvs_split_request bare = request(g, budgets, 0.125, floor_pages);
    kvs_split plain;
    if (kvs_split_solve(&bare, &plain, nullptr, nullptr) == KVS_OK) {
      for (size_t s = 0; s < S; s++) moved += plain.stages[s].end != split.stages[s].end;
    }
    solved++;
  }
  EXPECT_GT(solved, 100);
  EXPECT_GT(refused, 5);
  EXPECT_GT(moved, 10) << "weights never moved a cut: the test does not exercise them";
}

// The real stacks, up to 4 stages (12k splits of DSV4-Flash), with
// heterogeneous budgets.
TEST(StageSplit, matches_brute_force_on_dsv4) {
  for (const char *model : {"dsv4-flash", "dsv4-pro"}) {
    kvs_geometry g = builtin(model);
    const std::vector<std::vector<uint64_t>> cases = {
        {80 * GiB},
        {80 * GiB, 80 * GiB},
        {141 * GiB, 80 * GiB},
        {80 * GiB, 96 * GiB, 141 * GiB},
        {40 * GiB, 40 * GiB, 40 * GiB, 40 * GiB},
        {24 * GiB, 80 * GiB, 80 * GiB, 141 * GiB},
    };
    for (const auto &budgets : cases) {
      if (std::string(model) == "dsv4-pro" && budgets.size() == 4) continue;  // 35k splits: slow
      kvs_split_request r = request(g, budgets, 0.125, 331);
      Brute expect = brute_force(r);
      kvs_split split;
      kvs_error err;
      ASSERT_EQ(kvs_split_solve(&r, &split, nullptr, &err), KVS_OK) << err.message;
      SCOPED_TRACE(std::string(model) + ", " + std::to_string(budgets.size()) + " stages");
      EXPECT_EQ(split.num_pages, expect.best_pages);
      expect_consistent(r, split);
    }
  }
}

// One stage is the single-device solve, field for field.
TEST(StageSplit, one_stage_is_the_single_device_solve) {
  kvs_geometry g = builtin("dsv4-flash");
  for (uint64_t budget : {uint64_t{20 * GiB}, uint64_t{80 * GiB}, uint64_t{126900000000}}) {
    std::vector<uint64_t> budgets = {budget};
    kvs_split_request r = request(g, budgets, 0.125, 331);
    kvs_split split;
    ASSERT_EQ(kvs_split_solve(&r, &split, nullptr, nullptr), KVS_OK);
    kvs_pool_sizes s;
    ASSERT_EQ(kvs_cost_solve_num_pages(budget, &g, 0.125, 331, P, 1, &s, nullptr, nullptr), KVS_OK);
    EXPECT_EQ(split.num_pages, kvs_pool_sizes_num_pages(&s));
    EXPECT_EQ(split.n_win_pages, s.n_win_pages);
    uint64_t bytes = 0;
    ASSERT_EQ(kvs_pool_sizes_bytes(&s, &g, 1, &bytes, nullptr), KVS_OK);
    EXPECT_EQ(split.stages[0].bytes.total, bytes);
  }
  // The published plan: 126.9e9 bytes (141 GB x 0.9) hold 40776 pages.
  std::vector<uint64_t> budgets = {126900000000ull};
  kvs_split_request r = request(g, budgets, 0.125, 331);
  kvs_split split;
  ASSERT_EQ(kvs_split_solve(&r, &split, nullptr, nullptr), KVS_OK);
  EXPECT_EQ(split.num_pages, 40776u);
}

// More budget anywhere never means fewer pages.
TEST(StageSplit, raising_a_budget_never_lowers_the_page_count) {
  kvs_geometry g = builtin("dsv4-pro");
  std::mt19937_64 rng(7);
  for (int c = 0; c < 30; c++) {
    std::vector<uint64_t> budgets(1 + rng() % 8);
    for (uint64_t &b : budgets) b = (20 + rng() % 120) * GiB;
    kvs_split_request r = request(g, budgets, 0.125, 331);
    kvs_split before, after;
    ASSERT_EQ(kvs_split_solve(&r, &before, nullptr, nullptr), KVS_OK);
    budgets[rng() % budgets.size()] += (1 + rng() % 8) * GiB;
    ASSERT_EQ(kvs_split_solve(&r, &after, nullptr, nullptr), KVS_OK);
    EXPECT_GE(after.num_pages, before.num_pages);
    expect_consistent(r, after);
  }
}

// The shortfall names the stage that cannot hold the minimal pool.
TEST(StageSplit, too_small_a_budget_names_its_stage) {
  kvs_geometry g = builtin("dsv4-flash");
  std::vector<uint64_t> budgets = {80 * GiB, 16ull << 20, 80 * GiB};
  kvs_split_request r = request(g, budgets, 0.125, 331);
  kvs_split split;
  split.num_pages = 12345;
  kvs_split_shortfall shortfall;
  kvs_error err;
  ASSERT_EQ(kvs_split_solve(&r, &split, &shortfall, &err), KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_EQ(split.num_pages, 12345u);  // untouched
  EXPECT_EQ(shortfall.stage, 1u);
  EXPECT_EQ(shortfall.available_bytes, 16ull << 20);
  EXPECT_EQ(shortfall.min_pages, 331u);
  // One layer's window alone at the minimal pool is 331 x 128 x 1 KiB > 16 MiB.
  EXPECT_EQ(shortfall.end - shortfall.first, 1u);
  EXPECT_GT(shortfall.needed_bytes, shortfall.available_bytes);
  EXPECT_NE(std::string(err.message).find("stage 1 (layers "), std::string::npos) << err.message;
  EXPECT_NE(std::string(err.message).find("has a budget of 16777216 bytes"), std::string::npos)
      << err.message;
}

TEST(StageSplit, bad_requests_are_refused) {
  kvs_geometry g = builtin("dsv4-flash");
  std::vector<uint64_t> budgets(44, 80 * GiB);
  kvs_split_request r = request(g, budgets, 0.125, 331);
  kvs_split split;
  kvs_error err;
  EXPECT_EQ(kvs_split_solve(&r, &split, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(err.message),
            "44 pipeline stages: each stage needs at least one of the 43 layers (and at most 64 "
            "stages are planned)");
  r.n_stages = 0;
  EXPECT_EQ(kvs_split_solve(&r, &split, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  r.n_stages = 2;
  r.page = 104;  // a multiple of 8, not of 128: names the first HCA layer
  EXPECT_EQ(kvs_split_solve(&r, &split, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("of layer 3"), std::string::npos) << err.message;
  EXPECT_EQ(kvs_split_solve(nullptr, &split, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
}

// kvs_split_holds answers "does the solve's split hold N pages?" without
// solving: on 300 random small cases and DSV4-Flash and -Pro at 1 to 8
// stages (uniform and unequal budgets, with and without layer weights,
// footprint-free), for page counts around the solve's answer and far
// from it, holds(N) is exactly (the solve found a split && its num_pages
// >= N); a budget too small for the minimal pool holds nothing.
TEST(StageSplit, holds_is_the_solves_answer) {
  std::mt19937_64 rng(20261202);
  size_t asked = 0, held = 0, refused = 0;
  auto check = [&](const kvs_split_request &r) {
    kvs_split split;
    kvs_error err;
    bool solved = kvs_split_solve(&r, &split, nullptr, &err) == KVS_OK;
    refused += !solved;
    uint64_t n = solved ? split.num_pages : 64;
    for (uint64_t want : {uint64_t{0}, uint64_t{1}, uint64_t{2}, r.floor_win_pages, n / 2, n - 1, n,
                          n + 1, 2 * n, uint64_t{1} << 40}) {
      bool holds = !solved;
      ASSERT_EQ(kvs_split_holds(&r, want, &holds, &err), KVS_OK) << err.message;
      EXPECT_EQ(holds, solved && split.num_pages >= want)
          << want << " pages, the solve " << (solved ? "found " + std::to_string(n) : "failed");
      asked++;
      held += holds;
    }
  };
  for (int c = 0; c < 300; c++) {
    size_t L = 1 + rng() % 9;
    kvs_geometry g = random_geometry(rng, L);
    size_t S = 1 + rng() % std::min<size_t>(L, 4);
    double swa = (double)(rng() % 5) / 8.0;
    uint64_t floor_pages = rng() % 12;
    kvs_split_request probe = request(g, {1}, swa, floor_pages);
    kvs_pool_breakdown whole;
    ASSERT_EQ(
        kvs_split_range_bytes(&probe, 0, L, 64 + rng() % 512, nullptr, &whole, nullptr, nullptr),
        KVS_OK);
    std::vector<uint64_t> budgets(S);
    for (uint64_t &b : budgets) b = whole.total / (1 + rng() % (2 * S)) + rng() % 4096;
    std::vector<uint64_t> weights(L);
    for (uint64_t &w : weights) w = rng() % 3 == 0 ? 0 : whole.total / (8 + rng() % 64);
    kvs_split_request r = request(g, budgets, swa, floor_pages);
    if (rng() % 2 == 0) r.layer_weight_bytes = weights.data();
    SCOPED_TRACE("case " + std::to_string(c));
    check(r);
  }
  for (const char *name : {"dsv4-flash", "dsv4-pro"}) {
    kvs_geometry g = builtin(name);
    for (size_t S : {1, 2, 4, 8}) {
      std::vector<uint64_t> uniform(S, 40 * GiB), unequal(S);
      for (size_t s = 0; s < S; s++) unequal[s] = (12 + 9 * s) * GiB;
      for (const std::vector<uint64_t> *b : {&uniform, &unequal}) {
        SCOPED_TRACE(std::string(name) + ", " + std::to_string(S) + " stages");
        check(request(g, *b, 0.125, 72));
      }
    }
  }
  EXPECT_GT(held, asked / 4);
  EXPECT_GT(refused, 3u);
}

// The seed's tiered cost model cases, ported by name and value, plus the
// properties the C port adds (no overflow, the fast solve equals a plain
// exact search).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <string>

#include "core/cost_model.h"
#include "tests/core/fixtures.h"

using namespace kvs_test;

namespace {

uint64_t cache_per_page(const kvs_geometry &g, double swa) {
  uint64_t out = 0;
  kvs_error err;
  EXPECT_EQ(kvs_cost_cache_per_page(&g, swa, P, &out, &err), KVS_OK) << err.message;
  return out;
}

uint64_t pool_bytes(const kvs_pool_sizes &s, const kvs_geometry &g, uint64_t n_scratch) {
  uint64_t out = 0;
  kvs_error err;
  EXPECT_EQ(kvs_pool_sizes_bytes(&s, &g, n_scratch, &out, &err), KVS_OK) << err.message;
  return out;
}

uint64_t reserved(uint64_t max_running, bool radix) {
  uint64_t out = 0;
  EXPECT_EQ(kvs_cost_reserved_window_pages(max_running, radix, &out, nullptr), KVS_OK);
  return out;
}

uint64_t floor_pages(uint64_t max_seq_len, uint64_t max_running, bool radix) {
  uint64_t out = 0;
  EXPECT_EQ(kvs_cost_window_floor_pages(max_seq_len, max_running, radix, P, &out, nullptr), KVS_OK);
  return out;
}

uint64_t scaled(double ratio, uint64_t count) {
  uint64_t out = 0;
  EXPECT_EQ(kvs_cost_scale_count(ratio, count, &out, nullptr), KVS_OK);
  return out;
}

uint64_t div_ceil(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

kvs_pool_sizes solve(uint64_t available, const kvs_geometry &g, double swa, uint64_t floor,
                     uint64_t n_scratch) {
  kvs_pool_sizes s{};
  kvs_error err;
  EXPECT_EQ(kvs_cost_solve_num_pages(available, &g, swa, floor, P, n_scratch, &s, nullptr, &err),
            KVS_OK)
      << err.message;
  return s;
}

}  // namespace

TEST(CostModel, ring_sizes_are_fixed_per_ratio) {
  uint64_t ring = 0;
  ASSERT_EQ(kvs_ring_size_for_ratio(4, &ring, nullptr), KVS_OK);
  EXPECT_EQ(ring, 8u);
  ASSERT_EQ(kvs_ring_size_for_ratio(128, &ring, nullptr), KVS_OK);
  EXPECT_EQ(ring, 128u);
}

// The seed panics with "no ring for ratio 8"; C returns the error instead.
TEST(CostModel, an_unsupported_ratio_has_no_ring) {
  uint64_t ring = 5;
  kvs_error err;
  EXPECT_EQ(kvs_ring_size_for_ratio(8, &ring, &err), KVS_ERR_UNKNOWN_RATIO);
  EXPECT_NE(std::string(err.message).find("no ring for ratio 8"), std::string::npos) << err.message;
  EXPECT_EQ(ring, 5u);
}

TEST(CostModel, the_reserved_window_pages_follow_the_code_not_the_docstring) {
  EXPECT_EQ(reserved(2, true), 2u * 3 + 3 * 2 + 1);
  EXPECT_EQ(reserved(2, false), 2u * 3 + 1);
  EXPECT_NE(reserved(2, false), 2u * 2 + 1) << "not the docstring's 2 * mr + 1";
}

TEST(CostModel, the_window_floor_caps_the_prefill_reach_at_eight_pages) {
  // 2048 tokens is 16 pages of reach, capped at 8.
  EXPECT_EQ(floor_pages(2048, 2, true), 8 + reserved(2, true));
  // A short context pays only its own reach.
  EXPECT_EQ(floor_pages(256, 2, true), 2 + reserved(2, true));
  uint64_t out = 0;
  EXPECT_EQ(kvs_cost_window_floor_pages(256, 2, true, 0, &out, nullptr), KVS_ERR_INVALID_ARGUMENT);
}

TEST(CostModel, the_per_page_cost_sums_every_tier_over_the_layers) {
  // window 4 x round(0.5 x 128) x 16 = 4096
  // ratio-4 layers x2: 32x16 + 32x8 + round(0.5x8)x64 + round(0.5x8)x128
  // ratio-128 layer: 1x16 + round(0.5x128)x64
  EXPECT_EQ(cache_per_page(args(), 0.5), 4096u + 2 * (512 + 256 + 256 + 512) + (16 + 4096));
  // At ratio 0 only the full-anchored tiers remain: the solve's
  // undercounting bracket.
  EXPECT_EQ(cache_per_page(args(), 0.0), 2u * (512 + 256) + 16);
}

TEST(CostModel, the_ratio_scaling_rounds_halves_to_even) {
  kvs_geometry g = args();
  // The ratio-4 rings: round(0.0625 x 8) == round(0.5) == 0, not 1.
  EXPECT_EQ(cache_per_page(g, 0.0625), 4u * 8 * 16 + 2 * (512 + 256) + (16 + 8 * 64));
  // round(0.1875 x 8) == round(1.5) == 2, up to the even neighbour.
  EXPECT_EQ(cache_per_page(g, 0.1875),
            4u * 24 * 16 + 2 * (512 + 256 + 2 * 64 + 2 * 128) + (16 + 24 * 64));
  EXPECT_EQ(kvs_cost_round_half_even(0.5), 0.0);
  EXPECT_EQ(kvs_cost_round_half_even(1.5), 2.0);
  EXPECT_EQ(kvs_cost_round_half_even(2.5), 2.0);
  EXPECT_EQ(kvs_cost_round_half_even(2.5000001), 3.0);
  EXPECT_EQ(kvs_cost_round_half_even(-0.5), -0.0);
  EXPECT_EQ(kvs_cost_round_half_even(-1.5), -2.0);
}

TEST(CostModel, the_unit_costs_round_bytes_per_token_up) {
  uint64_t out = 0;
  // full tier: 1024 mapping + 2 x 768 + 16 = 2576 per page -> 20.125
  ASSERT_EQ(kvs_cost_kv_unit_bytes(&(const kvs_geometry &)args(), P, &out, nullptr), KVS_OK);
  EXPECT_EQ(out, 21u);
  // window tier: 8192 + 2 x 1536 + 8192 = 19456 per page -> exact
  kvs_geometry g = args();
  ASSERT_EQ(kvs_cost_window_unit_bytes(&g, P, &out, nullptr), KVS_OK);
  EXPECT_EQ(out, 152u);
}

TEST(CostModel, the_window_tier_is_sized_independently_of_the_full_anchor) {
  kvs_geometry g = args();
  kvs_pool_sizes s = sizes(64, g, 0.1);
  EXPECT_EQ(s.full_token, 64 * P);
  // round(0.1 x 8192) = 819 slots -> ceil to 7 whole pages.
  EXPECT_EQ(s.n_win_pages, 7u);
  EXPECT_EQ(s.n_win_slots, 7 * P);

  bool present = true;
  kvs_layer_sizes layer;
  ASSERT_EQ(kvs_pool_sizes_layer(&s, &g, 0, &present, &layer, nullptr), KVS_OK);
  EXPECT_FALSE(present) << "a ratio-0 layer has no tiers";

  ASSERT_EQ(kvs_pool_sizes_layer(&s, &g, 1, &present, &layer, nullptr), KVS_OK);
  ASSERT_TRUE(present);
  EXPECT_EQ(layer.cmp_blocks, 64 * P / 4) << "full-anchored";
  EXPECT_TRUE(layer.has_indexer);
  EXPECT_EQ(layer.idx_blocks, 64 * P / 4);
  EXPECT_EQ(layer.state_slots, 7u * 8) << "window-anchored";
  EXPECT_EQ(layer.idx_state_slots, 7u * 8);

  ASSERT_EQ(kvs_pool_sizes_layer(&s, &g, 2, &present, &layer, nullptr), KVS_OK);
  ASSERT_TRUE(present);
  EXPECT_EQ(layer.cmp_blocks, 64 * P / 128);
  EXPECT_FALSE(layer.has_indexer);
  EXPECT_EQ(layer.state_slots, 7u * 128);
}

TEST(CostModel, an_explicit_window_is_capped_at_the_full_history) {
  kvs_geometry g = args();
  EXPECT_EQ(sizes(8, g, 0.5, 64).n_win_pages, 8u)
      << "a window past the history is bytes nobody can address";
  // And a ratio over 1.0 is capped the same way.
  EXPECT_EQ(sizes(8, g, 4.0).n_win_pages, 8u);
}

TEST(CostModel, the_pool_bytes_are_the_sum_of_every_allocated_row) {
  kvs_geometry g = args();
  kvs_pool_sizes s = sizes(64, g, 0.1, 21);
  EXPECT_EQ(pool_bytes(s, g, 1), expected_bytes(64, 21, 1));
  // Each scratch row is really allocated, so each is really priced.
  EXPECT_EQ(pool_bytes(s, g, 3) - pool_bytes(s, g, 1), 2u * 64);

  // The per-tier breakdown sums to the total and puts each row where it lives.
  kvs_cost_terms t;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 4, nullptr, &t, nullptr), KVS_OK);
  kvs_pool_breakdown b;
  ASSERT_EQ(kvs_pool_sizes_bytes_terms(&s, &t, 1, &b, nullptr), KVS_OK);
  EXPECT_EQ(b.total, expected_bytes(64, 21, 1));
  EXPECT_EQ(b.window + b.compressed + b.indexer + b.state + b.index_state + b.mapping + b.scratch,
            b.total);
  EXPECT_EQ(b.window, 4 * 21 * P * 16);
  EXPECT_EQ(b.mapping, 64 * P * 8);
  EXPECT_EQ(b.scratch, 64u + 456u);
}

TEST(CostModel, one_window_page_costs_its_window_rows_and_the_rings_anchored_to_it) {
  kvs_geometry g = args();
  kvs_pool_sizes s = sizes(64, g, 0.1, 21);
  kvs_cost_terms t;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 4, nullptr, &t, nullptr), KVS_OK);
  kvs_pool_breakdown b;
  ASSERT_EQ(kvs_pool_sizes_bytes_terms(&s, &t, 1, &b, nullptr), KVS_OK);
  uint64_t page = 0;
  ASSERT_EQ(kvs_pool_sizes_window_page_bytes(&s, &t, &page, nullptr), KVS_OK);
  // Rings per page (the defaults): the window-anchored tiers over the pages.
  ASSERT_EQ(s.n_req_slots, 0u);
  EXPECT_EQ(page * 21, b.window + b.state + b.index_state);
  EXPECT_EQ(page, 19456u);  // expected_bytes: 19456 B per window page
  // Rings per request cost nothing per window page.
  kvs_row_widths w = kvs_row_widths_default(&g);
  w.state_rings = KVS_STATE_RINGS_PER_REQUEST;
  w.n_req_slots = 5;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 4, &w, &t, nullptr), KVS_OK);
  kvs_pool_sizes r;
  ASSERT_EQ(kvs_pool_sizes_compute_terms(64, &t, 0.1, P, 21, &r, nullptr), KVS_OK);
  ASSERT_EQ(kvs_pool_sizes_window_page_bytes(&r, &t, &page, nullptr), KVS_OK);
  EXPECT_EQ(page, 4 * P * 16);
}

TEST(CostModel, the_window_pages_left_are_the_pools_past_the_dummy_and_the_reserve) {
  uint64_t left = 99;
  ASSERT_EQ(kvs_cost_window_pages_left(100, 2, true, &left, nullptr), KVS_OK);
  EXPECT_EQ(left, 100 - 1 - reserved(2, true));
  ASSERT_EQ(kvs_cost_window_pages_left(100, 2, false, &left, nullptr), KVS_OK);
  EXPECT_EQ(left, 100 - 1 - reserved(2, false));
  // The reserve takes every page: none left, never a wrapped count.
  ASSERT_EQ(kvs_cost_window_pages_left(reserved(2, true) + 1, 2, true, &left, nullptr), KVS_OK);
  EXPECT_EQ(left, 0u);
  ASSERT_EQ(kvs_cost_window_pages_left(0, 2, true, &left, nullptr), KVS_OK);
  EXPECT_EQ(left, 0u);
}

TEST(CostModel, the_pool_bytes_refuse_sizes_built_for_another_stack) {
  kvs_geometry g = args();
  kvs_pool_sizes s = sizes(64, g, 0.1, 21);
  kvs_geometry other = make_geometry(8, 4, 3, {0, 4, 128});
  uint64_t out = 0;
  kvs_error err;
  EXPECT_EQ(kvs_pool_sizes_bytes(&s, &other, 1, &out, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("4-layer stack, not a 3-layer one"), std::string::npos)
      << err.message;
}

TEST(CostModel, a_ratio_that_does_not_divide_the_page_is_refused_naming_the_layer) {
  kvs_geometry g = args();
  kvs_pool_sizes s;
  kvs_error err;
  EXPECT_EQ(kvs_pool_sizes_compute(8, &g, 0.5, 64, KVS_WINDOW_FROM_RATIO, &s, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("ratio 128 of layer 2"), std::string::npos)
      << err.message;
}

// A ratio-4 ring has 8 rows, located by the position modulo 8: at a P that
// 8 does not divide, a window row rebased by whole pages would put a
// position in another ring row (its ratio 4 dividing P is not enough).
TEST(CostModel, a_page_the_ratio_4_ring_does_not_divide_is_refused_naming_the_layer) {
  kvs_geometry g = make_geometry(8, 4, 3, {0, 0, 4});
  kvs_pool_sizes s;
  kvs_error err;
  for (uint64_t page : {4u, 12u, 36u}) {
    EXPECT_EQ(kvs_pool_sizes_compute(8, &g, 0.5, page, KVS_WINDOW_FROM_RATIO, &s, &err),
              KVS_ERR_INVALID_ARGUMENT)
        << page;
    EXPECT_NE(std::string(err.message)
                  .find("P=" + std::to_string(page) +
                        " must be a multiple of 8 on a model with ratio-4 layers (layer 2)"),
              std::string::npos)
        << err.message;
  }
  EXPECT_EQ(kvs_pool_sizes_compute(8, &g, 0.5, 8, KVS_WINDOW_FROM_RATIO, &s, &err), KVS_OK)
      << err.message;
  kvs_cost_terms t;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 3, nullptr, &t, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_pool_sizes_compute_terms(8, &t, 0.5, 20, KVS_WINDOW_FROM_RATIO, &s, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("P=20 must be a multiple of 8"), std::string::npos)
      << err.message;
  // Without ratio-4 layers no ring asks anything of P.
  kvs_geometry window_only = make_geometry(8, 4, 2, {0, 0});
  EXPECT_EQ(kvs_pool_sizes_compute(8, &window_only, 0.5, 4, KVS_WINDOW_FROM_RATIO, &s, &err),
            KVS_OK)
      << err.message;
}

TEST(CostModel, dividing_the_budget_by_the_per_page_cost_overshoots_it) {
  kvs_geometry g = args();
  uint64_t floor = 21, available = 500000;
  kvs_pool_sizes solved = solve(available, g, 0.5, floor, 1);

  uint64_t naive = available / (cache_per_page(g, 0.5) + P * KVS_INT64_BYTES);
  EXPECT_EQ(naive, 40u);
  kvs_pool_sizes naive_sizes = sizes(naive, g, 0.5, std::max(floor, div_ceil(naive, 2)));
  EXPECT_GT(pool_bytes(naive_sizes, g, 1), available)
      << "the division must be the one that overshoots";

  EXPECT_EQ(kvs_pool_sizes_num_pages(&solved), 35u);
  EXPECT_LE(pool_bytes(solved, g, 1), available);
}

TEST(CostModel, a_small_budget_pins_the_window_at_its_floor_and_shrinks_the_full_anchor) {
  kvs_geometry g = args();
  uint64_t floor = 21, available = 900000;
  kvs_pool_sizes solved = solve(available, g, 0.1, floor, 1);

  EXPECT_EQ(solved.n_win_pages, floor) << "the window pinned at its floor";
  EXPECT_EQ(kvs_pool_sizes_num_pages(&solved), 190u) << "the full anchor took the rest";
  EXPECT_GT(kvs_pool_sizes_num_pages(&solved), solved.n_win_pages * 4);
  bool present = false;
  kvs_layer_sizes layer;
  ASSERT_EQ(kvs_pool_sizes_layer(&solved, &g, 1, &present, &layer, nullptr), KVS_OK);
  EXPECT_EQ(layer.cmp_blocks, 190 * P / 4) << "the full-anchored tiers cover the history";

  double inflated = double(floor) / double(std::max<uint64_t>(floor, 2));  // 1.0
  kvs_pool_sizes inflated_sizes = sizes(kvs_pool_sizes_num_pages(&solved), g, inflated);
  EXPECT_GT(inflated_sizes.n_win_pages, solved.n_win_pages);
  EXPECT_GT(pool_bytes(inflated_sizes, g, 1), available)
      << "inflating swa_ratio to carry the floor busts the budget";
}

TEST(CostModel, the_solved_pool_is_the_largest_that_fits) {
  kvs_geometry g = args();
  uint64_t available = 900000;
  kvs_pool_sizes solved = solve(available, g, 0.1, 21, 1);
  EXPECT_LE(pool_bytes(solved, g, 1), available);

  uint64_t next = kvs_pool_sizes_num_pages(&solved) + 1;
  kvs_pool_sizes one_more =
      sizes(next, g, 0.1, std::max<uint64_t>(21, div_ceil(scaled(0.1, next * P), P)));
  EXPECT_GT(pool_bytes(one_more, g, 1), available);
}

TEST(CostModel, a_budget_below_the_minimal_pool_is_refused_at_config_time) {
  kvs_geometry g = args();
  kvs_pool_sizes out{};
  out.page = 12345;
  kvs_budget_shortfall shortfall{};
  kvs_error err;
  EXPECT_EQ(kvs_cost_solve_num_pages(100000, &g, 0.1, 21, P, 1, &out, &shortfall, &err),
            KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_EQ(shortfall.min_pages, 21u);
  EXPECT_EQ(shortfall.floor_win_pages, 21u);
  EXPECT_EQ(shortfall.available_bytes, 100000u);
  EXPECT_GT(shortfall.needed_bytes, shortfall.available_bytes);
  EXPECT_EQ(shortfall.needed_bytes, expected_bytes(21, 21, 1));
  EXPECT_NE(std::string(err.message).find("working-set floor 21"), std::string::npos)
      << err.message;
  EXPECT_EQ(out.page, 12345u) << "a refused solve writes no sizes";
}

TEST(CostModel, the_auto_cost_model_is_affine_through_the_minimal_pool) {
  kvs_geometry g = args();
  uint64_t floor = 21;
  kvs_auto_cost cost;
  ASSERT_EQ(kvs_cost_auto_model(&g, 0.1, floor, P, 1, &cost, nullptr), KVS_OK);
  EXPECT_EQ(cost.cache_per_page, cache_per_page(g, 0.1) + P * KVS_INT64_BYTES);

  // The intercept reproduces the minimal pool's exact bytes, as an equality.
  uint64_t n0 = std::max<uint64_t>(floor, 2);
  uint64_t base = pool_bytes(sizes(n0, g, 0.1, floor), g, 1);
  EXPECT_EQ(cost.fixed_cache_size + n0 * cost.cache_per_page, base);

  uint64_t slack_pages = div_ceil(KVS_AUTO_KV_SLACK_BYTES, cost.cache_per_page);
  EXPECT_EQ(cost.min_reserve_tokens, (n0 + slack_pages) * P);
}

// ---- beyond the seed ----

// The solve's affine guess and gallop must land exactly where the seed's
// plain bracket-and-bisect lands, for any budget, ratio and floor.
TEST(CostModel, the_fast_solve_equals_a_plain_exact_search) {
  std::mt19937_64 rng(20261130);
  kvs_geometry geometries[] = {args(), make_geometry(512, 128, 43, {}),
                               make_geometry(512, 128, 61, {})};
  ASSERT_EQ(kvs_geometry_builtin("dsv4-flash", &geometries[1], nullptr), KVS_OK);
  ASSERT_EQ(kvs_geometry_builtin("dsv4-pro", &geometries[2], nullptr), KVS_OK);
  const double ratios[] = {0.0, 0.0625, 0.1, 0.125, 0.1875, 0.5, 1.0, 4.0};
  for (int trial = 0; trial < 3000; trial++) {
    const kvs_geometry &g = geometries[trial % 3];
    double swa = ratios[rng() % 8];
    uint64_t floor = rng() % 400;
    uint64_t scratch = rng() % 100;
    int shift = 10 + int(rng() % 33);  // 1 KiB .. 4 TiB
    uint64_t available = (uint64_t(1) << shift) + rng() % (uint64_t(1) << shift);

    auto bytes_at = [&](uint64_t n, uint64_t *out) {
      uint64_t win = std::max(floor, div_ceil(scaled(swa, n * P), P));
      kvs_pool_sizes s;
      if (kvs_pool_sizes_compute(n, &g, swa, P, win, &s, nullptr) != KVS_OK) return false;
      return kvs_pool_sizes_bytes(&s, &g, scratch, out, nullptr) == KVS_OK;
    };
    uint64_t lo = std::max<uint64_t>(floor, 2), bytes = 0;
    kvs_pool_sizes solved{};
    kvs_status status =
        kvs_cost_solve_num_pages(available, &g, swa, floor, P, scratch, &solved, nullptr, nullptr);
    ASSERT_TRUE(bytes_at(lo, &bytes));
    if (bytes > available) {
      EXPECT_EQ(status, KVS_ERR_BUDGET_TOO_SMALL);
      continue;
    }
    ASSERT_EQ(status, KVS_OK);
    // The seed's search: bracket by doubling, then bisect.
    uint64_t hi = std::max<uint64_t>(lo, available / std::max<uint64_t>(cache_per_page(g, 0.0), 1));
    while (bytes_at(hi, &bytes) && bytes <= available) hi *= 2;
    while (lo < hi - 1) {
      uint64_t mid = (lo + hi) / 2;
      if (bytes_at(mid, &bytes) && bytes <= available)
        lo = mid;
      else
        hi = mid;
    }
    ASSERT_EQ(kvs_pool_sizes_num_pages(&solved), lo)
        << "available " << available << " swa " << swa << " floor " << floor;
    EXPECT_EQ(solved.n_win_pages, std::min(lo, std::max(floor, div_ceil(scaled(swa, lo * P), P))));
  }
}

TEST(CostModel, sizes_that_overflow_64_bits_are_refused_not_wrapped) {
  kvs_geometry g = args();
  kvs_pool_sizes s;
  kvs_error err;
  EXPECT_EQ(kvs_pool_sizes_compute(UINT64_MAX / 64, &g, 0.1, P, KVS_WINDOW_FROM_RATIO, &s, &err),
            KVS_ERR_OVERFLOW);
  s = sizes(uint64_t(1) << 55, g, 0.1, 21);  // 2^62 tokens x ~20 B
  uint64_t out = 0;
  EXPECT_EQ(kvs_pool_sizes_bytes(&s, &g, 1, &out, &err), KVS_ERR_OVERFLOW);
  // A budget of every byte there is still solves, to a pool that fits.
  kvs_pool_sizes solved = solve(UINT64_MAX, g, 0.1, 21, 1);
  ASSERT_EQ(kvs_pool_sizes_bytes(&solved, &g, 1, &out, &err), KVS_OK) << err.message;
  EXPECT_GT(kvs_pool_sizes_num_pages(&solved), uint64_t(1) << 40);
}

TEST(CostModel, a_bad_swa_ratio_or_page_is_refused) {
  kvs_geometry g = args();
  uint64_t out = 0;
  kvs_error err;
  EXPECT_EQ(kvs_cost_cache_per_page(&g, -0.1, P, &out, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("swa_ratio"), std::string::npos);
  EXPECT_EQ(kvs_cost_cache_per_page(&g, NAN, P, &out, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_cost_cache_per_page(&g, INFINITY, P, &out, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_cost_kv_unit_bytes(&g, 0, &out, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("page"), std::string::npos);
}

TEST(CostModel, a_layer_range_prices_only_its_own_tiers) {
  kvs_geometry g;
  ASSERT_EQ(kvs_geometry_builtin("dsv4-flash", &g, nullptr), KVS_OK);
  kvs_cost_terms all, front, back;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 43, nullptr, &all, nullptr), KVS_OK);
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 20, nullptr, &front, nullptr), KVS_OK);
  ASSERT_EQ(kvs_cost_terms_make(&g, 20, 43, nullptr, &back, nullptr), KVS_OK);
  EXPECT_EQ(front.n_layers + back.n_layers, all.n_layers);
  EXPECT_EQ(front.n_csa + back.n_csa, all.n_csa);
  EXPECT_EQ(front.n_hca + back.n_hca, all.n_hca);
  kvs_pool_sizes s;
  ASSERT_EQ(kvs_pool_sizes_compute_terms(1000, &front, 0.125, P, 200, &s, nullptr), KVS_OK);
  kvs_pool_breakdown bf, bb, ba;
  ASSERT_EQ(kvs_pool_sizes_bytes_terms(&s, &front, 4, &bf, nullptr), KVS_OK);
  s.n_layers = back.n_layers;
  ASSERT_EQ(kvs_pool_sizes_bytes_terms(&s, &back, 4, &bb, nullptr), KVS_OK);
  s.n_layers = all.n_layers;
  ASSERT_EQ(kvs_pool_sizes_bytes_terms(&s, &all, 4, &ba, nullptr), KVS_OK);
  // Each stage holds its own layers' tiers plus its own mapping copy.
  EXPECT_EQ(bf.total + bb.total, ba.total + ba.mapping + KVS_INT64_BYTES);
  kvs_error err;
  EXPECT_EQ(kvs_cost_terms_make(&g, 20, 44, nullptr, &front, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_EQ(kvs_cost_terms_make(&g, 5, 5, nullptr, &front, &err), KVS_ERR_OUT_OF_RANGE);
}

// ---- KV dtypes: fp8 rows priced to the byte ----

namespace {

// DSV4's published config: head_dim 512, qk_rope_head_dim 64,
// index_head_dim 128 (core/models/dsv4-flash.json).
constexpr uint64_t kDsv4QkRope = 64;

kvs_geometry flash() {
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_builtin("dsv4-flash", &g, &err), KVS_OK) << err.message;
  return g;
}

kvs_row_widths widths_for(const kvs_geometry &g, kvs_kv_dtype dtype) {
  kvs_row_widths w{};
  kvs_error err;
  EXPECT_EQ(kvs_row_widths_for(&g, dtype, kDsv4QkRope, &w, &err), KVS_OK) << err.message;
  return w;
}

bool same_widths(const kvs_row_widths &a, const kvs_row_widths &b) {
  return a.kv == b.kv && a.index == b.index && a.csa_state == b.csa_state &&
         a.hca_state == b.hca_state && a.idx_state == b.idx_state;
}

// Rows of a pool counted layer by layer from kvs_pool_sizes_layer: every
// KV row (window, compressed blocks and their scratch rows) and every
// indexer row (indexer blocks and their scratch rows), and the rest of the
// pool's bytes, which no KV dtype changes.
struct RowCount {
  uint64_t window_rows = 0;
  uint64_t cmp_rows = 0;
  uint64_t idx_rows = 0;
  uint64_t kv_scratch_rows = 0;
  uint64_t idx_scratch_rows = 0;
  uint64_t csa_state_rows = 0;  // ring slots plus one scratch slot per ring
  uint64_t hca_state_rows = 0;
  uint64_t idx_state_rows = 0;
  uint64_t kv_rows() const { return window_rows + cmp_rows + kv_scratch_rows; }
  uint64_t index_rows() const { return idx_rows + idx_scratch_rows; }
};

RowCount count_rows(const kvs_pool_sizes &s, const kvs_geometry &g, uint64_t n_scratch) {
  RowCount c;
  size_t n = kvs_geometry_layer_count(&g);
  c.window_rows = n * s.n_win_slots;
  for (size_t layer = 0; layer < n; layer++) {
    bool present = true;
    kvs_layer_sizes ls{};
    kvs_error err;
    EXPECT_EQ(kvs_pool_sizes_layer(&s, &g, layer, &present, &ls, &err), KVS_OK) << err.message;
    if (!present) continue;
    c.cmp_rows += ls.cmp_blocks;
    c.kv_scratch_rows += n_scratch;
    if (ls.ratio == KVS_CSA_RATIO) {
      c.csa_state_rows += ls.state_slots + 1;
    } else {
      c.hca_state_rows += ls.state_slots + 1;
    }
    if (ls.has_indexer) {
      c.idx_rows += ls.idx_blocks;
      c.idx_scratch_rows += n_scratch;
      c.idx_state_rows += ls.idx_state_slots + 1;
    }
  }
  return c;
}

}  // namespace

TEST(KvDtype, bf16_and_fp8_parse_and_nothing_else_does) {
  kvs_kv_dtype d = KVS_KV_FP8;
  kvs_error err;
  ASSERT_EQ(kvs_kv_dtype_parse("bf16", &d, &err), KVS_OK) << err.message;
  EXPECT_EQ(d, KVS_KV_BF16);
  ASSERT_EQ(kvs_kv_dtype_parse("fp8", &d, &err), KVS_OK) << err.message;
  EXPECT_EQ(d, KVS_KV_FP8);
  EXPECT_STREQ(kvs_kv_dtype_name(KVS_KV_BF16), "bf16");
  EXPECT_STREQ(kvs_kv_dtype_name(KVS_KV_FP8), "fp8");
  for (const char *text : {"fp16", "", "FP8", "fp8 ", "bf16\n", "fp8_e4m3"}) {
    SCOPED_TRACE(std::string("'") + text + "'");
    kvs_kv_dtype out = KVS_KV_FP8;
    EXPECT_EQ(kvs_kv_dtype_parse(text, &out, &err), KVS_ERR_PARSE);
    EXPECT_EQ(out, KVS_KV_FP8) << "a refusal writes nothing";
    EXPECT_NE(std::string(err.message).find("bf16"), std::string::npos) << err.message;
    EXPECT_NE(std::string(err.message).find("fp8"), std::string::npos) << err.message;
  }
  // No text is a NULL argument, refused as every NULL is.
  kvs_kv_dtype out = KVS_KV_BF16;
  EXPECT_EQ(kvs_kv_dtype_parse(nullptr, &out, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out, KVS_KV_BF16);
}

TEST(KvDtype, bf16_widths_are_the_defaults) {
  for (const char *name : {"dsv4-flash", "dsv4-pro"}) {
    kvs_geometry g;
    ASSERT_EQ(kvs_geometry_builtin(name, &g, nullptr), KVS_OK);
    EXPECT_TRUE(same_widths(widths_for(g, KVS_KV_BF16), kvs_row_widths_default(&g))) << name;
  }
  kvs_geometry small = args();
  kvs_row_widths w{};
  ASSERT_EQ(kvs_row_widths_for(&small, KVS_KV_BF16, 0, &w, nullptr), KVS_OK)
      << "bf16 rows need no rope width";
  EXPECT_TRUE(same_widths(w, kvs_row_widths_default(&small)));
}

TEST(KvDtype, fp8_rows_on_dsv4_are_584_and_132_bytes_and_the_rings_stay_fp32) {
  kvs_geometry g = flash();
  kvs_row_widths w = widths_for(g, KVS_KV_FP8);
  // KV: 448 fp8 no-rope bytes + 64 bf16 rope values + 8 scale bytes.
  EXPECT_EQ(w.kv, (512u - 64u) + 64u * 2u + 8u);
  EXPECT_EQ(w.kv, 584u);
  // Indexer: 128 fp8 bytes + one fp32 scale per 128 values.
  EXPECT_EQ(w.index, 128u + 4u);
  EXPECT_EQ(w.index, 132u);
  // Rings hold fp32 kv|score, (1 + overlap) x width: 2*2*512*4 on CSA,
  // 2*1*512*4 on HCA, 2*2*128*4 for the indexer.
  EXPECT_EQ(w.csa_state, 8192u);
  EXPECT_EQ(w.hca_state, 4096u);
  EXPECT_EQ(w.idx_state, 2048u);
  kvs_row_widths d = kvs_row_widths_default(&g);
  EXPECT_EQ(d.kv, 1024u);
  EXPECT_EQ(d.index, 256u);
  EXPECT_EQ(w.csa_state, d.csa_state);
  EXPECT_EQ(w.hca_state, d.hca_state);
  EXPECT_EQ(w.idx_state, d.idx_state);
}

TEST(KvDtype, fp8_refuses_a_rope_width_outside_the_row_and_an_unblocked_indexer) {
  kvs_geometry g = flash();
  const kvs_row_widths sentinel = {1, 2, 3, 4, 5};
  for (uint64_t rope : {uint64_t(0), uint64_t(512), uint64_t(513)}) {
    SCOPED_TRACE(rope);
    kvs_row_widths w = sentinel;
    kvs_error err;
    EXPECT_EQ(kvs_row_widths_for(&g, KVS_KV_FP8, rope, &w, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.message).find("qk_rope_head_dim"), std::string::npos) << err.message;
    EXPECT_NE(std::string(err.message).find(std::to_string(rope)), std::string::npos)
        << err.message;
    EXPECT_TRUE(same_widths(w, sentinel));
  }
  // The widest rope part that leaves a no-rope value: 1 + 511*2 + 8.
  kvs_row_widths w{};
  ASSERT_EQ(kvs_row_widths_for(&g, KVS_KV_FP8, 511, &w, nullptr), KVS_OK);
  EXPECT_EQ(w.kv, 1u + 511u * 2u + 8u);

  kvs_geometry odd;
  const uint32_t ratios[] = {0, 4, 128, 4};
  ASSERT_EQ(kvs_geometry_init(&odd, 512, 96, 4, ratios, 4, nullptr), KVS_OK);
  w = sentinel;
  kvs_error err;
  EXPECT_EQ(kvs_row_widths_for(&odd, KVS_KV_FP8, kDsv4QkRope, &w, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("index_head_dim"), std::string::npos) << err.message;
  EXPECT_NE(std::string(err.message).find("96"), std::string::npos) << err.message;
  EXPECT_TRUE(same_widths(w, sentinel));
  // bf16 has no scale blocks: 96 is fine there.
  ASSERT_EQ(kvs_row_widths_for(&odd, KVS_KV_BF16, kDsv4QkRope, &w, nullptr), KVS_OK);
  EXPECT_EQ(w.index, 192u);
}

TEST(KvDtype, an_fp8_pool_is_priced_to_the_byte_from_its_rows) {
  kvs_geometry g = flash();
  const uint64_t page = 256, num_pages = 1000, n_scratch = 3;
  kvs_row_widths fp8 = widths_for(g, KVS_KV_FP8);
  kvs_cost_terms t8, t16;
  kvs_error err;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 43, &fp8, &t8, &err), KVS_OK) << err.message;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 43, nullptr, &t16, &err), KVS_OK) << err.message;
  kvs_pool_sizes s, s16;
  ASSERT_EQ(
      kvs_pool_sizes_compute_terms(num_pages, &t8, 0.1, page, KVS_WINDOW_FROM_RATIO, &s, &err),
      KVS_OK)
      << err.message;
  ASSERT_EQ(
      kvs_pool_sizes_compute_terms(num_pages, &t16, 0.1, page, KVS_WINDOW_FROM_RATIO, &s16, &err),
      KVS_OK)
      << err.message;
  // The dtype prices rows; it does not change how many there are.
  EXPECT_EQ(s.full_token, s16.full_token);
  EXPECT_EQ(s.n_win_pages, s16.n_win_pages);
  EXPECT_EQ(s.n_win_slots, s16.n_win_slots);
  EXPECT_EQ(s.n_layers, s16.n_layers);
  // 256000 tokens, a tenth of them windowed: 100 pages of 256 slots.
  EXPECT_EQ(s.full_token, 256000u);
  EXPECT_EQ(s.n_win_pages, 100u);
  EXPECT_EQ(s.n_win_slots, 25600u);

  RowCount rows = count_rows(s, g, n_scratch);
  // Hand counts for dsv4-flash (21 CSA, 20 HCA, 2 window-only layers).
  EXPECT_EQ(rows.window_rows, 43u * 25600u);
  EXPECT_EQ(rows.cmp_rows, 21u * 64000u + 20u * 2000u);
  EXPECT_EQ(rows.idx_rows, 21u * 64000u);
  EXPECT_EQ(rows.kv_scratch_rows, 41u * n_scratch);
  EXPECT_EQ(rows.idx_scratch_rows, 21u * n_scratch);

  kvs_pool_breakdown b8, b16;
  ASSERT_EQ(kvs_pool_sizes_bytes_terms(&s, &t8, n_scratch, &b8, &err), KVS_OK) << err.message;
  ASSERT_EQ(kvs_pool_sizes_bytes_terms(&s, &t16, n_scratch, &b16, &err), KVS_OK) << err.message;

  EXPECT_EQ(b8.window, s.n_win_slots * 584u * 43u);
  EXPECT_EQ(b8.window, rows.window_rows * 584u);
  EXPECT_EQ(b8.compressed, rows.cmp_rows * 584u);
  EXPECT_EQ(b8.indexer, rows.idx_rows * 132u);
  EXPECT_EQ(b8.indexer, (s.full_token / 4) * 132u * t8.n_csa);
  EXPECT_EQ(b8.state,
            rows.csa_state_rows * 8192u + rows.hca_state_rows * 4096u - (21u * 8192u + 20u * 4096u))
      << "ring slots only; their scratch slots are in scratch";
  EXPECT_EQ(b8.index_state, rows.idx_state_rows * 2048u - 21u * 2048u);
  EXPECT_EQ(b8.mapping, s.full_token * 8u);
  EXPECT_EQ(b8.scratch, rows.kv_scratch_rows * 584u + rows.idx_scratch_rows * 132u +
                            21u * (8192u + 2048u) + 20u * 4096u + 8u);
  const uint64_t expected_total = rows.kv_rows() * 584u + rows.index_rows() * 132u +
                                  rows.csa_state_rows * 8192u + rows.hca_state_rows * 4096u +
                                  rows.idx_state_rows * 2048u + (s.full_token + 1) * 8u;
  EXPECT_EQ(b8.total, expected_total);
  EXPECT_EQ(b8.total, b8.window + b8.compressed + b8.indexer + b8.state + b8.index_state +
                          b8.mapping + b8.scratch);

  // Only KV and indexer rows change width; rings, mapping and sentinel not.
  ASSERT_LT(b8.total, b16.total);
  EXPECT_EQ(b16.total - b8.total,
            (1024u - 584u) * rows.kv_rows() + (256u - 132u) * rows.index_rows());
  EXPECT_EQ(b8.state, b16.state);
  EXPECT_EQ(b8.index_state, b16.index_state);
  EXPECT_EQ(b8.mapping, b16.mapping);
}

TEST(KvDtype, fp8_rows_fit_more_pages_in_the_same_budget_and_the_solve_stays_exact) {
  kvs_geometry g = flash();
  kvs_row_widths fp8 = widths_for(g, KVS_KV_FP8);
  kvs_cost_terms t8, t16;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 43, &fp8, &t8, nullptr), KVS_OK);
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 43, nullptr, &t16, nullptr), KVS_OK);
  const uint64_t budget = 40ull << 30, floor = 21, n_scratch = 1;
  const double swa = 0.1;
  kvs_pool_sizes s8, s16;
  kvs_error err;
  ASSERT_EQ(
      kvs_cost_solve_num_pages_terms(budget, &t8, swa, floor, P, n_scratch, &s8, nullptr, &err),
      KVS_OK)
      << err.message;
  ASSERT_EQ(
      kvs_cost_solve_num_pages_terms(budget, &t16, swa, floor, P, n_scratch, &s16, nullptr, &err),
      KVS_OK)
      << err.message;
  EXPECT_GT(kvs_pool_sizes_num_pages(&s8), kvs_pool_sizes_num_pages(&s16));
  for (const kvs_cost_terms *t : {&t8, &t16}) {
    const kvs_pool_sizes &s = t == &t8 ? s8 : s16;
    SCOPED_TRACE(t == &t8 ? "fp8" : "bf16");
    kvs_pool_breakdown b;
    ASSERT_EQ(kvs_pool_sizes_bytes_terms(&s, t, n_scratch, &b, &err), KVS_OK) << err.message;
    EXPECT_LE(b.total, budget);
    // One page more, with the window the solve would give it, does not fit.
    uint64_t next = kvs_pool_sizes_num_pages(&s) + 1;
    uint64_t win = div_ceil(scaled(swa, next * P), P);
    if (win < floor) win = floor;
    kvs_pool_sizes bigger;
    ASSERT_EQ(kvs_pool_sizes_compute_terms(next, t, swa, P, win, &bigger, &err), KVS_OK)
        << err.message;
    ASSERT_EQ(kvs_pool_sizes_bytes_terms(&bigger, t, n_scratch, &b, &err), KVS_OK) << err.message;
    EXPECT_GT(b.total, budget);
  }
}

// ---- kvs_cost_solve: the planning entry point, which is `kvplan solve` ----

namespace {

kvs_pool_sizes entry_solve(uint64_t budget, const kvs_geometry &g,
                           const kvs_solve_options *options) {
  kvs_pool_sizes s{};
  kvs_error err;
  EXPECT_EQ(kvs_cost_solve(budget, &g, options, &s, nullptr, &err), KVS_OK) << err.message;
  return s;
}

uint64_t entry_pages(uint64_t budget, const kvs_geometry &g, const kvs_solve_options *options) {
  kvs_pool_sizes s = entry_solve(budget, g, options);
  return kvs_pool_sizes_num_pages(&s);
}

}  // namespace

// `kvplan solve --budget 80GiB` plans 53,653 pages of DSV4-Flash (the
// figure tests/tools/kvplan_solve_test.sh pins for the tool); the entry
// point with its defaults, or NULL options, is the same answer.
TEST(CostSolve, the_defaults_are_kvplan_solves_rings_per_request) {
  kvs_geometry g = flash();
  const uint64_t budget = 80ull << 30;
  kvs_solve_options o = KVS_SOLVE_OPTIONS_INIT;
  kvs_pool_sizes s = entry_solve(budget, g, &o);
  EXPECT_EQ(kvs_pool_sizes_num_pages(&s), 53653u);
  EXPECT_EQ(s.state_rings, KVS_STATE_RINGS_PER_REQUEST);
  EXPECT_EQ(s.n_req_slots, KVS_DEFAULT_MAX_RUNNING + 1);
  kvs_pool_sizes null_options = entry_solve(budget, g, nullptr);
  EXPECT_EQ(null_options.full_token, s.full_token);
  EXPECT_EQ(null_options.n_win_pages, s.n_win_pages);
}

// The seed's primitive keeps the seed's rings: asking the entry point for
// per-page rings gives the primitive's answer, 27,600 pages.
TEST(CostSolve, per_page_rings_are_the_seeds_primitive) {
  kvs_geometry g = flash();
  const uint64_t budget = 80ull << 30;
  kvs_solve_options o = KVS_SOLVE_OPTIONS_INIT;
  o.state_rings = KVS_STATE_RINGS_PER_PAGE;
  kvs_pool_sizes s = entry_solve(budget, g, &o);
  EXPECT_EQ(kvs_pool_sizes_num_pages(&s), 27600u);
  kvs_pool_sizes seed = solve(budget, g, KVS_DEFAULT_SWA_RATIO,
                              floor_pages(KVS_DEFAULT_MAX_SEQ_LEN, KVS_DEFAULT_MAX_RUNNING, true),
                              KVS_DEFAULT_N_SCRATCH);
  EXPECT_EQ(seed.full_token, s.full_token);
  EXPECT_EQ(seed.n_win_pages, s.n_win_pages);
}

// Each option moves the answer the way the tool's flag does; a floor given
// replaces the derived one.
TEST(CostSolve, the_options_are_kvplans_flags) {
  kvs_geometry g = flash();
  const uint64_t budget = 40ull << 30;
  kvs_solve_options o = KVS_SOLVE_OPTIONS_INIT;
  const uint64_t base = entry_pages(budget, g, &o);
  o.kv_dtype = KVS_KV_FP8;
  o.qk_rope_head_dim = 64;
  EXPECT_GT(entry_pages(budget, g, &o), base);
  o = KVS_SOLVE_OPTIONS_INIT;
  o.max_running = 256;  // more request slots and a larger floor
  kvs_pool_sizes more = entry_solve(budget, g, &o);
  EXPECT_LT(kvs_pool_sizes_num_pages(&more), base);
  EXPECT_EQ(more.n_req_slots, 257u);
  o = KVS_SOLVE_OPTIONS_INIT;
  o.floor_win_pages = floor_pages(KVS_DEFAULT_MAX_SEQ_LEN, KVS_DEFAULT_MAX_RUNNING, true);
  EXPECT_EQ(entry_pages(budget, g, &o), base);
}

// Versioned as every options struct: an older caller's shorter struct gets
// the defaults for what it lacks, a longer one is refused, and a pool for
// no running request is refused; *out is untouched on every refusal.
TEST(CostSolve, options_are_versioned_and_checked) {
  kvs_geometry g = flash();
  const uint64_t budget = 80ull << 30;
  kvs_solve_options o = KVS_SOLVE_OPTIONS_INIT;
  o.state_rings = KVS_STATE_RINGS_PER_PAGE;  // past the older caller's size
  o.size = offsetof(kvs_solve_options, state_rings);
  EXPECT_EQ(entry_pages(budget, g, &o), 53653u);

  kvs_pool_sizes out{};
  out.page = 77;
  kvs_error err;
  o = KVS_SOLVE_OPTIONS_INIT;
  o.size = sizeof o + 8;
  EXPECT_NE(kvs_cost_solve(budget, &g, &o, &out, nullptr, &err), KVS_OK);
  EXPECT_EQ(out.page, 77u);
  o = KVS_SOLVE_OPTIONS_INIT;
  o.max_running = 0;
  EXPECT_EQ(kvs_cost_solve(budget, &g, &o, &out, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("max_running"), std::string::npos) << err.message;
  EXPECT_EQ(out.page, 77u);
  kvs_budget_shortfall shortfall{};
  EXPECT_EQ(kvs_cost_solve(1000, &g, nullptr, &out, &shortfall, &err), KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_EQ(shortfall.available_bytes, 1000u);
  EXPECT_EQ(out.page, 77u);
}

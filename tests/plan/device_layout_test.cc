// The device carve on the CPU: with alignment 1 the tiers are core's exact
// pool bytes, contiguous; with alignment A every region starts on A and the
// gaps are the padding the plan counts; the padded solve is the largest
// pool that fits; the budget is free x ratio - reserve.
#include "plan/device_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "plan/device_budget.h"
#include "tests/backends/cuda/fixtures.h"

using namespace kvs_cuda_test;

namespace {

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

kvs_device_layout_options options(uint64_t alignment, uint64_t n_scratch = 1,
                                  uint64_t journal_capacity = 4096) {
  kvs_device_layout_options o = KVS_DEVICE_LAYOUT_OPTIONS_INIT;
  o.alignment = alignment;
  o.n_scratch = n_scratch;
  o.journal_capacity = journal_capacity;
  return o;
}

kvs_device_layout build(const kvs_geometry &g, const kvs_pool_sizes &s,
                        const kvs_device_layout_options &o, const kvs_row_widths *widths = nullptr,
                        size_t first = 0, size_t end = 0) {
  if (end == 0) end = kvs_geometry_layer_count(&g);
  kvs_device_layout l;
  kvs_error err;
  EXPECT_EQ(kvs_device_layout_build(&g, first, end, widths, &s, &o, &l, &err), KVS_OK)
      << err.message;
  return l;
}

kvs_pool_breakdown core_bytes(const kvs_geometry &g, const kvs_pool_sizes &s, uint64_t n_scratch,
                              const kvs_row_widths *widths = nullptr, size_t first = 0,
                              size_t end = 0) {
  if (end == 0) end = kvs_geometry_layer_count(&g);
  kvs_cost_terms terms;
  kvs_pool_breakdown b{};
  kvs_error err;
  EXPECT_EQ(kvs_cost_terms_make(&g, first, end, widths, &terms, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_pool_sizes_bytes_terms(&s, &terms, n_scratch, &b, &err), KVS_OK) << err.message;
  return b;
}

// Every region of the layout, in allocation order, through the public
// per-layer lookup.
std::vector<kvs_device_region> regions(const kvs_device_layout &l) {
  std::vector<kvs_device_region> out;
  kvs_device_region r;
  EXPECT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_MAPPING, 0, &r, nullptr), KVS_OK);
  out.push_back(r);
  const kvs_device_tier order[] = {KVS_DEVICE_TIER_WINDOW, KVS_DEVICE_TIER_COMPRESSED,
                                   KVS_DEVICE_TIER_INDEXER, KVS_DEVICE_TIER_STATE,
                                   KVS_DEVICE_TIER_INDEX_STATE};
  for (kvs_device_tier tier : order) {
    // Ratio-4 layers' regions precede ratio-128 layers' within a tier.
    for (uint32_t ratio : {0u, 4u, 128u}) {
      if (tier == KVS_DEVICE_TIER_WINDOW && ratio != 0) continue;
      for (size_t layer = l.first_layer; layer < l.end_layer; layer++) {
        uint32_t layer_ratio = l.layer_ratio[layer - l.first_layer];
        if (tier != KVS_DEVICE_TIER_WINDOW && layer_ratio != ratio) continue;
        if (kvs_device_layout_region(&l, tier, layer, &r, nullptr) == KVS_OK) out.push_back(r);
      }
    }
  }
  return out;
}

void expect_exact(const kvs_geometry &g, const kvs_pool_sizes &s, uint64_t n_scratch,
                  const kvs_row_widths *widths = nullptr) {
  kvs_device_layout l = build(g, s, options(1, n_scratch), widths);
  kvs_pool_breakdown b = core_bytes(g, s, n_scratch, widths);
  EXPECT_EQ(l.exact.window, b.window);
  EXPECT_EQ(l.exact.compressed, b.compressed);
  EXPECT_EQ(l.exact.indexer, b.indexer);
  EXPECT_EQ(l.exact.state, b.state);
  EXPECT_EQ(l.exact.index_state, b.index_state);
  EXPECT_EQ(l.exact.mapping, b.mapping);
  EXPECT_EQ(l.exact.scratch, b.scratch);
  EXPECT_EQ(l.exact.total, b.total);
  EXPECT_EQ(l.padding_bytes, 0u);
  EXPECT_EQ(l.tiers_offset, l.control_bytes);
  EXPECT_EQ(l.total_bytes, l.control_bytes + b.total);
  // Contiguous: each region starts where the previous ended, and the
  // regions' bytes add up to core's total.
  uint64_t cursor = l.tiers_offset, sum = 0;
  for (const kvs_device_region &r : regions(l)) {
    EXPECT_EQ(r.offset, cursor) << kvs_device_tier_name(r.tier);
    EXPECT_EQ(r.bytes, (r.rows + r.scratch_rows) * r.row_bytes);
    cursor = r.offset + r.bytes;
    sum += r.bytes;
  }
  EXPECT_EQ(cursor, l.total_bytes);
  EXPECT_EQ(sum, b.total);
}

}  // namespace

TEST(DeviceLayout, with_alignment_1_the_tiers_are_cores_exact_pool_bytes) {
  kvs_geometry small = small_geometry();
  kvs_geometry flash = builtin("dsv4-flash");
  kvs_geometry pro = builtin("dsv4-pro");
  for (uint64_t n_scratch : {0u, 1u, 3u}) {
    SCOPED_TRACE(testing::Message() << "n_scratch " << n_scratch);
    expect_exact(small, sizes_for(small, 8, 5), n_scratch);
    expect_exact(small, sizes_for(small, 1000, 37), n_scratch);
    expect_exact(flash, sizes_for(flash, 4096, 300), n_scratch);
    expect_exact(flash, sizes_for(flash, 123457, 9001), n_scratch);
    expect_exact(pro, sizes_for(pro, 4096, 300), n_scratch);
    expect_exact(pro, sizes_for(pro, 77777, 77777), n_scratch);
  }
}

TEST(DeviceLayout, the_small_geometry_carves_the_bytes_worked_out_by_hand) {
  // core's fixture: 19456 B per window page, 2576 B per full page, 64 B per
  // scratch row set, 456 B of ring scratch rows and the sentinel.
  kvs_geometry g = small_geometry();
  kvs_device_layout l = build(g, sizes_for(g, 8, 5), options(1, 2, 0));
  EXPECT_EQ(l.exact.total, 19456u * 5 + 2576u * 8 + 64u * 2 + 456u);
  EXPECT_EQ(l.control_bytes, sizeof(kvs_device_faults));
  EXPECT_EQ(l.total_bytes, 64u + 19456u * 5 + 2576u * 8 + 64u * 2 + 456u);
}

TEST(DeviceLayout, fp8_rows_carve_584_byte_kv_and_132_byte_index_rows) {
  kvs_geometry flash = builtin("dsv4-flash");
  kvs_row_widths fp8 = kvs_row_widths_fp8(&flash);
  EXPECT_EQ(fp8.kv, 584u);
  EXPECT_EQ(fp8.index, 132u);
  kvs_row_widths bf16 = kvs_row_widths_default(&flash);
  EXPECT_EQ(fp8.csa_state, bf16.csa_state) << "the rings stay fp32";
  EXPECT_EQ(fp8.hca_state, bf16.hca_state);
  EXPECT_EQ(fp8.idx_state, bf16.idx_state);
  kvs_pool_sizes s = sizes_for(flash, 8192, 1024);
  expect_exact(flash, s, 1, &fp8);
  kvs_device_layout l = build(flash, s, options(256), &fp8);
  kvs_device_region r;
  ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_WINDOW, 0, &r, nullptr), KVS_OK);
  EXPECT_EQ(r.row_bytes, 584u);
  EXPECT_EQ(r.rows, 1024u * P);
  ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_INDEXER, 2, &r, nullptr), KVS_OK);
  EXPECT_EQ(r.row_bytes, 132u);
  EXPECT_EQ(r.rows, 8192u * P / 4);
  EXPECT_EQ(r.scratch_rows, 1u);
  // 584 B rows are not a multiple of 256: every window region is padded.
  EXPECT_GT(l.padding_bytes, 0u);
  // A table carves fp8 KV rows in FlashMLA's pages: a page's stride is a
  // multiple of the 576-byte payload (128 x 584 = 74,752 -> 130 x 576).
  ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_WINDOW, 0, &r, nullptr), KVS_OK);
  EXPECT_EQ(r.page_rows, P);
  EXPECT_EQ(r.page_bytes, 74880u);
  EXPECT_EQ(r.extent, 1024u * 74880);
  EXPECT_EQ(r.bytes, 1024u * P * 584) << "bytes stay the rows' own";
  ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_COMPRESSED, 2, &r, nullptr), KVS_OK);
  EXPECT_EQ(r.page_rows, P / 4);
  EXPECT_EQ(r.page_bytes, 19008u) << "32 x 584 = 18,688 -> 33 x 576";
  EXPECT_EQ(r.extent, (8192u + 1) * 19008) << "the scratch row takes a page of its own";
  ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_COMPRESSED, 3, &r, nullptr), KVS_OK);
  EXPECT_EQ(r.page_rows, P / 128);
  EXPECT_EQ(r.page_bytes, 1152u) << "one 584-byte row -> 2 x 576";
  EXPECT_EQ(r.extent, (8192u + 1) * 1152);
  ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_INDEXER, 2, &r, nullptr), KVS_OK);
  EXPECT_EQ(r.page_bytes, 32u * 132) << "32 x 132 = 4,224 B: whole 16-byte units, no padding";
  EXPECT_EQ(r.page_rows, P / 4);
  EXPECT_EQ(r.extent, (8192u + 1) * 32 * 132) << "its scratch row too has a page of its own";
  ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_STATE, 2, &r, nullptr), KVS_OK);
  EXPECT_EQ(r.page_rows, 0u) << "rings are not carved in pages";
  EXPECT_EQ(r.extent, r.bytes);
  // The quanta themselves.
  EXPECT_EQ(kvs_device_page_quantum(KVS_DEVICE_TIER_WINDOW, 584), 576u);
  EXPECT_EQ(kvs_device_page_quantum(KVS_DEVICE_TIER_COMPRESSED, 584), 576u);
  EXPECT_EQ(kvs_device_page_quantum(KVS_DEVICE_TIER_INDEXER, 132), 16u);
  EXPECT_EQ(kvs_device_page_quantum(KVS_DEVICE_TIER_WINDOW, 1024), 0u) << "bf16: plain rows";
  EXPECT_EQ(kvs_device_page_quantum(KVS_DEVICE_TIER_INDEXER, 256), 0u);
  EXPECT_EQ(kvs_device_page_quantum(KVS_DEVICE_TIER_STATE, 4100), 0u);
  EXPECT_EQ(kvs_device_page_quantum(KVS_DEVICE_TIER_MAPPING, 8), 0u);
  // bf16 rows are plain rows: nothing is added.
  kvs_device_layout wide16 = build(flash, s, options(256));
  for (kvs_device_tier tier :
       {KVS_DEVICE_TIER_WINDOW, KVS_DEVICE_TIER_COMPRESSED, KVS_DEVICE_TIER_INDEXER}) {
    ASSERT_EQ(kvs_device_layout_region(&wide16, tier, 2, &r, nullptr), KVS_OK);
    EXPECT_EQ(r.page_rows, 0u) << kvs_device_tier_name(tier);
    EXPECT_EQ(r.extent, r.bytes) << kvs_device_tier_name(tier);
  }
  // A DSV4-Flash page costs less in fp8 than in bf16.
  kvs_device_layout wide = build(flash, s, options(256));
  EXPECT_LT(l.exact.total, wide.exact.total);
}

TEST(DeviceLayout, every_region_starts_on_the_alignment_and_the_gaps_are_the_padding) {
  kvs_geometry flash = builtin("dsv4-flash");
  kvs_row_widths fp8 = kvs_row_widths_fp8(&flash);
  for (uint64_t alignment : {2u, 16u, 256u, 4096u, 2u << 20}) {
    for (const kvs_row_widths *widths :
         {(const kvs_row_widths *)nullptr, (const kvs_row_widths *)&fp8}) {
      SCOPED_TRACE(testing::Message() << "alignment " << alignment << (widths ? " fp8" : ""));
      kvs_pool_sizes s = sizes_for(flash, 5001, 333);
      kvs_device_layout l = build(flash, s, options(alignment, 1, 1000), widths);
      kvs_pool_breakdown b = core_bytes(flash, s, 1, widths);
      EXPECT_EQ(l.exact.total, b.total);
      EXPECT_EQ(l.tiers_offset % alignment, 0u);
      EXPECT_GE(l.tiers_offset, l.control_bytes);
      std::vector<kvs_device_region> all = regions(l);
      EXPECT_EQ(all.size(), 1u + 43 + 41 + 21 + 41 + 21);
      uint64_t cursor = l.tiers_offset, gaps = l.tiers_offset - l.control_bytes, sum = 0;
      uint64_t page_padding = 0;
      for (const kvs_device_region &r : all) {
        EXPECT_EQ(r.offset % alignment, 0u);
        EXPECT_GE(r.offset, cursor) << "regions never overlap";
        EXPECT_LT(r.offset - cursor, alignment) << "and leave no more than the alignment";
        gaps += r.offset - cursor;
        EXPECT_GE(r.extent, r.bytes);
        if (r.page_rows > 0) {
          // Whole pages, each the page's rows rounded up to the quantum.
          uint64_t q = kvs_device_page_quantum(r.tier, r.row_bytes);
          uint64_t pages = (r.rows + r.scratch_rows + r.page_rows - 1) / r.page_rows;
          EXPECT_EQ(r.page_bytes % q, 0u);
          EXPECT_GE(r.page_bytes, r.page_rows * r.row_bytes);
          EXPECT_LT(r.page_bytes - r.page_rows * r.row_bytes, q);
          EXPECT_EQ(r.extent, pages * r.page_bytes);
        } else {
          EXPECT_EQ(r.extent, r.bytes);
        }
        page_padding += r.extent - r.bytes;
        cursor = r.offset + r.extent;
        sum += r.bytes;
      }
      EXPECT_EQ(cursor, l.total_bytes);
      EXPECT_EQ(sum, b.total);
      EXPECT_EQ(l.padding_bytes, gaps + page_padding);
      EXPECT_EQ(l.total_bytes, l.control_bytes + b.total + l.padding_bytes);
      EXPECT_LT(gaps, (all.size() + 1) * alignment);
      if (widths == nullptr) {
        EXPECT_EQ(page_padding, 0u) << "bf16 pages are whole 16-byte units";
      } else {
        EXPECT_GT(page_padding, 0u) << "fp8 KV pages round up to 576 B";
      }
    }
  }
}

// Tables are carved at 256 bytes or more; below that a layout prices
// arithmetic only, and creating tables from it is refused naming the
// field and its value.
TEST(DeviceLayout, tables_refuse_an_alignment_below_256) {
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 8, 5);
  kvs_error err;
  for (uint64_t alignment : {1u, 2u, 16u, 128u}) {
    kvs_device_layout l = build(g, s, options(alignment));
    EXPECT_EQ(kvs_device_layout_check_tables(&l, &err), KVS_ERR_INVALID_ARGUMENT) << alignment;
    EXPECT_TRUE(contains(err.message, "options.alignment " + std::to_string(alignment) + ":"))
        << err.message;
    EXPECT_TRUE(contains(err.message, "at least 256 bytes")) << err.message;
  }
  for (uint64_t alignment : {256u, 4096u, 2u << 20}) {
    kvs_device_layout l = build(g, s, options(alignment));
    EXPECT_EQ(kvs_device_layout_check_tables(&l, &err), KVS_OK) << err.message;
  }
  kvs_device_layout defaults = build(g, s, KVS_DEVICE_LAYOUT_OPTIONS_INIT);
  EXPECT_EQ(kvs_device_layout_check_tables(&defaults, &err), KVS_OK) << "the default carves tables";
  EXPECT_EQ(kvs_device_layout_check_tables(nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
}

TEST(DeviceLayout, the_control_area_holds_the_fault_records_and_the_journal_staging) {
  kvs_geometry g = small_geometry();
  kvs_device_layout l = build(g, sizes_for(g, 8, 5), options(256, 1, 100));
  EXPECT_EQ(l.control_offset, 0u);
  EXPECT_EQ(l.faults_offset, 0u);
  EXPECT_EQ(l.journal_offset, sizeof(kvs_device_faults));
  EXPECT_EQ(sizeof(kvs_device_faults), 64u);
  EXPECT_EQ(sizeof(kvs_journal_entry), 16u);
  EXPECT_EQ(l.control_bytes, 64u + 100u * 16);
  EXPECT_EQ(l.tiers_offset, 1792u);  // 1664 rounded up to 256
  kvs_device_region r;
  ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_MAPPING, 0, &r, nullptr), KVS_OK);
  EXPECT_EQ(r.offset, l.tiers_offset);
  EXPECT_EQ(r.rows, 8u * P);
  EXPECT_EQ(r.scratch_rows, 1u) << "the sentinel row";
  EXPECT_EQ(r.row_bytes, 8u);
  kvs_table_dims dims = kvs_device_layout_dims(&l);
  EXPECT_EQ(dims.page, P);
  EXPECT_EQ(dims.full_token, 8u * P);
  EXPECT_EQ(dims.n_win_slots, 5u * P);
}

TEST(DeviceLayout, regions_are_found_by_layer_and_a_missing_tier_is_named) {
  kvs_geometry flash = builtin("dsv4-flash");
  kvs_device_layout l = build(flash, sizes_for(flash, 1024, 64), options(256));
  kvs_device_region r;
  kvs_error err;
  EXPECT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_WINDOW, 0, &r, &err), KVS_OK);
  EXPECT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_COMPRESSED, 0, &r, &err),
            KVS_ERR_NOT_FOUND);
  EXPECT_STREQ(err.message,
               "layer 0 (ratio 0) has no compressed tier: a window-only layer keeps the window "
               "tier alone");
  EXPECT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_INDEXER, 3, &r, &err), KVS_ERR_NOT_FOUND);
  EXPECT_STREQ(err.message,
               "layer 3 (ratio 128) has no indexer tier: only ratio-4 layers run the indexer");
  for (kvs_device_tier tier : {KVS_DEVICE_TIER_COMPRESSED, KVS_DEVICE_TIER_INDEXER,
                               KVS_DEVICE_TIER_STATE, KVS_DEVICE_TIER_INDEX_STATE}) {
    EXPECT_EQ(kvs_device_layout_region(&l, tier, 2, &r, &err), KVS_OK) << err.message;
  }
  EXPECT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_STATE, 3, &r, &err), KVS_OK);
  EXPECT_EQ(r.rows, 64u * 128) << "a ratio-128 ring: 128 slots per window page";
  EXPECT_EQ(r.scratch_rows, 1u);
  EXPECT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_WINDOW, 43, &r, &err),
            KVS_ERR_OUT_OF_RANGE);
  EXPECT_STREQ(err.message, "layer 43 is outside this device's layers [0, 43)");
  // Consecutive CSA layers' compressed regions are one stride apart.
  kvs_device_region a, b;
  ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_COMPRESSED, 2, &a, nullptr), KVS_OK);
  ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_COMPRESSED, 4, &b, nullptr), KVS_OK);
  EXPECT_EQ(b.offset - a.offset, (a.bytes + 255) / 256 * 256);
}

TEST(DeviceLayout, a_pipeline_stage_carves_only_its_own_layers) {
  kvs_geometry pro = builtin("dsv4-pro");
  kvs_cost_terms terms;
  ASSERT_EQ(kvs_cost_terms_make(&pro, 10, 20, nullptr, &terms, nullptr), KVS_OK);
  kvs_pool_sizes s{};
  ASSERT_EQ(kvs_pool_sizes_compute_terms(2048, &terms, 0.5, P, 128, &s, nullptr), KVS_OK);
  kvs_device_layout l = build(pro, s, options(1), nullptr, 10, 20);
  EXPECT_EQ(l.exact.total, core_bytes(pro, s, 1, nullptr, 10, 20).total);
  EXPECT_EQ(regions(l).size(), 1u + 10 + 10 + 5 + 10 + 5);
  kvs_device_region r;
  kvs_error err;
  EXPECT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_WINDOW, 9, &r, &err),
            KVS_ERR_OUT_OF_RANGE);
  EXPECT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_WINDOW, 10, &r, &err), KVS_OK);
  EXPECT_EQ(r.offset, l.spans[1].offset) << "layer 10 is the stage's first window region";
}

TEST(DeviceLayout, bad_options_or_sizes_for_another_stack_are_refused) {
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 8, 5);
  kvs_device_layout l;
  l.total_bytes = 12345;
  kvs_error err;
  kvs_device_layout_options o = options(96);
  EXPECT_EQ(kvs_device_layout_build(&g, 0, 4, nullptr, &s, &o, &l, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "alignment 96 must be a power of two between 1 and 2^30 bytes");
  o = options(0);
  EXPECT_EQ(kvs_device_layout_build(&g, 0, 4, nullptr, &s, &o, &l, &err), KVS_ERR_INVALID_ARGUMENT);
  // A newer caller's longer struct is refused; the oldest caller's (the size
  // field alone) gets every default.
  o = options(256);
  o.size = sizeof o + 8;
  EXPECT_EQ(kvs_device_layout_build(&g, 0, 4, nullptr, &s, &o, &l, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "start from KVS_DEVICE_LAYOUT_OPTIONS_INIT")) << err.message;
  EXPECT_EQ(l.total_bytes, 12345u) << "a refused build leaves the output alone";
  o = options(4096);
  o.size = sizeof(size_t);
  ASSERT_EQ(kvs_device_layout_build(&g, 0, 4, nullptr, &s, &o, &l, &err), KVS_OK) << err.message;
  const kvs_device_layout_options defaults = KVS_DEVICE_LAYOUT_OPTIONS_INIT;
  EXPECT_EQ(l.options.alignment, defaults.alignment) << "the fields it lacks take the defaults";
  EXPECT_EQ(l.options.size, sizeof defaults);
  l.total_bytes = 12345;
  o = options(256);
  EXPECT_EQ(kvs_device_layout_build(&g, 0, 3, nullptr, &s, &o, &l, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "4-layer stack, not a 3-layer one")) << err.message;
  EXPECT_EQ(l.total_bytes, 12345u) << "a refused build leaves the output alone";
  EXPECT_EQ(kvs_device_layout_build(&g, 0, 4, nullptr, &s, nullptr, &l, &err), KVS_OK)
      << "NULL options are the defaults";
  EXPECT_EQ(l.options.alignment, 256u);
}

TEST(DevicePlan, with_alignment_1_the_solve_is_cores_solve_of_what_the_control_area_leaves) {
  kvs_geometry flash = builtin("dsv4-flash");
  kvs_device_layout_options o = options(1, 1, 4096);
  uint64_t control = 64 + 4096 * 16;
  for (uint64_t budget : {800ull << 20, 1ull << 30, 7777777777ull, 120ull << 30}) {
    SCOPED_TRACE(testing::Message() << "budget " << budget);
    kvs_device_layout l;
    kvs_error err;
    ASSERT_EQ(
        kvs_device_plan_solve(budget, &flash, 0, 43, nullptr, 0.25, 40, P, &o, &l, nullptr, &err),
        KVS_OK)
        << err.message;
    kvs_pool_sizes s{};
    ASSERT_EQ(kvs_cost_solve_num_pages(budget - control, &flash, 0.25, 40, P, 1, &s, nullptr, &err),
              KVS_OK)
        << err.message;
    EXPECT_EQ(l.sizes.full_token, s.full_token);
    EXPECT_EQ(l.sizes.n_win_pages, s.n_win_pages);
    EXPECT_LE(l.total_bytes, budget);
    EXPECT_EQ(l.padding_bytes, 0u);
  }
}

TEST(DevicePlan, the_padded_solve_fits_and_one_more_page_does_not) {
  kvs_geometry flash = builtin("dsv4-flash");
  kvs_geometry pro = builtin("dsv4-pro");
  kvs_row_widths fp8 = kvs_row_widths_fp8(&pro);
  struct Case {
    const kvs_geometry *g;
    const kvs_row_widths *widths;
    uint64_t budget;
    uint64_t alignment;
  } cases[] = {{&flash, nullptr, 1ull << 30, 256},
               {&flash, nullptr, 100ull << 30, 256},
               {&pro, &fp8, 3ull << 30, 256},
               {&pro, nullptr, 50ull << 30, 2u << 20},
               {&flash, nullptr, 987654321ull, 4096}};
  for (const Case &c : cases) {
    SCOPED_TRACE(testing::Message() << "budget " << c.budget << " alignment " << c.alignment);
    kvs_device_layout_options o = options(c.alignment);
    size_t n = kvs_geometry_layer_count(c.g);
    kvs_device_layout l;
    kvs_error err;
    ASSERT_EQ(
        kvs_device_plan_solve(c.budget, c.g, 0, n, c.widths, 0.3, 20, P, &o, &l, nullptr, &err),
        KVS_OK)
        << err.message;
    EXPECT_LE(l.total_bytes, c.budget);
    // One more page, under the same window rule, no longer fits.
    uint64_t pages = l.sizes.full_token / P + 1;
    kvs_cost_terms terms;
    ASSERT_EQ(kvs_cost_terms_make(c.g, 0, n, c.widths, &terms, nullptr), KVS_OK);
    kvs_pool_sizes ratio{};
    ASSERT_EQ(
        kvs_pool_sizes_compute_terms(pages, &terms, 0.3, P, KVS_WINDOW_FROM_RATIO, &ratio, nullptr),
        KVS_OK);
    uint64_t win = std::min<uint64_t>(std::max<uint64_t>(ratio.n_win_pages, 20), pages);
    kvs_pool_sizes next{};
    ASSERT_EQ(kvs_pool_sizes_compute_terms(pages, &terms, 0.3, P, win, &next, nullptr), KVS_OK);
    kvs_device_layout bigger = build(*c.g, next, o, c.widths);
    EXPECT_GT(bigger.total_bytes, c.budget);
    // Never more pages than core's unpadded solve of the same budget.
    kvs_pool_sizes unpadded{};
    ASSERT_EQ(kvs_cost_solve_num_pages_terms(c.budget, &terms, 0.3, 20, P, 1, &unpadded, nullptr,
                                             nullptr),
              KVS_OK);
    EXPECT_LE(l.sizes.full_token, unpadded.full_token);
  }
}

TEST(DevicePlan, a_budget_below_the_minimal_padded_pool_is_refused_with_its_shortfall) {
  kvs_geometry flash = builtin("dsv4-flash");
  kvs_device_layout_options o = options(256);
  kvs_device_layout l;
  l.total_bytes = 42;
  kvs_budget_shortfall shortfall{};
  kvs_error err;
  EXPECT_EQ(kvs_device_plan_solve(10u << 20, &flash, 0, 43, nullptr, 0.25, 40, P, &o, &l,
                                  &shortfall, &err),
            KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_EQ(l.total_bytes, 42u);
  EXPECT_EQ(shortfall.available_bytes, 10u << 20);
  EXPECT_EQ(shortfall.min_pages, 40u);
  EXPECT_EQ(shortfall.floor_win_pages, 40u);
  kvs_device_layout minimal = build(flash, sizes_for(flash, 40, 40), o);
  EXPECT_EQ(shortfall.needed_bytes, minimal.total_bytes);
  EXPECT_TRUE(contains(err.message, "device budget 10485760 bytes cannot fit the minimal pool"))
      << err.message;
  // Exactly the minimal padded pool fits.
  EXPECT_EQ(kvs_device_plan_solve(minimal.total_bytes, &flash, 0, 43, nullptr, 0.25, 40, P, &o, &l,
                                  nullptr, &err),
            KVS_OK)
      << err.message;
  EXPECT_EQ(l.sizes.full_token, 40u * P);
}

TEST(DeviceBudget, the_budget_is_free_memory_times_the_ratio_less_the_reserve) {
  kvs_device_budget b{};
  kvs_error err;
  ASSERT_EQ(kvs_device_budget_compute(1000000, 2000000, 0.9, 1000, &b, &err), KVS_OK);
  EXPECT_EQ(b.budget_bytes, 899000u);
  EXPECT_EQ(b.free_bytes, 1000000u);
  EXPECT_EQ(b.total_bytes, 2000000u);
  EXPECT_EQ(b.reserve_bytes, 1000u);
  // floor, not round: 7 x 0.5 = 3.5 -> 3.
  ASSERT_EQ(kvs_device_budget_compute(7, 7, 0.5, 0, &b, &err), KVS_OK);
  EXPECT_EQ(b.budget_bytes, 3u);
  // An H200 with 140 GiB free, the defaults.
  ASSERT_EQ(kvs_device_budget_compute(140ull << 30, 141ull << 30, KVS_DEVICE_DEFAULT_MEMORY_RATIO,
                                      KVS_DEVICE_DEFAULT_RESERVE_BYTES, &b, &err),
            KVS_OK);
  EXPECT_EQ(b.budget_bytes, uint64_t(std::floor(double(140ull << 30) * 0.9)) - (512ull << 20));

  b.budget_bytes = 5;
  EXPECT_EQ(kvs_device_budget_compute(1000, 1000, 0.5, 500, &b, &err), KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_STREQ(err.message,
               "device budget is empty: 1000 free bytes x memory ratio 0.5 = 500, not above the "
               "500-byte reserve");
  EXPECT_EQ(b.budget_bytes, 5u) << "a refused budget leaves the output alone";
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    EXPECT_EQ(kvs_device_budget_compute(1000, 1000, bad, 0, &b, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "memory ratio must be in (0, 1]")) << err.message;
  }
}

TEST(DevicePlan, an_h200_sized_budget_plans_a_dsv4_flash_pool_that_fits) {
  kvs_geometry flash = builtin("dsv4-flash");
  kvs_device_budget b{};
  ASSERT_EQ(kvs_device_budget_compute(90ull << 30, 141ull << 30, 0.9, 512ull << 20, &b, nullptr),
            KVS_OK);
  kvs_device_layout l;
  kvs_error err;
  ASSERT_EQ(kvs_device_plan_solve(b.budget_bytes, &flash, 0, 43, nullptr, 0.1, 170, P, nullptr, &l,
                                  nullptr, &err),
            KVS_OK)
      << err.message;
  EXPECT_LE(l.total_bytes, b.budget_bytes);
  EXPECT_GT(l.total_bytes, b.budget_bytes - b.budget_bytes / 1000) << "nearly all of it is used";
  EXPECT_LT(l.padding_bytes, 200u * 256);
  EXPECT_GT(l.sizes.full_token, 1000000u) << "a million-token history fits in 80 GiB";
}

// The O(1) footprint a planner prices every candidate range with is the
// built layout's total, control and padding, for every range of both
// models, at several alignments, page counts and row widths.
TEST(DeviceLayout, the_footprint_equals_the_built_layout_for_every_range) {
  for (const char *name : {"dsv4-flash", "dsv4-pro"}) {
    kvs_geometry g = builtin(name);
    size_t L = kvs_geometry_layer_count(&g);
    kvs_row_widths fp8 = kvs_row_widths_fp8(&g);
    for (const kvs_row_widths *widths : {static_cast<const kvs_row_widths *>(nullptr),
                                         static_cast<const kvs_row_widths *>(&fp8)}) {
      for (uint64_t alignment : {1u, 256u, 4096u}) {
        for (uint64_t pages : {21u, 640u, 9999u}) {
          for (size_t first = 0; first < L; first += 7) {
            for (size_t end = first + 1; end <= L; end += 5) {
              kvs_cost_terms terms;
              kvs_pool_sizes sizes;
              kvs_error err;
              ASSERT_EQ(kvs_cost_terms_make(&g, first, end, widths, &terms, &err), KVS_OK);
              ASSERT_EQ(kvs_pool_sizes_compute_terms(pages, &terms, 0.1, P, 21, &sizes, &err),
                        KVS_OK);
              kvs_device_layout_options o = options(alignment, 2, 1000);
              kvs_device_layout l = build(g, sizes, o, widths, first, end);
              kvs_device_footprint f{};
              ASSERT_EQ(kvs_device_layout_footprint(&terms, &sizes, &o, &f, &err), KVS_OK)
                  << err.message;
              EXPECT_EQ(f.total_bytes, l.total_bytes) << name << " " << first << "-" << end;
              EXPECT_EQ(f.control_bytes, l.control_bytes);
              EXPECT_EQ(f.padding_bytes, l.padding_bytes);
              EXPECT_EQ(f.exact_bytes, l.exact.total);
              EXPECT_EQ(f.exact_bytes + f.control_bytes + f.padding_bytes, f.total_bytes);
            }
          }
        }
      }
    }
  }
}

TEST(DeviceLayout, a_footprint_of_sizes_for_another_layer_count_is_refused) {
  kvs_geometry g = builtin("dsv4-flash");
  kvs_cost_terms terms;
  kvs_pool_sizes sizes;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 10, nullptr, &terms, nullptr), KVS_OK);
  ASSERT_EQ(kvs_pool_sizes_compute(40, &g, 0.1, P, 21, &sizes, nullptr), KVS_OK);
  kvs_device_footprint f{};
  f.total_bytes = 7;
  kvs_error err;
  EXPECT_EQ(kvs_device_layout_footprint(&terms, &sizes, nullptr, &f, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(
      contains(err.message, "these sizes were built for a 43-layer stack, not a 10-layer one"))
      << err.message;
  EXPECT_EQ(f.total_bytes, 7u) << "a refused footprint leaves the output alone";
}

// Per-request rings (core/cost_model.h kvs_state_rings): the state regions
// are carved at n_req_slots x ring rows for a ring kind placed per request
// and n_win_pages x ring for one per page, and the layout still totals
// core's exact bytes plus control and padding, in every placement, model
// and row width.
TEST(DeviceLayout, per_request_rings_carve_state_slots_rows_and_keep_the_exact_bytes) {
  const kvs_state_rings all[] = {KVS_STATE_RINGS_PER_PAGE, KVS_STATE_RINGS_PER_REQUEST,
                                 KVS_STATE_RINGS_HCA_PER_REQUEST};
  for (const char *model : {"dsv4-flash", "dsv4-pro"}) {
    kvs_geometry g = builtin(model);
    size_t n_layers = kvs_geometry_layer_count(&g);
    for (kvs_kv_dtype dtype : {KVS_KV_BF16, KVS_KV_FP8}) {
      for (kvs_state_rings rings : all) {
        SCOPED_TRACE(testing::Message() << model << " " << kvs_kv_dtype_name(dtype) << " "
                                        << kvs_state_rings_name(rings));
        kvs_row_widths w;
        kvs_error err;
        ASSERT_EQ(kvs_row_widths_for(&g, dtype, 64, &w, &err), KVS_OK) << err.message;
        w.state_rings = rings;
        w.n_req_slots = rings == KVS_STATE_RINGS_PER_PAGE ? 0 : 65;
        kvs_cost_terms terms;
        ASSERT_EQ(kvs_cost_terms_make(&g, 0, n_layers, &w, &terms, &err), KVS_OK) << err.message;
        kvs_pool_sizes s;
        ASSERT_EQ(kvs_pool_sizes_compute_terms(9000, &terms, 0.1, P, 701, &s, &err), KVS_OK)
            << err.message;
        ASSERT_EQ(s.state_rings, rings);
        ASSERT_EQ(s.n_req_slots, w.n_req_slots);
        kvs_pool_breakdown b{};
        ASSERT_EQ(kvs_pool_sizes_bytes_terms(&s, &terms, 1, &b, &err), KVS_OK) << err.message;
        expect_exact(g, s, 1, &w);
        for (uint64_t alignment : {1u, 256u}) {
          kvs_device_layout l = build(g, s, options(alignment), &w);
          EXPECT_EQ(std::memcmp(&l.exact, &b, sizeof b), 0)
              << "exact == kvs_pool_sizes_bytes_terms";
          EXPECT_EQ(l.total_bytes, b.total + l.control_bytes + l.padding_bytes);
          kvs_device_footprint f;
          ASSERT_EQ(kvs_device_layout_footprint(&terms, &s, &l.options, &f, &err), KVS_OK)
              << err.message;
          EXPECT_EQ(f.exact_bytes, b.total);
          EXPECT_EQ(f.total_bytes, l.total_bytes);
          EXPECT_EQ(f.padding_bytes, l.padding_bytes);
          size_t checked = 0;
          for (size_t layer = 0; layer < n_layers; layer++) {
            bool present = false;
            kvs_layer_sizes ls;
            ASSERT_EQ(kvs_pool_sizes_layer(&s, &g, layer, &present, &ls, &err), KVS_OK)
                << err.message;
            if (!present) continue;
            bool per_request = ls.ratio == 4 ? kvs_state_rings_csa_per_request(rings)
                                             : kvs_state_rings_hca_per_request(rings);
            EXPECT_EQ(ls.state_per_request, per_request);
            uint64_t units = per_request ? 65 : s.n_win_pages;
            kvs_device_region r;
            ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_STATE, layer, &r, &err), KVS_OK)
                << err.message;
            EXPECT_EQ(r.rows, ls.state_slots) << "layer " << layer;
            EXPECT_EQ(r.rows, units * ls.ring_size) << "layer " << layer;
            EXPECT_EQ(r.scratch_rows, 1u);
            EXPECT_EQ(r.row_bytes, ls.ratio == 4 ? w.csa_state : w.hca_state);
            if (ls.has_indexer) {
              ASSERT_EQ(kvs_device_layout_region(&l, KVS_DEVICE_TIER_INDEX_STATE, layer, &r, &err),
                        KVS_OK)
                  << err.message;
              EXPECT_EQ(r.rows, ls.idx_state_slots) << "layer " << layer;
              EXPECT_EQ(r.rows, units * 8) << "layer " << layer;
              EXPECT_EQ(r.row_bytes, w.idx_state);
            }
            checked++;
          }
          EXPECT_GT(checked, 20u);
        }
      }
    }
  }
}

TEST(DeviceLayout, sizes_and_widths_placing_rings_differently_are_refused) {
  kvs_geometry g = builtin("dsv4-flash");
  kvs_row_widths w = kvs_row_widths_default(&g);
  w.state_rings = KVS_STATE_RINGS_PER_REQUEST;
  w.n_req_slots = 65;
  kvs_cost_terms terms;
  kvs_error err;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, kvs_geometry_layer_count(&g), &w, &terms, &err), KVS_OK);
  kvs_pool_sizes per_page = sizes_for(g, 4096, 300);
  kvs_device_layout l;
  EXPECT_EQ(kvs_device_layout_build(&g, 0, kvs_geometry_layer_count(&g), &w, &per_page, nullptr, &l,
                                    &err),
            KVS_ERR_INVALID_ARGUMENT);
  kvs_device_footprint f;
  EXPECT_EQ(kvs_device_layout_footprint(&terms, &per_page, nullptr, &f, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message,
                       "sizes place rings per-page with 0 request slots, the terms "
                       "per-request with 65"))
      << err.message;
}

TEST(DevicePlan, the_padded_solve_prices_per_request_rings) {
  kvs_geometry g = builtin("dsv4-flash");
  size_t n = kvs_geometry_layer_count(&g);
  kvs_row_widths page_w = kvs_row_widths_default(&g);
  kvs_row_widths req_w = page_w;
  req_w.state_rings = KVS_STATE_RINGS_PER_REQUEST;
  req_w.n_req_slots = 65;
  uint64_t budget = 40ull << 30;
  kvs_device_layout by_page, by_request;
  kvs_error err;
  ASSERT_EQ(kvs_device_plan_solve(budget, &g, 0, n, &page_w, 0.1, 100, P, nullptr, &by_page,
                                  nullptr, &err),
            KVS_OK)
      << err.message;
  ASSERT_EQ(kvs_device_plan_solve(budget, &g, 0, n, &req_w, 0.1, 100, P, nullptr, &by_request,
                                  nullptr, &err),
            KVS_OK)
      << err.message;
  EXPECT_LE(by_request.total_bytes, budget);
  EXPECT_EQ(by_request.sizes.n_req_slots, 65u);
  EXPECT_LT(by_request.exact.state, by_page.exact.state)
      << "65 request slots cost fewer ring rows than hundreds of window pages";
  EXPECT_GE(kvs_pool_sizes_num_pages(&by_request.sizes), kvs_pool_sizes_num_pages(&by_page.sizes));
}

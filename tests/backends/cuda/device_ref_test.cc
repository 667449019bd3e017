// The CPU references of the device kernels (core/device_ref.h) against the
// window pool's own single-request functions: replaying a leader's journal
// reproduces its mapping, translate equals kvs_window_pool_translate,
// state locs equal kvs_state_loc, the ring context equals
// kvs_window_pool_window_ctx request by request. Faults are counted with
// the lowest index, exactly as the kernels record them.
#include "core/device_ref.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "tests/backends/cuda/fixtures.h"

using namespace kvs_cuda_test;

namespace {

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// 8 full pages, 5 window pages (4 allocatable and the dummy), P = 128.
kvs_pool_sizes small_sizes() { return sizes_for(small_geometry(), 8, 5); }

int64_t slot_of(const kvs_window_pool *pool, int64_t loc) {
  int64_t slot = -2;
  EXPECT_EQ(kvs_window_pool_translate(pool, loc, &slot, nullptr), KVS_OK);
  return slot;
}

}  // namespace

TEST(DeviceRef, table_dims_must_be_whole_nonempty_pages) {
  kvs_error err;
  kvs_table_dims ok{P, 8 * P, 5 * P};
  EXPECT_EQ(kvs_table_dims_check(&ok, &err), KVS_OK);
  kvs_table_dims zero_page{0, 8 * P, 5 * P};
  EXPECT_EQ(kvs_table_dims_check(&zero_page, &err), KVS_ERR_INVALID_ARGUMENT);
  kvs_table_dims ragged{P, 8 * P + 1, 5 * P};
  EXPECT_EQ(kvs_table_dims_check(&ragged, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "full_token 1025 must be whole pages of 128")) << err.message;
  kvs_table_dims no_window{P, 8 * P, 0};
  EXPECT_EQ(kvs_table_dims_check(&no_window, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "n_win_slots 0 must be whole pages of 128")) << err.message;
  EXPECT_EQ(kvs_table_dims_check(nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
}

TEST(DeviceRef, replaying_a_leaders_journal_reproduces_its_mapping) {
  // A follower's device table starts as a fresh pool's mapping and sees
  // only the journal; after every batch it must equal the leader's mapping
  // and the host mirror that kvs_window_pool_apply keeps.
  kvs_pool_sizes s = sizes_for(small_geometry(), 64, 33);
  Leader leader(s, 256, 7);
  Pool mirror = make_pool(s, 0);
  std::vector<int64_t> table = mapping_of(mirror.get());
  kvs_table_dims dims = dims_of(mirror.get());
  size_t applied = 0;
  for (int round = 0; round < 200; round++) {
    leader.bind(leader.rng()() % 6);
    leader.release(leader.rng()() % 5);
    std::vector<kvs_journal_entry> journal = leader.drain();
    kvs_error err;
    ASSERT_EQ(kvs_table_check_journal(&dims, journal.data(), journal.size(), &err), KVS_OK)
        << err.message;
    kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
    ASSERT_EQ(
        kvs_ref_apply_journal(table.data(), &dims, journal.data(), journal.size(), &fault, &err),
        KVS_OK)
        << err.message;
    EXPECT_EQ(fault.count, 0u);
    EXPECT_EQ(fault.first_index, UINT64_MAX);
    ASSERT_EQ(kvs_window_pool_apply(mirror.get(), journal.data(), journal.size(), &err), KVS_OK)
        << err.message;
    ASSERT_EQ(table, mapping_of(leader.pool())) << "round " << round;
    ASSERT_EQ(table, mapping_of(mirror.get())) << "round " << round;
    applied += journal.size();
  }
  EXPECT_GT(applied, 400u);
}

TEST(DeviceRef, the_last_entry_per_full_page_wins) {
  // One step binds full page 2, frees it, binds it again elsewhere, and
  // binds then frees page 3: a sequential replay leaves 2 -> window page 1
  // and 3 unbound. The kernels apply entries in parallel and must agree.
  Pool fresh = make_pool(small_sizes(), 0);
  std::vector<int64_t> table = mapping_of(fresh.get());
  kvs_table_dims dims = dims_of(fresh.get());
  std::vector<kvs_journal_entry> journal = {
      {2, 0}, {3, 3}, {2, KVS_JOURNAL_FREED}, {2, 1}, {3, KVS_JOURNAL_FREED}, {5, 2}};
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(
      kvs_ref_apply_journal(table.data(), &dims, journal.data(), journal.size(), &fault, nullptr),
      KVS_OK);
  for (uint64_t o = 0; o < P; o++) {
    EXPECT_EQ(table[2 * P + o], int64_t(P + o));
    EXPECT_EQ(table[3 * P + o], -1);
    EXPECT_EQ(table[5 * P + o], int64_t(2 * P + o));
  }
  EXPECT_EQ(fault.count, 0u);
  // The host mirror agrees.
  Pool mirror = make_pool(small_sizes(), 0);
  kvs_error err;
  ASSERT_EQ(kvs_window_pool_apply(mirror.get(), journal.data(), journal.size(), &err), KVS_OK)
      << err.message;
  EXPECT_EQ(table, mapping_of(mirror.get()));
}

TEST(DeviceRef, an_entry_that_does_not_fit_is_refused_by_the_check_and_skipped_by_the_apply) {
  Pool fresh = make_pool(small_sizes(), 0);
  const std::vector<int64_t> before = mapping_of(fresh.get());
  kvs_table_dims dims = dims_of(fresh.get());
  std::vector<kvs_journal_entry> journal = {
      {1, 0},   // fits
      {7, 1},   // the dummy full page
      {8, 1},   // past the history
      {4, 4},   // the dummy window page
      {4, -2},  // neither a page nor freed
      {6, 3},   // fits
  };
  kvs_error err;
  EXPECT_EQ(kvs_table_check_journal(&dims, journal.data(), journal.size(), &err),
            KVS_ERR_OUT_OF_RANGE);
  EXPECT_STREQ(err.message,
               "journal entry 1 names full page 7, the reserved dummy page (the table has 8 "
               "full pages, the last the dummy)");
  std::vector<kvs_journal_entry> past = {journal[2]};
  EXPECT_EQ(kvs_table_check_journal(&dims, past.data(), 1, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_TRUE(contains(err.message, "full page 8, outside the history")) << err.message;
  std::vector<kvs_journal_entry> window = {journal[4]};
  EXPECT_EQ(kvs_table_check_journal(&dims, window.data(), 1, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_STREQ(err.message,
               "journal entry 0 binds full page 4 to window page -2; only window pages 0..3 "
               "and -1 (freed) exist");

  std::vector<int64_t> table = before;
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(
      kvs_ref_apply_journal(table.data(), &dims, journal.data(), journal.size(), &fault, nullptr),
      KVS_OK);
  EXPECT_EQ(fault.count, 4u);
  EXPECT_EQ(fault.first_index, 1u);
  for (uint64_t row = 0; row < table.size(); row++) {
    uint64_t fp = row / P, o = row % P;
    int64_t expected = fp == 1 ? int64_t(o) : fp == 6 ? int64_t(3 * P + o) : before[row];
    ASSERT_EQ(table[row], expected) << "row " << row;
  }
  EXPECT_EQ(table.back(), -1) << "the sentinel is never written";
}

TEST(DeviceRef, translate_equals_the_pools_translate_and_faults_past_the_sentinel) {
  std::mt19937_64 rng(3);
  Pool pool = make_pool(sizes_for(small_geometry(), 16, 9), 0);
  bind_most(pool.get(), rng);
  kvs_table_dims dims = dims_of(pool.get());
  std::vector<int64_t> locs;
  for (int64_t loc = -3; loc <= int64_t(dims.full_token); loc++) locs.push_back(loc);
  size_t first_bad = locs.size();
  locs.push_back(int64_t(dims.full_token) + 1);
  locs.push_back(0);
  locs.push_back(INT64_MAX);
  std::vector<int64_t> out(locs.size(), -7);
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  kvs_error err;
  ASSERT_EQ(kvs_ref_translate(kvs_window_pool_mapping(pool.get()), &dims, locs.data(), locs.size(),
                              out.data(), &fault, &err),
            KVS_OK)
      << err.message;
  for (size_t i = 0; i < first_bad; i++) {
    int64_t expected = -2;
    ASSERT_EQ(kvs_window_pool_translate(pool.get(), locs[i], &expected, nullptr), KVS_OK);
    ASSERT_EQ(out[i], expected) << "loc " << locs[i];
  }
  EXPECT_EQ(out[first_bad], -1);
  EXPECT_EQ(out[first_bad + 2], -1);
  EXPECT_EQ(fault.count, 2u);
  EXPECT_EQ(fault.first_index, first_bad);
}

TEST(DeviceRef, state_locs_equal_kvs_state_loc_for_both_rings) {
  kvs_table_dims dims{P, 16 * P, 9 * P};
  std::vector<int64_t> slots;
  for (int64_t s = -2; s < int64_t(dims.n_win_slots); s++) slots.push_back(s);
  size_t first_bad = slots.size();
  slots.push_back(int64_t(dims.n_win_slots));
  std::vector<int64_t> csa(slots.size()), hca(slots.size());
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  kvs_error err;
  ASSERT_EQ(
      kvs_ref_state_locs(&dims, slots.data(), slots.size(), csa.data(), hca.data(), &fault, &err),
      KVS_OK)
      << err.message;
  for (size_t i = 0; i < first_bad; i++) {
    int64_t a = -2, b = -2;
    ASSERT_EQ(kvs_state_loc(slots[i], KVS_RING_SLOTS_CSA, P, &a, nullptr), KVS_OK);
    ASSERT_EQ(kvs_state_loc(slots[i], KVS_RING_SLOTS_HCA, P, &b, nullptr), KVS_OK);
    ASSERT_EQ(csa[i], a) << "slot " << slots[i];
    ASSERT_EQ(hca[i], b) << "slot " << slots[i];
  }
  EXPECT_EQ(csa[first_bad], -1);
  EXPECT_EQ(hca[first_bad], -1);
  EXPECT_EQ(fault.count, 1u);
  EXPECT_EQ(fault.first_index, first_bad);

  // One ring alone; none is an error; a ring that does not divide P too.
  std::vector<int64_t> only(slots.size());
  EXPECT_EQ(
      kvs_ref_state_locs(&dims, slots.data(), slots.size(), only.data(), nullptr, nullptr, &err),
      KVS_OK);
  EXPECT_EQ(only, csa);
  EXPECT_EQ(kvs_ref_state_locs(&dims, slots.data(), slots.size(), nullptr, nullptr, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  kvs_table_dims small_page{64, 16 * 64, 9 * 64};
  EXPECT_EQ(kvs_ref_state_locs(&small_page, slots.data(), 1, nullptr, hca.data(), nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "ring_size 128 must divide P=64, or two pages share a ring block");
  EXPECT_EQ(kvs_ref_state_locs(&small_page, slots.data(), 1, csa.data(), nullptr, nullptr, &err),
            KVS_OK);
}

namespace {

// The batch reference against window_ctx, request by request.
void expect_ring_ctx_matches_pool(uint64_t page, uint64_t block_size, uint64_t stride, size_t n_req,
                                  uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "P " << page << " block_size " << block_size << " stride "
                                  << stride);
  std::mt19937_64 rng(seed);
  kvs_geometry g = make_geometry(8, 4, {0, 4});  // no ratio 128: any P divisible by 4
  Pool pool = make_pool(sizes_for(g, 48, 30, page), 0);
  bind_most(pool.get(), rng);
  kvs_table_dims dims = dims_of(pool.get());
  Batch b = make_batch(rng, n_req, stride, block_size, dims.full_token, page);
  std::vector<int64_t> own(n_req, -7), prev(n_req, -7), ring(n_req * page, -7);
  kvs_block_tables tables = b.tables();
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  kvs_error err;
  ASSERT_EQ(
      kvs_ref_ring_ctx(kvs_window_pool_mapping(pool.get()), &dims, &tables, b.positions.data(),
                       n_req, own.data(), prev.data(), ring.data(), &fault, &err),
      KVS_OK)
      << err.message;
  EXPECT_EQ(fault.count, 0u);
  size_t idle = 0, live_slots = 0;
  for (size_t r = 0; r < n_req; r++) {
    if (b.positions[r] < 0) {
      idle++;
      EXPECT_EQ(own[r], -1);
      EXPECT_EQ(prev[r], -1);
      for (uint64_t j = 0; j < page; j++) ASSERT_EQ(ring[r * page + j], -1);
      continue;
    }
    std::vector<int64_t> locs = b.full_locs(r);
    std::vector<int64_t> expected_ring(page, -7);
    int64_t expected_own = -7, expected_prev = -7;
    ASSERT_EQ(
        kvs_window_pool_window_ctx(pool.get(), uint64_t(b.positions[r]), locs.data(), locs.size(),
                                   &expected_own, &expected_prev, expected_ring.data(), &err),
        KVS_OK)
        << err.message;
    ASSERT_EQ(own[r], expected_own) << "request " << r;
    ASSERT_EQ(prev[r], expected_prev) << "request " << r;
    for (uint64_t j = 0; j < page; j++) {
      ASSERT_EQ(ring[r * page + j], expected_ring[j]) << "request " << r << " slot " << j;
      live_slots += expected_ring[j] >= 0;
    }
  }
  EXPECT_GT(idle, 0u);
  EXPECT_GT(live_slots, n_req * page / 8) << "the batch reads real slots";
}

}  // namespace

TEST(DeviceRef, the_ring_context_equals_the_pools_window_ctx_request_by_request) {
  expect_ring_ctx_matches_pool(P, P, 8, 300, 1);     // blocks are window pages
  expect_ring_ctx_matches_pool(P, 64, 16, 300, 2);   // two blocks per page
  expect_ring_ctx_matches_pool(P, 256, 4, 300, 3);   // two pages per block
  expect_ring_ctx_matches_pool(P, 16, 64, 300, 4);   // small blocks
  expect_ring_ctx_matches_pool(P, 3, 300, 200, 5);   // blocks that are no power of two
  expect_ring_ctx_matches_pool(64, 64, 8, 200, 6);   // a smaller window
  expect_ring_ctx_matches_pool(96, 32, 12, 200, 7);  // a window that is no power of two
}

TEST(DeviceRef, positions_past_the_row_or_locs_past_the_table_fault_their_request) {
  std::mt19937_64 rng(11);
  Pool pool = make_pool(sizes_for(small_geometry(), 16, 9), 0);
  bind_most(pool.get(), rng);
  kvs_table_dims dims = dims_of(pool.get());
  // Three requests, two blocks of P each: fine, past the row, past the table.
  std::vector<int32_t> pages = {0, 1, 2, 3, 4, int32_t(dims.full_token / P) + 1};
  std::vector<int64_t> positions = {int64_t(P + 5), int64_t(2 * P), int64_t(P + 1)};
  kvs_block_tables tables{pages.data(), 2, P};
  std::vector<int64_t> own(3), prev(3), ring(3 * P);
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(kvs_ref_ring_ctx(kvs_window_pool_mapping(pool.get()), &dims, &tables, positions.data(),
                             3, own.data(), prev.data(), ring.data(), &fault, nullptr),
            KVS_OK);
  EXPECT_EQ(fault.count, 2u);
  EXPECT_EQ(fault.first_index, 1u);
  // Request 0 is whole: full pages 0 and 1.
  EXPECT_EQ(own[0], slot_of(pool.get(), int64_t(P + 5)));
  // Request 1 sits at position 2P, one past its row: its own slot and ring
  // slot 0 (which holds position 2P) read -1; the window positions still
  // inside the row read their slots.
  EXPECT_EQ(own[1], -1);
  EXPECT_EQ(prev[1], slot_of(pool.get(), int64_t(3 * P + P - 1)));
  EXPECT_EQ(ring[P + 0], -1);
  EXPECT_EQ(ring[P + 1], slot_of(pool.get(), int64_t(3 * P + 1)));
  // Request 2's second block lies past the history: positions P and P+1
  // (ring slots 0 and 1) read -1, positions 2..P-1 read full page 4.
  EXPECT_EQ(own[2], -1);
  EXPECT_EQ(prev[2], -1);
  EXPECT_EQ(ring[2 * P + 0], -1);
  EXPECT_EQ(ring[2 * P + 1], -1);
  EXPECT_EQ(ring[2 * P + 5], slot_of(pool.get(), int64_t(4 * P + 5)));
}

TEST(DeviceRef, block_tables_of_a_bad_shape_are_refused) {
  std::vector<int32_t> pages(4, 0);
  kvs_error err;
  kvs_block_tables zero_stride{pages.data(), 0, P};
  EXPECT_EQ(kvs_block_tables_check(&zero_stride, 1, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message,
               "block tables need stride >= 1 and block_size in 1..2^32-1, got stride 0, "
               "block_size 128");
  kvs_block_tables zero_block{pages.data(), 4, 0};
  EXPECT_EQ(kvs_block_tables_check(&zero_block, 1, &err), KVS_ERR_INVALID_ARGUMENT);
  kvs_block_tables none{nullptr, 4, P};
  EXPECT_EQ(kvs_block_tables_check(&none, 1, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_block_tables_check(&none, 0, &err), KVS_OK) << "an empty batch needs no rows";
}

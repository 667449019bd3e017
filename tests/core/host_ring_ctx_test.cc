// The host twin's run-wise ring context equals the slot-by-slot reference
// (the kernels' specification) bit for bit, faults included, over random
// tables, block tables and positions: unassigned blocks, blocks past the
// row, locs past the sentinel, idle rows, positions before the first full
// ring.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/device_ref.h"

namespace {

struct Case {
  kvs_table_dims dims;
  std::vector<int64_t> map;
  std::vector<int32_t> pages;
  uint64_t stride;
  std::vector<int64_t> positions;
};

Case random_case(std::mt19937_64 &rng, uint64_t page) {
  Case c;
  uint64_t full_pages = 2 + rng() % 40, win_pages = 2 + rng() % 20;
  c.dims = {page, full_pages * page, win_pages * page};
  c.map.resize(c.dims.full_token + 1);
  for (auto &v : c.map) v = rng() % 3 == 0 ? -1 : (int64_t)(rng() % c.dims.n_win_slots);
  c.map.back() = -1;  // the sentinel
  size_t n = 1 + rng() % 24;
  c.stride = 1 + rng() % 12;
  c.pages.resize(n * c.stride);
  for (auto &b : c.pages) {
    uint64_t kind = rng() % 10;
    // Mostly real blocks; some unassigned; some past the table (faults).
    b = kind == 0   ? -1
        : kind == 1 ? (int32_t)(full_pages + rng() % 3)
                    : (int32_t)(rng() % full_pages);
  }
  c.positions.resize(n);
  for (auto &p : c.positions) {
    uint64_t kind = rng() % 8;
    p = kind == 0 ? -1 - (int64_t)(rng() % 5)
                  : (int64_t)(rng() % ((c.stride + (kind == 1 ? 2 : 0)) * page));
  }
  return c;
}

}  // namespace

TEST(HostRingCtx, equals_the_reference_bit_for_bit_over_random_tables) {
  std::mt19937_64 rng(20261130);
  size_t faults_seen = 0, rows = 0;
  for (int i = 0; i < 3000; i++) {
    uint64_t page = i % 3 == 0 ? 128 : i % 3 == 1 ? 8 : 16;
    Case c = random_case(rng, page);
    size_t n = c.positions.size();
    kvs_block_tables bt{c.pages.data(), c.stride, page};
    std::vector<int64_t> own_a(n), prev_a(n), ring_a(n * page), own_b(n), prev_b(n),
        ring_b(n * page);
    kvs_batch_fault fa = KVS_BATCH_FAULT_INIT, fb = KVS_BATCH_FAULT_INIT;
    kvs_error err;
    ASSERT_EQ(kvs_ref_ring_ctx(c.map.data(), &c.dims, &bt, c.positions.data(), n, own_a.data(),
                               prev_a.data(), ring_a.data(), &fa, &err),
              KVS_OK)
        << err.message;
    ASSERT_EQ(kvs_host_ring_ctx(c.map.data(), &c.dims, &bt, c.positions.data(), n, own_b.data(),
                                prev_b.data(), ring_b.data(), &fb, &err),
              KVS_OK)
        << err.message;
    ASSERT_EQ(own_a, own_b) << "case " << i;
    ASSERT_EQ(prev_a, prev_b) << "case " << i;
    ASSERT_EQ(ring_a, ring_b) << "case " << i;
    ASSERT_EQ(fa.count, fb.count) << "case " << i;
    ASSERT_EQ(fa.first_index, fb.first_index) << "case " << i;
    faults_seen += fa.count;
    rows += n;
  }
  EXPECT_GT(faults_seen, 500u) << "the cases reach the fault paths";
  EXPECT_GT(rows, 30000u);
}

TEST(HostRingCtx, blocks_of_another_size_are_refused) {
  kvs_table_dims dims{128, 256, 256};
  std::vector<int64_t> map(257, -1);
  std::vector<int32_t> pages{0};
  int64_t pos = 3, own = 7, prev = 7;
  std::vector<int64_t> ring(128, 7);
  kvs_block_tables bt{pages.data(), 1, 64};
  kvs_error err;
  EXPECT_EQ(
      kvs_host_ring_ctx(map.data(), &dims, &bt, &pos, 1, &own, &prev, ring.data(), nullptr, &err),
      KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "the run-wise ring context needs blocks of P=128 tokens, not 64");
  EXPECT_EQ(own, 7) << "nothing written";
}

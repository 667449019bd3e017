// Shared fixtures for the core/ tests: the seed's small geometry, its
// 8-page pool, and RAII holders for the C handles.
#ifndef KVS_TESTS_CORE_FIXTURES_H
#define KVS_TESTS_CORE_FIXTURES_H

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/cost_model.h"
#include "pool/free_list.h"
#include "core/geometry.h"
#include "pool/window_pool.h"

namespace kvs_test {

constexpr uint64_t P = KVS_DEFAULT_WINDOW_PAGE;

inline kvs_geometry make_geometry(uint64_t head_dim, uint64_t index_head_dim, size_t n_layers,
                                  std::vector<uint32_t> ratios) {
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(
      kvs_geometry_init(&g, head_dim, index_head_dim, n_layers, ratios.data(), ratios.size(), &err),
      KVS_OK)
      << err.message;
  return g;
}

// head_dim 8 -> kv rows of 16 B; index_head_dim 4 -> idx rows of 8 B.
// Ratio-4 ring rows 2*2*8*4 = 128 B, ratio-128 rows 2*1*8*4 = 64 B,
// indexer ring rows 2*2*4*4 = 64 B.
inline kvs_geometry args() { return make_geometry(8, 4, 4, {0, 4, 128, 4}); }

// The exact bytes of a pool over args(), worked out by hand: 19456 B per
// window page (window 8192, ratio-4 rings 2 x 1536, ratio-128 ring 8192),
// 2576 B per full page (mapping 1024, ratio-4 tiers 2 x 768, ratio-128 16),
// 64 B per scratch row set, and 456 B of ring scratch rows plus the
// mapping sentinel.
inline uint64_t expected_bytes(uint64_t num_pages, uint64_t win_pages, uint64_t n_scratch) {
  return 19456 * win_pages + 2576 * num_pages + 64 * n_scratch + 456;
}

inline kvs_pool_sizes sizes(uint64_t num_pages, const kvs_geometry &g, double swa,
                            uint64_t win = KVS_WINDOW_FROM_RATIO) {
  kvs_pool_sizes s;
  kvs_error err;
  EXPECT_EQ(kvs_pool_sizes_compute(num_pages, &g, swa, P, win, &s, &err), KVS_OK) << err.message;
  return s;
}

struct PoolDeleter {
  void operator()(kvs_window_pool *pool) const { kvs_window_pool_destroy(pool); }
};
using Pool = std::unique_ptr<kvs_window_pool, PoolDeleter>;

struct FreeListDeleter {
  void operator()(kvs_free_list *list) const { kvs_free_list_destroy(list); }
};
using FreeList = std::unique_ptr<kvs_free_list, FreeListDeleter>;

inline Pool make_pool(const kvs_pool_sizes &s, uint64_t max_running, bool radix,
                      size_t journal_capacity = KVS_WINDOW_POOL_DEFAULT_JOURNAL) {
  kvs_window_pool_options options = KVS_WINDOW_POOL_OPTIONS_INIT;
  options.max_running = max_running;
  options.radix = radix;
  options.journal_capacity = journal_capacity;
  kvs_window_pool_t pool = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_create(&s, &options, &pool, &err), KVS_OK) << err.message;
  return Pool(pool);
}

// 8 full pages, 5 window pages: 4 allocatable and the dummy.
inline Pool pool() {
  kvs_geometry g = args();
  return make_pool(sizes(8, g, 0.5, 5), 2, true);
}

inline std::vector<int64_t> page_locs(uint64_t full_page) {
  std::vector<int64_t> locs(P);
  for (uint64_t offset = 0; offset < P; offset++) locs[offset] = int64_t(full_page * P + offset);
  return locs;
}

inline int64_t translate(const kvs_window_pool *pool, int64_t loc) {
  int64_t slot = -2;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_translate(pool, loc, &slot, &err), KVS_OK) << err.message;
  return slot;
}

inline kvs_status alloc(kvs_window_pool *pool, const std::vector<int64_t> &locs,
                        kvs_error *err = nullptr, kvs_free_list_shortfall *shortfall = nullptr) {
  return kvs_window_pool_alloc(pool, locs.data(), locs.size(), shortfall, err);
}

inline kvs_status release(kvs_window_pool *pool, const std::vector<int64_t> &locs,
                          kvs_error *err = nullptr) {
  return kvs_window_pool_free(pool, locs.data(), locs.size(), err);
}

#define EXPECT_INTEGRITY(pool)                                                  \
  do {                                                                          \
    kvs_error integrity_err_;                                                   \
    EXPECT_EQ(kvs_window_pool_check_integrity((pool), &integrity_err_), KVS_OK) \
        << integrity_err_.message;                                              \
  } while (0)

}  // namespace kvs_test

#endif  // KVS_TESTS_CORE_FIXTURES_H

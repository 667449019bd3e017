// Shared fixtures for the cuda/ tests: geometries, window pools with
// random bindings, binding journals from a leader pool, and block-table
// batches, all on the host. The device tests feed the same inputs to the
// kernels and to the CPU references.
#ifndef KVS_TESTS_BACKENDS_CUDA_FIXTURES_H
#define KVS_TESTS_BACKENDS_CUDA_FIXTURES_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/cost_model.h"
#include "core/device_ref.h"
#include "core/geometry.h"
#include "pool/window_pool.h"

namespace kvs_cuda_test {

constexpr uint64_t P = KVS_DEFAULT_WINDOW_PAGE;

inline kvs_geometry make_geometry(uint64_t head_dim, uint64_t index_head_dim,
                                  std::vector<uint32_t> ratios) {
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_init(&g, head_dim, index_head_dim, ratios.size(), ratios.data(),
                              ratios.size(), &err),
            KVS_OK)
      << err.message;
  return g;
}

// The small geometry of core's tests: one window-only, two CSA, one HCA layer.
inline kvs_geometry small_geometry() { return make_geometry(8, 4, {0, 4, 128, 4}); }

inline kvs_geometry builtin(const char *name) {
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_builtin(name, &g, &err), KVS_OK) << err.message;
  return g;
}

inline kvs_pool_sizes sizes_for(const kvs_geometry &g, uint64_t full_pages, uint64_t win_pages,
                                uint64_t page = P) {
  kvs_pool_sizes s{};
  kvs_error err;
  EXPECT_EQ(kvs_pool_sizes_compute(full_pages, &g, 0.5, page, win_pages, &s, &err), KVS_OK)
      << err.message;
  return s;
}

// Sizes with rings placed as `rings` (n_req_slots request slots when some
// ring kind is per request), through the cost terms as a planner builds
// them; the widths are core's defaults otherwise.
inline kvs_row_widths widths_with_rings(const kvs_geometry &g, kvs_state_rings rings,
                                        uint64_t n_req_slots) {
  kvs_row_widths w = kvs_row_widths_default(&g);
  w.state_rings = rings;
  w.n_req_slots = rings == KVS_STATE_RINGS_PER_PAGE ? 0 : n_req_slots;
  return w;
}

inline kvs_pool_sizes sizes_with_rings(const kvs_geometry &g, uint64_t full_pages,
                                       uint64_t win_pages, kvs_state_rings rings,
                                       uint64_t n_req_slots, uint64_t page = P) {
  kvs_row_widths w = widths_with_rings(g, rings, n_req_slots);
  kvs_cost_terms terms;
  kvs_pool_sizes s{};
  kvs_error err;
  EXPECT_EQ(kvs_cost_terms_make(&g, 0, kvs_geometry_layer_count(&g), &w, &terms, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(kvs_pool_sizes_compute_terms(full_pages, &terms, 0.5, page, win_pages, &s, &err),
            KVS_OK)
      << err.message;
  return s;
}

struct PoolDeleter {
  void operator()(kvs_window_pool *pool) const { kvs_window_pool_destroy(pool); }
};
using Pool = std::unique_ptr<kvs_window_pool, PoolDeleter>;

inline Pool make_pool(const kvs_pool_sizes &s, size_t journal_capacity) {
  kvs_window_pool_options options = KVS_WINDOW_POOL_OPTIONS_INIT;
  options.max_running = 1;
  options.journal_capacity = journal_capacity;
  kvs_window_pool_t pool = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_create(&s, &options, &pool, &err), KVS_OK) << err.message;
  return Pool(pool);
}

inline kvs_table_dims dims_of(const kvs_window_pool *pool) {
  return kvs_table_dims{kvs_window_pool_page_size(pool), kvs_window_pool_full_tokens(pool),
                        kvs_window_pool_window_slots(pool)};
}

inline std::vector<int64_t> mapping_of(const kvs_window_pool *pool) {
  const int64_t *map = kvs_window_pool_mapping(pool);
  return std::vector<int64_t>(map, map + kvs_window_pool_full_tokens(pool) + 1);
}

inline std::vector<int64_t> page_locs(uint64_t full_page, uint64_t page) {
  std::vector<int64_t> locs(page);
  for (uint64_t o = 0; o < page; o++) locs[o] = int64_t(full_page * page + o);
  return locs;
}

// Drives a leader pool with random binds and frees, and hands out its
// journal in batches: what a TP leader ships to its followers.
class Leader {
 public:
  Leader(const kvs_pool_sizes &s, size_t journal_capacity, uint64_t seed)
      : pool_(make_pool(s, journal_capacity)), rng_(seed), capacity_(journal_capacity) {
    page_ = s.page;
    usable_full_ = s.full_token / page_ - 1;
  }

  kvs_window_pool *pool() const { return pool_.get(); }

  // Binds up to `pages` random unbound full pages, one call per 1..3 pages.
  void bind(size_t pages) {
    size_t done = 0;
    while (done < pages && kvs_window_pool_swa_available(pool_.get()) >= page_ &&
           kvs_window_pool_journal_pending(pool_.get()) < capacity_) {
      uint64_t fp = rng_() % usable_full_;
      if (is_bound(fp)) continue;
      if (kvs_window_pool_alloc(pool_.get(), page_locs(fp, page_).data(), page_, nullptr,
                                nullptr) != KVS_OK) {
        break;
      }
      bound_.push_back(fp);
      done++;
    }
  }

  // Frees up to `pages` random bound pages.
  void release(size_t pages) {
    for (size_t i = 0;
         i < pages && !bound_.empty() && kvs_window_pool_journal_pending(pool_.get()) < capacity_;
         i++) {
      size_t at = rng_() % bound_.size();
      std::vector<int64_t> locs = page_locs(bound_[at], page_);
      ASSERT_EQ(kvs_window_pool_free(pool_.get(), locs.data(), locs.size(), nullptr), KVS_OK);
      bound_.erase(bound_.begin() + long(at));
    }
  }

  std::vector<kvs_journal_entry> drain() {
    std::vector<kvs_journal_entry> out(kvs_window_pool_journal_pending(pool_.get()));
    size_t n = 0;
    kvs_window_pool_journal_drain(pool_.get(), out.data(), out.size(), &n);
    out.resize(n);
    return out;
  }

  std::mt19937_64 &rng() { return rng_; }

 private:
  bool is_bound(uint64_t fp) const {
    return std::find(bound_.begin(), bound_.end(), fp) != bound_.end();
  }

  Pool pool_;
  std::mt19937_64 rng_;
  size_t capacity_;
  uint64_t page_ = 0;
  uint64_t usable_full_ = 0;
  std::vector<uint64_t> bound_;
};

// A decode batch over block tables: n_req rows of `stride` blocks of
// block_size tokens, blocks drawn at random from the history (a share left
// unassigned), positions anywhere in the row, a share idle (-1).
struct Batch {
  uint64_t stride = 0;
  uint64_t block_size = 0;
  std::vector<int32_t> pages;
  std::vector<int64_t> positions;

  kvs_block_tables tables() const { return kvs_block_tables{pages.data(), stride, block_size}; }

  // Request r's full locs per position, as kvs_window_pool_window_ctx takes
  // them.
  std::vector<int64_t> full_locs(size_t r) const {
    std::vector<int64_t> locs(stride * block_size);
    for (uint64_t p = 0; p < locs.size(); p++) {
      int32_t page = pages[r * stride + p / block_size];
      locs[p] = page < 0 ? -1 : int64_t(page) * int64_t(block_size) + int64_t(p % block_size);
    }
    return locs;
  }
};

inline Batch make_batch(std::mt19937_64 &rng, size_t n_req, uint64_t stride, uint64_t block_size,
                        uint64_t full_token, uint64_t page) {
  Batch b;
  b.stride = stride;
  b.block_size = block_size;
  b.pages.resize(n_req * stride);
  b.positions.resize(n_req);
  uint64_t blocks = full_token / block_size;
  for (auto &entry : b.pages) entry = rng() % 8 == 0 ? -1 : int32_t(rng() % blocks);
  uint64_t tokens = stride * block_size;
  for (size_t r = 0; r < n_req; r++) {
    uint64_t kind = rng() % 8;
    if (kind == 0) {
      b.positions[r] = -1;  // idle row
    } else if (kind == 1) {
      b.positions[r] = int64_t(rng() % std::min<uint64_t>(tokens, page));  // early decode
    } else {
      b.positions[r] = int64_t(rng() % tokens);
    }
  }
  return b;
}

// Binds a random ~70% of a pool's allocatable full pages, so most of a
// batch's positions read real slots.
inline void bind_most(kvs_window_pool *pool, std::mt19937_64 &rng) {
  uint64_t page = kvs_window_pool_page_size(pool);
  uint64_t full_pages = kvs_window_pool_full_tokens(pool) / page - 1;
  for (uint64_t fp = 0; fp < full_pages; fp++) {
    if (kvs_window_pool_swa_available(pool) < page) break;
    if (rng() % 10 < 7) {
      ASSERT_EQ(kvs_window_pool_alloc(pool, page_locs(fp, page).data(), page, nullptr, nullptr),
                KVS_OK);
    }
  }
}

// A journal with many entries per full page, so superseded entries cross
// the kernel's 32-entry blocks; a share of entries may not fit.
inline std::vector<kvs_journal_entry> random_journal(std::mt19937_64 &rng,
                                                     const kvs_table_dims &dims, size_t n,
                                                     uint64_t distinct_pages,
                                                     unsigned bad_percent) {
  uint64_t full_pages = dims.full_token / dims.page;
  uint64_t win_pages = dims.n_win_slots / dims.page;
  std::vector<kvs_journal_entry> journal(n);
  for (auto &e : journal) {
    e.full_page = rng() % std::min(distinct_pages, full_pages - 1);
    e.window_page = rng() % 4 == 0 ? KVS_JOURNAL_FREED : int64_t(rng() % (win_pages - 1));
    if (rng() % 100 < bad_percent) {
      switch (rng() % 4) {
        case 0:
          e.full_page = full_pages - 1;
          break;  // the dummy
        case 1:
          e.full_page = full_pages + rng() % 1000;
          break;  // past the history
        case 2:
          e.window_page = int64_t(win_pages - 1);
          break;  // the dummy window page
        default:
          e.window_page = -2 - int64_t(rng() % 1000);
          break;  // not a page
      }
    }
  }
  return journal;
}

}  // namespace kvs_cuda_test

#endif  // KVS_TESTS_BACKENDS_CUDA_FIXTURES_H

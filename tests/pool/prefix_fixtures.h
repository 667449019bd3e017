// The prefix-cache tests' pools: a leader that journals its decisions
// and a follower that replays them, which must then agree.
#ifndef KVS_TESTS_POOL_PREFIX_FIXTURES_H
#define KVS_TESTS_POOL_PREFIX_FIXTURES_H

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pool/window_pool.h"
#include "tests/core/fixtures.h"

namespace kvs_test {

// A pool of `pages` full pages and `win_pages` window pages with a prefix
// cache whose hits align to `align` tokens, a journal of `journal`
// entries (0: none, as a follower's) and `host` host-tier pages.
inline Pool prefix_pool(uint64_t pages, uint64_t win_pages, uint64_t align, size_t journal,
                        uint64_t host = 0, uint64_t disk = 0, uint64_t stores_per_step = 32) {
  kvs_pool_sizes s = sizes(pages, args(), 0.5, win_pages);
  kvs_window_pool_options options = KVS_WINDOW_POOL_OPTIONS_INIT;
  options.max_running = 4;
  options.journal_capacity = journal;
  options.prefix_cache = true;
  options.prefix_align = align;
  options.host_pages = host;
  options.disk_pages = disk;
  options.disk_stores_per_step = disk > 0 ? stores_per_step : 0;
  kvs_window_pool_t pool = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_create(&s, &options, &pool, &err), KVS_OK) << err.message;
  return Pool(pool);
}

struct PrefixPair {
  Pool leader, follower;
  PrefixPair(uint64_t align, uint64_t pages, uint64_t win, uint64_t host = 0, uint64_t disk = 0,
             uint64_t stores_per_step = 32)
      : leader(prefix_pool(pages, win, align, 4096, host, disk, stores_per_step)),
        follower(prefix_pool(pages, win, align, 0, host, disk, stores_per_step)) {}
  // What the leader journaled since the last drain.
  std::vector<kvs_journal_entry> drain() {
    std::vector<kvs_journal_entry> entries(4096);
    size_t n = 0;
    kvs_window_pool_journal_drain(leader.get(), entries.data(), entries.size(), &n);
    entries.resize(n);
    return entries;
  }
  // Ships the leader's journal to the follower (after the leader's disk
  // writes, as the shard does before each step); both must agree after.
  void step() {
    ASSERT_EQ(kvs_window_pool_prefix_write_back(leader.get(), nullptr, nullptr), KVS_OK);
    std::vector<kvs_journal_entry> entries = drain();
    kvs_error err;
    ASSERT_EQ(kvs_window_pool_apply(follower.get(), entries.data(), entries.size(), &err), KVS_OK)
        << err.message;
    EXPECT_EQ(kvs_window_pool_digest(leader.get()), kvs_window_pool_digest(follower.get()));
    EXPECT_INTEGRITY(leader.get());
    EXPECT_INTEGRITY(follower.get());
  }
};

// The leader's match for a prompt of `prompt` tokens over `keys`.
inline kvs_prefix_hit match(const kvs_window_pool *pool, const std::vector<uint64_t> &keys,
                            uint64_t prompt, uint64_t reprefill = 0) {
  kvs_prefix_hit hit;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_prefix_match(pool, keys.data(), keys.size(), prompt, reprefill, &hit,
                                         nullptr, &err),
            KVS_OK)
      << err.message;
  return hit;
}

inline kvs_prefix_stats stats_of(const kvs_window_pool *pool) {
  kvs_prefix_stats s;
  EXPECT_EQ(kvs_window_pool_prefix_stats(pool, &s, nullptr), KVS_OK);
  return s;
}

// Request `request` wrote `pages` under `keys` (the last keeps its window
// as the tail) and finished: they are cached, unreferenced.
inline void cache(kvs_window_pool *pool, uint64_t request, const std::vector<uint64_t> &keys,
                  const std::vector<int64_t> &pages) {
  for (int64_t page : pages) ASSERT_EQ(alloc(pool, page_locs(uint64_t(page))), KVS_OK);
  std::vector<uint8_t> tails(pages.size(), 0), taken(pages.size());
  tails.back() = 1;
  kvs_error err;
  ASSERT_EQ(kvs_window_pool_prefix_insert(pool, request, keys.data(), pages.data(), tails.data(),
                                          keys.size(), taken.data(), &err),
            KVS_OK)
      << err.message;
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, request, nullptr), KVS_OK);
  for (size_t i = 0; i + 1 < pages.size(); i++) {
    ASSERT_EQ(release(pool, page_locs(uint64_t(pages[i]))), KVS_OK);
  }
}

inline bool has(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

}  // namespace kvs_test

#endif  // KVS_TESTS_POOL_PREFIX_FIXTURES_H

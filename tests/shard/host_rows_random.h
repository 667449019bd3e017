// The host tier's rows under a random serving mix, one rank's part, for
// the host twin (node_host_rows_random_test) and the CUDA stand-in
// (node_standin_test): the leader admits requests whose prompts share
// prefixes from a small key tree, takes GPU and host hits (fetching blocks
// back into pages it frees by eviction in the same step), writes its own
// pages, caches them and finishes, on a few dozen pages so that blocks are
// evicted, spilled, let go by a small host tier and fetched back all the
// time. After every step each rank holds every cached page against the
// bytes written for that block (on that rank) when it was first computed:
// a spill or fetch out of journal order, into the wrong slot or page, or
// from a slot another block took since, shows as a page whose rows are not
// its block's.
#ifndef KVS_TESTS_SHARD_HOST_ROWS_RANDOM_H
#define KVS_TESTS_SHARD_HOST_ROWS_RANDOM_H

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <vector>

#include "shard/node.h"
#include "tests/shard/host_rows_flow.h"

namespace kvs_test {

// The ranks meet here after each step's checks, so the leader's record of
// what it did is read by every rank before it changes again.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    uint64_t round = round_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      round_++;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return round_ != round; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int n_, waiting_ = 0;
  uint64_t round_ = 0;
};

// What the leader did in a step, for every rank: pages it computed (with
// their block's seed), and every cached page's block seed.
struct Record {
  std::vector<std::pair<int64_t, uint64_t>> written;
  std::map<int64_t, uint64_t> cached;
};

// A block's seed: its prompt's keys up to it.
inline uint64_t seed_of(const std::vector<uint64_t> &keys, size_t depth) {
  uint64_t h = 0x6b7673686f737472ull;
  for (size_t i = 0; i <= depth; i++) h = (h ^ keys[i]) * 0x100000001b3ull + i;
  return h;
}

constexpr int64_t kPages = 40;  // the engine's pages: few, so blocks move

// The leader's engine: its free pages, and one request a step.
struct Engine {
  kvs_node_t node;
  uint64_t P;
  std::mt19937_64 rng;
  std::set<int64_t> free_pages;
  Record *record;
  uint64_t next_request = 1;
  uint64_t host_hits = 0, gpu_hits = 0, abandoned = 0;

  Engine(kvs_node_t n, uint64_t seed, Record *r)
      : node(n), P(kvs_node_page(n)), rng(seed), record(r) {
    for (int64_t p = 0; p < kPages; p++) free_pages.insert(p);
  }

  // Evicts until `need` pages are free (as far as the cache can give).
  void evict(size_t need) {
    if (free_pages.size() >= need) return;
    std::vector<int64_t> freed(kPages);
    size_t n = 0;
    kvs_error err;
    ASSERT_EQ(kvs_node_prefix_evict(node, need - free_pages.size(), 0, freed.data(), freed.size(),
                                    &n, &err),
              KVS_OK)
        << err.message;
    for (size_t i = 0; i < n; i++) {
      EXPECT_EQ(record->cached.count(freed[i]), 1u) << "page " << freed[i] << " was cached";
      record->cached.erase(freed[i]);
      free_pages.insert(freed[i]);
    }
  }

  std::vector<int64_t> take(size_t n) {
    std::vector<int64_t> out;
    while (out.size() < n && !free_pages.empty()) {
      auto it = free_pages.begin();
      std::advance(it, static_cast<long>(rng() % free_pages.size()));
      out.push_back(*it);
      free_pages.erase(it);
    }
    return out;
  }

  std::vector<int64_t> locs_of(const std::vector<int64_t> &pages) const {
    std::vector<int64_t> locs;
    for (int64_t p : pages) {
      for (uint64_t t = 0; t < P; t++) locs.push_back(p * static_cast<int64_t>(P) + t);
    }
    return locs;
  }

  // One request, admitted, computed, cached and finished between steps.
  void serve() {
    const uint64_t request = next_request++;
    const size_t k = 1 + rng() % 5;
    std::vector<uint64_t> keys(k + 1);
    for (size_t i = 0; i <= k; i++) keys[i] = 10 * (i + 1) + rng() % 3;  // a tree of prefixes
    kvs_error err;
    kvs_node_prefix_hit hit{};
    hit.size = sizeof hit;
    std::vector<int64_t> matched(k + 1, -1);
    ASSERT_EQ(kvs_node_prefix_match(node, keys.data(), k + 1, (k + 1) * P + 1, P, &hit,
                                    matched.data(), &err),
              KVS_OK)
        << err.message;
    int64_t slot = -1;
    ASSERT_EQ(kvs_node_admit(node, request, &slot, &err), KVS_OK) << err.message;
    uint64_t have = hit.hit_tokens / P;  // blocks the request reuses
    if (hit.host_pages > 0) {
      evict(hit.host_pages);
      // The eviction may have taken the hit's GPU part: match again.
      ASSERT_EQ(kvs_node_prefix_match(node, keys.data(), k + 1, (k + 1) * P + 1, P, &hit,
                                      matched.data(), &err),
                KVS_OK);
      have = hit.hit_tokens / P;
      if (hit.host_pages > 0 && free_pages.size() >= hit.host_pages) {
        std::vector<int64_t> into = take(hit.host_pages);
        ASSERT_EQ(kvs_node_prefix_fetch(node, request, &hit, keys.data(), k + 1, into.data(), &err),
                  KVS_OK)
            << err.message;
        const size_t first = have - hit.host_pages;
        for (size_t i = 0; i < into.size(); i++) {
          record->cached[into[i]] = seed_of(keys, first + i);
        }
        host_hits++;
      } else if (hit.host_pages > 0) {
        have = 0;  // no pages to fetch into: computed from scratch
      } else if (hit.block >= 0) {
        ASSERT_EQ(kvs_node_prefix_acquire(node, request, &hit, &err), KVS_OK) << err.message;
        gpu_hits++;
      }
    } else if (hit.block >= 0) {
      ASSERT_EQ(kvs_node_prefix_acquire(node, request, &hit, &err), KVS_OK) << err.message;
      gpu_hits++;
    }
    // Its own blocks [have, k): computed now.
    const size_t own = k - have;
    evict(own);
    std::vector<int64_t> pages = take(own);
    if (pages.size() < own) {
      for (int64_t p : pages) free_pages.insert(p);
      ASSERT_EQ(kvs_node_prefix_abandon(node, request, &err), KVS_OK) << err.message;
      ASSERT_EQ(kvs_node_finish(node, request, &err), KVS_OK) << err.message;
      abandoned++;
      return;
    }
    std::vector<int64_t> locs = locs_of(pages);
    ASSERT_EQ(kvs_node_bind(node, request, locs.data(), locs.size(), &err), KVS_OK) << err.message;
    for (size_t i = 0; i < own; i++) record->written.push_back({pages[i], seed_of(keys, have + i)});
    std::vector<uint8_t> taken(own, 0);
    if (own > 0) {
      ASSERT_EQ(kvs_node_prefix_insert(node, request, keys.data() + have, pages.data(), nullptr,
                                       own, taken.data(), &err),
                KVS_OK)
          << err.message;
    }
    ASSERT_EQ(kvs_node_free(node, locs.data(), locs.size(), &err), KVS_OK) << err.message;
    for (size_t i = 0; i < own; i++) {
      if (taken[i]) {
        record->cached[pages[i]] = seed_of(keys, have + i);
      } else {
        free_pages.insert(pages[i]);
      }
    }
    ASSERT_EQ(kvs_node_prefix_release(node, request, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_finish(node, request, &err), KVS_OK) << err.message;
  }
};

// Every rank: holds every cached page against its block's bytes, then
// writes the pages the leader computed this step (cached from now on, and
// checked from the next step). The writes are the engine's last work
// before the next step and are not waited for: a spill of one of them at
// the next step sees its bytes only if it is ordered after them.
inline void check_and_write(kvs_node_t node, const Record &record, const NodeMemory &m,
                            uint64_t step) {
  const int rank = kvs_node_rank(node);
  std::set<int64_t> fresh;
  for (const auto &w : record.written) fresh.insert(w.first);
  for (const auto &c : record.cached) {
    if (fresh.count(c.first) != 0) continue;
    std::vector<PageRows> rows = page_rows(node, static_cast<uint64_t>(c.first));
    ASSERT_TRUE(get_rows(m, rows) == pattern(rows, c.second, rank))
        << "rank " << rank << ", step " << step << ": cached page " << c.first
        << " does not hold its block's rows";
  }
  for (const auto &w : record.written) {
    std::vector<PageRows> rows = page_rows(node, static_cast<uint64_t>(w.first));
    put_rows(m, rows, pattern(rows, w.second, rank));
  }
}

// What one host slot costs the machine for this model, tp and dtype.
inline uint64_t slot_cost(kvs_comm_t comm, int tp, kvs_kv_dtype dtype = KVS_KV_BF16) {
  SmallPrefixNode s(tp, KVS_NODE_DEVICE_CPU, 16ull << 20, dtype);
  kvs_node_t node = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_OK) << err.message;
  kvs_node_prefix_counts c{};
  c.size = sizeof c;
  EXPECT_EQ(kvs_node_prefix_stats(node, &c, &err), KVS_OK) << err.message;
  kvs_node_destroy(node);
  return c.host_page_bytes;
}

// One rank's part: `steps` requests served one a step on a node created
// from `s` (every rank alike), its memory reached through m.
inline void random_host_rows_rank(kvs_comm_t comm, SmallPrefixNode &s, const NodeMemory &m,
                                  uint64_t seed, uint64_t steps, Barrier *barrier, Record *record) {
  kvs_node_t node = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_OK) << err.message;
  ASSERT_GT(kvs_node_num_pages(node), static_cast<uint64_t>(kPages) + 1);
  const bool leader = kvs_node_is_leader(node);
  Engine engine(node, seed, record);
  for (uint64_t step = 0; step < steps; step++) {
    if (leader) {
      record->written.clear();
      engine.serve();
      if (::testing::Test::HasFatalFailure()) break;
    }
    ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
    check_and_write(node, *record, m, step);
    barrier->wait();
  }
  kvs_node_prefix_counts c{};
  c.size = sizeof c;
  ASSERT_EQ(kvs_node_prefix_stats(node, &c, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_node_check(node, nullptr, &err), KVS_OK) << err.message;
  if (leader) {
    // The mix did what it is for: spills, drops and fetches.
    EXPECT_GT(c.spills, steps / 20);
    EXPECT_GT(c.fetches, steps / 40);
    EXPECT_GT(c.host_drops, 0u);
    EXPECT_GT(engine.host_hits, steps / 80);
    EXPECT_GT(engine.gpu_hits, steps / 80);
    kvs_table_row_stats t;
    kvs_table_row_stats_get(kvs_node_table(node), &t);
    EXPECT_EQ(t.spills, c.spills);
    EXPECT_EQ(t.fetches, c.fetches);
    std::printf(
        "%s rows, tp %d seed %llu: %llu steps, %llu spills, %llu fetches, %llu let go, %llu host "
        "hits, %llu GPU hits, %llu abandoned, %llu bytes moved\n",
        kvs_kv_dtype_name(s.o.kv_dtype), s.o.tp, (unsigned long long)seed,
        (unsigned long long)steps, (unsigned long long)c.spills, (unsigned long long)c.fetches,
        (unsigned long long)c.host_drops, (unsigned long long)engine.host_hits,
        (unsigned long long)engine.gpu_hits, (unsigned long long)engine.abandoned,
        (unsigned long long)t.bytes);
  }
  kvs_node_destroy(node);
}

}  // namespace kvs_test

#endif  // KVS_TESTS_SHARD_HOST_ROWS_RANDOM_H

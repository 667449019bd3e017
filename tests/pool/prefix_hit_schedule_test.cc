// A hit names specific blocks (tests/pool/hit_schedule_search.h): the
// window pool's leader under searched schedules of match, evict, insert,
// acquire, fetch and release, its journal replayed by a follower after
// every round (the step), both holding the same digest. One rank (the
// leader alone) and two (with the follower); with and without a host tier.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "pool/window_pool.h"
#include "tests/pool/hit_schedule_search.h"

using namespace kvs_test;

namespace {

// Built on the window pool alone (no //core fixtures), so that
// tests/mutants can link it against a planted variant of the pool.
constexpr uint64_t P = KVS_DEFAULT_WINDOW_PAGE;

struct PoolDeleter {
  void operator()(kvs_window_pool *pool) const { kvs_window_pool_destroy(pool); }
};
using Pool = std::unique_ptr<kvs_window_pool, PoolDeleter>;

// The tests' small geometry (window-only, CSA, HCA, CSA layers) with a
// prefix cache aligned to P, `pages` full pages, `win` window pages, a
// journal of `journal` entries (0: a follower's) and `host` host slots.
Pool prefix_pool(uint64_t pages, uint64_t win, size_t journal, uint64_t host) {
  const uint32_t ratios[] = {0, 4, 128, 4};
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_init(&g, 8, 4, 4, ratios, 4, &err), KVS_OK) << err.message;
  kvs_pool_sizes s;
  EXPECT_EQ(kvs_pool_sizes_compute(pages, &g, 0.5, P, win, &s, &err), KVS_OK) << err.message;
  kvs_window_pool_options options = KVS_WINDOW_POOL_OPTIONS_INIT;
  options.max_running = 4;
  options.journal_capacity = journal;
  options.prefix_cache = true;
  options.prefix_align = P;
  options.host_pages = host;
  kvs_window_pool_t pool = nullptr;
  EXPECT_EQ(kvs_window_pool_create(&s, &options, &pool, &err), KVS_OK) << err.message;
  return Pool(pool);
}

void expect_integrity(const kvs_window_pool *pool) {
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_check_integrity(pool, &err), KVS_OK) << err.message;
}

// A leader that journals and a follower that replays.
struct PrefixPair {
  Pool leader, follower;
  PrefixPair(uint64_t pages, uint64_t win, uint64_t host)
      : leader(prefix_pool(pages, win, 4096, host)), follower(prefix_pool(pages, win, 0, host)) {}
  std::vector<kvs_journal_entry> drain() {
    std::vector<kvs_journal_entry> entries(4096);
    size_t n = 0;
    kvs_window_pool_journal_drain(leader.get(), entries.data(), entries.size(), &n);
    entries.resize(n);
    return entries;
  }
  void step() {
    std::vector<kvs_journal_entry> entries = drain();
    kvs_error err;
    ASSERT_EQ(kvs_window_pool_apply(follower.get(), entries.data(), entries.size(), &err), KVS_OK)
        << err.message;
    EXPECT_EQ(kvs_window_pool_digest(leader.get()), kvs_window_pool_digest(follower.get()));
    expect_integrity(leader.get());
    expect_integrity(follower.get());
  }
};

kvs_prefix_hit pool_hit(const kvs_node_prefix_hit &h) {
  kvs_prefix_hit p = {h.matched_pages,    h.hit_tokens, h.reprefill_tokens,
                      h.truncated_tokens, h.block,      h.reprefill,
                      h.host_pages,       h.stamp,      0};
  return p;
}

// The leader's pool, and (two ranks) a follower that replays each round.
struct PoolIndex {
  PrefixPair pair;
  bool follow;
  static constexpr uint64_t kPages = 24;  // few, so pages come back as other blocks

  PoolIndex(bool two_ranks, uint64_t host) : pair(kPages + 1, 10, host), follow(two_ranks) {}
  kvs_window_pool *leader() { return pair.leader.get(); }

  uint64_t P() const { return ::P; }
  std::vector<int64_t> engine_pages() const {
    std::vector<int64_t> pages;
    for (int64_t p = 0; p < int64_t(kPages); p++) pages.push_back(p);  // the last is the dummy
    return pages;
  }
  kvs_status match(const std::vector<uint64_t> &keys, uint64_t prompt, uint64_t reprefill,
                   kvs_node_prefix_hit *hit, int64_t *pages, kvs_error *err) {
    kvs_prefix_hit h;
    kvs_status s = kvs_window_pool_prefix_match(leader(), keys.data(), keys.size(), prompt,
                                                reprefill, &h, pages, err);
    *hit = kvs_node_prefix_hit{sizeof(kvs_node_prefix_hit),
                               h.matched_pages,
                               h.hit_tokens,
                               h.reprefill_tokens,
                               h.truncated_tokens,
                               h.block,
                               h.reprefill,
                               h.host_pages,
                               h.stamp};
    return s;
  }
  // This geometry's rings are per window page: requests hold no slot.
  kvs_status admit(uint64_t, kvs_error *) { return KVS_OK; }
  kvs_status finish(uint64_t, kvs_error *) { return KVS_OK; }
  kvs_status acquire(uint64_t request, const kvs_node_prefix_hit &hit, kvs_error *err) {
    kvs_prefix_hit h = pool_hit(hit);
    return kvs_window_pool_prefix_acquire(leader(), request, &h, err);
  }
  kvs_status fetch(uint64_t request, const kvs_node_prefix_hit &hit,
                   const std::vector<uint64_t> &keys, const std::vector<int64_t> &pages,
                   kvs_error *err) {
    kvs_prefix_hit h = pool_hit(hit);
    return kvs_window_pool_prefix_fetch(leader(), request, &h, keys.data(), keys.size(),
                                        pages.data(), err);
  }
  kvs_status bind(uint64_t, const std::vector<int64_t> &locs, kvs_error *err) {
    return kvs_window_pool_alloc(leader(), locs.data(), locs.size(), nullptr, err);
  }
  kvs_status unbind(const std::vector<int64_t> &locs, kvs_error *err) {
    return kvs_window_pool_free(leader(), locs.data(), locs.size(), err);
  }
  kvs_status insert(uint64_t request, const std::vector<uint64_t> &keys,
                    const std::vector<int64_t> &pages, const std::vector<uint8_t> &tails,
                    std::vector<uint8_t> *taken, kvs_error *err) {
    return kvs_window_pool_prefix_insert(leader(), request, keys.data(), pages.data(), tails.data(),
                                         keys.size(), taken->data(), err);
  }
  kvs_status release(uint64_t request, kvs_error *err) {
    return kvs_window_pool_prefix_release(leader(), request, err);
  }
  kvs_status abandon(uint64_t request, kvs_error *err) {
    return kvs_window_pool_prefix_abandon(leader(), request, err);
  }
  kvs_status evict(uint64_t need, uint64_t need_window, std::vector<int64_t> *freed,
                   kvs_error *err) {
    freed->assign(kPages, -1);
    size_t n = 0;
    kvs_status s = kvs_window_pool_prefix_evict(leader(), need, need_window, freed->data(),
                                                freed->size(), &n, nullptr, err);
    freed->resize(n);
    return s;
  }
  bool node(int64_t page, uint64_t *key, int64_t *parent) {
    uint32_t refs = 0;
    bool tail = false;
    return kvs_window_pool_prefix_node(leader(), uint64_t(page), key, parent, &refs, &tail,
                                       nullptr) == KVS_OK;
  }
  uint64_t window_free_pages() { return kvs_window_pool_swa_available(leader()) / P(); }
  // The step: the follower replays the round's journal and agrees.
  void step() {
    if (follow) {
      pair.step();
    } else {
      pair.drain();
      expect_integrity(leader());
    }
  }
};

uint64_t schedules(uint64_t fallback) {
  const char *env = std::getenv("KVS_SCHEDULES");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : fallback;
}

void search(bool two_ranks, uint64_t host, uint64_t n, HitSearchCounts *c) {
  for (uint64_t seed = 1; seed <= n; seed++) {
    SCOPED_TRACE("schedule " + std::to_string(seed));
    PoolIndex ix(two_ranks, host);
    HitSearch<PoolIndex> s(ix, seed, c);
    c->schedules++;
    for (int r = 0; r < 60; r++) {
      s.round();
      if (::testing::Test::HasFailure()) return;
      ix.step();
    }
    s.finish_all();
    ix.step();
    if (::testing::Test::HasFailure()) return;
  }
}

void report(const char *what, const HitSearchCounts &c) {
  std::printf(
      "%s: %llu schedules, %llu rounds, %llu matches; %llu hits acquired, %llu fetched; %llu uses "
      "of stale hits refused; %llu evicted pages cached again\n",
      what, (unsigned long long)c.schedules, (unsigned long long)c.rounds,
      (unsigned long long)c.matches, (unsigned long long)c.acquired, (unsigned long long)c.fetched,
      (unsigned long long)c.stale_refused, (unsigned long long)c.reused_pages);
  // tools/reliability-report.sh sums these.
  std::printf(
      "reliability: hit_schedules %llu, stale uses refused %llu, exact uses of a tail being "
      "re-prefilled refused %llu\n",
      (unsigned long long)c.schedules, (unsigned long long)c.stale_refused,
      (unsigned long long)c.written_refused);
}

}  // namespace

TEST(PrefixHitSchedules, no_acquire_holds_blocks_other_than_its_match_found) {
  for (bool two : {false, true}) {
    HitSearchCounts c;
    search(two, 0, schedules(150), &c);
    report(two ? "two ranks" : "one rank", c);
    // The search reached what it is for.
    EXPECT_GT(c.stale_refused, c.schedules / 2);
    EXPECT_GT(c.reused_pages, c.schedules);
    EXPECT_GT(c.acquired, c.schedules);
  }
}

TEST(PrefixHitSchedules, no_fetch_hangs_blocks_under_another_than_its_match_found) {
  for (bool two : {false, true}) {
    HitSearchCounts c;
    search(two, 6, schedules(150), &c);
    report(two ? "two ranks, host tier" : "one rank, host tier", c);
    EXPECT_GT(c.fetched, c.schedules / 2);
    EXPECT_GT(c.stale_refused, c.schedules / 2);
  }
}

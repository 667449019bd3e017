// The prefix cache's host tier: an evicted block spills to a host slot, a
// later prompt whose keys run past the GPU index fetches it back into fresh
// pages (re-prefilling one window), a full tier lets its least recently
// used block go, every refusal changes nothing, a follower replaying the
// leader's journal holds the same slots (digest and integrity), and a
// replay that fails on a fetch is undone whole.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/mix.h"
#include "pool/window_pool.h"
#include "tests/pool/prefix_fixtures.h"

using namespace kvs_test;

namespace {

Pool host_pool(uint64_t pages, uint64_t win_pages, uint64_t host, size_t journal) {
  return prefix_pool(pages, win_pages, 128, journal, host);
}

struct Pair : PrefixPair {
  explicit Pair(uint64_t host, uint64_t pages = 32, uint64_t win = 12)
      : PrefixPair(128, pages, win, host) {}
};

// The same, then everything it cached was evicted again.
void cache_then_evict(kvs_window_pool *pool, uint64_t request, const std::vector<uint64_t> &keys,
                      const std::vector<int64_t> &pages) {
  cache(pool, request, keys, pages);
  kvs_error err;
  std::vector<int64_t> freed(pages.size());
  size_t n_freed = 0;
  ASSERT_EQ(kvs_window_pool_prefix_evict(pool, pages.size(), 0, freed.data(), freed.size(),
                                         &n_freed, nullptr, &err),
            KVS_OK)
      << err.message;
  ASSERT_EQ(n_freed, pages.size());
}

}  // namespace

TEST(PrefixHost, an_evicted_block_spills_and_a_later_prompt_fetches_it_back) {
  Pair pair(8);
  kvs_window_pool *pool = pair.leader.get();
  cache_then_evict(pool, 1, {10, 11, 12}, {3, 4, 5});
  kvs_prefix_stats s = stats_of(pool);
  EXPECT_EQ(s.nodes, 0u);
  EXPECT_EQ(s.spills, 3u);
  EXPECT_EQ(s.host_blocks, 3u);
  EXPECT_EQ(s.host_slots, 8u);
  pair.step();
  // Exact hits only (no re-prefill): the host tier cannot serve, nothing hits.
  kvs_prefix_hit exact = match(pool, {10, 11, 12, 13}, 4 * P + 1, 0);
  EXPECT_EQ(exact.host_pages, 0u);
  EXPECT_EQ(exact.hit_tokens, 0u);
  // With a re-prefill of one window the three blocks come back.
  kvs_prefix_hit hit = match(pool, {10, 11, 12, 13}, 4 * P + 1, P);
  EXPECT_EQ(hit.block, -1);
  EXPECT_EQ(hit.host_pages, 3u);
  EXPECT_EQ(hit.hit_tokens, 3 * P);
  EXPECT_TRUE(hit.reprefill);
  EXPECT_EQ(hit.reprefill_tokens, P);
  // A step with room for two fetched blocks takes a shallower hit.
  kvs_prefix_hit two;
  ASSERT_EQ(kvs_window_pool_prefix_match_within(pool, std::vector<uint64_t>{10, 11, 12, 13}.data(),
                                                4, 4 * P + 1, P, 2, &two, nullptr, nullptr),
            KVS_OK);
  EXPECT_EQ(two.host_pages, 2u);
  EXPECT_EQ(two.hit_tokens, 2 * P);
  // acquire does not take it: its blocks need pages.
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_prefix_acquire(pool, 2, &hit, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(has(err.message, "kvs_window_pool_prefix_fetch")) << err.message;
  std::vector<uint64_t> keys = {10, 11, 12, 13};
  std::vector<int64_t> pages = {7, 8, 9};
  ASSERT_EQ(
      kvs_window_pool_prefix_fetch(pool, 2, &hit, keys.data(), keys.size(), pages.data(), &err),
      KVS_OK)
      << err.message;
  s = stats_of(pool);
  EXPECT_EQ(s.fetches, 3u);
  EXPECT_EQ(s.nodes, 3u);
  EXPECT_EQ(s.holds, 1u);
  uint64_t key = 0;
  int64_t parent = -2;
  bool tail = false;
  ASSERT_EQ(kvs_window_pool_prefix_node(pool, 9, &key, &parent, nullptr, &tail, &err), KVS_OK);
  EXPECT_EQ(key, 12u);
  EXPECT_EQ(parent, 8);
  EXPECT_TRUE(tail);  // its window page, written by request 2
  pair.step();
  // Once request 2 has re-prefilled and released, the block hits exactly.
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 2, nullptr), KVS_OK);
  pair.step();
  kvs_prefix_hit again = match(pool, {10, 11, 12, 13}, 4 * P + 1, 0);
  EXPECT_EQ(again.block, 9);
  EXPECT_EQ(again.hit_tokens, 3 * P);
  EXPECT_EQ(again.host_pages, 0u);
  // Evicting the fetched blocks spills each into its own copy's slot
  // (issue 34: the tier kept them since the fetch, at its LRU end).
  std::vector<int64_t> freed(3);
  size_t n_freed = 0;
  ASSERT_EQ(kvs_window_pool_prefix_evict(pool, 3, 0, freed.data(), 3, &n_freed, nullptr, &err),
            KVS_OK);
  EXPECT_EQ(n_freed, 3u);
  EXPECT_EQ(stats_of(pool).spills, 6u);
  EXPECT_EQ(stats_of(pool).host_blocks, 3u);
  pair.step();
}

TEST(PrefixHost, a_full_tier_lets_its_least_recently_used_block_go) {
  Pair pair(2);
  kvs_window_pool *pool = pair.leader.get();
  cache_then_evict(pool, 1, {10}, {3});
  cache_then_evict(pool, 2, {20}, {4});
  pair.step();
  // Fetching block 10 makes block 20 the least recently used. (A one-page
  // hit gains only when the re-prefill costs less than the page: P / 2.)
  kvs_prefix_hit hit = match(pool, {10, 99}, 2 * P + 1, P / 2);
  ASSERT_EQ(hit.host_pages, 1u);
  EXPECT_EQ(match(pool, {10, 99}, 2 * P + 1, P).host_pages, 0u);  // no gain at P
  std::vector<uint64_t> keys = {10, 99};
  int64_t page = 6;
  kvs_error err;
  ASSERT_EQ(kvs_window_pool_prefix_fetch(pool, 3, &hit, keys.data(), 2, &page, &err), KVS_OK)
      << err.message;
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 3, nullptr), KVS_OK);
  // The fetched block leaves the GPU again into its own slot (kept at the
  // tier's LRU end since the fetch), which becomes the most recent.
  int64_t freed = -1;
  size_t n_freed = 0;
  ASSERT_EQ(kvs_window_pool_prefix_evict(pool, 1, 0, &freed, 1, &n_freed, nullptr, &err), KVS_OK);
  EXPECT_EQ(freed, 6);
  EXPECT_EQ(stats_of(pool).spills, 3u);
  EXPECT_EQ(stats_of(pool).host_drops, 0u);
  pair.step();
  cache_then_evict(pool, 4, {30}, {5});
  kvs_prefix_stats s = stats_of(pool);
  EXPECT_EQ(s.spills, 4u);
  EXPECT_EQ(s.host_blocks, 2u);
  EXPECT_EQ(s.host_drops, 1u);
  EXPECT_EQ(match(pool, {20, 99}, 2 * P + 1, P / 2).host_pages, 0u);
  EXPECT_EQ(match(pool, {30, 99}, 2 * P + 1, P / 2).host_pages, 1u);
  EXPECT_EQ(match(pool, {10, 99}, 2 * P + 1, P / 2).host_pages, 1u);
  pair.step();
}

// Issue 34: a host hit takes the pages it needs in one decision. The
// plain eviction would take the hit's own block (the least recently used
// leaf) and spill it into the one slot the hit fetches from; the eviction
// for the fetch keeps both, evicts the other block (dropping it: every
// slot is the hit's), and the fetch then succeeds and replays.
TEST(PrefixHost, the_eviction_for_a_fetch_keeps_the_hits_block_and_host_slots) {
  Pair pair(1);
  kvs_window_pool *pool = pair.leader.get();
  kvs_error err;
  cache(pool, 1, {10, 11}, {3, 4});
  std::vector<int64_t> freed(2, -1);
  size_t n_freed = 0;
  ASSERT_EQ(kvs_window_pool_prefix_evict(pool, 1, 0, freed.data(), 1, &n_freed, nullptr, &err),
            KVS_OK);
  ASSERT_EQ(freed[0], 4);  // to the tier's one slot
  cache(pool, 2, {20}, {5});
  pair.step();
  std::vector<uint64_t> keys = {10, 11, 99};
  kvs_prefix_hit hit = match(pool, keys, 3 * P + 1, P / 2);
  ASSERT_EQ(hit.block, 3);
  ASSERT_EQ(hit.host_pages, 1u);
  // Refused, changing nothing: keys whose block the tier does not hold.
  std::vector<uint64_t> bad = {10, 12, 99};
  EXPECT_EQ(kvs_window_pool_prefix_evict_for_fetch(pool, &hit, bad.data(), 3, 1, freed.data(), 2,
                                                   &n_freed, nullptr, &err),
            KVS_ERR_NOT_FOUND);
  EXPECT_NE(std::string(err.message).find("not in the host tier"), std::string::npos)
      << err.message;
  EXPECT_EQ(stats_of(pool).evictions, 1u) << "unchanged";
  ASSERT_EQ(kvs_window_pool_prefix_evict_for_fetch(pool, &hit, keys.data(), 3, 1, freed.data(), 2,
                                                   &n_freed, nullptr, &err),
            KVS_OK)
      << err.message;
  ASSERT_EQ(n_freed, 1u);
  EXPECT_EQ(freed[0], 5) << "block 3, the hit's, stays";
  kvs_prefix_stats s = stats_of(pool);
  EXPECT_EQ(s.host_blocks, 1u);
  EXPECT_EQ(s.host_drops, 0u);
  ASSERT_EQ(kvs_window_pool_prefix_fetch(pool, 3, &hit, keys.data(), 3, freed.data(), &err), KVS_OK)
      << err.message;
  pair.step();  // the follower replays the eviction and the fetch alike
}

TEST(PrefixHost, a_block_is_found_only_under_the_same_prefix) {
  Pair pair(8);
  kvs_window_pool *pool = pair.leader.get();
  cache_then_evict(pool, 1, {10, 11}, {3, 4});
  // Key 11 under another first block is another block.
  EXPECT_EQ(match(pool, {50, 11, 12}, 3 * P + 1, P).host_pages, 0u);
  EXPECT_EQ(match(pool, {11, 12}, 2 * P + 1, P).host_pages, 0u);
  EXPECT_EQ(match(pool, {10, 11, 12}, 3 * P + 1, P).host_pages, 2u);
}

// Blocks 10 and 11 spilled (both ranks), and a prompt 10, 11, 12 that
// reaches both in the host tier.
class TwoSpilled : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_then_evict(pool, 1, {10, 11}, {3, 4});
    pair.step();
    hit = match(pool, keys, 3 * P + 1, P);
    ASSERT_EQ(hit.host_pages, 2u);
  }
  Pair pair{8};
  kvs_window_pool *pool = pair.leader.get();
  std::vector<uint64_t> keys = {10, 11, 12};
  kvs_prefix_hit hit{};
};

TEST_F(TwoSpilled, a_fetch_refuses_and_changes_nothing) {
  uint64_t digest = kvs_window_pool_digest(pool);
  size_t pending = kvs_window_pool_journal_pending(pool);
  kvs_error err;
  auto refused = [&](std::vector<int64_t> pages, kvs_status want, const std::string &words) {
    EXPECT_EQ(
        kvs_window_pool_prefix_fetch(pool, 2, &hit, keys.data(), keys.size(), pages.data(), &err),
        want)
        << words;
    EXPECT_TRUE(has(err.message, words)) << err.message;
    EXPECT_EQ(kvs_window_pool_digest(pool), digest);
    EXPECT_EQ(kvs_window_pool_journal_pending(pool), pending);
  };
  refused({6, 6}, KVS_ERR_CONFLICT, "given twice");
  refused({6, 31}, KVS_ERR_OUT_OF_RANGE, "dummy");
  refused({6, -1}, KVS_ERR_OUT_OF_RANGE, "outside the history");
  ASSERT_EQ(alloc(pool, page_locs(7)), KVS_OK);  // page 7 is bound: a request writes it
  digest = kvs_window_pool_digest(pool);
  pending = kvs_window_pool_journal_pending(pool);
  refused({6, 7}, KVS_ERR_CONFLICT, "bound to a window page");
  // Too few keys for the hit.
  EXPECT_EQ(kvs_window_pool_prefix_fetch(pool, 2, &hit, keys.data(), 1,
                                         std::vector<int64_t>{5, 6}.data(), &err),
            KVS_ERR_INVALID_ARGUMENT);
  // A hit with no host blocks, and NULLs.
  kvs_prefix_hit none = match(pool, {77}, P + 1, P);
  int64_t page = 5;
  EXPECT_EQ(kvs_window_pool_prefix_fetch(pool, 2, &none, keys.data(), 3, &page, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_window_pool_prefix_fetch(pool, 2, nullptr, keys.data(), 3, &page, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_window_pool_prefix_fetch(nullptr, 2, &hit, keys.data(), 3, &page, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_window_pool_digest(pool), digest);
  // A one-slot tier: block 11 spilled first (the leaf), then block 10 took
  // its slot, so only the first block comes back.
  Pair small(1);
  kvs_window_pool *one = small.leader.get();
  cache_then_evict(one, 1, {10, 11}, {3, 4});
  kvs_prefix_hit stale = match(one, {10, 11, 12}, 3 * P + 1, P / 2);
  ASSERT_EQ(stale.host_pages, 1u);
  // The tier changes after the match (block 20 takes the slot): refused,
  // naming the block, nothing changed.
  cache_then_evict(one, 2, {20}, {5});
  uint64_t before = kvs_window_pool_digest(one);
  page = 6;
  EXPECT_EQ(kvs_window_pool_prefix_fetch(one, 3, &stale, keys.data(), 3, &page, &err),
            KVS_ERR_NOT_FOUND);
  EXPECT_TRUE(has(err.message, "not in the host tier")) << err.message;
  EXPECT_EQ(kvs_window_pool_digest(one), before);
}

TEST(PrefixHost, host_pages_need_a_prefix_cache) {
  kvs_pool_sizes s = sizes(8, args(), 0.5, 5);
  kvs_window_pool_options options = KVS_WINDOW_POOL_OPTIONS_INIT;
  options.max_running = 2;
  options.host_pages = 4;
  kvs_window_pool_t pool = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_create(&s, &options, &pool, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(has(err.message, "prefix_cache is off")) << err.message;
  EXPECT_EQ(pool, nullptr);
}

TEST_F(TwoSpilled, a_replay_that_fails_on_a_fetch_is_undone_whole) {
  std::vector<int64_t> pages = {6, 7};
  ASSERT_EQ(kvs_window_pool_prefix_fetch(pool, 2, &hit, keys.data(), 3, pages.data(), nullptr),
            KVS_OK);
  std::vector<kvs_journal_entry> entries = pair.drain();
  // The second fetch names a slot that holds nothing on the follower.
  size_t fetches = 0;
  for (kvs_journal_entry &e : entries) {
    bool prefix = (e.full_page & KVS_JOURNAL_PREFIX_TAG) == KVS_JOURNAL_PREFIX_TAG;
    if (prefix && ((e.full_page >> 56) & 0x3f) == 10 && ++fetches == 2) e.window_page = 5;
  }
  ASSERT_EQ(fetches, 2u);
  uint64_t before = kvs_window_pool_digest(pair.follower.get());
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_apply(pair.follower.get(), entries.data(), entries.size(), &err),
            KVS_ERR_CONFLICT);
  EXPECT_TRUE(has(err.message, "host slot 5")) << err.message;
  EXPECT_EQ(kvs_window_pool_digest(pair.follower.get()), before);
  EXPECT_INTEGRITY(pair.follower.get());
  EXPECT_EQ(stats_of(pair.follower.get()).fetches, 0u);
}

TEST(PrefixHost, a_diverged_host_slot_is_in_the_digest_range_past_the_blocks) {
  // Two pools whose GPU indexes end alike (empty) but whose host slots
  // hold their blocks in another order.
  Pool pa = host_pool(32, 12, 4, 4096), pb = host_pool(32, 12, 4, 4096);
  cache_then_evict(pa.get(), 1, {10}, {3});
  cache_then_evict(pa.get(), 2, {20}, {4});
  cache_then_evict(pb.get(), 1, {20}, {3});
  cache_then_evict(pb.get(), 2, {10}, {4});
  const kvs_window_pool *a = pa.get(), *b = pb.get();
  EXPECT_NE(kvs_window_pool_digest(a), kvs_window_pool_digest(b));
  uint64_t units = kvs_window_pool_digest_units(a);
  ASSERT_EQ(units, kvs_window_pool_digest_units(b));
  uint64_t host_base = units - 4;
  EXPECT_EQ(kvs_window_pool_digest_range(a, 0, host_base),
            kvs_window_pool_digest_range(b, 0, host_base));
  EXPECT_NE(kvs_window_pool_digest_range(a, host_base, host_base + 1),
            kvs_window_pool_digest_range(b, host_base, host_base + 1));
  EXPECT_EQ(kvs_window_pool_digest_range(a, host_base + 2, units),
            kvs_window_pool_digest_range(b, host_base + 2, units));
  uint64_t chain_a = 0, chain_b = 0;
  ASSERT_EQ(kvs_window_pool_prefix_host_slot(a, 0, &chain_a, nullptr), KVS_OK);
  ASSERT_EQ(kvs_window_pool_prefix_host_slot(b, 1, &chain_b, nullptr), KVS_OK);
  EXPECT_EQ(chain_a, chain_b);  // block 10, in slot 0 of one and slot 1 of the other
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_prefix_host_slot(a, 2, &chain_a, &err), KVS_ERR_NOT_FOUND);
  // A spill into a free slot out of order is refused.
  Pair pair(4);
  cache_then_evict(pair.leader.get(), 1, {10}, {3});
  std::vector<kvs_journal_entry> entries = pair.drain();
  for (kvs_journal_entry &e : entries) {
    bool prefix = (e.full_page & KVS_JOURNAL_PREFIX_TAG) == KVS_JOURNAL_PREFIX_TAG;
    if (prefix && ((e.full_page >> 56) & 0x3f) == 9) e.window_page = 2;
  }
  EXPECT_EQ(kvs_window_pool_apply(pair.follower.get(), entries.data(), entries.size(), &err),
            KVS_ERR_CONFLICT);
  EXPECT_TRUE(has(err.message, "fills slot 0 next")) << err.message;
}

TEST(PrefixHost, a_random_workload_with_a_small_tier_stays_conserved_and_replayed) {
  Pair pair(6, 64, 20);
  kvs_window_pool *pool = pair.leader.get();
  uint64_t seed = 11;
  auto rnd = [&](uint64_t n) { return kvs_splitmix64(&seed) % n; };
  std::vector<bool> engine_free(63, true);  // page 63 is the dummy
  auto take_page = [&]() -> int64_t {
    for (size_t p = 0; p < engine_free.size(); p++) {
      if (engine_free[p]) {
        engine_free[p] = false;
        return int64_t(p);
      }
    }
    int64_t freed[1];
    size_t n_freed = 0;
    EXPECT_EQ(kvs_window_pool_prefix_evict(pool, 1, 0, freed, 1, &n_freed, nullptr, nullptr),
              KVS_OK);
    return n_freed == 1 ? freed[0] : -1;
  };
  uint64_t fetched = 0;
  for (int round = 0; round < 300; round++) {
    uint64_t request = 100 + uint64_t(round);
    size_t len = 1 + rnd(5);
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < len; i++) keys.push_back(rnd(3) * 10 + i);
    kvs_prefix_hit hit = match(pool, keys, len * P + 1, rnd(4) ? P : 0);
    if (hit.host_pages > 0) {
      std::vector<int64_t> pages;
      for (uint64_t i = 0; i < hit.host_pages; i++) pages.push_back(take_page());
      bool ok = true;
      for (int64_t pg : pages) ok = ok && pg >= 0;
      // Taking pages may have evicted (and spilled) the path: match again.
      if (ok && kvs_window_pool_prefix_fetch(pool, request, &hit, keys.data(), keys.size(),
                                             pages.data(), nullptr) == KVS_OK) {
        fetched += hit.host_pages;
      } else {
        for (int64_t pg : pages) {
          if (pg >= 0) engine_free[size_t(pg)] = true;
        }
        continue;
      }
    } else if (hit.block >= 0 &&
               kvs_window_pool_prefix_acquire(pool, request, &hit, nullptr) != KVS_OK) {
      continue;
    }
    size_t first = hit.hit_tokens / P;
    std::vector<uint64_t> rest(keys.begin() + long(first), keys.end());
    std::vector<int64_t> pages;
    for (size_t i = 0; i < rest.size(); i++) {
      int64_t page = take_page();
      if (page < 0) break;
      pages.push_back(page);
    }
    rest.resize(pages.size());
    std::vector<uint8_t> tails(pages.size(), 0), taken(pages.size());
    if (!pages.empty() && alloc(pool, page_locs(uint64_t(pages.back()))) == KVS_OK) {
      tails.back() = 1;
    }
    if (!pages.empty()) {
      ASSERT_EQ(kvs_window_pool_prefix_insert(pool, request, rest.data(), pages.data(),
                                              tails.data(), rest.size(), taken.data(), nullptr),
                KVS_OK);
    }
    for (size_t i = 0; i < pages.size(); i++) {
      if (!taken[i]) {
        if (tails[i]) {
          ASSERT_EQ(release(pool, page_locs(uint64_t(pages[i]))), KVS_OK);
        }
        engine_free[size_t(pages[i])] = true;
      }
    }
    ASSERT_EQ(kvs_window_pool_prefix_release(pool, request, nullptr), KVS_OK);
    // Its re-prefilled window page (if any) is the cache's tail now; drop
    // tails now and then so windows stay free.
    uint64_t wfreed = 0;
    size_t n_freed = 0;
    if (kvs_window_pool_swa_available(pool) < 4 * P) {
      ASSERT_EQ(kvs_window_pool_prefix_evict(pool, 0, 4, nullptr, 0, &n_freed, &wfreed, nullptr),
                KVS_OK);
    }
    pair.step();
    if (HasFatalFailure()) return;
  }
  kvs_prefix_stats s = stats_of(pool);
  EXPECT_EQ(s.holds, 0u);
  EXPECT_GT(s.spills, 0u);
  EXPECT_GT(fetched, 0u);
  EXPECT_EQ(s.fetches, fetched);
  EXPECT_LE(s.host_blocks, 6u);
}

TEST(PrefixHost, a_follower_replays_a_step_as_large_as_the_leaders_journal) {
  // 2,100 pages inserted in one step: 4,201 prefix entries (a block's key
  // and link each, then the hold), past the 4,096 a pool without a
  // journal replays by default.
  auto make = [](size_t journal, size_t replay) {
    kvs_pool_sizes s = sizes(2200, args(), 0.5, 1500);
    kvs_window_pool_options options = KVS_WINDOW_POOL_OPTIONS_INIT;
    options.max_running = 4;
    options.journal_capacity = journal;
    options.replay_capacity = replay;
    options.prefix_cache = true;
    kvs_window_pool_t pool = nullptr;
    kvs_error err;
    EXPECT_EQ(kvs_window_pool_create(&s, &options, &pool, &err), KVS_OK) << err.message;
    return Pool(pool);
  };
  Pool leader = make(8192, 0), sized = make(0, 8192), short_one = make(0, 0);
  std::vector<uint64_t> keys;
  std::vector<int64_t> pages;
  for (int64_t i = 0; i < 2100; i++) {
    keys.push_back(uint64_t(1000 + i));
    pages.push_back(i);
  }
  std::vector<uint8_t> taken(keys.size());
  kvs_error err;
  ASSERT_EQ(kvs_window_pool_prefix_insert(leader.get(), 1, keys.data(), pages.data(), nullptr,
                                          keys.size(), taken.data(), &err),
            KVS_OK)
      << err.message;
  std::vector<kvs_journal_entry> entries(8192);
  size_t n = 0;
  kvs_window_pool_journal_drain(leader.get(), entries.data(), entries.size(), &n);
  ASSERT_GT(n, 4096u);
  EXPECT_EQ(kvs_window_pool_apply(short_one.get(), entries.data(), n, &err), KVS_ERR_JOURNAL_FULL);
  EXPECT_TRUE(has(err.message, "more than 4096 prefix entries")) << err.message;
  ASSERT_EQ(kvs_window_pool_apply(sized.get(), entries.data(), n, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_window_pool_digest(sized.get()), kvs_window_pool_digest(leader.get()));
  EXPECT_INTEGRITY(sized.get());
}

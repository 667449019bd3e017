// The window pool's prefix cache (issue 26): hits at boundaries where every
// ring is empty, retained tails against re-prefill, no aliasing, leader
// eviction replayed by a follower to the same digest, conservation in the
// integrity check, bisection naming a cached block, all-or-nothing replay.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "core/mix.h"
#include "pool/window_pool.h"
#include "tests/pool/prefix_fixtures.h"

using namespace kvs_test;

namespace {

struct Pair : PrefixPair {
  explicit Pair(uint64_t align = 128, uint64_t pages = 32, uint64_t win = 12)
      : PrefixPair(align, pages, win) {}
};

void bind_pages(kvs_window_pool *pool, const std::vector<int64_t> &pages) {
  for (int64_t page : pages) {
    kvs_error err;
    ASSERT_EQ(alloc(pool, page_locs(uint64_t(page)), &err), KVS_OK) << err.message;
  }
}

std::vector<uint8_t> insert(kvs_window_pool *pool, uint64_t request,
                            const std::vector<uint64_t> &keys, const std::vector<int64_t> &pages,
                            const std::vector<uint8_t> &tails) {
  std::vector<uint8_t> taken(keys.size(), 9);
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_prefix_insert(pool, request, keys.data(), pages.data(),
                                          tails.empty() ? nullptr : tails.data(), keys.size(),
                                          taken.data(), &err),
            KVS_OK)
      << err.message;
  return taken;
}

// Request 1 wrote pages 3 and 4 (keys 10, 11), kept no tail, and finished:
// both are cached and unreferenced, on both pools.
void two_cached_pages(Pair &pair) {
  kvs_window_pool *pool = pair.leader.get();
  bind_pages(pool, {3, 4});
  insert(pool, 1, {10, 11}, {3, 4}, {0, 0});
  ASSERT_EQ(release(pool, page_locs(3)), KVS_OK);
  ASSERT_EQ(release(pool, page_locs(4)), KVS_OK);
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, nullptr), KVS_OK);
  pair.step();
}

}  // namespace

TEST(PrefixCache, a_finished_requests_pages_hit_at_its_tail_and_never_past_the_prompt) {
  Pair pair;
  kvs_window_pool *pool = pair.leader.get();
  // Request 1 wrote pages 3, 4, 5 (keys 10, 11, 12); it keeps the window of
  // page 5 (the prompt's last) as the tail, and frees the others.
  bind_pages(pool, {3, 4, 5});
  ASSERT_EQ(release(pool, page_locs(3)), KVS_OK);
  std::vector<uint8_t> taken = insert(pool, 1, {10, 11, 12}, {3, 4, 5}, {0, 0, 1});
  EXPECT_EQ(taken, (std::vector<uint8_t>{1, 1, 1}));
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, nullptr), KVS_OK);
  // Page 4's window is the request's own: freeing it works; page 5's tail
  // is the cache's: a free skips it.
  ASSERT_EQ(release(pool, page_locs(4)), KVS_OK);
  ASSERT_EQ(release(pool, page_locs(5)), KVS_OK);
  EXPECT_GE(translate(pool, 5 * P), 0);
  pair.step();

  // Same prefix plus more: the hit is 3 pages, exact (tail retained).
  kvs_prefix_hit hit = match(pool, {10, 11, 12, 13}, 4 * P + 7);
  EXPECT_EQ(hit.matched_pages, 3u);
  EXPECT_EQ(hit.hit_tokens, 3 * P);
  EXPECT_EQ(hit.block, 5);
  EXPECT_FALSE(hit.reprefill);
  // A prompt that ends at exactly 3 pages computes its last token: the
  // boundary drops to 2 pages, where no tail is kept, so no exact hit.
  hit = match(pool, {10, 11, 12}, 3 * P);
  EXPECT_EQ(hit.hit_tokens, 0u);
  EXPECT_EQ(hit.truncated_tokens, 2 * P);
  // With a re-prefill of one window the engine recomputes P window tokens
  // rather than 2 pages.
  hit = match(pool, {10, 11, 12}, 3 * P, P);
  EXPECT_TRUE(hit.reprefill);
  EXPECT_EQ(hit.hit_tokens, 2 * P);
  EXPECT_EQ(hit.reprefill_tokens, P);
  EXPECT_EQ(hit.block, 4);
  // A different first key misses.
  EXPECT_EQ(match(pool, {99, 11, 12, 13}, 10 * P).matched_pages, 0u);
}

TEST(PrefixCache, hits_end_on_multiples_of_every_compression_ratio) {
  // P = 128 tokens, ratios up to 256 (say): boundaries every 2 pages.
  Pair pair(256);
  kvs_window_pool *pool = pair.leader.get();
  bind_pages(pool, {1, 2, 3});
  insert(pool, 1, {10, 11, 12}, {1, 2, 3}, {1, 1, 1});
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, nullptr), KVS_OK);
  pair.step();
  kvs_prefix_hit hit = match(pool, {10, 11, 12, 13}, 10 * P);
  EXPECT_EQ(hit.matched_pages, 3u);
  EXPECT_EQ(hit.hit_tokens, 2 * P);  // not 3: 384 is no multiple of 256
  EXPECT_EQ(hit.block, 2);
}

TEST(PrefixCache, a_cached_page_is_never_bound_for_writing_and_a_reprefill_writer_is_alone) {
  Pair pair;
  two_cached_pages(pair);
  kvs_window_pool *pool = pair.leader.get();
  kvs_error err;
  uint64_t digest = kvs_window_pool_digest(pool);
  EXPECT_EQ(alloc(pool, page_locs(4), &err), KVS_ERR_CONFLICT);
  EXPECT_TRUE(has(err.message, "cached prefix block")) << err.message;
  EXPECT_EQ(kvs_window_pool_digest(pool), digest);

  // Request 2 re-prefills page 4's window: it alone writes it.
  kvs_prefix_hit hit = match(pool, {10, 11, 12}, 5 * P, P);
  ASSERT_TRUE(hit.reprefill);
  ASSERT_EQ(kvs_window_pool_prefix_acquire(pool, 2, &hit, &err), KVS_OK) << err.message;
  EXPECT_GE(translate(pool, 4 * P), 0);
  pair.step();
  // Request 3 cannot hit through a tail being written, nor write it too.
  kvs_prefix_hit other = match(pool, {10, 11, 12}, 5 * P, P);
  EXPECT_FALSE(other.reprefill);
  EXPECT_EQ(other.hit_tokens, 0u);
  EXPECT_EQ(kvs_window_pool_prefix_acquire(pool, 3, &hit, &err), KVS_ERR_CONFLICT);
  // Once request 2 releases, the tail is retained and hits exactly.
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 2, nullptr), KVS_OK);
  pair.step();
  other = match(pool, {10, 11, 12}, 5 * P, P);
  EXPECT_FALSE(other.reprefill);
  EXPECT_EQ(other.hit_tokens, 2 * P);
}

TEST(PrefixCache, a_reprefill_writer_that_abandons_leaves_no_readable_tail) {
  Pair pair;
  two_cached_pages(pair);
  kvs_window_pool *pool = pair.leader.get();
  uint64_t free_before = kvs_window_pool_swa_available(pool);
  kvs_prefix_hit hit = match(pool, {10, 11, 12}, 5 * P, P);
  ASSERT_TRUE(hit.reprefill);
  kvs_error err;
  ASSERT_EQ(kvs_window_pool_prefix_acquire(pool, 2, &hit, &err), KVS_OK) << err.message;
  EXPECT_GE(translate(pool, 4 * P), 0);
  EXPECT_EQ(kvs_window_pool_swa_available(pool), free_before - P);
  // Request 2 is refused before its prefill reached the boundary: the tail
  // it was to write is dropped with its window page, on every rank.
  ASSERT_EQ(kvs_window_pool_prefix_abandon(pool, 2, &err), KVS_OK) << err.message;
  pair.step();
  EXPECT_LT(translate(pool, 4 * P), 0);
  EXPECT_EQ(kvs_window_pool_swa_available(pool), free_before);
  kvs_prefix_stats stats;
  ASSERT_EQ(kvs_window_pool_prefix_stats(pool, &stats, &err), KVS_OK);
  EXPECT_EQ(stats.holds, 0u);
  EXPECT_EQ(stats.refs, 0u);
  EXPECT_EQ(stats.tails, 0u);
  // No exact hit reads the unwritten tail; a re-prefill hit is taken again.
  kvs_prefix_hit again = match(pool, {10, 11, 12}, 5 * P, P);
  EXPECT_TRUE(again.reprefill);
  EXPECT_EQ(again.block, 4);
  // Abandoning a request that holds nothing journals nothing.
  ASSERT_EQ(kvs_window_pool_prefix_abandon(pool, 9, &err), KVS_OK);
  EXPECT_EQ(kvs_window_pool_journal_pending(pool), 0u);
}

TEST(PrefixCache, the_leader_evicts_lru_leaves_and_tails_first_and_the_follower_agrees) {
  Pair pair;
  kvs_window_pool *pool = pair.leader.get();
  // Two chains: A (pages 1, 2) released first, B (pages 5, 6) later.
  bind_pages(pool, {1, 2, 5, 6});
  insert(pool, 1, {10, 11}, {1, 2}, {0, 1});
  insert(pool, 2, {20, 21}, {5, 6}, {0, 1});
  ASSERT_EQ(release(pool, page_locs(1)), KVS_OK);
  ASSERT_EQ(release(pool, page_locs(5)), KVS_OK);
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, nullptr), KVS_OK);
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 2, nullptr), KVS_OK);
  pair.step();
  // Request 3 holds chain B: nothing of it may go.
  kvs_prefix_hit hit = match(pool, {20, 21, 22}, 5 * P);
  ASSERT_EQ(hit.hit_tokens, 2 * P);
  ASSERT_EQ(kvs_window_pool_prefix_acquire(pool, 3, &hit, nullptr), KVS_OK);
  pair.step();

  // One window page wanted: A's tail (the only unreferenced one) goes.
  int64_t freed[8];
  size_t n_freed = 9;
  uint64_t wfreed = 0;
  kvs_error err;
  ASSERT_EQ(kvs_window_pool_prefix_evict(pool, 0, 1, freed, 8, &n_freed, &wfreed, &err), KVS_OK);
  EXPECT_EQ(n_freed, 0u);
  EXPECT_EQ(wfreed, 1u);
  EXPECT_LT(translate(pool, 2 * P), 0);
  pair.step();
  // Three pages wanted: A's leaf, then its parent; B is held.
  ASSERT_EQ(kvs_window_pool_prefix_evict(pool, 3, 0, freed, 8, &n_freed, &wfreed, &err), KVS_OK);
  ASSERT_EQ(n_freed, 2u);
  EXPECT_EQ(freed[0], 2);
  EXPECT_EQ(freed[1], 1);
  pair.step();
  kvs_prefix_stats stats;
  ASSERT_EQ(kvs_window_pool_prefix_stats(pair.follower.get(), &stats, nullptr), KVS_OK);
  EXPECT_EQ(stats.nodes, 2u);
  EXPECT_EQ(stats.evictions, 2u);
  EXPECT_EQ(stats.holds, 1u);
  EXPECT_EQ(stats.refs, 2u);
  // The freed pages are the engine's again: they bind.
  bind_pages(pool, {1, 2});
  pair.step();
}

TEST(PrefixCache, conservation_and_bisection_name_a_diverging_block) {
  Pair pair;
  kvs_window_pool *pool = pair.leader.get();
  bind_pages(pool, {3, 4});
  insert(pool, 1, {10, 11}, {3, 4}, {0, 1});
  pair.step();
  kvs_window_pool *follower = pair.follower.get();
  ASSERT_EQ(kvs_window_pool_prefix_inject(follower, 4, +1, nullptr), KVS_OK);
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_check_integrity(follower, &err), KVS_ERR_INTEGRITY);
  EXPECT_TRUE(has(err.message, "cached block 4 (key 11) counts 2 references")) << err.message;
  EXPECT_NE(kvs_window_pool_digest(pool), kvs_window_pool_digest(follower));
  // Bisect over the digest's units as the shard does: the first differing
  // unit is block 4's, after the full pages and the request slots.
  uint64_t lo = 0, hi = kvs_window_pool_digest_units(pool);
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (kvs_window_pool_digest_range(pool, lo, mid) !=
        kvs_window_pool_digest_range(follower, lo, mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  EXPECT_EQ(lo, 32 + kvs_window_pool_request_slots(pool) + 4);
}

TEST(PrefixCache, a_steps_prefix_entries_decode_to_what_the_leader_decided) {
  Pair pair;
  kvs_window_pool *pool = pair.leader.get();
  bind_pages(pool, {3, 4});
  pair.step();
  insert(pool, 1, {10, 11}, {3, 4}, {0, 1});
  std::vector<kvs_journal_entry> entries(64);
  size_t n = 0;
  kvs_window_pool_journal_drain(pool, entries.data(), entries.size(), &n);
  // Page 3 starts under key 10 and links under the root, page 4 under key
  // 11 below page 3, page 4's window becomes the cache's (no writer), and
  // request 1 holds the path down to page 4.
  std::vector<std::tuple<kvs_prefix_op, uint64_t, int64_t>> got;
  for (size_t i = 0; i < n; i++) {
    uint64_t page = 99;
    int64_t operand = 99;
    kvs_prefix_op op = kvs_window_pool_prefix_entry(&entries[i], &page, &operand);
    ASSERT_NE(op, KVS_PREFIX_OP_NONE) << "entry " << i << " is the cache's";
    got.emplace_back(op, page, operand);
  }
  std::vector<std::tuple<kvs_prefix_op, uint64_t, int64_t>> want = {
      {KVS_PREFIX_OP_NEW_KEY, 3, 10}, {KVS_PREFIX_OP_NEW_LINK, 3, -1},
      {KVS_PREFIX_OP_NEW_KEY, 4, 11}, {KVS_PREFIX_OP_NEW_LINK, 4, 3},
      {KVS_PREFIX_OP_TAIL, 4, -1},    {KVS_PREFIX_OP_ACQUIRE, 4, 1}};
  EXPECT_EQ(got, want);
  // A binding is no prefix entry and moves no rows.
  kvs_journal_entry bind = {3, 5};
  EXPECT_EQ(kvs_window_pool_prefix_entry(&bind, nullptr, nullptr), KVS_PREFIX_OP_NONE);
  EXPECT_FALSE(kvs_window_pool_host_move_of(&bind, nullptr));
  EXPECT_FALSE(kvs_window_pool_host_move_of(&entries[0], nullptr)) << "a new key moves no rows";
}

TEST(PrefixCache, a_replayed_batch_that_stops_applying_changes_nothing) {
  Pair pair;
  kvs_window_pool *pool = pair.leader.get();
  bind_pages(pool, {3, 4});
  insert(pool, 1, {10, 11}, {3, 4}, {0, 1});
  std::vector<kvs_journal_entry> entries(64);
  size_t n = 0;
  kvs_window_pool_journal_drain(pool, entries.data(), entries.size(), &n);
  ASSERT_GT(n, 4u);
  // The same batch with its last entry (the acquire) naming request 7, who
  // holds nothing to be moved, then a release it does not hold.
  entries[n] = entries[n - 1];
  entries[n].window_page = 77;
  entries[n].full_page = (entries[n].full_page & ~((uint64_t(0x3f)) << 56)) | (uint64_t(4) << 56);
  uint64_t before = kvs_window_pool_digest(pair.follower.get());
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_apply(pair.follower.get(), entries.data(), n + 1, &err),
            KVS_ERR_CONFLICT);
  EXPECT_TRUE(has(err.message, "does not hold it")) << err.message;
  EXPECT_EQ(kvs_window_pool_digest(pair.follower.get()), before);
  EXPECT_INTEGRITY(pair.follower.get());
  // The good batch applies and agrees.
  ASSERT_EQ(kvs_window_pool_apply(pair.follower.get(), entries.data(), n, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(kvs_window_pool_digest(pool), kvs_window_pool_digest(pair.follower.get()));
}

TEST(PrefixCache, refusals_change_nothing) {
  Pair pair;
  kvs_window_pool *pool = pair.leader.get();
  bind_pages(pool, {3});
  uint64_t digest = kvs_window_pool_digest(pool);
  uint64_t keys[2] = {10, 11};
  int64_t pages[2] = {3, 3};
  uint8_t tails[2] = {0, 0}, taken[2];
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_prefix_insert(pool, 1, keys, pages, tails, 2, taken, &err),
            KVS_ERR_CONFLICT);
  EXPECT_TRUE(has(err.message, "twice in this call")) << err.message;
  pages[1] = 31;  // the dummy
  EXPECT_EQ(kvs_window_pool_prefix_insert(pool, 1, keys, pages, tails, 2, taken, &err),
            KVS_ERR_OUT_OF_RANGE);
  pages[1] = 6;
  tails[1] = 1;  // page 6 has no window bound
  EXPECT_EQ(kvs_window_pool_prefix_insert(pool, 1, keys, pages, tails, 2, taken, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_window_pool_digest(pool), digest);
  EXPECT_EQ(kvs_window_pool_journal_pending(pool), 1u);
  // A pool without a cache says so.
  Pool plain = make_pool(sizes(8, args(), 0.5, 5), 2, true);
  kvs_prefix_hit hit;
  EXPECT_EQ(kvs_window_pool_prefix_match(plain.get(), keys, 2, 1000, 0, &hit, nullptr, &err),
            KVS_ERR_UNSUPPORTED);
  // A prefix entry reaching a pool without a cache is refused whole.
  std::vector<kvs_journal_entry> e(8);
  size_t n = 0;
  kvs_window_pool_journal_drain(pool, e.data(), e.size(), &n);  // page 3's bind
  insert(pool, 1, {10}, {3}, {});
  kvs_window_pool_journal_drain(pool, e.data(), e.size(), &n);
  uint64_t plain_digest = kvs_window_pool_digest(plain.get());
  EXPECT_NE(kvs_window_pool_apply(plain.get(), e.data(), n, &err), KVS_OK);
  EXPECT_EQ(kvs_window_pool_digest(plain.get()), plain_digest);
}

TEST(PrefixCache, a_random_workload_stays_conserved_and_replayed) {
  Pair pair(128, 64, 20);
  kvs_window_pool *pool = pair.leader.get();
  uint64_t seed = 7;
  auto rnd = [&](uint64_t n) { return kvs_splitmix64(&seed) % n; };
  std::vector<bool> engine_free(63, true);  // page 63 is the dummy
  for (int round = 0; round < 300; round++) {
    // A request with a prompt of 1..5 pages over a small key alphabet.
    uint64_t request = 100 + uint64_t(round);
    size_t len = 1 + rnd(5);
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < len; i++) keys.push_back(rnd(3) * 10 + i);
    kvs_prefix_hit hit = match(pool, keys, len * P + 1, rnd(2) ? P : 0);
    if (hit.block >= 0 && kvs_window_pool_prefix_acquire(pool, request, &hit, nullptr) != KVS_OK) {
      continue;
    }
    size_t first = hit.hit_tokens / P;
    std::vector<uint64_t> rest(keys.begin() + long(first), keys.end());
    std::vector<int64_t> pages;
    for (size_t i = 0; i < rest.size(); i++) {
      int64_t page = -1;
      for (size_t p = 0; p < engine_free.size(); p++) {
        if (engine_free[p]) {
          page = int64_t(p);
          break;
        }
      }
      if (page < 0) {
        int64_t freed[1];
        size_t n_freed = 0;
        ASSERT_EQ(kvs_window_pool_prefix_evict(pool, 1, 0, freed, 1, &n_freed, nullptr, nullptr),
                  KVS_OK);
        if (n_freed == 0) break;
        page = freed[0];
        engine_free[size_t(page)] = true;
      }
      engine_free[size_t(page)] = false;
      pages.push_back(page);
    }
    rest.resize(pages.size());
    std::vector<uint8_t> tails(pages.size(), 0);
    if (!pages.empty() && kvs_window_pool_swa_available(pool) >= 2 * P) {
      std::vector<int64_t> locs = page_locs(uint64_t(pages.back()));
      if (alloc(pool, locs) == KVS_OK) tails.back() = 1;
    } else if (!pages.empty()) {
      uint64_t wfreed = 0;
      size_t n_freed = 0;
      ASSERT_EQ(kvs_window_pool_prefix_evict(pool, 0, 2, nullptr, 0, &n_freed, &wfreed, nullptr),
                KVS_OK);
    }
    std::vector<uint8_t> taken = insert(pool, request, rest, pages, tails);
    for (size_t i = 0; i < pages.size(); i++) {
      if (!taken[i]) {
        std::vector<int64_t> locs = page_locs(uint64_t(pages[i]));
        ASSERT_EQ(release(pool, locs), KVS_OK);
        engine_free[size_t(pages[i])] = true;
      }
    }
    ASSERT_EQ(kvs_window_pool_prefix_release(pool, request, nullptr), KVS_OK);
    pair.step();
    if (HasFatalFailure()) return;
  }
  kvs_prefix_stats stats;
  ASSERT_EQ(kvs_window_pool_prefix_stats(pool, &stats, nullptr), KVS_OK);
  EXPECT_EQ(stats.holds, 0u);
  EXPECT_EQ(stats.refs, 0u);
  EXPECT_GT(stats.nodes, 0u);
}

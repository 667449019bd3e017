// The prefix cache's disk tier, as the pool keeps its index: every cached
// block is written once (a journaled store, at most a step's share of
// them, before the step's journal is drained), a block evicted from the
// GPU is found there by chain and read back (a journaled load, the tier
// keeping its copy), the tier lets its least recently used block go, a
// block that left the index before its write is passed over and counted,
// seeding at creation is the same on every rank, and a follower replaying
// the leader's journal holds the same tier (digest and integrity), a
// replay that fails on a load being undone whole.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pool/window_pool.h"
#include "tests/pool/prefix_fixtures.h"

using namespace kvs_test;

namespace {

struct Pair : PrefixPair {
  explicit Pair(uint64_t disk, uint64_t stores_per_step = 32, uint64_t host = 0)
      : PrefixPair(128, 32, 12, host, disk, stores_per_step) {}
};

void evict_all(kvs_window_pool *pool, size_t n) {
  std::vector<int64_t> freed(n);
  size_t n_freed = 0;
  kvs_error err;
  ASSERT_EQ(
      kvs_window_pool_prefix_evict(pool, n, 0, freed.data(), freed.size(), &n_freed, nullptr, &err),
      KVS_OK)
      << err.message;
  ASSERT_EQ(n_freed, n);
}

size_t count_op(const std::vector<kvs_journal_entry> &entries, kvs_prefix_op op) {
  size_t n = 0;
  for (const kvs_journal_entry &e : entries)
    n += kvs_window_pool_prefix_entry(&e, nullptr, nullptr) == op;
  return n;
}

}  // namespace

TEST(PrefixDisk, every_cached_block_is_written_once_and_read_back_after_its_eviction) {
  Pair pair(8);
  kvs_window_pool *pool = pair.leader.get();
  cache(pool, 1, {10, 11, 12}, {3, 4, 5});
  // Nothing is written until the step gathers: then each block once.
  EXPECT_EQ(stats_of(pool).stores, 0u);
  EXPECT_EQ(stats_of(pool).store_pending, 3u);
  pair.step();
  kvs_prefix_stats s = stats_of(pool);
  EXPECT_EQ(s.stores, 3u);
  EXPECT_EQ(s.disk_blocks, 3u);
  EXPECT_EQ(s.store_pending, 0u);
  EXPECT_EQ(stats_of(pair.follower.get()).disk_blocks, 3u);
  // The GPU lets them go; with no host tier nothing is spilled, and the
  // disk tier still holds them.
  evict_all(pool, 3);
  pair.step();
  s = stats_of(pool);
  EXPECT_EQ(s.nodes, 0u);
  EXPECT_EQ(s.spills, 0u);
  EXPECT_EQ(s.disk_blocks, 3u);
  // A prompt past them reaches into the tier (re-prefilling one window).
  kvs_prefix_hit exact = match(pool, {10, 11, 12, 13}, 4 * P + 1, 0);
  EXPECT_EQ(exact.hit_tokens, 0u) << "an exact hit cannot come from the disk tier";
  kvs_prefix_hit hit = match(pool, {10, 11, 12, 13}, 4 * P + 1, P);
  EXPECT_EQ(hit.host_pages, 3u);
  EXPECT_EQ(hit.disk_pages, 3u);
  EXPECT_EQ(hit.hit_tokens, 3 * P);
  std::vector<uint64_t> keys = {10, 11, 12, 13};
  std::vector<int64_t> pages = {7, 8, 9};
  kvs_error err;
  ASSERT_EQ(
      kvs_window_pool_prefix_fetch(pool, 2, &hit, keys.data(), keys.size(), pages.data(), &err),
      KVS_OK)
      << err.message;
  std::vector<kvs_journal_entry> entries = pair.drain();
  EXPECT_EQ(count_op(entries, KVS_PREFIX_OP_LOAD), 3u);
  EXPECT_EQ(count_op(entries, KVS_PREFIX_OP_FETCH), 0u);
  for (const kvs_journal_entry &e : entries) {
    kvs_disk_io io;
    kvs_host_move move;
    if (kvs_window_pool_disk_io_of(&e, &io)) {
      EXPECT_TRUE(io.load);
      EXPECT_FALSE(kvs_window_pool_host_move_of(&e, &move)) << "a disk read is no host move";
    }
  }
  ASSERT_EQ(kvs_window_pool_apply(pair.follower.get(), entries.data(), entries.size(), &err),
            KVS_OK)
      << err.message;
  EXPECT_EQ(kvs_window_pool_digest(pool), kvs_window_pool_digest(pair.follower.get()));
  s = stats_of(pool);
  EXPECT_EQ(s.loads, 3u);
  EXPECT_EQ(s.nodes, 3u);
  EXPECT_EQ(s.disk_blocks, 3u) << "the tier keeps its copy";
  // Cached again, read back: nothing is written a second time.
  pair.step();
  EXPECT_EQ(stats_of(pool).stores, 3u);
  EXPECT_EQ(stats_of(pool).store_pending, 0u);
}

TEST(PrefixDisk, a_step_writes_at_most_its_share_and_the_rest_wait) {
  Pair pair(16, 2);
  kvs_window_pool *pool = pair.leader.get();
  cache(pool, 1, {1, 2, 3, 4, 5}, {3, 4, 5, 6, 7});
  std::vector<size_t> per_step;
  for (int k = 0; k < 4; k++) {
    size_t stored = 0;
    ASSERT_EQ(kvs_window_pool_prefix_write_back(pool, &stored, nullptr), KVS_OK);
    size_t again = 7;
    ASSERT_EQ(kvs_window_pool_prefix_write_back(pool, &again, nullptr), KVS_OK);
    EXPECT_EQ(again, 0u) << "the step's share is spent";
    per_step.push_back(stored);
    pair.step();
  }
  EXPECT_EQ(per_step, (std::vector<size_t>{2, 2, 1, 0}));
  EXPECT_EQ(stats_of(pair.follower.get()).disk_blocks, 5u);
}

TEST(PrefixDisk, a_full_tier_lets_its_least_recently_used_block_go) {
  Pair pair(4);
  kvs_window_pool *pool = pair.leader.get();
  cache(pool, 1, {1, 2, 3}, {3, 4, 5});
  pair.step();
  cache(pool, 2, {7, 8, 9}, {6, 7, 8});
  pair.step();
  kvs_prefix_stats s = stats_of(pool);
  EXPECT_EQ(s.stores, 6u);
  EXPECT_EQ(s.disk_blocks, 4u);
  EXPECT_EQ(s.disk_drops, 2u);
  // The first prompt's first two blocks went: after the GPU lets every
  // block go, only the newer prompt reaches into the tier whole.
  evict_all(pool, 6);
  pair.step();
  EXPECT_EQ(match(pool, {1, 2, 3, 4}, 4 * P + 1, P).host_pages, 0u);
  EXPECT_EQ(match(pool, {7, 8, 9, 10}, 4 * P + 1, P).host_pages, 3u);
}

TEST(PrefixDisk, a_block_evicted_before_its_write_is_passed_over_and_counted) {
  Pair pair(8, 1);
  kvs_window_pool *pool = pair.leader.get();
  cache(pool, 1, {1, 2, 3}, {3, 4, 5});
  pair.step();  // the first block is written; two wait
  evict_all(pool, 3);
  pair.step();
  kvs_prefix_stats s = stats_of(pool);
  EXPECT_EQ(s.stores, 1u);
  EXPECT_EQ(s.store_missed, 2u);
  EXPECT_EQ(s.store_pending, 0u);
}

TEST(PrefixDisk, a_host_block_comes_back_from_the_host_tier_not_the_disk) {
  Pair pair(8, 32, 8);
  kvs_window_pool *pool = pair.leader.get();
  cache(pool, 1, {10, 11, 12}, {3, 4, 5});
  pair.step();
  evict_all(pool, 3);
  pair.step();
  kvs_prefix_hit hit = match(pool, {10, 11, 12, 13}, 4 * P + 1, P);
  EXPECT_EQ(hit.host_pages, 3u);
  EXPECT_EQ(hit.disk_pages, 0u) << "the host tier holds them too";
  std::vector<uint64_t> keys = {10, 11, 12, 13};
  std::vector<int64_t> pages = {7, 8, 9};
  ASSERT_EQ(
      kvs_window_pool_prefix_fetch(pool, 2, &hit, keys.data(), keys.size(), pages.data(), nullptr),
      KVS_OK);
  std::vector<kvs_journal_entry> entries = pair.drain();
  EXPECT_EQ(count_op(entries, KVS_PREFIX_OP_FETCH), 3u);
  EXPECT_EQ(count_op(entries, KVS_PREFIX_OP_LOAD), 0u);
}

TEST(PrefixDisk, seeding_is_every_ranks_and_refuses_what_cannot_be) {
  Pair pair(4);
  std::vector<uint64_t> chains = {101, 102, 103};
  kvs_error err;
  for (kvs_window_pool *pool : {pair.leader.get(), pair.follower.get()}) {
    ASSERT_EQ(kvs_window_pool_prefix_disk_seed(pool, chains.data(), chains.size(), &err), KVS_OK)
        << err.message;
  }
  EXPECT_EQ(kvs_window_pool_digest(pair.leader.get()), kvs_window_pool_digest(pair.follower.get()));
  EXPECT_INTEGRITY(pair.leader.get());
  uint64_t chain = 0;
  ASSERT_EQ(kvs_window_pool_prefix_disk_slot(pair.leader.get(), 2, &chain, nullptr), KVS_OK);
  EXPECT_EQ(chain, 103u);
  std::vector<uint64_t> listed(8);
  ASSERT_EQ(kvs_window_pool_prefix_disk_chains(pair.leader.get(), listed.data(), listed.size()),
            3u);
  listed.resize(3);
  EXPECT_EQ(listed, chains) << "least recently used first, as seeded";
  // A tier holding blocks, a duplicate and more than the tier are refused.
  uint64_t digest = kvs_window_pool_digest(pair.leader.get());
  EXPECT_EQ(kvs_window_pool_prefix_disk_seed(pair.leader.get(), chains.data(), 1, &err),
            KVS_ERR_INVALID_ARGUMENT);
  Pair fresh(4);
  std::vector<uint64_t> twice = {5, 6, 5};
  EXPECT_EQ(kvs_window_pool_prefix_disk_seed(fresh.leader.get(), twice.data(), 3, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(has(err.message, "seeded twice")) << err.message;
  EXPECT_EQ(stats_of(fresh.leader.get()).disk_blocks, 0u) << "a refusal seeds nothing";
  EXPECT_INTEGRITY(fresh.leader.get());
  std::vector<uint64_t> five = {1, 2, 3, 4, 5};
  EXPECT_EQ(kvs_window_pool_prefix_disk_seed(fresh.leader.get(), five.data(), 5, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_window_pool_digest(pair.leader.get()), digest);
  // A pool without a disk tier takes an empty list only.
  Pool none = prefix_pool(32, 12, 128, 4096);
  EXPECT_EQ(kvs_window_pool_prefix_disk_seed(none.get(), nullptr, 0, &err), KVS_OK);
  EXPECT_EQ(kvs_window_pool_prefix_disk_seed(none.get(), chains.data(), 1, &err),
            KVS_ERR_UNSUPPORTED);
}

TEST(PrefixDisk, a_replay_that_fails_on_a_load_is_undone_whole_and_a_diverged_tier_shows) {
  Pair pair(8);
  kvs_window_pool *pool = pair.leader.get();
  cache(pool, 1, {10, 11, 12}, {3, 4, 5});
  pair.step();
  evict_all(pool, 3);
  pair.step();
  kvs_prefix_hit hit = match(pool, {10, 11, 12, 13}, 4 * P + 1, P);
  std::vector<uint64_t> keys = {10, 11, 12, 13};
  std::vector<int64_t> pages = {7, 8, 9};
  ASSERT_EQ(
      kvs_window_pool_prefix_fetch(pool, 2, &hit, keys.data(), keys.size(), pages.data(), nullptr),
      KVS_OK);
  std::vector<kvs_journal_entry> entries = pair.drain();
  // The last load names another disk slot than the one holding its block.
  for (size_t i = entries.size(); i-- > 0;) {
    kvs_disk_io io;
    if (kvs_window_pool_disk_io_of(&entries[i], &io)) {
      entries[i].window_page = int64_t((io.disk_slot + 1) % 3);
      break;
    }
  }
  kvs_window_pool *follower = pair.follower.get();
  uint64_t before = kvs_window_pool_digest(follower);
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_apply(follower, entries.data(), entries.size(), &err),
            KVS_ERR_CONFLICT);
  EXPECT_TRUE(has(err.message, "reads a block back from slot")) << err.message;
  EXPECT_EQ(kvs_window_pool_digest(follower), before) << "undone whole";
  EXPECT_INTEGRITY(follower);
  EXPECT_EQ(stats_of(follower).loads, 0u);
  // A tier that differs between ranks is in the digest's range past the
  // host tier's slots: one unit per disk slot.
  Pair other(8);
  uint64_t a[] = {1, 2}, b[] = {1, 3};
  ASSERT_EQ(kvs_window_pool_prefix_disk_seed(other.leader.get(), a, 2, nullptr), KVS_OK);
  ASSERT_EQ(kvs_window_pool_prefix_disk_seed(other.follower.get(), b, 2, nullptr), KVS_OK);
  uint64_t units = kvs_window_pool_digest_units(other.leader.get());
  EXPECT_NE(kvs_window_pool_digest_range(other.leader.get(), units - 8, units),
            kvs_window_pool_digest_range(other.follower.get(), units - 8, units));
  EXPECT_EQ(kvs_window_pool_digest_range(other.leader.get(), 0, units - 8),
            kvs_window_pool_digest_range(other.follower.get(), 0, units - 8));
}

TEST(PrefixDisk, a_disk_tier_needs_a_prefix_cache_and_a_share_of_writes) {
  kvs_pool_sizes s = sizes(32, args(), 0.5, 12);
  kvs_window_pool_options options = KVS_WINDOW_POOL_OPTIONS_INIT;
  options.disk_pages = 8;
  options.disk_stores_per_step = 4;
  kvs_window_pool_t pool = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_create(&s, &options, &pool, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(has(err.message, "prefix_cache is off")) << err.message;
  options.prefix_cache = true;
  options.disk_stores_per_step = 0;
  EXPECT_EQ(kvs_window_pool_create(&s, &options, &pool, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(has(err.message, "writes 1 to 2^30 blocks a step")) << err.message;
  EXPECT_EQ(pool, nullptr);
}

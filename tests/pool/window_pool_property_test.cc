// Random bind/free workloads against the window pool: after every
// operation the conservation equality holds and the running digest equals
// its recomputation; the drained journal replayed onto a fresh pool
// reproduces the mapping, the free list and the digest exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include "pool/window_pool.h"
#include "tests/core/fixtures.h"

using namespace kvs_test;

namespace {

struct Workload {
  uint64_t seed;
  uint64_t full_pages;
  uint64_t window_pages;
  size_t journal_capacity;
};

bool same_state(const kvs_window_pool *a, const kvs_window_pool *b) {
  size_t rows = kvs_window_pool_full_tokens(a) + 1;
  return kvs_window_pool_full_tokens(a) == kvs_window_pool_full_tokens(b) &&
         memcmp(kvs_window_pool_mapping(a), kvs_window_pool_mapping(b), rows * 8) == 0 &&
         kvs_window_pool_digest(a) == kvs_window_pool_digest(b) &&
         kvs_window_pool_swa_available(a) == kvs_window_pool_swa_available(b);
}

void run(const Workload &w, int ops) {
  kvs_geometry g = args();
  kvs_pool_sizes s = sizes(w.full_pages, g, 0.5, w.window_pages);
  Pool leader = make_pool(s, 4, true, w.journal_capacity);
  Pool follower = make_pool(s, 4, true, 0);
  std::vector<kvs_journal_entry> drained(w.journal_capacity);
  std::mt19937_64 rng(w.seed);
  std::vector<uint64_t> bound;  // full pages the leader has bound
  uint64_t usable_full = w.full_pages - 1;
  uint64_t binds = 0, frees = 0, refusals = 0;

  auto ship = [&]() {
    size_t n = 0;
    kvs_window_pool_journal_drain(leader.get(), drained.data(), drained.size(), &n);
    kvs_error err;
    ASSERT_EQ(kvs_window_pool_apply(follower.get(), drained.data(), n, &err), KVS_OK)
        << err.message;
  };

  for (int op = 0; op < ops; op++) {
    uint64_t action = rng() % 100;
    if (action < 50) {
      // Bind 1..3 random unbound pages in one call (ascending pages).
      size_t k = 1 + rng() % 3;
      std::vector<int64_t> locs;
      std::vector<uint64_t> chosen;
      for (size_t i = 0; i < k; i++) {
        uint64_t fp = rng() % usable_full;
        if (std::find(bound.begin(), bound.end(), fp) != bound.end() ||
            std::find(chosen.begin(), chosen.end(), fp) != chosen.end()) {
          continue;
        }
        chosen.push_back(fp);
      }
      for (uint64_t fp : chosen) {
        std::vector<int64_t> page = page_locs(fp);
        locs.insert(locs.end(), page.begin(), page.end());
      }
      kvs_error err;
      kvs_status status = alloc(leader.get(), locs, &err);
      if (status == KVS_OK) {
        bound.insert(bound.end(), chosen.begin(), chosen.end());
        binds += chosen.size();
      } else {
        ASSERT_TRUE(status == KVS_ERR_EXHAUSTED || status == KVS_ERR_JOURNAL_FULL) << err.message;
        refusals++;
      }
    } else if (action < 90 && !bound.empty()) {
      // Free 1..3 bound pages, sometimes with an unbound page named too.
      size_t k = 1 + rng() % std::min<size_t>(3, bound.size());
      std::vector<int64_t> locs;
      std::vector<uint64_t> chosen;
      for (size_t i = 0; i < k; i++) {
        size_t at = rng() % bound.size();
        chosen.push_back(bound[at]);
        bound.erase(bound.begin() + long(at));
      }
      for (uint64_t fp : chosen) {
        std::vector<int64_t> page = page_locs(fp);
        locs.insert(locs.end(), page.rbegin(), page.rend());
      }
      if (rng() % 4 == 0) {
        uint64_t fp = rng() % usable_full;
        if (std::find(bound.begin(), bound.end(), fp) == bound.end() &&
            std::find(chosen.begin(), chosen.end(), fp) == chosen.end()) {
          std::vector<int64_t> page = page_locs(fp);
          locs.insert(locs.end(), page.begin(), page.end());
        }
      }
      kvs_error err;
      kvs_status status = release(leader.get(), locs, &err);
      if (status == KVS_OK) {
        frees += chosen.size();
      } else {
        ASSERT_EQ(status, KVS_ERR_JOURNAL_FULL) << err.message;
        bound.insert(bound.end(), chosen.begin(), chosen.end());
        refusals++;
      }
    } else {
      ship();
    }
    ASSERT_EQ(kvs_window_pool_digest(leader.get()), kvs_window_pool_digest_recompute(leader.get()))
        << "op " << op;
    ASSERT_EQ(kvs_window_pool_bound_pages(leader.get()), bound.size()) << "op " << op;
    if (op % 97 == 0) {
      kvs_error err;
      ASSERT_EQ(kvs_window_pool_check_integrity(leader.get(), &err), KVS_OK)
          << "op " << op << ": " << err.message;
    }
  }
  ship();
  EXPECT_TRUE(same_state(leader.get(), follower.get()));
  EXPECT_INTEGRITY(leader.get());
  EXPECT_INTEGRITY(follower.get());
  EXPECT_GT(binds, uint64_t(ops) / 10);
  EXPECT_GT(frees, uint64_t(ops) / 10);
  // The follower's free list matches the leader's, order included: one
  // more allocation on each picks the same window page.
  if (kvs_window_pool_swa_available(leader.get()) > 0) {
    uint64_t fp = 0;
    while (std::find(bound.begin(), bound.end(), fp) != bound.end()) fp++;
    ASSERT_EQ(alloc(leader.get(), page_locs(fp)), KVS_OK);
    ASSERT_EQ(alloc(follower.get(), page_locs(fp)), KVS_OK);
    EXPECT_EQ(translate(leader.get(), int64_t(fp * P)), translate(follower.get(), int64_t(fp * P)));
  }
  ::testing::Test::RecordProperty("refusals", int(refusals));
  std::cout << "reliability: pool_ops " << binds + frees << " binds and frees (seed " << w.seed
            << ", " << ops << " calls, " << refusals << " refused whole), digest and bound count "
            << "checked after every call, full integrity every 97 calls, journal replayed "
            << "exactly\n";
}

}  // namespace

TEST(WindowPoolProperty, random_binds_and_frees_conserve_and_replay_exactly) {
  const Workload workloads[] = {
      {1, 64, 9, 4096},     // tight window: exhaustion is common
      {2, 256, 200, 4096},  // roomy window
      {3, 40, 40, 16},      // tiny journal: JOURNAL_FULL refusals are common
      {4, 1024, 64, 1024},
  };
  for (const Workload &w : workloads) {
    SCOPED_TRACE("seed " + std::to_string(w.seed));
    run(w, 100000);
  }
}

TEST(WindowPoolProperty, a_journal_that_does_not_match_the_mirror_is_refused_whole) {
  kvs_geometry g = args();
  kvs_pool_sizes s = sizes(8, g, 0.5, 5);
  Pool leader = make_pool(s, 2, true);
  Pool follower = make_pool(s, 2, true);
  ASSERT_EQ(alloc(leader.get(), page_locs(0)), KVS_OK);
  ASSERT_EQ(alloc(leader.get(), page_locs(1)), KVS_OK);
  kvs_journal_entry entries[8];
  size_t n = 0;
  kvs_window_pool_journal_drain(leader.get(), entries, 8, &n);
  ASSERT_EQ(n, 2u);

  kvs_error err;
  // Applying the same step twice: the second bind of page 0 conflicts.
  ASSERT_EQ(kvs_window_pool_apply(follower.get(), entries, n, &err), KVS_OK) << err.message;
  uint64_t digest = kvs_window_pool_digest(follower.get());
  EXPECT_EQ(kvs_window_pool_apply(follower.get(), entries, n, &err), KVS_ERR_CONFLICT);
  EXPECT_TRUE(std::string(err.message).find("already holds") != std::string::npos) << err.message;
  EXPECT_EQ(kvs_window_pool_digest(follower.get()), digest) << "nothing applied";

  // A batch whose last entry is bad applies none of its good entries.
  kvs_journal_entry batch[] = {{2, 0}, {3, 99}};
  EXPECT_EQ(kvs_window_pool_apply(follower.get(), batch, 2, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_TRUE(std::string(err.message).find("entry 1") != std::string::npos) << err.message;
  EXPECT_EQ(translate(follower.get(), int64_t(2 * P)), KVS_NO_WINDOW_SLOT);

  // Freeing a page the mirror never bound, and a malformed window page.
  kvs_journal_entry stray[] = {{5, KVS_JOURNAL_FREED}};
  EXPECT_EQ(kvs_window_pool_apply(follower.get(), stray, 1, &err), KVS_ERR_CONFLICT);
  kvs_journal_entry malformed[] = {{5, -7}};
  EXPECT_EQ(kvs_window_pool_apply(follower.get(), malformed, 1, &err), KVS_ERR_INVALID_ARGUMENT);
  kvs_journal_entry dummy[] = {{7, 0}};
  EXPECT_EQ(kvs_window_pool_apply(follower.get(), dummy, 1, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_TRUE(std::string(err.message).find("dummy") != std::string::npos) << err.message;

  // A bind and a free of the same page inside one batch is fine.
  kvs_journal_entry churn[] = {{4, 0}, {4, KVS_JOURNAL_FREED}, {4, 0}};
  ASSERT_EQ(kvs_window_pool_apply(follower.get(), churn, 3, &err), KVS_OK) << err.message;
  EXPECT_EQ(translate(follower.get(), int64_t(4 * P)), 0);
  EXPECT_INTEGRITY(follower.get());
}

TEST(WindowPoolProperty, an_injected_binding_shows_in_the_digest_and_its_range) {
  kvs_geometry g = args();
  kvs_pool_sizes s = sizes(64, g, 0.5, 9);
  Pool a = make_pool(s, 2, true);
  Pool b = make_pool(s, 2, true);
  for (uint64_t fp : {3, 10, 20}) {
    ASSERT_EQ(alloc(a.get(), page_locs(fp)), KVS_OK);
    ASSERT_EQ(alloc(b.get(), page_locs(fp)), KVS_OK);
  }
  ASSERT_EQ(kvs_window_pool_digest(a.get()), kvs_window_pool_digest(b.get()));
  // Rebind page 10 on one rank to another window page.
  uint64_t other = uint64_t(translate(b.get(), int64_t(20 * P)));
  ASSERT_EQ(kvs_window_pool_bind_raw(b.get(), 10 * P, other, nullptr), KVS_OK);
  EXPECT_NE(kvs_window_pool_digest(a.get()), kvs_window_pool_digest(b.get()));
  EXPECT_EQ(kvs_window_pool_digest(b.get()), kvs_window_pool_digest_recompute(b.get()));
  // Bisection by ranges finds page 10.
  uint64_t lo = 0, hi = 64;
  while (hi - lo > 1) {
    uint64_t mid = (lo + hi) / 2;
    if (kvs_window_pool_digest_range(a.get(), lo, mid) !=
        kvs_window_pool_digest_range(b.get(), lo, mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  EXPECT_EQ(lo, 10u);
}

TEST(WindowPoolProperty, a_corrupted_mapping_is_named_by_the_integrity_check) {
  kvs_geometry g = args();
  Pool p = make_pool(sizes(8, g, 0.5, 5), 2, true);
  ASSERT_EQ(alloc(p.get(), page_locs(2)), KVS_OK);
  // Simulated memory corruption: the mapping is writable memory after all.
  int64_t *map = const_cast<int64_t *>(kvs_window_pool_mapping(p.get()));
  int64_t saved = map[2 * P + 5];
  map[2 * P + 5] = 0;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_check_integrity(p.get(), &err), KVS_ERR_INTEGRITY);
  EXPECT_TRUE(std::string(err.message)
                  .find("full page 256 is bound partially or out of order "
                        "at offset 5") != std::string::npos)
      << err.message;
  map[2 * P + 5] = saved;
  map[8 * P] = 3;  // the sentinel row
  EXPECT_EQ(kvs_window_pool_check_integrity(p.get(), &err), KVS_ERR_INTEGRITY);
  EXPECT_TRUE(std::string(err.message).find("sentinel") != std::string::npos) << err.message;
  map[8 * P] = -1;
  map[7 * P] = 0;  // the dummy page
  EXPECT_EQ(kvs_window_pool_check_integrity(p.get(), &err), KVS_ERR_INTEGRITY);
  EXPECT_TRUE(std::string(err.message).find("dummy") != std::string::npos) << err.message;
}

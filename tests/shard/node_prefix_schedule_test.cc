// A hit names specific blocks, through the node's calls
// (tests/pool/hit_schedule_search.h): the leader runs searched schedules
// of match, evict, insert, acquire, fetch and release between steps; one
// rank, and two ranks over loopback whose follower replays every step and
// agrees at the end's check.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pool/window_pool.h"
#include "shard/node.h"
#include "tests/pool/hit_schedule_search.h"
#include "tests/shard/host_rows_random.h"
#include "tests/shard/ranks.h"

namespace {

// The node's leader as the search's index.
struct NodeIndex {
  kvs_node_t n;
  static constexpr int64_t kPages = 24;  // few, so pages come back as other blocks

  uint64_t P() const { return kvs_node_page(n); }
  std::vector<int64_t> engine_pages() const {
    std::vector<int64_t> pages;
    for (int64_t p = 0; p < kPages; p++) pages.push_back(p);
    return pages;
  }
  kvs_status match(const std::vector<uint64_t> &keys, uint64_t prompt, uint64_t reprefill,
                   kvs_node_prefix_hit *hit, int64_t *pages, kvs_error *err) {
    hit->size = sizeof *hit;
    return kvs_node_prefix_match(n, keys.data(), keys.size(), prompt, reprefill, hit, pages, err);
  }
  kvs_status admit(uint64_t request, kvs_error *err) {
    int64_t slot = -1;
    return kvs_node_admit(n, request, &slot, err);
  }
  kvs_status finish(uint64_t request, kvs_error *err) { return kvs_node_finish(n, request, err); }
  kvs_status acquire(uint64_t request, const kvs_node_prefix_hit &hit, kvs_error *err) {
    return kvs_node_prefix_acquire(n, request, &hit, err);
  }
  kvs_status fetch(uint64_t request, const kvs_node_prefix_hit &hit,
                   const std::vector<uint64_t> &keys, const std::vector<int64_t> &pages,
                   kvs_error *err) {
    return kvs_node_prefix_fetch(n, request, &hit, keys.data(), keys.size(), pages.data(), err);
  }
  kvs_status bind(uint64_t request, const std::vector<int64_t> &locs, kvs_error *err) {
    return kvs_node_bind(n, request, locs.data(), locs.size(), err);
  }
  kvs_status unbind(const std::vector<int64_t> &locs, kvs_error *err) {
    return kvs_node_free(n, locs.data(), locs.size(), err);
  }
  kvs_status insert(uint64_t request, const std::vector<uint64_t> &keys,
                    const std::vector<int64_t> &pages, const std::vector<uint8_t> &tails,
                    std::vector<uint8_t> *taken, kvs_error *err) {
    return kvs_node_prefix_insert(n, request, keys.data(), pages.data(), tails.data(), keys.size(),
                                  taken->data(), err);
  }
  kvs_status release(uint64_t request, kvs_error *err) {
    return kvs_node_prefix_release(n, request, err);
  }
  kvs_status abandon(uint64_t request, kvs_error *err) {
    return kvs_node_prefix_abandon(n, request, err);
  }
  kvs_status evict(uint64_t need, uint64_t need_window, std::vector<int64_t> *freed,
                   kvs_error *err) {
    freed->assign(kPages, -1);
    size_t got = 0;
    kvs_status s =
        kvs_node_prefix_evict(n, need, need_window, freed->data(), freed->size(), &got, err);
    freed->resize(got);
    return s;
  }
  bool node(int64_t page, uint64_t *key, int64_t *parent) {
    uint32_t refs = 0;
    bool tail = false;
    return kvs_window_pool_prefix_node(kvs_node_pool(n), uint64_t(page), key, parent, &refs, &tail,
                                       nullptr) == KVS_OK;
  }
  uint64_t window_free_pages() { return kvs_window_pool_swa_available(kvs_node_pool(n)) / P(); }
};

uint64_t schedules(uint64_t fallback) {
  const char *env = std::getenv("KVS_SCHEDULES");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : fallback;
}

// tp ranks run n schedules of 40 rounds each on fresh nodes.
void search(int tp, uint64_t host_slots, uint64_t n, kvs_test::HitSearchCounts *c) {
  kvs_test::run_ranks(tp, 60000, [&](int, kvs_comm_t comm) {
    const uint64_t host_bytes = host_slots > 0 ? host_slots * kvs_test::slot_cost(comm, tp) : 0;
    for (uint64_t seed = 1; seed <= n; seed++) {
      SCOPED_TRACE("schedule " + std::to_string(seed));
      kvs_test::SmallPrefixNode s(tp, KVS_NODE_DEVICE_CPU, host_bytes);
      kvs_node_t node = nullptr;
      kvs_error err;
      ASSERT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_OK) << err.message;
      ASSERT_GT(kvs_node_num_pages(node), uint64_t(NodeIndex::kPages) + 1);
      NodeIndex ix{node};
      kvs_test::HitSearch<NodeIndex> search(ix, seed, c);
      const bool leader = kvs_node_is_leader(node);
      if (leader) c->schedules++;
      for (int r = 0; r <= 40; r++) {
        if (leader) {
          if (r < 40) {
            search.round();
          } else {
            search.finish_all();
          }
        }
        ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
      }
      EXPECT_EQ(kvs_node_check(node, nullptr, &err), KVS_OK) << err.message;
      kvs_node_destroy(node);
    }
  });
}

void report(const char *what, const kvs_test::HitSearchCounts &c) {
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

TEST(NodePrefixHitSchedules, no_hit_is_taken_on_blocks_other_than_its_match_found) {
  for (int tp : {1, 2}) {
    for (uint64_t host : {0, 6}) {
      kvs_test::HitSearchCounts c;
      search(tp, host, schedules(tp == 1 ? 30 : 12), &c);
      const std::string what =
          std::to_string(tp) + (tp == 1 ? " rank" : " ranks") + (host > 0 ? ", host tier" : "");
      report(what.c_str(), c);
      EXPECT_GT(c.stale_refused, c.schedules / 2) << what;
      EXPECT_GT(c.acquired, c.schedules) << what;
      if (host > 0) {
        EXPECT_GT(c.fetched, 0u) << what;
      }
    }
  }
}

// The shard runtime over the self backend and over an in-process loopback
// group: steps, epochs, capacity, step infos, digests, bisection, aborts,
// dead peers.
// Deadlines are ten times what the ranks need on a loaded 2-core machine
// (under ASan too), so no healthy rank times out and changes the wording a
// case checks; the one case that waits out a deadline waits 4 s.
#include "shard/shard.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "pool/window_pool.h"
#include "shard/comm_self.h"
#include "shard/step_message.h"
#include "tools/workload.h"
#include "tests/shard/ranks.h"

using kvs_test::run_ranks;

namespace {

constexpr uint64_t P = KVS_DEFAULT_WINDOW_PAGE;

// A small pool: 64 full pages, 12 window pages (11 allocatable).
kvs_pool_sizes small_sizes() {
  kvs_geometry g;
  kvs_error err;
  const uint32_t ratios[] = {0, 4, 128, 4};
  EXPECT_EQ(kvs_geometry_init(&g, 8, 4, 4, ratios, 4, &err), KVS_OK) << err.message;
  kvs_pool_sizes s;
  EXPECT_EQ(kvs_pool_sizes_compute(64, &g, 0.5, P, 12, &s, &err), KVS_OK) << err.message;
  return s;
}

std::vector<int64_t> page_locs(uint64_t first_page, uint64_t n_pages) {
  std::vector<int64_t> locs(n_pages * P);
  for (uint64_t i = 0; i < locs.size(); i++) locs[i] = int64_t(first_page * P + i);
  return locs;
}

// What a step's info says it carried, step by step: the entries a caller
// (the node's table step) hands on after kvs_shard_step.
struct Recorder {
  std::vector<kvs_journal_entry> seen;
  std::vector<uint64_t> steps;
  void take(const kvs_shard_step_info &info) {
    steps.push_back(info.step);
    seen.insert(seen.end(), info.entries_at, info.entries_at + info.entries);
  }
};

kvs_shard_t make_shard(kvs_comm_t comm, const kvs_pool_sizes &s, size_t capacity = 0,
                       uint64_t check_every = 16) {
  kvs_shard_options o = KVS_SHARD_OPTIONS_INIT;
  o.max_running = 2;
  o.step_capacity = capacity;
  o.check_every = check_every;
  kvs_shard_t shard = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_shard_create(comm, &s, &o, &shard, &err), KVS_OK) << err.message;
  return shard;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(ShardSelf, a_step_ships_the_journal_once_and_counts_16_bytes_per_page) {
  kvs_comm_t comm;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  Recorder rec;
  kvs_shard_t shard = make_shard(comm, small_sizes(), 0);
  ASSERT_NE(shard, nullptr);
  EXPECT_TRUE(kvs_shard_is_leader(shard));
  kvs_window_pool_t pool = kvs_shard_pool(shard);
  auto locs = page_locs(3, 2);
  ASSERT_EQ(kvs_window_pool_alloc(pool, locs.data(), locs.size(), nullptr, &err), KVS_OK);
  kvs_shard_step_info info;
  ASSERT_EQ(kvs_shard_step(shard, 0, &info, &err), KVS_OK) << err.message;
  rec.take(info);
  EXPECT_EQ(info.entries, 2u);
  EXPECT_EQ(info.binds, 2u);
  EXPECT_EQ(kvs_window_pool_journal_pending(pool), 0u) << "the step drained the journal";
  ASSERT_EQ(kvs_window_pool_free(pool, locs.data(), P, &err), KVS_OK);
  ASSERT_EQ(kvs_shard_step(shard, 1, &info, &err), KVS_OK);
  rec.take(info);
  EXPECT_EQ(info.frees, 1u);
  ASSERT_EQ(kvs_shard_step(shard, 2, &info, &err), KVS_OK);  // an empty step still counts
  rec.take(info);
  EXPECT_EQ(info.entries, 0u);
  EXPECT_EQ(info.device_message, nullptr) << "a host communicator has no device copy";
  kvs_shard_stats st;
  kvs_shard_stats_get(shard, &st);
  EXPECT_EQ(st.steps, 3u);
  EXPECT_EQ(st.binds, 2u);
  EXPECT_EQ(st.frees, 1u);
  EXPECT_EQ(st.payload_bytes, 3 * 48u + 3 * 16u);
  EXPECT_EQ(st.step_collectives, 3u) << "one collective per step";
  EXPECT_EQ(st.wire_bytes, 3 * kvs_step_message_bytes(kvs_shard_step_capacity(shard)));
  // The infos named every entry, on the leader too, in order.
  ASSERT_EQ(rec.seen.size(), 3u);
  EXPECT_EQ(rec.seen[2].full_page, 3u);
  EXPECT_EQ(rec.seen[2].window_page, KVS_JOURNAL_FREED);
  EXPECT_EQ(rec.steps, (std::vector<uint64_t>{0, 1, 2}));
  kvs_shard_destroy(shard);
  kvs_comm_destroy(comm);
}

TEST(ShardSelf, a_step_out_of_order_or_twice_is_an_epoch_error_that_changes_nothing) {
  kvs_comm_t comm;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  kvs_shard_t shard = make_shard(comm, small_sizes());
  kvs_window_pool_t pool = kvs_shard_pool(shard);
  auto locs = page_locs(1, 1);
  ASSERT_EQ(kvs_window_pool_alloc(pool, locs.data(), locs.size(), nullptr, &err), KVS_OK);
  EXPECT_EQ(kvs_shard_step(shard, 1, nullptr, &err), KVS_ERR_EPOCH);
  EXPECT_STREQ(err.message,
               "step 1 on rank 0, which has applied steps up to -1 and runs step 0 next: steps "
               "are applied in order, once each (out of order)");
  EXPECT_EQ(kvs_window_pool_journal_pending(pool), 1u);
  ASSERT_EQ(kvs_shard_step(shard, 0, nullptr, &err), KVS_OK);
  EXPECT_EQ(kvs_shard_step(shard, 0, nullptr, &err), KVS_ERR_EPOCH);
  EXPECT_STREQ(err.message,
               "step 0 on rank 0, which has applied steps up to 0 and runs step 1 next: steps "
               "are applied in order, once each (already applied)");
  EXPECT_EQ(kvs_shard_next_step(shard), 1u);
  kvs_shard_destroy(shard);
  kvs_comm_destroy(comm);
}

TEST(ShardSelf, an_operation_that_would_overflow_the_step_is_refused_before_it_changes_anything) {
  kvs_comm_t comm;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  kvs_shard_t shard = make_shard(comm, small_sizes(), 2);
  EXPECT_EQ(kvs_shard_step_capacity(shard), 2u);
  kvs_window_pool_t pool = kvs_shard_pool(shard);
  uint64_t digest = kvs_window_pool_digest(pool);
  auto locs = page_locs(0, 3);
  EXPECT_EQ(kvs_window_pool_alloc(pool, locs.data(), locs.size(), nullptr, &err),
            KVS_ERR_JOURNAL_FULL);
  EXPECT_EQ(kvs_window_pool_bound_pages(pool), 0u);
  EXPECT_EQ(kvs_window_pool_digest(pool), digest);
  kvs_shard_destroy(shard);
  kvs_comm_destroy(comm);
}

TEST(ShardSelf, the_default_capacity_follows_the_chunk_budget_and_running_requests) {
  EXPECT_EQ(kvs_shard_step_capacity_for(0, P, 0), 4u);
  EXPECT_EQ(kvs_shard_step_capacity_for(3 * P, P, 16), 2 * 3 + 6 * 16 + 4u);
  EXPECT_EQ(kvs_shard_step_capacity_for(3 * P + 1, P, 16), 2 * 4 + 6 * 16 + 4u);
}

// kvs_shard_step_capacity_of is the capacity create gives, before the
// shard exists (what a planner prices the step message with).
TEST(ShardSelf, the_capacity_of_sizes_is_the_one_create_gives) {
  kvs_comm_t comm;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  const kvs_pool_sizes sizes = small_sizes();
  for (size_t given : {size_t{0}, size_t{2}, size_t{100}}) {
    kvs_shard_t shard = make_shard(comm, sizes, given);
    ASSERT_NE(shard, nullptr);
    size_t capacity = 0;
    ASSERT_EQ(
        kvs_shard_step_capacity_of(&sizes, 2, KVS_DEFAULT_RADIX, false, given, &capacity, &err),
        KVS_OK)
        << err.message;
    EXPECT_EQ(capacity, kvs_shard_step_capacity(shard)) << "given " << given;
    kvs_shard_destroy(shard);
  }
  // A window of 12 pages, 2 running requests: the chunk is what is left
  // after the reserved pages, halved, at least a page.
  size_t capacity = 0;
  ASSERT_EQ(kvs_shard_step_capacity_of(&sizes, 2, false, false, 0, &capacity, &err), KVS_OK);
  EXPECT_GE(capacity, 2 * 1 + 6 * 2 + 4u);
  kvs_pool_sizes none = sizes;
  none.n_win_slots = 0;
  size_t untouched = 7;
  EXPECT_EQ(kvs_shard_step_capacity_of(&none, 2, false, false, 0, &untouched, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "sizes hold no window page")) << err.message;
  EXPECT_EQ(kvs_shard_step_capacity_of(nullptr, 2, false, false, 0, &untouched, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(untouched, 7u);
  kvs_comm_destroy(comm);
}

TEST(ShardLoopback, followers_hold_the_leaders_bindings_through_a_workload) {
  constexpr int N = 4;
  constexpr uint64_t STEPS = 1200;
  kvs_geometry g;
  kvs_error gerr;
  ASSERT_EQ(kvs_geometry_builtin("dsv4-flash", &g, &gerr), KVS_OK);
  std::vector<uint64_t> digests(N), contexts(N);
  std::vector<kvs_shard_stats> stats(N);
  run_ranks(N, 100000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_workload_options wo = KVS_WORKLOAD_OPTIONS_INIT;
    wo.seed = 42;
    wo.arrival_rate = 0.3;
    // One pool for every rank: the largest that 2 GiB holds at the
    // workload's working-set floor.
    uint64_t floor = 0;
    ASSERT_EQ(kvs_cost_window_floor_pages(kvs_workload_max_seq_len(&wo), wo.max_running, false, P,
                                          &floor, &err),
              KVS_OK)
        << err.message;
    kvs_pool_sizes sizes;
    ASSERT_EQ(kvs_cost_solve_num_pages(2ull << 30, &g, 0.04, floor, P, KVS_DEFAULT_N_SCRATCH,
                                       &sizes, nullptr, &err),
              KVS_OK)
        << err.message;
    kvs_shard_options so = KVS_SHARD_OPTIONS_INIT;
    so.max_running = wo.max_running;
    so.radix = false;
    so.check_every = 32;
    kvs_shard_t shard = nullptr;
    ASSERT_EQ(kvs_shard_create(comm, &sizes, &so, &shard, &err), KVS_OK) << err.message;
    kvs_workload_t w = nullptr;
    ASSERT_EQ(kvs_workload_create(shard, &wo, &w, &err), KVS_OK) << err.message;
    for (uint64_t s = 0; s < STEPS; s++) {
      ASSERT_EQ(kvs_workload_step(w, s, &err), KVS_OK) << "rank " << rank << ": " << err.message;
      if (kvs_shard_check_due(shard, s)) {
        ASSERT_EQ(kvs_shard_check(shard, nullptr, &err), KVS_OK) << err.message;
      }
    }
    kvs_shard_report report;
    ASSERT_EQ(kvs_shard_check(shard, &report, &err), KVS_OK) << err.message;
    EXPECT_EQ(report.kind, KVS_SHARD_AGREE);
    EXPECT_EQ(report.collectives, 1u) << "an agreeing check is one allreduce";
    EXPECT_EQ(kvs_window_pool_check_integrity(kvs_shard_pool(shard), &err), KVS_OK) << err.message;
    kvs_workload_counters c;
    kvs_workload_counters_get(w, &c);
    EXPECT_GT(c.completed, 10u);
    EXPECT_GT(c.contexts, STEPS);
    digests[rank] = kvs_window_pool_digest(kvs_shard_pool(shard));
    contexts[rank] = c.context_digest;
    kvs_shard_stats_get(shard, &stats[rank]);
    EXPECT_EQ(stats[rank].steps, STEPS);
    kvs_workload_destroy(w);
    kvs_shard_destroy(shard);
  });
  for (int r = 1; r < N; r++) {
    EXPECT_EQ(digests[r], digests[0]) << "rank " << r;
    EXPECT_EQ(contexts[r], contexts[0]) << "rank " << r;
    EXPECT_EQ(stats[r].binds, stats[0].binds);
    EXPECT_EQ(stats[r].frees, stats[0].frees);
  }
  EXPECT_GT(stats[0].binds, 100u);
  EXPECT_EQ(stats[0].step_collectives, STEPS) << "exactly one collective per step for bindings";
  EXPECT_EQ(stats[0].checks, STEPS / 32 + 1);
  EXPECT_EQ(stats[0].check_collectives, stats[0].checks);
}

TEST(ShardLoopback, a_flipped_binding_is_seen_by_its_rank_and_located_by_bisection) {
  constexpr int N = 4;
  const kvs_pool_sizes s = small_sizes();
  std::mutex m;
  std::vector<kvs_shard_report> reports(N);
  std::vector<std::string> messages(N);
  std::atomic<int64_t> flipped_from{-2}, flipped_to{-2};
  run_ranks(N, 100000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_t shard = make_shard(comm, s, 0, 0);
    ASSERT_NE(shard, nullptr);
    kvs_window_pool_t pool = kvs_shard_pool(shard);
    // Step 0: the leader binds full pages 10..14; everyone mirrors them.
    if (rank == 0) {
      auto locs = page_locs(10, 5);
      ASSERT_EQ(kvs_window_pool_alloc(pool, locs.data(), locs.size(), nullptr, &err), KVS_OK);
    }
    ASSERT_EQ(kvs_shard_step(shard, 0, nullptr, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_shard_check(shard, nullptr, &err), KVS_OK) << err.message;
    // Rank 2 loses an update: full page 12 now points elsewhere there.
    if (rank == 2) {
      int64_t from, to;
      ASSERT_EQ(kvs_shard_inject_flip(shard, 12, &from, &to, &err), KVS_OK) << err.message;
      flipped_from = from;
      flipped_to = to;
      EXPECT_EQ(kvs_window_pool_check_integrity(pool, &err), KVS_OK)
          << "the flip keeps the free list consistent: only the binding differs";
    }
    // Step 1 (empty): rank 2 sees its digest differ from the header's.
    kvs_status st = kvs_shard_step(shard, 1, nullptr, &err);
    if (rank == 2) {
      EXPECT_EQ(st, KVS_ERR_DIVERGENCE);
      EXPECT_TRUE(contains(err.message,
                           "rank 2's window bindings differ from the leader's after "
                           "step 1"))
          << err.message;
    } else {
      EXPECT_EQ(st, KVS_OK) << err.message;
    }
    kvs_shard_report report;
    EXPECT_EQ(kvs_shard_check(shard, &report, &err), KVS_ERR_DIVERGENCE);
    std::lock_guard<std::mutex> lock(m);
    reports[rank] = report;
    messages[rank] = err.message;
    kvs_shard_destroy(shard);
  });
  const kvs_shard_report &r = reports[0];
  EXPECT_EQ(r.kind, KVS_SHARD_DIVERGED_BINDINGS);
  EXPECT_EQ(r.full_page, 12u);
  EXPECT_EQ(r.leader_window_page, flipped_from.load());
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.rank_window_page, flipped_to.load());
  EXPECT_EQ(r.ranks_differing, 1);
  EXPECT_EQ(r.first_seen_rank, 2);
  EXPECT_EQ(r.first_seen_step, 1u);
  EXPECT_EQ(r.step, 1u);
  // One allreduce, then one per bisection level, then three to name ranks.
  uint64_t levels = (uint64_t)std::ceil(std::log2(double(s.full_token / P)));
  EXPECT_EQ(r.collectives, 1 + levels + 3);
  char expected[400];
  snprintf(expected, sizeof expected,
           "window bindings diverged (checked after step 1): full page 12 is window page %lld "
           "on the leader (rank 0) and window page %lld on rank 2; 1 rank(s) differ on it; "
           "rank 2 first saw it at step 1",
           (long long)flipped_from.load(), (long long)flipped_to.load());
  for (int rank = 0; rank < N; rank++) {
    EXPECT_EQ(messages[rank], expected) << "every rank gets the same report";
    EXPECT_EQ(reports[rank].full_page, 12u);
  }
}

TEST(ShardLoopback, bisection_names_the_lowest_of_several_differing_pages) {
  constexpr int N = 3;
  const kvs_pool_sizes s = small_sizes();
  std::vector<kvs_shard_report> reports(N);
  run_ranks(N, 100000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_t shard = make_shard(comm, s, 0, 0);
    if (rank == 0) {
      auto locs = page_locs(20, 8);
      ASSERT_EQ(
          kvs_window_pool_alloc(kvs_shard_pool(shard), locs.data(), locs.size(), nullptr, &err),
          KVS_OK);
    }
    ASSERT_EQ(kvs_shard_step(shard, 0, nullptr, &err), KVS_OK);
    if (rank == 1) {
      ASSERT_EQ(kvs_shard_inject_flip(shard, 26, nullptr, nullptr, &err), KVS_OK);
    }
    if (rank == 2) {
      ASSERT_EQ(kvs_shard_inject_flip(shard, 23, nullptr, nullptr, &err), KVS_OK);
    }
    EXPECT_EQ(kvs_shard_check(shard, &reports[rank], &err), KVS_ERR_DIVERGENCE);
    kvs_shard_destroy(shard);
  });
  EXPECT_EQ(reports[0].full_page, 23u);
  EXPECT_EQ(reports[0].rank, 2);
  EXPECT_EQ(reports[0].ranks_differing, 1);
}

TEST(ShardLoopback, followers_refuse_a_replayed_or_skipped_step_and_stay_unchanged) {
  const kvs_pool_sizes s = small_sizes();
  run_ranks(2, 100000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_t shard = make_shard(comm, s);
    ASSERT_NE(shard, nullptr);
    if (rank == 0) {
      EXPECT_EQ(kvs_shard_apply_message(shard, "x", 1, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
      EXPECT_STREQ(err.message, "rank 0 is the leader: it allocates, it does not apply");
      kvs_shard_destroy(shard);
      return;
    }
    // Rank 1 takes messages by hand, as an engine with its own transport.
    kvs_window_pool_t pool = kvs_shard_pool(shard);
    std::vector<uint8_t> msg(kvs_step_message_bytes(kvs_shard_step_capacity(shard)));
    auto build = [&](uint64_t step, std::vector<kvs_journal_entry> entries, uint64_t digest) {
      kvs_step_header h;
      std::memset(&h, 0, sizeof h);
      h.magic = KVS_STEP_MAGIC;
      h.version = KVS_STEP_VERSION;
      h.step = step;
      h.count = (uint32_t)entries.size();
      h.digest = digest;
      h.aux_step = KVS_STEP_NO_AUX;
      kvs_step_message_put_header(msg.data(), &h);
      std::memcpy(kvs_step_message_entries(msg.data()), entries.data(),
                  entries.size() * sizeof(kvs_journal_entry));
    };
    uint64_t d0 = kvs_window_pool_digest(pool);
    uint64_t after = d0 + kvs_binding_digest_term(5, 10);
    build(0, {{5, 10}}, after);
    ASSERT_EQ(kvs_shard_apply_message(shard, msg.data(), msg.size(), nullptr, &err), KVS_OK)
        << err.message;
    EXPECT_EQ(kvs_window_pool_digest(pool), after);
    EXPECT_EQ(kvs_window_pool_bound_pages(pool), 1u);
    // The same message again: refused as an epoch error, not applied twice.
    EXPECT_EQ(kvs_shard_apply_message(shard, msg.data(), msg.size(), nullptr, &err), KVS_ERR_EPOCH);
    EXPECT_STREQ(err.message,
                 "step 0 on rank 1, which has applied steps up to 0 and runs step 1 next: steps "
                 "are applied in order, once each (already applied)");
    // A step from the future: refused too.
    build(2, {{6, 9}}, 0);
    EXPECT_EQ(kvs_shard_apply_message(shard, msg.data(), msg.size(), nullptr, &err), KVS_ERR_EPOCH);
    EXPECT_TRUE(contains(err.message, "(out of order)")) << err.message;
    EXPECT_EQ(kvs_window_pool_digest(pool), after);
    EXPECT_EQ(kvs_window_pool_bound_pages(pool), 1u);
    EXPECT_EQ(kvs_window_pool_check_integrity(pool, &err), KVS_OK) << err.message;
    EXPECT_EQ(kvs_shard_next_step(shard), 1u);
    // A foreign buffer is corrupt, and changes nothing either.
    msg[0] ^= 0x55;
    EXPECT_EQ(kvs_shard_apply_message(shard, msg.data(), msg.size(), nullptr, &err),
              KVS_ERR_CORRUPT);
    EXPECT_EQ(kvs_shard_next_step(shard), 1u);
    kvs_shard_destroy(shard);
  });
}

TEST(ShardLoopback, a_journal_the_mirror_refuses_makes_the_rank_stale_not_corrupt) {
  const kvs_pool_sizes s = small_sizes();
  std::vector<kvs_shard_report> reports(2);
  run_ranks(2, 100000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_t shard = make_shard(comm, s, 0, 0);
    kvs_window_pool_t pool = kvs_shard_pool(shard);
    if (rank == 1) {
      // The follower's mirror already holds full page 4 (as if a step had
      // been applied twice by a buggy transport).
      kvs_journal_entry e = {4, 0};
      ASSERT_EQ(kvs_window_pool_apply(pool, &e, 1, &err), KVS_OK);
    }
    if (rank == 0) {
      auto locs = page_locs(4, 1);
      ASSERT_EQ(kvs_window_pool_alloc(pool, locs.data(), locs.size(), nullptr, &err), KVS_OK);
    }
    uint64_t before = kvs_window_pool_digest(pool);
    kvs_status st = kvs_shard_step(shard, 0, nullptr, &err);
    if (rank == 1) {
      EXPECT_EQ(st, KVS_ERR_DIVERGENCE);
      EXPECT_TRUE(contains(err.message,
                           "rank 1's mirror refused the leader's journal of step 0: "
                           "journal entry 0 binds full page 4"))
          << err.message;
      EXPECT_EQ(kvs_window_pool_digest(pool), before) << "all or nothing";
      EXPECT_EQ(kvs_window_pool_check_integrity(pool, &err), KVS_OK);
    }
    // The rank stays in lockstep: the next step counts, unapplied.
    st = kvs_shard_step(shard, 1, nullptr, &err);
    EXPECT_EQ(st, rank == 1 ? KVS_ERR_DIVERGENCE : KVS_OK) << err.message;
    EXPECT_EQ(kvs_shard_check(shard, &reports[rank], &err), KVS_ERR_DIVERGENCE);
    kvs_shard_destroy(shard);
  });
  EXPECT_EQ(reports[0].kind, KVS_SHARD_DIVERGED_BINDINGS);
  EXPECT_EQ(reports[0].full_page, 4u);
  EXPECT_EQ(reports[0].rank, 1);
  EXPECT_EQ(reports[0].first_seen_step, 0u);
}

TEST(ShardLoopback, application_digests_are_compared_every_step_and_at_checks) {
  const kvs_pool_sizes s = small_sizes();
  std::vector<kvs_shard_report> reports(3);
  std::vector<std::string> step_messages(3);
  run_ranks(3, 100000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_t shard = make_shard(comm, s, 0, 0);
    ASSERT_EQ(kvs_shard_step(shard, 0, nullptr, &err), KVS_OK);
    kvs_shard_set_aux_digest(shard, 0, rank == 2 ? 0xbad : 0x600d);
    kvs_status st = kvs_shard_step(shard, 1, nullptr, &err);
    EXPECT_EQ(st, rank == 2 ? KVS_ERR_DIVERGENCE : KVS_OK);
    if (rank == 2) step_messages[rank] = err.message;
    EXPECT_EQ(kvs_shard_check(shard, &reports[rank], &err), KVS_ERR_DIVERGENCE);
    kvs_shard_destroy(shard);
  });
  EXPECT_EQ(step_messages[2],
            "rank 2's application digest of step 0 is 0000000000000bad, the leader's "
            "000000000000600d");
  EXPECT_EQ(reports[1].kind, KVS_SHARD_DIVERGED_AUX);
  EXPECT_EQ(reports[1].rank, 2);
  EXPECT_EQ(reports[1].ranks_differing, 1);
  EXPECT_EQ(reports[1].first_seen_step, 1u);
}

TEST(ShardLoopback, a_pool_that_fails_its_integrity_check_is_named) {
  const kvs_pool_sizes s = small_sizes();
  std::vector<kvs_shard_report> reports(2);
  std::vector<std::string> messages(2);
  run_ranks(2, 100000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_t shard = make_shard(comm, s, 0, 0);
    kvs_window_pool_t pool = kvs_shard_pool(shard);
    if (rank == 0) {
      auto locs = page_locs(7, 1);
      ASSERT_EQ(kvs_window_pool_alloc(pool, locs.data(), locs.size(), nullptr, &err), KVS_OK);
    }
    ASSERT_EQ(kvs_shard_step(shard, 0, nullptr, &err), KVS_OK);
    // Both ranks leak the same page: digests agree, integrity does not.
    auto locs = page_locs(7, 1);
    ASSERT_EQ(kvs_window_pool_unbind_raw(pool, locs.data(), locs.size(), &err), KVS_OK);
    EXPECT_EQ(kvs_shard_check(shard, &reports[rank], &err), KVS_ERR_DIVERGENCE);
    messages[rank] = err.message;
    kvs_shard_destroy(shard);
  });
  EXPECT_EQ(reports[1].kind, KVS_SHARD_DIVERGED_INTEGRITY);
  EXPECT_EQ(reports[1].rank, 0);
  EXPECT_TRUE(contains(messages[0],
                       "rank 0's window pool fails its integrity check (checked "
                       "after step 0): window pages leaked"))
      << messages[0];
}

TEST(ShardLoopback, a_leader_abort_stops_every_follower_with_its_reason) {
  const kvs_pool_sizes s = small_sizes();
  run_ranks(3, 100000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_t shard = make_shard(comm, s);
    ASSERT_EQ(kvs_shard_step(shard, 0, nullptr, &err), KVS_OK);
    if (rank == 0) {
      EXPECT_EQ(kvs_shard_abort_step(shard, 1, KVS_ERR_EXHAUSTED, "scheduler ran dry", &err),
                KVS_OK);
    } else {
      EXPECT_EQ(kvs_shard_step(shard, 1, nullptr, &err), KVS_ERR_COMM);
      EXPECT_STREQ(err.message, "the leader aborted at step 1 (pool exhausted): scheduler ran dry");
    }
    EXPECT_EQ(kvs_shard_health(shard), KVS_ERR_COMM);
    EXPECT_EQ(kvs_shard_step(shard, 1, nullptr, &err), KVS_ERR_COMM) << "sticky";
    EXPECT_TRUE(contains(err.message, "stopped earlier: the leader aborted at step 1"))
        << err.message;
    kvs_shard_destroy(shard);
  });
}

TEST(ShardLoopback, a_rank_that_stops_answering_turns_into_a_bounded_timeout) {
  const kvs_pool_sizes s = small_sizes();
  std::atomic<int> failed{0};
  run_ranks(3, 4000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_t shard = make_shard(comm, s);
    ASSERT_NE(shard, nullptr);
    if (rank == 1) {  // dies after create
      kvs_shard_destroy(shard);
      return;
    }
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(kvs_shard_step(shard, 0, nullptr, &err), KVS_ERR_TIMEOUT);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(secs, 40.0);
    EXPECT_TRUE(contains(err.message, "waiting for rank(s) 1: a peer failed or stalled"))
        << err.message;
    EXPECT_EQ(kvs_shard_health(shard), KVS_ERR_TIMEOUT);
    EXPECT_EQ(kvs_shard_check(shard, nullptr, &err), KVS_ERR_TIMEOUT);
    failed++;
    kvs_shard_destroy(shard);
  });
  EXPECT_EQ(failed.load(), 2);
}

TEST(ShardLoopback, followers_learn_where_the_leaders_entries_lie) {
  const kvs_pool_sizes s = small_sizes();
  std::vector<Recorder> recs(3);
  run_ranks(3, 50000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_shard_t shard = make_shard(comm, s);
    kvs_shard_step_info info;
    for (uint64_t step = 0; step < 4; step++) {
      if (rank == 0 && step < 2) {
        auto locs = page_locs(2 + step, 1);
        ASSERT_EQ(
            kvs_window_pool_alloc(kvs_shard_pool(shard), locs.data(), locs.size(), nullptr, &err),
            KVS_OK)
            << err.message;
      }
      if (rank == 0 && step == 2) {
        auto locs = page_locs(2, 1);
        ASSERT_EQ(kvs_window_pool_free(kvs_shard_pool(shard), locs.data(), P, &err), KVS_OK);
      }
      ASSERT_EQ(kvs_shard_step(shard, step, &info, &err), KVS_OK) << err.message;
      ASSERT_NE(info.entries_at, nullptr);
      recs[rank].take(info);
    }
    kvs_shard_destroy(shard);
  });
  ASSERT_EQ(recs[0].seen.size(), 3u);
  EXPECT_EQ(recs[0].seen[2].window_page, KVS_JOURNAL_FREED);
  for (int r = 1; r < 3; r++) {
    EXPECT_EQ(recs[r].steps, recs[0].steps) << "rank " << r;
    ASSERT_EQ(recs[r].seen.size(), recs[0].seen.size()) << "rank " << r;
    for (size_t i = 0; i < recs[0].seen.size(); i++) {
      EXPECT_EQ(recs[r].seen[i].full_page, recs[0].seen[i].full_page) << "rank " << r;
      EXPECT_EQ(recs[r].seen[i].window_page, recs[0].seen[i].window_page) << "rank " << r;
    }
  }
}

TEST(ShardLoopback, a_ranks_failing_local_verdict_is_reported_on_every_rank) {
  const kvs_pool_sizes s = small_sizes();
  std::vector<kvs_shard_report> reports(2);
  std::vector<std::string> messages(2);
  run_ranks(2, 50000, [&](int rank, kvs_comm_t comm) {
    kvs_error err, local;
    kvs_shard_t shard = make_shard(comm, s);
    ASSERT_EQ(kvs_shard_step(shard, 0, nullptr, &err), KVS_OK) << err.message;
    kvs_error_set(&local, KVS_ERR_CUDA, "device table row 7 reads 3, the pool 4");
    kvs_status verdict = rank == 1 ? KVS_ERR_CUDA : KVS_OK;
    EXPECT_EQ(kvs_shard_check_with(shard, verdict, &local, &reports[rank], &err),
              KVS_ERR_DIVERGENCE);
    messages[rank] = err.message;
    // The check reports; it does not stop the shard: the next step runs.
    EXPECT_EQ(kvs_shard_health(shard), KVS_OK);
    EXPECT_EQ(kvs_shard_step(shard, 1, nullptr, &err), KVS_OK) << err.message;
    EXPECT_EQ(kvs_shard_check(shard, nullptr, &err), KVS_OK) << err.message;
    kvs_shard_destroy(shard);
  });
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(reports[r].kind, KVS_SHARD_DIVERGED_INTEGRITY) << "rank " << r;
    EXPECT_EQ(reports[r].rank, 1) << "rank " << r;
    EXPECT_TRUE(contains(messages[r], "rank 1's check of the state beside its pool failed"))
        << messages[r];
  }
  EXPECT_TRUE(contains(messages[1], "device table row 7 reads 3, the pool 4")) << messages[1];
}

TEST(ShardLoopback, ranks_that_built_different_pools_all_fail_create) {
  run_ranks(2, 50000, [&](int rank, kvs_comm_t comm) {
    kvs_pool_sizes s = small_sizes();
    if (rank == 1) {
      kvs_geometry g;
      const uint32_t ratios[] = {0, 4, 128, 4};
      kvs_geometry_init(&g, 8, 4, 4, ratios, 4, nullptr);
      kvs_pool_sizes_compute(32, &g, 0.5, P, 12, &s, nullptr);
    }
    kvs_shard_options o = KVS_SHARD_OPTIONS_INIT;
    o.max_running = 2;
    kvs_shard_t shard = nullptr;
    kvs_error err;
    EXPECT_EQ(kvs_shard_create(comm, &s, &o, &shard, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "ranks built different shards")) << err.message;
    EXPECT_EQ(shard, nullptr);
  });
}

TEST(Workload, a_workload_whose_worst_step_overflows_the_capacity_is_refused) {
  kvs_comm_t comm;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  kvs_shard_t shard = make_shard(comm, small_sizes(), 10);
  kvs_workload_options wo = KVS_WORKLOAD_OPTIONS_INIT;
  wo.max_running = 2;
  wo.prompt_max = 300;
  wo.gen_max = 100;
  wo.chunk_tokens = 4 * P;
  kvs_workload_t w = nullptr;
  EXPECT_EQ(kvs_workload_create(shard, &wo, &w, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message,
               "a step of this workload may journal 24 entries (512-token chunks, 2 running), "
               "over the shard's step capacity of 10");
  EXPECT_EQ(w, nullptr);
  kvs_shard_destroy(shard);
  kvs_comm_destroy(comm);
}

TEST(Workload, one_rank_runs_a_workload_whose_leader_is_never_refused) {
  kvs_comm_t comm;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  kvs_shard_options so = KVS_SHARD_OPTIONS_INIT;
  so.max_running = 6;
  kvs_pool_sizes s = small_sizes();
  kvs_shard_t shard = nullptr;
  ASSERT_EQ(kvs_shard_create(comm, &s, &so, &shard, &err), KVS_OK) << err.message;
  kvs_workload_options wo = KVS_WORKLOAD_OPTIONS_INIT;
  wo.max_running = 6;
  wo.max_waiting = 4;
  wo.arrival_rate = 0.2;
  wo.prompt_max = 1500;
  wo.gen_max = 300;
  kvs_workload_t w = nullptr;
  ASSERT_EQ(kvs_workload_create(shard, &wo, &w, &err), KVS_OK) << err.message;
  for (uint64_t step = 0; step < 3000; step++) {
    ASSERT_EQ(kvs_workload_step(w, step, &err), KVS_OK) << "step " << step << ": " << err.message;
  }
  EXPECT_EQ(kvs_workload_step(w, 7, &err), KVS_ERR_EPOCH);
  kvs_workload_counters c;
  kvs_workload_counters_get(w, &c);
  EXPECT_GT(c.completed, 10u);
  EXPECT_GT(c.refused, 0u) << "11 window pages and a 63-page history must refuse some admissions";
  EXPECT_EQ(kvs_window_pool_check_integrity(kvs_shard_pool(shard), &err), KVS_OK) << err.message;
  uint64_t page = 0;
  EXPECT_EQ(kvs_workload_live_page(w, &page, &err), KVS_OK) << err.message;
  kvs_workload_destroy(w);
  kvs_shard_destroy(shard);
  kvs_comm_destroy(comm);
}

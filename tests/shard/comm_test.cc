// The comm vtable, its wrapper and the self and loopback backends. Every
// deadline here is ten times what the ranks need on a loaded 2-core machine
// (under ASan too), so no healthy rank times out and changes the wording a
// case checks; the one case that waits out a deadline waits 3 s.
#include "shard/comm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>

#include "shard/comm_loopback.h"
#include "shard/comm_self.h"
#include "tests/shard/ranks.h"

using kvs_test::run_ranks;
using kvs_test::words;

TEST(CommSelf, is_one_rank_whose_collectives_are_the_identity) {
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_comm_rank(comm), 0);
  EXPECT_EQ(kvs_comm_size(comm), 1);
  EXPECT_STREQ(kvs_comm_backend(comm), "self");
  kvs_comm_buffer b;
  ASSERT_EQ(kvs_comm_buffer_alloc(comm, 32, &b, &err), KVS_OK);
  EXPECT_EQ(b.device, nullptr);
  words(b)[0] = 7;
  words(b)[1] = 9;
  EXPECT_EQ(kvs_comm_broadcast(comm, &b, 16, 0, &err), KVS_OK);
  EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 2, KVS_COMM_SUM, &err), KVS_OK);
  EXPECT_EQ(kvs_comm_barrier(comm, &err), KVS_OK);
  EXPECT_EQ(words(b)[0], 7u);
  EXPECT_EQ(words(b)[1], 9u);
  kvs_comm_stats stats;
  kvs_comm_stats_get(comm, &stats);
  EXPECT_EQ(stats.collectives, 3u);
  EXPECT_EQ(stats.broadcasts, 1u);
  EXPECT_EQ(stats.allreduces, 1u);
  EXPECT_EQ(stats.bytes, 32u);
  kvs_comm_buffer_free(comm, &b);
  kvs_comm_buffer_free(comm, &b);  // a freed (zeroed) buffer is a no-op
  kvs_comm_destroy(comm);
  kvs_comm_destroy(nullptr);
}

TEST(CommWrapper, refuses_bad_arguments_by_value_without_poisoning) {
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  kvs_comm_buffer b;
  ASSERT_EQ(kvs_comm_buffer_alloc(comm, 16, &b, &err), KVS_OK);
  EXPECT_EQ(kvs_comm_broadcast(comm, &b, 17, 0, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message,
               "broadcast of 17 bytes needs a comm buffer at least that large (got 16 bytes)");
  EXPECT_EQ(kvs_comm_broadcast(comm, &b, 8, 1, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "broadcast root 1 is outside a group of 1 ranks");
  EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 3, KVS_COMM_MIN, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "allreduce of 3 words needs a comm buffer of 24 bytes (got 16)");
  EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 1, (kvs_comm_op)9, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "allreduce op 9 is none of min, max, sum");
  EXPECT_EQ(kvs_comm_set_timeout_ms(comm, 0, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "timeout_ms is 0; every wait needs a deadline (> 0)");
  EXPECT_EQ(kvs_comm_health(comm), KVS_OK);
  EXPECT_STREQ(kvs_comm_op_name(KVS_COMM_MAX), "max");
  kvs_comm_buffer_free(comm, &b);
  kvs_comm_destroy(comm);
}

TEST(CommWrapper, a_backend_missing_a_required_slot_is_refused) {
  kvs_comm_vtable v;
  std::memset(&v, 0, sizeof v);
  v.name = "half";
  kvs_comm_t comm = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_comm_create(&v, nullptr, 0, 1, 100, &comm, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message,
               "comm backend 'half' leaves a required slot NULL (buffer_alloc, buffer_free, "
               "broadcast, allreduce_u64 and barrier are required)");
  EXPECT_EQ(comm, nullptr);
}

TEST(CommLoopback, broadcast_allreduce_and_barrier_move_every_ranks_data) {
  run_ranks(4, 50000, [](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_comm_buffer b;
    ASSERT_EQ(kvs_comm_buffer_alloc(comm, 64, &b, &err), KVS_OK);
    std::memset(b.host, rank == 2 ? 0xab : 0, 64);
    ASSERT_EQ(kvs_comm_broadcast(comm, &b, 64, 2, &err), KVS_OK) << err.message;
    for (int i = 0; i < 64; i++) EXPECT_EQ(static_cast<uint8_t *>(b.host)[i], 0xab);
    for (kvs_comm_op op : {KVS_COMM_MIN, KVS_COMM_MAX, KVS_COMM_SUM}) {
      words(b)[0] = 10 + rank;
      words(b)[1] = 100 - rank;
      ASSERT_EQ(kvs_comm_allreduce_u64(comm, &b, 2, op, &err), KVS_OK) << err.message;
      uint64_t a0 = op == KVS_COMM_MIN ? 10 : op == KVS_COMM_MAX ? 13 : 46;
      uint64_t a1 = op == KVS_COMM_MIN ? 97 : op == KVS_COMM_MAX ? 100 : 394;
      EXPECT_EQ(words(b)[0], a0) << kvs_comm_op_name(op);
      EXPECT_EQ(words(b)[1], a1) << kvs_comm_op_name(op);
    }
    EXPECT_EQ(kvs_comm_barrier(comm, &err), KVS_OK);
    kvs_comm_buffer_free(comm, &b);
  });
}

TEST(CommLoopback, mismatched_collectives_fail_every_rank_naming_both_calls) {
  run_ranks(2, 50000, [](int rank, kvs_comm_t comm) {
    kvs_error err;
    kvs_comm_buffer b;
    ASSERT_EQ(kvs_comm_buffer_alloc(comm, 16, &b, &err), KVS_OK);
    kvs_status s = rank == 0 ? kvs_comm_broadcast(comm, &b, 16, 0, &err)
                             : kvs_comm_allreduce_u64(comm, &b, 2, KVS_COMM_SUM, &err);
    EXPECT_EQ(s, KVS_ERR_COMM);
    EXPECT_STREQ(err.message,
                 "loopback collective 0 mismatched: rank 0 called broadcast(16 bytes, root 0), "
                 "rank 1 called allreduce(sum, 2 words)");
    EXPECT_EQ(kvs_comm_health(comm), KVS_ERR_COMM);
    kvs_comm_buffer_free(comm, &b);
  });
}

// The deadline (3 s) is ten times what the two live ranks need to meet on
// a loaded 2-core machine: a late live rank would be named beside rank 2.
TEST(CommLoopback, a_rank_that_never_arrives_is_a_timeout_naming_it_then_sticky) {
  std::atomic<int> timed_out{0};
  run_ranks(3, 3000, [&](int rank, kvs_comm_t comm) {
    if (rank == 2) return;  // this rank "died": it never joins
    kvs_error err;
    auto start = std::chrono::steady_clock::now();
    kvs_status s = kvs_comm_barrier(comm, &err);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(s, KVS_ERR_TIMEOUT);
    EXPECT_GE(secs, 2.5);
    EXPECT_LT(secs, 30.0) << "a dead peer must not hang its peers";
    std::string m = err.message;
    EXPECT_NE(m.find("timed out after 3000 ms waiting for rank(s) 2"), std::string::npos) << m;
    EXPECT_NE(m.find("a peer failed or stalled"), std::string::npos) << m;
    timed_out++;
    // Poisoned: the next call fails at once with the first failure.
    kvs_error again;
    EXPECT_EQ(kvs_comm_barrier(comm, &again), KVS_ERR_COMM);
    EXPECT_NE(std::string(again.message).find("the communicator failed earlier (timed out)"),
              std::string::npos)
        << again.message;
  });
  EXPECT_EQ(timed_out.load(), 2);
}

// The deadline (100 s) is ten times the old one: the abort must end the
// waits long before it (half of it is the bound), whatever the load.
TEST(CommLoopback, an_abort_wakes_every_waiter_with_the_aborting_rank) {
  run_ranks(3, 100000, [](int rank, kvs_comm_t comm) {
    kvs_error err;
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      kvs_comm_abort(comm, 5);
      EXPECT_EQ(kvs_comm_health(comm), KVS_ERR_COMM);
      return;
    }
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(kvs_comm_barrier(comm, &err), KVS_ERR_COMM);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(secs, 50.0) << "an abort must not wait for the deadline";
    EXPECT_STREQ(err.message, "rank 1 aborted the loopback group (code 5)");
  });
}

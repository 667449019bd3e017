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
#include <vector>

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

// ---- point to point: kvs_comm_exchange ----

namespace {

// The bytes of the k-th message from src to dst, different for every
// position, pair and k, so a byte landing in the wrong place shows.
uint8_t payload_byte(int src, int dst, int k, size_t i) {
  uint64_t x = (uint64_t(i) + 1) * 0x9e3779b97f4a7c15ull ^
               (uint64_t(src) << 48 | uint64_t(dst) << 32 | uint64_t(k) << 16);
  x ^= x >> 29;
  return uint8_t(x * 0xbf58476d1ce4e5b9ull >> 56);
}

std::vector<uint8_t> payload(int src, int dst, int k, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; i++) v[i] = payload_byte(src, dst, k, i);
  return v;
}

// The first position where got differs from the k-th message src -> dst,
// or -1.
long first_wrong(const std::vector<uint8_t> &got, int src, int dst, int k) {
  for (size_t i = 0; i < got.size(); i++) {
    if (got[i] != payload_byte(src, dst, k, i)) return long(i);
  }
  return -1;
}

kvs_comm_transfer send_of(int peer, std::vector<uint8_t> &v) {
  return kvs_comm_transfer{peer, true, v.empty() ? nullptr : v.data(), v.size()};
}
kvs_comm_transfer receive_of(int peer, std::vector<uint8_t> &v) {
  return kvs_comm_transfer{peer, false, v.empty() ? nullptr : v.data(), v.size()};
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(CommSelf, an_exchange_lands_each_send_to_itself_in_its_receive_in_order) {
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  const size_t large = size_t(64) << 20;
  std::vector<uint8_t> a = payload(0, 0, 0, 16), b = payload(0, 0, 1, large);
  std::vector<uint8_t> x(16), y(large), none;
  // Receives before and between the sends, and a zero-byte transfer with
  // no data at all: the k-th send lands in the k-th receive.
  std::vector<kvs_comm_transfer> batch = {receive_of(0, x), send_of(0, a), receive_of(0, none),
                                          send_of(0, b), receive_of(0, y)};
  ASSERT_EQ(kvs_comm_exchange(comm, batch.data(), batch.size(), &err), KVS_OK) << err.message;
  EXPECT_EQ(first_wrong(x, 0, 0, 0), -1);
  EXPECT_EQ(first_wrong(y, 0, 0, 1), -1);
  kvs_comm_stats stats;
  kvs_comm_stats_get(comm, &stats);
  EXPECT_EQ(stats.exchanges, 1u);
  EXPECT_EQ(stats.exchange_bytes, 2u * (16 + large));
  EXPECT_EQ(stats.collectives, 0u) << "an exchange is no collective";
  EXPECT_EQ(kvs_comm_exchange(comm, nullptr, 0, &err), KVS_OK) << "an empty batch";

  // A batch that cannot complete on one rank is refused before a byte
  // moves, and poisons nothing.
  std::fill(x.begin(), x.end(), 0);
  std::vector<kvs_comm_transfer> lone = {send_of(0, a)};
  EXPECT_EQ(kvs_comm_exchange(comm, lone.data(), 1, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message,
               "self exchange of 1 sends and 0 receives: on one rank every send is to itself and "
               "needs its receive in the same batch");
  std::vector<uint8_t> big(17);
  std::vector<kvs_comm_transfer> sizes = {send_of(0, a), receive_of(0, x), send_of(0, a),
                                          receive_of(0, big)};
  EXPECT_EQ(kvs_comm_exchange(comm, sizes.data(), sizes.size(), &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message,
               "self exchange: send 1 to rank 0 is 16 bytes (transfer 2), its receive is 17 "
               "bytes (transfer 3); matched transfers must be the same size");
  EXPECT_EQ(x, std::vector<uint8_t>(16, 0)) << "nothing moved";
  EXPECT_EQ(kvs_comm_health(comm), KVS_OK);
  kvs_comm_destroy(comm);
}

TEST(CommWrapper, exchange_refusals_name_the_transfer_and_change_nothing) {
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  std::vector<uint8_t> a = payload(0, 0, 0, 8), x(8, 0);
  struct Case {
    std::vector<kvs_comm_transfer> batch;
    const char *says;
  };
  const std::vector<Case> cases = {
      {{send_of(0, a), receive_of(1, x)},
       "exchange transfer 1 of 2 (a receive of 8 bytes): peer 1 is outside a group of 1 ranks"},
      {{send_of(-1, a), receive_of(0, x)},
       "exchange transfer 0 of 2 (a send of 8 bytes): peer -1 is outside a group of 1 ranks"},
      {{send_of(0, a), kvs_comm_transfer{0, false, nullptr, 8}},
       "exchange transfer 1 of 2 (a receive of 8 bytes from rank 0) has NULL data"},
  };
  for (const Case &c : cases) {
    EXPECT_EQ(kvs_comm_exchange(comm, c.batch.data(), c.batch.size(), &err),
              KVS_ERR_INVALID_ARGUMENT)
        << c.says;
    EXPECT_STREQ(err.message, c.says);
  }
  EXPECT_EQ(kvs_comm_exchange(comm, nullptr, 3, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "exchange of 3 transfers needs their array (got NULL)");
  EXPECT_EQ(kvs_comm_exchange(nullptr, nullptr, 0, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "exchange: comm is NULL");
  EXPECT_EQ(x, std::vector<uint8_t>(8, 0)) << "nothing moved";
  kvs_comm_stats stats;
  kvs_comm_stats_get(comm, &stats);
  EXPECT_EQ(stats.exchanges, 0u) << "a refused batch is not counted";
  EXPECT_EQ(kvs_comm_health(comm), KVS_OK);
  // The same communicator still exchanges.
  std::vector<kvs_comm_transfer> good = {send_of(0, a), receive_of(0, x)};
  ASSERT_EQ(kvs_comm_exchange(comm, good.data(), 2, &err), KVS_OK) << err.message;
  EXPECT_EQ(first_wrong(x, 0, 0, 0), -1);
  kvs_comm_destroy(comm);
}

namespace {
kvs_status ok_broadcast(void *, kvs_comm_buffer *, size_t, int, int, kvs_error *) { return KVS_OK; }
kvs_status ok_allreduce(void *, kvs_comm_buffer *, size_t, kvs_comm_op, int, kvs_error *) {
  return KVS_OK;
}
kvs_status ok_barrier(void *, int, kvs_error *) { return KVS_OK; }
}  // namespace

TEST(CommWrapper, a_backend_without_exchange_is_unsupported_naming_it_and_not_poisoned) {
  kvs_comm_vtable v;
  std::memset(&v, 0, sizeof v);
  v.name = "collectives-only";
  v.buffer_alloc = kvs_comm_host_buffer_alloc;
  v.buffer_free = kvs_comm_host_buffer_free;
  v.broadcast = ok_broadcast;
  v.allreduce_u64 = ok_allreduce;
  v.barrier = ok_barrier;
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_create(&v, nullptr, 0, 2, 1000, &comm, &err), KVS_OK) << err.message;
  std::vector<uint8_t> a(8);
  std::vector<kvs_comm_transfer> batch = {send_of(1, a)};
  EXPECT_EQ(kvs_comm_exchange(comm, batch.data(), 1, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_STREQ(err.message, "the 'collectives-only' communicator has no point-to-point exchange");
  EXPECT_EQ(kvs_comm_exchange(comm, nullptr, 0, &err), KVS_ERR_UNSUPPORTED) << "even empty";
  EXPECT_EQ(kvs_comm_health(comm), KVS_OK);
  EXPECT_EQ(kvs_comm_barrier(comm, &err), KVS_OK);
  kvs_comm_destroy(comm);
}

// Every rank sends two messages to every rank (itself included) and
// receives two from each, in a batch whose order differs by rank (some
// receive first, some send first, its own messages interleaved), with
// zero-byte transfers mixed in; then a collective, and a second round.
// Sizes differ by pair and message, so any mismatch in matching shows.
TEST(CommLoopback, an_exchange_moves_every_pairs_messages_both_ways_in_any_order) {
  for (int n : {2, 3, 4}) {
    run_ranks(n, 50000, [n](int rank, kvs_comm_t comm) {
      kvs_error err;
      for (int round = 0; round < 2; round++) {
        std::vector<std::vector<uint8_t>> out, in;
        std::vector<std::pair<int, int>> expect;  // (src, k) per receive
        out.reserve(size_t(4 * n));
        in.reserve(size_t(4 * n));
        std::vector<kvs_comm_transfer> sends, receives;
        for (int peer = 0; peer < n; peer++) {
          for (int k = 0; k < 2; k++) {
            int kk = 2 * round + k;
            size_t to = size_t(1000 + 37 * rank + 11 * peer + 5 * kk);
            size_t from = size_t(1000 + 37 * peer + 11 * rank + 5 * kk);
            out.push_back(payload(rank, peer, kk, to));
            sends.push_back(send_of(peer, out.back()));
            in.emplace_back(from);
            receives.push_back(receive_of(peer, in.back()));
            expect.push_back({peer, kk});
          }
        }
        // Even ranks receive first, odd ranks send first, the first half
        // peer by peer downwards, each pair's messages in order (the k-th
        // send matches the k-th receive), with zero-byte transfers between.
        std::vector<uint8_t> nothing;
        std::vector<kvs_comm_transfer> batch;
        const auto &first = rank % 2 == 0 ? receives : sends;
        const auto &second = rank % 2 == 0 ? sends : receives;
        for (int p = n - 1; p >= 0; p--) {
          for (int k = 0; k < 2; k++) batch.push_back(first[size_t(2 * p + k)]);
          batch.push_back(receive_of(p, nothing));
        }
        for (int p = 0; p < n; p++) {
          for (int k = 0; k < 2; k++) batch.push_back(second[size_t(2 * p + k)]);
        }
        ASSERT_EQ(kvs_comm_exchange(comm, batch.data(), batch.size(), &err), KVS_OK)
            << "rank " << rank << " of " << n << ": " << err.message;
        for (size_t i = 0; i < in.size(); i++) {
          EXPECT_EQ(first_wrong(in[i], expect[i].first, rank, expect[i].second), -1)
              << "rank " << rank << " of " << n << ": message " << expect[i].second << " from rank "
              << expect[i].first;
        }
        // A collective between rounds meets no exchange traffic.
        kvs_comm_buffer b;
        ASSERT_EQ(kvs_comm_buffer_alloc(comm, 8, &b, &err), KVS_OK);
        words(b)[0] = uint64_t(rank);
        ASSERT_EQ(kvs_comm_allreduce_u64(comm, &b, 1, KVS_COMM_SUM, &err), KVS_OK) << err.message;
        EXPECT_EQ(words(b)[0], uint64_t(n * (n - 1) / 2));
        kvs_comm_buffer_free(comm, &b);
      }
      kvs_comm_stats stats;
      kvs_comm_stats_get(comm, &stats);
      EXPECT_EQ(stats.exchanges, 2u);
      EXPECT_EQ(kvs_comm_health(comm), KVS_OK);
    });
  }
}

// 64 MiB each way between two ranks at once, compared byte for byte.
TEST(CommLoopback, an_exchange_of_64_MiB_each_way_arrives_byte_for_byte) {
  const size_t bytes = size_t(64) << 20;
  run_ranks(2, 50000, [bytes](int rank, kvs_comm_t comm) {
    kvs_error err;
    std::vector<uint8_t> out = payload(rank, 1 - rank, 0, bytes), in(bytes);
    std::vector<kvs_comm_transfer> batch = {send_of(1 - rank, out), receive_of(1 - rank, in)};
    ASSERT_EQ(kvs_comm_exchange(comm, batch.data(), 2, &err), KVS_OK) << err.message;
    EXPECT_EQ(first_wrong(in, 1 - rank, rank, 0), -1) << "rank " << rank;
  });
}

// Refusals reach no peer: the batches after them still match.
TEST(CommLoopback, exchange_refusals_change_nothing_and_the_next_batch_matches) {
  run_ranks(2, 50000, [](int rank, kvs_comm_t comm) {
    kvs_error err;
    int peer = 1 - rank;
    std::vector<uint8_t> out = payload(rank, peer, 0, 4096), in(4096, 0);
    std::vector<kvs_comm_transfer> bad = {send_of(peer, out), receive_of(2, in)};
    EXPECT_EQ(kvs_comm_exchange(comm, bad.data(), 2, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_STREQ(err.message,
                 "exchange transfer 1 of 2 (a receive of 4096 bytes): peer 2 is outside a group "
                 "of 2 ranks");
    std::vector<kvs_comm_transfer> null_data = {send_of(peer, out),
                                                kvs_comm_transfer{peer, false, nullptr, 4096}};
    EXPECT_EQ(kvs_comm_exchange(comm, null_data.data(), 2, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(in, std::vector<uint8_t>(4096, 0));
    EXPECT_EQ(kvs_comm_health(comm), KVS_OK);
    std::vector<kvs_comm_transfer> good = {send_of(peer, out), receive_of(peer, in)};
    ASSERT_EQ(kvs_comm_exchange(comm, good.data(), 2, &err), KVS_OK) << err.message;
    EXPECT_EQ(first_wrong(in, peer, rank, 0), -1) << "the refused sends were never sent";
  });
}

// Rank 2 never calls: rank 0's receive from it runs out its 3 s deadline
// (ten times what a loaded 2-core machine needs for the rest), named with
// the peer and bytes; rank 1's transfer with rank 0 completes. Rank 0's
// communicator is poisoned afterwards.
TEST(CommLoopback, a_silent_peer_is_a_timeout_naming_it_and_bytes_then_poisoned) {
  std::atomic<int> timed_out{0};
  run_ranks(3, 3000, [&](int rank, kvs_comm_t comm) {
    kvs_error err;
    if (rank == 2) return;  // silent
    std::vector<uint8_t> out = payload(rank, 1 - rank, 0, 512), in(512), from2(777);
    std::vector<kvs_comm_transfer> batch = {send_of(1 - rank, out), receive_of(1 - rank, in)};
    if (rank == 0) batch.push_back(receive_of(2, from2));
    auto start = std::chrono::steady_clock::now();
    kvs_status s = kvs_comm_exchange(comm, batch.data(), batch.size(), &err);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rank == 1) {
      EXPECT_EQ(s, KVS_OK) << err.message;
      EXPECT_EQ(first_wrong(in, 0, 1, 0), -1);
      return;
    }
    EXPECT_EQ(s, KVS_ERR_TIMEOUT);
    EXPECT_GE(secs, 2.5);
    EXPECT_LT(secs, 30.0) << "a silent peer must not hang its peers";
    EXPECT_TRUE(contains(err.message,
                         "loopback exchange on rank 0 of 3 timed out after 3000 ms with 1 of 3 "
                         "transfers unmatched: receive of 777 bytes from rank 2"))
        << err.message;
    EXPECT_EQ(first_wrong(in, 1, 0, 0), -1) << "what did complete, completed";
    timed_out++;
    kvs_error again;
    EXPECT_EQ(kvs_comm_exchange(comm, batch.data(), batch.size(), &again), KVS_ERR_COMM);
    EXPECT_TRUE(contains(again.message,
                         "loopback comm exchange on rank 0 of 3 refused: the communicator failed "
                         "earlier (timed out)"))
        << again.message;
  });
  EXPECT_EQ(timed_out.load(), 1);
}

TEST(CommLoopback, matched_transfers_of_different_sizes_fail_both_ranks_naming_them) {
  run_ranks(2, 50000, [](int rank, kvs_comm_t comm) {
    kvs_error err;
    std::vector<uint8_t> buffer(rank == 0 ? 100 : 200);
    std::vector<kvs_comm_transfer> batch = {rank == 0 ? send_of(1, buffer) : receive_of(0, buffer)};
    EXPECT_EQ(kvs_comm_exchange(comm, batch.data(), 1, &err), KVS_ERR_COMM);
    EXPECT_STREQ(err.message,
                 "loopback exchange mismatched: rank 0's send 0 to rank 1 is 100 bytes, rank 1's "
                 "receive 0 from rank 0 is 200 bytes (matched transfers must be the same size)");
    EXPECT_EQ(kvs_comm_health(comm), KVS_ERR_COMM);
  });
}

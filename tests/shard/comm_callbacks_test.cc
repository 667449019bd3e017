// The "callbacks" backend (kvshard.h's kvs_comm_callbacks): its refusals
// name the field and make nothing, a failing or lying callback poisons the
// communicator with what it said, and a TP 2 node steps and checks over
// callbacks that forward to in-process loopback ranks (as an engine's
// torch.distributed group would carry them).
#include "shard/comm_callbacks.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/geometry.h"
#include "kvshard.h"
#include "shard/comm.h"
#include "tests/shard/callback_ranks.h"
#include "tests/shard/status_of_int.h"
#include "tests/shard/ranks.h"

using kvs_test::Forward;
using kvs_test::forwarding;
using kvs_test::run_callback_ranks;
using kvs_test::words;

namespace {

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

kvs_comm_t sentinel() { return reinterpret_cast<kvs_comm_t>(0x1234); }

TEST(CommCallbacks, refusals_name_the_field_and_make_nothing) {
  Forward f;
  const kvs_comm_callbacks good = forwarding(&f);
  kvs_comm_t out = sentinel();
  kvs_error err;
  struct Case {
    const char *why;
    kvs_comm_callbacks cb;
    int rank, size, timeout_ms;
    const char *says;
  };
  auto with = [&](void (*change)(kvs_comm_callbacks &)) {
    kvs_comm_callbacks cb = good;
    change(cb);
    return cb;
  };
  const std::vector<Case> cases = {
      {"no broadcast", with([](kvs_comm_callbacks &c) { c.broadcast = nullptr; }), 0, 2, 1000,
       "kvs_comm_callbacks.broadcast is NULL"},
      {"no allreduce", with([](kvs_comm_callbacks &c) { c.allreduce_u64 = nullptr; }), 0, 2, 1000,
       "kvs_comm_callbacks.allreduce_u64 is NULL"},
      {"no barrier", with([](kvs_comm_callbacks &c) { c.barrier = nullptr; }), 0, 2, 1000,
       "kvs_comm_callbacks.barrier is NULL"},
      {"size 0", with([](kvs_comm_callbacks &c) { c.size = 0; }), 0, 2, 1000,
       "kvs_comm_callbacks.size is 0"},
      {"a newer caller's size", with([](kvs_comm_callbacks &c) { c.size += 8; }), 0, 2, 1000,
       "set it to sizeof(kvs_comm_callbacks)"},
      {"huge size", with([](kvs_comm_callbacks &c) { c.size = SIZE_MAX; }), 0, 2, 1000,
       "kvs_comm_callbacks.size is"},
      // An older caller's struct without barrier lacks a required callback.
      {"short of barrier",
       with([](kvs_comm_callbacks &c) { c.size = offsetof(kvs_comm_callbacks, barrier); }), 0, 2,
       1000, "kvs_comm_callbacks.barrier is NULL"},
      {"group of 0", good, 0, 0, 1000, "rank 0 is outside a group of 0 ranks"},
      {"negative group", good, 0, -3, 1000, "outside a group of -3 ranks"},
      {"negative rank", good, -1, 2, 1000, "rank -1 is outside a group of 2 ranks"},
      {"rank = size", good, 2, 2, 1000, "rank 2 is outside a group of 2 ranks"},
      {"huge rank", good, INT_MAX, 2, 1000, "outside a group of 2 ranks"},
      {"no deadline", good, 0, 2, 0, "timeout_ms is 0"},
      {"negative deadline", good, 0, 2, -5, "timeout_ms is -5"},
  };
  for (const Case &c : cases) {
    kvs_error_clear(&err);
    EXPECT_EQ(kvs_comm_callbacks_create(&c.cb, c.rank, c.size, c.timeout_ms, &out, &err),
              KVS_ERR_INVALID_ARGUMENT)
        << c.why;
    EXPECT_TRUE(contains(err.message, c.says)) << c.why << ": " << err.message;
    EXPECT_EQ(out, sentinel()) << c.why << ": out untouched";
  }
  EXPECT_EQ(kvs_comm_callbacks_create(nullptr, 0, 1, 1000, &out, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "kvs_comm_callbacks_create: callbacks is NULL");
  EXPECT_EQ(kvs_comm_callbacks_create(&good, 0, 1, 1000, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "kvs_comm_callbacks_create: out is NULL");
  EXPECT_EQ(f.destroyed, 0) << "a failed create leaves user the caller's";
  EXPECT_EQ(f.broadcasts + f.allreduces + f.barriers, 0) << "create is local";

  // A struct that goes right after the call: the communicator copied it.
  kvs_comm_callbacks *brief = new kvs_comm_callbacks(good);
  ASSERT_EQ(kvs_comm_callbacks_create(brief, 0, 1, 1000, &out, &err), KVS_OK) << err.message;
  delete brief;
  EXPECT_STREQ(kvs_comm_backend(out), "callbacks");
  EXPECT_EQ(kvs_comm_rank(out), 0);
  EXPECT_EQ(kvs_comm_size(out), 1);
  kvs_comm_destroy(out);
  EXPECT_EQ(f.destroyed, 1) << "destroy hands user back once";
}

// Callbacks that fail as `returned` says, with `message` (copied whole
// into err, NUL or not).
struct Failing {
  int returned = KVS_OK;  // (an int: some are no kvs_status)
  std::string message;
  bool terminate = true;
};

kvs_status fail_with(void *user, kvs_error *err) {
  auto *f = static_cast<Failing *>(user);
  if (f->terminate) {
    snprintf(err->message, sizeof err->message, "%s", f->message.c_str());
  } else {
    memset(err->message, 'x', sizeof err->message);  // no NUL anywhere
  }
  return kvs_test_status_of_int(f->returned);
}

kvs_status failing_broadcast(void *user, void *, size_t, int, int, kvs_error *err) {
  return fail_with(user, err);
}
kvs_status failing_allreduce(void *user, uint64_t *, size_t, int, int, kvs_error *err) {
  return fail_with(user, err);
}
kvs_status failing_barrier(void *user, int, kvs_error *err) { return fail_with(user, err); }

TEST(CommCallbacks, a_failing_or_lying_callback_poisons_with_what_it_said) {
  struct Case {
    int returned;
    const char *message;
    bool terminate;
    kvs_status expect;
    const char *says;
  };
  const std::vector<Case> cases = {
      {KVS_ERR_IO, "wire cut", true, KVS_ERR_COMM,
       "callbacks broadcast (64 bytes, root 1) on rank 0 of 2 failed (the callback returned "
       "KVS_ERR_IO): wire cut"},
      {KVS_ERR_TIMEOUT, "peer 1 silent", true, KVS_ERR_TIMEOUT,
       "(the callback returned KVS_ERR_TIMEOUT): peer 1 silent"},
      // An argument error from a callback may come after peers moved: it
      // poisons too (the wrapper's own argument errors do not).
      {KVS_ERR_INVALID_ARGUMENT, "bad tensor", true, KVS_ERR_COMM,
       "returned KVS_ERR_INVALID_ARGUMENT): bad tensor"},
      {12345, "", true, KVS_ERR_COMM,
       "(the callback returned 12345, which is no kvs_status): (no message)"},
      {-1, "negative", true, KVS_ERR_COMM, "returned -1, which is no kvs_status): negative"},
      {KVS_ERR_COMM, "", false, KVS_ERR_COMM, "returned KVS_ERR_COMM): xxxx"},
  };
  for (const Case &c : cases) {
    Failing f{c.returned, c.message, c.terminate};
    kvs_comm_callbacks cb = {
        sizeof cb, &f, failing_broadcast, failing_allreduce, failing_barrier, nullptr, nullptr};
    kvs_comm_t comm = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_comm_callbacks_create(&cb, 0, 2, 1000, &comm, &err), KVS_OK) << err.message;
    kvs_comm_buffer b;
    ASSERT_EQ(kvs_comm_buffer_alloc(comm, 64, &b, &err), KVS_OK);
    // The wrapper's own argument error reaches no callback and poisons
    // nothing.
    EXPECT_EQ(kvs_comm_broadcast(comm, &b, 65, 0, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(kvs_comm_health(comm), KVS_OK);
    EXPECT_EQ(kvs_comm_broadcast(comm, &b, 64, 1, &err), c.expect) << c.says;
    EXPECT_TRUE(contains(err.message, c.says)) << err.message;
    EXPECT_LT(strlen(err.message), sizeof err.message);
    const std::string first = err.message;
    EXPECT_EQ(kvs_comm_health(comm), c.expect);
    EXPECT_EQ(kvs_comm_barrier(comm, &err), KVS_ERR_COMM);
    EXPECT_TRUE(contains(err.message,
                         "callbacks comm barrier on rank 0 of 2 refused: the "
                         "communicator failed earlier"))
        << err.message;
    EXPECT_TRUE(contains(err.message, first.substr(0, 60))) << err.message;
    kvs_comm_buffer_free(comm, &b);
    kvs_comm_destroy(comm);
  }

  // Allreduce and barrier failures name their call.
  Failing f{KVS_ERR_NO_MEMORY, "no staging tensor"};
  kvs_comm_callbacks cb = {sizeof cb, &f,     failing_broadcast, failing_allreduce, failing_barrier,
                           nullptr,   nullptr};
  for (int which = 0; which < 2; which++) {
    kvs_comm_t comm = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_comm_callbacks_create(&cb, 1, 3, 1000, &comm, &err), KVS_OK);
    kvs_comm_buffer b;
    ASSERT_EQ(kvs_comm_buffer_alloc(comm, 16, &b, &err), KVS_OK);
    if (which == 0) {
      EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 2, KVS_COMM_MAX, &err), KVS_ERR_COMM);
      EXPECT_TRUE(contains(err.message,
                           "callbacks allreduce_u64 (max, 2 words) on rank 1 of 3 "
                           "failed (the callback returned KVS_ERR_NO_MEMORY): no "
                           "staging tensor"))
          << err.message;
    } else {
      EXPECT_EQ(kvs_comm_barrier(comm, &err), KVS_ERR_COMM);
      EXPECT_TRUE(contains(err.message, "callbacks barrier on rank 1 of 3 failed")) << err.message;
    }
    kvs_comm_buffer_free(comm, &b);
    kvs_comm_destroy(comm);
  }
}

TEST(CommCallbacks, collectives_move_every_ranks_data_through_the_callbacks) {
  run_callback_ranks(3, 20000, [](int rank, kvs_comm_t comm, Forward &f) {
    kvs_comm_buffer b;
    kvs_error err;
    ASSERT_EQ(kvs_comm_buffer_alloc(comm, 24, &b, &err), KVS_OK);
    EXPECT_EQ(b.device, nullptr) << "a host backend";
    words(b)[0] = rank == 2 ? 0xfeedull : 0;
    ASSERT_EQ(kvs_comm_broadcast(comm, &b, 8, 2, &err), KVS_OK) << err.message;
    EXPECT_EQ(words(b)[0], 0xfeedull);
    // Unsigned extremes: the top bit set must order above every other.
    const uint64_t top = UINT64_MAX - (uint64_t)rank;
    for (kvs_comm_op op : {KVS_COMM_MIN, KVS_COMM_MAX, KVS_COMM_SUM}) {
      words(b)[0] = top;
      words(b)[1] = (uint64_t)rank;
      words(b)[2] = 1ull << 63;
      ASSERT_EQ(kvs_comm_allreduce_u64(comm, &b, 3, op, &err), KVS_OK) << err.message;
      if (op == KVS_COMM_MIN) {
        EXPECT_EQ(words(b)[0], UINT64_MAX - 2);
        EXPECT_EQ(words(b)[1], 0u);
      } else if (op == KVS_COMM_MAX) {
        EXPECT_EQ(words(b)[0], UINT64_MAX);
        EXPECT_EQ(words(b)[1], 2u);
      } else {
        EXPECT_EQ(words(b)[0], UINT64_MAX * 3 - 3) << "wraps modulo 2^64";
        EXPECT_EQ(words(b)[1], 3u);
        EXPECT_EQ(words(b)[2], 1ull << 63);
      }
    }
    ASSERT_EQ(kvs_comm_barrier(comm, &err), KVS_OK) << err.message;
    EXPECT_EQ(f.broadcasts, 1);
    EXPECT_EQ(f.allreduces, 3);
    EXPECT_EQ(f.barriers, 1);
    kvs_comm_buffer_free(comm, &b);
  });
}

// ---- point to point through the callbacks ----

std::vector<uint8_t> bytes_of(int src, int dst, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = uint8_t(i * 131 + size_t(src) * 17 + size_t(dst) * 5 + 1);
  return v;
}

// Every rank sends to and receives from every rank (itself included)
// through its exchange callback, which forwards to its loopback rank; the
// callback is handed the batch without its zero-byte transfers.
TEST(CommCallbacks, an_exchange_moves_every_pairs_bytes_through_the_callback) {
  const int n = 3;
  run_callback_ranks(n, 20000, [n](int rank, kvs_comm_t comm, Forward &f) {
    std::vector<std::vector<uint8_t>> out, in;
    out.reserve(n);
    in.reserve(n);
    std::vector<kvs_comm_transfer> batch;
    for (int peer = 0; peer < n; peer++) {
      in.emplace_back(size_t(100 + 10 * peer + rank));
      batch.push_back({peer, false, in.back().data(), in.back().size()});
      batch.push_back({peer, true, nullptr, 0});  // moves nothing
    }
    for (int peer = n - 1; peer >= 0; peer--) {
      out.push_back(bytes_of(rank, peer, size_t(100 + 10 * rank + peer)));
      batch.push_back({peer, true, out.back().data(), out.back().size()});
    }
    kvs_error err;
    ASSERT_EQ(kvs_comm_exchange(comm, batch.data(), batch.size(), &err), KVS_OK) << err.message;
    for (int peer = 0; peer < n; peer++) {
      EXPECT_EQ(in[size_t(peer)], bytes_of(peer, rank, in[size_t(peer)].size()))
          << "rank " << rank << " from rank " << peer;
    }
    EXPECT_EQ(f.exchanges, 1);
    EXPECT_EQ(f.exchanged, size_t(2 * n)) << "zero-byte transfers never reach the callback";
    EXPECT_GE(f.smallest, size_t(100));
    // Argument errors reach no callback.
    batch[0].peer = n;
    EXPECT_EQ(kvs_comm_exchange(comm, batch.data(), batch.size(), &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(f.exchanges, 1);
    EXPECT_EQ(kvs_comm_health(comm), KVS_OK);
  });
}

// 64 MiB each way through the callbacks, and a silent peer: rank 2 never
// calls, so rank 0's forwarded exchange times out on its loopback rank
// (3 s, ten times what the rest needs on a loaded 2-core machine); the
// timeout stays one, names the callback's transfers, and poisons.
TEST(CommCallbacks, an_exchange_of_64_MiB_and_a_silent_peer_through_the_callbacks) {
  const size_t big = size_t(64) << 20;
  run_callback_ranks(3, 3000, [big](int rank, kvs_comm_t comm, Forward &) {
    kvs_error err;
    if (rank == 2) return;  // silent
    std::vector<uint8_t> out = bytes_of(rank, 1 - rank, big), in(big);
    kvs_comm_transfer pair[2] = {{1 - rank, true, out.data(), big},
                                 {1 - rank, false, in.data(), big}};
    ASSERT_EQ(kvs_comm_exchange(comm, pair, 2, &err), KVS_OK) << err.message;
    EXPECT_TRUE(in == bytes_of(1 - rank, rank, big)) << "rank " << rank << ": 64 MiB differ";
    if (rank == 1) return;
    std::vector<uint8_t> from2(999);
    kvs_comm_transfer silent = {2, false, from2.data(), from2.size()};
    EXPECT_EQ(kvs_comm_exchange(comm, &silent, 1, &err), KVS_ERR_TIMEOUT);
    EXPECT_TRUE(contains(err.message,
                         "callbacks exchange (receive of 999 bytes from rank 2) on rank 0 of 3 "
                         "failed (the callback returned KVS_ERR_TIMEOUT): loopback exchange on "
                         "rank 0 of 3 timed out after 3000 ms"))
        << err.message;
    EXPECT_EQ(kvs_comm_exchange(comm, pair, 2, &err), KVS_ERR_COMM);
    EXPECT_TRUE(contains(err.message, "failed earlier (timed out)")) << err.message;
  });
}

kvs_status failing_exchange(void *user, const kvs_comm_transfer *, size_t, int, kvs_error *err) {
  return fail_with(user, err);
}

TEST(CommCallbacks, without_an_exchange_callback_exchange_is_unsupported_and_not_poisoned) {
  Forward f;
  kvs_comm_callbacks cb = forwarding(&f);
  cb.exchange = nullptr;
  // And an older caller's struct, which ends before the field.
  kvs_comm_callbacks older = forwarding(&f);
  older.size = offsetof(kvs_comm_callbacks, exchange);
  for (const kvs_comm_callbacks *c : {&cb, &older}) {
    kvs_comm_t comm = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_comm_callbacks_create(c, 0, 2, 1000, &comm, &err), KVS_OK) << err.message;
    std::vector<uint8_t> a(8);
    kvs_comm_transfer t = {1, true, a.data(), a.size()};
    EXPECT_EQ(kvs_comm_exchange(comm, &t, 1, &err), KVS_ERR_UNSUPPORTED);
    EXPECT_STREQ(err.message,
                 "the 'callbacks' communicator has no point-to-point exchange (its "
                 "kvs_comm_callbacks has no exchange)");
    EXPECT_EQ(kvs_comm_health(comm), KVS_OK);
    kvs_comm_destroy(comm);
  }
  EXPECT_EQ(f.exchanges, 0);
}

TEST(CommCallbacks, a_failing_exchange_callback_poisons_naming_the_transfers) {
  Failing f{KVS_ERR_IO, "wire cut"};
  kvs_comm_callbacks cb = {sizeof cb,       &f,      failing_broadcast, failing_allreduce,
                           failing_barrier, nullptr, failing_exchange};
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_callbacks_create(&cb, 0, 2, 1000, &comm, &err), KVS_OK) << err.message;
  std::vector<uint8_t> a(64), b(32);
  kvs_comm_transfer t[2] = {{1, true, a.data(), a.size()}, {1, false, b.data(), b.size()}};
  EXPECT_EQ(kvs_comm_exchange(comm, t, 2, &err), KVS_ERR_COMM);
  EXPECT_STREQ(err.message,
               "callbacks exchange (send of 64 bytes to rank 1, receive of 32 bytes from rank 1) "
               "on rank 0 of 2 failed (the callback returned KVS_ERR_IO): wire cut");
  EXPECT_EQ(kvs_comm_health(comm), KVS_ERR_COMM);
  EXPECT_EQ(kvs_comm_exchange(comm, t, 2, &err), KVS_ERR_COMM);
  EXPECT_TRUE(contains(err.message,
                       "callbacks comm exchange on rank 0 of 2 refused: the "
                       "communicator failed earlier"))
      << err.message;
  kvs_comm_destroy(comm);
  // A timeout stays one.
  f.returned = KVS_ERR_TIMEOUT;
  ASSERT_EQ(kvs_comm_callbacks_create(&cb, 1, 2, 1000, &comm, &err), KVS_OK) << err.message;
  t[0].peer = t[1].peer = 0;
  EXPECT_EQ(kvs_comm_exchange(comm, t, 2, &err), KVS_ERR_TIMEOUT);
  EXPECT_TRUE(contains(err.message,
                       "callbacks exchange (send of 64 bytes to rank 0, receive of "
                       "32 bytes from rank 0) on rank 1 of 2 failed"))
      << err.message;
  kvs_comm_destroy(comm);
}

// Full pages first .. first + n - 1 as locations.
std::vector<int64_t> locations(uint64_t first, uint64_t n, uint64_t P) {
  std::vector<int64_t> out;
  for (uint64_t p = first; p < first + n; p++) {
    for (uint64_t i = 0; i < P; i++) out.push_back((int64_t)(p * P + i));
  }
  return out;
}

TEST(CommCallbacks, a_tp2_node_steps_and_checks_over_the_callbacks) {
  kvs_geometry geometry;
  ASSERT_EQ(kvs_geometry_builtin("dsv4-flash", &geometry, nullptr), KVS_OK);
  std::vector<uint64_t> budgets(8, 2000ull << 20);
  kvs_node_options o;
  kvs_node_options_init(&o);
  o.geometry = &geometry;
  o.swa_ratio = 0.04;
  o.max_seq_len = 8192;
  o.max_running = 8;
  o.tp = 2;
  o.pp = 1;
  o.topology = "bundled";
  o.device = KVS_NODE_DEVICE_CPU;
  o.check_every = 0;
  o.budget_per_gpu = budgets.data();
  o.n_budget_per_gpu = budgets.size();
  std::vector<uint64_t> digests(2, 0);
  run_callback_ranks(2, 20000, [&](int rank, kvs_comm_t comm, Forward &f) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &o, &node, &err), KVS_OK) << err.message;
    const uint64_t P = kvs_node_page(node);
    for (int step = 0; step < 4; step++) {
      if (rank == 0) {
        int64_t slot = -1;
        ASSERT_EQ(kvs_node_admit(node, 10 + step, &slot, &err), KVS_OK) << err.message;
        std::vector<int64_t> locs = locations(3 * step, 3, P);
        ASSERT_EQ(kvs_node_bind(node, 10 + step, locs.data(), locs.size(), &err), KVS_OK)
            << err.message;
      }
      const int before = f.broadcasts;
      ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
      EXPECT_EQ(f.broadcasts - before, 1) << "a step is one broadcast through the callback";
    }
    kvs_node_report report = {sizeof report};
    ASSERT_EQ(kvs_node_check(node, &report, &err), KVS_OK) << err.message;
    EXPECT_EQ(report.kind, KVS_DIVERGENCE_NONE);
    EXPECT_EQ(report.rank, -1);
    EXPECT_EQ(report.step, 3u) << "steps count from 0";
    digests[rank] = report.digest;
    kvs_node_destroy(node);
  });
  EXPECT_EQ(digests[0], digests[1]);
  EXPECT_NE(digests[0], 0u);
}

}  // namespace

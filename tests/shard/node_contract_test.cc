// The step's contract with an engine, on the host twin: the leader's batch
// and payload carried to every rank in the step's one collective, range
// rows, the capacity a scheduler that is not the leader decides from, the
// engine's result buffers, explicit releases, and 0.7 callers' sizes.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "kvshard.h"
#include "shard/comm.h"
#include "tests/shard/ranks.h"

using kvs_test::run_ranks;

namespace {

constexpr uint64_t MiB = 1ull << 20;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

struct Deployment {
  kvs_geometry geometry;
  std::vector<uint64_t> budgets = std::vector<uint64_t>(8, 2000 * MiB);
  kvs_node_options options;

  explicit Deployment(int tp) {
    EXPECT_EQ(kvs_geometry_builtin("dsv4-flash", &geometry, nullptr), KVS_OK);
    kvs_node_options_init(&options);
    options.geometry = &geometry;
    options.swa_ratio = 0.04;
    options.max_seq_len = 8192;
    options.max_running = 8;
    options.tp = tp;
    options.pp = 1;
    options.topology = "bundled";
    options.device = KVS_NODE_DEVICE_CPU;
    options.check_every = 0;
    options.budget_per_gpu = budgets.data();
    options.n_budget_per_gpu = budgets.size();
  }
};

// Locations of full pages first .. first + n - 1.
std::vector<int64_t> locations(uint64_t first, uint64_t n, uint64_t P) {
  std::vector<int64_t> out;
  for (uint64_t p = first; p < first + n; p++) {
    for (uint64_t i = 0; i < P; i++) out.push_back((int64_t)(p * P + i));
  }
  return out;
}

struct Rows {
  std::vector<int64_t> own, prev, ring, csa, hca;
};

Rows copy_rows(const kvs_node_step_result &r) {
  Rows o;
  o.own.assign(r.own, r.own + r.n);
  o.prev.assign(r.prev, r.prev + r.n);
  o.ring.assign(r.ring, r.ring + r.n * r.page);
  o.csa.assign(r.csa_loc, r.csa_loc + r.n);
  o.hca.assign(r.hca_loc, r.hca_loc + r.n);
  return o;
}

bool same(const Rows &a, const Rows &b) {
  return a.own == b.own && a.prev == b.prev && a.ring == b.ring && a.csa == b.csa && a.hca == b.hca;
}

// Two requests of 4 pages each, admitted and bound on the leader.
void admit_two(kvs_node_t node, uint64_t P) {
  kvs_error err;
  for (uint64_t r = 0; r < 2; r++) {
    int64_t slot = -1;
    ASSERT_EQ(kvs_node_admit(node, 10 + r, &slot, &err), KVS_OK) << err.message;
    std::vector<int64_t> locs = locations(4 * r, 4, P);
    ASSERT_EQ(kvs_node_bind(node, 10 + r, locs.data(), locs.size(), &err), KVS_OK) << err.message;
  }
}

TEST(NodeContract, a_step_carries_the_leaders_batch_and_payload_in_its_one_collective) {
  Deployment s(2);
  s.options.carry_batch = true;
  s.options.max_payload_bytes = 64;
  std::vector<Rows> seen(2);
  std::vector<std::string> payloads(2);
  run_ranks(2, 20000, [&](int rank, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const uint64_t P = kvs_node_page(node);
    if (rank == 0) admit_two(node, P);
    ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;

    // Request 10 decodes one position; request 11 prefills a chunk of
    // 300 positions as one range row.
    std::vector<uint64_t> requests = {10, 11};
    std::vector<int64_t> positions = {(int64_t)(2 * P + 5), (int64_t)(P + 3)};
    std::vector<int64_t> lengths = {1, 300};
    std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
    const char text[] = "sampling: greedy; tokens 17 23";
    kvs_node_batch b = {sizeof b};
    b.n = 2;
    b.requests = requests.data();
    b.positions = positions.data();
    b.block_table = table.data();
    b.stride = 4;
    b.lengths = lengths.data();
    b.payload = text;
    b.payload_bytes = sizeof text;
    kvs_comm_stats before, after;
    kvs_comm_stats_get(comm, &before);
    kvs_node_step_result r = {sizeof r};
    ASSERT_EQ(kvs_node_step(node, rank == 0 ? &b : nullptr, &r, &err), KVS_OK) << err.message;
    kvs_comm_stats_get(comm, &after);
    EXPECT_EQ(after.collectives - before.collectives, 1u) << "the step is the one collective";
    ASSERT_EQ(r.n, 2u) << "rank " << rank << " stepped the leader's rows";
    EXPECT_EQ(std::vector<uint64_t>(r.requests, r.requests + 2), requests);
    EXPECT_EQ(std::vector<int64_t>(r.positions, r.positions + 2), positions);
    ASSERT_NE(r.lengths, nullptr);
    EXPECT_EQ(std::vector<int64_t>(r.lengths, r.lengths + 2), lengths);
    ASSERT_EQ(r.payload_bytes, sizeof text);
    payloads[rank].assign(static_cast<const char *>(r.payload), r.payload_bytes - 1);
    seen[rank] = copy_rows(r);

    // The range row's results are its last position's (P + 302): the same
    // as a one-position row there.
    std::vector<int64_t> last = {(int64_t)(2 * P + 5), (int64_t)(P + 302)};
    b.positions = last.data();
    b.lengths = nullptr;
    b.payload = nullptr;
    b.payload_bytes = 0;
    kvs_node_step_result one = {sizeof one};
    ASSERT_EQ(kvs_node_step(node, rank == 0 ? &b : nullptr, &one, &err), KVS_OK) << err.message;
    EXPECT_EQ(one.lengths, nullptr) << "one position a row";
    EXPECT_EQ(one.payload_bytes, 0u);
    EXPECT_TRUE(same(copy_rows(one), seen[rank]));
    kvs_node_destroy(node);
  });
  EXPECT_TRUE(same(seen[0], seen[1])) << "every rank derived the same ring contexts";
  EXPECT_EQ(payloads[0], "sampling: greedy; tokens 17 23");
  EXPECT_EQ(payloads[1], payloads[0]);
}

TEST(NodeContract, a_followers_batch_or_payload_is_refused_and_ranks_stay_in_step) {
  Deployment s(2);
  s.options.carry_batch = true;
  s.options.max_payload_bytes = 8;
  run_ranks(2, 20000, [&](int rank, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    uint64_t request = 1;
    int64_t position = 0;
    int32_t page = -1;
    char bytes[16] = {0};
    kvs_node_batch b = {sizeof b};
    b.n = 1;
    b.requests = &request;
    b.positions = &position;
    b.block_table = &page;
    b.stride = 1;
    if (rank == 0) {
      // Refused before anything collective: the follower waits for the
      // leader's next call.
      b.payload = bytes;
      b.payload_bytes = 9;
      EXPECT_EQ(kvs_node_step(node, &b, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(err.message, "a payload of 9 bytes, over max_payload_bytes 8"))
          << err.message;
      b.payload_bytes = 8;
      EXPECT_EQ(kvs_node_step(node, &b, nullptr, &err), KVS_OK) << err.message;
    } else {
      b.payload = bytes;
      b.payload_bytes = 1;
      EXPECT_EQ(kvs_node_step(node, &b, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(err.message, "is a follower: only the leader's batch carries a payload"))
          << err.message;
      b.payload = nullptr;
      b.payload_bytes = 0;
      EXPECT_EQ(kvs_node_step(node, &b, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(err.message, "pass no batch (NULL)")) << err.message;
      EXPECT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
    }
    kvs_node_capacity c = {sizeof c};
    ASSERT_EQ(kvs_node_capacity_of(node, &c, &err), KVS_OK);
    EXPECT_EQ(c.step, 1u) << "rank " << rank << ": one step ran, the refused ones did not";
    kvs_node_destroy(node);
  });
}

TEST(NodeContract, range_rows_are_refused_where_they_cannot_hold) {
  Deployment s(1);
  run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const int64_t P = (int64_t)kvs_node_page(node);
    uint64_t request = 3;
    int64_t position = P - 2, length = 0;
    int32_t table[2] = {0, 1};
    kvs_node_batch b = {sizeof b};
    b.n = 1;
    b.requests = &request;
    b.positions = &position;
    b.block_table = table;
    b.stride = 2;
    b.lengths = &length;
    EXPECT_EQ(kvs_node_step(node, &b, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "has length 0: a range row covers at least one position"))
        << err.message;
    length = P + 3;
    EXPECT_EQ(kvs_node_step(node, &b, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "to block 2, past its block row of 2 pages")) << err.message;
    length = P + 2;
    b.window_rows = true;
    EXPECT_EQ(kvs_node_step(node, &b, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "range rows (lengths) need full block rows")) << err.message;
    b.window_rows = false;
    EXPECT_EQ(kvs_node_step(node, &b, nullptr, &err), KVS_OK) << err.message;
    position = -1;
    length = -5;
    EXPECT_EQ(kvs_node_step(node, &b, nullptr, &err), KVS_OK) << "an idle row's length is unread";
    kvs_node_destroy(node);
  });
}

TEST(NodeContract, capacity_is_the_same_on_every_rank_and_says_what_the_leader_accepts) {
  Deployment s(2);
  std::vector<kvs_node_capacity> after(2);
  run_ranks(2, 20000, [&](int rank, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const uint64_t P = kvs_node_page(node);
    if (rank == 0) admit_two(node, P);
    ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
    kvs_node_capacity c = {sizeof c};
    ASSERT_EQ(kvs_node_capacity_of(node, &c, &err), KVS_OK) << err.message;
    after[rank] = c;
    EXPECT_EQ(c.running, 2u);
    EXPECT_EQ(c.journal_room, c.step_capacity) << "nothing pending after the step";
    EXPECT_EQ(c.result_depth, 2u);
    if (rank == 0) {
      // What the capacity promises holds: a bind of free + 1 window pages is
      // refused, one of exactly free succeeds, and both take what they say.
      int64_t slot = -1;
      ASSERT_EQ(kvs_node_admit(node, 20, &slot, &err), KVS_OK) << err.message;
      std::vector<int64_t> too_many = locations(16, c.free_window_pages + 1, P);
      EXPECT_EQ(kvs_node_bind(node, 20, too_many.data(), too_many.size(), &err), KVS_ERR_EXHAUSTED);
      kvs_node_capacity d = {sizeof d};
      ASSERT_EQ(kvs_node_capacity_of(node, &d, &err), KVS_OK);
      EXPECT_EQ(d.free_window_pages, c.free_window_pages) << "nothing taken";
      uint64_t fit =
          c.free_window_pages < d.journal_room - 1 ? c.free_window_pages : d.journal_room - 1;
      std::vector<int64_t> exactly = locations(16, fit, P);
      ASSERT_EQ(kvs_node_bind(node, 20, exactly.data(), exactly.size(), &err), KVS_OK)
          << err.message;
      ASSERT_EQ(kvs_node_capacity_of(node, &d, &err), KVS_OK);
      EXPECT_EQ(d.free_window_pages, c.free_window_pages - fit);
      EXPECT_EQ(d.running, 3u);
      EXPECT_EQ(d.journal_room, c.step_capacity - 1 - fit) << "an admit and a page a bind";
    }
    ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
    kvs_node_capacity e = {sizeof e};
    ASSERT_EQ(kvs_node_capacity_of(node, &e, &err), KVS_OK);
    if (rank == 1) after[1] = e;
    if (rank == 0) after[0] = e;
    c.size = 0;
    EXPECT_EQ(kvs_node_capacity_of(node, &c, &err), KVS_ERR_INVALID_ARGUMENT);
    kvs_node_destroy(node);
  });
  EXPECT_EQ(std::memcmp(&after[0], &after[1], sizeof after[0]), 0)
      << "free " << after[0].free_window_pages << " vs " << after[1].free_window_pages;
}

// admit_two's requests at a position each, as one batch.
struct TwoRows {
  std::vector<uint64_t> requests = {10, 11};
  std::vector<int64_t> positions;
  std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
  kvs_node_batch batch = {sizeof batch};

  explicit TwoRows(uint64_t P) : positions{(int64_t)(P + 1), (int64_t)(3 * P + 9)} {
    batch.n = 2;
    batch.requests = requests.data();
    batch.positions = positions.data();
    batch.block_table = table.data();
    batch.stride = 4;
  }
};

TEST(NodeContract, results_land_in_the_engines_buffers_and_wait_for_its_release) {
  Deployment s(1);
  s.options.max_batch = 4;
  s.options.explicit_release = true;
  run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    std::vector<int64_t> own(4, -7), prev(4, -7), csa(4, -7), hca(4, -7), ring;
    kvs_node_result_buffers buffers = {sizeof buffers, own.data(), prev.data(),
                                       nullptr,        csa.data(), hca.data()};
    s.options.result_buffers = &buffers;
    kvs_node_t node = nullptr;
    kvs_error err;
    EXPECT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "ring is NULL")) << err.message;
    ring.assign(4 * 128, -7);
    buffers.ring = ring.data();
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const uint64_t P = kvs_node_page(node);
    ASSERT_EQ(P, 128u);
    admit_two(node, P);
    TwoRows rows(P);
    kvs_node_batch &b = rows.batch;
    kvs_node_step_result r = {sizeof r};
    ASSERT_EQ(kvs_node_step(node, &b, &r, &err), KVS_OK) << err.message;
    EXPECT_EQ(r.own, own.data()) << "the engine's buffer, the same every step";
    EXPECT_EQ(r.ring, ring.data());
    EXPECT_GE(own[0], 0) << "a bound page's window slot";
    EXPECT_EQ(own[2], -7) << "rows past the step's untouched";

    // One buffer: step 1 would overwrite step 0's results, not released.
    EXPECT_EQ(kvs_node_step(node, &b, &r, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message,
                         "step 1 would overwrite step 0's results, which were not "
                         "released: call kvs_node_release(node, 0, stream)"))
        << err.message;
    EXPECT_EQ(kvs_node_release(node, 1, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "step 1 has not run")) << err.message;
    ASSERT_EQ(kvs_node_release(node, 0, nullptr, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_step(node, &b, &r, &err), KVS_OK) << err.message;
    EXPECT_EQ(r.step, 1u);
    EXPECT_EQ(kvs_node_release(node, 0, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "step 0's results are no longer held")) << err.message;
    kvs_node_capacity c = {sizeof c};
    ASSERT_EQ(kvs_node_capacity_of(node, &c, &err), KVS_OK);
    EXPECT_EQ(c.result_depth, 1u);
    kvs_node_destroy(node);
  });
}

// A node made from flags (as Python's) takes the engine's buffers after
// create, before its first step; a refused set changes nothing.
TEST(NodeContract, result_buffers_are_set_before_the_first_step_or_refused) {
  Deployment s(1);
  s.options.max_batch = 4;
  run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const uint64_t P = kvs_node_page(node);
    std::vector<int64_t> own(4, -7), prev(4, -7), csa(4, -7), hca(4, -7), ring(4 * P, -7);
    kvs_node_result_buffers buffers = {sizeof buffers, own.data(), prev.data(),
                                       nullptr,        csa.data(), hca.data()};
    kvs_node_capacity c = {sizeof c};
    EXPECT_EQ(kvs_node_set_result_buffers(node, &buffers, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "ring is NULL")) << err.message;
    ASSERT_EQ(kvs_node_capacity_of(node, &c, &err), KVS_OK);
    EXPECT_EQ(c.result_depth, 2u) << "a refused set changes nothing";
    buffers.ring = ring.data();
    ASSERT_EQ(kvs_node_set_result_buffers(node, &buffers, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_capacity_of(node, &c, &err), KVS_OK);
    EXPECT_EQ(c.result_depth, 1u);
    admit_two(node, P);
    TwoRows rows(P);
    kvs_node_batch &b = rows.batch;
    kvs_node_step_result r = {sizeof r};
    ASSERT_EQ(kvs_node_step(node, &b, &r, &err), KVS_OK) << err.message;
    EXPECT_EQ(r.own, own.data());
    EXPECT_EQ(r.ring, ring.data());
    EXPECT_GE(own[1], 0);
    EXPECT_EQ(kvs_node_set_result_buffers(node, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "before the node's first step (the next step is 1)"))
        << err.message;
    ASSERT_EQ(kvs_node_step(node, &b, &r, &err), KVS_OK) << err.message;
    EXPECT_EQ(r.own, own.data()) << "still the engine's buffers";
    kvs_node_destroy(node);
  });
}

TEST(NodeContract, the_nodes_own_results_stay_valid_until_the_step_after_next) {
  Deployment s(1);
  s.options.explicit_release = true;
  run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const uint64_t P = kvs_node_page(node);
    admit_two(node, P);
    uint64_t request = 10;
    int64_t positions[3] = {(int64_t)P + 1, (int64_t)(2 * P), (int64_t)(3 * P)};
    int32_t table[4] = {0, 1, 2, 3};
    kvs_node_batch b = {sizeof b};
    b.n = 1;
    b.requests = &request;
    b.block_table = table;
    b.stride = 4;
    kvs_node_step_result r[3] = {{sizeof r[0]}, {sizeof r[1]}, {sizeof r[2]}};
    std::vector<Rows> kept;
    for (int k = 0; k < 2; k++) {
      b.positions = &positions[k];
      ASSERT_EQ(kvs_node_step(node, &b, &r[k], &err), KVS_OK) << err.message;
      kept.push_back(copy_rows(r[k]));
    }
    // An overlap schedule: step 1 ran before the engine read step 0, whose
    // results are still there.
    EXPECT_TRUE(same(copy_rows(r[0]), kept[0]));
    EXPECT_NE(r[0].own, r[1].own) << "two buffers";
    b.positions = &positions[2];
    EXPECT_EQ(kvs_node_step(node, &b, &r[2], &err), KVS_ERR_INVALID_ARGUMENT)
        << "step 2 would overwrite step 0's results";
    ASSERT_EQ(kvs_node_release(node, 0, nullptr, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_step(node, &b, &r[2], &err), KVS_OK) << err.message;
    EXPECT_TRUE(same(copy_rows(r[1]), kept[1])) << "step 1's results outlive step 2";
    EXPECT_EQ(r[2].own, r[0].own);
    kvs_node_destroy(node);
  });
}

TEST(NodeContract, callers_built_against_0_7_sizes_still_step) {
  Deployment s(1);
  run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const uint64_t P = kvs_node_page(node);
    admit_two(node, P);
    uint64_t request = 11;
    int64_t position = (int64_t)(2 * P);
    int32_t table[4] = {4, 5, 6, 7};
    kvs_node_batch b;
    std::memset(&b, 0xab, sizeof b);  // 0.8's fields hold garbage a 0.7 caller never set
    b.size = offsetof(kvs_node_batch, lengths);
    b.n = 1;
    b.requests = &request;
    b.positions = &position;
    b.block_table = table;
    b.stride = 4;
    b.window_rows = false;
    kvs_node_step_result r;
    std::memset(&r, 0xcd, sizeof r);
    r.size = offsetof(kvs_node_step_result, requests);
    ASSERT_EQ(kvs_node_step(node, &b, &r, &err), KVS_OK) << err.message;
    EXPECT_EQ(r.n, 1u);
    EXPECT_EQ(r.size, offsetof(kvs_node_step_result, requests));
    const unsigned char *tail = reinterpret_cast<const unsigned char *>(&r) + r.size;
    EXPECT_EQ(tail[0], 0xcd) << "nothing written past a 0.7 result";
    b.size = 12;
    EXPECT_EQ(kvs_node_step(node, &b, &r, &err), KVS_ERR_INVALID_ARGUMENT);
    kvs_node_destroy(node);
  });
}

}  // namespace

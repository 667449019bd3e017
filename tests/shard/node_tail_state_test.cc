// An exact prefix hit through a retained tail on the host twin
// (tests/shard/tail_state_flow.h): a bound slot's rings start cleared and
// an exact hit's ring takes its tail's state, on one rank and two.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/shard/ranks.h"
#include "tests/shard/tail_state_flow.h"

namespace {

void run(int tp) {
  kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) {
    kvs_test::SmallPrefixNode s(tp, KVS_NODE_DEVICE_CPU, 0);
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_OK) << err.message;
    kvs_test::NodeMemory m;
    m.write = [](void *dst, const void *src, size_t n) { std::memcpy(dst, src, n); };
    m.read = [](void *dst, const void *src, size_t n) { std::memcpy(dst, src, n); };
    m.sync = [] {};
    kvs_test::tail_state_round_trip(node, m);
    kvs_node_destroy(node);
  });
}

}  // namespace

TEST(NodeTailState, an_exact_hits_ring_holds_its_tails_state_and_nothing_older) { run(1); }

TEST(NodeTailState, two_ranks_restore_their_own_rows) { run(2); }

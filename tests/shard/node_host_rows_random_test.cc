// The host tier's rows under a random serving mix on the host twin
// (tests/shard/host_rows_random.h): one and two ranks over loopback, bf16
// rows and fp8 pages.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "tests/shard/host_rows_random.h"
#include "tests/shard/ranks.h"

namespace {

// tp ranks serve `steps` requests over a host tier of host_slots slots.
void run(int tp, uint64_t seed, uint64_t host_slots, uint64_t steps,
         kvs_kv_dtype dtype = KVS_KV_BF16) {
  kvs_test::Barrier barrier(tp);
  kvs_test::Record record;
  kvs_test::run_ranks(tp, 60000, [&](int, kvs_comm_t comm) {
    kvs_test::SmallPrefixNode s(tp, KVS_NODE_DEVICE_CPU,
                                host_slots * kvs_test::slot_cost(comm, tp, dtype), dtype);
    kvs_test::NodeMemory m;
    m.write = [](void *dst, const void *src, size_t n) { std::memcpy(dst, src, n); };
    m.read = [](void *dst, const void *src, size_t n) { std::memcpy(dst, src, n); };
    m.sync = [] {};
    kvs_test::random_host_rows_rank(comm, s, m, seed, steps, &barrier, &record);
  });
}

}  // namespace

TEST(NodeHostRowsRandom, every_cached_page_holds_its_blocks_rows_through_spills_and_fetches) {
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    // A tier of 12 slots, so that blocks are let go as well.
    run(1, seed, 12, 400);
  }
}

TEST(NodeHostRowsRandom, two_ranks_move_their_own_rows_alike) { run(2, 7, 12, 300); }

// fp8 pages (payloads, then scales, each page padded to its quantum).
TEST(NodeHostRowsRandom, fp8_pages_hold_their_blocks_rows_through_spills_and_fetches) {
  run(1, 4, 12, 300, KVS_KV_FP8);
}

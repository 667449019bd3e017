// Prefill/decode between nodes whose tables are on GPUs, on the CPU
// stand-in for CUDA and NCCL (tests/standin) with the real CUDA and NCCL
// backends linked in: every link rank's node on its own device, the rows
// moving device to device over an NCCL link (bootstrapped over loopback),
// the headers, digests and verdicts staged through the link's device
// memory, each side's digests taken by the rows digest kernel on the
// engine's stream (the legacy default stream, where the test writes the
// rows, or a stream of the engine's own under the stand-in's lazy
// schedule, where only the transfer's own ordering puts the engine's
// writes and the step's row work before the link). Over seeded
// adversarial stream orders: every request's units
// arrive byte for byte (read back through the decode side's own
// descriptors), decode-side prefix reuse holds, a wrong page planted in one
// pool on one decode rank is refused by name on every decode rank, and the
// stand-in sees no use of freed or foreign memory.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "shard/comm_nccl.h"
#include "tests/shard/transfer_scenario.h"
#include "tests/standin/harness.h"
#include "tests/standin/standin.h"

namespace {

using namespace kvs_pd_test;
using kvs_standin_harness::expect_no_violations;
using kvs_standin_harness::reset;

// The engine's stream of this rank's thread: the legacy default stream
// (nullptr), or with own_streams a stream of its own that does not order
// itself with the legacy stream (cudaStreamNonBlocking, as the side
// streams of an engine like torch's), so nothing the NCCL backend does on
// the legacy stream runs the engine's queued work for it.
thread_local cudaStream_t engine = nullptr;
bool own_streams = false;

// Each link rank's NCCL communicator on its own device (NCCL refuses two
// ranks of one communicator on one GPU), the thread's device chosen first
// so the test's copies of the rows run there.
kvs_comm_t nccl_link(kvs_comm_t loopback, int link_rank) {
  EXPECT_EQ(cudaSetDevice(link_rank), cudaSuccess);
  engine = nullptr;
  if (own_streams) {
    EXPECT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
  }
  kvs_comm_t out = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_comm_nccl_bootstrap(loopback, link_rank, 4000, 8000, &out, &err), KVS_OK)
      << err.message;
  return out;
}

// The rows are device memory: the test writes and reads them as an engine
// would, with copies on the engine's stream (a write from pageable memory
// is staged and lands later; a read waits for it).
void rows_on_devices() {
  rows_memory().write = [](void *rows, const void *from, size_t bytes) {
    EXPECT_EQ(cudaMemcpyAsync(rows, from, bytes, cudaMemcpyHostToDevice, engine), cudaSuccess);
  };
  rows_memory().read = [](void *to, const void *rows, size_t bytes) {
    EXPECT_EQ(cudaMemcpyAsync(to, rows, bytes, cudaMemcpyDeviceToHost, engine), cudaSuccess);
  };
}

// progress_percent 0: queued work runs only when a call needs it, so the
// test's copies of the rows (and the journal's ring clears) stay pending on
// the legacy stream until something orders the node's work after them.
void run(Scenario sc, uint64_t seed, Totals *tot, unsigned progress_percent = 30,
         bool lazy = false) {
  kvs_standin::Config c;
  c.devices = sc.pd.np() + sc.pd.nd();
  c.seed = seed;
  c.progress_percent = progress_percent;
  c.lazy = lazy;
  kvs_standin::reset(c);
  rows_on_devices();
  sc.device_link = nccl_link;
  sc.engine_stream = [] { return static_cast<void *>(engine); };
  sc.link_timeout_ms = 8000;
  scenario(sc, tot);
  expect_no_violations();
  rows_memory() = RowsMemory{};
  own_streams = false;
}

TEST(NodeTransferStandin, device_rows_move_over_nccl_and_reuse_the_decode_sides_prefix) {
  for (uint64_t seed : {1ull, 2ull, 3ull, 4ull}) {
    Scenario sc;
    sc.pd = {{1, 1}, {1, 1}};
    sc.requests = 8;
    Totals tot;
    run(sc, seed, &tot, seed % 2 ? 0 : 30);
    EXPECT_EQ(tot.agreed.load(), 8u) << "seed " << seed;
    EXPECT_GT(tot.reused.load(), 0u) << "some turns reuse the decode side's prefix";
    std::printf(
        "seed %llu: tp1 -> tp1 on devices 0 and 1, %llu bytes moved, %llu reused, %llu "
        "units read back\n",
        (unsigned long long)seed, (unsigned long long)tot.moved.load(),
        (unsigned long long)tot.reused.load(), (unsigned long long)tot.checked.load());
  }
}

// The engine on streams of its own, not ordered with the legacy stream
// the NCCL backend stages through, and the stand-in's lazy schedule (a
// wait runs only the work it waits for, progress_percent 0): the engine's
// writes of the rows, and the step's ring clears and restores, stay
// queued until something orders work after them. The prefill side's
// sends read the rows only after the engine's writes landed, and the
// decode side's rows land only after the step's row work, so every
// request still agrees byte for byte.
TEST(NodeTransferStandin, an_engine_on_a_stream_of_its_own_is_ordered_before_the_link) {
  for (uint64_t seed : {21ull, 22ull}) {
    Scenario sc;
    sc.pd = {{1, 1}, {1, 1}};
    sc.requests = 8;
    own_streams = true;
    Totals tot;
    run(sc, seed, &tot, 0, true);
    EXPECT_EQ(tot.agreed.load(), 8u) << "seed " << seed;
    EXPECT_GT(tot.reused.load(), 0u) << "some turns reuse the decode side's prefix";
  }
}

// Layouts that differ, and the planted page below, with the engines on
// streams of their own under the lazy schedule too.
TEST(NodeTransferStandin, prefill_tp1_pp2_to_decode_tp2_on_four_devices) {
  Scenario sc;
  sc.pd = {{1, 2}, {2, 1}};
  sc.requests = 6;
  Totals tot;
  own_streams = true;
  run(sc, 5, &tot, 0, true);
  EXPECT_EQ(tot.agreed.load(), 2u * 6);
}

TEST(NodeTransferStandin, a_wrong_page_planted_in_device_memory_is_named_and_refused) {
  Scenario sc;
  sc.pd = {{1, 1}, {1, 1}};
  sc.requests = 4;
  sc.plant_request = 2;
  sc.plant_rank = 0;
  Totals tot;
  own_streams = true;
  run(sc, 7, &tot, 0, true);
  EXPECT_EQ(tot.refused.load(), 1u);
  EXPECT_EQ(tot.agreed.load(), 3u);
  EXPECT_NE(tot.planted_message.find("compressed_4 rows of layer"), std::string::npos)
      << tot.planted_message;
}

// Rows move where they live: a device node over a link that moves host
// memory, and a host node over NCCL, are refused before anything moves,
// naming why.
TEST(NodeTransferStandin, rows_and_link_in_different_memories_are_refused) {
  reset(2, 11);
  Pd pd{{1, 1}, {1, 1}};
  run_pd(pd, 4000, [&](bool prefill, int rank, int link_rank, kvs_comm_t comm, kvs_comm_t link) {
    (void)rank;
    kvs_geometry g = small_model();
    std::vector<uint64_t> budgets(8, 12ull << 20);
    kvs_node_options o = options_for(&g, &budgets, {1, 1}, true, KVS_STATE_RINGS_PER_REQUEST);
    o.device = KVS_NODE_DEVICE_CUDA;
    o.cuda_device = link_rank;
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &o, &node, &err), KVS_OK) << err.message;
    int peer = prefill ? 1 : 0;
    std::vector<int64_t> pages = {0};
    kvs_node_transfer t{sizeof t, 100, pages.data(), 1, 10, 0, &peer, 1, 0};
    kvs_status s = prefill ? kvs_node_send_request(node, link, &t, nullptr, &err)
                           : kvs_node_receive_request(node, link, &t, nullptr, &err);
    EXPECT_EQ(s, KVS_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(err.message).find("link moves host memory"), std::string::npos)
        << err.message;
    kvs_node_destroy(node);
    // A host node over the NCCL link.
    o.device = KVS_NODE_DEVICE_CPU;
    o.cuda_device = -1;
    ASSERT_EQ(kvs_node_create(comm, &o, &node, &err), KVS_OK) << err.message;
    kvs_comm_t nccl = nccl_link(link, link_rank);
    ASSERT_NE(nccl, nullptr);
    s = prefill ? kvs_node_send_request(node, nccl, &t, nullptr, &err)
                : kvs_node_receive_request(node, nccl, &t, nullptr, &err);
    EXPECT_EQ(s, KVS_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(err.message).find("moves only device memory"), std::string::npos)
        << err.message;
    kvs_comm_destroy(nccl);
    kvs_node_destroy(node);
  });
  expect_no_violations();
}

}  // namespace

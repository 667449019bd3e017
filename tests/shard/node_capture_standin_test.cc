// The node beside an engine that captures CUDA graphs and overlaps its
// steps, on the CPU stand-in for CUDA (tests/standin):
// - a step or release while the engine's stream captures is refused and
//   leaves the capture intact (CUDA would invalidate it: the node's wait
//   on its own event is not part of the capture);
// - another thread capturing in global mode (torch's default) is not
//   invalidated by the node's host waits, which run in relaxed mode;
// - an overlap schedule (the forward of step k read on another stream
//   after step k + 1 was called) reads step k's results, never k + 1's,
//   because step k + 1 waits on the device for the engine's release of
//   step k, into the engine's fixed result buffers.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "shard/node.h"
#include "tests/shard/host_rows_flow.h"
#include "tests/shard/ranks.h"
#include "tests/standin/harness.h"
#include "tests/standin/standin.h"

namespace {

using kvs_standin_harness::expect_no_violations;
using kvs_standin_harness::reset;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// A node on device 0 of the stand-in, one request of 4 pages admitted and
// bound; *node is NULL when create failed (the test has then failed).
void create_node(kvs_comm_t comm, kvs_test::SmallPrefixNode &s, kvs_node_t *node) {
  kvs_error err;
  ASSERT_EQ(kvs_node_create(comm, &s.o, node, &err), KVS_OK) << err.message;
  const uint64_t P = kvs_node_page(*node);
  int64_t slot = -1;
  ASSERT_EQ(kvs_node_admit(*node, 1, &slot, &err), KVS_OK) << err.message;
  std::vector<int64_t> locs;
  for (uint64_t i = 0; i < 4 * P; i++) locs.push_back((int64_t)i);
  ASSERT_EQ(kvs_node_bind(*node, 1, locs.data(), locs.size(), &err), KVS_OK) << err.message;
}

// Step k's one row: request 1 at a position that moves its window slot.
struct Row {
  uint64_t request = 1;
  int64_t position = 0;
  int32_t table[4] = {0, 1, 2, 3};
  kvs_node_batch batch;
  Row(uint64_t k, uint64_t P) {
    position = (int64_t)((k % 4) * P + k % P);
    batch = kvs_node_batch{sizeof batch};
    batch.n = 1;
    batch.requests = &request;
    batch.positions = &position;
    batch.block_table = table;
    batch.stride = 4;
  }
};

TEST(NodeCapture, a_step_or_release_on_a_capturing_engine_stream_is_refused_and_keeps_the_capture) {
  reset(1, 1);
  kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t engine = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
    kvs_test::SmallPrefixNode s(1, KVS_NODE_DEVICE_CUDA, 0);
    s.o.cuda_device = 0;
    s.o.stream = engine;
    kvs_node_t node = nullptr;
    create_node(comm, s, &node);
    if (node == nullptr) return;
    kvs_error err;
    Row row(0, kvs_node_page(node));
    ASSERT_EQ(kvs_node_step(node, &row.batch, nullptr, &err), KVS_OK) << err.message;
    ASSERT_EQ(cudaStreamBeginCapture(engine, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(kvs_node_step(node, &row.batch, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "the engine's stream is capturing a CUDA graph"))
        << err.message;
    EXPECT_EQ(kvs_node_release(node, 0, engine, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "is capturing a CUDA graph")) << err.message;
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(engine, &graph), cudaSuccess) << "the capture is intact";
    if (graph != nullptr) {
      EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    }
    kvs_node_capacity c = {sizeof c};
    ASSERT_EQ(kvs_node_capacity_of(node, &c, &err), KVS_OK);
    EXPECT_EQ(c.step, 1u) << "the refused step did not run";
    EXPECT_EQ(kvs_node_step(node, &row.batch, nullptr, &err), KVS_OK) << err.message;
    kvs_node_destroy(node);
    EXPECT_EQ(cudaStreamDestroy(engine), cudaSuccess);
  });
  expect_no_violations();
}

TEST(NodeCapture, another_threads_global_capture_survives_the_nodes_steps) {
  reset(1, 2);
  kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    kvs_test::SmallPrefixNode s(1, KVS_NODE_DEVICE_CUDA, 0);
    s.o.cuda_device = 0;
    s.o.no_stream = true;  // the node's own stream, its host waits on its own events
    kvs_node_t node = nullptr;
    create_node(comm, s, &node);
    if (node == nullptr) return;
    std::atomic<int> phase{0};
    cudaError_t ended = cudaErrorUnknown;
    std::thread capturer([&] {
      EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
      cudaStream_t other = nullptr;
      EXPECT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
      EXPECT_EQ(cudaStreamBeginCapture(other, cudaStreamCaptureModeGlobal), cudaSuccess);
      phase = 1;
      while (phase.load() != 2) std::this_thread::yield();
      cudaGraph_t graph = nullptr;
      ended = cudaStreamEndCapture(other, &graph);
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      (void)cudaStreamDestroy(other);
    });
    while (phase.load() != 1) std::this_thread::yield();
    kvs_error err;
    for (uint64_t k = 0; k < 6; k++) {
      Row row(k, kvs_node_page(node));
      ASSERT_EQ(kvs_node_step(node, &row.batch, nullptr, &err), KVS_OK) << err.message;
    }
    kvs_node_report report = {sizeof report};
    EXPECT_EQ(kvs_node_check(node, &report, &err), KVS_OK) << err.message;
    phase = 2;
    capturer.join();
    EXPECT_EQ(ended, cudaSuccess) << "the other thread's capture was invalidated";
    kvs_node_destroy(node);
  });
  expect_no_violations();
}

// The overlap schedule, over seeded orders of the stand-in's streams.
void overlap_rank(kvs_comm_t comm, uint64_t steps) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t engine = nullptr, forward = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&forward, cudaStreamNonBlocking), cudaSuccess);
  kvs_test::SmallPrefixNode s(1, KVS_NODE_DEVICE_CUDA, 0);
  s.o.cuda_device = 0;
  s.o.stream = engine;
  s.o.explicit_release = true;
  s.o.digest_steps = true;  // the node's own host copy of each step's results
  s.o.max_batch = 2;
  const size_t P = 128;
  int64_t *d = nullptr;
  ASSERT_EQ(cudaMalloc((void **)&d, (4 * 2 + 2 * P) * sizeof(int64_t)), cudaSuccess);
  kvs_node_result_buffers buffers = {sizeof buffers, d, d + 2, d + 4, d + 4 + 2 * P, d + 6 + 2 * P};
  s.o.result_buffers = &buffers;
  int64_t *seen = nullptr;  // what the forward read of each step's own[0], csa_loc[0]
  ASSERT_EQ(cudaMallocHost((void **)&seen, 2 * steps * sizeof(int64_t)), cudaSuccess);
  std::vector<int64_t> want(2 * steps, -9);
  kvs_node_t node = nullptr;
  create_node(comm, s, &node);
  if (node != nullptr) {
    ASSERT_EQ(kvs_node_page(node), P);
    kvs_error err;
    for (uint64_t k = 0; k < steps; k++) {
      Row row(k, P);
      kvs_node_step_result r = {sizeof r};
      ASSERT_EQ(kvs_node_step(node, &row.batch, &r, &err), KVS_OK)
          << "step " << k << ": " << err.message;
      ASSERT_EQ(r.own, buffers.own);
      const int64_t *own = nullptr, *prev = nullptr, *ring = nullptr, *csa = nullptr,
                    *hca = nullptr;
      size_t n = 0;
      ASSERT_EQ(kvs_node_host_ring(node, &own, &prev, &ring, &n, &err), KVS_OK);
      ASSERT_EQ(kvs_node_host_state(node, &csa, &hca, &n, &err), KVS_OK);
      want[2 * k] = own[0];
      want[2 * k + 1] = csa[0];
      // The forward of step k on its own stream, after the step's event;
      // its release says its reads are queued there.
      ASSERT_EQ(cudaStreamWaitEvent(forward, (cudaEvent_t)r.event, 0), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(&seen[2 * k], buffers.own, sizeof(int64_t), cudaMemcpyDeviceToHost,
                                forward),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(&seen[2 * k + 1], buffers.csa_loc, sizeof(int64_t),
                                cudaMemcpyDeviceToHost, forward),
                cudaSuccess);
      ASSERT_EQ(kvs_node_release(node, k, forward, &err), KVS_OK) << err.message;
    }
    ASSERT_EQ(cudaStreamSynchronize(forward), cudaSuccess);
    for (uint64_t k = 0; k < steps; k++) {
      EXPECT_EQ(seen[2 * k], want[2 * k]) << "step " << k << "'s own slot";
      EXPECT_EQ(seen[2 * k + 1], want[2 * k + 1]) << "step " << k << "'s ratio-4 location";
    }
  }
  kvs_node_destroy(node);
  EXPECT_EQ(cudaFreeHost(seen), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(forward), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(engine), cudaSuccess);
}

TEST(NodeCapture, an_overlap_schedule_reads_each_steps_results_after_the_next_step_ran) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(60), [](uint64_t) { return 1; },
      [](uint64_t seed) {
        reset(1, seed);
        kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) { overlap_rank(comm, 24); });
        expect_no_violations();
      });
}

}  // namespace

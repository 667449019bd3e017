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
#include "tests/shard/engine_flows.h"
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

using kvs_test::StepRow;

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
    kvs_test::create_bound_node(comm, s, &node);
    if (node == nullptr) return;
    kvs_error err;
    StepRow row(0, kvs_node_page(node));
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
    kvs_test::create_bound_node(comm, s, &node);
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
      StepRow row(k, kvs_node_page(node));
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
  kvs_test::ResultBuffers results(P);
  const kvs_node_result_buffers &buffers = results.b;
  s.o.result_buffers = &buffers;
  int64_t *seen = nullptr;  // what the forward read of each step's own[0], csa_loc[0]
  ASSERT_EQ(cudaMallocHost((void **)&seen, 2 * steps * sizeof(int64_t)), cudaSuccess);
  std::vector<int64_t> want(2 * steps, -9);
  kvs_node_t node = nullptr;
  kvs_test::create_bound_node(comm, s, &node);
  if (node != nullptr) {
    ASSERT_EQ(kvs_node_page(node), P);
    kvs_error err;
    for (uint64_t k = 0; k < steps; k++) {
      StepRow row(k, P);
      kvs_node_step_result r = {sizeof r};
      ASSERT_EQ(kvs_node_step(node, &row.batch, &r, &err), KVS_OK)
          << "step " << k << ": " << err.message;
      ASSERT_EQ(r.own, buffers.own);
      kvs_test::host_results(node, &want[2 * k], &want[2 * k + 1]);
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
    kvs_test::expect_each_steps_results(seen, want, steps);
  }
  kvs_node_destroy(node);
  EXPECT_EQ(cudaFreeHost(seen), cudaSuccess);
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

// The device check's engine cases (tests/shard/engine_flows.h; on a GPU
// in node_engine_gpu_test) over seeded stream orders: a forward captured
// once as a graph on the engine's stream reads each step's results from
// the engine's fixed buffers on every replay; an engine on the legacy
// default stream reads each step's results after the step's work.
TEST(NodeCapture, an_engine_graph_replayed_after_each_step_reads_that_steps_results) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(30), [](uint64_t) { return 1; },
      [](uint64_t seed) {
        reset(1, seed);
        kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
          kvs_test::results_in_an_engine_graph(comm, 24);
        });
        expect_no_violations();
      });
}

TEST(NodeCapture, an_engine_on_the_legacy_stream_reads_each_steps_results) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(30), [](uint64_t) { return 1; },
      [](uint64_t seed) {
        reset(1, seed);
        kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
          kvs_test::results_on_the_legacy_stream(comm, 24);
        });
        expect_no_violations();
      });
}

}  // namespace

// The stand-in's CUDA graphs: what a capture records runs again at every
// launch, in order, reading its inputs when it runs; what CUDA refuses
// during a capture (a host synchronisation, a pageable copy, an event from
// outside) is refused and invalidates the capture; the host-sync counters
// count what a graph may not hold. The step graph test relies on all of it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/standin/standin.h"

namespace {

kvs_standin::Config one_device(uint64_t seed) {
  kvs_standin::Config c;
  c.devices = 1;
  c.seed = seed;
  return c;
}

struct Buffers {
  int64_t *pinned = nullptr;  // host input
  int64_t *device = nullptr;
  int64_t *out = nullptr;  // pinned host output
  cudaStream_t stream = nullptr;
};

Buffers make() {
  Buffers b;
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaMallocHost(reinterpret_cast<void **>(&b.pinned), 64), cudaSuccess);
  EXPECT_EQ(cudaMallocHost(reinterpret_cast<void **>(&b.out), 64), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&b.device), 64), cudaSuccess);
  EXPECT_EQ(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking), cudaSuccess);
  return b;
}

}  // namespace

TEST(StandinGraph, a_captured_copy_chain_runs_at_every_launch_with_the_inputs_of_that_time) {
  for (uint64_t seed = 1; seed <= 20; seed++) {
    kvs_standin::reset(one_device(seed));
    Buffers b = make();
    ASSERT_EQ(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(b.device, b.pinned, 64, cudaMemcpyHostToDevice, b.stream),
              cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(b.device, 0x7f, 8, b.stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(b.out, b.device, 64, cudaMemcpyDeviceToHost, b.stream), cudaSuccess);
    cudaStreamCaptureStatus status;
    ASSERT_EQ(cudaStreamIsCapturing(b.stream, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(b.stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(b.stream), cudaSuccess);
    EXPECT_EQ(kvs_standin::stats().ops, 0u) << "a capture queues nothing";
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int64_t round = 1; round <= 3; round++) {
      for (int i = 0; i < 8; i++) b.pinned[i] = round * 100 + i;
      ASSERT_EQ(cudaGraphLaunch(exec, b.stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(b.stream), cudaSuccess);
      EXPECT_EQ(b.out[0], 0x7f7f7f7f7f7f7f7fll);
      for (int i = 1; i < 8; i++) EXPECT_EQ(b.out[i], round * 100 + i) << "round " << round;
    }
    EXPECT_EQ(kvs_standin::stats().graph_launches, 3u);
    EXPECT_EQ(kvs_standin::stats().captures, 1u);
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_TRUE(kvs_standin::violations().empty());
  }
}

TEST(StandinGraph, a_host_synchronisation_during_a_capture_invalidates_it) {
  kvs_standin::reset(one_device(3));
  Buffers b = make();
  std::vector<int64_t> pageable(8, 1);
  struct Case {
    const char *what;
    cudaError_t (*call)(Buffers &, std::vector<int64_t> &);
  };
  const Case cases[] = {
      {"cudaStreamSynchronize",
       [](Buffers &x, std::vector<int64_t> &) { return cudaStreamSynchronize(x.stream); }},
      {"cudaStreamQuery",
       [](Buffers &x, std::vector<int64_t> &) { return cudaStreamQuery(x.stream); }},
      {"cudaDeviceSynchronize",
       [](Buffers &, std::vector<int64_t> &) { return cudaDeviceSynchronize(); }},
      {"a pageable copy",
       [](Buffers &x, std::vector<int64_t> &p) {
         return cudaMemcpyAsync(x.device, p.data(), 64, cudaMemcpyHostToDevice, x.stream);
       }},
  };
  for (const Case &c : cases) {
    ASSERT_EQ(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(b.device, 0, 8, b.stream), cudaSuccess);
    EXPECT_EQ(c.call(b, pageable), cudaErrorStreamCaptureUnsupported) << c.what;
    cudaStreamCaptureStatus status;
    ASSERT_EQ(cudaStreamIsCapturing(b.stream, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated) << c.what;
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(b.stream, &graph), cudaErrorStreamCaptureInvalidated) << c.what;
    EXPECT_EQ(graph, nullptr);
  }
  // An event recorded outside the capture cannot be waited on inside it.
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, other), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(b.stream, event, 0), cudaErrorStreamCaptureIsolation);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(b.stream, &graph), cudaErrorStreamCaptureInvalidated);
}

TEST(StandinGraph, host_syncs_count_what_waits_on_a_stream_and_nothing_else) {
  kvs_standin::reset(one_device(5));
  Buffers b = make();
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  std::vector<int64_t> pageable(8, 1);
  cudaEvent_t on_b = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&on_b, cudaEventDisableTiming), cudaSuccess);
  // Asynchronous pinned copies, memsets and event records: no host wait.
  ASSERT_EQ(cudaMemcpyAsync(b.device, b.pinned, 64, cudaMemcpyHostToDevice, b.stream), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(b.device, 0, 8, b.stream), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(on_b, b.stream), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(other, on_b, 0), cudaSuccess);
  EXPECT_EQ(kvs_standin::host_syncs(b.stream), 0u);
  // Each of these waits on (or polls) b's work: one count each.
  ASSERT_EQ(cudaEventSynchronize(on_b), cudaSuccess);
  (void)cudaEventQuery(on_b);
  ASSERT_EQ(cudaStreamSynchronize(b.stream), cudaSuccess);
  (void)cudaStreamQuery(b.stream);
  ASSERT_EQ(cudaMemcpyAsync(b.device, pageable.data(), 64, cudaMemcpyHostToDevice, b.stream),
            cudaSuccess);
  EXPECT_EQ(kvs_standin::host_syncs(b.stream), 5u);
  EXPECT_EQ(kvs_standin::host_syncs(other), 0u);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(kvs_standin::host_syncs(b.stream), 6u);
  EXPECT_EQ(kvs_standin::host_syncs(other), 1u);
}

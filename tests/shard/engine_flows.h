// An engine's reads of the node's results and its host tier at production
// sizes, as flows over the CUDA runtime API: the real runtime on a GPU
// (node_engine_gpu_test, which tools/device-check.sh runs) and the CPU
// stand-in (node_capture_standin_test, node_standin_test) run the same
// code. Issue 33's defects, each as the case that would have caught it:
// - results_in_an_engine_graph: the engine's forward, captured once as a
//   CUDA graph on its stream, reads the node's results from the engine's
//   fixed buffers (result_buffers) on every replay, and reads each step's;
// - results_on_the_legacy_stream: the engine on stream 0 (torch's default
//   stream) reads each step's results after `done`, never a later step's;
// - host_rows_at_carve: the host tier's spill and fetch at a carve whose
//   ratio-4 layer stride is past the device's largest 2D pitch.
#ifndef KVS_TESTS_SHARD_ENGINE_FLOWS_H
#define KVS_TESTS_SHARD_ENGINE_FLOWS_H

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "shard/node.h"
#include "tests/shard/engine_memory.h"
#include "tests/shard/host_rows_flow.h"

namespace kvs_test {

// A node on device 0, one request of 4 pages admitted and bound; *node is
// NULL when create failed (the test has then failed).
inline void create_bound_node(kvs_comm_t comm, SmallPrefixNode &s, kvs_node_t *node) {
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
struct StepRow {
  uint64_t request = 1;
  int64_t position = 0;
  int32_t table[4] = {0, 1, 2, 3};
  kvs_node_batch batch;
  StepRow(uint64_t k, uint64_t P) {
    position = (int64_t)((k % 4) * P + k % P);
    batch = kvs_node_batch{sizeof batch};
    batch.n = 1;
    batch.requests = &request;
    batch.positions = &position;
    batch.block_table = table;
    batch.stride = 4;
  }
};

// The engine's result buffers in one device allocation (max_batch 2, P
// ring slots a row): own, prev, ring, csa_loc, hca_loc.
struct ResultBuffers {
  int64_t *d = nullptr;
  kvs_node_result_buffers b = {sizeof b};
  explicit ResultBuffers(size_t P) {
    EXPECT_EQ(cudaMalloc((void **)&d, (4 * 2 + 2 * P) * sizeof(int64_t)), cudaSuccess);
    b = {sizeof b, d, d + 2, d + 4, d + 4 + 2 * P, d + 6 + 2 * P};
  }
  ~ResultBuffers() { EXPECT_EQ(cudaFree(d), cudaSuccess); }
  ResultBuffers(const ResultBuffers &) = delete;
  ResultBuffers &operator=(const ResultBuffers &) = delete;
};

// What the host twin (digest_steps) says step k gave row 0: own, csa_loc.
inline void host_results(kvs_node_t node, int64_t *own0, int64_t *csa0) {
  const int64_t *own = nullptr, *prev = nullptr, *ring = nullptr, *csa = nullptr, *hca = nullptr;
  size_t n = 0;
  kvs_error err;
  ASSERT_EQ(kvs_node_host_ring(node, &own, &prev, &ring, &n, &err), KVS_OK) << err.message;
  ASSERT_EQ(kvs_node_host_state(node, &csa, &hca, &n, &err), KVS_OK) << err.message;
  *own0 = own[0];
  *csa0 = csa[0];
}

// Every step's reads against the host twin's, and the steps' own slots
// not all alike (else a stale read could not show).
inline void expect_each_steps_results(const int64_t *seen, const std::vector<int64_t> &want,
                                      uint64_t steps) {
  std::set<int64_t> owns;
  for (uint64_t k = 0; k < steps; k++) {
    owns.insert(want[2 * k]);
    EXPECT_EQ(seen[2 * k], want[2 * k]) << "step " << k << "'s own slot";
    EXPECT_EQ(seen[2 * k + 1], want[2 * k + 1]) << "step " << k << "'s ratio-4 location";
  }
  EXPECT_GT(owns.size(), 1u) << "every step gave the same own slot: the test shows nothing";
}

// The forward as an engine captures it once: on its stream, a graph that
// copies row 0's own slot and ratio-4 location out of the engine's fixed
// result buffers into `mirror` (the engine's own device memory), replayed
// after every step; the mirror is copied to the host after each replay.
// The node steps eagerly between replays, on the same engine stream.
inline void results_in_an_engine_graph(kvs_comm_t comm, uint64_t steps) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t engine = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
  SmallPrefixNode s(1, KVS_NODE_DEVICE_CUDA, 0);
  s.o.cuda_device = 0;
  s.o.stream = engine;
  s.o.digest_steps = true;  // the host twin's copy of each step's results
  s.o.max_batch = 2;
  const size_t P = 128;
  ResultBuffers buffers(P);
  s.o.result_buffers = &buffers.b;
  int64_t *mirror = nullptr, *seen = nullptr;
  ASSERT_EQ(cudaMalloc((void **)&mirror, 2 * sizeof(int64_t)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost((void **)&seen, 2 * steps * sizeof(int64_t)), cudaSuccess);
  std::vector<int64_t> want(2 * steps, -9);
  kvs_node_t node = nullptr;
  create_bound_node(comm, s, &node);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (node != nullptr) {
    ASSERT_EQ(kvs_node_page(node), P);
    // Captured before the first step: the buffers' addresses are the
    // engine's, fixed, whatever the step.
    ASSERT_EQ(cudaStreamBeginCapture(engine, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(
        cudaMemcpyAsync(mirror, buffers.b.own, sizeof(int64_t), cudaMemcpyDeviceToDevice, engine),
        cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(mirror + 1, buffers.b.csa_loc, sizeof(int64_t),
                              cudaMemcpyDeviceToDevice, engine),
              cudaSuccess);
    ASSERT_EQ(cudaStreamEndCapture(engine, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    kvs_error err;
    for (uint64_t k = 0; k < steps; k++) {
      StepRow row(k, P);
      kvs_node_step_result r = {sizeof r};
      ASSERT_EQ(kvs_node_step(node, &row.batch, &r, &err), KVS_OK)
          << "step " << k << ": " << err.message;
      ASSERT_EQ(r.own, buffers.b.own) << "the engine's buffer, the same every step";
      host_results(node, &want[2 * k], &want[2 * k + 1]);
      ASSERT_EQ(cudaGraphLaunch(exec, engine), cudaSuccess) << "replay " << k;
      ASSERT_EQ(cudaMemcpyAsync(&seen[2 * k], mirror, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost,
                                engine),
                cudaSuccess);
    }
    ASSERT_EQ(cudaStreamSynchronize(engine), cudaSuccess);
    expect_each_steps_results(seen, want, steps);
  }
  kvs_node_destroy(node);
  if (exec != nullptr) {
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  }
  if (graph != nullptr) {
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  }
  EXPECT_EQ(cudaFreeHost(seen), cudaSuccess);
  EXPECT_EQ(cudaFree(mirror), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(engine), cudaSuccess);
}

// The engine on the legacy default stream (options.stream NULL, as
// torch's default stream gives it): after each step it copies row 0's own
// slot and ratio-4 location out of the node's own (double-buffered)
// results on stream 0, without waiting; every copy reads its step's.
inline void results_on_the_legacy_stream(kvs_comm_t comm, uint64_t steps) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  SmallPrefixNode s(1, KVS_NODE_DEVICE_CUDA, 0);
  s.o.cuda_device = 0;
  s.o.stream = nullptr;  // torch.cuda.current_stream().cuda_stream on the default stream
  s.o.digest_steps = true;
  int64_t *seen = nullptr;
  ASSERT_EQ(cudaMallocHost((void **)&seen, 2 * steps * sizeof(int64_t)), cudaSuccess);
  std::vector<int64_t> want(2 * steps, -9);
  kvs_node_t node = nullptr;
  create_bound_node(comm, s, &node);
  if (node != nullptr) {
    kvs_error err;
    for (uint64_t k = 0; k < steps; k++) {
      StepRow row(k, kvs_node_page(node));
      kvs_node_step_result r = {sizeof r};
      ASSERT_EQ(kvs_node_step(node, &row.batch, &r, &err), KVS_OK)
          << "step " << k << ": " << err.message;
      host_results(node, &want[2 * k], &want[2 * k + 1]);
      ASSERT_EQ(
          cudaMemcpyAsync(&seen[2 * k], r.own, sizeof(int64_t), cudaMemcpyDeviceToHost, nullptr),
          cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(&seen[2 * k + 1], r.csa_loc, sizeof(int64_t),
                                cudaMemcpyDeviceToHost, nullptr),
                cudaSuccess);
    }
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    expect_each_steps_results(seen, want, steps);
  }
  kvs_node_destroy(node);
  EXPECT_EQ(cudaFreeHost(seen), cudaSuccess);
}

// The host tier's round trip (host_rows_flow.h) on one rank whose carve
// is `carve` bytes, on an engine stream. The carve's ratio-4 layer stride
// must be past the device's largest 2D pitch, so the spills and fetches
// take the per-run fallback; it is printed with the pitch. A device with
// less free memory than the carve and 2 GiB more skips, saying what it has.
inline void host_rows_at_carve(kvs_comm_t comm, uint64_t carve) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  const uint64_t need = carve + (2ull << 30);
  if (free_b < need) {
    GTEST_SKIP() << "device 0 has " << free_b << " bytes free of " << total_b << "; a carve of "
                 << carve << " bytes needs " << need;
  }
  int max_pitch = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, 0), cudaSuccess);
  cudaStream_t engine = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
  SmallPrefixNode s(1, KVS_NODE_DEVICE_CUDA, 4ull << 20);
  s.budgets.assign(s.budgets.size(), carve);
  s.o.budget_per_gpu = s.budgets.data();
  s.o.cuda_device = 0;
  s.o.stream = engine;
  kvs_node_t node = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_OK) << err.message;
  if (node != nullptr) {
    uint64_t stride = 0;
    for (size_t i = 0; i < kvs_node_view_count(node); i++) {
      kvs_node_view v{};
      v.size = sizeof v;
      ASSERT_EQ(kvs_node_view_at(node, i, &v, &err), KVS_OK) << err.message;
      if (std::string(v.name) == "compressed_4") {
        stride = (uint64_t)v.strides[0] * kvs_view_dtype_bytes(v.dtype);
      }
    }
    std::printf("carve %llu bytes: ratio-4 layer stride %llu bytes, device max pitch %d\n",
                (unsigned long long)kvs_node_layout(node)->total_bytes, (unsigned long long)stride,
                max_pitch);
    EXPECT_GT(stride, (uint64_t)max_pitch) << "the stride fits the pitch: no fallback to test";
    EngineMemory memory(engine);
    host_rows_round_trip(node, memory.memory());
  }
  kvs_node_destroy(node);
  EXPECT_EQ(cudaStreamDestroy(engine), cudaSuccess);
}

}  // namespace kvs_test

#endif  // KVS_TESTS_SHARD_ENGINE_FLOWS_H

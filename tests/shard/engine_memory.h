// The node's device memory as an engine reaches it (tests/shard/host_rows_flow.h's
// NodeMemory over CUDA, the real runtime or the stand-in): writes and reads
// queued on the engine's stream from and to pinned staging, without
// waiting, so only copies of the node's that are ordered on that stream
// see the engine's bytes. The staging lives until the object goes.
#ifndef KVS_TESTS_SHARD_ENGINE_MEMORY_H
#define KVS_TESTS_SHARD_ENGINE_MEMORY_H

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/shard/host_rows_flow.h"

namespace kvs_test {

class EngineMemory {
 public:
  explicit EngineMemory(cudaStream_t engine) : engine_(engine) {}
  ~EngineMemory() {
    (void)cudaStreamSynchronize(engine_);
    for (void *p : pinned_) EXPECT_EQ(cudaFreeHost(p), cudaSuccess);
  }
  EngineMemory(const EngineMemory &) = delete;
  EngineMemory &operator=(const EngineMemory &) = delete;

  NodeMemory memory() {
    NodeMemory m;
    m.write = [this](void *dst, const void *src, size_t n) {
      void *p = staged(n);
      std::memcpy(p, src, n);
      EXPECT_EQ(cudaMemcpyAsync(dst, p, n, cudaMemcpyHostToDevice, engine_), cudaSuccess);
    };
    m.read = [this](void *dst, const void *src, size_t n) {
      void *p = staged(n);
      EXPECT_EQ(cudaMemcpyAsync(p, src, n, cudaMemcpyDeviceToHost, engine_), cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(engine_), cudaSuccess);
      std::memcpy(dst, p, n);
    };
    m.sync = [this] { EXPECT_EQ(cudaStreamSynchronize(engine_), cudaSuccess); };
    return m;
  }

 private:
  void *staged(size_t n) {
    void *p = nullptr;
    EXPECT_EQ(cudaMallocHost(&p, n), cudaSuccess);
    pinned_.push_back(p);
    return p;
  }

  cudaStream_t engine_;
  std::vector<void *> pinned_;
};

// One rank of tests/shard/host_rows_flow.h's round trip on CUDA device 0
// (every rank on it), a node of tp ranks with an engine stream of its own
// through which the rows are written and read; with legacy, the legacy
// default stream (options.stream NULL, torch's default stream).
inline void host_rows_on_engine_stream(kvs_comm_t comm, int tp, bool legacy = false) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t engine = nullptr;
  if (!legacy) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
  }
  SmallPrefixNode s(tp, KVS_NODE_DEVICE_CUDA, 4ull << 20);
  s.o.cuda_device = 0;
  s.o.stream = engine;
  kvs_node_t node = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_OK) << err.message;
  if (node != nullptr) {
    EngineMemory memory(engine);
    host_rows_round_trip(node, memory.memory());
  }
  kvs_node_destroy(node);
  if (engine != nullptr) {
    EXPECT_EQ(cudaStreamDestroy(engine), cudaSuccess);
  }
}

}  // namespace kvs_test

#endif  // KVS_TESTS_SHARD_ENGINE_MEMORY_H

// The NCCL backend with the real CUDA runtime and NCCL. It builds and links
// everywhere; what needs a GPU skips on a machine without one, naming why
// (tools/device-check.sh runs it at one rank on a GPU). Without a device,
// creation must still fail cleanly on every rank, saying why. The stand-in
// test (nccl_standin_test) covers many ranks and the failure paths on CPU.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "core/window_pool.h"
#include "plan/device_layout.h"
#include "backends/cuda/device_tables.h"
#include "shard/comm.h"
#include "backends/nccl/comm_nccl.h"
#include "shard/comm_self.h"
#include "backends/cuda/cuda_status.h"
#include "shard/shard.h"

namespace {

std::string why_no_device() {
  int count = 0;
  kvs_error why;
  return kvs_cuda_device_count(&count, &why) == KVS_OK ? std::string() : std::string(why.message);
}

}  // namespace

TEST(CommNccl, creation_needs_a_bootstrap_or_a_communicator_to_adopt) {
  kvs_comm_t comm = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_comm_nccl_create(nullptr, nullptr, &comm, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message,
               "creating an nccl communicator needs a bootstrap communicator to exchange the "
               "unique id (or pass an existing ncclComm_t to adopt)");
  kvs_comm_nccl_options o = KVS_COMM_NCCL_OPTIONS_INIT;
  o.timeout_ms = 0;
  EXPECT_EQ(kvs_comm_nccl_create(&o, nullptr, &comm, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "timeout_ms is 0; every wait needs a deadline (> 0)");
}

TEST(CommNccl, without_a_device_creation_fails_saying_why) {
  std::string why = why_no_device();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is visible; the no-device path is not reachable";
  kvs_comm_t boot = nullptr, comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&boot, &err), KVS_OK);
  EXPECT_EQ(kvs_comm_nccl_create(nullptr, boot, &comm, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_EQ(std::string(err.message), "rank 0: " + why);
  EXPECT_EQ(std::string(err.message).rfind("rank 0: no CUDA device visible: cudaGetDeviceCount", 0),
            0u)
      << err.message;
  EXPECT_EQ(comm, nullptr);
  kvs_comm_destroy(boot);
}

TEST(CommNccl, a_host_communicator_has_no_stream) {
  kvs_comm_t boot = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&boot, &err), KVS_OK);
  cudaStream_t stream;
  EXPECT_EQ(kvs_comm_nccl_stream(boot, &stream, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "communicator is a 'self' backend, not nccl; it has no CUDA stream");
  kvs_comm_destroy(boot);
}

// One rank on one device: collectives through device buffers, and a shard
// stepping over them (the device buffer is what a table kernel consumes).
TEST(CommNccl, one_rank_moves_device_buffers_and_drives_a_shard) {
  std::string why = why_no_device();
  if (!why.empty()) GTEST_SKIP() << why;
  kvs_comm_t boot = nullptr, comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&boot, &err), KVS_OK);
  kvs_comm_nccl_options o = KVS_COMM_NCCL_OPTIONS_INIT;
  o.timeout_ms = 20000;
  ASSERT_EQ(kvs_comm_nccl_create(&o, boot, &comm, &err), KVS_OK) << err.message;
  EXPECT_STREQ(kvs_comm_backend(comm), "nccl");
  cudaStream_t stream = nullptr;
  int device = -1;
  ASSERT_EQ(kvs_comm_nccl_stream(comm, &stream, &device, &err), KVS_OK);
  EXPECT_NE(stream, nullptr);
  EXPECT_GE(device, 0);
  kvs_comm_buffer b;
  ASSERT_EQ(kvs_comm_buffer_alloc(comm, 64, &b, &err), KVS_OK) << err.message;
  EXPECT_NE(b.device, nullptr);
  // A one-rank group still stages device buffers: the device copy is what
  // a table kernel reads.
  static_cast<uint64_t *>(b.host)[0] = 41;
  EXPECT_EQ(kvs_comm_broadcast(comm, &b, 8, 0, &err), KVS_OK) << err.message;
  uint64_t on_device = 0;
  ASSERT_EQ(cudaMemcpy(&on_device, b.device, 8, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(on_device, 41u);
  EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 1, KVS_COMM_SUM, &err), KVS_OK) << err.message;
  EXPECT_EQ(static_cast<uint64_t *>(b.host)[0], 41u);
  EXPECT_EQ(kvs_comm_barrier(comm, &err), KVS_OK) << err.message;
  kvs_comm_buffer_free(comm, &b);

  // A shard over the device backend: the hook gets the step's entries in
  // device memory too, identical to the host copy.
  const uint32_t ratios[] = {0, 4, 128, 4};
  kvs_geometry g;
  ASSERT_EQ(kvs_geometry_init(&g, 8, 4, 4, ratios, 4, &err), KVS_OK);
  kvs_pool_sizes sizes;
  ASSERT_EQ(kvs_pool_sizes_compute(64, &g, 0.5, 128, 12, &sizes, &err), KVS_OK);
  struct Seen {
    size_t n = 0;
    bool device_matches = false;
  } seen;
  kvs_shard_options so = KVS_SHARD_OPTIONS_INIT;
  so.max_running = 2;
  so.on_apply_ctx = &seen;
  so.on_apply = [](void *ctx, const kvs_shard_apply_batch *batch, kvs_error *) -> kvs_status {
    auto *s = static_cast<Seen *>(ctx);
    s->n = batch->n;
    std::vector<kvs_journal_entry> copy(batch->n);
    s->device_matches =
        batch->device_entries != nullptr &&
        cudaMemcpy(copy.data(), batch->device_entries, batch->n * sizeof(kvs_journal_entry),
                   cudaMemcpyDeviceToHost) == cudaSuccess &&
        std::memcmp(copy.data(), batch->entries, batch->n * sizeof(kvs_journal_entry)) == 0;
    return KVS_OK;
  };
  kvs_shard_t shard = nullptr;
  ASSERT_EQ(kvs_shard_create(comm, &sizes, &so, &shard, &err), KVS_OK) << err.message;
  std::vector<int64_t> locs(2 * 128);
  for (size_t i = 0; i < locs.size(); i++) locs[i] = int64_t(3 * 128 + i);
  ASSERT_EQ(kvs_window_pool_alloc(kvs_shard_pool(shard), locs.data(), locs.size(), nullptr, &err),
            KVS_OK);
  ASSERT_EQ(kvs_shard_step(shard, 0, nullptr, &err), KVS_OK) << err.message;
  EXPECT_EQ(seen.n, 2u);
  EXPECT_TRUE(seen.device_matches);
  kvs_shard_destroy(shard);
  kvs_comm_destroy(comm);
  kvs_comm_destroy(boot);
}

// ---- on a GPU: the contracts issue 17 added, with the real runtime and NCCL ----

namespace {

// The thread's driver context (NULL: none), through the runtime.
CUcontext current_context() {
  void *get = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return reinterpret_cast<CUcontext>(-1);
  }
  CUcontext ctx = nullptr;
  reinterpret_cast<CUresult (*)(CUcontext *)>(get)(&ctx);
  return ctx;
}

}  // namespace

// An engine's own communicator (one rank): adopted, used, given back alive
// and on the caller's device.
TEST(CommNccl, adopt_mode_leaves_the_engines_communicator_and_device_alone) {
  std::string why = why_no_device();
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t engine = nullptr;
  ASSERT_EQ(ncclCommInitRank(&engine, 1, id, 0), ncclSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  kvs_comm_nccl_options o = KVS_COMM_NCCL_OPTIONS_INIT;
  o.comm = engine;
  o.stream = stream;
  o.timeout_ms = 20000;
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_nccl_create(&o, nullptr, &comm, &err), KVS_OK) << err.message;
  kvs_comm_buffer b;
  ASSERT_EQ(kvs_comm_buffer_alloc(comm, 8, &b, &err), KVS_OK) << err.message;
  static_cast<uint64_t *>(b.host)[0] = 7;
  EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 1, KVS_COMM_MAX, &err), KVS_OK) << err.message;
  EXPECT_EQ(static_cast<uint64_t *>(b.host)[0], 7u);
  kvs_comm_buffer_free(comm, &b);
  kvs_comm_destroy(comm);
  int count = 0;
  EXPECT_EQ(ncclCommCount(engine, &count), ncclSuccess) << "the engine's comm is still alive";
  EXPECT_EQ(count, 1);
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(ncclCommDestroy(engine), ncclSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// A thread that never chose a device uses the backend and is left without
// a context; a consumer on its own stream applies the broadcast's device
// entries to device tables, ordered by kvs_comm_nccl_reads_done, and the
// tables follow the host mirror.
TEST(CommNccl, a_consumer_stream_and_a_thread_without_a_device) {
  std::string why = why_no_device();
  if (!why.empty()) GTEST_SKIP() << why;
  std::thread([] {
    ASSERT_EQ(current_context(), nullptr) << "a fresh thread has no context";
    kvs_comm_t boot = nullptr, comm = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_comm_self_create(&boot, &err), KVS_OK);
    kvs_comm_nccl_options o = KVS_COMM_NCCL_OPTIONS_INIT;
    o.timeout_ms = 20000;
    ASSERT_EQ(kvs_comm_nccl_create(&o, boot, &comm, &err), KVS_OK) << err.message;
    EXPECT_EQ(current_context(), nullptr) << "creation left the thread on a device";
    int device = -1;
    cudaStream_t comm_stream;
    ASSERT_EQ(kvs_comm_nccl_stream(comm, &comm_stream, &device, &err), KVS_OK);

    const uint32_t ratios[] = {0, 4, 128, 4};
    kvs_geometry g;
    ASSERT_EQ(kvs_geometry_init(&g, 8, 4, 4, ratios, 4, &err), KVS_OK);
    kvs_pool_sizes sizes;
    ASSERT_EQ(kvs_pool_sizes_compute(64, &g, 0.5, 128, 24, &sizes, &err), KVS_OK);
    kvs_device_layout layout;
    ASSERT_EQ(kvs_device_layout_build(&g, 0, 4, nullptr, &sizes, nullptr, &layout, &err), KVS_OK);
    struct Consumer {
      kvs_comm_t comm;
      kvs_device_tables_t tables = nullptr;
      cudaStream_t stream = nullptr;
    } c{comm};
    ASSERT_EQ(kvs_device_tables_create(device, &layout, &c.tables, &err), KVS_OK) << err.message;
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);  // the test's own stream, on that device
    ASSERT_EQ(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), cudaSuccess);
    kvs_shard_options so = KVS_SHARD_OPTIONS_INIT;
    so.max_running = 2;
    so.step_capacity = 32;
    so.on_apply_ctx = &c;
    so.on_apply = [](void *ctx, const kvs_shard_apply_batch *batch, kvs_error *e) -> kvs_status {
      auto *k = static_cast<Consumer *>(ctx);
      kvs_status s = kvs_device_tables_apply_journal_device(
          k->tables, static_cast<const kvs_journal_entry *>(batch->device_entries), batch->n,
          k->stream, e);
      return s == KVS_OK ? kvs_comm_nccl_reads_done(k->comm, k->stream, e) : s;
    };
    kvs_shard_t shard = nullptr;
    ASSERT_EQ(kvs_shard_create(comm, &sizes, &so, &shard, &err), KVS_OK) << err.message;
    kvs_window_pool_t pool = kvs_shard_pool(shard);
    for (uint64_t step = 0; step < 20; step++) {
      std::vector<int64_t> locs(128);
      for (size_t i = 0; i < locs.size(); i++) locs[i] = int64_t(((step * 7) % 60) * 128 + i);
      if (kvs_window_pool_alloc(pool, locs.data(), locs.size(), nullptr, nullptr) != KVS_OK) {
        ASSERT_EQ(kvs_window_pool_free(pool, locs.data(), locs.size(), &err), KVS_OK);
      }
      ASSERT_EQ(kvs_shard_step(shard, step, nullptr, &err), KVS_OK) << err.message;
    }
    std::vector<int64_t> table(kvs_window_pool_full_tokens(pool) + 1);
    ASSERT_EQ(kvs_device_tables_download_mapping(c.tables, table.data(), table.size(), &err),
              KVS_OK)
        << err.message;
    const int64_t *mirror = kvs_window_pool_mapping(pool);
    EXPECT_EQ(table, std::vector<int64_t>(mirror, mirror + table.size()));
    kvs_shard_destroy(shard);
    EXPECT_EQ(cudaStreamDestroy(c.stream), cudaSuccess);
    kvs_device_tables_destroy(c.tables);
    kvs_comm_destroy(comm);
    kvs_comm_destroy(boot);
  }).join();
}

// The NCCL backend with the real CUDA runtime and NCCL, linked into the
// program (//backends/cuda, //backends/nccl: the core's registry finds
// their entry points without a dlopen). It builds and links everywhere;
// what needs a GPU skips only where CUDA says there is none, naming why,
// and fails where CUDA cannot be asked (gpu_gate_runtime.h;
// tools/device-check.sh runs it at one rank on a GPU), and
// nccl_test_on_standin runs the same source on the CPU stand-in's one GPU
// (and its no-device case on a stand-in machine of no GPU).
// Everywhere: the options are checked before anything is loaded or joined,
// and a host communicator has no device stream. Without a device,
// bootstrapping fails cleanly saying why. On a GPU: one rank bootstrapped
// over self moves device buffers and drives a shard; a communicator split
// from an engine's leaves the engine's communicator working and the
// caller's context as it was, and runs on a stream of its own; a thread
// that never chose a device is left without one, and a consumer on its own
// stream is ordered by kvs_comm_reads_done; an exchange (point to point)
// of 256 MiB from the rank to itself in one group arrives byte for byte and
// prints its rate. The stand-in test
// (nccl_standin_test) covers many ranks and the failure paths on CPU.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_tables.h"
#include "core/cost_model.h"
#include "core/geometry.h"
#include "pool/window_pool.h"
#include "plan/device_layout.h"
#include "shard/comm.h"
#include "shard/comm_nccl.h"
#include "shard/comm_self.h"
#include "shard/shard.h"
#include "shard/step_message.h"
#include "tests/backends/cuda/gpu_gate_runtime.h"
#if defined(KVS_TEST_ON_STANDIN)
#include "tests/standin/standin.h"
#endif

TEST(CommNccl, the_options_are_checked_before_anything_is_loaded_or_joined) {
  kvs_comm_nccl_options o;
  kvs_comm_nccl_options_init(&o);
  EXPECT_EQ(o.size, sizeof o);
  EXPECT_EQ(o.rank, 0);
  EXPECT_EQ(o.nranks, 1);
  EXPECT_EQ(o.device, 0);
  EXPECT_EQ(o.parent, nullptr);
  EXPECT_EQ(o.init_timeout_ms, 120000);
  EXPECT_EQ(o.timeout_ms, KVS_COMM_DEFAULT_TIMEOUT_MS);
  kvs_comm_t comm = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_comm_nccl_create(nullptr, &comm, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "options and output are required");
  kvs_comm_nccl_options x = o;
  x.timeout_ms = 0;
  EXPECT_EQ(kvs_comm_nccl_create(&x, &comm, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "timeout_ms is 0; every wait needs a deadline (> 0)");
  x = o;
  x.init_timeout_ms = 0;
  EXPECT_EQ(kvs_comm_nccl_create(&x, &comm, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message,
               "init_timeout_ms must be > 0 (a deadline for the initialisation), got 0");
  x = o;
  x.rank = 3;
  x.nranks = 2;
  EXPECT_EQ(kvs_comm_nccl_create(&x, &comm, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "rank 3 is outside a group of 2 ranks");
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(kvs_comm_nccl_bootstrap(nullptr, -1, 1000, 1000, &comm, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "bootstrap and output are required");
}

TEST(CommNccl, without_a_device_bootstrapping_fails_saying_why) {
#if defined(KVS_TEST_ON_STANDIN)
  // The stand-in plays a machine without a GPU here, its one GPU after.
  kvs_standin::Config none;
  none.devices = 0;
  kvs_standin::reset(none);
  struct OneGpuAfter {
    ~OneGpuAfter() { kvs_standin::reset(kvs_standin::Config{}); }
  } one_gpu_after;
#endif
  const kvs_gpu_gate::Answer cuda = kvs_gpu_gate::runtime();
  KVS_NEED_NO_GPU(cuda);
  const std::string why = cuda.why;
  kvs_comm_t boot = nullptr, comm = nullptr;
  kvs_error err;
  int count = 7;
  EXPECT_EQ(kvs_comm_nccl_device_count(&count, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_EQ(std::string(err.message), why);
  EXPECT_EQ(count, 7);
  ASSERT_EQ(kvs_comm_self_create(&boot, &err), KVS_OK);
  EXPECT_EQ(kvs_comm_nccl_bootstrap(boot, -1, 20000, 20000, &comm, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_EQ(std::string(err.message), "nccl communicator device choice failed on rank 0: " + why);
  EXPECT_NE(why.rfind("no CUDA device visible: cudaGetDeviceCount", 0), std::string::npos) << why;
  EXPECT_EQ(comm, nullptr);
  kvs_comm_destroy(boot);
}

TEST(CommNccl, a_host_communicator_has_no_device_stream) {
  kvs_comm_t boot = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&boot, &err), KVS_OK);
  void *stream = nullptr;
  int device = -1;
  EXPECT_EQ(kvs_comm_device_stream(boot, &stream, &device, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_STREQ(err.message, "the 'self' communicator moves host buffers: it has no device stream");
  EXPECT_EQ(kvs_comm_reads_done(boot, nullptr, &err), KVS_OK) << "a host backend needs no call";
  kvs_comm_destroy(boot);
}

// One rank on one device: collectives through device buffers, and a shard
// stepping over them (the device buffer is what a table kernel consumes).
TEST(CommNccl, one_rank_moves_device_buffers_and_drives_a_shard) {
  KVS_NEED_GPU(kvs_gpu_gate::runtime());
  kvs_comm_t boot = nullptr, comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&boot, &err), KVS_OK);
  ASSERT_EQ(kvs_comm_nccl_bootstrap(boot, -1, 120000, 20000, &comm, &err), KVS_OK) << err.message;
  EXPECT_STREQ(kvs_comm_backend(comm), "nccl");
  void *stream = nullptr;
  int device = -1;
  ASSERT_EQ(kvs_comm_device_stream(comm, &stream, &device, &err), KVS_OK) << err.message;
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

  // A shard over the device backend: the step's info names its entries in
  // device memory too, identical to the host copy.
  const uint32_t ratios[] = {0, 4, 128, 4};
  kvs_geometry g;
  ASSERT_EQ(kvs_geometry_init(&g, 8, 4, 4, ratios, 4, &err), KVS_OK);
  kvs_pool_sizes sizes;
  ASSERT_EQ(kvs_pool_sizes_compute(64, &g, 0.5, 128, 12, &sizes, &err), KVS_OK);
  kvs_shard_options so = KVS_SHARD_OPTIONS_INIT;
  so.max_running = 2;
  kvs_shard_t shard = nullptr;
  ASSERT_EQ(kvs_shard_create(comm, &sizes, &so, &shard, &err), KVS_OK) << err.message;
  std::vector<int64_t> locs(2 * 128);
  for (size_t i = 0; i < locs.size(); i++) locs[i] = int64_t(3 * 128 + i);
  ASSERT_EQ(kvs_window_pool_alloc(kvs_shard_pool(shard), locs.data(), locs.size(), nullptr, &err),
            KVS_OK);
  kvs_shard_step_info info;
  ASSERT_EQ(kvs_shard_step(shard, 0, &info, &err), KVS_OK) << err.message;
  EXPECT_EQ(info.entries, 2u);
  ASSERT_NE(info.device_message, nullptr);
  std::vector<kvs_journal_entry> copy(info.entries);
  ASSERT_EQ(cudaMemcpy(copy.data(),
                       static_cast<const char *>(info.device_message) + KVS_STEP_HEADER_BYTES,
                       info.entries * sizeof(kvs_journal_entry), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::memcmp(copy.data(), info.entries_at, info.entries * sizeof(kvs_journal_entry)), 0);
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

// An engine's own communicator (one rank): kvshard splits its own from it,
// on a stream of its own, leaves the caller's context as it was, and the
// engine's communicator works after kvshard's is gone.
TEST(CommNccl, split_mode_leaves_the_engines_communicator_and_device_alone) {
  KVS_NEED_GPU(kvs_gpu_gate::runtime());
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t engine = nullptr;
  ASSERT_EQ(ncclCommInitRank(&engine, 1, id, 0), ncclSuccess);
  cudaStream_t engine_stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&engine_stream, cudaStreamNonBlocking), cudaSuccess);
  CUcontext before = current_context();
  kvs_comm_nccl_options o;
  kvs_comm_nccl_options_init(&o);
  o.parent = engine;
  o.device = 0;
  o.timeout_ms = 20000;
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_nccl_create(&o, &comm, &err), KVS_OK) << err.message;
  EXPECT_EQ(current_context(), before) << "creating changed the caller's context";
  EXPECT_EQ(kvs_comm_rank(comm), 0);
  EXPECT_EQ(kvs_comm_size(comm), 1);
  void *stream = nullptr;
  int device = -1;
  ASSERT_EQ(kvs_comm_device_stream(comm, &stream, &device, &err), KVS_OK) << err.message;
  EXPECT_NE(stream, nullptr);
  EXPECT_NE(static_cast<cudaStream_t>(stream), engine_stream) << "kvshard uses the engine's stream";
  EXPECT_EQ(device, 0);
  kvs_comm_buffer b;
  ASSERT_EQ(kvs_comm_buffer_alloc(comm, 8, &b, &err), KVS_OK) << err.message;
  static_cast<uint64_t *>(b.host)[0] = 7;
  EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 1, KVS_COMM_MAX, &err), KVS_OK) << err.message;
  EXPECT_EQ(static_cast<uint64_t *>(b.host)[0], 7u);
  EXPECT_EQ(current_context(), before) << "a collective changed the caller's context";
  kvs_comm_buffer_free(comm, &b);
  kvs_comm_destroy(comm);
  // The engine's communicator is alive and runs its own collectives.
  int count = 0;
  EXPECT_EQ(ncclCommCount(engine, &count), ncclSuccess) << "the engine's comm is still alive";
  EXPECT_EQ(count, 1);
  uint64_t *word = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&word), sizeof *word), cudaSuccess);
  uint64_t value = 5;
  ASSERT_EQ(cudaMemcpyAsync(word, &value, sizeof value, cudaMemcpyHostToDevice, engine_stream),
            cudaSuccess);
  EXPECT_EQ(ncclAllReduce(word, word, 1, ncclUint64, ncclSum, engine, engine_stream), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(engine_stream), cudaSuccess);
  value = 0;
  ASSERT_EQ(cudaMemcpy(&value, word, sizeof value, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(value, 5u);
  int current = -1;
  EXPECT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  EXPECT_EQ(cudaFree(word), cudaSuccess);
  EXPECT_EQ(ncclCommDestroy(engine), ncclSuccess);
  EXPECT_EQ(cudaStreamDestroy(engine_stream), cudaSuccess);
}

// A thread that never chose a device uses the backend and is left without
// a context; a consumer on its own stream applies the broadcast's device
// entries to device tables, ordered by kvs_comm_reads_done, and the
// tables follow the host mirror.
TEST(CommNccl, a_consumer_stream_and_a_thread_without_a_device) {
  KVS_NEED_GPU(kvs_gpu_gate::runtime());
  std::thread([] {
    ASSERT_EQ(current_context(), nullptr) << "a fresh thread has no context";
    kvs_comm_t boot = nullptr, comm = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_comm_self_create(&boot, &err), KVS_OK);
    ASSERT_EQ(kvs_comm_nccl_bootstrap(boot, -1, 120000, 20000, &comm, &err), KVS_OK) << err.message;
    EXPECT_EQ(current_context(), nullptr) << "creation left the thread on a device";
    int device = -1;
    void *comm_stream = nullptr;
    ASSERT_EQ(kvs_comm_device_stream(comm, &comm_stream, &device, &err), KVS_OK) << err.message;
    EXPECT_NE(comm_stream, nullptr);

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
    // After each step, as the node's table step does: the entries from
    // the broadcast's device buffer onto the tables, on the consumer's
    // stream, which the next broadcast then waits for.
    auto feed = [&c](const kvs_shard_step_info &info, kvs_error *e) -> kvs_status {
      kvs_status s = kvs_device_tables_apply_journal_device(
          c.tables,
          reinterpret_cast<const kvs_journal_entry *>(
              static_cast<const char *>(info.device_message) + KVS_STEP_HEADER_BYTES),
          info.entries, c.stream, e);
      return s == KVS_OK ? kvs_comm_reads_done(c.comm, c.stream, e) : s;
    };
    ASSERT_EQ(kvs_device_tables_create(device, &layout, &c.tables, &err), KVS_OK) << err.message;
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);  // the test's own stream, on that device
    ASSERT_EQ(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), cudaSuccess);
    kvs_shard_options so = KVS_SHARD_OPTIONS_INIT;
    so.max_running = 2;
    so.step_capacity = 32;
    kvs_shard_t shard = nullptr;
    ASSERT_EQ(kvs_shard_create(comm, &sizes, &so, &shard, &err), KVS_OK) << err.message;
    kvs_window_pool_t pool = kvs_shard_pool(shard);
    for (uint64_t step = 0; step < 20; step++) {
      std::vector<int64_t> locs(128);
      for (size_t i = 0; i < locs.size(); i++) locs[i] = int64_t(((step * 7) % 60) * 128 + i);
      if (kvs_window_pool_alloc(pool, locs.data(), locs.size(), nullptr, nullptr) != KVS_OK) {
        ASSERT_EQ(kvs_window_pool_free(pool, locs.data(), locs.size(), &err), KVS_OK);
      }
      kvs_shard_step_info info;
      ASSERT_EQ(kvs_shard_step(shard, step, &info, &err), KVS_OK) << err.message;
      ASSERT_EQ(feed(info, &err), KVS_OK) << err.message;
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

// Point to point on a GPU: one rank's send to itself and its receive in one
// group (NCCL refuses two ranks of one communicator on one GPU, so the
// device check runs the exchange's NCCL path this way), 256 MiB, compared
// byte for byte, and the rate it ran at printed for the device check
// ("exchange to itself: ... GB/s"). On the stand-in, 16 MiB.
TEST(CommNccl, an_exchange_to_itself_in_one_group_moves_256_MiB_byte_for_byte) {
  KVS_NEED_GPU(kvs_gpu_gate::runtime());
#if defined(KVS_TEST_ON_STANDIN)
  const size_t bytes = size_t(16) << 20;
#else
  const size_t bytes = size_t(256) << 20;
#endif
  kvs_comm_t boot = nullptr, comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&boot, &err), KVS_OK);
  ASSERT_EQ(kvs_comm_nccl_bootstrap(boot, -1, 120000, 20000, &comm, &err), KVS_OK) << err.message;
  void *stream = nullptr;
  int device = -1;
  ASSERT_EQ(kvs_comm_device_stream(comm, &stream, &device, &err), KVS_OK) << err.message;
  ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
  void *from = nullptr, *to = nullptr;
  ASSERT_EQ(cudaMalloc(&from, bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&to, bytes), cudaSuccess);
  std::vector<uint64_t> pattern(bytes / 8);
  for (size_t i = 0; i < pattern.size(); i++) pattern[i] = i * 0x9e3779b97f4a7c15ull + 1;
  ASSERT_EQ(cudaMemcpy(from, pattern.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  // The sent bytes are written before the call (the communicator's stream
  // is not this one).
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const kvs_comm_transfer batch[2] = {{0, false, to, bytes}, {0, true, from, bytes}};
  ASSERT_EQ(kvs_comm_exchange(comm, batch, 2, &err), KVS_OK) << err.message;  // warm-up
  const int rounds = 5;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; i++) {
    ASSERT_EQ(kvs_comm_exchange(comm, batch, 2, &err), KVS_OK) << err.message;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // What the last exchange left, from scratch: the receive cleared first.
  ASSERT_EQ(cudaMemset(to, 0, bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(kvs_comm_exchange(comm, batch, 2, &err), KVS_OK) << err.message;
  std::vector<uint64_t> got(bytes / 8);
  ASSERT_EQ(cudaMemcpy(got.data(), to, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); i++) wrong += got[i] != pattern[i];
  EXPECT_EQ(wrong, 0u) << "words of " << got.size() << " that differ";
  std::printf(
      "exchange to itself: %zu MiB in one group on device %d, %d rounds, %.2f GB/s "
      "(%.3f ms each)\n",
      bytes >> 20, device, rounds, double(bytes) * rounds / secs / 1e9, secs / rounds * 1e3);
  kvs_comm_stats stats;
  kvs_comm_stats_get(comm, &stats);
  EXPECT_EQ(stats.exchanges, uint64_t(rounds + 2));
  EXPECT_EQ(cudaFree(from), cudaSuccess);
  EXPECT_EQ(cudaFree(to), cudaSuccess);
  kvs_comm_destroy(comm);
  kvs_comm_destroy(boot);
}

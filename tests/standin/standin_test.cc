// The stand-in itself: it must catch what it claims to catch, and reorder
// only what CUDA leaves unordered. Every claim is checked both ways over
// seeded schedules (the unordered outcome occurs, the ordered one always
// holds).
#include "tests/standin/standin.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/device_kernels.h"

namespace {

using kvs_standin::Config;

Config with(int devices, uint64_t seed) {
  Config c;
  c.devices = devices;
  c.seed = seed;
  return c;
}

bool any_violation_has(const std::string &needle) {
  for (const std::string &v : kvs_standin::violations()) {
    if (v.find(needle) != std::string::npos) return true;
  }
  return false;
}

uint64_t read_word(const void *device) {
  uint64_t v = 0;
  EXPECT_EQ(cudaMemcpy(&v, device, 8, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

}  // namespace

TEST(Standin, device_memory_round_trips_and_a_synchronous_read_sees_earlier_work) {
  kvs_standin::reset(with(1, 1));
  void *d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  EXPECT_EQ(kvs_standin::device_of(d), 0);
  uint64_t v = 42;
  ASSERT_EQ(cudaMemcpy(d, &v, 8, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(read_word(d), 42u);  // the legacy stream orders the two copies
  ASSERT_EQ(cudaMemset(d, 0, 8), cudaSuccess);
  EXPECT_EQ(read_word(d), 0u);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_TRUE(kvs_standin::violations().empty());
}

TEST(Standin, a_kernel_over_freed_or_foreign_device_memory_is_a_violation) {
  kvs_standin::reset(with(2, 1));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  int64_t *map = nullptr, *locs = nullptr, *out = nullptr;
  kvs_batch_fault *fault = nullptr;
  kvs_table_dims dims{4, 8, 8};
  ASSERT_EQ(cudaMalloc(&map, 9 * 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&locs, 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&fault, sizeof *fault), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, 8), cudaSuccess);  // on device 1
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(kvs_launch_translate(map, dims, locs, 1, out, fault, 4, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_TRUE(any_violation_has("lies on device 1, not device 0"));
  kvs_standin::reset(with(1, 1));
  ASSERT_EQ(cudaMalloc(&map, 9 * 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&locs, 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&fault, sizeof *fault), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaFree(out), cudaSuccess);
  ASSERT_EQ(kvs_launch_translate(map, dims, locs, 1, out, fault, 4, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_TRUE(any_violation_has("freed"));
  int64_t host = 0;
  ASSERT_EQ(kvs_launch_translate(map, dims, locs, 1, &host, fault, 4, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_TRUE(any_violation_has("is not device memory"));
}

TEST(Standin, a_kernel_on_another_devices_stream_is_refused) {
  kvs_standin::reset(with(2, 1));
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  int64_t *p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  EXPECT_EQ(kvs_launch_translate(p, kvs_table_dims{4, 4, 4}, p, 1, p, nullptr, 1, s),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "read once";
  EXPECT_TRUE(any_violation_has("on a stream of device 1 while device 0 is current"));
}

// Two non-blocking streams: a write on one and a read on the other run in
// either order, unless an event orders them.
TEST(Standin, unordered_streams_interleave_both_ways_and_an_event_orders_them) {
  std::set<uint64_t> unordered, ordered;
  for (uint64_t seed = 1; seed <= 64; seed++) {
    for (bool with_event : {false, true}) {
      kvs_standin::reset(with(1, seed));
      uint64_t *x = nullptr, *y = nullptr;
      ASSERT_EQ(cudaMalloc(&x, 8), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&y, 8), cudaSuccess);
      ASSERT_EQ(cudaMemset(x, 0, 8), cudaSuccess);
      ASSERT_EQ(cudaMemset(y, 0, 8), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaStream_t a, b;
      cudaEvent_t e;
      ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
      ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
      ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
      ASSERT_EQ(cudaMemsetAsync(x, 1, 1, a), cudaSuccess);
      if (with_event) {
        ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
        ASSERT_EQ(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
      }
      ASSERT_EQ(cudaMemcpyAsync(y, x, 8, cudaMemcpyDeviceToDevice, b), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      (with_event ? ordered : unordered).insert(read_word(y));
      EXPECT_TRUE(kvs_standin::violations().empty());
    }
  }
  EXPECT_EQ(unordered, (std::set<uint64_t>{0, 1})) << "both orders over 64 schedules";
  EXPECT_EQ(ordered, (std::set<uint64_t>{1}));
}

// The lazy schedule: a wait on one stream runs its work and the work it
// waits for (an event recorded on another stream), never another stream's
// work nothing waits on, over every seed; a device-wide wait runs that too.
TEST(Standin, a_lazy_wait_runs_only_the_work_it_waits_for) {
  for (uint64_t seed = 1; seed <= 32; seed++) {
    Config c = with(1, seed);
    c.progress_percent = 0;
    c.lazy = true;
    kvs_standin::reset(c);
    uint64_t *x = nullptr, *y = nullptr, *z = nullptr;
    ASSERT_EQ(cudaMalloc(&x, 8), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&y, 8), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&z, 8), cudaSuccess);
    ASSERT_EQ(cudaMemset(x, 0, 8), cudaSuccess);
    ASSERT_EQ(cudaMemset(y, 0, 8), cudaSuccess);
    ASSERT_EQ(cudaMemset(z, 0, 8), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaStream_t a, b, other;
    cudaEvent_t e;
    ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(z, 5, 1, other), cudaSuccess);  // nothing waits for it
    ASSERT_EQ(cudaMemsetAsync(x, 1, 1, a), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(y, x, 8, cudaMemcpyDeviceToDevice, b), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(a), cudaSuccess) << "seed " << seed << ": b waited for a's work";
    // A synchronous read runs on the legacy stream, which a non-blocking
    // stream's work does not order itself with.
    EXPECT_EQ(read_word(z), 0u) << "seed " << seed
                                << ": nothing waited for the other stream's work";
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(read_word(y), 1u);
    EXPECT_EQ(read_word(z), 5u);
    EXPECT_TRUE(kvs_standin::violations().empty());
  }
}

// cudaMemcpy from pageable memory returns once the source is staged: a
// kernel on a non-blocking stream may run before it lands; a blocking
// stream is ordered after the legacy stream.
TEST(Standin, a_pageable_copy_may_land_after_a_non_blocking_streams_work) {
  std::set<uint64_t> non_blocking, blocking;
  for (uint64_t seed = 1; seed <= 64; seed++) {
    for (bool is_blocking : {false, true}) {
      kvs_standin::reset(with(1, seed));
      uint64_t *x = nullptr, *y = nullptr;
      ASSERT_EQ(cudaMalloc(&x, 8), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&y, 8), cudaSuccess);
      ASSERT_EQ(cudaMemset(x, 0, 8), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaStream_t s;
      ASSERT_EQ(
          cudaStreamCreateWithFlags(&s, is_blocking ? cudaStreamDefault : cudaStreamNonBlocking),
          cudaSuccess);
      uint64_t v = 7;
      ASSERT_EQ(cudaMemcpy(x, &v, 8, cudaMemcpyHostToDevice), cudaSuccess);
      v = 9;  // staged: the device never sees this
      ASSERT_EQ(cudaMemcpyAsync(y, x, 8, cudaMemcpyDeviceToDevice, s), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      (is_blocking ? blocking : non_blocking).insert(read_word(y));
    }
  }
  EXPECT_EQ(non_blocking, (std::set<uint64_t>{0, 7}));
  EXPECT_EQ(blocking, (std::set<uint64_t>{7}));
}

// From pinned memory an async copy reads the source when it runs.
TEST(Standin, an_async_copy_from_pinned_memory_reads_it_when_it_runs) {
  std::set<uint64_t> seen;
  for (uint64_t seed = 1; seed <= 64; seed++) {
    kvs_standin::reset(with(1, seed));
    uint64_t *pinned = nullptr, *d = nullptr;
    ASSERT_EQ(cudaMallocHost(reinterpret_cast<void **>(&pinned), 8), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d, 8), cudaSuccess);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    *pinned = 1;
    ASSERT_EQ(cudaMemcpyAsync(d, pinned, 8, cudaMemcpyHostToDevice, s), cudaSuccess);
    uint64_t *other = nullptr;
    ASSERT_EQ(cudaMalloc(&other, 8), cudaSuccess);  // a call meanwhile: the GPU may progress
    *pinned = 2;
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    seen.insert(read_word(d));
  }
  EXPECT_EQ(seen, (std::set<uint64_t>{1, 2}));
}

TEST(Standin, contexts_are_created_as_the_runtime_creates_them) {
  kvs_standin::reset(with(4, 1));
  std::thread([] {
    int d = -1;
    EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
    EXPECT_EQ(d, 0);
    EXPECT_EQ(kvs_standin::thread_device(), -1) << "reading the device chooses none";
    EXPECT_EQ(kvs_standin::contexts_created(0), 0);
    EXPECT_EQ(cudaSetDevice(2), cudaSuccess);
    EXPECT_EQ(kvs_standin::contexts_created(2), 1);
    EXPECT_EQ(kvs_standin::thread_device(), 2);
  }).join();
  std::thread([] {
    void *p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 8), cudaSuccess);  // no device chosen: device 0's context
    EXPECT_EQ(kvs_standin::device_of(p), 0);
  }).join();
  EXPECT_EQ(kvs_standin::contexts_created(0), 1);
  EXPECT_EQ(kvs_standin::contexts_created(1), 0);
  EXPECT_EQ(kvs_standin::contexts_created(3), 0);
}

// The runtime remembers the device a thread chose apart from its current
// context (CUDA 12): popping the context leaves the choice, and the next
// call that needs a context binds the chosen device's again.
TEST(Standin, the_runtimes_choice_outlives_a_popped_context) {
  kvs_standin::reset(with(4, 1));
  std::thread([] {
    void *get = nullptr, *set = nullptr;
    ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault,
                                               nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault,
                                               nullptr),
              cudaSuccess);
    auto ctx_get = reinterpret_cast<CUresult (*)(CUcontext *)>(get);
    auto ctx_set = reinterpret_cast<CUresult (*)(CUcontext)>(set);
    EXPECT_EQ(kvs_standin::thread_runtime_device(), 0) << "a thread that never chose reads 0";
    ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
    CUcontext two = nullptr;
    ASSERT_EQ(ctx_get(&two), CUDA_SUCCESS);
    ASSERT_NE(two, nullptr);
    ASSERT_EQ(ctx_set(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(kvs_standin::thread_device(), -1) << "popped: no context";
    int d = -1;
    ASSERT_EQ(cudaGetDevice(&d), cudaSuccess);
    EXPECT_EQ(d, 2) << "the choice outlives the context";
    EXPECT_EQ(kvs_standin::thread_runtime_device(), 2);
    void *p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 8), cudaSuccess);
    EXPECT_EQ(kvs_standin::device_of(p), 2) << "the next call binds the chosen device";
    EXPECT_EQ(kvs_standin::thread_device(), 2);
    // Setting a context through the driver moves the context, not the
    // choice.
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(ctx_set(two), CUDA_SUCCESS);
    ASSERT_EQ(cudaGetDevice(&d), cudaSuccess);
    EXPECT_EQ(d, 2) << "a current context answers for itself";
    ASSERT_EQ(ctx_set(nullptr), CUDA_SUCCESS);
    ASSERT_EQ(cudaGetDevice(&d), cudaSuccess);
    EXPECT_EQ(d, 1) << "the choice is cudaSetDevice's";
    ASSERT_EQ(cudaFree(p), cudaSuccess);
  }).join();
  EXPECT_EQ(kvs_standin::contexts_created(0), 0) << "no call on device 0";
  EXPECT_TRUE(kvs_standin::violations().empty());
}

// The driver's primary-context calls create and count a context and touch
// neither the thread's context nor its choice; a release needs a retain.
TEST(Standin, a_primary_context_retained_through_the_driver_changes_no_thread) {
  kvs_standin::reset(with(4, 1));
  std::thread([] {
    void *fn[4] = {nullptr, nullptr, nullptr, nullptr};
    const char *names[4] = {"cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
                            "cuDevicePrimaryCtxGetState"};
    for (int i = 0; i < 4; i++) {
      ASSERT_EQ(
          cudaGetDriverEntryPointByVersion(names[i], &fn[i], 12000, cudaEnableDefault, nullptr),
          cudaSuccess)
          << names[i];
    }
    auto device_get = reinterpret_cast<CUresult (*)(CUdevice *, int)>(fn[0]);
    auto retain = reinterpret_cast<CUresult (*)(CUcontext *, CUdevice)>(fn[1]);
    auto release = reinterpret_cast<CUresult (*)(CUdevice)>(fn[2]);
    auto state = reinterpret_cast<CUresult (*)(CUdevice, unsigned int *, int *)>(fn[3]);
    CUdevice dev = -1;
    EXPECT_EQ(device_get(&dev, 9), CUDA_ERROR_INVALID_DEVICE);
    ASSERT_EQ(device_get(&dev, 3), CUDA_SUCCESS);
    unsigned int flags = 1;
    int active = -1;
    ASSERT_EQ(state(dev, &flags, &active), CUDA_SUCCESS);
    EXPECT_EQ(active, 0);
    EXPECT_EQ(release(dev), CUDA_ERROR_INVALID_CONTEXT) << "nothing retained";
    CUcontext a = nullptr, b = nullptr;
    ASSERT_EQ(retain(&a, dev), CUDA_SUCCESS);
    ASSERT_EQ(retain(&b, dev), CUDA_SUCCESS);
    EXPECT_EQ(a, b) << "one primary context per device";
    EXPECT_EQ(kvs_standin::contexts_created(3), 1);
    EXPECT_EQ(kvs_standin::primary_retains(3), 2);
    ASSERT_EQ(state(dev, &flags, &active), CUDA_SUCCESS);
    EXPECT_EQ(active, 1);
    EXPECT_EQ(kvs_standin::thread_device(), -1) << "retaining makes nothing current";
    EXPECT_EQ(kvs_standin::thread_runtime_device(), 0) << "nor chooses a device";
    EXPECT_EQ(release(dev), CUDA_SUCCESS);
    EXPECT_EQ(kvs_standin::primary_retains(3), 1);
    // A reset forgets the context but keeps its handle, as the driver does.
    kvs_standin::reset(with(4, 1));
    ASSERT_EQ(state(dev, &flags, &active), CUDA_SUCCESS);
    EXPECT_EQ(active, 0);
    CUcontext c = nullptr;
    ASSERT_EQ(retain(&c, dev), CUDA_SUCCESS);
    EXPECT_EQ(c, a);
    EXPECT_EQ(kvs_standin::primary_retains(3), 1);
  }).join();
  EXPECT_EQ(kvs_standin::contexts_created(0), 0);
}

TEST(Standin, no_device_is_cudaErrorNoDevice) {
  kvs_standin::reset(with(0, 1));
  int n = -1;
  EXPECT_EQ(cudaGetDeviceCount(&n), cudaErrorNoDevice);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorNoDevice), "cudaErrorNoDevice");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorNoDevice), "no CUDA-capable device is detected");
}

namespace {

// Ranks as threads, each on device rank % devices of host hosts[rank].
template <typename Body>
void ranks(int n, const std::vector<std::string> &hosts, Body body) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    threads.emplace_back([&, r] {
      if (!hosts.empty()) kvs_standin::set_thread_hostname(hosts[static_cast<size_t>(r)]);
      body(r, id);
    });
  }
  for (std::thread &t : threads) t.join();
}

ncclComm_t init_nonblocking(int n, ncclUniqueId id, int rank) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, n, id, rank, &config);
  EXPECT_EQ(rc, ncclInProgress);
  ncclResult_t state = ncclInProgress;
  int polls = 0;
  while (state == ncclInProgress) {
    EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    polls++;
  }
  EXPECT_GE(polls, 1);
  EXPECT_EQ(state, ncclSuccess) << ncclGetLastError(comm);
  return comm;
}

void settle(ncclComm_t comm, ncclResult_t rc) {
  while (rc == ncclInProgress) EXPECT_EQ(ncclCommGetAsyncError(comm, &rc), ncclSuccess);
  EXPECT_EQ(rc, ncclSuccess);
}

}  // namespace

TEST(StandinNccl, ranks_as_threads_broadcast_and_allreduce) {
  for (uint64_t seed = 1; seed <= 20; seed++) {
    kvs_standin::reset(with(4, seed));
    ranks(4, {}, [](int r, ncclUniqueId id) {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      ncclComm_t comm = init_nonblocking(4, id, r);
      cudaStream_t s;
      ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      uint64_t *d = nullptr;
      ASSERT_EQ(cudaMalloc(&d, 16), cudaSuccess);
      uint64_t h[2] = {uint64_t(10 + r), uint64_t(100 * r)};
      ASSERT_EQ(cudaMemcpy(d, h, 16, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      settle(comm, ncclBroadcast(d, d, 8, ncclUint8, 2, comm, s));
      settle(comm, ncclAllReduce(d, d, 2, ncclUint64, ncclMax, comm, s));
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(h, d, 16, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(h[0], 12u) << "rank 2's word, broadcast";
      EXPECT_EQ(h[1], 300u) << "the maximum over ranks";
      settle(comm, ncclCommFinalize(comm));
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    });
    EXPECT_TRUE(kvs_standin::violations().empty());
    EXPECT_EQ(kvs_standin::stats().collectives, 2u);
  }
}

TEST(StandinNccl, two_ranks_of_one_host_on_one_device_fail_initialisation) {
  kvs_standin::reset(with(2, 3));
  ranks(4, {"a", "a", "b", "b"}, [](int r, ncclUniqueId id) {
    ASSERT_EQ(cudaSetDevice(r / 2), cudaSuccess);  // a: 0, 0; b: 1, 1
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t comm = nullptr;
    EXPECT_EQ(ncclCommInitRankConfig(&comm, 4, id, r, &config), ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(comm)).find("Duplicate GPU detected"),
              std::string::npos);
    ncclCommAbort(comm);
  });
  kvs_standin::reset(with(2, 3));
  ranks(4, {"a", "a", "b", "b"}, [](int r, ncclUniqueId id) {
    ASSERT_EQ(cudaSetDevice(r % 2), cudaSuccess);
    ncclComm_t comm = nullptr;
    EXPECT_EQ(ncclCommInitRank(&comm, 4, id, r), ncclSuccess);
    ncclCommDestroy(comm);
  });
}

TEST(StandinNccl, an_abort_fails_the_peers_collectives_and_frees_the_handle) {
  kvs_standin::reset(with(2, 5));
  ranks(2, {}, [](int r, ncclUniqueId id) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ncclComm_t comm = init_nonblocking(2, id, r);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    uint64_t *d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 8), cudaSuccess);
    if (r == 0) {
      ncclCommAbort(comm);  // never joins the broadcast
      EXPECT_EQ(kvs_standin::comm_state(comm), kvs_standin::CommState::kAborted);
      return;
    }
    ncclResult_t rc = ncclBroadcast(d, d, 8, ncclUint8, 0, comm, s);
    ncclResult_t state = rc;
    while (state == ncclSuccess || state == ncclInProgress) {
      EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
      if (state == ncclSuccess && cudaStreamQuery(s) == cudaSuccess) {
        EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
        break;
      }
    }
    EXPECT_EQ(state, ncclRemoteError);
    ncclCommAbort(comm);
  });
  EXPECT_TRUE(kvs_standin::violations().empty());
}

TEST(StandinNccl, finalize_with_a_collective_outstanding_and_use_after_abort_are_violations) {
  kvs_standin::reset(with(2, 7));
  std::atomic<bool> finished{false};
  ranks(2, {}, [&](int r, ncclUniqueId id) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ncclComm_t comm = init_nonblocking(2, id, r);
    if (r == 1) {
      cudaStream_t s;
      ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      uint64_t *d = nullptr;
      ASSERT_EQ(cudaMalloc(&d, 8), cudaSuccess);
      settle(comm, ncclBroadcast(d, d, 8, ncclUint8, 0, comm, s));  // rank 0 never joins
      ncclCommFinalize(comm);
      ncclCommAbort(comm);
      int n = 0;
      EXPECT_EQ(ncclCommCount(comm, &n), ncclInvalidArgument);
      finished = true;
    } else {
      while (!finished) std::this_thread::yield();  // absent from the broadcast until then
      ncclCommAbort(comm);
    }
  });
  EXPECT_TRUE(any_violation_has("ncclCommFinalize on rank 1 with 1 collective(s) outstanding"));
  EXPECT_TRUE(any_violation_has("ncclCommCount on rank 1's communicator after it was aborted"));
}

// ---- point to point ----

namespace {

ncclComm_t init_blocking(int n, ncclUniqueId id, int rank) {
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, n, id, rank), ncclSuccess);
  return comm;
}

}  // namespace

// In one group a rank's sends and receives run together: two ranks each
// send to the other and to themselves, in opposite orders, and every
// message lands where the k-th send meets the k-th receive.
TEST(StandinNccl, a_group_of_sends_and_receives_runs_both_ways_and_to_itself) {
  for (uint64_t seed = 1; seed <= 20; seed++) {
    kvs_standin::reset(with(2, seed));
    ranks(2, {}, [](int r, ncclUniqueId id) {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      ncclComm_t comm = init_nonblocking(2, id, r);
      cudaStream_t s;
      ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      uint64_t *d = nullptr;
      ASSERT_EQ(cudaMalloc(&d, 8 * 8), cudaSuccess);
      // Words 0, 1: to the peer; 2: to itself; 3, 4: from the peer; 5: from itself.
      uint64_t h[8] = {uint64_t(10 * r + 1), uint64_t(10 * r + 2), uint64_t(10 * r + 3)};
      ASSERT_EQ(cudaMemcpy(d, h, 64, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      int peer = 1 - r;
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      if (r == 0) {
        EXPECT_EQ(ncclSend(d, 1, ncclUint64, peer, comm, s), ncclSuccess);
        EXPECT_EQ(ncclSend(d + 1, 1, ncclUint64, peer, comm, s), ncclSuccess);
        EXPECT_EQ(ncclRecv(d + 5, 1, ncclUint64, r, comm, s), ncclSuccess);
        EXPECT_EQ(ncclSend(d + 2, 1, ncclUint64, r, comm, s), ncclSuccess);
        EXPECT_EQ(ncclRecv(d + 3, 1, ncclUint64, peer, comm, s), ncclSuccess);
        EXPECT_EQ(ncclRecv(d + 4, 1, ncclUint64, peer, comm, s), ncclSuccess);
      } else {
        EXPECT_EQ(ncclRecv(d + 3, 1, ncclUint64, peer, comm, s), ncclSuccess);
        EXPECT_EQ(ncclSend(d + 2, 1, ncclUint64, r, comm, s), ncclSuccess);
        EXPECT_EQ(ncclRecv(d + 4, 1, ncclUint64, peer, comm, s), ncclSuccess);
        EXPECT_EQ(ncclSend(d, 1, ncclUint64, peer, comm, s), ncclSuccess);
        EXPECT_EQ(ncclRecv(d + 5, 1, ncclUint64, r, comm, s), ncclSuccess);
        EXPECT_EQ(ncclSend(d + 1, 1, ncclUint64, peer, comm, s), ncclSuccess);
      }
      settle(comm, ncclGroupEnd());
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(h, d, 64, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(h[3], uint64_t(10 * peer + 1)) << "the peer's first send";
      EXPECT_EQ(h[4], uint64_t(10 * peer + 2)) << "the peer's second send";
      EXPECT_EQ(h[5], uint64_t(10 * r + 3)) << "its own send to itself";
      settle(comm, ncclCommFinalize(comm));
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    });
    EXPECT_TRUE(kvs_standin::violations().empty());
    EXPECT_EQ(kvs_standin::stats().p2p, 6u);
  }
}

// Outside a group a send to the rank itself waits for its receive queued
// behind it: real NCCL hangs. The stand-in refuses it.
TEST(StandinNccl, a_send_or_receive_to_itself_outside_a_group_is_refused) {
  kvs_standin::reset(with(1, 1));
  ranks(1, {}, [](int, ncclUniqueId id) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ncclComm_t comm = init_blocking(1, id, 0);
    uint64_t *d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 16), cudaSuccess);
    EXPECT_EQ(ncclSend(d, 1, ncclUint64, 0, comm, nullptr), ncclInvalidUsage);
    EXPECT_EQ(ncclRecv(d + 1, 1, ncclUint64, 0, comm, nullptr), ncclInvalidUsage);
    EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage) << "no group is open";
    // A collective inside a group is not modelled: refused too.
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(d, d, 1, ncclUint64, ncclSum, comm, nullptr), ncclInvalidUsage);
    EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  });
  EXPECT_TRUE(
      any_violation_has("ncclSend of 8 bytes to rank 0 on rank 0 (device 0) outside "
                        "ncclGroupStart/ncclGroupEnd"));
  EXPECT_TRUE(any_violation_has("ncclRecv of 8 bytes from rank 0 on rank 0 (device 0) outside"));
  EXPECT_TRUE(any_violation_has("ncclGroupEnd without ncclGroupStart"));
  EXPECT_TRUE(any_violation_has("ncclAllReduce inside ncclGroupStart/ncclGroupEnd"));
}

// Outside a group each call is an operation of its own that blocks its
// stream until its counterpart arrives: two ranks that both send first
// wait for each other forever (what real NCCL may do past its buffers),
// which the stand-in reports when asked to run everything.
TEST(StandinNccl, sends_outside_a_group_that_both_go_first_deadlock) {
  kvs_standin::reset(with(2, 3));
  std::atomic<int> queued{0};
  std::atomic<bool> drained{false}, checked{false};
  ranks(2, {}, [&](int r, ncclUniqueId id) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ncclComm_t comm = init_blocking(2, id, r);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    uint64_t *d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 16), cudaSuccess);
    EXPECT_EQ(ncclSend(d, 1, ncclUint64, 1 - r, comm, s), ncclSuccess);
    EXPECT_EQ(ncclRecv(d + 1, 1, ncclUint64, 1 - r, comm, s), ncclSuccess);
    queued++;
    if (r == 0) {
      while (queued < 2) std::this_thread::yield();
      drained = kvs_standin::drain();
      EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
      checked = true;
    }
    while (!checked) std::this_thread::yield();
    ncclCommAbort(comm);
  });
  EXPECT_FALSE(drained) << "the crossed sends completed";
  EXPECT_TRUE(any_violation_has("drain: queued work can never run"));
}

// NCCL needs a send and its receive to have the same count and type.
TEST(StandinNccl, a_send_and_receive_of_different_sizes_is_a_violation) {
  kvs_standin::reset(with(2, 4));
  ranks(2, {}, [](int r, ncclUniqueId id) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ncclComm_t comm = init_nonblocking(2, id, r);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    uint64_t *d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 16), cudaSuccess);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    if (r == 0) {
      EXPECT_EQ(ncclSend(d, 1, ncclUint64, 1, comm, s), ncclSuccess);
    } else {
      EXPECT_EQ(ncclRecv(d, 2, ncclUint64, 0, comm, s), ncclSuccess);
    }
    ncclResult_t state = ncclGroupEnd();
    while (state == ncclInProgress) EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    EXPECT_EQ(state, ncclInvalidUsage);
    ncclCommAbort(comm);
  });
  EXPECT_TRUE(any_violation_has("ncclSend 0 from rank 0 to rank 1 when it ran: 8 bytes of type"));
}

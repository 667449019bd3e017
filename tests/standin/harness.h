// What the stand-in tests share: how many schedules to run, a counter of
// what ran (the main in harness_main.cc prints it as the binary's last
// line, "schedules N ranks R"), and doing the test's own CUDA calls on a
// device without leaving the thread on it.
#ifndef KVS_TESTS_STANDIN_HARNESS_H
#define KVS_TESTS_STANDIN_HARNESS_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/standin/standin.h"

namespace kvs_standin_harness {

// KVS_STANDIN_SCHEDULES overrides the default (for long runs).
inline uint64_t schedules(uint64_t default_count) {
  const char *env = std::getenv("KVS_STANDIN_SCHEDULES");
  if (env == nullptr || *env == '\0') return default_count;
  char *end = nullptr;
  unsigned long long n = std::strtoull(env, &end, 10);
  return end != env && *end == '\0' && n > 0 ? n : default_count;
}

// Counts one schedule run with `ranks` ranks (thread-safe).
void count_schedule(int ranks);

// Runs body(seed) for seeds 1..n, each counted with ranks_of(seed) ranks.
// Failures, in any thread, are collected per schedule; if any schedule
// failed, one failure says how many, the first seed and that seed's first
// message. KVS_STANDIN_SEED=s replays seed s alone, reporting every
// failure as it happens.
template <typename Body, typename Ranks>
void over_schedules(uint64_t n, Ranks ranks_of, Body body) {
  uint64_t first_seed = 1, last_seed = n;
  if (const char *one = std::getenv("KVS_STANDIN_SEED")) {
    first_seed = last_seed = std::strtoull(one, nullptr, 10);
  }
  uint64_t failed = 0, first = 0, ran = 0;
  std::string first_message;
  if (first_seed == last_seed && std::getenv("KVS_STANDIN_SEED") != nullptr) {
    body(first_seed);  // a replay: every failure reported as it happens
    count_schedule(ranks_of(first_seed));
    return;
  }
  for (uint64_t seed = first_seed; seed <= last_seed; seed++) {
    testing::TestPartResultArray results;
    {
      testing::ScopedFakeTestPartResultReporter reporter(
          testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &results);
      body(seed);
    }
    count_schedule(ranks_of(seed));
    ran++;
    if (results.size() > 0) {
      if (failed++ == 0) {
        first = seed;
        const testing::TestPartResult &r = results.GetTestPartResult(0);
        first_message = std::string(r.file_name() != nullptr ? r.file_name() : "?") + ":" +
                        std::to_string(r.line_number()) + ": " + r.message();
      }
    }
  }
  if (failed > 0) {
    ADD_FAILURE() << failed << " of " << ran << " schedules failed; the first, seed " << first
                  << " (KVS_STANDIN_SEED=" << first << " replays it): " << first_message;
  }
}

// Runs f with `device` current on this thread, then leaves the thread's
// context as it was (none, if it had none): the test's own calls must not
// be what gives a thread a device.
template <typename F>
void on_device(int device, F f) {
  using get_fn = CUresult (*)(CUcontext *);
  using set_fn = CUresult (*)(CUcontext);
  void *get = nullptr, *set = nullptr;
  ASSERT_EQ(
      cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault, nullptr),
      cudaSuccess);
  ASSERT_EQ(
      cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault, nullptr),
      cudaSuccess);
  CUcontext saved = nullptr;
  reinterpret_cast<get_fn>(get)(&saved);
  ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
  f();
  reinterpret_cast<set_fn>(set)(saved);
}

// Device memory for a test, filled and read through the legacy stream
// (synchronously: the read waits for everything before it on the device's
// blocking streams; the test orders its non-blocking streams itself).
template <typename T>
class DeviceArray {
 public:
  DeviceArray(int device, size_t n) : device_(device), n_(n) {
    on_device(device_, [&] {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&p_), n_ * sizeof(T) + 1), cudaSuccess);
    });
  }
  ~DeviceArray() {
    on_device(device_, [&] { EXPECT_EQ(cudaFree(p_), cudaSuccess); });
  }
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;

  T *get() const { return p_; }
  size_t size() const { return n_; }

  // Queued on `stream` from pageable memory (staged at the call).
  void upload(const std::vector<T> &values, cudaStream_t stream) {
    on_device(device_, [&] {
      EXPECT_EQ(cudaMemcpyAsync(p_, values.data(), values.size() * sizeof(T),
                                cudaMemcpyHostToDevice, stream),
                cudaSuccess);
    });
  }
  // After `stream`'s work: synchronises it first.
  std::vector<T> download(cudaStream_t stream) {
    std::vector<T> out(n_);
    on_device(device_, [&] {
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    });
    return out;
  }

 private:
  int device_;
  size_t n_;
  T *p_ = nullptr;
};

// A fresh machine of `devices` GPUs running schedule `seed`.
inline void reset(int devices, uint64_t seed) {
  kvs_standin::Config c;
  c.devices = devices;
  c.seed = seed;
  kvs_standin::reset(c);
}

// Every use of freed or foreign memory (and every other refusal) the
// stand-in saw since the last reset, as a test failure each.
inline void expect_no_violations() {
  for (const std::string &v : kvs_standin::violations()) ADD_FAILURE() << v;
}

}  // namespace kvs_standin_harness

#endif  // KVS_TESTS_STANDIN_HARNESS_H

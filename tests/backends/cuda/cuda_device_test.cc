// The CUDA backend's device leaf (backends/cuda/cuda_device.h,
// backends/cuda/cuda_status.h) and topology's probe over the backend's probe
// table (topology/cuda_probe.h; the backend linked into the test, so no
// dlopen), on the CPU stand-in for the CUDA runtime: a device's facts come
// without a context, the probe measures free memory (a context per device)
// only when asked, what a machine without devices and a failing runtime
// call answer, the device scope (a thread that had no device is left with
// none; one that had one gets it back) and an upload that has landed when
// it returns.
#include "backends/cuda/cuda_device.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_status.h"
#include "tests/backends/cuda/gpu_gate_runtime.h"
#include "tests/standin/standin.h"
#include "topology/cuda_probe.h"

namespace {

void reset(int devices, uint64_t seed = 1) {
  kvs_standin::Config c;
  c.devices = devices;
  c.seed = seed;
  kvs_standin::reset(c);
}

}  // namespace

TEST(CudaDevice, a_devices_facts_come_without_a_context) {
  reset(3);
  std::thread([] {
    kvs_error err;
    for (int i = 0; i < 3; i++) {
      kvs_cuda_device_facts facts;
      ASSERT_EQ(kvs_cuda_device_describe(i, &facts, &err), KVS_OK) << err.message;
      EXPECT_EQ(std::string(facts.name), "kvs stand-in GPU " + std::to_string(i));
      EXPECT_EQ(facts.total_bytes, kvs_standin::Config{}.device_bytes);
      char bus[KVS_CUDA_PCI_BUS_ID_MAX];
      std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x18 + 0x10 * i);
      EXPECT_STREQ(facts.pci_bus_id, bus);
    }
    EXPECT_EQ(kvs_standin::thread_device(), -1) << "describing chose a device for the thread";
    // A device that is not there: the call and the device named, the
    // output untouched.
    kvs_cuda_device_facts untouched;
    std::memset(&untouched, 0x5a, sizeof untouched);
    kvs_cuda_device_facts facts = untouched;
    EXPECT_EQ(kvs_cuda_device_describe(3, &facts, &err), KVS_ERR_CUDA);
    EXPECT_STREQ(err.message,
                 "cudaDeviceGetPCIBusId of device 3: cudaErrorInvalidDevice (invalid device "
                 "ordinal)");
    EXPECT_EQ(std::memcmp(&facts, &untouched, sizeof facts), 0) << "written on failure";
    EXPECT_EQ(kvs_cuda_device_describe(0, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  }).join();
  for (int d = 0; d < 3; d++) EXPECT_EQ(kvs_standin::contexts_created(d), 0) << "device " << d;
  for (const std::string &v : kvs_standin::violations()) ADD_FAILURE() << v;
}

TEST(CudaDevice, the_probe_measures_free_memory_only_when_asked) {
  reset(3);
  std::thread([] {
    kvs_cuda_device probed[4];
    size_t n = 0;
    kvs_error err;
    int count = 0;
    ASSERT_EQ(kvs_cuda_probe_device_count(&count, &err), KVS_OK) << err.message;
    EXPECT_EQ(count, 3);
    // Unmeasured: the devices, their bus ids parsed, no context anywhere.
    ASSERT_EQ(kvs_cuda_probe(probed, 4, false, &n, &err), KVS_OK) << err.message;
    ASSERT_EQ(n, 3u);
    for (size_t i = 0; i < n; i++) {
      EXPECT_EQ(probed[i].ordinal, int(i));
      EXPECT_EQ(probed[i].pci.bus, 0x18u + 0x10u * unsigned(i));
      EXPECT_EQ(std::string(probed[i].name), "kvs stand-in GPU " + std::to_string(i));
      EXPECT_EQ(probed[i].total_bytes, kvs_standin::Config{}.device_bytes);
      EXPECT_EQ(probed[i].free_bytes, 0u) << "not measured";
      EXPECT_EQ(kvs_standin::contexts_created(int(i)), 0) << "device " << i;
    }
    // Measured: each device's context takes a share of it; the thread is
    // left without a device.
    ASSERT_EQ(kvs_cuda_probe(probed, 4, true, &n, &err), KVS_OK) << err.message;
    ASSERT_EQ(n, 3u);
    for (size_t i = 0; i < n; i++) {
      EXPECT_EQ(probed[i].free_bytes,
                kvs_standin::Config{}.device_bytes - kvs_standin::Config{}.context_bytes)
          << "device " << i;
      EXPECT_EQ(kvs_standin::contexts_created(int(i)), 1) << "device " << i;
    }
    EXPECT_EQ(kvs_standin::thread_device(), -1) << "the probe chose a device for the thread";
    uint64_t free_bytes = 0, total_bytes = 0;
    ASSERT_EQ(kvs_cuda_probe_mem_info(2, &free_bytes, &total_bytes, &err), KVS_OK) << err.message;
    EXPECT_EQ(total_bytes, kvs_standin::Config{}.device_bytes);
    EXPECT_EQ(free_bytes, total_bytes - kvs_standin::Config{}.context_bytes);
    EXPECT_EQ(kvs_standin::thread_device(), -1);
    // Too little room: refused, nothing written.
    n = 7;
    EXPECT_EQ(kvs_cuda_probe(probed, 2, false, &n, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_STREQ(err.message, "CUDA sees 3 devices, more than the 2 the caller made room for");
    EXPECT_EQ(n, 7u);
  }).join();
  for (const std::string &v : kvs_standin::violations()) ADD_FAILURE() << v;
}

TEST(CudaDevice, without_devices_the_count_and_the_probe_say_why) {
  reset(0);
  const char *why =
      "no CUDA device visible: cudaGetDeviceCount returned cudaErrorNoDevice (no CUDA-capable "
      "device is detected)";
  int count = 7;
  kvs_error err;
  EXPECT_EQ(kvs_cuda_device_count(&count, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_STREQ(err.message, why);
  EXPECT_EQ(kvs_cuda_probe_device_count(&count, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_STREQ(err.message, why);
  EXPECT_EQ(count, 7) << "written only on success";
  kvs_cuda_device probed[1];
  size_t n = 7;
  EXPECT_EQ(kvs_cuda_probe(probed, 1, true, &n, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_STREQ(err.message, why);
  EXPECT_EQ(n, 7u) << "written only on success";
}

// The device tests' gate (gpu_gate_runtime.h) asks CUDA: no device is a
// skip naming why; a runtime that fails to count its devices is broken, not
// absent (the probe reads it as "no device"; the gate does not), so a test
// that needs a GPU fails on it.
TEST(GpuGate, no_device_is_none_devices_are_present_and_a_failing_count_is_broken) {
  reset(0);
  kvs_gpu_gate::Answer none = kvs_gpu_gate::runtime();
  EXPECT_EQ(none.gpus, kvs_gpu_gate::Gpus::kNone);
  EXPECT_EQ(none.why,
            "no CUDA device visible: cudaGetDeviceCount returned cudaErrorNoDevice (no "
            "CUDA-capable device is detected)");
  reset(2);
  kvs_gpu_gate::Answer two = kvs_gpu_gate::runtime();
  EXPECT_EQ(two.gpus, kvs_gpu_gate::Gpus::kPresent);
  EXPECT_EQ(two.count, 2);
  // The probe's count and the runtime's own both fail to initialise.
  reset(2);
  kvs_standin::inject_cuda_error("cudaGetDeviceCount", -1, 1, cudaErrorInitializationError);
  kvs_standin::inject_cuda_error("cudaGetDeviceCount", -1, 1, cudaErrorInitializationError);
  kvs_gpu_gate::Answer broken = kvs_gpu_gate::runtime();
  EXPECT_EQ(broken.gpus, kvs_gpu_gate::Gpus::kBroken);
  EXPECT_EQ(broken.why,
            "cudaGetDeviceCount returned cudaErrorInitializationError (initialization error): the "
            "CUDA runtime is broken here, not absent");
  // Only the runtime's own count fails: the two answers disagree.
  reset(2);
  ASSERT_EQ(kvs_gpu_gate::probe().gpus, kvs_gpu_gate::Gpus::kPresent);
  kvs_standin::inject_cuda_error("cudaGetDeviceCount", -1, 2, cudaErrorNoDevice);
  kvs_gpu_gate::Answer split = kvs_gpu_gate::runtime();
  EXPECT_EQ(split.gpus, kvs_gpu_gate::Gpus::kBroken);
  EXPECT_NE(split.why.find("the CUDA backend's probe and the runtime disagree: the probe says 2 "
                           "device(s), cudaGetDeviceCount returned cudaErrorNoDevice"),
            std::string::npos)
      << split.why;
}

TEST(CudaDevice, a_runtime_error_on_a_device_is_a_cuda_error_naming_the_call) {
  reset(2);
  kvs_standin::inject_cuda_error("cudaMemGetInfo", 1, 1, cudaErrorLaunchFailure);
  kvs_cuda_device probed[2];
  size_t n = 0;
  kvs_error err;
  // Unmeasured, the probe never asks for free memory: the fault stays armed.
  ASSERT_EQ(kvs_cuda_probe(probed, 2, false, &n, &err), KVS_OK) << err.message;
  n = 5;
  EXPECT_EQ(kvs_cuda_probe(probed, 2, true, &n, &err), KVS_ERR_CUDA);
  EXPECT_STREQ(err.message,
               "cudaMemGetInfo on device 1: cudaErrorLaunchFailure (unspecified launch failure)");
  EXPECT_EQ(n, 5u) << "written only on success";
  EXPECT_EQ(kvs_standin::thread_device(), -1);
}

TEST(CudaDevice, the_scope_puts_back_none_or_the_previous_device) {
  reset(4);
  std::thread([] {
    kvs_cuda_device_scope scope;
    kvs_error err;
    ASSERT_EQ(kvs_cuda_device_enter(2, &scope, &err), KVS_OK) << err.message;
    EXPECT_EQ(kvs_standin::thread_device(), 2);
    kvs_cuda_device_leave(&scope);
    EXPECT_EQ(kvs_standin::thread_device(), -1) << "a thread without a device keeps none";
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(kvs_cuda_device_enter(3, &scope, &err), KVS_OK);
    EXPECT_EQ(kvs_standin::thread_device(), 3);
    kvs_cuda_device_leave(&scope);
    EXPECT_EQ(kvs_standin::thread_device(), 1);
    ASSERT_EQ(kvs_cuda_device_enter(1, &scope, &err), KVS_OK);  // already current
    EXPECT_EQ(scope.switched, 0);
    kvs_cuda_device_leave(&scope);
    EXPECT_EQ(kvs_standin::thread_device(), 1);
    EXPECT_EQ(kvs_cuda_device_enter(9, &scope, &err), KVS_ERR_CUDA);
    EXPECT_STREQ(err.message, "cuDeviceGet(9): CUDA_ERROR_INVALID_DEVICE (invalid device ordinal)");
    EXPECT_EQ(kvs_standin::thread_device(), 1) << "a failed enter changes nothing";
  }).join();
  EXPECT_EQ(kvs_standin::contexts_created(0), 0);
}

// A thread with no context before a scope has none after, and the runtime
// still chooses for it what it chose before: its next call binds the same
// device as without the scope (device 0 on a thread that never chose), and
// no context is created on a device the thread did not work on.
TEST(CudaDevice, a_thread_without_a_context_keeps_the_runtimes_choice) {
  reset(4);
  std::thread([] {
    kvs_cuda_device_scope scope;
    kvs_error err;
    ASSERT_EQ(kvs_cuda_device_enter(2, &scope, &err), KVS_OK) << err.message;
    int d = -1;
    ASSERT_EQ(cudaGetDevice(&d), cudaSuccess);
    EXPECT_EQ(d, 2) << "inside the scope the runtime works on the scope's device";
    void *inside = nullptr;
    ASSERT_EQ(cudaMalloc(&inside, 8), cudaSuccess);
    EXPECT_EQ(kvs_standin::device_of(inside), 2);
    kvs_cuda_device_leave(&scope);
    EXPECT_EQ(kvs_standin::thread_device(), -1) << "no context after";
    EXPECT_EQ(kvs_standin::thread_runtime_device(), 0) << "the runtime's choice moved to 2";
    ASSERT_EQ(cudaFree(inside), cudaSuccess);  // binds the choice's context, as the thread would
    EXPECT_EQ(kvs_standin::thread_device(), 0);
  }).join();
  std::thread([] {
    // A thread that chose device 1 and popped its context.
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    void *set = nullptr;
    ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault,
                                               nullptr),
              cudaSuccess);
    ASSERT_EQ(reinterpret_cast<CUresult (*)(CUcontext)>(set)(nullptr), CUDA_SUCCESS);
    kvs_cuda_device_scope scope;
    kvs_error err;
    ASSERT_EQ(kvs_cuda_device_enter(3, &scope, &err), KVS_OK) << err.message;
    kvs_cuda_device_leave(&scope);
    EXPECT_EQ(kvs_standin::thread_device(), -1);
    EXPECT_EQ(kvs_standin::thread_runtime_device(), 1);
    // Work inside the scope that chose a device itself (as NCCL's blocking
    // paths do with cudaSetDevice): undone, since device 1's context is
    // live.
    ASSERT_EQ(kvs_cuda_device_enter(3, &scope, &err), KVS_OK) << err.message;
    ASSERT_EQ(cudaSetDevice(3), cudaSuccess);
    kvs_cuda_device_leave(&scope);
    EXPECT_EQ(kvs_standin::thread_device(), -1);
    EXPECT_EQ(kvs_standin::thread_runtime_device(), 1);
  }).join();
  // Every scope on device 3 retained its context once, ever.
  EXPECT_EQ(kvs_standin::primary_retains(3), 1);
  EXPECT_EQ(kvs_standin::contexts_created(0), 1) << "the first thread's own call, after the scope";
  EXPECT_EQ(kvs_standin::contexts_created(3), 1);
}

// The same through a call that works in the scope: measuring a device's
// free memory on a thread with no context leaves it with none and its
// choice alone.
TEST(CudaDevice, measuring_free_memory_leaves_a_thread_without_a_context_as_it_was) {
  reset(3);
  std::thread([] {
    uint64_t free_b = 0, total_b = 0;
    kvs_error err;
    ASSERT_EQ(kvs_cuda_mem_info(2, &free_b, &total_b, &err), KVS_OK) << err.message;
    EXPECT_EQ(kvs_standin::thread_device(), -1);
    EXPECT_EQ(kvs_standin::thread_runtime_device(), 0);
  }).join();
  EXPECT_EQ(kvs_standin::contexts_created(0), 0);
  EXPECT_EQ(kvs_standin::contexts_created(2), 1);
}

// Work queued on a non-blocking stream before the upload (a memset of the
// same bytes) is done before the copy lands: the bytes are the upload's in
// every schedule. cudaMemcpy from pageable memory lands later on the legacy
// stream, which a non-blocking stream does not order with, so without the
// upload's wait for earlier work the memset could land last.
TEST(CudaDevice, an_upload_lands_after_earlier_work_on_the_device) {
  int overwritten = 0;
  for (uint64_t seed = 1; seed <= 200; seed++) {
    reset(1, seed);
    int64_t *d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(d, 0x5a, 64, s), cudaSuccess);
    std::vector<int64_t> host(8, int64_t(seed));
    kvs_error err;
    ASSERT_EQ(kvs_cuda_upload(d, host.data(), 64, "the test's upload", &err), KVS_OK)
        << err.message;
    std::vector<int64_t> back(8);
    ASSERT_EQ(cudaMemcpy(back.data(), d, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    if (back != host) overwritten++;
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  }
  EXPECT_EQ(overwritten, 0) << "an earlier memset landed over the upload in " << overwritten
                            << " of 200 schedules";
}

// A kernel on a non-blocking stream, queued right after the upload, reads
// the uploaded bytes in every schedule.
TEST(CudaDevice, an_upload_has_landed_when_it_returns) {
  for (uint64_t seed = 1; seed <= 200; seed++) {
    reset(1, seed);
    int64_t *d = nullptr, *copy = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&copy, 64), cudaSuccess);
    std::vector<int64_t> host(8, int64_t(seed));
    kvs_error err;
    ASSERT_EQ(kvs_cuda_upload(d, host.data(), 64, "the test's upload", &err), KVS_OK);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(copy, d, 64, cudaMemcpyDeviceToDevice, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<int64_t> back(8);
    ASSERT_EQ(cudaMemcpy(back.data(), copy, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(back, host) << "schedule " << seed;
  }
}

// The cuda/ leaf (backends/cuda/cuda_device.h, backends/cuda/cuda_status.h) and topology's
// probe over it, on the CPU stand-in for the CUDA runtime: the device list,
// what a machine without devices answers, the device scope (a thread that
// had no device is left with none; one that had one gets it back) and an
// upload that has landed when it returns.
#include "backends/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_status.h"
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

TEST(CudaDevice, the_list_names_every_device_and_leaves_the_thread_as_it_was) {
  reset(3);
  std::thread([] {
    kvs_cuda_device_info devices[4];
    size_t n = 0;
    kvs_error err;
    ASSERT_EQ(kvs_cuda_devices_list(devices, 4, &n, &err), KVS_OK) << err.message;
    ASSERT_EQ(n, 3u);
    for (size_t i = 0; i < n; i++) {
      EXPECT_EQ(devices[i].ordinal, int(i));
      EXPECT_EQ(std::string(devices[i].name), "kvs stand-in GPU " + std::to_string(i));
      EXPECT_GT(devices[i].total_bytes, devices[i].free_bytes) << "its context takes a share";
    }
    EXPECT_STREQ(devices[1].pci_bus_id, "0000:28:00.0");
    EXPECT_EQ(kvs_standin::thread_device(), -1) << "the list chose a device for the thread";
    EXPECT_EQ(kvs_cuda_devices_list(devices, 2, &n, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_STREQ(err.message, "CUDA sees 3 devices, more than the 2 the caller made room for");
    // topology's view: the same devices, bus ids parsed.
    kvs_cuda_device probed[4];
    ASSERT_EQ(kvs_cuda_probe(probed, 4, &n, &err), KVS_OK) << err.message;
    ASSERT_EQ(n, 3u);
    EXPECT_EQ(probed[2].pci.bus, 0x38u);
    EXPECT_EQ(probed[2].ordinal, 2);
  }).join();
  for (const std::string &v : kvs_standin::violations()) ADD_FAILURE() << v;
}

TEST(CudaDevice, without_devices_the_list_and_the_probe_say_why) {
  reset(0);
  kvs_cuda_device_info devices[1];
  size_t n = 7;
  kvs_error err;
  EXPECT_EQ(kvs_cuda_devices_list(devices, 1, &n, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_STREQ(err.message,
               "no CUDA device visible: cudaGetDeviceCount returned cudaErrorNoDevice (no "
               "CUDA-capable device is detected)");
  EXPECT_EQ(n, 7u) << "written only on success";
  kvs_cuda_device probed[1];
  EXPECT_EQ(kvs_cuda_probe(probed, 1, &n, &err), KVS_ERR_UNSUPPORTED);
}

TEST(CudaDevice, a_runtime_error_on_a_device_is_a_cuda_error_naming_the_call) {
  reset(2);
  kvs_standin::inject_cuda_error("cudaMemGetInfo", 1, 1, cudaErrorLaunchFailure);
  kvs_cuda_device_info devices[2];
  size_t n = 0;
  kvs_error err;
  EXPECT_EQ(kvs_cuda_devices_list(devices, 2, &n, &err), KVS_ERR_CUDA);
  EXPECT_STREQ(err.message,
               "cudaMemGetInfo on device 1: cudaErrorLaunchFailure (unspecified launch failure)");
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
    EXPECT_STREQ(err.message, "cudaSetDevice(9): cudaErrorInvalidDevice (invalid device ordinal)");
    EXPECT_EQ(kvs_standin::thread_device(), 1) << "a failed enter changes nothing";
  }).join();
  EXPECT_EQ(kvs_standin::contexts_created(0), 0);
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

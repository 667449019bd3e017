// CUDA errors as kvs_status, by value, and the host side of the device
// tables that needs no GPU: argument errors, fault reports, and what a
// machine without a device answers (the reason the device tests print).
#include "backends/cuda/cuda_status.h"

#include <gtest/gtest.h>

#include <string>

#include "plan/device_budget.h"
#include "backends/cuda/device_tables.h"
#include "tests/backends/cuda/fixtures.h"
#include "tests/backends/cuda/gpu_gate_runtime.h"

using namespace kvs_cuda_test;

namespace {

bool starts_with(const std::string &text, const std::string &prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

TEST(CudaStatus, a_cuda_error_is_kvs_err_cuda_with_its_name_and_string) {
  kvs_error err;
  EXPECT_EQ(kvs_cuda_status(cudaErrorMemoryAllocation, "cudaMalloc of 42 bytes on device 0", &err),
            KVS_ERR_CUDA);
  EXPECT_EQ(err.status, KVS_ERR_CUDA);
  EXPECT_STREQ(err.message,
               "cudaMalloc of 42 bytes on device 0: cudaErrorMemoryAllocation (out of memory)");
  EXPECT_EQ(kvs_cuda_status(cudaErrorInvalidValue, nullptr, &err), KVS_ERR_CUDA);
  EXPECT_STREQ(err.message, "CUDA call: cudaErrorInvalidValue (invalid argument)");
  EXPECT_EQ(kvs_cuda_status(cudaErrorNoDevice, "probe", nullptr), KVS_ERR_CUDA) << "err optional";
  EXPECT_STREQ(kvs_status_string(KVS_ERR_CUDA), "cuda error");
}

TEST(CudaStatus, success_is_ok_and_writes_no_message) {
  kvs_error err;
  err.status = KVS_ERR_IO;
  snprintf(err.message, sizeof err.message, "untouched");
  EXPECT_EQ(kvs_cuda_status(cudaSuccess, "anything", &err), KVS_OK);
  EXPECT_STREQ(err.message, "untouched");
}

TEST(CudaStatus, the_device_count_says_why_there_is_no_device) {
  int count = -5;
  kvs_error err;
  kvs_status status = kvs_cuda_device_count(&count, &err);
  if (status == KVS_OK) {
    EXPECT_GT(count, 0);
    return;
  }
  EXPECT_EQ(status, KVS_ERR_UNSUPPORTED);
  EXPECT_EQ(count, -5) << "the count is written only on success";
  EXPECT_TRUE(starts_with(err.message, "no CUDA device visible: cudaGetDeviceCount returned cuda"))
      << err.message;
  EXPECT_EQ(kvs_cuda_device_count(nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
}

TEST(DeviceTables, without_a_device_creating_them_is_a_cuda_error_and_leaves_nothing) {
  // Where CUDA sees a device the device tests cover creation.
  KVS_NEED_NO_GPU(kvs_gpu_gate::runtime());
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 8, 5);
  kvs_device_layout layout;
  ASSERT_EQ(kvs_device_layout_build(&g, 0, 4, nullptr, &s, nullptr, &layout, nullptr), KVS_OK);
  kvs_device_tables_t tables = reinterpret_cast<kvs_device_tables_t>(0x1);
  kvs_error err;
  EXPECT_EQ(kvs_device_tables_create(0, &layout, &tables, &err), KVS_ERR_CUDA);
  EXPECT_EQ(tables, reinterpret_cast<kvs_device_tables_t>(0x1)) << "the handle is left alone";
  EXPECT_NE(std::string(err.message).find(": cudaError"), std::string::npos) << err.message;

  kvs_device_budget budget{};
  EXPECT_EQ(kvs_device_budget_query(0, 0.9, 0, &budget, &err), KVS_ERR_CUDA);
  EXPECT_NE(std::string(err.message).find("cudaError"), std::string::npos) << err.message;
}

TEST(DeviceTables, argument_errors_are_refused_before_any_cuda_call) {
  kvs_error err;
  kvs_device_tables_destroy(nullptr);  // accepted
  EXPECT_EQ(kvs_device_tables_create(0, nullptr, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  kvs_device_layout layout{};
  kvs_device_tables_t tables = nullptr;
  EXPECT_EQ(kvs_device_tables_create(0, &layout, &tables, &err), KVS_ERR_INVALID_ARGUMENT)
      << "an unbuilt layout is refused, not allocated";
  EXPECT_EQ(tables, nullptr);
  int64_t dummy = 0;
  EXPECT_EQ(kvs_device_tables_translate(nullptr, &dummy, 1, &dummy, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_device_tables_apply_journal(nullptr, nullptr, 0, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
}

TEST(DeviceTables, a_fault_record_reads_as_an_error_naming_the_kernel_and_the_index) {
  kvs_device_faults faults = {KVS_BATCH_FAULT_INIT, KVS_BATCH_FAULT_INIT, KVS_BATCH_FAULT_INIT,
                              KVS_BATCH_FAULT_INIT};
  kvs_error err;
  EXPECT_EQ(kvs_device_faults_check(&faults, &err), KVS_OK);
  faults.ring_ctx = kvs_batch_fault{3, 17};
  EXPECT_EQ(kvs_device_faults_check(&faults, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_STREQ(err.message,
               "ring_ctx faulted on 3 requests whose window reaches past their block table or "
               "the table; the first at batch index 17 (those read -1)");
  faults.translate = kvs_batch_fault{1, 0};
  EXPECT_EQ(kvs_device_faults_check(&faults, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_STREQ(err.message,
               "translate faulted on 1 locs past the sentinel row; the first at batch index 0 "
               "(those read -1)");
}

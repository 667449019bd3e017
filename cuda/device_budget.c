#include "cuda/device_budget.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>

#include "cuda/cuda_status.h"

kvs_status kvs_device_budget_compute(uint64_t free_bytes, uint64_t total_bytes, double memory_ratio,
                                     uint64_t reserve_bytes, kvs_device_budget *out,
                                     kvs_error *err) {
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "output is NULL");
  if (!(memory_ratio > 0.0 && memory_ratio <= 1.0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "memory ratio must be in (0, 1], got %g",
                         memory_ratio);
  }
  double share = floor((double)free_bytes * memory_ratio);
  uint64_t usable = share >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)share;
  if (usable <= reserve_bytes) {
    return kvs_error_set(err, KVS_ERR_BUDGET_TOO_SMALL,
                         "device budget is empty: %llu free bytes x memory ratio %g = %llu, not "
                         "above the %llu-byte reserve",
                         (unsigned long long)free_bytes, memory_ratio, (unsigned long long)usable,
                         (unsigned long long)reserve_bytes);
  }
  kvs_device_budget b = {free_bytes, total_bytes, memory_ratio, reserve_bytes,
                         usable - reserve_bytes};
  *out = b;
  return KVS_OK;
}

kvs_status kvs_device_budget_query(int device, double memory_ratio, uint64_t reserve_bytes,
                                   kvs_device_budget *out, kvs_error *err) {
  kvs_status status;
  int previous = 0;
  char what[96];
  size_t free_bytes = 0, total_bytes = 0;
  if ((status = kvs_cuda_status(cudaGetDevice(&previous), "cudaGetDevice", err))) return status;
  snprintf(what, sizeof what, "cudaSetDevice(%d)", device);
  if ((status = kvs_cuda_status(cudaSetDevice(device), what, err))) return status;
  snprintf(what, sizeof what, "cudaMemGetInfo on device %d", device);
  status = kvs_cuda_status(cudaMemGetInfo(&free_bytes, &total_bytes), what, err);
  (void)cudaSetDevice(previous);
  if (status != KVS_OK) return status;
  return kvs_device_budget_compute(free_bytes, total_bytes, memory_ratio, reserve_bytes, out, err);
}

#include "plan/device_budget.h"

#include "plan/memory_budget.h"
#include "topology/cuda_probe.h"

kvs_status kvs_device_budget_compute(uint64_t free_bytes, uint64_t total_bytes, double memory_ratio,
                                     uint64_t reserve_bytes, kvs_device_budget *out,
                                     kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_memory_budget rule;
  kvs_status status = kvs_memory_budget_rule(KVS_BUDGET_MEASURED, free_bytes, memory_ratio, 0,
                                             reserve_bytes, &rule, err);
  if (status != KVS_OK) return status;
  kvs_device_budget b = {free_bytes, total_bytes, memory_ratio, reserve_bytes, rule.budget_bytes};
  *out = b;
  return KVS_OK;
}

kvs_status kvs_device_budget_query(int device, double memory_ratio, uint64_t reserve_bytes,
                                   kvs_device_budget *out, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  uint64_t free_bytes = 0, total_bytes = 0;
  /* The thread's context is put back as it was: a rank measuring its own
   * device must not leave a context on device 0 behind. */
  kvs_status status = kvs_cuda_probe_mem_info(device, &free_bytes, &total_bytes, err);
  if (status != KVS_OK) return status;
  return kvs_device_budget_compute(free_bytes, total_bytes, memory_ratio, reserve_bytes, out, err);
}

#include "plan/memory_budget.h"

#include <math.h>
#include <stdbool.h>

const char *kvs_budget_source_name(kvs_budget_source source) {
  switch (source) {
    case KVS_BUDGET_MEASURED:
      return "measured";
    case KVS_BUDGET_NOMINAL:
      return "nominal";
    case KVS_BUDGET_EXPLICIT:
      return "explicit";
  }
  return "unknown";
}

/* floor(memory x ratio). memory x ratio <= memory < 2^64 for a ratio up to
 * 1, so the floor converts back safely except where rounding reaches 2^64
 * itself (or a larger ratio passes it): that saturates. */
/* floor(memory x ratio), saturating; 0 for a ratio that is negative or
 * not a number (a negative double converted to uint64_t is undefined). */
static uint64_t usable_bytes(uint64_t memory_bytes, double memory_ratio) {
  double share = floor((double)memory_bytes * memory_ratio);
  if (!(share >= 0.0)) return 0;
  return share >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)share;
}

bool kvs_memory_budget_bytes(uint64_t memory_bytes, double memory_ratio, uint64_t weights_bytes,
                             uint64_t reserve_bytes, uint64_t *budget_bytes) {
  if (budget_bytes == NULL) return false;
  uint64_t usable = usable_bytes(memory_bytes, memory_ratio);
  if (!(weights_bytes < usable && usable - weights_bytes > reserve_bytes)) return false;
  *budget_bytes = usable - weights_bytes - reserve_bytes;
  return true;
}

kvs_status kvs_memory_budget_rule(kvs_budget_source source, uint64_t memory_bytes,
                                  double memory_ratio, uint64_t weights_bytes,
                                  uint64_t reserve_bytes, kvs_memory_budget *out, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (source != KVS_BUDGET_MEASURED && source != KVS_BUDGET_NOMINAL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the budget rule applies to measured or nominal memory, not %s bytes",
                         kvs_budget_source_name(source));
  }
  if (!(memory_ratio > 0.0 && memory_ratio <= 1.0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "memory ratio must be in (0, 1], got %g",
                         memory_ratio);
  }
  uint64_t usable = usable_bytes(memory_bytes, memory_ratio);
  uint64_t budget_bytes = 0;
  bool fits = kvs_memory_budget_bytes(memory_bytes, memory_ratio, weights_bytes, reserve_bytes,
                                      &budget_bytes);
  if (!fits && weights_bytes == 0) {
    return kvs_error_set(
        err, KVS_ERR_BUDGET_TOO_SMALL,
        "device budget is empty: %llu %s bytes x memory ratio %g = %llu, not above the "
        "%llu-byte reserve",
        (unsigned long long)memory_bytes, source == KVS_BUDGET_MEASURED ? "free" : "nominal",
        memory_ratio, (unsigned long long)usable, (unsigned long long)reserve_bytes);
  }
  if (!fits) {
    return kvs_error_set(
        err, KVS_ERR_BUDGET_TOO_SMALL,
        "device budget is empty: %llu %s bytes x memory ratio %g = %llu, not above the "
        "%llu bytes of weights and the %llu-byte reserve",
        (unsigned long long)memory_bytes, source == KVS_BUDGET_MEASURED ? "free" : "nominal",
        memory_ratio, (unsigned long long)usable, (unsigned long long)weights_bytes,
        (unsigned long long)reserve_bytes);
  }
  kvs_memory_budget b = {.source = source,
                         .memory_bytes = memory_bytes,
                         .memory_ratio = memory_ratio,
                         .weights_bytes = weights_bytes,
                         .reserve_bytes = reserve_bytes,
                         .budget_bytes = budget_bytes};
  *out = b;
  return KVS_OK;
}

kvs_status kvs_memory_budget_explicit(uint64_t budget_bytes, kvs_memory_budget *out,
                                      kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (budget_bytes == 0) {
    return kvs_error_set(err, KVS_ERR_BUDGET_TOO_SMALL, "an explicit budget of 0 bytes");
  }
  kvs_memory_budget b = {.source = KVS_BUDGET_EXPLICIT,
                         .memory_bytes = budget_bytes,
                         .memory_ratio = 1.0,
                         .budget_bytes = budget_bytes};
  *out = b;
  return KVS_OK;
}

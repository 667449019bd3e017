/* A device's KV budget: what cudaMemGetInfo says is free, times a memory
 * ratio, minus a reserve. kvs_device_plan_solve then sizes the pool
 * byte-exactly inside it.
 *
 * The ratio leaves the caller's share of the free memory (activations,
 * CUDA graphs, NCCL buffers grow after the pool is carved); the reserve is
 * a fixed amount on top, for what the CUDA runtime itself takes lazily
 * (module loads, local memory of the first large launch, the allocation's
 * own rounding to 2 MiB pages), so a pool sized to the last byte of the
 * ratio still allocates. A NULL output is KVS_ERR_INVALID_ARGUMENT, before
 * anything is measured. */
#ifndef KVS_PLAN_DEVICE_BUDGET_H
#define KVS_PLAN_DEVICE_BUDGET_H

#include <stdint.h>

#include "core/serving_defaults.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The serving defaults (core/serving_defaults.h): 0.90 and 512 MiB. */
#define KVS_DEVICE_DEFAULT_MEMORY_RATIO KVS_DEFAULT_MEMORY_RATIO
#define KVS_DEVICE_DEFAULT_RESERVE_BYTES KVS_DEFAULT_RESERVE_BYTES

typedef struct kvs_device_budget {
  uint64_t free_bytes;  /* as measured */
  uint64_t total_bytes; /* the device's memory, for the record */
  double memory_ratio;
  uint64_t reserve_bytes;
  uint64_t budget_bytes; /* floor(free_bytes * memory_ratio) - reserve_bytes */
} kvs_device_budget;

/* The arithmetic alone, which is core's one budget rule
 * (kvs_memory_budget_rule on measured memory): memory_ratio in (0, 1];
 * floor(free * ratio) taken in double precision. A result of zero or less
 * is KVS_ERR_BUDGET_TOO_SMALL naming the three numbers. *out is written
 * only on success. */
kvs_status kvs_device_budget_compute(uint64_t free_bytes, uint64_t total_bytes, double memory_ratio,
                                     uint64_t reserve_bytes, kvs_device_budget *out,
                                     kvs_error *err);

/* Measures `device` through the CUDA backend (cudaMemGetInfo with it
 * current: this process's context on that device only; the calling
 * thread's context is put back) and computes its budget. */
kvs_status kvs_device_budget_query(int device, double memory_ratio, uint64_t reserve_bytes,
                                   kvs_device_budget *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_DEVICE_BUDGET_H */

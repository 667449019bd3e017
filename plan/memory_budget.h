/* The KV budget of one device: the single rule every layer uses.
 *
 *   budget = floor(memory x memory_ratio) - weights - reserve
 *
 * memory is what the device has for us: the free bytes CUDA measures, or,
 * where nothing can be measured (planning a machine we are not on), the
 * device's capacity. The ratio leaves the engine its share (activations,
 * CUDA graphs, NCCL buffers grow after the pool is carved); the reserve is
 * a fixed amount on top for what the CUDA runtime takes lazily. Weights are
 * the model's bytes on the device where they are not loaded yet (planning
 * before the engine starts); an engine that measured free memory after
 * loading them passes 0. An engine
 * that measured its own memory passes its bytes instead, and then nothing
 * is taken off them.
 *
 * A budget records how it was made, so a plan can state each term. A NULL
 * output is KVS_ERR_INVALID_ARGUMENT (kvs_memory_budget_bytes: false). */
#ifndef KVS_PLAN_MEMORY_BUDGET_H
#define KVS_PLAN_MEMORY_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_budget_source {
  KVS_BUDGET_MEASURED = 0, /* free bytes measured on the device */
  KVS_BUDGET_NOMINAL = 1,  /* the device's capacity, nothing measured */
  KVS_BUDGET_EXPLICIT = 2  /* bytes given by the caller, taken as they are */
} kvs_budget_source;

/* "measured", "nominal", "explicit". */
const char *kvs_budget_source_name(kvs_budget_source source);

typedef struct kvs_memory_budget {
  kvs_budget_source source;
  uint64_t memory_bytes;  /* measured free or nominal bytes; the budget itself when explicit */
  double memory_ratio;    /* 1 when explicit */
  uint64_t weights_bytes; /* 0 when explicit */
  uint64_t reserve_bytes; /* 0 when explicit */
  uint64_t budget_bytes;  /* floor(memory_bytes x memory_ratio) - weights - reserve */
} kvs_memory_budget;

/* The rule. memory_ratio in (0, 1]; floor(memory x ratio) in double
 * precision (exact to the byte below 2^53). A result of zero or less is
 * KVS_ERR_BUDGET_TOO_SMALL naming every term; source may not be
 * KVS_BUDGET_EXPLICIT. *out is written only on success. */
kvs_status kvs_memory_budget_rule(kvs_budget_source source, uint64_t memory_bytes,
                                  double memory_ratio, uint64_t weights_bytes,
                                  uint64_t reserve_bytes, kvs_memory_budget *out, kvs_error *err);

/* The rule's arithmetic alone, for a search over the ratio (kvplan fit
 * looks for the smallest share of memory a plan needs, trying shares above
 * 1 to say how far out of reach it is): floor(memory x ratio) - weights -
 * reserve into *budget_bytes, for any ratio >= 0 (the share saturates at
 * 2^64 - 1 bytes). False, writing nothing, where kvs_memory_budget_rule
 * would find the budget empty, and for a negative or NaN ratio. */
bool kvs_memory_budget_bytes(uint64_t memory_bytes, double memory_ratio, uint64_t weights_bytes,
                             uint64_t reserve_bytes, uint64_t *budget_bytes);

/* A caller's bytes: budget_bytes as given (zero is refused). */
kvs_status kvs_memory_budget_explicit(uint64_t budget_bytes, kvs_memory_budget *out,
                                      kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_MEMORY_BUDGET_H */

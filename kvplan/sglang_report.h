/* SGLang's pools beside kvshard's plan (`--engine sglang`): computing them
 * for a range of the planned model, and showing them as JSON and text. */
#ifndef KVS_KVPLAN_SGLANG_REPORT_H
#define KVS_KVPLAN_SGLANG_REPORT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/sglang_pools.h"
#include "kvplan/plan_options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SGLang's pools for the main layers [first, end) of the model on
 * available bytes. The model must have its config (not an explicit
 * geometry). */
kvs_status kvs_sglang_report_compute(const kvs_plan_model *model, const kvs_sglang_options *options,
                                     size_t first, size_t end, uint64_t available_bytes,
                                     kvs_sglang_pools *out, kvs_error *err);

/* The `sglang` object: full, swa, c4, c128, c4_state, c128_state,
 * bytes_per_full_token, c128_state_fixed_bytes, and what they were sized
 * for (available_bytes, page, swa_ratio, speculative, max_running and
 * whether it was estimated, ring sizes, row bytes, revision, the two
 * warnings). */
json_t *kvs_sglang_report_json(const kvs_sglang_pools *pools, const kvs_sglang_options *options,
                               uint64_t available_bytes);

/* The same for people, ending with kvshard's tokens against SGLang's. */
void kvs_sglang_report_print(FILE *out, const kvs_sglang_pools *pools,
                             const kvs_sglang_options *options, uint64_t available_bytes,
                             uint64_t kvshard_tokens, kvs_kv_dtype kvshard_dtype);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_SGLANG_REPORT_H */

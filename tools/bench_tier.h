/* kvbench's host-tier workload: the host twin's spill and fetch copies
 * against memcpy of the same spans. */
#ifndef KVS_TOOLS_BENCH_TIER_H
#define KVS_TOOLS_BENCH_TIER_H

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

/* For batches of 64, 256 and 1024 pages of DSV4-Flash's fp8 rows (one
 * rank holding every layer: the latent rows are not split by tp), sets
 * "tier_spill_gbps_N" and "tier_fetch_gbps_N" (the table's copies),
 * "tier_spill_memcpy_gbps_N" and "tier_fetch_memcpy_gbps_N" (memcpy of the
 * same spans between the same memory) and "tier_spill_vs_memcpy_N",
 * "tier_fetch_vs_memcpy_N" (their ratios), in one run, rounds
 * interleaved; and "tier_slot_bytes". quick: 64 and 256 pages, fewer
 * rounds. Returns 0, or 1 with a message on stderr. */
int kvs_bench_tier(json_t *results, int quick);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOOLS_BENCH_TIER_H */

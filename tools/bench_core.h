/* kvbench's core/ workloads: page bind+free, ring context, page solve. */
#ifndef KVS_TOOLS_BENCH_CORE_H
#define KVS_TOOLS_BENCH_CORE_H

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the three fixed workloads and sets "alloc_free_page_ns",
 * "window_ctx_ns" and "solve_ns" (mean ns per operation) on results.
 * quick divides the iteration counts by 100 (for smoke tests). Returns 0,
 * or 1 with a message on stderr when a workload fails. */
int kvs_bench_core(json_t *results, int quick);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOOLS_BENCH_CORE_H */

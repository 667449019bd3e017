/* kvbench's timing: seconds on the monotonic clock (core/clock.h) and the
 * median of a workload's rounds, which a round the scheduler preempted on
 * shared cores does not move. */
#ifndef KVS_TOOLS_BENCH_TIME_H
#define KVS_TOOLS_BENCH_TIME_H

#include <stdlib.h>

#include "core/clock.h"

static inline double kvs_bench_seconds(void) { return (double)kvs_now_ns() * 1e-9; }

static inline int kvs_bench_by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n) (sorted in place). */
static inline double kvs_bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, kvs_bench_by_value);
  return v[n / 2];
}

#endif /* KVS_TOOLS_BENCH_TIME_H */

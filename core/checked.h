/* Overflow-checked 64-bit arithmetic for the cost model and the device
 * carve.
 *
 * Sizes multiply user-supplied counts by row widths; a wrapped product
 * would price a huge pool as a tiny one. Each helper folds overflow into
 * a sticky flag so a whole formula is checked once at the end. */
#ifndef KVS_CORE_CHECKED_H
#define KVS_CORE_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

static inline uint64_t kvs_mul(uint64_t a, uint64_t b, bool *overflow) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    *overflow = true;
    return UINT64_MAX;
  }
  return r;
}

static inline uint64_t kvs_add(uint64_t a, uint64_t b, bool *overflow) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    *overflow = true;
    return UINT64_MAX;
  }
  return r;
}

static inline uint64_t kvs_div_ceil(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

#endif /* KVS_CORE_CHECKED_H */

/* bf16 (bfloat16) values for stored KV payloads: the upper 16 bits of an
 * IEEE binary32, rounded to nearest, ties to even. The one conversion
 * that tools/kvblock.c (synthetic blocks) and the block tests use, so a
 * payload built by either is bit-identical.
 *
 * Meant for finite values: a NaN is not special-cased (rounding may carry
 * its payload into the exponent and give an infinity). */
#ifndef KVS_BLOCKS_BF16_H
#define KVS_BLOCKS_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t kvs_bf16_from_float(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(bits >> 16);
}

#endif /* KVS_BLOCKS_BF16_H */

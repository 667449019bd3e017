/* A value and a rank in one 64-bit word (private to shard/).
 *
 * The value takes the high 48 bits and the rank the low 16, so one MIN
 * (or MAX) collective over these words yields the extreme value and, among
 * ranks that share it, the lowest rank holding it: no second collective to
 * learn who. Ranks fit because a group has at most KVS_SHARD_MAX_RANKS. */
#ifndef KVS_SHARD_RANK_WORD_H
#define KVS_SHARD_RANK_WORD_H

#include <stdint.h>

#define KVS_RANK_WORD_BITS 16
/* The largest value a word carries; callers clamp to it (2^48 pages or
 * steps is never the binding one). */
#define KVS_RANK_WORD_VALUE_MAX ((UINT64_C(1) << (64 - KVS_RANK_WORD_BITS)) - 1)

static inline uint64_t kvs_rank_word(uint64_t value, int rank) {
  return value << KVS_RANK_WORD_BITS | (uint64_t)rank;
}

static inline uint64_t kvs_rank_word_value(uint64_t word) { return word >> KVS_RANK_WORD_BITS; }

static inline int kvs_rank_word_rank(uint64_t word) {
  return (int)(word & ((UINT64_C(1) << KVS_RANK_WORD_BITS) - 1));
}

#endif

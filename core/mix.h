/* One 64-bit mixing step for fingerprints and digests: folds v into h so
 * that any change of any input changes the result (a splitmix64-style
 * finaliser after a boost-style combine). Not cryptographic: it detects
 * ranks that disagree, it does not resist an adversary. */
#ifndef KVS_CORE_MIX_H
#define KVS_CORE_MIX_H

#include <stdint.h>
#include <string.h>

/* The binding digest's two functions also run in the CUDA kernels that
 * digest a device table (backends/cuda/device_kernels.cuh). */
#if defined(__CUDACC__)
#define KVS_MIX_HD static inline __host__ __device__
#else
#define KVS_MIX_HD static inline
#endif

static inline uint64_t kvs_mix64(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

/* A double folded by its bit pattern (so 0.1 and the next double differ). */
static inline uint64_t kvs_mix64_double(uint64_t h, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  return kvs_mix64(h, bits);
}

/* splitmix64's finaliser: a bijection of 64-bit words with full avalanche. */
KVS_MIX_HD uint64_t kvs_splitmix64_finalise(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The digest term of one binding (key -> value): order-independent digests
 * sum these, so equal sets of bindings give equal sums whatever order they
 * were made in. The window pool's page and request-slot terms both use it
 * (with different seeds for slots, so slot s and full page s never cancel). */
KVS_MIX_HD uint64_t kvs_binding_pair_term(uint64_t key, uint64_t value) {
  return kvs_splitmix64_finalise(kvs_splitmix64_finalise(key + 0x9e3779b97f4a7c15ull) ^ value);
}

/* A transfer's digest of a unit of rows where they live (a GPU hashes its
 * own memory: backends/cuda's rows digest kernel; core/device_ref.h's
 * kvs_ref_rows_digest is its specification). The sum over the rows' 8-byte
 * words of one term each, so any thread may take any word and the order of
 * the additions does not matter; the word's index is inside its term, so
 * words that moved or swapped change the sum, and the seed (the unit's
 * pool, layer and positions) makes the same bytes at another position a
 * different digest. Not cryptographic, as everything here. */
KVS_MIX_HD uint64_t kvs_rows_word_term(uint64_t seed, uint64_t index, uint64_t word) {
  return kvs_splitmix64_finalise(
      kvs_splitmix64_finalise(seed + (index + 1) * 0x9e3779b97f4a7c15ull) ^ word);
}

/* The digest of a unit from its words' sum (modulo 2^64) and its length. */
KVS_MIX_HD uint64_t kvs_rows_digest_finish(uint64_t sum, uint64_t bytes, uint64_t seed) {
  return kvs_splitmix64_finalise(sum ^
                                 kvs_splitmix64_finalise(seed ^ (bytes * 0xd6e8feb86659fd93ull)));
}

/* The next word of a splitmix64 stream: seeded generators for workloads
 * and test data (reproducible from the seed on every machine). */
static inline uint64_t kvs_splitmix64(uint64_t *state) {
  return kvs_splitmix64_finalise(*state += 0x9e3779b97f4a7c15ull);
}

#endif /* KVS_CORE_MIX_H */

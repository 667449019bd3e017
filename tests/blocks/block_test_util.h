// Payload builders shared by the block tests: owned layers that hand out
// the borrowed kvs_block_layer views the C API takes.
#ifndef KVS_TESTS_BLOCKS_BLOCK_TEST_UTIL_H
#define KVS_TESTS_BLOCKS_BLOCK_TEST_UTIL_H

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "blocks/bf16.h"
#include "blocks/block_hash.h"
#include "blocks/block_layout.h"
#include "blocks/block_signature.h"
#include "blocks/block_signed.h"

namespace kvs_test {

// One layer with its own buffers. Elements are stored as raw bytes so the
// same type serves f32 and bf16.
struct Layer {
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t v_head_dim = 0;
  kvs_dtype dtype = KVS_DTYPE_F32;
  uint64_t positions = 0;
  std::vector<uint8_t> k;
  std::vector<uint8_t> v;

  size_t elem_size() const { return kvs_dtype_size(dtype); }
  uint64_t k_elems() const { return k.size() / elem_size(); }
  uint64_t v_elems() const { return v.size() / elem_size(); }
  // Drops V elements beyond n (the seed's `v.truncate(n)`).
  void truncate_v(size_t n) { v.resize(n * elem_size()); }
};

// A layer of `tokens` rows, every element 0.5 (as the seed's fixture), or
// a deterministic pattern from `seed` when seed != 0.
inline Layer layer(uint32_t n_kv_heads, uint32_t head_dim, uint64_t tokens,
                   kvs_dtype dtype = KVS_DTYPE_F32, uint64_t seed = 0) {
  Layer l;
  l.n_kv_heads = n_kv_heads;
  l.head_dim = head_dim;
  l.v_head_dim = head_dim;
  l.dtype = dtype;
  l.positions = tokens;
  uint64_t elems = tokens * n_kv_heads * head_dim;
  l.k.resize(elems * l.elem_size());
  l.v.resize(elems * l.elem_size());
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (uint64_t i = 0; i < 2 * elems; i++) {
    float f = 0.5f;
    if (seed != 0) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      f = static_cast<float>(static_cast<int64_t>(x % 2001) - 1000) / 1000.0f;
    }
    std::vector<uint8_t> &dst = i < elems ? l.k : l.v;
    uint64_t at = (i < elems ? i : i - elems) * l.elem_size();
    if (dtype == KVS_DTYPE_F32) {
      std::memcpy(&dst[at], &f, 4);
    } else {
      uint16_t h = kvs_bf16_from_float(f);  // as kvblock rounds
      std::memcpy(&dst[at], &h, 2);
    }
  }
  return l;
}

inline std::vector<Layer> payload(size_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                                  uint64_t tokens, kvs_dtype dtype = KVS_DTYPE_F32,
                                  uint64_t seed = 0) {
  std::vector<Layer> layers;
  for (size_t i = 0; i < n_layers; i++) {
    layers.push_back(layer(n_kv_heads, head_dim, tokens, dtype, seed == 0 ? 0 : seed + i));
  }
  return layers;
}

// Borrowed views of `layers`; valid while `layers` is alive and unchanged.
inline std::vector<kvs_block_layer> views(const std::vector<Layer> &layers) {
  std::vector<kvs_block_layer> out;
  for (const Layer &l : layers) {
    kvs_block_layer v;
    v.n_kv_heads = l.n_kv_heads;
    v.head_dim = l.head_dim;
    v.v_head_dim = l.v_head_dim;
    v.dtype = l.dtype;
    v.positions = l.positions;
    v.k = l.k.data();
    v.k_elems = l.k_elems();
    v.v = l.v.data();
    v.v_elems = l.v_elems();
    out.push_back(v);
  }
  return out;
}

inline kvs_block_layout make_layout(uint32_t block_size, uint32_t window) {
  kvs_block_layout layout{};
  if (kvs_block_layout_init(block_size, window, &layout, nullptr) != KVS_OK) {
    layout.block_size = 0;  // tests only build usable layouts; make misuse loud
  }
  return layout;
}

// No window; the block size given is the depth the test's payload has.
inline kvs_block_layout flat(uint32_t block_size) {
  return make_layout(block_size, KVS_BLOCK_NO_WINDOW);
}

inline kvs_block_signature expected(const char *model, kvs_block_layout layout, uint32_t n_layers,
                                    uint32_t n_kv_heads, uint32_t head_dim, uint64_t tokens,
                                    kvs_dtype dtype = KVS_DTYPE_F32,
                                    const std::vector<uint8_t> &weights = {}) {
  kvs_block_signature sig{};
  kvs_block_signature_expected(model, weights.empty() ? nullptr : weights.data(), weights.size(),
                               layout, n_layers, n_kv_heads, head_dim, dtype, tokens, &sig,
                               nullptr);
  return sig;
}

inline kvs_block_signature from_payload(const char *model, kvs_block_layout layout,
                                        const std::vector<Layer> &layers,
                                        const std::vector<uint8_t> &weights = {}) {
  kvs_block_signature sig{};
  std::vector<kvs_block_layer> v = views(layers);
  kvs_block_signature_measure(model, weights.empty() ? nullptr : weights.data(), weights.size(),
                              layout, v.data(), v.size(), &sig, nullptr, nullptr);
  return sig;
}

// Whether two payload views hold the same shapes and the same bytes.
inline bool same_payload(const kvs_block_layer *a, size_t na, const kvs_block_layer *b, size_t nb) {
  if (na != nb) return false;
  for (size_t i = 0; i < na; i++) {
    if (a[i].n_kv_heads != b[i].n_kv_heads || a[i].head_dim != b[i].head_dim ||
        a[i].v_head_dim != b[i].v_head_dim || a[i].dtype != b[i].dtype ||
        a[i].positions != b[i].positions || a[i].k_elems != b[i].k_elems ||
        a[i].v_elems != b[i].v_elems) {
      return false;
    }
    size_t es = kvs_dtype_size(a[i].dtype);
    if (std::memcmp(a[i].k, b[i].k, a[i].k_elems * es) != 0) return false;
    if (std::memcmp(a[i].v, b[i].v, a[i].v_elems * es) != 0) return false;
  }
  return true;
}

}  // namespace kvs_test

#endif  // KVS_TESTS_BLOCKS_BLOCK_TEST_UTIL_H

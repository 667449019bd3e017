// The small model of the node tests that carve real memory (the host
// twin's and the stand-in's): window-only, CSA, HCA and CSA layers with
// narrow rows, so every tier and ring kind is there and a node carves a
// few MiB.
#ifndef KVS_TESTS_SHARD_SMALL_MODEL_H
#define KVS_TESTS_SHARD_SMALL_MODEL_H

#include <cstdint>

#include "core/geometry.h"

namespace kvs_test {

inline kvs_geometry small_model() {
  kvs_geometry g{};
  g.head_dim = 64;
  g.index_head_dim = 32;
  g.n_layers = 4;
  g.n_ratios = 4;
  const uint32_t ratios[] = {0, 4, 128, 4};
  for (int i = 0; i < 4; i++) g.compress_ratios[i] = ratios[i];
  return g;
}

// The same layers with rows an fp8 node stores (core/cost_model.h: fp8
// needs the rope part below head_dim and index_head_dim a multiple of
// 128): head_dim 128 with a 64-dim rope part makes a 200-byte KV row (128
// fp8 + 64 bf16 + 8 scale bytes), not whole 16-byte units, so its pages
// are padded to the row's 192-byte payload (a 32-row page 6,528 bytes for
// its 6,400); the 132-byte indexer row fills whole pages.
inline kvs_geometry small_model_fp8() {
  kvs_geometry g = small_model();
  g.head_dim = 128;
  g.index_head_dim = 128;
  return g;
}

}  // namespace kvs_test

#endif  // KVS_TESTS_SHARD_SMALL_MODEL_H

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

}  // namespace kvs_test

#endif  // KVS_TESTS_SHARD_SMALL_MODEL_H

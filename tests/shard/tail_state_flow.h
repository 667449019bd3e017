// An exact prefix hit through a retained tail, for every table kind: the
// ring slot of a request is cleared when it is bound (never a previous
// request's), and an exact hit's ring takes its tail's state, on every
// rank. Request 1 writes its two pages and, as every engine does for the
// last four positions of each page, the first halves (kv and score) of
// their ratio-4 ring rows into its window pages' tail states; it caches
// them keeping page 3's window as the tail, and finishes. Its ring slot,
// still holding request 1's rows, goes to request 2, whose prompt hits
// the cached pages exactly: after the step its ring holds zero bytes
// everywhere but the first halves of the four positions before the hit,
// which are request 1's, on every ratio-4 layer, attention and indexer.
// Each rank writes bytes of its own, so a rank that restored another's,
// or the wrong window page's, fails.
#ifndef KVS_TESTS_SHARD_TAIL_STATE_FLOW_H
#define KVS_TESTS_SHARD_TAIL_STATE_FLOW_H

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "pool/window_pool.h"
#include "shard/node.h"
#include "tests/shard/host_rows_flow.h"

namespace kvs_test {

// A ratio-4 ring view of the node ("state_4" or "index_state").
struct RingView {
  std::string name;
  char *data = nullptr;
  int64_t layers = 0, rows = 0;
  size_t row_bytes = 0, layer_bytes = 0;
  char *row(int64_t layer, uint64_t r) const {
    return data + static_cast<size_t>(layer) * layer_bytes + r * row_bytes;
  }
};

inline std::vector<RingView> ratio4_rings(kvs_node_t node) {
  std::vector<RingView> out;
  for (size_t i = 0; i < kvs_node_view_count(node); i++) {
    kvs_node_view v{};
    v.size = sizeof v;
    kvs_error err;
    EXPECT_EQ(kvs_node_view_at(node, i, &v, &err), KVS_OK) << err.message;
    std::string name = v.name;
    if (name != "state_4" && name != "index_state") continue;
    EXPECT_EQ(v.dtype, KVS_VIEW_FP32) << name;
    RingView r;
    r.name = name;
    r.data = static_cast<char *>(v.data);
    r.layers = v.shape[0];
    r.rows = v.shape[1];
    r.row_bytes = static_cast<size_t>(v.shape[2]) * 4;
    r.layer_bytes = static_cast<size_t>(v.strides[0]) * 4;
    out.push_back(r);
  }
  return out;
}

// Bytes distinct per seed, rank, view, layer and row.
inline std::vector<char> ring_bytes(size_t n, uint64_t seed, int rank, size_t view, int64_t layer,
                                    uint64_t row) {
  std::vector<char> out(n);
  for (size_t b = 0; b < n; b++) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + uint64_t(rank) * 0xbf58476d1ce4e5b9ull +
                 view * 0x94d049bb133111ebull + uint64_t(layer) * 0x2545f4914f6cdd1dull +
                 row * 0x9e6c63d0676a9a99ull + b / 8;
    x ^= x >> 31;
    x *= 0xd6e8feb96b5f3d29ull;
    x ^= x >> 29;
    out[b] = static_cast<char>((x >> (8 * (b % 8))) | 1);  // never all zero
  }
  return out;
}

// One rank of the flow over a created node of the small model with a
// prefix cache (every rank calls it).
inline void tail_state_round_trip(kvs_node_t node, const NodeMemory &m) {
  const int rank = kvs_node_rank(node);
  const bool leader = kvs_node_is_leader(node);
  const uint64_t P = kvs_node_page(node);
  const uint64_t ring_rows = (kvs_node_max_running(node) + 1) * 8;
  const uint64_t n_win = kvs_node_window_pages(node);
  kvs_error err;
  std::vector<RingView> views = ratio4_rings(node);
  ASSERT_EQ(views.size(), 2u) << "state_4 and index_state";
  for (const RingView &v : views) {
    // The rings, then two tail-state rows per window page, then scratch.
    ASSERT_EQ(uint64_t(v.rows), ring_rows + n_win * KVS_TAIL_STATE_ROWS + 1) << v.name;
  }
  std::vector<int64_t> locs(2 * P);
  for (uint64_t i = 0; i < 2 * P; i++) locs[i] = static_cast<int64_t>(2 * P + i);
  int64_t slot = -1;
  if (leader) {
    ASSERT_EQ(kvs_node_admit(node, 1, &slot, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_bind(node, 1, locs.data(), locs.size(), &err), KVS_OK) << err.message;
  }
  ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
  const uint64_t slot1 = uint64_t(kvs_window_pool_slot_of(kvs_node_pool(node), 1));
  int64_t window = -1;
  const int64_t last = static_cast<int64_t>(3 * P);
  ASSERT_EQ(kvs_node_translate(node, &last, 1, &window, &err), KVS_OK) << err.message;
  const uint64_t w3 = uint64_t(window) / P;  // page 3's window page: the tail
  // Request 1's prefill: its whole ring, and its window pages' tail states.
  for (size_t vi = 0; vi < views.size(); vi++) {
    const RingView &v = views[vi];
    for (int64_t l = 0; l < v.layers; l++) {
      for (uint64_t r = slot1 * 8; r < slot1 * 8 + 8; r++) {
        m.write(v.row(l, r), ring_bytes(v.row_bytes, 1, rank, vi, l, r).data(), v.row_bytes);
      }
      for (uint64_t r = 0; r < KVS_TAIL_STATE_ROWS; r++) {
        uint64_t row = ring_rows + w3 * KVS_TAIL_STATE_ROWS + r;
        m.write(v.row(l, row), ring_bytes(v.row_bytes, 3, rank, vi, l, row).data(), v.row_bytes);
      }
    }
  }
  const uint64_t keys[3] = {70, 80, 90};
  if (leader) {
    const int64_t pages[2] = {2, 3};
    const uint8_t tails[2] = {0, 1};
    uint8_t taken[2] = {0, 0};
    ASSERT_EQ(kvs_node_prefix_insert(node, 1, keys, pages, tails, 2, taken, &err), KVS_OK)
        << err.message;
    ASSERT_EQ(kvs_node_free(node, locs.data(), locs.size(), &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_prefix_release(node, 1, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_finish(node, 1, &err), KVS_OK) << err.message;
    // Request 2 takes request 1's slot and hits both pages exactly.
    ASSERT_EQ(kvs_node_admit(node, 2, &slot, &err), KVS_OK) << err.message;
    ASSERT_EQ(uint64_t(slot), slot1) << "the lowest free slot: request 1's";
    kvs_node_prefix_hit hit{};
    hit.size = sizeof hit;
    ASSERT_EQ(kvs_node_prefix_match(node, keys, 3, 3 * P + 1, 0, &hit, nullptr, &err), KVS_OK)
        << err.message;
    ASSERT_EQ(hit.hit_tokens, 2 * P);
    ASSERT_FALSE(hit.reprefill);
    ASSERT_EQ(kvs_node_prefix_acquire(node, 2, &hit, &err), KVS_OK) << err.message;
  }
  ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
  m.sync();
  ASSERT_EQ(kvs_window_pool_slot_of(kvs_node_pool(node), 2), int64_t(slot1));
  // Positions H - 4 .. H - 1 of the hit at H = 2P: ring rows (H - 4 + i) % 8.
  const uint64_t H = 2 * P;
  for (size_t vi = 0; vi < views.size(); vi++) {
    const RingView &v = views[vi];
    const size_t q = v.row_bytes / 4;
    for (int64_t l = 0; l < v.layers; l++) {
      std::vector<char> want(8 * v.row_bytes, 0);
      for (uint64_t i = 0; i < KVS_TAIL_STATE_POSITIONS; i++) {
        uint64_t tail_row = ring_rows + w3 * KVS_TAIL_STATE_ROWS + i / 2;
        std::vector<char> tail = ring_bytes(v.row_bytes, 3, rank, vi, l, tail_row);
        const char *half = tail.data() + (i % 2) * 2 * q;
        char *row = want.data() + ((H - 4 + i) % 8) * v.row_bytes;
        std::memcpy(row, half, q);              // kv's first half
        std::memcpy(row + 2 * q, half + q, q);  // score's first half
      }
      std::vector<char> got(8 * v.row_bytes);
      m.read(got.data(), v.row(l, slot1 * 8), got.size());
      ASSERT_TRUE(got == want) << "rank " << rank << ", " << v.name << " layer " << l
                               << ": request 2's ring is not zero but for the first halves of "
                                  "the positions before the hit, request 1's";
    }
  }
  EXPECT_EQ(kvs_node_check(node, nullptr, &err), KVS_OK) << err.message;
  kvs_table_row_stats stats;
  kvs_table_row_stats_get(kvs_node_table(node), &stats);
  EXPECT_EQ(stats.clears, 2u) << "request 1's and request 2's bindings of the slot";
  EXPECT_EQ(stats.restores, 1u);
}

}  // namespace kvs_test

#endif  // KVS_TESTS_SHARD_TAIL_STATE_FLOW_H

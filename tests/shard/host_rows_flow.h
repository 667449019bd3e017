// The host tier's rows moved by the node, one flow for every table kind:
// the leader caches a request's two pages, evicts them (each rank's rows
// spill to its own slots), the pages are overwritten as a reused page
// would be, and a later prompt with the same keys fetches them into two
// other pages. Every rank checks its own memory: the slots hold exactly
// the pages' compressed and indexer rows, and the new pages get them
// back, byte for byte. Each rank writes rows of its own, so a rank that
// copied another's, or a page's rows into the wrong slot, fails.
#ifndef KVS_TESTS_SHARD_HOST_ROWS_FLOW_H
#define KVS_TESTS_SHARD_HOST_ROWS_FLOW_H

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "shard/node.h"
#include "tests/shard/small_model.h"

namespace kvs_test {

// A node of the small model with the prefix cache and a host tier of
// host_cache bytes: tp ranks over the bundled server, 12 MiB per GPU; fp8
// rows (dtype) on small_model_fp8's geometry.
struct SmallPrefixNode {
  kvs_geometry g = small_model();
  std::vector<uint64_t> budgets = std::vector<uint64_t>(8, 12ull << 20);
  kvs_node_options o;

  SmallPrefixNode(int tp, kvs_node_device device, uint64_t host_cache,
                  kvs_kv_dtype dtype = KVS_KV_BF16) {
    kvs_node_options_init(&o);
    if (dtype == KVS_KV_FP8) g = small_model_fp8();
    o.geometry = &g;
    o.kv_dtype = dtype;
    o.qk_rope_head_dim = 64;
    o.swa_ratio = 0.04;
    o.max_seq_len = 4096;
    o.max_running = 4;
    o.radix = false;
    o.tp = tp;
    o.topology = "bundled";
    o.device = device;
    o.bind_numa = false;
    o.budget_per_gpu = budgets.data();
    o.n_budget_per_gpu = budgets.size();
    o.prefix_cache = true;
    o.host_cache_bytes = host_cache;
  }
  SmallPrefixNode(const SmallPrefixNode &) = delete;
  SmallPrefixNode &operator=(const SmallPrefixNode &) = delete;
};

// How a test reaches the node's memory: host memory, or a device's.
struct NodeMemory {
  std::function<void(void *dst, const void *src, size_t n)> write;  // into the node's memory
  std::function<void(void *dst, const void *src, size_t n)> read;   // out of it
  std::function<void()> sync;  // waits for copies the node queued
};

// One layer's rows of a page in a view: where and how many bytes.
struct PageRows {
  char *at;
  size_t bytes;
};

// The compressed and indexer rows of full page `page`, in carve order
// (the host tier's slot order): per view, per layer. A view of bf16 rows
// has them P / ratio a page; a view of fp8 pages (its rows' payloads,
// then their scales, the page padded to the tier's quantum) has page k at
// k x its page stride, the page's rows its first page_rows x row_bytes
// bytes (what a slot keeps: the padding is no row's).
inline std::vector<PageRows> page_rows(kvs_node_t node, uint64_t page) {
  std::vector<PageRows> out;
  const uint64_t P = kvs_node_page(node);
  const kvs_device_layout *layout = kvs_node_layout(node);
  for (size_t i = 0; i < kvs_node_view_count(node); i++) {
    kvs_node_view v{};
    v.size = sizeof v;
    kvs_error err;
    EXPECT_EQ(kvs_node_view_at(node, i, &v, &err), KVS_OK) << err.message;
    std::string name = v.name;
    uint64_t ratio = name == "compressed_128" ? 128 : 4;
    if (name != "compressed_4" && name != "compressed_128" && name != "indexer") continue;
    EXPECT_EQ(v.ndim, 3) << name << " is a view of rows, or of pages of rows";
    const kvs_device_span *span = nullptr;
    for (const kvs_device_span &s : layout->spans) {
      if (s.count > 0 && s.offset == v.offset) span = &s;
    }
    EXPECT_NE(span, nullptr) << name;
    if (span == nullptr) continue;
    const size_t e = kvs_view_dtype_bytes(v.dtype);
    const uint64_t rows = P / ratio;
    size_t row = static_cast<size_t>(v.shape[2]) * e, page_stride = rows * row;
    if (span->page_rows != 0) {
      EXPECT_EQ(v.dtype, KVS_VIEW_UINT8) << name << " is a view of fp8 pages";
      EXPECT_EQ(span->page_rows, rows) << name;
      row = static_cast<size_t>(span->row_bytes);
      page_stride = static_cast<size_t>(v.strides[1]);
      EXPECT_GE(page_stride, rows * row) << name;
    }
    for (int64_t layer = 0; layer < v.shape[0]; layer++) {
      char *base = static_cast<char *>(v.data) + static_cast<size_t>(layer * v.strides[0]) * e;
      out.push_back({base + page * page_stride, static_cast<size_t>(rows * row)});
    }
  }
  return out;
}

// Bytes for a page of seed `seed` on rank `rank`, distinct per seed, rank
// and layer (a mix of all three every 8 bytes, so two seeds never share a
// pattern by an offset).
inline std::vector<char> pattern(const std::vector<PageRows> &rows, uint64_t seed, int rank) {
  std::vector<char> all;
  for (size_t l = 0; l < rows.size(); l++) {
    for (size_t b = 0; b < rows[l].bytes; b++) {
      uint64_t x = seed * 0x9e3779b97f4a7c15ull +
                   static_cast<uint64_t>(rank) * 0xbf58476d1ce4e5b9ull + l * 0x94d049bb133111ebull +
                   b / 8;
      x ^= x >> 31;
      x *= 0xd6e8feb96b5f3d29ull;
      x ^= x >> 29;
      all.push_back(static_cast<char>(x >> (8 * (b % 8))));
    }
  }
  return all;
}

inline void put_rows(const NodeMemory &m, const std::vector<PageRows> &rows,
                     const std::vector<char> &bytes) {
  size_t at = 0;
  for (const PageRows &r : rows) {
    m.write(r.at, bytes.data() + at, r.bytes);
    at += r.bytes;
  }
}

inline std::vector<char> get_rows(const NodeMemory &m, const std::vector<PageRows> &rows) {
  std::vector<char> all;
  for (const PageRows &r : rows) {
    std::vector<char> one(r.bytes);
    m.read(one.data(), r.at, r.bytes);
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

// The slot of the tier holding exactly `bytes`, -1 for none.
inline int64_t slot_holding(kvs_node_t node, const std::vector<char> &bytes) {
  uint64_t slot_bytes = 0, slots = 0;
  kvs_table_t table = kvs_node_table(node);
  if (kvs_table_host_tier_slot(table, 0, &slot_bytes, &slots) == nullptr ||
      slot_bytes != bytes.size()) {
    return -1;
  }
  for (uint64_t s = 0; s < slots; s++) {
    if (std::memcmp(kvs_table_host_tier_slot(table, s, nullptr, nullptr), bytes.data(),
                    bytes.size()) == 0) {
      return static_cast<int64_t>(s);
    }
  }
  return -1;
}

// One rank of the flow over a created node (every rank calls it).
// tamper_rank >= 0: that rank flips one byte of page 2's host slot between
// the spill and the fetch; its fetch step must then refuse the block by its
// seal (KVS_ERR_CORRUPT naming the slot), zero page 5, and fetch page 6 whole.
inline void host_rows_round_trip(kvs_node_t node, const NodeMemory &m, int tamper_rank = -1) {
  const int rank = kvs_node_rank(node);
  const bool leader = kvs_node_is_leader(node);
  const uint64_t P = kvs_node_page(node);
  kvs_error err;
  kvs_node_step_result r{};
  r.size = sizeof r;
  std::vector<int64_t> locs(2 * P);
  for (uint64_t i = 0; i < 2 * P; i++) locs[i] = static_cast<int64_t>(2 * P + i);
  int64_t slot = -1;
  if (leader) {
    ASSERT_EQ(kvs_node_admit(node, 1, &slot, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_bind(node, 1, locs.data(), locs.size(), &err), KVS_OK) << err.message;
  }
  ASSERT_EQ(kvs_node_step(node, nullptr, &r, &err), KVS_OK) << err.message;
  // Request 1's prefill writes pages 2 and 3.
  std::vector<PageRows> p2 = page_rows(node, 2), p3 = page_rows(node, 3);
  ASSERT_FALSE(p2.empty());
  const std::vector<char> want2 = pattern(p2, 2, rank), want3 = pattern(p3, 3, rank);
  put_rows(m, p2, want2);
  put_rows(m, p3, want3);
  const uint64_t keys[3] = {70, 80, 90};
  if (leader) {
    const int64_t pages[2] = {2, 3};
    uint8_t taken[2] = {0, 0};
    ASSERT_EQ(kvs_node_prefix_insert(node, 1, keys, pages, nullptr, 2, taken, &err), KVS_OK)
        << err.message;
    ASSERT_EQ(kvs_node_free(node, locs.data(), locs.size(), &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_prefix_release(node, 1, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_finish(node, 1, &err), KVS_OK) << err.message;
  }
  ASSERT_EQ(kvs_node_step(node, nullptr, &r, &err), KVS_OK) << err.message;
  // Pressure: both pages leave the GPU index; their rows go to the tier.
  if (leader) {
    int64_t freed[2] = {-1, -1};
    size_t n_freed = 0;
    ASSERT_EQ(kvs_node_prefix_evict(node, 2, 0, freed, 2, &n_freed, &err), KVS_OK) << err.message;
    ASSERT_EQ(n_freed, 2u);
  }
  ASSERT_EQ(kvs_node_step(node, nullptr, &r, &err), KVS_OK) << err.message;
  m.sync();
  const int64_t slot2 = slot_holding(node, want2), slot3 = slot_holding(node, want3);
  EXPECT_GE(slot2, 0) << "rank " << rank << ": page 2's rows are in a slot";
  EXPECT_GE(slot3, 0) << "rank " << rank << ": page 3's rows are in a slot";
  EXPECT_NE(slot2, slot3);
  const bool tampered = rank == tamper_rank && slot2 >= 0;
  if (tampered) {
    uint64_t bytes = 0;
    unsigned char *memory = const_cast<unsigned char *>(
        kvs_table_host_tier_slot(kvs_node_table(node), uint64_t(slot2), &bytes, nullptr));
    memory[bytes / 2] ^= 0x40;
  }
  // The freed pages are reused: their rows are overwritten.
  const std::vector<char> zeros(want2.size(), 0);
  put_rows(m, p2, zeros);
  put_rows(m, p3, zeros);
  // Request 2's prompt starts with the same two blocks: a host hit, its
  // blocks fetched into pages 5 and 6.
  if (leader) {
    kvs_node_prefix_hit hit{};
    hit.size = sizeof hit;
    ASSERT_EQ(kvs_node_prefix_match(node, keys, 3, 3 * P + 1, P, &hit, nullptr, &err), KVS_OK)
        << err.message;
    ASSERT_EQ(hit.host_pages, 2u);
    ASSERT_EQ(hit.hit_tokens, 2 * P);
    const int64_t into[2] = {5, 6};
    ASSERT_EQ(kvs_node_admit(node, 2, &slot, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_prefix_fetch(node, 2, &hit, keys, 3, into, &err), KVS_OK) << err.message;
  }
  kvs_status fetched = kvs_node_step(node, nullptr, &r, &err);
  m.sync();
  if (tampered) {
    ASSERT_EQ(fetched, KVS_ERR_CORRUPT) << err.message;
    const std::string says = "host slot " + std::to_string(slot2) + " fetched into full page 5";
    EXPECT_NE(std::string(err.message).find(says), std::string::npos) << err.message;
    EXPECT_NE(std::string(err.message).find("its rows changed since they were sealed"),
              std::string::npos)
        << err.message;
    EXPECT_TRUE(get_rows(m, page_rows(node, 5)) == zeros) << "refused rows are not used";
    EXPECT_TRUE(get_rows(m, page_rows(node, 6)) == want3) << "the other block is whole";
    kvs_node_prefix_counts c{};
    c.size = sizeof c;
    ASSERT_EQ(kvs_node_prefix_stats(node, &c, &err), KVS_OK) << err.message;
    EXPECT_EQ(c.host_failures, 1u);
  } else {
    ASSERT_EQ(fetched, KVS_OK) << err.message;
    EXPECT_TRUE(get_rows(m, page_rows(node, 5)) == want2)
        << "rank " << rank << ": page 5 holds page 2's rows again";
    EXPECT_TRUE(get_rows(m, page_rows(node, 6)) == want3)
        << "rank " << rank << ": page 6 holds page 3's rows again";
  }
  EXPECT_TRUE(get_rows(m, p2) == zeros) << "a fetch writes only its own pages";
  kvs_node_prefix_counts c{};
  c.size = sizeof c;
  ASSERT_EQ(kvs_node_prefix_stats(node, &c, &err), KVS_OK) << err.message;
  EXPECT_EQ(c.spills, 2u);
  EXPECT_EQ(c.fetches, 2u);
  kvs_table_row_stats t;
  kvs_table_row_stats_get(kvs_node_table(node), &t);
  EXPECT_EQ(t.spills, 2u);
  EXPECT_EQ(t.fetches, 2u);
  EXPECT_EQ(t.bytes, 4 * want2.size());
  EXPECT_EQ(kvs_node_check(node, nullptr, &err), KVS_OK) << err.message;
}

}  // namespace kvs_test

#endif  // KVS_TESTS_SHARD_HOST_ROWS_FLOW_H

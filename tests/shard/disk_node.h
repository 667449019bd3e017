// The disk tier's test nodes: host-twin nodes of the small model made
// from flags (kvs_node_create_flags, as an engine would), each with a
// prefix cache and a disk tier in a folder of the test's; and the steps
// of a flow every rank runs: a prompt's pages written with rows of the
// rank's own and cached, blocks fetched back into fresh pages. Shared by
// node_disk_test (write-through, restart, agreement, refusals, a corrupt
// block) and node_disk_power_loss_test (every crash state of the tier's
// writes).
#ifndef KVS_TESTS_SHARD_DISK_NODE_H
#define KVS_TESTS_SHARD_DISK_NODE_H

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "blocks/block_store.h"
#include "pool/window_pool.h"
#include "shard/node.h"
#include "shard/node_disk.h"
#include "tests/shard/host_rows_flow.h"

namespace kvs_test {

// A fresh folder under the test's temporary directory ("" on failure).
inline std::string fresh_dir(const char *tag) {
  const char *tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + tag + "-XXXXXX";
  return mkdtemp(dir.data()) != nullptr ? dir : "";
}

// The small model (small_model_fp8's layers: window-only, CSA, HCA, CSA;
// 128-wide KV rows with a 64-wide rope part, 128-wide indexer rows) as a
// model config, so flags can name it (--model FILE) in either KV dtype.
inline std::string small_config(const std::string &dir) {
  std::string path = dir + "/config.json";
  FILE *f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return "";
  std::fputs(
      "{\"num_hidden_layers\": 4, \"head_dim\": 128, \"index_head_dim\": 128, "
      "\"qk_rope_head_dim\": 64, \"sliding_window\": 128, \"num_nextn_predict_layers\": 0, "
      "\"compress_ratios\": [0, 4, 128, 4]}\n",
      f);
  return std::fclose(f) == 0 ? path : "";
}

// What a disk node is made of: the flags differ only in these.
struct DiskSetup {
  std::string config;                 // small_config's path
  std::string path;                   // --disk-path
  std::string model = "small-disk";   // --disk-model
  std::string dtype = "fp8";          // --kv-dtype
  uint64_t page = 128;                // --page
  uint64_t disk_bytes = 64ull << 20;  // --disk-cache
  int tp = 1;
  std::vector<std::string> extra;  // more flags
};

inline std::vector<std::string> disk_flags(const DiskSetup &s) {
  std::vector<std::string> f = {"--model=" + s.config,
                                "--kv-dtype=" + s.dtype,
                                "--page=" + std::to_string(s.page),
                                "--swa-ratio=0.04",
                                "--max-seq-len=4096",
                                "--max-running=4",
                                "--no-radix",
                                "--tp=" + std::to_string(s.tp),
                                "--topology=bundled",
                                "--device=cpu",
                                "--no-bind-numa",
                                "--budget=12MiB",
                                "--prefix-cache",
                                "--disk-cache=" + std::to_string(s.disk_bytes) + "B",
                                "--disk-path=" + s.path,
                                "--disk-model=" + s.model};
  f.insert(f.end(), s.extra.begin(), s.extra.end());
  return f;
}

inline kvs_status create_from(kvs_comm_t comm, const std::vector<std::string> &flags,
                              kvs_node_t *node, kvs_error *err) {
  std::vector<const char *> argv;
  for (const std::string &f : flags) argv.push_back(f.c_str());
  return kvs_node_create_flags(comm, argv.data(), argv.size(), node, err);
}

inline NodeMemory host_memory() {
  NodeMemory m;
  m.write = [](void *dst, const void *src, size_t n) { std::memcpy(dst, src, n); };
  m.read = [](void *dst, const void *src, size_t n) { std::memcpy(dst, src, n); };
  m.sync = [] {};
  return m;
}

inline kvs_node_prefix_counts counts_of(kvs_node_t node) {
  kvs_node_prefix_counts c{};
  c.size = sizeof c;
  kvs_error err;
  EXPECT_EQ(kvs_node_prefix_stats(node, &c, &err), KVS_OK) << err.message;
  return c;
}

inline void step(kvs_node_t node) {
  kvs_node_step_result r{};
  r.size = sizeof r;
  kvs_error err;
  ASSERT_EQ(kvs_node_step(node, nullptr, &r, &err), KVS_OK)
      << "rank " << kvs_node_rank(node) << ": " << err.message;
}

// Steps (every rank alike: the counts are the replicated pool's) until
// the tier has written `stores` blocks, at most `limit` steps.
inline void step_until_stored(kvs_node_t node, uint64_t stores, int limit = 8) {
  for (int i = 0; i < limit && counts_of(node).stores < stores; i++) {
    step(node);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The rows of a rank's block of seed `seed`: distinct per seed and rank.
inline std::vector<char> block_rows(kvs_node_t node, uint64_t seed) {
  return pattern(page_rows(node, 0), seed, kvs_node_rank(node));
}

// One rank's part of caching a prompt: request `request` prefills full
// pages pages[i] with rows of seeds[i] (each rank its own), and the leader
// caches them as blocks keys[i] (the request's first pages) and lets go.
// Two steps.
inline void cache_prompt(kvs_node_t node, uint64_t request, const std::vector<int64_t> &pages,
                         const std::vector<uint64_t> &keys, const std::vector<uint64_t> &seeds) {
  const bool leader = kvs_node_is_leader(node);
  kvs_error err;
  if (leader) {
    int64_t slot = -1;
    ASSERT_EQ(kvs_node_admit(node, request, &slot, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_bind_pages(node, request, pages.data(), pages.size(), &err), KVS_OK)
        << err.message;
  }
  step(node);
  if (::testing::Test::HasFatalFailure()) return;
  const NodeMemory m = host_memory();
  for (size_t i = 0; i < pages.size(); i++) {
    put_rows(m, page_rows(node, static_cast<uint64_t>(pages[i])), block_rows(node, seeds[i]));
  }
  if (leader) {
    std::vector<uint8_t> taken(pages.size(), 0);
    ASSERT_EQ(kvs_node_prefix_insert(node, request, keys.data(), pages.data(), nullptr,
                                     pages.size(), taken.data(), &err),
              KVS_OK)
        << err.message;
    ASSERT_EQ(kvs_node_free_pages(node, pages.data(), pages.size(), &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_prefix_release(node, request, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_finish(node, request, &err), KVS_OK) << err.message;
  }
  step(node);
}

// The leader evicts every cached block it can (no host tier: they leave
// the GPU index); one step.
inline void evict_all(kvs_node_t node) {
  if (kvs_node_is_leader(node)) {
    std::vector<int64_t> freed(kvs_node_num_pages(node));
    size_t n_freed = 0;
    kvs_error err;
    ASSERT_EQ(
        kvs_node_prefix_evict(node, freed.size(), 0, freed.data(), freed.size(), &n_freed, &err),
        KVS_OK)
        << err.message;
  }
  step(node);
}

// The leader's match of a prompt of keys (one more key than the blocks it
// may reach, so the hit is the blocks), the eviction the hit needs and
// its fetch into `into` for request `request`; *hit the match. The step
// that moves the rows is the caller's.
inline void fetch_prompt(kvs_node_t node, uint64_t request, const std::vector<uint64_t> &keys,
                         const std::vector<int64_t> &into, kvs_node_prefix_hit *hit) {
  const uint64_t P = kvs_node_page(node);
  kvs_error err;
  *hit = kvs_node_prefix_hit{};
  hit->size = sizeof *hit;
  ASSERT_EQ(kvs_node_prefix_match(node, keys.data(), keys.size(), keys.size() * P + 1, P, hit,
                                  nullptr, &err),
            KVS_OK)
      << err.message;
  if (hit->host_pages == 0) return;
  std::vector<int64_t> freed(hit->host_pages + 1);
  size_t n_freed = 0;
  ASSERT_EQ(kvs_node_prefix_evict_for_fetch(node, hit, keys.data(), keys.size(), 0, freed.data(),
                                            freed.size(), &n_freed, &err),
            KVS_OK)
      << err.message;
  int64_t slot = -1;
  ASSERT_EQ(kvs_node_admit(node, request, &slot, &err), KVS_OK) << err.message;
  ASSERT_GE(into.size(), hit->host_pages);
  ASSERT_EQ(kvs_node_prefix_fetch(node, request, hit, keys.data(), keys.size(), into.data(), &err),
            KVS_OK)
      << err.message;
}

// The store key and file name of a pool chain's block.
inline std::string block_file(uint64_t chain) {
  kvs_block_hash key = {KVS_NODE_DISK_KEY_HIGH, chain};
  char name[KVS_BLOCK_STORE_NAME_MAX];
  return kvs_block_store_file_name(&key, name);
}

// The chain of the cached block at full page `page`.
inline uint64_t chain_at(kvs_node_t node, int64_t page) {
  uint64_t chain = 0, depth = 0;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_prefix_block(kvs_node_pool(node), static_cast<uint64_t>(page), &chain,
                                         &depth, &err),
            KVS_OK)
      << err.message;
  return chain;
}

// The names in a folder ending in `suffix`, sorted.
inline std::vector<std::string> files_in(const std::string &dir, const std::string &suffix) {
  std::vector<std::string> out;
  DIR *d = opendir(dir.c_str());
  if (d == nullptr) return out;
  for (struct dirent *e; (e = readdir(d)) != nullptr;) {
    std::string n = e->d_name;
    if (n.size() >= suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

inline std::string rank_dir(const std::string &path, int rank) {
  return path + "/rank-" + std::to_string(rank);
}

}  // namespace kvs_test

#endif  // KVS_TESTS_SHARD_DISK_NODE_H

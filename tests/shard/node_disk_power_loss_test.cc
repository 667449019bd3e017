// Power loss for the node's disk tier: every state a crash could leave in
// a rank's folder while the node writes its blocks.
//
// The workload is a host-twin node (one rank, the small model, fp8 rows)
// whose disk tier holds six blocks: prompts are cached (each block written
// through), evicted, fetched back from the tier and cached again, so the
// tier's writes fill it and then replace its least recently used blocks
// (a remove, then a put). Its file-system operations in the rank's folder
// are recorded, and every crash state is built from the log
// (tests/blocks/crash_states.h, the block store's power-loss model). The
// node's own calls into the store (kvs_block_store_put_page and
// kvs_block_store_remove, wrapped at link time: -Wl,--wrap) say when each
// put and remove was called and returned, and what rows each put wrote.
//
// Each distinct state is reopened as a new node over the folder (its
// creation lists the blocks, verifies each at its own position and agrees
// on them), and the test asserts:
//   - nothing wrong is read back: every block the node accepts holds
//     exactly the rows one put of that block wrote (and not one put before
//     a remove that returned); no file under a block name is left that the
//     node did not accept (nothing torn or foreign in place); no temporary
//     file survives;
//   - nothing is lost: every block whose put returned, and whose file no
//     remove has touched since, is found and agreed on.
// The checker is checked: over the log without the file fsyncs a block is
// lost or torn, without the directory fsyncs a returned put is lost, and
// without the removes' directory fsyncs a removed block comes back.
// KVS_POWER_SEED seeds the torn states beyond 7 dirty blocks.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "blocks/block_store.h"
#include "blocks/page_codec.h"
#include "tests/blocks/crash_states.h"
#include "tests/shard/disk_node.h"

using namespace kvs_test::crash;

namespace {

// What the node's store calls did while recording: put i of the history
// wrote written[i] (its sections' bytes, in order).
History history;
std::vector<std::vector<uint8_t>> written;

std::vector<uint8_t> rows_of(const kvs_page_section *sections, size_t n) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < n; i++) {
    const uint8_t *b = static_cast<const uint8_t *>(sections[i].bytes);
    out.insert(out.end(), b, b + sections[i].n_bytes);
  }
  return out;
}

}  // namespace

// The node's calls into its store (-Wl,--wrap): when each was called and
// returned, in the recorder's operations.
extern "C" {

kvs_status __real_kvs_block_store_put_page(kvs_block_store_t s, const kvs_block_hash *key,
                                           const struct kvs_page_block *block, kvs_error *err);
kvs_status __real_kvs_block_store_remove(kvs_block_store_t s, const kvs_block_hash *key,
                                         kvs_error *err);

kvs_status __wrap_kvs_block_store_put_page(kvs_block_store_t s, const kvs_block_hash *key,
                                           const struct kvs_page_block *block, kvs_error *err) {
  Call call;
  call.key = key->low;
  call.begin = rec.ops.size();
  kvs_status st = __real_kvs_block_store_put_page(s, key, block, err);
  call.end = rec.ops.size();
  if (rec.mode == Mode::kRecord && st == KVS_OK) {
    history.put(call);
    size_t n = 0;
    const kvs_page_section *sections = kvs_page_block_sections(block, &n);
    written.push_back(rows_of(sections, n));
  }
  return st;
}

kvs_status __wrap_kvs_block_store_remove(kvs_block_store_t s, const kvs_block_hash *key,
                                         kvs_error *err) {
  Call call;
  call.key = key->low;
  call.begin = rec.ops.size();
  kvs_status st = __real_kvs_block_store_remove(s, key, err);
  call.end = rec.ops.size();
  if (rec.mode == Mode::kRecord && st == KVS_OK) history.remove(call);
  return st;
}

}  // extern "C"

namespace {

constexpr uint64_t kSlots = 6;

// The workload's node: one rank, a tier of kSlots blocks in `disk`.
kvs_test::DiskSetup setup_of(const std::string &config, const std::string &disk,
                             uint64_t disk_bytes) {
  kvs_test::DiskSetup s;
  s.config = config;
  s.path = disk;
  s.disk_bytes = disk_bytes;
  return s;
}

struct Workload {
  uint64_t stores = 0, removes = 0, loads = 0, steps = 0;
};

// Caches prompts of three blocks, evicts, fetches one back from the tier
// and caches others, so the six slots fill and are replaced.
void run_workload(kvs_comm_t comm, const kvs_test::DiskSetup &s, Workload *w) {
  kvs_node_t node = nullptr;
  kvs_error err;
  record(kvs_test::rank_dir(s.path, 0));
  ASSERT_EQ(kvs_test::create_from(comm, kvs_test::disk_flags(s), &node, &err), KVS_OK)
      << err.message;
  ASSERT_EQ(kvs_test::counts_of(node).disk_slots, kSlots);
  uint64_t request = 1, seed = 1000;
  // Each caching writes rows of its own (a block cached twice is written
  // with other rows the second time, so a crash cannot pass the first
  // version off as the second).
  auto cache = [&](const std::vector<uint64_t> &keys) {
    std::vector<int64_t> pages;
    std::vector<uint64_t> seeds;
    for (size_t i = 0; i < keys.size(); i++) {
      pages.push_back(2 + static_cast<int64_t>(i));
      seeds.push_back(seed + keys[i]);
    }
    seed += 100;
    kvs_test::cache_prompt(node, request++, pages, keys, seeds);
    kvs_test::evict_all(node);
  };
  // A prompt read back from the tier (no writes: it becomes its most
  // recently used blocks).
  auto read_back = [&](const std::vector<uint64_t> &keys) {
    std::vector<uint64_t> prompt = keys;
    prompt.push_back(99);
    kvs_node_prefix_hit hit{};
    kvs_test::fetch_prompt(node, request++, prompt, {5, 6, 7}, &hit);
    EXPECT_EQ(hit.disk_pages, keys.size());
    kvs_test::step(node);
    ASSERT_EQ(kvs_node_prefix_release(node, request - 1, &err), KVS_OK) << err.message;
    ASSERT_EQ(kvs_node_finish(node, request - 1, &err), KVS_OK) << err.message;
    kvs_test::evict_all(node);
  };
  cache({1, 2, 3});
  cache({4, 5, 6});  // the tier is full
  cache({7, 8, 9});  // replaces the first prompt's blocks
  cache({1, 2, 3});  // written again, replacing the second's
  read_back({7, 8, 9});
  cache({10, 11, 12});  // replaces the first prompt's again
  cache({13, 14});      // and the third's first two
  cache({4, 5, 6});     // the second, removed long ago, written again
  read_back({13, 14});
  cache({15, 16, 17});
  cache({18, 19});
  kvs_node_prefix_counts c = kvs_test::counts_of(node);
  w->stores = c.stores;
  w->loads = c.loads;
  w->steps = kvs_node_next_step(node);
  EXPECT_EQ(c.disk_failures, 0u);
  kvs_node_destroy(node);
  stop();
  ASSERT_EQ(rec.unsupported, "") << "the node made a call the model does not cover";
  for (const auto &e : history.removes_of) w->removes += e.second.size();
}

// Reopens each state as a new node and says what is wrong.
struct Checker {
  const std::vector<Op> &ops;
  kvs_test::DiskSetup setup;  // over the states' folder
  StateDir states;            // its rank-0 folder
  kvs_comm_t comm;
  uint64_t checked = 0, agreed = 0, temps = 0, most_blocks = 0;

  std::vector<std::string> check(size_t point, const DirState &state) {
    std::string problem;
    if (!states.lay_out(state, &problem)) return {problem};
    const std::string &dir = states.dir;
    size_t temps_here = 0;
    for (const auto &e : state) temps_here += e.first.rfind(".tmp-", 0) == 0;
    std::vector<std::string> wrong;
    kvs_node_t node = nullptr;
    kvs_error err;
    observe(dir);
    kvs_status made = kvs_test::create_from(comm, kvs_test::disk_flags(setup), &node, &err);
    stop();
    if (made != KVS_OK) return {std::string("reopening failed: ") + err.message};
    std::set<std::string> unlinked(rec.observed_unlinks.begin(), rec.observed_unlinks.end());
    kvs_node_prefix_counts c = kvs_test::counts_of(node);
    std::vector<uint64_t> chains(kSlots);
    chains.resize(kvs_window_pool_prefix_disk_chains(kvs_node_pool(node), chains.data(), kSlots));
    std::set<std::string> accepted;
    for (uint64_t chain : chains) accepted.insert(kvs_test::block_file(chain));
    if (c.disk_refused != 0) wrong.push_back(std::to_string(c.disk_refused) + " blocks refused");
    for (const std::string &n : states.settle({".lock"})) wrong.push_back("the node made " + n);
    for (const auto &e : states.disk) {
      if (e.first.rfind(".tmp-", 0) == 0) wrong.push_back("a temporary file survived: " + e.first);
      if (e.first.size() > 4 && e.first.compare(e.first.size() - 4, 4, ".kvb") == 0 &&
          accepted.count(e.first) == 0) {
        wrong.push_back("a file under a block name the node did not accept: " + e.first);
      }
    }
    for (const std::string &n : unlinked) {
      if (n.rfind(".tmp-", 0) == 0) temps++;
    }
    // Every accepted block holds the rows of one put it may hold.
    for (uint64_t chain : chains) {
      const std::string name = kvs_test::block_file(chain);
      Promise p = promise(history, ops, chain, name, point);
      uint8_t *bytes = nullptr;
      size_t len = 0;
      kvs_error rerr;
      if (kvs_block_store_read_file((dir + "/" + name).c_str(), &bytes, &len, &rerr) != KVS_OK) {
        wrong.push_back(name + " was accepted but cannot be read: " + rerr.message);
        continue;
      }
      kvs_page_block_view view;
      kvs_page_section sections[KVS_PAGE_MAX_SECTIONS];
      bool decoded = kvs_page_block_decode_view(bytes, len, &view, sections, KVS_PAGE_MAX_SECTIONS,
                                                &rerr) == KVS_OK;
      std::vector<uint8_t> rows =
          decoded ? rows_of(sections, view.n_sections) : std::vector<uint8_t>();
      free(bytes);
      bool known = false;
      for (size_t i : p.allowed) known = known || written[i] == rows;
      if (known) continue;
      bool ever = false;
      auto puts = history.puts_of.find(chain);
      for (size_t i : puts != history.puts_of.end() ? puts->second : std::vector<size_t>()) {
        ever = ever || written[i] == rows;
      }
      wrong.push_back(name + (p.removed != nullptr && ever
                                  ? ": its remove returned after operation " +
                                        std::to_string(p.removed->end) + ", and it came back"
                                  : ": holds rows no put of it wrote"));
    }
    // Nothing promised is lost.
    for (const auto &e : history.puts_of) {
      const std::string name = kvs_test::block_file(e.first);
      Promise p = promise(history, ops, e.first, name, point);
      if (p.required && accepted.count(name) == 0) {
        wrong.push_back(name + ": its put returned after operation " +
                        std::to_string(p.returned->end) + ", and it is " +
                        (unlinked.count(name) > 0 ? "removed by the reopened node" : "lost"));
      }
    }
    if (c.disk_agreed != chains.size() || c.disk_found != chains.size()) {
      wrong.push_back("found " + std::to_string(c.disk_found) + " and agreed on " +
                      std::to_string(c.disk_agreed) + " blocks, seeded " +
                      std::to_string(chains.size()));
    }
    agreed += chains.size();
    most_blocks = std::max<uint64_t>(most_blocks, chains.size());
    kvs_node_destroy(node);
    checked++;
    return wrong;
  }
};

}  // namespace

TEST(NodeDiskPowerLoss, every_crash_state_of_the_tiers_writes_reopens_sound_and_loses_nothing) {
  const char *given = std::getenv("KVS_POWER_SEED");
  const uint64_t seed =
      given != nullptr ? std::strtoull(given, nullptr, 10) : static_cast<uint64_t>(time(nullptr));
  std::printf("disk power loss: KVS_POWER_SEED=%llu\n", static_cast<unsigned long long>(seed));
  auto t0 = std::chrono::steady_clock::now();
  const std::string root = kvs_test::fresh_dir("disk-power");
  ASSERT_FALSE(root.empty());
  const std::string config = kvs_test::small_config(root);
  ASSERT_FALSE(config.empty());
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK) << err.message;

  // A slot costs the machine every rank's page of rows (8 ranks of tp 1
  // on the bundled server): the tier's bytes for kSlots of them.
  uint64_t slot_cost = 0;
  {
    kvs_test::DiskSetup probe = setup_of(config, root + "/probe", 64ull << 20);
    kvs_node_t node = nullptr;
    ASSERT_EQ(kvs_test::create_from(comm, kvs_test::disk_flags(probe), &node, &err), KVS_OK)
        << err.message;
    slot_cost = probe.disk_bytes / kvs_test::counts_of(node).disk_slots;
    kvs_node_destroy(node);
  }
  const uint64_t disk_bytes = kSlots * slot_cost + slot_cost / 2;
  Workload w;
  run_workload(comm, setup_of(config, root + "/disk", disk_bytes), &w);
  if (HasFatalFailure()) return;
  const std::vector<Op> ops = rec.ops;
  EXPECT_EQ(history.puts.size(), w.stores) << "every store is one put";
  EXPECT_EQ(w.stores, 25u);
  EXPECT_EQ(w.removes, 19u) << "a full tier's stores replace its blocks";
  EXPECT_EQ(w.loads, 5u);
  for (size_t i = 0; i < written.size(); i++) EXPECT_FALSE(written[i].empty());

  const std::string states = root + "/states";
  ASSERT_EQ(mkdir(states.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((states + "/rank-0").c_str(), 0755), 0);
  Checker checker{ops, setup_of(config, states, disk_bytes), {states + "/rank-0", {}}, comm};
  Exploration e = explore_and_check(
      [&](size_t point, const DirState &state) { return checker.check(point, state); }, ops, seed,
      5);
  for (const std::string &f : e.failures) ADD_FAILURE() << f << "\n  KVS_POWER_SEED=" << seed;
  EXPECT_GE(e.checked, 1800u) << "the workload explores at least 1,800 crash states";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The checker is checked on the log without the fsyncs that matter.
  struct Mutant {
    const char *what;
    std::vector<Op> ops;
    const char *must_say;
  };
  const std::vector<Mutant> mutants = {
      {"file fsyncs", without(ops, OpKind::kFsync, ops.size()), ""},
      {"directory fsyncs", without(ops, OpKind::kDirSync, ops.size()), "lost"},
      {"removes' directory fsyncs", without_remove_dirsyncs(history, ops, ops.size()), "came back"},
  };
  for (size_t m = 0; m < mutants.size(); m++) {
    const std::string dir = root + "/mutant" + std::to_string(m);
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir + "/rank-0").c_str(), 0755), 0);
    Checker mc{mutants[m].ops, setup_of(config, dir, disk_bytes), {dir + "/rank-0", {}}, comm};
    Exploration me = explore_and_check(
        [&](size_t point, const DirState &state) { return mc.check(point, state); }, mutants[m].ops,
        seed, 1);
    ASSERT_FALSE(me.failures.empty())
        << "with the " << mutants[m].what << " taken out, no crash state broke a promise";
    EXPECT_NE(me.failures[0].find(mutants[m].must_say), std::string::npos) << me.failures[0];
    std::printf("disk power loss: without the %s the checker fails after %llu states: %s\n",
                mutants[m].what, static_cast<unsigned long long>(me.checked),
                one_line(me.failures[0]).c_str());
  }

  size_t file_syncs = 0, dir_syncs = 0;
  for (const Op &op : ops) {
    file_syncs += op.kind == OpKind::kFsync;
    dir_syncs += op.kind == OpKind::kDirSync;
  }
  std::printf(
      "disk power loss: %llu crash states checked, each reopened as a node (%llu generated, %llu "
      "distinct disk images) at %llu crash points over %zu file-system operations (%zu file "
      "fsyncs, %zu directory fsyncs) of %llu steps: %llu block writes, %llu removes, %llu reads "
      "back; %llu blocks agreed on over the states (at most %llu in one), %llu temporary files "
      "cleaned; %zu unsound; %.1f s (%.1f s with the checker's own checks)\n",
      static_cast<unsigned long long>(e.checked), static_cast<unsigned long long>(e.generated),
      static_cast<unsigned long long>(e.images), static_cast<unsigned long long>(e.points),
      ops.size(), file_syncs, dir_syncs, static_cast<unsigned long long>(w.steps),
      static_cast<unsigned long long>(w.stores), static_cast<unsigned long long>(w.removes),
      static_cast<unsigned long long>(w.loads), static_cast<unsigned long long>(checker.agreed),
      static_cast<unsigned long long>(checker.most_blocks),
      static_cast<unsigned long long>(checker.temps), e.failures.size(), seconds,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  kvs_comm_destroy(comm);
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
}

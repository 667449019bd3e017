// Power loss for the block store: every state a crash could leave on disk.
//
// SIGKILL (crash_test.cc) keeps the page cache, so it cannot see a missing
// fsync. Here the store's file-system operations during a workload of
// puts, overwrites, removes and evictions are recorded, and every state a
// power loss could leave is built from the log (tests/blocks/
// crash_states.h: the recorder, the crash-state model and the explorer,
// shared with the node's disk tier's test).
//
// The store is reopened (as a writer: the recovery path) on each state,
// and the test asserts: every put that returned is there and verifies,
// unless the workload removed or the store evicted it since; a block whose
// remove returned stays gone (NOT_FOUND) until it is put again, and no
// crash brings back a version put before that remove; nothing torn is ever
// returned (every get yields exactly a version that was put, or NOT_FOUND,
// and no file under a block name is corrupt); the open scan removes every
// temporary file a crashed put left. Identical states are checked once;
// the figure reported counts distinct states.
//
// The checker is itself checked: the same exploration over the log with
// the file fsyncs taken out (as if the store skipped them) must find a
// torn or lost block, with the directory fsyncs taken out a lost one, and
// with only the removes' directory fsyncs taken out a removed block that
// came back.
//
// Every fifth key holds DSV4 page blocks (format version 3) beside the
// version 2 blocks, through the store's page calls.
// KVS_POWER_SEED fixes the workload (printed, to replay a failure);
// KVS_POWER_PUTS sets its length (default 200 puts).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "blocks/block_codec.h"
#include "blocks/block_store.h"
#include "tests/blocks/crash_states.h"
#include "tests/blocks/page_test_util.h"
#include "tests/blocks/store_test_util.h"

using namespace kvs_test;
using namespace kvs_test::crash;

namespace {

// ---- the workload and what it promises ----

// Every key keeps one shape (so one reader verifies all its versions);
// files span 1 to 7 file-system blocks, mostly 4 to 7, so that a torn
// write has many ways to land.
Shape shape_of(uint64_t key) {
  static const uint32_t head_dims[] = {24, 200, 300, 384, 400, 420};
  Shape s;
  s.n_layers = 2;
  s.n_kv_heads = 1;
  s.block_size = 4;
  s.head_dim = head_dims[key % 6];
  s.dtype = key % 4 == 3 ? KVS_DTYPE_BF16 : KVS_DTYPE_F32;
  return s;
}

// Every fifth key holds DSV4 page blocks (format version 3), put and got
// through the page calls: 16-token pages of 1 to 3 ratio-4 layers (fp8
// compressed and indexer rows, f32 tail states), 1 to 3 file-system
// blocks, checked against the pages regenerated from their seeds.
bool is_page_key(uint64_t key) { return key % 5 == 2; }

Page page_for(uint64_t key, uint64_t seed) {
  PageSpec spec;
  spec.csa_layers = 1 + static_cast<uint32_t>(key % 3);
  return make_page(spec, key_of(key), key, seed);
}

// What put i of the workload wrote (History::puts[i] says when).
struct Version {
  uint64_t seed = 0;
  std::vector<Layer> payload;  // version 2 keys; a page is regenerated from its seed
};

std::string name_of(uint64_t key) {
  char name[KVS_BLOCK_STORE_NAME_MAX];
  kvs_block_hash h = key_of(key);
  return kvs_block_store_file_name(&h, name);
}

struct Workload {
  uint64_t capacity = 0;
  History history;
  std::vector<Version> versions;  // history.puts' index
  uint64_t puts = 0, overwrites = 0, removes = 0, page_puts = 0;
};

// ---- checking one state ----

struct Checker {
  const Workload &w;
  const std::vector<Op> &ops;
  StateDir states;  // where states are laid out
  uint64_t checked = 0, temp_removed = 0, evicted = 0, verified_gets = 0;

  // Reopens the store on the state; returns what is wrong (empty: sound).
  std::vector<std::string> check(size_t point, const DirState &state) {
    std::vector<std::string> wrong;
    std::string problem;
    if (!states.lay_out(state, &problem)) return {problem};
    const std::string &dir = states.dir;
    size_t temps = 0;
    for (const auto &e : state) temps += e.first.rfind(".tmp-", 0) == 0;

    struct Corrupt {
      std::vector<std::string> names;
    } corrupt;
    kvs_block_store_options o = KVS_BLOCK_STORE_OPTIONS_INIT;
    o.capacity_bytes = w.capacity;
    o.on_corrupt = [](void *ctx, const char *name, const kvs_error *why) {
      static_cast<Corrupt *>(ctx)->names.push_back(std::string(name) + ": " + why->message);
    };
    o.on_corrupt_ctx = &corrupt;
    kvs_block_store_t s = nullptr;
    kvs_block_store_scan scan{};
    kvs_error err;
    observe(dir);
    kvs_status st = kvs_block_store_create(dir.c_str(), &o, &s, &scan, &err);
    stop();
    if (st != KVS_OK) return {std::string("reopening failed: ") + err.message};
    for (const std::string &c : corrupt.names)
      wrong.push_back("torn file under a block name: " + c);
    if (scan.temp_removed != temps) {
      wrong.push_back("the scan removed " + std::to_string(scan.temp_removed) + " of " +
                      std::to_string(temps) + " temporary files");
    }
    temp_removed += scan.temp_removed;
    evicted += scan.evicted;
    std::set<std::string> evicted_now;
    for (const std::string &n : rec.observed_unlinks) {
      if (n.rfind(".tmp-", 0) != 0) evicted_now.insert(n);
    }

    // What is on disk after the scan: a subset of the state, plus the lock.
    for (const std::string &n : list_dir(dir)) {
      if (n.rfind(".tmp-", 0) == 0) wrong.push_back("a temporary file survived the scan: " + n);
    }
    for (const std::string &n : states.settle({".lock"})) wrong.push_back("the scan created " + n);

    for (const auto &entry : w.history.puts_of) {
      uint64_t key = entry.first;
      Promise p = promise(w.history, ops, key, name_of(key), point);
      // Never put before this point (a removed key is checked: it must
      // stay gone).
      if (p.allowed.empty() && p.removed == nullptr) continue;
      // A key with no file in the state and nothing promised: the listing
      // above already showed the scan conjured no file.
      if (!p.required && state.count(name_of(key)) == 0) continue;
      kvs_block_hash h = key_of(key);
      kvs_error gerr;
      kvs_status gs;
      // Whether what get returned is exactly version v (by kind).
      std::function<bool(const Version &)> holds;
      kvs_block_t b = nullptr;
      kvs_page_block_t pb = nullptr;
      if (is_page_key(key)) {
        kvs_page_signature reader = page_for(key, 1).reader();
        gs = kvs_block_store_get_page(s, &h, &reader, &pb, nullptr, &gerr);
        holds = [&](const Version &v) { return same_page(pb, page_for(key, v.seed)); };
      } else {
        kvs_block_signature reader = reader_for(shape_of(key));
        gs = kvs_block_store_get(s, &h, &reader, &b, nullptr, &gerr);
        holds = [&](const Version &v) {
          size_t n = 0;
          const kvs_block_layer *got = kvs_block_layers(b, &n);
          std::vector<kvs_block_layer> want = views(v.payload);
          return same_payload(got, n, want.data(), want.size());
        };
      }
      std::string name = name_of(key);
      if (gs == KVS_OK) {
        bool known = false;
        for (size_t i : p.allowed) known = known || holds(w.versions[i]);
        if (!known && p.removed != nullptr) {
          // Which version came back, to say so.
          std::string seed = "a version never put";
          for (size_t i : w.history.puts_of.at(key)) {
            if (holds(w.versions[i]))
              seed = "its put of seed " + std::to_string(w.versions[i].seed);
          }
          wrong.push_back("key " + std::to_string(key) + ": its remove returned after operation " +
                          std::to_string(p.removed->end) + ", and " + seed + " came back");
        } else if (!known) {
          wrong.push_back("key " + std::to_string(key) + " returned a version never put");
        }
        verified_gets++;
      } else if (gs == KVS_ERR_NOT_FOUND) {
        if (p.required && evicted_now.count(name) == 0) {
          wrong.push_back("key " + std::to_string(key) + ": its put of seed " +
                          std::to_string(w.versions[p.returned_put].seed) +
                          " returned after operation " + std::to_string(p.returned->end) +
                          ", and it is gone");
        }
      } else {
        wrong.push_back("key " + std::to_string(key) + ": " + kvs_status_string(gs) + ": " +
                        gerr.message);
      }
      kvs_page_block_destroy(pb);
      kvs_block_destroy(b);
    }
    if (kvs_block_store_capacity(s) > 0 && kvs_block_store_bytes(s) > w.capacity) {
      wrong.push_back("the store holds more than its capacity after the scan");
    }
    kvs_block_store_destroy(s);
    checked++;
    return wrong;
  }
};

// Runs the workload on a real store in `dir` with the recorder on.
void run_workload(const std::string &dir, uint64_t seed, uint64_t n_puts, Workload *w) {
  std::mt19937_64 rng(seed);
  record(dir);
  kvs_block_store_options o = KVS_BLOCK_STORE_OPTIONS_INIT;
  o.capacity_bytes = w->capacity;
  kvs_block_store_t s = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_block_store_create(dir.c_str(), &o, &s, nullptr, &err), KVS_OK) << err.message;
  uint64_t next_key = 0, next_seed = 1;
  while (w->puts < n_puts) {
    uint64_t r = rng() % 100;
    std::vector<uint64_t> present;
    for (const auto &e : w->history.puts_of) {
      kvs_block_hash h = key_of(e.first);
      if (kvs_block_store_contains(s, &h)) present.push_back(e.first);
    }
    if (r < 8 && !present.empty()) {
      uint64_t key = present[rng() % present.size()];
      kvs_block_hash h = key_of(key);
      Call removal;
      removal.key = key;
      removal.begin = rec.ops.size();
      ASSERT_EQ(kvs_block_store_remove(s, &h, &err), KVS_OK) << err.message;
      removal.end = rec.ops.size();
      w->history.remove(removal);
      w->removes++;
      continue;
    }
    uint64_t key = next_key;
    if (r < 35 && !present.empty()) {
      key = present[rng() % present.size()];
      w->overwrites++;
    } else {
      next_key++;
    }
    Version v;
    Call call;
    call.key = key;
    v.seed = next_seed++;
    kvs_block_hash h = key_of(key);
    kvs_status st;
    if (is_page_key(key)) {
      kvs_page_block_t b = stamp_page(page_for(key, v.seed));
      ASSERT_NE(b, nullptr);
      call.begin = rec.ops.size();
      st = kvs_block_store_put_page(s, &h, b, &err);
      call.end = rec.ops.size();
      kvs_page_block_destroy(b);
    } else {
      Shape shape = shape_of(key);
      v.payload = payload(shape.n_layers, shape.n_kv_heads, shape.head_dim, shape.block_size,
                          shape.dtype, v.seed);
      kvs_block_t b = make_block(shape, v.seed);
      ASSERT_NE(b, nullptr);
      call.begin = rec.ops.size();
      st = kvs_block_store_put(s, &h, b, &err);
      call.end = rec.ops.size();
      kvs_block_destroy(b);
    }
    ASSERT_EQ(st, KVS_OK) << err.message;
    w->history.put(call);
    w->versions.push_back(std::move(v));
    w->puts++;
    if (is_page_key(key)) w->page_puts++;
  }
  kvs_block_store_destroy(s);
  stop();
  ASSERT_EQ(rec.unsupported, "") << "the store made a call the model does not cover";
}

}  // namespace

TEST(BlockStorePowerLoss, every_crash_state_keeps_returned_puts_and_shows_nothing_torn) {
  const uint64_t seed = env_u64("KVS_POWER_SEED", static_cast<uint64_t>(time(nullptr)));
  const uint64_t n_puts = env_u64("KVS_POWER_PUTS", 200);
  std::printf(
      "power loss: %llu puts, KVS_POWER_SEED=%llu (replay: --test_env=KVS_POWER_SEED=%llu)\n",
      static_cast<unsigned long long>(n_puts), static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(seed));
  auto t0 = std::chrono::steady_clock::now();

  std::string root = scratch_dir("power");
  ASSERT_FALSE(root.empty());
  std::string store_dir = root + "/store", state_dir = root + "/state";
  ASSERT_EQ(mkdir(store_dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(state_dir.c_str(), 0755), 0);

  Workload w;
  // About six blocks' worth: puts evict, and the reopen may evict too.
  w.capacity = 6 * 22000;
  run_workload(store_dir, seed, n_puts, &w);
  if (HasFatalFailure()) return;
  const std::vector<Op> ops = rec.ops;
  size_t file_syncs = 0, dir_syncs = 0;
  for (const Op &op : ops) {
    file_syncs += op.kind == OpKind::kFsync;
    dir_syncs += op.kind == OpKind::kDirSync;
  }
  ASSERT_GT(file_syncs, 0u);
  ASSERT_GT(dir_syncs, 0u);

  Checker checker{w, ops, {state_dir, {}}};
  Exploration e = explore_and_check(
      [&](size_t point, const DirState &state) { return checker.check(point, state); }, ops, seed,
      5);
  for (const std::string &f : e.failures) {
    ADD_FAILURE() << f << "\n  replay with KVS_POWER_SEED=" << seed;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The checker is checked: without the store's fsyncs, the same
  // exploration must find what a power loss would then break.
  size_t prefix = std::min<size_t>(ops.size(), 400);
  const std::vector<Op> no_fsync_ops = without(ops, OpKind::kFsync, prefix);
  const std::vector<Op> no_dirsync_ops = without(ops, OpKind::kDirSync, prefix);
  std::string mutant_dir = root + "/mutant";
  ASSERT_EQ(mkdir(mutant_dir.c_str(), 0755), 0);
  Checker no_fsync_checker{w, no_fsync_ops, {mutant_dir, {}}};
  Exploration no_fsync = explore_and_check(
      [&](size_t point, const DirState &state) { return no_fsync_checker.check(point, state); },
      no_fsync_ops, seed, 1);
  EXPECT_FALSE(no_fsync.failures.empty())
      << "with the temporary files' fsyncs taken out, no crash state lost or tore a block";
  std::string mutant_dir2 = root + "/mutant2";
  ASSERT_EQ(mkdir(mutant_dir2.c_str(), 0755), 0);
  Checker no_dirsync_checker{w, no_dirsync_ops, {mutant_dir2, {}}};
  Exploration no_dirsync = explore_and_check(
      [&](size_t point, const DirState &state) { return no_dirsync_checker.check(point, state); },
      no_dirsync_ops, seed, 1);
  EXPECT_FALSE(no_dirsync.failures.empty())
      << "with the directory fsyncs taken out, no crash state lost a returned put";
  // Without the removes' directory fsyncs only, a removed block comes back.
  // The log up to 400 operations past the first remove holds several.
  ASSERT_GT(w.removes, 0u) << "the workload removed nothing";
  ASSERT_GT(w.page_puts, 0u) << "the workload put no page block (format version 3)";
  size_t first_remove_end = ops.size();
  for (const auto &entry : w.history.removes_of) {
    first_remove_end = std::min(first_remove_end, entry.second.front().end);
  }
  const std::vector<Op> no_remove_dirsync_ops =
      without_remove_dirsyncs(w.history, ops, std::max<size_t>(400, first_remove_end + 400));
  std::string mutant_dir3 = root + "/mutant3";
  ASSERT_EQ(mkdir(mutant_dir3.c_str(), 0755), 0);
  Checker no_remove_dirsync_checker{w, no_remove_dirsync_ops, {mutant_dir3, {}}};
  Exploration no_remove_dirsync = explore_and_check(
      [&](size_t point, const DirState &state) {
        return no_remove_dirsync_checker.check(point, state);
      },
      no_remove_dirsync_ops, seed, 1);
  ASSERT_FALSE(no_remove_dirsync.failures.empty())
      << "with the removes' directory fsyncs taken out, no removed block came back";
  EXPECT_NE(no_remove_dirsync.failures[0].find("came back"), std::string::npos)
      << no_remove_dirsync.failures[0];
  if (!no_fsync.failures.empty()) {
    std::printf("power loss: without file fsyncs the checker fails: %s\n",
                one_line(no_fsync.failures[0]).c_str());
  }
  if (!no_dirsync.failures.empty()) {
    std::printf("power loss: without directory fsyncs the checker fails: %s\n",
                one_line(no_dirsync.failures[0]).c_str());
  }
  std::printf("power loss: without the removes' directory fsyncs the checker fails: %s\n",
              one_line(no_remove_dirsync.failures[0]).c_str());

  if (getenv("KVS_POWER_PUTS") == nullptr) {
    EXPECT_GE(e.checked, 10000u) << "the default workload explores at least 10,000 crash states";
  }
  std::printf(
      "power loss: %llu crash states explored (%llu of %llu generated were repeats; %llu "
      "distinct disk images) at %llu crash points over %zu file-system operations (%zu file "
      "fsyncs, %zu directory fsyncs) of %llu puts (%llu of page blocks, %llu overwrites) and %llu "
      "removes; %llu "
      "verified gets, %llu temporary files cleaned, %llu blocks evicted at reopen; %llu "
      "unsound; %.1f s\n",
      static_cast<unsigned long long>(e.checked),
      static_cast<unsigned long long>(e.generated - e.checked),
      static_cast<unsigned long long>(e.generated), static_cast<unsigned long long>(e.images),
      static_cast<unsigned long long>(e.points), ops.size(), file_syncs, dir_syncs,
      static_cast<unsigned long long>(w.puts), static_cast<unsigned long long>(w.page_puts),
      static_cast<unsigned long long>(w.overwrites), static_cast<unsigned long long>(w.removes),
      static_cast<unsigned long long>(checker.verified_gets),
      static_cast<unsigned long long>(checker.temp_removed),
      static_cast<unsigned long long>(checker.evicted),
      static_cast<unsigned long long>(e.failures.size()), seconds);
}

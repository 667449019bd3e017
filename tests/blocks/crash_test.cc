// Crash safety of the block store: a child process putting blocks is
// killed with SIGKILL at random instants, again and again. After every
// kill, nothing torn or unverifiable may be visible to get, and every
// block whose put returned must be there after reopening.
//
// KVS_CRASH_KILLS sets the number of kills (default 200); KVS_CRASH_SEED
// fixes the random schedule (printed on every run, to replay a failure:
// the delays replay exactly; where in a put each kill lands also depends
// on the machine's speed). The summary counts the kills whose aftermath
// was checked and found sound, not the number asked for.
//
// Every fourth block is a DSV4 page block (format version 3), put and got
// through kvs_block_store_put_page / get_page: both versions share the
// store's steps and its scan, and both are checked alike.
//
// SIGKILL keeps the page cache, so this test cannot see a missing fsync;
// power_loss_test.cc covers that.
#include <gtest/gtest.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "blocks/block_codec.h"
#include "blocks/block_store.h"
#include "tests/blocks/page_test_util.h"
#include "tests/blocks/store_test_util.h"

using namespace kvs_test;

namespace {

// Most blocks are small (fsync-bound puts); every eighth is 256 KiB so
// that kills also land in the middle of long writes.
Shape shape_of(uint64_t index) {
  Shape s;
  s.n_layers = 2;
  s.n_kv_heads = 1;
  s.block_size = 4;
  s.head_dim = index % 8 == 0 ? 8192 : 64;
  s.dtype = index % 3 == 0 ? KVS_DTYPE_BF16 : KVS_DTYPE_F32;
  return s;
}

uint64_t seed_of(uint64_t index) { return 7 + index * 3; }

// Every fourth block is a page block: 16-token pages mostly (a few KiB),
// every eighth of them 256 tokens (about 100 KiB) for long writes.
bool is_page(uint64_t index) { return index % 4 == 1; }

Page page_of(uint64_t index) {
  PageSpec spec;
  spec.page_size = index % 32 == 1 ? 256 : 16;
  spec.csa_layers = 1 + static_cast<uint32_t>(index % 3);
  return make_page(spec, key_of(index), index, seed_of(index));
}

// Puts block `index` of either version; false when the put failed.
bool put_index(kvs_block_store_t s, uint64_t index) {
  kvs_block_hash key = key_of(index);
  if (is_page(index)) {
    kvs_page_block_t b = stamp_page(page_of(index));
    bool ok = b != nullptr && kvs_block_store_put_page(s, &key, b, nullptr) == KVS_OK;
    kvs_page_block_destroy(b);
    return ok;
  }
  kvs_block_t b = make_block(shape_of(index), seed_of(index));
  bool ok = b != nullptr && kvs_block_store_put(s, &key, b, nullptr) == KVS_OK;
  kvs_block_destroy(b);
  return ok;
}

// The child: opens the store and puts blocks first, first+1, ... forever,
// reporting each index on `report` only after its put returned.
[[noreturn]] void child(const std::string &dir, uint64_t first, int report) {
  kvs_block_store_options o = KVS_BLOCK_STORE_OPTIONS_INIT;
  o.verify_on_open = false;  // keep the child's open cheap; the parent checks
  kvs_block_store_t s = nullptr;
  if (kvs_block_store_create(dir.c_str(), &o, &s, nullptr, nullptr) != KVS_OK) _exit(3);
  for (uint64_t i = first; i < first + 100000; i++) {
    if (!put_index(s, i)) _exit(4);
    uint64_t done = i;
    if (write(report, &done, sizeof done) != static_cast<ssize_t>(sizeof done)) _exit(5);
  }
  _exit(0);
}

// Gets block `index` and checks it is exactly what was put.
bool intact(kvs_block_store_t s, uint64_t index, kvs_status *status) {
  if (is_page(index)) {
    Page page = page_of(index);
    kvs_page_signature want = page.reader();
    kvs_block_hash key = key_of(index);
    kvs_page_block_t b = nullptr;
    kvs_error err;
    *status = kvs_block_store_get_page(s, &key, &want, &b, nullptr, &err);
    bool ok = *status == KVS_OK && same_page(b, page);
    if (*status != KVS_OK && *status != KVS_ERR_NOT_FOUND) {
      ADD_FAILURE() << "page block " << index << ": " << kvs_status_string(*status) << ": "
                    << err.message;
    }
    kvs_page_block_destroy(b);
    return ok;
  }
  Shape shape = shape_of(index);
  kvs_block_signature want = reader_for(shape);
  kvs_block_hash key = key_of(index);
  kvs_block_t b = nullptr;
  kvs_error err;
  *status = kvs_block_store_get(s, &key, &want, &b, nullptr, &err);
  bool ok = *status == KVS_OK && holds_seed(b, shape, seed_of(index));
  if (*status != KVS_OK && *status != KVS_ERR_NOT_FOUND) {
    ADD_FAILURE() << "block " << index << ": " << kvs_status_string(*status) << ": " << err.message;
  }
  kvs_block_destroy(b);
  return ok;
}

}  // namespace

TEST(BlockStoreCrash, sigkill_during_puts_never_leaves_a_torn_block_and_loses_no_returned_put) {
  const uint64_t kills = env_u64("KVS_CRASH_KILLS", 200);
  const uint64_t seed = env_u64("KVS_CRASH_SEED", static_cast<uint64_t>(time(nullptr)));
  std::printf(
      "crash test: %llu kills asked, KVS_CRASH_SEED=%llu (replay: "
      "--test_env=KVS_CRASH_SEED=%llu)\n",
      static_cast<unsigned long long>(kills), static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(seed));
  srand48(static_cast<long>(seed));

  std::string root = scratch_dir("crash");
  std::string dir;
  std::set<uint64_t> returned;  // puts that returned, in the current dir
  std::map<std::string, uint64_t> index_of_name;
  uint64_t next = 0;
  long window_us = 15000;  // adapted so that a child completes a few puts
  // kills that left a temp file (inside a write), kills that left the
  // in-flight block visible (after its rename, before put returned).
  uint64_t kills_in_write = 0, kills_after_rename = 0, temp_removed = 0, total_returned = 0;
  // Kills whose aftermath was checked in full and found sound: what the
  // summary reports, not the number asked for.
  uint64_t survived = 0;

  // One kill and its checks; an ASSERT ends only this kill, so the summary
  // and the seed to replay are printed whatever happens.
  auto one_kill = [&](uint64_t kill_no) {
    // A fresh directory every 25 kills bounds the work of each check.
    if (kill_no % 25 == 0) {
      dir = root + "/round" + std::to_string(kill_no / 25);
      ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);  // a kill may precede the child's open
      returned.clear();
    }
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      child(dir, next, fds[1]);
    }
    close(fds[1]);
    // Kill at a random instant: sometimes during the child's start and
    // open, mostly somewhere among its first puts. The window adapts to
    // how fast puts complete on this machine under its current load.
    long delay_us = lrand48() % 5 == 0 ? lrand48() % 1000 : 1000 + lrand48() % window_us;
    struct timespec t = {0, delay_us * 1000};
    nanosleep(&t, nullptr);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "the child stopped on its own (status " << wstatus << ")";

    uint64_t done, last = next;
    bool any = false;
    while (read(fds[0], &done, sizeof done) == static_cast<ssize_t>(sizeof done)) {
      EXPECT_EQ(done, any ? last + 1 : next) << "puts report in order";
      returned.insert(done);
      last = done;
      any = true;
      total_returned++;
    }
    close(fds[0]);
    uint64_t completed = any ? last + 1 - next : 0;
    if (completed == 0 && window_us < 400000) window_us += window_us / 4;
    if (completed > 8 && window_us > 2000) window_us -= window_us / 4;
    // The put in flight when the kill landed may or may not be visible.
    uint64_t in_flight = any ? last + 1 : next;
    for (uint64_t i = next; i <= in_flight; i++) {
      char name[KVS_BLOCK_STORE_NAME_MAX];
      kvs_block_hash key = key_of(i);
      index_of_name[kvs_block_store_file_name(&key, name)] = i;
    }

    // 1. Before any recovery: every block file visible under its name
    //    must verify and hold exactly what was put (a read-only open
    //    removes nothing, so leftover temp files are still present).
    kvs_block_store_options ro = KVS_BLOCK_STORE_OPTIONS_INIT;
    ro.read_only = true;
    kvs_block_store_t r = nullptr;
    kvs_block_store_scan scan;
    ASSERT_EQ(kvs_block_store_create(dir.c_str(), &ro, &r, &scan, nullptr), KVS_OK);
    EXPECT_EQ(scan.corrupt, 0u) << "kill " << kill_no;
    bool in_flight_visible = false;
    for (const std::string &name : list_dir(dir)) {
      if (name.size() != 36 || name.compare(32, 4, ".kvb") != 0) continue;
      auto it = index_of_name.find(name);
      ASSERT_NE(it, index_of_name.end()) << "unknown block file " << name;
      kvs_status st;
      EXPECT_TRUE(intact(r, it->second, &st)) << "visible block " << it->second << " is torn";
      if (it->second == in_flight) in_flight_visible = true;
    }
    kvs_block_store_destroy(r);
    if (in_flight_visible) kills_after_rename++;

    // 2. Reopen as a writer (the recovery path) and find every block
    //    whose put returned.
    kvs_block_store_t w = nullptr;
    ASSERT_EQ(kvs_block_store_create(dir.c_str(), nullptr, &w, &scan, nullptr), KVS_OK);
    EXPECT_EQ(scan.corrupt, 0u);
    temp_removed += scan.temp_removed;
    if (scan.temp_removed > 0) kills_in_write++;
    for (const std::string &name : list_dir(dir)) {
      EXPECT_NE(name.compare(0, 5, ".tmp-"), 0) << "temp file survived the scan: " << name;
    }
    for (uint64_t i : returned) {
      kvs_status st;
      EXPECT_TRUE(intact(w, i, &st)) << "block " << i << " was put (returned) but is "
                                     << kvs_status_string(st) << " after kill " << kill_no;
    }
    kvs_block_store_destroy(w);
    next = in_flight + 1;
  };
  for (uint64_t kill_no = 0; kill_no < kills; kill_no++) {
    one_kill(kill_no);
    if (::testing::Test::HasFailure()) {
      std::printf("crash test: kill %llu failed its checks; replay with KVS_CRASH_SEED=%llu\n",
                  static_cast<unsigned long long>(kill_no), static_cast<unsigned long long>(seed));
      break;
    }
    survived++;
  }
  std::printf(
      "crash test: %llu kills survived, %llu puts returned; %llu kills landed inside a "
      "write (temp file left, %llu removed), %llu between rename and return; kill "
      "window %ld us\n",
      static_cast<unsigned long long>(survived), static_cast<unsigned long long>(total_returned),
      static_cast<unsigned long long>(kills_in_write),
      static_cast<unsigned long long>(temp_removed),
      static_cast<unsigned long long>(kills_after_rename), window_us);
  EXPECT_EQ(survived, kills) << "kills checked";
  if (kills >= 50) {
    EXPECT_GT(kills_in_write, 0u) << "no kill landed inside a put; the schedule is too coarse";
    EXPECT_GT(total_returned, kills / 4) << "children rarely got to put; the schedule is too early";
  }
}

// The block store: put/get/verify, persistence, LRU capacity, the scan at
// open, misfiled and stale files, the writer lock, concurrent readers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <xxhash.h>

#include "blocks/block_codec.h"
#include "blocks/block_store.h"
#include "tests/blocks/store_test_util.h"

using namespace kvs_test;

namespace {

struct StoreCloser {
  kvs_block_store_t s = nullptr;
  ~StoreCloser() { kvs_block_store_destroy(s); }
};

kvs_block_store_t open_store(const std::string &dir, uint64_t capacity = 0, bool read_only = false,
                             kvs_block_store_scan *scan = nullptr, kvs_status *status = nullptr) {
  kvs_block_store_options o = KVS_BLOCK_STORE_OPTIONS_INIT;
  o.capacity_bytes = capacity;
  o.read_only = read_only;
  kvs_block_store_t s = nullptr;
  kvs_error err;
  kvs_status st = kvs_block_store_create(dir.c_str(), &o, &s, scan, &err);
  if (status != nullptr) *status = st;
  if (st != KVS_OK && status == nullptr) ADD_FAILURE() << "open " << dir << ": " << err.message;
  return s;
}

kvs_status put(kvs_block_store_t s, uint64_t index, const Shape &shape, uint64_t seed) {
  kvs_block_t b = make_block(shape, seed);
  kvs_block_hash key = key_of(index);
  kvs_error err;
  kvs_status st = kvs_block_store_put(s, &key, b, &err);
  EXPECT_EQ(st, KVS_OK) << err.message;
  kvs_block_destroy(b);
  return st;
}

// Gets block `index` and checks it holds `seed`'s payload.
kvs_status get(kvs_block_store_t s, uint64_t index, const Shape &shape, uint64_t seed,
               kvs_error *err = nullptr, kvs_signature_error *why = nullptr,
               const kvs_block_signature *reader = nullptr) {
  kvs_block_signature r = reader != nullptr ? *reader : reader_for(shape);
  kvs_block_hash key = key_of(index);
  kvs_block_t b = nullptr;
  kvs_status st = kvs_block_store_get(s, &key, &r, &b, why, err);
  if (st == KVS_OK) {
    EXPECT_TRUE(holds_seed(b, shape, seed)) << "block " << index;
  } else {
    EXPECT_EQ(b, nullptr);
  }
  kvs_block_destroy(b);
  return st;
}

std::string name_of(uint64_t index) {
  char name[KVS_BLOCK_STORE_NAME_MAX];
  kvs_block_hash key = key_of(index);
  return kvs_block_store_file_name(&key, name);
}

uint64_t file_size_of(const Shape &shape) {
  kvs_block_t b = make_block(shape, 1);
  kvs_block_hash key = key_of(0);
  uint64_t n = kvs_block_encoded_size_of(&key, b);
  kvs_block_destroy(b);
  return n;
}

}  // namespace

TEST(BlockStore, put_then_get_returns_the_verified_block) {
  std::string dir = scratch_dir("store");
  StoreCloser c{open_store(dir)};
  Shape shape;
  ASSERT_EQ(put(c.s, 1, shape, 101), KVS_OK);
  EXPECT_EQ(get(c.s, 1, shape, 101), KVS_OK);
  kvs_block_hash one = key_of(1);
  EXPECT_TRUE(kvs_block_store_contains(c.s, &one));
  EXPECT_EQ(kvs_block_store_count(c.s), 1u);
  EXPECT_EQ(kvs_block_store_bytes(c.s), file_size_of(shape));
  // Only the block file and the lock: no temp file is left behind.
  std::vector<std::string> names = list_dir(dir);
  EXPECT_EQ(names.size(), 2u);
  EXPECT_TRUE(file_exists(dir + "/" + name_of(1)));
}

TEST(BlockStore, an_absent_key_is_not_found) {
  std::string dir = scratch_dir("store");
  StoreCloser c{open_store(dir)};
  kvs_error err;
  EXPECT_EQ(get(c.s, 7, Shape(), 1, &err), KVS_ERR_NOT_FOUND);
  EXPECT_NE(std::string(err.message).find(name_of(7)), std::string::npos) << err.message;
}

TEST(BlockStore, another_reader_configuration_is_refused_naming_the_field) {
  std::string dir = scratch_dir("store");
  StoreCloser c{open_store(dir)};
  Shape shape;
  ASSERT_EQ(put(c.s, 1, shape, 5), KVS_OK);
  kvs_block_signature other = reader_for(shape, "model-b");
  kvs_signature_error why;
  kvs_error err;
  EXPECT_EQ(get(c.s, 1, shape, 5, &err, &why, &other), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_INCOMPATIBLE);
  EXPECT_STREQ(why.field, "model");
  std::vector<uint8_t> w = {1, 2, 3, 4};
  kvs_block_signature weighted = expected("model-a", flat(4), 2, 2, 8, 4, KVS_DTYPE_F32, w);
  EXPECT_EQ(get(c.s, 1, shape, 5, &err, &why, &weighted), KVS_ERR_SIGNATURE);
  EXPECT_STREQ(why.field, "weights_fingerprint");
  kvs_block_signature bf16 = expected("model-a", flat(4), 2, 2, 8, 4, KVS_DTYPE_BF16);
  EXPECT_EQ(get(c.s, 1, shape, 5, &err, &why, &bf16), KVS_ERR_SIGNATURE);
  EXPECT_STREQ(why.field, "dtype");
}

TEST(BlockStore, blocks_survive_reopening) {
  std::string dir = scratch_dir("store");
  Shape shape;
  {
    StoreCloser c{open_store(dir)};
    for (uint64_t i = 0; i < 10; i++) ASSERT_EQ(put(c.s, i, shape, 1000 + i), KVS_OK);
  }
  kvs_block_store_scan scan;
  StoreCloser c{open_store(dir, 0, false, &scan)};
  EXPECT_EQ(scan.blocks, 10u);
  EXPECT_EQ(scan.corrupt, 0u);
  EXPECT_EQ(scan.temp_removed, 0u);
  EXPECT_EQ(scan.bytes, 10 * file_size_of(shape));
  for (uint64_t i = 0; i < 10; i++) EXPECT_EQ(get(c.s, i, shape, 1000 + i), KVS_OK);
}

TEST(BlockStore, replacing_a_key_keeps_one_entry) {
  std::string dir = scratch_dir("store");
  StoreCloser c{open_store(dir)};
  Shape shape;
  ASSERT_EQ(put(c.s, 3, shape, 1), KVS_OK);
  ASSERT_EQ(put(c.s, 3, shape, 2), KVS_OK);
  EXPECT_EQ(kvs_block_store_count(c.s), 1u);
  EXPECT_EQ(kvs_block_store_bytes(c.s), file_size_of(shape));
  EXPECT_EQ(get(c.s, 3, shape, 2), KVS_OK);
}

TEST(BlockStore, least_recently_used_blocks_are_evicted_beyond_capacity) {
  std::string dir = scratch_dir("store");
  Shape shape;
  uint64_t one = file_size_of(shape);
  StoreCloser c{open_store(dir, 3 * one)};
  ASSERT_EQ(put(c.s, 0, shape, 10), KVS_OK);
  ASSERT_EQ(put(c.s, 1, shape, 11), KVS_OK);
  ASSERT_EQ(put(c.s, 2, shape, 12), KVS_OK);
  ASSERT_EQ(get(c.s, 0, shape, 10), KVS_OK);  // 0 becomes the most recent; 1 is now coldest
  ASSERT_EQ(put(c.s, 3, shape, 13), KVS_OK);
  EXPECT_EQ(kvs_block_store_count(c.s), 3u);
  EXPECT_LE(kvs_block_store_bytes(c.s), 3 * one);
  EXPECT_EQ(get(c.s, 1, shape, 11), KVS_ERR_NOT_FOUND) << "the coldest block was evicted";
  EXPECT_FALSE(file_exists(dir + "/" + name_of(1)));
  EXPECT_EQ(get(c.s, 0, shape, 10), KVS_OK);
  EXPECT_EQ(get(c.s, 2, shape, 12), KVS_OK);
  EXPECT_EQ(get(c.s, 3, shape, 13), KVS_OK);
}

TEST(BlockStore, a_smaller_capacity_at_reopen_evicts_the_oldest) {
  std::string dir = scratch_dir("store");
  Shape shape;
  uint64_t one = file_size_of(shape);
  {
    StoreCloser c{open_store(dir)};
    for (uint64_t i = 0; i < 4; i++) {
      ASSERT_EQ(put(c.s, i, shape, 20 + i), KVS_OK);
      // Distinct modification times order the entries at the next scan.
      struct timespec t = {0, 20 * 1000 * 1000};
      nanosleep(&t, nullptr);
    }
  }
  kvs_block_store_scan scan;
  StoreCloser c{open_store(dir, 2 * one, false, &scan)};
  EXPECT_EQ(scan.evicted, 2u);
  EXPECT_EQ(scan.blocks, 2u);
  EXPECT_EQ(get(c.s, 0, shape, 20), KVS_ERR_NOT_FOUND);
  EXPECT_EQ(get(c.s, 1, shape, 21), KVS_ERR_NOT_FOUND);
  EXPECT_EQ(get(c.s, 2, shape, 22), KVS_OK);
  EXPECT_EQ(get(c.s, 3, shape, 23), KVS_OK);
}

TEST(BlockStore, a_block_larger_than_the_capacity_is_refused) {
  std::string dir = scratch_dir("store");
  Shape shape;
  StoreCloser c{open_store(dir, file_size_of(shape) - 1)};
  kvs_block_t b = make_block(shape, 1);
  kvs_block_hash key = key_of(0);
  kvs_error err;
  EXPECT_EQ(kvs_block_store_put(c.s, &key, b, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("capacity"), std::string::npos) << err.message;
  kvs_block_destroy(b);
  EXPECT_EQ(kvs_block_store_count(c.s), 0u);
  EXPECT_EQ(list_dir(dir).size(), 1u) << "only the lock file";
}

namespace {
struct CorruptLog {
  std::vector<std::string> names;
  std::vector<std::string> messages;
};
void on_corrupt(void *ctx, const char *name, const kvs_error *why) {
  auto *log = static_cast<CorruptLog *>(ctx);
  log->names.push_back(name);
  log->messages.push_back(why->message);
}
}  // namespace

TEST(BlockStore, the_scan_removes_temp_files_and_reports_corrupt_entries_without_deleting) {
  std::string dir = scratch_dir("store");
  Shape shape;
  {
    StoreCloser c{open_store(dir)};
    for (uint64_t i = 0; i < 5; i++) ASSERT_EQ(put(c.s, i, shape, 50 + i), KVS_OK);
  }
  // Damage: a flipped bit (1), a truncation (2), foreign bytes under a
  // block name (3); leftovers of crashed puts; an unrelated file.
  std::vector<uint8_t> b1 = read_bytes(dir + "/" + name_of(1));
  b1[b1.size() / 2] ^= 0x10;
  ASSERT_TRUE(write_bytes(dir + "/" + name_of(1), b1));
  std::vector<uint8_t> b2 = read_bytes(dir + "/" + name_of(2));
  b2.resize(b2.size() - 9);
  ASSERT_TRUE(write_bytes(dir + "/" + name_of(2), b2));
  ASSERT_TRUE(write_bytes(dir + "/" + name_of(3), std::vector<uint8_t>(100, 'x')));
  std::vector<uint8_t> partial = read_bytes(dir + "/" + name_of(4));
  partial.resize(partial.size() / 2);
  ASSERT_TRUE(write_bytes(dir + "/.tmp-" + name_of(4).substr(0, 32) + "-1-0", partial));
  ASSERT_TRUE(write_bytes(dir + "/.tmp-whatever", {}));
  ASSERT_TRUE(write_bytes(dir + "/notes.txt", {'h', 'i'}));

  // A read-only open reports but removes nothing.
  CorruptLog ro_log;
  kvs_block_store_options o = KVS_BLOCK_STORE_OPTIONS_INIT;
  o.read_only = true;
  o.on_corrupt = on_corrupt;
  o.on_corrupt_ctx = &ro_log;
  kvs_block_store_t ro = nullptr;
  kvs_block_store_scan scan;
  ASSERT_EQ(kvs_block_store_create(dir.c_str(), &o, &ro, &scan, nullptr), KVS_OK);
  EXPECT_EQ(scan.corrupt, 3u);
  EXPECT_EQ(scan.temp_removed, 0u);
  EXPECT_TRUE(file_exists(dir + "/.tmp-whatever"));
  kvs_block_store_destroy(ro);

  CorruptLog log;
  o.read_only = false;
  o.on_corrupt_ctx = &log;
  kvs_block_store_t s = nullptr;
  ASSERT_EQ(kvs_block_store_create(dir.c_str(), &o, &s, &scan, nullptr), KVS_OK);
  StoreCloser c{s};
  EXPECT_EQ(scan.temp_removed, 2u);
  EXPECT_EQ(scan.corrupt, 3u);
  EXPECT_EQ(scan.blocks, 2u);
  EXPECT_EQ(scan.ignored, 1u) << "notes.txt";
  ASSERT_EQ(log.names.size(), 3u);
  std::sort(log.names.begin(), log.names.end());
  std::vector<std::string> want = {name_of(1), name_of(2), name_of(3)};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(log.names, want);
  for (const std::string &m : log.messages) EXPECT_FALSE(m.empty());

  // Nothing good was deleted, and the corrupt files are still there.
  for (uint64_t i = 0; i < 5; i++) EXPECT_TRUE(file_exists(dir + "/" + name_of(i))) << i;
  EXPECT_FALSE(file_exists(dir + "/.tmp-whatever"));
  EXPECT_TRUE(file_exists(dir + "/notes.txt"));
  EXPECT_EQ(get(c.s, 0, shape, 50), KVS_OK);
  EXPECT_EQ(get(c.s, 4, shape, 54), KVS_OK);
  kvs_error err;
  EXPECT_EQ(get(c.s, 1, shape, 51, &err), KVS_ERR_CORRUPT);
  EXPECT_NE(std::string(err.message).find("checksum"), std::string::npos) << err.message;
  EXPECT_EQ(get(c.s, 2, shape, 52, &err), KVS_ERR_CORRUPT);
  EXPECT_NE(std::string(err.message).find("truncated"), std::string::npos) << err.message;
  EXPECT_EQ(get(c.s, 3, shape, 53, &err), KVS_ERR_CORRUPT);
  EXPECT_NE(std::string(err.message).find("not a kvshard block"), std::string::npos) << err.message;
  // A put repairs a corrupt key; remove deletes one.
  ASSERT_EQ(put(c.s, 1, shape, 51), KVS_OK);
  EXPECT_EQ(get(c.s, 1, shape, 51), KVS_OK);
  kvs_block_hash three = key_of(3);
  EXPECT_EQ(kvs_block_store_remove(c.s, &three, nullptr), KVS_OK);
  EXPECT_FALSE(file_exists(dir + "/" + name_of(3)));
  EXPECT_FALSE(kvs_block_store_contains(c.s, &three));
  EXPECT_EQ(kvs_block_store_remove(c.s, &three, nullptr), KVS_ERR_NOT_FOUND);
}

TEST(BlockStore, a_misfiled_block_is_refused) {
  std::string dir = scratch_dir("store");
  Shape shape;
  {
    StoreCloser c{open_store(dir)};
    ASSERT_EQ(put(c.s, 1, shape, 61), KVS_OK);
  }
  // Copy block 1 under block 2's name: a valid block with the wrong key.
  ASSERT_TRUE(write_bytes(dir + "/" + name_of(2), read_bytes(dir + "/" + name_of(1))));
  kvs_block_store_scan scan;
  StoreCloser c{open_store(dir, 0, false, &scan)};
  EXPECT_EQ(scan.corrupt, 1u);
  kvs_error err;
  EXPECT_EQ(get(c.s, 2, shape, 61, &err), KVS_ERR_CORRUPT);
  EXPECT_NE(std::string(err.message).find("holds the block of key"), std::string::npos)
      << err.message;
  EXPECT_EQ(get(c.s, 1, shape, 61), KVS_OK);
}

TEST(BlockStore, a_block_of_an_unreadable_version_is_stale_not_corrupt) {
  std::string dir = scratch_dir("store");
  Shape shape;
  {
    StoreCloser c{open_store(dir)};
    ASSERT_EQ(put(c.s, 1, shape, 71), KVS_OK);
  }
  std::string path = dir + "/" + name_of(1);
  std::vector<uint8_t> b = read_bytes(path);
  b[8] = 1;  // format version 1
  uint64_t sum = XXH3_64bits(b.data(), b.size() - 8);
  for (int i = 0; i < 8; i++) b[b.size() - 8 + i] = static_cast<uint8_t>(sum >> (8 * i));
  ASSERT_TRUE(write_bytes(path, b));
  kvs_block_store_scan scan;
  StoreCloser c{open_store(dir, 0, false, &scan)};
  EXPECT_EQ(scan.corrupt, 0u);
  EXPECT_EQ(scan.unreadable, 1u);
  EXPECT_EQ(scan.blocks, 1u);
  kvs_signature_error why;
  kvs_error err;
  EXPECT_EQ(get(c.s, 1, shape, 71, &err, &why), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_UNSUPPORTED_FORMAT);
  EXPECT_EQ(why.format_found, 1u);
}

TEST(BlockStore, one_writer_at_a_time_and_readers_alongside) {
  std::string dir = scratch_dir("store");
  Shape shape;
  StoreCloser w{open_store(dir)};
  ASSERT_EQ(put(w.s, 1, shape, 81), KVS_OK);
  kvs_status st;
  kvs_block_store_t second = open_store(dir, 0, false, nullptr, &st);
  EXPECT_EQ(st, KVS_ERR_CONFLICT);
  EXPECT_EQ(second, nullptr);
  StoreCloser r{open_store(dir, 0, true)};
  ASSERT_NE(r.s, nullptr);
  EXPECT_EQ(get(r.s, 1, shape, 81), KVS_OK);
  kvs_block_t b = make_block(shape, 1);
  kvs_block_hash key = key_of(2);
  EXPECT_EQ(kvs_block_store_put(r.s, &key, b, nullptr), KVS_ERR_INVALID_ARGUMENT);
  kvs_block_destroy(b);
  // A block put after the reader opened is visible to it.
  ASSERT_EQ(put(w.s, 2, shape, 82), KVS_OK);
  EXPECT_EQ(get(r.s, 2, shape, 82), KVS_OK);
  kvs_block_store_destroy(w.s);
  w.s = nullptr;
  StoreCloser again{open_store(dir)};
  EXPECT_NE(again.s, nullptr) << "the lock is released with the handle";
}

TEST(BlockStore, a_read_only_open_of_a_missing_directory_is_not_found) {
  std::string dir = scratch_dir("store") + "/absent";
  kvs_status st;
  kvs_block_store_t s = open_store(dir, 0, true, nullptr, &st);
  EXPECT_EQ(st, KVS_ERR_NOT_FOUND);
  EXPECT_EQ(s, nullptr);
  kvs_block_store_options o = KVS_BLOCK_STORE_OPTIONS_INIT;
  o.size = 3;
  EXPECT_EQ(kvs_block_store_create(dir.c_str(), &o, &s, nullptr, nullptr),
            KVS_ERR_INVALID_ARGUMENT);
}

TEST(BlockStore, concurrent_readers_see_whole_blocks_while_a_writer_puts) {
  std::string dir = scratch_dir("store");
  Shape shape;
  shape.head_dim = 256;  // 16 KiB per block: writes are not instantaneous
  const uint64_t kKeys = 12;
  StoreCloser w{open_store(dir)};
  for (uint64_t i = 0; i < kKeys; i++) ASSERT_EQ(put(w.s, i, shape, 1 + i * 2), KVS_OK);
  StoreCloser r{open_store(dir, 0, true)};

  std::atomic<bool> done{false};
  std::atomic<uint64_t> gets{0}, hits{0}, bad{0};
  auto reader = [&](kvs_block_store_t s, uint64_t salt) {
    kvs_block_signature want = reader_for(shape);
    uint64_t x = salt;
    while (!done.load()) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      uint64_t i = (x >> 33) % (kKeys + 4);  // some keys appear only later
      kvs_block_hash key = key_of(i);
      kvs_block_t b = nullptr;
      kvs_error err;
      kvs_status st = kvs_block_store_get(s, &key, &want, &b, nullptr, &err);
      gets++;
      if (st == KVS_OK) {
        hits++;
        // Either version of the key, never a mixture.
        if (!holds_seed(b, shape, 1 + i * 2) && !holds_seed(b, shape, 2 + i * 2)) bad++;
      } else if (!(st == KVS_ERR_NOT_FOUND && i >= kKeys)) {
        bad++;
        ADD_FAILURE() << "get " << i << ": " << kvs_status_string(st) << ": " << err.message;
      }
      kvs_block_destroy(b);
    }
  };
  std::vector<std::thread> readers;
  for (uint64_t t = 0; t < 2; t++) readers.emplace_back(reader, w.s, 17 + t);
  for (uint64_t t = 0; t < 2; t++) readers.emplace_back(reader, r.s, 91 + t);
  for (int round = 0; round < 6; round++) {
    for (uint64_t i = 0; i < kKeys + 4; i++) {
      ASSERT_EQ(put(w.s, i, shape, (round % 2 == 0 ? 2 : 1) + i * 2), KVS_OK);
    }
  }
  done = true;
  for (std::thread &t : readers) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(hits.load(), 100u) << gets.load() << " gets";
  for (uint64_t i = 0; i < kKeys + 4; i++) EXPECT_EQ(get(w.s, i, shape, 1 + i * 2), KVS_OK);
}

// A FIFO or a directory under a block's name is refused by its type: the
// scan reports it and get refuses it, and neither waits for a writer.
TEST(BlockStore, a_fifo_or_directory_under_a_block_name_is_refused_without_blocking) {
  std::string dir = scratch_dir("store");
  Shape shape;
  {
    StoreCloser c{open_store(dir)};
    ASSERT_EQ(put(c.s, 0, shape, 60), KVS_OK);
  }
  ASSERT_EQ(mkfifo((dir + "/" + name_of(1)).c_str(), 0644), 0);
  ASSERT_EQ(mkdir((dir + "/" + name_of(2)).c_str(), 0755), 0);
  kvs_block_store_scan scan;
  StoreCloser c{open_store(dir, 0, false, &scan)};
  ASSERT_NE(c.s, nullptr);
  EXPECT_EQ(scan.corrupt, 2u);
  EXPECT_EQ(scan.blocks, 1u);
  kvs_error err;
  EXPECT_EQ(get(c.s, 1, shape, 61, &err), KVS_ERR_CORRUPT);
  EXPECT_NE(std::string(err.message).find("is a FIFO, not a regular file"), std::string::npos)
      << err.message;
  EXPECT_EQ(get(c.s, 2, shape, 62, &err), KVS_ERR_CORRUPT);
  EXPECT_NE(std::string(err.message).find("is a directory, not a regular file"), std::string::npos)
      << err.message;
  EXPECT_EQ(get(c.s, 0, shape, 60), KVS_OK);
}

// Reading a block file by path: a file that starts with the block magic
// is refused by its size before anything is read (a sparse 3 GiB file
// would otherwise cost 3 GiB of memory), and by the body length its
// header records when that disagrees with the size.
TEST(BlockStore, read_file_refuses_by_size_before_reading_and_reads_a_good_file_whole) {
  std::string dir = scratch_dir("readfile");
  std::string huge = dir + "/huge.kvb";
  ASSERT_TRUE(write_bytes(huge, {'K', 'V', 'S', 'B', 'L', 'O', 'C', 'K'}));
  ASSERT_EQ(truncate(huge.c_str(), 3ll << 30), 0);
  uint8_t *bytes = nullptr;
  size_t len = 0;
  kvs_error err;
  EXPECT_EQ(kvs_block_store_read_file(huge.c_str(), &bytes, &len, &err), KVS_ERR_CORRUPT);
  EXPECT_NE(std::string(err.message).find("3221225472 bytes is larger than any block file"),
            std::string::npos)
      << err.message;
  EXPECT_EQ(bytes, nullptr);

  std::vector<uint8_t> head = {'K', 'V', 'S', 'B', 'L', 'O', 'C', 'K', 2, 0, 0, 0,
                               3,   0,   0,   0,   0,   1,   0,   0,   0, 0, 0, 0};
  std::string lying = dir + "/lying.kvb";
  ASSERT_TRUE(write_bytes(lying, head));
  ASSERT_EQ(truncate(lying.c_str(), 64ll << 20), 0);
  EXPECT_EQ(kvs_block_store_read_file(lying.c_str(), &bytes, &len, &err), KVS_ERR_CORRUPT);
  EXPECT_NE(std::string(err.message).find("body_len says 256 bytes, the file holds 67108864"),
            std::string::npos)
      << err.message;

  EXPECT_EQ(kvs_block_store_read_file((dir + "/absent.kvb").c_str(), &bytes, &len, &err),
            KVS_ERR_NOT_FOUND);
  EXPECT_EQ(kvs_block_store_read_file(dir.c_str(), &bytes, &len, &err), KVS_ERR_CORRUPT);
  EXPECT_EQ(kvs_block_store_read_file(nullptr, &bytes, &len, &err), KVS_ERR_INVALID_ARGUMENT);

  // A stored block reads back whole, byte for byte.
  {
    StoreCloser c{open_store(dir + "/store")};
    ASSERT_EQ(put(c.s, 7, Shape{}, 70), KVS_OK);
  }
  std::string path = dir + "/store/" + name_of(7);
  ASSERT_EQ(kvs_block_store_read_file(path.c_str(), &bytes, &len, &err), KVS_OK) << err.message;
  std::vector<uint8_t> want = read_bytes(path);
  EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + len), want);
  free(bytes);
}

// The store when its disk fails under it: a device that fills up in the
// middle of a put, a directory that turns read-only (as after an I/O error
// remount), an fsync that fails. Each put fails cleanly with KVS_ERR_IO,
// the failed block is never visible, and every block stored before it
// still verifies -- also after the fault clears and the store reopens.
//
// The faults are injected by interposing the libc calls the store makes
// (write, fsync, openat, renameat, unlinkat): this executable's definitions
// win over libc's for the library code linked into it. Root ignores
// directory permissions, so a chmod could not simulate a read-only mount.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "blocks/block_store.h"
#include "tests/blocks/store_test_util.h"

using namespace kvs_test;

namespace {

// kReadOnlyAtRename: the turn happens after the temp file was written, so
// the rename fails and so does the clean-up of the temp file.
enum class Fault { kNone, kDiskFull, kReadOnly, kReadOnlyAtRename, kFsync };

std::atomic<Fault> fault{Fault::kNone};
std::atomic<long> bytes_before_full{0};  // kDiskFull: bytes the device still takes

template <typename F>
F real(const char *name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

ssize_t write(int fd, const void *buf, size_t n) {
  static auto next = real<ssize_t (*)(int, const void *, size_t)>("write");
  if (fault == Fault::kDiskFull && fd > 2) {
    long room = bytes_before_full.load();
    if (room <= 0) {
      errno = ENOSPC;
      return -1;
    }
    if (static_cast<long>(n) > room) n = static_cast<size_t>(room);  // a short write first
    bytes_before_full -= static_cast<long>(n);
  }
  if (fault == Fault::kReadOnly && fd > 2) {
    errno = EROFS;
    return -1;
  }
  return next(fd, buf, n);
}

int fsync(int fd) {
  static auto next = real<int (*)(int)>("fsync");
  if (fault == Fault::kFsync) {
    errno = EIO;
    return -1;
  }
  return next(fd);
}

int openat(int dirfd, const char *path, int flags, ...) {
  static auto next = real<int (*)(int, const char *, int, ...)>("openat");
  mode_t mode = 0;
  if (flags & O_CREAT) {
    va_list args;
    va_start(args, flags);
    mode = va_arg(args, mode_t);
    va_end(args);
  }
  if (fault == Fault::kReadOnly && (flags & (O_CREAT | O_WRONLY | O_RDWR))) {
    errno = EROFS;
    return -1;
  }
  return next(dirfd, path, flags, mode);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
  static auto next = real<int (*)(int, const char *, int, const char *)>("renameat");
  if (fault == Fault::kReadOnly || fault == Fault::kReadOnlyAtRename) {
    errno = EROFS;
    return -1;
  }
  return next(olddirfd, oldpath, newdirfd, newpath);
}

int unlinkat(int dirfd, const char *path, int flags) {
  static auto next = real<int (*)(int, const char *, int)>("unlinkat");
  if (fault == Fault::kReadOnly || fault == Fault::kReadOnlyAtRename) {
    errno = EROFS;
    return -1;
  }
  return next(dirfd, path, flags);
}

}  // extern "C"

namespace {

const Shape kShape{2, 2, 64, 16, KVS_DTYPE_F32};  // about 16 KiB per block

struct Store {
  kvs_block_store_t s = nullptr;
  kvs_block_store_scan scan{};
  explicit Store(const std::string &dir) {
    kvs_block_store_options o = KVS_BLOCK_STORE_OPTIONS_INIT;
    kvs_error err;
    EXPECT_EQ(kvs_block_store_create(dir.c_str(), &o, &s, &scan, &err), KVS_OK) << err.message;
  }
  ~Store() { kvs_block_store_destroy(s); }
};

kvs_status put(kvs_block_store_t s, uint64_t index, kvs_error *err) {
  kvs_block_t b = make_block(kShape, index + 1);
  kvs_block_hash key = key_of(index, kShape.block_size);
  kvs_status st = kvs_block_store_put(s, &key, b, err);
  kvs_block_destroy(b);
  return st;
}

kvs_status get(kvs_block_store_t s, uint64_t index) {
  kvs_block_signature reader = reader_for(kShape);
  kvs_block_hash key = key_of(index, kShape.block_size);
  kvs_block_t b = nullptr;
  kvs_error err;
  kvs_status st = kvs_block_store_get(s, &key, &reader, &b, nullptr, &err);
  if (st == KVS_OK) {
    EXPECT_TRUE(holds_seed(b, kShape, index + 1)) << "block " << index;
  }
  kvs_block_destroy(b);
  return st;
}

size_t temp_files(const std::string &dir) {
  size_t n = 0;
  for (const std::string &name : list_dir(dir)) n += name.rfind(".tmp-", 0) == 0;
  return n;
}

// Three good blocks, then the fault, then a put that must fail cleanly.
void expect_clean_failure(Fault kind, const char *what_the_message_names) {
  std::string dir = scratch_dir("fault");
  {
    Store store(dir);
    kvs_error err;
    for (uint64_t i = 0; i < 3; i++) ASSERT_EQ(put(store.s, i, &err), KVS_OK) << err.message;
    uint64_t bytes = kvs_block_store_bytes(store.s);

    bytes_before_full = 5000;  // the fourth block runs out of room part way
    fault = kind;
    EXPECT_EQ(put(store.s, 3, &err), KVS_ERR_IO);
    EXPECT_NE(std::string(err.message).find(what_the_message_names), std::string::npos)
        << err.message;
    // Reads keep working on a full or read-only device.
    for (uint64_t i = 0; i < 3; i++) EXPECT_EQ(get(store.s, i), KVS_OK) << "block " << i;
    EXPECT_EQ(get(store.s, 3), KVS_ERR_NOT_FOUND) << "a failed put is never visible";
    EXPECT_EQ(kvs_block_store_count(store.s), 3u);
    EXPECT_EQ(kvs_block_store_bytes(store.s), bytes);
    fault = Fault::kNone;
    if (kind != Fault::kReadOnly) {
      EXPECT_EQ(temp_files(dir), 0u) << "the failed put removed its temp file";
    }
    // Once the fault clears the same put succeeds.
    ASSERT_EQ(put(store.s, 3, &err), KVS_OK) << err.message;
  }
  // Reopened: every block whose put returned is there; no temp file is.
  Store reopened(dir);
  EXPECT_EQ(reopened.scan.corrupt, 0u);
  EXPECT_EQ(kvs_block_store_count(reopened.s), 4u);
  for (uint64_t i = 0; i < 4; i++) EXPECT_EQ(get(reopened.s, i), KVS_OK) << "block " << i;
  EXPECT_EQ(temp_files(dir), 0u);
}

}  // namespace

TEST(BlockStoreFaults, a_device_that_fills_up_mid_put_fails_the_put_and_keeps_earlier_blocks) {
  expect_clean_failure(Fault::kDiskFull, "No space left on device");
}

TEST(BlockStoreFaults, a_directory_that_turns_read_only_mid_put_fails_the_put_cleanly) {
  expect_clean_failure(Fault::kReadOnly, "Read-only file system");
}

TEST(BlockStoreFaults, a_failed_fsync_is_a_failed_put) {
  expect_clean_failure(Fault::kFsync, "fsync");
}

// Read-only after the temp file was written: the rename fails, the temp
// file cannot be removed either, and the next open cleans it up.
TEST(BlockStoreFaults, a_temp_file_stranded_by_a_read_only_turn_is_removed_at_the_next_open) {
  std::string dir = scratch_dir("stranded");
  {
    Store store(dir);
    kvs_error err;
    ASSERT_EQ(put(store.s, 0, &err), KVS_OK) << err.message;
    fault = Fault::kReadOnlyAtRename;
    EXPECT_EQ(put(store.s, 1, &err), KVS_ERR_IO);
    EXPECT_NE(std::string(err.message).find("renaming"), std::string::npos) << err.message;
    fault = Fault::kNone;
    EXPECT_EQ(get(store.s, 1), KVS_ERR_NOT_FOUND);
    EXPECT_EQ(temp_files(dir), 1u) << "the stranded temp file is still there";
  }
  Store reopened(dir);
  EXPECT_EQ(reopened.scan.temp_removed, 1u);
  EXPECT_EQ(kvs_block_store_count(reopened.s), 1u);
  EXPECT_EQ(get(reopened.s, 0), KVS_OK);
  EXPECT_EQ(get(reopened.s, 1), KVS_ERR_NOT_FOUND);
  EXPECT_EQ(temp_files(dir), 0u);
}

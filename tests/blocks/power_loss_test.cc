// Power loss for the block store: every state a crash could leave on disk.
//
// SIGKILL (crash_test.cc) keeps the page cache, so it cannot see a missing
// fsync. Here the store's file-system operations during a workload of
// puts, overwrites, removes and evictions are recorded by an interposed
// layer (this executable's open, openat, write, fsync, close, renameat and
// unlinkat win over libc's for the library code linked into it; each does
// the real call and logs what it changed). From the log, the states a
// power loss could leave are built, ALICE/CrashMonkey style:
//
//   - every prefix of the operations (a crash after each one);
//   - directory operations (create, rename, unlink) are durable once the
//     directory is fsynced; of those since the last directory fsync, any
//     prefix may have reached the disk (metadata is journaled in order);
//   - file data is durable once the file is fsynced; data written since
//     may be dropped (the file as last synced) or torn at 4 KiB block
//     granularity (the file at its new size, each unsynced block either
//     written or as it was before: zeros past the old end).
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

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include <xxhash.h>

#include "blocks/block_codec.h"
#include "blocks/block_store.h"
#include "tests/blocks/page_test_util.h"
#include "tests/blocks/store_test_util.h"

using namespace kvs_test;

namespace {

// ---- the recording layer ----

enum class OpKind { kNone, kCreate, kWrite, kFsync, kRename, kUnlink, kDirSync };

struct Op {
  OpKind kind = OpKind::kNone;
  int inode = -1;             // kCreate (the new file), kWrite, kFsync
  std::string name, to;       // kCreate, kUnlink: name; kRename: name -> to
  uint64_t offset = 0;        // kWrite
  std::vector<uint8_t> data;  // kWrite
};

// kRecord: log what the store changes. kObserve: only note unlinks (the
// scan at reopen). kOff: pass through (the test's own file work).
enum class Mode { kOff = 0, kRecord, kObserve };

struct Recorder {
  Mode mode;  // zero (kOff) before main: the wrappers run from then on
  std::string dir;
  std::set<int> dir_fds;
  std::map<int, int> file_fds;       // fd -> inode
  std::map<std::string, int> names;  // the store directory as recorded
  int next_inode = 0;
  std::vector<Op> ops;
  std::vector<std::string> observed_unlinks;
  std::string unsupported;  // a call the model does not cover
};

Recorder rec;

template <typename F>
F real(const char *name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

void forget_fd(int fd) {
  rec.dir_fds.erase(fd);
  rec.file_fds.erase(fd);
}

}  // namespace

extern "C" {

int open(const char *path, int flags, ...) {
  static auto next = real<int (*)(const char *, int, ...)>("open");
  mode_t mode = 0;
  if (flags & O_CREAT) {
    va_list args;
    va_start(args, flags);
    mode = va_arg(args, mode_t);
    va_end(args);
  }
  int fd = next(path, flags, mode);
  if (fd >= 0 && rec.mode != Mode::kOff) {
    forget_fd(fd);
    if ((flags & O_DIRECTORY) && rec.dir == path) rec.dir_fds.insert(fd);
  }
  return fd;
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
  bool tracked = rec.mode != Mode::kOff && rec.dir_fds.count(dirfd) > 0;
  bool existed = false;
  if (tracked && (flags & O_CREAT)) {
    struct stat st;
    existed = fstatat(dirfd, path, &st, 0) == 0;
  }
  int fd = next(dirfd, path, flags, mode);
  if (fd < 0 || rec.mode == Mode::kOff) return fd;
  forget_fd(fd);  // a number closed behind our back (closedir) is reused
  if (!tracked) return fd;
  if (flags & O_DIRECTORY) {
    rec.dir_fds.insert(fd);
    return fd;
  }
  if (rec.mode != Mode::kRecord) return fd;
  std::string name = path;
  if ((flags & O_TRUNC) && existed) rec.unsupported = "openat with O_TRUNC of " + name;
  if ((flags & O_CREAT) && !existed) {
    Op op;
    op.kind = OpKind::kCreate;
    op.inode = rec.next_inode++;
    op.name = name;
    rec.names[name] = op.inode;
    rec.ops.push_back(op);
  }
  auto it = rec.names.find(name);
  if (it != rec.names.end()) rec.file_fds[fd] = it->second;
  return fd;
}

ssize_t write(int fd, const void *buf, size_t n) {
  static auto next = real<ssize_t (*)(int, const void *, size_t)>("write");
  if (rec.mode != Mode::kRecord) return next(fd, buf, n);
  auto it = rec.file_fds.find(fd);
  if (it == rec.file_fds.end()) return next(fd, buf, n);
  off_t at = lseek(fd, 0, SEEK_CUR);
  ssize_t w = next(fd, buf, n);
  if (w > 0) {
    Op op;
    op.kind = OpKind::kWrite;
    op.inode = it->second;
    op.offset = static_cast<uint64_t>(at);
    op.data.assign(static_cast<const uint8_t *>(buf), static_cast<const uint8_t *>(buf) + w);
    rec.ops.push_back(std::move(op));
  }
  return w;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t at) {
  static auto next = real<ssize_t (*)(int, const void *, size_t, off_t)>("pwrite");
  if (rec.mode == Mode::kRecord && rec.file_fds.count(fd) > 0) rec.unsupported = "pwrite";
  return next(fd, buf, n, at);
}

int fsync(int fd) {
  static auto next = real<int (*)(int)>("fsync");
  // Reopening a crash state is not itself crashed: its syncs (the scan's,
  // after removing temporary files) need not reach the disk, and skipping
  // them keeps thousands of reopens off the disk's flush latency.
  if (rec.mode == Mode::kObserve) return 0;
  int r = next(fd);
  if (r == 0 && rec.mode == Mode::kRecord) {
    Op op;
    if (rec.dir_fds.count(fd) > 0) {
      op.kind = OpKind::kDirSync;
      rec.ops.push_back(op);
    } else if (rec.file_fds.count(fd) > 0) {
      op.kind = OpKind::kFsync;
      op.inode = rec.file_fds[fd];
      rec.ops.push_back(op);
    }
  }
  return r;
}

int fdatasync(int fd) {
  static auto next = real<int (*)(int)>("fdatasync");
  if (rec.mode == Mode::kRecord && rec.file_fds.count(fd) > 0) rec.unsupported = "fdatasync";
  return next(fd);
}

int close(int fd) {
  static auto next = real<int (*)(int)>("close");
  if (rec.mode != Mode::kOff) forget_fd(fd);
  return next(fd);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
  static auto next = real<int (*)(int, const char *, int, const char *)>("renameat");
  int r = next(olddirfd, oldpath, newdirfd, newpath);
  if (r == 0 && rec.mode == Mode::kRecord && rec.dir_fds.count(olddirfd) > 0 &&
      rec.dir_fds.count(newdirfd) > 0) {
    Op op;
    op.kind = OpKind::kRename;
    op.name = oldpath;
    op.to = newpath;
    auto it = rec.names.find(op.name);
    if (it != rec.names.end()) {
      rec.names[op.to] = it->second;
      rec.names.erase(op.name);
    }
    rec.ops.push_back(op);
  }
  return r;
}

int unlinkat(int dirfd, const char *path, int flags) {
  static auto next = real<int (*)(int, const char *, int)>("unlinkat");
  int r = next(dirfd, path, flags);
  if (r == 0 && rec.mode != Mode::kOff && rec.dir_fds.count(dirfd) > 0) {
    if (rec.mode == Mode::kObserve) {
      rec.observed_unlinks.push_back(path);
    } else {
      Op op;
      op.kind = OpKind::kUnlink;
      op.name = path;
      rec.names.erase(op.name);
      rec.ops.push_back(op);
    }
  }
  return r;
}

}  // extern "C"

namespace {

constexpr size_t kFsBlock = 4096;

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

struct Version {
  uint64_t key = 0;
  uint64_t seed = 0;
  size_t begin = 0;            // ops recorded when the put was called
  size_t end = 0;              // ops recorded when it returned
  std::vector<Layer> payload;  // version 2 keys; a page is regenerated from its seed
};

std::string name_of(uint64_t key) {
  char name[KVS_BLOCK_STORE_NAME_MAX];
  kvs_block_hash h = key_of(key);
  return kvs_block_store_file_name(&h, name);
}

// A kvs_block_store_remove the workload called: the operations recorded
// when it was called and when it returned.
struct Removal {
  uint64_t key = 0;
  size_t begin = 0, end = 0;
};

struct Workload {
  uint64_t capacity = 0;
  std::vector<Version> versions;                      // in call order
  std::map<uint64_t, std::vector<size_t>> by_key;     // key -> indices into versions
  std::map<uint64_t, std::vector<Removal>> removals;  // key -> its removes, in call order
  std::map<std::string, uint64_t> key_of_name;
  uint64_t puts = 0, overwrites = 0, removes = 0, page_puts = 0;
};

// What a crash after `point` operations may show for `key`: the versions
// it may hold, and whether it must be there.
struct Promise {
  std::vector<const Version *> allowed;
  const Version *returned = nullptr;  // the last put that returned
  bool required = false;
  // A remove that returned after the last put that returned: no version
  // put before it may come back.
  const Removal *removed = nullptr;
};

Promise promise(const Workload &w, const std::vector<Op> &ops, uint64_t key, size_t point) {
  Promise p;
  auto it = w.by_key.find(key);
  if (it == w.by_key.end()) return p;
  for (size_t i : it->second) {
    const Version &v = w.versions[i];
    if (v.end <= point) p.returned = &v;
  }
  auto rm = w.removals.find(key);
  if (rm != w.removals.end()) {
    for (const Removal &r : rm->second) {
      if (r.end <= point && (p.returned == nullptr || r.begin >= p.returned->end)) p.removed = &r;
    }
  }
  if (p.removed != nullptr) {
    // Gone, unless put again since the remove returned (not yet returned:
    // that put may or may not be there).
    p.returned = nullptr;
    for (size_t i : it->second) {
      const Version &v = w.versions[i];
      if (v.begin >= p.removed->end && v.begin < point) p.allowed.push_back(&v);
    }
    return p;
  }
  for (size_t i : it->second) {
    const Version &v = w.versions[i];
    if (v.begin >= point) continue;  // none of its operations happened
    if (p.returned != nullptr && &v != p.returned && v.begin < p.returned->end) continue;
    p.allowed.push_back(&v);
  }
  if (p.returned != nullptr) {
    // Unless removed or evicted since it returned.
    p.required = true;
    const std::string name = name_of(key);
    for (size_t i = p.returned->end; i < point; i++) {
      if (ops[i].kind == OpKind::kUnlink && ops[i].name == name) p.required = false;
    }
  }
  return p;
}

// ---- crash states ----

struct Image {
  std::shared_ptr<const std::vector<uint8_t>> bytes;
  uint64_t hash = 0;
};

Image image_of(std::vector<uint8_t> bytes) {
  Image im;
  im.hash = XXH3_64bits(bytes.data(), bytes.size());
  im.bytes = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  return im;
}

using DirState = std::map<std::string, Image>;  // name -> contents

uint64_t hash_of(const DirState &s) {
  XXH3_state_t *h = XXH3_createState();
  XXH3_64bits_reset(h);
  for (const auto &e : s) {
    XXH3_64bits_update(h, e.first.data(), e.first.size() + 1);
    XXH3_64bits_update(h, &e.second.hash, sizeof e.second.hash);
  }
  uint64_t out = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return out;
}

// The contents of a file whose data since its last fsync reached the
// disk only in the blocks `keep` selects; the others are as synced.
std::vector<uint8_t> torn(const std::vector<uint8_t> &synced, const std::vector<uint8_t> &now,
                          const std::vector<size_t> &dirty, uint64_t keep_mask,
                          const std::vector<bool> *keep_list) {
  std::vector<uint8_t> out(now.size(), 0);
  std::copy(synced.begin(), synced.begin() + std::min(synced.size(), now.size()), out.begin());
  for (size_t i = 0; i < dirty.size(); i++) {
    bool keep = keep_list != nullptr ? (*keep_list)[i] : ((keep_mask >> i) & 1) != 0;
    if (!keep) continue;
    size_t from = dirty[i] * kFsBlock, to = std::min(now.size(), from + kFsBlock);
    std::copy(now.begin() + from, now.begin() + to, out.begin() + from);
  }
  return out;
}

// The unsynced blocks of a file: where `now` differs from `synced`.
std::vector<size_t> dirty_blocks(const std::vector<uint8_t> &synced,
                                 const std::vector<uint8_t> &now) {
  std::vector<size_t> dirty;
  for (size_t b = 0; b * kFsBlock < now.size(); b++) {
    size_t from = b * kFsBlock, to = std::min(now.size(), from + kFsBlock);
    bool same = to <= synced.size() &&
                std::equal(now.begin() + from, now.begin() + to, synced.begin() + from);
    if (!same) dirty.push_back(b);
  }
  return dirty;
}

// Calls visit(point, description, state) for every crash state of the
// log. Enumerates every subset of a file's unsynced blocks up to 7 of
// them; beyond that each single block kept or lost, and 32 random sets.
template <typename Visit>
void explore(const std::vector<Op> &ops, uint64_t seed, Visit visit) {
  std::map<std::string, int> durable_ns, ns;  // at the last directory fsync; now
  std::vector<const Op *> pending;            // directory operations since
  std::map<int, Image> synced, now;           // file contents
  std::mt19937_64 rng(seed ^ 0x5eedull);
  const Image empty = image_of({});

  auto apply_meta = [](std::map<std::string, int> &names, const Op &op) {
    if (op.kind == OpKind::kCreate) {
      names[op.name] = op.inode;
    } else if (op.kind == OpKind::kRename) {
      auto it = names.find(op.name);
      if (it != names.end()) {
        int inode = it->second;
        names.erase(it);
        names[op.to] = inode;
      }
    } else if (op.kind == OpKind::kUnlink) {
      names.erase(op.name);
    }
  };
  auto content = [&](std::map<int, Image> &m, int inode) -> Image & {
    auto it = m.find(inode);
    if (it == m.end()) it = m.emplace(inode, empty).first;
    return it->second;
  };

  for (size_t point = 0; point <= ops.size(); point++) {
    // The namespaces a crash here may leave: the durable one plus each
    // prefix of the pending directory operations.
    std::map<std::string, int> names = durable_ns;
    for (size_t j = 0; j <= pending.size(); j++) {
      if (j > 0) apply_meta(names, *pending[j - 1]);
      DirState base;
      std::vector<std::pair<std::string, int>> uncertain;
      for (const auto &e : names) {
        Image &s = content(synced, e.second);
        Image &n = content(now, e.second);
        base[e.first] = n;
        if (s.hash != n.hash || s.bytes->size() != n.bytes->size()) uncertain.push_back(e);
      }
      char what[96];
      snprintf(what, sizeof what, "%zu of %zu pending directory operations", j, pending.size());
      visit(point, std::string(what) + ", all data written", base);
      if (uncertain.empty()) continue;
      DirState dropped = base;
      for (const auto &u : uncertain) dropped[u.first] = content(synced, u.second);
      visit(point, std::string(what) + ", unsynced data dropped", dropped);
      for (const auto &u : uncertain) {
        const std::vector<uint8_t> &s = *content(synced, u.second).bytes;
        const std::vector<uint8_t> &n = *content(now, u.second).bytes;
        std::vector<size_t> dirty = dirty_blocks(s, n);
        auto emit = [&](uint64_t mask, const std::vector<bool> *list) {
          DirState t = base;
          t[u.first] = image_of(torn(s, n, dirty, mask, list));
          visit(point, std::string(what) + ", " + u.first + " torn", t);
        };
        if (dirty.size() <= 7) {
          for (uint64_t mask = 0; mask + 1 < (1ull << dirty.size()); mask++) emit(mask, nullptr);
        } else {
          std::vector<bool> keep(dirty.size());
          for (size_t i = 0; i < dirty.size(); i++) {
            std::fill(keep.begin(), keep.end(), false);
            keep[i] = true;
            emit(0, &keep);
            std::fill(keep.begin(), keep.end(), true);
            keep[i] = false;
            emit(0, &keep);
          }
          for (int r = 0; r < 32; r++) {
            for (size_t i = 0; i < dirty.size(); i++) keep[i] = (rng() & 1) != 0;
            emit(0, &keep);
          }
        }
      }
    }
    if (point == ops.size()) break;

    const Op &op = ops[point];
    switch (op.kind) {
      case OpKind::kNone:
        break;
      case OpKind::kCreate:
        content(now, op.inode) = empty;
        content(synced, op.inode) = empty;
        apply_meta(ns, op);
        pending.push_back(&op);
        break;
      case OpKind::kRename:
      case OpKind::kUnlink:
        apply_meta(ns, op);
        pending.push_back(&op);
        break;
      case OpKind::kWrite: {
        std::vector<uint8_t> bytes = *content(now, op.inode).bytes;
        if (bytes.size() < op.offset + op.data.size()) bytes.resize(op.offset + op.data.size());
        std::copy(op.data.begin(), op.data.end(), bytes.begin() + op.offset);
        content(now, op.inode) = image_of(std::move(bytes));
        break;
      }
      case OpKind::kFsync:
        content(synced, op.inode) = content(now, op.inode);
        break;
      case OpKind::kDirSync:
        durable_ns = ns;
        pending.clear();
        break;
    }
  }
}

// ---- checking one state ----

struct Checker {
  const Workload &w;
  const std::vector<Op> &ops;
  std::string dir;                       // where states are laid out
  std::map<std::string, uint64_t> disk;  // what lies there now: name -> hash
  uint64_t checked = 0, temp_removed = 0, evicted = 0, verified_gets = 0;

  // Lays `state` out in dir, changing only what differs from the last one.
  bool lay_out(const DirState &state, std::string *problem) {
    for (auto it = disk.begin(); it != disk.end();) {
      auto want = state.find(it->first);
      if (want == state.end() || want->second.hash != it->second) {
        if (unlink((dir + "/" + it->first).c_str()) != 0) {
          *problem = "cannot remove " + it->first;
          return false;
        }
        it = disk.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto &e : state) {
      if (disk.count(e.first) > 0) continue;
      if (!write_bytes(dir + "/" + e.first, *e.second.bytes)) {
        *problem = "cannot write " + e.first;
        return false;
      }
      disk[e.first] = e.second.hash;
    }
    return true;
  }

  // Reopens the store on the state; returns what is wrong (empty: sound).
  std::vector<std::string> check(size_t point, const DirState &state) {
    std::vector<std::string> wrong;
    std::string problem;
    if (!lay_out(state, &problem)) return {problem};
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
    rec.dir = dir;
    rec.dir_fds.clear();
    rec.file_fds.clear();
    rec.observed_unlinks.clear();
    rec.mode = Mode::kObserve;
    kvs_status st = kvs_block_store_create(dir.c_str(), &o, &s, &scan, &err);
    rec.mode = Mode::kOff;
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
    std::map<std::string, uint64_t> after;
    for (const std::string &n : list_dir(dir)) {
      if (n.rfind(".tmp-", 0) == 0) wrong.push_back("a temporary file survived the scan: " + n);
      auto it = disk.find(n);
      if (it != disk.end()) {
        after[n] = it->second;
      } else if (n == ".lock") {
        after[n] = XXH3_64bits(nullptr, 0);
      } else {
        wrong.push_back("the scan created " + n);
      }
    }
    disk = after;

    for (const auto &entry : w.by_key) {
      uint64_t key = entry.first;
      Promise p = promise(w, ops, key, point);
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
        for (const Version *v : p.allowed) known = known || holds(*v);
        if (!known && p.removed != nullptr) {
          // Which version came back, to say so.
          std::string seed = "a version never put";
          for (size_t i : w.by_key.at(key)) {
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
                          std::to_string(p.returned->seed) + " returned after operation " +
                          std::to_string(p.returned->end) + ", and it is gone");
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

std::string op_text(const Op &op) {
  switch (op.kind) {
    case OpKind::kNone:
      return "(removed)";
    case OpKind::kCreate:
      return "create " + op.name;
    case OpKind::kWrite:
      return "write " + std::to_string(op.data.size()) + " bytes at " + std::to_string(op.offset) +
             " of file " + std::to_string(op.inode);
    case OpKind::kFsync:
      return "fsync file " + std::to_string(op.inode);
    case OpKind::kRename:
      return "rename " + op.name + " -> " + op.to;
    case OpKind::kUnlink:
      return "unlink " + op.name;
    case OpKind::kDirSync:
      return "fsync the directory";
  }
  return "?";
}

// Runs the workload on a real store in `dir` with the recorder on.
void run_workload(const std::string &dir, uint64_t seed, uint64_t n_puts, Workload *w) {
  std::mt19937_64 rng(seed);
  rec = Recorder();
  rec.dir = dir;
  rec.mode = Mode::kRecord;
  kvs_block_store_options o = KVS_BLOCK_STORE_OPTIONS_INIT;
  o.capacity_bytes = w->capacity;
  kvs_block_store_t s = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_block_store_create(dir.c_str(), &o, &s, nullptr, &err), KVS_OK) << err.message;
  uint64_t next_key = 0, next_seed = 1;
  while (w->puts < n_puts) {
    uint64_t r = rng() % 100;
    std::vector<uint64_t> present;
    for (const auto &e : w->by_key) {
      kvs_block_hash h = key_of(e.first);
      if (kvs_block_store_contains(s, &h)) present.push_back(e.first);
    }
    if (r < 8 && !present.empty()) {
      uint64_t key = present[rng() % present.size()];
      kvs_block_hash h = key_of(key);
      Removal removal;
      removal.key = key;
      removal.begin = rec.ops.size();
      ASSERT_EQ(kvs_block_store_remove(s, &h, &err), KVS_OK) << err.message;
      removal.end = rec.ops.size();
      w->removals[key].push_back(removal);
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
    v.key = key;
    v.seed = next_seed++;
    kvs_block_hash h = key_of(key);
    kvs_status st;
    if (is_page_key(key)) {
      kvs_page_block_t b = stamp_page(page_for(key, v.seed));
      ASSERT_NE(b, nullptr);
      v.begin = rec.ops.size();
      st = kvs_block_store_put_page(s, &h, b, &err);
      v.end = rec.ops.size();
      kvs_page_block_destroy(b);
    } else {
      Shape shape = shape_of(key);
      v.payload = payload(shape.n_layers, shape.n_kv_heads, shape.head_dim, shape.block_size,
                          shape.dtype, v.seed);
      kvs_block_t b = make_block(shape, v.seed);
      ASSERT_NE(b, nullptr);
      v.begin = rec.ops.size();
      st = kvs_block_store_put(s, &h, b, &err);
      v.end = rec.ops.size();
      kvs_block_destroy(b);
    }
    ASSERT_EQ(st, KVS_OK) << err.message;
    w->by_key[key].push_back(w->versions.size());
    w->key_of_name[name_of(key)] = key;
    w->versions.push_back(std::move(v));
    w->puts++;
    if (is_page_key(key)) w->page_puts++;
  }
  kvs_block_store_destroy(s);
  rec.mode = Mode::kOff;
  ASSERT_EQ(rec.unsupported, "") << "the store made a call the model does not cover";
}

struct Exploration {
  uint64_t generated = 0, checked = 0, images = 0, points = 0;
  std::vector<std::string> failures;  // the first few, with their crash point
};

// Explores every crash state of `ops`, checking each distinct one with
// `checker`, and stops after `max_failures` unsound states. A state is a
// crash point and a disk image: the same files at another point are
// checked again, against what was promised by then.
Exploration explore_and_check(Checker &checker, const std::vector<Op> &ops, uint64_t seed,
                              size_t max_failures) {
  Exploration e;
  std::unordered_set<uint64_t> seen, images;
  size_t last_point = SIZE_MAX;
  explore(ops, seed, [&](size_t point, const std::string &what, const DirState &state) {
    if (e.failures.size() >= max_failures) return;
    e.generated++;
    if (point != last_point) {
      e.points++;
      last_point = point;
    }
    uint64_t image = hash_of(state);
    images.insert(image);
    if (!seen.insert(image ^ (static_cast<uint64_t>(point + 1) * 0x9e3779b97f4a7c15ull)).second) {
      return;
    }
    e.checked++;
    std::vector<std::string> wrong = checker.check(point, state);
    if (!wrong.empty()) {
      std::string msg = "crash after operation " + std::to_string(point) + " (" +
                        (point > 0 ? op_text(ops[point - 1]) : std::string("none")) + "), " + what +
                        ":";
      for (const std::string &x : wrong) msg += "\n    " + x;
      e.failures.push_back(msg);
    }
  });
  e.images = images.size();
  return e;
}

// The log with every operation of `kind` taken out (its place kept, so
// the workload's positions still hold).
std::vector<Op> without(const std::vector<Op> &ops, OpKind kind, size_t limit) {
  std::vector<Op> out(ops.begin(), ops.begin() + std::min(limit, ops.size()));
  for (Op &op : out) {
    if (op.kind == kind) op.kind = OpKind::kNone;
  }
  return out;
}

// The log with the directory fsyncs the removes made taken out (as if
// kvs_block_store_remove returned without making its unlink durable), up
// to `limit` operations.
std::vector<Op> without_remove_dirsyncs(const Workload &w, const std::vector<Op> &ops,
                                        size_t limit) {
  std::vector<Op> out(ops.begin(), ops.begin() + std::min(limit, ops.size()));
  for (const auto &entry : w.removals) {
    for (const Removal &r : entry.second) {
      for (size_t i = r.begin; i < r.end && i < out.size(); i++) {
        if (out[i].kind == OpKind::kDirSync) out[i].kind = OpKind::kNone;
      }
    }
  }
  return out;
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

  Checker checker{w, ops, state_dir, {}};
  Exploration e = explore_and_check(checker, ops, seed, 5);
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
  Checker no_fsync_checker{w, no_fsync_ops, mutant_dir, {}};
  Exploration no_fsync = explore_and_check(no_fsync_checker, no_fsync_ops, seed, 1);
  EXPECT_FALSE(no_fsync.failures.empty())
      << "with the temporary files' fsyncs taken out, no crash state lost or tore a block";
  std::string mutant_dir2 = root + "/mutant2";
  ASSERT_EQ(mkdir(mutant_dir2.c_str(), 0755), 0);
  Checker no_dirsync_checker{w, no_dirsync_ops, mutant_dir2, {}};
  Exploration no_dirsync = explore_and_check(no_dirsync_checker, no_dirsync_ops, seed, 1);
  EXPECT_FALSE(no_dirsync.failures.empty())
      << "with the directory fsyncs taken out, no crash state lost a returned put";
  // Without the removes' directory fsyncs only, a removed block comes back.
  // The log up to 400 operations past the first remove holds several.
  ASSERT_GT(w.removes, 0u) << "the workload removed nothing";
  ASSERT_GT(w.page_puts, 0u) << "the workload put no page block (format version 3)";
  size_t first_remove_end = ops.size();
  for (const auto &entry : w.removals) {
    first_remove_end = std::min(first_remove_end, entry.second.front().end);
  }
  const std::vector<Op> no_remove_dirsync_ops =
      without_remove_dirsyncs(w, ops, std::max<size_t>(400, first_remove_end + 400));
  std::string mutant_dir3 = root + "/mutant3";
  ASSERT_EQ(mkdir(mutant_dir3.c_str(), 0755), 0);
  Checker no_remove_dirsync_checker{w, no_remove_dirsync_ops, mutant_dir3, {}};
  Exploration no_remove_dirsync =
      explore_and_check(no_remove_dirsync_checker, no_remove_dirsync_ops, seed, 1);
  ASSERT_FALSE(no_remove_dirsync.failures.empty())
      << "with the removes' directory fsyncs taken out, no removed block came back";
  EXPECT_NE(no_remove_dirsync.failures[0].find("came back"), std::string::npos)
      << no_remove_dirsync.failures[0];
  auto one_line = [](std::string text) {
    for (size_t at; (at = text.find(":\n    ")) != std::string::npos;) text.replace(at, 6, ": ");
    for (size_t at; (at = text.find("\n    ")) != std::string::npos;) text.replace(at, 5, "; ");
    return text;
  };
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

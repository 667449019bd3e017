// The recorder and the explorer of crash_states.h.
#include "tests/blocks/crash_states.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <unordered_set>

#include <xxhash.h>

namespace kvs_test {
namespace crash {

Recorder rec;

void record(const std::string &dir) {
  rec = Recorder();
  rec.dir = dir;
  rec.mode = Mode::kRecord;
}

void observe(const std::string &dir) {
  rec.dir = dir;
  rec.dir_fds.clear();
  rec.file_fds.clear();
  rec.observed_unlinks.clear();
  rec.mode = Mode::kObserve;
}

void stop() { rec.mode = Mode::kOff; }

namespace {

template <typename F>
F real(const char *name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

void forget_fd(int fd) {
  rec.dir_fds.erase(fd);
  rec.file_fds.erase(fd);
}

}  // namespace
}  // namespace crash
}  // namespace kvs_test

using kvs_test::crash::forget_fd;
using kvs_test::crash::Mode;
using kvs_test::crash::Op;
using kvs_test::crash::OpKind;
using kvs_test::crash::real;
using kvs_test::crash::rec;

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

namespace kvs_test {
namespace crash {

Image image_of(std::vector<uint8_t> bytes) {
  Image im;
  im.hash = XXH3_64bits(bytes.data(), bytes.size());
  im.bytes = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  return im;
}

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

namespace {

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

}  // namespace

void explore(const std::vector<Op> &ops, uint64_t seed, const Visit &visit) {
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

Exploration explore_and_check(const Check &check, const std::vector<Op> &ops, uint64_t seed,
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
    std::vector<std::string> wrong = check(point, state);
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

std::vector<Op> without(const std::vector<Op> &ops, OpKind kind, size_t limit) {
  std::vector<Op> out(ops.begin(), ops.begin() + std::min(limit, ops.size()));
  for (Op &op : out) {
    if (op.kind == kind) op.kind = OpKind::kNone;
  }
  return out;
}

size_t History::put(const Call &c) {
  puts_of[c.key].push_back(puts.size());
  puts.push_back(c);
  return puts.size() - 1;
}

void History::remove(const Call &c) { removes_of[c.key].push_back(c); }

Promise promise(const History &h, const std::vector<Op> &ops, uint64_t key, const std::string &name,
                size_t point) {
  Promise p;
  auto it = h.puts_of.find(key);
  if (it == h.puts_of.end()) return p;
  for (size_t i : it->second) {
    if (h.puts[i].end <= point) {
      p.returned = &h.puts[i];
      p.returned_put = i;
    }
  }
  auto rm = h.removes_of.find(key);
  if (rm != h.removes_of.end()) {
    for (const Call &r : rm->second) {
      if (r.end <= point && (p.returned == nullptr || r.begin >= p.returned->end)) p.removed = &r;
    }
  }
  if (p.removed != nullptr) {
    // Gone, unless put again since the remove returned (not yet returned:
    // that put may or may not be there).
    p.returned = nullptr;
    for (size_t i : it->second) {
      const Call &v = h.puts[i];
      if (v.begin >= p.removed->end && v.begin < point) p.allowed.push_back(i);
    }
    return p;
  }
  for (size_t i : it->second) {
    const Call &v = h.puts[i];
    if (v.begin >= point) continue;  // none of its operations happened
    if (p.returned != nullptr && &v != p.returned && v.begin < p.returned->end) continue;
    p.allowed.push_back(i);
  }
  if (p.returned != nullptr) {
    // Unless removed or evicted since it returned.
    p.required = true;
    for (size_t i = p.returned->end; i < point; i++) {
      if (ops[i].kind == OpKind::kUnlink && ops[i].name == name) p.required = false;
    }
  }
  return p;
}

std::vector<Op> without_remove_dirsyncs(const History &h, const std::vector<Op> &ops,
                                        size_t limit) {
  std::vector<Op> out(ops.begin(), ops.begin() + std::min(limit, ops.size()));
  for (const auto &entry : h.removes_of) {
    for (const Call &r : entry.second) {
      for (size_t i = r.begin; i < r.end && i < out.size(); i++) {
        if (out[i].kind == OpKind::kDirSync) out[i].kind = OpKind::kNone;
      }
    }
  }
  return out;
}

std::string one_line(std::string text) {
  for (size_t at; (at = text.find(":\n    ")) != std::string::npos;) text.replace(at, 6, ": ");
  for (size_t at; (at = text.find("\n    ")) != std::string::npos;) text.replace(at, 5, "; ");
  return text;
}

namespace {

bool write_file(const std::string &path, const std::vector<uint8_t> &bytes) {
  FILE *f = fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = bytes.empty() || fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return fclose(f) == 0 && ok;
}

}  // namespace

bool StateDir::lay_out(const DirState &state, std::string *problem) {
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
    if (!write_file(dir + "/" + e.first, *e.second.bytes)) {
      *problem = "cannot write " + e.first;
      return false;
    }
    disk[e.first] = e.second.hash;
  }
  return true;
}

std::vector<std::string> StateDir::settle(const std::set<std::string> &also) {
  std::vector<std::string> made;
  std::map<std::string, uint64_t> after;
  DIR *d = opendir(dir.c_str());
  if (d == nullptr) return {"cannot list " + dir};
  while (struct dirent *e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    auto it = disk.find(n);
    if (it != disk.end()) {
      after[n] = it->second;
    } else if (also.count(n) > 0) {
      after[n] = XXH3_64bits(nullptr, 0);
    } else {
      made.push_back(n);
      after[n] = 0;  // no image's hash in practice: the next lay_out replaces it
    }
  }
  closedir(d);
  disk = after;
  return made;
}

}  // namespace crash
}  // namespace kvs_test

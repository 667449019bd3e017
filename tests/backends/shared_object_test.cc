// backends/shared_object.h: a file checked before dlopen maps it. A real
// shared object (libso_fixture.so) cut at every length: each cut below
// what the loader maps is refused naming the file and how (and an
// unchecked dlopen of such cuts dies of a signal in a child, as the
// planner did; tried on every 15th), each cut the check passes loads in a child without a
// fault; FIFOs (without blocking), directories, devices, empty, text,
// foreign and non-shared ELF files get their own verdicts.
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <link.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "backends/shared_object.h"

namespace {

const char kFixture[] = "tests/backends/libso_fixture.so";

std::string scratch(const std::string &name) {
  const char *t = getenv("TEST_TMPDIR");
  std::string dir = std::string(t != nullptr ? t : "/tmp") + "/shared_object_test";
  mkdir(dir.c_str(), 0755);
  return dir + "/" + name;
}

std::vector<char> read_all(const char *path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string &path, const char *data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, (std::streamsize)n);
  ASSERT_TRUE(out.good()) << path;
}

struct Verdict {
  kvs_so_verdict verdict;
  std::string why;
};

Verdict check(const std::string &path) {
  char why[1024];
  kvs_so_verdict v = kvs_shared_object_check(path.c_str(), why, sizeof why);
  return {v, why};
}

ElfW(Ehdr) header_of(const std::vector<char> &f) {
  ElfW(Ehdr) h;
  memcpy(&h, f.data(), sizeof h);
  return h;
}

ElfW(Phdr) phdr_of(const std::vector<char> &f, size_t i) {
  ElfW(Phdr) p;
  memcpy(&p, f.data() + header_of(f).e_phoff + i * sizeof p, sizeof p);
  return p;
}

// How a child that dlopens path ends: its exit status (0 loaded, 3 refused
// by the loader), or 128 + the signal that killed it (a sanitizer's
// handler, which would report the fault at length, is taken off first).
int dlopen_in_child(const std::string &path) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    struct sigaction plain;
    memset(&plain, 0, sizeof plain);
    plain.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &plain, nullptr);
    sigaction(SIGSEGV, &plain, nullptr);
    void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    _exit(h != nullptr ? 0 : 3);
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

TEST(SharedObject, WholeFileIsTakenAndLoads) {
  Verdict v = check(kFixture);
  EXPECT_EQ(v.verdict, KVS_SO_OK) << v.why;
  EXPECT_EQ(v.why, "");
  EXPECT_EQ(dlopen_in_child(kFixture), 0);
}

TEST(SharedObject, EveryCutShortCopyIsRefusedAndEveryPassedOneLoads) {
  std::vector<char> f = read_all(kFixture);
  ASSERT_GT(f.size(), sizeof(ElfW(Ehdr)));
  ElfW(Ehdr) h = header_of(f);
  // What the loader needs of the file, from the headers: the program
  // header table and every segment's file range.
  uint64_t table_end = h.e_phoff + (uint64_t)h.e_phnum * sizeof(ElfW(Phdr));
  uint64_t need = table_end, last_offset = 0;
  for (size_t i = 0; i < h.e_phnum; i++) {
    ElfW(Phdr) p = phdr_of(f, i);
    if (p.p_filesz > 0 && p.p_offset + p.p_filesz > need) {
      need = p.p_offset + p.p_filesz;
      last_offset = p.p_offset;
    }
  }
  // The section headers after the last segment are the loader's to skip.
  ASSERT_LT(need, f.size());
  std::set<uint64_t> cuts = {
      0, 1, 4, 16, 63, 64, 65, table_end - 1, table_end, need - 1, need, need + 1, f.size() - 1};
  for (uint64_t l = 0; l < f.size(); l += 509) cuts.insert(l);
  for (uint64_t l = 4096; l < f.size(); l += 4096) {
    cuts.insert(l - 1);
    cuts.insert(l);
  }
  // An unchecked dlopen is tried on every 15th refused cut.
  size_t refused = 0, tried_unchecked = 0, died_unchecked = 0, passed = 0;
  for (uint64_t l : cuts) {
    std::string path = scratch("cut_" + std::to_string(l) + ".so");
    write_file(path, f.data(), l);
    Verdict v = check(path);
    if (l >= need) {
      // Whole as far as the loader reads: taken, and it loads.
      EXPECT_EQ(v.verdict, KVS_SO_OK) << l << ": " << v.why;
      EXPECT_EQ(dlopen_in_child(path), 0) << "a copy cut at " << l << " passed but did not load";
      passed++;
      continue;
    }
    EXPECT_EQ(v.verdict, KVS_SO_BROKEN) << l << " of " << need << " bytes: " << v.why;
    EXPECT_EQ(v.why.rfind(path + " is ", 0), 0u) << v.why;
    EXPECT_NE(v.why.find(l == 0 ? "is empty (0 bytes)" : "is cut short"), std::string::npos)
        << v.why;
    if (refused++ % 15 != 0) continue;
    tried_unchecked++;
    if (dlopen_in_child(path) >= 128) died_unchecked++;
  }
  // The headers' own figures, in the words the registry passes on.
  std::string path = scratch("cut_" + std::to_string(need - 1) + ".so");
  EXPECT_NE(check(path).why.find("is cut short: its loadable segment at offset " +
                                 std::to_string(last_offset) + " needs " + std::to_string(need) +
                                 " bytes of the file, which has " + std::to_string(need - 1)),
            std::string::npos)
      << check(path).why;
  path = scratch("cut_64.so");
  EXPECT_NE(check(path).why.find("is cut short: its " + std::to_string(h.e_phnum) +
                                 " program headers at offset 64 need " + std::to_string(table_end) +
                                 " bytes of the file, which has 64"),
            std::string::npos)
      << check(path).why;
  // Without the check, the loader faults on such copies: the crash the
  // check keeps out of the caller's process.
  EXPECT_GT(died_unchecked, 0u);
  printf(
      "%zu cuts of %zu bytes refused (an unchecked dlopen died of a signal on %zu of the %zu "
      "tried), %zu cuts at or past the %llu bytes the loader needs taken and loaded\n",
      refused, f.size(), died_unchecked, tried_unchecked, passed, (unsigned long long)need);
}

TEST(SharedObject, WhatIsNoFileIsRefusedWithoutBlocking) {
  // A FIFO with no writer: an open that waited would hang here forever,
  // so the alarm turns a wait into a failure.
  std::string fifo = scratch("fifo.so");
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  alarm(30);
  Verdict v = check(fifo);
  alarm(0);
  EXPECT_EQ(v.verdict, KVS_SO_BROKEN);
  EXPECT_EQ(v.why, fifo + " is a FIFO, not a shared object");

  std::string dir = scratch("dir.so");
  mkdir(dir.c_str(), 0755);
  v = check(dir);
  EXPECT_EQ(v.verdict, KVS_SO_BROKEN);
  EXPECT_EQ(v.why, dir + " is a directory, not a shared object");

  v = check("/dev/null");
  EXPECT_EQ(v.verdict, KVS_SO_BROKEN);
  EXPECT_EQ(v.why, "/dev/null is a character device, not a shared object");

  std::string empty = scratch("empty.so");
  write_file(empty, "", 0);
  v = check(empty);
  EXPECT_EQ(v.verdict, KVS_SO_BROKEN);
  EXPECT_EQ(v.why, empty + " is empty (0 bytes), not a shared object");

  std::string text = scratch("script.so");
  write_file(text, "GROUP ( libc.so.6 )\n", 20);
  v = check(text);
  EXPECT_EQ(v.verdict, KVS_SO_BROKEN);
  EXPECT_EQ(v.why,
            text + " is not a shared object: it does not start with the ELF magic (\\177ELF)");

  std::string none = scratch("none.so");
  unlink(none.c_str());
  v = check(none);
  EXPECT_EQ(v.verdict, KVS_SO_ABSENT);
  EXPECT_EQ(v.why, none + ": not there");
  std::string dangling = scratch("dangling.so");
  unlink(dangling.c_str());
  ASSERT_EQ(symlink(none.c_str(), dangling.c_str()), 0);
  EXPECT_EQ(check(dangling).verdict, KVS_SO_ABSENT);
}

// The fixture with its header changed by edit.
std::string edited(const std::string &name, void (*edit)(std::vector<char> &)) {
  std::vector<char> f = read_all(kFixture);
  edit(f);
  std::string path = scratch(name);
  write_file(path, f.data(), f.size());
  return path;
}

TEST(SharedObject, ForeignObjectsArePassedOverAndOtherKindsRefused) {
  std::string path = edited("class32.so", [](std::vector<char> &f) { f[EI_CLASS] = ELFCLASS32; });
  Verdict v = check(path);
  EXPECT_EQ(v.verdict, KVS_SO_PASSED_OVER);
  EXPECT_EQ(v.why, path +
                       " is a 32-bit little-endian ELF object; this process is 64-bit "
                       "little-endian");

  path = edited("machine.so", [](std::vector<char> &f) {
    ElfW(Ehdr) h = header_of(f);
    h.e_machine = EM_S390;
    memcpy(f.data(), &h, sizeof h);
  });
  v = check(path);
  EXPECT_EQ(v.verdict, KVS_SO_PASSED_OVER);
  EXPECT_NE(v.why.find(" is an ELF object for machine 22; this process runs on machine"),
            std::string::npos)
      << v.why;

  path = edited("exec.so", [](std::vector<char> &f) {
    ElfW(Ehdr) h = header_of(f);
    h.e_type = ET_EXEC;
    memcpy(f.data(), &h, sizeof h);
  });
  v = check(path);
  EXPECT_EQ(v.verdict, KVS_SO_BROKEN);
  EXPECT_EQ(v.why, path + " is not a shared object: its ELF type 2 is an executable");

  path = edited("phentsize.so", [](std::vector<char> &f) {
    ElfW(Ehdr) h = header_of(f);
    h.e_phentsize = 32;
    memcpy(f.data(), &h, sizeof h);
  });
  v = check(path);
  EXPECT_EQ(v.verdict, KVS_SO_BROKEN);
  EXPECT_NE(v.why.find("program headers of 32 bytes (expected at least 1 of 56)"),
            std::string::npos)
      << v.why;

  path = edited("noload.so", [](std::vector<char> &f) {
    ElfW(Ehdr) h = header_of(f);
    for (size_t i = 0; i < h.e_phnum; i++) {
      ElfW(Phdr) p = phdr_of(f, i);
      if (p.p_type == PT_LOAD) p.p_type = PT_NULL;
      memcpy(f.data() + h.e_phoff + i * sizeof p, &p, sizeof p);
    }
  });
  v = check(path);
  EXPECT_EQ(v.verdict, KVS_SO_BROKEN);
  EXPECT_EQ(v.why, path + " is not a shared object the loader can map: it has no loadable segment");

  // A segment whose range wraps past 2^64 is cut short, not wrapped.
  path = edited("wrap.so", [](std::vector<char> &f) {
    ElfW(Ehdr) h = header_of(f);
    for (size_t i = 0; i < h.e_phnum; i++) {
      ElfW(Phdr) p = phdr_of(f, i);
      if (p.p_type != PT_DYNAMIC) continue;
      p.p_offset = UINT64_MAX - 8;
      memcpy(f.data() + h.e_phoff + i * sizeof p, &p, sizeof p);
    }
  });
  v = check(path);
  EXPECT_EQ(v.verdict, KVS_SO_BROKEN);
  EXPECT_NE(v.why.find("is cut short: its dynamic section (PT_DYNAMIC) at offset "
                       "18446744073709551607 needs 18446744073709551615 bytes of the file"),
            std::string::npos)
      << v.why;
}

}  // namespace

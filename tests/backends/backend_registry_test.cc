// The backend registry (backends/registry.c) never hands the loader a broken
// file: backends and vendor libraries cut short (a real shared object,
// libso_fixture.so, cut in its segments), holding only an ELF header,
// empty, FIFOs and directories, found through KVSHARD_BACKEND_PATH,
// KVSHARD_CUDA_PATH and the loader's own path (LD_LIBRARY_PATH), are each
// KVS_ERR_LIBRARY naming the file and what is wrong with it, with
// kvs_backend_broken true, in a process that exits normally (the registry
// loads once per process, so each case runs tests/backends/backend_probe in
// an environment of its own). Whole files are loaded (the fixture has no
// entry point, which the registry then says), and files for another
// machine are passed over on the way to the next place.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

const char kFixture[] = "tests/backends/libso_fixture.so";
const char kProbe[] = "tests/backends/backend_probe";
const char *const kFiles[] = {"libkvshard-cuda.so.1", "libkvshard-nccl.so.1", "libkvshard-mpi.so.1",
                              "libcudart.so.13",      "libnccl.so.2",         "libmpi.so.40"};

std::string g_root;

std::string dir_of(const std::string &name) { return g_root + "/" + name; }

void write_file(const std::string &path, const std::vector<char> &bytes, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), (std::streamsize)n);
  ASSERT_TRUE(out.good()) << path;
}

// The folders each case points the registry at, every file name in each.
class BackendRegistry : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char *t = getenv("TEST_TMPDIR");
    g_root = std::string(t != nullptr ? t : "/tmp") + "/backend_registry_test";
    mkdir(g_root.c_str(), 0755);
    std::ifstream in(kFixture, std::ios::binary);
    std::vector<char> so((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(so.size(), 4096u);
    std::vector<char> class32 = so;
    class32[4] = 1;  // EI_CLASS: ELFCLASS32
    for (const char *d : {"whole", "cut", "header", "empty", "fifo", "dir", "foreign", "mixed"}) {
      mkdir(dir_of(d).c_str(), 0755);
    }
    for (const char *file : kFiles) {
      std::string name = std::string("/") + file;
      write_file(dir_of("whole") + name, so, so.size());
      write_file(dir_of("cut") + name, so, so.size() / 2);
      write_file(dir_of("header") + name, so, 64);
      write_file(dir_of("empty") + name, so, 0);
      write_file(dir_of("foreign") + name, class32, class32.size());
      unlink((dir_of("fifo") + name).c_str());
      ASSERT_EQ(mkfifo((dir_of("fifo") + name).c_str(), 0644), 0);
      mkdir((dir_of("dir") + name).c_str(), 0755);
    }
    write_file(dir_of("mixed") + "/libcudart.so.13", so, so.size());
    write_file(dir_of("mixed") + "/libnccl.so.2", so, so.size() / 2);
  }
};

struct Answer {
  int exit_code = -1;  // 128 + the signal when one killed it
  std::string status, message;
  bool broken = false;
};

// backend_probe KIND in an environment of exactly env: what it printed
// and how it ended. A probe still running after 60 s (a FIFO opened to
// wait for a writer) is killed and reported as hung.
Answer probe(const std::string &kind, const std::vector<std::string> &env) {
  Answer a;
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  // The sanitizers' settings travel (under --config=asan the probe is
  // sanitized too); nothing else of this process's environment does.
  std::vector<std::string> all = env;
  for (char **e = environ; *e != nullptr; e++) {
    std::string v = *e;
    if (v.rfind("ASAN_", 0) == 0 || v.rfind("LSAN_", 0) == 0 || v.rfind("UBSAN_", 0) == 0) {
      all.push_back(v);
    }
  }
  std::vector<char *> envp;
  for (const std::string &e : all) envp.push_back(const_cast<char *>(e.c_str()));
  envp.push_back(nullptr);
  char *argv[] = {const_cast<char *>(kProbe), const_cast<char *>(kind.c_str()), nullptr};
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, kProbe, &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  EXPECT_EQ(spawned, 0) << kProbe;
  std::string out;
  char buf[4096];
  time_t deadline = time(nullptr) + 60;
  for (;;) {
    struct pollfd p = {fds[0], POLLIN, 0};
    int ready = poll(&p, 1, 1000);
    if (ready == 0 && time(nullptr) < deadline) continue;
    if (ready == 0) {
      kill(pid, SIGKILL);
      ADD_FAILURE() << "backend_probe " << kind << " hung";
      break;
    }
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, (size_t)n);
  }
  close(fds[0]);
  int status = 0;
  if (spawned == 0) {
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
  }
  a.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  std::istringstream lines(out);
  std::string broken;
  std::getline(lines, a.status);
  std::getline(lines, broken);
  std::getline(lines, a.message);
  a.broken = broken == "1";
  return a;
}

// What the message says of each broken folder's files.
std::map<std::string, std::string> how_broken() {
  std::ifstream in(kFixture, std::ios::binary);
  char header[64] = {0};
  in.read(header, sizeof header);
  unsigned phnum = (unsigned char)header[56] | (unsigned)(unsigned char)header[57] << 8;
  return {
      {"cut", "is cut short: its loadable segment at offset "},
      {"header",
       "is cut short: its " + std::to_string(phnum) + " program headers at offset 64 need "},
      {"empty", "is empty (0 bytes), not a shared object"},
      {"fifo", "is a FIFO, not a shared object"},
      {"dir", "is a directory, not a shared object"},
  };
}

#define EXPECT_REFUSED(a, text)                                          \
  do {                                                                   \
    EXPECT_EQ((a).exit_code, 0) << "the probe did not exit normally";    \
    EXPECT_EQ((a).status, "KVS_ERR_LIBRARY") << (a).message;             \
    EXPECT_TRUE((a).broken) << (a).message;                              \
    EXPECT_NE((a).message.find(text), std::string::npos) << (a).message; \
  } while (0)

TEST_F(BackendRegistry, BrokenBackendFilesAreRefusedNamingThem) {
  const char *const kinds[] = {"cuda", "nccl", "mpi"};
  for (int k = 0; k < 3; k++) {
    for (const auto &how : how_broken()) {
      std::string dir = dir_of(how.first);
      Answer a = probe(kinds[k], {"KVSHARD_BACKEND_PATH=" + dir});
      // Named before any vendor library is looked for: the same answer on
      // a machine without CUDA, NCCL or MPI.
      EXPECT_REFUSED(a, std::string("the ") + kinds[k] + " backend (" + kFiles[k] +
                            ") could not be loaded: " + dir + "/" + kFiles[k] + " " + how.second);
    }
  }
}

TEST_F(BackendRegistry, BrokenVendorLibrariesAreRefusedNamingThem) {
  std::string whole = "KVSHARD_BACKEND_PATH=" + dir_of("whole");
  // Through KVSHARD_CUDA_PATH: the runtime, and NCCL after a whole runtime.
  Answer a = probe("cuda", {whole, "KVSHARD_CUDA_PATH=" + dir_of("cut")});
  EXPECT_REFUSED(a, "the cuda backend needs libcudart.so.13, which could not be loaded: " +
                        dir_of("cut") + "/libcudart.so.13 is cut short: its loadable segment");
  a = probe("nccl", {whole, "KVSHARD_CUDA_PATH=" + dir_of("mixed")});
  EXPECT_REFUSED(a, "the nccl backend needs libnccl.so.2, which could not be loaded: " +
                        dir_of("mixed") + "/libnccl.so.2 is cut short");
  // Through the loader's own path, as it read LD_LIBRARY_PATH at start.
  for (const auto &how : how_broken()) {
    std::string dir = dir_of(how.first);
    a = probe("mpi", {whole, "LD_LIBRARY_PATH=" + dir});
    EXPECT_REFUSED(a, "the mpi backend needs libmpi.so.40, which could not be loaded: " + dir +
                          "/libmpi.so.40 " + how.second);
    a = probe("cuda", {whole, "LD_LIBRARY_PATH=" + dir});
    EXPECT_REFUSED(a, "the cuda backend needs libcudart.so.13, which could not be loaded: " + dir +
                          "/libcudart.so.13 " + how.second);
  }
}

TEST_F(BackendRegistry, AVendorLibraryTheProcessHoldsIsUsedNotASecondCopy) {
  // The engine loaded its runtime (soname libcudart.so.13) before asking:
  // that one serves, and the broken copy KVSHARD_CUDA_PATH names is never
  // opened beside it.
  Answer a = probe("cuda",
                   {"KVSHARD_BACKEND_PATH=" + dir_of("whole"), "KVSHARD_CUDA_PATH=" + dir_of("cut"),
                    "KVS_PROBE_PRELOAD=tests/backends/held/libcudart.so.13"});
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_FALSE(a.broken) << a.message;
  EXPECT_EQ(a.message,
            "the cuda backend (libkvshard-cuda.so.1) has no entry point kvs_backend_probe_entry");
}

TEST_F(BackendRegistry, WholeFilesAreLoadedAndForeignOnesPassedOver) {
  // The vendor library found on the loader's path and the backend are
  // whole: both loaded, and the fixture's missing entry point is the
  // answer (not broken).
  Answer a = probe(
      "mpi", {"KVSHARD_BACKEND_PATH=" + dir_of("whole"), "LD_LIBRARY_PATH=" + dir_of("whole")});
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_EQ(a.status, "KVS_ERR_LIBRARY");
  EXPECT_FALSE(a.broken);
  EXPECT_EQ(a.message,
            "the mpi backend (libkvshard-mpi.so.1) has no entry point kvs_backend_probe_entry");
  // A 32-bit copy first is passed over, as the loader passes over it; the
  // whole file after it is loaded...
  a = probe("cuda", {"KVSHARD_BACKEND_PATH=" + dir_of("foreign") + ":" + dir_of("whole"),
                     "KVSHARD_CUDA_PATH=" + dir_of("whole")});
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_FALSE(a.broken);
  EXPECT_EQ(a.message,
            "the cuda backend (libkvshard-cuda.so.1) has no entry point kvs_backend_probe_entry");
  // ...and a broken one after it is named (the passed-over one before it
  // listed after it, as far as the message has room).
  a = probe("cuda", {"KVSHARD_BACKEND_PATH=" + dir_of("foreign") + ":" + dir_of("cut")});
  EXPECT_REFUSED(a, dir_of("cut") + "/libkvshard-cuda.so.1 is cut short");
  EXPECT_NE(a.message.find("(tried before it: "), std::string::npos) << a.message;
  // Passed over with nothing after it: not broken, and the reason listed.
  a = probe("cuda",
            {"KVSHARD_BACKEND_PATH=" + dir_of("foreign"), "KVSHARD_CUDA_PATH=" + dir_of("whole")});
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_EQ(a.status, "KVS_ERR_LIBRARY");
  EXPECT_FALSE(a.broken);
  EXPECT_EQ(a.message.rfind("the cuda backend (libkvshard-cuda.so.1) could not be loaded: " +
                                dir_of("foreign") +
                                "/libkvshard-cuda.so.1 is a 32-bit little-endian ELF object; this "
                                "process is 64-bit little-endian",
                            0),
            0u)
      << a.message;
}

}  // namespace

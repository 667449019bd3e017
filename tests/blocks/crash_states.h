// Every state a power loss could leave in one directory, from a log of
// the file-system operations a workload made there.
//
// The operations are recorded by an interposed layer (crash_states.cc:
// this executable's open, openat, write, fsync, close, renameat and
// unlinkat win over libc's for the library code linked into it; each does
// the real call and logs what it changed in the recorded directory). From
// the log, the states a power loss could leave are built,
// ALICE/CrashMonkey style:
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
// A test runs its workload with the recorder on (rec.mode = kRecord,
// rec.dir the directory), then explores the log, laying each distinct
// state out in a directory of its own (StateDir) and reopening it with
// whatever it tests: the block store (tests/blocks/power_loss_test.cc),
// the node's disk tier (tests/shard/node_disk_power_loss_test.cc). A
// checker is checked by exploring a log with an operation kind taken out
// (without): it must then fail.
#ifndef KVS_TESTS_BLOCKS_CRASH_STATES_H
#define KVS_TESTS_BLOCKS_CRASH_STATES_H

#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace kvs_test {
namespace crash {

enum class OpKind { kNone, kCreate, kWrite, kFsync, kRename, kUnlink, kDirSync };

struct Op {
  OpKind kind = OpKind::kNone;
  int inode = -1;             // kCreate (the new file), kWrite, kFsync
  std::string name, to;       // kCreate, kUnlink: name; kRename: name -> to
  uint64_t offset = 0;        // kWrite
  std::vector<uint8_t> data;  // kWrite
};

// kRecord: log what is changed in `dir`. kObserve: only note unlinks (a
// reopen's cleanup) and skip fsyncs (a state reopened is not crashed
// again, and thousands of reopens stay off the disk's flush latency).
// kOff: pass through (the test's own file work).
enum class Mode { kOff = 0, kRecord, kObserve };

struct Recorder {
  Mode mode;        // zero (kOff) before main: the wrappers run from then on
  std::string dir;  // the directory recorded, as the code under test opens it
  std::set<int> dir_fds;
  std::map<int, int> file_fds;       // fd -> inode
  std::map<std::string, int> names;  // the directory as recorded
  int next_inode = 0;
  std::vector<Op> ops;
  std::vector<std::string> observed_unlinks;
  std::string unsupported;  // a call the model does not cover
};

// The one recorder of this executable (one thread at a time does file
// work in the recorded directory).
extern Recorder rec;

// Starts recording `dir` afresh (everything before is forgotten).
void record(const std::string &dir);
// Starts observing `dir` (a state being reopened).
void observe(const std::string &dir);
// Back to passing through.
void stop();

constexpr size_t kFsBlock = 4096;

// A file's contents, shared between the states that hold them.
struct Image {
  std::shared_ptr<const std::vector<uint8_t>> bytes;
  uint64_t hash = 0;
};
Image image_of(std::vector<uint8_t> bytes);

using DirState = std::map<std::string, Image>;  // name -> contents
uint64_t hash_of(const DirState &s);

// Calls visit(point, description, state) for every crash state of the
// log (point: the operations that happened). Enumerates every subset of
// a file's unsynced blocks up to 7 of them; beyond that each single block
// kept or lost, and 32 random sets (seeded).
using Visit = std::function<void(size_t, const std::string &, const DirState &)>;
void explore(const std::vector<Op> &ops, uint64_t seed, const Visit &visit);

std::string op_text(const Op &op);

struct Exploration {
  uint64_t generated = 0, checked = 0, images = 0, points = 0;
  std::vector<std::string> failures;  // the first few, with their crash point
};

// What is wrong with one state reopened after `point` operations (empty:
// sound).
using Check = std::function<std::vector<std::string>(size_t point, const DirState &state)>;

// Explores every crash state of `ops`, checking each distinct one, and
// stops after `max_failures` unsound states. A state is a crash point and
// a disk image: the same files at another point are checked again,
// against what was promised by then.
Exploration explore_and_check(const Check &check, const std::vector<Op> &ops, uint64_t seed,
                              size_t max_failures);

// The log up to `limit` operations with every operation of `kind` taken
// out (its place kept, so the workload's positions still hold).
std::vector<Op> without(const std::vector<Op> &ops, OpKind kind, size_t limit);

// ---- what a workload promised ----

// A put or a remove the workload called on one key: the operations
// recorded when it was called and when it returned.
struct Call {
  uint64_t key = 0;
  size_t begin = 0, end = 0;
};

// Every put and remove of a workload, in call order (the workload keeps
// what put i wrote at its own index i).
struct History {
  std::vector<Call> puts;
  std::map<uint64_t, std::vector<size_t>> puts_of;   // key -> indices into puts
  std::map<uint64_t, std::vector<Call>> removes_of;  // key -> its removes
  size_t put(const Call &c);                         // returns its index
  void remove(const Call &c);
};

// What a crash after `point` operations may show for `key` (its file:
// `name`): the puts it may hold, and whether it must be there.
struct Promise {
  std::vector<size_t> allowed;     // indices into History::puts
  const Call *returned = nullptr;  // the last put that returned ...
  size_t returned_put = 0;         // ... its index
  // It must be there: a put returned, and no unlink of its name since
  // (a remove or an eviction) began.
  bool required = false;
  // A remove that returned after the last put that returned: no version
  // put before it may come back.
  const Call *removed = nullptr;
};
Promise promise(const History &h, const std::vector<Op> &ops, uint64_t key, const std::string &name,
                size_t point);

// The log up to `limit` operations with the directory fsyncs the removes
// made taken out (as if a remove returned without making its unlink
// durable).
std::vector<Op> without_remove_dirsyncs(const History &h, const std::vector<Op> &ops, size_t limit);

// "text:\n    a\n    b" on one line: "text: a; b".
std::string one_line(std::string text);

// A directory the states are laid out in, one after another, changing
// only the files that differ from the last state.
struct StateDir {
  std::string dir;
  std::map<std::string, uint64_t> disk;  // what lies there now: name -> hash

  // Lays `state` out; false with *problem when a file cannot be written.
  bool lay_out(const DirState &state, std::string *problem);
  // After a reopen changed the directory: what lies there now (files the
  // laid-out state did not hold are returned, and forgotten: the next
  // lay_out replaces them). `also` names files a reopen may make (a
  // lock), kept as empty files.
  std::vector<std::string> settle(const std::set<std::string> &also);
};

}  // namespace crash
}  // namespace kvs_test

#endif  // KVS_TESTS_BLOCKS_CRASH_STATES_H

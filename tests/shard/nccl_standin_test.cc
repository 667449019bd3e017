// The NCCL backend (backends/nccl/comm_nccl.c, the product's C source,
// linked into the test as //backends/nccl:backend_api, so the core's
// registry finds it without a dlopen) behind the core's side
// (shard/comm_nccl.c), on the CPU stand-in for CUDA and NCCL
// (tests/standin): ranks are threads. They join one communicator
// bootstrapped over an in-process loopback group (kvs_comm_nccl_bootstrap),
// from one unique id (kvs_comm_nccl_create), or split from an engine's own
// ncclComm_t (kvs_comm_nccl_create with a parent). NCCL collectives run on
// the stand-in's lazily run, adversarially interleaved streams, and the
// shard steps over them feed the device tables after each step with the
// device copy of the entries. Over seeded schedules with 2, 4 and 8 ranks:
//   - the defects of issue 17 in the backend, one test each;
//   - split mode: the engine's communicator is never aborted, finalized or
//     destroyed by kvshard, also when kvshard's fails; creating leaves the
//     caller's device alone; kvshard's collectives run on a stream of their
//     own while the engine's stream is blocked; the engine's communicator
//     still works afterwards;
//   - bootstrap: a setup step that fails on one rank after the others
//     succeeded fails every rank at once with that rank's message and
//     leaves no live communicator; no device fails every rank saying why;
//   - separate deadlines for the initialisation and for collectives;
//   - the device stream only a device communicator has;
//   - point to point (kvs_comm_exchange: one ncclGroupStart/End of
//     ncclSend and ncclRecv): every pair both ways and to itself, 64 MiB
//     byte for byte, refusals that queue nothing, a silent or failed peer,
//     sizes that differ.
//
// KVS_STANDIN_SCHEDULES=100000 runs longer.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/device_tables.h"
#include "core/cost_model.h"
#include "core/geometry.h"
#include "pool/window_pool.h"
#include "plan/device_layout.h"
#include "plan/node_overhead.h"
#include "shard/comm.h"
#include "shard/comm_loopback.h"
#include "shard/comm_nccl.h"
#include "shard/comm_self.h"
#include "shard/shard.h"
#include "shard/step_message.h"
#include "tests/shard/ranks.h"
#include "tests/standin/harness.h"
#include "tests/standin/standin.h"

using kvs_standin_harness::on_device;

namespace {

constexpr uint64_t P = KVS_DEFAULT_WINDOW_PAGE;
// The initialisation's deadline where a test does not probe it.
constexpr int kInitTimeoutMs = 20000;

using kvs_standin::CommState;
using kvs_standin_harness::expect_no_violations;
using kvs_standin_harness::reset;

bool has_violation(const std::string &needle) {
  for (const std::string &v : kvs_standin::violations()) {
    if (v.find(needle) != std::string::npos) return true;
  }
  return false;
}

long ms_since(std::chrono::steady_clock::time_point start) {
  return long(std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count());
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// Every rank joins one communicator over the loopback bootstrap on
// `device` (-1: its node-local rank's).
kvs_status bootstrap(kvs_comm_t boot, int device, int timeout_ms, kvs_comm_t *out, kvs_error *err) {
  return kvs_comm_nccl_bootstrap(boot, device, kInitTimeoutMs, timeout_ms, out, err);
}

int device_of_comm(kvs_comm_t comm) {
  void *s = nullptr;
  int device = -1;
  kvs_error err;
  EXPECT_EQ(kvs_comm_device_stream(comm, &s, &device, &err), KVS_OK) << err.message;
  return device;
}

cudaStream_t stream_of_comm(kvs_comm_t comm) {
  void *s = nullptr;
  int device = -1;
  kvs_error err;
  EXPECT_EQ(kvs_comm_device_stream(comm, &s, &device, &err), KVS_OK) << err.message;
  return static_cast<cudaStream_t>(s);
}

// Threads meeting at a point: each arrives, and waits until all have. A
// rank that failed an ASSERT on the way never arrives: the others then go
// on after a minute with a failure instead of hanging.
class Latch {
 public:
  explicit Latch(int n) : left_(n) {}
  // False when the others have not all arrived within `ms`.
  bool arrive_and_wait_for(int ms) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (--left_ <= 0) done_.notify_all();
    return done_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return left_ <= 0; });
  }
  void arrive_and_wait() {
    EXPECT_TRUE(arrive_and_wait_for(60000)) << "a rank never got here (it failed before)";
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  int left_;
};

// An engine's own communicator, stream and one device word, on rank
// `rank`'s thread: the engine owns NCCL and hands kvshard its ncclComm_t.
struct EngineComm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  uint64_t *word = nullptr;
  int device = -1;
};

EngineComm engine_comm(int n, ncclUniqueId id, int rank, int device) {
  EngineComm e;
  e.device = device;
  on_device(device, [&] {
    EXPECT_EQ(ncclCommInitRank(&e.comm, n, id, rank), ncclSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&e.stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&e.word), sizeof(uint64_t)), cudaSuccess);
  });
  return e;
}

// The engine's own collective, queued on its stream: rank + 1 summed over
// the ranks (each rank calls it).
void engine_sum_enqueue(const EngineComm &e, int rank) {
  on_device(e.device, [&] {
    uint64_t v = uint64_t(rank) + 1;  // pageable: staged at the call
    EXPECT_EQ(cudaMemcpyAsync(e.word, &v, sizeof v, cudaMemcpyHostToDevice, e.stream), cudaSuccess);
    EXPECT_EQ(ncclAllReduce(e.word, e.word, 1, ncclUint64, ncclSum, e.comm, e.stream), ncclSuccess);
  });
}

uint64_t engine_sum_result(const EngineComm &e) {
  uint64_t v = 0;
  on_device(e.device, [&] {
    EXPECT_EQ(cudaStreamSynchronize(e.stream), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&v, e.word, sizeof v, cudaMemcpyDeviceToHost), cudaSuccess);
  });
  return v;
}

// The engine's communicator works: a collective over every rank on it
// completes with the right sum.
void expect_engine_comm_works(const EngineComm &e, int rank, int n) {
  EXPECT_EQ(kvs_standin::comm_state(e.comm), CommState::kReady)
      << "rank " << rank << ": the engine's communicator was aborted, finalized or destroyed";
  engine_sum_enqueue(e, rank);
  EXPECT_EQ(engine_sum_result(e), uint64_t(n) * uint64_t(n + 1) / 2)
      << "rank " << rank << ": the engine's collective after kvshard's";
}

void engine_close(EngineComm &e) {
  on_device(e.device, [&] {
    EXPECT_EQ(cudaFree(e.word), cudaSuccess);
    EXPECT_EQ(ncclCommDestroy(e.comm), ncclSuccess);
    EXPECT_EQ(cudaStreamDestroy(e.stream), cudaSuccess);
  });
}

// Options that split kvshard's communicator from the engine's on its
// device.
kvs_comm_nccl_options split_options(const EngineComm &e, int timeout_ms) {
  kvs_comm_nccl_options o;
  kvs_comm_nccl_options_init(&o);
  o.parent = e.comm;
  o.device = e.device;
  o.init_timeout_ms = kInitTimeoutMs;
  o.timeout_ms = timeout_ms;
  return o;
}

// Every rank's engine communicator, then kvshard's split from it, as an
// engine that owns NCCL would do on each rank's thread.
template <typename Body>
void engine_ranks(int n, const Body &body) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    threads.emplace_back([&, r] {
      EngineComm e = engine_comm(n, id, r, r);
      body(r, e);
      engine_close(e);
    });
  }
  for (std::thread &t : threads) t.join();
}

// The small pool of the shard tests.
kvs_geometry small_geometry() {
  kvs_geometry g;
  kvs_error err;
  const uint32_t ratios[] = {0, 4, 128, 4};
  EXPECT_EQ(kvs_geometry_init(&g, 8, 4, 4, ratios, 4, &err), KVS_OK) << err.message;
  return g;
}

kvs_pool_sizes small_sizes(const kvs_geometry &g) {
  kvs_pool_sizes s;
  kvs_error err;
  EXPECT_EQ(kvs_pool_sizes_compute(64, &g, 0.5, P, 24, &s, &err), KVS_OK) << err.message;
  return s;
}

std::vector<int64_t> page_locs(uint64_t page) {
  std::vector<int64_t> locs(P);
  for (uint64_t i = 0; i < P; i++) locs[i] = int64_t(page * P + i);
  return locs;
}

// The leader's scheduler: binds and frees random whole pages between steps.
class Driver {
 public:
  Driver(kvs_window_pool_t pool, uint64_t seed) : pool_(pool), rng_(seed) {
    usable_ = kvs_window_pool_full_tokens(pool) / P - 1;
  }
  void step_work() {
    kvs_error err;
    for (uint64_t k = rng_() % 4; k > 0 && !bound_.empty(); k--) {
      size_t at = rng_() % bound_.size();
      std::vector<int64_t> locs = page_locs(bound_[at]);
      ASSERT_EQ(kvs_window_pool_free(pool_, locs.data(), locs.size(), &err), KVS_OK) << err.message;
      bound_.erase(bound_.begin() + long(at));
    }
    for (uint64_t k = rng_() % 5; k > 0 && kvs_window_pool_swa_available(pool_) >= P; k--) {
      uint64_t page = rng_() % usable_;
      if (std::find(bound_.begin(), bound_.end(), page) != bound_.end()) continue;
      std::vector<int64_t> locs = page_locs(page);
      if (kvs_window_pool_alloc(pool_, locs.data(), locs.size(), nullptr, &err) != KVS_OK) break;
      bound_.push_back(page);
    }
  }

 private:
  kvs_window_pool_t pool_;
  std::mt19937_64 rng_;
  uint64_t usable_;
  std::vector<uint64_t> bound_;
};

// After each step: the step's entries into this rank's device tables on a
// stream of its own (not the communicator's), from the device copy of the
// entries or from the host copy, as the step's info names them.
struct Consumer {
  kvs_comm_t comm = nullptr;
  kvs_device_tables_t tables = nullptr;
  cudaStream_t stream = nullptr;
  bool from_device = true;
};

kvs_status feed_tables(Consumer *c, const kvs_shard_step_info &info, kvs_error *err) {
  if (c->from_device) {
    if (info.device_message == nullptr) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "no device message over nccl");
    }
    kvs_status status = kvs_device_tables_apply_journal_device(
        c->tables,
        reinterpret_cast<const kvs_journal_entry *>(static_cast<const char *>(info.device_message) +
                                                    KVS_STEP_HEADER_BYTES),
        info.entries, c->stream, err);
    // The next collective must not overwrite the entries before the apply
    // on our stream has read them.
    if (status == KVS_OK) status = kvs_comm_reads_done(c->comm, c->stream, err);
    return status;
  }
  return kvs_device_tables_apply_journal(c->tables, info.entries_at, info.entries, c->stream, err);
}

// A shard over `comm` stepping `steps` times, each step feeding device
// tables; at the end the tables must equal the rank's host mirror.
void shard_steps(kvs_comm_t comm, int rank, uint64_t seed, int steps, bool from_device) {
  kvs_error err;
  kvs_geometry g = small_geometry();
  kvs_pool_sizes sizes = small_sizes(g);
  int device = device_of_comm(comm);
  kvs_device_layout layout;
  ASSERT_EQ(kvs_device_layout_build(&g, 0, 4, nullptr, &sizes, nullptr, &layout, &err), KVS_OK);
  Consumer consumer;
  consumer.comm = comm;
  consumer.from_device = from_device;
  ASSERT_EQ(kvs_device_tables_create(device, &layout, &consumer.tables, &err), KVS_OK)
      << err.message;
  on_device(device, [&] {
    ASSERT_EQ(cudaStreamCreateWithFlags(&consumer.stream, cudaStreamNonBlocking), cudaSuccess);
  });
  kvs_shard_options o = KVS_SHARD_OPTIONS_INIT;
  o.max_running = 2;
  o.step_capacity = 32;
  o.check_every = 4;
  kvs_shard_t shard = nullptr;
  ASSERT_EQ(kvs_shard_create(comm, &sizes, &o, &shard, &err), KVS_OK) << err.message;
  Driver driver(kvs_shard_pool(shard), seed);
  for (int step = 0; step < steps; step++) {
    if (rank == 0) driver.step_work();
    kvs_shard_step_info info;
    ASSERT_EQ(kvs_shard_step(shard, uint64_t(step), &info, &err), KVS_OK)
        << "step " << step << ": " << err.message;
    ASSERT_EQ(feed_tables(&consumer, info, &err), KVS_OK) << "step " << step << ": " << err.message;
  }
  std::vector<int64_t> table(kvs_window_pool_full_tokens(kvs_shard_pool(shard)) + 1);
  ASSERT_EQ(kvs_device_tables_download_mapping(consumer.tables, table.data(), table.size(), &err),
            KVS_OK);
  const int64_t *mirror = kvs_window_pool_mapping(kvs_shard_pool(shard));
  EXPECT_EQ(table, std::vector<int64_t>(mirror, mirror + table.size()))
      << "rank " << rank << "'s device table differs from its host mirror";
  kvs_shard_destroy(shard);
  on_device(device, [&] { EXPECT_EQ(cudaStreamDestroy(consumer.stream), cudaSuccess); });
  kvs_device_tables_destroy(consumer.tables);
}

// What one schedule of the walk does besides collectives and steps.
enum class Twist { kNone, kTimeout, kAsyncError, kSplit };

Twist twist_of(uint64_t seed) {
  switch (seed % 10) {
    case 3:
      return Twist::kTimeout;
    case 6:
      return Twist::kAsyncError;
    case 9:
      return Twist::kSplit;
    default:
      return Twist::kNone;
  }
}

// A broadcast from a random root and allreduces of random words, checked
// against what every rank computes from the schedule's seed.
void collectives(kvs_comm_t comm, int r, int n, uint64_t seed) {
  kvs_error err;
  std::mt19937_64 shared(seed);  // the same on every rank
  int root = int(shared() % uint64_t(n));
  size_t bytes = 1 + shared() % 300;
  std::vector<unsigned char> payload(bytes);
  for (auto &c : payload) c = static_cast<unsigned char>(shared());
  kvs_comm_buffer b;
  ASSERT_EQ(kvs_comm_buffer_alloc(comm, 304, &b, &err), KVS_OK) << err.message;
  int device = device_of_comm(comm);
  EXPECT_EQ(kvs_standin::device_of(b.device), device);
  if (r == root) std::memcpy(b.host, payload.data(), bytes);
  ASSERT_EQ(kvs_comm_broadcast(comm, &b, bytes, root, &err), KVS_OK) << err.message;
  EXPECT_EQ(std::memcmp(b.host, payload.data(), bytes), 0) << "rank " << r << ": host copy";
  std::vector<unsigned char> on_device_copy(bytes);
  on_device(device, [&] {
    EXPECT_EQ(cudaMemcpy(on_device_copy.data(), b.device, bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
  });
  EXPECT_EQ(on_device_copy, payload) << "rank " << r << ": device copy";
  for (kvs_comm_op op : {KVS_COMM_MIN, KVS_COMM_MAX, KVS_COMM_SUM}) {
    size_t count = 1 + shared() % 30;
    std::vector<std::vector<uint64_t>> words(static_cast<size_t>(n), std::vector<uint64_t>(count));
    for (auto &rank_words : words) {
      for (auto &w : rank_words) w = shared() % 1000;
    }
    std::memcpy(b.host, words[size_t(r)].data(), count * 8);
    ASSERT_EQ(kvs_comm_allreduce_u64(comm, &b, count, op, &err), KVS_OK) << err.message;
    for (size_t i = 0; i < count; i++) {
      uint64_t want = words[0][i];
      for (int q = 1; q < n; q++) {
        uint64_t v = words[size_t(q)][i];
        want = op == KVS_COMM_MIN   ? std::min(want, v)
               : op == KVS_COMM_MAX ? std::max(want, v)
                                    : want + v;
      }
      EXPECT_EQ(static_cast<uint64_t *>(b.host)[i], want) << kvs_comm_op_name(op) << " word " << i;
    }
  }
  EXPECT_EQ(kvs_comm_barrier(comm, &err), KVS_OK) << err.message;
  kvs_comm_buffer_free(comm, &b);
}

// The last rank never joins a broadcast (stalled), or its link fails
// (an injected async error): the others must fail within their deadline,
// and, told by the failing rank's abort, fast.
void failure(kvs_comm_t comm, int r, int n, Twist twist, ncclComm_t nccl) {
  kvs_error err;
  kvs_comm_buffer b;
  ASSERT_EQ(kvs_comm_buffer_alloc(comm, 8, &b, &err), KVS_OK) << err.message;
  bool odd_one = r == n - 1;
  auto start = std::chrono::steady_clock::now();
  kvs_status st = KVS_OK;
  if (twist == Twist::kAsyncError && odd_one) {
    kvs_standin::inject_nccl_async_error(nccl, ncclSystemError);
    st = kvs_comm_broadcast(comm, &b, 8, 0, &err);
    EXPECT_EQ(st, KVS_ERR_COMM) << err.message;
  } else if (!(twist == Twist::kTimeout && odd_one)) {
    st = kvs_comm_broadcast(comm, &b, 8, 0, &err);
    if (st == KVS_OK) st = kvs_comm_barrier(comm, &err);
    long ms = long(std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count());
    if (twist == Twist::kTimeout) {
      EXPECT_TRUE(st == KVS_ERR_TIMEOUT || st == KVS_ERR_COMM) << err.message;
      EXPECT_LT(ms, 20 * kvs_comm_timeout_ms(comm)) << "the deadline held";
    } else {
      EXPECT_EQ(st, KVS_ERR_COMM) << "rank " << r << ": " << err.message;
    }
    EXPECT_EQ(kvs_comm_health(comm), st);
  }
  kvs_comm_buffer_free(comm, &b);
}

int ranks_of(uint64_t seed) { return 2 << (seed % 3); }  // 2, 4, 8

}  // namespace

// Issue 17, defect 1, in split mode: kvshard's communicator is its own,
// split from the engine's. When kvshard's fails (an injected link error in
// a collective on even seeds; its stream creation failing on one rank on
// odd seeds) kvshard aborts its own and never aborts, finalizes or destroys
// the engine's: the engine's collectives over every rank still complete.
TEST(NcclStandin, split_mode_never_aborts_the_engines_communicator) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    bool at_creation = seed % 2 == 1;
    // The engine creates its own stream first; kvshard's is the second.
    if (at_creation) {
      kvs_standin::inject_cuda_error("cudaStreamCreateWithFlags", n - 1, 2,
                                     cudaErrorMemoryAllocation);
    }
    Latch failed(n);
    engine_ranks(n, [&](int r, EngineComm &e) {
      kvs_comm_nccl_options o = split_options(e, 3000);
      kvs_comm_t comm = nullptr;
      kvs_error err;
      kvs_status st = kvs_comm_nccl_create(&o, &comm, &err);
      bool odd_one = r == n - 1;
      if (at_creation && odd_one) {
        EXPECT_EQ(st, KVS_ERR_CUDA) << err.message;
        EXPECT_EQ(comm, nullptr);
        EXPECT_EQ(std::string(err.message),
                  "nccl backend stream creation on rank " + std::to_string(r) + " (device " +
                      std::to_string(r) +
                      "): cudaErrorMemoryAllocation (out of memory); the communicator was "
                      "aborted");
        EXPECT_EQ(kvs_standin::comm_state(kvs_standin::latest_comm(r)), CommState::kAborted)
            << "kvshard's own communicator is aborted";
      } else {
        ASSERT_EQ(st, KVS_OK) << err.message;
        kvs_comm_buffer b;
        ASSERT_EQ(kvs_comm_buffer_alloc(comm, 64, &b, &err), KVS_OK) << err.message;
        if (!at_creation) {
          EXPECT_EQ(kvs_comm_broadcast(comm, &b, 64, 0, &err), KVS_OK) << err.message;
          // The last rank's link fails: it sees the error and aborts its
          // communicator; the peers learn of it from NCCL.
          if (odd_one)
            kvs_standin::inject_nccl_async_error(kvs_standin::latest_comm(r), ncclSystemError);
        }
        // At creation the failing rank never joins: the peers fail too.
        EXPECT_NE(kvs_comm_broadcast(comm, &b, 64, 0, &err), KVS_OK) << "rank " << r;
        EXPECT_TRUE(contains(err.message, "; the communicator was aborted")) << err.message;
        EXPECT_NE(kvs_comm_health(comm), KVS_OK);
        kvs_comm_buffer_free(comm, &b);
      }
      EXPECT_EQ(kvs_standin::comm_state(e.comm), CommState::kReady)
          << "rank " << r << ": the engine's communicator was aborted, finalized or destroyed";
      int count = 0;
      EXPECT_EQ(ncclCommCount(e.comm, &count), ncclSuccess);
      EXPECT_EQ(count, n);
      kvs_comm_destroy(comm);
      EXPECT_EQ(kvs_standin::comm_state(e.comm), CommState::kReady)
          << "rank " << r << ": destroying kvshard's communicator touched the engine's";
      failed.arrive_and_wait();  // every kvshard communicator has failed
      expect_engine_comm_works(e, r, n);
    });
    expect_no_violations();
  });
}

// Issue 17, defect 4, in split mode: creating from an engine's
// communicator switched the caller's device to the communicator's and
// never switched it back; kvshard's calls must run on the communicator's
// device from a thread that works on another.
TEST(NcclStandin, split_mode_leaves_the_callers_device_alone) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    engine_ranks(n, [&](int r, EngineComm &e) {
      int other = (r + 1) % n;
      ASSERT_EQ(cudaSetDevice(other), cudaSuccess);  // the engine works elsewhere meanwhile
      kvs_comm_nccl_options o = split_options(e, 20000);
      kvs_comm_t comm = nullptr;
      kvs_error err;
      ASSERT_EQ(kvs_comm_nccl_create(&o, &comm, &err), KVS_OK) << err.message;
      EXPECT_EQ(kvs_standin::thread_device(), other) << "creating moved the caller's device";
      EXPECT_EQ(device_of_comm(comm), r);
      EXPECT_EQ(kvs_standin::comm_max_ctas(kvs_standin::latest_comm(r)),
                static_cast<int>(KVS_NCCL_MAX_CHANNELS))
          << "the split is capped";
      EXPECT_EQ(kvs_standin::comm_max_ctas(e.comm), NCCL_CONFIG_UNDEF_INT)
          << "the engine's communicator is its own";
      EXPECT_EQ(kvs_comm_rank(comm), r) << "the engine's rank";
      EXPECT_EQ(kvs_comm_size(comm), n) << "the engine's size";
      kvs_comm_buffer b;
      ASSERT_EQ(kvs_comm_buffer_alloc(comm, 8, &b, &err), KVS_OK) << err.message;
      EXPECT_EQ(kvs_standin::device_of(b.device), r);
      EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 1, KVS_COMM_SUM, &err), KVS_OK) << err.message;
      EXPECT_EQ(kvs_standin::thread_device(), other) << "a collective moved the caller's device";
      kvs_comm_buffer_free(comm, &b);
      kvs_comm_destroy(comm);
      EXPECT_EQ(kvs_standin::thread_device(), other);
    });
    expect_no_violations();
  });
}

// kvshard's communicator runs on a stream of its own: while the engine's
// stream on every rank but the last holds an engine collective that cannot
// complete (the last rank has not joined it), kvshard's collectives
// complete, and leave the engine's stream as it was (nothing of kvshard's
// waited for it or drained it). Queued on the engine's stream, or waiting
// for it, they would deadlock until their deadline.
TEST(NcclStandin, split_mode_runs_on_its_own_stream_not_the_engines) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    Latch checked(n);
    engine_ranks(n, [&](int r, EngineComm &e) {
      kvs_comm_nccl_options o = split_options(e, 10000);
      kvs_comm_t comm = nullptr;
      kvs_error err;
      ASSERT_EQ(kvs_comm_nccl_create(&o, &comm, &err), KVS_OK) << err.message;
      EXPECT_NE(stream_of_comm(comm), e.stream) << "kvshard's comm uses the engine's stream";
      kvs_comm_buffer b;
      ASSERT_EQ(kvs_comm_buffer_alloc(comm, 8, &b, &err), KVS_OK) << err.message;
      bool last = r == n - 1;
      if (!last) engine_sum_enqueue(e, r);  // pending until the last rank joins
      static_cast<uint64_t *>(b.host)[0] = uint64_t(r);
      EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 1, KVS_COMM_MAX, &err), KVS_OK) << err.message;
      EXPECT_EQ(static_cast<uint64_t *>(b.host)[0], uint64_t(n - 1));
      EXPECT_EQ(kvs_comm_barrier(comm, &err), KVS_OK) << err.message;
      if (!last) {
        on_device(r, [&] {
          EXPECT_EQ(cudaStreamQuery(e.stream), cudaErrorNotReady)
              << "rank " << r << ": the engine's collective ran without the last rank";
        });
      }
      // The last rank joins the engine's collective once the others have
      // looked at their engine streams, or, if kvshard's collectives are
      // stuck behind the engine's (they never get there), after a while,
      // which lets them finish so the failure is reported, not hung.
      bool all_checked = checked.arrive_and_wait_for(60000);
      EXPECT_TRUE(all_checked) << "rank " << r
                               << ": kvshard's collectives waited for the engine's stream";
      if (last) engine_sum_enqueue(e, r);
      EXPECT_EQ(engine_sum_result(e), uint64_t(n) * uint64_t(n + 1) / 2);
      kvs_comm_buffer_free(comm, &b);
      kvs_comm_destroy(comm);
      EXPECT_EQ(kvs_standin::comm_state(e.comm), CommState::kReady);
    });
    expect_no_violations();
  });
}

// A communicator split from an engine's runs every collective and drives
// the shard's steps (the tables fed from its device buffers), and the
// engine's communicator works after kvshard's is gone.
TEST(NcclStandin, a_split_communicator_runs_collectives_and_the_engines_still_works) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    engine_ranks(n, [&](int r, EngineComm &e) {
      kvs_comm_nccl_options o = split_options(e, 20000);
      kvs_comm_t comm = nullptr;
      kvs_error err;
      ASSERT_EQ(kvs_comm_nccl_create(&o, &comm, &err), KVS_OK) << err.message;
      EXPECT_STREQ(kvs_comm_backend(comm), "nccl");
      EXPECT_NE(kvs_standin::latest_comm(r), e.comm) << "no communicator of kvshard's own";
      collectives(comm, r, n, seed);
      shard_steps(comm, r, seed, 4, seed % 2 == 0);
      kvs_comm_destroy(comm);
      EXPECT_EQ(kvs_standin::thread_device(), -1) << "kvshard left the thread on a device";
      expect_engine_comm_works(e, r, n);
    });
    expect_no_violations();
  });
}

// Issue 17, defect 4: the backend never set its device, so a call from
// another thread allocated on that thread's device (0 by default) and the
// collective read another GPU's memory.
TEST(NcclStandin, calls_from_another_thread_use_the_communicators_device) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error err;
      ASSERT_EQ(bootstrap(boot, r, 20000, &comm, &err), KVS_OK) << err.message;
      // The engine's step thread is another thread.
      std::thread([&] {
        kvs_comm_buffer b;
        kvs_error e;
        ASSERT_EQ(kvs_comm_buffer_alloc(comm, 16, &b, &e), KVS_OK) << e.message;
        EXPECT_EQ(kvs_standin::device_of(b.device), r) << "allocated on another GPU";
        static_cast<uint64_t *>(b.host)[0] = uint64_t(r + 1);
        EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 1, KVS_COMM_SUM, &e), KVS_OK) << e.message;
        EXPECT_EQ(static_cast<uint64_t *>(b.host)[0], uint64_t(n * (n + 1) / 2));
        kvs_comm_buffer_free(comm, &b);
      }).join();
      kvs_comm_destroy(comm);
    });
    expect_no_violations();
  });
}

// Issue 17, defect 5: a CUDA failure while staging or reading back a
// message returned without aborting the communicator: the peers waited
// for their deadline, and destroy finalized a comm with a collective
// outstanding.
TEST(NcclStandin, a_cuda_failure_in_a_collective_aborts_the_communicator) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    const int timeout_ms = 30000;
    // Even seeds: the root's staging copy fails; odd: rank 1's readback.
    bool staging = seed % 2 == 0;
    int failing = staging ? 0 : 1;
    kvs_standin::inject_cuda_error("cudaMemcpyAsync", failing, 1, cudaErrorLaunchFailure);
    kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error err;
      ASSERT_EQ(bootstrap(boot, r, timeout_ms, &comm, &err), KVS_OK) << err.message;
      kvs_comm_buffer b;
      ASSERT_EQ(kvs_comm_buffer_alloc(comm, 32, &b, &err), KVS_OK) << err.message;
      auto start = std::chrono::steady_clock::now();
      kvs_status st = kvs_comm_broadcast(comm, &b, 32, 0, &err);
      if (r == failing) {
        EXPECT_EQ(st, KVS_ERR_CUDA) << err.message;
      } else if (st == KVS_OK) {
        // The collective itself may have completed; the next one cannot.
        st = kvs_comm_barrier(comm, &err);
      }
      long ms = ms_since(start);
      if (r != failing) {
        // A peer learns of it from NCCL, not by waiting out its deadline.
        EXPECT_EQ(st, KVS_ERR_COMM) << "rank " << r << ": " << err.message;
        EXPECT_LT(ms, timeout_ms / 2) << "rank " << r << " waited for its deadline";
      }
      kvs_comm_buffer_free(comm, &b);
      kvs_comm_destroy(comm);
    });
    EXPECT_FALSE(has_violation("outstanding")) << "destroy finalized with a collective outstanding";
    expect_no_violations();
  });
}

// Issue 17, defect 6: restoring "the caller's device" on a thread that
// never chose one created device 0's primary context in every rank.
TEST(NcclStandin, no_rank_creates_a_context_on_gpu_0) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n + 1, seed);  // ranks on devices 1..n; GPU 0 is someone else's
    kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error err;
      ASSERT_EQ(bootstrap(boot, r + 1, 20000, &comm, &err), KVS_OK) << err.message;
      // Used and destroyed from a thread that never chose a device.
      std::thread([&] {
        kvs_comm_buffer b;
        kvs_error e;
        ASSERT_EQ(kvs_comm_buffer_alloc(comm, 8, &b, &e), KVS_OK) << e.message;
        EXPECT_EQ(kvs_comm_barrier(comm, &e), KVS_OK) << e.message;
        kvs_comm_buffer_free(comm, &b);
        kvs_comm_destroy(comm);
        EXPECT_EQ(kvs_standin::thread_device(), -1);
      }).join();
    });
    EXPECT_EQ(kvs_standin::contexts_created(0), 0) << "a context on GPU 0";
    expect_no_violations();
  });
}

// Issue 17, defect 7: the device was the global rank modulo the device
// count; ranks placed round-robin over two nodes then shared GPUs (NCCL
// refuses that). It must be the node-local rank.
TEST(NcclStandin, ranks_on_two_nodes_pick_distinct_local_devices) {
  kvs_standin_harness::over_schedules(
      20, [](uint64_t) { return 8; },
      [](uint64_t seed) {
        reset(4, seed);
        std::vector<int> devices(8, -1);
        kvs_test::run_ranks(8, 20000, [&](int r, kvs_comm_t boot) {
          kvs_standin::set_thread_hostname(r % 2 == 0 ? "node-a" : "node-b");  // --map-by node
          kvs_comm_t comm = nullptr;
          kvs_error err;
          ASSERT_EQ(bootstrap(boot, -1, 20000, &comm, &err), KVS_OK) << err.message;
          devices[size_t(r)] = device_of_comm(comm);
          kvs_comm_destroy(comm);
        });
        for (int node = 0; node < 2; node++) {
          std::vector<int> seen;
          for (int r = node; r < 8; r += 2) seen.push_back(devices[size_t(r)]);
          std::sort(seen.begin(), seen.end());
          EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3})) << "node " << node;
        }
      });
}

// Issue 17, defect 2 (device side): the device copy of the entries handed
// a step hands on was overwritten by the next step's broadcast while a kernel
// on another stream could still read it.
TEST(NcclStandin, step_buffers_are_not_reused_while_a_consumer_reads_them) {
  kvs_standin_harness::over_schedules(60, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error err;
      ASSERT_EQ(bootstrap(boot, r, 20000, &comm, &err), KVS_OK) << err.message;
      shard_steps(comm, r, seed, 8, true);
      kvs_comm_destroy(comm);
    });
    expect_no_violations();
  });
}

// After the last setup step the ranks agree: when one rank's open fails
// after the others' succeeded (its stream creation on even seeds, its
// pinned staging on odd ones), every rank fails at once with the same
// message naming that rank, long before any deadline, and no communicator
// is left alive: the ranks that succeeded abort theirs.
TEST(NcclStandin, a_setup_step_failing_on_one_rank_fails_every_rank_at_once) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    int failing = int(seed / 2 % uint64_t(n));
    bool stream = seed % 2 == 0;
    kvs_standin::inject_cuda_error(stream ? "cudaStreamCreateWithFlags" : "cudaMallocHost", failing,
                                   1, cudaErrorMemoryAllocation);
    const int deadline_ms = 120000;  // the bootstrap's, the initialisation's and the collectives'
    std::vector<std::string> messages(static_cast<size_t>(n));
    std::vector<kvs_status> statuses(size_t(n), KVS_OK);
    kvs_test::run_ranks(n, deadline_ms, [&](int r, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error err;
      auto start = std::chrono::steady_clock::now();
      statuses[size_t(r)] = kvs_comm_nccl_bootstrap(boot, r, deadline_ms, deadline_ms, &comm, &err);
      EXPECT_LT(ms_since(start), deadline_ms / 6) << "rank " << r << " waited for a deadline";
      messages[size_t(r)] = err.message;
      EXPECT_EQ(comm, nullptr) << "rank " << r;
      EXPECT_EQ(kvs_standin::thread_device(), -1);
      // The bootstrap is still usable: nothing was left half way on it.
      kvs_comm_buffer b;
      ASSERT_EQ(kvs_comm_buffer_alloc(boot, 8, &b, &err), KVS_OK) << err.message;
      EXPECT_EQ(kvs_comm_barrier(boot, &err), KVS_OK) << err.message;
      kvs_comm_buffer_free(boot, &b);
    });
    std::string cause =
        stream ? "nccl backend stream creation on rank " + std::to_string(failing) + " (device " +
                     std::to_string(failing) + "): cudaErrorMemoryAllocation (out of memory)"
               : "cudaMallocHost of a 8-byte buffer on rank " + std::to_string(failing) +
                     ": cudaErrorMemoryAllocation (out of memory)";
    std::string prefix =
        "nccl communicator setup failed on rank " + std::to_string(failing) + ": " + cause;
    for (int r = 0; r < n; r++) {
      EXPECT_EQ(statuses[size_t(r)], KVS_ERR_CUDA) << "rank " << r;
      EXPECT_EQ(messages[size_t(r)].rfind(prefix, 0), 0u)
          << "rank " << r << ": " << messages[size_t(r)];
      EXPECT_EQ(messages[size_t(r)], messages[0]) << "rank " << r << " says something else";
      ncclComm_t c = kvs_standin::latest_comm(r);
      ASSERT_NE(c, nullptr) << "rank " << r << " never joined";
      CommState state = kvs_standin::comm_state(c);
      EXPECT_TRUE(state == CommState::kAborted || state == CommState::kDestroyed)
          << "rank " << r << "'s communicator is still alive";
    }
    expect_no_violations();
  });
}

// The initialisation has a deadline of its own: with one rank that never
// calls, the others' initialisation (from a unique id, or split from an
// engine's communicator) gives up after init_timeout_ms (2 s; the
// collectives' deadline is ten minutes), saying so; with every rank there, a
// collective a rank never joins gives up after timeout_ms (2 s; the
// initialisation's deadline is ten minutes). Both short deadlines are ten
// times what a healthy setup step needs on a loaded 2-core machine.
TEST(NcclStandin, the_initialisation_and_the_collectives_have_separate_deadlines) {
  kvs_standin_harness::over_schedules(10, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    const int short_ms = 2000, long_ms = 600000;
    unsigned char id[KVS_NCCL_UNIQUE_ID_BYTES];
    kvs_error err;
    ASSERT_EQ(kvs_comm_nccl_unique_id(id, &err), KVS_OK) << err.message;
    std::vector<std::thread> threads;
    for (int r = 0; r < n - 1; r++) {  // the last rank never calls
      threads.emplace_back([&, r] {
        kvs_comm_nccl_options o;
        kvs_comm_nccl_options_init(&o);
        o.rank = r;
        o.nranks = n;
        o.device = r;
        std::memcpy(o.unique_id, id, sizeof id);
        o.init_timeout_ms = short_ms;
        o.timeout_ms = long_ms;
        kvs_comm_t comm = nullptr;
        kvs_error e;
        auto start = std::chrono::steady_clock::now();
        EXPECT_EQ(kvs_comm_nccl_create(&o, &comm, &e), KVS_ERR_TIMEOUT) << e.message;
        long ms = ms_since(start);
        EXPECT_GE(ms, short_ms) << "rank " << r << " gave up early";
        EXPECT_LT(ms, long_ms / 6) << "rank " << r << " waited for the collectives' deadline";
        EXPECT_EQ(std::string(e.message),
                  "nccl communicator initialisation on rank " + std::to_string(r) + " of " +
                      std::to_string(n) + " was still in progress after " +
                      std::to_string(short_ms) +
                      " ms: a peer rank failed or stalled; the communicator was aborted");
        EXPECT_EQ(comm, nullptr);
        EXPECT_EQ(kvs_standin::comm_state(kvs_standin::latest_comm(r)), CommState::kAborted);
      });
    }
    for (std::thread &t : threads) t.join();
    expect_no_violations();

    reset(n, seed);
    Latch done(n);
    kvs_test::run_ranks(n, long_ms, [&](int r, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error e;
      ASSERT_EQ(kvs_comm_nccl_bootstrap(boot, r, long_ms, short_ms, &comm, &e), KVS_OK)
          << e.message;
      EXPECT_EQ(kvs_comm_timeout_ms(comm), short_ms);
      kvs_comm_buffer b;
      ASSERT_EQ(kvs_comm_buffer_alloc(comm, 8, &b, &e), KVS_OK) << e.message;
      if (r != n - 1) {  // the last rank never joins the broadcast
        auto start = std::chrono::steady_clock::now();
        kvs_status st = kvs_comm_broadcast(comm, &b, 8, 0, &e);
        long ms = ms_since(start);
        // The first to give up aborts; the others may hear of it first.
        EXPECT_TRUE(st == KVS_ERR_TIMEOUT || st == KVS_ERR_COMM) << e.message;
        if (st == KVS_ERR_TIMEOUT) {
          EXPECT_TRUE(contains(e.message, "nccl broadcast on rank " + std::to_string(r)) &&
                      contains(e.message, " " + std::to_string(short_ms) + " ms: "))
              << e.message;
          EXPECT_GE(ms, short_ms);
        }
        EXPECT_LT(ms, long_ms / 6) << "rank " << r << " waited for the initialisation's deadline";
      }
      done.arrive_and_wait();
      kvs_comm_buffer_free(comm, &b);
      kvs_comm_destroy(comm);
    });
    expect_no_violations();

    // Split from an engine's communicator, with one rank that never splits:
    // the others' initialisation gives up after init_timeout_ms, and the
    // engine's communicator is left working.
    reset(n, seed);
    Latch gave_up(n);
    engine_ranks(n, [&](int r, EngineComm &e) {
      if (r != n - 1) {
        kvs_comm_nccl_options o = split_options(e, long_ms);
        o.init_timeout_ms = short_ms;
        kvs_comm_t comm = nullptr;
        kvs_error x;
        auto start = std::chrono::steady_clock::now();
        EXPECT_EQ(kvs_comm_nccl_create(&o, &comm, &x), KVS_ERR_TIMEOUT) << x.message;
        long ms = ms_since(start);
        EXPECT_GE(ms, short_ms) << "rank " << r << " gave up early";
        EXPECT_LT(ms, long_ms / 6) << "rank " << r << " waited for the collectives' deadline";
        EXPECT_TRUE(contains(x.message, "nccl communicator initialisation on rank " +
                                            std::to_string(r) + " of " + std::to_string(n) +
                                            " was still in progress after " +
                                            std::to_string(short_ms) + " ms: "))
            << x.message << " (the split's rank and size are the parent's from the start)";
        EXPECT_EQ(comm, nullptr);
      }
      gave_up.arrive_and_wait();
      expect_engine_comm_works(e, r, n);
    });
    expect_no_violations();
  });
}

// Only a device communicator has a device stream: a host one (self,
// loopback) says so and needs no ordering call; an NCCL one gives its own
// stream (one per rank, never the legacy stream) on its own device, where
// ordering a consumer is a no-op.
TEST(NcclStandin, only_a_device_communicator_has_a_device_stream) {
  reset(2, 1);
  kvs_comm_t self = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&self, &err), KVS_OK) << err.message;
  void *stream = reinterpret_cast<void *>(0x1);
  int device = 7;
  EXPECT_EQ(kvs_comm_device_stream(self, &stream, &device, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_STREQ(err.message, "the 'self' communicator moves host buffers: it has no device stream");
  EXPECT_EQ(stream, reinterpret_cast<void *>(0x1)) << "written on failure";
  EXPECT_EQ(device, 7) << "written on failure";
  EXPECT_EQ(kvs_comm_reads_done(self, nullptr, &err), KVS_OK) << "a host backend needs no call";
  EXPECT_EQ(kvs_comm_device_stream(self, nullptr, &device, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_comm_device_stream(self, &stream, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
  kvs_comm_destroy(self);

  kvs_standin_harness::over_schedules(10, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    std::vector<void *> streams(size_t(n), nullptr);
    kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
      kvs_error e;
      void *s = reinterpret_cast<void *>(0x1);
      int d = 7;
      EXPECT_EQ(kvs_comm_device_stream(boot, &s, &d, &e), KVS_ERR_UNSUPPORTED);
      EXPECT_STREQ(e.message,
                   "the 'loopback' communicator moves host buffers: it has no device stream");
      EXPECT_EQ(kvs_comm_reads_done(boot, nullptr, &e), KVS_OK);
      kvs_comm_t comm = nullptr;
      ASSERT_EQ(bootstrap(boot, r, 20000, &comm, &e), KVS_OK) << e.message;
      ASSERT_EQ(kvs_comm_device_stream(comm, &s, &d, &e), KVS_OK) << e.message;
      EXPECT_EQ(d, r);
      EXPECT_NE(s, nullptr) << "the legacy stream";
      EXPECT_NE(s, reinterpret_cast<void *>(0x1));
      streams[size_t(r)] = s;
      void *again = nullptr;
      int d2 = -1;
      ASSERT_EQ(kvs_comm_device_stream(comm, &again, &d2, &e), KVS_OK);
      EXPECT_EQ(again, s);
      EXPECT_EQ(kvs_comm_reads_done(comm, s, &e), KVS_OK) << e.message;
      EXPECT_EQ(kvs_standin::thread_device(), -1) << "asking moved the thread to a device";
      kvs_comm_destroy(comm);
    });
    EXPECT_EQ(std::set<void *>(streams.begin(), streams.end()).size(), size_t(n))
        << "ranks share a stream";
    expect_no_violations();
  });
}

// One rank mints a unique id, every rank creates its communicator from it
// with its rank, the group's size and its device; the options are checked
// before anything is loaded or joined.
TEST(NcclStandin, ranks_join_from_one_unique_id) {
  kvs_standin_harness::over_schedules(20, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    unsigned char id[KVS_NCCL_UNIQUE_ID_BYTES];
    kvs_error err;
    ASSERT_EQ(kvs_comm_nccl_unique_id(id, &err), KVS_OK) << err.message;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; r++) {
      threads.emplace_back([&, r] {
        kvs_comm_nccl_options o;
        kvs_comm_nccl_options_init(&o);
        o.rank = r;
        o.nranks = n;
        o.device = r;
        std::memcpy(o.unique_id, id, sizeof id);
        o.timeout_ms = 20000;
        kvs_comm_t comm = nullptr;
        kvs_error e;
        ASSERT_EQ(kvs_comm_nccl_create(&o, &comm, &e), KVS_OK) << e.message;
        EXPECT_EQ(kvs_comm_rank(comm), r);
        EXPECT_EQ(kvs_comm_size(comm), n);
        EXPECT_EQ(device_of_comm(comm), r);
        EXPECT_EQ(kvs_standin::thread_device(), -1) << "creation left the thread on a device";
        // At most the channels plan/node_overhead.h prices NCCL's buffers for.
        EXPECT_EQ(kvs_standin::comm_max_ctas(kvs_standin::latest_comm(r)),
                  static_cast<int>(KVS_NCCL_MAX_CHANNELS));
        collectives(comm, r, n, seed);
        kvs_comm_destroy(comm);
      });
    }
    for (std::thread &t : threads) t.join();
    expect_no_violations();
  });
  kvs_comm_nccl_options o;
  kvs_comm_nccl_options_init(&o);
  EXPECT_EQ(o.size, sizeof o);
  EXPECT_EQ(o.rank, 0);
  EXPECT_EQ(o.nranks, 1);
  EXPECT_EQ(o.device, 0);
  EXPECT_EQ(o.parent, nullptr);
  EXPECT_EQ(o.init_timeout_ms, 120000);
  EXPECT_EQ(o.timeout_ms, KVS_COMM_DEFAULT_TIMEOUT_MS);
  kvs_comm_t comm = nullptr;
  kvs_error err;
  struct Bad {
    void (*change)(kvs_comm_nccl_options *);
    const char *message;
  };
  const Bad bad[] = {
      {[](kvs_comm_nccl_options *x) { x->timeout_ms = 0; },
       "timeout_ms is 0; every wait needs a deadline (> 0)"},
      {[](kvs_comm_nccl_options *x) { x->init_timeout_ms = -1; },
       "init_timeout_ms must be > 0 (a deadline for the initialisation), got -1"},
      {[](kvs_comm_nccl_options *x) { x->device = -1; }, "device must be a CUDA ordinal, got -1"},
      {[](kvs_comm_nccl_options *x) {
         x->rank = 2;
         x->nranks = 2;
       },
       "rank 2 is outside a group of 2 ranks"},
  };
  for (const Bad &b : bad) {
    kvs_comm_nccl_options x = o;
    b.change(&x);
    EXPECT_EQ(kvs_comm_nccl_create(&x, &comm, &err), KVS_ERR_INVALID_ARGUMENT) << b.message;
    EXPECT_STREQ(err.message, b.message);
    EXPECT_EQ(comm, nullptr);
  }
  EXPECT_EQ(kvs_comm_nccl_create(nullptr, &comm, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "options and output are required");
  EXPECT_EQ(kvs_comm_nccl_bootstrap(nullptr, -1, 1000, 1000, &comm, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "bootstrap and output are required");
}

// A machine without a device: bootstrapping fails on every rank alike,
// naming rank 0 and why (no rank is left waiting in NCCL), as does asking
// for a device the machine does not have; creating from a unique id on a
// device that is not there fails naming it, before NCCL is joined.
TEST(NcclStandin, without_the_device_every_rank_fails_saying_why) {
  for (int devices : {0, 2}) {
    SCOPED_TRACE(testing::Message() << devices << " devices");
    reset(devices, 1);
    int count = 7;
    kvs_error err;
    EXPECT_EQ(kvs_comm_nccl_device_count(&count, &err), devices == 0 ? KVS_ERR_UNSUPPORTED : KVS_OK)
        << err.message;
    EXPECT_EQ(count, devices == 0 ? 7 : 2);
    std::string why =
        devices == 0
            ? "nccl communicator device choice failed on rank 0: no CUDA device visible: "
              "cudaGetDeviceCount returned cudaErrorNoDevice (no CUDA-capable device is detected)"
            : "nccl communicator device choice failed on rank 0: device 2 asked for, but CUDA "
              "sees 2 devices";
    kvs_test::run_ranks(4, 20000, [&](int, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error e;
      auto start = std::chrono::steady_clock::now();
      kvs_status st = bootstrap(boot, devices == 0 ? -1 : 2, 20000, &comm, &e);
      EXPECT_EQ(st, devices == 0 ? KVS_ERR_UNSUPPORTED : KVS_ERR_INVALID_ARGUMENT);
      EXPECT_EQ(std::string(e.message), why);
      EXPECT_LT(ms_since(start), 5000);
      EXPECT_EQ(comm, nullptr);
    });
    EXPECT_EQ(kvs_standin::latest_comm(0), nullptr) << "a rank went on into NCCL";
    // From a unique id, on a device the machine does not have: refused
    // before NCCL is joined, nothing left behind.
    unsigned char id[KVS_NCCL_UNIQUE_ID_BYTES];
    ASSERT_EQ(kvs_comm_nccl_unique_id(id, &err), KVS_OK) << err.message;
    kvs_comm_nccl_options o;
    kvs_comm_nccl_options_init(&o);
    std::memcpy(o.unique_id, id, sizeof id);
    o.device = devices;
    kvs_comm_t comm = nullptr;
    // The machine's lack, said as such (KVS_ERR_UNSUPPORTED), before the
    // device is touched.
    EXPECT_EQ(kvs_comm_nccl_create(&o, &comm, &err), KVS_ERR_UNSUPPORTED);
    EXPECT_TRUE(devices == 0 ? contains(err.message, "no CUDA device visible")
                             : contains(err.message,
                                        "CUDA device 2 asked for, but CUDA sees 2 "
                                        "devices"))
        << err.message;
    EXPECT_EQ(comm, nullptr);
    EXPECT_EQ(kvs_standin::latest_comm(0), nullptr) << "a rank went on into NCCL";
    EXPECT_EQ(kvs_standin::thread_device(), -1);
    expect_no_violations();
  }
}

TEST(NcclStandin, collectives_and_shard_steps_over_seeded_schedules) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(1000), ranks_of, [](uint64_t seed) {
        int n = ranks_of(seed);
        Twist twist = twist_of(seed);
        // Every other schedule of 4 or 8 ranks spans two nodes, ranks dealt
        // round-robin, half the GPUs each.
        bool two_nodes = n >= 4 && (seed / 3) % 2 == 1 && twist != Twist::kSplit;
        int devices = two_nodes ? n / 2 : n;
        reset(devices, seed);
        if (twist == Twist::kSplit) {
          engine_ranks(n, [&](int r, EngineComm &e) {
            kvs_comm_nccl_options o = split_options(e, 20000);
            kvs_comm_t comm = nullptr;
            kvs_error err;
            ASSERT_EQ(kvs_comm_nccl_create(&o, &comm, &err), KVS_OK) << err.message;
            collectives(comm, r, n, seed);
            shard_steps(comm, r, seed, 4, seed % 2 == 0);
            kvs_comm_destroy(comm);
            expect_engine_comm_works(e, r, n);
          });
          expect_no_violations();
          return;
        }
        int timeout_ms = twist == Twist::kTimeout ? 500 : 20000;
        kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
          if (two_nodes) kvs_standin::set_thread_hostname(r % 2 == 0 ? "node-a" : "node-b");
          kvs_comm_t comm = nullptr;
          kvs_error err;
          ASSERT_EQ(bootstrap(boot, -1, timeout_ms, &comm, &err), KVS_OK) << err.message;
          EXPECT_EQ(device_of_comm(comm), (two_nodes ? r / 2 : r) % devices);
          EXPECT_EQ(kvs_standin::thread_device(), -1) << "creation left the thread on a device";
          if (twist == Twist::kNone) {
            collectives(comm, r, n, seed);
            shard_steps(comm, r, seed, 6, seed % 2 == 0);
          } else {
            failure(comm, r, n, twist, kvs_standin::latest_comm(r));
          }
          kvs_comm_destroy(comm);
        });
        expect_no_violations();
      });
}

// ---- point to point: kvs_comm_exchange over ncclSend and ncclRecv ----

namespace {

uint8_t p2p_byte(int src, int dst, size_t i) {
  uint64_t x = (uint64_t(i) + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t(src) << 40 | uint64_t(dst));
  return uint8_t((x ^ x >> 31) * 0xbf58476d1ce4e5b9ull >> 56);
}

// A device buffer of one rank, written and read with the device idle: an
// exchange reads what was written before it on any stream only once that
// work is done (kvshard.h), so the writes are synchronised.
class DeviceBytes {
 public:
  DeviceBytes(int device, size_t bytes) : device_(device), bytes_(bytes) {
    on_device(device_, [&] { EXPECT_EQ(cudaMalloc(&p_, bytes_ + 1), cudaSuccess); });
  }
  ~DeviceBytes() {
    on_device(device_, [&] { EXPECT_EQ(cudaFree(p_), cudaSuccess); });
  }
  DeviceBytes(const DeviceBytes &) = delete;
  DeviceBytes &operator=(const DeviceBytes &) = delete;
  void *get() const { return p_; }
  size_t size() const { return bytes_; }
  void fill(int src, int dst) {
    std::vector<uint8_t> v(bytes_);
    for (size_t i = 0; i < bytes_; i++) v[i] = p2p_byte(src, dst, i);
    on_device(device_, [&] {
      EXPECT_EQ(cudaMemcpy(p_, v.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    });
  }
  // The first byte that is not the message src -> dst's, or -1.
  long first_wrong(int src, int dst) const {
    std::vector<uint8_t> v(bytes_);
    on_device(device_, [&] {
      EXPECT_EQ(cudaMemcpy(v.data(), p_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    });
    for (size_t i = 0; i < bytes_; i++) {
      if (v[i] != p2p_byte(src, dst, i)) return long(i);
    }
    return -1;
  }

 private:
  int device_;
  size_t bytes_;
  void *p_ = nullptr;
};

size_t pair_bytes(int src, int dst, uint64_t seed) {
  return size_t(1 + (uint64_t(src) * 7919 + uint64_t(dst) * 104729 + seed * 31) % 5000);
}

}  // namespace

// Every rank sends to every rank (itself included) and receives from
// every rank in one batch, device memory each, in an order that differs by
// rank (sends or receives first, peers up or down) with zero-byte
// transfers between: one group per rank, so no order deadlocks, and every
// byte lands where the pair's matching says, over seeded schedules of 2,
// 4 and 8 ranks. The stand-in would report a send to itself outside a
// group, a size mismatch or foreign memory as a violation.
TEST(NcclStandin, an_exchange_moves_every_pairs_device_bytes_in_one_group) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error err;
      ASSERT_EQ(bootstrap(boot, r, 20000, &comm, &err), KVS_OK) << err.message;
      std::vector<std::unique_ptr<DeviceBytes>> out, in;
      std::vector<kvs_comm_transfer> sends, receives;
      for (int p = 0; p < n; p++) {
        out.emplace_back(new DeviceBytes(r, pair_bytes(r, p, seed)));
        out.back()->fill(r, p);
        sends.push_back({p, true, out.back()->get(), out.back()->size()});
        in.emplace_back(new DeviceBytes(r, pair_bytes(p, r, seed)));
        receives.push_back({p, false, in.back()->get(), in.back()->size()});
      }
      if ((uint64_t(r) + seed) % 2 == 0) {
        std::reverse(sends.begin(), sends.end());
      } else {
        std::reverse(receives.begin(), receives.end());
      }
      std::vector<kvs_comm_transfer> batch;
      const auto &first = r % 2 == 0 ? sends : receives;
      const auto &second = r % 2 == 0 ? receives : sends;
      for (size_t i = 0; i < first.size(); i++) {
        batch.push_back(first[i]);
        batch.push_back({int(i) % n, i % 2 == 0, nullptr, 0});
        batch.push_back(second[i]);
      }
      ASSERT_EQ(kvs_comm_exchange(comm, batch.data(), batch.size(), &err), KVS_OK)
          << "rank " << r << ": " << err.message;
      for (int p = 0; p < n; p++) {
        EXPECT_EQ(in[size_t(p)]->first_wrong(p, r), -1) << "rank " << r << " from rank " << p;
      }
      // A collective after it matches as before.
      collectives(comm, r, n, seed);
      in.clear();
      out.clear();
      kvs_comm_destroy(comm);
    });
    expect_no_violations();
    EXPECT_EQ(kvs_standin::stats().p2p, uint64_t(n) * uint64_t(n)) << "one met send per pair";
  });
}

// 64 MiB each way between two ranks at once, and the send and receive of
// one rank to itself in the same group (what NCCL allows inside a group
// and hangs on outside one), compared byte for byte.
TEST(NcclStandin, an_exchange_of_64_MiB_each_way_and_to_itself_arrives_byte_for_byte) {
  reset(2, 1);
  const size_t bytes = size_t(64) << 20;
  kvs_test::run_ranks(2, 20000, [&](int r, kvs_comm_t boot) {
    kvs_comm_t comm = nullptr;
    kvs_error err;
    ASSERT_EQ(bootstrap(boot, r, 20000, &comm, &err), KVS_OK) << err.message;
    DeviceBytes out(r, bytes), in(r, bytes), self_out(r, 4096), self_in(r, 4096);
    out.fill(r, 1 - r);
    self_out.fill(r, r);
    kvs_comm_transfer batch[4] = {{1 - r, false, in.get(), bytes},
                                  {r, false, self_in.get(), 4096},
                                  {r, true, self_out.get(), 4096},
                                  {1 - r, true, out.get(), bytes}};
    ASSERT_EQ(kvs_comm_exchange(comm, batch, 4, &err), KVS_OK) << err.message;
    EXPECT_EQ(in.first_wrong(1 - r, r), -1) << "rank " << r;
    EXPECT_EQ(self_in.first_wrong(r, r), -1) << "rank " << r << " to itself";
    kvs_comm_destroy(comm);
  });
  expect_no_violations();
}

// Refusals queue nothing on the device and poison nothing: the batch
// after them matches as if they never were.
TEST(NcclStandin, exchange_refusals_queue_nothing) {
  reset(2, 2);
  kvs_test::run_ranks(2, 20000, [&](int r, kvs_comm_t boot) {
    kvs_comm_t comm = nullptr;
    kvs_error err;
    ASSERT_EQ(bootstrap(boot, r, 20000, &comm, &err), KVS_OK) << err.message;
    DeviceBytes out(r, 512), in(r, 512);
    out.fill(r, 1 - r);
    kvs_comm_transfer bad[2] = {{1 - r, true, out.get(), 512}, {2, false, in.get(), 512}};
    EXPECT_EQ(kvs_comm_exchange(comm, bad, 2, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_STREQ(err.message,
                 "exchange transfer 1 of 2 (a receive of 512 bytes): peer 2 is outside a group "
                 "of 2 ranks");
    bad[1] = {1 - r, false, nullptr, 512};
    EXPECT_EQ(kvs_comm_exchange(comm, bad, 2, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(kvs_comm_health(comm), KVS_OK);
    kvs_comm_transfer good[2] = {{1 - r, true, out.get(), 512}, {1 - r, false, in.get(), 512}};
    ASSERT_EQ(kvs_comm_exchange(comm, good, 2, &err), KVS_OK) << err.message;
    EXPECT_EQ(in.first_wrong(1 - r, r), -1);
    kvs_comm_destroy(comm);
  });
  expect_no_violations();
  EXPECT_EQ(kvs_standin::stats().p2p, 2u) << "the refused sends never reached NCCL";
}

// The last rank never calls: the others' exchanges with it give up after
// the deadline (2 s, ten times what a healthy exchange needs on a loaded
// 2-core machine), naming the exchange's peers and bytes, abort the
// communicator (so peers that wait on this rank hear of it) and poison it.
// Or the last rank's link fails (an injected async error): it fails at
// once, aborts, and the others hear of it long before their deadline.
TEST(NcclStandin, a_silent_or_failed_peer_fails_the_exchange_naming_it) {
  kvs_standin_harness::over_schedules(6, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    const bool silent = seed % 2 == 1;
    const int timeout_ms = silent ? 2000 : 60000;
    Latch done(n);
    kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error err;
      ASSERT_EQ(bootstrap(boot, r, timeout_ms, &comm, &err), KVS_OK) << err.message;
      const int last = n - 1;
      DeviceBytes out(r, 4096), in(r, 4096);
      kvs_comm_transfer batch[2] = {{last, true, out.get(), 4096}, {last, false, in.get(), 4096}};
      if (r == last) batch[0].peer = batch[1].peer = 0;
      if (r == last && silent) {
        done.arrive_and_wait();  // never calls until the others are done
        kvs_comm_destroy(comm);
        return;
      }
      if (r == last)
        kvs_standin::inject_nccl_async_error(kvs_standin::latest_comm(r), ncclSystemError);
      auto start = std::chrono::steady_clock::now();
      kvs_status st = kvs_comm_exchange(comm, batch, 2, &err);
      long ms = ms_since(start);
      if (silent) {
        EXPECT_TRUE(st == KVS_ERR_TIMEOUT || st == KVS_ERR_COMM) << err.message;
        EXPECT_LT(ms, 20 * timeout_ms) << "the deadline held";
        if (st == KVS_ERR_TIMEOUT) {
          EXPECT_GE(ms, timeout_ms);
          EXPECT_EQ(std::string(err.message),
                    "nccl exchange (send of 4096 bytes to rank " + std::to_string(last) +
                        ", receive of 4096 bytes from rank " + std::to_string(last) + ") on rank " +
                        std::to_string(r) + " of " + std::to_string(n) +
                        " did not complete within 2000 ms: a peer rank failed or stalled; the "
                        "communicator was aborted");
        }
      } else if (r == last) {
        EXPECT_EQ(st, KVS_ERR_COMM) << err.message;
      } else if (r == 0) {
        // Rank 0 exchanges with the failed rank: told by its abort.
        EXPECT_EQ(st, KVS_ERR_COMM) << err.message;
        EXPECT_TRUE(contains(err.message,
                             "nccl exchange (send of 4096 bytes to rank " + std::to_string(last)))
            << err.message;
        EXPECT_LT(ms, timeout_ms / 2) << "rank 0 waited for its deadline";
      } else {
        // The others exchange with the failed rank too, without its
        // counterpart: they hear of its abort just the same.
        EXPECT_EQ(st, KVS_ERR_COMM) << err.message;
        EXPECT_LT(ms, timeout_ms / 2) << "rank " << r << " waited for its deadline";
      }
      EXPECT_EQ(kvs_comm_health(comm), st);
      kvs_error again;
      EXPECT_EQ(kvs_comm_exchange(comm, batch, 2, &again), KVS_ERR_COMM);
      EXPECT_TRUE(contains(again.message, "refused: the communicator failed earlier"))
          << again.message;
      done.arrive_and_wait();
      kvs_comm_destroy(comm);
    });
    expect_no_violations();
  });
}

// Matched transfers of different sizes: NCCL needs the same count on both
// sides. The stand-in reports it (a violation here is the point), and both
// ranks fail and poison instead of reading past a buffer.
TEST(NcclStandin, an_exchange_whose_sizes_differ_fails_both_ranks) {
  reset(2, 4);
  kvs_test::run_ranks(2, 20000, [&](int r, kvs_comm_t boot) {
    kvs_comm_t comm = nullptr;
    kvs_error err;
    ASSERT_EQ(bootstrap(boot, r, 20000, &comm, &err), KVS_OK) << err.message;
    DeviceBytes buffer(r, r == 0 ? 100 : 200);
    kvs_comm_transfer t = {1 - r, r == 0, buffer.get(), buffer.size()};
    EXPECT_EQ(kvs_comm_exchange(comm, &t, 1, &err), KVS_ERR_COMM) << err.message;
    EXPECT_TRUE(contains(err.message, "invalid usage")) << err.message;
    EXPECT_EQ(kvs_comm_health(comm), KVS_ERR_COMM);
    kvs_comm_destroy(comm);
  });
  EXPECT_TRUE(has_violation("NCCL needs the same count and type on both sides"));
}

// The NCCL backend (backends/nccl/comm_nccl.c, the product's C source) on the CPU
// stand-in for CUDA and NCCL (tests/standin): ranks are threads over an
// in-process loopback bootstrap, NCCL collectives run on the stand-in's
// lazily run, adversarially interleaved streams, and the shard steps over
// it feed the device tables through on_apply with the device copy of the
// entries. Over seeded schedules with 2, 4 and 8 ranks; the defects of
// issue 17 in the backend each have a test here.
//
// KVS_STANDIN_SCHEDULES=100000 runs longer.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "core/window_pool.h"
#include "plan/device_layout.h"
#include "backends/cuda/device_tables.h"
#include "shard/comm.h"
#include "backends/nccl/comm_nccl.h"
#include "shard/shard.h"
#include "tests/shard/ranks.h"
#include "tests/standin/harness.h"
#include "tests/standin/standin.h"

using kvs_standin_harness::on_device;

namespace {

constexpr uint64_t P = KVS_DEFAULT_WINDOW_PAGE;

using kvs_standin_harness::expect_no_violations;
using kvs_standin_harness::reset;

bool has_violation(const std::string &needle) {
  for (const std::string &v : kvs_standin::violations()) {
    if (v.find(needle) != std::string::npos) return true;
  }
  return false;
}

kvs_comm_nccl_options options(int device, int timeout_ms) {
  kvs_comm_nccl_options o = KVS_COMM_NCCL_OPTIONS_INIT;
  o.device = device;
  o.timeout_ms = timeout_ms;
  return o;
}

int device_of_comm(kvs_comm_t comm) {
  cudaStream_t s;
  int device = -1;
  kvs_error err;
  EXPECT_EQ(kvs_comm_nccl_stream(comm, &s, &device, &err), KVS_OK) << err.message;
  return device;
}

// An engine's own communicator over `n` rank threads: each thread has its
// device current and the rank's comm and stream, as an engine that owns
// NCCL would.
struct EngineComm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

EngineComm engine_comm(int n, ncclUniqueId id, int rank, int device) {
  EngineComm e;
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  EXPECT_EQ(ncclCommInitRank(&e.comm, n, id, rank), ncclSuccess);
  EXPECT_EQ(cudaStreamCreateWithFlags(&e.stream, cudaStreamNonBlocking), cudaSuccess);
  return e;
}

// Options that hand the backend an engine's communicator and stream
// (adopt mode) rather than letting it make its own.
kvs_comm_nccl_options adopt_options(const EngineComm &e, int timeout_ms) {
  kvs_comm_nccl_options o = options(-1, timeout_ms);
  o.comm = e.comm;
  o.stream = e.stream;
  return o;
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

// on_apply: the step's entries into this rank's device tables on a stream
// of its own (not the communicator's), from the device copy of the
// entries or from the host copy.
struct Consumer {
  kvs_comm_t comm = nullptr;
  kvs_device_tables_t tables = nullptr;
  cudaStream_t stream = nullptr;
  bool from_device = true;
};

kvs_status feed_tables(void *ctx, const kvs_shard_apply_batch *batch, kvs_error *err) {
  auto *c = static_cast<Consumer *>(ctx);
  if (c->from_device) {
    if (batch->device_entries == nullptr) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "no device entries over nccl");
    }
    kvs_status status = kvs_device_tables_apply_journal_device(
        c->tables, static_cast<const kvs_journal_entry *>(batch->device_entries), batch->n,
        c->stream, err);
    // The next collective must not overwrite the entries before the apply
    // on our stream has read them.
    if (status == KVS_OK) status = kvs_comm_nccl_reads_done(c->comm, c->stream, err);
    return status;
  }
  return kvs_device_tables_apply_journal(c->tables, batch->entries, batch->n, c->stream, err);
}

// A shard over `comm` stepping `steps` times, its on_apply feeding device
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
  o.on_apply = feed_tables;
  o.on_apply_ctx = &consumer;
  kvs_shard_t shard = nullptr;
  ASSERT_EQ(kvs_shard_create(comm, &sizes, &o, &shard, &err), KVS_OK) << err.message;
  Driver driver(kvs_shard_pool(shard), seed);
  for (int step = 0; step < steps; step++) {
    if (rank == 0) driver.step_work();
    ASSERT_EQ(kvs_shard_step(shard, uint64_t(step), nullptr, &err), KVS_OK)
        << "step " << step << ": " << err.message;
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

int ranks_of(uint64_t seed) { return 2 << (seed % 3); }  // 2, 4, 8

}  // namespace

// Issue 17, defect 1: on a failure, adopt mode called ncclCommAbort on the
// engine's communicator, which the header says it never destroys; the
// engine then used a freed comm.
TEST(NcclStandin, adopt_mode_never_aborts_the_engines_communicator) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; r++) {
      threads.emplace_back([&, r] {
        EngineComm e = engine_comm(n, id, r, r);
        kvs_comm_nccl_options o = adopt_options(e, 300);
        kvs_comm_t comm = nullptr;
        kvs_error err;
        ASSERT_EQ(kvs_comm_nccl_create(&o, nullptr, &comm, &err), KVS_OK) << err.message;
        kvs_comm_buffer b;
        ASSERT_EQ(kvs_comm_buffer_alloc(comm, 64, &b, &err), KVS_OK) << err.message;
        EXPECT_EQ(kvs_comm_broadcast(comm, &b, 64, 0, &err), KVS_OK) << err.message;
        // The last rank's link fails: it sees the error, the others time out.
        if (r == n - 1) kvs_standin::inject_nccl_async_error(e.comm, ncclSystemError);
        EXPECT_NE(kvs_comm_broadcast(comm, &b, 64, 0, &err), KVS_OK);
        EXPECT_NE(std::string(err.message).find("the engine's communicator was left as it is"),
                  std::string::npos)
            << err.message;
        EXPECT_EQ(kvs_standin::comm_state(e.comm), kvs_standin::CommState::kReady)
            << "rank " << r << ": the engine's communicator was aborted or destroyed";
        int count = 0;
        EXPECT_EQ(ncclCommCount(e.comm, &count), ncclSuccess);
        // The engine decides: it aborts its own communicator (cancelling
        // the collective still queued on its stream), then lets go of the
        // kvs_comm.
        ncclCommAbort(e.comm);
        kvs_comm_buffer_free(comm, &b);
        kvs_comm_destroy(comm);
        cudaStreamDestroy(e.stream);
      });
    }
    for (std::thread &t : threads) t.join();
  });
}

// Issue 17, defect 4 (adopt): adopting switched the caller's device to
// the communicator's and never switched it back.
TEST(NcclStandin, adopt_mode_leaves_the_callers_device_alone) {
  kvs_standin_harness::over_schedules(30, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; r++) {
      threads.emplace_back([&, r] {
        EngineComm e = engine_comm(n, id, r, r);
        int other = (r + 1) % n;
        ASSERT_EQ(cudaSetDevice(other), cudaSuccess);  // the engine works elsewhere meanwhile
        kvs_comm_nccl_options o = adopt_options(e, 20000);
        kvs_comm_t comm = nullptr;
        kvs_error err;
        ASSERT_EQ(kvs_comm_nccl_create(&o, nullptr, &comm, &err), KVS_OK) << err.message;
        EXPECT_EQ(kvs_standin::thread_device(), other) << "adopting moved the caller's device";
        EXPECT_EQ(device_of_comm(comm), r);
        kvs_comm_buffer b;
        ASSERT_EQ(kvs_comm_buffer_alloc(comm, 8, &b, &err), KVS_OK) << err.message;
        EXPECT_EQ(kvs_standin::device_of(b.device), r);
        EXPECT_EQ(kvs_comm_allreduce_u64(comm, &b, 1, KVS_COMM_SUM, &err), KVS_OK) << err.message;
        EXPECT_EQ(kvs_standin::thread_device(), other) << "a collective moved the caller's device";
        kvs_comm_buffer_free(comm, &b);
        kvs_comm_destroy(comm);
        EXPECT_EQ(kvs_standin::thread_device(), other);
        ncclCommDestroy(e.comm);
        cudaStreamDestroy(e.stream);
      });
    }
    for (std::thread &t : threads) t.join();
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
      kvs_comm_nccl_options o = options(r, 20000);
      ASSERT_EQ(kvs_comm_nccl_create(&o, boot, &comm, &err), KVS_OK) << err.message;
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
    const int timeout_ms = 3000;
    // Even seeds: the root's staging copy fails; odd: rank 1's readback.
    bool staging = seed % 2 == 0;
    int failing = staging ? 0 : 1;
    kvs_standin::inject_cuda_error("cudaMemcpyAsync", failing, staging ? 1 : 1,
                                   cudaErrorLaunchFailure);
    kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error err;
      kvs_comm_nccl_options o = options(r, timeout_ms);
      ASSERT_EQ(kvs_comm_nccl_create(&o, boot, &comm, &err), KVS_OK) << err.message;
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
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - start)
                    .count();
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
      kvs_comm_nccl_options o = options(r + 1, 20000);
      ASSERT_EQ(kvs_comm_nccl_create(&o, boot, &comm, &err), KVS_OK) << err.message;
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
          kvs_comm_nccl_options o = options(-1, 20000);
          ASSERT_EQ(kvs_comm_nccl_create(&o, boot, &comm, &err), KVS_OK) << err.message;
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
// to on_apply was overwritten by the next step's broadcast while a kernel
// on another stream could still read it.
TEST(NcclStandin, step_buffers_are_not_reused_while_a_consumer_reads_them) {
  kvs_standin_harness::over_schedules(60, ranks_of, [](uint64_t seed) {
    int n = ranks_of(seed);
    reset(n, seed);
    kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
      kvs_comm_t comm = nullptr;
      kvs_error err;
      kvs_comm_nccl_options o = options(r, 20000);
      ASSERT_EQ(kvs_comm_nccl_create(&o, boot, &comm, &err), KVS_OK) << err.message;
      shard_steps(comm, r, seed, 8, true);
      kvs_comm_destroy(comm);
    });
    expect_no_violations();
  });
}

namespace {

// What one schedule of the walk does besides collectives and steps.
enum class Twist { kNone, kTimeout, kAsyncError, kAdopt };

Twist twist_of(uint64_t seed) {
  switch (seed % 10) {
    case 3:
      return Twist::kTimeout;
    case 6:
      return Twist::kAsyncError;
    case 9:
      return Twist::kAdopt;
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

}  // namespace

TEST(NcclStandin, collectives_and_shard_steps_over_seeded_schedules) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(1000), ranks_of, [](uint64_t seed) {
        int n = ranks_of(seed);
        Twist twist = twist_of(seed);
        // Every other schedule of 4 or 8 ranks spans two nodes, ranks dealt
        // round-robin, half the GPUs each.
        bool two_nodes = n >= 4 && (seed / 3) % 2 == 1 && twist != Twist::kAdopt;
        int devices = two_nodes ? n / 2 : n;
        reset(devices, seed);
        if (twist == Twist::kAdopt) {
          ncclUniqueId id;
          ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
          std::vector<std::thread> threads;
          for (int r = 0; r < n; r++) {
            threads.emplace_back([&, r] {
              EngineComm e = engine_comm(n, id, r, r);
              kvs_comm_nccl_options o = adopt_options(e, 20000);
              kvs_comm_t comm = nullptr;
              kvs_error err;
              ASSERT_EQ(kvs_comm_nccl_create(&o, nullptr, &comm, &err), KVS_OK) << err.message;
              collectives(comm, r, n, seed);
              shard_steps(comm, r, seed, 4, seed % 2 == 0);
              kvs_comm_destroy(comm);
              EXPECT_EQ(kvs_standin::thread_device(), r);
              EXPECT_EQ(kvs_standin::comm_state(e.comm), kvs_standin::CommState::kReady);
              EXPECT_EQ(ncclCommDestroy(e.comm), ncclSuccess);
              EXPECT_EQ(cudaStreamDestroy(e.stream), cudaSuccess);
            });
          }
          for (std::thread &t : threads) t.join();
          expect_no_violations();
          return;
        }
        int timeout_ms = twist == Twist::kTimeout ? 50 : 20000;
        kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
          if (two_nodes) kvs_standin::set_thread_hostname(r % 2 == 0 ? "node-a" : "node-b");
          kvs_comm_t comm = nullptr;
          kvs_error err;
          kvs_comm_nccl_options o = options(-1, timeout_ms);
          ASSERT_EQ(kvs_comm_nccl_create(&o, boot, &comm, &err), KVS_OK) << err.message;
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

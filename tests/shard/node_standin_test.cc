// The node with device tables on the CPU stand-in for CUDA and NCCL
// (tests/standin), the CUDA and NCCL backends linked into the test (their
// entry points found without a dlopen): ranks as threads, their streams
// interleaved in a seeded adversarial order. Over NCCL (bootstrapped over
// loopback, kvs_comm_nccl_bootstrap) each rank's tables apply every step's
// journal from the broadcast's device buffer on the communicator's stream
// and compute the ring contexts on the device; over loopback (the
// device-check variant: every rank's tables on one GPU) they apply from
// host entries. In every schedule every step's device ring contexts equal
// the pool's own (the CPU reference), the ranks' digests and ring contexts
// agree, every check (tables against pool) passes, and the stand-in sees
// no use of freed or foreign memory and no context a thread did not ask
// for. Over a device communicator whose device copy of a broadcast lands
// late (after the call returned, in stream order on its own stream) the
// tables still read each step's message only once it has landed.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.h"
#include "core/geometry.h"
#include "shard/comm.h"
#include "shard/comm_nccl.h"
#include "shard/node.h"
#include "tools/workload.h"
#include "tests/shard/callback_ranks.h"
#include "tests/shard/engine_flows.h"
#include "tests/shard/engine_memory.h"
#include "tests/shard/host_rows_flow.h"
#include "tests/shard/host_rows_random.h"
#include "tests/shard/ranks.h"
#include "tests/shard/small_model.h"
#include "tests/shard/tail_state_flow.h"
#include "tests/standin/harness.h"
#include "tests/standin/standin.h"

namespace {

constexpr uint64_t MiB = 1ull << 20;

int ranks_of(uint64_t seed) { return seed % 3 == 0 ? 4 : 2; }

// Schedules per test: a node's creation costs each schedule milliseconds,
// several times that under AddressSanitizer, where a fifth of them keeps
// the suite's time; the printed count says what ran.
#if defined(__SANITIZE_ADDRESS__)
constexpr uint64_t kScale = 5;
#else
constexpr uint64_t kScale = 1;
#endif

using kvs_standin_harness::expect_no_violations;
using kvs_standin_harness::reset;

// One rank: a node with CUDA tables on `device`, a workload for `steps`
// steps with every step's ring contexts checked against the pool; returns
// the rank's binding digest and folded ring digests, and (finished) whether
// every step and check ran.
void run_node(kvs_comm_t comm, int n, int device, uint64_t seed, uint64_t steps, uint64_t *digest,
              uint64_t *ring, bool *finished = nullptr) {
  // The small model: a schedule carves megabytes, not the gigabytes the
  // stand-in would have to zero in host memory.
  kvs_geometry g = kvs_test::small_model();
  kvs_workload_options wo = KVS_WORKLOAD_OPTIONS_INIT;
  wo.seed = seed;
  wo.max_running = 6;
  wo.arrival_rate = 0.5;
  wo.prompt_max = 600;
  wo.gen_max = 200;
  std::vector<uint64_t> budgets(8, 12 * MiB);
  kvs_node_options o;
  kvs_node_options_init(&o);
  o.geometry = &g;
  o.swa_ratio = 0.04;
  o.max_seq_len = kvs_workload_max_seq_len(&wo);
  o.max_running = wo.max_running;
  o.radix = false;
  o.tp = n;
  o.pp = 1;
  o.topology = "bundled";
  o.device = KVS_NODE_DEVICE_CUDA;
  o.cuda_device = device;
  o.check_every = 8;
  o.budget_per_gpu = budgets.data();
  o.n_budget_per_gpu = budgets.size();
  kvs_node_t node = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_node_create(comm, &o, &node, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_table_kind_of(kvs_node_table(node)), KVS_TABLE_CUDA);
  EXPECT_EQ(kvs_table_device(kvs_node_table(node)), device);
  kvs_workload_t w = nullptr;
  ASSERT_EQ(kvs_workload_create(kvs_node_shard(node), &wo, &w, &err), KVS_OK) << err.message;
  uint64_t folded = 0;
  for (uint64_t s = 0; s < steps; s++) {
    ASSERT_EQ(kvs_workload_schedule(w, s, &err), KVS_OK) << err.message;
    kvs_ring_batch batch;
    kvs_workload_batch(w, &batch);
    kvs_node_step_info r;
    ASSERT_EQ(kvs_node_next_step(node), s);
    ASSERT_EQ(kvs_node_step_rows(node, &batch, true, &r, &err), KVS_OK)
        << "step " << s << ": " << err.message;
    EXPECT_TRUE(r.ring.on_device);
    const int64_t *own, *prev, *ring_slots;
    size_t rows = 0;
    ASSERT_EQ(kvs_node_host_ring(node, &own, &prev, &ring_slots, &rows, &err), KVS_OK);
    EXPECT_EQ(kvs_workload_verify_ring(w, own, prev, ring_slots, rows, &err), KVS_OK)
        << "step " << s << ": " << err.message;
    folded = folded * 1000003u + r.digest;
    kvs_workload_advance(w);
    if (kvs_shard_check_due(kvs_node_shard(node), s)) {
      EXPECT_EQ(kvs_node_check(node, nullptr, &err), KVS_OK) << err.message;
    }
  }
  EXPECT_EQ(kvs_node_check(node, nullptr, &err), KVS_OK) << err.message;
  kvs_workload_counters c;
  kvs_workload_counters_get(w, &c);
  EXPECT_GT(c.admitted, 2u) << "the schedule bound pages";
  EXPECT_GT(c.contexts, steps) << "ring contexts were computed on the device";
  *digest = kvs_window_pool_digest(kvs_node_pool(node));
  *ring = folded;
  if (finished != nullptr) *finished = true;
  kvs_workload_destroy(w);
  kvs_node_destroy(node);
  EXPECT_EQ(kvs_standin::thread_device(), -1) << "the node left its thread on a device";
}

// A device communicator whose device copy lands late. Every collective
// runs on the host over the rank's loopback communicator, so the shard's
// host view of a step message is complete when the call returns; the
// bytes reach the buffer's device copy by a copy queued on the
// communicator's own stream (from a pinned snapshot), after whatever the
// consumers declared they still read (reads_done). That is NCCL's contract
// for a device buffer -- it holds the message in stream order, not when
// the call returns -- without the host wait NCCL's backend happens to make,
// so a consumer that does not order itself after the communicator's
// stream reads an older message.
struct LateComm {
  kvs_comm_t inner = nullptr;  // the rank's loopback communicator, borrowed
  int device = -1;
  cudaStream_t stream = nullptr;
  std::vector<void *> snapshots;  // pinned, freed at destroy
};

struct LateBuffer {
  kvs_comm_buffer inner;
};

// Runs `body` with the communicator's device current, the thread put back
// as it was (kvs_cuda_device_enter / leave).
template <typename Body>
kvs_status on_device(const LateComm *c, kvs_error *err, Body body) {
  kvs_cuda_device_scope scope;
  kvs_status status = kvs_cuda_device_enter(c->device, &scope, err);
  if (status != KVS_OK) return status;
  status = body();
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status cuda_ok(cudaError_t code, const char *what, kvs_error *err) {
  if (code == cudaSuccess) return KVS_OK;
  return kvs_error_set(err, KVS_ERR_CUDA, "late comm: %s: %s", what, cudaGetErrorName(code));
}

// The device copy of a collective's result, queued on the stream.
kvs_status land_later(LateComm *c, kvs_comm_buffer *b, size_t bytes, kvs_error *err) {
  return on_device(c, err, [&] {
    void *snapshot = nullptr;
    kvs_status st = cuda_ok(cudaMallocHost(&snapshot, bytes), "cudaMallocHost", err);
    if (st != KVS_OK) return st;
    std::memcpy(snapshot, b->host, bytes);
    c->snapshots.push_back(snapshot);
    return cuda_ok(cudaMemcpyAsync(b->device, snapshot, bytes, cudaMemcpyHostToDevice, c->stream),
                   "cudaMemcpyAsync", err);
  });
}

kvs_status late_alloc(void *ctx, size_t bytes, kvs_comm_buffer *out, kvs_error *err) {
  auto *c = static_cast<LateComm *>(ctx);
  auto *priv = new LateBuffer;
  kvs_status st = kvs_comm_buffer_alloc(c->inner, bytes, &priv->inner, err);
  void *device = nullptr;
  if (st == KVS_OK) {
    st = on_device(c, err, [&] { return cuda_ok(cudaMalloc(&device, bytes), "cudaMalloc", err); });
    if (st != KVS_OK) kvs_comm_buffer_free(c->inner, &priv->inner);
  }
  if (st != KVS_OK) {
    delete priv;
    return st;
  }
  out->host = priv->inner.host;
  out->device = device;
  out->priv = priv;
  return KVS_OK;
}

void late_free(void *ctx, kvs_comm_buffer *b) {
  auto *c = static_cast<LateComm *>(ctx);
  auto *priv = static_cast<LateBuffer *>(b->priv);
  (void)on_device(c, nullptr, [&] {
    (void)cudaStreamSynchronize(c->stream);
    (void)cudaFree(b->device);
    return KVS_OK;
  });
  kvs_comm_buffer_free(c->inner, &priv->inner);
  delete priv;
}

kvs_status late_broadcast(void *ctx, kvs_comm_buffer *b, size_t bytes, int root, int,
                          kvs_error *err) {
  auto *c = static_cast<LateComm *>(ctx);
  auto *priv = static_cast<LateBuffer *>(b->priv);
  kvs_status st = kvs_comm_broadcast(c->inner, &priv->inner, bytes, root, err);
  return st != KVS_OK ? st : land_later(c, b, bytes, err);
}

kvs_status late_allreduce(void *ctx, kvs_comm_buffer *b, size_t count, kvs_comm_op op, int,
                          kvs_error *err) {
  auto *c = static_cast<LateComm *>(ctx);
  auto *priv = static_cast<LateBuffer *>(b->priv);
  kvs_status st = kvs_comm_allreduce_u64(c->inner, &priv->inner, count, op, err);
  return st != KVS_OK ? st : land_later(c, b, count * sizeof(uint64_t), err);
}

kvs_status late_barrier(void *ctx, int, kvs_error *err) {
  return kvs_comm_barrier(static_cast<LateComm *>(ctx)->inner, err);
}

void late_destroy(void *ctx) {
  auto *c = static_cast<LateComm *>(ctx);
  (void)on_device(c, nullptr, [&] {
    (void)cudaStreamSynchronize(c->stream);
    for (void *p : c->snapshots) (void)cudaFreeHost(p);
    (void)cudaStreamDestroy(c->stream);
    return KVS_OK;
  });
  delete c;  // the loopback communicator is its owner's (run_ranks)
}

kvs_status late_device_stream(void *ctx, void **stream, int *device, kvs_error *) {
  auto *c = static_cast<LateComm *>(ctx);
  *stream = c->stream;
  *device = c->device;
  return KVS_OK;
}

kvs_status late_reads_done(void *ctx, void *stream, kvs_error *err) {
  auto *c = static_cast<LateComm *>(ctx);
  return on_device(c, err, [&] {
    cudaEvent_t read;
    kvs_status st =
        cuda_ok(cudaEventCreateWithFlags(&read, cudaEventDisableTiming), "cudaEventCreate", err);
    if (st != KVS_OK) return st;
    st = cuda_ok(cudaEventRecord(read, static_cast<cudaStream_t>(stream)), "cudaEventRecord", err);
    if (st == KVS_OK) st = cuda_ok(cudaStreamWaitEvent(c->stream, read, 0), "wait", err);
    (void)cudaEventDestroy(read);
    return st;
  });
}

const kvs_comm_vtable kLateVtable = {
    "late-device", late_alloc, late_free,    late_broadcast,     late_allreduce,
    late_barrier,  nullptr,    late_destroy, late_device_stream, late_reads_done,
};

// A late device communicator on `device` over a rank's loopback
// communicator (borrowed: destroy the wrapper first).
kvs_comm_t late_comm(kvs_comm_t loopback, int device) {
  auto *c = new LateComm;
  c->inner = loopback;
  c->device = device;
  kvs_error err;
  EXPECT_EQ(on_device(c, &err,
                      [&] {
                        return cuda_ok(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
                                       "cudaStreamCreate", &err);
                      }),
            KVS_OK)
      << err.message;
  kvs_comm_t comm = nullptr;
  EXPECT_EQ(kvs_comm_create(&kLateVtable, c, kvs_comm_rank(loopback), kvs_comm_size(loopback),
                            kvs_comm_timeout_ms(loopback), &comm, &err),
            KVS_OK)
      << err.message;
  return comm;
}

void expect_agree(const std::vector<uint64_t> &digests, const std::vector<uint64_t> &rings) {
  for (size_t r = 1; r < digests.size(); r++) {
    EXPECT_EQ(digests[r], digests[0]) << "rank " << r;
    EXPECT_EQ(rings[r], rings[0]) << "rank " << r;
  }
}

}  // namespace

// Over NCCL: one GPU per rank, the tables on the communicator's stream.
TEST(NodeStandin, nccl_steps_feed_the_device_tables_over_seeded_schedules) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(1000 / kScale), ranks_of, [](uint64_t seed) {
        int n = ranks_of(seed);
        reset(n, seed);
        std::vector<uint64_t> digests(n), rings(n);
        kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
          kvs_comm_t comm = nullptr;
          kvs_error err;
          ASSERT_EQ(kvs_comm_nccl_bootstrap(boot, r, 20000, 20000, &comm, &err), KVS_OK)
              << err.message;
          run_node(comm, n, r, seed, 24, &digests[r], &rings[r]);
          kvs_comm_destroy(comm);
        });
        expect_agree(digests, rings);
        for (int d = 0; d < n; d++) {
          EXPECT_LE(kvs_standin::contexts_created(d), 1) << "device " << d;
        }
        expect_no_violations();
      });
}

// Over a device communicator whose device copy of each broadcast lands
// after the call returns (LateComm): the tables take the step's message
// from the device buffer only once it landed, in stream order after the
// communicator's stream; tables that read it earlier would apply an older
// step's entries and compute other ring contexts than the pool's.
TEST(NodeStandin, the_tables_read_a_step_message_only_after_it_lands_on_the_device) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(100 / kScale), ranks_of, [](uint64_t seed) {
        int n = ranks_of(seed);
        reset(n, seed);
        std::vector<uint64_t> digests(n), rings(n);
        kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t loopback) {
          kvs_comm_t comm = late_comm(loopback, r);
          ASSERT_NE(comm, nullptr);
          bool finished = false;
          run_node(comm, n, r, seed, 24, &digests[r], &rings[r], &finished);
          kvs_comm_destroy(comm);
          // A rank that stopped early wakes its peers now, not at their
          // deadline.
          if (!finished) kvs_comm_abort(loopback, 1);
        });
        expect_agree(digests, rings);
        expect_no_violations();
      });
}

// Over loopback with every rank's tables on GPU 0 (what device-check runs
// on a one-GPU machine): journals applied from host entries.
TEST(NodeStandin, loopback_ranks_share_one_gpu_over_seeded_schedules) {
  kvs_standin_harness::over_schedules(kvs_standin_harness::schedules(200 / kScale), ranks_of,
                                      [](uint64_t seed) {
                                        int n = ranks_of(seed);
                                        reset(1, seed);
                                        std::vector<uint64_t> digests(n), rings(n);
                                        kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t comm) {
                                          run_node(comm, n, 0, seed, 24, &digests[r], &rings[r]);
                                        });
                                        expect_agree(digests, rings);
                                        expect_no_violations();
                                      });
}

// A device node over the callbacks backend (an engine's own host group,
// as Python's torch_comm over gloo): a host communicator, so each rank's
// tables take every step's entries from host memory, as over loopback.
TEST(NodeStandin, callback_ranks_feed_device_tables_from_host_entries) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(40 / kScale), ranks_of, [](uint64_t seed) {
        int n = ranks_of(seed);
        reset(1, seed);
        std::vector<uint64_t> digests(n), rings(n);
        kvs_test::run_callback_ranks(n, 20000, [&](int r, kvs_comm_t comm, kvs_test::Forward &f) {
          run_node(comm, n, 0, seed, 24, &digests[r], &rings[r]);
          EXPECT_GE(f.broadcasts, 24) << "every step went through the broadcast callback";
        });
        expect_agree(digests, rings);
        expect_no_violations();
      });
}

// The host tier's rows on device tables: two ranks sharing one GPU, each
// with an engine stream of its own, spill their pages' rows to pinned slots
// and fetch them back into other pages (tests/shard/host_rows_flow.h), the
// copies queued on the engine's stream in journal order; over seeded
// schedules, with no use of freed or foreign memory.
TEST(NodeStandin, host_tier_rows_go_to_pinned_slots_and_back_on_the_engine_stream) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(40 / kScale), [](uint64_t) { return 2; },
      [](uint64_t seed) {
        reset(1, seed);
        kvs_test::run_ranks(
            2, 20000, [&](int, kvs_comm_t comm) { kvs_test::host_rows_on_engine_stream(comm, 2); });
        expect_no_violations();
      });
}

// The host tier's rows under a random serving mix
// (tests/shard/host_rows_random.h) on device tables: two ranks on one GPU,
// each writing and reading its rows on its own engine stream, over seeded
// schedules: every cached page holds its block's rows after every step.
TEST(NodeStandin, host_tier_rows_hold_their_blocks_under_a_random_mix) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(12 / kScale + 1), [](uint64_t) { return 2; },
      [](uint64_t seed) {
        reset(1, seed);
        kvs_test::Barrier barrier(2);
        kvs_test::Record record;
        kvs_test::run_ranks(2, 60000, [&](int, kvs_comm_t comm) {
          const uint64_t slot = kvs_test::slot_cost(comm, 2);
          ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
          cudaStream_t engine = nullptr;
          ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
          kvs_test::SmallPrefixNode s(2, KVS_NODE_DEVICE_CUDA, 12 * slot);
          s.o.cuda_device = 0;
          s.o.stream = engine;
          {
            kvs_test::EngineMemory memory(engine);
            kvs_test::random_host_rows_rank(comm, s, memory.memory(), seed, 120, &barrier, &record);
          }
          EXPECT_EQ(cudaStreamDestroy(engine), cudaSuccess);
        });
        expect_no_violations();
      });
}

// An exact prefix hit through a retained tail on device tables
// (tests/shard/tail_state_flow.h): two ranks on one GPU, each writing and
// reading its rows on its own engine stream without waiting; the ring
// clears and the restore are queued there in journal order, over seeded
// schedules.
static void tail_state_on_engine_stream(kvs_comm_t comm, int tp) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t engine = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
  kvs_test::SmallPrefixNode s(tp, KVS_NODE_DEVICE_CUDA, 0);
  s.o.cuda_device = 0;
  s.o.stream = engine;
  kvs_node_t node = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_OK) << err.message;
  if (node != nullptr) {
    kvs_test::EngineMemory memory(engine);
    kvs_test::tail_state_round_trip(node, memory.memory());
  }
  kvs_node_destroy(node);
  EXPECT_EQ(cudaStreamDestroy(engine), cudaSuccess);
}

TEST(NodeStandin, an_exact_hits_ring_takes_its_tails_state_on_the_engine_stream) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(30 / kScale), [](uint64_t) { return 2; },
      [](uint64_t seed) {
        reset(1, seed);
        kvs_test::run_ranks(2, 20000,
                            [&](int, kvs_comm_t comm) { tail_state_on_engine_stream(comm, 2); });
        expect_no_violations();
      });
}

// A production carve's layer strides pass the device's largest 2D pitch
// (2^31 - 1 B: DSV4-Flash's ratio-4 tier at tp 1 in a 110 GiB carve
// strides 2,423,522,304 B). The stand-in's pitch limit set to 4 KiB puts
// the small model's strides past it: the host tier's spills and fetches,
// the ring clears and the restores go run by run, byte for byte the same.
TEST(NodeStandin, row_copies_past_the_devices_largest_pitch_go_run_by_run) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(10 / kScale + 1), [](uint64_t) { return 2; },
      [](uint64_t seed) {
        kvs_standin::Config c;
        c.devices = 1;
        c.seed = seed;
        c.max_pitch = 4096;
        kvs_standin::reset(c);
        kvs_test::run_ranks(2, 20000, [&](int, kvs_comm_t comm) {
          kvs_test::host_rows_on_engine_stream(comm, 2);
          tail_state_on_engine_stream(comm, 2);
        });
        expect_no_violations();
      });
}

// The device check's carve case (tests/shard/engine_flows.h; at 100 GiB
// in node_engine_gpu_test) at 12 MiB under the stand-in's 4 KiB pitch: its
// premise (the ratio-4 stride past the pitch) and its round trip.
TEST(NodeStandin, the_device_checks_carve_case_runs_under_a_low_pitch) {
  kvs_standin::Config c;
  c.max_pitch = 4096;
  kvs_standin::reset(c);
  kvs_test::run_ranks(1, 20000,
                      [&](int, kvs_comm_t comm) { kvs_test::host_rows_at_carve(comm, 12 * MiB); });
  expect_no_violations();
}

// torch's default stream is the legacy default stream, which an engine
// passes as a NULL stream (cuda_stream 0): the node must order its copies
// and steps against it like any engine stream. The same random mix, each
// rank writing and reading its rows on the legacy stream with
// options.stream NULL.
TEST(NodeStandin, a_null_stream_is_the_legacy_default_stream_and_orders_the_copies) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(12 / kScale + 1), [](uint64_t) { return 2; },
      [](uint64_t seed) {
        reset(1, seed);
        kvs_test::Barrier barrier(2);
        kvs_test::Record record;
        kvs_test::run_ranks(2, 60000, [&](int, kvs_comm_t comm) {
          const uint64_t slot = kvs_test::slot_cost(comm, 2);
          ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
          kvs_test::SmallPrefixNode s(2, KVS_NODE_DEVICE_CUDA, 12 * slot);
          s.o.cuda_device = 0;
          s.o.stream = nullptr;  // torch.cuda.current_stream().cuda_stream on the default stream
          {
            kvs_test::EngineMemory memory(nullptr);
            kvs_test::random_host_rows_rank(comm, s, memory.memory(), seed, 120, &barrier, &record);
          }
        });
        expect_no_violations();
      });
}

// An engine that says it has no stream (no_stream) with a stream as well
// is refused on every rank, naming both options.
TEST(NodeStandin, no_stream_with_a_stream_is_refused) {
  reset(1, 1);
  kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t engine = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
    kvs_test::SmallPrefixNode s(1, KVS_NODE_DEVICE_CUDA, 0);
    s.o.cuda_device = 0;
    s.o.stream = engine;
    s.o.no_stream = true;
    kvs_node_t node = nullptr;
    kvs_error err;
    EXPECT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.message).find("options.no_stream says the engine has no stream"),
              std::string::npos)
        << err.message;
    kvs_node_destroy(node);
    EXPECT_EQ(cudaStreamDestroy(engine), cudaSuccess);
  });
}

// The node's buffers beside its carve (plan/node_overhead.h) priced with
// its actual configuration and held by its reserve: on two 1 GiB GPUs of
// the stand-in with budgets measured (x 0.1), a reserve below them is
// refused on every rank naming both numbers and the option, a reserve of
// exactly them passes and the node reports them, one byte less is refused
// again; NCCL's buffers are counted over NCCL and not over loopback (host
// buffers), and an explicit budget asks nothing of the reserve.
namespace {

struct Attempt {
  kvs_status status = KVS_OK;
  std::string message;
  uint64_t buffers = 0;  // kvs_node_buffers' total on success
  uint64_t nccl = 0;
};

// One create on n ranks, each on its own GPU (over NCCL, or loopback with
// host buffers), budgets measured x 0.1 less `reserve`, or `explicit_bytes`
// per GPU when non-zero. Every rank's outcome.
std::vector<Attempt> create_on_gpus(int n, bool nccl, uint64_t reserve, uint64_t explicit_bytes,
                                    kvs_node_device device = KVS_NODE_DEVICE_CUDA,
                                    double ratio = 0.1) {
  kvs_standin::Config c;
  c.devices = n;
  c.seed = 7;
  c.device_bytes = 1ull << 30;
  c.context_bytes = 64 * MiB;
  kvs_standin::reset(c);
  std::vector<Attempt> out(n);
  kvs_test::run_ranks(n, 20000, [&](int r, kvs_comm_t boot) {
    kvs_comm_t comm = boot;
    kvs_error err;
    if (nccl) {
      ASSERT_EQ(kvs_comm_nccl_bootstrap(boot, r, 20000, 20000, &comm, &err), KVS_OK) << err.message;
    }
    kvs_geometry g = kvs_test::small_model();
    std::vector<uint64_t> budgets(8, explicit_bytes);
    kvs_node_options o;
    kvs_node_options_init(&o);
    o.geometry = &g;
    o.swa_ratio = 0.04;
    o.max_seq_len = 4096;
    o.max_running = 6;
    o.radix = false;
    o.tp = n;
    o.topology = "bundled";
    o.device = device;
    o.cuda_device = device == KVS_NODE_DEVICE_CUDA ? r : -1;
    o.memory_ratio = ratio;
    o.reserve_bytes = reserve;
    if (explicit_bytes != 0) {
      o.budget_per_gpu = budgets.data();
      o.n_budget_per_gpu = budgets.size();
    }
    kvs_node_t node = nullptr;
    out[r].status = kvs_node_create(comm, &o, &node, &err);
    if (out[r].status == KVS_OK) {
      out[r].buffers = kvs_node_buffers(node)->total_bytes;
      out[r].nccl = kvs_node_buffers(node)->nccl_bytes;
      kvs_node_destroy(node);
    } else {
      out[r].message = err.message;
    }
    if (nccl) kvs_comm_destroy(comm);
  });
  return out;
}

// N from "the node's buffers need N bytes", or 0.
uint64_t needed(const std::string &message) {
  const std::string key = "the node's buffers need ";
  size_t at = message.find(key);
  return at == std::string::npos ? 0 : std::stoull(message.substr(at + key.size()));
}

void expect_refused(const std::vector<Attempt> &attempts, uint64_t reserve, uint64_t need) {
  for (size_t r = 0; r < attempts.size(); r++) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(attempts[r].status, KVS_ERR_BUDGET_TOO_SMALL) << attempts[r].message;
    EXPECT_NE(attempts[r].message.find("node creation failed at the node's buffers on rank 0"),
              std::string::npos)
        << attempts[r].message;
    EXPECT_NE(attempts[r].message.find("the node's buffers need " + std::to_string(need) +
                                       " bytes beside its carve but reserve_bytes (--reserve) is " +
                                       std::to_string(reserve) +
                                       "; give reserve_bytes (--reserve) of at least " +
                                       std::to_string(need)),
              std::string::npos)
        << attempts[r].message;
  }
}

}  // namespace

TEST(NodeStandin, the_reserve_must_hold_the_nodes_buffers_priced_as_it_runs) {
  for (bool nccl : {true, false}) {
    SCOPED_TRACE(nccl ? "over NCCL" : "over loopback");
    std::vector<Attempt> zero = create_on_gpus(2, nccl, 0, 0);
    uint64_t need = needed(zero[0].message);
    ASSERT_GT(need, 0u) << zero[0].message;
    expect_refused(zero, 0, need);
    // The tables' batch and step buffers always; NCCL's two channels of
    // one ring connection (9,633,792 B each) only over NCCL.
    if (nccl) {
      EXPECT_GT(need, 2u * 9633792) << "NCCL's buffers are counted";
    } else {
      EXPECT_LT(need, 1 * MiB) << "no NCCL over loopback";
      EXPECT_NE(zero[0].message.find("NCCL's estimated 0)"), std::string::npos) << zero[0].message;
    }
    // That need as the reserve passes: its budget is smaller, so its
    // window and step message are no larger. The node reports what it
    // checked, and a byte below that is refused (a byte more budget never
    // needs less).
    std::vector<Attempt> enough = create_on_gpus(2, nccl, need, 0);
    const uint64_t at = enough[0].buffers;
    for (const Attempt &a : enough) {
      EXPECT_EQ(a.status, KVS_OK) << "a reserve of the buffers holds them: " << a.message;
      EXPECT_EQ(a.buffers, at) << "every rank alike";
      EXPECT_EQ(a.nccl > 0, nccl);
    }
    EXPECT_LE(at, need);
    EXPECT_GT(at, need - 4096) << "a smaller window, a slightly smaller step message";
    std::vector<Attempt> under = create_on_gpus(2, nccl, at - 1, 0);
    const uint64_t need_under = needed(under[0].message);
    EXPECT_GE(need_under, at) << under[0].message;
    expect_refused(under, at - 1, need_under);
    std::vector<Attempt> exact = create_on_gpus(2, nccl, need_under, 0);
    EXPECT_EQ(exact[0].status, KVS_OK) << exact[0].message;
    // An explicit budget is the carve's own bytes: nothing is asked of it.
    for (const Attempt &a : create_on_gpus(2, nccl, 0, 12 * MiB)) {
      EXPECT_EQ(a.status, KVS_OK) << a.message;
      EXPECT_GT(a.buffers, 0u) << "priced all the same (for its own, smaller window)";
    }
  }
  expect_no_violations();
}

// The host twin over loopback puts nothing on a GPU: a nominal budget
// (the bundled H200's memory x 0.0001) with no reserve at all passes.
TEST(NodeStandin, the_host_twin_puts_nothing_beside_its_carve) {
  for (const Attempt &a : create_on_gpus(2, false, 0, 0, KVS_NODE_DEVICE_CPU, 0.0001)) {
    EXPECT_EQ(a.status, KVS_OK) << a.message;
    EXPECT_EQ(a.buffers, 0u);
  }
  expect_no_violations();
}

// Issue 33 §7: a node in an engine rank whose device is known measures
// only that device. On a live machine of four GPUs of the stand-in, a rank
// on device 2 creates a context there and on no other GPU, whether the
// node reads the machine from the ranks' host names (hosts 0) or as a
// described host ("live" with hosts 1, which opened it as a planner does,
// measuring every GPU). (Its budget is given: a measured one would price
// the GPUs no rank runs on from their model, which the stand-in's is not.)
TEST(NodeStandin, a_rank_on_a_known_device_makes_no_context_on_other_gpus) {
  for (size_t hosts : {size_t{0}, size_t{1}}) {
    SCOPED_TRACE("hosts " + std::to_string(hosts));
    kvs_standin::Config c;
    c.devices = 4;
    c.seed = 3;
    kvs_standin::reset(c);
    kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
      kvs_geometry g = kvs_test::small_model();
      kvs_node_options o;
      kvs_node_options_init(&o);
      o.geometry = &g;
      o.swa_ratio = 0.04;
      o.max_seq_len = 4096;
      o.max_running = 4;
      o.radix = false;
      o.tp = 1;
      o.topology = "live";
      o.hosts = hosts;
      o.device = KVS_NODE_DEVICE_CUDA;
      o.cuda_device = 2;
      o.bind_numa = false;
      o.local_rank = KVS_NODE_UNCHECKED;
      o.budget_bytes = 12 * MiB;
      kvs_node_t node = nullptr;
      kvs_error err;
      ASSERT_EQ(kvs_node_create(comm, &o, &node, &err), KVS_OK) << err.message;
      EXPECT_EQ(kvs_node_cuda_device(node), 2);
      kvs_node_destroy(node);
    });
    for (int d = 0; d < 4; d++) {
      EXPECT_EQ(kvs_standin::contexts_created(d), d == 2 ? 1 : 0) << "device " << d;
    }
    expect_no_violations();
  }
}

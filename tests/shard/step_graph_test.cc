// The node's step as an engine runs it on a GPU, on the CPU stand-in for
// CUDA and NCCL: 4 ranks as threads, each with device tables on its own
// GPU and an NCCL communicator (bootstrapped over loopback), an engine
// stream per rank handed to the node, and the tables' device work of each
// step parity captured once as a CUDA graph and replayed. For 120 steps of
// a seeded workload every rank's ring contexts and ring locations, read on
// the engine's stream after the step's event, equal the CPU reference (the
// window pool's own); the ranks agree at every check; the tables' stream
// is never synchronised with the host by a step (the stand-in's counters:
// a step may not wait on it, poll it, or copy pageable memory on it, which
// would also have invalidated the capture). The communicator's stream is
// waited on by every rank at every step (its broadcast's readback is polled
// until it lands): those polls are counted and printed too. The last line
// says what ran: "host syncs per step S on the tables' stream, Q polls of
// the communicator's stream, graph replays G, ranks R". No step loads a
// kernel (the stand-in's lazy loading): the tables loaded them at create.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <vector>

#include "core/geometry.h"
#include "shard/comm.h"
#include "shard/comm_nccl.h"
#include "shard/node.h"
#include "tests/shard/ranks.h"
#include "tests/shard/small_model.h"
#include "tests/standin/standin.h"
#include "tools/workload.h"

namespace {

constexpr int kRanks = 4;
constexpr uint64_t kSteps = 120;
constexpr uint64_t kCheckEvery = 30;
constexpr uint64_t MiB = 1ull << 20;

std::atomic<uint64_t> g_step_syncs{0};
std::atomic<uint64_t> g_comm_polls{0};
std::atomic<uint64_t> g_steps{0};
std::atomic<uint64_t> g_replays{0};
std::atomic<int> g_ranks{0};

using kvs_test::small_model;

// The step's results, read back as an engine's kernel would see them: on
// the engine's stream, after the step's event.
struct HostRows {
  std::vector<int64_t> own, prev, ring, csa, hca;
};

void read_back(const kvs_node_step_info &r, cudaEvent_t done, cudaStream_t engine, int64_t *pinned,
               HostRows *out) {
  size_t n = r.ring.n_req, page = r.ring.page;
  out->own.assign(n, 0);
  out->prev.assign(n, 0);
  out->ring.assign(n * page, 0);
  out->csa.assign(n, 0);
  out->hca.assign(n, 0);
  if (n == 0) return;
  ASSERT_EQ(cudaStreamWaitEvent(engine, done, 0), cudaSuccess);
  int64_t *at = pinned;
  const int64_t *from[] = {r.ring.own, r.ring.prev, r.ring.csa_loc, r.ring.hca_loc, r.ring.ring};
  const size_t rows[] = {n, n, n, n, n * page};
  for (int k = 0; k < 5; k++) {
    ASSERT_EQ(
        cudaMemcpyAsync(at, from[k], rows[k] * sizeof(int64_t), cudaMemcpyDeviceToHost, engine),
        cudaSuccess);
    at += rows[k];
  }
  ASSERT_EQ(cudaStreamSynchronize(engine), cudaSuccess);
  at = pinned;
  std::vector<int64_t> *to[] = {&out->own, &out->prev, &out->csa, &out->hca, &out->ring};
  for (int k = 0; k < 5; k++) {
    std::copy(at, at + rows[k], to[k]->begin());
    at += rows[k];
  }
}

void run_rank(int rank, kvs_comm_t boot) {
  ASSERT_EQ(cudaSetDevice(rank), cudaSuccess);
  cudaStream_t engine = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_nccl_bootstrap(boot, rank, 20000, 20000, &comm, &err), KVS_OK) << err.message;
  kvs_geometry g = small_model();
  kvs_workload_options wo = KVS_WORKLOAD_OPTIONS_INIT;
  wo.seed = 17;
  wo.max_running = 6;
  wo.arrival_rate = 0.5;
  wo.prompt_max = 600;
  wo.gen_max = 200;
  kvs_node_options o;
  kvs_node_options_init(&o);
  o.geometry = &g;
  o.swa_ratio = 0.04;
  o.max_seq_len = kvs_workload_max_seq_len(&wo);
  o.max_running = wo.max_running;
  o.radix = false;
  o.tp = kRanks;
  o.topology = "bundled";
  o.device = KVS_NODE_DEVICE_CUDA;
  o.cuda_device = rank;
  o.check_every = 0;  // checks are the test's, outside the measured steps
  o.budget_bytes = 12 * MiB;
  o.bind_numa = false;
  o.local_rank = KVS_NODE_UNCHECKED;
  o.stream = engine;
  o.cuda_graphs = true;
  kvs_node_t node = nullptr;
  ASSERT_EQ(kvs_node_create(comm, &o, &node, &err), KVS_OK) << err.message;
  // Every kernel was loaded at create: none loads at a step (lazy loading
  // would load it at its first launch, a wait on the whole context).
  const uint64_t loads_at_create = kvs_standin::lazy_loads(rank);
  kvs_workload_t w = nullptr;
  ASSERT_EQ(kvs_workload_create(kvs_node_shard(node), &wo, &w, &err), KVS_OK) << err.message;
  int64_t *pinned = nullptr;
  size_t pinned_rows = o.max_running * (4 + o.page);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void **>(&pinned), pinned_rows * sizeof(int64_t)),
            cudaSuccess);
  cudaStream_t tables = nullptr;
  uint64_t syncs = 0, polls = 0;
  // The communicator's stream, which every rank's broadcast polls until
  // the step's message has landed: host waits too, counted apart.
  void *comm_stream = nullptr;
  int comm_device = -1;
  ASSERT_EQ(kvs_comm_device_stream(comm, &comm_stream, &comm_device, &err), KVS_OK) << err.message;
  cudaStream_t comm_s = static_cast<cudaStream_t>(comm_stream);
  for (uint64_t s = 0; s < kSteps; s++) {
    ASSERT_EQ(kvs_workload_schedule(w, s, &err), KVS_OK) << err.message;
    kvs_ring_batch batch;
    kvs_workload_batch(w, &batch);
    kvs_node_step_info r;
    uint64_t before = tables != nullptr ? kvs_standin::host_syncs(tables) : 0;
    uint64_t polls_before = kvs_standin::host_syncs(comm_s);
    ASSERT_EQ(kvs_node_step_rows(node, &batch, false, &r, &err), KVS_OK)
        << "rank " << rank << " step " << s << ": " << err.message;
    ASSERT_TRUE(r.ring.on_device);
    void *event = r.event;
    ASSERT_NE(event, nullptr) << "a device step hands out its event";
    if (tables == nullptr) {
      tables = kvs_standin::stream_of_event(static_cast<cudaEvent_t>(event));
      ASSERT_NE(tables, nullptr);
      ASSERT_NE(tables, engine) << "the tables run on a stream of their own";
    } else {
      syncs += kvs_standin::host_syncs(tables) - before;
      polls += kvs_standin::host_syncs(comm_s) - polls_before;
    }
    HostRows rows;
    read_back(r, static_cast<cudaEvent_t>(event), engine, pinned, &rows);
    EXPECT_EQ(kvs_workload_verify_ring(w, rows.own.data(), rows.prev.data(), rows.ring.data(),
                                       batch.n_req, &err),
              KVS_OK)
        << "rank " << rank << " step " << s << ": " << err.message;
    EXPECT_EQ(kvs_workload_verify_state(w, rows.csa.data(), rows.hca.data(), batch.n_req, &err),
              KVS_OK)
        << "rank " << rank << " step " << s << ": " << err.message;
    kvs_workload_advance(w);
    if ((s + 1) % kCheckEvery == 0) {
      kvs_shard_report report;
      EXPECT_EQ(kvs_node_check_report(node, &report, &err), KVS_OK) << err.message;
      EXPECT_EQ(report.kind, KVS_SHARD_AGREE);
    }
  }
  kvs_workload_counters c;
  kvs_workload_counters_get(w, &c);
  EXPECT_GT(c.admitted, 2u);
  EXPECT_GT(c.contexts, kSteps);
  EXPECT_EQ(kvs_standin::lazy_loads(rank) - loads_at_create, 0u)
      << "rank " << rank << ": a step loaded a kernel its table's create did not";
  EXPECT_GE(polls, kSteps - 1) << "rank " << rank << ": a step's broadcast went unpolled";
  g_step_syncs += syncs;
  g_comm_polls += polls;
  g_steps += kSteps - 1;  // the first step found the stream
  g_ranks++;
  kvs_workload_destroy(w);
  kvs_node_destroy(node);
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(engine), cudaSuccess);
  kvs_comm_destroy(comm);
}

}  // namespace

TEST(StepGraph, four_ranks_replay_each_parity_graph_with_no_host_sync_on_the_tables) {
  kvs_standin::Config c;
  c.devices = kRanks;
  c.seed = 11;
  kvs_standin::reset(c);
  kvs_test::run_ranks(kRanks, 30000, [](int rank, kvs_comm_t boot) { run_rank(rank, boot); });
  kvs_standin::Stats st = kvs_standin::stats();
  g_replays = st.graph_launches;
  EXPECT_EQ(g_step_syncs.load(), 0u) << "a step synchronised the host with the tables' stream";
  EXPECT_EQ(st.captures, 2u * kRanks) << "each rank captures each parity once";
  EXPECT_EQ(st.graph_launches, kSteps * kRanks) << "every step of every rank replays its graph";
  for (const std::string &v : kvs_standin::violations()) ADD_FAILURE() << v;
}

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  std::fflush(stderr);
  uint64_t steps = g_steps.load();
  std::printf(
      "host syncs per step %g on the tables' stream, %.1f polls of the communicator's stream, "
      "graph replays %llu, ranks %d\n",
      steps > 0 ? static_cast<double>(g_step_syncs.load()) / static_cast<double>(steps) : -1.0,
      steps > 0 ? static_cast<double>(g_comm_polls.load()) / static_cast<double>(steps) : -1.0,
      static_cast<unsigned long long>(g_replays.load()), g_ranks.load());
  std::fflush(stdout);
  return rc;
}

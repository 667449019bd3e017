// The node on CPU: ranks as threads over the loopback backend, the host
// twin as the tables. Every rank's plan is the plan kvplan makes for the
// same inputs, the tables follow the pool through a workload and give the
// pool's own ring contexts, and failures on one rank fail every rank
// naming it.
#include "shard/node.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "core/geometry.h"
#include "tests/backends/cuda/gpu_gate.h"
#include "topology/cuda_probe.h"
#include "plan/node_setup.h"
#include "tools/workload.h"
#include "tests/shard/ranks.h"
#include "plan/deployment.h"
#include "topology/source.h"

using kvs_test::run_ranks;

namespace {

constexpr uint64_t MiB = 1ull << 20;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

kvs_geometry flash() {
  kvs_geometry g;
  EXPECT_EQ(kvs_geometry_builtin("dsv4-flash", &g, nullptr), KVS_OK);
  return g;
}

// A node over the bundled 8-GPU server with small explicit budgets, the
// host twin, and the sizing kvsim uses.
kvs_node_options default_options() {
  kvs_node_options o;
  kvs_node_options_init(&o);
  return o;
}

struct NodeSetup {
  kvs_geometry geometry = flash();
  std::vector<uint64_t> budgets;
  kvs_workload_options workload = KVS_WORKLOAD_OPTIONS_INIT;
  kvs_node_options options = default_options();

  NodeSetup(int tp, int pp, std::vector<uint64_t> per_gpu) : budgets(std::move(per_gpu)) {
    workload.seed = 7;
    workload.arrival_rate = 0.3;
    workload.prompt_max = 1536;
    options.geometry = &geometry;
    options.swa_ratio = 0.04;
    options.max_seq_len = kvs_workload_max_seq_len(&workload);
    options.max_running = workload.max_running;
    options.tp = tp;
    options.pp = pp;
    options.topology = "bundled";
    options.device = KVS_NODE_DEVICE_CPU;
    options.check_every = 16;
    options.budget_per_gpu = budgets.data();
    options.n_budget_per_gpu = budgets.size();
  }
};

std::vector<uint64_t> skewed(uint64_t base_mib) {
  std::vector<uint64_t> b;
  for (int g = 0; g < 8; g++) b.push_back((base_mib - 7 * (g % 4)) * MiB);
  return b;
}

// The plan kvplan makes: the same steps, no node.
kvs_deployment_t kvplan_plan(const NodeSetup &s) {
  kvs_topology_t topo = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_host_topology_open("bundled", &topo, nullptr, 0, &err), KVS_OK) << err.message;
  uint64_t floor = 0;
  EXPECT_EQ(kvs_cost_window_floor_pages(s.options.max_seq_len, s.options.max_running,
                                        s.options.radix, s.options.page, &floor, &err),
            KVS_OK);
  // kvplan's widths: bf16 rows, rings per request, one slot per running
  // request and the dummy (the node's default too).
  kvs_row_widths widths = kvs_row_widths_default(&s.geometry);
  widths.state_rings = KVS_STATE_RINGS_PER_REQUEST;
  widths.n_req_slots = s.options.max_running + 1;
  kvs_plan_request req{&s.geometry, &widths, s.options.swa_ratio,  s.options.page,
                       floor,       1,       (size_t)s.options.tp, (size_t)s.options.pp,
                       nullptr,     nullptr};
  kvs_deployment_t plan = nullptr;
  EXPECT_EQ(kvs_deployment_make(&req, kvs_topology_gpus(topo), kvs_topology_gpu_count(topo),
                                s.budgets.data(), &plan, nullptr, &err),
            KVS_OK)
      << err.message;
  kvs_topology_destroy(topo);
  return plan;
}

// Runs the workload on a node for `steps`, verifying every step's ring
// contexts against the pool; returns the final binding digest.
uint64_t run_workload(kvs_node_t node, const kvs_workload_options &wo, uint64_t steps) {
  kvs_error err;
  kvs_workload_t w = nullptr;
  EXPECT_EQ(kvs_workload_create(kvs_node_shard(node), &wo, &w, &err), KVS_OK) << err.message;
  if (w == nullptr) return 0;
  for (uint64_t s = 0; s < steps; s++) {
    EXPECT_EQ(kvs_workload_schedule(w, s, &err), KVS_OK) << err.message;
    kvs_ring_batch batch;
    kvs_workload_batch(w, &batch);
    kvs_node_step_info r;
    EXPECT_EQ(kvs_node_step_rows(node, &batch, true, &r, &err), KVS_OK)
        << "rank " << kvs_node_rank(node) << " step " << s << ": " << err.message;
    const int64_t *own, *prev, *ring;
    size_t n = 0;
    EXPECT_EQ(kvs_node_host_ring(node, &own, &prev, &ring, &n, &err), KVS_OK);
    EXPECT_EQ(n, batch.n_req);
    EXPECT_EQ(kvs_workload_verify_ring(w, own, prev, ring, n, &err), KVS_OK)
        << "rank " << kvs_node_rank(node) << " step " << s << ": " << err.message;
    kvs_workload_advance(w);
    if (kvs_shard_check_due(kvs_node_shard(node), s)) {
      EXPECT_EQ(kvs_node_check_report(node, nullptr, &err), KVS_OK) << err.message;
    }
  }
  kvs_workload_counters c;
  kvs_workload_counters_get(w, &c);
  EXPECT_GT(c.admitted, 5u);
  kvs_workload_destroy(w);
  return kvs_window_pool_digest(kvs_node_pool(node));
}

}  // namespace

// tp 4 x pp 2 over the bundled server with skewed budgets: every rank runs
// the plan kvplan prints (its layers, its pool bytes, padding included),
// the host twin follows the pool for 300 steps and its ring contexts are
// the pool's own, and the ranks agree.
TEST(Node, eight_ranks_run_the_plan_kvplan_prints_and_agree) {
  NodeSetup s(4, 2, skewed(900));
  kvs_deployment_t expected = kvplan_plan(s);
  ASSERT_NE(expected, nullptr);
  std::vector<uint64_t> digests(8);
  run_ranks(8, 20000, [&](int rank, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    kvs_deployment_t plan = kvs_deployment(node);
    EXPECT_EQ(kvs_deployment_split(plan)->num_pages, kvs_deployment_split(expected)->num_pages);
    for (size_t r = 0; r < kvs_deployment_rank_count(expected); r++) {
      const kvs_rank_plan *a = kvs_deployment_rank(plan, r), *b = kvs_deployment_rank(expected, r);
      EXPECT_EQ(a->gpu, b->gpu);
      EXPECT_EQ(a->first, b->first);
      EXPECT_EQ(a->end, b->end);
      EXPECT_EQ(a->device.total_bytes, b->device.total_bytes);
      EXPECT_EQ(a->budget_bytes, b->budget_bytes);
    }
    const kvs_rank_plan *mine = kvs_node_rank_plan(node);
    EXPECT_EQ(mine->rank, (size_t)rank);
    EXPECT_EQ(kvs_node_layout(node)->total_bytes, mine->device.total_bytes)
        << "the tables carve what the plan priced, byte for byte";
    EXPECT_EQ(kvs_node_gpu(node)->index, mine->gpu);
    EXPECT_EQ(kvs_table_kind_of(kvs_node_table(node)), KVS_TABLE_HOST);
    EXPECT_FALSE(kvs_node_binding(node)->cpu_bound) << "the bundled server is not this machine";
    EXPECT_TRUE(contains(kvs_node_binding(node)->reason, "not")) << kvs_node_binding(node)->reason;
    EXPECT_EQ(kvs_node_gpu_budgets(node)[3].budget_bytes, s.budgets[3]);
    digests[rank] = run_workload(node, s.workload, 300);
    kvs_shard_report report;
    EXPECT_EQ(kvs_node_check_report(node, &report, &err), KVS_OK) << err.message;
    kvs_node_stats st;
    kvs_node_stats_get(node, &st);
    EXPECT_EQ(st.steps, 300u);
    EXPECT_GT(st.broadcast_ns, 0u);
    EXPECT_GT(st.ring_ns, 0u);
    kvs_node_destroy(node);
  });
  for (int r = 1; r < 8; r++) EXPECT_EQ(digests[r], digests[0]) << "rank " << r;
  kvs_deployment_destroy(expected);
}

// A skewed stage (one GPU of stage 1 much smaller) moves layers to stage 0:
// the node runs the optimal split, not the even one.
TEST(Node, heterogeneous_budgets_split_the_layers_unevenly) {
  std::vector<uint64_t> b(8, 1200 * MiB);
  b[5] = 700 * MiB;
  NodeSetup s(4, 2, b);
  run_ranks(8, 20000, [&](int rank, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const kvs_split *split = kvs_deployment_split(kvs_deployment(node));
    size_t stage0 = split->stages[0].end - split->stages[0].first;
    EXPECT_GT(stage0, 22u) << "stage 1 holds the small GPU, so stage 0 takes more layers";
    const kvs_rank_plan *mine = kvs_node_rank_plan(node);
    EXPECT_EQ(mine->first, rank < 4 ? 0u : stage0);
    kvs_node_destroy(node);
  });
}

TEST(Node, a_rank_that_cannot_hold_the_minimal_pool_fails_every_rank_naming_it) {
  std::vector<uint64_t> b(8, 900 * MiB);
  b[6] = 16 * MiB;
  NodeSetup s(4, 2, b);
  std::mutex m;
  std::vector<std::string> messages;
  run_ranks(8, 20000, [&](int, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    EXPECT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_ERR_BUDGET_TOO_SMALL);
    EXPECT_EQ(node, nullptr);
    std::lock_guard<std::mutex> lock(m);
    messages.push_back(err.message);
  });
  ASSERT_EQ(messages.size(), 8u);
  for (const std::string &msg : messages) {
    EXPECT_EQ(msg, messages[0]) << "every rank reports the same error";
  }
  EXPECT_TRUE(contains(messages[0], "GPU 6 (0000:d1:00.0, rank 6, stage 1, layers "))
      << messages[0];
}

// Ranks given other geometries or layouts fail at create, naming the rank,
// instead of agreeing on digests of different pools.
TEST(Node, a_rank_with_another_geometry_fails_every_rank_naming_it) {
  NodeSetup s(2, 1, std::vector<uint64_t>(8, 900 * MiB));
  kvs_geometry other = s.geometry;
  other.n_layers = 4;
  other.n_ratios = 4;
  std::mutex m;
  std::vector<std::string> messages;
  run_ranks(2, 20000, [&](int rank, kvs_comm_t comm) {
    kvs_node_options o = s.options;
    if (rank == 1) o.geometry = &other;
    kvs_node_t node = nullptr;
    kvs_error err;
    EXPECT_EQ(kvs_node_create(comm, &o, &node, &err), KVS_ERR_INVALID_ARGUMENT);
    std::lock_guard<std::mutex> lock(m);
    messages.push_back(err.message);
  });
  for (const std::string &msg : messages) {
    EXPECT_TRUE(contains(msg, "rank 1 was given other options than the leader")) << msg;
  }
}

TEST(Node, a_layout_that_is_not_the_communicator_is_refused_on_every_rank) {
  NodeSetup s(4, 1, std::vector<uint64_t>(8, 900 * MiB));
  std::atomic<int> refused{0};
  run_ranks(2, 20000, [&](int, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    EXPECT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "tp 4 x pp 1 must equal the communicator's 2 ranks"))
        << err.message;
    refused++;
  });
  EXPECT_EQ(refused.load(), 2);
}

TEST(Node, cuda_tables_without_a_gpu_are_refused_saying_why) {
  NodeSetup s(1, 1, std::vector<uint64_t>(8, 900 * MiB));
  s.options.device = KVS_NODE_DEVICE_CUDA;
  // Runs where CUDA (the backend beside the test) says there is no GPU,
  // skips where it sees one, fails where it cannot be asked.
  const kvs_gpu_gate::Answer cuda = kvs_gpu_gate::probe();
  KVS_NEED_NO_GPU(cuda);
  run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    EXPECT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_ERR_UNSUPPORTED);
    EXPECT_TRUE(contains(err.message, "device cuda asked for, but no CUDA device visible"))
        << err.message;
    EXPECT_TRUE(contains(err.message, cuda.why)) << "CUDA's own reason: " << err.message;
  });
}

// A table that misses a step is named by the next check, with its rank and
// the page, although the pools agree.
TEST(Node, a_table_that_falls_behind_its_pool_is_named_by_the_check) {
  NodeSetup s(2, 1, std::vector<uint64_t>(8, 2000 * MiB));
  std::mutex m;
  std::vector<std::string> messages;
  run_ranks(2, 20000, [&](int rank, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    kvs_window_pool_t pool = kvs_node_pool(node);
    uint64_t P = kvs_window_pool_page_size(pool);
    if (rank == 0) {
      std::vector<int64_t> locs(P);
      for (uint64_t i = 0; i < P; i++) locs[i] = (int64_t)(3 * P + i);
      ASSERT_EQ(kvs_window_pool_alloc(pool, locs.data(), locs.size(), nullptr, &err), KVS_OK);
    }
    ASSERT_EQ(kvs_node_step_rows(node, nullptr, true, nullptr, &err), KVS_OK) << err.message;
    if (rank == 1) {
      // Undo the step's bind on this rank's tables only.
      kvs_journal_entry undo = {3, KVS_JOURNAL_FREED};
      ASSERT_EQ(kvs_table_apply(kvs_node_table(node), &undo, nullptr, 1, &err), KVS_OK);
    }
    EXPECT_EQ(kvs_node_check_report(node, nullptr, &err), KVS_ERR_DIVERGENCE);
    std::lock_guard<std::mutex> lock(m);
    messages.push_back(err.message);
    kvs_node_destroy(node);
  });
  ASSERT_EQ(messages.size(), 2u);
  for (const std::string &msg : messages) {
    EXPECT_TRUE(contains(msg, "rank 1's check of the state beside its pool failed")) << msg;
  }
  bool detailed = false;
  for (const std::string &msg : messages) {
    detailed |= contains(msg, "rank 1's tables differ from its pool at full page 3");
  }
  EXPECT_TRUE(detailed) << "rank 1 itself names the page";
}

// A check between the leader's changes and the step that carries them is
// no divergence: the leader's pool is ahead of every mirror and of its own
// tables until then. Every rank refuses it alike (KVS_ERR_PENDING, the
// count named, the report untouched); after the step the same check
// agrees.
TEST(Node, a_check_before_the_step_that_carries_the_leaders_changes_is_refused_on_every_rank) {
  NodeSetup s(2, 1, std::vector<uint64_t>(8, 2000 * MiB));
  std::mutex m;
  std::vector<std::string> messages;
  run_ranks(2, 20000, [&](int rank, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const uint64_t P = kvs_node_page(node);
    std::vector<int64_t> locs(2 * P);
    for (uint64_t i = 0; i < 2 * P; i++) locs[i] = (int64_t)(4 * P + i);
    if (rank == 0) {
      int64_t slot = -1;
      ASSERT_EQ(kvs_node_admit(node, 9, &slot, &err), KVS_OK) << err.message;
      ASSERT_EQ(kvs_node_bind(node, 9, locs.data(), locs.size(), &err), KVS_OK) << err.message;
    }
    kvs_node_report report{};
    report.size = sizeof report;
    report.step = 12345;
    EXPECT_EQ(kvs_node_check(node, &report, &err), KVS_ERR_PENDING) << err.message;
    EXPECT_EQ(report.step, 12345u) << "a refused check leaves the report alone";
    {
      std::lock_guard<std::mutex> lock(m);
      messages.push_back(err.message);
    }
    ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
    EXPECT_EQ(kvs_node_check(node, &report, &err), KVS_OK) << err.message;
    EXPECT_EQ(report.kind, KVS_DIVERGENCE_NONE);
    // A free is a change too; so is a prefix-less finish.
    if (rank == 0) {
      ASSERT_EQ(kvs_node_free(node, locs.data(), locs.size(), &err), KVS_OK) << err.message;
      ASSERT_EQ(kvs_node_finish(node, 9, &err), KVS_OK) << err.message;
    }
    EXPECT_EQ(kvs_node_check(node, nullptr, &err), KVS_ERR_PENDING) << err.message;
    EXPECT_TRUE(contains(err.message, "3 entries pending on the leader")) << err.message;
    EXPECT_TRUE(contains(err.message, "since step 0")) << err.message;
    ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
    EXPECT_EQ(kvs_node_check(node, nullptr, &err), KVS_OK) << err.message;
    kvs_node_destroy(node);
  });
  ASSERT_EQ(messages.size(), 2u);
  for (const std::string &msg : messages) {
    EXPECT_TRUE(contains(msg, "3 entries pending on the leader (rank 0)")) << msg;
    EXPECT_TRUE(contains(msg, "before the first step")) << msg;
    EXPECT_TRUE(contains(msg, "step first, then check")) << msg;
    EXPECT_FALSE(contains(msg, "differ")) << "not a divergence: " << msg;
  }
}

// The engine's page counts: num_pages and window_pages count their dummy
// (the last page), usable_pages does not, and free_window_pages follows
// the leader's binds at once and a follower's from the step; a bind of
// the dummy names it by its page and its locations.
TEST(Node, usable_and_free_window_pages_leave_the_dummy_out) {
  NodeSetup s(2, 1, std::vector<uint64_t>(8, 2000 * MiB));
  run_ranks(2, 20000, [&](int rank, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const uint64_t P = kvs_node_page(node);
    const uint64_t usable = kvs_node_usable_pages(node);
    EXPECT_EQ(usable, kvs_node_num_pages(node) - 1);
    uint64_t droppable = 99;
    const uint64_t free0 = kvs_node_free_window_pages(node, &droppable);
    EXPECT_EQ(free0, kvs_node_window_pages(node) - 1) << "every window page but the dummy";
    EXPECT_EQ(droppable, 0u) << "no prefix cache";
    std::vector<int64_t> last(P), dummy(P);
    for (uint64_t i = 0; i < P; i++) {
      last[i] = (int64_t)((usable - 1) * P + i);
      dummy[i] = (int64_t)(usable * P + i);
    }
    if (rank == 0) {
      int64_t slot = -1;
      ASSERT_EQ(kvs_node_admit(node, 1, &slot, &err), KVS_OK) << err.message;
      EXPECT_EQ(kvs_node_bind(node, 1, dummy.data(), P, &err), KVS_ERR_CONFLICT);
      const std::string want = "full page " + std::to_string(usable) + " (locations " +
                               std::to_string(usable * P) + ".." +
                               std::to_string(usable * P + P - 1) +
                               ") is the reserved dummy page, bound for good; the engine's full "
                               "pages are 0.." +
                               std::to_string(usable - 1);
      EXPECT_TRUE(contains(err.message, want)) << err.message;
      EXPECT_EQ(kvs_node_free(node, dummy.data(), P, &err), KVS_ERR_CONFLICT);
      EXPECT_TRUE(contains(err.message, "full page " + std::to_string(usable) + " (locations"))
          << err.message;
      ASSERT_EQ(kvs_node_bind(node, 1, last.data(), P, &err), KVS_OK) << err.message;
      EXPECT_EQ(kvs_node_free_window_pages(node, nullptr), free0 - 1) << "the leader at once";
    } else {
      EXPECT_EQ(kvs_node_free_window_pages(node, nullptr), free0) << "a follower from the step";
    }
    ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
    EXPECT_EQ(kvs_node_free_window_pages(node, nullptr), free0 - 1);
    kvs_node_destroy(node);
  });
}

// A full window: bind says what is free, that no tail holds any (no
// prefix cache here) and what to do; nothing changes.
TEST(Node, a_full_window_is_refused_saying_what_is_free_and_what_to_do) {
  NodeSetup s(1, 1, std::vector<uint64_t>(8, 2000 * MiB));
  run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
    const uint64_t P = kvs_node_page(node);
    const uint64_t free0 = kvs_node_free_window_pages(node, nullptr);
    std::vector<int64_t> locs((free0 + 1) * P);
    for (size_t i = 0; i < locs.size(); i++) locs[i] = (int64_t)i;
    int64_t slot = -1;
    ASSERT_EQ(kvs_node_admit(node, 2, &slot, &err), KVS_OK) << err.message;
    EXPECT_EQ(kvs_node_bind(node, 2, locs.data(), locs.size(), &err), KVS_ERR_EXHAUSTED);
    const std::string want =
        "kvs_node_bind for request 2: window free list out of slots: it "
        "needs " +
        std::to_string(free0 + 1) + " window pages, " + std::to_string(free0) + " are free (of " +
        std::to_string(free0) + " the engine can bind); no prefix cache holds any";
    EXPECT_TRUE(contains(err.message, want)) << err.message;
    EXPECT_EQ(kvs_node_free_window_pages(node, nullptr), free0) << "nothing taken";
    kvs_node_destroy(node);
  });
}

// The node's memory in place: one view per span with regions, shaped and
// typed as the layout carves it, the mapping live (it reads what the
// step bound), and tier memory an engine writes stays written.
TEST(Node, views_show_the_carve_as_the_kernels_see_it) {
  for (kvs_kv_dtype dtype : {KVS_KV_BF16, KVS_KV_FP8}) {
    NodeSetup s(1, 1, std::vector<uint64_t>(8, 2000 * MiB));
    s.options.kv_dtype = dtype;
    run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
      kvs_node_t node = nullptr;
      kvs_error err;
      ASSERT_EQ(kvs_node_create(comm, &s.options, &node, &err), KVS_OK) << err.message;
      const kvs_device_layout *layout = kvs_node_layout(node);
      std::vector<std::string> names;
      size_t n = kvs_node_view_count(node);
      for (size_t i = 0; i < n; i++) {
        kvs_node_view v = {};
        v.size = sizeof v;
        ASSERT_EQ(kvs_node_view_at(node, i, &v, &err), KVS_OK) << err.message;
        names.push_back(v.name);
        EXPECT_FALSE(v.on_device);
        EXPECT_EQ(v.device, -1);
        const kvs_device_span *span = nullptr;
        for (const kvs_device_span &sp : layout->spans) {
          if (sp.offset == v.offset && sp.count > 0) span = &sp;
        }
        ASSERT_NE(span, nullptr) << v.name;
        uint64_t e = kvs_view_dtype_bytes(v.dtype);
        if (span->tier == KVS_DEVICE_TIER_MAPPING) {
          EXPECT_EQ(v.dtype, KVS_VIEW_INT64);
          EXPECT_EQ(v.ndim, 1);
          EXPECT_EQ(uint64_t(v.shape[0]), layout->sizes.full_token + 1);
          continue;
        }
        EXPECT_EQ(v.ndim, 3) << v.name;
        EXPECT_EQ(uint64_t(v.shape[0]), span->count) << v.name;
        EXPECT_EQ(uint64_t(v.strides[0]) * e, span->stride) << v.name;
        bool state =
            span->tier == KVS_DEVICE_TIER_STATE || span->tier == KVS_DEVICE_TIER_INDEX_STATE;
        if (dtype == KVS_KV_FP8 && !state) {
          // Pages of payloads then scales: the view is the pages' bytes,
          // each page a whole number of the tier's quantum (576 B for KV).
          EXPECT_EQ(v.dtype, KVS_VIEW_UINT8) << v.name;
          uint64_t quantum = span->tier == KVS_DEVICE_TIER_INDEXER ? 16u : 576u;
          uint64_t row = span->tier == KVS_DEVICE_TIER_INDEXER ? 132u : 584u;
          EXPECT_EQ(uint64_t(v.shape[2]) % quantum, 0u) << v.name;
          EXPECT_GE(uint64_t(v.shape[2]), span->page_rows * row) << v.name;
          EXPECT_EQ(uint64_t(v.shape[1]) * span->page_rows,
                    (span->rows + span->scratch_rows + span->page_rows - 1) / span->page_rows *
                        span->page_rows)
              << v.name;
          EXPECT_EQ(uint64_t(v.strides[1]), uint64_t(v.shape[2])) << v.name;
        } else {
          EXPECT_EQ(uint64_t(v.shape[1]), span->rows + span->scratch_rows) << v.name;
          EXPECT_EQ(uint64_t(v.shape[2]) * e, span->row_bytes) << v.name;
          EXPECT_EQ(v.dtype, state ? KVS_VIEW_FP32 : KVS_VIEW_BF16) << v.name;
        }
        // The last byte of the last row is the node's to hand out.
        EXPECT_LE(v.offset + v.bytes, layout->tiers_end) << v.name;
        unsigned char *last = static_cast<unsigned char *>(v.data) + v.bytes - 1;
        *last = 0x5a;
        EXPECT_EQ(*last, 0x5a);
      }
      EXPECT_EQ(names,
                (std::vector<std::string>{"mapping", "window", "compressed_4", "compressed_128",
                                          "indexer", "state_4", "state_128", "index_state"}));
      // The mapping is the live table: a step's binding shows there.
      kvs_node_view map = {};
      map.size = sizeof map;
      ASSERT_EQ(kvs_node_view_at(node, 0, &map, &err), KVS_OK);
      uint64_t P = kvs_node_page(node);
      std::vector<int64_t> locs(P);
      for (uint64_t i = 0; i < P; i++) locs[i] = int64_t(5 * P + i);
      int64_t slot = -1;
      ASSERT_EQ(kvs_node_admit(node, 1, &slot, &err), KVS_OK) << err.message;
      ASSERT_EQ(kvs_node_bind(node, 1, locs.data(), P, &err), KVS_OK) << err.message;
      EXPECT_EQ(static_cast<const int64_t *>(map.data)[5 * P], -1) << "not before the step";
      ASSERT_EQ(kvs_node_step(node, nullptr, nullptr, &err), KVS_OK) << err.message;
      std::vector<int64_t> window(P);
      ASSERT_EQ(kvs_node_translate(node, locs.data(), P, window.data(), &err), KVS_OK);
      for (uint64_t i = 0; i < P; i++) {
        ASSERT_GE(window[i], 0);
        ASSERT_EQ(static_cast<const int64_t *>(map.data)[5 * P + i], window[i]) << i;
      }
      // Past the views, and a view of another size, are refused.
      kvs_node_view v = {};
      v.size = sizeof v;
      EXPECT_EQ(kvs_node_view_at(node, n, &v, &err), KVS_ERR_OUT_OF_RANGE);
      EXPECT_TRUE(contains(err.message, "view 8 of a node with 8 views")) << err.message;
      v.size = sizeof v - 8;
      EXPECT_EQ(kvs_node_view_at(node, 0, &v, &err), KVS_ERR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(err.message, "view.size")) << err.message;
      kvs_node_destroy(node);
    });
  }
}

// The host twin stands for the device: a layout the device tables refuse
// (regions aligned below 256 bytes) is refused by the twin too.
TEST(HostTable, refuses_what_the_device_tables_refuse) {
  kvs_geometry g = flash();
  kvs_pool_sizes sizes;
  kvs_error err;
  ASSERT_EQ(kvs_pool_sizes_compute(64, &g, 0.5, 128, 1, &sizes, &err), KVS_OK) << err.message;
  kvs_device_layout_options lo = KVS_DEVICE_LAYOUT_OPTIONS_INIT;
  lo.alignment = 1;
  kvs_device_layout layout;
  ASSERT_EQ(kvs_device_layout_build(&g, 0, g.n_layers, nullptr, &sizes, &lo, &layout, &err), KVS_OK)
      << err.message;
  kvs_table_limits limits = {4, 8};
  kvs_table_t t = nullptr;
  EXPECT_EQ(kvs_table_create_host(&layout, &limits, &t, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "alignment")) << err.message;
  EXPECT_EQ(t, nullptr);
  lo.alignment = 256;
  ASSERT_EQ(kvs_device_layout_build(&g, 0, g.n_layers, nullptr, &sizes, &lo, &layout, &err),
            KVS_OK);
  ASSERT_EQ(kvs_table_create_host(&layout, &limits, &t, &err), KVS_OK) << err.message;
  kvs_table_destroy(t);
}

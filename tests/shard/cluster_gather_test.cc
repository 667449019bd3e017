// The cluster a group of ranks learns from itself: ranks as threads over the
// loopback backend, each naming a host and reading its own machine's
// topology (two different 8-GPU servers, and a 16-GPU DGX-2). Every rank
// must end with the same GPU list, each node's exactly as its own ranks read
// it, or every rank must fail with the same message naming the rank at
// fault. Then the node: ranks placed out of node order are refused.
#include "shard/cluster_gather.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/geometry.h"
#include "shard/node.h"
#include "plan/node_setup.h"
#include "tools/workload.h"
#include "tests/shard/ranks.h"

using kvs_test::run_ranks;

namespace {

constexpr const char *kEpyc = "tests/data/epyc-nps2-numa-per-pair-8gpu.xml";
constexpr const char *kDgx2 = "tests/data/nvidiaDGX2.xml";
constexpr const char *kSmall = "tests/data/24em64t-2n6c2t-pci.xml";  // 3 GPUs

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// What each rank passes.
struct RankInput {
  const char *host;
  const char *topology;
  size_t nodes = 0;
};

// What each rank got.
struct RankOutput {
  kvs_status status = KVS_OK;
  std::string message;
  std::vector<kvs_gpu_info> gpus;
  std::vector<std::string> labels;
  std::vector<size_t> host_gpus;
  size_t own_host = 0;
  std::vector<bool> loaded;  // whether each node has its topology here
};

std::vector<RankOutput> gather(const std::vector<RankInput> &in) {
  std::vector<RankOutput> out(in.size());
  run_ranks(static_cast<int>(in.size()), 10000, [&](int r, kvs_comm_t comm) {
    kvs_cluster_t cluster = nullptr;
    kvs_error err;
    kvs_error_clear(&err);
    RankOutput &o = out[static_cast<size_t>(r)];
    o.status = kvs_cluster_gather(comm, in[r].topology, in[r].nodes, in[r].host, &cluster, nullptr,
                                  0, &err);
    o.message = err.message;
    if (o.status != KVS_OK) {
      EXPECT_EQ(cluster, nullptr);
      return;
    }
    const kvs_gpu_info *g = kvs_cluster_gpus(cluster);
    o.gpus.assign(g, g + kvs_cluster_gpu_count(cluster));
    for (size_t k = 0; k < kvs_cluster_host_count(cluster); k++) {
      o.labels.push_back(kvs_cluster_host_label(cluster, k));
      o.host_gpus.push_back(kvs_cluster_host_gpu_count(cluster, k));
      o.loaded.push_back(kvs_cluster_host(cluster, k) != nullptr);
    }
    o.own_host = kvs_cluster_own_host(cluster);
    kvs_cluster_destroy(cluster);
  });
  return out;
}

std::vector<kvs_gpu_info> read_gpus(const char *spec) {
  kvs_topology_t topo = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_host_topology_open(spec, &topo, nullptr, 0, &err), KVS_OK) << err.message;
  std::vector<kvs_gpu_info> gpus;
  if (topo == nullptr) return gpus;
  const kvs_gpu_info *g = kvs_topology_gpus(topo);
  gpus.assign(g, g + kvs_topology_gpu_count(topo));
  kvs_topology_destroy(topo);
  return gpus;
}

void expect_same_gpu(const kvs_gpu_info &got, const kvs_gpu_info &want, size_t index, size_t node) {
  EXPECT_EQ(got.index, index);
  EXPECT_EQ(got.host, node);
  EXPECT_EQ(kvs_pci_address_compare(&got.pci, &want.pci), 0);
  EXPECT_STREQ(got.pci_busid, want.pci_busid);
  EXPECT_EQ(got.vendor_id, want.vendor_id);
  EXPECT_EQ(got.device_id, want.device_id);
  EXPECT_STREQ(got.model, want.model);
  EXPECT_EQ(got.numa_node, want.numa_node);
  EXPECT_EQ(got.package, want.package);
  EXPECT_STREQ(got.cpuset, want.cpuset);
  EXPECT_EQ(got.in_topology, want.in_topology);
  EXPECT_EQ(got.cuda_device, want.cuda_device);
  EXPECT_EQ(got.free_bytes, want.free_bytes);
  EXPECT_EQ(got.total_bytes, want.total_bytes);
}

// Every rank failed with the same status and message, which names `part`.
void expect_all_fail(const std::vector<RankOutput> &out, kvs_status status,
                     const std::string &part) {
  for (size_t r = 0; r < out.size(); r++) {
    EXPECT_EQ(out[r].status, status) << "rank " << r << ": " << out[r].message;
    EXPECT_EQ(out[r].message, out[0].message) << "rank " << r;
    EXPECT_TRUE(contains(out[r].message, part)) << out[r].message;
  }
}

}  // namespace

// Three machines of three shapes, their ranks in blocks: every rank holds
// every node's GPUs exactly as that node's ranks read them, in the order of
// the nodes' lowest ranks, and only its own node's topology.
TEST(ClusterGather, ranks_on_three_machines_learn_every_machines_gpus) {
  // One rank per GPU on the first two; the last machine may keep GPUs idle.
  std::vector<RankInput> in(8, RankInput{"gpu-a", "bundled"});
  in.insert(in.end(), 8, RankInput{"gpu-b", kEpyc});
  in.insert(in.end(), 3, RankInput{"gpu-c", kDgx2});
  auto out = gather(in);
  std::vector<std::vector<kvs_gpu_info>> want = {read_gpus("bundled"), read_gpus(kEpyc),
                                                 read_gpus(kDgx2)};
  ASSERT_EQ(want[0].size(), 8u);
  ASSERT_EQ(want[1].size(), 8u);
  ASSERT_EQ(want[2].size(), 16u);
  for (size_t r = 0; r < out.size(); r++) {
    const size_t own[] = {r / 8};
    ASSERT_EQ(out[r].status, KVS_OK) << out[r].message;
    ASSERT_EQ(out[r].gpus.size(), 32u);
    EXPECT_EQ(out[r].host_gpus, (std::vector<size_t>{8, 8, 16}));
    EXPECT_EQ(out[r].own_host, own[0]);
    for (size_t k = 0; k < 3; k++) EXPECT_EQ(out[r].loaded[k], k == own[0]) << r << " " << k;
    EXPECT_TRUE(contains(out[r].labels[0], "gpu-a (bundled 8-GPU server")) << out[r].labels[0];
    EXPECT_EQ(out[r].labels[1], std::string("gpu-b (") + kEpyc + ")");
    EXPECT_EQ(out[r].labels[2], std::string("gpu-c (") + kDgx2 + ")");
    size_t at = 0;
    for (size_t k = 0; k < 3; k++) {
      for (const kvs_gpu_info &g : want[k]) expect_same_gpu(out[r].gpus[at], g, at, k), at++;
    }
  }
}

// On one machine the cluster is that machine, labelled as kvplan labels it.
TEST(ClusterGather, one_host_is_one_node_labelled_by_its_topology) {
  auto out = gather({{"solo", kEpyc}, {"solo", kEpyc}, {"solo", kEpyc}});
  for (const RankOutput &o : out) {
    ASSERT_EQ(o.status, KVS_OK) << o.message;
    EXPECT_EQ(o.labels, std::vector<std::string>{kEpyc});
    EXPECT_EQ(o.gpus.size(), 8u);
    EXPECT_EQ(o.own_host, 0u);
  }
}

// The plan walks the machines in order, filling each: ranks of a machine
// must be one block, and every machine but the last must run one rank per
// GPU, none more.
TEST(ClusterGather, ranks_out_of_machine_order_are_refused_naming_the_rank) {
  expect_all_fail(gather({{"y", kEpyc}, {"x", "bundled"}, {"y", kEpyc}, {"x", "bundled"}}),
                  KVS_ERR_INVALID_ARGUMENT, "rank 2 is on host y again after rank 1 on host x");
  expect_all_fail(gather({{"y", kSmall}, {"y", kSmall}, {"x", kSmall}}), KVS_ERR_INVALID_ARGUMENT,
                  "host y runs 2 ranks (from rank 0) on 3 GPUs");
  std::vector<RankInput> four(4, RankInput{"z", kSmall});
  expect_all_fail(gather(four), KVS_ERR_INVALID_ARGUMENT,
                  "host z runs 4 ranks (from rank 0) on 3 GPUs: launch at most one rank per GPU");
  // The last machine may run fewer ranks than it has GPUs.
  auto out = gather({{"y", kSmall}, {"y", kSmall}, {"y", kSmall}, {"x", kSmall}});
  for (const RankOutput &o : out) {
    ASSERT_EQ(o.status, KVS_OK) << o.message;
    EXPECT_EQ(o.host_gpus, (std::vector<size_t>{3, 3}));
  }
}

// A described cluster is opened by every rank and checked to be the same;
// it does not know which node a rank is on.
TEST(ClusterGather, a_described_cluster_is_the_same_on_every_rank) {
  auto out = gather({{"a", "bundled", 2}, {"b", "bundled", 2}, {"c", "bundled", 2}});
  for (const RankOutput &o : out) {
    ASSERT_EQ(o.status, KVS_OK) << o.message;
    EXPECT_EQ(o.gpus.size(), 16u);
    EXPECT_EQ(o.own_host, SIZE_MAX);
    EXPECT_EQ(o.loaded, (std::vector<bool>{true, true}));
  }
  std::string list = std::string("bundled,") + kEpyc;
  out = gather({{"a", list.c_str()}, {"a", list.c_str()}});
  for (const RankOutput &o : out) {
    ASSERT_EQ(o.status, KVS_OK) << o.message;
    EXPECT_EQ(o.host_gpus, (std::vector<size_t>{8, 8}));
  }
  expect_all_fail(gather({{"a", "bundled", 2}, {"a", "bundled", 3}}), KVS_ERR_INVALID_ARGUMENT,
                  "rank 1 opened another cluster than rank 0 (24 GPUs against 16");
}

TEST(ClusterGather, ranks_of_one_machine_that_see_other_gpus_are_refused_naming_both) {
  expect_all_fail(gather({{"a", "bundled"}, {"b", kEpyc}, {"b", kDgx2}}), KVS_ERR_INVALID_ARGUMENT,
                  "rank 2 on host b sees 16 GPUs and rank 1 on the same host sees 8");
  // Same count, other GPUs: the identities differ.
  expect_all_fail(gather({{"a", "bundled"}, {"a", kEpyc}}), KVS_ERR_INVALID_ARGUMENT,
                  "rank 1 on host a sees 8 GPUs and rank 0 on the same host sees 8 with other "
                  "identities or locality");
}

TEST(ClusterGather, ranks_that_differ_on_discovery_are_refused) {
  expect_all_fail(gather({{"a", "bundled"}, {"a", "bundled", 2}}), KVS_ERR_INVALID_ARGUMENT,
                  "rank 1 describes its cluster but rank 0 discovers it");
}

TEST(ClusterGather, a_rank_that_cannot_open_its_topology_fails_every_rank_naming_it) {
  auto out = gather({{"a", "bundled"}, {"a", "bundled"}, {"b", "/nonexistent/topo.xml"}});
  expect_all_fail(out, KVS_ERR_IO, "rank 2 could not join the cluster");
  EXPECT_TRUE(contains(out[0].message, "/nonexistent/topo.xml")) << out[0].message;
}

TEST(ClusterGather, bad_host_names_are_refused_naming_the_rank) {
  std::string long_name(KVS_HOST_NAME_MAX, 'h');
  const char *bad[] = {"", "two words", "tab\there", "--json", long_name.c_str()};
  for (const char *host : bad) {
    auto out = gather({{"a", "bundled"}, {host, "bundled"}});
    expect_all_fail(out, KVS_ERR_INVALID_ARGUMENT, "rank 1 could not join the cluster: host name");
  }
  // The longest name that fits is accepted.
  std::string longest(KVS_HOST_NAME_MAX - 1, 'h');
  auto out = gather({{longest.c_str(), "bundled"}, {longest.c_str(), "bundled"}});
  EXPECT_EQ(out[0].status, KVS_OK) << out[0].message;
}

// The machine's own name is used when none is given.
TEST(ClusterGather, the_host_name_defaults_to_the_machines) {
  char name[KVS_HOST_NAME_MAX];
  kvs_error err;
  ASSERT_EQ(kvs_host_name(name, sizeof name, &err), KVS_OK) << err.message;
  auto out = gather({{nullptr, "bundled"}, {name, "bundled"}});
  for (const RankOutput &o : out) {
    ASSERT_EQ(o.status, KVS_OK) << o.message;
    EXPECT_EQ(o.host_gpus, std::vector<size_t>{8});  // one node: the same host
  }
}

TEST(ClusterGather, more_machines_than_a_plan_holds_are_refused) {
  std::vector<std::string> names;
  for (int r = 0; r <= KVS_MAX_HOSTS; r++) names.push_back("h" + std::to_string(r));
  std::vector<RankInput> in;
  for (const std::string &n : names) in.push_back({n.c_str(), "bundled"});
  expect_all_fail(gather(in), KVS_ERR_INVALID_ARGUMENT,
                  "rank 64 is on a host beyond the 64 nodes a cluster plan holds");
}

// ---- the node over a gathered cluster ----

namespace {

struct NodeRun {
  kvs_status status;
  std::string message;
  size_t node = 0, local = 0;
};

std::vector<NodeRun> run_nodes(int tp, int pp, const std::vector<RankInput> &in) {
  std::vector<NodeRun> out(in.size());
  kvs_geometry geometry;
  EXPECT_EQ(kvs_geometry_builtin("dsv4-flash", &geometry, nullptr), KVS_OK);
  run_ranks(static_cast<int>(in.size()), 20000, [&](int r, kvs_comm_t comm) {
    kvs_workload_options wo = KVS_WORKLOAD_OPTIONS_INIT;
    kvs_node_options o;
    kvs_node_options_init(&o);
    o.geometry = &geometry;
    o.swa_ratio = 0.04;
    o.max_seq_len = kvs_workload_max_seq_len(&wo);
    o.max_running = wo.max_running;
    o.tp = tp;
    o.pp = pp;
    o.topology = in[r].topology;
    o.host = in[r].host;
    o.device = KVS_NODE_DEVICE_CPU;
    o.budget_bytes = 2ull << 30;
    o.local_rank = KVS_NODE_UNCHECKED;
    kvs_node_t node = nullptr;
    kvs_error err;
    kvs_error_clear(&err);
    NodeRun &run = out[static_cast<size_t>(r)];
    run.status = kvs_node_create(comm, &o, &node, &err);
    run.message = err.message;
    if (node != nullptr) {
      run.node = kvs_node_gpu(node)->host;
      run.local = kvs_cluster_local_index(kvs_node_cluster(node), kvs_node_gpu(node)->index);
    }
    kvs_node_destroy(node);
  });
  return out;
}

}  // namespace

// Two machines, three ranks each (tp 3 x pp 2): each rank drives a GPU of
// its own machine, one stage per machine.
TEST(ClusterGather, the_node_runs_each_rank_on_its_own_machine) {
  std::vector<RankInput> in;
  for (int r = 0; r < 6; r++) in.push_back({r < 3 ? "m0" : "m1", kSmall});
  auto out = run_nodes(3, 2, in);
  for (size_t r = 0; r < out.size(); r++) {
    ASSERT_EQ(out[r].status, KVS_OK) << out[r].message;
    EXPECT_EQ(out[r].node, r / 3) << "rank " << r;
    EXPECT_EQ(out[r].local, r % 3) << "rank " << r;
  }
}

// The node fails every rank alike when the gather refuses the placement.
TEST(ClusterGather, the_node_refuses_ranks_placed_out_of_node_order) {
  std::vector<RankInput> in;
  for (int r = 0; r < 6; r++) in.push_back({r % 2 == 0 ? "m0" : "m1", kSmall});
  auto out = run_nodes(3, 2, in);
  for (const NodeRun &run : out) {
    EXPECT_EQ(run.status, KVS_ERR_INVALID_ARGUMENT) << run.message;
    EXPECT_TRUE(contains(run.message, "rank 2 is on host m0 again after rank 1 on host m1"))
        << run.message;
  }
}

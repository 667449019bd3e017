// Rank layout along the topology: TP groups inside a NUMA node or a
// package where they fit, consecutive stages on one package before the
// pipeline crosses a socket, replicas, and the layout errors.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/topology/helpers.h"
#include "plan/rank_layout.h"

using namespace kvs_test;

namespace {

std::vector<kvs_rank_slot> layout(const std::vector<kvs_gpu_info> &gpus, size_t tp, size_t pp) {
  std::vector<kvs_rank_slot> out(gpus.size());
  kvs_error err;
  EXPECT_EQ(kvs_rank_layout(gpus.data(), gpus.size(), tp, pp, out.data(), &err), KVS_OK)
      << err.message;
  return out;
}

std::vector<size_t> gpu_order(const std::vector<kvs_rank_slot> &slots) {
  std::vector<size_t> out;
  for (const kvs_rank_slot &s : slots) out.push_back(s.gpu);
  return out;
}

// How often consecutive stages of replica 0 change package.
int package_crossings(const std::vector<kvs_gpu_info> &gpus,
                      const std::vector<kvs_rank_slot> &slots, size_t tp, size_t pp) {
  int crossings = 0;
  for (size_t s = 1; s < pp; s++) {
    if (gpus[slots[s * tp].gpu].package != gpus[slots[(s - 1) * tp].gpu].package) crossings++;
  }
  return crossings;
}

}  // namespace

TEST(Layout, ranks_number_tp_innermost) {
  Topology t = load_xml(kHgx);
  ASSERT_TRUE(t);
  std::vector<kvs_rank_slot> slots = layout(gpus_of(t.get()), 4, 2);
  for (size_t r = 0; r < 8; r++) {
    EXPECT_EQ(slots[r].rank, r);
    EXPECT_EQ(slots[r].tp_rank, r % 4);
    EXPECT_EQ(slots[r].pp_stage, r / 4);
    EXPECT_EQ(slots[r].replica, 0u);
  }
}

TEST(Layout, hgx_tp8_tp4pp2_pp8) {
  Topology t = load_xml(kHgx);
  ASSERT_TRUE(t);
  std::vector<kvs_gpu_info> gpus = gpus_of(t.get());
  const std::vector<size_t> identity = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(gpu_order(layout(gpus, 8, 1)), identity);
  // One stage per socket: each TP group stays inside its package.
  std::vector<kvs_rank_slot> tp4 = layout(gpus, 4, 2);
  EXPECT_EQ(gpu_order(tp4), identity);
  for (size_t r = 0; r < 8; r++) EXPECT_EQ(gpus[tp4[r].gpu].package, static_cast<int>(r / 4));
  // pp 8 crosses the socket link once.
  std::vector<kvs_rank_slot> pp8 = layout(gpus, 1, 8);
  EXPECT_EQ(gpu_order(pp8), identity);
  EXPECT_EQ(package_crossings(gpus, pp8, 1, 8), 1);
}

// One NUMA node per GPU pair: a tp-2 group is a pair, a tp-4 group a
// package, and 4 stages cross the socket once.
TEST(Layout, epyc_groups_stay_in_their_numa_node_and_package) {
  Topology t = load_xml(kEpyc);
  ASSERT_TRUE(t);
  std::vector<kvs_gpu_info> gpus = gpus_of(t.get());
  std::vector<kvs_rank_slot> tp2 = layout(gpus, 2, 4);
  for (size_t s = 0; s < 4; s++) {
    EXPECT_EQ(gpus[tp2[2 * s].gpu].numa_node, gpus[tp2[2 * s + 1].gpu].numa_node) << s;
  }
  EXPECT_EQ(package_crossings(gpus, tp2, 2, 4), 1);
  std::vector<kvs_rank_slot> tp4 = layout(gpus, 4, 2);
  for (size_t r = 0; r < 8; r++) EXPECT_EQ(gpus[tp4[r].gpu].package, static_cast<int>(r / 4));
  std::vector<kvs_rank_slot> pp8 = layout(gpus, 1, 8);
  EXPECT_EQ(package_crossings(gpus, pp8, 1, 8), 1);
}

// Bus order alternates sockets (as on some boards): the layout regroups.
TEST(Layout, interleaved_sockets_are_regrouped) {
  std::vector<kvs_gpu_info> gpus = {fake_gpu(0, 0, 0), fake_gpu(1, 1, 1), fake_gpu(2, 0, 0),
                                    fake_gpu(3, 1, 1)};
  EXPECT_EQ(gpu_order(layout(gpus, 2, 1)), (std::vector<size_t>{0, 2, 1, 3}));
  std::vector<kvs_rank_slot> pp4 = layout(gpus, 1, 4);
  EXPECT_EQ(gpu_order(pp4), (std::vector<size_t>{0, 2, 1, 3}));
  EXPECT_EQ(package_crossings(gpus, pp4, 1, 4), 1);
}

// 3 GPUs on one socket and 5 on the other, tp 4: the 5-GPU socket holds a
// whole group; only the other group spans sockets.
TEST(Layout, unbalanced_sockets_keep_whole_groups_where_they_fit) {
  std::vector<kvs_gpu_info> gpus;
  for (size_t i = 0; i < 8; i++) gpus.push_back(fake_gpu(i, i < 3 ? 0 : 1, i < 3 ? 0 : 1));
  std::vector<kvs_rank_slot> slots = layout(gpus, 4, 2);
  EXPECT_EQ(gpu_order(slots), (std::vector<size_t>{3, 4, 5, 6, 0, 1, 2, 7}));
  int spanning = 0;
  for (size_t g = 0; g < 2; g++) {
    std::set<int> pkgs;
    for (size_t t = 0; t < 4; t++) pkgs.insert(gpus[slots[g * 4 + t].gpu].package);
    spanning += pkgs.size() > 1;
  }
  EXPECT_EQ(spanning, 1);
}

TEST(Layout, unknown_locality_keeps_index_order) {
  std::vector<kvs_gpu_info> gpus;
  for (size_t i = 0; i < 4; i++) gpus.push_back(fake_gpu(i, -1, -1));
  EXPECT_EQ(gpu_order(layout(gpus, 2, 2)), (std::vector<size_t>{0, 1, 2, 3}));
}

// tp x pp dividing the GPUs: replicas, each on consecutive groups.
TEST(Layout, replicas_fill_one_socket_each) {
  Topology t = load_xml(kHgx);
  ASSERT_TRUE(t);
  std::vector<kvs_gpu_info> gpus = gpus_of(t.get());
  std::vector<kvs_rank_slot> slots = layout(gpus, 2, 2);
  for (size_t r = 0; r < 8; r++) {
    EXPECT_EQ(slots[r].replica, r / 4);
    EXPECT_EQ(slots[r].pp_stage, (r / 2) % 2);
    EXPECT_EQ(gpus[slots[r].gpu].package, static_cast<int>(r / 4));
  }
}

TEST(Layout, errors_name_the_numbers_and_write_nothing) {
  std::vector<kvs_gpu_info> gpus;
  for (size_t i = 0; i < 8; i++) gpus.push_back(fake_gpu(i, 0, 0));
  std::vector<kvs_rank_slot> out(8);
  out[0].rank = 99;
  kvs_error err;
  EXPECT_EQ(kvs_rank_layout(gpus.data(), 8, 4, 4, out.data(), &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(err.message), "tp 4 x pp 4 = 16 ranks, more ranks than the 8 GPUs");
  EXPECT_EQ(kvs_rank_layout(gpus.data(), 8, 3, 1, out.data(), &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(err.message),
            "tp 3 x pp 1 = 3 ranks does not divide the 8 GPUs into whole replicas");
  EXPECT_EQ(kvs_rank_layout(gpus.data(), 8, 0, 1, out.data(), &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(err.message), "tp 0 x pp 1: both must be at least 1");
  EXPECT_EQ(kvs_rank_layout(gpus.data(), 0, 1, 1, out.data(), &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out[0].rank, 99u);
}

// A cluster: two copies of the HGX server as nodes 0 and 1. TP groups stay
// inside a node, stages fill node 0 before node 1, and a group that cannot
// fit in a node is refused unless allowed.
TEST(Layout, cluster_groups_stay_in_a_node_and_stages_fill_nodes_in_order) {
  Topology t = load_xml(kHgx);
  ASSERT_TRUE(t);
  std::vector<kvs_gpu_info> one = gpus_of(t.get());
  std::vector<kvs_gpu_info> gpus;
  for (size_t node = 0; node < 2; node++) {
    for (kvs_gpu_info g : one) {
      g.host = node;
      g.index = gpus.size();
      gpus.push_back(g);
    }
  }
  const size_t shapes[][2] = {{8, 2}, {4, 4}, {2, 8}, {1, 16}, {4, 2}};
  for (const auto &shape : shapes) {
    size_t tp = shape[0], pp = shape[1];
    SCOPED_TRACE("tp " + std::to_string(tp) + " x pp " + std::to_string(pp));
    std::vector<kvs_rank_slot> out(gpus.size());
    bool crossed = true;
    kvs_error err;
    ASSERT_EQ(kvs_rank_layout_cluster(gpus.data(), gpus.size(), tp, pp, false, out.data(), &crossed,
                                      &err),
              KVS_OK)
        << err.message;
    EXPECT_FALSE(crossed);
    for (size_t r = 0; r < gpus.size(); r++) {
      // Every member of a TP group on its first member's node.
      size_t head = r - out[r].tp_rank;
      EXPECT_EQ(gpus[out[r].gpu].host, gpus[out[head].gpu].host) << "rank " << r;
      // Stages never go back to an earlier node within a replica.
      if (out[r].pp_stage > 0) {
        size_t before = r - tp;
        EXPECT_LE(gpus[out[before].gpu].host, gpus[out[r].gpu].host) << "rank " << r;
      }
    }
    // Ranks in order: node 0's GPUs first.
    EXPECT_EQ(gpus[out[0].gpu].host, 0u);
    EXPECT_EQ(gpus[out[gpus.size() - 1].gpu].host, 1u);
  }
  std::vector<kvs_rank_slot> out(gpus.size());
  out[0].rank = 99;
  kvs_error err;
  EXPECT_EQ(
      kvs_rank_layout_cluster(gpus.data(), gpus.size(), 16, 1, false, out.data(), nullptr, &err),
      KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("ranks 0-15 spans nodes 0 and 1"), std::string::npos)
      << err.message;
  EXPECT_EQ(out[0].rank, 99u) << "a refusal writes nothing";
  // The single-node call refuses it too.
  EXPECT_EQ(kvs_rank_layout(gpus.data(), gpus.size(), 16, 1, out.data(), &err),
            KVS_ERR_INVALID_ARGUMENT);
  bool crossed = false;
  ASSERT_EQ(
      kvs_rank_layout_cluster(gpus.data(), gpus.size(), 16, 1, true, out.data(), &crossed, &err),
      KVS_OK);
  EXPECT_TRUE(crossed);
  std::set<size_t> used;
  for (const kvs_rank_slot &s : out) used.insert(s.gpu);
  EXPECT_EQ(used.size(), gpus.size()) << "every GPU once";
}

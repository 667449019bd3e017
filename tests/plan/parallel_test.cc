// Attention data parallelism and expert parallelism (plan/parallel.h), and
// the memory a GPU has before the weights load (plan/node_setup.h's
// kvs_node_free_before_load): refusals name the flag, and the counts are
// the ones docs/operators.md's 8 x H200 layouts use.
#include "plan/parallel.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/serving_defaults.h"
#include "plan/node_setup.h"
#include "tests/topology/helpers.h"

namespace {

std::string refusal(kvs_parallel p, size_t n) {
  kvs_error err;
  EXPECT_EQ(kvs_parallel_check(&p, n, &err), KVS_ERR_INVALID_ARGUMENT);
  return err.message;
}

TEST(Parallel, TheReadmeLayoutsOnEightGpus) {
  kvs_error err;
  const kvs_parallel layouts[] = {{8, 1, 1, 1}, {4, 2, 1, 1}, {1, 1, 8, 8}, {4, 1, 2, 8}};
  for (const kvs_parallel &p : layouts)
    EXPECT_EQ(kvs_parallel_check(&p, 8, &err), KVS_OK) << err.message;
  const kvs_parallel dp8{1, 1, 8, 8};
  EXPECT_EQ(kvs_parallel_groups(&dp8, 8), 8u);
  EXPECT_EQ(kvs_parallel_replicas(&dp8, 8), 1u);
  EXPECT_EQ(kvs_parallel_moe_gpus(&dp8), 8u);
  const kvs_parallel dp2{4, 1, 2, 8};
  EXPECT_EQ(kvs_parallel_groups(&dp2, 8), 2u);
  EXPECT_EQ(kvs_parallel_moe_gpus(&dp2), 8u);
  // Two nodes of dp 8 are two replicas of 8 groups.
  EXPECT_EQ(kvs_parallel_replicas(&dp8, 16), 2u);
  EXPECT_EQ(kvs_parallel_groups(&dp8, 16), 16u);
}

TEST(Parallel, BadCombinationsAreRefusedNamingTheFlag) {
  std::string m = refusal({1, 1, 3, 1}, 8);
  EXPECT_EQ(m.rfind("--dp 3:", 0), 0u) << m;
  EXPECT_NE(m.find("--dp can be 1, 2, 4, 8"), std::string::npos) << m;
  m = refusal({4, 2, 2, 1}, 8);
  EXPECT_EQ(m.rfind("--dp 2:", 0), 0u) << m;
  EXPECT_NE(m.find("16 GPUs per replica, more than the 8 GPUs"), std::string::npos) << m;
  m = refusal({8, 1, 1, 16}, 8);
  EXPECT_EQ(m.rfind("--ep 16 is more than the 8 GPUs", 0), 0u) << m;
  m = refusal({4, 2, 1, 8}, 8);
  EXPECT_EQ(m.rfind("--ep 8 does not divide tp 4 x dp 1 = 4", 0), 0u) << m;
  EXPECT_NE(m.find("--ep can be 1, 2, 4"), std::string::npos) << m;
  m = refusal({2, 1, 2, 3}, 8);
  EXPECT_EQ(m.rfind("--ep 3 does not divide", 0), 0u) << m;
  m = refusal({8, 1, 0, 1}, 8);
  EXPECT_EQ(m.rfind("--dp is 0", 0), 0u) << m;
  m = refusal({8, 1, 1, 0}, 8);
  EXPECT_EQ(m.rfind("--ep is 0", 0), 0u) << m;
  kvs_error err;
  EXPECT_EQ(kvs_parallel_check(nullptr, 8, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_parallel_groups(nullptr, 8), 0u);
  EXPECT_EQ(kvs_parallel_replicas(nullptr, 8), 0u);
  EXPECT_EQ(kvs_parallel_moe_gpus(nullptr), 0u);
}

TEST(FreeBeforeLoad, NominalIsTheDriverTotalLessTheContext) {
  kvs_topology_t t = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_host_topology_open("bundled", &t, nullptr, 0, &err), KVS_OK) << err.message;
  kvs_test::Topology topology(t);
  const std::vector<kvs_gpu_info> gpus = kvs_test::gpus_of(t);
  std::vector<uint64_t> free(gpus.size());
  std::vector<kvs_budget_source> sources(gpus.size());
  ASSERT_EQ(
      kvs_node_free_before_load(gpus.data(), gpus.size(), 0, 0, free.data(), sources.data(), &err),
      KVS_OK)
      << err.message;
  // An H200's driver reports 143,771 MiB; 2.5 GiB go to the context.
  EXPECT_EQ(free[0], (143771ull << 20) - KVS_DEFAULT_CONTEXT_OVERHEAD_BYTES);
  EXPECT_EQ(sources[7], KVS_BUDGET_NOMINAL);
  uint64_t total = 0;
  ASSERT_EQ(kvs_node_gpu_total_memory(&gpus[3], 0, &total, &err), KVS_OK);
  EXPECT_EQ(total, 143771ull << 20);
  ASSERT_EQ(kvs_node_gpu_total_memory(&gpus[3], 80ull << 30, &total, &err), KVS_OK);
  EXPECT_EQ(total, 80ull << 30);
  // Given: taken as it is on every GPU; --gpu-memory less the context.
  ASSERT_EQ(
      kvs_node_free_before_load(gpus.data(), gpus.size(), 7, 0, free.data(), sources.data(), &err),
      KVS_OK);
  EXPECT_EQ(free[5], 7u);
  EXPECT_EQ(sources[5], KVS_BUDGET_EXPLICIT);
  ASSERT_EQ(kvs_node_free_before_load(gpus.data(), gpus.size(), 0, 80ull << 30, free.data(),
                                      nullptr, &err),
            KVS_OK);
  EXPECT_EQ(free[2], (80ull << 30) - KVS_DEFAULT_CONTEXT_OVERHEAD_BYTES);
  EXPECT_EQ(kvs_node_free_before_load(gpus.data(), gpus.size(), 0, 1ull << 30, free.data(), nullptr,
                                      &err),
            KVS_ERR_BUDGET_TOO_SMALL);
}

}  // namespace

// Memory inputs that cannot be true (plan/memory_inputs.h; issue 30,
// section 5): each pair the inputs allow, refused naming both sides, the
// per-GPU lists read at the GPU they are for, a GPU of unknown memory left
// unchecked, and the node's budget step (kvs_node_budgets,
// kvs_node_free_before_load) refusing the same in the same words.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/memory_inputs.h"
#include "plan/node_setup.h"
#include "tests/topology/helpers.h"
#include "topology/topology.h"

namespace {

constexpr uint64_t kGiB = 1ull << 30;

struct Inputs {
  kvs_memory_input in[KVS_MEMORY_INPUT_COUNT] = {};
  Inputs &set(kvs_memory_input_id id, const char *name, uint64_t bytes) {
    in[id] = kvs_memory_input{name, bytes, nullptr, 0};
    return *this;
  }
  Inputs &list(kvs_memory_input_id id, const char *name, const std::vector<uint64_t> &v) {
    in[id] = kvs_memory_input{name, 0, v.data(), v.size()};
    return *this;
  }
};

std::string refusal(const Inputs &i, const std::vector<kvs_gpu_info> &gpus = {}) {
  kvs_error err;
  kvs_error_clear(&err);
  kvs_status s =
      kvs_memory_inputs_check(i.in, gpus.empty() ? nullptr : gpus.data(), gpus.size(), &err);
  if (s == KVS_OK) return "";
  EXPECT_EQ(s, KVS_ERR_INVALID_ARGUMENT);
  return err.message;
}

std::vector<kvs_gpu_info> bundled() {
  kvs_topology_t t = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_host_topology_open("bundled", &t, nullptr, 0, &err), KVS_OK) << err.message;
  kvs_test::Topology topology(t);
  return kvs_test::gpus_of(t);
}

const char kH200[] = "140.40 GiB (the total its driver reports)";

TEST(MemoryInputs, EachPairOfInputsThatCannotBeTrue) {
  EXPECT_EQ(refusal(Inputs()
                        .set(KVS_MEMORY_GPU_MEMORY, "--gpu-memory", 80 * kGiB)
                        .set(KVS_MEMORY_FREE_BEFORE_LOAD, "--free-before-load", 100 * kGiB)),
            "--free-before-load 100.00 GiB is more than --gpu-memory 80.00 GiB: memory free before "
            "the weights load is part of the GPU's memory");
  EXPECT_EQ(refusal(Inputs()
                        .set(KVS_MEMORY_GPU_MEMORY, "--gpu-memory", 80 * kGiB)
                        .set(KVS_MEMORY_RESERVE, "--reserve", 81 * kGiB)),
            "--reserve 81.00 GiB is more than --gpu-memory 80.00 GiB: the reserve is taken off the "
            "GPU's memory");
  EXPECT_EQ(refusal(Inputs()
                        .set(KVS_MEMORY_GPU_MEMORY, "--gpu-memory", 80 * kGiB)
                        .set(KVS_MEMORY_BUDGET, "--budget", 90 * kGiB)),
            "--budget 90.00 GiB is more than --gpu-memory 80.00 GiB: a KV budget is carved from "
            "the GPU's memory");
  std::vector<uint64_t> weights = {10 * kGiB, 90 * kGiB};
  EXPECT_EQ(refusal(Inputs()
                        .set(KVS_MEMORY_GPU_MEMORY, "--gpu-memory", 80 * kGiB)
                        .list(KVS_MEMORY_WEIGHTS, "--weights-per-gpu", weights)),
            "--weights-per-gpu's 90.00 GiB for GPU 1 is more than --gpu-memory 80.00 GiB: the "
            "weights load into the GPU's memory");
  EXPECT_EQ(refusal(Inputs()
                        .set(KVS_MEMORY_FREE_BEFORE_LOAD, "--free-before-load", 100 * kGiB)
                        .set(KVS_MEMORY_WEIGHTS, "--weights", 120 * kGiB)),
            "--weights 120.00 GiB is more than --free-before-load 100.00 GiB: the weights load "
            "into the memory free before load");
  // Equal is possible (all of it), and so is every input below its holder.
  EXPECT_EQ(refusal(Inputs()
                        .set(KVS_MEMORY_GPU_MEMORY, "--gpu-memory", 80 * kGiB)
                        .set(KVS_MEMORY_FREE_BEFORE_LOAD, "--free-before-load", 80 * kGiB)
                        .set(KVS_MEMORY_WEIGHTS, "--weights", 80 * kGiB)
                        .set(KVS_MEMORY_RESERVE, "--reserve", 512ull << 20)),
            "");
  // Small figures read in MiB or bytes, never as 0.00 GiB.
  EXPECT_EQ(refusal(Inputs()
                        .set(KVS_MEMORY_GPU_MEMORY, "--gpu-memory", 1ull << 20)
                        .set(KVS_MEMORY_RESERVE, "--reserve", 512ull << 20)),
            "--reserve 512.00 MiB is more than --gpu-memory 1.00 MiB: the reserve is taken off the "
            "GPU's memory");
}

TEST(MemoryInputs, EachInputAgainstTheGpusOwnMemory) {
  const std::vector<kvs_gpu_info> gpus = bundled();
  ASSERT_EQ(gpus.size(), 8u);
  // The typo: 1379GiB free on a 140 GiB GPU.
  EXPECT_EQ(
      refusal(Inputs().set(KVS_MEMORY_FREE_BEFORE_LOAD, "--free-before-load", 1379 * kGiB), gpus),
      std::string("--free-before-load 1379.00 GiB is more than the memory of GPU 0 "
                  "(0000:1b:00.0), ") +
          kH200 + ": memory free before the weights load is part of the GPU's memory");
  EXPECT_EQ(refusal(Inputs().set(KVS_MEMORY_GPU_MEMORY, "--gpu-memory", 1379 * kGiB), gpus),
            std::string("--gpu-memory 1379.00 GiB is more than the memory of GPU 0 "
                        "(0000:1b:00.0), ") +
                kH200 + ": the GPU has no more memory than that");
  EXPECT_EQ(refusal(Inputs().set(KVS_MEMORY_BUDGET, "--budget", 200 * kGiB), gpus),
            std::string("--budget 200.00 GiB is more than the memory of GPU 0 (0000:1b:00.0), ") +
                kH200 + ": a KV budget is carved from the GPU's memory");
  EXPECT_EQ(refusal(Inputs().set(KVS_MEMORY_RESERVE, "--reserve", 141 * kGiB), gpus),
            std::string("--reserve 141.00 GiB is more than the memory of GPU 0 (0000:1b:00.0), ") +
                kH200 + ": the reserve is taken off the GPU's memory");
  // A list is read at the GPU it is for.
  std::vector<uint64_t> budgets(8, 100 * kGiB);
  budgets[5] = 150 * kGiB;
  EXPECT_EQ(refusal(Inputs().list(KVS_MEMORY_BUDGET, "--budget-per-gpu", budgets), gpus),
            std::string("--budget-per-gpu's 150.00 GiB for GPU 5 is more than the memory of GPU 5 "
                        "(") +
                gpus[5].pci_busid + "), " + kH200 +
                ": a KV budget is carved from the GPU's memory");
  // With --gpu-memory given, it stands for the machine: the rest are held
  // to it, and it to the machine.
  EXPECT_EQ(refusal(Inputs()
                        .set(KVS_MEMORY_GPU_MEMORY, "--gpu-memory", 80 * kGiB)
                        .set(KVS_MEMORY_WEIGHTS, "--weights", 70 * kGiB),
                    gpus),
            "");
  // The whole GPU is possible.
  EXPECT_EQ(refusal(Inputs().set(KVS_MEMORY_BUDGET, "--budget", 143771ull << 20), gpus), "");
  // A GPU whose memory nobody knows is not checked: nothing is invented.
  std::vector<kvs_gpu_info> unknown = gpus;
  for (kvs_gpu_info &g : unknown) g.device_id = 0x9999;
  EXPECT_EQ(refusal(Inputs().set(KVS_MEMORY_BUDGET, "--budget", 2000 * kGiB), unknown), "");
  // What CUDA measured beats the table, and says so.
  std::vector<kvs_gpu_info> measured = gpus;
  measured[0].cuda_device = 0;
  measured[0].total_bytes = 80 * kGiB;
  EXPECT_EQ(refusal(Inputs().set(KVS_MEMORY_BUDGET, "--budget", 100 * kGiB), measured),
            "--budget 100.00 GiB is more than the memory of GPU 0 (0000:1b:00.0), 80.00 GiB (its "
            "total, as CUDA measured it): a KV budget is carved from the GPU's memory");
}

// The node's budget step refuses the same inputs in the same words, and
// changes nothing when it does.
TEST(MemoryInputs, TheNodesBudgetStepRefusesThemToo) {
  const std::vector<kvs_gpu_info> gpus = bundled();
  kvs_error err;
  std::vector<kvs_memory_budget> out(gpus.size());
  out[0].budget_bytes = 7;
  kvs_budget_request r = KVS_BUDGET_REQUEST_INIT;
  r.budget_bytes = 200 * kGiB;
  EXPECT_EQ(kvs_node_budgets(&r, gpus.data(), gpus.size(), out.data(), &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(refusal(Inputs().set(KVS_MEMORY_BUDGET, "--budget", 200 * kGiB), gpus), err.message);
  EXPECT_EQ(out[0].budget_bytes, 7u);
  kvs_memory_budget one;
  EXPECT_EQ(kvs_node_gpu_budget(&r, gpus.data(), gpus.size(), 3, &one, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("--budget 200.00 GiB"), std::string::npos);
  r = KVS_BUDGET_REQUEST_INIT;
  r.weights_bytes = 150 * kGiB;
  EXPECT_EQ(kvs_node_budgets(&r, gpus.data(), gpus.size(), out.data(), &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("--weights 150.00 GiB is more than"), std::string::npos)
      << err.message;
  r = KVS_BUDGET_REQUEST_INIT;
  r.reserve_bytes = 150 * kGiB;
  EXPECT_EQ(kvs_node_budgets(&r, gpus.data(), gpus.size(), out.data(), &err),
            KVS_ERR_INVALID_ARGUMENT);
  // On a figure the caller gave (kvplan --gpu-memory) the caller checks.
  r = KVS_BUDGET_REQUEST_INIT;
  EXPECT_EQ(kvs_node_budgets_on_memory(&r, 1ull << 20, gpus.data(), gpus.size(), out.data(), &err),
            KVS_ERR_BUDGET_TOO_SMALL);
  std::vector<uint64_t> free(gpus.size(), 7);
  EXPECT_EQ(kvs_node_free_before_load(gpus.data(), gpus.size(), 1379 * kGiB, 0, free.data(),
                                      nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(
      refusal(Inputs().set(KVS_MEMORY_FREE_BEFORE_LOAD, "--free-before-load", 1379 * kGiB), gpus),
      err.message);
  EXPECT_EQ(free[0], 7u);
  EXPECT_EQ(kvs_node_free_before_load(gpus.data(), gpus.size(), 100 * kGiB, 80 * kGiB, free.data(),
                                      nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(err.message),
            "--free-before-load 100.00 GiB is more than --gpu-memory 80.00 GiB: memory free before "
            "the weights load is part of the GPU's memory");
}

// A host tier (--host-cache) against each machine's own memory.
TEST(MemoryInputs, AHostTierAboveAMachinesMemory) {
  const uint64_t memory[2] = {2048 * kGiB, 512 * kGiB};
  const char *const labels[2] = {"a.xml", "b.xml"};
  kvs_error err;
  EXPECT_EQ(kvs_memory_host_check("--host-cache", 512 * kGiB, memory, labels, 2, &err), KVS_OK);
  EXPECT_EQ(kvs_memory_host_check("--host-cache", 600 * kGiB, memory, labels, 2, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message,
               "--host-cache 600.00 GiB is more than the memory of host 1 (b.xml), 512.00 GiB "
               "(as hwloc reports it): the host tier is pinned in the host's memory");
  // A machine whose memory is not known is not checked.
  const uint64_t unknown[1] = {0};
  EXPECT_EQ(kvs_memory_host_check("--host-cache", 600 * kGiB, unknown, nullptr, 1, &err), KVS_OK);
  // The bundled server's export: two NUMA nodes of 1 TiB.
  kvs_cluster_t c = nullptr;
  ASSERT_EQ(kvs_cluster_open("bundled", 0, &c, nullptr, 0, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_topology_memory_bytes(kvs_cluster_host(c, 0)), 2048 * kGiB);
  EXPECT_EQ(kvs_cluster_host_tier_check(c, "--host-cache", 2048 * kGiB, &err), KVS_OK);
  EXPECT_EQ(kvs_cluster_host_tier_check(c, "--host-cache", 3072 * kGiB, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message)
                .find("--host-cache 3072.00 GiB is more than the memory of "
                      "host 0 (bundled 8-GPU server"),
            std::string::npos)
      << err.message;
  kvs_cluster_destroy(c);
}

}  // namespace

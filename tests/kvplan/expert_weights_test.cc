// Routed experts per GPU at pp > 1 (kvplan plan, through kvs_plan_run):
// a pipeline stage holds its own layers' experts, shared by the tp x dp
// GPUs of that stage, not by every GPU of the replica. Dividing them by
// tp x pp x dp instead overcommits each GPU by the experts it was not
// charged (about 48 GB here): the plan's figures are checked against the
// arithmetic below, done by hand from the flags.
#include <gtest/gtest.h>
#include <jansson.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kvshard.h"

namespace {

constexpr uint64_t GiB = 1ull << 30;

struct Plan {
  kvs_status status;
  std::string out, notes, message;
};

Plan plan(const std::vector<const char *> &args) {
  char *out = nullptr, *notes = nullptr;
  kvs_error err;
  kvs_error_clear(&err);
  kvs_status status = kvs_plan_run(args.data(), args.size(), &out, &notes, &err);
  Plan p{status, out != nullptr ? out : "", notes != nullptr ? notes : "",
         status != KVS_OK ? err.message : ""};
  kvs_free(out);
  kvs_free(notes);
  return p;
}

uint64_t u64(json_t *object, const char *key) {
  json_t *v = json_object_get(object, key);
  EXPECT_TRUE(json_is_integer(v)) << key;
  return static_cast<uint64_t>(json_integer_value(v));
}

// Bytes over `gpus` GPUs, rounded up: what each one holds.
uint64_t per_gpu(uint64_t bytes, uint64_t gpus) { return bytes / gpus + (bytes % gpus != 0); }

}  // namespace

TEST(ExpertWeights, a_stage_holds_its_own_layers_experts_over_its_tp_x_dp_gpus) {
  // DSV4-Flash (43 layers) on the bundled 8-GPU H200 server at tp 4 x
  // pp 2 (dp 1): stage 0 holds layers 0-21, stage 1 layers 22-42.
  const Plan p = plan({"plan", "--topology", "bundled", "--tp", "4", "--pp", "2",
                       "--expert-weights", "700GiB", "--shared-weights", "20GiB", "--json"});
  ASSERT_EQ(p.status, KVS_OK) << p.message << "\n" << p.notes;
  json_error_t jerr;
  json_t *root = json_loads(p.out.c_str(), 0, &jerr);
  ASSERT_NE(root, nullptr) << jerr.text << "\n" << p.out;
  json_t *ranks = json_object_get(root, "ranks");
  ASSERT_EQ(json_array_size(ranks), 8u);
  EXPECT_EQ(u64(json_object_get(root, "weights"), "expert_bytes"), 700 * GiB);

  // By hand. Each kind is spread evenly over the 43 layers, the remainder
  // on the last layer:
  //   shared  20 GiB = 21,474,836,480 B / 43 = 499,414,801 a layer, 37 over;
  //   experts 700 GiB = 751,619,276,800 B / 43 = 17,479,518,065 a layer, 5 over.
  const uint64_t layers = 43, shared = 20 * GiB, experts = 700 * GiB;
  const uint64_t shared_layer = shared / layers, expert_layer = experts / layers;
  ASSERT_EQ(shared_layer * layers + 37, shared);
  ASSERT_EQ(expert_layer * layers + 5, experts);
  // A GPU holds 1 / tp of a layer's shared bytes and 1 / (tp x dp) of its
  // experts, both 1 / 4 here: one division of the layer's bytes by 4,
  // rounded up per layer:
  //   (499,414,801 + 17,479,518,065) / 4 = 4,494,733,216.5 -> 4,494,733,217.
  const uint64_t tp = 4, dp = 1;
  ASSERT_EQ(tp * dp, tp) << "experts and the rest divide alike here";
  const uint64_t layer = per_gpu(shared_layer + expert_layer, tp * dp);
  // Stage 0: 22 layers, 22 x 4,494,733,217 = 98,884,130,774 B (92.09 GiB).
  // Stage 1: 20 layers and the last, with the remainders:
  //   20 x 4,494,733,217 + (17,978,932,866 + 42) / 4 rounded up
  //   = 89,894,664,340 + 4,494,733,227 = 94,389,397,567 B.
  const uint64_t stage_weights[2] = {
      22 * layer, 20 * layer + per_gpu(shared_layer + 37 + expert_layer + 5, tp * dp)};
  // The budget of a GPU: the H200's 143,771 MiB (150,754,820,096 B) x 0.9,
  // rounded down, less the weights and the 512 MiB reserve.
  const uint64_t share = 150754820096ull * 9 / 10;  // 135,679,338,086
  const uint64_t reserve = 512ull << 20;
  // Dividing the experts by tp x pp x dp = 8 instead would leave stage 0's
  // GPUs 22 x (124,853,701 + 2,184,939,759) = 50,815,456,120 B: 48,068,674,654
  // B (44.8 GiB) of experts on each GPU that its budget never paid for.
  const uint64_t wrong = 22 * (per_gpu(shared_layer, tp) + per_gpu(expert_layer, tp * 2 * dp));
  EXPECT_GT(stage_weights[0] - wrong, 48ull * 1000 * 1000 * 1000);

  for (size_t i = 0; i < json_array_size(ranks); i++) {
    json_t *rank = json_array_get(ranks, i);
    const uint64_t stage = u64(rank, "pp_stage");
    ASSERT_LT(stage, 2u);
    json_t *span = json_object_get(rank, "layers");
    EXPECT_EQ(json_integer_value(json_array_get(span, 0)), stage == 0 ? 0 : 22) << "rank " << i;
    EXPECT_EQ(json_integer_value(json_array_get(span, 1)), stage == 0 ? 21 : 42) << "rank " << i;
    EXPECT_EQ(u64(rank, "weights_bytes"), stage_weights[stage])
        << "rank " << i << " (stage " << stage
        << "): a GPU holds 1 / (tp x dp) of its stage's routed experts, not 1 / (tp x pp x dp)";
    EXPECT_EQ(u64(rank, "budget_bytes"), share - stage_weights[stage] - reserve)
        << "rank " << i << ": the KV budget is what its weights leave";
  }
  json_decref(root);
  // The weights are counted, and no note says otherwise.
  EXPECT_EQ(p.notes.find("weights are not counted"), std::string::npos) << p.notes;
}

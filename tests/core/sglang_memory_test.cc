// SGLang's memory rule and default fraction (core/sglang_memory.h): the
// published InferenceX check (SemiAnalysisAI/InferenceX#2128: DeepSeek-V4-
// Pro fp8 at tp 8 on H200, ~125.65 GiB of weights per GPU, ~137.90 GiB
// free before they load) and the default fractions worked out by hand.
#include "core/sglang_memory.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace {

constexpr double kGiB = 1073741824.0;

uint64_t gib(double x) { return static_cast<uint64_t>(std::llround(x * kGiB)); }

kvs_sglang_memory rule(uint64_t p, uint64_t a, double f, bool distributed = false) {
  kvs_sglang_memory_input in{p, a, f, distributed};
  kvs_sglang_memory m{};
  kvs_error err;
  EXPECT_EQ(kvs_sglang_memory_rule(&in, &m, &err), KVS_OK) << err.message;
  return m;
}

TEST(SglangMemory, InferenceXProOnH200At088HasNoKvCache) {
  // A = 137.90 - 125.65 = 12.25 GiB; the slack at 0.88 is 137.90 x 0.12 =
  // 16.548 GiB, more than A: SGLang refuses to start.
  const kvs_sglang_memory m = rule(gib(137.90), gib(137.90) - gib(125.65), 0.88);
  EXPECT_TRUE(m.no_kv);
  EXPECT_EQ(m.rest_bytes, 0u);
  // 1 - 12.25 / 137.90 = 0.911168...; SGLang printed 0.9113 from its own
  // minimum over 8 ranks, which the rank-0 log line (12.25 GB) rounds.
  EXPECT_NEAR(m.min_viable_mem_fraction, 1.0 - 12.25 / 137.90, 1e-9);
  EXPECT_NEAR(m.min_viable_mem_fraction, 0.9113, 2e-4);
  EXPECT_DOUBLE_EQ(m.suggested_mem_fraction, 0.912);
}

TEST(SglangMemory, InferenceXWithMtpCountsTheDraftWeights) {
  // The NextN draft adds 3.07 GiB: A = 9.18, 1 - 9.18 / 137.90 = 0.93343.
  const kvs_sglang_memory m = rule(gib(137.90), gib(137.90) - gib(125.65 + 3.07), 0.88);
  EXPECT_TRUE(m.no_kv);
  EXPECT_NEAR(m.min_viable_mem_fraction, 0.9335, 2e-4);
  EXPECT_DOUBLE_EQ(m.suggested_mem_fraction, 0.934);
}

TEST(SglangMemory, RestIsAvailableLessTheSlack) {
  // At 0.92 the slack is 137.90 x 0.08 = 11.032 GiB and the pools get
  // 12.25 - 11.032 = 1.218 GiB, truncated to bytes.
  const kvs_sglang_memory m = rule(gib(137.90), gib(12.25), 0.92);
  EXPECT_FALSE(m.no_kv);
  const double p = static_cast<double>(gib(137.90)) / kGiB;
  const double a = static_cast<double>(gib(12.25)) / kGiB;
  EXPECT_EQ(m.rest_bytes, static_cast<uint64_t>((a - p * (1.0 - 0.92)) * kGiB));
  EXPECT_NEAR(static_cast<double>(m.rest_bytes) / kGiB, 1.218, 1e-6);
}

TEST(SglangMemory, ManyRanksRoundTheirMinimumToFloat32) {
  // 137.90 GiB + 1 byte is not a float32; the all-reduce's float32 tensor
  // rounds it to the nearest multiple of 16 KiB (2^(37 - 23)).
  const uint64_t p = gib(137.90) + 1;
  const kvs_sglang_memory one = rule(p, gib(12.25), 0.95, false);
  const kvs_sglang_memory many = rule(p, gib(12.25), 0.95, true);
  EXPECT_EQ(one.free_before_load_gib, static_cast<double>(p) / kGiB);
  EXPECT_EQ(many.free_before_load_gib,
            static_cast<double>(static_cast<float>(static_cast<double>(p))) / kGiB);
  EXPECT_NE(one.free_before_load_gib, many.free_before_load_gib);
}

TEST(SglangMemory, RefusesWhatCannotBeMeasured) {
  kvs_sglang_memory m{};
  kvs_error err;
  kvs_sglang_memory_input zero{0, 0, 0.9, false};
  EXPECT_EQ(kvs_sglang_memory_rule(&zero, &m, &err), KVS_ERR_INVALID_ARGUMENT);
  kvs_sglang_memory_input more{gib(10), gib(11), 0.9, false};
  EXPECT_EQ(kvs_sglang_memory_rule(&more, &m, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("more than"), std::string::npos) << err.message;
  kvs_sglang_memory_input over{gib(10), gib(5), 1.5, false};
  EXPECT_EQ(kvs_sglang_memory_rule(&over, &m, &err), KVS_ERR_INVALID_ARGUMENT);
  kvs_sglang_memory_input none{gib(10), gib(5), 0.0, false};
  EXPECT_EQ(kvs_sglang_memory_rule(&none, &m, &err), KVS_ERR_INVALID_ARGUMENT);
}

double default_fraction(uint64_t mib, uint64_t tp, uint64_t pp, uint64_t dp) {
  kvs_sglang_launch launch{mib, tp, pp, dp, dp > 1, 0, 0};
  kvs_sglang_default_fraction d{};
  kvs_error err;
  EXPECT_EQ(kvs_sglang_default_mem_fraction(&launch, &d, &err), KVS_OK) << err.message;
  return d.mem_fraction_static;
}

TEST(SglangMemory, DefaultFractionOnH200) {
  // 143,771 MiB: chunked prefill 8192, 512 decode slots at tp >= 4.
  // tp 8: 512 + 8192 x 1.5 + 8 / 8 x 1024 + 512 x 2 = 14,848 MiB,
  // (143771 - 14848) / 143771 = 0.89672 -> 0.897.
  EXPECT_DOUBLE_EQ(default_fraction(143771, 8, 1, 1), 0.897);
  // tp 4 x pp 2: tp x pp / 8 is 1 again.
  EXPECT_DOUBLE_EQ(default_fraction(143771, 4, 2, 1), 0.897);
  // DP attention over 8: + 512 x 8 x 3 + 512 x 8 x 1.5 = 18,432 more,
  // 33,280 MiB: 0.76852 -> 0.769.
  EXPECT_DOUBLE_EQ(default_fraction(143771, 8, 1, 8), 0.769);
  // 2 DP groups of tp 4 (SGLang's tp-size 8): + 3,072 + 1,536 = 19,456 MiB,
  // 0.86467 -> 0.865.
  EXPECT_DOUBLE_EQ(default_fraction(143771, 8, 1, 2), 0.865);
}

TEST(SglangMemory, DefaultFractionSmallGpusAndFloor) {
  // H100 80 GB (81,559 MiB), tp 8: 14,848 MiB reserved, 0.81795 -> 0.818.
  EXPECT_DOUBLE_EQ(default_fraction(81559, 8, 1, 1), 0.818);
  // tp 1 on an H100: 256 slots, 512 + 12288 + 128 + 512 = 13,440 MiB,
  // (81559 - 13440) / 81559 = 0.83521 -> 0.835.
  EXPECT_DOUBLE_EQ(default_fraction(81559, 1, 1, 1), 0.835);
  // A 24 GiB card (24,576 MiB, tp 1): chunked 4096, 48 slots: 512 + 6144 +
  // 128 + 96 = 6,880 MiB, no 10 GiB floor below 60 GiB: 0.72005 -> 0.72.
  EXPECT_DOUBLE_EQ(default_fraction(24576, 1, 1, 1), 0.72);
  kvs_sglang_default_fraction d{};
  kvs_error err;
  kvs_sglang_launch bad{0, 8, 1, 1, false, 0, 0};
  EXPECT_EQ(kvs_sglang_default_mem_fraction(&bad, &d, &err), KVS_ERR_INVALID_ARGUMENT);
}

// SGLang's floor: on a GPU above 60 GiB the reserve is at least 10 GiB.
// Its default chunked prefill and decode slots on such a GPU reserve more
// than that already (12,800 MiB and up), so the floor shows only with
// smaller ones given: chunked prefill 2048 and `slots` decode slots at
// tp 1 reserve 512 + 2048 x 1.5 + 1 / 8 x 1024 + 2 x slots = 3,712 + 2 x
// slots MiB.
kvs_sglang_default_fraction small_launch(uint64_t mib, uint64_t slots) {
  kvs_sglang_launch launch{mib, 1, 1, 1, false, 2048, slots};
  kvs_sglang_default_fraction d{};
  kvs_error err;
  EXPECT_EQ(kvs_sglang_default_mem_fraction(&launch, &d, &err), KVS_OK) << err.message;
  return d;
}

TEST(SglangMemory, TheTenGibFloorAtItsEdges) {
  // 8 slots: 3,728 MiB. At exactly 60 GiB (61,440 MiB) there is no floor:
  // (61440 - 3728) / 61440 = 0.93932 -> 0.939.
  kvs_sglang_default_fraction at = small_launch(61440, 8);
  EXPECT_DOUBLE_EQ(at.reserved_mib, 3728.0) << "no floor at 60 GiB itself";
  EXPECT_DOUBLE_EQ(at.mem_fraction_static, 0.939);
  // One MiB more and the reserve is the floor, 10,240 MiB:
  // (61441 - 10240) / 61441 = 0.83334 -> 0.833.
  kvs_sglang_default_fraction above = small_launch(61441, 8);
  EXPECT_DOUBLE_EQ(above.reserved_mib, 10240.0)
      << "a GPU above 60 GiB reserves at least SGLang's 10 GiB floor";
  EXPECT_DOUBLE_EQ(above.mem_fraction_static, 0.833);
  // On an H200 (143,771 MiB): (143771 - 10240) / 143771 = 0.92878 ->
  // 0.929, not the 0.974 of the 3,728 MiB below the floor.
  EXPECT_DOUBLE_EQ(small_launch(143771, 8).mem_fraction_static, 0.929);
  // The reserve's own edge: 3,263 slots reserve 10,238 MiB, raised to the
  // floor; 3,264 reserve it exactly; 3,265 reserve 10,242, above it, kept.
  EXPECT_DOUBLE_EQ(small_launch(143771, 3263).reserved_mib, 10240.0);
  EXPECT_DOUBLE_EQ(small_launch(143771, 3264).reserved_mib, 10240.0);
  EXPECT_DOUBLE_EQ(small_launch(143771, 3265).reserved_mib, 10242.0);
  // (143771 - 10242) / 143771 = 0.92876 -> 0.929 as well.
  EXPECT_DOUBLE_EQ(small_launch(143771, 3265).mem_fraction_static, 0.929);
}

}  // namespace

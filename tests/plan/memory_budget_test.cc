// The device budget rule: floor(memory x ratio) - weights - reserve, each
// term recorded, refusals that name the terms and write nothing.
#include "plan/memory_budget.h"

#include <gtest/gtest.h>
#include <string.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace {

constexpr uint64_t GiB = uint64_t(1) << 30;
constexpr uint64_t MiB = uint64_t(1) << 20;

bool contains(const char *message, const std::string &what) {
  return std::string(message).find(what) != std::string::npos;
}

// A budget filled with a pattern, to tell whether a call wrote it.
struct Poisoned {
  kvs_memory_budget value;
  kvs_memory_budget before;
  Poisoned() {
    memset(&value, 0xC3, sizeof value);
    memcpy(&before, &value, sizeof value);
  }
  bool untouched() const { return memcmp(&value, &before, sizeof value) == 0; }
};

}  // namespace

TEST(MemoryBudget, an_h200_with_weights_and_a_reserve_gets_the_exact_bytes_left) {
  // 141 GB nominal x 0.9 = 126.9 GB, in integers: 141e9 * 9 / 10. The
  // double 0.9 lies above 9/10, so the floor of the double product cannot
  // fall below that integer, and the product is far from the next one.
  const uint64_t memory = 141000000000ull;
  const uint64_t share = memory * 9 / 10;
  ASSERT_EQ(share, 126900000000ull);
  const uint64_t weights = 60 * GiB;   // 64424509440
  const uint64_t reserve = 512 * MiB;  // 536870912
  kvs_memory_budget b;
  kvs_error err;
  ASSERT_EQ(kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, memory, 0.9, weights, reserve, &b, &err),
            KVS_OK)
      << err.message;
  EXPECT_EQ(b.budget_bytes, 61938619648ull);
  EXPECT_EQ(b.budget_bytes, share - weights - reserve);
  EXPECT_EQ(b.source, KVS_BUDGET_NOMINAL);
  EXPECT_EQ(b.memory_bytes, memory);
  EXPECT_EQ(b.memory_ratio, 0.9);
  EXPECT_EQ(b.weights_bytes, weights);
  EXPECT_EQ(b.reserve_bytes, reserve);
}

TEST(MemoryBudget, the_share_is_floored_to_whole_bytes) {
  kvs_memory_budget b;
  kvs_error err;
  // 1001 x 0.5 = 500.5 -> 500; 100 - 0 - 7 after that.
  ASSERT_EQ(kvs_memory_budget_rule(KVS_BUDGET_MEASURED, 1001, 0.5, 100, 7, &b, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(b.budget_bytes, 500u - 100u - 7u);
  EXPECT_EQ(b.source, KVS_BUDGET_MEASURED);
  // Ratio 1 takes every byte.
  ASSERT_EQ(kvs_memory_budget_rule(KVS_BUDGET_MEASURED, 80 * GiB, 1.0, 0, 0, &b, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(b.budget_bytes, 80 * GiB);
}

TEST(MemoryBudget, the_budget_is_one_byte_at_the_edge_and_refused_past_it) {
  const uint64_t memory = 1000, weights = 600, reserve = 399;  // share 1000
  kvs_memory_budget b;
  kvs_error err;
  ASSERT_EQ(kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, memory, 1.0, weights, reserve, &b, &err),
            KVS_OK)
      << err.message;
  EXPECT_EQ(b.budget_bytes, 1u);
  Poisoned out;
  EXPECT_EQ(kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, memory, 1.0, weights + 1, reserve,
                                   &out.value, &err),
            KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_TRUE(out.untouched());
  EXPECT_EQ(kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, memory, 1.0, weights, reserve + 1,
                                   &out.value, &err),
            KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_TRUE(out.untouched());
}

TEST(MemoryBudget, weights_taking_the_whole_share_are_refused_naming_the_weights) {
  const uint64_t memory = 141000000000ull;
  const uint64_t share = memory * 9 / 10;
  for (uint64_t weights : {share, share + 1, UINT64_MAX}) {
    SCOPED_TRACE(weights);
    Poisoned out;
    kvs_error err;
    EXPECT_EQ(kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, memory, 0.9, weights, 512 * MiB,
                                     &out.value, &err),
              KVS_ERR_BUDGET_TOO_SMALL);
    EXPECT_TRUE(contains(err.message, "weights")) << err.message;
    EXPECT_TRUE(contains(err.message, std::to_string(weights))) << err.message;
    EXPECT_TRUE(contains(err.message, std::to_string(share))) << err.message;
    EXPECT_TRUE(contains(err.message, std::to_string(512 * MiB))) << err.message;
    EXPECT_TRUE(contains(err.message, "nominal")) << err.message;
    EXPECT_TRUE(out.untouched());
  }
  // With no reserve the weights alone may not take every byte either.
  Poisoned out;
  kvs_error err;
  EXPECT_EQ(kvs_memory_budget_rule(KVS_BUDGET_MEASURED, memory, 0.9, share, 0, &out.value, &err),
            KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_TRUE(contains(err.message, "weights")) << err.message;
  EXPECT_TRUE(contains(err.message, "free")) << err.message;
  EXPECT_TRUE(out.untouched());
}

TEST(MemoryBudget, no_weights_keeps_the_reserve_only_message) {
  Poisoned out;
  kvs_error err;
  // 1 GiB measured x 0.5 = 512 MiB, not above a 512 MiB reserve.
  EXPECT_EQ(kvs_memory_budget_rule(KVS_BUDGET_MEASURED, GiB, 0.5, 0, 512 * MiB, &out.value, &err),
            KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_TRUE(contains(err.message, "reserve")) << err.message;
  EXPECT_TRUE(contains(err.message, std::to_string(512 * MiB))) << err.message;
  EXPECT_TRUE(contains(err.message, "free")) << err.message;
  EXPECT_FALSE(contains(err.message, "weights")) << err.message;
  EXPECT_TRUE(out.untouched());
}

TEST(MemoryBudget, a_ratio_outside_0_to_1_is_refused) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double ratio : {0.0, -0.0, -0.5, 1.5, 1.0000001, nan, inf, -inf}) {
    SCOPED_TRACE(ratio);
    Poisoned out;
    kvs_error err;
    EXPECT_EQ(
        kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, 141000000000ull, ratio, 0, 0, &out.value, &err),
        KVS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message, "ratio")) << err.message;
    EXPECT_TRUE(out.untouched());
  }
}

TEST(MemoryBudget, the_rule_does_not_apply_to_explicit_bytes) {
  Poisoned out;
  kvs_error err;
  EXPECT_EQ(kvs_memory_budget_rule(KVS_BUDGET_EXPLICIT, GiB, 0.9, 0, 0, &out.value, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "explicit")) << err.message;
  EXPECT_TRUE(out.untouched());
  EXPECT_EQ(kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, GiB, 0.9, 0, 0, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
}

TEST(MemoryBudget, an_explicit_budget_is_taken_as_it_is_with_no_weights) {
  Poisoned b;
  kvs_error err;
  ASSERT_EQ(kvs_memory_budget_explicit(70 * GiB + 3, &b.value, &err), KVS_OK) << err.message;
  EXPECT_EQ(b.value.source, KVS_BUDGET_EXPLICIT);
  EXPECT_EQ(b.value.budget_bytes, 70 * GiB + 3);
  EXPECT_EQ(b.value.memory_bytes, 70 * GiB + 3);
  EXPECT_EQ(b.value.memory_ratio, 1.0);
  EXPECT_EQ(b.value.weights_bytes, 0u);
  EXPECT_EQ(b.value.reserve_bytes, 0u);

  Poisoned out;
  EXPECT_EQ(kvs_memory_budget_explicit(0, &out.value, &err), KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_TRUE(out.untouched());
  EXPECT_EQ(kvs_memory_budget_explicit(1, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
}

TEST(MemoryBudget, the_sources_have_names) {
  EXPECT_STREQ(kvs_budget_source_name(KVS_BUDGET_MEASURED), "measured");
  EXPECT_STREQ(kvs_budget_source_name(KVS_BUDGET_NOMINAL), "nominal");
  EXPECT_STREQ(kvs_budget_source_name(KVS_BUDGET_EXPLICIT), "explicit");
}

// The rule's arithmetic alone, as fit searches shares of memory: the same
// bytes as the rule inside (0, 1], shares above 1 allowed, and false (with
// nothing written) exactly where the rule finds the budget empty.
TEST(MemoryBudget, the_bare_arithmetic_agrees_with_the_rule_and_takes_shares_above_one) {
  const uint64_t memory = 141000000000ull;
  for (double ratio : {0.05, 0.5, 0.9, 1.0}) {
    for (uint64_t weights : {uint64_t(0), 20 * GiB}) {
      kvs_memory_budget rule;
      uint64_t bytes = 7;
      bool fits = kvs_memory_budget_bytes(memory, ratio, weights, 512 * MiB, &bytes);
      kvs_status status = kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, memory, ratio, weights,
                                                 512 * MiB, &rule, nullptr);
      ASSERT_EQ(fits, status == KVS_OK) << ratio << " " << weights;
      if (fits) {
        EXPECT_EQ(bytes, rule.budget_bytes) << ratio << " " << weights;
      } else {
        EXPECT_EQ(bytes, 7u) << "a refusal writes nothing";
      }
    }
  }
  uint64_t bytes = 0;
  ASSERT_TRUE(kvs_memory_budget_bytes(80 * GiB, 2.5, 10 * GiB, GiB, &bytes));
  EXPECT_EQ(bytes, 200 * GiB - 11 * GiB);
  // Exactly used up, and one byte short of it.
  EXPECT_FALSE(kvs_memory_budget_bytes(10 * GiB, 1.0, 9 * GiB, GiB, &bytes));
  ASSERT_TRUE(kvs_memory_budget_bytes(10 * GiB, 1.0, 9 * GiB, GiB - 1, &bytes));
  EXPECT_EQ(bytes, 1u);
  EXPECT_FALSE(kvs_memory_budget_bytes(10 * GiB, -0.5, 0, 0, &bytes));
  EXPECT_FALSE(kvs_memory_budget_bytes(10 * GiB, std::nan(""), 0, 0, &bytes));
}

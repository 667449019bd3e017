// kvs_bench_block runs and reports both throughputs. KVS_BENCH_FULL=1 runs
// the full-length measurement instead of the quick one.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include <jansson.h>

#include "tools/bench_block.h"

TEST(BenchBlock, reports_encode_and_decode_verify_throughput) {
  json_t *results = json_object();
  const char *full = getenv("KVS_BENCH_FULL");
  kvs_bench_block(results, full != nullptr && full[0] == '1' ? 0 : 1);
  json_t *error = json_object_get(results, "block_error");
  EXPECT_EQ(error, nullptr) << (error ? json_string_value(error) : "");
  json_t *enc = json_object_get(results, "block_encode_gbps");
  json_t *dec = json_object_get(results, "block_decode_verify_gbps");
  ASSERT_NE(enc, nullptr);
  ASSERT_NE(dec, nullptr);
  EXPECT_GT(json_real_value(enc), 0.0);
  EXPECT_GT(json_real_value(dec), 0.0);
  // 61 layers x (K + V) x 128 tokens x 512 x 2 bytes, plus headers.
  json_t *bytes = json_object_get(results, "block_encoded_bytes");
  ASSERT_NE(bytes, nullptr);
  EXPECT_GT(json_integer_value(bytes), 61LL * 2 * 128 * 512 * 2);
  EXPECT_LT(json_integer_value(bytes), 61LL * 2 * 128 * 512 * 2 + 4096);
  // Version 3: one DSV4-Flash page block, its digest against memcpy.
  for (const char *key : {"page_memcpy_gbps", "page_digest_gbps", "page_encode_gbps",
                          "page_decode_verify_gbps", "page_digest_over_memcpy"}) {
    json_t *v = json_object_get(results, key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_GT(json_real_value(v), 0.0) << key;
  }
  json_t *rows = json_object_get(results, "page_row_bytes");
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(json_integer_value(rows),
            21LL * 64 * 584 + 21LL * 64 * 132 + 20LL * 2 * 584 + 21LL * 2 * 8192 + 21LL * 2 * 2048);
  char *text = json_dumps(results, JSON_INDENT(2));
  std::printf("%s\n", text);
  free(text);
  json_decref(results);
}

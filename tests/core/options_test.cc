// Versioned options: a caller built against an older kvshard passes a
// shorter struct and gets this build's defaults for the fields it lacks; a
// longer struct (a newer caller) is refused; so is one too short to hold
// its size. Then the same through real options structs.
#include "core/options.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/geometry.h"
#include "pool/window_pool.h"

namespace {

// Version 2 of an options struct appended `b` and `c` to version 1, after
// version 1's last byte (a new field never reuses an old struct's tail
// padding, which an older caller leaves unset).
struct OptionsV1 {
  size_t size;
  int64_t a;
};
struct OptionsV2 {
  size_t size;
  int64_t a;
  int32_t b;
  double c;
};
const OptionsV2 kDefaults = {sizeof(OptionsV2), 1, 2, 3.5};

}  // namespace

TEST(Options, an_older_callers_struct_keeps_its_fields_and_defaults_the_rest) {
  OptionsV1 old = {sizeof(OptionsV1), 40};
  OptionsV2 out;
  std::memset(&out, 0x5a, sizeof out);
  kvs_error err;
  ASSERT_EQ(kvs_options_adopt(&old, &kDefaults, sizeof kDefaults, "INIT", &out, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(out.size, sizeof(OptionsV2));
  EXPECT_EQ(out.a, 40);
  EXPECT_EQ(out.b, 2);
  EXPECT_EQ(out.c, 3.5);
}

TEST(Options, this_builds_struct_is_taken_whole_and_null_is_the_defaults) {
  OptionsV2 mine = {sizeof(OptionsV2), 7, 8, 9.25};
  OptionsV2 out;
  ASSERT_EQ(kvs_options_adopt(&mine, &kDefaults, sizeof kDefaults, "INIT", &out, nullptr), KVS_OK);
  EXPECT_EQ(out.a, 7);
  EXPECT_EQ(out.b, 8);
  EXPECT_EQ(out.c, 9.25);
  ASSERT_EQ(kvs_options_adopt(nullptr, &kDefaults, sizeof kDefaults, "INIT", &out, nullptr),
            KVS_OK);
  EXPECT_EQ(out.a, 1);
  EXPECT_EQ(out.c, 3.5);
}

TEST(Options, a_newer_or_truncated_struct_is_refused_and_nothing_is_written) {
  struct OptionsV3 {
    OptionsV2 v2;
    int d;
  } newer = {{sizeof(OptionsV3), 1, 2, 3.0}, 4};
  OptionsV2 out = {0, -1, -1, -1.0};
  kvs_error err;
  EXPECT_EQ(
      kvs_options_adopt(&newer, &kDefaults, sizeof kDefaults, "KVS_X_OPTIONS_INIT", &out, &err),
      KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("start from KVS_X_OPTIONS_INIT"), std::string::npos)
      << err.message;
  EXPECT_EQ(out.a, -1);
  OptionsV2 zero = kDefaults;
  zero.size = 0;  // the size field never set
  EXPECT_EQ(kvs_options_adopt(&zero, &kDefaults, sizeof kDefaults, "INIT", &out, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out.a, -1);
}

// A real struct: a window pool created with only the size field set (the
// oldest possible caller) gets every default, and one with a size larger
// than this build's is refused naming the initialiser.
TEST(Options, the_window_pool_takes_an_older_callers_options) {
  kvs_geometry g;
  ASSERT_EQ(kvs_geometry_builtin("dsv4-flash", &g, nullptr), KVS_OK);
  kvs_pool_sizes sizes;
  kvs_error err;
  ASSERT_EQ(kvs_pool_sizes_compute(64, &g, 0.1, 128, KVS_WINDOW_FROM_RATIO, &sizes, &err), KVS_OK)
      << err.message;
  size_t oldest = sizeof(size_t);
  kvs_window_pool_t pool = nullptr;
  ASSERT_EQ(kvs_window_pool_create(&sizes, reinterpret_cast<kvs_window_pool_options *>(&oldest),
                                   &pool, &err),
            KVS_OK)
      << err.message;
  kvs_window_pool_destroy(pool);
  kvs_window_pool_options newer = KVS_WINDOW_POOL_OPTIONS_INIT;
  newer.size += 8;
  pool = nullptr;
  EXPECT_EQ(kvs_window_pool_create(&sizes, &newer, &pool, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(pool, nullptr);
  EXPECT_NE(std::string(err.message).find("KVS_WINDOW_POOL_OPTIONS_INIT"), std::string::npos)
      << err.message;
}

// Ring locations and table arithmetic at the edges of int64 and uint64:
// a value too large for its result is refused (KVS_ERR_OVERFLOW naming the
// values) or reads as not fitting, never a wrapped location. The seed's own
// values are in request_slots_test and window_pool_test; here only the edges.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/device_ref.h"
#include "core/table_math.h"
#include "pool/window_pool.h"

namespace {

constexpr int64_t kMax = INT64_MAX;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

TEST(RequestStateLoc, a_slot_whose_ring_lies_past_int64_is_refused_naming_the_values) {
  int64_t out = 42;
  kvs_error err;
  EXPECT_EQ(kvs_request_state_loc(kMax, 5, 8, &out, &err), KVS_ERR_OVERFLOW);
  EXPECT_TRUE(contains(err.message, "9223372036854775807")) << err.message;
  EXPECT_TRUE(contains(err.message, "ring 8")) << err.message;
  EXPECT_TRUE(contains(err.message, "position 5")) << err.message;
  EXPECT_EQ(out, 42);  // untouched
}

TEST(RequestStateLoc, the_largest_location_that_fits_is_exact_and_one_more_slot_is_refused) {
  const uint64_t ring = 8;
  const int64_t pos = 7;  // pos % ring = 7, the largest offset
  const int64_t last = (kMax - 7) / int64_t(ring);
  int64_t out = 0;
  ASSERT_EQ(kvs_request_state_loc(last, pos, ring, &out, nullptr), KVS_OK);
  EXPECT_EQ(out, last * int64_t(ring) + 7);
  EXPECT_LE(out, kMax);
  EXPECT_EQ(kvs_request_state_loc(last + 1, pos, ring, &out, nullptr), KVS_ERR_OVERFLOW);
  // A smaller offset leaves room for the same slot at position 0.
  ASSERT_EQ(kvs_request_state_loc(last, 0, ring, &out, nullptr), KVS_OK);
  EXPECT_EQ(out, last * int64_t(ring));
}

TEST(RequestStateLoc, a_ring_past_int64_holds_slot_0_only) {
  int64_t out = 0;
  ASSERT_EQ(kvs_request_state_loc(0, 5, UINT64_MAX, &out, nullptr), KVS_OK);
  EXPECT_EQ(out, 5);
  EXPECT_EQ(kvs_request_state_loc(1, 5, UINT64_MAX, &out, nullptr), KVS_ERR_OVERFLOW);
  EXPECT_EQ(kvs_request_state_loc(1, 0, uint64_t(kMax) + 1, &out, nullptr), KVS_ERR_OVERFLOW);
}

TEST(RequestStateLoc, idle_rows_still_read_minus_one_whatever_the_ring) {
  int64_t out = 0;
  ASSERT_EQ(kvs_request_state_loc(-1, kMax, UINT64_MAX, &out, nullptr), KVS_OK);
  EXPECT_EQ(out, -1);
  ASSERT_EQ(kvs_request_state_loc(kMax, -1, 8, &out, nullptr), KVS_OK);
  EXPECT_EQ(out, -1);
}

// The per-page sibling cannot overflow: ring divides P, so the location is
// at most the slot itself. Checked at the largest slot.
TEST(StateLoc, the_largest_window_slot_has_its_exact_location) {
  int64_t out = 0;
  ASSERT_EQ(kvs_state_loc(kMax, 8, 128, &out, nullptr), KVS_OK);
  EXPECT_EQ(out, kMax / 128 * 8 + kMax % 8);
  ASSERT_EQ(kvs_state_loc(kMax, 128, 128, &out, nullptr), KVS_OK);
  EXPECT_EQ(out, kMax);
  EXPECT_EQ(kvs_state_loc(0, 8, uint64_t(kMax) + 1, &out, nullptr), KVS_ERR_INVALID_ARGUMENT);
}

// The shared kernel arithmetic: the largest full page (2^64 - 1) does not
// wrap to page 0 and fit; every allocatable page still fits.
TEST(TableMath, the_largest_full_page_does_not_wrap_into_the_table) {
  EXPECT_EQ(kvs_tm_entry_fits(4, 4, UINT64_MAX, 0), 0);
  EXPECT_EQ(kvs_tm_entry_fits(4, 4, UINT64_MAX - 1, 0), 0);
  EXPECT_EQ(kvs_tm_entry_fits(4, 4, 0, 0), 1);
  EXPECT_EQ(kvs_tm_entry_fits(4, 4, 2, 2), 1);
  EXPECT_EQ(kvs_tm_entry_fits(4, 4, 3, 0), 0);   // the dummy full page
  EXPECT_EQ(kvs_tm_entry_fits(4, 4, 0, 3), 0);   // the dummy window page
  EXPECT_EQ(kvs_tm_entry_fits(4, 4, 0, -1), 1);  // a free
  EXPECT_EQ(kvs_tm_entry_fits(0, 4, 0, 0), 0);   // no table at all
}

TEST(TableMath, a_ring_slot_past_int64_is_not_reached) {
  const kvs_tm_div page = kvs_tm_div_make(128);
  EXPECT_EQ(kvs_tm_ring_position(5, UINT64_C(1) << 63, page), -1);
  EXPECT_EQ(kvs_tm_ring_position(kMax, UINT64_MAX, page), -1);
  // Valid inputs keep their values: slot 3 at position 300 holds 259.
  EXPECT_EQ(kvs_tm_ring_position(300, 3, page), 259);
  EXPECT_EQ(kvs_tm_ring_position(2, 3, page), -1);
}

TEST(DeviceRef, an_entry_fits_no_table_whose_dims_divide_by_zero) {
  const kvs_journal_entry entry = {0, 0};
  kvs_table_dims dims = {0, 256, 256};
  EXPECT_FALSE(kvs_journal_entry_fits(&dims, &entry));
  dims.page = 128;
  EXPECT_TRUE(kvs_journal_entry_fits(&dims, &entry));
  const kvs_journal_entry huge = {uint64_t(kMax), 0};  // not a slot entry
  EXPECT_FALSE(kvs_journal_entry_fits(&dims, &huge));
}

}  // namespace

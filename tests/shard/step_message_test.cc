// The step message: a fixed header and the journal entries, checked on read.
#include "shard/step_message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace {

std::vector<uint8_t> message(uint32_t count, size_t capacity) {
  std::vector<uint8_t> buf(kvs_step_message_bytes(capacity));
  kvs_step_header h;
  std::memset(&h, 0, sizeof h);
  h.magic = KVS_STEP_MAGIC;
  h.version = KVS_STEP_VERSION;
  h.count = count;
  h.step = 12;
  h.digest = 0x1234;
  h.aux_step = KVS_STEP_NO_AUX;
  kvs_step_message_put_header(buf.data(), &h);
  kvs_journal_entry *e = kvs_step_message_entries(buf.data());
  for (uint32_t i = 0; i < count && i < capacity; i++) e[i] = {i, int64_t(i) - 1};
  return buf;
}

}  // namespace

TEST(StepMessage, sizes_are_a_48_byte_header_plus_16_per_entry) {
  EXPECT_EQ(kvs_step_message_bytes(0), 48u);
  EXPECT_EQ(kvs_step_message_bytes(10), 208u);
  EXPECT_EQ(kvs_step_payload_bytes(3), 96u);
}

TEST(StepMessage, a_well_formed_message_reads_back) {
  auto buf = message(3, 8);
  kvs_step_header h;
  const kvs_journal_entry *e = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_step_message_read(buf.data(), buf.size(), 8, &h, &e, &err), KVS_OK) << err.message;
  EXPECT_EQ(h.step, 12u);
  EXPECT_EQ(h.count, 3u);
  EXPECT_EQ(h.digest, 0x1234u);
  EXPECT_EQ(e[2].full_page, 2u);
  EXPECT_EQ(e[0].window_page, KVS_JOURNAL_FREED);
}

TEST(StepMessage, foreign_short_or_overfull_messages_are_corrupt_by_value) {
  kvs_step_header h;
  const kvs_journal_entry *e;
  kvs_error err;
  auto buf = message(3, 8);
  EXPECT_EQ(kvs_step_message_read(buf.data(), 40, 8, &h, &e, &err), KVS_ERR_CORRUPT);
  EXPECT_STREQ(err.message, "step message of 40 bytes is shorter than its 48-byte header");
  buf[0] ^= 0xff;
  EXPECT_EQ(kvs_step_message_read(buf.data(), buf.size(), 8, &h, &e, &err), KVS_ERR_CORRUPT);
  EXPECT_STREQ(err.message,
               "step message magic is 0x4a5356b4, expected 0x4a53564b: not a binding journal");
  auto over = message(9, 8);
  EXPECT_EQ(kvs_step_message_read(over.data(), over.size(), 8, &h, &e, &err), KVS_ERR_CORRUPT);
  EXPECT_STREQ(err.message,
               "step 12 message count is 9 entries, but the step capacity is 8 and the "
               "message holds 8");
  auto v = message(1, 8);
  v[4] = 7;  // version
  EXPECT_EQ(kvs_step_message_read(v.data(), v.size(), 8, &h, &e, &err), KVS_ERR_CORRUPT);
  EXPECT_STREQ(err.message, "step message version is 7, this build reads version 1");
}

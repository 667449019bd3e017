// Chain hashes: whole blocks only, chained through the parent, pinned to
// XXH3-128 over a fixed byte form.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <xxhash.h>

#include "blocks/block_hash.h"

namespace {

std::vector<uint32_t> tokens(uint32_t first, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; i++) t[i] = first + static_cast<uint32_t>(i) * 7919u;
  return t;
}

}  // namespace

TEST(BlockHash, a_partial_tail_block_has_no_hash) {
  std::vector<uint32_t> t = tokens(1, 3);
  kvs_block_hash h{7, 7};
  kvs_error err;
  EXPECT_EQ(kvs_block_hash_chain(nullptr, t.data(), t.size(), 4, &h, &err),
            KVS_ERR_INVALID_ARGUMENT);
  std::string text = err.message;
  EXPECT_NE(text.find("partial block of 3 tokens"), std::string::npos) << text;
  EXPECT_NE(text.find("block size 4"), std::string::npos) << text;
  EXPECT_EQ(h.high, 7u) << "untouched on failure";
  EXPECT_EQ(h.low, 7u);
  std::vector<uint32_t> five = tokens(1, 5);
  EXPECT_EQ(kvs_block_hash_chain(nullptr, five.data(), 5, 4, &h, &err), KVS_ERR_INVALID_ARGUMENT)
      << "more than one block is not truncated either";
  EXPECT_EQ(kvs_block_hash_chain(nullptr, five.data(), 0, 0, &h, &err), KVS_ERR_INVALID_ARGUMENT);
}

TEST(BlockHash, a_sequence_with_a_partial_tail_is_refused_not_truncated) {
  std::vector<uint32_t> t = tokens(1, 10);
  kvs_block_hash out[4];
  size_t n = 99;
  kvs_error err;
  EXPECT_EQ(kvs_block_hash_sequence(t.data(), t.size(), 4, out, 4, &n, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(n, 99u);
  EXPECT_NE(std::string(err.message).find("first 8 tokens"), std::string::npos) << err.message;
  ASSERT_EQ(kvs_block_hash_sequence(t.data(), 8, 4, out, 4, &n, &err), KVS_OK);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(kvs_block_hash_sequence(t.data(), 8, 4, out, 1, &n, &err), KVS_ERR_INVALID_ARGUMENT)
      << "output too small";
}

TEST(BlockHash, a_sequence_is_the_chain_of_its_blocks) {
  std::vector<uint32_t> t = tokens(5, 12);
  kvs_block_hash seq[3];
  ASSERT_EQ(kvs_block_hash_sequence(t.data(), 12, 4, seq, 3, nullptr, nullptr), KVS_OK);
  kvs_block_hash h0, h1, h2;
  ASSERT_EQ(kvs_block_hash_chain(nullptr, t.data(), 4, 4, &h0, nullptr), KVS_OK);
  ASSERT_EQ(kvs_block_hash_chain(&h0, t.data() + 4, 4, 4, &h1, nullptr), KVS_OK);
  ASSERT_EQ(kvs_block_hash_chain(&h1, t.data() + 8, 4, 4, &h2, nullptr), KVS_OK);
  EXPECT_TRUE(kvs_block_hash_equal(&seq[0], &h0));
  EXPECT_TRUE(kvs_block_hash_equal(&seq[1], &h1));
  EXPECT_TRUE(kvs_block_hash_equal(&seq[2], &h2));
}

TEST(BlockHash, the_hash_covers_the_parent_and_every_token) {
  std::vector<uint32_t> t = tokens(9, 16);
  kvs_block_hash root, again, child, other_parent_child;
  ASSERT_EQ(kvs_block_hash_chain(nullptr, t.data(), 16, 16, &root, nullptr), KVS_OK);
  ASSERT_EQ(kvs_block_hash_chain(nullptr, t.data(), 16, 16, &again, nullptr), KVS_OK);
  EXPECT_TRUE(kvs_block_hash_equal(&root, &again)) << "deterministic";
  ASSERT_EQ(kvs_block_hash_chain(&root, t.data(), 16, 16, &child, nullptr), KVS_OK);
  EXPECT_FALSE(kvs_block_hash_equal(&root, &child)) << "same tokens, other prefix";
  kvs_block_hash zero{0, 0};
  ASSERT_EQ(kvs_block_hash_chain(&zero, t.data(), 16, 16, &other_parent_child, nullptr), KVS_OK);
  EXPECT_FALSE(kvs_block_hash_equal(&root, &other_parent_child))
      << "no parent is not the same as a zero parent";
  for (size_t i = 0; i < t.size(); i++) {
    std::vector<uint32_t> u = t;
    u[i] ^= 1;
    kvs_block_hash h;
    ASSERT_EQ(kvs_block_hash_chain(nullptr, u.data(), 16, 16, &h, nullptr), KVS_OK);
    EXPECT_FALSE(kvs_block_hash_equal(&h, &root)) << "token " << i;
  }
}

TEST(BlockHash, the_byte_form_is_pinned) {
  // Root: a zero tag byte then little-endian u32 token ids. Child: a one
  // tag byte, the parent's high and low halves big-endian, then tokens.
  std::vector<uint32_t> t = {1, 0x01020304u};
  uint8_t root_bytes[] = {0, 1, 0, 0, 0, 4, 3, 2, 1};
  XXH128_hash_t want = XXH3_128bits(root_bytes, sizeof root_bytes);
  kvs_block_hash root;
  ASSERT_EQ(kvs_block_hash_chain(nullptr, t.data(), 2, 2, &root, nullptr), KVS_OK);
  EXPECT_EQ(root.high, want.high64);
  EXPECT_EQ(root.low, want.low64);

  std::vector<uint8_t> child_bytes = {1};
  for (int i = 7; i >= 0; i--) child_bytes.push_back(static_cast<uint8_t>(root.high >> (8 * i)));
  for (int i = 7; i >= 0; i--) child_bytes.push_back(static_cast<uint8_t>(root.low >> (8 * i)));
  child_bytes.insert(child_bytes.end(), root_bytes + 1, root_bytes + sizeof root_bytes);
  XXH128_hash_t want_child = XXH3_128bits(child_bytes.data(), child_bytes.size());
  kvs_block_hash child;
  ASSERT_EQ(kvs_block_hash_chain(&root, t.data(), 2, 2, &child, nullptr), KVS_OK);
  EXPECT_EQ(child.high, want_child.high64);
  EXPECT_EQ(child.low, want_child.low64);
}

TEST(BlockHash, long_blocks_hash_the_same_as_their_byte_form) {
  // More tokens than the internal conversion chunk.
  std::vector<uint32_t> t = tokens(3, 1000);
  std::vector<uint8_t> bytes = {0};
  for (uint32_t v : t) {
    for (int i = 0; i < 4; i++) bytes.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  XXH128_hash_t want = XXH3_128bits(bytes.data(), bytes.size());
  kvs_block_hash h;
  ASSERT_EQ(kvs_block_hash_chain(nullptr, t.data(), 1000, 1000, &h, nullptr), KVS_OK);
  EXPECT_EQ(h.high, want.high64);
  EXPECT_EQ(h.low, want.low64);
}

TEST(BlockHash, hex_round_trips_and_parse_is_strict) {
  kvs_block_hash h{0x0123456789abcdefull, 0xfedcba9876543210ull};
  char hex[KVS_BLOCK_HASH_HEX_LEN + 1];
  EXPECT_STREQ(kvs_block_hash_hex(&h, hex), "0123456789abcdeffedcba9876543210");
  kvs_block_hash back{};
  ASSERT_EQ(kvs_block_hash_parse(hex, &back, nullptr), KVS_OK);
  EXPECT_TRUE(kvs_block_hash_equal(&h, &back));
  ASSERT_EQ(kvs_block_hash_parse("0123456789ABCDEFFEDCBA9876543210", &back, nullptr), KVS_OK);
  EXPECT_TRUE(kvs_block_hash_equal(&h, &back));
  kvs_block_hash untouched{1, 2};
  EXPECT_EQ(kvs_block_hash_parse("0123", &untouched, nullptr), KVS_ERR_PARSE);
  EXPECT_EQ(kvs_block_hash_parse("0123456789abcdeffedcba98765432100", &untouched, nullptr),
            KVS_ERR_PARSE);
  EXPECT_EQ(kvs_block_hash_parse("0123456789abcdeffedcba987654321g", &untouched, nullptr),
            KVS_ERR_PARSE);
  EXPECT_EQ(untouched.high, 1u);
  EXPECT_EQ(untouched.low, 2u);
}

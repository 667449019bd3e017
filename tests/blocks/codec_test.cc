// The block codec: round trips, canonical form, and refusal of every
// truncation, every single-bit flip, oversized lengths and foreign input.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <xxhash.h>

#include "blocks/block_codec.h"
#include "blocks/block_hash.h"
#include "blocks/block_signature.h"
#include "blocks/block_signed.h"
#include "tests/blocks/block_test_util.h"

using kvs_test::expected;
using kvs_test::flat;
using kvs_test::from_payload;
using kvs_test::Layer;
using kvs_test::make_layout;
using kvs_test::payload;
using kvs_test::views;

namespace {

std::vector<uint8_t> encode_parts(const kvs_block_hash *key, const kvs_block_signature *sig,
                                  const std::vector<Layer> &layers) {
  std::vector<kvs_block_layer> v = views(layers);
  size_t size = 0;
  EXPECT_EQ(kvs_block_encoded_size(key, sig, v.data(), v.size(), &size, nullptr), KVS_OK);
  std::vector<uint8_t> out(size);
  size_t written = 0;
  EXPECT_EQ(kvs_block_encode_parts(key, sig, v.data(), v.size(), out.data(), out.size(), &written,
                                   nullptr),
            KVS_OK);
  EXPECT_EQ(written, size);
  return out;
}

// A small signed, keyed block: 2 layers x 1 head x 2 wide x 2 tokens.
std::vector<uint8_t> small_block(kvs_dtype dtype = KVS_DTYPE_F32) {
  std::vector<Layer> layers = payload(2, 1, 2, 2, dtype, 11);
  kvs_block_signature sig = from_payload("m", flat(2), layers, {0xab, 0xcd});
  kvs_block_hash key{0x1111, 0x2222};
  return encode_parts(&key, &sig, layers);
}

void put_u32(std::vector<uint8_t> &b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; i++) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

void put_u64(std::vector<uint8_t> &b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; i++) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Rewrites the trailing checksum so a crafted edit reaches the parser.
void fix_checksum(std::vector<uint8_t> &b) {
  put_u64(b, b.size() - 8, XXH3_64bits(b.data(), b.size() - 8));
}

kvs_status decode(const std::vector<uint8_t> &b, kvs_error *err = nullptr,
                  kvs_block_view *view = nullptr) {
  kvs_block_layer layers[8];
  kvs_block_view local;
  return kvs_block_decode_view(b.data(), b.size(), view ? view : &local, layers, 8, err);
}

}  // namespace

TEST(BlockCodec, round_trip_f32_and_bf16) {
  for (kvs_dtype dtype : {KVS_DTYPE_F32, KVS_DTYPE_BF16}) {
    SCOPED_TRACE(kvs_dtype_name(dtype));
    std::vector<Layer> layers = payload(3, 2, 8, 4, dtype, 42);
    std::vector<kvs_block_layer> v = views(layers);
    std::vector<uint8_t> weights = {1, 2, 3};
    kvs_block_t block = nullptr;
    ASSERT_EQ(kvs_block_stamp("model-a", weights.data(), weights.size(), make_layout(4, 128),
                              v.data(), v.size(), &block, nullptr, nullptr),
              KVS_OK);
    kvs_block_hash key{0xfeed, 0xbeef};
    size_t size = kvs_block_encoded_size_of(&key, block);
    std::vector<uint8_t> bytes(size);
    size_t written = 0;
    ASSERT_EQ(kvs_block_encode(&key, block, bytes.data(), bytes.size(), &written, nullptr), KVS_OK);
    ASSERT_EQ(written, size);

    kvs_block_view view;
    kvs_unverified_block_t ub = nullptr;
    ASSERT_EQ(kvs_block_decode(bytes.data(), bytes.size(), &view, &ub, nullptr), KVS_OK);
    EXPECT_TRUE(view.readable);
    EXPECT_TRUE(view.marked);
    EXPECT_TRUE(view.keyed);
    EXPECT_TRUE(kvs_block_hash_equal(&view.key, &key));
    EXPECT_EQ(view.format_version, KVS_BLOCK_FORMAT_VERSION);
    EXPECT_EQ(view.n_layers, 3u);
    EXPECT_EQ(view.encoded_bytes, size);
    EXPECT_EQ(0, std::memcmp(&view.signature, kvs_block_signature_of(block), sizeof view.signature))
        << "the recorded signature comes back field for field";

    kvs_block_signature reader =
        expected("model-a", make_layout(4, 128), 3, 2, 8, 4, dtype, weights);
    kvs_block_t back = nullptr;
    ASSERT_EQ(kvs_unverified_block_verify(&ub, &reader, &back, nullptr, nullptr), KVS_OK);
    size_t n = 0;
    const kvs_block_layer *got = kvs_block_layers(back, &n);
    EXPECT_TRUE(kvs_test::same_payload(got, n, v.data(), v.size()));

    // Canonical: the decoded block re-encodes to the same bytes.
    std::vector<uint8_t> again(size);
    ASSERT_EQ(kvs_block_encode(&key, back, again.data(), again.size(), nullptr, nullptr), KVS_OK);
    EXPECT_EQ(again, bytes);
    kvs_block_destroy(back);
    kvs_block_destroy(block);
  }
}

TEST(BlockCodec, zero_copy_views_point_into_the_input) {
  std::vector<Layer> layers = payload(2, 1, 3, 3, KVS_DTYPE_BF16, 5);  // odd byte counts: padding
  kvs_block_signature sig = from_payload("m", flat(3), layers);
  std::vector<uint8_t> bytes = encode_parts(nullptr, &sig, layers);
  kvs_block_layer out[2];
  kvs_block_view view;
  ASSERT_EQ(kvs_block_decode_view(bytes.data(), bytes.size(), &view, out, 2, nullptr), KVS_OK);
  EXPECT_FALSE(view.keyed);
  std::vector<kvs_block_layer> v = views(layers);
  EXPECT_TRUE(kvs_test::same_payload(out, 2, v.data(), 2));
  for (const kvs_block_layer &l : out) {
    const uint8_t *k = static_cast<const uint8_t *>(l.k);
    EXPECT_GE(k, bytes.data());
    EXPECT_LT(k, bytes.data() + bytes.size());
    EXPECT_EQ((k - bytes.data()) % 8, 0) << "sections are 8-byte aligned";
  }
  // Counting only, then a layer array that is too small.
  kvs_block_view counted;
  ASSERT_EQ(kvs_block_decode_view(bytes.data(), bytes.size(), &counted, nullptr, 0, nullptr),
            KVS_OK);
  EXPECT_EQ(counted.n_layers, 2u);
  kvs_error err;
  EXPECT_EQ(kvs_block_decode_view(bytes.data(), bytes.size(), &counted, out, 1, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(counted.n_layers, 2u);
}

TEST(BlockCodec, an_unmarked_block_decodes_and_is_then_refused) {
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  std::vector<uint8_t> bytes = encode_parts(nullptr, nullptr, layers);
  kvs_block_view view;
  kvs_unverified_block_t ub = nullptr;
  ASSERT_EQ(kvs_block_decode(bytes.data(), bytes.size(), &view, &ub, nullptr), KVS_OK);
  EXPECT_FALSE(view.marked);
  EXPECT_EQ(kvs_unverified_block_signature(ub), nullptr);
  kvs_block_signature reader = expected("model-a", flat(4), 2, 2, 8, 4);
  kvs_block_t block = nullptr;
  kvs_signature_error why;
  EXPECT_EQ(kvs_unverified_block_verify(&ub, &reader, &block, &why, nullptr), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_UNMARKED);
  kvs_unverified_block_destroy(ub);
}

TEST(BlockCodec, a_lying_stamp_is_written_faithfully_and_refused_on_read) {
  std::vector<Layer> layers = payload(3, 2, 8, 4);
  kvs_block_signature lying = expected("model-a", flat(4), 3, 2, 16, 4);
  std::vector<uint8_t> bytes = encode_parts(nullptr, &lying, layers);
  kvs_unverified_block_t ub = nullptr;
  ASSERT_EQ(kvs_block_decode(bytes.data(), bytes.size(), nullptr, &ub, nullptr), KVS_OK);
  kvs_block_t block = nullptr;
  kvs_signature_error why;
  EXPECT_EQ(kvs_unverified_block_verify(&ub, &lying, &block, &why, nullptr), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_PAYLOAD_MISMATCH);
  EXPECT_STREQ(why.field, "head_dim");
  EXPECT_STREQ(why.recorded, "16");
  EXPECT_STREQ(why.actual, "8");
  kvs_unverified_block_destroy(ub);
}

TEST(BlockCodec, every_single_bit_flip_is_refused) {
  for (kvs_dtype dtype : {KVS_DTYPE_F32, KVS_DTYPE_BF16}) {
    std::vector<uint8_t> good = small_block(dtype);
    ASSERT_EQ(decode(good), KVS_OK);
    size_t flips = 0;
    for (size_t byte = 0; byte < good.size(); byte++) {
      for (int bit = 0; bit < 8; bit++) {
        std::vector<uint8_t> bad = good;
        bad[byte] ^= static_cast<uint8_t>(1u << bit);
        kvs_error err;
        kvs_block_view view;
        view.n_layers = 12345;
        ASSERT_EQ(decode(bad, &err, &view), KVS_ERR_CORRUPT)
            << "flip of bit " << bit << " in byte " << byte << " of " << good.size();
        EXPECT_EQ(err.status, KVS_ERR_CORRUPT);
        EXPECT_NE(err.message[0], '\0');
        EXPECT_EQ(view.n_layers, 12345u) << "view untouched on failure";
        kvs_unverified_block_t ub = nullptr;
        ASSERT_EQ(kvs_block_decode(bad.data(), bad.size(), nullptr, &ub, nullptr), KVS_ERR_CORRUPT);
        EXPECT_EQ(ub, nullptr);
        flips++;
      }
    }
    EXPECT_EQ(flips, good.size() * 8);
  }
}

TEST(BlockCodec, every_truncation_is_refused) {
  std::vector<uint8_t> good = small_block();
  for (size_t len = 0; len < good.size(); len++) {
    // A fresh allocation of exactly len bytes, so a sanitizer build sees
    // any read past the end.
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(len));
    cut.shrink_to_fit();
    kvs_error err;
    ASSERT_EQ(decode(cut, &err), KVS_ERR_CORRUPT) << "length " << len;
    std::string text = err.message;
    EXPECT_NE(text.find("truncated"), std::string::npos) << len << ": " << text;
  }
}

TEST(BlockCodec, trailing_bytes_are_refused) {
  std::vector<uint8_t> b = small_block();
  b.push_back(0);
  kvs_error err;
  EXPECT_EQ(decode(b, &err), KVS_ERR_CORRUPT);
  EXPECT_NE(std::string(err.message).find("past its declared end"), std::string::npos)
      << err.message;
}

TEST(BlockCodec, foreign_input_is_refused) {
  std::vector<std::vector<uint8_t>> inputs;
  std::string text = "this is plainly not a KV block, it is a sentence of text.";
  inputs.emplace_back(text.begin(), text.end());
  inputs.push_back({0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0,    0,    0,
                    13,   'I', 'H', 'D', 'R',  0,    0,    0,    1,    0,    0,
                    0,    1,   8,   2,   0,    0,    0,    0x90, 0x77, 0x53, 0xde});
  inputs.push_back(std::vector<uint8_t>(4096, 0));
  inputs.push_back(std::vector<uint8_t>(64, 0xff));
  for (const auto &in : inputs) {
    kvs_error err;
    EXPECT_EQ(decode(in, &err), KVS_ERR_CORRUPT);
    EXPECT_NE(std::string(err.message).find("not a kvshard block"), std::string::npos)
        << err.message;
  }
  kvs_error err;
  EXPECT_EQ(kvs_block_decode_view(nullptr, 0, nullptr, nullptr, 0, &err), KVS_ERR_CORRUPT);
}

// Byte offsets inside small_block(): envelope 24, key 16, signature fixed
// part 40 (model "m" + 2 fingerprint bytes, padded to 8), payload header.
constexpr size_t kSig = 24 + 16;
constexpr size_t kPayload = kSig + 40 + 8;
constexpr size_t kTable = kPayload + 8;

TEST(BlockCodec, oversized_length_fields_are_refused_before_any_allocation) {
  struct Case {
    const char *what;
    size_t at;
    uint64_t value;
    bool wide;
    const char *needle;
  };
  const Case cases[] = {
      {"model_len", kSig, 0xffffffffu, false, "model_len"},
      {"model_len just over", kSig, KVS_BLOCK_MODEL_MAX + 1, false, "model_len"},
      {"model_len past the end", kSig, 200, false, "truncated signature"},
      {"weights_len", kSig + 4, 0x7fffffffu, false, "weights_len"},
      {"n_layers", kPayload, 0xffffffffu, false, "n_layers"},
      {"n_layers past the table", kPayload, 1000, false, "truncated layer table"},
      {"k_elems", kTable + 24, 0xffffffffffffffffull, true, "K section"},
      {"k_elems times size overflows", kTable + 24, 0x4000000000000001ull, true, "K section"},
      {"v_elems", kTable + 32, 1ull << 40, true, "V section"},
      {"body_len", 16, 0xfffffffffffffff0ull, true, "truncated"},
  };
  for (const Case &c : cases) {
    std::vector<uint8_t> b = small_block();
    if (c.wide)
      put_u64(b, c.at, c.value);
    else
      put_u32(b, c.at, static_cast<uint32_t>(c.value));
    fix_checksum(b);
    kvs_error err;
    kvs_unverified_block_t ub = nullptr;
    EXPECT_EQ(kvs_block_decode(b.data(), b.size(), nullptr, &ub, &err), KVS_ERR_CORRUPT) << c.what;
    EXPECT_NE(std::string(err.message).find(c.needle), std::string::npos)
        << c.what << ": " << err.message;
  }
}

TEST(BlockCodec, structural_damage_behind_a_valid_checksum_is_refused) {
  struct Case {
    const char *what;
    size_t at;
    uint32_t value;
    const char *needle;
  };
  const Case cases[] = {
      {"unknown flags", 12, 0x7, "flag"},
      {"unknown signature dtype", kSig + 20, 9, "dtype"},
      {"control byte in model", kSig + 40, '\n', "control"},
      {"nonzero signature padding", kSig + 40 + 3, 0x01, "padding"},
      {"reserved payload word", kPayload + 4, 1, "reserved"},
      {"unknown layer dtype", kTable + 12, 0, "dtype"},
      {"k section shorter than its bytes", kTable + 24, 1, "padding"},
      {"last v section shorter than its bytes", kTable + 40 + 32, 2, "not accounted"},
  };
  for (const Case &c : cases) {
    std::vector<uint8_t> b = small_block();
    if (std::strcmp(c.what, "control byte in model") == 0 ||
        std::strcmp(c.what, "nonzero signature padding") == 0) {
      b[c.at] = static_cast<uint8_t>(c.value);
    } else {
      put_u32(b, c.at, c.value);
    }
    fix_checksum(b);
    kvs_error err;
    EXPECT_EQ(decode(b, &err), KVS_ERR_CORRUPT) << c.what;
    EXPECT_NE(std::string(err.message).find(c.needle), std::string::npos)
        << c.what << ": " << err.message;
  }
}

TEST(BlockCodec, an_unreadable_version_is_stale_not_corrupt) {
  for (uint32_t version : {1u, 4u, 99u}) {
    for (bool marked : {true, false}) {
      std::vector<uint8_t> b = small_block();
      put_u32(b, 8, version);
      if (!marked) put_u32(b, 12, KVS_BLOCK_FLAG_KEYED);
      fix_checksum(b);
      kvs_block_view view;
      kvs_unverified_block_t ub = nullptr;
      ASSERT_EQ(kvs_block_decode(b.data(), b.size(), &view, &ub, nullptr), KVS_OK) << version;
      EXPECT_FALSE(view.readable);
      EXPECT_EQ(view.format_version, version);
      EXPECT_EQ(view.n_layers, 0u);
      kvs_block_signature reader = expected("m", flat(2), 2, 1, 2, 2);
      kvs_block_t block = nullptr;
      kvs_signature_error why;
      EXPECT_EQ(kvs_unverified_block_verify(&ub, &reader, &block, &why, nullptr),
                KVS_ERR_SIGNATURE);
      if (marked) {
        EXPECT_EQ(why.kind, KVS_SIG_UNSUPPORTED_FORMAT);
        EXPECT_EQ(why.format_found, version);
      } else {
        EXPECT_EQ(why.kind, KVS_SIG_UNMARKED) << "unmarked is checked before the version";
      }
      kvs_unverified_block_destroy(ub);
    }
  }
}

TEST(BlockCodec, the_encoder_checks_its_arguments) {
  std::vector<Layer> layers = payload(1, 1, 2, 2);
  std::vector<kvs_block_layer> v = views(layers);
  kvs_block_signature sig = from_payload("m", flat(2), layers);
  size_t size = 0;
  ASSERT_EQ(kvs_block_encoded_size(nullptr, &sig, v.data(), 1, &size, nullptr), KVS_OK);
  std::vector<uint8_t> out(size, 0xee);
  kvs_error err;
  EXPECT_EQ(kvs_block_encode_parts(nullptr, &sig, v.data(), 1, out.data(), size - 1, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out[0], 0xee) << "nothing written";
  kvs_block_signature old = sig;
  old.format_version = 1;
  EXPECT_EQ(kvs_block_encode_parts(nullptr, &old, v.data(), 1, out.data(), size, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT)
      << "only the current version is written";
  v[0].k = nullptr;
  EXPECT_EQ(kvs_block_encode_parts(nullptr, &sig, v.data(), 1, out.data(), size, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
}

TEST(BlockCodec, the_checksum_is_xxh3_64_over_everything_before_it) {
  std::vector<uint8_t> b = small_block();
  uint64_t stored = 0;
  for (int i = 7; i >= 0; i--) stored = (stored << 8) | b[b.size() - 8 + i];
  EXPECT_EQ(stored, XXH3_64bits(b.data(), b.size() - 8));
  EXPECT_EQ(0, std::memcmp(b.data(), "KVSBLOCK", 8));
  EXPECT_EQ(b[8], KVS_BLOCK_FORMAT_VERSION);
  kvs_block_view view;
  ASSERT_EQ(decode(b, nullptr, &view), KVS_OK);
  EXPECT_EQ(view.checksum, stored);
}

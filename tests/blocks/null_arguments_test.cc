// Every function blocks/ declares, called with NULL (and zero where zero is
// meaningless): a kvs_status call refuses with KVS_ERR_INVALID_ARGUMENT and
// a message naming the argument, changing nothing; an accessor reads 0,
// NULL or "" as its header says; a destroy accepts NULL. Nothing crashes.
// //tests/core:null_arguments_coverage_test fails naming any function of a
// blocks/ header that appears nowhere here (kNoPointer lists those with no
// pointer argument).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "blocks/atomic_file.h"
#include "blocks/block_codec.h"
#include "blocks/block_hash.h"
#include "blocks/block_layout.h"
#include "blocks/block_signature.h"
#include "blocks/block_signed.h"
#include "blocks/block_envelope.h"
#include "blocks/block_store.h"
#include "blocks/page_codec.h"
#include "tests/null_arguments.h"

namespace {

const char *const kNoPointer[] = {
    "kvs_block_layout_check", "kvs_block_format_readable",     "kvs_dtype_name",
    "kvs_dtype_size",         "kvs_signature_error_kind_name", "kvs_page_tier_name",
    "kvs_page_encoding_name",
};

// One f32 layer of 4 positions, 1 head of width 2: a block of size 4.
struct Payload {
  float k[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  float v[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  kvs_block_layer layer;
  kvs_block_layout layout = {4, KVS_BLOCK_NO_WINDOW};
  Payload() {
    layer.n_kv_heads = 1;
    layer.head_dim = 2;
    layer.v_head_dim = 2;
    layer.dtype = KVS_DTYPE_F32;
    layer.positions = 4;
    layer.k = k;
    layer.k_elems = 8;
    layer.v = v;
    layer.v_elems = 8;
  }
};

std::string scratch_dir() {
  const char *base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/null_args.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  EXPECT_NE(mkdtemp(buf.data()), nullptr);
  return std::string(buf.data());
}

TEST(NullArguments, the_no_pointer_list_names_real_functions) {
  EXPECT_EQ(kvs_block_layout_check({0, 0}), KVS_BLOCK_LAYOUT_ZERO_BLOCK_SIZE);
  EXPECT_TRUE(kvs_block_format_readable(KVS_BLOCK_FORMAT_VERSION));
  EXPECT_STREQ(kvs_dtype_name(KVS_DTYPE_BF16), "bf16");
  EXPECT_EQ(kvs_dtype_size(KVS_DTYPE_F32), 4u);
  EXPECT_STREQ(kvs_signature_error_kind_name(KVS_SIG_UNMARKED), "unmarked");
  EXPECT_STREQ(kvs_page_tier_name(KVS_PAGE_TIER_INDEXER), "indexer");
  EXPECT_STREQ(kvs_page_encoding_name(99), "unknown");
  EXPECT_EQ(sizeof kNoPointer / sizeof kNoPointer[0], 7u);
}

TEST(NullArguments, atomic_file) {
  const std::string dir = scratch_dir();
  const std::string path = dir + "/file";
  const char data[] = "x";
  EXPECT_NULL_REFUSED("temp", kvs_atomic_file_stage(AT_FDCWD, nullptr, data, 1, &err));
  EXPECT_NULL_REFUSED("data", kvs_atomic_file_stage(AT_FDCWD, path.c_str(), nullptr, 1, &err));
  EXPECT_NULL_REFUSED("temp", kvs_atomic_file_publish(AT_FDCWD, nullptr, "n", &err));
  EXPECT_NULL_REFUSED("name", kvs_atomic_file_publish(AT_FDCWD, "t", nullptr, &err));
  EXPECT_NULL_REFUSED("path", kvs_write_file_atomic(nullptr, data, 1, &err));
  EXPECT_NULL_REFUSED("data", kvs_write_file_atomic(path.c_str(), nullptr, 1, &err));
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "nothing written";
  // Zero bytes need no data.
  EXPECT_EQ(kvs_write_file_atomic(path.c_str(), nullptr, 0, nullptr), KVS_OK);
}

TEST(NullArguments, block_hash) {
  const uint32_t tokens[4] = {1, 2, 3, 4};
  kvs_block_hash h = {7, 7};
  EXPECT_NULL_REFUSED("out", kvs_block_hash_chain(nullptr, tokens, 4, 4, nullptr, &err));
  EXPECT_NULL_REFUSED("token_ids", kvs_block_hash_chain(nullptr, nullptr, 4, 4, &h, &err));
  EXPECT_NULL_REFUSED("token_ids", kvs_block_hash_sequence(nullptr, 4, 4, &h, 1, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_block_hash_sequence(tokens, 4, 4, nullptr, 1, nullptr, &err));
  EXPECT_EQ(h.high, 7u);  // untouched
  EXPECT_FALSE(kvs_block_hash_equal(nullptr, &h));
  EXPECT_FALSE(kvs_block_hash_equal(&h, nullptr));
  EXPECT_FALSE(kvs_block_hash_equal(nullptr, nullptr));
  char hex[KVS_BLOCK_HASH_HEX_LEN + 1] = "x";
  EXPECT_EQ(kvs_block_hash_hex(&h, nullptr), nullptr);
  EXPECT_STREQ(kvs_block_hash_hex(nullptr, hex), "");
  uint8_t bytes[4];
  size_t len = 9;
  EXPECT_FALSE(kvs_hex_decode(nullptr, bytes, 4, &len));
  EXPECT_FALSE(kvs_hex_decode("abcd", nullptr, 4, &len));
  EXPECT_FALSE(kvs_hex_decode("abcd", bytes, 4, nullptr));
  EXPECT_EQ(len, 9u);
  EXPECT_NULL_REFUSED("hex", kvs_block_hash_parse(nullptr, &h, &err));
  EXPECT_NULL_REFUSED("out",
                      kvs_block_hash_parse("00000000000000000000000000000000", nullptr, &err));
}

TEST(NullArguments, block_layout) {
  EXPECT_GT(kvs_block_layout_describe_problem({0, 0}, nullptr, 64), 0u);  // measured only
  EXPECT_NULL_REFUSED("out", kvs_block_layout_init(4, 0, nullptr, &err));
  EXPECT_STREQ(kvs_block_window_describe(128, nullptr, 16), "");
}

TEST(NullArguments, block_signature) {
  Payload p;
  kvs_dtype dtype = KVS_DTYPE_BF16;
  EXPECT_FALSE(kvs_dtype_parse(nullptr, &dtype));
  EXPECT_FALSE(kvs_dtype_parse("f32", nullptr));
  EXPECT_EQ(dtype, KVS_DTYPE_BF16);
  EXPECT_EQ(kvs_signature_error_format(nullptr, nullptr, 0), 0u);
  char buf[64] = "x";
  EXPECT_EQ(kvs_signature_error_format(nullptr, buf, sizeof buf), 0u);
  EXPECT_STREQ(buf, "");
  kvs_signature_error why{};
  why.kind = KVS_SIG_UNMARKED;
  EXPECT_GT(kvs_signature_error_format(&why, nullptr, 64), 0u);  // measured only
  kvs_block_signature sig;
  EXPECT_NULL_REFUSED("model", kvs_block_signature_measure(nullptr, nullptr, 0, p.layout, &p.layer,
                                                           1, &sig, &why, &err));
  EXPECT_NULL_REFUSED("weights", kvs_block_signature_measure("m", nullptr, 4, p.layout, &p.layer, 1,
                                                             &sig, &why, &err));
  EXPECT_NULL_REFUSED("layers", kvs_block_signature_measure("m", nullptr, 0, p.layout, nullptr, 1,
                                                            &sig, &why, &err));
  EXPECT_NULL_REFUSED("out", kvs_block_signature_measure("m", nullptr, 0, p.layout, &p.layer, 1,
                                                         nullptr, &why, &err));
  EXPECT_NULL_REFUSED("model", kvs_block_signature_expected(nullptr, nullptr, 0, p.layout, 1, 1, 2,
                                                            KVS_DTYPE_F32, 4, &sig, &err));
  EXPECT_NULL_REFUSED("out", kvs_block_signature_expected("m", nullptr, 0, p.layout, 1, 1, 2,
                                                          KVS_DTYPE_F32, 4, nullptr, &err));
  EXPECT_NULL_REFUSED("layers",
                      kvs_block_verify_parts(nullptr, nullptr, 1, nullptr, nullptr, &why, &err));
  EXPECT_NULL_REFUSED("layers", kvs_block_layers_check(nullptr, 1, &err));
  EXPECT_STREQ(kvs_block_weights_describe(nullptr, 4, nullptr, 16), "");
  EXPECT_STREQ(kvs_block_weights_describe(nullptr, 4, buf, sizeof buf), "none");
  EXPECT_FALSE(kvs_block_model_valid(nullptr, 0));
}

TEST(NullArguments, block_signed) {
  Payload p;
  kvs_block_t block = nullptr;
  kvs_signature_error why{};
  EXPECT_NULL_REFUSED("out",
                      kvs_block_stamp("m", nullptr, 0, p.layout, &p.layer, 1, nullptr, &why, &err));
  EXPECT_NULL_REFUSED(
      "model", kvs_block_stamp(nullptr, nullptr, 0, p.layout, &p.layer, 1, &block, &why, &err));
  EXPECT_EQ(block, nullptr);
  kvs_block_destroy(nullptr);
  EXPECT_EQ(kvs_block_signature_of(nullptr), nullptr);
  EXPECT_EQ(kvs_block_layout_of(nullptr).block_size, 0u);
  EXPECT_EQ(kvs_block_tokens(nullptr), 0u);
  size_t n = 9;
  EXPECT_EQ(kvs_block_layers(nullptr, &n), nullptr);
  EXPECT_EQ(n, 0u);
  kvs_unverified_block_t unverified = nullptr;
  EXPECT_NULL_REFUSED("out", kvs_unverified_block_create(nullptr, &p.layer, 1, nullptr, &err));
  EXPECT_NULL_REFUSED("layers",
                      kvs_unverified_block_create(nullptr, nullptr, 1, &unverified, &err));
  EXPECT_NULL_REFUSED("storage",
                      kvs_unverified_block_adopt(nullptr, nullptr, &p.layer, 1, &unverified, &err));
  void *storage = malloc(8);
  EXPECT_NULL_REFUSED("out",
                      kvs_unverified_block_adopt(storage, nullptr, &p.layer, 1, nullptr, &err));
  free(storage);  // still the caller's after a refusal
  EXPECT_EQ(unverified, nullptr);
  kvs_unverified_block_destroy(nullptr);
  EXPECT_EQ(kvs_unverified_block_signature(nullptr), nullptr);
  n = 9;
  EXPECT_EQ(kvs_unverified_block_layers(nullptr, &n), nullptr);
  EXPECT_EQ(n, 0u);
  kvs_block_signature expected;
  ASSERT_EQ(kvs_block_signature_expected("m", nullptr, 0, p.layout, 1, 1, 2, KVS_DTYPE_F32, 4,
                                         &expected, nullptr),
            KVS_OK);
  EXPECT_NULL_REFUSED("block", kvs_unverified_block_verify(nullptr, &expected, &block, &why, &err));
  EXPECT_NULL_REFUSED("*block",
                      kvs_unverified_block_verify(&unverified, &expected, &block, &why, &err));
  ASSERT_EQ(kvs_unverified_block_create(nullptr, &p.layer, 1, &unverified, nullptr), KVS_OK);
  EXPECT_NULL_REFUSED("expected",
                      kvs_unverified_block_verify(&unverified, nullptr, &block, &why, &err));
  EXPECT_NULL_REFUSED("out",
                      kvs_unverified_block_verify(&unverified, &expected, nullptr, &why, &err));
  EXPECT_NE(unverified, nullptr) << "still the caller's after a refusal";
  kvs_unverified_block_destroy(unverified);
}

TEST(NullArguments, block_codec) {
  Payload p;
  size_t size = 0;
  EXPECT_NULL_REFUSED("size", kvs_block_encoded_size(nullptr, nullptr, &p.layer, 1, nullptr, &err));
  EXPECT_NULL_REFUSED("layers", kvs_block_encoded_size(nullptr, nullptr, nullptr, 1, &size, &err));
  ASSERT_EQ(kvs_block_encoded_size(nullptr, nullptr, &p.layer, 1, &size, nullptr), KVS_OK);
  std::vector<uint8_t> buf(size);
  size_t written = 9;
  EXPECT_NULL_REFUSED(
      "dst", kvs_block_encode_parts(nullptr, nullptr, &p.layer, 1, nullptr, size, &written, &err));
  EXPECT_EQ(written, 9u);
  EXPECT_NULL_REFUSED("block",
                      kvs_block_encode(nullptr, nullptr, buf.data(), buf.size(), &written, &err));
  EXPECT_EQ(kvs_block_encoded_size_of(nullptr, nullptr), 0u);
  ASSERT_EQ(kvs_block_encode_parts(nullptr, nullptr, &p.layer, 1, buf.data(), buf.size(), &written,
                                   nullptr),
            KVS_OK);
  kvs_block_view view;
  kvs_unverified_block_t out = nullptr;
  EXPECT_NULL_REFUSED("src", kvs_block_decode_view(nullptr, 8, &view, nullptr, 0, &err));
  EXPECT_NULL_REFUSED("src", kvs_block_decode(nullptr, 8, &view, &out, &err));
  EXPECT_NULL_REFUSED("out", kvs_block_decode(buf.data(), buf.size(), &view, nullptr, &err));
  EXPECT_NULL_REFUSED("buf", kvs_block_decode_adopt(nullptr, 8, &view, &out, &err));
  EXPECT_NULL_REFUSED("out", kvs_block_decode_adopt(buf.data(), buf.size(), &view, nullptr, &err));
  EXPECT_EQ(out, nullptr);
}

TEST(NullArguments, block_store) {
  const std::string dir = scratch_dir() + "/store";
  kvs_block_store_t store = nullptr;
  EXPECT_NULL_REFUSED("dir", kvs_block_store_create(nullptr, nullptr, &store, nullptr, &err));
  EXPECT_NULL_REFUSED("out", kvs_block_store_create(dir.c_str(), nullptr, nullptr, nullptr, &err));
  kvs_block_store_destroy(nullptr);
  kvs_block_hash key = {1, 2};
  Payload p;
  kvs_block_t block = nullptr;
  kvs_block_signature expected;
  kvs_signature_error why{};
  EXPECT_NULL_REFUSED("store", kvs_block_store_put(nullptr, &key, block, &err));
  EXPECT_NULL_REFUSED("store", kvs_block_store_get(nullptr, &key, &expected, &block, &why, &err));
  EXPECT_NULL_REFUSED("store", kvs_block_store_remove(nullptr, &key, &err));
  EXPECT_FALSE(kvs_block_store_contains(nullptr, &key));
  EXPECT_EQ(kvs_block_store_count(nullptr), 0u);
  kvs_block_hash keys[1];
  EXPECT_EQ(kvs_block_store_keys(nullptr, keys, 1), 0u);
  EXPECT_EQ(kvs_block_store_bytes(nullptr), 0u);
  EXPECT_EQ(kvs_block_store_capacity(nullptr), 0u);

  ASSERT_EQ(kvs_block_store_create(dir.c_str(), nullptr, &store, nullptr, nullptr), KVS_OK);
  ASSERT_EQ(kvs_block_stamp("m", nullptr, 0, p.layout, &p.layer, 1, &block, nullptr, nullptr),
            KVS_OK);
  ASSERT_EQ(kvs_block_signature_expected("m", nullptr, 0, p.layout, 1, 1, 2, KVS_DTYPE_F32, 4,
                                         &expected, nullptr),
            KVS_OK);
  EXPECT_NULL_REFUSED("key", kvs_block_store_put(store, nullptr, block, &err));
  EXPECT_NULL_REFUSED("block", kvs_block_store_put(store, &key, nullptr, &err));
  kvs_block_t got = nullptr;
  EXPECT_NULL_REFUSED("key", kvs_block_store_get(store, nullptr, &expected, &got, &why, &err));
  EXPECT_NULL_REFUSED("expected", kvs_block_store_get(store, &key, nullptr, &got, &why, &err));
  EXPECT_NULL_REFUSED("out", kvs_block_store_get(store, &key, &expected, nullptr, &why, &err));
  EXPECT_NULL_REFUSED("key", kvs_block_store_remove(store, nullptr, &err));
  EXPECT_FALSE(kvs_block_store_contains(store, nullptr));
  EXPECT_EQ(kvs_block_store_count(store), 0u);  // nothing put
  EXPECT_EQ(kvs_block_store_keys(store, nullptr, 1), 0u);
  EXPECT_EQ(got, nullptr);

  uint8_t *bytes = nullptr;
  size_t len = 0;
  EXPECT_NULL_REFUSED("path", kvs_block_store_read_file(nullptr, &bytes, &len, &err));
  EXPECT_NULL_REFUSED("bytes", kvs_block_store_read_file("/dev/null", nullptr, &len, &err));
  EXPECT_NULL_REFUSED("len", kvs_block_store_read_file("/dev/null", &bytes, nullptr, &err));
  EXPECT_EQ(bytes, nullptr);
  char name[KVS_BLOCK_STORE_NAME_MAX] = "x";
  EXPECT_EQ(kvs_block_store_file_name(&key, nullptr), nullptr);
  EXPECT_STREQ(kvs_block_store_file_name(nullptr, name), "");
  kvs_block_destroy(block);
  kvs_block_store_destroy(store);
}

TEST(NullArguments, block_envelope) {
  EXPECT_EQ(kvs_block_corrupt(nullptr, "x %d", 1), KVS_ERR_CORRUPT);
  uint64_t body = 0, stored = 0;
  const uint8_t bytes[32] = {0};
  EXPECT_NULL_REFUSED("src", kvs_block_envelope_check(nullptr, 32, true, &body, &stored, &err));
  EXPECT_NULL_REFUSED("body_len",
                      kvs_block_envelope_check(bytes, 32, true, nullptr, &stored, &err));
  EXPECT_NULL_REFUSED("stored", kvs_block_envelope_check(bytes, 32, true, &body, nullptr, &err));
  kvs_block_envelope_write(nullptr, 2, 0, 0);  // nothing to write into: nothing done
  size_t at = 0;
  kvs_block_copy_section(nullptr, nullptr, &at, bytes, 8);
  kvs_block_copy_section(nullptr, nullptr, nullptr, nullptr, 0);
  EXPECT_EQ(at, 0u);
  EXPECT_NULL_REFUSED("why", kvs_signature_refuse(nullptr, nullptr, &err));
  EXPECT_TRUE(kvs_signature_version_refused(false, 2, 2, nullptr));  // unmarked, no why asked
  EXPECT_FALSE(kvs_signature_version_refused(true, 2, 2, nullptr));
  char model[8] = {0};
  uint8_t weights[8];
  EXPECT_NULL_REFUSED("src", kvs_block_read_identity(nullptr, &at, 8, 1, 0, model, weights, &err));
  EXPECT_NULL_REFUSED("at", kvs_block_read_identity(bytes, nullptr, 8, 1, 0, model, weights, &err));
  EXPECT_NULL_REFUSED("model",
                      kvs_block_read_identity(bytes, &at, 8, 1, 0, nullptr, weights, &err));
  EXPECT_NULL_REFUSED("weights",
                      kvs_block_read_identity(bytes, &at, 8, 1, 0, model, nullptr, &err));
  uint8_t out[64];
  EXPECT_NULL_REFUSED("dst",
                      kvs_block_encode_head("f", nullptr, 64, 0, 2, nullptr, true, &at, &err));
  EXPECT_NULL_REFUSED("at",
                      kvs_block_encode_head(nullptr, out, 64, 0, 2, nullptr, true, nullptr, &err));
  EXPECT_EQ(at, 0u);
  EXPECT_NULL_REFUSED("model", kvs_block_identity_check(nullptr, nullptr, nullptr, 0, &err));
  EXPECT_NULL_REFUSED("weights", kvs_block_identity_check("f", "m", nullptr, 4, &err));
}

TEST(NullArguments, page_block) {
  const kvs_block_hash chain = {1, 2};
  kvs_page_identity id;
  EXPECT_NULL_REFUSED(
      "model", kvs_page_identity_init(nullptr, nullptr, 0, 16, 0, 0, 1, &chain, 0, &id, &err));
  EXPECT_NULL_REFUSED("chain",
                      kvs_page_identity_init("m", nullptr, 0, 16, 0, 0, 1, nullptr, 0, &id, &err));
  EXPECT_NULL_REFUSED(
      "out", kvs_page_identity_init("m", nullptr, 0, 16, 0, 0, 1, &chain, 0, nullptr, &err));
  ASSERT_EQ(kvs_page_identity_init("m", nullptr, 0, 16, 0, 0, 1, &chain, 0, &id, nullptr), KVS_OK);
  // A NULL chain digests as zeros, NULL bytes as none.
  EXPECT_EQ(kvs_page_section_digest(nullptr, 0, 0, 1, nullptr, 0),
            kvs_page_section_digest(nullptr, 0, 0, 1, "", 0));
  uint8_t rows[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  kvs_page_section section{};
  section.shape = {KVS_PAGE_TIER_TAIL_STATE, KVS_PAGE_FP8_SCALED, 1, 1, 8};
  section.bytes = rows;
  section.n_bytes = 8;
  kvs_page_signature sig;
  kvs_signature_error why;
  EXPECT_NULL_REFUSED("id", kvs_page_signature_measure(nullptr, &section, 1, &sig, &why, &err));
  EXPECT_NULL_REFUSED("sections", kvs_page_signature_measure(&id, nullptr, 1, &sig, &why, &err));
  EXPECT_NULL_REFUSED("out", kvs_page_signature_measure(&id, &section, 1, nullptr, &why, &err));
  EXPECT_NULL_REFUSED("id", kvs_page_signature_expected(nullptr, &section.shape, 1, &sig, &err));
  EXPECT_NULL_REFUSED("shapes", kvs_page_signature_expected(&id, nullptr, 1, &sig, &err));
  EXPECT_NULL_REFUSED("out", kvs_page_signature_expected(&id, &section.shape, 1, nullptr, &err));
  EXPECT_NULL_REFUSED("sections",
                      kvs_page_verify_parts(&sig, nullptr, 1, nullptr, nullptr, &why, &err));
  kvs_page_block_t block = nullptr;
  EXPECT_NULL_REFUSED("id", kvs_page_block_stamp(nullptr, &section, 1, &block, &why, &err));
  EXPECT_NULL_REFUSED("out", kvs_page_block_stamp(&id, &section, 1, nullptr, &why, &err));
  ASSERT_EQ(kvs_page_block_stamp(&id, &section, 1, &block, &why, nullptr), KVS_OK);
  void *storage = malloc(8);
  EXPECT_NULL_REFUSED("storage", kvs_page_block_adopt(nullptr, &sig, &section, 1, &block, &err));
  EXPECT_NULL_REFUSED("sig", kvs_page_block_adopt(storage, nullptr, &section, 1, &block, &err));
  EXPECT_NULL_REFUSED("out", kvs_page_block_adopt(storage, &sig, &section, 1, nullptr, &err));
  free(storage);
  kvs_page_block_destroy(nullptr);
  EXPECT_EQ(kvs_page_block_signature_of(nullptr), nullptr);
  size_t n = 9;
  EXPECT_EQ(kvs_page_block_sections(nullptr, &n), nullptr);
  EXPECT_EQ(n, 0u);

  size_t size = 0;
  EXPECT_NULL_REFUSED("size",
                      kvs_page_block_encoded_size(nullptr, nullptr, &section, 1, nullptr, &err));
  EXPECT_NULL_REFUSED("sections",
                      kvs_page_block_encoded_size(nullptr, nullptr, nullptr, 1, &size, &err));
  EXPECT_NULL_REFUSED("dst", kvs_page_block_encode_parts(nullptr, nullptr, &section, 1, nullptr, 64,
                                                         nullptr, &err));
  EXPECT_NULL_REFUSED("block", kvs_page_block_encode(nullptr, nullptr, rows, 8, nullptr, &err));
  EXPECT_EQ(kvs_page_block_encoded_size_of(nullptr, nullptr), 0u);
  kvs_page_block_view view;
  EXPECT_NULL_REFUSED("src", kvs_page_block_decode_view(nullptr, 8, &view, nullptr, 0, &err));
  EXPECT_NULL_REFUSED("buf",
                      kvs_page_block_decode_adopt(nullptr, 8, &sig, &view, &block, &why, &err));
  EXPECT_NULL_REFUSED("expected",
                      kvs_page_block_decode_adopt(rows, 8, nullptr, &view, &block, &why, &err));
  EXPECT_NULL_REFUSED("out",
                      kvs_page_block_decode_adopt(rows, 8, &sig, &view, nullptr, &why, &err));
  EXPECT_NULL_REFUSED("src", kvs_page_block_decode(nullptr, 8, &sig, &view, &block, &why, &err));

  const std::string dir = scratch_dir();
  kvs_block_store_t store = nullptr;
  ASSERT_EQ(kvs_block_store_create(dir.c_str(), nullptr, &store, nullptr, nullptr), KVS_OK);
  EXPECT_NULL_REFUSED("store", kvs_block_store_put_page(nullptr, &chain, block, &err));
  EXPECT_NULL_REFUSED("key", kvs_block_store_put_page(store, nullptr, block, &err));
  EXPECT_NULL_REFUSED("block", kvs_block_store_put_page(store, &chain, nullptr, &err));
  kvs_page_block_t got = nullptr;
  EXPECT_NULL_REFUSED("store", kvs_block_store_get_page(nullptr, &chain, &sig, &got, &why, &err));
  EXPECT_NULL_REFUSED("key", kvs_block_store_get_page(store, nullptr, &sig, &got, &why, &err));
  EXPECT_NULL_REFUSED("expected",
                      kvs_block_store_get_page(store, &chain, nullptr, &got, &why, &err));
  EXPECT_NULL_REFUSED("out", kvs_block_store_get_page(store, &chain, &sig, nullptr, &why, &err));
  EXPECT_EQ(kvs_block_store_count(store), 0u);
  EXPECT_EQ(got, nullptr);
  kvs_page_block_destroy(block);
  kvs_block_store_destroy(store);
}

}  // namespace

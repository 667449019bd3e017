// The seed's test cases (kv_signature), ported by name and value, plus the
// C-specific cases: dtype and weights fingerprint in the identity, every
// refusal kind's message, all-or-nothing behaviour.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "blocks/block_layout.h"
#include "blocks/block_signature.h"
#include "blocks/block_signed.h"
#include "tests/blocks/block_test_util.h"

using kvs_test::expected;
using kvs_test::flat;
using kvs_test::from_payload;
using kvs_test::Layer;
using kvs_test::layer;
using kvs_test::make_layout;
using kvs_test::payload;
using kvs_test::views;

namespace {

// The seed's UnverifiedBlock::new(signature, layers).verify(expected):
// builds an owned unverified block and verifies it. Returns the status;
// *why receives the refusal, *n_layers_out the verified block's layers.
kvs_status verify_block(const kvs_block_signature *recorded, const std::vector<Layer> &layers,
                        const kvs_block_signature &reader, kvs_signature_error *why,
                        size_t *n_layers_out = nullptr, kvs_error *err = nullptr) {
  std::vector<kvs_block_layer> v = views(layers);
  kvs_unverified_block_t ub = nullptr;
  kvs_status st = kvs_unverified_block_create(recorded, v.data(), v.size(), &ub, nullptr);
  if (st != KVS_OK) return st;
  kvs_block_t block = nullptr;
  st = kvs_unverified_block_verify(&ub, &reader, &block, why, err);
  if (st == KVS_OK) {
    EXPECT_EQ(ub, nullptr) << "a verified block consumes the unverified one";
    if (n_layers_out != nullptr) kvs_block_layers(block, n_layers_out);
  } else {
    EXPECT_NE(ub, nullptr) << "a refused block stays the caller's";
  }
  kvs_unverified_block_destroy(ub);
  kvs_block_destroy(block);
  return st;
}

std::string message(const kvs_signature_error &why) {
  char buf[1024];
  kvs_signature_error_format(&why, buf, sizeof buf);
  return buf;
}

void expect_payload_mismatch(const kvs_signature_error &why, const char *field,
                             const char *recorded, const char *actual) {
  EXPECT_EQ(why.kind, KVS_SIG_PAYLOAD_MISMATCH) << message(why);
  ASSERT_NE(why.field, nullptr);
  EXPECT_STREQ(why.field, field);
  EXPECT_STREQ(why.recorded, recorded);
  EXPECT_STREQ(why.actual, actual);
}

void expect_incompatible(const kvs_signature_error &why, const char *field, const char *exp,
                         const char *found) {
  EXPECT_EQ(why.kind, KVS_SIG_INCOMPATIBLE) << message(why);
  ASSERT_NE(why.field, nullptr);
  EXPECT_STREQ(why.field, field);
  EXPECT_STREQ(why.expected, exp);
  EXPECT_STREQ(why.found, found);
}

void expect_ragged(const kvs_signature_error &why, uint64_t layer_index, const char *field) {
  EXPECT_EQ(why.kind, KVS_SIG_RAGGED_PAYLOAD) << message(why);
  EXPECT_EQ(why.layer, layer_index);
  ASSERT_NE(why.field, nullptr);
  EXPECT_STREQ(why.field, field);
}

kvs_status measure(const char *model, kvs_block_layout layout, const std::vector<Layer> &layers,
                   kvs_signature_error *why) {
  std::vector<kvs_block_layer> v = views(layers);
  kvs_block_signature sig;
  return kvs_block_signature_measure(model, nullptr, 0, layout, v.data(), v.size(), &sig, why,
                                     nullptr);
}

}  // namespace

// ---- the seed's cases ----

TEST(KvSignature, signature_is_measured_from_the_payload) {
  std::vector<Layer> layers = payload(3, 2, 8, 4);
  std::vector<kvs_block_layer> v = views(layers);
  kvs_block_t block = nullptr;
  ASSERT_EQ(
      kvs_block_stamp("model-a", nullptr, 0, flat(4), v.data(), v.size(), &block, nullptr, nullptr),
      KVS_OK);
  const kvs_block_signature *sig = kvs_block_signature_of(block);
  EXPECT_EQ(sig->n_layers, 3u);
  EXPECT_EQ(sig->n_kv_heads, 2u);
  EXPECT_EQ(sig->head_dim, 8u);
  EXPECT_EQ(sig->tokens, 4u);
  EXPECT_EQ(sig->dtype, KVS_DTYPE_F32);
  EXPECT_EQ(sig->format_version, KVS_BLOCK_FORMAT_VERSION);
  EXPECT_EQ(kvs_block_tokens(block), 4u);
  size_t n = 0;
  kvs_block_layers(block, &n);
  EXPECT_EQ(n, 3u);
  kvs_block_destroy(block);
}

TEST(KvSignature, a_stamped_block_round_trips_through_verification) {
  std::vector<Layer> layers = payload(3, 2, 8, 4);
  kvs_block_signature signature = from_payload("model-a", flat(4), layers);
  kvs_block_signature reader = expected("model-a", flat(4), 3, 2, 8, 4);
  size_t n = 0;
  kvs_signature_error why;
  ASSERT_EQ(verify_block(&signature, layers, reader, &why, &n), KVS_OK)
      << "an honest stamp over its own payload: " << message(why);
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(why.kind, KVS_SIG_NONE);
}

TEST(KvSignature, an_unmarked_block_is_rejected_not_trusted) {
  kvs_block_signature reader = expected("model-a", flat(4), 3, 2, 8, 4);
  kvs_signature_error why;
  EXPECT_EQ(verify_block(nullptr, payload(3, 2, 8, 4), reader, &why), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_UNMARKED);
}

TEST(KvSignature, a_signature_that_overstates_its_payload_is_rejected) {
  kvs_block_signature reader = expected("model-a", flat(4), 3, 2, 16, 4);
  kvs_block_signature lying = reader;
  EXPECT_EQ(lying.head_dim, 16u);
  kvs_signature_error why;
  EXPECT_EQ(verify_block(&lying, payload(3, 2, 8, 4), reader, &why), KVS_ERR_SIGNATURE)
      << "head_dim 16 recorded, 8 present";
  expect_payload_mismatch(why, "head_dim", "16", "8");

  // Heads and width right, depth inflated from 4 to 8.
  lying.head_dim = 8;
  lying.tokens = 8;
  reader = expected("model-a", flat(8), 3, 2, 8, 8);
  EXPECT_EQ(verify_block(&lying, payload(3, 2, 8, 4), reader, &why), KVS_ERR_SIGNATURE)
      << "tokens 8 recorded, 4 present";
  expect_payload_mismatch(why, "tokens", "8", "4");

  // Layer count inflated from 3 to 4.
  lying.tokens = 4;
  lying.n_layers = 4;
  reader = expected("model-a", flat(4), 4, 2, 8, 4);
  EXPECT_EQ(verify_block(&lying, payload(3, 2, 8, 4), reader, &why), KVS_ERR_SIGNATURE)
      << "n_layers 4 recorded, 3 present";
  expect_payload_mismatch(why, "n_layers", "4", "3");
}

TEST(KvSignature, a_layer_whose_seq_len_contradicts_its_buffers_is_rejected) {
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  layers[1].positions = 7;  // the contradiction under test
  kvs_signature_error why;
  EXPECT_EQ(measure("model-a", flat(4), layers, &why), KVS_ERR_SIGNATURE)
      << "positions must be verified, not believed";
  expect_ragged(why, 1, "positions");
  EXPECT_STREQ(why.expected, "4");
  EXPECT_STREQ(why.found, "7");
}

TEST(KvSignature, a_ragged_payload_is_rejected) {
  std::vector<Layer> layers = payload(3, 2, 8, 4);
  layers[2] = layer(2, 4, 4);
  kvs_signature_error why;
  EXPECT_EQ(measure("model-a", flat(4), layers, &why), KVS_ERR_SIGNATURE) << "shape disagreement";
  expect_ragged(why, 2, "layer shape");

  layers = payload(3, 2, 8, 4);
  layers[1] = layer(2, 8, 3);
  EXPECT_EQ(measure("model-a", flat(4), layers, &why), KVS_ERR_SIGNATURE) << "depth disagreement";
  expect_ragged(why, 1, "token count");

  layers = payload(2, 2, 8, 4);
  layers[0].truncate_v(8);
  EXPECT_EQ(measure("model-a", flat(4), layers, &why), KVS_ERR_SIGNATURE) << "k/v disagreement";
  expect_ragged(why, 0, "v length");
}

TEST(KvSignature, an_empty_payload_is_rejected) {
  kvs_signature_error why;
  EXPECT_EQ(measure("model-a", flat(4), {}, &why), KVS_ERR_SIGNATURE) << "nothing to vouch for";
  EXPECT_EQ(why.kind, KVS_SIG_EMPTY_PAYLOAD);
}

TEST(KvSignature, an_honest_block_from_a_different_config_is_incompatible) {
  std::vector<Layer> layers = payload(3, 2, 8, 4);
  kvs_block_signature signature = from_payload("model-a", flat(4), layers);
  kvs_signature_error why;
  EXPECT_EQ(verify_block(&signature, layers, expected("model-b", flat(4), 3, 2, 8, 4), &why),
            KVS_ERR_SIGNATURE)
      << "model-b may not read model-a's KV";
  expect_incompatible(why, "model", "model-b", "model-a");

  EXPECT_EQ(
      verify_block(&signature, payload(3, 2, 8, 4), expected("model-a", flat(4), 3, 4, 8, 4), &why),
      KVS_ERR_SIGNATURE)
      << "4 heads wanted, 2 stored";
  expect_incompatible(why, "n_kv_heads", "4", "2");
}

TEST(KvSignature, an_unreadable_format_version_is_rejected) {
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  kvs_block_signature signature = from_payload("model-a", flat(4), layers);
  signature.format_version = 99;
  kvs_signature_error why;
  EXPECT_EQ(verify_block(&signature, layers, expected("model-a", flat(4), 2, 2, 8, 4), &why),
            KVS_ERR_SIGNATURE)
      << "version 99 is not in the readable set";
  EXPECT_EQ(why.kind, KVS_SIG_UNSUPPORTED_FORMAT);
  EXPECT_EQ(why.format_found, 99u);
  ASSERT_EQ(why.n_readable, kvs_block_readable_versions_count);
  EXPECT_EQ(why.readable, kvs_block_readable_versions);
  EXPECT_EQ(why.readable[0], 2u);
}

TEST(KvSignature, a_block_written_under_a_different_window_is_refused_not_reused) {
  kvs_block_layout layout_128 = make_layout(4, 128);
  kvs_block_layout layout_256 = make_layout(4, 256);
  ASSERT_EQ(layout_128.block_size, 4u) << "4 divides 128";
  ASSERT_EQ(layout_256.block_size, 4u) << "4 divides 256";
  std::vector<Layer> layers = payload(3, 2, 8, 4);
  kvs_block_signature signature = from_payload("model-a", layout_128, layers);
  kvs_signature_error why;
  EXPECT_EQ(verify_block(&signature, layers, expected("model-a", layout_256, 3, 2, 8, 4), &why),
            KVS_ERR_SIGNATURE)
      << "window 256 wanted, 128 recorded";
  expect_incompatible(why, "sliding_window", "256", "128");

  // With the window unchanged the block is still a hit.
  EXPECT_EQ(verify_block(&signature, payload(3, 2, 8, 4),
                         expected("model-a", layout_128, 3, 2, 8, 4), &why),
            KVS_OK)
      << "window 128 wanted and recorded: " << message(why);
}

TEST(KvSignature, a_full_causal_reader_will_not_take_a_sliding_window_block) {
  kvs_block_layout sliding = make_layout(4, 128);
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  kvs_block_signature signature = from_payload("model-a", sliding, layers);
  kvs_signature_error why;
  EXPECT_EQ(verify_block(&signature, layers, expected("model-a", flat(4), 2, 2, 8, 4), &why),
            KVS_ERR_SIGNATURE)
      << "full causal wanted, window 128 recorded";
  expect_incompatible(why, "sliding_window", "none (full causal)", "128");
}

TEST(KvSignature, a_block_cut_at_a_different_block_size_is_incompatible) {
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  kvs_block_signature signature = from_payload("model-a", flat(4), layers);
  kvs_signature_error why;
  EXPECT_EQ(verify_block(&signature, layers, expected("model-a", flat(2), 2, 2, 8, 4), &why),
            KVS_ERR_SIGNATURE)
      << "a 4-token block is not a 2-token block";
  expect_incompatible(why, "block_size", "2", "4");
}

TEST(KvSignature, a_stamp_may_not_claim_a_block_size_the_payload_lacks) {
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  std::vector<kvs_block_layer> v = views(layers);
  kvs_block_t block = nullptr;
  kvs_signature_error why;
  EXPECT_EQ(
      kvs_block_stamp("model-a", nullptr, 0, flat(8), v.data(), v.size(), &block, &why, nullptr),
      KVS_ERR_SIGNATURE)
      << "layout of 8, depth of 4";
  EXPECT_EQ(block, nullptr);
  EXPECT_EQ(why.kind, KVS_SIG_BLOCK_SIZE_MISMATCH);
  EXPECT_EQ(why.block_size, 8u);
  EXPECT_EQ(why.tokens, 4u);

  // And when reading, with the stamp taken from stored bytes.
  kvs_block_signature honest = from_payload("model-a", flat(4), payload(2, 2, 8, 4));
  kvs_block_signature lying = honest;
  lying.layout = flat(8);
  lying.tokens = 8;
  EXPECT_EQ(
      verify_block(&lying, payload(2, 2, 8, 4), expected("model-a", flat(8), 2, 2, 8, 8), &why),
      KVS_ERR_SIGNATURE)
      << "depth 4 decides, whatever the stamp says";
  EXPECT_EQ(why.kind, KVS_SIG_BLOCK_SIZE_MISMATCH);
  EXPECT_EQ(why.block_size, 8u);
  EXPECT_EQ(why.tokens, 4u);
}

TEST(KvSignature, blocks_from_the_pre_layout_format_are_not_readable) {
  EXPECT_FALSE(kvs_block_format_readable(1));
  for (size_t i = 0; i < kvs_block_readable_versions_count; i++) {
    EXPECT_NE(kvs_block_readable_versions[i], 1u);
  }
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  kvs_block_signature signature = from_payload("model-a", flat(4), layers);
  signature.format_version = 1;
  kvs_signature_error why;
  EXPECT_EQ(verify_block(&signature, layers, expected("model-a", flat(4), 2, 2, 8, 4), &why),
            KVS_ERR_SIGNATURE)
      << "version 1 recorded no layout";
  EXPECT_EQ(why.kind, KVS_SIG_UNSUPPORTED_FORMAT);
  EXPECT_EQ(why.format_found, 1u);
  EXPECT_EQ(why.readable, kvs_block_readable_versions);
  EXPECT_EQ(why.n_readable, kvs_block_readable_versions_count);
}

TEST(KvSignature, errors_name_the_field_that_changed) {
  kvs_signature_error why{};
  why.kind = KVS_SIG_INCOMPATIBLE;
  why.field = "head_dim";
  snprintf(why.expected, sizeof why.expected, "128");
  snprintf(why.found, sizeof why.found, "64");
  std::string text = message(why);
  EXPECT_NE(text.find("head_dim"), std::string::npos) << text;
  EXPECT_NE(text.find("64"), std::string::npos) << text;
  EXPECT_NE(text.find("128"), std::string::npos) << text;
  kvs_signature_error unmarked{};
  unmarked.kind = KVS_SIG_UNMARKED;
  EXPECT_NE(message(unmarked).find("unmarked"), std::string::npos);
}

// ---- beyond the seed ----

TEST(BlockSignature, verification_order_is_unmarked_then_version_then_payload_then_reader) {
  // A block wrong in every way reports the earliest check.
  std::vector<Layer> ragged = payload(2, 2, 8, 4);
  ragged[1].positions = 9;
  kvs_block_signature sig = from_payload("model-a", flat(4), payload(2, 2, 8, 4));
  kvs_block_signature reader = expected("model-b", flat(4), 2, 2, 8, 4);
  kvs_signature_error why;
  std::vector<kvs_block_layer> v = views(ragged);

  EXPECT_EQ(kvs_block_verify_parts(nullptr, v.data(), v.size(), &reader, nullptr, &why, nullptr),
            KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_UNMARKED);

  kvs_block_signature old = sig;
  old.format_version = 1;
  EXPECT_EQ(kvs_block_verify_parts(&old, v.data(), v.size(), &reader, nullptr, &why, nullptr),
            KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_UNSUPPORTED_FORMAT);

  kvs_block_signature lying = sig;
  lying.head_dim = 16;
  EXPECT_EQ(kvs_block_verify_parts(&lying, v.data(), v.size(), &reader, nullptr, &why, nullptr),
            KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_RAGGED_PAYLOAD)
      << "the payload is measured before the stamp is compared";

  std::vector<Layer> good = payload(2, 2, 8, 4);
  v = views(good);
  EXPECT_EQ(kvs_block_verify_parts(&lying, v.data(), v.size(), &reader, nullptr, &why, nullptr),
            KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_PAYLOAD_MISMATCH) << "the stamp is compared before the reader";

  EXPECT_EQ(kvs_block_verify_parts(&sig, v.data(), v.size(), &reader, nullptr, &why, nullptr),
            KVS_ERR_SIGNATURE);
  expect_incompatible(why, "model", "model-b", "model-a");

  // A NULL reader stops after the stamp check.
  kvs_block_signature actual;
  EXPECT_EQ(kvs_block_verify_parts(&sig, v.data(), v.size(), nullptr, &actual, &why, nullptr),
            KVS_OK);
  EXPECT_STREQ(actual.model, "model-a");
}

TEST(BlockSignature, the_reader_never_contributes_a_field) {
  // A reader that expects exactly the stamp's lie still gets the mismatch.
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  kvs_block_signature lying = from_payload("model-a", flat(4), layers);
  lying.n_kv_heads = 4;
  lying.head_dim = 4;  // 4x4 = 2x8 elements per token: only the stamp differs
  kvs_signature_error why;
  EXPECT_EQ(verify_block(&lying, layers, expected("model-a", flat(4), 2, 4, 4, 4), &why),
            KVS_ERR_SIGNATURE);
  expect_payload_mismatch(why, "n_kv_heads", "4", "2");
}

TEST(BlockSignature, dtype_is_measured_and_part_of_the_identity) {
  std::vector<Layer> layers = payload(2, 2, 8, 4, KVS_DTYPE_BF16);
  kvs_block_signature sig = from_payload("model-a", flat(4), layers);
  EXPECT_EQ(sig.dtype, KVS_DTYPE_BF16);
  kvs_signature_error why;
  EXPECT_EQ(
      verify_block(&sig, layers, expected("model-a", flat(4), 2, 2, 8, 4, KVS_DTYPE_F32), &why),
      KVS_ERR_SIGNATURE);
  expect_incompatible(why, "dtype", "f32", "bf16");
  EXPECT_EQ(
      verify_block(&sig, layers, expected("model-a", flat(4), 2, 2, 8, 4, KVS_DTYPE_BF16), &why),
      KVS_OK);

  // A stamp claiming f32 over bf16 tensors is a lying stamp.
  kvs_block_signature lying = sig;
  lying.dtype = KVS_DTYPE_F32;
  EXPECT_EQ(verify_block(&lying, layers, expected("model-a", flat(4), 2, 2, 8, 4), &why),
            KVS_ERR_SIGNATURE);
  expect_payload_mismatch(why, "dtype", "f32", "bf16");

  // Layers of mixed dtypes do not make one payload.
  std::vector<Layer> mixed = payload(3, 2, 8, 4);
  mixed[2] = layer(2, 8, 4, KVS_DTYPE_BF16);
  EXPECT_EQ(measure("model-a", flat(4), mixed, &why), KVS_ERR_SIGNATURE);
  expect_ragged(why, 2, "dtype");
  EXPECT_STREQ(why.expected, "f32");
  EXPECT_STREQ(why.found, "bf16");
}

TEST(BlockSignature, same_model_name_with_other_weights_is_a_miss) {
  std::vector<uint8_t> w1 = {0xde, 0xad, 0xbe, 0xef};
  std::vector<uint8_t> w2 = {0xde, 0xad, 0xbe, 0xf0};
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  kvs_block_signature sig = from_payload("model-a", flat(4), layers, w1);
  EXPECT_EQ(sig.weights_len, 4u);
  kvs_signature_error why;
  EXPECT_EQ(
      verify_block(&sig, layers, expected("model-a", flat(4), 2, 2, 8, 4, KVS_DTYPE_F32, w2), &why),
      KVS_ERR_SIGNATURE);
  expect_incompatible(why, "weights_fingerprint", "deadbef0", "deadbeef");
  // A reader with no fingerprint does not match one with a fingerprint.
  EXPECT_EQ(verify_block(&sig, layers, expected("model-a", flat(4), 2, 2, 8, 4), &why),
            KVS_ERR_SIGNATURE);
  expect_incompatible(why, "weights_fingerprint", "none", "deadbeef");
  EXPECT_EQ(
      verify_block(&sig, layers, expected("model-a", flat(4), 2, 2, 8, 4, KVS_DTYPE_F32, w1), &why),
      KVS_OK);
}

TEST(BlockSignature, degenerate_and_split_layers_are_refused) {
  std::vector<Layer> layers = payload(2, 0, 8, 4);
  kvs_signature_error why;
  EXPECT_EQ(measure("model-a", flat(4), layers, &why), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_DEGENERATE_LAYER);
  EXPECT_EQ(why.layer, 0u);
  EXPECT_EQ(why.n_kv_heads, 0u);
  EXPECT_EQ(why.head_dim, 8u);
  EXPECT_NE(message(why).find("layer 0"), std::string::npos) << message(why);

  layers = payload(2, 2, 8, 4);
  layers[1].v_head_dim = 16;  // MiMo-style split widths
  EXPECT_EQ(measure("model-a", flat(4), layers, &why), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_SPLIT_KV_HEAD_WIDTH);
  EXPECT_EQ(why.layer, 1u);
  EXPECT_EQ(why.head_dim, 8u);
  EXPECT_EQ(why.v_head_dim, 16u);
  std::string text = message(why);
  EXPECT_NE(text.find("16"), std::string::npos) << text;
  EXPECT_NE(text.find("head_dim"), std::string::npos) << text;

  layers = payload(2, 2, 8, 4);
  layers[0].k.resize(layers[0].k.size() - 4);  // one f32 short of whole rows
  EXPECT_EQ(measure("model-a", flat(4), layers, &why), KVS_ERR_SIGNATURE);
  expect_ragged(why, 0, "k length");
  EXPECT_STREQ(why.expected, "a multiple of 16");
  EXPECT_STREQ(why.found, "63");
}

TEST(BlockSignature, a_recorded_layout_that_is_unusable_is_refused) {
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  kvs_block_signature sig = from_payload("model-a", flat(4), layers);
  sig.layout.sliding_window = 126;  // 4 does not divide 126
  kvs_signature_error why;
  EXPECT_EQ(verify_block(&sig, layers, expected("model-a", flat(4), 2, 2, 8, 4), &why),
            KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_BAD_LAYOUT);
  EXPECT_EQ(why.layout_problem, KVS_BLOCK_LAYOUT_MISALIGNED_WINDOW);
  std::string text = message(why);
  EXPECT_NE(text.find("4"), std::string::npos) << text;
  EXPECT_NE(text.find("126"), std::string::npos) << text;

  kvs_block_layout zero = {0, 0};
  EXPECT_EQ(measure("model-a", zero, layers, &why), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_BAD_LAYOUT);
  EXPECT_EQ(why.layout_problem, KVS_BLOCK_LAYOUT_ZERO_BLOCK_SIZE);
}

TEST(BlockSignature, every_refusal_has_a_message_naming_its_values) {
  struct Case {
    kvs_signature_error why;
    std::vector<std::string> needles;
  };
  std::vector<Case> cases;
  kvs_signature_error e{};
  e.kind = KVS_SIG_UNMARKED;
  cases.push_back({e, {"unmarked"}});
  e = {};
  e.kind = KVS_SIG_EMPTY_PAYLOAD;
  cases.push_back({e, {"no layers"}});
  e = {};
  e.kind = KVS_SIG_DEGENERATE_LAYER;
  e.layer = 3;
  e.n_kv_heads = 0;
  e.head_dim = 64;
  cases.push_back({e, {"layer 3", "0 kv heads", "64 head dim"}});
  e = {};
  e.kind = KVS_SIG_SPLIT_KV_HEAD_WIDTH;
  e.layer = 5;
  e.head_dim = 192;
  e.v_head_dim = 128;
  cases.push_back({e, {"layer 5", "192", "128", "head_dim"}});
  e = {};
  e.kind = KVS_SIG_RAGGED_PAYLOAD;
  e.layer = 2;
  e.field = "token count";
  snprintf(e.expected, sizeof e.expected, "4");
  snprintf(e.found, sizeof e.found, "3");
  cases.push_back({e, {"layer 2", "token count is 3", "expected 4"}});
  e = {};
  e.kind = KVS_SIG_PAYLOAD_MISMATCH;
  e.field = "head_dim";
  snprintf(e.recorded, sizeof e.recorded, "16");
  snprintf(e.actual, sizeof e.actual, "8");
  cases.push_back({e, {"head_dim=16", "head_dim=8"}});
  e = {};
  e.kind = KVS_SIG_INCOMPATIBLE;
  e.field = "sliding_window";
  snprintf(e.expected, sizeof e.expected, "none (full causal)");
  snprintf(e.found, sizeof e.found, "128");
  cases.push_back({e, {"sliding_window is 128", "needs none (full causal)"}});
  e = {};
  e.kind = KVS_SIG_BLOCK_SIZE_MISMATCH;
  e.block_size = 64;
  e.tokens = 48;
  cases.push_back({e, {"block size 64", "48 token positions"}});
  e = {};
  e.kind = KVS_SIG_BAD_LAYOUT;
  e.layout = {48, 128};
  e.layout_problem = KVS_BLOCK_LAYOUT_MISALIGNED_WINDOW;
  cases.push_back({e, {"block size 48", "128"}});
  e = {};
  e.kind = KVS_SIG_UNSUPPORTED_FORMAT;
  e.format_found = 7;
  e.readable = kvs_block_readable_versions;
  e.n_readable = kvs_block_readable_versions_count;
  cases.push_back({e, {"version 7", "readable: [2, 3]"}});
  for (const Case &c : cases) {
    std::string text = message(c.why);
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
    for (const std::string &n : c.needles) {
      EXPECT_NE(text.find(n), std::string::npos)
          << kvs_signature_error_kind_name(c.why.kind) << ": '" << n << "' not in: " << text;
    }
  }
}

TEST(BlockSignature, a_refusal_fills_the_error_message_with_the_same_text) {
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  kvs_block_signature sig = from_payload("model-a", flat(4), layers);
  kvs_signature_error why;
  kvs_error err;
  EXPECT_EQ(
      verify_block(&sig, layers, expected("model-b", flat(4), 2, 2, 8, 4), &why, nullptr, &err),
      KVS_ERR_SIGNATURE);
  EXPECT_EQ(err.status, KVS_ERR_SIGNATURE);
  EXPECT_EQ(std::string(err.message), message(why));
  EXPECT_STREQ(err.message,
               "KV block is incompatible: model is model-a, this reader needs model-b");
}

TEST(BlockSignature, a_refused_block_can_still_be_verified_by_the_right_reader) {
  std::vector<Layer> layers = payload(2, 2, 8, 4);
  kvs_block_signature sig = from_payload("model-a", flat(4), layers);
  std::vector<kvs_block_layer> v = views(layers);
  kvs_unverified_block_t ub = nullptr;
  ASSERT_EQ(kvs_unverified_block_create(&sig, v.data(), v.size(), &ub, nullptr), KVS_OK);
  kvs_block_signature wrong = expected("model-b", flat(4), 2, 2, 8, 4);
  kvs_block_signature right = expected("model-a", flat(4), 2, 2, 8, 4);
  kvs_block_t block = nullptr;
  EXPECT_EQ(kvs_unverified_block_verify(&ub, &wrong, &block, nullptr, nullptr), KVS_ERR_SIGNATURE);
  ASSERT_NE(ub, nullptr);
  EXPECT_EQ(block, nullptr);
  ASSERT_EQ(kvs_unverified_block_verify(&ub, &right, &block, nullptr, nullptr), KVS_OK);
  EXPECT_EQ(ub, nullptr);
  size_t n = 0;
  const kvs_block_layer *got = kvs_block_layers(block, &n);
  EXPECT_TRUE(kvs_test::same_payload(got, n, v.data(), v.size()));
  kvs_block_destroy(block);
}

TEST(BlockSignature, arguments_out_of_domain_are_invalid_not_refusals) {
  std::vector<Layer> layers = payload(1, 1, 1, 1);
  std::vector<kvs_block_layer> v = views(layers);
  kvs_block_signature sig;
  std::string long_model(KVS_BLOCK_MODEL_MAX + 1, 'm');
  EXPECT_EQ(kvs_block_signature_measure(long_model.c_str(), nullptr, 0, flat(1), v.data(), 1, &sig,
                                        nullptr, nullptr),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_block_signature_measure("line\nbreak", nullptr, 0, flat(1), v.data(), 1, &sig,
                                        nullptr, nullptr),
            KVS_ERR_INVALID_ARGUMENT);
  uint8_t w[KVS_BLOCK_WEIGHTS_MAX + 1] = {};
  EXPECT_EQ(
      kvs_block_signature_measure("m", w, sizeof w, flat(1), v.data(), 1, &sig, nullptr, nullptr),
      KVS_ERR_INVALID_ARGUMENT);
  v[0].dtype = static_cast<kvs_dtype>(9);
  EXPECT_EQ(
      kvs_block_signature_measure("m", nullptr, 0, flat(1), v.data(), 1, &sig, nullptr, nullptr),
      KVS_ERR_INVALID_ARGUMENT);
  kvs_error err;
  EXPECT_EQ(kvs_block_signature_expected("m", nullptr, 0, kvs_block_layout{3, 128}, 1, 1, 1,
                                         KVS_DTYPE_F32, 3, &sig, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("128"), std::string::npos) << err.message;
}

TEST(BlockLayout, block_size_must_divide_the_window) {
  kvs_block_layout layout{};
  kvs_error err;
  EXPECT_EQ(kvs_block_layout_init(48, 128, &layout, &err), KVS_ERR_INVALID_ARGUMENT);
  std::string text = err.message;
  EXPECT_NE(text.find("48"), std::string::npos) << text;
  EXPECT_NE(text.find("128"), std::string::npos) << text;
  EXPECT_EQ(layout.block_size, 0u) << "untouched on failure";
  EXPECT_EQ(kvs_block_layout_init(0, 0, &layout, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_block_layout_init(256, 128, &layout, &err), KVS_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(kvs_block_layout_init(64, 128, &layout, &err), KVS_OK);
  EXPECT_EQ(layout.block_size, 64u);
  EXPECT_EQ(layout.sliding_window, 128u);
  ASSERT_EQ(kvs_block_layout_init(48, KVS_BLOCK_NO_WINDOW, &layout, &err), KVS_OK)
      << "any block size works without a window";
  char buf[64];
  EXPECT_STREQ(kvs_block_window_describe(KVS_BLOCK_NO_WINDOW, buf, sizeof buf),
               "none (full causal)");
  EXPECT_STREQ(kvs_block_window_describe(128, buf, sizeof buf), "128");
}

TEST(BlockDtype, names_sizes_and_parsing) {
  EXPECT_STREQ(kvs_dtype_name(KVS_DTYPE_F32), "f32");
  EXPECT_STREQ(kvs_dtype_name(KVS_DTYPE_BF16), "bf16");
  EXPECT_EQ(kvs_dtype_size(KVS_DTYPE_F32), 4u);
  EXPECT_EQ(kvs_dtype_size(KVS_DTYPE_BF16), 2u);
  EXPECT_EQ(kvs_dtype_size(static_cast<kvs_dtype>(0)), 0u);
  kvs_dtype d = KVS_DTYPE_F32;
  EXPECT_TRUE(kvs_dtype_parse("bf16", &d));
  EXPECT_EQ(d, KVS_DTYPE_BF16);
  EXPECT_FALSE(kvs_dtype_parse("f16", &d));
  EXPECT_EQ(d, KVS_DTYPE_BF16);
}

// DSV4 page blocks (format version 3): the codec's round trip is
// canonical, every refusal of page_block.h's order is reached and names
// its field with both values, the position digest catches rows moved to
// another page, depth or section, corruption never yields a block, and
// version 2 blocks still read beside version 3 ones in one store.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "blocks/block_codec.h"
#include "blocks/block_store.h"
#include "blocks/page_codec.h"
#include "tests/blocks/page_test_util.h"
#include "tests/blocks/store_test_util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

using namespace kvs_test;

namespace {

const kvs_block_hash kChain = {0x1122334455667788ull, 0x99aabbccddeeff00ull};

std::vector<uint8_t> encode(const kvs_block_hash *key, const kvs_page_signature *rec,
                            const std::vector<kvs_page_section> &sections) {
  size_t size = 0;
  EXPECT_EQ(kvs_page_block_encoded_size(key, rec, sections.data(), sections.size(), &size, nullptr),
            KVS_OK);
  std::vector<uint8_t> out(size);
  size_t written = 0;
  EXPECT_EQ(kvs_page_block_encode_parts(key, rec, sections.data(), sections.size(), out.data(),
                                        out.size(), &written, nullptr),
            KVS_OK);
  EXPECT_EQ(written, size);
  return out;
}

// A page's encoding with its own measured stamp and digests.
std::vector<uint8_t> encode_page(const Page &p, const kvs_block_hash *key = &kChain) {
  kvs_page_block_t b = stamp_page(p);
  EXPECT_NE(b, nullptr);
  std::vector<uint8_t> out(kvs_page_block_encoded_size_of(key, b));
  EXPECT_EQ(kvs_page_block_encode(key, b, out.data(), out.size(), nullptr, nullptr), KVS_OK);
  kvs_page_block_destroy(b);
  return out;
}

void fix_checksum(std::vector<uint8_t> &b) {
  uint64_t sum = XXH3_64bits(b.data(), b.size() - 8);
  for (int i = 0; i < 8; i++) b[b.size() - 8 + i] = static_cast<uint8_t>(sum >> (8 * i));
}

// Decodes and verifies against reader; the refusal's message in *text.
kvs_status read_as(const std::vector<uint8_t> &bytes, const kvs_page_signature &reader,
                   kvs_signature_error *why, std::string *text) {
  kvs_page_block_t b = nullptr;
  kvs_error err;
  kvs_error_clear(&err);
  kvs_status st =
      kvs_page_block_decode(bytes.data(), bytes.size(), &reader, nullptr, &b, why, &err);
  if (text != nullptr) *text = err.message;
  kvs_page_block_destroy(b);
  return st;
}

TEST(PageBlock, round_trip_is_canonical) {
  for (uint32_t page : {16u, 256u}) {
    PageSpec spec;
    spec.page_size = page;
    Page p = make_page(spec, kChain, 7, 42);
    std::vector<uint8_t> bytes = encode_page(p);
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(bytes.data()), 8), "KVSBLOCK");
    EXPECT_EQ(bytes[8], 3u) << "format version 3";
    kvs_page_block_view view;
    kvs_page_section sections[KVS_PAGE_MAX_SECTIONS];
    ASSERT_EQ(kvs_page_block_decode_view(bytes.data(), bytes.size(), &view, sections,
                                         KVS_PAGE_MAX_SECTIONS, nullptr),
              KVS_OK);
    EXPECT_TRUE(view.readable && view.marked && view.keyed);
    EXPECT_TRUE(kvs_block_hash_equal(&view.key, &kChain));
    ASSERT_EQ(view.n_sections, p.sections.size());
    EXPECT_EQ(view.signature.id.depth, 7u);
    EXPECT_EQ(view.signature.id.page_size, page);
    std::vector<kvs_page_section> again(sections, sections + view.n_sections);
    EXPECT_EQ(encode(&view.key, &view.signature, again), bytes) << "re-encoding is canonical";

    kvs_page_signature reader = p.reader();
    kvs_page_block_t b = nullptr;
    kvs_error err;
    ASSERT_EQ(
        kvs_page_block_decode(bytes.data(), bytes.size(), &reader, nullptr, &b, nullptr, &err),
        KVS_OK)
        << err.message;
    EXPECT_TRUE(same_page(b, p));
    std::vector<uint8_t> out(kvs_page_block_encoded_size_of(&kChain, b));
    ASSERT_EQ(kvs_page_block_encode(&kChain, b, out.data(), out.size(), nullptr, nullptr), KVS_OK);
    EXPECT_EQ(out, bytes) << "a decoded block encodes to the same bytes";
    kvs_page_block_destroy(b);
  }
}

TEST(PageBlock, the_host_slot_of_a_dsv4_page_is_expressible) {
  // A DSV4-Flash page of 256 tokens on a rank of 4 layers: CSA and
  // indexer rows of 3 ratio-4 layers, one HCA layer, fp8 with scales.
  PageSpec spec;
  spec.page_size = 256;
  spec.csa_layers = 3;
  spec.hca_layers = 1;
  Page p = make_page(spec, kChain, 0, 1);
  ASSERT_GE(p.sections.size(), 3u);
  EXPECT_EQ(p.sections[0].n_bytes, 3u * 64 * 584);
  EXPECT_EQ(p.sections[1].n_bytes, 3u * 64 * 132);
  EXPECT_EQ(p.sections[2].n_bytes, 1u * 2 * 584);
  kvs_page_signature sig;
  kvs_signature_error why;
  kvs_error err;
  ASSERT_EQ(
      kvs_page_signature_measure(&p.id, p.sections.data(), p.sections.size(), &sig, &why, &err),
      KVS_OK)
      << err.message;
  EXPECT_EQ(sig.sections[1].row_bytes, 132u);
}

struct Refusal {
  std::string what;
  kvs_signature_error_kind kind;
  std::string needle;
};

// Each of steps 3 to 5, reached by a page that differs in one thing.
TEST(PageBlock, every_refusal_names_its_field) {
  PageSpec spec;
  Page good = make_page(spec, kChain, 3, 9);
  const kvs_page_signature reader = good.reader();
  kvs_page_block_t b = stamp_page(good);
  ASSERT_NE(b, nullptr);
  const kvs_page_signature stamp = *kvs_page_block_signature_of(b);
  kvs_page_block_destroy(b);

  struct Case {
    Refusal want;
    kvs_page_signature rec;
    std::vector<kvs_page_section> sections;
    kvs_page_signature reader;
  };
  std::vector<Case> cases;
  auto add = [&](Refusal r, auto edit) {
    Case c{r, stamp, good.sections, reader};
    edit(c);
    cases.push_back(c);
  };
  add({"no sections", KVS_SIG_EMPTY_PAYLOAD, "no layers"}, [](Case &c) {
    c.sections.clear();
    c.rec.n_sections = 0;
  });
  add({"zero rows", KVS_SIG_DEGENERATE_LAYER, "section 0 (compressed ratio 4): shape"},
      [](Case &c) { c.sections[0].shape.rows = 0; });
  add({"odd bf16 row", KVS_SIG_RAGGED_PAYLOAD, "row_bytes is 133, expected a multiple of 2"},
      [](Case &c) {
        c.sections[1].shape.encoding = KVS_PAGE_BF16;
        c.sections[1].shape.row_bytes = 133;
      });
  add({"short bytes", KVS_SIG_RAGGED_PAYLOAD, "section 1 (indexer): n_bytes"},
      [](Case &c) { c.sections[1].n_bytes -= 8; });
  add({"too many layers", KVS_SIG_RAGGED_PAYLOAD, "layers is 5, expected at most 4"}, [](Case &c) {
    c.sections[2].shape.layers = 5;
    c.sections[2].n_bytes = 5 * 2 * 64;
  });
  add({"a tier twice", KVS_SIG_RAGGED_PAYLOAD, "section 1 (compressed ratio 4): tier"},
      [](Case &c) { c.sections[1].shape.tier = KVS_PAGE_TIER_COMPRESSED_4; });
  add({"rows for another page", KVS_SIG_BLOCK_SIZE_MISMATCH,
       "rows is 2, expected 4 (page size 16)"},
      [](Case &c) {
        c.sections[0].shape.rows = 2;
        c.sections[0].n_bytes /= 2;
      });
  add({"stamp lies about a row width", KVS_SIG_PAYLOAD_MISMATCH,
       "section 1 (indexer): row_bytes 256 recorded, 132 measured"},
      [](Case &c) { c.rec.sections[1].row_bytes = 256; });
  add({"stamp lies about the section count", KVS_SIG_PAYLOAD_MISMATCH, "n_sections=3"},
      [](Case &c) { c.rec.n_sections = 3; });
  add({"altered rows", KVS_SIG_PAYLOAD_MISMATCH, "section 2 (tail state): digest"},
      [](Case &c) { c.sections[2].digest ^= 1; });
  add({"stamped for another depth", KVS_SIG_PAYLOAD_MISMATCH,
       "section 0 (compressed ratio 4): digest"},
      [](Case &c) {
        c.rec.id.depth = 4;
        c.reader.id.depth = 4;
      });
  add({"another model", KVS_SIG_INCOMPATIBLE,
       "model is deepseek-ai/DeepSeek-V4-Flash, this reader needs other"},
      [](Case &c) { std::snprintf(c.reader.id.model, sizeof c.reader.id.model, "other"); });
  add({"weights", KVS_SIG_INCOMPATIBLE, "weights_fingerprint is none, this reader needs ab"},
      [](Case &c) {
        c.reader.id.weights[0] = 0xab;
        c.reader.id.weights_len = 1;
      });
  add({"page size", KVS_SIG_INCOMPATIBLE, "page_size is 16, this reader needs 64"},
      [](Case &c) { c.reader.id.page_size = 64; });
  add({"geometry", KVS_SIG_INCOMPATIBLE, "geometry is 00000000d5f4a5e1, this reader needs"},
      [](Case &c) { c.reader.id.geometry = 1; });
  add({"layer range", KVS_SIG_INCOMPATIBLE, "layer_range is [0, 4), this reader needs [4, 8)"},
      [](Case &c) {
        c.reader.id.layer_begin = 4;
        c.reader.id.layer_end = 8;
      });
  add({"reader's indexer rows", KVS_SIG_INCOMPATIBLE,
       "section 1 (indexer): row_bytes 132 in the block, 256 in the reader"},
      [](Case &c) { c.reader.sections[1].row_bytes = 256; });
  add({"reader's encoding", KVS_SIG_INCOMPATIBLE,
       "section 0 (compressed ratio 4): encoding fp8+scales in the block, bf16 in the reader"},
      [](Case &c) { c.reader.sections[0].encoding = KVS_PAGE_BF16; });
  add({"reader's section count", KVS_SIG_INCOMPATIBLE, "n_sections is 4, this reader needs 3"},
      [](Case &c) { c.reader.n_sections = 3; });
  add({"another chain", KVS_SIG_INCOMPATIBLE, "chain is 112233445566778899aabbccddeeff00"},
      [](Case &c) { c.reader.id.chain.low ^= 1; });
  add({"another depth", KVS_SIG_INCOMPATIBLE, "depth is 3, this reader needs 4"},
      [](Case &c) { c.reader.id.depth = 4; });

  for (const Case &c : cases) {
    kvs_signature_error why;
    kvs_error err;
    kvs_error_clear(&err);
    EXPECT_EQ(kvs_page_verify_parts(&c.rec, c.sections.data(), c.sections.size(), &c.reader,
                                    nullptr, &why, &err),
              KVS_ERR_SIGNATURE)
        << c.want.what;
    EXPECT_EQ(why.kind, c.want.kind) << c.want.what << ": " << err.message;
    EXPECT_NE(std::string(err.message).find(c.want.needle), std::string::npos)
        << c.want.what << ": " << err.message;
    char text[512];
    kvs_signature_error_format(&why, text, sizeof text);
    EXPECT_STREQ(text, err.message);
  }
  kvs_signature_error why;
  EXPECT_EQ(kvs_page_verify_parts(&stamp, good.sections.data(), good.sections.size(), &reader,
                                  nullptr, &why, nullptr),
            KVS_OK);
  EXPECT_EQ(kvs_page_verify_parts(nullptr, good.sections.data(), good.sections.size(), &reader,
                                  nullptr, &why, nullptr),
            KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_UNMARKED);
}

TEST(PageBlock, rows_swapped_between_sections_or_pages_are_refused) {
  PageSpec spec;
  spec.tails = false;
  spec.index_row = 584;  // two sections of one shape: only the digest tells them apart
  Page p = make_page(spec, kChain, 5, 11);
  kvs_page_block_t b = stamp_page(p);
  ASSERT_NE(b, nullptr);
  kvs_page_signature stamp = *kvs_page_block_signature_of(b);
  kvs_page_block_destroy(b);
  kvs_page_signature reader = p.reader();

  // Section 0's bytes and digest in section 1's place, and back.
  std::vector<kvs_page_section> swapped = p.sections;
  std::swap(swapped[0].bytes, swapped[1].bytes);
  std::swap(swapped[0].digest, swapped[1].digest);
  kvs_signature_error why;
  kvs_error err;
  EXPECT_EQ(
      kvs_page_verify_parts(&stamp, swapped.data(), swapped.size(), &reader, nullptr, &why, &err),
      KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_PAYLOAD_MISMATCH);
  EXPECT_STREQ(why.field, "digest");
  EXPECT_TRUE(why.in_section);
  EXPECT_EQ(why.section, 0u);

  // The same rows written for the page at depth 6, filed at depth 5.
  Page other = make_page(spec, kChain, 6, 11);
  std::vector<kvs_page_section> moved = other.sections;
  EXPECT_EQ(kvs_page_verify_parts(&stamp, moved.data(), moved.size(), &reader, nullptr, &why, &err),
            KVS_ERR_SIGNATURE);
  EXPECT_STREQ(why.field, "digest") << err.message;
}

TEST(PageBlock, corruption_never_yields_a_block) {
  PageSpec spec;
  spec.csa_layers = 1;
  spec.kv_row = 24;
  spec.index_row = 12;
  spec.tail_row = 8;
  Page p = make_page(spec, kChain, 2, 5);
  const std::vector<uint8_t> good = encode_page(p);
  const kvs_page_signature reader = p.reader();
  ASSERT_EQ(read_as(good, reader, nullptr, nullptr), KVS_OK);
  // Every truncation is corrupt.
  for (size_t n = 0; n < good.size(); n++) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
    EXPECT_EQ(read_as(cut, reader, nullptr, nullptr), KVS_ERR_CORRUPT) << n;
  }
  // Every byte flipped: corrupt as stored; with the checksum repaired,
  // corrupt or refused, except a flip in the key (the store checks it).
  for (size_t i = 0; i + 8 < good.size(); i++) {
    std::vector<uint8_t> b = good;
    b[i] ^= 0x5a;
    EXPECT_EQ(read_as(b, reader, nullptr, nullptr), KVS_ERR_CORRUPT) << i;
    fix_checksum(b);
    std::string text;
    kvs_status st = read_as(b, reader, nullptr, &text);
    bool in_key = i >= KVS_BLOCK_ENVELOPE_BYTES && i < KVS_BLOCK_ENVELOPE_BYTES + 16;
    if (in_key) {
      EXPECT_EQ(st, KVS_OK) << i;
    } else {
      EXPECT_TRUE(st == KVS_ERR_CORRUPT || st == KVS_ERR_SIGNATURE)
          << "byte " << i << ": " << kvs_status_string(st) << " " << text;
    }
  }
}

TEST(PageBlock, the_other_version_is_refused_by_its_version) {
  // A version 2 block handed to a page reader.
  Shape shape;
  kvs_block_t v2 = make_block(shape, 3);
  ASSERT_NE(v2, nullptr);
  std::vector<uint8_t> old(kvs_block_encoded_size_of(&kChain, v2));
  ASSERT_EQ(kvs_block_encode(&kChain, v2, old.data(), old.size(), nullptr, nullptr), KVS_OK);
  kvs_block_destroy(v2);
  Page p = make_page(PageSpec(), kChain, 0, 1);
  kvs_signature_error why;
  std::string text;
  EXPECT_EQ(read_as(old, p.reader(), &why, &text), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_OTHER_FORMAT);
  EXPECT_NE(text.find("format version 2 (K/V layers); this reader reads version 3"),
            std::string::npos)
      << text;

  // A version 3 block handed to a layer reader: decoded (validated), no
  // layers, refused by its version.
  std::vector<uint8_t> page = encode_page(p);
  kvs_block_view view;
  kvs_unverified_block_t ub = nullptr;
  ASSERT_EQ(kvs_block_decode(page.data(), page.size(), &view, &ub, nullptr), KVS_OK);
  EXPECT_TRUE(view.readable);
  EXPECT_EQ(view.n_layers, 0u);
  EXPECT_EQ(view.n_sections, p.sections.size());
  kvs_block_signature layer_reader = reader_for(shape);
  kvs_block_t block = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_unverified_block_verify(&ub, &layer_reader, &block, &why, &err), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_OTHER_FORMAT) << err.message;
  kvs_unverified_block_destroy(ub);

  // An unreadable version: stale, not corrupt.
  page[8] = 4;
  fix_checksum(page);
  EXPECT_EQ(read_as(page, p.reader(), &why, &text), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_UNSUPPORTED_FORMAT) << text;
}

TEST(PageBlock, an_unmarked_page_is_refused) {
  Page p = make_page(PageSpec(), kChain, 0, 1);
  std::vector<uint8_t> bytes = encode(&kChain, nullptr, p.sections);
  kvs_signature_error why;
  EXPECT_EQ(read_as(bytes, p.reader(), &why, nullptr), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_UNMARKED);
}

TEST(PageBlockStore, pages_and_layer_blocks_share_a_store_across_a_restart) {
  std::string dir = scratch_dir("page-store");
  kvs_block_store_t s = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_block_store_create(dir.c_str(), nullptr, &s, nullptr, &err), KVS_OK);
  Shape shape;
  kvs_block_t v2 = make_block(shape, 4);
  kvs_block_hash k2 = key_of(2), k3 = key_of(3);
  ASSERT_EQ(kvs_block_store_put(s, &k2, v2, &err), KVS_OK) << err.message;
  kvs_block_destroy(v2);
  PageSpec spec;
  spec.page_size = 256;
  Page p = make_page(spec, k3, 1, 77);
  kvs_page_block_t pb = stamp_page(p);
  ASSERT_EQ(kvs_block_store_put_page(s, &k3, pb, &err), KVS_OK) << err.message;
  kvs_page_block_destroy(pb);
  kvs_block_store_destroy(s);

  // A new process's view: the scan indexes both, every get reads its own.
  kvs_block_store_scan scan{};
  ASSERT_EQ(kvs_block_store_create(dir.c_str(), nullptr, &s, &scan, &err), KVS_OK);
  EXPECT_EQ(scan.blocks, 2u);
  EXPECT_EQ(scan.corrupt, 0u);
  EXPECT_EQ(scan.unreadable, 0u);
  kvs_page_signature reader = p.reader();
  kvs_page_block_t got = nullptr;
  kvs_signature_error why;
  ASSERT_EQ(kvs_block_store_get_page(s, &k3, &reader, &got, &why, &err), KVS_OK) << err.message;
  EXPECT_TRUE(same_page(got, p));
  kvs_page_block_destroy(got);
  got = nullptr;
  kvs_block_t b2 = nullptr;
  kvs_block_signature r2 = reader_for(shape);
  ASSERT_EQ(kvs_block_store_get(s, &k2, &r2, &b2, &why, &err), KVS_OK) << err.message;
  EXPECT_TRUE(holds_seed(b2, shape, 4));
  kvs_block_destroy(b2);
  b2 = nullptr;
  // Each reader refuses the other's file by its version.
  EXPECT_EQ(kvs_block_store_get_page(s, &k2, &reader, &got, &why, &err), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_OTHER_FORMAT);
  EXPECT_EQ(kvs_block_store_get(s, &k3, &r2, &b2, &why, &err), KVS_ERR_SIGNATURE);
  EXPECT_EQ(why.kind, KVS_SIG_OTHER_FORMAT);
  // Another geometry's reader: refused naming the field.
  kvs_page_signature foreign = reader;
  foreign.sections[1].row_bytes = 256;
  EXPECT_EQ(kvs_block_store_get_page(s, &k3, &foreign, &got, &why, &err), KVS_ERR_SIGNATURE);
  EXPECT_NE(std::string(err.message)
                .find("section 1 (indexer): row_bytes 132 in the block, 256 "
                      "in the reader"),
            std::string::npos)
      << err.message;
  EXPECT_EQ(got, nullptr);
  kvs_block_store_destroy(s);

  // A page file under another key's name is misfiled: corrupt.
  std::string from = dir + "/" + kvs_block_store_file_name(&k3, std::vector<char>(64).data());
  char name[KVS_BLOCK_STORE_NAME_MAX];
  kvs_block_hash k4 = key_of(4);
  ASSERT_EQ(rename(from.c_str(), (dir + "/" + kvs_block_store_file_name(&k4, name)).c_str()), 0);
  ASSERT_EQ(kvs_block_store_create(dir.c_str(), nullptr, &s, &scan, &err), KVS_OK);
  EXPECT_EQ(scan.corrupt, 1u);
  EXPECT_EQ(kvs_block_store_get_page(s, &k4, &reader, &got, &why, &err), KVS_ERR_CORRUPT);
  kvs_block_store_destroy(s);
}

}  // namespace

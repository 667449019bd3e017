// DSV4 page blocks for the block tests: a page's sections (compressed,
// indexer, tail states) with deterministic bytes, its identity, and the
// reader that wants exactly it.
#ifndef KVS_TESTS_BLOCKS_PAGE_TEST_UTIL_H
#define KVS_TESTS_BLOCKS_PAGE_TEST_UTIL_H

#include <cstdint>
#include <cstring>
#include <vector>

#include "blocks/block_hash.h"
#include "blocks/page_block.h"

namespace kvs_test {

// The shape of a synthetic page: fp8 rows with their scales inside at
// DSV4's widths (584-byte KV rows, 132-byte indexer rows), f32 tail
// states; an HCA section when the page holds one of its rows.
struct PageSpec {
  uint32_t page_size = 16;
  uint32_t csa_layers = 2;
  uint32_t hca_layers = 1;
  uint32_t kv_row = 584;
  uint32_t index_row = 132;
  uint32_t tail_row = 64;  // f32 tail-state rows, 2 per layer
  bool tails = true;
  const char *model = "deepseek-ai/DeepSeek-V4-Flash";
  uint64_t geometry = 0xd5f4a5e1ull;
  uint32_t layer_begin = 0;
  uint32_t layer_end = 4;
};

struct Page {
  kvs_page_identity id{};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<kvs_page_section> sections;

  std::vector<kvs_page_section_shape> shapes() const {
    std::vector<kvs_page_section_shape> out;
    for (const kvs_page_section &s : sections) out.push_back(s.shape);
    return out;
  }
  // The reader that wants exactly this page at its position.
  kvs_page_signature reader() const {
    kvs_page_signature sig{};
    std::vector<kvs_page_section_shape> sh = shapes();
    kvs_page_signature_expected(&id, sh.data(), sh.size(), &sig, nullptr);
    return sig;
  }
};

inline Page make_page(const PageSpec &spec, const kvs_block_hash &chain, uint64_t depth,
                      uint64_t seed) {
  Page p;
  kvs_page_identity_init(spec.model, nullptr, 0, spec.page_size, spec.geometry, spec.layer_begin,
                         spec.layer_end, &chain, depth, &p.id, nullptr);
  struct Want {
    uint32_t tier, encoding, layers, rows, row_bytes;
  };
  std::vector<Want> want = {
      {KVS_PAGE_TIER_COMPRESSED_4, KVS_PAGE_FP8_SCALED, spec.csa_layers, spec.page_size / 4,
       spec.kv_row},
      {KVS_PAGE_TIER_INDEXER, KVS_PAGE_FP8_SCALED, spec.csa_layers, spec.page_size / 4,
       spec.index_row},
  };
  if (spec.page_size >= 128 && spec.hca_layers > 0) {
    want.push_back({KVS_PAGE_TIER_COMPRESSED_128, KVS_PAGE_FP8_SCALED, spec.hca_layers,
                    spec.page_size / 128, spec.kv_row});
  }
  if (spec.tails) {
    want.push_back({KVS_PAGE_TIER_TAIL_STATE, KVS_PAGE_F32, spec.csa_layers, 2, spec.tail_row});
    want.push_back({KVS_PAGE_TIER_INDEX_TAIL_STATE, KVS_PAGE_F32, spec.csa_layers, 2, 16});
  }
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (const Want &w : want) {
    std::vector<uint8_t> b(static_cast<size_t>(w.layers) * w.rows * w.row_bytes);
    for (uint8_t &c : b) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      c = static_cast<uint8_t>(x);
    }
    p.bytes.push_back(std::move(b));
  }
  for (size_t i = 0; i < want.size(); i++) {
    kvs_page_section s{};
    s.shape = {want[i].tier, want[i].encoding, want[i].layers, want[i].rows, want[i].row_bytes};
    s.bytes = p.bytes[i].data();
    s.n_bytes = p.bytes[i].size();
    s.digest = kvs_page_section_digest(&chain, depth, static_cast<uint32_t>(i), s.shape.tier,
                                       s.bytes, s.n_bytes);
    p.sections.push_back(s);
  }
  return p;
}

inline kvs_page_block_t stamp_page(const Page &p) {
  kvs_page_block_t b = nullptr;
  kvs_page_block_stamp(&p.id, p.sections.data(), p.sections.size(), &b, nullptr, nullptr);
  return b;
}

// Whether a block holds exactly the page's section bytes.
inline bool same_page(const kvs_page_block *b, const Page &p) {
  size_t n = 0;
  const kvs_page_section *got = kvs_page_block_sections(b, &n);
  if (got == nullptr || n != p.sections.size()) return false;
  for (size_t i = 0; i < n; i++) {
    if (got[i].n_bytes != p.bytes[i].size() ||
        std::memcmp(got[i].bytes, p.bytes[i].data(), p.bytes[i].size()) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace kvs_test

#endif  // KVS_TESTS_BLOCKS_PAGE_TEST_UTIL_H

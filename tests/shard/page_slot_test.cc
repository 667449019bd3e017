// A host slot as a stored page block and back, on the host twin: a page's
// rows spilled into a slot become a page block, stored, found again by
// chain hash after the store is reopened, verified against the reader's
// layout and fetched into another page byte for byte; a reader of another
// dtype or at another position refuses the block with its reason.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "blocks/block_store.h"
#include "core/cost_model.h"
#include "core/geometry.h"
#include "plan/device_layout.h"
#include "pool/window_pool.h"
#include "shard/page_slot.h"
#include "shard/table.h"

namespace {

constexpr uint64_t kPages = 8;

kvs_device_layout layout_of(kvs_kv_dtype dtype) {
  kvs_device_layout l{};
  kvs_error err;
  kvs_geometry g;
  kvs_row_widths w;
  kvs_cost_terms terms;
  kvs_pool_sizes sizes;
  EXPECT_EQ(kvs_geometry_builtin("dsv4-flash", &g, &err), KVS_OK);
  size_t layers = kvs_geometry_layer_count(&g);
  EXPECT_EQ(kvs_row_widths_for(&g, dtype, 64, &w, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_cost_terms_make(&g, 0, layers, &w, &terms, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_pool_sizes_compute_terms(kPages, &terms, 0.5, 128, 4, &sizes, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(kvs_device_layout_build(&g, 0, layers, &w, &sizes, nullptr, &l, &err), KVS_OK)
      << err.message;
  return l;
}

struct TableDeleter {
  void operator()(kvs_table *t) const { kvs_table_destroy(t); }
};
using Table = std::unique_ptr<kvs_table, TableDeleter>;

// A spill (page -> slot) or fetch (slot -> page), as the pool journals it.
kvs_journal_entry move(bool fetch, uint64_t page, uint64_t slot) {
  kvs_journal_entry e{};
  e.full_page = int64_t(KVS_JOURNAL_PREFIX_TAG |
                        (uint64_t(fetch ? KVS_PREFIX_OP_FETCH : KVS_PREFIX_OP_SPILL) << 56) | page);
  e.window_page = int64_t(slot);
  EXPECT_TRUE(kvs_window_pool_host_move_of(&e, nullptr));
  return e;
}

// Each span's rows of `page` in the carve, layer by layer.
std::vector<unsigned char> page_rows(const kvs_device_layout &l, const unsigned char *base,
                                     uint64_t page) {
  kvs_table_span_rows spans[KVS_TABLE_ROW_SPANS];
  size_t n = kvs_table_host_spans(&l, spans);
  std::vector<unsigned char> out;
  for (size_t s = 0; s < n; s++) {
    for (uint64_t layer = 0; layer < spans[s].count; layer++) {
      const unsigned char *at =
          base + spans[s].offset + layer * spans[s].stride + page * spans[s].page_step;
      out.insert(out.end(), at, at + spans[s].width);
    }
  }
  return out;
}

// Fills page's rows with a stream of `seed`.
void write_page(const kvs_device_layout &l, unsigned char *base, uint64_t page, uint64_t seed) {
  kvs_table_span_rows spans[KVS_TABLE_ROW_SPANS];
  size_t n = kvs_table_host_spans(&l, spans);
  uint64_t x = seed;
  for (size_t s = 0; s < n; s++) {
    for (uint64_t layer = 0; layer < spans[s].count; layer++) {
      unsigned char *at =
          base + spans[s].offset + layer * spans[s].stride + page * spans[s].page_step;
      for (uint64_t i = 0; i < spans[s].width; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        at[i] = static_cast<unsigned char>(x);
      }
    }
  }
}

std::string scratch() {
  const char *tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/page_slot_XXXXXX";
  return mkdtemp(dir.data()) != nullptr ? dir : "";
}

kvs_page_signature reader(const kvs_device_layout &l, kvs_kv_dtype dtype,
                          const kvs_block_hash &chain, uint64_t depth) {
  kvs_page_identity id;
  kvs_error err;
  EXPECT_EQ(kvs_page_slot_identity(&l, dtype, "dsv4-flash", &chain, depth, &id, &err), KVS_OK)
      << err.message;
  kvs_page_section_shape shapes[KVS_PAGE_MAX_SECTIONS];
  size_t n = kvs_page_slot_shapes(&l, dtype, shapes);
  kvs_page_signature sig;
  EXPECT_EQ(kvs_page_signature_expected(&id, shapes, n, &sig, &err), KVS_OK) << err.message;
  return sig;
}

}  // namespace

TEST(PageSlot, a_spilled_page_is_stored_found_after_a_reopen_and_fetched_byte_for_byte) {
  const kvs_device_layout l = layout_of(KVS_KV_FP8);
  kvs_table_limits limits{8, 8};
  kvs_table_t raw = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_table_create_host(&l, &limits, &raw, &err), KVS_OK) << err.message;
  Table table(raw);
  ASSERT_EQ(kvs_table_host_tier(table.get(), &l, 4, &err), KVS_OK) << err.message;
  void *mem = nullptr;
  int64_t *mapping = nullptr;
  ASSERT_EQ(kvs_table_memory(table.get(), &mem, &mapping, &err), KVS_OK) << err.message;
  auto *base = static_cast<unsigned char *>(mem);

  // Three sections (ratio 4, ratio 128, indexer), fp8 rows of 584 and 132.
  kvs_page_section_shape shapes[KVS_PAGE_MAX_SECTIONS];
  ASSERT_EQ(kvs_page_slot_shapes(&l, KVS_KV_FP8, shapes), 3u);
  EXPECT_EQ(shapes[0].tier, uint32_t(KVS_PAGE_TIER_COMPRESSED_4));
  EXPECT_EQ(shapes[0].row_bytes, 584u);
  EXPECT_EQ(shapes[0].rows, 32u);
  EXPECT_EQ(shapes[1].tier, uint32_t(KVS_PAGE_TIER_COMPRESSED_128));
  EXPECT_EQ(shapes[1].rows, 1u);
  EXPECT_EQ(shapes[2].tier, uint32_t(KVS_PAGE_TIER_INDEXER));
  EXPECT_EQ(shapes[2].row_bytes, 132u);
  EXPECT_NE(kvs_page_slot_geometry(&l, KVS_KV_FP8), kvs_page_slot_geometry(&l, KVS_KV_BF16));

  write_page(l, base, 1, 0x9e3779b97f4a7c15ull);
  const std::vector<unsigned char> written = page_rows(l, base, 1);
  kvs_journal_entry spill = move(false, 1, 0);
  ASSERT_EQ(kvs_table_apply(table.get(), &spill, nullptr, 1, &err), KVS_OK) << err.message;

  const kvs_block_hash chain{0x1234, 0x5678};
  kvs_page_section sections[KVS_PAGE_MAX_SECTIONS];
  size_t n = 0;
  const unsigned char *slot = kvs_table_host_tier_slot(table.get(), 0, nullptr, nullptr);
  ASSERT_EQ(kvs_page_slot_sections(&l, KVS_KV_FP8, slot, sections, &n, &err), KVS_OK);
  kvs_page_identity id;
  ASSERT_EQ(kvs_page_slot_identity(&l, KVS_KV_FP8, "dsv4-flash", &chain, 3, &id, &err), KVS_OK);
  kvs_page_block_t block = nullptr;
  kvs_signature_error why;
  ASSERT_EQ(kvs_page_block_stamp(&id, sections, n, &block, &why, &err), KVS_OK) << err.message;

  const std::string dir = scratch();
  ASSERT_FALSE(dir.empty());
  kvs_block_store_t store = nullptr;
  ASSERT_EQ(kvs_block_store_create(dir.c_str(), nullptr, &store, nullptr, &err), KVS_OK)
      << err.message;
  ASSERT_EQ(kvs_block_store_put_page(store, &chain, block, &err), KVS_OK) << err.message;
  kvs_page_block_destroy(block);
  kvs_block_store_destroy(store);

  // A restart: a new store over the same directory.
  kvs_block_store_scan scan;
  ASSERT_EQ(kvs_block_store_create(dir.c_str(), nullptr, &store, &scan, &err), KVS_OK);
  EXPECT_EQ(scan.blocks, 1u);
  const kvs_page_signature want = reader(l, KVS_KV_FP8, chain, 3);
  kvs_page_block_t back = nullptr;
  ASSERT_EQ(kvs_block_store_get_page(store, &chain, &want, &back, &why, &err), KVS_OK)
      << err.message;
  void *slot2 =
      const_cast<unsigned char *>(kvs_table_host_tier_slot(table.get(), 2, nullptr, nullptr));
  ASSERT_EQ(kvs_page_slot_fill(&l, KVS_KV_FP8, back, slot2, &err), KVS_OK) << err.message;
  kvs_journal_entry fetch = move(true, 5, 2);
  ASSERT_EQ(kvs_table_apply(table.get(), &fetch, nullptr, 1, &err), KVS_OK) << err.message;
  EXPECT_TRUE(page_rows(l, base, 5) == written) << "the fetched page holds the spilled rows";

  // Another dtype's reader: refused by its signature, with the reason.
  const kvs_device_layout bf16 = layout_of(KVS_KV_BF16);
  const kvs_page_signature foreign = reader(bf16, KVS_KV_BF16, chain, 3);
  kvs_page_block_t none = nullptr;
  EXPECT_EQ(kvs_block_store_get_page(store, &chain, &foreign, &none, &why, &err),
            KVS_ERR_SIGNATURE);
  EXPECT_EQ(none, nullptr);
  EXPECT_NE(std::string(err.message).find("incompatible"), std::string::npos) << err.message;
  // The same rows read for another position in the chain: refused.
  const kvs_page_signature elsewhere = reader(l, KVS_KV_FP8, chain, 4);
  EXPECT_EQ(kvs_block_store_get_page(store, &chain, &elsewhere, &none, &why, &err),
            KVS_ERR_SIGNATURE);
  EXPECT_NE(std::string(err.message).find("depth"), std::string::npos) << err.message;
  // And a slot of another layout takes nothing from the block.
  std::vector<unsigned char> other(kvs_table_host_slot_bytes(&bf16), 0xab);
  EXPECT_EQ(kvs_page_slot_fill(&bf16, KVS_KV_BF16, back, other.data(), &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("section 0 (compressed ratio 4)"), std::string::npos)
      << err.message;
  EXPECT_EQ(other[0], 0xab);
  kvs_page_block_destroy(back);
  kvs_block_store_destroy(store);
}

TEST(PageSlot, null_arguments_are_refused_by_name) {
  const kvs_device_layout l = layout_of(KVS_KV_FP8);
  kvs_page_section sections[KVS_PAGE_MAX_SECTIONS];
  size_t n = 0;
  kvs_error err;
  unsigned char slot[8] = {};
  EXPECT_EQ(kvs_page_slot_sections(nullptr, KVS_KV_FP8, slot, sections, &n, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "layout is NULL");
  EXPECT_EQ(kvs_page_slot_sections(&l, KVS_KV_FP8, nullptr, sections, &n, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "slot is NULL");
  EXPECT_EQ(kvs_page_slot_fill(&l, KVS_KV_FP8, nullptr, slot, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "block is NULL");
  EXPECT_EQ(kvs_page_slot_shapes(nullptr, KVS_KV_FP8, nullptr), 0u);
  EXPECT_EQ(kvs_page_slot_geometry(nullptr, KVS_KV_FP8), 0u);
  kvs_page_identity id;
  EXPECT_EQ(kvs_page_slot_identity(nullptr, KVS_KV_FP8, "m", nullptr, 0, &id, &err),
            KVS_ERR_INVALID_ARGUMENT);
}

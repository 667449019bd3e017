/* A host slot as a stored page block, and back (page_slot.h). */
#include "shard/page_slot.h"

#include <string.h>

#include "core/mix.h"
#include "shard/table.h"

/* A slot span's section: its tier by the span's tier and ratio, its
 * encoding by the KV dtype (the compressed and indexer rows are stored in
 * it; only the rings stay f32, and no ring is in a slot). */
static kvs_page_section_shape shape_of(const kvs_table_span_rows *s, kvs_kv_dtype dtype) {
  kvs_page_section_shape shape;
  shape.tier = s->tier == KVS_DEVICE_TIER_INDEXER ? KVS_PAGE_TIER_INDEXER
               : s->ratio == 4                    ? KVS_PAGE_TIER_COMPRESSED_4
                                                  : KVS_PAGE_TIER_COMPRESSED_128;
  shape.encoding = dtype == KVS_KV_FP8 ? KVS_PAGE_FP8_SCALED : KVS_PAGE_BF16;
  shape.layers = (uint32_t)s->count;
  shape.rows = (uint32_t)(s->width / s->row_bytes);
  shape.row_bytes = (uint32_t)s->row_bytes;
  return shape;
}

size_t kvs_page_slot_shapes(const kvs_device_layout *layout, kvs_kv_dtype dtype,
                            kvs_page_section_shape *out) {
  kvs_table_span_rows spans[KVS_TABLE_ROW_SPANS];
  size_t n = kvs_table_host_spans(layout, spans);
  if (out == NULL) return 0;
  for (size_t i = 0; i < n; i++) out[i] = shape_of(&spans[i], dtype);
  return n;
}

uint64_t kvs_page_slot_geometry(const kvs_device_layout *layout, kvs_kv_dtype dtype) {
  if (layout == NULL) return 0;
  kvs_page_section_shape shapes[KVS_PAGE_MAX_SECTIONS];
  size_t n = kvs_page_slot_shapes(layout, dtype, shapes);
  uint64_t h = kvs_mix64(0x6b7673706167ull /* "kvspag" */, layout->sizes.page);
  h = kvs_mix64(h, (uint64_t)dtype);
  h = kvs_mix64(h, n);
  for (size_t i = 0; i < n; i++) {
    h = kvs_mix64(h, shapes[i].tier);
    h = kvs_mix64(h, shapes[i].encoding);
    h = kvs_mix64(h, shapes[i].layers);
    h = kvs_mix64(h, shapes[i].rows);
    h = kvs_mix64(h, shapes[i].row_bytes);
  }
  return h;
}

kvs_status kvs_page_slot_identity(const kvs_device_layout *layout, kvs_kv_dtype dtype,
                                  const char *model, const kvs_block_hash *chain, uint64_t depth,
                                  kvs_page_identity *out, kvs_error *err) {
  if (layout == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "layout is NULL");
  return kvs_page_identity_init(
      model, NULL, 0, (uint32_t)layout->sizes.page, kvs_page_slot_geometry(layout, dtype),
      (uint32_t)layout->first_layer, (uint32_t)layout->end_layer, chain, depth, out, err);
}

kvs_status kvs_page_slot_sections(const kvs_device_layout *layout, kvs_kv_dtype dtype,
                                  const void *slot, kvs_page_section *out, size_t *n,
                                  kvs_error *err) {
  if (layout == NULL || slot == NULL || out == NULL || n == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s is NULL",
                         layout == NULL ? "layout"
                         : slot == NULL ? "slot"
                         : out == NULL  ? "out"
                                        : "n");
  }
  kvs_table_span_rows spans[KVS_TABLE_ROW_SPANS];
  size_t count = kvs_table_host_spans(layout, spans);
  const unsigned char *at = slot;
  for (size_t i = 0; i < count; i++) {
    kvs_page_section s;
    s.shape = shape_of(&spans[i], dtype);
    s.bytes = at;
    s.n_bytes = spans[i].count * spans[i].width;
    s.digest = 0;
    out[i] = s;
    at += s.n_bytes;
  }
  *n = count;
  return KVS_OK;
}

kvs_status kvs_page_slot_fill(const kvs_device_layout *layout, kvs_kv_dtype dtype,
                              const struct kvs_page_block *block, void *slot, kvs_error *err) {
  if (layout == NULL || block == NULL || slot == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s is NULL",
                         layout == NULL  ? "layout"
                         : block == NULL ? "block"
                                         : "slot");
  }
  kvs_page_section_shape want[KVS_PAGE_MAX_SECTIONS];
  size_t n_want = kvs_page_slot_shapes(layout, dtype, want);
  size_t n_have = 0;
  const kvs_page_section *have = kvs_page_block_sections(block, &n_have);
  if (n_have != n_want) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the block has %zu sections, this layout's slot %zu", n_have, n_want);
  }
  for (size_t i = 0; i < n_want; i++) {
    if (memcmp(&have[i].shape, &want[i], sizeof want[i]) != 0) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "section %zu (%s) is %u layers x %u rows of %u bytes in the block, "
                           "%u x %u of %u in this layout's slot",
                           i, kvs_page_tier_name(have[i].shape.tier), have[i].shape.layers,
                           have[i].shape.rows, have[i].shape.row_bytes, want[i].layers,
                           want[i].rows, want[i].row_bytes);
    }
  }
  unsigned char *at = slot;
  for (size_t i = 0; i < n_want; i++) {
    memcpy(at, have[i].bytes, (size_t)have[i].n_bytes);
    at += have[i].n_bytes;
  }
  return KVS_OK;
}

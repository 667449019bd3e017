/* The binary encoding of a DSV4 page block: format version 3 inside the
 * envelope every version shares (block_codec.h: magic, version, flags,
 * body length, body, XXH3-64 of everything before it). Body of version
 * 3, little-endian, every part 8-byte aligned, every padding byte zero:
 *
 *   [key]        u64 high, u64 low                          (flag bit 1)
 *   [signature]  u32 model_len, u32 weights_len, u32 page_size,
 *                u32 n_sections, u32 layer_begin, u32 layer_end,
 *                u64 geometry, u64 chain high, u64 chain low, u64 depth
 *                (56 bytes); n_sections x 16: u16 tier, u16 encoding,
 *                u32 layers, u32 rows, u32 row_bytes; model bytes,
 *                weights bytes, padding                     (flag bit 0)
 *   payload      u32 n_sections, u32 zero; n_sections x 32: u16 tier,
 *                u16 encoding, u32 layers, u32 rows, u32 row_bytes,
 *                u64 n_bytes, u64 digest; then each section's bytes
 *                (layers x rows x row_bytes, layer-major), padding
 *
 * Tier and encoding codes are page_block.h's enums. As in version 2 the
 * payload describes itself apart from the signature, so verification
 * measures it instead of believing the stamp; the digest is each
 * section's position digest (page_block.h).
 *
 * Decoding checks the envelope (block_envelope.h), then every count and
 * length against the bytes present before anything is sized from it,
 * the codes against the known ones, model printable, page size nonzero
 * and the layer range non-empty: KVS_OK or KVS_ERR_CORRUPT naming the
 * field, never a read outside the input, never an allocation beyond it.
 * It does not verify; re-encoding a decoded block gives the same bytes.
 *
 * NULL: a NULL destination, size output, block, output or buffer, or a
 * NULL input or section array that has a length, is
 * KVS_ERR_INVALID_ARGUMENT naming it (a NULL key or recorded signature
 * means none). kvs_page_block_encoded_size_of reads 0 for a NULL block. */
#ifndef KVS_BLOCKS_PAGE_CODEC_H
#define KVS_BLOCKS_PAGE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blocks/block_hash.h"
#include "blocks/block_signature.h"
#include "blocks/page_block.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What decoding found, apart from the sections. */
typedef struct kvs_page_block_view {
  uint32_t format_version; /* from the envelope */
  bool readable;           /* a version 3 body, parsed; otherwise only the envelope */
  bool marked;
  bool keyed;
  kvs_block_hash key;
  kvs_page_signature signature; /* when marked and readable */
  size_t n_sections;
  uint64_t checksum;
  size_t encoded_bytes;
} kvs_page_block_view;

/* The exact encoded size of these parts. */
kvs_status kvs_page_block_encoded_size(const kvs_block_hash *key,
                                       const kvs_page_signature *recorded,
                                       const kvs_page_section *sections, size_t n_sections,
                                       size_t *size, kvs_error *err);

/* Encodes parts as given, without judging them (a lying stamp or digest
 * is written faithfully: verification is the reader's). Writes exactly
 * the encoded size into dst (cap must hold it, else
 * KVS_ERR_INVALID_ARGUMENT and nothing written); allocates nothing. */
kvs_status kvs_page_block_encode_parts(const kvs_block_hash *key,
                                       const kvs_page_signature *recorded,
                                       const kvs_page_section *sections, size_t n_sections,
                                       void *dst, size_t cap, size_t *written, kvs_error *err);

/* Encodes a stamped or verified page block. */
kvs_status kvs_page_block_encode(const kvs_block_hash *key, const struct kvs_page_block *block,
                                 void *dst, size_t cap, size_t *written, kvs_error *err);
size_t kvs_page_block_encoded_size_of(const kvs_block_hash *key,
                                      const struct kvs_page_block *block);

/* Decodes without copying: *view describes the block and sections[0 ..
 * view->n_sections) point into src. With sections NULL and cap 0 it only
 * validates. Another version's intact block is KVS_OK with readable
 * false (verification refuses it by its version). A section array too
 * small: KVS_ERR_INVALID_ARGUMENT with view->n_sections set. Corrupt
 * input: KVS_ERR_CORRUPT, *view and sections untouched. */
kvs_status kvs_page_block_decode_view(const void *src, size_t len, kvs_page_block_view *view,
                                      kvs_page_section *sections, size_t cap, kvs_error *err);

/* Decodes and verifies (kvs_page_verify_parts) a malloc'ed buffer
 * against the reader: on success *out owns buf; on any failure
 * (KVS_ERR_CORRUPT, KVS_ERR_SIGNATURE with *why, ...) the caller still
 * does. view may be NULL. */
kvs_status kvs_page_block_decode_adopt(void *buf, size_t len, const kvs_page_signature *expected,
                                       kvs_page_block_view *view, kvs_page_block_t *out,
                                       kvs_signature_error *why, kvs_error *err);

/* The same from borrowed bytes (copied first). */
kvs_status kvs_page_block_decode(const void *src, size_t len, const kvs_page_signature *expected,
                                 kvs_page_block_view *view, kvs_page_block_t *out,
                                 kvs_signature_error *why, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCKS_PAGE_CODEC_H */

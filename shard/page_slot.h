/* A host slot as a stored page block, and back: the bridge from the node's
 * host tier (shard/table.h: one full page's compressed and indexer rows,
 * span by span, layer by layer) to format version 3 of stored blocks
 * (blocks/page_block.h), the unit of the disk tier. A slot's spans are a
 * page block's sections in the same order and bytes, so a block is made
 * from a slot without a gather and written back with one copy a section.
 *
 * The geometry fingerprint a block records is this layout's: the page
 * size, the KV dtype and every section's shape (tier, encoding, layers,
 * rows, row bytes), so another model, dtype, layer split or page size is
 * refused by the reader's signature before a byte is used. */
#ifndef KVS_SHARD_PAGE_SLOT_H
#define KVS_SHARD_PAGE_SLOT_H

#include <stddef.h>
#include <stdint.h>

#include "blocks/page_block.h"
#include "core/status.h"
#include "kvshard.h"
#include "plan/device_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The sections a slot of this layout holds, in slot order (at most
 * KVS_PAGE_MAX_SECTIONS); returns how many (0 for a NULL layout or out). */
size_t kvs_page_slot_shapes(const kvs_device_layout *layout, kvs_kv_dtype dtype,
                            kvs_page_section_shape *out);

/* The fingerprint of the slots of this layout and dtype (0 for NULL). */
uint64_t kvs_page_slot_geometry(const kvs_device_layout *layout, kvs_kv_dtype dtype);

/* The identity of full page `depth` of a prompt with chain hash `chain`,
 * as this layout's slot holds it: model, page size, geometry, the layout's
 * layer range. Fails as kvs_page_identity_init. */
kvs_status kvs_page_slot_identity(const kvs_device_layout *layout, kvs_kv_dtype dtype,
                                  const char *model, const kvs_block_hash *chain, uint64_t depth,
                                  kvs_page_identity *out, kvs_error *err);

/* The sections of `slot` (kvs_table_host_slot_bytes bytes), borrowing
 * its bytes; *n receives how many. digest is left 0 (kvs_page_block_stamp
 * computes it). */
kvs_status kvs_page_slot_sections(const kvs_device_layout *layout, kvs_kv_dtype dtype,
                                  const void *slot, kvs_page_section *out, size_t *n,
                                  kvs_error *err);

/* Copies a (verified) block's sections into `slot`, after checking they
 * are this layout's sections, shape for shape (KVS_ERR_INVALID_ARGUMENT
 * naming the first that differs; nothing written then). */
kvs_status kvs_page_slot_fill(const kvs_device_layout *layout, kvs_kv_dtype dtype,
                              const struct kvs_page_block *block, void *slot, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_PAGE_SLOT_H */

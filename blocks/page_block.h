/* DSV4 page blocks: format version 3 of stored blocks.
 *
 * Version 2 (block_signature.h) holds f32/bf16 K and V of equal width,
 * one row per position, every layer alike. A DSV4 page is none of that:
 * the host tier's slot of one full page (shard/table.h,
 * kvs_table_host_slot_bytes) holds, per layer of the rank's range, page /
 * ratio compressed rows (ratio 4 on CSA layers, 128 on HCA layers) and
 * page / 4 indexer rows, each an fp8 row with its scales inside (584 and
 * 132 bytes for DSV4, core/cost_model.h kvs_row_widths_for) or bf16; with
 * per-request rings and a prefix cache, a page also carries its tail
 * states (the compress-state rows an exact hit restores). None of these
 * rows is a K/V pair.
 *
 * A page block is therefore a list of *sections*, each naming what it is
 * (the tier), how its rows are encoded, how many layers and rows per
 * layer it holds and how wide a row is, then the rows themselves
 * (layer-major, rows contiguous). The payload describes itself; the
 * signature adds what no byte can prove: the model, the weights
 * fingerprint, the page size, a fingerprint of the geometry, the rank's
 * layer range and the page's position (its chain hash and depth).
 *
 * The rule is version 2's (block_signature.h): every shape field is
 * measured from the payload, never filled from the reader's expectation,
 * and a block without a signature is refused. kvs_page_verify_parts
 * checks, in this order, stopping at the first failure:
 *   1. a signature is recorded                      (UNMARKED);
 *   2. its version is readable (UNSUPPORTED_FORMAT) and is this kind's,
 *      3, not version 2's K/V layers                (OTHER_FORMAT);
 *   3. the payload measures coherently under the recorded page size and
 *      layer range (BAD_LAYOUT, EMPTY_PAYLOAD, DEGENERATE_LAYER,
 *      RAGGED_PAYLOAD, BLOCK_SIZE_MISMATCH);
 *   4. the recorded signature equals the measured one, then every
 *      section's position digest, recomputed over its bytes at the
 *      recorded position, equals the one the payload carries
 *      (PAYLOAD_MISMATCH: swapped, moved or altered sections);
 *   5. only then, the measured signature is what the reader needs, the
 *      position included (INCOMPATIBLE).
 * A refusal names the first differing field with both values, and the
 * section when it is one: "section 2 (indexer): row_bytes 132 in the
 * block, 256 in the reader".
 *
 * The position digest of a section (kvs_page_section_digest) is XXH3-64
 * of its bytes seeded by the page's chain hash, its depth, the section's
 * index and its tier: the same rows under another page, at another
 * depth, or in another section's place digest differently. It is
 * computed when the rows leave the GPU (kvs_page_block_stamp computes it
 * from the bytes it copies) and checked whenever they come back.
 *
 * NULL: the kvs_status calls refuse a NULL identity, output, block or
 * expected signature, and a NULL section array or section bytes that
 * have a length, with KVS_ERR_INVALID_ARGUMENT naming it (recorded,
 * expected, actual and why may be NULL where said). The name functions
 * return "unknown" for codes they do not know; the accessors read NULL
 * or 0 for a NULL block; destroy accepts NULL. */
#ifndef KVS_BLOCKS_PAGE_BLOCK_H
#define KVS_BLOCKS_PAGE_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blocks/block_hash.h"
#include "blocks/block_signature.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format version of page blocks (version 2 stays K/V layers). */
#define KVS_PAGE_BLOCK_FORMAT_VERSION 3u

/* Most sections a page block holds: six tiers fit with room; a corrupt
 * count can make a reader walk no further. */
#define KVS_PAGE_MAX_SECTIONS 16u

/* What a section holds; the values are the on-disk codes (u16). */
typedef enum kvs_page_tier {
  KVS_PAGE_TIER_COMPRESSED_4 = 1,    /* CSA compressed KV rows: page / 4 a layer */
  KVS_PAGE_TIER_COMPRESSED_128 = 2,  /* HCA compressed KV rows: page / 128 a layer */
  KVS_PAGE_TIER_INDEXER = 3,         /* indexer key rows of ratio-4 layers: page / 4 */
  KVS_PAGE_TIER_WINDOW = 4,          /* sliding-window KV rows: page a layer */
  KVS_PAGE_TIER_TAIL_STATE = 5,      /* state_4 tail-state rows (any count) */
  KVS_PAGE_TIER_INDEX_TAIL_STATE = 6 /* index_state tail-state rows (any count) */
} kvs_page_tier;

/* How a section's rows are encoded; on-disk codes (u16). */
typedef enum kvs_page_encoding {
  KVS_PAGE_BF16 = 1,       /* bf16 elements: rows a multiple of 2 bytes */
  KVS_PAGE_FP8_SCALED = 2, /* fp8 elements with their scales inside the row */
  KVS_PAGE_F32 = 3         /* f32 elements: rows a multiple of 4 bytes */
} kvs_page_encoding;

/* "compressed ratio 4", "compressed ratio 128", "indexer", "window",
 * "tail state", "index tail state"; "unknown" otherwise. */
const char *kvs_page_tier_name(uint32_t tier);
/* "bf16", "fp8+scales", "f32"; "unknown" otherwise. */
const char *kvs_page_encoding_name(uint32_t encoding);

/* A section's shape: everything but its bytes. */
typedef struct kvs_page_section_shape {
  uint32_t tier;     /* kvs_page_tier */
  uint32_t encoding; /* kvs_page_encoding */
  uint32_t layers;   /* layers of the rank's range holding this tier */
  uint32_t rows;     /* rows per layer */
  uint32_t row_bytes;
} kvs_page_section_shape;

/* One section as borrowed bytes: layers x rows x row_bytes, layer-major.
 * digest is the position digest: filled by kvs_page_block_stamp, read
 * from the block by the decoder (a claim until verified). */
typedef struct kvs_page_section {
  kvs_page_section_shape shape;
  const void *bytes;
  uint64_t n_bytes;
  uint64_t digest;
} kvs_page_section;

/* What no payload can prove, given by the writer and settled against
 * the reader in step 5. */
typedef struct kvs_page_identity {
  char model[KVS_BLOCK_MODEL_MAX + 1]; /* NUL-terminated, printable */
  uint8_t weights[KVS_BLOCK_WEIGHTS_MAX];
  uint32_t weights_len; /* 0: no fingerprint */
  uint32_t page_size;   /* tokens per page, > 0 */
  uint64_t geometry;    /* the geometry's fingerprint (its row widths, ratios, layers) */
  uint32_t layer_begin; /* the rank's layers [layer_begin, layer_end) */
  uint32_t layer_end;
  kvs_block_hash chain; /* the page's position: its chain hash ... */
  uint64_t depth;       /* ... and its index in the chain (0: the first page) */
} kvs_page_identity;

/* The identity and shape of a page block, compared field by field. */
typedef struct kvs_page_signature {
  uint32_t format_version;
  kvs_page_identity id;
  uint32_t n_sections;
  kvs_page_section_shape sections[KVS_PAGE_MAX_SECTIONS];
} kvs_page_signature;

/* Fills an identity (model NUL-terminated, the rest as given). Fails with
 * KVS_ERR_INVALID_ARGUMENT for an over-long or unprintable model or
 * fingerprint, a zero page size or an empty layer range; *out untouched. */
kvs_status kvs_page_identity_init(const char *model, const uint8_t *weights, size_t weights_len,
                                  uint32_t page_size, uint64_t geometry, uint32_t layer_begin,
                                  uint32_t layer_end, const kvs_block_hash *chain, uint64_t depth,
                                  kvs_page_identity *out, kvs_error *err);

/* The position digest of section `index` (of tier `tier`) of the page at
 * (chain, depth): XXH3-64 of the bytes, seeded from all four. */
uint64_t kvs_page_section_digest(const kvs_block_hash *chain, uint64_t depth, uint32_t index,
                                 uint32_t tier, const void *bytes, size_t n_bytes);

/* Measures a payload's signature under an identity (steps 1 to 3 of the
 * order above: a refusal is KVS_ERR_SIGNATURE with *why; unknown tier or
 * encoding codes, too many sections or NULL bytes are
 * KVS_ERR_INVALID_ARGUMENT). Digests are not looked at. */
kvs_status kvs_page_signature_measure(const kvs_page_identity *id, const kvs_page_section *sections,
                                      size_t n_sections, kvs_page_signature *out,
                                      kvs_signature_error *why, kvs_error *err);

/* What a reader requires: its identity (the position it reads into
 * included) and the sections its geometry has, in order. Only ever the
 * left side of a comparison. Fails like kvs_page_identity_init, and for
 * more than KVS_PAGE_MAX_SECTIONS shapes. */
kvs_status kvs_page_signature_expected(const kvs_page_identity *id,
                                       const kvs_page_section_shape *shapes, size_t n_shapes,
                                       kvs_page_signature *out, kvs_error *err);

/* Runs the five steps above over a payload and the signature recorded
 * with it (NULL: none). expected NULL stops after step 4 (inspection).
 * *actual (when non-NULL) receives the measured signature on success.
 * A refusal is KVS_ERR_SIGNATURE with *why and err filled. Nothing the
 * caller passed is modified; allocates nothing. */
kvs_status kvs_page_verify_parts(const kvs_page_signature *recorded,
                                 const kvs_page_section *sections, size_t n_sections,
                                 const kvs_page_signature *expected, kvs_page_signature *actual,
                                 kvs_signature_error *why, kvs_error *err);

/* An owned, verified page block: made only by kvs_page_block_stamp or by
 * a decode that verified it (page_codec.h), so it needs no second check. */
typedef struct kvs_page_block *kvs_page_block_t;

/* Measures sections under id, computes each section's position digest at
 * id's position and copies the bytes. Refusals as measure; *out only on
 * success. */
kvs_status kvs_page_block_stamp(const kvs_page_identity *id, const kvs_page_section *sections,
                                size_t n_sections, kvs_page_block_t *out, kvs_signature_error *why,
                                kvs_error *err);

/* Takes ownership of storage (from malloc), whose bytes the sections
 * point into, as a block of signature sig, which the caller verified
 * (the page codec's decode does). On failure the caller keeps storage. */
kvs_status kvs_page_block_adopt(void *storage, const kvs_page_signature *sig,
                                const kvs_page_section *sections, size_t n_sections,
                                kvs_page_block_t *out, kvs_error *err);
void kvs_page_block_destroy(kvs_page_block_t block);

const kvs_page_signature *kvs_page_block_signature_of(const struct kvs_page_block *block);
/* The sections (*n_sections receives their count when non-NULL). */
const kvs_page_section *kvs_page_block_sections(const struct kvs_page_block *block,
                                                size_t *n_sections);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCKS_PAGE_BLOCK_H */

/* The binary encoding of a KV block: versioned, little-endian,
 * explicit-width, checksummed.
 *
 *   offset  size  field
 *   0       8     magic "KVSBLOCK"
 *   8       4     u32 format version (KVS_BLOCK_FORMAT_VERSION when written)
 *   12      4     u32 flags: bit 0 a signature is recorded, bit 1 a key is
 *   16      8     u64 body length B (a multiple of 8)
 *   24      B     body (its layout depends on the format version)
 *   24+B    8     u64 XXH3-64 of bytes [0, 24+B)
 *
 * The 24-byte envelope and the trailing checksum are the same in every
 * version, so an unreadable version is recognised as such (and refused
 * by verification with UNSUPPORTED_FORMAT) instead of being mistaken for
 * corruption. Version 3 (DSV4 page sections) is page_codec.h's; this
 * codec's decoders validate it through that one and hand it on without
 * layers. Body of version 2, every section 8-byte aligned and every
 * padding byte zero:
 *
 *   [key]        u64 high, u64 low                     (flag bit 1)
 *   [signature]  u32 model_len, u32 weights_len, u32 n_layers,
 *                u32 n_kv_heads, u32 head_dim, u32 dtype, u64 tokens,
 *                u32 block_size, u32 sliding_window, model bytes,
 *                weights bytes, padding                (flag bit 0)
 *   payload      u32 n_layers, u32 zero; per layer: u32 n_kv_heads,
 *                u32 head_dim, u32 v_head_dim, u32 dtype, u64 positions,
 *                u64 k_elems, u64 v_elems; then per layer K bytes,
 *                padding, V bytes, padding (elements little-endian)
 *
 * The payload describes itself, independently of the signature, so that
 * verification can measure it rather than believe the stamp.
 *
 * Decoding checks, in order: magic, length, checksum, flags, then every
 * length field against the bytes actually present before anything is
 * sized from it. Whatever the input (truncated, bit-flipped, lengths
 * oversized, foreign), the result is KVS_OK or KVS_ERR_CORRUPT with a
 * message naming the offending field: never a read outside the input,
 * never an allocation larger than the input. Decoding does not verify
 * the signature; it yields an unverified block. The encoding is
 * canonical: re-encoding a decoded block gives back the same bytes.
 *
 * This codec assumes a little-endian host (checked at compile time):
 * payload elements are copied, and viewed, as they lie.
 *
 * NULL: a NULL destination, size output, block, output handle or adopted
 * buffer, or NULL input or layers that have a length, is
 * KVS_ERR_INVALID_ARGUMENT naming it (a NULL key or signature means
 * none, as below; NULL input of length 0 is an empty, truncated block).
 * kvs_block_encoded_size_of reads 0 for a NULL block. */
#ifndef KVS_BLOCKS_BLOCK_CODEC_H
#define KVS_BLOCKS_BLOCK_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blocks/block_envelope.h"
#include "blocks/block_hash.h"
#include "blocks/block_signature.h"
#include "blocks/block_signed.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* KVS_BLOCK_MAGIC, the envelope's sizes and its flags are
 * block_envelope.h's, shared by every version. */
/* Most layers a block may have: far above any model, far below what a
 * corrupt count could make us walk. */
#define KVS_BLOCK_MAX_LAYERS 65536u

/* What decoding found, apart from the payload layers. */
typedef struct kvs_block_view {
  uint32_t format_version; /* from the envelope */
  bool readable;           /* the version is readable: the body was parsed */
  bool marked;             /* a signature is recorded */
  bool keyed;              /* a key is recorded (only known when readable) */
  kvs_block_hash key;      /* when keyed */
  /* The recorded signature, when marked. For an unreadable version only
   * format_version is filled (the rest of the body is not parsed). */
  kvs_block_signature signature;
  size_t n_layers;   /* payload layers (0 when not readable) */
  uint64_t checksum; /* the stored (and matching) XXH3-64 */
  size_t encoded_bytes;
  /* A version 3 page block (page_codec.h, validated whole): its section
   * count; it has no layers, only format_version of its signature is
   * filled, and a layer reader's verification refuses it (OTHER_FORMAT). */
  size_t n_sections;
} kvs_block_view;

/* The exact encoded size of these parts (key NULL: unkeyed; recorded
 * NULL: unmarked). Fails like kvs_block_encode_parts on bad arguments. */
kvs_status kvs_block_encoded_size(const kvs_block_hash *key, const kvs_block_signature *recorded,
                                  const kvs_block_layer *layers, size_t n_layers, size_t *size,
                                  kvs_error *err);

/* Encodes parts as given, without judging them: a stamp that does not
 * match its payload is written faithfully (verification is the reader's
 * job, and tests need such files). recorded must be of the current format
 * version. Writes exactly the encoded size into dst (cap must hold it,
 * else KVS_ERR_INVALID_ARGUMENT and nothing written); *written (when
 * non-NULL) receives it. Copies and checksums in one pass over cache-
 * sized chunks; allocates nothing. */
kvs_status kvs_block_encode_parts(const kvs_block_hash *key, const kvs_block_signature *recorded,
                                  const kvs_block_layer *layers, size_t n_layers, void *dst,
                                  size_t cap, size_t *written, kvs_error *err);

/* Encodes a signed block (its measured signature and payload). */
kvs_status kvs_block_encode(const kvs_block_hash *key, const struct kvs_block *block, void *dst,
                            size_t cap, size_t *written, kvs_error *err);
/* The encoded size of a signed block (0 if it cannot be encoded). */
size_t kvs_block_encoded_size_of(const kvs_block_hash *key, const struct kvs_block *block);

/* Decodes without copying: *view describes the block and layers[0 ..
 * view->n_layers) receive views whose k and v point into src (aligned as
 * src is, plus a multiple of 8). With layers NULL and layer_cap 0 it
 * only validates and counts. A layer array too small for a valid block:
 * KVS_ERR_INVALID_ARGUMENT with view->n_layers set, layers untouched.
 * Corrupt input: KVS_ERR_CORRUPT, *view and layers untouched. Allocates
 * nothing. */
kvs_status kvs_block_decode_view(const void *src, size_t len, kvs_block_view *view,
                                 kvs_block_layer *layers, size_t layer_cap, kvs_error *err);

/* Decodes into an owned unverified block (a copy of src). view may be
 * NULL. */
kvs_status kvs_block_decode(const void *src, size_t len, kvs_block_view *view,
                            kvs_unverified_block_t *out, kvs_error *err);

/* Decodes a malloc'ed buffer without copying: on success the block owns
 * buf; on failure the caller still does. */
kvs_status kvs_block_decode_adopt(void *buf, size_t len, kvs_block_view *view,
                                  kvs_unverified_block_t *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCKS_BLOCK_CODEC_H */

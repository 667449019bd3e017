/* What every version of the block encoding shares (block_codec.h gives
 * the layout): the 24-byte envelope, the trailing XXH3-64, little-endian
 * fields, 8-byte zero padding, and the one way a decoder says "corrupt".
 * The K/V codec (version 2, block_codec.c) and the DSV4 page codec
 * (version 3, page_codec.c) both build on it, so the two can never
 * disagree on what an envelope is.
 *
 * NULL: kvs_block_corrupt takes a NULL err (it then only returns the
 * status); kvs_block_envelope_check, kvs_block_read_identity and
 * kvs_block_encode_head refuse a NULL src, dst or output with
 * KVS_ERR_INVALID_ARGUMENT (a NULL key is none); kvs_block_copy_section and
 * kvs_block_envelope_write take their pointers from the encoders, which
 * checked them (a NULL there is a caller's bug: they do nothing). */
#ifndef KVS_BLOCKS_BLOCK_ENVELOPE_H
#define KVS_BLOCKS_BLOCK_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation */
#include <xxhash.h>

#include "blocks/block_hash.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_BLOCK_MAGIC "KVSBLOCK"
#define KVS_BLOCK_ENVELOPE_BYTES 24u
#define KVS_BLOCK_CHECKSUM_BYTES 8u
/* The smallest input that can be a block: envelope and checksum. */
#define KVS_BLOCK_MIN_ENCODED (KVS_BLOCK_ENVELOPE_BYTES + KVS_BLOCK_CHECKSUM_BYTES)

#define KVS_BLOCK_FLAG_MARKED 1u
#define KVS_BLOCK_FLAG_KEYED 2u

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the block codecs copy payload elements as they lie: they need a little-endian host"
#endif

static inline void kvs_wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void kvs_wr64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t kvs_rd32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static inline uint64_t kvs_rd64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* Bytes of zero padding after n bytes, to the next multiple of 8. */
static inline uint64_t kvs_pad8(uint64_t n) { return (8 - (n & 7)) & 7; }

/* Adds `bytes` plus its padding to *total; false on overflow. */
static inline bool kvs_add_padded(uint64_t *total, uint64_t bytes) {
  uint64_t t;
  if (__builtin_add_overflow(*total, bytes, &t)) return false;
  if (__builtin_add_overflow(t, kvs_pad8(bytes), &t)) return false;
  *total = t;
  return true;
}

static inline bool kvs_pad_is_zero(const uint8_t *p, size_t n) {
  static const uint8_t zeros[8] = {0};
  return n == 0 || memcmp(p, zeros, n) == 0;
}

/* Sets err to KVS_ERR_CORRUPT with the formatted message; returns it. */
kvs_status kvs_block_corrupt(kvs_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Checks the envelope of len bytes at src: the magic, the lengths (the
 * body fills the input exactly), the checksum when asked, and the flags.
 * *body_len and *stored (the recorded checksum) on success; otherwise
 * KVS_ERR_CORRUPT naming the field. */
kvs_status kvs_block_envelope_check(const uint8_t *src, size_t len, bool verify_checksum,
                                    uint64_t *body_len, uint64_t *stored, kvs_error *err);

/* Reads a signature's model and weights fingerprint (their lengths
 * already bounded by the caller) and their zero padding from src[*at,
 * end): the bytes present, the model printable. model and weights
 * receive them (the caller zeroed model); *at moves past the padding.
 * KVS_ERR_CORRUPT naming the offset otherwise, nothing written. */
kvs_status kvs_block_read_identity(const uint8_t *src, size_t *at, size_t end, uint32_t model_len,
                                   uint32_t weights_len, char *model, uint8_t *weights,
                                   kvs_error *err);

/* Writes the 24-byte envelope: magic, version, flags, body length. */
void kvs_block_envelope_write(uint8_t *out, uint32_t version, uint32_t flags, uint64_t body_len);

/* The start every encoder shares: dst must hold the body and the
 * envelope and checksum around it (else KVS_ERR_INVALID_ARGUMENT naming
 * `function`, nothing written); writes the envelope (flags: marked, and
 * keyed when key is non-NULL) and the key. *at: where the next part goes. */
kvs_status kvs_block_encode_head(const char *function, void *dst, size_t cap, uint64_t body,
                                 uint32_t version, const kvs_block_hash *key, bool marked,
                                 size_t *at, kvs_error *err);

/* Appends n bytes of src at out + *at, checksumming them in cache-sized
 * chunks as they are written, then zero padding to the next multiple
 * of 8. */
void kvs_block_copy_section(XXH3_state_t *state, uint8_t *out, size_t *at, const void *src,
                            size_t n);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCKS_BLOCK_ENVELOPE_H */

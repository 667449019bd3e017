/* Block identity: a chain hash per whole block of tokens.
 *
 * A block's hash covers its parent block's hash and its own token ids,
 * so equal hashes mean equal prefixes up to and including the block,
 * not merely equal blocks. XXH3-128 (Debian's xxHash) keeps accidental
 * collisions out of reach for any realistic store.
 *
 * Only whole blocks are named. A partial tail block would get a hash
 * that a later, longer sequence could not reproduce for the same
 * position, so it is refused rather than silently truncated.
 *
 * NULL: the kvs_status calls refuse a NULL output, text or token array
 * (when it holds tokens) with KVS_ERR_INVALID_ARGUMENT naming it (a NULL
 * parent is the first block's, as below). kvs_block_hash_equal is false
 * when either hash is NULL (a missing hash names no block);
 * kvs_block_hash_hex writes "" for a NULL hash and returns NULL for a
 * NULL out; kvs_hex_decode is false for a NULL text, out (with cap > 0)
 * or len. */
#ifndef KVS_BLOCKS_BLOCK_HASH_H
#define KVS_BLOCKS_BLOCK_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The two halves of an XXH3-128 value. */
typedef struct kvs_block_hash {
  uint64_t high;
  uint64_t low;
} kvs_block_hash;

/* Hex digits in a rendered hash (high half first); buffers need +1. */
#define KVS_BLOCK_HASH_HEX_LEN 32

/* Hashes one whole block. parent is the previous block's hash, or NULL
 * for the first block of a sequence (a caller that wants separate
 * namespaces per model may pass a namespace hash as the first parent).
 * n_tokens must equal block_size: fewer is a partial tail and more is
 * not one block; both fail with KVS_ERR_INVALID_ARGUMENT naming the
 * counts, *out untouched. Allocates nothing. */
kvs_status kvs_block_hash_chain(const kvs_block_hash *parent, const uint32_t *token_ids,
                                size_t n_tokens, uint32_t block_size, kvs_block_hash *out,
                                kvs_error *err);

/* Hashes every block of a sequence, chaining from the NULL parent, into
 * out[0 .. n_tokens / block_size). n_tokens must be a whole number of
 * blocks (pass the whole-block prefix to skip a tail) and out_cap must
 * hold them all; otherwise KVS_ERR_INVALID_ARGUMENT, nothing written.
 * *n_out (when non-NULL) receives the block count on success. */
kvs_status kvs_block_hash_sequence(const uint32_t *token_ids, size_t n_tokens, uint32_t block_size,
                                   kvs_block_hash *out, size_t out_cap, size_t *n_out,
                                   kvs_error *err);

bool kvs_block_hash_equal(const kvs_block_hash *a, const kvs_block_hash *b);

/* Writes 32 lowercase hex digits and a NUL into out (which must hold
 * KVS_BLOCK_HASH_HEX_LEN + 1 bytes); returns out. */
char *kvs_block_hash_hex(const kvs_block_hash *hash, char *out);

/* Decodes a string of hex digit pairs (either case) into out[0..cap);
 * false, with out untouched, for an odd count, a non-hex character or more
 * than cap bytes. *len receives the byte count. */
bool kvs_hex_decode(const char *text, uint8_t *out, size_t cap, size_t *len);

/* Parses exactly 32 hex digits (either case). Anything else fails with
 * KVS_ERR_PARSE, *out untouched. */
kvs_status kvs_block_hash_parse(const char *hex, kvs_block_hash *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCKS_BLOCK_HASH_H */

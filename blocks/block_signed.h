/* Owned KV blocks, in two types so the compiler keeps them apart.
 *
 * kvs_block_t carries a signature obtained by measurement, and, if the
 * bytes came from elsewhere, already accepted by a reader. Nothing but
 * kvs_block_stamp and kvs_unverified_block_verify creates one, so code
 * handed a kvs_block_t need not re-check it.
 *
 * kvs_unverified_block_t holds bytes of unknown provenance (a file, a
 * peer, an older build). It may lack a signature altogether: that case
 * has to be expressible so verification can reject it.
 *
 * Both own their payload; the kvs_block_layer views they hand out stay
 * valid until the block is destroyed.
 *
 * NULL: the kvs_status calls refuse a NULL output, block, expected
 * signature or adopted storage with KVS_ERR_INVALID_ARGUMENT naming it;
 * the accessors read NULL, a zero layout or 0 (no layers) for a NULL
 * block; the destroy functions accept NULL. */
#ifndef KVS_BLOCKS_BLOCK_SIGNED_H
#define KVS_BLOCKS_BLOCK_SIGNED_H

#include <stddef.h>
#include <stdint.h>

#include "blocks/block_layout.h"
#include "blocks/block_signature.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_block *kvs_block_t;
typedef struct kvs_unverified_block *kvs_unverified_block_t;

/* Signs a payload: measures its signature (see
 * kvs_block_signature_measure; only model, fingerprint and layout come
 * from the caller) and copies the payload. Refusals return
 * KVS_ERR_SIGNATURE with *why filled; *out is written only on success. */
kvs_status kvs_block_stamp(const char *model, const uint8_t *weights, size_t weights_len,
                           kvs_block_layout layout, const kvs_block_layer *layers, size_t n_layers,
                           kvs_block_t *out, kvs_signature_error *why, kvs_error *err);
void kvs_block_destroy(kvs_block_t block);

const kvs_block_signature *kvs_block_signature_of(const struct kvs_block *block);
kvs_block_layout kvs_block_layout_of(const struct kvs_block *block);
uint64_t kvs_block_tokens(const struct kvs_block *block);
/* The payload layers (*n_layers receives their count when non-NULL). */
const kvs_block_layer *kvs_block_layers(const struct kvs_block *block, size_t *n_layers);

/* An unverified block holding a copy of the given payload and, unless
 * recorded is NULL, the recorded signature as given (nothing is checked
 * but the arguments' own sanity: a lie is the verifier's to catch). */
kvs_status kvs_unverified_block_create(const kvs_block_signature *recorded,
                                       const kvs_block_layer *layers, size_t n_layers,
                                       kvs_unverified_block_t *out, kvs_error *err);

/* Like kvs_unverified_block_create, without copying: takes ownership of
 * `storage` (from malloc; freed with the block) whose bytes the layers'
 * k and v point into. On failure the caller keeps `storage`. */
kvs_status kvs_unverified_block_adopt(void *storage, const kvs_block_signature *recorded,
                                      const kvs_block_layer *layers, size_t n_layers,
                                      kvs_unverified_block_t *out, kvs_error *err);
void kvs_unverified_block_destroy(kvs_unverified_block_t block);

/* The recorded signature, or NULL when the block is unmarked. */
const kvs_block_signature *kvs_unverified_block_signature(const struct kvs_unverified_block *block);
const kvs_block_layer *kvs_unverified_block_layers(const struct kvs_unverified_block *block,
                                                   size_t *n_layers);

/* Runs kvs_block_verify_parts on *block for this reader. On success the unverified block is
 * consumed: its payload moves into a new kvs_block_t in *out (carrying the measured signature) and
 * *block is set to NULL. On failure (KVS_ERR_SIGNATURE with *why filled, or another status) *block
 * is untouched and still the caller's. */
kvs_status kvs_unverified_block_verify(kvs_unverified_block_t *block,
                                       const kvs_block_signature *expected, kvs_block_t *out,
                                       kvs_signature_error *why, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCKS_BLOCK_SIGNED_H */

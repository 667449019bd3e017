/* Signatures of stored KV blocks: the difference between finding a block
 * and being allowed to use it.
 *
 * The chain hash (block_hash.h) identifies the token prefix; the tensors
 * filed under it could still have any shape. Stored blocks outlive the
 * process that wrote them, so a reader will eventually run with another
 * model, weights, dtype, head layout or window, and attention computed
 * over such state silently produces plausible garbage rather than an
 * error. This module therefore holds to one rule:
 *
 *   Every shape field is taken by measuring the payload itself (the
 *   reader's expectation never fills anything in), and a block that
 *   carries no signature is turned away.
 *
 * kvs_block_signature_measure takes no expected shape at all. Verifying
 * a block (kvs_block_verify_parts) runs these checks, in this order, and
 * stops at the first failure:
 *   1. a signature is recorded at all            (UNMARKED);
 *   2. its format version is in the readable set (UNSUPPORTED_FORMAT),
 *      and is version 2, not a version 3 page block (OTHER_FORMAT);
 *   3. the payload measures coherently under the recorded layout
 *      (EMPTY_PAYLOAD, DEGENERATE_LAYER, SPLIT_KV_HEAD_WIDTH,
 *       RAGGED_PAYLOAD, BAD_LAYOUT, BLOCK_SIZE_MISMATCH);
 *   4. the recorded signature equals the measured one (PAYLOAD_MISMATCH):
 *      what the stamp claims must be what the tensors are;
 *   5. only then, the measured signature is what the reader needs
 *      (INCOMPATIBLE).
 * The reader's expectation never contributes a field before step 5.
 *
 * What the payload cannot prove (model, weights fingerprint, sliding
 * window) is carried from the stamp and settled against the reader in
 * step 5; the block size is provable (every stored block holds exactly
 * block_size positions) and is settled in step 3.
 *
 * NULL: the kvs_status calls refuse a NULL model, output, or layer array
 * or fingerprint that has a length, with KVS_ERR_INVALID_ARGUMENT naming
 * it (recorded, expected, actual and why may be NULL where said). The
 * formatters take a NULL buf as "measure only" (kvs_signature_error_format)
 * or return "" (kvs_block_weights_describe, which renders a NULL
 * fingerprint as "none"); a NULL why formats as "". */
#ifndef KVS_BLOCKS_BLOCK_SIGNATURE_H
#define KVS_BLOCKS_BLOCK_SIGNATURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blocks/block_layout.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The payload layout version this build writes for K/V layer blocks
 * (version 3, DSV4 page sections, is page_block.h's). */
#define KVS_BLOCK_FORMAT_VERSION 2u

/* The versions this build reads. An explicit list rather than a range,
 * so retiring a version takes a visible change to this list. Version 1
 * is excluded: it stored neither block size nor window, so nothing in
 * such a block tells how it was cut, and a missing field is not consent. */
extern const uint32_t kvs_block_readable_versions[];
extern const size_t kvs_block_readable_versions_count;
bool kvs_block_format_readable(uint32_t version);

/* Element type of K and V; the enum values double as on-disk codes. It
 * belongs to the signature: switching a deployment's KV dtype turns old
 * blocks into misses instead of bytes read under the wrong type. */
typedef enum kvs_dtype { KVS_DTYPE_F32 = 1, KVS_DTYPE_BF16 = 2 } kvs_dtype;

/* "f32", "bf16", or "unknown". */
const char *kvs_dtype_name(kvs_dtype dtype);
/* Bytes per element; 0 for an unknown dtype. */
size_t kvs_dtype_size(kvs_dtype dtype);
/* Parses "f32" or "bf16"; false (and *out untouched) otherwise. */
bool kvs_dtype_parse(const char *text, kvs_dtype *out);

/* Longest model identity, in bytes (printable, no control characters). */
#define KVS_BLOCK_MODEL_MAX 255
/* Longest weights fingerprint, in bytes (room for a SHA-512 digest). */
#define KVS_BLOCK_WEIGHTS_MAX 64

/* One layer of a payload, as borrowed buffers. K and V hold `positions`
 * rows of n_kv_heads x head_dim elements each (token-major). Every count
 * here is a claim; measuring checks them against each other. */
typedef struct kvs_block_layer {
  uint32_t n_kv_heads;
  uint32_t head_dim;   /* width of a K head */
  uint32_t v_head_dim; /* width of a V head; must equal head_dim */
  kvs_dtype dtype;
  uint64_t positions; /* token positions the layer says it holds */
  const void *k;
  uint64_t k_elems; /* elements in k */
  const void *v;
  uint64_t v_elems; /* elements in v */
} kvs_block_layer;

/* The identity and shape of a payload, compared field by field.
 * A plain value; build it with kvs_block_signature_measure (from a
 * payload) or kvs_block_signature_expected (a reader's requirement). */
typedef struct kvs_block_signature {
  uint32_t format_version;
  char model[KVS_BLOCK_MODEL_MAX + 1];    /* NUL-terminated */
  uint8_t weights[KVS_BLOCK_WEIGHTS_MAX]; /* caller-supplied fingerprint */
  uint32_t weights_len;                   /* 0: no fingerprint */
  uint32_t n_layers;
  uint32_t n_kv_heads;
  uint32_t head_dim;
  kvs_dtype dtype;
  uint64_t tokens;         /* positions per layer; equals layout.block_size */
  kvs_block_layout layout; /* block size and the window it had to divide */
} kvs_block_signature;

/* The reason a block was turned away; none of them is "probably fine". */
typedef enum kvs_signature_error_kind {
  KVS_SIG_NONE = 0,
  /* No signature recorded. Absence is never agreement. */
  KVS_SIG_UNMARKED,
  /* No layers: nothing to vouch for. */
  KVS_SIG_EMPTY_PAYLOAD,
  /* The first layer has no heads or a zero head dimension. */
  KVS_SIG_DEGENERATE_LAYER,
  /* V heads of another width than K heads: with a single head_dim field
   * the format cannot describe the payload truthfully. */
  KVS_SIG_SPLIT_KV_HEAD_WIDTH,
  /* The payload disagrees with itself (layer shapes, lengths, dtypes, or
   * a position count its buffers contradict). */
  KVS_SIG_RAGGED_PAYLOAD,
  /* Stamp and measurement disagree; the measurement is authoritative. */
  KVS_SIG_PAYLOAD_MISMATCH,
  /* Consistent with itself, but for another configuration: a miss. */
  KVS_SIG_INCOMPATIBLE,
  /* Declared block size and measured depth differ. */
  KVS_SIG_BLOCK_SIZE_MISMATCH,
  /* The recorded layout is unusable (block size does not divide window). */
  KVS_SIG_BAD_LAYOUT,
  /* Written in a format version this build cannot read. */
  KVS_SIG_UNSUPPORTED_FORMAT,
  /* A readable version of the other kind: a version 3 DSV4 page block
   * (page_block.h) handed to a K/V layer reader, or a version 2 block to
   * a page reader. */
  KVS_SIG_OTHER_FORMAT
} kvs_signature_error_kind;

/* Room for one rendered value: a model name or a fingerprint in hex. */
#define KVS_SIG_VALUE_MAX 264

/* The structured form of a refusal; which members are meaningful depends
 * on kind, as noted. Strings are empty and numbers zero otherwise. */
typedef struct kvs_signature_error {
  kvs_signature_error_kind kind;
  /* DEGENERATE_LAYER, SPLIT_KV_HEAD_WIDTH, RAGGED_PAYLOAD */
  uint64_t layer;
  /* RAGGED_PAYLOAD, PAYLOAD_MISMATCH, INCOMPATIBLE: a static name such as
   * "head_dim", "positions", "sliding_window"; NULL for other kinds. */
  const char *field;
  /* RAGGED_PAYLOAD: what the rest of the payload implies / what this
   * layer has. INCOMPATIBLE: what the reader needs / what the block is. */
  char expected[KVS_SIG_VALUE_MAX];
  char found[KVS_SIG_VALUE_MAX];
  /* PAYLOAD_MISMATCH: what the stamp says / what the payload measures. */
  char recorded[KVS_SIG_VALUE_MAX];
  char actual[KVS_SIG_VALUE_MAX];
  /* DEGENERATE_LAYER (n_kv_heads, head_dim), SPLIT_KV_HEAD_WIDTH
   * (head_dim, v_head_dim) */
  uint64_t n_kv_heads;
  uint64_t head_dim;
  uint64_t v_head_dim;
  /* BLOCK_SIZE_MISMATCH */
  uint64_t block_size;
  uint64_t tokens;
  /* BAD_LAYOUT */
  kvs_block_layout layout;
  kvs_block_layout_problem layout_problem;
  /* UNSUPPORTED_FORMAT: the version found and the readable set. */
  uint32_t format_found;
  const uint32_t *readable;
  size_t n_readable;
  /* OTHER_FORMAT: the version this kind of reader reads (format_found is
   * the block's). */
  uint32_t format_wanted;
  /* Page blocks (page_block.h): the refusal is about section `section`,
   * of tier section_name (a static name); field, expected/found and
   * recorded/actual then describe that section. */
  bool in_section;
  uint32_t section;
  const char *section_name;
} kvs_signature_error;

/* A short static name of a kind ("unmarked", "payload mismatch", ...). */
const char *kvs_signature_error_kind_name(kvs_signature_error_kind kind);

/* Writes the one-line message of a refusal into buf (NUL-terminated when
 * cap > 0); the same text a failing call puts in its kvs_error. Returns
 * the length snprintf would have written. */
size_t kvs_signature_error_format(const kvs_signature_error *why, char *buf, size_t cap);

/* Builds a signature by measuring a payload. The caller contributes only
 * facts no tensor can establish: the model identity, the weights
 * fingerprint (NULL allowed when weights_len is 0) and the layout used
 * to cut the sequence; shapes come from the layers, and the depth found
 * must equal the block size. Checks, in order: the layout is usable
 * (BAD_LAYOUT); there is a layer (EMPTY_PAYLOAD); layer 0 has heads and
 * width (DEGENERATE_LAYER); then each layer: V width equals K width
 * (SPLIT_KV_HEAD_WIDTH), same shape and dtype as layer 0, k length a
 * whole number of rows, v length equal to k length, positions equal to
 * the rows, same depth as layer 0 (RAGGED_PAYLOAD); finally depth equals
 * block size (BLOCK_SIZE_MISMATCH). A refusal returns KVS_ERR_SIGNATURE
 * with *why filled (when non-NULL); malformed arguments (NULL pointers,
 * unknown dtype, over-long model or fingerprint) return
 * KVS_ERR_INVALID_ARGUMENT. *out is written only on success. */
kvs_status kvs_block_signature_measure(const char *model, const uint8_t *weights,
                                       size_t weights_len, kvs_block_layout layout,
                                       const kvs_block_layer *layers, size_t n_layers,
                                       kvs_block_signature *out, kvs_signature_error *why,
                                       kvs_error *err);

/* What a reader requires, spelled as a signature. It is only ever the
 * left side of a comparison, never written into a block. Fails with KVS_ERR_INVALID_ARGUMENT for an
 * unusable layout, an unknown dtype or an over-long / unprintable model or fingerprint. */
kvs_status kvs_block_signature_expected(const char *model, const uint8_t *weights,
                                        size_t weights_len, kvs_block_layout layout,
                                        uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                                        kvs_dtype dtype, uint64_t tokens, kvs_block_signature *out,
                                        kvs_error *err);

/* Checks a payload against the signature stored with it (NULL: none was
 * stored) and then against what the reader requires, in the order given
 * at the top of this header. expected may be NULL to
 * stop after step 4 (self-consistency only, e.g. for inspection tools).
 * On success *actual (when non-NULL) receives the measured signature.
 * A refusal returns KVS_ERR_SIGNATURE with *why and err filled. Nothing
 * the caller passed is modified. Allocates nothing. */
kvs_status kvs_block_verify_parts(const kvs_block_signature *recorded,
                                  const kvs_block_layer *layers, size_t n_layers,
                                  const kvs_block_signature *expected, kvs_block_signature *actual,
                                  kvs_signature_error *why, kvs_error *err);

/* Checks a layer array can be measured: non-NULL when non-empty, a count
 * the format holds, and a known dtype on every layer (the error names the
 * layer). */
kvs_status kvs_block_layers_check(const kvs_block_layer *layers, size_t n_layers, kvs_error *err);

/* Renders a weights fingerprint for messages: lowercase hex, or
 * "none" when empty. Returns buf. */
const char *kvs_block_weights_describe(const uint8_t *weights, size_t len, char *buf, size_t cap);

/* Steps 1 and 2 of every kind's verification: a signature is recorded
 * (marked; else UNMARKED), its version is readable (else
 * UNSUPPORTED_FORMAT) and is `wanted`, the version this kind of reader
 * reads (else OTHER_FORMAT). True, with *why filled, when refused. */
bool kvs_signature_version_refused(bool marked, uint32_t version, uint32_t wanted,
                                   kvs_signature_error *why);

/* Hands a refusal to the caller: *why into *why_out (when non-NULL), its
 * message into err; returns KVS_ERR_SIGNATURE. */
kvs_status kvs_signature_refuse(const kvs_signature_error *why, kvs_signature_error *why_out,
                                kvs_error *err);

/* Checks a writer's or reader's identity arguments: a non-NULL printable
 * model of at most KVS_BLOCK_MODEL_MAX bytes, a fingerprint of at most
 * KVS_BLOCK_WEIGHTS_MAX bytes (non-NULL when it has a length). The
 * message names `function` (NULL: this one). */
kvs_status kvs_block_identity_check(const char *function, const char *model, const uint8_t *weights,
                                    size_t weights_len, kvs_error *err);

/* Whether a model identity is acceptable: at most KVS_BLOCK_MODEL_MAX
 * bytes, no control characters (it ends up in one-line messages). */
bool kvs_block_model_valid(const char *model, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCKS_BLOCK_SIGNATURE_H */

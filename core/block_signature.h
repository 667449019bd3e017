/* Signatures of stored KV blocks: whether a block found in a cache may be
 * used, as opposed to merely found.
 *
 * A chain hash (block_hash.h) says which tokens a block covers; it says
 * nothing about the tensors stored under it. A durable cache will sooner
 * or later be read by a process configured differently from the writer,
 * and reading KV state of the wrong shape, model, weights, dtype or
 * window is not a miss: it is wrong attention that yields confident
 * wrong tokens. Hence the rule of this module:
 *
 *   A signature is measured from the block's own payload, never filled
 *   in from what a reader expects, and an unmarked block is refused.
 *
 * kvs_block_signature_measure takes no expected shape at all. Verifying
 * a block (kvs_block_verify_parts) runs these checks, in this order, and
 * stops at the first failure:
 *   1. a signature is recorded at all            (UNMARKED);
 *   2. its format version is in the readable set (UNSUPPORTED_FORMAT);
 *   3. the payload measures coherently under the recorded layout
 *      (EMPTY_PAYLOAD, DEGENERATE_LAYER, SPLIT_KV_HEAD_WIDTH,
 *       RAGGED_PAYLOAD, BAD_LAYOUT, BLOCK_SIZE_MISMATCH);
 *   4. the recorded signature equals the measured one (PAYLOAD_MISMATCH):
 *      a stamp may not vouch for a width the payload does not have;
 *   5. only then, the measured signature is what the reader needs
 *      (INCOMPATIBLE).
 * The reader's expectation never contributes a field before step 5.
 *
 * What the payload cannot prove (model, weights fingerprint, sliding
 * window) is carried from the stamp and settled against the reader in
 * step 5; the block size can be proved (a stored block is exactly one
 * whole block) and is checked in step 3. */
#ifndef KVS_BLOCK_SIGNATURE_H
#define KVS_BLOCK_SIGNATURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/block_layout.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The payload layout version this build writes. */
#define KVS_BLOCK_FORMAT_VERSION 2u

/* The versions this build reads, listed explicitly so that dropping an
 * old layout is a deliberate edit, not arithmetic. Version 1 is not in
 * it: its header recorded neither block size nor window, so a v1 block
 * cannot say what layout it was cut under, and absence is never taken
 * for agreement. */
extern const uint32_t kvs_block_readable_versions[];
extern const size_t kvs_block_readable_versions_count;
bool kvs_block_format_readable(uint32_t version);

/* Element type of the stored K and V tensors. The values are also the
 * codes written to disk. Part of the signature, so a build that changes
 * its KV dtype invalidates old blocks instead of reinterpreting them. */
typedef enum kvs_dtype {
  KVS_DTYPE_F32 = 1,
  KVS_DTYPE_BF16 = 2
} kvs_dtype;

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
  uint64_t positions;  /* token positions the layer says it holds */
  const void *k;
  uint64_t k_elems;    /* elements in k */
  const void *v;
  uint64_t v_elems;    /* elements in v */
} kvs_block_layer;

/* What a block's payload is: the shape a reader must match to use it.
 * A plain value; build it with kvs_block_signature_measure (from a
 * payload) or kvs_block_signature_expected (a reader's requirement). */
typedef struct kvs_block_signature {
  uint32_t format_version;
  char model[KVS_BLOCK_MODEL_MAX + 1];      /* NUL-terminated */
  uint8_t weights[KVS_BLOCK_WEIGHTS_MAX];   /* caller-supplied fingerprint */
  uint32_t weights_len;                     /* 0: no fingerprint */
  uint32_t n_layers;
  uint32_t n_kv_heads;
  uint32_t head_dim;
  kvs_dtype dtype;
  uint64_t tokens;         /* positions per layer; equals layout.block_size */
  kvs_block_layout layout; /* block size and the window it had to divide */
} kvs_block_signature;

/* Why a block was refused. Every kind is a refusal to guess. */
typedef enum kvs_signature_error_kind {
  KVS_SIG_NONE = 0,
  /* No signature recorded. Absence is never agreement. */
  KVS_SIG_UNMARKED,
  /* No layers: nothing to vouch for. */
  KVS_SIG_EMPTY_PAYLOAD,
  /* The first layer has no heads or a zero head dimension. */
  KVS_SIG_DEGENERATE_LAYER,
  /* A V head width that differs from the K head width: the format carries
   * one head_dim, so such a payload has no honest encoding. */
  KVS_SIG_SPLIT_KV_HEAD_WIDTH,
  /* The payload disagrees with itself (layer shapes, lengths, dtypes, or
   * a position count its buffers contradict). */
  KVS_SIG_RAGGED_PAYLOAD,
  /* The stamp claims something the payload is not; the payload wins. */
  KVS_SIG_PAYLOAD_MISMATCH,
  /* Honest, coherent, but not what this reader needs. A miss. */
  KVS_SIG_INCOMPATIBLE,
  /* The layout's block size is not the payload's token depth. */
  KVS_SIG_BLOCK_SIZE_MISMATCH,
  /* The recorded layout is unusable (block size does not divide window). */
  KVS_SIG_BAD_LAYOUT,
  /* Written in a format version this build cannot read. */
  KVS_SIG_UNSUPPORTED_FORMAT
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
} kvs_signature_error;

/* A short static name of a kind ("unmarked", "payload mismatch", ...). */
const char *kvs_signature_error_kind_name(kvs_signature_error_kind kind);

/* Writes the one-line message of a refusal into buf (NUL-terminated when
 * cap > 0); the same text a failing call puts in its kvs_error. Returns
 * the length snprintf would have written. */
size_t kvs_signature_error_format(const kvs_signature_error *why, char *buf, size_t cap);

/* Measures a signature from a payload. The caller supplies only what no
 * tensor can prove: the model identity, the weights fingerprint (may be
 * NULL when weights_len is 0) and the layout the block was cut under;
 * every shape field is measured, and the layout's block size is checked
 * against the measured depth. Checks, in order: the layout is usable
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

/* A reader's requirement: the signature this process would compute for
 * a block of its own. Never stamped onto a block, only compared with
 * one. Fails with KVS_ERR_INVALID_ARGUMENT for an unusable layout, an
 * unknown dtype or an over-long / unprintable model or fingerprint. */
kvs_status kvs_block_signature_expected(const char *model, const uint8_t *weights,
                                        size_t weights_len, kvs_block_layout layout,
                                        uint32_t n_layers, uint32_t n_kv_heads,
                                        uint32_t head_dim, kvs_dtype dtype, uint64_t tokens,
                                        kvs_block_signature *out, kvs_error *err);

/* Verifies a payload against the signature recorded with it (NULL: the
 * block is unmarked) and then against the reader's expectation, in the
 * order described at the top of this header. expected may be NULL to
 * stop after step 4 (self-consistency only, e.g. for inspection tools).
 * On success *actual (when non-NULL) receives the measured signature.
 * A refusal returns KVS_ERR_SIGNATURE with *why and err filled. Nothing
 * the caller passed is modified. Allocates nothing. */
kvs_status kvs_block_verify_parts(const kvs_block_signature *recorded,
                                  const kvs_block_layer *layers, size_t n_layers,
                                  const kvs_block_signature *expected,
                                  kvs_block_signature *actual, kvs_signature_error *why,
                                  kvs_error *err);

/* Renders a weights fingerprint for messages: lowercase hex, or
 * "none" when empty. Returns buf. */
const char *kvs_block_weights_describe(const uint8_t *weights, size_t len, char *buf,
                                       size_t cap);

/* Whether a model identity is acceptable: at most KVS_BLOCK_MODEL_MAX
 * bytes, no control characters (it ends up in one-line messages). */
bool kvs_block_model_valid(const char *model, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCK_SIGNATURE_H */

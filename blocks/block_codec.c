#include "blocks/block_codec.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocks/page_codec.h"

/* The runtime-dispatched XXH3 entry points where Debian's libxxhash has
 * them (block_envelope.c says why). */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
#endif

#define KEY_BYTES 16u
#define SIG_FIXED_BYTES 40u
#define PAYLOAD_HEAD_BYTES 8u
#define LAYER_ENTRY_BYTES 40u

/* Checks what the encoder is given and computes the body length. */
static kvs_status size_parts(const char *function, const kvs_block_hash *key,
                             const kvs_block_signature *recorded, const kvs_block_layer *layers,
                             size_t n_layers, uint64_t *body_out, kvs_error *err) {
  if (n_layers > 0 && layers == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: layers is NULL but n_layers is %zu",
                         function, n_layers);
  }
  if (n_layers > KVS_BLOCK_MAX_LAYERS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%zu layers exceed the %u-layer maximum",
                         n_layers, KVS_BLOCK_MAX_LAYERS);
  }
  uint64_t body = key != NULL ? KEY_BYTES : 0;
  if (recorded != NULL) {
    if (recorded->format_version != KVS_BLOCK_FORMAT_VERSION) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "this build writes format version %u only, not %u",
                           KVS_BLOCK_FORMAT_VERSION, (unsigned)recorded->format_version);
    }
    const char *nul = memchr(recorded->model, '\0', sizeof recorded->model);
    if (nul == NULL || !kvs_block_model_valid(recorded->model, (size_t)(nul - recorded->model))) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "recorded model must be at most %d printable bytes",
                           KVS_BLOCK_MODEL_MAX);
    }
    if (recorded->weights_len > KVS_BLOCK_WEIGHTS_MAX) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "weights fingerprint of %u bytes exceeds the %d-byte maximum",
                           (unsigned)recorded->weights_len, KVS_BLOCK_WEIGHTS_MAX);
    }
    if (kvs_dtype_size(recorded->dtype) == 0) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "recorded dtype code %d is unknown",
                           (int)recorded->dtype);
    }
    body += SIG_FIXED_BYTES;
    kvs_add_padded(&body, (uint64_t)(nul - recorded->model) + recorded->weights_len);
  }
  body += PAYLOAD_HEAD_BYTES + (uint64_t)LAYER_ENTRY_BYTES * n_layers;
  for (size_t i = 0; i < n_layers; i++) {
    const kvs_block_layer *l = &layers[i];
    size_t es = kvs_dtype_size(l->dtype);
    if (es == 0) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "layer %zu has unknown dtype code %d", i,
                           (int)l->dtype);
    }
    if ((l->k_elems > 0 && l->k == NULL) || (l->v_elems > 0 && l->v == NULL)) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "layer %zu has a NULL K or V buffer", i);
    }
    uint64_t kb, vb;
    if (__builtin_mul_overflow(l->k_elems, (uint64_t)es, &kb) ||
        __builtin_mul_overflow(l->v_elems, (uint64_t)es, &vb) || !kvs_add_padded(&body, kb) ||
        !kvs_add_padded(&body, vb)) {
      return kvs_error_set(err, KVS_ERR_OVERFLOW, "block size overflows at layer %zu", i);
    }
  }
  if (body > SIZE_MAX - KVS_BLOCK_MIN_ENCODED) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "a %" PRIu64 "-byte body does not fit in memory",
                         body);
  }
  *body_out = body;
  return KVS_OK;
}

kvs_status kvs_block_encoded_size(const kvs_block_hash *key, const kvs_block_signature *recorded,
                                  const kvs_block_layer *layers, size_t n_layers, size_t *size,
                                  kvs_error *err) {
  if (size == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: size is NULL", __func__);
  }
  uint64_t body;
  kvs_status st = size_parts(__func__, key, recorded, layers, n_layers, &body, err);
  if (st != KVS_OK) return st;
  *size = (size_t)(body + KVS_BLOCK_MIN_ENCODED);
  return KVS_OK;
}

kvs_status kvs_block_encode_parts(const kvs_block_hash *key, const kvs_block_signature *recorded,
                                  const kvs_block_layer *layers, size_t n_layers, void *dst,
                                  size_t cap, size_t *written, kvs_error *err) {
  uint64_t body;
  kvs_status st = size_parts(__func__, key, recorded, layers, n_layers, &body, err);
  if (st != KVS_OK) return st;
  uint8_t *out = dst;
  size_t at = 0;
  st = kvs_block_encode_head(__func__, dst, cap, body, KVS_BLOCK_FORMAT_VERSION, key,
                             recorded != NULL, &at, err);
  if (st != KVS_OK) return st;
  if (recorded != NULL) {
    size_t model_len = strlen(recorded->model);
    kvs_wr32(out + at, (uint32_t)model_len);
    kvs_wr32(out + at + 4, recorded->weights_len);
    kvs_wr32(out + at + 8, recorded->n_layers);
    kvs_wr32(out + at + 12, recorded->n_kv_heads);
    kvs_wr32(out + at + 16, recorded->head_dim);
    kvs_wr32(out + at + 20, (uint32_t)recorded->dtype);
    kvs_wr64(out + at + 24, recorded->tokens);
    kvs_wr32(out + at + 32, recorded->layout.block_size);
    kvs_wr32(out + at + 36, recorded->layout.sliding_window);
    at += SIG_FIXED_BYTES;
    memcpy(out + at, recorded->model, model_len);
    at += model_len;
    memcpy(out + at, recorded->weights, recorded->weights_len);
    at += recorded->weights_len;
    size_t pad = (size_t)kvs_pad8(model_len + recorded->weights_len);
    memset(out + at, 0, pad);
    at += pad;
  }
  kvs_wr32(out + at, (uint32_t)n_layers);
  kvs_wr32(out + at + 4, 0);
  at += PAYLOAD_HEAD_BYTES;
  for (size_t i = 0; i < n_layers; i++) {
    const kvs_block_layer *l = &layers[i];
    kvs_wr32(out + at, l->n_kv_heads);
    kvs_wr32(out + at + 4, l->head_dim);
    kvs_wr32(out + at + 8, l->v_head_dim);
    kvs_wr32(out + at + 12, (uint32_t)l->dtype);
    kvs_wr64(out + at + 16, l->positions);
    kvs_wr64(out + at + 24, l->k_elems);
    kvs_wr64(out + at + 32, l->v_elems);
    at += LAYER_ENTRY_BYTES;
  }

  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, out, at);
  for (size_t i = 0; i < n_layers; i++) {
    const kvs_block_layer *l = &layers[i];
    size_t es = kvs_dtype_size(l->dtype);
    kvs_block_copy_section(&state, out, &at, l->k, (size_t)l->k_elems * es);
    kvs_block_copy_section(&state, out, &at, l->v, (size_t)l->v_elems * es);
  }
  kvs_wr64(out + at, XXH3_64bits_digest(&state));
  at += KVS_BLOCK_CHECKSUM_BYTES;
  if (written != NULL) *written = at;
  return KVS_OK;
}

kvs_status kvs_block_encode(const kvs_block_hash *key, const struct kvs_block *block, void *dst,
                            size_t cap, size_t *written, kvs_error *err) {
  if (block == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: block is NULL", __func__);
  }
  size_t n_layers;
  const kvs_block_layer *layers = kvs_block_layers(block, &n_layers);
  return kvs_block_encode_parts(key, kvs_block_signature_of(block), layers, n_layers, dst, cap,
                                written, err);
}

size_t kvs_block_encoded_size_of(const kvs_block_hash *key, const struct kvs_block *block) {
  if (block == NULL) return 0;
  size_t n_layers, size = 0;
  const kvs_block_layer *layers = kvs_block_layers(block, &n_layers);
  if (kvs_block_encoded_size(key, kvs_block_signature_of(block), layers, n_layers, &size, NULL) !=
      KVS_OK) {
    return 0;
  }
  return size;
}

/* ---- decoding ---- */

/* The bytes being parsed: `at` only moves forward, and every step checks
 * that `end - at` covers what it reads first, so no read leaves [0, end). */
typedef struct cursor {
  const uint8_t *src;
  size_t at;
  size_t end; /* where the body ends: the checksum starts here */
} cursor;

/* Step 2, the key (when the envelope's flag says one is recorded). */
static kvs_status parse_key(cursor *c, kvs_block_view *v, kvs_error *err) {
  if (c->end - c->at < KEY_BYTES) {
    return kvs_block_corrupt(err, "truncated key at offset %zu: %zu bytes left", c->at,
                             c->end - c->at);
  }
  v->keyed = true;
  v->key.high = kvs_rd64(c->src + c->at);
  v->key.low = kvs_rd64(c->src + c->at + 8);
  c->at += KEY_BYTES;
  return KVS_OK;
}

/* Step 3a, the signature's fixed part: its lengths and dtype bounded
 * before anything is sized from them. */
static kvs_status parse_signature_fixed(cursor *c, uint32_t version, kvs_block_view *v,
                                        uint32_t *model_len, uint32_t *weights_len,
                                        kvs_error *err) {
  if (c->end - c->at < SIG_FIXED_BYTES) {
    return kvs_block_corrupt(err, "truncated signature at offset %zu: %zu bytes left", c->at,
                             c->end - c->at);
  }
  const uint8_t *s = c->src + c->at;
  uint32_t dtype = kvs_rd32(s + 20);
  *model_len = kvs_rd32(s);
  *weights_len = kvs_rd32(s + 4);
  if (*model_len > KVS_BLOCK_MODEL_MAX) {
    return kvs_block_corrupt(err,
                             "signature model_len %u at offset %zu exceeds the %d-byte maximum",
                             (unsigned)*model_len, c->at, KVS_BLOCK_MODEL_MAX);
  }
  if (*weights_len > KVS_BLOCK_WEIGHTS_MAX) {
    return kvs_block_corrupt(err,
                             "signature weights_len %u at offset %zu exceeds the %d-byte maximum",
                             (unsigned)*weights_len, c->at + 4, KVS_BLOCK_WEIGHTS_MAX);
  }
  if (kvs_dtype_size((kvs_dtype)dtype) == 0) {
    return kvs_block_corrupt(err, "signature dtype code %u at offset %zu is unknown",
                             (unsigned)dtype, c->at + 20);
  }
  v->signature.format_version = version;
  v->signature.n_layers = kvs_rd32(s + 8);
  v->signature.n_kv_heads = kvs_rd32(s + 12);
  v->signature.head_dim = kvs_rd32(s + 16);
  v->signature.dtype = (kvs_dtype)dtype;
  v->signature.tokens = kvs_rd64(s + 24);
  v->signature.layout.block_size = kvs_rd32(s + 32);
  v->signature.layout.sliding_window = kvs_rd32(s + 36);
  c->at += SIG_FIXED_BYTES;
  return KVS_OK;
}

/* Step 3, the signature (when marked): the fixed part, then the model
 * and fingerprint bytes and their zero padding. */
static kvs_status parse_signature(cursor *c, uint32_t version, kvs_block_view *v, kvs_error *err) {
  uint32_t model_len = 0, weights_len = 0;
  kvs_status st = parse_signature_fixed(c, version, v, &model_len, &weights_len, err);
  if (st != KVS_OK) return st;
  st = kvs_block_read_identity(c->src, &c->at, c->end, model_len, weights_len, v->signature.model,
                               v->signature.weights, err);
  if (st == KVS_OK) v->signature.weights_len = weights_len;
  return st;
}

/* Step 4, the payload header and the layer table: the layer count bounded
 * and the table present. *table is where the table starts; the cursor
 * moves past it. */
static kvs_status parse_layer_table(cursor *c, uint32_t *n_layers, size_t *table, kvs_error *err) {
  if (c->end - c->at < PAYLOAD_HEAD_BYTES) {
    return kvs_block_corrupt(err, "truncated payload header at offset %zu: %zu bytes left", c->at,
                             c->end - c->at);
  }
  *n_layers = kvs_rd32(c->src + c->at);
  if (kvs_rd32(c->src + c->at + 4) != 0) {
    return kvs_block_corrupt(err, "reserved payload word at offset %zu is not zero", c->at + 4);
  }
  if (*n_layers > KVS_BLOCK_MAX_LAYERS) {
    return kvs_block_corrupt(err, "payload n_layers %u at offset %zu exceeds the %u-layer maximum",
                             (unsigned)*n_layers, c->at, KVS_BLOCK_MAX_LAYERS);
  }
  c->at += PAYLOAD_HEAD_BYTES;
  *table = c->at;
  if ((c->end - c->at) / LAYER_ENTRY_BYTES < *n_layers) {
    return kvs_block_corrupt(
        err, "truncated layer table: %u layers need %zu bytes at offset %zu, %zu left",
        (unsigned)*n_layers, (size_t)*n_layers * LAYER_ENTRY_BYTES, c->at, c->end - c->at);
  }
  c->at += (size_t)*n_layers * LAYER_ENTRY_BYTES;
  return KVS_OK;
}

/* One K or V section of `elems` elements of es bytes at the cursor: it
 * and its padding fit in what is left, and the padding is zero. */
static kvs_status check_section(cursor *c, uint32_t layer, const char *name, uint64_t elems,
                                size_t es, kvs_error *err) {
  size_t left = c->end - c->at;
  if (elems > left / es) {
    return kvs_block_corrupt(err,
                             "layer %u %s section of %" PRIu64
                             " elements overruns the block at "
                             "offset %zu (%zu bytes left)",
                             (unsigned)layer, name, elems, c->at, left);
  }
  size_t bytes = (size_t)elems * es;
  size_t padded = bytes + (size_t)kvs_pad8(bytes);
  if (padded > left) {
    return kvs_block_corrupt(err, "layer %u %s section padding overruns the block at offset %zu",
                             (unsigned)layer, name, c->at + bytes);
  }
  if (!kvs_pad_is_zero(c->src + c->at + bytes, padded - bytes)) {
    return kvs_block_corrupt(err, "nonzero padding after layer %u %s section at offset %zu",
                             (unsigned)layer, name, c->at + bytes);
  }
  c->at += padded;
  return KVS_OK;
}

/* Step 5, every layer's sections: each fits in what is left, and together
 * they end exactly where the checksum begins. */
static kvs_status check_sections(cursor *c, size_t table, uint32_t n_layers, kvs_error *err) {
  for (uint32_t i = 0; i < n_layers; i++) {
    const uint8_t *e = c->src + table + (size_t)i * LAYER_ENTRY_BYTES;
    uint32_t dtype = kvs_rd32(e + 12);
    size_t es = kvs_dtype_size((kvs_dtype)dtype);
    if (es == 0) {
      return kvs_block_corrupt(err, "layer %u dtype code %u is unknown", (unsigned)i,
                               (unsigned)dtype);
    }
    kvs_status st = check_section(c, i, "K", kvs_rd64(e + 24), es, err);
    if (st == KVS_OK) st = check_section(c, i, "V", kvs_rd64(e + 32), es, err);
    if (st != KVS_OK) return st;
  }
  if (c->at != c->end) {
    return kvs_block_corrupt(err, "%zu bytes after the last layer are not accounted for",
                             c->end - c->at);
  }
  return KVS_OK;
}

/* Step 6, the views: each layer's table entry, k and v pointing into src
 * (the sections were checked by step 5). */
static void fill_layers(const uint8_t *src, size_t table, uint32_t n_layers,
                        kvs_block_layer *layers) {
  size_t at = table + (size_t)n_layers * LAYER_ENTRY_BYTES;
  for (uint32_t i = 0; i < n_layers; i++) {
    const uint8_t *e = src + table + (size_t)i * LAYER_ENTRY_BYTES;
    kvs_block_layer *l = &layers[i];
    l->n_kv_heads = kvs_rd32(e);
    l->head_dim = kvs_rd32(e + 4);
    l->v_head_dim = kvs_rd32(e + 8);
    l->dtype = (kvs_dtype)kvs_rd32(e + 12);
    l->positions = kvs_rd64(e + 16);
    l->k_elems = kvs_rd64(e + 24);
    l->v_elems = kvs_rd64(e + 32);
    size_t es = kvs_dtype_size(l->dtype);
    size_t kb = (size_t)l->k_elems * es, vb = (size_t)l->v_elems * es;
    l->k = src + at;
    at += kb + (size_t)kvs_pad8(kb);
    l->v = src + at;
    at += vb + (size_t)kvs_pad8(vb);
  }
}

/* Steps 2 to 5 over a readable (version 2) body; *table and *n_layers
 * locate the layer table for step 6. */
static kvs_status parse_body(const uint8_t *src, size_t len, uint64_t body_len, uint32_t flags,
                             kvs_block_view *v, size_t *table, uint32_t *n_layers, kvs_error *err) {
  cursor c = {src, KVS_BLOCK_ENVELOPE_BYTES, len - KVS_BLOCK_CHECKSUM_BYTES};
  if (body_len % 8 != 0) {
    return kvs_block_corrupt(err, "body_len %" PRIu64 " is not a multiple of 8", body_len);
  }
  kvs_status st = KVS_OK;
  if ((flags & KVS_BLOCK_FLAG_KEYED) != 0) st = parse_key(&c, v, err);
  if (st == KVS_OK && v->marked) st = parse_signature(&c, v->format_version, v, err);
  if (st == KVS_OK) st = parse_layer_table(&c, n_layers, table, err);
  if (st == KVS_OK) st = check_sections(&c, *table, *n_layers, err);
  return st;
}

/* Parses src. Nothing is written to *view or layers unless the whole
 * input is valid; layers are filled only when layer_cap suffices. */
static kvs_status parse(const uint8_t *src, size_t len, bool verify_checksum, kvs_block_view *view,
                        kvs_block_layer *layers, size_t layer_cap, kvs_error *err) {
  uint64_t body_len = 0, stored = 0;
  kvs_status st = kvs_block_envelope_check(src, len, verify_checksum, &body_len, &stored, err);
  if (st != KVS_OK) return st;
  uint32_t flags = kvs_rd32(src + 12);
  kvs_block_view v;
  memset(&v, 0, sizeof v);
  v.format_version = kvs_rd32(src + 8);
  v.marked = (flags & KVS_BLOCK_FLAG_MARKED) != 0;
  v.checksum = stored;
  v.encoded_bytes = len;
  if (!kvs_block_format_readable(v.format_version)) {
    /* Intact but unreadable: verification refuses it (unmarked first,
     * then the version), so it is reported as stale, not corrupt. */
    v.signature.format_version = v.format_version;
    if (view != NULL) *view = v;
    return KVS_OK;
  }
  v.readable = true;
  if (v.format_version == KVS_PAGE_BLOCK_FORMAT_VERSION) {
    /* A DSV4 page block (page_codec.h): validated whole by its own
     * parser, with no layers; a layer reader's verification refuses it
     * by its version (OTHER_FORMAT). */
    kvs_page_block_view pv;
    if ((st = kvs_page_block_decode_view(src, len, &pv, NULL, 0, err)) != KVS_OK) return st;
    v.keyed = pv.keyed;
    v.key = pv.key;
    v.signature.format_version = v.format_version;
    v.n_sections = pv.n_sections;
    if (view != NULL) *view = v;
    return KVS_OK;
  }
  size_t table = 0;
  uint32_t n_layers = 0;
  if ((st = parse_body(src, len, body_len, flags, &v, &table, &n_layers, err)) != KVS_OK) {
    return st;
  }
  v.n_layers = n_layers;
  if (layers == NULL && layer_cap == 0) {
    if (view != NULL) *view = v;
    return KVS_OK;
  }
  if (layers == NULL || layer_cap < n_layers) {
    if (view != NULL) *view = v;
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "block has %u layers; the layer array holds %zu", (unsigned)n_layers,
                         layers == NULL ? (size_t)0 : layer_cap);
  }
  fill_layers(src, table, n_layers, layers);
  if (view != NULL) *view = v;
  return KVS_OK;
}

kvs_status kvs_block_decode_view(const void *src, size_t len, kvs_block_view *view,
                                 kvs_block_layer *layers, size_t layer_cap, kvs_error *err) {
  if (src == NULL && len > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: src is NULL", __func__);
  }
  static const uint8_t empty[1];
  return parse(src != NULL ? src : empty, len, true, view, layers, layer_cap, err);
}

kvs_status kvs_block_decode_adopt(void *buf, size_t len, kvs_block_view *view,
                                  kvs_unverified_block_t *out, kvs_error *err) {
  if (buf == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: buf is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_block_view v;
  kvs_status st = parse(buf, len, true, &v, NULL, 0, err);
  if (st != KVS_OK) return st;
  kvs_block_layer *layers = NULL;
  if (v.n_layers > 0) {
    layers = malloc(v.n_layers * sizeof *layers);
    if (layers == NULL) {
      return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu layer views", v.n_layers);
    }
    /* Validated (and checksummed) above; this pass only fills views. */
    st = parse(buf, len, false, &v, layers, v.n_layers, err);
    if (st != KVS_OK) {
      free(layers);
      return st;
    }
  }
  st =
      kvs_unverified_block_adopt(buf, v.marked ? &v.signature : NULL, layers, v.n_layers, out, err);
  free(layers);
  if (st != KVS_OK) return st;
  if (view != NULL) *view = v;
  return KVS_OK;
}

kvs_status kvs_block_decode(const void *src, size_t len, kvs_block_view *view,
                            kvs_unverified_block_t *out, kvs_error *err) {
  if (src == NULL && len > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: src is NULL", __func__);
  }
  /* The copy is exactly as large as the input the caller already holds;
   * nothing is sized from a length field before it is validated. */
  void *copy = malloc(len > 0 ? len : 1);
  if (copy == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu bytes", len);
  if (len > 0) memcpy(copy, src, len);
  kvs_status st = kvs_block_decode_adopt(copy, len, view, out, err);
  if (st != KVS_OK) free(copy);
  return st;
}

#include "blocks/page_codec.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "blocks/block_envelope.h"
/* The runtime-dispatched XXH3 (block_envelope.c says why). */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
#endif

#define KEY_BYTES 16u
#define SIG_FIXED_BYTES 56u
#define SIG_SECTION_BYTES 16u
#define PAYLOAD_HEAD_BYTES 8u
#define SECTION_ENTRY_BYTES 32u

static bool known_codes(uint32_t tier, uint32_t encoding) {
  return strcmp(kvs_page_tier_name(tier), "unknown") != 0 &&
         strcmp(kvs_page_encoding_name(encoding), "unknown") != 0;
}

/* Checks what the encoder is given and computes the body length. */
static kvs_status size_parts(const char *function, const kvs_block_hash *key,
                             const kvs_page_signature *rec, const kvs_page_section *sections,
                             size_t n, uint64_t *body_out, kvs_error *err) {
  if (n > 0 && sections == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: sections is NULL but n is %zu",
                         function, n);
  }
  if (n > KVS_PAGE_MAX_SECTIONS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%zu sections exceed the %u maximum", n,
                         KVS_PAGE_MAX_SECTIONS);
  }
  uint64_t body = key != NULL ? KEY_BYTES : 0;
  if (rec != NULL) {
    if (rec->format_version != KVS_PAGE_BLOCK_FORMAT_VERSION) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "page blocks are written in format version %u, not %u",
                           KVS_PAGE_BLOCK_FORMAT_VERSION, (unsigned)rec->format_version);
    }
    const char *nul = memchr(rec->id.model, '\0', sizeof rec->id.model);
    if (nul == NULL || !kvs_block_model_valid(rec->id.model, (size_t)(nul - rec->id.model)) ||
        rec->id.weights_len > KVS_BLOCK_WEIGHTS_MAX || rec->id.page_size == 0 ||
        rec->id.layer_begin >= rec->id.layer_end || rec->n_sections > KVS_PAGE_MAX_SECTIONS) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "recorded page signature is malformed (model, fingerprint, page size, "
                           "layer range or section count)");
    }
    for (uint32_t i = 0; i < rec->n_sections; i++) {
      if (!known_codes(rec->sections[i].tier, rec->sections[i].encoding)) {
        return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                             "recorded section %u has an unknown tier or encoding code",
                             (unsigned)i);
      }
    }
    body += SIG_FIXED_BYTES + (uint64_t)SIG_SECTION_BYTES * rec->n_sections;
    kvs_add_padded(&body, (uint64_t)(nul - rec->id.model) + rec->id.weights_len);
  }
  body += PAYLOAD_HEAD_BYTES + (uint64_t)SECTION_ENTRY_BYTES * n;
  for (size_t i = 0; i < n; i++) {
    const kvs_page_section *s = &sections[i];
    if (!known_codes(s->shape.tier, s->shape.encoding)) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "section %zu has an unknown tier or encoding code", i);
    }
    if (s->n_bytes > 0 && s->bytes == NULL) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "section %zu has NULL bytes", i);
    }
    if (!kvs_add_padded(&body, s->n_bytes)) {
      return kvs_error_set(err, KVS_ERR_OVERFLOW, "page block size overflows at section %zu", i);
    }
  }
  if (body > SIZE_MAX - KVS_BLOCK_MIN_ENCODED) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "a %" PRIu64 "-byte body does not fit in memory",
                         body);
  }
  *body_out = body;
  return KVS_OK;
}

kvs_status kvs_page_block_encoded_size(const kvs_block_hash *key,
                                       const kvs_page_signature *recorded,
                                       const kvs_page_section *sections, size_t n_sections,
                                       size_t *size, kvs_error *err) {
  if (size == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: size is NULL", __func__);
  }
  uint64_t body;
  kvs_status st = size_parts(__func__, key, recorded, sections, n_sections, &body, err);
  if (st != KVS_OK) return st;
  *size = (size_t)(body + KVS_BLOCK_MIN_ENCODED);
  return KVS_OK;
}

static void write_shape(uint8_t *p, const kvs_page_section_shape *s) {
  p[0] = (uint8_t)s->tier;
  p[1] = (uint8_t)(s->tier >> 8);
  p[2] = (uint8_t)s->encoding;
  p[3] = (uint8_t)(s->encoding >> 8);
  kvs_wr32(p + 4, s->layers);
  kvs_wr32(p + 8, s->rows);
  kvs_wr32(p + 12, s->row_bytes);
}

static kvs_page_section_shape read_shape(const uint8_t *p) {
  kvs_page_section_shape s;
  s.tier = (uint32_t)p[0] | (uint32_t)p[1] << 8;
  s.encoding = (uint32_t)p[2] | (uint32_t)p[3] << 8;
  s.layers = kvs_rd32(p + 4);
  s.rows = kvs_rd32(p + 8);
  s.row_bytes = kvs_rd32(p + 12);
  return s;
}

/* The signature: fixed part, section shapes, model and fingerprint. */
static size_t write_signature(uint8_t *out, const kvs_page_signature *rec) {
  const kvs_page_identity *id = &rec->id;
  size_t model_len = strlen(id->model);
  kvs_wr32(out, (uint32_t)model_len);
  kvs_wr32(out + 4, id->weights_len);
  kvs_wr32(out + 8, id->page_size);
  kvs_wr32(out + 12, rec->n_sections);
  kvs_wr32(out + 16, id->layer_begin);
  kvs_wr32(out + 20, id->layer_end);
  kvs_wr64(out + 24, id->geometry);
  kvs_wr64(out + 32, id->chain.high);
  kvs_wr64(out + 40, id->chain.low);
  kvs_wr64(out + 48, id->depth);
  size_t at = SIG_FIXED_BYTES;
  for (uint32_t i = 0; i < rec->n_sections; i++, at += SIG_SECTION_BYTES) {
    write_shape(out + at, &rec->sections[i]);
  }
  memcpy(out + at, id->model, model_len);
  at += model_len;
  memcpy(out + at, id->weights, id->weights_len);
  at += id->weights_len;
  size_t pad = (size_t)kvs_pad8(model_len + id->weights_len);
  memset(out + at, 0, pad);
  return at + pad;
}

kvs_status kvs_page_block_encode_parts(const kvs_block_hash *key,
                                       const kvs_page_signature *recorded,
                                       const kvs_page_section *sections, size_t n_sections,
                                       void *dst, size_t cap, size_t *written, kvs_error *err) {
  uint64_t body;
  kvs_status st = size_parts(__func__, key, recorded, sections, n_sections, &body, err);
  if (st != KVS_OK) return st;
  uint8_t *out = dst;
  size_t at = 0;
  st = kvs_block_encode_head(__func__, dst, cap, body, KVS_PAGE_BLOCK_FORMAT_VERSION, key,
                             recorded != NULL, &at, err);
  if (st != KVS_OK) return st;
  if (recorded != NULL) at += write_signature(out + at, recorded);
  kvs_wr32(out + at, (uint32_t)n_sections);
  kvs_wr32(out + at + 4, 0);
  at += PAYLOAD_HEAD_BYTES;
  for (size_t i = 0; i < n_sections; i++, at += SECTION_ENTRY_BYTES) {
    write_shape(out + at, &sections[i].shape);
    kvs_wr64(out + at + 16, sections[i].n_bytes);
    kvs_wr64(out + at + 24, sections[i].digest);
  }
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, out, at);
  for (size_t i = 0; i < n_sections; i++) {
    kvs_block_copy_section(&state, out, &at, sections[i].bytes, (size_t)sections[i].n_bytes);
  }
  kvs_wr64(out + at, XXH3_64bits_digest(&state));
  at += KVS_BLOCK_CHECKSUM_BYTES;
  if (written != NULL) *written = at;
  return KVS_OK;
}

kvs_status kvs_page_block_encode(const kvs_block_hash *key, const struct kvs_page_block *block,
                                 void *dst, size_t cap, size_t *written, kvs_error *err) {
  if (block == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: block is NULL", __func__);
  }
  size_t n;
  const kvs_page_section *sections = kvs_page_block_sections(block, &n);
  return kvs_page_block_encode_parts(key, kvs_page_block_signature_of(block), sections, n, dst, cap,
                                     written, err);
}

size_t kvs_page_block_encoded_size_of(const kvs_block_hash *key,
                                      const struct kvs_page_block *block) {
  if (block == NULL) return 0;
  size_t n, size = 0;
  const kvs_page_section *sections = kvs_page_block_sections(block, &n);
  if (kvs_page_block_encoded_size(key, kvs_page_block_signature_of(block), sections, n, &size,
                                  NULL) != KVS_OK) {
    return 0;
  }
  return size;
}

/* ---- decoding ---- */

/* The bytes being parsed: `at` only moves forward, and every step checks
 * that `end - at` covers what it reads first. */
typedef struct cursor {
  const uint8_t *src;
  size_t at;
  size_t end;
} cursor;

static kvs_status need(const cursor *c, size_t bytes, const char *what, kvs_error *err) {
  if (c->end - c->at < bytes) {
    return kvs_block_corrupt(err, "truncated %s at offset %zu: %zu bytes needed, %zu left", what,
                             c->at, bytes, c->end - c->at);
  }
  return KVS_OK;
}

static kvs_status check_shape(const kvs_page_section_shape *s, const char *where, uint32_t i,
                              size_t offset, kvs_error *err) {
  if (!known_codes(s->tier, s->encoding)) {
    return kvs_block_corrupt(
        err, "%s section %u at offset %zu: tier code %u or encoding code %u is unknown", where,
        (unsigned)i, offset, (unsigned)s->tier, (unsigned)s->encoding);
  }
  return KVS_OK;
}

static kvs_status parse_signature(cursor *c, kvs_page_signature *sig, kvs_error *err) {
  kvs_status st = need(c, SIG_FIXED_BYTES, "page signature", err);
  if (st != KVS_OK) return st;
  const uint8_t *s = c->src + c->at;
  uint32_t model_len = kvs_rd32(s), weights_len = kvs_rd32(s + 4), n = kvs_rd32(s + 12);
  if (model_len > KVS_BLOCK_MODEL_MAX || weights_len > KVS_BLOCK_WEIGHTS_MAX ||
      n > KVS_PAGE_MAX_SECTIONS) {
    return kvs_block_corrupt(err,
                             "page signature at offset %zu: model_len %u, weights_len %u or "
                             "n_sections %u exceeds its maximum (%d, %d, %u)",
                             c->at, (unsigned)model_len, (unsigned)weights_len, (unsigned)n,
                             KVS_BLOCK_MODEL_MAX, KVS_BLOCK_WEIGHTS_MAX, KVS_PAGE_MAX_SECTIONS);
  }
  memset(sig, 0, sizeof *sig);
  sig->format_version = KVS_PAGE_BLOCK_FORMAT_VERSION;
  sig->id.page_size = kvs_rd32(s + 8);
  sig->n_sections = n;
  sig->id.layer_begin = kvs_rd32(s + 16);
  sig->id.layer_end = kvs_rd32(s + 20);
  sig->id.geometry = kvs_rd64(s + 24);
  sig->id.chain.high = kvs_rd64(s + 32);
  sig->id.chain.low = kvs_rd64(s + 40);
  sig->id.depth = kvs_rd64(s + 48);
  if (sig->id.page_size == 0 || sig->id.layer_begin >= sig->id.layer_end) {
    return kvs_block_corrupt(
        err, "page signature at offset %zu: page size %u or layer range [%u, %u) is empty", c->at,
        (unsigned)sig->id.page_size, (unsigned)sig->id.layer_begin, (unsigned)sig->id.layer_end);
  }
  c->at += SIG_FIXED_BYTES;
  if ((st = need(c, (size_t)n * SIG_SECTION_BYTES, "page signature sections", err)) != KVS_OK) {
    return st;
  }
  for (uint32_t i = 0; i < n; i++, c->at += SIG_SECTION_BYTES) {
    sig->sections[i] = read_shape(c->src + c->at);
    if ((st = check_shape(&sig->sections[i], "signature", i, c->at, err)) != KVS_OK) return st;
  }
  st = kvs_block_read_identity(c->src, &c->at, c->end, model_len, weights_len, sig->id.model,
                               sig->id.weights, err);
  if (st == KVS_OK) sig->id.weights_len = weights_len;
  return st;
}

/* The payload: its table, then every section (bounded, padding zero),
 * ending exactly where the checksum begins. *table locates the table. */
static kvs_status parse_payload(cursor *c, uint32_t *n_out, size_t *table, kvs_error *err) {
  kvs_status st = need(c, PAYLOAD_HEAD_BYTES, "page payload header", err);
  if (st != KVS_OK) return st;
  uint32_t n = kvs_rd32(c->src + c->at);
  if (kvs_rd32(c->src + c->at + 4) != 0 || n > KVS_PAGE_MAX_SECTIONS) {
    return kvs_block_corrupt(err,
                             "page payload header at offset %zu: %u sections (at most %u) or a "
                             "nonzero reserved word",
                             c->at, (unsigned)n, KVS_PAGE_MAX_SECTIONS);
  }
  c->at += PAYLOAD_HEAD_BYTES;
  *table = c->at;
  if ((st = need(c, (size_t)n * SECTION_ENTRY_BYTES, "page section table", err)) != KVS_OK) {
    return st;
  }
  c->at += (size_t)n * SECTION_ENTRY_BYTES;
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *e = c->src + *table + (size_t)i * SECTION_ENTRY_BYTES;
    kvs_page_section_shape shape = read_shape(e);
    if ((st = check_shape(&shape, "payload", i, *table + (size_t)i * SECTION_ENTRY_BYTES, err)) !=
        KVS_OK) {
      return st;
    }
    uint64_t bytes = kvs_rd64(e + 16);
    size_t left = c->end - c->at;
    if (bytes > left || bytes + kvs_pad8(bytes) > left) {
      return kvs_block_corrupt(err,
                               "page section %u (%s) of %" PRIu64
                               " bytes overruns the block at offset %zu (%zu bytes left)",
                               (unsigned)i, kvs_page_tier_name(shape.tier), bytes, c->at, left);
    }
    size_t pad = (size_t)kvs_pad8(bytes);
    if (!kvs_pad_is_zero(c->src + c->at + bytes, pad)) {
      return kvs_block_corrupt(err, "nonzero padding after page section %u at offset %zu",
                               (unsigned)i, c->at + (size_t)bytes);
    }
    c->at += (size_t)bytes + pad;
  }
  if (c->at != c->end) {
    return kvs_block_corrupt(err, "%zu bytes after the last page section are not accounted for",
                             c->end - c->at);
  }
  *n_out = n;
  return KVS_OK;
}

static void fill_sections(const uint8_t *src, size_t table, uint32_t n, kvs_page_section *out) {
  size_t at = table + (size_t)n * SECTION_ENTRY_BYTES;
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *e = src + table + (size_t)i * SECTION_ENTRY_BYTES;
    out[i].shape = read_shape(e);
    out[i].n_bytes = kvs_rd64(e + 16);
    out[i].digest = kvs_rd64(e + 24);
    out[i].bytes = src + at;
    at += (size_t)out[i].n_bytes + (size_t)kvs_pad8(out[i].n_bytes);
  }
}

kvs_status kvs_page_block_decode_view(const void *src_in, size_t len, kvs_page_block_view *view,
                                      kvs_page_section *sections, size_t cap, kvs_error *err) {
  if (src_in == NULL && len > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: src is NULL", __func__);
  }
  static const uint8_t empty[1];
  const uint8_t *src = src_in != NULL ? src_in : empty;
  uint64_t body_len = 0, stored = 0;
  kvs_status st = kvs_block_envelope_check(src, len, true, &body_len, &stored, err);
  if (st != KVS_OK) return st;
  uint32_t flags = kvs_rd32(src + 12);
  kvs_page_block_view v;
  memset(&v, 0, sizeof v);
  v.format_version = kvs_rd32(src + 8);
  v.marked = (flags & KVS_BLOCK_FLAG_MARKED) != 0;
  v.checksum = stored;
  v.encoded_bytes = len;
  if (v.format_version != KVS_PAGE_BLOCK_FORMAT_VERSION) {
    /* Intact, of another version: verification refuses it by that. */
    if (view != NULL) *view = v;
    return KVS_OK;
  }
  if (body_len % 8 != 0) {
    return kvs_block_corrupt(err, "body_len %" PRIu64 " is not a multiple of 8", body_len);
  }
  cursor c = {src, KVS_BLOCK_ENVELOPE_BYTES, len - KVS_BLOCK_CHECKSUM_BYTES};
  if ((flags & KVS_BLOCK_FLAG_KEYED) != 0) {
    if ((st = need(&c, KEY_BYTES, "key", err)) != KVS_OK) return st;
    v.keyed = true;
    v.key.high = kvs_rd64(src + c.at);
    v.key.low = kvs_rd64(src + c.at + 8);
    c.at += KEY_BYTES;
  }
  if (v.marked && (st = parse_signature(&c, &v.signature, err)) != KVS_OK) return st;
  uint32_t n = 0;
  size_t table = 0;
  if ((st = parse_payload(&c, &n, &table, err)) != KVS_OK) return st;
  v.readable = true;
  v.n_sections = n;
  if (sections != NULL || cap != 0) {
    if (sections == NULL || cap < n) {
      if (view != NULL) *view = v;
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "page block has %u sections; the section array holds %zu", (unsigned)n,
                           sections == NULL ? (size_t)0 : cap);
    }
    fill_sections(src, table, n, sections);
  }
  if (view != NULL) *view = v;
  return KVS_OK;
}

kvs_status kvs_page_block_decode_adopt(void *buf, size_t len, const kvs_page_signature *expected,
                                       kvs_page_block_view *view, kvs_page_block_t *out,
                                       kvs_signature_error *why, kvs_error *err) {
  if (buf == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: buf is NULL", __func__);
  if (expected == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: expected is NULL", __func__);
  }
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  kvs_page_block_view v;
  kvs_page_section sections[KVS_PAGE_MAX_SECTIONS];
  kvs_status st = kvs_page_block_decode_view(buf, len, &v, sections, KVS_PAGE_MAX_SECTIONS, err);
  if (st != KVS_OK) return st;
  /* Another version carries no page signature: verification refuses it
   * by what it has (unmarked, unreadable, or version 2's layers). */
  kvs_page_signature other;
  memset(&other, 0, sizeof other);
  other.format_version = v.format_version;
  const kvs_page_signature *recorded = !v.marked ? NULL : v.readable ? &v.signature : &other;
  kvs_page_signature actual;
  st = kvs_page_verify_parts(recorded, sections, v.n_sections, expected, &actual, why, err);
  if (st == KVS_OK) st = kvs_page_block_adopt(buf, &actual, sections, v.n_sections, out, err);
  if (st != KVS_OK) return st;
  if (view != NULL) *view = v;
  return KVS_OK;
}

kvs_status kvs_page_block_decode(const void *src, size_t len, const kvs_page_signature *expected,
                                 kvs_page_block_view *view, kvs_page_block_t *out,
                                 kvs_signature_error *why, kvs_error *err) {
  if (src == NULL && len > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: src is NULL", __func__);
  }
  /* As large as the input the caller already holds, nothing more. */
  void *copy = malloc(len > 0 ? len : 1);
  if (copy == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu bytes", len);
  if (len > 0) memcpy(copy, src, len);
  kvs_status st = kvs_page_block_decode_adopt(copy, len, expected, view, out, why, err);
  if (st != KVS_OK) free(copy);
  return st;
}

#include "blocks/block_envelope.h"

#include "blocks/block_signature.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "core/xxh3.h" /* the dispatched entry points: several times the speed */

/* Copy and checksum this much at a time, so the checksum reads what the
 * copy just wrote while it is still in cache. */
#define COPY_CHUNK ((size_t)64 * 1024)

kvs_status kvs_block_corrupt(kvs_error *err, const char *fmt, ...) {
  if (err != NULL && fmt != NULL) {
    va_list args;
    va_start(args, fmt);
    err->status = KVS_ERR_CORRUPT;
    vsnprintf(err->message, sizeof err->message, fmt, args);
    va_end(args);
  }
  return KVS_ERR_CORRUPT;
}

kvs_status kvs_block_read_identity(const uint8_t *src, size_t *at, size_t end, uint32_t model_len,
                                   uint32_t weights_len, char *model, uint8_t *weights,
                                   kvs_error *err) {
  if (src == NULL || at == NULL || model == NULL || weights == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         src == NULL     ? "src"
                         : at == NULL    ? "at"
                         : model == NULL ? "model"
                                         : "weights");
  }
  size_t text = (size_t)model_len + weights_len;
  size_t padded = text + (size_t)kvs_pad8(text);
  if (*at > end || end - *at < padded) {
    return kvs_block_corrupt(err,
                             "truncated signature: model and fingerprint need %zu bytes at offset "
                             "%zu, %zu left",
                             padded, *at, *at > end ? (size_t)0 : end - *at);
  }
  const uint8_t *p = src + *at;
  if (!kvs_block_model_valid((const char *)p, model_len)) {
    return kvs_block_corrupt(err, "signature model at offset %zu holds control bytes", *at);
  }
  if (!kvs_pad_is_zero(p + text, padded - text)) {
    return kvs_block_corrupt(err, "nonzero padding after the signature at offset %zu", *at + text);
  }
  memcpy(model, p, model_len);
  memcpy(weights, p + model_len, weights_len);
  *at += padded;
  return KVS_OK;
}

void kvs_block_envelope_write(uint8_t *out, uint32_t version, uint32_t flags, uint64_t body_len) {
  if (out == NULL) return;
  memcpy(out, KVS_BLOCK_MAGIC, 8);
  kvs_wr32(out + 8, version);
  kvs_wr32(out + 12, flags);
  kvs_wr64(out + 16, body_len);
}

kvs_status kvs_block_encode_head(const char *function, void *dst, size_t cap, uint64_t body,
                                 uint32_t version, const kvs_block_hash *key, bool marked,
                                 size_t *at, kvs_error *err) {
  if (function == NULL) function = __func__;
  if (dst == NULL || at == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", function,
                         dst == NULL ? "dst" : "at");
  }
  size_t total = (size_t)(body + KVS_BLOCK_MIN_ENCODED);
  if (cap < total) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "encoded block needs %zu bytes; the buffer holds %zu", total, cap);
  }
  uint8_t *out = dst;
  kvs_block_envelope_write(
      out, version,
      (marked ? KVS_BLOCK_FLAG_MARKED : 0u) | (key != NULL ? KVS_BLOCK_FLAG_KEYED : 0u), body);
  *at = KVS_BLOCK_ENVELOPE_BYTES;
  if (key != NULL) {
    kvs_wr64(out + *at, key->high);
    kvs_wr64(out + *at + 8, key->low);
    *at += 16;
  }
  return KVS_OK;
}

void kvs_block_copy_section(XXH3_state_t *state, uint8_t *out, size_t *at, const void *src,
                            size_t n) {
  if (state == NULL || out == NULL || at == NULL || (src == NULL && n > 0)) return;
  const uint8_t *s = src;
  size_t done = 0;
  while (done < n) {
    size_t c = n - done < COPY_CHUNK ? n - done : COPY_CHUNK;
    memcpy(out + *at, s + done, c);
    XXH3_64bits_update(state, out + *at, c);
    *at += c;
    done += c;
  }
  size_t pad = (size_t)kvs_pad8(n);
  if (pad > 0) {
    memset(out + *at, 0, pad);
    XXH3_64bits_update(state, out + *at, pad);
    *at += pad;
  }
}

kvs_status kvs_block_envelope_check(const uint8_t *src, size_t len, bool verify_checksum,
                                    uint64_t *body_len, uint64_t *stored, kvs_error *err) {
  if ((src == NULL && len > 0) || body_len == NULL || stored == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         body_len == NULL ? "body_len"
                         : stored == NULL ? "stored"
                                          : "src");
  }
  if (len >= 8 && memcmp(src, KVS_BLOCK_MAGIC, 8) != 0) {
    return kvs_block_corrupt(
        err,
        "not a kvshard block: magic bytes are %02x%02x%02x%02x%02x%02x%02x%02x, "
        "expected \"%s\"",
        src[0], src[1], src[2], src[3], src[4], src[5], src[6], src[7], KVS_BLOCK_MAGIC);
  }
  if (len < KVS_BLOCK_MIN_ENCODED) {
    return kvs_block_corrupt(err, "truncated block: %zu bytes, less than the %u-byte envelope", len,
                             KVS_BLOCK_MIN_ENCODED);
  }
  *body_len = kvs_rd64(src + 16);
  size_t present = len - KVS_BLOCK_MIN_ENCODED;
  if (*body_len > present) {
    return kvs_block_corrupt(err,
                             "truncated block: body_len says %" PRIu64
                             " bytes but %zu are present "
                             "(%zu bytes in all)",
                             *body_len, present, len);
  }
  if (*body_len < present) {
    return kvs_block_corrupt(err,
                             "block has %zu bytes past its declared end (body_len %" PRIu64 ")",
                             present - (size_t)*body_len, *body_len);
  }
  *stored = kvs_rd64(src + len - KVS_BLOCK_CHECKSUM_BYTES);
  if (verify_checksum) {
    uint64_t computed = XXH3_64bits(src, len - KVS_BLOCK_CHECKSUM_BYTES);
    if (computed != *stored) {
      return kvs_block_corrupt(
          err, "checksum mismatch: stored %016" PRIx64 ", computed %016" PRIx64 " over %zu bytes",
          *stored, computed, len - KVS_BLOCK_CHECKSUM_BYTES);
    }
  }
  uint32_t flags = kvs_rd32(src + 12);
  if ((flags & ~(KVS_BLOCK_FLAG_MARKED | KVS_BLOCK_FLAG_KEYED)) != 0) {
    return kvs_block_corrupt(err, "unknown flag bits 0x%08x in the block envelope",
                             (unsigned)(flags & ~(KVS_BLOCK_FLAG_MARKED | KVS_BLOCK_FLAG_KEYED)));
  }
  return KVS_OK;
}

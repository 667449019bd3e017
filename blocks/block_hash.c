#include "blocks/block_hash.h"

#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation */
#include <xxhash.h>
/* Debian's libxxhash also exports runtime-dispatched (AVX2 / AVX-512) x86
 * entry points; this header maps XXH3_128bits_update onto them.
 * Same values, several times the speed of the baseline SSE2 build. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
#endif

/* Token ids are hashed as little-endian u32 so a hash means the same on
 * every host; they are converted through this stack buffer in chunks. */
#define KVS_HASH_CHUNK 256

static void put_u64_be(uint8_t *p, uint64_t v) {
  for (int i = 7; i >= 0; i--) {
    p[i] = (uint8_t)v;
    v >>= 8;
  }
}

kvs_status kvs_block_hash_chain(const kvs_block_hash *parent, const uint32_t *token_ids,
                                size_t n_tokens, uint32_t block_size, kvs_block_hash *out,
                                kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (block_size == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "block size is 0; nothing to hash");
  }
  if (n_tokens < block_size) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "partial block of %zu tokens (block size %u) has no hash; only whole "
                         "blocks are named",
                         n_tokens, (unsigned)block_size);
  }
  if (n_tokens > block_size) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%zu tokens are more than one block of %u; hash them block by block",
                         n_tokens, (unsigned)block_size);
  }
  if (token_ids == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: token_ids is NULL", __func__);
  }

  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  /* A leading tag keeps "no parent" apart from every real parent value. */
  uint8_t head[17];
  size_t head_len = 1;
  head[0] = parent != NULL ? 1 : 0;
  if (parent != NULL) {
    put_u64_be(head + 1, parent->high);
    put_u64_be(head + 9, parent->low);
    head_len = sizeof head;
  }
  XXH3_128bits_update(&state, head, head_len);

  uint8_t chunk[KVS_HASH_CHUNK * 4];
  size_t done = 0;
  while (done < n_tokens) {
    size_t take = n_tokens - done < KVS_HASH_CHUNK ? n_tokens - done : KVS_HASH_CHUNK;
    for (size_t i = 0; i < take; i++) {
      uint32_t t = token_ids[done + i];
      chunk[4 * i + 0] = (uint8_t)t;
      chunk[4 * i + 1] = (uint8_t)(t >> 8);
      chunk[4 * i + 2] = (uint8_t)(t >> 16);
      chunk[4 * i + 3] = (uint8_t)(t >> 24);
    }
    XXH3_128bits_update(&state, chunk, take * 4);
    done += take;
  }
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  out->high = h.high64;
  out->low = h.low64;
  return KVS_OK;
}

kvs_status kvs_block_hash_sequence(const uint32_t *token_ids, size_t n_tokens, uint32_t block_size,
                                   kvs_block_hash *out, size_t out_cap, size_t *n_out,
                                   kvs_error *err) {
  if (block_size == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "block size is 0; nothing to hash");
  }
  if (n_tokens % block_size != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%zu tokens end in a partial block of %zu (block size %u); a partial "
                         "tail has no hash, pass the first %zu tokens",
                         n_tokens, n_tokens % block_size, (unsigned)block_size,
                         n_tokens - n_tokens % block_size);
  }
  size_t n_blocks = n_tokens / block_size;
  if (n_blocks > out_cap) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%zu blocks do not fit in an output of %zu hashes", n_blocks, out_cap);
  }
  if (token_ids == NULL && n_blocks > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: token_ids is NULL", __func__);
  }
  if (out == NULL && n_blocks > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  for (size_t b = 0; b < n_blocks; b++) {
    /* Cannot fail: every block is whole and every pointer checked. */
    kvs_status st =
        kvs_block_hash_chain(b == 0 ? NULL : &out[b - 1], token_ids + b * (size_t)block_size,
                             block_size, block_size, &out[b], err);
    if (st != KVS_OK) return st;
  }
  if (n_out != NULL) *n_out = n_blocks;
  return KVS_OK;
}

bool kvs_block_hash_equal(const kvs_block_hash *a, const kvs_block_hash *b) {
  /* A missing hash names no block: it equals nothing, not even another. */
  if (a == NULL || b == NULL) return false;
  return a->high == b->high && a->low == b->low;
}

char *kvs_block_hash_hex(const kvs_block_hash *hash, char *out) {
  static const char digits[] = "0123456789abcdef";
  if (out == NULL) return NULL;
  if (hash == NULL) {
    out[0] = '\0';
    return out;
  }
  for (int i = 0; i < 16; i++) {
    out[i] = digits[(hash->high >> (60 - 4 * i)) & 0xf];
    out[16 + i] = digits[(hash->low >> (60 - 4 * i)) & 0xf];
  }
  out[KVS_BLOCK_HASH_HEX_LEN] = '\0';
  return out;
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool kvs_hex_decode(const char *text, uint8_t *out, size_t cap, size_t *len) {
  if (text == NULL || (out == NULL && cap > 0) || len == NULL) return false;
  size_t n = strlen(text);
  if (n % 2 != 0 || n / 2 > cap) return false;
  for (size_t i = 0; i < n; i++) {
    if (hex_value(text[i]) < 0) return false;
  }
  for (size_t i = 0; i < n / 2; i++) {
    out[i] = (uint8_t)(hex_value(text[2 * i]) << 4 | hex_value(text[2 * i + 1]));
  }
  *len = n / 2;
  return true;
}

kvs_status kvs_block_hash_parse(const char *hex, kvs_block_hash *out, kvs_error *err) {
  if (hex == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: hex is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  uint64_t half[2] = {0, 0};
  for (int i = 0; i < KVS_BLOCK_HASH_HEX_LEN; i++) {
    int v = hex[i] == '\0' ? -1 : hex_value(hex[i]);
    if (v < 0) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "block hash must be %d hex digits; character %d is not one",
                           KVS_BLOCK_HASH_HEX_LEN, i);
    }
    half[i / 16] = (half[i / 16] << 4) | (uint64_t)v;
  }
  if (hex[KVS_BLOCK_HASH_HEX_LEN] != '\0') {
    return kvs_error_set(err, KVS_ERR_PARSE, "block hash has more than %d hex digits",
                         KVS_BLOCK_HASH_HEX_LEN);
  }
  out->high = half[0];
  out->low = half[1];
  return KVS_OK;
}

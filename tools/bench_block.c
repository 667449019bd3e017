#include "tools/bench_block.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/block_codec.h"
#include "core/block_layout.h"
#include "core/block_signature.h"
#include "core/block_signed.h"

/* DeepSeek-V4's KV for one block: one latent "head" 512 wide per layer. */
#define DSV4_LAYERS 61
#define DSV4_KV_HEADS 1
#define DSV4_HEAD_DIM 512
#define DSV4_TOKENS 128
#define BATCHES 7

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, by_value);
  return v[n / 2];
}

/* Keeps the compiler from dropping a loop whose results are unused. */
static volatile uint64_t sink;

void kvs_bench_block(json_t *results, int quick) {
  const char *failure = NULL;
  kvs_error err;
  kvs_error_clear(&err);
  const uint64_t elems = (uint64_t)DSV4_TOKENS * DSV4_KV_HEADS * DSV4_HEAD_DIM;
  const size_t es = kvs_dtype_size(KVS_DTYPE_BF16);
  uint16_t *data = malloc((size_t)(2 * DSV4_LAYERS * elems) * es);
  kvs_block_layer layers[DSV4_LAYERS];
  kvs_block_layer views[DSV4_LAYERS];
  kvs_block_t block = NULL;
  uint8_t *buf = NULL;
  size_t size = 0;
  if (data == NULL) {
    json_object_set_new(results, "block_error", json_string("out of memory"));
    return;
  }
  uint64_t x = 0x2545f4914f6cdd1dull;
  for (uint64_t i = 0; i < 2 * DSV4_LAYERS * elems; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data[i] = (uint16_t)(0x3c00u + (x & 0x3ffu)); /* finite bf16 values */
  }
  for (int l = 0; l < DSV4_LAYERS; l++) {
    layers[l] = (kvs_block_layer){
        .n_kv_heads = DSV4_KV_HEADS,
        .head_dim = DSV4_HEAD_DIM,
        .v_head_dim = DSV4_HEAD_DIM,
        .dtype = KVS_DTYPE_BF16,
        .positions = DSV4_TOKENS,
        .k = data + (size_t)(2 * l) * elems,
        .k_elems = elems,
        .v = data + (size_t)(2 * l + 1) * elems,
        .v_elems = elems,
    };
  }
  static const uint8_t weights[8] = {0xd5, 0x4, 0xf1, 0xa5, 0x4, 0x00, 0x61, 0x28};
  kvs_block_layout layout;
  kvs_block_signature reader;
  kvs_block_hash key = {0x0123456789abcdefull, 0xfedcba9876543210ull};
  if (kvs_block_layout_init(DSV4_TOKENS, DSV4_TOKENS, &layout, &err) != KVS_OK ||
      kvs_block_stamp("deepseek-ai/DeepSeek-V4", weights, sizeof weights, layout, layers,
                      DSV4_LAYERS, &block, NULL, &err) != KVS_OK ||
      kvs_block_signature_expected("deepseek-ai/DeepSeek-V4", weights, sizeof weights, layout,
                                   DSV4_LAYERS, DSV4_KV_HEADS, DSV4_HEAD_DIM, KVS_DTYPE_BF16,
                                   DSV4_TOKENS, &reader, &err) != KVS_OK) {
    failure = err.message;
    goto done;
  }
  free(data);
  data = NULL;
  size = kvs_block_encoded_size_of(&key, block);
  /* 64-byte alignment, like any buffer a real store would reuse. */
  buf = aligned_alloc(64, (size + 63) / 64 * 64);
  if (size == 0 || buf == NULL) {
    failure = "cannot size or allocate the encode buffer";
    goto done;
  }

  const double batch_seconds = quick ? 0.02 : 0.25;
  double encode_gbps[BATCHES], decode_gbps[BATCHES];
  const int batches = quick ? 3 : BATCHES;

  /* Warm up (page faults, caches), then time batches of encodes. */
  if (kvs_block_encode(&key, block, buf, size, NULL, &err) != KVS_OK) {
    failure = err.message;
    goto done;
  }
  for (int b = 0; b < batches; b++) {
    int n = 0;
    double start = now_seconds(), elapsed = 0;
    do {
      if (kvs_block_encode(&key, block, buf, size, NULL, &err) != KVS_OK) {
        failure = err.message;
        goto done;
      }
      n++;
      elapsed = now_seconds() - start;
    } while (elapsed < batch_seconds);
    sink += buf[size - 1];
    encode_gbps[b] = (double)size * n / elapsed / 1e9;
  }

  for (int b = 0; b < batches; b++) {
    int n = 0;
    double start = now_seconds(), elapsed = 0;
    do {
      kvs_block_view view;
      kvs_block_signature actual;
      if (kvs_block_decode_view(buf, size, &view, views, DSV4_LAYERS, &err) != KVS_OK ||
          kvs_block_verify_parts(&view.signature, views, view.n_layers, &reader, &actual, NULL,
                                 &err) != KVS_OK) {
        failure = err.message;
        goto done;
      }
      sink += actual.tokens;
      n++;
      elapsed = now_seconds() - start;
    } while (elapsed < batch_seconds);
    decode_gbps[b] = (double)size * n / elapsed / 1e9;
  }
  json_object_set_new(results, "block_encoded_bytes", json_integer((json_int_t)size));
  json_object_set_new(results, "block_encode_gbps", json_real(median(encode_gbps, batches)));
  json_object_set_new(results, "block_decode_verify_gbps", json_real(median(decode_gbps, batches)));

done:
  if (failure != NULL) json_object_set_new(results, "block_error", json_string(failure));
  free(buf);
  free(data);
  kvs_block_destroy(block);
}

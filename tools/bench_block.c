#include "tools/bench_block.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blocks/block_codec.h"
#include "blocks/block_layout.h"
#include "blocks/block_signature.h"
#include "blocks/block_signed.h"
#include "blocks/page_codec.h"
#include "tools/bench_time.h"

/* DeepSeek-V4's KV for one block: one latent "head" 512 wide per layer. */
#define DSV4_LAYERS 61
#define DSV4_KV_HEADS 1
#define DSV4_HEAD_DIM 512
#define DSV4_TOKENS 128
#define BATCHES 7

/* Keeps the compiler from dropping a loop whose results are unused. */
static volatile uint64_t sink;

/* Every layer's K and V: finite bf16 values from a fixed xorshift stream,
 * so every run encodes the same bytes. */
static void fill_kv(uint16_t *data, uint64_t n) {
  uint64_t x = 0x2545f4914f6cdd1dull;
  for (uint64_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data[i] = (uint16_t)(0x3c00u + (x & 0x3ffu)); /* finite bf16 values */
  }
}

/* Layer l's K and V as the codec takes them: views into data, K then V. */
static void point_layers(kvs_block_layer *layers, uint16_t *data, uint64_t elems) {
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
}

/* The block signed from the layers, and the signature a reader of such a
 * block expects. */
static bool make_block(const kvs_block_layer *layers, kvs_block_t *block,
                       kvs_block_signature *reader, kvs_error *err) {
  static const uint8_t weights[8] = {0xd5, 0x4, 0xf1, 0xa5, 0x4, 0x00, 0x61, 0x28};
  kvs_block_layout layout;
  return kvs_block_layout_init(DSV4_TOKENS, DSV4_TOKENS, &layout, err) == KVS_OK &&
         kvs_block_stamp("deepseek-ai/DeepSeek-V4", weights, sizeof weights, layout, layers,
                         DSV4_LAYERS, block, NULL, err) == KVS_OK &&
         kvs_block_signature_expected("deepseek-ai/DeepSeek-V4", weights, sizeof weights, layout,
                                      DSV4_LAYERS, DSV4_KV_HEADS, DSV4_HEAD_DIM, KVS_DTYPE_BF16,
                                      DSV4_TOKENS, reader, err) == KVS_OK;
}

/* One warm-up encode (page faults, caches), then `batches` timed batches
 * of encodes, each at least batch_seconds long: GB/s of each in gbps. */
static bool time_encode(const kvs_block_hash *key, kvs_block_t block, uint8_t *buf, size_t size,
                        int batches, double batch_seconds, double *gbps, kvs_error *err) {
  if (kvs_block_encode(key, block, buf, size, NULL, err) != KVS_OK) return false;
  for (int b = 0; b < batches; b++) {
    int n = 0;
    double start = kvs_bench_seconds(), elapsed = 0;
    do {
      if (kvs_block_encode(key, block, buf, size, NULL, err) != KVS_OK) return false;
      n++;
      elapsed = kvs_bench_seconds() - start;
    } while (elapsed < batch_seconds);
    sink += buf[size - 1];
    gbps[b] = (double)size * n / elapsed / 1e9;
  }
  return true;
}

/* Timed batches of zero-copy decodes, each verified in full against the
 * reader's signature: GB/s of each in gbps. */
static bool time_decode(const uint8_t *buf, size_t size, const kvs_block_signature *reader,
                        int batches, double batch_seconds, double *gbps, kvs_error *err) {
  kvs_block_layer views[DSV4_LAYERS];
  for (int b = 0; b < batches; b++) {
    int n = 0;
    double start = kvs_bench_seconds(), elapsed = 0;
    do {
      kvs_block_view view;
      kvs_block_signature actual;
      if (kvs_block_decode_view(buf, size, &view, views, DSV4_LAYERS, err) != KVS_OK ||
          kvs_block_verify_parts(&view.signature, views, view.n_layers, reader, &actual, NULL,
                                 err) != KVS_OK) {
        return false;
      }
      sink += actual.tokens;
      n++;
      elapsed = kvs_bench_seconds() - start;
    } while (elapsed < batch_seconds);
    gbps[b] = (double)size * n / elapsed / 1e9;
  }
  return true;
}

/* Both directions timed on one encode buffer; the medians go into results.
 * Returns NULL, or what failed (err's message when the codec refused). */
static const char *time_codec(json_t *results, const kvs_block_hash *key, kvs_block_t block,
                              const kvs_block_signature *reader, int quick, kvs_error *err) {
  size_t size = kvs_block_encoded_size_of(key, block);
  /* 64-byte alignment, like any buffer a real store would reuse. */
  uint8_t *buf = aligned_alloc(64, (size + 63) / 64 * 64);
  if (size == 0 || buf == NULL) {
    free(buf);
    return "cannot size or allocate the encode buffer";
  }
  const double batch_seconds = quick ? 0.02 : 0.25;
  const int batches = quick ? 3 : BATCHES;
  double encode_gbps[BATCHES], decode_gbps[BATCHES];
  const char *failure = NULL;
  if (!time_encode(key, block, buf, size, batches, batch_seconds, encode_gbps, err) ||
      !time_decode(buf, size, reader, batches, batch_seconds, decode_gbps, err)) {
    failure = err->message;
  } else {
    json_object_set_new(results, "block_encoded_bytes", json_integer((json_int_t)size));
    json_object_set_new(results, "block_encode_gbps",
                        json_real(kvs_bench_median(encode_gbps, batches)));
    json_object_set_new(results, "block_decode_verify_gbps",
                        json_real(kvs_bench_median(decode_gbps, batches)));
  }
  free(buf);
  return failure;
}

/* ---- version 3: one DSV4-Flash page block ----
 *
 * A 256-token page of DSV4-Flash on a rank holding every layer, fp8 rows
 * with their scales inside: 21 ratio-4 layers of 64 compressed rows (584
 * bytes) and 64 indexer rows (132), 20 ratio-128 layers of 2 compressed
 * rows, and the tail states of the ratio-4 layers (2 ring-width f32 rows
 * each: 8192 bytes in state_4, 2048 in index_state): about 1.4 MB. */
#define PAGE_TOKENS 256
#define PAGE_SECTIONS 5

static void page_sections(kvs_page_section *s, uint8_t *data) {
  static const uint32_t shape[PAGE_SECTIONS][5] = {
      {KVS_PAGE_TIER_COMPRESSED_4, KVS_PAGE_FP8_SCALED, 21, PAGE_TOKENS / 4, 584},
      {KVS_PAGE_TIER_INDEXER, KVS_PAGE_FP8_SCALED, 21, PAGE_TOKENS / 4, 132},
      {KVS_PAGE_TIER_COMPRESSED_128, KVS_PAGE_FP8_SCALED, 20, PAGE_TOKENS / 128, 584},
      {KVS_PAGE_TIER_TAIL_STATE, KVS_PAGE_F32, 21, 2, 8192},
      {KVS_PAGE_TIER_INDEX_TAIL_STATE, KVS_PAGE_F32, 21, 2, 2048},
  };
  for (int i = 0; i < PAGE_SECTIONS; i++) {
    const uint32_t *v = shape[i];
    s[i] = (kvs_page_section){.shape = {v[0], v[1], v[2], v[3], v[4]},
                              .bytes = data,
                              .n_bytes = (uint64_t)v[2] * v[3] * v[4]};
    data += s[i].n_bytes;
  }
}

static uint64_t page_bytes(const kvs_page_section *s) {
  uint64_t n = 0;
  for (int i = 0; i < PAGE_SECTIONS; i++) n += s[i].n_bytes;
  return n;
}

/* One way of handling a page, timed: 0 memcpy of its rows, 1 their
 * position digests, 2 encode, 3 decode + verify (checksum, measure,
 * digests, the reader). */
typedef struct page_rig {
  kvs_page_section sections[PAGE_SECTIONS];
  kvs_page_block_t block;
  kvs_page_signature reader;
  kvs_block_hash key;
  uint8_t *copy; /* memcpy's destination, the rows' size */
  uint8_t *buf;  /* the encoding */
  size_t size;
} page_rig;

static bool page_way(const page_rig *r, int way, kvs_error *err) {
  const kvs_page_identity *id = &r->reader.id;
  switch (way) {
    case 0: {
      size_t at = 0;
      for (int i = 0; i < PAGE_SECTIONS; i++) {
        memcpy(r->copy + at, r->sections[i].bytes, (size_t)r->sections[i].n_bytes);
        at += (size_t)r->sections[i].n_bytes;
      }
      sink += r->copy[at - 1];
      return true;
    }
    case 1:
      for (int i = 0; i < PAGE_SECTIONS; i++) {
        sink +=
            kvs_page_section_digest(&id->chain, id->depth, (uint32_t)i, r->sections[i].shape.tier,
                                    r->sections[i].bytes, (size_t)r->sections[i].n_bytes);
      }
      return true;
    case 2:
      return kvs_page_block_encode(&r->key, r->block, r->buf, r->size, NULL, err) == KVS_OK;
    default: {
      kvs_page_block_view view;
      kvs_page_section views[PAGE_SECTIONS];
      kvs_page_signature actual;
      if (kvs_page_block_decode_view(r->buf, r->size, &view, views, PAGE_SECTIONS, err) != KVS_OK ||
          kvs_page_verify_parts(&view.signature, views, view.n_sections, &r->reader, &actual, NULL,
                                err) != KVS_OK) {
        return false;
      }
      sink += actual.n_sections;
      return true;
    }
  }
}

/* The four ways interleaved batch by batch (so that each sees the same
 * machine), at least batch_seconds a batch; GB/s of the page's rows. */
static bool time_page(const page_rig *r, int batches, double batch_seconds, double gbps[4][BATCHES],
                      kvs_error *err) {
  const double rows = (double)page_bytes(r->sections);
  for (int b = 0; b < batches; b++) {
    for (int way = 0; way < 4; way++) {
      if (!page_way(r, way, err)) return false; /* warm */
      int n = 0;
      double start = kvs_bench_seconds(), elapsed = 0;
      do {
        if (!page_way(r, way, err)) return false;
        n++;
        elapsed = kvs_bench_seconds() - start;
      } while (elapsed < batch_seconds);
      gbps[way][b] = rows * n / elapsed / 1e9;
    }
  }
  return true;
}

static const char *bench_page(json_t *results, int quick, kvs_error *err) {
  page_rig r = {.key = {0x0123456789abcdefull, 0xfedcba9876543210ull}};
  uint8_t *data = malloc(4u << 20);
  if (data == NULL) return "out of memory";
  page_sections(r.sections, data);
  const uint64_t rows = page_bytes(r.sections);
  r.copy = malloc((size_t)rows);
  const char *failure = NULL;
  kvs_page_identity id;
  kvs_page_section_shape shapes[PAGE_SECTIONS];
  for (int i = 0; i < PAGE_SECTIONS; i++) shapes[i] = r.sections[i].shape;
  if (r.copy == NULL) {
    failure = "out of memory";
  } else {
    fill_kv((uint16_t *)data, rows / 2);
    if (kvs_page_identity_init("deepseek-ai/DeepSeek-V4-Flash", NULL, 0, PAGE_TOKENS, 0x44534634ull,
                               0, 43, &r.key, 12, &id, err) != KVS_OK ||
        kvs_page_block_stamp(&id, r.sections, PAGE_SECTIONS, &r.block, NULL, err) != KVS_OK ||
        kvs_page_signature_expected(&id, shapes, PAGE_SECTIONS, &r.reader, err) != KVS_OK) {
      failure = err->message;
    }
  }
  if (failure == NULL) {
    r.size = kvs_page_block_encoded_size_of(&r.key, r.block);
    r.buf = aligned_alloc(64, (r.size + 63) / 64 * 64);
    if (r.buf == NULL) failure = "out of memory";
  }
  /* Time the block's own (64-byte aligned) copy of the rows. */
  if (failure == NULL) {
    memcpy(r.sections, kvs_page_block_sections(r.block, NULL), sizeof r.sections);
  }
  double gbps[4][BATCHES];
  const int batches = quick ? 3 : BATCHES;
  if (failure == NULL && !time_page(&r, batches, quick ? 0.02 : 0.25, gbps, err)) {
    failure = err->message;
  }
  if (failure == NULL) {
    static const char *const keys[4] = {"page_memcpy_gbps", "page_digest_gbps", "page_encode_gbps",
                                        "page_decode_verify_gbps"};
    double med[4];
    for (int way = 0; way < 4; way++) {
      med[way] = kvs_bench_median(gbps[way], batches);
      json_object_set_new(results, keys[way], json_real(med[way]));
    }
    json_object_set_new(results, "page_encoded_bytes", json_integer((json_int_t)r.size));
    json_object_set_new(results, "page_row_bytes", json_integer((json_int_t)rows));
    /* Time to digest a page's rows over time to memcpy them. */
    json_object_set_new(results, "page_digest_over_memcpy", json_real(med[0] / med[1]));
  }
  free(r.buf);
  free(r.copy);
  free(data);
  kvs_page_block_destroy(r.block);
  return failure;
}

void kvs_bench_block(json_t *results, int quick) {
  const uint64_t elems = (uint64_t)DSV4_TOKENS * DSV4_KV_HEADS * DSV4_HEAD_DIM;
  const size_t es = kvs_dtype_size(KVS_DTYPE_BF16);
  uint16_t *data = malloc((size_t)(2 * DSV4_LAYERS * elems) * es);
  if (data == NULL) {
    json_object_set_new(results, "block_error", json_string("out of memory"));
    return;
  }
  kvs_error err;
  kvs_error_clear(&err);
  kvs_block_layer layers[DSV4_LAYERS];
  kvs_block_t block = NULL;
  kvs_block_signature reader;
  kvs_block_hash key = {0x0123456789abcdefull, 0xfedcba9876543210ull};
  fill_kv(data, 2 * DSV4_LAYERS * elems);
  point_layers(layers, data, elems);
  const char *failure = NULL;
  if (!make_block(layers, &block, &reader, &err)) {
    failure = err.message;
  } else {
    free(data); /* the signed block holds its own copy */
    data = NULL;
    failure = time_codec(results, &key, block, &reader, quick, &err);
  }
  if (failure == NULL) failure = bench_page(results, quick, &err);
  if (failure != NULL) json_object_set_new(results, "block_error", json_string(failure));
  free(data);
  kvs_block_destroy(block);
}

#include "blocks/block_signed.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* What both kinds of block own. The layer views point into storage. */
struct kvs_block_body {
  bool marked;
  kvs_block_signature signature;
  size_t n_layers;
  kvs_block_layer *layers;
  void *storage;
};

struct kvs_block {
  struct kvs_block_body body;
};

struct kvs_unverified_block {
  struct kvs_block_body body;
};

/* Sections start on 64-byte boundaries inside the copy, so a layer's K
 * and V never share a cache line. */
#define KVS_SECTION_ALIGN 64u

static bool add_section(uint64_t *total, uint64_t elems, size_t elem_size) {
  uint64_t bytes;
  if (__builtin_mul_overflow(elems, (uint64_t)elem_size, &bytes)) return false;
  uint64_t padded;
  if (__builtin_add_overflow(bytes, (uint64_t)(KVS_SECTION_ALIGN - 1), &padded)) return false;
  padded -= padded % KVS_SECTION_ALIGN;
  return !__builtin_add_overflow(*total, padded, total);
}

static kvs_status check_parts(const kvs_block_signature *recorded, const kvs_block_layer *layers,
                              size_t n_layers, bool need_data, kvs_error *err) {
  kvs_status st = kvs_block_layers_check(layers, n_layers, err);
  if (st != KVS_OK) return st;
  for (size_t i = 0; need_data && i < n_layers; i++) {
    const kvs_block_layer *l = &layers[i];
    if ((l->k_elems > 0 && l->k == NULL) || (l->v_elems > 0 && l->v == NULL)) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "layer %zu has a NULL K or V buffer", i);
    }
  }
  if (recorded != NULL && (memchr(recorded->model, '\0', sizeof recorded->model) == NULL ||
                           recorded->weights_len > KVS_BLOCK_WEIGHTS_MAX)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "recorded signature has an unterminated model or an over-long "
                         "weights fingerprint");
  }
  return KVS_OK;
}

/* Copies layers and their buffers into one fresh body. */
static kvs_status copy_body(const kvs_block_signature *recorded, const kvs_block_layer *layers,
                            size_t n_layers, struct kvs_block_body *body, kvs_error *err) {
  kvs_status st = check_parts(recorded, layers, n_layers, true, err);
  if (st != KVS_OK) return st;
  uint64_t total = 0;
  for (size_t i = 0; i < n_layers; i++) {
    size_t es = kvs_dtype_size(layers[i].dtype);
    if (!add_section(&total, layers[i].k_elems, es) ||
        !add_section(&total, layers[i].v_elems, es) || total > SIZE_MAX / 2) {
      return kvs_error_set(err, KVS_ERR_OVERFLOW, "payload size overflows at layer %zu", i);
    }
  }
  kvs_block_layer *copy = malloc((n_layers > 0 ? n_layers : 1) * sizeof *copy);
  void *storage = aligned_alloc(KVS_SECTION_ALIGN, total > 0 ? (size_t)total : KVS_SECTION_ALIGN);
  if (copy == NULL || storage == NULL) {
    free(copy);
    free(storage);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %llu-byte block payload",
                         (unsigned long long)total);
  }
  unsigned char *at = storage;
  for (size_t i = 0; i < n_layers; i++) {
    size_t es = kvs_dtype_size(layers[i].dtype);
    copy[i] = layers[i];
    size_t kb = (size_t)layers[i].k_elems * es;
    size_t vb = (size_t)layers[i].v_elems * es;
    if (kb > 0) memcpy(at, layers[i].k, kb);
    copy[i].k = at;
    at += (kb + KVS_SECTION_ALIGN - 1) / KVS_SECTION_ALIGN * KVS_SECTION_ALIGN;
    if (vb > 0) memcpy(at, layers[i].v, vb);
    copy[i].v = at;
    at += (vb + KVS_SECTION_ALIGN - 1) / KVS_SECTION_ALIGN * KVS_SECTION_ALIGN;
  }
  memset(body, 0, sizeof *body);
  body->marked = recorded != NULL;
  if (recorded != NULL) body->signature = *recorded;
  body->n_layers = n_layers;
  body->layers = copy;
  body->storage = storage;
  return KVS_OK;
}

static void free_body(struct kvs_block_body *body) {
  free(body->layers);
  free(body->storage);
}

kvs_status kvs_block_stamp(const char *model, const uint8_t *weights, size_t weights_len,
                           kvs_block_layout layout, const kvs_block_layer *layers, size_t n_layers,
                           kvs_block_t *out, kvs_signature_error *why, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_block_signature sig;
  kvs_status st = kvs_block_signature_measure(model, weights, weights_len, layout, layers, n_layers,
                                              &sig, why, err);
  if (st != KVS_OK) return st;
  struct kvs_block *block = malloc(sizeof *block);
  if (block == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a block");
  st = copy_body(&sig, layers, n_layers, &block->body, err);
  if (st != KVS_OK) {
    free(block);
    return st;
  }
  *out = block;
  return KVS_OK;
}

void kvs_block_destroy(kvs_block_t block) {
  if (block == NULL) return;
  free_body(&block->body);
  free(block);
}

/* The accessors read NULL, a zero layout or 0 (and no layers) for NULL. */
const kvs_block_signature *kvs_block_signature_of(const struct kvs_block *block) {
  return block != NULL ? &block->body.signature : NULL;
}

kvs_block_layout kvs_block_layout_of(const struct kvs_block *block) {
  kvs_block_layout none = {0, KVS_BLOCK_NO_WINDOW};
  return block != NULL ? block->body.signature.layout : none;
}

uint64_t kvs_block_tokens(const struct kvs_block *block) {
  return block != NULL ? block->body.signature.tokens : 0;
}

const kvs_block_layer *kvs_block_layers(const struct kvs_block *block, size_t *n_layers) {
  if (n_layers != NULL) *n_layers = block != NULL ? block->body.n_layers : 0;
  return block != NULL ? block->body.layers : NULL;
}

kvs_status kvs_unverified_block_create(const kvs_block_signature *recorded,
                                       const kvs_block_layer *layers, size_t n_layers,
                                       kvs_unverified_block_t *out, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  struct kvs_unverified_block *block = malloc(sizeof *block);
  if (block == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a block");
  kvs_status st = copy_body(recorded, layers, n_layers, &block->body, err);
  if (st != KVS_OK) {
    free(block);
    return st;
  }
  *out = block;
  return KVS_OK;
}

kvs_status kvs_unverified_block_adopt(void *storage, const kvs_block_signature *recorded,
                                      const kvs_block_layer *layers, size_t n_layers,
                                      kvs_unverified_block_t *out, kvs_error *err) {
  if (storage == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: storage is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status st = check_parts(recorded, layers, n_layers, true, err);
  if (st != KVS_OK) return st;
  struct kvs_unverified_block *block = malloc(sizeof *block);
  kvs_block_layer *copy = malloc((n_layers > 0 ? n_layers : 1) * sizeof *copy);
  if (block == NULL || copy == NULL) {
    free(block);
    free(copy);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %zu-layer block", n_layers);
  }
  if (n_layers > 0) memcpy(copy, layers, n_layers * sizeof *copy);
  memset(&block->body, 0, sizeof block->body);
  block->body.marked = recorded != NULL;
  if (recorded != NULL) block->body.signature = *recorded;
  block->body.n_layers = n_layers;
  block->body.layers = copy;
  block->body.storage = storage;
  *out = block;
  return KVS_OK;
}

void kvs_unverified_block_destroy(kvs_unverified_block_t block) {
  if (block == NULL) return;
  free_body(&block->body);
  free(block);
}

const kvs_block_signature *kvs_unverified_block_signature(
    const struct kvs_unverified_block *block) {
  return block != NULL && block->body.marked ? &block->body.signature : NULL;
}

const kvs_block_layer *kvs_unverified_block_layers(const struct kvs_unverified_block *block,
                                                   size_t *n_layers) {
  if (n_layers != NULL) *n_layers = block != NULL ? block->body.n_layers : 0;
  return block != NULL ? block->body.layers : NULL;
}

kvs_status kvs_unverified_block_verify(kvs_unverified_block_t *block,
                                       const kvs_block_signature *expected, kvs_block_t *out,
                                       kvs_signature_error *why, kvs_error *err) {
  if (block == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: block is NULL", __func__);
  }
  if (*block == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: *block is NULL", __func__);
  }
  if (expected == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: expected is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  struct kvs_block_body *body = &(*block)->body;
  kvs_block_signature actual;
  kvs_status st = kvs_block_verify_parts(body->marked ? &body->signature : NULL, body->layers,
                                         body->n_layers, expected, &actual, why, err);
  if (st != KVS_OK) return st;
  struct kvs_block *verified = malloc(sizeof *verified);
  if (verified == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a block");
  verified->body = *body;
  verified->body.marked = true;
  verified->body.signature = actual;
  free(*block); /* its payload now belongs to `verified` */
  *block = NULL;
  *out = verified;
  return KVS_OK;
}

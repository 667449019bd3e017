#include "blocks/block_signature.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const uint32_t kvs_block_readable_versions[] = {2, 3};
const size_t kvs_block_readable_versions_count =
    sizeof kvs_block_readable_versions / sizeof kvs_block_readable_versions[0];

bool kvs_block_format_readable(uint32_t version) {
  for (size_t i = 0; i < kvs_block_readable_versions_count; i++) {
    if (kvs_block_readable_versions[i] == version) return true;
  }
  return false;
}

const char *kvs_dtype_name(kvs_dtype dtype) {
  switch (dtype) {
    case KVS_DTYPE_F32:
      return "f32";
    case KVS_DTYPE_BF16:
      return "bf16";
  }
  return "unknown";
}

size_t kvs_dtype_size(kvs_dtype dtype) {
  switch (dtype) {
    case KVS_DTYPE_F32:
      return 4;
    case KVS_DTYPE_BF16:
      return 2;
  }
  return 0;
}

bool kvs_dtype_parse(const char *text, kvs_dtype *out) {
  if (text == NULL || out == NULL) return false;
  if (strcmp(text, "f32") == 0) {
    *out = KVS_DTYPE_F32;
    return true;
  }
  if (strcmp(text, "bf16") == 0) {
    *out = KVS_DTYPE_BF16;
    return true;
  }
  return false;
}

bool kvs_block_model_valid(const char *model, size_t len) {
  if (model == NULL || len > KVS_BLOCK_MODEL_MAX) return false;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)model[i];
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

const char *kvs_block_weights_describe(const uint8_t *weights, size_t len, char *buf, size_t cap) {
  static const char digits[] = "0123456789abcdef";
  if (buf == NULL) return "";
  if (cap == 0) return buf;
  if (len == 0 || weights == NULL) {
    snprintf(buf, cap, "none");
    return buf;
  }
  size_t at = 0;
  for (size_t i = 0; i < len && at + 2 < cap; i++) {
    buf[at++] = digits[weights[i] >> 4];
    buf[at++] = digits[weights[i] & 0xf];
  }
  buf[at] = '\0';
  return buf;
}

const char *kvs_signature_error_kind_name(kvs_signature_error_kind kind) {
  switch (kind) {
    case KVS_SIG_NONE:
      return "none";
    case KVS_SIG_UNMARKED:
      return "unmarked";
    case KVS_SIG_EMPTY_PAYLOAD:
      return "empty payload";
    case KVS_SIG_DEGENERATE_LAYER:
      return "degenerate layer";
    case KVS_SIG_SPLIT_KV_HEAD_WIDTH:
      return "split kv head width";
    case KVS_SIG_RAGGED_PAYLOAD:
      return "ragged payload";
    case KVS_SIG_PAYLOAD_MISMATCH:
      return "payload mismatch";
    case KVS_SIG_INCOMPATIBLE:
      return "incompatible";
    case KVS_SIG_BLOCK_SIZE_MISMATCH:
      return "block size mismatch";
    case KVS_SIG_BAD_LAYOUT:
      return "bad layout";
    case KVS_SIG_UNSUPPORTED_FORMAT:
      return "unsupported format";
    case KVS_SIG_OTHER_FORMAT:
      return "other format";
  }
  return "unknown";
}

/* What a readable version holds, for OTHER_FORMAT's message. */
static const char *format_kind(uint32_t version) {
  return version == 3 ? "DSV4 page sections" : version == 2 ? "K/V layers" : "unknown";
}

/* A page block's refusal about one section: "section 2 (indexer):
 * row_bytes 132 in the block, 256 in the reader". */
static size_t section_error_format(const kvs_signature_error *why, char *buf, size_t cap) {
  char where[96];
  snprintf(where, sizeof where, "section %u (%s)", (unsigned)why->section,
           why->section_name != NULL ? why->section_name : "unknown");
  const char *field = why->field != NULL ? why->field : "";
  int n;
  switch (why->kind) {
    case KVS_SIG_INCOMPATIBLE:
      n = snprintf(buf, cap,
                   "KV page block is incompatible: %s: %s %s in the block, %s in the reader", where,
                   field, why->found, why->expected);
      break;
    case KVS_SIG_PAYLOAD_MISMATCH:
      n = snprintf(buf, cap,
                   "KV page block's signature disagrees with its payload: %s: %s %s recorded, %s "
                   "measured",
                   where, field, why->recorded, why->actual);
      break;
    default:
      n = snprintf(buf, cap, "KV page block payload refused (%s): %s: %s is %s, expected %s",
                   kvs_signature_error_kind_name(why->kind), where, field, why->found,
                   why->expected);
      break;
  }
  if (n < 0) {
    if (cap > 0) buf[0] = '\0';
    return 0;
  }
  return (size_t)n;
}

size_t kvs_signature_error_format(const kvs_signature_error *why, char *buf, size_t cap) {
  int n = 0;
  if (buf == NULL) cap = 0; /* snprintf then only measures */
  if (why == NULL) {
    if (cap > 0) buf[0] = '\0';
    return 0;
  }
  if (why->in_section) return section_error_format(why, buf, cap);
  switch (why->kind) {
    case KVS_SIG_NONE:
      n = snprintf(buf, cap, "KV block signature verified");
      break;
    case KVS_SIG_UNMARKED:
      n = snprintf(buf, cap,
                   "KV block is unmarked: it records no signature, and an unmarked block is "
                   "refused rather than trusted");
      break;
    case KVS_SIG_EMPTY_PAYLOAD:
      n = snprintf(buf, cap, "KV block payload has no layers; there is nothing to vouch for");
      break;
    case KVS_SIG_DEGENERATE_LAYER:
      n = snprintf(buf, cap,
                   "KV block layer %" PRIu64 " is degenerate: %" PRIu64 " kv heads x %" PRIu64
                   " head dim",
                   why->layer, why->n_kv_heads, why->head_dim);
      break;
    case KVS_SIG_SPLIT_KV_HEAD_WIDTH:
      n = snprintf(buf, cap,
                   "KV block layer %" PRIu64 " has V heads %" PRIu64 " wide but K heads %" PRIu64
                   " wide; one head_dim per block is all the format has room for",
                   why->layer, why->v_head_dim, why->head_dim);
      break;
    case KVS_SIG_RAGGED_PAYLOAD:
      n = snprintf(buf, cap,
                   "KV block payload disagrees with itself at layer %" PRIu64
                   ": %s is %s, expected %s",
                   why->layer, why->field, why->found, why->expected);
      break;
    case KVS_SIG_PAYLOAD_MISMATCH:
      n = snprintf(buf, cap, "KV block signature records %s=%s but its payload measures %s=%s",
                   why->field, why->recorded, why->field, why->actual);
      break;
    case KVS_SIG_INCOMPATIBLE:
      n = snprintf(buf, cap, "KV block is incompatible: %s is %s, this reader needs %s", why->field,
                   why->found, why->expected);
      break;
    case KVS_SIG_BLOCK_SIZE_MISMATCH:
      n = snprintf(buf, cap,
                   "KV block signature declares block size %" PRIu64
                   " but its payload holds %" PRIu64
                   " token positions; a stored block must hold exactly one full block",
                   why->block_size, why->tokens);
      break;
    case KVS_SIG_BAD_LAYOUT: {
      char problem[256];
      kvs_block_layout_describe_problem(why->layout, problem, sizeof problem);
      n = snprintf(buf, cap, "KV block layout is unusable: %s", problem);
      break;
    }
    case KVS_SIG_UNSUPPORTED_FORMAT: {
      char list[128];
      size_t at = 0;
      list[0] = '\0';
      for (size_t i = 0; i < why->n_readable && at < sizeof list; i++) {
        int w = snprintf(list + at, sizeof list - at, "%s%u", i > 0 ? ", " : "",
                         (unsigned)why->readable[i]);
        if (w < 0) break;
        at += (size_t)w;
      }
      n = snprintf(buf, cap,
                   "KV block format version %u cannot be read by this build (readable: [%s])",
                   (unsigned)why->format_found, list);
      break;
    }
    case KVS_SIG_OTHER_FORMAT:
      n = snprintf(buf, cap,
                   "KV block is format version %u (%s); this reader reads version %u (%s)",
                   (unsigned)why->format_found, format_kind(why->format_found),
                   (unsigned)why->format_wanted, format_kind(why->format_wanted));
      break;
  }
  if (n < 0) {
    if (cap > 0) buf[0] = '\0';
    return 0;
  }
  return (size_t)n;
}

/* Hands a refusal to the caller: the structured form into *why_out, its
 * message into err. */
kvs_status kvs_signature_refuse(const kvs_signature_error *why, kvs_signature_error *why_out,
                                kvs_error *err) {
  if (why == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: why is NULL", __func__);
  }
  if (err != NULL) {
    char message[KVS_ERROR_MESSAGE_MAX];
    kvs_signature_error_format(why, message, sizeof message);
    kvs_error_set(err, KVS_ERR_SIGNATURE, "%s", message);
  }
  if (why_out != NULL) *why_out = *why;
  return KVS_ERR_SIGNATURE;
}

static void start(kvs_signature_error *why, kvs_signature_error_kind kind) {
  memset(why, 0, sizeof *why);
  why->kind = kind;
}

static void ragged(kvs_signature_error *why, uint64_t layer, const char *field,
                   const char *expected, const char *found) {
  start(why, KVS_SIG_RAGGED_PAYLOAD);
  why->layer = layer;
  why->field = field;
  snprintf(why->expected, sizeof why->expected, "%s", expected);
  snprintf(why->found, sizeof why->found, "%s", found);
}

static void u64_text(uint64_t v, char *buf, size_t cap) { snprintf(buf, cap, "%" PRIu64, v); }

/* Checks one layer's buffers against its own claims and returns its
 * depth in *tokens. positions is a claim; the element counts are the
 * evidence. */
static bool measure_layer(uint64_t index, const kvs_block_layer *layer, uint64_t per_token,
                          uint64_t *tokens, kvs_signature_error *why) {
  char a[32], b[32];
  if (layer->v_head_dim != layer->head_dim) {
    start(why, KVS_SIG_SPLIT_KV_HEAD_WIDTH);
    why->layer = index;
    why->head_dim = layer->head_dim;
    why->v_head_dim = layer->v_head_dim;
    return false;
  }
  if (layer->k_elems % per_token != 0) {
    char multiple[48];
    snprintf(multiple, sizeof multiple, "a multiple of %" PRIu64, per_token);
    u64_text(layer->k_elems, b, sizeof b);
    ragged(why, index, "k length", multiple, b);
    return false;
  }
  if (layer->v_elems != layer->k_elems) {
    u64_text(layer->k_elems, a, sizeof a);
    u64_text(layer->v_elems, b, sizeof b);
    ragged(why, index, "v length", a, b);
    return false;
  }
  uint64_t rows = layer->k_elems / per_token;
  /* Rows and positions agree for everything this format can hold; a
   * store that keeps fewer rows than positions (a windowed layer after
   * eviction) would need the codec to carry both, and this is the check
   * that would have to learn it. */
  if (layer->positions != rows) {
    u64_text(rows, a, sizeof a);
    u64_text(layer->positions, b, sizeof b);
    ragged(why, index, "positions", a, b);
    return false;
  }
  *tokens = rows;
  return true;
}

/* The measurement proper, after the arguments were checked. model and
 * weights are copied as given: no payload can prove them. */
static bool measure(const char *model, const uint8_t *weights, size_t weights_len,
                    kvs_block_layout layout, const kvs_block_layer *layers, size_t n_layers,
                    kvs_block_signature *sig, kvs_signature_error *why) {
  if (kvs_block_layout_check(layout) != KVS_BLOCK_LAYOUT_OK) {
    start(why, KVS_SIG_BAD_LAYOUT);
    why->layout = layout;
    why->layout_problem = kvs_block_layout_check(layout);
    return false;
  }
  if (n_layers == 0) {
    start(why, KVS_SIG_EMPTY_PAYLOAD);
    return false;
  }
  const kvs_block_layer *first = &layers[0];
  if (first->n_kv_heads == 0 || first->head_dim == 0) {
    start(why, KVS_SIG_DEGENERATE_LAYER);
    why->layer = 0;
    why->n_kv_heads = first->n_kv_heads;
    why->head_dim = first->head_dim;
    return false;
  }
  uint64_t per_token = (uint64_t)first->n_kv_heads * first->head_dim;
  uint64_t tokens = 0;
  if (!measure_layer(0, first, per_token, &tokens, why)) return false;

  for (size_t i = 1; i < n_layers; i++) {
    const kvs_block_layer *layer = &layers[i];
    char a[48], b[48];
    if (layer->n_kv_heads != first->n_kv_heads || layer->head_dim != first->head_dim) {
      snprintf(a, sizeof a, "%ux%u", (unsigned)first->n_kv_heads, (unsigned)first->head_dim);
      snprintf(b, sizeof b, "%ux%u", (unsigned)layer->n_kv_heads, (unsigned)layer->head_dim);
      ragged(why, i, "layer shape", a, b);
      return false;
    }
    if (layer->dtype != first->dtype) {
      ragged(why, i, "dtype", kvs_dtype_name(first->dtype), kvs_dtype_name(layer->dtype));
      return false;
    }
    uint64_t layer_tokens = 0;
    if (!measure_layer(i, layer, per_token, &layer_tokens, why)) return false;
    if (layer_tokens != tokens) {
      u64_text(tokens, a, sizeof a);
      u64_text(layer_tokens, b, sizeof b);
      ragged(why, i, "token count", a, b);
      return false;
    }
  }

  /* Unlike the window, the block size is checkable: the depth of a stored
   * block equals its block size by construction. */
  if (tokens != layout.block_size) {
    start(why, KVS_SIG_BLOCK_SIZE_MISMATCH);
    why->block_size = layout.block_size;
    why->tokens = tokens;
    return false;
  }

  memset(sig, 0, sizeof *sig);
  sig->format_version = KVS_BLOCK_FORMAT_VERSION;
  memcpy(sig->model, model, strlen(model));
  if (weights_len > 0) memcpy(sig->weights, weights, weights_len);
  sig->weights_len = (uint32_t)weights_len;
  sig->n_layers = (uint32_t)n_layers;
  sig->n_kv_heads = first->n_kv_heads;
  sig->head_dim = first->head_dim;
  sig->dtype = first->dtype;
  sig->tokens = tokens;
  sig->layout = layout;
  return true;
}

kvs_status kvs_block_identity_check(const char *function, const char *model, const uint8_t *weights,
                                    size_t weights_len, kvs_error *err) {
  if (function == NULL) function = __func__;
  if (model == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: model is NULL", function);
  }
  size_t len = strlen(model);
  if (!kvs_block_model_valid(model, len)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "model identity of %zu bytes must be at most %d printable bytes", len,
                         KVS_BLOCK_MODEL_MAX);
  }
  if (weights_len > KVS_BLOCK_WEIGHTS_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "weights fingerprint of %zu bytes exceeds the %d-byte maximum",
                         weights_len, KVS_BLOCK_WEIGHTS_MAX);
  }
  if (weights_len > 0 && weights == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s: weights is NULL but weights_len is %zu", function, weights_len);
  }
  return KVS_OK;
}

kvs_status kvs_block_layers_check(const kvs_block_layer *layers, size_t n_layers, kvs_error *err) {
  if (n_layers > 0 && layers == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: layers is NULL but n_layers is %zu",
                         __func__, n_layers);
  }
  if (n_layers > UINT32_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%zu layers do not fit the format",
                         n_layers);
  }
  for (size_t i = 0; i < n_layers; i++) {
    if (kvs_dtype_size(layers[i].dtype) == 0) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "layer %zu has unknown dtype code %d", i,
                           (int)layers[i].dtype);
    }
  }
  return KVS_OK;
}

kvs_status kvs_block_signature_measure(const char *model, const uint8_t *weights,
                                       size_t weights_len, kvs_block_layout layout,
                                       const kvs_block_layer *layers, size_t n_layers,
                                       kvs_block_signature *out, kvs_signature_error *why,
                                       kvs_error *err) {
  kvs_status st = kvs_block_identity_check(__func__, model, weights, weights_len, err);
  if (st != KVS_OK) return st;
  st = kvs_block_layers_check(layers, n_layers, err);
  if (st != KVS_OK) return st;
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_signature_error local;
  kvs_block_signature sig;
  if (!measure(model, weights, weights_len, layout, layers, n_layers, &sig, &local)) {
    return kvs_signature_refuse(&local, why, err);
  }
  *out = sig;
  return KVS_OK;
}

kvs_status kvs_block_signature_expected(const char *model, const uint8_t *weights,
                                        size_t weights_len, kvs_block_layout layout,
                                        uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                                        kvs_dtype dtype, uint64_t tokens, kvs_block_signature *out,
                                        kvs_error *err) {
  kvs_status st = kvs_block_identity_check(__func__, model, weights, weights_len, err);
  if (st != KVS_OK) return st;
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (kvs_block_layout_check(layout) != KVS_BLOCK_LAYOUT_OK) {
    char why[256];
    kvs_block_layout_describe_problem(layout, why, sizeof why);
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "unusable reader layout: %s", why);
  }
  if (kvs_dtype_size(dtype) == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "unknown dtype code %d", (int)dtype);
  }
  memset(out, 0, sizeof *out);
  out->format_version = KVS_BLOCK_FORMAT_VERSION;
  memcpy(out->model, model, strlen(model));
  if (weights_len > 0) memcpy(out->weights, weights, weights_len);
  out->weights_len = (uint32_t)weights_len;
  out->n_layers = n_layers;
  out->n_kv_heads = n_kv_heads;
  out->head_dim = head_dim;
  out->dtype = dtype;
  out->tokens = tokens;
  out->layout = layout;
  return KVS_OK;
}

/* Compares two signatures field by field in a fixed order and describes
 * the first difference, so a refusal names the setting that moved
 * instead of reporting a bare miss. `left` is the recorded stamp (PAYLOAD_MISMATCH) or the
 * reader's expectation (INCOMPATIBLE); `right` is always the measured
 * signature. */
static bool compare(const kvs_block_signature *left, const kvs_block_signature *right,
                    kvs_signature_error_kind kind, kvs_signature_error *why) {
  const char *field = NULL;
  char l[KVS_SIG_VALUE_MAX], r[KVS_SIG_VALUE_MAX];
  if (left->format_version != right->format_version) {
    field = "format_version";
    u64_text(left->format_version, l, sizeof l);
    u64_text(right->format_version, r, sizeof r);
  } else if (strcmp(left->model, right->model) != 0) {
    field = "model";
    snprintf(l, sizeof l, "%s", left->model);
    snprintf(r, sizeof r, "%s", right->model);
  } else if (left->weights_len != right->weights_len ||
             memcmp(left->weights, right->weights, left->weights_len) != 0) {
    field = "weights_fingerprint";
    kvs_block_weights_describe(left->weights, left->weights_len, l, sizeof l);
    kvs_block_weights_describe(right->weights, right->weights_len, r, sizeof r);
  } else if (left->n_layers != right->n_layers) {
    field = "n_layers";
    u64_text(left->n_layers, l, sizeof l);
    u64_text(right->n_layers, r, sizeof r);
  } else if (left->n_kv_heads != right->n_kv_heads) {
    field = "n_kv_heads";
    u64_text(left->n_kv_heads, l, sizeof l);
    u64_text(right->n_kv_heads, r, sizeof r);
  } else if (left->head_dim != right->head_dim) {
    field = "head_dim";
    u64_text(left->head_dim, l, sizeof l);
    u64_text(right->head_dim, r, sizeof r);
  } else if (left->dtype != right->dtype) {
    field = "dtype";
    snprintf(l, sizeof l, "%s", kvs_dtype_name(left->dtype));
    snprintf(r, sizeof r, "%s", kvs_dtype_name(right->dtype));
  } else if (left->tokens != right->tokens) {
    field = "tokens";
    u64_text(left->tokens, l, sizeof l);
    u64_text(right->tokens, r, sizeof r);
  } else if (left->layout.block_size != right->layout.block_size) {
    field = "block_size";
    u64_text(left->layout.block_size, l, sizeof l);
    u64_text(right->layout.block_size, r, sizeof r);
  } else if (left->layout.sliding_window != right->layout.sliding_window) {
    field = "sliding_window";
    kvs_block_window_describe(left->layout.sliding_window, l, sizeof l);
    kvs_block_window_describe(right->layout.sliding_window, r, sizeof r);
  }
  if (field == NULL) return true;
  start(why, kind);
  why->field = field;
  if (kind == KVS_SIG_PAYLOAD_MISMATCH) {
    memcpy(why->recorded, l, sizeof l);
    memcpy(why->actual, r, sizeof r);
  } else {
    memcpy(why->expected, l, sizeof l);
    memcpy(why->found, r, sizeof r);
  }
  return false;
}

bool kvs_signature_version_refused(bool marked, uint32_t version, uint32_t wanted,
                                   kvs_signature_error *why) {
  kvs_signature_error local;
  if (why == NULL) why = &local;
  if (!marked) {
    start(why, KVS_SIG_UNMARKED);
    return true;
  }
  if (!kvs_block_format_readable(version)) {
    start(why, KVS_SIG_UNSUPPORTED_FORMAT);
    why->format_found = version;
    why->readable = kvs_block_readable_versions;
    why->n_readable = kvs_block_readable_versions_count;
    return true;
  }
  if (version != wanted) {
    /* A readable version of the other kind: page blocks (version 3) are
     * page_block.h's, K/V layers (version 2) this file's. */
    start(why, KVS_SIG_OTHER_FORMAT);
    why->format_found = version;
    why->format_wanted = wanted;
    return true;
  }
  return false;
}

kvs_status kvs_block_verify_parts(const kvs_block_signature *recorded,
                                  const kvs_block_layer *layers, size_t n_layers,
                                  const kvs_block_signature *expected, kvs_block_signature *actual,
                                  kvs_signature_error *why, kvs_error *err) {
  kvs_status st = kvs_block_layers_check(layers, n_layers, err);
  if (st != KVS_OK) return st;
  kvs_signature_error local;

  /* 1 and 2: marked at all, in a readable version of this kind. */
  if (kvs_signature_version_refused(recorded != NULL,
                                    recorded != NULL ? recorded->format_version : 0,
                                    KVS_BLOCK_FORMAT_VERSION, &local)) {
    return kvs_signature_refuse(&local, why, err);
  }
  if (memchr(recorded->model, '\0', sizeof recorded->model) == NULL ||
      recorded->weights_len > KVS_BLOCK_WEIGHTS_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "recorded signature has an unterminated model or an over-long "
                         "weights fingerprint");
  }
  /* 3. Measure the payload. Model, fingerprint and layout come from the
   * stamp since tensors cannot attest to them; they are still checked:
   * the block size against the depth right here, the others against the
   * reader in step 5. The reader's values play no part before that. */
  kvs_block_signature measured;
  if (!measure(recorded->model, recorded->weights, recorded->weights_len, recorded->layout, layers,
               n_layers, &measured, &local)) {
    return kvs_signature_refuse(&local, why, err);
  }
  /* 4. The stamp must be what the payload is. */
  if (!compare(recorded, &measured, KVS_SIG_PAYLOAD_MISMATCH, &local)) {
    return kvs_signature_refuse(&local, why, err);
  }
  /* 5. And what the payload is must be what the reader needs. */
  if (expected != NULL && !compare(expected, &measured, KVS_SIG_INCOMPATIBLE, &local)) {
    return kvs_signature_refuse(&local, why, err);
  }
  if (actual != NULL) *actual = measured;
  if (why != NULL) start(why, KVS_SIG_NONE);
  return KVS_OK;
}

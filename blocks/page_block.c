#include "blocks/page_block.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
/* The runtime-dispatched XXH3 where Debian's libxxhash has it
 * (block_envelope.c says why): the digest runs over every byte. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
#endif

#include "blocks/block_envelope.h"

const char *kvs_page_tier_name(uint32_t tier) {
  switch (tier) {
    case KVS_PAGE_TIER_COMPRESSED_4:
      return "compressed ratio 4";
    case KVS_PAGE_TIER_COMPRESSED_128:
      return "compressed ratio 128";
    case KVS_PAGE_TIER_INDEXER:
      return "indexer";
    case KVS_PAGE_TIER_WINDOW:
      return "window";
    case KVS_PAGE_TIER_TAIL_STATE:
      return "tail state";
    case KVS_PAGE_TIER_INDEX_TAIL_STATE:
      return "index tail state";
  }
  return "unknown";
}

const char *kvs_page_encoding_name(uint32_t encoding) {
  switch (encoding) {
    case KVS_PAGE_BF16:
      return "bf16";
    case KVS_PAGE_FP8_SCALED:
      return "fp8+scales";
    case KVS_PAGE_F32:
      return "f32";
  }
  return "unknown";
}

/* Bytes a row must be a multiple of: its element's; fp8 rows carry their
 * scales inside, so any width is a whole row. 0: unknown encoding. */
static uint32_t row_unit(uint32_t encoding) {
  switch (encoding) {
    case KVS_PAGE_BF16:
      return 2;
    case KVS_PAGE_FP8_SCALED:
      return 1;
    case KVS_PAGE_F32:
      return 4;
  }
  return 0;
}

/* Rows a layer of this tier holds in a page of page_size tokens; 0 for a
 * tier whose count the page does not fix (tail states). */
static uint64_t rows_for_page(uint32_t tier, uint32_t page_size) {
  switch (tier) {
    case KVS_PAGE_TIER_COMPRESSED_4:
    case KVS_PAGE_TIER_INDEXER:
      return page_size / 4;
    case KVS_PAGE_TIER_COMPRESSED_128:
      return page_size / 128;
    case KVS_PAGE_TIER_WINDOW:
      return page_size;
  }
  return 0;
}

static kvs_status check_id(const char *function, const kvs_page_identity *id, kvs_error *err) {
  if (id == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: id is NULL", function);
  if (memchr(id->model, '\0', sizeof id->model) == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: the model is not NUL-terminated",
                         function);
  }
  kvs_status st = kvs_block_identity_check(function, id->model, id->weights, id->weights_len, err);
  if (st != KVS_OK) return st;
  if (id->page_size == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: a page of 0 tokens", function);
  }
  if (id->layer_begin >= id->layer_end) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: the layer range [%u, %u) is empty",
                         function, (unsigned)id->layer_begin, (unsigned)id->layer_end);
  }
  return KVS_OK;
}

kvs_status kvs_page_identity_init(const char *model, const uint8_t *weights, size_t weights_len,
                                  uint32_t page_size, uint64_t geometry, uint32_t layer_begin,
                                  uint32_t layer_end, const kvs_block_hash *chain, uint64_t depth,
                                  kvs_page_identity *out, kvs_error *err) {
  kvs_status st = kvs_block_identity_check(__func__, model, weights, weights_len, err);
  if (st != KVS_OK) return st;
  if (chain == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: chain is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_page_identity id;
  memset(&id, 0, sizeof id);
  memcpy(id.model, model, strlen(model));
  if (weights_len > 0) memcpy(id.weights, weights, weights_len);
  id.weights_len = (uint32_t)weights_len;
  id.page_size = page_size;
  id.geometry = geometry;
  id.layer_begin = layer_begin;
  id.layer_end = layer_end;
  id.chain = *chain;
  id.depth = depth;
  st = check_id(__func__, &id, err);
  if (st != KVS_OK) return st;
  *out = id;
  return KVS_OK;
}

uint64_t kvs_page_section_digest(const kvs_block_hash *chain, uint64_t depth, uint32_t index,
                                 uint32_t tier, const void *bytes, size_t n_bytes) {
  uint8_t where[32];
  kvs_wr64(where, chain != NULL ? chain->high : 0);
  kvs_wr64(where + 8, chain != NULL ? chain->low : 0);
  kvs_wr64(where + 16, depth);
  kvs_wr64(where + 24, (uint64_t)tier << 32 | index);
  static const uint8_t none[1];
  return XXH3_64bits_withSeed(bytes != NULL ? bytes : none, bytes != NULL ? n_bytes : 0,
                              XXH3_64bits(where, sizeof where));
}

/* ---- measuring ---- */

static void start(kvs_signature_error *why, kvs_signature_error_kind kind) {
  memset(why, 0, sizeof *why);
  why->kind = kind;
}

/* A refusal about section i: field, what was expected and what was found
 * (kept in expected/found; PAYLOAD_MISMATCH moves them to recorded/actual). */
static void about_section(kvs_signature_error *why, kvs_signature_error_kind kind, size_t i,
                          uint32_t tier, const char *field, const char *expected,
                          const char *found) {
  start(why, kind);
  why->in_section = true;
  why->section = (uint32_t)i;
  why->section_name = kvs_page_tier_name(tier);
  why->field = field;
  snprintf(why->expected, sizeof why->expected, "%s", expected);
  snprintf(why->found, sizeof why->found, "%s", found);
}

static kvs_status check_sections_args(const char *function, const kvs_page_section *sections,
                                      size_t n, kvs_error *err) {
  if (n > 0 && sections == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: sections is NULL but n is %zu",
                         function, n);
  }
  if (n > KVS_PAGE_MAX_SECTIONS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s: %zu sections exceed the %u-section maximum", function, n,
                         KVS_PAGE_MAX_SECTIONS);
  }
  for (size_t i = 0; i < n; i++) {
    const kvs_page_section *s = &sections[i];
    if (row_unit(s->shape.encoding) == 0 ||
        strcmp(kvs_page_tier_name(s->shape.tier), "unknown") == 0) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "%s: section %zu has tier code %u and encoding code %u; one is unknown",
                           function, i, (unsigned)s->shape.tier, (unsigned)s->shape.encoding);
    }
    if (s->n_bytes > 0 && s->bytes == NULL) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: section %zu has NULL bytes",
                           function, i);
    }
  }
  return KVS_OK;
}

/* Step 3 for one section: its shape against its own bytes, the encoding,
 * the layer range and the page size. */
static bool measure_section(const kvs_page_identity *id, size_t i, const kvs_page_section *s,
                            kvs_signature_error *why) {
  const kvs_page_section_shape *sh = &s->shape;
  char a[96], b[96];
  if (sh->layers == 0 || sh->rows == 0 || sh->row_bytes == 0) {
    snprintf(b, sizeof b, "%u layers x %u rows x %u bytes", (unsigned)sh->layers,
             (unsigned)sh->rows, (unsigned)sh->row_bytes);
    about_section(why, KVS_SIG_DEGENERATE_LAYER, i, sh->tier, "shape", "no zero count", b);
    return false;
  }
  uint32_t unit = row_unit(sh->encoding);
  if (sh->row_bytes % unit != 0) {
    snprintf(a, sizeof a, "a multiple of %u (%s)", (unsigned)unit,
             kvs_page_encoding_name(sh->encoding));
    snprintf(b, sizeof b, "%u", (unsigned)sh->row_bytes);
    about_section(why, KVS_SIG_RAGGED_PAYLOAD, i, sh->tier, "row_bytes", a, b);
    return false;
  }
  uint32_t range = id->layer_end - id->layer_begin;
  if (sh->layers > range) {
    snprintf(a, sizeof a, "at most %u (layers %u to %u)", (unsigned)range,
             (unsigned)id->layer_begin, (unsigned)id->layer_end - 1);
    snprintf(b, sizeof b, "%u", (unsigned)sh->layers);
    about_section(why, KVS_SIG_RAGGED_PAYLOAD, i, sh->tier, "layers", a, b);
    return false;
  }
  uint64_t want = (uint64_t)sh->layers * sh->rows * sh->row_bytes; /* < 2^96 / 2^32: no wrap */
  if (s->n_bytes != want) {
    snprintf(a, sizeof a, "%" PRIu64 " (%u x %u x %u)", want, (unsigned)sh->layers,
             (unsigned)sh->rows, (unsigned)sh->row_bytes);
    snprintf(b, sizeof b, "%" PRIu64, s->n_bytes);
    about_section(why, KVS_SIG_RAGGED_PAYLOAD, i, sh->tier, "n_bytes", a, b);
    return false;
  }
  uint64_t page_rows = rows_for_page(sh->tier, id->page_size);
  if (page_rows != 0 && sh->rows != page_rows) {
    snprintf(a, sizeof a, "%" PRIu64 " (page size %u)", page_rows, (unsigned)id->page_size);
    snprintf(b, sizeof b, "%u", (unsigned)sh->rows);
    about_section(why, KVS_SIG_BLOCK_SIZE_MISMATCH, i, sh->tier, "rows", a, b);
    return false;
  }
  return true;
}

/* Steps 3: the measurement proper, after the arguments were checked. */
static bool measure(const kvs_page_identity *id, const kvs_page_section *sections, size_t n,
                    kvs_page_signature *sig, kvs_signature_error *why) {
  if (n == 0) {
    start(why, KVS_SIG_EMPTY_PAYLOAD);
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < i; j++) {
      if (sections[j].shape.tier == sections[i].shape.tier) {
        char a[80];
        snprintf(a, sizeof a, "one section per tier (section %zu has it)", j);
        about_section(why, KVS_SIG_RAGGED_PAYLOAD, i, sections[i].shape.tier, "tier", a,
                      "a second one");
        return false;
      }
    }
    if (!measure_section(id, i, &sections[i], why)) return false;
  }
  memset(sig, 0, sizeof *sig);
  sig->format_version = KVS_PAGE_BLOCK_FORMAT_VERSION;
  sig->id = *id;
  sig->n_sections = (uint32_t)n;
  for (size_t i = 0; i < n; i++) sig->sections[i] = sections[i].shape;
  return true;
}

kvs_status kvs_page_signature_measure(const kvs_page_identity *id, const kvs_page_section *sections,
                                      size_t n_sections, kvs_page_signature *out,
                                      kvs_signature_error *why, kvs_error *err) {
  kvs_status st = check_id(__func__, id, err);
  if (st == KVS_OK) st = check_sections_args(__func__, sections, n_sections, err);
  if (st != KVS_OK) return st;
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_signature_error local;
  kvs_page_signature sig;
  if (!measure(id, sections, n_sections, &sig, &local)) {
    return kvs_signature_refuse(&local, why, err);
  }
  *out = sig;
  return KVS_OK;
}

kvs_status kvs_page_signature_expected(const kvs_page_identity *id,
                                       const kvs_page_section_shape *shapes, size_t n_shapes,
                                       kvs_page_signature *out, kvs_error *err) {
  kvs_status st = check_id(__func__, id, err);
  if (st != KVS_OK) return st;
  if (n_shapes > 0 && shapes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: shapes is NULL but n_shapes is %zu",
                         __func__, n_shapes);
  }
  if (n_shapes > KVS_PAGE_MAX_SECTIONS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s: %zu sections exceed the %u-section maximum", __func__, n_shapes,
                         KVS_PAGE_MAX_SECTIONS);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  memset(out, 0, sizeof *out);
  out->format_version = KVS_PAGE_BLOCK_FORMAT_VERSION;
  out->id = *id;
  out->n_sections = (uint32_t)n_shapes;
  if (n_shapes > 0) memcpy(out->sections, shapes, n_shapes * sizeof *shapes);
  return KVS_OK;
}

/* ---- comparing ---- */

static void u64_text(uint64_t v, char *buf, size_t cap) { snprintf(buf, cap, "%" PRIu64, v); }

/* The first differing field of section i (NULL: none), rendered. */
static const char *section_diff(const kvs_page_section_shape *l, const kvs_page_section_shape *r,
                                char *lt, char *rt, size_t cap) {
  if (l->tier != r->tier) {
    snprintf(lt, cap, "%s", kvs_page_tier_name(l->tier));
    snprintf(rt, cap, "%s", kvs_page_tier_name(r->tier));
    return "tier";
  }
  if (l->encoding != r->encoding) {
    snprintf(lt, cap, "%s", kvs_page_encoding_name(l->encoding));
    snprintf(rt, cap, "%s", kvs_page_encoding_name(r->encoding));
    return "encoding";
  }
  const char *field = NULL;
  uint64_t a = 0, b = 0;
  if (l->layers != r->layers) {
    field = "layers", a = l->layers, b = r->layers;
  } else if (l->rows != r->rows) {
    field = "rows", a = l->rows, b = r->rows;
  } else if (l->row_bytes != r->row_bytes) {
    field = "row_bytes", a = l->row_bytes, b = r->row_bytes;
  }
  if (field != NULL) {
    u64_text(a, lt, cap);
    u64_text(b, rt, cap);
  }
  return field;
}

/* The first differing field outside the sections (NULL: none). */
static const char *identity_diff(const kvs_page_signature *left, const kvs_page_signature *right,
                                 char *l, char *r, size_t cap) {
  const kvs_page_identity *a = &left->id, *b = &right->id;
  if (left->format_version != right->format_version) {
    u64_text(left->format_version, l, cap);
    u64_text(right->format_version, r, cap);
    return "format_version";
  }
  if (strcmp(a->model, b->model) != 0) {
    snprintf(l, cap, "%s", a->model);
    snprintf(r, cap, "%s", b->model);
    return "model";
  }
  if (a->weights_len != b->weights_len || memcmp(a->weights, b->weights, a->weights_len) != 0) {
    kvs_block_weights_describe(a->weights, a->weights_len, l, cap);
    kvs_block_weights_describe(b->weights, b->weights_len, r, cap);
    return "weights_fingerprint";
  }
  if (a->page_size != b->page_size) {
    u64_text(a->page_size, l, cap);
    u64_text(b->page_size, r, cap);
    return "page_size";
  }
  if (a->geometry != b->geometry) {
    snprintf(l, cap, "%016" PRIx64, a->geometry);
    snprintf(r, cap, "%016" PRIx64, b->geometry);
    return "geometry";
  }
  if (a->layer_begin != b->layer_begin || a->layer_end != b->layer_end) {
    snprintf(l, cap, "[%u, %u)", (unsigned)a->layer_begin, (unsigned)a->layer_end);
    snprintf(r, cap, "[%u, %u)", (unsigned)b->layer_begin, (unsigned)b->layer_end);
    return "layer_range";
  }
  if (left->n_sections != right->n_sections) {
    u64_text(left->n_sections, l, cap);
    u64_text(right->n_sections, r, cap);
    return "n_sections";
  }
  return NULL;
}

/* The page's position, compared after everything else: a block filed
 * under another page is the last thing a reader learns. */
static const char *position_diff(const kvs_page_identity *a, const kvs_page_identity *b, char *l,
                                 char *r, size_t cap) {
  if (!kvs_block_hash_equal(&a->chain, &b->chain)) {
    char h[KVS_BLOCK_HASH_HEX_LEN + 1];
    snprintf(l, cap, "%s", kvs_block_hash_hex(&a->chain, h));
    snprintf(r, cap, "%s", kvs_block_hash_hex(&b->chain, h));
    return "chain";
  }
  if (a->depth != b->depth) {
    u64_text(a->depth, l, cap);
    u64_text(b->depth, r, cap);
    return "depth";
  }
  return NULL;
}

/* Fills why with the difference: left is the stamp (PAYLOAD_MISMATCH) or
 * the reader (INCOMPATIBLE), right the measurement. */
static void differ(kvs_signature_error *why, kvs_signature_error_kind kind, bool in_section,
                   size_t i, uint32_t tier, const char *field, const char *l, const char *r) {
  start(why, kind);
  why->in_section = in_section;
  why->section = (uint32_t)i;
  why->section_name = in_section ? kvs_page_tier_name(tier) : NULL;
  why->field = field;
  if (kind == KVS_SIG_PAYLOAD_MISMATCH) {
    snprintf(why->recorded, sizeof why->recorded, "%s", l);
    snprintf(why->actual, sizeof why->actual, "%s", r);
  } else {
    snprintf(why->expected, sizeof why->expected, "%s", l);
    snprintf(why->found, sizeof why->found, "%s", r);
  }
}

static bool compare(const kvs_page_signature *left, const kvs_page_signature *right,
                    kvs_signature_error_kind kind, kvs_signature_error *why) {
  char l[KVS_SIG_VALUE_MAX], r[KVS_SIG_VALUE_MAX];
  const char *field = identity_diff(left, right, l, r, sizeof l);
  if (field != NULL) {
    differ(why, kind, false, 0, 0, field, l, r);
    return false;
  }
  for (uint32_t i = 0; i < right->n_sections && i < KVS_PAGE_MAX_SECTIONS; i++) {
    field = section_diff(&left->sections[i], &right->sections[i], l, r, sizeof l);
    if (field != NULL) {
      differ(why, kind, true, i, right->sections[i].tier, field, l, r);
      return false;
    }
  }
  field = position_diff(&left->id, &right->id, l, r, sizeof l);
  if (field != NULL) {
    differ(why, kind, false, 0, 0, field, l, r);
    return false;
  }
  return true;
}

/* Step 4b: every section's digest at the recorded position. */
static bool check_digests(const kvs_page_identity *id, const kvs_page_section *sections, size_t n,
                          kvs_signature_error *why) {
  for (size_t i = 0; i < n; i++) {
    const kvs_page_section *s = &sections[i];
    uint64_t d = kvs_page_section_digest(&id->chain, id->depth, (uint32_t)i, s->shape.tier,
                                         s->bytes, (size_t)s->n_bytes);
    if (d != s->digest) {
      char l[24], r[24];
      snprintf(l, sizeof l, "%016" PRIx64, s->digest);
      snprintf(r, sizeof r, "%016" PRIx64, d);
      differ(why, KVS_SIG_PAYLOAD_MISMATCH, true, i, s->shape.tier, "digest", l, r);
      return false;
    }
  }
  return true;
}

kvs_status kvs_page_verify_parts(const kvs_page_signature *recorded,
                                 const kvs_page_section *sections, size_t n_sections,
                                 const kvs_page_signature *expected, kvs_page_signature *actual,
                                 kvs_signature_error *why, kvs_error *err) {
  kvs_status st = check_sections_args(__func__, sections, n_sections, err);
  if (st != KVS_OK) return st;
  kvs_signature_error local;
  /* 1 and 2: marked at all, in a readable version of this kind. */
  if (kvs_signature_version_refused(recorded != NULL,
                                    recorded != NULL ? recorded->format_version : 0,
                                    KVS_PAGE_BLOCK_FORMAT_VERSION, &local)) {
    return kvs_signature_refuse(&local, why, err);
  }
  st = check_id(__func__, &recorded->id, err);
  if (st != KVS_OK) return st;
  /* 3. Measure the payload under the stamp's identity (no byte proves
   * it; the reader settles it in step 5, never before). */
  kvs_page_signature measured;
  if (!measure(&recorded->id, sections, n_sections, &measured, &local)) {
    return kvs_signature_refuse(&local, why, err);
  }
  /* 4. The stamp must be what the payload is, and every section's bytes
   * what was digested at the stamp's position. */
  if (!compare(recorded, &measured, KVS_SIG_PAYLOAD_MISMATCH, &local) ||
      !check_digests(&recorded->id, sections, n_sections, &local)) {
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

/* ---- owned blocks ---- */

struct kvs_page_block {
  kvs_page_signature signature;
  size_t n_sections;
  kvs_page_section sections[KVS_PAGE_MAX_SECTIONS];
  void *storage;
};

/* Sections start on 64-byte boundaries inside a stamped copy. */
#define SECTION_ALIGN 64u

kvs_status kvs_page_block_stamp(const kvs_page_identity *id, const kvs_page_section *sections,
                                size_t n_sections, kvs_page_block_t *out, kvs_signature_error *why,
                                kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_page_signature sig;
  kvs_status st = kvs_page_signature_measure(id, sections, n_sections, &sig, why, err);
  if (st != KVS_OK) return st;
  uint64_t total = 0;
  for (size_t i = 0; i < n_sections; i++) {
    uint64_t padded = (sections[i].n_bytes + SECTION_ALIGN - 1) / SECTION_ALIGN * SECTION_ALIGN;
    if (sections[i].n_bytes > SIZE_MAX / 4 || __builtin_add_overflow(total, padded, &total) ||
        total > SIZE_MAX / 2) {
      return kvs_error_set(err, KVS_ERR_OVERFLOW, "page block size overflows at section %zu", i);
    }
  }
  struct kvs_page_block *b = calloc(1, sizeof *b);
  void *storage = aligned_alloc(SECTION_ALIGN, total > 0 ? (size_t)total : SECTION_ALIGN);
  if (b == NULL || storage == NULL) {
    free(b);
    free(storage);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %" PRIu64 "-byte page block",
                         total);
  }
  uint8_t *at = storage;
  for (size_t i = 0; i < n_sections; i++) {
    kvs_page_section *s = &b->sections[i];
    *s = sections[i];
    memcpy(at, sections[i].bytes, (size_t)s->n_bytes);
    s->bytes = at;
    s->digest = kvs_page_section_digest(&id->chain, id->depth, (uint32_t)i, s->shape.tier, at,
                                        (size_t)s->n_bytes);
    at += (s->n_bytes + SECTION_ALIGN - 1) / SECTION_ALIGN * SECTION_ALIGN;
  }
  b->signature = sig;
  b->n_sections = n_sections;
  b->storage = storage;
  *out = b;
  return KVS_OK;
}

kvs_status kvs_page_block_adopt(void *storage, const kvs_page_signature *sig,
                                const kvs_page_section *sections, size_t n_sections,
                                kvs_page_block_t *out, kvs_error *err) {
  if (storage == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: storage is NULL", __func__);
  }
  if (sig == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: sig is NULL", __func__);
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  kvs_status st = check_sections_args(__func__, sections, n_sections, err);
  if (st != KVS_OK) return st;
  struct kvs_page_block *b = calloc(1, sizeof *b);
  if (b == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a page block");
  b->signature = *sig;
  b->n_sections = n_sections;
  if (n_sections > 0) memcpy(b->sections, sections, n_sections * sizeof *sections);
  b->storage = storage;
  *out = b;
  return KVS_OK;
}

void kvs_page_block_destroy(kvs_page_block_t block) {
  if (block == NULL) return;
  free(block->storage);
  free(block);
}

const kvs_page_signature *kvs_page_block_signature_of(const struct kvs_page_block *block) {
  return block != NULL ? &block->signature : NULL;
}

const kvs_page_section *kvs_page_block_sections(const struct kvs_page_block *block,
                                                size_t *n_sections) {
  if (n_sections != NULL) *n_sections = block != NULL ? block->n_sections : 0;
  return block != NULL ? block->sections : NULL;
}

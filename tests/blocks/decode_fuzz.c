/* libFuzzer target for the block decoder.
 *
 * Every input is decoded three ways: as given; with its trailing checksum
 * recomputed (so mutations reach the body parser instead of stopping at
 * the checksum); and with magic, body length and checksum all repaired.
 * Each decode must end in KVS_OK or KVS_ERR_CORRUPT; a successful decode
 * must re-encode to exactly the input (the format is canonical), the
 * zero-copy and owning decoders must agree, and verification of what was
 * decoded must run to a verdict. AddressSanitizer catches any read past
 * the input and any leak; a crash input is kept under fuzz_regressions/.
 * An input counts as past parsing when one of its decodes succeeded (the
 * decoded block then went through verification). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "blocks/block_codec.h"
#include "blocks/block_signature.h"
#include "blocks/block_signed.h"
#include "blocks/page_codec.h"
#include "tests/fuzz/fuzz_stats.h"

KVS_FUZZ_TARGET("decode_fuzz_test",
                "a decode (as given, checksum repaired, or envelope repaired) succeeded: "
                "verification ran");

#define SMALL_LAYERS 16

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A version 3 page block: canonical under the page codec, verification
 * (self-consistency, then a reader wanting exactly its stamp) runs to a
 * verdict, and the owning decoder agrees with the view. */
static void check_page(const uint8_t *data, size_t size) {
  kvs_page_section sections[KVS_PAGE_MAX_SECTIONS];
  kvs_page_block_view pv;
  if (kvs_page_block_decode_view(data, size, &pv, sections, KVS_PAGE_MAX_SECTIONS, NULL) !=
          KVS_OK ||
      !pv.readable) {
    abort(); /* the layer decoder accepted it through this one */
  }
  const kvs_block_hash *key = pv.keyed ? &pv.key : NULL;
  const kvs_page_signature *sig = pv.marked ? &pv.signature : NULL;
  size_t need = 0, written = 0;
  if (kvs_page_block_encoded_size(key, sig, sections, pv.n_sections, &need, NULL) != KVS_OK ||
      need != size) {
    abort();
  }
  uint8_t *again = malloc(size);
  if (again == NULL) return;
  if (kvs_page_block_encode_parts(key, sig, sections, pv.n_sections, again, size, &written, NULL) !=
          KVS_OK ||
      written != size || memcmp(again, data, size) != 0) {
    abort();
  }
  free(again);
  kvs_signature_error why;
  kvs_status vs = kvs_page_verify_parts(sig, sections, pv.n_sections, NULL, NULL, &why, NULL);
  if (vs != KVS_OK && vs != KVS_ERR_SIGNATURE) abort();
  char text[1024];
  kvs_signature_error_format(&why, text, sizeof text);
  kvs_page_signature reader;
  if (sig != NULL) {
    reader = *sig;
  } else {
    memset(&reader, 0, sizeof reader);
  }
  kvs_page_block_t block = NULL;
  kvs_status owned = kvs_page_block_decode(data, size, &reader, NULL, &block, NULL, NULL);
  if (owned != KVS_OK && owned != KVS_ERR_SIGNATURE) abort();
  if ((owned == KVS_OK) != (vs == KVS_OK)) abort();
  kvs_page_block_destroy(block);
}

static void check_canonical(const uint8_t *data, size_t size, const kvs_block_view *view,
                            const kvs_block_layer *layers) {
  if (!view->readable) return;
  if (view->format_version == KVS_PAGE_BLOCK_FORMAT_VERSION) {
    check_page(data, size);
    return;
  }
  size_t need = 0;
  const kvs_block_hash *key = view->keyed ? &view->key : NULL;
  const kvs_block_signature *sig = view->marked ? &view->signature : NULL;
  if (kvs_block_encoded_size(key, sig, layers, view->n_layers, &need, NULL) != KVS_OK) abort();
  if (need != size) abort();
  uint8_t *again = malloc(size);
  if (again == NULL) return;
  size_t written = 0;
  if (kvs_block_encode_parts(key, sig, layers, view->n_layers, again, size, &written, NULL) !=
      KVS_OK) {
    abort();
  }
  if (written != size || memcmp(again, data, size) != 0) abort();
  free(again);
}

/* Returns whether the input decoded. */
static bool run_one(const uint8_t *data, size_t size) {
  kvs_block_layer small[SMALL_LAYERS];
  kvs_block_layer *layers = small;
  kvs_block_view view;
  kvs_error err;
  kvs_status st = kvs_block_decode_view(data, size, &view, small, SMALL_LAYERS, &err);
  if (st == KVS_ERR_INVALID_ARGUMENT) {
    /* More layers than the small array: a valid block, decode again. */
    if (view.n_layers <= SMALL_LAYERS || view.n_layers > KVS_BLOCK_MAX_LAYERS) abort();
    layers = malloc(view.n_layers * sizeof *layers);
    if (layers == NULL) return false;
    st = kvs_block_decode_view(data, size, &view, layers, view.n_layers, &err);
  }
  if (st != KVS_OK && st != KVS_ERR_CORRUPT) abort();
  if (st == KVS_ERR_CORRUPT && err.message[0] == '\0') abort();
  if (st == KVS_OK) {
    check_canonical(data, size, &view, layers);
    kvs_signature_error why;
    kvs_block_signature actual;
    kvs_status vs = kvs_block_verify_parts(view.marked ? &view.signature : NULL, layers,
                                           view.n_layers, NULL, &actual, &why, &err);
    if (vs != KVS_OK && vs != KVS_ERR_SIGNATURE) abort();
    char text[1024];
    kvs_signature_error_format(&why, text, sizeof text);
  }
  if (layers != small) free(layers);

  /* The owning decoder must agree, and its block must verify or refuse. */
  kvs_unverified_block_t ub = NULL;
  kvs_status owned = kvs_block_decode(data, size, NULL, &ub, NULL);
  if ((owned == KVS_OK) != (st == KVS_OK)) abort();
  if (ub != NULL) {
    kvs_block_signature reader;
    const kvs_block_signature *rec = kvs_unverified_block_signature(ub);
    if (rec != NULL) {
      reader = *rec; /* a reader that wants exactly what the stamp says */
    } else {
      memset(&reader, 0, sizeof reader);
    }
    kvs_block_t block = NULL;
    kvs_status vs = kvs_unverified_block_verify(&ub, &reader, &block, NULL, NULL);
    if (vs == KVS_OK && (block == NULL || ub != NULL)) abort();
    kvs_block_destroy(block);
    kvs_unverified_block_destroy(ub);
  }
  return st == KVS_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  KVS_FUZZ_RUN();
  bool decoded = run_one(data, size);
  if (size >= KVS_BLOCK_MIN_ENCODED) {
    uint8_t *fixed = malloc(size);
    if (fixed == NULL) return 0;
    memcpy(fixed, data, size);
    put_u64(fixed + size - 8, XXH3_64bits(fixed, size - 8));
    decoded |= run_one(fixed, size);
    memcpy(fixed, KVS_BLOCK_MAGIC, 8);
    put_u64(fixed + 16, size - KVS_BLOCK_MIN_ENCODED);
    put_u64(fixed + size - 8, XXH3_64bits(fixed, size - 8));
    decoded |= run_one(fixed, size);
    free(fixed);
  }
  if (decoded) KVS_FUZZ_PAST();
  return 0;
}

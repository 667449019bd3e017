/* kvblock: write, verify and inspect single stored KV block files.
 *
 *   kvblock write FILE --model M [--weights HEX] --layers L --kv-heads H
 *                 --head-dim D --block-size B [--window W] [--dtype f32|bf16]
 *                 [--seed S]
 *   kvblock verify FILE <the same reader flags>
 *   kvblock inspect FILE [--json]
 *
 * inspect reads both readable versions: 2 (K/V layers) and 3 (DSV4 page
 * sections: identity, sections, digests). verify and write are version
 * 2's: verify refuses a version 3 file by its version (exit 1, "other
 * format"); a page reader needs a geometry's sections, which the node
 * supplies (page_block.h), not these flags.
 *
 * Exit status: 0 success (verify: the block verified), 1 the block was
 * refused or is corrupt (exactly one line on stderr naming the error and
 * field) or a file could not be read or written, 2 bad usage.
 *
 * Files: verify and inspect read only a regular file (a missing file, a
 * directory, FIFO or device is exit 1 without blocking), and refuse one
 * larger than any block, or whose size disagrees with its header, before
 * reading it. write replaces only a regular file: a directory, symbolic
 * link, FIFO or device node at FILE is exit 1 and left as it was. Output
 * that cannot be written (a full disk, a closed stdout) is exit 1. */
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocks/atomic_file.h"
#include "blocks/bf16.h"
#include "blocks/block_codec.h"
#include "blocks/block_hash.h"
#include "blocks/block_layout.h"
#include "blocks/block_signature.h"
#include "blocks/block_signed.h"
#include "blocks/block_store.h"
#include "blocks/page_codec.h"
#include "core/mix.h"
#include "core/status.h"
#include "kvplan/args.h"

#define EXIT_REFUSED 1
#define EXIT_USAGE 2
/* Largest payload write makes: the largest file verify, inspect and the
 * store read. */
#define MAX_FILE_BYTES KVS_BLOCK_STORE_MAX_FILE_BYTES

static const char usage_text[] =
    "usage:\n"
    "  kvblock write FILE --model M [--weights HEX] --layers L --kv-heads H --head-dim D\n"
    "                --block-size B [--window W] [--dtype f32|bf16] [--seed S]\n"
    "  kvblock verify FILE --model M [--weights HEX] --layers L --kv-heads H --head-dim D\n"
    "                --block-size B [--window W] [--dtype f32|bf16]\n"
    "  kvblock inspect FILE [--json]\n"
    "write stores a synthetic signed block (payload derived from --seed, default 0);\n"
    "verify exits 0 when FILE verifies against the reader these flags describe, 1 when\n"
    "it is refused or corrupt (one line on stderr), 2 on bad usage (--seed is ignored);\n"
    "inspect prints the recorded signature.\n"
    "FILE must be a regular file: verify and inspect refuse a missing file, a directory,\n"
    "FIFO or device (exit 1), and write refuses to replace anything but a regular file\n"
    "(a symbolic link, device node, FIFO or directory: exit 1); output that cannot be\n"
    "written (a full disk) is exit 1.\n";

typedef struct flags {
  const char *model;
  uint8_t weights[KVS_BLOCK_WEIGHTS_MAX];
  size_t weights_len;
  bool have_weights;
  uint64_t layers, kv_heads, head_dim, block_size, window, seed;
  bool have_layers, have_kv_heads, have_head_dim, have_block_size, have_window, have_seed;
  kvs_dtype dtype;
  bool have_dtype;
  bool json;
} flags;

/* Bad usage: one line, the last one printed, pointing at --help rather
 * than burying the error above the usage text. */
static int usage_error(const char *fmt, const char *what) {
  fprintf(stderr, "kvblock: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, " (kvblock --help lists every flag)\n");
  return EXIT_USAGE;
}

/* Every flag any command takes, for suggestions. */
static const char *const flag_names[] = {"--model",    "--weights",    "--layers", "--kv-heads",
                                         "--head-dim", "--block-size", "--window", "--dtype",
                                         "--seed",     "--json"};
#define N_FLAG_NAMES (sizeof flag_names / sizeof flag_names[0])

/* A flag no command knows: one line naming the nearest one. */
static int unknown_flag(const char *arg) {
  kvs_report_unknown_flag("kvblock", arg, flag_names, N_FLAG_NAMES, "kvblock --help");
  return EXIT_USAGE;
}

/* A positive count that fits 32 bits. */
static int parse_count(const char *flag, const char *text, uint64_t *out) {
  kvs_error err;
  if (kvs_parse_u64(flag, text, out, &err) != KVS_OK) return usage_error("%s", err.message);
  if (*out == 0 || *out > UINT32_MAX) {
    fprintf(stderr, "kvblock: %s must be between 1 and %u, not %s\n", flag, (unsigned)UINT32_MAX,
            text);
    return EXIT_USAGE;
  }
  return 0;
}

/* Long enough for every flag name; a longer one is unknown. */
#define FLAG_NAME_MAX 32

/* Splits "--name" or "--name=value" at the '=': the name into name[],
 * *eq at the '=' or NULL. Returns 0, or EXIT_USAGE after a message. */
static int flag_name(const char *arg, char name[FLAG_NAME_MAX], const char **eq) {
  if (strncmp(arg, "--", 2) != 0) return usage_error("unexpected argument '%s'", arg);
  *eq = strchr(arg, '=');
  size_t nlen = *eq != NULL ? (size_t)(*eq - arg) : strlen(arg);
  if (nlen >= FLAG_NAME_MAX) return unknown_flag(arg);
  memcpy(name, arg, nlen);
  name[nlen] = '\0';
  return 0;
}

/* Refuses a flag no command knows, and one this command does not take:
 * the reader flags are write's and verify's, --seed is write's (verify
 * accepts and ignores it). Returns 0, or EXIT_USAGE after a message. */
static int check_accepted(const char *name, bool allow_reader, bool allow_seed) {
  bool reader_flag = strcmp(name, "--model") == 0 || strcmp(name, "--weights") == 0 ||
                     strcmp(name, "--layers") == 0 || strcmp(name, "--kv-heads") == 0 ||
                     strcmp(name, "--head-dim") == 0 || strcmp(name, "--block-size") == 0 ||
                     strcmp(name, "--window") == 0 || strcmp(name, "--dtype") == 0;
  bool seed_flag = strcmp(name, "--seed") == 0;
  if (!reader_flag && !seed_flag) return unknown_flag(name);
  if ((reader_flag && !allow_reader) || (seed_flag && !allow_seed)) {
    return usage_error("flag '%s' is not accepted here", name);
  }
  return 0;
}

/* The counts (parse_count): where name's value and its seen mark live in f;
 * false for any other flag. */
static bool count_field(flags *f, const char *name, uint64_t **value, bool **have) {
  if (strcmp(name, "--layers") == 0) {
    *value = &f->layers;
    *have = &f->have_layers;
  } else if (strcmp(name, "--kv-heads") == 0) {
    *value = &f->kv_heads;
    *have = &f->have_kv_heads;
  } else if (strcmp(name, "--head-dim") == 0) {
    *value = &f->head_dim;
    *have = &f->have_head_dim;
  } else if (strcmp(name, "--block-size") == 0) {
    *value = &f->block_size;
    *have = &f->have_block_size;
  } else if (strcmp(name, "--window") == 0) {
    *value = &f->window;
    *have = &f->have_window;
  } else {
    return false;
  }
  return true;
}

/* Stores one accepted flag's value in f. A bad value is reported before a
 * repeat, so "--layers 3 --layers 0" names the bad count. Returns 0, or
 * EXIT_USAGE after a message. */
static int set_flag(flags *f, const char *name, const char *value) {
  int rc = 0;
  bool dup;
  uint64_t *count;
  bool *have;
  if (count_field(f, name, &count, &have)) {
    dup = *have;
    *have = true;
    rc = parse_count(name, value, count);
  } else if (strcmp(name, "--model") == 0) {
    dup = f->model != NULL;
    f->model = value;
    if (!kvs_block_model_valid(value, strlen(value)) || value[0] == '\0') {
      return usage_error("--model must be 1 to 255 printable bytes, not '%s'", value);
    }
  } else if (strcmp(name, "--weights") == 0) {
    dup = f->have_weights;
    f->have_weights = true;
    if (!kvs_hex_decode(value, f->weights, sizeof f->weights, &f->weights_len)) {
      return usage_error("--weights must be an even number of hex digits, at most 128: '%s'",
                         value);
    }
  } else if (strcmp(name, "--dtype") == 0) {
    dup = f->have_dtype;
    f->have_dtype = true;
    if (!kvs_dtype_parse(value, &f->dtype)) {
      return usage_error("--dtype must be f32 or bf16, not '%s'", value);
    }
  } else { /* --seed */
    dup = f->have_seed;
    f->have_seed = true;
    kvs_error err;
    if (kvs_parse_u64(name, value, &f->seed, &err) != KVS_OK) {
      return usage_error("%s", err.message);
    }
  }
  if (rc != 0) return rc;
  if (dup) return usage_error("flag '%s' given twice", name);
  return 0;
}

/* The reader flags a block cannot be described without, and the format's
 * layer limit. Returns 0, or EXIT_USAGE after a message. */
static int check_reader(const flags *f) {
  if (f->model == NULL) return usage_error("%s is required", "--model");
  if (!f->have_layers) return usage_error("%s is required", "--layers");
  if (!f->have_kv_heads) return usage_error("%s is required", "--kv-heads");
  if (!f->have_head_dim) return usage_error("%s is required", "--head-dim");
  if (!f->have_block_size) return usage_error("%s is required", "--block-size");
  if (f->layers > KVS_BLOCK_MAX_LAYERS) {
    return usage_error("--layers exceeds the format's maximum of %s", "65536");
  }
  return 0;
}

/* Parses the flags after FILE. allow_reader: the reader flags (write,
 * verify); allow_seed: --seed; allow_json: --json (inspect). */
static int parse_flags(int argc, char **argv, bool allow_reader, bool allow_seed, bool allow_json,
                       flags *f) {
  memset(f, 0, sizeof *f);
  f->dtype = KVS_DTYPE_F32;
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    char name[FLAG_NAME_MAX];
    const char *eq;
    int rc = flag_name(arg, name, &eq);
    if (rc != 0) return rc;
    if (strcmp(name, "--json") == 0) { /* the one flag without a value */
      if (!allow_json || eq != NULL) return usage_error("flag '%s' is not accepted here", arg);
      if (f->json) return usage_error("flag '%s' given twice", name);
      f->json = true;
      continue;
    }
    if ((rc = check_accepted(name, allow_reader, allow_seed)) != 0) return rc;
    const char *value;
    if (eq != NULL) {
      value = eq + 1;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return usage_error("flag '%s' needs a value", name);
    }
    if ((rc = set_flag(f, name, value)) != 0) return rc;
  }
  return allow_reader ? check_reader(f) : 0;
}

/* The layout from the flags. A window that is not a multiple of the
 * block size describes no possible block: a usage error. */
static int layout_of(const flags *f, kvs_block_layout *layout) {
  kvs_error err;
  if (kvs_block_layout_init((uint32_t)f->block_size, (uint32_t)f->window, layout, &err) != KVS_OK) {
    return usage_error("%s", err.message);
  }
  return 0;
}

/* ---- write ---- */

/* Fills n elements with values in [-1, 1) drawn from the stream. */
static void fill(void *dst, uint64_t n, kvs_dtype dtype, uint64_t *state) {
  for (uint64_t i = 0; i < n; i++) {
    float f = (float)((int64_t)(kvs_splitmix64(state) >> 40) - (1 << 23)) / (float)(1 << 23);
    if (dtype == KVS_DTYPE_F32) {
      memcpy((uint8_t *)dst + 4 * i, &f, 4);
    } else {
      uint16_t h = kvs_bf16_from_float(f);
      memcpy((uint8_t *)dst + 2 * i, &h, 2);
    }
  }
}

/* The elements of one layer's K (and of its V) and the payload's bytes in
 * all. A payload past what verify and the store read back is a usage
 * error, checked before anything is allocated. Returns 0 or EXIT_USAGE. */
static int payload_size(const flags *f, uint64_t *elems, uint64_t *total) {
  size_t es = kvs_dtype_size(f->dtype);
  *elems = 0;
  *total = 0;
  if (__builtin_mul_overflow(f->block_size, f->kv_heads, elems) ||
      __builtin_mul_overflow(*elems, f->head_dim, elems) ||
      __builtin_mul_overflow(*elems, f->layers * 2 * es, total) || *total > MAX_FILE_BYTES) {
    fprintf(stderr,
            "kvblock: a payload of %" PRIu64 " layers x %" PRIu64 " x %" PRIu64 " x %" PRIu64
            " is larger than this tool writes (%" PRIu64 " bytes)\n",
            f->layers, f->block_size, f->kv_heads, f->head_dim, MAX_FILE_BYTES);
    return EXIT_USAGE;
  }
  return 0;
}

/* Each layer's K then V in data, drawn in that order from one stream
 * seeded by --seed (so a seed always gives the same bytes), and layers[]
 * describing them. */
static void synthesize(const flags *f, uint64_t elems, uint8_t *data, kvs_block_layer *layers) {
  size_t es = kvs_dtype_size(f->dtype);
  uint64_t state = f->seed;
  for (uint64_t l = 0; l < f->layers; l++) {
    uint8_t *k = data + (size_t)(2 * l * elems * es);
    uint8_t *v = k + (size_t)(elems * es);
    fill(k, elems, f->dtype, &state);
    fill(v, elems, f->dtype, &state);
    layers[l] = (kvs_block_layer){
        .n_kv_heads = (uint32_t)f->kv_heads,
        .head_dim = (uint32_t)f->head_dim,
        .v_head_dim = (uint32_t)f->head_dim,
        .dtype = f->dtype,
        .positions = f->block_size,
        .k = k,
        .k_elems = elems,
        .v = v,
        .v_elems = elems,
    };
  }
}

/* The payload signed with its measured signature and encoded: *bytes
 * (malloc'd, *size long) on KVS_OK, NULL otherwise. */
static kvs_status encode_signed(const flags *f, kvs_block_layout layout,
                                const kvs_block_layer *layers, uint8_t **bytes, size_t *size,
                                kvs_error *err) {
  kvs_block_signature sig;
  kvs_signature_error why;
  *bytes = NULL;
  *size = 0;
  kvs_status st = kvs_block_signature_measure(f->model, f->weights, f->weights_len, layout, layers,
                                              (size_t)f->layers, &sig, &why, err);
  if (st == KVS_OK) st = kvs_block_encoded_size(NULL, &sig, layers, (size_t)f->layers, size, err);
  if (st == KVS_OK) {
    *bytes = malloc(*size);
    if (*bytes == NULL) st = kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of memory");
  }
  if (st == KVS_OK) {
    st = kvs_block_encode_parts(NULL, &sig, layers, (size_t)f->layers, *bytes, *size, NULL, err);
  }
  if (st != KVS_OK) {
    free(*bytes);
    *bytes = NULL;
  }
  return st;
}

/* The synthetic block's encoded bytes (malloc'd). Returns 0, or
 * EXIT_REFUSED after a message. */
static int build_block(const char *path, const flags *f, kvs_block_layout layout, uint64_t elems,
                       uint64_t total, uint8_t **bytes, size_t *size) {
  kvs_block_layer *layers = calloc((size_t)f->layers, sizeof *layers);
  uint8_t *data = malloc(total > 0 ? (size_t)total : 1);
  if (layers == NULL || data == NULL) {
    free(layers);
    free(data);
    fprintf(stderr, "kvblock: %s: out of memory for a %" PRIu64 "-byte payload\n", path, total);
    return EXIT_REFUSED;
  }
  synthesize(f, elems, data, layers);
  kvs_error err;
  kvs_status st = encode_signed(f, layout, layers, bytes, size, &err);
  free(layers);
  free(data);
  if (st != KVS_OK) {
    fprintf(stderr, "kvblock: %s: %s: %s\n", path, kvs_status_string(st), err.message);
    return EXIT_REFUSED;
  }
  return 0;
}

static int cmd_write(const char *path, const flags *f) {
  kvs_block_layout layout;
  uint64_t elems = 0, total = 0;
  uint8_t *bytes = NULL;
  size_t size = 0;
  int rc = layout_of(f, &layout);
  if (rc == 0) rc = payload_size(f, &elems, &total);
  if (rc == 0) rc = build_block(path, f, layout, elems, total, &bytes, &size);
  if (rc != 0) return rc;
  /* Atomic and durable, as the store writes (blocks/atomic_file.h);
   * only a regular file, or nothing, is replaced. */
  kvs_error err;
  kvs_status st = kvs_write_file_atomic(path, bytes, size, &err);
  free(bytes);
  if (st != KVS_OK) { /* the message names the file */
    fprintf(stderr, "kvblock: %s\n", err.message);
    return EXIT_REFUSED;
  }
  char window[32];
  printf("wrote %s: %zu bytes (model %s, %" PRIu64 " layers x %" PRIu64 " kv heads x %" PRIu64
         ", block %" PRIu64 ", window %s, %s)\n",
         path, size, f->model, f->layers, f->kv_heads, f->head_dim, f->block_size,
         kvs_block_window_describe(layout.sliding_window, window, sizeof window),
         kvs_dtype_name(f->dtype));
  return 0;
}

/* ---- verify, inspect ---- */

/* Decodes FILE into an owned unverified block; one stderr line if not. */
static int load(const char *path, kvs_block_view *view, kvs_unverified_block_t *block) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  kvs_error err;
  kvs_status st = kvs_block_store_read_file(path, &bytes, &len, &err);
  if (st == KVS_ERR_NOT_FOUND) {
    fprintf(stderr, "kvblock: %s: cannot open: no such file\n", path);
    return EXIT_REFUSED;
  }
  if (st != KVS_OK) { /* the message names the file */
    fprintf(stderr, "kvblock: %s\n", err.message);
    return EXIT_REFUSED;
  }
  st = kvs_block_decode_adopt(bytes, len, view, block, &err);
  if (st != KVS_OK) {
    free(bytes);
    fprintf(stderr, "kvblock: %s: %s: %s\n", path,
            st == KVS_ERR_CORRUPT ? "corrupt" : kvs_status_string(st), err.message);
    return EXIT_REFUSED;
  }
  return 0;
}

static void print_refusal(const char *path, const kvs_signature_error *why, const char *message) {
  if (why->field != NULL) {
    fprintf(stderr, "kvblock: %s: %s (field %s): %s\n", path,
            kvs_signature_error_kind_name(why->kind), why->field, message);
  } else {
    fprintf(stderr, "kvblock: %s: %s: %s\n", path, kvs_signature_error_kind_name(why->kind),
            message);
  }
}

static int cmd_verify(const char *path, const flags *f) {
  kvs_block_layout layout;
  int rc = layout_of(f, &layout);
  if (rc != 0) return rc;
  kvs_block_signature reader;
  kvs_error err;
  if (kvs_block_signature_expected(
          f->model, f->weights, f->weights_len, layout, (uint32_t)f->layers, (uint32_t)f->kv_heads,
          (uint32_t)f->head_dim, f->dtype, f->block_size, &reader, &err) != KVS_OK) {
    return usage_error("%s", err.message);
  }
  kvs_block_view view;
  kvs_unverified_block_t ub = NULL;
  rc = load(path, &view, &ub);
  if (rc != 0) return rc;
  kvs_block_t block = NULL;
  kvs_signature_error why;
  kvs_status st = kvs_unverified_block_verify(&ub, &reader, &block, &why, &err);
  kvs_unverified_block_destroy(ub);
  if (st != KVS_OK) {
    if (st == KVS_ERR_SIGNATURE) {
      print_refusal(path, &why, err.message);
    } else {
      fprintf(stderr, "kvblock: %s: %s: %s\n", path, kvs_status_string(st), err.message);
    }
    return EXIT_REFUSED;
  }
  const kvs_block_signature *sig = kvs_block_signature_of(block);
  char window[32];
  printf("%s: verified (model %s, %u layers x %u kv heads x %u, block %u, window %s, %s)\n", path,
         sig->model, (unsigned)sig->n_layers, (unsigned)sig->n_kv_heads, (unsigned)sig->head_dim,
         (unsigned)sig->layout.block_size,
         kvs_block_window_describe(sig->layout.sliding_window, window, sizeof window),
         kvs_dtype_name(sig->dtype));
  kvs_block_destroy(block);
  return 0;
}

/* inspect of a version 3 DSV4 page block: its identity, its sections
 * and the stamp checked against its own payload and digests. */
static int inspect_page(const char *path, const flags *f) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  kvs_error err;
  if (kvs_block_store_read_file(path, &bytes, &len, &err) != KVS_OK) {
    fprintf(stderr, "kvblock: %s\n", err.message);
    return EXIT_REFUSED;
  }
  kvs_page_block_view view;
  kvs_page_section sections[KVS_PAGE_MAX_SECTIONS];
  if (kvs_page_block_decode_view(bytes, len, &view, sections, KVS_PAGE_MAX_SECTIONS, &err) !=
      KVS_OK) {
    fprintf(stderr, "kvblock: %s: corrupt: %s\n", path, err.message);
    free(bytes);
    return EXIT_REFUSED;
  }
  char check[KVS_ERROR_MESSAGE_MAX];
  kvs_signature_error why;
  if (kvs_page_verify_parts(view.marked ? &view.signature : NULL, sections, view.n_sections, NULL,
                            NULL, &why, &err) == KVS_OK) {
    snprintf(check, sizeof check, "ok");
  } else {
    snprintf(check, sizeof check, "%s", err.message);
  }
  const kvs_page_identity *id = &view.signature.id;
  char weights[2 * KVS_BLOCK_WEIGHTS_MAX + 8], sum[24], geometry[24];
  char chain[KVS_BLOCK_HASH_HEX_LEN + 1];
  kvs_block_weights_describe(id->weights, id->weights_len, weights, sizeof weights);
  snprintf(sum, sizeof sum, "%016" PRIx64, view.checksum);
  snprintf(geometry, sizeof geometry, "%016" PRIx64, id->geometry);
  kvs_block_hash_hex(&id->chain, chain);
  json_t *o = json_object();
  json_object_set_new(o, "file", json_string(path));
  json_object_set_new(o, "encoded_bytes", json_integer((json_int_t)view.encoded_bytes));
  json_object_set_new(o, "checksum", json_string(sum));
  json_object_set_new(o, "format_version", json_integer(view.format_version));
  json_object_set_new(o, "readable", json_true());
  json_object_set_new(o, "marked", json_boolean(view.marked));
  if (view.marked) {
    json_t *s = json_object();
    json_object_set_new(s, "model", json_string(id->model));
    json_object_set_new(s, "weights_fingerprint",
                        id->weights_len > 0 ? json_string(weights) : json_null());
    json_object_set_new(s, "page_size", json_integer(id->page_size));
    json_object_set_new(s, "geometry", json_string(geometry));
    json_object_set_new(s, "layer_begin", json_integer(id->layer_begin));
    json_object_set_new(s, "layer_end", json_integer(id->layer_end));
    json_object_set_new(s, "chain", json_string(chain));
    json_object_set_new(s, "depth", json_integer((json_int_t)id->depth));
    json_object_set_new(o, "signature", s);
  }
  json_t *list = json_array();
  for (size_t i = 0; i < view.n_sections; i++) {
    const kvs_page_section *sec = &sections[i];
    char digest[24];
    snprintf(digest, sizeof digest, "%016" PRIx64, sec->digest);
    json_t *e = json_object();
    json_object_set_new(e, "tier", json_string(kvs_page_tier_name(sec->shape.tier)));
    json_object_set_new(e, "encoding", json_string(kvs_page_encoding_name(sec->shape.encoding)));
    json_object_set_new(e, "layers", json_integer(sec->shape.layers));
    json_object_set_new(e, "rows", json_integer(sec->shape.rows));
    json_object_set_new(e, "row_bytes", json_integer(sec->shape.row_bytes));
    json_object_set_new(e, "bytes", json_integer((json_int_t)sec->n_bytes));
    json_object_set_new(e, "digest", json_string(digest));
    json_array_append_new(list, e);
  }
  json_object_set_new(o, "sections", list);
  json_object_set_new(o, "payload_check", json_string(check));
  if (f->json) {
    char *text = json_dumps(o, JSON_INDENT(2));
    if (text != NULL) puts(text);
    free(text);
  } else {
    printf("file:           %s\n", path);
    printf("encoded_bytes:  %zu\n", view.encoded_bytes);
    printf("checksum:       %s (xxh3-64)\n", sum);
    printf("format_version: %u (DSV4 page sections)\n", (unsigned)view.format_version);
    printf("marked:         %s\n", view.marked ? "yes" : "no (unmarked)");
    if (view.marked) {
      printf("model:          %s\n", id->model);
      printf("weights:        %s\n", weights);
      printf("page_size:      %u\n", (unsigned)id->page_size);
      printf("geometry:       %s\n", geometry);
      printf("layers:         %u to %u\n", (unsigned)id->layer_begin, (unsigned)id->layer_end - 1);
      printf("position:       chain %s, depth %" PRIu64 "\n", chain, id->depth);
    }
    for (size_t i = 0; i < view.n_sections; i++) {
      const kvs_page_section *sec = &sections[i];
      printf("section %zu:      %s, %s, %u layers x %u rows x %u bytes, digest %016" PRIx64 "\n", i,
             kvs_page_tier_name(sec->shape.tier), kvs_page_encoding_name(sec->shape.encoding),
             (unsigned)sec->shape.layers, (unsigned)sec->shape.rows, (unsigned)sec->shape.row_bytes,
             sec->digest);
    }
    printf("payload_check:  %s\n", check);
  }
  json_decref(o);
  free(bytes);
  return 0;
}

static int cmd_inspect(const char *path, const flags *f) {
  kvs_block_view view;
  kvs_unverified_block_t ub = NULL;
  int rc = load(path, &view, &ub);
  if (rc != 0) return rc;
  if (view.readable && view.format_version == KVS_PAGE_BLOCK_FORMAT_VERSION) {
    kvs_unverified_block_destroy(ub);
    return inspect_page(path, f);
  }
  /* The stamp against its own payload: no reader, so no compatibility. */
  size_t n_layers = 0;
  const kvs_block_layer *layers = kvs_unverified_block_layers(ub, &n_layers);
  kvs_signature_error why;
  kvs_error err;
  char check[KVS_ERROR_MESSAGE_MAX];
  if (kvs_block_verify_parts(kvs_unverified_block_signature(ub), layers, n_layers, NULL, NULL, &why,
                             &err) == KVS_OK) {
    snprintf(check, sizeof check, "ok");
  } else {
    snprintf(check, sizeof check, "%s", err.message);
  }
  const kvs_block_signature *sig = &view.signature;
  char window[32], weights[2 * KVS_BLOCK_WEIGHTS_MAX + 8], sum[24];
  kvs_block_window_describe(sig->layout.sliding_window, window, sizeof window);
  kvs_block_weights_describe(sig->weights, sig->weights_len, weights, sizeof weights);
  snprintf(sum, sizeof sum, "%016" PRIx64, view.checksum);
  bool full = view.marked && view.readable;

  if (f->json) {
    json_t *o = json_object();
    json_object_set_new(o, "file", json_string(path));
    json_object_set_new(o, "encoded_bytes", json_integer((json_int_t)view.encoded_bytes));
    json_object_set_new(o, "checksum", json_string(sum));
    json_object_set_new(o, "format_version", json_integer(view.format_version));
    json_object_set_new(o, "readable", json_boolean(view.readable));
    json_object_set_new(o, "marked", json_boolean(view.marked));
    if (full) {
      json_t *s = json_object();
      json_object_set_new(s, "model", json_string(sig->model));
      json_object_set_new(s, "weights_fingerprint",
                          sig->weights_len > 0 ? json_string(weights) : json_null());
      json_object_set_new(s, "n_layers", json_integer(sig->n_layers));
      json_object_set_new(s, "n_kv_heads", json_integer(sig->n_kv_heads));
      json_object_set_new(s, "head_dim", json_integer(sig->head_dim));
      json_object_set_new(s, "dtype", json_string(kvs_dtype_name(sig->dtype)));
      json_object_set_new(s, "tokens", json_integer((json_int_t)sig->tokens));
      json_object_set_new(s, "block_size", json_integer(sig->layout.block_size));
      json_object_set_new(
          s, "sliding_window",
          sig->layout.sliding_window != 0 ? json_integer(sig->layout.sliding_window) : json_null());
      json_object_set_new(o, "signature", s);
    }
    json_object_set_new(o, "payload_layers", json_integer((json_int_t)view.n_layers));
    json_object_set_new(o, "payload_check", json_string(check));
    char *text = json_dumps(o, JSON_INDENT(2));
    if (text != NULL) puts(text);
    free(text);
    json_decref(o);
  } else {
    printf("file:           %s\n", path);
    printf("encoded_bytes:  %zu\n", view.encoded_bytes);
    printf("checksum:       %s (xxh3-64)\n", sum);
    printf("format_version: %u%s\n", (unsigned)view.format_version,
           view.readable ? "" : " (not readable by this build)");
    printf("marked:         %s\n", view.marked ? "yes" : "no (unmarked)");
    if (full) {
      printf("model:          %s\n", sig->model);
      printf("weights:        %s\n", weights);
      printf("n_layers:       %u\n", (unsigned)sig->n_layers);
      printf("n_kv_heads:     %u\n", (unsigned)sig->n_kv_heads);
      printf("head_dim:       %u\n", (unsigned)sig->head_dim);
      printf("dtype:          %s\n", kvs_dtype_name(sig->dtype));
      printf("tokens:         %" PRIu64 "\n", sig->tokens);
      printf("block_size:     %u\n", (unsigned)sig->layout.block_size);
      printf("sliding_window: %s\n", window);
    }
    printf("payload_layers: %zu\n", view.n_layers);
    printf("payload_check:  %s\n", check);
  }
  kvs_unverified_block_destroy(ub);
  return 0;
}

static int run(int argc, char **argv) {
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    fputs(usage_text, stdout);
    return 0;
  }
  if (argc < 3) {
    fprintf(stderr,
            "kvblock: %s: kvblock write|verify|inspect FILE [flags] (kvblock --help lists every "
            "flag)\n",
            argc < 2 ? "a command and a FILE are needed" : "a FILE is needed");
    return EXIT_USAGE;
  }
  const char *cmd = argv[1], *path = argv[2];
  if (strncmp(path, "--", 2) == 0) return usage_error("expected FILE, not '%s'", path);
  flags f;
  int rc;
  if (strcmp(cmd, "write") == 0) {
    rc = parse_flags(argc - 3, argv + 3, true, true, false, &f);
    return rc != 0 ? rc : cmd_write(path, &f);
  }
  if (strcmp(cmd, "verify") == 0) {
    rc = parse_flags(argc - 3, argv + 3, true, true, false, &f);
    return rc != 0 ? rc : cmd_verify(path, &f);
  }
  if (strcmp(cmd, "inspect") == 0) {
    rc = parse_flags(argc - 3, argv + 3, false, false, true, &f);
    return rc != 0 ? rc : cmd_inspect(path, &f);
  }
  static const char *const commands[] = {"write", "verify", "inspect"};
  const char *near = kvs_nearest_flag(cmd, commands, 3);
  fprintf(stderr, "kvblock: unknown command '%s'%s%s%s (kvblock --help lists them)\n", cmd,
          near != NULL ? "; did you mean " : "", near != NULL ? near : "", near != NULL ? "?" : "");
  return EXIT_USAGE;
}

int main(int argc, char **argv) {
  int rc = kvs_require_stdout("kvblock", EXIT_REFUSED);
  return rc != 0 ? rc : kvs_finish_stdout("kvblock", run(argc, argv), EXIT_REFUSED);
}

/* The header of a .safetensors file, read through jansson without touching
 * tensor data: the whole header is checked first, then each tensor is
 * handed to the caller. */
#include "core/safetensors.h"

#include "core/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_kind.h"

/* The dtypes of the safetensors format (0.6), with their width in bits so
 * that the sub-byte ones (F4, F6_*) are sized exactly: a tensor's span is
 * elements x bits / 8, and a count of bits that is not whole bytes is
 * refused, as the format's own reader does. */
static const struct {
  const char *name;
  unsigned bits;
} dtypes[] = {
    {"BOOL", 8}, {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
    {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
    {"U16", 16}, {"F16", 16},    {"BF16", 16},   {"I32", 32},    {"U32", 32},
    {"F32", 32}, {"C64", 64},    {"F64", 64},    {"I64", 64},    {"U64", 64},
};

#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

/* For the message that refuses an unknown dtype. */
#define KNOWN_DTYPES                                                                          \
  "BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, " \
  "U32, F32, C64, F64, I64, U64"

static unsigned dtype_bits(const char *name) {
  for (size_t i = 0; i < N_DTYPES; i++) {
    if (strcmp(name, dtypes[i].name) == 0) return dtypes[i].bits;
  }
  return 0;
}

/* A JSON integer as an unsigned 64-bit value; false for anything else or a
 * negative (jansson holds json_int_t, so u64 values past INT64_MAX cannot
 * be represented and are refused as not an integer by the parser). */
static int as_u64(const json_t *value, uint64_t *out) {
  if (!json_is_integer(value) || json_integer_value(value) < 0) return 0;
  *out = (uint64_t)json_integer_value(value);
  return 1;
}

/* Checks one tensor's entry and gives its bytes. */
static kvs_status check_tensor(const char *path, const char *name, json_t *entry,
                               uint64_t data_bytes, uint64_t *bytes, kvs_error *err) {
  if (!json_is_object(entry)) {
    return kvs_error_set(err, KVS_ERR_PARSE, "safetensors file %s: tensor %s is not a JSON object",
                         path, name);
  }
  json_t *dtype = json_object_get(entry, "dtype");
  if (dtype == NULL || !json_is_string(dtype)) {
    return kvs_error_set(err, KVS_ERR_PARSE, "safetensors file %s: tensor %s: field dtype %s", path,
                         name, dtype == NULL ? "is missing" : "must be a string");
  }
  unsigned bits = dtype_bits(json_string_value(dtype));
  if (bits == 0) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: tensor %s: dtype \"%s\" is unknown (known: %s)",
                         path, name, json_string_value(dtype), KNOWN_DTYPES);
  }
  json_t *shape = json_object_get(entry, "shape");
  if (shape == NULL || !json_is_array(shape)) {
    return kvs_error_set(err, KVS_ERR_PARSE, "safetensors file %s: tensor %s: field shape %s", path,
                         name, shape == NULL ? "is missing" : "must be an array");
  }
  /* The element count, overflow-checked; an empty shape is a scalar and a
   * zero dimension makes the tensor empty whatever the others say. */
  size_t rank = json_array_size(shape);
  for (size_t i = 0; i < rank; i++) {
    uint64_t dim;
    if (!as_u64(json_array_get(shape, i), &dim)) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "safetensors file %s: tensor %s: shape[%zu] must be a non-negative "
                           "integer",
                           path, name, i);
    }
  }
  uint64_t elements = 1;
  for (size_t i = 0; i < rank; i++) {
    if (json_integer_value(json_array_get(shape, i)) == 0) elements = 0;
  }
  for (size_t i = 0; elements != 0 && i < rank; i++) {
    uint64_t dim = (uint64_t)json_integer_value(json_array_get(shape, i));
    if (elements > UINT64_MAX / dim) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "safetensors file %s: tensor %s: shape does not fit in 64 bits", path,
                           name);
    }
    elements *= dim;
  }
  if (elements > UINT64_MAX / bits) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: tensor %s: shape x dtype does not fit in 64 bits",
                         path, name);
  }
  uint64_t total_bits = elements * bits;
  if (total_bits % 8 != 0) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: tensor %s: shape x dtype is %llu bits, not whole "
                         "bytes",
                         path, name, (unsigned long long)total_bits);
  }
  json_t *offsets = json_object_get(entry, "data_offsets");
  uint64_t begin = 0, end = 0;
  if (offsets == NULL || !json_is_array(offsets) || json_array_size(offsets) != 2 ||
      !as_u64(json_array_get(offsets, 0), &begin) || !as_u64(json_array_get(offsets, 1), &end)) {
    return kvs_error_set(
        err, KVS_ERR_PARSE, "safetensors file %s: tensor %s: field data_offsets %s", path, name,
        offsets == NULL ? "is missing" : "must be two non-negative integers [begin, end]");
  }
  if (begin > end) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: tensor %s: data_offsets [%llu, %llu] are reversed "
                         "(begin past end)",
                         path, name, (unsigned long long)begin, (unsigned long long)end);
  }
  if (end > data_bytes) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: tensor %s: data_offsets end %llu is past the %llu "
                         "bytes of data",
                         path, name, (unsigned long long)end, (unsigned long long)data_bytes);
  }
  if (end - begin != total_bits / 8) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: tensor %s: data_offsets span %llu bytes but shape "
                         "x dtype %s is %llu bytes",
                         path, name, (unsigned long long)(end - begin), json_string_value(dtype),
                         (unsigned long long)(total_bits / 8));
  }
  *bytes = end - begin;
  return KVS_OK;
}

/* Reads exactly len bytes at offset; a file that ends first is refused. */
static kvs_status read_exact(int fd, const char *path, unsigned char *buf, size_t len, off_t offset,
                             kvs_error *err) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = pread(fd, buf + done, len - done, offset + (off_t)done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return kvs_error_set(err, KVS_ERR_IO, "cannot read safetensors file %s: %s", path,
                           strerror(errno));
    }
    if (n == 0) {
      return kvs_error_set(err, KVS_ERR_IO,
                           "safetensors file %s ended after %llu of %llu header bytes (was it "
                           "truncated while read?)",
                           path, (unsigned long long)(offset + (off_t)done),
                           (unsigned long long)(offset + (off_t)len));
    }
    done += (size_t)n;
  }
  return KVS_OK;
}

/* One tensor's [begin, end) in the data, for the tiling check. */
typedef struct span {
  uint64_t begin, end;
  const char *name; /* the header's key: valid while the parsed header is */
} span;

/* By begin, then end, then name: a deterministic order, so the tensor a
 * refusal names does not depend on the header's key order. */
static int compare_spans(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* The data must be tiled exactly, as the format's loaders require: in
 * offset order each tensor begins where the one before ends (the first at
 * 0), and the last ends with the file. A gap is bytes no tensor owns, an
 * overlap bytes two tensors claim (three tensors at one offset, say), and
 * both mean the header does not describe the file. Empty tensors ([k, k])
 * may share an offset. Sorts spans. */
static kvs_status check_tiling(const char *path, span *spans, size_t n, uint64_t data_bytes,
                               kvs_error *err) {
  if (n > 1) qsort(spans, n, sizeof *spans, compare_spans);
  uint64_t covered = 0;
  for (size_t i = 0; i < n; i++) {
    if (spans[i].begin > covered && i == 0) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "safetensors file %s: data bytes [0, %llu) belong to no tensor: the "
                           "first tensor, %s, begins at %llu, not 0",
                           path, (unsigned long long)spans[i].begin, spans[i].name,
                           (unsigned long long)spans[i].begin);
    }
    if (spans[i].begin > covered) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "safetensors file %s: data bytes [%llu, %llu) belong to no tensor: "
                           "tensor %s ends at %llu and the next, %s, begins at %llu",
                           path, (unsigned long long)covered, (unsigned long long)spans[i].begin,
                           spans[i - 1].name, (unsigned long long)covered, spans[i].name,
                           (unsigned long long)spans[i].begin);
    }
    if (spans[i].begin < covered) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "safetensors file %s: tensor %s at data_offsets [%llu, %llu] overlaps "
                           "tensor %s at [%llu, %llu]: every data byte belongs to one tensor",
                           path, spans[i].name, (unsigned long long)spans[i].begin,
                           (unsigned long long)spans[i].end, spans[i - 1].name,
                           (unsigned long long)spans[i - 1].begin,
                           (unsigned long long)spans[i - 1].end);
    }
    covered = spans[i].end;
  }
  if (covered != data_bytes) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: its %zu tensors cover %llu of the %llu data bytes: "
                         "bytes [%llu, %llu) belong to no tensor",
                         path, n, (unsigned long long)covered, (unsigned long long)data_bytes,
                         (unsigned long long)covered, (unsigned long long)data_bytes);
  }
  return KVS_OK;
}

/* __metadata__ must be an object of strings. */
static kvs_status check_metadata(const char *path, json_t *entry, kvs_error *err) {
  if (!json_is_object(entry)) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: field __metadata__ must be an object of "
                         "strings",
                         path);
  }
  const char *key;
  json_t *value;
  json_object_foreach(entry, key, value) {
    if (!json_is_string(value)) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "safetensors file %s: field __metadata__.%s must be a string", path,
                           key);
    }
  }
  return KVS_OK;
}

/* Checks every entry of the parsed header, each tensor's span into
 * spans[0 .. *n) (room for every key), then that the spans tile the data. */
static kvs_status check_entries(const char *path, json_t *root, uint64_t data_bytes, span *spans,
                                size_t *n, kvs_error *err) {
  const char *name;
  json_t *entry;
  *n = 0;
  json_object_foreach(root, name, entry) {
    kvs_status status;
    if (strcmp(name, "__metadata__") == 0) {
      status = check_metadata(path, entry, err);
    } else {
      uint64_t bytes;
      status = check_tensor(path, name, entry, data_bytes, &bytes, err);
      if (status == KVS_OK) {
        json_t *offsets = json_object_get(entry, "data_offsets");
        spans[*n].begin = (uint64_t)json_integer_value(json_array_get(offsets, 0));
        spans[*n].end = (uint64_t)json_integer_value(json_array_get(offsets, 1));
        spans[(*n)++].name = name;
      }
    }
    if (status != KVS_OK) return status;
  }
  return check_tiling(path, spans, *n, data_bytes, err);
}

/* Checks the parsed header and, when it all checks out, walks it. */
static kvs_status walk_header(const char *path, json_t *root, uint64_t data_bytes, kvs_tensor_fn fn,
                              void *ctx, uint64_t *n_out, kvs_error *err) {
  if (!json_is_object(root)) {
    return kvs_error_set(err, KVS_ERR_PARSE, "safetensors file %s: header is not a JSON object",
                         path);
  }
  size_t keys = json_object_size(root);
  span *spans = malloc((keys > 0 ? keys : 1) * sizeof *spans);
  if (spans == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY,
                         "no memory to check the %zu tensors of safetensors file %s", keys, path);
  }
  size_t n = 0;
  /* First pass: every entry, and the tiling, before the caller sees any. */
  kvs_status status = check_entries(path, root, data_bytes, spans, &n, err);
  free(spans);
  if (status != KVS_OK) return status;
  /* Second pass, in header order (jansson keeps insertion order). */
  const char *name;
  json_t *entry;
  if (fn != NULL) {
    json_object_foreach(root, name, entry) {
      if (strcmp(name, "__metadata__") == 0) continue;
      uint64_t bytes = 0;
      (void)check_tensor(path, name, entry, data_bytes, &bytes, NULL);
      status = fn(ctx, name, bytes, err);
      if (status != KVS_OK) return status;
    }
  }
  if (n_out != NULL) *n_out = n;
  return KVS_OK;
}

kvs_status kvs_safetensors_read_header(const char *path, kvs_tensor_fn fn, void *ctx,
                                       uint64_t *n_tensors, kvs_error *err) {
  if (path == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: path is NULL", __func__);
  }
  int fd;
  uint64_t file_bytes;
  kvs_status opened =
      kvs_open_regular(path, "safetensors file", UINT64_MAX, &fd, &file_bytes, NULL, err);
  if (opened != KVS_OK) return opened;
  if (file_bytes < 8) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s is %llu bytes, too short for its 8-byte header "
                         "length",
                         path, (unsigned long long)file_bytes);
  }
  unsigned char prefix[8];
  kvs_status status = read_exact(fd, path, prefix, sizeof prefix, 0, err);
  if (status != KVS_OK) {
    close(fd);
    return status;
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; i--) header_bytes = header_bytes << 8 | prefix[i];
  /* Both limits are checked before a byte of the header is read. */
  if (header_bytes > file_bytes - 8) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: header length %llu lies about its length: only "
                         "%llu bytes follow it",
                         path, (unsigned long long)header_bytes,
                         (unsigned long long)(file_bytes - 8));
  }
  if (header_bytes > KVS_SAFETENSORS_MAX_HEADER) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: header length %llu is more than the %u-byte limit",
                         path, (unsigned long long)header_bytes, KVS_SAFETENSORS_MAX_HEADER);
  }
  /* +1 so a zero-length header still has a buffer. */
  unsigned char *text = malloc((size_t)header_bytes + 1);
  if (text == NULL) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the %llu-byte header of %s",
                         (unsigned long long)header_bytes, path);
  }
  status = read_exact(fd, path, text, (size_t)header_bytes, 8, err);
  close(fd);
  if (status != KVS_OK) {
    free(text);
    return status;
  }
  json_error_t jerr;
  json_t *root =
      json_loadb((const char *)text, (size_t)header_bytes, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (root == NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "safetensors file %s: header is not valid JSON: line %d column %d: %s",
                         path, jerr.line, jerr.column, jerr.text);
  }
  status = walk_header(path, root, file_bytes - 8 - header_bytes, fn, ctx, n_tensors, err);
  json_decref(root);
  return status;
}

/* Geometry from a model's config.json, through jansson, and the built-in
 * geometries compiled from the shipped config files. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_kind.h"
#include "core/geometry.h"

/* From the JSON files in core/models/, embedded at build time (embed_text.sh). */
extern const char kvs_model_dsv4_flash_json[];
extern const char kvs_model_dsv4_pro_json[];

static const struct {
  const char *name;
  const char *json;
} builtins[] = {
    {"dsv4-flash", kvs_model_dsv4_flash_json},
    {"dsv4-pro", kvs_model_dsv4_pro_json},
};

#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

static kvs_status read_uint(json_t *root, const char *field, uint64_t max, uint64_t *out,
                            kvs_error *err) {
  json_t *value = json_object_get(root, field);
  if (value == NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE, "config field %s is missing", field);
  }
  if (!json_is_integer(value) || json_integer_value(value) < 0 ||
      (uint64_t)json_integer_value(value) > max) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "config field %s must be an integer in [0, %llu]", field,
                         (unsigned long long)max);
  }
  *out = (uint64_t)json_integer_value(value);
  return KVS_OK;
}

kvs_status kvs_geometry_parse_json(const char *text, size_t len, kvs_geometry *out,
                                   kvs_error *err) {
  if (text == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "config text or output is NULL");
  }
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE, "config is not valid JSON: line %d column %d: %s",
                         jerr.line, jerr.column, jerr.text);
  }
  kvs_status status = KVS_OK;
  if (!json_is_object(root)) {
    status = kvs_error_set(err, KVS_ERR_PARSE, "config is not a JSON object");
    goto done;
  }
  uint64_t n_layers = 0, head_dim = 0, index_head_dim = 0;
  if ((status = read_uint(root, "num_hidden_layers", KVS_MAX_LAYERS, &n_layers, err)) ||
      (status = read_uint(root, "head_dim", UINT32_MAX, &head_dim, err)) ||
      (status = read_uint(root, "index_head_dim", UINT32_MAX, &index_head_dim, err))) {
    goto done;
  }
  json_t *ratios = json_object_get(root, "compress_ratios");
  if (ratios == NULL || !json_is_array(ratios)) {
    status = kvs_error_set(err, KVS_ERR_PARSE, "config field compress_ratios %s",
                           ratios == NULL ? "is missing" : "must be an array of integers");
    goto done;
  }
  size_t n_ratios = json_array_size(ratios);
  if (n_ratios > KVS_MAX_LAYERS) {
    status = kvs_error_set(err, KVS_ERR_PARSE,
                           "config field compress_ratios has %zu entries, more than %d",
                           n_ratios, KVS_MAX_LAYERS);
    goto done;
  }
  /* Built in a scratch value so a refusal leaves *out untouched. */
  kvs_geometry *parsed = malloc(sizeof *parsed);
  if (parsed == NULL) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a geometry");
    goto done;
  }
  memset(parsed, 0, sizeof *parsed);
  parsed->head_dim = head_dim;
  parsed->index_head_dim = index_head_dim;
  parsed->n_layers = (size_t)n_layers;
  parsed->n_ratios = n_ratios;
  for (size_t i = 0; i < n_ratios; i++) {
    json_t *entry = json_array_get(ratios, i);
    if (!json_is_integer(entry) || json_integer_value(entry) < 0 ||
        json_integer_value(entry) > (json_int_t)UINT32_MAX) {
      status = kvs_error_set(err, KVS_ERR_PARSE,
                             "config field compress_ratios[%zu] must be a non-negative integer",
                             i);
      free(parsed);
      goto done;
    }
    parsed->compress_ratios[i] = (uint32_t)json_integer_value(entry);
  }
  status = kvs_geometry_check_every_layer_has_a_ratio(parsed, "config field num_hidden_layers",
                                                       "compress_ratios", err);
  if (status == KVS_OK) status = kvs_geometry_validate(parsed, err);
  if (status == KVS_OK) *out = *parsed;
  free(parsed);
done:
  json_decref(root);
  return status;
}


kvs_status kvs_geometry_load_file(const char *path, kvs_geometry *out, kvs_error *err) {
  /* Only a regular file is read. O_NONBLOCK keeps the open of a FIFO from
   * waiting for a writer forever; fstat then refuses it by its type. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    return kvs_error_set(err, KVS_ERR_IO, "cannot open model config %s: %s", path,
                         strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    kvs_status status =
        kvs_error_set(err, KVS_ERR_IO, "cannot stat model config %s: %s", path, strerror(errno));
    close(fd);
    return status;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_IO, "model config %s is %s, not a regular file", path,
                         kvs_file_kind(st.st_mode));
  }
  /* Model configs are a few KiB; anything past 16 MiB is not one, and is
   * refused by its size before a byte of it is read. */
  enum { MAX_CONFIG_BYTES = 16 << 20 };
  if (st.st_size > MAX_CONFIG_BYTES) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_PARSE, "model config %s is larger than %d bytes", path,
                         MAX_CONFIG_BYTES);
  }
  FILE *file = fdopen(fd, "rb");
  if (file == NULL) {
    kvs_status status =
        kvs_error_set(err, KVS_ERR_IO, "cannot read model config %s: %s", path, strerror(errno));
    close(fd);
    return status;
  }
  char *text = malloc(MAX_CONFIG_BYTES);
  if (text == NULL) {
    fclose(file);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to read %s", path);
  }
  size_t len = fread(text, 1, MAX_CONFIG_BYTES, file);
  int read_failed = ferror(file);
  int too_long = len == MAX_CONFIG_BYTES && fgetc(file) != EOF; /* it grew while read */
  fclose(file);
  kvs_status status;
  if (read_failed) {
    status = kvs_error_set(err, KVS_ERR_IO, "cannot read model config %s", path);
  } else if (too_long) {
    status = kvs_error_set(err, KVS_ERR_PARSE, "model config %s is larger than %d bytes", path,
                           MAX_CONFIG_BYTES);
  } else {
    status = kvs_geometry_parse_json(text, len, out, err);
    if (status == KVS_ERR_PARSE && err != NULL) {
      /* Prefix the file so the message names where the bad field is. */
      char inner[KVS_ERROR_MESSAGE_MAX];
      memcpy(inner, err->message, sizeof inner);
      kvs_error_set(err, status, "%s: %s", path, inner);
    }
  }
  free(text);
  return status;
}

const char *kvs_geometry_builtin_name(size_t index) {
  return index < N_BUILTINS ? builtins[index].name : NULL;
}

kvs_status kvs_geometry_builtin(const char *name, kvs_geometry *out, kvs_error *err) {
  for (size_t i = 0; name != NULL && i < N_BUILTINS; i++) {
    if (strcmp(name, builtins[i].name) == 0) {
      return kvs_geometry_parse_json(builtins[i].json, strlen(builtins[i].json), out, err);
    }
  }
  return kvs_error_set(err, KVS_ERR_NOT_FOUND, "no built-in model named '%s' (known: %s, %s)",
                       name == NULL ? "(null)" : name, builtins[0].name, builtins[1].name);
}

kvs_status kvs_geometry_resolve(const char *name_or_path, kvs_geometry *out, kvs_error *err) {
  for (size_t i = 0; name_or_path != NULL && i < N_BUILTINS; i++) {
    if (strcmp(name_or_path, builtins[i].name) == 0) {
      return kvs_geometry_builtin(name_or_path, out, err);
    }
  }
  if (name_or_path == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "model name is NULL");
  }
  kvs_status status = kvs_geometry_load_file(name_or_path, out, err);
  /* A bare word that is no file was meant as a built-in name: say which
   * names there are, not only that no such file exists. */
  if (status == KVS_ERR_IO && strchr(name_or_path, '/') == NULL &&
      access(name_or_path, F_OK) != 0) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND,
                         "'%s' is neither a built-in model (%s, %s) nor a config.json file",
                         name_or_path, builtins[0].name, builtins[1].name);
  }
  return status;
}

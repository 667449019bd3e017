/* Geometry from a model's config.json, through jansson, and the built-in
 * geometries compiled from the shipped config files. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_kind.h"
#include "core/regular_file.h"
#include "core/geometry.h"
#include "core/model_config.h"

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
    return kvs_error_set(err, KVS_ERR_PARSE, "config field %s must be an integer in [0, %llu]",
                         field, (unsigned long long)max);
  }
  *out = (uint64_t)json_integer_value(value);
  return KVS_OK;
}

/* Every reader's arguments: what to read (called name) and somewhere to
 * put it. */
static kvs_status in_and_out(const char *fn, const void *in, const char *name, const void *out,
                             kvs_error *err) {
  if (in == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  return KVS_OK;
}

kvs_status kvs_geometry_parse_json(const char *text, size_t len, kvs_geometry *out,
                                   kvs_error *err) {
  kvs_status checked = in_and_out(__func__, text, "text", out, err);
  if (checked != KVS_OK) return checked;
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
                           "config field compress_ratios has %zu entries, more than %d", n_ratios,
                           KVS_MAX_LAYERS);
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
                             "config field compress_ratios[%zu] must be a non-negative integer", i);
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

/* Reads a config file into a heap buffer (*text, *len; the caller frees);
 * only a regular file (kvs_open_regular). */
static kvs_status read_config_text(const char *path, char **text_out, size_t *len_out,
                                   kvs_error *err) {
  /* Model configs are a few KiB; anything past 16 MiB is not one, and is
   * refused by its size before a byte of it is read. */
  enum { MAX_CONFIG_BYTES = 16 << 20 };
  int fd;
  uint64_t size;
  kvs_status opened =
      kvs_open_regular(path, "model config", MAX_CONFIG_BYTES, &fd, &size, NULL, err);
  if (opened != KVS_OK) return opened;
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
  if (read_failed || too_long) {
    free(text);
    return read_failed
               ? kvs_error_set(err, KVS_ERR_IO, "cannot read model config %s", path)
               : kvs_error_set(err, KVS_ERR_PARSE, "model config %s is larger than %d bytes", path,
                               MAX_CONFIG_BYTES);
  }
  *text_out = text;
  *len_out = len;
  return KVS_OK;
}

/* Prefixes a refusal of the file's content (a malformed field, an unknown
 * ratio, a width of 0, too few ratios) with the file, so the message names
 * where the bad field is. */
static kvs_status name_the_file(kvs_status status, const char *path, kvs_error *err) {
  if (status != KVS_OK && status != KVS_ERR_NO_MEMORY && err != NULL) {
    char inner[KVS_ERROR_MESSAGE_MAX];
    memcpy(inner, err->message, sizeof inner);
    kvs_error_set(err, status, "%s: %s", path, inner);
  }
  return status;
}

kvs_status kvs_geometry_load_file(const char *path, kvs_geometry *out, kvs_error *err) {
  kvs_status checked = in_and_out(__func__, path, "path", out, err);
  if (checked != KVS_OK) return checked;
  char *text = NULL;
  size_t len = 0;
  kvs_status status = read_config_text(path, &text, &len, err);
  if (status != KVS_OK) return status;
  status = name_the_file(kvs_geometry_parse_json(text, len, out, err), path, err);
  free(text);
  return status;
}

/* ---- the model config: the geometry and the deployment fields ---- */

kvs_status kvs_model_config_parse_json(const char *text, size_t len, kvs_model_config *out,
                                       kvs_error *err) {
  kvs_status checked = in_and_out(__func__, text, "text", out, err);
  if (checked != KVS_OK) return checked;
  kvs_model_config *m = calloc(1, sizeof *m);
  if (m == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a model config");
  kvs_status status = kvs_geometry_parse_json(text, len, &m->geometry, err);
  json_t *root = NULL;
  if (status == KVS_OK) {
    /* The geometry parse has vetted the text: valid JSON, an object. */
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    if (root == NULL) status = kvs_error_set(err, KVS_ERR_PARSE, "config is not valid JSON");
  }
  if (status == KVS_OK &&
      ((status = read_uint(root, "qk_rope_head_dim", UINT32_MAX, &m->qk_rope_head_dim, err)) ||
       (status = read_uint(root, "sliding_window", UINT32_MAX, &m->sliding_window, err)) ||
       (status = read_uint(root, "num_nextn_predict_layers", KVS_MAX_LAYERS, &m->n_nextn, err)))) {
    /* status holds the refusal */
  }
  if (status == KVS_OK && json_object_get(root, "max_position_embeddings") != NULL) {
    status = read_uint(root, "max_position_embeddings", UINT64_C(1) << 40, &m->context_len, err);
  }
  if (status == KVS_OK && m->qk_rope_head_dim >= m->geometry.head_dim) {
    status = kvs_error_set(err, KVS_ERR_PARSE,
                           "config field qk_rope_head_dim is %llu, not below head_dim %llu: the "
                           "rope part is a slice of the KV row",
                           (unsigned long long)m->qk_rope_head_dim,
                           (unsigned long long)m->geometry.head_dim);
  }
  if (status == KVS_OK && m->sliding_window == 0) {
    status = kvs_error_set(err, KVS_ERR_PARSE, "config field sliding_window is 0");
  }
  if (status == KVS_OK) *out = *m;
  json_decref(root);
  free(m);
  return status;
}

kvs_status kvs_model_config_planned_geometry(const kvs_model_config *model, uint64_t n_mtp,
                                             kvs_geometry *out, kvs_error *err) {
  if (model == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: model is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  const kvs_geometry *g = &model->geometry;
  if (n_mtp == 0) {
    *out = *g;
    return KVS_OK;
  }
  if (g->n_ratios <= g->n_layers) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%llu MTP layers need the compress ratio after the last of the %zu "
                         "layers, and compress_ratios lists only %zu",
                         (unsigned long long)n_mtp, g->n_layers, g->n_ratios);
  }
  if (n_mtp > KVS_MAX_LAYERS - g->n_layers) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%llu MTP layers on %zu layers pass the %d layers a stack holds",
                         (unsigned long long)n_mtp, g->n_layers, KVS_MAX_LAYERS);
  }
  kvs_geometry *planned = malloc(sizeof *planned);
  if (planned == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a geometry");
  *planned = *g;
  uint32_t ratio = g->compress_ratios[g->n_layers];
  planned->n_layers = g->n_layers + (size_t)n_mtp;
  planned->n_ratios = planned->n_layers;
  for (size_t i = g->n_layers; i < planned->n_layers; i++) planned->compress_ratios[i] = ratio;
  kvs_status status = kvs_geometry_validate(planned, err);
  if (status == KVS_OK) *out = *planned;
  free(planned);
  return status;
}

static kvs_status load_model_file(const char *path, kvs_model_config *out, kvs_error *err) {
  char *text = NULL;
  size_t len = 0;
  kvs_status status = read_config_text(path, &text, &len, err);
  if (status != KVS_OK) return status;
  status = name_the_file(kvs_model_config_parse_json(text, len, out, err), path, err);
  free(text);
  return status;
}

const char *kvs_geometry_builtin_name(size_t index) {
  return index < N_BUILTINS ? builtins[index].name : NULL;
}

kvs_status kvs_geometry_builtin(const char *name, kvs_geometry *out, kvs_error *err) {
  if (name == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: name is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  for (size_t i = 0; i < N_BUILTINS; i++) {
    if (strcmp(name, builtins[i].name) == 0) {
      return kvs_geometry_parse_json(builtins[i].json, strlen(builtins[i].json), out, err);
    }
  }
  return kvs_error_set(err, KVS_ERR_NOT_FOUND, "no built-in model named '%s' (known: %s, %s)", name,
                       builtins[0].name, builtins[1].name);
}

/* A model folder's config path into buf: false (err filled) when the
 * folder has none or the path is too long. */
static bool folder_config(const char *folder, char *buf, size_t cap, kvs_status *status,
                          kvs_error *err) {
  int n = snprintf(buf, cap, "%s/config.json", folder);
  if (n < 0 || (size_t)n >= cap) {
    *status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "model folder path %.64s... is too long",
                            folder);
    return false;
  }
  struct stat st;
  if (stat(buf, &st) != 0) {
    *status = kvs_error_set(err, KVS_ERR_IO,
                            "model folder %s has no config.json (%s): a model folder holds the "
                            "config.json it was published with",
                            folder, strerror(errno));
    return false;
  }
  return true;
}

static bool is_directory(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The config file a non-built-in name reads (*file): a folder's
 * config.json, built in buf (KVS_MODEL_PATH_MAX + 16 bytes), or the name
 * itself. */
static kvs_status config_path_of(const char *name, char *buf, const char **file, bool *folder,
                                 kvs_error *err) {
  *folder = is_directory(name);
  *file = *folder ? buf : name;
  if (!*folder) return KVS_OK;
  if (strlen(name) >= KVS_MODEL_PATH_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "model folder path %.64s... is too long",
                         name);
  }
  kvs_status status;
  return folder_config(name, buf, KVS_MODEL_PATH_MAX + 16, &status, err) ? KVS_OK : status;
}

/* A bare word that is no file was meant as a built-in name: say which
 * names there are, not only that no such file exists. */
static kvs_status name_the_builtins(kvs_status status, const char *name, kvs_error *err) {
  if (status == KVS_ERR_IO && strchr(name, '/') == NULL && access(name, F_OK) != 0) {
    return kvs_error_set(err, KVS_ERR_NOT_FOUND,
                         "'%s' is neither a built-in model (%s, %s), a model folder nor a "
                         "config.json file",
                         name, builtins[0].name, builtins[1].name);
  }
  return status;
}

kvs_status kvs_geometry_resolve(const char *name_or_path, kvs_geometry *out, kvs_error *err) {
  kvs_status checked = in_and_out(__func__, name_or_path, "name_or_path", out, err);
  if (checked != KVS_OK) return checked;
  for (size_t i = 0; i < N_BUILTINS; i++) {
    if (strcmp(name_or_path, builtins[i].name) == 0) {
      return kvs_geometry_builtin(name_or_path, out, err);
    }
  }
  char buf[KVS_MODEL_PATH_MAX + 16];
  const char *file;
  bool folder;
  kvs_status status = config_path_of(name_or_path, buf, &file, &folder, err);
  if (status == KVS_OK) status = kvs_geometry_load_file(file, out, err);
  return name_the_builtins(status, name_or_path, err);
}

kvs_status kvs_model_config_resolve(const char *name_or_path, kvs_model_config *out,
                                    kvs_error *err) {
  kvs_status checked = in_and_out(__func__, name_or_path, "name_or_path", out, err);
  if (checked != KVS_OK) return checked;
  for (size_t i = 0; i < N_BUILTINS; i++) {
    if (strcmp(name_or_path, builtins[i].name) == 0) {
      return kvs_model_config_parse_json(builtins[i].json, strlen(builtins[i].json), out, err);
    }
  }
  char buf[KVS_MODEL_PATH_MAX + 16];
  const char *file;
  bool folder;
  kvs_status status = config_path_of(name_or_path, buf, &file, &folder, err);
  if (status != KVS_OK) return status;
  kvs_model_config *m = malloc(sizeof *m);
  if (m == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a model config");
  status = load_model_file(file, m, err);
  if (status == KVS_OK) {
    m->is_folder = folder;
    if (folder) snprintf(m->folder, sizeof m->folder, "%s", name_or_path);
    *out = *m;
  }
  free(m);
  return name_the_builtins(status, name_or_path, err);
}

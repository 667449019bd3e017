/* A model folder's weight bytes per layer, from the safetensors headers of
 * its shards (see model_weights.h for the placement rules).
 *
 * With model.safetensors.index.json the index is the authority, as it is
 * for the engines that load by it: only the shards its weight_map names
 * are read (each once), every tensor it lists must be in the shard it
 * names, and a tensor a shard's header holds that the index does not list
 * is refused as a disagreement between the two (an engine would not load
 * it, so counting it would overstate the weights, and leaving it out
 * silently would hide a damaged download). Without an index every
 * *.safetensors entry of the folder is read, in byte-wise name order;
 * hidden names (a leading '.', such as macOS "._" files) are skipped, and
 * an entry that is not a regular file once symbolic links are followed
 * (the Hugging Face cache links each shard to a blob) is refused by its
 * kind rather than skipped, so a broken download is never undercounted.
 * A tensor named in two shards is refused (KVS_ERR_CONFLICT) either way. */
#include "core/model_weights.h"

#include "core/regular_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_kind.h"
#include "core/safetensors.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SHARD_SUFFIX ".safetensors"

/* An index lists one line per tensor: a few MiB for the largest models. */
enum { MAX_INDEX_BYTES = 64 << 20 };

/* folder + "/" + name, with the folder's trailing slashes dropped. */
static char *join(const char *folder, const char *name) {
  size_t len = strlen(folder);
  while (len > 1 && folder[len - 1] == '/') len--;
  size_t n = strlen(name);
  char *path = malloc(len + 1 + n + 1);
  if (path == NULL) return NULL;
  memcpy(path, folder, len);
  size_t at = len;
  if (!(len == 1 && folder[0] == '/')) path[at++] = '/';
  memcpy(path + at, name, n + 1);
  return path;
}

/* A shard name an index may give: a plain file name inside the folder. */
static int plain_file_name(const char *name) {
  return name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") != 0 &&
         strcmp(name, "..") != 0;
}

static int has_shard_suffix(const char *name) {
  size_t n = strlen(name), s = strlen(SHARD_SUFFIX);
  return n > s && name[0] != '.' && strcmp(name + n - s, SHARD_SUFFIX) == 0;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Reads the index into *root; *root is NULL (and KVS_OK returned) when
 * the folder has none. */
static kvs_status load_index(const char *path, json_t **root, kvs_error *err) {
  *root = NULL;
  int fd, open_errno;
  uint64_t size;
  kvs_status opened =
      kvs_open_regular(path, "model index", MAX_INDEX_BYTES, &fd, &size, &open_errno, err);
  if (opened != KVS_OK) {
    struct stat link;
    /* Absent: read the folder's shards. A dangling link (a cache whose
     * blob is gone) is a damaged download, not a missing index. */
    if (open_errno == ENOENT && lstat(path, &link) != 0) return KVS_OK;
    return opened;
  }
  size_t cap = (size_t)size + 1;
  char *text = malloc(cap);
  if (text == NULL) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to read %s", path);
  }
  /* Reads to the end; a file that grew past its size is refused. */
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fd, text + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      kvs_status status =
          kvs_error_set(err, KVS_ERR_IO, "cannot read model index %s: %s", path, strerror(errno));
      free(text);
      close(fd);
      return status;
    }
    if (n == 0) break;
    len += (size_t)n;
    if (len == cap) {
      free(text);
      close(fd);
      return kvs_error_set(err, KVS_ERR_IO, "model index %s grew while it was read", path);
    }
  }
  close(fd);
  json_error_t jerr;
  json_t *parsed = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (parsed == NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "model index %s is not valid JSON: line %d column %d: %s", path, jerr.line,
                         jerr.column, jerr.text);
  }
  *root = parsed;
  return KVS_OK;
}

/* The index's weight_map, checked: an object of plain shard file names. */
static kvs_status check_weight_map(const char *index_path, json_t *root, json_t **weight_map,
                                   kvs_error *err) {
  if (!json_is_object(root)) {
    return kvs_error_set(err, KVS_ERR_PARSE, "model index %s is not a JSON object", index_path);
  }
  json_t *map = json_object_get(root, "weight_map");
  if (map == NULL || !json_is_object(map)) {
    return kvs_error_set(err, KVS_ERR_PARSE, "model index %s: field weight_map %s", index_path,
                         map == NULL ? "is missing" : "must be an object of shard file names");
  }
  if (json_object_size(map) == 0) {
    return kvs_error_set(err, KVS_ERR_PARSE, "model index %s: field weight_map lists no tensor",
                         index_path);
  }
  const char *tensor;
  json_t *shard;
  json_object_foreach(map, tensor, shard) {
    if (!json_is_string(shard)) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "model index %s: weight_map[\"%s\"] must be a shard file name",
                           index_path, tensor);
    }
    if (!plain_file_name(json_string_value(shard))) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "model index %s: weight_map[\"%s\"] names shard \"%s\", not a plain "
                           "file name in the folder (no '/', not '.' or '..')",
                           index_path, tensor, json_string_value(shard));
    }
  }
  *weight_map = map;
  return KVS_OK;
}

/* Where a tensor's bytes go. */
typedef enum { PLACE_LAYER, PLACE_MTP, PLACE_EMBED, PLACE_HEAD } placement;

/* Finds a "layers.<i>." component; *layer saturates past n_layers so that
 * a long run of digits cannot wrap into a real layer. */
static int find_layer(const char *name, size_t n_layers, size_t *layer) {
  const char *at = name;
  for (;;) {
    const char *hit = strstr(at, "layers.");
    if (hit == NULL) return 0;
    at = hit + 1;
    if (hit != name && hit[-1] != '.') continue; /* "mtp_layers." is not one */
    const char *digits = hit + strlen("layers.");
    const char *p = digits;
    size_t value = 0;
    while (*p >= '0' && *p <= '9') {
      if (value <= n_layers) value = value * 10 + (size_t)(*p - '0');
      p++;
    }
    if (p == digits || *p != '.') continue;
    *layer = value;
    return 1;
  }
}

static placement place(const char *name, size_t n_layers, size_t *layer) {
  if (strncmp(name, "mtp.", 4) == 0 || strcmp(name, "mtp") == 0) return PLACE_MTP;
  if (find_layer(name, n_layers, layer)) return *layer < n_layers ? PLACE_LAYER : PLACE_MTP;
  if (strstr(name, "embed") != NULL) return PLACE_EMBED;
  return PLACE_HEAD;
}

/* "<digits>." at text: a whole expert number and its dot. */
static bool expert_number(const char *text) {
  const char *p = text;
  while (*p >= '0' && *p <= '9') p++;
  return p != text && *p == '.';
}

bool kvs_model_weights_is_routed_expert(const char *name) {
  static const char *const kinds[] = {"mlp.experts.", "ffn.experts."};
  for (size_t k = 0; name != NULL && k < sizeof kinds / sizeof kinds[0]; k++) {
    size_t len = strlen(kinds[k]);
    for (const char *hit = strstr(name, kinds[k]); hit != NULL; hit = strstr(hit + 1, kinds[k])) {
      /* "shared_mlp.experts." is another module's: only a whole component. */
      if ((hit == name || hit[-1] == '.') && expert_number(hit + len)) return true;
    }
  }
  return false;
}

typedef struct walk {
  kvs_model_weights *sums;
  json_t *seen;      /* tensor name -> the shard (file name) that holds it */
  const char *shard; /* the shard being read, its file name */
  const char *path;  /* and its path */
  const char *folder;
} walk;

static kvs_status add(uint64_t *sum, uint64_t bytes, const walk *w, const char *tensor,
                      kvs_error *err) {
  if (*sum > UINT64_MAX - bytes) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "model folder %s: the weight bytes overflow 64 bits at tensor %s of %s",
                         w->folder, tensor, w->path);
  }
  *sum += bytes;
  return KVS_OK;
}

static kvs_status count_tensor(void *ctx, const char *name, uint64_t bytes, kvs_error *err) {
  walk *w = ctx;
  json_t *other = json_object_get(w->seen, name);
  if (other != NULL) {
    return kvs_error_set(err, KVS_ERR_CONFLICT,
                         "model folder %s: tensor %s is in two shards, %s and %s", w->folder, name,
                         json_string_value(other), w->shard);
  }
  if (json_object_set_new(w->seen, name, json_string(w->shard)) != 0) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to record tensor %s of %s", name,
                         w->path);
  }
  kvs_model_weights *s = w->sums;
  size_t layer = 0;
  /* A routed expert outside any layer (no such checkpoint is known) is
   * counted where it is placed, as shared bytes. */
  placement where = place(name, s->n_layers, &layer);
  bool expert =
      (where == PLACE_LAYER || where == PLACE_MTP) && kvs_model_weights_is_routed_expert(name);
  kvs_status status = add(&s->total_bytes, bytes, w, name, err);
  if (status == KVS_OK && expert) status = add(&s->expert_bytes, bytes, w, name, err);
  if (status != KVS_OK) return status;
  s->n_expert_tensors += expert;
  uint64_t *expert_sum =
      where == PLACE_LAYER ? &s->layer_expert_bytes[layer] : &s->mtp_expert_bytes;
  if (expert && (status = add(expert_sum, bytes, w, name, err)) != KVS_OK) return status;
  switch (where) {
    case PLACE_LAYER:
      status = add(&s->layer_bytes[layer], bytes, w, name, err);
      break;
    case PLACE_MTP:
      status = add(&s->mtp_bytes, bytes, w, name, err);
      break;
    case PLACE_EMBED:
      status = add(&s->embed_bytes, bytes, w, name, err);
      break;
    case PLACE_HEAD:
      status = add(&s->head_bytes, bytes, w, name, err);
      break;
  }
  if (status != KVS_OK) return status;
  s->n_tensors++;
  return KVS_OK;
}

/* Reads the shards names[0..n) of folder into w. */
static kvs_status read_shards(const char *folder, char **names, size_t n, const char *index_path,
                              walk *w, kvs_error *err) {
  for (size_t i = 0; i < n; i++) {
    char *path = join(folder, names[i]);
    if (path == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a shard path");
    w->shard = names[i];
    w->path = path;
    kvs_status status = kvs_safetensors_read_header(path, count_tensor, w, NULL, err);
    free(path);
    if (status == KVS_ERR_IO && index_path != NULL && err != NULL) {
      /* Say who named the shard that cannot be read. */
      char inner[KVS_ERROR_MESSAGE_MAX];
      memcpy(inner, err->message, sizeof inner);
      kvs_error_set(err, status, "model index %s names shard %s: %s", index_path, names[i], inner);
    }
    if (status != KVS_OK) return status;
    w->sums->n_files++;
  }
  return KVS_OK;
}

/* After every shard is read: the index and the headers agree. */
static kvs_status check_agreement(const char *index_path, json_t *weight_map, json_t *seen,
                                  kvs_error *err) {
  const char *tensor;
  json_t *shard;
  json_object_foreach(weight_map, tensor, shard) {
    json_t *found = json_object_get(seen, tensor);
    if (found == NULL) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "model index %s lists tensor %s in shard %s, but that shard's header "
                           "does not hold it",
                           index_path, tensor, json_string_value(shard));
    }
    if (strcmp(json_string_value(found), json_string_value(shard)) != 0) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "model index %s lists tensor %s in shard %s, but it is in shard %s",
                           index_path, tensor, json_string_value(shard), json_string_value(found));
    }
  }
  json_object_foreach(seen, tensor, shard) {
    if (json_object_get(weight_map, tensor) == NULL) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "shard %s holds tensor %s, but model index %s does not list it "
                           "(engines load by the index)",
                           json_string_value(shard), tensor, index_path);
    }
  }
  return KVS_OK;
}

/* The distinct shard names of weight_map, sorted, into *names. */
static kvs_status index_shards(json_t *weight_map, char ***names, size_t *n, kvs_error *err) {
  size_t cap = json_object_size(weight_map);
  char **list = malloc(cap * sizeof *list);
  if (list == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for shard names");
  size_t count = 0;
  const char *tensor;
  json_t *shard;
  json_object_foreach(weight_map, tensor, shard) {
    list[count++] = (char *)json_string_value(shard); /* owned by weight_map */
  }
  qsort(list, count, sizeof *list, compare_names);
  size_t distinct = 0;
  for (size_t i = 0; i < count; i++) {
    if (distinct == 0 || strcmp(list[distinct - 1], list[i]) != 0) list[distinct++] = list[i];
  }
  *names = list;
  *n = distinct;
  return KVS_OK;
}

/* Every *.safetensors entry of folder, sorted; the names are owned. */
static kvs_status folder_shards(const char *folder, char ***names, size_t *n, kvs_error *err) {
  DIR *dir = opendir(folder);
  if (dir == NULL) {
    return kvs_error_set(err, KVS_ERR_IO, "cannot list model folder %s: %s", folder,
                         strerror(errno));
  }
  char **list = NULL;
  size_t count = 0, cap = 0;
  kvs_status status = KVS_OK;
  for (;;) {
    errno = 0;
    struct dirent *entry = readdir(dir);
    if (entry == NULL) {
      if (errno != 0) {
        status = kvs_error_set(err, KVS_ERR_IO, "cannot list model folder %s: %s", folder,
                               strerror(errno));
      }
      break;
    }
    if (!has_shard_suffix(entry->d_name)) continue;
    if (count == cap) {
      size_t grown = cap == 0 ? 8 : cap * 2;
      char **bigger = realloc(list, grown * sizeof *list);
      if (bigger == NULL) {
        status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to list %s", folder);
        break;
      }
      list = bigger;
      cap = grown;
    }
    list[count] = strdup(entry->d_name);
    if (list[count] == NULL) {
      status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to list %s", folder);
      break;
    }
    count++;
  }
  closedir(dir);
  if (status != KVS_OK) {
    for (size_t i = 0; i < count; i++) free(list[i]);
    free(list);
    return status;
  }
  if (count > 1) qsort(list, count, sizeof *list, compare_names);
  *names = list;
  *n = count;
  return KVS_OK;
}

kvs_status kvs_model_weights_load(const char *folder, size_t n_layers, kvs_model_weights *out,
                                  kvs_error *err) {
  if (folder == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: folder is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (n_layers == 0 || n_layers > KVS_MAX_LAYERS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "n_layers is %zu for model folder %s; it must be in [1, %d]", n_layers,
                         folder, KVS_MAX_LAYERS);
  }
  struct stat st;
  if (stat(folder, &st) != 0) {
    return kvs_error_set(err, KVS_ERR_IO, "cannot open model folder %s: %s", folder,
                         strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return kvs_error_set(err, KVS_ERR_IO, "model folder %s is %s, not a directory", folder,
                         S_ISREG(st.st_mode) ? "a regular file" : kvs_file_kind(st.st_mode));
  }
  char *index_path = join(folder, INDEX_NAME);
  /* Built in a scratch value so a refusal leaves *out untouched. */
  kvs_model_weights *sums = calloc(1, sizeof *sums);
  json_t *seen = json_object();
  json_t *index = NULL;
  char **names = NULL;
  size_t n_names = 0;
  int names_owned = 0;
  json_t *weight_map = NULL;
  walk w = {.sums = sums, .seen = seen, .folder = folder};
  kvs_status status = KVS_OK;
  if (index_path == NULL || sums == NULL || seen == NULL) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to read model folder %s", folder);
    goto done;
  }
  sums->n_layers = n_layers;
  if ((status = load_index(index_path, &index, err)) != KVS_OK) goto done;
  if (index != NULL) {
    if ((status = check_weight_map(index_path, index, &weight_map, err)) != KVS_OK ||
        (status = index_shards(weight_map, &names, &n_names, err)) != KVS_OK) {
      goto done;
    }
  } else {
    if ((status = folder_shards(folder, &names, &n_names, err)) != KVS_OK) goto done;
    names_owned = 1;
    if (n_names == 0) {
      status = kvs_error_set(err, KVS_ERR_IO, "no weights: neither %s nor a %s file in %s",
                             INDEX_NAME, SHARD_SUFFIX, folder);
      goto done;
    }
  }
  status = read_shards(folder, names, n_names, index != NULL ? index_path : NULL, &w, err);
  if (status == KVS_OK && weight_map != NULL) {
    status = check_agreement(index_path, weight_map, seen, err);
  }
  if (status == KVS_OK) *out = *sums;
done:
  if (names_owned) {
    for (size_t i = 0; i < n_names; i++) free(names[i]);
  }
  free(names);
  json_decref(index);
  json_decref(seen);
  free(sums);
  free(index_path);
  return status;
}

/* A model as a deployment sees it: the geometry the pool is priced from,
 * plus the config fields that row layouts, other engines' sizing and
 * speculative decoding need, and where its weights are.
 *
 * A model is named three ways: a built-in name ("dsv4-flash", "dsv4-pro"),
 * a config.json file, or a model folder as downloaded (its config.json,
 * and beside it the safetensors weights). The config must give
 * num_hidden_layers, head_dim, qk_rope_head_dim, index_head_dim,
 * sliding_window, compress_ratios and num_nextn_predict_layers; a missing
 * or mistyped field is refused naming the file and the field.
 * max_position_embeddings is read when present. A NULL text, name, model
 * or output is KVS_ERR_INVALID_ARGUMENT naming it. */
#ifndef KVS_CORE_MODEL_CONFIG_H
#define KVS_CORE_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/geometry.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_MODEL_PATH_MAX 4096

typedef struct kvs_model_config {
  kvs_geometry geometry;     /* the num_hidden_layers main layers */
  uint64_t qk_rope_head_dim; /* the bf16 rope part of a KV row; below head_dim */
  uint64_t sliding_window;   /* tokens each layer's window attends */
  uint64_t n_nextn;          /* num_nextn_predict_layers: MTP layers shipped */
  uint64_t context_len;      /* max_position_embeddings; 0 when absent */
  bool is_folder;            /* named by its folder: weights may be counted */
  char folder[KVS_MODEL_PATH_MAX];
} kvs_model_config;

/* Parses config.json text (the geometry as kvs_geometry_parse_json, and
 * the fields above). *out is written only on success. */
kvs_status kvs_model_config_parse_json(const char *text, size_t len, kvs_model_config *out,
                                       kvs_error *err);

/* A built-in name, a model folder (a directory: its config.json), or a
 * config.json path. Errors name the file: a folder without config.json,
 * a FIFO, a missing file, a bad field. *out is written only on success. */
kvs_status kvs_model_config_resolve(const char *name_or_path, kvs_model_config *out,
                                    kvs_error *err);

/* The geometry a server with n_mtp speculative (MTP) draft layers holds:
 * the main layers, then n_mtp layers whose compress ratio is the one the
 * config lists after the last main layer (compress_ratios[num_hidden_layers]),
 * so they sit on the last pipeline stage. n_mtp 0 is the main geometry. A
 * config that lists no ratio past its last layer cannot describe them and
 * is refused, as is a stack past KVS_MAX_LAYERS. */
kvs_status kvs_model_config_planned_geometry(const kvs_model_config *model, uint64_t n_mtp,
                                             kvs_geometry *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_MODEL_CONFIG_H */

/* The weight bytes of a downloaded model folder, per layer, from its
 * safetensors headers alone (tensor data is never read).
 *
 * The shards are those model.safetensors.index.json's weight_map names
 * (each a plain file name in the folder, read once; each tensor it lists
 * must be in the shard it names, and a tensor a shard holds that the index
 * does not list is refused: engines load by the index), or, without an
 * index, every *.safetensors entry of the folder not starting with '.', in
 * byte-wise name order (one that is not a regular file, links followed, is
 * refused by its kind, not skipped). Each tensor is placed the way engines
 * load it:
 *   - a name whose first component is "mtp" is a multi-token-prediction
 *     (MTP) draft layer's;
 *   - else a name with a "layers.<i>." component belongs to layer i; i at
 *     or past n_layers is an MTP layer;
 *   - any other tensor whose name contains "embed" is the token embedding,
 *     held by the first pipeline stage;
 *   - every other tensor (final norm, output head) by the last stage.
 * How these bytes divide over tensor-parallel ranks is the caller's
 * estimate to state; this only counts. */
#ifndef KVS_CORE_MODEL_WEIGHTS_H
#define KVS_CORE_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/geometry.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_model_weights {
  uint64_t total_bytes; /* every tensor */
  uint64_t embed_bytes; /* the first stage's */
  uint64_t head_bytes;  /* the last stage's: outside any layer, not an embedding */
  uint64_t mtp_bytes;   /* MTP draft layers */
  size_t n_layers;
  uint64_t layer_bytes[KVS_MAX_LAYERS]; /* [0, n_layers) */
  size_t n_files;                       /* safetensors files read */
  uint64_t n_tensors;
} kvs_model_weights;

/* Counts folder's weights for a model of n_layers (1..KVS_MAX_LAYERS)
 * layers. Refused, naming the file (and the tensor or field): a folder
 * with neither an index nor a .safetensors file, or a shard the index
 * names that is missing or not a regular file (KVS_ERR_IO); an index that
 * is not JSON, names a shard that is not a plain file name, or disagrees
 * with a shard's header, and a header that does not check out
 * (KVS_ERR_PARSE); a tensor in two shards (KVS_ERR_CONFLICT); n_layers out
 * of range or a NULL argument (KVS_ERR_INVALID_ARGUMENT). *out is written
 * only on success. */
kvs_status kvs_model_weights_load(const char *folder, size_t n_layers, kvs_model_weights *out,
                                  kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_MODEL_WEIGHTS_H */

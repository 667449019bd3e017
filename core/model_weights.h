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
 * Each tensor is also classed by kind: a routed expert's (a name with an
 * "mlp.experts.<e>." component run, the Hugging Face DeepSeek-V2/V3
 * checkpoints' names, or "ffn.experts.<e>.", DeepSeek-V4's own, such as
 * "layers.3.ffn.experts.17.w1.weight"), or shared: attention, dense MLP,
 * the shared experts ("mlp.shared_experts." is not "mlp.experts."), the
 * router, norms, embeddings, head and the MTP layers' own tensors. Routed
 * experts divide over expert parallelism; the rest does not.
 * How these bytes divide over tensor-parallel ranks is the caller's
 * estimate to state; this only counts. */
#ifndef KVS_CORE_MODEL_WEIGHTS_H
#define KVS_CORE_MODEL_WEIGHTS_H

#include <stdbool.h>
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
  /* Of the bytes above, the routed experts': every layer's (a part of
   * layer_bytes[i]) and the MTP layers' (a part of mtp_bytes). */
  uint64_t expert_bytes; /* all of them */
  uint64_t layer_expert_bytes[KVS_MAX_LAYERS];
  uint64_t mtp_expert_bytes;
  uint64_t n_expert_tensors; /* 0: no tensor matched a routed-expert name */
} kvs_model_weights;

/* Whether a tensor name is a routed expert's (see above): a component run
 * "mlp.experts.<digits>." or "ffn.experts.<digits>.", "mlp"/"ffn" starting
 * the name or following a '.'. False for NULL. */
bool kvs_model_weights_is_routed_expert(const char *name);

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

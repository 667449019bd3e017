/* Model geometry: the few numbers the KV tiers are priced from, and the
 * compressor each layer runs.
 *
 * A DSV4 layer stack mixes three mechanisms in one compress_ratios array:
 * ratio 0 (window only), 4 (CSA: overlapping blocks, doubled compressor
 * projection, Lightning Indexer) and 128 (HCA: plain blocks, no indexer).
 * The per-layer properties below are derived from the ratio in one place,
 * so sizing and execution can never disagree about a layer. */
#ifndef KVS_CORE_GEOMETRY_H
#define KVS_CORE_GEOMETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_CSA_RATIO 4u
#define KVS_HCA_RATIO 128u

typedef enum kvs_compressor {
  KVS_COMPRESSOR_NONE = 0, /* ratio 0: window tier only */
  KVS_COMPRESSOR_CSA = 4,  /* ratio 4 */
  KVS_COMPRESSOR_HCA = 128 /* ratio 128 */
} kvs_compressor;

/* kvs_geometry and KVS_MAX_LAYERS are kvshard.h's (a plain value: copy
 * it freely), as are kvs_geometry_builtin, kvs_geometry_resolve and
 * kvs_geometry_layer_count. */

/* Reads one ratio into its mechanism. Returns false (and leaves *out
 * alone) for any ratio other than 0, 4, 128: there is no nearest one. */
bool kvs_compressor_from_ratio(uint32_t ratio, kvs_compressor *out);
uint32_t kvs_compressor_ratio(kvs_compressor compressor);
/* CSA only: on HCA every compressed entry is visible already. */
bool kvs_compressor_has_indexer(kvs_compressor compressor);
/* 2 for CSA (each token projected for two overlapping blocks), else 1. */
unsigned kvs_compressor_projection_width_multiple(kvs_compressor compressor);
bool kvs_compressor_overlapping(kvs_compressor compressor);
/* Compressed entries a query at position pos sees: (pos + 1) / ratio, the
 * +1 because pos is an index; 0 with no compressor. */
uint64_t kvs_compressor_visible_compressed(kvs_compressor compressor, uint64_t pos);
/* "none", "CSA", "HCA". */
const char *kvs_compressor_name(kvs_compressor compressor);

/* The compressor of every used layer, in layer order, into out[0..cap).
 * Refuses the whole schedule at the first unknown ratio, naming the layer
 * and the ratio (KVS_ERR_UNKNOWN_RATIO); with cap too small,
 * KVS_ERR_INVALID_ARGUMENT. *n_out is the layer count on success. */
kvs_status kvs_geometry_compressors(const kvs_geometry *geometry, kvs_compressor *out, size_t cap,
                                    size_t *n_out, kvs_error *err);

/* Checks the geometry can be priced: non-zero widths, at least one layer,
 * every used ratio known. */
kvs_status kvs_geometry_validate(const kvs_geometry *geometry, kvs_error *err);

/* Checks that a model description gives every layer a ratio: n_ratios >=
 * n_layers. The geometry itself reads only the first n_layers ratios and,
 * given fewer, describes fewer layers (the upstream rule); a config or a
 * set of flags that means a whole model must not shrink silently, so the
 * loaders refuse it, naming both counts (KVS_ERR_INVALID_ARGUMENT). */
kvs_status kvs_geometry_check_every_layer_has_a_ratio(const kvs_geometry *geometry,
                                                      const char *layers_name,
                                                      const char *ratios_name, kvs_error *err);

/* Compress-state ring slots per window page: 8 for ratio 4, 128 for ratio
 * 128. Any other ratio (0 included: no compressor, no carry state) is
 * KVS_ERR_UNKNOWN_RATIO, because a guessed ring mis-addresses every carry
 * state of that layer. */
kvs_status kvs_ring_size_for_ratio(uint32_t ratio, uint64_t *out, kvs_error *err);

/* Fills *out from a geometry with the given fields (ratios copied). */
kvs_status kvs_geometry_init(kvs_geometry *out, uint64_t head_dim, uint64_t index_head_dim,
                             size_t n_layers, const uint32_t *ratios, size_t n_ratios,
                             kvs_error *err);

/* Parses a model config.json text: num_hidden_layers, head_dim,
 * index_head_dim and compress_ratios; other fields are ignored. A missing
 * or mistyped field is named in the error; fewer compress_ratios than
 * num_hidden_layers is refused (more are allowed: checkpoints ship one
 * extra). The result is validated. */
kvs_status kvs_geometry_parse_json(const char *text, size_t len, kvs_geometry *out, kvs_error *err);
/* Reads and parses a config.json file. */
kvs_status kvs_geometry_load_file(const char *path, kvs_geometry *out, kvs_error *err);

/* The i-th built-in name, or NULL past the end. */
const char *kvs_geometry_builtin_name(size_t index);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_GEOMETRY_H */

#include "core/geometry.h"

#include <string.h>

size_t kvs_geometry_layer_count(const kvs_geometry *geometry) {
  if (geometry == NULL) return 0;
  return geometry->n_layers < geometry->n_ratios ? geometry->n_layers : geometry->n_ratios;
}

bool kvs_compressor_from_ratio(uint32_t ratio, kvs_compressor *out) {
  kvs_compressor found;
  switch (ratio) {
    case 0:
      found = KVS_COMPRESSOR_NONE;
      break;
    case KVS_CSA_RATIO:
      found = KVS_COMPRESSOR_CSA;
      break;
    case KVS_HCA_RATIO:
      found = KVS_COMPRESSOR_HCA;
      break;
    default:
      return false;
  }
  if (out != NULL) *out = found;
  return true;
}

uint32_t kvs_compressor_ratio(kvs_compressor compressor) { return (uint32_t)compressor; }

bool kvs_compressor_has_indexer(kvs_compressor compressor) {
  return compressor == KVS_COMPRESSOR_CSA;
}

unsigned kvs_compressor_projection_width_multiple(kvs_compressor compressor) {
  return compressor == KVS_COMPRESSOR_CSA ? 2u : 1u;
}

bool kvs_compressor_overlapping(kvs_compressor compressor) {
  return compressor == KVS_COMPRESSOR_CSA;
}

uint64_t kvs_compressor_visible_compressed(kvs_compressor compressor, uint64_t pos) {
  uint32_t ratio = kvs_compressor_ratio(compressor);
  return ratio == 0 ? 0 : (pos + 1) / ratio;
}

const char *kvs_compressor_name(kvs_compressor compressor) {
  switch (compressor) {
    case KVS_COMPRESSOR_NONE:
      return "none";
    case KVS_COMPRESSOR_CSA:
      return "CSA";
    case KVS_COMPRESSOR_HCA:
      return "HCA";
  }
  return "unknown";
}

static kvs_status unknown_ratio(kvs_error *err, size_t layer, uint32_t ratio) {
  return kvs_error_set(err, KVS_ERR_UNKNOWN_RATIO,
                       "layer %zu has compress ratio %u, which is none of 0 (no compressor), "
                       "%u (CSA) or %u (HCA); the three are different mechanisms, so no "
                       "nearest one can stand in for it",
                       layer, ratio, KVS_CSA_RATIO, KVS_HCA_RATIO);
}

kvs_status kvs_geometry_compressors(const kvs_geometry *geometry, kvs_compressor *out, size_t cap,
                                    size_t *n_out, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  size_t n = kvs_geometry_layer_count(geometry);
  if (cap < n) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "compressor output holds %zu entries, the stack has %zu layers", cap, n);
  }
  if (out == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  /* Check every layer first so a refusal writes nothing. */
  for (size_t layer = 0; layer < n; layer++) {
    if (!kvs_compressor_from_ratio(geometry->compress_ratios[layer], NULL)) {
      return unknown_ratio(err, layer, geometry->compress_ratios[layer]);
    }
  }
  for (size_t layer = 0; layer < n; layer++) {
    kvs_compressor_from_ratio(geometry->compress_ratios[layer], &out[layer]);
  }
  if (n_out != NULL) *n_out = n;
  return KVS_OK;
}

kvs_status kvs_geometry_check_every_layer_has_a_ratio(const kvs_geometry *geometry,
                                                      const char *layers_name,
                                                      const char *ratios_name, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (layers_name == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: layers_name is NULL", __func__);
  }
  if (ratios_name == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: ratios_name is NULL", __func__);
  }
  if (geometry->n_ratios >= geometry->n_layers) return KVS_OK;
  return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                       "%s is %zu but %s lists %zu: every layer needs a ratio (the %zu layers "
                       "without one would silently not be planned)",
                       layers_name, geometry->n_layers, ratios_name, geometry->n_ratios,
                       geometry->n_layers - geometry->n_ratios);
}

kvs_status kvs_geometry_validate(const kvs_geometry *geometry, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (geometry->head_dim == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "head_dim is 0; a KV row has width");
  }
  if (geometry->index_head_dim == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "index_head_dim is 0; an indexer key has width");
  }
  if (geometry->n_ratios > KVS_MAX_LAYERS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "compress_ratios has %zu entries, more than the %d supported",
                         geometry->n_ratios, KVS_MAX_LAYERS);
  }
  size_t n = kvs_geometry_layer_count(geometry);
  if (n == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the stack has no layers (n_layers %zu, %zu compress ratios)",
                         geometry->n_layers, geometry->n_ratios);
  }
  for (size_t layer = 0; layer < n; layer++) {
    kvs_compressor unused;
    if (!kvs_compressor_from_ratio(geometry->compress_ratios[layer], &unused)) {
      return unknown_ratio(err, layer, geometry->compress_ratios[layer]);
    }
  }
  return KVS_OK;
}

kvs_status kvs_ring_size_for_ratio(uint32_t ratio, uint64_t *out, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  switch (ratio) {
    case KVS_CSA_RATIO:
      *out = 8;
      return KVS_OK;
    case KVS_HCA_RATIO:
      *out = 128;
      return KVS_OK;
    default:
      return kvs_error_set(err, KVS_ERR_UNKNOWN_RATIO,
                           "no ring for ratio %u (only %u and %u have compress-state rings)", ratio,
                           KVS_CSA_RATIO, KVS_HCA_RATIO);
  }
}

kvs_status kvs_geometry_init(kvs_geometry *out, uint64_t head_dim, uint64_t index_head_dim,
                             size_t n_layers, const uint32_t *ratios, size_t n_ratios,
                             kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (n_ratios > KVS_MAX_LAYERS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "compress_ratios has %zu entries, more than the %d supported", n_ratios,
                         KVS_MAX_LAYERS);
  }
  if (n_ratios > 0 && ratios == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: ratios is NULL but n_ratios is %zu",
                         __func__, n_ratios);
  }
  memset(out, 0, sizeof *out);
  out->head_dim = head_dim;
  out->index_head_dim = index_head_dim;
  out->n_layers = n_layers;
  out->n_ratios = n_ratios;
  if (n_ratios > 0) memcpy(out->compress_ratios, ratios, n_ratios * sizeof ratios[0]);
  return KVS_OK;
}

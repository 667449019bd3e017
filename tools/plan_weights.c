#include "tools/plan_weights.h"

#include <string.h>

const char kvs_plan_weights_estimate[] =
    "each layer's tensors on the stage holding the layer, the embedding on the first stage, "
    "the output head (and the MTP tensors when draft layers are planned) on the last, each "
    "divided evenly over the tp ranks";

const char kvs_plan_weights_spread_estimate[] =
    "the total spread evenly over the layers, each stage paying its own layers' share, divided "
    "evenly over the tp ranks";

static uint64_t per_rank(uint64_t bytes, size_t tp) { return bytes / tp + (bytes % tp != 0); }

kvs_status kvs_plan_layer_weights(const kvs_model_weights *w, size_t n_planned, size_t tp,
                                  uint64_t *out, kvs_error *err) {
  if (w == NULL || out == NULL || tp == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "weights, output and tp >= 1 required");
  }
  if (n_planned < w->n_layers || n_planned == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%zu planned layers, fewer than the weights' %zu layers", n_planned,
                         w->n_layers);
  }
  /* Sums first, one division per layer: the rounding is per device. */
  memset(out, 0, n_planned * sizeof *out);
  for (size_t i = 0; i < w->n_layers; i++) out[i] = w->layer_bytes[i];
  out[0] += w->embed_bytes;
  out[n_planned - 1] += w->head_bytes;
  if (n_planned > w->n_layers) out[n_planned - 1] += w->mtp_bytes;
  for (size_t i = 0; i < n_planned; i++) out[i] = per_rank(out[i], tp);
  return KVS_OK;
}

kvs_status kvs_plan_weights_spread(uint64_t total, size_t n_layers, kvs_model_weights *out,
                                   kvs_error *err) {
  if (out == NULL || n_layers == 0 || n_layers > KVS_MAX_LAYERS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "output and 1..%d layers required",
                         KVS_MAX_LAYERS);
  }
  memset(out, 0, sizeof *out);
  out->total_bytes = total;
  out->n_layers = n_layers;
  for (size_t i = 0; i < n_layers; i++) out->layer_bytes[i] = total / n_layers;
  out->layer_bytes[n_layers - 1] += total % n_layers;
  return KVS_OK;
}

kvs_status kvs_plan_weights_of(const kvs_model_config *model, bool have_total, uint64_t total,
                               kvs_model_weights *out, kvs_error *err) {
  size_t n_layers = model->geometry.n_layers;
  return have_total ? kvs_plan_weights_spread(total, n_layers, out, err)
                    : kvs_model_weights_load(model->folder, n_layers, out, err);
}

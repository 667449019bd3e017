#include "kvplan/plan_weights.h"

#include <string.h>

const char kvs_plan_weights_estimate[] =
    "each layer's tensors on the stage holding the layer, the embedding on the first stage, "
    "the output head (and the MTP tensors when draft layers are planned) on the last, each "
    "divided evenly over the tp ranks (routed experts over the tp x dp GPUs of the stage)";

const char kvs_plan_weights_spread_estimate[] =
    "the total spread evenly over the layers, each stage paying its own layers' share, divided "
    "evenly over the tp ranks";

const char kvs_plan_weights_split_estimate[] =
    "the expert and shared totals each spread evenly over the layers, each stage paying its own "
    "layers' share: shared bytes divided over the tp ranks, routed experts over the tp x dp GPUs "
    "of the stage";

static uint64_t per_rank(uint64_t bytes, size_t ranks) {
  return bytes / ranks + (bytes % ranks != 0);
}

kvs_status kvs_plan_layer_weights(const kvs_model_weights *w, size_t n_planned, size_t tp,
                                  size_t moe_gpus, uint64_t *out, kvs_error *err) {
  if (w == NULL || out == NULL || tp == 0 || moe_gpus == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "weights, output, tp >= 1 and moe_gpus >= 1 required");
  }
  if (n_planned < w->n_layers || n_planned == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%zu planned layers, fewer than the weights' %zu layers", n_planned,
                         w->n_layers);
  }
  /* Sums first, one division per kind and layer: the rounding is per
   * device. Shared bytes divide over tp, routed experts over the GPUs of
   * the stage that share them; where those are the same GPUs one division
   * keeps the plans made before experts were told apart byte for byte. */
  bool mtp = n_planned > w->n_layers;
  for (size_t i = 0; i < n_planned; i++) {
    uint64_t all = i < w->n_layers ? w->layer_bytes[i] : 0;
    uint64_t experts = i < w->n_layers ? w->layer_expert_bytes[i] : 0;
    if (i == 0) all += w->embed_bytes;
    if (i + 1 == n_planned) all += w->head_bytes + (mtp ? w->mtp_bytes : 0);
    if (i + 1 == n_planned && mtp) experts += w->mtp_expert_bytes;
    out[i] = moe_gpus == tp ? per_rank(all, tp)
                            : per_rank(all - experts, tp) + per_rank(experts, moe_gpus);
  }
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

kvs_status kvs_plan_weights_split(uint64_t expert_bytes, uint64_t shared_bytes, size_t n_layers,
                                  kvs_model_weights *out, kvs_error *err) {
  if (expert_bytes > UINT64_MAX - shared_bytes) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "expert and shared weights overflow 64 bits");
  }
  kvs_status status = kvs_plan_weights_spread(expert_bytes + shared_bytes, n_layers, out, err);
  if (status != KVS_OK) return status;
  /* Both kinds spread evenly, each remainder on the last layer. */
  out->expert_bytes = expert_bytes;
  for (size_t i = 0; i < n_layers; i++) {
    out->layer_bytes[i] = shared_bytes / n_layers + expert_bytes / n_layers;
    out->layer_expert_bytes[i] = expert_bytes / n_layers;
  }
  out->layer_bytes[n_layers - 1] += shared_bytes % n_layers + expert_bytes % n_layers;
  out->layer_expert_bytes[n_layers - 1] += expert_bytes % n_layers;
  return KVS_OK;
}

kvs_status kvs_plan_weights_of(const kvs_model_config *model, const kvs_plan_weights_given *given,
                               kvs_model_weights *out, kvs_error *err) {
  size_t n_layers = model->geometry.n_layers;
  if (given->have_split) {
    return kvs_plan_weights_split(given->expert_bytes, given->shared_bytes, n_layers, out, err);
  }
  return given->have_total ? kvs_plan_weights_spread(given->total_bytes, n_layers, out, err)
                           : kvs_model_weights_load(model->folder, n_layers, out, err);
}

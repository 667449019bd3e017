/* Model weights on each device of a plan, as kvplan estimates them from a
 * model folder: every layer's tensors on the stage that holds the layer,
 * the token embedding with the first layer (first stage), the output head
 * and final norm with the last layer (last stage), the MTP draft tensors
 * with the last layer when draft layers are planned (and not at all
 * otherwise: an engine loads them only for speculative decoding), each
 * divided evenly over the tensor-parallel ranks, rounded up. It is an
 * estimate: engines shard most matrices over TP but replicate norms, some
 * biases and, with expert parallelism, place experts their own way. */
#ifndef KVS_TOOLS_PLAN_WEIGHTS_H
#define KVS_TOOLS_PLAN_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model_config.h"
#include "core/model_weights.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One sentence stating each estimate, for reports. */
extern const char kvs_plan_weights_estimate[];
extern const char kvs_plan_weights_spread_estimate[];

/* A model's total weight bytes with nothing known of their layout (no
 * folder at hand): spread evenly over the n_layers layers, the remainder on
 * the last, no embedding, head or MTP bytes apart. Also an estimate. */
kvs_status kvs_plan_weights_spread(uint64_t total_bytes, size_t n_layers, kvs_model_weights *out,
                                   kvs_error *err);

/* A model's weights by layer: the given total spread over its layers
 * (have_total), else its folder's safetensors. The one choice plan and fit
 * both make once they know weights are counted. */
kvs_status kvs_plan_weights_of(const kvs_model_config *model, bool have_total, uint64_t total,
                               kvs_model_weights *out, kvs_error *err);

/* Per planned layer out[0..n_planned): the bytes one device of a stage
 * holding it spends on its weights at tensor parallelism tp. n_planned is
 * the main layers (weights->n_layers) plus the MTP draft layers. */
kvs_status kvs_plan_layer_weights(const kvs_model_weights *weights, size_t n_planned, size_t tp,
                                  uint64_t *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOOLS_PLAN_WEIGHTS_H */

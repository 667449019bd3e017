/* Model weights on each device of a plan, as kvplan estimates them from a
 * model folder: every layer's tensors on the stage that holds the layer,
 * the token embedding with the first layer (first stage), the output head
 * and final norm with the last layer (last stage), the MTP draft tensors
 * with the last layer when draft layers are planned (and not at all
 * otherwise: an engine loads them only for speculative decoding), each
 * divided evenly over the tensor-parallel ranks, rounded up. It is an
 * estimate: engines shard most matrices over TP but replicate norms, some
 * biases and, with expert parallelism, place experts their own way. */
#ifndef KVS_KVPLAN_PLAN_WEIGHTS_H
#define KVS_KVPLAN_PLAN_WEIGHTS_H

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
extern const char kvs_plan_weights_split_estimate[];

/* The weights given on the command line instead of a folder: a total
 * (--weights-total) or its two kinds (--expert-weights, --shared-weights). */
typedef struct kvs_plan_weights_given {
  bool have_total;
  uint64_t total_bytes;
  bool have_split;
  uint64_t expert_bytes, shared_bytes;
} kvs_plan_weights_given;

/* A model's total weight bytes with nothing known of their layout (no
 * folder at hand): spread evenly over the n_layers layers, the remainder on
 * the last, no embedding, head or MTP bytes apart. Also an estimate. */
kvs_status kvs_plan_weights_spread(uint64_t total_bytes, size_t n_layers, kvs_model_weights *out,
                                   kvs_error *err);

/* The two kinds given apart: routed experts and shared weights, each
 * spread evenly over the layers (remainders on the last). */
kvs_status kvs_plan_weights_split(uint64_t expert_bytes, uint64_t shared_bytes, size_t n_layers,
                                  kvs_model_weights *out, kvs_error *err);

/* A model's weights by layer: the given split or total spread over its
 * layers, else its folder's safetensors. The one choice plan and fit both
 * make once they know weights are counted. */
kvs_status kvs_plan_weights_of(const kvs_model_config *model, const kvs_plan_weights_given *given,
                               kvs_model_weights *out, kvs_error *err);

/* Per planned layer out[0..n_planned): the bytes one device of a stage
 * holding it spends on its weights, shared bytes divided over tp and the
 * routed experts over moe_gpus, the GPUs of a stage that share them (tp x
 * dp; tp for a plan without data-parallel attention, where this is the
 * estimate kvplan always made). n_planned is the main layers
 * (weights->n_layers) plus the MTP draft layers. */
kvs_status kvs_plan_layer_weights(const kvs_model_weights *weights, size_t n_planned, size_t tp,
                                  size_t moe_gpus, uint64_t *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_PLAN_WEIGHTS_H */

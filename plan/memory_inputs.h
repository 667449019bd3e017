/* Memory inputs that cannot be true. A caller gives a GPU's memory
 * (--gpu-memory), what is free on it before the weights load
 * (--free-before-load), a KV budget, a reserve and the weights, each in
 * bytes; every one of them lives inside the GPU's memory, so one above
 * another that holds it, or above the memory the GPU itself has, is a
 * typo or a wrong unit (a --free-before-load of 1379GiB on an 80 GiB GPU
 * planned 1.19 TiB of pools per GPU), never a plan. They are refused
 * before anything is budgeted, naming both sides, by the one sentence
 * every tool and the node print.
 *
 * The pairs, each "<a> is more than <b>":
 *   --free-before-load, a budget, --reserve, the weights  >  --gpu-memory
 *   the weights  >  --free-before-load
 *   any of them, or --gpu-memory itself  >  a GPU's own memory (what CUDA
 *   measured as its total, else the total its model's driver reports;
 *   a GPU of neither is not checked: nothing is invented).
 * A sum (weights and reserve above the share) is not a contradiction of
 * one input: the budget rule refuses it with every term (memory_budget.h).
 *
 * NULL: inputs NULL, or gpus NULL with n_gpus above 0, is
 * KVS_ERR_INVALID_ARGUMENT naming it. */
#ifndef KVS_PLAN_MEMORY_INPUTS_H
#define KVS_PLAN_MEMORY_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "topology/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_memory_input_id {
  KVS_MEMORY_GPU_MEMORY,       /* every GPU's memory, in place of the machine's */
  KVS_MEMORY_FREE_BEFORE_LOAD, /* free before the weights load (SGLang's P) */
  KVS_MEMORY_BUDGET,           /* the KV budget itself */
  KVS_MEMORY_RESERVE,          /* taken off the memory beside the budget */
  KVS_MEMORY_WEIGHTS,          /* the model's weights on the GPU */
  KVS_MEMORY_INPUT_COUNT
} kvs_memory_input_id;

/* One input as its user gave it. */
typedef struct kvs_memory_input {
  const char *name;        /* as given ("--budget", "--budget-per-gpu"); NULL: not given */
  uint64_t bytes;          /* every GPU's, when per_gpu is NULL */
  const uint64_t *per_gpu; /* else one per GPU, in index order */
  size_t n_per_gpu;
} kvs_memory_input;

/* Every pair above among inputs[0..KVS_MEMORY_INPUT_COUNT) (indexed by
 * kvs_memory_input_id), then each against every GPU of gpus[0..n_gpus)
 * (n_gpus 0: the inputs alone). The first that cannot be true is
 * KVS_ERR_INVALID_ARGUMENT: "<name> <bytes> is more than <name> <bytes>:
 * <why>", or "... is more than the memory of GPU <i> (<bus id>), <bytes>
 * (<where that figure is from>): <why>"; a per-GPU list's entry reads
 * "<name>'s <bytes> for GPU <i>". Writes nothing else. */
kvs_status kvs_memory_inputs_check(const kvs_memory_input *inputs, const kvs_gpu_info *gpus,
                                   size_t n_gpus, kvs_error *err);

/* A host tier of host_bytes on every machine (--host-cache, named `name`)
 * against each machine's own memory, memory[k] for machine k of
 * n_machines (as hwloc reports it; 0: not known, not checked), labels[k]
 * naming it (labels may be NULL): the tier is pinned in that memory, so
 * more than it cannot be true. KVS_ERR_INVALID_ARGUMENT: "<name> <bytes>
 * is more than the memory of host <k> (<label>), <bytes> (as hwloc
 * reports it): <why>". name NULL, or memory NULL with n_machines above 0,
 * is KVS_ERR_INVALID_ARGUMENT naming it. */
kvs_status kvs_memory_host_check(const char *name, uint64_t host_bytes, const uint64_t *memory,
                                 const char *const *labels, size_t n_machines, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_MEMORY_INPUTS_H */

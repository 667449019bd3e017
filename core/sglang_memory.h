/* SGLang's own memory rule: how many bytes its KV pools get on a GPU, the
 * smallest --mem-fraction-static that leaves them any, and the fraction it
 * picks when none is given. Reproduced so kvplan can answer in SGLang's
 * flags; nothing here is kvshard's own rule (plan/memory_budget.h).
 *
 * The rule, at SGLang revision 003fca8027387a3d6565b2c08e497e3020ac6211:
 *   - P, the free memory before the weights load: the bootstrap's
 *     pre_model_load_memory (python/sglang/srt/distributed/bootstrap.py,
 *     init_torch_distributed: get_available_gpu_memory(distributed=True),
 *     the minimum over every rank);
 *   - A, the free memory once the target and draft weights are loaded, the
 *     minimum over ranks again (python/sglang/srt/mem_cache/
 *     kv_cache_configurator.py, KVCacheConfigurator._profile_available_bytes);
 *   - the pools get rest = A - P x (1 - f) for --mem-fraction-static f, in
 *     GiB as doubles, then int(rest x 2^30) bytes; nothing else is reserved
 *     at sizing time (CUDA graphs and activations must fit in P x (1 - f));
 *     rest <= 0 is SGLang's "Loaded weights leave no GPU memory for the KV
 *     cache", which names the minimum viable fraction 1 - A / P.
 * The minimum over ranks is an all-reduce of a float32 tensor, so with more
 * than one rank P and A are rounded to float32 first (16 KiB steps at
 * 140 GiB); one rank reads its own bytes exactly.
 *
 * The default fraction (when --mem-fraction-static is absent) is SGLang's
 * heuristic from the GPU's total memory (handle_gpu_memory_settings and
 * reserve_for_graph_mb in python/sglang/srt/arg_groups/memory_hook.py; the
 * nearest revision the public index holds is 031ed82d): a reserve in MiB of
 * 512 + 1.5 x max(chunked prefill, 2048) + tp x pp / 8 x 1024 + the decode
 * CUDA graphs (2 per batch slot, plus 3 x dp per slot under DP attention and
 * 1.5 x dp more past 300 slots), at least 10 GiB on a GPU above 60 GiB,
 * then round((total - reserve) / total, 3). Chunked prefill and the decode
 * graph's batch slots default by the GPU's memory, as SGLang's buckets do.
 * Assumed, and said where reported: decode graphs on, prefill graphs off,
 * no DeepEP all-to-all, no disaggregation, not a VLM. */
#ifndef KVS_CORE_SGLANG_MEMORY_H
#define KVS_CORE_SGLANG_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The two measurements and the fraction SGLang sizes with. */
typedef struct kvs_sglang_memory_input {
  uint64_t free_before_load_bytes; /* P, the least of any rank */
  uint64_t available_bytes;        /* A, after the weights, the least of any rank */
  double mem_fraction_static;      /* f, in (0, 1] */
  bool distributed;                /* more than one rank: both go through float32 */
} kvs_sglang_memory_input;

typedef struct kvs_sglang_memory {
  double free_before_load_gib; /* P as SGLang holds it, GiB */
  double available_gib;        /* A as SGLang holds it, GiB */
  double slack_gib;            /* P x (1 - f): activations and CUDA graphs */
  /* 1 - A / P: below it the weights leave the KV cache nothing. */
  double min_viable_mem_fraction;
  /* SGLang's suggestion in its refusal: min viable rounded up to 3
   * decimals (math.ceil(x x 1000) / 1000). */
  double suggested_mem_fraction;
  uint64_t rest_bytes; /* what the pools get; 0 with no_kv */
  bool no_kv;          /* rest <= 0: SGLang refuses to start */
} kvs_sglang_memory;

/* The rule above. Refuses (KVS_ERR_INVALID_ARGUMENT, naming it) a NULL
 * input or out, a P of 0, A above P, and f outside (0, 1]. A rest of 0 or
 * less is no error: out->no_kv says SGLang would refuse to start. */
kvs_status kvs_sglang_memory_rule(const kvs_sglang_memory_input *input, kvs_sglang_memory *out,
                                  kvs_error *err);

/* What SGLang's default-fraction heuristic reads. */
typedef struct kvs_sglang_launch {
  uint64_t gpu_memory_mib; /* the GPU's total as its driver reports it, MiB */
  uint64_t tp_size;        /* SGLang's --tp-size: every GPU of a stage (tp x dp) */
  uint64_t pp_size;
  uint64_t dp_size;         /* 1 without DP attention */
  bool dp_attention;        /* --enable-dp-attention */
  uint64_t chunked_prefill; /* --chunked-prefill-size; 0: SGLang's default */
  uint64_t decode_max_bs;   /* the decode CUDA graph's batch slots; 0: default */
} kvs_sglang_launch;

/* SGLang's default --mem-fraction-static for the launch, with the reserve
 * (MiB) and the two defaults it chose behind it. NULL launch or out, and a
 * launch with 0 memory, tp or pp, are KVS_ERR_INVALID_ARGUMENT. */
typedef struct kvs_sglang_default_fraction {
  double mem_fraction_static;
  double reserved_mib;
  uint64_t chunked_prefill;
  uint64_t decode_max_bs;
} kvs_sglang_default_fraction;

kvs_status kvs_sglang_default_mem_fraction(const kvs_sglang_launch *launch,
                                           kvs_sglang_default_fraction *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_SGLANG_MEMORY_H */

/* The serving defaults: the one place every layer (core's pool options, the
 * shard runtime, the node, kvplan and kvsim) takes them from, so a plan made
 * by one tool is the pool another builds.
 *
 * They describe a DeepSeek-V4 server as engines run it: a window of 1/8 of
 * the history (swa_ratio), 64 concurrent requests, radix prefix sharing on,
 * a 1 Mi-token longest sequence, one scratch row per compressed and indexer
 * pool, and a budget of 90 % of a GPU's free memory less 512 MiB that the
 * CUDA runtime takes lazily after the pool is carved (module loads, the
 * local memory of the first large launch, the 2 MiB rounding of the pool's
 * own allocation). */
#ifndef KVS_CORE_SERVING_DEFAULTS_H
#define KVS_CORE_SERVING_DEFAULTS_H

#include <stdbool.h>

#define KVS_DEFAULT_SWA_RATIO 0.125
#define KVS_DEFAULT_MAX_RUNNING 64u
#define KVS_DEFAULT_RADIX true
#define KVS_DEFAULT_MAX_SEQ_LEN 1048576u
#define KVS_DEFAULT_N_SCRATCH 1u
#define KVS_DEFAULT_MEMORY_RATIO 0.90
#define KVS_DEFAULT_RESERVE_BYTES (512ull << 20)
/* What a serving process holds before its weights load on a GPU nothing
 * measured (its CUDA context, NCCL communicators and their buffers): 2.5
 * GiB, the gap between an H200's 140.40 GiB driver total and the 137.90
 * GiB SGLang measured free before loading DeepSeek-V4-Pro at tp 8
 * (SemiAnalysisAI/InferenceX#2128). The free memory before load, P of
 * SGLang's rule, defaults to a GPU's memory less this. */
#define KVS_DEFAULT_CONTEXT_OVERHEAD_BYTES (2560ull << 20)
/* DSV4's qk_rope_head_dim: the bf16 part of an fp8 KV row when no model
 * config says otherwise. */
#define KVS_DEFAULT_QK_ROPE_HEAD_DIM 64u

#endif /* KVS_CORE_SERVING_DEFAULTS_H */

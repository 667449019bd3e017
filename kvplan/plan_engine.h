/* A plan in the engine's own terms (`--engine sglang`): the bytes SGLang's
 * memory rule gives its pools on a layout (core/sglang_memory.h), the pools
 * its DSV4 configurator sizes on them per pipeline stage
 * (core/sglang_pools.h), whether they hold a demand, the smallest
 * --mem-fraction-static that does, and the launch flags that reproduce a
 * plan. kvplan plan and kvplan fit both answer through these, so fit's
 * fraction is the one plan holds at. */
#ifndef KVS_KVPLAN_PLAN_ENGINE_H
#define KVS_KVPLAN_PLAN_ENGINE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/sglang_memory.h"
#include "core/sglang_pools.h"
#include "plan/memory_budget.h"
#include "plan/parallel.h"
#include "plan/rank_layout.h"
#include "kvplan/plan_options.h"
#include "topology/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SGLang's default --max-running-requests for DSV4, over every DP group
 * (its DSV4 launch hook sets it when the flag is absent). */
#define KVS_ENGINE_DEFAULT_MAX_RUNNING KVS_SGLANG_DEFAULT_MAX_RUNNING

/* The GPUs a plan is for, and what SGLang's rule needs of them. */
typedef struct kvs_engine_gpus {
  const kvs_gpu_info *gpus;
  size_t n;
  uint64_t free_given;   /* --free-before-load; 0: measured or nominal */
  uint64_t memory_given; /* --gpu-memory; 0: measured or the driver total */
} kvs_engine_gpus;

/* The weights SGLang's rule takes off one GPU: measured bytes (--weights,
 * the heaviest GPU's) and/or per planned layer at the layout (a folder or
 * a total, at tp and tp x dp), summed over SGLang's own stages. */
typedef struct kvs_engine_weights {
  uint64_t measured;
  const uint64_t *layer; /* planned layers' bytes per GPU, or NULL */
} kvs_engine_weights;

/* SGLang's memory on one layout. */
typedef struct kvs_engine_memory {
  uint64_t free_before_load;     /* P, the least of any GPU */
  kvs_budget_source free_source; /* explicit (--free-before-load), measured, nominal */
  uint64_t weights;              /* the heaviest SGLang stage's, per GPU */
  uint64_t available;            /* A = P - weights (0 when they do not fit) */
  uint64_t gpu_memory_mib;       /* the least GPU total in MiB, the default's input */
  bool distributed;              /* one server of more than one rank: float32 minima */
  kvs_sglang_default_fraction by_default;
  double fraction; /* in use: given, else SGLang's default */
  bool fraction_given;
  kvs_sglang_memory rule;       /* at fraction */
  kvs_sglang_memory at_default; /* at SGLang's default */
} kvs_engine_memory;

/* P, A and SGLang's rule for model m on layout on the GPUs; fraction < 0
 * uses SGLang's default for the layout. Refusals name the GPU or input. */
kvs_status kvs_engine_memory_make(const kvs_plan_model *m, const kvs_parallel *layout,
                                  const kvs_engine_gpus *gpus, const kvs_engine_weights *weights,
                                  double fraction, kvs_engine_memory *out, kvs_error *err);

/* The same rule at another fraction (fit's search): out->rule only. */
kvs_status kvs_engine_memory_at(kvs_engine_memory *memory, double fraction, kvs_error *err);

/* SGLang's server flags for a plan at dp groups: --swa-ratio, --page, --mtp
 * as speculative decoding, and its --max-running-requests (max_running_total,
 * over every DP group) divided among the groups, as its configurator does
 * (max_running_requests // attn_dp_size). */
kvs_sglang_options kvs_engine_options(const kvs_plan_options *o, size_t dp,
                                      uint64_t max_running_total);

/* SGLang's --max-running-requests for the options: --max-running, else its
 * DSV4 default (256). */
uint64_t kvs_engine_max_running_total(const kvs_plan_options *o);

/* SGLang's pools on a layout: every stage of its own pp split sized on
 * available_per_stage[s] bytes; the stage with the fewest full tokens
 * speaks for the server (SGLang's PP ranks agree on the minimum). */
typedef struct kvs_engine_pools {
  kvs_sglang_pools least;
  size_t stage;         /* its stage */
  uint64_t available;   /* the bytes it was sized on */
  uint64_t max_running; /* SGLang's per-worker count: min(requested, full / 2) */
} kvs_engine_pools;

/* stages_json (may be NULL) gets every stage's `sglang` object with its
 * layers. */
kvs_status kvs_engine_pools_make(const kvs_plan_model *m, const kvs_sglang_options *options,
                                 size_t pp, const uint64_t *available_per_stage,
                                 kvs_engine_pools *out, json_t **stages_json, kvs_error *err);

/* What C requests of L tokens ask of each DP group's pools. */
typedef struct kvs_engine_demand {
  uint64_t requests;    /* per DP group */
  uint64_t full_tokens; /* requests x L rounded up to SGLang's page */
  uint64_t swa_tokens;  /* requests x (sliding window + page): its admission floor */
} kvs_engine_demand;

kvs_engine_demand kvs_engine_demand_of(const kvs_plan_model *m, const kvs_sglang_options *o,
                                       uint64_t requests, uint64_t context);

/* Whether the pools hold the demand; *why (may be NULL) names what is
 * short when not. */
bool kvs_engine_holds(const kvs_engine_pools *pools, const kvs_engine_demand *demand,
                      const char **why);

/* The launch flags that reproduce a plan, as a JSON array of strings:
 * --tp-size (tp x dp: with DP attention SGLang's tp counts every GPU of a
 * stage), --pp-size, --dp-size, --enable-dp-attention (dp > 1), --ep-size,
 * --kv-cache-dtype fp8_e4m3 (the rows its DSV4 pools are sized for),
 * --page-size, --mem-fraction-static (3 decimals, as given or chosen),
 * --max-total-tokens (the full pool), --max-running-requests,
 * --swa-full-tokens-ratio, --context-length. */
json_t *kvs_engine_launch_args(const kvs_parallel *layout, const kvs_sglang_options *options,
                               double fraction, uint64_t max_total_tokens,
                               uint64_t max_running_total, uint64_t context_length);

/* The memory rule's keys for the `sglang` object: free_before_load_bytes,
 * free_before_load_source, available_after_load_bytes, weights_bytes,
 * mem_fraction_static, mem_fraction_source ("given", "sglang default"),
 * rest_bytes, min_viable_mem_fraction, suggested_mem_fraction,
 * default_mem_fraction_static, default_reserved_mib, default_assumes. */
void kvs_engine_memory_json(json_t *sglang, const kvs_engine_memory *memory);

/* The same for people: one paragraph. */
void kvs_engine_memory_print(FILE *out, const kvs_engine_memory *memory);

/* Where a layout's SGLang servers run: one server per replica (tp x pp x
 * dp GPUs, its DP groups inside it), on the hosts its ranks' GPUs are on.
 * regular: every server spans per_server consecutive hosts, server s
 * starting at host s x hosts / servers (what a cluster of identical
 * machines gives, the layout filling a machine before the next); the
 * per-host launch lines are made only then. */
typedef struct kvs_engine_hosts {
  size_t hosts;      /* machines of the plan */
  size_t servers;    /* replicas */
  size_t per_server; /* hosts one server spans: SGLang's --nnodes */
  bool regular;
} kvs_engine_hosts;

/* The hosts of `layout` laid out as slots[0..n_gpus) (kvs_rank_layout_*)
 * over gpus[] (gpus[slot.gpu].node is the host), of n_hosts machines. */
kvs_engine_hosts kvs_engine_hosts_of(const kvs_parallel *layout, const kvs_rank_slot *slots,
                                     const kvs_gpu_info *gpus, size_t n_gpus, size_t n_hosts);

/* The stand-in for SGLang's --dist-init-addr of a server whose rank 0 is
 * on host h, "HOST<h>:PORT": that host's address and a free port, which
 * kvplan cannot know; the operator writes them in. */
#define KVS_ENGINE_DIST_INIT_PLACEHOLDER "HOST%zu:PORT"

/* The `launch` object, taking args (kvs_engine_launch_args): {"engine":
 * "sglang", "args": args (the flags every host gives), "hosts": one entry
 * per host and server on it, in host order, each {"host", "nnodes",
 * "node_rank", "dist_init_addr" (the placeholder above, null for a server
 * of one host), "args" (args, then --nnodes N --node-rank I
 * --dist-init-addr HOST<first>:PORT for a server of several hosts)}; null
 * when the servers straddle hosts irregularly}. NULL when out of memory. */
json_t *kvs_engine_launch_json(json_t *args, const kvs_engine_hosts *hosts);

/* The launch for people: on one host the line "sglang serve --model-path
 * MODEL <args>"; on several, a line saying how the servers sit and what
 * the placeholder stands for, then one line per host (and server). */
void kvs_engine_launch_print(FILE *out, const char *model, const json_t *launch);

/* "explicit" free memory is "given" in the engine's words. */
const char *kvs_engine_free_source_name(kvs_budget_source source);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_PLAN_ENGINE_H */

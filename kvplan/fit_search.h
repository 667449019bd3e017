/* kvplan fit's searches over one layout (tp x pp x dp x ep) of a cluster:
 *   - kvshard's own: the smallest uniform KV budget per GPU and the
 *     smallest share of memory (weights and reserve included) whose node
 *     plan holds every request of a DP group in whole pages with the
 *     window floor those requests need; or, asked how many, the most
 *     requests a group holds at a given share;
 *   - SGLang's (--engine sglang): the smallest --mem-fraction-static, in
 *     thousandths rounded up, at which its own sizing (kvplan/plan_engine.h)
 *     holds the group's requests; or the most requests at a fraction.
 * Every probe is the whole plan the matching `kvplan plan` makes, so an
 * answer holds there and one step below does not. */
#ifndef KVS_KVPLAN_FIT_SEARCH_H
#define KVS_KVPLAN_FIT_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model_weights.h"
#include "plan/memory_budget.h"
#include "plan/node_overhead.h"
#include "plan/deployment.h"
#include "plan/parallel.h"
#include "plan/rank_layout.h"
#include "plan/stage_split.h"
#include "kvplan/plan_engine.h"
#include "kvplan/plan_options.h"
#include "topology/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kvshard's fraction is searched up to this many times the memory, so a
 * shortfall can be stated; past it the layout is beyond reach. */
#define FIT_MAX_FRACTION 16.0
/* The most requests of one DP group a capacity search tries. */
#define FIT_MAX_REQUESTS (UINT64_C(1) << 24)

/* What every layout of one cluster shares. */
typedef struct fit_cluster {
  kvs_plan_model *m; /* rings are placed per probe */
  const kvs_plan_options *options;
  const kvs_gpu_info *gpus;
  size_t n_gpus, nodes;
  const kvs_memory_budget *memory;  /* each GPU's memory and reserve (ratio 1) */
  uint64_t *budgets;                /* scratch, n_gpus */
  const kvs_model_weights *weights; /* NULL: not counted */
  uint64_t *layer;                  /* scratch: weight bytes per planned layer */
  uint64_t context;                 /* L, tokens of every request */
  double fraction;                  /* kvshard's share to judge fits by */
  /* SGLang: its memory inputs; fraction < 0 means SGLang's default. */
  bool engine;
  uint64_t free_given, memory_given;
  double engine_fraction;
  /* The layout fit_size_row sized last, for its probes: its ranks' places
   * (scratch, n_gpus), and per stage s the GPUs whose memory terms
   * (memory, reserve) differ, stage_gpus[stage_first[s] .. stage_first[s +
   * 1]) (scratch, n_gpus), so that a probe prices the stages' tightest
   * budgets alone (kvs_deployment_holds) instead of a whole plan. */
  kvs_rank_slot *slots;
  size_t *stage_gpus;
  size_t stage_first[KVS_MAX_STAGES + 1];
  uint64_t stage_budgets[KVS_MAX_STAGES];
} fit_cluster;

/* One layout's answers. */
typedef struct fit_row {
  size_t nodes;
  kvs_parallel layout;
  size_t replicas, groups; /* GPUs / (tp pp dp), GPUs / (tp pp) */
  uint64_t requests;       /* per DP group */
  uint64_t pages;          /* pages each rank must hold */
  uint64_t floor_pages;
  bool budget_found;
  uint64_t min_budget; /* uniform KV bytes per GPU */
  bool fraction_found; /* some share up to FIT_MAX_FRACTION holds it */
  double min_fraction;
  bool fits;
  int64_t margin_bytes;   /* negative: shortfall */
  uint64_t weights_bytes; /* the heaviest rank's, at min_fraction */
  uint64_t max_requests;  /* --max-concurrency: per DP group at the share */
  /* SGLang (--engine sglang). */
  bool sglang_found;
  double sglang_fraction;       /* thousandths, the smallest that holds */
  double sglang_default;        /* its default for the layout */
  bool sglang_fits;             /* found, and at most the fraction judged by */
  char sglang_why[192];         /* when not found: what is short, and at which fraction */
  uint64_t sglang_full;         /* its full pool at sglang_fraction */
  uint64_t sglang_max_running;  /* --max-running-requests the answer needs */
  uint64_t sglang_max_requests; /* --max-concurrency: per DP group */
  kvs_engine_hosts hosts;       /* where its servers run, for the launch */
  /* kvshard's answer's node buffers beside its carve (the rank that needs
   * the most), at the plan of that answer (fit_kvshard_buffers); priced
   * when buffers_priced. */
  bool buffers_priced;
  kvs_node_overhead buffers;
} fit_row;

/* The demand's sizing of the layout in row (requests per group given):
 * pages, window floor, rings, weights per layer, and the layout's stages
 * for the probes. Returns 0, or 2 after a message. */
int fit_size_row(fit_cluster *c, fit_row *row);

/* The searches answer every probe as kvs_deployment_make's whole plan would
 * (a plan holds the demand at these budgets), but price only the stages'
 * tightest budgets (kvs_deployment_holds) where no rank's figures are
 * read. With exhaustive set, every probe makes the whole plan instead, as
 * before: the reference //tests/kvplan:fit_search_test holds the fast
 * searches to, answer for answer. The setting is this thread's (kvplan
 * runs one at a time in a process). */
void fit_search_set_exhaustive(bool exhaustive);

/* kvshard's two searches (demand mode). */
void fit_kvshard_demand(fit_cluster *c, fit_row *row);

/* kvshard's capacity: the most requests per group at c->fraction. */
void fit_kvshard_capacity(fit_cluster *c, fit_row *row);

/* The node buffers of kvshard's answer in row (demand: at the larger of
 * its smallest fraction and c->fraction; capacity: its most requests at
 * c->fraction), in the deployment kvplan plans (shard/plan_overhead.h):
 * the rank that needs the most into row->buffers. Rows without an answer
 * are not priced. */
void fit_kvshard_buffers(fit_cluster *c, fit_row *row);

/* SGLang's smallest fraction (demand mode), or its capacity at
 * c->engine_fraction (capacity, SGLang's default when not given); a layout
 * it cannot serve says why in row->sglang_why. Return 0. */
int fit_sglang_demand(fit_cluster *c, fit_row *row);
int fit_sglang_capacity(fit_cluster *c, fit_row *row);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_FIT_SEARCH_H */

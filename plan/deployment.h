/* The deployment: the whole of what is served, planned at once over every
 * host and rank: each rank's GPU, layers, budget and the exact bytes of
 * each KV tier it holds, under one common page count.
 *
 * Tensor parallelism does not shard the KV cache here: DSV4 has a single
 * latent KV head, so the tp ranks of a stage each hold the stage's full
 * tiers (as serving engines replicate MLA's latent cache). Each rank also
 * holds its own window pool sizing and full -> window mapping. Pipeline
 * stages hold contiguous layer groups chosen by kvs_split_solve against,
 * per stage, the smallest budget among its ranks (of every replica).
 *
 * NULL: kvs_deployment_create refuses a NULL request, GPU list, budgets or
 * output with KVS_ERR_INVALID_ARGUMENT naming it; the accessors read NULL,
 * 0 or false for a NULL plan (kvs_deployment_limiting_rank SIZE_MAX). */
#ifndef KVS_PLAN_DEPLOYMENT_H
#define KVS_PLAN_DEPLOYMENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "core/status.h"
#include "topology/gpu.h"
#include "plan/rank_layout.h"
#include "plan/stage_split.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_plan_request {
  const kvs_geometry *geometry;
  const kvs_row_widths *widths; /* NULL: kvs_row_widths_default */
  double swa_ratio;
  uint64_t page;
  uint64_t floor_win_pages;
  uint64_t n_scratch;
  size_t tp, pp; /* tp * pp must divide the GPU count */
  /* Optional: what a device allocates beyond the exact bytes (see
   * kvs_split_request); NULL plans the exact bytes alone. */
  kvs_footprint_fn footprint;
  void *footprint_ctx;
  /* Optional: per layer, the weight bytes each device holding it spends
   * (kvs_split_request). The budgets then cover weights and pool. */
  const uint64_t *layer_weight_bytes;
  /* Over a cluster: let a tensor-parallel group span hosts (refused
   * otherwise, naming the group; see kvs_rank_layout_cluster). */
  bool allow_cross_host_tp;
} kvs_plan_request;

typedef struct kvs_rank_plan {
  size_t rank, replica, tp_rank, pp_stage;
  size_t gpu;        /* position in the GPU list the plan was made for */
  size_t first, end; /* layers [first, end) */
  /* The KV budget: the device's budget less its layers' weights
   * (weight_bytes, 0 without per-layer weights). */
  uint64_t budget_bytes;
  uint64_t weight_bytes;
  kvs_pool_breakdown bytes;    /* exact */
  kvs_device_footprint device; /* what the device allocates; device.total_bytes <= budget_bytes */
  uint64_t headroom_bytes;     /* budget_bytes - device.total_bytes */
} kvs_rank_plan;

typedef struct kvs_deployment *kvs_deployment_t;

/* Why no plan fits: the device that cannot hold its layers' minimal pool
 * under the best split (the one needing the smallest uniform raise). */
typedef struct kvs_plan_shortfall {
  size_t rank;
  size_t gpu;
  size_t pp_stage;
  size_t first, end;
  uint64_t needed_bytes;
  uint64_t available_bytes;
  uint64_t min_pages;
} kvs_plan_shortfall;

/* Lays the ranks out over gpus[0..n_gpus) (kvs_rank_layout), splits the
 * layers (kvs_split_solve) under budgets[0..n_gpus) (bytes per GPU, by
 * list position) and prices every rank. Layout errors are
 * KVS_ERR_INVALID_ARGUMENT; a budget that cannot hold the minimal pool is
 * KVS_ERR_BUDGET_TOO_SMALL naming the GPU (bus id), rank and layers, with
 * *shortfall filled when non-NULL. *out is written only on success. */
kvs_status kvs_deployment_create(const kvs_plan_request *request, const kvs_gpu_info *gpus,
                                 size_t n_gpus, const uint64_t *budgets, kvs_deployment_t *out,
                                 kvs_plan_shortfall *shortfall, kvs_error *err);

/* Frees the plan; NULL is accepted. */
void kvs_deployment_destroy(kvs_deployment_t plan);

/* The split: the common page count, the window and every stage. */
const kvs_split *kvs_deployment_split(kvs_deployment_t plan);

size_t kvs_deployment_rank_count(kvs_deployment_t plan);

/* Rank i's plan, NULL past the end. */
const kvs_rank_plan *kvs_deployment_rank(kvs_deployment_t plan, size_t i);

size_t kvs_deployment_tp(kvs_deployment_t plan);
size_t kvs_deployment_pp(kvs_deployment_t plan);
size_t kvs_deployment_replicas(kvs_deployment_t plan);

/* The rank that limits the common page count: among the stages that
 * cannot hold one more page with their layers, the device with the
 * smallest budget (ties: least headroom, then lowest rank). */
size_t kvs_deployment_limiting_rank(kvs_deployment_t plan);
/* Whether some tensor-parallel group spans hosts. */
bool kvs_deployment_cross_host_tp(kvs_deployment_t plan);

/* What one slot of a host tier costs a machine: every rank keeps its own
 * pinned copy of a cached page's compressed and indexer rows (its stage's
 * layers), so a slot costs the sum over the ranks the machine runs, and
 * the machine running the most (the same slot count serves every rank)
 * sets it. gpus are the plan's (gpus[rank.gpu].host names the machine).
 * 0 without pages or GPUs. */
uint64_t kvs_deployment_host_slot_bytes(kvs_deployment_t plan, const kvs_gpu_info *gpus,
                                        size_t n_gpus);
/* Rank `rank`'s share of it: one page's compressed and indexer rows of its
 * stage's layers (what its own copy of a slot holds). 0 past the ranks or
 * without pages. */
uint64_t kvs_deployment_rank_host_bytes(kvs_deployment_t plan, size_t rank);

/* The slots a host tier of host_bytes per machine holds: host_bytes /
 * kvs_deployment_host_slot_bytes. A tier below one slot or of
 * KVS_HOST_SLOTS_LIMIT slots or more is refused (KVS_ERR_INVALID_ARGUMENT,
 * the message saying which, without the flag: the caller names it), as is
 * a plan whose pages hold no compressed or indexer rows. *slots is written
 * only on success. */
kvs_status kvs_deployment_host_slots(kvs_deployment_t plan, const kvs_gpu_info *gpus, size_t n_gpus,
                                     uint64_t host_bytes, uint64_t *slots, kvs_error *err);

/* The window pool's room for a prefix cache's retained tails (the window
 * page of a cached block's last page, kept after its request finished so
 * a later hit need not re-prefill it): what the plan's window holds past
 * the running requests' working set. */
typedef struct kvs_retained_tails {
  uint64_t window_pages;  /* the window every rank sizes, the dummy page included */
  uint64_t reserve_pages; /* kvs_cost_reserved_window_pages (the dummy's page among them) */
  uint64_t left_pages;    /* kvs_cost_window_pages_left: past the dummy and the reserve */
  uint64_t running_pages; /* max_running x KVS_WINDOW_PAGES_PER_REQUEST */
  uint64_t pages;         /* left_pages past running_pages (0 when they take it all) */
  uint64_t tails;         /* retained tails that fit at once: one window page each */
  /* What one tail holds on a rank, kvs_pool_sizes_window_page_bytes of its
   * stage: the most any stage's rank pays (all pay it with one stage). */
  uint64_t bytes_per_tail;
} kvs_retained_tails;

/* The retained tails a plan's window holds beside max_running requests
 * (radix: the reserve's radix share), by the pool's own rules. */
kvs_status kvs_deployment_retained_tails(kvs_deployment_t plan, uint64_t max_running, bool radix,
                                         kvs_retained_tails *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_DEPLOYMENT_H */

#include "plan/deployment.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "pool/window_pool.h"

struct kvs_deployment {
  size_t tp, pp, replicas;
  size_t n_ranks;
  size_t limiting_rank;
  bool cross_host_tp;
  kvs_split split;
  kvs_rank_plan *ranks;
};

/* The rank of a stage with the smallest budget (ties: lowest rank). */
static size_t tightest_rank(const kvs_rank_slot *slots, const uint64_t *budgets, size_t n,
                            size_t stage) {
  size_t best = n;
  for (size_t r = 0; r < n; r++) {
    if (slots[r].pp_stage != stage) continue;
    if (best == n || budgets[slots[r].gpu] < budgets[slots[best].gpu]) best = r;
  }
  return best;
}

/* Each rank's plan from its slot and its stage, and the limiting rank. */
static kvs_status place_ranks(const kvs_plan_request *req, struct kvs_deployment *plan,
                              const kvs_rank_slot *slots, const uint64_t *budgets, size_t n_gpus,
                              kvs_error *err) {
  plan->ranks = calloc(n_gpus, sizeof *plan->ranks);
  if (plan->ranks == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory for the plan");
  }
  plan->tp = req->tp;
  plan->pp = req->pp;
  plan->replicas = n_gpus / (req->tp * req->pp);
  plan->n_ranks = n_gpus;
  for (size_t r = 0; r < n_gpus; r++) {
    const kvs_stage_plan *stage = &plan->split.stages[slots[r].pp_stage];
    kvs_rank_plan *rp = &plan->ranks[r];
    rp->rank = r;
    rp->replica = slots[r].replica;
    rp->tp_rank = slots[r].tp_rank;
    rp->pp_stage = slots[r].pp_stage;
    rp->gpu = slots[r].gpu;
    rp->first = stage->first;
    rp->end = stage->end;
    rp->weight_bytes = stage->weight_bytes;
    rp->budget_bytes = budgets[rp->gpu] - stage->weight_bytes;
    rp->bytes = stage->bytes;
    rp->device = stage->device;
    rp->headroom_bytes = rp->budget_bytes - rp->device.total_bytes;
  }
  /* The limit: among the stages that cannot take one more page with their
   * layers (max_pages equals the common count; at least one does), the
   * device with the smallest budget (the one a raise would help), then
   * the least headroom, then the lowest rank. */
  size_t limiting = n_gpus;
  for (size_t r = 0; r < n_gpus; r++) {
    const kvs_rank_plan *rp = &plan->ranks[r];
    if (plan->split.stages[rp->pp_stage].max_pages != plan->split.num_pages) continue;
    const kvs_rank_plan *best = limiting < n_gpus ? &plan->ranks[limiting] : NULL;
    if (best == NULL || rp->budget_bytes < best->budget_bytes ||
        (rp->budget_bytes == best->budget_bytes && rp->headroom_bytes < best->headroom_bytes)) {
      limiting = r;
    }
  }
  plan->limiting_rank = limiting < n_gpus ? limiting : 0;
  return KVS_OK;
}

kvs_status kvs_deployment_create(const kvs_plan_request *req, const kvs_gpu_info *gpus,
                                 size_t n_gpus, const uint64_t *budgets, kvs_deployment_t *out,
                                 kvs_plan_shortfall *shortfall, kvs_error *err) {
  if (req == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request is NULL", __func__);
  }
  if (gpus == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: gpus is NULL", __func__);
  }
  if (budgets == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: budgets is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status;
  kvs_rank_slot *slots = calloc(n_gpus > 0 ? n_gpus : 1, sizeof *slots);
  struct kvs_deployment *plan = calloc(1, sizeof *plan);
  uint64_t stage_budgets[KVS_MAX_STAGES];
  if (slots == NULL || plan == NULL) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory for the plan");
    goto fail;
  }
  bool crossed = false;
  if ((status = kvs_rank_layout_cluster(gpus, n_gpus, req->tp, req->pp, req->allow_cross_host_tp,
                                        slots, &crossed, err)) != KVS_OK) {
    goto fail;
  }
  plan->cross_host_tp = crossed;
  if (req->pp > KVS_MAX_STAGES) {
    status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "pp %zu exceeds the %d stages planned",
                           req->pp, KVS_MAX_STAGES);
    goto fail;
  }
  /* A stage is as roomy as its tightest device, across replicas too:
   * every replica runs the same split so its ranks are interchangeable. */
  for (size_t s = 0; s < req->pp; s++) {
    stage_budgets[s] = budgets[slots[tightest_rank(slots, budgets, n_gpus, s)].gpu];
  }
  kvs_split_request split_req = {.geometry = req->geometry,
                                 .widths = req->widths,
                                 .swa_ratio = req->swa_ratio,
                                 .page = req->page,
                                 .floor_win_pages = req->floor_win_pages,
                                 .n_scratch = req->n_scratch,
                                 .n_stages = req->pp,
                                 .stage_budgets = stage_budgets,
                                 .footprint = req->footprint,
                                 .footprint_ctx = req->footprint_ctx,
                                 .layer_weight_bytes = req->layer_weight_bytes};
  kvs_split_shortfall split_short;
  status = kvs_split_solve(&split_req, &plan->split, &split_short, err);
  if (status == KVS_ERR_BUDGET_TOO_SMALL) {
    size_t r = tightest_rank(slots, budgets, n_gpus, split_short.stage);
    const kvs_gpu_info *gpu = &gpus[slots[r].gpu];
    kvs_plan_shortfall s = {r,
                            slots[r].gpu,
                            split_short.stage,
                            split_short.first,
                            split_short.end,
                            split_short.needed_bytes,
                            split_short.available_bytes,
                            split_short.min_pages};
    if (shortfall != NULL) *shortfall = s;
    status = kvs_error_set(
        err, KVS_ERR_BUDGET_TOO_SMALL,
        "GPU %zu (%s, rank %zu, stage %zu, layers %zu-%zu) has a budget of %llu bytes but "
        "needs %llu bytes for the minimal pool of %llu pages (window floor %llu pages)",
        gpu->index, gpu->pci_busid, r, split_short.stage, split_short.first, split_short.end - 1,
        (unsigned long long)split_short.available_bytes,
        (unsigned long long)split_short.needed_bytes, (unsigned long long)split_short.min_pages,
        (unsigned long long)split_short.floor_win_pages);
    goto fail;
  }
  if (status != KVS_OK) goto fail;

  if ((status = place_ranks(req, plan, slots, budgets, n_gpus, err)) != KVS_OK) goto fail;
  free(slots);
  *out = plan;
  return KVS_OK;
fail:
  free(slots);
  kvs_deployment_destroy(plan);
  return status;
}

void kvs_deployment_destroy(kvs_deployment_t plan) {
  if (plan == NULL) return;
  free(plan->ranks);
  free(plan);
}

/* The accessors read NULL or 0 for a NULL plan (the limiting rank:
 * SIZE_MAX, no rank). */
const kvs_split *kvs_deployment_split(kvs_deployment_t plan) {
  return plan != NULL ? &plan->split : NULL;
}

size_t kvs_deployment_rank_count(kvs_deployment_t plan) { return plan != NULL ? plan->n_ranks : 0; }

const kvs_rank_plan *kvs_deployment_rank(kvs_deployment_t plan, size_t i) {
  return plan != NULL && i < plan->n_ranks ? &plan->ranks[i] : NULL;
}

size_t kvs_deployment_tp(kvs_deployment_t plan) { return plan != NULL ? plan->tp : 0; }
size_t kvs_deployment_pp(kvs_deployment_t plan) { return plan != NULL ? plan->pp : 0; }
size_t kvs_deployment_replicas(kvs_deployment_t plan) { return plan != NULL ? plan->replicas : 0; }
size_t kvs_deployment_limiting_rank(kvs_deployment_t plan) {
  return plan != NULL ? plan->limiting_rank : SIZE_MAX;
}
bool kvs_deployment_cross_host_tp(kvs_deployment_t plan) {
  return plan != NULL && plan->cross_host_tp;
}

uint64_t kvs_deployment_rank_host_bytes(kvs_deployment_t plan, size_t rank) {
  if (plan == NULL || rank >= plan->n_ranks || plan->split.num_pages == 0) return 0;
  /* Each rank's page rows are whole (P is a multiple of every ratio), so
   * the division is exact. */
  const kvs_rank_plan *rp = &plan->ranks[rank];
  return (rp->bytes.compressed + rp->bytes.indexer) / plan->split.num_pages;
}

uint64_t kvs_deployment_host_slot_bytes(kvs_deployment_t plan, const kvs_gpu_info *gpus,
                                        size_t n_gpus) {
  if (plan == NULL || gpus == NULL || plan->split.num_pages == 0) return 0;
  uint64_t most = 0;
  /* Machines are numbered from 0 in host order. */
  for (size_t machine = 0; machine < n_gpus; machine++) {
    uint64_t sum = 0;
    for (size_t r = 0; r < plan->n_ranks; r++) {
      const kvs_rank_plan *rp = &plan->ranks[r];
      if (rp->gpu >= n_gpus || gpus[rp->gpu].host != machine) continue;
      sum += kvs_deployment_rank_host_bytes(plan, r);
    }
    if (sum > most) most = sum;
  }
  return most;
}

kvs_status kvs_deployment_host_slots(kvs_deployment_t plan, const kvs_gpu_info *gpus, size_t n_gpus,
                                     uint64_t host_bytes, uint64_t *slots, kvs_error *err) {
  if (plan == NULL || gpus == NULL || slots == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         plan == NULL   ? "plan"
                         : gpus == NULL ? "gpus"
                                        : "slots");
  }
  uint64_t slot = kvs_deployment_host_slot_bytes(plan, gpus, n_gpus);
  if (slot == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "no host tier: the plan's pages hold no compressed or indexer rows");
  }
  uint64_t n = host_bytes / slot;
  if (n == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "not one page: a host slot (one page's compressed and indexer rows for "
                         "every rank a machine runs) costs %llu bytes",
                         (unsigned long long)slot);
  }
  if (n >= KVS_HOST_SLOTS_LIMIT) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%llu slots of %llu bytes: a host tier holds fewer than 2^30",
                         (unsigned long long)n, (unsigned long long)slot);
  }
  *slots = n;
  return KVS_OK;
}

kvs_status kvs_deployment_retained_tails(kvs_deployment_t plan, uint64_t max_running, bool radix,
                                         kvs_retained_tails *out, kvs_error *err) {
  if (plan == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         plan == NULL ? "plan" : "out");
  }
  kvs_retained_tails t = {0};
  const kvs_split *split = &plan->split;
  t.window_pages = split->n_win_pages;
  kvs_status status;
  if ((status = kvs_cost_reserved_window_pages(max_running, radix, &t.reserve_pages, err)) ||
      (status =
           kvs_cost_window_pages_left(t.window_pages, max_running, radix, &t.left_pages, err))) {
    return status;
  }
  bool overflow = false;
  t.running_pages = kvs_mul(max_running, KVS_WINDOW_PAGES_PER_REQUEST, &overflow);
  if (overflow) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "max_running %llu overflows the working set",
                         (unsigned long long)max_running);
  }
  t.pages = t.left_pages > t.running_pages ? t.left_pages - t.running_pages : 0;
  t.tails = t.pages; /* a tail is one window page */
  for (size_t s = 0; s < split->n_stages; s++) {
    uint64_t bytes;
    status = kvs_pool_sizes_window_page_bytes(&split->stages[s].sizes, &split->stages[s].terms,
                                              &bytes, err);
    if (status != KVS_OK) return status;
    if (bytes > t.bytes_per_tail) t.bytes_per_tail = bytes;
  }
  *out = t;
  return KVS_OK;
}

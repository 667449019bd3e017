#include "shard/budget.h"

#include <stdio.h>
#include <string.h>

#include "core/options.h"
#include "core/mix.h"
#include "shard/rank_word.h"

/* Pages and rank share one word (rank_word.h) so that a single MIN names
 * both the smallest budget and who has it. */
enum { W_KEY, W_NOT_KEY, W_PARAMS, W_NOT_PARAMS, N_WORDS };

static uint64_t params_fingerprint(const kvs_budget_options *o) {
  uint64_t h = kvs_mix64(0, o->page);
  h = kvs_mix64_double(h, o->swa_ratio);
  h = kvs_mix64(h, o->max_seq_len);
  h = kvs_mix64(h, o->max_running);
  h = kvs_mix64(h, o->radix);
  return kvs_mix64(h, o->n_scratch);
}

/* This rank's own solve: its pages, or a local error (pages 0). */
static kvs_status solve_own(const kvs_geometry *geometry, const kvs_shard_layout *layout,
                            uint64_t budget_bytes, const kvs_budget_options *o, kvs_shard_budget *b,
                            kvs_error *err) {
  kvs_status status;
  if ((status = kvs_cost_terms_make(geometry, layout->layer_first, layout->layer_end, o->widths,
                                    &b->terms, err)) ||
      (status = kvs_cost_window_floor_pages(o->max_seq_len, o->max_running, o->radix, o->page,
                                       &b->floor_win_pages, err))) {
    return status;
  }
  kvs_pool_sizes own;
  kvs_budget_shortfall shortfall;
  status = kvs_cost_solve_num_pages_terms(budget_bytes, &b->terms, o->swa_ratio, b->floor_win_pages,
                                     o->page, o->n_scratch, &own, &shortfall, err);
  if (status == KVS_ERR_BUDGET_TOO_SMALL) {
    return kvs_error_set(err, status,
                         "rank %d (stage %d, layers [%zu, %zu)): a budget of %llu bytes cannot "
                         "hold the minimal pool of %llu pages, which needs %llu bytes",
                         layout->rank, layout->pp_stage, layout->layer_first, layout->layer_end,
                         (unsigned long long)shortfall.available_bytes,
                         (unsigned long long)shortfall.min_pages,
                         (unsigned long long)shortfall.needed_bytes);
  }
  if (status != KVS_OK) return status;
  b->own_pages = kvs_pool_sizes_num_pages(&own);
  if (b->own_pages > KVS_RANK_WORD_VALUE_MAX)
    b->own_pages = KVS_RANK_WORD_VALUE_MAX; /* 2^48 pages: never binding */
  return KVS_OK;
}

/* The window the solve gives `pages`: the ratio's share, at least the
 * floor, at most the history (core's solve_window, through public calls). */
static kvs_status agreed_sizes(const kvs_shard_budget *b, const kvs_budget_options *o,
                               uint64_t pages, kvs_pool_sizes *out, kvs_error *err) {
  uint64_t slots;
  kvs_status status = kvs_cost_scale_count(o->swa_ratio, pages * o->page, &slots, err);
  if (status != KVS_OK) return status;
  uint64_t win = (slots + o->page - 1) / o->page;
  if (win < b->floor_win_pages) win = b->floor_win_pages;
  if (win > pages) win = pages;
  return kvs_pool_sizes_compute_terms(pages, &b->terms, o->swa_ratio, o->page, win, out, err);
}

kvs_status kvs_shard_agree_budget(kvs_comm_t comm, const kvs_geometry *geometry,
                                  const kvs_shard_layout *layout, uint64_t budget_bytes,
                                  const kvs_budget_options *options, kvs_shard_budget *out,
                                  kvs_error *err) {
  if (comm == NULL || geometry == NULL || layout == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "comm, geometry, layout and output are required");
  }
  static const kvs_budget_options defaults = KVS_BUDGET_OPTIONS_INIT;
  kvs_budget_options adopted;
  kvs_status adopt = kvs_options_adopt(options, &defaults, sizeof defaults,
                                       "KVS_BUDGET_OPTIONS_INIT", &adopted, err);
  if (adopt != KVS_OK) return adopt;
  options = &adopted;
  if (layout->world != kvs_comm_size(comm) || layout->rank != kvs_comm_rank(comm)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "layout is rank %d of %d, the communicator rank %d of %d", layout->rank,
                         layout->world, kvs_comm_rank(comm), kvs_comm_size(comm));
  }
  kvs_shard_budget b;
  memset(&b, 0, sizeof b);
  b.budget_bytes = budget_bytes;
  kvs_error local;
  kvs_error_clear(&local);
  /* A rank that cannot size still takes part, with 0 pages, so nobody is
   * left waiting in the collective; the minimum then names it. */
  kvs_status local_status = solve_own(geometry, layout, budget_bytes, options, &b, &local);
  uint64_t pages = local_status == KVS_OK ? b.own_pages : 0;
  uint64_t key = kvs_rank_word(pages, layout->rank);
  uint64_t params = params_fingerprint(options);

  kvs_comm_buffer words = {NULL, NULL, 0, NULL};
  kvs_status status = kvs_comm_buffer_alloc(comm, N_WORDS * sizeof(uint64_t), &words, err);
  if (status != KVS_OK) return status;
  uint64_t *w = words.host;
  w[W_KEY] = key;
  w[W_NOT_KEY] = ~key;
  w[W_PARAMS] = params;
  w[W_NOT_PARAMS] = ~params;
  status = kvs_comm_allreduce_u64(comm, &words, N_WORDS, KVS_COMM_MIN, err);
  uint64_t min_key = w[W_KEY], max_key = ~w[W_NOT_KEY];
  uint64_t min_params = w[W_PARAMS], max_params = ~w[W_NOT_PARAMS];
  kvs_comm_buffer_free(comm, &words);
  if (status != KVS_OK) return status;

  if (min_params != max_params) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "ranks passed different sizing parameters (swa_ratio, page, "
                         "max_seq_len, max_running, radix or n_scratch): fingerprints %016llx "
                         "to %016llx; the group must size one pool shape",
                         (unsigned long long)min_params, (unsigned long long)max_params);
  }
  uint64_t agreed = kvs_rank_word_value(min_key);
  int tightest = kvs_rank_word_rank(min_key);
  if (agreed == 0) {
    if (local_status != KVS_OK) return kvs_error_set(err, local_status, "%s", local.message);
    return kvs_error_set(err, KVS_ERR_BUDGET_TOO_SMALL,
                         "rank %d could not size its pool (its budget cannot hold the minimal "
                         "pool, or its layers are invalid), so the group has no common page "
                         "count",
                         tightest);
  }
  kvs_pool_breakdown bytes;
  if ((status = agreed_sizes(&b, options, agreed, &b.sizes, err)) ||
      (status = kvs_pool_sizes_bytes_terms(&b.sizes, &b.terms, options->n_scratch, &bytes, err))) {
    return status;
  }
  b.agreed_pages = agreed;
  b.max_pages = kvs_rank_word_value(max_key);
  b.tightest_rank = tightest;
  b.loosest_rank = kvs_rank_word_rank(max_key);
  b.slack_pages = b.own_pages - agreed;
  b.agreed_bytes = bytes.total;
  b.slack_bytes = budget_bytes > bytes.total ? budget_bytes - bytes.total : 0;
  *out = b;
  return KVS_OK;
}

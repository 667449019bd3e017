/* Budget agreement: one page count for the whole group.
 *
 * Each rank solves its own device's pool byte-exactly for its own layers
 * (core/ cost model: kvs_cost_solve_num_pages_terms), then one allreduce agrees
 * on the MINIMUM page count, and every rank re-sizes its pool at that
 * count. Sizing from the maximum would pass at start-up and fail at the
 * first allocation on the smallest rank (an OOM far from its cause); the
 * minimum fits every rank by construction, because a pool's bytes grow
 * with its page count. Every rank also learns how far its own budget was
 * from the agreed pool (slack), which is the memory it leaves unused. */
#ifndef KVS_SHARD_BUDGET_H
#define KVS_SHARD_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "core/serving_defaults.h"
#include "core/status.h"
#include "shard/comm.h"
#include "shard/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sizing parameters; every rank must pass the same ones (the agreement
 * checks it). Start from KVS_BUDGET_OPTIONS_INIT. */
typedef struct kvs_budget_options {
  size_t size;          /* sizeof(kvs_budget_options) */
  double swa_ratio;     /* window share of the history; 0: the floor only */
  uint64_t page;        /* P */
  uint64_t max_seq_len; /* for the working-set floor */
  uint64_t max_running; /* for the working-set floor */
  bool radix;
  uint64_t n_scratch;           /* scratch rows per compressed / indexer pool */
  const kvs_row_widths *widths; /* NULL: the bf16 / fp32 defaults */
} kvs_budget_options;

#define KVS_BUDGET_OPTIONS_INIT                                                 \
  {                                                                             \
    sizeof(kvs_budget_options), KVS_DEFAULT_SWA_RATIO, KVS_DEFAULT_WINDOW_PAGE, \
        KVS_DEFAULT_MAX_SEQ_LEN, KVS_DEFAULT_MAX_RUNNING, KVS_DEFAULT_RADIX,    \
        KVS_DEFAULT_N_SCRATCH, NULL                                             \
  }

typedef struct kvs_shard_budget {
  uint64_t budget_bytes;    /* this rank's budget */
  uint64_t own_pages;       /* what this rank's budget alone would hold */
  uint64_t agreed_pages;    /* the minimum over ranks: the group's page count */
  uint64_t max_pages;       /* the maximum over ranks */
  int tightest_rank;        /* the lowest rank whose budget sets the minimum */
  int loosest_rank;         /* a rank holding the maximum */
  uint64_t slack_pages;     /* own_pages - agreed_pages */
  uint64_t agreed_bytes;    /* exact bytes of the agreed pool on this rank */
  uint64_t slack_bytes;     /* budget_bytes - agreed_bytes: left unused here */
  uint64_t floor_win_pages; /* the working-set floor the window was held to */
  kvs_cost_terms terms;     /* this rank's layer range */
  kvs_pool_sizes sizes;     /* the agreed pool, for this rank's layers */
} kvs_shard_budget;

/* Collective: every rank of comm calls it with its own budget. When any
 * rank's budget cannot hold the minimal pool, every rank fails with
 * KVS_ERR_BUDGET_TOO_SMALL naming the lowest such rank (that rank's
 * message also gives its bytes); when ranks pass different sizing
 * parameters, every rank fails with KVS_ERR_INVALID_ARGUMENT. *out is
 * written only on success. */
kvs_status kvs_shard_agree_budget(kvs_comm_t comm, const kvs_geometry *geometry,
                                  const kvs_shard_layout *layout, uint64_t budget_bytes,
                                  const kvs_budget_options *options, kvs_shard_budget *out,
                                  kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_BUDGET_H */

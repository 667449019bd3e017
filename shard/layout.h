/* Rank layout of a tensor x pipeline parallel group.
 *
 * world = tp * pp ranks, tensor-parallel-major: ranks [s*tp, (s+1)*tp)
 * form pipeline stage s, and tp_rank = rank % tp. Stage s owns a
 * contiguous range of layers; by default the layers are split as evenly
 * as contiguity allows (the first L % pp stages take one more), and a
 * placement (topology/) may pass its own boundaries instead.
 *
 * Every rank of every stage holds the same full -> window bindings: the
 * scheduler is one, and the agreed page count is one (shard/budget.h), so
 * one leader (rank 0) allocates for the whole group. */
#ifndef KVS_SHARD_LAYOUT_H
#define KVS_SHARD_LAYOUT_H

#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_SHARD_MAX_RANKS 65535 /* ranks are packed into 16 bits in reductions */

typedef struct kvs_shard_layout {
  int world;
  int rank;
  int tp;
  int pp;
  int tp_rank;        /* rank % tp */
  int pp_stage;       /* rank / tp */
  size_t layer_first; /* this stage's layers: [layer_first, layer_end) */
  size_t layer_end;
} kvs_shard_layout;

/* Even contiguous split of n_layers over pp stages. world must equal
 * tp * pp (the error names all three); pp <= n_layers. */
kvs_status kvs_shard_layout_make(int world, int rank, int tp, int pp, size_t n_layers,
                                 kvs_shard_layout *out, kvs_error *err);

/* The same with explicit stage boundaries: stage s owns
 * [bounds[s], bounds[s+1]); bounds has pp + 1 entries, strictly ascending,
 * from 0 to n_layers. */
kvs_status kvs_shard_layout_make_bounds(int world, int rank, int tp, int pp, size_t n_layers,
                                        const size_t *bounds, kvs_shard_layout *out,
                                        kvs_error *err);

/* The rank that allocates and broadcasts bindings. */
#define KVS_SHARD_LEADER 0

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_LAYOUT_H */

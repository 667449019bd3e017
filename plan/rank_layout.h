/* Rank layout: which GPU each rank of a tp x pp engine runs on.
 *
 * Ranks are numbered as Megatron-style engines do, tensor-parallel
 * innermost: rank = replica * (pp * tp) + pp_stage * tp + tp_rank. When
 * tp * pp is a proper divisor of the GPU count, the host runs
 * gpus / (tp * pp) data-parallel replicas of the same layout.
 *
 * The GPUs are walked in locality order: packages in the order of their
 * lowest GPU index, NUMA nodes within a package likewise, GPUs by index.
 * Tensor-parallel groups (which all-reduce every layer) are cut from one
 * NUMA node where tp of its GPUs are left, else from one package, and
 * only then across packages; the groups follow one another in that
 * order, so consecutive pipeline stages sit on the same NUMA node or
 * package before the pipeline crosses a socket. On a balanced machine
 * (four GPUs per socket) tp 4 x pp 2 puts one stage per socket and pp 8
 * crosses the socket once. A NULL GPU list or output, or no GPU, is
 * KVS_ERR_INVALID_ARGUMENT naming it. */
#ifndef KVS_PLAN_RANK_LAYOUT_H
#define KVS_PLAN_RANK_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "topology/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_rank_slot {
  size_t rank;
  size_t replica;  /* data-parallel replica, 0 when tp * pp = GPUs */
  size_t pp_stage; /* pipeline stage: which layer group */
  size_t tp_rank;  /* position in the stage's tensor-parallel group */
  size_t gpu;      /* index into the GPU list */
} kvs_rank_slot;

/* Lays n_gpus ranks over gpus[0..n_gpus) into out[0..n_gpus), indexed by
 * rank. tp or pp of 0, more ranks than GPUs, or tp * pp not dividing the
 * GPU count is KVS_ERR_INVALID_ARGUMENT with the numbers in the message;
 * out is written only on success. */
kvs_status kvs_rank_layout(const kvs_gpu_info *gpus, size_t n_gpus, size_t tp, size_t pp,
                           kvs_rank_slot *out, kvs_error *err);

/* The same with tensor-parallel groups allowed (allow_cross_host_tp) or
 * refused (KVS_ERR_INVALID_ARGUMENT naming the group's ranks and hosts)
 * across hosts; *crossed (may be NULL) says whether some group does.
 * kvs_rank_layout refuses them. */
kvs_status kvs_rank_layout_cluster(const kvs_gpu_info *gpus, size_t n_gpus, size_t tp, size_t pp,
                                   bool allow_cross_host_tp, kvs_rank_slot *out, bool *crossed,
                                   kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_RANK_LAYOUT_H */

/* The parallel layout of a serving replica beyond tp x pp: attention data
 * parallelism (dp) and expert parallelism (ep), as engines that serve
 * DeepSeek-V4 recommend them (DSV4 has one latent KV head, so tensor
 * parallelism copies the KV cache to every rank of a group, while each
 * data-parallel group holds its own requests and its own KV).
 *
 *   - A DP group is tp x pp ranks: one copy of the attention, one KV pool
 *     per rank, its own requests. The node plan lays the groups out as it
 *     lays out replicas of one tp x pp plan (plan/rank_layout.h).
 *   - A replica is tp x pp x dp GPUs: dp groups that share the routed
 *     experts. The GPUs of one pipeline stage of a replica (tp x dp of
 *     them) hold that stage's routed experts between them: ep of them
 *     whole experts each, the rest slices of them (ep divides tp x dp), so
 *     a GPU holds 1 / (tp x dp) of the stage's routed experts whatever ep
 *     is, and 1 / tp of everything else.
 *   - GPUs / (tp x pp x dp) replicas serve independently.
 * Engine-independent: the launch flags that say this to an engine are the
 * planner's (kvplan/plan_engine.h). */
#ifndef KVS_PLAN_PARALLEL_H
#define KVS_PLAN_PARALLEL_H

#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_parallel {
  size_t tp, pp; /* one DP group */
  size_t dp;     /* DP groups per replica */
  size_t ep;     /* GPUs of a stage holding whole experts */
} kvs_parallel;

/* The layout on n_gpus GPUs, refused (KVS_ERR_INVALID_ARGUMENT) with a
 * message that names the flag at fault: a count of 0 ("--tp", "--pp",
 * "--dp", "--ep"), tp x pp x dp not dividing the GPUs ("--dp", with the
 * values that would), ep above the GPUs, and ep not dividing tp x dp, the
 * GPUs of a stage that share the experts ("--ep", with the values that
 * would). NULL p is KVS_ERR_INVALID_ARGUMENT naming it. */
kvs_status kvs_parallel_check(const kvs_parallel *p, size_t n_gpus, kvs_error *err);

/* GPUs / (tp x pp x dp): replicas serving on their own (0 for NULL or a
 * layout that does not divide). */
size_t kvs_parallel_replicas(const kvs_parallel *p, size_t n_gpus);

/* GPUs / (tp x pp): DP groups over every replica, each with its own KV
 * (0 for NULL or a layout that does not divide). */
size_t kvs_parallel_groups(const kvs_parallel *p, size_t n_gpus);

/* tp x dp: the GPUs of a stage of a replica that share its routed experts
 * (0 for NULL). */
size_t kvs_parallel_moe_gpus(const kvs_parallel *p);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_PARALLEL_H */

/* A serving workload that drives a shard, for kvsim and the tests.
 *
 * Every rank runs the same seeded scheduler replica over the same arrivals
 * (as tensor-parallel engines do: each rank's scheduler sees the same
 * requests), so positions, full locations and admission decisions are
 * identical everywhere. Only the leader touches the window allocator;
 * followers take their bindings solely from the step broadcast. Each step:
 *
 *   1. arrivals join a bounded waiting queue;
 *   2. pages that left a request's P-token window after the previous step,
 *      and every live page of a request that completed, are freed;
 *   3. admission, FIFO, while there are fewer than max_running requests:
 *      a request needs its full-history pages and two window pages above
 *      the running requests' reserve; when the window pool cannot give
 *      them, admission is refused and the head waits; with per-request
 *      rings the leader binds the request a request slot (freed at its
 *      completion in step 2);
 *   4. each decoding request writes one position (binding a page when it
 *      enters one); prefilling requests take chunks of the per-step prefill
 *      budget, shrunk to the window pages that are free beyond the reserve;
 *   5. the shard step ships and applies the journal;
 *   6. every rank computes the ring context (kvs_window_pool_window_ctx) of
 *      every running request at its last written position and folds them
 *      into one digest, handed to the shard as the step's application
 *      digest (compared with the leader's in the next header and at
 *      checks).
 *
 * The reserve (two window pages per running request, less what it holds)
 * guarantees that decode binds never fail, so the leader's allocator is
 * never refused on a step it planned. */
#ifndef KVS_TOOLS_WORKLOAD_H
#define KVS_TOOLS_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "shard/shard.h"
#include "shard/table.h"
#include "tools/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_workload *kvs_workload_t;

typedef struct kvs_workload_options {
  size_t size; /* sizeof(kvs_workload_options) */
  uint64_t seed;
  uint64_t max_running; /* concurrent requests */
  uint64_t max_waiting; /* queue bound; arrivals beyond it are dropped */
  double arrival_rate;  /* expected arrivals per step */
  uint64_t prompt_min;  /* tokens */
  uint64_t prompt_max;
  uint64_t gen_min; /* generated tokens */
  uint64_t gen_max;
  uint64_t chunk_tokens; /* prefill tokens per step; 0: the pool's chunk budget */
  /* A trace instead of seeded arrivals (NULL: seeded): requests arrive at
   * their timestamps, a step lasting step_ms, and the prefix policy
   * (KVS_PREFIX_POLICY_*) decides what they reuse. The pool must keep a
   * prefix cache for any policy but none, and rings per request. */
  const kvs_trace *trace;
  double step_ms;
  int prefix_policy;
  uint64_t reprefill_tokens; /* what a kvshard hit may re-prefill (0: none) */
  /* Simulated milliseconds to copy one full page back from the host tier
   * (its bytes over the host link's bandwidth; 0: free). A request whose
   * hit fetched blocks computes nothing for the steps that copy takes. */
  double host_ms_per_page;
  /* Simulated milliseconds to read one full page from the disk tier into
   * its staging slot (then copied back as a host block). */
  double disk_ms_per_page;
} kvs_workload_options;

enum {
  KVS_PREFIX_POLICY_NONE = 0,
  KVS_PREFIX_POLICY_KVSHARD = 1,
  KVS_PREFIX_POLICY_SGLANG = 2,
  KVS_PREFIX_POLICY_VLLM = 3
};

#define KVS_WORKLOAD_OPTIONS_INIT \
  { sizeof(kvs_workload_options), 1, 16, 64, 0.5, 64, 768, 32, 512, 0, NULL, 50.0, 0, 0, 0.0, 0.0 }

/* The prefix-cache keys of trace request `id`'s pages whose trace block is
 * whole (page j of block b is key mix(id_b + 1, j)), into keys[0..n);
 * returns n. The one rule of kvsim's cache keys (the workload's policies
 * and kvsim_local --pd's decode side). */
uint64_t kvs_workload_trace_keys(const kvs_trace *trace, uint64_t page, size_t id, uint64_t *keys);

/* Longest request the options can produce (prompt_max + gen_max): the
 * max_seq_len the budget's working-set floor needs. */
uint64_t kvs_workload_max_seq_len(const kvs_workload_options *options);

/* Borrows the shard (which must outlive the workload). Every rank must
 * pass the same options. The worst step (kvs_shard_step_capacity_for of
 * the chunk and max_running) must fit the shard's step capacity. */
kvs_status kvs_workload_create(kvs_shard_t shard, const kvs_workload_options *options,
                               kvs_workload_t *out, kvs_error *err);
void kvs_workload_destroy(kvs_workload_t workload);

typedef struct kvs_workload_counters {
  uint64_t arrivals;
  uint64_t dropped; /* arrivals that found the queue full */
  uint64_t admitted;
  uint64_t refused; /* steps whose queue head was refused for want of pages */
  uint64_t completed;
  uint64_t running;
  uint64_t waiting;
  uint64_t prefill_tokens;
  uint64_t decode_tokens;
  uint64_t contexts;       /* ring contexts computed */
  uint64_t context_digest; /* the last step's */
  /* With a trace: its requests served, their prompts and what they
   * reused (identical on every rank: each learns the leader's decisions
   * from the step's journal). */
  uint64_t trace_done;         /* requests that completed */
  uint64_t trace_skipped;      /* requests the pool can never hold */
  uint64_t trace_longest;      /* tokens (input + output) of the longest skipped one */
  uint64_t max_request_tokens; /* the most one request can hold in this pool */
  /* Steps of idle time the clock jumped over: with nothing running or
   * waiting, the next step is the next arrival's (the steps between would
   * change nothing), so a trace stamped in Unix-epoch milliseconds starts
   * at once. The clock stands at (steps run + these) x step_ms. */
  uint64_t idle_steps_skipped;
  uint64_t trace_start_step; /* the clock's step when the first request arrived */
  uint64_t prompt_tokens;    /* of admitted requests */
  uint64_t hit_tokens;
  uint64_t reprefill_tokens; /* window tokens recomputed on hits */
  uint64_t truncated_tokens; /* matched tokens recomputed for want of a tail */
  uint64_t evictions;
  uint64_t tail_drops;
  uint64_t peak_cached_pages;
  uint64_t host_hit_tokens; /* of hit_tokens, copied back from the host tier */
  double host_copy_ms;      /* simulated time those copies took */
  uint64_t spills;          /* blocks the cache moved to the host tier */
  uint64_t host_drops;      /* blocks the host tier let go */
  uint64_t host_slots;      /* the host tier's pages */
  /* The leader's admissions whose match reached into the host tier, and
   * of them those taken as their GPU part instead (0 on a follower: the
   * journal carries what was taken, not what was tried). */
  uint64_t host_hit_attempts;
  uint64_t host_hit_fallbacks;
  /* The disk tier: of host_hit_tokens, those read from it; the simulated
   * time those reads took; its pages, blocks, writes and drops, and the
   * leader's blocks evicted before their write. */
  uint64_t disk_hit_tokens;
  double disk_read_ms;
  uint64_t disk_slots, disk_blocks, stores, disk_drops, store_missed;
} kvs_workload_counters;

/* Collective bookkeeping after each step, every rank: with a trace, the
 * leader's decisions of the step (its journal: entries, as the step's
 * info gives them) become every rank's admissions, completions and
 * evictions. A rank whose queue does not match is KVS_ERR_DIVERGENCE. */
kvs_status kvs_workload_learn(kvs_workload_t workload, const kvs_journal_entry *entries, size_t n,
                              kvs_error *err);

/* A cached block a running request's hit holds (its last), to aim a cache
 * divergence at; KVS_ERR_NOT_FOUND when none. */
kvs_status kvs_workload_live_block(const struct kvs_workload *workload, uint64_t *block,
                                   kvs_error *err);

/* Every request of the trace has completed (false without a trace). */
bool kvs_workload_trace_done(const struct kvs_workload *workload);

void kvs_workload_counters_get(const struct kvs_workload *workload, kvs_workload_counters *out);

/* Collective (it runs kvs_shard_step): scheduler step `step`. Returns the
 * shard step's status: KVS_ERR_DIVERGENCE means this rank found itself out
 * of step with the leader and should carry on to the next check. On the
 * leader, a refused allocation (a scheduler bug) is reported before the
 * broadcast, after telling the followers (kvs_shard_abort_step). */
kvs_status kvs_workload_step(kvs_workload_t workload, uint64_t step, kvs_error *err);

/* The step in three parts, for a caller that runs the shard step itself
 * (the node: kvs_node_step computes the ring contexts on its tables).
 *
 * kvs_workload_schedule runs the scheduler (arrivals, frees, admission,
 * the leader's binds) for `step`; on the leader a refused allocation is
 * reported after telling the followers (kvs_shard_abort_step). Then the
 * caller steps the shard. kvs_workload_batch gives every running request's
 * block table row (its full pages, -1 past them, blocks of P tokens), its
 * last written position (-1 before the first) and its request id (the node
 * resolves each row's request slot from its own mirror after the step
 * applies, so a follower whose slot differs derives other ring locations),
 * in scheduling order, identical on every rank; the arrays live in the
 * workload until the next call. kvs_workload_verify_ring compares a batch's ring contexts (host
 * memory) with the pool's own kvs_window_pool_window_ctx for every row.
 * kvs_workload_advance ends the step. */
kvs_status kvs_workload_schedule(kvs_workload_t workload, uint64_t step, kvs_error *err);
void kvs_workload_batch(kvs_workload_t workload, kvs_ring_batch *out);
kvs_status kvs_workload_verify_ring(kvs_workload_t workload, const int64_t *own,
                                    const int64_t *prev, const int64_t *ring, size_t n_req,
                                    kvs_error *err);
void kvs_workload_advance(kvs_workload_t workload);

/* Compares a batch's ratio-4 and ratio-128 ring locations (host memory,
 * kvs_table_result_to_host) with the pool's own: per request from the
 * request's slot and position (kvs_request_state_loc), per page from the
 * window slot (kvs_state_loc). A mismatch is KVS_ERR_DIVERGENCE naming
 * the request, the row and its slot here. */
kvs_status kvs_workload_verify_state(kvs_workload_t workload, const int64_t *csa,
                                     const int64_t *hca, size_t n_req, kvs_error *err);

/* The running request with the most tokens left, to aim a slot flip at. */
kvs_status kvs_workload_live_request(const struct kvs_workload *workload, uint64_t *request,
                                     kvs_error *err);

/* A bound full page that stays live for a while (the current page of the
 * decoding request with the most tokens left), to aim fault injection at:
 * a flipped page that is freed before the next check heals itself. */
kvs_status kvs_workload_live_page(const struct kvs_workload *workload, uint64_t *full_page,
                                  kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOOLS_WORKLOAD_H */

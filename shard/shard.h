/* The shard runtime: identical window bindings on every rank.
 *
 * Tensor-parallel ranks (and, with one agreed page count, pipeline stages)
 * must derive identical ring locations at every step, or a rank reads
 * another request's carry state with no error anywhere. So:
 *
 * - One leader (rank 0) allocates: it is the only rank whose pool's
 *   allocator runs. Its binding journal is shipped once per scheduler step
 *   in ONE fixed-capacity broadcast (shard/step_message.h); followers
 *   replay it onto their mirror pools (kvs_window_pool_apply, all or
 *   nothing). Every rank, the leader included, learns where the step's
 *   entries lie (kvs_shard_step_info) and hands them on itself: the shard
 *   calls nothing back, so what follows a step (the node's table step)
 *   runs in the caller's order, on the caller's stream.
 * - Steps are epochs: every rank runs step k only after k-1; a message for
 *   another step is refused (KVS_ERR_EPOCH) and changes nothing.
 * - After applying, a follower compares its digest with the leader's (it
 *   rides in the header) and an application digest (e.g. of the step's
 *   ring contexts) with the leader's of the step before; a difference is
 *   reported at once to that rank (KVS_ERR_DIVERGENCE from kvs_shard_step)
 *   and remembered for the next check.
 * - A check (every check_every steps, or on demand) is one allreduce of
 *   min and max of the digests and of every rank's flags. On a mismatch
 *   the ranks bisect over full-page ranges with digest_range, O(log pages)
 *   small collectives, and every rank gets the same report: the first
 *   differing full page, the leader's window page, the first differing
 *   rank and its window page.
 *
 * Every call that communicates is collective: all ranks call it, in the
 * same order. A rank that detected a divergence keeps stepping (so its
 * peers are not left waiting) until the next check reports it to all.
 * A comm failure poisons the shard (every later call returns it). */
#ifndef KVS_SHARD_SHARD_H
#define KVS_SHARD_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cost_model.h"
#include "pool/journal.h"
#include "core/serving_defaults.h"
#include "core/status.h"
#include "pool/window_pool.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_shard *kvs_shard_t;

/* The rank that allocates and broadcasts bindings. */
#define KVS_SHARD_LEADER 0
/* Ranks are packed into 16 bits in reductions (shard/rank_word.h). */
#define KVS_SHARD_MAX_RANKS 65535

typedef struct kvs_shard_options {
  size_t size;                   /* sizeof(kvs_shard_options) */
  uint64_t max_running;          /* concurrent requests: the pool's reserve, the capacity */
  bool radix;                    /* the pool's cache mode */
  size_t step_capacity;          /* journal entries per step; 0: kvs_shard_step_capacity_for */
  uint64_t check_every;          /* steps between digest checks; 0: on demand only */
  bool check_integrity;          /* each check also runs the pool's integrity check */
  bool prefix_cache;             /* the pool keeps a prefix cache (pool/window_pool.h) */
  uint64_t prefix_align;         /* its hits' alignment in tokens (the ratios' lcm) */
  uint64_t host_pages;           /* the prefix cache's host tier (0: none) */
  uint64_t disk_pages;           /* its disk tier (0: none) */
  uint64_t disk_stores_per_step; /* blocks a step writes to it at most */
  /* Bytes of the application area each step message carries from the
   * leader (kvs_shard_step_with; 0: none), the same on every rank. */
  size_t app_capacity;
} kvs_shard_options;

#define KVS_SHARD_OPTIONS_INIT                                                                 \
  {                                                                                            \
    sizeof(kvs_shard_options), KVS_DEFAULT_MAX_RUNNING, KVS_DEFAULT_RADIX, 0, 64, true, false, \
        128, 0, 0, 0, 0                                                                        \
  }

/* Entries one step can carry for a scheduler that binds a prefill chunk of
 * at most chunk_tokens (over all requests) plus one decode page per
 * request, and frees pages once they leave a P-token window: binds <=
 * ceil(chunk/P) + 2 * running (a chunk touches at most one page more than
 * its length at each end), frees the same (what the previous step bound,
 * plus completions' live pages, at most 2 each). */
size_t kvs_shard_step_capacity_for(uint64_t chunk_tokens, uint64_t page, uint64_t max_running);

/* The capacity kvs_shard_create gives a shard over sizes: step_capacity
 * when non-zero, else kvs_shard_step_capacity_for over the pool's prefill
 * chunk budget (half the window left after the pages reserved for
 * max_running requests, radix or not, at least one page), with a prefix
 * cache's entries on top. Before the shard
 * exists, so a planner prices the step message the node will send
 * (plan/node_overhead.h). Sizes holding no window page, or a capacity one
 * collective cannot carry, are KVS_ERR_INVALID_ARGUMENT as create says;
 * *out is written only on success. */
kvs_status kvs_shard_step_capacity_of(const kvs_pool_sizes *sizes, uint64_t max_running, bool radix,
                                      bool prefix_cache, size_t step_capacity, size_t *out,
                                      kvs_error *err);

/* Collective. Builds this rank's pool over sizes (the agreed ones, see
 * the node's budget step) and the step buffers, and checks with one allreduce that
 * every rank built the same pool shape and capacity. The leader's pool
 * journals into a journal of step_capacity entries, so an operation that
 * would overflow a step is refused (KVS_ERR_JOURNAL_FULL) before it
 * changes anything. comm is borrowed and must outlive the shard. With no
 * step_capacity given, the capacity follows the pool's prefill chunk
 * budget. */
kvs_status kvs_shard_create(kvs_comm_t comm, const kvs_pool_sizes *sizes,
                            const kvs_shard_options *options, kvs_shard_t *out, kvs_error *err);
void kvs_shard_destroy(kvs_shard_t shard);

/* This rank's pool. The leader allocates and frees through it between
 * steps; followers must only read it (their changes arrive by step). */
kvs_window_pool_t kvs_shard_pool(kvs_shard_t shard);
int kvs_shard_rank(const struct kvs_shard *shard);
int kvs_shard_size(const struct kvs_shard *shard);
bool kvs_shard_is_leader(const struct kvs_shard *shard);
size_t kvs_shard_step_capacity(const struct kvs_shard *shard);
/* The step this rank runs next (steps start at 0). */
uint64_t kvs_shard_next_step(const struct kvs_shard *shard);
/* KVS_OK, or the status that stopped this shard: KVS_ERR_COMM after a
 * leader's abort (sent or received) or a failed collective. */
kvs_status kvs_shard_health(const struct kvs_shard *shard);
/* Whether `step` is one after which a periodic check is due. */
bool kvs_shard_check_due(const struct kvs_shard *shard, uint64_t step);

typedef struct kvs_shard_step_info {
  uint64_t step;
  size_t entries; /* bound + freed pages in the step */
  size_t binds;
  size_t frees;
  /* The step's journal as this rank received and applied it (host
   * memory), and the whole step message in device memory on a device
   * communicator (else NULL), for the tables: valid until the step after
   * next (steps alternate between two message buffers). */
  const kvs_journal_entry *entries_at;
  const void *device_message;
  /* The leader's application bytes for this step (host memory, in the
   * message: valid until the step after next); NULL and 0 without. */
  const void *app;
  size_t app_bytes;
} kvs_shard_step_info;

/* Collective: step `step` (must be kvs_shard_next_step; otherwise
 * KVS_ERR_EPOCH before any communication). The leader ships the journal
 * its pool accumulated since the last step; followers apply it. Returns
 * KVS_ERR_DIVERGENCE when this rank finds itself out of step with the
 * leader (its digest differs, its mirror refused the journal, or the
 * application digest differs); the step still counts and the rank should
 * carry on to the next check. info may be NULL. */
kvs_status kvs_shard_step(kvs_shard_t shard, uint64_t step, kvs_shard_step_info *info,
                          kvs_error *err);
/* kvs_shard_step carrying the leader's application bytes (at most the
 * shard's app_capacity; a follower passes NULL and 0, and a follower's
 * bytes are refused before any communication), which every rank finds in
 * info->app. */
kvs_status kvs_shard_step_with(kvs_shard_t shard, uint64_t step, const void *app, size_t app_bytes,
                               kvs_shard_step_info *info, kvs_error *err);
size_t kvs_shard_app_capacity(const struct kvs_shard *shard);

/* Collective, leader side: instead of step `step`, tells every follower
 * that the leader stops, with `reason` and a short text; followers'
 * kvs_shard_step returns KVS_ERR_COMM quoting them. Poisons the shard on
 * every rank. Followers call kvs_shard_step as usual. */
kvs_status kvs_shard_abort_step(kvs_shard_t shard, uint64_t step, kvs_status reason,
                                const char *text, kvs_error *err);

/* Follower side, local: applies one received step message (for engines
 * that move the message themselves, and for tests). A message for any
 * step but kvs_shard_next_step is KVS_ERR_EPOCH and changes nothing; a
 * malformed one is KVS_ERR_CORRUPT. Returns KVS_ERR_DIVERGENCE as
 * kvs_shard_step does. The leader may not call it. */
kvs_status kvs_shard_apply_message(kvs_shard_t shard, const void *message, size_t bytes,
                                   kvs_shard_step_info *info, kvs_error *err);

/* Local: this rank's application digest of `step` (e.g. a hash of the
 * step's ring contexts). The leader's rides in the next step's header;
 * followers compare theirs with it, and checks compare the latest. */
void kvs_shard_set_aux_digest(kvs_shard_t shard, uint64_t step, uint64_t digest);

typedef enum kvs_shard_divergence {
  KVS_SHARD_AGREE = 0,
  KVS_SHARD_DIVERGED_BINDINGS = 1,  /* window bindings differ */
  KVS_SHARD_DIVERGED_AUX = 2,       /* application digests differ, bindings agree */
  KVS_SHARD_DIVERGED_INTEGRITY = 3, /* a rank's pool fails its integrity check */
  KVS_SHARD_DIVERGED_STEPS = 4,     /* ranks are at different steps */
  KVS_SHARD_DIVERGED_PREFIX = 5     /* a cached prefix block differs (full_page names it) */
} kvs_shard_divergence;

/* "agree", "bindings", "application digest", "integrity", "steps". */
const char *kvs_shard_divergence_name(kvs_shard_divergence kind);

/* What a check found; identical on every rank. */
typedef struct kvs_shard_report {
  kvs_shard_divergence kind;
  uint64_t step;       /* the last step applied when the check ran */
  uint64_t digest_min; /* binding digests over ranks */
  uint64_t digest_max;
  uint64_t full_page;         /* first differing full page; UINT64_MAX none */
  int64_t leader_window_page; /* its window page on the leader; -1 unbound */
  int rank;                   /* first rank that differs from the leader; -1 none */
  int64_t rank_window_page;   /* its window page on that rank; -1 unbound */
  int ranks_differing;        /* ranks whose page (or digest) differs from the leader's */
  uint64_t first_seen_step;   /* earliest step a follower saw itself differ; UINT64_MAX */
  int first_seen_rank;        /* that follower; -1 */
  uint64_t collectives;       /* collectives the check used */
  /* A request slot that differs (per-request rings), located like a page:
   * UINT64_MAX none; then the requests it holds on the leader and on
   * `rank` (-1 free). full_page is UINT64_MAX in that case. */
  uint64_t request_slot;
  int64_t leader_request;
  int64_t rank_request;
} kvs_shard_report;

/* Collective: compares every rank's binding digest, application digest,
 * step and flags in one allreduce (min and max). KVS_OK when all agree.
 * Otherwise KVS_ERR_DIVERGENCE on every rank, with the report filled and a
 * message naming the step, the page, the leader's and the rank's window
 * pages; differing bindings are located by bisection over full-page
 * ranges (then request slots, which follow the pages in the digest) in
 * O(log pages) collectives. report may be NULL. With entries journaled on
 * the leader since its last step (its pool is ahead of every mirror until
 * the step carries them) nothing is compared: KVS_ERR_PENDING on every
 * rank, naming how many, the report untouched (ranks at different steps
 * are still reported as such first). */
kvs_status kvs_shard_check(kvs_shard_t shard, kvs_shard_report *report, kvs_error *err);

/* Collective: kvs_shard_check with this rank's verdict on state the pool
 * does not hold itself (the node's device tables against the pool):
 * `local` is KVS_OK or the failure, `local_err` (may be NULL) its message.
 * A failure rides in the check's one allreduce as an integrity failure of
 * this rank ("check of the state beside its pool failed"), reported on
 * every rank, with the message on this one. */
kvs_status kvs_shard_check_with(kvs_shard_t shard, kvs_status local, const kvs_error *local_err,
                                kvs_shard_report *report, kvs_error *err);

/* Fault injection, local: moves full page `full_page`'s binding on this
 * rank only to another window page (a free one when there is one, through
 * the pool's own replay so its free list stays consistent; otherwise by a
 * raw rebind), as a lost or misapplied update would. The page must be
 * bound. *from and *to (may be NULL) get the window pages. */
kvs_status kvs_shard_inject_flip(kvs_shard_t shard, uint64_t full_page, int64_t *from, int64_t *to,
                                 kvs_error *err);

/* Fault injection, local: moves request `request`'s request slot on this
 * rank only to the lowest free slot (raw, outside the journal), as a
 * misapplied admission would; with every slot bound, it swaps slots with
 * the request in the lowest other slot. The request must hold a slot.
 * *from and *to (may be NULL) get the slots. */
kvs_status kvs_shard_inject_slot_flip(kvs_shard_t shard, uint64_t request, int64_t *from,
                                      int64_t *to, kvs_error *err);

typedef struct kvs_shard_stats {
  uint64_t steps;
  uint64_t binds;            /* bound pages shipped (leader) or applied (followers) */
  uint64_t frees;            /* freed pages, likewise */
  uint64_t max_entries;      /* the fullest step */
  uint64_t payload_bytes;    /* header + 16 per entry, summed over steps */
  uint64_t wire_bytes;       /* the fixed-capacity message, summed over steps */
  uint64_t step_collectives; /* collectives issued by steps */
  uint64_t checks;
  uint64_t check_collectives; /* collectives issued by checks */
  /* Where steps spent their time (monotonic clock, summed over steps). */
  uint64_t broadcast_ns; /* the step's collective */
  uint64_t mirror_ns;    /* followers' replay onto their mirror pool, digest checks */
} kvs_shard_stats;

void kvs_shard_stats_get(const struct kvs_shard *shard, kvs_shard_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_SHARD_H */

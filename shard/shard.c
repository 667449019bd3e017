#include "shard/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "core/clock.h"
#include "core/mix.h"
#include "shard/rank_word.h"
#include "shard/step_message.h"

#define NONE UINT64_MAX
/* A window page and a rank in one word: the rank above, page + 1 below. */
#define PAGE_BITS 40
#define PAGE_MASK ((UINT64_C(1) << PAGE_BITS) - 1)

/* The check's one allreduce (MIN): a value and its complement give min
 * and max at once; keys give the lowest rank with a property. */
enum {
  C_DIGEST,
  C_NOT_DIGEST,
  C_AUX,
  C_NOT_AUX,
  C_AUX_STEP,
  C_NOT_AUX_STEP,
  C_STEP,
  C_NOT_STEP,
  C_SEEN,      /* first step a follower saw itself differ << 16 | rank */
  C_INTEGRITY, /* the leader's pending entries, or the rank whose integrity check failed */
  C_WORDS
};

struct kvs_shard {
  kvs_comm_t comm;
  int rank;
  int size;
  bool leader;
  kvs_window_pool_t pool;
  uint64_t page;
  uint64_t n_full_pages;
  size_t capacity;
  size_t app_capacity;  /* the application area's bytes (0: none) */
  size_t message_bytes; /* header, entries' room, application area */
  /* header + capacity entries, two of them: step k travels in
   * message[k % 2], so a device that still reads step k's message while
   * step k + 1 is broadcast reads it whole (shard.h). */
  kvs_comm_buffer message[2];
  kvs_comm_buffer words; /* C_WORDS words for checks */
  uint64_t next_step;
  uint64_t check_every;
  bool check_integrity;

  uint64_t aux_step; /* NONE until set */
  uint64_t aux_digest;
  uint64_t seen_step;   /* first step this follower saw itself differ; NONE */
  uint64_t stale_since; /* step whose journal this mirror refused; NONE */

  kvs_status failed; /* sticky */
  char failure[KVS_ERROR_MESSAGE_MAX];
  kvs_shard_stats stats;
};

size_t kvs_shard_step_capacity_for(uint64_t chunk_tokens, uint64_t page, uint64_t max_running) {
  if (page == 0) page = 1;
  uint64_t chunk_pages = (chunk_tokens + page - 1) / page;
  /* Page binds and frees, and a request slot bound and freed per running
   * request at most (per-request rings). */
  return (size_t)(2 * chunk_pages + 6 * max_running + 4);
}

const char *kvs_shard_divergence_name(kvs_shard_divergence kind) {
  switch (kind) {
    case KVS_SHARD_AGREE:
      return "agree";
    case KVS_SHARD_DIVERGED_BINDINGS:
      return "bindings";
    case KVS_SHARD_DIVERGED_AUX:
      return "application digest";
    case KVS_SHARD_DIVERGED_INTEGRITY:
      return "integrity";
    case KVS_SHARD_DIVERGED_STEPS:
      return "steps";
    case KVS_SHARD_DIVERGED_PREFIX:
      return "prefix cache";
  }
  return "?";
}

/* ---- lifecycle ---- */

void kvs_shard_destroy(kvs_shard_t shard) {
  if (shard == NULL) return;
  kvs_comm_buffer_free(shard->comm, &shard->message[0]);
  kvs_comm_buffer_free(shard->comm, &shard->message[1]);
  kvs_comm_buffer_free(shard->comm, &shard->words);
  kvs_window_pool_destroy(shard->pool);
  free(shard);
}

/* The pool's prefill chunk budget, before the pool exists (the step
 * capacity sizes the pool's journal): core's rule, from public numbers. */
static kvs_status chunk_budget(const kvs_pool_sizes *sizes, uint64_t max_running, bool radix,
                               uint64_t *out, kvs_error *err) {
  uint64_t left;
  kvs_status status =
      kvs_cost_window_pages_left(sizes->n_win_slots / sizes->page, max_running, radix, &left, err);
  if (status != KVS_OK) return status;
  *out = left / 2 * sizes->page > sizes->page ? left / 2 * sizes->page : sizes->page;
  return KVS_OK;
}

kvs_status kvs_shard_step_capacity_of(const kvs_pool_sizes *sizes, uint64_t max_running, bool radix,
                                      bool prefix_cache, size_t step_capacity, size_t *out,
                                      kvs_error *err) {
  if (sizes == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         sizes == NULL ? "sizes" : "out");
  }
  if (sizes->page == 0 || sizes->n_win_slots < sizes->page) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "sizes hold no window page (page %llu, %llu window slots)",
                         (unsigned long long)sizes->page, (unsigned long long)sizes->n_win_slots);
  }
  size_t capacity = step_capacity;
  kvs_status status;
  if (capacity == 0) {
    uint64_t chunk;
    if ((status = chunk_budget(sizes, max_running, radix, &chunk, err))) {
      return status;
    }
    capacity = kvs_shard_step_capacity_for(chunk, sizes->page, max_running);
    /* A prefix cache adds per page inserted two entries and a tail, per
     * eviction up to three, per request an acquire, a release and a move. */
    if (prefix_cache) capacity = capacity * 3 + 8 * (size_t)max_running;
  }
  /* The message travels as one int-counted transfer. */
  if (capacity > (size_t)(INT32_MAX - KVS_STEP_HEADER_BYTES) / KVS_STEP_ENTRY_BYTES) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "step capacity %zu entries does not fit one collective", capacity);
  }
  *out = capacity;
  return KVS_OK;
}

kvs_status kvs_shard_create(kvs_comm_t comm, const kvs_pool_sizes *sizes,
                            const kvs_shard_options *options, kvs_shard_t *out, kvs_error *err) {
  if (comm == NULL || sizes == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "comm, sizes and output are required");
  }
  static const kvs_shard_options defaults = KVS_SHARD_OPTIONS_INIT;
  kvs_shard_options adopted;
  kvs_status adopt = kvs_options_adopt(options, &defaults, sizeof defaults,
                                       "KVS_SHARD_OPTIONS_INIT", &adopted, err);
  if (adopt != KVS_OK) return adopt;
  options = &adopted;
  if (kvs_comm_size(comm) > KVS_SHARD_MAX_RANKS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%d ranks exceed the %d a shard supports",
                         kvs_comm_size(comm), KVS_SHARD_MAX_RANKS);
  }
  size_t capacity;
  kvs_status status =
      kvs_shard_step_capacity_of(sizes, options->max_running, options->radix, options->prefix_cache,
                                 options->step_capacity, &capacity, err);
  if (status != KVS_OK) return status;

  struct kvs_shard *shard = calloc(1, sizeof *shard);
  if (shard == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a shard");
  shard->comm = comm;
  shard->rank = kvs_comm_rank(comm);
  shard->size = kvs_comm_size(comm);
  shard->leader = shard->rank == KVS_SHARD_LEADER;
  shard->page = sizes->page;
  shard->n_full_pages = sizes->full_token / sizes->page;
  shard->capacity = capacity;
  shard->app_capacity = options->app_capacity;
  shard->message_bytes =
      kvs_step_message_bytes(capacity) + kvs_step_app_area_bytes(options->app_capacity);
  shard->check_every = options->check_every;
  shard->check_integrity = options->check_integrity;
  shard->aux_step = NONE;
  shard->seen_step = NONE;
  shard->stale_since = NONE;

  kvs_window_pool_options pool_options = KVS_WINDOW_POOL_OPTIONS_INIT;
  pool_options.max_running = options->max_running;
  pool_options.radix = options->radix;
  pool_options.prefix_cache = options->prefix_cache;
  pool_options.prefix_align = options->prefix_align;
  pool_options.host_pages = options->host_pages;
  pool_options.disk_pages = options->disk_pages;
  pool_options.disk_stores_per_step = options->disk_stores_per_step;
  /* Only the leader journals; a follower's changes arrive by step. */
  pool_options.journal_capacity = shard->leader ? capacity : 0;
  /* Every rank replays whatever the leader journals: a follower's replay
   * (prefix entries are undone on refusal) holds a whole step too. A
   * follower sized at the 4096 default refused a step of 4132 prefix
   * entries (a large host-tier fetch) and fell out of step. */
  pool_options.replay_capacity = capacity;
  kvs_error local;
  kvs_error_clear(&local);
  kvs_status local_status = kvs_window_pool_create(sizes, &pool_options, &shard->pool, &local);
  if (local_status == KVS_OK) {
    local_status = kvs_comm_buffer_alloc(comm, shard->message_bytes, &shard->message[0], &local);
  }
  if (local_status == KVS_OK) {
    local_status = kvs_comm_buffer_alloc(comm, shard->message_bytes, &shard->message[1], &local);
  }
  if ((status = kvs_comm_buffer_alloc(comm, C_WORDS * sizeof(uint64_t), &shard->words, err))) {
    kvs_shard_destroy(shard);
    return status;
  }
  /* Every rank must mirror the same pool shape and step size; a rank that
   * failed locally contributes a zero so that all ranks fail together. */
  uint64_t fp =
      kvs_mix64(kvs_mix64(kvs_mix64(sizes->page, sizes->full_token), sizes->n_win_slots), capacity);
  fp = kvs_mix64(kvs_mix64(kvs_mix64(fp, options->max_running), options->radix),
                 options->check_every);
  fp = kvs_mix64(kvs_mix64(fp, options->check_integrity), options->app_capacity);
  uint64_t *w = shard->words.host;
  w[0] = local_status == KVS_OK ? fp : 0;
  w[1] = local_status == KVS_OK ? ~fp : ~(uint64_t)0;
  w[2] = local_status == KVS_OK ? NONE : (uint64_t)shard->rank;
  status = kvs_comm_allreduce_u64(comm, &shard->words, 3, KVS_COMM_MIN, err);
  if (status == KVS_OK && local_status != KVS_OK) {
    status = kvs_error_set(err, local_status, "rank %d: %s", shard->rank, local.message);
  } else if (status == KVS_OK && w[2] != NONE) {
    status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "rank %llu could not build its shard, so the group has none",
                           (unsigned long long)w[2]);
  } else if (status == KVS_OK && w[0] != ~w[1]) {
    status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "ranks built different shards (page, history, window, step "
                           "capacity, max_running, radix or check settings differ): "
                           "fingerprints %016llx to %016llx; agree on the budget first",
                           (unsigned long long)w[0], (unsigned long long)~w[1]);
  }
  if (status != KVS_OK) {
    kvs_shard_destroy(shard);
    return status;
  }
  *out = shard;
  return KVS_OK;
}

/* ---- accessors ---- */

kvs_window_pool_t kvs_shard_pool(kvs_shard_t shard) { return shard->pool; }
int kvs_shard_rank(const struct kvs_shard *shard) { return shard->rank; }
int kvs_shard_size(const struct kvs_shard *shard) { return shard->size; }
bool kvs_shard_is_leader(const struct kvs_shard *shard) { return shard->leader; }
size_t kvs_shard_step_capacity(const struct kvs_shard *shard) { return shard->capacity; }
size_t kvs_shard_app_capacity(const struct kvs_shard *shard) { return shard->app_capacity; }
uint64_t kvs_shard_next_step(const struct kvs_shard *shard) { return shard->next_step; }
kvs_status kvs_shard_health(const struct kvs_shard *shard) { return shard->failed; }
void kvs_shard_stats_get(const struct kvs_shard *shard, kvs_shard_stats *out) {
  *out = shard->stats;
}

bool kvs_shard_check_due(const struct kvs_shard *shard, uint64_t step) {
  return shard->check_every > 0 && (step + 1) % shard->check_every == 0;
}

void kvs_shard_set_aux_digest(kvs_shard_t shard, uint64_t step, uint64_t digest) {
  shard->aux_step = step;
  shard->aux_digest = digest;
}

/* ---- failure bookkeeping ---- */

static kvs_status poison(kvs_shard_t shard, kvs_status status, const char *message) {
  if (shard->failed == KVS_OK) {
    shard->failed = status;
    snprintf(shard->failure, sizeof shard->failure, "%s", message);
  }
  return status;
}

static kvs_status check_live(const struct kvs_shard *shard, kvs_error *err) {
  if (shard->failed == KVS_OK) return KVS_OK;
  return kvs_error_set(err, shard->failed, "shard on rank %d stopped earlier: %s", shard->rank,
                       shard->failure);
}

static kvs_status check_epoch(const struct kvs_shard *shard, uint64_t step, kvs_error *err) {
  if (step == shard->next_step) return KVS_OK;
  return kvs_error_set(err, KVS_ERR_EPOCH,
                       "step %llu on rank %d, which has applied steps up to %lld and runs step "
                       "%llu next: steps are applied in order, once each (%s)",
                       (unsigned long long)step, shard->rank, (long long)shard->next_step - 1,
                       (unsigned long long)shard->next_step,
                       step < shard->next_step ? "already applied" : "out of order");
}

/* A comm failure inside a step or check: remembered, passed through. */
static kvs_status comm_failed(kvs_shard_t shard, kvs_status status, kvs_error *err) {
  return poison(shard, status, err != NULL ? err->message : kvs_comm_failure(shard->comm));
}

static void count_entries(kvs_shard_t shard, const kvs_journal_entry *entries, size_t n,
                          kvs_shard_step_info *info) {
  /* Binds and frees of pages and request slots; the prefix cache's
   * entries (KVS_JOURNAL_PREFIX_TAG) are neither. */
  size_t binds = 0, frees = 0;
  for (size_t i = 0; i < n; i++) {
    if ((entries[i].full_page & KVS_JOURNAL_PREFIX_TAG) == KVS_JOURNAL_PREFIX_TAG) continue;
    if (entries[i].window_page >= 0)
      binds++;
    else
      frees++;
  }
  shard->stats.steps++;
  shard->stats.binds += binds;
  shard->stats.frees += frees;
  if (n > shard->stats.max_entries) shard->stats.max_entries = n;
  shard->stats.payload_bytes += kvs_step_payload_bytes(n);
  shard->stats.wire_bytes += shard->message_bytes;
  if (info != NULL) {
    info->entries = n;
    info->binds = binds;
    info->frees = frees;
  }
}

/* ---- follower: apply one message ---- */

static kvs_status apply_message(kvs_shard_t shard, const void *message, size_t bytes,
                                kvs_shard_step_info *info, kvs_error *err) {
  kvs_step_header h;
  const kvs_journal_entry *entries;
  kvs_status status = kvs_step_message_read(message, bytes, shard->capacity, &h, &entries, err);
  if (status != KVS_OK) return status;
  if (h.flags & KVS_STEP_FLAG_ABORT) {
    char reason[200];
    size_t room = bytes - KVS_STEP_HEADER_BYTES;
    size_t len = room < sizeof reason - 1 ? room : sizeof reason - 1;
    memcpy(reason, (const char *)message + KVS_STEP_HEADER_BYTES, len);
    reason[len] = '\0';
    kvs_error_set(err, KVS_ERR_COMM, "the leader aborted at step %llu (%s): %s",
                  (unsigned long long)h.step, kvs_status_string((kvs_status)h.status), reason);
    return poison(shard, KVS_ERR_COMM, err != NULL ? err->message : reason);
  }
  if ((status = check_epoch(shard, h.step, err))) return status;
  if (info != NULL) info->step = h.step;

  if (shard->stale_since != NONE) {
    shard->next_step++;
    count_entries(shard, entries, 0, info);
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "rank %d's mirror has been stale since it refused the journal of step "
                         "%llu; step %llu not applied",
                         shard->rank, (unsigned long long)shard->stale_since,
                         (unsigned long long)h.step);
  }
  kvs_error local;
  kvs_error_clear(&local);
  status = kvs_window_pool_apply(shard->pool, entries, h.count, &local);
  if (status != KVS_OK) {
    /* The mirror is unchanged but no longer follows the leader: it stays
     * in lockstep (the step counts) so the next check can report it. */
    shard->stale_since = h.step;
    if (shard->seen_step == NONE) shard->seen_step = h.step;
    shard->next_step++;
    count_entries(shard, entries, 0, info);
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "rank %d's mirror refused the leader's journal of step %llu: %s",
                         shard->rank, (unsigned long long)h.step, local.message);
  }
  shard->next_step++;
  count_entries(shard, entries, h.count, info);

  uint64_t digest = kvs_window_pool_digest(shard->pool);
  if (digest != h.digest) {
    if (shard->seen_step == NONE) shard->seen_step = h.step;
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "rank %d's window bindings differ from the leader's after step %llu: "
                         "digest %016llx, the leader's %016llx",
                         shard->rank, (unsigned long long)h.step, (unsigned long long)digest,
                         (unsigned long long)h.digest);
  }
  if (h.aux_step != KVS_STEP_NO_AUX && h.aux_step == shard->aux_step &&
      h.aux_digest != shard->aux_digest) {
    if (shard->seen_step == NONE) shard->seen_step = h.step;
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "rank %d's application digest of step %llu is %016llx, the leader's "
                         "%016llx",
                         shard->rank, (unsigned long long)h.aux_step,
                         (unsigned long long)shard->aux_digest, (unsigned long long)h.aux_digest);
  }
  return KVS_OK;
}

kvs_status kvs_shard_apply_message(kvs_shard_t shard, const void *message, size_t bytes,
                                   kvs_shard_step_info *info, kvs_error *err) {
  if (shard == NULL || message == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "shard or message is NULL");
  }
  if (shard->leader) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "rank %d is the leader: it allocates, it does not apply", shard->rank);
  }
  kvs_status status = check_live(shard, err);
  if (status != KVS_OK) return status;
  return apply_message(shard, message, bytes, info, err);
}

/* ---- the step ---- */

static kvs_step_header leader_header(const struct kvs_shard *shard, uint64_t step) {
  kvs_step_header h;
  memset(&h, 0, sizeof h);
  h.magic = KVS_STEP_MAGIC;
  h.version = KVS_STEP_VERSION;
  h.step = step;
  h.digest = kvs_window_pool_digest(shard->pool);
  h.aux_step = shard->aux_step;
  h.aux_digest = shard->aux_digest;
  return h;
}

/* The buffer step `step` travels in. */
static kvs_comm_buffer *message_of(kvs_shard_t shard, uint64_t step) {
  return &shard->message[step & 1];
}

static kvs_status broadcast_message(kvs_shard_t shard, uint64_t step, kvs_error *err) {
  kvs_comm_stats before, after;
  kvs_comm_stats_get(shard->comm, &before);
  uint64_t start = kvs_now_ns();
  kvs_status status = kvs_comm_broadcast(shard->comm, message_of(shard, step), shard->message_bytes,
                                         KVS_SHARD_LEADER, err);
  shard->stats.broadcast_ns += kvs_now_ns() - start;
  kvs_comm_stats_get(shard->comm, &after);
  shard->stats.step_collectives += after.collectives - before.collectives;
  return status == KVS_OK ? KVS_OK : comm_failed(shard, status, err);
}

kvs_status kvs_shard_step(kvs_shard_t shard, uint64_t step, kvs_shard_step_info *info,
                          kvs_error *err) {
  return kvs_shard_step_with(shard, step, NULL, 0, info, err);
}

kvs_status kvs_shard_step_with(kvs_shard_t shard, uint64_t step, const void *app, size_t app_bytes,
                               kvs_shard_step_info *info, kvs_error *err) {
  kvs_status status = check_live(shard, err);
  if (status != KVS_OK) return status;
  if ((status = check_epoch(shard, step, err))) return status;
  if (app_bytes > 0 && (!shard->leader || app == NULL || app_bytes > shard->app_capacity)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         !shard->leader ? "rank %d is a follower: only the leader's step carries "
                                          "bytes (%zu given, room for %zu)"
                         : app == NULL  ? "rank %d: %zu bytes to carry at NULL (room for %zu)"
                                        : "rank %d: %zu bytes to carry, the step message has "
                                          "room for %zu",
                         shard->rank, app_bytes, shard->app_capacity);
  }
  if (info != NULL) memset(info, 0, sizeof *info), info->step = step;

  kvs_comm_buffer *message = message_of(shard, step);
  if (!shard->leader) {
    if ((status = broadcast_message(shard, step, err))) return status;
    uint64_t start = kvs_now_ns();
    status = apply_message(shard, message->host, shard->message_bytes, info, err);
    shard->stats.mirror_ns += kvs_now_ns() - start;
    /* A malformed message, or the leader on another step, out of the
     * group's own collective: the protocol itself is broken, and this rank
     * can no longer stay in lockstep. */
    if (status == KVS_ERR_CORRUPT || status == KVS_ERR_EPOCH) {
      return poison(shard, status, err != NULL ? err->message : "step message refused");
    }
    if (info != NULL && (status == KVS_OK || status == KVS_ERR_DIVERGENCE)) {
      info->entries_at = kvs_step_message_entries(message->host);
      info->device_message = message->device;
      kvs_status read = kvs_step_message_read_app(
          message->host, shard->capacity, shard->app_capacity, &info->app, &info->app_bytes, err);
      if (read != KVS_OK) return poison(shard, read, err != NULL ? err->message : "");
    }
    return status;
  }

  /* Leader: cached blocks the disk tier lacks are written with this step,
   * within a step's share of writes and the journal's room (no disk tier:
   * none). */
  if (kvs_window_pool_prefix_enabled(shard->pool)) {
    status = kvs_window_pool_prefix_write_back(shard->pool, NULL, err);
    if (status != KVS_OK) return status;
  }
  /* The pool's journal holds at most `capacity` entries (its own
   * capacity), so the step always fits; check anyway, cheaply. */
  size_t pending = kvs_window_pool_journal_pending(shard->pool);
  if (pending > shard->capacity) {
    char text[160];
    snprintf(text, sizeof text, "step %llu has %zu journal entries, over the capacity of %zu",
             (unsigned long long)step, pending, shard->capacity);
    kvs_shard_abort_step(shard, step, KVS_ERR_JOURNAL_FULL, text, NULL);
    return kvs_error_set(err, KVS_ERR_JOURNAL_FULL, "%s", text);
  }
  kvs_step_header h = leader_header(shard, step);
  kvs_journal_entry *entries = kvs_step_message_entries(message->host);
  size_t n = 0;
  kvs_window_pool_journal_drain(shard->pool, entries, shard->capacity, &n);
  h.count = (uint32_t)n;
  kvs_step_message_put_header(message->host, &h);
  if (shard->app_capacity > 0) {
    uint64_t *length = kvs_step_message_app_length(message->host, shard->capacity);
    *length = app_bytes;
    if (app_bytes > 0) memcpy(length + 1, app, app_bytes);
  }
  if ((status = broadcast_message(shard, step, err))) return status;
  shard->next_step++;
  count_entries(shard, entries, n, info);
  if (info != NULL) {
    info->entries_at = entries;
    info->device_message = message->device;
    if (shard->app_capacity > 0) {
      info->app = kvs_step_message_app_length(message->host, shard->capacity) + 1;
      info->app_bytes = app_bytes;
    }
  }
  return KVS_OK;
}

kvs_status kvs_shard_abort_step(kvs_shard_t shard, uint64_t step, kvs_status reason,
                                const char *text, kvs_error *err) {
  if (!shard->leader) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "rank %d is not the leader; followers call kvs_shard_step", shard->rank);
  }
  kvs_status status = check_live(shard, err);
  if (status != KVS_OK) return status;
  kvs_step_header h = leader_header(shard, step);
  h.flags = KVS_STEP_FLAG_ABORT;
  h.status = (uint32_t)reason;
  kvs_comm_buffer *buffer = message_of(shard, step);
  kvs_step_message_put_header(buffer->host, &h);
  size_t room = shard->message_bytes - KVS_STEP_HEADER_BYTES;
  char *area = (char *)buffer->host + KVS_STEP_HEADER_BYTES;
  snprintf(area, room, "%s", text != NULL ? text : "");
  if ((status = broadcast_message(shard, step, err))) return status;
  char message[KVS_ERROR_MESSAGE_MAX];
  snprintf(message, sizeof message, "the leader aborted at step %llu (%s): %s",
           (unsigned long long)step, kvs_status_string(reason), text != NULL ? text : "");
  poison(shard, KVS_ERR_COMM, message);
  return KVS_OK;
}

/* ---- checks ---- */

static int64_t window_page_of(const struct kvs_shard *shard, uint64_t full_page) {
  if (full_page >= shard->n_full_pages) return -1;
  int64_t slot = kvs_window_pool_mapping(shard->pool)[full_page * shard->page];
  return slot < 0 ? -1 : slot / (int64_t)shard->page;
}

/* One MIN allreduce over `count` words of the check buffer. */
static kvs_status reduce(kvs_shard_t shard, size_t count, kvs_comm_op op, kvs_error *err) {
  kvs_status status = kvs_comm_allreduce_u64(shard->comm, &shard->words, count, op, err);
  return status == KVS_OK ? KVS_OK : comm_failed(shard, status, err);
}

/* Bisection: [lo, hi) differs somewhere; halve it with one allreduce per
 * level until one full page is left. Where the left half agrees, the right
 * one must differ (the digests are sums), so each level keeps a differing
 * half and the left one first: the result is the lowest differing page. */
static kvs_status bisect(kvs_shard_t shard, uint64_t *page, kvs_error *err) {
  uint64_t lo = 0, hi = kvs_window_pool_digest_units(shard->pool);
  uint64_t *w = shard->words.host;
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    uint64_t d = kvs_window_pool_digest_range(shard->pool, lo, mid);
    w[0] = d;
    w[1] = ~d;
    kvs_status status = reduce(shard, 2, KVS_COMM_MIN, err);
    if (status != KVS_OK) return status;
    if (w[0] != ~w[1]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  *page = lo;
  return KVS_OK;
}

/* Which ranks hold a value other than the leader's: the lowest such rank
 * with its value, and how many. Three collectives. */
static kvs_status compare_with_leader(kvs_shard_t shard, uint64_t mine, uint64_t *leader_value,
                                      int *first_rank, uint64_t *first_value, int *count,
                                      kvs_error *err) {
  uint64_t *w = shard->words.host;
  w[0] = mine;
  kvs_status status =
      kvs_comm_broadcast(shard->comm, &shard->words, sizeof(uint64_t), KVS_SHARD_LEADER, err);
  if (status != KVS_OK) return comm_failed(shard, status, err);
  *leader_value = w[0];
  bool differs = mine != *leader_value;
  w[0] = differs ? (uint64_t)shard->rank : NONE;
  if ((status = reduce(shard, 1, KVS_COMM_MIN, err))) return status;
  *first_rank = w[0] == NONE ? -1 : (int)w[0];
  /* The first differing rank publishes its value; the others add zero. */
  w[0] = *first_rank == shard->rank ? mine : 0;
  w[1] = differs ? 1 : 0;
  if ((status = reduce(shard, 2, KVS_COMM_SUM, err))) return status;
  *first_value = w[0];
  *count = (int)w[1];
  return KVS_OK;
}

static void seen_text(const kvs_shard_report *r, char *out, size_t cap) {
  if (r->first_seen_rank < 0) {
    snprintf(out, cap, "no follower had noticed before the check");
  } else {
    snprintf(out, cap, "rank %d first saw it at step %llu", r->first_seen_rank,
             (unsigned long long)r->first_seen_step);
  }
}

/* This rank's own integrity: the pool's check, then the caller's verdict
 * on the state the pool does not hold (e.g. device tables). *kind says
 * which failed: 0 the pool, 1 the caller's. */
static bool own_integrity(kvs_shard_t shard, kvs_status local, const kvs_error *local_err,
                          kvs_error *why, uint64_t *kind) {
  *kind = 0;
  if (shard->check_integrity && kvs_window_pool_check_integrity(shard->pool, why) != KVS_OK) {
    return false;
  }
  if (local == KVS_OK) return true;
  *kind = 1;
  kvs_error_set(why, local, "%s",
                local_err != NULL ? local_err->message : kvs_status_string(local));
  return false;
}

/* The integrity word: a failing rank as INTEGRITY_FAILED | rank << 1 |
 * kind, or the leader's journal entries not stepped yet as their count
 * (below every failure, so the MIN carries it whatever else fails: a check
 * between the leader's changes and their step compares nothing). */
#define INTEGRITY_FAILED (UINT64_C(1) << 62)

/* Entries the leader journaled since its last step (a follower journals
 * nothing): the ranks cannot agree until a step carries them. */
static uint64_t pending_entries(const struct kvs_shard *shard) {
  return shard->leader ? (uint64_t)kvs_window_pool_journal_pending(shard->pool) : 0;
}

/* The check's words: every value with its complement, so one MIN gives
 * both the least and (complemented) the greatest over the ranks. */
static void put_check_words(kvs_shard_t shard, bool integrity_ok, uint64_t integrity_kind) {
  uint64_t digest = kvs_window_pool_digest(shard->pool);
  uint64_t *w = shard->words.host;
  w[C_DIGEST] = digest;
  w[C_NOT_DIGEST] = ~digest;
  w[C_AUX] = shard->aux_digest;
  w[C_NOT_AUX] = ~shard->aux_digest;
  w[C_AUX_STEP] = shard->aux_step;
  w[C_NOT_AUX_STEP] = ~shard->aux_step;
  w[C_STEP] = shard->next_step;
  w[C_NOT_STEP] = ~shard->next_step;
  w[C_SEEN] = shard->seen_step == NONE ? NONE : kvs_rank_word(shard->seen_step, shard->rank);
  uint64_t pending = pending_entries(shard);
  w[C_INTEGRITY] = pending > 0    ? (pending < INTEGRITY_FAILED ? pending : INTEGRITY_FAILED - 1)
                   : integrity_ok ? NONE
                                  : INTEGRITY_FAILED | (uint64_t)shard->rank << 1 | integrity_kind;
}

/* An agreeing report from the reduced words, nothing located yet. */
static kvs_shard_report agreeing_report(const struct kvs_shard *shard, const uint64_t *w) {
  kvs_shard_report r;
  memset(&r, 0, sizeof r);
  r.kind = KVS_SHARD_AGREE;
  r.step = shard->next_step - 1; /* wraps to UINT64_MAX before the first step */
  r.digest_min = w[C_DIGEST];
  r.digest_max = ~w[C_NOT_DIGEST];
  r.full_page = NONE;
  r.leader_window_page = -1;
  r.rank = -1;
  r.rank_window_page = -1;
  r.first_seen_step = w[C_SEEN] == NONE ? NONE : kvs_rank_word_value(w[C_SEEN]);
  r.first_seen_rank = w[C_SEEN] == NONE ? -1 : kvs_rank_word_rank(w[C_SEEN]);
  r.request_slot = NONE;
  r.leader_request = -1;
  r.rank_request = -1;
  return r;
}

/* Collective: the digests differ, so bisection finds the first unit (a full
 * page, or a request slot after the pages) that differs and one comparison
 * with the leader names a rank and both values. */
static kvs_status locate_bindings(kvs_shard_t shard, kvs_shard_report *r, const char *seen,
                                  kvs_error *err) {
  r->kind = KVS_SHARD_DIVERGED_BINDINGS;
  uint64_t unit, leader_value, first_value;
  kvs_status status = bisect(shard, &unit, err);
  if (status != KVS_OK) return status;
  /* What this rank holds at the unit, +2 so "none" (-1) and the dummy
   * slot (-2) stay unsigned for the collectives: a full page's window
   * page, or a request slot's request (the slots follow the pages). */
  uint64_t n_slots = kvs_window_pool_request_slots(shard->pool);
  if (unit >= shard->n_full_pages + n_slots) {
    /* A cached prefix block: what each rank holds there, as refs + 2
     * (uncached: 1), compared with the leader's. */
    uint64_t block = unit - shard->n_full_pages - n_slots;
    uint64_t key = 0;
    uint32_t refs = 0;
    bool cached =
        kvs_window_pool_prefix_node(shard->pool, block, &key, NULL, &refs, NULL, NULL) == KVS_OK;
    uint64_t word = cached ? (uint64_t)refs + 2 : 1;
    if ((status = compare_with_leader(shard, word, &leader_value, &r->rank, &first_value,
                                      &r->ranks_differing, err))) {
      return status;
    }
    r->kind = KVS_SHARD_DIVERGED_PREFIX;
    r->full_page = block;
    r->leader_window_page = (int64_t)leader_value - 2;
    r->rank_window_page = r->rank >= 0 ? (int64_t)first_value - 2 : -1;
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "prefix caches diverged (checked after step %lld): cached block at full "
                         "page %llu (key %llu on this rank) holds %lld references on the leader "
                         "(rank %d) and %lld on rank %d (-1: not cached); %d rank(s) differ on "
                         "it; %s",
                         (long long)r->step, (unsigned long long)block, (unsigned long long)key,
                         (long long)r->leader_window_page, KVS_SHARD_LEADER,
                         (long long)r->rank_window_page, r->rank, r->ranks_differing, seen);
  }
  bool is_slot = unit >= shard->n_full_pages;
  int64_t mine = is_slot ? kvs_window_pool_slot_request(shard->pool, unit - shard->n_full_pages)
                         : window_page_of(shard, unit);
  if ((status = compare_with_leader(shard, (uint64_t)(mine + 2), &leader_value, &r->rank,
                                    &first_value, &r->ranks_differing, err))) {
    return status;
  }
  int64_t leader = (int64_t)leader_value - 2;
  int64_t theirs = r->rank >= 0 ? (int64_t)first_value - 2 : -1;
  if (is_slot) {
    r->request_slot = unit - shard->n_full_pages;
    r->leader_request = leader;
    r->rank_request = theirs;
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "request slots diverged (checked after step %lld): request slot "
                         "%llu holds request %lld on the leader (rank %d) and request %lld "
                         "on rank %d (-1: free); %d rank(s) differ on it; %s",
                         (long long)r->step, (unsigned long long)r->request_slot, (long long)leader,
                         KVS_SHARD_LEADER, (long long)theirs, r->rank, r->ranks_differing, seen);
  }
  r->full_page = unit;
  r->leader_window_page = leader;
  r->rank_window_page = theirs;
  return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                       "window bindings diverged (checked after step %lld): full page %llu "
                       "is window page %lld on the leader (rank %d) and window page %lld on "
                       "rank %d; %d rank(s) differ on it; %s",
                       (long long)r->step, (unsigned long long)unit, (long long)leader,
                       KVS_SHARD_LEADER, (long long)theirs, r->rank, r->ranks_differing, seen);
}

/* Collective: the application digests differ while the bindings agree. */
static kvs_status locate_aux(kvs_shard_t shard, kvs_shard_report *r, const char *seen,
                             kvs_error *err) {
  r->kind = KVS_SHARD_DIVERGED_AUX;
  uint64_t leader_value, first_value;
  kvs_status status = compare_with_leader(shard, shard->aux_digest ^ shard->aux_step, &leader_value,
                                          &r->rank, &first_value, &r->ranks_differing, err);
  if (status != KVS_OK) return status;
  return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                       "application digests diverged (checked after step %lld) while the "
                       "window bindings agree (digest %016llx): rank %d differs from the "
                       "leader, %d rank(s) in all; %s",
                       (long long)r->step, (unsigned long long)r->digest_min, r->rank,
                       r->ranks_differing, seen);
}

/* What the reduced words say, most telling first: steps, bindings (located
 * by bisection), application digests, a rank's integrity, and a
 * divergence seen in a step that has healed since. */
static kvs_status judge(kvs_shard_t shard, kvs_shard_report *r, bool integrity_ok,
                        const kvs_error *integrity, kvs_error *err) {
  const uint64_t *w = shard->words.host;
  uint64_t step_min = w[C_STEP], step_max = ~w[C_NOT_STEP];
  bool aux_differs = w[C_AUX] != ~w[C_NOT_AUX] || w[C_AUX_STEP] != ~w[C_NOT_AUX_STEP];
  uint64_t integrity_word = w[C_INTEGRITY];
  char seen[96];
  seen_text(r, seen, sizeof seen);
  if (step_min != step_max) {
    r->kind = KVS_SHARD_DIVERGED_STEPS;
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "ranks are at different steps: %lld to %lld applied; every rank must "
                         "step and check in the same order",
                         (long long)step_min - 1, (long long)step_max - 1);
  }
  if (integrity_word < INTEGRITY_FAILED) {
    char since[48];
    if (r->step == NONE) {
      snprintf(since, sizeof since, "before the first step");
    } else {
      snprintf(since, sizeof since, "since step %llu", (unsigned long long)r->step);
    }
    return kvs_error_set(err, KVS_ERR_PENDING,
                         "%llu entries pending on the leader (rank %d): its binds, frees, request "
                         "slots and prefix decisions %s reach the other ranks and the tables "
                         "with the next step; step first, then check",
                         (unsigned long long)integrity_word, KVS_SHARD_LEADER, since);
  }
  uint64_t integrity_rank = integrity_word == NONE ? NONE : integrity_word & ~INTEGRITY_FAILED;
  if (r->digest_min != r->digest_max) return locate_bindings(shard, r, seen, err);
  if (aux_differs) return locate_aux(shard, r, seen, err);
  if (integrity_rank != NONE) {
    r->kind = KVS_SHARD_DIVERGED_INTEGRITY;
    r->rank = (int)(integrity_rank >> 1);
    return kvs_error_set(
        err, KVS_ERR_DIVERGENCE, "rank %d's %s (checked after step %lld)%s%s", r->rank,
        integrity_rank & 1 ? "check of the state beside its pool failed"
                           : "window pool fails its integrity check",
        (long long)r->step, integrity_ok ? "" : ": ", integrity_ok ? "" : integrity->message);
  }
  if (r->first_seen_rank >= 0) {
    r->kind = KVS_SHARD_DIVERGED_BINDINGS;
    r->rank = r->first_seen_rank;
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "rank %d's window bindings differed from the leader's at step %llu "
                         "and agree again now (checked after step %lld): a transient "
                         "divergence, its pages already freed",
                         r->rank, (unsigned long long)r->first_seen_step, (long long)r->step);
  }
  return KVS_OK;
}

kvs_status kvs_shard_check(kvs_shard_t shard, kvs_shard_report *report, kvs_error *err) {
  return kvs_shard_check_with(shard, KVS_OK, NULL, report, err);
}

kvs_status kvs_shard_check_with(kvs_shard_t shard, kvs_status local, const kvs_error *local_err,
                                kvs_shard_report *report, kvs_error *err) {
  kvs_status status = check_live(shard, err);
  if (status != KVS_OK) return status;
  kvs_comm_stats before, after;
  kvs_comm_stats_get(shard->comm, &before);
  shard->stats.checks++;

  kvs_error integrity;
  kvs_error_clear(&integrity);
  uint64_t integrity_kind = 0;
  bool integrity_ok = own_integrity(shard, local, local_err, &integrity, &integrity_kind);
  put_check_words(shard, integrity_ok, integrity_kind);
  if ((status = reduce(shard, C_WORDS, KVS_COMM_MIN, err))) return status;
  kvs_shard_report r = agreeing_report(shard, shard->words.host);
  status = judge(shard, &r, integrity_ok, &integrity, err);
  /* A collective that failed inside the location stops here, as before:
   * the group is poisoned and the report is not. */
  if (status != KVS_OK && status != KVS_ERR_DIVERGENCE) return status;
  kvs_comm_stats_get(shard->comm, &after);
  r.collectives = after.collectives - before.collectives;
  shard->stats.check_collectives += r.collectives;
  if (report != NULL) *report = r;
  return status;
}

/* ---- fault injection ---- */

kvs_status kvs_shard_inject_flip(kvs_shard_t shard, uint64_t full_page, int64_t *from, int64_t *to,
                                 kvs_error *err) {
  int64_t current = window_page_of(shard, full_page);
  if (current < 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "full page %llu is not bound on rank %d; there is no binding to flip",
                         (unsigned long long)full_page, shard->rank);
  }
  uint64_t page = shard->page;
  uint64_t n_win = kvs_window_pool_window_slots(shard->pool) / page;
  uint8_t *bound = calloc((size_t)n_win, 1);
  if (bound == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to inject a flip");
  const int64_t *map = kvs_window_pool_mapping(shard->pool);
  for (uint64_t fp = 0; fp < shard->n_full_pages; fp++) {
    int64_t slot = map[fp * page];
    if (slot >= 0 && (uint64_t)slot / page < n_win) bound[(uint64_t)slot / page] = 1;
  }
  /* The lowest free window page: LIFO hands it out last, so the flip stays
   * confined to this one binding until a check finds it. */
  int64_t target = -1;
  for (uint64_t wp = 0; wp + 1 < n_win && target < 0; wp++) {
    if (!bound[wp]) target = (int64_t)wp;
  }
  free(bound);
  kvs_status status = KVS_ERR_EXHAUSTED;
  if (target >= 0) {
    kvs_journal_entry moves[2] = {{full_page, KVS_JOURNAL_FREED}, {full_page, target}};
    status = kvs_window_pool_apply(shard->pool, moves, 2, NULL);
  }
  if (status != KVS_OK) {
    /* No free page (or an already inconsistent pool): rebind raw onto the
     * next page, which leaves two full pages on one window page. */
    target = (current + 1) % (int64_t)(n_win - 1 > 0 ? n_win - 1 : 1);
    status = kvs_window_pool_bind_raw(shard->pool, full_page * page, (uint64_t)target * page, err);
    if (status != KVS_OK) return status;
  }
  if (from != NULL) *from = current;
  if (to != NULL) *to = target;
  return KVS_OK;
}

kvs_status kvs_shard_inject_slot_flip(kvs_shard_t shard, uint64_t request, int64_t *from,
                                      int64_t *to, kvs_error *err) {
  kvs_window_pool_t pool = shard->pool;
  int64_t held = kvs_window_pool_slot_of(pool, request);
  if (held < 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "request %llu holds no request slot on rank %d; there is none to flip",
                         (unsigned long long)request, shard->rank);
  }
  /* The lowest free slot; with every slot bound, the lowest other one,
   * whose request takes this one's slot (a swap: still one slot each). */
  uint64_t n = kvs_window_pool_request_slots(pool);
  int64_t target = -1, other = -1;
  for (uint64_t s = 0; s + 1 < n && target < 0; s++) {
    if (kvs_window_pool_slot_request(pool, s) == KVS_SLOT_FREE) target = (int64_t)s;
  }
  for (uint64_t s = 0; s + 1 < n && target < 0; s++) {
    if ((int64_t)s != held) {
      target = (int64_t)s;
      other = kvs_window_pool_slot_request(pool, s);
    }
  }
  if (target < 0) {
    return kvs_error_set(err, KVS_ERR_EXHAUSTED,
                         "rank %d has one request slot: no slot to move request %llu to",
                         shard->rank, (unsigned long long)request);
  }
  kvs_status status = kvs_window_pool_slot_bind_raw(pool, (uint64_t)held, other, err);
  if (status == KVS_OK) {
    status = kvs_window_pool_slot_bind_raw(pool, (uint64_t)target, (int64_t)request, err);
  }
  if (status != KVS_OK) return status;
  if (from != NULL) *from = held;
  if (to != NULL) *to = target;
  return KVS_OK;
}

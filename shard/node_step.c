/* The node's step and checks: the broadcast, the apply on every rank, the
 * ring contexts of the step's rows, and the checks that compare every
 * rank's bindings, ring contexts and tables. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/clock.h"
#include "core/mix.h"
#include "shard/node_disk.h"
#include "shard/node_internal.h"
#include "shard/node_seal.h"

/* The ring contexts' digest: rows in batch order, identical on every rank
 * that derived identical slots. */
static uint64_t ring_digest(const struct kvs_node *node, size_t n) {
  uint64_t h = kvs_mix64(0x6b7673726e677331ull, n);
  h = kvs_mix64(h, XXH3_64bits(node->h_own, n * sizeof *node->h_own));
  h = kvs_mix64(h, XXH3_64bits(node->h_prev, n * sizeof *node->h_prev));
  h = kvs_mix64(h, XXH3_64bits(node->h_csa, n * sizeof *node->h_csa));
  h = kvs_mix64(h, XXH3_64bits(node->h_hca, n * sizeof *node->h_hca));
  return kvs_mix64(h, XXH3_64bits(node->h_ring, n * node->options.page * sizeof *node->h_ring));
}

uint64_t kvs_node_next_step(const struct kvs_node *node) {
  return node != NULL ? kvs_shard_next_step(node->shard) : 0;
}

/* Row i of the tables' window rows from a position and the pages of its
 * block b and of block b - 1 (-1 when b is 0): rebased so the position
 * falls in the row's second block (pos - (b - 1) x P), which keeps every
 * ring position's offset in its page (they depend on pos mod P only) and
 * the slot of pos - 1; a position in block 0 keeps its block first, so
 * position 0 stays its own predecessor. An idle row (pos < 0) stays
 * idle. */
static void window_row(kvs_node_t node, size_t i, int64_t pos, int32_t before, int32_t own) {
  const int64_t page = (int64_t)node->options.page;
  int64_t block = pos >= 0 ? pos / page : 0;
  node->w_blocks[2 * i] = block == 0 ? own : before;
  node->w_blocks[2 * i + 1] = block == 0 ? -1 : own;
  node->w_positions[i] = block == 0 ? pos : pos - (block - 1) * page;
}

/* What a step carries from the leader (kvs_node_step: the engine's rows
 * and payload) and what a follower found in it. */
typedef struct carried_step {
  const void *app; /* the leader's bytes to carry (NULL: none) */
  size_t app_bytes;
  bool rows_from_leader; /* a follower with carry_batch: the rows are the leader's */
  size_t rows;           /* out: the rows stepped */
  const void *payload;   /* out: the leader's payload, in the message */
  size_t payload_bytes;
} carried_step;

/* The step with window rows (rows_of, window_rows_of): the broadcast and
 * the mirror's apply (the shard), then the tables' step (the journal and
 * the rows' ring contexts), in that order, each layer once. */
static kvs_status step_window(kvs_node_t node, const kvs_ring_batch *window, bool digest,
                              carried_step *carried, kvs_node_step_info *out, void **event,
                              kvs_error *err) {
  uint64_t start = kvs_now_ns();
  uint64_t step = kvs_shard_next_step(node->shard);
  kvs_node_step_info r;
  memset(&r, 0, sizeof r);
  node->host_rows = 0;
  kvs_shard_stats before, after;
  kvs_shard_stats_get(node->shard, &before);
  kvs_status stepped = kvs_shard_step_with(node->shard, step, carried != NULL ? carried->app : NULL,
                                           carried != NULL ? carried->app_bytes : 0, &r.info, err);
  kvs_shard_stats_get(node->shard, &after);
  node->stats.broadcast_ns += after.broadcast_ns - before.broadcast_ns;
  node->stats.mirror_ns += after.mirror_ns - before.mirror_ns;
  if (stepped != KVS_OK && stepped != KVS_ERR_DIVERGENCE) return stepped;

  kvs_error local;
  kvs_error_clear(&local);
  kvs_ring_batch rows = *window;
  if (carried != NULL && node->app_capacity > 0 && r.info.app != NULL) {
    size_t n = 0;
    kvs_status read = kvs_node_unpack(node, step, r.info.app, r.info.app_bytes, &n,
                                      &carried->payload, &carried->payload_bytes, &local);
    if (read != KVS_OK) {
      return kvs_error_set(err, read, "rank %d, step %llu: %s", node->rank,
                           (unsigned long long)step, local.message);
    }
    if (carried->rows_from_leader) {
      kvs_ring_batch leader = {
          node->w_blocks, 2, node->w_positions, n, NULL, node->rows_requests[step & 1]};
      rows = leader;
    }
  }
  if (carried != NULL) carried->rows = rows.n_req;
  if (rows.requests != NULL) {
    /* Each rank's slots from its own mirror, now that the step applied:
     * a rank whose slot differs derives other ring locations, which the
     * digest then shows. */
    kvs_window_pool_t pool = kvs_shard_pool(node->shard);
    for (size_t i = 0; i < rows.n_req; i++) {
      node->h_slots[i] = kvs_window_pool_slot_of(pool, rows.requests[i]);
    }
    rows.slots = kvs_window_pool_request_slots(pool) > 0 ? node->h_slots : NULL;
  }
  /* The host tier's fetches are checked against their seals first. */
  kvs_status sealed = kvs_node_seal_check(node, r.info.entries_at, r.info.entries, &local);
  if (sealed != KVS_OK) {
    return kvs_error_set(err, sealed, "rank %d, step %llu: %s", node->rank,
                         (unsigned long long)step, local.message);
  }
  kvs_table_step_args args = {step, r.info.entries_at, r.info.entries,
                              node->table_reads_device_entries ? r.info.device_message : NULL,
                              &rows};
  kvs_table_step_timing timing = {0, 0};
  kvs_status status = kvs_table_step(node->table, &args, &r.ring, &r.event, &timing, &local);
  /* The host tier's seals, then the disk tier's reads and writes, after
   * the step's row moves; the first refused block is the step's error
   * (every entry ran). */
  if (status == KVS_OK) {
    kvs_error seal_err;
    kvs_error_clear(&seal_err);
    kvs_status seal = kvs_node_seal_take(node, r.info.entries_at, r.info.entries, &seal_err);
    status = kvs_node_disk_io(node, r.info.entries_at, r.info.entries, &local);
    if (seal != KVS_OK) {
      status = seal;
      local = seal_err;
    }
  }
  if (event != NULL) *event = r.event;
  node->stats.apply_ns += timing.apply_ns;
  node->stats.ring_ns += timing.ring_ns;
  if (status == KVS_OK && digest) {
    uint64_t digest_start = kvs_now_ns();
    status = kvs_table_result_to_host(node->table, &r.ring, node->h_own, node->h_prev, node->h_ring,
                                      node->h_csa, node->h_hca, &local);
    if (status == KVS_OK) {
      node->host_rows = r.ring.n_req;
      r.digest = ring_digest(node, r.ring.n_req);
      kvs_shard_set_aux_digest(node->shard, step, r.digest);
    }
    node->stats.digest_ns += kvs_now_ns() - digest_start;
  }
  node->stats.steps++;
  node->stats.step_ns += kvs_now_ns() - start;
  if (status != KVS_OK) {
    return kvs_error_set(err, status, "rank %d, step %llu, tables: %s", node->rank,
                         (unsigned long long)step, local.message);
  }
  if (out != NULL) *out = r;
  return stepped;
}

/* A block the row does not have: past every table, so its reads fault and
 * read -1, as a block past the row does in the reference. */
#define PAST_THE_ROW INT32_MAX

/* Full block-table rows as window rows: each position's block b and the
 * one before, taken from its row, then rebased (window_row). */
static kvs_status window_rows_of(kvs_node_t node, const kvs_ring_batch *in, kvs_ring_batch *out,
                                 kvs_error *err) {
  if (in->n_req > node->max_batch) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "a batch of %zu rows, over the node's %zu",
                         in->n_req, node->max_batch);
  }
  if (in->n_req > 0 && (in->stride == 0 || in->block_table == NULL || in->positions == NULL)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a batch of %zu rows needs a block table at least 1 block wide and "
                         "positions",
                         in->n_req);
  }
  const int64_t page = (int64_t)node->options.page;
  for (size_t i = 0; i < in->n_req; i++) {
    int64_t pos = in->positions[i];
    const int32_t *row = in->block_table + i * in->stride;
    int64_t b = pos >= 0 ? pos / page : 0;
    int32_t before = b >= 1 ? ((uint64_t)(b - 1) < in->stride ? row[b - 1] : PAST_THE_ROW) : -1;
    int32_t own = (uint64_t)b < in->stride ? row[b] : PAST_THE_ROW;
    if (pos < 0) before = own = -1;
    window_row(node, i, pos, before, own);
  }
  kvs_ring_batch r = {node->w_blocks, 2, node->w_positions, in->n_req, NULL, in->requests};
  *out = r;
  return KVS_OK;
}

kvs_status kvs_node_step_rows(kvs_node_t node, const kvs_ring_batch *batch, bool digest,
                              kvs_node_step_info *out, kvs_error *err) {
  if (node == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "node is NULL");
  kvs_ring_batch none = {NULL, 0, NULL, 0, NULL, NULL}, rows = none;
  kvs_error bad;
  kvs_error_clear(&bad);
  /* A bad batch still steps (every rank is in the broadcast), then fails. */
  kvs_status refused = batch != NULL ? window_rows_of(node, batch, &rows, &bad) : KVS_OK;
  void *event = NULL;
  kvs_status stepped =
      step_window(node, refused == KVS_OK ? &rows : &none, digest, NULL, out, &event, err);
  if (refused != KVS_OK && (stepped == KVS_OK || stepped == KVS_ERR_DIVERGENCE)) {
    return kvs_error_set(err, refused, "rank %d: %s", node->rank, bad.message);
  }
  return stepped;
}

kvs_status kvs_node_host_state(const struct kvs_node *node, const int64_t **csa,
                               const int64_t **hca, size_t *n_req, kvs_error *err) {
  if (node == NULL || csa == NULL || hca == NULL || n_req == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "node and outputs are required");
  }
  *csa = node->h_csa;
  *hca = node->h_hca;
  *n_req = node->host_rows;
  return KVS_OK;
}

kvs_status kvs_node_host_ring(const struct kvs_node *node, const int64_t **own,
                              const int64_t **prev, const int64_t **ring, size_t *n_req,
                              kvs_error *err) {
  if (node == NULL || own == NULL || prev == NULL || ring == NULL || n_req == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "node and outputs are required");
  }
  *own = node->h_own;
  *prev = node->h_prev;
  *ring = node->h_ring;
  *n_req = node->host_rows;
  return KVS_OK;
}

/* ---- checks ---- */

/* The shard's check hook: this rank's tables against its mirror pool, and
 * their fault records. Folded into the check's one allreduce. */
/* The first full page where the tables' mapping differs from the pool's
 * (downloaded: a check that already found the digests differ). */
static kvs_status locate_table_difference(kvs_node_t node, kvs_error *err) {
  kvs_window_pool_t pool = kvs_shard_pool(node->shard);
  uint64_t rows = kvs_window_pool_full_tokens(pool) + 1;
  if (node->check_map == NULL) node->check_map = malloc((size_t)rows * sizeof *node->check_map);
  if (node->check_map == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to compare the tables");
  }
  kvs_status status = kvs_table_download(node->table, node->check_map, (size_t)rows, err);
  if (status != KVS_OK) return status;
  const int64_t *mine = kvs_window_pool_mapping(pool);
  uint64_t page = kvs_window_pool_page_size(pool);
  for (uint64_t i = 0; i < rows; i++) {
    if (mine[i] != node->check_map[i]) {
      return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                           "rank %d's tables differ from its pool at full page %llu (row %llu "
                           "holds %lld, the pool %lld)",
                           node->rank, (unsigned long long)(i / page), (unsigned long long)i,
                           (long long)node->check_map[i], (long long)mine[i]);
    }
  }
  return KVS_OK;
}

/* This rank's tables against its mirror pool, and their fault records:
 * the local verdict each check carries into its allreduce. */
static kvs_status check_tables(kvs_node_t node, kvs_error *err) {
  kvs_window_pool_t pool = kvs_shard_pool(node->shard);
  /* The tables' digest first (8 bytes back from a device); the mapping
   * comes back only to name the page when the digests differ. */
  uint64_t table_digest = 0;
  kvs_status status = kvs_table_digest(node->table, &table_digest, err);
  if (status != KVS_OK) return status;
  if (table_digest != kvs_window_pool_page_digest(pool)) {
    status = locate_table_difference(node, err);
    if (status != KVS_OK) return status;
    return kvs_error_set(err, KVS_ERR_DIVERGENCE,
                         "rank %d's tables digest to %016llx, its pool's pages to %016llx, yet "
                         "their mappings read equal",
                         node->rank, (unsigned long long)table_digest,
                         (unsigned long long)kvs_window_pool_page_digest(pool));
  }
  kvs_device_faults faults;
  if ((status = kvs_table_faults(node->table, &faults, err)) != KVS_OK) return status;
  return kvs_device_faults_check(&faults, err);
}

kvs_status kvs_node_check_report(kvs_node_t node, kvs_shard_report *report, kvs_error *err) {
  if (node == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "node is NULL");
  kvs_error local;
  kvs_error_clear(&local);
  /* A stopped shard answers the check with its own status; its tables are
   * not asked. Nor are they on a leader whose changes since its last step
   * have not reached them yet: the check refuses that on every rank
   * (KVS_ERR_PENDING, kvs_shard_check_with). */
  bool pending = node->rank == KVS_SHARD_LEADER &&
                 kvs_window_pool_journal_pending(kvs_shard_pool(node->shard)) > 0;
  kvs_status verdict =
      kvs_shard_health(node->shard) == KVS_OK && !pending ? check_tables(node, &local) : KVS_OK;
  return kvs_shard_check_with(node->shard, verdict, &local, report, err);
}

/* ---- the engine's form ---- */

/* An engine's batch as the tables' rows: full rows pass through; window
 * rows ([page of block b - 1, page of block b] around each position,
 * b = pos / P) are rebased so that the position falls in the row's second
 * block (pos - (b - 1) x P), which keeps every ring position's offset in
 * its page (they depend on pos mod P only) and the slot of pos - 1; a
 * position in block 0 keeps its own block first, so position 0 stays its
 * own predecessor. Refused whole before anything is queued. */
static kvs_status rows_of(kvs_node_t node, const kvs_node_batch *b, kvs_ring_batch *rows,
                          kvs_error *err) {
  if (b->n > node->max_batch) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a batch of %zu rows, over the node's max_batch %zu", b->n,
                         node->max_batch);
  }
  if (b->n > 0 && (b->requests == NULL || b->positions == NULL || b->block_table == NULL)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a batch of %zu rows needs its requests, positions and block table", b->n);
  }
  if (b->window_rows && b->stride != 2) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "window rows hold 2 pages each (the stride), got a stride of %llu",
                         (unsigned long long)b->stride);
  }
  if (b->n > 0 && b->stride == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "a block table with a stride of 0");
  }
  kvs_status ranged = kvs_node_check_ranges(node, b, err);
  if (ranged != KVS_OK) return ranged;
  if (!b->window_rows) {
    /* A range row's results are its last position's. */
    const int64_t *positions = b->positions;
    if (b->lengths != NULL) {
      for (size_t i = 0; i < b->n; i++) {
        node->last_positions[i] =
            b->positions[i] < 0 ? b->positions[i] : b->positions[i] + b->lengths[i] - 1;
      }
      positions = node->last_positions;
    }
    kvs_ring_batch full = {b->block_table, b->stride, positions, b->n, NULL, b->requests};
    return window_rows_of(node, &full, rows, err);
  }
  for (size_t i = 0; i < b->n; i++) {
    window_row(node, i, b->positions[i], b->block_table[2 * i], b->block_table[2 * i + 1]);
  }
  kvs_ring_batch r = {node->w_blocks, 2, node->w_positions, b->n, NULL, b->requests};
  *rows = r;
  return KVS_OK;
}

/* The sizes of kvs_node_batch and kvs_node_step_result a caller may set:
 * this build's, or 0.7's (up to the first field 0.8 added), whose later
 * fields then read as absent. */
#define BATCH_0_7_BYTES offsetof(kvs_node_batch, lengths)
#define RESULT_0_7_BYTES offsetof(kvs_node_step_result, requests)

static kvs_status check_sizes(const kvs_node_batch *batch, const kvs_node_step_result *out,
                              kvs_error *err) {
  if (out != NULL && out->size != sizeof *out && out->size != RESULT_0_7_BYTES) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "result.size is %zu, this build's kvs_node_step_result is %zu: set it "
                         "to sizeof(kvs_node_step_result)",
                         out->size, sizeof *out);
  }
  if (batch != NULL && batch->size != sizeof *batch && batch->size != BATCH_0_7_BYTES) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "batch.size is %zu, this build's kvs_node_batch is %zu: set it to "
                         "sizeof(kvs_node_batch)",
                         batch->size, sizeof *batch);
  }
  return KVS_OK;
}

/* What the engine's batch may not be, beyond its rows: refused before the
 * step (nothing collective has happened). */
static kvs_status check_before(kvs_node_t node, const kvs_node_batch *b, kvs_error *err) {
  uint64_t step = kvs_shard_next_step(node->shard);
  kvs_status status = kvs_node_release_check(node, step, err);
  if (status != KVS_OK) return status;
  kvs_error why;
  kvs_error_clear(&why);
  if (!node->options.no_stream && (status = kvs_table_check_stream(node->table, NULL, &why))) {
    return kvs_error_set(err, status, "rank %d, step %llu: %s", node->rank,
                         (unsigned long long)step, why.message);
  }
  if (b == NULL) return KVS_OK;
  bool follower = node->rank != 0;
  if (b->payload_bytes > 0 &&
      (follower || b->payload == NULL || b->payload_bytes > node->options.max_payload_bytes)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         follower ? "rank %d is a follower: only the leader's batch carries a "
                                    "payload (%zu bytes given; max_payload_bytes %zu)"
                         : b->payload == NULL ? "rank %d: a payload of %zu bytes at NULL "
                                                "(max_payload_bytes %zu)"
                                              : "rank %d: a payload of %zu bytes, over "
                                                "max_payload_bytes %zu",
                         node->rank, b->payload_bytes, node->options.max_payload_bytes);
  }
  if (follower && node->options.carry_batch && b->n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "rank %d is a follower and steps carry the leader's batch "
                         "(carry_batch): pass no batch (NULL)",
                         node->rank);
  }
  return KVS_OK;
}

/* The 0.8 fields of a caller's batch, or none for a 0.7 one. */
static kvs_node_batch batch_of(const kvs_node_batch *b) {
  kvs_node_batch full;
  memset(&full, 0, sizeof full);
  if (b != NULL) memcpy(&full, b, b->size < sizeof full ? b->size : sizeof full);
  full.size = sizeof full;
  return full;
}

kvs_status kvs_node_step(kvs_node_t node, const kvs_node_batch *batch, kvs_node_step_result *out,
                         kvs_error *err) {
  if (node == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "node is NULL");
  kvs_status checked = check_sizes(batch, out, err);
  if (checked != KVS_OK) return checked;
  kvs_node_batch b = batch_of(batch);
  const kvs_node_batch *given = batch != NULL ? &b : NULL;
  if ((checked = check_before(node, given, err)) != KVS_OK) return checked;
  uint64_t step = kvs_shard_next_step(node->shard);
  kvs_ring_batch none = {NULL, 0, NULL, 0, NULL, NULL}, rows = none;
  kvs_error bad;
  kvs_error_clear(&bad);
  /* A bad batch still steps (every rank is in the broadcast), then fails. */
  kvs_status refused = given != NULL ? rows_of(node, given, &rows, &bad) : KVS_OK;
  size_t n = refused == KVS_OK ? rows.n_req : 0;
  carried_step carried = {NULL, 0, node->options.carry_batch && node->rank != 0, 0, NULL, 0};
  if (!carried.rows_from_leader) kvs_node_keep_rows(node, step, given, n);
  if (node->rank == 0 && node->app_capacity > 0) {
    carried.app = node->app;
    carried.app_bytes = kvs_node_pack(node, refused == KVS_OK ? given : NULL, n);
  }
  kvs_node_step_info info;
  void *event = NULL;
  kvs_status stepped = step_window(node, refused == KVS_OK ? &rows : &none,
                                   node->options.digest_steps, &carried, &info, &event, err);
  if (stepped != KVS_OK && stepped != KVS_ERR_DIVERGENCE) return stepped;
  if (refused != KVS_OK) {
    return kvs_error_set(err, refused, "rank %d: %s", node->rank, bad.message);
  }
  if (out != NULL) {
    int q = (int)(step & 1);
    kvs_node_step_result r = {sizeof r,
                              info.info.step,
                              info.info.entries,
                              info.info.binds,
                              info.info.frees,
                              info.ring.n_req,
                              info.ring.page,
                              info.ring.on_device,
                              info.ring.own,
                              info.ring.prev,
                              info.ring.ring,
                              info.ring.csa_loc,
                              info.ring.hca_loc,
                              event,
                              info.digest,
                              node->rows_requests[q],
                              node->rows_positions[q],
                              node->rows_ranged[q] ? node->rows_lengths[q] : NULL,
                              carried.payload,
                              carried.payload_bytes};
    size_t bytes = out->size;
    memcpy(out, &r, bytes);
    out->size = bytes;
  }
  return stepped;
}

/* The shard's finding in kvshard.h's words: its application digest is the
 * node's ring contexts. */
static kvs_divergence divergence_of(kvs_shard_divergence kind) {
  switch (kind) {
    case KVS_SHARD_AGREE:
      return KVS_DIVERGENCE_NONE;
    case KVS_SHARD_DIVERGED_BINDINGS:
      return KVS_DIVERGENCE_BINDINGS;
    case KVS_SHARD_DIVERGED_AUX:
      return KVS_DIVERGENCE_RING_CONTEXTS;
    case KVS_SHARD_DIVERGED_INTEGRITY:
      return KVS_DIVERGENCE_INTEGRITY;
    case KVS_SHARD_DIVERGED_STEPS:
      return KVS_DIVERGENCE_STEPS;
    default:
      return KVS_DIVERGENCE_PREFIX_BLOCK;
  }
}

const char *kvs_divergence_name(kvs_divergence kind) {
  static const char *const names[] = {"agree",     "bindings", "ring contexts",
                                      "integrity", "steps",    "prefix block"};
  return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "unknown";
}

kvs_status kvs_node_check(kvs_node_t node, kvs_node_report *report, kvs_error *err) {
  if (node == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "node is NULL");
  if (report != NULL && report->size != sizeof *report) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "report.size is %zu, this build's kvs_node_report is %zu: set it to "
                         "sizeof(kvs_node_report)",
                         report->size, sizeof *report);
  }
  kvs_shard_report r;
  kvs_status status = kvs_node_check_report(node, &r, err);
  if (report != NULL && (status == KVS_OK || status == KVS_ERR_DIVERGENCE)) {
    kvs_node_report out = {sizeof out,           divergence_of(r.kind), r.step,
                           r.digest_min,         r.full_page,           r.rank,
                           r.leader_window_page, r.rank_window_page,    r.request_slot};
    *report = out;
  }
  return status;
}

/* The step's contract with an engine: the batch and payload a step
 * carries from the leader (one collective a step), range rows, the
 * engine's result buffers and its releases, and the capacity a scheduler
 * that is not the leader decides from. node_step.c runs the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/node_internal.h"

/* The step message's application area, the leader's, read by every rank:
 * a header, the carried rows (carry_batch), then the payload. A row keeps
 * the engine's request, position and length and the tables' window row
 * the leader made of them, so a follower steps exactly the leader's rows. */
typedef struct carried_header {
  uint32_t rows;
  uint32_t ranges; /* whether lengths were given */
  uint64_t payload_bytes;
} carried_header;

typedef struct carried_row {
  uint64_t request;
  int64_t position, length;
  int64_t window_position;
  int32_t before, own;
} carried_row;

size_t kvs_node_app_capacity(bool carry_batch, size_t max_batch, size_t max_payload_bytes) {
  if (!carry_batch && max_payload_bytes == 0) return 0;
  return sizeof(carried_header) + (carry_batch ? max_batch * sizeof(carried_row) : 0) +
         max_payload_bytes;
}

kvs_status kvs_node_contract_create(kvs_node_t node, kvs_error *err) {
  const kvs_node_options *o = &node->options;
  if (o->max_payload_bytes > KVS_NODE_MAX_PAYLOAD_BYTES) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "options.max_payload_bytes is %zu, over the %u a step message carries",
                         o->max_payload_bytes, (unsigned)KVS_NODE_MAX_PAYLOAD_BYTES);
  }
  size_t n = node->max_batch > 0 ? node->max_batch : 1;
  for (int q = 0; q < 2; q++) {
    node->rows_requests[q] = malloc(n * sizeof *node->rows_requests[q]);
    node->rows_positions[q] = malloc(n * sizeof *node->rows_positions[q]);
    node->rows_lengths[q] = malloc(n * sizeof *node->rows_lengths[q]);
    if (!node->rows_requests[q] || !node->rows_positions[q] || !node->rows_lengths[q]) {
      return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu rows' copies", n);
    }
    node->released[q] = UINT64_MAX;
  }
  if ((node->last_positions = malloc(n * sizeof *node->last_positions)) == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu rows' positions", n);
  }
  node->app_capacity = kvs_node_app_capacity(o->carry_batch, node->max_batch, o->max_payload_bytes);
  if (node->app_capacity > 0 && (node->app = malloc(node->app_capacity)) == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a step's %zu carried bytes",
                         node->app_capacity);
  }
  return KVS_OK;
}

void kvs_node_contract_destroy(kvs_node_t node) {
  for (int q = 0; q < 2; q++) {
    free(node->rows_requests[q]);
    free(node->rows_positions[q]);
    free(node->rows_lengths[q]);
  }
  free(node->app);
  free(node->last_positions);
}

kvs_status kvs_node_results_adopt(kvs_node_t node, const kvs_node_result_buffers *b,
                                  kvs_error *err) {
  if (b == NULL)
    return kvs_table_set_results(node->table, NULL, node->options.explicit_release, err);
  if (b->size != sizeof *b) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "options.result_buffers->size is %zu, this build's "
                         "kvs_node_result_buffers is %zu",
                         b->size, sizeof *b);
  }
  kvs_table_results into = {b->own, b->prev, b->ring, b->csa_loc, b->hca_loc};
  kvs_status status =
      kvs_table_set_results(node->table, &into, node->options.explicit_release, err);
  if (status != KVS_OK) return status; /* (it names a NULL array; nothing changed) */
  node->results = *b;
  node->has_results = true;
  return KVS_OK;
}

kvs_status kvs_node_set_result_buffers(kvs_node_t node, const kvs_node_result_buffers *buffers,
                                       kvs_error *err) {
  if (node == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "node is NULL");
  uint64_t next = kvs_node_next_step(node);
  if (next != 0) {
    /* A step's results were handed out at the old addresses (and a graph
     * may have baked them): moving them under the engine is refused. */
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "rank %d: result buffers are set before the node's first step (the "
                         "next step is %llu)",
                         node->rank, (unsigned long long)next);
  }
  /* (adopt checks everything before it changes anything) */
  kvs_status status = kvs_node_results_adopt(node, buffers, err);
  if (status != KVS_OK) return status;
  if (buffers == NULL) node->has_results = false; /* the node's own again */
  node->options.result_buffers = node->has_results ? &node->results : NULL;
  return KVS_OK;
}

/* ---- releases ---- */

/* How many steps a result stays valid for: the node's two buffers, or the
 * engine's one. */
static unsigned result_depth(const struct kvs_node *node) { return node->has_results ? 1u : 2u; }

kvs_status kvs_node_release_check(const struct kvs_node *node, uint64_t step, kvs_error *err) {
  if (!node->options.explicit_release) return KVS_OK;
  unsigned depth = result_depth(node);
  if (step < depth) return KVS_OK;
  uint64_t overwritten = step - depth;
  if (node->released[overwritten & 1] == overwritten) return KVS_OK;
  return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                       "rank %d: step %llu would overwrite step %llu's results, which were not "
                       "released: call kvs_node_release(node, %llu, stream) once the engine's "
                       "reads of them are queued (explicit_release)",
                       node->rank, (unsigned long long)step, (unsigned long long)overwritten,
                       (unsigned long long)overwritten);
}

kvs_status kvs_node_release(kvs_node_t node, uint64_t step, void *stream, kvs_error *err) {
  if (node == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "node is NULL");
  uint64_t next = kvs_node_next_step(node);
  unsigned depth = result_depth(node);
  if (step >= next || step + depth < next) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         step >= next ? "rank %d: step %llu has not run (the next step is %llu)"
                                      : "rank %d: step %llu's results are no longer held (the "
                                        "next step is %llu; the node holds the last %u)",
                         node->rank, (unsigned long long)step, (unsigned long long)next, depth);
  }
  void *s = stream != NULL ? stream : KVS_CUDA_LEGACY_STREAM;
#ifndef KVS_MUTANT_RELEASE_RECORDS_NOTHING /* defined: planted bug (tests/mutants), no wait */
  kvs_status status = kvs_table_release(node->table, step, s, err);
#else
  kvs_status status = KVS_OK;
  (void)s;
#endif
  if (status == KVS_OK) node->released[step & 1] = step;
  return status;
}

/* ---- capacity ---- */

kvs_status kvs_node_capacity_of(const struct kvs_node *node, kvs_node_capacity *out,
                                kvs_error *err) {
  if (node == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s is NULL",
                         node == NULL ? "node" : "out");
  }
  if (out->size != sizeof *out) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "capacity.size is %zu, this build's kvs_node_capacity is %zu: set it to "
                         "sizeof(kvs_node_capacity)",
                         out->size, sizeof *out);
  }
  kvs_window_pool_t pool = kvs_shard_pool(node->shard);
  size_t capacity = kvs_shard_step_capacity(node->shard);
  size_t pending = node->rank == 0 ? (size_t)kvs_window_pool_journal_pending(pool) : 0;
  kvs_node_capacity c;
  memset(&c, 0, sizeof c);
  c.size = sizeof c;
  c.step = kvs_node_next_step(node);
  c.running = kvs_window_pool_bound_slots(pool);
  c.max_running = node->options.max_running;
  c.free_window_pages = kvs_node_free_window_pages(node, &c.droppable_window_pages);
  c.usable_pages = kvs_node_usable_pages(node);
  c.journal_room = pending < capacity ? capacity - pending : 0;
  c.step_capacity = capacity;
  c.max_batch = node->max_batch;
  c.max_payload_bytes = node->options.max_payload_bytes;
  c.result_depth = result_depth(node);
  *out = c;
  return KVS_OK;
}

/* ---- the carried batch ---- */

kvs_status kvs_node_check_ranges(const struct kvs_node *node, const kvs_node_batch *b,
                                 kvs_error *err) {
  if (b->lengths == NULL) return KVS_OK;
  if (b->window_rows) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "range rows (lengths) need full block rows: window rows hold the two "
                         "pages of one position");
  }
  const int64_t page = (int64_t)node->options.page;
  for (size_t i = 0; i < b->n; i++) {
    int64_t pos = b->positions[i], len = b->lengths[i];
    if (pos < 0) continue; /* an idle row: its length is not read */
    if (len < 1 || len > INT64_MAX - pos) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "row %zu (request %llu) has length %lld: a range row covers at least "
                           "one position",
                           i, (unsigned long long)b->requests[i], (long long)len);
    }
    uint64_t last_block = (uint64_t)((pos + len - 1) / page);
    if (last_block >= b->stride) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "row %zu (request %llu) covers positions %lld..%lld, to block %llu, "
                           "past its block row of %llu pages",
                           i, (unsigned long long)b->requests[i], (long long)pos,
                           (long long)(pos + len - 1), (unsigned long long)last_block,
                           (unsigned long long)b->stride);
    }
  }
  return KVS_OK;
}

void kvs_node_keep_rows(kvs_node_t node, uint64_t step, const kvs_node_batch *b, size_t n) {
  int q = (int)(step & 1);
  node->rows_n[q] = n;
  node->rows_ranged[q] = b != NULL && b->lengths != NULL;
  for (size_t i = 0; i < n; i++) {
    node->rows_requests[q][i] = b->requests[i];
    node->rows_positions[q][i] = b->positions[i];
    node->rows_lengths[q][i] = b->lengths != NULL ? b->lengths[i] : 1;
  }
}

size_t kvs_node_pack(kvs_node_t node, const kvs_node_batch *b, size_t n) {
  carried_header h = {(uint32_t)n, b != NULL && b->lengths != NULL,
                      b != NULL ? (uint64_t)b->payload_bytes : 0};
  unsigned char *at = node->app;
  memcpy(at, &h, sizeof h);
  at += sizeof h;
  if (node->options.carry_batch) {
    for (size_t i = 0; i < n; i++) {
      carried_row r = {
          b->requests[i],       b->positions[i],       b->lengths != NULL ? b->lengths[i] : 1,
          node->w_positions[i], node->w_blocks[2 * i], node->w_blocks[2 * i + 1]};
      memcpy(at, &r, sizeof r);
      at += sizeof r;
    }
  }
  if (h.payload_bytes > 0) memcpy(at, b->payload, b->payload_bytes);
  return (size_t)(at - node->app) + (size_t)h.payload_bytes;
}

kvs_status kvs_node_unpack(kvs_node_t node, uint64_t step, const void *app, size_t bytes, size_t *n,
                           const void **payload, size_t *payload_bytes, kvs_error *err) {
  carried_header h;
  const unsigned char *at = app;
  if (bytes < sizeof h) {
    return kvs_error_set(err, KVS_ERR_CORRUPT, "step %llu carried %zu bytes, under its header",
                         (unsigned long long)step, bytes);
  }
  memcpy(&h, at, sizeof h);
  at += sizeof h;
  size_t rows = node->options.carry_batch ? h.rows : 0;
  if (rows > node->max_batch ||
      bytes != sizeof h + rows * sizeof(carried_row) + (size_t)h.payload_bytes) {
    return kvs_error_set(
        err, KVS_ERR_CORRUPT, "step %llu carried %zu bytes for %u rows and a %llu-byte payload",
        (unsigned long long)step, bytes, h.rows, (unsigned long long)h.payload_bytes);
  }
  int q = (int)(step & 1);
  node->rows_ranged[q] = h.ranges != 0;
  for (size_t i = 0; i < rows; i++) {
    carried_row r;
    memcpy(&r, at, sizeof r);
    at += sizeof r;
    node->rows_requests[q][i] = r.request;
    node->rows_positions[q][i] = r.position;
    node->rows_lengths[q][i] = r.length;
    node->w_positions[i] = r.window_position;
    node->w_blocks[2 * i] = r.before;
    node->w_blocks[2 * i + 1] = r.own;
  }
  if (node->options.carry_batch) node->rows_n[q] = rows;
  *n = rows;
  *payload = h.payload_bytes > 0 ? at : NULL;
  *payload_bytes = (size_t)h.payload_bytes;
  return KVS_OK;
}

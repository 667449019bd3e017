#include "shard/table.h"

#include <stdlib.h>

#include "backends/cuda/entry.h"
#include "shard/table_internal.h"

const char *kvs_table_kind_name(kvs_table_kind kind) {
  return kind == KVS_TABLE_CUDA ? "cuda" : kind == KVS_TABLE_HOST ? "cpu" : "unknown";
}

kvs_status kvs_table_wrap(const kvs_table_ops *ops, void *impl, kvs_table_dims dims,
                          const kvs_table_limits *limits, int device, uint64_t bytes,
                          kvs_table_t *out, kvs_error *err) {
  if (ops == NULL || impl == NULL || limits == NULL || out == NULL) {
    if (ops != NULL && impl != NULL) ops->destroy(impl);
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table ops, impl, limits and out needed");
  }
  struct kvs_table *t = calloc(1, sizeof *t);
  if (t == NULL) {
    ops->destroy(impl);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a table");
  }
  t->ops = ops;
  t->impl = impl;
  t->dims = dims;
  t->limits = *limits;
  t->device = device;
  t->bytes = bytes;
  *out = t;
  return KVS_OK;
}

void kvs_table_destroy(kvs_table_t table) {
  if (table == NULL) return;
  kvs_table_host_tier_free(table);
  table->ops->destroy(table->impl);
  free(table);
}

kvs_table_kind kvs_table_kind_of(const struct kvs_table *table) { return table->ops->kind; }
kvs_table_dims kvs_table_dims_of(const struct kvs_table *table) { return table->dims; }
int kvs_table_device(const struct kvs_table *table) { return table->device; }
uint64_t kvs_table_bytes(const struct kvs_table *table) { return table->bytes; }

kvs_status kvs_table_apply(kvs_table_t table, const kvs_journal_entry *entries,
                           const void *device_entries, size_t n, kvs_error *err) {
  if (table == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table is NULL");
  if (n == 0) return KVS_OK;
  if (entries == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%zu journal entries at NULL", n);
  }
  /* All or nothing: the host copy is the same entries, checked before
   * any launch (a kernel cannot take a step back). */
  kvs_status status = kvs_table_check_journal(&table->dims, entries, n, err);
  if (status != KVS_OK) return status;
  if ((status = kvs_table_move_rows(table, entries, n, err)) != KVS_OK) return status;
  return table->ops->apply(table->impl, entries, device_entries, n, err);
}

kvs_status kvs_table_ring_ctx(kvs_table_t table, const kvs_ring_batch *batch, kvs_ring_result *out,
                              kvs_error *err) {
  if (table == NULL || batch == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table, batch and out are required");
  }
  if (batch->n_req > table->limits.max_requests) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a ring-context batch of %zu requests, over the table's %zu", batch->n_req,
                         table->limits.max_requests);
  }
  if (batch->n_req > 0 && (batch->stride == 0 || batch->stride > table->limits.max_blocks ||
                           batch->block_table == NULL || batch->positions == NULL)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a ring-context batch needs block tables 1..%llu blocks wide (got %llu) "
                         "and positions",
                         (unsigned long long)table->limits.max_blocks,
                         (unsigned long long)batch->stride);
  }
  return table->ops->ring_ctx(table->impl, batch, out, err);
}

kvs_status kvs_table_result_to_host(kvs_table_t table, const kvs_ring_result *result, int64_t *own,
                                    int64_t *prev, int64_t *ring, int64_t *csa_loc,
                                    int64_t *hca_loc, kvs_error *err) {
  if (table == NULL || result == NULL ||
      (result->n_req > 0 && (own == NULL || prev == NULL || ring == NULL))) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table, result and host arrays needed");
  }
  if (result->n_req > 0 && ((csa_loc != NULL && result->csa_loc == NULL) ||
                            (hca_loc != NULL && result->hca_loc == NULL))) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the result holds no %s ring locations to copy",
                         csa_loc != NULL && result->csa_loc == NULL ? "ratio-4" : "ratio-128");
  }
  return table->ops->result_to_host(table->impl, result, own, prev, ring, csa_loc, hca_loc, err);
}

kvs_status kvs_table_memory(kvs_table_t table, void **base, int64_t **mapping, kvs_error *err) {
  if (table == NULL || base == NULL || mapping == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_table_memory: %s is NULL",
                         table == NULL  ? "table"
                         : base == NULL ? "base"
                                        : "mapping");
  }
  if (table->ops->memory == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED, "this %s table shows no memory",
                         kvs_table_kind_name(table->ops->kind));
  }
  void *b = NULL;
  int64_t *m = NULL;
  kvs_status status = table->ops->memory(table->impl, &b, &m, err);
  if (status != KVS_OK) return status;
  *base = b;
  *mapping = m;
  return KVS_OK;
}

kvs_status kvs_table_download(kvs_table_t table, int64_t *mapping, size_t rows, kvs_error *err) {
  if (table == NULL || mapping == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table or host mapping is NULL");
  }
  if ((uint64_t)rows != table->dims.full_token + 1) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a mapping of %zu rows for a table of %llu (full_token + the sentinel)",
                         rows, (unsigned long long)(table->dims.full_token + 1));
  }
  return table->ops->download(table->impl, mapping, rows, err);
}

kvs_status kvs_table_faults(kvs_table_t table, kvs_device_faults *out, kvs_error *err) {
  if (table == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table or output is NULL");
  }
  return table->ops->faults(table->impl, out, err);
}

/* Whether [p, p + bytes) lies in the table's carve. */
static bool in_carve(const struct kvs_table *t, const void *p, uint64_t bytes) {
  const unsigned char *at = p;
  return at >= t->base && (uint64_t)(at - t->base) <= t->carve_bytes &&
         bytes <= t->carve_bytes - (uint64_t)(at - t->base);
}

/* The bytes a copy's side spans: height rows of width, pitch apart. */
static uint64_t copy_span(uint64_t height, uint64_t pitch, uint64_t width) {
  return height == 0 ? 0 : (height - 1) * pitch + width;
}

static kvs_status rows_kept(const struct kvs_table *t, const char *call, kvs_error *err) {
  if (t == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: table is NULL", call);
  if (t->base == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED, "%s: the table keeps no rows", call);
  }
  return KVS_OK;
}

kvs_status kvs_table_rows_digest(kvs_table_t table, const kvs_rows_unit *units, size_t n,
                                 uint64_t *out, kvs_error *err) {
  kvs_status status = rows_kept(table, "kvs_table_rows_digest", err);
  if (status != KVS_OK || n == 0) return status;
  if (units == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_table_rows_digest: %s is NULL",
                         units == NULL ? "units" : "out");
  }
  for (size_t i = 0; i < n; i++) {
    if (units[i].bytes == 0 || !in_carve(table, units[i].rows, units[i].bytes)) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "kvs_table_rows_digest: unit %zu (%llu bytes) is %s", i,
                           (unsigned long long)units[i].bytes,
                           units[i].bytes == 0 ? "empty" : "outside the table's rows");
    }
  }
  return table->ops->rows_digest(table->impl, units, n, out, err);
}

kvs_status kvs_table_copy_now(kvs_table_t table, const kvs_row_copy *copies, size_t n,
                              kvs_error *err) {
  kvs_status status = rows_kept(table, "kvs_table_copy_now", err);
  if (status != KVS_OK || n == 0) return status;
  for (size_t i = 0; i < n; i++) {
    const kvs_row_copy *c = &copies[i];
    bool dst_table = c->op != KVS_ROW_TO_HOST,
         src_table = c->op == KVS_ROW_TO_HOST || c->op == KVS_ROW_WITHIN;
    if ((dst_table && !in_carve(table, c->dst, copy_span(c->height, c->dst_pitch, c->width))) ||
        (src_table && !in_carve(table, c->src, copy_span(c->height, c->src_pitch, c->width)))) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "kvs_table_copy_now: copy %zu is outside the table's rows", i);
    }
  }
  status = table->ops->copy_rows(table->impl, copies, n, err);
  return status == KVS_OK ? table->ops->sync(table->impl, err) : status;
}

kvs_status kvs_table_sync(kvs_table_t table, kvs_error *err) {
  if (table == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table is NULL");
  return table->ops->sync(table->impl, err);
}

static kvs_status open_cuda(int device, const kvs_device_layout *layout,
                            const kvs_table_limits *limits, void *stream,
                            const kvs_cuda_table_options *options, kvs_table_t *out,
                            kvs_error *err) {
  if (layout == NULL || limits == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "layout, limits and out are required");
  }
  const kvs_cuda_tables_table *backend = NULL;
  kvs_status status = kvs_cuda_tables_table_get(&backend, err);
  if (status != KVS_OK) return status;
  const kvs_table_ops *ops = NULL;
  void *impl = NULL;
  uint64_t bytes = 0;
  status = backend->open(device, layout, limits, stream, options, &ops, &impl, &bytes, err);
  if (status != KVS_OK) return status;
  return kvs_table_wrap(ops, impl, kvs_device_layout_dims(layout), limits, device, bytes, out, err);
}

kvs_status kvs_table_create_cuda(int device, const kvs_device_layout *layout,
                                 const kvs_table_limits *limits, void *stream, kvs_table_t *out,
                                 kvs_error *err) {
  return open_cuda(device, layout, limits, stream, NULL, out, err);
}

kvs_status kvs_table_create_cuda_step(int device, const kvs_device_layout *layout,
                                      const kvs_table_limits *limits,
                                      const kvs_cuda_table_options *options, kvs_table_t *out,
                                      kvs_error *err) {
  if (options == NULL || options->size != sizeof *options) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the device table's step options are missing or of another build");
  }
  return open_cuda(device, layout, limits, NULL, options, out, err);
}

kvs_status kvs_table_step(kvs_table_t table, const kvs_table_step_args *args, kvs_ring_result *out,
                          void **event, kvs_table_step_timing *timing, kvs_error *err) {
  if (table == NULL || args == NULL || out == NULL || event == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table, args, out and event are required");
  }
  const kvs_ring_batch *rows = args->rows;
  if (rows != NULL && rows->n_req > 0) {
    if (rows->n_req > table->limits.max_requests) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "a step of %zu rows, over the table's %zu", rows->n_req,
                           table->limits.max_requests);
    }
    if (rows->stride != 2 || rows->block_table == NULL || rows->positions == NULL) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "a step's rows are window rows: 2 pages each, and positions");
    }
  }
  if (table->ops->step == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED, "this %s table has no step",
                         kvs_table_kind_name(table->ops->kind));
  }
  *event = NULL;
  kvs_table_step_timing unused;
  kvs_table_step_timing *t = timing != NULL ? timing : &unused;
  /* The rows move first, in journal order, before the step's own work. */
  uint64_t moved_ns = table->row_stats.copy_ns;
  kvs_status status = kvs_table_move_rows(table, args->entries, args->n, err);
  if (status != KVS_OK) return status;
  status = table->ops->step(table->impl, args, out, event, t, err);
  t->apply_ns += table->row_stats.copy_ns - moved_ns;
  return status;
}

kvs_status kvs_table_digest(kvs_table_t table, uint64_t *out, kvs_error *err) {
  if (table == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table or output is NULL");
  }
  if (table->ops->digest == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED, "this %s table has no digest",
                         kvs_table_kind_name(table->ops->kind));
  }
  return table->ops->digest(table->impl, out, err);
}

kvs_status kvs_table_set_results(kvs_table_t table, const kvs_table_results *into,
                                 bool explicit_release, kvs_error *err) {
  if (table == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table is NULL");
  if (into != NULL && (into->own == NULL || into->prev == NULL || into->ring == NULL ||
                       into->csa_loc == NULL || into->hca_loc == NULL)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "result buffers need all five arrays (own, prev, ring, csa_loc, "
                         "hca_loc); %s is NULL",
                         into->own == NULL       ? "own"
                         : into->prev == NULL    ? "prev"
                         : into->ring == NULL    ? "ring"
                         : into->csa_loc == NULL ? "csa_loc"
                                                 : "hca_loc");
  }
  return table->ops->set_results(table->impl, into, explicit_release, err);
}

kvs_status kvs_table_release(kvs_table_t table, uint64_t step, void *stream, kvs_error *err) {
  if (table == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table is NULL");
  return table->ops->release(table->impl, step, stream, err);
}

kvs_status kvs_table_check_stream(kvs_table_t table, void *stream, kvs_error *err) {
  if (table == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "table is NULL");
  return table->ops->check_stream(table->impl, stream, err);
}

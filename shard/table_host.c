/* The host twin of a device table: the mapping in host memory, and the
 * CPU references (core/device_ref) as its kernels; the ring context by
 * runs (kvs_host_ring_ctx, equal to the reference bit for bit). */
#include <stdlib.h>
#include <string.h>

#include "shard/table.h"

typedef struct host_table {
  kvs_table_dims dims;
  int64_t *map;  /* full_token + 1 rows */
  int64_t *own;  /* max_requests */
  int64_t *prev; /* max_requests */
  int64_t *ring; /* max_requests * P */
  kvs_device_faults faults;
} host_table;

static const kvs_device_faults kNoFaults = {KVS_BATCH_FAULT_INIT, KVS_BATCH_FAULT_INIT,
                                            KVS_BATCH_FAULT_INIT, KVS_BATCH_FAULT_INIT};

/* One batch's record folded into the table's, as the device's atomics do. */
static void fold(kvs_batch_fault *into, const kvs_batch_fault *batch) {
  into->count += batch->count;
  if (batch->first_index < into->first_index) into->first_index = batch->first_index;
}

static kvs_status host_apply(void *impl, const kvs_journal_entry *entries,
                             const void *device_entries, size_t n, kvs_error *err) {
  (void)device_entries; /* no device memory here */
  host_table *t = impl;
  kvs_batch_fault f = KVS_BATCH_FAULT_INIT;
  kvs_status status = kvs_ref_apply_journal(t->map, &t->dims, entries, n, &f, err);
  if (status == KVS_OK) fold(&t->faults.apply_journal, &f);
  return status;
}

static kvs_status host_ring_ctx(void *impl, const kvs_ring_batch *batch, kvs_ring_result *out,
                                kvs_error *err) {
  host_table *t = impl;
  kvs_ring_result r = {t->own, t->prev, t->ring, batch->n_req, t->dims.page, false};
  if (batch->n_req > 0) {
    kvs_block_tables bt = {batch->block_table, batch->stride, t->dims.page};
    kvs_batch_fault f = KVS_BATCH_FAULT_INIT;
    kvs_status status = kvs_host_ring_ctx(t->map, &t->dims, &bt, batch->positions, batch->n_req,
                                          t->own, t->prev, t->ring, &f, err);
    if (status != KVS_OK) return status;
    fold(&t->faults.ring_ctx, &f);
  }
  *out = r;
  return KVS_OK;
}

static kvs_status host_result_to_host(void *impl, const kvs_ring_result *result, int64_t *own,
                                      int64_t *prev, int64_t *ring, kvs_error *err) {
  (void)impl;
  (void)err;
  size_t n = result->n_req;
  if (n == 0) return KVS_OK;
  if (own != result->own) memcpy(own, result->own, n * sizeof *own);
  if (prev != result->prev) memcpy(prev, result->prev, n * sizeof *prev);
  if (ring != result->ring) memcpy(ring, result->ring, n * result->page * sizeof *ring);
  return KVS_OK;
}

static kvs_status host_download(void *impl, int64_t *mapping, size_t rows, kvs_error *err) {
  (void)err;
  host_table *t = impl;
  memcpy(mapping, t->map, rows * sizeof *mapping);
  return KVS_OK;
}

static kvs_status host_faults(void *impl, kvs_device_faults *out, kvs_error *err) {
  (void)err;
  *out = ((host_table *)impl)->faults;
  return KVS_OK;
}

static kvs_status host_sync(void *impl, kvs_error *err) {
  (void)impl;
  (void)err;
  return KVS_OK; /* every call already finished */
}

static void host_destroy(void *impl) {
  host_table *t = impl;
  if (t == NULL) return;
  free(t->map);
  free(t->own);
  free(t->prev);
  free(t->ring);
  free(t);
}

static const kvs_table_ops host_ops = {
    .kind = KVS_TABLE_HOST,
    .apply = host_apply,
    .ring_ctx = host_ring_ctx,
    .result_to_host = host_result_to_host,
    .download = host_download,
    .faults = host_faults,
    .sync = host_sync,
    .destroy = host_destroy,
};

kvs_status kvs_table_create_host(const kvs_device_layout *layout, const kvs_table_limits *limits,
                                 kvs_table_t *out, kvs_error *err) {
  if (layout == NULL || limits == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "layout, limits and out are required");
  }
  kvs_table_dims dims = kvs_device_layout_dims(layout);
  kvs_status status = kvs_table_dims_check(&dims, err);
  if (status != KVS_OK) return status;
  uint64_t rows = dims.full_token + 1;
  uint64_t ring_rows = 0;
  if (__builtin_mul_overflow((uint64_t)limits->max_requests, dims.page, &ring_rows) ||
      rows > SIZE_MAX / sizeof(int64_t) || ring_rows > SIZE_MAX / sizeof(int64_t)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "a host table of %llu rows and %zu requests",
                         (unsigned long long)rows, limits->max_requests);
  }
  host_table *t = calloc(1, sizeof *t);
  if (t == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a host table");
  size_t req = limits->max_requests > 0 ? limits->max_requests : 1;
  t->dims = dims;
  t->faults = kNoFaults;
  t->map = malloc((size_t)rows * sizeof *t->map);
  t->own = malloc(req * sizeof *t->own);
  t->prev = malloc(req * sizeof *t->prev);
  t->ring = malloc((size_t)(ring_rows > 0 ? ring_rows : 1) * sizeof *t->ring);
  if (t->map == NULL || t->own == NULL || t->prev == NULL || t->ring == NULL) {
    host_destroy(t);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a host table of %llu rows",
                         (unsigned long long)rows);
  }
  /* As a fresh window pool's mapping and the device table start: unbound,
   * the dummy full page on the dummy window page, the sentinel -1. */
  memset(t->map, 0xff, (size_t)rows * sizeof *t->map);
  for (uint64_t off = 0; off < dims.page; off++) {
    t->map[dims.full_token - dims.page + off] = (int64_t)(dims.n_win_slots - dims.page + off);
  }
  uint64_t bytes = (rows + 2 * req + (ring_rows > 0 ? ring_rows : 1)) * sizeof(int64_t);
  return kvs_table_wrap(&host_ops, t, dims, limits, -1, bytes, out, err);
}

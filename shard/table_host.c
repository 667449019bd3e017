/* The host twin of a device table: the mapping in host memory, and the
 * CPU references (core/device_ref) as its kernels; the ring context by
 * runs (kvs_host_ring_ctx, equal to the reference bit for bit), the ring
 * locations by kvs_ref_batch_state_locs. */
/* MAP_ANONYMOUS and MAP_NORESERVE are not POSIX. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/clock.h"
#include "core/xxh3.h"
#include "pool/window_pool.h"
#include "shard/table.h"

/* One set of results. The node's steps alternate between two (step
 * parity), as a device table's do, so a step's results stay valid until
 * the step after next on the host too. */
typedef struct host_results {
  int64_t *own;  /* max_requests */
  int64_t *prev; /* max_requests */
  int64_t *ring; /* max_requests * P */
  int64_t *csa;  /* max_requests: ratio-4 ring locations */
  int64_t *hca;  /* max_requests: ratio-128 ring locations */
} host_results;

typedef struct host_table {
  kvs_table_dims dims;
  int64_t *map; /* full_token + 1 rows */
  host_results side[2];
  int q; /* the side the next ring context writes */
  /* The engine's result buffers (kvs_table_set_results): has_into. */
  kvs_table_results into;
  bool has_into;
  kvs_state_placement placement;
  kvs_device_faults faults;
  uint64_t carve_bytes; /* the layout's total: the address range views see */
  void *carve;          /* reserved on the first kvs_table_memory; NULL until then */
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

/* Which ring kinds a placement can derive: a per-request kind always, a
 * per-page kind when its ring size divides P. */
static void derivable(const kvs_state_placement *p, bool *csa, bool *hca) {
  *csa = kvs_state_rings_csa_per_request(p->rings) || p->page % KVS_RING_SLOTS_CSA == 0;
  *hca = kvs_state_rings_hca_per_request(p->rings) || p->page % KVS_RING_SLOTS_HCA == 0;
}

static kvs_status host_ring_ctx(void *impl, const kvs_ring_batch *batch, kvs_ring_result *out,
                                kvs_error *err) {
  host_table *t = impl;
  host_results *o = &t->side[t->q];
  kvs_ring_result r = {o->own, o->prev, o->ring, batch->n_req, t->dims.page, false, o->csa, o->hca};
  if (batch->n_req > 0 && batch->slots == NULL && t->placement.rings != KVS_STATE_RINGS_PER_PAGE) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a batch of %zu rows without request slots, for %s state rings",
                         batch->n_req, kvs_state_rings_name(t->placement.rings));
  }
  if (batch->n_req > 0) {
    kvs_block_tables bt = {batch->block_table, batch->stride, t->dims.page};
    kvs_batch_fault f = KVS_BATCH_FAULT_INIT;
    kvs_status status = kvs_host_ring_ctx(t->map, &t->dims, &bt, batch->positions, batch->n_req,
                                          o->own, o->prev, o->ring, &f, err);
    if (status != KVS_OK) return status;
    fold(&t->faults.ring_ctx, &f);
    bool csa, hca;
    derivable(&t->placement, &csa, &hca);
    if (csa || hca) {
      kvs_batch_fault g = KVS_BATCH_FAULT_INIT;
      status =
          kvs_ref_batch_state_locs(&t->placement, o->own, batch->slots, batch->positions,
                                   batch->n_req, csa ? o->csa : NULL, hca ? o->hca : NULL, &g, err);
      if (status != KVS_OK) return status;
      fold(&t->faults.state_locs, &g);
    }
    for (size_t i = 0; i < batch->n_req; i++) {
      if (!csa) o->csa[i] = -1;
      if (!hca) o->hca[i] = -1;
    }
  }
  *out = r;
  return KVS_OK;
}

/* The node's step on the host: the journal, then the rows' contexts. */
static kvs_status host_step(void *impl, const kvs_table_step_args *args, kvs_ring_result *out,
                            void **event, kvs_table_step_timing *timing, kvs_error *err) {
  (void)event; /* nothing to wait for: every call finished before it returned */
  uint64_t start = kvs_now_ns();
  kvs_status status = host_apply(impl, args->entries, NULL, args->n, err);
  uint64_t applied = kvs_now_ns();
  timing->apply_ns = applied - start;
  if (status != KVS_OK) return status;
  kvs_ring_batch none = {NULL, 0, NULL, 0, NULL, NULL};
  host_table *t = impl;
  t->q = (int)(args->step & 1);
  status = host_ring_ctx(impl, args->rows != NULL ? args->rows : &none, out, err);
  t->q = 0;
  if (status == KVS_OK && t->has_into) {
    size_t n = out->n_req;
    const kvs_table_results *d = &t->into;
    memcpy(d->own, out->own, n * sizeof *d->own);
    memcpy(d->prev, out->prev, n * sizeof *d->prev);
    memcpy(d->ring, out->ring, n * t->dims.page * sizeof *d->ring);
    memcpy(d->csa_loc, out->csa_loc, n * sizeof *d->csa_loc);
    memcpy(d->hca_loc, out->hca_loc, n * sizeof *d->hca_loc);
    kvs_ring_result r = {d->own, d->prev, d->ring, n, t->dims.page, false, d->csa_loc, d->hca_loc};
    *out = r;
  }
  timing->ring_ns = kvs_now_ns() - applied;
  return status;
}

static kvs_status host_set_results(void *impl, const kvs_table_results *into, bool explicit_release,
                                   kvs_error *err) {
  (void)explicit_release; /* the host waits for nothing: the node keeps the rule */
  (void)err;
  host_table *t = impl;
  t->has_into = into != NULL;
  if (into != NULL) t->into = *into;
  return KVS_OK;
}

static kvs_status host_release(void *impl, uint64_t step, void *stream, kvs_error *err) {
  (void)impl, (void)step, (void)stream, (void)err;
  return KVS_OK; /* the engine's reads on the host are done when it says so */
}

static kvs_status host_check_stream(void *impl, void *stream, kvs_error *err) {
  (void)impl, (void)stream, (void)err;
  return KVS_OK;
}

/* The sum of the bound full pages' binding terms (the pool's page digest,
 * pool/window_pool.h), from the table's own rows. */
static kvs_status host_digest(void *impl, uint64_t *out, kvs_error *err) {
  (void)err;
  const host_table *t = impl;
  uint64_t page = t->dims.page, digest = 0;
  for (uint64_t p = 0; p < t->dims.full_token / page; p++) {
    int64_t slot = t->map[p * page];
    if (slot >= 0) digest += kvs_binding_digest_term(p, (uint64_t)slot / page);
  }
  *out = digest;
  return KVS_OK;
}

static kvs_status host_result_to_host(void *impl, const kvs_ring_result *result, int64_t *own,
                                      int64_t *prev, int64_t *ring, int64_t *csa_loc,
                                      int64_t *hca_loc, kvs_error *err) {
  (void)impl;
  (void)err;
  size_t n = result->n_req;
  if (n == 0) return KVS_OK;
  if (own != result->own) memcpy(own, result->own, n * sizeof *own);
  if (prev != result->prev) memcpy(prev, result->prev, n * sizeof *prev);
  if (ring != result->ring) memcpy(ring, result->ring, n * result->page * sizeof *ring);
  if (csa_loc != NULL && csa_loc != result->csa_loc) {
    memcpy(csa_loc, result->csa_loc, n * sizeof *csa_loc);
  }
  if (hca_loc != NULL && hca_loc != result->hca_loc) {
    memcpy(hca_loc, result->hca_loc, n * sizeof *hca_loc);
  }
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

/* The carve's range is reserved, not committed: a plan of tens of GiB per
 * rank costs only the pages an engine writes through its views. */
static kvs_status host_memory(void *impl, void **base, int64_t **mapping, kvs_error *err) {
  host_table *t = impl;
  if (t->carve == NULL) {
    if (t->carve_bytes > SIZE_MAX) {
      return kvs_error_set(err, KVS_ERR_OVERFLOW, "a host carve of %llu bytes",
                           (unsigned long long)t->carve_bytes);
    }
    void *p = mmap(NULL, (size_t)t->carve_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return kvs_error_set(err, KVS_ERR_NO_MEMORY,
                           "no address range of %llu bytes for the host tables' carve: %s",
                           (unsigned long long)t->carve_bytes, strerror(errno));
    }
    t->carve = p;
  }
  *base = t->carve;
  *mapping = t->map;
  return KVS_OK;
}

/* The host tier, reserved like the carve: slots cost memory once a
 * spill writes them. */
static kvs_status host_tier_alloc(void *impl, uint64_t bytes, void **out, kvs_error *err) {
  (void)impl;
  void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY,
                         "no address range of %llu bytes for the host tier: %s",
                         (unsigned long long)bytes, strerror(errno));
  }
  *out = p;
  return KVS_OK;
}

static void host_tier_free(void *impl, void *memory, uint64_t bytes) {
  (void)impl;
  if (memory != NULL) munmap(memory, (size_t)bytes);
}

static kvs_status host_copy_rows(void *impl, const kvs_row_copy *copies, size_t n, kvs_error *err) {
  (void)impl;
  (void)err;
  for (size_t i = 0; i < n; i++) {
    const kvs_row_copy *c = &copies[i];
    for (uint64_t h = 0; h < c->height; h++) {
      char *dst = (char *)c->dst + h * c->dst_pitch;
      if (c->op == KVS_ROW_ZERO) {
        memset(dst, 0, (size_t)c->width);
      } else {
        memcpy(dst, (const char *)c->src + h * c->src_pitch, (size_t)c->width);
      }
    }
  }
  return KVS_OK;
}

/* XXH3 at memory speed: the host twin's transfer hashes what it sent and
 * what arrived while the rows are still in cache (shard/node_transfer.c). */
static kvs_status host_rows_digest(void *impl, const kvs_rows_unit *units, size_t n, uint64_t *out,
                                   kvs_error *err) {
  (void)impl;
  (void)err;
  for (size_t i = 0; i < n; i++) {
    out[i] = XXH3_64bits_withSeed(units[i].rows, (size_t)units[i].bytes, units[i].seed);
  }
  return KVS_OK;
}

static void host_destroy(void *impl) {
  host_table *t = impl;
  if (t == NULL) return;
  if (t->carve != NULL) munmap(t->carve, (size_t)t->carve_bytes);
  free(t->map);
  for (int q = 0; q < 2; q++) {
    free(t->side[q].own);
    free(t->side[q].prev);
    free(t->side[q].ring);
    free(t->side[q].csa);
    free(t->side[q].hca);
  }
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
    .step = host_step,
    .digest = host_digest,
    .memory = host_memory,
    .host_alloc = host_tier_alloc,
    .host_free = host_tier_free,
    .copy_rows = host_copy_rows,
    .set_results = host_set_results,
    .release = host_release,
    .check_stream = host_check_stream,
    .rows_digest = host_rows_digest,
};

kvs_status kvs_table_create_host(const kvs_device_layout *layout, const kvs_table_limits *limits,
                                 kvs_table_t *out, kvs_error *err) {
  if (layout == NULL || limits == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "layout, limits and out are required");
  }
  kvs_table_dims dims = kvs_device_layout_dims(layout);
  kvs_state_placement placement = kvs_state_placement_of(&layout->sizes);
  kvs_status status;
  /* The twin's views have the device's layout: the same refusals. */
  if ((status = kvs_device_layout_check_tables(layout, err)) ||
      (status = kvs_table_dims_check(&dims, err)) ||
      (status = kvs_state_placement_check(&placement, err))) {
    return status;
  }
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
  t->placement = placement;
  t->carve_bytes = layout->total_bytes > 0 ? layout->total_bytes : 1;
  t->faults = kNoFaults;
  t->map = malloc((size_t)rows * sizeof *t->map);
  bool allocated = t->map != NULL;
  for (int q = 0; q < 2; q++) {
    host_results *o = &t->side[q];
    o->own = malloc(req * sizeof *o->own);
    o->prev = malloc(req * sizeof *o->prev);
    o->ring = malloc((size_t)(ring_rows > 0 ? ring_rows : 1) * sizeof *o->ring);
    o->csa = malloc(req * sizeof *o->csa);
    o->hca = malloc(req * sizeof *o->hca);
    allocated = allocated && o->own != NULL && o->prev != NULL && o->ring != NULL &&
                o->csa != NULL && o->hca != NULL;
  }
  if (!allocated) {
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
  uint64_t bytes = (rows + 2 * (4 * req + (ring_rows > 0 ? ring_rows : 1))) * sizeof(int64_t);
  return kvs_table_wrap(&host_ops, t, dims, limits, -1, bytes, out, err);
}

/* A table on a GPU: backends/cuda/device_tables plus the step's batch buffers.
 *
 * Ordering, all on one stream: the journal apply, the batch upload, the
 * ring-context kernel, the state-location kernel (which reads the ring
 * context's own slots) and any readback run in submission order. Host
 * staging is pinned (an async copy from it may still be reading when the
 * call returns), so before the host rewrites it the table waits on the
 * event recorded after the last copy that read it. */
#include "backends/cuda/table_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_tables.h"
#include "backends/cuda/table_cuda_step.h"

typedef struct cuda_table {
  int device;
  kvs_device_tables_t tables;
  kvs_table_dims dims;
  cudaStream_t stream;
  bool own_stream;
  size_t journal_capacity; /* entries one host apply may stage */
  kvs_state_placement placement;
  bool csa_derivable, hca_derivable; /* kinds the placement can derive (table.h) */
  /* Device batch buffers. */
  int32_t *d_blocks;
  int64_t *d_positions;
  int64_t *d_slots; /* request slots, with per-request rings */
  int64_t *d_own, *d_prev, *d_ring;
  int64_t *d_csa, *d_hca; /* the rows' ring locations */
  /* Pinned host staging for the batch. */
  int32_t *h_blocks;
  int64_t *h_positions;
  int64_t *h_slots;
  cudaEvent_t staged; /* after the last upload that read the staging */
  bool staged_pending;
  cuda_step *step; /* the node's step (tables opened with step options) */
  /* The engine's stream (step options), where the rows' copies go: after
   * the engine's writes of the rows, before its next reads. */
  cudaStream_t engine_stream;
  /* The device's largest pitch a 2D copy or memset takes
   * (cudaDevAttrMaxPitch): a layer stride past it goes run by run. */
  uint64_t max_pitch;
  /* Recorded after the last row copies (copy_rows), which run on the
   * engine's stream when there is one: sync waits for it too. */
  cudaEvent_t copied;
  bool copied_pending;
  /* A transfer's rows digests, KVS_ROWS_DIGEST_BATCH units a launch: the
   * units and digests on the device, their pinned staging. */
  kvs_rows_unit *d_units, *h_units;
  uint64_t *d_digests, *h_digests;
} cuda_table;

/* The table's device current for a call; kvs_cuda_device_leave puts the
 * thread's context back after it as it was (none for a thread that never
 * chose a device: no primary context on device 0 is created for it). */
static kvs_status enter(const cuda_table *t, kvs_cuda_device_scope *scope, kvs_error *err) {
  return kvs_cuda_device_enter(t->device, scope, err);
}

static kvs_status cuda_apply(void *impl, const kvs_journal_entry *entries,
                             const void *device_entries, size_t n, kvs_error *err) {
  cuda_table *t = impl;
  if (device_entries != NULL) {
    return kvs_device_tables_apply_journal_device(t->tables, device_entries, n, t->stream, err);
  }
  /* Larger than the staging area: applied in parts, in order, which is the
   * same sequential replay. */
  for (size_t done = 0; done < n;) {
    size_t part = n - done < t->journal_capacity ? n - done : t->journal_capacity;
    kvs_status status =
        kvs_device_tables_apply_journal(t->tables, entries + done, part, t->stream, err);
    if (status != KVS_OK) return status;
    done += part;
  }
  return KVS_OK;
}

static kvs_status cuda_ring_ctx(void *impl, const kvs_ring_batch *batch, kvs_ring_result *out,
                                kvs_error *err) {
  cuda_table *t = impl;
  kvs_ring_result r = {t->d_own,     t->d_prev, t->d_ring, batch->n_req,
                       t->dims.page, true,      t->d_csa,  t->d_hca};
  bool per_request = t->placement.rings != KVS_STATE_RINGS_PER_PAGE;
  if (batch->n_req > 0 && per_request && batch->slots == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a batch of %zu rows without request slots, for %s state rings",
                         batch->n_req, kvs_state_rings_name(t->placement.rings));
  }
  if (batch->n_req == 0) {
    *out = r;
    return KVS_OK;
  }
  kvs_cuda_device_scope scope;
  kvs_status status = enter(t, &scope, err);
  if (status != KVS_OK) return status;
  size_t n = batch->n_req;
  size_t blocks = n * (size_t)batch->stride;
  if (t->staged_pending) {
    KVS_CUDA_GOTO(cudaEventSynchronize(t->staged),
                  "cudaEventSynchronize before rewriting the batch staging", err, status, done);
    t->staged_pending = false;
  }
  memcpy(t->h_blocks, batch->block_table, blocks * sizeof *t->h_blocks);
  memcpy(t->h_positions, batch->positions, n * sizeof *t->h_positions);
  if (per_request) memcpy(t->h_slots, batch->slots, n * sizeof *t->h_slots);
  KVS_CUDA_GOTO(cudaMemcpyAsync(t->d_blocks, t->h_blocks, blocks * sizeof *t->h_blocks,
                                cudaMemcpyHostToDevice, t->stream),
                "cudaMemcpyAsync of the block tables", err, status, done);
  KVS_CUDA_GOTO(cudaMemcpyAsync(t->d_positions, t->h_positions, n * sizeof *t->h_positions,
                                cudaMemcpyHostToDevice, t->stream),
                "cudaMemcpyAsync of the positions", err, status, done);
  if (per_request) {
    KVS_CUDA_GOTO(cudaMemcpyAsync(t->d_slots, t->h_slots, n * sizeof *t->h_slots,
                                  cudaMemcpyHostToDevice, t->stream),
                  "cudaMemcpyAsync of the request slots", err, status, done);
  }
  KVS_CUDA_GOTO(cudaEventRecord(t->staged, t->stream), "cudaEventRecord after the batch upload",
                err, status, done);
  t->staged_pending = true;
  kvs_block_tables bt = {t->d_blocks, batch->stride, t->dims.page};
  status = kvs_device_tables_ring_ctx(t->tables, &bt, t->d_positions, n, t->d_own, t->d_prev,
                                      t->d_ring, t->stream, err);
  if (status != KVS_OK) goto done;
  if (t->csa_derivable || t->hca_derivable) {
    status = kvs_device_tables_batch_state_locs(
        t->tables, t->d_own, per_request ? t->d_slots : NULL, t->d_positions, n,
        t->csa_derivable ? t->d_csa : NULL, t->hca_derivable ? t->d_hca : NULL, t->stream, err);
    if (status != KVS_OK) goto done;
  }
  /* A kind the placement cannot derive reads -1 (all-ones bytes). */
  if (!t->csa_derivable) {
    KVS_CUDA_GOTO(cudaMemsetAsync(t->d_csa, 0xff, n * sizeof *t->d_csa, t->stream),
                  "cudaMemsetAsync of the ratio-4 ring locations", err, status, done);
  }
  if (!t->hca_derivable) {
    KVS_CUDA_GOTO(cudaMemsetAsync(t->d_hca, 0xff, n * sizeof *t->d_hca, t->stream),
                  "cudaMemsetAsync of the ratio-128 ring locations", err, status, done);
  }
  *out = r;
done:
  kvs_cuda_device_leave(&scope);
  return status;
}

static kvs_status cuda_result_to_host(void *impl, const kvs_ring_result *result, int64_t *own,
                                      int64_t *prev, int64_t *ring, int64_t *csa_loc,
                                      int64_t *hca_loc, kvs_error *err) {
  cuda_table *t = impl;
  size_t n = result->n_req;
  if (n == 0) return KVS_OK;
  kvs_cuda_device_scope scope;
  kvs_status status = enter(t, &scope, err);
  if (status != KVS_OK) return status;
  enum cudaMemcpyKind kind = result->on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
  KVS_CUDA_GOTO(cudaMemcpyAsync(own, result->own, n * sizeof *own, kind, t->stream),
                "cudaMemcpyAsync of the own slots", err, status, done);
  KVS_CUDA_GOTO(cudaMemcpyAsync(prev, result->prev, n * sizeof *prev, kind, t->stream),
                "cudaMemcpyAsync of the previous slots", err, status, done);
  KVS_CUDA_GOTO(
      cudaMemcpyAsync(ring, result->ring, n * result->page * sizeof *ring, kind, t->stream),
      "cudaMemcpyAsync of the ring slots", err, status, done);
  if (csa_loc != NULL) {
    KVS_CUDA_GOTO(cudaMemcpyAsync(csa_loc, result->csa_loc, n * sizeof *csa_loc, kind, t->stream),
                  "cudaMemcpyAsync of the ratio-4 ring locations", err, status, done);
  }
  if (hca_loc != NULL) {
    KVS_CUDA_GOTO(cudaMemcpyAsync(hca_loc, result->hca_loc, n * sizeof *hca_loc, kind, t->stream),
                  "cudaMemcpyAsync of the ratio-128 ring locations", err, status, done);
  }
  /* The destination may be pageable: only a finished stream has filled it. */
  KVS_CUDA_GOTO(cudaStreamSynchronize(t->stream), "cudaStreamSynchronize for the ring context", err,
                status, done);
done:
  kvs_cuda_device_leave(&scope);
  return status;
}

/* A check that found the digests differ: after the table's own work, in
 * its stream's order (the tables' kernels all run there), never a device
 * synchronisation that would wait on the engine's and NCCL's streams. */
static kvs_status cuda_download(void *impl, int64_t *mapping, size_t rows, kvs_error *err) {
  cuda_table *t = impl;
  return kvs_device_tables_read_mapping(t->tables, mapping, rows, t->stream, err);
}

static kvs_status cuda_faults(void *impl, kvs_device_faults *out, kvs_error *err) {
  cuda_table *t = impl;
  return kvs_device_tables_faults(t->tables, t->stream, out, err);
}

static kvs_status cuda_sync(void *impl, kvs_error *err) {
  cuda_table *t = impl;
  kvs_cuda_device_scope scope;
  kvs_status status = enter(t, &scope, err);
  if (status != KVS_OK) return status;
  status = kvs_cuda_status(cudaStreamSynchronize(t->stream), "cudaStreamSynchronize", err);
  if (status == KVS_OK && t->copied_pending) {
    status = kvs_cuda_status(cudaEventSynchronize(t->copied),
                             "cudaEventSynchronize after the row copies", err);
    t->copied_pending = status != KVS_OK;
  }
  kvs_cuda_device_leave(&scope);
  return status;
}

static void cuda_destroy(void *impl) {
  cuda_table *t = impl;
  if (t == NULL) return;
  kvs_cuda_device_scope scope;
  if (enter(t, &scope, NULL) == KVS_OK) {
    if (t->stream != NULL) (void)cudaStreamSynchronize(t->stream);
    kvs_cuda_step_destroy(t->step);
    if (t->staged != NULL) (void)cudaEventDestroy(t->staged);
    if (t->copied != NULL) (void)cudaEventDestroy(t->copied);
    (void)cudaFree(t->d_units);
    (void)cudaFree(t->d_digests);
    (void)cudaFreeHost(t->h_units);
    (void)cudaFreeHost(t->h_digests);
    (void)cudaFree(t->d_blocks);
    (void)cudaFree(t->d_positions);
    (void)cudaFree(t->d_own);
    (void)cudaFree(t->d_prev);
    (void)cudaFree(t->d_ring);
    (void)cudaFree(t->d_slots);
    (void)cudaFree(t->d_csa);
    (void)cudaFree(t->d_hca);
    (void)cudaFreeHost(t->h_blocks);
    (void)cudaFreeHost(t->h_positions);
    (void)cudaFreeHost(t->h_slots);
    if (t->own_stream && t->stream != NULL) (void)cudaStreamDestroy(t->stream);
    kvs_cuda_device_leave(&scope);
  }
  kvs_device_tables_destroy(t->tables);
  free(t);
}

static kvs_status cuda_step_op(void *impl, const kvs_table_step_args *args, kvs_ring_result *out,
                               void **event, kvs_table_step_timing *timing, kvs_error *err) {
  cuda_table *t = impl;
  if (t->step == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "this device table was opened without step options");
  }
  return kvs_cuda_step_run(t->step, args, out, event, timing, err);
}

static kvs_status cuda_digest(void *impl, uint64_t *out, kvs_error *err) {
  cuda_table *t = impl;
  if (t->step == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "this device table was opened without step options");
  }
  return kvs_cuda_step_digest(t->step, out, err);
}

static kvs_status no_step(kvs_error *err) {
  return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                       "this device table was opened without step options");
}

static kvs_status cuda_set_results(void *impl, const kvs_table_results *into, bool explicit_release,
                                   kvs_error *err) {
  cuda_table *t = impl;
  if (t->step == NULL) return no_step(err);
  return kvs_cuda_step_set_results(t->step, into, explicit_release, err);
}

static kvs_status cuda_release(void *impl, uint64_t step, void *stream, kvs_error *err) {
  cuda_table *t = impl;
  if (t->step == NULL) return no_step(err);
  if (stream == KVS_CUDA_LEGACY_STREAM) stream = (void *)cudaStreamLegacy;
  return kvs_cuda_step_release(t->step, step, (cudaStream_t)stream, err);
}

static kvs_status cuda_check_stream(void *impl, void *stream, kvs_error *err) {
  cuda_table *t = impl;
  if (stream == KVS_CUDA_LEGACY_STREAM) stream = (void *)cudaStreamLegacy;
  return kvs_cuda_stream_not_capturing(stream != NULL ? (cudaStream_t)stream : t->engine_stream,
                                       stream != NULL ? "the stream given" : "the engine's stream",
                                       err);
}

/* The one cudaMalloc: tiers at their layout offsets, the mapping in it. */
static kvs_status cuda_memory(void *impl, void **base, int64_t **mapping, kvs_error *err) {
  (void)err;
  cuda_table *t = impl;
  *base = kvs_device_tables_base(t->tables);
  *mapping = kvs_device_tables_mapping(t->tables);
  return KVS_OK;
}

/* ---- the host tier ---- */

static cudaStream_t copy_stream(const cuda_table *t) {
  return t->engine_stream != NULL ? t->engine_stream : t->stream;
}

/* Pinned, so the copies are asynchronous DMA on the stream; one chunk of
 * the tier a call (shard/table_rows.c), on the calling thread, whose
 * memory binding (bind_numa) the driver's pages follow. The pages are the
 * driver's, not counted against RLIMIT_MEMLOCK as mlock's are, so the
 * limit refuses nothing up front; a failure names it, since a container
 * that caps locked memory often caps pinned memory too. */
static kvs_status cuda_host_alloc(void *impl, uint64_t bytes, void **out, kvs_error *err) {
  cuda_table *t = impl;
  kvs_cuda_device_scope scope;
  kvs_status status = enter(t, &scope, err);
  if (status != KVS_OK) return status;
  char limit[48] = "unlimited";
  struct rlimit memlock;
  if (getrlimit(RLIMIT_MEMLOCK, &memlock) == 0 && memlock.rlim_cur != RLIM_INFINITY) {
    snprintf(limit, sizeof limit, "%llu bytes", (unsigned long long)memlock.rlim_cur);
  }
  char what[160];
  snprintf(what, sizeof what, "cudaMallocHost of %llu bytes (RLIMIT_MEMLOCK, ulimit -l: %s)",
           (unsigned long long)bytes, limit);
  status = kvs_cuda_status(cudaMallocHost(out, (size_t)bytes), what, err);
  kvs_cuda_device_leave(&scope);
  return status;
}

static void cuda_host_free(void *impl, void *memory, uint64_t bytes) {
  (void)bytes;
  cuda_table *t = impl;
  kvs_cuda_device_scope scope;
  if (memory == NULL || enter(t, &scope, NULL) != KVS_OK) return;
  (void)cudaStreamSynchronize(copy_stream(t)); /* copies still reading or writing it */
  (void)cudaFreeHost(memory);
  kvs_cuda_device_leave(&scope);
}

static const char *row_op_name(kvs_row_op op) {
  switch (op) {
    case KVS_ROW_TO_HOST:
      return "a spill to the host tier";
    case KVS_ROW_FROM_HOST:
      return "a fetch from the host tier";
    case KVS_ROW_WITHIN:
      return "a tail state's restore";
    default:
      return "a ring's clear";
  }
}

/* One strided operation: a 2D copy or memset (a run per layer) when both
 * pitches fit the device's, else one call per run (a production carve's
 * layer stride passes 2^31 - 1 bytes: DSV4-Flash's ratio-4 tier at tp 1
 * with a 110 GiB carve strides 2,423,522,304 B). */
static kvs_status cuda_row_op(const cuda_table *t, const kvs_row_copy *c, cudaStream_t st,
                              kvs_error *err) {
  static const enum cudaMemcpyKind kinds[] = {cudaMemcpyDeviceToHost, cudaMemcpyHostToDevice,
                                              cudaMemcpyDeviceToDevice, cudaMemcpyDeviceToDevice};
  char what[96];
  bool runs = c->dst_pitch > t->max_pitch || (c->op != KVS_ROW_ZERO && c->src_pitch > t->max_pitch);
  snprintf(what, sizeof what, "%s of %s", runs ? "a run" : "a 2D operation", row_op_name(c->op));
  if (!runs) {
    cudaError_t e =
        c->op == KVS_ROW_ZERO
            ? cudaMemset2DAsync(c->dst, (size_t)c->dst_pitch, 0, (size_t)c->width,
                                (size_t)c->height, st)
            : cudaMemcpy2DAsync(c->dst, (size_t)c->dst_pitch, c->src, (size_t)c->src_pitch,
                                (size_t)c->width, (size_t)c->height, kinds[c->op], st);
    return kvs_cuda_status(e, what, err);
  }
  kvs_status status = KVS_OK;
  for (uint64_t h = 0; h < c->height && status == KVS_OK; h++) {
    char *dst = (char *)c->dst + h * c->dst_pitch;
    cudaError_t e = c->op == KVS_ROW_ZERO
                        ? cudaMemsetAsync(dst, 0, (size_t)c->width, st)
                        : cudaMemcpyAsync(dst, (const char *)c->src + h * c->src_pitch,
                                          (size_t)c->width, kinds[c->op], st);
    status = kvs_cuda_status(e, what, err);
  }
  return status;
}

/* One 2D operation per span (a run per layer): three per page moved, one
 * per ring span for a clear or a restore. */
static kvs_status cuda_copy_rows(void *impl, const kvs_row_copy *copies, size_t n, kvs_error *err) {
  cuda_table *t = impl;
  kvs_cuda_device_scope scope;
  kvs_status status = enter(t, &scope, err);
  if (status != KVS_OK) return status;
  cudaStream_t st = copy_stream(t);
  for (size_t i = 0; i < n && status == KVS_OK; i++) status = cuda_row_op(t, &copies[i], st, err);
  if (n > 0) {
    kvs_status recorded = kvs_cuda_status(cudaEventRecord(t->copied, st),
                                          "cudaEventRecord after the row copies", err);
    if (status == KVS_OK) status = recorded;
    t->copied_pending = recorded == KVS_OK;
  }
  kvs_cuda_device_leave(&scope);
  return status;
}

/* Batches of KVS_ROWS_DIGEST_BATCH units through the pinned staging, each
 * on the engine's stream (after its writes of the rows) and waited for
 * before the staging is reused: a transfer's call, not the step's. */
static kvs_status cuda_rows_digest(void *impl, const kvs_rows_unit *units, size_t n, uint64_t *out,
                                   kvs_error *err) {
  cuda_table *t = impl;
  kvs_cuda_device_scope scope;
  kvs_status status = enter(t, &scope, err);
  if (status != KVS_OK) return status;
  cudaStream_t st = copy_stream(t);
  if (st != t->stream) status = kvs_cuda_stream_not_capturing(st, "the engine's stream", err);
  for (size_t first = 0; first < n && status == KVS_OK; first += KVS_ROWS_DIGEST_BATCH) {
    size_t k = n - first < KVS_ROWS_DIGEST_BATCH ? n - first : KVS_ROWS_DIGEST_BATCH;
    memcpy(t->h_units, units + first, k * sizeof *units);
    status = kvs_cuda_status(
        cudaMemcpyAsync(t->d_units, t->h_units, k * sizeof *units, cudaMemcpyHostToDevice, st),
        "cudaMemcpyAsync of the rows units", err);
    if (status == KVS_OK) {
      status = kvs_device_tables_rows_digest(t->tables, t->d_units, k, t->d_digests, st, err);
    }
    if (status == KVS_OK) {
      status = kvs_cuda_status(
          cudaMemcpyAsync(t->h_digests, t->d_digests, k * sizeof *out, cudaMemcpyDeviceToHost, st),
          "cudaMemcpyAsync of the rows digests", err);
    }
    /* Waited for even after a failure: the staging may still be read. */
    kvs_status waited =
        kvs_cuda_status(cudaStreamSynchronize(st), "cudaStreamSynchronize of the digests", err);
    if (status == KVS_OK) status = waited;
    if (status == KVS_OK) memcpy(out + first, t->h_digests, k * sizeof *out);
  }
  kvs_cuda_device_leave(&scope);
  return status;
}

static const kvs_table_ops cuda_ops = {
    .kind = KVS_TABLE_CUDA,
    .apply = cuda_apply,
    .ring_ctx = cuda_ring_ctx,
    .result_to_host = cuda_result_to_host,
    .download = cuda_download,
    .faults = cuda_faults,
    .sync = cuda_sync,
    .destroy = cuda_destroy,
    .step = cuda_step_op,
    .digest = cuda_digest,
    .memory = cuda_memory,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy_rows = cuda_copy_rows,
    .set_results = cuda_set_results,
    .release = cuda_release,
    .check_stream = cuda_check_stream,
    .rows_digest = cuda_rows_digest,
};

/* With the device current: the node's step, over the table's own
 * stream. */
static kvs_status open_step(cuda_table *t, const kvs_cuda_table_options *options, size_t rows,
                            uint64_t *bytes, kvs_error *err) {
  kvs_cuda_table_options o = *options;
  /* The runtime's own name for the legacy default stream, whatever value
   * the library's constant for it has. */
  if (o.engine_stream == KVS_CUDA_LEGACY_STREAM) o.engine_stream = (void *)cudaStreamLegacy;
  t->engine_stream = (cudaStream_t)o.engine_stream;
  cuda_step_setup setup = {t->tables,    t->device,        t->stream,       o, rows, t->dims,
                           t->placement, t->csa_derivable, t->hca_derivable};
  return kvs_cuda_step_create(&setup, &t->step, bytes, err);
}

kvs_status kvs_cuda_table_open(int device, const kvs_device_layout *layout,
                               const kvs_table_limits *limits, void *stream,
                               const kvs_cuda_table_options *options, const kvs_table_ops **ops,
                               void **impl, uint64_t *bytes, kvs_error *err) {
  if (layout == NULL || limits == NULL || ops == NULL || impl == NULL || bytes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "layout, limits and the three outputs are required");
  }
  if (device < 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "CUDA device %d: name a device", device);
  }
  kvs_table_dims dims = kvs_device_layout_dims(layout);
  kvs_state_placement placement = kvs_state_placement_of(&layout->sizes);
  kvs_status status;
  if ((status = kvs_table_dims_check(&dims, err)) ||
      (status = kvs_state_placement_check(&placement, err))) {
    return status;
  }
  size_t req = limits->max_requests > 0 ? limits->max_requests : 1;
  uint64_t blocks = limits->max_blocks > 0 ? limits->max_blocks : 1;
  uint64_t block_rows = 0, ring_rows = 0;
  if (__builtin_mul_overflow((uint64_t)req, blocks, &block_rows) ||
      __builtin_mul_overflow((uint64_t)req, dims.page, &ring_rows) ||
      block_rows > SIZE_MAX / sizeof(int64_t) || ring_rows > SIZE_MAX / sizeof(int64_t)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "batch buffers for %zu requests of %llu blocks",
                         req, (unsigned long long)blocks);
  }
  cuda_table *t = calloc(1, sizeof *t);
  if (t == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a device table");
  t->device = device;
  t->dims = dims;
  t->placement = placement;
  t->csa_derivable =
      kvs_state_rings_csa_per_request(placement.rings) || placement.page % KVS_RING_SLOTS_CSA == 0;
  t->hca_derivable =
      kvs_state_rings_hca_per_request(placement.rings) || placement.page % KVS_RING_SLOTS_HCA == 0;
  t->journal_capacity =
      layout->options.journal_capacity > 0 ? (size_t)layout->options.journal_capacity : 1;
  if ((status = kvs_device_tables_create(device, layout, &t->tables, err)) != KVS_OK) {
    free(t);
    return status;
  }
  kvs_cuda_device_scope scope;
  if ((status = enter(t, &scope, err)) != KVS_OK) {
    cuda_destroy(t);
    return status;
  }
  char what[128];
  if (stream != NULL && options == NULL) {
    t->stream = (cudaStream_t)stream;
  } else {
    KVS_CUDA_GOTO(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags for the table", err, status, fail);
    t->own_stream = true;
  }
  KVS_CUDA_GOTO(cudaEventCreateWithFlags(&t->staged, cudaEventDisableTiming),
                "cudaEventCreateWithFlags for the batch staging", err, status, fail);
  KVS_CUDA_GOTO(cudaEventCreateWithFlags(&t->copied, cudaEventDisableTiming),
                "cudaEventCreateWithFlags for the row copies", err, status, fail);
  int max_pitch = 0;
  KVS_CUDA_GOTO(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, device),
                "cudaDeviceGetAttribute of the maximum pitch", err, status, fail);
  t->max_pitch = max_pitch > 0 ? (uint64_t)max_pitch : 0;
  snprintf(what, sizeof what, "cudaMalloc of the batch buffers (%zu requests) on device %d", req,
           device);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->d_blocks, (size_t)block_rows * sizeof(int32_t)), what, err,
                status, fail);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->d_positions, req * sizeof(int64_t)), what, err, status,
                fail);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->d_own, req * sizeof(int64_t)), what, err, status, fail);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->d_prev, req * sizeof(int64_t)), what, err, status, fail);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->d_ring, (size_t)ring_rows * sizeof(int64_t)), what, err,
                status, fail);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->d_slots, req * sizeof(int64_t)), what, err, status, fail);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->d_csa, req * sizeof(int64_t)), what, err, status, fail);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->d_hca, req * sizeof(int64_t)), what, err, status, fail);
  KVS_CUDA_GOTO(cudaMallocHost((void **)&t->h_blocks, (size_t)block_rows * sizeof(int32_t)),
                "cudaMallocHost of the block-table staging", err, status, fail);
  KVS_CUDA_GOTO(cudaMallocHost((void **)&t->h_positions, req * sizeof(int64_t)),
                "cudaMallocHost of the position staging", err, status, fail);
  KVS_CUDA_GOTO(cudaMallocHost((void **)&t->h_slots, req * sizeof(int64_t)),
                "cudaMallocHost of the request-slot staging", err, status, fail);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->d_units, KVS_ROWS_DIGEST_BATCH * sizeof *t->d_units),
                "cudaMalloc of the rows digest units", err, status, fail);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->d_digests, KVS_ROWS_DIGEST_BATCH * sizeof *t->d_digests),
                "cudaMalloc of the rows digests", err, status, fail);
  KVS_CUDA_GOTO(cudaMallocHost((void **)&t->h_units, KVS_ROWS_DIGEST_BATCH * sizeof *t->h_units),
                "cudaMallocHost of the rows digest staging", err, status, fail);
  KVS_CUDA_GOTO(
      cudaMallocHost((void **)&t->h_digests, KVS_ROWS_DIGEST_BATCH * sizeof *t->h_digests),
      "cudaMallocHost of the rows digest staging", err, status, fail);
  uint64_t step_bytes = 0;
  if (options != NULL && (status = open_step(t, options, req, &step_bytes, err)) != KVS_OK) {
    goto fail;
  }
  kvs_cuda_device_leave(&scope);
  *bytes = layout->total_bytes + step_bytes +
           (block_rows * sizeof(int32_t) + (6 * req + ring_rows) * sizeof(int64_t)) +
           KVS_ROWS_DIGEST_BATCH * (sizeof(kvs_rows_unit) + sizeof(uint64_t));
  *ops = &cuda_ops;
  *impl = t;
  return KVS_OK;
fail:
  kvs_cuda_device_leave(&scope);
  cuda_destroy(t);
  return status;
}

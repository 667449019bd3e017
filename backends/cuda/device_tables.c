#include "backends/cuda/device_tables.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_kernels.h"

struct kvs_device_tables {
  int device;
  kvs_device_layout layout;
  kvs_table_dims dims;
  unsigned char *base; /* the one allocation */
  int64_t *map;
  kvs_device_faults *faults;
  kvs_journal_entry *staging; /* journal_capacity entries, in the control area */
  /* Pinned host memory of journal_capacity entries: a host-journal apply
   * copies the caller's entries here before it returns, so the caller may
   * reuse them at once (the shard's next drain rewrites its pinned message
   * buffer), and the upload from here is truly asynchronous. */
  kvs_journal_entry *host_staging;
  /* Recorded after each host-journal apply: the next one waits (on the
   * host) for it before it rewrites either staging area, so two applies on
   * different streams never share them while a copy or a kernel still
   * reads them. */
  cudaEvent_t journal_done;
  /* A check's download (kvs_device_tables_read_mapping): two pinned halves
   * of KVS_READ_HALF_BYTES, each with the event after its last copy, so the
   * host copies one half out while the other fills, and waits for those
   * events, never for the device. */
  unsigned char *read_buffer;
  cudaEvent_t read_done[2];
  uint32_t max_blocks; /* grid cap of the grid-stride kernels */
};

/* plan/device_layout.h's half, which the node's overhead counts. */
#define KVS_READ_HALF_BYTES ((size_t)KVS_DEVICE_READ_HALF_BYTES)

static const kvs_device_faults kFaultsInit = {KVS_BATCH_FAULT_INIT, KVS_BATCH_FAULT_INIT,
                                              KVS_BATCH_FAULT_INIT, KVS_BATCH_FAULT_INIT};

/* Makes the tables' device current for a call (backends/cuda/cuda_device.h: a
 * thread that had no device is left with none). */
static kvs_status enter(const struct kvs_device_tables *t, kvs_cuda_device_scope *scope,
                        kvs_error *err) {
  return kvs_cuda_device_enter(t->device, scope, err);
}

/* The apply marks each page with 2^62 + the index of its last entry
 * (device_kernels.cuh), above every slot: indices stay below 2^62. */
#define KVS_APPLY_MAX_ENTRIES ((uint64_t)1 << 62)

/* A layout that was not built by kvs_device_layout_build could carve
 * outside its allocation; these are the facts the kernels rely on. */
static kvs_status check_layout(const kvs_device_layout *l, kvs_error *err) {
  kvs_table_dims dims = kvs_device_layout_dims(l);
  kvs_status status = kvs_table_dims_check(&dims, err);
  if (status != KVS_OK) return status;
  /* An arithmetic carve (alignment below 256) is not a table's. */
  if ((status = kvs_device_layout_check_tables(l, err)) != KVS_OK) return status;
  if (dims.n_win_slots > KVS_APPLY_MAX_ENTRIES) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%llu window slots: the journal apply needs every slot below 2^62",
                         (unsigned long long)dims.n_win_slots);
  }
  const kvs_device_span *map = &l->spans[0];
  uint64_t journal_end =
      l->journal_offset + l->options.journal_capacity * sizeof(kvs_journal_entry);
  if (map->tier != KVS_DEVICE_TIER_MAPPING || map->rows != dims.full_token ||
      map->scratch_rows != 1 || map->row_bytes != sizeof(int64_t) || map->offset % 16 != 0 ||
      map->offset < journal_end || l->faults_offset % 16 != 0 ||
      l->faults_offset + sizeof(kvs_device_faults) > l->journal_offset ||
      l->journal_offset % 16 != 0 || map->offset + map->bytes > l->total_bytes ||
      l->tiers_end > l->total_bytes) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "layout is inconsistent (mapping at %llu of %llu bytes, control ends "
                         "at %llu); build it with kvs_device_layout_build",
                         (unsigned long long)map->offset, (unsigned long long)l->total_bytes,
                         (unsigned long long)journal_end);
  }
  return KVS_OK;
}

kvs_status kvs_device_tables_create(int device, const kvs_device_layout *layout,
                                    kvs_device_tables_t *out, kvs_error *err) {
  if (layout == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "layout or output handle is NULL");
  }
  kvs_status status = check_layout(layout, err);
  if (status != KVS_OK) return status;
  struct kvs_device_tables *t = calloc(1, sizeof *t);
  int64_t *dummy = NULL;
  if (t == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for device tables");
  t->device = device;
  t->layout = *layout;
  t->dims = kvs_device_layout_dims(layout);
  const uint64_t page = t->dims.page;
  dummy = malloc(page * sizeof *dummy);
  if (dummy == NULL) {
    free(t);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the dummy page's rows");
  }
  kvs_cuda_device_scope scope;
  char what[160];
  if ((status = enter(t, &scope, err))) {
    free(dummy);
    free(t);
    return status;
  }
  snprintf(what, sizeof what, "cudaMalloc of %llu bytes on device %d",
           (unsigned long long)layout->total_bytes, device);
  KVS_CUDA_GOTO(cudaMalloc((void **)&t->base, layout->total_bytes), what, err, status, fail);
  /* Every kernel now, not at the first step: a lazy load then may wait on
   * the whole context while the engine's NCCL kernels wait on a peer. */
  const char *kernel = NULL;
  cudaError_t loaded = kvs_kernels_load(&kernel);
  snprintf(what, sizeof what, "cudaFuncGetAttributes of kernel %s (loading the kernels at create)",
           kernel != NULL ? kernel : "?");
  KVS_CUDA_GOTO(loaded, what, err, status, fail);
  t->map = (int64_t *)(t->base + layout->spans[0].offset);
  t->faults = (kvs_device_faults *)(t->base + layout->faults_offset);
  t->staging = (kvs_journal_entry *)(t->base + layout->journal_offset);
  snprintf(what, sizeof what, "cudaMallocHost of %llu bytes of journal staging",
           (unsigned long long)(layout->options.journal_capacity * sizeof(kvs_journal_entry)));
  KVS_CUDA_GOTO(cudaMallocHost((void **)&t->host_staging,
                               layout->options.journal_capacity * sizeof(kvs_journal_entry)),
                what, err, status, fail);

  /* Zeroed tiers: a ring or KV row read before its first write is
   * defined. All-ones bytes are int64 -1: every table row starts unbound. */
  KVS_CUDA_GOTO(cudaMemset(t->base, 0, layout->total_bytes), "cudaMemset of the tiers", err, status,
                fail);
  KVS_CUDA_GOTO(cudaMemset(t->map, 0xff, (t->dims.full_token + 1) * sizeof(int64_t)),
                "cudaMemset of the table", err, status, fail);
  /* The dummy full page is bound to the dummy window page for good, as in
   * kvs_window_pool_create. */
  for (uint64_t offset = 0; offset < page; offset++) {
    dummy[offset] = (int64_t)(t->dims.n_win_slots - page + offset);
  }
  /* Pageable copies land later on the legacy stream; the synchronisation
   * at the end orders them before anything the caller queues. */
  KVS_CUDA_GOTO(cudaMemcpy(t->map + (t->dims.full_token - page), dummy, page * sizeof *dummy,
                           cudaMemcpyHostToDevice),
                "cudaMemcpy of the dummy page's rows", err, status, fail);
  KVS_CUDA_GOTO(cudaMemcpy(t->faults, &kFaultsInit, sizeof kFaultsInit, cudaMemcpyHostToDevice),
                "cudaMemcpy of the fault records", err, status, fail);
  KVS_CUDA_GOTO(cudaEventCreateWithFlags(&t->journal_done, cudaEventDisableTiming),
                "cudaEventCreateWithFlags", err, status, fail);
  KVS_CUDA_GOTO(cudaMallocHost((void **)&t->read_buffer, 2 * KVS_READ_HALF_BYTES),
                "cudaMallocHost of the table's download buffer", err, status, fail);
  for (int h = 0; h < 2; h++) {
    KVS_CUDA_GOTO(cudaEventCreateWithFlags(&t->read_done[h], cudaEventDisableTiming),
                  "cudaEventCreateWithFlags for the table's download", err, status, fail);
  }
  int sms = 0;
  KVS_CUDA_GOTO(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                "cudaDeviceGetAttribute(multiprocessor count)", err, status, fail);
  /* Four waves of 256-thread blocks: a million-item batch gets one item
   * per thread, whose loads the scheduler overlaps across resident blocks
   * better than a grid-stride loop overlaps them within a thread. */
  t->max_blocks = (uint32_t)(sms > 0 ? sms : 1) * 32u;
  KVS_CUDA_GOTO(cudaDeviceSynchronize(), "cudaDeviceSynchronize after initialising the tables", err,
                status, fail);
  kvs_cuda_device_leave(&scope);
  free(dummy);
  *out = t;
  return KVS_OK;

fail:
  for (int h = 0; h < 2; h++) {
    if (t->read_done[h] != NULL) (void)cudaEventDestroy(t->read_done[h]);
  }
  if (t->read_buffer != NULL) (void)cudaFreeHost(t->read_buffer);
  if (t->journal_done != NULL) (void)cudaEventDestroy(t->journal_done);
  if (t->host_staging != NULL) (void)cudaFreeHost(t->host_staging);
  if (t->base != NULL) (void)cudaFree(t->base);
  (void)cudaGetLastError();
  kvs_cuda_device_leave(&scope);
  free(dummy);
  free(t);
  return status;
}

void kvs_device_tables_destroy(kvs_device_tables_t tables) {
  if (tables == NULL) return;
  kvs_cuda_device_scope scope;
  if (enter(tables, &scope, NULL) == KVS_OK) {
    (void)cudaEventDestroy(tables->journal_done);
    (void)cudaEventDestroy(tables->read_done[0]);
    (void)cudaEventDestroy(tables->read_done[1]);
    (void)cudaFreeHost(tables->read_buffer);
    (void)cudaFreeHost(tables->host_staging);
    (void)cudaFree(tables->base);
    kvs_cuda_device_leave(&scope);
  }
  free(tables);
}

int kvs_device_tables_device(const struct kvs_device_tables *tables) { return tables->device; }
const kvs_device_layout *kvs_device_tables_layout(const struct kvs_device_tables *tables) {
  return &tables->layout;
}
kvs_table_dims kvs_device_tables_dims(const struct kvs_device_tables *tables) {
  return tables->dims;
}
void *kvs_device_tables_base(const struct kvs_device_tables *tables) { return tables->base; }
int64_t *kvs_device_tables_mapping(const struct kvs_device_tables *tables) { return tables->map; }

kvs_status kvs_device_tables_region(const struct kvs_device_tables *tables, kvs_device_tier tier,
                                    size_t layer, void **d_ptr, kvs_device_region *region,
                                    kvs_error *err) {
  if (tables == NULL || d_ptr == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables or output pointer is NULL");
  }
  kvs_device_region r;
  kvs_status status = kvs_device_layout_region(&tables->layout, tier, layer, &r, err);
  if (status != KVS_OK) return status;
  *d_ptr = tables->base + r.offset;
  if (region != NULL) *region = r;
  return KVS_OK;
}

static kvs_status check_rows(const struct kvs_device_tables *t, const int64_t *mapping, size_t rows,
                             kvs_error *err) {
  if (t == NULL || mapping == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables or host mapping is NULL");
  }
  if ((uint64_t)rows != t->dims.full_token + 1) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a mapping of %zu rows for a table of %llu (full_token + the sentinel)",
                         rows, (unsigned long long)(t->dims.full_token + 1));
  }
  return KVS_OK;
}

kvs_status kvs_device_tables_upload_mapping(kvs_device_tables_t tables, const int64_t *mapping,
                                            size_t rows, kvs_error *err) {
  kvs_status status = check_rows(tables, mapping, rows, err);
  if (status != KVS_OK) return status;
  if (mapping[rows - 1] != -1) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "the mapping's sentinel row holds %lld, not -1; a gather at -1 would "
                         "read a slot",
                         (long long)mapping[rows - 1]);
  }
  kvs_cuda_device_scope scope;
  if ((status = enter(tables, &scope, err))) return status;
  /* After every kernel queued on the table, and landed before return. */
  status = kvs_cuda_upload(tables->map, mapping, rows * sizeof *mapping,
                           "cudaMemcpy of the mapping to the device", err);
  kvs_cuda_device_leave(&scope);
  return status;
}

/* Chunk c of the table into half c % 2 of the download buffer, on stream;
 * the half's event after it. */
static kvs_status read_chunk(const struct kvs_device_tables *t, size_t c, size_t rows,
                             cudaStream_t stream, kvs_error *err) {
  const size_t per = KVS_READ_HALF_BYTES / sizeof(int64_t);
  size_t first = c * per, n = rows - first < per ? rows - first : per;
  kvs_status status = kvs_cuda_status(
      cudaMemcpyAsync(t->read_buffer + (c % 2) * KVS_READ_HALF_BYTES, t->map + first,
                      n * sizeof(int64_t), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync of the mapping to the download buffer", err);
  if (status != KVS_OK) return status;
  return kvs_cuda_status(cudaEventRecord(t->read_done[c % 2], stream),
                         "cudaEventRecord after a download chunk", err);
}

kvs_status kvs_device_tables_read_mapping(const struct kvs_device_tables *tables, int64_t *mapping,
                                          size_t rows, cudaStream_t stream, kvs_error *err) {
  kvs_status status = check_rows(tables, mapping, rows, err);
  if (status != KVS_OK) return status;
  kvs_cuda_device_scope scope;
  if ((status = enter(tables, &scope, err))) return status;
  const size_t per = KVS_READ_HALF_BYTES / sizeof(int64_t);
  const size_t chunks = (rows + per - 1) / per;
  /* Chunk c + 1 is queued before the host waits for chunk c and copies it
   * out; half (c + 1) % 2 held chunk c - 1, copied out the round before. */
  if (chunks > 0) status = read_chunk(tables, 0, rows, stream, err);
  for (size_t c = 0; c < chunks && status == KVS_OK; c++) {
    if (c + 1 < chunks && (status = read_chunk(tables, c + 1, rows, stream, err))) break;
    status = kvs_cuda_status(cudaEventSynchronize(tables->read_done[c % 2]),
                             "cudaEventSynchronize on a download chunk", err);
    if (status != KVS_OK) break;
    size_t n = rows - c * per < per ? rows - c * per : per;
    memcpy(mapping + c * per, tables->read_buffer + (c % 2) * KVS_READ_HALF_BYTES,
           n * sizeof(int64_t));
  }
  if (status != KVS_OK) {
    /* Copies still queued would land in the buffer the next call fills. */
    (void)cudaEventSynchronize(tables->read_done[0]);
    (void)cudaEventSynchronize(tables->read_done[1]);
  }
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_device_tables_download_mapping(const struct kvs_device_tables *tables,
                                              int64_t *mapping, size_t rows, kvs_error *err) {
  kvs_status status = check_rows(tables, mapping, rows, err);
  if (status != KVS_OK) return status;
  kvs_cuda_device_scope scope;
  if ((status = enter(tables, &scope, err))) return status;
  status = kvs_cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize before a download", err);
  kvs_cuda_device_leave(&scope);
  if (status != KVS_OK) return status;
  return kvs_device_tables_read_mapping(tables, mapping, rows, cudaStreamLegacy, err);
}

/* Launch results, named for the error message. */
static kvs_status launched(cudaError_t code, const char *kernel, size_t n, kvs_error *err) {
  if (code == cudaSuccess) return KVS_OK;
  char what[96];
  snprintf(what, sizeof what, "launch of %s over %zu items", kernel, n);
  return kvs_cuda_status(code, what, err);
}

kvs_status kvs_device_tables_apply_journal(kvs_device_tables_t tables,
                                           const kvs_journal_entry *entries, size_t n,
                                           cudaStream_t stream, kvs_error *err) {
  if (tables == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables are NULL");
  if (n == 0) return KVS_OK;
  uint64_t capacity = tables->layout.options.journal_capacity;
  if ((uint64_t)n > capacity) {
    return kvs_error_set(err, KVS_ERR_JOURNAL_FULL,
                         "%zu journal entries exceed the device staging area of %llu entries "
                         "(layout journal_capacity); apply them in parts",
                         n, (unsigned long long)capacity);
  }
  kvs_status status = kvs_table_check_journal(&tables->dims, entries, n, err);
  if (status != KVS_OK) return status;
  kvs_cuda_device_scope scope;
  if ((status = enter(tables, &scope, err))) return status;
  /* The previous host apply's copy and kernels are done with both staging
   * areas (in a stepped loop, long since). */
  KVS_CUDA_GOTO(cudaEventSynchronize(tables->journal_done),
                "cudaEventSynchronize on the previous journal apply", err, status, done);
  memcpy(tables->host_staging, entries, n * sizeof *entries);
  KVS_CUDA_GOTO(cudaMemcpyAsync(tables->staging, tables->host_staging, n * sizeof *entries,
                                cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync of the journal entries", err, status, done);
  status =
      launched(kvs_launch_apply_journal(tables->map, tables->dims, tables->staging, n, NULL,
                                        &tables->faults->apply_journal, tables->max_blocks, stream),
               "apply_journal", n, err);
  if (status != KVS_OK) goto done;
  KVS_CUDA_GOTO(cudaEventRecord(tables->journal_done, stream), "cudaEventRecord", err, status,
                done);
done:
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_device_tables_apply_journal_device(kvs_device_tables_t tables,
                                                  const kvs_journal_entry *d_entries, size_t n,
                                                  cudaStream_t stream, kvs_error *err) {
  return kvs_device_tables_apply_counted(tables, d_entries, n, NULL, stream, err);
}

kvs_status kvs_device_tables_apply_counted(kvs_device_tables_t tables,
                                           const kvs_journal_entry *d_entries, size_t capacity,
                                           const uint32_t *d_count, cudaStream_t stream,
                                           kvs_error *err) {
  if (tables == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables are NULL");
  if (capacity == 0) return KVS_OK;
  if (d_entries == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%zu journal entries at NULL", capacity);
  }
  if ((uint64_t)capacity > KVS_APPLY_MAX_ENTRIES) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%zu journal entries exceed one apply's %llu", capacity,
                         (unsigned long long)KVS_APPLY_MAX_ENTRIES);
  }
  kvs_cuda_device_scope scope;
  kvs_status status = enter(tables, &scope, err);
  if (status != KVS_OK) return status;
  status =
      launched(kvs_launch_apply_journal(tables->map, tables->dims, d_entries, capacity, d_count,
                                        &tables->faults->apply_journal, tables->max_blocks, stream),
               "apply_journal", capacity, err);
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_device_tables_digest(kvs_device_tables_t tables, unsigned long long *d_out,
                                    cudaStream_t stream, kvs_error *err) {
  if (tables == NULL || d_out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables or the digest word is NULL");
  }
  kvs_cuda_device_scope scope;
  kvs_status status = enter(tables, &scope, err);
  if (status != KVS_OK) return status;
  status = kvs_cuda_status(cudaMemsetAsync(d_out, 0, sizeof *d_out, stream),
                           "cudaMemsetAsync of the digest word", err);
  if (status == KVS_OK) {
    status = launched(
        kvs_launch_table_digest(tables->map, tables->dims, d_out, tables->max_blocks, stream),
        "table_digest", (size_t)(tables->dims.full_token / tables->dims.page), err);
  }
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_device_tables_rows_digest(kvs_device_tables_t tables, const kvs_rows_unit *d_units,
                                         size_t n, uint64_t *d_out, cudaStream_t stream,
                                         kvs_error *err) {
  if (tables == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables are NULL");
  if (n == 0) return KVS_OK;
  if (d_units == NULL || d_out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "rows digest of %zu units: %s is NULL", n,
                         d_units == NULL ? "the units" : "the digests");
  }
  kvs_cuda_device_scope scope;
  kvs_status status = enter(tables, &scope, err);
  if (status != KVS_OK) return status;
  status = launched(kvs_launch_rows_digest(d_units, n, d_out, tables->max_blocks, stream),
                    "rows_digest", n, err);
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_device_tables_translate(kvs_device_tables_t tables, const int64_t *d_locs, size_t n,
                                       int64_t *d_out, cudaStream_t stream, kvs_error *err) {
  if (tables == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables are NULL");
  if (n == 0) return KVS_OK;
  if (d_locs == NULL || d_out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "translate of %zu locs: %s is NULL", n,
                         d_locs == NULL ? "the locs array" : "the output");
  }
  kvs_cuda_device_scope scope;
  kvs_status status = enter(tables, &scope, err);
  if (status != KVS_OK) return status;
  status = launched(kvs_launch_translate(tables->map, tables->dims, d_locs, n, d_out,
                                         &tables->faults->translate, tables->max_blocks, stream),
                    "translate", n, err);
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_device_tables_state_locs(kvs_device_tables_t tables, const int64_t *d_slots,
                                        size_t n, int64_t *d_out_csa, int64_t *d_out_hca,
                                        cudaStream_t stream, kvs_error *err) {
  if (tables == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables are NULL");
  if (d_out_csa == NULL && d_out_hca == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "state locs need an output: out_csa, out_hca or both");
  }
  uint64_t page = tables->dims.page;
  if ((d_out_csa != NULL && page % KVS_RING_SLOTS_CSA != 0) ||
      (d_out_hca != NULL && page % KVS_RING_SLOTS_HCA != 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "ring_size %u must divide P=%llu, or two pages share a ring block",
                         d_out_csa != NULL && page % KVS_RING_SLOTS_CSA != 0 ? KVS_RING_SLOTS_CSA
                                                                             : KVS_RING_SLOTS_HCA,
                         (unsigned long long)page);
  }
  if (n == 0) return KVS_OK;
  if (d_slots == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%zu window slots at NULL", n);
  }
  kvs_cuda_device_scope scope;
  kvs_status status = enter(tables, &scope, err);
  if (status != KVS_OK) return status;
  status = launched(kvs_launch_state_locs(tables->dims, d_slots, n, d_out_csa, d_out_hca,
                                          &tables->faults->state_locs, tables->max_blocks, stream),
                    "state_locs", n, err);
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_device_tables_batch_state_locs(kvs_device_tables_t tables, const int64_t *d_own,
                                              const int64_t *d_slots, const int64_t *d_positions,
                                              size_t n, int64_t *d_out_csa, int64_t *d_out_hca,
                                              cudaStream_t stream, kvs_error *err) {
  return kvs_device_tables_batch_state_locs_counted(tables, d_own, d_slots, d_positions, n, NULL,
                                                    d_out_csa, d_out_hca, stream, err);
}

kvs_status kvs_device_tables_batch_state_locs_counted(kvs_device_tables_t tables,
                                                      const int64_t *d_own, const int64_t *d_slots,
                                                      const int64_t *d_positions, size_t n,
                                                      const uint64_t *d_count, int64_t *d_out_csa,
                                                      int64_t *d_out_hca, cudaStream_t stream,
                                                      kvs_error *err) {
  if (tables == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables are NULL");
  kvs_state_placement placement = kvs_state_placement_of(&tables->layout.sizes);
  kvs_status status = kvs_state_placement_check(&placement, err);
  if (status != KVS_OK) return status;
  bool csa = d_out_csa != NULL, hca = d_out_hca != NULL;
  if (!csa && !hca) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "state locs need an output: out_csa, out_hca or both");
  }
  bool csa_req = kvs_state_rings_csa_per_request(placement.rings);
  bool hca_req = kvs_state_rings_hca_per_request(placement.rings);
  uint64_t page = placement.page;
  if ((csa && !csa_req && page % KVS_RING_SLOTS_CSA != 0) ||
      (hca && !hca_req && page % KVS_RING_SLOTS_HCA != 0)) {
    return kvs_error_set(
        err, KVS_ERR_INVALID_ARGUMENT,
        "ring_size %u must divide P=%llu, or two pages share a ring block",
        csa && !csa_req && page % KVS_RING_SLOTS_CSA != 0 ? KVS_RING_SLOTS_CSA : KVS_RING_SLOTS_HCA,
        (unsigned long long)page);
  }
  if (n == 0) return KVS_OK;
  bool need_own = (csa && !csa_req) || (hca && !hca_req);
  bool need_slots = (csa && csa_req) || (hca && hca_req);
  if (d_positions == NULL || (need_own && d_own == NULL) || (need_slots && d_slots == NULL)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "state locs of %zu rows under %s rings: %s is NULL", n,
                         kvs_state_rings_name(placement.rings),
                         d_positions == NULL         ? "positions"
                         : need_own && d_own == NULL ? "own (window slots)"
                                                     : "slots (request slots)");
  }
  kvs_cuda_device_scope scope;
  if ((status = enter(tables, &scope, err))) return status;
  status = launched(kvs_launch_batch_state_locs(placement, d_own, d_slots, d_positions, n, d_count,
                                                d_out_csa, d_out_hca, &tables->faults->state_locs,
                                                tables->max_blocks, stream),
                    "batch_state_locs", n, err);
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_device_tables_ring_ctx(kvs_device_tables_t tables,
                                      const kvs_block_tables *block_tables,
                                      const int64_t *d_positions, size_t n_req, int64_t *d_own,
                                      int64_t *d_prev, int64_t *d_ring, cudaStream_t stream,
                                      kvs_error *err) {
  return kvs_device_tables_ring_ctx_counted(tables, block_tables, d_positions, n_req, NULL, d_own,
                                            d_prev, d_ring, stream, err);
}

kvs_status kvs_device_tables_ring_ctx_counted(kvs_device_tables_t tables,
                                              const kvs_block_tables *block_tables,
                                              const int64_t *d_positions, size_t n_req,
                                              const uint64_t *d_count, int64_t *d_own,
                                              int64_t *d_prev, int64_t *d_ring, cudaStream_t stream,
                                              kvs_error *err) {
  if (tables == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables are NULL");
  kvs_status status = kvs_block_tables_check(block_tables, n_req, err);
  if (status != KVS_OK) return status;
  if (n_req == 0) return KVS_OK;
  if (d_positions == NULL || d_own == NULL || d_prev == NULL || d_ring == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "ring context of %zu requests: positions or an output is NULL", n_req);
  }
  kvs_cuda_device_scope scope;
  if ((status = enter(tables, &scope, err))) return status;
  status = launched(kvs_launch_ring_ctx(tables->map, tables->dims, *block_tables, d_positions,
                                        n_req, d_count, d_own, d_prev, d_ring,
                                        &tables->faults->ring_ctx, tables->max_blocks, stream),
                    "ring_ctx", n_req, err);
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_device_tables_faults(const struct kvs_device_tables *tables, cudaStream_t stream,
                                    kvs_device_faults *out, kvs_error *err) {
  if (tables == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables or output is NULL");
  }
  kvs_device_faults faults;
  kvs_cuda_device_scope scope;
  kvs_status status = enter(tables, &scope, err);
  if (status != KVS_OK) return status;
  KVS_CUDA_GOTO(
      cudaMemcpyAsync(&faults, tables->faults, sizeof faults, cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync of the fault records", err, status, done);
  KVS_CUDA_GOTO(cudaStreamSynchronize(stream), "cudaStreamSynchronize for the fault records", err,
                status, done);
  *out = faults;
done:
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_device_tables_clear_faults(kvs_device_tables_t tables, cudaStream_t stream,
                                          kvs_error *err) {
  if (tables == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tables are NULL");
  kvs_cuda_device_scope scope;
  kvs_status status = enter(tables, &scope, err);
  if (status != KVS_OK) return status;
  status = kvs_cuda_status(cudaMemcpyAsync(tables->faults, &kFaultsInit, sizeof kFaultsInit,
                                           cudaMemcpyHostToDevice, stream),
                           "cudaMemcpyAsync clearing the fault records", err);
  kvs_cuda_device_leave(&scope);
  return status;
}

#include "core/device_ref.h"

#include <string.h>

#include "core/mix.h"
#include "core/table_math.h"

/* Notes one item at fault: the count, and the lowest index seen. */
static void note_fault(kvs_batch_fault *fault, uint64_t index) {
  fault->count++;
  if (index < fault->first_index) fault->first_index = index;
}

kvs_status kvs_table_dims_check(const kvs_table_dims *dims, kvs_error *err) {
  if (dims == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: dims is NULL", __func__);
  }
  uint64_t page = dims->page;
  if (page == 0 || page > (uint64_t)INT32_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "page %llu must be between 1 and 2^31 - 1 slots",
                         (unsigned long long)page);
  }
  if (dims->full_token < page || dims->full_token % page != 0 ||
      dims->full_token >= (uint64_t)INT64_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "full_token %llu must be whole pages of %llu (the dummy page at least) "
                         "and leave room for the sentinel row in int64",
                         (unsigned long long)dims->full_token, (unsigned long long)page);
  }
  if (dims->n_win_slots < page || dims->n_win_slots % page != 0 ||
      dims->n_win_slots > (uint64_t)INT64_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "n_win_slots %llu must be whole pages of %llu (the dummy page at "
                         "least) and fit in int64",
                         (unsigned long long)dims->n_win_slots, (unsigned long long)page);
  }
  return KVS_OK;
}

/* kvs_journal_entry_fits for dims already checked: the batch loops call
 * it per entry without re-checking them. */
static bool entry_fits(const kvs_table_dims *dims, const kvs_journal_entry *entry) {
  /* Not a table entry; the host pool validates it. */
  if (kvs_tm_entry_is_slot(entry->full_page)) return true;
  return kvs_tm_entry_fits(dims->full_token / dims->page, dims->n_win_slots / dims->page,
                           entry->full_page, entry->window_page) != 0;
}

bool kvs_journal_entry_fits(const kvs_table_dims *dims, const kvs_journal_entry *entry) {
  /* No entry fits dims that describe no table (a zero page would divide
   * by zero). */
  if (entry == NULL || kvs_table_dims_check(dims, NULL) != KVS_OK) return false;
  return entry_fits(dims, entry);
}

kvs_status kvs_table_check_journal(const kvs_table_dims *dims, const kvs_journal_entry *entries,
                                   size_t n, kvs_error *err) {
  kvs_status status = kvs_table_dims_check(dims, err);
  if (status != KVS_OK) return status;
  if (n > 0 && entries == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: entries is NULL but n is %zu",
                         __func__, n);
  }
  uint64_t n_full_pages = dims->full_token / dims->page;
  uint64_t n_win_pages = dims->n_win_slots / dims->page;
  for (size_t i = 0; i < n; i++) {
    if (entry_fits(dims, &entries[i])) continue;
    uint64_t fp = entries[i].full_page;
    int64_t wp = entries[i].window_page;
    if (fp + 1 >= n_full_pages) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "journal entry %zu names full page %llu, %s (the table has %llu "
                           "full pages, the last the dummy)",
                           i, (unsigned long long)fp,
                           fp >= n_full_pages ? "outside the history" : "the reserved dummy page",
                           (unsigned long long)n_full_pages);
    }
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                         "journal entry %zu binds full page %llu to window page %lld; only "
                         "window pages 0..%llu and %d (freed) exist",
                         i, (unsigned long long)fp, (long long)wp,
                         (unsigned long long)(n_win_pages - 2), KVS_JOURNAL_FREED);
  }
  return KVS_OK;
}

kvs_status kvs_ref_apply_journal(int64_t *map, const kvs_table_dims *dims,
                                 const kvs_journal_entry *entries, size_t n, kvs_batch_fault *fault,
                                 kvs_error *err) {
  kvs_status status = kvs_table_dims_check(dims, err);
  if (status != KVS_OK) return status;
  if (map == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: map is NULL", __func__);
  }
  if (entries == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: entries is NULL", __func__);
  }
  kvs_batch_fault local = KVS_BATCH_FAULT_INIT;
  uint64_t page = dims->page;
  for (size_t i = 0; i < n; i++) {
    if (kvs_tm_entry_is_slot(entries[i].full_page)) continue; /* the host pool's */
    if (!entry_fits(dims, &entries[i])) {
      note_fault(&local, i);
      continue;
    }
    int64_t *rows = map + entries[i].full_page * page;
    for (uint64_t offset = 0; offset < page; offset++) {
      rows[offset] = kvs_tm_entry_row(entries[i].window_page, page, offset);
    }
  }
  if (fault != NULL) *fault = local;
  return KVS_OK;
}

kvs_status kvs_ref_translate(const int64_t *map, const kvs_table_dims *dims, const int64_t *locs,
                             size_t n, int64_t *out, kvs_batch_fault *fault, kvs_error *err) {
  kvs_status status = kvs_table_dims_check(dims, err);
  if (status != KVS_OK) return status;
  if (map == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: map is NULL", __func__);
  }
  if (locs == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: locs is NULL", __func__);
  }
  if (out == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_batch_fault local = KVS_BATCH_FAULT_INIT;
  for (size_t i = 0; i < n; i++) {
    uint64_t row;
    if (kvs_tm_row_of(locs[i], dims->full_token, &row)) {
      out[i] = map[row];
    } else {
      out[i] = -1;
      note_fault(&local, i);
    }
  }
  if (fault != NULL) *fault = local;
  return KVS_OK;
}

/* A ring must divide P, or two window pages share a ring block. */
static kvs_status check_ring(uint64_t ring, uint64_t page, kvs_error *err) {
  if (page % ring != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "ring_size %llu must divide P=%llu, or two pages share a ring block",
                         (unsigned long long)ring, (unsigned long long)page);
  }
  return KVS_OK;
}

kvs_status kvs_ref_state_locs(const kvs_table_dims *dims, const int64_t *slots, size_t n,
                              int64_t *out_csa, int64_t *out_hca, kvs_batch_fault *fault,
                              kvs_error *err) {
  kvs_status status = kvs_table_dims_check(dims, err);
  if (status != KVS_OK) return status;
  if (out_csa == NULL && out_hca == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "state locs need an output: out_csa, out_hca or both");
  }
  if (slots == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: slots is NULL", __func__);
  }
  if ((out_csa != NULL && (status = check_ring(KVS_RING_SLOTS_CSA, dims->page, err))) ||
      (out_hca != NULL && (status = check_ring(KVS_RING_SLOTS_HCA, dims->page, err)))) {
    return status;
  }
  kvs_tm_div page = kvs_tm_div_make(dims->page);
  kvs_tm_div csa = kvs_tm_div_make(KVS_RING_SLOTS_CSA);
  kvs_tm_div hca = kvs_tm_div_make(KVS_RING_SLOTS_HCA);
  kvs_batch_fault local = KVS_BATCH_FAULT_INIT;
  for (size_t i = 0; i < n; i++) {
    int64_t slot = slots[i];
    int64_t a = -1, b = -1;
    if (slot >= 0 && (uint64_t)slot >= dims->n_win_slots) {
      note_fault(&local, i);
    } else if (slot >= 0) {
      a = kvs_tm_state_loc(slot, page, csa);
      b = kvs_tm_state_loc(slot, page, hca);
    }
    if (out_csa != NULL) out_csa[i] = a;
    if (out_hca != NULL) out_hca[i] = b;
  }
  if (fault != NULL) *fault = local;
  return KVS_OK;
}

kvs_state_placement kvs_state_placement_of(const kvs_pool_sizes *sizes) {
  kvs_state_placement p = {KVS_STATE_RINGS_PER_PAGE, 0, 0, 0};
  if (sizes == NULL) return p; /* page 0: kvs_state_placement_check refuses it */
  p.rings = sizes->state_rings;
  p.page = sizes->page;
  p.n_win_slots = sizes->n_win_slots;
  p.n_req_slots = sizes->n_req_slots;
  return p;
}

/* Request slots stay below 2^56, so slot * 128 + 127 fits int64. */
#define KVS_MAX_REQ_SLOTS_FOR_LOCS (UINT64_C(1) << 56)

kvs_status kvs_state_placement_check(const kvs_state_placement *placement, kvs_error *err) {
  if (placement == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: placement is NULL", __func__);
  }
  const kvs_state_placement *p = placement;
  if (p->rings != KVS_STATE_RINGS_PER_PAGE && p->rings != KVS_STATE_RINGS_PER_REQUEST &&
      p->rings != KVS_STATE_RINGS_HCA_PER_REQUEST) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "state rings %d is none of per-page, per-request, hca-per-request",
                         (int)p->rings);
  }
  if (p->page == 0 || p->page > (uint64_t)INT32_MAX || p->n_win_slots > (uint64_t)INT64_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "placement of P=%llu and %llu window slots: P must be 1 .. 2^31 - 1 and "
                         "the slots fit in int64",
                         (unsigned long long)p->page, (unsigned long long)p->n_win_slots);
  }
  bool any_request = p->rings != KVS_STATE_RINGS_PER_PAGE;
  if (any_request ? (p->n_req_slots == 0 || p->n_req_slots > KVS_MAX_REQ_SLOTS_FOR_LOCS)
                  : p->n_req_slots != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s state rings with %llu request slots: per-request rings need 1 .. "
                         "2^56 slots, per-page rings none",
                         kvs_state_rings_name(p->rings), (unsigned long long)p->n_req_slots);
  }
  return KVS_OK;
}

kvs_status kvs_ref_batch_state_locs(const kvs_state_placement *placement, const int64_t *own,
                                    const int64_t *slots, const int64_t *positions, size_t n,
                                    int64_t *out_csa, int64_t *out_hca, kvs_batch_fault *fault,
                                    kvs_error *err) {
  kvs_status status = kvs_state_placement_check(placement, err);
  if (status != KVS_OK) return status;
  if (out_csa == NULL && out_hca == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "state locs need an output: out_csa, out_hca or both");
  }
  const kvs_state_placement *p = placement;
  const int csa_req = kvs_tm_csa_per_request((int)p->rings);
  const int hca_req = kvs_tm_hca_per_request((int)p->rings);
  /* What the requested outputs read. */
  const bool need_own = (out_csa != NULL && !csa_req) || (out_hca != NULL && !hca_req);
  const bool need_slots = (out_csa != NULL && csa_req) || (out_hca != NULL && hca_req);
  if ((out_csa != NULL && !csa_req && (status = check_ring(KVS_RING_SLOTS_CSA, p->page, err))) ||
      (out_hca != NULL && !hca_req && (status = check_ring(KVS_RING_SLOTS_HCA, p->page, err)))) {
    return status;
  }
  if (n > 0 && (positions == NULL || (need_own && own == NULL) || (need_slots && slots == NULL))) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "state locs of %zu rows under %s rings: %s is NULL", n,
                         kvs_state_rings_name(p->rings),
                         positions == NULL         ? "positions"
                         : need_own && own == NULL ? "own (window slots)"
                                                   : "slots (request slots)");
  }
  const kvs_tm_div page = kvs_tm_div_make(p->page);
  const kvs_tm_div csa = kvs_tm_div_make(KVS_RING_SLOTS_CSA);
  const kvs_tm_div hca = kvs_tm_div_make(KVS_RING_SLOTS_HCA);
  kvs_batch_fault local = KVS_BATCH_FAULT_INIT;
  for (size_t r = 0; r < n; r++) {
    const int64_t pos = positions[r];
    int64_t a = -1, b = -1;
    int bad = 0;
    if (pos >= 0) {
      const int64_t w = need_own ? own[r] : -1;
      const int64_t s = need_slots ? slots[r] : -1;
      if (out_csa != NULL) {
        a = kvs_tm_batch_ring_loc(csa_req, w, s, pos, page, csa, p->n_win_slots, p->n_req_slots,
                                  &bad);
      }
      if (out_hca != NULL) {
        b = kvs_tm_batch_ring_loc(hca_req, w, s, pos, page, hca, p->n_win_slots, p->n_req_slots,
                                  &bad);
      }
    }
    if (out_csa != NULL) out_csa[r] = a;
    if (out_hca != NULL) out_hca[r] = b;
    if (bad) note_fault(&local, r);
  }
  if (fault != NULL) *fault = local;
  return KVS_OK;
}

kvs_status kvs_block_tables_check(const kvs_block_tables *tables, size_t n_req, kvs_error *err) {
  if (tables == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: tables is NULL", __func__);
  }
  if (tables->stride == 0 || tables->block_size == 0 || tables->block_size > UINT32_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "block tables need stride >= 1 and block_size in 1..2^32-1, got "
                         "stride %llu, block_size %llu",
                         (unsigned long long)tables->stride,
                         (unsigned long long)tables->block_size);
  }
  if (n_req > 0 && tables->pages == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s: tables->pages is NULL but n_req is %zu", __func__, n_req);
  }
  if (n_req > 0 && tables->stride > (uint64_t)SIZE_MAX / sizeof(int32_t) / n_req) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "%zu block-table rows of %llu entries do not fit in memory", n_req,
                         (unsigned long long)tables->stride);
  }
  return KVS_OK;
}

/* The window slot of position p of one request; -1 and *bad set when the
 * position's block or loc is outside the row or the table. */
static int64_t slot_at(const int64_t *map, uint64_t full_token, const int32_t *row, uint64_t stride,
                       kvs_tm_div block_size, int64_t p, int *bad) {
  int64_t loc;
  uint64_t index;
  if (!kvs_tm_block_loc(row, stride, block_size, p, &loc) ||
      !kvs_tm_row_of(loc, full_token, &index)) {
    *bad = 1;
    return -1;
  }
  return map[index];
}

/* The arguments both ring-context functions take, checked alike. */
static kvs_status check_ring_ctx(const char *function, const int64_t *map,
                                 const kvs_table_dims *dims, const kvs_block_tables *tables,
                                 const int64_t *positions, size_t n_req, const int64_t *own,
                                 const int64_t *prev, const int64_t *ring, kvs_error *err) {
  kvs_status status;
  if ((status = kvs_table_dims_check(dims, err)) ||
      (status = kvs_block_tables_check(tables, n_req, err))) {
    return status;
  }
  if (map == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: map is NULL", function);
  }
  if (positions == NULL && n_req > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: positions is NULL", function);
  }
  if (own == NULL && n_req > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: own is NULL", function);
  }
  if (prev == NULL && n_req > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: prev is NULL", function);
  }
  if (ring == NULL && n_req > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: ring is NULL", function);
  }
  if (n_req > 0 && dims->page > (uint64_t)SIZE_MAX / sizeof(int64_t) / n_req) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "%zu ring contexts of %llu slots do not fit", n_req,
                         (unsigned long long)dims->page);
  }
  return KVS_OK;
}

/* The part of a ring-context row both builders share: an idle (padding)
 * row, pos < 0, reads -1 everywhere and returns false; otherwise own and
 * prev are the slots of pos and of the token before it (pos 0 is its own
 * predecessor) and the caller fills the ring. */
static bool ring_row_start(const int64_t *map, const kvs_table_dims *dims,
                           const kvs_block_tables *tables, kvs_tm_div block_div, int64_t pos,
                           const int32_t *row, int64_t *own, int64_t *prev, int64_t *ring_row,
                           int *bad) {
  if (pos < 0) {
    *own = -1;
    *prev = -1;
    for (uint64_t j = 0; j < dims->page; j++) ring_row[j] = -1;
    return false;
  }
  *own = slot_at(map, dims->full_token, row, tables->stride, block_div, pos, bad);
  *prev =
      slot_at(map, dims->full_token, row, tables->stride, block_div, pos > 0 ? pos - 1 : 0, bad);
  return true;
}

kvs_status kvs_ref_ring_ctx(const int64_t *map, const kvs_table_dims *dims,
                            const kvs_block_tables *tables, const int64_t *positions, size_t n_req,
                            int64_t *own, int64_t *prev, int64_t *ring, kvs_batch_fault *fault,
                            kvs_error *err) {
  kvs_status status =
      check_ring_ctx(__func__, map, dims, tables, positions, n_req, own, prev, ring, err);
  if (status != KVS_OK) return status;
  const uint64_t page = dims->page;
  const kvs_tm_div page_div = kvs_tm_div_make(page);
  const kvs_tm_div block_div = kvs_tm_div_make(tables->block_size);
  kvs_batch_fault local = KVS_BATCH_FAULT_INIT;
  for (size_t r = 0; r < n_req; r++) {
    int64_t pos = positions[r];
    int64_t *ring_row = ring + r * page;
    const int32_t *row = tables->pages + r * tables->stride;
    int bad = 0;
    if (!ring_row_start(map, dims, tables, block_div, pos, row, own + r, prev + r, ring_row,
                        &bad)) {
      continue;
    }
    for (uint64_t j = 0; j < page; j++) {
      int64_t p = kvs_tm_ring_position(pos, j, page_div);
      ring_row[j] =
          p < 0 ? -1 : slot_at(map, dims->full_token, row, tables->stride, block_div, p, &bad);
    }
    if (bad) note_fault(&local, r);
  }
  if (fault != NULL) *fault = local;
  return KVS_OK;
}

/* One run of a ring row: positions block*P + [j0, j1) of a request, into
 * out[j0, j1). A block past the row faults the whole run; an unassigned
 * block reads the sentinel row; locs past the sentinel fault one by one. */
static void copy_run(const int64_t *map, uint64_t full_token, const int32_t *row, uint64_t stride,
                     uint64_t page, uint64_t block, uint64_t j0, uint64_t j1, int64_t *out,
                     int *bad) {
  if (j0 >= j1) return;
  if (block >= stride) {
    for (uint64_t j = j0; j < j1; j++) out[j] = -1;
    *bad = 1;
    return;
  }
  if (row[block] < 0) {
    for (uint64_t j = j0; j < j1; j++) out[j] = map[full_token];
    return;
  }
  uint64_t base = (uint64_t)row[block] * page;
  if (base + j1 - 1 <= full_token) {
    memcpy(out + j0, map + base + j0, (size_t)(j1 - j0) * sizeof *out);
    return;
  }
  for (uint64_t j = j0; j < j1; j++) {
    if (base + j <= full_token) {
      out[j] = map[base + j];
    } else {
      out[j] = -1;
      *bad = 1;
    }
  }
}

kvs_status kvs_host_ring_ctx(const int64_t *map, const kvs_table_dims *dims,
                             const kvs_block_tables *tables, const int64_t *positions, size_t n_req,
                             int64_t *own, int64_t *prev, int64_t *ring, kvs_batch_fault *fault,
                             kvs_error *err) {
  kvs_status status =
      check_ring_ctx(__func__, map, dims, tables, positions, n_req, own, prev, ring, err);
  if (status != KVS_OK) return status;
  if (tables->block_size != dims->page) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the run-wise ring context needs blocks of P=%llu tokens, not %llu",
                         (unsigned long long)dims->page, (unsigned long long)tables->block_size);
  }
  const uint64_t page = dims->page;
  const kvs_tm_div block_div = kvs_tm_div_make(page);
  kvs_batch_fault local = KVS_BATCH_FAULT_INIT;
  for (size_t r = 0; r < n_req; r++) {
    int64_t pos = positions[r];
    int64_t *ring_row = ring + r * page;
    const int32_t *row = tables->pages + r * tables->stride;
    int bad = 0;
    if (!ring_row_start(map, dims, tables, block_div, pos, row, own + r, prev + r, ring_row,
                        &bad)) {
      continue;
    }
    uint64_t block = (uint64_t)pos / page, offset = (uint64_t)pos % page;
    copy_run(map, dims->full_token, row, tables->stride, page, block, 0, offset + 1, ring_row,
             &bad);
    if (block == 0) {
      for (uint64_t j = offset + 1; j < page; j++) ring_row[j] = -1; /* not reached yet */
    } else {
      copy_run(map, dims->full_token, row, tables->stride, page, block - 1, offset + 1, page,
               ring_row, &bad);
    }
    if (bad) note_fault(&local, r);
  }
  if (fault != NULL) *fault = local;
  return KVS_OK;
}

uint64_t kvs_ref_rows_digest(const void *rows, uint64_t bytes, uint64_t seed) {
  const unsigned char *p = rows;
  if (p == NULL) bytes = 0; /* nothing to read: the digest of no bytes */
  uint64_t sum = 0;
  for (uint64_t i = 0; i * 8 < bytes; i++) {
    uint64_t word = 0;
    for (unsigned b = 0; b < 8 && i * 8 + b < bytes; b++) word |= (uint64_t)p[i * 8 + b] << (8 * b);
    sum += kvs_rows_word_term(seed, i, word);
  }
  return kvs_rows_digest_finish(sum, bytes, seed);
}

/* The engine's rows a journal moves (shard/table.h): ring clears when a
 * request slot is bound, tail-state restores of exact prefix hits, and
 * the host tier's pinned slots with their spill and fetch copies, all in
 * journal order. The table computes every address; its implementation
 * only runs (the host twin) or queues (a device) strided copies, so both
 * move the same bytes. */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/device_ref.h"
#include "pool/window_pool.h"
#include "shard/table_internal.h"

/* The spans a slot holds and where a page's rows lie in each; returns
 * how many. */
static size_t row_spans(const kvs_device_layout *layout, kvs_table_span_rows *out) {
  size_t n = 0;
  for (size_t i = 0; i < KVS_DEVICE_SPAN_COUNT; i++) {
    const kvs_device_span *s = &layout->spans[i];
    if (s->tier != KVS_DEVICE_TIER_COMPRESSED && s->tier != KVS_DEVICE_TIER_INDEXER) continue;
    if (s->count == 0 || s->row_bytes == 0 || n == KVS_TABLE_ROW_SPANS) continue;
    uint64_t ratio = s->tier == KVS_DEVICE_TIER_INDEXER ? 4 : s->ratio;
    uint64_t rows = s->page_rows != 0 ? s->page_rows : layout->sizes.page / ratio;
#ifndef KVS_MUTANT_HOST_ROWS_FP8_STRIDE /* defined: planted bug (tests/mutants), pads ignored */
    uint64_t page_step = s->page_rows != 0 ? s->page_bytes : rows * s->row_bytes;
#else
    uint64_t page_step = rows * s->row_bytes;
#endif
    kvs_table_span_rows r = {s->offset, s->stride, s->count,        rows * s->row_bytes,
                             page_step, s->tier,   (uint32_t)ratio, s->row_bytes};
    out[n++] = r;
  }
  return n;
}

/* The ring spans whose rings are per request slot; returns how many. */
static size_t ring_spans(const kvs_device_layout *layout, kvs_table_ring_span *out) {
  const kvs_pool_sizes *sizes = &layout->sizes;
  size_t n = 0;
  for (size_t i = 0; i < KVS_DEVICE_SPAN_COUNT; i++) {
    const kvs_device_span *s = &layout->spans[i];
    if (s->tier != KVS_DEVICE_TIER_STATE && s->tier != KVS_DEVICE_TIER_INDEX_STATE) continue;
    bool csa = s->tier == KVS_DEVICE_TIER_INDEX_STATE || s->ratio == KVS_CSA_RATIO;
    bool per_request = csa ? kvs_state_rings_csa_per_request(sizes->state_rings)
                           : kvs_state_rings_hca_per_request(sizes->state_rings);
    if (!per_request || s->count == 0 || n == KVS_TABLE_RING_SPANS) continue;
    uint64_t ring = csa ? KVS_RING_SLOTS_CSA : KVS_RING_SLOTS_HCA;
    kvs_table_ring_span r = {s->offset, s->stride,
                             s->count,  s->row_bytes,
                             ring,      csa && sizes->tail_states ? sizes->n_req_slots * ring : 0};
    out[n++] = r;
  }
  return n;
}

kvs_status kvs_table_keep_rows(kvs_table_t table, const kvs_device_layout *layout, kvs_error *err) {
  if (table == NULL || layout == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_table_keep_rows: %s is NULL",
                         table == NULL ? "table" : "layout");
  }
  if (table->ops->copy_rows == NULL || table->ops->memory == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED, "this %s table cannot move rows",
                         kvs_table_kind_name(table->ops->kind));
  }
  kvs_table_dims dims = kvs_device_layout_dims(layout);
  if (dims.page != table->dims.page || dims.full_token != table->dims.full_token) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the layout (%llu full tokens of pages of %llu) is not the table's (%llu "
                         "of %llu)",
                         (unsigned long long)dims.full_token, (unsigned long long)dims.page,
                         (unsigned long long)table->dims.full_token,
                         (unsigned long long)table->dims.page);
  }
  if (table->base != NULL) return KVS_OK;
  void *base = NULL;
  int64_t *mapping = NULL;
  kvs_status status = table->ops->memory(table->impl, &base, &mapping, err);
  if (status != KVS_OK) return status;
  table->n_rings = ring_spans(layout, table->rings);
  table->n_spans = row_spans(layout, table->spans);
  table->n_win_pages = layout->sizes.n_win_pages;
  table->n_req_slots = layout->sizes.n_req_slots;
  table->base = base;
  table->carve_bytes = layout->total_bytes;
  return KVS_OK;
}

size_t kvs_table_host_spans(const kvs_device_layout *layout, kvs_table_span_rows *out) {
  return layout == NULL || out == NULL ? 0 : row_spans(layout, out);
}

/* What one slot of these spans holds. */
static uint64_t spans_bytes(const kvs_table_span_rows *spans, size_t n) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) bytes += spans[i].count * spans[i].width;
  return bytes;
}

uint64_t kvs_table_host_slot_bytes(const kvs_device_layout *layout) {
  if (layout == NULL) return 0;
  kvs_table_span_rows spans[KVS_TABLE_ROW_SPANS];
  return spans_bytes(spans, row_spans(layout, spans));
}

/* Frees chunks [0, n) of a tier of `slots` slots. */
static void free_chunks(struct kvs_table *t, unsigned char **chunks, size_t n, uint64_t chunk_slots,
                        uint64_t slots, uint64_t slot_bytes) {
  for (size_t c = 0; c < n; c++) {
    uint64_t first = (uint64_t)c * chunk_slots;
    uint64_t held = slots - first < chunk_slots ? slots - first : chunk_slots;
    t->ops->host_free(t->impl, chunks[c], held * slot_bytes);
  }
  free(chunks);
}

kvs_status kvs_table_host_tier(kvs_table_t table, const kvs_device_layout *layout, uint64_t slots,
                               kvs_error *err) {
  return kvs_table_host_tier_chunked(table, layout, slots, KVS_TABLE_HOST_CHUNK_BYTES, err);
}

kvs_status kvs_table_host_tier_chunked(kvs_table_t table, const kvs_device_layout *layout,
                                       uint64_t slots, uint64_t chunk_bytes, kvs_error *err) {
  if (table == NULL || layout == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_table_host_tier: %s is NULL",
                         table == NULL ? "table" : "layout");
  }
  if (table->chunks != NULL) {
    return kvs_error_set(err, KVS_ERR_CONFLICT, "the table has a host tier already");
  }
  if (table->ops->host_alloc == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED, "this %s table cannot keep a host tier",
                         kvs_table_kind_name(table->ops->kind));
  }
  kvs_status status = kvs_table_keep_rows(table, layout, err);
  if (status != KVS_OK) return status;
  uint64_t slot_bytes = kvs_table_host_slot_bytes(layout);
  if (slots == 0 || slot_bytes == 0 || slots > UINT64_MAX / slot_bytes ||
      slots * slot_bytes > (uint64_t)SIZE_MAX) {
    return kvs_error_set(
        err, KVS_ERR_INVALID_ARGUMENT,
        "a host tier of %llu slots of %llu bytes (the page's compressed and "
        "indexer rows): %s",
        (unsigned long long)slots, (unsigned long long)slot_bytes,
        slots == 0 || slot_bytes == 0 ? "nothing to hold" : "past the address space");
  }
  /* Whole slots a chunk: a slot's spans, and so every copy, lie in one. */
  uint64_t chunk_slots = chunk_bytes / slot_bytes > 0 ? chunk_bytes / slot_bytes : 1;
  if (chunk_slots > slots) chunk_slots = slots;
  size_t n_chunks = (size_t)((slots + chunk_slots - 1) / chunk_slots);
  unsigned char **chunks = calloc(n_chunks, sizeof *chunks);
  if (chunks == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the host tier's %zu chunks",
                         n_chunks);
  }
  for (size_t c = 0; c < n_chunks; c++) {
    uint64_t first = (uint64_t)c * chunk_slots;
    uint64_t held = slots - first < chunk_slots ? slots - first : chunk_slots;
    kvs_error why;
    kvs_error_clear(&why);
    void *chunk = NULL;
    status = table->ops->host_alloc(table->impl, held * slot_bytes, &chunk, &why);
    if (status != KVS_OK) {
      free_chunks(table, chunks, c, chunk_slots, slots, slot_bytes);
      return kvs_error_set(err, status,
                           "chunk %zu of %zu (%llu bytes) of a host tier of %llu bytes: %s", c + 1,
                           n_chunks, (unsigned long long)(held * slot_bytes),
                           (unsigned long long)(slots * slot_bytes), why.message);
    }
    chunks[c] = chunk;
  }
  table->chunks = chunks;
  table->n_chunks = n_chunks;
  table->chunk_slots = chunk_slots;
  table->tier_slots = slots;
  table->slot_bytes = slot_bytes;
  return KVS_OK;
}

unsigned char *kvs_table_bounce(struct kvs_table *t, kvs_error *err) {
  if (t == NULL || t->base == NULL || t->ops->host_alloc == NULL) {
    kvs_error_set(err, KVS_ERR_UNSUPPORTED, "the table keeps no rows to move");
    return NULL;
  }
  if (t->bounce != NULL) return t->bounce;
  uint64_t bytes = spans_bytes(t->spans, t->n_spans);
  void *memory = NULL;
  if (bytes == 0 || t->ops->host_alloc(t->impl, bytes, &memory, err) != KVS_OK) return NULL;
  t->bounce = memory;
  t->bounce_bytes = bytes;
  return t->bounce;
}

void kvs_table_host_tier_free(struct kvs_table *table) {
  if (table->bounce != NULL) table->ops->host_free(table->impl, table->bounce, table->bounce_bytes);
  table->bounce = NULL;
  if (table->chunks != NULL) {
    free_chunks(table, table->chunks, table->n_chunks, table->chunk_slots, table->tier_slots,
                table->slot_bytes);
  }
  table->chunks = NULL;
  table->n_chunks = 0;
}

/* Slot s's memory: chunk s / chunk_slots, whole slots in each. */
static unsigned char *slot_memory(const struct kvs_table *t, uint64_t slot) {
  return t->chunks[slot / t->chunk_slots] + (slot % t->chunk_slots) * t->slot_bytes;
}

const unsigned char *kvs_table_host_tier_slot(const struct kvs_table *table, uint64_t slot,
                                              uint64_t *slot_bytes, uint64_t *slots) {
  if (table == NULL || table->chunks == NULL || slot >= table->tier_slots) return NULL;
  if (slot_bytes != NULL) *slot_bytes = table->slot_bytes;
  if (slots != NULL) *slots = table->tier_slots;
  return slot_memory(table, slot);
}

void kvs_table_row_stats_get(const struct kvs_table *table, kvs_table_row_stats *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  if (table != NULL) *out = table->row_stats;
}

/* ---- one journal's row work ---- */

/* What an entry asks of the rows. */
typedef enum row_work { WORK_NONE, WORK_MOVE, WORK_CLEAR, WORK_RESTORE } row_work;

typedef struct row_entry {
  row_work work;
  kvs_host_move move;
  uint64_t slot;
  kvs_tail_restore restore;
} row_entry;

static row_entry decode(const struct kvs_table *t, const kvs_journal_entry *e) {
  row_entry r;
  memset(&r, 0, sizeof r);
  if (t->chunks != NULL && kvs_window_pool_host_move_of(e, &r.move)) {
    r.work = WORK_MOVE;
  } else if (t->n_rings > 0 && kvs_window_pool_slot_bind_of(e, &r.slot)) {
    r.work = WORK_CLEAR;
  } else if (t->n_rings > 0 && kvs_window_pool_restore_of(e, &r.restore)) {
    r.work = WORK_RESTORE;
  }
  return r;
}

/* Whether entry i's work fits the table (KVS_ERR_OUT_OF_RANGE naming it when
 * not). */
static kvs_status check(const struct kvs_table *t, size_t i, const row_entry *r, kvs_error *err) {
  uint64_t n_full_pages = t->dims.full_token / t->dims.page;
  switch (r->work) {
    case WORK_MOVE:
      if (r->move.full_page >= n_full_pages || r->move.slot >= t->tier_slots) {
        return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                             "journal entry %zu %s full page %llu %s host slot %llu; the table "
                             "has %llu full pages and %llu slots",
                             i, r->move.fetch ? "fetches" : "spills",
                             (unsigned long long)r->move.full_page, r->move.fetch ? "from" : "into",
                             (unsigned long long)r->move.slot, (unsigned long long)n_full_pages,
                             (unsigned long long)t->tier_slots);
      }
      return KVS_OK;
    case WORK_CLEAR:
    case WORK_RESTORE: {
      uint64_t slot = r->work == WORK_CLEAR ? r->slot : r->restore.slot;
      bool tails = r->work == WORK_CLEAR || r->restore.window_page + 1 < t->n_win_pages;
      if (slot + 1 >= t->n_req_slots || !tails) {
        return kvs_error_set(
            err, KVS_ERR_OUT_OF_RANGE,
            "journal entry %zu %s request slot %llu%s; the table has %llu slots "
            "(the last the dummy) and %llu window pages",
            i, r->work == WORK_CLEAR ? "binds" : "restores a tail state into",
            (unsigned long long)slot, r->work == WORK_RESTORE ? " from its window page" : "",
            (unsigned long long)t->n_req_slots, (unsigned long long)t->n_win_pages);
      }
      return KVS_OK;
    }
    default:
      return KVS_OK;
  }
}

static kvs_status flush(struct kvs_table *t, size_t *queued, kvs_error *err) {
  kvs_status status = *queued > 0 ? t->ops->copy_rows(t->impl, t->copies, *queued, err) : KVS_OK;
  *queued = 0;
  return status;
}

static kvs_status queue(struct kvs_table *t, size_t *queued, kvs_row_copy c, kvs_error *err) {
  t->copies[(*queued)++] = c;
  return *queued == KVS_TABLE_COPY_BATCH ? flush(t, queued, err) : KVS_OK;
}

/* A spill or fetch between a page and `slot` (a host slot, or the
 * bounce): one strided copy per span, a run per layer. */
static kvs_status queue_page(struct kvs_table *t, const kvs_host_move *m, unsigned char *slot,
                             size_t *queued, kvs_error *err) {
  kvs_status status = KVS_OK;
  for (size_t s = 0; s < t->n_spans && status == KVS_OK; s++) {
    const kvs_table_span_rows *r = &t->spans[s];
    unsigned char *rows = t->base + r->offset + m->full_page * r->page_step;
    kvs_row_copy c = {m->fetch ? (void *)rows : (void *)slot,
                      m->fetch ? (const void *)slot : (const void *)rows,
                      r->width,
                      r->count,
                      m->fetch ? r->stride : r->width,
                      m->fetch ? r->width : r->stride,
                      m->fetch ? KVS_ROW_FROM_HOST : KVS_ROW_TO_HOST};
    status = queue(t, queued, c, err);
    slot += r->count * r->width;
  }
  return status;
}

static kvs_status queue_move(struct kvs_table *t, const kvs_host_move *m, size_t *queued,
                             kvs_error *err) {
  kvs_status status = queue_page(t, m, slot_memory(t, m->slot), queued, err);
  if (m->fetch) {
    t->row_stats.fetches++;
  } else {
    t->row_stats.spills++;
  }
  t->row_stats.bytes += t->slot_bytes;
  return status;
}

/* A tail state into a ring span: for each of the four positions, its kv
 * and score first halves (a quarter of a ring row each) from their half
 * of the tail-state row into their parts of the ring row (core/cost_model.h
 * kvs_row_widths.tail_states), a run per layer. */
static kvs_status queue_restore(struct kvs_table *t, const kvs_table_ring_span *r,
                                const kvs_tail_restore *x, size_t *queued, kvs_error *err) {
  unsigned char *region = t->base + r->offset;
  uint64_t quarter = r->row_bytes / 4;
  kvs_status status = KVS_OK;
  for (uint64_t i = 0; i < KVS_TAIL_STATE_POSITIONS && status == KVS_OK; i++) {
    uint64_t src_row = r->tail_first + x->window_page * KVS_TAIL_STATE_ROWS + i / 2;
    unsigned char *src = region + src_row * r->row_bytes + (i % 2) * 2 * quarter;
    unsigned char *dst = region + (x->ring_row + i) * r->row_bytes;
    kvs_row_copy kv = {dst, src, quarter, r->count, r->stride, r->stride, KVS_ROW_WITHIN};
    kvs_row_copy score = {dst + 2 * quarter, src + quarter, quarter,       r->count,
                          r->stride,         r->stride,     KVS_ROW_WITHIN};
    status = queue(t, queued, kv, err);
    if (status == KVS_OK) status = queue(t, queued, score, err);
  }
  return status;
}

/* A slot's rings cleared, or a tail state restored into them: one strided
 * operation per ring span (eight per span for a restore), a run per
 * layer. */
static kvs_status queue_ring(struct kvs_table *t, const row_entry *e, size_t *queued,
                             kvs_error *err) {
  kvs_status status = KVS_OK;
  for (size_t s = 0; s < t->n_rings && status == KVS_OK; s++) {
    const kvs_table_ring_span *r = &t->rings[s];
    if (e->work == WORK_CLEAR) {
      unsigned char *region = t->base + r->offset;
      kvs_row_copy c = {region + e->slot * r->ring * r->row_bytes,
                        NULL,
                        r->ring * r->row_bytes,
                        r->count,
                        r->stride,
                        0,
                        KVS_ROW_ZERO};
      status = queue(t, queued, c, err);
    } else if (r->tail_first > 0) {
      status = queue_restore(t, r, &e->restore, queued, err);
    }
  }
  if (e->work == WORK_CLEAR) {
    t->row_stats.clears++;
  } else {
    t->row_stats.restores++;
  }
  return status;
}

kvs_status kvs_table_page_rows(struct kvs_table *t, uint64_t full_page, unsigned char *buffer,
                               bool into_page, kvs_error *err) {
  if (t == NULL || buffer == NULL || t->base == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_table_page_rows: %s",
                         t == NULL || t->base == NULL ? "the table keeps no rows" : "no buffer");
  }
  if (full_page >= t->dims.full_token / t->dims.page) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "full page %llu is past the table's %llu",
                         (unsigned long long)full_page,
                         (unsigned long long)(t->dims.full_token / t->dims.page));
  }
  kvs_host_move m = {into_page, full_page, 0};
  size_t queued = 0;
  uint64_t start = kvs_now_ns();
  kvs_status status = queue_page(t, &m, buffer, &queued, err);
  if (status == KVS_OK) status = flush(t, &queued, err);
  if (status == KVS_OK && t->ops->sync != NULL) status = t->ops->sync(t->impl, err);
  t->row_stats.copy_ns += kvs_now_ns() - start;
  return status;
}

kvs_status kvs_table_move_rows(struct kvs_table *t, const kvs_journal_entry *entries, size_t n,
                               kvs_error *err) {
  if (t->base == NULL || n == 0 || entries == NULL) return KVS_OK;
  uint64_t start = kvs_now_ns();
  size_t work = 0;
  for (size_t i = 0; i < n; i++) {
    row_entry r = decode(t, &entries[i]);
    if (r.work == WORK_NONE) continue;
    kvs_status status = check(t, i, &r, err);
    if (status != KVS_OK) return status;
    work++;
  }
  if (work == 0) return KVS_OK;
  size_t queued = 0;
  kvs_status status = KVS_OK;
  for (size_t i = 0; i < n && status == KVS_OK; i++) {
    row_entry r = decode(t, &entries[i]);
    if (r.work == WORK_MOVE) {
      status = queue_move(t, &r.move, &queued, err);
    } else if (r.work != WORK_NONE) {
      status = queue_ring(t, &r, &queued, err);
    }
  }
  if (status == KVS_OK) status = flush(t, &queued, err);
  t->row_stats.copy_ns += kvs_now_ns() - start;
  return status;
}

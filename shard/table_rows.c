/* The host tier's rows: a table's pinned slots, and the spill and fetch
 * copies a step's journal orders (shard/table.h). The table computes every
 * address; its implementation only runs (the host twin) or queues (a
 * device) strided copies, so both move the same bytes. */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/window_pool.h"
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
    kvs_table_span_rows r = {s->offset, s->stride, s->count, rows * s->row_bytes,
                             s->page_rows != 0 ? s->page_bytes : rows * s->row_bytes};
    out[n++] = r;
  }
  return n;
}

uint64_t kvs_table_host_slot_bytes(const kvs_device_layout *layout) {
  if (layout == NULL) return 0;
  kvs_table_span_rows spans[KVS_TABLE_ROW_SPANS];
  size_t n = row_spans(layout, spans);
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) bytes += spans[i].count * spans[i].width;
  return bytes;
}

kvs_status kvs_table_host_tier(kvs_table_t table, const kvs_device_layout *layout, uint64_t slots,
                               kvs_error *err) {
  if (table == NULL || layout == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_table_host_tier: %s is NULL",
                         table == NULL ? "table" : "layout");
  }
  if (table->tier != NULL) {
    return kvs_error_set(err, KVS_ERR_CONFLICT, "the table has a host tier already");
  }
  if (table->ops->host_alloc == NULL || table->ops->copy_rows == NULL ||
      table->ops->memory == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED, "this %s table cannot keep a host tier",
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
  kvs_table_span_rows spans[KVS_TABLE_ROW_SPANS];
  size_t n = row_spans(layout, spans);
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
  void *base = NULL;
  int64_t *mapping = NULL;
  kvs_status status = table->ops->memory(table->impl, &base, &mapping, err);
  if (status != KVS_OK) return status;
  void *tier = NULL;
  if ((status = table->ops->host_alloc(table->impl, slots * slot_bytes, &tier, err))) return status;
  table->tier = tier;
  table->tier_slots = slots;
  table->slot_bytes = slot_bytes;
  table->base = base;
  memcpy(table->spans, spans, n * sizeof *spans);
  table->n_spans = n;
  memset(&table->tier_stats, 0, sizeof table->tier_stats);
  return KVS_OK;
}

void kvs_table_host_tier_free(struct kvs_table *table) {
  if (table->tier != NULL) table->ops->host_free(table->impl, table->tier);
  table->tier = NULL;
}

const unsigned char *kvs_table_host_tier_memory(const struct kvs_table *table, uint64_t *slot_bytes,
                                                uint64_t *slots) {
  if (table == NULL || table->tier == NULL) return NULL;
  if (slot_bytes != NULL) *slot_bytes = table->slot_bytes;
  if (slots != NULL) *slots = table->tier_slots;
  return table->tier;
}

void kvs_table_host_tier_stats_get(const struct kvs_table *table, kvs_table_host_tier_stats *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  if (table != NULL) *out = table->tier_stats;
}

static kvs_status flush(struct kvs_table *t, size_t *queued, kvs_error *err) {
  kvs_status status = *queued > 0 ? t->ops->copy_rows(t->impl, t->copies, *queued, err) : KVS_OK;
  *queued = 0;
  return status;
}

kvs_status kvs_table_move_rows(struct kvs_table *t, const kvs_journal_entry *entries, size_t n,
                               kvs_error *err) {
  if (t->tier == NULL || n == 0 || entries == NULL) return KVS_OK;
  uint64_t start = kvs_now_ns();
  uint64_t n_full_pages = t->dims.full_token / t->dims.page;
  kvs_host_move m;
  size_t moves = 0;
  for (size_t i = 0; i < n; i++) {
    if (!kvs_window_pool_host_move_of(&entries[i], &m)) continue;
    if (m.full_page >= n_full_pages || m.slot >= t->tier_slots) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "journal entry %zu %s full page %llu %s host slot %llu; the table has "
                           "%llu full pages and %llu slots",
                           i, m.fetch ? "fetches" : "spills", (unsigned long long)m.full_page,
                           m.fetch ? "from" : "into", (unsigned long long)m.slot,
                           (unsigned long long)n_full_pages, (unsigned long long)t->tier_slots);
    }
    moves++;
  }
  if (moves == 0) return KVS_OK;
  size_t queued = 0;
  kvs_status status = KVS_OK;
  for (size_t i = 0; i < n && status == KVS_OK; i++) {
    if (!kvs_window_pool_host_move_of(&entries[i], &m)) continue;
    unsigned char *slot = t->tier + m.slot * t->slot_bytes;
    for (size_t s = 0; s < t->n_spans; s++) {
      const kvs_table_span_rows *r = &t->spans[s];
      unsigned char *rows = t->base + r->offset + m.full_page * r->page_step;
      kvs_row_copy c = {m.fetch ? (void *)rows : (void *)slot,
                        m.fetch ? (const void *)slot : (const void *)rows,
                        r->width,
                        r->count,
                        m.fetch ? r->stride : r->width,
                        m.fetch ? r->width : r->stride,
                        !m.fetch};
      t->copies[queued++] = c;
      slot += r->count * r->width;
      if (queued == KVS_TABLE_COPY_BATCH) status = flush(t, &queued, err);
      if (status != KVS_OK) break;
    }
    if (m.fetch) {
      t->tier_stats.fetches++;
    } else {
      t->tier_stats.spills++;
    }
    t->tier_stats.bytes += t->slot_bytes;
  }
  if (status == KVS_OK) status = flush(t, &queued, err);
  t->tier_stats.copy_ns += kvs_now_ns() - start;
  return status;
}

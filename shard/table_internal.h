/* The table's own state, shared by table.c (the calls every table takes)
 * and table_rows.c (the host tier's rows). Private to shard/. */
#ifndef KVS_SHARD_TABLE_INTERNAL_H
#define KVS_SHARD_TABLE_INTERNAL_H

#include "shard/table.h"

/* Where one span's rows of full page p lie: layer l's at
 * base + offset + l x stride + p x page_step, width bytes. */
typedef struct kvs_table_span_rows {
  uint64_t offset, stride, count, width, page_step;
} kvs_table_span_rows;

/* Compressed (two ratios) and indexer. */
#define KVS_TABLE_ROW_SPANS 3

/* Copies queued per call of the implementation's copy_rows. */
#define KVS_TABLE_COPY_BATCH 48

struct kvs_table {
  const kvs_table_ops *ops;
  void *impl;
  kvs_table_dims dims;
  kvs_table_limits limits;
  int device;
  uint64_t bytes;
  /* The host tier (none: tier NULL). */
  unsigned char *tier;
  uint64_t tier_slots, slot_bytes;
  unsigned char *base; /* the carve the rows live in */
  kvs_table_span_rows spans[KVS_TABLE_ROW_SPANS];
  size_t n_spans;
  kvs_row_copy copies[KVS_TABLE_COPY_BATCH];
  kvs_table_host_tier_stats tier_stats;
};

/* The journal's host moves, in order (nothing without a tier); all
 * validated before the first copy. */
kvs_status kvs_table_move_rows(struct kvs_table *table, const kvs_journal_entry *entries, size_t n,
                               kvs_error *err);

/* Frees the tier (table destroy). */
void kvs_table_host_tier_free(struct kvs_table *table);

#endif /* KVS_SHARD_TABLE_INTERNAL_H */

/* The table's own state, shared by table.c (the calls every table takes)
 * and table_rows.c (the host tier's rows). Private to shard/. */
#ifndef KVS_SHARD_TABLE_INTERNAL_H
#define KVS_SHARD_TABLE_INTERNAL_H

#include "shard/table.h"

/* A ring span (attention ratio 4 or 128, indexer) whose rings are per
 * request slot: slot s's `ring` rows of layer l at base + offset + l x
 * stride + s x ring x row_bytes; with tail states (ratio 4) window page
 * w's at row tail_first + w x KVS_TAIL_STATE_ROWS (core/cost_model.h). */
typedef struct kvs_table_ring_span {
  uint64_t offset, stride, count, row_bytes, ring;
  uint64_t tail_first; /* 0: no tail states in this span */
} kvs_table_ring_span;

/* Attention ratio 4, attention ratio 128, indexer. */
#define KVS_TABLE_RING_SPANS 3

/* Copies queued per call of the implementation's copy_rows. */
#define KVS_TABLE_COPY_BATCH 48

struct kvs_table {
  const kvs_table_ops *ops;
  void *impl;
  kvs_table_dims dims;
  kvs_table_limits limits;
  int device;
  uint64_t bytes;
  /* The engine's rows (kvs_table_keep_rows; base NULL: not kept). */
  unsigned char *base; /* the carve the rows live in */
  uint64_t carve_bytes;
  uint64_t n_win_pages;
  uint64_t n_req_slots; /* the dummy included; 0 without per-request rings */
  kvs_table_ring_span rings[KVS_TABLE_RING_SPANS];
  size_t n_rings;
  /* The host tier (none: chunks NULL): n_chunks allocations of
   * chunk_slots whole slots (the last may hold fewer). */
  unsigned char **chunks;
  size_t n_chunks;
  uint64_t chunk_slots;
  uint64_t tier_slots, slot_bytes;
  kvs_table_span_rows spans[KVS_TABLE_ROW_SPANS];
  size_t n_spans;
  unsigned char *bounce; /* kvs_table_bounce's slot (NULL: not made) */
  uint64_t bounce_bytes;
  kvs_row_copy copies[KVS_TABLE_COPY_BATCH];
  kvs_table_row_stats row_stats;
};

/* The journal's row work, in order (kvs_table_keep_rows: ring clears,
 * restores, host moves); all validated before the first copy. */
kvs_status kvs_table_move_rows(struct kvs_table *table, const kvs_journal_entry *entries, size_t n,
                               kvs_error *err);

/* Frees the tier (table destroy). */
void kvs_table_host_tier_free(struct kvs_table *table);

#endif /* KVS_SHARD_TABLE_INTERNAL_H */

/* The binding journal: every change the window allocator makes to the
 * full -> window mapping, in order, as fixed-width entries.
 *
 * Tensor-parallel ranks must hold identical bindings or they derive
 * different ring locations and read each other's carry state. The leader
 * allocates; its journal is shipped to the followers, who replay it onto
 * their mirror pools (kvs_window_pool_apply). An entry is 16 bytes, so a
 * step's broadcast costs 16 bytes per bound or freed page. */
#ifndef KVS_POOL_JOURNAL_H
#define KVS_POOL_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* full_page now maps to window_page (a page the allocator handed out), or,
 * when window_page is KVS_JOURNAL_FREED, its window page went back to the
 * free list. Pages are indices (base / P), not slots. */
typedef struct kvs_journal_entry {
  uint64_t full_page;
  int64_t window_page;
} kvs_journal_entry;

#define KVS_JOURNAL_FREED (-1)

/* A request-slot entry (per-request compress-state rings) sets this bit in
 * full_page; the rest of full_page is the slot, and window_page the
 * request bound to it (>= 0) or KVS_JOURNAL_FREED. Full pages never reach
 * the bit (a history of 2^63 pages). */
#define KVS_JOURNAL_SLOT_TAG (UINT64_C(1) << 63)

/* A bounded FIFO of entries. Appends that do not fit are refused as a
 * whole, before anything changes, so an operation is journaled entirely or
 * not performed. */
typedef struct kvs_journal *kvs_journal_t;

/* A journal of `capacity` entries (0: one that holds none). out NULL is
 * KVS_ERR_INVALID_ARGUMENT. */
kvs_status kvs_journal_create(size_t capacity, kvs_journal_t *out, kvs_error *err);
/* NULL is accepted. */
void kvs_journal_destroy(kvs_journal_t journal);

/* The accessors read 0 for a NULL journal. */
size_t kvs_journal_capacity(const struct kvs_journal *journal);
size_t kvs_journal_pending(const struct kvs_journal *journal); /* entries not drained */
size_t kvs_journal_room(const struct kvs_journal *journal);
/* Entries ever appended: a step's journal covers [seq - pending, seq). */
uint64_t kvs_journal_sequence(const struct kvs_journal *journal);

/* Appends one entry. A full journal (a 0-entry one always is) is
 * KVS_ERR_JOURNAL_FULL naming the counts and the entry, nothing appended;
 * a NULL journal KVS_ERR_INVALID_ARGUMENT. */
kvs_status kvs_journal_push(kvs_journal_t journal, uint64_t full_page, int64_t window_page,
                            kvs_error *err);

/* Moves up to cap of the oldest entries into out, in order; *n_out (may be
 * NULL) says how many. A NULL journal or out moves none. */
void kvs_journal_drain(kvs_journal_t journal, kvs_journal_entry *out, size_t cap, size_t *n_out);

#ifdef __cplusplus
}
#endif

#endif /* KVS_POOL_JOURNAL_H */

/* CPU references for the device-table kernels (cuda/): the batch forms of
 * the window pool's single-request lookups, written over raw arrays so the
 * kernels and these functions read and write exactly the same things.
 *
 * A device table is the window pool's mapping uploaded as is: full_token
 * int64 rows (full loc -> window slot, -1 when unbound) plus the trailing
 * sentinel row holding -1. Every function here is the specification of one
 * kernel; the device tests compare them bit for bit, and the CPU tests
 * prove each equals the pool's own single-request function
 * (kvs_window_pool_translate, kvs_state_loc, kvs_window_pool_window_ctx,
 * kvs_window_pool_apply's effect on the mapping).
 *
 * Bad data inside a batch is reported, not refused: a kernel cannot take
 * back a launch, so a location outside the table reads as -1 and is counted
 * in a kvs_batch_fault (how many, and the lowest index at fault). Bad
 * arguments (dimensions, NULL arrays) are refused before anything is
 * written, as everywhere else: KVS_ERR_INVALID_ARGUMENT naming the
 * argument (an array only when the batch has items). */
#ifndef KVS_CORE_DEVICE_REF_H
#define KVS_CORE_DEVICE_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cost_model.h"
#include "pool/journal.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shape of a full -> window table: map has full_token + 1 rows. */
typedef struct kvs_table_dims {
  uint64_t page;        /* P: window page, sliding window, ring width */
  uint64_t full_token;  /* whole pages of P; the last full page is the dummy */
  uint64_t n_win_slots; /* whole pages of P; the last window page is the dummy */
} kvs_table_dims;

/* Page, history and window must be whole pages (at least one each), and
 * every slot must fit in int64 (the table stores slots as int64). */
kvs_status kvs_table_dims_check(const kvs_table_dims *dims, kvs_error *err);

/* What a batch found wrong in its data: `count` items at fault, the
 * lowest-indexed at `first_index` (UINT64_MAX when count is 0). The index
 * is the item's position in the batch: an entry, a loc, a slot, a request.
 * The device accumulates the same record with atomics, so both orders of
 * evaluation give the same numbers. */
typedef struct kvs_batch_fault {
  uint64_t count;
  uint64_t first_index;
} kvs_batch_fault;

#define KVS_BATCH_FAULT_INIT \
  { 0, UINT64_MAX }

/* ---- apply a binding journal ---- */

/* Whether entry e could be applied to a table of these dims: the full page
 * is an allocatable one (not the dummy, inside the history), and the
 * window page is an allocatable one or KVS_JOURNAL_FREED. These are the
 * range checks kvs_window_pool_apply makes; the free-list checks need the
 * host pool and stay there.
 *
 * A request-slot entry (KVS_JOURNAL_SLOT_TAG set in full_page) fits: it is
 * not a table entry; the host pool validates it. A table holds only the
 * full -> window mapping, so every table path (this check,
 * kvs_table_check_journal, kvs_ref_apply_journal, the device apply) skips
 * slot entries without writing or faulting. False for a NULL entry and for
 * dims (NULL, or zero page) that kvs_table_dims_check refuses. */
bool kvs_journal_entry_fits(const kvs_table_dims *dims, const kvs_journal_entry *entry);

/* Refuses the batch at the first entry that does not fit, naming it
 * (request-slot entries are accepted: see kvs_journal_entry_fits). */
kvs_status kvs_table_check_journal(const kvs_table_dims *dims, const kvs_journal_entry *entries,
                                   size_t n, kvs_error *err);

/* Replays entries in order onto map: a bind writes window_page*P + offset
 * into each row of its full page, a free writes -1. Where several entries
 * name one full page the last one wins, as in a sequential replay. An
 * entry that does not fit is skipped and counted in *fault (when
 * non-NULL), so one bad entry cannot write outside the table; callers that
 * want all-or-nothing run kvs_table_check_journal first. The sentinel row
 * is never written. Request-slot entries are skipped: no write, no fault. */
kvs_status kvs_ref_apply_journal(int64_t *map, const kvs_table_dims *dims,
                                 const kvs_journal_entry *entries, size_t n, kvs_batch_fault *fault,
                                 kvs_error *err);

/* ---- translate ---- */

/* out[i] = the window slot of locs[i]: a negative loc reads the sentinel
 * (-1), full_token reads the sentinel, past it reads -1 and is a fault. */
kvs_status kvs_ref_translate(const int64_t *map, const kvs_table_dims *dims, const int64_t *locs,
                             size_t n, int64_t *out, kvs_batch_fault *fault, kvs_error *err);

/* ---- ring (compress-state) locations ---- */

/* Ring slots per window page of the two ring kinds: the ratio-4 attention
 * ring and the indexer ring use 8, the ratio-128 attention ring 128
 * (kvs_ring_size_for_ratio). */
#define KVS_RING_SLOTS_CSA 8u
#define KVS_RING_SLOTS_HCA 128u

/* For each window slot, its state location in the ratio-4 ring (out_csa,
 * also the indexer ring's) and in the ratio-128 ring (out_hca), as
 * kvs_state_loc derives them; either output may be NULL, not both. A
 * negative slot gives -1; a slot past the window pool gives -1 and is a
 * fault. A ring whose size does not divide P is refused. */
kvs_status kvs_ref_state_locs(const kvs_table_dims *dims, const int64_t *slots, size_t n,
                              int64_t *out_csa, int64_t *out_hca, kvs_batch_fault *fault,
                              kvs_error *err);

/* ---- ring locations of a decode batch, per page or per request ---- */

/* Where a pool's rings live, for the batch state-location kernels. */
typedef struct kvs_state_placement {
  kvs_state_rings rings; /* from core/cost_model.h */
  uint64_t page;         /* P */
  uint64_t n_win_slots;  /* window slots; a window slot at or past them faults */
  uint64_t n_req_slots;  /* request slots (dummy included); 0 with per-page rings */
} kvs_state_placement;

/* The placement of a pool of these sizes; for NULL, a zero placement
 * (page 0), which kvs_state_placement_check refuses. */
kvs_state_placement kvs_state_placement_of(const kvs_pool_sizes *sizes);

/* What the batch state locations need of a placement: a known rings
 * value, P of at least 1 that the per-page ring sizes (8 and 128) divide
 * (only for ring kinds placed per page), n_win_slots in int64, and
 * request slots exactly when some ring kind is per request (at most
 * 2^56, so every location fits int64). */
kvs_status kvs_state_placement_check(const kvs_state_placement *placement, kvs_error *err);

/* For each batch row r: the ratio-4 ring location (the attention ring's,
 * which the indexer ring shares) and the ratio-128 ring location of position
 * positions[r]. A ring kind placed per window page derives it from the
 * window slot own[r] (kvs_state_loc with ring 8 or 128); one placed per
 * request from the request slot slots[r] and the position
 * (kvs_request_state_loc). An idle row (positions[r] < 0) gives -1 without
 * a fault; own[r] == -1 (unbound) or slots[r] == -1 gives -1 without a fault;
 * a window slot >= n_win_slots or a request slot >= n_req_slots gives -1 and
 * faults row r. slots may be NULL when no ring kind is per request; out_csa
 * or out_hca may be NULL (not both).
 *
 * In detail: any negative own or slot reads as unbound (-1, no fault), as
 * in kvs_state_loc and kvs_request_state_loc. Only the requested outputs
 * are computed, and a row faults (once, whichever rings it reached past)
 * only through an input one of them reads. own may be NULL when no ring
 * kind is per window page. A placement kvs_state_placement_check refuses,
 * slots NULL with a per-request ring kind, or a NULL positions array is
 * refused before anything is written. */
kvs_status kvs_ref_batch_state_locs(const kvs_state_placement *placement, const int64_t *own,
                                    const int64_t *slots, const int64_t *positions, size_t n,
                                    int64_t *out_csa, int64_t *out_hca, kvs_batch_fault *fault,
                                    kvs_error *err);

/* ---- ring context from block tables ---- */

/* Per-request block tables as serving engines keep them: row r holds
 * `stride` full-block indices of request r (-1 where no block is
 * assigned), block b covering positions [b*block_size, (b+1)*block_size).
 * Position p of request r is full loc pages[r*stride + p/block_size] *
 * block_size + p % block_size. block_size need not equal P. */
typedef struct kvs_block_tables {
  const int32_t *pages;
  uint64_t stride;     /* entries per request row, at least 1 */
  uint64_t block_size; /* tokens per block, 1 .. 2^32 - 1 */
} kvs_block_tables;

kvs_status kvs_block_tables_check(const kvs_block_tables *tables, size_t n_req, kvs_error *err);

/* The ring context of one decode step for n_req requests, each what
 * kvs_window_pool_window_ctx gives for that request's position:
 * own[r] and prev[r] are the window slots of positions[r] and of its
 * predecessor (position 0 reads itself), ring[r*P + j] the slot of the
 * latest position p <= positions[r] with p % P == j, or -1 where the
 * sequence has not reached j. A negative position is an idle row (graph
 * padding): every output -1, no fault. A position whose block lies past
 * the row, or whose loc lies past the sentinel, reads -1 and faults
 * request r. */
kvs_status kvs_ref_ring_ctx(const int64_t *map, const kvs_table_dims *dims,
                            const kvs_block_tables *tables, const int64_t *positions, size_t n_req,
                            int64_t *own, int64_t *prev, int64_t *ring, kvs_batch_fault *fault,
                            kvs_error *err);

/* The same ring contexts, computed by runs instead of slot by slot: with
 * blocks of P tokens (tables->block_size == dims->page, as the node uses)
 * ring slot j holds position b*P + j of the position's own block b for
 * j <= pos % P and of the block before for the rest, so each ring row is
 * at most two contiguous runs of the table, copied whole. Equal to
 * kvs_ref_ring_ctx bit for bit, faults included (a test holds this over
 * random tables); the host twin of the device tables runs it. Another
 * block size is refused (KVS_ERR_INVALID_ARGUMENT). */
kvs_status kvs_host_ring_ctx(const int64_t *map, const kvs_table_dims *dims,
                             const kvs_block_tables *tables, const int64_t *positions, size_t n_req,
                             int64_t *own, int64_t *prev, int64_t *ring, kvs_batch_fault *fault,
                             kvs_error *err);

/* ---- a transfer's rows digests ---- */

/* One unit of rows to digest: `bytes` bytes at `rows` (device memory for
 * the kernel), hashed with `seed` (the unit's pool, layer and positions). */
typedef struct kvs_rows_unit {
  const void *rows;
  uint64_t bytes;
  uint64_t seed;
} kvs_rows_unit;

/* The digest the rows digest kernel computes for one unit (core/mix.h's
 * terms): word i is bytes 8i..8i+7 read little-endian, the last one
 * zero-padded past `bytes`. rows NULL: the digest of no bytes. */
uint64_t kvs_ref_rows_digest(const void *rows, uint64_t bytes, uint64_t seed);

/* Units a device table digests a launch: its units and digests on the
 * device and their pinned staging, counted in the plan (plan/node_overhead.c). */
#define KVS_ROWS_DIGEST_BATCH 256

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_DEVICE_REF_H */

/* One device's KV tiers and its full -> window table, in one allocation,
 * and the per-step kernels that keep the table in step with the host pool
 * and read ring locations from it.
 *
 * The handle owns a single cudaMalloc of layout->total_bytes carved as
 * plan/device_layout.h says. The table starts as a fresh window pool's
 * mapping (every row -1, the dummy full page bound to the dummy window
 * page, the sentinel -1); a follower keeps it equal to its host mirror by
 * applying each step's binding journal here.
 *
 * Every kernel call is asynchronous on the caller's stream, launches one
 * kernel (the journal apply two, each O(n) in the batch), allocates
 * nothing and checks its arguments before launching; an argument error
 * launches nothing. Data errors inside a batch (a loc past the table, an
 * entry naming a page that does not exist) cannot be refused after
 * launch: they read as -1 and are counted in the table's per-kernel fault
 * records, read with kvs_device_tables_faults.
 * Each call makes the table's device current for its duration and then
 * puts the calling thread's context back as it was -- none, for a thread
 * that never chose a device (backends/cuda/cuda_device.h). Pointers named d_* are
 * device pointers.
 *
 * Ordering is the caller's, as in CUDA: a call on stream A is ordered
 * after earlier work on A only. Kernels that read the table on another
 * stream must wait for the apply (an event), and device entries must stay
 * unchanged until the apply has run (for entries in a communicator's
 * buffer, see kvs_comm_reads_done in shard/comm.h). */
#ifndef KVS_BACKENDS_CUDA_DEVICE_TABLES_H
#define KVS_BACKENDS_CUDA_DEVICE_TABLES_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "core/device_ref.h"
#include "pool/journal.h"
#include "core/status.h"
#include "plan/device_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_device_tables *kvs_device_tables_t;

/* Allocates layout->total_bytes on `device`, zeroes every tier, and
 * initialises the table and the fault records. Fails with KVS_ERR_CUDA
 * naming the call and the CUDA error (no device, out of memory, ...);
 * nothing stays allocated then. */
kvs_status kvs_device_tables_create(int device, const kvs_device_layout *layout,
                                    kvs_device_tables_t *out, kvs_error *err);
/* Frees the allocation; NULL is accepted. Waits for nothing: the caller
 * has finished the work it queued on the tables. */
void kvs_device_tables_destroy(kvs_device_tables_t tables);

int kvs_device_tables_device(const struct kvs_device_tables *tables);
const kvs_device_layout *kvs_device_tables_layout(const struct kvs_device_tables *tables);
kvs_table_dims kvs_device_tables_dims(const struct kvs_device_tables *tables);
/* The allocation's base and the table (full_token + 1 int64 rows). */
void *kvs_device_tables_base(const struct kvs_device_tables *tables);
int64_t *kvs_device_tables_mapping(const struct kvs_device_tables *tables);

/* The device address of a tier's region for a layer, as
 * kvs_device_layout_region finds it. */
kvs_status kvs_device_tables_region(const struct kvs_device_tables *tables, kvs_device_tier tier,
                                    size_t layer, void **d_ptr, kvs_device_region *region,
                                    kvs_error *err);

/* Replaces the table with a host mapping (kvs_window_pool_mapping: rows ==
 * full_token + 1, the last -1). Synchronous: after all work queued on the
 * device, and landed when it returns, so a kernel on any stream queued
 * after it reads the new table. A mapping of the wrong size or with a
 * written sentinel is refused before anything is copied. */
kvs_status kvs_device_tables_upload_mapping(kvs_device_tables_t tables, const int64_t *mapping,
                                            size_t rows, kvs_error *err);
/* Copies the table (rows == full_token + 1) to the host after the work
 * queued on `stream` so far, in stream order: chunks through the tables'
 * pinned download buffer, the host waiting on each chunk's event, never on
 * the device (a check that found the digests differ must not stall the
 * engine's other streams, nor the communicator's). Returns once `mapping`
 * holds the table. */
kvs_status kvs_device_tables_read_mapping(const struct kvs_device_tables *tables, int64_t *mapping,
                                          size_t rows, cudaStream_t stream, kvs_error *err);
/* The same after all work queued on the device (a device synchronisation
 * first): for tests and tools, never a node's path. */
kvs_status kvs_device_tables_download_mapping(const struct kvs_device_tables *tables,
                                              int64_t *mapping, size_t rows, kvs_error *err);

/* Applies a step's binding journal from host memory: validated as a whole
 * first (kvs_table_check_journal: nothing is queued when any entry does
 * not fit), copied into the table's pinned staging before this call
 * returns (at most layout->options.journal_capacity entries, else
 * KVS_ERR_JOURNAL_FULL), then uploaded and applied on `stream`, the last
 * entry per full page winning. The entries may be reused as soon as the
 * call returns, pinned or pageable. The call first waits (on the host) for
 * the previous host-journal apply's upload and kernels, which share the
 * staging; in a stepped loop they finished long before. */
kvs_status kvs_device_tables_apply_journal(kvs_device_tables_t tables,
                                           const kvs_journal_entry *entries, size_t n,
                                           cudaStream_t stream, kvs_error *err);

/* The same for entries already on the device (after a broadcast): they
 * cannot be validated first, so an entry that does not fit is skipped and
 * faulted (kvs_ref_apply_journal's semantics); validate the host mirror's
 * copy to make a step all-or-nothing. */
kvs_status kvs_device_tables_apply_journal_device(kvs_device_tables_t tables,
                                                  const kvs_journal_entry *d_entries, size_t n,
                                                  cudaStream_t stream, kvs_error *err);

/* The same with the entry count read from device memory (*d_count, a
 * step message's count field), at most `capacity`: the launches are sized
 * for capacity and need no host round trip, so they can be captured in a
 * CUDA graph. A count past the capacity faults (apply_journal record) and
 * applies capacity entries. */
kvs_status kvs_device_tables_apply_counted(kvs_device_tables_t tables,
                                           const kvs_journal_entry *d_entries, size_t capacity,
                                           const uint32_t *d_count, cudaStream_t stream,
                                           kvs_error *err);

/* d_out[i] = the rows digest of d_units[i] (kvs_ref_rows_digest), i < n,
 * on `stream`; the units and their rows are device memory of the
 * tables' device. */
kvs_status kvs_device_tables_rows_digest(kvs_device_tables_t tables, const kvs_rows_unit *d_units,
                                         size_t n, uint64_t *d_out, cudaStream_t stream,
                                         kvs_error *err);

/* *d_out = the table's binding digest (kvs_table_digest), on `stream`:
 * zeroed, then summed by a kernel. */
kvs_status kvs_device_tables_digest(kvs_device_tables_t tables, unsigned long long *d_out,
                                    cudaStream_t stream, kvs_error *err);

/* d_out[i] = the window slot of d_locs[i] (kvs_ref_translate). */
kvs_status kvs_device_tables_translate(kvs_device_tables_t tables, const int64_t *d_locs, size_t n,
                                       int64_t *d_out, cudaStream_t stream, kvs_error *err);

/* Ring locations of window slots in the ratio-4 ring (and indexer ring)
 * and the ratio-128 ring, both from one pass; either output may be NULL
 * (kvs_ref_state_locs). */
kvs_status kvs_device_tables_state_locs(kvs_device_tables_t tables, const int64_t *d_slots,
                                        size_t n, int64_t *d_out_csa, int64_t *d_out_hca,
                                        cudaStream_t stream, kvs_error *err);

/* The ratio-4 and ratio-128 ring locations of a decode batch's rows
 * (kvs_ref_batch_state_locs) under the placement of the layout the tables
 * were created from (kvs_state_placement_of(&layout->sizes)): per window
 * page from d_own (window slots, e.g. a ring context's own), per request
 * from d_slots (request slots) and d_positions. d_slots may be NULL when
 * no requested ring kind is per request, d_own when none is per page;
 * either output may be NULL, not both. A missing input, a per-page ring
 * that does not divide P or a placement kvs_state_placement_check refuses
 * is refused before anything is queued. Faults (a slot past its pool) go
 * to the state_locs record. */
kvs_status kvs_device_tables_batch_state_locs(kvs_device_tables_t tables, const int64_t *d_own,
                                              const int64_t *d_slots, const int64_t *d_positions,
                                              size_t n, int64_t *d_out_csa, int64_t *d_out_hca,
                                              cudaStream_t stream, kvs_error *err);

/* kvs_device_tables_batch_state_locs over *d_count rows (device memory,
 * at most n; NULL: n), the launch sized for n. */
kvs_status kvs_device_tables_batch_state_locs_counted(kvs_device_tables_t tables,
                                                      const int64_t *d_own, const int64_t *d_slots,
                                                      const int64_t *d_positions, size_t n,
                                                      const uint64_t *d_count, int64_t *d_out_csa,
                                                      int64_t *d_out_hca, cudaStream_t stream,
                                                      kvs_error *err);
/* The ring context of n_req requests (kvs_ref_ring_ctx): block_tables->pages
 * and every array are device pointers; d_ring holds n_req * P slots. */
kvs_status kvs_device_tables_ring_ctx(kvs_device_tables_t tables,
                                      const kvs_block_tables *block_tables,
                                      const int64_t *d_positions, size_t n_req, int64_t *d_own,
                                      int64_t *d_prev, int64_t *d_ring, cudaStream_t stream,
                                      kvs_error *err);

/* kvs_device_tables_ring_ctx over *d_count requests (device memory, at
 * most n_req; NULL: n_req), the launch sized for n_req. */
kvs_status kvs_device_tables_ring_ctx_counted(kvs_device_tables_t tables,
                                              const kvs_block_tables *block_tables,
                                              const int64_t *d_positions, size_t n_req,
                                              const uint64_t *d_count, int64_t *d_own,
                                              int64_t *d_prev, int64_t *d_ring, cudaStream_t stream,
                                              kvs_error *err);
/* Reads the fault records once `stream`'s work so far is done (it waits). */
kvs_status kvs_device_tables_faults(const struct kvs_device_tables *tables, cudaStream_t stream,
                                    kvs_device_faults *out, kvs_error *err);
/* Resets every fault record, queued on `stream`. */
kvs_status kvs_device_tables_clear_faults(kvs_device_tables_t tables, cudaStream_t stream,
                                          kvs_error *err);
#ifdef __cplusplus
}
#endif

#endif /* KVS_BACKENDS_CUDA_DEVICE_TABLES_H */

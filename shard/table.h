/* One rank's full -> window table where reads of ring locations happen:
 * on the GPU (backends/cuda/device_tables and its kernels) or, where there is no
 * GPU, a host twin whose "kernels" are core/device_ref's CPU references,
 * which the device kernels equal bit for bit. The node drives either
 * through these calls, so the whole pipeline runs and is tested on CPU.
 *
 * The table follows the host pool by applying each step's binding journal
 * (the last entry per full page wins, as in a sequential replay) and
 * computes the ring context of a batch of requests from their block
 * tables and positions. Buffers for the largest batch are allocated at
 * create; no call on the step path allocates.
 *
 * Bad arguments are refused before anything is queued. Bad data inside a
 * batch (a page past the table, a position past its block row) reads -1
 * and is counted in the fault records (kvs_table_faults). */
#ifndef KVS_SHARD_TABLE_H
#define KVS_SHARD_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/registry.h"
#include "core/device_ref.h"
#include "pool/journal.h"
#include "core/status.h"
#include "plan/device_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_table *kvs_table_t;

typedef enum kvs_table_kind {
  KVS_TABLE_HOST = 0, /* the CPU references over host memory */
  KVS_TABLE_CUDA = 1  /* backends/cuda/device_tables on a GPU */
} kvs_table_kind;

/* "cpu", "cuda". */
const char *kvs_table_kind_name(kvs_table_kind kind);

/* The largest ring-context batch: n_req rows of a block table `stride`
 * blocks wide. */
typedef struct kvs_table_limits {
  size_t max_requests;
  uint64_t max_blocks;
} kvs_table_limits;

/* A step's batch, in host memory: request r's block table is
 * block_table[r * stride .. r * stride + stride) (full-block indices, -1
 * unassigned, blocks of P tokens), its position positions[r] (negative:
 * an idle row), and with per-request rings its request slot slots[r] (-1:
 * none bound; the dummy slot for a graph-padded row). */
typedef struct kvs_ring_batch {
  const int32_t *block_table;
  uint64_t stride;
  const int64_t *positions;
  size_t n_req;
  const int64_t *slots; /* request slot per row; NULL with per-page rings */
  /* The node's form (kvs_node_step): the request of each row, whose slot
   * every rank resolves from its own mirror pool after the step's bindings
   * are applied (slots is then ignored). NULL: slots as given. */
  const uint64_t *requests;
} kvs_ring_batch;

/* Where a ring context lives: n_req own and prev slots and n_req * page
 * ring slots (kvs_ref_ring_ctx), and the n_req ratio-4 and ratio-128 ring
 * locations of the rows' positions (kvs_ref_batch_state_locs under the
 * table's placement), in device memory when on_device, else in host
 * memory. Valid until the next kvs_table_ring_ctx. */
typedef struct kvs_ring_result {
  const int64_t *own;
  const int64_t *prev;
  const int64_t *ring;
  size_t n_req;
  uint64_t page;
  bool on_device;
  const int64_t *csa_loc; /* ratio-4 ring (attention and indexer) location per row */
  const int64_t *hca_loc; /* ratio-128 ring location per row */
} kvs_ring_result;

/* The host twin: the table (full_token + 1 rows) and the batch buffers in
 * host memory, dims from the layout. */
kvs_status kvs_table_create_host(const kvs_device_layout *layout, const kvs_table_limits *limits,
                                 kvs_table_t *out, kvs_error *err);

/* Frees the table; NULL is accepted. */
void kvs_table_destroy(kvs_table_t table);

kvs_table_kind kvs_table_kind_of(const struct kvs_table *table);
kvs_table_dims kvs_table_dims_of(const struct kvs_table *table);
/* The CUDA device of a device table, -1 for the host twin. */
int kvs_table_device(const struct kvs_table *table);
/* Bytes this table allocated where it lives (the device carve, or the host
 * twin's mapping and batch buffers). */
uint64_t kvs_table_bytes(const struct kvs_table *table);

/* Applies one step's journal. entries is the host copy and is always
 * validated first (kvs_table_check_journal): an entry that does not fit
 * refuses the whole step before anything is queued. device_entries, when
 * not NULL, is the same entries in device memory (a device table applies
 * from it without another copy); the host twin ignores it. */
kvs_status kvs_table_apply(kvs_table_t table, const kvs_journal_entry *entries,
                           const void *device_entries, size_t n, kvs_error *err);

/* The ring context of a batch (at most limits.max_requests rows, stride at
 * most limits.max_blocks), then the rows' ring locations from it (per
 * window page from own, per request from batch->slots and the positions)
 * with the placement of the layout the table was created from
 * (kvs_state_placement_of(&layout->sizes)). *out says where it lives. A
 * ring kind the placement cannot derive (a per-page ring size that does not
 * divide P: the layout then has no layer of that kind) reads -1. A batch
 * whose placement has per-request rings but whose slots are NULL is
 * refused (KVS_ERR_INVALID_ARGUMENT) before anything is queued. Faults (a
 * slot past its pool) count in the state_locs record. */
kvs_status kvs_table_ring_ctx(kvs_table_t table, const kvs_ring_batch *batch, kvs_ring_result *out,
                              kvs_error *err);

/* Copies a result to host arrays (own, prev, csa_loc, hca_loc: n_req;
 * ring: n_req * page); waits for the work that produced it. csa_loc or
 * hca_loc may be NULL: not copied. */
kvs_status kvs_table_result_to_host(kvs_table_t table, const kvs_ring_result *result, int64_t *own,
                                    int64_t *prev, int64_t *ring, int64_t *csa_loc,
                                    int64_t *hca_loc, kvs_error *err);

/* Where the table's memory lives, for views an engine reads in place
 * (kvs_node_view): *mapping is the live full -> window table (full_token
 * + 1 int64 rows), *base the start of the layout's carve, so that a tier
 * span lies at base + span.offset. On a device both are device pointers
 * into the one cudaMalloc. The host twin keeps its mapping on its own and
 * reserves the carve's address range on the first call (mmap without
 * reserving swap: pages cost memory only once written), so its views
 * have the device's shapes and strides. */
kvs_status kvs_table_memory(kvs_table_t table, void **base, int64_t **mapping, kvs_error *err);

/* Copies the table (rows == full_token + 1) to host memory; waits. */
kvs_status kvs_table_download(kvs_table_t table, int64_t *mapping, size_t rows, kvs_error *err);

/* The fault records (waits for queued work). */
kvs_status kvs_table_faults(kvs_table_t table, kvs_device_faults *out, kvs_error *err);

/* Waits for every call queued so far. */
kvs_status kvs_table_sync(kvs_table_t table, kvs_error *err);

/* ---- the node's step ---- */

/* One step's work on the tables: the step's journal, then the ring
 * contexts of its rows. The entries were validated once, when the step
 * message was read and the mirror pool applied them, and are not checked
 * again here (the device kernels still skip and fault an entry that does
 * not fit, defensively). rows hold window rows (stride 2: the pages of
 * blocks pos/P - 1 and pos/P, rebased so each position falls in the
 * second; kvs_node_step makes them) and resolved request slots. */
typedef struct kvs_table_step_args {
  uint64_t step;
  const kvs_journal_entry *entries; /* host copy */
  size_t n;
  /* The step message in device memory, when the communicator moved it
   * there (NCCL), else NULL; the device table then reads its count and
   * entries there, in stream order after the broadcast. */
  const void *device_message;
  const kvs_ring_batch *rows; /* may be NULL or empty */
} kvs_table_step_args;

/* On a device table the whole step is queued without a host round trip
 * (the kernels read the counts from device memory), on the table's own
 * stream, after the broadcast on the communicator's and after the
 * engine's reads of the results two steps back; results alternate
 * between two buffers (step parity), so out stays valid until the step
 * after next, and out->event (a cudaEvent_t) is recorded after the work.
 * With graphs the work of each parity is captured once and replayed. */
typedef struct kvs_table_step_timing {
  uint64_t apply_ns; /* the journal's apply (queueing it, on a device) */
  uint64_t ring_ns;  /* the ring contexts (likewise) */
} kvs_table_step_timing;

kvs_status kvs_table_step(kvs_table_t table, const kvs_table_step_args *args, kvs_ring_result *out,
                          void **event, kvs_table_step_timing *timing, kvs_error *err);

/* ---- the step's contract with an engine (kvs_node_options) ---- */

/* An engine's own result buffers, fixed for the table's life, where the
 * table copies each step's results (device memory of the table's device,
 * or host memory on the host twin): own, prev, csa_loc and hca_loc hold
 * limits.max_requests rows, ring max_requests x P. */
typedef struct kvs_table_results {
  int64_t *own, *prev, *ring, *csa_loc, *hca_loc;
} kvs_table_results;

/* Before the first step: results copied into `into` (NULL: the table's
 * own, alternating by step parity), and who says when the engine has read
 * a step's results: the engine, by kvs_table_release (explicit), or the
 * order of the engine's stream at the next step (not explicit). */
kvs_status kvs_table_set_results(kvs_table_t table, const kvs_table_results *into,
                                 bool explicit_release, kvs_error *err);

/* The engine's reads of step `step`'s results are all queued on `stream`
 * (a cudaStream_t; KVS_CUDA_LEGACY_STREAM for the legacy default stream)
 * before this call: the step that next writes those results waits for
 * them on the device. The host twin has nothing to wait for. */
kvs_status kvs_table_release(kvs_table_t table, uint64_t step, void *stream, kvs_error *err);

/* KVS_OK when work can be queued on `stream` now (and on the engine's
 * stream, when stream is NULL): refused (KVS_ERR_INVALID_ARGUMENT naming
 * the stream) while it is capturing a CUDA graph, which the node's step
 * must never join. The host twin accepts every stream. */
kvs_status kvs_table_check_stream(kvs_table_t table, void *stream, kvs_error *err);

/* The table's binding digest: the sum of kvs_binding_digest_term over its
 * bound full pages (the dummy included), which equals the mirror pool's
 * page digest when the table follows it. On a device it is computed there
 * and 8 bytes come back (a check waits for it). */
kvs_status kvs_table_digest(kvs_table_t table, uint64_t *out, kvs_error *err);

/* A transfer's digests of units of the engine's rows, where they live:
 * out[i] for units[i] (rows, bytes, seed: core/device_ref.h). The host
 * twin hashes each with XXH3; a device table runs the rows digest kernel
 * (kvs_ref_rows_digest) on the engine's stream, so after the engine's
 * writes queued before the call, and returns once the digests are back
 * (refused while that stream captures a graph). Two tables' digests
 * compare only when their kinds (kvs_table_kind_of) are equal: the
 * function follows where the rows live. A unit of no bytes or outside the
 * table's memory is refused (KVS_ERR_OUT_OF_RANGE naming it) before
 * anything runs. */
kvs_status kvs_table_rows_digest(kvs_table_t table, const kvs_rows_unit *units, size_t n,
                                 uint64_t *out, kvs_error *err);

/* ---- the engine's rows a journal moves (shard/table_rows.c) ---- */

/* Makes the table keep the engine's rows in step with each journal it
 * applies (kvs_table_apply, kvs_table_step), in journal order and before
 * the step's own work: a request slot the journal binds has its
 * per-request rings cleared (zero bytes: a ring is never a previous
 * request's), and an exact prefix hit's restore (kvs_window_pool_restore_of)
 * copies its tail's state rows into the hit's ring. A host tier's moves
 * (kvs_table_host_tier, which calls this) go in the same order. A node
 * whose tables hold no KV (index_only) does not call it. On a device the
 * work is queued on the engine's stream when the table has one, else on
 * its own. Idempotent. */
kvs_status kvs_table_keep_rows(kvs_table_t table, const kvs_device_layout *layout, kvs_error *err);

/* ---- the host tier's rows (shard/table_rows.c) ---- */

/* Where one span's rows of full page p lie: layer l's at
 * base + offset + l x stride + p x page_step, width bytes (rows of
 * row_bytes); which tier (and ratio, compressed) they are. */
typedef struct kvs_table_span_rows {
  uint64_t offset, stride, count, width, page_step;
  kvs_device_tier tier;
  uint32_t ratio;
  uint64_t row_bytes;
} kvs_table_span_rows;

/* Compressed (two ratios) and indexer. */
#define KVS_TABLE_ROW_SPANS 3

/* The spans a host slot holds, in slot order (out: KVS_TABLE_ROW_SPANS
 * entries); returns how many. What a spill or fetch copies, for a
 * benchmark's baseline to copy the same way. */
size_t kvs_table_host_spans(const kvs_device_layout *layout, kvs_table_span_rows *out);

/* What one host slot holds: one full page's compressed and indexer rows
 * (page / ratio rows of each such layer, packed span by span in carve
 * order, layer by layer). 0 for a layout without such rows. */
uint64_t kvs_table_host_slot_bytes(const kvs_device_layout *layout);

/* What one allocation of the host tier holds at most, whole slots: a
 * 128 GiB tier (1 TiB at tp 8) is 128 pinned allocations, not one the
 * driver must find and pin at once. */
#define KVS_TABLE_HOST_CHUNK_BYTES ((uint64_t)1 << 30)

/* Gives the table a host tier of `slots` slots of
 * kvs_table_host_slot_bytes(layout) each (the layout the table was made
 * from): pinned host memory on a device, allocated in chunks of
 * KVS_TABLE_HOST_CHUNK_BYTES (kvs_table_host_tier_chunked), each a whole
 * number of slots, so that no slot, and no copy, straddles two. On a
 * device each chunk is pinned by the calling thread (the node's, bound to
 * the GPU's NUMA node with bind_numa, whose memory policy the driver's
 * pages follow); a chunk that fails frees the ones before it and names
 * the chunk, the tier's bytes and RLIMIT_MEMLOCK. From then on every journal the
 * table applies (kvs_table_apply, kvs_table_step) first moves rows, in
 * journal order (kvs_window_pool_host_move_of): a spill copies its full
 * page's rows into its slot, a fetch its slot's rows into its full page.
 * A move naming a page or slot past the tier refuses the whole journal
 * before anything is copied. On a device the copies are queued on the
 * engine's stream when the table has one (after the engine's writes of
 * earlier steps, before its work after this step), else on the table's
 * own. Once per table (KVS_ERR_CONFLICT after). */
kvs_status kvs_table_host_tier(kvs_table_t table, const kvs_device_layout *layout, uint64_t slots,
                               kvs_error *err);
/* The same in chunks of at most chunk_bytes (at least one slot each). */
kvs_status kvs_table_host_tier_chunked(kvs_table_t table, const kvs_device_layout *layout,
                                       uint64_t slots, uint64_t chunk_bytes, kvs_error *err);

/* Slot `slot`'s memory (slot bytes) and the tier's shape; NULL without a
 * tier or past its slots. Moves still queued on a device may be writing
 * it: sync first. */
/* One slot's worth of the table's host memory (pinned on a device), made
 * once and kept until the table goes: the disk tier's buffer, through
 * which a block's rows pass between a page and the store. NULL when the
 * table keeps no rows or cannot allocate it (err says why). */
unsigned char *kvs_table_bounce(struct kvs_table *table, kvs_error *err);
/* Copies full page `full_page`'s rows (every span of a slot, in slot
 * order) into `buffer` (into_page false) or from it into the page, and
 * waits for the copy: the page's earlier work is done first, and the
 * buffer may be reused at once. */
kvs_status kvs_table_page_rows(struct kvs_table *table, uint64_t full_page, unsigned char *buffer,
                               bool into_page, kvs_error *err);
const unsigned char *kvs_table_host_tier_slot(const struct kvs_table *table, uint64_t slot,
                                              uint64_t *slot_bytes, uint64_t *slots);

/* Rows moved so far (host-tier spills and fetches and their bytes, ring
 * clears, tail-state restores), and the host time spent queueing (or, on
 * the host twin, doing) the work. */
typedef struct kvs_table_row_stats {
  uint64_t spills, fetches;
  uint64_t bytes;
  uint64_t clears, restores;
  uint64_t copy_ns;
} kvs_table_row_stats;

void kvs_table_row_stats_get(const struct kvs_table *table, kvs_table_row_stats *out);

/* Where a row copy goes: the table's memory to the host tier (a spill),
 * back (a fetch), within the table's memory (a restore), or zero bytes
 * into it (a clear: src NULL). */
typedef enum kvs_row_op {
  KVS_ROW_TO_HOST = 0,
  KVS_ROW_FROM_HOST = 1,
  KVS_ROW_WITHIN = 2,
  KVS_ROW_ZERO = 3
} kvs_row_op;

/* One strided copy: `height` runs of `width` bytes, `src_pitch` apart in
 * the source and `dst_pitch` apart in the destination. */
typedef struct kvs_row_copy {
  void *dst;
  const void *src;
  uint64_t width, height, dst_pitch, src_pitch;
  kvs_row_op op;
} kvs_row_copy;

/* Copies now, in the table's memory or between it and the host (the host
 * tier's copy operations, KVS_ROW_WITHIN, _TO_HOST, _FROM_HOST), and
 * returns once they landed. */
kvs_status kvs_table_copy_now(kvs_table_t table, const kvs_row_copy *copies, size_t n,
                              kvs_error *err);

/* ---- for table implementations ---- */

typedef struct kvs_table_ops {
  kvs_table_kind kind;
  kvs_status (*apply)(void *impl, const kvs_journal_entry *entries, const void *device_entries,
                      size_t n, kvs_error *err);
  kvs_status (*ring_ctx)(void *impl, const kvs_ring_batch *batch, kvs_ring_result *out,
                         kvs_error *err);
  kvs_status (*result_to_host)(void *impl, const kvs_ring_result *result, int64_t *own,
                               int64_t *prev, int64_t *ring, int64_t *csa_loc, int64_t *hca_loc,
                               kvs_error *err);
  kvs_status (*download)(void *impl, int64_t *mapping, size_t rows, kvs_error *err);
  kvs_status (*faults)(void *impl, kvs_device_faults *out, kvs_error *err);
  kvs_status (*sync)(void *impl, kvs_error *err);
  void (*destroy)(void *impl);
  kvs_status (*step)(void *impl, const kvs_table_step_args *args, kvs_ring_result *out,
                     void **event, kvs_table_step_timing *timing, kvs_error *err);
  kvs_status (*digest)(void *impl, uint64_t *out, kvs_error *err);
  kvs_status (*memory)(void *impl, void **base, int64_t **mapping, kvs_error *err);
  /* The host tier: its memory (pinned on a device), one chunk a call,
   * and the copies, run or queued in the order given. */
  kvs_status (*host_alloc)(void *impl, uint64_t bytes, void **out, kvs_error *err);
  void (*host_free)(void *impl, void *memory, uint64_t bytes);
  kvs_status (*copy_rows)(void *impl, const kvs_row_copy *copies, size_t n, kvs_error *err);
  /* The step's contract with an engine (kvs_table_set_results, _release,
   * _check_stream). */
  kvs_status (*set_results)(void *impl, const kvs_table_results *into, bool explicit_release,
                            kvs_error *err);
  kvs_status (*release)(void *impl, uint64_t step, void *stream, kvs_error *err);
  kvs_status (*check_stream)(void *impl, void *stream, kvs_error *err);
  /* kvs_table_rows_digest: out[i] for units[i], n >= 1, every unit's
   * rows inside the table's memory and at least one byte. */
  kvs_status (*rows_digest)(void *impl, const kvs_rows_unit *units, size_t n, uint64_t *out,
                            kvs_error *err);
} kvs_table_ops;

/* Wraps an implementation: the table owns impl from here (destroy is
 * called on failure too). */
kvs_status kvs_table_wrap(const kvs_table_ops *ops, void *impl, kvs_table_dims dims,
                          const kvs_table_limits *limits, int device, uint64_t bytes,
                          kvs_table_t *out, kvs_error *err);

/* ---- the device table, from the CUDA backend ---- */

/* cudaStreamLegacy's value (CUDA's driver_types.h; the CUDA backend
 * checks the two agree): the legacy default stream, which an engine's NULL
 * stream is. */
#define KVS_CUDA_LEGACY_STREAM ((void *)0x1)

/* How a device table orders its step against its neighbours. */
typedef struct kvs_cuda_table_options {
  size_t size;          /* sizeof(kvs_cuda_table_options) */
  void *comm_stream;    /* the communicator's cudaStream_t (device comms), or NULL */
  void *engine_stream;  /* the engine's cudaStream_t (KVS_CUDA_LEGACY_STREAM), or NULL: none */
  size_t step_capacity; /* journal entries a step message holds */
  bool graphs;          /* capture each parity's step once and replay it */
} kvs_cuda_table_options;

/* The CUDA backend's tables entry point: backends/cuda/entry.h. */

/* A table on CUDA device `device` through the CUDA backend (linked into
 * the program, else loaded: backends/registry.h), every call on `stream` (a
 * cudaStream_t of that device; NULL: a non-blocking stream of the
 * table's own). A missing backend is KVS_ERR_LIBRARY naming the file and
 * where it was looked for. */
kvs_status kvs_table_create_cuda(int device, const kvs_device_layout *layout,
                                 const kvs_table_limits *limits, void *stream, kvs_table_t *out,
                                 kvs_error *err);

/* The same for the node's step (kvs_table_step): the table runs on a
 * stream of its own, ordered against the communicator's and the
 * engine's streams as options says. */
kvs_status kvs_table_create_cuda_step(int device, const kvs_device_layout *layout,
                                      const kvs_table_limits *limits,
                                      const kvs_cuda_table_options *options, kvs_table_t *out,
                                      kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_TABLE_H */
